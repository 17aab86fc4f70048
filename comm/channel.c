/* lingbot-gst: tensor channels between worker groups
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Slots form a ring: message m lives in slot m % n_slots.  Slot i holds
 * message slot->seq (initially i); a producer rank that wants to fill
 * message m waits until its slot holds m, commits, and the message is
 * ready once every producer committed; a consumer rank receives message m
 * once it is ready, and when every consumer acked it the slot moves on to
 * message m + n_slots.  Per-rank counters let ranks of one side run ahead
 * of each other by up to n_slots messages; FIFO order falls out of the
 * ring.  One mutex and one GCond per channel; copies run outside the lock.
 *
 * Device ranks of a backend with events (CUDA) hand messages over in
 * stream order instead of synchronising the host: each slot has one event
 * per producer rank, recorded on its stream at commit after its pushes,
 * which each consumer's stream waits for at receive; and one event per
 * consumer rank, recorded at ack, which each producer's stream waits for
 * when it acquires the slot again (the next message must not overwrite
 * what a consumer's queued work still reads).  Host staging is then
 * page-locked (LbBackend.host_alloc), so the consumer's upload from it is a
 * stream-ordered DMA.  CPU ranks (no events) synchronise after each
 * transport leg, as before.
 */
#include "comm/channel-transport.h"
#include "comm/comm-private.h"

#include <stdlib.h>
#include <string.h>

typedef struct
{
  guint64 seq;
  int committed;
  int acked;
  void **prod_buf;              /* [P] on producer devices */
  void **cons_buf;              /* [Q] on consumer devices, NULL: hand-over */
  LbChannelSlotPiece *pieces;   /* [n_pieces] */
  LbEvent **ev_commit;          /* [P] on producer devices (use_events) */
  LbEvent **ev_ack;             /* [Q] on consumer devices (use_events) */
} Slot;

struct _LbChannel
{
  char *name;
  LbWorkerGroup *producer;
  LbWorkerGroup *consumer;
  LbBackend *backend;
  LbDType dtype;
  int ndim;
  int64_t shape[LB_MAX_DIMS];
  int shard_dim;
  LbChannelFlags flags;
  guint timeout_ms;
  int P, Q;
  gboolean use_events;          /* stream-ordered hand-off (file comment) */
  int64_t *prod_start, *prod_rows, *cons_start, *cons_rows;
  gsize outer;                  /* product of dims before shard_dim */
  gsize row_bytes;              /* bytes of one row of shard_dim */
  LbChannelPiece *plan;
  int n_pieces;
  int *handover_src;            /* [Q] producer rank, or -1 */

  GMutex lock;
  GCond cond;
  gboolean cancelled;
  int n_slots;
  Slot *slots;
  guint64 *send_seq;            /* [P] */
  gboolean *acquired;           /* [P] */
  guint64 *recv_seq;            /* [Q] */
  guint64 *ack_seq;             /* [Q] */
  LbChannelStats stats;
};

/* ---- transports ---- */

static LbCopyKind
copy_kind (LbDevice dst, LbDevice src)
{
  gboolean dh = dst.type == LB_DEVICE_CPU, sh = src.type == LB_DEVICE_CPU;
  if (dh && sh)
    return LB_COPY_HOST_TO_HOST;
  if (dh)
    return LB_COPY_DEVICE_TO_HOST;
  if (sh)
    return LB_COPY_HOST_TO_DEVICE;
  return LB_COPY_DEVICE_TO_DEVICE;
}

/* The copies of lb_channel_copy_runs(), enqueued on @stream (one call when
 * both sides are packed). */
static gboolean
enqueue_runs (LbStream * stream, void *dst, gsize dst_pitch,
    const void *src, gsize src_pitch, gsize run, gsize n_runs,
    LbDevice dst_device, LbDevice src_device, GError ** error)
{
  LbCopyKind kind = copy_kind (dst_device, src_device);
  LbBackend *be = stream->backend;
  if (run == 0 || n_runs == 0)
    return TRUE;
  if (dst_pitch == run && src_pitch == run)
    return be->copy (stream, dst, src, run * n_runs, kind, error);
  for (gsize i = 0; i < n_runs; i++)
    if (!be->copy (stream, (char *) dst + i * dst_pitch,
            (const char *) src + i * src_pitch, run, kind, error))
      return FALSE;
  return TRUE;
}

/**
 * lb_channel_copy_runs:
 * @stream: the calling rank's stream (its backend copies)
 * @dst: destination of the first run
 * @dst_pitch: bytes between runs at @dst
 * @src: source of the first run
 * @src_pitch: bytes between runs at @src
 * @run: bytes per run
 * @n_runs: number of runs
 * @dst_device: where @dst lives
 * @src_device: where @src lives
 * @error: the backend's copy or synchronisation error
 *
 * A strided copy (one call when both sides are packed) followed by a
 * synchronisation of @stream, for transports.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_channel_copy_runs (LbStream * stream, void *dst, gsize dst_pitch,
    const void *src, gsize src_pitch, gsize run, gsize n_runs,
    LbDevice dst_device, LbDevice src_device, GError ** error)
{
  if (run == 0 || n_runs == 0)
    return TRUE;
  return enqueue_runs (stream, dst, dst_pitch, src, src_pitch, run, n_runs,
      dst_device, src_device, error) &&
      stream->backend->stream_synchronize (stream, error);
}

/* A transport leg's copy: enqueued only when the channel orders its
 * hand-offs by events, else complete on return (lb_channel_copy_runs()). */
static gboolean
leg_copy (LbChannel * ch, LbStream * stream, void *dst, gsize dst_pitch,
    const void *src, gsize src_pitch, gsize run, gsize n_runs,
    LbDevice dst_device, LbDevice src_device, GError ** error)
{
  if (!ch->use_events)
    return lb_channel_copy_runs (stream, dst, dst_pitch, src, src_pitch,
        run, n_runs, dst_device, src_device, error);
  return enqueue_runs (stream, dst, dst_pitch, src, src_pitch, run, n_runs,
      dst_device, src_device, error);
}

static gboolean
peer_push (LbChannel * ch, LbRank * producer, LbChannelSlotPiece * sp,
    guint * n_copies, GError ** error)
{
  (*n_copies)++;
  return leg_copy (ch, producer->stream, sp->dst, sp->dst_pitch, sp->src,
      sp->src_pitch, sp->run, sp->n_runs, sp->dst_device, sp->src_device,
      error);
}

static gboolean
staged_prepare (LbChannel * ch, LbChannelSlotPiece * sp, GError ** error)
{
  /* page-locked when the hand-off is stream-ordered (file comment) */
  LbBackend *be = ch->backend;
  if (ch->use_events) {
    sp->staging = be->host_alloc (be, MAX (sp->run * sp->n_runs, 1), error);
    return sp->staging != NULL;
  }
  /* sized by the payload (a session's geometry): an error, not an abort */
  sp->staging = NULL;
  if (posix_memalign (&sp->staging, 64, MAX (sp->run * sp->n_runs, 1)) != 0) {
    sp->staging = NULL;
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "cannot allocate %" G_GSIZE_FORMAT " bytes of host staging memory",
        sp->run * sp->n_runs);
    return FALSE;
  }
  return TRUE;
}

static gboolean
staged_push (LbChannel * ch, LbRank * producer, LbChannelSlotPiece * sp,
    guint * n_copies, GError ** error)
{
  (*n_copies)++;
  return leg_copy (ch, producer->stream, sp->staging, sp->run, sp->src,
      sp->src_pitch, sp->run, sp->n_runs, LB_DEVICE_HOST, sp->src_device,
      error);
}

static gboolean
staged_pull (LbChannel * ch, LbRank * consumer, LbChannelSlotPiece * sp,
    guint * n_copies, GError ** error)
{
  (*n_copies)++;
  return leg_copy (ch, consumer->stream, sp->dst, sp->dst_pitch,
      sp->staging, sp->run, sp->run, sp->n_runs, sp->dst_device,
      LB_DEVICE_HOST, error);
}

static void
staged_release (LbChannel * ch, LbChannelSlotPiece * sp)
{
  if (sp->staging == NULL)
    return;
  if (ch->use_events)
    ch->backend->host_free (ch->backend, sp->staging);
  else
    free (sp->staging);
  sp->staging = NULL;
}

static const LbChannelTransport transport_same_device = {
  .kind = LB_TRANSPORT_SAME_DEVICE,
  .name = "same-device",
};

static const LbChannelTransport transport_peer = {
  .kind = LB_TRANSPORT_PEER,
  .name = "peer",
  .push = peer_push,
};

static const LbChannelTransport transport_host_staged = {
  .kind = LB_TRANSPORT_HOST_STAGED,
  .name = "host-staged",
  .prepare = staged_prepare,
  .push = staged_push,
  .pull = staged_pull,
  .release = staged_release,
};

static const LbChannelTransport *
transport_for (LbTransportKind kind)
{
  switch (kind) {
    case LB_TRANSPORT_SAME_DEVICE:
      return &transport_same_device;
    case LB_TRANSPORT_PEER:
      return &transport_peer;
    case LB_TRANSPORT_HOST_STAGED:
      return &transport_host_staged;
    default:
      return NULL;
  }
}

/**
 * lb_transport_kind_name:
 * @kind: a transport kind
 *
 * Returns: "same-device", "peer", "host-staged" or "ipc".
 */
const char *
lb_transport_kind_name (LbTransportKind kind)
{
  static const char *names[] = { "same-device", "peer", "host-staged", "ipc" };
  return (guint) kind < G_N_ELEMENTS (names) ? names[kind] : "?";
}

/* ---- creation ---- */

static LbDevice
rank_device (LbWorkerGroup * g, int r)
{
  LbBackend *be = lb_worker_group_get_backend (g);
  LbDevice d = { be->device_type, lb_worker_group_get_rank (g, r)->device };
  return d;
}

/* Ranks on the same device: equal ordinals (for CPU ranks, virtual ids). */
static gboolean
same_device (LbChannel * ch, int p, int q)
{
  return lb_worker_group_get_rank (ch->producer, p)->device ==
      lb_worker_group_get_rank (ch->consumer, q)->device;
}

static LbDevice
tensor_device (LbBackend * be, int ordinal)
{
  LbDevice d = { be->device_type,
    be->device_type == LB_DEVICE_CPU ? 0 : ordinal
  };
  return d;
}

static gboolean
fill_rows (const int64_t * given, int n, int64_t total, int64_t * start,
    int64_t * rows, const char *side, GError ** error)
{
  int64_t sum = 0;
  for (int i = 0; i < n; i++) {
    if (given) {
      if (given[i] < 0)
        break;
      start[i] = sum;
      rows[i] = given[i];
    } else {
      lb_split_rows (total, n, i, &start[i], &rows[i]);
    }
    sum += rows[i];
  }
  if (sum != total) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "channel: %s rows must be >= 0 and sum to %" G_GINT64_FORMAT,
        side, total);
    return FALSE;
  }
  return TRUE;
}

static void
channel_wake (gpointer data, const GError * why)
{
  LbChannel *ch = data;
  (void) why;
  g_mutex_lock (&ch->lock);
  g_cond_broadcast (&ch->cond);
  g_mutex_unlock (&ch->lock);
}

static void
slots_recycle_locked (LbChannel * ch)
{
  for (int i = 0; i < ch->n_slots; i++) {
    ch->slots[i].seq = (guint64) i;
    ch->slots[i].committed = 0;
    ch->slots[i].acked = 0;
  }
  memset (ch->send_seq, 0, sizeof (guint64) * ch->P);
  memset (ch->acquired, 0, sizeof (gboolean) * ch->P);
  memset (ch->recv_seq, 0, sizeof (guint64) * ch->Q);
  memset (ch->ack_seq, 0, sizeof (guint64) * ch->Q);
}

static gboolean
build_plan (LbChannel * ch)
{
  GArray *plan = g_array_new (FALSE, FALSE, sizeof (LbChannelPiece));
  ch->handover_src = g_new (int, ch->Q);
  for (int q = 0; q < ch->Q; q++) {
    ch->handover_src[q] = -1;
    int64_t cs = ch->cons_start[q], ce = cs + ch->cons_rows[q];
    int covering = -1, n_src = 0;
    for (int p = 0; p < ch->P; p++) {
      int64_t ps = ch->prod_start[p], pe = ps + ch->prod_rows[p];
      int64_t lo = MAX (ps, cs), hi = MIN (pe, ce);
      if (hi <= lo)
        continue;
      n_src++;
      if (lo == cs && hi == ce)
        covering = p;
    }
    gboolean handover = covering >= 0 && n_src == 1 &&
        same_device (ch, covering, q) && !(ch->flags & LB_CHANNEL_NO_HANDOVER);
    if (handover)
      ch->handover_src[q] = covering;
    for (int p = 0; p < ch->P; p++) {
      int64_t ps = ch->prod_start[p], pe = ps + ch->prod_rows[p];
      int64_t lo = MAX (ps, cs), hi = MIN (pe, ce);
      if (hi <= lo)
        continue;
      LbChannelPiece pc = { p, q, lo, hi - lo, LB_TRANSPORT_PEER };
      if (handover)
        pc.transport = LB_TRANSPORT_SAME_DEVICE;
      else if (!same_device (ch, p, q) && (ch->flags & LB_CHANNEL_NO_PEER_COPY))
        pc.transport = LB_TRANSPORT_HOST_STAGED;
      g_array_append_val (plan, pc);
    }
  }
  ch->n_pieces = plan->len;
  ch->plan = (LbChannelPiece *) g_array_free (plan, FALSE);
  return TRUE;
}

static gboolean
alloc_slot (LbChannel * ch, Slot * s, GError ** error)
{
  LbBackend *be = ch->backend;
  s->prod_buf = g_new0 (void *, ch->P);
  s->cons_buf = g_new0 (void *, ch->Q);
  s->pieces = g_new0 (LbChannelSlotPiece, ch->n_pieces);
  if (ch->use_events) {
    s->ev_commit = g_new0 (LbEvent *, ch->P);
    s->ev_ack = g_new0 (LbEvent *, ch->Q);
    for (int p = 0; p < ch->P; p++)
      if (!(s->ev_commit[p] = be->event_new (be,
                  lb_worker_group_get_rank (ch->producer, p)->device, error)))
        return FALSE;
    for (int q = 0; q < ch->Q; q++)
      if (!(s->ev_ack[q] = be->event_new (be,
                  lb_worker_group_get_rank (ch->consumer, q)->device, error)))
        return FALSE;
  }
  for (int p = 0; p < ch->P; p++) {
    gsize bytes = ch->outer * (gsize) ch->prod_rows[p] * ch->row_bytes;
    int dev = lb_worker_group_get_rank (ch->producer, p)->device;
    s->prod_buf[p] = be->alloc (be, dev, MAX (bytes, 1), error);
    if (s->prod_buf[p] == NULL)
      return FALSE;
  }
  for (int q = 0; q < ch->Q; q++) {
    if (ch->handover_src[q] >= 0)
      continue;
    gsize bytes = ch->outer * (gsize) ch->cons_rows[q] * ch->row_bytes;
    int dev = lb_worker_group_get_rank (ch->consumer, q)->device;
    s->cons_buf[q] = be->alloc (be, dev, MAX (bytes, 1), error);
    if (s->cons_buf[q] == NULL)
      return FALSE;
  }
  for (int i = 0; i < ch->n_pieces; i++) {
    const LbChannelPiece *pc = &ch->plan[i];
    LbChannelSlotPiece *sp = &s->pieces[i];
    int p = pc->src_rank, q = pc->dst_rank;
    sp->piece = pc;
    sp->src_pitch = (gsize) ch->prod_rows[p] * ch->row_bytes;
    sp->src = (char *) s->prod_buf[p] +
        (gsize) (pc->row_start - ch->prod_start[p]) * ch->row_bytes;
    if (s->cons_buf[q] != NULL) {
      sp->dst_pitch = (gsize) ch->cons_rows[q] * ch->row_bytes;
      sp->dst = (char *) s->cons_buf[q] +
          (gsize) (pc->row_start - ch->cons_start[q]) * ch->row_bytes;
    }
    sp->run = (gsize) pc->row_count * ch->row_bytes;
    sp->n_runs = ch->outer;
    sp->src_device = tensor_device (be, rank_device (ch->producer, p).index);
    sp->dst_device = tensor_device (be, rank_device (ch->consumer, q).index);
    const LbChannelTransport *t = transport_for (pc->transport);
    if (t->prepare != NULL && !t->prepare (ch, sp, error))
      return FALSE;
  }
  return TRUE;
}

/* Device ranks with events: waits until every rank stream of both groups
 * is idle, so no queued copy or read still touches slot memory about to
 * be freed or recycled (peer copies run on the producer's stream into
 * consumer memory; a cancelled consumer's reads have no ack event). */
static void
streams_idle (LbChannel * ch)
{
  LbWorkerGroup *groups[2] = { ch->producer, ch->consumer };
  if (!ch->use_events)
    return;
  for (int k = 0; k < 2; k++)
    for (int r = 0; groups[k] && r < lb_worker_group_get_n_ranks (groups[k]);
        r++) {
      LbStream *st = lb_worker_group_get_rank (groups[k], r)->stream;
      if (st)
        st->backend->stream_synchronize (st, NULL);
    }
}

static void
free_slot (LbChannel * ch, Slot * s)
{
  LbBackend *be = ch->backend;
  if (s->pieces != NULL) {
    for (int i = 0; i < ch->n_pieces; i++) {
      const LbChannelTransport *t = transport_for (ch->plan[i].transport);
      if (t->release != NULL)
        t->release (ch, &s->pieces[i]);
    }
  }
  for (int p = 0; s->prod_buf && p < ch->P; p++) {
    if (s->prod_buf[p] != NULL)
      be->free (be, lb_worker_group_get_rank (ch->producer, p)->device,
          s->prod_buf[p]);
  }
  for (int q = 0; s->cons_buf && q < ch->Q; q++) {
    if (s->cons_buf[q] != NULL)
      be->free (be, lb_worker_group_get_rank (ch->consumer, q)->device,
          s->cons_buf[q]);
  }
  for (int p = 0; s->ev_commit && p < ch->P; p++)
    if (s->ev_commit[p])
      be->event_free (be, s->ev_commit[p]);
  for (int q = 0; s->ev_ack && q < ch->Q; q++)
    if (s->ev_ack[q])
      be->event_free (be, s->ev_ack[q]);
  g_free (s->ev_commit);
  g_free (s->ev_ack);
  g_free (s->prod_buf);
  g_free (s->cons_buf);
  g_free (s->pieces);
}

/**
 * lb_channel_new:
 * @config: groups, payload geometry, row splits, slot count, flags
 * @error: %LB_ERROR_INVALID_ARGUMENT or %LB_ERROR_SHAPE for a bad config,
 *   %LB_ERROR_UNSUPPORTED when the groups use different backends,
 *   %LB_ERROR_DEVICE when slot memory cannot be allocated
 *
 * Allocates every slot's buffers once (producer bands on producer devices,
 * consumer bands on consumer devices unless handed over, host staging for
 * host-staged pieces) and computes the plan: which rows go from which
 * producer rank to which consumer rank, and by which transport
 * (DESIGN.md section 3).  Called by the orchestrating thread.
 *
 * Returns: (transfer full) (nullable): the channel; lb_channel_free().
 */
LbChannel *
lb_channel_new (const LbChannelConfig * config, GError ** error)
{
  const LbChannelConfig *c = config;
  if (c == NULL || c->producer == NULL || c->consumer == NULL ||
      c->ndim < 1 || c->ndim > LB_MAX_DIMS || c->shard_dim < 0 ||
      c->shard_dim >= c->ndim || c->n_slots < 1 ||
      (guint) c->dtype >= LB_DTYPE_COUNT) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "channel: needs producer and consumer groups, 1..%d dims, a shard "
        "dim inside them, a valid dtype and at least one slot", LB_MAX_DIMS);
    return NULL;
  }
  for (int i = 0; i < c->ndim; i++) {
    if (c->shape[i] < 0) {
      g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
          "channel: negative extent in dim %d", i);
      return NULL;
    }
  }
  LbBackend *be = lb_worker_group_get_backend (c->producer);
  if (be != lb_worker_group_get_backend (c->consumer)) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "channel: producer (%s) and consumer (%s) groups must share a "
        "backend", be->name, lb_worker_group_get_backend (c->consumer)->name);
    return NULL;
  }

  LbChannel *ch = g_new0 (LbChannel, 1);
  ch->name = g_strdup (c->name ? c->name : "channel");
  ch->producer = lb_worker_group_ref (c->producer);
  ch->consumer = lb_worker_group_ref (c->consumer);
  ch->backend = be;
  ch->dtype = c->dtype;
  ch->ndim = c->ndim;
  memcpy (ch->shape, c->shape, sizeof ch->shape);
  ch->shard_dim = c->shard_dim;
  ch->flags = c->flags;
  ch->timeout_ms = c->timeout_ms;
  ch->P = lb_worker_group_get_n_ranks (c->producer);
  ch->Q = lb_worker_group_get_n_ranks (c->consumer);
  ch->n_slots = c->n_slots;
  ch->use_events = be->device_type != LB_DEVICE_CPU &&
      be->event_new != NULL && be->event_free != NULL &&
      be->event_record != NULL && be->stream_wait_event != NULL &&
      be->host_alloc != NULL && be->host_free != NULL;
  g_mutex_init (&ch->lock);
  g_cond_init (&ch->cond);

  ch->outer = 1;
  for (int i = 0; i < c->shard_dim; i++)
    ch->outer *= (gsize) c->shape[i];
  ch->row_bytes = lb_dtype_size (c->dtype);
  for (int i = c->shard_dim + 1; i < c->ndim; i++)
    ch->row_bytes *= (gsize) c->shape[i];

  ch->prod_start = g_new0 (int64_t, ch->P);
  ch->prod_rows = g_new0 (int64_t, ch->P);
  ch->cons_start = g_new0 (int64_t, ch->Q);
  ch->cons_rows = g_new0 (int64_t, ch->Q);
  ch->send_seq = g_new0 (guint64, ch->P);
  ch->acquired = g_new0 (gboolean, ch->P);
  ch->recv_seq = g_new0 (guint64, ch->Q);
  ch->ack_seq = g_new0 (guint64, ch->Q);
  ch->slots = g_new0 (Slot, ch->n_slots);

  int64_t total = c->shape[c->shard_dim];
  if (!fill_rows (c->producer_rows, ch->P, total, ch->prod_start,
          ch->prod_rows, "producer", error) ||
      !fill_rows (c->consumer_rows, ch->Q, total, ch->cons_start,
          ch->cons_rows, "consumer", error) || !build_plan (ch)) {
    lb_channel_free (ch);
    return NULL;
  }
  for (int i = 0; i < ch->n_slots; i++) {
    if (!alloc_slot (ch, &ch->slots[i], error)) {
      g_prefix_error (error, "channel %s: ", ch->name);
      lb_channel_free (ch);
      return NULL;
    }
  }
  slots_recycle_locked (ch);
  lb_worker_group_add_abort_notify (ch->producer, channel_wake, ch);
  if (ch->consumer != ch->producer)
    lb_worker_group_add_abort_notify (ch->consumer, channel_wake, ch);
  return ch;
}

/**
 * lb_channel_free:
 * @channel: (transfer full) (nullable): a channel
 *
 * Frees the slots and drops the group references.  No rank may be inside
 * a call on @channel (cancel it and wait for the jobs first).  On device
 * ranks it first waits until the ranks' streams are idle (a peer copy
 * still queued on a producer's stream may be writing a consumer's slot).
 */
void
lb_channel_free (LbChannel * channel)
{
  LbChannel *ch = channel;
  if (ch == NULL)
    return;
  lb_worker_group_remove_abort_notify (ch->producer, ch);
  if (ch->consumer != ch->producer)
    lb_worker_group_remove_abort_notify (ch->consumer, ch);
  if (ch->slots)
    streams_idle (ch);
  for (int i = 0; ch->slots && i < ch->n_slots; i++)
    free_slot (ch, &ch->slots[i]);
  g_free (ch->slots);
  g_free (ch->plan);
  g_free (ch->handover_src);
  g_free (ch->prod_start);
  g_free (ch->prod_rows);
  g_free (ch->cons_start);
  g_free (ch->cons_rows);
  g_free (ch->send_seq);
  g_free (ch->acquired);
  g_free (ch->recv_seq);
  g_free (ch->ack_seq);
  lb_worker_group_unref (ch->producer);
  lb_worker_group_unref (ch->consumer);
  g_cond_clear (&ch->cond);
  g_mutex_clear (&ch->lock);
  g_free (ch->name);
  g_free (ch);
}

/* ---- waiting ---- */

static gboolean
check_role (LbChannel * ch, LbRank * rank, gboolean producer,
    const char *what, GError ** error)
{
  LbWorkerGroup *want = producer ? ch->producer : ch->consumer;
  if (rank == NULL || rank->group != want) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "channel %s: %s must be called by a rank of the %s group", ch->name,
        what, producer ? "producer" : "consumer");
    return FALSE;
  }
  return TRUE;
}

static gboolean
cancelled_error (LbChannel * ch, GError ** error)
{
  g_set_error (error, LB_ERROR, LB_ERROR_CANCELLED,
      "channel %s was cancelled", ch->name);
  return FALSE;
}

/* Releases ch->lock and sets an %LB_ERROR_INVALID_ARGUMENT error for a
 * call out of order: "channel NAME: " and @format.  Returns %FALSE. */
static gboolean
G_GNUC_PRINTF (3, 4)
unlock_misuse (LbChannel * ch, GError ** error, const char *format, ...)
{
  g_mutex_unlock (&ch->lock);
  va_list args;
  va_start (args, format);
  g_autofree char *msg = g_strdup_vprintf (format, args);
  va_end (args);
  g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT, "channel %s: %s",
      ch->name, msg);
  return FALSE;
}

/* check_role(), then takes ch->lock; %FALSE (lock released) when the
 * channel is cancelled.  On %TRUE the caller holds ch->lock. */
static gboolean
lock_uncancelled (LbChannel * ch, LbRank * rank, gboolean producer,
    const char *what, GError ** error)
{
  if (!check_role (ch, rank, producer, what, error))
    return FALSE;
  g_mutex_lock (&ch->lock);
  if (ch->cancelled) {
    g_mutex_unlock (&ch->lock);
    return cancelled_error (ch, error);
  }
  return TRUE;
}

/* Runs the producer's (@producer) push legs or the consumer's pull legs of
 * @rank's pieces of slot @s, adding the copies made to @copies and the
 * bytes moved to @bytes (a peer piece counts at its push, the others at
 * their pull). */
static gboolean
move_pieces (LbChannel * ch, LbRank * rank, Slot * s, gboolean producer,
    guint64 * bytes, guint * copies, GError ** error)
{
  for (int i = 0; i < ch->n_pieces; i++) {
    LbChannelSlotPiece *sp = &s->pieces[i];
    if ((producer ? sp->piece->src_rank : sp->piece->dst_rank) != rank->rank)
      continue;
    const LbChannelTransport *t = transport_for (sp->piece->transport);
    gboolean (*leg) (LbChannel * channel, LbRank * r, LbChannelSlotPiece * sp,
        guint * n_copies, GError ** error) = producer ? t->push : t->pull;
    if (leg != NULL && !leg (ch, rank, sp, &copies[t->kind], error)) {
      g_prefix_error (error, "channel %s: %s %s: ", ch->name, t->name,
          producer ? "push" : "pull");
      return FALSE;
    }
    if ((t->kind == LB_TRANSPORT_PEER) == producer)
      bytes[t->kind] += sp->run * sp->n_runs;
  }
  return TRUE;
}

/* Adds what one commit or receive moved to the channel's stats; the
 * caller holds ch->lock. */
static void
add_stats_locked (LbChannel * ch, const guint64 * bytes, const guint * copies)
{
  for (int k = 0; k < LB_TRANSPORT_COUNT; k++) {
    ch->stats.bytes[k] += bytes[k];
    ch->stats.copies[k] += copies[k];
  }
}

typedef gboolean (*ReadyFunc) (LbChannel * ch, Slot * s, guint64 seq);

static gboolean
slot_free_for (LbChannel * ch, Slot * s, guint64 seq)
{
  return s->seq == seq;
}

static gboolean
slot_ready_for (LbChannel * ch, Slot * s, guint64 seq)
{
  return s->seq == seq && s->committed == ch->P;
}

/* ch->lock held; waits for ready(slot, seq), cancel, abort or timeout. */
static gboolean
wait_slot_locked (LbChannel * ch, LbRank * rank, Slot * s, guint64 seq,
    ReadyFunc ready, const char *what, GError ** error)
{
  if (ready (ch, s, seq))
    return TRUE;
  guint timeout = ch->timeout_ms ? ch->timeout_ms :
      lb_worker_group_get_timeout_ms (rank->group);
  gint64 t0 = g_get_monotonic_time ();
  gint64 deadline = t0 + (gint64) timeout * 1000;
  gboolean ok = TRUE;
  while (!ready (ch, s, seq)) {
    if (ch->cancelled) {
      ok = cancelled_error (ch, error);
      break;
    }
    if (!lb_rank_check_abort (rank, error)) {
      ok = FALSE;
      break;
    }
    if (!g_cond_wait_until (&ch->cond, &ch->lock, deadline) &&
        !ready (ch, s, seq) && !ch->cancelled) {
      g_set_error (error, LB_ERROR, LB_ERROR_TIMEOUT,
          "channel %s: %s on rank %d: no progress within %u ms", ch->name,
          what, rank->rank, timeout);
      ok = FALSE;
      break;
    }
  }
  ch->stats.waits++;
  ch->stats.wait_us += g_get_monotonic_time () - t0;
  return ok;
}

/* ch->lock held: the slot of message @seq once ready() for it
 * (wait_slot_locked()); %NULL with ch->lock released on failure. */
static Slot *
wait_slot (LbChannel * ch, LbRank * rank, guint64 seq, ReadyFunc ready,
    const char *what, GError ** error)
{
  Slot *s = &ch->slots[seq % ch->n_slots];
  if (wait_slot_locked (ch, rank, s, seq, ready, what, error))
    return s;
  g_mutex_unlock (&ch->lock);
  return NULL;
}

/* Device ranks with events: makes @rank's stream wait for the @n events
 * @ev (nothing to do otherwise). */
static gboolean
wait_events (LbChannel * ch, LbRank * rank, LbEvent ** ev, int n,
    const char *what, GError ** error)
{
  for (int i = 0; ch->use_events && i < n; i++) {
    if (!ch->backend->stream_wait_event (rank->stream, ev[i], error)) {
      g_prefix_error (error, "channel %s: %s: ", ch->name, what);
      return FALSE;
    }
  }
  return TRUE;
}

/* Device ranks with events: records event @ev[@i] on @rank's stream
 * (nothing to do otherwise). */
static gboolean
record_event (LbChannel * ch, LbRank * rank, LbEvent ** ev, int i,
    const char *what, GError ** error)
{
  if (!ch->use_events || ch->backend->event_record (rank->stream, ev[i], error))
    return TRUE;
  g_prefix_error (error, "channel %s: %s: ", ch->name, what);
  return FALSE;
}

/* Producer rank @p gives up the slot it acquired (nothing committed). */
static void
drop_acquired (LbChannel * ch, int p)
{
  g_mutex_lock (&ch->lock);
  ch->acquired[p] = FALSE;
  g_mutex_unlock (&ch->lock);
}

/* ---- producer side ---- */

static void
shard_view (LbChannel * ch, LbTensor * out, void *data, int64_t rows,
    int ordinal)
{
  int64_t shape[LB_MAX_DIMS];
  memcpy (shape, ch->shape, sizeof shape);
  shape[ch->shard_dim] = rows;
  lb_tensor_view_init (out, ch->dtype, data,
      tensor_device (ch->backend, ordinal), ch->ndim, shape, NULL);
}

/**
 * lb_channel_acquire:
 * @channel: a channel
 * @rank: the calling producer rank
 * @shard: (out caller-allocates): a contiguous view of this rank's band of
 *   the next message, on its device: the full shape with
 *   shape[shard_dim] = this rank's rows.  Write the payload into it.
 * @error: %LB_ERROR_CANCELLED, %LB_ERROR_RANK_FAILED, %LB_ERROR_TIMEOUT,
 *   %LB_ERROR_INVALID_ARGUMENT (not a producer rank, or already acquired)
 *
 * Blocks while every slot is in flight (slot exhaustion: the pool is the
 * back-pressure between producer and consumer) until a consumer ack frees
 * the next slot in ring order.  Follow with lb_channel_commit().
 *
 * Returns: %TRUE when @shard is valid.
 */
gboolean
lb_channel_acquire (LbChannel * channel, LbRank * rank, LbTensor * shard,
    GError ** error)
{
  LbChannel *ch = channel;
  if (!lock_uncancelled (ch, rank, TRUE, "acquire", error))
    return FALSE;
  int p = rank->rank;
  if (ch->acquired[p])
    return unlock_misuse (ch, error,
        "producer rank %d acquired twice without commit", p);
  Slot *s = wait_slot (ch, rank, ch->send_seq[p], slot_free_for, "acquire",
      error);
  if (s == NULL)
    return FALSE;
  ch->acquired[p] = TRUE;
  void *buf = s->prod_buf[p];
  g_mutex_unlock (&ch->lock);
  /* the slot's previous message: every consumer's queued reads first */
  if (!wait_events (ch, rank, s->ev_ack, ch->Q, "acquire", error)) {
    drop_acquired (ch, p);
    return FALSE;
  }
  shard_view (ch, shard, buf, ch->prod_rows[p], rank->device);
  return TRUE;
}

/**
 * lb_channel_commit:
 * @channel: a channel
 * @rank: the producer rank that acquired
 * @error: %LB_ERROR_CANCELLED (the message is dropped),
 *   %LB_ERROR_INVALID_ARGUMENT without an acquire, a transport's error
 *
 * Moves this rank's pieces toward their consumers (peer copy into the
 * consumer's slot buffer, or into host staging; nothing for a hand-over),
 * synchronised on this rank's stream, then marks its band committed.  The
 * message becomes receivable when every producer rank committed.  On
 * device ranks with events nothing is synchronised: the pushes are
 * enqueued and the slot's commit event is recorded on this rank's stream
 * after them, so whatever the rank enqueued there before (the kernels that
 * filled the band) is what the consumers see.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_channel_commit (LbChannel * channel, LbRank * rank, GError ** error)
{
  LbChannel *ch = channel;
  /* a cancel clears every acquire: commit then reports the cancel */
  if (!lock_uncancelled (ch, rank, TRUE, "commit", error))
    return FALSE;
  int p = rank->rank;
  if (!ch->acquired[p])
    return unlock_misuse (ch, error,
        "commit without acquire on producer rank %d", p);
  Slot *s = &ch->slots[ch->send_seq[p] % ch->n_slots];
  g_mutex_unlock (&ch->lock);

  guint64 bytes[LB_TRANSPORT_COUNT] = { 0 };
  guint copies[LB_TRANSPORT_COUNT] = { 0 };
  if (!move_pieces (ch, rank, s, TRUE, bytes, copies, error))
    return FALSE;
  if (!record_event (ch, rank, s->ev_commit, p, "commit", error))
    return FALSE;

  g_mutex_lock (&ch->lock);
  if (ch->cancelled || !ch->acquired[p]) {
    g_mutex_unlock (&ch->lock);
    return cancelled_error (ch, error);
  }
  add_stats_locked (ch, bytes, copies);
  ch->acquired[p] = FALSE;
  ch->send_seq[p]++;
  if (++s->committed == ch->P) {
    ch->stats.messages_sent++;
    g_cond_broadcast (&ch->cond);
  }
  g_mutex_unlock (&ch->lock);
  return TRUE;
}

/**
 * lb_channel_send:
 * @channel: a channel
 * @rank: the calling producer rank
 * @shard: this rank's band (shape as lb_channel_acquire() gives), on its
 *   device, any strides
 * @error: as lb_channel_acquire() and lb_channel_commit(); %LB_ERROR_SHAPE
 *
 * lb_channel_acquire() + copy @shard into the slot + lb_channel_commit(),
 * for producers that cannot write into the slot directly.  The fill copy
 * is counted in #LbChannelStats.fill_bytes.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_channel_send (LbChannel * channel, LbRank * rank, const LbTensor * shard,
    GError ** error)
{
  LbTensor dst;
  if (!lb_channel_acquire (channel, rank, &dst, error))
    return FALSE;
  gboolean ok;
  if (shard->dtype != dst.dtype || !lb_tensor_same_shape (shard, &dst)) {
    g_autofree char *a = lb_tensor_shape_string (shard);
    g_autofree char *b = lb_tensor_shape_string (&dst);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "channel %s: rank %d sends %s %s, its band is %s %s",
        channel->name, rank->rank, lb_dtype_name (shard->dtype), a,
        lb_dtype_name (dst.dtype), b);
    ok = FALSE;
  } else if (lb_tensor_is_contiguous (shard)) {
    ok = leg_copy (channel, rank->stream, dst.data, 0, shard->data, 0,
        lb_tensor_nbytes (&dst), 1, dst.device, shard->device, error);
    /* a host shard (page-locked memory is read by the DMA, later) may be
     * refilled by the caller as soon as this returns */
    if (ok && channel->use_events && shard->device.type == LB_DEVICE_CPU)
      ok = rank->stream->backend->stream_synchronize (rank->stream, error);
  } else if (dst.device.type == LB_DEVICE_CPU) {
    ok = lb_tensor_copy_into (&dst, shard, error);
  } else {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "channel %s: send of a strided device tensor; write into the slot "
        "with lb_channel_acquire() instead", channel->name);
    ok = FALSE;
  }
  if (!ok) {
    /* Give the slot back: commit what is there is wrong, so drop it. */
    drop_acquired (channel, rank->rank);
    return FALSE;
  }
  g_mutex_lock (&channel->lock);
  channel->stats.fill_bytes += lb_tensor_nbytes (&dst);
  g_mutex_unlock (&channel->lock);
  return lb_channel_commit (channel, rank, error);
}

/* ---- consumer side ---- */

/**
 * lb_channel_receive:
 * @channel: a channel
 * @rank: the calling consumer rank
 * @shard: (out caller-allocates): a view of this rank's band of the next
 *   message on its device: the full shape with shape[shard_dim] = this
 *   rank's rows.  Contiguous, except for a hand-over of a band strictly
 *   inside a producer's band when shard_dim is not the outermost dim.
 *   Valid until lb_channel_ack(); read-only.
 * @error: %LB_ERROR_CANCELLED, %LB_ERROR_RANK_FAILED, %LB_ERROR_TIMEOUT,
 *   a transport's error
 *
 * Waits until every producer rank committed the next message, in send
 * order (message m is received before m + 1, on every consumer rank), then
 * finishes its transports (host-staged pieces are copied in here).  On
 * device ranks with events this rank's stream is made to wait for the
 * producers' commit events instead of the host: work the caller enqueues
 * on rank->stream afterwards sees the message; host code must synchronise
 * that stream before reading the band's memory itself.
 *
 * Returns: %TRUE when @shard is valid.
 */
gboolean
lb_channel_receive (LbChannel * channel, LbRank * rank, LbTensor * shard,
    GError ** error)
{
  LbChannel *ch = channel;
  if (!lock_uncancelled (ch, rank, FALSE, "receive", error))
    return FALSE;
  int q = rank->rank;
  Slot *s = wait_slot (ch, rank, ch->recv_seq[q], slot_ready_for, "receive",
      error);
  if (s == NULL)
    return FALSE;
  ch->recv_seq[q]++;
  g_mutex_unlock (&ch->lock);
  /* every producer's writes and pushes of this message (only those whose
   * pieces reach this rank matter; waiting for all P keeps it simple and
   * costs nothing on the device) */
  if (!wait_events (ch, rank, s->ev_commit, ch->P, "receive", error))
    return FALSE;

  guint64 bytes[LB_TRANSPORT_COUNT] = { 0 };
  guint copies[LB_TRANSPORT_COUNT] = { 0 };
  if (!move_pieces (ch, rank, s, FALSE, bytes, copies, error))
    return FALSE;

  int src = ch->handover_src[q];
  if (src >= 0) {
    LbTensor whole;
    shard_view (ch, &whole, s->prod_buf[src], ch->prod_rows[src], rank->device);
    lb_tensor_view_narrow (shard, &whole, ch->shard_dim,
        ch->cons_start[q] - ch->prod_start[src], ch->cons_rows[q]);
  } else {
    shard_view (ch, shard, s->cons_buf[q], ch->cons_rows[q], rank->device);
  }

  g_mutex_lock (&ch->lock);
  add_stats_locked (ch, bytes, copies);
  ch->stats.messages_received++;
  gboolean cancelled = ch->cancelled;
  g_mutex_unlock (&ch->lock);
  if (cancelled)
    return cancelled_error (ch, error);
  return TRUE;
}

/**
 * lb_channel_ack:
 * @channel: a channel
 * @rank: the consumer rank that received
 * @error: %LB_ERROR_CANCELLED after a cancel (nothing to give back: the
 *   cancel recycled the slot), %LB_ERROR_INVALID_ARGUMENT with nothing
 *   received
 *
 * Gives this rank's oldest received message back; once every consumer
 * rank acked it, its slot returns to the pool and a blocked producer
 * proceeds.  The view from lb_channel_receive() is invalid afterwards.
 * On device ranks with events the slot's ack event is recorded on this
 * rank's stream, and the producer's next acquire of the slot makes its
 * stream wait for it: reads of the band enqueued on rank->stream before
 * the ack finish before the slot is overwritten.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_channel_ack (LbChannel * channel, LbRank * rank, GError ** error)
{
  LbChannel *ch = channel;
  if (!lock_uncancelled (ch, rank, FALSE, "ack", error))
    return FALSE;
  int q = rank->rank;
  if (ch->ack_seq[q] >= ch->recv_seq[q])
    return unlock_misuse (ch, error,
        "consumer rank %d acks with nothing received", q);
  Slot *s = &ch->slots[ch->ack_seq[q] % ch->n_slots];
  if (!record_event (ch, rank, s->ev_ack, q, "ack", error)) {
    g_mutex_unlock (&ch->lock);
    return FALSE;
  }
  ch->ack_seq[q]++;
  if (++s->acked == ch->Q) {
    s->seq += (guint64) ch->n_slots;
    s->committed = 0;
    s->acked = 0;
    g_cond_broadcast (&ch->cond);
  }
  g_mutex_unlock (&ch->lock);
  return TRUE;
}

/* ---- cancellation ---- */

/* Enters (counting a cancel) or leaves the cancelled state; either way the
 * slots go back to the pool and every waiter wakes up. */
static void
set_cancelled (LbChannel * ch, gboolean cancelled)
{
  g_mutex_lock (&ch->lock);
  if (cancelled && !ch->cancelled)
    ch->stats.cancels++;
  ch->cancelled = cancelled;
  slots_recycle_locked (ch);
  g_cond_broadcast (&ch->cond);
  g_mutex_unlock (&ch->lock);
}

/**
 * lb_channel_cancel:
 * @channel: a channel
 *
 * Flush or session end: every rank blocked in acquire or receive returns
 * %LB_ERROR_CANCELLED at once, every later call too, and every slot in
 * flight goes back to the pool (their content is dropped; views handed out
 * must not be used any more).  Callable from any thread; idempotent.
 * lb_channel_reset() makes the channel usable again.
 */
void
lb_channel_cancel (LbChannel * channel)
{
  set_cancelled (channel, TRUE);
}

/**
 * lb_channel_reset:
 * @channel: a cancelled (or idle) channel
 * @error: currently never set
 *
 * Clears the cancelled state: the next message is message 0 of an empty
 * pool.  Call it from the orchestrating thread once no rank is inside a
 * call on @channel (after waiting for the jobs that used it).  On device
 * ranks it first waits until the ranks' streams are idle, so no queued
 * work of a dropped message still touches the slots.
 *
 * Returns: %TRUE.
 */
gboolean
lb_channel_reset (LbChannel * channel, GError ** error)
{
  streams_idle (channel);
  set_cancelled (channel, FALSE);
  return TRUE;
}

/**
 * lb_channel_is_cancelled:
 * @channel: a channel
 *
 * Returns: %TRUE between lb_channel_cancel() and lb_channel_reset().
 */
gboolean
lb_channel_is_cancelled (LbChannel * channel)
{
  g_mutex_lock (&channel->lock);
  gboolean c = channel->cancelled;
  g_mutex_unlock (&channel->lock);
  return c;
}

/* ---- introspection ---- */

/**
 * lb_channel_get_plan:
 * @channel: a channel
 * @n_pieces: (out): number of pieces
 *
 * Returns: (transfer none) (array length=n_pieces): the plan, ordered by
 * consumer rank then producer rank.
 */
const LbChannelPiece *
lb_channel_get_plan (LbChannel * channel, int *n_pieces)
{
  *n_pieces = channel->n_pieces;
  return channel->plan;
}

/**
 * lb_channel_get_n_slots:
 * @channel: a channel
 *
 * Returns: the slot pool size.
 */
int
lb_channel_get_n_slots (LbChannel * channel)
{
  return channel->n_slots;
}

/**
 * lb_channel_get_stats:
 * @channel: a channel
 * @stats: (out caller-allocates): the counters since creation or
 *   lb_channel_clear_stats()
 *
 * For benchmarks and metrics; cheap, callable from any thread.
 */
void
lb_channel_get_stats (LbChannel * channel, LbChannelStats * stats)
{
  g_mutex_lock (&channel->lock);
  *stats = channel->stats;
  g_mutex_unlock (&channel->lock);
}

/**
 * lb_channel_clear_stats:
 * @channel: a channel
 *
 * Zeroes the counters.
 */
void
lb_channel_clear_stats (LbChannel * channel)
{
  g_mutex_lock (&channel->lock);
  memset (&channel->stats, 0, sizeof channel->stats);
  g_mutex_unlock (&channel->lock);
}

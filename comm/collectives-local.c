/* lingbot-gst: "local" collectives (ranks are threads of one process)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Pull model: every rank records its operation (buffer pointers, counts)
 * in its own op list, which peers read after a barrier; each rank then
 * writes only its own receive buffer, copying from its peers' send buffers,
 * and a final barrier keeps every send buffer alive until all peers are
 * done.  A group of operations is recorded first and run with one publish
 * barrier, one barrier between the two phases of an all-reduce (only when
 * there is one) and one final barrier.  Point-to-point messages go through
 * per-(src, dst) mailboxes and never touch the group-wide barrier, so two
 * ranks can exchange halos while the others do something else.
 *
 * On the CPU backend bytes move with memcpy.  On another backend (a
 * fallback when no NCCL class is registered) they move with the backend's
 * device-to-device copy on the calling rank's stream, synchronised before
 * each barrier; reductions then report %LB_ERROR_UNSUPPORTED.
 */
#include "comm/comm-private.h"

#include <string.h>

typedef enum
{
  OP_A2A,
  OP_A2AV,
  OP_AG,
  OP_AGV,
  OP_RS,
  OP_AR,
  OP_BCAST,
} OpKind;

typedef struct
{
  OpKind kind;
  LbDType dtype;
  gsize esize;
  const void *send;
  void *recv;
  gsize count;
  const gsize *scounts, *sdispls, *rcounts, *rdispls;
  int root;
  void *scratch;                /* OP_AR: this rank's reduced slice */
} LocalOp;

typedef struct
{
  int peer;
  gboolean is_send;
  const void *sbuf;
  void *rbuf;
  gsize bytes;
  guint64 seq;
} LocalP2P;

typedef struct
{
  void *data;
  gsize size;
} Scratch;

typedef struct
{
  GArray *ops;                  /* LocalOp; storage reused across calls */
  GArray *p2p;                  /* LocalP2P */
  GArray *scratch;              /* Scratch, indexed like ops */
  guint64 *recv_seq;            /* next message index from each peer */
  int depth;
} LocalRank;

typedef struct
{
  const void *buf;
  gsize bytes;
} Post;

typedef struct
{
  GArray *posts;                /* Post; posts[i] is message base + i */
  guint64 base;
  guint64 consumed;
} Mailbox;

typedef struct
{
  LbWorkerGroup *group;
  int n;
  gboolean host;
  GMutex lock;
  GCond cond;
  int barrier_count;
  guint64 barrier_gen;
  guint64 barrier_in;           /* ranks at the barrier now, bit per rank */
  LocalRank *ranks;
  Mailbox *mb;                  /* [src * n + dst] */
} LocalComm;

static gpointer
local_create (LbWorkerGroup * group, GError ** error)
{
  LocalComm *c = g_new0 (LocalComm, 1);
  c->group = group;
  c->n = lb_worker_group_get_n_ranks (group);
  c->host = lb_worker_group_get_backend (group)->device_type == LB_DEVICE_CPU;
  g_mutex_init (&c->lock);
  g_cond_init (&c->cond);
  c->ranks = g_new0 (LocalRank, c->n);
  for (int i = 0; i < c->n; i++) {
    c->ranks[i].ops = g_array_sized_new (FALSE, TRUE, sizeof (LocalOp), 8);
    c->ranks[i].p2p = g_array_sized_new (FALSE, TRUE, sizeof (LocalP2P), 8);
    c->ranks[i].scratch = g_array_new (FALSE, TRUE, sizeof (Scratch));
    c->ranks[i].recv_seq = g_new0 (guint64, c->n);
  }
  c->mb = g_new0 (Mailbox, (gsize) c->n * c->n);
  for (int i = 0; i < c->n * c->n; i++)
    c->mb[i].posts = g_array_sized_new (FALSE, TRUE, sizeof (Post), 4);
  return c;
}

static void
local_destroy (gpointer state)
{
  LocalComm *c = state;
  for (int i = 0; i < c->n; i++) {
    LocalRank *lr = &c->ranks[i];
    for (guint k = 0; k < lr->scratch->len; k++)
      g_free (g_array_index (lr->scratch, Scratch, k).data);
    g_array_unref (lr->scratch);
    g_array_unref (lr->ops);
    g_array_unref (lr->p2p);
    g_free (lr->recv_seq);
  }
  for (int i = 0; i < c->n * c->n; i++)
    g_array_unref (c->mb[i].posts);
  g_free (c->mb);
  g_free (c->ranks);
  g_cond_clear (&c->cond);
  g_mutex_clear (&c->lock);
  g_free (c);
}

static gboolean
local_reset (gpointer state, GError ** error)
{
  LocalComm *c = state;
  g_mutex_lock (&c->lock);
  c->barrier_count = 0;
  c->barrier_gen++;
  c->barrier_in = 0;
  for (int i = 0; i < c->n; i++) {
    LocalRank *lr = &c->ranks[i];
    g_array_set_size (lr->ops, 0);
    g_array_set_size (lr->p2p, 0);
    memset (lr->recv_seq, 0, sizeof (guint64) * c->n);
    lr->depth = 0;
  }
  for (int i = 0; i < c->n * c->n; i++) {
    g_array_set_size (c->mb[i].posts, 0);
    c->mb[i].base = 0;
    c->mb[i].consumed = 0;
  }
  g_cond_broadcast (&c->cond);
  g_mutex_unlock (&c->lock);
  return TRUE;
}

static void
local_abort (gpointer state)
{
  LocalComm *c = state;
  g_mutex_lock (&c->lock);
  g_cond_broadcast (&c->cond);
  g_mutex_unlock (&c->lock);
}

/* c->lock held.  Waits until *gen moves on; FALSE on abort or timeout. */
static gboolean
wait_locked (LocalComm * c, LbRank * rank, gint64 deadline,
    gboolean (*done) (LocalComm *, gconstpointer), gconstpointer arg,
    const char *what, GError ** error)
{
  while (!done (c, arg)) {
    if (!lb_rank_check_abort (rank, error))
      return FALSE;
    if (!g_cond_wait_until (&c->cond, &c->lock, deadline) && !done (c, arg)) {
      if (!lb_rank_check_abort (rank, error))
        return FALSE;
      return lb_comm_set_timeout_error (rank, what, error);
    }
  }
  return TRUE;
}

static gboolean
barrier_passed (LocalComm * c, gconstpointer arg)
{
  return c->barrier_gen != *(const guint64 *) arg;
}

static gboolean
barrier_wait (LocalComm * c, LbRank * rank, const char *what, GError ** error)
{
  if (c->n == 1)
    return lb_rank_check_abort (rank, error);
  gint64 deadline = lb_rank_deadline (rank);
  g_mutex_lock (&c->lock);
  if (!lb_rank_check_abort (rank, error)) {
    g_mutex_unlock (&c->lock);
    return FALSE;
  }
  guint64 gen = c->barrier_gen;
  gboolean ok = TRUE;
  if (++c->barrier_count == c->n) {
    c->barrier_count = 0;
    c->barrier_in = 0;
    c->barrier_gen++;
    g_cond_broadcast (&c->cond);
  } else {
    GError *local = NULL;
    c->barrier_in |= G_GUINT64_CONSTANT (1) << rank->rank;
    ok = wait_locked (c, rank, deadline, barrier_passed, &gen, what, &local);
    if (!ok && g_error_matches (local, LB_ERROR, LB_ERROR_TIMEOUT)) {
      /* name the ranks that never came: the ones that stopped answering */
      GString *late = g_string_new (NULL);
      int n_late = 0;
      for (int r = 0; r < c->n; r++)
        if (!(c->barrier_in & (G_GUINT64_CONSTANT (1) << r)))
          g_string_append_printf (late, "%s%d", n_late++ ? ", " : "", r);
      char *m = g_strdup_printf ("%s, waiting for rank%s %s", local->message,
          n_late > 1 ? "s" : "", late->str);
      g_string_free (late, TRUE);
      g_free (local->message);
      local->message = m;
    }
    if (local != NULL)
      g_propagate_error (error, local);
  }
  g_mutex_unlock (&c->lock);
  return ok;
}

/* ---- byte movement and reductions ---- */

/* One copy of @bytes on the rank's stream. */
static gboolean
move (LocalComm * c, LbRank * rank, void *dst, const void *src, gsize bytes,
    GError ** error)
{
  return lb_comm_copy (rank, rank->stream, c->host, dst, src, bytes, error);
}

static gboolean
settle (LocalComm * c, LbRank * rank, GError ** error)
{
  if (c->host)
    return TRUE;
  return rank->backend->stream_synchronize (rank->stream, error);
}

#define REDUCE_CHUNK 2048

#define DEFINE_SUM(name, T)                                               \
static void                                                               \
name (void *out, const void *const *in, int n_in, gsize count)            \
{                                                                         \
  T tmp[REDUCE_CHUNK];                                                    \
  for (gsize off = 0; off < count; off += REDUCE_CHUNK) {                 \
    gsize len = MIN ((gsize) REDUCE_CHUNK, count - off);                  \
    memcpy (tmp, (const T *) in[0] + off, len * sizeof (T));              \
    for (int p = 1; p < n_in; p++) {                                      \
      const T *x = (const T *) in[p] + off;                               \
      for (gsize i = 0; i < len; i++)                                     \
        tmp[i] += x[i];                                                   \
    }                                                                     \
    memcpy ((T *) out + off, tmp, len * sizeof (T));                      \
  }                                                                       \
}

DEFINE_SUM (sum_f32, float)
DEFINE_SUM (sum_f64, double)
DEFINE_SUM (sum_i32, gint32)
DEFINE_SUM (sum_i64, gint64)
/* Sums in rank order, chunk by chunk, so @out may alias one input. */
static gboolean
reduce_sum (LocalComm * c, LbDType dtype, void *out,
    const void *const *in, int n_in, gsize count, GError ** error)
{
  if (!c->host) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "local collectives: reductions need host memory; register the "
        "NCCL collectives for device ranks");
    return FALSE;
  }
  switch (dtype) {
    case LB_DTYPE_F32:
      sum_f32 (out, in, n_in, count);
      break;
    case LB_DTYPE_F64:
      sum_f64 (out, in, n_in, count);
      break;
    case LB_DTYPE_I32:
      sum_i32 (out, in, n_in, count);
      break;
    case LB_DTYPE_I64:
      sum_i64 (out, in, n_in, count);
      break;
    default:
      g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
          "local collectives: no sum for %s", lb_dtype_name (dtype));
      return FALSE;
  }
  return TRUE;
}

/* ---- the two phases of each operation ---- */

static inline LocalOp *
peer_op (LocalComm * c, int peer, guint k)
{
  LocalRank *pr = &c->ranks[peer];
  return k < pr->ops->len ? &g_array_index (pr->ops, LocalOp, k) : NULL;
}

static gboolean
check_match (LocalOp * mine, LocalOp * theirs, int me, int peer,
    GError ** error)
{
  if (theirs == NULL || theirs->kind != mine->kind ||
      theirs->dtype != mine->dtype ||
      (mine->kind == OP_BCAST && theirs->root != mine->root)) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "local collectives: rank %d and rank %d called different "
        "collectives (or with different dtype/root) at the same point",
        me, peer);
    return FALSE;
  }
  return TRUE;
}

static gboolean
count_mismatch (const char *what, int me, int peer, gsize want, gsize got,
    GError ** error)
{
  g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
      "%s: rank %d expects %" G_GSIZE_FORMAT " elements from rank %d, "
      "which sends %" G_GSIZE_FORMAT, what, me, want, peer, got);
  return FALSE;
}

static gboolean
ensure_scratch (LocalRank * lr, guint k, gsize bytes)
{
  if (lr->scratch->len <= k)
    g_array_set_size (lr->scratch, k + 1);
  Scratch *s = &g_array_index (lr->scratch, Scratch, k);
  if (s->size < bytes) {
    g_free (s->data);
    s->data = g_malloc (bytes);
    s->size = bytes;
  }
  g_array_index (lr->ops, LocalOp, k).scratch = s->data;
  return TRUE;
}

static gboolean
phase1 (LocalComm * c, LbRank * rank, guint k, GError ** error)
{
  int me = rank->rank, n = c->n;
  LocalRank *lr = &c->ranks[me];
  LocalOp *op = &g_array_index (lr->ops, LocalOp, k);
  gsize es = op->esize;
  const void *in[64];

  for (int p = 0; p < n; p++) {
    if (!check_match (op, peer_op (c, p, k), me, p, error))
      return FALSE;
  }
  switch (op->kind) {
    case OP_A2A:
      for (int p = 0; p < n; p++) {
        const char *src = (const char *) peer_op (c, p, k)->send +
            (gsize) me * op->count * es;
        if (!move (c, rank, (char *) op->recv + (gsize) p * op->count * es,
                src, op->count * es, error))
          return FALSE;
      }
      return TRUE;
    case OP_A2AV:
      for (int p = 0; p < n; p++) {
        LocalOp *po = peer_op (c, p, k);
        if (po->scounts[me] != op->rcounts[p])
          return count_mismatch ("all_to_all_v", me, p, op->rcounts[p],
              po->scounts[me], error);
        if (!move (c, rank, (char *) op->recv + op->rdispls[p] * es,
                (const char *) po->send + po->sdispls[me] * es,
                op->rcounts[p] * es, error))
          return FALSE;
      }
      return TRUE;
    case OP_AG:
      for (int p = 0; p < n; p++) {
        if (!move (c, rank, (char *) op->recv + (gsize) p * op->count * es,
                peer_op (c, p, k)->send, op->count * es, error))
          return FALSE;
      }
      return TRUE;
    case OP_AGV:
      for (int p = 0; p < n; p++) {
        LocalOp *po = peer_op (c, p, k);
        if (po->count != op->rcounts[p])
          return count_mismatch ("all_gather_v", me, p, op->rcounts[p],
              po->count, error);
        if (!move (c, rank, (char *) op->recv + op->rdispls[p] * es,
                po->send, op->rcounts[p] * es, error))
          return FALSE;
      }
      return TRUE;
    case OP_RS:
      for (int p = 0; p < n; p++)
        in[p] = (const char *) peer_op (c, p, k)->send +
            (gsize) me *op->count * es;
      return reduce_sum (c, op->dtype, op->recv, in, n, op->count, error);
    case OP_AR:{
      int64_t start, len;
      lb_split_rows ((int64_t) op->count, n, me, &start, &len);
      ensure_scratch (lr, k, MAX ((gsize) len * es, 1));
      op = &g_array_index (lr->ops, LocalOp, k);
      for (int p = 0; p < n; p++)
        in[p] = (const char *) peer_op (c, p, k)->send + (gsize) start *es;
      return reduce_sum (c, op->dtype, op->scratch, in, n, (gsize) len, error);
    }
    case OP_BCAST:
      if (me == op->root)
        return TRUE;
      return move (c, rank, op->recv, peer_op (c, op->root, k)->recv,
          op->count * es, error);
  }
  return TRUE;
}

static gboolean
phase2 (LocalComm * c, LbRank * rank, guint k, GError ** error)
{
  LocalOp *op = &g_array_index (c->ranks[rank->rank].ops, LocalOp, k);
  if (op->kind != OP_AR)
    return TRUE;
  for (int q = 0; q < c->n; q++) {
    int64_t start, len;
    lb_split_rows ((int64_t) op->count, c->n, q, &start, &len);
    if (!move (c, rank, (char *) op->recv + (gsize) start * op->esize,
            peer_op (c, q, k)->scratch, (gsize) len * op->esize, error))
      return FALSE;
  }
  return TRUE;
}

/* ---- point to point ---- */

static gboolean
post_arrived (LocalComm * c, gconstpointer arg)
{
  const LocalP2P *m = arg;      /* sbuf: the mailbox; seq: the message */
  const Mailbox *mb = (const Mailbox *) m->sbuf;
  return mb->base + mb->posts->len > m->seq;
}

static gboolean
post_consumed (LocalComm * c, gconstpointer arg)
{
  const LocalP2P *m = arg;
  const Mailbox *mb = (const Mailbox *) m->sbuf;
  return mb->consumed > m->seq;
}

static void
post_sends (LocalComm * c, LbRank * rank)
{
  LocalRank *lr = &c->ranks[rank->rank];
  g_mutex_lock (&c->lock);
  for (guint i = 0; i < lr->p2p->len; i++) {
    LocalP2P *m = &g_array_index (lr->p2p, LocalP2P, i);
    if (!m->is_send)
      continue;
    Mailbox *mb = &c->mb[rank->rank * c->n + m->peer];
    Post post = { m->sbuf, m->bytes };
    m->seq = mb->base + mb->posts->len;
    g_array_append_val (mb->posts, post);
  }
  g_cond_broadcast (&c->cond);
  g_mutex_unlock (&c->lock);
}

static gboolean
do_recv (LocalComm * c, LbRank * rank, LocalP2P * m, GError ** error)
{
  LocalRank *lr = &c->ranks[rank->rank];
  Mailbox *mb = &c->mb[m->peer * c->n + rank->rank];
  LocalP2P probe = {.sbuf = mb,.seq = lr->recv_seq[m->peer] };
  gint64 deadline = lb_rank_deadline (rank);

  g_mutex_lock (&c->lock);
  if (!wait_locked (c, rank, deadline, post_arrived, &probe, "recv", error)) {
    g_mutex_unlock (&c->lock);
    return FALSE;
  }
  Post post = g_array_index (mb->posts, Post, probe.seq - mb->base);
  g_mutex_unlock (&c->lock);

  GError *local = NULL;
  if (post.bytes != m->bytes)
    g_set_error (&local, LB_ERROR, LB_ERROR_SHAPE,
        "recv: rank %d expects %" G_GSIZE_FORMAT " bytes from rank %d, "
        "which sends %" G_GSIZE_FORMAT, rank->rank, m->bytes, m->peer,
        post.bytes);
  else if (move (c, rank, m->rbuf, post.buf, post.bytes, &local))
    settle (c, rank, &local);

  /* Consume even on a mismatch, so the sender is released. */
  g_mutex_lock (&c->lock);
  lr->recv_seq[m->peer]++;
  mb->consumed++;
  if (mb->consumed == mb->base + mb->posts->len) {
    g_array_set_size (mb->posts, 0);
    mb->base = mb->consumed;
  }
  g_cond_broadcast (&c->cond);
  g_mutex_unlock (&c->lock);
  if (local != NULL) {
    g_propagate_error (error, local);
    return FALSE;
  }
  return TRUE;
}

static gboolean
wait_sends (LocalComm * c, LbRank * rank, GError ** error)
{
  LocalRank *lr = &c->ranks[rank->rank];
  gint64 deadline = lb_rank_deadline (rank);
  gboolean ok = TRUE;
  g_mutex_lock (&c->lock);
  for (guint i = 0; i < lr->p2p->len && ok; i++) {
    LocalP2P *m = &g_array_index (lr->p2p, LocalP2P, i);
    if (!m->is_send)
      continue;
    LocalP2P probe = {.sbuf = &c->mb[rank->rank * c->n + m->peer],
      .seq = m->seq
    };
    ok = wait_locked (c, rank, deadline, post_consumed, &probe, "send", error);
  }
  g_mutex_unlock (&c->lock);
  return ok;
}

/* ---- running what was recorded ---- */

/* What the barriers of a recorded group of operations are called in a
 * timeout error: the first operation's name and the phase (@phase 0 the
 * publish barrier, 1 the final one); static strings, no allocation. */
static const char *
op_phase_name (LocalRank * lr, int phase)
{
  static const char *const names[][2] = {
    [OP_A2A] = {"all_to_all (publish)", "all_to_all (complete)"},
    [OP_A2AV] = {"all_to_all_v (publish)", "all_to_all_v (complete)"},
    [OP_AG] = {"all_gather (publish)", "all_gather (complete)"},
    [OP_AGV] = {"all_gather_v (publish)", "all_gather_v (complete)"},
    [OP_RS] = {"reduce_scatter (publish)", "reduce_scatter (complete)"},
    [OP_AR] = {"all_reduce (publish)", "all_reduce (complete)"},
    [OP_BCAST] = {"broadcast (publish)", "broadcast (complete)"},
  };
  const OpKind k = g_array_index (lr->ops, LocalOp, 0).kind;
  return names[k][phase];
}

static gboolean
run_recorded (LocalComm * c, LbRank * rank, GError ** error)
{
  LocalRank *lr = &c->ranks[rank->rank];
  GError *local = NULL;
  gboolean ok = TRUE;

  /* device ranks: the kernels that wrote this rank's send buffers must be
   * finished before a peer copies from them on its own stream */
  if ((lr->p2p->len > 0 || lr->ops->len > 0) && !settle (c, rank, error))
    goto out_fail;
  if (lr->p2p->len > 0)
    post_sends (c, rank);

  guint n_ops = lr->ops->len;
  if (n_ops > 0) {
    gboolean two_phase = FALSE;
    for (guint k = 0; k < n_ops; k++)
      two_phase |= g_array_index (lr->ops, LocalOp, k).kind == OP_AR;
    if (!barrier_wait (c, rank, op_phase_name (lr, 0), error))
      goto out_fail;
    for (guint k = 0; k < n_ops && local == NULL; k++)
      phase1 (c, rank, k, &local);
    if (local == NULL)
      settle (c, rank, &local);
    if (two_phase) {
      if (!barrier_wait (c, rank, "all_reduce (exchange)", error))
        goto out_fail;
      for (guint k = 0; k < n_ops && local == NULL; k++)
        phase2 (c, rank, k, &local);
      if (local == NULL)
        settle (c, rank, &local);
    }
    /* Even after a local error: peers may still read our send buffers. */
    if (!barrier_wait (c, rank, op_phase_name (lr, 1), error))
      goto out_fail;
  }

  for (guint i = 0; i < lr->p2p->len && local == NULL; i++) {
    LocalP2P *m = &g_array_index (lr->p2p, LocalP2P, i);
    if (!m->is_send)
      do_recv (c, rank, m, &local);
  }
  if (local == NULL && lr->p2p->len > 0)
    wait_sends (c, rank, &local);

  if (local != NULL) {
    g_propagate_error (error, local);
    ok = FALSE;
  }
  g_array_set_size (lr->ops, 0);
  g_array_set_size (lr->p2p, 0);
  return ok;

out_fail:
  g_clear_error (&local);
  g_array_set_size (lr->ops, 0);
  g_array_set_size (lr->p2p, 0);
  return FALSE;
}

static gboolean
record_op (LocalComm * c, LbRank * rank, const LocalOp * op, GError ** error)
{
  LocalRank *lr = &c->ranks[rank->rank];
  if (!lb_rank_check_abort (rank, error))
    return FALSE;
  g_array_append_vals (lr->ops, op, 1);
  g_array_index (lr->ops, LocalOp, lr->ops->len - 1).esize =
      lb_dtype_size (op->dtype);
  if (lr->depth > 0)
    return TRUE;
  return run_recorded (c, rank, error);
}

static gboolean
record_p2p (LocalComm * c, LbRank * rank, const LocalP2P * m, GError ** error)
{
  LocalRank *lr = &c->ranks[rank->rank];
  if (!lb_rank_check_abort (rank, error))
    return FALSE;
  g_array_append_vals (lr->p2p, m, 1);
  if (lr->depth > 0)
    return TRUE;
  return run_recorded (c, rank, error);
}

/* ---- the class ---- */

/* Records an operation of @kind that needs no more than its buffers and a
 * count. */
static gboolean
record_plain (gpointer state, LbRank * rank, OpKind kind, LbDType dtype,
    const void *send, void *recv, gsize count, GError ** error)
{
  LocalOp op = {.kind = kind,.dtype = dtype,.send = send,.recv = recv,
    .count = count
  };
  return record_op (state, rank, &op, error);
}

static gboolean
local_all_to_all (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize count, GError ** error)
{
  return record_plain (state, rank, OP_A2A, dtype, send, recv, count, error);
}

static gboolean
local_all_to_all_v (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, const gsize * send_counts, const gsize * send_displs,
    void *recv, const gsize * recv_counts, const gsize * recv_displs,
    GError ** error)
{
  LocalOp op = {.kind = OP_A2AV,.dtype = dtype,.send = send,.recv = recv,
    .scounts = send_counts,.sdispls = send_displs,.rcounts = recv_counts,
    .rdispls = recv_displs
  };
  return record_op (state, rank, &op, error);
}

static gboolean
local_all_gather (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize count, GError ** error)
{
  return record_plain (state, rank, OP_AG, dtype, send, recv, count, error);
}

static gboolean
local_all_gather_v (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, gsize send_count, void *recv, const gsize * recv_counts,
    const gsize * recv_displs, GError ** error)
{
  LocalOp op = {.kind = OP_AGV,.dtype = dtype,.send = send,.recv = recv,
    .count = send_count,.rcounts = recv_counts,.rdispls = recv_displs
  };
  return record_op (state, rank, &op, error);
}

static gboolean
local_reduce_scatter (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize recv_count, LbReduceOp rop,
    GError ** error)
{
  return record_plain (state, rank, OP_RS, dtype, send, recv, recv_count,
      error);
}

static gboolean
local_all_reduce (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize count, LbReduceOp rop, GError ** error)
{
  return record_plain (state, rank, OP_AR, dtype, send, recv, count, error);
}

static gboolean
local_broadcast (gpointer state, LbRank * rank, LbDType dtype, void *buf,
    gsize count, int root, GError ** error)
{
  LocalOp op = {.kind = OP_BCAST,.dtype = dtype,.send = buf,.recv = buf,
    .count = count,.root = root
  };
  return record_op (state, rank, &op, error);
}

static gboolean
local_send (gpointer state, LbRank * rank, LbDType dtype, const void *buf,
    gsize count, int peer, GError ** error)
{
  LocalP2P m = {.peer = peer,.is_send = TRUE,.sbuf = buf,
    .bytes = count * lb_dtype_size (dtype)
  };
  return record_p2p (state, rank, &m, error);
}

static gboolean
local_recv (gpointer state, LbRank * rank, LbDType dtype, void *buf,
    gsize count, int peer, GError ** error)
{
  LocalP2P m = {.peer = peer,.is_send = FALSE,.rbuf = buf,
    .bytes = count * lb_dtype_size (dtype)
  };
  return record_p2p (state, rank, &m, error);
}

static gboolean
local_barrier (gpointer state, LbRank * rank, GError ** error)
{
  LocalComm *c = state;
  if (c->ranks[rank->rank].depth > 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "barrier: not allowed inside a collectives group");
    return FALSE;
  }
  return barrier_wait (c, rank, "barrier", error);
}

static gboolean
local_group_start (gpointer state, LbRank * rank, GError ** error)
{
  LocalComm *c = state;
  c->ranks[rank->rank].depth++;
  return TRUE;
}

static gboolean
local_group_end (gpointer state, LbRank * rank, GError ** error)
{
  LocalComm *c = state;
  LocalRank *lr = &c->ranks[rank->rank];
  if (lr->depth == 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "group_end without group_start on rank %d", rank->rank);
    return FALSE;
  }
  if (--lr->depth > 0)
    return TRUE;
  return run_recorded (c, rank, error);
}

static gboolean
local_synchronize (gpointer state, LbRank * rank, GError ** error)
{
  return lb_rank_check_abort (rank, error);
}

static const LbCollectivesClass local_class = {
  .name = "local",
  LB_COLLECTIVES_OPS (local),
};

/**
 * lb_local_collectives:
 *
 * Returns: (transfer none): the shared-memory collectives for ranks that
 * are threads of this process.
 */
const LbCollectivesClass *
lb_local_collectives (void)
{
  return &local_class;
}

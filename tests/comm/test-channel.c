/* lingbot-gst: tensor channels (ordering, back-pressure, cancel, resharding,
 * transports)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "comm-test-util.h"
#include <sys/syscall.h>

/* The value of element (c, t, h, w) of message m: exact in f32. */
static float
elem (int m, int64_t c, int64_t t, int64_t h, int64_t w)
{
  return (float) (m * 100000 + c * 20000 + t * 5000 + h * 64 + w);
}

typedef struct
{
  LbChannel *ch;
  int n_messages;
  int64_t shape[4];             /* [C, T, H, W], sharded by H (dim 2) */
  gint progress;                /* messages committed by producer rank 0 */
  gint returned;
  float *gathered;              /* consumer ranks assemble message 0 here */
} Flow;

static gboolean
produce (LbRank * rank, gpointer data, GError ** error)
{
  Flow *f = data;
  for (int m = 0; m < f->n_messages; m++) {
    LbTensor band;
    if (!lb_channel_acquire (f->ch, rank, &band, error))
      return FALSE;
    RCHECK (lb_tensor_is_contiguous (&band), "band: ");
    /* This rank's rows: find them from its shard height and the split. */
    int64_t h0 = 0, rows = band.shape[2];
    int n_pieces;
    const LbChannelPiece *plan = lb_channel_get_plan (f->ch, &n_pieces);
    h0 = G_MAXINT64;
    for (int i = 0; i < n_pieces; i++)
      if (plan[i].src_rank == rank->rank)
        h0 = MIN (h0, plan[i].row_start);
    float *p = band.data;
    for (int64_t c = 0; c < f->shape[0]; c++)
      for (int64_t t = 0; t < f->shape[1]; t++)
        for (int64_t h = 0; h < rows; h++)
          for (int64_t w = 0; w < f->shape[3]; w++)
            *p++ = elem (m, c, t, h0 + h, w);
    if (!lb_channel_commit (f->ch, rank, error))
      return FALSE;
    if (rank->rank == 0)
      g_atomic_int_set (&f->progress, m + 1);
  }
  if (rank->rank == 0)
    g_atomic_int_set (&f->returned, 1);
  return TRUE;
}

static gboolean
consume (LbRank * rank, gpointer data, GError ** error)
{
  Flow *f = data;
  int n_pieces;
  const LbChannelPiece *plan = lb_channel_get_plan (f->ch, &n_pieces);
  int64_t h0 = G_MAXINT64;
  for (int i = 0; i < n_pieces; i++)
    if (plan[i].dst_rank == rank->rank)
      h0 = MIN (h0, plan[i].row_start);
  for (int m = 0; m < f->n_messages; m++) {
    LbTensor band;
    if (!lb_channel_receive (f->ch, rank, &band, error))
      return FALSE;
    RCHECK (band.ndim == 4 && band.shape[0] == f->shape[0] &&
        band.shape[3] == f->shape[3], "band shape: ");
    for (int64_t c = 0; c < band.shape[0]; c++)
      for (int64_t t = 0; t < band.shape[1]; t++)
        for (int64_t h = 0; h < band.shape[2]; h++)
          for (int64_t w = 0; w < band.shape[3]; w++) {
            int64_t idx[4] = { c, t, h, w };
            float v = (float) lb_tensor_get (&band, idx);
            RCHECK (v == elem (m, c, t, h0 + h, w),
                "message %d rank %d at (%d,%d,%d,%d): ", m, rank->rank,
                (int) c, (int) t, (int) (h0 + h), (int) w);
            if (m == 0 && f->gathered)
              f->gathered[((c * f->shape[1] + t) * f->shape[2] + h0 + h) *
                  f->shape[3] + w] = v;
          }
    if (!lb_channel_ack (f->ch, rank, error))
      return FALSE;
  }
  return TRUE;
}

static LbChannel *
flow_channel (Flow * f, LbWorkerGroup * prod, LbWorkerGroup * cons,
    const int64_t * prod_rows, const int64_t * cons_rows, int n_slots,
    LbChannelFlags flags)
{
  LbChannelConfig cfg = {
    .producer = prod,.consumer = cons,.dtype = LB_DTYPE_F32,.ndim = 4,
    .shard_dim = 2,.producer_rows = prod_rows,.consumer_rows = cons_rows,
    .n_slots = n_slots,.flags = flags,.name = "test",
  };
  memcpy (cfg.shape, f->shape, sizeof f->shape);
  GError *err = NULL;
  LbChannel *ch = lb_channel_new (&cfg, &err);
  g_assert_no_error (err);
  g_assert_nonnull (ch);
  f->ch = ch;
  return ch;
}

/* ---- ordering ---- */

static void
test_ordering (void)
{
  int a[2] = { 0, 1 }, b[2] = { 2, 3 };
  LbWorkerGroup *gp = test_group_new (2, a, 10000, "prod");
  LbWorkerGroup *gc = test_group_new (2, b, 10000, "cons");
  Flow f = {.n_messages = test_quick ()? 40 : 200,.shape = {2, 1, 6, 3} };
  LbChannel *ch = flow_channel (&f, gp, gc, NULL, NULL, 3, 0);
  test_run_two (gp, produce, &f, gc, consume, &f);
  LbChannelStats st;
  lb_channel_get_stats (ch, &st);
  g_assert_cmpuint (st.messages_sent, ==, f.n_messages);
  g_assert_cmpuint (st.messages_received, ==, 2 * f.n_messages);
  g_assert_cmpuint (st.copies[LB_TRANSPORT_PEER], ==, 2 * f.n_messages);
  lb_channel_free (ch);
  lb_worker_group_unref (gp);
  lb_worker_group_unref (gc);
}

/* ---- back-pressure ---- */

static gboolean
consume_one (LbRank * rank, gpointer data, GError ** error)
{
  Flow *f = data;
  LbTensor band;
  if (!lb_channel_receive (f->ch, rank, &band, error))
    return FALSE;
  return lb_channel_ack (f->ch, rank, error);
}

/* Linux: the state of this process's thread named @comm ('R', 'S', ...),
 * its voluntary context switches so far and the system call it is in (-1:
 * none); FALSE when there is no such thread. */
static gboolean
thread_state (const char *comm, char *state, guint64 * switches,
    gint64 * syscall_nr)
{
  g_autoptr (GDir) dir = g_dir_open ("/proc/self/task", 0, NULL);
  const char *tid;

  g_assert_nonnull (dir);
  while ((tid = g_dir_read_name (dir)) != NULL) {
    g_autofree char *path = g_strdup_printf ("/proc/self/task/%s/status",
        tid);
    g_autofree char *text = NULL;
    g_auto (GStrv) lines = NULL;
    gboolean mine = FALSE;

    if (!g_file_get_contents (path, &text, NULL, NULL))
      continue;
    lines = g_strsplit (text, "\n", -1);
    for (guint i = 0; lines[i] != NULL; i++) {
      if (g_str_has_prefix (lines[i], "Name:\t"))
        mine = strcmp (lines[i] + strlen ("Name:\t"), comm) == 0;
      else if (mine && g_str_has_prefix (lines[i], "State:\t"))
        *state = lines[i][strlen ("State:\t")];
      else if (mine && g_str_has_prefix (lines[i], "voluntary_ctxt_switches:"))
        *switches = g_ascii_strtoull (lines[i] +
            strlen ("voluntary_ctxt_switches:"), NULL, 10);
    }
    if (mine) {
      g_autofree char *sc_path =
          g_strdup_printf ("/proc/self/task/%s/syscall", tid);
      g_autofree char *sc = NULL;

      *syscall_nr = g_file_get_contents (sc_path, &sc, NULL, NULL)
          && g_ascii_isdigit (sc[0]) ? g_ascii_strtoll (sc, NULL, 10) : -1;
      return TRUE;
    }
  }
  return FALSE;
}

/* Waits (60 s at most) until the thread named @comm has slept in a futex
 * (a GCond's wait) for 20 ms without waking: blocked on a condition, not
 * off the CPU for a moment nor in another sleep. */
static void
wait_thread_blocked (const char *comm)
{
  const gint64 until = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;
  char s0 = 0, s1 = 0;
  guint64 n0 = 0, n1 = 0;
  gint64 c0 = -1, c1 = -1;

  for (;;) {
    g_assert_true (thread_state (comm, &s0, &n0, &c0));
    g_usleep (20 * 1000);
    g_assert_true (thread_state (comm, &s1, &n1, &c1));
    if (s0 == 'S' && s1 == 'S' && n0 == n1 && c0 == SYS_futex
        && c1 == SYS_futex)
      return;
    if (g_get_monotonic_time () > until)
      g_error ("thread %s not blocked within 60 s", comm);
  }
}

static void
test_slot_exhaustion (void)
{
  LbWorkerGroup *gp = test_group_new (1, NULL, 10000, "prod");
  LbWorkerGroup *gc = test_group_new (1, NULL, 10000, "cons");
  Flow f = {.n_messages = 3,.shape = {1, 1, 4, 4} };
  LbChannel *ch = flow_channel (&f, gp, gc, NULL, NULL, 2, 0);
  GError *err = NULL;
  LbWorkerJob job = LB_WORKER_JOB_INIT;
  g_assert_true (lb_worker_group_submit (gp, &job, -1, produce, &f, &err));
  while (g_atomic_int_get (&f.progress) < 2)
    g_usleep (1000);
  /* Both slots are full: the third acquire must block.  The producer
   * rank's thread is seen asleep first (after progress 2 its only wait
   * is that acquire): a sleep of 200 ms stood for that, and a producer
   * held off the CPUs for 100 ms after message 1 waited less than the
   * 100 ms asserted below, or not at all */
  wait_thread_blocked ("lb-prod-0");
  g_usleep (100 * 1000);
  g_assert_cmpint (g_atomic_int_get (&f.progress), ==, 2);
  g_assert_cmpint (g_atomic_int_get (&f.returned), ==, 0);
  /* One ack frees a slot and releases the producer. */
  g_assert_true (lb_worker_group_run (gc, consume_one, &f, &err));
  g_assert_no_error (err);
  g_assert_true (lb_worker_group_wait (gp, &job, &err));
  g_assert_no_error (err);
  g_assert_cmpint (g_atomic_int_get (&f.returned), ==, 1);
  LbChannelStats st;
  lb_channel_get_stats (ch, &st);
  g_assert_cmpuint (st.waits, >=, 1);
  g_assert_cmpint (st.wait_us, >=, 100 * 1000);
  /* Drain the rest, in order. */
  g_assert_true (lb_worker_group_run (gc, consume_one, &f, &err));
  g_assert_true (lb_worker_group_run (gc, consume_one, &f, &err));
  g_assert_no_error (err);
  lb_channel_free (ch);
  lb_worker_group_unref (gp);
  lb_worker_group_unref (gc);
}

/* ---- cancel ---- */

typedef struct
{
  LbChannel *ch;
  gint started;
  int code[2];
} CancelData;

static gboolean
produce_two_then_block (LbRank * rank, gpointer data, GError ** error)
{
  CancelData *cd = data;
  LbTensor band;
  /* Message 0 from this rank; message 1 blocks: the only slot is taken
   * until message 0 is consumed, which needs producer rank 1 too. */
  if (!lb_channel_acquire (cd->ch, rank, &band, error) ||
      !lb_channel_commit (cd->ch, rank, error))
    return FALSE;
  g_atomic_int_inc (&cd->started);
  GError *e = NULL;
  gboolean ok = lb_channel_acquire (cd->ch, rank, &band, &e);
  cd->code[0] = ok ? -1 : e->code;
  if (!ok)
    g_propagate_error (error, e);
  return ok;
}

static gboolean
receive_blocked (LbRank * rank, gpointer data, GError ** error)
{
  CancelData *cd = data;
  LbTensor band;
  g_atomic_int_inc (&cd->started);
  GError *e = NULL;
  gboolean ok = lb_channel_receive (cd->ch, rank, &band, &e);
  cd->code[1] = ok ? -1 : e->code;
  if (!ok)
    g_propagate_error (error, e);
  return ok;
}

static void
test_cancel_releases_both (void)
{
  LbWorkerGroup *gp = test_group_new (2, NULL, 20000, "prod");
  LbWorkerGroup *gc = test_group_new (1, NULL, 20000, "cons");
  Flow f = {.n_messages = 1,.shape = {1, 1, 4, 8} };
  LbChannel *ch = flow_channel (&f, gp, gc, NULL, NULL, 1,
      LB_CHANNEL_NO_PEER_COPY);
  CancelData cd = {.ch = ch };
  GError *err = NULL;
  LbWorkerJob jp = LB_WORKER_JOB_INIT, jc = LB_WORKER_JOB_INIT;
  g_assert_true (lb_worker_group_submit (gp, &jp, 0, produce_two_then_block,
          &cd, &err));
  g_assert_true (lb_worker_group_submit (gc, &jc, -1, receive_blocked, &cd,
          &err));
  while (g_atomic_int_get (&cd.started) < 2)
    g_usleep (1000);
  g_usleep (100 * 1000);        /* both are inside their waits */
  gint64 t0 = g_get_monotonic_time ();
  lb_channel_cancel (ch);
  g_assert_false (lb_worker_group_wait (gp, &jp, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
  g_clear_error (&err);
  g_assert_false (lb_worker_group_wait (gc, &jc, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
  g_clear_error (&err);
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 1000 * 1000);
  g_assert_cmpint (cd.code[0], ==, LB_ERROR_CANCELLED);
  g_assert_cmpint (cd.code[1], ==, LB_ERROR_CANCELLED);
  g_assert_true (lb_channel_is_cancelled (ch));

  /* Calls after the cancel fail at once. */
  g_assert_false (lb_worker_group_run (gc, consume_one, &f, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
  g_clear_error (&err);

  /* Reset: the channel works again from message 0. */
  g_assert_true (lb_channel_reset (ch, &err));
  g_assert_false (lb_channel_is_cancelled (ch));
  f.ch = ch;
  test_run_two (gp, produce, &f, gc, consume, &f);
  lb_channel_free (ch);
  lb_worker_group_unref (gp);
  lb_worker_group_unref (gc);
}

/* ---- resharding ---- */

static void
check_reshard (int P, const int64_t * prow, int Q, const int64_t * qrow,
    int64_t H, LbChannelFlags flags, gboolean same_ordinals)
{
  int po[4] = { 0, 1, 2, 3 }, qo[4] = { 4, 5, 6, 7 };
  LbWorkerGroup *gp = test_group_new (P, po, 10000, "prod");
  LbWorkerGroup *gc = test_group_new (Q, same_ordinals ? po : qo, 10000,
      "cons");
  Flow f = {.n_messages = 5,.shape = {2, 3, H, 5} };
  gsize numel = 2 * 3 * H * 5;
  f.gathered = g_new (float, numel);
  for (gsize i = 0; i < numel; i++)
    f.gathered[i] = -1.0f;
  LbChannel *ch = flow_channel (&f, gp, gc, prow, qrow, 2, flags);
  test_run_two (gp, produce, &f, gc, consume, &f);
  /* The consumer bands of message 0 put together equal the full tensor. */
  gsize i = 0;
  for (int64_t c = 0; c < 2; c++)
    for (int64_t t = 0; t < 3; t++)
      for (int64_t h = 0; h < H; h++)
        for (int64_t w = 0; w < 5; w++, i++)
          g_assert_cmpfloat (f.gathered[i], ==, elem (0, c, t, h, w));

  int n_pieces;
  const LbChannelPiece *plan = lb_channel_get_plan (ch, &n_pieces);
  int64_t covered = 0;
  for (int k = 0; k < n_pieces; k++)
    covered += plan[k].row_count;
  g_assert_cmpint (covered, ==, H);
  g_free (f.gathered);
  lb_channel_free (ch);
  lb_worker_group_unref (gp);
  lb_worker_group_unref (gc);
}

static void
test_reshard (void)
{
  check_reshard (4, NULL, 2, NULL, 16, 0, FALSE);       /* 4 -> 2 */
  check_reshard (2, NULL, 3, NULL, 16, 0, FALSE);       /* 2 -> 3 */
  check_reshard (4, NULL, 3, NULL, 58, 0, FALSE);       /* 15,15,14,14 -> 20,19,19 */
  int64_t prow[3] = { 1, 9, 3 }, qrow[2] = { 7, 6 };
  check_reshard (3, prow, 2, qrow, 13, 0, FALSE);       /* uneven, explicit */
  int64_t zrow[3] = { 0, 10, 3 };
  check_reshard (3, zrow, 2, qrow, 13, 0, FALSE);       /* an empty band */
  /* Same transports, staged through the host. */
  check_reshard (4, NULL, 2, NULL, 16, LB_CHANNEL_NO_PEER_COPY, FALSE);
  check_reshard (3, prow, 2, qrow, 13, LB_CHANNEL_NO_PEER_COPY, FALSE);
  /* Same ordinals: bands inside one producer band are handed over (as
   * strided views), the rest copied. */
  check_reshard (2, NULL, 4, NULL, 16, 0, TRUE);
  check_reshard (4, NULL, 2, NULL, 16, 0, TRUE);
}

/* ---- transports ---- */

static void
test_same_device_zero_copy (void)
{
  int ord[2] = { 0, 1 };
  LbWorkerGroup *gp = test_group_new (2, ord, 10000, "prod");
  LbWorkerGroup *gc = test_group_new (2, ord, 10000, "cons");
  Flow f = {.n_messages = 10,.shape = {3, 2, 8, 4} };
  LbChannel *ch = flow_channel (&f, gp, gc, NULL, NULL, 2, 0);
  int n_pieces;
  const LbChannelPiece *plan = lb_channel_get_plan (ch, &n_pieces);
  g_assert_cmpint (n_pieces, ==, 2);
  for (int i = 0; i < n_pieces; i++)
    g_assert_cmpint (plan[i].transport, ==, LB_TRANSPORT_SAME_DEVICE);
  test_run_two (gp, produce, &f, gc, consume, &f);
  LbChannelStats st;
  lb_channel_get_stats (ch, &st);
  for (int k = 0; k < LB_TRANSPORT_COUNT; k++)
    g_assert_cmpuint (st.copies[k], ==, 0);
  g_assert_cmpuint (st.bytes[LB_TRANSPORT_SAME_DEVICE], ==,
      10 * 3 * 2 * 8 * 4 * sizeof (float));
  g_assert_cmpuint (st.bytes[LB_TRANSPORT_PEER], ==, 0);
  lb_channel_free (ch);

  /* The same groups with hand-over disabled copy instead. */
  ch = flow_channel (&f, gp, gc, NULL, NULL, 2, LB_CHANNEL_NO_HANDOVER);
  plan = lb_channel_get_plan (ch, &n_pieces);
  for (int i = 0; i < n_pieces; i++)
    g_assert_cmpint (plan[i].transport, ==, LB_TRANSPORT_PEER);
  test_run_two (gp, produce, &f, gc, consume, &f);
  lb_channel_get_stats (ch, &st);
  g_assert_cmpuint (st.copies[LB_TRANSPORT_PEER], ==, 20);
  lb_channel_free (ch);

  /* One group producing for itself (DiT -> VAE on the same ranks). */
  ch = flow_channel (&f, gp, gp, NULL, NULL, 2, 0);
  plan = lb_channel_get_plan (ch, &n_pieces);
  for (int i = 0; i < n_pieces; i++)
    g_assert_cmpint (plan[i].transport, ==, LB_TRANSPORT_SAME_DEVICE);
  lb_channel_free (ch);
  lb_worker_group_unref (gp);
  lb_worker_group_unref (gc);
}

static void
test_host_staged_fallback (void)
{
  int a[2] = { 0, 1 }, b[2] = { 2, 3 };
  LbWorkerGroup *gp = test_group_new (2, a, 10000, "prod");
  LbWorkerGroup *gc = test_group_new (2, b, 10000, "cons");
  Flow f = {.n_messages = 6,.shape = {1, 2, 10, 4} };
  LbChannel *ch = flow_channel (&f, gp, gc, NULL, NULL, 2,
      LB_CHANNEL_NO_PEER_COPY);
  int n_pieces;
  const LbChannelPiece *plan = lb_channel_get_plan (ch, &n_pieces);
  for (int i = 0; i < n_pieces; i++)
    g_assert_cmpint (plan[i].transport, ==, LB_TRANSPORT_HOST_STAGED);
  test_run_two (gp, produce, &f, gc, consume, &f);
  LbChannelStats st;
  lb_channel_get_stats (ch, &st);
  g_assert_cmpuint (st.copies[LB_TRANSPORT_PEER], ==, 0);
  g_assert_cmpuint (st.copies[LB_TRANSPORT_SAME_DEVICE], ==, 0);
  g_assert_cmpuint (st.copies[LB_TRANSPORT_HOST_STAGED], ==, 2 * n_pieces * 6);
  g_assert_cmpuint (st.bytes[LB_TRANSPORT_HOST_STAGED], ==,
      6 * 1 * 2 * 10 * 4 * sizeof (float));
  lb_channel_clear_stats (ch);
  lb_channel_get_stats (ch, &st);
  g_assert_cmpuint (st.copies[LB_TRANSPORT_HOST_STAGED], ==, 0);
  lb_channel_free (ch);
  lb_worker_group_unref (gp);
  lb_worker_group_unref (gc);
}

/* ---- send() convenience and misuse ---- */

static gboolean
send_tensor (LbRank * rank, gpointer data, GError ** error)
{
  Flow *f = data;
  int64_t shape[4] = { 1, 1, 2, 3 };
  g_autoptr (LbTensor) t = lb_tensor_new (LB_DTYPE_F32, 4, shape);
  for (int i = 0; i < 6; i++)
    ((float *) t->data)[i] = elem (0, 0, 0, rank->rank * 2 + i / 3, i % 3);
  GError *e = NULL;
  RCHECK (!lb_channel_commit (f->ch, rank, &e), "commit w/o acquire: ");
  g_clear_error (&e);
  return lb_channel_send (f->ch, rank, t, error);
}

static void
test_send_and_misuse (void)
{
  LbWorkerGroup *gp = test_group_new (2, NULL, 10000, "prod");
  LbWorkerGroup *gc = test_group_new (1, NULL, 10000, "cons");
  Flow f = {.n_messages = 1,.shape = {1, 1, 4, 3} };
  LbChannel *ch = flow_channel (&f, gp, gc, NULL, NULL, 1, 0);
  test_run_two (gp, send_tensor, &f, gc, consume, &f);
  LbChannelStats st;
  lb_channel_get_stats (ch, &st);
  g_assert_cmpuint (st.fill_bytes, ==, 12 * sizeof (float));

  GError *err = NULL;
  /* A producer rank cannot receive; nothing to ack. */
  g_assert_false (lb_worker_group_run (gp, consume_one, &f, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_clear_error (&err);
  lb_channel_free (ch);

  LbChannelConfig bad = {.producer = gp,.consumer = gc,.dtype = LB_DTYPE_F32,
    .ndim = 2,.shape = {4, 4},.shard_dim = 0,.n_slots = 1
  };
  int64_t rows[2] = { 3, 2 };
  bad.producer_rows = rows;
  g_assert_null (lb_channel_new (&bad, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_clear_error (&err);
  lb_worker_group_unref (gp);
  lb_worker_group_unref (gc);
}

/* A failing producer group releases its own ranks blocked in the channel. */
static gboolean
produce_or_fail (LbRank * rank, gpointer data, GError ** error)
{
  Flow *f = data;
  LbTensor band;
  if (rank->rank == 1) {
    g_usleep (50 * 1000);
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE, "producer died");
    return FALSE;
  }
  /* Fill the only slot, then block on the next one. */
  for (int m = 0; m < 2; m++) {
    if (!lb_channel_acquire (f->ch, rank, &band, error) ||
        !lb_channel_commit (f->ch, rank, error))
      return FALSE;
  }
  return TRUE;
}

static void
test_group_abort_releases_channel (void)
{
  LbWorkerGroup *gp = test_group_new (2, NULL, 20000, "prod");
  LbWorkerGroup *gc = test_group_new (1, NULL, 20000, "cons");
  Flow f = {.n_messages = 1,.shape = {1, 1, 4, 3} };
  LbChannel *ch = flow_channel (&f, gp, gc, NULL, NULL, 1, 0);
  GError *err = NULL;
  gint64 t0 = g_get_monotonic_time ();
  g_assert_false (lb_worker_group_run (gp, produce_or_fail, &f, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_true (g_str_has_prefix (err->message, "rank 1: "));
  g_clear_error (&err);
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 2 * 1000 * 1000);
  /* The half-sent message is dropped with cancel + reset. */
  lb_channel_cancel (ch);
  lb_channel_reset (ch, NULL);
  test_run_two (gp, produce, &f, gc, consume, &f);
  lb_channel_free (ch);
  lb_worker_group_unref (gp);
  lb_worker_group_unref (gc);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/comm/channel/ordering", test_ordering);
  g_test_add_func ("/comm/channel/slot-exhaustion", test_slot_exhaustion);
  g_test_add_func ("/comm/channel/cancel-releases-both",
      test_cancel_releases_both);
  g_test_add_func ("/comm/channel/reshard", test_reshard);
  g_test_add_func ("/comm/channel/same-device-zero-copy",
      test_same_device_zero_copy);
  g_test_add_func ("/comm/channel/host-staged-fallback",
      test_host_staged_fallback);
  g_test_add_func ("/comm/channel/send-and-misuse", test_send_and_misuse);
  g_test_add_func ("/comm/channel/group-abort-releases-channel",
      test_group_abort_releases_channel);
  return g_test_run ();
}

/* lingbot-gst: local collectives against a single-rank computation
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Every rank builds its inputs from a formula of (rank, index), so the
 * expected output of each collective is computed on the rank itself as the
 * single-rank reference would; comparisons are exact (pure data movement,
 * integer-valued float sums).
 */
#include "comm-test-util.h"

#define COUNT 1001              /* not a multiple of 2, 3 or 4 */

/* ---- unequal split helpers ---- */

static gsize
a2av_count (int src, int dst)
{
  return (gsize) ((src * 3 + dst * 5) % 4) * 7; /* includes zero */
}

static gsize
agv_count (int r)
{
  return r == 1 ? 0 : (gsize) (r * 13 + 5);
}

static gint64
a2av_value (int src, int dst, gsize k)
{
  return (gint64) src *1000000 + dst * 10000 + (gint64) k;
}

static float
red_value (int r, gsize i)
{
  return (float) ((r + 1) * (int) (i % 97) - 40);
}

/* ---- the rank function ---- */

static gboolean
check_all_to_all (LbRank * rank, GError ** error)
{
  int n = rank->n_ranks, me = rank->rank;
  gsize count = 37;
  g_autofree guint16 *send = g_new (guint16, n * count);
  g_autofree guint16 *recv = g_new0 (guint16, n * count);
  for (int j = 0; j < n; j++)
    for (gsize k = 0; k < count; k++)
      send[j * count + k] = (guint16) (me * 4096 + j * 128 + k);
  if (!lb_comm_all_to_all (rank, LB_DTYPE_BF16, send, recv, count, error))
    return FALSE;
  for (int i = 0; i < n; i++)
    for (gsize k = 0; k < count; k++)
      RCHECK (recv[i * count + k] == (guint16) (i * 4096 + me * 128 + k),
          "all_to_all rank %d from %d at %" G_GSIZE_FORMAT ": ", me, i, k);
  return TRUE;
}

static gboolean
check_all_to_all_v (LbRank * rank, GError ** error)
{
  int n = rank->n_ranks, me = rank->rank;
  gsize scounts[8], sdispls[8], rcounts[8], rdispls[8], stot = 0, rtot = 0;
  for (int j = 0; j < n; j++) {
    scounts[j] = a2av_count (me, j);
    sdispls[j] = stot + 3;      /* gaps between blocks */
    stot += scounts[j] + 3;
    rcounts[j] = a2av_count (j, me);
    rdispls[j] = rtot;
    rtot += rcounts[j];
  }
  g_autofree gint64 *send = g_new0 (gint64, stot + 1);
  g_autofree gint64 *recv = g_new0 (gint64, rtot + 1);
  for (int j = 0; j < n; j++)
    for (gsize k = 0; k < scounts[j]; k++)
      send[sdispls[j] + k] = a2av_value (me, j, k);
  if (!lb_comm_all_to_all_v (rank, LB_DTYPE_I64, send, scounts, sdispls,
          recv, rcounts, rdispls, error))
    return FALSE;
  for (int j = 0; j < n; j++)
    for (gsize k = 0; k < rcounts[j]; k++)
      RCHECK (recv[rdispls[j] + k] == a2av_value (j, me, k),
          "all_to_all_v rank %d from %d: ", me, j);
  return TRUE;
}

static gboolean
check_all_gather (LbRank * rank, GError ** error)
{
  int n = rank->n_ranks, me = rank->rank;
  g_autofree guint8 *send = g_new (guint8, COUNT);
  g_autofree guint8 *recv = g_new0 (guint8, n * COUNT);
  for (gsize k = 0; k < COUNT; k++)
    send[k] = (guint8) (me * 31 + k);
  if (!lb_comm_all_gather (rank, LB_DTYPE_U8, send, recv, COUNT, error))
    return FALSE;
  for (int i = 0; i < n; i++)
    for (gsize k = 0; k < COUNT; k++)
      RCHECK (recv[i * COUNT + k] == (guint8) (i * 31 + k), "all_gather: ");

  /* In place: send is our own block of recv. */
  memset (recv, 0, n * COUNT);
  for (gsize k = 0; k < COUNT; k++)
    recv[me * COUNT + k] = (guint8) (me * 7 + k);
  if (!lb_comm_all_gather (rank, LB_DTYPE_U8, recv + me * COUNT, recv,
          COUNT, error))
    return FALSE;
  for (int i = 0; i < n; i++)
    for (gsize k = 0; k < COUNT; k++)
      RCHECK (recv[i * COUNT + k] == (guint8) (i * 7 + k),
          "all_gather in place: ");
  return TRUE;
}

static gboolean
check_all_gather_v (LbRank * rank, GError ** error)
{
  int n = rank->n_ranks, me = rank->rank;
  gsize rcounts[8], rdispls[8], tot = 0;
  for (int i = 0; i < n; i++) {
    rcounts[i] = agv_count (i);
    rdispls[i] = tot;
    tot += rcounts[i];
  }
  g_autofree gint32 *send = g_new0 (gint32, agv_count (me) + 1);
  g_autofree gint32 *recv = g_new0 (gint32, tot + 1);
  for (gsize k = 0; k < agv_count (me); k++)
    send[k] = me * 100000 + (gint32) k;
  if (!lb_comm_all_gather_v (rank, LB_DTYPE_I32, send, agv_count (me), recv,
          rcounts, rdispls, error))
    return FALSE;
  for (int i = 0; i < n; i++)
    for (gsize k = 0; k < rcounts[i]; k++)
      RCHECK (recv[rdispls[i] + k] == i * 100000 + (gint32) k,
          "all_gather_v: ");
  return TRUE;
}

static gboolean
check_reductions (LbRank * rank, GError ** error)
{
  int n = rank->n_ranks, me = rank->rank;
  g_autofree float *send = g_new (float, n * COUNT);
  g_autofree float *recv = g_new0 (float, n * COUNT);
  for (gsize i = 0; i < (gsize) n * COUNT; i++)
    send[i] = red_value (me, i);

  /* reduce-scatter */
  if (!lb_comm_reduce_scatter (rank, LB_DTYPE_F32, send, recv, COUNT,
          LB_REDUCE_SUM, error))
    return FALSE;
  for (gsize i = 0; i < COUNT; i++) {
    float want = 0;
    for (int r = 0; r < n; r++)
      want += red_value (r, me * COUNT + i);
    RCHECK (recv[i] == want, "reduce_scatter at %" G_GSIZE_FORMAT ": ", i);
  }

  /* all-reduce, out of place then in place */
  if (!lb_comm_all_reduce (rank, LB_DTYPE_F32, send, recv, COUNT,
          LB_REDUCE_SUM, error))
    return FALSE;
  for (gsize i = 0; i < COUNT; i++) {
    float want = 0;
    for (int r = 0; r < n; r++)
      want += red_value (r, i);
    RCHECK (recv[i] == want, "all_reduce at %" G_GSIZE_FORMAT ": ", i);
  }
  if (!lb_comm_all_reduce (rank, LB_DTYPE_F32, send, send, COUNT,
          LB_REDUCE_SUM, error))
    return FALSE;
  RCHECK (memcmp (send, recv, COUNT * sizeof (float)) == 0,
      "all_reduce in place: ");

  /* f64 too, and a count smaller than the rank count */
  double d[2] = { me + 0.5, -me };
  if (!lb_comm_all_reduce (rank, LB_DTYPE_F64, d, d, 2, LB_REDUCE_SUM, error))
    return FALSE;
  RCHECK (d[0] == n * (n - 1) / 2.0 + 0.5 * n && d[1] == -n * (n - 1) / 2.0,
      "all_reduce f64: ");

  /* bf16 sums are refused cleanly */
  GError *e = NULL;
  RCHECK (!lb_comm_all_reduce (rank, LB_DTYPE_BF16, send, send, 1,
          LB_REDUCE_SUM, &e), "bf16 reduction: ");
  RCHECK (g_error_matches (e, LB_ERROR, LB_ERROR_UNSUPPORTED), "bf16: ");
  g_clear_error (&e);
  return TRUE;
}

static gboolean
check_broadcast (LbRank * rank, GError ** error)
{
  int n = rank->n_ranks, me = rank->rank;
  for (int root = 0; root < n; root++) {
    gint64 buf[300];
    for (int k = 0; k < 300; k++)
      buf[k] = me == root ? root * 1000 + k : -1;
    if (!lb_comm_broadcast (rank, LB_DTYPE_I64, buf, 300, root, error))
      return FALSE;
    for (int k = 0; k < 300; k++)
      RCHECK (buf[k] == root * 1000 + k, "broadcast from %d: ", root);
  }
  return TRUE;
}

static gboolean
check_send_recv (LbRank * rank, GError ** error)
{
  int n = rank->n_ranks, me = rank->rank;
  if (n == 1)
    return TRUE;
  /* Halo exchange in a ring, as a group: send to both neighbours, receive
   * from both (for 2 ranks both neighbours are the same peer: two messages
   * that must arrive in order). */
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  gint32 to_next[50], to_prev[50], from_prev[50], from_next[50];
  for (int k = 0; k < 50; k++) {
    to_next[k] = me * 1000 + k;
    to_prev[k] = -(me * 1000 + k);
  }
  if (!lb_comm_group_start (rank, error) ||
      !lb_comm_send (rank, LB_DTYPE_I32, to_next, 50, next, error) ||
      !lb_comm_send (rank, LB_DTYPE_I32, to_prev, 50, prev, error) ||
      !lb_comm_recv (rank, LB_DTYPE_I32, from_prev, 50, prev, error) ||
      !lb_comm_recv (rank, LB_DTYPE_I32, from_next, 50, next, error) ||
      !lb_comm_group_end (rank, error))
    return FALSE;
  for (int k = 0; k < 50; k++) {
    if (n == 2) {
      /* Both messages come from the one peer, in its send order. */
      RCHECK (from_prev[k] == prev * 1000 + k, "p2p order: ");
      RCHECK (from_next[k] == -(next * 1000 + k), "p2p order: ");
    } else {
      RCHECK (from_prev[k] == prev * 1000 + k, "p2p from prev: ");
      RCHECK (from_next[k] == -(next * 1000 + k), "p2p from next: ");
    }
  }

  /* Blocking send/recv between ranks 0 and last, others idle. */
  gint64 v[4] = { 1, 2, 3, 4 };
  if (me == 0) {
    if (!lb_comm_send (rank, LB_DTYPE_I64, v, 4, n - 1, error))
      return FALSE;
  } else if (me == n - 1) {
    gint64 w[4] = { 0 };
    if (!lb_comm_recv (rank, LB_DTYPE_I64, w, 4, 0, error))
      return FALSE;
    RCHECK (memcmp (v, w, sizeof v) == 0, "blocking p2p: ");
  }
  return TRUE;
}

static gboolean
check_group (LbRank * rank, GError ** error)
{
  /* q, k, v all-to-alls + an all-reduce + an all-gather as one group. */
  int n = rank->n_ranks, me = rank->rank;
  gsize count = 64;
  float *buf[3], *out[3];
  for (int t = 0; t < 3; t++) {
    buf[t] = g_new (float, n * count);
    out[t] = g_new0 (float, n * count);
    for (gsize i = 0; i < n * count; i++)
      buf[t][i] = (float) (t * 1000000 + me * 10000 + i);
  }
  float ar[10], ag[8] = { 0 }, mine = (float) me;
  for (int i = 0; i < 10; i++)
    ar[i] = (float) (me * i);
  gboolean ok = lb_comm_group_start (rank, error);
  for (int t = 0; t < 3 && ok; t++)
    ok = lb_comm_all_to_all (rank, LB_DTYPE_F32, buf[t], out[t], count, error);
  ok = ok && lb_comm_all_reduce (rank, LB_DTYPE_F32, ar, ar, 10,
      LB_REDUCE_SUM, error);
  ok = ok && lb_comm_all_gather (rank, LB_DTYPE_F32, &mine, ag, 1, error);
  ok = ok && lb_comm_group_end (rank, error);
  for (int t = 0; t < 3 && ok; t++) {
    for (int i = 0; i < n && ok; i++)
      for (gsize k = 0; k < count && ok; k++)
        ok = out[t][i * count + k] ==
            (float) (t * 1000000 + i * 10000 + me * count + k);
    if (!ok)
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "grouped all_to_all %d wrong", t);
  }
  for (int t = 0; t < 3; t++) {
    g_free (buf[t]);
    g_free (out[t]);
  }
  if (!ok)
    return FALSE;
  for (int i = 0; i < 10; i++)
    RCHECK (ar[i] == (float) (i * n * (n - 1) / 2), "grouped all_reduce: ");
  for (int i = 0; i < n; i++)
    RCHECK (ag[i] == (float) i, "grouped all_gather: ");
  return lb_comm_barrier (rank, error);
}

static gboolean
rank_all (LbRank * rank, gpointer data, GError ** error)
{
  return check_all_to_all (rank, error) && check_all_to_all_v (rank, error)
      && check_all_gather (rank, error) && check_all_gather_v (rank, error)
      && check_reductions (rank, error) && check_broadcast (rank, error)
      && check_send_recv (rank, error) && check_group (rank, error)
      && lb_comm_barrier (rank, error) && lb_comm_synchronize (rank, error);
}

static void
test_collectives (gconstpointer data)
{
  int n = GPOINTER_TO_INT (data);
  LbWorkerGroup *g = test_group_new (n, NULL, 10000, "coll");
  g_assert_cmpstr (lb_comm_backend_name (lb_worker_group_get_rank (g, 0)),
      ==, "local");
  GError *err = NULL;
  /* Twice: state (op lists, mailboxes, scratch) is reused correctly. */
  for (int rep = 0; rep < 2; rep++) {
    gboolean ok = lb_worker_group_run (g, rank_all, NULL, &err);
    g_assert_no_error (err);
    g_assert_true (ok);
  }
  lb_worker_group_unref (g);
}

static gboolean
rank_tensor_wrappers (LbRank * rank, gpointer d, GError ** error)
{
  int64_t shape[3] = { 3, 4, 2 };
  g_autoptr (LbTensor) s = lb_tensor_new (LB_DTYPE_F32, 3, shape);
  g_autoptr (LbTensor) r = lb_tensor_new (LB_DTYPE_F32, 3, shape);
  for (int i = 0; i < 24; i++)
    ((float *) s->data)[i] = (float) (rank->rank * 100 + i);
  if (!lb_comm_all_to_all_tensor (rank, s, r, error))
    return FALSE;
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 8; k++)
      RCHECK (((float *) r->data)[i * 8 + k] ==
          (float) (i * 100 + rank->rank * 8 + k), "a2a tensor: ");
  int64_t one[2] = { 4, 2 };
  g_autoptr (LbTensor) piece = lb_tensor_new (LB_DTYPE_F32, 2, one);
  for (int i = 0; i < 8; i++)
    ((float *) piece->data)[i] = (float) (rank->rank * 10 + i);
  if (!lb_comm_all_gather_tensor (rank, piece, r, error))
    return FALSE;
  for (int i = 0; i < 24; i++)
    RCHECK (((float *) r->data)[i] == (float) ((i / 8) * 10 + i % 8),
        "ag tensor: ");
  return TRUE;
}

static void
test_tensor_wrappers (void)
{
  LbWorkerGroup *g = test_group_new (3, NULL, 10000, "tw");
  GError *err = NULL;
  gboolean ok = lb_worker_group_run (g, rank_tensor_wrappers, NULL, &err);
  g_assert_no_error (err);
  g_assert_true (ok);
  lb_worker_group_unref (g);
}

static void
test_split_rows (void)
{
  int64_t s, c, total = 0;
  int64_t want[4] = { 15, 15, 14, 14 };
  for (int i = 0; i < 4; i++) {
    lb_split_rows (58, 4, i, &s, &c);
    g_assert_cmpint (c, ==, want[i]);
    g_assert_cmpint (s, ==, total);
    total += c;
  }
  lb_split_rows (2, 4, 3, &s, &c);
  g_assert_cmpint (c, ==, 0);
  g_assert_cmpint (s, ==, 2);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  for (int n = 1; n <= 4; n++) {
    char path[64];
    g_snprintf (path, sizeof path, "/comm/collectives/local/%d-ranks", n);
    g_test_add_data_func (path, GINT_TO_POINTER (n), test_collectives);
  }
  g_test_add_func ("/comm/collectives/tensor-wrappers", test_tensor_wrappers);
  g_test_add_func ("/comm/collectives/split-rows", test_split_rows);
  return g_test_run ();
}

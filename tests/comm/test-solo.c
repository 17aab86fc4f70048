/* lingbot-gst: the solo collectives (one rank standing in for rank 0 of N)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A solo group (lb_worker_group_new_solo()) has one rank thread whose
 * LbRank is rank 0 of N.  Its all-to-alls and all-gathers must fill every
 * absent peer's receive slot with exactly as many bytes as that peer would
 * send, copied from the rank's own send buffers (the send block for that
 * peer, else the longest one, repeated when too short), and count them;
 * the operations without a stand-in fail with exact messages.  On the
 * emulated device the bytes move as device-to-device copies, with no
 * stream synchronisation (the class is stream ordered).
 */
#include "comm-test-util.h"
#include "fakedev.h"

#define N_WORLD 4
#define PIECE 7                 /* elements per token of one head shard */

/* Rank 0 of 4 with bands of 3, 3, 2, 2 tokens: the q/k/v exchange sends
 * 3 tokens to every peer and receives each peer's band; the output
 * exchange the reverse. */
static const gsize band[N_WORLD] = { 3, 3, 2, 2 };

typedef struct
{
  LbBackend *be;
  guint64 moved_expected;
} SoloArgs;

/* Buffers on the rank's device: host arrays on the CPU, uploaded device
 * tensors otherwise.  @host is what the test reads and writes. */
typedef struct
{
  LbStream *s;
  gboolean dev;
  LbTensor *host, *buf;
} Buf;

static gboolean
buf_init (Buf * b, LbStream * s, gsize n, GError ** error)
{
  int64_t shape[1] = { (int64_t) n };
  b->s = s;
  b->dev = s->backend->device_type != LB_DEVICE_CPU;
  b->host = lb_tensor_new (LB_DTYPE_F32, 1, shape);
  for (gsize i = 0; i < n; i++)
    ((float *) b->host->data)[i] = -1.0f;
  b->buf = b->host;
  if (b->dev) {
    b->buf = lb_tensor_new_on (s, LB_DTYPE_F32, 1, shape, error);
    if (b->buf == NULL)
      return FALSE;
  }
  return TRUE;
}

static gboolean
buf_put (Buf * b, GError ** error)
{
  return !b->dev || (lb_tensor_upload (b->s, b->buf, b->host, error) &&
      b->s->backend->stream_synchronize (b->s, error));
}

static gboolean
buf_get (Buf * b, GError ** error)
{
  return !b->dev || lb_tensor_download (b->s, b->host, b->buf, error);
}

static void
buf_clear (Buf * b)
{
  if (b->dev)
    lb_tensor_free (b->buf);
  lb_tensor_free (b->host);
}

static float
hv (const Buf * b, gsize i)
{
  return ((const float *) b->host->data)[i];
}

static gboolean
check_exchanges (LbRank * rank, gpointer data, GError ** error)
{
  SoloArgs *a = data;
  RCHECK (rank->rank == 0 && rank->n_ranks == N_WORLD,
      "rank %d of %d: ", rank->rank, rank->n_ranks);
  const int R = N_WORLD;
  gsize sc[N_WORLD], sd[N_WORLD], rc[N_WORLD], rd[N_WORLD];
  gsize send_n = 0, recv_n = 0;
  for (int j = 0; j < R; j++) {
    sc[j] = band[0] * PIECE;
    sd[j] = send_n;
    send_n += sc[j];
    rc[j] = band[j] * PIECE;
    rd[j] = recv_n;
    recv_n += rc[j];
  }
  Buf send = { 0 }, recv = { 0 }, out = { 0 };
  gboolean ok = buf_init (&send, rank->stream, send_n, error) &&
      buf_init (&recv, rank->stream, recv_n, error) &&
      buf_init (&out, rank->stream, send_n, error);
  for (gsize i = 0; ok && i < send_n; i++)
    ((float *) send.host->data)[i] = (float) i;
  const FakeDevStats st0 = fakedev_stats ();
  ok = ok && buf_put (&send, error) && buf_put (&recv, error) &&
      buf_put (&out, error);
  const FakeDevStats st1 = fakedev_stats ();
  /* q/k/v direction: block j of recv is the first rc[j] elements of the
   * send block for j */
  ok = ok && lb_comm_all_to_all_v (rank, LB_DTYPE_F32, send.buf->data, sc,
      sd, recv.buf->data, rc, rd, error);
  /* output direction: receive 3 tokens from every peer while sending
   * each its band; the send blocks for peers 2 and 3 are shorter than
   * their slots, which then come from the longest send block */
  ok = ok && lb_comm_all_to_all_v (rank, LB_DTYPE_F32, recv.buf->data, rc,
      rd, out.buf->data, sc, sd, error);
  const FakeDevStats st2 = fakedev_stats ();
  ok = ok && buf_get (&recv, error) && buf_get (&out, error);
  if (!ok)
    goto done;
  if (send.dev) {
    /* one copy per nonempty slot (4 + 4), none synchronised */
    RCHECK (st2.n_d2d - st1.n_d2d == 8 && st2.n_syncs == st1.n_syncs &&
        st2.bad == st0.bad, "device copies %d, syncs %d, bad %d: ",
        st2.n_d2d - st1.n_d2d, st2.n_syncs - st1.n_syncs, st2.bad - st0.bad);
  }
  for (int j = 0; j < R; j++)
    for (gsize k = 0; k < rc[j]; k++)
      RCHECK (hv (&recv, rd[j] + k) == (float) (sd[j] + k),
          "q/k/v slot %d element %" G_GSIZE_FORMAT ": ", j, k);
  for (int j = 0; j < R; j++) {
    /* the output of slot j: rank 0's own block, peer 1's block, then
     * the first longest block, rank 0's own, for the shorter peers 2, 3 */
    const int from = j == 1 ? 1 : 0;
    for (gsize k = 0; k < sc[j]; k++)
      RCHECK (hv (&out, sd[j] + k) == hv (&recv, rd[from] + k),
          "output slot %d element %" G_GSIZE_FORMAT ": ", j, k);
  }
  a->moved_expected += (recv_n - rc[0] + send_n - sc[0]) * sizeof (float);
done:
  buf_clear (&send);
  buf_clear (&recv);
  buf_clear (&out);
  return ok;
}

static gboolean
check_gathers (LbRank * rank, gpointer data, GError ** error)
{
  SoloArgs *a = data;
  const int R = N_WORLD;
  /* all_gather in place: slot 0 is the rank's own, slots 1..3 its copies */
  const gsize count = 5;
  Buf g = { 0 }, v = { 0 };
  gboolean ok = buf_init (&g, rank->stream, R * count, error);
  for (gsize i = 0; ok && i < count; i++)
    ((float *) g.host->data)[i] = 10.0f + (float) i;
  ok = ok && buf_put (&g, error) && lb_comm_all_gather (rank, LB_DTYPE_F32,
      g.buf->data, g.buf->data, count, error) && buf_get (&g, error);
  for (int j = 0; ok && j < R; j++)
    for (gsize k = 0; k < count; k++)
      RCHECK (hv (&g, j * count + k) == 10.0f + (float) k,
          "all_gather slot %d element %" G_GSIZE_FORMAT ": ", j, k);
  /* all_gather_v with a slot longer than the contribution: repeated */
  gsize rc[N_WORLD] = { 3, 7, 0, 2 }, rd[N_WORLD] = { 0, 3, 10, 10 };
  ok = ok && buf_init (&v, rank->stream, 12, error) && buf_put (&v, error)
      && lb_comm_all_gather_v (rank, LB_DTYPE_F32, g.buf->data, 3,
      v.buf->data, rc, rd, error) && buf_get (&v, error);
  const float want[12] = { 10, 11, 12, 10, 11, 12, 10, 11, 12, 10, 10, 11 };
  for (int i = 0; ok && i < 12; i++)
    RCHECK (hv (&v, i) == want[i], "all_gather_v element %d = %g: ", i,
        hv (&v, i));
  a->moved_expected += (3 * count + 7 + 2) * sizeof (float);
  buf_clear (&g);
  buf_clear (&v);
  return ok;
}

/* The operations without a stand-in, and the group bracket. */
static gboolean
check_refusals (LbRank * rank, gpointer data, GError ** error)
{
  float x[4] = { 0 };
  GError *e = NULL;
  RCHECK (lb_comm_broadcast (rank, LB_DTYPE_F32, x, 4, 0, error),
      "broadcast from rank 0: ");
  RCHECK (!lb_comm_broadcast (rank, LB_DTYPE_F32, x, 4, 2, &e) &&
      g_error_matches (e, LB_ERROR, LB_ERROR_UNSUPPORTED) &&
      g_str_equal (e->message, "solo collectives: a broadcast from another "
          "rank needs data only the other ranks have (a solo rank stands in "
          "for rank 0 in all-to-all and all-gather only)"), "broadcast: ");
  g_clear_error (&e);
  RCHECK (!lb_comm_all_reduce (rank, LB_DTYPE_F32, x, x, 4, LB_REDUCE_SUM,
          &e) && g_error_matches (e, LB_ERROR, LB_ERROR_UNSUPPORTED) &&
      g_str_has_prefix (e->message, "solo collectives: all_reduce needs "),
      "all_reduce: ");
  g_clear_error (&e);
  RCHECK (!lb_comm_send (rank, LB_DTYPE_F32, x, 4, 1, &e) &&
      g_error_matches (e, LB_ERROR, LB_ERROR_UNSUPPORTED), "send: ");
  g_clear_error (&e);
  RCHECK (lb_comm_group_start (rank, error) &&
      !lb_comm_group_start (rank, &e) && g_str_equal (e->message,
          "group_start: rank 0 is already inside a group") &&
      lb_comm_group_end (rank, error) && lb_comm_barrier (rank, error) &&
      lb_comm_synchronize (rank, error), "group: ");
  g_clear_error (&e);
  return TRUE;
}

static void
run_solo (LbBackend * be)
{
  g_autoptr (GError) err = NULL;
  LbWorkerGroupOptions go = {.name = "solo-test" };
  LbWorkerGroup *g = lb_worker_group_new_solo (be, 0, N_WORLD, &go, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lb_worker_group_get_n_ranks (g), ==, 1);
  g_assert_cmpint (lb_worker_group_get_rank (g, 0)->n_ranks, ==, N_WORLD);
  SoloArgs a = { be, 0 };
  g_assert_true (lb_worker_group_run (g, check_exchanges, &a, &err));
  g_assert_no_error (err);
  g_assert_true (lb_worker_group_run (g, check_gathers, &a, &err));
  g_assert_no_error (err);
  g_assert_true (lb_worker_group_run (g, check_refusals, &a, &err));
  g_assert_no_error (err);
  /* q/k/v: 21 + 14 + 14 floats from the peers, output 3 x 21 */
  g_assert_cmpuint (a.moved_expected, ==, (49 + 63 + 24) * 4);
  g_assert_cmpuint (lb_solo_collectives_get_moved (g), ==, a.moved_expected);
  lb_worker_group_unref (g);
}

static void
test_cpu (void)
{
  run_solo (lb_cpu_backend ());
}

static void
test_fakedev (void)
{
  run_solo (fakedev_backend ());
  g_assert_cmpint (fakedev_stats ().bad, ==, 0);
}

static void
test_invalid (void)
{
  g_autoptr (GError) err = NULL;
  g_assert_null (lb_worker_group_new_solo (lb_cpu_backend (), 0, 1, NULL,
          &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, "worker group: a solo rank stands in "
      "for rank 0 of 2..64 ranks (got 1)");
  g_clear_error (&err);
  g_assert_null (lb_worker_group_new_solo (lb_cpu_backend (), 0, 65, NULL,
          &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_clear_error (&err);
  /* the solo class on an ordinary group of two rank threads */
  LbWorkerGroupOptions go = {.collectives = lb_solo_collectives () };
  g_assert_null (lb_worker_group_new (lb_cpu_backend (), 2, NULL, &go, &err));
  g_assert_cmpstr (err->message, ==, "worker group group: solo "
      "collectives: the group has 2 rank threads, expected one");
  /* an ordinary group has moved nothing */
  LbWorkerGroup *g = test_group_new (1, NULL, 0, "plain");
  g_assert_cmpuint (lb_solo_collectives_get_moved (g), ==, 0);
  lb_worker_group_unref (g);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/comm/solo/cpu", test_cpu);
  g_test_add_func ("/comm/solo/fakedev", test_fakedev);
  g_test_add_func ("/comm/solo/invalid", test_invalid);
  return g_test_run ();
}

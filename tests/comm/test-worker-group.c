/* lingbot-gst: worker group lifecycle, errors, abort
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "comm-test-util.h"

static gboolean
rank_count (LbRank * rank, gpointer data, GError ** error)
{
  gint *counters = data;
  g_atomic_int_inc (&counters[rank->rank]);
  RCHECK (rank->stream != NULL && rank->stream->backend == rank->backend,
      "stream: ");
  return TRUE;
}

static void
test_run_and_queue (void)
{
  LbWorkerGroup *g = test_group_new (3, NULL, 5000, "q");
  gint counters[3] = { 0 };
  GError *err = NULL;
  g_assert_cmpint (lb_worker_group_get_n_ranks (g), ==, 3);
  g_assert_cmpint (lb_worker_group_get_rank (g, 2)->device, ==, 2);
  g_assert_true (lb_worker_group_run (g, rank_count, counters, &err));
  g_assert_true (lb_worker_group_run_on (g, 1, rank_count, counters, &err));
  g_assert_no_error (err);
  g_assert_cmpint (counters[0], ==, 1);
  g_assert_cmpint (counters[1], ==, 2);
  g_assert_cmpint (counters[2], ==, 1);

  /* Many more jobs than queue slots on one job record: the submitter
   * waits for space, slots are reused, nothing is lost. */
  LbWorkerJob job = LB_WORKER_JOB_INIT;
  for (int i = 0; i < 1000; i++)
    g_assert_true (lb_worker_group_submit (g, &job, i % 4 == 3 ? -1 : i % 3,
            rank_count, counters, &err));
  g_assert_true (lb_worker_group_wait (g, &job, &err));
  g_assert_no_error (err);
  g_assert_cmpint (counters[0] + counters[1] + counters[2], ==,
      4 + 750 + 250 * 3);

  g_assert_false (lb_worker_group_submit (g, &job, 3, rank_count, counters,
          &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_clear_error (&err);
  lb_worker_group_unref (g);
}

static gboolean
rank_fail_on_1 (LbRank * rank, gpointer data, GError ** error)
{
  if (rank->rank == 1) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE, "bad shape on purpose");
    return FALSE;
  }
  return TRUE;
}

static void
test_error_has_rank (void)
{
  LbWorkerGroup *g = test_group_new (3, NULL, 5000, "err");
  GError *err = NULL;
  g_assert_false (lb_worker_group_run (g, rank_fail_on_1, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_true (g_str_has_prefix (err->message, "rank 1: "));
  g_clear_error (&err);
  /* Recovered: the next run works. */
  gint counters[3] = { 0 };
  g_assert_true (lb_worker_group_run (g, rank_count, counters, &err));
  g_assert_no_error (err);
  g_assert_false (lb_worker_group_is_aborted (g));
  lb_worker_group_unref (g);
}

typedef struct
{
  gint64 t_end[4];
  int codes[4];
} FailData;

static gboolean
rank_fail_mid_all_to_all (LbRank * rank, gpointer data, GError ** error)
{
  FailData *fd = data;
  float send[4 * 16] = { 0 }, recv[4 * 16];
  /* Everyone exchanges once successfully first. */
  if (!lb_comm_all_to_all (rank, LB_DTYPE_F32, send, recv, 16, error))
    return FALSE;
  if (rank->rank == 2) {
    g_usleep (50 * 1000);       /* the others are inside the exchange now */
    fd->t_end[2] = g_get_monotonic_time ();
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE, "injected failure");
    return FALSE;
  }
  GError *e = NULL;
  gboolean ok = lb_comm_all_to_all (rank, LB_DTYPE_F32, send, recv, 16, &e);
  fd->t_end[rank->rank] = g_get_monotonic_time ();
  fd->codes[rank->rank] = ok ? -1 : e->code;
  if (!ok)
    g_propagate_error (error, e);
  return ok;
}

static gboolean
rank_collect_ok (LbRank * rank, gpointer data, GError ** error)
{
  float v = 1.0f;
  if (!lb_comm_all_reduce (rank, LB_DTYPE_F32, &v, &v, 1, LB_REDUCE_SUM, error))
    return FALSE;
  RCHECK (v == (float) rank->n_ranks, "sum after recovery: ");
  return lb_comm_barrier (rank, error);
}

static void
test_rank_fails_mid_collective (void)
{
  /* A 2 s timeout bounds the test; the abort flag must release the others
   * long before it. */
  LbWorkerGroup *g = test_group_new (4, NULL, 2000, "fail");
  FailData fd = { 0 };
  GError *err = NULL;
  gint64 t0 = g_get_monotonic_time ();
  g_assert_false (lb_worker_group_run (g, rank_fail_mid_all_to_all, &fd, &err));
  gint64 dt = g_get_monotonic_time () - t0;
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_true (g_str_has_prefix (err->message, "rank 2: "));
  g_assert_nonnull (strstr (err->message, "injected failure"));
  g_clear_error (&err);
  for (int r = 0; r < 4; r++) {
    if (r == 2)
      continue;
    g_assert_cmpint (fd.codes[r], ==, LB_ERROR_RANK_FAILED);
    /* released promptly, not by the 2 s timeout */
    g_assert_cmpint (fd.t_end[r] - fd.t_end[2], <, 500 * 1000);
  }
  g_assert_cmpint (dt, <, 1500 * 1000);

  /* The group stays usable after recovering. */
  g_assert_true (lb_worker_group_run (g, rank_collect_ok, NULL, &err));
  g_assert_no_error (err);
  lb_worker_group_unref (g);
}

static gboolean
rank_skip_barrier (LbRank * rank, gpointer data, GError ** error)
{
  if (rank->rank == 0)
    return TRUE;                /* never joins: the others must time out */
  return lb_comm_barrier (rank, error);
}

static void
test_timeout (void)
{
  LbWorkerGroup *g = test_group_new (3, NULL, 300, "tmo");
  GError *err = NULL;
  gint64 t0 = g_get_monotonic_time ();
  g_assert_false (lb_worker_group_run (g, rank_skip_barrier, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_TIMEOUT);
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 2 * 1000 * 1000);
  g_clear_error (&err);
  g_assert_true (lb_worker_group_run (g, rank_collect_ok, NULL, &err));
  g_assert_no_error (err);
  lb_worker_group_unref (g);
}

static gboolean
rank_block_in_barrier (LbRank * rank, gpointer data, GError ** error)
{
  gint *entered = data;
  g_atomic_int_inc (entered);
  if (rank->rank == 0) {
    /* Poll for the abort, as long computations should. */
    while (lb_rank_check_abort (rank, error))
      g_usleep (1000);
    return FALSE;
  }
  return lb_comm_barrier (rank, error);
}

static void
test_cancel_and_shutdown (void)
{
  LbWorkerGroup *g = test_group_new (3, NULL, 20000, "cancel");
  gint entered = 0;
  GError *err = NULL;
  LbWorkerJob job = LB_WORKER_JOB_INIT;
  g_assert_true (lb_worker_group_submit (g, &job, -1, rank_block_in_barrier,
          &entered, &err));
  while (g_atomic_int_get (&entered) < 3)
    g_usleep (1000);
  g_usleep (20000);
  gint64 t0 = g_get_monotonic_time ();
  lb_worker_group_cancel (g);
  g_assert_false (lb_worker_group_wait (g, &job, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 1000 * 1000);
  g_clear_error (&err);
  g_assert_true (lb_worker_group_run (g, rank_collect_ok, NULL, &err));
  g_assert_no_error (err);

  /* After shutdown every submit fails cleanly. */
  lb_worker_group_shutdown (g);
  lb_worker_group_shutdown (g);
  g_assert_false (lb_worker_group_run (g, rank_collect_ok, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
  g_clear_error (&err);
  lb_worker_group_unref (g);
}

static void
test_bad_args (void)
{
  GError *err = NULL;
  g_assert_null (lb_worker_group_new (lb_cpu_backend (), 0, NULL, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_clear_error (&err);
  g_assert_true (lb_collectives_lookup (LB_DEVICE_CPU) ==
      lb_collectives_lookup (LB_DEVICE_CUDA));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/comm/worker-group/run-and-queue", test_run_and_queue);
  g_test_add_func ("/comm/worker-group/error-has-rank", test_error_has_rank);
  g_test_add_func ("/comm/worker-group/rank-fails-mid-collective",
      test_rank_fails_mid_collective);
  g_test_add_func ("/comm/worker-group/timeout", test_timeout);
  g_test_add_func ("/comm/worker-group/cancel-and-shutdown",
      test_cancel_and_shutdown);
  g_test_add_func ("/comm/worker-group/bad-args", test_bad_args);
  return g_test_run ();
}

/* lingbot-gst: worker group lifecycle, errors, abort
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "comm-test-util.h"
#include "comm/comm-private.h"

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

/* ---- a rank that stops answering ---- */

/* A rank that never returns until the test opens the gate: a kernel,
 * driver call or collective stuck for good. */
typedef struct
{
  GMutex lock;
  GCond cond;
  gboolean open;
  int stuck_rank;
  gint entered;                 /* atomic: ranks inside the job */
  gint returned;                /* atomic: the stuck rank came back */
} Gate;

static void
gate_block (Gate * gate)
{
  g_mutex_lock (&gate->lock);
  while (!gate->open)
    g_cond_wait (&gate->cond, &gate->lock);
  g_mutex_unlock (&gate->lock);
  g_atomic_int_set (&gate->returned, 1);
}

static void
gate_open (Gate * gate)
{
  g_mutex_lock (&gate->lock);
  gate->open = TRUE;
  g_cond_broadcast (&gate->cond);
  g_mutex_unlock (&gate->lock);
}

/* the stuck rank blocks before the barrier, the others wait in it */
static gboolean
rank_stuck_or_barrier (LbRank * rank, gpointer data, GError ** error)
{
  Gate *gate = data;
  g_atomic_int_inc (&gate->entered);
  if (rank->rank == gate->stuck_rank) {
    gate_block (gate);
    return TRUE;
  }
  return lb_comm_barrier (rank, error);
}

static gboolean
rank_stuck_alone (LbRank * rank, gpointer data, GError ** error)
{
  Gate *gate = data;
  g_atomic_int_inc (&gate->entered);
  if (rank->rank == gate->stuck_rank)
    gate_block (gate);
  return TRUE;
}

typedef struct
{
  LbWorkerGroup *group;
  LbWorkerJob job;
  GError *error;
  gboolean ok;
  gboolean shutdown;            /* lb_worker_group_shutdown() instead */
  gint done;                    /* atomic */
} BoundedWait;

static gpointer
bounded_wait_thread (gpointer data)
{
  BoundedWait *w = data;
  if (w->shutdown)
    lb_worker_group_shutdown (w->group);
  else
    w->ok = lb_worker_group_wait (w->group, &w->job, &w->error);
  g_atomic_int_set (&w->done, 1);
  return NULL;
}

/* Waits for @w->job (or shuts the group down) on a thread of its own;
 * fails the test (instead of hanging it) when that has not returned after
 * @bound_ms. */
static void
wait_bounded (BoundedWait * w, guint bound_ms, const char *what)
{
  GThread *t = g_thread_new ("bounded-wait", bounded_wait_thread, w);
  const gint64 end = g_get_monotonic_time () + bound_ms * 1000;
  while (!g_atomic_int_get (&w->done)) {
    if (g_get_monotonic_time () > end)
      g_error ("%s: still waiting after %u ms (hangs)", what, bound_ms);
    g_usleep (5000);
  }
  g_thread_join (t);
}

/* Rank 1 never returns while rank 0 waits for it in a barrier: rank 0
 * times out (T), the group gives rank 1 another T and abandons it; the
 * wait returns at about 2 T with a timeout naming the stuck rank and the
 * operation, the group is broken for good, and rank 1 coming back later
 * touches nothing of the job it was abandoned in. */
static void
test_stuck_rank (void)
{
  LbWorkerGroup *g = test_group_new (2, NULL, 300, "stuck");
  Gate gate = {.stuck_rank = 1 };
  BoundedWait w = {.group = g };
  GError *err = NULL;

  g_mutex_init (&gate.lock);
  g_cond_init (&gate.cond);
  const gint64 t0 = g_get_monotonic_time ();
  g_assert_true (lb_worker_group_submit (g, &w.job, -1,
          rank_stuck_or_barrier, &gate, &err));
  wait_bounded (&w, 5000, "a group op with a stuck rank");
  const gint64 dt = g_get_monotonic_time () - t0;
  g_assert_false (w.ok);
  g_assert_error (w.error, LB_ERROR, LB_ERROR_TIMEOUT);
  g_assert_cmpstr (w.error->message, ==, "worker group stuck: rank 1 "
      "stopped answering (still busy 300 ms after the group aborted; the "
      "group is broken and its threads abandoned): rank 0: barrier: no "
      "progress within 300 ms (worker group stuck), waiting for rank 1");
  g_clear_error (&w.error);
  /* the barrier's timeout, then the grace: 2 T, well before the guard */
  g_assert_cmpint (dt, >=, 2 * 300 * 1000);
  g_assert_cmpint (dt, <, 2 * 300 * 1000 + 1500 * 1000);
  g_assert_true (lb_worker_group_is_broken (g));
  g_assert_cmpint (w.job.pending, ==, 0);

  /* broken for good: nothing runs on it any more */
  g_assert_false (lb_worker_group_run (g, rank_collect_ok, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_RANK_FAILED);
  g_assert_cmpstr (err->message, ==, "worker group stuck is broken: a rank "
      "stopped answering and was abandoned; it runs no more jobs");
  g_clear_error (&err);

  /* the stuck call returns at last: the thread leaves without touching
   * the job record, whose waiter is long gone */
  w.job.pending = 4242;
  gate_open (&gate);
  while (!g_atomic_int_get (&gate.returned))
    g_usleep (1000);
  g_usleep (100 * 1000);
  g_assert_cmpint (w.job.pending, ==, 4242);
  g_assert_null (w.job.error);

  /* the last reference joins the healthy rank and returns (the group is
   * leaked, not freed under the abandoned thread) */
  const gint64 t1 = g_get_monotonic_time ();
  lb_worker_group_unref (g);
  g_assert_cmpint (g_get_monotonic_time () - t1, <, 1000 * 1000);
}

/* A rank stuck in a job nobody waits on in a collective: nothing times
 * out by itself.  Dropping the last reference (a shutdown) still returns
 * within the group's timeout: the rank is abandoned, the group broken. */
static void
test_stuck_shutdown (void)
{
  LbWorkerGroup *g = test_group_new (2, NULL, 300, "stuck-sd");
  static Gate gate = {.stuck_rank = 0 };
  LbWorkerJob job = LB_WORKER_JOB_INIT;
  GError *err = NULL;

  g_assert_true (lb_worker_group_submit (g, &job, -1, rank_stuck_alone,
          &gate, &err));
  while (g_atomic_int_get (&gate.entered) < 2)
    g_usleep (1000);
  BoundedWait sd = {.group = g,.shutdown = TRUE };
  const gint64 t0 = g_get_monotonic_time ();
  wait_bounded (&sd, 5000, "a shutdown with a stuck rank");
  const gint64 dt = g_get_monotonic_time () - t0;
  g_assert_cmpint (dt, >=, 300 * 1000);
  g_assert_cmpint (dt, <, 300 * 1000 + 1500 * 1000);
  g_assert_true (lb_worker_group_is_broken (g));
  /* the job completed with the abandonment (rank 1 came back cancelled) */
  g_assert_false (lb_worker_group_wait (g, &job, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_TIMEOUT);
  g_assert_true (g_str_has_prefix (err->message, "worker group stuck-sd: "
          "rank 0 stopped answering (still busy 300 ms after the group "
          "aborted; the group is broken and its threads abandoned)"));
  g_clear_error (&err);
  lb_worker_group_unref (g);
  /* rank 0 stays blocked for the rest of the process: abandoned */
}

/* lb_worker_group_cancel_after(): a job that polls the abort flag ends
 * with the cancel at the deadline and the group recovers; a rank that
 * never returns is abandoned one group timeout after the deadline (a stop
 * that must return whatever the ranks do). */
static void
test_cancel_after (void)
{
  LbWorkerGroup *g = test_group_new (3, NULL, 300, "cafter");
  gint entered = 0;
  GError *err = NULL;
  LbWorkerJob job = LB_WORKER_JOB_INIT;

  /* nothing running: a no-op */
  lb_worker_group_cancel_after (g, 1);
  g_usleep (20 * 1000);
  g_assert_true (lb_worker_group_run (g, rank_collect_ok, NULL, &err));
  g_assert_no_error (err);

  g_assert_true (lb_worker_group_submit (g, &job, -1, rank_block_in_barrier,
          &entered, &err));
  gint64 t0 = g_get_monotonic_time ();
  lb_worker_group_cancel_after (g, 100);
  g_assert_false (lb_worker_group_wait (g, &job, &err));
  gint64 dt = g_get_monotonic_time () - t0;
  g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
  g_clear_error (&err);
  g_assert_cmpint (dt, >=, 100 * 1000);
  g_assert_cmpint (dt, <, 1000 * 1000);
  g_assert_false (lb_worker_group_is_broken (g));
  g_assert_true (lb_worker_group_run (g, rank_collect_ok, NULL, &err));
  g_assert_no_error (err);

  static Gate gate = {.stuck_rank = 2 };
  BoundedWait w = {.group = g };
  g_assert_true (lb_worker_group_submit (g, &w.job, -1, rank_stuck_alone,
          &gate, &err));
  t0 = g_get_monotonic_time ();
  lb_worker_group_cancel_after (g, 100);
  wait_bounded (&w, 5000, "a cancel_after with a stuck rank");
  dt = g_get_monotonic_time () - t0;
  g_assert_false (w.ok);
  g_assert_error (w.error, LB_ERROR, LB_ERROR_TIMEOUT);
  g_assert_cmpstr (w.error->message, ==, "worker group cafter: rank 2 "
      "stopped answering (still busy 300 ms after the group aborted; the "
      "group is broken and its threads abandoned)");
  g_clear_error (&w.error);
  g_assert_cmpint (dt, >=, (100 + 300) * 1000);
  g_assert_cmpint (dt, <, (100 + 300 + 1500) * 1000);
  g_assert_true (lb_worker_group_is_broken (g));
  lb_worker_group_unref (g);
}

/* ---- the abort notifies get the root cause ---- */

typedef struct
{
  int calls;
  GError *why;                  /* a copy of the last call's, or NULL */
  LbWorkerGroup *group;         /* set: record whether it was broken */
  gboolean broken;              /* the group was broken at the last call */
} NotifyLog;

static void
on_abort (gpointer data, const GError * why)
{
  NotifyLog *log = data;
  log->calls++;
  g_clear_error (&log->why);
  log->why = why ? g_error_copy (why) : NULL;
  if (log->group)
    log->broken = lb_worker_group_is_broken (log->group);
}

static gboolean
rank_wait_for_cancel (LbRank * rank, gpointer data, GError ** error)
{
  gint *entered = data;
  g_atomic_int_inc (entered);
  while (lb_rank_check_abort (rank, error))
    g_usleep (1000);
  return FALSE;
}

/* A notify learns why the group aborted as it aborts: the failing rank's
 * own error with its "rank N: " prefix (once, not the other ranks'
 * "rank N failed" echoes), the timeout of a rank waiting for a peer
 * (naming the op and the peer), nothing for a cancel; none after its
 * removal. */
static void
test_abort_notify_why (void)
{
  LbWorkerGroup *g = test_group_new (3, NULL, 300, "why");
  NotifyLog log = { 0 };
  GError *err = NULL;
  LbWorkerJob job = LB_WORKER_JOB_INIT;
  gint entered = 0;

  lb_worker_group_add_abort_notify (g, on_abort, &log);

  /* a rank fails: its error, while the others are released */
  g_assert_false (lb_worker_group_run (g, rank_fail_on_1, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_clear_error (&err);
  g_assert_cmpint (log.calls, ==, 1);
  g_assert_error (log.why, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpstr (log.why->message, ==, "rank 1: bad shape on purpose");

  /* a rank times out waiting for a peer that never comes: the timeout */
  g_assert_false (lb_worker_group_run_on (g, 2, rank_collect_ok, NULL, &err));
  g_clear_error (&err);
  g_assert_cmpint (log.calls, ==, 2);
  g_assert_error (log.why, LB_ERROR, LB_ERROR_TIMEOUT);
  g_assert_cmpstr (log.why->message, ==, "rank 2: all_reduce (publish): no "
      "progress within 300 ms (worker group why), waiting for ranks 0, 1");

  /* a cancel: no error */
  g_assert_true (lb_worker_group_submit (g, &job, -1, rank_wait_for_cancel,
          &entered, &err));
  while (g_atomic_int_get (&entered) < 3)
    g_usleep (1000);
  lb_worker_group_cancel (g);
  g_assert_false (lb_worker_group_wait (g, &job, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
  g_clear_error (&err);
  g_assert_cmpint (log.calls, ==, 3);
  g_assert_null (log.why);

  /* removed: no more calls */
  lb_worker_group_remove_abort_notify (g, &log);
  g_assert_false (lb_worker_group_run (g, rank_fail_on_1, NULL, &err));
  g_clear_error (&err);
  g_assert_cmpint (log.calls, ==, 3);
  lb_worker_group_unref (g);
}

/* Rank 1 stuck, rank 0 times out waiting for it: the notify gets rank
 * 0's timeout when the group aborts, a group timeout before the waiter
 * gives up on rank 1 (the group is not broken yet), while the wait
 * returns the abandonment. */
static void
test_abort_notify_stuck (void)
{
  LbWorkerGroup *g = test_group_new (2, NULL, 300, "stuckwhy");
  static Gate gate = {.stuck_rank = 1 };
  NotifyLog log = {.group = g };
  BoundedWait w = {.group = g };
  GError *err = NULL;

  lb_worker_group_add_abort_notify (g, on_abort, &log);
  g_assert_true (lb_worker_group_submit (g, &w.job, -1,
          rank_stuck_or_barrier, &gate, &err));
  wait_bounded (&w, 5000, "a group op with a stuck rank");
  g_assert_error (w.error, LB_ERROR, LB_ERROR_TIMEOUT);
  g_assert_true (g_str_has_prefix (w.error->message, "worker group "
          "stuckwhy: rank 1 stopped answering"));
  g_clear_error (&w.error);
  g_assert_true (lb_worker_group_is_broken (g));
  g_assert_cmpint (log.calls, ==, 1);
  g_assert_false (log.broken);
  g_assert_error (log.why, LB_ERROR, LB_ERROR_TIMEOUT);
  g_assert_cmpstr (log.why->message, ==, "rank 0: barrier: no progress "
      "within 300 ms (worker group stuckwhy), waiting for rank 1");
  g_clear_error (&log.why);
  lb_worker_group_remove_abort_notify (g, &log);
  lb_worker_group_unref (g);
  /* rank 1 stays blocked for the rest of the process: abandoned */
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
  g_test_add_func ("/comm/worker-group/stuck-rank", test_stuck_rank);
  g_test_add_func ("/comm/worker-group/stuck-shutdown", test_stuck_shutdown);
  g_test_add_func ("/comm/worker-group/cancel-after", test_cancel_after);
  g_test_add_func ("/comm/worker-group/abort-notify-why",
      test_abort_notify_why);
  g_test_add_func ("/comm/worker-group/abort-notify-stuck",
      test_abort_notify_stuck);
  return g_test_run ();
}

/* lingbot-gst: one ordering of device collectives per device
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Two worker groups on the same devices, the DiT's "dit" and a decoder's
 * "decode", run collectives from their own threads with no order between
 * them.  With NCCL (here its CPU model, tests/common/nccl-model.c: a
 * collective holds its device until every rank of its communicator set
 * has arrived) on both, a schedule where "dit" reaches device 0 first and
 * "decode" device 1 first deadlocks.  lb_worker_group_new() gives the
 * device collectives to the first live group on a device and the local
 * ones to a later default group sharing a device, so the same schedule
 * completes, with the gathered values exact.
 */
#include "comm-test-util.h"
#include "fakedev.h"
#include "nccl-model.h"

#define COUNT 5
#define WAIT_MS 10000           /* the schedule's own hang guard */

typedef struct
{
  GMutex lock;
  GCond cond;
  gboolean dit1_issuing, decode1_issuing;
  gboolean decode_native;       /* "decode" got the device collectives */
} Schedule;

static Schedule sched;

static gboolean
wait_for (gboolean (*ready) (void), const char *what, GError ** error)
{
  const gint64 deadline = g_get_monotonic_time () +
      WAIT_MS * G_TIME_SPAN_MILLISECOND;
  g_mutex_lock (&sched.lock);
  while (!ready ()) {
    if (g_get_monotonic_time () >= deadline) {
      g_mutex_unlock (&sched.lock);
      g_set_error (error, LB_ERROR, LB_ERROR_TIMEOUT,
          "schedule: waited %d ms for %s", WAIT_MS, what);
      return FALSE;
    }
    g_cond_wait_until (&sched.cond, &sched.lock,
        g_get_monotonic_time () + 5 * G_TIME_SPAN_MILLISECOND);
  }
  g_mutex_unlock (&sched.lock);
  return TRUE;
}

static void
set_flag (gboolean * flag)
{
  g_mutex_lock (&sched.lock);
  *flag = TRUE;
  g_cond_broadcast (&sched.cond);
  g_mutex_unlock (&sched.lock);
}

static gboolean
dit_holds_dev0 (void)
{
  return g_strcmp0 (nccl_model_holder (0), "dit") == 0;
}

/* "decode" rank 1 has issued its collective, and holds device 1 if its
 * collectives are the device ones */
static gboolean
decode1_issued (void)
{
  return sched.decode1_issuing && (!sched.decode_native ||
      g_strcmp0 (nccl_model_holder (1), "decode") == 0);
}

static gboolean
dit1_issued (void)
{
  return sched.dit1_issuing;
}

/* One all-gather of COUNT floats per rank (rank r sends base + r * COUNT +
 * i) on device buffers, checked exactly. */
static gboolean
gather (LbRank * rank, float base, GError ** error)
{
  int64_t one[1] = { COUNT }, all[1] = { COUNT * rank->n_ranks };
  g_autoptr (LbTensor) hs = lb_tensor_new (LB_DTYPE_F32, 1, one);
  g_autoptr (LbTensor) hr = lb_tensor_new (LB_DTYPE_F32, 1, all);
  for (int i = 0; i < COUNT; i++)
    ((float *) hs->data)[i] = base + (float) (rank->rank * COUNT + i);
  g_autoptr (LbTensor) ds = lb_tensor_new_on (rank->stream, LB_DTYPE_F32, 1,
      one, error);
  g_autoptr (LbTensor) dr = ds ? lb_tensor_new_on (rank->stream,
      LB_DTYPE_F32, 1, all, error) : NULL;
  if (dr == NULL || !lb_tensor_upload (rank->stream, ds, hs, error) ||
      !rank->backend->stream_synchronize (rank->stream, error) ||
      !lb_comm_all_gather (rank, LB_DTYPE_F32, ds->data, dr->data, COUNT,
          error) || !lb_tensor_download (rank->stream, hr, dr, error))
    return FALSE;
  for (int i = 0; i < COUNT * rank->n_ranks; i++)
    RCHECK (((float *) hr->data)[i] == base + (float) i, "element %d: ", i);
  return TRUE;
}

static gboolean
dit_func (LbRank * rank, gpointer data, GError ** error)
{
  (void) data;
  if (rank->rank == 1) {
    if (!wait_for (decode1_issued, "decode rank 1", error))
      return FALSE;
    set_flag (&sched.dit1_issuing);
  }
  return gather (rank, 100.f, error);
}

static gboolean
decode_func (LbRank * rank, gpointer data, GError ** error)
{
  (void) data;
  if (rank->rank == 1) {
    if (!wait_for (dit_holds_dev0, "dit rank 0 on device 0", error))
      return FALSE;
    set_flag (&sched.decode1_issuing);
  } else if (!wait_for (dit1_issued, "dit rank 1", error)) {
    return FALSE;
  }
  return gather (rank, 200.f, error);
}

static LbWorkerGroup *
group_on (int n, const int *ordinals, const char *name)
{
  g_autoptr (GError) err = NULL;
  LbWorkerGroupOptions o = {.timeout_ms = 1500,.name = name };
  LbWorkerGroup *g = lb_worker_group_new (fakedev_backend (), n, ordinals, &o,
      &err);
  g_assert_no_error (err);
  g_assert_nonnull (g);
  return g;
}

static const char *
comm_name (LbWorkerGroup * g)
{
  return lb_comm_backend_name (lb_worker_group_get_rank (g, 0));
}

static void
test_interleaved (void)
{
  static const int devs[2] = { 0, 1 };
  nccl_model_clear_log ();
  LbWorkerGroup *dit = group_on (2, devs, "dit");
  LbWorkerGroup *decode = group_on (2, devs, "decode");
  g_assert_cmpstr (comm_name (dit), ==, "nccl-model");
  sched.decode_native = g_str_equal (comm_name (decode), "nccl-model");

  /* dit rank 0 holds device 0 first, decode rank 1 device 1 first; then
   * dit rank 1 and decode rank 0: each waits for the other's device */
  test_run_two (dit, dit_func, NULL, decode, decode_func, NULL);

  /* device 0 and 1 each held once, by "dit"; the decode group's
   * collectives never held a device */
  for (int d = 0; d < 2; d++) {
    g_auto (GStrv) log = nccl_model_log (d);
    g_autofree char *s = g_strjoinv (" ", log);
    g_assert_cmpstr (s, ==, "dit");
  }
  g_assert_cmpstr (comm_name (decode), ==, "local");
  g_assert_cmpint (fakedev_stats ().bad, ==, 0);
  lb_worker_group_unref (decode);
  lb_worker_group_unref (dit);
}

/* The claim is per device and ends with the group. */
static void
test_claims (void)
{
  static const int d01[2] = { 0, 1 }, d23[2] = { 2, 3 }, d31[2] = { 3, 1 };
  LbWorkerGroup *a = group_on (2, d01, "a");
  LbWorkerGroup *b = group_on (2, d23, "b");
  LbWorkerGroup *c = group_on (2, d31, "c");
  g_assert_cmpstr (comm_name (a), ==, "nccl-model");
  g_assert_cmpstr (comm_name (b), ==, "nccl-model");
  g_assert_cmpstr (comm_name (c), ==, "local");
  lb_worker_group_unref (c);
  lb_worker_group_unref (a);
  /* device 1 is free again, device 3 still b's */
  c = group_on (2, d31, "c");
  g_assert_cmpstr (comm_name (c), ==, "local");
  lb_worker_group_unref (b);
  LbWorkerGroup *d = group_on (2, d01, "d");
  g_assert_cmpstr (comm_name (d), ==, "nccl-model");
  lb_worker_group_unref (c);
  lb_worker_group_unref (d);
  /* an explicit class is the caller's choice */
  a = group_on (2, d01, "a");
  g_autoptr (GError) err = NULL;
  LbWorkerGroupOptions o = {.timeout_ms = 1500,.name = "e",
    .collectives = nccl_model_collectives ()
  };
  LbWorkerGroup *e = lb_worker_group_new (fakedev_backend (), 2, d01, &o,
      &err);
  g_assert_no_error (err);
  g_assert_cmpstr (comm_name (e), ==, "nccl-model");
  lb_worker_group_unref (e);
  lb_worker_group_unref (a);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_mutex_init (&sched.lock);
  g_cond_init (&sched.cond);
  lb_collectives_register (LB_DEVICE_CUDA, nccl_model_collectives ());
  g_test_add_func ("/comm/nccl-order/interleaved", test_interleaved);
  g_test_add_func ("/comm/nccl-order/claims", test_claims);
  int rc = g_test_run ();
  lb_collectives_register (LB_DEVICE_CUDA, NULL);
  return rc;
}

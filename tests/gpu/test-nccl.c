/* lingbot-gst: NCCL collectives over every visible GPU, checked against the
 * values a single process computes.  Exits 77 (skip) with fewer than 2 GPUs.
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "comm/comm.h"
#include "lingbot/backend.h"

#include <stdio.h>

#define COUNT 1000              /* elements per rank and peer */

typedef struct
{
  gboolean ok[8];
} Result;

static float
value (int src, int dst, int i)
{
  return (float) (src * 100000 + dst * 1000 + i % 997);
}

static gboolean
rank_fn (LbRank * rank, gpointer user_data, GError ** error)
{
  Result *res = user_data;
  int n = rank->n_ranks, r = rank->rank;
  LbStream *s = rank->stream;
  int64_t shape[1] = { (int64_t) COUNT * n };
  g_autoptr (LbTensor) h = lb_tensor_new (LB_DTYPE_F32, 1, shape);
  g_autoptr (LbTensor) back = lb_tensor_new (LB_DTYPE_F32, 1, shape);
  g_autoptr (LbTensor) send = lb_tensor_new_on (s, LB_DTYPE_F32, 1, shape,
      error);
  g_autoptr (LbTensor) recv = lb_tensor_new_on (s, LB_DTYPE_F32, 1, shape,
      error);
  if (send == NULL || recv == NULL)
    return FALSE;
  float *hd = h->data, *bd = back->data;
  gboolean ok = TRUE;

  /* all-to-all: block d of rank r's send goes to rank d */
  for (int d = 0; d < n; d++)
    for (int i = 0; i < COUNT; i++)
      hd[d * COUNT + i] = value (r, d, i);
  if (!lb_tensor_upload (s, send, h, error) ||
      !lb_comm_all_to_all (rank, LB_DTYPE_F32, send->data, recv->data, COUNT,
          error) || !lb_comm_synchronize (rank, error) ||
      !lb_tensor_download (s, back, recv, error))
    return FALSE;
  for (int src = 0; src < n; src++)
    for (int i = 0; i < COUNT; i++)
      ok &= bd[src * COUNT + i] == value (src, r, i);

  /* all-gather of each rank's first block */
  if (!lb_comm_all_gather (rank, LB_DTYPE_F32, send->data, recv->data, COUNT,
          error) || !lb_comm_synchronize (rank, error) ||
      !lb_tensor_download (s, back, recv, error))
    return FALSE;
  for (int src = 0; src < n; src++)
    for (int i = 0; i < COUNT; i++)
      ok &= bd[src * COUNT + i] == value (src, 0, i);

  /* all-reduce (sum): integer-valued floats, exact */
  if (!lb_comm_all_reduce (rank, LB_DTYPE_F32, send->data, recv->data,
          (gsize) COUNT * n, LB_REDUCE_SUM, error) ||
      !lb_comm_synchronize (rank, error) ||
      !lb_tensor_download (s, back, recv, error))
    return FALSE;
  for (int d = 0; d < n; d++)
    for (int i = 0; i < COUNT; i++) {
      float sum = 0;
      for (int src = 0; src < n; src++)
        sum += value (src, d, i);
      ok &= bd[d * COUNT + i] == sum;
    }

  /* broadcast from the last rank */
  if (!lb_comm_broadcast (rank, LB_DTYPE_F32, send->data, (gsize) COUNT * n,
          n - 1, error) || !lb_comm_synchronize (rank, error) ||
      !lb_tensor_download (s, back, send, error))
    return FALSE;
  for (int d = 0; d < n; d++)
    for (int i = 0; i < COUNT; i++)
      ok &= bd[d * COUNT + i] == value (n - 1, d, i);

  res->ok[r] = ok;
  return TRUE;
}

int
main (int argc, char **argv)
{
  g_autoptr (GError) err = NULL;
  LbBackend *cuda = lingbot_backend_cuda (&err);
  if (cuda == NULL) {
    printf ("SKIP: %s\n", err->message);
    return 77;
  }
  if (cuda->device_count < 2) {
    printf ("SKIP: NCCL collectives need 2 GPUs, %d visible\n",
        cuda->device_count);
    return 77;
  }
  int n = MIN (cuda->device_count, 8);
  LbWorkerGroupOptions opts = { 30000, NULL, "nccl-test" };
  LbWorkerGroup *g = lb_worker_group_new (cuda, n, NULL, &opts, &err);
  if (g == NULL) {
    printf ("FAIL: %s\n", err->message);
    return 1;
  }
  Result res = { {0}
  };
  if (!lb_worker_group_run (g, rank_fn, &res, &err)) {
    printf ("FAIL: %s\n", err->message);
    return 1;
  }
  lb_worker_group_unref (g);
  for (int r = 0; r < n; r++) {
    if (!res.ok[r]) {
      printf ("FAIL: rank %d received wrong values\n", r);
      return 1;
    }
  }
  printf
      ("ok: all-to-all, all-gather, all-reduce, broadcast over %d GPUs (%s)\n",
      n, "nccl");
  return 0;
}

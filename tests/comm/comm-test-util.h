/* lingbot-gst: helpers for the comm/ tests
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "comm/comm.h"

#include <string.h>

/* Inside a rank function: fail the rank (not the process) with a message. */
#define RCHECK(cond, ...)                                                   \
  do {                                                                      \
    if (!(cond)) {                                                          \
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,              \
          "check failed at %s:%d: %s: ", __FILE__, __LINE__, #cond);        \
      g_prefix_error (error, __VA_ARGS__);                                  \
      return FALSE;                                                         \
    }                                                                       \
  } while (0)

static inline LbWorkerGroup *
test_group_new (int n, const int *ordinals, guint timeout_ms, const char *name)
{
  GError *err = NULL;
  LbWorkerGroupOptions opts = {.timeout_ms = timeout_ms,.name = name };
  LbWorkerGroup *g = lb_worker_group_new (lb_cpu_backend (), n, ordinals,
      &opts, &err);
  g_assert_no_error (err);
  g_assert_nonnull (g);
  return g;
}

/* Runs fa on every rank of ga and fb on every rank of gb concurrently. */
static inline void
test_run_two (LbWorkerGroup * ga, LbRankFunc fa, gpointer da,
    LbWorkerGroup * gb, LbRankFunc fb, gpointer db)
{
  GError *err = NULL;
  LbWorkerJob ja = LB_WORKER_JOB_INIT, jb = LB_WORKER_JOB_INIT;
  g_assert_true (lb_worker_group_submit (ga, &ja, -1, fa, da, &err));
  g_assert_true (lb_worker_group_submit (gb, &jb, -1, fb, db, &err));
  gboolean oka = lb_worker_group_wait (ga, &ja, &err);
  g_assert_no_error (err);
  g_assert_true (oka);
  gboolean okb = lb_worker_group_wait (gb, &jb, &err);
  g_assert_no_error (err);
  g_assert_true (okb);
}

static inline gboolean
test_quick (void)
{
  return g_getenv ("LB_TEST_QUICK") != NULL;
}

/* lingbot-gst: comm/ internals shared between its files (not installed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "comm/worker-group.h"
#include "comm/collectives.h"

G_BEGIN_DECLS

/* Called when the group aborts, from whichever thread aborts it (a rank
 * thread whose job failed, a waiter, a canceller) with the group's lock
 * held: so that waiters on other condition variables wake up and see
 * lb_worker_group_is_aborted(), and so that the layers above learn the
 * root cause as soon as a rank fails.  @why is the error of the rank that
 * failed first, prefixed "rank N: " (e.g. "rank 0: all_to_all_v (publish):
 * no progress within T ms (worker group world), waiting for rank 1",
 * %LB_ERROR_TIMEOUT), valid during the call only; %NULL for a cancel
 * (lb_worker_group_cancel(), the deadline of
 * lb_worker_group_cancel_after(), a shutdown).  A notify must not call
 * into the group (its lock is held: add/remove a notify, submit, wait...)
 * and must not block: the ranks and every waiter of the group wait for it.
 * Not part of the installed API: comm/ and the library above it
 * (lingbot/session.c) only. */
typedef void (*LbAbortNotify) (gpointer data, const GError * why);

void lb_worker_group_add_abort_notify (LbWorkerGroup * group,
    LbAbortNotify notify, gpointer data);
void lb_worker_group_remove_abort_notify (LbWorkerGroup * group, gpointer data);

gpointer lb_worker_group_get_collectives_state (LbWorkerGroup * group);
const LbCollectivesClass *lb_worker_group_get_collectives (LbWorkerGroup *
    group);

/* The local (shared-memory) collectives, always available. */
const LbCollectivesClass *lb_local_collectives (void);

/* Sets a timeout error naming @what; returns FALSE for convenience. */
gboolean lb_comm_set_timeout_error (LbRank * rank, const char *what,
    GError ** error);

gboolean lb_comm_copy (LbRank * rank, LbStream * stream, gboolean host,
    void *dst, const void *src, gsize bytes, GError ** error);

/* The operation members of an LbCollectivesClass whose functions are named
 * prefix_create, prefix_destroy, ... prefix_synchronize, as every class in
 * comm/ names them: { .name = "x", LB_COLLECTIVES_OPS (x), ... }. */
#define LB_COLLECTIVES_OPS(prefix) \
  .create = prefix##_create, \
  .destroy = prefix##_destroy, \
  .reset = prefix##_reset, \
  .abort = prefix##_abort, \
  .all_to_all = prefix##_all_to_all, \
  .all_to_all_v = prefix##_all_to_all_v, \
  .all_gather = prefix##_all_gather, \
  .all_gather_v = prefix##_all_gather_v, \
  .reduce_scatter = prefix##_reduce_scatter, \
  .all_reduce = prefix##_all_reduce, \
  .broadcast = prefix##_broadcast, \
  .send = prefix##_send, \
  .recv = prefix##_recv, \
  .barrier = prefix##_barrier, \
  .group_start = prefix##_group_start, \
  .group_end = prefix##_group_end, \
  .synchronize = prefix##_synchronize

G_END_DECLS

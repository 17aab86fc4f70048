/* lingbot-gst: comm/ internals shared between its files (not installed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "comm/worker-group.h"
#include "comm/collectives.h"

G_BEGIN_DECLS

/* Called (from whichever thread aborts the group, with the group's lock
 * held) so that waiters on other condition variables wake up and see
 * lb_worker_group_is_aborted().  Must not take the group's lock. */
typedef void (*LbAbortNotify) (gpointer data);

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

G_END_DECLS

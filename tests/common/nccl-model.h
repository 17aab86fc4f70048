/* lingbot-gst: a CPU model of NCCL's per-device blocking, for tests
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "comm/collectives.h"

G_BEGIN_DECLS

/* The device-native collectives as the ordering hazard sees them: the
 * local collectives (shared memory, device copies) plus NCCL's blocking:
 * a collective (or a group of them, at lb_comm_group_end()) holds its
 * rank's device until every rank of its communicator set has arrived and
 * it completes, and a collective of another set on that device waits for
 * it.  Two sets sharing devices whose collectives are issued in different
 * orders on different devices deadlock; the wait for a held device ends
 * at the group's timeout with an exact error.  Every hold is logged per
 * device (the group's name).  Register it for LB_DEVICE_CUDA (fakedev's
 * device type) with lb_collectives_register(); not stream ordered (its
 * operations complete on return, like the local ones). */
const LbCollectivesClass *nccl_model_collectives (void);

/* (transfer full) the names of the groups whose collectives held @device,
 * in order since the last nccl_model_clear_log(); NULL-terminated */
char **nccl_model_log (int device);
void nccl_model_clear_log (void);
/* the name of the group holding @device now, or NULL */
const char *nccl_model_holder (int device);

G_END_DECLS

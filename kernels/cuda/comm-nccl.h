/* lingbot-gst: NCCL collectives for CUDA worker groups
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "comm/collectives.h"

G_BEGIN_DECLS

/* The CUDA backend module registers it from its init function when
 * lb_nccl_load() succeeds:
 *   lb_collectives_register (LB_DEVICE_CUDA, lb_nccl_collectives ()); */
const LbCollectivesClass *lb_nccl_collectives (void);
gboolean lb_nccl_load (GError ** error);

G_END_DECLS

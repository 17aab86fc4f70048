/* lingbot-gst: the comm/ layer (worker groups, collectives, tensor channels)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Layering (DESIGN.md section 2): comm/ calls kernels/ only; lingbot/
 * resolves the `devices` string into a backend and ordinals and hands them
 * to lb_worker_group_new().  Design notes: docs/design/comm.md.
 */
#pragma once

#include "comm/worker-group.h"
#include "comm/collectives.h"
#include "comm/channel.h"

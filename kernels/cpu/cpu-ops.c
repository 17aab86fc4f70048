/* lingbot-gst: the CPU op table
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/cpu/cpu-ops.h"
#include "kernels/cpu/cpu-internal.h"

const LbOps lb_cpu_ops = {
#define LB_OP(name) .name = lb_cpu_##name,
#include "kernels/ops-list.h"
};

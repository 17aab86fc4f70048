/* lingbot-gst: CPU op table (float32 compute)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "kernels/ops.h"

G_BEGIN_DECLS

extern const LbOps lb_cpu_ops;

G_END_DECLS

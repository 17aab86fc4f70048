/* lingbot-gst: helpers shared by the CPU op implementations
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "kernels/backend.h"
#include "kernels/error.h"

G_BEGIN_DECLS

gboolean lb_cpu_gemm (LbStream * s, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error);

G_END_DECLS

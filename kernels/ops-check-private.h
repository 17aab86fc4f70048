/* lingbot-gst: helpers shared by kernels/ops-check*.c (not installed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "kernels/ops-check.h"

G_BEGIN_DECLS

/* Fails unless @t (named @arg of @op) is present with a valid rank. */
gboolean lb_check_present (const char *op, const char *arg,
    const LbTensor * t, const char *expect, GError ** error);

/* Fails with @t's dtype, shape and strides against @expect. */
gboolean lb_check_fail_strides (const char *op, const char *arg,
    const LbTensor * t, const char *expect, GError ** error);

G_END_DECLS

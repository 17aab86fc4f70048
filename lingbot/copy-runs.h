/* lingbot-gst: copies between strided views, one backend copy per
 * contiguous run (the DiT's and the VAE's)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "kernels/backend.h"

G_BEGIN_DECLS

int lingbot_copy_runs_split (const LbTensor * dst, const LbTensor * src,
    int64_t * run);
gboolean lingbot_copy_runs (LbStream * s, LbTensor * dst,
    const LbTensor * src, int k, int64_t run, LbCopyKind kind, GError ** error);

G_END_DECLS

/* lingbot-gst: backend registry
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "kernels/backend.h"

G_BEGIN_DECLS

LbBackend *lingbot_backend_get (const char *name, GError ** error);
LbBackend *lingbot_backend_cuda (GError ** error);
gboolean lingbot_backend_parse_devices (const char *devices,
    LbBackend ** backend, int *n_ranks, int **ordinals, GError ** error);

G_END_DECLS

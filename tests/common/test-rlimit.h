/* lingbot-gst: a test process under a lowered address-space limit
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

gboolean lingbot_test_rlimit_init (void);
gboolean lingbot_test_rlimit_lower (guint64 margin);

G_END_DECLS

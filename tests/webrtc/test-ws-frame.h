/* lingbot-gst: WebSocket client frame headers for the server tests
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

gsize lingbot_test_ws_frame_header (guint8 * out, gboolean fin,
    guint8 opcode, guint64 len, guint32 mask);

G_END_DECLS

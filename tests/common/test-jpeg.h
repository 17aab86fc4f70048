/* lingbot-gst: large test JPEGs written with libjpeg
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

guint8 lingbot_test_smooth_pixel (int x, int y, int c);
guint8 *lingbot_test_smooth_jpeg (int width, int height, int quality,
    gsize * length);

G_END_DECLS

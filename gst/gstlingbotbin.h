/* lingbot-gst: lingbotbin, lingbotgen ! lingbotvaedec in one bin
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_LINGBOT_BIN (gst_lingbot_bin_get_type ())
G_DECLARE_FINAL_TYPE (GstLingbotBin, gst_lingbot_bin, GST, LINGBOT_BIN, GstBin)
GST_ELEMENT_REGISTER_DECLARE (lingbotbin);

G_END_DECLS

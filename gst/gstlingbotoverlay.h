/* lingbot-gst: lingbotoverlay, the controls overlay (HUD)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gst/gst.h>
#include <gst/video/gstvideofilter.h>

G_BEGIN_DECLS

#define GST_TYPE_LINGBOT_OVERLAY (gst_lingbot_overlay_get_type ())
G_DECLARE_FINAL_TYPE (GstLingbotOverlay, gst_lingbot_overlay,
    GST, LINGBOT_OVERLAY, GstVideoFilter)
GST_ELEMENT_REGISTER_DECLARE (lingbotoverlay);

G_END_DECLS

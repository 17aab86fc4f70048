/* lingbot-gst: helpers private to the plugin (error mapping, frame
 * conversions)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gst/gst.h>
#include "lingbot/lingbot.h"

G_BEGIN_DECLS

/**
 * GstLingbotErrorContext:
 * @GST_LINGBOT_ERROR_CONTEXT_OPEN: starting (world, devices, files)
 * @GST_LINGBOT_ERROR_CONTEXT_STREAM: generating or decoding
 *
 * Decides the fallback of gst_lingbot_post_error(): LIBRARY/INIT when
 * starting, STREAM/FAILED while streaming.
 */
typedef enum {
  GST_LINGBOT_ERROR_CONTEXT_OPEN,
  GST_LINGBOT_ERROR_CONTEXT_STREAM,
} GstLingbotErrorContext;

void gst_lingbot_error_map (const GError * error, GstLingbotErrorContext ctx,
    GQuark * domain, gint * code);

#define gst_lingbot_post_error(el, error, ctx, text, debug) \
  gst_lingbot_post_error_full ((el), (error), (ctx), (text), (debug), \
      __FILE__, GST_FUNCTION, __LINE__)
void gst_lingbot_post_error_full (GstElement * element, const GError * error,
    GstLingbotErrorContext ctx, const char *text, const char *debug,
    const char *file, const char *function, int line);

gboolean gst_lingbot_check_readable (const char *path, GQuark * domain,
    gint * code, GError ** error);

GstBuffer *gst_lingbot_buffer_try_new (gsize size);

gboolean gst_lingbot_frames_to_rgba (const LbTensor * frames, int frame,
    guint8 * dst, gsize dst_stride, GError ** error);
gboolean gst_lingbot_frames_to_nv12 (const LbTensor * frames, int frame,
    guint8 * y, gsize y_stride, guint8 * uv, gsize uv_stride,
    GError ** error);

G_END_DECLS

/* lingbot-gst: the shared world context (GstContext "lingbot.world")
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gst/gst.h>
#include "lingbot/lingbot.h"

G_BEGIN_DECLS

/**
 * GST_LINGBOT_WORLD_CONTEXT_TYPE:
 *
 * The GstContext type string under which the elements share one
 * #LingbotWorld (DESIGN.md 1 and 3).  The context is persistent and its
 * structure holds the world in the field "world" (%GST_TYPE_LINGBOT_WORLD).
 */
#define GST_LINGBOT_WORLD_CONTEXT_TYPE "lingbot.world"

#define GST_TYPE_LINGBOT_WORLD (gst_lingbot_world_get_type ())
GType gst_lingbot_world_get_type (void);

GstContext *gst_lingbot_context_new (LingbotWorld * world);
LingbotWorld *gst_lingbot_context_get_world (GstContext * context);

gboolean gst_lingbot_world_matches (LingbotWorld * world,
    const char *model_path, const char *devices);

gboolean gst_lingbot_handle_set_context (GstElement * element,
    GstContext * context, const char *model_path, const char *devices,
    LingbotWorld ** world);
gboolean gst_lingbot_handle_context_query (GstElement * element,
    GstQuery * query, LingbotWorld * world);
gboolean gst_lingbot_ensure_world (GstElement * element,
    const char *model_path, const char *devices, const char *precision,
    gboolean text_encoder, gboolean create, LingbotWorld ** world,
    GError ** error);

G_END_DECLS

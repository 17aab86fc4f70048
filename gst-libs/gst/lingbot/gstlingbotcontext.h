/* lingbot-gst: the shared world context (GstContext "lingbot.world")
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gst/gst.h>

#ifdef __GI_SCANNER__
/* g-ir-scanner does not scan lingbot/lingbot.h (plain C, no GObject): the
 * opaque world is declared for it here, before lingbot.h's own typedef, so
 * that it becomes the boxed record GstLingbot.World of
 * GST_TYPE_LINGBOT_WORLD */
/**
 * LingbotWorld:
 *
 * The devices (a worker group of ranks) and the loaded model of
 * lingbot/lingbot.h, refcounted; shared by the elements of a pipeline
 * through a "lingbot.world" #GstContext.  Bindings see it as the boxed
 * GstLingbot.World: created with gst_lingbot_world_new(), wrapped with
 * gst_lingbot_context_new().
 */
typedef struct _LingbotWorld LingbotWorld;
#endif

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

/**
 * GST_TYPE_LINGBOT_WORLD:
 *
 * The boxed #GType of #LingbotWorld (copy = lingbot_world_ref(), free =
 * lingbot_world_unref()), "LingbotWorld"; GstLingbot.World to bindings.
 */
#define GST_TYPE_LINGBOT_WORLD (gst_lingbot_world_get_type ())
GType gst_lingbot_world_get_type (void);
char *gst_lingbot_world_to_string (LingbotWorld * world);

LingbotWorld *gst_lingbot_world_new (const char *model_path,
    const char *devices, const char *precision, gboolean text_encoder,
    GError ** error);
const char *gst_lingbot_world_get_model_path (LingbotWorld * world);
const char *gst_lingbot_world_get_devices (LingbotWorld * world);
const char *gst_lingbot_world_get_precision (LingbotWorld * world);
gint gst_lingbot_world_get_n_ranks (LingbotWorld * world);

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

/* lingbot-gst: the world slot of an element (lingbotgen, lingbotvaedec)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gst/gst.h>
#include "lingbot/lingbot.h"
#include "gst/gstlingbotutil.h"

G_BEGIN_DECLS

/**
 * GstLingbotWorldHolder:
 * @element: the element it belongs to (not a reference: the holder is a
 *   member of the element)
 * @any_world: without a `model-path`, take any world a context offers
 *   (lingbotvaedec); when %FALSE, a world is taken only with a
 *   `model-path` that it matches (lingbotgen)
 * @model_path: the `model-path` property (object lock)
 * @devices: the `devices` property (object lock)
 * @world: the world the element uses, %NULL until found or created
 *   (object lock)
 *
 * What an element that holds a #LingbotWorld shares with the others: its
 * `model-path` and `devices` properties, the world, and the
 * "lingbot.world" context plumbing around them (set_context, the CONTEXT
 * query, the search of gst_lingbot_ensure_world(), the world dropped at
 * READY->NULL).  The element keeps its own GParamSpecs (their texts
 * differ) and hands its properties, with the table of those it keeps in
 * plain fields, to gst_lingbot_world_holder_set_property() and
 * _get_property().
 */
typedef struct
{
  GstElement *element;
  gboolean any_world;
  char *model_path;
  char *devices;
  LingbotWorld *world;
} GstLingbotWorldHolder;

void gst_lingbot_world_holder_init (GstLingbotWorldHolder * holder,
    GstElement * element, const char *model_path, const char *devices,
    gboolean any_world);
void gst_lingbot_world_holder_clear (GstLingbotWorldHolder * holder);

gboolean gst_lingbot_world_holder_set_property (GstLingbotWorldHolder *
    holder, const GstLingbotProperty * props, guint n_props,
    const GParamSpec * pspec, const GValue * value);
gboolean gst_lingbot_world_holder_get_property (GstLingbotWorldHolder *
    holder, const GstLingbotProperty * props, guint n_props,
    const GParamSpec * pspec, GValue * value);
void gst_lingbot_world_holder_dup_config (GstLingbotWorldHolder * holder,
    char **model_path, char **devices);

LingbotWorld *gst_lingbot_world_holder_dup_world (GstLingbotWorldHolder *
    holder);
void gst_lingbot_world_holder_set_context (GstLingbotWorldHolder * holder,
    GstContext * context);
gboolean gst_lingbot_world_holder_query (GstLingbotWorldHolder * holder,
    GstQuery * query);
gboolean gst_lingbot_world_holder_ensure (GstLingbotWorldHolder * holder,
    const char *precision, gboolean text_encoder, GError ** error);
void gst_lingbot_world_holder_release (GstLingbotWorldHolder * holder);
void gst_lingbot_world_holder_change_state (GstLingbotWorldHolder * holder,
    GstStateChange transition);

G_END_DECLS

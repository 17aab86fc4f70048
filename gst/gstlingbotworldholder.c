/* lingbot-gst: the world slot of an element (lingbotgen, lingbotvaedec)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * One copy of what both world-holding elements did by hand: the
 * `model-path` / `devices` strings, the world under the object lock, the
 * set_context vfunc's part, the CONTEXT query's answer and the context
 * dance (gstlingbotcontext.c).  lingbotbin holds no world of its own: its
 * properties are lingbotgen's, GstBin hands contexts to its children and
 * its ghost pads take queries to them.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/gstlingbotworldholder.h"
#include "gst/gstlingbotutil.h"
#include "gst/lingbot/gstlingbotcontext.h"

/**
 * gst_lingbot_world_holder_init:
 * @holder: the holder, a member of @element
 * @element: the element
 * @model_path: (nullable): the default `model-path`
 * @devices: (nullable): the default `devices`
 * @any_world: see #GstLingbotWorldHolder
 *
 * Sets up @holder with the properties' defaults and no world (the
 * element's instance init).
 */
void
gst_lingbot_world_holder_init (GstLingbotWorldHolder * holder,
    GstElement * element, const char *model_path, const char *devices,
    gboolean any_world)
{
  holder->element = element;
  holder->any_world = any_world;
  holder->model_path = g_strdup (model_path);
  holder->devices = g_strdup (devices);
  holder->world = NULL;
}

/**
 * gst_lingbot_world_holder_clear:
 * @holder: the holder
 *
 * Frees the strings and drops the world (the element's finalize).
 */
void
gst_lingbot_world_holder_clear (GstLingbotWorldHolder * holder)
{
  g_clear_pointer (&holder->world, lingbot_world_unref);
  g_clear_pointer (&holder->model_path, g_free);
  g_clear_pointer (&holder->devices, g_free);
}

/**
 * gst_lingbot_world_holder_set_property:
 * @holder: the holder
 * @props: the element's other properties kept in plain fields
 * @n_props: how many
 * @pspec: the property being set
 * @value: its value
 *
 * Stores `model-path` and `devices` in @holder, else a property of @props
 * in its field of the element (gst_lingbot_property_set()); call with the
 * object lock held.
 *
 * Returns: %TRUE when @pspec was one of them
 */
gboolean
gst_lingbot_world_holder_set_property (GstLingbotWorldHolder * holder,
    const GstLingbotProperty * props, guint n_props,
    const GParamSpec * pspec, const GValue * value)
{
  char **field;

  if (g_str_equal (pspec->name, "model-path"))
    field = &holder->model_path;
  else if (g_str_equal (pspec->name, "devices"))
    field = &holder->devices;
  else
    return gst_lingbot_property_set (holder->element, props, n_props, pspec,
        value);
  g_free (*field);
  *field = g_value_dup_string (value);
  return TRUE;
}

/**
 * gst_lingbot_world_holder_get_property:
 * @holder: the holder
 * @props: the element's other properties kept in plain fields
 * @n_props: how many
 * @pspec: the property being read
 * @value: (out caller-allocates): its value
 *
 * Reads `model-path` and `devices` from @holder, else a property of @props
 * from its field of the element (gst_lingbot_property_get()); call with
 * the object lock held.
 *
 * Returns: %TRUE when @pspec was one of them
 */
gboolean
gst_lingbot_world_holder_get_property (GstLingbotWorldHolder * holder,
    const GstLingbotProperty * props, guint n_props,
    const GParamSpec * pspec, GValue * value)
{
  if (g_str_equal (pspec->name, "model-path"))
    g_value_set_string (value, holder->model_path);
  else if (g_str_equal (pspec->name, "devices"))
    g_value_set_string (value, holder->devices);
  else
    return gst_lingbot_property_get (holder->element, props, n_props, pspec,
        value);
  return TRUE;
}

/**
 * gst_lingbot_world_holder_dup_config:
 * @holder: the holder
 * @model_path: (out) (transfer full) (optional): `model-path`
 * @devices: (out) (transfer full) (optional): `devices`
 *
 * Copies the two properties under the object lock.
 */
void
gst_lingbot_world_holder_dup_config (GstLingbotWorldHolder * holder,
    char **model_path, char **devices)
{
  GST_OBJECT_LOCK (holder->element);
  if (model_path != NULL)
    *model_path = g_strdup (holder->model_path);
  if (devices != NULL)
    *devices = g_strdup (holder->devices);
  GST_OBJECT_UNLOCK (holder->element);
}

/**
 * gst_lingbot_world_holder_dup_world:
 * @holder: the holder
 *
 * Returns: (transfer full) (nullable): a reference on the world, %NULL
 *   while there is none
 */
LingbotWorld *
gst_lingbot_world_holder_dup_world (GstLingbotWorldHolder * holder)
{
  LingbotWorld *world = NULL;

  GST_OBJECT_LOCK (holder->element);
  if (holder->world != NULL)
    world = lingbot_world_ref (holder->world);
  GST_OBJECT_UNLOCK (holder->element);
  return world;
}

/**
 * gst_lingbot_world_holder_set_context:
 * @holder: the holder
 * @context: the context the element's set_context vfunc received
 *
 * Takes the world of a "lingbot.world" @context when the element has
 * none and the world fits its `model-path` and `devices`
 * (gst_lingbot_handle_set_context()).  The element chains up to its
 * parent class itself.
 */
void
gst_lingbot_world_holder_set_context (GstLingbotWorldHolder * holder,
    GstContext * context)
{
  g_autofree char *model_path = NULL, *devices = NULL;

  gst_lingbot_world_holder_dup_config (holder, &model_path, &devices);
  if (model_path == NULL && !holder->any_world)
    return;
  gst_lingbot_handle_set_context (holder->element, context, model_path,
      devices, &holder->world);
}

/**
 * gst_lingbot_world_holder_query:
 * @holder: the holder
 * @query: a query on the element or one of its pads
 *
 * Answers a "lingbot.world" CONTEXT query with the world, when there is
 * one (gst_lingbot_handle_context_query()).
 *
 * Returns: %TRUE when @query was answered
 */
gboolean
gst_lingbot_world_holder_query (GstLingbotWorldHolder * holder,
    GstQuery * query)
{
  g_autoptr (LingbotWorld) world = NULL;

  if (GST_QUERY_TYPE (query) != GST_QUERY_CONTEXT)
    return FALSE;
  world = gst_lingbot_world_holder_dup_world (holder);
  return gst_lingbot_handle_context_query (holder->element, query, world);
}

/**
 * gst_lingbot_world_holder_ensure:
 * @holder: the holder
 * @precision: (nullable): the DiT precision of a world created here
 * @text_encoder: load the umT5 encoder into a world created here
 * @error: return location for a #GError
 *
 * The context dance (gst_lingbot_ensure_world()) for the element's
 * `model-path` and `devices`: a neighbour's world, the application's or
 * the bin's, else, with a `model-path`, a new one announced with
 * have-context.
 *
 * Returns: %TRUE when the element holds a world; %FALSE with @error when
 *   creating one failed, without when none was found and there is no
 *   `model-path` to create one from
 */
gboolean
gst_lingbot_world_holder_ensure (GstLingbotWorldHolder * holder,
    const char *precision, gboolean text_encoder, GError ** error)
{
  g_autofree char *model_path = NULL, *devices = NULL;

  gst_lingbot_world_holder_dup_config (holder, &model_path, &devices);
  return gst_lingbot_ensure_world (holder->element, model_path, devices,
      precision, text_encoder, TRUE, &holder->world, error);
}

/**
 * gst_lingbot_world_holder_release:
 * @holder: the holder
 *
 * Drops the world (READY->NULL): the next start looks for one again.
 */
void
gst_lingbot_world_holder_release (GstLingbotWorldHolder * holder)
{
  LingbotWorld *world;

  GST_OBJECT_LOCK (holder->element);
  world = g_steal_pointer (&holder->world);
  GST_OBJECT_UNLOCK (holder->element);
  g_clear_pointer (&world, lingbot_world_unref);
}

/**
 * gst_lingbot_world_holder_change_state:
 * @holder: the holder
 * @transition: the transition the element's parent class has just made
 *
 * The holder's part of a state change, after the parent's: READY->NULL
 * drops the world (gst_lingbot_world_holder_release()); the other
 * transitions leave it.
 */
void
gst_lingbot_world_holder_change_state (GstLingbotWorldHolder * holder,
    GstStateChange transition)
{
  if (transition == GST_STATE_CHANGE_READY_TO_NULL)
    gst_lingbot_world_holder_release (holder);
}

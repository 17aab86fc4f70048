/* lingbot-gst: the shared world context (GstContext "lingbot.world")
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The elements find one #LingbotWorld (devices + loaded model) the way
 * GStreamer's CUDA elements share a CUDA context (gst-libs/gst/cuda
 * gstcudautils.c): query downstream, query upstream, post need-context,
 * else create one and post have-context.  An application can create the
 * world itself and hand it over with gst_lingbot_context_new() (from a bus
 * sync handler answering need-context, or gst_element_set_context()).
 */
#include "gst/lingbot/gstlingbotcontext.h"

GST_DEBUG_CATEGORY_STATIC (gst_lingbot_context_debug);
#define GST_CAT_DEFAULT gst_lingbot_context_debug

static void register_world_value (GType type);

G_DEFINE_BOXED_TYPE_WITH_CODE (LingbotWorld, gst_lingbot_world,
    lingbot_world_ref, lingbot_world_unref,
    register_world_value (g_define_type_id))
/**
 * gst_lingbot_world_to_string:
 * @world: (nullable): a world
 *
 * Describes @world as "model=PATH devices=DEVICES precision=PRECISION"
 * (lingbot_world_get_model_path(), lingbot_world_get_devices(),
 * lingbot_world_get_precision()).  The same text is what a #GValue of
 * %GST_TYPE_LINGBOT_WORLD transforms to as a string, and, in double
 * quotes, what gst_value_serialize() makes of it, so that a
 * "lingbot.world" context prints as `world=(LingbotWorld)"model=...
 * devices=... precision=..."` (gst-launch-1.0 -v, GST_PTR_FORMAT)
 * instead of `world=(LingbotWorld)NULL`.
 *
 * Returns: (transfer full) (nullable): the description, %NULL for a %NULL
 *   @world
 */
char *
gst_lingbot_world_to_string (LingbotWorld * world)
{
  if (world == NULL)
    return NULL;
  return g_strdup_printf ("model=%s devices=%s precision=%s",
      GST_STR_NULL (lingbot_world_get_model_path (world)),
      GST_STR_NULL (lingbot_world_get_devices (world)),
      GST_STR_NULL (lingbot_world_get_precision (world)));
}

static void
world_to_string (const GValue * src, GValue * dest)
{
  g_value_take_string (dest, gst_lingbot_world_to_string
      (g_value_get_boxed (src)));
}

/* the description in double quotes, only " and \ escaped: a quoted
 * string as the structure parser reads it, spaces and '=' left readable
 * (gst_value_serialize() of a plain string would escape them) */
static gchar *
world_serialize (const GValue * value)
{
  g_autofree char *desc = gst_lingbot_world_to_string
      (g_value_get_boxed (value));
  GString *out;

  if (desc == NULL)
    return NULL;                /* printed as NULL */
  out = g_string_new ("\"");
  for (const char *c = desc; *c; c++) {
    if (*c == '"' || *c == '\\')
      g_string_append_c (out, '\\');
    g_string_append_c (out, *c);
  }
  g_string_append_c (out, '"');
  return g_string_free (out, FALSE);
}

/* a world is loaded (lingbot_world_new()), never parsed from text */
static gboolean
world_deserialize (GValue * dest, const gchar * s)
{
  return FALSE;
}

/* the same world, or none comparable */
static gint
world_compare (const GValue * a, const GValue * b)
{
  return g_value_get_boxed (a) == g_value_get_boxed (b) ? GST_VALUE_EQUAL :
      GST_VALUE_UNORDERED;
}

static void
register_world_value (GType type)
{
  g_value_register_transform_func (type, G_TYPE_STRING, world_to_string);
  /* the GstValue table exists once gst_init() ran (always, before an
   * element or a context uses the type); without it the transform above
   * still gives gst_value_serialize() a (fully escaped) string */
  if (gst_is_initialized ()) {
    /* static: gst_value_register() keeps a pointer to it */
    static GstValueTable table = {
      .compare = world_compare,
      .serialize = world_serialize,
      .deserialize = world_deserialize,
    };

    table.type = type;
    gst_value_register (&table);
  }
}

static void
init_debug (void)
{
  static gsize once = 0;

  if (g_once_init_enter (&once)) {
    GST_DEBUG_CATEGORY_INIT (gst_lingbot_context_debug, "lingbotcontext", 0,
        "lingbot.world context sharing");
    g_once_init_leave (&once, 1);
  }
}

/**
 * gst_lingbot_world_new:
 * @model_path: the model directory (lingbot/lingbot.h "Model directory
 *   layout")
 * @devices: (nullable): "cpu:N" or GPU ordinals "0,1,2,3" (%NULL: "cpu:1")
 * @precision: (nullable): the DiT precision, "fp32", "bf16" or "fp8"
 *   (%NULL: fp32)
 * @text_encoder: load the umT5 encoder and tokenizer (lingbotgen needs it
 *   for `prompt`, not with `prompt-embeds`)
 * @error: return location for a #GError
 *
 * Creates a world: lingbot_world_new() with these options and the others at
 * their defaults, as lingbotgen creates one.  For applications and bindings
 * that load the model once and hand it to pipelines with
 * gst_lingbot_context_new().
 *
 * Returns: (transfer full): the world, or %NULL with @error set (the
 *   errors of lingbot_world_new())
 */
LingbotWorld *
gst_lingbot_world_new (const char *model_path, const char *devices,
    const char *precision, gboolean text_encoder, GError ** error)
{
  LingbotWorldOptions opts = LINGBOT_WORLD_OPTIONS_INIT;

  g_return_val_if_fail (model_path != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  opts.model_path = model_path;
  if (devices != NULL)
    opts.devices = devices;
  opts.precision = precision;
  opts.load_text_encoder = text_encoder;
  return lingbot_world_new (&opts, error);
}

/**
 * gst_lingbot_world_get_model_path:
 * @world: a world
 *
 * Returns: (transfer none): the model directory of @world
 */
const char *
gst_lingbot_world_get_model_path (LingbotWorld * world)
{
  g_return_val_if_fail (world != NULL, NULL);
  return lingbot_world_get_model_path (world);
}

/**
 * gst_lingbot_world_get_devices:
 * @world: a world
 *
 * Returns: (transfer none): the devices @world runs on ("cpu:1", "0,1")
 */
const char *
gst_lingbot_world_get_devices (LingbotWorld * world)
{
  g_return_val_if_fail (world != NULL, NULL);
  return lingbot_world_get_devices (world);
}

/**
 * gst_lingbot_world_get_precision:
 * @world: a world
 *
 * Returns: (transfer none): the DiT precision of @world, "fp32", "bf16"
 *   or "fp8"
 */
const char *
gst_lingbot_world_get_precision (LingbotWorld * world)
{
  g_return_val_if_fail (world != NULL, NULL);
  return lingbot_world_get_precision (world);
}

/**
 * gst_lingbot_world_get_n_ranks:
 * @world: a world
 *
 * Returns: the number of ranks (devices) of @world
 */
gint
gst_lingbot_world_get_n_ranks (LingbotWorld * world)
{
  g_return_val_if_fail (world != NULL, 0);
  return lingbot_world_get_n_ranks (world);
}

/**
 * gst_lingbot_context_new:
 * @world: (transfer none): a world
 *
 * Wraps @world in a persistent #GstContext of type
 * %GST_LINGBOT_WORLD_CONTEXT_TYPE, for an application that creates the
 * world itself and provides it to a pipeline.
 *
 * Returns: (transfer full): the context
 */
GstContext *
gst_lingbot_context_new (LingbotWorld * world)
{
  GstContext *context;
  GstStructure *s;

  g_return_val_if_fail (world != NULL, NULL);

  context = gst_context_new (GST_LINGBOT_WORLD_CONTEXT_TYPE, TRUE);
  s = gst_context_writable_structure (context);
  gst_structure_set (s, "world", GST_TYPE_LINGBOT_WORLD, world,
      "model-path", G_TYPE_STRING, lingbot_world_get_model_path (world),
      "devices", G_TYPE_STRING, lingbot_world_get_devices (world),
      "precision", G_TYPE_STRING, lingbot_world_get_precision (world), NULL);
  return context;
}

/**
 * gst_lingbot_context_get_world:
 * @context: a context
 *
 * Returns: (transfer full) (nullable): the world held by @context, or %NULL
 *   when @context is not a "lingbot.world" context
 */
LingbotWorld *
gst_lingbot_context_get_world (GstContext * context)
{
  const GstStructure *s;
  LingbotWorld *world = NULL;

  g_return_val_if_fail (GST_IS_CONTEXT (context), NULL);

  if (g_strcmp0 (gst_context_get_context_type (context),
          GST_LINGBOT_WORLD_CONTEXT_TYPE) != 0)
    return NULL;
  s = gst_context_get_structure (context);
  if (!gst_structure_get (s, "world", GST_TYPE_LINGBOT_WORLD, &world, NULL))
    return NULL;
  return world;
}

static gboolean
same_path (const char *a, const char *b)
{
  g_autofree char *ca = NULL, *cb = NULL;

  if (a == NULL || b == NULL)
    return a == b;
  ca = g_canonicalize_filename (a, NULL);
  cb = g_canonicalize_filename (b, NULL);
  return g_strcmp0 (ca, cb) == 0;
}

/**
 * gst_lingbot_world_matches:
 * @world: a world
 * @model_path: (nullable): the model an element wants, %NULL for any
 * @devices: (nullable): the devices it wants, %NULL for any
 *
 * Returns: whether an element configured with @model_path and @devices may
 *   use @world
 */
gboolean
gst_lingbot_world_matches (LingbotWorld * world, const char *model_path,
    const char *devices)
{
  if (model_path != NULL
      && !same_path (model_path, lingbot_world_get_model_path (world)))
    return FALSE;
  if (devices != NULL
      && g_strcmp0 (devices, lingbot_world_get_devices (world)) != 0)
    return FALSE;
  return TRUE;
}

/**
 * gst_lingbot_handle_set_context: (skip)
 * @element: the element
 * @context: the context its set_context vfunc received
 * @model_path: (nullable): the element's model-path, %NULL for any
 * @devices: (nullable): the element's devices, %NULL for any
 * @world: (inout): the element's world slot
 *
 * Takes the world of a "lingbot.world" context when the element has none
 * yet and the world matches its configuration.  Call with the object lock
 * released.  Not for bindings (skipped): *@world is the element's own
 * field, guarded by its object lock.
 *
 * Returns: %TRUE when *@world was set from @context
 */
gboolean
gst_lingbot_handle_set_context (GstElement * element, GstContext * context,
    const char *model_path, const char *devices, LingbotWorld ** world)
{
  LingbotWorld *other;

  init_debug ();
  if (context == NULL)
    return FALSE;
  other = gst_lingbot_context_get_world (context);
  if (other == NULL)
    return FALSE;

  GST_OBJECT_LOCK (element);
  if (*world != NULL) {
    GST_OBJECT_UNLOCK (element);
    lingbot_world_unref (other);
    return FALSE;
  }
  if (!gst_lingbot_world_matches (other, model_path, devices)) {
    GST_OBJECT_UNLOCK (element);
    GST_INFO_OBJECT (element, "ignoring world %s on %s (want %s on %s)",
        lingbot_world_get_model_path (other),
        lingbot_world_get_devices (other), GST_STR_NULL (model_path),
        GST_STR_NULL (devices));
    lingbot_world_unref (other);
    return FALSE;
  }
  *world = other;
  GST_OBJECT_UNLOCK (element);
  GST_DEBUG_OBJECT (element, "using shared world %p", other);
  return TRUE;
}

/**
 * gst_lingbot_handle_context_query:
 * @element: the element
 * @query: a query
 * @world: (nullable): the element's world
 *
 * Answers a CONTEXT query of type "lingbot.world" with @world.
 *
 * Returns: %TRUE when the query was answered
 */
gboolean
gst_lingbot_handle_context_query (GstElement * element, GstQuery * query,
    LingbotWorld * world)
{
  const char *type;
  GstContext *context;

  init_debug ();
  if (GST_QUERY_TYPE (query) != GST_QUERY_CONTEXT || world == NULL)
    return FALSE;
  if (!gst_query_parse_context_type (query, &type)
      || g_strcmp0 (type, GST_LINGBOT_WORLD_CONTEXT_TYPE) != 0)
    return FALSE;

  context = gst_lingbot_context_new (world);
  gst_query_set_context (query, context);
  gst_context_unref (context);
  GST_DEBUG_OBJECT (element, "answered context query with world %p", world);
  return TRUE;
}

static gboolean
have_world (GstElement * element, LingbotWorld ** world)
{
  gboolean ret;

  GST_OBJECT_LOCK (element);
  ret = *world != NULL;
  GST_OBJECT_UNLOCK (element);
  return ret;
}

/* Asks the peer of each of @element's pads in @direction (GST_PAD_SRC:
 * downstream, GST_PAD_SINK: upstream) in turn for a "lingbot.world"
 * context and hands every answer to the element's set_context, until the
 * element holds a world.  An answer it refuses (a world of another model
 * or on other devices) does not end the search: the next pad is asked,
 * then the other direction (as gstcudautils does after a refused
 * context). */
static gboolean
query_peers (GstElement * element, GstPadDirection direction,
    LingbotWorld ** world)
{
  GstIterator *it = direction == GST_PAD_SRC ?
      gst_element_iterate_src_pads (element) :
      gst_element_iterate_sink_pads (element);
  GValue item = G_VALUE_INIT;
  gboolean done = FALSE;

  while (!done) {
    switch (gst_iterator_next (it, &item)) {
      case GST_ITERATOR_OK:{
        GstPad *pad = g_value_get_object (&item);
        GstQuery *query =
            gst_query_new_context (GST_LINGBOT_WORLD_CONTEXT_TYPE);
        GstContext *context = NULL;

        if (gst_pad_peer_query (pad, query))
          gst_query_parse_context (query, &context);
        if (context != NULL) {
          GST_DEBUG_OBJECT (element, "%s's peer answered with %"
              GST_PTR_FORMAT, GST_PAD_NAME (pad), context);
          gst_element_set_context (element, context);
        }
        gst_query_unref (query);
        g_value_reset (&item);
        done = have_world (element, world);
        break;
      }
      case GST_ITERATOR_RESYNC:
        gst_iterator_resync (it);
        break;
      default:
        done = TRUE;
        break;
    }
  }
  g_value_unset (&item);
  gst_iterator_free (it);
  return have_world (element, world);
}

static void
find_world (GstElement * element, LingbotWorld ** world)
{
  GstMessage *msg;

  /* 1) downstream, 2) upstream (also after a refused downstream answer):
   * a neighbour that already holds a world */
  if (query_peers (element, GST_PAD_SRC, world)
      || query_peers (element, GST_PAD_SINK, world))
    return;

  /* 3) need-context: the bin's cached context or the application answers
   * synchronously through gst_element_set_context() */
  msg = gst_message_new_need_context (GST_OBJECT_CAST (element),
      GST_LINGBOT_WORLD_CONTEXT_TYPE);
  gst_element_post_message (element, msg);
}

/**
 * gst_lingbot_ensure_world: (skip)
 * @element: the element
 * @model_path: (nullable): the element's model-path (%NULL: any world, and
 *   nothing is created)
 * @devices: (nullable): the element's devices
 * @precision: (nullable): the DiT precision when creating ("fp32", "bf16"
 *   or "fp8", LingbotWorldOptions.precision; %NULL: fp32).  A world found
 *   in a context keeps its own precision, as it keeps its text encoder.
 *   "bf16" on CPU ranks posts an INFO message: they compute it in f32.
 * @text_encoder: load the umT5 encoder when creating (not needed with
 *   prompt embeddings)
 * @create: create the world when none is found
 * @world: (inout): the element's world slot, filled by its set_context vfunc
 *   (gst_lingbot_handle_set_context())
 * @error: return location for a #GError
 *
 * The full context dance: query downstream, query upstream, need-context,
 * else (with @create and a @model_path) lingbot_world_new() and
 * have-context so that every other element of the pipeline shares it.
 * Each answer goes through the element's set_context
 * (gst_lingbot_handle_set_context(), which refuses a world of another
 * model or other devices); after a refused answer the search goes on
 * with the next pad, then upstream, then need-context.
 * Not for bindings (skipped), as gst_lingbot_handle_set_context().
 *
 * Returns: %TRUE when *@world is set; %FALSE with @error when creating it
 *   failed, %FALSE without error when none was found and none created
 */
gboolean
gst_lingbot_ensure_world (GstElement * element, const char *model_path,
    const char *devices, const char *precision, gboolean text_encoder,
    gboolean create, LingbotWorld ** world, GError ** error)
{
  LingbotWorld *w;
  GstContext *context;
  GstMessage *msg;

  init_debug ();
  if (have_world (element, world))
    return TRUE;
  find_world (element, world);
  if (have_world (element, world))
    return TRUE;
  if (!create || model_path == NULL)
    return FALSE;

  GST_INFO_OBJECT (element, "creating world: model %s, devices %s, "
      "precision %s", model_path, devices ? devices : "cpu:1",
      GST_STR_NULL (precision));
  w = gst_lingbot_world_new (model_path, devices, precision, text_encoder,
      error);
  if (w == NULL)
    return FALSE;
  /* CPU ranks compute a bf16 request in f32 (LingbotWorldOptions): say
   * so, as the world and its context still carry "bf16".  The text goes
   * in the debug argument too: gst-launch-1.0 prints only an INFO
   * message's debug string (an empty "INFO:" with the source line
   * otherwise). */
  if (g_strcmp0 (precision, "bf16") == 0 && (devices == NULL
          || g_str_has_prefix (devices, "cpu"))) {
    g_autofree char *text = g_strdup_printf ("precision=bf16 has no "
        "effect on CPU ranks (devices=%s): they compute in f32; on GPU "
        "ranks it selects bf16 GEMMs", devices ? devices : "cpu:1");

    GST_ELEMENT_INFO (element, RESOURCE, SETTINGS, ("%s", text), ("%s", text));
  }

  context = gst_lingbot_context_new (w);
  GST_OBJECT_LOCK (element);
  if (*world == NULL)
    *world = lingbot_world_ref (w);
  GST_OBJECT_UNLOCK (element);
  lingbot_world_unref (w);

  /* keep it as our own context too (gst_element_get_context()), then tell
   * the bin, which hands it to every element posting need-context */
  gst_element_set_context (element, context);
  msg = gst_message_new_have_context (GST_OBJECT_CAST (element), context);
  gst_element_post_message (element, msg);
  return TRUE;
}

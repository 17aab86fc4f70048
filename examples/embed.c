/* lingbot-gst: embedding the plugin in an application
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The application creates the world (devices + model) itself, wraps it in a
 * "lingbot.world" GstContext and hands it to the pipeline, so the model is
 * loaded once and can outlive any number of pipelines.  It then steers the
 * session with lingbotcontrolsrc's action signals (the same path a
 * keyboard or a WebRTC data channel would take) and counts the frames.
 *
 *   lingbot-embed MODEL_DIR IMAGE.jpg [PROMPT_EMBEDS.safetensors|- [W H
 *       [DEVICES]]]
 *
 * Without PROMPT_EMBEDS, or with `-` in its place (to give W H without
 * one), the model's umT5 encodes a built-in prompt.  W H (multiples of 16)
 * default to the model's pixel area (832x480: minutes on a CPU).
 */
#include <stdlib.h>
#include <gst/gst.h>

#include <gst/lingbot/lingbot.h>

#define FRAMES 29

typedef struct
{
  GMainLoop *loop;
  GstElement *pipeline;
  GstElement *controls;
  guint frames;
  guint chunks;
  gboolean failed;
} App;

static GstBusSyncReply
on_sync_message (GstBus * bus, GstMessage * msg, gpointer user_data)
{
  GstContext *context = user_data;
  const char *type;

  /* the elements ask for the world while they change state */
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_NEED_CONTEXT
      && gst_message_parse_context_type (msg, &type)
      && g_strcmp0 (type, GST_LINGBOT_WORLD_CONTEXT_TYPE) == 0)
    gst_element_set_context (GST_ELEMENT (GST_MESSAGE_SRC (msg)), context);
  return GST_BUS_PASS;
}

static gboolean
on_message (GstBus * bus, GstMessage * msg, gpointer user_data)
{
  App *app = user_data;

  switch (GST_MESSAGE_TYPE (msg)) {
    case GST_MESSAGE_ELEMENT:{
      const GstStructure *s = gst_message_get_structure (msg);
      if (gst_structure_has_name (s, "lingbot-chunk")) {
        guint64 index = 0;
        int frames = 0;
        double dit = 0;
        const char *keys = gst_structure_get_string (s, "keys-string");
        gst_structure_get_uint64 (s, "index", &index);
        gst_structure_get_int (s, "frames", &frames);
        gst_structure_get_double (s, "dit-seconds", &dit);
        g_print ("chunk %" G_GUINT64_FORMAT ": %d frames, keys '%s', DiT "
            "%.3f s\n", index, frames, keys ? keys : "", dit);
        /* a tap between chunks: turn right for the second chunk */
        if (++app->chunks == 1) {
          gboolean ok;
          g_signal_emit_by_name (app->controls, "release-key", "KeyW", &ok);
          g_signal_emit_by_name (app->controls, "press-key", "ArrowRight", &ok);
        }
      }
      break;
    }
    case GST_MESSAGE_ERROR:{
      g_autoptr (GError) err = NULL;
      g_autofree char *dbg = NULL;
      gst_message_parse_error (msg, &err, &dbg);
      g_printerr ("error from %s: %s\n%s\n", GST_OBJECT_NAME (msg->src),
          err->message, dbg ? dbg : "");
      app->failed = TRUE;
      g_main_loop_quit (app->loop);
      break;
    }
    case GST_MESSAGE_EOS:
      g_main_loop_quit (app->loop);
      break;
    case GST_MESSAGE_LATENCY:
      /* a live session's latency moves (up at once, down in steps): the
       * application re-distributes it, as gst-launch-1.0 does, so that a
       * sink with sync=true shows each frame at its time */
      gst_bin_recalculate_latency (GST_BIN (app->pipeline));
      break;
    default:
      break;
  }
  return G_SOURCE_CONTINUE;
}

static void
on_handoff (GstElement * sink, GstBuffer * buf, GstPad * pad,
    gpointer user_data)
{
  App *app = user_data;

  g_atomic_int_inc (&app->frames);
}

int
main (int argc, char **argv)
{
  LingbotWorldOptions opts = LINGBOT_WORLD_OPTIONS_INIT;
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotWorld) world = NULL;
  g_autofree char *desc = NULL;
  const char *embeds = argc > 3 && g_strcmp0 (argv[3], "-") != 0 ?
      argv[3] : NULL;
  int width = argc > 5 ? atoi (argv[4]) : 0;
  int height = argc > 5 ? atoi (argv[5]) : 0;
  App app = { 0 };
  GstContext *context;
  GstElement *pipeline, *sink;
  GstBus *bus;
  gboolean ok;
  guint64 cut = 0;

  gst_init (&argc, &argv);
  if (argc < 3) {
    g_printerr ("usage: %s MODEL_DIR IMAGE.jpg [PROMPT_EMBEDS|- [W H "
        "[DEVICES]]]\n", argv[0]);
    return 2;
  }

  /* 1. the world, created by the application */
  opts.model_path = argv[1];
  opts.devices = argc > 6 ? argv[6] : "cpu:1";
  opts.load_text_encoder = embeds == NULL;
  world = lingbot_world_new (&opts, &err);
  if (world == NULL) {
    g_printerr ("%s\n", err->message);
    return 1;
  }
  context = gst_lingbot_context_new (world);

  /* 2. a pipeline that uses it: live generation steered by signals */
  desc = g_strdup_printf ("lingbotcontrolsrc name=controls ! "
      "lingbotgen name=gen is-live=true frames=%d model-path=\"%s\" "
      "devices=%s image-location=\"%s\" width=%d height=%d ! "
      "lingbotvaedec name=dec ! fakesink name=sink signal-handoffs=true "
      "sync=false", FRAMES, argv[1], opts.devices, argv[2], width, height);
  /* a missing element (no plugin on GST_PLUGIN_PATH) fails here rather
   * than leaving a partial pipeline */
  pipeline = gst_parse_launch_full (desc, NULL, GST_PARSE_FLAG_FATAL_ERRORS,
      &err);
  if (pipeline == NULL) {
    g_printerr ("%s\n", err->message);
    return 1;
  }
  {
    GstElement *gen = gst_bin_get_by_name (GST_BIN (pipeline), "gen");
    if (embeds)
      g_object_set (gen, "prompt-embeds", embeds, NULL);
    else
      g_object_set (gen, "prompt", "a medieval town square at noon", NULL);
    gst_object_unref (gen);
  }
  app.pipeline = pipeline;
  app.controls = gst_bin_get_by_name (GST_BIN (pipeline), "controls");
  sink = gst_bin_get_by_name (GST_BIN (pipeline), "sink");
  g_signal_connect (sink, "handoff", G_CALLBACK (on_handoff), &app);
  gst_object_unref (sink);

  /* hand the context over both ways: up front, and on need-context */
  gst_element_set_context (pipeline, context);
  bus = gst_element_get_bus (pipeline);
  gst_bus_set_sync_handler (bus, on_sync_message, context, NULL);
  app.loop = g_main_loop_new (NULL, FALSE);
  gst_bus_add_watch (bus, on_message, &app);

  /* live mode waits while nothing is held: hold "forward" */
  g_signal_emit_by_name (app.controls, "press-key", "KeyW", &ok);
  gst_element_set_state (pipeline, GST_STATE_PLAYING);
  g_main_loop_run (app.loop);
  gst_element_set_state (pipeline, GST_STATE_NULL);

  /* a key change while the generator waits for the next chunk's time (it
   * is faster than real time) ends the chunk on screen early: lingbotgen
   * key-cut; the decoder counts the frames it dropped for it */
  {
    GstElement *dec = gst_bin_get_by_name (GST_BIN (pipeline), "dec");
    GstStructure *stats = NULL;

    g_object_get (dec, "stats", &stats, NULL);
    gst_structure_get_uint64 (stats, "frames-cut", &cut);
    gst_structure_free (stats);
    gst_object_unref (dec);
  }
  g_print ("frames: %u shown, %" G_GUINT64_FORMAT " cut short by the key "
      "change\n", g_atomic_int_get (&app.frames), cut);
  gst_bus_remove_watch (bus);
  gst_bus_set_sync_handler (bus, NULL, NULL, NULL);
  gst_object_unref (bus);
  gst_object_unref (app.controls);
  gst_object_unref (pipeline);
  gst_context_unref (context);
  g_main_loop_unref (app.loop);
  return app.failed || app.frames + cut != FRAMES ? 1 : 0;
}

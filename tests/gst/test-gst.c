/* lingbot-gst: the GStreamer plugin (suite gst)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Runs on a tiny random model written at start-up into a temporary
 * directory (DiT tiny preset with chunk 4, VAE width 8, a prompt-embeds file
 * so that no umT5 is needed, and a JPEG start image): 64x64 output, 29
 * frames = 2 chunks (13 + 16).  The trace is tests/data/gst/trace.json.
 *
 * CK_FORK=no (meson.build): the model writers start OpenMP threads, which
 * a forked child must not inherit.
 */
#include <string.h>
#include <glib/gstdio.h>
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <gst/app/gstappsink.h>
#include <gst/video/navigation.h>
#include <gst/video/video.h>

#include "gst/gstlingbotcontext.h"
#include "gst/gstlingbotcontrolsrc.h"
#include "kernels/error.h"
#include "lingbot/lingbot.h"
#include "lingbot/text-encoder.h"

static char *tmpdir;
static char *model_dir;
static char *embeds_path;
static char *image_path;
static char *trace_path;
static char *malformed_path;

#define N_FRAMES 29

/* ---- fixture ---- */

static void
write_fixture (void)
{
  g_autoptr (GError) err = NULL;
  LingbotDitConfig cfg;
  const char *root = g_getenv ("LINGBOT_SOURCE_ROOT");
  g_autofree char *dit = NULL, *vae = NULL, *desc = NULL;
  g_autoptr (LbTensor) ctx = NULL;
  GstElement *p;
  GstMessage *msg;

  g_assert_nonnull (root);
  trace_path = g_build_filename (root, "tests", "data", "gst", "trace.json",
      NULL);
  malformed_path = g_build_filename (root, "tests", "data", "gst",
      "malformed.json", NULL);

  tmpdir = g_dir_make_tmp ("lingbot-gst-XXXXXX", &err);
  g_assert_no_error (err);
  model_dir = g_build_filename (tmpdir, "model", NULL);
  dit = g_build_filename (model_dir, "transformers", NULL);
  g_assert_cmpint (g_mkdir_with_parents (dit, 0755), ==, 0);
  lingbot_dit_config_init_preset (&cfg, LINGBOT_DIT_PRESET_TINY);
  cfg.chunk_frames = 4;
  g_assert_true (lingbot_dit_write_random (&cfg, dit, 1, LB_DTYPE_BF16, 3,
          &err));
  g_assert_no_error (err);
  vae = g_build_filename (model_dir, "Wan2.1_VAE.safetensors", NULL);
  g_assert_true (lingbot_vae_write_random (vae, 8, 5, &err));
  g_assert_no_error (err);

  ctx = lb_tensor_new_f32 (2, (int64_t) 16, (int64_t) cfg.text_dim);
  for (int64_t i = 0; i < lb_tensor_numel (ctx); i++)
    ((float *) ctx->data)[i] = (float) ((i * 37 % 101) - 50) / 50.0f;
  embeds_path = g_build_filename (tmpdir, "prompt.safetensors", NULL);
  g_assert_true (lingbot_prompt_embeds_save (embeds_path, ctx, "a castle",
          16, &err));
  g_assert_no_error (err);

  image_path = g_build_filename (tmpdir, "start.jpg", NULL);
  desc = g_strdup_printf ("videotestsrc num-buffers=1 pattern=smpte ! "
      "video/x-raw,width=80,height=48 ! jpegenc ! filesink location=%s",
      image_path);
  p = gst_parse_launch (desc, &err);
  g_assert_no_error (err);
  gst_element_set_state (p, GST_STATE_PLAYING);
  msg = gst_bus_timed_pop_filtered (GST_ELEMENT_BUS (p), 10 * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  g_assert_nonnull (msg);
  g_assert_cmpint (GST_MESSAGE_TYPE (msg), ==, GST_MESSAGE_EOS);
  gst_message_unref (msg);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (p);
}

static void
rm_rf (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR)) {
    GDir *d = g_dir_open (path, 0, NULL);
    const char *n;
    while (d && (n = g_dir_read_name (d))) {
      g_autofree char *c = g_build_filename (path, n, NULL);
      rm_rf (c);
    }
    if (d)
      g_dir_close (d);
    g_rmdir (path);
  } else {
    g_unlink (path);
  }
}

/* ---- running a pipeline ---- */

typedef struct {
  GPtrArray *samples;           /* GstSample */
  GArray *chunk_frames;         /* int, per lingbot-chunk message */
  GArray *chunk_keys;           /* guint, per lingbot-chunk message */
  char *error;                  /* first error message */
  gboolean eos;
} Run;

static void
run_clear (Run * r)
{
  g_clear_pointer (&r->samples, g_ptr_array_unref);
  g_clear_pointer (&r->chunk_frames, g_array_unref);
  g_clear_pointer (&r->chunk_keys, g_array_unref);
  g_clear_pointer (&r->error, g_free);
}

static GstFlowReturn
on_sample (GstAppSink * sink, gpointer user_data)
{
  Run *r = user_data;
  g_ptr_array_add (r->samples, gst_app_sink_pull_sample (sink));
  return GST_FLOW_OK;
}

static GstElement *
pipeline_new (const char *desc, Run * r)
{
  g_autoptr (GError) err = NULL;
  GstElement *p = gst_parse_launch (desc, &err);
  GstElement *sink;

  g_assert_no_error (err);
  memset (r, 0, sizeof (*r));
  r->samples = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_sample_unref);
  r->chunk_frames = g_array_new (FALSE, FALSE, sizeof (int));
  r->chunk_keys = g_array_new (FALSE, FALSE, sizeof (guint));
  sink = gst_bin_get_by_name (GST_BIN (p), "sink");
  if (sink && GST_IS_APP_SINK (sink)) {
    GstAppSinkCallbacks cb = { 0 };
    cb.new_sample = on_sample;
    gst_app_sink_set_callbacks (GST_APP_SINK (sink), &cb, r, NULL);
  }
  gst_clear_object (&sink);
  return p;
}

/* runs to EOS or error; returns the state change result of PLAYING */
static GstStateChangeReturn
pipeline_run (GstElement * p, Run * r)
{
  GstBus *bus = gst_element_get_bus (p);
  GstStateChangeReturn sret = gst_element_set_state (p, GST_STATE_PLAYING);

  while (TRUE) {
    GstMessage *msg = gst_bus_timed_pop_filtered (bus, 60 * GST_SECOND,
        GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_ELEMENT);
    if (msg == NULL) {
      r->error = g_strdup ("timeout");
      break;
    }
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ELEMENT) {
      const GstStructure *s = gst_message_get_structure (msg);
      if (gst_structure_has_name (s, "lingbot-chunk")) {
        int frames = 0;
        guint64 index = 0;
        guint keys = 0;
        g_assert_true (gst_structure_get_int (s, "frames", &frames));
        g_assert_true (gst_structure_get_uint (s, "keys", &keys));
        g_array_append_val (r->chunk_keys, keys);
        g_assert_true (gst_structure_get_uint64 (s, "index", &index));
        g_assert_cmpuint (index, ==, r->chunk_frames->len);
        g_array_append_val (r->chunk_frames, frames);
      }
      gst_message_unref (msg);
      continue;
    }
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
      g_autoptr (GError) err = NULL;
      g_autofree char *dbg = NULL;
      gst_message_parse_error (msg, &err, &dbg);
      if (r->error == NULL)
        r->error = g_strdup (err->message);
    } else {
      r->eos = TRUE;
    }
    gst_message_unref (msg);
    break;
  }
  gst_object_unref (bus);
  gst_element_set_state (p, GST_STATE_NULL);
  return sret;
}

static char *
gen_desc (const char *gen, const char *devices, const char *extra)
{
  return g_strdup_printf ("%s model-path=%s prompt-embeds=%s "
      "image-location=%s width=64 height=64 frames=%d devices=%s seed=7 %s",
      gen, model_dir, embeds_path, image_path, N_FRAMES, devices,
      extra ? extra : "");
}

/* 29 frames, I420 64x64 at 16/1, PTS n/16 s, 2 chunks */
static void
check_run (Run * r)
{
  g_assert_cmpstr (r->error, ==, NULL);
  g_assert_true (r->eos);
  g_assert_cmpuint (r->samples->len, ==, N_FRAMES);
  g_assert_cmpuint (r->chunk_frames->len, ==, 2);
  g_assert_cmpint (g_array_index (r->chunk_frames, int, 0), ==, 13);
  g_assert_cmpint (g_array_index (r->chunk_frames, int, 1), ==, 16);
  /* the trace on the chunk timeline: W tapped at 0 s, D pressed at 0.9 s
   * (after chunk 0 ends at 13/16 s) */
  g_assert_cmphex (g_array_index (r->chunk_keys, guint, 0), ==,
      LINGBOT_KEY_W);
  g_assert_cmphex (g_array_index (r->chunk_keys, guint, 1), ==,
      LINGBOT_KEY_D);
  for (guint i = 0; i < r->samples->len; i++) {
    GstSample *s = g_ptr_array_index (r->samples, i);
    GstBuffer *b = gst_sample_get_buffer (s);
    GstVideoInfo info;
    g_assert_true (gst_video_info_from_caps (&info, gst_sample_get_caps (s)));
    g_assert_cmpint (GST_VIDEO_INFO_FORMAT (&info), ==,
        GST_VIDEO_FORMAT_I420);
    g_assert_cmpint (info.width, ==, 64);
    g_assert_cmpint (info.height, ==, 64);
    g_assert_cmpint (info.fps_n, ==, 16);
    g_assert_cmpint (info.fps_d, ==, 1);
    g_assert_cmpuint (GST_BUFFER_PTS (b), ==,
        gst_util_uint64_scale (i, GST_SECOND, 16));
    g_assert_cmpuint (GST_BUFFER_DURATION (b), >, 0);
    g_assert_cmpuint (gst_buffer_get_size (b), ==, info.size);
  }
}

static int
max_diff (Run * a, Run * b)
{
  int worst = 0;

  for (guint i = 0; i < a->samples->len; i++) {
    GstMapInfo ma, mb;
    GstBuffer *ba = gst_sample_get_buffer (g_ptr_array_index (a->samples, i));
    GstBuffer *bb = gst_sample_get_buffer (g_ptr_array_index (b->samples, i));
    gst_buffer_map (ba, &ma, GST_MAP_READ);
    gst_buffer_map (bb, &mb, GST_MAP_READ);
    g_assert_cmpuint (ma.size, ==, mb.size);
    for (gsize k = 0; k < ma.size; k++)
      worst = MAX (worst, ABS ((int) ma.data[k] - (int) mb.data[k]));
    gst_buffer_unmap (ba, &ma);
    gst_buffer_unmap (bb, &mb);
  }
  return worst;
}

static gboolean
frames_vary (Run * r)
{
  GstMapInfo m;
  GstBuffer *b = gst_sample_get_buffer (g_ptr_array_index (r->samples, 0));
  gboolean vary = FALSE;

  gst_buffer_map (b, &m, GST_MAP_READ);
  for (gsize k = 1; k < 64 * 64 && !vary; k++)
    vary = m.data[k] != m.data[0];
  gst_buffer_unmap (b, &m);
  return vary;
}

/* ---- pipeline tests ---- */

GST_START_TEST (test_pipeline)
{
  g_autofree char *g1 = gen_desc ("lingbotgen", "cpu:1", NULL);
  g_autofree char *g2 = gen_desc ("lingbotgen", "cpu:2", NULL);
  g_autofree char *gb = gen_desc ("lingbotbin", "cpu:1", NULL);
  g_autofree char *d1 = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! lingbotvaedec ! appsink name=sink sync=false", trace_path, g1);
  g_autofree char *d2 = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! lingbotvaedec ! appsink name=sink sync=false", trace_path, g2);
  g_autofree char *db = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! appsink name=sink sync=false", trace_path, gb);
  Run r1, r2, rb;
  GstElement *p;

  p = pipeline_new (d1, &r1);
  fail_unless (pipeline_run (p, &r1) != GST_STATE_CHANGE_FAILURE);
  gst_object_unref (p);
  check_run (&r1);
  g_assert_true (frames_vary (&r1));

  /* two ranks: height-sharded DiT and VAE give the same video */
  p = pipeline_new (d2, &r2);
  pipeline_run (p, &r2);
  gst_object_unref (p);
  check_run (&r2);
  g_assert_cmpint (max_diff (&r1, &r2), <=, 2);

  /* the bin: the same pipeline in one element */
  p = pipeline_new (db, &rb);
  pipeline_run (p, &rb);
  gst_object_unref (p);
  check_run (&rb);
  g_assert_cmpint (max_diff (&r1, &rb), ==, 0);

  run_clear (&r1);
  run_clear (&r2);
  run_clear (&rb);
}

GST_END_TEST;

/* replaces each latent buffer by a plain copy of its bytes, no meta */
static GstPadProbeReturn
strip_meta (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  GstBuffer *b = GST_PAD_PROBE_INFO_BUFFER (info);
  GstMapInfo m;
  GstBuffer *plain;

  gst_buffer_map (b, &m, GST_MAP_READ);
  plain = gst_buffer_new_memdup (m.data, m.size);
  gst_buffer_unmap (b, &m);
  gst_buffer_copy_into (plain, b, GST_BUFFER_COPY_TIMESTAMPS, 0, -1);
  gst_buffer_unref (b);
  GST_PAD_PROBE_INFO_DATA (info) = plain;
  return GST_PAD_PROBE_OK;
}

GST_START_TEST (test_image_pad_and_plain_latents)
{
  g_autofree char *g1 = gen_desc ("lingbotgen", "cpu:1", NULL);
  g_autofree char *d1 = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! lingbotvaedec name=dec model-path=%s ! appsink name=sink "
      "sync=false", trace_path, g1, model_dir);
  g_autofree char *d2 = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "lingbotgen name=gen model-path=%s prompt-embeds=%s width=64 "
      "height=64 frames=%d seed=7 ! lingbotvaedec ! appsink name=sink "
      "sync=false  filesrc location=%s ! jpegdec idct-method=islow ! "
      "videoconvert ! video/x-raw,format=RGB ! gen.image", trace_path,
      model_dir, embeds_path, N_FRAMES, image_path);
  Run r1, r2, r3;
  GstElement *p, *dec;
  GstPad *pad;

  p = pipeline_new (d1, &r1);
  pipeline_run (p, &r1);
  gst_object_unref (p);
  check_run (&r1);

  /* latents without the session meta: the decoder's own VAE decoder */
  p = pipeline_new (d1, &r3);
  dec = gst_bin_get_by_name (GST_BIN (p), "dec");
  pad = gst_element_get_static_pad (dec, "sink");
  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, strip_meta, NULL, NULL);
  gst_object_unref (pad);
  gst_object_unref (dec);
  pipeline_run (p, &r3);
  gst_object_unref (p);
  check_run (&r3);
  g_assert_cmpint (max_diff (&r1, &r3), <=, 1);

  /* the same JPEG through jpegdec and the image pad: decoders differ by a
   * few levels, which the model's output follows */
  p = pipeline_new (d2, &r2);
  pipeline_run (p, &r2);
  gst_object_unref (p);
  check_run (&r2);
  GST_INFO ("image pad vs image-location: max diff %d", max_diff (&r1, &r2));
  g_assert_cmpint (max_diff (&r1, &r2), <=, 16);
  run_clear (&r1);
  run_clear (&r2);
  run_clear (&r3);
}

GST_END_TEST;

GST_START_TEST (test_mp4)
{
  GstElementFactory *f = gst_element_factory_find ("x264enc");
  g_autofree char *g1 = NULL, *desc = NULL, *out = NULL;
  GStatBuf st;
  Run r;
  GstElement *p;

  if (f == NULL) {
    GST_INFO ("x264enc missing: skipped");
    return;
  }
  gst_object_unref (f);
  out = g_build_filename (tmpdir, "out.mp4", NULL);
  g1 = gen_desc ("lingbotgen", "cpu:1", NULL);
  desc = g_strdup_printf ("lingbotcontrolsrc location=%s ! %s ! "
      "lingbotvaedec ! videoconvert ! x264enc speed-preset=ultrafast ! "
      "mp4mux ! filesink location=%s", trace_path, g1, out);
  p = pipeline_new (desc, &r);
  pipeline_run (p, &r);
  gst_object_unref (p);
  g_assert_cmpstr (r.error, ==, NULL);
  g_assert_true (r.eos);
  g_assert_cmpint (g_stat (out, &st), ==, 0);
  g_assert_cmpint (st.st_size, >, 1000);
  run_clear (&r);
}

GST_END_TEST;

/* ---- error paths ---- */

/* the state change fails and the bus carries an error containing @needle */
static void
expect_failure (const char *desc, const char *needle)
{
  Run r;
  GstElement *p = pipeline_new (desc, &r);
  GstStateChangeReturn ret = pipeline_run (p, &r);

  gst_object_unref (p);
  g_assert_cmpint (ret, ==, GST_STATE_CHANGE_FAILURE);
  g_assert_nonnull (r.error);
  if (strstr (r.error, needle) == NULL)
    g_error ("error '%s' does not name '%s'", r.error, needle);
  g_assert_cmpuint (r.samples->len, ==, 0);
  run_clear (&r);
}

GST_START_TEST (test_missing_model)
{
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "lingbotgen model-path=/nonexistent/lingbot-model ! lingbotvaedec ! "
      "fakesink", trace_path);

  expect_failure (desc, "/nonexistent/lingbot-model");
}

GST_END_TEST;

GST_START_TEST (test_malformed_trace)
{
  g_autofree char *g1 = gen_desc ("lingbotgen", "cpu:1", NULL);
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! lingbotvaedec ! fakesink", malformed_path, g1);

  expect_failure (desc, "event 1");
  expect_failure (desc, "delay_s");
}

GST_END_TEST;

GST_START_TEST (test_bad_devices)
{
  g_autofree char *g1 = gen_desc ("lingbotgen", "gpu:x", NULL);
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! lingbotvaedec ! fakesink", trace_path, g1);

  expect_failure (desc, "gpu:x");
}

GST_END_TEST;

/* ---- context sharing ---- */

static LingbotWorld *
element_world (GstElement * e)
{
  GstContext *ctx = gst_element_get_context (e,
      GST_LINGBOT_WORLD_CONTEXT_TYPE);
  LingbotWorld *w;

  if (ctx == NULL)
    return NULL;
  w = gst_lingbot_context_get_world (ctx);
  gst_context_unref (ctx);
  return w;
}

GST_START_TEST (test_context_shared)
{
  g_autofree char *g1 = gen_desc ("lingbotgen name=g1", "cpu:1", NULL);
  g_autofree char *g2 = gen_desc ("lingbotgen name=g2", "cpu:1", NULL);
  g_autofree char *desc = g_strdup_printf ("%s ! fakesink %s ! fakesink",
      g1, g2);
  g_autoptr (GError) err = NULL;
  GstElement *p = gst_parse_launch (desc, &err);
  GstElement *e1, *e2;
  GstContext *c1, *c2;
  LingbotWorld *w1, *w2;

  g_assert_no_error (err);
  e1 = gst_bin_get_by_name (GST_BIN (p), "g1");
  e2 = gst_bin_get_by_name (GST_BIN (p), "g2");
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_READY), ==,
      GST_STATE_CHANGE_SUCCESS);

  c1 = gst_element_get_context (e1, GST_LINGBOT_WORLD_CONTEXT_TYPE);
  c2 = gst_element_get_context (e2, GST_LINGBOT_WORLD_CONTEXT_TYPE);
  g_assert_nonnull (c1);
  g_assert_true (c1 == c2);
  w1 = element_world (e1);
  w2 = element_world (e2);
  g_assert_true (w1 == w2);
  g_assert_cmpstr (lingbot_world_get_devices (w1), ==, "cpu:1");

  lingbot_world_unref (w1);
  lingbot_world_unref (w2);
  gst_context_unref (c1);
  gst_context_unref (c2);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (e1);
  gst_object_unref (e2);
  gst_object_unref (p);
}

GST_END_TEST;

static GstBusSyncReply
answer_need_context (GstBus * bus, GstMessage * msg, gpointer user_data)
{
  const char *type;
  GstContext *ctx = user_data;

  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_NEED_CONTEXT
      && gst_message_parse_context_type (msg, &type)
      && g_strcmp0 (type, GST_LINGBOT_WORLD_CONTEXT_TYPE) == 0)
    gst_element_set_context (GST_ELEMENT (GST_MESSAGE_SRC (msg)), ctx);
  return GST_BUS_PASS;
}

GST_START_TEST (test_context_application)
{
  LingbotWorldOptions opts = LINGBOT_WORLD_OPTIONS_INIT;
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotWorld) world = NULL;
  g_autofree char *g1 = NULL, *desc = NULL;
  GstContext *ctx;
  GstElement *p, *gen;
  GstBus *bus;
  LingbotWorld *used;
  Run r;

  opts.model_path = model_dir;
  opts.load_text_encoder = FALSE;
  world = lingbot_world_new (&opts, &err);
  g_assert_no_error (err);
  ctx = gst_lingbot_context_new (world);

  /* answered from a bus sync handler, and the run uses it */
  g1 = gen_desc ("lingbotgen name=gen", "cpu:1", NULL);
  desc = g_strdup_printf ("lingbotcontrolsrc location=%s ! %s ! "
      "lingbotvaedec ! appsink name=sink sync=false", trace_path, g1);
  p = pipeline_new (desc, &r);
  bus = gst_element_get_bus (p);
  gst_bus_set_sync_handler (bus, answer_need_context, ctx, NULL);
  gen = gst_bin_get_by_name (GST_BIN (p), "gen");
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_READY), ==,
      GST_STATE_CHANGE_SUCCESS);
  used = element_world (gen);
  g_assert_true (used == world);
  lingbot_world_unref (used);
  pipeline_run (p, &r);
  check_run (&r);
  run_clear (&r);
  gst_bus_set_sync_handler (bus, NULL, NULL, NULL);
  gst_object_unref (bus);
  gst_object_unref (gen);
  gst_object_unref (p);

  /* set on the pipeline up front */
  p = gst_parse_launch ("lingbotgen name=gen ! fakesink", &err);
  g_assert_no_error (err);
  gen = gst_bin_get_by_name (GST_BIN (p), "gen");
  g_object_set (gen, "model-path", model_dir, "prompt-embeds", embeds_path,
      NULL);
  gst_element_set_context (p, ctx);
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_READY), ==,
      GST_STATE_CHANGE_SUCCESS);
  used = element_world (gen);
  g_assert_true (used == world);
  lingbot_world_unref (used);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (gen);
  gst_object_unref (p);
  gst_context_unref (ctx);
}

GST_END_TEST;

/* ---- lingbotcontrolsrc ---- */

static GstLingbotControlRecord
pull_record (GstHarness * h, GstBuffer ** out)
{
  GstLingbotControlRecord rec;
  GstBuffer *b = gst_harness_pull (h);

  g_assert_nonnull (b);
  g_assert_cmpuint (gst_buffer_extract (b, 0, &rec, sizeof (rec)), ==,
      sizeof (rec));
  g_assert_cmphex (rec.magic, ==, GST_LINGBOT_CONTROL_MAGIC);
  if (out)
    *out = b;
  else
    gst_buffer_unref (b);
  return rec;
}

GST_START_TEST (test_navigation)
{
  GstHarness *h = gst_harness_new ("lingbotcontrolsrc");
  GstLingbotControlRecord rec;
  gboolean known = TRUE;

  gst_harness_play (h);
  g_assert_true (gst_harness_push_upstream_event (h,
          gst_navigation_event_new_key_press ("ArrowUp", 0)));
  rec = pull_record (h, NULL);
  g_assert_cmpint (rec.type, ==, GST_LINGBOT_CONTROL_PRESS);
  g_assert_cmphex (rec.keys, ==, LINGBOT_KEY_W);
  g_assert_cmphex (rec.held, ==, LINGBOT_KEY_W);

  /* an unknown key changes nothing */
  gst_harness_push_upstream_event (h,
      gst_navigation_event_new_key_press ("F13", 0));
  gst_harness_push_upstream_event (h,
      gst_navigation_event_new_key_press ("KeyD", 0));
  rec = pull_record (h, NULL);
  g_assert_cmphex (rec.keys, ==, LINGBOT_KEY_D);
  g_assert_cmphex (rec.held, ==, LINGBOT_KEY_W | LINGBOT_KEY_D);

  gst_harness_push_upstream_event (h,
      gst_navigation_event_new_key_release ("ArrowUp", 0));
  rec = pull_record (h, NULL);
  g_assert_cmpint (rec.type, ==, GST_LINGBOT_CONTROL_RELEASE);
  g_assert_cmphex (rec.held, ==, LINGBOT_KEY_D);

  /* action signals */
  g_signal_emit_by_name (h->element, "press-key", "nope", &known);
  g_assert_false (known);
  g_signal_emit_by_name (h->element, "press-key", "j", &known);
  g_assert_true (known);
  rec = pull_record (h, NULL);
  g_assert_cmphex (rec.held, ==, LINGBOT_KEY_D | LINGBOT_KEY_J);
  g_signal_emit_by_name (h->element, "reset-pose");
  rec = pull_record (h, NULL);
  g_assert_cmpint (rec.type, ==, GST_LINGBOT_CONTROL_RESET);
  g_assert_cmphex (rec.held, ==, 0);
  gst_harness_teardown (h);
}

GST_END_TEST;

GST_START_TEST (test_trace_records)
{
  GstHarness *h = gst_harness_new ("lingbotcontrolsrc");
  GstLingbotControlRecord rec;
  GstBuffer *b;
  static const struct {
    int type;
    guint keys;
    GstClockTime pts;
  } want[] = {
    {GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_W, 0},
    {GST_LINGBOT_CONTROL_RELEASE, LINGBOT_KEY_W, 500 * GST_MSECOND},
    {GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_D, 900 * GST_MSECOND},
    {GST_LINGBOT_CONTROL_RELEASE, LINGBOT_KEY_D, 1500 * GST_MSECOND},
  };

  g_object_set (h->element, "location", trace_path, NULL);
  gst_harness_play (h);
  /* KeyQ (event 2) is not a control key: skipped */
  for (guint i = 0; i < G_N_ELEMENTS (want); i++) {
    rec = pull_record (h, &b);
    g_assert_cmpint (rec.type, ==, want[i].type);
    g_assert_cmphex (rec.keys, ==, want[i].keys);
    g_assert_cmpuint (GST_BUFFER_PTS (b), ==, want[i].pts);
    g_assert_cmpuint (rec.time_ns, ==, want[i].pts);
    gst_buffer_unref (b);
  }
  g_assert_true (gst_harness_pull_until_eos (h, &b));
  g_assert_null (b);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ---- the embedding example ---- */

GST_START_TEST (test_embed_example)
{
  const char *exe = g_getenv ("LINGBOT_EMBED_EXAMPLE");
  g_autoptr (GError) err = NULL;
  g_autofree char *out = NULL, *errout = NULL;
  int status = 0;
  const char *argv[] = { exe, model_dir, image_path, embeds_path, "64",
    "64", NULL
  };

  if (exe == NULL)
    return;
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, 0, NULL, NULL,
          &out, &errout, &status, &err));
  g_assert_no_error (err);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("embed example failed:\n%s\n%s", out, errout);
  g_assert_nonnull (strstr (out, "frames: 29"));
}

GST_END_TEST;

static Suite *
lingbot_gst_suite (void)
{
  Suite *s = suite_create ("lingbot-gst");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 120);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_navigation);
  tcase_add_test (tc, test_trace_records);
  tcase_add_test (tc, test_missing_model);
  tcase_add_test (tc, test_malformed_trace);
  tcase_add_test (tc, test_bad_devices);
  tcase_add_test (tc, test_context_shared);
  tcase_add_test (tc, test_context_application);
  tcase_add_test (tc, test_pipeline);
  tcase_add_test (tc, test_image_pad_and_plain_latents);
  tcase_add_test (tc, test_mp4);
  tcase_add_test (tc, test_embed_example);
  return s;
}

int
main (int argc, char **argv)
{
  Suite *s;
  int failed;

  gst_check_init (&argc, &argv);
  write_fixture ();
  s = lingbot_gst_suite ();
  failed = gst_check_run_suite (s, "lingbot-gst", __FILE__);
  rm_rf (tmpdir);
  return failed;
}

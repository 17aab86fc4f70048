/* lingbot-gst: the pipeline on the shared photo and keyboard trace
 * (suite pipeline)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbotcontrolsrc (../shared/data/stream_lingbot_controls.json) !
 * lingbotgen (image-location ../shared/data/image.jpg, a tiny random model
 * written at start-up as in test-gst-common.c: DiT tiny preset with chunk
 * 4, VAE width 8, a prompt-embeds file) ! lingbotvaedec ! I420 ! appsink.
 * 77 frames at 64x64 = 5 chunks (13 + 16 + 16 + 16 + 16), PTS i/16 s;
 * two cpu:1 runs are byte-identical, and so is a cpu:2 run (height-sharded
 * DiT and VAE: docs/design.md "Determinism").
 *
 * Exits 77 (skipped) when LINGBOT_SHARED_DIR/data lacks the files.
 * CK_FORK=no (meson.build): the model writers start OpenMP threads, which
 * a forked child must not inherit.
 */
#include "test-fixture.h"
#include <string.h>
#include <glib/gstdio.h>
#include <gst/check/gstcheck.h>
#include <gst/app/gstappsink.h>
#include <gst/video/video.h>

#include "lingbot/lingbot.h"
#include "lingbot/text-encoder.h"

#define N_FRAMES 77
#define N_CHUNKS 5

static char *tmpdir;
static char *model_dir;
static char *embeds_path;
static char *image_path;
static char *trace_path;

/* ---- fixture ---- */

static gboolean
find_shared (void)
{
  const char *shared = g_getenv ("LINGBOT_SHARED_DIR");

  if (shared == NULL || *shared == '\0')
    return FALSE;
  image_path = g_build_filename (shared, "data", "image.jpg", NULL);
  trace_path = g_build_filename (shared, "data",
      "stream_lingbot_controls.json", NULL);
  return g_file_test (image_path, G_FILE_TEST_IS_REGULAR)
      && g_file_test (trace_path, G_FILE_TEST_IS_REGULAR);
}

static void
write_model (void)
{
  g_autoptr (GError) err = NULL;

  tmpdir = g_dir_make_tmp ("lingbot-pshared-XXXXXX", &err);
  g_assert_no_error (err);
  model_dir = lingbot_test_write_model (tmpdir);
  embeds_path = lingbot_test_write_prompt_embeds (tmpdir,
      "a walk through the photo");
}


/* ---- running the pipeline ---- */

typedef struct
{
  GPtrArray *samples;           /* GstSample */
  GArray *chunk_frames;         /* int, per lingbot-chunk message */
  char *error;                  /* first error message */
  gboolean eos;
} Run;

static void
run_clear (Run * r)
{
  g_clear_pointer (&r->samples, g_ptr_array_unref);
  g_clear_pointer (&r->chunk_frames, g_array_unref);
  g_clear_pointer (&r->error, g_free);
}

static GstFlowReturn
on_sample (GstAppSink * sink, gpointer user_data)
{
  Run *r = user_data;
  g_ptr_array_add (r->samples, gst_app_sink_pull_sample (sink));
  return GST_FLOW_OK;
}

static void
run_pipeline (const char *devices, Run * r)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "lingbotgen model-path=%s image-location=%s prompt-embeds=%s "
      "devices=%s frames=%d width=64 height=64 seed=3 ! lingbotvaedec ! "
      "video/x-raw,format=I420 ! appsink name=sink sync=false",
      trace_path, model_dir, image_path, embeds_path, devices, N_FRAMES);
  GstElement *p = gst_parse_launch (desc, &err);
  GstElement *sink;
  GstAppSinkCallbacks cb = { 0 };
  GstBus *bus;
  gint64 t0 = g_get_monotonic_time ();

  g_assert_no_error (err);
  memset (r, 0, sizeof (*r));
  r->samples = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_sample_unref);
  r->chunk_frames = g_array_new (FALSE, FALSE, sizeof (int));
  sink = gst_bin_get_by_name (GST_BIN (p), "sink");
  g_assert_true (GST_IS_APP_SINK (sink));
  cb.new_sample = on_sample;
  gst_app_sink_set_callbacks (GST_APP_SINK (sink), &cb, r, NULL);
  gst_object_unref (sink);

  bus = gst_element_get_bus (p);
  fail_unless (gst_element_set_state (p, GST_STATE_PLAYING) !=
      GST_STATE_CHANGE_FAILURE);
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
        g_assert_true (gst_structure_get_int (s, "frames", &frames));
        g_assert_true (gst_structure_get_uint64 (s, "index", &index));
        g_assert_cmpuint (index, ==, r->chunk_frames->len);
        g_array_append_val (r->chunk_frames, frames);
      }
      gst_message_unref (msg);
      continue;
    }
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
      g_autoptr (GError) e = NULL;
      gst_message_parse_error (msg, &e, NULL);
      r->error = g_strdup (e->message);
    } else {
      r->eos = TRUE;
    }
    gst_message_unref (msg);
    break;
  }
  gst_object_unref (bus);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (p);
  GST_INFO ("devices=%s: %.2f s", devices,
      (g_get_monotonic_time () - t0) / 1e6);
}

/* 77 frames, I420 64x64 at 16/1, PTS i/16 s, durations 1/16 s, 5 chunks */
static void
check_run (Run * r)
{
  static const int chunk[N_CHUNKS] = { 13, 16, 16, 16, 16 };

  g_assert_cmpstr (r->error, ==, NULL);
  g_assert_true (r->eos);
  g_assert_cmpuint (r->chunk_frames->len, ==, N_CHUNKS);
  for (guint c = 0; c < N_CHUNKS; c++)
    g_assert_cmpint (g_array_index (r->chunk_frames, int, c), ==, chunk[c]);
  g_assert_cmpuint (r->samples->len, ==, N_FRAMES);
  for (guint i = 0; i < r->samples->len; i++) {
    GstSample *s = g_ptr_array_index (r->samples, i);
    GstBuffer *b = gst_sample_get_buffer (s);
    GstClockTime pts = gst_util_uint64_scale (i, GST_SECOND, 16);
    GstClockTime next = gst_util_uint64_scale (i + 1, GST_SECOND, 16);
    GstVideoInfo info;
    g_assert_true (gst_video_info_from_caps (&info, gst_sample_get_caps (s)));
    g_assert_cmpint (GST_VIDEO_INFO_FORMAT (&info), ==, GST_VIDEO_FORMAT_I420);
    g_assert_cmpint (info.width, ==, 64);
    g_assert_cmpint (info.height, ==, 64);
    g_assert_cmpint (info.fps_n, ==, 16);
    g_assert_cmpint (info.fps_d, ==, 1);
    g_assert_cmpuint (gst_buffer_get_size (b), ==, info.size);
    g_assert_cmpuint (GST_BUFFER_PTS (b), ==, pts);
    g_assert_true (GST_BUFFER_DURATION_IS_VALID (b));
    /* contiguous: each frame ends where the next starts (1/16 s, within
     * the rounding of nanoseconds) */
    g_assert_cmpuint (GST_BUFFER_PTS (b) + GST_BUFFER_DURATION (b), >=,
        next - 1);
    g_assert_cmpuint (GST_BUFFER_PTS (b) + GST_BUFFER_DURATION (b), <=,
        next + 1);
  }
}

static int
max_diff (Run * a, Run * b)
{
  int worst = 0;

  g_assert_cmpuint (a->samples->len, ==, b->samples->len);
  for (guint i = 0; i < a->samples->len; i++) {
    GstMapInfo ma, mb;
    GstBuffer *ba = gst_sample_get_buffer (g_ptr_array_index (a->samples, i));
    GstBuffer *bb = gst_sample_get_buffer (g_ptr_array_index (b->samples, i));
    g_assert_true (gst_buffer_map (ba, &ma, GST_MAP_READ));
    g_assert_true (gst_buffer_map (bb, &mb, GST_MAP_READ));
    g_assert_cmpuint (ma.size, ==, mb.size);
    for (gsize k = 0; k < ma.size; k++)
      worst = MAX (worst, ABS ((int) ma.data[k] - (int) mb.data[k]));
    gst_buffer_unmap (ba, &ma);
    gst_buffer_unmap (bb, &mb);
  }
  return worst;
}

/* the frames are not all one value (the photo and model reached them) */
static gboolean
frames_vary (Run * r)
{
  GstMapInfo m;
  GstBuffer *b = gst_sample_get_buffer (g_ptr_array_index (r->samples, 0));
  gboolean vary = FALSE;

  g_assert_true (gst_buffer_map (b, &m, GST_MAP_READ));
  for (gsize k = 1; k < 64 * 64 && !vary; k++)
    vary = m.data[k] != m.data[0];
  gst_buffer_unmap (b, &m);
  return vary;
}

/* ---- the test ---- */

GST_START_TEST (test_pipeline_shared_data)
{
  Run a, b, c;

  run_pipeline ("cpu:1", &a);
  check_run (&a);
  g_assert_true (frames_vary (&a));

  /* deterministic: the same run again is the same bytes */
  run_pipeline ("cpu:1", &b);
  check_run (&b);
  g_assert_cmpint (max_diff (&a, &b), ==, 0);

  /* two ranks: height-sharded DiT and VAE give the same bytes */
  run_pipeline ("cpu:2", &c);
  check_run (&c);
  g_assert_cmpint (max_diff (&a, &c), ==, 0);

  run_clear (&a);
  run_clear (&b);
  run_clear (&c);
}

GST_END_TEST;

static Suite *
lingbot_pipeline_shared_suite (void)
{
  Suite *s = suite_create ("lingbot-pipeline-shared");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 280);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_pipeline_shared_data);
  return s;
}

int
main (int argc, char **argv)
{
  Suite *s;
  int failed;

  gst_check_init (&argc, &argv);
  if (!find_shared ()) {
    g_print ("SKIP: no %s or %s (LINGBOT_SHARED_DIR)\n",
        image_path ? image_path : "image.jpg",
        trace_path ? trace_path : "stream_lingbot_controls.json");
    return 77;
  }
  write_model ();
  s = lingbot_pipeline_shared_suite ();
  failed = gst_check_run_suite (s, "lingbot-pipeline-shared", __FILE__);
  lingbot_test_rm_rf (tmpdir);
  return failed;
}

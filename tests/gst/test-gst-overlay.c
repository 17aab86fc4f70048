/* lingbot-gst: the session-start preview (lingbotgen preview=true) and
 * the controls overlay (lingbotoverlay)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <string.h>
#include <gst/gst.h>
#include <gst/check/gstcheck.h>
#include <gst/app/gstappsink.h>
#include <gst/video/video.h>

#include "test-fixture.h"
#include "gst/gstlingbotmeta.h"
#include "lingbot/image.h"
#include "lingbot/lingbot.h"

static char *tmpdir;
static char *model_dir;
static char *embeds_path;
static char *image_path;

/* The start image as the session's conditioning sees it (spec 6.2: the
 * whole JPEG normalised and bicubic-resized to 64x64), each value turned
 * into a byte as a decoded frame's: (x + 1) * 127.5 in float32, clipped
 * to [0, 255], truncated.  Packed RGB, 64 * 64 * 3 bytes. */
static guint8 *
expected_preview (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LbTensor) rgb = lingbot_image_load_jpeg (image_path, &err);
  g_autoptr (LbTensor) img = NULL;
  guint8 *out = g_malloc (64 * 64 * 3);
  const float *d;

  g_assert_no_error (err);
  img = lingbot_image_preprocess (rgb, 64, 64, &err);
  g_assert_no_error (err);
  d = img->data;
  for (int c = 0; c < 3; c++)
    for (int i = 0; i < 64 * 64; i++) {
      float v = (d[c * 64 * 64 + i] + 1.0f) * 127.5f;

      out[3 * i + c] = !(v > 0.f) ? 0 : v >= 255.f ? 255 : (guint8) v;
    }
  return out;
}

typedef struct
{
  GMutex lock;
  GPtrArray *samples;
} Samples;

static GstFlowReturn
on_sample (GstAppSink * sink, gpointer user_data)
{
  Samples *s = user_data;

  g_mutex_lock (&s->lock);
  g_ptr_array_add (s->samples, gst_app_sink_pull_sample (sink));
  g_mutex_unlock (&s->lock);
  return GST_FLOW_OK;
}

/* runs @desc (its appsink "sink") to EOS; the samples it got */
static GPtrArray *
run_samples (const char *desc, const char *press)
{
  g_autoptr (GError) err = NULL;
  GstElement *p = gst_parse_launch (desc, &err);
  GstAppSinkCallbacks cb = { 0 };
  Samples s = { 0 };
  GstElement *sink;
  GstBus *bus;
  GstMessage *msg;

  g_assert_no_error (err);
  g_mutex_init (&s.lock);
  s.samples = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_sample_unref);
  sink = gst_bin_get_by_name (GST_BIN (p), "sink");
  cb.new_sample = on_sample;
  gst_app_sink_set_callbacks (GST_APP_SINK (sink), &cb, &s, NULL);
  gst_object_unref (sink);
  if (press) {
    GstElement *ctl = gst_bin_get_by_name (GST_BIN (p), "ctl");
    gboolean known = FALSE;

    g_signal_emit_by_name (ctl, "press-key", press, &known);
    g_assert_true (known);
    gst_object_unref (ctl);
  }
  bus = gst_element_get_bus (p);
  gst_element_set_state (p, GST_STATE_PLAYING);
  msg = gst_bus_timed_pop_filtered (bus, 120 * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  g_assert_nonnull (msg);
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    g_autoptr (GError) e = NULL;
    gst_message_parse_error (msg, &e, NULL);
    g_assert_no_error (e);
  }
  gst_message_unref (msg);
  gst_object_unref (bus);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (p);
  g_mutex_clear (&s.lock);
  return s.samples;
}

static GstLingbotFrameMeta *
sample_meta (GPtrArray * samples, guint i)
{
  GstBuffer *buf = gst_sample_get_buffer (g_ptr_array_index (samples, i));
  GstLingbotFrameMeta *m = gst_buffer_get_lingbot_frame_meta (buf);

  g_assert_nonnull (m);
  return m;
}

static void
assert_preview_bytes (GPtrArray * samples)
{
  g_autofree guint8 *want = expected_preview ();
  GstBuffer *buf = gst_sample_get_buffer (g_ptr_array_index (samples, 0));
  GstMapInfo map;

  g_assert_true (gst_buffer_map (buf, &map, GST_MAP_READ));
  g_assert_cmpuint (map.size, ==, 64 * 64 * 3);
  g_assert_cmpmem (map.data, map.size, want, 64 * 64 * 3);
  gst_buffer_unmap (buf, &map);
}

/* Offline, preview=true: one flagged still first, at PTS 0, whose bytes
 * are the resized start image; then the 13 frames of the session exactly
 * as without a preview (offsets 0..12, PTS n/16 s, not flagged). */
GST_START_TEST (test_preview_offline)
{
  g_autofree char *desc = g_strdup_printf ("lingbotgen model-path=%s "
      "prompt-embeds=%s image-location=%s width=64 height=64 frames=13 "
      "devices=cpu:1 seed=7 preview=true ! lingbotvaedec ! "
      "video/x-raw,format=RGB ! appsink name=sink sync=true", model_dir,
      embeds_path, image_path);
  g_autoptr (GPtrArray) samples = run_samples (desc, NULL);
  GstBuffer *first;

  g_assert_cmpuint (samples->len, ==, 14);
  g_assert_true (sample_meta (samples, 0)->preview);
  g_assert_cmpuint (sample_meta (samples, 0)->keys, ==, 0);
  first = gst_sample_get_buffer (g_ptr_array_index (samples, 0));
  g_assert_cmpuint (GST_BUFFER_PTS (first), ==, 0);
  g_assert_cmpuint (GST_BUFFER_DURATION (first), ==, GST_SECOND / 16);
  assert_preview_bytes (samples);
  for (guint i = 1; i < samples->len; i++) {
    GstBuffer *b = gst_sample_get_buffer (g_ptr_array_index (samples, i));

    g_assert_false (sample_meta (samples, i)->preview);
    g_assert_cmpuint (sample_meta (samples, i)->chunk, ==, 0);
    g_assert_cmpuint (GST_BUFFER_OFFSET (b), ==, i - 1);
    g_assert_cmpuint (GST_BUFFER_PTS (b), ==,
        gst_util_uint64_scale (i - 1, GST_SECOND, 16));
  }
}

GST_END_TEST;

/* The default (preview=false) pushes no still: the 13 frames only. */
GST_START_TEST (test_preview_default_off)
{
  g_autofree char *desc = g_strdup_printf ("lingbotgen model-path=%s "
      "prompt-embeds=%s image-location=%s width=64 height=64 frames=13 "
      "devices=cpu:1 seed=7 ! lingbotvaedec ! video/x-raw,format=RGB ! "
      "appsink name=sink sync=true", model_dir, embeds_path, image_path);
  g_autoptr (GPtrArray) samples = run_samples (desc, NULL);

  g_assert_cmpuint (samples->len, ==, 13);
  g_assert_false (sample_meta (samples, 0)->preview);
}

GST_END_TEST;

/* Live, into a clock-synchronised sink: the preview comes first, before
 * the first chunk's frames and no later than their PTS; those frames carry
 * the W the session was steered with. */
GST_START_TEST (test_preview_live)
{
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc name=ctl "
      "is-live=true ! lingbotgen model-path=%s prompt-embeds=%s "
      "image-location=%s width=64 height=64 frames=13 devices=cpu:1 seed=7 "
      "is-live=true preview=true ! lingbotvaedec ! video/x-raw,format=RGB ! "
      "appsink name=sink sync=true", model_dir, embeds_path, image_path);
  g_autoptr (GPtrArray) samples = run_samples (desc, "w");
  GstBuffer *first, *second;

  g_assert_cmpuint (samples->len, ==, 14);
  g_assert_true (sample_meta (samples, 0)->preview);
  assert_preview_bytes (samples);
  first = gst_sample_get_buffer (g_ptr_array_index (samples, 0));
  second = gst_sample_get_buffer (g_ptr_array_index (samples, 1));
  g_assert_cmpuint (GST_BUFFER_PTS (first), <=, GST_BUFFER_PTS (second));
  for (guint i = 1; i < samples->len; i++) {
    g_assert_false (sample_meta (samples, i)->preview);
    g_assert_cmpuint (sample_meta (samples, i)->keys, ==, LINGBOT_KEY_W);
  }
}

GST_END_TEST;

static Suite *
overlay_suite (void)
{
  Suite *s = suite_create ("lingbot-overlay");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_preview_offline);
  tcase_add_test (tc, test_preview_default_off);
  tcase_add_test (tc, test_preview_live);
  return s;
}

int
main (int argc, char **argv)
{
  Suite *s;
  int failed;

  gst_check_init (&argc, &argv);
  tmpdir = lingbot_test_write_fixture ("lingbot-overlay-XXXXXX", &model_dir,
      &embeds_path, &image_path);
  s = overlay_suite ();
  failed = gst_check_run_suite (s, "lingbot-overlay", __FILE__);
  lingbot_test_rm_rf (tmpdir);
  return failed;
}

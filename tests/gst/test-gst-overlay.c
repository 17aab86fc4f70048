/* lingbot-gst: the session-start preview (lingbotgen preview=true) and
 * the controls overlay (lingbotoverlay)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <string.h>
#include <gst/gst.h>
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <gst/app/gstappsink.h>
#include <gst/video/video.h>

#include "test-fixture.h"
#include "gst/lingbot/gstlingbotmeta.h"
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

static guint
n_samples (Samples * s)
{
  guint n;

  g_mutex_lock (&s->lock);
  n = s->samples->len;
  g_mutex_unlock (&s->lock);
  return n;
}

/* waits (60 s at most: a hang guard) until @s holds @n samples */
static void
wait_samples (Samples * s, guint n)
{
  for (int i = 0; i < 6000 && n_samples (s) < n; i++)
    g_usleep (10000);
  g_assert_cmpuint (n_samples (s), >=, n);
}

/* the same bytes in samples @i and @j of @s */
static void
assert_same_frame (Samples * s, guint i, guint j)
{
  GstBuffer *a = gst_sample_get_buffer (g_ptr_array_index (s->samples, i));
  GstBuffer *b = gst_sample_get_buffer (g_ptr_array_index (s->samples, j));
  GstMapInfo ma;

  g_assert_true (gst_buffer_map (a, &ma, GST_MAP_READ));
  g_assert_cmpuint (gst_buffer_get_size (b), ==, ma.size);
  g_assert_cmpint (gst_buffer_memcmp (b, 0, ma.data, ma.size), ==, 0);
  gst_buffer_unmap (a, &ma);
}

/* waits (60 s at most) for lingbotgen's lingbot-waiting of chunk @index */
static void
wait_for_key_wait (GstBus * bus, guint64 index)
{
  gint64 until = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;

  while (g_get_monotonic_time () < until) {
    GstMessage *m = gst_bus_timed_pop_filtered (bus, 100 * GST_MSECOND,
        GST_MESSAGE_ELEMENT | GST_MESSAGE_ERROR);
    const GstStructure *st = m ? gst_message_get_structure (m) : NULL;
    guint64 i = G_MAXUINT64;
    gboolean found;

    if (m == NULL)
      continue;
    g_assert_cmpint (GST_MESSAGE_TYPE (m), !=, GST_MESSAGE_ERROR);
    found = gst_structure_has_name (st, "lingbot-waiting")
        && gst_structure_get_uint64 (st, "index", &i) && i == index;
    gst_message_unref (m);
    if (found)
      return;
  }
  g_assert_not_reached ();
}

/* Live: a force-key-unit (a viewer that joined, e.g. a WebRTC peer that
 * reconnected) on lingbotvaedec's src while lingbotgen waits for a key
 * has the last frame pushed again, stamped by the generator with the
 * running time then: before the first chunk the preview (the same bytes,
 * flagged), after a chunk that chunk's last frame (no keys lit, not
 * counted).  The chunks after a repeat are stamped after it.
 * Until December 2026 lingbotvaedec stamped the repeat itself, which the
 * generator did not know of (a chunk made faster than its latency right
 * after a repeat could be stamped before it), and after a chunk nothing
 * came (the force-key-unit was refused: this test failed there). */
GST_START_TEST (test_frame_repeat)
{
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc name=ctl "
      "is-live=true ! lingbotgen model-path=%s prompt-embeds=%s "
      "image-location=%s width=64 height=64 devices=cpu:1 seed=7 "
      "is-live=true preview=true ! lingbotvaedec name=dec ! "
      "video/x-raw,format=RGB ! appsink name=sink sync=true", model_dir,
      embeds_path, image_path);
  g_autoptr (GError) err = NULL;
  GstElement *p = gst_parse_launch (desc, &err);
  GstAppSinkCallbacks cb = { 0 };
  Samples s = { 0 };
  GstElement *sink, *dec, *ctl;
  GstBus *bus;
  GstPad *src;
  gboolean known;
  const GstClockTime frame = GST_SECOND / 16;

  g_assert_no_error (err);
  g_mutex_init (&s.lock);
  s.samples = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_sample_unref);
  sink = gst_bin_get_by_name (GST_BIN (p), "sink");
  cb.new_sample = on_sample;
  gst_app_sink_set_callbacks (GST_APP_SINK (sink), &cb, &s, NULL);
  gst_object_unref (sink);
  dec = gst_bin_get_by_name (GST_BIN (p), "dec");
  ctl = gst_bin_get_by_name (GST_BIN (p), "ctl");
  src = gst_element_get_static_pad (dec, "src");
  bus = gst_element_get_bus (p);
  gst_element_set_state (p, GST_STATE_PLAYING);
  wait_for_key_wait (bus, 0);
  wait_samples (&s, 1);

  /* the preview again, a second later */
  g_usleep (G_USEC_PER_SEC);
  g_assert_true (gst_pad_send_event (src,
          gst_video_event_new_upstream_force_key_unit (GST_CLOCK_TIME_NONE,
              TRUE, 1)));
  wait_samples (&s, 2);
  g_assert_true (sample_meta (s.samples, 0)->preview);
  g_assert_true (sample_meta (s.samples, 1)->preview);
  assert_preview_bytes (s.samples);
  assert_same_frame (&s, 0, 1);

  /* a tap: chunk 0, then the generator waits for chunk 1's key */
  g_signal_emit_by_name (ctl, "press-key", "w", &known);
  g_assert_true (known);
  g_signal_emit_by_name (ctl, "release-key", "w", &known);
  wait_for_key_wait (bus, 1);
  wait_samples (&s, 2 + 13);

  /* chunk 0's last frame again */
  g_assert_true (gst_pad_send_event (src,
          gst_video_event_new_upstream_force_key_unit (GST_CLOCK_TIME_NONE,
              TRUE, 2)));
  wait_samples (&s, 2 + 13 + 1);
  assert_same_frame (&s, 14, 15);
  g_assert_false (sample_meta (s.samples, 15)->preview);
  g_assert_cmpuint (sample_meta (s.samples, 15)->chunk, ==, 0);
  g_assert_cmpuint (sample_meta (s.samples, 14)->keys, ==, LINGBOT_KEY_W);
  g_assert_cmpuint (sample_meta (s.samples, 15)->keys, ==, 0);
  {
    GstBuffer *b = gst_sample_get_buffer (g_ptr_array_index (s.samples, 15));

    g_assert_cmpuint (GST_BUFFER_OFFSET (b), ==, 13);
    g_assert_cmpuint (GST_BUFFER_OFFSET_END (b), ==, 13);
    g_assert_cmpuint (GST_BUFFER_DURATION (b), ==, frame);
  }

  /* chunk 1 after it */
  g_signal_emit_by_name (ctl, "press-key", "d", &known);
  g_signal_emit_by_name (ctl, "release-key", "d", &known);
  wait_samples (&s, 2 + 13 + 1 + 16);
  gst_element_set_state (p, GST_STATE_NULL);
  g_assert_cmpuint (s.samples->len, ==, 32);
  g_assert_cmpuint (sample_meta (s.samples, 16)->chunk, ==, 1);
  /* every frame, repeats included, after the one before it */
  for (guint i = 1; i < s.samples->len; i++) {
    GstBuffer *a = gst_sample_get_buffer (g_ptr_array_index (s.samples,
            i - 1));
    GstBuffer *b = gst_sample_get_buffer (g_ptr_array_index (s.samples, i));

    g_assert_cmpuint (GST_BUFFER_PTS (b), >=, GST_BUFFER_PTS (a) +
        GST_BUFFER_DURATION (a));
  }
  /* the preview's repeat a second after it */
  g_assert_cmpuint (GST_BUFFER_PTS (gst_sample_get_buffer
          (g_ptr_array_index (s.samples, 1))), >=,
      GST_BUFFER_PTS (gst_sample_get_buffer (g_ptr_array_index (s.samples,
                  0))) + GST_SECOND);
  gst_object_unref (bus);
  gst_object_unref (src);
  gst_object_unref (ctl);
  gst_object_unref (dec);
  gst_object_unref (p);
  g_ptr_array_unref (s.samples);
  g_mutex_clear (&s.lock);
}

GST_END_TEST;

/* ---- lingbotoverlay on synthetic frames ---- */

#define OW 320
#define OH 240

/* a 320x240 RGBA gradient, every byte a function of its position */
static GstBuffer *
synthetic_frame (void)
{
  GstBuffer *buf = gst_buffer_new_allocate (NULL, OW * OH * 4, NULL);
  GstMapInfo map;

  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  for (int y = 0; y < OH; y++)
    for (int x = 0; x < OW; x++) {
      guint8 *p = map.data + (y * OW + x) * 4;

      p[0] = (guint8) x;
      p[1] = (guint8) (y * 3);
      p[2] = (guint8) (x + y);
      p[3] = 255;
    }
  gst_buffer_unmap (buf, &map);
  return buf;
}

/* lingbotoverlay on the synthetic frame with a frame meta (chunk, keys,
 * preview); @show_stats its property.  The frame's bytes, OW * OH * 4. */
static guint8 *
overlay_frame (guint64 chunk, guint keys, gboolean preview, gboolean show_stats)
{
  GstHarness *h = gst_harness_new ("lingbotoverlay");
  GstBuffer *in = synthetic_frame (), *out;
  guint8 *bytes;
  gsize size;

  g_object_set (h->element, "show-stats", show_stats, NULL);
  gst_harness_set_src_caps_str (h, "video/x-raw,format=RGBA,width=320,"
      "height=240,framerate=16/1");
  gst_buffer_add_lingbot_frame_meta (in, chunk, keys, preview);
  g_assert_cmpint (gst_harness_push (h, in), ==, GST_FLOW_OK);
  out = gst_harness_pull (h);
  g_assert_nonnull (out);
  /* the meta goes on */
  g_assert_cmpuint (gst_buffer_get_lingbot_frame_meta (out)->keys, ==, keys);
  size = gst_buffer_get_size (out);
  g_assert_cmpuint (size, ==, OW * OH * 4);
  bytes = g_malloc (size);
  gst_buffer_extract (out, 0, bytes, size);
  gst_buffer_unref (out);
  gst_harness_teardown (h);
  return bytes;
}

/* the bounding box of the pixels where @a and @b differ; FALSE if none */
static gboolean
diff_box (const guint8 * a, const guint8 * b, int *x0, int *y0, int *x1,
    int *y1)
{
  *x0 = *y0 = G_MAXINT;
  *x1 = *y1 = -1;
  for (int y = 0; y < OH; y++)
    for (int x = 0; x < OW; x++)
      if (memcmp (a + (y * OW + x) * 4, b + (y * OW + x) * 4, 4) != 0) {
        *x0 = MIN (*x0, x);
        *y0 = MIN (*y0, y);
        *x1 = MAX (*x1, x);
        *y1 = MAX (*y1, y);
      }
  return *x1 >= 0;
}

/* The unlit overlay changes the lower half only: the upper half's bytes
 * are the input's; something is drawn below. */
GST_START_TEST (test_overlay_lower_half)
{
  g_autofree guint8 *out = overlay_frame (0, 0, FALSE, FALSE);
  GstBuffer *in = synthetic_frame ();
  GstMapInfo map;
  int x0, y0, x1, y1;

  gst_buffer_map (in, &map, GST_MAP_READ);
  g_assert_true (diff_box (map.data, out, &x0, &y0, &x1, &y1));
  g_assert_cmpint (y0, >=, OH / 2);
  /* both panels: near the left and the right edge */
  g_assert_cmpint (x0, <, OW / 4);
  g_assert_cmpint (x1, >=, 3 * OW / 4);
  g_assert_cmpmem (map.data, OW * 4 * OH / 2, out, OW * 4 * OH / 2);
  gst_buffer_unmap (in, &map);
  gst_buffer_unref (in);
}

GST_END_TEST;

/* Each key lit against none lit: only that key's cell changes (at most
 * 11 x 11 pixels at this size), in the lower half, on its panel's side
 * (W A S D left, I J K L right); both lit changes both. */
GST_START_TEST (test_overlay_lit_keys)
{
  static const struct
  {
    guint key;
    gboolean left;
  } keys[] = {
    {LINGBOT_KEY_W, TRUE}, {LINGBOT_KEY_A, TRUE}, {LINGBOT_KEY_S, TRUE},
    {LINGBOT_KEY_D, TRUE}, {LINGBOT_KEY_I, FALSE}, {LINGBOT_KEY_J, FALSE},
    {LINGBOT_KEY_K, FALSE}, {LINGBOT_KEY_L, FALSE},
  };
  g_autofree guint8 *unlit = overlay_frame (5, 0, FALSE, FALSE);
  g_autofree guint8 *both = NULL;
  int x0, y0, x1, y1;
  int w_x0 = 0;

  for (guint i = 0; i < G_N_ELEMENTS (keys); i++) {
    g_autofree guint8 *lit = overlay_frame (5, keys[i].key, FALSE, FALSE);

    g_assert_true (diff_box (unlit, lit, &x0, &y0, &x1, &y1));
    g_assert_cmpint (y0, >=, OH / 2);
    g_assert_cmpint (x1 - x0 + 1, <=, 11);
    g_assert_cmpint (y1 - y0 + 1, <=, 11);
    if (keys[i].left)
      g_assert_cmpint (x1, <, OW / 2);
    else
      g_assert_cmpint (x0, >=, OW / 2);
    if (keys[i].key == LINGBOT_KEY_W)
      w_x0 = x0;
  }
  /* W above A S D: its cell is the middle column's */
  {
    g_autofree guint8 *a = overlay_frame (5, LINGBOT_KEY_A, FALSE, FALSE);

    g_assert_true (diff_box (unlit, a, &x0, &y0, &x1, &y1));
    g_assert_cmpint (w_x0, >, x1);
  }
  both = overlay_frame (5, LINGBOT_KEY_W | LINGBOT_KEY_L, FALSE, FALSE);
  g_assert_true (diff_box (unlit, both, &x0, &y0, &x1, &y1));
  g_assert_cmpint (x0, <, OW / 2);
  g_assert_cmpint (x1, >=, OW / 2);
}

GST_END_TEST;

/* The preview's idle overlay: no key lit, READY between the panels; with
 * show-stats the chunk index is drawn there, and only there. */
GST_START_TEST (test_overlay_preview_and_stats)
{
  g_autofree guint8 *unlit = overlay_frame (0, 0, FALSE, FALSE);
  g_autofree guint8 *idle = overlay_frame (0, 0, TRUE, FALSE);
  g_autofree guint8 *c3 = overlay_frame (3, 0, FALSE, TRUE);
  g_autofree guint8 *c12 = overlay_frame (12, 0, FALSE, TRUE);
  int x0, y0, x1, y1;

  g_assert_true (diff_box (unlit, idle, &x0, &y0, &x1, &y1));
  g_assert_cmpint (y0, >=, OH / 2);
  g_assert_cmpint (x0, >, OW / 4);
  g_assert_cmpint (x1, <, 3 * OW / 4);
  g_assert_true (diff_box (c3, c12, &x0, &y0, &x1, &y1));
  g_assert_cmpint (y0, >=, OH / 2);
  g_assert_cmpint (x0, >, OW / 4);
  g_assert_cmpint (x1, <, 3 * OW / 4);
}

GST_END_TEST;

/* I420 too: the planes of the upper half keep their bytes, the lower
 * half's luma changes. */
GST_START_TEST (test_overlay_i420)
{
  GstHarness *h = gst_harness_new ("lingbotoverlay");
  GstVideoInfo info;
  GstBuffer *in, *out;
  GstMapInfo a, b;
  GstVideoFrame vf;

  gst_video_info_set_format (&info, GST_VIDEO_FORMAT_I420, OW, OH);
  gst_harness_set_src_caps_str (h, "video/x-raw,format=I420,width=320,"
      "height=240,framerate=16/1");
  in = gst_buffer_new_allocate (NULL, info.size, NULL);
  gst_buffer_map (in, &a, GST_MAP_WRITE);
  for (gsize i = 0; i < a.size; i++)
    a.data[i] = (guint8) (i * 7 + i / 320);
  gst_buffer_unmap (in, &a);
  gst_buffer_add_lingbot_frame_meta (in, 0, LINGBOT_KEY_W, FALSE);
  g_assert_cmpint (gst_harness_push (h, gst_buffer_copy_deep (in)), ==,
      GST_FLOW_OK);
  out = gst_harness_pull (h);
  g_assert_true (gst_video_frame_map (&vf, &info, in, GST_MAP_READ));
  gst_buffer_map (out, &b, GST_MAP_READ);
  for (int p = 0; p < 3; p++) {
    const guint8 *src = GST_VIDEO_FRAME_PLANE_DATA (&vf, p);
    gsize off = GST_VIDEO_FRAME_PLANE_OFFSET (&vf, p);
    int stride = GST_VIDEO_FRAME_PLANE_STRIDE (&vf, p);
    int rows = p == 0 ? OH / 2 : OH / 4;

    g_assert_cmpmem (src, (gsize) stride * rows, b.data + off,
        (gsize) stride * rows);
  }
  g_assert_true (memcmp (GST_VIDEO_FRAME_PLANE_DATA (&vf, 0) + OW * OH / 2,
          b.data + OW * OH / 2, OW * OH / 2) != 0);
  gst_buffer_unmap (out, &b);
  gst_video_frame_unmap (&vf);
  gst_buffer_unref (out);
  gst_buffer_unref (in);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* lingbotbin overlay=true preview=true: the overlay after the decoder;
 * the preview's upper half is the resized start image's, its lower half
 * the idle overlay; the 13 frames follow, as without the overlay. */
GST_START_TEST (test_bin_overlay)
{
  g_autofree char *desc = g_strdup_printf ("lingbotbin model-path=%s "
      "prompt-embeds=%s image-location=%s width=64 height=64 frames=13 "
      "devices=cpu:1 seed=7 preview=true overlay=true ! "
      "video/x-raw,format=RGB ! appsink name=sink sync=true", model_dir,
      embeds_path, image_path);
  g_autoptr (GPtrArray) samples = run_samples (desc, NULL);
  g_autofree guint8 *want = expected_preview ();
  GstBuffer *buf;
  GstMapInfo map;

  g_assert_cmpuint (samples->len, ==, 14);
  g_assert_true (sample_meta (samples, 0)->preview);
  buf = gst_sample_get_buffer (g_ptr_array_index (samples, 0));
  g_assert_true (gst_buffer_map (buf, &map, GST_MAP_READ));
  g_assert_cmpmem (map.data, 64 * 3 * 32, want, 64 * 3 * 32);
  g_assert_true (memcmp (map.data + 64 * 3 * 32, want + 64 * 3 * 32,
          64 * 3 * 32) != 0);
  gst_buffer_unmap (buf, &map);
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
  tcase_add_test (tc, test_frame_repeat);
  tcase_add_test (tc, test_overlay_lower_half);
  tcase_add_test (tc, test_overlay_lit_keys);
  tcase_add_test (tc, test_overlay_preview_and_stats);
  tcase_add_test (tc, test_overlay_i420);
  tcase_add_test (tc, test_bin_overlay);
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

/* lingbot-gst: the element tests' fixture and pipeline runner
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * See test-gst-common.h.
 */
#include "test-gst-common.h"

char *tmpdir;
char *model_dir;
char *embeds_path;
char *image_path;
char *trace_path;
char *malformed_path;
char *held_trace_path;

/* ---- fixture ---- */

static void
write_fixture (void)
{
  g_autoptr (GError) err = NULL;
  const char *root = g_getenv ("LINGBOT_SOURCE_ROOT");

  g_assert_nonnull (root);
  trace_path = g_build_filename (root, "tests", "data", "gst", "trace.json",
      NULL);
  malformed_path = g_build_filename (root, "tests", "data", "gst",
      "malformed.json", NULL);

  tmpdir = lingbot_test_write_fixture ("lingbot-gst-XXXXXX", &model_dir,
      &embeds_path, &image_path);

  /* chunk 0 (request 0 s): the tap of W; chunk 1 (0.8125 s, when chunk 0
   * ends): the held set W; chunk 2 (1 s, D pressed while chunk 1 runs):
   * the tap W+D */
  held_trace_path = g_build_filename (tmpdir, "held.json", NULL);
  g_assert_true (g_file_set_contents (held_trace_path, "{\"events\":["
          "{\"delay_s\":0.0,\"message\":{\"type\":\"control\","
          "\"key\":\"w\",\"action\":\"press\"}},"
          "{\"delay_s\":1.0,\"message\":{\"type\":\"control\","
          "\"key\":\"d\",\"action\":\"press\"}},"
          "{\"delay_s\":3.0,\"message\":{\"type\":\"control\","
          "\"key\":\"w\",\"action\":\"release\"}},"
          "{\"delay_s\":3.0,\"message\":{\"type\":\"control\","
          "\"key\":\"d\",\"action\":\"release\"}}]}", -1, &err));
  g_assert_no_error (err);
}

/* ---- running a pipeline ---- */

void
run_clear (Run * r)
{
  g_clear_pointer (&r->samples, g_ptr_array_unref);
  g_clear_pointer (&r->chunk_frames, g_array_unref);
  g_clear_pointer (&r->chunk_keys, g_array_unref);
  g_clear_pointer (&r->chunk_revisions, g_array_unref);
  g_clear_pointer (&r->chunk_taps, g_array_unref);
  g_clear_pointer (&r->decode_seconds, g_array_unref);
  g_clear_pointer (&r->decode_frames, g_array_unref);
  g_clear_pointer (&r->chunk_pts, g_array_unref);
  g_clear_pointer (&r->chunk_start, g_array_unref);
  g_clear_pointer (&r->sink_stats, gst_structure_free);
  g_clear_pointer (&r->gen_stats, gst_structure_free);
  g_clear_pointer (&r->dec_stats, gst_structure_free);
  g_clear_pointer (&r->chunk_compute, g_array_unref);
  g_clear_pointer (&r->summary, gst_structure_free);
  g_clear_pointer (&r->summaries, g_ptr_array_unref);
  g_clear_pointer (&r->warnings, g_ptr_array_unref);
  g_clear_pointer (&r->error, g_free);
}

/* empties @r for another run of the same pipeline (the appsink callback
 * keeps pointing at it) */
void
run_reset (Run * r)
{
  run_clear (r);
  r->samples = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_sample_unref);
  r->chunk_frames = g_array_new (FALSE, FALSE, sizeof (int));
  r->chunk_keys = g_array_new (FALSE, FALSE, sizeof (guint));
  r->chunk_revisions = g_array_new (FALSE, FALSE, sizeof (guint));
  r->chunk_taps = g_array_new (FALSE, FALSE, sizeof (gboolean));
  r->decode_seconds = g_array_new (FALSE, FALSE, sizeof (double));
  r->decode_frames = g_array_new (FALSE, FALSE, sizeof (int));
  r->chunk_pts = g_array_new (FALSE, FALSE, sizeof (GstClockTime));
  r->chunk_start = g_array_new (FALSE, FALSE, sizeof (GstClockTime));
  r->chunk_compute = g_array_new (FALSE, FALSE, sizeof (double));
  r->summaries = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_structure_free);
  r->latency_messages = 0;
  r->warnings = g_ptr_array_new_with_free_func (g_free);
  r->error_domain = 0;
  r->error_code = 0;
  r->eos = FALSE;
}

GstFlowReturn
on_sample (GstAppSink * sink, gpointer user_data)
{
  Run *r = user_data;
  g_ptr_array_add (r->samples, gst_app_sink_pull_sample (sink));
  return GST_FLOW_OK;
}

GstElement *
pipeline_new (const char *desc, Run * r)
{
  g_autoptr (GError) err = NULL;
  GstElement *p = gst_parse_launch (desc, &err);
  GstElement *sink;

  g_assert_no_error (err);
  memset (r, 0, sizeof (*r));
  run_reset (r);
  sink = gst_bin_get_by_name (GST_BIN (p), "sink");
  if (sink && GST_IS_APP_SINK (sink)) {
    GstAppSinkCallbacks cb = { 0 };
    cb.new_sample = on_sample;
    gst_app_sink_set_callbacks (GST_APP_SINK (sink), &cb, r, NULL);
  }
  gst_clear_object (&sink);
  return p;
}

/* the stats property of the element @name of @p, NULL without one */
static GstStructure *
element_stats (GstElement * p, const char *name)
{
  GstElement *e = gst_bin_get_by_name (GST_BIN (p), name);
  GstStructure *stats = NULL;

  if (e && g_object_class_find_property (G_OBJECT_GET_CLASS (e), "stats"))
    g_object_get (e, "stats", &stats, NULL);
  gst_clear_object (&e);
  return stats;
}

/* runs to EOS or error; returns the state change result of PLAYING */
GstStateChangeReturn
pipeline_run (GstElement * p, Run * r)
{
  GstBus *bus = gst_element_get_bus (p);
  GstStateChangeReturn sret = gst_element_set_state (p, GST_STATE_PLAYING);

  while (TRUE) {
    GstMessage *msg = gst_bus_timed_pop_filtered (bus, 60 * GST_SECOND,
        GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_ELEMENT |
        GST_MESSAGE_WARNING | GST_MESSAGE_LATENCY);
    if (msg == NULL) {
      r->error = g_strdup ("timeout");
      break;
    }
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_LATENCY) {
      /* what gst-launch-1.0 does: distribute the new latency */
      r->latency_messages++;
      gst_bin_recalculate_latency (GST_BIN (p));
      gst_message_unref (msg);
      continue;
    }
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_WARNING) {
      g_autoptr (GError) err = NULL;
      gst_message_parse_warning (msg, &err, NULL);
      g_ptr_array_add (r->warnings, g_strdup (err->message));
      gst_message_unref (msg);
      continue;
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
        {
          guint64 pts = GST_CLOCK_TIME_NONE, start = GST_CLOCK_TIME_NONE;
          g_assert_true (gst_structure_get_uint64 (s, "pts", &pts));
          g_assert_true (gst_structure_get_uint64 (s, "running-time", &start));
          g_array_append_val (r->chunk_pts, pts);
          g_array_append_val (r->chunk_start, start);
        }
        {
          guint rev = 0;
          gboolean tap = FALSE;
          const char *kind = gst_structure_get_string (s, "snapshot");
          g_assert_true (gst_structure_get_uint (s, "revision", &rev));
          g_assert_true (gst_structure_get_boolean (s, "tap", &tap));
          g_assert_nonnull (kind);
          g_assert_cmpstr (kind, ==, tap ? "tap" : rev ? "held" : "none");
          g_array_append_val (r->chunk_revisions, rev);
          g_array_append_val (r->chunk_taps, tap);
        }
        {
          double sec = -1;
          g_assert_true (gst_structure_get_double (s, "compute-seconds", &sec));
          g_array_append_val (r->chunk_compute, sec);
        }
      } else if (gst_structure_has_name (s, "lingbot-decode")) {
        double sec = -1;
        int frames = -1;
        g_assert_true (gst_structure_get_double (s, "compute-seconds", &sec));
        g_array_append_val (r->decode_seconds, sec);
        g_assert_true (gst_structure_get_int (s, "frames", &frames));
        g_array_append_val (r->decode_frames, frames);
        {
          /* frames handed on per latent frame: with two or more latent
           * frames in the chunk (5 frames or more), the first are out
           * before the decode ends */
          double vae = -1, first = -1;
          g_assert_true (gst_structure_get_double (s, "vae-seconds", &vae));
          g_assert_true (gst_structure_get_double (s, "first-frame-seconds",
                  &first));
          g_assert_cmpfloat (first, >=, 0);
          if (frames >= 5)
            g_assert_cmpfloat (first, <, vae);
          else
            g_assert_cmpfloat (first, <=, vae);
        }
      } else if (gst_structure_has_name (s, "lingbot-summary")) {
        gboolean eos = FALSE;
        g_assert_true (gst_structure_get_boolean (s, "eos", &eos));
        g_ptr_array_add (r->summaries, gst_structure_copy (s));
        if (eos && r->summary == NULL) {
          r->summary = gst_structure_copy (s);
          r->summary_src = GST_MESSAGE_SRC (msg);
        } else if (eos) {
          /* one EOS summary per element */
          g_assert_true (GST_MESSAGE_SRC (msg) != r->summary_src);
        }
      }
      gst_message_unref (msg);
      continue;
    }
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
      g_autoptr (GError) err = NULL;
      g_autofree char *dbg = NULL;
      gst_message_parse_error (msg, &err, &dbg);
      if (r->error == NULL) {
        r->error = g_strdup (err->message);
        r->error_domain = err->domain;
        r->error_code = err->code;
      }
    } else {
      r->eos = TRUE;
      r->sink_stats = element_stats (p, "sink");
      r->gen_stats = element_stats (p, "gen");
      r->dec_stats = element_stats (p, "dec");
    }
    gst_message_unref (msg);
    break;
  }
  gst_object_unref (bus);
  gst_element_set_state (p, GST_STATE_NULL);
  return sret;
}

/* pipeline_run() of @p, which it then frees: the run must end at EOS,
 * with no ERROR */
void
run_to_eos (GstElement * p, Run * r)
{
  pipeline_run (p, r);
  gst_object_unref (p);
  g_assert_cmpstr (r->error, ==, NULL);
  g_assert_true (r->eos);
}

char *
gen_desc (const char *gen, const char *devices, const char *extra)
{
  return g_strdup_printf ("%s model-path=%s prompt-embeds=%s "
      "image-location=%s width=64 height=64 frames=%d devices=%s seed=7 %s",
      gen, model_dir, embeds_path, image_path, N_FRAMES, devices,
      extra ? extra : "");
}

/* 29 frames, I420 64x64 at 16/1, PTS n/16 s, 2 chunks */
void
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
  g_assert_cmphex (g_array_index (r->chunk_keys, guint, 0), ==, LINGBOT_KEY_W);
  g_assert_cmphex (g_array_index (r->chunk_keys, guint, 1), ==, LINGBOT_KEY_D);
  /* both are taps: the press of W (snapshot 1), the press of D (2) */
  g_assert_cmpuint (g_array_index (r->chunk_revisions, guint, 0), ==, 1);
  g_assert_cmpuint (g_array_index (r->chunk_revisions, guint, 1), ==, 2);
  g_assert_true (g_array_index (r->chunk_taps, gboolean, 0));
  g_assert_true (g_array_index (r->chunk_taps, gboolean, 1));
  for (guint i = 0; i < r->samples->len; i++) {
    GstSample *s = g_ptr_array_index (r->samples, i);
    GstBuffer *b = gst_sample_get_buffer (s);
    GstVideoInfo info;
    g_assert_true (gst_video_info_from_caps (&info, gst_sample_get_caps (s)));
    g_assert_cmpint (GST_VIDEO_INFO_FORMAT (&info), ==, GST_VIDEO_FORMAT_I420);
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

static double
summary_double (Run * r, const char *field)
{
  double v = -1;
  if (!gst_structure_get_double (r->summary, field, &v))
    g_error ("lingbot-summary has no double %s", field);
  return v;
}

/* lingbot-summary against the lingbot-decode messages of the same run */
void
check_summary (Run * r)
{
  guint chunks = 0;
  guint64 frames = 0;
  gboolean known = FALSE;
  double d0, d1;

  g_assert_nonnull (r->summary);
  /* summary-interval 0: only the one at EOS */
  g_assert_cmpuint (r->summaries->len, ==, 1);
  g_assert_cmpuint (r->decode_seconds->len, ==, 2);
  d0 = g_array_index (r->decode_seconds, double, 0);
  d1 = g_array_index (r->decode_seconds, double, 1);
  g_assert_cmpfloat (d0, >, 0.0);
  g_assert_cmpfloat (d1, >, 0.0);
  g_assert_true (gst_structure_get_uint (r->summary, "chunks", &chunks));
  g_assert_cmpuint (chunks, ==, 2);
  g_assert_true (gst_structure_get_uint64 (r->summary, "frames", &frames));
  g_assert_cmpuint (frames, ==, N_FRAMES);
  g_assert_true (gst_structure_get_uint64 (r->summary, "steady-frames",
          &frames));
  g_assert_cmpuint (frames, ==, 16);
  g_assert_true (gst_structure_get_boolean (r->summary, "dit-seconds-known",
          &known));
  g_assert_true (known);
  /* steady: the frames of the chunks after the first over their DiT + VAE
   * seconds; percentiles by nearest rank (2 values: p50 the lower) */
  assert_close (summary_double (r, "steady-seconds"), d1);
  assert_close (summary_double (r, "steady-fps"), 16.0 / d1);
  assert_close (summary_double (r, "compute-seconds-total"), d0 + d1);
  assert_close (summary_double (r, "compute-seconds-mean"), (d0 + d1) / 2);
  assert_close (summary_double (r, "compute-seconds-p50"), MIN (d0, d1));
  assert_close (summary_double (r, "compute-seconds-p90"), MAX (d0, d1));
  assert_close (summary_double (r, "compute-seconds-p99"), MAX (d0, d1));
  assert_close (summary_double (r, "compute-seconds-max"), MAX (d0, d1));
}

double
field_double (const GstStructure * s, const char *field)
{
  double v = -1;

  g_assert_nonnull (s);
  if (!gst_structure_get_double (s, field, &v))
    g_error ("no double %s in %" GST_PTR_FORMAT, field, s);
  return v;
}

int
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

gboolean
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

void
query_latency (GstElement * p, const char *name, gboolean * live,
    GstClockTime * min, GstClockTime * max)
{
  GstElement *e = gst_bin_get_by_name (GST_BIN (p), name);
  GstPad *pad = gst_element_get_static_pad (e, "src");
  GstQuery *q = gst_query_new_latency ();

  g_assert_true (gst_pad_query (pad, q));
  gst_query_parse_latency (q, live, min, max);
  gst_query_unref (q);
  gst_object_unref (pad);
  gst_object_unref (e);
}

LingbotWorld *
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

/**
 * test_gst_main:
 * @argc: main()'s argc
 * @argv: main()'s argv
 * @make_suite: the program's suite ("lingbot-gst", test case "general")
 * @file: the program's source file, for gst-check's results
 *
 * The main() of every test-gst-*.c: initialises gst-check, writes the
 * fixture, runs the suite and removes the fixture.
 *
 * Returns: the number of failed tests
 */
int
test_gst_main (int *argc, char ***argv, Suite * (*make_suite) (void),
    const char *file)
{
  Suite *s;
  int failed;

  gst_check_init (argc, argv);
  write_fixture ();
  s = make_suite ();
  failed = gst_check_run_suite (s, "lingbot-gst", file);
  lingbot_test_rm_rf (tmpdir);
  return failed;
}

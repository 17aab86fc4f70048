/* lingbot-gst: lingbotgen: the pipeline, its statistics, the image pad, the key
 * snapshots, caps and queries, precision, poses and the attention window
 * (test `gst`, suites gst, elements, pipeline)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The fixture and the pipeline runner: test-gst-common.c.
 */
#include "test-gst-common.h"

static guint64
field_uint64 (const GstStructure * s, const char *field)
{
  guint64 v = G_MAXUINT64;
  guint u = G_MAXUINT;

  g_assert_nonnull (s);
  if (gst_structure_get_uint (s, field, &u))
    return u;
  if (!gst_structure_get_uint64 (s, field, &v))
    g_error ("no uint/uint64 %s in %" GST_PTR_FORMAT, field, s);
  return v;
}

/* the distribution NAME-mean/-p50/-p90/-p99/-max of a stats structure:
 * in order, all >= 0 */
static void
check_distribution (const GstStructure * s, const char *name)
{
  static const char *const parts[] = { "p50", "p90", "p99", "max" };
  g_autofree char *mean = g_strdup_printf ("%s-mean", name);
  double prev = 0.0;

  g_assert_cmpfloat (field_double (s, mean), >=, 0.0);
  for (guint i = 0; i < G_N_ELEMENTS (parts); i++) {
    g_autofree char *f = g_strdup_printf ("%s-%s", name, parts[i]);
    double v = field_double (s, f);

    g_assert_cmpfloat (v, >=, prev);
    prev = v;
  }
  g_assert_cmpfloat (field_double (s, mean), <=, prev);
}

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
  check_summary (&r1);
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
  check_summary (&rb);
  g_assert_cmpint (max_diff (&r1, &rb), ==, 0);

  run_clear (&r1);
  run_clear (&r2);
  run_clear (&rb);
}

GST_END_TEST;

/* The stats properties and summary-interval: lingbotgen's stats against
 * its lingbot-chunk messages, lingbotvaedec's against its lingbot-decode
 * messages and the frames at the sink, equal to the EOS lingbot-summary
 * (but name and eos) and kept after the stop; summary-interval=1 posts one
 * summary per chunk plus the EOS one */
GST_START_TEST (test_stats)
{
  g_autofree char *g = gen_desc ("lingbotgen name=gen", "cpu:1", NULL);
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! lingbotvaedec name=dec summary-interval=1 ! appsink name=sink "
      "sync=false", trace_path, g);
  g_autoptr (GstStructure) after = NULL, summary = NULL;
  GstElement *p, *dec, *bin, *child;
  GstStructure *gs, *ds;
  double c1, d1;
  guint interval = 0;
  Run r;

  p = pipeline_new (desc, &r);
  dec = gst_bin_get_by_name (GST_BIN (p), "dec");
  /* before a run: zeros */
  g_object_get (dec, "stats", &after, NULL);
  g_assert_true (gst_structure_has_name (after, "lingbot-stats"));
  g_assert_cmpuint (field_uint64 (after, "chunks"), ==, 0);
  g_assert_cmpfloat (field_double (after, "steady-fps"), ==, 0.0);
  g_clear_pointer (&after, gst_structure_free);
  fail_unless (pipeline_run (p, &r) != GST_STATE_CHANGE_FAILURE);
  check_run (&r);

  /* lingbotgen: 2 chunks (13 + 16 frames), steady = chunk 1 */
  gs = r.gen_stats;
  g_assert_nonnull (gs);
  g_assert_true (gst_structure_has_name (gs, "lingbot-stats"));
  g_assert_cmpuint (field_uint64 (gs, "chunks"), ==, r.chunk_frames->len);
  g_assert_cmpuint (field_uint64 (gs, "frames"), ==, N_FRAMES);
  g_assert_cmpuint (field_uint64 (gs, "steady-frames"), ==, 16);
  c1 = g_array_index (r.chunk_compute, double, 1);
  g_assert_cmpfloat (c1, >, 0.0);
  assert_close (field_double (gs, "steady-seconds"), c1);
  assert_close (field_double (gs, "steady-fps"), 16.0 / c1);
  g_assert_cmpfloat (field_double (gs, "steady-fps"), >, 0.0);
  assert_close (field_double (gs, "compute-seconds-total"),
      g_array_index (r.chunk_compute, double, 0) + c1);
  check_distribution (gs, "compute-seconds");
  check_distribution (gs, "period-seconds");
  /* one period (chunk 0's end to chunk 1's): at least chunk 1's compute */
  g_assert_cmpfloat (field_double (gs, "period-seconds-p50"), >=, c1 - 1e-6);
  assert_close (field_double (gs, "period-seconds-p50"),
      field_double (gs, "period-seconds-p99"));
  g_assert_false (gst_structure_has_field (gs, "decode-hidden-fraction"));

  /* lingbotvaedec: the frames it pushed, DiT + VAE per chunk */
  ds = r.dec_stats;
  g_assert_nonnull (ds);
  g_assert_cmpuint (field_uint64 (ds, "chunks"), ==, r.decode_seconds->len);
  g_assert_cmpuint (field_uint64 (ds, "chunks"), ==, 2);
  g_assert_cmpuint (field_uint64 (ds, "frames"), ==, r.samples->len);
  d1 = g_array_index (r.decode_seconds, double, 1);
  assert_close (field_double (ds, "steady-fps"), 16.0 / d1);
  g_assert_cmpfloat (field_double (ds, "steady-fps"), >, 0.0);
  check_distribution (ds, "compute-seconds");
  check_distribution (ds, "period-seconds");
  g_assert_cmpfloat (field_double (ds, "period-seconds-p50"), >, 0.0);
  g_assert_cmpfloat (field_double (ds, "decode-seconds-total"), >, 0.0);
  g_assert_cmpfloat (field_double (ds, "decode-seconds-total"), <,
      g_array_index (r.decode_seconds, double, 0) + d1);
  assert_close (field_double (ds, "decode-seconds-mean"),
      field_double (ds, "decode-seconds-total") / 2);
  g_assert_cmpfloat (field_double (ds, "decode-hidden-fraction"), >=, 0.0);
  g_assert_cmpfloat (field_double (ds, "decode-hidden-fraction"), <=, 1.0);

  /* summary-interval=1: after chunk 0, after chunk 1, at EOS; the EOS one
   * has the figures of the stats property */
  g_assert_cmpuint (r.summaries->len, ==, 3);
  for (guint i = 0; i < 3; i++) {
    const GstStructure *m = g_ptr_array_index (r.summaries, i);
    gboolean eos = TRUE;

    g_assert_true (gst_structure_get_boolean (m, "eos", &eos));
    g_assert_cmpint (eos, ==, i == 2);
    g_assert_cmpuint (field_uint64 (m, "chunks"), ==, MIN (i + 1, 2));
    g_assert_cmpuint (field_uint64 (m, "frames"), ==, i == 0 ? 13 : N_FRAMES);
  }
  summary = gst_structure_copy (r.summary);
  gst_structure_remove_field (summary, "eos");
  gst_structure_set_name (summary, "lingbot-stats");
  g_assert_true (gst_structure_is_equal (summary, ds));

  /* kept after the stop (the pipeline is in NULL now) */
  g_object_get (dec, "stats", &after, NULL);
  g_assert_true (gst_structure_is_equal (after, ds));
  g_clear_pointer (&after, gst_structure_free);
  g_object_get (dec, "summary-interval", &interval, NULL);
  g_assert_cmpuint (interval, ==, 1);
  gst_object_unref (dec);
  gst_object_unref (p);
  run_clear (&r);

  /* lingbotbin: its stats are lingbotgen's; the decoder's properties
   * through the child proxy ("dec::summary-interval") */
  bin = gst_element_factory_make ("lingbotbin", NULL);
  g_object_get (bin, "stats", &after, NULL);
  g_assert_nonnull (after);
  g_assert_false (gst_structure_has_field (after, "decode-hidden-fraction"));
  gst_child_proxy_set (GST_CHILD_PROXY (bin), "dec::summary-interval", 4, NULL);
  child = gst_bin_get_by_name (GST_BIN (bin), "dec");
  g_object_get (child, "summary-interval", &interval, NULL);
  g_assert_cmpuint (interval, ==, 4);
  gst_object_unref (child);
  gst_object_unref (bin);
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

/* the key snapshot behind each chunk: revision and tap / held set */
GST_START_TEST (test_snapshot_revision)
{
  g_autofree char *g1 = gen_desc ("lingbotgen", "cpu:1", "frames=45");
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! fakesink", held_trace_path, g1);
  static const guint keys[] = { LINGBOT_KEY_W, LINGBOT_KEY_W,
    LINGBOT_KEY_W | LINGBOT_KEY_D
  };
  static const guint revisions[] = { 1, 1, 2 };
  static const gboolean taps[] = { TRUE, FALSE, TRUE };
  Run r;
  GstElement *p = pipeline_new (desc, &r);

  pipeline_run (p, &r);
  gst_object_unref (p);
  g_assert_cmpstr (r.error, ==, NULL);
  g_assert_cmpuint (r.chunk_keys->len, ==, 3);
  for (guint i = 0; i < 3; i++) {
    g_assert_cmphex (g_array_index (r.chunk_keys, guint, i), ==, keys[i]);
    g_assert_cmpuint (g_array_index (r.chunk_revisions, guint, i), ==,
        revisions[i]);
    g_assert_cmpint (g_array_index (r.chunk_taps, gboolean, i), ==, taps[i]);
  }
  run_clear (&r);
}

GST_END_TEST;

GST_START_TEST (test_latency)
{
  g_autofree char *g1 = gen_desc ("lingbotgen name=gen", "cpu:1",
      "fps=8 is-live=true");
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! lingbotvaedec name=dec ! fakesink sync=true", trace_path, g1);
  g_autoptr (GError) err = NULL;
  GstElement *p = gst_parse_launch (desc, &err), *gen;
  gboolean live = FALSE;
  GstClockTime min = 0, max = 0;

  g_assert_no_error (err);
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_READY), ==,
      GST_STATE_CHANGE_SUCCESS);
  /* live: the compute latency, before any chunk was measured one steady
   * chunk (4 latent frames = 16 video frames) at 8 fps */
  query_latency (p, "gen", &live, &min, &max);
  g_assert_true (live);
  g_assert_cmpuint (min, ==, 2 * GST_SECOND);
  g_assert_cmpuint (max, ==, GST_CLOCK_TIME_NONE);
  /* the decoder passes it on (it needs the same whole chunk) */
  query_latency (p, "dec", &live, &min, &max);
  g_assert_true (live);
  g_assert_cmpuint (min, ==, 2 * GST_SECOND);
  g_assert_cmpuint (max, ==, GST_CLOCK_TIME_NONE);

  gen = gst_bin_get_by_name (GST_BIN (p), "gen");
  /* the deprecated name still works */
  g_object_set (gen, "live", FALSE, "fps", 16, "chunk-frames", 2, NULL);
  query_latency (p, "dec", &live, &min, &max);
  g_assert_false (live);
  g_assert_cmpuint (min, ==, GST_SECOND / 2);
  gst_object_unref (gen);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (p);
}

GST_END_TEST;

/* precision: fp32 by default; bf16 is given to the world the element
 * creates (and shown in its context; on CPU ranks an INFO message says
 * they compute it in f32); anything else fails NULL->READY
 * with LIBRARY/SETTINGS and this exact message, on lingbotgen and through
 * lingbotbin */
GST_START_TEST (test_precision)
{
  g_autofree char *g1 = gen_desc ("lingbotgen name=g", "cpu:1",
      "precision=bf16");
  g_autofree char *desc = g_strdup_printf ("%s ! fakesink", g1);
  g_autoptr (GError) err = NULL;
  GstElement *p = gst_parse_launch (desc, &err);
  GstElement *gen, *fresh;
  GstContext *ctx;
  LingbotWorld *w;

  g_assert_no_error (err);
  gen = gst_bin_get_by_name (GST_BIN (p), "g");
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_READY), ==,
      GST_STATE_CHANGE_SUCCESS);
  w = element_world (gen);
  g_assert_nonnull (w);
  g_assert_cmpstr (lingbot_world_get_precision (w), ==, "bf16");
  ctx = gst_element_get_context (gen, GST_LINGBOT_WORLD_CONTEXT_TYPE);
  g_assert_cmpstr (gst_structure_get_string (gst_context_get_structure (ctx),
          "precision"), ==, "bf16");
  gst_context_unref (ctx);
  lingbot_world_unref (w);
  /* which CPU ranks compute in f32: an INFO message says so */
  {
    GstBus *bus = gst_element_get_bus (p);
    GstMessage *m = gst_bus_pop_filtered (bus, GST_MESSAGE_INFO);
    g_autoptr (GError) info = NULL;
    g_autofree char *debug = NULL;
    const char *text;
    g_assert_nonnull (m);
    gst_message_parse_info (m, &info, &debug);
    g_assert_error (info, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_SETTINGS);
    g_assert_cmpstr (info->message, ==, "precision=bf16 has no effect on "
        "CPU ranks (devices=cpu:1): they compute in f32; on GPU ranks it "
        "selects bf16 GEMMs");
    /* gst-launch-1.0 prints only the debug string: "FILE(LINE): FUNC ():
     * OBJECT-PATH:\n" and the same text */
    g_assert_nonnull (debug);
    text = strstr (debug, ":\n");
    g_assert_nonnull (text);
    g_assert_cmpstr (text + 2, ==, info->message);
    gst_message_unref (m);
    gst_object_unref (bus);
  }
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (gen);
  gst_object_unref (p);

  /* an enum (GstLingbotPrecision): fp32 by default, the nicks fp32 and
   * bf16; anything else is refused when it is set */
  for (guint i = 0; i < 2; i++) {
    GParamSpec *ps;
    GEnumClass *ec;
    int v = -1;

    fresh = gst_element_factory_make (i ? "lingbotbin" : "lingbotgen", NULL);
    ps = g_object_class_find_property (G_OBJECT_GET_CLASS (fresh), "precision");
    g_assert_true (G_IS_PARAM_SPEC_ENUM (ps));
    g_assert_cmpstr (g_type_name (ps->value_type), ==, "GstLingbotPrecision");
    ec = G_PARAM_SPEC_ENUM (ps)->enum_class;
    g_assert_cmpuint (ec->n_values, ==, 3);
    /* GST_LINGBOT_PRECISION_FP32 = 0, _BF16 = 1, _FP8 = 2
     * (gst/gstlingbotgen.h) */
    g_assert_cmpstr (g_enum_get_value (ec, 0)->value_nick, ==, "fp32");
    g_assert_cmpstr (g_enum_get_value (ec, 1)->value_nick, ==, "bf16");
    g_assert_cmpstr (g_enum_get_value (ec, 2)->value_nick, ==, "fp8");
    g_object_get (fresh, "precision", &v, NULL);
    g_assert_cmpint (v, ==, 0);
    gst_util_set_object_arg (G_OBJECT (fresh), "precision", "bf16");
    g_object_get (fresh, "precision", &v, NULL);
    g_assert_cmpint (v, ==, 1);
    gst_util_set_object_arg (G_OBJECT (fresh), "precision", "fp8");
    g_object_get (fresh, "precision", &v, NULL);
    g_assert_cmpint (v, ==, 2);
    gst_object_unref (fresh);
  }

  for (guint i = 0; i < 2; i++) {
    g_autofree char *g2 = gen_desc (i ? "lingbotbin" : "lingbotgen",
        "cpu:1", "precision=bogus");
    g_autofree char *bad = g_strdup_printf ("lingbotcontrolsrc location=%s "
        "! %s ! fakesink", trace_path, g2);
    GstElement *bp = gst_parse_launch (bad, &err);

    g_assert_error (err, GST_PARSE_ERROR,
        GST_PARSE_ERROR_COULD_NOT_SET_PROPERTY);
    g_assert_nonnull (strstr (err->message, "\"precision\""));
    g_assert_nonnull (strstr (err->message, "\"bogus\""));
    g_clear_error (&err);
    gst_clear_object (&bp);
  }
}

GST_END_TEST;

/* @n frames of @width x @height at @fps_n/@fps_d, PTS i / rate from 0 */
static void
check_video (Run * r, guint n, int width, int height, int fps_n, int fps_d)
{
  g_assert_cmpuint (r->samples->len, ==, n);
  for (guint i = 0; i < r->samples->len; i++) {
    GstSample *s = g_ptr_array_index (r->samples, i);
    GstVideoInfo info;

    g_assert_true (gst_video_info_from_caps (&info, gst_sample_get_caps (s)));
    g_assert_cmpint (info.width, ==, width);
    g_assert_cmpint (info.height, ==, height);
    g_assert_cmpint (info.fps_n, ==, fps_n);
    g_assert_cmpint (info.fps_d, ==, fps_d);
    g_assert_cmpuint (GST_BUFFER_PTS (gst_sample_get_buffer (s)), ==,
        gst_util_uint64_scale (i, (guint64) fps_d * GST_SECOND, fps_n));
  }
}

/* size and rate from downstream caps when the properties are unset;
 * properties win; sizes the model cannot make are refused by name */
GST_START_TEST (test_caps_from_downstream)
{
  g_autofree char *base = g_strdup_printf ("lingbotgen model-path=%s "
      "prompt-embeds=%s image-location=%s frames=13 devices=cpu:1 seed=7",
      model_dir, embeds_path, image_path);
  g_autofree char *desc = g_strdup_printf ("%s ! lingbotvaedec ! "
      "video/x-raw,width=128,height=96,framerate=25/1 ! appsink name=sink "
      "sync=false", base);
  g_autofree char *wonly = g_strdup_printf ("%s ! lingbotvaedec ! "
      "video/x-raw,width=96 ! appsink name=sink sync=false", base);
  g_autofree char *odd = g_strdup_printf ("%s ! lingbotvaedec ! "
      "video/x-raw,width=100,height=100 ! fakesink", base);
  g_autofree char *props = g_strdup_printf ("%s width=64 height=64 ! "
      "lingbotvaedec ! video/x-raw,width=128,height=96 ! fakesink", base);
  g_autofree char *rate = g_strdup_printf ("%s framerate=30000/1001 "
      "width=64 height=64 ! lingbotvaedec ! appsink name=sink sync=false",
      base);
  Run r;
  GstElement *p;

  p = pipeline_new (desc, &r);
  pipeline_run (p, &r);
  gst_object_unref (p);
  g_assert_cmpstr (r.error, ==, NULL);
  check_video (&r, 13, 128, 96, 25, 1);
  run_clear (&r);

  /* only the width fixed downstream: the height from the image's aspect
   * (the fixture's start image is 80x48: 96 * 48 / 80 = 57.6, to 64 in
   * multiples of 16), not the model's default */
  p = pipeline_new (wonly, &r);
  pipeline_run (p, &r);
  gst_object_unref (p);
  g_assert_cmpstr (r.error, ==, NULL);
  check_video (&r, 13, 96, 64, 16, 1);
  run_clear (&r);

  /* a size that is not a multiple of 16 */
  p = pipeline_new (odd, &r);
  pipeline_run (p, &r);
  gst_object_unref (p);
  g_assert_cmpstr (r.error, ==, "downstream asks for 100x100 video: the size "
      "must be multiples of 16 and at most 4096x4096");
  g_assert_true (r.error_domain == GST_CORE_ERROR);
  g_assert_cmpint (r.error_code, ==, GST_CORE_ERROR_NEGOTIATION);
  run_clear (&r);

  /* the properties win: a caps filter that disagrees fails negotiation */
  p = pipeline_new (props, &r);
  pipeline_run (p, &r);
  gst_object_unref (p);
  g_assert_cmpstr (r.error, ==, "downstream does not take 64x64 video at "
      "16/1 fps (lingbotgen's width, height, framerate or fps property)");
  run_clear (&r);

  /* a fractional rate */
  p = pipeline_new (rate, &r);
  pipeline_run (p, &r);
  gst_object_unref (p);
  g_assert_cmpstr (r.error, ==, NULL);
  check_video (&r, 13, 64, 64, 30000, 1001);
  run_clear (&r);
}

GST_END_TEST;

static gint64
query_int (GstElement * e, const char *pad_name, GstQueryType type,
    GstFormat format, gboolean * ok)
{
  GstPad *pad = gst_element_get_static_pad (e, pad_name);
  GstQuery *q = type == GST_QUERY_DURATION ? gst_query_new_duration (format)
      : gst_query_new_position (format);
  gint64 v = -1;

  *ok = gst_pad_query (pad, q);
  if (*ok && type == GST_QUERY_DURATION)
    gst_query_parse_duration (q, NULL, &v);
  else if (*ok)
    gst_query_parse_position (q, NULL, &v);
  gst_query_unref (q);
  gst_object_unref (pad);
  return v;
}

/* DURATION (time and frames) when `frames` bounds the session, through
 * the decoder; POSITION where the video pushed so far ends */
GST_START_TEST (test_duration_position)
{
  g_autofree char *g1 = gen_desc ("lingbotgen name=gen", "cpu:1",
      "frames=45");
  g_autofree char *desc = g_strdup_printf ("%s ! lingbotvaedec name=dec ! "
      "fakesink sync=false", g1);
  g_autoptr (GError) err = NULL;
  GstElement *p = gst_parse_launch (desc, &err), *gen, *dec;
  GstBus *bus = gst_element_get_bus (p);
  GstMessage *msg;
  gboolean ok = FALSE;
  gint64 v;

  g_assert_no_error (err);
  gen = gst_bin_get_by_name (GST_BIN (p), "gen");
  dec = gst_bin_get_by_name (GST_BIN (p), "dec");
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_READY), ==,
      GST_STATE_CHANGE_SUCCESS);
  v = query_int (dec, "src", GST_QUERY_DURATION, GST_FORMAT_TIME, &ok);
  g_assert_true (ok);
  g_assert_cmpint (v, ==, gst_util_uint64_scale (45, GST_SECOND, 16));
  v = query_int (gen, "src", GST_QUERY_DURATION, GST_FORMAT_DEFAULT, &ok);
  g_assert_true (ok);
  g_assert_cmpint (v, ==, 45);
  g_assert_true (gst_element_query_duration (p, GST_FORMAT_TIME, &v));
  g_assert_cmpint (v, ==, gst_util_uint64_scale (45, GST_SECOND, 16));

  gst_element_set_state (p, GST_STATE_PLAYING);
  msg = gst_bus_timed_pop_filtered (bus, 120 * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  g_assert_nonnull (msg);
  g_assert_cmpint (GST_MESSAGE_TYPE (msg), ==, GST_MESSAGE_EOS);
  gst_message_unref (msg);
  v = query_int (dec, "src", GST_QUERY_POSITION, GST_FORMAT_DEFAULT, &ok);
  g_assert_true (ok);
  g_assert_cmpint (v, ==, 45);
  v = query_int (dec, "src", GST_QUERY_POSITION, GST_FORMAT_TIME, &ok);
  g_assert_true (ok);
  g_assert_cmpint (v, ==, gst_util_uint64_scale (45, GST_SECOND, 16));
  gst_element_set_state (p, GST_STATE_NULL);

  /* unbounded: no duration */
  g_object_set (gen, "frames", 0, NULL);
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_READY), ==,
      GST_STATE_CHANGE_SUCCESS);
  query_int (gen, "src", GST_QUERY_DURATION, GST_FORMAT_TIME, &ok);
  g_assert_false (ok);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (gen);
  gst_object_unref (dec);
  gst_object_unref (p);
}

GST_END_TEST;

/* explicit poses from lingbotcontrolsrc always take effect with
 * image-location (the session waits for the control caps): the latents
 * equal a library session given the same poses, and differ from a run
 * without; frames that are not 4n+1 are refused with the session's
 * message */
GST_START_TEST (test_poses_through_elements)
{
  const char *shared = g_getenv ("LINGBOT_SHARED_DIR");
  g_autofree char *poses = NULL, *intr = NULL, *g1 = NULL, *g0 = NULL;
  g_autofree char *desc = NULL, *none = NULL, *bad = NULL, *gbad = NULL;
  g_autoptr (GError) err = NULL;
  Run r, rn;
  GstElement *p;

  if (shared == NULL)
    shared = "../shared";
  poses = g_build_filename (shared, "data", "poses.npy", NULL);
  intr = g_build_filename (shared, "data", "intrinsics.npy", NULL);
  if (!g_file_test (poses, G_FILE_TEST_EXISTS)
      || !g_file_test (intr, G_FILE_TEST_EXISTS)) {
    GST_INFO ("%s missing: skipped", poses);
    return;
  }
  g1 = gen_desc ("lingbotgen", "cpu:1", NULL);
  desc = g_strdup_printf ("lingbotcontrolsrc poses-location=%s "
      "intrinsics-location=%s ! %s ! application/x-lingbot-latent ! "
      "appsink name=sink sync=false", poses, intr, g1);
  none = g_strdup_printf ("%s ! application/x-lingbot-latent ! "
      "appsink name=sink sync=false", g1);
  gbad = gen_desc ("lingbotgen", "cpu:1", "frames=80");
  bad = g_strdup_printf ("lingbotcontrolsrc poses-location=%s "
      "intrinsics-location=%s ! %s ! lingbotvaedec ! fakesink", poses, intr,
      gbad);

  p = pipeline_new (desc, &r);
  pipeline_run (p, &r);
  gst_object_unref (p);
  g_assert_cmpstr (r.error, ==, NULL);
  g_assert_cmpuint (r.samples->len, ==, 2);
  p = pipeline_new (none, &rn);
  pipeline_run (p, &rn);
  gst_object_unref (p);
  g_assert_cmpuint (rn.samples->len, ==, 2);

  /* the library session with the same inputs */
  {
    LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
    LingbotSessionOptions so = LINGBOT_SESSION_OPTIONS_INIT;
    g_autoptr (LingbotWorld) world = NULL;
    g_autoptr (LingbotSession) ses = NULL;
    g_autoptr (LingbotCheckpoint) pc = NULL, ic = NULL;
    g_autoptr (LbTensor) pt = NULL, it = NULL;
    guint n = 0;

    wo.model_path = model_dir;
    wo.load_text_encoder = FALSE;
    world = lingbot_world_new (&wo, &err);
    g_assert_no_error (err);
    pc = lingbot_checkpoint_open (poses, &err);
    g_assert_no_error (err);
    ic = lingbot_checkpoint_open (intr, &err);
    g_assert_no_error (err);
    pt = lingbot_checkpoint_dup_tensor (pc,
        lingbot_checkpoint_list_tensors (pc, &n)[0], &err);
    g_assert_no_error (err);
    it = lingbot_checkpoint_dup_tensor (ic,
        lingbot_checkpoint_list_tensors (ic, &n)[0], &err);
    g_assert_no_error (err);
    so.prompt_embeds_path = embeds_path;
    so.image_path = image_path;
    so.width = so.height = 64;
    so.seed = 7;
    so.frames = N_FRAMES;
    /* lingbotgen's defaults */
    so.chunk_frames = 4;
    so.local_attn_frames = 18;
    so.sink_frames = 6;
    so.sample_shift = 10.0;
    so.poses = pt->data;
    so.n_poses = (guint) pt->shape[0];
    so.intrinsics = it->data;
    so.intrinsics_width = 832;
    so.intrinsics_height = 480;
    ses = lingbot_session_new (world, &so, &err);
    g_assert_no_error (err);
    for (guint k = 0; k < 2; k++) {
      GstBuffer *b = gst_sample_get_buffer (g_ptr_array_index (r.samples, k));
      GstBuffer *bn = gst_sample_get_buffer (g_ptr_array_index (rn.samples, k));
      const LbTensor *lat;
      GstMapInfo m;

      g_assert_true (lingbot_session_generate (ses, 0, NULL, &err));
      g_assert_no_error (err);
      lat = lingbot_session_get_latents_tensor (ses);
      gst_buffer_map (b, &m, GST_MAP_READ);
      g_assert_cmpuint (m.size, ==, lb_tensor_nbytes (lat));
      g_assert_cmpmem (m.data, m.size, lat->data, lb_tensor_nbytes (lat));
      gst_buffer_unmap (b, &m);
      /* and the poses made a difference */
      gst_buffer_map (bn, &m, GST_MAP_READ);
      g_assert_true (memcmp (m.data, lat->data, m.size) != 0);
      gst_buffer_unmap (bn, &m);
    }
  }
  run_clear (&r);
  run_clear (&rn);

  p = pipeline_new (bad, &r);
  pipeline_run (p, &r);
  gst_object_unref (p);
  g_assert_nonnull (r.error);
  if (strstr (r.error, "frames must be 4n+1 with offline poses, got 80")
      == NULL)
    g_error ("error '%s'", r.error);
  run_clear (&r);
}

GST_END_TEST;

/* lingbotgen max-attention-size reaches the session: the latents of a
 * pipeline with max-attention-size=40 (chunk 0 caches 64 tokens) are the
 * bytes of a library session with LingbotSessionOptions.max_attention_size
 * 40 and lingbotgen's other defaults, and not those of one without it */
GST_START_TEST (test_max_attention_size)
{
  g_autofree char *g = gen_desc ("lingbotgen", "cpu:1",
      "max-attention-size=40");
  g_autofree char *desc = g_strdup_printf ("%s ! "
      "application/x-lingbot-latent ! appsink name=sink sync=false", g);
  g_autoptr (GError) err = NULL;
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  g_autoptr (LingbotWorld) world = NULL;
  Run r;
  GstElement *p = pipeline_new (desc, &r);

  pipeline_run (p, &r);
  gst_object_unref (p);
  g_assert_cmpstr (r.error, ==, NULL);
  g_assert_cmpuint (r.samples->len, ==, 2);

  wo.model_path = model_dir;
  wo.load_text_encoder = FALSE;
  world = lingbot_world_new (&wo, &err);
  g_assert_no_error (err);
  for (int span = 0; span <= 40; span += 40) {
    LingbotSessionOptions so = LINGBOT_SESSION_OPTIONS_INIT;
    g_autoptr (LingbotSession) ses = NULL;

    so.prompt_embeds_path = embeds_path;
    so.image_path = image_path;
    so.width = so.height = 64;
    so.seed = 7;
    so.frames = N_FRAMES;
    /* lingbotgen's defaults */
    so.chunk_frames = 4;
    so.local_attn_frames = 18;
    so.sink_frames = 6;
    so.sample_shift = 10.0;
    so.max_attention_size = span;
    ses = lingbot_session_new (world, &so, &err);
    g_assert_no_error (err);
    for (guint k = 0; k < 2; k++) {
      GstBuffer *b = gst_sample_get_buffer (g_ptr_array_index (r.samples, k));
      const LbTensor *lat;
      GstMapInfo m;

      g_assert_true (lingbot_session_generate (ses, 0, NULL, &err));
      g_assert_no_error (err);
      lat = lingbot_session_get_latents_tensor (ses);
      gst_buffer_map (b, &m, GST_MAP_READ);
      g_assert_cmpuint (m.size, ==, lb_tensor_nbytes (lat));
      if (span == 40)
        g_assert_cmpmem (m.data, m.size, lat->data, lb_tensor_nbytes (lat));
      else
        g_assert_true (memcmp (m.data, lat->data, m.size) != 0);
      gst_buffer_unmap (b, &m);
    }
  }
  run_clear (&r);
}

GST_END_TEST;

static Suite *
lingbot_gst_gen_suite (void)
{
  Suite *s = suite_create ("lingbot-gst");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 120);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_pipeline);
  tcase_add_test (tc, test_stats);
  tcase_add_test (tc, test_snapshot_revision);
  tcase_add_test (tc, test_latency);
  tcase_add_test (tc, test_image_pad_and_plain_latents);
  tcase_add_test (tc, test_precision);
  tcase_add_test (tc, test_caps_from_downstream);
  tcase_add_test (tc, test_max_attention_size);
  tcase_add_test (tc, test_duration_position);
  tcase_add_test (tc, test_poses_through_elements);
  return s;
}

int
main (int argc, char **argv)
{
  return test_gst_main (&argc, &argv, lingbot_gst_gen_suite, __FILE__);
}

/* lingbot-gst: error paths: missing model, image or trace, bad devices,
 * no GPU, start-up errors, the image pixel cap, error wording, sizes,
 * prompt-embeds files and prompt warnings
 * (test `gst-errors`, suites gst, elements, pipeline)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The fixture and the pipeline runner: test-gst-common.c.
 */
#include "test-gst-common.h"
#include "test-npy.h"

/* runs the pipeline @desc into @r: its state change must fail, with an
 * ERROR on the bus */
static void
run_failing (const char *desc, Run * r)
{
  GstElement *p = pipeline_new (desc, r);
  GstStateChangeReturn ret = pipeline_run (p, r);

  gst_object_unref (p);
  g_assert_cmpint (ret, ==, GST_STATE_CHANGE_FAILURE);
  g_assert_nonnull (r->error);
}

/* the state change fails and the bus carries an error of @domain/@code
 * containing @needle */
#define expect_failure(desc, needle, domain, code) \
  expect_failure_full ((desc), (needle), GST_ ## domain ## _ERROR, \
      GST_ ## domain ## _ERROR_ ## code)

static void
expect_failure_full (const char *desc, const char *needle, GQuark domain,
    int code)
{
  Run r;

  run_failing (desc, &r);
  if (strstr (r.error, needle) == NULL)
    g_error ("error '%s' does not name '%s'", r.error, needle);
  if (r.error_domain != domain || r.error_code != code)
    g_error ("error '%s' is %s/%d, expected %s/%d", r.error,
        g_quark_to_string (r.error_domain), r.error_code,
        g_quark_to_string (domain), code);
  g_assert_cmpuint (r.samples->len, ==, 0);
  run_clear (&r);
}

/* image-location's cap is a pixel count, LINGBOT_IMAGE_MAX_PIXELS = 8192 *
 * 8192, not a side (docs/elements.md, image-location): a 9000x16 JPEG runs;
 * a header declaring 8193x8192 fails NULL->READY, LIBRARY/SETTINGS (an
 * LB_ERROR_INVALID_ARGUMENT, as an out-of-range size), with this message */
GST_START_TEST (test_image_pixel_cap)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *wide = g_build_filename (tmpdir, "wide-9000x16.jpg", NULL);
  g_autofree char *big = g_build_filename (tmpdir, "big-8193x8192.jpg", NULL);
  g_autofree char *enc = g_strdup_printf ("videotestsrc num-buffers=1 ! "
      "video/x-raw,width=9000,height=16 ! jpegenc ! filesink location=%s",
      wide);
  g_autofree char *jpeg = NULL;
  gsize len = 0, sof = 0;
  Run r;
  GstElement *p = pipeline_new (enc, &r);

  pipeline_run (p, &r);
  g_assert_cmpstr (r.error, ==, NULL);
  g_assert_true (r.eos);
  gst_object_unref (p);
  run_clear (&r);

  g_autofree char *g1 = g_strdup_printf ("lingbotgen model-path=%s "
      "prompt-embeds=%s image-location=%s width=64 height=64 frames=13 "
      "devices=cpu:1 ! fakesink", model_dir, embeds_path, wide);
  p = pipeline_new (g1, &r);
  pipeline_run (p, &r);
  g_assert_cmpstr (r.error, ==, NULL);
  g_assert_true (r.eos);
  gst_object_unref (p);
  run_clear (&r);

  /* the start image with its SOF0 size patched to 8193 x 8192 */
  g_assert_true (g_file_get_contents (image_path, &jpeg, &len, &err));
  g_assert_no_error (err);
  for (gsize i = 0; i + 9 < len; i++)
    if ((guint8) jpeg[i] == 0xff && (guint8) jpeg[i + 1] == 0xc0) {
      sof = i;
      break;
    }
  g_assert_cmpuint (sof, >, 0);
  jpeg[sof + 5] = 8192 >> 8;
  jpeg[sof + 6] = 8192 & 0xff;
  jpeg[sof + 7] = 8193 >> 8;
  jpeg[sof + 8] = 8193 & 0xff;
  g_assert_true (g_file_set_contents (big, jpeg, len, &err));
  g_assert_no_error (err);
  g_autofree char *g2 = g_strdup_printf ("lingbotgen model-path=%s "
      "prompt-embeds=%s image-location=%s width=64 height=64 frames=13 "
      "devices=cpu:1 ! fakesink", model_dir, embeds_path, big);
  g_autofree char *msg = g_strdup_printf ("image-location: '%s' is not a "
      "usable JPEG: %s: JPEG: 8193x8192 pixels is more than an image may "
      "have (67108864 pixels, LINGBOT_IMAGE_MAX_PIXELS)", big, big);
  run_failing (g2, &r);
  g_assert_cmpstr (r.error, ==, msg);
  g_assert_true (r.error_domain == GST_LIBRARY_ERROR);
  g_assert_cmpint (r.error_code, ==, GST_LIBRARY_ERROR_SETTINGS);
  run_clear (&r);
}

GST_END_TEST;

GST_START_TEST (test_missing_model)
{
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "lingbotgen model-path=/nonexistent/lingbot-model ! lingbotvaedec ! "
      "fakesink", trace_path);

  expect_failure (desc, "/nonexistent/lingbot-model", RESOURCE, NOT_FOUND);
}

GST_END_TEST;

GST_START_TEST (test_missing_image)
{
  g_autofree char *g1 = g_strdup_printf ("lingbotgen model-path=%s "
      "prompt-embeds=%s image-location=/nonexistent/start.jpg", model_dir,
      embeds_path);
  g_autofree char *g2 = g_strdup_printf ("lingbotgen model-path=%s "
      "prompt-embeds=%s image-location=%s", model_dir, embeds_path, tmpdir);
  g_autofree char *d1 = g_strdup_printf ("%s ! fakesink", g1);
  g_autofree char *d2 = g_strdup_printf ("%s ! fakesink", g2);

  expect_failure (d1, "/nonexistent/start.jpg", RESOURCE, NOT_FOUND);
  /* there but not readable as a file */
  expect_failure (d2, tmpdir, RESOURCE, OPEN_READ);
  /* none: lingbotgen has an image pad to link, lingbotbin has not (a
   * fresh-user trial was sent to a pad lingbotbin lacks) */
  {
    const char *const elements[] = { "lingbotgen", "lingbotbin" };
    const char *const want[] = {
      "No reference image: set image-location (or link the image pad)",
      "No reference image: set image-location",
    };

    for (guint i = 0; i < G_N_ELEMENTS (elements); i++) {
      g_autofree char *d = g_strdup_printf ("%s model-path=%s "
          "prompt-embeds=%s ! fakesink", elements[i], model_dir, embeds_path);
      Run r;

      run_failing (d, &r);
      g_assert_cmpstr (r.error, ==, want[i]);
      g_assert_true (r.error_domain == GST_LIBRARY_ERROR);
      g_assert_cmpint (r.error_code, ==, GST_LIBRARY_ERROR_SETTINGS);
      run_clear (&r);
    }
  }
}

GST_END_TEST;

GST_START_TEST (test_missing_trace)
{
  g_autofree char *g1 = gen_desc ("lingbotgen", "cpu:1", NULL);
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc "
      "location=/nonexistent/trace.json ! %s ! fakesink", g1);

  expect_failure (desc, "/nonexistent/trace.json", RESOURCE, NOT_FOUND);
}

GST_END_TEST;

GST_START_TEST (test_no_gpu)
{
  g_autoptr (GError) err = NULL;
  g_autofree int *ordinals = NULL;
  g_autofree char *g1 = gen_desc ("lingbotgen", "0", NULL);
  g_autofree char *desc = g_strdup_printf ("%s ! fakesink", g1);
  LbBackend *be = NULL;
  int n = 0;

  if (lingbot_backend_parse_devices ("0", &be, &n, &ordinals, &err)) {
    GST_INFO ("GPU 0 is usable here: skipped");
    return;
  }
  expect_failure (desc, "'0'", LIBRARY, INIT);
}

GST_END_TEST;

GST_START_TEST (test_malformed_trace)
{
  g_autofree char *g1 = gen_desc ("lingbotgen", "cpu:1", NULL);
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! lingbotvaedec ! fakesink", malformed_path, g1);

  expect_failure (desc, "event 1", STREAM, DECODE);
  expect_failure (desc, "delay_s", STREAM, DECODE);
}

GST_END_TEST;

GST_START_TEST (test_bad_devices)
{
  g_autofree char *g1 = gen_desc ("lingbotgen", "gpu:x", NULL);
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! lingbotvaedec ! fakesink", trace_path, g1);

  expect_failure (desc, "gpu:x", RESOURCE, SETTINGS);
}

GST_END_TEST;

static GstPadProbeReturn
count_eos (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  if (GST_EVENT_TYPE (GST_PAD_PROBE_INFO_EVENT (info)) == GST_EVENT_EOS)
    g_atomic_int_inc ((gint *) user_data);
  return GST_PAD_PROBE_OK;
}

/* bad settings fail NULL->READY with a clear error, before any thread
 * runs; an error in the streaming thread before chunk 0 pushes nothing
 * (no EOS to preroll the sink) and gst-launch-1.0 exits on it */
GST_START_TEST (test_startup_errors)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *png = g_build_filename (tmpdir, "start.png", NULL);
  g_autofree char *garbage = g_build_filename (tmpdir, "garbage.jpg", NULL);
  g_autofree char *cut = g_build_filename (tmpdir, "truncated.jpg", NULL);
  g_autofree char *jpeg = NULL;
  gsize jpeg_len = 0;
  g_autofree char *base = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "lingbotbin model-path=%s prompt-embeds=%s devices=cpu:1 frames=%d",
      trace_path, model_dir, embeds_path, N_FRAMES);
  static const guint8 png_head[] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a,
    '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'
  };
  struct
  {
    const char *props;
    const char *needle;
    GQuark domain;
    int code;
  } cases[] = {
    {"width=100 height=64", "100x64", GST_LIBRARY_ERROR,
        GST_LIBRARY_ERROR_SETTINGS},
    {"width=64", "64x0", GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS},
    {"timestep-indices=0,5000", "'5000'", GST_LIBRARY_ERROR,
        GST_LIBRARY_ERROR_SETTINGS},
    {"timestep-indices=a", "timestep-indices", GST_LIBRARY_ERROR,
        GST_LIBRARY_ERROR_SETTINGS},
    {NULL, "start.png", GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_READ},
    {NULL, "garbage.jpg", GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_READ},
    /* the first half of a good JPEG: libjpeg only warns, PIL refuses */
    {NULL, "truncated.jpg: JPEG: truncated: the data ends before the image "
          "does", GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_READ},
  };
  g_autofree char *launch = NULL, *timeout = NULL;
  GParamSpec *ps;
  GstElement *gen;

  g_assert_true (g_file_set_contents (png, (const char *) png_head,
          sizeof (png_head), &err));
  g_assert_no_error (err);
  g_assert_true (g_file_set_contents (garbage, "not an image at all", -1,
          &err));
  g_assert_no_error (err);
  g_assert_true (g_file_get_contents (image_path, &jpeg, &jpeg_len, &err));
  g_assert_true (g_file_set_contents (cut, jpeg, jpeg_len / 2, &err));
  g_assert_no_error (err);

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autofree char *desc = g_strdup_printf ("%s image-location=%s %s ! "
        "fakesink", base, i == 4 ? png : i == 5 ? garbage : i == 6 ? cut :
        image_path,
        cases[i].props ? cases[i].props : "");
    GST_INFO ("case %u: %s", i, desc);
    expect_failure_full (desc, cases[i].needle, cases[i].domain, cases[i].code);
  }

  /* a sane bound on the output size (width and height take any int and
   * fail the state change above 4096: test_size_out_of_range) */
  gen = gst_element_factory_make ("lingbotgen", NULL);
  ps = g_object_class_find_property (G_OBJECT_GET_CLASS (gen), "pixel-area");
  g_assert_cmpint (G_PARAM_SPEC_INT (ps)->maximum, ==, 4096 * 4096);
  gst_object_unref (gen);

  /* the session fails in the streaming thread (a global KV cache needs a
   * bounded session): an error, nothing pushed, no EOS */
  for (guint i = 0; i < 3; i++) {
    g_autofree char *g1 = gen_desc ("lingbotbin", "cpu:1",
        "local-attn-size=-1 frames=0");
    g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc "
        "location=%s ! %s ! appsink name=sink sync=false", trace_path, g1);
    Run r;
    GstElement *p = pipeline_new (desc, &r);
    GstElement *sink = gst_bin_get_by_name (GST_BIN (p), "sink");
    GstPad *pad = gst_element_get_static_pad (sink, "sink");
    gint eos = 0;

    gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, count_eos,
        &eos, NULL);
    pipeline_run (p, &r);
    g_assert_nonnull (r.error);
    g_assert_nonnull (strstr (r.error, "bounded"));
    g_assert_false (r.eos);
    g_assert_cmpint (g_atomic_int_get (&eos), ==, 0);
    g_assert_cmpuint (r.samples->len, ==, 0);
    gst_object_unref (pad);
    gst_object_unref (sink);
    gst_object_unref (p);
    run_clear (&r);
  }

  /* the same through gst-launch-1.0, which hung on the pushed EOS: it
   * exits with an error, within a bound */
  launch = g_find_program_in_path ("gst-launch-1.0");
  timeout = g_find_program_in_path ("timeout");
  if (launch != NULL && timeout != NULL) {
    for (guint i = 0; i < 3; i++) {
      g_autofree char *g1 = gen_desc ("lingbotbin", "cpu:1",
          "local-attn-size=-1 frames=0");
      g_autofree char *cmd = g_strdup_printf ("timeout 90 gst-launch-1.0 "
          "lingbotcontrolsrc location=%s ! %s ! fakesink", trace_path, g1);
      g_auto (GStrv) argv = NULL;
      g_autofree char *out = NULL, *errout = NULL;
      int status = 0;

      g_assert_true (g_shell_parse_argv (cmd, NULL, &argv, &err));
      g_assert_true (g_spawn_sync (NULL, argv, NULL, G_SPAWN_SEARCH_PATH,
              NULL, NULL, &out, &errout, &status, &err));
      g_assert_no_error (err);
      g_assert_true (WIFEXITED (status));
      if (WEXITSTATUS (status) == 124)
        g_error ("gst-launch-1.0 hung after the error:\n%s\n%s", out, errout);
      g_assert_cmpint (WEXITSTATUS (status), !=, 0);
      g_assert_nonnull (strstr (errout, "bounded"));
    }
  }
}

GST_END_TEST;

/* error wording at the element level */
GST_START_TEST (test_error_wording)
{
  /* a file as model-path */
  g_autofree char *d1 = g_strdup_printf ("lingbotgen model-path=%s "
      "prompt-embeds=%s image-location=%s ! fakesink", embeds_path,
      embeds_path, image_path);
  /* no image at all: the element's way to give one */
  g_autofree char *d2 = g_strdup_printf ("lingbotgen model-path=%s "
      "prompt-embeds=%s width=64 height=64 ! fakesink", model_dir,
      embeds_path);
  g_autofree char *d3 = g_strdup_printf ("lingbotbin model-path=%s "
      "prompt-embeds=%s width=64 height=64 ! fakesink", model_dir,
      embeds_path);
  GstElement *gen = gst_element_factory_make ("lingbotgen", NULL);
  GParamSpec *ps = g_object_class_find_property (G_OBJECT_GET_CLASS (gen),
      "model-path");
  const char *blurb = g_param_spec_get_blurb (ps);

  expect_failure (d1, "is not a directory", RESOURCE, NOT_FOUND);
  expect_failure (d2, "image-location", LIBRARY, SETTINGS);
  expect_failure (d3, "image-location", LIBRARY, SETTINGS);
  g_assert_nonnull (strstr (blurb, ".safetensors"));
  gst_object_unref (gen);
}

GST_END_TEST;

/* the first ERROR of the pipeline @desc, whose state change must fail:
 * @message exactly, of @domain/@code */
static void
expect_error_exact (const char *desc, const char *message, GQuark domain,
    int code)
{
  Run r;

  run_failing (desc, &r);
  g_assert_cmpstr (r.error, ==, message);
  g_assert_cmpstr (g_quark_to_string (r.error_domain), ==,
      g_quark_to_string (domain));
  g_assert_cmpint (r.error_code, ==, code);
  run_clear (&r);
}

/* A property settable only in NULL or READY (gst-inspect-1.0: "changeable
 * only in NULL or READY state"), set once the element is PAUSED: a GLib
 * warning naming the element, the property and the state, and the value
 * kept (a fresh-user trial set width, seed, prompt, model-path, is-live and
 * hold in PLAYING: nothing said so, and the getters reported values the
 * session did not use, and the next start would have); a property mutable
 * in PLAYING is still taken. */
static GPtrArray *refusals;

/* the elements' warnings (log domain "lingbot") */
static void
note_refusal (const gchar * domain, GLogLevelFlags level,
    const gchar * message, gpointer user_data)
{
  g_ptr_array_add (refusals, g_strdup (message));
}

GST_START_TEST (test_ready_only_property)
{
  g_autofree char *g1 = gen_desc ("lingbotgen name=gen", "cpu:1", NULL);
  g_autofree char *b1 = gen_desc ("lingbotbin name=bin", "cpu:1", NULL);
  g_autofree char *d1 = g_strdup_printf ("lingbotcontrolsrc name=ctl ! %s ! "
      "lingbotvaedec name=dec ! fakesink %s ! fakesink", g1, b1);
  g_autoptr (GError) err = NULL;
  GstElement *p = gst_parse_launch (d1, &err);
  GstElement *gen, *dec, *ctl, *bin;
  guint handler;
  int width = 0;
  guint64 window = 0;
  gboolean live = TRUE, overlay = TRUE;
  g_autofree char *model = NULL;
  const char *const want[] = {
    "gen: property 'width' can only be changed in the NULL or READY state, "
        "not in PAUSED: the new value is ignored (set it before the pipeline "
        "starts, or set the element to READY first)",
    "gen: property 'model-path' can only be changed in the NULL or READY "
        "state, not in PAUSED: the new value is ignored (set it before the "
        "pipeline starts, or set the element to READY first)",
    "dec: property 'model-path' can only be changed in the NULL or READY "
        "state, not in PAUSED: the new value is ignored (set it before the "
        "pipeline starts, or set the element to READY first)",
    "ctl: property 'is-live' can only be changed in the NULL or READY "
        "state, not in PAUSED: the new value is ignored (set it before the "
        "pipeline starts, or set the element to READY first)",
    "bin: property 'overlay' can only be changed in the NULL or READY "
        "state, not in PAUSED: the new value is ignored (set it before the "
        "pipeline starts, or set the element to READY first)",
  };

  g_assert_no_error (err);
  gen = gst_bin_get_by_name (GST_BIN (p), "gen");
  dec = gst_bin_get_by_name (GST_BIN (p), "dec");
  ctl = gst_bin_get_by_name (GST_BIN (p), "ctl");
  bin = gst_bin_get_by_name (GST_BIN (p), "bin");
  /* in READY all of them are taken */
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_READY), ==,
      GST_STATE_CHANGE_SUCCESS);
  g_object_set (ctl, "is-live", FALSE, NULL);
  g_object_set (bin, "overlay", FALSE, NULL);
  /* the elements are PAUSED once the call returns (the sinks preroll) */
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_PAUSED), !=,
      GST_STATE_CHANGE_FAILURE);
  g_assert_cmpint (GST_STATE (gen), ==, GST_STATE_PAUSED);

  refusals = g_ptr_array_new_with_free_func (g_free);
  handler = g_log_set_handler ("lingbot", G_LOG_LEVEL_WARNING, note_refusal,
      NULL);
  g_object_set (gen, "width", 128, NULL);
  g_object_set (gen, "model-path", "/nonexistent", NULL);
  g_object_set (dec, "model-path", "/nonexistent", NULL);
  g_object_set (ctl, "is-live", TRUE, NULL);
  g_object_set (bin, "overlay", TRUE, NULL);
  /* mutable in PLAYING: taken without a word */
  g_object_set (ctl, "key-repeat-window", (guint64) 5 * GST_MSECOND, NULL);
  g_log_remove_handler ("lingbot", handler);

  g_assert_cmpuint (refusals->len, ==, G_N_ELEMENTS (want));
  for (guint i = 0; i < G_N_ELEMENTS (want); i++)
    g_assert_cmpstr (g_ptr_array_index (refusals, i), ==, want[i]);
  g_object_get (gen, "width", &width, "model-path", &model, NULL);
  g_assert_cmpint (width, ==, 64);
  g_assert_cmpstr (model, ==, model_dir);
  g_object_get (ctl, "is-live", &live, "key-repeat-window", &window, NULL);
  g_assert_false (live);
  g_assert_cmpuint (window, ==, 5 * GST_MSECOND);
  g_object_get (bin, "overlay", &overlay, NULL);
  g_assert_false (overlay);

  g_assert_cmpint (gst_element_set_state (p, GST_STATE_NULL), ==,
      GST_STATE_CHANGE_SUCCESS);
  g_ptr_array_unref (refusals);
  refusals = NULL;
  gst_object_unref (gen);
  gst_object_unref (dec);
  gst_object_unref (ctl);
  gst_object_unref (bin);
  gst_object_unref (p);
}

GST_END_TEST;

/* Explicit poses make whole chunks (13, 29, 45, ... frames; spec 3.1
 * truncates the count): a fresh-user trial got 13 frames from 17 or 20
 * poses, and from frames=17 or 21 with 29 poses, without a word.  Now a
 * warning says how many are made and why; counts that are whole chunks
 * say nothing. */
GST_START_TEST (test_poses_whole_chunks)
{
  static const struct
  {
    guint n_poses;
    const char *frames;
    guint made;
    const char *warning;
  } cases[] = {
    {17, "frames=0", 13,
        "Explicit poses: 13 video frames are generated, not 17"},
    {29, "frames=21", 13,
        "Explicit poses: 13 video frames are generated, not 21"},
    {17, "frames=13", 13, NULL},
    {29, "frames=0", 29, NULL},
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autofree char *poses = g_strdup_printf ("%s/poses-%u.npy", tmpdir,
        cases[i].n_poses);
    g_autofree float *m = g_new0 (float, 16 * cases[i].n_poses);
    int64_t shape[3] = { cases[i].n_poses, 4, 4 };
    g_autofree char *g1 = gen_desc ("lingbotgen", "cpu:1", cases[i].frames);
    g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc "
        "poses-location=%s ! %s ! lingbotvaedec ! appsink name=sink "
        "sync=false", poses, g1);
    guint said = 0;
    Run r;

    for (guint k = 0; k < cases[i].n_poses; k++) {
      float *p = m + 16 * k;
      p[0] = p[5] = p[10] = p[15] = 1.0f;
      p[11] = 0.05f * (float) k;        /* forward along z */
    }
    lingbot_test_write_npy (poses, "<f4", 3, shape, m,
        16 * sizeof (float) * cases[i].n_poses);
    run_to_eos (pipeline_new (desc, &r), &r);
    g_assert_cmpstr (r.error, ==, NULL);
    g_assert_cmpuint (r.samples->len, ==, cases[i].made);
    for (guint w = 0; w < r.warnings->len; w++) {
      const char *text = g_ptr_array_index (r.warnings, w);

      if (g_str_has_prefix (text, "Explicit poses")) {
        g_assert_cmpstr (text, ==, cases[i].warning);
        said++;
      }
    }
    g_assert_cmpuint (said, ==, cases[i].warning ? 1 : 0);
    run_clear (&r);
  }
}

GST_END_TEST;

/* caps nobody after lingbotvaedec takes, found when the stream starts (the
 * templates link): a tee whose branches want two formats, right after
 * lingbotvaedec or after a videoconvert (a fresh-user trial met the latter
 * and was told to link lingbotvaedec after lingbotgen, which it had):
 * CORE/NEGOTIATION, with a message that names both places to look */
GST_START_TEST (test_no_latent_caps)
{
  const char *const tails[] = {
    "lingbotvaedec ! tee name=t ! queue ! video/x-raw,format=I420 ! fakesink "
        "t. ! queue ! video/x-raw,format=RGB ! fakesink",
    "lingbotvaedec ! videoconvert ! tee name=t ! queue ! "
        "video/x-raw,format=I420 ! fakesink t. ! queue ! "
        "video/x-raw,format=RGB ! fakesink"
  };

  for (guint i = 0; i < G_N_ELEMENTS (tails); i++) {
    g_autofree char *g1 = gen_desc ("lingbotgen", "cpu:1", NULL);
    g_autofree char *desc = g_strdup_printf ("%s ! %s", g1, tails[i]);
    GstElement *p;
    Run r;

    p = pipeline_new (desc, &r);
    pipeline_run (p, &r);
    g_assert_cmpstr (r.error, ==, "downstream accepts no latent caps: "
        "lingbotgen's src pad links to lingbotvaedec, and what follows "
        "lingbotvaedec must accept raw video (behind a tee, every branch "
        "the same format)");
    g_assert_cmpstr (g_quark_to_string (r.error_domain), ==,
        g_quark_to_string (GST_CORE_ERROR));
    g_assert_cmpint (r.error_code, ==, GST_CORE_ERROR_NEGOTIATION);
    g_assert_cmpuint (r.samples->len, ==, 0);
    gst_element_set_state (p, GST_STATE_NULL);
    gst_object_unref (p);
    run_clear (&r);
  }
}

GST_END_TEST;

/* width/height out of range: the state change fails naming the allowed
 * sizes (GObject used to refuse the value with a g_warning and the session
 * ran at the default size), also when set in READY */
GST_START_TEST (test_size_out_of_range)
{
  g_autofree char *d1 = g_strdup_printf ("lingbotgen model-path=%s "
      "prompt-embeds=%s image-location=%s width=8192 frames=1 ! fakesink",
      model_dir, embeds_path, image_path);
  g_autofree char *d2 = g_strdup_printf ("lingbotgen model-path=%s "
      "prompt-embeds=%s image-location=%s width=-64 height=64 frames=1 ! "
      "fakesink", model_dir, embeds_path, image_path);
  g_autofree char *d3 = g_strdup_printf ("lingbotgen name=gen model-path=%s "
      "prompt-embeds=%s image-location=%s width=64 height=64 frames=1 ! "
      "fakesink", model_dir, embeds_path, image_path);
  GstElement *p, *gen;
  Run r;

  expect_error_exact (d1, "Invalid output size 8192x0: set width and height "
      "both to multiples of 16 (at most 4096), or both to 0 (size from "
      "pixel-area)", GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS);
  expect_error_exact (d2, "Invalid output size -64x64: set width and height "
      "both to multiples of 16 (at most 4096), or both to 0 (size from "
      "pixel-area)", GST_LIBRARY_ERROR, GST_LIBRARY_ERROR_SETTINGS);

  p = pipeline_new (d3, &r);
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_READY), ==,
      GST_STATE_CHANGE_SUCCESS);
  gen = gst_bin_get_by_name (GST_BIN (p), "gen");
  g_object_set (gen, "width", 8192, "height", 8192, NULL);
  gst_object_unref (gen);
  g_assert_cmpint (pipeline_run (p, &r), ==, GST_STATE_CHANGE_FAILURE);
  g_assert_cmpstr (r.error, ==, "Invalid output size 8192x8192: set width "
      "and height both to multiples of 16 (at most 4096), or both to 0 "
      "(size from pixel-area)");
  gst_object_unref (p);
  run_clear (&r);
}

GST_END_TEST;

/* a file that is no prompt-embeds file, and one of another model's text
 * width: NULL->READY fails naming the file and what is wrong, before the
 * model loads (they failed in the streaming thread, "rank 0: ...") */
GST_START_TEST (test_bad_prompt_embeds)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *bad = g_build_filename (tmpdir, "garbage.safetensors",
      NULL);
  g_autofree char *narrow = g_build_filename (tmpdir, "narrow.safetensors",
      NULL);
  g_autoptr (LbTensor) ctx = lb_tensor_new_f32 (2, (int64_t) 4, (int64_t) 8);
  g_autofree char *d1 = NULL, *d2 = NULL, *m1 = NULL, *m2 = NULL;
  LingbotDitConfig cfg;

  lingbot_dit_config_init_preset (&cfg, LINGBOT_DIT_PRESET_TINY);
  g_assert_cmpint (cfg.text_dim, !=, 8);
  g_assert_true (g_file_set_contents (bad, "garbage\n", -1, &err));
  g_assert_no_error (err);
  memset (ctx->data, 0, 4 * 8 * sizeof (float));
  g_assert_true (lingbot_prompt_embeds_save (narrow, ctx, "narrow", 4, &err));
  g_assert_no_error (err);
  d1 = g_strdup_printf ("lingbotgen model-path=%s prompt-embeds=%s "
      "image-location=%s width=64 height=64 frames=1 ! fakesink", model_dir,
      bad, image_path);
  d2 = g_strdup_printf ("lingbotgen model-path=%s prompt-embeds=%s "
      "image-location=%s width=64 height=64 frames=1 ! fakesink", model_dir,
      narrow, image_path);
  m1 = g_strdup_printf ("prompt-embeds: '%s' is not a usable prompt-embeds "
      "file: %s: safetensors header length 749118580988207463 goes beyond "
      "the end of the file (8 bytes)", bad, bad);
  m2 = g_strdup_printf ("prompt-embeds: '%s' holds embeddings 8 wide, the "
      "model '%s' takes %d (the file was made for another model)", narrow,
      model_dir, cfg.text_dim);
  expect_error_exact (d1, m1, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_READ);
  expect_error_exact (d2, m2, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_READ);
}

GST_END_TEST;

/* the fixture's model with a random umT5 and the test SentencePiece model
 * (LINGBOT_TEST_SPM_MODEL): prompts go through the text encoder */
static char *
write_text_model (void)
{
  g_autoptr (GError) err = NULL;
  const char *spm = g_getenv ("LINGBOT_TEST_SPM_MODEL");
  char *dir = g_build_filename (tmpdir, "model-t5", NULL);
  g_autofree char *tdir = g_build_filename (dir, "google", "umt5-xxl", NULL);
  g_autofree char *tok = g_build_filename (tdir, "spiece.model", NULL);
  g_autofree char *t5 = g_build_filename (dir,
      "models_t5_umt5-xxl-enc-bf16.safetensors", NULL);
  const char *parts[] = { "transformers", "Wan2.1_VAE.safetensors" };
  g_autofree char *data = NULL;
  gsize len;
  LingbotDitConfig cfg;
  LingbotTextEncoderConfig tc;

  g_assert_nonnull (spm);
  if (g_file_test (t5, G_FILE_TEST_EXISTS))
    return dir;
  g_assert_cmpint (g_mkdir_with_parents (tdir, 0755), ==, 0);
  for (guint i = 0; i < G_N_ELEMENTS (parts); i++) {
    g_autofree char *from = g_build_filename (model_dir, parts[i], NULL);
    g_autofree char *to = g_build_filename (dir, parts[i], NULL);
    g_assert_cmpint (symlink (from, to), ==, 0);
  }
  g_assert_true (g_file_get_contents (spm, &data, &len, &err));
  g_assert_true (g_file_set_contents (tok, data, (gssize) len, &err));
  g_assert_no_error (err);
  lingbot_dit_config_init_preset (&cfg, LINGBOT_DIT_PRESET_TINY);
  lingbot_text_encoder_config_init_tiny (&tc, cfg.text_dim, 500);
  g_assert_true (lingbot_text_encoder_write_random (t5, &tc, LB_DTYPE_BF16,
          7, &err));
  g_assert_no_error (err);
  return dir;
}

/* the tokens of @prompt as a session's tokenizer makes them, </s> included */
static int
prompt_tokens (const char *model, const char *prompt)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *path = g_build_filename (model, "google", "umt5-xxl",
      "spiece.model", NULL);
  g_autoptr (LingbotTokenizer) tok = lingbot_tokenizer_new (path, &err);
  g_autofree char *clean = lingbot_text_clean (prompt);
  g_autofree int32_t *ids = NULL;
  gsize n = 0;

  g_assert_no_error (err);
  ids = lingbot_tokenizer_tokenize (tok, clean, &n, &err);
  g_assert_no_error (err);
  return (int) n + 1;
}

/* no prompt and no prompt-embeds, and a prompt over the text encoder's 512
 * tokens: the session runs, with a WARNING that says what it runs with
 * (both were silent); a prompt that fits: no warning */
GST_START_TEST (test_prompt_warnings)
{
  g_autofree char *model = write_text_model ();
  g_autoptr (GString) lng = g_string_new (NULL);
  g_autofree char *d1 = NULL, *d2 = NULL, *d3 = NULL, *want = NULL;
  GstElement *p, *gen;
  int n;
  Run r;

  for (int i = 0; i < 600; i++)
    g_string_append (lng, i ? " castle" : "castle");
  n = prompt_tokens (model, lng->str);
  g_assert_cmpint (n, >, 512);
  d1 = g_strdup_printf ("lingbotgen model-path=%s image-location=%s "
      "width=64 height=64 frames=1 ! fakesink", model, image_path);
  d2 = g_strdup_printf ("lingbotgen name=gen model-path=%s "
      "image-location=%s width=64 height=64 frames=1 ! fakesink", model,
      image_path);
  d3 = g_strdup_printf ("lingbotgen model-path=%s image-location=%s "
      "prompt=\"a castle\" width=64 height=64 frames=1 ! fakesink", model,
      image_path);
  want = g_strdup_printf ("The prompt is %d tokens long (with </s>), more "
      "than the 512 the text encoder takes: its last %d tokens are dropped",
      n, n - 512);

  run_to_eos (pipeline_new (d1, &r), &r);
  g_assert_cmpuint (r.warnings->len, ==, 1);
  g_assert_cmpstr (g_ptr_array_index (r.warnings, 0), ==, "No prompt and "
      "no prompt-embeds set: the session runs with the empty prompt's "
      "embeddings (the text encoder's output for \"\")");
  run_clear (&r);

  p = pipeline_new (d2, &r);
  gen = gst_bin_get_by_name (GST_BIN (p), "gen");
  g_object_set (gen, "prompt", lng->str, NULL);
  gst_object_unref (gen);
  run_to_eos (p, &r);
  g_assert_cmpuint (r.warnings->len, ==, 1);
  g_assert_cmpstr (g_ptr_array_index (r.warnings, 0), ==, want);
  run_clear (&r);

  run_to_eos (pipeline_new (d3, &r), &r);
  g_assert_cmpuint (r.warnings->len, ==, 0);
  run_clear (&r);
}

GST_END_TEST;

static Suite *
lingbot_gst_errors_suite (void)
{
  Suite *s = suite_create ("lingbot-gst");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 120);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_missing_model);
  tcase_add_test (tc, test_malformed_trace);
  tcase_add_test (tc, test_bad_devices);
  tcase_add_test (tc, test_missing_image);
  tcase_add_test (tc, test_missing_trace);
  tcase_add_test (tc, test_no_gpu);
  tcase_add_test (tc, test_startup_errors);
  tcase_add_test (tc, test_image_pixel_cap);
  tcase_add_test (tc, test_error_wording);
  tcase_add_test (tc, test_size_out_of_range);
  tcase_add_test (tc, test_no_latent_caps);
  tcase_add_test (tc, test_ready_only_property);
  tcase_add_test (tc, test_poses_whole_chunks);
  tcase_add_test (tc, test_bad_prompt_embeds);
  tcase_add_test (tc, test_prompt_warnings);
  return s;
}

int
main (int argc, char **argv)
{
  return test_gst_main (&argc, &argv, lingbot_gst_errors_suite, __FILE__);
}

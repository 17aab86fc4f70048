/* lingbot-gst: lingbotcontrolsrc in a pipeline: navigation events (X
 * auto-repeat folded), trace records, unknown keys
 * (test `gst-controlsrc`, suites gst, elements, pipeline)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The fixture and the pipeline runner: test-gst-common.c.
 */
#include "test-gst-common.h"

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

/* X video sinks send a held key's auto-repeat as key-release + key-press
 * pairs: within key-repeat-window they are folded away (the key stays
 * held, no tap), and so is a repeat press without a release; a release
 * not followed by its press goes, in order, with its own time */
static void
push_key (GstHarness * h, const char *name, gboolean press)
{
  g_assert_true (gst_harness_push_upstream_event (h, press ?
          gst_navigation_event_new_key_press (name, 0) :
          gst_navigation_event_new_key_release (name, 0)));
}

static void
expect_record (GstHarness * h, int type, guint keys, guint held)
{
  GstLingbotControlRecord rec = pull_record (h, NULL);

  g_assert_cmpint (rec.type, ==, type);
  g_assert_cmphex (rec.keys, ==, keys);
  g_assert_cmphex (rec.held, ==, held);
}

GST_START_TEST (test_key_repeat)
{
  GstHarness *h = gst_harness_new ("lingbotcontrolsrc");
  guint64 window = 0;
  GstEvent *ev;

  g_object_get (h->element, "key-repeat-window", &window, NULL);
  g_assert_cmpuint (window, ==, 30 * GST_MSECOND);
  /* a window no scheduler stall outlasts: what follows the pairs decides */
  g_object_set (h->element, "key-repeat-window", GST_SECOND, NULL);
  gst_harness_play (h);

  push_key (h, "w", TRUE);
  expect_record (h, GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_W, LINGBOT_KEY_W);
  for (guint i = 0; i < 5; i++) {
    push_key (h, "w", FALSE);
    push_key (h, "w", TRUE);
  }
  push_key (h, "ArrowUp", TRUE);        /* a repeat without a release */
  /* the next record is D's: nothing of W's repeats came before it */
  push_key (h, "d", TRUE);
  expect_record (h, GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_D,
      LINGBOT_KEY_W | LINGBOT_KEY_D);

  /* a release followed by another key: the release goes first */
  push_key (h, "w", FALSE);
  push_key (h, "a", TRUE);
  expect_record (h, GST_LINGBOT_CONTROL_RELEASE, LINGBOT_KEY_W, LINGBOT_KEY_D);
  expect_record (h, GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_A,
      LINGBOT_KEY_A | LINGBOT_KEY_D);
  /* ... and before an action signal's record */
  push_key (h, "a", FALSE);
  g_signal_emit_by_name (h->element, "reset-pose");
  expect_record (h, GST_LINGBOT_CONTROL_RELEASE, LINGBOT_KEY_A, LINGBOT_KEY_D);
  expect_record (h, GST_LINGBOT_CONTROL_RESET, 0, 0);

  /* a release alone goes once the window has passed */
  g_object_set (h->element, "key-repeat-window", 20 * GST_MSECOND, NULL);
  push_key (h, "j", TRUE);
  expect_record (h, GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_J, LINGBOT_KEY_J);
  push_key (h, "j", FALSE);
  expect_record (h, GST_LINGBOT_CONTROL_RELEASE, LINGBOT_KEY_J, 0);

  /* 0: every event as it comes (a pair is a release and a new press) */
  g_object_set (h->element, "key-repeat-window", (guint64) 0, NULL);
  push_key (h, "k", TRUE);
  push_key (h, "k", FALSE);
  push_key (h, "k", TRUE);
  push_key (h, "k", TRUE);
  expect_record (h, GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_K, LINGBOT_KEY_K);
  expect_record (h, GST_LINGBOT_CONTROL_RELEASE, LINGBOT_KEY_K, 0);
  expect_record (h, GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_K, LINGBOT_KEY_K);
  expect_record (h, GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_K, LINGBOT_KEY_K);

  /* an EOS sent while a release is held back ends the stream after it */
  g_object_set (h->element, "key-repeat-window", GST_SECOND, NULL);
  push_key (h, "k", FALSE);
  g_assert_true (gst_element_send_event (h->element, gst_event_new_eos ()));
  expect_record (h, GST_LINGBOT_CONTROL_RELEASE, LINGBOT_KEY_K, 0);
  while ((ev = gst_harness_pull_event (h)) != NULL
      && GST_EVENT_TYPE (ev) != GST_EVENT_EOS)
    gst_event_unref (ev);
  g_assert_nonnull (ev);
  gst_event_unref (ev);
  g_assert_cmpuint (gst_harness_buffers_in_queue (h), ==, 0);
  gst_harness_teardown (h);
}

GST_END_TEST;

GST_START_TEST (test_trace_records)
{
  GstHarness *h = gst_harness_new ("lingbotcontrolsrc");
  GstLingbotControlRecord rec;
  GstBuffer *b;
  static const struct
  {
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

/* a trace whose events all have unknown keys: a warning on the bus, and
 * the session still makes its `frames` with no key held; a trace that
 * ends with nothing held before `frames` goes on with no key held; an
 * unbounded session ends with such a trace */
GST_START_TEST (test_unknown_keys)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *zz = g_build_filename (tmpdir, "zz.json", NULL);
  g_autofree char *g1 = gen_desc ("lingbotgen", "cpu:1", NULL);
  g_autofree char *g2 = gen_desc ("lingbotgen", "cpu:1", "frames=45");
  g_autofree char *g3 = g_strdup_printf ("lingbotgen model-path=%s "
      "prompt-embeds=%s image-location=%s width=64 height=64 frames=0",
      model_dir, embeds_path, image_path);
  g_autofree char *d1 = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! lingbotvaedec ! appsink name=sink sync=false", zz, g1);
  g_autofree char *d2 = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! fakesink", trace_path, g2);
  g_autofree char *d3 = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! fakesink", zz, g3);
  gboolean named = FALSE;
  Run r;

  g_assert_true (g_file_set_contents (zz, "{\"events\":["
          "{\"delay_s\":0.0,\"message\":{\"type\":\"control\","
          "\"key\":\"KeyZZ\",\"action\":\"press\"}},"
          "{\"delay_s\":1.0,\"message\":{\"type\":\"control\","
          "\"key\":\"KeyZZ\",\"action\":\"release\"}}]}", -1, &err));
  g_assert_no_error (err);

  run_to_eos (pipeline_new (d1, &r), &r);
  g_assert_cmpuint (r.samples->len, ==, N_FRAMES);
  g_assert_cmpuint (r.chunk_keys->len, ==, 2);
  for (guint i = 0; i < 2; i++) {
    g_assert_cmphex (g_array_index (r.chunk_keys, guint, i), ==, 0);
    g_assert_cmpuint (g_array_index (r.chunk_revisions, guint, i), ==, 0);
  }
  for (guint i = 0; i < r.warnings->len; i++)
    named |= strstr (g_ptr_array_index (r.warnings, i), "KeyZZ") != NULL;
  g_assert_true (named);
  run_clear (&r);

  /* W tapped, D pressed and released at 1.5 s: chunk 2 after the trace */
  run_to_eos (pipeline_new (d2, &r), &r);
  g_assert_cmpuint (r.chunk_keys->len, ==, 3);
  g_assert_cmphex (g_array_index (r.chunk_keys, guint, 0), ==, LINGBOT_KEY_W);
  g_assert_cmphex (g_array_index (r.chunk_keys, guint, 1), ==, LINGBOT_KEY_D);
  g_assert_cmphex (g_array_index (r.chunk_keys, guint, 2), ==, 0);
  g_assert_cmpuint (g_array_index (r.chunk_revisions, guint, 2), ==, 2);
  g_assert_false (g_array_index (r.chunk_taps, gboolean, 2));
  run_clear (&r);

  /* unbounded: the trace's end with nothing held ends the stream */
  run_to_eos (pipeline_new (d3, &r), &r);
  g_assert_cmpuint (r.chunk_keys->len, ==, 0);
  run_clear (&r);
}

GST_END_TEST;

static Suite *
lingbot_gst_controlsrc_suite (void)
{
  Suite *s = suite_create ("lingbot-gst");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 120);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_navigation);
  tcase_add_test (tc, test_key_repeat);
  tcase_add_test (tc, test_trace_records);
  tcase_add_test (tc, test_unknown_keys);
  return s;
}

int
main (int argc, char **argv)
{
  return test_gst_main (&argc, &argv, lingbot_gst_controlsrc_suite, __FILE__);
}

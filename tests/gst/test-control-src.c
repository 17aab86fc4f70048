/* lingbot-gst: lingbotcontrolsrc alone (suite gst)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The control source without a model: explicit poses through the
 * library's loader (lingbot_poses_load(): shapes, dtypes, the error on the
 * bus), the trace actions "reset" (every key up) and unknown actions, and
 * the key names of docs/elements.md "Keys" in navigation events and the
 * action signals.  The .npy and .json inputs are written at start into a
 * temporary directory.
 */
#include <string.h>
#include <glib/gstdio.h>
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <gst/video/navigation.h>

#include "test-npy.h"
#include "gst/gstlingbotcontrolsrc.h"

static char *tmpdir;

static char *
tmp_file (const char *name)
{
  return g_build_filename (tmpdir, name, NULL);
}

static char *
write_npy (const char *name, const char *descr, int ndim,
    const int64_t * shape, const void *data, gsize nbytes)
{
  char *path = tmp_file (name);
  lingbot_test_write_npy (path, descr, ndim, shape, data, nbytes);
  return path;
}

static char *
write_text (const char *name, const char *text)
{
  g_autoptr (GError) err = NULL;
  char *path = tmp_file (name);
  g_assert_true (g_file_set_contents (path, text, -1, &err));
  g_assert_no_error (err);
  return path;
}

/* three poses: identity rotations, translation (i, 2i, 3i) */
static void
fill_poses (float *p, guint n)
{
  memset (p, 0, 16 * sizeof (float) * n);
  for (guint i = 0; i < n; i++) {
    float *m = p + 16 * i;
    m[0] = m[5] = m[10] = m[15] = 1.0f;
    m[3] = (float) i;
    m[7] = 2.0f * i;
    m[11] = 3.0f * i;
  }
}

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

/* ---- explicit poses ---- */

/* intrinsics of shape (4,): accepted, one row in the POSES record */
GST_START_TEST (test_poses_vector_intrinsics)
{
  float poses[48];
  const float k[4] = { 415.53f, 415.692f, 415.778f, 239.778f };
  const int64_t s344[] = { 3, 4, 4 }, s4[] = { 4 };
  g_autofree char *pp = NULL, *kp = NULL;
  GstHarness *h = gst_harness_new ("lingbotcontrolsrc");
  GstLingbotControlRecord rec;
  GstLingbotControlPoses hdr;
  GstBuffer *b = NULL;
  GstCaps *caps;
  gboolean has_poses = FALSE;
  float got[48 + 4];

  fill_poses (poses, 3);
  pp = write_npy ("poses3.npy", "<f4", 3, s344, poses, sizeof poses);
  kp = write_npy ("k4.npy", "<f4", 1, s4, k, sizeof k);
  g_object_set (h->element, "poses-location", pp, "intrinsics-location", kp,
      "intrinsics-width", 640, "intrinsics-height", 360, NULL);
  gst_harness_play (h);

  rec = pull_record (h, &b);
  g_assert_cmpint (rec.type, ==, GST_LINGBOT_CONTROL_POSES);
  g_assert_cmpuint (rec.payload_size, ==, sizeof (hdr) + sizeof (got));
  g_assert_cmpuint (gst_buffer_get_size (b), ==, sizeof (rec) +
      rec.payload_size);
  g_assert_cmpuint (gst_buffer_extract (b, sizeof (rec), &hdr,
          sizeof (hdr)), ==, sizeof (hdr));
  g_assert_cmpuint (hdr.n_poses, ==, 3);
  g_assert_cmpuint (hdr.n_intrinsics, ==, 1);
  g_assert_cmpint (hdr.intrinsics_width, ==, 640);
  g_assert_cmpint (hdr.intrinsics_height, ==, 360);
  g_assert_cmpuint (gst_buffer_extract (b, sizeof (rec) + sizeof (hdr), got,
          sizeof (got)), ==, sizeof (got));
  g_assert_cmpmem (got, sizeof (poses), poses, sizeof (poses));
  g_assert_cmpmem (got + 48, sizeof (k), k, sizeof (k));
  gst_buffer_unref (b);

  caps = gst_pad_get_current_caps (h->sinkpad);
  g_assert_nonnull (caps);
  g_assert_true (gst_structure_get_boolean (gst_caps_get_structure (caps, 0),
          "poses", &has_poses));
  g_assert_true (has_poses);
  gst_caps_unref (caps);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* the pipeline's state change fails with the loader's message on the bus
 * (RESOURCE/OPEN_READ), nothing is pushed, nothing crashes */
static void
expect_poses_error (const char *poses, const char *intrinsics,
    const char *message)
{
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc name=src "
      "poses-location=%s %s%s ! fakesink", poses,
      intrinsics ? "intrinsics-location=" : "", intrinsics ? intrinsics : "");
  g_autoptr (GError) err = NULL;
  GstElement *p = gst_parse_launch (desc, &err);
  GstBus *bus;
  GstMessage *msg;
  GError *gerr = NULL;

  g_assert_no_error (err);
  bus = gst_element_get_bus (p);
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_PLAYING), ==,
      GST_STATE_CHANGE_FAILURE);
  msg = gst_bus_timed_pop_filtered (bus, 10 * GST_SECOND, GST_MESSAGE_ERROR);
  g_assert_nonnull (msg);
  g_assert_cmpstr (GST_OBJECT_NAME (GST_MESSAGE_SRC (msg)), ==, "src");
  gst_message_parse_error (msg, &gerr, NULL);
  g_assert_error (gerr, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_OPEN_READ);
  g_assert_cmpstr (gerr->message, ==, message);
  g_error_free (gerr);
  gst_message_unref (msg);
  /* one error: basesrc's generic "Failed to start" does not follow */
  g_assert_null (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR));
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (p);
}

GST_START_TEST (test_poses_errors)
{
  float poses[48], k[12] = { 0 };
  gint64 ints[32] = { 0 };
  const int64_t s344[] = { 3, 4, 4 }, s04[] = { 0, 4 }, s33[] =
      { 3, 3 }, s244[] = { 2, 4, 4 }, s044[] = { 0, 4, 4 };
  g_autofree char *pp = NULL, *k04 = NULL, *k33 = NULL, *p2 = NULL, *p0 =
      NULL, *pint = NULL, *m = NULL;

  fill_poses (poses, 3);
  pp = write_npy ("poses3.npy", "<f4", 3, s344, poses, sizeof poses);
  p2 = write_npy ("poses2.npy", "<f4", 3, s244, poses, 32 * sizeof (float));
  p0 = write_npy ("poses0.npy", "<f4", 3, s044, NULL, 0);
  pint = write_npy ("posesint.npy", "<i8", 3, s244, ints, sizeof ints);
  k04 = write_npy ("k04.npy", "<f4", 2, s04, NULL, 0);
  k33 = write_npy ("k33.npy", "<f4", 2, s33, k, 9 * sizeof (float));

  /* (0, 4) intrinsics used to crash the element (a NULL error) */
  m = g_strdup_printf ("%s: intrinsics must have shape [4] or [N, 4] with "
      "N >= 1 (the first row is used unless N is the number of poses), got "
      "[0, 4]", k04);
  expect_poses_error (pp, k04, m);
  g_free (m);
  m = g_strdup_printf ("%s: intrinsics must have shape [4] or [N, 4] with "
      "N >= 1 (the first row is used unless N is the number of poses), got "
      "[3, 3]", k33);
  expect_poses_error (pp, k33, m);
  g_free (m);
  m = g_strdup_printf ("%s: poses must have shape [n, 4, 4] with 1 <= n <= "
      "16777216, got [0, 4, 4]", p0);
  expect_poses_error (p0, NULL, m);
  g_free (m);
  m = g_strdup_printf ("%s: poses must be floating point (f32, f64 or f16), "
      "got i64 [2, 4, 4]", pint);
  expect_poses_error (pint, NULL, m);
  g_free (m);
  m = NULL;
}

GST_END_TEST;

/* ---- traces ---- */

/* "reset" (action) = one RELEASE of the held keys, the pose kept (no RESET
 * record); "tap" is ignored with the element warning; reset_pose = RESET */
GST_START_TEST (test_trace_reset_action)
{
  g_autofree char *trace = write_text ("actions.json", "{\"events\":["
      "{\"delay_s\":0.0,\"message\":{\"type\":\"control\",\"key\":\"w\","
      "\"action\":\"press\"}},"
      "{\"delay_s\":0.1,\"message\":{\"type\":\"control\",\"key\":\"Right\","
      "\"action\":\"press\"}},"
      "{\"delay_s\":0.2,\"message\":{\"type\":\"control\","
      "\"action\":\"reset\"}},"
      "{\"delay_s\":0.3,\"message\":{\"type\":\"control\",\"key\":\"A\"}},"
      "{\"delay_s\":0.4,\"message\":{\"type\":\"control\",\"key\":\"a\","
      "\"action\":\"tap\"}},"
      "{\"delay_s\":0.5,\"message\":{\"type\":\"control\",\"key\":\"KeyL\","
      "\"action\":\"Reset\"}},"
      "{\"delay_s\":0.6,\"message\":{\"type\":\"reset_pose\"}}]}");
  static const struct
  {
    int type;
    guint keys, held;
    GstClockTime pts;
  } want[] = {
    {GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_W, LINGBOT_KEY_W, 0},
    {GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_D, LINGBOT_KEY_W | LINGBOT_KEY_D,
        100 * GST_MSECOND},
    {GST_LINGBOT_CONTROL_RELEASE, LINGBOT_KEY_W | LINGBOT_KEY_D, 0,
        200 * GST_MSECOND},
    {GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_A, LINGBOT_KEY_A,
        300 * GST_MSECOND},
    {GST_LINGBOT_CONTROL_RELEASE, LINGBOT_KEY_A, 0, 500 * GST_MSECOND},
    {GST_LINGBOT_CONTROL_RESET, 0, 0, 600 * GST_MSECOND},
  };
  GstHarness *h = gst_harness_new ("lingbotcontrolsrc");
  GstBus *bus = gst_bus_new ();
  GstMessage *msg;
  GError *gerr = NULL;
  GstBuffer *b;

  gst_element_set_bus (h->element, bus);
  g_object_set (h->element, "location", trace, NULL);
  gst_harness_play (h);
  for (guint i = 0; i < G_N_ELEMENTS (want); i++) {
    GstLingbotControlRecord rec = pull_record (h, &b);
    g_assert_cmpint (rec.type, ==, want[i].type);
    g_assert_cmphex (rec.keys, ==, want[i].keys);
    g_assert_cmphex (rec.held, ==, want[i].held);
    g_assert_cmpuint (GST_BUFFER_PTS (b), ==, want[i].pts);
    gst_buffer_unref (b);
  }
  g_assert_true (gst_harness_pull_until_eos (h, &b));
  g_assert_null (b);

  msg = gst_bus_pop_filtered (bus, GST_MESSAGE_WARNING);
  g_assert_nonnull (msg);
  gst_message_parse_warning (msg, &gerr, NULL);
  g_assert_error (gerr, GST_STREAM_ERROR, GST_STREAM_ERROR_DECODE);
  g_assert_cmpstr (gerr->message, ==, "Control trace: 1 event(s) ignored: "
      "event 4: unknown action 'tap' ignored (press, release or reset)");
  g_error_free (gerr);
  gst_message_unref (msg);
  g_assert_null (gst_bus_pop_filtered (bus, GST_MESSAGE_WARNING |
          GST_MESSAGE_ERROR));
  gst_element_set_bus (h->element, NULL);
  gst_object_unref (bus);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* ---- EOS sent to the element ---- */

static GstPadProbeReturn
hold_buffer (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  g_async_queue_push (data, GINT_TO_POINTER (1));
  return GST_PAD_PROBE_OK;      /* a blocking probe: held until removed */
}

static gpointer
send_eos (gpointer element)
{
  return GINT_TO_POINTER (gst_element_send_event (element,
          gst_event_new_eos ())? 1 : 2);
}

/* an EOS sent to the element goes after the records queued before it:
 * GstBaseSrc's own EOS handling would drop them (and wait for the stream
 * lock of a blocked push); here one record is held in a blocking probe
 * while two more are queued and the EOS is sent */
GST_START_TEST (test_eos_after_queued_records)
{
  static const struct
  {
    int type;
    guint keys, held;
  } want[] = {
    {GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_W, LINGBOT_KEY_W},
    {GST_LINGBOT_CONTROL_PRESS, LINGBOT_KEY_A, LINGBOT_KEY_W | LINGBOT_KEY_A},
    {GST_LINGBOT_CONTROL_RELEASE, LINGBOT_KEY_W, LINGBOT_KEY_A},
  };
  GstHarness *h = gst_harness_new ("lingbotcontrolsrc");
  GstPad *srcpad = gst_element_get_static_pad (h->element, "src");
  GAsyncQueue *held = g_async_queue_new ();
  gboolean known = FALSE;
  GThread *thread;
  gulong probe;
  GstBuffer *b;

  gst_harness_play (h);
  probe = gst_pad_add_probe (srcpad, GST_PAD_PROBE_TYPE_BLOCK |
      GST_PAD_PROBE_TYPE_BUFFER, hold_buffer, held, NULL);
  g_signal_emit_by_name (h->element, "press-key", "KeyW", &known);
  g_assert_true (known);
  g_assert_nonnull (g_async_queue_timeout_pop (held, 30 * G_USEC_PER_SEC));
  g_signal_emit_by_name (h->element, "press-key", "KeyA", &known);
  g_signal_emit_by_name (h->element, "release-key", "KeyW", &known);
  thread = g_thread_new ("send-eos", send_eos, h->element);
  /* the send returns at once, while the push is still held */
  g_usleep (G_USEC_PER_SEC / 10);
  gst_pad_remove_probe (srcpad, probe);
  g_assert_cmpint (GPOINTER_TO_INT (g_thread_join (thread)), ==, 1);
  for (guint i = 0; i < G_N_ELEMENTS (want); i++) {
    GstLingbotControlRecord rec = pull_record (h, NULL);
    g_assert_cmpint (rec.type, ==, want[i].type);
    g_assert_cmphex (rec.keys, ==, want[i].keys);
    g_assert_cmphex (rec.held, ==, want[i].held);
  }
  g_assert_true (gst_harness_pull_until_eos (h, &b));
  g_assert_null (b);
  gst_object_unref (srcpad);
  g_async_queue_unref (held);
  gst_harness_teardown (h);
}

GST_END_TEST;

/* a malformed trace: the state change fails with one STREAM/DECODE error
 * naming the problem, and no second, generic one */
GST_START_TEST (test_trace_malformed_one_error)
{
  g_autofree char *dir = g_dir_make_tmp ("lingbot-ctl-XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "bad.json", NULL);
  g_assert_true (g_file_set_contents (path, "{\"events\": 3}", -1, NULL));
  g_autofree char *desc = g_strdup_printf ("lingbotcontrolsrc name=src "
      "location=%s ! fakesink", path);
  GstElement *p = gst_parse_launch (desc, NULL);
  GstBus *bus = gst_element_get_bus (p);
  GError *gerr = NULL;

  g_assert_cmpint (gst_element_set_state (p, GST_STATE_PLAYING), ==,
      GST_STATE_CHANGE_FAILURE);
  GstMessage *msg = gst_bus_timed_pop_filtered (bus, 10 * GST_SECOND,
      GST_MESSAGE_ERROR);
  g_assert_nonnull (msg);
  gst_message_parse_error (msg, &gerr, NULL);
  g_assert_error (gerr, GST_STREAM_ERROR, GST_STREAM_ERROR_DECODE);
  g_assert_true (g_str_has_suffix (gerr->message,
          "control trace: field 'events' is missing or not an array"));
  g_error_free (gerr);
  gst_message_unref (msg);
  g_assert_null (gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR));
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (p);
  g_unlink (path);
  g_rmdir (dir);
}

GST_END_TEST;

/* ---- key names ---- */

/* X keysym names (what X/GL video sinks send), browser names, any case */
GST_START_TEST (test_key_names)
{
  static const struct
  {
    const char *name;
    gboolean press;
    guint key, held;
  } nav[] = {
    {"Up", TRUE, LINGBOT_KEY_W, LINGBOT_KEY_W},
    {"Left", TRUE, LINGBOT_KEY_A, LINGBOT_KEY_W | LINGBOT_KEY_A},
    {"D", TRUE, LINGBOT_KEY_D, LINGBOT_KEY_W | LINGBOT_KEY_A | LINGBOT_KEY_D},
    {"Shift_L", TRUE, 0, 0},
    {"KeyZZ", TRUE, 0, 0},
    {"up", FALSE, LINGBOT_KEY_W, LINGBOT_KEY_A | LINGBOT_KEY_D},
    {"ARROWLEFT", FALSE, LINGBOT_KEY_A, LINGBOT_KEY_D},
    {"j", TRUE, LINGBOT_KEY_J, LINGBOT_KEY_D | LINGBOT_KEY_J},
    {"Right", FALSE, LINGBOT_KEY_D, LINGBOT_KEY_J},
  };
  static const struct
  {
    const char *name;
    gboolean known;
    guint key;
  } sig[] = {
    {"FORWARD", TRUE, LINGBOT_KEY_W},
    {"Down", TRUE, LINGBOT_KEY_S},
    {"keyk", TRUE, LINGBOT_KEY_K},
    {"Shift", FALSE, 0},
    {"", FALSE, 0},
  };
  GstHarness *h = gst_harness_new ("lingbotcontrolsrc");

  gst_harness_play (h);
  for (guint i = 0; i < G_N_ELEMENTS (nav); i++) {
    GstLingbotControlRecord rec;

    g_assert_true (gst_harness_push_upstream_event (h, nav[i].press ?
            gst_navigation_event_new_key_press (nav[i].name, 0) :
            gst_navigation_event_new_key_release (nav[i].name, 0)));
    if (nav[i].key == 0)
      continue;                 /* dropped: the next record shows it */
    rec = pull_record (h, NULL);
    g_assert_cmpint (rec.type, ==, nav[i].press ? GST_LINGBOT_CONTROL_PRESS :
        GST_LINGBOT_CONTROL_RELEASE);
    g_assert_cmphex (rec.keys, ==, nav[i].key);
    g_assert_cmphex (rec.held, ==, nav[i].held);
  }
  for (guint i = 0; i < G_N_ELEMENTS (sig); i++) {
    gboolean known = !sig[i].known;

    g_signal_emit_by_name (h->element, "press-key", sig[i].name, &known);
    g_assert_cmpint (known, ==, sig[i].known);
    if (sig[i].known) {
      GstLingbotControlRecord rec = pull_record (h, NULL);
      g_assert_cmpint (rec.type, ==, GST_LINGBOT_CONTROL_PRESS);
      g_assert_cmphex (rec.keys, ==, sig[i].key);
    }
  }
  /* nothing else was queued by the unknown names */
  g_assert_cmpuint (gst_harness_buffers_in_queue (h), ==, 0);
  gst_harness_teardown (h);
}

GST_END_TEST;

static Suite *
control_src_suite (void)
{
  Suite *s = suite_create ("lingbot-control-src");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_poses_vector_intrinsics);
  tcase_add_test (tc, test_poses_errors);
  tcase_add_test (tc, test_trace_reset_action);
  tcase_add_test (tc, test_key_names);
  tcase_add_test (tc, test_eos_after_queued_records);
  tcase_add_test (tc, test_trace_malformed_one_error);
  return s;
}

static void
rm_tmpdir (void)
{
  GDir *d = g_dir_open (tmpdir, 0, NULL);
  const char *name;

  while (d && (name = g_dir_read_name (d))) {
    g_autofree char *p = tmp_file (name);
    g_unlink (p);
  }
  if (d)
    g_dir_close (d);
  g_rmdir (tmpdir);
}

int
main (int argc, char **argv)
{
  g_autoptr (GError) err = NULL;
  int failed;

  gst_check_init (&argc, &argv);
  tmpdir = g_dir_make_tmp ("lingbot-control-src-XXXXXX", &err);
  g_assert_no_error (err);
  failed = gst_check_run_suite (control_src_suite (), "lingbot-control-src",
      __FILE__);
  rm_tmpdir ();
  g_free (tmpdir);
  return failed;
}

/* lingbot-gst: a held key through a real X video sink (test `x-keys`,
 * suites gst, elements)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * An X server (Xvfb, on a display it picks: -displayfd) repeats a key held
 * down, and ximagesink sends each repeat upstream as a key-release and a
 * key-press navigation event.  xdotool holds W in ximagesink's window for
 * 2 s (the server's auto-repeat starts after 660 ms, 25 a second), then taps
 * J as a marker: every W event came before J's release.  The navigation
 * events reach lingbotcontrolsrc as in lingbotgen's pipelines (sent on to
 * its src pad), and an appsink takes its records:
 * - key-repeat-window at its default: one press and one release of W;
 * - key-repeat-window=0: what X sent, a press and a release per repeat
 *   (more than one of each), which shows that the first case folded real
 *   repeats.
 * Without Xvfb, xdotool or ximagesink the program skips (77).
 */
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <glib-unix.h>
#include <gio/gio.h>
#include <gst/check/gstcheck.h>
#include <gst/app/gstappsink.h>
#include <gst/video/navigation.h>

#include "gst/gstlingbotcontrolsrc.h"
#include "lingbot/control.h"

static GSubprocess *xvfb;

/* in Xvfb's child before exec: it dies with this program, also when an
 * assertion aborts it before the SIGTERM at the end */
static void
die_with_parent (gpointer user_data)
{
  prctl (PR_SET_PDEATHSIG, SIGTERM);
}

/* Starts Xvfb on the display it finds free and points DISPLAY at it */
static gboolean
start_xvfb (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (GSubprocessLauncher) l = NULL;
  char buf[32] = { 0 };
  gsize got = 0;
  int fds[2];

  if (!g_unix_open_pipe (fds, FD_CLOEXEC, &err))
    g_error ("pipe: %s", err->message);
  l = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_SILENCE |
      G_SUBPROCESS_FLAGS_STDERR_SILENCE);
  g_subprocess_launcher_take_fd (l, fds[1], 3);
  g_subprocess_launcher_set_child_setup (l, die_with_parent, NULL, NULL);
  xvfb = g_subprocess_launcher_spawn (l, &err, "Xvfb", "-displayfd", "3",
      "-screen", "0", "320x240x24", "-nolisten", "tcp", NULL);
  g_clear_object (&l);          /* closes our copy of the write end */
  if (xvfb == NULL) {
    g_printerr ("Xvfb: %s\n", err->message);
    close (fds[0]);
    return FALSE;
  }
  /* Xvfb writes the display number and a newline once it accepts clients */
  while (got < sizeof (buf) - 1 && strchr (buf, '\n') == NULL) {
    ssize_t n = read (fds[0], buf + got, sizeof (buf) - 1 - got);

    if (n <= 0)
      break;
    got += (gsize) n;
  }
  close (fds[0]);
  if (strchr (buf, '\n') == NULL) {
    g_printerr ("Xvfb did not say its display\n");
    return FALSE;
  }
  *strchr (buf, '\n') = '\0';
  {
    g_autofree char *display = g_strdup_printf (":%s", buf);

    g_setenv ("DISPLAY", display, TRUE);
  }
  return TRUE;
}

static void
xdotool (const char *args)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *cmd = g_strdup_printf ("xdotool %s", args);
  int status = 0;

  g_assert_true (g_spawn_command_line_sync (cmd, NULL, NULL, &status, &err));
  g_assert_no_error (err);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
}

/* the video sink's navigation events, sent on to the control source as
 * lingbotgen sends them on to its control pad's peer */
static GstPadProbeReturn
forward_navigation (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  GstEvent *ev = GST_PAD_PROBE_INFO_EVENT (info);

  if (GST_EVENT_TYPE (ev) == GST_EVENT_NAVIGATION)
    gst_pad_send_event (GST_PAD (user_data), gst_event_ref (ev));
  return GST_PAD_PROBE_OK;
}

typedef struct
{
  guint presses, releases;      /* of W */
  guint w_held_after;           /* the held set after W's last record */
  gboolean marker;              /* J's release seen */
  guint others;                 /* records of other keys than W and J */
} Counts;

/* Holds W for 2 s in ximagesink's window, then taps J; counts the control
 * records until J's release */
static Counts
hold_w (guint64 window)
{
  g_autofree char *desc = g_strdup_printf ("videotestsrc is-live=true "
      "pattern=black ! video/x-raw,width=160,height=120,framerate=25/1 ! "
      "identity name=tap ! ximagesink sync=false "
      "lingbotcontrolsrc name=ctl is-live=true key-repeat-window=%"
      G_GUINT64_FORMAT " ! appsink name=records sync=false", window);
  g_autoptr (GError) err = NULL;
  GstElement *pipe = gst_parse_launch (desc, &err);
  GstElement *tap, *ctl, *records;
  GstPad *tap_src, *ctl_src;
  gint64 deadline;
  Counts c = { 0 };

  g_assert_no_error (err);
  tap = gst_bin_get_by_name (GST_BIN (pipe), "tap");
  ctl = gst_bin_get_by_name (GST_BIN (pipe), "ctl");
  records = gst_bin_get_by_name (GST_BIN (pipe), "records");
  tap_src = gst_element_get_static_pad (tap, "src");
  ctl_src = gst_element_get_static_pad (ctl, "src");
  gst_pad_add_probe (tap_src, GST_PAD_PROBE_TYPE_EVENT_UPSTREAM,
      forward_navigation, ctl_src, NULL);
  g_assert_cmpint (gst_element_set_state (pipe, GST_STATE_PLAYING), !=,
      GST_STATE_CHANGE_FAILURE);

  /* the sink's window (the one with a name: the program's), once mapped,
   * gets the keyboard */
  xdotool ("search --sync --onlyvisible --name . windowfocus --sync "
      "mousemove --window %1 10 10");
  xdotool ("keydown w");
  g_usleep (2 * G_USEC_PER_SEC);
  xdotool ("keyup w");
  xdotool ("key j");

  deadline = g_get_monotonic_time () + 30 * G_TIME_SPAN_SECOND;
  while (!c.marker) {
    GstSample *s = gst_app_sink_try_pull_sample (GST_APP_SINK (records),
        100 * GST_MSECOND);
    GstLingbotControlRecord rec;

    g_assert_cmpint (g_get_monotonic_time (), <, deadline);
    if (s == NULL)
      continue;
    g_assert_cmpuint (gst_buffer_extract (gst_sample_get_buffer (s), 0, &rec,
            sizeof (rec)), ==, sizeof (rec));
    gst_sample_unref (s);
    if (rec.keys == LINGBOT_KEY_W) {
      if (rec.type == GST_LINGBOT_CONTROL_PRESS)
        c.presses++;
      else if (rec.type == GST_LINGBOT_CONTROL_RELEASE)
        c.releases++;
      c.w_held_after = rec.held;
    } else if (rec.keys == LINGBOT_KEY_J) {
      c.marker = rec.type == GST_LINGBOT_CONTROL_RELEASE;
    } else {
      c.others++;
    }
  }
  g_print ("key-repeat-window %" G_GUINT64_FORMAT " ns: W pressed %u, "
      "released %u times\n", window, c.presses, c.releases);
  g_assert_cmpint (gst_element_set_state (pipe, GST_STATE_NULL), ==,
      GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (tap_src);
  gst_object_unref (ctl_src);
  gst_object_unref (tap);
  gst_object_unref (ctl);
  gst_object_unref (records);
  gst_object_unref (pipe);
  return c;
}

GST_START_TEST (test_held_key_folded)
{
  Counts c = hold_w (30 * GST_MSECOND);

  g_assert_cmpuint (c.presses, ==, 1);
  g_assert_cmpuint (c.releases, ==, 1);
  g_assert_cmphex (c.w_held_after, ==, 0);
  g_assert_cmpuint (c.others, ==, 0);
}

GST_END_TEST;

GST_START_TEST (test_held_key_unfolded)
{
  Counts c = hold_w (0);

  /* X repeated the key: a release and a press per repeat */
  g_assert_cmpuint (c.presses, >, 1);
  g_assert_cmpuint (c.releases, ==, c.presses);
  g_assert_cmphex (c.w_held_after, ==, 0);
  g_assert_cmpuint (c.others, ==, 0);
}

GST_END_TEST;

static Suite *
x_keys_suite (void)
{
  Suite *s = suite_create ("lingbot-x-keys");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 120);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_held_key_folded);
  tcase_add_test (tc, test_held_key_unfolded);
  return s;
}

int
main (int argc, char **argv)
{
  g_autoptr (GstElementFactory) xsink = NULL;
  const char *need[] = { "Xvfb", "xdotool" };
  int ret;

  gst_check_init (&argc, &argv);
  for (guint i = 0; i < G_N_ELEMENTS (need); i++) {
    g_autofree char *path = g_find_program_in_path (need[i]);

    if (path == NULL) {
      g_print ("SKIP: %s is not installed (tools/deps.sh)\n", need[i]);
      return 77;
    }
  }
  xsink = gst_element_factory_find ("ximagesink");
  if (xsink == NULL) {
    g_print ("SKIP: no ximagesink (gstreamer1.0-x, tools/deps.sh)\n");
    return 77;
  }
  if (!start_xvfb ())
    return 1;
  ret = gst_check_run_suite (x_keys_suite (), "lingbot-x-keys", __FILE__);
  g_subprocess_send_signal (xvfb, SIGTERM);
  g_subprocess_wait (xvfb, NULL, NULL);
  g_clear_object (&xvfb);
  return ret;
}

/* lingbot-gst: stopping and ending: PLAYING -> NULL mid-chunk and within a DiT
 * pass, EOS by event and by Ctrl-C, no leak on a stop
 * (test `gst-stop`, suites gst, elements, pipeline)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The fixture and the pipeline runner: test-gst-common.c.
 */
#include "test-gst-common.h"

/* PLAYING -> NULL while chunks are being generated returns promptly, and
 * the same pipeline then runs again exactly as the first time */
GST_START_TEST (test_stop_restart)
{
  g_autofree char *g1 = gen_desc ("lingbotgen", "cpu:1", NULL);
  g_autofree char *d1 = g_strdup_printf ("lingbotcontrolsrc location=%s ! "
      "%s ! lingbotvaedec ! appsink name=sink sync=false", trace_path, g1);
  g_autofree char *g2 = gen_desc ("lingbotgen", "cpu:1", "frames=0");
  g_autofree char *d2 = g_strdup_printf ("%s ! lingbotvaedec ! fakesink "
      "sync=false", g2);
  Run first, r;
  GstElement *p;
  GstBus *bus;
  GstMessage *msg;
  gint64 t0;
  guint64 index = 0;

  /* unbounded, no control: always inside a chunk; stop after chunk 1 */
  p = pipeline_new (d2, &r);
  bus = gst_element_get_bus (p);
  gst_element_set_state (p, GST_STATE_PLAYING);
  while (index < 1) {
    msg = gst_bus_timed_pop_filtered (bus, 60 * GST_SECOND,
        GST_MESSAGE_ELEMENT | GST_MESSAGE_ERROR);
    g_assert_nonnull (msg);
    g_assert_cmpint (GST_MESSAGE_TYPE (msg), ==, GST_MESSAGE_ELEMENT);
    if (gst_structure_has_name (gst_message_get_structure (msg),
            "lingbot-chunk"))
      gst_structure_get_uint64 (gst_message_get_structure (msg), "index",
          &index);
    gst_message_unref (msg);
  }
  g_usleep (20 * 1000);
  t0 = g_get_monotonic_time ();
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_NULL), ==,
      GST_STATE_CHANGE_SUCCESS);
  GST_INFO ("PLAYING -> NULL mid-chunk: %.3f s",
      (g_get_monotonic_time () - t0) / 1e6);
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 5 * G_USEC_PER_SEC);
  gst_object_unref (bus);
  gst_object_unref (p);
  run_clear (&r);

  /* the trace pipeline: a full run, one stopped after chunk 0, a rerun */
  p = pipeline_new (d1, &r);
  pipeline_run (p, &r);
  check_run (&r);
  first = r;
  memset (&r, 0, sizeof (r));
  run_reset (&r);
  {
    GstAppSinkCallbacks cb = { 0 };
    GstElement *sink = gst_bin_get_by_name (GST_BIN (p), "sink");
    cb.new_sample = on_sample;
    gst_app_sink_set_callbacks (GST_APP_SINK (sink), &cb, &r, NULL);
    gst_object_unref (sink);
  }
  bus = gst_element_get_bus (p);
  gst_element_set_state (p, GST_STATE_PLAYING);
  msg = gst_bus_timed_pop_filtered (bus, 60 * GST_SECOND,
      GST_MESSAGE_ELEMENT | GST_MESSAGE_ERROR);
  g_assert_nonnull (msg);
  g_assert_cmpint (GST_MESSAGE_TYPE (msg), ==, GST_MESSAGE_ELEMENT);
  gst_message_unref (msg);
  t0 = g_get_monotonic_time ();
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_NULL), ==,
      GST_STATE_CHANGE_SUCCESS);
  g_assert_cmpint (g_get_monotonic_time () - t0, <, 5 * G_USEC_PER_SEC);
  gst_bus_set_flushing (bus, TRUE);
  gst_bus_set_flushing (bus, FALSE);
  gst_object_unref (bus);

  run_reset (&r);
  pipeline_run (p, &r);
  check_run (&r);
  check_summary (&r);
  g_assert_cmpint (max_diff (&first, &r), ==, 0);
  gst_object_unref (p);
  run_clear (&first);
  run_clear (&r);
}

GST_END_TEST;

/* gst-launch-1.0 -e and Ctrl-C on an unbounded session without a control
 * source: the chunk in flight is finished and pushed, then EOS (no chunk
 * is started after the EOS reached lingbotgen: its INFO log says how many
 * chunks were out then), and the mp4 holds every frame that was decoded */
GST_START_TEST (test_eos_sigint)
{
  GstElementFactory *f = gst_element_factory_find ("x264enc");
  g_autofree char *launch = g_find_program_in_path ("gst-launch-1.0");
  g_autofree char *out = g_build_filename (tmpdir, "sigint.mp4", NULL);
  g_autofree char *log = g_build_filename (tmpdir, "sigint.log", NULL);
  g_autofree char *log_text = NULL;
  g_auto (GStrv) envp = g_get_environ ();
  const char *said;
  guint64 out_at_eos;
  g_autofree char *g1 = NULL, *cmd = NULL, *desc = NULL;
  g_auto (GStrv) argv = NULL;
  g_autoptr (GError) err = NULL;
  g_autoptr (GIOChannel) ch = NULL;
  GPid pid;
  int fd_out = -1, status = 0;
  guint decoded = 0, chunks = 0, generated = 0;
  gboolean signalled = FALSE;
  char *line = NULL;
  Run r;

  if (f == NULL || launch == NULL) {
    GST_INFO ("x264enc or gst-launch-1.0 missing: skipped");
    gst_clear_object (&f);
    return;
  }
  gst_object_unref (f);
  g1 = gen_desc ("lingbotgen", "cpu:1", "frames=0");
  /* --foreground: the Ctrl-C reaches gst-launch-1.0 once (a timeout of its
   * own process group would send it again to the group, and the second
   * kills gst-launch-1.0, whose handler is one-shot) */
  cmd = g_strdup_printf ("timeout --foreground 120 gst-launch-1.0 -e -m %s "
      "! lingbotvaedec "
      "! videoconvert ! x264enc speed-preset=ultrafast tune=zerolatency ! "
      "h264parse ! mp4mux ! filesink location=%s", g1, out);
  g_assert_true (g_shell_parse_argv (cmd, NULL, &argv, &err));
  envp = g_environ_setenv (envp, "GST_DEBUG", "lingbotgen:INFO", TRUE);
  envp = g_environ_setenv (envp, "GST_DEBUG_FILE", log, TRUE);
  envp = g_environ_setenv (envp, "GST_DEBUG_NO_COLOR", "1", TRUE);
  g_assert_true (g_spawn_async_with_pipes (NULL, argv, envp,
          G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD |
          G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL, &pid, NULL, &fd_out, NULL,
          &err));
  g_assert_no_error (err);
  ch = g_io_channel_unix_new (fd_out);
  g_io_channel_set_close_on_unref (ch, TRUE);
  while (g_io_channel_read_line (ch, &line, NULL, NULL, NULL) ==
      G_IO_STATUS_NORMAL) {
    const char *fr;

    if (strstr (line, "lingbot-chunk,")
        && (fr = strstr (line, "frames=(int)")) != NULL) {
      chunks++;
      generated += (guint) g_ascii_strtoull (fr + strlen ("frames=(int)"),
          NULL, 10);
      /* Ctrl-C once chunk 0 is out: chunk 1 is being generated */
      if (!signalled) {
        g_assert_cmpint (kill (pid, SIGINT), ==, 0);
        signalled = TRUE;
      }
    }
    if (strstr (line, "lingbot-decode,")
        && (fr = strstr (line, "frames=(int)")) != NULL)
      decoded += (guint) g_ascii_strtoull (fr + strlen ("frames=(int)"),
          NULL, 10);
    g_free (line);
  }
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  g_spawn_close_pid (pid);
  g_assert_true (signalled);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);
  /* nothing was started after the one in flight when the EOS came (most
   * often chunk 1: Ctrl-C once chunk 0 is out; a busy machine may be a
   * chunk later, as CI was once: 3 chunks), and every chunk that was
   * generated was decoded (none dropped) */
  g_assert_true (g_file_get_contents (log, &log_text, NULL, NULL));
  said = strstr (log_text, "EOS sent after ");
  g_assert_nonnull (said);
  out_at_eos = g_ascii_strtoull (said + strlen ("EOS sent after "), NULL, 10);
  g_assert_true (g_str_has_prefix (strchr (said + strlen ("EOS sent after "),
              ' '), " chunks: the stream ends after the chunk in flight"));
  g_assert_cmpuint (chunks, >=, 1);
  g_assert_cmpuint (chunks, >=, out_at_eos);
  g_assert_cmpuint (chunks, <=, out_at_eos + 1);
  g_assert_cmpuint (decoded, ==, generated);

  /* the file is complete: every decoded frame is a sample */
  desc = g_strdup_printf ("filesrc location=%s ! qtdemux ! appsink "
      "name=sink sync=false", out);
  run_to_eos (pipeline_new (desc, &r), &r);
  g_assert_cmpuint (r.samples->len, ==, decoded);
  run_clear (&r);
}

GST_END_TEST;

typedef struct
{
  GstElement *target;
  gint sent;
} EosCtx;

/* at chunk 1's first pass: EOS, as gst-launch-1.0 -e sends it */
static void
on_pass_eos (GstElement * gen, guint64 chunk, int pass, int n_passes,
    gpointer data)
{
  EosCtx *c = data;

  if (chunk == 1 && pass == 0 && g_atomic_int_compare_and_exchange (&c->sent,
          0, 1))
    g_assert_true (gst_element_send_event (c->target, gst_event_new_eos ()));
}

/* send_event (EOS) on the element, and on a pipeline holding lingbotbin,
 * while chunk 1 is generated: that chunk is finished and pushed, then EOS
 * (the session is unbounded: without the EOS it would go on) */
GST_START_TEST (test_eos_event)
{
  for (guint b = 0; b < 2; b++) {
    g_autofree char *g1 = gen_desc (b ? "lingbotbin name=gen" :
        "lingbotgen name=gen", "cpu:1", "frames=0 signal-passes=true");
    g_autofree char *desc = g_strdup_printf ("%s %s ! appsink name=sink "
        "sync=false", g1, b ? "" : "! lingbotvaedec");
    Run r;
    GstElement *p = pipeline_new (desc, &r), *gen, *inner;
    EosCtx c = { 0 };

    gen = gst_bin_get_by_name (GST_BIN (p), "gen");
    /* the signal is lingbotgen's: inside the bin, the child that has it */
    inner = NULL;
    if (b) {
      GstIterator *it = gst_bin_iterate_elements (GST_BIN (gen));
      GValue v = G_VALUE_INIT;

      while (gst_iterator_next (it, &v) == GST_ITERATOR_OK) {
        GstElement *e = g_value_get_object (&v);
        if (g_signal_lookup ("pass", G_OBJECT_TYPE (e)))
          inner = gst_object_ref (e);
        g_value_reset (&v);
      }
      g_value_unset (&v);
      gst_iterator_free (it);
      g_assert_nonnull (inner);
    }
    c.target = b ? p : gen;
    g_signal_connect (b ? inner : gen, "pass", G_CALLBACK (on_pass_eos), &c);
    pipeline_run (p, &r);
    g_assert_cmpstr (r.error, ==, NULL);
    g_assert_true (r.eos);
    g_assert_cmpint (g_atomic_int_get (&c.sent), ==, 1);
    g_assert_cmpuint (r.chunk_frames->len, ==, 2);
    g_assert_cmpuint (r.samples->len, ==, 13 + 16);
    gst_clear_object (&inner);
    gst_object_unref (gen);
    gst_object_unref (p);
    run_clear (&r);
  }
}

GST_END_TEST;

typedef struct
{
  GstElement *pipeline;
  GstPad *srcpad;               /* lingbotgen's */
  GThread *stopper;
  GArray *passes;               /* int: chunk * 100 + pass, in order */
  gint stopping;
  gint after;                   /* passes that ended after the stop */
} StopCtx;

static gpointer
stop_thread (gpointer data)
{
  StopCtx *c = data;

  return GINT_TO_POINTER (gst_element_set_state (c->pipeline, GST_STATE_NULL));
}

/* the pass signal: at chunk 1's second pass, PLAYING -> NULL from another
 * thread; the handler returns only once the element has cancelled the
 * session (its task is stopping), so the next pass boundary is the first
 * one after the cancel */
static void
on_pass_stop (GstElement * gen, guint64 chunk, int pass, int n_passes,
    gpointer data)
{
  StopCtx *c = data;
  int v = (int) chunk * 100 + pass;

  g_assert_cmpint (n_passes, ==, 5);
  if (g_atomic_int_get (&c->stopping)) {
    g_atomic_int_inc (&c->after);
    return;
  }
  g_array_append_val (c->passes, v);
  if (chunk == 1 && pass == 1) {
    g_atomic_int_set (&c->stopping, 1);
    c->stopper = g_thread_new ("stop", stop_thread, c);
    while (gst_pad_get_task_state (c->srcpad) != GST_TASK_STOPPED)
      g_usleep (1000);
  }
}

/* PLAYING -> NULL stops within a DiT pass: counted passes, not time */
GST_START_TEST (test_stop_within_pass)
{
  g_autofree char *g1 = gen_desc ("lingbotgen name=gen", "cpu:1",
      "frames=0 signal-passes=true");
  g_autofree char *desc = g_strdup_printf ("%s ! lingbotvaedec ! fakesink "
      "sync=false", g1);
  g_autoptr (GError) err = NULL;
  StopCtx c = { 0 };
  GstElement *gen;
  static const int want[] = { 0, 1, 2, 3, 4, 100, 101 };

  c.pipeline = gst_parse_launch (desc, &err);
  g_assert_no_error (err);
  c.passes = g_array_new (FALSE, FALSE, sizeof (int));
  gen = gst_bin_get_by_name (GST_BIN (c.pipeline), "gen");
  c.srcpad = gst_element_get_static_pad (gen, "src");
  g_signal_connect (gen, "pass", G_CALLBACK (on_pass_stop), &c);
  gst_element_set_state (c.pipeline, GST_STATE_PLAYING);
  while (c.stopper == NULL)
    g_usleep (10 * 1000);
  g_assert_cmpint (GPOINTER_TO_INT (g_thread_join (c.stopper)), ==,
      GST_STATE_CHANGE_SUCCESS);
  /* chunk 0's five passes, chunk 1's first two, then nothing */
  g_assert_cmpuint (c.passes->len, ==, G_N_ELEMENTS (want));
  for (guint i = 0; i < c.passes->len; i++)
    g_assert_cmpint (g_array_index (c.passes, int, i), ==, want[i]);
  g_assert_cmpint (g_atomic_int_get (&c.after), ==, 0);

  g_array_unref (c.passes);
  gst_object_unref (c.srcpad);
  gst_object_unref (gen);
  gst_object_unref (c.pipeline);
}

GST_END_TEST;

/* gst-launch-1.0 stopped with Ctrl-C (no -e: straight to NULL) while an
 * unbounded session has chunks in flight (a queue before the decoder): it
 * exits, and the leaks tracer finds every object freed */
GST_START_TEST (test_stop_leaks)
{
  g_autofree char *launch = g_find_program_in_path ("gst-launch-1.0");
  g_autofree char *g1 = NULL, *cmd = NULL, *errout = NULL;
  g_auto (GStrv) argv = NULL;
  g_auto (GStrv) envp = NULL;
  g_autoptr (GError) err = NULL;
  g_autoptr (GIOChannel) ch = NULL;
  GPid pid;
  int fd_out = -1, fd_err = -1, status = 0;
  gboolean signalled = FALSE;
  char *line = NULL;

  if (launch == NULL)
    return;
  g1 = gen_desc ("lingbotgen", "cpu:1", "frames=0");
  /* --foreground: one Ctrl-C, see test_eos_sigint */
  cmd = g_strdup_printf ("timeout --foreground 120 gst-launch-1.0 -m %s "
      "! queue ! " "lingbotvaedec ! fakesink", g1);
  g_assert_true (g_shell_parse_argv (cmd, NULL, &argv, &err));
  envp = g_get_environ ();
  envp = g_environ_setenv (envp, "GST_TRACERS", "leaks", TRUE);
  envp = g_environ_setenv (envp, "GST_DEBUG", "GST_TRACER:7", TRUE);
  envp = g_environ_setenv (envp, "GST_DEBUG_NO_COLOR", "1", TRUE);
  g_assert_true (g_spawn_async_with_pipes (NULL, argv, envp,
          G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL, &pid,
          NULL, &fd_out, &fd_err, &err));
  g_assert_no_error (err);
  ch = g_io_channel_unix_new (fd_out);
  g_io_channel_set_close_on_unref (ch, TRUE);
  while (g_io_channel_read_line (ch, &line, NULL, NULL, NULL) ==
      G_IO_STATUS_NORMAL) {
    /* chunk 1 announced: chunk 0 is being decoded or queued, chunk 1 in a
     * slot */
    if (!signalled && strstr (line, "lingbot-chunk, index=(guint64)1")) {
      g_assert_cmpint (kill (pid, SIGINT), ==, 0);
      signalled = TRUE;
    }
    g_free (line);
  }
  {
    g_autoptr (GIOChannel) ech = g_io_channel_unix_new (fd_err);
    gsize len = 0;
    g_io_channel_set_close_on_unref (ech, TRUE);
    g_io_channel_read_to_end (ech, &errout, &len, NULL);
  }
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  g_spawn_close_pid (pid);
  g_assert_true (signalled);
  if (!WIFEXITED (status))
    g_error ("gst-launch-1.0 ended by signal %d; its stderr ends: %s",
        WTERMSIG (status), errout ? errout + MAX (0, (gssize) strlen (errout)
            - 2000) : "(none)");
  if (WEXITSTATUS (status) == 124)
    g_error ("gst-launch-1.0 hung after Ctrl-C");
  g_assert_nonnull (errout);
  if (strstr (errout, ":: object-alive") != NULL)
    g_error ("leaks after the stop:\n%s", strstr (errout, ":: object-alive"));
}

GST_END_TEST;

static Suite *
lingbot_gst_stop_suite (void)
{
  Suite *s = suite_create ("lingbot-gst");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 120);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_stop_restart);
  tcase_add_test (tc, test_eos_sigint);
  tcase_add_test (tc, test_eos_event);
  tcase_add_test (tc, test_stop_within_pass);
  tcase_add_test (tc, test_stop_leaks);
  return s;
}

int
main (int argc, char **argv)
{
  return test_gst_main (&argc, &argv, lingbot_gst_stop_suite, __FILE__);
}

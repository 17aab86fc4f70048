/* lingbot-gst: lingbotgen with a rank that stops answering (suite gst)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Runs under the test-only LD_PRELOAD shim tests/common/stuck-shim.c
 * (meson.build sets LD_PRELOAD): once armed, rank 1's next lb_cpu_sgemm()
 * never returns, as a stuck kernel, driver call or collective does on a
 * GPU.  The world runs on cpu:2 with LINGBOT_RANK_TIMEOUT_MS=1500 (T).
 * Rank 0 then times out waiting for rank 1 in the DiT's all-to-all (T):
 * the group aborts and the element posts the error at once, at about T,
 * naming rank 0's operation and the rank it waited for
 * (lingbot_session_set_failure_func()).  The group gives rank 1 another T
 * and abandons it (so that a merely slow rank does not break the world):
 * the generate returns at about 2 T, the frames made before are
 * delivered, EOS follows, no second error is posted, and the state
 * changes to NULL return although rank 1 stays stuck for the rest of the
 * process (its world is leaked, not freed under it).  Before the early
 * error, the error came only at 2 T (with the generate); before the
 * abandonment, the element's wait never returned: the error never came
 * and PLAYING -> NULL, and gst-launch-1.0 -e after Ctrl-C, hung for good.
 * Each test bounds its waits itself (a hang fails it with a message, not
 * by the meson timeout).
 *
 * A separate program from test-gst-*.c: its worlds are leaked on purpose and
 * its stuck threads never end, which the leak gate (suite leaks) would
 * flag, and the shim must be preloaded.
 */
#include "test-fixture.h"
#include <dlfcn.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <glib/gstdio.h>
#include <gst/check/gstcheck.h>
#include <gst/app/gstappsink.h>
#include "gst/lingbot/gstlingbotmeta.h"
#include "lingbot/lingbot.h"

#define TIMEOUT_MS 1500
/* the error comes T after rank 1 got stuck, chunk 1's first GEMM, when
 * rank 0's all-to-all gives up on it */
#define STUCK_ERROR "A rank did not answer in time: rank 0: all_to_all_v " \
  "(publish): no progress within 1500 ms (worker group world), waiting " \
  "for rank 1"

static char *tmpdir;
static char *model_dir;
static char *embeds_path;
static char *image_path;
static void (*shim_arm) (const char *thread_name);
static int (*shim_get_n_stuck) (void);

static char *
gen_desc_on (const char *devices)
{
  return g_strdup_printf ("lingbotgen name=gen model-path=%s "
      "prompt-embeds=%s image-location=%s width=64 height=64 frames=0 "
      "devices=%s seed=7", model_dir, embeds_path, image_path, devices);
}

static char *
gen_desc (void)
{
  return gen_desc_on ("cpu:2");
}

typedef struct
{
  GstElement *pipeline;
  const char *stuck_thread;     /* the thread the shim stops after chunk 0 */
  gint chunks;                  /* atomic: buffers lingbotgen pushed */
  gint samples;                 /* atomic: frames at the sink */
  gint eos;                     /* atomic: EOS at the sink */
  GError *error;                /* the first ERROR (atomic pointer) */
  gint64 error_us;              /* when it was posted (monotonic) */
  gint n_errors;                /* atomic: ERROR messages posted */
  LingbotWorld *world;          /* chunk 0's (atomic pointer; a reference) */
  /* what stood when the first ERROR was posted (read once it is popped) */
  gboolean broken_at_error;     /* the world: a rank abandoned */
  gboolean eos_at_error;        /* EOS at the sink */
  int stuck_at_error;           /* threads stuck in the shim */
} Stuck;

/* keeps the first error: a pipeline set to NULL flushes its bus */
static GstBusSyncReply
on_bus_sync (GstBus * bus, GstMessage * msg, gpointer data)
{
  Stuck *st = data;
  GError *err = NULL;
  const gint64 now = g_get_monotonic_time ();

  if (GST_MESSAGE_TYPE (msg) != GST_MESSAGE_ERROR)
    return GST_BUS_PASS;
  g_atomic_int_inc (&st->n_errors);
  gst_message_parse_error (msg, &err, NULL);
  if (g_atomic_pointer_compare_and_exchange (&st->error, NULL, err)) {
    LingbotWorld *w = g_atomic_pointer_get (&st->world);

    st->error_us = now;         /* read once the message is popped */
    st->broken_at_error = w != NULL && lingbot_world_is_broken (w);
    st->eos_at_error = g_atomic_int_get (&st->eos);
    st->stuck_at_error = shim_get_n_stuck ();
  } else
    g_error_free (err);
  return GST_BUS_PASS;
}

/* chunk 0 is out: rank 1's next GEMM (chunk 1's DiT) never returns */
static GstPadProbeReturn
on_chunk (GstPad * pad, GstPadProbeInfo * info, gpointer data)
{
  Stuck *st = data;
  GstLingbotChunkMeta *meta =
      gst_buffer_get_lingbot_chunk_meta (GST_PAD_PROBE_INFO_BUFFER (info));

  if (g_atomic_int_add (&st->chunks, 1) == 0) {
    g_assert_nonnull (meta);
    g_atomic_pointer_set (&st->world, lingbot_world_ref (meta->handle->world));
    shim_arm (st->stuck_thread);
  }
  return GST_PAD_PROBE_OK;
}

static GstFlowReturn
on_sample (GstAppSink * sink, gpointer data)
{
  Stuck *st = data;
  GstSample *s = gst_app_sink_pull_sample (sink);

  gst_sample_unref (s);
  g_atomic_int_inc (&st->samples);
  return GST_FLOW_OK;
}

static void
on_eos (GstAppSink * sink, gpointer data)
{
  Stuck *st = data;
  g_atomic_int_set (&st->eos, 1);
}

static void
stuck_start_on (Stuck * st, const char *devices, const char *stuck_thread)
{
  g_autofree char *g = gen_desc_on (devices);
  g_autofree char *desc = g_strdup_printf ("%s ! lingbotvaedec ! "
      "appsink name=sink sync=false", g);
  g_autoptr (GError) err = NULL;
  GstAppSinkCallbacks cb = { 0 };
  GstElement *gen, *sink;
  GstPad *src;

  memset (st, 0, sizeof *st);
  st->stuck_thread = stuck_thread;
  st->pipeline = gst_parse_launch (desc, &err);
  g_assert_no_error (err);
  {
    GstBus *bus = gst_element_get_bus (st->pipeline);
    gst_bus_set_sync_handler (bus, on_bus_sync, st, NULL);
    gst_object_unref (bus);
  }
  gen = gst_bin_get_by_name (GST_BIN (st->pipeline), "gen");
  src = gst_element_get_static_pad (gen, "src");
  gst_pad_add_probe (src, GST_PAD_PROBE_TYPE_BUFFER, on_chunk, st, NULL);
  gst_object_unref (src);
  gst_object_unref (gen);
  sink = gst_bin_get_by_name (GST_BIN (st->pipeline), "sink");
  cb.new_sample = on_sample;
  cb.eos = on_eos;
  gst_app_sink_set_callbacks (GST_APP_SINK (sink), &cb, st, NULL);
  gst_object_unref (sink);
  g_assert_cmpint (gst_element_set_state (st->pipeline, GST_STATE_PLAYING),
      !=, GST_STATE_CHANGE_FAILURE);
}

static void
stuck_start (Stuck * st)
{
  stuck_start_on (st, "cpu:2", "lb-world-1");
}

/* frees what stuck_start_on() made (the pipeline is in NULL) and disarms
 * the shim */
static void
stuck_clear (Stuck * st)
{
  g_clear_error (&st->error);
  gst_object_unref (st->pipeline);
  g_clear_pointer (&st->world, lingbot_world_unref);
  shim_arm (NULL);
}

/* waits until a thread more than @before is stuck in the shim; returns
 * when it saw it (within 5 ms) */
static gint64
wait_stuck (int before)
{
  const gint64 t0 = g_get_monotonic_time ();

  while (shim_get_n_stuck () == before) {
    if (g_get_monotonic_time () - t0 > 60 * G_USEC_PER_SEC)
      g_error ("the rank never got stuck");
    g_usleep (5 * 1000);
  }
  return g_get_monotonic_time ();
}

typedef struct
{
  GstElement *pipeline;
  GstStateChangeReturn ret;
  gint done;                    /* atomic */
} ToNull;

static gpointer
to_null_thread (gpointer data)
{
  ToNull *t = data;
  t->ret = gst_element_set_state (t->pipeline, GST_STATE_NULL);
  g_atomic_int_set (&t->done, 1);
  return NULL;
}

/* set_state (NULL) on a thread of its own: fails the test when it has not
 * returned within @bound_ms (it would hang); returns how long it took */
static gint64
to_null_bounded (GstElement * pipeline, guint bound_ms)
{
  ToNull t = { pipeline, GST_STATE_CHANGE_FAILURE, 0 };
  const gint64 t0 = g_get_monotonic_time ();
  GThread *th = g_thread_new ("to-null", to_null_thread, &t);

  while (!g_atomic_int_get (&t.done)) {
    if (g_get_monotonic_time () - t0 > bound_ms * (gint64) 1000)
      g_error ("PLAYING -> NULL with a stuck rank: still not returned "
          "after %u ms (hangs)", bound_ms);
    g_usleep (10 * 1000);
  }
  g_thread_join (th);
  g_assert_cmpint (t.ret, ==, GST_STATE_CHANGE_SUCCESS);
  return g_get_monotonic_time () - t0;
}

/* The error at T (when rank 0's all-to-all gives up on rank 1, not 2 T,
 * when the generate returns), naming the all-to-all and rank 1; chunk 0's
 * 13 frames reach the sink, then EOS (at 2 T, once rank 1 is abandoned);
 * no second error; NULL returns at once. */
GST_START_TEST (test_stuck_rank_error)
{
  Stuck st;
  GstBus *bus;
  GstMessage *msg;
  g_autoptr (GError) err = NULL;
  g_autofree char *dbg = NULL;
  const int stuck = shim_get_n_stuck ();
  gint64 t0, stuck_us, dt;

  stuck_start (&st);
  stuck_us = wait_stuck (stuck);
  bus = gst_element_get_bus (st.pipeline);
  msg = gst_bus_timed_pop_filtered (bus, 60 * GST_SECOND,
      GST_MESSAGE_ERROR | GST_MESSAGE_EOS);
  if (msg == NULL)
    g_error ("no error within 60 s of a rank getting stuck (hangs)");
  g_assert_cmpint (GST_MESSAGE_TYPE (msg), ==, GST_MESSAGE_ERROR);
  gst_message_parse_error (msg, &err, &dbg);
  g_assert_error (err, GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED);
  g_assert_cmpstr (err->message, ==, STUCK_ERROR);
  /* the debug text says where the timeout is set (no property sets it) */
  g_assert_true (g_str_has_suffix (dbg, "chunk 1; the rank timeout is the "
          "environment variable LINGBOT_RANK_TIMEOUT_MS (milliseconds, "
          "default 60000)"));
  gst_message_unref (msg);
  gst_object_unref (bus);
  g_assert_cmpint (g_atomic_int_get (&st.chunks), ==, 1);
  /* rank 0 waited T for rank 1 (the message says so) while rank 1 was
   * stuck; the abandonment (and with it the generate's return and EOS)
   * comes T later: the error came before it, not with it.  Asserted on
   * what stood when the error was posted, not on when: that it came
   * between T/2 and 3T/2 after this thread saw rank 1 stuck failed on a
   * process held off the CPUs across rank 0's deadline (2.31 s) */
  dt = st.error_us - stuck_us;
  GST_INFO ("error %" G_GINT64_FORMAT " ms after rank 1 got stuck", dt / 1000);
  g_assert_cmpint (st.stuck_at_error, ==, stuck + 1);
  g_assert_false (st.broken_at_error);
  g_assert_false (st.eos_at_error);

  /* what was made before is delivered: chunk 0 decoded, then EOS */
  t0 = g_get_monotonic_time ();
  while (!g_atomic_int_get (&st.eos)) {
    if (g_get_monotonic_time () - t0 > 30 * G_USEC_PER_SEC)
      g_error ("no EOS at the sink after the error");
    g_usleep (10 * 1000);
  }
  g_assert_cmpint (g_atomic_int_get (&st.samples), ==, 13);
  /* ... once rank 1 was abandoned */
  g_assert_true (lingbot_world_is_broken (st.world));

  /* rank 1 is still stuck: the stop neither waits for it nor frees what
   * it may use */
  g_assert_cmpint (to_null_bounded (st.pipeline, 10 * 1000), <,
      5 * G_USEC_PER_SEC);
  /* the generate's own error (the abandonment) was not posted again */
  g_assert_cmpint (g_atomic_int_get (&st.n_errors), ==, 1);
  stuck_clear (&st);
}

GST_END_TEST;

/* PLAYING -> NULL while rank 1 is stuck, before any error: the stop
 * returns within 2 T of the stall (rank 0's timeout and the grace; the
 * stop's own bound, the group cancelled a timeout after it, comes later)
 * and no error is left behind unreported. */
GST_START_TEST (test_stuck_rank_stop)
{
  Stuck st;
  const int stuck = shim_get_n_stuck ();
  gint64 dt;

  stuck_start (&st);
  /* chunk 1 runs, rank 1 stuck in its first GEMM */
  wait_stuck (stuck);
  dt = to_null_bounded (st.pipeline, 20 * 1000);
  g_assert_cmpint (dt, <, 2 * TIMEOUT_MS * 1000 + 5 * G_USEC_PER_SEC);
  g_assert_cmpint (g_atomic_int_get (&st.chunks), ==, 1);
  /* rank 0's timeout (the early error) or the stop's cancel, whichever
   * came first: never two errors */
  g_assert_cmpint (g_atomic_int_get (&st.n_errors), <=, 1);
  stuck_clear (&st);
}

GST_END_TEST;

/* One rank (cpu:1), stuck in chunk 1: no rank waits for it, so nothing
 * times out by itself.  PLAYING -> NULL cancels the chunk, which would
 * stop at its next boundary; as it does not come, the group is cancelled
 * T after the stop and the rank abandoned T later: the stop returns at
 * about 2 T and the error says so. */
GST_START_TEST (test_stuck_single_rank_stop)
{
  Stuck st;
  const int stuck = shim_get_n_stuck ();
  gint64 dt;

  stuck_start_on (&st, "cpu:1", "lb-world-0");
  wait_stuck (stuck);
  dt = to_null_bounded (st.pipeline, 20 * 1000);
  g_assert_cmpint (dt, >=, 2 * TIMEOUT_MS * 1000);
  g_assert_cmpint (dt, <, 2 * TIMEOUT_MS * 1000 + 5 * G_USEC_PER_SEC);
  g_assert_nonnull (st.error);
  g_assert_cmpstr (st.error->message, ==, "worker group world: rank 0 "
      "stopped answering (still busy 1500 ms after the group aborted; the "
      "group is broken and its threads abandoned)");
  g_assert_cmpint (g_atomic_int_get (&st.n_errors), ==, 1);
  stuck_clear (&st);
}

GST_END_TEST;

/* gst-launch-1.0 -e, Ctrl-C while rank 1 is stuck: it ends (the error
 * naming the rank, then the pipeline set to NULL), instead of waiting for
 * an EOS that never comes.  The shim is armed by a file, created once
 * chunk 0 is announced; Ctrl-C once the shim says rank 1 is stuck. */
GST_START_TEST (test_stuck_rank_launch_sigint)
{
  g_autofree char *launch = g_find_program_in_path ("gst-launch-1.0");
  g_autofree char *g = NULL, *cmd = NULL, *arm = NULL, *out = NULL;
  g_auto (GStrv) argv = NULL;
  g_auto (GStrv) envp = NULL;
  g_autoptr (GError) err = NULL;
  g_autoptr (GIOChannel) ch = NULL;
  GString *all = g_string_new (NULL);
  GPid pid;
  int fd_out = -1, status = 0;
  gboolean armed = FALSE, signalled = FALSE;
  char *line = NULL;

  if (launch == NULL) {
    GST_INFO ("gst-launch-1.0 missing: skipped");
    g_string_free (all, TRUE);
    return;
  }
  arm = g_build_filename (tmpdir, "arm-stuck", NULL);
  g = gen_desc ();
  /* --foreground: one Ctrl-C (see test-gst-stop.c test_eos_sigint); the 60 s
   * are the hang guard (exit status 124) */
  cmd = g_strdup_printf ("sh -c 'exec \"$@\" 2>&1' sh timeout --foreground "
      "60 gst-launch-1.0 -e -m %s ! lingbotvaedec ! fakesink", g);
  g_assert_true (g_shell_parse_argv (cmd, NULL, &argv, &err));
  envp = g_get_environ ();
  envp = g_environ_setenv (envp, "LINGBOT_STUCK_THREAD", "lb-world-1", TRUE);
  envp = g_environ_setenv (envp, "LINGBOT_STUCK_ARM_FILE", arm, TRUE);
  g_assert_true (g_spawn_async_with_pipes (NULL, argv, envp,
          G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL, &pid,
          NULL, &fd_out, NULL, &err));
  g_assert_no_error (err);
  ch = g_io_channel_unix_new (fd_out);
  g_io_channel_set_close_on_unref (ch, TRUE);
  while (g_io_channel_read_line (ch, &line, NULL, NULL, NULL) ==
      G_IO_STATUS_NORMAL) {
    g_string_append (all, line);
    if (!armed && strstr (line, "lingbot-chunk, index=(guint64)0")) {
      g_assert_true (g_file_set_contents (arm, "", 0, NULL));
      armed = TRUE;
    }
    if (!signalled && strstr (line, "lingbot-stuck-shim: thread lb-world-1 "
            "stuck in lb_cpu_sgemm")) {
      g_assert_cmpint (kill (pid, SIGINT), ==, 0);
      signalled = TRUE;
    }
    g_free (line);
  }
  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  g_spawn_close_pid (pid);
  out = g_string_free (all, FALSE);
  if (!armed || !signalled)
    g_error ("gst-launch-1.0: no chunk 0, or no stuck rank:\n%s", out);
  if (!WIFEXITED (status))
    g_error ("gst-launch-1.0 ended by signal %d:\n%s", WTERMSIG (status), out);
  if (WEXITSTATUS (status) == 124)
    g_error ("gst-launch-1.0 -e hung after Ctrl-C with a stuck rank:\n%s", out);
  /* ended by the element's error, the pipeline stopped and freed */
  g_assert_cmpint (WEXITSTATUS (status), ==, 1);
  g_assert_nonnull (strstr (out, STUCK_ERROR));
  g_assert_nonnull (strstr (out, "Freeing pipeline"));
}

GST_END_TEST;

static Suite *
stuck_suite (void)
{
  Suite *s = suite_create ("lingbot-gst-stuck");
  TCase *tc = tcase_create ("general");

  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_stuck_rank_error);
  tcase_add_test (tc, test_stuck_rank_stop);
  tcase_add_test (tc, test_stuck_single_rank_stop);
  tcase_add_test (tc, test_stuck_rank_launch_sigint);
  return s;
}

int
main (int argc, char **argv)
{
  Suite *s;
  int failed;

  shim_arm = (void (*)(const char *)) dlsym (RTLD_DEFAULT,
      "lingbot_stuck_shim_arm");
  shim_get_n_stuck = (int (*)(void)) dlsym (RTLD_DEFAULT,
      "lingbot_stuck_shim_get_n_stuck");
  if (shim_arm == NULL || shim_get_n_stuck == NULL)
    g_error ("run with LD_PRELOAD=lingbot-stuck-shim.so (meson test does)");
  g_setenv ("LINGBOT_RANK_TIMEOUT_MS", G_STRINGIFY (TIMEOUT_MS), TRUE);
  gst_check_init (&argc, &argv);
  tmpdir = lingbot_test_write_fixture ("lingbot-gst-stuck-XXXXXX",
      &model_dir, &embeds_path, &image_path);
  s = stuck_suite ();
  failed = gst_check_run_suite (s, "lingbot-gst-stuck", __FILE__);
  lingbot_test_rm_rf (tmpdir);
  return failed;
}

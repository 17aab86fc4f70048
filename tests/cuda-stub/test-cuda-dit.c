/* lingbot-gst: LingBot DiT sessions on the CUDA backend's host code
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The tiny DiT fixture run by lingbot/dit-session.c on the CUDA module
 * built against the host stubs (test-cuda-backend.c's file comment): the
 * steady chunks' passes captured by the module (cudaStreamBeginCapture,
 * cudaGraphInstantiate) and replayed (cudaGraphLaunch), and run_region()'s
 * fallback when a capture fails with CUDA's own status.  Kernels compute
 * nothing here, so what is compared is what reached the stream: the
 * sequence of launches and copies of a whole session must be the same
 * with graphs as without, whether a pass was replayed, captured or run
 * directly after a failed capture (a failed capture runs nothing), and
 * so must the KV-cache cursors after every chunk.  The bytes of the frames
 * are the emulated device's and the GPU suite's to check
 * (tests/dit/test-dit-device.c, tests/dit/test-dit-cuda.c).
 */
#include "cudart-stub.h"
#include "cudnn-stub.h"
#include "dit-test-util.h"
#include "comm/worker-group.h"
#include "kernels/cuda/cuda-internal.h"
#include "lingbot/dit-session.h"

#include <gmodule.h>
#include <string.h>

LbBackend *lingbot_backend_module_init (GError ** error);

static LingbotCheckpoint *fixture;
static LingbotDit *dit;

/* run_region()'s message when a rank stops capturing */
static GMutex messages_lock;
static GString *messages;

static GLogWriterOutput
writer (GLogLevelFlags level, const GLogField * fields, gsize n_fields,
    gpointer user_data)
{
  for (gsize i = 0; i < n_fields; i++)
    if (strcmp (fields[i].key, "MESSAGE") == 0 && fields[i].length < 0 &&
        strstr (fields[i].value, "graph captures failed")) {
      g_mutex_lock (&messages_lock);
      g_string_append_printf (messages, "%s\n", (const char *) fields[i].value);
      g_mutex_unlock (&messages_lock);
      return G_LOG_WRITER_HANDLED;
    }
  return g_log_writer_default (level, fields, n_fields, user_data);
}

typedef struct
{
  GStrv log;                    /* every launch, copy and memset, in order */
  GArray *cursors;              /* global_end, local_end after each chunk */
  int first_steady;
  CudaStubStats stats;          /* the run's counts */
} Run;

static void
run_clear (Run * r)
{
  g_strfreev (r->log);
  g_array_unref (r->cursors);
}

/* @n_chunks chunks of the fixture on device 0 of the stubbed backend,
 * with graphs or without (the backend's graph_begin hidden, as a backend
 * that cannot capture), @fail captures failing
 * (cuda_stub_fail_captures()). */
static Run run_group (int n_chunks, gboolean graphs, int fail, gboolean solo);

static Run
run (int n_chunks, gboolean graphs, int fail)
{
  return run_group (n_chunks, graphs, fail, FALSE);
}

/* run() on one rank, or with @solo on a solo rank standing in for rank 0
 * of 2 (stream-ordered collectives: the Ulysses exchange overlaps the
 * compute on a communication stream joined by events). */
static Run
run_group (int n_chunks, gboolean graphs, int fail, gboolean solo)
{
  g_autoptr (GError) err = NULL;
  Run r = { NULL, g_array_new (FALSE, FALSE, sizeof (int64_t)), -1, {0}
  };
  LbBackend *be = lingbot_backend_module_init (&err);
  g_assert_no_error (err);
  const __typeof__ (be->graph_begin) graph_begin = be->graph_begin;
  if (!graphs)
    be->graph_begin = NULL;
  cuda_stub_reset ();
  cuda_stub_set_auto_complete (TRUE);
  cuda_stub_fail_captures (fail);
  g_mutex_lock (&messages_lock);
  g_string_truncate (messages, 0);
  g_mutex_unlock (&messages_lock);

  LbWorkerGroupOptions go = { 0, NULL, "cuda-dit-stub" };
  LbWorkerGroup *group = solo ? lb_worker_group_new_solo (be, 0, 2, &go,
      &err) : lb_worker_group_new (be, 1, NULL, &go, &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  const int64_t cap = lingbot_dit_session_get_cache_capacity (ses);
  const int64_t chunk_tokens = 4 * lingbot_dit_session_get_frame_tokens (ses);
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  g_strfreev (cuda_stub_take_log ());   /* the session's set-up */
  for (int c = 0; c < n_chunks; c++) {
    const LbTensor *noise[4], *y, *ctl;
    int64_t global_end, local_end;
    lingbot_dit_session_get_cursors (ses, &global_end, &local_end);
    if (r.first_steady < 0 && local_end == cap &&
        global_end == c * chunk_tokens)
      r.first_steady = c;
    dit_fixture_chunk (fixture, c % 4, noise, &y, &ctl);
    g_assert_true (lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
            &err));
    g_assert_no_error (err);
    lingbot_dit_session_get_cursors (ses, &global_end, &local_end);
    g_array_append_val (r.cursors, global_end);
    g_array_append_val (r.cursors, local_end);
  }
  r.log = cuda_stub_take_log ();
  r.stats = cuda_stub_stats ();
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
  g_assert_cmpint (cuda_stub_stats ().graphs_live, ==, 0);
  g_assert_cmpint (cuda_stub_stats ().execs_live, ==, 0);
  be->graph_begin = graph_begin;
  g_test_message ("%s, %d failing: %u work items, first steady chunk %d",
      graphs ? "graphs" : "no graphs", fail, g_strv_length (r.log),
      r.first_steady);
  return r;
}

static void
assert_same_work (const Run * a, const Run * b)
{
  g_assert_cmpuint (g_strv_length (a->log), >, 0);
  g_assert_cmpuint (g_strv_length (a->log), ==, g_strv_length (b->log));
  for (guint i = 0; a->log[i]; i++)
    if (strcmp (a->log[i], b->log[i]) != 0)
      g_error ("work item %u: %s, expected %s", i, b->log[i], a->log[i]);
  g_assert_cmpuint (a->cursors->len, ==, b->cursors->len);
  g_assert_true (memcmp (a->cursors->data, b->cursors->data,
          a->cursors->len * sizeof (int64_t)) == 0);
  g_assert_cmpint (a->first_steady, ==, b->first_steady);
}

#define N_CHUNKS 9
#define N_PASSES 5              /* 4 steps and the clean pass */

/* Graphs: each pass of the first steady chunk captured once and
 * instantiated, every steady pass replayed, and the stream sees the very
 * work of the session without graphs. */
static void
test_graph_replay (void)
{
  Run eager = run (N_CHUNKS, FALSE, 0);
  Run graphs = run (N_CHUNKS, TRUE, 0);
  g_assert_cmpint (eager.stats.n_captures, ==, 0);
  g_assert_cmpint (graphs.first_steady, >, 0);
  g_assert_cmpint (graphs.first_steady, <, N_CHUNKS - 2);
  g_assert_cmpint (graphs.stats.n_captures, ==, N_PASSES);
  g_assert_cmpint (graphs.stats.n_instantiated, ==, N_PASSES);
  g_assert_cmpint (graphs.stats.n_graph_launches, ==,
      N_PASSES * (N_CHUNKS - graphs.first_steady));
  g_assert_cmpint (graphs.stats.n_captured_launches, >, 0);
  assert_same_work (&eager, &graphs);
  run_clear (&eager);
  run_clear (&graphs);
}

/* One capture fails (CUDA invalidated it): that pass runs directly with
 * its cursors restored, the next chunk captures it again, and nothing
 * else changes; no message. */
static void
test_capture_fails_once (void)
{
  Run eager = run (N_CHUNKS, FALSE, 0);
  Run once = run (N_CHUNKS, TRUE, 1);
  g_assert_cmpint (once.stats.n_captures, ==, N_PASSES + 1);
  g_assert_cmpint (once.stats.n_instantiated, ==, N_PASSES);
  g_assert_cmpint (once.stats.n_graph_launches, ==,
      N_PASSES * (N_CHUNKS - once.first_steady) - 1);
  assert_same_work (&eager, &once);
  g_assert_cmpstr (messages->str, ==, "");
  run_clear (&eager);
  run_clear (&once);
}

/* Every capture fails: after 3 the rank stops trying and says why, with
 * CUDA's status; the session's work is that of one without graphs. */
static void
test_capture_fails_always (void)
{
  Run eager = run (N_CHUNKS, FALSE, 0);
  Run always = run (N_CHUNKS, TRUE, -1);
  g_assert_cmpint (always.stats.n_captures, ==, 3);
  g_assert_cmpint (always.stats.n_instantiated, ==, 0);
  g_assert_cmpint (always.stats.n_graph_launches, ==, 0);
  assert_same_work (&eager, &always);
  g_assert_cmpstr (messages->str, ==, "DiT rank 0: 3 graph captures failed, "
      "passes run directly from now on (last: graph capture: operation "
      "failed due to a previous error during capture "
      "(cudaErrorStreamCaptureInvalidated))\n");
  run_clear (&eager);
  run_clear (&always);
}

/* The Ulysses overlap (a solo rank 0 of 2): the communication stream
 * joins each pass's capture through the compute stream's event and is
 * joined back by its own, as CUDA captures two streams; the session's
 * work is the same with graphs as without. */
static void
test_solo_overlap (void)
{
  Run eager = run_group (N_CHUNKS, FALSE, 0, TRUE);
  Run graphs = run_group (N_CHUNKS, TRUE, 0, TRUE);
  g_assert_cmpint (graphs.stats.n_captures, ==, N_PASSES);
  g_assert_cmpint (graphs.stats.n_instantiated, ==, N_PASSES);
  g_assert_cmpint (graphs.stats.n_capture_joins, ==, N_PASSES);
  g_assert_cmpint (graphs.stats.n_graph_launches, ==,
      N_PASSES * (N_CHUNKS - graphs.first_steady));
  assert_same_work (&eager, &graphs);
  g_assert_cmpstr (messages->str, ==, "");
  run_clear (&eager);
  run_clear (&graphs);
}

int
main (int argc, char **argv)
{
  g_log_set_writer_func (writer, NULL, NULL);
  messages = g_string_new (NULL);
  g_test_init (&argc, &argv, NULL);
  g_setenv ("LINGBOT_CUDNN_LIBRARY", CUDNN_STUB_PATH, TRUE);
  GModule *m = g_module_open (CUDNN_STUB_PATH, G_MODULE_BIND_LAZY |
      G_MODULE_BIND_LOCAL);
  CudnnStubControlFunc control = NULL;
  g_assert_nonnull (m);
  g_assert_true (g_module_symbol (m, "cudnn_stub_control",
          (gpointer *) & control));
  control ()->launch = cuda_stub_launch;

  g_autofree char *path = dit_fixture_path ();
  g_autoptr (GError) err = NULL;
  fixture = lingbot_checkpoint_open (path, &err);
  g_assert_no_error (err);
  dit = lingbot_dit_load_checkpoint (fixture, NULL, LINGBOT_DIT_LOAD_DEFAULT,
      &err);
  g_assert_no_error (err);
  g_test_add_func ("/cuda-dit/graph-replay", test_graph_replay);
  g_test_add_func ("/cuda-dit/capture-fails-once", test_capture_fails_once);
  g_test_add_func ("/cuda-dit/capture-fails-always", test_capture_fails_always);
  g_test_add_func ("/cuda-dit/solo-overlap", test_solo_overlap);
  int rc = g_test_run ();
  lingbot_dit_unref (dit);
  lingbot_checkpoint_unref (fixture);
  g_string_free (messages, TRUE);
  return rc;
}

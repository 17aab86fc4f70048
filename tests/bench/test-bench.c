/* lingbot-gst: `lingbot-bench direct`, `replay` and `--compare` (suite
 * bench)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Runs the bench program ($LINGBOT_BENCH) on a tiny random model written at
 * start-up into a temporary directory (DiT tiny preset with chunk 4, VAE
 * width 8, a prompt-embeds file, a JPEG start image; 64x64 output) and
 * checks the reports' structure and consistency, never their timings.
 */
#include <math.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <string.h>
#include <glib/gstdio.h>
#include <gst/gst.h>
#include <json-glib/json-glib.h>

#include "lingbot/lingbot-private.h"
#include "lingbot/text-encoder.h"

static char *tmpdir;
static char *model_dir;
static char *embeds_path;
static char *image_path;
static char *trace_path;
static const char *bench;

static void
write_fixture (void)
{
  g_autoptr (GError) err = NULL;
  LingbotDitConfig cfg;
  const char *root = g_getenv ("LINGBOT_SOURCE_ROOT");
  g_assert_nonnull (root);
  trace_path =
      g_build_filename (root, "examples", "data", "demo-trace.json", NULL);
  g_assert_true (g_file_test (trace_path, G_FILE_TEST_EXISTS));

  tmpdir = g_dir_make_tmp ("lingbot-bench-XXXXXX", &err);
  g_assert_no_error (err);
  model_dir = g_build_filename (tmpdir, "model", NULL);
  g_autofree char *dit = g_build_filename (model_dir, "transformers", NULL);
  g_assert_cmpint (g_mkdir_with_parents (dit, 0755), ==, 0);
  lingbot_dit_config_init_preset (&cfg, LINGBOT_DIT_PRESET_TINY);
  cfg.chunk_frames = 4;
  g_assert_true (lingbot_dit_write_random (&cfg, dit, 1, LB_DTYPE_BF16, 3,
          &err));
  g_assert_no_error (err);
  g_autofree char *vae = g_build_filename (model_dir,
      "Wan2.1_VAE.safetensors", NULL);
  g_assert_true (lingbot_vae_write_random (vae, 8, 5, &err));
  g_assert_no_error (err);

  g_autoptr (LbTensor) ctx = lb_tensor_new_f32 (2, (int64_t) 16,
      (int64_t) cfg.text_dim);
  for (int64_t i = 0; i < lb_tensor_numel (ctx); i++)
    ((float *) ctx->data)[i] = (float) ((i * 37 % 101) - 50) / 50.0f;
  embeds_path = g_build_filename (tmpdir, "prompt.safetensors", NULL);
  g_assert_true (lingbot_prompt_embeds_save (embeds_path, ctx, "a castle",
          16, &err));
  g_assert_no_error (err);

  image_path = g_build_filename (tmpdir, "start.jpg", NULL);
  g_autofree char *desc = g_strdup_printf ("videotestsrc num-buffers=1 "
      "pattern=smpte ! video/x-raw,width=80,height=48 ! jpegenc ! "
      "filesink location=%s", image_path);
  GstElement *p = gst_parse_launch (desc, &err);
  g_assert_no_error (err);
  gst_element_set_state (p, GST_STATE_PLAYING);
  GstMessage *msg = gst_bus_timed_pop_filtered (GST_ELEMENT_BUS (p),
      10 * GST_SECOND, GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  g_assert_nonnull (msg);
  g_assert_cmpint (GST_MESSAGE_TYPE (msg), ==, GST_MESSAGE_EOS);
  gst_message_unref (msg);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (p);
}

static void
rm_rf (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR)) {
    GDir *d = g_dir_open (path, 0, NULL);
    const char *n;
    while (d && (n = g_dir_read_name (d))) {
      g_autofree char *c = g_build_filename (path, n, NULL);
      rm_rf (c);
    }
    if (d)
      g_dir_close (d);
    g_rmdir (path);
  } else {
    g_unlink (path);
  }
}

/* Runs the bench program with the fixture's common options + @extra
 * (NULL-terminated); returns its stdout, asserts exit 0. */
static char *
run_bench (const char *command, const char *const *extra)
{
  GPtrArray *a = g_ptr_array_new ();
  g_ptr_array_add (a, (gpointer) bench);
  g_ptr_array_add (a, (gpointer) command);
  const char *common[] = { "--model", model_dir, "--image", image_path,
    "--prompt-embeds", embeds_path, "--control-trace", trace_path,
    "--width", "64", "--height", "64", "--quiet"
  };
  for (guint i = 0; i < G_N_ELEMENTS (common); i++)
    g_ptr_array_add (a, (gpointer) common[i]);
  for (guint i = 0; extra[i]; i++)
    g_ptr_array_add (a, (gpointer) extra[i]);
  g_ptr_array_add (a, NULL);
  char *out = NULL, *err_out = NULL;
  int status = 0;
  g_autoptr (GError) err = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) a->pdata, NULL, 0, NULL,
          NULL, &out, &err_out, &status, &err));
  g_assert_no_error (err);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("%s %s failed:\n%s", bench, command, err_out);
  g_free (err_out);
  g_ptr_array_free (a, TRUE);
  return out;
}

static JsonObject *
load_report (const char *path, JsonParser ** parser)
{
  g_autoptr (GError) err = NULL;
  *parser = json_parser_new ();
  g_assert_true (json_parser_load_from_file (*parser, path, &err));
  g_assert_no_error (err);
  JsonNode *root = json_parser_get_root (*parser);
  g_assert_true (JSON_NODE_HOLDS_OBJECT (root));
  return json_node_get_object (root);
}

static void
assert_stats (JsonObject * summary, const char *name)
{
  g_assert_true (json_object_has_member (summary, name));
  JsonObject *s = json_object_get_object_member (summary, name);
  const char *keys[] = { "count", "mean", "min", "p50", "p90", "p95", "p99",
    "max"
  };
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    g_assert_true (json_object_has_member (s, keys[i]));
  double min = json_object_get_double_member (s, "min");
  double p50 = json_object_get_double_member (s, "p50");
  double p90 = json_object_get_double_member (s, "p90");
  double p95 = json_object_get_double_member (s, "p95");
  double p99 = json_object_get_double_member (s, "p99");
  double max = json_object_get_double_member (s, "max");
  double mean = json_object_get_double_member (s, "mean");
  g_assert_cmpfloat (min, <=, p50);
  g_assert_cmpfloat (p50, <=, p90);
  g_assert_cmpfloat (p90, <=, p95);
  g_assert_cmpfloat (p95, <=, p99);
  g_assert_cmpfloat (p99, <=, max);
  g_assert_cmpfloat (mean, >=, min - 1e-12);
  g_assert_cmpfloat (mean, <=, max + 1e-12);
}

/* The checks every report passes; returns the summary. */
static JsonObject *
check_report (JsonObject * rep, const char *bench_name, int frames,
    int n_chunks, const char *engine)
{
  g_assert_cmpstr (json_object_get_string_member (rep, "bench"), ==,
      bench_name);
  JsonObject *cfg = json_object_get_object_member (rep, "config");
  g_assert_nonnull (cfg);
  if (engine)
    g_assert_cmpstr (json_object_get_string_member (cfg, "engine"), ==, engine);
  g_assert_cmpint (json_object_get_int_member (cfg, "frames"), ==, frames);
  g_assert_cmpint (json_object_get_int_member (cfg, "fps"), ==, 16);
  g_assert_cmpint (json_object_get_int_member (cfg, "chunk_frames"), ==, 4);
  g_assert_nonnull (json_object_get_object_member (rep, "machine"));

  JsonArray *chunks = json_object_get_array_member (rep, "chunks");
  g_assert_cmpuint (json_array_get_length (chunks), ==, (guint) n_chunks);
  int total = 0;
  double steady_frames = 0, steady_compute = 0, prev_end = 0;
  for (guint i = 0; i < json_array_get_length (chunks); i++) {
    JsonObject *k = json_array_get_object_element (chunks, i);
    int f = (int) json_object_get_int_member (k, "frames");
    g_assert_cmpint (json_object_get_int_member (k, "index"), ==, i);
    /* 13 frames first, 16 after; the last may be cut */
    if (i + 1 < (guint) n_chunks)
      g_assert_cmpint (f, ==, i == 0 ? 13 : 16);
    total += f;
    double dit = json_object_get_double_member (k, "dit_seconds");
    double vae = json_object_get_double_member (k, "vae_seconds");
    double comp = json_object_get_double_member (k, "compute_seconds");
    double start = json_object_get_double_member (k, "start_s");
    double first = json_object_get_double_member (k, "first_frame_s");
    double end = json_object_get_double_member (k, "end_s");
    g_assert_cmpfloat (dit, >, 0);
    g_assert_cmpfloat (vae, >, 0);
    g_assert_cmpfloat (comp, >=, dit + vae - 1e-9);
    g_assert_cmpfloat (start, >=, 0);
    g_assert_cmpfloat (first, >=, start);
    g_assert_cmpfloat (end, >=, first);
    g_assert_cmpfloat (end, >=, prev_end);
    {
      /* the decode's own interval: as long as vae_seconds */
      double d0 = json_object_get_double_member (k, "decode_start_s");
      double d1 = json_object_get_double_member (k, "decode_end_s");
      g_assert_cmpfloat (d0, >, 0);
      g_assert_cmpfloat (fabs ((d1 - d0) - vae), <, 2e-3);
    }
    g_assert_cmpfloat (fabs (json_object_get_double_member (k,
                "wall_seconds") - (end - start)), <, 1e-6);
    g_assert_cmpfloat (fabs (json_object_get_double_member (k,
                "chunk_compute_fps") - f / comp), <, 1e-6 * f / comp);
    prev_end = end;
    if (i > 0) {
      steady_frames += f;
      steady_compute += comp;
    }
  }
  g_assert_cmpint (total, ==, frames);

  JsonObject *s = json_object_get_object_member (rep, "summary");
  g_assert_nonnull (s);
  g_assert_cmpint (json_object_get_int_member (s, "total_frames"), ==, frames);
  g_assert_cmpint (json_object_get_int_member (s, "frames_at_sink"), ==,
      frames);
  g_assert_cmpint (json_object_get_int_member (s, "total_chunks"), ==,
      n_chunks);
  g_assert_cmpint (json_object_get_int_member (s, "steady_chunks"), ==,
      n_chunks - 1);
  g_assert_cmpint (json_object_get_int_member (s, "steady_frames"), ==,
      (gint64) steady_frames);
  double sc = json_object_get_double_member (s, "steady_compute_seconds");
  g_assert_cmpfloat (fabs (sc - steady_compute), <, 1e-6 * steady_compute);
  double fps = json_object_get_double_member (s,
      "chunk_compute_fps_weighted");
  g_assert_cmpfloat (fps, >, 0);
  g_assert_cmpfloat (fabs (fps - steady_frames / sc), <, 1e-6 * fps);
  assert_stats (s, "chunk_compute_seconds");
  assert_stats (s, "chunk_wall_seconds");
  assert_stats (s, "chunk_period_seconds");
  assert_stats (s, "chunk_compute_fps");
  JsonObject *cs = json_object_get_object_member (s,
      "chunk_compute_seconds");
  g_assert_cmpint (json_object_get_int_member (cs, "count"), ==, n_chunks - 1);
  g_assert_cmpfloat (fabs (json_object_get_double_member (cs, "mean") -
          sc / (n_chunks - 1)), <, 1e-6 * sc);
  JsonObject *k0 = json_array_get_object_element (chunks, 0);
  g_assert_cmpfloat (json_object_get_double_member (s,
          "first_chunk_latency_s"), ==,
      json_object_get_double_member (k0, "first_frame_s"));
  g_assert_cmpfloat (json_object_get_double_member (s, "setup_seconds"), <=,
      json_object_get_double_member (k0, "start_s") + 1e-9);
  g_assert_cmpint (json_object_get_int_member (s, "peak_rss_bytes"), >,
      1 << 20);
  {
    gboolean overlapped = json_object_get_boolean_member (s,
        "decode_overlapped");
    gint64 host = json_object_get_int_member (s, "latent_host_bytes");
    /* the decode's gain is --compare's period_ratio, not a figure of
     * the run alone (test_compare) */
    g_assert_false (json_object_has_member (s, "decode_hidden_fraction"));
    if (overlapped) {
      /* the elements: the latents went through the channel */
      g_assert_cmpint (host, ==, 0);
    } else {
      /* serial: the latents of every chunk went through the host */
      g_assert_cmpint (host, ==, (gint64) n_chunks * 16 * 4 * 8 * 8 * 4);
    }
    g_assert_cmpint (overlapped, ==, json_object_get_boolean_member (cfg,
            "decode_overlap"));
  }
  JsonObject *comm = json_object_get_object_member (s, "comm");
  g_assert_nonnull (comm);
  g_assert_nonnull (json_object_get_string_member (comm, "collectives"));
  JsonObject *ops = json_object_get_object_member (comm, "ops");
  gint64 sum = 0;
  GList *names = json_object_get_members (ops);
  for (GList * l = names; l; l = l->next)
    sum += json_object_get_int_member (json_object_get_object_member (ops,
            l->data), "bytes");
  g_list_free (names);
  g_assert_cmpint (sum, ==, json_object_get_int_member (comm, "bytes_total"));
  return s;
}

static void
test_direct (gconstpointer data)
{
  const char *engine = data;
  g_autofree char *out = g_build_filename (tmpdir, "direct.json", NULL);
  const char *devices = g_str_equal (engine, "gst") ? "cpu:1" : "cpu:2";
  const char *extra[] = { "--frames", "29", "--engine", engine,
    "--devices", devices, "--output", out, NULL
  };
  g_free (run_bench ("direct", extra));
  g_autoptr (JsonParser) parser = NULL;
  JsonObject *rep = load_report (out, &parser);
  JsonObject *s = check_report (rep, "direct", 29, 2, engine);
  /* the elements decode beside the generation; the session engine in
   * series unless --decode-overlap */
  g_assert_cmpint (json_object_get_boolean_member (s, "decode_overlapped"),
      ==, g_str_equal (engine, "gst"));
  JsonObject *comm = json_object_get_object_member (s, "comm");
  JsonObject *a2a = json_object_get_object_member (json_object_get_object_member
      (comm, "ops"), "all_to_all");
  if (g_str_equal (devices, "cpu:2")) {
    /* Ulysses: two ranks swap shards around every self-attention */
    g_assert_cmpint (json_object_get_int_member (a2a, "calls"), >, 0);
    g_assert_cmpint (json_object_get_int_member (a2a, "bytes"), >, 0);
  } else {
    g_assert_cmpint (json_object_get_int_member (comm, "bytes_total"), ==, 0);
  }
  /* the trace's first chunk: W pressed at 0.25 s, before chunk 0 ends */
  JsonObject *k0 = json_array_get_object_element
      (json_object_get_array_member (rep, "chunks"), 0);
  g_assert_cmpstr (json_object_get_string_member (k0, "keys"), ==, "w");
}

/* --decode-overlap: the session engine with the decode on its own worker
 * group in a second thread: the same report, nothing of the latents in host
 * memory */
static void
test_direct_overlap (void)
{
  g_autofree char *out = g_build_filename (tmpdir, "overlap.json", NULL);
  const char *extra[] = { "--frames", "45", "--engine", "session",
    "--devices", "cpu:2", "--decode-overlap", "--output", out, NULL
  };
  g_free (run_bench ("direct", extra));
  g_autoptr (JsonParser) parser = NULL;
  JsonObject *rep = load_report (out, &parser);
  JsonObject *s = check_report (rep, "direct", 45, 3, "session");
  g_assert_true (json_object_get_boolean_member (s, "decode_overlapped"));
  g_assert_cmpint (json_object_get_int_member (s, "latent_host_bytes"), ==, 0);
}

static void
test_replay (void)
{
  g_autofree char *out = g_build_filename (tmpdir, "replay.json", NULL);
  /* 3 s: floor(3*16/4)+1 = 13 -> 12 latents = 3 chunks, 45 frames */
  const char *extra[] = { "--duration", "3", "--output", out, NULL };
  g_free (run_bench ("replay", extra));
  g_autoptr (JsonParser) parser = NULL;
  JsonObject *rep = load_report (out, &parser);
  JsonObject *s = check_report (rep, "replay", 45, 3, NULL);
  JsonObject *cfg = json_object_get_object_member (rep, "config");
  double delay = json_object_get_double_member (cfg, "playout_delay_s");
  g_assert_cmpfloat (delay, ==, 1.0);
  g_assert_cmpfloat (json_object_get_double_member (cfg, "duration_s"), ==,
      3.0);
  JsonArray *chunks = json_object_get_array_member (rep, "chunks");
  double setup = json_object_get_double_member (s, "setup_seconds");
  int frames_before = 0, missed = 0;
  double late_max = 0;
  for (guint i = 0; i < json_array_get_length (chunks); i++) {
    JsonObject *k = json_array_get_object_element (chunks, i);
    double req = json_object_get_double_member (k, "request_s");
    double due = json_object_get_double_member (k, "due_s");
    double late = json_object_get_double_member (k, "late_s");
    g_assert_cmpfloat (fabs (req - (setup + frames_before / 16.0)), <, 1e-9);
    g_assert_cmpfloat (fabs (due - (req + delay)), <, 1e-9);
    g_assert_cmpfloat (fabs (late - (json_object_get_double_member (k,
                    "first_frame_s") - due)), <, 1e-9);
    g_assert_true (json_object_get_boolean_member (k, "missed") == (late > 0));
    if (late > 0) {
      missed++;
      late_max = MAX (late_max, late);
    }
    frames_before += (int) json_object_get_int_member (k, "frames");
  }
  JsonObject *d = json_object_get_object_member (s, "deadlines");
  g_assert_nonnull (d);
  g_assert_cmpint (json_object_get_int_member (d, "chunks"), ==, 3);
  g_assert_cmpint (json_object_get_int_member (d, "missed_chunks"), ==, missed);
  g_assert_cmpfloat (fabs (json_object_get_double_member (d,
              "late_seconds_max") - late_max), <, 1e-9);
  g_assert_cmpfloat (json_object_get_double_member (d, "slack_seconds_min"),
      >=, 0);
  /* real time: the last chunk cannot start before its request time */
  JsonObject *last = json_array_get_object_element (chunks, 2);
  g_assert_cmpfloat (json_object_get_double_member (last, "end_s"), >=,
      json_object_get_double_member (last, "request_s") - 0.05);
}

/* the second arm of test_compare: a quote and a backslash, which the
 * JSON lines escape (the prompt is unused: the runs take prompt-embeds) */
#define COMPARE_B "devices=cpu:2 prompt=a\"quoted\\prompt"

/* --compare: per pair the steady compute FPS ratio b / a and the chunk
 * period ratio period_a / period_b (run.sh's decode figure, serial over
 * overlapped), each period the mean chunk period of that run's report in
 * --output; the medians of both */
static void
test_compare (void)
{
  g_autofree char *path = g_build_filename (tmpdir, "compare.json", NULL);
  const char *extra[] = { "--frames", "29", "--engine", "session",
    "--rounds", "2", "--output", path, "--compare", "devices=cpu:1",
    COMPARE_B, NULL
  };
  g_autofree char *out = run_bench ("direct", extra);
  g_autoptr (JsonParser) rp = NULL;
  JsonObject *rep = load_report (path, &rp);
  g_assert_cmpstr (json_object_get_string_member (rep, "bench"), ==, "compare");
  JsonArray *runs = json_object_get_array_member (rep, "runs");
  JsonArray *rounds = json_object_get_array_member (rep, "rounds");
  g_assert_cmpuint (json_array_get_length (runs), ==, 4);
  g_assert_cmpuint (json_array_get_length (rounds), ==, 2);
  g_auto (GStrv) lines = g_strsplit (g_strstrip (out), "\n", -1);
  g_assert_cmpuint (g_strv_length (lines), ==, 3);
  double pr[2] = { 0, 0 };
  for (int i = 0; i < 3; i++) {
    g_autoptr (JsonParser) p = json_parser_new ();
    g_autoptr (GError) err = NULL;
    g_assert_true (json_parser_load_from_data (p, lines[i], -1, &err));
    JsonObject *o = json_node_get_object (json_parser_get_root (p));
    if (i < 2) {
      g_assert_cmpint (json_object_get_int_member (o, "round"), ==, i);
      double a = json_object_get_double_member (o, "a");
      double b = json_object_get_double_member (o, "b");
      double r = json_object_get_double_member (o, "ratio");
      g_assert_cmpfloat (a, >, 0);
      g_assert_cmpfloat (b, >, 0);
      g_assert_cmpfloat (fabs (r - b / a), <, 1e-3 * r + 1e-4);
      /* the periods are the two runs' chunk_period_seconds means (2
       * chunks: one period each) */
      double per[2];
      for (int arm = 0; arm < 2; arm++) {
        JsonObject *run = json_array_get_object_element (runs, 2 * i + arm);
        JsonObject *cps = json_object_get_object_member
            (json_object_get_object_member (run, "summary"),
            "chunk_period_seconds");
        g_assert_cmpint (json_object_get_int_member (cps, "count"), ==, 1);
        per[arm] = json_object_get_double_member (cps, "mean");
        g_assert_cmpfloat (per[arm], >, 0);
      }
      double pa = json_object_get_double_member (o, "period_a");
      double pb = json_object_get_double_member (o, "period_b");
      pr[i] = json_object_get_double_member (o, "period_ratio");
      g_assert_cmpfloat (fabs (pa - per[0]), <, 1e-6 + 1e-5 * per[0]);
      g_assert_cmpfloat (fabs (pb - per[1]), <, 1e-6 + 1e-5 * per[1]);
      g_assert_cmpfloat (pr[i], >, 0);
      g_assert_cmpfloat (fabs (pr[i] - per[0] / per[1]), <, 1e-3 * pr[i]);
      JsonObject *ro = json_array_get_object_element (rounds, i);
      g_assert_cmpfloat (json_object_get_double_member (ro, "period_ratio"),
          ==, per[0] / per[1]);
    } else {
      g_assert_cmpstr (json_object_get_string_member (o, "a"), ==,
          "devices=cpu:1");
      g_assert_cmpstr (json_object_get_string_member (o, "b"), ==, COMPARE_B);
      g_assert_cmpint (json_object_get_int_member (o, "rounds"), ==, 2);
      g_assert_cmpfloat (json_object_get_double_member (o, "median_ratio"),
          >, 0);
      /* the median of two: their mean */
      double m = json_object_get_double_member (o, "median_period_ratio");
      g_assert_cmpfloat (fabs (m - (pr[0] + pr[1]) / 2), <, 2e-4 + 1e-3 * m);
    }
  }
}

/* ---- lingbot-bench dit / vae options (no fixture: random models) ---- */

/* Runs the bench program with @args (NULL-terminated); returns its exit
 * status and its stdout and stderr in @out and @err_out. */
static int
spawn_bench (const char *const *args, char **out, char **err_out)
{
  GPtrArray *a = g_ptr_array_new ();
  g_ptr_array_add (a, (gpointer) bench);
  for (guint i = 0; args[i]; i++)
    g_ptr_array_add (a, (gpointer) args[i]);
  g_ptr_array_add (a, NULL);
  int status = 0;
  g_autoptr (GError) err = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) a->pdata, NULL, 0, NULL,
          NULL, out, err_out, &status, &err));
  g_assert_no_error (err);
  g_ptr_array_free (a, TRUE);
  g_assert_true (WIFEXITED (status));
  return WEXITSTATUS (status);
}

/* The JSON lines of @out; every line must parse as an object. */
static GPtrArray *
json_lines (const char *out, GPtrArray * parsers)
{
  GPtrArray *objs = g_ptr_array_new ();
  g_auto (GStrv) lines = g_strsplit (out, "\n", -1);
  for (guint i = 0; lines[i]; i++) {
    if (*lines[i] == '\0')
      continue;
    JsonParser *p = json_parser_new ();
    g_autoptr (GError) err = NULL;
    if (!json_parser_load_from_data (p, lines[i], -1, &err))
      g_error ("not JSON: %s (%s)", lines[i], err->message);
    g_assert_true (JSON_NODE_HOLDS_OBJECT (json_parser_get_root (p)));
    g_ptr_array_add (parsers, p);
    g_ptr_array_add (objs, json_node_get_object (json_parser_get_root (p)));
  }
  return objs;
}

/* The lines of @objs whose "event" is @event. */
static GPtrArray *
events (GPtrArray * objs, const char *event)
{
  GPtrArray *r = g_ptr_array_new ();
  for (guint i = 0; i < objs->len; i++)
    if (g_str_equal (json_object_get_string_member (objs->pdata[i],
                "event"), event))
      g_ptr_array_add (r, objs->pdata[i]);
  return r;
}

static void
test_dit_precision (void)
{
  g_autofree char *out = NULL, *err_out = NULL;
  const char *args[] = { "dit", "--chunks", "2", "--precision", "bf16",
    "--json", NULL
  };
  g_assert_cmpint (spawn_bench (args, &out, &err_out), ==, 0);
  g_assert_cmpstr (err_out, ==, "lingbot-bench dit: --precision bf16 is "
      "ignored on CPU ranks (the CPU backend computes in float32)\n");
  g_autoptr (GPtrArray) ps = g_ptr_array_new_with_free_func (g_object_unref);
  g_autoptr (GPtrArray) objs = json_lines (out, ps);
  g_autoptr (GPtrArray) sum = events (objs, "summary");
  g_assert_cmpuint (sum->len, ==, 1);
  JsonObject *s = sum->pdata[0];
  g_assert_cmpstr (json_object_get_string_member (s, "precision"), ==, "bf16");
  g_assert_false (json_object_get_boolean_member (s, "precision_applied"));
  g_assert_cmpstr (json_object_get_string_member (s, "backend"), ==, "cpu");
  /* no peak on the CPU unless given: MFU is null */
  JsonObject *st = json_object_get_object_member (s, "steady");
  g_assert_cmpint (json_object_get_int_member (st, "chunks"), ==, 1);
  g_assert_true (json_object_get_null_member (st, "mfu"));
  g_assert_true (json_object_get_null_member (s, "peak_tflops_per_device"));

  g_clear_pointer (&out, g_free);
  g_clear_pointer (&err_out, g_free);
  const char *bad[] = { "dit", "--precision", "fp16", NULL };
  g_assert_cmpint (spawn_bench (bad, &out, &err_out), ==, 2);
  g_assert_cmpstr (err_out, ==, "lingbot-bench dit: --precision wants fp32, "
      "bf16 or fp8, not fp16\n");
}

/* Keys per layer of each chunk line of a tiny run (latent 16x24: T_f 96,
 * chunks of 2 frames, window 6 frames = 576 keys). */
static void
check_keys (gboolean full, const int64_t * want, int n)
{
  g_autofree char *out = NULL, *err_out = NULL;
  const char *args[] = { "dit", "--chunks", "3", "--json",
    full ? "--window-full" : NULL, NULL
  };
  g_assert_cmpint (spawn_bench (args, &out, &err_out), ==, 0);
  g_autoptr (GPtrArray) ps = g_ptr_array_new_with_free_func (g_object_unref);
  g_autoptr (GPtrArray) objs = json_lines (out, ps);
  g_autoptr (GPtrArray) setup = events (objs, "setup");
  g_autoptr (GPtrArray) chunks = events (objs, "chunk");
  g_assert_cmpuint (setup->len, ==, 1);
  g_assert_cmpuint (chunks->len, ==, (guint) n);
  JsonObject *su = setup->pdata[0];
  g_assert_cmpint (json_object_get_int_member (su, "window_keys"), ==, 576);
  g_assert_true (json_object_get_boolean_member (su, "window_full") == full);
  JsonArray *cur = json_object_get_array_member (su, "cursors");
  g_assert_cmpint (json_array_get_int_element (cur, 1), ==, full ? 576 : 0);
  g_assert_cmpint (json_array_get_int_element (cur, 0), ==, full ? 576 : 0);
  g_assert_cmpint (json_object_get_int_member (su, "next_chunk"), ==,
      full ? 3 : 0);
  for (int i = 0; i < n; i++) {
    JsonObject *c = chunks->pdata[i];
    g_assert_cmpint (json_object_get_int_member (c, "chunk"), ==, i);
    g_assert_cmpint (json_object_get_int_member (c, "index"), ==,
        (full ? 3 : 0) + i);
    g_assert_cmpint (json_object_get_int_member (c, "keys"), ==, want[i]);
    g_assert_cmpuint (json_array_get_length (json_object_get_array_member (c,
                "passes")), ==, 5);
  }
}

static void
test_dit_window_full (void)
{
  /* from empty: 2, 4, 6 frames of keys; full: 6 frames from the start */
  const int64_t grow[] = { 192, 384, 576 }, full[] = { 576, 576, 576 };
  check_keys (FALSE, grow, 3);
  check_keys (TRUE, full, 3);
}

static void
test_dit_mfu (void)
{
  g_autofree char *out = NULL, *err_out = NULL;
  const char *args[] = { "dit", "--chunks", "3", "--peak-tflops", "0.01",
    "--json", NULL
  };
  g_assert_cmpint (spawn_bench (args, &out, &err_out), ==, 0);
  g_autoptr (GPtrArray) ps = g_ptr_array_new_with_free_func (g_object_unref);
  g_autoptr (GPtrArray) objs = json_lines (out, ps);
  g_autoptr (GPtrArray) chunks = events (objs, "chunk");
  g_autoptr (GPtrArray) sum = events (objs, "summary");
  g_assert_cmpuint (chunks->len, ==, 3);
  g_assert_cmpuint (sum->len, ==, 1);
  for (guint i = 0; i < chunks->len; i++) {
    JsonObject *c = chunks->pdata[i];
    double s = json_object_get_double_member (c, "compute_s");
    double tflop = json_object_get_double_member (c, "tflop");
    double tflops = json_object_get_double_member (c, "tflops");
    double mfu = json_object_get_double_member (c, "mfu");
    g_assert_cmpfloat (fabs (tflops - tflop / s), <=, 2e-5 * tflops);
    g_assert_cmpfloat (fabs (mfu - tflops / 0.01), <=, 2e-5 * mfu);
    /* a pass's MFU is its TFLOP/s over the peak too */
    JsonArray *passes = json_object_get_array_member (c, "passes");
    g_assert_cmpuint (json_array_get_length (passes), ==, 5);
    for (guint p = 0; p < 5; p++) {
      JsonObject *po = json_array_get_object_element (passes, p);
      double pt = json_object_get_double_member (po, "tflops");
      double pm = json_object_get_double_member (po, "mfu");
      g_assert_cmpfloat (fabs (pm - pt / 0.01), <=, 2e-5 * pm);
    }
  }
  JsonObject *s = sum->pdata[0];
  JsonObject *st = json_object_get_object_member (s, "steady");
  double tflops = json_object_get_double_member (st, "tflops");
  double mfu = json_object_get_double_member (st, "mfu");
  g_assert_cmpfloat (json_object_get_double_member (s,
          "peak_tflops_per_device"), ==, 0.01);
  g_assert_cmpfloat (fabs (mfu - tflops / 0.01), <=, 2e-5 * mfu);
  /* the reference's count has the camera path in every pass: more FLOPs
   * in the same time */
  double tref = json_object_get_double_member (st, "tflops_reference");
  double mref = json_object_get_double_member (st, "mfu_reference");
  g_assert_cmpfloat (tref, >, tflops);
  g_assert_cmpfloat (fabs (mref - tref / 0.01), <=, 2e-5 * mref);
  g_assert_cmpuint (json_array_get_length (json_object_get_array_member (st,
              "pass_mfu")), ==, 5);
  /* the 14B check rides along in every summary */
  JsonObject *sc = json_object_get_object_member (s, "spec_14b_480p");
  g_assert_cmpfloat (fabs (json_object_get_double_member (sc, "tflop") -
          1529.9), <, 0.05);
  g_assert_cmpfloat (json_object_get_double_member (sc, "spec_tflop"), ==,
      1529.9);

  /* text mode prints the MFU */
  g_clear_pointer (&out, g_free);
  g_clear_pointer (&err_out, g_free);
  const char *text[] = { "dit", "--chunks", "2", "--peak-tflops", "0.01",
    NULL
  };
  g_assert_cmpint (spawn_bench (text, &out, &err_out), ==, 0);
  g_assert_nonnull (strstr (out, "; MFU "));
  g_assert_nonnull (strstr (out, "of 0.01 TFLOP/s x 1 device(s)"));
}

static void
test_dit_estimate (void)
{
  g_autofree char *out = NULL, *err_out = NULL;
  const char *args[] = { "dit", "--preset", "14b", "--latent", "60x104",
    "--text-len", "512", "--estimate", "--json", NULL
  };
  g_assert_cmpint (spawn_bench (args, &out, &err_out), ==, 0);
  g_autoptr (GPtrArray) ps = g_ptr_array_new_with_free_func (g_object_unref);
  g_autoptr (GPtrArray) objs = json_lines (out, ps);
  g_assert_cmpuint (objs->len, ==, 1);
  JsonObject *e = objs->pdata[0];
  g_assert_cmpstr (json_object_get_string_member (e, "event"), ==, "estimate");
  g_assert_cmpint (json_object_get_int_member (e, "window_keys"), ==, 28080);
  JsonObject *f = json_object_get_object_member (e, "flops");
  g_assert_cmpfloat (fabs (json_object_get_double_member (f, "chunk") /
          1529.9e12 - 1), <, 0.01);
  g_assert_cmpfloat (fabs (json_object_get_double_member (f,
              "chunk_reference") / 1742.3e12 - 1), <, 0.01);
  JsonObject *m = json_object_get_object_member (json_object_get_object_member
      (e, "memory_per_rank"), "f32_weights");
  g_assert_cmpfloat (fabs (json_object_get_int_member (m, "total") / 1e9 -
          132.7), <, 0.05);
  g_assert_cmpint (json_object_get_int_member (e, "host_weight_bytes"), ==,
      4 * json_object_get_int_member (e, "params"));
  /* the three precisions' rows: bf16 72.6 GB, fp8 54.1 GB (1 byte per
   * weight, bf16 KV cache), what tests/gpu/run.sh gates its steps on */
  JsonObject *mpr = json_object_get_object_member (e, "memory_per_rank");
  JsonObject *m16 = json_object_get_object_member (mpr, "bf16_weights");
  JsonObject *m8 = json_object_get_object_member (mpr, "fp8_weights");
  g_assert_nonnull (m8);
  g_assert_cmpfloat (fabs (json_object_get_int_member (m16, "total") / 1e9 -
          72.6), <, 0.05);
  g_assert_cmpfloat (fabs (json_object_get_int_member (m8, "total") / 1e9 -
          54.1), <, 0.05);
  g_assert_cmpint (json_object_get_int_member (m8, "weights"), ==,
      json_object_get_int_member (e, "params"));
  g_assert_cmpint (json_object_get_int_member (m8, "kv_cache"), ==,
      json_object_get_int_member (m16, "kv_cache"));
}

/* One `lingbot-bench dit ... --json` run: its setup, summary and
 * (with --rank-of) rank_of lines. */
typedef struct
{
  GPtrArray *parsers, *objs;
  JsonObject *setup, *summary, *rank_of;
} DitRun;

static void
dit_run (DitRun * r, const char *const *args)
{
  g_autofree char *out = NULL, *err_out = NULL;
  g_assert_cmpint (spawn_bench (args, &out, &err_out), ==, 0);
  r->parsers = g_ptr_array_new_with_free_func (g_object_unref);
  r->objs = json_lines (out, r->parsers);
  g_autoptr (GPtrArray) su = events (r->objs, "setup");
  g_autoptr (GPtrArray) sm = events (r->objs, "summary");
  g_autoptr (GPtrArray) ro = events (r->objs, "rank_of");
  g_assert_cmpuint (su->len, ==, 1);
  g_assert_cmpuint (sm->len, ==, 1);
  r->setup = su->pdata[0];
  r->summary = sm->pdata[0];
  r->rank_of = ro->len ? ro->pdata[0] : NULL;
}

static void
dit_run_clear (DitRun * r)
{
  g_ptr_array_unref (r->objs);
  g_ptr_array_unref (r->parsers);
}

/* rank 0's counts of @op: in chunk 0 (@set "ops") or the run ("ops_run") */
static JsonObject *
comm_ops (DitRun * r, const char *set, const char *op)
{
  JsonObject *c = json_object_get_object_member (r->summary, "comm");
  return json_object_get_object_member (json_object_get_object_member (c,
          set), op);
}

static JsonObject *
comm_op (DitRun * r, const char *op)
{
  return comm_ops (r, "ops", op);
}

static gint64
member_int (JsonObject * o, const char *a, const char *b)
{
  return json_object_get_int_member (json_object_get_object_member (o, a), b);
}

/* --rank-of N on cpu:1 against a real cpu:N run of the same shape: rank
 * 0's shard and every collective byte it counts are the same; the
 * projection's terms are what they say.  Latent 18x24 has 9 token rows,
 * so the bands are uneven (5, 4 over 2 ranks; 3, 2, 2, 2 over 4). */
static void
check_rank_of (const char *n, const char *const *shape, gint64 a2a,
    gint64 ag, int out_groups)
{
  g_autofree char *devices = g_strdup_printf ("cpu:%s", n);
  const char *solo[16] = { "dit", "--rank-of", n, "--chunks", "2",
    "--json"
  };
  const char *real[16] = { "dit", "--devices", devices, "--chunks", "2",
    "--json"
  };
  for (int i = 0; shape[i]; i++)
    solo[6 + i] = real[6 + i] = shape[i];
  DitRun s, r;
  dit_run (&s, solo);
  dit_run (&r, real);
  g_assert_cmpstr (json_object_get_string_member (s.setup, "collectives"),
      ==, "solo");
  g_assert_cmpstr (json_object_get_string_member (r.setup, "collectives"),
      ==, "local");
  g_assert_cmpint (json_object_get_int_member (s.setup, "ranks"), ==, 1);
  g_assert_cmpint (json_object_get_int_member (s.setup, "world_ranks"), ==,
      atoi (n));
  /* the same shard: band, tokens, heads, KV cache */
  JsonObject *s0 = json_object_get_object_member (s.setup, "rank0");
  JsonObject *r0 = json_object_get_object_member (r.setup, "rank0");
  const char *keys[] = { "tokens", "heads", "kv_cache_bytes" };
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++)
    g_assert_cmpint (json_object_get_int_member (s0, keys[i]), ==,
        json_object_get_int_member (r0, keys[i]));
  for (guint i = 0; i < 2; i++)
    g_assert_cmpint (json_array_get_int_element
        (json_object_get_array_member (s0, "band_rows"), i), ==,
        json_array_get_int_element (json_object_get_array_member (r0,
                "band_rows"), i));
  /* the same calls and bytes of every kind, for rank 0 */
  const char *ops[] = { "all_to_all", "all_gather", "reduce_scatter",
    "all_reduce", "broadcast", "send_recv", "barrier"
  };
  const char *what[] = { "calls", "bytes", "sent", "link" };
  const char *sets[] = { "ops", "ops_run" };
  for (guint j = 0; j < G_N_ELEMENTS (sets); j++)
    for (guint i = 0; i < G_N_ELEMENTS (ops); i++)
      for (guint k = 0; k < G_N_ELEMENTS (what); k++)
        g_assert_cmpint (json_object_get_int_member (comm_ops (&s, sets[j],
                    ops[i]), what[k]), ==, json_object_get_int_member
            (comm_ops (&r, sets[j], ops[i]), what[k]));
  /* ... and the values the shapes give, per chunk and over 2 chunks (no
   * graph replay on the CPU) */
  g_assert_cmpint (json_object_get_int_member (comm_op (&s, "all_to_all"),
          "bytes"), ==, a2a);
  g_assert_cmpint (json_object_get_int_member (comm_op (&s, "all_gather"),
          "bytes"), ==, ag);
  g_assert_cmpint (json_object_get_int_member (comm_ops (&s, "ops_run",
              "all_to_all"), "bytes"), ==, 2 * a2a);
  g_assert_cmpint (json_object_get_int_member (comm_op (&s, "all_to_all"),
          "calls"), ==, 5 * 2 * (3 + out_groups));
  g_assert_cmpint (json_object_get_int_member (comm_op (&s, "barrier"),
          "calls"), ==, 0);

  JsonObject *ro = s.rank_of;
  g_assert_nonnull (ro);
  g_assert_null (r.rank_of);
  g_assert_cmpint (json_object_get_int_member (ro, "ranks"), ==, atoi (n));
  g_assert_cmpint (member_int (ro, "all_to_all", "bytes_per_chunk"), ==, a2a);
  g_assert_cmpint (member_int (ro, "all_to_all", "q") + member_int (ro,
          "all_to_all", "k") + member_int (ro, "all_to_all", "v") +
      member_int (ro, "all_to_all", "out"), ==, a2a);
  g_assert_cmpint (member_int (ro, "all_gather", "bytes_per_chunk"), ==, ag);
  /* the solo collectives really moved what was counted */
  g_assert_cmpint (json_object_get_int_member (ro, "moved_bytes"), ==,
      2 * (a2a + ag));
  g_assert_cmpint (json_object_get_int_member (ro, "out_groups"), ==,
      out_groups);
  g_assert_true (json_object_get_boolean_member (ro, "overlap"));
  /* each term: exchange at 450 GB/s, exposed = q + out / G + all-gather,
   * period = rank 0's steady chunk + exposed, fps = 8 frames / period */
  const double bw = 450e9;
  JsonObject *t = json_object_get_object_member (ro, "exchange_terms_s");
  const double q = json_object_get_double_member (t, "q");
  const double out = json_object_get_double_member (t, "out");
  const double gat = json_object_get_double_member (t, "all_gather");
  const double link = json_object_get_int_member (ro,
      "link_bytes_per_chunk");
  const double ex = json_object_get_double_member (ro, "exchange_s");
  const double exposed = json_object_get_double_member (ro, "exposed_s");
  const double chunk = json_object_get_double_member (ro, "chunk_s");
  const double period = json_object_get_double_member (ro, "period_s");
  g_assert_cmpint ((gint64) link, ==, json_object_get_int_member (comm_op
          (&s, "all_to_all"), "link") + json_object_get_int_member (comm_op
          (&s, "all_gather"), "link"));
  g_assert_cmpfloat (fabs (ex - link / bw), <=, 1e-5 * ex);
  g_assert_cmpfloat (fabs (exposed - (q + out / out_groups + gat)), <=,
      1e-5 * exposed);
  g_assert_cmpfloat (fabs (json_object_get_int_member (ro,
              "exposed_bytes_per_chunk") / bw - exposed), <=, 1e-5 * exposed);
  g_assert_cmpfloat (exposed, <, ex);
  /* (the summary prints mean_s to 5 decimals) */
  g_assert_cmpfloat (fabs (chunk - json_object_get_double_member
          (json_object_get_object_member (s.summary, "steady"), "mean_s")),
      <=, 5.1e-6);
  g_assert_cmpfloat (fabs (period - (chunk + exposed)), <=, 1e-5 * period);
  g_assert_cmpint (json_object_get_int_member (ro, "frames"), ==, 8);
  g_assert_cmpfloat (fabs (json_object_get_double_member (ro, "fps") -
          8 / period), <=, 1e-5 * 8 / period);
  dit_run_clear (&s);
  dit_run_clear (&r);
}

static void
test_dit_rank_of (void)
{
  /* tiny: 2 heads of 32, 2 layers, 5 passes, chunks of 2 frames; token
   * grid 9 x 12.  Rank 0 of 2 holds rows 0..4 (120 tokens) and 1 head: per
   * layer-pass it receives 96 tokens x 32 floats of q, k, v (12288 bytes
   * each) and 120 x 32 of the output (15360), per pass 96 tokens x 64
   * floats of the head output (24576) */
  const char *tiny[] = { "--latent", "18x24", NULL };
  check_rank_of ("2", tiny, 10 * (3 * 12288 + 15360), 5 * 24576, 1);
  /* 4 heads of 32 over 4 ranks: bands 3, 2, 2, 2 rows (72, 48, 48, 48
   * tokens); rank 0 receives 144 x 32 floats of q, k, v (18432 bytes)
   * and 3 x 72 x 32 of the output (27648) per layer-pass, 144 x 64 of the
   * head output (36864) per pass */
  const char *four[] = { "--latent", "18x24", "--heads", "4", "--dim",
    "128", NULL
  };
  check_rank_of ("4", four, 10 * (3 * 18432 + 27648), 5 * 36864, 1);

  /* the text report prints every term; --link-gbps scales the exchange */
  g_autofree char *out = NULL, *err_out = NULL;
  const char *text[] = { "dit", "--rank-of", "2", "--chunks", "2",
    "--link-gbps", "100", NULL
  };
  g_assert_cmpint (spawn_bench (text, &out, &err_out), ==, 0);
  g_assert_nonnull (strstr (out, "rank 0 of 2 (one rank standing in): "
          "token rows 0..3 of 8 (96 tokens per chunk), 1 of 2 heads"));
  g_assert_nonnull (strstr (out, "exchange at 100 GB/s per direction"));
  g_assert_nonnull (strstr (out, "exposed: "));
  g_assert_nonnull (strstr (out, "projected 2-GPU chunk: "));
}

/* each command's --help names the command in its usage line; direct and
 * replay say how they differ and what a --compare CONFIG is */
/* lingbot-bench live on the tiny model (64 fps, 3 s, a key change every
 * second, a 0.5 s stall after 0.5 s): the report's structure and internal
 * consistency, no timing: every frame generated reaches the synchronised
 * sink (rendered or dropped), no more than were due, the key presses
 * found in the chunks' revisions, the stall in its chunk's compute and
 * latency */
static void
test_live (void)
{
  g_autofree char *out = g_build_filename (tmpdir, "live.json", NULL);
  const char *args[] = { "live", "--model", model_dir, "--image", image_path,
    "--prompt-embeds", embeds_path, "--width", "64", "--height", "64",
    "--devices", "cpu:1", "--fps", "64", "--duration", "3", "--key-interval",
    "1", "--stall", "0.5", "--stall-at", "0.5", "--output", out, NULL
  };
  g_autofree char *sout = NULL, *serr = NULL;
  g_autoptr (JsonParser) parser = NULL;
  JsonObject *rep, *k2s, *stall;
  JsonArray *chunks, *lat;
  gint64 frames = 0, stalled;
  guint n;
  guint64 rev = 0;

  if (spawn_bench (args, &sout, &serr) != 0)
    g_error ("lingbot-bench live failed:\n%s", serr);
  rep = load_report (out, &parser);
  g_assert_cmpstr (json_object_get_string_member (rep, "command"), ==, "live");
  chunks = json_object_get_array_member (rep, "per-chunk");
  n = json_array_get_length (chunks);
  g_assert_cmpuint (n, >=, 2);
  g_assert_cmpint (json_object_get_int_member (rep, "chunks"), ==, n);
  for (guint i = 0; i < n; i++) {
    JsonObject *c = json_array_get_object_element (chunks, i);
    guint64 r = (guint64) json_object_get_int_member (c, "revision");

    g_assert_cmpint (json_object_get_int_member (c, "index"), ==, i);
    g_assert_cmpuint (r, >=, MAX (rev, 1));
    rev = r;
    frames += json_object_get_int_member (c, "frames");
    g_assert_cmpfloat (json_object_get_double_member (c, "latency"), >, 0);
  }
  /* every frame made is rendered, dropped by the sink, or dropped by
   * lingbotvaedec for a key cut (the chunk on screen ended early) */
  g_assert_cmpint (json_object_get_int_member (rep, "frames-rendered") +
      json_object_get_int_member (rep, "frames-dropped") +
      json_object_get_int_member (rep, "frames-cut"), ==, frames);
  g_assert_cmpint (json_object_get_int_member (rep, "key-cut"), ==, 1);
  {
    gint64 cuts = 0;

    for (guint i = 0; i < n; i++)
      cuts += json_object_get_boolean_member (json_array_get_object_element
          (chunks, i), "cut");
    g_assert_cmpint (json_object_get_int_member (rep, "key-cuts"), ==, cuts);
    /* frames are cut only where a chunk was */
    if (cuts == 0)
      g_assert_cmpint (json_object_get_int_member (rep, "frames-cut"), ==, 0);
  }
  /* key restarts: the element's default policy, counted per chunk */
  g_assert_cmpint (json_object_get_int_member (rep, "key-restart"), ==, -1);
  g_assert_cmpint (json_object_get_int_member (rep, "key-restart-max"), ==, 1);
  {
    gint64 restarts = 0, passes = 0;

    for (guint i = 0; i < n; i++) {
      JsonObject *c = json_array_get_object_element (chunks, i);
      gint64 r = json_object_get_int_member (c, "restarts");

      g_assert_cmpint (r, >=, 0);
      /* at most one that throws passes away, one free before pass 0 */
      g_assert_cmpint (r, <=, 2);
      restarts += r;
      passes += json_object_get_int_member (c, "restart-passes");
    }
    g_assert_cmpint (json_object_get_int_member (rep, "restarts"), ==,
        restarts);
    g_assert_cmpint (json_object_get_int_member (rep, "restart-passes"), ==,
        passes);
    g_assert_true (json_object_has_member (rep,
            "key-to-screen-p90-over-unrestarted-compute-decode"));
    g_assert_true (json_object_has_member (rep,
            "key-to-screen-over-own-compute-decode"));
  }
  /* due: the span from the first frame to the last at the rate; a key
   * cut stamps a chunk back into the one before (the frames it replaced
   * are in frames-cut, give or take one for the cut chunk's own grid) */
  g_assert_cmpint (json_object_get_int_member (rep, "frames-due") +
      json_object_get_int_member (rep, "frames-cut") +
      json_object_get_int_member (rep, "key-cuts"), >=, frames);
  k2s = json_object_get_object_member (rep, "key-to-screen-seconds");
  g_assert_cmpint (json_object_get_int_member (k2s, "n"), >=, 1);
  g_assert_cmpint (json_object_get_int_member (k2s, "n"), <=, 4);
  g_assert_cmpfloat (json_object_get_double_member (k2s, "p50"), >, 0);
  g_assert_cmpfloat (json_object_get_double_member (k2s, "p50"), <=,
      json_object_get_double_member (k2s, "p90"));
  g_assert_cmpfloat (json_object_get_double_member (k2s, "p90"), <=,
      json_object_get_double_member (k2s, "max"));
  g_assert_cmpfloat (json_object_get_double_member (rep, "eos-wait-seconds"),
      >=, 0);
  lat = json_object_get_array_member (rep, "pipeline-latency");
  g_assert_cmpuint (json_array_get_length (lat), >=, 1);
  stall = json_object_get_object_member (rep, "stall");
  stalled = json_object_get_int_member (stall, "chunk");
  g_assert_cmpint (stalled, >=, 0);
  g_assert_cmpint (stalled, <, n);
  g_assert_cmpfloat (json_object_get_double_member
      (json_array_get_object_element (chunks, (guint) stalled),
          "compute-seconds"), >=, 0.5);
  g_assert_cmpfloat (json_object_get_double_member (stall,
          "latency-at-stall"), >=, 0.5);
}

static void
test_help (void)
{
  const char *commands[] = { "gemm", "ops", "comm", "dit", "vae", "direct",
    "replay", "live"
  };
  g_autofree char *direct = NULL, *replay = NULL;
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++) {
    const char *args[] = { commands[i], "--help", NULL };
    g_autofree char *out = NULL, *err_out = NULL;
    g_assert_cmpint (spawn_bench (args, &out, &err_out), ==, 0);
    g_autofree char *want = g_strdup_printf ("Usage:\n  lingbot-bench %s "
        "[OPTION", commands[i]);
    if (!g_str_has_prefix (out, want))
      g_error ("lingbot-bench %s --help:\n%s", commands[i], out);
    if (g_str_equal (commands[i], "direct"))
      direct = g_steal_pointer (&out);
    else if (g_str_equal (commands[i], "replay"))
      replay = g_steal_pointer (&out);
  }
  g_assert_nonnull (strstr (direct, "Runs as fast as it can"));
  g_assert_nonnull (strstr (replay, "Runs in real time"));
  g_assert_nonnull (strstr (direct, "A CONFIG is whitespace-separated "
          "option=value overrides of the command line"));
  g_assert_nonnull (strstr (replay, "A CONFIG is whitespace-separated "
          "option=value overrides of the command line"));
}

static void
test_dit_rank_of_invalid (void)
{
  struct
  {
    const char *args[10];
    const char *message;
  } cases[] = {
    {{"dit", "--rank-of", "0", NULL},
        "lingbot-bench dit: --rank-of wants 2 or more ranks, not 0\n"},
    {{"dit", "--rank-of", "3", NULL},
        "lingbot-bench dit: --rank-of 3 does not divide the 2 attention "
        "heads (each Ulysses rank holds heads / N)\n"},
    {{"dit", "--rank-of", "4", NULL},
        "lingbot-bench dit: --rank-of 4 does not divide the 2 attention "
        "heads (each Ulysses rank holds heads / N)\n"},
    {{"dit", "--rank-of", "2", "--devices", "cpu:2", NULL},
        "lingbot-bench dit: --rank-of runs on one rank (--devices cpu:1 or "
        "one GPU ordinal), not cpu:2\n"},
    /* refused before 74 GB of random weights are made */
    {{"dit", "--preset", "14b", "--rank-of", "3", NULL},
        "lingbot-bench dit: --rank-of 3 does not divide the 40 attention "
        "heads (each Ulysses rank holds heads / N)\n"},
    {{"dit", "--rank-of", "2", "--link-gbps", "0", NULL},
        "lingbot-bench dit: --link-gbps must be positive\n"},
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autofree char *out = NULL, *err_out = NULL;
    g_assert_cmpint (spawn_bench (cases[i].args, &out, &err_out), ==, 2);
    g_assert_cmpstr (err_out, ==, cases[i].message);
    g_assert_cmpstr (out, ==, "");
  }
}

static void
test_vae_devices (void)
{
  g_autofree char *out = NULL, *err_out = NULL;
  const char *args[] = { "vae", "--devices", "cpu:2", "--dim", "4",
    "--latent", "6x8", "--chunk-latents", "2", "--chunks", "2",
    "--dit-chunk-s", "1", "--json", NULL
  };
  g_assert_cmpint (spawn_bench (args, &out, &err_out), ==, 0);
  g_autoptr (GPtrArray) ps = g_ptr_array_new_with_free_func (g_object_unref);
  g_autoptr (GPtrArray) objs = json_lines (out, ps);
  g_assert_cmpuint (objs->len, ==, 1);
  JsonObject *v = objs->pdata[0];
  g_assert_cmpstr (json_object_get_string_member (v, "backend"), ==, "cpu");
  g_assert_cmpstr (json_object_get_string_member (v, "devices"), ==, "cpu:2");
  g_assert_cmpfloat (json_object_get_double_member (v, "dit_chunk_s"), ==, 1.0);
  JsonArray *runs = json_object_get_array_member (v, "runs");
  g_assert_cmpuint (json_array_get_length (runs), ==, 1);
  JsonObject *r = json_array_get_object_element (runs, 0);
  g_assert_cmpint (json_object_get_int_member (r, "ranks"), ==, 2);
  /* two height bands exchange halo rows */
  g_assert_cmpint (json_object_get_int_member (r, "halo_bytes_per_chunk"),
      >, 0);
  double s = json_object_get_double_member (r, "steady_chunk_s");
  g_assert_cmpfloat (s, >, 0);
  g_assert_cmpfloat (fabs (json_object_get_double_member (r,
              "decode_share") - s / (s + 1)), <, 1e-4);

  g_clear_pointer (&out, g_free);
  g_clear_pointer (&err_out, g_free);
  const char *both[] = { "vae", "--devices", "cpu:2", "--ranks", "1", NULL };
  g_assert_cmpint (spawn_bench (both, &out, &err_out), ==, 2);
  g_assert_cmpstr (err_out, ==, "lingbot-bench vae: give --ranks (CPU rank "
      "counts) or --devices (one set of ranks), not both\n");
}

/* an --output the report cannot be written to is refused while the
 * options are read (exit 2), not after a run whose figures it then loses
 * (it was: exit 1 "Failed to create file" once every chunk had run) */
static void
test_output_unwritable (void)
{
  const char *commands[] = { "direct", "replay", "live" };
  g_autofree char *missing = g_build_filename (tmpdir, "no-such-dir",
      "report.json", NULL);
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++) {
    const char *const targets[] = { missing, tmpdir };
    const char *const reasons[] = { "its directory does not exist",
      "is a directory"
    };
    for (guint j = 0; j < G_N_ELEMENTS (targets); j++) {
      const char *args[] = { commands[i], "--model", model_dir, "--image",
        image_path, "--prompt-embeds", embeds_path, "--control-trace",
        trace_path, "--width", "64", "--height", "64", "--output",
        targets[j], NULL
      };
      /* live has no --control-trace: it steers by itself */
      if (g_str_equal (commands[i], "live")) {
        args[7] = "--duration";
        args[8] = "2";
      }
      g_autofree char *out = NULL, *err_out = NULL;
      g_autofree char *want = g_strdup_printf ("lingbot-bench %s: --output "
          "%s: %s\n", commands[i], targets[j], reasons[j]);
      g_assert_cmpint (spawn_bench (args, &out, &err_out), ==, 2);
      g_assert_cmpstr (err_out, ==, want);
      g_assert_cmpstr (out, ==, "");
    }
  }
}

int
main (int argc, char **argv)
{
  gst_init (&argc, &argv);
  g_test_init (&argc, &argv, NULL);
  bench = g_getenv ("LINGBOT_BENCH");
  if (bench == NULL) {
    g_printerr ("LINGBOT_BENCH is not set\n");
    return 77;
  }
  write_fixture ();
  g_test_add_data_func ("/bench/direct/gst", "gst", test_direct);
  g_test_add_data_func ("/bench/direct/session", "session", test_direct);
  g_test_add_func ("/bench/direct/overlap", test_direct_overlap);
  g_test_add_func ("/bench/replay", test_replay);
  g_test_add_func ("/bench/live", test_live);
  g_test_add_func ("/bench/compare", test_compare);
  g_test_add_func ("/bench/dit/precision", test_dit_precision);
  g_test_add_func ("/bench/dit/window-full", test_dit_window_full);
  g_test_add_func ("/bench/dit/mfu", test_dit_mfu);
  g_test_add_func ("/bench/dit/estimate", test_dit_estimate);
  g_test_add_func ("/bench/dit/rank-of", test_dit_rank_of);
  g_test_add_func ("/bench/dit/rank-of/invalid", test_dit_rank_of_invalid);
  g_test_add_func ("/bench/help", test_help);
  g_test_add_func ("/bench/output-unwritable", test_output_unwritable);
  g_test_add_func ("/bench/vae/devices", test_vae_devices);
  int rc = g_test_run ();
  rm_rf (tmpdir);
  return rc;
}

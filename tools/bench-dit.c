/* lingbot-gst: `lingbot-bench dit`: streamed DiT chunks (4 denoising passes
 * + the clean pass each) on a worker group, with the chunk metrics of
 * DESIGN.md 6
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-bench dit [--model DIR | --preset tiny|1.3b|14b [--dim N
 *       --layers N --heads N --ffn N --text-dim N]] [--devices cpu:N]
 *       [--latent HxW] [--chunks K] [--text-len L] [--seed S] [--json]
 *
 * Without --model the weights are random (lingbot_dit_new_random()).  The
 * first chunk is the warm-up; "steady" statistics are over chunks >= 1.
 * FLOPs count the GEMMs and attention products this implementation runs
 * (camera injection once per chunk, text K/V once per session).
 */
#include "tools/bench-dit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lingbot/backend.h"
#include "lingbot/dit-session.h"
#include "lingbot/noise.h"

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static double
percentile (const double *sorted, int n, double p)
{
  if (n <= 0)
    return 0.0;
  double pos = p * (n - 1);
  int i = (int) pos;
  double f = pos - i;
  return i + 1 < n ? sorted[i] * (1 - f) + sorted[i + 1] * f : sorted[i];
}

/* FLOPs of one chunk as this implementation computes it. */
/* Pass timing: the session calls back on rank 0 after each of the
 * n_steps denoising passes and the clean pass; a pass lasts from the
 * previous mark (the chunk start for the first) to its callback. */
typedef struct
{
  gint64 mark;
  int n;
  double secs[LINGBOT_DIT_MAX_STEPS + 1];
} PassTimes;

static void
on_pass (LingbotDitSession * session, int64_t chunk, int step,
    const LbTensor * x_in, const LbTensor * pred, const LbTensor * x0,
    gpointer user_data)
{
  PassTimes *pt = user_data;
  gint64 now = g_get_monotonic_time ();
  if (pt->n <= LINGBOT_DIT_MAX_STEPS)
    pt->secs[pt->n++] = (now - pt->mark) / 1e6;
  pt->mark = now;
}

static double
chunk_flops (const LingbotDitConfig * c, double N, double text_len,
    double kv_tokens, int n_passes)
{
  const double D = c->dim, F = c->ffn_dim, L = c->num_layers;
  double pass = L * (2 * N * D * D * 6  /* self q,k,v,o + cross q,o */
      + 2 * N * D * F * 2       /* FFN */
      + 4 * N * kv_tokens * D   /* self attention */
      + 4 * N * text_len * D)   /* cross attention */
      + 2 * N * D * c->in_dim * 4 + 2 * N * D * c->out_dim * 4;
  double once = L * 2 * N * D * D * 4   /* camera injector + scale/shift */
      + 2 * N * D * c->control_in_features + 2 * 2 * N * D * D;
  return pass * n_passes + once;
}

int
lingbot_bench_dit_main (int argc, char **argv)
{
  g_autofree char *model = NULL, *preset = NULL, *devices = NULL;
  g_autofree char *latent = NULL;
  int dim = 0, layers = 0, heads = 0, ffn = 0, text_dim = 0;
  int chunks = 4, text_len = 64;
  gint64 seed = 42;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    {"model", 'm', 0, G_OPTION_ARG_FILENAME, &model,
        "DiT checkpoint (directory or file); default: random weights", "DIR"},
    {"preset", 'p', 0, G_OPTION_ARG_STRING, &preset,
        "Random model shape: tiny (default), 1.3b, 14b", "P"},
    {"dim", 0, 0, G_OPTION_ARG_INT, &dim, "Override width", "N"},
    {"layers", 0, 0, G_OPTION_ARG_INT, &layers, "Override layers", "N"},
    {"heads", 0, 0, G_OPTION_ARG_INT, &heads, "Override heads", "N"},
    {"ffn", 0, 0, G_OPTION_ARG_INT, &ffn, "Override FFN width", "N"},
    {"text-dim", 0, 0, G_OPTION_ARG_INT, &text_dim, "Override text width",
        "N"},
    {"devices", 'd', 0, G_OPTION_ARG_STRING, &devices,
        "Ranks: cpu:N or GPU ordinals (default cpu:1)", "D"},
    {"latent", 0, 0, G_OPTION_ARG_STRING, &latent,
        "Latent grid HxW (default 16x24; 58x104 is 464x832 video)", "HxW"},
    {"chunks", 'n', 0, G_OPTION_ARG_INT, &chunks, "Chunks (default 4)", "K"},
    {"text-len", 0, 0, G_OPTION_ARG_INT, &text_len,
        "Text tokens (default 64; 512 in production)", "L"},
    {"seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Weight/noise seed", "S"},
    {"json", 0, 0, G_OPTION_ARG_NONE, &json, "One JSON object on stdout",
        NULL},
    {NULL}
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- DiT chunk rate");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_autoptr (GError) err = NULL;
  if (!g_option_context_parse (ctx, &argc, &argv, &err)) {
    fprintf (stderr, "lingbot-bench dit: %s\n", err->message);
    return 2;
  }

  int64_t lh = 16, lw = 24;
  if (latent && sscanf (latent, "%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT,
          &lh, &lw) != 2) {
    fprintf (stderr, "lingbot-bench dit: --latent wants HxW\n");
    return 2;
  }

  g_autoptr (LingbotDit) dit = NULL;
  if (model) {
    dit = lingbot_dit_load (model, LINGBOT_DIT_LOAD_DEFAULT, &err);
  } else {
    LingbotDitPreset p = LINGBOT_DIT_PRESET_TINY;
    if (preset && !lingbot_dit_config_preset_from_name (preset, &p)) {
      fprintf (stderr, "lingbot-bench dit: unknown preset %s\n", preset);
      return 2;
    }
    LingbotDitConfig c;
    lingbot_dit_config_init_preset (&c, p);
    if (dim > 0)
      c.dim = dim;
    if (layers > 0)
      c.num_layers = layers;
    if (heads > 0)
      c.num_heads = heads;
    if (ffn > 0)
      c.ffn_dim = ffn;
    if (text_dim > 0)
      c.text_dim = text_dim;
    dit = lingbot_dit_new_random (&c, (guint64) seed, &err);
  }
  if (!dit) {
    fprintf (stderr, "lingbot-bench dit: %s\n", err->message);
    return 1;
  }
  const LingbotDitConfig *cfg = lingbot_dit_get_config (dit);

  LbBackend *be = NULL;
  int n_ranks = 1;
  g_autofree int *ordinals = NULL;
  if (!lingbot_backend_parse_devices (devices ? devices : "cpu:1", &be,
          &n_ranks, &ordinals, &err)) {
    fprintf (stderr, "lingbot-bench dit: %s\n", err->message);
    return 2;
  }
  LbWorkerGroupOptions go = { 0, NULL, "bench-dit" };
  LbWorkerGroup *group = lb_worker_group_new (be, n_ranks, ordinals, &go,
      &err);
  if (!group) {
    fprintf (stderr, "lingbot-bench dit: %s\n", err->message);
    return 1;
  }

  /* zero-padded context like production: a few real rows, the rest 0 */
  g_autoptr (LbTensor) text = lb_tensor_new_zeros (LB_DTYPE_F32, 3,
      (int64_t[]) { 1, text_len, cfg->text_dim });
  for (int64_t i = 0; i < MIN (10, text_len) * cfg->text_dim; i++)
    ((float *) text->data)[i] = 0.1f * (float) ((i * 37) % 19 - 9);

  LingbotDitSessionOptions so = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  so.latent_h = lh;
  so.latent_w = lw;
  gint64 t0 = g_get_monotonic_time ();
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &so, text,
      &err);
  if (!ses) {
    fprintf (stderr, "lingbot-bench dit: %s\n", err->message);
    lb_worker_group_unref (group);
    return 1;
  }
  double setup_s = (g_get_monotonic_time () - t0) / 1e6;

  const int C = cfg->chunk_frames;
  int64_t ls[5] = { 1, cfg->out_dim, C, lh, lw };
  int64_t ys[5] = { 1, cfg->in_dim - cfg->out_dim, C, lh, lw };
  int64_t cs[5] = { 1, cfg->control_in_features / 4, C, lh, lw };
  g_autoptr (LbTensor) y = lb_tensor_new_zeros (LB_DTYPE_F32, 5, ys);
  g_autoptr (LbTensor) ctl = lb_tensor_new (LB_DTYPE_F32, 5, cs);
  g_autoptr (LbTensor) out = lb_tensor_new (LB_DTYPE_F32, 5, ls);
  for (int64_t i = 0; i < lb_tensor_numel (ctl); i++)
    ((float *) ctl->data)[i] = (float) ((i % 13) - 6) * 0.05f;
  int n_steps;
  lingbot_dit_session_get_schedule (ses, &n_steps, NULL, NULL, NULL);
  LbTensor *noise[LINGBOT_DIT_MAX_STEPS] = { 0 };
  for (int i = 0; i < n_steps; i++)
    noise[i] = lb_tensor_new (LB_DTYPE_F32, 5, ls);
  g_autoptr (LingbotNoise) gen = lingbot_noise_new_philox ((guint64) seed);

  double *secs = g_new0 (double, MAX (chunks, 1));
  PassTimes passes = { 0 };
  lingbot_dit_session_set_step_callback (ses, on_pass, &passes);
  const int64_t tf = lingbot_dit_session_get_frame_tokens (ses);
  const int64_t cap = lingbot_dit_session_get_cache_capacity (ses);
  double total_flops = 0.0, steady_flops = 0.0;
  int rc = 0;
  for (int c = 0; c < chunks; c++) {
    for (int i = 0; i < n_steps && rc == 0; i++)
      if (!lingbot_noise_fill (gen, c, i ? LINGBOT_NOISE_RENOISE :
              LINGBOT_NOISE_INITIAL, i ? i - 1 : 0, noise[i], lh, 0, &err))
        rc = 1;
    gint64 a = g_get_monotonic_time ();
    passes.mark = a;
    passes.n = 0;
    if (rc || !lingbot_dit_session_run_chunk (ses, y, ctl,
            (const LbTensor * const *) noise, out, &err)) {
      fprintf (stderr, "lingbot-bench dit: chunk %d: %s\n", c, err->message);
      rc = 1;
      break;
    }
    secs[c] = (g_get_monotonic_time () - a) / 1e6;
    int64_t ge, le;
    lingbot_dit_session_get_cursors (ses, &ge, &le);
    double fl = chunk_flops (cfg, (double) C * tf, text_len,
        (double) MIN (le, cap), n_steps + 1);
    total_flops += fl;
    if (c > 0)
      steady_flops += fl;
    if (!json) {
      printf ("chunk %d: %d frames, %.3f s DiT, %.1f GFLOP/s; passes", c,
          c == 0 ? 1 + 4 * (C - 1) : 4 * C, secs[c], fl / secs[c] / 1e9);
      for (int i = 0; i < passes.n; i++)
        printf (" %.3f", passes.secs[i]);
      printf (" s\n");
    }
  }

  if (rc == 0) {
    int ns = MAX (chunks - 1, 0);
    double *st = g_new0 (double, MAX (ns, 1));
    double sum = 0.0;
    for (int i = 0; i < ns; i++) {
      st[i] = secs[i + 1];
      sum += st[i];
    }
    qsort (st, ns, sizeof (double), cmp_double);
    double mean = ns ? sum / ns : 0.0;
    double fps = mean > 0 ? 4.0 * C / mean : 0.0;
    double gflops = sum > 0 ? steady_flops / sum / 1e9 : 0.0;
    if (json) {
      printf ("{\"bench\": \"dit\", \"backend\": \"%s\", \"ranks\": %d, "
          "\"variant\": \"%s\", \"dim\": %d, \"layers\": %d, \"heads\": %d, "
          "\"ffn\": %d, \"latent\": [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
          "], \"chunk_frames\": %d, \"tokens_per_chunk\": %" G_GINT64_FORMAT
          ", \"text_len\": %d, \"setup_s\": %.4f, \"chunks\": [", be->name,
          n_ranks, lingbot_dit_config_variant (cfg), cfg->dim,
          cfg->num_layers, cfg->num_heads, cfg->ffn_dim, lh, lw, C,
          (int64_t) C * tf, text_len, setup_s);
      for (int c = 0; c < chunks; c++)
        printf ("%s{\"chunk\": %d, \"frames\": %d, \"compute_s\": %.5f, "
            "\"dit_s\": %.5f}", c ? ", " : "", c,
            c == 0 ? 1 + 4 * (C - 1) : 4 * C, secs[c], secs[c]);
      printf ("], \"steady\": {\"chunks\": %d, \"fps\": %.3f, \"mean_s\": "
          "%.5f, \"p50_s\": %.5f, \"p90_s\": %.5f, \"p99_s\": %.5f, "
          "\"max_s\": %.5f, \"gflops\": %.2f}, \"total_gflop\": %.3f}\n", ns,
          fps, mean, percentile (st, ns, 0.5), percentile (st, ns, 0.9),
          percentile (st, ns, 0.99), ns ? st[ns - 1] : 0.0, gflops,
          total_flops / 1e9);
    } else {
      printf ("steady (%d chunks): %.2f fps, mean %.3f s, p50 %.3f, p90 %.3f,"
          " p99 %.3f, max %.3f, %.1f GFLOP/s (setup %.3f s, %d rank(s))\n",
          ns, fps, mean, percentile (st, ns, 0.5), percentile (st, ns, 0.9),
          percentile (st, ns, 0.99), ns ? st[ns - 1] : 0.0, gflops, setup_s,
          n_ranks);
    }
    g_free (st);
  }
  for (int i = 0; i < n_steps; i++)
    lb_tensor_free (noise[i]);
  g_free (secs);
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
  return rc;
}

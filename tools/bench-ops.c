/* lingbot-gst: lingbot-bench ops, the CPU kernels next to sgemm
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-bench ops [--iters N] [--threads 1|0] [--isa NAME|all]
 *
 * Each hot CPU op at a steady DiT / VAE shape, timed, with cblas_sgemm on
 * the same FLOPs timed in the same run right beside it: the op's rate as
 * a ratio of sgemm's, which is what carries between machines (issue 2.6).
 * Elementwise and norm ops, which are memory-bound, report GB/s.  One JSON
 * line per (op, ISA variant, thread count):
 *
 *   {"bench": "ops", "op": "attention", "isa": "avx2", "threads": 1,
 *    "shape": "...", "seconds": S, "gflops": G, "sgemm_gflops": G2,
 *    "ratio": G / G2}
 *
 * The attention shape is the steady self-attention of issue 2.6's
 * configuration (DiT dim 384, 3 heads of 128, latent 24x40 at 320x192:
 * 960 queries of one chunk over an 18-frame window of 4320 keys); the
 * sgemm beside it runs q.k^T and p.v of one head ([960 x 128] . [128 x
 * 4320] and [960 x 4320] . [4320 x 128]) per head.  The conv is the VAE
 * decoder's widest causal 3x3x3 at width 8 (the demo VAE) at 192x320.
 */
#include "tools/bench-ops.h"
#include "tools/bench-common.h"
#include "tools/tool-common.h"
#include "tools/tool-json.h"
#include "kernels/cpu/cpu-internal.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

/* OpenBLAS's own thread count (its OpenMP build follows omp_set_num_threads
 * for new regions, but keeps a count of its own as well) */
void openblas_set_num_threads (int n);

static void
fill (LbTensor * t, float range)
{
  float *d = t->data;
  for (int64_t i = 0; i < lb_tensor_numel (t); i++)
    d[i] = range * ((float) ((i * 7919 + 13) % 2001) / 1000.0f - 1.0f);
}

typedef gboolean (*OpRun) (gpointer data, GError ** error);

/* the best of @iters runs after one warm-up, seconds */
static double
time_best (OpRun run, gpointer data, int iters, GError ** error)
{
  double best = INFINITY;
  if (!run (data, error))
    return -1.0;
  for (int i = 0; i < iters; i++) {
    gint64 t0 = g_get_monotonic_time ();
    if (!run (data, error))
      return -1.0;
    best = MIN (best, lingbot_bench_seconds_since (t0));
  }
  return best;
}

typedef struct
{
  LbStream *s;
  LbTensor *q, *k, *v, *out;
  /* the sgemm of the same FLOPs */
  float *sc;
  int64_t nq, nk, nh, hd;
} AttnCase;

static gboolean
run_attention (gpointer data, GError ** error)
{
  AttnCase *c = data;
  return lb_ops (c->s)->attention (c->s, c->q, c->k, c->v, NULL, NULL,
      1.0f / sqrtf ((float) c->hd), c->out, error);
}

static gboolean
run_attention_sgemm (gpointer data, GError ** error)
{
  AttnCase *c = data;
  const int ld = (int) (c->nh * c->hd);
  (void) error;
  for (int64_t h = 0; h < c->nh; h++) {
    const float *q = (const float *) c->q->data + h * c->hd;
    const float *k = (const float *) c->k->data + h * c->hd;
    const float *v = (const float *) c->v->data + h * c->hd;
    float *o = (float *) c->out->data + h * c->hd;
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, (int) c->nq,
        (int) c->nk, (int) c->hd, 1.0f, q, ld, k, ld, 0.0f, c->sc, (int) c->nk);
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, (int) c->nq,
        (int) c->hd, (int) c->nk, 1.0f, c->sc, (int) c->nk, v, ld, 0.0f, o, ld);
  }
  return TRUE;
}

typedef struct
{
  LbStream *s;
  LbTensor *x, *cache, *w, *b, *y;
  /* im2col-free sgemm of the same FLOPs: [cout, cin*27] . [cin*27, hw] */
  float *a, *bm, *cm;
  int m, n, kk;
} ConvCase;

/* the tensors of a causal 3x3x3 convolution, @cin -> @cout channels over
 * @f frames of @hh x @ww with a 2-frame cache, filled */
static void
conv_case_init (ConvCase * cc, LbStream * s, int cin, int cout, int f,
    int hh, int ww)
{
  int64_t xs[4] = { cin, f, hh, ww }, cs[4] = { cin, 2, hh, ww };
  int64_t wsh[5] = { cout, cin, 3, 3, 3 }, bs[1] = { cout };
  int64_t ys[4] = { cout, f, hh, ww };

  *cc = (ConvCase) { .s = s };
  cc->x = lb_tensor_new (LB_DTYPE_F32, 4, xs);
  cc->cache = lb_tensor_new (LB_DTYPE_F32, 4, cs);
  cc->w = lb_tensor_new (LB_DTYPE_F32, 5, wsh);
  cc->b = lb_tensor_new (LB_DTYPE_F32, 1, bs);
  cc->y = lb_tensor_new (LB_DTYPE_F32, 4, ys);
  fill (cc->x, 1.0f);
  fill (cc->cache, 1.0f);
  fill (cc->w, 0.1f);
  fill (cc->b, 0.1f);
}

/* frees what conv_case_init() and the sgemm comparison allocated */
static void
conv_case_clear (ConvCase * cc)
{
  lb_tensor_free (cc->x);
  lb_tensor_free (cc->cache);
  lb_tensor_free (cc->w);
  lb_tensor_free (cc->b);
  lb_tensor_free (cc->y);
  g_free (cc->a);
  g_free (cc->bm);
  g_free (cc->cm);
}

static gboolean
run_conv (gpointer data, GError ** error)
{
  ConvCase *c = data;
  return lb_ops (c->s)->conv3d_causal (c->s, c->x, c->cache, c->w, c->b, 1,
      1, 1, 1, c->y, error);
}

static gboolean
run_conv_sgemm (gpointer data, GError ** error)
{
  ConvCase *c = data;
  (void) error;
  cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans, c->m, c->n, c->kk,
      1.0f, c->a, c->kk, c->bm, c->n, 0.0f, c->cm, c->n);
  return TRUE;
}

typedef struct
{
  LbStream *s;
  LbTensor *x, *w, *bias, *y;
} NormCase;

static gboolean
run_layer_norm (gpointer data, GError ** error)
{
  NormCase *c = data;
  return lb_ops (c->s)->layer_norm (c->s, c->x, c->w, c->bias, 1e-6f, c->y,
      error);
}

static gboolean
run_rms_norm (gpointer data, GError ** error)
{
  NormCase *c = data;
  return lb_ops (c->s)->rms_norm (c->s, c->x, c->w, 1e-6f, c->y, error);
}

static gboolean
run_gelu (gpointer data, GError ** error)
{
  NormCase *c = data;
  return lb_ops (c->s)->gelu_tanh (c->s, c->x, c->y, error);
}

static gboolean
run_modulate (gpointer data, GError ** error)
{
  NormCase *c = data;
  return lb_ops (c->s)->modulate (c->s, c->x, c->w, c->bias, c->y, error);
}

/* the decoder's norm + SiLU over channels: x [C, T, H, W], gamma [C] */
typedef struct
{
  LbStream *s;
  LbTensor *x, *gamma, *y;
} ChNormCase;

static gboolean
run_chnorm (gpointer data, GError ** error)
{
  ChNormCase *c = data;
  return lb_ops (c->s)->channel_rms_norm (c->s, c->x, c->gamma, TRUE, c->y,
      error);
}

static void
print_line (const char *op, LbCpuIsa isa, int threads, const char *shape,
    double secs, double flops, double ref_secs, double bytes)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  lingbot_json_string (b, "bench", "ops");
  lingbot_json_string (b, "op", op);
  lingbot_json_string (b, "isa", lb_cpu_isa_name (isa));
  lingbot_json_int (b, "threads", threads);
  lingbot_json_string (b, "shape", shape);
  lingbot_json_double (b, "seconds", secs);
  if (flops > 0) {
    const double g = flops / secs / 1e9, g2 = flops / ref_secs / 1e9;
    lingbot_json_double (b, "gflops", g);
    lingbot_json_double (b, "sgemm_seconds", ref_secs);
    lingbot_json_double (b, "sgemm_gflops", g2);
    lingbot_json_double (b, "ratio", g / g2);
  } else {
    lingbot_json_double (b, "gbytes_per_s", bytes / secs / 1e9);
  }
  json_builder_end_object (b);
  lingbot_json_print (b);
}

/* --conv: the decoder's stride-1 3x3x3 convolutions, cin = cout = C over
 * 4 frames with a 2-frame cache, im2col + sgemm against the direct tiles
 * (lb_cpu_conv_set_direct()), one JSON line per shape, variant and thread
 * count: the study behind the variant chosen by shape (conv.c). */
static int
conv_study (LbStream * s, LbCpuIsa isa, int threads, int iters)
{
  static const int shapes[][3] = {
    {8, 192, 320}, {16, 96, 160}, {32, 48, 80}, {32, 96, 160},
    {64, 48, 80}, {96, 48, 80}, {192, 24, 40}, {384, 12, 20},
  };
  for (guint i = 0; i < G_N_ELEMENTS (shapes); i++) {
    const int ch = shapes[i][0], hh = shapes[i][1], ww = shapes[i][2];
    ConvCase cc;

    conv_case_init (&cc, s, ch, ch, 4, hh, ww);
    const double flops = 2.0 * ch * ch * 27.0 * 4 * hh * ww;
    double secs[2];
    GError *err = NULL;
    for (int mode = 0; mode < 2; mode++) {
      lb_cpu_conv_set_direct (mode);
      secs[mode] = time_best (run_conv, &cc, iters, &err);
    }
    lb_cpu_conv_set_direct (-1);
    conv_case_clear (&cc);
    if (secs[0] < 0 || secs[1] < 0) {
      fprintf (stderr, "lingbot-bench ops: %s\n", err ? err->message : "?");
      g_clear_error (&err);
      return 1;
    }
    g_autofree char *shape = g_strdup_printf ("%d->%d ch, 3x3x3, 4 frames "
        "%dx%d, cache 2", ch, ch, hh, ww);
    g_autoptr (JsonBuilder) b = json_builder_new ();
    json_builder_begin_object (b);
    lingbot_json_string (b, "bench", "ops");
    lingbot_json_string (b, "op", "conv3d_causal");
    lingbot_json_string (b, "isa", lb_cpu_isa_name (isa));
    lingbot_json_int (b, "threads", threads);
    lingbot_json_string (b, "shape", shape);
    lingbot_json_double (b, "im2col_seconds", secs[0]);
    lingbot_json_double (b, "direct_seconds", secs[1]);
    lingbot_json_double (b, "im2col_gflops", flops / secs[0] / 1e9);
    lingbot_json_double (b, "direct_gflops", flops / secs[1] / 1e9);
    lingbot_json_double (b, "direct_speedup", secs[0] / secs[1]);
    json_builder_end_object (b);
    lingbot_json_print (b);
  }
  return 0;
}

/**
 * lingbot_bench_ops:
 * @argc: arguments after "ops"
 * @argv: (array length=argc): them
 *
 * `lingbot-bench ops` (see the file comment): prints one JSON line per op,
 * ISA variant and thread count.
 *
 * Returns: the exit status (0, 1 on an op failure, 2 on bad options).
 */
int
lingbot_bench_ops (int argc, char **argv)
{
  int iters = 5, threads_opt = -1;
  gboolean conv = FALSE;
  g_autofree char *isa_name = NULL;
  GOptionEntry entries[] = {
    {"conv", 0, 0, G_OPTION_ARG_NONE, &conv,
        "only the convolution study: im2col + sgemm against the direct "
          "tiles at the decoder's widths", NULL},
    {"iters", 0, 0, G_OPTION_ARG_INT, &iters,
        "timed repetitions, the best counts (5)", "N"},
    {"threads", 0, 0, G_OPTION_ARG_INT, &threads_opt,
        "1 for one thread, 0 for all; default both", "N"},
    {"isa", 0, 0, G_OPTION_ARG_STRING, &isa_name,
          "baseline, avx2, avx512, or all the CPU has (default: LINGBOT_CPU_ISA, "
          "else the best)",
        "NAME"},
    {NULL}
  };
  const char *prog = "lingbot-bench ops";
  if (!lingbot_tool_parse (prog, "- the CPU kernels next to sgemm",
          "One JSON line per op, ISA variant and thread count. Compute ops "
          "(attention, conv3d_causal): seconds (the best of --iters), gflops, "
          "and cblas_sgemm on the same FLOPs timed in the same run "
          "(sgemm_seconds, sgemm_gflops); ratio = gflops / sgemm_gflops, the "
          "figure that carries between machines. Memory-bound ops (layer_norm, "
          "rms_norm, gelu_tanh, modulate, channel_rms_norm_silu): "
          "gbytes_per_s, input read plus output written. "
          "Shapes: docs/performance.md \"The CPU kernels after issue 2.6\".",
          entries, &argc, &argv))
    return LINGBOT_TOOL_USAGE;
  if (iters < 1)
    return lingbot_tool_usage_error (prog, "--iters must be positive");
  LbCpuIsa isas[3];
  int n_isas = 0;
  if (isa_name == NULL) {
    isas[n_isas++] = lb_cpu_isa ();     /* LINGBOT_CPU_ISA, else the best */
  } else if (strcmp (isa_name, "all") == 0) {
    for (int i = 0; i <= (int) lb_cpu_isa_best (); i++)
      isas[n_isas++] = (LbCpuIsa) i;
  } else if (!lb_cpu_isa_parse (isa_name, &isas[0]) ||
      isas[0] > lb_cpu_isa_best ()) {
    return lingbot_tool_usage_error (prog, "--isa %s: not one of baseline, "
        "avx2, avx512, all, or above this CPU's best (%s)", isa_name,
        lb_cpu_isa_name (lb_cpu_isa_best ()));
  } else {
    n_isas = 1;
  }
  const int all = omp_get_max_threads ();
  int thread_counts[2], n_threads = 0;
  if (threads_opt != 0)
    thread_counts[n_threads++] = 1;
  if (threads_opt != 1 && all > 1)
    thread_counts[n_threads++] = all;

  LbBackend *be = lb_cpu_backend ();
  g_autoptr (GError) err = NULL;
  LbStream *s = be->stream_new (be, 0, &err);
  if (s == NULL) {
    fprintf (stderr, "lingbot-bench ops: %s\n", err->message);
    return 1;
  }

  /* attention */
  AttnCase ac = {.s = s,.nq = 960,.nk = 4320,.nh = 3,.hd = 128 };
  int64_t qs[3] = { ac.nq, ac.nh, ac.hd }, ks[3] = { ac.nk, ac.nh, ac.hd };
  ac.q = lb_tensor_new (LB_DTYPE_F32, 3, qs);
  ac.k = lb_tensor_new (LB_DTYPE_F32, 3, ks);
  ac.v = lb_tensor_new (LB_DTYPE_F32, 3, ks);
  ac.out = lb_tensor_new (LB_DTYPE_F32, 3, qs);
  ac.sc = g_new (float, ac.nq * ac.nk);
  fill (ac.q, 1.0f);
  fill (ac.k, 1.0f);
  fill (ac.v, 1.0f);
  const double attn_flops = 4.0 * ac.nq * ac.nk * ac.nh * ac.hd;

  /* the decoder's causal 3x3x3 conv, width 8 at the top: 8 -> 8 channels
   * over 4 frames of 192x320, a 2-frame cache */
  ConvCase cc;
  const int cin = 8, cout = 8, f = 4, hh = 192, ww = 320;

  conv_case_init (&cc, s, cin, cout, f, hh, ww);
  cc.m = cout;
  cc.kk = cin * 27;
  cc.n = f * hh * ww;
  cc.a = g_new0 (float, (gsize) cc.m * cc.kk);
  cc.bm = g_new0 (float, (gsize) cc.kk * cc.n);
  cc.cm = g_new0 (float, (gsize) cc.m * cc.n);
  const double conv_flops = 2.0 * cc.m * cc.kk * (double) cc.n;

  /* norms and GELU at the DiT's [tokens, dim] (960 x 384 per chunk, here
   * 16 x that: a whole window's worth) */
  NormCase nc = {.s = s };
  int64_t ns[2] = { 15360, 384 }, wv[1] = { 384 };
  nc.x = lb_tensor_new (LB_DTYPE_F32, 2, ns);
  nc.y = lb_tensor_new (LB_DTYPE_F32, 2, ns);
  nc.w = lb_tensor_new (LB_DTYPE_F32, 1, wv);
  nc.bias = lb_tensor_new (LB_DTYPE_F32, 1, wv);
  fill (nc.x, 2.0f);
  fill (nc.w, 1.0f);
  fill (nc.bias, 0.5f);
  const double norm_bytes = 2.0 * lb_tensor_nbytes (nc.x);

  /* the decoder's RMS norm + SiLU at the top: 8 channels, 4 frames of
   * 192x320 */
  ChNormCase hc = {.s = s };
  int64_t hs[4] = { 8, 4, 192, 320 }, hg[1] = { 8 };
  hc.x = lb_tensor_new (LB_DTYPE_F32, 4, hs);
  hc.y = lb_tensor_new (LB_DTYPE_F32, 4, hs);
  hc.gamma = lb_tensor_new (LB_DTYPE_F32, 1, hg);
  fill (hc.x, 2.0f);
  fill (hc.gamma, 1.0f);
  const double chnorm_bytes = 2.0 * lb_tensor_nbytes (hc.x);

  int rc = 0;
  const LbCpuIsa keep = lb_cpu_isa ();
  for (int t = 0; t < n_threads && rc == 0; t++) {
    omp_set_num_threads (thread_counts[t]);
    openblas_set_num_threads (thread_counts[t]);
    for (int i = 0; i < n_isas && rc == 0; i++) {
      lb_cpu_isa_set (isas[i]);
      if (conv) {
        rc = conv_study (s, isas[i], thread_counts[t], iters);
        continue;
      }
      double a = time_best (run_attention, &ac, iters, &err);
      double a2 = time_best (run_attention_sgemm, &ac, iters, &err);
      double c1 = a >= 0 && a2 >= 0 ? time_best (run_conv, &cc, iters,
          &err) : -1;
      double c2 = c1 >= 0 ? time_best (run_conv_sgemm, &cc, iters, &err) : -1;
      double l = c2 >= 0 ? time_best (run_layer_norm, &nc, iters, &err) : -1;
      double r = l >= 0 ? time_best (run_rms_norm, &nc, iters, &err) : -1;
      double g = r >= 0 ? time_best (run_gelu, &nc, iters, &err) : -1;
      double mo = g >= 0 ? time_best (run_modulate, &nc, iters, &err) : -1;
      double hn = mo >= 0 ? time_best (run_chnorm, &hc, iters, &err) : -1;
      if (hn < 0) {
        fprintf (stderr, "lingbot-bench ops: %s\n",
            err ? err->message : "failed");
        rc = 1;
        break;
      }
      print_line ("attention", isas[i], thread_counts[t],
          "q 960x3x128, k/v 4320x3x128", a, attn_flops, a2, 0);
      print_line ("conv3d_causal", isas[i], thread_counts[t],
          "8->8 ch, 3x3x3, 4 frames 192x320, cache 2", c1, conv_flops, c2, 0);
      print_line ("layer_norm", isas[i], thread_counts[t], "15360x384", l, 0,
          0, norm_bytes);
      print_line ("rms_norm", isas[i], thread_counts[t], "15360x384", r, 0, 0,
          norm_bytes);
      print_line ("gelu_tanh", isas[i], thread_counts[t], "15360x384", g, 0,
          0, norm_bytes);
      print_line ("modulate", isas[i], thread_counts[t], "15360x384, [384]",
          mo, 0, 0, norm_bytes);
      print_line ("channel_rms_norm_silu", isas[i], thread_counts[t],
          "8x4x192x320", hn, 0, 0, chnorm_bytes);
    }
  }
  omp_set_num_threads (all);
  openblas_set_num_threads (all);
  lb_cpu_isa_set (keep);
  lb_tensor_free (ac.q);
  lb_tensor_free (ac.k);
  lb_tensor_free (ac.v);
  lb_tensor_free (ac.out);
  g_free (ac.sc);
  lb_tensor_free (hc.x);
  lb_tensor_free (hc.y);
  lb_tensor_free (hc.gamma);
  conv_case_clear (&cc);
  lb_tensor_free (nc.x);
  lb_tensor_free (nc.y);
  lb_tensor_free (nc.w);
  lb_tensor_free (nc.bias);
  be->stream_free (s);
  return rc;
}

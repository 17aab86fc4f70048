/* lingbot-gst: the DiT against the golden fixture dit_tiny.safetensors
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * golden README section 6: the single-block fixture (block.*), then 4
 * streamed chunks x (4 denoising steps + the clean t = 0 pass) with the KV
 * cache after each chunk (eviction from chunk 2 on), for 1, 2 and 4 ranks
 * (Ulysses; the fixture has 4 heads).
 */
#include <string.h>

#include "dit-test-util.h"
#include "comm/worker-group.h"
#include "lingbot/dit-private.h"
#include "lingbot/dit-session.h"

static LingbotCheckpoint *fixture;
static LingbotDit *dit;

static void
report (const char *what, double err, double *worst)
{
  if (worst)
    *worst = MAX (*worst, err);
  if (g_test_verbose ())
    g_test_message ("%-40s rel err %.3g", what, err);
  if (!(err <= DIT_GOLDEN_TOL))
    g_error ("%s: max relative error %.3g > %.1g", what, err, DIT_GOLDEN_TOL);
}

static void
check (const float *c, const char *name, double *worst)
{
  const LbTensor *g = dit_fixture_get (fixture, name);
  report (name, dit_rel_error (c, g, lb_tensor_numel (g)), worst);
}

/* ---- block fixture ---- */

/* The block fixture's outputs of one run (copies, f32). */
typedef struct
{
  float *self_attn, *cross_attn, *ffn, *out, *cache_k, *cache_v;
  float *cross_k, *cross_v;
  int64_t global_end, local_end;
} BlockRun;

static void
block_run_clear (BlockRun * r)
{
  g_free (r->self_attn);
  g_free (r->cross_attn);
  g_free (r->ffn);
  g_free (r->out);
  g_free (r->cache_k);
  g_free (r->cache_v);
  g_free (r->cross_k);
  g_free (r->cross_v);
}

static float *
dup_data (const LbTensor * t)
{
  return g_memdup2 (t->data, lb_tensor_nbytes (t));
}

/* Block 0 on the block fixture's inputs (golden README 6.3) on one CPU
 * rank whose self-attention span is @max_attention tokens
 * (lingbot_dit_cache_set_max_attention(): 0 = the capacity, 150). */
static void
block_run (int64_t max_attention, BlockRun * r)
{
  g_autoptr (GError) err = NULL;
  LbBackend *be = lb_cpu_backend ();
  LbStream *s = be->stream_new (be, 0, &err);
  g_assert_no_error (err);
  const LingbotDitConfig *cfg = lingbot_dit_get_config (dit);
  const int64_t D = cfg->dim;

  LingbotDitRank rs;
  g_assert_true (lingbot_dit_rank_init (&rs, s, NULL, dit, 4, 3, 5, 150, 30,
          16, &err));
  g_assert_no_error (err);
  lingbot_dit_cache_set_max_attention (&rs, max_attention);

  const LbTensor *ck = dit_fixture_get (fixture, "block.input.cache_k");
  const LbTensor *cv = dit_fixture_get (fixture, "block.input.cache_v");
  memcpy (rs.cache_k[0]->data, ck->data, lb_tensor_nbytes (ck));
  memcpy (rs.cache_v[0]->data, cv->data, lb_tensor_nbytes (cv));
  const LbTensor *cur =
      dit_fixture_get (fixture, "block.input.cache_end_before");
  rs.global_end = (int64_t) lb_tensor_get_flat (cur, 0);
  rs.local_end = (int64_t) lb_tensor_get_flat (cur, 1);
  int64_t start = (int64_t) lb_tensor_get_flat (dit_fixture_get (fixture,
          "block.input.current_start"), 0);

  g_assert_true (lingbot_dit_text_kv (&rs, dit_fixture_get (fixture,
              "block.input.context"), TRUE, &err));
  g_assert_no_error (err);
  const LbTensor *ctl = dit_fixture_get (fixture, "block.input.control_tokens");
  memcpy (rs.ctl->data, ctl->data, lb_tensor_nbytes (ctl));
  g_assert_true (lingbot_dit_camera_precompute (&rs, 0, &err));
  g_assert_no_error (err);
  const LbTensor *x = dit_fixture_get (fixture, "block.input.x");
  memcpy (rs.x->data, x->data, lb_tensor_nbytes (x));

  g_autoptr (LbTensor) mod = lb_tensor_new_f32 (2, (int64_t) 6, D);
  const LbTensor *tmod = dit_fixture_get (fixture, "block.input.t_mod");
  const LbTensor *m0 = lingbot_dit_get_weight (dit, "blocks.0.modulation");
  for (int64_t i = 0; i < 6 * D; i++)
    ((float *) mod->data)[i] = ((float *) m0->data)[i] +
        (float) lb_tensor_get_flat (tmod, i);

  rs.trace_self_attn = lingbot_dit_tensor_new (s, 60, D, NULL);
  rs.trace_cross_attn = lingbot_dit_tensor_new (s, 60, D, NULL);
  rs.trace_ffn = lingbot_dit_tensor_new (s, 60, D, NULL);

  g_assert_true (lingbot_dit_rope_chunk (&rs, start / rs.sh.frame_tokens,
          &err));
  lingbot_dit_cache_begin (&rs, start);
  g_assert_true (lingbot_dit_block_forward (&rs, 0, mod, start, &err));
  g_assert_no_error (err);
  lingbot_dit_cache_end (&rs, start);

  r->self_attn = dup_data (rs.trace_self_attn);
  r->cross_attn = dup_data (rs.trace_cross_attn);
  r->ffn = dup_data (rs.trace_ffn);
  r->out = dup_data (rs.x);
  r->cache_k = dup_data (rs.cache_k[0]);
  r->cache_v = dup_data (rs.cache_v[0]);
  r->cross_k = dup_data (rs.cross_k[0]);
  r->cross_v = dup_data (rs.cross_v[0]);
  r->global_end = rs.global_end;
  r->local_end = rs.local_end;

  lingbot_dit_rank_clear (&rs);
  be->stream_free (s);
}

static void
test_block (void)
{
  /* the fixture's own span, 150 = the capacity */
  const int64_t span = (int64_t) lb_tensor_get_flat (dit_fixture_get (fixture,
          "block.input.max_attention_size"), 0);
  g_assert_cmpint (span, ==, 150);
  BlockRun r = { 0 };
  block_run (span, &r);

  double worst = 0;
  check (r.cross_k, "block.output.cross_k", &worst);
  check (r.cross_v, "block.output.cross_v", &worst);
  check (r.self_attn, "block.output.self_attn_out", &worst);
  check (r.cross_attn, "block.output.cross_attn_out", &worst);
  check (r.ffn, "block.output.ffn_out", &worst);
  check (r.cache_k, "block.output.cache_k_after", &worst);
  check (r.cache_v, "block.output.cache_v_after", &worst);
  check (r.out, "block.output.out", &worst);
  g_assert_cmpint (r.global_end, ==, 90);
  g_assert_cmpint (r.local_end, ==, 90);
  g_print ("# dit block fixture: max relative error %.3g\n", worst);
  block_run_clear (&r);
}

/* ---- block 0 in float64, from golden README 6.1 / 6.3 alone ---- */

/* a float tensor of the fixture or the model as doubles */
static double *
f64_of (const LbTensor * t)
{
  const int64_t n = lb_tensor_numel (t);
  double *d = g_new (double, n);
  for (int64_t i = 0; i < n; i++)
    d[i] = lb_tensor_get_flat (t, i);
  return d;
}

static double *
f64_weight (const char *name)
{
  char full[128];
  g_snprintf (full, sizeof full, "blocks.0.%s", name);
  const LbTensor *t = lingbot_dit_get_weight (dit, full);
  g_assert_nonnull (t);
  return f64_of (t);
}

/* y [n, out] = x [n, in] W^T + b, W [out, in] "blocks.0.@name.weight" */
static double *
f64_linear (const double *x, int64_t n, int64_t in, int64_t out,
    const char *name)
{
  g_autofree char *wn = g_strdup_printf ("%s.weight", name);
  g_autofree char *bn = g_strdup_printf ("%s.bias", name);
  g_autofree double *w = f64_weight (wn);
  g_autofree double *b = f64_weight (bn);
  double *y = g_new (double, n * out);
  for (int64_t t = 0; t < n; t++)
    for (int64_t o = 0; o < out; o++) {
      double acc = b[o];
      for (int64_t i = 0; i < in; i++)
        acc += x[t * in + i] * w[o * in + i];
      y[t * out + o] = acc;
    }
  return y;
}

/* layer norm over rows of @d: (x - mean) / sqrt(var + eps), then
 * * (1 + scale) + shift (modulation) or * w + b (affine) */
static double *
f64_layer_norm (const double *x, int64_t n, int64_t d, double eps,
    const double *mul, gboolean one_plus, const double *add)
{
  double *y = g_new (double, n * d);
  for (int64_t t = 0; t < n; t++) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; i++)
      mean += x[t * d + i];
    mean /= d;
    for (int64_t i = 0; i < d; i++)
      var += (x[t * d + i] - mean) * (x[t * d + i] - mean);
    var /= d;
    const double r = 1.0 / sqrt (var + eps);
    for (int64_t i = 0; i < d; i++)
      y[t * d + i] = (x[t * d + i] - mean) * r * (one_plus ? 1.0 + mul[i] :
          mul[i]) + add[i];
  }
  return y;
}

/* in place: x * rsqrt(mean(x^2) + eps) * w over rows of @d */
static void
f64_rms_norm (double *x, int64_t n, int64_t d, double eps, const double *w)
{
  for (int64_t t = 0; t < n; t++) {
    double ms = 0;
    for (int64_t i = 0; i < d; i++)
      ms += x[t * d + i] * x[t * d + i];
    const double r = 1.0 / sqrt (ms / d + eps);
    for (int64_t i = 0; i < d; i++)
      x[t * d + i] *= r * w[i];
  }
}

/* in place: softmax(q k^T scale) v over @nk keys, per head; q [nq, H*hd],
 * k and v [nk, H*hd], out [nq, H*hd] */
static void
f64_attention (const double *q, int64_t nq, const double *k,
    const double *v, int64_t nk, int64_t H, int64_t hd, double *out)
{
  const int64_t D = H * hd;
  const double scale = 1.0 / sqrt ((double) hd);
  g_autofree double *p = g_new (double, nk);
  for (int64_t h = 0; h < H; h++)
    for (int64_t t = 0; t < nq; t++) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < nk; j++) {
        double dot = 0;
        for (int64_t c = 0; c < hd; c++)
          dot += q[t * D + h * hd + c] * k[j * D + h * hd + c];
        p[j] = dot * scale;
        mx = MAX (mx, p[j]);
      }
      for (int64_t j = 0; j < nk; j++)
        sum += (p[j] = exp (p[j] - mx));
      for (int64_t c = 0; c < hd; c++) {
        double acc = 0;
        for (int64_t j = 0; j < nk; j++)
          acc += p[j] * v[j * D + h * hd + c];
        out[t * D + h * hd + c] = acc / sum;
      }
    }
}

/* in place: RoPE (README 6.1) on [n, H*hd] rows of the fixture's grid
 * (F, 3, 5) from absolute frame @frame0, with trace.freqs_cos/sin:
 * pair columns [6 frame | 5 row | 5 column], row = position */
static void
f64_rope (double *x, int64_t H, int64_t hd, int64_t frame0)
{
  const LbTensor *tc = dit_fixture_get (fixture, "trace.freqs_cos");
  const LbTensor *ts = dit_fixture_get (fixture, "trace.freqs_sin");
  const int64_t pairs = hd / 2, cols = tc->shape[1];
  const int64_t np_h = hd / 6, np_t = pairs - 2 * np_h;
  g_assert_cmpint (cols, ==, pairs);
  for (int64_t f = 0; f < 4; f++)
    for (int64_t i = 0; i < 3; i++)
      for (int64_t j = 0; j < 5; j++) {
        const int64_t t = (f * 3 + i) * 5 + j;
        for (int64_t p = 0; p < pairs; p++) {
          const int64_t pos = p < np_t ? frame0 + f : p < np_t + np_h ? i : j;
          const double c = lb_tensor_get_flat (tc, pos * cols + p);
          const double sn = lb_tensor_get_flat (ts, pos * cols + p);
          for (int64_t h = 0; h < H; h++) {
            double *e = x + t * H * hd + h * hd + 2 * p;
            const double a = e[0], b = e[1];
            e[0] = a * c - b * sn;
            e[1] = a * sn + b * c;
          }
        }
      }
}

/* The block's outputs in float64. */
typedef struct
{
  double *self_attn, *out, *cache_k, *cache_v;
  double *cross_attn, *ffn;
} BlockF64;

static void
block_f64_clear (BlockF64 * r)
{
  g_free (r->self_attn);
  g_free (r->out);
  g_free (r->cache_k);
  g_free (r->cache_v);
  g_free (r->cross_attn);
  g_free (r->ffn);
}

/* Block 0 on the block fixture's inputs with a self-attention span of
 * @span tokens: cache slots [max(0, 90 - span), 90) after the chunk's k/v
 * land in slots 30..89 (no eviction: 30 + 60 <= 150). */
static void
block_f64 (int64_t span, BlockF64 * r)
{
  const LingbotDitConfig *cfg = lingbot_dit_get_config (dit);
  const int64_t D = cfg->dim, H = cfg->num_heads, hd = D / H, N = 60;
  const int64_t F = cfg->ffn_dim, cap = 150, L = 16;
  const double eps = cfg->eps;
  const int64_t start = (int64_t) lb_tensor_get_flat (dit_fixture_get
      (fixture, "block.input.current_start"), 0);
  const LbTensor *cur =
      dit_fixture_get (fixture, "block.input.cache_end_before");
  const int64_t local0 = (int64_t) lb_tensor_get_flat (cur, 1);
  g_assert_cmpint (local0 + N, <=, cap);
  const int64_t local_end = local0 + N;

  g_autofree double *x = f64_of (dit_fixture_get (fixture, "block.input.x"));
  g_autofree double *m = f64_weight ("modulation");
  g_autofree double *tm = f64_of (dit_fixture_get (fixture,
          "block.input.t_mod"));
  for (int64_t i = 0; i < 6 * D; i++)
    m[i] += tm[i];
  /* shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp */
  const double *sh_msa = m, *sc_msa = m + D, *g_msa = m + 2 * D;
  const double *sh_mlp = m + 3 * D, *sc_mlp = m + 4 * D, *g_mlp = m + 5 * D;

  /* self-attention */
  g_autofree double *a = f64_layer_norm (x, N, D, eps, sc_msa, TRUE, sh_msa);
  g_autofree double *q = f64_linear (a, N, D, D, "self_attn.q");
  g_autofree double *k = f64_linear (a, N, D, D, "self_attn.k");
  g_autofree double *v = f64_linear (a, N, D, D, "self_attn.v");
  g_autofree double *nq = f64_weight ("self_attn.norm_q.weight");
  g_autofree double *nk = f64_weight ("self_attn.norm_k.weight");
  f64_rms_norm (q, N, D, eps, nq);
  f64_rms_norm (k, N, D, eps, nk);
  f64_rope (q, H, hd, start / 15);
  f64_rope (k, H, hd, start / 15);
  r->cache_k = f64_of (dit_fixture_get (fixture, "block.input.cache_k"));
  r->cache_v = f64_of (dit_fixture_get (fixture, "block.input.cache_v"));
  memcpy (r->cache_k + local0 * D, k, N * D * sizeof (double));
  memcpy (r->cache_v + local0 * D, v, N * D * sizeof (double));
  const int64_t a0 = MAX (0, local_end - span);
  g_autofree double *o = g_new (double, N * D);
  f64_attention (q, N, r->cache_k + a0 * D, r->cache_v + a0 * D,
      local_end - a0, H, hd, o);
  r->self_attn = f64_linear (o, N, D, D, "self_attn.o");
  for (int64_t i = 0; i < N * D; i++)
    x[i] += g_msa[i % D] * r->self_attn[i];

  /* camera injection */
  g_autofree double *ctl = f64_of (dit_fixture_get (fixture,
          "block.input.control_tokens"));
  g_autofree double *c1 = f64_linear (ctl, N, D, D, "cam_injector_layer1");
  for (int64_t i = 0; i < N * D; i++)
    c1[i] = c1[i] / (1.0 + exp (-c1[i]));
  g_autofree double *hc = f64_linear (c1, N, D, D, "cam_injector_layer2");
  for (int64_t i = 0; i < N * D; i++)
    hc[i] += ctl[i];
  g_autofree double *cs = f64_linear (hc, N, D, D, "cam_scale_layer");
  g_autofree double *cb = f64_linear (hc, N, D, D, "cam_shift_layer");
  for (int64_t i = 0; i < N * D; i++)
    x[i] = (1.0 + cs[i]) * x[i] + cb[i];

  /* cross-attention */
  g_autofree double *n3w = f64_weight ("norm3.weight");
  g_autofree double *n3b = f64_weight ("norm3.bias");
  g_autofree double *n = f64_layer_norm (x, N, D, eps, n3w, FALSE, n3b);
  g_autofree double *ctx = f64_of (dit_fixture_get (fixture,
          "block.input.context"));
  g_autofree double *cq = f64_linear (n, N, D, D, "cross_attn.q");
  g_autofree double *ck = f64_linear (ctx, L, D, D, "cross_attn.k");
  g_autofree double *cv = f64_linear (ctx, L, D, D, "cross_attn.v");
  g_autofree double *cnq = f64_weight ("cross_attn.norm_q.weight");
  g_autofree double *cnk = f64_weight ("cross_attn.norm_k.weight");
  f64_rms_norm (cq, N, D, eps, cnq);
  f64_rms_norm (ck, L, D, eps, cnk);
  g_autofree double *co = g_new (double, N * D);
  f64_attention (cq, N, ck, cv, L, H, hd, co);
  r->cross_attn = f64_linear (co, N, D, D, "cross_attn.o");
  for (int64_t i = 0; i < N * D; i++)
    x[i] += r->cross_attn[i];

  /* FFN */
  g_autofree double *f = f64_layer_norm (x, N, D, eps, sc_mlp, TRUE, sh_mlp);
  g_autofree double *h = f64_linear (f, N, D, F, "ffn.0");
  for (int64_t i = 0; i < N * F; i++)
    h[i] = 0.5 * h[i] * (1.0 + tanh (sqrt (2.0 / G_PI) * (h[i] + 0.044715 *
                h[i] * h[i] * h[i])));
  r->ffn = f64_linear (h, N, F, D, "ffn.2");
  for (int64_t i = 0; i < N * D; i++)
    x[i] += g_mlp[i % D] * r->ffn[i];
  r->out = g_memdup2 (x, N * D * sizeof (double));
}

/* max|c - r| / max|r| */
static double
rel_error_f64 (const float *c, const double *r, int64_t n)
{
  double maxr = 0, maxd = 0;
  for (int64_t i = 0; i < n; i++) {
    maxr = MAX (maxr, fabs (r[i]));
    double d = fabs ((double) c[i] - r[i]);
    maxd = MAX (maxd, isnan (d) ? INFINITY : d);
  }
  return maxr > 0 ? maxd / maxr : maxd;
}

/* max|a - b| / max|b| of two f32 runs */
static double
rel_diff_f32 (const float *a, const float *b, int64_t n)
{
  double maxb = 0, maxd = 0;
  for (int64_t i = 0; i < n; i++) {
    maxb = MAX (maxb, fabs ((double) b[i]));
    maxd = MAX (maxd, fabs ((double) a[i] - (double) b[i]));
  }
  return maxb > 0 ? maxd / maxb : maxd;
}

/* Spec 1.8 / README 6.3: the queries attend to the cache slots
 * [max(0, local_end - max_attention_size), local_end).  The fixture has
 * outputs only at max_attention_size = the capacity (150), so a float64
 * implementation of the block written from README 6.1 alone is first
 * checked against every golden output there, then it is the reference for
 * spans of 60 (the chunk's own tokens only) and 45 (its last 45): our
 * block's self_attn_out and out must match it to the golden tolerance,
 * and differ from the capacity run by far more (the span is not
 * ignored). */
static void
test_block_max_attention (void)
{
  const int64_t n = 60 * 128;
  BlockF64 full = { 0 };
  block_f64 (150, &full);
  double worst = 0;
  const struct
  {
    const double *r;
    const char *name;
  } ref[] = {
    {full.self_attn, "block.output.self_attn_out"},
    {full.cross_attn, "block.output.cross_attn_out"},
    {full.ffn, "block.output.ffn_out"},
    {full.out, "block.output.out"},
    {full.cache_k, "block.output.cache_k_after"},
    {full.cache_v, "block.output.cache_v_after"},
  };
  for (guint i = 0; i < G_N_ELEMENTS (ref); i++) {
    const LbTensor *g = dit_fixture_get (fixture, ref[i].name);
    const int64_t m = lb_tensor_numel (g);
    g_autofree float *rf = g_new (float, m);
    g_autofree char *what = g_strdup_printf ("f64 block: %s", ref[i].name);
    for (int64_t j = 0; j < m; j++)
      rf[j] = (float) ref[i].r[j];
    report (what, dit_rel_error (rf, g, m), &worst);
  }

  BlockRun cap = { 0 };
  block_run (0, &cap);          /* 0 = the capacity */
  check (cap.self_attn, "block.output.self_attn_out", &worst);
  check (cap.out, "block.output.out", &worst);

  const int64_t spans[] = { 60, 45 };
  for (guint i = 0; i < G_N_ELEMENTS (spans); i++) {
    BlockF64 r64 = { 0 };
    BlockRun r = { 0 };
    block_f64 (spans[i], &r64);
    block_run (spans[i], &r);
    g_autofree char *w1 = g_strdup_printf ("span %" G_GINT64_FORMAT
        ": self_attn_out vs f64", spans[i]);
    g_autofree char *w2 = g_strdup_printf ("span %" G_GINT64_FORMAT
        ": out vs f64", spans[i]);
    report (w1, rel_error_f64 (r.self_attn, r64.self_attn, n), &worst);
    report (w2, rel_error_f64 (r.out, r64.out, n), &worst);
    /* the cache write does not depend on the span */
    g_assert_cmpmem (r.cache_k, 150 * 128 * sizeof (float), cap.cache_k,
        150 * 128 * sizeof (float));
    g_assert_cmpint (r.local_end, ==, 90);
    /* a span ignored would give the capacity's result */
    const double d_sa = rel_diff_f32 (r.self_attn, cap.self_attn, n);
    const double d_out = rel_diff_f32 (r.out, cap.out, n);
    g_test_message ("span %" G_GINT64_FORMAT ": differs from the capacity "
        "run by %.3g (self_attn_out), %.3g (out)", spans[i], d_sa, d_out);
    g_assert_cmpfloat (d_sa, >, 100 * DIT_GOLDEN_TOL);
    g_assert_cmpfloat (d_out, >, 10 * DIT_GOLDEN_TOL);
    block_run_clear (&r);
    block_f64_clear (&r64);
  }
  /* above the capacity is the capacity, bit for bit */
  BlockRun big = { 0 };
  block_run (1000, &big);
  g_assert_cmpmem (big.out, n * sizeof (float), cap.out, n * sizeof (float));
  block_run_clear (&big);
  g_print ("# dit block max_attention_size 150/60/45: max relative error "
      "%.3g against the float64 block\n", worst);
  block_run_clear (&cap);
  block_f64_clear (&full);
}

/* ---- streamed chunks ---- */

typedef struct
{
  double worst;
  int n_checked;
} StepCheck;

static void
on_step (LingbotDitSession * ses, int64_t chunk, int step,
    const LbTensor * x_in, const LbTensor * pred, const LbTensor * x0,
    gpointer user_data)
{
  StepCheck *sc = user_data;
  char name[96];
  if (step < 4) {
    g_snprintf (name, sizeof name, "output.chunk%d.step%d.x_in", (int) chunk,
        step);
    check (x_in->data, name, &sc->worst);
    g_snprintf (name, sizeof name, "output.chunk%d.step%d.pred", (int) chunk,
        step);
    check (pred->data, name, &sc->worst);
    g_snprintf (name, sizeof name, "output.chunk%d.step%d.x0", (int) chunk,
        step);
    check (x0->data, name, &sc->worst);
  } else {
    g_snprintf (name, sizeof name, "output.chunk%d.refresh.x_in", (int) chunk);
    check (x_in->data, name, &sc->worst);
    g_snprintf (name, sizeof name, "output.chunk%d.refresh.pred", (int) chunk);
    check (pred->data, name, &sc->worst);
  }
  sc->n_checked++;
}

static void
test_stream (gconstpointer data)
{
  const int n_ranks = GPOINTER_TO_INT (data);
  g_autoptr (GError) err = NULL;
  const LingbotDitConfig *cfg = lingbot_dit_get_config (dit);
  LbWorkerGroupOptions go = { 0, NULL, "dit-test" };
  LbWorkerGroup *group = lb_worker_group_new (lb_cpu_backend (), n_ranks,
      NULL, &go, &err);
  g_assert_no_error (err);

  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_dit_session_get_cache_capacity (ses), ==, 150);

  /* the schedule must reproduce the fixture's timesteps */
  int n_steps;
  const double *ts;
  lingbot_dit_session_get_schedule (ses, &n_steps, &ts, NULL, NULL);
  const LbTensor *tsg = dit_fixture_get (fixture, "input.timesteps");
  g_assert_cmpint (n_steps, ==, 4);
  for (int i = 0; i < 4; i++)
    g_assert_cmpfloat (ts[i], ==, lb_tensor_get_flat (tsg, i));

  StepCheck sc = { 0 };
  lingbot_dit_session_set_step_callback (ses, on_step, &sc);
  const LbTensor *cursors = dit_fixture_get (fixture,
      "trace.cache_cursors_after_call");
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  int64_t kvshape[4] = { 1, 150, cfg->num_heads, cfg->dim / cfg->num_heads };
  g_autoptr (LbTensor) k = lb_tensor_new (LB_DTYPE_F32, 4, kvshape);
  g_autoptr (LbTensor) v = lb_tensor_new (LB_DTYPE_F32, 4, kvshape);

  for (int c = 0; c < 4; c++) {
    char name[96];
    const LbTensor *noise[4];
    const LbTensor *y, *ctl;
    dit_fixture_chunk (fixture, c, noise, &y, &ctl);
    g_assert_true (lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
            &err));
    g_assert_no_error (err);

    g_snprintf (name, sizeof name, "output.chunk%d.denoised", c);
    check (out->data, name, &sc.worst);
    for (int l = 0; l < cfg->num_layers; l++) {
      g_assert_true (lingbot_dit_session_get_kv_cache (ses, l, k, v, &err));
      g_assert_no_error (err);
      g_snprintf (name, sizeof name,
          "output.chunk%d.kv_after_refresh.layer%d.k", c, l);
      check (k->data, name, &sc.worst);
      g_snprintf (name, sizeof name,
          "output.chunk%d.kv_after_refresh.layer%d.v", c, l);
      check (v->data, name, &sc.worst);
      int64_t ge, le;
      lingbot_dit_session_get_cursors (ses, &ge, &le);
      int64_t call = c * 5 + 4;
      g_assert_cmpint (ge, ==, (int64_t) lb_tensor_get_flat (cursors,
              (call * cfg->num_layers + l) * 2));
      g_assert_cmpint (le, ==, (int64_t) lb_tensor_get_flat (cursors,
              (call * cfg->num_layers + l) * 2 + 1));
    }
  }
  g_assert_cmpint (sc.n_checked, ==, 20);
  int64_t ge, le;
  lingbot_dit_session_get_cursors (ses, &ge, &le);
  g_assert_cmpint (ge, ==, 240);        /* eviction happened: 240 seen ... */
  g_assert_cmpint (le, ==, 150);        /* ... 150 kept */
  g_print ("# dit stream fixture, %d rank(s): max relative error %.3g over "
      "all steps, predictions, x0, re-noised latents and KV caches\n",
      n_ranks, sc.worst);

  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
}

/* The 4 chunks' denoised latents of a session of @n_ranks CPU ranks with
 * #LingbotDitSessionOptions.max_attention_size @span, in @out (4 x 3840
 * floats). */
static void
stream_span (int n_ranks, int span, float *out)
{
  g_autoptr (GError) err = NULL;
  LbWorkerGroupOptions go = { 0, NULL, "dit-test" };
  LbWorkerGroup *group = lb_worker_group_new (lb_cpu_backend (), n_ranks,
      NULL, &go, &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  opt.max_attention_size = span;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_dit_session_get_max_attention_size (ses), ==,
      MIN (span, 150));
  g_autoptr (LbTensor) o = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  for (int c = 0; c < 4; c++) {
    const LbTensor *noise[4];
    const LbTensor *y, *ctl;
    dit_fixture_chunk (fixture, c, noise, &y, &ctl);
    g_assert_true (lingbot_dit_session_run_chunk (ses, y, ctl, noise, o, &err));
    g_assert_no_error (err);
    memcpy (out + c * 3840, o->data, 3840 * sizeof (float));
  }
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
}

/* The span of the session options reaches every rank: with 75 tokens (the
 * chunk's 60 and the 15 before them) chunk 0 (60 tokens cached) is the
 * golden chunk, later chunks differ from it, and 2 and 4 Ulysses ranks
 * (each attending over its own heads) give what 1 rank gives.  The
 * session's span is what the options and the model say. */
static void
test_stream_max_attention (void)
{
  g_autoptr (GError) err = NULL;
  /* the fixture's metadata config carries max_attention_size 150 */
  g_assert_cmpint (lingbot_dit_get_config (dit)->max_attention_size, ==, 150);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  const LbTensor *text = dit_fixture_get (fixture, "input.context");
  const struct
  {
    int option;
    int64_t span;
  } cases[] = { {0, 150}, {90, 90}, {150, 150}, {G_MAXINT, 150} };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    opt.max_attention_size = cases[i].option;
    g_autoptr (LingbotDitSession) ses = lingbot_dit_session_new (dit, NULL,
        &opt, text, &err);
    g_assert_no_error (err);
    g_assert_cmpint (lingbot_dit_session_get_max_attention_size (ses), ==,
        cases[i].span);
  }
  opt.max_attention_size = -1;
  g_assert_null (lingbot_dit_session_new (dit, NULL, &opt, text, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, "DiT session: max_attention_size -1 is "
      "negative (tokens; 0 = the model's)");

  const int64_t n = 3840;
  g_autofree float *r1 = g_new (float, 4 * n);
  stream_span (1, 75, r1);
  check (r1, "output.chunk0.denoised", NULL);
  for (int c = 1; c < 4; c++) {
    char name[64];
    g_snprintf (name, sizeof name, "output.chunk%d.denoised", c);
    const LbTensor *g = dit_fixture_get (fixture, name);
    const double d = dit_rel_error (r1 + c * n, g, n);
    g_test_message ("span 75, chunk %d: %.3g from the golden (span 150)", c, d);
    g_assert_cmpfloat (d, >, 10 * DIT_GOLDEN_TOL);
  }
  for (int ranks = 2; ranks <= 4; ranks *= 2) {
    g_autofree float *rn = g_new (float, 4 * n);
    stream_span (ranks, 75, rn);
    /* sharded == unsharded, byte for byte (docs/design.md "Determinism") */
    if (memcmp (rn, r1, 4 * n * sizeof (float)) != 0)
      g_error ("span 75: %d ranks differ from 1 rank by %.3g (bytes "
          "expected)", ranks, rel_diff_f32 (rn, r1, 4 * n));
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autofree char *path = dit_fixture_path ();
  g_autoptr (GError) err = NULL;
  fixture = lingbot_checkpoint_open (path, &err);
  g_assert_no_error (err);
  dit = lingbot_dit_load_checkpoint (fixture, NULL, LINGBOT_DIT_LOAD_DEFAULT,
      &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_dit_get_config (dit)->num_heads, ==, 4);
  g_assert_cmpint (lingbot_dit_get_config (dit)->num_layers, ==, 3);

  g_test_add_func ("/dit/golden/block", test_block);
  g_test_add_func ("/dit/golden/block/max-attention", test_block_max_attention);
  g_test_add_data_func ("/dit/golden/stream/cpu1", GINT_TO_POINTER (1),
      test_stream);
  g_test_add_data_func ("/dit/golden/stream/cpu2", GINT_TO_POINTER (2),
      test_stream);
  g_test_add_data_func ("/dit/golden/stream/cpu4", GINT_TO_POINTER (4),
      test_stream);
  g_test_add_func ("/dit/golden/stream-max-attention",
      test_stream_max_attention);
  int rc = g_test_run ();
  lingbot_dit_unref (dit);
  lingbot_checkpoint_unref (fixture);
  return rc;
}

/* lingbot-gst: the DiT's served precision (LB_MATH_BF16, spec 1.11) on an
 * emulated device
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * With LingbotDitSessionOptions.math = LB_MATH_BF16 on a device backend the
 * ranks hold every linear layer's w as bf16 and every GEMM computes
 * `bf16(x) . w` with f32 accumulation (kernels/ops.h); everything else
 * stays f32.  No GPU is needed: on "fakedev" (tests/common/fakedev.c) the
 * session takes the device path (bf16 upload included) and the CPU
 * kernels compute, the gemm through its bf16 oracle path.  Checked here:
 *
 * (a) the uploaded weights: bf16 for every linear w (each element equal to
 *     lb_f32_to_bf16 of the model's), bit-identical f32 for the rest, the
 *     byte count; the CPU backend ignores the mode; the session sets the
 *     rank streams' math;
 * (b) the dit_tiny stream (4 chunks, eviction) at 1 and 2 ranks within a
 *     bf16 tolerance of the CPU f32 run (every pass, output and KV cache)
 *     and of the golden outputs, and measurably different from f32 (the
 *     mode is not silently ignored);
 * (c) 1 and 2 ranks bit-identical to each other (the CPU's bf16 gemm
 *     computes each row of y independently of the others, so a rank's
 *     band of tokens gets the whole-sequence bits; the f32 cblas path does
 *     not promise that: its 1- and 2-rank runs differ by ~5e-7);
 * (d) no fakedev refusals, no leaked device blocks; a later f32 session on
 *     the same worker group is the f32 result again;
 * (e) the KV cache (spec 1.11: "the KV cache is bf16"): bf16 on device
 *     ranks in bf16 mode, f32 on CPU ranks and in f32 mode; its bytes per
 *     rank half the f32 cache's and equal to lingbot_dit_kv_cache_bytes()
 *     (the 14B figures at 832x480 are printed); the bf16 stream's graph
 *     replay (captured passes over a bf16 cache) bit-identical to running
 *     every op.
 */
#include <string.h>

#include "dit-test-util.h"
#include "fakedev.h"
#include "comm/worker-group.h"
#include "lingbot/dit-private.h"
#include "lingbot/dit-session.h"
#include "lingbot/lingbot.h"

/* Tolerance of the bf16 stream against the f32 CPU run and the golden,
 * rel_to_max per tensor (max |bf16 - ref| / max |ref|).  Rounding x and w
 * to bf16 (8 significant bits) costs up to 2^-9 = 2.0e-3 relative per
 * factor of each product; over K terms of random sign the errors of a dot
 * product partly cancel, but they go through 3 blocks, 5 passes per chunk
 * (x0 feeds the next pass) and the KV cache of earlier chunks, stored as
 * bf16 (one more rounding of every key and value).  Measured (printed by
 * the test, deterministic: the fixture fixes every input): 8.82e-3 at
 * worst (chunk 2's clean-pass prediction; 8.93e-3 with the f32 cache of
 * before), 4.52e-3 on the denoised outputs (4.46e-3 before), the same
 * against the golden (whose own f32 error is 7.8e-7).  The bound is 3.4x
 * the worst measurement and still far below what a wrong or transposed
 * weight, a missing bias or an unrounded operand in the wrong place would
 * cost (order 1, or exactly 0 effect). */
#define BF16_TOL 3e-2

/* A bf16 run must differ from the f32 one by at least this (measured
 * 4.5e-3 on the outputs), so a session that silently ignores the mode
 * fails. */
#define BF16_MIN_EFFECT 1e-4

/* Tolerance of the fp8 stream (LB_MATH_FP8: e4m3 GEMM weights with
 * per-output-channel scales, per-token e4m3 activations, attention and
 * the KV cache as bf16) against the CPU f32 run, the bf16 stream and the
 * golden, rel_to_max per tensor.  E4M3 keeps 4 significant bits: 2^-4 =
 * 6.25e-2 relative per operand at worst, ~1.8e-2 rms for uniform
 * rounding, partly cancelling over K (dit_tiny's K is small, so little
 * cancels), through 3 blocks, 5 passes per chunk and the cache of earlier
 * chunks.  Measured (deterministic, printed by the test): 0.153 at worst
 * against f32 (chunk 3's last prediction), 0.095 on the denoised outputs,
 * 0.095 against the golden outputs (bf16: 5.1e-3, f32: 7.8e-7), 0.157
 * against the bf16 stream; 2 ranks against 1: 0.069 (the sharded run is
 * not bit-identical in fp8: a last-bit difference upstream flips e4m3
 * roundings).  The bound is 2x the worst figure: it catches a wrong
 * scale (a factor of 448, or order 1) or a transposed weight, not a
 * subtle loss of accuracy. */
#define FP8_TOL 0.3

/* fp8 must differ from bf16 measurably (measured 2.7e-2 on the
 * outputs), so a session that silently ran bf16 fails. */
#define FP8_MIN_EFFECT 2e-3

static LingbotCheckpoint *fixture;
static LingbotDit *dit;

/* ------------------------------------------------------------------------ */
/* (a) the weights                                                          */
/* ------------------------------------------------------------------------ */

/* The model's weight slots, enumerated independently of dit-ranks.c's
 * tables: every LingbotDitLinear (w must be bf16, b f32) and every other
 * tensor (f32). */
#define LIN_T(f) G_STRUCT_OFFSET (LingbotDitWeights, f)
#define LIN_B(f) G_STRUCT_OFFSET (LingbotDitBlock, f)
static const glong top_linears[] = {
  LIN_T (patch), LIN_T (ctl_patch), LIN_T (c2ws1), LIN_T (c2ws2),
  LIN_T (text0), LIN_T (text2), LIN_T (time0), LIN_T (time2),
  LIN_T (time_proj), LIN_T (head),
};
static const glong top_others[] = { LIN_T (head_modulation) };

static const glong block_linears[] = {
  LIN_B (sa_q), LIN_B (sa_k), LIN_B (sa_v), LIN_B (sa_o), LIN_B (ca_q),
  LIN_B (ca_k), LIN_B (ca_v), LIN_B (ca_o), LIN_B (ffn0), LIN_B (ffn2),
  LIN_B (cam1), LIN_B (cam2), LIN_B (cam_scale), LIN_B (cam_shift),
};

static const glong block_others[] = {
  LIN_B (modulation), LIN_B (sa_norm_q), LIN_B (sa_norm_k), LIN_B (norm3_w),
  LIN_B (norm3_b), LIN_B (ca_norm_q), LIN_B (ca_norm_k),
};

#undef LIN_T
#undef LIN_B

G_STATIC_ASSERT (sizeof (LingbotDitBlock) ==
    (G_N_ELEMENTS (block_linears) * 3 + G_N_ELEMENTS (block_others)) *
    sizeof (LbTensor *));
G_STATIC_ASSERT (G_STRUCT_OFFSET (LingbotDitWeights, blocks) ==
    (glong) ((G_N_ELEMENTS (top_linears) * 3 + G_N_ELEMENTS (top_others)) *
        sizeof (LbTensor *)));

typedef struct
{
  int n_bf16, n_f32;
  gsize bf16_elems;             /* elements stored as bf16 */
  gsize bytes;                  /* expected device bytes */
} WeightCount;

/* Device tensor @d against host tensor @h: on the stream's device,
 * contiguous, same shape; bf16 with every element lb_f32_to_bf16 of the
 * host's, or f32 and bit-identical. */
static void
check_weight (const LbTensor * d, const LbTensor * h, gboolean bf16,
    WeightCount * c)
{
  if (h == NULL) {
    g_assert_null (d);
    return;
  }
  g_assert_nonnull (d);
  g_assert_cmpint (d->device.type, ==, LB_DEVICE_CUDA);
  g_assert_true (fakedev_is_device (d->data, lb_tensor_nbytes (d)));
  g_assert_true (lb_tensor_is_contiguous (d));
  g_assert_true (lb_tensor_same_shape (d, h));
  g_assert_cmpint (h->dtype, ==, LB_DTYPE_F32);
  const int64_t n = lb_tensor_numel (h);
  const float *hv = h->data;
  if (bf16) {
    g_assert_cmpint (d->dtype, ==, LB_DTYPE_BF16);
    g_assert_cmpint (d->ndim, ==, 2);
    const uint16_t *dv = d->data;
    for (int64_t i = 0; i < n; i++)
      if (dv[i] != lb_f32_to_bf16 (hv[i]))
        g_error ("bf16 weight element %" G_GINT64_FORMAT ": 0x%04x, expected "
            "0x%04x (%.9g)", i, dv[i], lb_f32_to_bf16 (hv[i]), (double) hv[i]);
    c->n_bf16++;
    c->bf16_elems += (gsize) n;
    c->bytes += (gsize) n *2;
  } else {
    g_assert_cmpint (d->dtype, ==, LB_DTYPE_F32);
    g_assert_true (memcmp (d->data, h->data, (gsize) n * 4) == 0);
    c->n_f32++;
    c->bytes += (gsize) n *4;
  }
}

static void
check_slots (gconstpointer dev, gconstpointer host, const glong * linears,
    guint n_linears, const glong * others, guint n_others, gboolean bf16,
    WeightCount * c)
{
  for (guint i = 0; i < n_linears; i++) {
    const LingbotDitLinear *dl = G_STRUCT_MEMBER_P (dev, linears[i]);
    const LingbotDitLinear *hl = G_STRUCT_MEMBER_P (host, linears[i]);
    check_weight (dl->w, hl->w, bf16, c);
    check_weight (dl->b, hl->b, FALSE, c);
    g_assert_null (dl->s);
    g_assert_null (hl->s);
  }
  for (guint i = 0; i < n_others; i++)
    check_weight (G_STRUCT_MEMBER (LbTensor *, dev, others[i]),
        G_STRUCT_MEMBER (LbTensor *, host, others[i]), FALSE, c);
}

static WeightCount
check_weights (const LingbotDitWeights * dev, gboolean bf16)
{
  WeightCount c = { 0, 0, 0, 0 };
  const int L = lingbot_dit_get_config (dit)->num_layers;
  check_slots (dev, &dit->w, top_linears, G_N_ELEMENTS (top_linears),
      top_others, G_N_ELEMENTS (top_others), bf16, &c);
  for (int l = 0; l < L; l++)
    check_slots (&dev->blocks[l], &dit->w.blocks[l], block_linears,
        G_N_ELEMENTS (block_linears), block_others,
        G_N_ELEMENTS (block_others), bf16, &c);
  return c;
}

static void
test_weights (void)
{
  g_autoptr (GError) err = NULL;
  const int L = lingbot_dit_get_config (dit)->num_layers;
  const FakeDevStats st0 = fakedev_stats ();
  LingbotDitWeights w;
  gboolean owned;
  gsize nbytes;

  /* the CPU backend ignores the mode: the model's own tensors */
  LbStream *cs = lb_cpu_backend ()->stream_new (lb_cpu_backend (), 0, &err);
  cs->math = LB_MATH_BF16;
  g_assert_true (lingbot_dit_weights_init (&w, &owned, &nbytes, cs, dit, &err));
  g_assert_no_error (err);
  g_assert_false (owned);
  g_assert_cmpuint (nbytes, ==, 0);
  g_assert_true (w.blocks[L - 1].ffn2.w == dit->w.blocks[L - 1].ffn2.w);
  g_assert_true (w.patch.w == dit->w.patch.w);
  lingbot_dit_weights_clear (&w, owned, L);
  lb_cpu_backend ()->stream_free (cs);

  /* f32 on the device: every tensor f32, 4 bytes per element */
  LbStream *ds = fakedev_backend ()->stream_new (fakedev_backend (), 1,
      &err);
  g_assert_cmpint (ds->math, ==, LB_MATH_FP32);
  g_assert_true (lingbot_dit_weights_init (&w, &owned, &nbytes, ds, dit, &err));
  g_assert_no_error (err);
  WeightCount c32 = check_weights (&w, FALSE);
  g_assert_cmpuint (nbytes, ==, c32.bytes);
  lingbot_dit_weights_clear (&w, owned, L);

  /* bf16: linear w in bf16 (2 bytes), the rest f32 */
  ds->math = LB_MATH_BF16;
  g_assert_true (lingbot_dit_weights_init (&w, &owned, &nbytes, ds, dit, &err));
  g_assert_no_error (err);
  g_assert_true (owned);
  WeightCount c16 = check_weights (&w, TRUE);
  g_assert_cmpuint (nbytes, ==, c16.bytes);
  /* 10 top-level linears and 14 per block; biases, norms, modulations */
  g_assert_cmpint (c16.n_bf16, ==, 10 + 14 * L);
  g_assert_cmpint (c16.n_f32, ==, c32.n_f32 - c16.n_bf16);
  g_assert_cmpuint (c32.bf16_elems, ==, 0);
  g_assert_cmpuint (c16.bytes, ==, c32.bytes - 2 * c16.bf16_elems);
  /* dit_tiny is mostly matrices: under 60% of the f32 bytes */
  g_assert_cmpuint (c16.bytes, <, c32.bytes * 6 / 10);
  g_print ("# weights on the device: f32 %" G_GSIZE_FORMAT " bytes, bf16 "
      "mode %" G_GSIZE_FORMAT " bytes (%d bf16 matrices, %d f32 tensors)\n",
      c32.bytes, c16.bytes, c16.n_bf16, c16.n_f32);
  lingbot_dit_weights_clear (&w, owned, L);
  fakedev_backend ()->stream_free (ds);

  const FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.bad, ==, st0.bad);
  g_assert_cmpint (st.live_blocks, ==, st0.live_blocks);
}

/* ------------------------------------------------------------------------ */
/* (b)-(d) the stream                                                       */
/* ------------------------------------------------------------------------ */

/* Every tensor the session let us see, in order, each as a run of floats. */
typedef struct
{
  GArray *data;                 /* float */
  GArray *len;                  /* gsize per tensor */
  GPtrArray *name;
  int n_steps;
  gint64 chunk;
} Record;

static void
record_add (Record * rec, const char *name, const LbTensor * t)
{
  g_assert_cmpint (t->device.type, ==, LB_DEVICE_CPU);
  g_assert_cmpint (t->dtype, ==, LB_DTYPE_F32);
  gsize n = (gsize) lb_tensor_numel (t);
  g_array_append_vals (rec->data, t->data, (guint) n);
  g_array_append_val (rec->len, n);
  g_ptr_array_add (rec->name, g_strdup (name));
}

static void
record_clear (Record * rec)
{
  g_array_unref (rec->data);
  g_array_unref (rec->len);
  g_ptr_array_unref (rec->name);
}

static void
on_step (LingbotDitSession * ses, int64_t chunk, int step,
    const LbTensor * x_in, const LbTensor * pred, const LbTensor * x0,
    gpointer user_data)
{
  (void) ses;
  Record *rec = user_data;
  char name[64];
  g_snprintf (name, sizeof name, "chunk%" G_GINT64_FORMAT ".step%d.x_in",
      chunk, step);
  record_add (rec, name, x_in);
  g_snprintf (name, sizeof name, "chunk%" G_GINT64_FORMAT ".step%d.pred",
      chunk, step);
  record_add (rec, name, pred);
  if (x0) {
    g_snprintf (name, sizeof name, "chunk%" G_GINT64_FORMAT ".step%d.x0",
        chunk, step);
    record_add (rec, name, x0);
  }
  rec->n_steps++;
}

typedef struct
{
  LbMathMode want;
  int n_checked;
} MathCheck;

static gboolean
check_stream_math (LbRank * rank, gpointer data, GError ** error)
{
  (void) error;
  MathCheck *mc = data;
  g_assert_cmpint (rank->stream->math, ==, mc->want);
  g_atomic_int_inc (&mc->n_checked);
  return TRUE;
}

/* One dit_tiny stream on @group with @math; returns the golden error of
 * the worst denoised chunk in *@golden_err. */
static Record
run_stream (LbWorkerGroup * group, LbMathMode math, double *golden_err)
{
  g_autoptr (GError) err = NULL;
  const LingbotDitConfig *cfg = lingbot_dit_get_config (dit);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  opt.math = math;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  g_assert_nonnull (ses);

  /* the session set every device rank's math; the CPU's stay f32 */
  const gboolean on_cpu = lb_worker_group_get_rank (group,
      0)->stream->backend->device_type == LB_DEVICE_CPU;
  MathCheck mc = { on_cpu && math != LB_MATH_FP8 ? LB_MATH_FP32 : math, 0 };
  g_assert_true (lb_worker_group_run (group, check_stream_math, &mc, &err));
  g_assert_no_error (err);
  g_assert_cmpint (mc.n_checked, ==, lb_worker_group_get_n_ranks (group));

  Record rec = { g_array_new (FALSE, FALSE, sizeof (float)),
    g_array_new (FALSE, FALSE, sizeof (gsize)),
    g_ptr_array_new_with_free_func (g_free), 0, 0
  };
  lingbot_dit_session_set_step_callback (ses, on_step, &rec);
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  int64_t kvshape[4] = { 1, 150, cfg->num_heads, cfg->dim / cfg->num_heads };
  g_autoptr (LbTensor) k = lb_tensor_new (LB_DTYPE_F32, 4, kvshape);
  g_autoptr (LbTensor) v = lb_tensor_new (LB_DTYPE_F32, 4, kvshape);
  *golden_err = 0.0;
  for (int c = 0; c < 4; c++) {
    char name[96];
    const LbTensor *noise[4];
    const LbTensor *y, *ctl;
    dit_fixture_chunk (fixture, c, noise, &y, &ctl);
    g_assert_true (lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
            &err));
    g_assert_no_error (err);
    g_snprintf (name, sizeof name, "chunk%d.out", c);
    record_add (&rec, name, out);
    g_snprintf (name, sizeof name, "output.chunk%d.denoised", c);
    const LbTensor *g = dit_fixture_get (fixture, name);
    *golden_err = MAX (*golden_err, dit_rel_error (out->data, g,
            lb_tensor_numel (g)));
    for (int l = 0; l < cfg->num_layers; l++) {
      g_assert_true (lingbot_dit_session_get_kv_cache (ses, l, k, v, &err));
      g_assert_no_error (err);
      g_snprintf (name, sizeof name, "chunk%d.layer%d.cache_k", c, l);
      record_add (&rec, name, k);
      g_snprintf (name, sizeof name, "chunk%d.layer%d.cache_v", c, l);
      record_add (&rec, name, v);
    }
  }
  g_assert_cmpint (rec.n_steps, ==, 20);
  lingbot_dit_session_free (ses);
  return rec;
}

static LbWorkerGroup *
group_new (LbBackend * be, int n_ranks)
{
  g_autoptr (GError) err = NULL;
  LbWorkerGroupOptions go = { 0, NULL, "dit-precision-test" };
  LbWorkerGroup *group = lb_worker_group_new (be, n_ranks, NULL, &go, &err);
  g_assert_no_error (err);
  return group;
}

/* Worst per-tensor rel_to_max of @got against @ref (same layout); names
 * the worst tensor and checks every value is finite. */
static double
record_error (const Record * got, const Record * ref, const char **worst,
    double *worst_out)
{
  g_assert_cmpuint (got->len->len, ==, ref->len->len);
  g_assert_cmpuint (got->data->len, ==, ref->data->len);
  const float *a = (const float *) got->data->data;
  const float *b = (const float *) ref->data->data;
  double max_rel = 0.0;
  *worst_out = 0.0;
  gsize off = 0;
  for (guint t = 0; t < got->len->len; t++) {
    gsize n = g_array_index (got->len, gsize, t);
    g_assert_cmpuint (n, ==, g_array_index (ref->len, gsize, t));
    double maxr = 0.0, maxd = 0.0;
    for (gsize i = 0; i < n; i++) {
      g_assert_true (isfinite (a[off + i]));
      maxr = MAX (maxr, fabs ((double) b[off + i]));
      maxd = MAX (maxd, fabs ((double) a[off + i] - b[off + i]));
    }
    double rel = maxr > 0.0 ? maxd / maxr : maxd;
    if (rel > max_rel) {
      max_rel = rel;
      *worst = g_ptr_array_index (got->name, t);
    }
    if (g_str_has_suffix (g_ptr_array_index (got->name, t), ".out"))
      *worst_out = MAX (*worst_out, rel);
    off += n;
  }
  return max_rel;
}

static gboolean
record_equal (const Record * a, const Record * b)
{
  return a->data->len == b->data->len &&
      memcmp (a->data->data, b->data->data, a->data->len * sizeof (float)) == 0;
}

/* Four chunks of the dit_tiny inputs through @m on @n_ranks fakedev ranks
 * in @math; the denoised outputs' bytes. */
static GByteArray *
run_random (LingbotDit * m, int n_ranks, LbMathMode math)
{
  g_autoptr (GError) err = NULL;
  LbWorkerGroup *group = group_new (fakedev_backend (), n_ranks);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  opt.math = math;
  LingbotDitSession *ses = lingbot_dit_session_new (m, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  GByteArray *bytes = g_byte_array_new ();
  for (int c = 0; c < 4; c++) {
    const LbTensor *noise[4];
    const LbTensor *y, *ctl;
    dit_fixture_chunk (fixture, c, noise, &y, &ctl);
    g_assert_true (lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
            &err));
    g_assert_no_error (err);
    for (int64_t i = 0; i < lb_tensor_numel (out); i++)
      g_assert_true (isfinite (((float *) out->data)[i]));
    g_byte_array_append (bytes, out->data, (guint) lb_tensor_nbytes (out));
  }
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
  return bytes;
}

/* A random model of dit_tiny's shape with 4 heads of 128 (the 14B
 * model's head dim), FFN width @ffn_dim, weights from @seed. */
static LingbotDit *
random_hd128 (int ffn_dim, guint seed)
{
  g_autoptr (GError) err = NULL;
  LingbotDitConfig cfg = *lingbot_dit_get_config (dit);
  cfg.dim = 512;
  cfg.num_heads = 4;
  cfg.ffn_dim = ffn_dim;
  LingbotDit *m = lingbot_dit_new_random (&cfg, seed, &err);
  g_assert_no_error (err);
  return m;
}

/* With head dim 128 (the 14B model's) q crosses the ranks as bf16 as well
 * (the attention op rounds it to bf16 in LB_MATH_BF16, kernels/ops.h), and
 * k, v and the output as for dit_tiny: a random model of dit_tiny's shape
 * with 4 heads of 128 gives, in bf16, the same bits on 2 ranks as on 1,
 * with the exchanges on the compute stream and overlapped in 2 head
 * groups. */
static void
test_bf16_exchanges_hd128 (void)
{
  LingbotDit *m = random_hd128 (512, 11);
  g_autoptr (GByteArray) r1 = run_random (m, 1, LB_MATH_BF16);
  g_autoptr (GByteArray) r2 = run_random (m, 2, LB_MATH_BF16);
  g_setenv ("LINGBOT_COMM_OVERLAP", "1", TRUE);
  g_setenv ("LINGBOT_COMM_OUT_GROUPS", "2", TRUE);
  g_autoptr (GByteArray) r2o = run_random (m, 2, LB_MATH_BF16);
  g_unsetenv ("LINGBOT_COMM_OVERLAP");
  g_unsetenv ("LINGBOT_COMM_OUT_GROUPS");
  g_autoptr (GByteArray) f1 = run_random (m, 1, LB_MATH_FP32);
  g_assert_cmpuint (r1->len, ==, r2->len);
  g_assert_true (memcmp (r1->data, r2->data, r1->len) == 0);
  g_assert_true (memcmp (r1->data, r2o->data, r1->len) == 0);
  /* and bf16 math is in effect (q rounded, bf16 weights and cache) */
  g_assert_true (memcmp (r1->data, f1->data, r1->len) != 0);
  g_print ("# dit hd 128 bf16: 2 ranks (q, k, v, o exchanged as bf16; also "
      "overlapped in 2 head groups) bit-identical to 1 over %u bytes\n",
      r1->len);
  lingbot_dit_unref (m);
}

static void
test_stream (void)
{
  const FakeDevStats st0 = fakedev_stats ();
  double g_cpu, g16[2], g_again;
  const char *worst = NULL;
  double worst_out;

  LbWorkerGroup *cpu1 = group_new (lb_cpu_backend (), 1);
  Record cpu = run_stream (cpu1, LB_MATH_FP32, &g_cpu);
  /* the CPU backend ignores the mode: bit-identical */
  Record cpu_bf16 = run_stream (cpu1, LB_MATH_BF16, &g_again);
  g_assert_true (record_equal (&cpu, &cpu_bf16));
  record_clear (&cpu_bf16);
  lb_worker_group_unref (cpu1);
  g_assert_cmpfloat (g_cpu, <=, DIT_GOLDEN_TOL);

  Record r16[2];
  for (int i = 0; i < 2; i++) {
    const int n_ranks = i + 1;
    LbWorkerGroup *group = group_new (fakedev_backend (), n_ranks);
    r16[i] = run_stream (group, LB_MATH_BF16, &g16[i]);
    double e = record_error (&r16[i], &cpu, &worst, &worst_out);
    g_print ("# dit bf16 on fakedev, %d rank(s): max rel error vs CPU f32 "
        "%.3g (worst %s), outputs %.3g; vs golden outputs %.3g (CPU f32: "
        "%.3g); tolerance %g\n", n_ranks, e, worst, worst_out, g16[i],
        g_cpu, BF16_TOL);
    /* (b) within the bf16 tolerance, and really bf16 */
    g_assert_cmpfloat (e, <=, BF16_TOL);
    g_assert_cmpfloat (g16[i], <=, BF16_TOL);
    g_assert_cmpfloat (worst_out, >=, BF16_MIN_EFFECT);
    g_assert_cmpfloat (g16[i], >=, BF16_MIN_EFFECT);

    /* (d) back to f32 on the same group (the streams' math reset): the
     * CPU result bit for bit */
    Record r32 = run_stream (group, LB_MATH_FP32, &g_again);
    if (n_ranks == 1)
      g_assert_true (record_equal (&r32, &cpu));
    else
      g_assert_cmpfloat (record_error (&r32, &cpu, &worst, &worst_out), <=,
          1e-5);
    record_clear (&r32);
    lb_worker_group_unref (group);
  }
  /* (c) the sharding does not change the bf16 math: k, v and the
   * attention output cross the ranks as bf16 (the cache and the output
   * projection round them anyway), also overlapped and in head groups */
  g_assert_true (record_equal (&r16[0], &r16[1]));
  g_print ("# dit bf16: 1 and 2 ranks bit-identical over %u floats\n",
      r16[0].data->len);
  g_setenv ("LINGBOT_COMM_OVERLAP", "1", TRUE);
  g_setenv ("LINGBOT_COMM_OUT_GROUPS", "2", TRUE);
  LbWorkerGroup *g2 = group_new (fakedev_backend (), 2);
  Record r_over = run_stream (g2, LB_MATH_BF16, &g_again);
  g_unsetenv ("LINGBOT_COMM_OVERLAP");
  g_unsetenv ("LINGBOT_COMM_OUT_GROUPS");
  g_assert_true (record_equal (&r16[0], &r_over));
  g_print ("# dit bf16, 2 ranks, overlapped bf16 exchanges in 2 head groups: "
      "bit-identical to 1 rank\n");
  record_clear (&r_over);
  lb_worker_group_unref (g2);

  /* (d) */
  const FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.bad, ==, st0.bad);
  g_assert_cmpint (st.bad, ==, 0);
  g_assert_cmpint (st.n_ops, >, st0.n_ops);
  g_assert_cmpint (st.live_blocks, ==, st0.live_blocks);
  record_clear (&r16[0]);
  record_clear (&r16[1]);
  record_clear (&cpu);
}

/* ------------------------------------------------------------------------ */
/* (f) fp8                                                                  */
/* ------------------------------------------------------------------------ */

/* @d against host f32 @h: f8e4m3 codes and f32 scales equal to the host
 * row quantisation (lb_quantize_e4m3_row()), bit for bit. */
static gsize
check_fp8_linear (const LingbotDitLinear * dl, const LingbotDitLinear * hl)
{
  if (hl->w == NULL) {
    g_assert_null (dl->w);
    g_assert_null (dl->s);
    return 0;
  }
  const int64_t rows = hl->w->shape[0], cols = hl->w->shape[1];
  g_assert_cmpint (dl->w->dtype, ==, LB_DTYPE_F8E4M3);
  g_assert_true (lb_tensor_same_shape (dl->w, hl->w));
  g_assert_nonnull (dl->s);
  g_assert_cmpint (dl->s->dtype, ==, LB_DTYPE_F32);
  g_assert_cmpint (lb_tensor_numel (dl->s), ==, rows);
  g_autofree uint8_t *q = g_malloc (MAX (cols, 1));
  for (int64_t r = 0; r < rows; r++) {
    float sc;
    lb_quantize_e4m3_row ((const float *) hl->w->data + r * cols, cols, q, &sc);
    g_assert_true (memcmp (q, (const uint8_t *) dl->w->data + r * cols,
            cols) == 0);
    g_assert_cmpfloat (((const float *) dl->s->data)[r], ==, sc);
  }
  /* the bias as stored */
  g_assert_true (memcmp (dl->b->data, hl->b->data,
          lb_tensor_nbytes (hl->b)) == 0);
  return lb_tensor_nbytes (dl->w) + lb_tensor_nbytes (dl->s) +
      lb_tensor_nbytes (dl->b);
}

/* The weights of an LB_MATH_FP8 rank, on fakedev and on the CPU (which
 * then owns quantised copies too): every linear w e4m3 with its scales,
 * the rest bit-identical f32. */
static void
test_fp8_weights (void)
{
  g_autoptr (GError) err = NULL;
  const int L = lingbot_dit_get_config (dit)->num_layers;
  const FakeDevStats st0 = fakedev_stats ();
  LbBackend *bes[2] = { fakedev_backend (), lb_cpu_backend () };
  for (int b = 0; b < 2; b++) {
    LbStream *s = bes[b]->stream_new (bes[b], 0, &err);
    g_assert_no_error (err);
    s->math = LB_MATH_FP8;
    LingbotDitWeights w;
    gboolean owned;
    gsize nbytes, want = 0;
    int n_lin = 0;
    g_assert_true (lingbot_dit_weights_init (&w, &owned, &nbytes, s, dit,
            &err));
    g_assert_no_error (err);
    g_assert_true (owned);
    for (guint i = 0; i < G_N_ELEMENTS (top_linears); i++, n_lin++)
      want += check_fp8_linear (G_STRUCT_MEMBER_P (&w, top_linears[i]),
          G_STRUCT_MEMBER_P (&dit->w, top_linears[i]));
    for (guint i = 0; i < G_N_ELEMENTS (top_others); i++)
      want += lb_tensor_nbytes (G_STRUCT_MEMBER (LbTensor *, &w,
              top_others[i]));
    for (int l = 0; l < L; l++) {
      for (guint i = 0; i < G_N_ELEMENTS (block_linears); i++, n_lin++)
        want += check_fp8_linear (G_STRUCT_MEMBER_P (&w.blocks[l],
                block_linears[i]), G_STRUCT_MEMBER_P (&dit->w.blocks[l],
                block_linears[i]));
      for (guint i = 0; i < G_N_ELEMENTS (block_others); i++) {
        const LbTensor *d = G_STRUCT_MEMBER (LbTensor *, &w.blocks[l],
            block_others[i]);
        const LbTensor *h = G_STRUCT_MEMBER (LbTensor *, &dit->w.blocks[l],
            block_others[i]);
        g_assert_cmpint (d->dtype, ==, LB_DTYPE_F32);
        g_assert_true (memcmp (d->data, h->data, lb_tensor_nbytes (h)) == 0);
        want += lb_tensor_nbytes (d);
      }
    }
    g_assert_cmpint (n_lin, ==, 10 + 14 * L);
    g_assert_cmpuint (nbytes, ==, want);
    g_print ("# weights in fp8 on %s: %" G_GSIZE_FORMAT " bytes (%d e4m3 "
        "matrices with their scales)\n", bes[b]->name, nbytes, n_lin);
    lingbot_dit_weights_clear (&w, owned, L);
    bes[b]->stream_free (s);
  }
  const FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.bad, ==, st0.bad);
  g_assert_cmpint (st.live_blocks, ==, st0.live_blocks);
}

/* The fp8 stream: fakedev bit-identical to the CPU oracle at 1 and 2
 * ranks; its error against the f32 CPU run, the golden and the bf16
 * stream reported and bounded; a later f32 session on the same CPU group
 * is the f32 result again. */
static void
test_fp8_stream (void)
{
  const FakeDevStats st0 = fakedev_stats ();
  double g32, g16, g8c, g8f, g_again;
  const char *worst = NULL;
  double worst_out;

  LbWorkerGroup *cpu1 = group_new (lb_cpu_backend (), 1);
  Record cpu = run_stream (cpu1, LB_MATH_FP32, &g32);
  Record cpu8 = run_stream (cpu1, LB_MATH_FP8, &g8c);
  Record again = run_stream (cpu1, LB_MATH_FP32, &g_again);
  g_assert_true (record_equal (&again, &cpu));
  record_clear (&again);
  lb_worker_group_unref (cpu1);

  LbWorkerGroup *fd1 = group_new (fakedev_backend (), 1);
  Record f16 = run_stream (fd1, LB_MATH_BF16, &g16);
  Record f8 = run_stream (fd1, LB_MATH_FP8, &g8f);
  lb_worker_group_unref (fd1);
  /* the emulated device runs the CPU oracle's fp8 path bit for bit */
  g_assert_true (record_equal (&f8, &cpu8));
  g_assert_cmpfloat (g8f, ==, g8c);

  for (int n_ranks = 2; n_ranks <= 2; n_ranks++) {
    LbWorkerGroup *c2 = group_new (lb_cpu_backend (), n_ranks);
    LbWorkerGroup *f2 = group_new (fakedev_backend (), n_ranks);
    double a, b;
    Record rc = run_stream (c2, LB_MATH_FP8, &a);
    Record rf = run_stream (f2, LB_MATH_FP8, &b);
    g_assert_true (record_equal (&rc, &rf));
    /* the sharding: not bit for bit (measured below) */
    double o2;
    const char *w2 = NULL;
    const double e2 = record_error (&rc, &cpu8, &w2, &o2);
    g_print ("# dit fp8: %d ranks vs 1 rank: max rel %.3g (worst %s), "
        "outputs %.3g\n", n_ranks, e2, w2, o2);
    g_assert_cmpfloat (e2, <=, FP8_TOL);
    record_clear (&rc);
    record_clear (&rf);
    lb_worker_group_unref (c2);
    lb_worker_group_unref (f2);
  }
  g_print ("# dit fp8: fakedev and CPU bit-identical over %u floats at 1 "
      "and 2 ranks\n", cpu8.data->len);

  const double e32 = record_error (&f8, &cpu, &worst, &worst_out);
  const char *worst32 = worst;
  const double out32 = worst_out;
  double out16;
  const double e16 = record_error (&f8, &f16, &worst, &out16);
  g_test_message ("dit fp8: max rel error vs CPU f32 %.3g (worst %s), "
      "outputs %.3g; vs bf16 %.3g (worst %s), outputs %.3g; vs golden "
      "outputs %.3g (bf16 %.3g, f32 %.3g); tolerance %g", e32, worst32,
      out32, e16, worst, out16, g8f, g16, g32, FP8_TOL);
  g_print ("# dit fp8: max rel error vs CPU f32 %.3g (worst %s), outputs "
      "%.3g; vs bf16 %.3g (worst %s), outputs %.3g; vs golden outputs %.3g "
      "(bf16 %.3g, f32 %.3g); tolerance %g\n", e32, worst32, out32, e16,
      worst, out16, g8f, g16, g32, FP8_TOL);
  g_assert_cmpfloat (e32, <=, FP8_TOL);
  g_assert_cmpfloat (e16, <=, FP8_TOL);
  g_assert_cmpfloat (g8f, <=, FP8_TOL);
  g_assert_cmpfloat (out16, >=, FP8_MIN_EFFECT);
  g_assert_cmpfloat (out32, >=, FP8_MIN_EFFECT);

  const FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.bad, ==, st0.bad);
  g_assert_cmpint (st.live_blocks, ==, st0.live_blocks);
  record_clear (&cpu);
  record_clear (&cpu8);
  record_clear (&f16);
  record_clear (&f8);
}

/* ------------------------------------------------------------------------ */
/* (e) the KV cache                                                         */
/* ------------------------------------------------------------------------ */

/* Every rank of a session on @group with @math: the cache's dtype and
 * bytes; returns rank 0's bytes. */
static gsize
kv_info (LbWorkerGroup * group, LbMathMode math, LbDType want)
{
  g_autoptr (GError) err = NULL;
  const LingbotDitConfig *cfg = lingbot_dit_get_config (dit);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  opt.math = math;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  const int R = lb_worker_group_get_n_ranks (group);
  const int64_t cap = lingbot_dit_session_get_cache_capacity (ses);
  gsize bytes0 = 0;
  for (int r = 0; r < R; r++) {
    LbDType dt = LB_DTYPE_COUNT;
    gsize nb = 0;
    g_assert_true (lingbot_dit_session_get_kv_info (ses, r, &dt, &nb));
    g_assert_cmpint (dt, ==, want);
    g_assert_cmpuint (nb, ==, lingbot_dit_kv_cache_bytes (cfg, cap, R, want));
    /* 2 L cap (D / R) elements */
    g_assert_cmpuint (nb, ==, (gsize) (2 * cfg->num_layers * cap *
            (cfg->dim / R)) * lb_dtype_size (want));
    if (r == 0)
      bytes0 = nb;
  }
  g_assert_false (lingbot_dit_session_get_kv_info (ses, R, NULL, NULL));
  lingbot_dit_session_free (ses);
  return bytes0;
}

/* dit_tiny chunks without a step callback (so a 1-rank device session
 * replays graphs once its window is full), the outputs' bytes. */
static GByteArray *
run_plain (LbWorkerGroup * group, LbMathMode math, int n_chunks)
{
  g_autoptr (GError) err = NULL;
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  opt.math = math;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  GByteArray *bytes = g_byte_array_new ();
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  for (int c = 0; c < n_chunks; c++) {
    const LbTensor *noise[4];
    const LbTensor *y, *ctl;
    dit_fixture_chunk (fixture, c % 4, noise, &y, &ctl);
    g_assert_true (lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
            &err));
    g_assert_no_error (err);
    g_byte_array_append (bytes, out->data, (guint) lb_tensor_nbytes (out));
  }
  lingbot_dit_session_free (ses);
  return bytes;
}

static void
test_kv_cache (void)
{
  const FakeDevStats st0 = fakedev_stats ();
  /* the CPU keeps f32 whatever the mode */
  LbWorkerGroup *cpu1 = group_new (lb_cpu_backend (), 1);
  const gsize cpu_bytes = kv_info (cpu1, LB_MATH_BF16, LB_DTYPE_F32);
  lb_worker_group_unref (cpu1);
  for (int R = 1; R <= 2; R++) {
    LbWorkerGroup *group = group_new (fakedev_backend (), R);
    const gsize b32 = kv_info (group, LB_MATH_FP32, LB_DTYPE_F32);
    const gsize b16 = kv_info (group, LB_MATH_BF16, LB_DTYPE_BF16);
    g_assert_cmpuint (2 * b16, ==, b32);
    if (R == 1)
      g_assert_cmpuint (b32, ==, cpu_bytes);
    g_print ("# dit_tiny KV cache per rank, %d rank(s): f32 %" G_GSIZE_FORMAT
        " bytes, bf16 %" G_GSIZE_FORMAT " bytes\n", R, b32, b16);
    lb_worker_group_unref (group);
  }

  /* the 14B model at 832x480: latent 60x104, T_f = 30 x 52 = 1560, a
   * window of 18 frames = 28080 slots */
  LingbotDitConfig c14;
  lingbot_dit_config_init_preset (&c14, LINGBOT_DIT_PRESET_14B);
  const int64_t cap14 = (int64_t) c14.local_attn_frames * 30 * 52;
  g_assert_cmpint (cap14, ==, 28080);
  g_assert_cmpuint (lingbot_dit_kv_cache_bytes (&c14, cap14, 1,
          LB_DTYPE_F32), ==, G_GUINT64_CONSTANT (46006272000));
  for (int R = 1; R <= 4; R *= 4)
    g_print ("# 14B at 832x480 (window %" G_GINT64_FORMAT " keys), KV cache "
        "per rank at %d rank(s): f32 %.2f GB, bf16 %.2f GB\n", cap14, R,
        lingbot_dit_kv_cache_bytes (&c14, cap14, R, LB_DTYPE_F32) / 1e9,
        lingbot_dit_kv_cache_bytes (&c14, cap14, R, LB_DTYPE_BF16) / 1e9);

  /* graph replay over a bf16 cache: 9 chunks on one rank, the steady ones
   * replayed, the same bytes as every op run directly */
  LbWorkerGroup *dev1 = group_new (fakedev_backend (), 1);
  const FakeDevStats st1 = fakedev_stats ();
  g_autoptr (GByteArray) graphs = run_plain (dev1, LB_MATH_BF16, 9);
  const FakeDevStats st2 = fakedev_stats ();
  /* one graph per pass (4 + 1), each captured once */
  g_assert_cmpint (st2.n_captures - st1.n_captures, ==, 5);
  g_assert_cmpint (st2.n_launches - st1.n_launches, >=, 10);
  g_setenv ("LINGBOT_DIT_GRAPHS", "0", TRUE);
  g_autoptr (GByteArray) direct = run_plain (dev1, LB_MATH_BF16, 9);
  g_unsetenv ("LINGBOT_DIT_GRAPHS");
  g_assert_cmpint (fakedev_stats ().n_launches, ==, st2.n_launches);
  g_assert_cmpuint (graphs->len, ==, direct->len);
  g_assert_true (memcmp (graphs->data, direct->data, graphs->len) == 0);
  g_print ("# dit bf16 (bf16 KV cache): graph replay bit-identical to "
      "op-by-op over %u bytes, %d launches\n", graphs->len,
      st2.n_launches - st1.n_launches);
  lb_worker_group_unref (dev1);

  const FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.bad, ==, st0.bad);
  g_assert_cmpint (st.live_blocks, ==, st0.live_blocks);
}

/* An out-of-range mode is refused before anything is allocated. */
static void
test_bad_mode (void)
{
  g_autoptr (GError) err = NULL;
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  opt.math = (LbMathMode) 7;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, NULL, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_null (ses);
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, "DiT session: math mode 7, expected "
      "LB_MATH_FP32 (0), LB_MATH_BF16 (1) or LB_MATH_FP8 (2)");
}

/* LingbotWorldOptions.precision: NULL and "fp32" are LB_MATH_FP32, "bf16"
 * LB_MATH_BF16, anything else (case matters) fails lingbot_world_new()
 * before it looks at the model. */
static void
test_world_precision (void)
{
  static const struct
  {
    const char *value;
    gboolean ok;
    LbMathMode math;
  } cases[] = {
    {NULL, TRUE, LB_MATH_FP32}, {"fp32", TRUE, LB_MATH_FP32},
    {"bf16", TRUE, LB_MATH_BF16}, {"fp8", TRUE, LB_MATH_FP8},
    {"FP8", FALSE, 0}, {"BF16", FALSE, 0}, {"fp16", FALSE, 0},
    {"", FALSE, 0}, {"bogus", FALSE, 0},
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autoptr (GError) err = NULL;
    LingbotPrecision math = (LingbotPrecision) 99;
    gboolean ok = lingbot_world_parse_precision (cases[i].value, &math, &err);
    g_assert_cmpint (ok, ==, cases[i].ok);
    if (ok) {
      g_assert_no_error (err);
      g_assert_cmpint (math, ==, cases[i].math);
      continue;
    }
    g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
    g_autofree char *want = g_strdup_printf ("world: unknown precision '%s' "
        "(choose fp32, bf16 or fp8)", cases[i].value);
    g_assert_cmpstr (err->message, ==, want);
  }

  g_autoptr (GError) err = NULL;
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  g_assert_null (wo.precision);
  wo.model_path = "/nonexistent/lingbot-model";
  wo.precision = "bogus";
  g_assert_null (lingbot_world_new (&wo, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, "world: unknown precision 'bogus' "
      "(choose fp32, bf16 or fp8)");
  /* a valid precision gets as far as the model */
  g_clear_error (&err);
  wo.precision = "bf16";
  g_assert_null (lingbot_world_new (&wo, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_NOT_FOUND);
}

/* 2.5 item 1: a bf16 rank's norms and GELU write the block's GEMM inputs
 * in bf16 (rs->a16, rs->h16), the attention writes its output into a16
 * in bf16 for the output projections, and the GEMMs read them as they
 * are.  That gives the bits of the f32 inputs that the GEMM rounds itself
 * (LINGBOT_DIT_GEMM_INPUTS=f32): on 1 and 2 ranks, and with the exchanges
 * overlapped, a random model of dit_tiny's shape with head dim 128 gives
 * the same bytes both ways, and only the first way hands gemm bf16 x.
 * With several ranks the bf16 exchanges hand the self-attention a bf16 q
 * and take its bf16 output both ways (they do not depend on a16). */
static void
test_bf16_gemm_inputs (void)
{
  LingbotDit *m = random_hd128 (768, 13);
  int cross = 0;                /* cross-attention calls of one rank */
  g_autoptr (GByteArray) one_rank = NULL;       /* run 0's bytes */
  for (int run = 0; run < 3; run++) {
    const int n_ranks = run == 0 ? 1 : 2;
    if (run == 2) {
      g_setenv ("LINGBOT_COMM_OVERLAP", "1", TRUE);
      g_setenv ("LINGBOT_COMM_OUT_GROUPS", "2", TRUE);
    }
    const FakeDevStats st0 = fakedev_stats ();
    g_autoptr (GByteArray) b16 = run_random (m, n_ranks, LB_MATH_BF16);
    const FakeDevStats st1 = fakedev_stats ();
    g_setenv ("LINGBOT_DIT_GEMM_INPUTS", "f32", TRUE);
    g_autoptr (GByteArray) b32 = run_random (m, n_ranks, LB_MATH_BF16);
    g_unsetenv ("LINGBOT_DIT_GEMM_INPUTS");
    const FakeDevStats st2 = fakedev_stats ();
    g_unsetenv ("LINGBOT_COMM_OVERLAP");
    g_unsetenv ("LINGBOT_COMM_OUT_GROUPS");
    const int with16 = st1.n_gemm_bf16_x - st0.n_gemm_bf16_x;
    const int out16 = st1.n_attention_bf16_out - st0.n_attention_bf16_out;
    const int out16_f32 = st2.n_attention_bf16_out - st1.n_attention_bf16_out;
    const int q16 = st1.n_attention_bf16_q - st0.n_attention_bf16_q;
    const int q16_f32 = st2.n_attention_bf16_q - st1.n_attention_bf16_q;
    g_assert_cmpuint (b16->len, ==, b32->len);
    g_assert_true (memcmp (b16->data, b32->data, b16->len) == 0);
    /* sharded equals unsharded, through the bf16 exchanges */
    if (run == 0)
      one_rank = g_byte_array_ref (b16);
    g_assert_cmpuint (b16->len, ==, one_rank->len);
    g_assert_true (memcmp (b16->data, one_rank->data, b16->len) == 0);
    g_assert_cmpint (with16, >, 0);
    g_assert_cmpint (st2.n_gemm_bf16_x, ==, st1.n_gemm_bf16_x);
    /* one rank: the self- and cross-attention of every layer-pass write
     * bf16 (into a16), and nothing does with f32 GEMM inputs.  Two ranks:
     * the exchanged self-attention (2 calls a pass when overlapped in 2
     * head groups) reads a bf16 q and writes bf16 either way, and the
     * cross-attention of each rank writes bf16 into a16 */
    g_assert_cmpint (out16, >, 0);
    if (n_ranks == 1) {
      g_assert_cmpint (out16 % 2, ==, 0);
      cross = out16 / 2;
      g_assert_cmpint (q16, ==, 0);
    } else {
      g_assert_cmpint (q16, ==, (run == 2 ? 2 : 1) * n_ranks * cross);
      g_assert_cmpint (out16 - q16, ==, n_ranks * cross);
    }
    g_assert_cmpint (out16_f32, ==, q16);
    g_assert_cmpint (q16_f32, ==, q16);
    g_assert_cmpint (st2.bad, ==, st0.bad);
    g_print ("# dit bf16 GEMM inputs, %d rank(s)%s: %d gemm calls took a "
        "bf16 x, %d attention calls wrote bf16 (%d read a bf16 q); "
        "bit-identical to the f32 inputs over %u bytes\n", n_ranks,
        run == 2 ? " overlapped" : "", with16, out16, q16, b16->len);
  }
  lingbot_dit_unref (m);
}

/* Issue 3.2 item 5: a device rank in fp8 takes the input of the linear
 * layers after each norm (self-attention q, k, v; cross-attention q; the
 * FFN's first layer; the head) as e4m3 codes and row scales written by
 * the norm_fp8 op, and gemm_fp8_q reads them without a quantisation pass.
 * That gives the bits of the f32 norm output quantised by each gemm_fp8
 * (LINGBOT_DIT_GEMM_INPUTS=f32): on 1 and 2 ranks and with the exchanges
 * overlapped, dit_tiny gives the same bytes both ways; every gemm_fp8_q
 * call replaces one gemm_fp8, and only the first way makes any.  The
 * FFN's first layer is gemm_fp8_gelu_q (bias, GELU and the quantisation
 * of the hidden in its epilogue, codes for the second layer's
 * gemm_fp8_q): the FFNs make no gelu_tanh call. */
static void
test_fp8_gemm_inputs (void)
{
  for (int run = 0; run < 3; run++) {
    const int n_ranks = run == 0 ? 1 : 2;
    if (run == 2) {
      g_setenv ("LINGBOT_COMM_OVERLAP", "1", TRUE);
      g_setenv ("LINGBOT_COMM_OUT_GROUPS", "2", TRUE);
    }
    const FakeDevStats st0 = fakedev_stats ();
    g_autoptr (GByteArray) b8 = run_random (dit, n_ranks, LB_MATH_FP8);
    const FakeDevStats st1 = fakedev_stats ();
    g_setenv ("LINGBOT_DIT_GEMM_INPUTS", "f32", TRUE);
    g_autoptr (GByteArray) b32 = run_random (dit, n_ranks, LB_MATH_FP8);
    g_unsetenv ("LINGBOT_DIT_GEMM_INPUTS");
    const FakeDevStats st2 = fakedev_stats ();
    g_unsetenv ("LINGBOT_COMM_OVERLAP");
    g_unsetenv ("LINGBOT_COMM_OUT_GROUPS");
    g_assert_cmpuint (b8->len, ==, b32->len);
    g_assert_true (memcmp (b8->data, b32->data, b8->len) == 0);
    const int q8 = st1.n_gemm_fp8_q - st0.n_gemm_fp8_q;
    const int norms8 = st1.n_norm_fp8 - st0.n_norm_fp8;
    const int g8 = st1.n_gemm_fp8 - st0.n_gemm_fp8;
    const int g32 = st2.n_gemm_fp8 - st1.n_gemm_fp8;
    const int gq8 = st1.n_gemm_fp8_gelu_q - st0.n_gemm_fp8_gelu_q;
    const int gelu8 = st1.n_gelu_tanh - st0.n_gelu_tanh;
    const int gelu32 = st2.n_gelu_tanh - st1.n_gelu_tanh;
    g_assert_cmpint (q8, >, 0);
    g_assert_cmpint (norms8, >, 0);
    /* q, k, v after the first norm, q after the second, the FFN's first
     * layer after the third, and the head's linear after its norm: more
     * GEMMs than norms read the codes */
    g_assert_cmpint (q8, >, norms8);
    /* the FFN's first layer is gemm_fp8_gelu_q (one per block run) and
     * the second reads its codes (gemm_fp8_q): the f32 path's gelu_tanh
     * per FFN is gone (what is left, in both runs, is the text
     * embedding's, once per context), and every gemm_fp8_q or
     * gemm_fp8_gelu_q call replaces one gemm_fp8 */
    g_assert_cmpint (gq8, >, 0);
    g_assert_cmpint (gelu32 - gelu8, ==, gq8);
    g_assert_cmpint (gelu8, <, gq8);
    g_assert_cmpint (g8 + q8 + gq8, ==, g32);
    g_assert_cmpint (st2.n_gemm_fp8_q, ==, st1.n_gemm_fp8_q);
    g_assert_cmpint (st2.n_norm_fp8, ==, st1.n_norm_fp8);
    g_assert_cmpint (st2.n_gemm_fp8_gelu_q, ==, st1.n_gemm_fp8_gelu_q);
    g_assert_cmpint (st2.bad, ==, st0.bad);
    g_print ("# dit fp8 GEMM inputs, %d rank(s)%s: %d norm_fp8 and %d "
        "gemm_fp8_gelu_q calls fed %d gemm_fp8_q calls (%d gemm_fp8 and %d "
        "gelu_tanh left; %d and %d with f32 inputs); bit-identical to the "
        "f32 inputs over %u bytes\n", n_ranks, run == 2 ? " overlapped" : "",
        norms8, gq8, q8, g8, gelu8, g32, gelu32, b8->len);
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

  g_test_add_func ("/dit/precision/weights", test_weights);
  g_test_add_func ("/dit/precision/bad-mode", test_bad_mode);
  g_test_add_func ("/dit/precision/world", test_world_precision);
  g_test_add_func ("/dit/precision/stream", test_stream);
  g_test_add_func ("/dit/precision/fp8-weights", test_fp8_weights);
  g_test_add_func ("/dit/precision/fp8-stream", test_fp8_stream);
  g_test_add_func ("/dit/precision/kv-cache", test_kv_cache);
  g_test_add_func ("/dit/precision/bf16-gemm-inputs", test_bf16_gemm_inputs);
  g_test_add_func ("/dit/precision/fp8-gemm-inputs", test_fp8_gemm_inputs);
  g_test_add_func ("/dit/precision/bf16-exchanges-hd128",
      test_bf16_exchanges_hd128);
  int rc = g_test_run ();
  lingbot_dit_unref (dit);
  lingbot_checkpoint_unref (fixture);
  return rc;
}

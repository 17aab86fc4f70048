/* lingbot-gst: CPU tiled attention against a float64 softmax reference
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "test-ops-common.h"

/* Online softmax in float32: exp/rescale roundings and float accumulation
 * of up to a few hundred p*v terms; logits reach |50| in some cases. */
#define TOL_ATTN 1e-5

typedef struct
{
  int64_t nq, nk, nh, hd;
  gboolean bias, mask, strided;
  float scale, range;           /* inputs uniform in [-range, range) */
  int mask_mode;                /* 0 random, 1 all hidden, 2 first tile hidden */
} Case;

/* Reference in double, over the same (possibly strided) views. */
static void
ref_attention (const LbTensor * q, const LbTensor * k, const LbTensor * v,
    const LbTensor * bias, const guint8 * mask, double scale, double *ref)
{
  int64_t nq = q->shape[0], nh = q->shape[1], hd = q->shape[2];
  int64_t nk = k->shape[0];
  double *logit = g_new (double, MAX (nk, 1));
  for (int64_t h = 0; h < nh; h++)
    for (int64_t i = 0; i < nq; i++) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < nk; j++) {
        if (mask && !mask[j]) {
          logit[j] = -INFINITY;
          continue;
        }
        double d = 0;
        for (int64_t e = 0; e < hd; e++)
          d += (double) at (q, (i * nh + h) * hd + e) *
              at (k, (j * nh + h) * hd + e);
        d *= scale;
        if (bias)
          d += ((float *) bias->data)[(h * nq + i) * nk + j];
        logit[j] = d;
        mx = MAX (mx, d);
      }
      double sum = 0;
      for (int64_t j = 0; j < nk; j++)
        sum += mx == -INFINITY ? 0 : exp (logit[j] - mx);
      for (int64_t e = 0; e < hd; e++) {
        double acc = 0;
        for (int64_t j = 0; j < nk && sum > 0; j++)
          acc += exp (logit[j] - mx) * at (v, (j * nh + h) * hd + e);
        ref[(i * nh + h) * hd + e] = sum > 0 ? acc / sum : 0.0;
      }
    }
  g_free (logit);
}

static void
run_case (const Case * c)
{
  /* strided: q, k, v are head slices of one [N, 3*H, hd] buffer (k/v of a
   * longer cache), out a slice of [Nq, H + 1, hd] */
  int64_t qs[3] = { c->nq, c->strided ? 3 * c->nh : c->nh, c->hd };
  int64_t ks[3] = { c->nk + (c->strided ? 4 : 0),
    c->strided ? 3 * c->nh : c->nh, c->hd
  };
  int64_t os[3] = { c->nq, c->strided ? c->nh + 1 : c->nh, c->hd };
  int64_t bs[3] = { c->nh, c->nq, c->nk }, ms[1] = { c->nk };
  g_autoptr (LbTensor) qb = rand_tensor (3, qs, -c->range, c->range);
  g_autoptr (LbTensor) kb = rand_tensor (3, ks, -c->range, c->range);
  g_autoptr (LbTensor) ob = poisoned (3, os);
  g_autoptr (LbTensor) bias = rand_tensor (3, bs, -3, 3);
  g_autoptr (LbTensor) mask = lb_tensor_new (LB_DTYPE_U8, 1, ms);
  guint8 *md = mask->data;
  int kt;
  lb_cpu_attention_get_tiles (NULL, &kt);
  for (int64_t j = 0; j < c->nk; j++)
    md[j] = c->mask_mode == 1 ? 0 : c->mask_mode == 2 ? j >= kt :
        g_test_rand_int_range (0, 4) != 0;
  if (c->mask && c->mask_mode == 0 && c->nk > 0)
    md[g_test_rand_int_range (0, c->nk)] = 1;

  LbTensor q, k, v, o;
  if (c->strided) {
    lb_tensor_view_narrow (&q, qb, 1, 0, c->nh);
    LbTensor kw;
    lb_tensor_view_narrow (&kw, kb, 0, 2, c->nk);
    lb_tensor_view_narrow (&k, &kw, 1, c->nh, c->nh);
    lb_tensor_view_narrow (&v, &kw, 1, 2 * c->nh, c->nh);
    lb_tensor_view_narrow (&o, ob, 1, 1, c->nh);
  } else {
    lb_tensor_view (&q, qb);
    lb_tensor_view (&k, kb);
    lb_tensor_view (&o, ob);
  }
  g_autoptr (LbTensor) vb = c->strided ? NULL :
      rand_tensor (3, ks, -c->range, c->range);
  if (!c->strided)
    lb_tensor_view (&v, vb);

  double *ref = g_new0 (double, MAX (c->nq * c->nh * c->hd, 1));
  ref_attention (&q, &k, &v, c->bias ? bias : NULL, c->mask ? md : NULL,
      c->scale, ref);
  assert_op_ok (lb_cpu_attention (test_stream (), &q, &k, &v,
          c->bias ? bias : NULL, c->mask ? mask : NULL, c->scale, &o, error));
  g_autofree char *what = g_strdup_printf ("attention Nq %" G_GINT64_FORMAT
      " Nk %" G_GINT64_FORMAT " H %" G_GINT64_FORMAT " hd %" G_GINT64_FORMAT
      "%s%s%s", c->nq, c->nk, c->nh, c->hd, c->bias ? " bias" : "",
      c->mask ? " mask" : "", c->strided ? " strided" : "");
  assert_close (what, &o, ref, TOL_ATTN);
  if (c->strided) {
    /* head 0 of the out buffer is not part of the view */
    for (int64_t i = 0; i < c->nq; i++)
      g_assert_true (isnan (((float *) ob->data)[i * (c->nh + 1) * c->hd]));
  }
  g_free (ref);
}

/* Nq and Nk around the tile sizes, with small tiles so the cases stay
 * cheap: qb = 4, kt = 8. */
static void
test_tile_boundaries (void)
{
  lb_cpu_attention_set_tiles (4, 8);
  const int64_t nks[] = { 1, 7, 8, 9, 16, 29 };
  const int64_t nqs[] = { 1, 3, 4, 5, 13 };
  for (guint a = 0; a < G_N_ELEMENTS (nks); a++)
    for (guint b = 0; b < G_N_ELEMENTS (nqs); b++)
      for (int variant = 0; variant < 4; variant++) {
        Case c = {
          .nq = nqs[b],.nk = nks[a],.nh = 1 + (variant & 1) * 2,
          .hd = variant < 2 ? 16 : 33,
          .bias = variant & 1,.mask = variant >= 2,.strided = variant == 3,
          .scale = 0.25f,.range = 1.0f,
        };
        run_case (&c);
      }
  lb_cpu_attention_set_tiles (0, 0);
}

/* Default tiles: Nk = kt - 1, kt, kt + 1, 3 kt + 5. */
static void
test_default_tiles (void)
{
  lb_cpu_attention_set_tiles (0, 0);
  int qb, kt;
  lb_cpu_attention_get_tiles (&qb, &kt);
  const int64_t nks[] = { kt - 1, kt, kt + 1, 3 * kt + 5 };
  for (guint a = 0; a < G_N_ELEMENTS (nks); a++) {
    Case c = {
      .nq = qb + 3,.nk = nks[a],.nh = 2,.hd = 32,
      .bias = a % 2,.mask = a >= 2,.strided = a == 3,
      .scale = 1.0f / sqrtf (32.0f),.range = 1.0f,
    };
    run_case (&c);
  }
  /* the tiny DiT's self-attention: 60 queries over 150 cached keys */
  Case dit = {.nq = 60,.nk = 150,.nh = 4,.hd = 32,.strided = TRUE,
    .scale = 1.0f / sqrtf (32.0f),.range = 2.0f
  };
  run_case (&dit);
  /* VAE mid attention: one head of 96 channels over 60 pixels */
  Case vae = {.nq = 60,.nk = 60,.nh = 1,.hd = 96,
    .scale = 1.0f / sqrtf (96.0f),.range = 1.0f
  };
  run_case (&vae);
}

/* Large logits: the running maximum changes between tiles and exp would
 * overflow without the rescaling. */
static void
test_large_logits (void)
{
  lb_cpu_attention_set_tiles (8, 16);
  for (int i = 0; i < 4; i++) {
    Case c = {.nq = 21,.nk = 70,.nh = 2,.hd = 64,.bias = i & 1,
      .mask = i >= 2,.scale = 1.0f,.range = 2.0f
    };
    run_case (&c);
  }
  lb_cpu_attention_set_tiles (0, 0);
}

static void
test_masks (void)
{
  lb_cpu_attention_set_tiles (4, 8);
  /* every key hidden: zero output */
  Case all = {.nq = 5,.nk = 19,.nh = 2,.hd = 8,.mask = TRUE,.mask_mode = 1,
    .scale = 1.0f,.range = 1.0f
  };
  run_case (&all);
  /* the whole first tile hidden, with bias */
  Case first = {.nq = 5,.nk = 19,.nh = 2,.hd = 8,.mask = TRUE,.bias = TRUE,
    .mask_mode = 2,.scale = 1.0f,.range = 1.0f
  };
  run_case (&first);
  /* Nk = 0 */
  Case none = {.nq = 3,.nk = 0,.nh = 1,.hd = 4,.scale = 1.0f,.range = 1.0f };
  run_case (&none);
  lb_cpu_attention_set_tiles (0, 0);

  /* a -inf bias hides a key like the mask does */
  int64_t qs[3] = { 2, 1, 4 }, ks[3] = { 3, 1, 4 }, bs[3] = { 1, 2, 3 };
  g_autoptr (LbTensor) q = rand_tensor (3, qs, -1, 1);
  g_autoptr (LbTensor) k = rand_tensor (3, ks, -1, 1);
  g_autoptr (LbTensor) v = rand_tensor (3, ks, -1, 1);
  g_autoptr (LbTensor) b = lb_tensor_new_zeros (LB_DTYPE_F32, 3, bs);
  g_autoptr (LbTensor) o1 = poisoned (3, qs);
  g_autoptr (LbTensor) o2 = poisoned (3, qs);
  int64_t ms[1] = { 3 };
  g_autoptr (LbTensor) m = lb_tensor_new (LB_DTYPE_U8, 1, ms);
  guint8 *md = m->data;
  md[0] = 1;
  md[1] = 0;
  md[2] = 1;
  ((float *) b->data)[1] = -INFINITY;
  ((float *) b->data)[4] = -INFINITY;
  assert_op_ok (lb_cpu_attention (test_stream (), q, k, v, b, NULL, 1.0f, o1,
          error));
  assert_op_ok (lb_cpu_attention (test_stream (), q, k, v, NULL, m, 1.0f, o2,
          error));
  g_assert_cmpmem (o1->data, 32, o2->data, 32);
}

/* kernels/ops.h: on an LB_MATH_BF16 stream with hd 64 or 128 the op
 * rounds q to bf16 first: bit for bit the f32 stream's result on the
 * rounded q (and, since that result changes, not the unrounded one);
 * other head dims ignore the mode. */
static void
test_bf16_stream_rounds_q (void)
{
  static const int64_t hds[3] = { 64, 128, 32 };
  LbStream *s16 = lb_cpu_backend ()->stream_new (lb_cpu_backend (), 0, NULL);
  s16->math = LB_MATH_BF16;
  for (int c = 0; c < 3; c++) {
    const int64_t hd = hds[c];
    int64_t qs[3] = { 37, 3, hd }, ks[3] = { 70, 3, hd };
    g_autoptr (LbTensor) q = rand_tensor (3, qs, -2, 2);
    g_autoptr (LbTensor) k = rand_tensor (3, ks, -2, 2);
    g_autoptr (LbTensor) v = rand_tensor (3, ks, -1, 1);
    g_autoptr (LbTensor) qr = lb_tensor_new (LB_DTYPE_F32, 3, qs);
    const float *qd = q->data;
    float *qrd = qr->data;
    for (int64_t i = 0; i < lb_tensor_numel (q); i++)
      qrd[i] = lb_bf16_to_f32 (lb_f32_to_bf16 (qd[i]));
    g_autoptr (LbTensor) o16 = poisoned (3, qs);
    g_autoptr (LbTensor) oref = poisoned (3, qs);
    g_autoptr (LbTensor) oraw = poisoned (3, qs);
    const float scale = 1.0f / sqrtf ((float) hd);
    assert_op_ok (lb_cpu_attention (s16, q, k, v, NULL, NULL, scale, o16,
            error));
    assert_op_ok (lb_cpu_attention (test_stream (), hd == 32 ? q : qr, k, v,
            NULL, NULL, scale, oref, error));
    assert_op_ok (lb_cpu_attention (test_stream (), q, k, v, NULL, NULL,
            scale, oraw, error));
    const gsize bytes = lb_tensor_nbytes (o16);
    g_assert_cmpmem (o16->data, bytes, oref->data, bytes);
    if (hd != 32)
      g_assert_true (memcmp (o16->data, oraw->data, bytes) != 0);
  }
  s16->backend->stream_free (s16);
}

/* A query's output does not depend on the queries computed with it: a
 * band of the queries (what a rank holds of a cross-attention) gets the
 * bits of the whole op, for bands that start anywhere in a block. */
static void
test_row_independent (void)
{
  const int64_t nq = 77, nk = 300, nh = 2, hd = 64;
  int64_t qs[3] = { nq, nh, hd }, ks[3] = { nk, nh, hd };
  g_autoptr (LbTensor) q = rand_tensor (3, qs, -1, 1);
  g_autoptr (LbTensor) k = rand_tensor (3, ks, -1, 1);
  g_autoptr (LbTensor) v = rand_tensor (3, ks, -1, 1);
  g_autoptr (LbTensor) whole = poisoned (3, qs);
  assert_op_ok (lb_cpu_attention (test_stream (), q, k, v, NULL, NULL, 0.125f,
          whole, error));
  const int64_t starts[] = { 1, 5, 31, 32, 40, 76 };
  for (guint i = 0; i < G_N_ELEMENTS (starts); i++) {
    const int64_t r0 = starts[i], n = nq - r0;
    LbTensor qband;
    lb_tensor_view_narrow (&qband, q, 0, r0, n);
    int64_t bs[3] = { n, nh, hd };
    g_autoptr (LbTensor) band = poisoned (3, bs);
    assert_op_ok (lb_cpu_attention (test_stream (), &qband, k, v, NULL, NULL,
            0.125f, band, error));
    g_assert_cmpmem (band->data, lb_tensor_nbytes (band),
        (float *) whole->data + r0 * nh * hd, lb_tensor_nbytes (band));
  }
}

/* every variant the CPU has, against the baseline: within the op's
 * tolerance (FMA contraction differs), on a DiT-like case */
static void
test_isas_agree (void)
{
  const LbCpuIsa keep = lb_cpu_isa ();
  const int64_t nq = 70, nk = 260, nh = 3, hd = 128;
  int64_t qs[3] = { nq, nh, hd }, ks[3] = { nk, nh, hd };
  g_autoptr (LbTensor) q = rand_tensor (3, qs, -1, 1);
  g_autoptr (LbTensor) k = rand_tensor (3, ks, -1, 1);
  g_autoptr (LbTensor) v = rand_tensor (3, ks, -1, 1);
  g_autoptr (LbTensor) base = poisoned (3, qs);
  g_assert_true (lb_cpu_isa_set (LB_CPU_ISA_BASELINE));
  assert_op_ok (lb_cpu_attention (test_stream (), q, k, v, NULL, NULL,
          1.0f / sqrtf (128.0f), base, error));
  double *ref = g_new (double, nq * nh * hd);
  for (int64_t i = 0; i < nq * nh * hd; i++)
    ref[i] = ((float *) base->data)[i];
  for (int isa = LB_CPU_ISA_AVX2; isa <= (int) lb_cpu_isa_best (); isa++) {
    g_autoptr (LbTensor) o = poisoned (3, qs);
    g_assert_true (lb_cpu_isa_set ((LbCpuIsa) isa));
    assert_op_ok (lb_cpu_attention (test_stream (), q, k, v, NULL, NULL,
            1.0f / sqrtf (128.0f), o, error));
    g_autofree char *what = g_strdup_printf ("attention %s vs baseline",
        lb_cpu_isa_name ((LbCpuIsa) isa));
    assert_close (what, o, ref, TOL_ATTN);
    g_test_message ("%s: checked", what);
  }
  g_free (ref);
  g_assert_true (lb_cpu_isa_set (keep));
}

/* the OpenBLAS the loader picked is the build meson linked: its OpenMP
 * build (one thread pool), not the system's default alternative */
static void
test_blas_threading (void)
{
  const char *want = lb_cpu_blas_expected ();
  g_test_message ("OpenBLAS threading: %s", lb_cpu_blas_threading ());
  if (want == NULL) {
    g_test_skip ("this build did not find OpenBLAS's OpenMP build");
    return;
  }
  g_assert_cmpstr (lb_cpu_blas_threading (), ==, want);
}

/* a NaN key poisons every query that sees it (no mask, no bias: the
 * vector maximum of the scores keeps a NaN as the scalar one does), on
 * every variant */
static void
test_nan_propagates (void)
{
  const LbCpuIsa keep = lb_cpu_isa ();
  int64_t qs[3] = { 5, 1, 64 }, ks[3] = { 70, 1, 64 };
  g_autoptr (LbTensor) q = rand_tensor (3, qs, -1, 1);
  g_autoptr (LbTensor) k = rand_tensor (3, ks, -1, 1);
  g_autoptr (LbTensor) v = rand_tensor (3, ks, -1, 1);
  ((float *) k->data)[33 * 64 + 7] = NAN;
  for (int isa = 0; isa <= (int) lb_cpu_isa_best (); isa++) {
    g_autoptr (LbTensor) o = poisoned (3, qs);
    g_assert_true (lb_cpu_isa_set ((LbCpuIsa) isa));
    assert_op_ok (lb_cpu_attention (test_stream (), q, k, v, NULL, NULL,
            0.125f, o, error));
    for (int64_t i = 0; i < 5 * 64; i++)
      if (!isnan (((float *) o->data)[i]))
        g_error ("%s: output %" G_GINT64_FORMAT " is %g",
            lb_cpu_isa_name ((LbCpuIsa) isa), i, ((float *) o->data)[i]);
  }
  g_assert_true (lb_cpu_isa_set (keep));
}

/* the kernels OpenBLAS runs: those OPENBLAS_CORETYPE names (tools/test.sh
 * exports tools/openblas-coretype.sh's), and no advice then; without it,
 * advice exactly when OpenBLAS's core is below the CPU */
static void
test_blas_core (void)
{
  LbCpuIsa core_isa;
  const char *core = lb_cpu_blas_core (&core_isa);
  const char *env = g_getenv ("OPENBLAS_CORETYPE");
  g_test_message ("OpenBLAS core: %s (%s), CPU: %s", core,
      lb_cpu_isa_name (core_isa), lb_cpu_isa_name (lb_cpu_isa_best ()));
  g_assert_cmpuint (strlen (core), >, 0);
  if (env && *env) {
    g_assert_cmpint (g_ascii_strcasecmp (core, env), ==, 0);
    g_assert_null (lb_cpu_blas_advice ());
  } else {
    g_assert_cmpint (lb_cpu_blas_advice () == NULL, ==,
        core_isa >= lb_cpu_isa_best ());
  }
}

typedef struct
{
  LbCpuIsa isa;
  GTestFunc func;
} IsaCase;

static void
run_on_isa (gconstpointer data)
{
  const IsaCase *c = data;
  const LbCpuIsa keep = lb_cpu_isa ();
  g_assert_true (lb_cpu_isa_set (c->isa));
  c->func ();
  g_assert_true (lb_cpu_isa_set (keep));
}

int
main (int argc, char **argv)
{
  static const struct
  {
    const char *name;
    GTestFunc func;
  } tests[] = {
    {"tile-boundaries", test_tile_boundaries},
    {"default-tiles", test_default_tiles},
    {"large-logits", test_large_logits},
    {"masks", test_masks},
    {"bf16-stream-rounds-q", test_bf16_stream_rounds_q},
    {"row-independent", test_row_independent},
  };
  g_test_init (&argc, &argv, NULL);
  /* every case on every variant this CPU has (baseline, avx2, avx512) */
  for (int isa = 0; isa <= (int) lb_cpu_isa_best (); isa++) {
    for (guint i = 0; i < G_N_ELEMENTS (tests); i++) {
      IsaCase *c = g_new (IsaCase, 1);
      c->isa = (LbCpuIsa) isa;
      c->func = tests[i].func;
      g_autofree char *path = g_strdup_printf ("/ops/attention/%s/%s",
          lb_cpu_isa_name (c->isa), tests[i].name);
      g_test_add_data_func_full (path, c, run_on_isa, g_free);
    }
  }
  g_test_add_func ("/ops/attention/isas-agree", test_isas_agree);
  g_test_add_func ("/ops/attention/blas-threading", test_blas_threading);
  g_test_add_func ("/ops/attention/blas-core", test_blas_core);
  g_test_add_func ("/ops/attention/nan-propagates", test_nan_propagates);
  return g_test_run ();
}

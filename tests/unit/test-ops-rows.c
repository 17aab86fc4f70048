/* lingbot-gst: the per-ISA element-wise and norm row kernels
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Every variant the CPU has (rows-item.h: baseline, AVX2, AVX-512), each
 * against a double reference, against the baseline variant, and against
 * itself at every start offset of a span (an element's bits must not
 * depend on where its row or span starts, so sharded equals unsharded);
 * then the ops that use the kernels (channel_rms_norm through a strided
 * view, the fused norm + modulate) on every variant.
 */
#include "test-ops-common.h"

/* x / (1 + e^-v) with a 2-ulp vector exp: the rounding of v costs up to
 * |v| ulp relative (as test-ops.c's TOL_ACT), the far tail an absolute
 * floor */
#define TOL_ACT 3e-6
#define ACT_ABS 1e-7
/* channel RMS norm: a float sum of C squares, a sqrt, 3 roundings */
#define TOL_CHNORM 2e-6

static double
ref_silu (double x)
{
  return x / (1.0 + exp (-x));
}

static double
ref_gelu (double x)
{
  return 0.5 * x * (1.0 + tanh (sqrt (2.0 / G_PI) * (x + 0.044715 * x * x *
              x)));
}

static int n_isas;
static LbCpuIsa isas[3];

static void
set_isa (LbCpuIsa isa)
{
  g_assert_true (lb_cpu_isa_set (isa));
}

static float *
rand_floats (int64_t n, double lo, double hi)
{
  float *v = g_new (float, n);
  for (int64_t i = 0; i < n; i++)
    v[i] = (float) g_test_rand_double_range (lo, hi);
  return v;
}

static void
assert_bits (const char *what, const float *a, const float *b, int64_t n)
{
  for (int64_t i = 0; i < n; i++)
    if (memcmp (a + i, b + i, sizeof (float)) != 0)
      g_error ("%s: element %" G_GINT64_FORMAT " is %08x (%.9g), expected "
          "%08x (%.9g)", what, i, f2u (a[i]), a[i], f2u (b[i]), b[i]);
}

typedef void (*ActFunc) (const float *x, float *y, int64_t n);

/* silu and gelu: each variant within tolerance of double, and the bits of
 * an element the same at every start offset and span length */
static void
test_activations (void)
{
  const int64_t n = 1000;
  float *x = rand_floats (n, -12, 12);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1e-30f;
  for (int v = 0; v < n_isas; v++) {
    set_isa (isas[v]);
    const LbCpuRowKernels *rk = lb_cpu_row_kernels ();
    for (int op = 0; op < 2; op++) {
      const ActFunc f = op ? rk->silu : rk->gelu_tanh;
      const char *name = op ? "silu" : "gelu_tanh";
      float *y = g_new (float, n), *part = g_new (float, n);
      f (x, y, n);
      for (int64_t i = 0; i < n; i++) {
        const double r = op ? ref_silu (x[i]) : ref_gelu (x[i]);
        if (!(fabs (y[i] - r) <= TOL_ACT * fabs (r) + ACT_ABS))
          g_error ("%s %s: x %.9g gives %.9g, reference %.9g", name,
              lb_cpu_isa_name (isas[v]), x[i], y[i], r);
      }
      /* spans starting anywhere, of any length, and in place */
      for (int64_t o = 0; o < 40; o++)
        for (int64_t len = 1; o + len <= n; len += 37) {
          memcpy (part + o, x + o, sizeof (float) * len);
          f (part + o, part + o, len);
          g_autofree char *what = g_strdup_printf ("%s %s span %"
              G_GINT64_FORMAT "+%" G_GINT64_FORMAT, name,
              lb_cpu_isa_name (isas[v]), o, len);
          assert_bits (what, part + o, y + o, len);
        }
      g_free (y);
      g_free (part);
    }
  }
  g_free (x);
}

/* the exp's edges: -0 for a very negative x (libm's expf overflows to inf
 * there), x itself far positive, NaN kept, 0 at 0 */
static void
test_activation_extremes (void)
{
  const float x[6] = { -1e4f, 1e4f, -100.0f, 0.0f, NAN, 88.5f };
  for (int v = 0; v < n_isas; v++) {
    set_isa (isas[v]);
    const LbCpuRowKernels *rk = lb_cpu_row_kernels ();
    for (int op = 0; op < 2; op++) {
      float y[6];
      (op ? rk->silu : rk->gelu_tanh) (x, y, 6);
      g_assert_cmpfloat (fabsf (y[0]), ==, 0.0f);
      g_assert_cmpfloat (y[1], ==, 1e4f);
      g_assert_cmpfloat (fabsf (y[2]), <, 1e-30f);
      g_assert_cmpfloat (y[3], ==, 0.0f);
      g_assert_true (isnan (y[4]));
      g_assert_cmpfloat (y[5], ==, 88.5f);
    }
  }
}

/* modulate and gated residual: each variant within 2 roundings of double
 * and bit-identical at every start offset */
static void
test_modulate_gated (void)
{
  const int64_t n = 333;
  float *x = rand_floats (n, -3, 3), *sc = rand_floats (n, -1, 1);
  float *sh = rand_floats (n, -1, 1), *y = rand_floats (n, -3, 3);
  for (int v = 0; v < n_isas; v++) {
    set_isa (isas[v]);
    const LbCpuRowKernels *rk = lb_cpu_row_kernels ();
    float *m = g_new (float, n), *gr = g_new (float, n), *p = g_new (float, n);
    rk->modulate (x, sc, sh, m, n);
    memcpy (gr, x, sizeof (float) * n);
    rk->gated_residual (gr, y, sc, n);
    for (int64_t i = 0; i < n; i++) {
      const double rm = (double) x[i] * (1.0 + sc[i]) + sh[i];
      const double rg = (double) x[i] + (double) sc[i] * y[i];
      g_assert_cmpfloat (fabs (m[i] - rm), <=, 1e-6 * (fabs (rm) + 4.0));
      g_assert_cmpfloat (fabs (gr[i] - rg), <=, 1e-6 * (fabs (rg) + 4.0));
    }
    for (int64_t o = 1; o < 20; o++) {
      const int64_t len = n - o;
      rk->modulate (x + o, sc + o, sh + o, p, len);
      assert_bits ("modulate at an offset", p, m + o, len);
      memcpy (p, x + o, sizeof (float) * len);
      rk->gated_residual (p, y + o, sc + o, len);
      assert_bits ("gated_residual at an offset", p, gr + o, len);
    }
    g_free (m);
    g_free (gr);
    g_free (p);
  }
  g_free (x);
  g_free (sc);
  g_free (sh);
  g_free (y);
}

/* channel_rms_norm: every variant within tolerance of double, and a view
 * strided along W bit-identical to the contiguous tensor (the op packs it
 * for the same kernel) */
static void
test_channel_rms_norm (void)
{
  const int64_t c = 12, t = 2, h = 3, w = 77;
  int64_t shape[4] = { c, t, h, w }, wide[4] = { c, t, h, 2 * w };
  int64_t gs[1] = { c };
  g_autoptr (LbTensor) x = rand_tensor (4, shape, -2, 2);
  g_autoptr (LbTensor) gamma = rand_tensor (1, gs, 0.5, 1.5);
  g_autoptr (LbTensor) xw = rand_tensor (4, wide, -2, 2);
  LbTensor xv;
  lb_tensor_view (&xv, xw);
  xv.shape[3] = w;
  xv.stride[3] = 2;
  /* the strided view holds x's values */
  for (int64_t i = 0; i < c * t * h * w; i++)
    ((float *) xw->data)[2 * i] = ((float *) x->data)[i];
  for (int silu = 0; silu < 2; silu++) {
    double *ref = g_new (double, c * t * h * w);
    const float *xd = x->data, *gd = gamma->data;
    for (int64_t r = 0; r < t * h * w; r++) {
      double ss = 0;
      for (int64_t k = 0; k < c; k++)
        ss += (double) xd[k * t * h * w + r] * xd[k * t * h * w + r];
      const double nrm = MAX (sqrt (ss), 1e-12);
      for (int64_t k = 0; k < c; k++) {
        double v = xd[k * t * h * w + r] / nrm * sqrt ((double) c) * gd[k];
        ref[k * t * h * w + r] = silu ? ref_silu (v) : v;
      }
    }
    for (int v = 0; v < n_isas; v++) {
      set_isa (isas[v]);
      g_autoptr (LbTensor) y = poisoned (4, shape);
      g_autoptr (LbTensor) ys = poisoned (4, shape);
      assert_op_ok (lb_cpu_channel_rms_norm (test_stream (), x, gamma, silu,
              y, error));
      assert_op_ok (lb_cpu_channel_rms_norm (test_stream (), &xv, gamma,
              silu, ys, error));
      g_autofree char *what = g_strdup_printf ("channel_rms_norm silu %d %s",
          silu, lb_cpu_isa_name (isas[v]));
      assert_close (what, y, ref, TOL_CHNORM);
      assert_bits (what, ys->data, y->data, c * t * h * w);
    }
    g_free (ref);
  }
}

/* the fused norm + modulate is the pair, bit for bit, on every variant */
static void
test_fused_pairs (void)
{
  const int64_t m = 5, d = 200;
  int64_t s2[2] = { m, d }, s1[1] = { d };
  g_autoptr (LbTensor) x = rand_tensor (2, s2, -2, 2);
  g_autoptr (LbTensor) sc = rand_tensor (1, s1, -1, 1);
  g_autoptr (LbTensor) sh = rand_tensor (1, s1, -1, 1);
  g_autoptr (LbTensor) yv = rand_tensor (2, s2, -2, 2);
  for (int v = 0; v < n_isas; v++) {
    set_isa (isas[v]);
    g_autoptr (LbTensor) f = poisoned (2, s2);
    g_autoptr (LbTensor) u = poisoned (2, s2);
    assert_op_ok (lb_cpu_norm_modulate (test_stream (), x, NULL, NULL, 1e-6f,
            sc, sh, f, error));
    assert_op_ok (lb_cpu_layer_norm (test_stream (), x, NULL, NULL, 1e-6f, u,
            error));
    assert_op_ok (lb_cpu_modulate (test_stream (), u, sc, sh, u, error));
    assert_bits ("norm_modulate", f->data, u->data, m * d);
    g_autoptr (LbTensor) a = lb_tensor_copy (x);
    g_autoptr (LbTensor) b = lb_tensor_copy (x);
    assert_op_ok (lb_cpu_gated_residual_modulate (test_stream (), a, yv, sc,
            sc, sh, error));
    assert_op_ok (lb_cpu_gated_residual (test_stream (), b, yv, sc, error));
    assert_op_ok (lb_cpu_modulate (test_stream (), b, sc, sh, b, error));
    assert_bits ("gated_residual_modulate", a->data, b->data, m * d);
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  const LbCpuIsa keep = lb_cpu_isa ();
  for (int i = 0; i <= (int) lb_cpu_isa_best (); i++)
    isas[n_isas++] = (LbCpuIsa) i;
  g_test_message ("variants: %d (best %s)", n_isas,
      lb_cpu_isa_name (lb_cpu_isa_best ()));
  g_test_add_func ("/rows/activations", test_activations);
  g_test_add_func ("/rows/activation-extremes", test_activation_extremes);
  g_test_add_func ("/rows/modulate-gated", test_modulate_gated);
  g_test_add_func ("/rows/channel-rms-norm", test_channel_rms_norm);
  g_test_add_func ("/rows/fused-pairs", test_fused_pairs);
  int rc = g_test_run ();
  lb_cpu_isa_set (keep);
  return rc;
}

/* lingbot-gst: bfloat16 rounding and the CPU gemm with a bf16 weight
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lb_f32_to_bf16 against an independent float64 nearest-even reference
 * (random floats, every bf16 pattern round-tripped, and the edge cases:
 * ties, NaN payloads, infinities, overflow, subnormals), then the gemm op
 * with w in bf16 (kernels/ops.h: `y = alpha * bf16(x) . op(w) + beta * y +
 * bias`, f32 accumulation) against a float64 reference computed from the
 * rounded inputs, and its argument errors.
 */
#include "test-ops-common.h"

/* gemm: K f32 products of rounded inputs accumulated in f32 (as the f32
 * gemm of test-ops.c): ~sqrt(K) * 6e-8 relative, K <= 300 here. */
#define TOL_GEMM 1e-5

/* The nearest bfloat16 of a finite or infinite float, computed in double
 * from the two candidates that bracket it (ties to the even pattern), with
 * overflow to infinity as IEEE round-to-nearest does: a value at or above
 * the midpoint between the largest bf16 and 2^128 becomes inf. */
static uint16_t
ref_bf16 (float v)
{
  uint32_t u = f2u (v);
  uint32_t sign = u & 0x80000000u, mag = u & 0x7fffffffu;
  if (mag >= 0x7f800000u)
    return (uint16_t) ((sign | mag) >> 16);     /* inf (NaN not here) */
  uint32_t lo = mag & 0xffff0000u;      /* truncated */
  uint32_t hi = lo + 0x10000u;  /* next pattern up */
  double a = fabs ((double) v);
  double dlo = a - (double) u2f (lo);
  /* hi may be 0x7f800000 (inf): its value as a rounding point is 2^128 */
  double vhi = hi == 0x7f800000u ? ldexp (1.0, 128) : (double) u2f (hi);
  double dhi = vhi - a;
  uint32_t pick;
  if (dlo < dhi)
    pick = lo;
  else if (dhi < dlo)
    pick = hi;
  else
    pick = ((lo >> 16) & 1u) ? hi : lo;
  return (uint16_t) ((sign | pick) >> 16);
}

static gboolean
bf16_is_nan (uint16_t b)
{
  return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
}

static void
test_bf16_rounding (void)
{
  static const struct
  {
    uint32_t in;
    uint16_t out;
  } cases[] = {
    {0x3f800000u, 0x3f80},      /* 1.0 exact */
    {0x3f808000u, 0x3f80},      /* tie, lower is even: down */
    {0x3f818000u, 0x3f82},      /* tie, lower is odd: up */
    {0x3f808001u, 0x3f81},      /* just above the tie */
    {0x3f807fffu, 0x3f80},      /* just below the tie */
    {0xbf808000u, 0xbf80},      /* negative tie */
    {0xbf818000u, 0xbf82},
    {0x7f800000u, 0x7f80},      /* +inf */
    {0xff800000u, 0xff80},      /* -inf */
    {0x7f7fffffu, 0x7f80},      /* FLT_MAX overflows to inf */
    {0x7f7f8000u, 0x7f80},      /* tie at the top, odd lower: inf */
    {0x7f7f7fffu, 0x7f7f},      /* largest finite bf16 */
    {0xff7fffffu, 0xff80},      /* -FLT_MAX to -inf */
    {0x00000000u, 0x0000},
    {0x80000000u, 0x8000},      /* -0 keeps its sign */
    {0x00000001u, 0x0000},      /* smallest subnormal: to zero */
    {0x00008000u, 0x0000},      /* subnormal tie, even lower */
    {0x00018000u, 0x0002},      /* subnormal tie, odd lower */
    {0x00808000u, 0x0080},      /* smallest normal, tie */
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    uint16_t got = lb_f32_to_bf16 (u2f (cases[i].in));
    if (got != cases[i].out)
      g_error ("lb_f32_to_bf16 (0x%08x) = 0x%04x, expected 0x%04x",
          cases[i].in, got, cases[i].out);
    g_assert_cmpuint (ref_bf16 (u2f (cases[i].in)), ==, cases[i].out);
  }
  /* NaN stays NaN, sign kept; a payload only in the low 16 bits must not
   * truncate to an infinity */
  static const uint32_t nans[] = { 0x7fc00000u, 0x7f800001u, 0x7f80ffffu,
    0xff800001u, 0xffc00000u, 0x7fffffffu
  };
  for (guint i = 0; i < G_N_ELEMENTS (nans); i++) {
    uint16_t got = lb_f32_to_bf16 (u2f (nans[i]));
    if (!bf16_is_nan (got) || (got >> 15) != (nans[i] >> 31))
      g_error ("lb_f32_to_bf16 (NaN 0x%08x) = 0x%04x", nans[i], got);
    g_assert_true (isnan (lb_bf16_to_f32 (got)));
  }
  /* every bf16 pattern widens exactly and rounds back to itself */
  for (uint32_t b = 0; b < 0x10000u; b++) {
    if (bf16_is_nan ((uint16_t) b))
      continue;
    float f = lb_bf16_to_f32 ((uint16_t) b);
    g_assert_cmphex (f2u (f), ==, b << 16);
    g_assert_cmphex (lb_f32_to_bf16 (f), ==, b);
  }
  /* random bit patterns (all exponents) and random values near 1 */
  for (int i = 0; i < 200000; i++) {
    uint32_t u = g_test_rand_int ();
    if ((u & 0x7fffffffu) > 0x7f800000u)
      continue;
    float v = i & 1 ? u2f (u) : (float) g_test_rand_double_range (-4, 4);
    uint16_t got = lb_f32_to_bf16 (v), want = ref_bf16 (v);
    if (got != want)
      g_error ("lb_f32_to_bf16 (%.9g = 0x%08x) = 0x%04x, reference 0x%04x",
          (double) v, f2u (v), got, want);
  }
}

/* ------------------------------------------------------------------ gemm */

/* A bf16 tensor of uniform values in [lo, hi), rounded from f32. */
static LbTensor *
rand_bf16 (int ndim, const int64_t * shape, double lo, double hi)
{
  LbTensor *t = lb_tensor_new (LB_DTYPE_BF16, ndim, shape);
  uint16_t *d = t->data;
  int64_t n = lb_tensor_numel (t);
  for (int64_t i = 0; i < n; i++)
    d[i] = lb_f32_to_bf16 ((float) g_test_rand_double_range (lo, hi));
  return t;
}

/* Element @flat of a possibly strided 2-D bf16 tensor, widened. */
static double
at_bf16 (const LbTensor * t, int64_t flat)
{
  int64_t r = flat / t->shape[1], c = flat % t->shape[1];
  return lb_bf16_to_f32 (((const uint16_t *) t->data)[r * t->stride[0] +
          c * t->stride[1]]);
}

static double
rounded (float v)
{
  return lb_bf16_to_f32 (lb_f32_to_bf16 (v));
}

/* strided: x, w and y are column-narrowed views of wider matrices (so their
 * rows have a stride larger than their width). */
static void
check_gemm_bf16 (int64_t m, int64_t n, int64_t k, gboolean trans_w,
    gboolean with_bias, float alpha, float beta, gboolean strided)
{
  int64_t pad = strided ? 3 : 0;
  int64_t xs[2] = { m, k + pad };
  int64_t ws[2] = { trans_w ? n : k, (trans_w ? k : n) + pad };
  int64_t ys[2] = { m, n + pad };
  int64_t bs[1] = { n };
  g_autoptr (LbTensor) xb = rand_tensor (2, xs, -1, 1);
  g_autoptr (LbTensor) wb = rand_bf16 (2, ws, -1, 1);
  g_autoptr (LbTensor) yb = rand_tensor (2, ys, -1, 1);
  g_autoptr (LbTensor) bias = rand_tensor (1, bs, -1, 1);
  LbTensor x, w, y;
  g_assert_true (lb_tensor_view_narrow (&x, xb, 1, 0, k));
  g_assert_true (lb_tensor_view_narrow (&w, wb, 1, strided ? 2 : 0,
          trans_w ? k : n));
  if (beta == 0.0f)
    poison (yb);
  g_assert_true (lb_tensor_view_narrow (&y, yb, 1, strided ? 1 : 0, n));

  g_autofree double *ref = g_new0 (double, MAX (m * n, 1));
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0.0;
      for (int64_t l = 0; l < k; l++) {
        double wv = trans_w ? at_bf16 (&w, j * k + l) : at_bf16 (&w, l * n + j);
        acc += rounded (at (&x, i * k + l)) * wv;
      }
      acc *= alpha;
      if (with_bias)
        acc += ((float *) bias->data)[j];
      if (beta != 0.0f)
        acc += beta * (double) at (&y, i * n + j);
      ref[i * n + j] = acc;
    }
  assert_op_ok (lb_cpu_gemm (test_stream (), &x, &w, trans_w,
          with_bias ? bias : NULL, alpha, beta, &y, error));
  assert_close ("gemm bf16", &y, ref, TOL_GEMM);
  if (strided) {
    /* the columns outside the view are untouched */
    for (int64_t i = 0; i < m; i++) {
      float *row = (float *) yb->data + i * (n + pad);
      g_assert_true (beta != 0.0f || isnan (row[0]));
      g_assert_true (beta != 0.0f || isnan (row[n + 1]));
    }
  }
}

static void
test_gemm_bf16 (void)
{
  const int64_t sizes[][3] = {
    {1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 129, 100}, {3, 300, 7},
    {5, 4, 0},
  };
  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    for (int tw = 0; tw < 2; tw++)
      for (int b = 0; b < 2; b++) {
        const int64_t *sz = sizes[i];
        check_gemm_bf16 (sz[0], sz[1], sz[2], tw, b, 1.0f, 0.0f, FALSE);
        check_gemm_bf16 (sz[0], sz[1], sz[2], tw, b, -0.75f, 0.5f, FALSE);
        check_gemm_bf16 (sz[0], sz[1], sz[2], tw, b, 1.0f, 0.0f, TRUE);
        check_gemm_bf16 (sz[0], sz[1], sz[2], tw, b, 2.0f, -1.0f, TRUE);
      }
}

/* x is rounded to bf16 before the product (exact results): with w = 1,
 * K = 1, y is bf16(x) itself. */
static void
test_gemm_bf16_rounds_x (void)
{
  static const float xv[] = {
    1.0f + 0x1p-9f,             /* below half an ulp: 1 */
    1.0f + 0x1p-8f,             /* tie, even lower: 1 */
    1.0f + 3 * 0x1p-8f,         /* tie, odd lower: 1 + 2^-6 */
    -(1.0f + 0x1.8p-8f),        /* above the tie: -(1 + 2^-7) */
    3.4e38f,                    /* overflows to inf */
  };
  static const float want[] = {
    1.0f, 1.0f, 1.0f + 0x1p-6f, -(1.0f + 0x1p-7f), INFINITY,
  };
  int64_t xs[2] = { G_N_ELEMENTS (xv), 1 }, ws[2] = { 1, 1 };
  g_autoptr (LbTensor) x = lb_tensor_new (LB_DTYPE_F32, 2, xs);
  g_autoptr (LbTensor) w = lb_tensor_new (LB_DTYPE_BF16, 2, ws);
  g_autoptr (LbTensor) y = poisoned (2, xs);
  memcpy (x->data, xv, sizeof xv);
  ((uint16_t *) w->data)[0] = lb_f32_to_bf16 (1.0f);
  for (int tw = 0; tw < 2; tw++) {
    poison (y);
    assert_op_ok (lb_cpu_gemm (test_stream (), x, w, tw, NULL, 1.0f, 0.0f,
            y, error));
    for (guint i = 0; i < G_N_ELEMENTS (xv); i++)
      g_assert_cmpfloat (((float *) y->data)[i], ==, want[i]);
  }
}

/* A row of y does not depend on the other rows computed with it (a rank
 * holding a band of tokens gets the whole-sequence bits), nor on x's row
 * stride: bands of x, contiguous or strided, give the same bits as the
 * rows of the full product. */
static void
test_gemm_bf16_row_independent (void)
{
  const int64_t m = 61, n = 37, k = 203;
  int64_t xs[2] = { m, k }, xps[2] = { m, k + 5 }, ws[2] = { n, k };
  int64_t ys[2] = { m, n }, bs[1] = { n };
  g_autoptr (LbTensor) x = rand_tensor (2, xs, -2, 2);
  g_autoptr (LbTensor) xp = rand_tensor (2, xps, -2, 2);
  g_autoptr (LbTensor) w = rand_bf16 (2, ws, -1, 1);
  g_autoptr (LbTensor) bias = rand_tensor (1, bs, -1, 1);
  g_autoptr (LbTensor) y = poisoned (2, ys);
  LbTensor xv;
  /* the same x values behind a row stride of k + 5 */
  g_assert_true (lb_tensor_view_narrow (&xv, xp, 1, 2, k));
  for (int64_t i = 0; i < m; i++)
    memcpy ((float *) xv.data + i * xv.stride[0],
        (float *) x->data + i * k, k * sizeof (float));
  assert_op_ok (lb_cpu_gemm (test_stream (), x, w, TRUE, bias, 0.75f, 0.0f,
          y, error));
  static const int64_t bands[][2] = { {0, 1}, {0, 30}, {30, 31}, {17, 5},
  {60, 1}
  };
  for (guint b = 0; b < G_N_ELEMENTS (bands); b++)
    for (int strided = 0; strided < 2; strided++) {
      const int64_t r0 = bands[b][0], nr = bands[b][1];
      int64_t bys[2] = { nr, n };
      g_autoptr (LbTensor) yb = poisoned (2, bys);
      LbTensor band;
      g_assert_true (lb_tensor_view_narrow (&band, strided ? &xv : x, 0, r0,
              nr));
      assert_op_ok (lb_cpu_gemm (test_stream (), &band, w, TRUE, bias, 0.75f,
              0.0f, yb, error));
      g_assert_true (memcmp (yb->data, (float *) y->data + r0 * n,
              nr * n * sizeof (float)) == 0);
    }
}

static void
test_gemm_bf16_errors (void)
{
  LbStream *s = test_stream ();
  int64_t xs[2] = { 4, 8 }, ws[2] = { 5, 8 }, ys[2] = { 4, 5 };
  int64_t bs[1] = { 5 }, w3s[3] = { 5, 2, 4 };
  g_autoptr (LbTensor) x = rand_tensor (2, xs, -1, 1);
  g_autoptr (LbTensor) y = poisoned (2, ys);
  g_autoptr (LbTensor) w16 = lb_tensor_new_zeros (LB_DTYPE_F16, 2, ws);
  g_autoptr (LbTensor) wi = lb_tensor_new_zeros (LB_DTYPE_I32, 2, ws);
  g_autoptr (LbTensor) wb = lb_tensor_new_zeros (LB_DTYPE_BF16, 2, ws);
  g_autoptr (LbTensor) wb3 = lb_tensor_new_zeros (LB_DTYPE_BF16, 3, w3s);
  g_autoptr (LbTensor) xb = lb_tensor_new_zeros (LB_DTYPE_BF16, 2, xs);
  g_autoptr (LbTensor) x16 = lb_tensor_new_zeros (LB_DTYPE_F16, 2, xs);
  g_autoptr (LbTensor) yb = lb_tensor_new_zeros (LB_DTYPE_BF16, 2, ys);
  g_autoptr (LbTensor) bb = lb_tensor_new_zeros (LB_DTYPE_BF16, 1, bs);

  assert_op_error (lb_cpu_gemm (s, x, w16, TRUE, NULL, 1, 0, y, error),
      "gemm: w is f16 [5, 8], expected f32 or bf16 (the weight dtypes "
      "gemm supports)");
  assert_op_error (lb_cpu_gemm (s, x, wi, TRUE, NULL, 1, 0, y, error),
      "gemm: w is i32 [5, 8], expected f32 or bf16 (the weight dtypes "
      "gemm supports)");
  assert_op_error (lb_cpu_gemm (s, x, wb3, TRUE, NULL, 1, 0, y, error),
      "gemm: w is bf16 [5, 2, 4], expected 2-D with unit column stride");
  /* a bf16 x goes only with a bf16 w (the case with one is
   * test_gemm_bf16_x) */
  g_autoptr (LbTensor) w32 = rand_tensor (2, ws, -1, 1);
  assert_op_error (lb_cpu_gemm (s, xb, w32, TRUE, NULL, 1, 0, y, error),
      "gemm: x is bf16 [4, 8], expected f32 [M, K] with unit column stride "
      "(bf16 only with a bf16 w)");
  assert_op_error (lb_cpu_gemm (s, x16, wb, TRUE, NULL, 1, 0, y, error),
      "gemm: x is f16 [4, 8], expected f32 [M, K] with unit column stride");
  assert_op_error (lb_cpu_gemm (s, x, wb, TRUE, NULL, 1, 0, yb, error),
      "gemm: y is bf16 [4, 5], expected f32 [4, 5]");
  assert_op_error (lb_cpu_gemm (s, x, wb, TRUE, bb, 1, 0, y, error),
      "gemm: bias is bf16 [5], expected f32 [5]");
  assert_op_error (lb_cpu_gemm (s, x, wb, FALSE, NULL, 1, 0, y, error),
      "gemm: inner dimensions differ: x [4, 8], w [5, 8] (w is [K, N])");
  /* and the accepted case, for contrast */
  assert_op_ok (lb_cpu_gemm (s, x, wb, TRUE, NULL, 1, 0, y, error));
  for (int i = 0; i < 20; i++)
    g_assert_cmpfloat (((float *) y->data)[i], ==, 0.0f);
}

/* --------------------------------------------- bf16 GEMM inputs (2.5) */

/* @x's values rounded to bf16, in a bf16 tensor of the same view: the
 * same shape and strides over a storage of @base's extents. */
static LbTensor *
to_bf16_like (const LbTensor * base, const LbTensor * x, LbTensor * view)
{
  LbTensor *b = lb_tensor_new (LB_DTYPE_BF16, base->ndim, base->shape);
  const float *src = base->data;
  uint16_t *dst = b->data;
  for (int64_t i = 0; i < lb_tensor_numel (base); i++)
    dst[i] = lb_f32_to_bf16 (src[i]);
  const ptrdiff_t off = (const float *) x->data - (const float *) base->data;
  lb_tensor_view_init (view, LB_DTYPE_BF16, dst + off, LB_DEVICE_HOST,
      x->ndim, x->shape, x->stride);
  return b;
}

/* gemm with a bf16 x (what the norm before it wrote) gives the bits of
 * the same values in f32, which the op rounds itself: contiguous and
 * row-strided x, both layouts of w, with bias and beta. */
static void
test_gemm_bf16_x (void)
{
  const int64_t sizes[][3] = { {1, 1, 1}, {7, 5, 3}, {33, 17, 65},
  {64, 129, 100}, {5, 4, 0}
  };
  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    for (int strided = 0; strided < 2; strided++)
      for (int tw = 0; tw < 2; tw++) {
        const int64_t m = sizes[i][0], n = sizes[i][1], k = sizes[i][2];
        int64_t xs[2] = { m, k + (strided ? 3 : 0) };
        int64_t ws[2] = { tw ? n : k, tw ? k : n }, ys[2] = { m, n };
        int64_t bs[1] = { n };
        g_autoptr (LbTensor) xb = rand_tensor (2, xs, -2, 2);
        g_autoptr (LbTensor) w = rand_bf16 (2, ws, -1, 1);
        g_autoptr (LbTensor) bias = rand_tensor (1, bs, -1, 1);
        g_autoptr (LbTensor) y0 = rand_tensor (2, ys, -1, 1);
        g_autoptr (LbTensor) y32 = lb_tensor_copy (y0);
        g_autoptr (LbTensor) y16 = lb_tensor_copy (y0);
        LbTensor x, x16;
        g_assert_true (lb_tensor_view_narrow (&x, xb, 1, strided ? 2 : 0, k));
        g_autoptr (LbTensor) x16b = to_bf16_like (xb, &x, &x16);
        assert_op_ok (lb_cpu_gemm (test_stream (), &x, w, tw, bias, 0.75f,
                0.5f, y32, error));
        assert_op_ok (lb_cpu_gemm (test_stream (), &x16, w, tw, bias, 0.75f,
                0.5f, y16, error));
        g_assert_true (memcmp (y32->data, y16->data,
                lb_tensor_nbytes (y32)) == 0);
      }
}

/* gemm_gelu_tanh (kernels/ops.h) is exactly gemm (beta 0) then gelu_tanh:
 * f32 and bf16 w with f32 y, bf16 w with a bf16 y (through the op's
 * 64-row blocks: m = 1, 65 and 130 cross block boundaries) and x f32 or
 * bf16, row-strided x and y, with and without bias. */
static void
test_gemm_gelu_tanh (void)
{
  const int64_t sizes[][3] = { {1, 1, 1}, {7, 5, 3}, {65, 17, 33},
  {130, 129, 100}, {5, 4, 0}
  };
  LbStream *s = test_stream ();
  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    for (int v = 0; v < 8; v++) {
      const gboolean w16 = (v & 1) != 0, xb16 = w16 && (v & 2) != 0;
      const gboolean strided = (v & 4) != 0, with_bias = v != 4;
      const int64_t m = sizes[i][0], n = sizes[i][1], k = sizes[i][2];
      const int64_t pad = strided ? 3 : 0;
      int64_t xs[2] = { m, k + pad }, ws[2] = { n, k }, ys[2] = { m, n + pad };
      int64_t bs[1] = { n };
      g_autoptr (LbTensor) xb = rand_tensor (2, xs, -2, 2);
      g_autoptr (LbTensor) w = w16 ? rand_bf16 (2, ws, -1, 1) :
          rand_tensor (2, ws, -1, 1);
      g_autoptr (LbTensor) bias = rand_tensor (1, bs, -1, 1);
      const LbTensor *b = with_bias ? bias : NULL;
      LbTensor x, x16, yv, y16v;
      g_assert_true (lb_tensor_view_narrow (&x, xb, 1, pad, k));
      g_autoptr (LbTensor) x16b = to_bf16_like (xb, &x, &x16);
      const LbTensor *xin = xb16 ? &x16 : &x;
      /* the pair */
      int64_t rs[2] = { m, n };
      g_autoptr (LbTensor) ref = tensor_new (2, rs);
      assert_op_ok (lb_cpu_gemm (s, xin, w, TRUE, b, 0.75f, 0.0f, ref, error));
      assert_op_ok (lb_cpu_gelu_tanh (s, ref, ref, error));
      /* f32 y */
      g_autoptr (LbTensor) yb = poisoned (2, ys);
      g_assert_true (lb_tensor_view_narrow (&yv, yb, 1, 0, n));
      assert_op_ok (lb_cpu_gemm_gelu_tanh (s, xin, w, TRUE, b, 0.75f, &yv,
              error));
      for (int64_t r = 0; r < m; r++) {
        g_assert_cmpmem ((const float *) yv.data + r * yv.stride[0],
            n * sizeof (float), (const float *) ref->data + r * n,
            n * sizeof (float));
        for (int64_t e = n; e < n + pad; e++)
          g_assert_true (isnan (((const float *) yb->data)[r * (n + pad) + e]));
      }
      if (!w16)
        continue;
      /* bf16 y: every element the pair's rounded, the padding kept */
      g_autoptr (LbTensor) y16b = lb_tensor_new (LB_DTYPE_BF16, 2, ys);
      memset (y16b->data, 0xff, lb_tensor_nbytes (y16b));
      g_assert_true (lb_tensor_view_narrow (&y16v, y16b, 1, 0, n));
      assert_op_ok (lb_cpu_gemm_gelu_tanh (s, xin, w, TRUE, b, 0.75f, &y16v,
              error));
      const uint16_t *o = y16b->data;
      const float *r32 = ref->data;
      for (int64_t r = 0; r < m; r++)
        for (int64_t e = 0; e < n + pad; e++) {
          const uint16_t want = e < n ? lb_f32_to_bf16 (r32[r * n + e]) :
              0xffff;
          if (o[r * (n + pad) + e] != want)
            g_error ("gemm_gelu_tanh [%" G_GINT64_FORMAT ", %"
                G_GINT64_FORMAT ", %" G_GINT64_FORMAT "] bf16 y (%s x): "
                "element %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT " is "
                "0x%04x, expected 0x%04x", m, n, k, xb16 ? "bf16" : "f32", r,
                e, o[r * (n + pad) + e], want);
        }
    }
}

/* The op's own name in gemm's messages, and a bf16 y only with a bf16 w. */
static void
test_gemm_gelu_tanh_errors (void)
{
  LbStream *s = test_stream ();
  int64_t xs[2] = { 4, 8 }, ws[2] = { 6, 8 }, ys[2] = { 4, 6 };
  int64_t ws2[2] = { 6, 7 };
  g_autoptr (LbTensor) x = rand_tensor (2, xs, -1, 1);
  g_autoptr (LbTensor) w = rand_tensor (2, ws, -1, 1);
  g_autoptr (LbTensor) w2 = rand_tensor (2, ws2, -1, 1);
  g_autoptr (LbTensor) w16 = rand_bf16 (2, ws, -1, 1);
  g_autoptr (LbTensor) y = tensor_new (2, ys);
  g_autoptr (LbTensor) y16 = lb_tensor_new (LB_DTYPE_BF16, 2, ys);
  g_autoptr (LbTensor) yh = lb_tensor_new (LB_DTYPE_F16, 2, ys);
  assert_op_error (lb_cpu_gemm_gelu_tanh (s, x, w, TRUE, NULL, 1.0f, y16,
          error), "gemm_gelu_tanh: y is bf16 [4, 6], expected f32 [4, 6] "
      "(bf16 only with a bf16 w)");
  assert_op_error (lb_cpu_gemm_gelu_tanh (s, x, w16, TRUE, NULL, 1.0f, yh,
          error), "gemm_gelu_tanh: y is f16 [4, 6], expected f32 [4, 6]");
  assert_op_error (lb_cpu_gemm_gelu_tanh (s, x, w2, TRUE, NULL, 1.0f, y,
          error), "gemm_gelu_tanh: inner dimensions differ: x [4, 8], "
      "w [6, 7] (w is [N, K])");
  /* gemm itself still refuses a bf16 y */
  assert_op_error (lb_cpu_gemm (s, x, w16, TRUE, NULL, 1.0f, 0.0f, y16,
          error), "gemm: y is bf16 [4, 6], expected f32 [4, 6]");
}

typedef enum
{
  OUT_LAYER_NORM, OUT_LAYER_NORM_AFFINE, OUT_NORM_MODULATE,
  OUT_NORM_MODULATE_ROWS, OUT_GELU, OUT_SILU, OUT_SCALE, N_OUTS
} OutOp;

static const char *const out_names[N_OUTS] = {
  "layer_norm", "layer_norm (affine)", "norm_modulate",
  "norm_modulate (per-row)", "gelu_tanh", "silu", "scale"
};

static gboolean
run_out_op (OutOp op, const LbTensor * x, const LbTensor * w,
    const LbTensor * b, const LbTensor * sc1, const LbTensor * scm,
    LbTensor * y, GError ** error)
{
  LbStream *s = test_stream ();
  switch (op) {
    case OUT_LAYER_NORM:
      return lb_cpu_layer_norm (s, x, NULL, NULL, 1e-6f, y, error);
    case OUT_LAYER_NORM_AFFINE:
      return lb_cpu_layer_norm (s, x, w, b, 1e-6f, y, error);
    case OUT_NORM_MODULATE:
      return lb_cpu_norm_modulate (s, x, NULL, NULL, 1e-6f, sc1, w, y, error);
    case OUT_NORM_MODULATE_ROWS:
      return lb_cpu_norm_modulate (s, x, w, b, 1e-6f, scm, scm, y, error);
    case OUT_GELU:
      return lb_cpu_gelu_tanh (s, x, y, error);
    case OUT_SILU:
      return lb_cpu_silu (s, x, y, error);
    default:
      return lb_cpu_scale (s, x, 0.37f, -1.5f, y, error);
  }
}

/* The ops that write a bf16 GEMM input (kernels/ops-list.h): their bf16 y
 * is, element for element, lb_f32_to_bf16() of their f32 y, on
 * contiguous and row-strided x and y (the gaps of y's view untouched),
 * one element, odd widths, and rows longer than the stack block and the
 * parallel span. */
static void
test_bf16_outputs (void)
{
  const int64_t sizes[][2] = { {1, 1}, {3, 7}, {5, 300}, {2, 257},
  {3, 20000}, {1, 40000}
  };
  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    for (int strided = 0; strided < 2; strided++)
      for (int op = 0; op < N_OUTS; op++) {
        const int64_t m = sizes[i][0], d = sizes[i][1], pad = strided ? 5 : 0;
        int64_t xs[2] = { m, d + pad }, vs[1] = { d }, ms[2] = { m, d };
        g_autoptr (LbTensor) xb = rand_tensor (2, xs, -4, 4);
        g_autoptr (LbTensor) w = rand_tensor (1, vs, 0.5, 1.5);
        g_autoptr (LbTensor) b = rand_tensor (1, vs, -1, 1);
        g_autoptr (LbTensor) sc1 = rand_tensor (1, vs, -1, 1);
        g_autoptr (LbTensor) scm = rand_tensor (2, ms, -1, 1);
        g_autoptr (LbTensor) y32 = poisoned (2, xs);
        g_autoptr (LbTensor) y16b = lb_tensor_new (LB_DTYPE_BF16, 2, xs);
        uint16_t *yd = y16b->data;
        for (int64_t e = 0; e < lb_tensor_numel (y16b); e++)
          yd[e] = 0xffffu;      /* a NaN pattern */
        LbTensor x, y, y16;
        g_assert_true (lb_tensor_view_narrow (&x, xb, 1, pad ? 1 : 0, d));
        g_assert_true (lb_tensor_view_narrow (&y, y32, 1, pad ? 3 : 0, d));
        lb_tensor_view_init (&y16, LB_DTYPE_BF16, yd + (pad ? 3 : 0),
            LB_DEVICE_HOST, 2, y.shape, y.stride);
        assert_op_ok (run_out_op (op, &x, w, b, sc1, scm, &y, error));
        assert_op_ok (run_out_op (op, &x, w, b, sc1, scm, &y16, error));
        for (int64_t r = 0; r < m; r++)
          for (int64_t c = 0; c < d + pad; c++) {
            const int64_t e = r * (d + pad) + c;
            const gboolean in = c >= (pad ? 3 : 0) && c < (pad ? 3 : 0) + d;
            const uint16_t want = in ?
                lb_f32_to_bf16 (((float *) y32->data)[e]) : 0xffffu;
            if (yd[e] != want)
              g_error ("%s [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]%s: "
                  "element (%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT ") is "
                  "0x%04x, expected 0x%04x", out_names[op], m, d,
                  strided ? " strided" : "", r, c, yd[e], want);
          }
      }
}

/* The dtypes of y the row ops take: f32 or bf16 for the ops that feed a
 * GEMM, f32 for the rest. */
static void
test_bf16_output_errors (void)
{
  LbStream *s = test_stream ();
  int64_t xs[2] = { 4, 8 }, vs[1] = { 8 };
  g_autoptr (LbTensor) x = rand_tensor (2, xs, -1, 1);
  g_autoptr (LbTensor) v = rand_tensor (1, vs, -1, 1);
  g_autoptr (LbTensor) y16 = lb_tensor_new_zeros (LB_DTYPE_F16, 2, xs);
  g_autoptr (LbTensor) yb = lb_tensor_new_zeros (LB_DTYPE_BF16, 2, xs);
  assert_op_error (lb_cpu_layer_norm (s, x, NULL, NULL, 1e-6f, y16, error),
      "layer_norm: y is f16 [4, 8], expected f32 or bf16 [..., 8]");
  assert_op_error (lb_cpu_norm_modulate (s, x, NULL, NULL, 1e-6f, v, v, y16,
          error), "norm_modulate: y is f16 [4, 8], expected f32 or bf16 "
      "[..., 8]");
  assert_op_error (lb_cpu_gelu_tanh (s, x, y16, error),
      "gelu_tanh: y is f16 [4, 8], expected f32 or bf16 [..., 8]");
  assert_op_error (lb_cpu_rms_norm (s, x, NULL, 1e-6f, yb, error),
      "rms_norm: y is bf16 [4, 8], expected f32 [..., 8]");
  assert_op_error (lb_cpu_modulate (s, x, v, v, yb, error),
      "modulate: y is bf16 [4, 8], expected f32 [..., 8]");
  assert_op_error (lb_cpu_add (s, x, v, yb, error),
      "add: y is bf16 [4, 8], expected f32 [..., 8]");
  /* a bf16 x of the norms is not theirs to take */
  assert_op_error (lb_cpu_layer_norm (s, yb, NULL, NULL, 1e-6f, x, error),
      "layer_norm: x is bf16 [4, 8], expected f32 [..., D]");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ops/bf16/rounding", test_bf16_rounding);
  g_test_add_func ("/ops/bf16/gemm", test_gemm_bf16);
  g_test_add_func ("/ops/bf16/gemm-rounds-x", test_gemm_bf16_rounds_x);
  g_test_add_func ("/ops/bf16/gemm-row-independent",
      test_gemm_bf16_row_independent);
  g_test_add_func ("/ops/bf16/gemm-errors", test_gemm_bf16_errors);
  g_test_add_func ("/ops/bf16/gemm-bf16-x", test_gemm_bf16_x);
  g_test_add_func ("/ops/bf16/gemm-gelu-tanh", test_gemm_gelu_tanh);
  g_test_add_func ("/ops/bf16/gemm-gelu-tanh-errors",
      test_gemm_gelu_tanh_errors);
  g_test_add_func ("/ops/bf16/outputs", test_bf16_outputs);
  g_test_add_func ("/ops/bf16/output-errors", test_bf16_output_errors);
  return g_test_run ();
}

/* lingbot-gst: CPU strided ops (copy, clamp, fill, accumulate,
 * latent_affine), channel_rms_norm and upsample_nearest2x_halo against
 * float64 / simple references, their bf16 outputs against the rounded f32
 * ones, and their argument errors
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "test-ops-common.h"

/* accumulate / latent_affine: one or two float roundings. */
#define TOL_ELEM 1e-6
/* channel RMS norm: an f32 sum of C squares, a root, a quotient and two
 * products (sqrt(C) rounded to f32 is exact relative to C here): ~C ulp
 * in the worst case for the sum, far less in practice. */
#define TOL_CHNORM 2e-6
/* the same followed by SiLU in float (see TOL_ACT of test-ops.c) */
#define TOL_CHNORM_SILU 4e-6

static double *
ref_new (const LbTensor * like)
{
  return g_new0 (double, MAX (lb_tensor_numel (like), 1));
}

/* Asserts that every float of @buf's storage outside the view @v is still
 * NaN (the op wrote nothing outside its output view). */
static void
assert_outside_untouched (const LbTensor * buf, const LbTensor * v)
{
  gsize n = lb_tensor_numel (buf);
  guint8 *inside = g_new0 (guint8, n);
  const float *base = buf->data;
  for (int64_t i = 0; i < lb_tensor_numel (v); i++) {
    int64_t off = 0, flat = i;
    for (int d = v->ndim - 1; d >= 0; d--) {
      off += (flat % v->shape[d]) * v->stride[d];
      flat /= v->shape[d];
    }
    off += (const float *) v->data - base;
    g_assert_cmpint (off, >=, 0);
    g_assert_cmpint (off, <, (int64_t) n);
    inside[off] = 1;
  }
  for (gsize i = 0; i < n; i++)
    if (!inside[i])
      g_assert_true (isnan (base[i]));
  g_free (inside);
}

/* A [d0, .., d(nd-1)] f32 input view with non-trivial strides: the
 * transpose (reversed dims) of a contiguous buffer of the reversed shape,
 * narrowed by one element at the front of dim 0 when @narrow. */
static LbTensor *
strided_input (int nd, const int64_t * shape, LbTensor * view)
{
  int64_t rshape[5];
  int perm[5];
  for (int i = 0; i < nd; i++) {
    rshape[i] = shape[nd - 1 - i] + (i == nd - 1 ? 1 : 0);
    perm[i] = nd - 1 - i;
  }
  LbTensor *buf = rand_tensor (nd, rshape, -2, 2);
  LbTensor t;
  g_assert_true (lb_tensor_view_narrow (&t, buf, nd - 1, 1, shape[0]));
  g_assert_true (lb_tensor_view_permute (view, &t, perm));
  for (int i = 0; i < nd; i++)
    g_assert_cmpint (view->shape[i], ==, shape[i]);
  return buf;
}

/* A poisoned output view of @shape: dim nd-1 narrowed out of a wider
 * buffer (2 extra elements per row, 1 before and 1 after). */
static LbTensor *
strided_output (int nd, const int64_t * shape, LbTensor * view)
{
  int64_t bshape[5];
  memcpy (bshape, shape, sizeof (int64_t) * nd);
  bshape[nd - 1] += 2;
  LbTensor *buf = poisoned (nd, bshape);
  g_assert_true (lb_tensor_view_narrow (view, buf, nd - 1, 1, shape[nd - 1]));
  return buf;
}

static const int64_t shapes[][5] = {
  {7},
  {3, 5},
  {2, 3, 70},
  {2, 3, 4, 5},
  {2, 2, 3, 4, 5},
};

/* ------------------------------------------------------------ copy, clamp */

static void
test_copy (void)
{
  for (guint k = 0; k < G_N_ELEMENTS (shapes); k++) {
    int nd = (int) k + 1;
    LbTensor x, y, yc;
    g_autoptr (LbTensor) xb = strided_input (nd, shapes[k], &x);
    g_autoptr (LbTensor) yb = strided_output (nd, shapes[k], &y);
    double *ref = ref_new (&y);
    for (int64_t i = 0; i < lb_tensor_numel (&x); i++)
      ref[i] = at (&x, i);
    assert_op_ok (lb_cpu_copy (test_stream (), &x, &y, error));
    assert_close ("copy", &y, ref, 0.0);
    assert_outside_untouched (yb, &y);

    /* contiguous both sides (the memcpy path) */
    g_autoptr (LbTensor) yc_buf = poisoned (nd, shapes[k]);
    g_autoptr (LbTensor) xc = lb_tensor_copy (&x);
    lb_tensor_view (&yc, yc_buf);
    assert_op_ok (lb_cpu_copy (test_stream (), xc, &yc, error));
    assert_close ("copy contiguous", &yc, ref, 0.0);
    g_free (ref);
  }
}

static void
test_clamp (void)
{
  for (guint k = 0; k < G_N_ELEMENTS (shapes); k++) {
    int nd = (int) k + 1;
    LbTensor x, y;
    g_autoptr (LbTensor) xb = strided_input (nd, shapes[k], &x);
    g_autoptr (LbTensor) yb = strided_output (nd, shapes[k], &y);
    /* special values at the first elements of the input view */
    float *x0 = x.data;
    x0[0] = NAN;
    if (lb_tensor_numel (&x) > 2) {
      x0[x.stride[nd - 1]] = INFINITY;
      x0[2 * x.stride[nd - 1]] = -INFINITY;
    }
    const float lo = -1.f, hi = 0.75f;
    assert_op_ok (lb_cpu_clamp (test_stream (), &x, lo, hi, &y, error));
    for (int64_t i = 0; i < lb_tensor_numel (&x); i++) {
      float v = at (&x, i), got = at (&y, i);
      if (isnan (v)) {
        g_assert_true (isnan (got));
        continue;
      }
      double r = MIN (MAX ((double) v, lo), hi);
      g_assert_cmpfloat ((double) got, ==, r);
    }
    assert_outside_untouched (yb, &y);
  }
  /* in place */
  int64_t s[2] = { 4, 9 };
  g_autoptr (LbTensor) t = rand_tensor (2, s, -3, 3);
  g_autoptr (LbTensor) t0 = lb_tensor_copy (t);
  assert_op_ok (lb_cpu_clamp (test_stream (), t, -1.f, 1.f, t, error));
  for (int64_t i = 0; i < 36; i++)
    g_assert_cmpfloat (((float *) t->data)[i], ==,
        MIN (MAX (((float *) t0->data)[i], -1.f), 1.f));
}

/* ------------------------------------------------------ fill, accumulate */

static void
test_fill (void)
{
  for (guint k = 0; k < G_N_ELEMENTS (shapes); k++) {
    int nd = (int) k + 1;
    LbTensor y;
    g_autoptr (LbTensor) yb = strided_output (nd, shapes[k], &y);
    double *ref = ref_new (&y);
    for (int64_t i = 0; i < lb_tensor_numel (&y); i++)
      ref[i] = -0.375;
    assert_op_ok (lb_cpu_fill (test_stream (), &y, -0.375f, error));
    assert_close ("fill", &y, ref, 0.0);
    assert_outside_untouched (yb, &y);
    g_free (ref);
  }
}

static void
test_accumulate (void)
{
  for (guint k = 0; k < G_N_ELEMENTS (shapes); k++) {
    int nd = (int) k + 1;
    LbTensor x, y;
    g_autoptr (LbTensor) xb = strided_input (nd, shapes[k], &x);
    g_autoptr (LbTensor) yb = strided_output (nd, shapes[k], &y);
    /* y starts as random values (the buffer's gaps stay NaN) */
    for (int64_t i = 0; i < lb_tensor_numel (&y); i++) {
      int64_t off = 0, flat = i;
      for (int d = nd - 1; d >= 0; d--) {
        off += (flat % y.shape[d]) * y.stride[d];
        flat /= y.shape[d];
      }
      ((float *) y.data)[off] = (float) g_test_rand_double_range (-1, 1);
    }
    double *ref = ref_new (&y);
    for (int64_t i = 0; i < lb_tensor_numel (&y); i++)
      ref[i] = (double) at (&y, i) + at (&x, i);
    assert_op_ok (lb_cpu_accumulate (test_stream (), &x, &y, error));
    assert_close ("accumulate", &y, ref, TOL_ELEM);
    assert_outside_untouched (yb, &y);
    g_free (ref);
  }
}

/* ---------------------------------------------------------- latent_affine */

static void
test_latent_affine (void)
{
  const int64_t shape[4] = { 16, 3, 4, 5 };
  int64_t cs[1] = { 16 };
  g_autoptr (LbTensor) mean = rand_tensor (1, cs, -1, 1);
  g_autoptr (LbTensor) inv_std = rand_tensor (1, cs, 0.2, 3);
  const float *m = mean->data, *is = inv_std->data;
  for (int denorm = 0; denorm < 2; denorm++) {
    LbTensor x, y;
    g_autoptr (LbTensor) xb = strided_input (4, shape, &x);
    g_autoptr (LbTensor) yb = strided_output (4, shape, &y);
    double *ref = ref_new (&y);
    const int64_t per_c = lb_tensor_numel (&x) / 16;
    for (int64_t i = 0; i < lb_tensor_numel (&x); i++) {
      int64_t c = i / per_c;
      double v = at (&x, i);
      ref[i] = denorm ? v / is[c] + m[c] : (v - m[c]) * is[c];
    }
    assert_op_ok (lb_cpu_latent_affine (test_stream (), &x, mean, inv_std,
            denorm, &y, error));
    assert_close (denorm ? "latent denormalize" : "latent normalize", &y,
        ref, TOL_ELEM);
    assert_outside_untouched (yb, &y);
    /* the reference's float order of operations, bit for bit (spec A.2:
     * divide by the float32 reciprocal) */
    for (int64_t i = 0; i < lb_tensor_numel (&x); i++) {
      int64_t c = i / per_c;
      float v = at (&x, i);
      float r = denorm ? v / is[c] + m[c] : (v - m[c]) * is[c];
      g_assert_cmpfloat (at (&y, i), ==, r);
    }
    g_free (ref);
  }
}

/* ------------------------------------------------------- channel_rms_norm */

static void
check_channel_rms_norm (int64_t C, int64_t T, int64_t H, int64_t W,
    gboolean silu, gboolean token_major, gboolean contig_x)
{
  const int64_t shape[4] = { C, T, H, W };
  LbTensor x, y;
  g_autoptr (LbTensor) xb = NULL;
  if (contig_x) {
    xb = rand_tensor (4, shape, -2, 2);
    lb_tensor_view (&x, xb);
  } else {
    xb = strided_input (4, shape, &x);
  }
  g_autoptr (LbTensor) g = rand_tensor (1, shape, 0.5, 1.5);
  /* voxel (0,0,0) all zeros, voxel (0,0,1) tiny: the 1e-12 clamp */
  for (int64_t c = 0; c < C; c++) {
    float *v = (float *) x.data + c * x.stride[0];
    v[0] = 0.f;
    if (W > 1)
      v[x.stride[3]] = 1e-14f;
  }
  g_autoptr (LbTensor) yb = NULL;
  if (token_major) {
    /* the attention's [N, C] buffer seen as [C, T, H, W] */
    int64_t bs[1] = { C * T * H * W };
    yb = poisoned (1, bs);
    int64_t st[4] = { 1, H * W * C, W * C, C };
    lb_tensor_view_init (&y, LB_DTYPE_F32, yb->data, LB_DEVICE_HOST, 4,
        shape, st);
  } else {
    /* the interior of a halo-padded conv input [C, T, H + 2, W] */
    int64_t ps[4] = { C, T, H + 2, W };
    yb = poisoned (4, ps);
    g_assert_true (lb_tensor_view_narrow (&y, yb, 2, 1, H));
  }
  double *ref = ref_new (&y);
  const double sc = sqrt ((double) C);
  for (int64_t v = 0; v < T * H * W; v++) {
    double ss = 0.0;
    for (int64_t c = 0; c < C; c++) {
      double e = at (&x, c * T * H * W + v);
      ss += e * e;
    }
    double n = MAX (sqrt (ss), 1e-12);
    for (int64_t c = 0; c < C; c++) {
      double r = at (&x, c * T * H * W + v) / n * sc * ((float *) g->data)[c];
      if (silu)
        r = r / (1.0 + exp (-r));
      ref[c * T * H * W + v] = r;
    }
  }
  assert_op_ok (lb_cpu_channel_rms_norm (test_stream (), &x, g, silu, &y,
          error));
  assert_close ("channel_rms_norm", &y, ref,
      silu ? TOL_CHNORM_SILU : TOL_CHNORM);
  if (!token_major)
    assert_outside_untouched (yb, &y);
  /* the clamped voxels: 0 stays 0, the tiny one is x / 1e-12 * sqrt(C) */
  g_assert_cmpfloat (at (&y, 0), ==, 0.f);
  if (W > 1 && !silu) {
    double want = 1e-14 / 1e-12 * sc * ((float *) g->data)[0];
    g_assert_cmpfloat (fabs (at (&y, 1) - want), <=, 1e-6 * want);
  }
  g_free (ref);
}

static void
test_channel_rms_norm (void)
{
  /* contiguous x into the padded interior is the unit-stride path */
  for (int silu = 0; silu < 2; silu++)
    for (int tm = 0; tm < 2; tm++)
      for (int cx = 0; cx < 2; cx++) {
        check_channel_rms_norm (4, 1, 3, 5, silu, tm, cx);
        /* W > 64: two blocks of voxels */
        check_channel_rms_norm (12, 2, 3, 70, silu, tm, cx);
        check_channel_rms_norm (1, 1, 1, 1, silu, tm, cx);
      }
}

/* bf16 y: the halo-padded channels-last conv input the VAE decoder
 * writes on CUDA ([C, T, H + 2, W] NDHWC, interior rows 1..H).  Every
 * element is lb_f32_to_bf16() of the f32 op's value, and the halo rows
 * keep their bytes. */
static void
check_channel_rms_norm_bf16 (int64_t C, int64_t T, int64_t H, int64_t W,
    gboolean silu, gboolean contig_x)
{
  const int64_t shape[4] = { C, T, H, W };
  LbTensor x;
  g_autoptr (LbTensor) xb = NULL;
  if (contig_x) {
    xb = rand_tensor (4, shape, -2, 2);
    lb_tensor_view (&x, xb);
  } else {
    xb = strided_input (4, shape, &x);
  }
  g_autoptr (LbTensor) g = rand_tensor (1, shape, 0.5, 1.5);
  g_autoptr (LbTensor) yf = tensor_new (4, shape);
  assert_op_ok (lb_cpu_channel_rms_norm (test_stream (), &x, g, silu, yf,
          error));
  const int64_t n = C * T * (H + 2) * W;
  g_autoptr (LbTensor) pb = lb_tensor_new (LB_DTYPE_BF16, 1, &n);
  uint16_t *p16 = pb->data;
  for (int64_t i = 0; i < n; i++)
    p16[i] = 0x7fc1;            /* a NaN no op writes */
  const int64_t ps[4] = { C, T, H + 2, W };
  const int64_t st[4] = { 1, (H + 2) * W * C, W * C, C };
  LbTensor padded, y;
  lb_tensor_view_init (&padded, LB_DTYPE_BF16, p16, LB_DEVICE_HOST, 4, ps, st);
  g_assert_true (lb_tensor_view_narrow (&y, &padded, 2, 1, H));
  assert_op_ok (lb_cpu_channel_rms_norm (test_stream (), &x, g, silu, &y,
          error));
  const float *vf = yf->data;
  for (int64_t c = 0; c < C; c++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t r = 0; r < H + 2; r++)
        for (int64_t w = 0; w < W; w++) {
          const uint16_t got = p16[((t * (H + 2) + r) * W + w) * C + c];
          const uint16_t want = r == 0 || r == H + 1 ? 0x7fc1 :
              lb_f32_to_bf16 (vf[((c * T + t) * H + r - 1) * W + w]);
          if (got != want)
            g_error ("channel_rms_norm bf16 y (%" G_GINT64_FORMAT ", %"
                G_GINT64_FORMAT ", %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
                "): 0x%04x, expected 0x%04x", c, t, r, w, got, want);
        }
}

static void
test_channel_rms_norm_bf16 (void)
{
  for (int silu = 0; silu < 2; silu++)
    for (int cx = 0; cx < 2; cx++) {
      check_channel_rms_norm_bf16 (4, 1, 3, 5, silu, cx);
      check_channel_rms_norm_bf16 (12, 2, 3, 70, silu, cx);
      check_channel_rms_norm_bf16 (33, 1, 2, 40, silu, cx);
      check_channel_rms_norm_bf16 (1, 1, 1, 1, silu, cx);
    }
}

/* fill of a bf16 view stores lb_f32_to_bf16() of the value, and nothing
 * outside the view. */
static void
test_fill_bf16 (void)
{
  const int64_t n = 2 * 5 * 7;
  g_autoptr (LbTensor) b = lb_tensor_new (LB_DTYPE_BF16, 1, &n);
  uint16_t *v = b->data;
  for (int64_t i = 0; i < n; i++)
    v[i] = 0x7fc1;
  /* [2, 3, 4] of the [2, 5, 7] buffer, rows 1..3, columns 2..5 */
  const int64_t shape[3] = { 2, 3, 4 }, st[3] = { 35, 7, 1 };
  LbTensor y;
  lb_tensor_view_init (&y, LB_DTYPE_BF16, v + 7 + 2, LB_DEVICE_HOST, 3,
      shape, st);
  const float value = 0.1f;     /* not a bf16: it rounds to 0x3dcd */
  assert_op_ok (lb_cpu_fill (test_stream (), &y, value, error));
  g_assert_cmphex (lb_f32_to_bf16 (value), ==, 0x3dcd);
  for (int64_t c = 0; c < 2; c++)
    for (int64_t r = 0; r < 5; r++)
      for (int64_t w = 0; w < 7; w++) {
        const gboolean in = r >= 1 && r <= 3 && w >= 2 && w <= 5;
        g_assert_cmphex (v[(c * 5 + r) * 7 + w], ==, in ? 0x3dcd : 0x7fc1);
      }
}

/* ------------------------------------------------ upsample_nearest2x_halo */

static void
test_upsample_halo (void)
{
  const int64_t C = 3, T = 2, h = 4, w = 5;
  /* x: rows 1 .. h + 2 of a [C, T, h + 4, w] buffer (stride[3] == 1) */
  int64_t bs[4] = { C, T, h + 4, w };
  g_autoptr (LbTensor) xb = rand_tensor (4, bs, -1, 1);
  LbTensor x;
  g_assert_true (lb_tensor_view_narrow (&x, xb, 2, 1, h + 2));
  int64_t ys[4] = { C, T, 2 * h + 2, 2 * w };
  g_autoptr (LbTensor) y = poisoned (4, ys);
  double *ref = ref_new (y);
  /* the full nearest x2 of x has 2h + 4 rows; y is rows 1 .. 2h + 2 */
  for (int64_t c = 0; c < C; c++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t r = 0; r < 2 * h + 2; r++)
        for (int64_t j = 0; j < 2 * w; j++) {
          int64_t full_r = r + 1;
          int64_t idx[4] = { c, t, full_r / 2, j / 2 };
          ref[((c * T + t) * (2 * h + 2) + r) * 2 * w + j] =
              lb_tensor_get (&x, idx);
        }
  assert_op_ok (lb_cpu_upsample_nearest2x_halo (test_stream (), &x, y, error));
  assert_close ("upsample_nearest2x_halo", y, ref, 0.0);
  g_free (ref);

  /* into bf16 channels-last (a conv's NDHWC input): every element is the
   * rounded f32 result, at its NDHWC place */
  const int64_t n = C * T * (2 * h + 2) * 2 * w;
  g_autoptr (LbTensor) yb = lb_tensor_new (LB_DTYPE_BF16, 1, &n);
  const int64_t st[4] = { 1, (2 * h + 2) * 2 * w * C, 2 * w * C, C };
  LbTensor y16;
  lb_tensor_view_init (&y16, LB_DTYPE_BF16, yb->data, LB_DEVICE_HOST, 4, ys,
      st);
  memset (yb->data, 0xff, n * 2);
  assert_op_ok (lb_cpu_upsample_nearest2x_halo (test_stream (), &x, &y16,
          error));
  const float *vf = y->data;
  const uint16_t *v16 = yb->data;
  for (int64_t c = 0; c < C; c++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t r = 0; r < 2 * h + 2; r++)
        for (int64_t j = 0; j < 2 * w; j++)
          g_assert_cmphex (v16[((t * (2 * h + 2) + r) * 2 * w + j) * C + c],
              ==, lb_f32_to_bf16 (vf[((c * T + t) * (2 * h + 2) + r) * 2 * w
                      + j]));
  /* a bf16 y in NCDHW is refused */
  g_autoptr (LbTensor) ncdhw = lb_tensor_new (LB_DTYPE_BF16, 4, ys);
  assert_op_error (lb_cpu_upsample_nearest2x_halo (test_stream (), &x, ncdhw,
          error), "upsample_nearest2x_halo: y is bf16 [3, 2, 10, 10] with "
      "strides [200, 100, 10, 1], expected a channels-last bf16 tensor "
      "(strides [1, H*W*C, W*C, C])");
}

/* ----------------------------------------------------------------- errors */

static void
test_errors (void)
{
  LbStream *s = test_stream ();
  int64_t a[2] = { 3, 4 }, b[2] = { 4, 3 }, c[1] = { 16 }, c8[1] = { 8 };
  int64_t x4[4] = { 16, 1, 2, 2 }, u[4] = { 2, 1, 4, 3 };
  g_autoptr (LbTensor) ta = tensor_new (2, a);
  g_autoptr (LbTensor) tb = tensor_new (2, b);
  g_autoptr (LbTensor) tc = tensor_new (1, c);
  g_autoptr (LbTensor) t8 = tensor_new (1, c8);
  g_autoptr (LbTensor) t4 = tensor_new (4, x4);
  g_autoptr (LbTensor) tu = tensor_new (4, u);
  g_autoptr (LbTensor) bf = lb_tensor_new (LB_DTYPE_BF16, 2, a);
  g_autoptr (LbTensor) hf = lb_tensor_new (LB_DTYPE_F16, 2, a);

  assert_op_error (lb_cpu_copy (s, ta, tb, error),
      "copy: x is f32 [3, 4], expected [4, 3]");
  /* bf16 is a copy dtype (tests/unit/test-ops-kvbf16.c), f16 is not */
  assert_op_error (lb_cpu_copy (s, hf, ta, error),
      "copy: x is f16 [3, 4], expected f32 or bf16 [3, 4]");
  assert_op_error (lb_cpu_clamp (s, ta, 0.f, 1.f, tb, error), NULL);
  /* fill also stores bf16 (test_fill_bf16), f16 it does not */
  assert_op_error (lb_cpu_fill (s, hf, 0.f, error),
      "fill: y is f16 [3, 4], expected f32 or bf16");
  assert_op_error (lb_cpu_fill (s, NULL, 0.f, error), NULL);
  assert_op_error (lb_cpu_accumulate (s, tb, ta, error), NULL);
  assert_op_error (lb_cpu_latent_affine (s, t4, t8, tc, TRUE, t4, error),
      "latent_affine: mean is f32 [8], expected [16]");
  assert_op_error (lb_cpu_latent_affine (s, tc, tc, tc, TRUE, tc, error), NULL);
  assert_op_error (lb_cpu_channel_rms_norm (s, t4, t8, TRUE, t4, error),
      "channel_rms_norm: gamma is f32 [8], expected [16]");
  assert_op_error (lb_cpu_channel_rms_norm (s, ta, tc, TRUE, ta, error), NULL);
  assert_op_error (lb_cpu_channel_rms_norm (s, t4, tc, TRUE, tu, error), NULL);
  /* [2, 1, 4, 3] -> rows must be 2 * 4 - 2 = 6 */
  int64_t bad[4] = { 2, 1, 8, 6 }, good[4] = { 2, 1, 6, 6 };
  g_autoptr (LbTensor) ybad = tensor_new (4, bad);
  g_autoptr (LbTensor) ygood = tensor_new (4, good);
  assert_op_error (lb_cpu_upsample_nearest2x_halo (s, tu, ybad, error),
      "upsample_nearest2x_halo: y is f32 [2, 1, 8, 6], expected "
      "[2, 1, 6, 6]");
  assert_op_ok (lb_cpu_upsample_nearest2x_halo (s, tu, ygood, error));
  /* a column-strided x is refused */
  LbTensor xs;
  int64_t xst[4] = { 24, 24, 6, 2 };
  int64_t big[1] = { 48 };
  g_autoptr (LbTensor) xbuf = tensor_new (1, big);
  lb_tensor_view_init (&xs, LB_DTYPE_F32, xbuf->data, LB_DEVICE_HOST, 4, u,
      xst);
  assert_op_error (lb_cpu_upsample_nearest2x_halo (s, &xs, ygood, error), NULL);
}

/* copy and fill walk y's smallest stride innermost: a channels-last bf16
 * view [C, T, H, W] (strides [1, H*W*C, W*C, C]) runs along C, not W;
 * y's dim order is kept where the strides are already descending. */
static void
test_walk_order (void)
{
  const int64_t shape[4] = { 6, 2, 3, 5 }, cl[4] = { 1, 90, 30, 6 };
  g_autoptr (LbTensor) b = lb_tensor_new (LB_DTYPE_BF16, 1,
      (int64_t[1]) { 180 });
  g_autoptr (LbTensor) f = tensor_new (4, shape);
  LbTensor y;
  lb_tensor_view_init (&y, LB_DTYPE_BF16, b->data, LB_DEVICE_HOST, 4, shape,
      cl);
  LbStrided5 g;
  g_assert_true (lb_check_copy (f, &y, &g, NULL));
  const int64_t want_shape[5] = { 1, 2, 3, 5, 6 }, want_ys[5] = { 0, 90, 30,
    6, 1
  }, want_xs[5] = { 0, 15, 5, 1, 30 };
  for (int d = 0; d < 5; d++) {
    g_assert_cmpint (g.shape[d], ==, want_shape[d]);
    g_assert_cmpint (g.ys[d], ==, want_ys[d]);
    g_assert_cmpint (g.xs[d], ==, want_xs[d]);
  }
  g_assert_cmpint (g.cdim, ==, 4);
  g_assert_true (lb_check_fill (&y, &g, NULL));
  g_assert_cmpint (g.ys[4], ==, 1);
  /* contiguous: unchanged */
  g_assert_true (lb_check_copy (f, f, &g, NULL));
  const int64_t same_ys[5] = { 0, 30, 15, 5, 1 };
  for (int d = 0; d < 5; d++)
    g_assert_cmpint (g.ys[d], ==, same_ys[d]);
  g_assert_cmpint (g.cdim, ==, 1);
}

static void
test_table (void)
{
  g_assert_null (lb_ops_first_missing (lb_cpu_backend ()->ops));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ops/strided/copy", test_copy);
  g_test_add_func ("/ops/strided/clamp", test_clamp);
  g_test_add_func ("/ops/strided/fill", test_fill);
  g_test_add_func ("/ops/strided/accumulate", test_accumulate);
  g_test_add_func ("/ops/strided/latent-affine", test_latent_affine);
  g_test_add_func ("/ops/channel-rms-norm", test_channel_rms_norm);
  g_test_add_func ("/ops/channel-rms-norm/bf16-y", test_channel_rms_norm_bf16);
  g_test_add_func ("/ops/strided/fill-bf16", test_fill_bf16);
  g_test_add_func ("/ops/upsample-nearest2x-halo", test_upsample_halo);
  g_test_add_func ("/ops/strided/errors", test_errors);
  g_test_add_func ("/ops/strided/walk-order", test_walk_order);
  g_test_add_func ("/ops/strided/table", test_table);
  return g_test_run ();
}

/* lingbot-gst: CUDA GEMM against the CPU oracle.  Exits 77 (skip) when no
 * CUDA device or no CUDA module is available.
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * f32 weights, then bf16 weights (kernels/ops.h: y = alpha * bf16(x) .
 * op(w) + beta * y + bias, f32 accumulation) against the CPU bf16 path,
 * which rounds x the same way: both sides multiply the same bf16 numbers,
 * so they differ only by f32 summation order.
 *
 * Then the fp8 gemm (kernels/ops.h @gemm_fp8) against the CPU oracle: both
 * sides quantise x per token with the same formula (amax / 448, an IEEE
 * division, nearest-even saturating E4M3), so they multiply the same E4M3
 * numbers and again differ only by f32 summation order: the tolerance is
 * GEMM_REL_TOL (1e-5 of the row's magnitude).  One code quantised
 * differently would cost ~2^-4 of one term, far above it.  Not yet run on
 * a GPU when written (the first GPU session measures it).  Each case also
 * runs gemm_fp8_q on the codes and scales the CPU makes of x (what
 * norm_fp8 writes), and a K 13824 shape takes gemm_fp8's quantisation in
 * two blocks of rows.  /gpu/gemm/fp8/gelu-q: gemm_fp8_gelu_q against its
 * pair on the GPU and the CPU oracle (check_fp8_gelu_case()).
 *
 * Then gemm_gelu_tanh's cuBLASLt GELU epilogue (/gpu/gemm/gelu-epilogue,
 * check_gelu_case()).
 */
#define _GNU_SOURCE             /* dladdr */
#include "lingbot/backend.h"
#include "kernels/error.h"
#include "tests/common/test-compare.h"

#include <dlfcn.h>
#include <gmodule.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FP32 accumulation in a different order: relative to the row's magnitude. */
#define GEMM_REL_TOL 1e-5

static LbBackend *cuda;

static void
fill_random (LbTensor * t, GRand * r)
{
  float *d = t->data;
  for (int64_t i = 0; i < lb_tensor_numel (t); i++)
    d[i] = (float) g_rand_double_range (r, -1.0, 1.0);
}

static void
check_case (int64_t m, int64_t n, int64_t k, gboolean trans_w,
    gboolean with_bias, float beta)
{
  g_autoptr (GRand) r = g_rand_new_with_seed ((guint32) (m * 131 + n * 7 + k));
  g_autoptr (GError) err = NULL;
  LbBackend *cpu = lb_cpu_backend ();
  LbStream *cs = cpu->stream_new (cpu, 0, NULL);
  LbStream *gs = cuda->stream_new (cuda, 0, &err);
  g_assert_no_error (err);

  int64_t xs[2] = { m, k }, ws[2] = { trans_w ? n : k, trans_w ? k : n };
  int64_t ys[2] = { m, n }, bs[1] = { n };
  g_autoptr (LbTensor) x = lb_tensor_new (LB_DTYPE_F32, 2, xs);
  g_autoptr (LbTensor) w = lb_tensor_new (LB_DTYPE_F32, 2, ws);
  g_autoptr (LbTensor) b = lb_tensor_new (LB_DTYPE_F32, 1, bs);
  g_autoptr (LbTensor) y0 = lb_tensor_new (LB_DTYPE_F32, 2, ys);
  fill_random (x, r);
  fill_random (w, r);
  fill_random (b, r);
  fill_random (y0, r);
  g_autoptr (LbTensor) ycpu = lb_tensor_copy (y0);
  g_autoptr (LbTensor) yback = lb_tensor_copy (y0);

  g_autoptr (LbTensor) dx = lb_tensor_new_on (gs, LB_DTYPE_F32, 2, xs, &err);
  g_autoptr (LbTensor) dw = lb_tensor_new_on (gs, LB_DTYPE_F32, 2, ws, &err);
  g_autoptr (LbTensor) db = lb_tensor_new_on (gs, LB_DTYPE_F32, 1, bs, &err);
  g_autoptr (LbTensor) dy = lb_tensor_new_on (gs, LB_DTYPE_F32, 2, ys, &err);
  g_assert_no_error (err);
  g_assert_true (lb_tensor_upload (gs, dx, x, &err));
  g_assert_true (lb_tensor_upload (gs, dw, w, &err));
  g_assert_true (lb_tensor_upload (gs, db, b, &err));
  g_assert_true (lb_tensor_upload (gs, dy, y0, &err));

  g_assert_true (lb_ops (cs)->gemm (cs, x, w, trans_w, with_bias ? b : NULL,
          0.5f, beta, ycpu, &err));
  g_assert_true (lb_ops (gs)->gemm (gs, dx, dw, trans_w, with_bias ? db : NULL,
          0.5f, beta, dy, &err));
  g_assert_no_error (err);
  g_assert_true (lb_tensor_download (gs, yback, dy, &err));
  g_assert_no_error (err);

  double maxabs = 0, maxdiff = 0;
  const float *a = ycpu->data, *g = yback->data;
  for (int64_t i = 0; i < m * n; i++) {
    maxabs = fmax (maxabs, fabs (a[i]));
    maxdiff = fmax (maxdiff, fabs ((double) a[i] - g[i]));
  }
  g_test_message ("gemm M=%" G_GINT64_FORMAT " N=%" G_GINT64_FORMAT " K=%"
      G_GINT64_FORMAT " trans=%d bias=%d beta=%g: max rel %.3g", m, n, k,
      trans_w, with_bias, beta, maxdiff / maxabs);
  g_assert_cmpfloat (maxdiff, <=, GEMM_REL_TOL * maxabs);
  cuda->stream_free (gs);
  cpu->stream_free (cs);
}

static void
test_gemm_parity (void)
{
  static const int64_t shapes[][3] = {
    {1, 1, 1}, {7, 13, 5}, {64, 64, 64}, {257, 129, 511}, {1024, 768, 384},
  };
  for (guint i = 0; i < G_N_ELEMENTS (shapes); i++) {
    for (int tw = 0; tw < 2; tw++) {
      check_case (shapes[i][0], shapes[i][1], shapes[i][2], tw, TRUE, 0.0f);
      check_case (shapes[i][0], shapes[i][1], shapes[i][2], tw, FALSE, 0.25f);
    }
  }
}

/* ------------------------------------------------------------ bf16 weights */

static LbTensor *
rand_bf16 (int64_t rows, int64_t cols, GRand * r)
{
  int64_t shape[2] = { rows, cols };
  LbTensor *t = lb_tensor_new (LB_DTYPE_BF16, 2, shape);
  uint16_t *d = t->data;
  for (int64_t i = 0; i < rows * cols; i++)
    d[i] = lb_f32_to_bf16 ((float) g_rand_double_range (r, -1.0, 1.0));
  return t;
}

/* max |a - b| / max |a| over n floats; a NaN or an infinity on either side
 * (a poisoned element the device did not write) is a failure. */
static double
rel_diff (const float *a, const float *b, int64_t n)
{
  double maxabs = 0, maxdiff = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite (a[i]) || !isfinite (b[i]))
      g_error ("element %" G_GINT64_FORMAT ": cpu %g, cuda %g", i,
          (double) a[i], (double) b[i]);
    maxabs = fmax (maxabs, fabs (a[i]));
    maxdiff = fmax (maxdiff, fabs ((double) a[i] - b[i]));
  }
  return maxdiff / fmax (maxabs, 1e-30);
}

/* One bf16 case.  @xpad > 0 makes x a view of [M, K + xpad] (row stride
 * K + xpad) on both sides.  With beta 0 the device y starts as NaN.  With
 * @also_f32 the same geometry first runs with an f32 weight on the same
 * stream: the plans differ only by dtype, so a plan cache that ignored the
 * dtypes would run the f32 plan on bf16 data and fail. */
static void
check_bf16_case (LbStream * gs, int64_t m, int64_t n, int64_t k,
    gboolean trans_w, gboolean with_bias, float beta, int64_t xpad,
    gboolean also_f32)
{
  g_autoptr (GRand) r = g_rand_new_with_seed ((guint32) (m * 977 + n * 31 +
          k * 3 + xpad));
  g_autoptr (GError) err = NULL;
  LbBackend *cpu = lb_cpu_backend ();
  LbStream *cs = cpu->stream_new (cpu, 0, NULL);

  int64_t xs[2] = { m, k + xpad }, ys[2] = { m, n }, bs[1] = { n };
  g_autoptr (LbTensor) xfull = lb_tensor_new (LB_DTYPE_F32, 2, xs);
  g_autoptr (LbTensor) w = rand_bf16 (trans_w ? n : k, trans_w ? k : n, r);
  g_autoptr (LbTensor) w32 = lb_tensor_to_f32 (w);
  g_autoptr (LbTensor) b = lb_tensor_new (LB_DTYPE_F32, 1, bs);
  g_autoptr (LbTensor) y0 = lb_tensor_new (LB_DTYPE_F32, 2, ys);
  fill_random (xfull, r);
  fill_random (b, r);
  if (beta != 0.0f)
    fill_random (y0, r);
  else
    for (int64_t i = 0; i < m * n; i++)
      ((float *) y0->data)[i] = NAN;
  g_autoptr (LbTensor) ycpu = lb_tensor_copy (y0);
  g_autoptr (LbTensor) yback = lb_tensor_copy (y0);

  g_autoptr (LbTensor) dxfull = test_upload (gs, xfull);
  g_autoptr (LbTensor) dw = test_upload (gs, w);
  g_autoptr (LbTensor) db = test_upload (gs, b);
  g_autoptr (LbTensor) dy = test_upload (gs, y0);
  LbTensor x, dx;
  g_assert_true (lb_tensor_view_narrow (&x, xfull, 1, 0, k));
  g_assert_true (lb_tensor_view_narrow (&dx, dxfull, 1, 0, k));

  if (also_f32) {
    g_autoptr (LbTensor) dw32 = test_upload (gs, w32);
    g_autoptr (LbTensor) y32 = lb_tensor_copy (y0);
    g_assert_true (lb_ops (gs)->gemm (gs, &dx, dw32, trans_w,
            with_bias ? db : NULL, 0.5f, beta, dy, &err));
    g_assert_no_error (err);
    g_assert_true (lb_ops (cs)->gemm (cs, &x, w32, trans_w,
            with_bias ? b : NULL, 0.5f, beta, y32, &err));
    g_assert_true (lb_tensor_download (gs, yback, dy, &err));
    g_assert_no_error (err);
    g_assert_cmpfloat (rel_diff (y32->data, yback->data, m * n), <=,
        GEMM_REL_TOL);
    /* back to the starting y for the bf16 run */
    g_assert_true (lb_tensor_upload (gs, dy, y0, &err));
    g_assert_no_error (err);
  }

  g_assert_true (lb_ops (cs)->gemm (cs, &x, w, trans_w, with_bias ? b : NULL,
          0.5f, beta, ycpu, &err));
  g_assert_no_error (err);
  g_assert_true (lb_ops (gs)->gemm (gs, &dx, dw, trans_w,
          with_bias ? db : NULL, 0.5f, beta, dy, &err));
  g_assert_no_error (err);
  g_assert_true (lb_tensor_download (gs, yback, dy, &err));
  g_assert_no_error (err);
  double rel = rel_diff (ycpu->data, yback->data, m * n);
  g_print ("# gemm bf16 M=%" G_GINT64_FORMAT " N=%" G_GINT64_FORMAT " K=%"
      G_GINT64_FORMAT " trans=%d bias=%d beta=%g x-row-stride=%"
      G_GINT64_FORMAT ": max rel %.3g\n", m, n, k, trans_w, with_bias,
      (double) beta, k + xpad, rel);
  g_assert_cmpfloat (rel, <=, GEMM_REL_TOL);
  cpu->stream_free (cs);
}

static void
test_gemm_bf16_parity (void)
{
  static const int64_t shapes[][3] = {
    {1, 1, 1}, {7, 13, 5}, {33, 17, 65}, {64, 64, 64}, {257, 129, 511},
    {1024, 768, 384}, {3, 1000, 7}, {300, 5, 1001},
  };
  g_autoptr (GError) err = NULL;
  LbStream *gs = cuda->stream_new (cuda, 0, &err);
  g_assert_no_error (err);
  for (guint i = 0; i < G_N_ELEMENTS (shapes); i++) {
    const int64_t *sz = shapes[i];
    for (int tw = 0; tw < 2; tw++) {
      check_bf16_case (gs, sz[0], sz[1], sz[2], tw, TRUE, 0.0f, 0, i == 3);
      check_bf16_case (gs, sz[0], sz[1], sz[2], tw, FALSE, 0.25f, 0, FALSE);
      check_bf16_case (gs, sz[0], sz[1], sz[2], tw, TRUE, -1.0f, 3, FALSE);
      check_bf16_case (gs, sz[0], sz[1], sz[2], tw, FALSE, 0.0f, 8, FALSE);
    }
  }
  cuda->stream_free (gs);
}

/* x of M * K > 64 Mi elements: the device converts it in two blocks of
 * rows through one scratch (cuda-gemm.c). */
static void
test_gemm_bf16_blocks (void)
{
  g_autoptr (GError) err = NULL;
  LbStream *gs = cuda->stream_new (cuda, 0, &err);
  g_assert_no_error (err);
  check_bf16_case (gs, 9000, 24, 8192, TRUE, TRUE, 0.0f, 0, FALSE);
  check_bf16_case (gs, 8500, 19, 8193, FALSE, FALSE, 0.5f, 5, FALSE);
  cuda->stream_free (gs);
}

/* The device rounds x exactly as lb_f32_to_bf16(): with w the identity
 * (bf16, exact) every output is one exact product plus exact zeros, so y
 * must equal bf16(x) bit for bit.  Values: ties both ways, just off ties,
 * random. */
static void
test_gemm_bf16_rounding (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (GRand) r = g_rand_new_with_seed (99);
  LbStream *gs = cuda->stream_new (cuda, 0, &err);
  g_assert_no_error (err);
  const int64_t m = 64, k = 48;
  int64_t xs[2] = { m, k }, ws[2] = { k, k };
  g_autoptr (LbTensor) x = lb_tensor_new (LB_DTYPE_F32, 2, xs);
  g_autoptr (LbTensor) w = lb_tensor_new_zeros (LB_DTYPE_BF16, 2, ws);
  g_autoptr (LbTensor) y = lb_tensor_new (LB_DTYPE_F32, 2, xs);
  float *xd = x->data;
  for (int64_t i = 0; i < m * k; i++) {
    uint32_t u;
    float v = (float) g_rand_double_range (r, -3.0, 3.0);
    memcpy (&u, &v, 4);
    switch (i % 4) {
      case 0:                  /* exact tie */
        u = (u & 0xffff0000u) | 0x8000u;
        break;
      case 1:                  /* just above a tie */
        u = (u & 0xffff0000u) | 0x8001u;
        break;
      case 2:                  /* just below a tie */
        u = (u & 0xffff0000u) | 0x7fffu;
        break;
      default:
        break;
    }
    memcpy (&xd[i], &u, 4);
  }
  for (int64_t i = 0; i < k; i++)
    ((uint16_t *) w->data)[i * k + i] = lb_f32_to_bf16 (1.0f);
  for (int64_t i = 0; i < m * k; i++)
    ((float *) y->data)[i] = NAN;
  g_autoptr (LbTensor) dx = test_upload (gs, x);
  g_autoptr (LbTensor) dw = test_upload (gs, w);
  g_autoptr (LbTensor) dy = test_upload (gs, y);
  for (int tw = 0; tw < 2; tw++) {
    g_assert_true (lb_ops (gs)->gemm (gs, dx, dw, tw, NULL, 1.0f, 0.0f, dy,
            &err));
    g_assert_no_error (err);
    g_assert_true (lb_tensor_download (gs, y, dy, &err));
    g_assert_no_error (err);
    for (int64_t i = 0; i < m * k; i++) {
      float want = lb_bf16_to_f32 (lb_f32_to_bf16 (xd[i]));
      float got = ((float *) y->data)[i];
      if (memcmp (&want, &got, 4) != 0)
        g_error ("x %.9g: device bf16 %.9g, host %.9g", (double) xd[i],
            (double) got, (double) want);
    }
  }
  cuda->stream_free (gs);
}

/* Argument errors: the CPU's messages (kernels/ops-check.c). */
static void
test_gemm_bf16_errors (void)
{
  g_autoptr (GError) err = NULL;
  LbStream *gs = cuda->stream_new (cuda, 0, &err);
  g_assert_no_error (err);
  int64_t xs[2] = { 4, 8 }, ws[2] = { 5, 8 }, ys[2] = { 4, 5 };
  g_autoptr (LbTensor) x = lb_tensor_new_on (gs, LB_DTYPE_F32, 2, xs, &err);
  g_autoptr (LbTensor) w16 = lb_tensor_new_on (gs, LB_DTYPE_F16, 2, ws, &err);
  g_autoptr (LbTensor) y = lb_tensor_new_on (gs, LB_DTYPE_F32, 2, ys, &err);
  g_assert_no_error (err);
  g_assert_false (lb_ops (gs)->gemm (gs, x, w16, TRUE, NULL, 1.0f, 0.0f, y,
          &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpstr (err->message, ==, "gemm: w is f16 [5, 8], expected f32 "
      "or bf16 (the weight dtypes gemm supports)");
  cuda->stream_free (gs);
}

/* An e4m3 [n, k] weight and its per-row scales, from random f32. */
static void
rand_fp8 (int64_t n, int64_t k, GRand * r, LbTensor ** wq, LbTensor ** sw)
{
  int64_t shape[2] = { n, k };
  g_autoptr (LbTensor) w = lb_tensor_new (LB_DTYPE_F32, 2, shape);
  fill_random (w, r);
  *wq = lb_tensor_new (LB_DTYPE_F8E4M3, 2, shape);
  *sw = lb_tensor_new (LB_DTYPE_F32, 1, &n);
  for (int64_t j = 0; j < n; j++)
    lb_quantize_e4m3_row ((const float *) w->data + j * k, k,
        (uint8_t *) (*wq)->data + j * k, (float *) (*sw)->data + j);
}

static void
check_fp8_case (LbStream * gs, int64_t m, int64_t n, int64_t k,
    gboolean with_bias, float alpha, float beta, int64_t xpad)
{
  g_autoptr (GRand) r = g_rand_new_with_seed ((guint32) (m * 977 + n * 31 +
          k * 3 + xpad + 7));
  g_autoptr (GError) err = NULL;
  LbBackend *cpu = lb_cpu_backend ();
  LbStream *cs = cpu->stream_new (cpu, 0, NULL);
  int64_t xs[2] = { m, k + xpad }, ys[2] = { m, n }, bs[1] = { n };
  g_autoptr (LbTensor) xfull = lb_tensor_new (LB_DTYPE_F32, 2, xs);
  LbTensor *wq_, *sw_;
  rand_fp8 (n, k, r, &wq_, &sw_);
  g_autoptr (LbTensor) wq = wq_;
  g_autoptr (LbTensor) sw = sw_;
  g_autoptr (LbTensor) b = lb_tensor_new (LB_DTYPE_F32, 1, bs);
  g_autoptr (LbTensor) y0 = lb_tensor_new (LB_DTYPE_F32, 2, ys);
  fill_random (xfull, r);
  fill_random (b, r);
  /* one all-zero row (scale 1) */
  memset (xfull->data, 0, (gsize) (k + xpad) * sizeof (float));
  if (beta != 0.0f)
    fill_random (y0, r);
  else
    for (int64_t i = 0; i < m * n; i++)
      ((float *) y0->data)[i] = NAN;
  g_autoptr (LbTensor) ycpu = lb_tensor_copy (y0);
  g_autoptr (LbTensor) yback = lb_tensor_copy (y0);
  g_autoptr (LbTensor) dxfull = test_upload (gs, xfull);
  g_autoptr (LbTensor) dw = test_upload (gs, wq);
  g_autoptr (LbTensor) dsw = test_upload (gs, sw);
  g_autoptr (LbTensor) db = test_upload (gs, b);
  g_autoptr (LbTensor) dy = test_upload (gs, y0);
  LbTensor x, dx;
  g_assert_true (lb_tensor_view_narrow (&x, xfull, 1, 0, k));
  g_assert_true (lb_tensor_view_narrow (&dx, dxfull, 1, 0, k));
  g_assert_true (lb_ops (cs)->gemm_fp8 (cs, &x, wq, sw, with_bias ? b : NULL,
          alpha, beta, ycpu, &err));
  g_assert_no_error (err);
  g_assert_true (lb_ops (gs)->gemm_fp8 (gs, &dx, dw, dsw,
          with_bias ? db : NULL, alpha, beta, dy, &err));
  g_assert_no_error (err);
  g_assert_true (lb_tensor_download (gs, yback, dy, &err));
  g_assert_no_error (err);
  double rel = rel_diff (ycpu->data, yback->data, m * n);
  g_print ("# gemm fp8 M=%" G_GINT64_FORMAT " N=%" G_GINT64_FORMAT " K=%"
      G_GINT64_FORMAT " bias=%d alpha=%g beta=%g x-row-stride=%"
      G_GINT64_FORMAT ": max rel %.3g against the CPU oracle\n", m, n, k,
      with_bias, (double) alpha, (double) beta, k + xpad, rel);
  g_assert_cmpfloat (rel, <=, GEMM_REL_TOL);

  /* gemm_fp8_q on the codes and scales the CPU makes of x (norm_fp8's
   * output): the same products as gemm_fp8, so the GPU's is within the
   * same tolerance of the CPU's, and the CPU's gemm_fp8_q is its
   * gemm_fp8 bit for bit.  The codes' row stride is K + 16 * (xpad > 0)
   * (cuBLASLt FP8 takes multiples of 16). */
  const int64_t qld = k + (xpad > 0 ? 16 : 0);
  g_autoptr (LbTensor) qfull = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { m, qld });
  g_autoptr (LbTensor) sx = lb_tensor_new (LB_DTYPE_F32, 1, &m);
  for (int64_t i = 0; i < m; i++)
    lb_quantize_e4m3_row ((const float *) xfull->data + i * (k + xpad), k,
        (uint8_t *) qfull->data + i * qld, (float *) sx->data + i);
  g_autoptr (LbTensor) dqfull = test_upload (gs, qfull);
  g_autoptr (LbTensor) dsx = test_upload (gs, sx);
  LbTensor q, dq;
  g_assert_true (lb_tensor_view_narrow (&q, qfull, 1, 0, k));
  g_assert_true (lb_tensor_view_narrow (&dq, dqfull, 1, 0, k));
  g_autoptr (LbTensor) ycpu_q = lb_tensor_copy (y0);
  g_autoptr (LbTensor) dyq = test_upload (gs, y0);
  g_autoptr (LbTensor) yback_q = lb_tensor_copy (y0);
  g_assert_true (lb_ops (cs)->gemm_fp8_q (cs, &q, sx, wq, sw,
          with_bias ? b : NULL, alpha, beta, ycpu_q, &err));
  g_assert_no_error (err);
  g_assert_true (memcmp (ycpu_q->data, ycpu->data,
          lb_tensor_nbytes (ycpu)) == 0);
  g_assert_true (lb_ops (gs)->gemm_fp8_q (gs, &dq, dsx, dw, dsw,
          with_bias ? db : NULL, alpha, beta, dyq, &err));
  g_assert_no_error (err);
  g_assert_true (lb_tensor_download (gs, yback_q, dyq, &err));
  g_assert_no_error (err);
  const double rel_q = rel_diff (ycpu->data, yback_q->data, m * n);
  g_print ("# gemm fp8_q (pre-quantised x, row stride %" G_GINT64_FORMAT
      "): max rel %.3g against the CPU oracle\n", qld, rel_q);
  g_assert_cmpfloat (rel_q, <=, GEMM_REL_TOL);
  cpu->stream_free (cs);
}

static void
test_gemm_fp8_parity (void)
{
  static const int64_t shapes[][3] = {
    {1, 16, 16}, {7, 32, 48}, {33, 16, 64}, {257, 128, 512},
    {1024, 768, 384}, {300, 16, 1008},
    /* the FFN's second GEMM (K = ffn_dim 13824): gemm_fp8 quantises x
     * 32 Mi / 13824 = 2427 rows at a time, so 2500 rows take two blocks */
    {2500, 16, 13824},
  };
  g_autoptr (GError) err = NULL;
  LbStream *gs = cuda->stream_new (cuda, 0, &err);
  g_assert_no_error (err);
  for (guint i = 0; i < G_N_ELEMENTS (shapes); i++) {
    const int64_t *sz = shapes[i];
    check_fp8_case (gs, sz[0], sz[1], sz[2], TRUE, 1.0f, 0.0f, 0);
    check_fp8_case (gs, sz[0], sz[1], sz[2], FALSE, 0.5f, 0.25f, 0);
    check_fp8_case (gs, sz[0], sz[1], sz[2], TRUE, 1.0f, 1.0f, 3);
  }
  /* FP8 tensor cores want K and N multiples of 16 */
  g_autoptr (GRand) r = g_rand_new_with_seed (5);
  LbTensor *wq_, *sw_;
  rand_fp8 (40, 24, r, &wq_, &sw_);
  g_autoptr (LbTensor) wq = wq_;
  g_autoptr (LbTensor) sw = sw_;
  g_autoptr (LbTensor) dw = test_upload (gs, wq);
  g_autoptr (LbTensor) dsw = test_upload (gs, sw);
  g_autoptr (LbTensor) dx = lb_tensor_new_on (gs, LB_DTYPE_F32, 2,
      (const int64_t[2]) { 4, 24 }, &err);
  g_autoptr (LbTensor) dy = lb_tensor_new_on (gs, LB_DTYPE_F32, 2,
      (const int64_t[2]) { 4, 40 }, &err);
  g_assert_no_error (err);
  g_assert_false (lb_ops (gs)->gemm_fp8 (gs, dx, dw, dsw, NULL, 1.0f, 0.0f,
          dy, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpstr (err->message, ==, "gemm_fp8: K = 24 and N = 40 must be "
      "multiples of 16 (cuBLASLt FP8)");
  /* and the codes of gemm_fp8_q a row stride that is one */
  g_clear_error (&err);
  g_autoptr (LbTensor) dq = lb_tensor_new_on (gs, LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 4, 40 }, &err);
  g_autoptr (LbTensor) dsx = lb_tensor_new_on (gs, LB_DTYPE_F32, 1,
      (const int64_t[1]) { 4 }, &err);
  g_autoptr (LbTensor) dw32 = lb_tensor_new_on (gs, LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 16, 32 }, &err);
  g_autoptr (LbTensor) dsw16 = lb_tensor_new_on (gs, LB_DTYPE_F32, 1,
      (const int64_t[1]) { 16 }, &err);
  g_autoptr (LbTensor) dy16 = lb_tensor_new_on (gs, LB_DTYPE_F32, 2,
      (const int64_t[2]) { 4, 16 }, &err);
  g_assert_no_error (err);
  LbTensor dq32;
  g_assert_true (lb_tensor_view_narrow (&dq32, dq, 1, 0, 32));
  g_assert_false (lb_ops (gs)->gemm_fp8_q (gs, &dq32, dsx, dw32, dsw16, NULL,
          1.0f, 0.0f, dy16, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpstr (err->message, ==, "gemm_fp8_q: x's row stride 40 must be "
      "a multiple of 16 (cuBLASLt FP8)");
  cuda->stream_free (gs);
}

/* e4m3 codes @a and @b within one step: equal, or of one sign with
 * magnitudes one code apart, or both within one code of zero. */
static gboolean
e4m3_close (uint8_t a, uint8_t b)
{
  const int ma = a & 0x7f, mb = b & 0x7f;
  if (a == b || (ma <= 1 && mb <= 1))
    return TRUE;
  return (a & 0x80) == (b & 0x80) && ABS (ma - mb) <= 1;
}

/* gemm_fp8_gelu_q (kernels/ops-list.h) on codes and row scales the CPU
 * makes of a random x: on the GPU, against its pair on the GPU
 * (gemm_fp8_q with beta 0, gelu_tanh, then each downloaded row quantised
 * by lb_quantize_e4m3_row(), the device quantiser's formulas) bit for bit
 * when the op's matmul takes all rows in one block (the pair's matmul is
 * then the same call), else each code within one e4m3 step; against the
 * CPU oracle each code within one step and the scales within
 * GEMM_REL_TOL (the accumulators differ by summation order, expf by an
 * ulp). */
static void
check_fp8_gelu_case (LbStream * gs, int64_t m, int64_t n, int64_t k,
    gboolean with_bias)
{
  g_autoptr (GRand) r = g_rand_new_with_seed ((guint32) (m * 613 + n * 17 +
          k + with_bias));
  g_autoptr (GError) err = NULL;
  LbBackend *cpu = lb_cpu_backend ();
  LbStream *cs = cpu->stream_new (cpu, 0, NULL);
  const int64_t xs[2] = { m, k }, ys[2] = { m, n };
  g_autoptr (LbTensor) x = lb_tensor_new (LB_DTYPE_F32, 2, xs);
  fill_random (x, r);
  memset (x->data, 0, (gsize) k * sizeof (float));      /* a zero row */
  g_autoptr (LbTensor) xq = lb_tensor_new (LB_DTYPE_F8E4M3, 2, xs);
  g_autoptr (LbTensor) sx = lb_tensor_new (LB_DTYPE_F32, 1, &m);
  for (int64_t i = 0; i < m; i++)
    lb_quantize_e4m3_row ((const float *) x->data + i * k, k,
        (uint8_t *) xq->data + i * k, (float *) sx->data + i);
  LbTensor *wq_, *sw_;
  rand_fp8 (n, k, r, &wq_, &sw_);
  g_autoptr (LbTensor) wq = wq_;
  g_autoptr (LbTensor) sw = sw_;
  g_autoptr (LbTensor) b = lb_tensor_new (LB_DTYPE_F32, 1, &n);
  fill_random (b, r);
  const LbTensor *cb = with_bias ? b : NULL;

  /* the CPU oracle */
  g_autoptr (LbTensor) yc = lb_tensor_new (LB_DTYPE_F8E4M3, 2, ys);
  g_autoptr (LbTensor) syc = lb_tensor_new (LB_DTYPE_F32, 1, &m);
  g_assert_true (lb_ops (cs)->gemm_fp8_gelu_q (cs, xq, sx, wq, sw, cb, 1.0f,
          yc, syc, &err));
  g_assert_no_error (err);

  /* the GPU op and the GPU pair */
  g_autoptr (LbTensor) dxq = test_upload (gs, xq);
  g_autoptr (LbTensor) dsx = test_upload (gs, sx);
  g_autoptr (LbTensor) dw = test_upload (gs, wq);
  g_autoptr (LbTensor) dsw = test_upload (gs, sw);
  g_autoptr (LbTensor) db = test_upload (gs, b);
  const LbTensor *gb = with_bias ? db : NULL;
  g_autoptr (LbTensor) dyq = lb_tensor_new_on (gs, LB_DTYPE_F8E4M3, 2, ys,
      &err);
  g_autoptr (LbTensor) dsy = lb_tensor_new_on (gs, LB_DTYPE_F32, 1, &m, &err);
  g_autoptr (LbTensor) dh = lb_tensor_new_on (gs, LB_DTYPE_F32, 2, ys, &err);
  g_assert_no_error (err);
  g_assert_true (lb_ops (gs)->gemm_fp8_gelu_q (gs, dxq, dsx, dw, dsw, gb,
          1.0f, dyq, dsy, &err) &&
      lb_ops (gs)->gemm_fp8_q (gs, dxq, dsx, dw, dsw, gb, 1.0f, 0.0f, dh,
          &err) && lb_ops (gs)->gelu_tanh (gs, dh, dh, &err));
  g_assert_no_error (err);
  g_autoptr (LbTensor) yg = lb_tensor_new (LB_DTYPE_F8E4M3, 2, ys);
  g_autoptr (LbTensor) syg = lb_tensor_new (LB_DTYPE_F32, 1, &m);
  g_autoptr (LbTensor) h = lb_tensor_new (LB_DTYPE_F32, 2, ys);
  g_assert_true (lb_tensor_download (gs, yg, dyq, &err) &&
      lb_tensor_download (gs, syg, dsy, &err) &&
      lb_tensor_download (gs, h, dh, &err));
  g_assert_no_error (err);
  g_autoptr (LbTensor) yp = lb_tensor_new (LB_DTYPE_F8E4M3, 2, ys);
  g_autoptr (LbTensor) syp = lb_tensor_new (LB_DTYPE_F32, 1, &m);
  for (int64_t i = 0; i < m; i++)
    lb_quantize_e4m3_row ((const float *) h->data + i * n, n,
        (uint8_t *) yp->data + i * n, (float *) syp->data + i);

  const gboolean one_block = m * n * 4 <= (int64_t) (32 << 20);
  const uint8_t *cg = yg->data, *cp = yp->data, *cc = yc->data;
  int64_t diff_pair = 0, diff_cpu = 0;
  for (int64_t i = 0; i < m * n; i++) {
    if (cg[i] != cp[i]) {
      diff_pair++;
      if (!e4m3_close (cg[i], cp[i]))
        g_error ("gemm_fp8_gelu_q: code %" G_GINT64_FORMAT " is 0x%02x, the "
            "GPU pair's 0x%02x", i, cg[i], cp[i]);
    }
    if (cg[i] != cc[i]) {
      diff_cpu++;
      if (!e4m3_close (cg[i], cc[i]))
        g_error ("gemm_fp8_gelu_q: code %" G_GINT64_FORMAT " is 0x%02x, the "
            "CPU's 0x%02x", i, cg[i], cc[i]);
    }
  }
  double srel = 0.0;
  for (int64_t i = 0; i < m; i++) {
    const float a = ((float *) syg->data)[i], c = ((float *) syc->data)[i];
    srel = MAX (srel, fabs ((double) a - c) / MAX (fabs ((double) c), 1e-30));
  }
  g_print ("# gemm fp8_gelu_q M=%" G_GINT64_FORMAT " N=%" G_GINT64_FORMAT
      " K=%" G_GINT64_FORMAT " bias=%d: %" G_GINT64_FORMAT " codes differ "
      "from the GPU pair (%s), %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT
      " from the CPU oracle (one step at most), scales max rel %.3g\n", m,
      n, k, with_bias, diff_pair, one_block ? "one row block" : "row blocks",
      diff_cpu, m * n, srel);
  g_assert_cmpfloat (srel, <=, GEMM_REL_TOL);
  if (one_block) {
    g_assert_cmpint (diff_pair, ==, 0);
    g_assert_true (memcmp (syg->data, syp->data, m * sizeof (float)) == 0);
  }
  /* the zero row without a bias: GELU (0) = 0, scale 1 */
  if (!with_bias)
    g_assert_cmpfloat (((float *) syg->data)[0], ==, 1.0f);
  cpu->stream_free (cs);
}

static void
test_gemm_fp8_gelu_q (void)
{
  static const int64_t shapes[][3] = {
    {1, 16, 16}, {7, 32, 48}, {257, 128, 512}, {33, 1008, 64},
    /* the FFN's first GEMM at 14B (N = ffn_dim 13824, K = D 5120), a few
     * rows; then 700 rows, which the op's matmul takes in two blocks
     * (32 Mi / (4 * 13824) = 606 rows) */
    {8, 13824, 5120}, {700, 13824, 64},
  };
  g_autoptr (GError) err = NULL;
  LbStream *gs = cuda->stream_new (cuda, 0, &err);
  g_assert_no_error (err);
  for (guint i = 0; i < G_N_ELEMENTS (shapes); i++) {
    const int64_t *sz = shapes[i];
    check_fp8_gelu_case (gs, sz[0], sz[1], sz[2], TRUE);
    check_fp8_gelu_case (gs, sz[0], sz[1], sz[2], FALSE);
  }
  /* x's row stride must suit cuBLASLt FP8 */
  g_autoptr (LbTensor) dq = lb_tensor_new_on (gs, LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 4, 40 }, &err);
  g_autoptr (LbTensor) dsx = lb_tensor_new_on (gs, LB_DTYPE_F32, 1,
      (const int64_t[1]) { 4 }, &err);
  g_autoptr (LbTensor) dw = lb_tensor_new_on (gs, LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 16, 32 }, &err);
  g_autoptr (LbTensor) dsw = lb_tensor_new_on (gs, LB_DTYPE_F32, 1,
      (const int64_t[1]) { 16 }, &err);
  g_autoptr (LbTensor) dy = lb_tensor_new_on (gs, LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 4, 16 }, &err);
  g_assert_no_error (err);
  LbTensor dq32;
  g_assert_true (lb_tensor_view_narrow (&dq32, dq, 1, 0, 32));
  g_assert_false (lb_ops (gs)->gemm_fp8_gelu_q (gs, &dq32, dsx, dw, dsw, NULL,
          1.0f, dy, dsx, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpstr (err->message, ==, "gemm_fp8_gelu_q: x's row stride 40 "
      "must be a multiple of 16 (cuBLASLt FP8)");
  cuda->stream_free (gs);
}

/* ------------------------------------------------------- GELU epilogue */

typedef void (*GemmStatsFunc) (guint64 * runs, guint64 * declined,
    char **last_error);

/* lingbot_backend_cuda_gemm_stats() of the loaded CUDA module */
static GemmStatsFunc
gemm_stats_func (void)
{
  static GemmStatsFunc f;
  if (f == NULL) {
    Dl_info info;
    if (dladdr ((void *) cuda->stream_new, &info) == 0 ||
        info.dli_fname == NULL)
      g_error ("the CUDA backend module's file is unknown (dladdr)");
    GModule *m = g_module_open (info.dli_fname, G_MODULE_BIND_LOCAL);
    if (m == NULL || !g_module_symbol (m, "lingbot_backend_cuda_gemm_stats",
            (gpointer *) & f) || f == NULL)
      g_error ("%s: no lingbot_backend_cuda_gemm_stats (%s)",
          info.dli_fname, g_module_error ());
  }
  return f;
}

static void
expect_epilogue (const char *what, guint64 runs0, guint64 declined0,
    guint64 runs)
{
  guint64 r, d;
  g_autofree char *msg = NULL;
  gemm_stats_func ()(&r, &d, &msg);
  if (r - runs0 != runs || d != declined0)
    g_error ("%s: the GELU epilogue ran %" G_GUINT64_FORMAT " time(s) and "
        "declined %" G_GUINT64_FORMAT ", expected %" G_GUINT64_FORMAT
        " and 0; last plan-build error: %s", what, r - runs0, d - declined0,
        runs, msg ? msg : "none");
}

/* Downloads @d (f32 or bf16) into f32 values. */
static LbTensor *
download_f32 (LbStream * gs, const LbTensor * d)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LbTensor) h = lb_tensor_new (d->dtype, d->ndim, d->shape);
  g_assert_true (lb_tensor_download (gs, h, d, &err));
  g_assert_no_error (err);
  LbTensor *f = lb_tensor_new (LB_DTYPE_F32, d->ndim, d->shape);
  g_assert_true (lb_tensor_copy_into (f, h, NULL));
  return f;
}

/* max |a - b| / max |a| over two f32 tensors of one shape */
static double
max_rel (const LbTensor * a, const LbTensor * b)
{
  double maxabs = 0, maxdiff = 0;
  const float *x = a->data, *y = b->data;
  for (int64_t i = 0; i < lb_tensor_numel (a); i++) {
    maxabs = fmax (maxabs, fabs (x[i]));
    maxdiff = fmax (maxdiff, fabs ((double) x[i] - y[i]));
  }
  return maxabs > 0 ? maxdiff / maxabs : maxdiff;
}

/* gemm_gelu_tanh with a bf16 x and w (the FFN's first layer on a bf16
 * rank): cuBLASLt's GELU epilogue must run (module counters: a key without
 * a plan fails the test with cuBLASLt's message), into an f32 y and a bf16
 * y, against the CPU op pair.  f32 y: GELU_TOL, the GEMM's summation order
 * plus cuBLASLt's own tanh (not yet measured on a device when written;
 * the figure is printed); bf16 y: one bf16 ulp more.  With
 * LINGBOT_CUDA_GEMM_EPILOGUE=own the device runs the pair instead (the
 * counters do not move) and gives the gemm + gelu_tanh kernels' bits. */
#define GELU_TOL 2e-3
#define GELU_TOL_BF16 1e-2

static void
check_gelu_case (int64_t m, int64_t n, int64_t k, gboolean with_bias)
{
  g_autoptr (GRand) r = g_rand_new_with_seed ((guint32) (m * 31 + n + k));
  g_autoptr (GError) err = NULL;
  LbBackend *cpu = lb_cpu_backend ();
  LbStream *cs = cpu->stream_new (cpu, 0, NULL);
  LbStream *gs = cuda->stream_new (cuda, 0, &err);
  g_assert_no_error (err);
  gs->math = LB_MATH_BF16;
  int64_t xs[2] = { m, k }, ws[2] = { n, k }, ys[2] = { m, n }, bs[1] = { n };
  g_autoptr (LbTensor) xf = lb_tensor_new (LB_DTYPE_F32, 2, xs);
  g_autoptr (LbTensor) wf = lb_tensor_new (LB_DTYPE_F32, 2, ws);
  g_autoptr (LbTensor) b = lb_tensor_new (LB_DTYPE_F32, 1, bs);
  fill_random (xf, r);
  fill_random (wf, r);
  fill_random (b, r);
  g_autoptr (LbTensor) x = lb_tensor_new (LB_DTYPE_BF16, 2, xs);
  g_autoptr (LbTensor) w = lb_tensor_new (LB_DTYPE_BF16, 2, ws);
  g_assert_true (lb_tensor_copy_into (x, xf, NULL));
  g_assert_true (lb_tensor_copy_into (w, wf, NULL));
  const LbTensor *bias = with_bias ? b : NULL;
  g_autoptr (LbTensor) ref = lb_tensor_new (LB_DTYPE_F32, 2, ys);
  g_assert_true (lb_ops (cs)->gemm_gelu_tanh (cs, x, w, TRUE, bias, 1.0f,
          ref, &err));
  g_assert_no_error (err);

  g_autoptr (LbTensor) dx = lb_tensor_new_on (gs, LB_DTYPE_BF16, 2, xs, &err);
  g_autoptr (LbTensor) dw = lb_tensor_new_on (gs, LB_DTYPE_BF16, 2, ws, &err);
  g_autoptr (LbTensor) db = lb_tensor_new_on (gs, LB_DTYPE_F32, 1, bs, &err);
  g_autoptr (LbTensor) dy = lb_tensor_new_on (gs, LB_DTYPE_F32, 2, ys, &err);
  g_autoptr (LbTensor) dy16 = lb_tensor_new_on (gs, LB_DTYPE_BF16, 2, ys, &err);
  g_autoptr (LbTensor) dpair = lb_tensor_new_on (gs, LB_DTYPE_F32, 2, ys, &err);
  g_assert_no_error (err);
  g_assert_true (lb_tensor_upload (gs, dx, x, &err) &&
      lb_tensor_upload (gs, dw, w, &err) && lb_tensor_upload (gs, db, b, &err));
  g_assert_no_error (err);
  const LbTensor *dbias = with_bias ? db : NULL;

  guint64 runs0, declined0;
  gemm_stats_func ()(&runs0, &declined0, NULL);
  g_assert_true (lb_ops (gs)->gemm_gelu_tanh (gs, dx, dw, TRUE, dbias, 1.0f,
          dy, &err));
  g_assert_true (lb_ops (gs)->gemm_gelu_tanh (gs, dx, dw, TRUE, dbias, 1.0f,
          dy16, &err));
  g_assert_no_error (err);
  g_autofree char *what = g_strdup_printf ("gemm_gelu_tanh M=%"
      G_GINT64_FORMAT " N=%" G_GINT64_FORMAT " K=%" G_GINT64_FORMAT
      " bias=%d", m, n, k, with_bias);
  g_autoptr (LbTensor) got = download_f32 (gs, dy);
  g_autoptr (LbTensor) got16 = download_f32 (gs, dy16);
  expect_epilogue (what, runs0, declined0, 2);
  const double e32 = max_rel (ref, got), e16 = max_rel (ref, got16);
  g_test_message ("%s (cuBLASLt GELU epilogue): max rel %.3g f32 y, %.3g "
      "bf16 y", what, e32, e16);
  g_assert_cmpfloat (e32, <=, GELU_TOL);
  g_assert_cmpfloat (e16, <=, GELU_TOL_BF16);

  /* the pair on the device: the gemm and gelu_tanh kernels' bits */
  g_setenv ("LINGBOT_CUDA_GEMM_EPILOGUE", "own", TRUE);
  g_assert_true (lb_ops (gs)->gemm_gelu_tanh (gs, dx, dw, TRUE, dbias, 1.0f,
          dy, &err));
  g_unsetenv ("LINGBOT_CUDA_GEMM_EPILOGUE");
  g_assert_true (lb_ops (gs)->gemm (gs, dx, dw, TRUE, dbias, 1.0f, 0.0f,
          dpair, &err) && lb_ops (gs)->gelu_tanh (gs, dpair, dpair, &err));
  g_assert_no_error (err);
  g_autoptr (LbTensor) own = download_f32 (gs, dy);
  g_autoptr (LbTensor) pair = download_f32 (gs, dpair);
  g_assert_cmpmem (own->data, lb_tensor_nbytes (own), pair->data,
      lb_tensor_nbytes (pair));
  expect_epilogue (what, runs0, declined0, 2);
  cuda->stream_free (gs);
  cpu->stream_free (cs);
}

static void
test_gemm_gelu_epilogue (void)
{
  check_gelu_case (1, 8, 8, TRUE);
  check_gelu_case (7, 64, 40, FALSE);
  check_gelu_case (257, 136, 512, TRUE);
  /* a 14B FFN's first layer over a 4-rank band: 5120 -> 13824 */
  check_gelu_case (390, 13824, 5120, TRUE);
}

int
main (int argc, char **argv)
{
  g_autoptr (GError) err = NULL;
  g_test_init (&argc, &argv, NULL);
  cuda = lingbot_backend_cuda (&err);
  if (cuda == NULL) {
    printf ("SKIP: %s\n", err->message);
    return 77;
  }
  g_test_add_func ("/gpu/gemm/parity", test_gemm_parity);
  g_test_add_func ("/gpu/gemm/bf16/parity", test_gemm_bf16_parity);
  g_test_add_func ("/gpu/gemm/bf16/blocks", test_gemm_bf16_blocks);
  g_test_add_func ("/gpu/gemm/bf16/rounding", test_gemm_bf16_rounding);
  g_test_add_func ("/gpu/gemm/bf16/errors", test_gemm_bf16_errors);
  g_test_add_func ("/gpu/gemm/fp8/parity", test_gemm_fp8_parity);
  g_test_add_func ("/gpu/gemm/fp8/gelu-q", test_gemm_fp8_gelu_q);
  g_test_add_func ("/gpu/gemm/gelu-epilogue", test_gemm_gelu_epilogue);
  return g_test_run ();
}

/* lingbot-gst: CPU GEMM through OpenBLAS
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * f32 weights go straight to cblas_sgemm.  A bf16 weight (spec 1.11
 * storage) is the oracle of the device backends' bf16 GEMM: x is rounded
 * to bf16 and both operands are widened (exactly) to f32 in a per-call
 * scratch, then every output element is one f32 dot product over K in a
 * fixed order (8 interleaved partial sums, combined pairwise), so the
 * result is `bf16(x) . w` accumulated in f32 (kernels/ops.h) and a row of
 * y does not depend on how many rows are computed with it: a rank holding
 * a band of the tokens gets the bits the whole-sequence product would give
 * (cblas_sgemm does not promise that; its blocking depends on M).  That
 * path allocates on every call and is not tuned: CPU ranks keep f32
 * weights in production, and only tests and the emulated device backend
 * use it.
 */
#include "kernels/cpu/cpu-internal.h"

#include <cblas.h>
#include <string.h>

/* op(w)^T of a bf16 @w as a contiguous f32 [n, k] block (K innermost),
 * widened exactly. */
static float *
widen_bf16_nk (const uint16_t * w, gboolean trans_w, int64_t n, int64_t k,
    int64_t wld)
{
  float *dst = g_malloc (MAX (n * k, 1) * sizeof (float));
  for (int64_t j = 0; j < n; j++)
    for (int64_t l = 0; l < k; l++)
      dst[j * k + l] = lb_bf16_to_f32 (trans_w ? w[j * wld + l] :
          w[l * wld + j]);
  return dst;
}

/* The f32 dot product of the bf16 path: lane t of 8 sums the products
 * l = t, t + 8, ... in order, then the lanes are added pairwise. */
static float
dot_f32 (const float *a, const float *b, int64_t k)
{
  float acc[8] = { 0 };
  int64_t l = 0;
  for (; l + 8 <= k; l += 8)
    for (int t = 0; t < 8; t++)
      acc[t] += a[l + t] * b[l + t];
  for (int t = 0; l + t < k; t++)
    acc[t] += a[l + t] * b[l + t];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
      ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* y = alpha * bf16(x) . op(w) + b * y (b == 0: y is not read) with x
 * [m, k] (row stride xld) and a bf16 w; see the file comment. */
static void
gemm_bf16 (const float *x, int64_t xld, const uint16_t * w, gboolean trans_w,
    int64_t wld, int64_t m, int64_t n, int64_t k, float alpha, float b,
    float *y, int64_t yld)
{
  g_autofree float *xs = g_malloc (MAX (m * k, 1) * sizeof (float));
  g_autofree float *ws = widen_bf16_nk (w, trans_w, n, k, wld);
  for (int64_t i = 0; i < m; i++)
    for (int64_t l = 0; l < k; l++)
      xs[i * k + l] = lb_bf16_to_f32 (lb_f32_to_bf16 (x[i * xld + l]));
#pragma omp parallel for schedule(static) if (m * n * k >= (1 << 18))
  for (int64_t i = 0; i < m; i++) {
    float *row = y + i * yld;
    for (int64_t j = 0; j < n; j++) {
      float v = alpha * dot_f32 (xs + i * k, ws + j * k, k);
      row[j] = b == 0.0f ? v : v + b * row[j];
    }
  }
}

/**
 * lb_cpu_gemm:
 * @s: a CPU stream
 * @x: [M, K] float32 (or contiguous [..., K], flattened)
 * @w: [N, K] when @trans_w (PyTorch Linear weight) else [K, N], float32 or
 *   bfloat16
 * @trans_w: whether @w is stored transposed
 * @bias: (nullable): [N] float32
 * @alpha: scale of x.w
 * @beta: scale of the previous content of @y (0 ignores it, NaN included)
 * @y: [M, N] float32 output
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `y = alpha * x . op(w) + beta * y + bias` through OpenBLAS cblas_sgemm,
 * which threads internally.  With K = 0 or @alpha = 0, x and w are not read
 * (BLAS convention) and y = bias + beta * y.
 *
 * With a bf16 @w: `y = alpha * bf16(x) . op(w) + beta * y + bias`, x
 * rounded to bfloat16 element by element, products accumulated in f32 in
 * a fixed order per output element, so each row of y is independent of M
 * (kernels/ops.h and the file comment); x and w are widened into scratch
 * allocated by this call (M K + N K floats), which makes it the reference
 * for other backends, not a production path.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_gemm (LbStream * s, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  LbGemmGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "gemm", error, "x", x, "w", w,
          "bias", bias, "y", y, NULL) ||
      !lb_check_gemm (x, w, trans_w, bias, y, &g, error))
    return FALSE;
  const int64_t m = g.m, n = g.n, k = g.k, yld = g.yld;
  const int64_t xld = g.xld, wld = g.wld;

  float *yd = y->data;
  float b = beta;
  if (bias) {
    const float *bd = bias->data;
    for (int64_t i = 0; i < m; i++) {
      float *row = yd + i * yld;
      if (beta == 0.0f)
        memcpy (row, bd, n * sizeof (float));
      else
        for (int64_t j = 0; j < n; j++)
          row[j] = beta * row[j] + bd[j];
    }
    b = 1.0f;
  }
  if (m == 0 || n == 0)
    return TRUE;
  if (k == 0 || alpha == 0.0f) {
    /* nothing to multiply: y = b * y (b == 0 overwrites, NaN included) */
    for (int64_t i = 0; i < m && b != 1.0f; i++) {
      float *row = yd + i * yld;
      if (b == 0.0f)
        memset (row, 0, n * sizeof (float));
      else
        for (int64_t j = 0; j < n; j++)
          row[j] *= b;
    }
    return TRUE;
  }
  if (w->dtype == LB_DTYPE_BF16) {
    gemm_bf16 (x->data, xld, w->data, trans_w, wld, m, n, k, alpha, b, yd,
        yld);
    return TRUE;
  }
  cblas_sgemm (CblasRowMajor, CblasNoTrans,
      trans_w ? CblasTrans : CblasNoTrans, (blasint) m, (blasint) n,
      (blasint) k, alpha, x->data, (blasint) xld, w->data, (blasint) wld, b,
      yd, (blasint) yld);
  return TRUE;
}

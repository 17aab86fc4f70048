/* lingbot-gst: CPU GEMM through OpenBLAS
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/cpu/cpu-internal.h"

#include <cblas.h>
#include <string.h>

/**
 * lb_cpu_gemm:
 * @s: a CPU stream
 * @x: [M, K] float32 (or contiguous [..., K], flattened)
 * @w: [N, K] when @trans_w (PyTorch Linear weight) else [K, N], float32
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
  cblas_sgemm (CblasRowMajor, CblasNoTrans,
      trans_w ? CblasTrans : CblasNoTrans, (blasint) m, (blasint) n,
      (blasint) k, alpha, x->data, (blasint) xld, w->data, (blasint) wld, b,
      yd, (blasint) yld);
  return TRUE;
}

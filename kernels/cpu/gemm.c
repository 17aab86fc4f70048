/* lingbot-gst: CPU GEMM through OpenBLAS
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/cpu/cpu-internal.h"

#include <cblas.h>
#include <string.h>

/* Row stride of a 2-D view whose last dim is unit-stride, or of a contiguous
 * N-D tensor flattened to [numel/last, last].  Returns FALSE otherwise. */
static gboolean
as_matrix (const LbTensor * t, int64_t * rows, int64_t * cols, int64_t * ld)
{
  if (t->ndim < 1 || t->dtype != LB_DTYPE_F32)
    return FALSE;
  *cols = t->shape[t->ndim - 1];
  if (t->ndim == 1) {
    *rows = 1;
    *ld = *cols;
    return TRUE;
  }
  if (t->ndim == 2) {
    if (t->stride[1] != 1 && t->shape[1] > 1)
      return FALSE;
    *rows = t->shape[0];
    *ld = t->shape[0] > 1 ? t->stride[0] : *cols;
    return *ld >= *cols;
  }
  if (!lb_tensor_is_contiguous (t))
    return FALSE;
  *rows = lb_tensor_numel (t) / MAX (*cols, 1);
  *ld = *cols;
  return TRUE;
}

static gboolean
gemm_shape_error (GError ** error, const char *what, const LbTensor * t,
    const char *expect)
{
  g_autofree char *s = lb_tensor_shape_string (t);
  g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
      "gemm: %s is %s %s, expected %s", what, lb_dtype_name (t->dtype), s,
      expect);
  return FALSE;
}

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
  int64_t m, k, xld, wr, wc, wld, ym, yn, yld;
  if (!as_matrix (x, &m, &k, &xld))
    return gemm_shape_error (error, "x", x, "f32 [M, K] with unit column stride");
  if (!as_matrix (w, &wr, &wc, &wld) || w->ndim != 2)
    return gemm_shape_error (error, "w", w, "f32 2-D with unit column stride");
  int64_t n = trans_w ? wr : wc;
  if ((trans_w ? wc : wr) != k) {
    g_autofree char *xs = lb_tensor_shape_string (x);
    g_autofree char *ws = lb_tensor_shape_string (w);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "gemm: inner dimensions differ: x %s, w %s (%s)", xs, ws,
        trans_w ? "w is [N, K]" : "w is [K, N]");
    return FALSE;
  }
  if (!as_matrix (y, &ym, &yn, &yld) || ym != m || yn != n) {
    g_autofree char *e = g_strdup_printf ("f32 [%" G_GINT64_FORMAT ", %"
        G_GINT64_FORMAT "]", m, n);
    return gemm_shape_error (error, "y", y, e);
  }
  if (bias && (bias->dtype != LB_DTYPE_F32 || lb_tensor_numel (bias) != n ||
          !lb_tensor_is_contiguous (bias))) {
    g_autofree char *e = g_strdup_printf ("f32 [%" G_GINT64_FORMAT "]", n);
    return gemm_shape_error (error, "bias", bias, e);
  }

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

/* lingbot-gst: GEMM through cuBLASLt
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/cuda/cuda-internal.h"

static gboolean
lt_check (cublasStatus_t st, const char *what, GError ** error)
{
  if (st == CUBLAS_STATUS_SUCCESS)
    return TRUE;
  g_set_error (error, LB_ERROR, LB_ERROR_DEVICE, "gemm: %s failed: %s", what,
      cublasGetStatusString (st));
  return FALSE;
}

static gboolean
matrix_dims (const LbTensor * t, int64_t * rows, int64_t * cols, int64_t * ld)
{
  if (t->ndim < 1 || t->dtype != LB_DTYPE_F32)
    return FALSE;
  *cols = t->shape[t->ndim - 1];
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

/**
 * lb_cuda_gemm:
 *
 * Same contract as lb_cpu_gemm() (kernels/ops.h): `y[M,N] = alpha * x[M,K]
 * . op(w) + beta * y + bias[N]`, float32 row-major, computed by cuBLASLt in
 * column-major form as `y^T = op(w)^T-as-stored . x^T` with the bias as an
 * epilogue.  Compute type is plain FP32 (no TF32) so that it is comparable
 * with the CPU oracle.  Asynchronous on the stream.
 */
gboolean
lb_cuda_gemm (LbStream * s, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  LbCudaStream *cs = s->priv;
  int64_t m, k, xld, wr, wc, wld, ym, yn, yld;

  if (!matrix_dims (x, &m, &k, &xld) || !matrix_dims (w, &wr, &wc, &wld) ||
      w->ndim != 2 || !matrix_dims (y, &ym, &yn, &yld)) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "gemm: operands must be f32 matrices with unit column stride");
    return FALSE;
  }
  int64_t n = trans_w ? wr : wc;
  if ((trans_w ? wc : wr) != k || ym != m || yn != n ||
      (bias && lb_tensor_numel (bias) != n)) {
    g_autofree char *xs = lb_tensor_shape_string (x);
    g_autofree char *ws = lb_tensor_shape_string (w);
    g_autofree char *ys = lb_tensor_shape_string (y);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "gemm: shapes do not agree: x %s, w %s (%s), y %s", xs, ws,
        trans_w ? "[N, K]" : "[K, N]", ys);
    return FALSE;
  }
  if (m == 0 || n == 0)
    return TRUE;

  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lbm = NULL, lc = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  gboolean ok = FALSE;
  cublasOperation_t ta = trans_w ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = CUBLAS_OP_N;

  if (!lt_check (cublasLtMatmulDescCreate (&op, CUBLAS_COMPUTE_32F,
              CUDA_R_32F), "cublasLtMatmulDescCreate", error))
    goto out;
  cublasLtMatmulDescSetAttribute (op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
      sizeof ta);
  cublasLtMatmulDescSetAttribute (op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
      sizeof tb);
  if (bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const void *bp = bias->data;
    cublasLtMatmulDescSetAttribute (op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
        sizeof epi);
    cublasLtMatmulDescSetAttribute (op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
        &bp, sizeof bp);
  }
  /* Column-major view: A = w as stored, B = x^T [K, M], C = y^T [N, M]. */
  if (!lt_check (cublasLtMatrixLayoutCreate (&la, CUDA_R_32F,
              trans_w ? k : n, trans_w ? n : k, wld), "layout A", error) ||
      !lt_check (cublasLtMatrixLayoutCreate (&lbm, CUDA_R_32F, k, m, xld),
          "layout B", error) ||
      !lt_check (cublasLtMatrixLayoutCreate (&lc, CUDA_R_32F, n, m, yld),
          "layout C", error))
    goto out;

  cublasLtMatmulPreferenceCreate (&pref);
  size_t ws = cs->workspace_size;
  cublasLtMatmulPreferenceSetAttribute (pref,
      CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  if (!lt_check (cublasLtMatmulAlgoGetHeuristic (cs->lt, op, la, lbm, lc, lc,
              pref, 1, &heur, &found), "cublasLtMatmulAlgoGetHeuristic",
          error))
    goto out;
  if (found == 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "gemm: cuBLASLt has no algorithm for M=%" G_GINT64_FORMAT " N=%"
        G_GINT64_FORMAT " K=%" G_GINT64_FORMAT, m, n, k);
    goto out;
  }
  ok = lt_check (cublasLtMatmul (cs->lt, op, &alpha, w->data, la, x->data, lbm,
          &beta, y->data, lc, y->data, lc, &heur.algo, cs->workspace, ws,
          cs->stream), "cublasLtMatmul", error);

out:
  if (pref)
    cublasLtMatmulPreferenceDestroy (pref);
  if (lc)
    cublasLtMatrixLayoutDestroy (lc);
  if (lbm)
    cublasLtMatrixLayoutDestroy (lbm);
  if (la)
    cublasLtMatrixLayoutDestroy (la);
  if (op)
    cublasLtMatmulDescDestroy (op);
  return ok;
}

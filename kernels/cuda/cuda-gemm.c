/* lingbot-gst: GEMM through cuBLASLt, with per-shape plans cached per stream
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Row-major C[m,n] = alpha op(A) op(B) + beta C + bias[n] is computed in
 * cuBLASLt's column-major terms as C^T = op(B)^T op(A)^T: cuBLASLt's "A" is
 * our B as stored, its "B" is our A, and its bias epilogue (one value per
 * row of the column-major C^T) is our per-column bias.
 *
 * A plan (matmul descriptor, three layouts and the heuristic's algorithm)
 * is built the first time a (shape, transposes, leading dimensions, bias,
 * pointer alignments) combination is seen on a stream and kept in the
 * stream's table, so the per-chunk path creates no descriptor and calls no
 * heuristic; only the bias pointer is set per call.  Pointer alignment is
 * part of the key because cuBLASLt's algorithms may assume the alignment
 * the heuristic was told about (views into KV caches or conv blocks are not
 * 256-byte aligned).  Compute type is CUBLAS_COMPUTE_32F (no TF32), so the
 * results compare with the CPU oracle at FP32 tolerance.
 *
 * A bf16 weight (spec 1.11 storage, kernels/ops.h) makes a mixed plan: A
 * and B CUDA_R_16BF, C and D CUDA_R_32F, still CUBLAS_COMPUTE_32F with
 * f32 scale and an f32 bias (its type set explicitly).  x is first rounded
 * to a contiguous bf16 copy in pool scratch (kernels-convert.cu, the CPU's
 * rounding formula), in blocks of rows of at most LB_CUDA_SCRATCH_LIMIT * 2
 * elements; a bf16 x (written so by the norm or activation before it)
 * goes to cuBLASLt as it is, in one matmul.  The operand dtypes are part
 * of the plan key.
 *
 * The fp8 gemm (gemm_fp8, kernels/ops.h): a block of rows of x is
 * quantised per token into pool scratch (kernels-fp8.cu: codes [rows, K]
 * and scales [rows]), then one cuBLASLt FP8 matmul with A = w (our
 * [N, K], CUBLAS_OP_T) and B = the codes (CUBLAS_OP_N): the "TN" layout
 * FP8 tensor cores require, CUDA_R_8F_E4M3 inputs, CUBLAS_COMPUTE_32F, f32
 * scale, C and D CUDA_R_32F, alpha applied by cuBLASLt, no bias epilogue.
 * The product goes to y itself when beta is 0, else to an f32 scratch
 * block, and the epilogue kernel applies sx[m], sw[n], beta and the bias.
 * FP8 matmuls need K and N multiples of 16 (16-byte leading dimensions of
 * the e4m3 operands, 64-byte ones of D); other shapes are refused.
 */
#include "kernels/cuda/cuda-internal.h"

#include <string.h>

#define MAX_PLANS 1024

typedef struct
{
  int64_t m, n, k, lda, ldb, ldc;
  int32_t ta, tb, bias;
  int32_t align_a, align_b, align_c, align_bias;
  int32_t type_a, type_b;       /* cudaDataType of our A and B */
  int32_t pad;
} GemmKey;

/* memcmp/hash of the whole key: no implicit padding may exist */
G_STATIC_ASSERT (sizeof (GemmKey) == 6 * sizeof (int64_t) +
    10 * sizeof (int32_t));

typedef struct
{
  GemmKey key;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  size_t workspace;
} GemmPlan;

LB_CUDA_KEY_FUNCS (key, GemmKey);

static void
plan_free (gpointer p)
{
  GemmPlan *plan = p;
  if (plan->lc)
    cublasLtMatrixLayoutDestroy (plan->lc);
  if (plan->lb)
    cublasLtMatrixLayoutDestroy (plan->lb);
  if (plan->la)
    cublasLtMatrixLayoutDestroy (plan->la);
  if (plan->desc)
    cublasLtMatmulDescDestroy (plan->desc);
  g_free (plan);
}

/**
 * lb_cuda_gemm_plans_free:
 * @cs: the stream state
 *
 * Destroys the stream's cached GEMM plans (stream_free).
 */
void
lb_cuda_gemm_plans_free (LbCudaStream * cs)
{
  if (cs->gemm_plans)
    g_hash_table_destroy (cs->gemm_plans);
  cs->gemm_plans = NULL;
}

static gboolean
lt_check (cublasStatus_t st, const char *what, GError ** error)
{
  if (st == CUBLAS_STATUS_SUCCESS)
    return TRUE;
  g_set_error (error, LB_ERROR, LB_ERROR_DEVICE, "gemm: %s failed: %s", what,
      cublasGetStatusString (st));
  return FALSE;
}

static int32_t
ptr_align (const void *p)
{
  guintptr v = (guintptr) p;
  if (v == 0)
    return 256;
  int32_t a = 1;
  while (a < 256 && (v & (guintptr) a) == 0)
    a <<= 1;
  return a;
}

static GemmPlan *
plan_new (LbCudaStream * cs, const GemmKey * key, GError ** error)
{
  GemmPlan *plan = g_new0 (GemmPlan, 1);
  cublasLtMatmulPreference_t pref = NULL;
  plan->key = *key;
  /* cuBLASLt A = our B (n x k as used), B = our A (k x m as used). */
  cublasOperation_t lta = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t ltb = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N;

  if (!lt_check (cublasLtMatmulDescCreate (&plan->desc, CUBLAS_COMPUTE_32F,
              CUDA_R_32F), "cublasLtMatmulDescCreate", error))
    goto fail;
  cublasLtMatmulDescSetAttribute (plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
      &lta, sizeof lta);
  cublasLtMatmulDescSetAttribute (plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
      &ltb, sizeof ltb);
  if (key->bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    /* f32 whatever A and B are (the default follows other types) */
    int32_t bias_type = CUDA_R_32F;
    if (!lt_check (cublasLtMatmulDescSetAttribute (plan->desc,
                CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
            "epilogue", error) ||
        !lt_check (cublasLtMatmulDescSetAttribute (plan->desc,
                CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                sizeof bias_type), "bias data type", error))
      goto fail;
  }
  /* Stored (column-major) extents: our row-major [r, c] is [c, r].
   * cuBLASLt's A is our B and its B our A. */
  if (!lt_check (cublasLtMatrixLayoutCreate (&plan->la,
              (cudaDataType_t) key->type_b, key->tb ? key->k : key->n,
              key->tb ? key->n : key->k, key->ldb), "layout A", error) ||
      !lt_check (cublasLtMatrixLayoutCreate (&plan->lb,
              (cudaDataType_t) key->type_a, key->ta ? key->m : key->k,
              key->ta ? key->k : key->m, key->lda), "layout B", error) ||
      !lt_check (cublasLtMatrixLayoutCreate (&plan->lc, CUDA_R_32F, key->n,
              key->m, key->ldc), "layout C", error))
    goto fail;

  if (!lt_check (cublasLtMatmulPreferenceCreate (&pref),
          "cublasLtMatmulPreferenceCreate", error))
    goto fail;
  size_t ws = cs->workspace_size;
  uint32_t al_a = (uint32_t) key->align_b, al_b = (uint32_t) key->align_a;
  uint32_t al_c = (uint32_t) key->align_c;
  cublasLtMatmulPreferenceSetAttribute (pref,
      CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  cublasLtMatmulPreferenceSetAttribute (pref,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
  cublasLtMatmulPreferenceSetAttribute (pref,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
  cublasLtMatmulPreferenceSetAttribute (pref,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
  cublasLtMatmulPreferenceSetAttribute (pref,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c);
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  memset (&heur, 0, sizeof heur);
  if (!lt_check (cublasLtMatmulAlgoGetHeuristic (cs->lt, plan->desc,
              plan->la, plan->lb, plan->lc, plan->lc, pref, 1, &heur, &found),
          "cublasLtMatmulAlgoGetHeuristic", error))
    goto fail;
  if (found == 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "gemm: cuBLASLt has no algorithm for M=%" G_GINT64_FORMAT " N=%"
        G_GINT64_FORMAT " K=%" G_GINT64_FORMAT " (%s inputs, lda %"
        G_GINT64_FORMAT ", ldb %" G_GINT64_FORMAT ")", key->m, key->n,
        key->k, key->type_b == CUDA_R_16BF ? "bf16" :
        key->type_b == CUDA_R_8F_E4M3 ? "e4m3" : "f32", key->lda, key->ldb);
    goto fail;
  }
  plan->algo = heur.algo;
  plan->workspace = MIN (heur.workspaceSize, ws);
  cublasLtMatmulPreferenceDestroy (pref);
  return plan;

fail:
  if (pref)
    cublasLtMatmulPreferenceDestroy (pref);
  plan_free (plan);
  return NULL;
}

/* lb_cuda_gemm_rm() with the dtypes of A and B (CUDA_R_32F, CUDA_R_16BF
 * or, for ta FALSE and tb TRUE only, CUDA_R_8F_E4M3); C, the bias and the
 * scales are always f32. */
static gboolean
gemm_rm_typed (LbStream * s, gboolean ta, gboolean tb, int64_t m, int64_t n,
    int64_t k, float alpha, const void *a, cudaDataType_t type_a,
    int64_t lda, const void *b, cudaDataType_t type_b, int64_t ldb,
    const float *bias, float beta, float *c, int64_t ldc, GError ** error)
{
  LbCudaStream *cs = s->priv;
  if (m <= 0 || n <= 0)
    return TRUE;
  cudaSetDevice (s->device);
  GemmKey key;
  memset (&key, 0, sizeof key);
  key.m = m;
  key.n = n;
  key.k = k;
  /* a single row or column: cuBLASLt still wants ld >= rows as stored */
  key.lda = MAX (lda, ta ? m : k);
  key.ldb = MAX (ldb, tb ? k : n);
  key.ldc = MAX (ldc, n);
  key.ta = ta != 0;
  key.tb = tb != 0;
  key.bias = bias != NULL;
  key.align_a = ptr_align (a);
  key.align_b = ptr_align (b);
  key.align_c = ptr_align (c);
  key.align_bias = bias ? ptr_align (bias) : 0;
  key.type_a = (int32_t) type_a;
  key.type_b = (int32_t) type_b;

  if (cs->gemm_plans == NULL)
    cs->gemm_plans = g_hash_table_new_full (key_hash, key_equal, NULL,
        plan_free);
  GemmPlan *plan = g_hash_table_lookup (cs->gemm_plans, &key);
  if (plan == NULL) {
    if (g_hash_table_size (cs->gemm_plans) >= MAX_PLANS)
      g_hash_table_remove_all (cs->gemm_plans);
    plan = plan_new (cs, &key, error);
    if (plan == NULL)
      return FALSE;
    g_hash_table_insert (cs->gemm_plans, &plan->key, plan);
  }
  if (bias)
    cublasLtMatmulDescSetAttribute (plan->desc,
        CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  return lt_check (cublasLtMatmul (cs->lt, plan->desc, &alpha, b, plan->la,
          a, plan->lb, &beta, c, plan->lc, c, plan->lc, &plan->algo,
          cs->workspace, plan->workspace, cs->stream), "cublasLtMatmul", error);
}

/**
 * lb_cuda_gemm_rm:
 * @s: a CUDA stream
 * @ta: op(A) = A^T, A stored [k, m]
 * @tb: op(B) = B^T, B stored [n, k]
 * @m: rows of C
 * @n: columns of C
 * @k: inner extent (> 0)
 * @alpha: scale of the product
 * @a: device pointer, row-major with leading dimension @lda
 * @lda: elements between rows of A as stored
 * @b: device pointer, leading dimension @ldb
 * @ldb: elements between rows of B as stored
 * @bias: (nullable): [n] added to every row
 * @beta: scale of C's previous content (0: C is not read)
 * @c: device pointer [m, n] with leading dimension @ldc
 * @ldc: elements between rows of C
 * @error: %LB_ERROR_DEVICE
 *
 * The module's one GEMM entry point (ops, conv, attention), asynchronous
 * on @s.  See the file comment.
 *
 * Returns: %TRUE when enqueued.
 */
gboolean
lb_cuda_gemm_rm (LbStream * s, gboolean ta, gboolean tb, int64_t m,
    int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
    const float *b, int64_t ldb, const float *bias, float beta, float *c,
    int64_t ldc, GError ** error)
{
  return gemm_rm_typed (s, ta, tb, m, n, k, alpha, a, CUDA_R_32F, lda, b,
      CUDA_R_32F, ldb, bias, beta, c, ldc, error);
}

/* ---- the op ---- */

/* y = bias + beta * y without reading x or w (K = 0 or alpha = 0; beta =
 * 0 overwrites, NaN included), for both gemms. */
static gboolean
no_product (LbCudaStream * cs, const LbGemmGeom * g, const LbTensor * bias,
    float beta, LbTensor * y, const char *what, GError ** error)
{
  float *yd = y->data;
  const int64_t m = g->m, n = g->n, yld = g->yld;
  cudaError_t e;
  if (beta == 0.0f)
    e = lb_cuda_launch_fill_bias (cs->stream, yd, yld, m, n, NULL);
  else
    e = lb_cuda_launch_elementwise (cs->stream, LB_CUDA_EW_SCALE, yd, yld,
        NULL, 0, yd, yld, m, n, beta, 0.0f);
  if (e == cudaSuccess && bias)
    e = lb_cuda_launch_elementwise (cs->stream, LB_CUDA_EW_ADD, yd, yld,
        bias->data, 0, yd, yld, m, n, 0.0f, 0.0f);
  return lb_cuda_check (e, what, error);
}

/* The bf16-weight product (see the file comment): x rounded to bf16 into
 * pool scratch, a block of rows at a time, then one mixed cuBLASLt GEMM
 * per block.  The blocks reuse one scratch in stream order. */
static gboolean
gemm_bf16 (LbStream * s, const LbGemmGeom * g, const LbTensor * x,
    const LbTensor * w, gboolean trans_w, const LbTensor * bias, float alpha,
    float beta, LbTensor * y, GError ** error)
{
  LbCudaStream *cs = s->priv;
  const int64_t m = g->m, k = g->k;
  if (x->dtype == LB_DTYPE_BF16)
    /* written in bf16 by the op before (norm, GELU): no conversion */
    return gemm_rm_typed (s, FALSE, trans_w, m, g->n, k, alpha, x->data,
        CUDA_R_16BF, g->xld, w->data, CUDA_R_16BF, g->wld,
        bias ? bias->data : NULL, beta, y->data, g->yld, error);
  const int64_t limit = (int64_t) (LB_CUDA_SCRATCH_LIMIT * 2);
  const int64_t rows = CLAMP (limit / k, 1, m);
  uint16_t *xs = lb_cuda_scratch (s, (gsize) (rows * k) * sizeof (uint16_t),
      error);
  if (xs == NULL)
    return FALSE;
  gboolean ok = TRUE;
  for (int64_t r0 = 0; ok && r0 < m; r0 += rows) {
    const int64_t nr = MIN (rows, m - r0);
    ok = lb_cuda_check (lb_cuda_launch_f32_to_bf16 (cs->stream,
            (const float *) x->data + r0 * g->xld, g->xld, xs, k, nr, k),
        "gemm (bf16 conversion of x)", error) &&
        gemm_rm_typed (s, FALSE, trans_w, nr, g->n, k, alpha, xs,
        CUDA_R_16BF, k, w->data, CUDA_R_16BF, g->wld,
        bias ? bias->data : NULL, beta, (float *) y->data + r0 * g->yld,
        g->yld, error);
  }
  lb_cuda_scratch_release (s, xs);
  return ok;
}

/**
 * lb_cuda_gemm:
 *
 * Same contract and messages as lb_cpu_gemm() (kernels/ops.h):
 * `y[M,N] = alpha * x[M,K] . op(w) + beta * y + bias[N]`, float32
 * row-major, through lb_cuda_gemm_rm().  With K = 0 or @alpha = 0 x and w
 * are not read and y = bias + beta * y (beta = 0 overwrites, NaN
 * included).  Asynchronous on the stream.
 *
 * With a bf16 @w (LB_DTYPE_BF16, any #LbMathMode):
 * `y = alpha * bf16(x) . op(w) + beta * y + bias`, x rounded to bf16 as
 * lb_f32_to_bf16() does, A/B CUDA_R_16BF, C/D CUDA_R_32F,
 * CUBLAS_COMPUTE_32F; an f32 x goes through pool scratch of at most
 * min(M, 64 Mi / K) rows of K bf16 (no cudaMalloc once the pool holds a
 * block of that size), a bf16 x (same strides) is read in place.
 */
gboolean
lb_cuda_gemm (LbStream * s, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  LbCudaStream *cs = s->priv;
  LbGemmGeom g;
  if (!lb_cuda_check_devices (s, "gemm", error, "x", x, "w", w, "bias", bias,
          "y", y, NULL) || !lb_check_gemm (x, w, trans_w, bias, y, &g, error))
    return FALSE;
  const int64_t m = g.m, n = g.n, k = g.k, yld = g.yld;
  if (m == 0 || n == 0)
    return TRUE;

  if (k == 0 || alpha == 0.0f)
    return no_product (cs, &g, bias, beta, y, "gemm (K = 0)", error);
  if (w->dtype == LB_DTYPE_BF16)
    return gemm_bf16 (s, &g, x, w, trans_w, bias, alpha, beta, y, error);
  return lb_cuda_gemm_rm (s, FALSE, trans_w, m, n, k, alpha, x->data, g.xld,
      w->data, g.wld, bias ? bias->data : NULL, beta, y->data, yld, error);
}

/**
 * lb_cuda_gemm_fp8:
 *
 * Same contract and argument messages as lb_cpu_gemm_fp8() (kernels/ops.h
 * @gemm_fp8): per-token E4M3 quantisation of x, the cuBLASLt FP8 matmul
 * with f32 accumulation, then `y = ((alpha acc) sx[m]) sw[n] + (beta y +
 * bias)`; only the summation order of acc differs from the CPU oracle.
 * x goes through pool scratch a block of rows at a time (at most
 * min(M, 32 Mi / max(K, 4 N)) rows: codes, scales and, when beta is not
 * 0, the f32 product), so the per-chunk path allocates nothing once the
 * pool holds blocks of those sizes.  K or N not a multiple of 16 is an
 * %LB_ERROR_SHAPE error ("gemm_fp8: K = 24 and N = 40 must be multiples
 * of 16 (cuBLASLt FP8)").  Asynchronous on the stream.
 */
gboolean
lb_cuda_gemm_fp8 (LbStream * s, const LbTensor * x, const LbTensor * w,
    const LbTensor * sw, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  LbCudaStream *cs = s->priv;
  LbGemmGeom g;
  if (!lb_check_gemm_fp8 (x, w, sw, bias, y, &g, error) ||
      !lb_cuda_check_devices (s, "gemm_fp8", error, "x", x, "w", w, "sw", sw,
          "bias", bias, "y", y, NULL))
    return FALSE;
  const int64_t m = g.m, n = g.n, k = g.k, yld = g.yld;
  if (m == 0 || n == 0)
    return TRUE;
  float *yd = y->data;
  if (k == 0 || alpha == 0.0f)
    return no_product (cs, &g, bias, beta, y, "gemm_fp8 (K = 0)", error);
  if (k % 16 != 0 || n % 16 != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE, "gemm_fp8: K = %"
        G_GINT64_FORMAT " and N = %" G_GINT64_FORMAT " must be multiples of "
        "16 (cuBLASLt FP8)", k, n);
    return FALSE;
  }
  const int64_t per_row = MAX (k, beta != 0.0f ? 4 * n : 0);
  const int64_t rows = CLAMP ((int64_t) LB_CUDA_SCRATCH_LIMIT / per_row, 1,
      m);
  /* codes [rows, K] (K % 16 == 0 keeps the scales 16-byte aligned), then
   * the scales [rows], then the f32 product [rows, N] when beta != 0 */
  const gsize codes = (gsize) (rows * k), scales = (gsize) rows *4;
  const gsize acc_off = (codes + scales + 255) & ~(gsize) 255;
  const gsize total = beta != 0.0f ? acc_off + (gsize) (rows * n) * 4 :
      codes + scales;
  guint8 *scr = lb_cuda_scratch (s, total, error);
  if (scr == NULL)
    return FALSE;
  float *sx = (float *) (scr + codes);
  float *acc = beta != 0.0f ? (float *) (scr + acc_off) : NULL;
  gboolean ok = TRUE;
  for (int64_t r0 = 0; ok && r0 < m; r0 += rows) {
    const int64_t nr = MIN (rows, m - r0);
    float *yb = yd + r0 * yld;
    float *ab = acc ? acc : yb;
    const int64_t ald = acc ? n : yld;
    ok = lb_cuda_check (lb_cuda_launch_quantize_e4m3_rows (cs->stream,
            (const float *) x->data + r0 * g.xld, g.xld, nr, k, scr, k, sx),
        "gemm_fp8 (quantisation of x)", error) &&
        gemm_rm_typed (s, FALSE, TRUE, nr, n, k, alpha, scr, CUDA_R_8F_E4M3,
        k, w->data, CUDA_R_8F_E4M3, k, NULL, 0.0f, ab, ald, error) &&
        lb_cuda_check (lb_cuda_launch_fp8_epilogue (cs->stream, ab, ald, nr,
            n, sx, sw->data, bias ? bias->data : NULL, beta, yb, yld),
        "gemm_fp8 (epilogue)", error);
  }
  lb_cuda_scratch_release (s, scr);
  return ok;
}

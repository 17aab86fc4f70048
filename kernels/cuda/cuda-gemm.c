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
 *
 * gemm_gelu_tanh (kernels/ops.h) with a bf16 x and w: one matmul with
 * cuBLASLt's GELU (or GELU + bias) epilogue, D CUDA_R_32F or CUDA_R_16BF
 * (a bf16 y: the FFN's second GEMM input), the bias f32.  The epilogue
 * kind and D's type are part of the plan key.  A key cuBLASLt has no plan
 * for is remembered (a plan without a descriptor) and takes the op pair
 * (the gemm, then the GELU kernel, through f32 scratch for a bf16 y), as
 * does LINGBOT_CUDA_GEMM_EPILOGUE=own; so does a plan that builds but
 * fails to execute (remembered too, from its first failed call).
 */
#include "kernels/cuda/cuda-internal.h"

#include <gmodule.h>
#include <string.h>

#define MAX_PLANS 1024

typedef struct
{
  int64_t m, n, k, lda, ldb, ldc;
  int32_t ta, tb, bias;
  int32_t align_a, align_b, align_c, align_bias;
  int32_t type_a, type_b;       /* cudaDataType of our A and B */
  int32_t gelu;                 /* the GELU epilogue (gemm_gelu_tanh) */
  int32_t type_c;               /* cudaDataType of C and D */
  int32_t pad;
} GemmKey;

/* memcmp/hash of the whole key: no implicit padding may exist */
G_STATIC_ASSERT (sizeof (GemmKey) == 6 * sizeof (int64_t) +
    12 * sizeof (int32_t));

typedef struct
{
  GemmKey key;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulAlgo_t algo;
  size_t workspace;
  gboolean exec_failed;         /* GELU epilogue: refused at execution */
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
  if (key->bias || key->gelu) {
    cublasLtEpilogue_t epi = !key->gelu ? CUBLASLT_EPILOGUE_BIAS :
        key->bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    /* f32 whatever A, B and D are (the default follows other types) */
    int32_t bias_type = CUDA_R_32F;
    if (!lt_check (cublasLtMatmulDescSetAttribute (plan->desc,
                CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
            "epilogue", error) ||
        (key->bias && !lt_check (cublasLtMatmulDescSetAttribute (plan->desc,
                    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                    sizeof bias_type), "bias data type", error)))
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
      !lt_check (cublasLtMatrixLayoutCreate (&plan->lc,
              (cudaDataType_t) key->type_c, key->n, key->m, key->ldc),
          "layout C", error))
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

/* The GELU epilogue's counters (lingbot_backend_cuda_gemm_stats()) */
static GMutex stats_lock;
static guint64 stats_gelu_runs, stats_gelu_declined;
static char *stats_error;

/* The plan of @key from the stream's table, built on first use; %NULL
 * with @error set when the build fails.  With @remember_failure a failed
 * build is kept as a plan without a descriptor (returned as it is: the
 * caller takes its fallback), its message in the counters' last error. */
static GemmPlan *
plan_get (LbCudaStream * cs, const GemmKey * key, gboolean remember_failure,
    GError ** error)
{
  if (cs->gemm_plans == NULL)
    cs->gemm_plans = g_hash_table_new_full (key_hash, key_equal, NULL,
        plan_free);
  GemmPlan *plan = g_hash_table_lookup (cs->gemm_plans, key);
  if (plan != NULL)
    return plan;
  if (g_hash_table_size (cs->gemm_plans) >= MAX_PLANS)
    g_hash_table_remove_all (cs->gemm_plans);
  g_autoptr (GError) err = NULL;
  plan = plan_new (cs, key, &err);
  if (plan == NULL && !remember_failure) {
    g_propagate_error (error, g_steal_pointer (&err));
    return NULL;
  }
  if (plan == NULL) {
    plan = g_new0 (GemmPlan, 1);
    plan->key = *key;
    g_mutex_lock (&stats_lock);
    g_free (stats_error);
    stats_error = g_strdup (err->message);
    g_mutex_unlock (&stats_lock);
  }
  g_hash_table_insert (cs->gemm_plans, &plan->key, plan);
  return plan;
}

static gboolean
plan_run (LbCudaStream * cs, GemmPlan * plan, float alpha, const void *a,
    const void *b, const float *bias, float beta, void *c, GError ** error)
{
  if (bias)
    cublasLtMatmulDescSetAttribute (plan->desc,
        CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
  return lt_check (cublasLtMatmul (cs->lt, plan->desc, &alpha, b, plan->la,
          a, plan->lb, &beta, c, plan->lc, c, plan->lc, &plan->algo,
          cs->workspace, plan->workspace, cs->stream), "cublasLtMatmul", error);
}

/* The key of a row-major C[m, n] = alpha op(A) op(B) + beta C + bias. */
static void
key_init (GemmKey * key, gboolean ta, gboolean tb, int64_t m, int64_t n,
    int64_t k, const void *a, cudaDataType_t type_a, int64_t lda,
    const void *b, cudaDataType_t type_b, int64_t ldb, const float *bias,
    const void *c, int64_t ldc)
{
  memset (key, 0, sizeof *key);
  key->m = m;
  key->n = n;
  key->k = k;
  /* a single row or column: cuBLASLt still wants ld >= rows as stored */
  key->lda = MAX (lda, ta ? m : k);
  key->ldb = MAX (ldb, tb ? k : n);
  key->ldc = MAX (ldc, n);
  key->ta = ta != 0;
  key->tb = tb != 0;
  key->bias = bias != NULL;
  key->align_a = ptr_align (a);
  key->align_b = ptr_align (b);
  key->align_c = ptr_align (c);
  key->align_bias = bias ? ptr_align (bias) : 0;
  key->type_a = (int32_t) type_a;
  key->type_b = (int32_t) type_b;
  key->type_c = CUDA_R_32F;
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
  key_init (&key, ta, tb, m, n, k, a, type_a, lda, b, type_b, ldb, bias, c,
      ldc);
  GemmPlan *plan = plan_get (cs, &key, FALSE, error);
  return plan != NULL && plan_run (cs, plan, alpha, a, b, bias, beta, c, error);
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

/* ---- gemm_gelu_tanh ---- */

static void
count (guint64 * counter)
{
  g_mutex_lock (&stats_lock);
  (*counter)++;
  g_mutex_unlock (&stats_lock);
}

/* A 2-D [rows, cols] view at row @r0 of a row-major matrix with leading
 * dimension @ld, on @t's device, in @dtype. */
static void
rows_view (LbTensor * out, const LbTensor * t, LbDType dtype, void *base,
    int64_t r0, int64_t rows, int64_t cols, int64_t ld)
{
  int64_t shape[2] = { rows, cols }, stride[2] = { ld, 1 };
  lb_tensor_view_init (out, dtype, (char *) base + (gsize) (r0 * ld) *
      lb_dtype_size (dtype), t->device, 2, shape, stride);
}

/* The op pair of gemm_gelu_tanh: the gemm (beta 0) into y, or, for a bf16
 * y, into f32 pool scratch a block of rows at a time; then the GELU
 * kernel into y. */
static gboolean
gemm_gelu_pair (LbStream * s, const LbGemmGeom * g, const LbTensor * x,
    const LbTensor * w, gboolean trans_w, const LbTensor * bias, float alpha,
    LbTensor * y, GError ** error)
{
  LbCudaStream *cs = s->priv;
  if (y->dtype == LB_DTYPE_F32)
    return lb_cuda_gemm (s, x, w, trans_w, bias, alpha, 0.0f, y, error) &&
        lb_cuda_check (lb_cuda_launch_elementwise (cs->stream,
            LB_CUDA_EW_GELU_TANH, y->data, g->yld, NULL, 0, y->data, g->yld,
            g->m, g->n, 0.0f, 0.0f), "gemm_gelu_tanh (GELU)", error);
  const int64_t rows = CLAMP ((int64_t) (LB_CUDA_SCRATCH_LIMIT / g->n), 1,
      g->m);
  float *blk = lb_cuda_scratch (s, (gsize) (rows * g->n) * sizeof (float),
      error);
  if (blk == NULL)
    return FALSE;
  gboolean ok = TRUE;
  for (int64_t r0 = 0; ok && r0 < g->m; r0 += rows) {
    const int64_t nr = MIN (rows, g->m - r0);
    LbTensor xb, fb;
    rows_view (&xb, x, x->dtype, x->data, r0, nr, g->k, g->xld);
    rows_view (&fb, y, LB_DTYPE_F32, blk, 0, nr, g->n, g->n);
    ok = lb_cuda_gemm (s, &xb, w, trans_w, bias, alpha, 0.0f, &fb, error) &&
        lb_cuda_check (lb_cuda_launch_unary_bf16 (cs->stream,
            LB_CUDA_EW_GELU_TANH, blk, g->n, (uint16_t *) y->data + r0 *
            g->yld, g->yld, nr, g->n, 0.0f, 0.0f), "gemm_gelu_tanh (GELU)",
        error);
  }
  lb_cuda_scratch_release (s, blk);
  return ok;
}

/* gemm_gelu_tanh in one cuBLASLt matmul with the GELU epilogue, for a
 * bf16 x and w; *@ran FALSE when the caller must run the pair instead
 * (another x, LINGBOT_CUDA_GEMM_EPILOGUE=own, no product, no plan, or a
 * plan that failed to execute). */
static gboolean
gemm_gelu_epilogue (LbStream * s, const LbGemmGeom * g, const LbTensor * x,
    const LbTensor * w, gboolean trans_w, const LbTensor * bias, float alpha,
    LbTensor * y, gboolean * ran, GError ** error)
{
  LbCudaStream *cs = s->priv;
  *ran = FALSE;
  if (x->dtype != LB_DTYPE_BF16 || g->k == 0 || alpha == 0.0f ||
      g_strcmp0 (g_getenv ("LINGBOT_CUDA_GEMM_EPILOGUE"), "own") == 0)
    return TRUE;
  cudaSetDevice (s->device);
  const float *b = bias ? bias->data : NULL;
  GemmKey key;
  key_init (&key, FALSE, trans_w, g->m, g->n, g->k, x->data, CUDA_R_16BF,
      g->xld, w->data, CUDA_R_16BF, g->wld, b, y->data, g->yld);
  key.gelu = 1;
  key.type_c = y->dtype == LB_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  GemmPlan *plan = plan_get (cs, &key, TRUE, error);
  if (plan == NULL)
    return FALSE;
  if (plan->desc == NULL || plan->exec_failed) {
    count (&stats_gelu_declined);
    return TRUE;
  }
  GError *run_err = NULL;
  if (!plan_run (cs, plan, alpha, x->data, w->data, b, 0.0f, y->data, &run_err)) {
    /* built, but refused at execution for this shape on this device: the
     * pair instead, now and from now on (nothing was enqueued) */
    cudaGetLastError ();
    plan->exec_failed = TRUE;
    g_mutex_lock (&stats_lock);
    g_free (stats_error);
    stats_error = g_strdup (run_err->message);
    g_mutex_unlock (&stats_lock);
    g_error_free (run_err);
    count (&stats_gelu_declined);
    return TRUE;
  }
  *ran = TRUE;
  count (&stats_gelu_runs);
  return TRUE;
}

/**
 * lb_cuda_gemm_gelu_tanh:
 *
 * Same contract and messages as lb_cpu_gemm_gelu_tanh() (kernels/ops.h
 * @gemm_gelu_tanh): `y = gelu_tanh(alpha * x . op(w) + bias)`, y f32 or
 * (with a bf16 w) bf16.  A bf16 x and w go through one matmul with
 * cuBLASLt's GELU epilogue (see the file comment), anything else through
 * lb_cuda_gemm() and the GELU kernel.  Asynchronous on the stream.
 */
gboolean
lb_cuda_gemm_gelu_tanh (LbStream * s, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, float alpha, LbTensor * y,
    GError ** error)
{
  LbGemmGeom g;
  if (!lb_cuda_check_devices (s, "gemm_gelu_tanh", error, "x", x, "w", w,
          "bias", bias, "y", y, NULL) ||
      !lb_check_gemm_gelu_tanh (x, w, trans_w, bias, y, &g, error))
    return FALSE;
  if (g.m == 0 || g.n == 0)
    return TRUE;
  gboolean ran = FALSE;
  if (!gemm_gelu_epilogue (s, &g, x, w, trans_w, bias, alpha, y, &ran, error))
    return FALSE;
  return ran || gemm_gelu_pair (s, &g, x, w, trans_w, bias, alpha, y, error);
}

G_MODULE_EXPORT void lingbot_backend_cuda_gemm_stats (guint64 *
    gelu_epilogue_runs, guint64 * gelu_epilogue_declined, char **last_error);

/**
 * lingbot_backend_cuda_gemm_stats:
 * @gelu_epilogue_runs: (out) (optional): gemm_gelu_tanh calls enqueued as
 *   one matmul with cuBLASLt's GELU epilogue since the module was loaded
 *   (all devices and streams)
 * @gelu_epilogue_declined: (out) (optional): calls eligible for it (bf16
 *   x and w, a product) that ran the op pair because cuBLASLt had no plan
 *   or its plan failed to execute (then and on every later call of that
 *   shape on that stream)
 * @last_error: (out) (optional) (transfer full) (nullable): the message of
 *   the last failed epilogue plan build or execution, or %NULL; g_free() it
 *
 * Counters of the GELU epilogue (docs/design/cuda.md "GEMM + GELU
 * epilogue"), for tests and benchmarks.  Resolve with g_module_symbol on
 * the loaded module.
 */
void
lingbot_backend_cuda_gemm_stats (guint64 * gelu_epilogue_runs,
    guint64 * gelu_epilogue_declined, char **last_error)
{
  g_mutex_lock (&stats_lock);
  if (gelu_epilogue_runs)
    *gelu_epilogue_runs = stats_gelu_runs;
  if (gelu_epilogue_declined)
    *gelu_epilogue_declined = stats_gelu_declined;
  if (last_error)
    *last_error = g_strdup (stats_error);
  g_mutex_unlock (&stats_lock);
}

/* The FP8 units' limits (docs/design/cuda.md "Precision"): compute
 * capability 8.9 or later, K and N multiples of 16; errors name @op. */
static gboolean
fp8_supported (LbCudaStream * cs, const char *op, int64_t k, int64_t n,
    GError ** error)
{
  if (cs->cc < 89) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE, "%s: FP8 GEMMs need "
        "a GPU of compute capability 8.9 or later (Ada, Hopper); device %d "
        "is %d.%d: use precision bf16", op, cs->device, cs->cc / 10,
        cs->cc % 10);
    return FALSE;
  }
  if (k % 16 != 0 || n % 16 != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE, "%s: K = %"
        G_GINT64_FORMAT " and N = %" G_GINT64_FORMAT " must be multiples of "
        "16 (cuBLASLt FP8)", op, k, n);
    return FALSE;
  }
  return TRUE;
}

/* One block of @nr rows of the fp8 GEMM on quantised x (@xq codes, row
 * stride @xqld, row scales @sx): the cuBLASLt FP8 matmul into @acc (ld
 * @ald; it may be @y itself when beta is 0), then the epilogue
 * `y = ((alpha acc) sx) sw + (beta y + bias)` into @y (ld @yld); @what
 * names the epilogue in a launch error. */
static gboolean
fp8_product (LbStream * s, const char *what, const guint8 * xq, int64_t xqld,
    const float *sx, int64_t nr, int64_t n, int64_t k, const LbTensor * w,
    const LbTensor * sw, const LbTensor * bias, float alpha, float beta,
    float *acc, int64_t ald, float *y, int64_t yld, GError ** error)
{
  LbCudaStream *cs = s->priv;
  return gemm_rm_typed (s, FALSE, TRUE, nr, n, k, alpha, xq, CUDA_R_8F_E4M3,
      xqld, w->data, CUDA_R_8F_E4M3, k, NULL, 0.0f, acc, ald, error) &&
      lb_cuda_check (lb_cuda_launch_fp8_epilogue (cs->stream, acc, ald, nr, n,
          sx, sw->data, bias ? bias->data : NULL, beta, y, yld), what, error);
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
 * of 16 (cuBLASLt FP8)"); a device of compute capability below 8.9 an
 * %LB_ERROR_DEVICE one ("gemm_fp8: FP8 GEMMs need a GPU of compute
 * capability 8.9 or later (Ada, Hopper); device 0 is 8.0: use precision
 * bf16").  Asynchronous on the stream.
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
  if (!fp8_supported (cs, "gemm_fp8", k, n, error))
    return FALSE;
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
        fp8_product (s, "gemm_fp8 (epilogue)", scr, k, sx, nr, n, k, w, sw,
        bias, alpha, beta, ab, ald, yb, yld, error);
  }
  lb_cuda_scratch_release (s, scr);
  return ok;
}

/**
 * lb_cuda_gemm_fp8_q:
 *
 * Same contract and argument messages as lb_cpu_gemm_fp8_q()
 * (kernels/ops-list.h @gemm_fp8_q): lb_cuda_gemm_fp8() without its
 * quantisation pass, on codes and row scales written by the op before it
 * (norm_fp8).  The cuBLASLt FP8 matmul reads the codes where they are, so
 * their row stride must be a multiple of 16 too ("gemm_fp8_q: x's row
 * stride 24 must be a multiple of 16 (cuBLASLt FP8)"); with beta 0 the
 * matmul writes y and the epilogue rescales it in place, with beta not 0
 * the product goes through pool scratch a block of rows at a time (at
 * most min(M, 32 Mi / 4 N) rows).  Other errors as lb_cuda_gemm_fp8()'s
 * under this op's name.  Asynchronous on the stream.
 */
gboolean
lb_cuda_gemm_fp8_q (LbStream * s, const LbTensor * x, const LbTensor * sx,
    const LbTensor * w, const LbTensor * sw, const LbTensor * bias,
    float alpha, float beta, LbTensor * y, GError ** error)
{
  LbCudaStream *cs = s->priv;
  LbGemmGeom g;
  if (!lb_check_gemm_fp8_q (x, sx, w, sw, bias, y, &g, error) ||
      !lb_cuda_check_devices (s, "gemm_fp8_q", error, "x", x, "sx", sx, "w",
          w, "sw", sw, "bias", bias, "y", y, NULL))
    return FALSE;
  const int64_t m = g.m, n = g.n, k = g.k, yld = g.yld;
  if (m == 0 || n == 0)
    return TRUE;
  if (k == 0 || alpha == 0.0f)
    return no_product (cs, &g, bias, beta, y, "gemm_fp8_q (K = 0)", error);
  if (!fp8_supported (cs, "gemm_fp8_q", k, n, error))
    return FALSE;
  if (m > 1 && g.xld % 16 != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE, "gemm_fp8_q: x's row "
        "stride %" G_GINT64_FORMAT " must be a multiple of 16 (cuBLASLt FP8)",
        g.xld);
    return FALSE;
  }
  const guint8 *xq = x->data;
  const float *sxd = sx->data;
  float *yd = y->data;
  if (beta == 0.0f)
    return fp8_product (s, "gemm_fp8_q (epilogue)", xq, g.xld, sxd, m, n, k, w,
        sw, bias, alpha, beta, yd, yld, yd, yld, error);
  const int64_t rows = CLAMP ((int64_t) LB_CUDA_SCRATCH_LIMIT / (4 * n), 1,
      m);
  float *acc = lb_cuda_scratch (s, (gsize) (rows * n) * 4, error);
  if (acc == NULL)
    return FALSE;
  gboolean ok = TRUE;
  for (int64_t r0 = 0; ok && r0 < m; r0 += rows) {
    const int64_t nr = MIN (rows, m - r0);
    ok = fp8_product (s, "gemm_fp8_q (epilogue)", xq + r0 * g.xld, g.xld,
        sxd + r0, nr, n, k, w, sw, bias, alpha, beta, acc, n, yd + r0 * yld,
        yld, error);
  }
  lb_cuda_scratch_release (s, acc);
  return ok;
}

/**
 * lb_cuda_gemm_fp8_gelu_q:
 *
 * Same contract and argument messages as lb_cpu_gemm_fp8_gelu_q()
 * (kernels/ops-list.h @gemm_fp8_gelu_q): the FFN's first fp8 layer
 * writing the e4m3 codes and row scales of its GELU for the second.  A
 * block of rows at a time (at most min(M, 32 Mi / 4 N) rows: 606 at N =
 * 13824) the cuBLASLt FP8 matmul writes its f32 accumulator into pool
 * scratch, then one kernel with one block per row
 * (lb_cuda_launch_fp8_gelu_quantize()) applies the scales and the bias,
 * the GELU (the elementwise op's gelu_tanh_rn()) and quantises the row,
 * evaluating it twice from the accumulator (amax, then codes): the row
 * scale needs the whole row, which no cuBLASLt epilogue gives.  So the
 * f32 accumulator is still written once, but the op pair's separate
 * epilogue, GELU and quantisation passes over an f32 [M, N] hidden (and
 * the hidden itself) are gone.  x's row stride must be a multiple of 16
 * for the matmul ("gemm_fp8_gelu_q: x's row stride 24 must be a multiple
 * of 16 (cuBLASLt FP8)"); the other limits and errors
 * are lb_cuda_gemm_fp8_q()'s under this op's name.  Asynchronous on the
 * stream.
 */
gboolean
lb_cuda_gemm_fp8_gelu_q (LbStream * s, const LbTensor * x,
    const LbTensor * sx, const LbTensor * w, const LbTensor * sw,
    const LbTensor * bias, float alpha, LbTensor * y, LbTensor * sy,
    GError ** error)
{
  const char *op = "gemm_fp8_gelu_q";
  LbCudaStream *cs = s->priv;
  LbGemmGeom g;
  if (!lb_check_gemm_fp8_gelu_q (x, sx, w, sw, bias, y, sy, &g, error) ||
      !lb_cuda_check_devices (s, op, error, "x", x, "sx", sx, "w", w, "sw",
          sw, "bias", bias, "y", y, "sy", sy, NULL))
    return FALSE;
  const int64_t m = g.m, n = g.n, k = g.k;
  if (m == 0)
    return TRUE;
  const float *swd = sw->data, *bd = bias ? bias->data : NULL;
  guint8 *yq = y->data;
  float *syd = sy->data;
  if (n == 0 || k == 0 || alpha == 0.0f)
    /* no product: the GELU of the bias (or of 0), quantised */
    return lb_cuda_check (lb_cuda_launch_fp8_gelu_quantize (cs->stream, NULL,
            0, m, n, NULL, swd, bd, yq, g.yld, syd),
        "gemm_fp8_gelu_q (K = 0)", error);
  if (!fp8_supported (cs, op, k, n, error))
    return FALSE;
  if (m > 1 && g.xld % 16 != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE, "%s: x's row stride %"
        G_GINT64_FORMAT " must be a multiple of 16 (cuBLASLt FP8)", op, g.xld);
    return FALSE;
  }
  const guint8 *xq = x->data;
  const float *sxd = sx->data;
  const int64_t rows = CLAMP ((int64_t) LB_CUDA_SCRATCH_LIMIT / (4 * n), 1,
      m);
  float *acc = lb_cuda_scratch (s, (gsize) (rows * n) * 4, error);
  if (acc == NULL)
    return FALSE;
  gboolean ok = TRUE;
  for (int64_t r0 = 0; ok && r0 < m; r0 += rows) {
    const int64_t nr = MIN (rows, m - r0);
    ok = gemm_rm_typed (s, FALSE, TRUE, nr, n, k, alpha, xq + r0 * g.xld,
        CUDA_R_8F_E4M3, g.xld, w->data, CUDA_R_8F_E4M3, k, NULL, 0.0f, acc, n,
        error) &&
        lb_cuda_check (lb_cuda_launch_fp8_gelu_quantize (cs->stream, acc, n,
            nr, n, sxd + r0, swd, bd, yq + r0 * g.yld, g.yld, syd + r0),
        "gemm_fp8_gelu_q (epilogue)", error);
  }
  lb_cuda_scratch_release (s, acc);
  return ok;
}

/* lingbot-gst: attention through cuDNN's fused flash SDPA (graph API)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * An alternative to the own bf16 tensor-core kernel (kernels-attention-
 * bf16.cu) for LB_MATH_BF16 streams, and the default there: the first
 * H200 run measured it 1.7-4x faster at the DiT's shapes (bench-cuda-ops
 * prints both; LINGBOT_CUDA_ATTENTION=own selects the own kernel).  Used only
 * for head dims 64 and 128, Nk > 0, no bias and no key mask; everything
 * else keeps the own kernels.
 *
 * The graph is cuDNN's "flash fprop" pattern, written with the backend
 * descriptors (no frontend in this build), one batch (B = 1), the heads as
 * dim 1, sequence dim 2, head dim 3; the strides describe our token-major
 * [S, H, D] bf16 scratch, so nothing is transposed:
 *
 *   S    = matmul (Q [1,H,Nq,D], K^T [1,H,D,Nk])        f32, virtual
 *   Ss   = S * scale   (pointwise MUL, by-value f32 [1,1,1,1])
 *   M    = max over keys (reduction MAX)  [1,H,Nq,1]
 *   E    = exp (Ss - M)                  (pointwise SUB, EXP)
 *   L    = sum over keys (reduction ADD) [1,H,Nq,1]
 *   stat = M + log L                     (pointwise LOG, ADD; virtual:
 *                                         inference, nothing is written)
 *   P    = E / L                         (pointwise DIV) bf16, virtual
 *   O    = matmul (P, V [1,H,Nk,D])      bf16 [1,H,Nq,D]
 *
 * Q, K, V, O are bf16: the flash engines take fp16/bf16 only.  The f32
 * q/k/v views are rounded into pool scratch (kernels-convert.cu, the CPU's
 * rounding formula), the graph runs, and O is widened into out's f32 view.
 * bf16 k and v (a bf16 KV cache, kernels/ops.h) are given to cuDNN as they
 * are, with their own strides (part of the plan key), when their bases are
 * 16-byte aligned and their token and head strides multiples of 8
 * elements; otherwise the call takes the own kernel.  A bf16 q and a bf16
 * out (the DiT's, kernels/ops.h) are used in place by the same rule: no
 * conversion pass on either side.
 * The order of the nodes and the data types of the virtual tensors (f32,
 * except P in the I/O type) are those of the cuDNN frontend's composite
 * SDPA node, whose pattern the runtime's engines recognise.
 *
 * Plans: one per (Nq, Nk, H, hd, scratch strides, output dtype) in the
 * stream's table (LbCudaStream.sdpa_plans), built the first time a shape
 * is seen; a shape no engine takes gets a negative entry and the own
 * kernel (one g_debug).  Steady state: a table lookup, the conversion
 * launches, and lb_cudnn_execute() (which reuses the stream's variant
 * pack for the same pointers); nothing else is created.  Capture safe: while the stream is captured into a CUDA graph a
 * missing plan is not built (the call takes the own kernel, uncached), so
 * plans come from the uncaptured first chunks.  Plans are kept until the
 * stream is freed (a captured graph may use them); past MAX_PLANS shapes
 * new ones take the own kernel.
 *
 * Scratch per call: bf16 q, k, v and o, 2 (2 Nq + 2 Nk) H hd bytes (about
 * 0.7 GB at Nq 6240, Nk 28080, 40 heads; 4 Nq H hd with bf16 k and v,
 * none when q, k, v and out are all bf16), plus cuDNN's workspace.
 */
#include "kernels/cuda/cuda-internal.h"

#include <gmodule.h>
#include <string.h>

#define MAX_PLANS 256

/* Node uids: the graph's real tensors, then its virtual intermediates. */
enum
{
  UID_Q = 1,
  UID_K,
  UID_V,
  UID_O,
  UID_SCALE,
  UID_S = 100,
  UID_SCALED,
  UID_MAX,
  UID_SUB,
  UID_EXP,
  UID_SUM,
  UID_LOG,
  UID_STATS,
  UID_P,
};

typedef struct
{
  int64_t nq, nk, nh, hd;
  /* element strides (token, head) of the bf16 operands: scratch, or k and
   * v as given when they are bf16 */
  int64_t qs0, qs1, ks0, ks1, vs0, vs1, os0, os1;
  int32_t out_dtype;            /* cudnnDataType_t of O */
  int32_t pad;
} SdpaKey;

/* memcmp/hash of the whole key: no implicit padding may exist */
G_STATIC_ASSERT (sizeof (SdpaKey) == 12 * sizeof (int64_t) +
    2 * sizeof (int32_t));

typedef struct
{
  SdpaKey key;
  LbCudnnPlan plan;             /* plan.plan NULL: no engine (negative) */
  float scale;                  /* the by-value scale's storage: stable, so
                                 * the stream's variant packs can be reused */
  gboolean broken;              /* execution failed once: own kernel */
} SdpaEntry;

/* process-wide counters for lingbot_backend_cuda_attention_stats() */
static GMutex stats_lock;
static guint64 stats_runs, stats_declined, stats_plans;
static char *stats_error;

LB_CUDA_KEY_FUNCS (key, SdpaKey);

static void
entry_free (gpointer p)
{
  SdpaEntry *e = p;
  lb_cudnn_plan_clear (&e->plan);
  g_free (e);
}

/* ---- graph nodes (each returns a finalized operation or NULL) ---- */

static cudnnBackendDescriptor_t
op_matmul (cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
    cudnnBackendDescriptor_t c, const char *what, GError ** error)
{
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const LbCudnnAttr da[] = {
    {CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp},
  };
  const LbCudnnAttr oa[] = {
    {CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a},
    {CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b},
    {CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c},
  };
  return lb_cudnn_build_op (CUDNN_BACKEND_MATMUL_DESCRIPTOR, da,
      G_N_ELEMENTS (da), CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
      CUDNN_ATTR_OPERATION_MATMUL_DESC, oa, G_N_ELEMENTS (oa), what, error);
}

/* y = reduce(x) over the dims where y has extent 1, f32 math. */
static cudnnBackendDescriptor_t
op_reduction (cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
    cudnnBackendDescriptor_t y, const char *what, GError ** error)
{
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const LbCudnnAttr da[] = {
    {CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1,
        &mode},
    {CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp},
  };
  const LbCudnnAttr oa[] = {
    {CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &x},
    {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &y},
  };
  return lb_cudnn_build_op (CUDNN_BACKEND_REDUCTION_DESCRIPTOR, da,
      G_N_ELEMENTS (da), CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
      CUDNN_ATTR_OPERATION_REDUCTION_DESC, oa, G_N_ELEMENTS (oa), what, error);
}

/* ---- the graph ---- */

enum
{
  T_Q, T_K, T_V, T_O, T_SCALE, T_S, T_SCALED, T_MAX, T_SUB, T_EXP, T_SUM,
  T_LOG, T_STATS, T_P, N_TENSORS
};

/* The layouts of the graph's tensors (sdpa_plan_build() fills them from
 * the key): the real operands, the by-value scale, the scores and the
 * per-query statistics. */
enum
{
  L_Q, L_K, L_V, L_O, L_ONE, L_SCORES, L_ROWS, N_LAYOUTS
};

/* One tensor of the graph: its uid, data type, layout and kind. */
typedef struct
{
  int64_t uid;
  int type;                     /* TY_* */
  int layout;                   /* L_* */
  gboolean is_virtual, by_value;
} SdpaTensor;

/* the tensors' data types: the I/O type (bf16), f32, the output's */
enum
{
  TY_IO, TY_F32, TY_OUT
};

static const SdpaTensor sdpa_tensors[N_TENSORS] = {
  [T_Q] = {UID_Q, TY_IO, L_Q, FALSE, FALSE},
  [T_K] = {UID_K, TY_IO, L_K, FALSE, FALSE},
  [T_V] = {UID_V, TY_IO, L_V, FALSE, FALSE},
  [T_O] = {UID_O, TY_OUT, L_O, FALSE, FALSE},
  [T_SCALE] = {UID_SCALE, TY_F32, L_ONE, FALSE, TRUE},
  [T_S] = {UID_S, TY_F32, L_SCORES, TRUE, FALSE},
  [T_SCALED] = {UID_SCALED, TY_F32, L_SCORES, TRUE, FALSE},
  [T_MAX] = {UID_MAX, TY_F32, L_ROWS, TRUE, FALSE},
  [T_SUB] = {UID_SUB, TY_F32, L_SCORES, TRUE, FALSE},
  [T_EXP] = {UID_EXP, TY_F32, L_SCORES, TRUE, FALSE},
  [T_SUM] = {UID_SUM, TY_F32, L_ROWS, TRUE, FALSE},
  [T_LOG] = {UID_LOG, TY_F32, L_ROWS, TRUE, FALSE},
  [T_STATS] = {UID_STATS, TY_F32, L_ROWS, TRUE, FALSE},
  /* P in the I/O type: the second matmul's A operand */
  [T_P] = {UID_P, TY_IO, L_SCORES, TRUE, FALSE},
};

/* the kinds of graph node */
enum
{
  OP_MATMUL, OP_POINTWISE, OP_REDUCTION
};

/* One node: y = op(x, b) on the tensors T_* (b -1: a unary node), in the
 * order of the frontend's composite SDPA node. */
typedef struct
{
  int kind;                     /* OP_* */
  int mode;                     /* cudnnPointwiseMode_t or
                                 * cudnnReduceTensorOp_t */
  int x, b, y;
  const char *what;
} SdpaOp;

#define SDPA_WHAT(w) "attention (cuDNN SDPA): " w

static const SdpaOp sdpa_ops[] = {
  {OP_MATMUL, 0, T_Q, T_K, T_S, SDPA_WHAT ("Q.K^T")},
  {OP_POINTWISE, CUDNN_POINTWISE_MUL, T_S, T_SCALE, T_SCALED,
      SDPA_WHAT ("scale")},
  {OP_REDUCTION, CUDNN_REDUCE_TENSOR_MAX, T_SCALED, -1, T_MAX,
      SDPA_WHAT ("row max")},
  {OP_POINTWISE, CUDNN_POINTWISE_SUB, T_SCALED, T_MAX, T_SUB,
      SDPA_WHAT ("sub")},
  {OP_POINTWISE, CUDNN_POINTWISE_EXP, T_SUB, -1, T_EXP, SDPA_WHAT ("exp")},
  {OP_REDUCTION, CUDNN_REDUCE_TENSOR_ADD, T_EXP, -1, T_SUM,
      SDPA_WHAT ("row sum")},
  {OP_POINTWISE, CUDNN_POINTWISE_LOG, T_SUM, -1, T_LOG, SDPA_WHAT ("log")},
  {OP_POINTWISE, CUDNN_POINTWISE_ADD, T_MAX, T_LOG, T_STATS,
      SDPA_WHAT ("stats")},
  {OP_POINTWISE, CUDNN_POINTWISE_DIV, T_EXP, T_SUM, T_P, SDPA_WHAT ("div")},
  {OP_MATMUL, 0, T_P, T_V, T_O, SDPA_WHAT ("P.V")},
};

#define N_OPS ((int) G_N_ELEMENTS (sdpa_ops))

/* The node @o of the graph on the tensors @t (a finalized operation or
 * NULL). */
static cudnnBackendDescriptor_t
sdpa_op_build (const SdpaOp * o, cudnnBackendDescriptor_t * t, GError ** error)
{
  cudnnBackendDescriptor_t b = o->b >= 0 ? t[o->b] : NULL;
  switch (o->kind) {
    case OP_MATMUL:
      return op_matmul (t[o->x], b, t[o->y], o->what, error);
    case OP_REDUCTION:
      return op_reduction ((cudnnReduceTensorOp_t) o->mode, t[o->x],
          t[o->y], o->what, error);
    default:
      return lb_cudnn_op_pointwise ((cudnnPointwiseMode_t) o->mode, t[o->x],
          b, t[o->y], o->what, error);
  }
}

/* Builds the flash fprop graph of @k (file comment) and its plan. */
static gboolean
sdpa_plan_build (LbStream * s, const SdpaKey * k, LbCudnnPlan * plan,
    GError ** error)
{
  const int64_t h = k->nh, nq = k->nq, nk = k->nk, d = k->hd;
  const cudnnDataType_t types[] = {
    [TY_IO] = CUDNN_DATA_BFLOAT16,
    [TY_F32] = CUDNN_DATA_FLOAT,
    [TY_OUT] = (cudnnDataType_t) k->out_dtype,
  };
  /* dims and strides of each layout: Q [1, H, Nq, D], K^T [1, H, D, Nk]
   * (K's token and dim strides swapped), V [1, H, Nk, D], O [1, H, Nq, D]
   * (dim 0 spans the buffer); the scores [1, H, Nq, Nk] and the per-query
   * statistics [1, H, Nq, 1], packed (the frontend's layout of these
   * virtual tensors) */
  const int64_t dims[N_LAYOUTS][4] = {
    [L_Q] = {1, h, nq, d},
    [L_K] = {1, h, d, nk},
    [L_V] = {1, h, nk, d},
    [L_O] = {1, h, nq, d},
    [L_ONE] = {1, 1, 1, 1},
    [L_SCORES] = {1, h, nq, nk},
    [L_ROWS] = {1, h, nq, 1},
  };
  const int64_t strides[N_LAYOUTS][4] = {
    [L_Q] = {nq * k->qs0, k->qs1, k->qs0, 1},
    [L_K] = {nk * k->ks0, k->ks1, 1, k->ks0},
    [L_V] = {nk * k->vs0, k->vs1, k->vs0, 1},
    [L_O] = {nq * k->os0, k->os1, k->os0, 1},
    [L_ONE] = {1, 1, 1, 1},
    [L_SCORES] = {h * nq * nk, nq * nk, nk, 1},
    [L_ROWS] = {h * nq, nq, 1, 1},
  };
  cudnnBackendDescriptor_t t[N_TENSORS] = { 0 };
  cudnnBackendDescriptor_t ops[G_N_ELEMENTS (sdpa_ops)] = { 0 };
  gboolean ok = FALSE;

  for (int i = 0; i < N_TENSORS; i++) {
    const SdpaTensor *ts = &sdpa_tensors[i];
    t[i] = lb_cudnn_tensor (ts->uid, types[ts->type], 4, dims[ts->layout],
        strides[ts->layout], ts->is_virtual, ts->by_value,
        SDPA_WHAT ("graph"), error);
    if (t[i] == NULL)
      goto out;
  }
  for (int i = 0; i < N_OPS; i++)
    if (!(ops[i] = sdpa_op_build (&sdpa_ops[i], t, error)))
      goto out;
  ok = lb_cudnn_plan_build (s, ops, N_OPS, TRUE, plan,
      "attention (cuDNN SDPA)", error);
out:
  lb_cudnn_destroy_all (ops, N_OPS);
  lb_cudnn_destroy_all (t, N_TENSORS);
  return ok;
}

/* ---- selection ---- */

/* LINGBOT_CUDA_ATTENTION: unset, empty or "cudnn" select this path (the
 * default since the first H200 run measured it 1.7-4x faster than the own
 * kernel at the DiT's shapes, docs/performance.md); "own" the own kernel;
 * anything else warns once and keeps the default. */
static gboolean
cudnn_selected (void)
{
  static gint warned;
  const char *v = g_getenv ("LINGBOT_CUDA_ATTENTION");
  if (v == NULL || *v == '\0' || strcmp (v, "cudnn") == 0)
    return TRUE;
  if (strcmp (v, "own") == 0)
    return FALSE;
  if (g_atomic_int_compare_and_exchange (&warned, 0, 1))
    g_warning ("LINGBOT_CUDA_ATTENTION=\"%s\" is neither \"cudnn\" nor "
        "\"own\": using cuDNN's SDPA (the default)", v);
  return TRUE;
}

static void
count (guint64 * counter)
{
  g_mutex_lock (&stats_lock);
  (*counter)++;
  g_mutex_unlock (&stats_lock);
}

/* Bytes of @n bf16 elements rounded up to 256 (scratch sub-blocks). */
static gsize
bf16_block (int64_t n)
{
  return ((gsize) n * sizeof (uint16_t) + 255) & ~(gsize) 255;
}

/* The entry of @key on @s: found, built now, or NULL while capturing or
 * once the table holds MAX_PLANS shapes (nothing is built then).  A failed
 * build leaves a negative entry and records the message. */
static SdpaEntry *
entry_get (LbStream * s, const SdpaKey * key)
{
  LbCudaStream *cs = s->priv;
  if (cs->sdpa_plans == NULL)
    cs->sdpa_plans = g_hash_table_new_full (key_hash, key_equal, NULL,
        entry_free);
  SdpaEntry *e = g_hash_table_lookup (cs->sdpa_plans, key);
  if (e != NULL || cs->capturing)
    return e;
  /* plans are never evicted: a CUDA graph captured earlier may still
   * launch the kernels a plan owns (runtime-compiled modules) */
  if (g_hash_table_size (cs->sdpa_plans) >= MAX_PLANS)
    return NULL;
  e = g_new0 (SdpaEntry, 1);
  e->key = *key;
  g_autoptr (GError) err = NULL;
  if (sdpa_plan_build (s, key, &e->plan, &err)) {
    if (!lb_cudnn_reserve (s, &e->plan, &err)) {
      /* no memory for its workspace now: the own kernel, retried later */
      g_debug ("attention: no cuDNN workspace (%s), own kernel for now",
          err ? err->message : "capture");
      entry_free (e);
      return NULL;
    }
    count (&stats_plans);
  } else {
    lb_cudnn_plan_clear (&e->plan);
    memset (&e->plan, 0, sizeof e->plan);
    g_debug ("attention: no cuDNN SDPA plan for Nq=%" G_GINT64_FORMAT " Nk=%"
        G_GINT64_FORMAT " H=%" G_GINT64_FORMAT " hd=%" G_GINT64_FORMAT
        ", using the own bf16 kernel: %s", key->nq, key->nk, key->nh,
        key->hd, err ? err->message : "?");
    g_mutex_lock (&stats_lock);
    g_free (stats_error);
    stats_error = g_strdup (err ? err->message : "?");
    g_mutex_unlock (&stats_lock);
  }
  g_hash_table_insert (cs->sdpa_plans, &e->key, e);
  return e;
}

/* The key of contiguous [N, H, hd] q, k, v and out (row strides H hd,
 * head strides hd) and a bf16 O; callers change the strides of the
 * operands they pass in place. */
static void
key_init (SdpaKey * key, int64_t nq, int64_t nk, int64_t nh, int64_t hd)
{
  memset (key, 0, sizeof *key);
  key->nq = nq;
  key->nk = nk;
  key->nh = nh;
  key->hd = hd;
  key->qs0 = key->ks0 = key->vs0 = key->os0 = nh * hd;
  key->qs1 = key->ks1 = key->vs1 = key->os1 = hd;
  key->out_dtype = CUDNN_DATA_BFLOAT16;
}

/* A bf16 operand cuDNN can read in place (16-byte tensors, alignment 16
 * declared for every tensor of the graph). */
static gboolean
bf16_direct (const void *p, int64_t s0, int64_t s1)
{
  return ((guintptr) p & 15u) == 0 && s0 % 8 == 0 && s1 % 8 == 0;
}

/* The cuDNN entry for a call (its plan built on first sight, outside
 * captures) and the call's conversion scratch in bytes, or %NULL when
 * cuDNN declines it (counted as declined when @count_declined). */
static SdpaEntry *
sdpa_entry (LbStream * s, const LbCudaAttnArgs * a, gboolean kv_bf16,
    gboolean count_declined, SdpaKey * key, gsize * nscr)
{
  if (s->math == LB_MATH_FP32 || (a->hd != 64 && a->hd != 128) ||
      a->bias != NULL || a->mask != NULL || a->nq <= 0 || a->nk <= 0 ||
      a->nh <= 0 || !cudnn_selected ())
    return NULL;

  const int64_t nq = a->nq, nk = a->nk, nh = a->nh, hd = a->hd;
  /* bf16 operands are read (k, v, q) or written (out) in place: their
   * strides must suit cuDNN, else the own kernel takes the call */
  if ((kv_bf16 && (!bf16_direct (a->k, a->ks0, a->ks1) ||
              !bf16_direct (a->v, a->vs0, a->vs1))) ||
      (a->q16 && !bf16_direct (a->q16, a->qs0, a->qs1)) ||
      (a->out16 && !bf16_direct (a->out16, a->os0, a->os1))) {
    if (count_declined)
      count (&stats_declined);
    return NULL;
  }
  /* contiguous [N, H, hd] scratch operands, or the bf16 ones in place */
  key_init (key, nq, nk, nh, hd);
  if (kv_bf16) {
    key->ks0 = a->ks0;
    key->ks1 = a->ks1;
    key->vs0 = a->vs0;
    key->vs1 = a->vs1;
  }
  if (a->q16) {
    key->qs0 = a->qs0;
    key->qs1 = a->qs1;
  }
  if (a->out16) {
    key->os0 = a->os0;
    key->os1 = a->os1;
  }
  SdpaEntry *e = entry_get (s, key);
  if (e == NULL || e->plan.plan == NULL || e->broken) {
    if (count_declined)
      count (&stats_declined);
    return NULL;
  }
  const gsize bq = a->q16 ? 0 : bf16_block (nq * nh * hd);
  const gsize bo = a->out16 ? 0 : bf16_block (nq * nh * hd);
  const gsize bk = kv_bf16 ? 0 : bf16_block (nk * nh * hd);
  *nscr = bq + bo + 2 * bk;
  return e;
}

/**
 * lb_cuda_cudnn_attention_prepare:
 * @s: the stream, not being captured
 * @a: the call's operands (their addresses, strides and shape; not read)
 * @kv_bf16: k and v are bf16 (read in place)
 * @scratch: (out): the conversion scratch such a call takes, in bytes
 * @workspace: (out): its plan's cuDNN workspace, in bytes (already held
 *   by the stream: entry_get() reserves it with the plan)
 *
 * LbBackend.attention_prepare's cuDNN side: builds the plan of the shape
 * now (lb_cuda_cudnn_attention() would on its first call), so that no
 * plan is built, no kernel compiled or loaded and no workspace grown
 * during a multi-rank chunk.  A call cuDNN would decline says 0 and 0
 * (the own kernel takes no scratch).
 */
void
lb_cuda_cudnn_attention_prepare (LbStream * s, const LbCudaAttnArgs * a,
    gboolean kv_bf16, gsize * scratch, gsize * workspace)
{
  SdpaKey key;
  gsize nscr = 0;
  SdpaEntry *e = sdpa_entry (s, a, kv_bf16, FALSE, &key, &nscr);
  *scratch = e ? nscr : 0;
  *workspace = e ? (gsize) MAX (e->plan.workspace, 0) : 0;
}

/**
 * lb_cuda_cudnn_attention:
 * @s: a CUDA stream
 * @a: the attention's operands (cuda_attention): q [Nq, H, hd] f32 (or
 *   bf16 at q16), k and v [Nk, H, hd] (f32, or bf16 bits when @kv_bf16),
 *   out [Nq, H, hd] f32 (or bf16 at out16), device views with unit last
 *   stride, bias and mask pointers, the logit scale
 * @kv_bf16: k and v are bfloat16 (a bf16 KV cache)
 * @ran: (out): %TRUE when the op was enqueued here, %FALSE when the caller
 *   must run its own kernel
 * @error: %LB_ERROR_DEVICE when a conversion launch or the cuDNN execution
 *   fails (then *@ran is %TRUE: nothing is to be run in its place)
 *
 * The attention op (kernels/ops.h @attention) through cuDNN's fused flash
 * SDPA graph (the default; LINGBOT_CUDA_ATTENTION=own declines every
 * call) when the stream's math is
 * %LB_MATH_BF16, hd is 64 or 128, Nq, Nk and H are positive and neither
 * bias nor key mask is given.  q (and f32 k, v) are rounded to bf16
 * (nearest even, lb_f32_to_bf16()), the logits, softmax statistics and
 * accumulation are f32 inside cuDNN, P and the output are bf16, the output
 * is widened into out: the numerics of the own bf16 kernel plus the bf16
 * rounding of the output (docs/design/cuda.md "cuDNN SDPA").  A bf16 q is
 * read and a bf16 out written in place, with no conversion.  A shape for
 * which no engine builds a plan, one first seen while the stream is being
 * captured, or bf16 operands that cuDNN cannot use in place (alignment)
 * returns with *@ran = %FALSE.  Asynchronous; no host synchronisation;
 * per call, pool scratch of 2 (2 Nq + 2 Nk) H hd bytes (4 Nq H hd with
 * bf16 k and v) plus cuDNN's workspace.
 *
 * Returns: %FALSE on error.
 */
gboolean
lb_cuda_cudnn_attention (LbStream * s, const LbCudaAttnArgs * a,
    gboolean kv_bf16, gboolean * ran, GError ** error)
{
  *ran = FALSE;
  LbCudaStream *cs = s->priv;
  const int64_t nq = a->nq, nk = a->nk, nh = a->nh, hd = a->hd;
  SdpaKey key;
  gsize nscr = 0;
  SdpaEntry *e = sdpa_entry (s, a, kv_bf16, TRUE, &key, &nscr);
  if (e == NULL)
    return TRUE;
  const gsize bq = a->q16 ? 0 : bf16_block (nq * nh * hd);
  const gsize bo = a->out16 ? 0 : bf16_block (nq * nh * hd);
  const gsize bk = kv_bf16 ? 0 : bf16_block (nk * nh * hd);
  guchar *scr = nscr > 0 ? lb_cuda_scratch (s, nscr, error) : NULL;
  if (nscr > 0 && scr == NULL)
    return FALSE;
  *ran = TRUE;
  uint16_t *q16 = a->q16 ? (uint16_t *) a->q16 : (uint16_t *) scr;
  uint16_t *o16 = a->out16 ? a->out16 : (uint16_t *) (scr + bq);
  const uint16_t *k16 = kv_bf16 ? (const uint16_t *) (const void *) a->k :
      (const uint16_t *) (scr + bq + bo);
  const uint16_t *v16 = kv_bf16 ? (const uint16_t *) (const void *) a->v :
      (const uint16_t *) (scr + bq + bo + bk);
  g_autoptr (GError) exec_err = NULL;
  gboolean cudnn_ran = FALSE;
  e->scale = a->scale;
  const int64_t uids[5] = { UID_Q, UID_K, UID_V, UID_O, UID_SCALE };
  void *const ptrs[5] = { q16, (void *) k16, (void *) v16, o16, &e->scale };
  cudaSetDevice (s->device);
  cudaStream_t st = cs->stream;
  gboolean ok = (a->q16 ||
      lb_cuda_check (lb_cuda_launch_f32_to_bf16_3d (st, a->q, a->qs0, a->qs1,
              q16, key.qs0, key.qs1, nq, nh, hd), "attention (cuDNN SDPA): "
          "q to bf16", error)) &&
      (kv_bf16 ||
      (lb_cuda_check (lb_cuda_launch_f32_to_bf16_3d (st, a->k, a->ks0,
                  a->ks1, (uint16_t *) k16, key.ks0, key.ks1, nk, nh, hd),
              "attention (cuDNN SDPA): k to bf16", error) &&
          lb_cuda_check (lb_cuda_launch_f32_to_bf16_3d (st, a->v, a->vs0,
                  a->vs1, (uint16_t *) v16, key.vs0, key.vs1, nk, nh, hd),
              "attention (cuDNN SDPA): v to bf16", error))) &&
      (cudnn_ran = lb_cudnn_execute (s, &e->plan, 5, uids, ptrs,
          "attention (cuDNN SDPA): execute", &exec_err)) &&
      (a->out16 ||
      lb_cuda_check (lb_cuda_launch_bf16_to_f32_3d (st, o16, key.os0,
              key.os1, a->out, a->os0, a->os1, nq, nh, hd),
          "attention (cuDNN SDPA): output to f32", error));
  if (scr)
    lb_cuda_scratch_release (s, scr);
  if (exec_err != NULL) {
    /* an engine that finalized but does not execute: the own kernel runs
     * this call and every later one of the shape (the plan stays: graphs
     * may hold it) */
    e->broken = TRUE;
    g_debug ("attention: cuDNN SDPA failed (%s), using the own kernel",
        exec_err->message);
    g_mutex_lock (&stats_lock);
    g_free (stats_error);
    stats_error = g_strdup (exec_err->message);
    g_mutex_unlock (&stats_lock);
    count (&stats_declined);
    *ran = FALSE;
    return TRUE;
  }
  if (ok && cudnn_ran)
    count (&stats_runs);
  return ok;
}

G_MODULE_EXPORT void lingbot_backend_cuda_attention_stats (guint64 *
    cudnn_runs, guint64 * cudnn_declined, guint64 * cudnn_plans,
    char **last_error);

/**
 * lingbot_backend_cuda_attention_stats:
 * @cudnn_runs: (out) (optional): attention calls enqueued through cuDNN
 *   SDPA since the module was loaded (all devices and streams)
 * @cudnn_declined: (out) (optional): calls that selected cuDNN and were
 *   eligible (bf16 math, hd 64/128, no bias or mask) but ran the own kernel:
 *   no plan for the shape, first seen during graph capture, or the plan
 *   table full
 * @cudnn_plans: (out) (optional): SDPA plans built
 * @last_error: (out) (optional) (transfer full) (nullable): the message of
 *   the last failed plan build (cuDNN's status), or %NULL; g_free() it
 *
 * Counters of the cuDNN SDPA attention path (docs/design/cuda.md "cuDNN
 * SDPA"), for tests and benchmarks: they tell whether cuDNN really ran.
 * Resolve with g_module_symbol on the loaded module.
 */
void
lingbot_backend_cuda_attention_stats (guint64 * cudnn_runs,
    guint64 * cudnn_declined, guint64 * cudnn_plans, char **last_error)
{
  g_mutex_lock (&stats_lock);
  if (cudnn_runs)
    *cudnn_runs = stats_runs;
  if (cudnn_declined)
    *cudnn_declined = stats_declined;
  if (cudnn_plans)
    *cudnn_plans = stats_plans;
  if (last_error)
    *last_error = g_strdup (stats_error);
  g_mutex_unlock (&stats_lock);
}

G_MODULE_EXPORT gboolean lingbot_backend_cuda_sdpa_check (int64_t nq,
    int64_t nk, int64_t heads, int64_t hd, gboolean kv_window, GError ** error);

/**
 * lingbot_backend_cuda_sdpa_check:
 * @nq: queries
 * @nk: keys
 * @heads: heads
 * @hd: head dim (64 or 128)
 * @kv_window: %TRUE: bf16 k and v read in place from a cache window
 *   (token stride 2 H hd: the window of a cache of twice the heads, the
 *   strided case of the bf16 KV cache); %FALSE: the packed bf16 scratch
 *   operands the op converts f32 inputs into
 * @error: %LB_ERROR_UNSUPPORTED (no engine of the target takes the graph),
 *   %LB_ERROR_INVALID_ARGUMENT without a target
 *
 * The deviceless check of the SDPA graph of lb_cuda_cudnn_attention():
 * builds the same graph for this shape and plans it for the GPU set with
 * lingbot_backend_cuda_cudnn_set_target() (lb_cudnn_plan_build() without
 * a stream).  For tests on machines without a GPU.
 *
 * Returns: %TRUE when an engine takes it.
 */
gboolean
lingbot_backend_cuda_sdpa_check (int64_t nq, int64_t nk, int64_t heads,
    int64_t hd, gboolean kv_window, GError ** error)
{
  SdpaKey key;
  key_init (&key, nq, nk, heads, hd);
  if (kv_window)
    key.ks0 = key.vs0 = 2 * heads * hd;
  LbCudnnPlan plan = { 0 };
  gboolean ok = sdpa_plan_build (NULL, &key, &plan, error);
  lb_cudnn_plan_clear (&plan);
  return ok;
}

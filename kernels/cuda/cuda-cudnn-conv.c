/* lingbot-gst: conv3d_causal and conv2d through the cuDNN graph API
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The default CUDA path of the two convolution ops (cuda-ops.c dispatches
 * here after the argument checks; the im2col + cuBLASLt path of
 * conv_core() stays as the reference and the fallback).  Each call is one
 * cuDNN convolution forward (CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_
 * DESCRIPTOR, cross-correlation, f32 tensors, f32 compute), optionally
 * fused with the bias (pointwise add of a [1, Cout, 1, ...] tensor):
 *
 * - conv3d_causal (spec vae_and_distributed_spec.md A.3/A.5): x [Cin, T,
 *   H, W] is the NCDHW tensor [1, Cin, T, H, W].  The causal zero frames
 *   are cuDNN's temporal pre-padding Z = max(0, kt - 1 - Tc), post-padding
 *   0 (asymmetric paddings are a graph-API feature), so without a cache
 *   nothing is copied.  With a cache, cat(cache, x) along T is built once
 *   per call in pool scratch [Cin, Tc + T, H, W] by two strided copies and
 *   convolved with the same pre-padding.  Should no engine take Z > 0 with
 *   post-padding 0, the Z zero frames are written into the cat instead
 *   (fill + copies, temporal padding 0 / 0; a second key).  H and W use
 *   the op's symmetric pad_h / pad_w and strides; dilations are 1.
 * - conv2d: x [Cin, H, W] or [B, Cin, H, W] is NCHW with N = 1 or B.
 *
 * Plans (execution plan + workspace size) are built the first time a
 * shape is seen on a stream and kept in LbCudaStream.conv_plans, keyed by
 * ConvKey (every extent, padding and stride, the bias flag and the
 * stream's #LbMathMode; tensors are always packed, so the strides follow
 * from the extents).  A key cuDNN cannot run (no engine, or any failure
 * while building) is stored as a negative entry: the call and every later
 * call of that shape take the im2col path, and the refusal is logged once
 * with g_debug.  A bias graph that no engine runs fused is rebuilt
 * without the bias, which is then added by a per-channel kernel.  In the
 * steady state a call creates no descriptor (lb_cudnn_execute() reuses the
 * stream's variant pack for pointers it has seen).
 *
 * Precision: an %LB_MATH_FP32 stream only takes engines that compute in
 * f32 (lb_cudnn_plan_build() with allow_reduced %FALSE); an %LB_MATH_BF16
 * stream also takes TF32 / tensor-core / down-converting engines (the
 * "BF16 option": f32 tensors in and out, reduced-precision products,
 * f32 accumulation).
 *
 * Selection: LINGBOT_CUDA_CONV=cudnn (default) or im2col, read per call.
 * cuDNN is also skipped for operands that are not 16-byte aligned (the
 * tensor descriptors declare 16-byte alignment), for Cin = 0, and for a
 * shape first seen while the stream is captured into a CUDA graph (no
 * plan is built inside a capture; nothing is cached, so the next
 * uncaptured call builds it).
 */
#include "kernels/cuda/cuda-internal.h"

#include <gmodule.h>
#include <string.h>

#define MAX_PLANS 512

G_MODULE_EXPORT void lingbot_backend_cuda_conv_stats (guint64 * cudnn_calls,
    guint64 * im2col_calls, guint64 * plans, guint64 * refused);
G_MODULE_EXPORT char *lingbot_backend_cuda_conv_last_refusal (void);

/* variant-pack uids */
enum
{
  UID_X = 1,
  UID_W = 2,
  UID_Y = 3,
  UID_B = 4,
  UID_CONV = 5,                 /* virtual: the conv result before the bias */
};

/* One conv shape.  Index 0 of the spatial arrays is time (conv3d) or a
 * unit dimension (conv2d, nsd = 2, which uses indices 1 and 2 only). */
typedef struct
{
  int64_t nsd;                  /* spatial dims: 2 or 3 */
  int64_t n, cin, cout;
  int64_t in[3];
  int64_t k[3];
  int64_t pre[3], post[3];
  int64_t stride[3];
  int64_t out[3];
  int64_t bias;
  int64_t math;                 /* LbMathMode */
} ConvKey;

/* memcmp/hash of the whole key: no implicit padding may exist */
G_STATIC_ASSERT (sizeof (ConvKey) == 24 * sizeof (int64_t));

typedef struct
{
  ConvKey key;
  gboolean usable;              /* FALSE: a negative entry (use im2col) */
  gboolean fused;               /* the plan adds the bias */
  LbCudnnPlan plan;
} ConvPlan;

/* process-wide counters (lingbot_backend_cuda_conv_stats) */
static gsize n_cudnn, n_im2col, n_plans, n_refused;
static GMutex refusal_lock;
static char *last_refusal;

static guint
key_hash (gconstpointer p)
{
  const guchar *b = p;
  guint32 h = 2166136261u;
  for (gsize i = 0; i < sizeof (ConvKey); i++)
    h = (h ^ b[i]) * 16777619u;
  return h;
}

static gboolean
key_equal (gconstpointer a, gconstpointer b)
{
  return memcmp (a, b, sizeof (ConvKey)) == 0;
}

static void
plan_free (gpointer p)
{
  ConvPlan *plan = p;
  lb_cudnn_plan_clear (&plan->plan);
  g_free (plan);
}

static void
count (gsize * counter)
{
  g_atomic_pointer_add (counter, 1);
}

/* Packed strides of @nd @dims. */
static void
packed_strides (int nd, const int64_t * dims, int64_t * strides)
{
  int64_t s = 1;
  for (int i = nd - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
}

/* Tensor dims [lead0, lead1, spatial...] of a key (spatial from @sp, the
 * last key->nsd of its three entries). */
static int
tensor_dims (const ConvKey * key, int64_t lead0, int64_t lead1,
    const int64_t * sp, int64_t * dims)
{
  const int nd = (int) key->nsd + 2;
  dims[0] = lead0;
  dims[1] = lead1;
  for (int i = 0; i < (int) key->nsd; i++)
    dims[2 + i] = sp[3 - key->nsd + i];
  return nd;
}

static void
destroy_descs (cudnnBackendDescriptor_t * d, int n)
{
  for (int i = 0; i < n; i++)
    if (d[i])
      cudnnBackendDestroyDescriptor (d[i]);
}

/* Builds the plan of @key: conv (-> + bias when @fuse_bias).  Every
 * descriptor made here is destroyed before returning (the plan keeps what
 * it needs). */
static gboolean
build_plan (LbStream * s, const ConvKey * key, gboolean fuse_bias,
    LbCudnnPlan * out, GError ** error)
{
  const char *what = key->nsd == 3 ? "conv3d_causal (cuDNN)" :
      "conv2d (cuDNN)";
  enum
  { T_X, T_W, T_Y, T_CONV, T_B, CONV, OP_CONV, PW, OP_PW, N_DESC };
  cudnnBackendDescriptor_t d[N_DESC] = { NULL };
  int64_t xd[5], xs[5], wd[5], ws[5], yd[5], ys[5], bd[5], bs[5];
  const int64_t ones[3] = { 1, 1, 1 };
  const int nsd = (int) key->nsd, sp0 = 3 - nsd;
  int nd = tensor_dims (key, key->n, key->cin, key->in, xd);
  tensor_dims (key, key->cout, key->cin, key->k, wd);
  tensor_dims (key, key->n, key->cout, key->out, yd);
  tensor_dims (key, 1, key->cout, ones, bd);
  packed_strides (nd, xd, xs);
  packed_strides (nd, wd, ws);
  packed_strides (nd, yd, ys);
  packed_strides (nd, bd, bs);

  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const cudnnPointwiseMode_t add = CUDNN_POINTWISE_ADD;
  const int64_t nsd64 = key->nsd;
  /* float alpha/beta, as cuDNN's frontend sets them for f32 graphs */
  const float alpha = 1.0f, beta = 0.0f;
  gboolean ok =
      (d[T_X] = lb_cudnn_tensor (UID_X, f32, nd, xd, xs, FALSE, FALSE, what,
          error)) != NULL &&
      (d[T_W] = lb_cudnn_tensor (UID_W, f32, nd, wd, ws, FALSE, FALSE, what,
          error)) != NULL &&
      (d[T_Y] = lb_cudnn_tensor (UID_Y, f32, nd, yd, ys, FALSE, FALSE, what,
          error)) != NULL &&
      (!fuse_bias ||
      ((d[T_CONV] = lb_cudnn_tensor (UID_CONV, f32, nd, yd, ys, TRUE, FALSE,
                  what, error)) != NULL &&
          (d[T_B] = lb_cudnn_tensor (UID_B, f32, nd, bd, bs, FALSE, FALSE,
                  what, error)) != NULL)) &&
      (d[CONV] = lb_cudnn_new (CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, what,
          error)) != NULL &&
      lb_cudnn_set (d[CONV], CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
      CUDNN_TYPE_DATA_TYPE, 1, &f32, what, error) &&
      lb_cudnn_set (d[CONV], CUDNN_ATTR_CONVOLUTION_CONV_MODE,
      CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, what, error) &&
      lb_cudnn_set (d[CONV], CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
      CUDNN_TYPE_INT64, 1, &nsd64, what, error) &&
      lb_cudnn_set (d[CONV], CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
      CUDNN_TYPE_INT64, nsd, key->pre + sp0, what, error) &&
      lb_cudnn_set (d[CONV], CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
      CUDNN_TYPE_INT64, nsd, key->post + sp0, what, error) &&
      lb_cudnn_set (d[CONV], CUDNN_ATTR_CONVOLUTION_DILATIONS,
      CUDNN_TYPE_INT64, nsd, ones, what, error) &&
      lb_cudnn_set (d[CONV], CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
      CUDNN_TYPE_INT64, nsd, key->stride + sp0, what, error) &&
      lb_cudnn_finalize (d[CONV], what, error) &&
      (d[OP_CONV] =
      lb_cudnn_new (CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
          what, error)) != NULL &&
      lb_cudnn_set (d[OP_CONV], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d[T_X], what, error) &&
      lb_cudnn_set (d[OP_CONV], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d[T_W], what, error) &&
      lb_cudnn_set (d[OP_CONV], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, fuse_bias ? &d[T_CONV] : &d[T_Y],
      what, error) &&
      lb_cudnn_set (d[OP_CONV],
      CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d[CONV], what, error) &&
      lb_cudnn_set (d[OP_CONV], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
      CUDNN_TYPE_FLOAT, 1, &alpha, what, error) &&
      lb_cudnn_set (d[OP_CONV], CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
      CUDNN_TYPE_FLOAT, 1, &beta, what, error) &&
      lb_cudnn_finalize (d[OP_CONV], what, error);
  if (ok && fuse_bias)
    ok = (d[PW] = lb_cudnn_new (CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what,
            error)) != NULL &&
        lb_cudnn_set (d[PW], CUDNN_ATTR_POINTWISE_MODE,
        CUDNN_TYPE_POINTWISE_MODE, 1, &add, what, error) &&
        lb_cudnn_set (d[PW], CUDNN_ATTR_POINTWISE_MATH_PREC,
        CUDNN_TYPE_DATA_TYPE, 1, &f32, what, error) &&
        lb_cudnn_finalize (d[PW], what, error) &&
        (d[OP_PW] = lb_cudnn_new (CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
            what, error)) != NULL &&
        lb_cudnn_set (d[OP_PW], CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d[PW], what, error) &&
        lb_cudnn_set (d[OP_PW], CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d[T_CONV], what, error) &&
        lb_cudnn_set (d[OP_PW], CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d[T_B], what, error) &&
        lb_cudnn_set (d[OP_PW], CUDNN_ATTR_OPERATION_POINTWISE_YDESC,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d[T_Y], what, error) &&
        lb_cudnn_finalize (d[OP_PW], what, error);
  if (ok) {
    cudnnBackendDescriptor_t ops[2] = { d[OP_CONV], d[OP_PW] };
    ok = lb_cudnn_plan_build (s, ops, fuse_bias ? 2 : 1,
        key->math != LB_MATH_FP32, out, what, error);
  }
  destroy_descs (d, N_DESC);
  return ok;
}

static void
refuse (const ConvKey * key, const GError * err)
{
  g_autofree char *msg = g_strdup_printf ("%s N=%" G_GINT64_FORMAT " Cin=%"
      G_GINT64_FORMAT " Cout=%" G_GINT64_FORMAT " in %" G_GINT64_FORMAT "x%"
      G_GINT64_FORMAT "x%" G_GINT64_FORMAT " k %" G_GINT64_FORMAT "x%"
      G_GINT64_FORMAT "x%" G_GINT64_FORMAT " %s%s: %s",
      key->nsd == 3 ? "conv3d_causal" : "conv2d", key->n, key->cin, key->cout,
      key->in[0], key->in[1], key->in[2], key->k[0], key->k[1], key->k[2],
      key->math != LB_MATH_FP32 ? "bf16" : "fp32",
      key->bias ? " bias" : "", err ? err->message : "?");
  g_debug ("cuDNN conv refused, using im2col: %s", msg);
  g_mutex_lock (&refusal_lock);
  g_free (last_refusal);
  last_refusal = g_steal_pointer (&msg);
  g_mutex_unlock (&refusal_lock);
  count (&n_refused);
}

/* The stream's plan for @key, built (or refused) on first use; %NULL
 * while the stream is captured and no plan exists yet (plans are built
 * outside captures only: heuristics and engine finalization are not
 * stream work). */
static ConvPlan *
plan_for (LbStream * s, const ConvKey * key)
{
  LbCudaStream *cs = s->priv;
  if (cs->conv_plans == NULL)
    cs->conv_plans = g_hash_table_new_full (key_hash, key_equal, NULL,
        plan_free);
  ConvPlan *plan = g_hash_table_lookup (cs->conv_plans, key);
  if (plan || cs->capturing)
    return plan;
  /* plans are never evicted: a CUDA graph captured earlier may still
   * launch the kernels a plan owns; past the cap new shapes use im2col */
  if (g_hash_table_size (cs->conv_plans) >= MAX_PLANS)
    return NULL;
  plan = g_new0 (ConvPlan, 1);
  plan->key = *key;
  g_autoptr (GError) err = NULL;
  if (key->bias) {
    /* fused first; a graph no engine runs is retried without the bias */
    plan->fused = build_plan (s, key, TRUE, &plan->plan, &err);
    if (!plan->fused) {
      g_debug ("cuDNN conv: bias not fused (%s)", err ? err->message : "?");
      g_clear_error (&err);
    }
  }
  plan->usable = plan->fused || build_plan (s, key, FALSE, &plan->plan, &err);
  if (plan->usable && !lb_cudnn_reserve (s, &plan->plan, &err)) {
    /* no memory for its workspace now: im2col this time, retried later */
    g_debug ("cuDNN conv: no workspace (%s), im2col for now",
        err ? err->message : "capture");
    plan_free (plan);
    return NULL;
  }
  if (plan->usable)
    count (&n_plans);
  else
    refuse (key, err);
  g_hash_table_insert (cs->conv_plans, &plan->key, plan);
  return plan;
}

static gboolean
aligned16 (const void *p)
{
  return ((guintptr) p & 15) == 0;
}

/* TRUE unless LINGBOT_CUDA_CONV selects im2col. */
static gboolean
cudnn_selected (void)
{
  static gsize warned;
  const char *v = g_getenv ("LINGBOT_CUDA_CONV");
  if (v == NULL || *v == '\0' || g_str_equal (v, "cudnn"))
    return TRUE;
  if (g_str_equal (v, "im2col"))
    return FALSE;
  if (g_once_init_enter (&warned)) {
    g_message ("LINGBOT_CUDA_CONV=%s is not cudnn or im2col: using cudnn",
        v);
    g_once_init_leave (&warned, 1);
  }
  return TRUE;
}

/* The key of one call (the deviceless check builds the same). */
static void
conv_key (const LbConvGeom * g, gboolean is_2d, gboolean bias, int pad_h,
    int pad_w, int stride_h, int stride_w, LbMathMode math, ConvKey * key)
{
  memset (key, 0, sizeof *key);
  key->cin = g->cin;
  key->cout = g->cout;
  key->in[1] = g->h;
  key->in[2] = g->w;
  key->k[1] = g->kh;
  key->k[2] = g->kw;
  key->pre[1] = key->post[1] = pad_h;
  key->pre[2] = key->post[2] = pad_w;
  key->stride[0] = 1;
  key->stride[1] = stride_h;
  key->stride[2] = stride_w;
  key->out[1] = g->ho;
  key->out[2] = g->wo;
  key->bias = bias;
  /* fp8 runs the convolutions as bf16 does: one plan for both */
  key->math = math == LB_MATH_FP32 ? LB_MATH_FP32 : LB_MATH_BF16;
  if (is_2d) {
    key->nsd = 2;
    key->n = g->t;               /* batch */
    key->in[0] = key->k[0] = key->out[0] = 1;
  } else {
    key->nsd = 3;
    key->n = 1;
    key->in[0] = g->tc + g->t;   /* cat(cache, x) */
    key->k[0] = g->kt;
    key->pre[0] = g->zeros;      /* causal zero frames */
    key->post[0] = 0;
    key->out[0] = g->tout;
  }
}

/**
 * lb_cuda_cudnn_conv:
 * @s: a CUDA stream
 * @g: the checked geometry (lb_check_conv3d_causal() or lb_check_conv2d())
 * @is_2d: %TRUE for conv2d (@g->t is the batch), %FALSE for conv3d_causal
 * @x: device f32, x of the op (contiguous)
 * @cache: (nullable): conv3d_causal's cache [Cin, Tc, H, W] (contiguous)
 * @w: device f32 weight [Cout, Cin, kt, kh, kw] / [Cout, Cin, kh, kw]
 * @bias: (nullable): device f32 [Cout]
 * @pad_h: rows of zeros above and below
 * @pad_w: columns of zeros left and right
 * @stride_h: vertical stride
 * @stride_w: horizontal stride
 * @y: device f32 output of the op (contiguous)
 * @done: (out): %TRUE when the convolution was enqueued here (or had
 *   nothing to write); %FALSE when the caller must run the im2col path
 *   (LINGBOT_CUDA_CONV=im2col, Cin = 0, an operand not 16-byte aligned,
 *   a shape cuDNN refused, or a new shape during a graph capture)
 * @error: %LB_ERROR_DEVICE when a launch or cudnnBackendExecute fails
 *
 * The cuDNN path of the convolution ops (see the file comment): same
 * result as the CPU op (kernels/cpu/conv.c, spec
 * vae_and_distributed_spec.md A.3/A.5) within FP32 tolerance on an
 * %LB_MATH_FP32 stream, TF32/bf16 product tolerance on an %LB_MATH_BF16
 * one.  Asynchronous on @s; takes pool scratch for cat(cache, x) and the
 * cuDNN workspace.
 *
 * Returns: %FALSE on error.
 */
gboolean
lb_cuda_cudnn_conv (LbStream * s, const LbConvGeom * g, gboolean is_2d,
    const float *x, const float *cache, const float *w, const float *bias,
    int pad_h, int pad_w, int stride_h, int stride_w, float *y,
    gboolean * done, GError ** error)
{
  LbCudaStream *cs = s->priv;
  *done = FALSE;
  if (g->cout == 0 || g->tout == 0 || g->ho == 0 || g->wo == 0) {
    *done = TRUE;               /* nothing to write */
    return TRUE;
  }
  const gboolean with_cache = !is_2d && g->tc > 0;
  if (!cudnn_selected () || g->cin == 0 || !aligned16 (w) || !aligned16 (y)
      || (bias && !aligned16 (bias)) ||
      (!with_cache && !aligned16 (x))) {
    count (&n_im2col);
    return TRUE;
  }

  ConvKey key;
  conv_key (g, is_2d, bias != NULL, pad_h, pad_w, stride_h, stride_w,
      s->math, &key);

  cudaSetDevice (s->device);
  ConvPlan *plan = plan_for (s, &key);
  int64_t zf = 0;               /* zero frames written into the cat */
  if (plan && !plan->usable && !is_2d && g->zeros > 0) {
    /* no engine for the asymmetric temporal padding: the zero frames
     * become frames of cat(zeros, cache, x), padding 0 / 0 */
    zf = g->zeros;
    key.in[0] += zf;
    key.pre[0] = 0;
    plan = plan_for (s, &key);
  }
  if (plan == NULL || !plan->usable) {
    count (&n_im2col);
    return TRUE;
  }

  const char *what = is_2d ? "conv2d (cuDNN)" : "conv3d_causal (cuDNN)";
  const float *xin = x;
  float *cat = NULL;
  gboolean ok = TRUE;
  if (with_cache || zf > 0) {
    /* cat(zf zero frames, cache, x) along T: [Cin, zf + Tc + T, H, W] */
    const int64_t hw = g->h * g->w, tcat = zf + g->tc + g->t;
    cat = lb_cuda_scratch (s, (gsize) (g->cin * tcat * hw) * sizeof (float),
        error);
    if (cat == NULL)
      return FALSE;
    LbCudaStrided5 cg = {
      .shape = {1, 1, 1, g->cin, zf * hw},
      .ys = {0, 0, 0, tcat * hw, 1},
      .xs = {0, 0, 0, 0, 0},
      .cdim = 3,
    };
    ok = lb_cuda_check (lb_cuda_launch_strided (cs->stream, LB_CUDA_ST_FILL,
            &cg, NULL, cat, 0.f, 0.f, NULL, NULL), what, error);
    cg.shape[4] = g->tc * hw;
    cg.xs[3] = g->tc * hw;
    cg.xs[4] = 1;
    ok = ok && lb_cuda_check (lb_cuda_launch_strided (cs->stream,
            LB_CUDA_ST_COPY, &cg, cache, cat + zf * hw, 0.f, 0.f, NULL,
            NULL), what, error);
    cg.shape[4] = g->t * hw;
    cg.xs[3] = g->t * hw;
    ok = ok && lb_cuda_check (lb_cuda_launch_strided (cs->stream,
            LB_CUDA_ST_COPY, &cg, x, cat + (zf + g->tc) * hw, 0.f, 0.f, NULL,
            NULL), what, error);
    xin = cat;
  }
  if (ok) {
    const int64_t uids[4] = { UID_X, UID_W, UID_Y, UID_B };
    void *const ptrs[4] = { (void *) xin, (void *) w, y, (void *) bias };
    g_autoptr (GError) err = NULL;
    if (!lb_cudnn_execute (s, &plan->plan, plan->fused ? 4 : 3, uids, ptrs,
            what, &err)) {
      /* an engine that finalized but does not execute: this shape takes
       * im2col from now on (the plan stays: graphs may hold it) */
      plan->usable = FALSE;
      refuse (&key, err);
      if (cat)
        lb_cuda_scratch_release (s, cat);
      count (&n_im2col);
      return TRUE;
    }
  }
  if (ok && bias && !plan->fused) {
    const int64_t plane = key.out[0] * g->ho * g->wo;
    ok = lb_cuda_check (lb_cuda_launch_add_channel_bias (cs->stream, y,
            key.n, g->cout, plane, bias), what, error);
  }
  if (cat)
    lb_cuda_scratch_release (s, cat);
  if (ok) {
    count (&n_cudnn);
    *done = TRUE;
  }
  return ok;
}

/**
 * lingbot_backend_cuda_conv_stats:
 * @cudnn_calls: (out) (optional): convolution calls run through cuDNN
 * @im2col_calls: (out) (optional): calls that took the im2col path
 *   (selected, Cin = 0, unaligned operands or a refused shape)
 * @plans: (out) (optional): cuDNN plans built
 * @refused: (out) (optional): shapes cuDNN refused (negative entries)
 *
 * Process-wide counters of the CUDA convolution paths (all devices and
 * streams), for tests and benchmarks; resolve with g_module_symbol().
 */
void
lingbot_backend_cuda_conv_stats (guint64 * cudnn_calls,
    guint64 * im2col_calls, guint64 * plans, guint64 * refused)
{
  if (cudnn_calls)
    *cudnn_calls = (guint64) g_atomic_pointer_get (&n_cudnn);
  if (im2col_calls)
    *im2col_calls = (guint64) g_atomic_pointer_get (&n_im2col);
  if (plans)
    *plans = (guint64) g_atomic_pointer_get (&n_plans);
  if (refused)
    *refused = (guint64) g_atomic_pointer_get (&n_refused);
}

/**
 * lingbot_backend_cuda_conv_last_refusal:
 *
 * The message of the last shape cuDNN refused: the op, the shape, the
 * math mode and cuDNN's reason (what the g_debug line said).
 *
 * Returns: (transfer full) (nullable): a copy, %NULL when none was refused.
 */
char *
lingbot_backend_cuda_conv_last_refusal (void)
{
  g_mutex_lock (&refusal_lock);
  char *m = g_strdup (last_refusal);
  g_mutex_unlock (&refusal_lock);
  return m;
}

G_MODULE_EXPORT gboolean lingbot_backend_cuda_conv_check (gboolean is_2d,
    const LbTensor * x, const LbTensor * cache, const LbTensor * weight,
    const LbTensor * bias, int pad_h, int pad_w, int stride_h, int stride_w,
    const LbTensor * y, LbMathMode math, gboolean * fused,
    gboolean * zeros_in_cat, GError ** error);

/**
 * lingbot_backend_cuda_conv_check:
 * @is_2d: %TRUE for conv2d (then @cache is ignored), %FALSE for
 *   conv3d_causal
 * @x: the op's x (only shape, dtype and strides are read)
 * @cache: (nullable): conv3d_causal's cache (likewise)
 * @weight: the weight (likewise)
 * @bias: (nullable): the bias (likewise)
 * @pad_h: as the op
 * @pad_w: as the op
 * @stride_h: as the op
 * @stride_w: as the op
 * @y: the output (likewise)
 * @math: the stream math the plan is for (f32-exact engines for
 *   %LB_MATH_FP32)
 * @fused: (out) (optional): %TRUE when the bias is fused into the graph
 * @zeros_in_cat: (out) (optional): %TRUE when only the fallback without
 *   asymmetric temporal padding is taken (the zero frames are then written
 *   into the concatenated input)
 * @error: the op's argument errors, %LB_ERROR_UNSUPPORTED when no engine
 *   of the target takes the graph, %LB_ERROR_INVALID_ARGUMENT without a
 *   target
 *
 * The deviceless check of lb_cuda_cudnn_conv(): the same key and graphs
 * (fused bias first, then conv alone; asymmetric temporal padding, then
 * zero frames in the input), planned for the GPU set with
 * lingbot_backend_cuda_cudnn_set_target().  For tests on machines without
 * a GPU.
 *
 * Returns: %TRUE when an engine takes the convolution.
 */
gboolean
lingbot_backend_cuda_conv_check (gboolean is_2d, const LbTensor * x,
    const LbTensor * cache, const LbTensor * weight, const LbTensor * bias,
    int pad_h, int pad_w, int stride_h, int stride_w, const LbTensor * y,
    LbMathMode math, gboolean * fused, gboolean * zeros_in_cat,
    GError ** error)
{
  LbConvGeom g;
  ConvKey key;
  LbCudnnPlan plan = { 0 };
  gboolean ok, f = FALSE, zc = FALSE;
  if (!(is_2d ? lb_check_conv2d (x, weight, bias, pad_h, pad_w, stride_h,
              stride_w, y, &g, error) :
          lb_check_conv3d_causal (x, cache, weight, bias, pad_h, pad_w,
              stride_h, stride_w, y, &g, error)))
    return FALSE;
  conv_key (&g, is_2d, bias != NULL, pad_h, pad_w, stride_h, stride_w, math,
      &key);
  for (int attempt = 0; attempt < 2; attempt++) {
    g_autoptr (GError) err = NULL;
    ok = FALSE;
    if (key.bias) {
      f = ok = build_plan (NULL, &key, TRUE, &plan, &err);
      lb_cudnn_plan_clear (&plan);
      g_clear_error (&err);
    }
    if (!ok) {
      ok = build_plan (NULL, &key, FALSE, &plan, &err);
      lb_cudnn_plan_clear (&plan);
    }
    if (ok || is_2d || g.zeros == 0 || attempt == 1) {
      if (!ok)
        g_propagate_error (error, g_steal_pointer (&err));
      break;
    }
    /* as lb_cuda_cudnn_conv(): the zero frames into the input instead */
    key.in[0] += g.zeros;
    key.pre[0] = 0;
    zc = TRUE;
  }
  if (fused)
    *fused = ok && f;
  if (zeros_in_cat)
    *zeros_in_cat = ok && zc;
  return ok;
}

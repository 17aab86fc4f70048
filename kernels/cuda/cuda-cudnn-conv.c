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
 * Channels-last bf16 (LINGBOT_CUDA_CONV_LAYOUT=ndhwc, bf16 and fp8 streams
 * only; the default ncdhw keeps the path above): the graph takes x and w
 * as NDHWC / KTRSC bfloat16 tensors, computes in f32 and writes y as an
 * NDHWC f32 tensor.  The ops' tensors stay NCDHW f32, so the layout and
 * dtype change at the op's edges: cat(zeros, cache, x) is transposed and
 * rounded into pool scratch by one tiled kernel per source (which is also
 * the concatenation), the weight is transposed and rounded once per
 * allocation (see weight_krsc()), and y is transposed back into the op's
 * output by the same kernel, which adds the bias on the way (no fused
 * bias graph on this path).  A shape no engine runs channels-last takes
 * the NCDHW f32 graph, then im2col.  Never run on a GPU yet: measured by
 * tests/gpu/run.sh (docs/design/cuda.md "Channels-last bf16").
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
#define MAX_WEIGHTS 1024

G_MODULE_EXPORT void lingbot_backend_cuda_conv_stats (guint64 * cudnn_calls,
    guint64 * im2col_calls, guint64 * plans, guint64 * refused);
G_MODULE_EXPORT char *lingbot_backend_cuda_conv_last_refusal (void);
G_MODULE_EXPORT void lingbot_backend_cuda_conv_layout_stats (guint64 *
    ndhwc_calls, guint64 * weight_conversions);
G_MODULE_EXPORT void lingbot_backend_cuda_conv_input_stats (guint64 *
    in_place, guint64 * concatenated, guint64 * widened);
G_MODULE_EXPORT gboolean lingbot_backend_conv_input_bf16 (LbStream * s);

/* ConvKey.layout */
enum
{
  LAYOUT_NCDHW = 0,             /* f32 x, w, y, packed NCDHW / KCTRS */
  LAYOUT_NDHWC = 1,             /* bf16 x, w (NDHWC / KTRSC), f32 y NDHWC */
};

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
  int64_t layout;               /* LAYOUT_* */
} ConvKey;

/* memcmp/hash of the whole key: no implicit padding may exist */
G_STATIC_ASSERT (sizeof (ConvKey) == 25 * sizeof (int64_t));

typedef struct
{
  ConvKey key;
  gboolean usable;              /* FALSE: a negative entry (use im2col) */
  gboolean fused;               /* the plan adds the bias */
  LbCudnnPlan plan;
} ConvPlan;

/* A weight pointer and its extents: the key of a bf16 KTRSC copy. */
typedef struct
{
  const float *w;
  int64_t cout, cin, taps;
} WeightKey;

G_STATIC_ASSERT (sizeof (WeightKey) == 4 * sizeof (int64_t));

typedef struct
{
  WeightKey key;
  uint16_t *krsc;               /* pool memory, [cout, taps, cin] bf16 */
  void *base;                   /* the pool block holding key.w ... */
  guint64 serial;               /* ... and which allocation of it */
  int device;
} WeightCopy;

/* process-wide counters (lingbot_backend_cuda_conv_stats,
 * lingbot_backend_cuda_conv_layout_stats) */
static gsize n_cudnn, n_im2col, n_plans, n_refused, n_ndhwc, n_wconv;
static gsize n_in16, n_in_place, n_widened;     /* bf16 channels-last x */
static GMutex refusal_lock;
static char *last_refusal;

LB_CUDA_KEY_FUNCS (key, ConvKey);
LB_CUDA_KEY_FUNCS (wkey, WeightKey);

static void
weight_free (gpointer p)
{
  WeightCopy *c = p;
  lb_cuda_pool_free (c->device, c->krsc);
  g_free (c);
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

/* Channels-last strides of @nd @dims [N, C, spatial...]: C innermost,
 * then the spatial dims from the last, then N. */
static void
channels_last_strides (int nd, const int64_t * dims, int64_t * strides)
{
  int64_t s = dims[1];
  strides[1] = 1;
  for (int i = nd - 1; i >= 2; i--) {
    strides[i] = s;
    s *= dims[i];
  }
  strides[0] = s;
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

/* Builds the plan of @key: conv (-> + bias when @fuse_bias).  Every
 * descriptor made here is destroyed before returning (the plan keeps what
 * it needs). */
static gboolean
build_plan (LbStream * s, const ConvKey * key, gboolean fuse_bias,
    LbCudnnPlan * out, GError ** error)
{
  const char *what = key->nsd == 3 ? "conv3d_causal (cuDNN)" : "conv2d (cuDNN)";
  enum
  { T_X, T_W, T_Y, T_CONV, T_B, OP_CONV, OP_PW, N_DESC };
  cudnnBackendDescriptor_t d[N_DESC] = { NULL };
  int64_t xd[5], xs[5], wd[5], ws[5], yd[5], ys[5], bd[5], bs[5];
  const int64_t ones[3] = { 1, 1, 1 };
  const int nsd = (int) key->nsd, sp0 = 3 - nsd;
  int nd = tensor_dims (key, key->n, key->cin, key->in, xd);
  tensor_dims (key, key->cout, key->cin, key->k, wd);
  tensor_dims (key, key->n, key->cout, key->out, yd);
  tensor_dims (key, 1, key->cout, ones, bd);
  const gboolean cl = key->layout == LAYOUT_NDHWC;
  (cl ? channels_last_strides : lb_contiguous_strides) (nd, xd, xs);
  (cl ? channels_last_strides : lb_contiguous_strides) (nd, wd, ws);
  (cl ? channels_last_strides : lb_contiguous_strides) (nd, yd, ys);
  lb_contiguous_strides (nd, bd, bs);

  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  /* x and w: bf16 channels-last, or f32 as y */
  const cudnnDataType_t xw = cl ? CUDNN_DATA_BFLOAT16 : f32;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t nsd64 = key->nsd;
  /* float alpha/beta, as cuDNN's frontend sets them for f32 graphs */
  const float alpha = 1.0f, beta = 0.0f;
  gboolean ok =
      (d[T_X] = lb_cudnn_tensor (UID_X, xw, nd, xd, xs, FALSE, FALSE, what,
          error)) != NULL &&
      (d[T_W] = lb_cudnn_tensor (UID_W, xw, nd, wd, ws, FALSE, FALSE, what,
          error)) != NULL &&
      (d[T_Y] = lb_cudnn_tensor (UID_Y, f32, nd, yd, ys, FALSE, FALSE, what,
          error)) != NULL &&
      (!fuse_bias ||
      ((d[T_CONV] = lb_cudnn_tensor (UID_CONV, f32, nd, yd, ys, TRUE, FALSE,
                  what, error)) != NULL &&
          (d[T_B] = lb_cudnn_tensor (UID_B, f32, nd, bd, bs, FALSE, FALSE,
                  what, error)) != NULL));
  const LbCudnnAttr ca[] = {
    {CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32},
    {CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode},
    {CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nsd64},
    {CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, nsd,
        key->pre + sp0},
    {CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, nsd,
        key->post + sp0},
    {CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, nsd, ones},
    {CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, nsd,
        key->stride + sp0},
  };
  const LbCudnnAttr oa[] = {
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d[T_X]},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d[T_W]},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, fuse_bias ? &d[T_CONV] : &d[T_Y]},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1,
        &alpha},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1,
        &beta},
  };
  ok = ok && (d[OP_CONV] =
      lb_cudnn_build_op (CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, ca,
          G_N_ELEMENTS (ca),
          CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, oa,
          G_N_ELEMENTS (oa), what, error)) != NULL;
  if (ok && fuse_bias)
    ok = (d[OP_PW] = lb_cudnn_op_pointwise (CUDNN_POINTWISE_ADD, d[T_CONV],
            d[T_B], d[T_Y], what, error)) != NULL;
  if (ok) {
    cudnnBackendDescriptor_t ops[2] = { d[OP_CONV], d[OP_PW] };
    ok = lb_cudnn_plan_build (s, ops, fuse_bias ? 2 : 1,
        key->math != LB_MATH_FP32, out, what, error);
  }
  lb_cudnn_destroy_all (d, N_DESC);
  return ok;
}

static void
refuse (const ConvKey * key, const GError * err)
{
  g_autofree char *msg = g_strdup_printf ("%s N=%" G_GINT64_FORMAT " Cin=%"
      G_GINT64_FORMAT " Cout=%" G_GINT64_FORMAT " in %" G_GINT64_FORMAT "x%"
      G_GINT64_FORMAT "x%" G_GINT64_FORMAT " k %" G_GINT64_FORMAT "x%"
      G_GINT64_FORMAT "x%" G_GINT64_FORMAT " %s%s%s: %s",
      key->nsd == 3 ? "conv3d_causal" : "conv2d", key->n, key->cin, key->cout,
      key->in[0], key->in[1], key->in[2], key->k[0], key->k[1], key->k[2],
      key->math != LB_MATH_FP32 ? "bf16" : "fp32",
      key->layout == LAYOUT_NDHWC ? " ndhwc" : "", key->bias ? " bias" : "",
      err ? err->message : "?");
  g_debug ("cuDNN conv refused, using %s: %s",
      key->layout == LAYOUT_NDHWC ? "the NCDHW graph" : "im2col", msg);
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

/* TRUE when the environment variable @name is @other; unset, empty, @dflt
 * or any other value (said once, through *@warned) is %FALSE. */
static gboolean
env_selects (const char *name, const char *dflt, const char *other,
    gsize * warned)
{
  const char *v = g_getenv (name);
  if (v == NULL || *v == '\0' || g_str_equal (v, dflt))
    return FALSE;
  if (g_str_equal (v, other))
    return TRUE;
  if (g_once_init_enter (warned)) {
    g_message ("%s=%s is not %s or %s: using %s", name, v, dflt, other, dflt);
    g_once_init_leave (warned, 1);
  }
  return FALSE;
}

/* TRUE unless LINGBOT_CUDA_CONV selects im2col. */
static gboolean
cudnn_selected (void)
{
  static gsize warned;
  return !env_selects ("LINGBOT_CUDA_CONV", "cudnn", "im2col", &warned);
}

/* The key of one call (the deviceless check builds the same). */
static void
conv_key (const LbConvGeom * g, gboolean is_2d, gboolean bias, int pad_h,
    int pad_w, int stride_h, int stride_w, LbMathMode math,
    gboolean channels_last, ConvKey * key)
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
  /* channels-last: the bias is added by the kernel that writes y */
  key->bias = bias && !channels_last;
  /* fp8 runs the convolutions as bf16 does: one plan for both */
  key->math = math == LB_MATH_FP32 ? LB_MATH_FP32 : LB_MATH_BF16;
  key->layout = channels_last ? LAYOUT_NDHWC : LAYOUT_NCDHW;
  if (is_2d) {
    key->nsd = 2;
    key->n = g->t;              /* batch */
    key->in[0] = key->k[0] = key->out[0] = 1;
  } else {
    key->nsd = 3;
    key->n = 1;
    key->in[0] = g->tc + g->t;  /* cat(cache, x) */
    key->k[0] = g->kt;
    key->pre[0] = g->zeros;     /* causal zero frames */
    key->post[0] = 0;
    key->out[0] = g->tout;
  }
}

/* TRUE when LINGBOT_CUDA_CONV_LAYOUT selects the channels-last bf16
 * graphs (ndhwc; default and any other value: ncdhw). */
static gboolean
channels_last_selected (void)
{
  static gsize warned;
  return env_selects ("LINGBOT_CUDA_CONV_LAYOUT", "ncdhw", "ndhwc", &warned);
}

/* The stream's plan for the call's @key, asymmetric temporal padding
 * first, then (conv3d_causal with zero frames, refused) the Z zero frames
 * in the input: *@zf of them, with @key changed to match.  %NULL or an
 * unusable plan: this path does not take the call. */
static ConvPlan *
plan_for_call (LbStream * s, const LbConvGeom * g, gboolean is_2d,
    ConvKey * key, int64_t * zf)
{
  ConvPlan *plan = plan_for (s, key);
  *zf = 0;
  if (plan && !plan->usable && !is_2d && g->zeros > 0) {
    /* no engine for the asymmetric temporal padding: the zero frames
     * become frames of cat(zeros, cache, x), padding 0 / 0 */
    *zf = g->zeros;
    key->in[0] += *zf;
    key->pre[0] = 0;
    plan = plan_for (s, key);
  }
  return plan;
}

/* Executes @plan on (x, w, y[, bias]); an engine that finalized but does
 * not execute makes the plan unusable (refused, *@ran FALSE: the caller
 * takes the next path; the plan stays, graphs may hold it). */
static void
execute (LbStream * s, ConvPlan * plan, const void *x, const void *w,
    void *y, const float *bias, const char *what, gboolean * ran)
{
  const int64_t uids[4] = { UID_X, UID_W, UID_Y, UID_B };
  void *const ptrs[4] = { (void *) x, (void *) w, y, (void *) bias };
  g_autoptr (GError) err = NULL;
  *ran = lb_cudnn_execute (s, &plan->plan, plan->fused ? 4 : 3, uids, ptrs,
      what, &err);
  if (!*ran) {
    plan->usable = FALSE;
    refuse (&plan->key, err);
  }
}

/* The bf16 [cout, taps, cin] (KTRSC) copy of the f32 weight @w [cout,
 * cin, taps]: made once per allocation and kept in the stream's
 * conv_weights (pool memory, freed with the stream), so a steady decode
 * converts nothing.  A copy is looked up by pointer and extents and
 * trusted only while the pool allocation holding @w is the one it was
 * made from (lb_cuda_pool_same()): freeing the weights, even if the next
 * allocation lands on the same address, makes the next call convert
 * again.  The contract this relies on: a weight is not rewritten while
 * its allocation lives (the VAE's are uploaded once).  Memory the pool
 * does not know, a table past MAX_WEIGHTS and a capture convert into
 * scratch for the call (*@scratch set: the caller releases it). */
static const uint16_t *
weight_krsc (LbStream * s, const float *w, int64_t cout, int64_t cin,
    int64_t taps, uint16_t ** scratch, GError ** error)
{
  LbCudaStream *cs = s->priv;
  const WeightKey k = { w, cout, cin, taps };
  const gsize n = (gsize) (cout * cin * taps);
  *scratch = NULL;
  if (cs->conv_weights == NULL)
    cs->conv_weights = g_hash_table_new_full (wkey_hash, wkey_equal, NULL,
        weight_free);
  WeightCopy *c = g_hash_table_lookup (cs->conv_weights, &k);
  if (c && lb_cuda_pool_same (cs->device, c->base, c->serial))
    return c->krsc;
  if (c)                        /* the weights were freed since */
    g_hash_table_remove (cs->conv_weights, &k);
  void *base = NULL;
  guint64 serial = 0;
  const gboolean keep = !cs->capturing &&
      g_hash_table_size (cs->conv_weights) < MAX_WEIGHTS &&
      lb_cuda_pool_find (cs->device, w, n * sizeof (float), &base, &serial);
  uint16_t *dst = keep ?
      lb_cuda_pool_alloc (cs->device, n * sizeof (uint16_t), error) :
      lb_cuda_scratch (s, n * sizeof (uint16_t), error);
  if (dst == NULL)
    return NULL;
  if (!lb_cuda_check (lb_cuda_launch_transpose_convert (cs->stream, w, 0,
              cin * taps, taps, dst, 1, taps * cin, cin, cout, cin, taps,
              NULL), "conv weight to bf16 KTRSC", error)) {
    if (keep)
      lb_cuda_pool_free (cs->device, dst);
    else
      lb_cuda_scratch_release (s, dst);
    return NULL;
  }
  count (&n_wconv);
  if (!keep) {
    *scratch = dst;
    return dst;
  }
  c = g_new0 (WeightCopy, 1);
  c->key = k;
  c->krsc = dst;
  c->base = base;
  c->serial = serial;
  c->device = cs->device;
  g_hash_table_insert (cs->conv_weights, &c->key, c);
  return dst;
}

/* The channels-last bf16 path (file comment): *@done FALSE when it does
 * not take the call (no plan for the shape, or it failed to execute).
 * @x and @cache are NCDHW f32, converted here, or with @in16 the op's
 * bf16 channels-last operands (conv3d_causal only), used in place when
 * the cache ends where x starts and no zero frame is written, else
 * concatenated by plain copies (also when it is not 16-byte aligned). */
static gboolean
conv_ndhwc (LbStream * s, const LbConvGeom * g, gboolean is_2d,
    gboolean in16, const void *x, const void *cache, const float *w,
    const float *bias, int pad_h, int pad_w, int stride_h, int stride_w,
    float *y, gboolean * done, GError ** error)
{
  LbCudaStream *cs = s->priv;
  const char *what = is_2d ? "conv2d (cuDNN, NDHWC bf16)" :
      "conv3d_causal (cuDNN, NDHWC bf16)";
  ConvKey key;
  int64_t zf;
  conv_key (g, is_2d, bias != NULL, pad_h, pad_w, stride_h, stride_w,
      s->math, TRUE, &key);
  ConvPlan *plan = plan_for_call (s, g, is_2d, &key, &zf);
  if (plan == NULL || !plan->usable)
    return TRUE;

  const int64_t hw = g->h * g->w, hwo = g->ho * g->wo, cin = g->cin;
  const int64_t frames = key.n * key.in[0];     /* of the cat, or batch */
  const int64_t out_frames = key.n * key.out[0];
  uint16_t *wscratch = NULL;
  const uint16_t *wk = weight_krsc (s, w, g->cout, cin,
      key.k[0] * key.k[1] * key.k[2], &wscratch, error);
  if (wk == NULL)
    return FALSE;
  const gsize fbytes = (gsize) (hw * cin) * sizeof (uint16_t);
  /* bf16 operands in place: x alone, or a cache that ends where x starts */
  const uint16_t *xin = NULL;
  if (in16 && zf == 0 && (g->tc == 0 || (const uint16_t *) cache +
          g->tc * hw * cin == (const uint16_t *) x))
    xin = g->tc > 0 ? cache : x;
  /* the plan's tensors declare 16-byte alignment: an operand off it (a
   * view at an odd offset) is copied into pool scratch (256-byte aligned)
   * like a concatenation */
  if (xin && !aligned16 (xin))
    xin = NULL;
  uint16_t *xb = xin ? NULL : lb_cuda_scratch (s, frames * fbytes, error);
  float *yb = xin || xb ? lb_cuda_scratch (s, (gsize) (out_frames * hwo *
          g->cout) * sizeof (float), error) : NULL;
  gboolean ok = yb != NULL, ran = FALSE;
  /* x: frame f of cat(zf zeros, cache, x) -> xb[f] [hw, cin]; conv2d:
   * batch item b -> xb[b] */
  if (ok && xb && zf > 0)
    ok = lb_cuda_check (cudaMemsetAsync (xb, 0, zf * fbytes, cs->stream),
        what, error);
  if (ok && xb && in16) {
    /* NDHWC bf16 sources: each is one run of whole frames */
    if (g->tc > 0)
      ok = lb_cuda_check (cudaMemcpyAsync (xb + zf * hw * cin, cache,
              g->tc * fbytes, cudaMemcpyDeviceToDevice, cs->stream), what,
          error);
    ok = ok && lb_cuda_check (cudaMemcpyAsync (xb + (zf + g->tc) * hw * cin,
            x, g->t * fbytes, cudaMemcpyDeviceToDevice, cs->stream), what,
        error);
  } else if (ok && xb) {
    if (!is_2d && g->tc > 0)
      ok = lb_cuda_check (lb_cuda_launch_transpose_convert (cs->stream,
              cache, 0, hw, g->tc * hw, xb + zf * hw * cin, 1, hw * cin, cin,
              g->tc, cin, hw, NULL), what, error);
    if (ok)
      ok = lb_cuda_check (is_2d ?
          lb_cuda_launch_transpose_convert (cs->stream, x, 0, cin * hw, hw,
              xb, 1, hw * cin, cin, key.n, cin, hw, NULL) :
          lb_cuda_launch_transpose_convert (cs->stream, x, 0, hw, g->t * hw,
              xb + (zf + g->tc) * hw * cin, 1, hw * cin, cin, g->t, cin, hw,
              NULL), what, error);
  }
  if (ok)
    execute (s, plan, xin ? xin : xb, wk, yb, NULL, what, &ran);
  /* y: yb[f] [hwo, cout] (+ bias) -> frame f of y [cout, tout, hwo], or
   * batch item b of y [n, cout, hwo] */
  if (ok && ran)
    ok = lb_cuda_check (lb_cuda_launch_transpose_convert (cs->stream, yb, 0,
            hwo * g->cout, g->cout, y, 0, is_2d ? g->cout * hwo : hwo,
            is_2d ? hwo : g->tout * hwo, out_frames, hwo, g->cout, bias),
        what, error);
  if (yb)
    lb_cuda_scratch_release (s, yb);
  if (xb)
    lb_cuda_scratch_release (s, xb);
  if (wscratch)
    lb_cuda_scratch_release (s, wscratch);
  if (ok && ran) {
    count (&n_cudnn);
    count (&n_ndhwc);
    if (in16)
      count (xin ? &n_in_place : &n_in16);
    *done = TRUE;
  }
  return ok;
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
 * one (also with LINGBOT_CUDA_CONV_LAYOUT=ndhwc, which tries the
 * channels-last bf16 graphs first on such a stream).  Asynchronous on @s;
 * takes pool scratch for cat(cache, x) (or the channels-last copies) and
 * the cuDNN workspace.
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
  if (!cudnn_selected () || g->cin == 0) {
    count (&n_im2col);
    return TRUE;
  }
  cudaSetDevice (s->device);
  if (s->math != LB_MATH_FP32 && channels_last_selected ()) {
    /* its operands are copies: no alignment asked of x, cache, w, y */
    gboolean ok = conv_ndhwc (s, g, is_2d, FALSE, x, cache, w, bias, pad_h,
        pad_w, stride_h, stride_w, y, done, error);
    if (!ok || *done)
      return ok;
  }
  const gboolean with_cache = !is_2d && g->tc > 0;
  if (!aligned16 (w) || !aligned16 (y) || (bias && !aligned16 (bias)) ||
      (!with_cache && !aligned16 (x))) {
    count (&n_im2col);
    return TRUE;
  }

  ConvKey key;
  int64_t zf;                   /* zero frames written into the cat */
  conv_key (g, is_2d, bias != NULL, pad_h, pad_w, stride_h, stride_w,
      s->math, FALSE, &key);
  ConvPlan *plan = plan_for_call (s, g, is_2d, &key, &zf);
  if (plan == NULL || !plan->usable) {
    count (&n_im2col);
    return TRUE;
  }

  const char *what = is_2d ? "conv2d (cuDNN)" : "conv3d_causal (cuDNN)";
  const float *xin = x;
  float *cat = NULL;
  gboolean ok = TRUE, ran = FALSE;
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
    execute (s, plan, xin, w, y, bias, what, &ran);
    if (!ran) {
      /* this shape takes im2col from now on */
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
 * lb_cuda_cudnn_conv_in16:
 * @s: a CUDA stream
 * @g: the checked geometry of a conv3d_causal call whose x (and cache)
 *   are bf16 channels-last (lb_check_conv3d_causal())
 * @x: device bf16 bits, x [Cin, T, H, W] as NDHWC
 * @cache: (nullable): device bf16 bits, the cache [Cin, Tc, H, W] as NDHWC
 * @w: device f32 weight [Cout, Cin, kt, kh, kw]
 * @bias: (nullable): device f32 [Cout]
 * @pad_h: rows of zeros above and below
 * @pad_w: columns of zeros left and right
 * @stride_h: vertical stride
 * @stride_w: horizontal stride
 * @y: device f32 output [Cout, T', H', W'] (contiguous)
 * @done: (out): %TRUE when the convolution was enqueued here; %FALSE when
 *   the caller must widen the inputs and take the f32 paths
 *   (LINGBOT_CUDA_CONV=im2col, Cin = 0, a shape no engine runs
 *   channels-last, a new shape during a capture)
 * @error: %LB_ERROR_DEVICE when a launch or cudnnBackendExecute fails
 *
 * The channels-last graph of lb_cuda_cudnn_conv() on the op's own bf16
 * operands, on a stream of any #LbMathMode (bf16 values multiply exactly;
 * the key's math picks the engines): no input conversion, and with a
 * cache that ends where x starts (the VAE's padded buffer, docs/design/
 * cuda.md "Channels-last conv inputs") no copy at all; y is transposed
 * into the op's NCDHW f32 output with the bias, as on that path.
 *
 * Returns: %FALSE on error.
 */
gboolean
lb_cuda_cudnn_conv_in16 (LbStream * s, const LbConvGeom * g,
    const uint16_t * x, const uint16_t * cache, const float *w,
    const float *bias, int pad_h, int pad_w, int stride_h, int stride_w,
    float *y, gboolean * done, GError ** error)
{
  *done = FALSE;
  if (g->cout == 0 || g->tout == 0 || g->ho == 0 || g->wo == 0) {
    *done = TRUE;               /* nothing to write */
    return TRUE;
  }
  if (!cudnn_selected () || g->cin == 0)
    return TRUE;
  cudaSetDevice (s->device);
  return conv_ndhwc (s, g, FALSE, TRUE, x, g->tc > 0 ? cache : NULL, w, bias,
      pad_h, pad_w, stride_h, stride_w, y, done, error);
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

/**
 * lingbot_backend_cuda_conv_layout_stats:
 * @ndhwc_calls: (out) (optional): convolution calls run through the
 *   channels-last bf16 graphs (LINGBOT_CUDA_CONV_LAYOUT=ndhwc; also
 *   counted as cuDNN calls by lingbot_backend_cuda_conv_stats())
 * @weight_conversions: (out) (optional): weights converted to bf16
 *   KTRSC (once per weight allocation and stream when they are kept)
 *
 * Process-wide counters of the channels-last path, for tests and
 * benchmarks; resolve with g_module_symbol().
 */
void
lingbot_backend_cuda_conv_layout_stats (guint64 * ndhwc_calls,
    guint64 * weight_conversions)
{
  if (ndhwc_calls)
    *ndhwc_calls = (guint64) g_atomic_pointer_get (&n_ndhwc);
  if (weight_conversions)
    *weight_conversions = (guint64) g_atomic_pointer_get (&n_wconv);
}

/**
 * lingbot_backend_cuda_conv_input_stats:
 * @in_place: (out) (optional): conv3d_causal calls on bf16 channels-last
 *   inputs that the graph read in place (x alone, or a cache adjacent to
 *   it)
 * @concatenated: (out) (optional): such calls whose cat(zeros, cache, x)
 *   was copied into scratch first
 * @widened: (out) (optional): such calls no channels-last graph took,
 *   widened to NCDHW f32 for the other paths
 *
 * Process-wide counters of lb_cuda_cudnn_conv_in16() (also counted by
 * lingbot_backend_cuda_conv_layout_stats()), for tests and benchmarks;
 * resolve with g_module_symbol().
 */
void
lingbot_backend_cuda_conv_input_stats (guint64 * in_place,
    guint64 * concatenated, guint64 * widened)
{
  if (in_place)
    *in_place = (guint64) g_atomic_pointer_get (&n_in_place);
  if (concatenated)
    *concatenated = (guint64) g_atomic_pointer_get (&n_in16);
  if (widened)
    *widened = (guint64) g_atomic_pointer_get (&n_widened);
}

/**
 * lb_cuda_conv_count_widened:
 *
 * Counts one conv3d_causal call whose bf16 inputs cuda-ops.c widened for
 * the f32 paths (lingbot_backend_cuda_conv_input_stats()).
 */
void
lb_cuda_conv_count_widened (void)
{
  count (&n_widened);
}

/**
 * lingbot_backend_conv_input_bf16:
 * @s: a stream of this backend
 *
 * The backend extra a model asks (lb_backend_get_proc()) before laying
 * out its convolution inputs: %TRUE when conv3d_causal on @s takes bf16
 * channels-last x and cache without converting them, i.e. @s computes in
 * %LB_MATH_BF16 or %LB_MATH_FP8, LINGBOT_CUDA_CONV_LAYOUT=ndhwc and
 * LINGBOT_CUDA_CONV is not im2col.  The VAE decoder then writes its
 * padded conv inputs and their caches as bf16 NDHWC (docs/design/cuda.md
 * "Channels-last conv inputs").
 *
 * Returns: whether bf16 channels-last inputs are the fast path on @s.
 */
gboolean
lingbot_backend_conv_input_bf16 (LbStream * s)
{
  return s != NULL && s->math != LB_MATH_FP32 && cudnn_selected () &&
      channels_last_selected ();
}

G_MODULE_EXPORT gboolean lingbot_backend_cuda_conv_check (gboolean is_2d,
    const LbTensor * x, const LbTensor * cache, const LbTensor * weight,
    const LbTensor * bias, int pad_h, int pad_w, int stride_h, int stride_w,
    const LbTensor * y, LbMathMode math, gboolean channels_last,
    gboolean * fused, gboolean * zeros_in_cat, gboolean * tensor_core,
    GError ** error);

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
 * @channels_last: the graph of LINGBOT_CUDA_CONV_LAYOUT=ndhwc (bf16
 *   NDHWC x and w, f32 NDHWC y, the bias added outside the graph, so
 *   *@fused is %FALSE); only for a @math other than %LB_MATH_FP32
 * @fused: (out) (optional): %TRUE when the bias is fused into the graph
 * @zeros_in_cat: (out) (optional): %TRUE when only the fallback without
 *   asymmetric temporal padding is taken (the zero frames are then written
 *   into the concatenated input)
 * @tensor_core: (out) (optional): %TRUE when the engine that takes the
 *   graph notes tensor cores (CUDNN_NUMERICAL_NOTE_TENSOR_CORE)
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
    LbMathMode math, gboolean channels_last, gboolean * fused,
    gboolean * zeros_in_cat, gboolean * tensor_core, GError ** error)
{
  LbConvGeom g;
  ConvKey key;
  LbCudnnPlan plan = { 0 };
  gboolean ok, f = FALSE, zc = FALSE, tc = FALSE;
  if (!(is_2d ? lb_check_conv2d (x, weight, bias, pad_h, pad_w, stride_h,
              stride_w, y, &g, error) :
          lb_check_conv3d_causal (x, cache, weight, bias, pad_h, pad_w,
              stride_h, stride_w, y, &g, error)))
    return FALSE;
  if (channels_last && math == LB_MATH_FP32) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "conv check: the channels-last graphs are for bf16 streams only");
    return FALSE;
  }
  conv_key (&g, is_2d, bias != NULL, pad_h, pad_w, stride_h, stride_w, math,
      channels_last, &key);
  for (int attempt = 0; attempt < 2; attempt++) {
    g_autoptr (GError) err = NULL;
    ok = FALSE;
    if (key.bias) {
      f = ok = build_plan (NULL, &key, TRUE, &plan, &err);
      tc = plan.tensor_core;
      lb_cudnn_plan_clear (&plan);
      g_clear_error (&err);
    }
    if (!ok) {
      ok = build_plan (NULL, &key, FALSE, &plan, &err);
      tc = plan.tensor_core;
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
  if (tensor_core)
    *tensor_core = ok && tc;
  return ok;
}

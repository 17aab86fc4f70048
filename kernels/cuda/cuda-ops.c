/* lingbot-gst: the CUDA op table: argument checks and launches
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Every op checks that its tensors are on the stream's device
 * (cuda-check.c), then its arguments with the checks its CPU twin in
 * kernels/cpu/ uses (kernels/ops-check.h: same order, same messages), then
 * enqueues its kernels on the stream and returns; nothing here
 * synchronises.
 * A launch failure is an %LB_ERROR_DEVICE error.
 *
 * The convolutions run through cuDNN by default (cuda-cudnn-conv.c);
 * the im2col path here is the reference and the fallback: unfold (causal
 * cache resolved per element: no concatenated copy) into pool scratch of
 * at most LB_CUDA_SCRATCH_LIMIT floats per block of output rows and
 * multiply with one FP32 cuBLASLt GEMM per block (1x1 stride-1 convs
 * multiply the input frames directly), the scheme of kernels/cpu/conv.c.
 * Attention uses the fused flash kernel for head dims up to 128 and,
 * above (the VAE mid-block's 384), two GEMMs per (head, block of queries)
 * around an exact row softmax.
 */
#include "kernels/cuda/cuda-internal.h"

/* The stream, with its device made current on this thread (kernels launch
 * on the current device; cudaSetDevice to the current one is cheap). */
static inline cudaStream_t
stream_of (LbStream * s)
{
  cudaSetDevice (s->device);
  return ((LbCudaStream *) s->priv)->stream;
}

static gboolean
launched (cudaError_t e, const char *op, GError ** error)
{
  return lb_cuda_check (e, op, error);
}

/* ---- norms, modulation ---- */

static gboolean
cuda_layer_norm (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, float eps, LbTensor * y, GError ** error)
{
  LbRowsGeom g;
  if (!lb_cuda_check_devices (s, "layer_norm", error, "x", x, "weight",
          weight, "bias", bias, "y", y, NULL) ||
      !lb_check_layer_norm (x, weight, bias, y, &g, error))
    return FALSE;
  return launched (lb_cuda_launch_norm_modulate (stream_of (s), x->data,
          g.x_ld, weight ? weight->data : NULL, bias ? bias->data : NULL, eps,
          NULL, 0, NULL, 0, y->data, y->dtype == LB_DTYPE_BF16, g.y_ld, g.m,
          g.d), "layer_norm", error);
}

static gboolean
cuda_rms_norm (LbStream * s, const LbTensor * x, const LbTensor * weight,
    float eps, LbTensor * y, GError ** error)
{
  LbRowsGeom g;
  if (!lb_cuda_check_devices (s, "rms_norm", error, "x", x, "weight", weight,
          "y", y, NULL) || !lb_check_rms_norm (x, weight, y, &g, error))
    return FALSE;
  return launched (lb_cuda_launch_rms_norm (stream_of (s), x->data, g.x_ld,
          weight ? weight->data : NULL, eps, y->data, g.y_ld, g.m, g.d),
      "rms_norm", error);
}

static gboolean
cuda_modulate (LbStream * s, const LbTensor * x, const LbTensor * scale,
    const LbTensor * shift, LbTensor * y, GError ** error)
{
  LbRowsGeom g;
  if (!lb_cuda_check_devices (s, "modulate", error, "x", x, "scale", scale,
          "shift", shift, "y", y, NULL) ||
      !lb_check_modulate (x, scale, shift, y, &g, error))
    return FALSE;
  return launched (lb_cuda_launch_modulate (stream_of (s), x->data, g.x_ld,
          scale->data, g.s_ld, shift->data, g.h_ld, y->data, g.y_ld, g.m,
          g.d), "modulate", error);
}

static gboolean
cuda_gated_residual (LbStream * s, LbTensor * x, const LbTensor * y,
    const LbTensor * gate, GError ** error)
{
  LbRowsGeom g;
  if (!lb_cuda_check_devices (s, "gated_residual", error, "x", x, "y", y,
          "gate", gate, NULL) ||
      !lb_check_gated_residual (x, y, gate, &g, error))
    return FALSE;
  return launched (lb_cuda_launch_gated_residual (stream_of (s), x->data,
          g.x_ld, y->data, g.y_ld, gate ? gate->data : NULL, g.s_ld, g.m,
          g.d), "gated_residual", error);
}

/* ---- RoPE (kernels/cpu/rope.c) ---- */

static gboolean
cuda_rope_3d (LbStream * s, LbTensor * x, const LbTensor * cos,
    const LbTensor * sin, int64_t grid_f, int64_t grid_h, int64_t grid_w,
    int64_t frame_offset, int64_t row_offset, GError ** error)
{
  if (!lb_cuda_check_devices (s, "rope_3d", error, "x", x, "cos", cos, "sin",
          sin, NULL) ||
      !lb_check_rope_3d (x, cos, sin, grid_f, grid_h, grid_w, frame_offset,
          row_offset, error))
    return FALSE;
  int64_t n = x->shape[0], nh = x->shape[1], hd = x->shape[2];
  return launched (lb_cuda_launch_rope_3d (stream_of (s), x->data,
          x->stride[0], x->stride[1], n, nh, hd, cos->data, sin->data, grid_h,
          grid_w, frame_offset, row_offset), "rope_3d", error);
}

/* ---- attention (kernels/cpu/attention.c) ---- */

/* Widens head @h of a bf16 K or V [nk, nh, hd] (strides @s0, @s1) into
 * the contiguous f32 [nk, hd] @dst (exact). */
static gboolean
widen_head (LbStream * s, const uint16_t * src, int64_t s0, int64_t s1,
    int64_t h, int64_t nk, int64_t hd, float *dst, GError ** error)
{
  LbCudaStrided5 g = {
    .shape = {1, 1, 1, nk, hd},
    .ys = {0, 0, 0, hd, 1},
    .xs = {0, 0, 0, s0, 1},
    .cdim = 3,
  };
  return launched (lb_cuda_launch_copy_convert (stream_of (s), &g,
          src + h * s1, 1, dst, 0), "attention", error);
}

/* Head dims above the flash kernel's: per head and block of queries,
 * S = Q K^T (GEMM), exact softmax rows, O = P V (GEMM).  bf16 K/V (a bf16
 * KV cache) are widened exactly, a head at a time, into f32 scratch
 * [2, nk, hd] first. */
static gboolean
attention_gemm_path (LbStream * s, const LbCudaAttnArgs * a, GError ** error)
{
  cudaStream_t st = stream_of (s);
  if (a->nk == 0) {
    for (int64_t h = 0; h < a->nh; h++)
      if (!launched (lb_cuda_launch_fill_bias (st, a->out + h * a->os1,
                  a->os0, a->nq, a->hd, NULL), "attention", error))
        return FALSE;
    return TRUE;
  }
  /* bf16 k/v: one head of each widened to f32 first, inside the limit */
  const gsize kvw = a->k16 ? (gsize) (2 * a->nk * a->hd) : 0;
  const gsize room = LB_CUDA_SCRATCH_LIMIT > kvw ?
      LB_CUDA_SCRATCH_LIMIT - kvw : 0;
  int64_t qc = CLAMP ((int64_t) (room / (gsize) a->nk), 1, a->nq);
  float *sc = lb_cuda_scratch (s, ((gsize) qc * a->nk + kvw) * sizeof (float),
      error);
  if (sc == NULL)
    return FALSE;
  float *kw = sc + (gsize) qc * a->nk, *vw = kw + a->nk * a->hd;
  gboolean ok = TRUE;
  for (int64_t h = 0; ok && h < a->nh; h++) {
    const float *kh = a->k16 ? kw : a->k + h * a->ks1;
    const float *vh = a->k16 ? vw : a->v + h * a->vs1;
    const int64_t kld = a->k16 ? a->hd : a->ks0;
    const int64_t vld = a->k16 ? a->hd : a->vs0;
    if (a->k16 &&
        (!widen_head (s, a->k16, a->ks0, a->ks1, h, a->nk, a->hd, kw, error)
            || !widen_head (s, a->v16, a->vs0, a->vs1, h, a->nk, a->hd, vw,
                error)))
      ok = FALSE;
    for (int64_t q0 = 0; ok && q0 < a->nq; q0 += qc) {
      int64_t rows = MIN (qc, a->nq - q0);
      ok = lb_cuda_gemm_rm (s, FALSE, TRUE, rows, a->nk, a->hd, 1.0f,
          a->q + q0 * a->qs0 + h * a->qs1, a->qs0, kh, kld,
          NULL, 0.0f, sc, a->nk, error) &&
          launched (lb_cuda_launch_softmax_rows (st, sc, rows, a->nk,
              a->scale, a->bias ? a->bias + (h * a->nq + q0) * a->nk : NULL,
              a->mask), "attention", error) &&
          lb_cuda_gemm_rm (s, FALSE, FALSE, rows, a->hd, a->nk, 1.0f, sc,
          a->nk, vh, vld, NULL, 0.0f,
          a->out + q0 * a->os0 + h * a->os1, a->os0, error);
    }
  }
  lb_cuda_scratch_release (s, sc);
  return ok;
}

/* The GEMM path with a bf16 q or out (kernels/ops.h): q widened into f32
 * scratch [nq, nh, hd] first, the output computed into f32 scratch and
 * rounded into out after (not the served path: head dims above 128). */
static gboolean
attention_gemm_path_bf16_io (LbStream * s, const LbCudaAttnArgs * a,
    GError ** error)
{
  cudaStream_t st = stream_of (s);
  const int64_t ld1 = a->hd, ld0 = a->nh * a->hd;
  const gsize n = (gsize) (a->nq * ld0);
  float *qf = a->q16 ? lb_cuda_scratch (s, n * sizeof (float), error) : NULL;
  float *of = a->out16 && (a->q16 == NULL || qf != NULL) ?
      lb_cuda_scratch (s, n * sizeof (float), error) : NULL;
  gboolean ok = (a->q16 == NULL || qf != NULL) &&
      (a->out16 == NULL || of != NULL);
  LbCudaAttnArgs f = *a;
  if (ok && a->q16) {
    f.q = qf;
    f.qs0 = ld0;
    f.qs1 = ld1;
    f.q16 = NULL;
    ok = launched (lb_cuda_launch_bf16_to_f32_3d (st, a->q16, a->qs0, a->qs1,
            qf, ld0, ld1, a->nq, a->nh, a->hd), "attention", error);
  }
  if (ok && a->out16) {
    f.out = of;
    f.os0 = ld0;
    f.os1 = ld1;
    f.out16 = NULL;
  }
  ok = ok && attention_gemm_path (s, &f, error) && (a->out16 == NULL ||
      launched (lb_cuda_launch_f32_to_bf16_3d (st, of, ld0, ld1, a->out16,
              a->os0, a->os1, a->nq, a->nh, a->hd), "attention", error));
  if (qf)
    lb_cuda_scratch_release (s, qf);
  if (of)
    lb_cuda_scratch_release (s, of);
  return ok;
}

/* The kernels' view of an attention call's operands. */
static void
attention_args (LbCudaAttnArgs * a, const LbTensor * q, const LbTensor * k,
    const LbTensor * v, const LbTensor * bias, const LbTensor * key_mask,
    float scale, const LbTensor * out)
{
  *a = (LbCudaAttnArgs) { .q = q->data,.k = k->data,.v = v->data,.out = out->data, .qs0 = q->stride[0],.qs1 = q->stride[1], .ks0 = k->stride[0],.ks1 = k->stride[1], .vs0 = v->stride[0],.vs1 = v->stride[1], .os0 = out->stride[0],.os1 = out->stride[1], .bias = bias ? bias->data : NULL, .mask = key_mask ? key_mask->data : NULL, .nq = q->shape[0],.nk = k->shape[0],.nh = q->shape[1],.hd = q->shape[2], .scale = scale, /* a bf16 KV cache: the kernels read k16/v16 (k/v carry the same * addresses for cuda-cudnn-sdpa.c, which takes the dtype as a flag) */ .k16 = k->dtype == LB_DTYPE_BF16 ? k->data : NULL, .v16 = k->dtype == LB_DTYPE_BF16 ? v->data : NULL, /* a bf16 q or output: the same convention */ .q16 = q->dtype == LB_DTYPE_BF16 ? q->data : NULL, .out16 = out->dtype == LB_DTYPE_BF16 ? out->data : NULL, };
}

static gboolean
cuda_attention (LbStream * s, const LbTensor * q, const LbTensor * k,
    const LbTensor * v, const LbTensor * bias, const LbTensor * key_mask,
    float scale, LbTensor * out, GError ** error)
{
  if (!lb_cuda_check_devices (s, "attention", error, "q", q, "k", k, "v", v,
          "bias", bias, "key_mask", key_mask, "out", out, NULL) ||
      !lb_check_attention (q, k, v, bias, key_mask, out, error))
    return FALSE;
  int64_t nq = q->shape[0], nh = q->shape[1], hd = q->shape[2];
  if (nq == 0 || nh == 0 || hd == 0)
    return TRUE;

  LbCudaAttnArgs a;
  attention_args (&a, q, k, v, bias, key_mask, scale, out);
  /* LB_MATH_BF16: tensor cores for the DiT's (128) and umT5's (64) head
   * dims, through cuDNN's fused SDPA (unless LINGBOT_CUDA_ATTENTION=own)
   * takes the call (no bias or mask, a plan for the shape), else the own
   * kernel; any other head dim keeps its FP32 path */
  if (s->math != LB_MATH_FP32 && (hd == 64 || hd == 128)) {
    gboolean ran = FALSE;
    if (!lb_cuda_cudnn_attention (s, &a, k->dtype == LB_DTYPE_BF16, &ran,
            error))
      return FALSE;
    if (ran)
      return TRUE;
    return launched (lb_cuda_launch_flash_attention_bf16 (stream_of (s), &a),
        "attention", error);
  }
  if (hd <= LB_CUDA_FLASH_MAX_HD)
    return launched (lb_cuda_launch_flash_attention (stream_of (s), &a),
        "attention", error);
  if (a.q16 || a.out16)
    return attention_gemm_path_bf16_io (s, &a, error);
  return attention_gemm_path (s, &a, error);
}

/* LbBackend.attention_prepare: the path cuda_attention() would take for
 * these operands, its cuDNN plan built now (cuda-cudnn-sdpa.c), and the
 * scratch it takes: cuDNN's conversions, none for the flash kernels, the
 * GEMM path's score block and widened heads (and its f32 q and output
 * with bf16 ones) above the flash kernel's head dims. */
gboolean
lb_cuda_attention_prepare (LbStream * s, const LbTensor * q, const LbTensor * k,
    const LbTensor * v, const LbTensor * out, gsize * scratch,
    gsize * workspace, GError ** error)
{
  *scratch = 0;
  *workspace = 0;
  if (((LbCudaStream *) s->priv)->capturing) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE, "attention_prepare: "
        "device %d's stream is being captured", s->device);
    return FALSE;
  }
  if (!lb_cuda_check_devices (s, "attention", error, "q", q, "k", k, "v", v,
          "out", out, NULL) ||
      !lb_check_attention (q, k, v, NULL, NULL, out, error))
    return FALSE;
  const int64_t nq = q->shape[0], nh = q->shape[1], hd = q->shape[2];
  const int64_t nk = k->shape[0];
  if (nq == 0 || nh == 0 || hd == 0)
    return TRUE;
  LbCudaAttnArgs a;
  attention_args (&a, q, k, v, NULL, NULL, 1.0f, out);
  if (s->math != LB_MATH_FP32 && (hd == 64 || hd == 128)) {
    lb_cuda_cudnn_attention_prepare (s, &a, k->dtype == LB_DTYPE_BF16,
        scratch, workspace);
    return TRUE;
  }
  if (hd <= LB_CUDA_FLASH_MAX_HD || nk == 0)
    return TRUE;
  const gsize kvw = a.k16 ? (gsize) (2 * nk * hd) : 0;
  const gsize room = LB_CUDA_SCRATCH_LIMIT > kvw ?
      LB_CUDA_SCRATCH_LIMIT - kvw : 0;
  const int64_t qc = CLAMP ((int64_t) (room / (gsize) nk), 1, nq);
  *scratch = ((gsize) qc * nk + kvw) * sizeof (float);
  const gsize io = (gsize) (nq * nh * hd) * sizeof (float);
  if (a.q16)
    *scratch += (io + 255) & ~(gsize) 255;
  if (a.out16)
    *scratch += (io + 255) & ~(gsize) 255;
  return TRUE;
}

/* ---- elementwise (kernels/cpu/elementwise.c) ---- */

static gboolean
unary (LbStream * s, const char *op, LbCudaEwOp f, const LbTensor * x,
    LbTensor * y, float alpha, float beta, GError ** error)
{
  LbRowsGeom g;
  if (!lb_cuda_check_devices (s, op, error, "x", x, "y", y, NULL) ||
      !lb_check_unary (op, x, y, &g, error))
    return FALSE;
  if (y->dtype == LB_DTYPE_BF16)
    return launched (lb_cuda_launch_unary_bf16 (stream_of (s), f, x->data,
            g.x_ld, y->data, g.y_ld, g.m, g.d, alpha, beta), op, error);
  return launched (lb_cuda_launch_elementwise (stream_of (s), f, x->data,
          g.x_ld, NULL, 0, y->data, g.y_ld, g.m, g.d, alpha, beta), op, error);
}

static gboolean
binary (LbStream * s, const char *op, LbCudaEwOp f, const LbTensor * a,
    const LbTensor * b, LbTensor * y, GError ** error)
{
  LbRowsGeom g;
  if (!lb_cuda_check_devices (s, op, error, "a", a, "b", b, "y", y, NULL) ||
      !lb_check_binary (op, a, b, y, &g, error))
    return FALSE;
  return launched (lb_cuda_launch_elementwise (stream_of (s), f, a->data,
          g.x_ld, b->data, g.s_ld, y->data, g.y_ld, g.m, g.d, 0.0f, 0.0f), op,
      error);
}

static gboolean
cuda_gelu_tanh (LbStream * s, const LbTensor * x, LbTensor * y, GError ** error)
{
  return unary (s, "gelu_tanh", LB_CUDA_EW_GELU_TANH, x, y, 0, 0, error);
}

static gboolean
cuda_silu (LbStream * s, const LbTensor * x, LbTensor * y, GError ** error)
{
  return unary (s, "silu", LB_CUDA_EW_SILU, x, y, 0, 0, error);
}

static gboolean
cuda_scale (LbStream * s, const LbTensor * x, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  return unary (s, "scale", LB_CUDA_EW_SCALE, x, y, alpha, beta, error);
}

static gboolean
cuda_add (LbStream * s, const LbTensor * a, const LbTensor * b, LbTensor * y,
    GError ** error)
{
  return binary (s, "add", LB_CUDA_EW_ADD, a, b, y, error);
}

static gboolean
cuda_mul (LbStream * s, const LbTensor * a, const LbTensor * b, LbTensor * y,
    GError ** error)
{
  return binary (s, "mul", LB_CUDA_EW_MUL, a, b, y, error);
}

/* ---- convolutions (kernels/cpu/conv.c) ---- */

/* y rows: co*y_cs + t*y_fs + row*wo + col, for t < tout. */
static gboolean
conv_core (LbStream * s, const char *op, const LbConvIn * c,
    const float *w, const float *bias, int64_t cout, int64_t tout, float *y,
    int64_t y_cs, int64_t y_fs, GError ** error)
{
  cudaStream_t st = stream_of (s);
  const int64_t kdim = c->cin * c->kt * c->kh * c->kw;
  const int64_t plane = c->ho * c->wo;
  if (cout == 0 || plane == 0 || tout == 0)
    return TRUE;
  const gboolean direct = c->kt == 1 && c->kh == 1 && c->kw == 1 &&
      c->sh == 1 && c->sw == 1 && c->ph == 0 && c->pw == 0;
  int64_t nr = c->ho;
  float *col = NULL;
  if (!direct && kdim > 0) {
    gsize per_row = (gsize) kdim * (gsize) c->wo;
    nr = CLAMP ((int64_t) (LB_CUDA_SCRATCH_LIMIT / MAX (per_row, 1)), 1, c->ho);
    col = lb_cuda_scratch (s, per_row * nr * sizeof (float), error);
    if (col == NULL)
      return FALSE;
  }
  gboolean ok = TRUE;
  for (int64_t t = 0; ok && t < tout; t++) {
    for (int64_t r0 = 0; ok && r0 < c->ho; r0 += nr) {
      const int64_t rows = MIN (nr, c->ho - r0), ncols = rows * c->wo;
      float *yb = y + t * y_fs + r0 * c->wo;
      const float *bmat = NULL;
      int64_t ldb = 0;
      if (direct && kdim > 0) {
        /* frame t of cat(zeros, cache, x); zeros == 0 when kt == 1 */
        if (t < c->zeros) {
          bmat = NULL;
        } else if (t < c->zeros + c->cache_t) {
          bmat = c->cache + (t - c->zeros) * c->h * c->w + r0 * c->wo;
          ldb = c->cache_cs;
        } else {
          bmat = c->x + (t - c->zeros - c->cache_t) * c->x_fs + r0 * c->wo;
          ldb = c->x_cs;
        }
      } else if (kdim > 0) {
        ok = launched (lb_cuda_launch_im2col (st, c, t, r0, rows, col), op,
            error);
        bmat = col;
        ldb = ncols;
      }
      if (!ok)
        break;
      if (bmat == NULL || bias != NULL)
        ok = launched (lb_cuda_launch_fill_bias (st, yb, y_cs, cout, ncols,
                bias), op, error);
      if (ok && bmat != NULL)
        ok = lb_cuda_gemm_rm (s, FALSE, FALSE, cout, ncols, kdim, 1.0f, w,
            kdim, bmat, ldb, NULL, bias ? 1.0f : 0.0f, yb, y_cs, error);
    }
  }
  if (col)
    lb_cuda_scratch_release (s, col);
  return ok;
}

static gboolean
cuda_conv3d_causal (LbStream * s, const LbTensor * x, const LbTensor * cache,
    const LbTensor * weight, const LbTensor * bias, int pad_h, int pad_w,
    int stride_h, int stride_w, LbTensor * y, GError ** error)
{
  const char *op = "conv3d_causal";
  LbConvGeom g;
  if (!lb_cuda_check_devices (s, op, error, "x", x, "cache", cache, "weight",
          weight, "bias", bias, "y", y, NULL) ||
      !lb_check_conv3d_causal (x, cache, weight, bias, pad_h, pad_w, stride_h,
          stride_w, y, &g, error))
    return FALSE;
  gboolean done;
  const float *xd = x->data, *cd = cache ? cache->data : NULL;
  float *wide = NULL;
  if (x->dtype == LB_DTYPE_BF16) {
    /* bf16 channels-last: the graph reads them as they are, else they are
     * widened to NCDHW f32 (cache frames first, as a cat) for the paths
     * below */
    if (!lb_cuda_cudnn_conv_in16 (s, &g, x->data, cache ? cache->data : NULL,
            weight->data, bias ? bias->data : NULL, pad_h, pad_w, stride_h,
            stride_w, y->data, &done, error))
      return FALSE;
    if (done)
      return TRUE;
    const int64_t hw = g.h * g.w, cin = g.cin;
    wide = lb_cuda_scratch (s, (gsize) (cin * (g.tc + g.t) * hw) *
        sizeof (float), error);
    if (wide == NULL)
      return FALSE;
    cudaStream_t st = stream_of (s);
    gboolean ok = TRUE;
    if (g.tc > 0)
      ok = launched (lb_cuda_launch_transpose_convert (st, cache->data, 1,
              hw * cin, cin, wide, 0, hw, g.tc * hw, g.tc, hw, cin, NULL), op,
          error);
    ok = ok && launched (lb_cuda_launch_transpose_convert (st, x->data, 1,
            hw * cin, cin, wide + g.tc * cin * hw, 0, hw, g.t * hw, g.t, hw,
            cin, NULL), op, error);
    if (!ok) {
      lb_cuda_scratch_release (s, wide);
      return FALSE;
    }
    lb_cuda_conv_count_widened ();
    cd = g.tc > 0 ? wide : NULL;
    xd = wide + g.tc * cin * hw;
  }
  gboolean ok = lb_cuda_cudnn_conv (s, &g, FALSE, xd, cd, weight->data,
      bias ? bias->data : NULL, pad_h, pad_w, stride_h, stride_w, y->data,
      &done, error);
  if (ok && !done) {
    const LbConvIn c = lb_conv_input (&g, FALSE, cd, xd, pad_h, pad_w,
        stride_h, stride_w);
    ok = conv_core (s, op, &c, weight->data, bias ? bias->data : NULL,
        g.cout, g.tout, y->data, g.tout * g.ho * g.wo, g.ho * g.wo, error);
  }
  if (wide)
    lb_cuda_scratch_release (s, wide);
  return ok;
}

static gboolean
cuda_conv2d (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, int pad_h, int pad_w, int stride_h, int stride_w,
    LbTensor * y, GError ** error)
{
  const char *op = "conv2d";
  LbConvGeom g;
  if (!lb_cuda_check_devices (s, op, error, "x", x, "weight", weight, "bias",
          bias, "y", y, NULL) ||
      !lb_check_conv2d (x, weight, bias, pad_h, pad_w, stride_h, stride_w, y,
          &g, error))
    return FALSE;
  gboolean done;
  if (!lb_cuda_cudnn_conv (s, &g, TRUE, x->data, NULL, weight->data,
          bias ? bias->data : NULL, pad_h, pad_w, stride_h, stride_w,
          y->data, &done, error))
    return FALSE;
  if (done)
    return TRUE;

  const LbConvIn c =
      lb_conv_input (&g, TRUE, NULL, x->data, pad_h, pad_w, stride_h, stride_w);
  return conv_core (s, op, &c, weight->data, bias ? bias->data : NULL, g.cout,
      g.tout, y->data, g.ho * g.wo, g.cout * g.ho * g.wo, error);
}

/* ---- layout (kernels/cpu/layout.c) ---- */

static gboolean
cuda_upsample_nearest2x (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  if (!lb_cuda_check_devices (s, "upsample_nearest2x", error, "x", x, "y", y,
          NULL) || !lb_check_upsample_nearest2x (x, y, error))
    return FALSE;
  int nd = x->ndim;
  int64_t h = x->shape[nd - 2], w = x->shape[nd - 1];
  int64_t rows = h > 0 ? lb_tensor_numel (x) / MAX (w, 1) : 0;
  if (w == 0)
    return TRUE;
  return launched (lb_cuda_launch_upsample_nearest2x (stream_of (s), x->data,
          y->data, rows, w), "upsample_nearest2x", error);
}

static gboolean
cuda_patchify (LbStream * s, const LbTensor * x, int ph, int pw, LbTensor * y,
    GError ** error)
{
  if (!lb_cuda_check_devices (s, "patchify", error, "x", x, "y", y, NULL) ||
      !lb_check_patchify (x, ph, pw, y, error))
    return FALSE;
  int64_t c = x->shape[0], f = x->shape[1], h = x->shape[2], w = x->shape[3];
  return launched (lb_cuda_launch_patchify (stream_of (s), x->data, y->data,
          c, f, h, w, ph, pw), "patchify", error);
}

static gboolean
cuda_unpatchify (LbStream * s, const LbTensor * z, int ph, int pw,
    LbTensor * y, GError ** error)
{
  if (!lb_cuda_check_devices (s, "unpatchify", error, "z", z, "y", y, NULL) ||
      !lb_check_unpatchify (z, ph, pw, y, error))
    return FALSE;
  int64_t c = y->shape[0], f = y->shape[1], h = y->shape[2], w = y->shape[3];
  return launched (lb_cuda_launch_unpatchify (stream_of (s), z->data, y->data,
          c, f, h, w, ph, pw), "unpatchify", error);
}

static gboolean
cuda_resize_bicubic (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  if (!lb_cuda_check_devices (s, "resize_bicubic", error, "x", x, "y", y,
          NULL) || !lb_check_resize_bicubic (x, y, error))
    return FALSE;
  int64_t c = x->shape[0], h = x->shape[1], w = x->shape[2];
  int64_t ho = y->shape[1], wo = y->shape[2];
  if (c == 0 || ho == 0 || wo == 0)
    return TRUE;
  return launched (lb_cuda_launch_resize_bicubic (stream_of (s), x->data,
          y->data, c, h, w, ho, wo), "resize_bicubic", error);
}

/* ---- strided ops (kernels/cpu/strided.c) ---- */

/* The kernels' copy of a checked 5-D walk. */
static LbCudaStrided5
cuda_walk (const LbStrided5 * g)
{
  LbCudaStrided5 cg;
  memcpy (cg.shape, g->shape, sizeof cg.shape);
  memcpy (cg.ys, g->ys, sizeof cg.ys);
  memcpy (cg.xs, g->xs, sizeof cg.xs);
  cg.cdim = g->cdim;
  return cg;
}

static gboolean
cuda_strided (LbStream * s, const char *op, LbCudaStridedOp kind,
    const LbStrided5 * g, const LbTensor * x, LbTensor * y, float a, float b,
    const LbTensor * mean, const LbTensor * inv_std, GError ** error)
{
  const LbCudaStrided5 cg = cuda_walk (g);
  return launched (lb_cuda_launch_strided (stream_of (s), kind, &cg,
          x ? x->data : NULL, y->data, a, b, mean ? mean->data : NULL,
          inv_std ? inv_std->data : NULL), op, error);
}

/* y = x, each f32 or bf16 (kernels/ops.h): f32 -> f32 through the strided
 * kernel as before, any bf16 side through the converting copy. */
static gboolean
cuda_copy (LbStream * s, const LbTensor * x, LbTensor * y, GError ** error)
{
  LbStrided5 g;
  if (!lb_cuda_check_devices (s, "copy", error, "x", x, "y", y, NULL) ||
      !lb_check_copy (x, y, &g, error))
    return FALSE;
  if (x->dtype == LB_DTYPE_F32 && y->dtype == LB_DTYPE_F32)
    return cuda_strided (s, "copy", LB_CUDA_ST_COPY, &g, x, y, 0.f, 0.f,
        NULL, NULL, error);
  const LbCudaStrided5 cg = cuda_walk (&g);
  return launched (lb_cuda_launch_copy_convert (stream_of (s), &cg, x->data,
          x->dtype == LB_DTYPE_BF16, y->data, y->dtype == LB_DTYPE_BF16),
      "copy", error);
}

static gboolean
cuda_clamp (LbStream * s, const LbTensor * x, float lo, float hi,
    LbTensor * y, GError ** error)
{
  LbStrided5 g;
  if (!lb_cuda_check_devices (s, "clamp", error, "x", x, "y", y, NULL) ||
      !lb_check_strided ("clamp", x, y, &g, error))
    return FALSE;
  return cuda_strided (s, "clamp", LB_CUDA_ST_CLAMP, &g, x, y, lo, hi, NULL,
      NULL, error);
}

static gboolean
cuda_fill (LbStream * s, LbTensor * y, float value, GError ** error)
{
  LbStrided5 g;
  if (!lb_cuda_check_devices (s, "fill", error, "y", y, NULL) ||
      !lb_check_fill (y, &g, error))
    return FALSE;
  if (y->dtype == LB_DTYPE_BF16) {
    const LbCudaStrided5 cg = cuda_walk (&g);
    return launched (lb_cuda_launch_fill_bf16 (stream_of (s), &cg, y->data,
            value), "fill", error);
  }
  return cuda_strided (s, "fill", LB_CUDA_ST_FILL, &g, NULL, y, value, 0.f,
      NULL, NULL, error);
}

static gboolean
cuda_accumulate (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  LbStrided5 g;
  if (!lb_cuda_check_devices (s, "accumulate", error, "x", x, "y", y, NULL)
      || !lb_check_strided ("accumulate", x, y, &g, error))
    return FALSE;
  return cuda_strided (s, "accumulate", LB_CUDA_ST_ACCUMULATE, &g, x, y, 0.f,
      0.f, NULL, NULL, error);
}

static gboolean
cuda_latent_affine (LbStream * s, const LbTensor * x, const LbTensor * mean,
    const LbTensor * inv_std, gboolean denormalize, LbTensor * y,
    GError ** error)
{
  LbStrided5 g;
  if (!lb_cuda_check_devices (s, "latent_affine", error, "x", x, "mean",
          mean, "inv_std", inv_std, "y", y, NULL) ||
      !lb_check_latent_affine (x, mean, inv_std, y, &g, error))
    return FALSE;
  return cuda_strided (s, "latent_affine", denormalize ?
      LB_CUDA_ST_DENORMALIZE : LB_CUDA_ST_NORMALIZE, &g, x, y, 0.f, 0.f,
      mean, inv_std, error);
}

static gboolean
cuda_channel_rms_norm (LbStream * s, const LbTensor * x,
    const LbTensor * gamma, gboolean silu, LbTensor * y, GError ** error)
{
  if (!lb_cuda_check_devices (s, "channel_rms_norm", error, "x", x, "gamma",
          gamma, "y", y, NULL) ||
      !lb_check_channel_rms_norm (x, gamma, y, error))
    return FALSE;
  return launched (lb_cuda_launch_channel_rms_norm (stream_of (s), x->data,
          x->stride, gamma->data, silu ? 1 : 0, y->data,
          y->dtype == LB_DTYPE_BF16, y->stride, x->shape[0], x->shape[1],
          x->shape[2], x->shape[3]), "channel_rms_norm", error);
}

static gboolean
cuda_upsample_nearest2x_halo (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  if (!lb_cuda_check_devices (s, "upsample_nearest2x_halo", error, "x", x,
          "y", y, NULL) || !lb_check_upsample_nearest2x_halo (x, y, error))
    return FALSE;
  return launched (lb_cuda_launch_upsample_nearest2x_halo (stream_of (s),
          x->data, x->stride[0], x->stride[1], x->stride[2], y->data,
          y->dtype == LB_DTYPE_BF16, y->shape[0], y->shape[1], y->shape[2],
          x->shape[3]), "upsample_nearest2x_halo", error);
}

/* ---- fused DiT ops (kernels/cpu/fused.c, kernels-fused.cu) ---- */

static gboolean
cuda_norm_modulate (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, float eps, const LbTensor * scale,
    const LbTensor * shift, LbTensor * y, GError ** error)
{
  LbRowsGeom g;
  if (!lb_cuda_check_devices (s, "norm_modulate", error, "x", x, "weight",
          weight, "bias", bias, "scale", scale, "shift", shift, "y", y,
          NULL) ||
      !lb_check_norm_modulate (x, weight, bias, scale, shift, y, &g, error))
    return FALSE;
  return launched (lb_cuda_launch_norm_modulate (stream_of (s), x->data,
          g.x_ld, weight ? weight->data : NULL, bias ? bias->data : NULL, eps,
          scale->data, g.s_ld, shift->data, g.h_ld, y->data,
          y->dtype == LB_DTYPE_BF16, g.y_ld, g.m, g.d), "norm_modulate", error);
}

static gboolean
cuda_rms_norm_rope (LbStream * s, const LbTensor * x, const LbTensor * weight,
    float eps, const LbTensor * cos, const LbTensor * sin, int64_t grid_f,
    int64_t grid_h, int64_t grid_w, int64_t frame_offset, int64_t row_offset,
    LbTensor * y, GError ** error)
{
  LbRowsGeom g;
  if (!lb_cuda_check_devices (s, "rms_norm_rope", error, "x", x, "weight",
          weight, "cos", cos, "sin", sin, "y", y, NULL) ||
      !lb_check_rms_norm_rope (x, weight, cos, sin, grid_f, grid_h, grid_w,
          frame_offset, row_offset, y, &g, error))
    return FALSE;
  /* a bf16 y: a bf16 KV cache's slots */
  return launched (lb_cuda_launch_rms_norm_rope (stream_of (s), x->data,
          g.x_ld, weight ? weight->data : NULL, eps, y->data,
          y->dtype == LB_DTYPE_BF16, y->stride[0], y->stride[1], g.m,
          y->shape[1], y->shape[2], cos->data, sin->data, grid_h, grid_w,
          frame_offset, row_offset), "rms_norm_rope", error);
}

static gboolean
cuda_residual_norm_modulate (LbStream * s, LbTensor * x, const LbTensor * y,
    const LbTensor * gate, const LbTensor * weight, const LbTensor * bias,
    float eps, const LbTensor * scale, const LbTensor * shift, LbTensor * out,
    GError ** error)
{
  LbRowsGeom g;
  if (!lb_cuda_check_devices (s, "residual_norm_modulate", error, "x", x,
          "y", y, "gate", gate, "weight", weight, "bias", bias, "scale",
          scale, "shift", shift, "out", out, NULL) ||
      !lb_check_residual_norm_modulate (x, y, gate, weight, bias, scale,
          shift, out, &g, error))
    return FALSE;
  return launched (lb_cuda_launch_residual_norm_modulate (stream_of (s),
          x->data, g.x_ld, y->data, g.y_ld, gate ? gate->data : NULL, g.g_ld,
          weight ? weight->data : NULL, bias ? bias->data : NULL, eps,
          scale->data, g.s_ld, shift->data, g.h_ld, out->data,
          out->dtype == LB_DTYPE_BF16, g.o_ld, g.m, g.d),
      "residual_norm_modulate", error);
}

/* the fp8 GEMM input's producer (kernels-norm.cu) */
static gboolean
cuda_norm_fp8 (LbStream * s, LbTensor * x, const LbTensor * y,
    const LbTensor * gate, const LbTensor * weight, const LbTensor * bias,
    float eps, const LbTensor * scale, const LbTensor * shift, LbTensor * q,
    LbTensor * sq, GError ** error)
{
  LbRowsGeom g;
  if (!lb_cuda_check_devices (s, "norm_fp8", error, "x", x, "y", y, "gate",
          gate, "weight", weight, "bias", bias, "scale", scale, "shift",
          shift, "q", q, "sq", sq, NULL) ||
      !lb_check_norm_fp8 (x, y, gate, weight, bias, scale, shift, q, sq, &g,
          error))
    return FALSE;
  return launched (lb_cuda_launch_norm_fp8 (stream_of (s), x->data, g.x_ld,
          y ? y->data : NULL, g.y_ld, gate ? gate->data : NULL, g.g_ld,
          weight ? weight->data : NULL, bias ? bias->data : NULL, eps,
          scale ? scale->data : NULL, g.s_ld, shift ? shift->data : NULL,
          g.h_ld, q->data, g.o_ld, sq->data, g.m, g.d), "norm_fp8", error);
}

static gboolean
cuda_gated_residual_modulate (LbStream * s, LbTensor * x, const LbTensor * y,
    const LbTensor * gate, const LbTensor * scale, const LbTensor * shift,
    GError ** error)
{
  LbRowsGeom g;
  if (!lb_cuda_check_devices (s, "gated_residual_modulate", error, "x", x,
          "y", y, "gate", gate, "scale", scale, "shift", shift, NULL) ||
      !lb_check_gated_residual_modulate (x, y, gate, scale, shift, &g, error))
    return FALSE;
  return launched (lb_cuda_launch_gated_residual_modulate (stream_of (s),
          x->data, g.x_ld, y->data, g.y_ld, gate ? gate->data : NULL, g.g_ld,
          scale->data, g.s_ld, shift->data, g.h_ld, g.m, g.d),
      "gated_residual_modulate", error);
}

/* ---- camera control (kernels/cpu/raymap.c, kernels-raymap.cu) ---- */

static gboolean
cuda_ray_map (LbStream * s, const LbTensor * rel_poses, float fx, float fy,
    float cx, float cy, int width, int height, int row0, LbTensor * y,
    GError ** error)
{
  if (!lb_cuda_check_devices (s, "ray_map", error, "rel_poses", rel_poses,
          "y", y, NULL) ||
      !lb_check_ray_map (rel_poses, width, height, row0, y, error))
    return FALSE;
  return launched (lb_cuda_launch_ray_map (stream_of (s), rel_poses->data,
          fx, fy, cx, cy, rel_poses->shape[0], row0, y->shape[2],
          y->shape[3], y->data), "ray_map", error);
}

/**
 * lb_cuda_ops:
 *
 * The CUDA backend's op table: complete (lb_ops_first_missing() is %NULL).
 */
const LbOps lb_cuda_ops = {
  .gemm = lb_cuda_gemm,
  .gemm_gelu_tanh = lb_cuda_gemm_gelu_tanh,
  .gemm_fp8 = lb_cuda_gemm_fp8,
  .gemm_fp8_q = lb_cuda_gemm_fp8_q,
  .gemm_fp8_gelu_q = lb_cuda_gemm_fp8_gelu_q,
  .layer_norm = cuda_layer_norm,
  .rms_norm = cuda_rms_norm,
  .modulate = cuda_modulate,
  .gated_residual = cuda_gated_residual,
  .rope_3d = cuda_rope_3d,
  .attention = cuda_attention,
  .gelu_tanh = cuda_gelu_tanh,
  .silu = cuda_silu,
  .add = cuda_add,
  .mul = cuda_mul,
  .scale = cuda_scale,
  .conv3d_causal = cuda_conv3d_causal,
  .conv2d = cuda_conv2d,
  .upsample_nearest2x = cuda_upsample_nearest2x,
  .patchify = cuda_patchify,
  .unpatchify = cuda_unpatchify,
  .resize_bicubic = cuda_resize_bicubic,
  .copy = cuda_copy,
  .clamp = cuda_clamp,
  .fill = cuda_fill,
  .accumulate = cuda_accumulate,
  .channel_rms_norm = cuda_channel_rms_norm,
  .upsample_nearest2x_halo = cuda_upsample_nearest2x_halo,
  .latent_affine = cuda_latent_affine,
  .norm_modulate = cuda_norm_modulate,
  .rms_norm_rope = cuda_rms_norm_rope,
  .gated_residual_modulate = cuda_gated_residual_modulate,
  .residual_norm_modulate = cuda_residual_norm_modulate,
  .norm_fp8 = cuda_norm_fp8,
  .ray_map = cuda_ray_map,
};

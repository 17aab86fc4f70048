/* lingbot-gst: the CUDA op table: argument checks and launches
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Every op checks its arguments exactly as its CPU twin in kernels/cpu/
 * does (same order, same messages, through cuda-check.c, plus "is on
 * device ..." when a tensor is not on the stream's device), then enqueues
 * its kernels on the stream and returns; nothing here synchronises.
 * A launch failure is an %LB_ERROR_DEVICE error.
 *
 * The convolutions unfold (im2col, causal cache resolved per element: no
 * concatenated copy) into pool scratch of at most LB_CUDA_SCRATCH_LIMIT
 * floats per block of output rows and multiply with one FP32 cuBLASLt GEMM
 * per block (1x1 stride-1 convs multiply the input frames directly), the
 * scheme of kernels/cpu/conv.c.  Attention uses the fused flash kernel for
 * head dims up to 128 and, above (the VAE mid-block's 384), two GEMMs per
 * (head, block of queries) around an exact row softmax.
 */
#include "kernels/cuda/cuda-internal.h"
#include "kernels/cpu/cpu-internal.h"

#include <string.h>

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

/* ---- checks shared by the row ops (kernels/cpu/norm.c) ---- */

static gboolean
check_out_rows (LbStream * s, const char *op, const char *arg,
    const LbTensor * t, const LbTensor * like, int64_t rows, int64_t d,
    int64_t * ld, GError ** error)
{
  int64_t r;
  if (!lb_cuda_check_rows (s, op, arg, t, d, &r, ld, error))
    return FALSE;
  if (r != rows) {
    g_autofree char *have = lb_tensor_shape_string (t);
    g_autofree char *want = lb_tensor_shape_string (like);
    return lb_cpu_fail (error, "%s: %s is f32 %s, expected %s", op, arg, have,
        want);
  }
  return TRUE;
}

static gboolean
check_vec_or_rows (LbStream * s, const char *op, const char *arg,
    const LbTensor * t, int64_t rows, int64_t d, int64_t * ld,
    GError ** error)
{
  int64_t r;
  if (!lb_cuda_check_rows (s, op, arg, t, d, &r, ld, error))
    return FALSE;
  if (r == 1) {
    *ld = 0;
    return TRUE;
  }
  if (r != rows) {
    g_autofree char *have = lb_tensor_shape_string (t);
    return lb_cpu_fail (error, "%s: %s is f32 %s, expected [%" G_GINT64_FORMAT
        "] or [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]", op, arg, have, d,
        rows, d);
  }
  return TRUE;
}

static gboolean
check_vec (LbStream * s, const char *op, const char *arg, const LbTensor * t,
    int64_t d, GError ** error)
{
  int64_t shape[1] = { d };
  return lb_cuda_check_t (s, op, arg, t, LB_DTYPE_F32, 1, shape, TRUE, error);
}

/* ---- norms, modulation ---- */

static gboolean
cuda_layer_norm (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, float eps, LbTensor * y, GError ** error)
{
  int64_t m, xld, yld;
  if (!lb_cuda_check_rows (s, "layer_norm", "x", x, LB_ANY, &m, &xld, error))
    return FALSE;
  int64_t d = x->shape[x->ndim - 1];
  if (!check_out_rows (s, "layer_norm", "y", y, x, m, d, &yld, error))
    return FALSE;
  if (weight && !check_vec (s, "layer_norm", "weight", weight, d, error))
    return FALSE;
  if (bias && !check_vec (s, "layer_norm", "bias", bias, d, error))
    return FALSE;
  return launched (lb_cuda_launch_layer_norm (stream_of (s), x->data, xld,
          weight ? weight->data : NULL, bias ? bias->data : NULL, eps,
          y->data, yld, m, d), "layer_norm", error);
}

static gboolean
cuda_rms_norm (LbStream * s, const LbTensor * x, const LbTensor * weight,
    float eps, LbTensor * y, GError ** error)
{
  int64_t m, xld, yld;
  if (!lb_cuda_check_rows (s, "rms_norm", "x", x, LB_ANY, &m, &xld, error))
    return FALSE;
  int64_t d = x->shape[x->ndim - 1];
  if (!check_out_rows (s, "rms_norm", "y", y, x, m, d, &yld, error))
    return FALSE;
  if (weight && !check_vec (s, "rms_norm", "weight", weight, d, error))
    return FALSE;
  return launched (lb_cuda_launch_rms_norm (stream_of (s), x->data, xld,
          weight ? weight->data : NULL, eps, y->data, yld, m, d), "rms_norm",
      error);
}

static gboolean
cuda_modulate (LbStream * s, const LbTensor * x, const LbTensor * scale,
    const LbTensor * shift, LbTensor * y, GError ** error)
{
  int64_t m, xld, yld, sld, hld;
  if (!lb_cuda_check_rows (s, "modulate", "x", x, LB_ANY, &m, &xld, error))
    return FALSE;
  int64_t d = x->shape[x->ndim - 1];
  if (!check_out_rows (s, "modulate", "y", y, x, m, d, &yld, error) ||
      !check_vec_or_rows (s, "modulate", "scale", scale, m, d, &sld, error) ||
      !check_vec_or_rows (s, "modulate", "shift", shift, m, d, &hld, error))
    return FALSE;
  return launched (lb_cuda_launch_modulate (stream_of (s), x->data, xld,
          scale->data, sld, shift->data, hld, y->data, yld, m, d),
      "modulate", error);
}

static gboolean
cuda_gated_residual (LbStream * s, LbTensor * x, const LbTensor * y,
    const LbTensor * gate, GError ** error)
{
  int64_t m, xld, yld, gld = 0;
  if (!lb_cuda_check_rows (s, "gated_residual", "x", x, LB_ANY, &m, &xld,
          error))
    return FALSE;
  int64_t d = x->shape[x->ndim - 1];
  if (!check_out_rows (s, "gated_residual", "y", y, x, m, d, &yld, error))
    return FALSE;
  if (gate && !check_vec_or_rows (s, "gated_residual", "gate", gate, m, d,
          &gld, error))
    return FALSE;
  return launched (lb_cuda_launch_gated_residual (stream_of (s), x->data, xld,
          y->data, yld, gate ? gate->data : NULL, gld, m, d),
      "gated_residual", error);
}

/* ---- RoPE (kernels/cpu/rope.c) ---- */

static gboolean
cuda_rope_3d (LbStream * s, LbTensor * x, const LbTensor * cos,
    const LbTensor * sin, int64_t grid_f, int64_t grid_h, int64_t grid_w,
    int64_t frame_offset, int64_t row_offset, GError ** error)
{
  int64_t any3[3] = { LB_ANY, LB_ANY, LB_ANY };
  if (!lb_cuda_check_t (s, "rope_3d", "x", x, LB_DTYPE_F32, 3, any3, FALSE,
          error))
    return FALSE;
  int64_t n = x->shape[0], nh = x->shape[1], hd = x->shape[2];
  if ((hd % 2) != 0 || (x->stride[2] != 1 && hd > 1)) {
    g_autofree char *have = lb_tensor_shape_string (x);
    g_autofree char *st = lb_shape_string (3, x->stride);
    return lb_cpu_fail (error, "rope_3d: x is f32 %s with strides %s, "
        "expected [N, H, hd] with even hd and unit stride on hd", have, st);
  }
  int64_t half = hd / 2;
  int64_t tshape[2] = { LB_ANY, half };
  if (!lb_cuda_check_t (s, "rope_3d", "cos", cos, LB_DTYPE_F32, 2, tshape,
          TRUE, error))
    return FALSE;
  tshape[0] = cos->shape[0];
  if (!lb_cuda_check_t (s, "rope_3d", "sin", sin, LB_DTYPE_F32, 2, tshape,
          TRUE, error))
    return FALSE;
  int64_t max_pos = cos->shape[0];
  if (grid_f < 0 || grid_h < 0 || grid_w < 0 || grid_f * grid_h * grid_w != n) {
    g_autofree char *have = lb_tensor_shape_string (x);
    return lb_cpu_fail (error, "rope_3d: x is f32 %s, expected [%"
        G_GINT64_FORMAT ", *, *] for a grid of %" G_GINT64_FORMAT " x %"
        G_GINT64_FORMAT " x %" G_GINT64_FORMAT, have,
        MAX (grid_f, 0) * MAX (grid_h, 0) * MAX (grid_w, 0), grid_f, grid_h,
        grid_w);
  }
  if (n > 0 && (frame_offset < 0 || row_offset < 0 ||
          frame_offset + grid_f > max_pos || row_offset + grid_h > max_pos ||
          grid_w > max_pos)) {
    g_autofree char *have = lb_tensor_shape_string (cos);
    return lb_cpu_fail (error, "rope_3d: cos is f32 %s, too short for frames "
        "[%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "), rows [%" G_GINT64_FORMAT
        ", %" G_GINT64_FORMAT "), columns [0, %" G_GINT64_FORMAT ")", have,
        frame_offset, frame_offset + grid_f, row_offset, row_offset + grid_h,
        grid_w);
  }
  return launched (lb_cuda_launch_rope_3d (stream_of (s), x->data,
          x->stride[0], x->stride[1], n, nh, hd, cos->data, sin->data, grid_h,
          grid_w, frame_offset, row_offset), "rope_3d", error);
}

/* ---- attention (kernels/cpu/attention.c) ---- */

static gboolean
check_heads (LbStream * s, const char *arg, const LbTensor * t, int64_t n,
    int64_t h, int64_t hd, GError ** error)
{
  int64_t shape[3] = { n, h, hd };
  if (!lb_cuda_check_t (s, "attention", arg, t, LB_DTYPE_F32, 3, shape, FALSE,
          error))
    return FALSE;
  if (t->stride[2] != 1 && t->shape[2] > 1) {
    g_autofree char *have = lb_tensor_shape_string (t);
    g_autofree char *st = lb_shape_string (3, t->stride);
    return lb_cpu_fail (error, "attention: %s is f32 %s with strides %s, "
        "expected unit stride on the last dimension", arg, have, st);
  }
  return TRUE;
}

/* Head dims above the flash kernel's: per head and block of queries,
 * S = Q K^T (GEMM), exact softmax rows, O = P V (GEMM). */
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
  int64_t qc = CLAMP ((int64_t) (LB_CUDA_SCRATCH_LIMIT / (gsize) a->nk), 1,
      a->nq);
  float *sc = lb_cuda_scratch (s, (gsize) qc * a->nk * sizeof (float), error);
  if (sc == NULL)
    return FALSE;
  gboolean ok = TRUE;
  for (int64_t h = 0; ok && h < a->nh; h++) {
    for (int64_t q0 = 0; ok && q0 < a->nq; q0 += qc) {
      int64_t rows = MIN (qc, a->nq - q0);
      ok = lb_cuda_gemm_rm (s, FALSE, TRUE, rows, a->nk, a->hd, 1.0f,
          a->q + q0 * a->qs0 + h * a->qs1, a->qs0, a->k + h * a->ks1, a->ks0,
          NULL, 0.0f, sc, a->nk, error) &&
          launched (lb_cuda_launch_softmax_rows (st, sc, rows, a->nk,
              a->scale, a->bias ? a->bias + (h * a->nq + q0) * a->nk : NULL,
              a->mask), "attention", error) &&
          lb_cuda_gemm_rm (s, FALSE, FALSE, rows, a->hd, a->nk, 1.0f, sc,
          a->nk, a->v + h * a->vs1, a->vs0, NULL, 0.0f,
          a->out + q0 * a->os0 + h * a->os1, a->os0, error);
    }
  }
  lb_cuda_scratch_release (s, sc);
  return ok;
}

static gboolean
cuda_attention (LbStream * s, const LbTensor * q, const LbTensor * k,
    const LbTensor * v, const LbTensor * bias, const LbTensor * key_mask,
    float scale, LbTensor * out, GError ** error)
{
  if (!check_heads (s, "q", q, LB_ANY, LB_ANY, LB_ANY, error))
    return FALSE;
  int64_t nq = q->shape[0], nh = q->shape[1], hd = q->shape[2];
  if (!check_heads (s, "k", k, LB_ANY, nh, hd, error))
    return FALSE;
  int64_t nk = k->shape[0];
  if (!check_heads (s, "v", v, nk, nh, hd, error) ||
      !check_heads (s, "out", out, nq, nh, hd, error))
    return FALSE;
  if (bias) {
    int64_t shape[3] = { nh, nq, nk };
    if (!lb_cuda_check_t (s, "attention", "bias", bias, LB_DTYPE_F32, 3,
            shape, TRUE, error))
      return FALSE;
  }
  if (key_mask) {
    int64_t shape[1] = { nk };
    if (!lb_cuda_check_t (s, "attention", "key_mask", key_mask, LB_DTYPE_U8,
            1, shape, TRUE, error))
      return FALSE;
  }
  if (nq == 0 || nh == 0 || hd == 0)
    return TRUE;

  LbCudaAttnArgs a = {
    .q = q->data,.k = k->data,.v = v->data,.out = out->data,
    .qs0 = q->stride[0],.qs1 = q->stride[1],
    .ks0 = k->stride[0],.ks1 = k->stride[1],
    .vs0 = v->stride[0],.vs1 = v->stride[1],
    .os0 = out->stride[0],.os1 = out->stride[1],
    .bias = bias ? bias->data : NULL,
    .mask = key_mask ? key_mask->data : NULL,
    .nq = nq,.nk = nk,.nh = nh,.hd = hd,
    .scale = scale,
  };
  if (hd <= LB_CUDA_FLASH_MAX_HD)
    return launched (lb_cuda_launch_flash_attention (stream_of (s), &a),
        "attention", error);
  return attention_gemm_path (s, &a, error);
}

/* ---- elementwise (kernels/cpu/elementwise.c) ---- */

static gboolean
check_out (LbStream * s, const char *op, const LbTensor * like, int64_t m,
    int64_t d, const LbTensor * y, int64_t * yld, GError ** error)
{
  int64_t r;
  if (!lb_cuda_check_rows (s, op, "y", y, d, &r, yld, error))
    return FALSE;
  if (r != m || (y->ndim != 2 && like->ndim != 2 && !lb_tensor_same_shape (y,
              like))) {
    g_autofree char *have = lb_tensor_shape_string (y);
    g_autofree char *want = lb_tensor_shape_string (like);
    return lb_cpu_fail (error, "%s: y is f32 %s, expected %s", op, have, want);
  }
  return TRUE;
}

static gboolean
unary (LbStream * s, const char *op, LbCudaEwOp f, const LbTensor * x,
    LbTensor * y, float alpha, float beta, GError ** error)
{
  int64_t m, xld, yld;
  if (!lb_cuda_check_rows (s, op, "x", x, LB_ANY, &m, &xld, error))
    return FALSE;
  int64_t d = x->shape[x->ndim - 1];
  if (!check_out (s, op, x, m, d, y, &yld, error))
    return FALSE;
  return launched (lb_cuda_launch_elementwise (stream_of (s), f, x->data, xld,
          NULL, 0, y->data, yld, m, d, alpha, beta), op, error);
}

static gboolean
binary (LbStream * s, const char *op, LbCudaEwOp f, const LbTensor * a,
    const LbTensor * b, LbTensor * y, GError ** error)
{
  int64_t m, ald, bm, bld, yld;
  if (!lb_cuda_check_rows (s, op, "a", a, LB_ANY, &m, &ald, error))
    return FALSE;
  int64_t d = a->shape[a->ndim - 1];
  if (!lb_cuda_check_rows (s, op, "b", b, d, &bm, &bld, error))
    return FALSE;
  gboolean bcast = b->ndim == 1 && a->ndim != 1;
  if (!bcast && (bm != m || (b->ndim != 2 && a->ndim != 2 &&
              !lb_tensor_same_shape (a, b)))) {
    g_autofree char *have = lb_tensor_shape_string (b);
    g_autofree char *want = lb_tensor_shape_string (a);
    return lb_cpu_fail (error, "%s: b is f32 %s, expected %s or [%"
        G_GINT64_FORMAT "]", op, have, want, d);
  }
  if (!check_out (s, op, a, m, d, y, &yld, error))
    return FALSE;
  return launched (lb_cuda_launch_elementwise (stream_of (s), f, a->data, ald,
          b->data, bcast ? 0 : bld, y->data, yld, m, d, 0.0f, 0.0f), op,
      error);
}

static gboolean
cuda_gelu_tanh (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
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

static gboolean
check_geometry (const char *op, int pad_h, int pad_w, int stride_h,
    int stride_w, GError ** error)
{
  if (pad_h < 0 || pad_w < 0 || stride_h < 1 || stride_w < 1)
    return lb_cpu_fail (error, "%s: padding (%d, %d) and stride (%d, %d) "
        "invalid, expected padding >= 0 and stride >= 1", op, pad_h, pad_w,
        stride_h, stride_w);
  return TRUE;
}

static gboolean
out_extent (const char *op, const char *what, int64_t in, int64_t k,
    int64_t pad, int64_t stride, int64_t * out, GError ** error)
{
  if (in + 2 * pad < k)
    return lb_cpu_fail (error, "%s: input %s %" G_GINT64_FORMAT " with padding "
        "%" G_GINT64_FORMAT " is smaller than the kernel (%" G_GINT64_FORMAT
        ")", op, what, in, pad, k);
  *out = (in + 2 * pad - k) / stride + 1;
  return TRUE;
}

/* y rows: co*y_cs + t*y_fs + row*wo + col, for t < tout. */
static gboolean
conv_core (LbStream * s, const char *op, const LbCudaConvIn * c,
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
    nr = CLAMP ((int64_t) (LB_CUDA_SCRATCH_LIMIT / MAX (per_row, 1)), 1,
        c->ho);
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
  int64_t any4[4] = { LB_ANY, LB_ANY, LB_ANY, LB_ANY };
  if (!lb_cuda_check_t (s, op, "x", x, LB_DTYPE_F32, 4, any4, TRUE, error))
    return FALSE;
  int64_t cin = x->shape[0], t = x->shape[1], h = x->shape[2], w = x->shape[3];
  int64_t wshape[5] = { LB_ANY, cin, LB_ANY, LB_ANY, LB_ANY };
  if (!lb_cuda_check_t (s, op, "weight", weight, LB_DTYPE_F32, 5, wshape, TRUE,
          error))
    return FALSE;
  int64_t cout = weight->shape[0], kt = weight->shape[2];
  int64_t kh = weight->shape[3], kw = weight->shape[4];
  int64_t tc = 0;
  if (cache) {
    int64_t cshape[4] = { cin, LB_ANY, h, w };
    if (!lb_cuda_check_t (s, op, "cache", cache, LB_DTYPE_F32, 4, cshape,
            TRUE, error))
      return FALSE;
    tc = cache->shape[1];
  }
  if (bias) {
    int64_t bshape[1] = { cout };
    if (!lb_cuda_check_t (s, op, "bias", bias, LB_DTYPE_F32, 1, bshape, TRUE,
            error))
      return FALSE;
  }
  if (!check_geometry (op, pad_h, pad_w, stride_h, stride_w, error))
    return FALSE;
  if (kt < 1) {
    g_autofree char *have = lb_tensor_shape_string (weight);
    return lb_cpu_fail (error, "%s: weight is f32 %s, expected kt >= 1", op,
        have);
  }
  int64_t ho = 0, wo = 0;
  if (!out_extent (op, "height", h, kh, pad_h, stride_h, &ho, error) ||
      !out_extent (op, "width", w, kw, pad_w, stride_w, &wo, error))
    return FALSE;
  int64_t zeros = MAX (0, kt - 1 - tc);
  int64_t tout = zeros + tc + t - kt + 1;
  int64_t yshape[4] = { cout, tout, ho, wo };
  if (!lb_cuda_check_t (s, op, "y", y, LB_DTYPE_F32, 4, yshape, TRUE, error))
    return FALSE;

  LbCudaConvIn c = {
    .zeros = zeros,
    .cache = cache ? cache->data : NULL,
    .cache_t = tc,
    .cache_cs = tc * h * w,
    .x = x->data,
    .x_cs = t * h * w,
    .x_fs = h * w,
    .cin = cin,.h = h,.w = w,
    .kt = kt,.kh = kh,.kw = kw,
    .sh = stride_h,.sw = stride_w,.ph = pad_h,.pw = pad_w,
    .ho = ho,.wo = wo,
  };
  return conv_core (s, op, &c, weight->data, bias ? bias->data : NULL, cout,
      tout, y->data, tout * ho * wo, ho * wo, error);
}

static gboolean
cuda_conv2d (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, int pad_h, int pad_w, int stride_h, int stride_w,
    LbTensor * y, GError ** error)
{
  const char *op = "conv2d";
  int64_t any[4] = { LB_ANY, LB_ANY, LB_ANY, LB_ANY };
  if (x && x->ndim == 4) {
    if (!lb_cuda_check_t (s, op, "x", x, LB_DTYPE_F32, 4, any, TRUE, error))
      return FALSE;
  } else if (!lb_cuda_check_t (s, op, "x", x, LB_DTYPE_F32, 3, any, TRUE,
          error)) {
    return FALSE;
  }
  const int batched = x->ndim == 4;
  int64_t nb = batched ? x->shape[0] : 1;
  int64_t cin = x->shape[batched], h = x->shape[batched + 1];
  int64_t w = x->shape[batched + 2];
  int64_t wshape[4] = { LB_ANY, cin, LB_ANY, LB_ANY };
  if (!lb_cuda_check_t (s, op, "weight", weight, LB_DTYPE_F32, 4, wshape, TRUE,
          error))
    return FALSE;
  int64_t cout = weight->shape[0], kh = weight->shape[2];
  int64_t kw = weight->shape[3];
  if (bias) {
    int64_t bshape[1] = { cout };
    if (!lb_cuda_check_t (s, op, "bias", bias, LB_DTYPE_F32, 1, bshape, TRUE,
            error))
      return FALSE;
  }
  if (!check_geometry (op, pad_h, pad_w, stride_h, stride_w, error))
    return FALSE;
  int64_t ho = 0, wo = 0;
  if (!out_extent (op, "height", h, kh, pad_h, stride_h, &ho, error) ||
      !out_extent (op, "width", w, kw, pad_w, stride_w, &wo, error))
    return FALSE;
  int64_t yshape[4] = { nb, cout, ho, wo };
  if (!lb_cuda_check_t (s, op, "y", y, LB_DTYPE_F32, x->ndim,
          batched ? yshape : yshape + 1, TRUE, error))
    return FALSE;

  LbCudaConvIn c = {
    .x = x->data,
    .x_cs = h * w,
    .x_fs = cin * h * w,
    .cin = cin,.h = h,.w = w,
    .kt = 1,.kh = kh,.kw = kw,
    .sh = stride_h,.sw = stride_w,.ph = pad_h,.pw = pad_w,
    .ho = ho,.wo = wo,
  };
  return conv_core (s, op, &c, weight->data, bias ? bias->data : NULL, cout,
      nb, y->data, ho * wo, cout * ho * wo, error);
}

/* ---- layout (kernels/cpu/layout.c) ---- */

static gboolean
cuda_upsample_nearest2x (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  int64_t shape[LB_MAX_DIMS];
  for (int i = 0; i < LB_MAX_DIMS; i++)
    shape[i] = LB_ANY;
  if (x == NULL || x->ndim < 2) {
    if (!lb_cuda_check_t (s, "upsample_nearest2x", "x", x, LB_DTYPE_F32, 2,
            shape, TRUE, error))
      return FALSE;
  }
  int nd = x->ndim;
  if (!lb_cuda_check_t (s, "upsample_nearest2x", "x", x, LB_DTYPE_F32, nd,
          shape, TRUE, error))
    return FALSE;
  memcpy (shape, x->shape, sizeof (int64_t) * nd);
  shape[nd - 2] *= 2;
  shape[nd - 1] *= 2;
  if (!lb_cuda_check_t (s, "upsample_nearest2x", "y", y, LB_DTYPE_F32, nd,
          shape, TRUE, error))
    return FALSE;
  int64_t h = x->shape[nd - 2], w = x->shape[nd - 1];
  int64_t rows = h > 0 ? lb_tensor_numel (x) / MAX (w, 1) : 0;
  if (w == 0)
    return TRUE;
  return launched (lb_cuda_launch_upsample_nearest2x (stream_of (s), x->data,
          y->data, rows, w), "upsample_nearest2x", error);
}

static gboolean
check_patch (const char *op, int ph, int pw, GError ** error)
{
  if (ph < 1 || pw < 1)
    return lb_cpu_fail (error, "%s: patch size %d x %d invalid, expected >= 1",
        op, ph, pw);
  return TRUE;
}

static gboolean
cuda_patchify (LbStream * s, const LbTensor * x, int ph, int pw, LbTensor * y,
    GError ** error)
{
  int64_t any4[4] = { LB_ANY, LB_ANY, LB_ANY, LB_ANY };
  if (!check_patch ("patchify", ph, pw, error) ||
      !lb_cuda_check_t (s, "patchify", "x", x, LB_DTYPE_F32, 4, any4, TRUE,
          error))
    return FALSE;
  int64_t c = x->shape[0], f = x->shape[1], h = x->shape[2], w = x->shape[3];
  if (h % ph || w % pw) {
    g_autofree char *have = lb_tensor_shape_string (x);
    return lb_cpu_fail (error, "patchify: x is f32 %s, expected H and W "
        "multiples of the patch %d x %d", have, ph, pw);
  }
  int64_t hp = h / ph, wp = w / pw, feat = c * ph * pw;
  int64_t yshape[2] = { f * hp * wp, feat };
  if (!lb_cuda_check_t (s, "patchify", "y", y, LB_DTYPE_F32, 2, yshape, TRUE,
          error))
    return FALSE;
  return launched (lb_cuda_launch_patchify (stream_of (s), x->data, y->data,
          c, f, h, w, ph, pw), "patchify", error);
}

static gboolean
cuda_unpatchify (LbStream * s, const LbTensor * z, int ph, int pw,
    LbTensor * y, GError ** error)
{
  int64_t any4[4] = { LB_ANY, LB_ANY, LB_ANY, LB_ANY };
  if (!check_patch ("unpatchify", ph, pw, error) ||
      !lb_cuda_check_t (s, "unpatchify", "y", y, LB_DTYPE_F32, 4, any4, TRUE,
          error))
    return FALSE;
  int64_t c = y->shape[0], f = y->shape[1], h = y->shape[2], w = y->shape[3];
  if (h % ph || w % pw) {
    g_autofree char *have = lb_tensor_shape_string (y);
    return lb_cpu_fail (error, "unpatchify: y is f32 %s, expected H and W "
        "multiples of the patch %d x %d", have, ph, pw);
  }
  int64_t hp = h / ph, wp = w / pw, feat = c * ph * pw;
  int64_t zshape[2] = { f * hp * wp, feat };
  if (!lb_cuda_check_t (s, "unpatchify", "z", z, LB_DTYPE_F32, 2, zshape,
          TRUE, error))
    return FALSE;
  return launched (lb_cuda_launch_unpatchify (stream_of (s), z->data, y->data,
          c, f, h, w, ph, pw), "unpatchify", error);
}

static gboolean
cuda_resize_bicubic (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  int64_t any3[3] = { LB_ANY, LB_ANY, LB_ANY };
  if (!lb_cuda_check_t (s, "resize_bicubic", "x", x, LB_DTYPE_F32, 3, any3,
          TRUE, error))
    return FALSE;
  int64_t yshape[3] = { x->shape[0], LB_ANY, LB_ANY };
  if (!lb_cuda_check_t (s, "resize_bicubic", "y", y, LB_DTYPE_F32, 3, yshape,
          TRUE, error))
    return FALSE;
  int64_t c = x->shape[0], h = x->shape[1], w = x->shape[2];
  int64_t ho = y->shape[1], wo = y->shape[2];
  if ((h == 0 || w == 0) && ho * wo > 0) {
    g_autofree char *have = lb_tensor_shape_string (x);
    return lb_cpu_fail (error, "resize_bicubic: x is f32 %s, expected a "
        "non-empty image", have);
  }
  if (c == 0 || ho == 0 || wo == 0)
    return TRUE;
  return launched (lb_cuda_launch_resize_bicubic (stream_of (s), x->data,
          y->data, c, h, w, ho, wo), "resize_bicubic", error);
}

/**
 * lb_cuda_ops:
 *
 * The CUDA backend's op table: complete (lb_ops_first_missing() is %NULL).
 */
const LbOps lb_cuda_ops = {
  .gemm = lb_cuda_gemm,
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
};

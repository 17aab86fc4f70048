/* lingbot-gst: backend-independent argument checks of the op table
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Every op of kernels/ops.h validates its arguments here, whatever the
 * backend: dtypes, shapes and strides, with the uniform messages
 * "op: arg is f32 [7], expected [8]" (%LB_ERROR_SHAPE).  These functions
 * look at tensor descriptors only (never at the data, never at the
 * device), so a CUDA tensor is checked exactly as a CPU one.  Device
 * placement is each backend's own check, made with lb_check_device() /
 * lb_check_devices() before the op's lb_check_<op>().
 *
 * Some checks also return the geometry they derived (row strides, output
 * extents) so that the op does not compute it twice.
 */
#pragma once

#include "kernels/tensor.h"
#include "kernels/error.h"
#include "kernels/conv-input.h"

#include <stdarg.h>

G_BEGIN_DECLS

/* Shape wildcard for lb_check_tensor(). */
#define LB_ANY ((int64_t) -1)

/* ---- generic helpers ---- */

gboolean lb_check_fail (GError ** error, const char *format, ...)
    G_GNUC_PRINTF (2, 3);
gboolean lb_check_device (const LbTensor * t, LbDevice device,
    const char *op, const char *arg, GError ** error);
gboolean lb_check_devices_valist (LbDevice device, const char *op,
    GError ** error, const char *first_arg, va_list args);
gboolean lb_check_devices (LbDevice device, const char *op,
    GError ** error, const char *first_arg, ...) G_GNUC_NULL_TERMINATED;
gboolean lb_check_tensor (const char *op, const char *arg,
    const LbTensor * t, LbDType dtype, int ndim, const int64_t * shape,
    gboolean contiguous, GError ** error);
gboolean lb_check_rows (const char *op, const char *arg,
    const LbTensor * t, int64_t cols, int64_t * rows, int64_t * ld,
    GError ** error);

/* ---- per-op checks ---- */

/**
 * LbGemmGeom:
 * @m: rows of x and y
 * @n: columns of y
 * @k: inner extent
 * @xld: elements between rows of x
 * @wld: elements between rows of w as stored
 * @yld: elements between rows of y
 */
typedef struct
{
  int64_t m, n, k;
  int64_t xld, wld, yld;
} LbGemmGeom;

gboolean lb_check_gemm (const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, const LbTensor * y,
    LbGemmGeom * g, GError ** error);
gboolean lb_check_gemm_gelu_tanh (const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, const LbTensor * y,
    LbGemmGeom * g, GError ** error);
gboolean lb_check_gemm_fp8 (const LbTensor * x, const LbTensor * w,
    const LbTensor * sw, const LbTensor * bias, const LbTensor * y,
    LbGemmGeom * g, GError ** error);
gboolean lb_check_gemm_fp8_q (const LbTensor * x, const LbTensor * sx,
    const LbTensor * w, const LbTensor * sw, const LbTensor * bias,
    const LbTensor * y, LbGemmGeom * g, GError ** error);
gboolean lb_check_gemm_fp8_gelu_q (const LbTensor * x, const LbTensor * sx,
    const LbTensor * w, const LbTensor * sw, const LbTensor * bias,
    const LbTensor * y, const LbTensor * sy, LbGemmGeom * g, GError ** error);

/**
 * LbRowsGeom:
 * @m: rows
 * @d: elements per row
 * @x_ld: row stride of x (a for add/mul)
 * @y_ld: row stride of y
 * @s_ld: row stride of modulate's scale, gated_residual's gate, add/mul's
 *   b; 0 when it is one [D] row broadcast over the rows (or absent)
 * @h_ld: row stride of modulate's shift; 0 when broadcast
 * @g_ld: row stride of gated_residual_modulate's gate; 0 when broadcast
 *   or absent (its scale and shift use @s_ld and @h_ld)
 * @o_ld: row stride of residual_norm_modulate's out
 *
 * The rows view of the operands of the row ops (norms, modulation,
 * elementwise).
 */
typedef struct
{
  int64_t m, d;
  int64_t x_ld, y_ld, s_ld, h_ld;
  int64_t g_ld, o_ld;
} LbRowsGeom;

gboolean lb_check_layer_norm (const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, const LbTensor * y, LbRowsGeom * g, GError ** error);
gboolean lb_check_rms_norm (const LbTensor * x, const LbTensor * weight,
    const LbTensor * y, LbRowsGeom * g, GError ** error);
gboolean lb_check_modulate (const LbTensor * x, const LbTensor * scale,
    const LbTensor * shift, const LbTensor * y, LbRowsGeom * g,
    GError ** error);
gboolean lb_check_gated_residual (const LbTensor * x, const LbTensor * y,
    const LbTensor * gate, LbRowsGeom * g, GError ** error);
/* gelu_tanh, silu, scale: y = f(x), @op names the op in messages. */
gboolean lb_check_unary (const char *op, const LbTensor * x,
    const LbTensor * y, LbRowsGeom * g, GError ** error);
/* add, mul: y = f(a, b), b of the shape of a or one [D] row. */
gboolean lb_check_binary (const char *op, const LbTensor * a,
    const LbTensor * b, const LbTensor * y, LbRowsGeom * g, GError ** error);

gboolean lb_check_rope_3d (const LbTensor * x, const LbTensor * cos,
    const LbTensor * sin, int64_t grid_f, int64_t grid_h, int64_t grid_w,
    int64_t frame_offset, int64_t row_offset, GError ** error);
gboolean lb_check_attention (const LbTensor * q, const LbTensor * k,
    const LbTensor * v, const LbTensor * bias, const LbTensor * key_mask,
    const LbTensor * out, GError ** error);

/**
 * LbConvGeom:
 * @cin: input channels
 * @cout: output channels
 * @h: input height
 * @w: input width
 * @kt: kernel frames (1 for conv2d)
 * @kh: kernel height
 * @kw: kernel width
 * @ho: output height
 * @wo: output width
 * @t: conv3d_causal: frames of x; conv2d: batch elements (1 unbatched)
 * @tc: conv3d_causal: frames of the cache (0 without); conv2d: 0
 * @zeros: conv3d_causal: leading zero frames; conv2d: 0
 * @tout: conv3d_causal: output frames; conv2d: batch elements
 */
typedef struct
{
  int64_t cin, cout, h, w;
  int64_t kt, kh, kw, ho, wo;
  int64_t t, tc, zeros, tout;
} LbConvGeom;

gboolean lb_check_conv3d_causal (const LbTensor * x,
    const LbTensor * cache, const LbTensor * weight, const LbTensor * bias,
    int pad_h, int pad_w, int stride_h, int stride_w, const LbTensor * y,
    LbConvGeom * g, GError ** error);
gboolean lb_check_conv2d (const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, int pad_h, int pad_w, int stride_h, int stride_w,
    const LbTensor * y, LbConvGeom * g, GError ** error);
LbConvIn lb_conv_input (const LbConvGeom * g, gboolean is_2d,
    const float *cache, const float *x, int pad_h, int pad_w, int stride_h,
    int stride_w);

gboolean lb_check_upsample_nearest2x (const LbTensor * x,
    const LbTensor * y, GError ** error);
gboolean lb_check_patchify (const LbTensor * x, int ph, int pw,
    const LbTensor * y, GError ** error);
gboolean lb_check_unpatchify (const LbTensor * z, int ph, int pw,
    const LbTensor * y, GError ** error);
gboolean lb_check_resize_bicubic (const LbTensor * x, const LbTensor * y,
    GError ** error);

/* ---- strided ops ---- */

/**
 * LbStrided5:
 * @shape: the extents of y left-padded with 1 to 5 dims
 * @ys: strides of y (0 in padded dims)
 * @xs: strides of x (0 in padded dims, all 0 without x)
 * @cdim: the padded index of the tensor's dim 0 (5 - ndim)
 *
 * The 5-D walk of the strided ops (copy, clamp, fill, accumulate,
 * latent_affine).
 */
typedef struct
{
  int64_t shape[5];
  int64_t ys[5];
  int64_t xs[5];
  int cdim;
} LbStrided5;

/* clamp, fill (@x %NULL), accumulate (copy: lb_check_copy(), which also
 * takes bf16): f32 y of 1..5 dims, any strides, x (when given) f32 of y's
 * shape. */
gboolean lb_check_strided (const char *op, const LbTensor * x,
    const LbTensor * y, LbStrided5 * g, GError ** error);
/* fill: y f32 or bf16 of 1..5 dims, any strides. */
gboolean lb_check_fill (const LbTensor * y, LbStrided5 * g, GError ** error);
/* copy: x and y each f32 or bf16, same shape, any strides. */
gboolean lb_check_copy (const LbTensor * x, const LbTensor * y,
    LbStrided5 * g, GError ** error);
gboolean lb_check_latent_affine (const LbTensor * x, const LbTensor * mean,
    const LbTensor * inv_std, const LbTensor * y, LbStrided5 * g,
    GError ** error);
gboolean lb_check_channel_rms_norm (const LbTensor * x,
    const LbTensor * gamma, const LbTensor * y, GError ** error);
gboolean lb_check_upsample_nearest2x_halo (const LbTensor * x,
    const LbTensor * y, GError ** error);

/* ---- fused DiT ops ---- */

gboolean lb_check_norm_modulate (const LbTensor * x,
    const LbTensor * weight, const LbTensor * bias, const LbTensor * scale,
    const LbTensor * shift, const LbTensor * y, LbRowsGeom * g,
    GError ** error);
gboolean lb_check_rms_norm_rope (const LbTensor * x,
    const LbTensor * weight, const LbTensor * cos, const LbTensor * sin,
    int64_t grid_f, int64_t grid_h, int64_t grid_w, int64_t frame_offset,
    int64_t row_offset, const LbTensor * y, LbRowsGeom * g, GError ** error);
gboolean lb_check_gated_residual_modulate (const LbTensor * x,
    const LbTensor * y, const LbTensor * gate, const LbTensor * scale,
    const LbTensor * shift, LbRowsGeom * g, GError ** error);

gboolean lb_check_norm_fp8 (const LbTensor * x, const LbTensor * y,
    const LbTensor * gate, const LbTensor * weight, const LbTensor * bias,
    const LbTensor * scale, const LbTensor * shift, const LbTensor * q,
    const LbTensor * sq, LbRowsGeom * g, GError ** error);
gboolean lb_check_residual_norm_modulate (const LbTensor * x,
    const LbTensor * y, const LbTensor * gate, const LbTensor * weight,
    const LbTensor * bias, const LbTensor * scale, const LbTensor * shift,
    const LbTensor * out, LbRowsGeom * g, GError ** error);

/* ---- camera control ---- */

gboolean lb_check_ray_map (const LbTensor * rel_poses, int width,
    int height, int row0, const LbTensor * y, GError ** error);

G_END_DECLS

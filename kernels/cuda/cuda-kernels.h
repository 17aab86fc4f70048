/* lingbot-gst: CUDA kernel launchers (implemented in the .cu files)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Plain C declarations with no GLib, so that nvcc (C++) includes this file
 * alone.  Every launcher is asynchronous on its stream and returns the
 * launch status (cudaGetLastError after the launch).  Pointers are device
 * pointers; extents are in elements.
 */
#pragma once

#include "kernels/conv-input.h"

#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C"
{
#endif

/* ---- kernel launchers (*.cu); all asynchronous on @st ---- */

  typedef enum
  {
    LB_CUDA_EW_GELU_TANH,
    LB_CUDA_EW_SILU,
    LB_CUDA_EW_SCALE,
    LB_CUDA_EW_ADD,
    LB_CUDA_EW_MUL,
  } LbCudaEwOp;

/* y[i, j] = f(a[i, j], b[i*bld + j]); b may be NULL (unary), bld 0 is a
 * broadcast row. */
  cudaError_t lb_cuda_launch_elementwise (cudaStream_t st, LbCudaEwOp op,
      const float *a, int64_t ald, const float *b, int64_t bld, float *y,
      int64_t yld, int64_t m, int64_t d, float alpha, float beta);
/* A unary op (GELU, SiLU, scale) into bfloat16 y: y[i, j] = bf16(f(a[i,
 * j])), the f32 value of lb_cuda_launch_elementwise() rounded to nearest
 * even (the next bf16 GEMM's input, spec 1.11). */
  cudaError_t lb_cuda_launch_unary_bf16 (cudaStream_t st, LbCudaEwOp op,
      const float *a, int64_t ald, uint16_t * y, int64_t yld, int64_t m,
      int64_t d, float alpha, float beta);

/* y = LN(x) (w, b nullable: the affine), then with @scale the modulation
 * `y * (1 + scale) + shift` (sld/hld 0 = broadcast row): the layer_norm
 * and norm_modulate ops (kernels-norm.cu); one block per row, statistics
 * in double.  y is f32, or bf16 bits when @y_bf16 (each value rounded to
 * nearest even, lb_f32_to_bf16()); an f32 y may be x. */
  cudaError_t lb_cuda_launch_norm_modulate (cudaStream_t st, const float *x,
      int64_t xld, const float *w, const float *b, float eps,
      const float *scale, int64_t sld, const float *shift, int64_t hld,
      void *y, int y_bf16, int64_t yld, int64_t m, int64_t d);
/* The same after the gated residual `x += gate * ry` in place (@ry NULL:
 * none; @gate NULL: 1; gld 0 = broadcast row): residual_norm_modulate.
 * y must not overlap x. */
  cudaError_t lb_cuda_launch_residual_norm_modulate (cudaStream_t st,
      float *x, int64_t xld, const float *ry, int64_t ryld, const float *gate,
      int64_t gld, const float *w, const float *b, float eps,
      const float *scale, int64_t sld, const float *shift, int64_t hld,
      void *y, int y_bf16, int64_t yld, int64_t m, int64_t d);
/* The norm_fp8 op: the row of lb_cuda_launch_residual_norm_modulate()
 * (@ry NULL: no residual; @scale NULL: no modulation) computed twice in
 * registers, first for its amax, then quantised to e4m3 codes q [m, d]
 * (row stride qld) with the row scales sq [m] (amax / 448, 1 for a zero
 * row), the formulas of lb_cuda_launch_quantize_e4m3_rows().  q must not
 * overlap x. */
  cudaError_t lb_cuda_launch_norm_fp8 (cudaStream_t st, float *x,
      int64_t xld, const float *ry, int64_t ryld, const float *gate,
      int64_t gld, const float *w, const float *b, float eps,
      const float *scale, int64_t sld, const float *shift, int64_t hld,
      uint8_t * q, int64_t qld, float *sq, int64_t m, int64_t d);
  cudaError_t lb_cuda_launch_rms_norm (cudaStream_t st, const float *x,
      int64_t xld, const float *w, float eps, float *y, int64_t yld, int64_t m,
      int64_t d);
/* y = x * (1 + scale) + shift; sld/hld 0 = broadcast row. */
  cudaError_t lb_cuda_launch_modulate (cudaStream_t st, const float *x,
      int64_t xld, const float *scale, int64_t sld, const float *shift,
      int64_t hld, float *y, int64_t yld, int64_t m, int64_t d);
/* x += gate * y (gate NULL: 1; gld 0 = broadcast row). */
  cudaError_t lb_cuda_launch_gated_residual (cudaStream_t st, float *x,
      int64_t xld, const float *y, int64_t yld, const float *gate, int64_t gld,
      int64_t m, int64_t d);

  cudaError_t lb_cuda_launch_rope_3d (cudaStream_t st, float *x, int64_t s0,
      int64_t s1, int64_t n, int64_t nh, int64_t hd, const float *cos,
      const float *sin, int64_t grid_h, int64_t grid_w, int64_t frame_offset,
      int64_t row_offset);

/* k16/v16: a bf16 KV cache (spec 1.11): when k16 is set the keys and
 * values are bfloat16 bits at k16/v16 (strides ks0.. in elements) and the
 * kernels do not read k/v (cuda-ops.c leaves the same addresses there for
 * cuda-cudnn-sdpa.c, which takes the dtype as a flag); they widen them
 * exactly (the FP32 flash kernel, the GEMM path) or load them as they are
 * (the BF16 tensor-core kernel, which rounds f32 K/V to the same bits).
 * NULL for f32 K/V.  q16 / out16 likewise: a bf16 q (widened exactly, or
 * loaded as it is by the tensor-core kernel) and a bf16 output (the f32
 * result rounded to nearest even); q / out then carry the same addresses
 * and are not read or written by the kernels. */
  typedef struct
  {
    const float *q, *k, *v;
    float *out;
    int64_t qs0, qs1, ks0, ks1, vs0, vs1, os0, os1;
    const float *bias;          /* [H, Nq, Nk] contiguous or NULL */
    const unsigned char *mask;  /* [Nk] or NULL */
    int64_t nq, nk, nh, hd;
    float scale;
    const uint16_t *k16, *v16;
    const uint16_t *q16;
    uint16_t *out16;
  } LbCudaAttnArgs;

/* Fused flash-style kernel; hd <= LB_CUDA_FLASH_MAX_HD. */
#define LB_CUDA_FLASH_MAX_HD 128
  cudaError_t lb_cuda_launch_flash_attention (cudaStream_t st,
      const LbCudaAttnArgs * a);
/* Tensor-core flash kernel for LB_MATH_BF16 streams (kernels-attention-
 * bf16.cu): q, k, v rounded to bf16 (nearest even) on their way to shared
 * memory, S = QK^T and O = PV with f32 accumulation, softmax statistics in
 * f32, P rounded to bf16.  hd must be 64 or 128 (cudaErrorInvalidValue
 * otherwise); needs sm_80 or newer. */
  cudaError_t lb_cuda_launch_flash_attention_bf16 (cudaStream_t st,
      const LbCudaAttnArgs * a);
/* Row softmax of s[rows, nk] (ld nk) in place for the GEMM path: logits
 * `s * scale + bias[h, q0 + r, :]`, hidden keys (mask) excluded; a row
 * with no visible key becomes zeros. */
  cudaError_t lb_cuda_launch_softmax_rows (cudaStream_t st, float *s,
      int64_t rows, int64_t nk, float scale, const float *bias_rows,
      const unsigned char *mask);

/* col[K][nr*wo] for output rows [r0, r0 + nr) of output frame t. */
  cudaError_t lb_cuda_launch_im2col (cudaStream_t st, const LbConvIn * c,
      int64_t t, int64_t r0, int64_t nr, float *col);
/* y[co*ycs + e] = bias[co] (or 0) for e < n, co < cout. */
  cudaError_t lb_cuda_launch_fill_bias (cudaStream_t st, float *y, int64_t ycs,
      int64_t cout, int64_t n, const float *bias);

/* ---- cuDNN convolution epilogue (kernels-conv.cu, cuda-cudnn-conv.c) ---- */

/* y[(b*cout + co)*plane + e] += bias[co] for b < nb, co < cout, e < plane:
 * the bias of a cuDNN convolution whose plan does not fuse it (y packed
 * [nb, cout, plane]). */
  cudaError_t lb_cuda_launch_add_channel_bias (cudaStream_t st, float *y,
      int64_t nb, int64_t cout, int64_t plane, const float *bias);
/* y[b*yb + j*yj + i] = x[b*xb + i*xi + j] (+ bias[j], bias nullable) for
 * b < nb, i < ni, j < nj: per b, an [ni, nj] matrix with unit stride
 * along j transposed into one with unit stride along i.  x and y are f32
 * (*_bf16 0) or bfloat16 bits (1, rounded as lb_f32_to_bf16(); not both).
 * The layout changes of the channels-last cuDNN convolutions: NCDHW f32
 * -> NDHWC bf16 for x and the weight, NDHWC -> NCDHW f32 (+ bias) for y. */
  cudaError_t lb_cuda_launch_transpose_convert (cudaStream_t st, const void *x,
      int x_bf16, int64_t xb, int64_t xi, void *y, int y_bf16, int64_t yb,
      int64_t yj, int64_t nb, int64_t ni, int64_t nj, const float *bias);

  cudaError_t lb_cuda_launch_upsample_nearest2x (cudaStream_t st,
      const float *x, float *y, int64_t rows, int64_t w);
  cudaError_t lb_cuda_launch_patchify (cudaStream_t st, const float *x,
      float *y, int64_t c, int64_t f, int64_t h, int64_t w, int ph, int pw);
  cudaError_t lb_cuda_launch_unpatchify (cudaStream_t st, const float *z,
      float *y, int64_t c, int64_t f, int64_t h, int64_t w, int ph, int pw);
  cudaError_t lb_cuda_launch_resize_bicubic (cudaStream_t st, const float *x,
      float *y, int64_t c, int64_t h, int64_t w, int64_t ho, int64_t wo);
  cudaError_t lb_cuda_launch_fill (cudaStream_t st, float *y, int64_t n,
      float value);

/* ---- strided ops (kernels-strided.cu) ---- */

  typedef enum
  {
    LB_CUDA_ST_COPY,            /* y = x */
    LB_CUDA_ST_CLAMP,           /* y = clamp(x, a, b), NaN kept */
    LB_CUDA_ST_FILL,            /* y = a */
    LB_CUDA_ST_ACCUMULATE,      /* y += x */
    LB_CUDA_ST_NORMALIZE,       /* y = (x - mean[c]) * inv_std[c] */
    LB_CUDA_ST_DENORMALIZE,     /* y = x / inv_std[c] + mean[c] */
  } LbCudaStridedOp;

/* A 5-D walk (LbStrided5 of kernels/ops-check.h): extents, strides of y
 * and x in elements, and the index of the channel dim for (de)normalise. */
  typedef struct
  {
    int64_t shape[5];
    int64_t ys[5];
    int64_t xs[5];
    int cdim;
  } LbCudaStrided5;

  cudaError_t lb_cuda_launch_strided (cudaStream_t st, LbCudaStridedOp op,
      const LbCudaStrided5 * g, const float *x, float *y, float a, float b,
      const float *mean, const float *inv_std);
/* The copy op between dtypes over the walk @g: x and y each f32 (*_bf16
 * 0) or bfloat16 bits (1); f32 -> bf16 rounds as lb_f32_to_bf16() (nearest
 * even, NaN kept), bf16 -> f32 widens exactly, equal dtypes copy bits. */
  cudaError_t lb_cuda_launch_copy_convert (cudaStream_t st,
      const LbCudaStrided5 * g, const void *x, int x_bf16, void *y, int y_bf16);
/* The fill op on a bf16 view (bits of bf16_round(value)). */
  cudaError_t lb_cuda_launch_fill_bf16 (cudaStream_t st,
      const LbCudaStrided5 * g, void *y, float value);
/* Wan RMS_norm over C of x [C, T, H, W] (strides xs, ys); y f32 or, with
 * y_bf16, bfloat16 bits. */
  cudaError_t lb_cuda_launch_channel_rms_norm (cudaStream_t st, const float *x,
      const int64_t * xs, const float *gamma, int silu, void *y, int y_bf16,
      const int64_t * ys, int64_t c, int64_t t, int64_t h, int64_t w);
/* y [C, T, ho, 2w] from x [C, T, ho/2 + 1, w] (strides xs0..2, unit last
 * stride): y[c, t, r, j] = x[c, t, (r + 1) / 2, j / 2]; y f32 contiguous,
 * or with y_bf16 bfloat16 bits channels-last (NDHWC). */
  cudaError_t lb_cuda_launch_upsample_nearest2x_halo (cudaStream_t st,
      const float *x, int64_t xs0, int64_t xs1, int64_t xs2, void *y,
      int y_bf16, int64_t c, int64_t t, int64_t ho, int64_t w);

/* ---- dtype conversion (kernels-convert.cu) ---- */

/* y[i * yld + j] = bf16(x[i * xld + j]) for i < m, j < k: bfloat16 bits,
 * rounded exactly as lb_f32_to_bf16() (nearest even, overflow to inf, NaN
 * kept), so host and device agree bit for bit.  The bf16 GEMM's
 * activation conversion, usable for weights too. */
  cudaError_t lb_cuda_launch_f32_to_bf16 (cudaStream_t st, const float *x,
      int64_t xld, uint16_t * y, int64_t yld, int64_t m, int64_t k);

/* ---- the fp8 GEMM (kernels-fp8.cu) ---- */

/* Per row i < m of x (row stride xld, k elements): sx[i] = amax / 448
 * (1 for a zero row), q[i * qld + j] = e4m3 (x / sx[i]) (nearest even,
 * saturating to +-448, NaN kept), as lb_quantize_e4m3_row().  One block
 * per row (m < 2^31). */
  cudaError_t lb_cuda_launch_quantize_e4m3_rows (cudaStream_t st,
      const float *x, int64_t xld, int64_t m, int64_t k, uint8_t * q,
      int64_t qld, float *sx);

/* y[i, j] = (acc[i, j] sx[i]) sw[j] + (beta y[i, j] + bias[j]) for i < m,
 * j < n (bias nullable; beta 0: y not read), each step one f32 rounding;
 * acc may be y itself (row stride ald == yld) when beta is 0. */
  cudaError_t lb_cuda_launch_fp8_epilogue (cudaStream_t st, const float *acc,
      int64_t ald, int64_t m, int64_t n, const float *sx, const float *sw,
      const float *bias, float beta, float *y, int64_t yld);
/* gemm_fp8_gelu_q's epilogue, one block per row: per row i < m the
 * values h[j] = gelu_tanh ((acc[i, j] sx[i]) sw[j] + bias[j]) (j < n;
 * @acc NULL: h[j] = gelu_tanh (bias[j] or 0), the K = 0 product; bias
 * nullable), evaluated twice in registers (amax, then codes), quantised as
 * lb_cuda_launch_quantize_e4m3_rows() quantises: q [m, n] (row stride
 * qld) and sq [m]. */
  cudaError_t lb_cuda_launch_fp8_gelu_quantize (cudaStream_t st,
      const float *acc, int64_t ald, int64_t m, int64_t n, const float *sx,
      const float *sw, const float *bias, uint8_t * q, int64_t qld, float *sq);

/* ---- attention operands for cuDNN SDPA (kernels-convert.cu) ---- */

/* y[i*ys0 + h*ys1 + e] = bf16(x[i*xs0 + h*xs1 + e]) for i < n0, h < n1,
 * e < n2 (the rounding of lb_cuda_launch_f32_to_bf16()). */
  cudaError_t lb_cuda_launch_f32_to_bf16_3d (cudaStream_t st, const float *x,
      int64_t xs0, int64_t xs1, uint16_t * y, int64_t ys0, int64_t ys1,
      int64_t n0, int64_t n1, int64_t n2);
/* y[i*ys0 + h*ys1 + e] = x[i*xs0 + h*xs1 + e] widened from bfloat16 bits
 * (exact). */
  cudaError_t lb_cuda_launch_bf16_to_f32_3d (cudaStream_t st,
      const uint16_t * x, int64_t xs0, int64_t xs1, float *y, int64_t ys0,
      int64_t ys1, int64_t n0, int64_t n1, int64_t n2);

/* ---- fused DiT ops (kernels-fused.cu) ---- */

/* y[t, h, :] = RoPE(RMSNorm(x[t, :]) * w) for x [n, nh * hd] (row stride
 * xld) and y [n, nh, hd] (strides ys0, ys1, 1): the mean square over the
 * whole row in double, then the rotation of lb_cuda_launch_rope_3d() at
 * positions (frame_offset + f, row_offset + i, j).  w nullable; y f32,
 * which may be x seen as [n, nh, hd], or bfloat16 bits when @y_bf16 (a
 * bf16 KV cache's slots: each element the f32 value rounded as
 * lb_f32_to_bf16(), nearest even). */
  cudaError_t lb_cuda_launch_rms_norm_rope (cudaStream_t st, const float *x,
      int64_t xld, const float *w, float eps, void *y, int y_bf16,
      int64_t ys0, int64_t ys1, int64_t n, int64_t nh, int64_t hd,
      const float *cos, const float *sin, int64_t grid_h, int64_t grid_w,
      int64_t frame_offset, int64_t row_offset);
/* x = (x + gate * y) * (1 + scale) + shift (gate NULL: 1; gld/sld/hld 0 =
 * broadcast row). */
  cudaError_t lb_cuda_launch_gated_residual_modulate (cudaStream_t st,
      float *x, int64_t xld, const float *y, int64_t yld, const float *gate,
      int64_t gld, const float *scale, int64_t sld, const float *shift,
      int64_t hld, int64_t m, int64_t d);

/* ---- camera control (kernels-raymap.cu) ---- */

/* The ray_map op (kernels/ops.h, spec 2.6-2.7): y [384, frames, rows, wl]
 * contiguous, latent rows [row0, row0 + rows) of the 8x-folded ray map of
 * the frames' poses [frames, 16] (row-major 4x4) with intrinsics fx, fy,
 * cx, cy in pixels; round-to-nearest intrinsics in the CPU's order, so
 * bit-identical to lb_cpu_ray_map_fill(). */
  cudaError_t lb_cuda_launch_ray_map (cudaStream_t st, const float *poses,
      float fx, float fy, float cx, float cy, int64_t frames, int64_t row0,
      int64_t rows, int64_t wl, float *y);

#ifdef __cplusplus
}
#endif

/* lingbot-gst: helpers shared by the .cu files
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "kernels/cuda/cuda-kernels.h"

#include <cuda_runtime.h>

namespace lbk {

/* Threads per block of the simple kernels. */
constexpr int kThreads = 256;

/* Blocks for a grid-stride loop over @n items (capped: the loops stride). */
static inline unsigned int
grid_for (int64_t n)
{
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1)
    b = 1;
  if (b > 65535 * 8)
    b = 65535 * 8;
  return (unsigned int)b;
}

/* Blocks for a kernel with one block per row, striding over @m rows
 * (at least 1, capped at 2^20). */
static inline unsigned int
row_grid (int64_t m)
{
  return (unsigned int)(m < 1 ? 1 : (m > 1048576 ? 1048576 : m));
}

#define LBK_GRID_STRIDE(i, n)                                                  \
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);    \
       i += (int64_t)gridDim.x * blockDim.x)

/* V consecutive floats at @p, one 16-byte access when V is 4 (@p then
 * 16-byte aligned), one float when V is 1. */
template <int V>
__device__ __forceinline__ void
ld_v (const float *p, float *v)
{
  if constexpr (V == 4) {
    const float4 a = *(const float4 *)p;
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
  } else {
    v[0] = *p;
  }
}

template <int V>
__device__ __forceinline__ void
st_v (float *p, const float *v)
{
  if constexpr (V == 4)
    *(float4 *)p = make_float4 (v[0], v[1], v[2], v[3]);
  else
    *p = v[0];
}

/* Whether rows of @d floats at the @n bases @ptrs (NULL: absent) with row
 * strides @lds (0: a broadcast row) can go 4 floats at a time: @d and
 * every stride multiples of 4, every base 16-byte aligned. */
static inline bool
rows_vec4 (int64_t d, int n, const void *const *ptrs, const int64_t *lds)
{
  if (d % 4 != 0)
    return false;
  for (int i = 0; i < n; i++)
    if (ptrs[i] && (lds[i] % 4 != 0 || ((uintptr_t)ptrs[i] & 15u) != 0))
      return false;
  return true;
}

/* Block-wide sum of a double over kThreads threads; every thread gets it. */
__device__ __forceinline__ double
block_sum (double v, double *shared /* [32] */)
{
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync (0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads (); /* shared may hold a previous result */
  if (lane == 0)
    shared[warp] = v;
  __syncthreads ();
  const int nw = (blockDim.x + 31) >> 5;
  v = lane < nw ? shared[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync (0xffffffffu, v, o);
  return v;
}

/* The row statistics of the norms, block-wide (every thread gets them),
 * accumulated in double as kernels/cpu/norm.c does: @mean and `rstd =
 * 1 / sqrt(var + eps)` of the biased variance of xr [d] (layer norm). */
__device__ __forceinline__ void
row_mean_rstd (const float *xr, int64_t d, float eps, double *red, double *mean,
    double *rstd)
{
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    s += xr[j];
  const double mu = block_sum (s, red) / (double)d;
  double v = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    double t = xr[j] - mu;
    v += t * t;
  }
  *mean = mu;
  *rstd = 1.0 / sqrt (block_sum (v, red) / (double)d + (double)eps);
}

/* `1 / sqrt(mean(x^2) + eps)` of xr [d] in double (RMS norm). */
__device__ __forceinline__ double
row_rms_inv (const float *xr, int64_t d, float eps, double *red)
{
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    s += (double)xr[j] * xr[j];
  return 1.0 / sqrt (block_sum (s, red) / (double)d + (double)eps);
}

/* The tanh GELU as `x * sigmoid(2u)` = `x / (1 + e^-2u)`, u = sqrt(2/pi)
 * (x + 0.044715 x^3), in the CPU row kernel's order (kernels/cpu/
 * rows-item.h: one fused multiply-add for x + 0.044715 x^3), every other
 * step one f32 rounding (no contraction left to the compiler): the
 * elementwise gelu_tanh and the fp8 GELU epilogue (kernels-fp8.cu) give
 * the same bits for the same input.  Only expf differs from the CPU. */
__device__ __forceinline__ float
gelu_tanh_rn (float a)
{
  const float k2 = 2.0f * 0.7978845608028654f;
  const float t = __fmaf_rn (__fmul_rn (__fmul_rn (0.044715f, a), a), a, a);
  return __fdiv_rn (a, __fadd_rn (1.0f, expf (__fmul_rn (-k2, t))));
}

__device__ __forceinline__ float
block_max (float v, float *shared /* [32] */)
{
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf (v, __shfl_xor_sync (0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads ();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads ();
  const int nw = (blockDim.x + 31) >> 5;
  v = lane < nw ? shared[lane] : -INFINITY;
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf (v, __shfl_xor_sync (0xffffffffu, v, o));
  return v;
}

/* bfloat16 <-> float on the device, bit for bit the host's lb_f32_to_bf16()
 * and lb_bf16_to_f32() (kernels/tensor.c): round to nearest, ties to even,
 * overflow to infinity, subnormals kept, a NaN stays a NaN (quiet bit set,
 * sign and high payload kept); widening is exact.  Integer arithmetic, not
 * the cuda_bf16.h intrinsics, so that every input (NaN payloads included)
 * gives the host's bits.  For a bf16 KV cache (rms_norm_rope's bf16
 * output, the converting copy, the attention kernels' bf16 K/V loads). */
__device__ __forceinline__ uint16_t
bf16_round (float v)
{
  uint32_t u = __float_as_uint (v);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float
bf16_widen (uint16_t b)
{
  return __uint_as_float ((uint32_t)b << 16);
}

/* *p as a float, for f32 or bf16 storage (templates over the two) */
__device__ __forceinline__ float
load_as_float (const float *p)
{
  return *p;
}

__device__ __forceinline__ float
load_as_float (const uint16_t *p)
{
  return bf16_widen (*p);
}

/* The K (or V) pointer of an attention call for element type KV: @f32,
 * or @b16 (a bf16 KV cache's bits) when KV is uint16_t. */
template <typename KV>
__device__ __forceinline__ const KV *
kv_base (const float *f32, const uint16_t *b16)
{
  if constexpr (sizeof (KV) == sizeof (float))
    return f32;
  else
    return b16;
}

/* *p = v, rounded by bf16_round() for bf16 storage */
__device__ __forceinline__ void
store_from_float (float *p, float v)
{
  *p = v;
}

__device__ __forceinline__ void
store_from_float (uint16_t *p, float v)
{
  *p = bf16_round (v);
}

} // namespace lbk

/* lingbot-gst: CUDA dtype conversion (f32 -> bf16)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The rounding is the integer formula of lb_f32_to_bf16() (kernels/
 * tensor.c), not the cuda_bf16.h intrinsic, so that device and host give
 * the same bits for every input, NaN payloads included: round to nearest,
 * ties to even, overflow to infinity, subnormals kept, a NaN stays a NaN
 * (quiet bit set, sign and high payload kept).
 */
#include "kernels/cuda/kernels-common.cuh"

using namespace lbk;

namespace {

__device__ __forceinline__ uint16_t
to_bf16 (float v)
{
  uint32_t u = __float_as_uint (v);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

__global__ void
to_bf16_dense (const float *__restrict__ x, uint16_t *__restrict__ y, int64_t n)
{
  LBK_GRID_STRIDE (i, n) {
    y[i] = to_bf16 (x[i]);
  }
}

__global__ void
to_bf16_rows (const float *__restrict__ x, int64_t xld,
    uint16_t *__restrict__ y, int64_t yld, int64_t m, int64_t k)
{
  LBK_GRID_STRIDE (idx, m * k) {
    int64_t i = idx / k, j = idx - i * k;
    y[i * yld + j] = to_bf16 (x[i * xld + j]);
  }
}

} // namespace

extern "C" cudaError_t
lb_cuda_launch_f32_to_bf16 (cudaStream_t st, const float *x, int64_t xld,
    uint16_t *y, int64_t yld, int64_t m, int64_t k)
{
  if (m <= 0 || k <= 0)
    return cudaSuccess;
  if ((xld == k && yld == k) || m == 1)
    to_bf16_dense<<<grid_for (m * k), kThreads, 0, st>>> (x, y, m * k);
  else
    to_bf16_rows<<<grid_for (m * k), kThreads, 0, st>>> (x, xld, y, yld, m, k);
  return cudaGetLastError ();
}

/* ---- attention operands for cuDNN SDPA (cuda-cudnn-sdpa.c) ----
 * [n0, n1, n2] views with unit last stride: q/k/v f32 -> bf16 scratch, the
 * bf16 output back into out's f32 view.  Four elements per thread along
 * dim 2 when n2, both dim-0/1 strides and both bases allow 16-byte f32 and
 * 8-byte bf16 accesses; one otherwise. */

namespace {

__device__ __forceinline__ float
from_bf16 (uint16_t b)
{
  return __uint_as_float ((uint32_t)b << 16);
}

__global__ void
to_bf16_3d (const float *__restrict__ x, int64_t xs0, int64_t xs1,
    uint16_t *__restrict__ y, int64_t ys0, int64_t ys1, int64_t n0, int64_t n1,
    int64_t n2)
{
  LBK_GRID_STRIDE (idx, n0 * n1 * n2) {
    int64_t r = idx / n2, e = idx - r * n2;
    int64_t i = r / n1, h = r - i * n1;
    y[i * ys0 + h * ys1 + e] = to_bf16 (x[i * xs0 + h * xs1 + e]);
  }
}

__global__ void
to_bf16_3d_vec4 (const float *__restrict__ x, int64_t xs0, int64_t xs1,
    uint16_t *__restrict__ y, int64_t ys0, int64_t ys1, int64_t n0, int64_t n1,
    int64_t n2)
{
  const int64_t q = n2 / 4;
  LBK_GRID_STRIDE (idx, n0 * n1 * q) {
    int64_t r = idx / q, e = (idx - r * q) * 4;
    int64_t i = r / n1, h = r - i * n1;
    const float4 v = *(const float4 *)(x + i * xs0 + h * xs1 + e);
    uint2 o;
    o.x = (uint32_t)to_bf16 (v.x) | ((uint32_t)to_bf16 (v.y) << 16);
    o.y = (uint32_t)to_bf16 (v.z) | ((uint32_t)to_bf16 (v.w) << 16);
    *(uint2 *)(y + i * ys0 + h * ys1 + e) = o;
  }
}

__global__ void
bf16_to_f32_3d (const uint16_t *__restrict__ x, int64_t xs0, int64_t xs1,
    float *__restrict__ y, int64_t ys0, int64_t ys1, int64_t n0, int64_t n1,
    int64_t n2)
{
  LBK_GRID_STRIDE (idx, n0 * n1 * n2) {
    int64_t r = idx / n2, e = idx - r * n2;
    int64_t i = r / n1, h = r - i * n1;
    y[i * ys0 + h * ys1 + e] = from_bf16 (x[i * xs0 + h * xs1 + e]);
  }
}

__global__ void
bf16_to_f32_3d_vec4 (const uint16_t *__restrict__ x, int64_t xs0, int64_t xs1,
    float *__restrict__ y, int64_t ys0, int64_t ys1, int64_t n0, int64_t n1,
    int64_t n2)
{
  const int64_t q = n2 / 4;
  LBK_GRID_STRIDE (idx, n0 * n1 * q) {
    int64_t r = idx / q, e = (idx - r * q) * 4;
    int64_t i = r / n1, h = r - i * n1;
    const uint2 v = *(const uint2 *)(x + i * xs0 + h * xs1 + e);
    float4 o;
    o.x = from_bf16 ((uint16_t)(v.x & 0xffffu));
    o.y = from_bf16 ((uint16_t)(v.x >> 16));
    o.z = from_bf16 ((uint16_t)(v.y & 0xffffu));
    o.w = from_bf16 ((uint16_t)(v.y >> 16));
    *(float4 *)(y + i * ys0 + h * ys1 + e) = o;
  }
}

/* Four elements per thread: n2 and the f32 strides multiples of 4, the
 * bf16 strides of 4 (8 bytes), the bases 16- and 8-byte aligned. */
inline bool
vec4_ok (const void *f32, int64_t fs0, int64_t fs1, const void *b16,
    int64_t bs0, int64_t bs1, int64_t n2)
{
  return n2 % 4 == 0 && fs0 % 4 == 0 && fs1 % 4 == 0 && bs0 % 4 == 0
         && bs1 % 4 == 0 && ((uintptr_t)f32 & 15u) == 0
         && ((uintptr_t)b16 & 7u) == 0;
}

} // namespace

extern "C" cudaError_t
lb_cuda_launch_f32_to_bf16_3d (cudaStream_t st, const float *x, int64_t xs0,
    int64_t xs1, uint16_t *y, int64_t ys0, int64_t ys1, int64_t n0, int64_t n1,
    int64_t n2)
{
  if (n0 <= 0 || n1 <= 0 || n2 <= 0)
    return cudaSuccess;
  if (vec4_ok (x, xs0, xs1, y, ys0, ys1, n2))
    to_bf16_3d_vec4<<<grid_for (n0 * n1 * (n2 / 4)), kThreads, 0, st>>> (
        x, xs0, xs1, y, ys0, ys1, n0, n1, n2);
  else
    to_bf16_3d<<<grid_for (n0 * n1 * n2), kThreads, 0, st>>> (
        x, xs0, xs1, y, ys0, ys1, n0, n1, n2);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_bf16_to_f32_3d (cudaStream_t st, const uint16_t *x, int64_t xs0,
    int64_t xs1, float *y, int64_t ys0, int64_t ys1, int64_t n0, int64_t n1,
    int64_t n2)
{
  if (n0 <= 0 || n1 <= 0 || n2 <= 0)
    return cudaSuccess;
  if (vec4_ok (y, ys0, ys1, x, xs0, xs1, n2))
    bf16_to_f32_3d_vec4<<<grid_for (n0 * n1 * (n2 / 4)), kThreads, 0, st>>> (
        x, xs0, xs1, y, ys0, ys1, n0, n1, n2);
  else
    bf16_to_f32_3d<<<grid_for (n0 * n1 * n2), kThreads, 0, st>>> (
        x, xs0, xs1, y, ys0, ys1, n0, n1, n2);
  return cudaGetLastError ();
}

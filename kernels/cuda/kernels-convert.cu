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
    return (uint16_t) ((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t) (u >> 16);
}

__global__ void
to_bf16_dense (const float *__restrict__ x, uint16_t * __restrict__ y,
    int64_t n)
{
  LBK_GRID_STRIDE (i, n) {
    y[i] = to_bf16 (x[i]);
  }
}

__global__ void
to_bf16_rows (const float *__restrict__ x, int64_t xld,
    uint16_t * __restrict__ y, int64_t yld, int64_t m, int64_t k)
{
  LBK_GRID_STRIDE (idx, m * k) {
    int64_t i = idx / k, j = idx - i * k;
    y[i * yld + j] = to_bf16 (x[i * xld + j]);
  }
}

}  // namespace

extern "C" cudaError_t
lb_cuda_launch_f32_to_bf16 (cudaStream_t st, const float *x, int64_t xld,
    uint16_t * y, int64_t yld, int64_t m, int64_t k)
{
  if (m <= 0 || k <= 0)
    return cudaSuccess;
  if ((xld == k && yld == k) || m == 1)
    to_bf16_dense <<< grid_for (m * k), kThreads, 0, st >>> (x, y, m * k);
  else
    to_bf16_rows <<< grid_for (m * k), kThreads, 0, st >>> (x, xld, y, yld,
        m, k);
  return cudaGetLastError ();
}

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
  return (unsigned int) b;
}

#define LBK_GRID_STRIDE(i, n) \
  for (int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (int64_t) gridDim.x * blockDim.x)

/* Block-wide sum of a double over kThreads threads; every thread gets it. */
__device__ __forceinline__ double
block_sum (double v, double *shared /* [32] */)
{
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync (0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads ();             /* shared may hold a previous result */
  if (lane == 0)
    shared[warp] = v;
  __syncthreads ();
  const int nw = (blockDim.x + 31) >> 5;
  v = lane < nw ? shared[lane] : 0.0;
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync (0xffffffffu, v, o);
  return v;
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

}  // namespace lbk

/* lingbot-gst: CUDA im2col for the convolutions (implicit causal padding)
 * and the per-channel bias of the cuDNN path
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The unfold of kernels/cpu/conv.c: row k = (ci, dt, dy, dx) of the
 * weight's own layout, column (r, o) of the output block.  The temporal
 * source of output frame t, tap dt, is frame t + dt of
 * cat(zeros, cache, x), resolved per element, so the causal cache needs no
 * concatenated copy.  add_channel_bias is the epilogue of a cuDNN plan
 * that does not fuse the bias (cuda-cudnn-conv.c).
 */
#include "kernels/cuda/kernels-common.cuh"

using namespace lbk;

namespace {

__global__ void
im2col_kernel (LbCudaConvIn c, int64_t t, int64_t r0, int64_t nr, float *col)
{
  const int64_t taps = c.kt * c.kh * c.kw, kdim = c.cin * taps;
  const int64_t ncols = nr * c.wo;
  LBK_GRID_STRIDE (idx, kdim * ncols) {
    int64_t k = idx / ncols, e = idx - k * ncols;
    int64_t r = e / c.wo, o = e - r * c.wo;
    int64_t ci = k / taps, rem = k - ci * taps;
    int64_t dt = rem / (c.kh * c.kw), dy = (rem / c.kw) % c.kh;
    int64_t dx = rem % c.kw;
    int64_t v = t + dt;
    int64_t ih = (r0 + r) * c.sh - c.ph + dy, iw = o * c.sw - c.pw + dx;
    float val = 0.0f;
    if (v >= c.zeros && ih >= 0 && ih < c.h && iw >= 0 && iw < c.w) {
      v -= c.zeros;
      const float *src = v < c.cache_t ?
          c.cache + ci * c.cache_cs + v * c.h * c.w :
          c.x + ci * c.x_cs + (v - c.cache_t) * c.x_fs;
      val = src[ih * c.w + iw];
    }
    col[idx] = val;
  }
}

__global__ void
fill_bias_kernel (float *y, int64_t ycs, int64_t cout, int64_t n,
    const float *bias)
{
  LBK_GRID_STRIDE (idx, cout * n) {
    int64_t co = idx / n, e = idx - co * n;
    y[co * ycs + e] = bias ? bias[co] : 0.0f;
  }
}

/* y[r, e] += bias[r % cout] for rows r = (b, co) of @plane elements:
 * blockIdx.y strides over the rows, x over the row's elements. */
__global__ void
add_channel_bias_kernel (float *y, int64_t rows, int64_t cout, int64_t plane,
    const float *bias)
{
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float b = bias[r % cout];
    float *yr = y + r * plane;
    for (int64_t e = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
        e < plane; e += (int64_t) gridDim.x * blockDim.x)
      yr[e] += b;
  }
}

}  // namespace

extern "C" cudaError_t
lb_cuda_launch_im2col (cudaStream_t st, const LbCudaConvIn * c, int64_t t,
    int64_t r0, int64_t nr, float *col)
{
  int64_t n = c->cin * c->kt * c->kh * c->kw * nr * c->wo;
  if (n <= 0)
    return cudaSuccess;
  im2col_kernel <<< grid_for (n), kThreads, 0, st >>> (*c, t, r0, nr, col);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_fill_bias (cudaStream_t st, float *y, int64_t ycs,
    int64_t cout, int64_t n, const float *bias)
{
  if (cout <= 0 || n <= 0)
    return cudaSuccess;
  fill_bias_kernel <<< grid_for (cout * n), kThreads, 0, st >>> (y, ycs, cout,
      n, bias);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_add_channel_bias (cudaStream_t st, float *y, int64_t nb,
    int64_t cout, int64_t plane, const float *bias)
{
  const int64_t rows = nb * cout;
  if (rows <= 0 || plane <= 0)
    return cudaSuccess;
  int64_t gx = (plane + kThreads - 1) / kThreads;
  dim3 grid ((unsigned int) (gx < 65535 ? gx : 65535),
      (unsigned int) (rows < 65535 ? rows : 65535));
  add_channel_bias_kernel <<< grid, kThreads, 0, st >>> (y, rows, cout, plane,
      bias);
  return cudaGetLastError ();
}

/* lingbot-gst: CUDA im2col for the convolutions (implicit causal padding)
 * and the per-channel bias of the cuDNN path
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The unfold of kernels/cpu/conv.c: row k = (ci, dt, dy, dx) of the
 * weight's own layout, column (r, o) of the output block.  The temporal
 * source of output frame t, tap dt, is frame t + dt of
 * cat(zeros, cache, x), resolved per element, so the causal cache needs no
 * concatenated copy.  add_channel_bias is the epilogue of a cuDNN plan
 * that does not fuse the bias (cuda-cudnn-conv.c).  transpose_convert
 * moves the operands of the channels-last bf16 cuDNN path between the
 * ops' NCDHW f32 tensors and NDHWC bf16 (cuda-cudnn-conv.c).
 */
#include "kernels/cuda/kernels-common.cuh"

using namespace lbk;

namespace {

__global__ void
im2col_kernel (LbConvIn c, int64_t t, int64_t r0, int64_t nr, float *col)
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
      const float *src = v < c.cache_t
                             ? c.cache + ci * c.cache_cs + v * c.h * c.w
                             : c.x + ci * c.x_cs + (v - c.cache_t) * c.x_fs;
      val = src[ih * c.w + iw];
    }
    col[idx] = val;
  }
}

__global__ void
fill_bias_kernel (
    float *y, int64_t ycs, int64_t cout, int64_t n, const float *bias)
{
  LBK_GRID_STRIDE (idx, cout * n) {
    int64_t co = idx / n, e = idx - co * n;
    y[co * ycs + e] = bias ? bias[co] : 0.0f;
  }
}

/* y[r, e] += bias[r % cout] for rows r = (b, co) of @plane elements:
 * blockIdx.y strides over the rows, x over the row's elements. */
__global__ void
add_channel_bias_kernel (
    float *y, int64_t rows, int64_t cout, int64_t plane, const float *bias)
{
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float b = bias[r % cout];
    float *yr = y + r * plane;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < plane;
         e += (int64_t)gridDim.x * blockDim.x)
      yr[e] += b;
  }
}

constexpr int kTile = 32, kRows = 8;

/* y[b*yb + j*yj + i] = x[b*xb + i*xi + j] (+ bias[j]) for b < nb, i < ni,
 * j < nj: a [ni, nj] matrix per b transposed through a 32x33 shared tile,
 * so that both the reads (along j) and the writes (along i) are
 * coalesced; converted through float (bf16 rounded as bf16_round). */
template <typename TI, typename TO>
__global__ void
transpose_convert_kernel (const TI *x, int64_t xb, int64_t xi, TO *y,
    int64_t yb, int64_t yj, int64_t nb, int64_t ni, int64_t nj,
    const float *bias)
{
  __shared__ float tile[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t b = blockIdx.z; b < nb; b += gridDim.z)
    for (int64_t i0 = (int64_t)blockIdx.y * kTile; i0 < ni;
         i0 += (int64_t)gridDim.y * kTile)
      for (int64_t j0 = (int64_t)blockIdx.x * kTile; j0 < nj;
           j0 += (int64_t)gridDim.x * kTile) {
        for (int r = ty; r < kTile; r += kRows) {
          const int64_t i = i0 + r, j = j0 + tx;
          if (i < ni && j < nj)
            tile[r][tx] = load_as_float (x + b * xb + i * xi + j)
                          + (bias ? bias[j] : 0.0f);
        }
        __syncthreads ();
        for (int r = ty; r < kTile; r += kRows) {
          const int64_t j = j0 + r, i = i0 + tx;
          if (i < ni && j < nj)
            store_from_float (y + b * yb + j * yj + i, tile[tx][r]);
        }
        __syncthreads ();
      }
}

template <typename TI, typename TO>
cudaError_t
launch_transpose (cudaStream_t st, const void *x, int64_t xb, int64_t xi,
    void *y, int64_t yb, int64_t yj, int64_t nb, int64_t ni, int64_t nj,
    const float *bias)
{
  const int64_t gx = (nj + kTile - 1) / kTile, gy = (ni + kTile - 1) / kTile;
  dim3 grid ((unsigned int)(gx < 65535 ? gx : 65535),
      (unsigned int)(gy < 65535 ? gy : 65535),
      (unsigned int)(nb < 65535 ? nb : 65535));
  transpose_convert_kernel<TI, TO><<<grid, dim3 (kTile, kRows), 0, st>>> (
      (const TI *)x, xb, xi, (TO *)y, yb, yj, nb, ni, nj, bias);
  return cudaGetLastError ();
}

} // namespace

extern "C" cudaError_t
lb_cuda_launch_transpose_convert (cudaStream_t st, const void *x, int x_bf16,
    int64_t xb, int64_t xi, void *y, int y_bf16, int64_t yb, int64_t yj,
    int64_t nb, int64_t ni, int64_t nj, const float *bias)
{
  if (nb <= 0 || ni <= 0 || nj <= 0)
    return cudaSuccess;
  if (x_bf16 && y_bf16)
    return cudaErrorInvalidValue; /* not needed: no instance */
  if (x_bf16)
    return launch_transpose<uint16_t, float> (
        st, x, xb, xi, y, yb, yj, nb, ni, nj, bias);
  if (y_bf16)
    return launch_transpose<float, uint16_t> (
        st, x, xb, xi, y, yb, yj, nb, ni, nj, bias);
  return launch_transpose<float, float> (
      st, x, xb, xi, y, yb, yj, nb, ni, nj, bias);
}

extern "C" cudaError_t
lb_cuda_launch_im2col (cudaStream_t st, const LbConvIn *c, int64_t t,
    int64_t r0, int64_t nr, float *col)
{
  int64_t n = c->cin * c->kt * c->kh * c->kw * nr * c->wo;
  if (n <= 0)
    return cudaSuccess;
  im2col_kernel<<<grid_for (n), kThreads, 0, st>>> (*c, t, r0, nr, col);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_fill_bias (cudaStream_t st, float *y, int64_t ycs, int64_t cout,
    int64_t n, const float *bias)
{
  if (cout <= 0 || n <= 0)
    return cudaSuccess;
  fill_bias_kernel<<<grid_for (cout * n), kThreads, 0, st>>> (
      y, ycs, cout, n, bias);
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
  dim3 grid ((unsigned int)(gx < 65535 ? gx : 65535),
      (unsigned int)(rows < 65535 ? rows : 65535));
  add_channel_bias_kernel<<<grid, kThreads, 0, st>>> (
      y, rows, cout, plane, bias);
  return cudaGetLastError ();
}

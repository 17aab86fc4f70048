/* lingbot-gst: CUDA strided ops: copy, clamp, fill, accumulate, latent
 * (de)normalisation, channel RMS norm, halo-band nearest upsample
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The arithmetic of kernels/cpu/strided.c and lb_cpu_channel_rms_norm
 * (kernels/cpu/norm.c), one thread per element (per voxel for the norm).
 * The channel sums use __fmul_rn/__fadd_rn so nvcc does not contract them
 * into FMAs: the sums and quotients then round exactly as on the CPU, and
 * only expf (SiLU) may differ by an ulp or two.  The copy op between f32
 * and bf16 (a bf16 KV cache) converts with bf16_round() / bf16_widen()
 * (kernels-common.cuh), the host's bits.
 */
#include "kernels/cuda/kernels-common.cuh"

using namespace lbk;

namespace {

/* The offsets in y and x of element @idx of the walk @g (row-major over
 * its extents), and its index along the channel dim g.cdim. */
__device__ __forceinline__ void
walk_offsets (
    const LbCudaStrided5 &g, int64_t idx, int64_t &yo, int64_t &xo, int64_t &ci)
{
  int64_t r = idx;
  yo = xo = ci = 0;
  for (int d = 4; d >= 0; d--) {
    int64_t i = r % g.shape[d];
    r /= g.shape[d];
    yo += i * g.ys[d];
    xo += i * g.xs[d];
    if (d == g.cdim)
      ci = i;
  }
}

__global__ void
strided_kernel (LbCudaStridedOp op, LbCudaStrided5 g, const float *x, float *y,
    float a, float b, const float *mean, const float *inv_std, int64_t n)
{
  LBK_GRID_STRIDE (idx, n) {
    int64_t yo, xo, ci;
    walk_offsets (g, idx, yo, xo, ci);
    switch (op) {
      case LB_CUDA_ST_COPY:
        y[yo] = x[xo];
        break;
      case LB_CUDA_ST_CLAMP: {
        float v = x[xo];
        v = v < a ? a : v;
        v = v > b ? b : v;
        y[yo] = v;
        break;
      }
      case LB_CUDA_ST_FILL:
        y[yo] = a;
        break;
      case LB_CUDA_ST_ACCUMULATE:
        y[yo] = __fadd_rn (y[yo], x[xo]);
        break;
      case LB_CUDA_ST_NORMALIZE:
        y[yo] = __fmul_rn (__fsub_rn (x[xo], mean[ci]), inv_std[ci]);
        break;
      case LB_CUDA_ST_DENORMALIZE:
        y[yo] = __fadd_rn (__fdiv_rn (x[xo], inv_std[ci]), mean[ci]);
        break;
    }
  }
}

/* y = x over the walk @g with X, Y each float or uint16_t (bf16 bits). */
template <typename X, typename Y>
__global__ void
copy_convert_kernel (LbCudaStrided5 g, const X *x, Y *y, int64_t n)
{
  LBK_GRID_STRIDE (idx, n) {
    int64_t yo, xo, ci;
    walk_offsets (g, idx, yo, xo, ci);
    if constexpr (sizeof (X) == sizeof (Y))
      y[yo] = x[xo]; /* bits */
    else if constexpr (sizeof (Y) == sizeof (uint16_t))
      y[yo] = bf16_round (load_as_float (x + xo));
    else
      y[yo] = load_as_float (x + xo);
  }
}

template <typename X, typename Y>
cudaError_t
launch_copy_convert (
    cudaStream_t st, const LbCudaStrided5 *g, const void *x, void *y, int64_t n)
{
  copy_convert_kernel<X, Y><<<grid_for (n), kThreads, 0, st>>> (
      *g, static_cast<const X *> (x), static_cast<Y *> (y), n);
  return cudaGetLastError ();
}

/* y = bf16_round(@value) over the walk @g (the fill op on a bf16 view). */
__global__ void
fill_bf16_kernel (LbCudaStrided5 g, uint16_t *y, float value, int64_t n)
{
  const uint16_t v = bf16_round (value);
  LBK_GRID_STRIDE (idx, n) {
    int64_t yo, xo, ci;
    walk_offsets (g, idx, yo, xo, ci);
    y[yo] = v;
  }
}

/* The channel sums of Wan's RMS_norm at one voxel: in channel order,
 * products and sums rounded as on the CPU; the norm clamped at 1e-12. */
__device__ __forceinline__ float
voxel_norm (const float *xv, int64_t xs0, int64_t c)
{
  float acc = 0.f;
  for (int64_t ch = 0; ch < c; ch++) {
    float v = xv[ch * xs0];
    acc = __fadd_rn (acc, __fmul_rn (v, v));
  }
  float nrm = __fsqrt_rn (acc);
  return nrm > 1e-12f ? nrm : 1e-12f;
}

/* One channel of one voxel: x / n * sqrt(C) * gamma, then SiLU. */
__device__ __forceinline__ float
voxel_value (float x, float nrm, float scale, float gamma, int silu)
{
  float v = __fmul_rn (__fmul_rn (__fdiv_rn (x, nrm), scale), gamma);
  return silu ? __fdiv_rn (v, __fadd_rn (1.f, expf (-v))) : v;
}

/* One thread per voxel, y f32 or bf16 bits (rounded by bf16_round()). */
template <typename Y>
__global__ void
channel_rms_norm_kernel (const float *x, int64_t xs0, int64_t xs1, int64_t xs2,
    int64_t xs3, const float *gamma, int silu, Y *y, int64_t ys0, int64_t ys1,
    int64_t ys2, int64_t ys3, int64_t c, int64_t t, int64_t h, int64_t w,
    float scale)
{
  LBK_GRID_STRIDE (idx, t * h * w) {
    int64_t wi = idx % w, hi = (idx / w) % h, ti = idx / (w * h);
    const float *xv = x + ti * xs1 + hi * xs2 + wi * xs3;
    Y *yv = y + ti * ys1 + hi * ys2 + wi * ys3;
    const float nrm = voxel_norm (xv, xs0, c);
    for (int64_t ch = 0; ch < c; ch++)
      store_from_float (yv + ch * ys0,
          voxel_value (xv[ch * xs0], nrm, scale, gamma[ch], silu));
  }
}

/* The channels-last bf16 output (ys0 == 1: a voxel's C values are one
 * run, the conv input of a bf16 VAE decode): a warp per 32 voxels.  Each
 * lane sums its voxel's channels (reads coalesced along the voxels, as
 * above), then per block of 32 channels the lanes compute their voxel's
 * values into a shared 32 x 33 tile and write it back transposed, so a
 * store instruction covers 32 consecutive channels of one voxel. */
constexpr int kNormWarps = 8;

__global__ void
channel_rms_norm_cl16_kernel (const float *x, int64_t xs0, int64_t xs1,
    int64_t xs2, int64_t xs3, const float *gamma, int silu, uint16_t *y,
    int64_t ys1, int64_t ys2, int64_t ys3, int64_t c, int64_t t, int64_t h,
    int64_t w, float scale)
{
  __shared__ float tile[kNormWarps][32][33];
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
  const int64_t nvox = t * h * w;
  for (int64_t v0 = ((int64_t)blockIdx.x * kNormWarps + wp) * 32; v0 < nvox;
       v0 += (int64_t)gridDim.x * kNormWarps * 32) {
    const int64_t idx = v0 + lane;
    const bool live = idx < nvox;
    int64_t wi = 0, hi = 0, ti = 0;
    if (live) {
      wi = idx % w;
      hi = (idx / w) % h;
      ti = idx / (w * h);
    }
    const float *xv = x + ti * xs1 + hi * xs2 + wi * xs3;
    const float nrm = live ? voxel_norm (xv, xs0, c) : 1.f;
    for (int64_t c0 = 0; c0 < c; c0 += 32) {
      const int nc = c - c0 < 32 ? (int)(c - c0) : 32;
      if (live)
        for (int k = 0; k < nc; k++)
          tile[wp][k][lane] = voxel_value (
              xv[(c0 + k) * xs0], nrm, scale, gamma[c0 + k], silu);
      __syncwarp ();
      for (int j = 0; j < 32 && v0 + j < nvox; j++) {
        const int64_t vj = v0 + j;
        const int64_t wj = vj % w, hj = (vj / w) % h, tj = vj / (w * h);
        if (lane < nc)
          y[tj * ys1 + hj * ys2 + wj * ys3 + c0 + lane]
              = bf16_round (tile[wp][lane][j]);
      }
      __syncwarp ();
    }
  }
}

__global__ void
upsample_halo_kernel (const float *x, int64_t xs0, int64_t xs1, int64_t xs2,
    float *y, int64_t c, int64_t t, int64_t ho, int64_t w)
{
  const int64_t wo = 2 * w;
  LBK_GRID_STRIDE (idx, c * t * ho * wo) {
    int64_t j = idx % wo, r = (idx / wo) % ho, ct = idx / (wo * ho);
    int64_t ti = ct % t, ci = ct / t;
    y[idx] = x[ci * xs0 + ti * xs1 + ((r + 1) / 2) * xs2 + j / 2];
  }
}

/* The bf16 channels-last output (the input of a conv reading bf16
 * NDHWC): a block per (output row, 32 input columns, 32 channels) loads
 * x's 32 x 32 tile coalesced along the columns into shared memory, then
 * writes its 64 output columns with the lanes along the channels, so
 * every store covers 32 consecutive channels of one pixel. */
__global__ void
upsample_halo_cl16_kernel (const float *x, int64_t xs0, int64_t xs1,
    int64_t xs2, uint16_t *y, int64_t c, int64_t t, int64_t ho, int64_t w)
{
  __shared__ float tile[32][33];
  const int64_t wo = 2 * w, j0 = (int64_t)blockIdx.x * 32,
                c0 = (int64_t)blockIdx.y * 32;
  for (int64_t row = blockIdx.z; row < t * ho; row += gridDim.z) {
    const int64_t ti = row / ho, hi = (row % ho + 1) / 2;
    for (int k = threadIdx.y; k < 32; k += blockDim.y)
      if (c0 + k < c && j0 + threadIdx.x < w)
        tile[k][threadIdx.x]
            = x[(c0 + k) * xs0 + ti * xs1 + hi * xs2 + j0 + threadIdx.x];
    __syncthreads ();
    for (int k = threadIdx.y; k < 64; k += blockDim.y) {
      const int64_t j = 2 * j0 + k;
      if (c0 + threadIdx.x < c && j < wo)
        y[(row * wo + j) * c + c0 + threadIdx.x]
            = bf16_round (tile[threadIdx.x][k / 2]);
    }
    __syncthreads ();
  }
}

} // namespace

extern "C" cudaError_t
lb_cuda_launch_strided (cudaStream_t st, LbCudaStridedOp op,
    const LbCudaStrided5 *g, const float *x, float *y, float a, float b,
    const float *mean, const float *inv_std)
{
  int64_t n = 1;
  for (int d = 0; d < 5; d++)
    n *= g->shape[d];
  if (n <= 0)
    return cudaSuccess;
  strided_kernel<<<grid_for (n), kThreads, 0, st>>> (
      op, *g, x, y, a, b, mean, inv_std, n);
  return cudaGetLastError ();
}

/**
 * lb_cuda_launch_copy_convert:
 * @st: the stream (its device current)
 * @g: the 5-D walk (extents, strides of y and x in elements)
 * @x: the source: f32, or bfloat16 bits when @x_bf16
 * @x_bf16: whether @x is bf16
 * @y: the destination: f32, or bfloat16 bits when @y_bf16; must not
 *   overlap @x
 * @y_bf16: whether @y is bf16
 *
 * The copy op of kernels/ops.h between dtypes (a bf16 KV cache, spec
 * 1.11): f32 -> bf16 rounds to nearest even exactly as lb_f32_to_bf16(),
 * bf16 -> f32 widens exactly, bf16 -> bf16 and f32 -> f32 copy the bits.
 * One thread per element.  Asynchronous.
 *
 * Returns: cudaSuccess or the launch error.
 */
extern "C" cudaError_t
lb_cuda_launch_copy_convert (cudaStream_t st, const LbCudaStrided5 *g,
    const void *x, int x_bf16, void *y, int y_bf16)
{
  int64_t n = 1;
  for (int d = 0; d < 5; d++)
    n *= g->shape[d];
  if (n <= 0)
    return cudaSuccess;
  if (x_bf16 && y_bf16)
    return launch_copy_convert<uint16_t, uint16_t> (st, g, x, y, n);
  if (x_bf16)
    return launch_copy_convert<uint16_t, float> (st, g, x, y, n);
  if (y_bf16)
    return launch_copy_convert<float, uint16_t> (st, g, x, y, n);
  return launch_copy_convert<float, float> (st, g, x, y, n);
}

/**
 * lb_cuda_launch_fill_bf16:
 * @st: the stream (its device current)
 * @g: the 5-D walk of y (x strides unused)
 * @y: bfloat16 bits
 * @value: stored as bf16_round(@value) (lb_f32_to_bf16()'s bits)
 *
 * The fill op on a bf16 view.  Asynchronous.
 *
 * Returns: cudaSuccess or the launch error.
 */
extern "C" cudaError_t
lb_cuda_launch_fill_bf16 (
    cudaStream_t st, const LbCudaStrided5 *g, void *y, float value)
{
  int64_t n = 1;
  for (int d = 0; d < 5; d++)
    n *= g->shape[d];
  if (n <= 0)
    return cudaSuccess;
  fill_bf16_kernel<<<grid_for (n), kThreads, 0, st>>> (
      *g, static_cast<uint16_t *> (y), value, n);
  return cudaGetLastError ();
}

/**
 * lb_cuda_launch_channel_rms_norm:
 * @st: the stream (its device current)
 * @x: f32 [C, T, H, W] with element strides @xs
 * @xs: x's 4 strides
 * @gamma: f32 [C]
 * @silu: apply SiLU after the norm
 * @y: f32, or bfloat16 bits when @y_bf16, of x's shape with strides @ys
 * @y_bf16: whether @y is bf16 (each value rounded by bf16_round())
 * @ys: y's 4 strides
 * @c: C
 * @t: T
 * @h: H
 * @w: W
 *
 * The channel_rms_norm op (kernels/ops.h, kernels/cpu/norm.c): one
 * thread per voxel, or for a bf16 y with unit channel stride (the
 * channels-last conv input) a warp per 32 voxels that stores whole
 * channel runs.  Asynchronous.
 *
 * Returns: cudaSuccess or the launch error.
 */
extern "C" cudaError_t
lb_cuda_launch_channel_rms_norm (cudaStream_t st, const float *x,
    const int64_t *xs, const float *gamma, int silu, void *y, int y_bf16,
    const int64_t *ys, int64_t c, int64_t t, int64_t h, int64_t w)
{
  int64_t n = t * h * w;
  if (n <= 0 || c <= 0)
    return cudaSuccess;
  float scale = (float)sqrt ((double)c);
  if (y_bf16 && (ys[0] == 1 || c == 1)) {
    const int64_t per_block = 32 * kNormWarps;
    int64_t blocks = (n + per_block - 1) / per_block;
    blocks = blocks < 65535 ? blocks : 65535;
    channel_rms_norm_cl16_kernel<<<(unsigned int)blocks, per_block, 0, st>>> (x,
        xs[0], xs[1], xs[2], xs[3], gamma, silu, static_cast<uint16_t *> (y),
        ys[1], ys[2], ys[3], c, t, h, w, scale);
  } else if (y_bf16) {
    channel_rms_norm_kernel<uint16_t><<<grid_for (n), kThreads, 0, st>>> (x,
        xs[0], xs[1], xs[2], xs[3], gamma, silu, static_cast<uint16_t *> (y),
        ys[0], ys[1], ys[2], ys[3], c, t, h, w, scale);
  } else {
    channel_rms_norm_kernel<float><<<grid_for (n), kThreads, 0, st>>> (x, xs[0],
        xs[1], xs[2], xs[3], gamma, silu, static_cast<float *> (y), ys[0],
        ys[1], ys[2], ys[3], c, t, h, w, scale);
  }
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_upsample_nearest2x_halo (cudaStream_t st, const float *x,
    int64_t xs0, int64_t xs1, int64_t xs2, void *y, int y_bf16, int64_t c,
    int64_t t, int64_t ho, int64_t w)
{
  int64_t n = c * t * ho * 2 * w;
  if (n <= 0)
    return cudaSuccess;
  if (y_bf16) {
    const int64_t rows = t * ho;
    dim3 grid ((unsigned int)((w + 31) / 32), (unsigned int)((c + 31) / 32),
        (unsigned int)(rows < 65535 ? rows : 65535));
    if (grid.y > 65535)
      return cudaErrorInvalidConfiguration;
    upsample_halo_cl16_kernel<<<grid, dim3 (32, 8), 0, st>>> (
        x, xs0, xs1, xs2, static_cast<uint16_t *> (y), c, t, ho, w);
    return cudaGetLastError ();
  }
  upsample_halo_kernel<<<grid_for (n), kThreads, 0, st>>> (
      x, xs0, xs1, xs2, static_cast<float *> (y), c, t, ho, w);
  return cudaGetLastError ();
}

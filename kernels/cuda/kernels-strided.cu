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

__global__ void
strided_kernel (LbCudaStridedOp op, LbCudaStrided5 g, const float *x, float *y,
    float a, float b, const float *mean, const float *inv_std, int64_t n)
{
  LBK_GRID_STRIDE (idx, n) {
    int64_t r = idx, yo = 0, xo = 0, ci = 0;
    for (int d = 4; d >= 0; d--) {
      int64_t i = r % g.shape[d];
      r /= g.shape[d];
      yo += i * g.ys[d];
      xo += i * g.xs[d];
      if (d == g.cdim)
        ci = i;
    }
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
    int64_t r = idx, yo = 0, xo = 0;
    for (int d = 4; d >= 0; d--) {
      int64_t i = r % g.shape[d];
      r /= g.shape[d];
      yo += i * g.ys[d];
      xo += i * g.xs[d];
    }
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

__global__ void
channel_rms_norm_kernel (const float *x, int64_t xs0, int64_t xs1, int64_t xs2,
    int64_t xs3, const float *gamma, int silu, float *y, int64_t ys0,
    int64_t ys1, int64_t ys2, int64_t ys3, int64_t c, int64_t t, int64_t h,
    int64_t w, float scale)
{
  LBK_GRID_STRIDE (idx, t * h * w) {
    int64_t wi = idx % w, hi = (idx / w) % h, ti = idx / (w * h);
    const float *xv = x + ti * xs1 + hi * xs2 + wi * xs3;
    float *yv = y + ti * ys1 + hi * ys2 + wi * ys3;
    float acc = 0.f;
    for (int64_t ch = 0; ch < c; ch++) {
      float v = xv[ch * xs0];
      acc = __fadd_rn (acc, __fmul_rn (v, v));
    }
    float nrm = __fsqrt_rn (acc);
    nrm = nrm > 1e-12f ? nrm : 1e-12f;
    for (int64_t ch = 0; ch < c; ch++) {
      float v = __fmul_rn (
          __fmul_rn (__fdiv_rn (xv[ch * xs0], nrm), scale), gamma[ch]);
      if (silu)
        v = __fdiv_rn (v, __fadd_rn (1.f, expf (-v)));
      yv[ch * ys0] = v;
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

extern "C" cudaError_t
lb_cuda_launch_channel_rms_norm (cudaStream_t st, const float *x,
    const int64_t *xs, const float *gamma, int silu, float *y,
    const int64_t *ys, int64_t c, int64_t t, int64_t h, int64_t w)
{
  int64_t n = t * h * w;
  if (n <= 0 || c <= 0)
    return cudaSuccess;
  float scale = (float)sqrt ((double)c);
  channel_rms_norm_kernel<<<grid_for (n), kThreads, 0, st>>> (x, xs[0], xs[1],
      xs[2], xs[3], gamma, silu, y, ys[0], ys[1], ys[2], ys[3], c, t, h, w,
      scale);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_upsample_nearest2x_halo (cudaStream_t st, const float *x,
    int64_t xs0, int64_t xs1, int64_t xs2, float *y, int64_t c, int64_t t,
    int64_t ho, int64_t w)
{
  int64_t n = c * t * ho * 2 * w;
  if (n <= 0)
    return cudaSuccess;
  upsample_halo_kernel<<<grid_for (n), kThreads, 0, st>>> (
      x, xs0, xs1, xs2, y, c, t, ho, w);
  return cudaGetLastError ();
}

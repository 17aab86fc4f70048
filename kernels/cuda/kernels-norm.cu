/* lingbot-gst: CUDA row normalisations and adaLN modulation
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * One block per row.  The layer norm and norm_modulate (the layer norm
 * with the modulation applied to its float output in registers) are one
 * kernel, whose output may be bf16.  Row statistics are accumulated in double
 * and the normalised value is formed in double, as kernels/cpu/norm.c does, so
 * the two backends agree to the last float bit in most elements.
 */
#include "kernels/cuda/kernels-common.cuh"

using namespace lbk;

namespace {

/* Rows are spread over blockIdx.x with a stride (grids up to 2^31-1).
 * The layer norm of a row (w, b nullable), then with @sc the modulation
 * `a * (1 + sc) + sh` of its float value (norm_modulate); T float, or
 * uint16_t for a bfloat16 y (the f32 value rounded by bf16_round(): the
 * next bf16 GEMM's input, spec 1.11). */
template <typename T>
__global__ void
layer_norm_kernel (const float *x, int64_t xld, const float *w, const float *b,
    float eps, const float *sc, int64_t sld, const float *sh, int64_t hld, T *y,
    int64_t yld, int64_t m, int64_t d)
{
  __shared__ double red[32];
  for (int64_t i = blockIdx.x; i < m; i += gridDim.x) {
    const float *xr = x + i * xld;
    T *yr = y + i * yld;
    double mean, rstd;
    row_mean_rstd (xr, d, eps, red, &mean, &rstd);
    /* y may be x (f32): every thread has read its elements of the row
     * above, and each element is rewritten by the thread that read it. */
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      double t = (xr[j] - mean) * rstd;
      if (w)
        t *= w[j];
      if (b)
        t += b[j];
      float a = (float)t; /* layer_norm's output */
      if (sc)
        a = a * (1.0f + sc[i * sld + j]) + sh[i * hld + j];
      store_from_float (yr + j, a);
    }
  }
}

__global__ void
rms_norm_kernel (const float *x, int64_t xld, const float *w, float eps,
    float *y, int64_t yld, int64_t m, int64_t d)
{
  __shared__ double red[32];
  for (int64_t i = blockIdx.x; i < m; i += gridDim.x) {
    const float *xr = x + i * xld;
    float *yr = y + i * yld;
    const double r = row_rms_inv (xr, d, eps, red);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      double t = xr[j] * r;
      yr[j] = (float)(w ? t * w[j] : t);
    }
  }
}

__global__ void
modulate_kernel (const float *x, int64_t xld, const float *sc, int64_t sld,
    const float *sh, int64_t hld, float *y, int64_t yld, int64_t m, int64_t d)
{
  LBK_GRID_STRIDE (idx, m * d) {
    int64_t i = idx / d, j = idx - i * d;
    y[i * yld + j]
        = x[i * xld + j] * (1.0f + sc[i * sld + j]) + sh[i * hld + j];
  }
}

__global__ void
gated_residual_kernel (float *x, int64_t xld, const float *y, int64_t yld,
    const float *g, int64_t gld, int64_t m, int64_t d)
{
  LBK_GRID_STRIDE (idx, m * d) {
    int64_t i = idx / d, j = idx - i * d;
    float v = y[i * yld + j];
    if (g)
      v *= g[i * gld + j];
    x[i * xld + j] += v;
  }
}

unsigned int
row_grid (int64_t m)
{
  return (unsigned int)(m < 1 ? 1 : (m > 1048576 ? 1048576 : m));
}

} // namespace

extern "C" cudaError_t
lb_cuda_launch_norm_modulate (cudaStream_t st, const float *x, int64_t xld,
    const float *w, const float *b, float eps, const float *scale, int64_t sld,
    const float *shift, int64_t hld, void *y, int y_bf16, int64_t yld,
    int64_t m, int64_t d)
{
  if (m <= 0 || d <= 0)
    return cudaSuccess;
  if (y_bf16)
    layer_norm_kernel<uint16_t><<<row_grid (m), kThreads, 0, st>>> (
        x, xld, w, b, eps, scale, sld, shift, hld, (uint16_t *)y, yld, m, d);
  else
    layer_norm_kernel<float><<<row_grid (m), kThreads, 0, st>>> (
        x, xld, w, b, eps, scale, sld, shift, hld, (float *)y, yld, m, d);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_rms_norm (cudaStream_t st, const float *x, int64_t xld,
    const float *w, float eps, float *y, int64_t yld, int64_t m, int64_t d)
{
  if (m <= 0 || d <= 0)
    return cudaSuccess;
  rms_norm_kernel<<<row_grid (m), kThreads, 0, st>>> (
      x, xld, w, eps, y, yld, m, d);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_modulate (cudaStream_t st, const float *x, int64_t xld,
    const float *scale, int64_t sld, const float *shift, int64_t hld, float *y,
    int64_t yld, int64_t m, int64_t d)
{
  if (m <= 0 || d <= 0)
    return cudaSuccess;
  modulate_kernel<<<grid_for (m * d), kThreads, 0, st>>> (
      x, xld, scale, sld, shift, hld, y, yld, m, d);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_gated_residual (cudaStream_t st, float *x, int64_t xld,
    const float *y, int64_t yld, const float *gate, int64_t gld, int64_t m,
    int64_t d)
{
  if (m <= 0 || d <= 0)
    return cudaSuccess;
  gated_residual_kernel<<<grid_for (m * d), kThreads, 0, st>>> (
      x, xld, y, yld, gate, gld, m, d);
  return cudaGetLastError ();
}

/* lingbot-gst: CUDA row normalisations and adaLN modulation
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * One block per row.  The layer norm and norm_modulate (the layer norm
 * with the modulation applied to its float output in registers) are one
 * kernel, whose output may be bf16.  The element-wise modulation and
 * gated residual go 16 bytes a load and a store where the rows allow
 * (rows_vec4()).  Row statistics are accumulated in double
 * and the normalised value is formed in double, as kernels/cpu/norm.c does, so
 * the two backends agree to the last float bit in most elements.
 */
#include "kernels/cuda/kernels-common.cuh"

#include <cuda_fp8.h>

using namespace lbk;

namespace {

/* Element j of the normalised row (layer_norm's float output, then with
 * @scr the modulation `a * (1 + scr[j]) + shr[j]`): one expression that
 * layer_norm_kernel and norm_fp8_kernel both evaluate, so they agree to
 * the bit. */
__device__ __forceinline__ float
ln_value (const float *xr, int64_t j, double mean, double rstd, const float *w,
    const float *b, const float *scr, const float *shr)
{
  double t = (xr[j] - mean) * rstd;
  if (w)
    t *= w[j];
  if (b)
    t += b[j];
  float a = (float)t; /* layer_norm's output */
  if (scr)
    a = a * (1.0f + scr[j]) + shr[j];
  return a;
}

/* Rows are spread over blockIdx.x with a stride (grids up to 2^31-1).
 * With @ry first the gated residual (residual_norm_modulate), then the
 * layer norm of a row (w, b nullable), then with @sc the modulation
 * `a * (1 + sc) + sh` of its float value (norm_modulate); T float, or
 * uint16_t for a bfloat16 y (the f32 value rounded by bf16_round(): the
 * next bf16 GEMM's input, spec 1.11). */
template <typename T>
__global__ void
layer_norm_kernel (float *x, int64_t xld, const float *ry, int64_t ryld,
    const float *rg, int64_t rgld, const float *w, const float *b, float eps,
    const float *sc, int64_t sld, const float *sh, int64_t hld, T *y,
    int64_t yld, int64_t m, int64_t d)
{
  __shared__ double red[32];
  for (int64_t i = blockIdx.x; i < m; i += gridDim.x) {
    float *xr = x + i * xld;
    T *yr = y + i * yld;
    /* with @ry, first the gated residual `x += rg * ry` in place (each
     * thread updates the elements it then reads: no barrier needed) */
    if (ry)
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        const float v = ry[i * ryld + j];
        xr[j] += rg ? v * rg[i * rgld + j] : v;
      }
    double mean, rstd;
    row_mean_rstd (xr, d, eps, red, &mean, &rstd);
    /* y may be x (f32): every thread has read its elements of the row
     * above, and each element is rewritten by the thread that read it. */
    const float *scr = sc ? sc + i * sld : NULL;
    const float *shr = sc ? sh + i * hld : NULL;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      store_from_float (yr + j, ln_value (xr, j, mean, rstd, w, b, scr, shr));
  }
}

/* layer_norm_kernel's row (with @ry the residual first), its amax
 * (NaN ignored) over the block, then the row again into e4m3 codes with
 * the scale `amax / 448` (1 for a zero row): quantize_rows' formulas
 * (kernels-fp8.cu), so the codes are those gemm_fp8 makes of the f32 row
 * layer_norm_kernel writes. */
__global__ void
norm_fp8_kernel (float *x, int64_t xld, const float *ry, int64_t ryld,
    const float *rg, int64_t rgld, const float *w, const float *b, float eps,
    const float *sc, int64_t sld, const float *sh, int64_t hld,
    __nv_fp8_storage_t *q, int64_t qld, float *sq, int64_t m, int64_t d)
{
  __shared__ double red[32];
  __shared__ float redf[32];
  for (int64_t i = blockIdx.x; i < m; i += gridDim.x) {
    float *xr = x + i * xld;
    if (ry)
      for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        const float v = ry[i * ryld + j];
        xr[j] += rg ? v * rg[i * rgld + j] : v;
      }
    double mean = 0.0, rstd = 0.0;
    if (d > 0)
      row_mean_rstd (xr, d, eps, red, &mean, &rstd);
    const float *scr = sc ? sc + i * sld : NULL;
    const float *shr = sc ? sh + i * hld : NULL;
    float amax = 0.0f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
      const float a = fabsf (ln_value (xr, j, mean, rstd, w, b, scr, shr));
      amax = a > amax ? a : amax; /* NaN ignored, as on the CPU */
    }
    amax = block_max (amax, redf);
    const float scale = amax == 0.0f ? 1.0f : __fdiv_rn (amax, 448.0f);
    if (threadIdx.x == 0)
      sq[i] = scale;
    __nv_fp8_storage_t *qr = q + i * qld;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      qr[j] = __nv_cvt_float_to_fp8 (
          __fdiv_rn (ln_value (xr, j, mean, rstd, w, b, scr, shr), scale),
          __NV_SATFINITE, __NV_E4M3);
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

/* Element-wise over rows, V (1 or 4, rows_vec4()) consecutive elements
 * per thread; the same float formula either way. */
template <int V>
__global__ void
modulate_kernel (const float *x, int64_t xld, const float *sc, int64_t sld,
    const float *sh, int64_t hld, float *y, int64_t yld, int64_t m, int64_t d)
{
  const int64_t dv = d / V;
  LBK_GRID_STRIDE (idx, m * dv) {
    int64_t i = idx / dv, j = (idx - i * dv) * V;
    float a[V], s[V], h[V];
    ld_v<V> (x + i * xld + j, a);
    ld_v<V> (sc + i * sld + j, s);
    ld_v<V> (sh + i * hld + j, h);
    for (int u = 0; u < V; u++)
      a[u] = a[u] * (1.0f + s[u]) + h[u];
    st_v<V> (y + i * yld + j, a);
  }
}

template <int V>
__global__ void
gated_residual_kernel (float *x, int64_t xld, const float *y, int64_t yld,
    const float *g, int64_t gld, int64_t m, int64_t d)
{
  const int64_t dv = d / V;
  LBK_GRID_STRIDE (idx, m * dv) {
    int64_t i = idx / dv, j = (idx - i * dv) * V;
    float a[V], v[V], gv[V];
    ld_v<V> (x + i * xld + j, a);
    ld_v<V> (y + i * yld + j, v);
    if (g)
      ld_v<V> (g + i * gld + j, gv);
    for (int u = 0; u < V; u++)
      a[u] += g ? v[u] * gv[u] : v[u];
    st_v<V> (x + i * xld + j, a);
  }
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
  return lb_cuda_launch_residual_norm_modulate (st, (float *)x, xld, NULL, 0,
      NULL, 0, w, b, eps, scale, sld, shift, hld, y, y_bf16, yld, m, d);
}

extern "C" cudaError_t
lb_cuda_launch_residual_norm_modulate (cudaStream_t st, float *x, int64_t xld,
    const float *ry, int64_t ryld, const float *gate, int64_t gld,
    const float *w, const float *b, float eps, const float *scale, int64_t sld,
    const float *shift, int64_t hld, void *y, int y_bf16, int64_t yld,
    int64_t m, int64_t d)
{
  if (m <= 0 || d <= 0)
    return cudaSuccess;
  if (y_bf16)
    layer_norm_kernel<uint16_t><<<row_grid (m), kThreads, 0, st>>> (x, xld, ry,
        ryld, gate, gld, w, b, eps, scale, sld, shift, hld, (uint16_t *)y, yld,
        m, d);
  else
    layer_norm_kernel<float><<<row_grid (m), kThreads, 0, st>>> (x, xld, ry,
        ryld, gate, gld, w, b, eps, scale, sld, shift, hld, (float *)y, yld, m,
        d);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_norm_fp8 (cudaStream_t st, float *x, int64_t xld,
    const float *ry, int64_t ryld, const float *gate, int64_t gld,
    const float *w, const float *b, float eps, const float *scale, int64_t sld,
    const float *shift, int64_t hld, uint8_t *q, int64_t qld, float *sq,
    int64_t m, int64_t d)
{
  if (m <= 0)
    return cudaSuccess;
  norm_fp8_kernel<<<row_grid (m), kThreads, 0, st>>> (x, xld, ry, ryld, gate,
      gld, w, b, eps, scale, sld, shift, hld, (__nv_fp8_storage_t *)q, qld, sq,
      m, d);
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
  const void *p[4] = { x, scale, shift, y };
  const int64_t ld[4] = { xld, sld, hld, yld };
  if (rows_vec4 (d, 4, p, ld))
    modulate_kernel<4><<<grid_for (m * d / 4), kThreads, 0, st>>> (
        x, xld, scale, sld, shift, hld, y, yld, m, d);
  else
    modulate_kernel<1><<<grid_for (m * d), kThreads, 0, st>>> (
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
  const void *p[3] = { x, y, gate };
  const int64_t ld[3] = { xld, yld, gld };
  if (rows_vec4 (d, 3, p, ld))
    gated_residual_kernel<4><<<grid_for (m * d / 4), kThreads, 0, st>>> (
        x, xld, y, yld, gate, gld, m, d);
  else
    gated_residual_kernel<1><<<grid_for (m * d), kThreads, 0, st>>> (
        x, xld, y, yld, gate, gld, m, d);
  return cudaGetLastError ();
}

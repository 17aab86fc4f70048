/* lingbot-gst: the fp8 GEMM's device kernels (kernels/ops.h @gemm_fp8)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Per-token quantisation of x (one block per row: amax, then scale and
 * convert) and the epilogue that applies the per-row and per-column
 * scales, bias and beta after the cuBLASLt FP8 matmul (cuda-gemm.c).  The
 * formulas are the CPU oracle's (lb_quantize_e4m3_row(), kernels/cpu/
 * gemm.c): sx = amax / 448 (1 for a zero row) with an IEEE division,
 * codes by __nv_cvt_float_to_fp8 (nearest even, __NV_SATFINITE: +-448 for
 * every larger magnitude, NaN kept), then
 * y = ((alpha acc) sx[m]) sw[n] + (beta y + bias[n]) with alpha already
 * in acc (cuBLASLt's alpha), each step one f32 rounding (__fmul_rn /
 * __fadd_rn: no contraction into a fused multiply-add).  gemm_fp8_gelu_q's
 * epilogue takes that value with beta 0 through the GELU and quantises
 * each row, one block per row.
 */
#include "kernels/cuda/kernels-common.cuh"

#include <cuda_fp8.h>

using namespace lbk;

namespace {

__global__ void
quantize_rows (const float *__restrict__ x, int64_t xld, int64_t k,
    __nv_fp8_storage_t *__restrict__ q, int64_t qld, float *__restrict__ sx)
{
  __shared__ float part[kThreads];
  const int64_t row = blockIdx.x;
  const float *xr = x + row * xld;
  float amax = 0.0f;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
    const float a = fabsf (xr[j]);
    amax = a > amax ? a : amax; /* NaN ignored, as on the CPU */
  }
  part[threadIdx.x] = amax;
  __syncthreads ();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) {
      const float o = part[threadIdx.x + s];
      part[threadIdx.x] = o > part[threadIdx.x] ? o : part[threadIdx.x];
    }
    __syncthreads ();
  }
  const float m = part[0];
  const float scale = m == 0.0f ? 1.0f : __fdiv_rn (m, 448.0f);
  if (threadIdx.x == 0)
    sx[row] = scale;
  __nv_fp8_storage_t *qr = q + row * qld;
  for (int64_t j = threadIdx.x; j < k; j += blockDim.x)
    qr[j] = __nv_cvt_float_to_fp8 (
        __fdiv_rn (xr[j], scale), __NV_SATFINITE, __NV_E4M3);
}

__global__ void
fp8_epilogue (const float *__restrict__ acc, int64_t ald, int64_t m, int64_t n,
    const float *__restrict__ sx, const float *__restrict__ sw,
    const float *__restrict__ bias, float beta, float *y, int64_t yld)
{
  LBK_GRID_STRIDE (idx, m * n) {
    const int64_t i = idx / n, j = idx - i * n;
    float v = __fmul_rn (__fmul_rn (acc[i * ald + j], sx[i]), sw[j]);
    float r = 0.0f;
    if (beta != 0.0f)
      r = __fmul_rn (beta, y[i * yld + j]);
    if (bias != NULL)
      r = beta != 0.0f ? __fadd_rn (r, bias[j]) : bias[j];
    if (beta != 0.0f || bias != NULL)
      v = __fadd_rn (v, r);
    y[i * yld + j] = v;
  }
}

/* Element j of row i of gemm_fp8_gelu_q's GELU: fp8_epilogue's value with
 * beta 0 (@ar NULL: no product, the value is the bias or 0, as the pair's
 * K = 0 path writes it), then gelu_tanh_rn(), the elementwise GELU. */
__device__ __forceinline__ float
gelu_value (
    const float *ar, float sxi, const float *sw, const float *bias, int64_t j)
{
  float v = 0.0f;
  if (ar != NULL)
    v = __fmul_rn (__fmul_rn (ar[j], sxi), sw[j]);
  if (bias != NULL)
    v = ar != NULL ? __fadd_rn (v, bias[j]) : bias[j];
  return gelu_tanh_rn (v);
}

/* One block per row (rows strided over the grid): the row's GELU values
 * from the f32 accumulator, their amax (NaN ignored) over the block, then
 * the row again into e4m3 codes with the scale `amax / 448` (1 for a zero
 * row): quantize_rows' formulas, so the codes are those gemm_fp8 makes of
 * the f32 GELU output the op pair writes.  The GELU row is never stored:
 * evaluated twice from @acc (two reads of the accumulator instead of the
 * pair's epilogue, GELU and quantisation passes over an f32 row). */
__global__ void
fp8_gelu_quantize (const float *__restrict__ acc, int64_t ald, int64_t m,
    int64_t n, const float *__restrict__ sx, const float *__restrict__ sw,
    const float *__restrict__ bias, __nv_fp8_storage_t *__restrict__ q,
    int64_t qld, float *__restrict__ sq)
{
  __shared__ float redf[32];
  for (int64_t i = blockIdx.x; i < m; i += gridDim.x) {
    const float *ar = acc != NULL ? acc + i * ald : NULL;
    const float sxi = acc != NULL ? sx[i] : 0.0f;
    float amax = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const float a = fabsf (gelu_value (ar, sxi, sw, bias, j));
      amax = a > amax ? a : amax; /* NaN ignored, as on the CPU */
    }
    amax = block_max (amax, redf);
    const float scale = amax == 0.0f ? 1.0f : __fdiv_rn (amax, 448.0f);
    if (threadIdx.x == 0)
      sq[i] = scale;
    __nv_fp8_storage_t *qr = q + i * qld;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      qr[j] = __nv_cvt_float_to_fp8 (
          __fdiv_rn (gelu_value (ar, sxi, sw, bias, j), scale), __NV_SATFINITE,
          __NV_E4M3);
  }
}

} // namespace

extern "C" cudaError_t
lb_cuda_launch_quantize_e4m3_rows (cudaStream_t st, const float *x, int64_t xld,
    int64_t m, int64_t k, uint8_t *q, int64_t qld, float *sx)
{
  if (m <= 0)
    return cudaSuccess;
  if (m > 0x7fffffff)
    return cudaErrorInvalidValue;
  quantize_rows<<<(unsigned)m, kThreads, 0, st>>> (
      x, xld, k, (__nv_fp8_storage_t *)q, qld, sx);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_fp8_epilogue (cudaStream_t st, const float *acc, int64_t ald,
    int64_t m, int64_t n, const float *sx, const float *sw, const float *bias,
    float beta, float *y, int64_t yld)
{
  if (m <= 0 || n <= 0)
    return cudaSuccess;
  fp8_epilogue<<<grid_for (m * n), kThreads, 0, st>>> (
      acc, ald, m, n, sx, sw, bias, beta, y, yld);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_fp8_gelu_quantize (cudaStream_t st, const float *acc,
    int64_t ald, int64_t m, int64_t n, const float *sx, const float *sw,
    const float *bias, uint8_t *q, int64_t qld, float *sq)
{
  if (m <= 0)
    return cudaSuccess;
  fp8_gelu_quantize<<<row_grid (m), kThreads, 0, st>>> (
      acc, ald, m, n, sx, sw, bias, (__nv_fp8_storage_t *)q, qld, sq);
  return cudaGetLastError ();
}

/* lingbot-gst: CUDA dtype conversion (f32 -> bf16)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The rounding is bf16_round() (kernels-common.cuh), the integer formula of
 * lb_f32_to_bf16() (kernels/tensor.c), not the cuda_bf16.h intrinsic, so that
 * device and host give the same bits for every input, NaN payloads included:
 * round to nearest, ties to even, overflow to infinity, subnormals kept, a NaN
 * stays a NaN (quiet bit set, sign and high payload kept).
 */
#include "kernels/cuda/kernels-common.cuh"

using namespace lbk;

namespace {

__global__ void
to_bf16_dense (const float *__restrict__ x, uint16_t *__restrict__ y, int64_t n)
{
  LBK_GRID_STRIDE (i, n) {
    y[i] = bf16_round (x[i]);
  }
}

__global__ void
to_bf16_rows (const float *__restrict__ x, int64_t xld,
    uint16_t *__restrict__ y, int64_t yld, int64_t m, int64_t k)
{
  LBK_GRID_STRIDE (idx, m * k) {
    int64_t i = idx / k, j = idx - i * k;
    y[i * yld + j] = bf16_round (x[i * xld + j]);
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

/* Four elements as one access: float4 for f32, 8 bytes for bf16. */
__device__ __forceinline__ void
load4 (const float *p, float v[4])
{
  const float4 a = *(const float4 *)p;
  v[0] = a.x;
  v[1] = a.y;
  v[2] = a.z;
  v[3] = a.w;
}

__device__ __forceinline__ void
load4 (const uint16_t *p, float v[4])
{
  const ushort4 a = *(const ushort4 *)p;
  v[0] = bf16_widen (a.x);
  v[1] = bf16_widen (a.y);
  v[2] = bf16_widen (a.z);
  v[3] = bf16_widen (a.w);
}

__device__ __forceinline__ void
store4 (float *p, const float v[4])
{
  *(float4 *)p = make_float4 (v[0], v[1], v[2], v[3]);
}

__device__ __forceinline__ void
store4 (uint16_t *p, const float v[4])
{
  *(ushort4 *)p = make_ushort4 (bf16_round (v[0]), bf16_round (v[1]),
      bf16_round (v[2]), bf16_round (v[3]));
}

/* y[i, h, e] = x[i, h, e] converted (S, D: float or uint16_t bf16 bits),
 * one element per thread, or four when V4 (vec4_ok()). */
template <typename S, typename D, bool V4>
__global__ void
convert_3d (const S *__restrict__ x, int64_t xs0, int64_t xs1,
    D *__restrict__ y, int64_t ys0, int64_t ys1, int64_t n0, int64_t n1,
    int64_t n2)
{
  const int64_t per = V4 ? 4 : 1, q = n2 / per;
  LBK_GRID_STRIDE (idx, n0 * n1 * q) {
    int64_t r = idx / q, e = (idx - r * q) * per;
    int64_t i = r / n1, h = r - i * n1;
    const S *src = x + i * xs0 + h * xs1 + e;
    D *dst = y + i * ys0 + h * ys1 + e;
    if (V4) {
      float v[4];
      load4 (src, v);
      store4 (dst, v);
    } else {
      store_from_float (dst, load_as_float (src));
    }
  }
}

/* Whether @p is aligned to 4 of its elements (16 bytes for f32, 8 for
 * bf16). */
template <typename T>
inline bool
aligned4 (const T *p)
{
  return ((uintptr_t)p & (4 * sizeof (T) - 1)) == 0;
}

/* Four elements per thread: n2 and every stride multiples of 4, both
 * bases aligned to 4 elements. */
template <typename S, typename D>
inline bool
vec4_ok (const S *x, int64_t xs0, int64_t xs1, const D *y, int64_t ys0,
    int64_t ys1, int64_t n2)
{
  return n2 % 4 == 0 && xs0 % 4 == 0 && xs1 % 4 == 0 && ys0 % 4 == 0
         && ys1 % 4 == 0 && aligned4 (x) && aligned4 (y);
}

/* convert_3d() of [n0, n1, n2] with the vector form where it fits. */
template <typename S, typename D>
cudaError_t
launch_3d (cudaStream_t st, const S *x, int64_t xs0, int64_t xs1, D *y,
    int64_t ys0, int64_t ys1, int64_t n0, int64_t n1, int64_t n2)
{
  if (n0 <= 0 || n1 <= 0 || n2 <= 0)
    return cudaSuccess;
  if (vec4_ok (x, xs0, xs1, y, ys0, ys1, n2))
    convert_3d<S, D, true><<<grid_for (n0 * n1 * (n2 / 4)), kThreads, 0, st>>> (
        x, xs0, xs1, y, ys0, ys1, n0, n1, n2);
  else
    convert_3d<S, D, false><<<grid_for (n0 * n1 * n2), kThreads, 0, st>>> (
        x, xs0, xs1, y, ys0, ys1, n0, n1, n2);
  return cudaGetLastError ();
}

} // namespace

extern "C" cudaError_t
lb_cuda_launch_f32_to_bf16_3d (cudaStream_t st, const float *x, int64_t xs0,
    int64_t xs1, uint16_t *y, int64_t ys0, int64_t ys1, int64_t n0, int64_t n1,
    int64_t n2)
{
  return launch_3d (st, x, xs0, xs1, y, ys0, ys1, n0, n1, n2);
}

extern "C" cudaError_t
lb_cuda_launch_bf16_to_f32_3d (cudaStream_t st, const uint16_t *x, int64_t xs0,
    int64_t xs1, float *y, int64_t ys0, int64_t ys1, int64_t n0, int64_t n1,
    int64_t n2)
{
  return launch_3d (st, x, xs0, xs1, y, ys0, ys1, n0, n1, n2);
}

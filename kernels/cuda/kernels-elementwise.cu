/* lingbot-gst: CUDA elementwise kernels (activations, add/mul/scale, fill)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Same float32 formulas as kernels/cpu/elementwise.c (GELU as
 * x * sigmoid(2u), accurate expf; nvcc may contract a*b+c into an FMA, a
 * difference of at most an ulp or so).
 */
#include "kernels/cuda/kernels-common.cuh"

using namespace lbk;

namespace {

struct Params
{
  int op;
  float alpha, beta;
};

__device__ __forceinline__ float
apply (const Params &p, float a, float b)
{
  switch (p.op) {
    case LB_CUDA_EW_GELU_TANH: {
      const float k2 = 2.0f * 0.7978845608028654f;
      return a / (1.0f + expf (-k2 * (a + 0.044715f * a * a * a)));
    }
    case LB_CUDA_EW_SILU:
      return a / (1.0f + expf (-a));
    case LB_CUDA_EW_SCALE:
      return p.alpha * a + p.beta;
    case LB_CUDA_EW_ADD:
      return a + b;
    default:
      return a * b;
  }
}

/* Dense: all operands contiguous over n elements (b NULL or dense). */
__global__ void
ew_dense (Params p, const float *__restrict__ a, const float *__restrict__ b,
    float *y, int64_t n)
{
  LBK_GRID_STRIDE (i, n) {
    y[i] = apply (p, a[i], b ? b[i] : 0.0f);
  }
}

/* Rows of d with leading dimensions; bld 0 broadcasts one row of b. */
__global__ void
ew_rows (Params p, const float *a, int64_t ald, const float *b, int64_t bld,
    float *y, int64_t yld, int64_t m, int64_t d)
{
  LBK_GRID_STRIDE (idx, m * d) {
    int64_t i = idx / d, j = idx - i * d;
    y[i * yld + j] = apply (p, a[i * ald + j], b ? b[i * bld + j] : 0.0f);
  }
}

__global__ void
fill_kernel (float *y, int64_t n, float value)
{
  LBK_GRID_STRIDE (i, n) {
    y[i] = value;
  }
}

} // namespace

extern "C" cudaError_t
lb_cuda_launch_elementwise (cudaStream_t st, LbCudaEwOp op, const float *a,
    int64_t ald, const float *b, int64_t bld, float *y, int64_t yld, int64_t m,
    int64_t d, float alpha, float beta)
{
  if (m <= 0 || d <= 0)
    return cudaSuccess;
  Params p = { (int)op, alpha, beta };
  const bool dense = (ald == d && yld == d && (b == NULL || bld == d))
                     || (m == 1 && (b == NULL || bld == d || bld == 0));
  if (dense)
    ew_dense<<<grid_for (m * d), kThreads, 0, st>>> (p, a, b, y, m * d);
  else
    ew_rows<<<grid_for (m * d), kThreads, 0, st>>> (
        p, a, ald, b, bld, y, yld, m, d);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_fill (cudaStream_t st, float *y, int64_t n, float value)
{
  if (n <= 0)
    return cudaSuccess;
  fill_kernel<<<grid_for (n), kThreads, 0, st>>> (y, n, value);
  return cudaGetLastError ();
}

/* lingbot-gst: CUDA elementwise kernels (activations, add/mul/scale, fill)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Same float32 formulas as kernels/cpu/elementwise.c (GELU as
 * x * sigmoid(2u), accurate expf, in the CPU's order with explicit
 * roundings: gelu_tanh_rn(), shared with the fp8 GELU epilogue; elsewhere
 * nvcc may contract a*b+c into an FMA, a difference of at most an ulp or
 * so).  Dense operands aligned to 16
 * bytes with a multiple of 4 elements go 16 bytes a load and a store
 * (float4); the unary ops may write bfloat16 (the next bf16 GEMM's input),
 * each value rounded by bf16_round().
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
    case LB_CUDA_EW_GELU_TANH:
      return gelu_tanh_rn (a);
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

/* Dense, 16 bytes at a time: n4 float4 of a, b (nullable) and y, all
 * 16-byte aligned (a may be y). */
__global__ void
ew_dense4 (Params p, const float4 *a, const float4 *b, float4 *y, int64_t n4)
{
  LBK_GRID_STRIDE (i, n4) {
    const float4 x = a[i];
    const float4 z = b ? b[i] : make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
    y[i] = make_float4 (apply (p, x.x, z.x), apply (p, x.y, z.y),
        apply (p, x.z, z.z), apply (p, x.w, z.w));
  }
}

/* A unary op into bfloat16 rows (yld in elements). */
__global__ void
ew_rows_bf16 (Params p, const float *a, int64_t ald, uint16_t *y, int64_t yld,
    int64_t m, int64_t d)
{
  LBK_GRID_STRIDE (idx, m * d) {
    int64_t i = idx / d, j = idx - i * d;
    y[i * yld + j] = bf16_round (apply (p, a[i * ald + j], 0.0f));
  }
}

/* The same dense, 16 bytes of a and 8 of y at a time. */
__global__ void
ew_dense4_bf16 (Params p, const float4 *a, ushort4 *y, int64_t n4)
{
  LBK_GRID_STRIDE (i, n4) {
    const float4 x = a[i];
    y[i] = make_ushort4 (bf16_round (apply (p, x.x, 0.0f)),
        bf16_round (apply (p, x.y, 0.0f)), bf16_round (apply (p, x.z, 0.0f)),
        bf16_round (apply (p, x.w, 0.0f)));
  }
}

/* Whether @p is aligned to @bytes. */
bool
aligned (const void *p, uintptr_t bytes)
{
  return ((uintptr_t)p & (bytes - 1)) == 0;
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
  const int64_t n = m * d;
  /* dense: b (when given) has n elements too (one row when m == 1) */
  if (dense && n % 4 == 0 && aligned (a, 16) && aligned (y, 16)
      && (b == NULL || aligned (b, 16)))
    ew_dense4<<<grid_for (n / 4), kThreads, 0, st>>> (
        p, (const float4 *)a, (const float4 *)b, (float4 *)y, n / 4);
  else if (dense)
    ew_dense<<<grid_for (n), kThreads, 0, st>>> (p, a, b, y, n);
  else
    ew_rows<<<grid_for (m * d), kThreads, 0, st>>> (
        p, a, ald, b, bld, y, yld, m, d);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_unary_bf16 (cudaStream_t st, LbCudaEwOp op, const float *a,
    int64_t ald, uint16_t *y, int64_t yld, int64_t m, int64_t d, float alpha,
    float beta)
{
  if (m <= 0 || d <= 0)
    return cudaSuccess;
  Params p = { (int)op, alpha, beta };
  const int64_t n = m * d;
  if (((ald == d && yld == d) || m == 1) && n % 4 == 0 && aligned (a, 16)
      && aligned (y, 8))
    ew_dense4_bf16<<<grid_for (n / 4), kThreads, 0, st>>> (
        p, (const float4 *)a, (ushort4 *)y, n / 4);
  else
    ew_rows_bf16<<<grid_for (n), kThreads, 0, st>>> (p, a, ald, y, yld, m, d);
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

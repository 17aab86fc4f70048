/* lingbot-gst: CUDA fused ops of the DiT block: RMSNorm + RoPE, gated
 * residual + modulation (LayerNorm + modulation is kernels-norm.cu's
 * layer norm kernel)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Each kernel is its op pair of kernels-norm.cu / kernels-layout.cu with
 * the intermediate kept in registers: the norms are one block per row
 * with the statistics and the normalised value in double (layer_norm_kernel,
 * rms_norm_kernel), then the pair's float formula (modulate_kernel,
 * rope_kernel, gated_residual_kernel) is applied to the rounded float.
 * So they compute what the unfused CUDA ops compute, up to the
 * compiler's FMA contraction of those float formulas (parity with the CPU
 * oracle at 1e-5, tests/gpu/test-ops-parity.c).  The RoPE rotation of
 * rms_norm_rope is written with __fmul_rn / __fsub_rn / __fadd_rn (no
 * contraction: the CPU's float operations), and its output may be bf16
 * (a bf16 KV cache's slots): the same f32 value, rounded by bf16_round().
 */
#include "kernels/cuda/kernels-common.cuh"

using namespace lbk;

namespace {

/* One block per token; thread q of the output loop owns pair q of the row
 * (head q / half, pair q % half), which are elements 2q and 2q + 1 of x:
 * in place (y == x, f32 only) each pair is read and written by one
 * thread, after the barriers of block_sum.  T: float, or uint16_t for
 * bfloat16 y. */
template <typename T>
__global__ void
rms_norm_rope_kernel (const float *x, int64_t xld, const float *w, float eps,
    T *y, int64_t ys0, int64_t ys1, int64_t n, int64_t nh, int64_t hd,
    int64_t tp, int64_t hp, const float *cs, const float *sn, int64_t grid_h,
    int64_t grid_w, int64_t f0, int64_t r0)
{
  __shared__ double red[32];
  const int64_t d = nh * hd, half = hd / 2, pairs = nh * half;
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const float *xr = x + t * xld;
    const double r = row_rms_inv (xr, d, eps, red);
    const int64_t pf = f0 + t / (grid_h * grid_w);
    const int64_t ph = r0 + (t / grid_w) % grid_h, pw = t % grid_w;
    for (int64_t q = threadIdx.x; q < pairs; q += blockDim.x) {
      const int64_t h = q / half, p = q - h * half, j = h * hd + 2 * p;
      const int64_t pos = p < tp ? pf : (p < tp + hp ? ph : pw);
      const double a0 = xr[j] * r, a1 = xr[j + 1] * r;
      const float x0 = (float)(w ? a0 * w[j] : a0);
      const float x1 = (float)(w ? a1 * w[j + 1] : a1);
      const float c = cs[pos * half + p], sv = sn[pos * half + p];
      T *v = y + t * ys0 + h * ys1 + 2 * p;
      store_from_float (v, __fsub_rn (__fmul_rn (x0, c), __fmul_rn (x1, sv)));
      store_from_float (
          v + 1, __fadd_rn (__fmul_rn (x0, sv), __fmul_rn (x1, c)));
    }
  }
}

/* V (1 or 4, rows_vec4()) consecutive elements per thread. */
template <int V>
__global__ void
gated_residual_modulate_kernel (float *x, int64_t xld, const float *y,
    int64_t yld, const float *g, int64_t gld, const float *sc, int64_t sld,
    const float *sh, int64_t hld, int64_t m, int64_t d)
{
  const int64_t dv = d / V;
  LBK_GRID_STRIDE (idx, m * dv) {
    int64_t i = idx / dv, j = (idx - i * dv) * V;
    float a[V], v[V], gv[V], s[V], h[V];
    ld_v<V> (x + i * xld + j, a);
    ld_v<V> (y + i * yld + j, v);
    if (g)
      ld_v<V> (g + i * gld + j, gv);
    ld_v<V> (sc + i * sld + j, s);
    ld_v<V> (sh + i * hld + j, h);
    for (int u = 0; u < V; u++) {
      const float r = a[u] + (g ? v[u] * gv[u] : v[u]); /* gated_residual */
      a[u] = r * (1.0f + s[u]) + h[u];
    }
    st_v<V> (x + i * xld + j, a);
  }
}

} // namespace

/**
 * lb_cuda_launch_rms_norm_rope:
 * @st: the stream (its device current)
 * @x: f32 [n, nh * hd], row stride @xld
 * @xld: elements between rows of @x
 * @w: (nullable): f32 [nh * hd] RMSNorm weight
 * @eps: added to the mean square
 * @y: f32 [n, nh, hd] with strides (@ys0, @ys1, 1), may be @x seen so; or
 *   bfloat16 bits when @y_bf16 (e.g. a bf16 KV cache's slot rows), then
 *   not overlapping @x
 * @y_bf16: whether @y is bfloat16
 * @ys0: elements between tokens of @y
 * @ys1: elements between heads of @y
 * @n: tokens
 * @nh: heads
 * @hd: head dim (even)
 * @cos: f32 [P, hd / 2] RoPE table
 * @sin: f32 [P, hd / 2]
 * @grid_h: token rows per frame
 * @grid_w: token columns per row
 * @frame_offset: first frame position
 * @row_offset: first row position
 *
 * The rms_norm_rope op (kernels/ops.h, spec 1.8 and 1.11); into a bf16 y,
 * the f32 value per element rounded to nearest even exactly as
 * lb_f32_to_bf16().  Asynchronous.
 *
 * Returns: cudaSuccess or the launch error.
 */
extern "C" cudaError_t
lb_cuda_launch_rms_norm_rope (cudaStream_t st, const float *x, int64_t xld,
    const float *w, float eps, void *y, int y_bf16, int64_t ys0, int64_t ys1,
    int64_t n, int64_t nh, int64_t hd, const float *cos, const float *sin,
    int64_t grid_h, int64_t grid_w, int64_t frame_offset, int64_t row_offset)
{
  /* the axis split of lb_cuda_launch_rope_3d() (kernels/cpu/rope.c) */
  const int64_t hp = hd / 6, tp = (hd - 4 * (hd / 6)) / 2;
  if (n <= 0 || nh <= 0 || hd <= 0)
    return cudaSuccess;
  if (y_bf16)
    rms_norm_rope_kernel<uint16_t><<<row_grid (n), kThreads, 0, st>>> (x, xld,
        w, eps, (uint16_t *)y, ys0, ys1, n, nh, hd, tp, hp, cos, sin, grid_h,
        grid_w, frame_offset, row_offset);
  else
    rms_norm_rope_kernel<float><<<row_grid (n), kThreads, 0, st>>> (x, xld, w,
        eps, (float *)y, ys0, ys1, n, nh, hd, tp, hp, cos, sin, grid_h, grid_w,
        frame_offset, row_offset);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_gated_residual_modulate (cudaStream_t st, float *x, int64_t xld,
    const float *y, int64_t yld, const float *gate, int64_t gld,
    const float *scale, int64_t sld, const float *shift, int64_t hld, int64_t m,
    int64_t d)
{
  if (m <= 0 || d <= 0)
    return cudaSuccess;
  const void *p[5] = { x, y, gate, scale, shift };
  const int64_t ld[5] = { xld, yld, gld, sld, hld };
  if (rows_vec4 (d, 5, p, ld))
    gated_residual_modulate_kernel<4>
        <<<grid_for (m * d / 4), kThreads, 0, st>>> (
            x, xld, y, yld, gate, gld, scale, sld, shift, hld, m, d);
  else
    gated_residual_modulate_kernel<1><<<grid_for (m * d), kThreads, 0, st>>> (
        x, xld, y, yld, gate, gld, scale, sld, shift, hld, m, d);
  return cudaGetLastError ();
}

/* lingbot-gst: CUDA layout kernels: RoPE, nearest upsample, (un)patchify,
 * bicubic resize
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * One thread per output element (per rotated pair for RoPE), the index
 * arithmetic of kernels/cpu/rope.c and kernels/cpu/layout.c.
 */
#include "kernels/cuda/kernels-common.cuh"
#include "kernels/bicubic.h"

using namespace lbk;

namespace {

__global__ void
rope_kernel (float *x, int64_t s0, int64_t s1, int64_t n, int64_t nh,
    int64_t half, int64_t tp, int64_t hp, const float *cs, const float *sn,
    int64_t grid_h, int64_t grid_w, int64_t f0, int64_t r0)
{
  LBK_GRID_STRIDE (idx, n * nh * half) {
    int64_t p = idx % half, rest = idx / half;
    int64_t h = rest % nh, t = rest / nh;
    int64_t pos;
    if (p < tp)
      pos = f0 + t / (grid_h * grid_w);
    else if (p < tp + hp)
      pos = r0 + (t / grid_w) % grid_h;
    else
      pos = t % grid_w;
    float c = cs[pos * half + p], s = sn[pos * half + p];
    float *v = x + t * s0 + h * s1 + 2 * p;
    float x0 = v[0], x1 = v[1];
    v[0] = x0 * c - x1 * s;
    v[1] = x0 * s + x1 * c;
  }
}

__global__ void
upsample_kernel (const float *x, float *y, int64_t rows, int64_t w)
{
  const int64_t w2 = 2 * w;
  LBK_GRID_STRIDE (idx, rows * 2 * w2) {
    int64_t col = idx % w2, orow = idx / w2;
    y[idx] = x[(orow / 2) * w + col / 2];
  }
}

__global__ void
patchify_kernel (const float *x, float *y, int64_t c, int64_t f, int64_t h,
    int64_t w, int ph, int pw)
{
  const int64_t hp = h / ph, wp = w / pw, feat = c * ph * pw;
  const int64_t ntok = f * hp * wp;
  LBK_GRID_STRIDE (idx, ntok * feat) {
    int64_t t = idx / feat, e = idx % feat;
    int64_t ci = e / (ph * pw), kh = (e / pw) % ph, kw = e % pw;
    int64_t fi = t / (hp * wp), i = (t / wp) % hp, j = t % wp;
    y[idx] = x[((ci * f + fi) * h + i * ph + kh) * w + j * pw + kw];
  }
}

__global__ void
unpatchify_kernel (const float *z, float *y, int64_t c, int64_t f, int64_t h,
    int64_t w, int ph, int pw)
{
  const int64_t hp = h / ph, wp = w / pw, feat = c * ph * pw;
  LBK_GRID_STRIDE (idx, c * f * h * w) {
    int64_t col = idx % w, r = idx / w;
    int64_t ci = r / (f * h), fi = (r / h) % f, row = r % h;
    int64_t i = row / ph, kh = row % ph, j = col / pw, kw = col % pw;
    y[idx] = z[((fi * hp + i) * wp + j) * feat + (kh * pw + kw) * c + ci];
  }
}

__global__ void
bicubic_kernel (const float *x, float *y, int64_t c, int64_t h, int64_t w,
    int64_t ho, int64_t wo, float sh, float sw)
{
  LBK_GRID_STRIDE (idx, c * ho * wo) {
    int64_t ox = idx % wo, r = idx / wo;
    int64_t ci = r / ho, oy = r % ho;
    int64_t iy[4], ix[4];
    float wy[4], wx[4];
    lb_cubic_taps (sh, oy, h, iy, wy);
    lb_cubic_taps (sw, ox, w, ix, wx);
    y[idx] = lb_cubic_combine (x + ci * h * w, w, iy, wy, ix, wx);
  }
}

/* The parameters of patchify_kernel and unpatchify_kernel. */
typedef void PatchKernel (const float *src, float *y, int64_t c, int64_t f,
    int64_t h, int64_t w, int ph, int pw);

/* @kernel from @src into @y, one thread per element of the image [c, f,
 * h, w]. */
cudaError_t
launch_patch (PatchKernel *kernel, cudaStream_t st, const float *src, float *y,
    int64_t c, int64_t f, int64_t h, int64_t w, int ph, int pw)
{
  int64_t n = c * f * h * w;
  if (n <= 0)
    return cudaSuccess;
  kernel<<<grid_for (n), kThreads, 0, st>>> (src, y, c, f, h, w, ph, pw);
  return cudaGetLastError ();
}

} // namespace

extern "C" cudaError_t
lb_cuda_launch_rope_3d (cudaStream_t st, float *x, int64_t s0, int64_t s1,
    int64_t n, int64_t nh, int64_t hd, const float *cos, const float *sin,
    int64_t grid_h, int64_t grid_w, int64_t frame_offset, int64_t row_offset)
{
  const int64_t half = hd / 2, hp = hd / 6, tp = (hd - 4 * (hd / 6)) / 2;
  if (n <= 0 || nh <= 0 || half <= 0)
    return cudaSuccess;
  rope_kernel<<<grid_for (n * nh * half), kThreads, 0, st>>> (x, s0, s1, n, nh,
      half, tp, hp, cos, sin, grid_h, grid_w, frame_offset, row_offset);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_upsample_nearest2x (
    cudaStream_t st, const float *x, float *y, int64_t rows, int64_t w)
{
  if (rows <= 0 || w <= 0)
    return cudaSuccess;
  upsample_kernel<<<grid_for (rows * 4 * w), kThreads, 0, st>>> (x, y, rows, w);
  return cudaGetLastError ();
}

extern "C" cudaError_t
lb_cuda_launch_patchify (cudaStream_t st, const float *x, float *y, int64_t c,
    int64_t f, int64_t h, int64_t w, int ph, int pw)
{
  return launch_patch (patchify_kernel, st, x, y, c, f, h, w, ph, pw);
}

extern "C" cudaError_t
lb_cuda_launch_unpatchify (cudaStream_t st, const float *z, float *y, int64_t c,
    int64_t f, int64_t h, int64_t w, int ph, int pw)
{
  return launch_patch (unpatchify_kernel, st, z, y, c, f, h, w, ph, pw);
}

extern "C" cudaError_t
lb_cuda_launch_resize_bicubic (cudaStream_t st, const float *x, float *y,
    int64_t c, int64_t h, int64_t w, int64_t ho, int64_t wo)
{
  if (c <= 0 || ho <= 0 || wo <= 0)
    return cudaSuccess;
  const float sh = (float)h / (float)ho, sw = (float)w / (float)wo;
  bicubic_kernel<<<grid_for (c * ho * wo), kThreads, 0, st>>> (
      x, y, c, h, w, ho, wo, sh, sw);
  return cudaGetLastError ();
}

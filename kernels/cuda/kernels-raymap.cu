/* lingbot-gst: CUDA camera ray map (the control tensor of spec 2.6-2.7)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The arithmetic of kernels/cpu/raymap.c (lb_cpu_ray_map_fill), one thread
 * per output element: consecutive threads write consecutive latent columns
 * of one channel, so the stores coalesce; each thread evaluates its
 * pixel's ray (the direction channels) or copies a translation (the origin
 * channels).  Every operation is a round-to-nearest intrinsic
 * (__fadd_rn, __fsub_rn, __fmul_rn, __fdiv_rn, __fsqrt_rn) in the CPU's
 * order: nvcc never contracts them into FMAs nor approximates the
 * quotients, so the result is the CPU's bit for bit (IEEE single
 * precision, no flush to zero unless the build sets -ftz).
 */
#include "kernels/cuda/kernels-common.cuh"

using namespace lbk;

namespace {

__global__ void
ray_map_kernel (const float *__restrict__ poses, float fx, float fy, float cx,
    float cy, int64_t frames, int64_t row0, int64_t rows, int64_t wl,
    float *__restrict__ y, int64_t n)
{
  LBK_GRID_STRIDE (i, n) {
    const int64_t lx = i % wl;
    int64_t t = i / wl;
    const int64_t ly = row0 + t % rows;
    t /= rows;
    const int64_t f = t % frames;
    const int ch = (int)(t / frames);
    const int c = ch / 64, r = (ch % 64) / 8, s = ch % 8;
    const float *p = poses + 16 * f;
    float out;
    if (c < 3) {
      out = p[c * 4 + 3]; /* the origin: the translation */
    } else {
      const float u = (float)(lx * 8 + s), v = (float)(ly * 8 + r);
      const float x = __fdiv_rn (__fsub_rn (__fadd_rn (u, 0.5f), cx), fx);
      const float yy = __fdiv_rn (__fsub_rn (__fadd_rn (v, 0.5f), cy), fy);
      float acc = __fadd_rn (0.0f, __fmul_rn (x, x));
      acc = __fadd_rn (acc, __fmul_rn (yy, yy));
      acc = __fadd_rn (acc, 1.0f);
      const float nrm = __fsqrt_rn (acc);
      const float d0 = __fdiv_rn (x, nrm), d1 = __fdiv_rn (yy, nrm),
                  d2 = __fdiv_rn (1.0f, nrm);
      const float *row = p + (c - 3) * 4;
      float a = __fadd_rn (0.0f, __fmul_rn (d0, row[0]));
      a = __fadd_rn (a, __fmul_rn (d1, row[1]));
      a = __fadd_rn (a, __fmul_rn (d2, row[2]));
      out = a;
    }
    y[i] = out;
  }
}

} /* namespace */

extern "C" cudaError_t
lb_cuda_launch_ray_map (cudaStream_t st, const float *poses, float fx, float fy,
    float cx, float cy, int64_t frames, int64_t row0, int64_t rows, int64_t wl,
    float *y)
{
  const int64_t n = 384 * frames * rows * wl;
  if (n <= 0)
    return cudaSuccess;
  ray_map_kernel<<<grid_for (n), kThreads, 0, st>>> (
      poses, fx, fy, cx, cy, frames, row0, rows, wl, y, n);
  return cudaGetLastError ();
}

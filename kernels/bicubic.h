/* lingbot-gst: the arithmetic of the bicubic resize, shared by the CPU
 * and CUDA backends
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Plain C with no GLib, included by kernels/cpu/layout.c and, through
 * nvcc, by kernels/cuda/kernels-layout.cu (the functions are then device
 * functions), so that both resize_bicubic ops spell the same float32
 * operations: torch.nn.functional.interpolate(mode="bicubic",
 * align_corners=False, antialias=False) as its CPU kernel computes it
 * (UpSample.h).
 */
#pragma once

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define LB_BICUBIC_FN static __device__ __forceinline__
/* no FMA contraction: the CPU rounds the product before it subtracts (a
 * float coordinate gave 3.4e-5 relative at 480x640 -> 464x832 on an
 * H200) */
#define LB_BICUBIC_SRC(scale, o) \
  __dsub_rn (__dmul_rn ((double) (scale), (double) (o) + 0.5), 0.5)
#else
#define LB_BICUBIC_FN static inline
#define LB_BICUBIC_SRC(scale, o) ((double) (scale) * ((double) (o) + 0.5) - 0.5)
#endif

/* torch's cubic convolution kernels, A = @a, in float. */
LB_BICUBIC_FN float
lb_cubic1 (float x, float a)
{
  return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f;
}

LB_BICUBIC_FN float
lb_cubic2 (float x, float a)
{
  return ((a * x - 5.0f * a) * x + 8.0f * a) * x - 4.0f * a;
}

/* The 4 source taps @idx (clamped to [0, @in - 1], @in >= 1) and weights
 * @wt of output index @o at @scale = in / out, as torch computes them,
 * A = -0.75.  The source coordinate and its fraction are taken in double
 * (the float32 scale times a double `o + 0.5`) and only the fraction is
 * rounded to float: this is what reproduces the reference's 480p resize
 * (golden preprocess fixture: 1e-6 instead of 1e-4 with a float32
 * coordinate). */
LB_BICUBIC_FN void
lb_cubic_taps (float scale, int64_t o, int64_t in, int64_t idx[4], float wt[4])
{
  const float a = -0.75f;
  double real = LB_BICUBIC_SRC (scale, o);
  double fl = floor (real);
  float t = (float) (real - fl);
  int64_t i0 = (int64_t) fl;
  wt[0] = lb_cubic2 (t + 1.0f, a);
  wt[1] = lb_cubic1 (t, a);
  wt[2] = lb_cubic1 (1.0f - t, a);
  wt[3] = lb_cubic2 (2.0f - t, a);
  for (int k = 0; k < 4; k++) {
    int64_t v = i0 - 1 + k;
    idx[k] = v > in - 1 ? in - 1 : (v < 0 ? 0 : v);
  }
}

/* One output value from the taps of lb_cubic_taps(): rows @iy of @plane
 * (@w floats apart) at columns @ix, each row's 4 width taps combined
 * first (weights @wx), then the rows (weights @wy), all in float32. */
LB_BICUBIC_FN float
lb_cubic_combine (const float *plane, int64_t w, const int64_t iy[4],
    const float wy[4], const int64_t ix[4], const float wx[4])
{
  float out = 0.0f;
  for (int k = 0; k < 4; k++) {
    const float *row = plane + iy[k] * w;
    float t = row[ix[0]] * wx[0];
    for (int l = 1; l < 4; l++)
      t += row[ix[l]] * wx[l];
    if (k == 0)
      out = t * wy[0];
    else
      out += t * wy[k];
  }
  return out;
}

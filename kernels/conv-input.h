/* lingbot-gst: the input geometry of the convolution cores
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Plain C with no GLib: kernels/cuda/cuda-kernels.h (which nvcc includes)
 * passes it to the CUDA im2col kernel.  Filled from an LbConvGeom by
 * lb_conv_input() (kernels/ops-check.h) for the CPU core
 * (kernels/cpu/conv.c) and the CUDA one (kernels/cuda/cuda-ops.c).
 */
#pragma once

#include <stdint.h>

/* The temporal input of a convolution: @zeros zero frames, then @cache_t
 * frames of @cache, then the frames of @x (conv2d: the batch elements are
 * the frames, kt = 1, no zeros or cache).  Element (c, frame, row, col) of
 * a source is at base + c*cs + frame*fs + row*w + col. */
typedef struct
{
  int64_t zeros;
  const float *cache;
  int64_t cache_t, cache_cs, cache_fs;
  const float *x;
  int64_t x_cs, x_fs;
  int64_t cin, h, w;
  int64_t kt, kh, kw, sh, sw, ph, pw;
  int64_t ho, wo;
} LbConvIn;

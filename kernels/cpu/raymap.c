/* lingbot-gst: CPU camera ray map (the control tensor of spec 2.6-2.7)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The arithmetic of the camera control tensor, shared by the ray_map op and
 * lingbot_control_pack() / lingbot_control_fill() (lingbot/control-raymap.c,
 * through kernels/raymap.h), so the op is the host path byte for byte.  Every value is a single float32
 * operation in the order written (kernels/ops.h, @ray_map): the CUDA kernel
 * (kernels/cuda/kernels-raymap.cu) spells the same operations with
 * round-to-nearest intrinsics and matches bit for bit.
 */
#include "kernels/cpu/cpu-internal.h"

#include <math.h>

/* No fused multiply-adds: the device kernel rounds every product. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#define RAY_CHANNELS 6
#define FOLD 8

static inline void
ray6 (const float *p, float x, float y, float o[RAY_CHANNELS])
{
  float acc = 0.0f, nrm, d0, d1, d2;

  acc += x * x;
  acc += y * y;
  acc += 1.0f;
  nrm = sqrtf (acc);
  d0 = x / nrm;
  d1 = y / nrm;
  d2 = 1.0f / nrm;
  o[0] = p[3];
  o[1] = p[7];
  o[2] = p[11];
  for (int i = 0; i < 3; i++) {
    float a = 0.0f;
    a += d0 * p[i * 4 + 0];
    a += d1 * p[i * 4 + 1];
    a += d2 * p[i * 4 + 2];
    o[3 + i] = a;
  }
}

/**
 * lb_cpu_ray_pixel:
 * @pose: a relative pose, float32 row-major 4x4 (16 floats)
 * @x: normalised image-plane x, `((float) u + 0.5 - cx) / fx`
 * @y: normalised image-plane y, `((float) v + 0.5 - cy) / fy`
 * @out: (out caller-allocates): the pixel's 6 ray channels: the origin
 *   (pose translation) then the rotated unit direction
 *
 * One pixel of the ray map of spec 2.6, exactly as lb_cpu_ray_map_fill()
 * computes it (lingbot_control_plucker() uses it).
 */
void
lb_cpu_ray_pixel (const float *pose, float x, float y, float out[6])
{
  ray6 (pose, x, y, out);
}

/**
 * lb_cpu_ray_map_fill:
 * @rel_poses: @n_frames float32 row-major 4x4 poses
 * @n_frames: latent frames C
 * @k: fx, fy, cx, cy in pixels at the output size
 * @width: output width in pixels (a positive multiple of 8; not checked)
 * @row0: first latent row
 * @rows: latent rows to build
 * @xs: scratch of @width floats (receives the per-column x)
 * @out: (out caller-allocates): float32 [384, C, rows, width / 8]
 *
 * The ray map of latent rows [@row0, @row0 + @rows) folded 8x8 onto the
 * latent grid (spec 2.6-2.7): channel c*64 + r*8 + s of cell (ly, lx) is
 * ray channel c of pixel (8 ly + r, 8 lx + s).  The caller has checked
 * the sizes (lb_check_ray_map(), or lingbot/control.c's own checks).
 */
void
lb_cpu_ray_map_fill (const float *rel_poses, int n_frames, const float k[4],
    int width, int row0, int rows, float *xs, float *out)
{
  const int wl = width / FOLD;
  const gsize plane = (gsize) rows * wl;
  const gsize chan_stride = plane * (gsize) n_frames;

  for (int u = 0; u < width; u++)
    xs[u] = ((float) u + 0.5f - k[2]) / k[0];

  for (int n = 0; n < n_frames; n++) {
    const float *p = rel_poses + 16 * n;
    float *fo = out + (gsize) n * plane;
    for (int ly = row0; ly < row0 + rows; ly++)
      for (int r = 0; r < FOLD; r++) {
        int v = ly * FOLD + r;
        float y = ((float) v + 0.5f - k[3]) / k[1];
        gsize cell_row = (gsize) (ly - row0) * wl;
        for (int u = 0; u < width; u++) {
          float o[RAY_CHANNELS];
          int lx = u / FOLD, s = u % FOLD;
          ray6 (p, xs[u], y, o);
          for (int c = 0; c < RAY_CHANNELS; c++)
            fo[(gsize) (c * 64 + r * 8 + s) * chan_stride + cell_row + lx] =
                o[c];
        }
      }
  }
}

/**
 * lb_cpu_ray_map:
 * @s: a CPU stream
 * @rel_poses: f32 [C, 16] contiguous: relative poses, row-major 4x4
 * @fx: focal length x, pixels
 * @fy: focal length y, pixels
 * @cx: principal point x, pixels
 * @cy: principal point y, pixels
 * @width: output width in pixels (positive multiple of 8)
 * @height: output height in pixels (positive multiple of 8)
 * @row0: first latent row
 * @y: f32 [384, C, rows, width / 8] contiguous
 * @error: %LB_ERROR_SHAPE on a bad size, band or operand
 *
 * The ray_map op (kernels/ops.h; spec 2.6-2.7): bit-identical to
 * lingbot_control_pack() of the same band.  Its x scratch is the thread's
 * CPU scratch (lb_cpu_scratch()), so nothing is allocated after the first
 * call.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_ray_map (LbStream * s, const LbTensor * rel_poses, float fx, float fy,
    float cx, float cy, int width, int height, int row0, LbTensor * y,
    GError ** error)
{
  (void) s;
  if (!lb_check_devices (LB_CPU_DEVICE, "ray_map", error, "rel_poses",
          rel_poses, "y", y, NULL)
      || !lb_check_ray_map (rel_poses, width, height, row0, y, error))
    return FALSE;
  const float k[4] = { fx, fy, cx, cy };
  lb_cpu_ray_map_fill (rel_poses->data, (int) rel_poses->shape[0], k, width,
      row0, (int) y->shape[2], lb_cpu_scratch ((gsize) width), y->data);
  return TRUE;
}

/* lingbot-gst: camera control: the ray map and its 8x8 fold onto the
 * latent grid (the per-chunk control tensor)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot_model_spec.md sections 2.6-2.7.
 */
#include "lingbot/control.h"
#include "lingbot/control-private.h"
#include "kernels/error.h"
#include "kernels/raymap.h"

/* No fused multiply-adds: the golden fixtures round every product
 * (control-private.h). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

/* ------------------------------------------------------------------ */
/* ray map and packing                                                */
/* ------------------------------------------------------------------ */

/* The arithmetic lives in kernels/cpu/raymap.c, shared with the ray_map
 * op (kernels/ops.h), so a device rank's control tensor is this one bit for
 * bit: one pixel is origin = translation, direction =
 * R * normalize(((u+0.5-cx)/fx, (v+0.5-cy)/fy, 1)). */

/**
 * lingbot_control_plucker:
 * @rel_poses: (array): n_frames relative poses, float32 row-major 4x4
 * @n_frames: number of frames
 * @k: transformed intrinsics fx, fy, cx, cy
 * @width: output width W
 * @height: output height H
 * @out: (out caller-allocates): [n_frames, H, W, 6] float32
 *
 * The per-pixel ray map of spec 2.6 (origin, rotated unit direction; no
 * moment), pixel centres at +0.5.  Mostly for tests: the control tensor is
 * built by lingbot_control_pack() without this intermediate.
 */
void
lingbot_control_plucker (const float *rel_poses, guint n_frames,
    const float k[4], int width, int height, float *out)
{
  for (guint n = 0; n < n_frames; n++)
    for (int v = 0; v < height; v++) {
      float y = ((float) v + 0.5f - k[3]) / k[1];
      for (int u = 0; u < width; u++) {
        float x = ((float) u + 0.5f - k[2]) / k[0];
        lb_cpu_ray_pixel (rel_poses + 16 * n, x, y,
            out + (((gsize) n * height + v) * width + u) *
            CONTROL_RAY_CHANNELS);
      }
    }
}

/* lingbot_control_pack() with the caller's scratch @xs of @width floats
 * (control-private.h) */
gboolean
lingbot_control_pack_scratch (const float *rel_poses, guint n_frames,
    const float k[4], int width, int height, int row0, int row1, float *out,
    float *xs, GError ** error)
{
  int hl;

  if (width <= 0 || height <= 0 || width % CONTROL_FOLD
      || height % CONTROL_FOLD) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "control: output size %dx%d is not a positive multiple of %d",
        width, height, CONTROL_FOLD);
    return FALSE;
  }
  hl = height / CONTROL_FOLD;
  if (row0 < 0 || row1 > hl || row0 > row1) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "control: latent rows [%d, %d) outside 0..%d", row0, row1, hl);
    return FALSE;
  }
  lb_cpu_ray_map_fill (rel_poses, (int) n_frames, k, width, row0,
      row1 - row0, xs, out);
  return TRUE;
}

/**
 * lingbot_control_pack:
 * @rel_poses: (array): n_frames relative poses (translation already
 *   scaled where the path scales it)
 * @n_frames: frames in the chunk (C)
 * @k: transformed intrinsics fx, fy, cx, cy
 * @width: output width W (multiple of 8)
 * @height: output height H (multiple of 8)
 * @row0: first latent row to produce
 * @row1: end latent row (exclusive), <= H/8
 * @out: (out caller-allocates): [384, n_frames, row1-row0, W/8] float32
 * @error: return location for a #GError
 *
 * Builds the ray map of latent rows [@row0, @row1) and folds it 8x8 onto
 * the latent grid (spec 2.7): channel c*64 + r*8 + s of cell (y, x) is ray
 * channel c of pixel (8y + r, 8x + s).  Rows outside the band are not
 * computed, so a rank builds only its own band.
 *
 * Returns: %TRUE; %FALSE with %LINGBOT_ERROR_INVALID_ARGUMENT for a size that
 *   is not a multiple of 8 or a bad band.
 */
gboolean
lingbot_control_pack (const float *rel_poses, guint n_frames,
    const float k[4], int width, int height, int row0, int row1, float *out,
    GError ** error)
{
  float *xs = g_new (float, MAX (width, 1));
  gboolean ok = lingbot_control_pack_scratch (rel_poses, n_frames, k, width,
      height, row0, row1, out, xs, error);
  g_free (xs);
  return ok;
}

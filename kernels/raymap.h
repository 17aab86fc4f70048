/* lingbot-gst: the host arithmetic of the camera ray map (spec 2.6-2.7)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Implemented in kernels/cpu/raymap.c.  The CPU backend's ray_map op
 * (kernels/ops.h) and lingbot/'s control tensor (lingbot_control_pack(),
 * lingbot_control_fill(), lingbot_control_plucker()) both call these, so a
 * rank's control tensor is the host one bit for bit; the CUDA kernel
 * (kernels/cuda/kernels-raymap.cu) spells the same float32 operations.
 * Plain host functions on caller memory: no stream, no backend.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

void lb_cpu_ray_map_fill (const float *rel_poses, int n_frames,
    const float k[4], int width, int row0, int rows, float *xs, float *out);
void lb_cpu_ray_pixel (const float *pose, float x, float y, float out[6]);

G_END_DECLS

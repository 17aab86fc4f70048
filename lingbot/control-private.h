/* lingbot-gst: what the control-*.c files share (not installed, not part
 * of lingbot/lingbot.h)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Every control-*.c file is compiled without fused multiply-adds: the
 * golden fixtures (PyTorch, float32) round every product before the sum,
 * and reproducing those roundings keeps long sessions within 1e-5.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define CONTROL_RAY_CHANNELS 6  /* origin x, y, z, direction x, y, z */
#define CONTROL_FOLD 8          /* pixels per latent cell, each axis */
#define CONTROL_CHANNELS \
  (CONTROL_RAY_CHANNELS * CONTROL_FOLD * CONTROL_FOLD)

/* control-poses.c: lingbot_control_relative_poses() with the caller's
 * scratch @rel of @n matrices (nothing allocated) */
G_GNUC_INTERNAL
    void lingbot_control_relative_poses_scratch (const float *poses, guint n,
    float *out, float *rel);

/* control-raymap.c: lingbot_control_pack() with the caller's scratch @xs of
 * @width floats (nothing allocated) */
G_GNUC_INTERNAL
    gboolean lingbot_control_pack_scratch (const float *rel_poses,
    guint n_frames, const float k[4], int width, int height, int row0, int row1,
    float *out, float *xs, GError ** error);

G_END_DECLS

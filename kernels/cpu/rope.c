/* lingbot-gst: 3-D rotary position embedding (tables and CPU op)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Spec lingbot_model_spec.md 1.8 and golden README 6 ("RoPE").  The head
 * dimension hd is split into pairs: temporal (hd - 4*(hd/6))/2 pairs, then
 * hd/6 height pairs, then hd/6 width pairs.  This is the official
 * WanModel split (rope_params(1024, d - 4*(d//6)), rope_params(1024,
 * 2*(d//6)) twice); the spec's hd - 2*(hd/3) / hd/3 form gives the same
 * numbers whenever hd/3 is even (hd = 32: 12/10/10 dims, the tiny golden;
 * hd = 128: 44/42/42, the real model) and, unlike it, never yields an odd
 * sub-dimension.
 */
#include "kernels/cpu/cpu-internal.h"

#include <math.h>

static void
rope_split (int64_t head_dim, int64_t * t_pairs, int64_t * h_pairs)
{
  *h_pairs = head_dim / 6;
  *t_pairs = (head_dim - 4 * (head_dim / 6)) / 2;
}

/**
 * lb_rope_tables_new:
 * @head_dim: per-head dimension (even, >= 2)
 * @max_pos: positions per axis (1024 in the reference)
 * @theta: frequency base (10000)
 * @cos_out: (out) (transfer full): [max_pos, head_dim/2] float32
 * @sin_out: (out) (transfer full): [max_pos, head_dim/2] float32
 *
 * Builds the 3-D RoPE tables of spec 1.8 (golden `trace.freqs_cos/sin`,
 * which they reproduce bit for bit for head_dim 32).  With t, h, w the
 * pair counts of the three axes (see the file comment), column p < t holds
 * angle `pos * theta^(-2p / (2t))`, column t + j (j < h) holds
 * `pos * theta^(-2j / (2h))` and column t + h + j holds the same for
 * width.  Angles, cos and sin are computed in float64 and rounded to
 * float32.  Row r is position r for every axis; lb_cpu_rope_3d() picks the
 * axis's position per column range.
 */
void
lb_rope_tables_new (int head_dim, int max_pos, double theta,
    LbTensor ** cos_out, LbTensor ** sin_out)
{
  g_return_if_fail (head_dim >= 2 && head_dim % 2 == 0 && max_pos >= 0);
  g_return_if_fail (cos_out != NULL && sin_out != NULL);
  int64_t half = head_dim / 2, tp, hp;
  rope_split (head_dim, &tp, &hp);
  int64_t shape[2] = { max_pos, half };
  LbTensor *c = lb_tensor_new (LB_DTYPE_F32, 2, shape);
  LbTensor *s = lb_tensor_new (LB_DTYPE_F32, 2, shape);
  double *omega = g_new (double, half);
  for (int64_t p = 0; p < half; p++) {
    int64_t j, sub;
    if (p < tp) {
      j = p;
      sub = 2 * tp;
    } else if (p < tp + hp) {
      j = p - tp;
      sub = 2 * hp;
    } else {
      j = p - tp - hp;
      sub = 2 * hp;
    }
    omega[p] = 1.0 / pow (theta, (double) (2 * j) / (double) sub);
  }
  float *cd = c->data, *sd = s->data;
  for (int64_t r = 0; r < max_pos; r++) {
    for (int64_t p = 0; p < half; p++) {
      double a = (double) r * omega[p];
      cd[r * half + p] = (float) cos (a);
      sd[r * half + p] = (float) sin (a);
    }
  }
  g_free (omega);
  *cos_out = c;
  *sin_out = s;
}

/**
 * lb_cpu_rope_3d:
 * @s: a CPU stream
 * @x: f32 [N, H, hd], rotated in place; a view with stride[2] == 1 is
 *   accepted
 * @cos: f32 [P, hd/2] from lb_rope_tables_new()
 * @sin: f32 [P, hd/2]
 * @grid_f: frames in @x
 * @grid_h: token rows per frame
 * @grid_w: token columns per row (N = grid_f * grid_h * grid_w)
 * @frame_offset: absolute latent frame of the first frame (spec 1.8 F0)
 * @row_offset: height position of the first row (a rank holding a band of
 *   rows passes its first row; 0 otherwise)
 * @error: %LB_ERROR_SHAPE on mismatched operands or positions >= P
 *
 * Rotates the interleaved pairs (x[2p], x[2p+1]) of every head of token
 * n = (f*grid_h + i)*grid_w + j by the angle of its axis: temporal pairs
 * use position frame_offset + f, height pairs row_offset + i, width pairs
 * j.  `x'[2p] = x[2p] cos - x[2p+1] sin`, `x'[2p+1] = x[2p] sin +
 * x[2p+1] cos`, in float32 like the reference (golden README 6).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_rope_3d (LbStream * s, LbTensor * x, const LbTensor * cos,
    const LbTensor * sin, int64_t grid_f, int64_t grid_h, int64_t grid_w,
    int64_t frame_offset, int64_t row_offset, GError ** error)
{
  if (!lb_check_devices (LB_CPU_DEVICE, "rope_3d", error, "x", x, "cos", cos,
          "sin", sin, NULL) ||
      !lb_check_rope_3d (x, cos, sin, grid_f, grid_h, grid_w, frame_offset,
          row_offset, error))
    return FALSE;
  const int64_t n = x->shape[0], nh = x->shape[1], hd = x->shape[2];
  const int64_t half = hd / 2;

  int64_t tp, hp;
  rope_split (hd, &tp, &hp);
  const float *cd = cos->data, *sd = sin->data;
  float *xd = x->data;
  int64_t s0 = x->stride[0], s1 = x->stride[1];

#pragma omp parallel for schedule(static) if (n * nh * hd >= 32768)
  for (int64_t t = 0; t < n; t++) {
    int64_t f = t / (grid_h * grid_w), i = (t / grid_w) % grid_h;
    int64_t j = t % grid_w;
    const float *cr[3] = { cd + (frame_offset + f) * half,
      cd + (row_offset + i) * half, cd + j * half
    };
    const float *sr[3] = { sd + (frame_offset + f) * half,
      sd + (row_offset + i) * half, sd + j * half
    };
    for (int64_t h = 0; h < nh; h++) {
      float *v = xd + t * s0 + h * s1;
      for (int64_t p = 0; p < half; p++) {
        int axis = p < tp ? 0 : (p < tp + hp ? 1 : 2);
        float c = cr[axis][p], sn = sr[axis][p];
        float x0 = v[2 * p], x1 = v[2 * p + 1];
        v[2 * p] = x0 * c - x1 * sn;
        v[2 * p + 1] = x0 * sn + x1 * c;
      }
    }
  }
  return TRUE;
}

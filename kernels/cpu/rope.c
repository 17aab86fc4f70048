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
 * lb_rope_pair_frequency:
 * @head_dim: per-head dimension (even, >= 2)
 * @theta: frequency base (10000)
 * @pair: a pair index, 0 <= @pair < @head_dim / 2
 *
 * The angular frequency of pair @pair (spec 1.8, the official WanModel
 * split of the file comment): with t temporal and h height / width pairs,
 * `1 / theta^(2j / (2t))` for a temporal pair j = @pair < t, else
 * `1 / theta^(2j / (2h))` with j the pair's index within its axis;
 * float64, the value every table entry of its column is built from.
 *
 * Returns: the frequency in radians per position.
 */
double
lb_rope_pair_frequency (int head_dim, double theta, int pair)
{
  int64_t tp, hp, j, sub;
  rope_split (head_dim, &tp, &hp);
  if (pair < tp) {
    j = pair;
    sub = 2 * tp;
  } else if (pair < tp + hp) {
    j = pair - tp;
    sub = 2 * hp;
  } else {
    j = pair - tp - hp;
    sub = 2 * hp;
  }
  return 1.0 / pow (theta, (double) (2 * j) / (double) sub);
}

/**
 * lb_rope_fill:
 * @head_dim: per-head dimension (even, >= 2)
 * @theta: frequency base (10000)
 * @pos0: the first position (any value >= 0: not bounded by a table)
 * @n_pos: positions
 * @pair0: the first pair (column)
 * @n_pairs: pairs, @pair0 + @n_pairs <= @head_dim / 2
 * @cos_out: (out caller-allocates): f32 [@n_pos, @n_pairs] row-major
 * @sin_out: (out caller-allocates): f32 [@n_pos, @n_pairs] row-major
 *
 * The RoPE angles of positions [@pos0, @pos0 + @n_pos) and pairs
 * [@pair0, @pair0 + @n_pairs): angle `pos * lb_rope_pair_frequency()`,
 * cos and sin in float64, rounded to float32.  This is the one formula
 * lb_rope_tables_new() fills its tables with, so for positions inside a
 * table the values are the table's bit for bit; past the table it is the
 * same formula continued (the DiT's frame positions of hours-long
 * sessions, docs/design.md "Model and session").  Allocates nothing
 * (per-chunk use is fine).
 */
void
lb_rope_fill (int head_dim, double theta, int64_t pos0, int64_t n_pos,
    int pair0, int n_pairs, float *cos_out, float *sin_out)
{
  g_return_if_fail (head_dim >= 2 && head_dim % 2 == 0 && pos0 >= 0);
  g_return_if_fail (pair0 >= 0 && n_pairs >= 0 &&
      pair0 + n_pairs <= head_dim / 2);
  for (int p = 0; p < n_pairs; p++) {
    const double omega = lb_rope_pair_frequency (head_dim, theta, pair0 + p);
    for (int64_t r = 0; r < n_pos; r++) {
      const double a = (double) (pos0 + r) * omega;
      cos_out[r * n_pairs + p] = (float) cos (a);
      sin_out[r * n_pairs + p] = (float) sin (a);
    }
  }
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
 * float32 (lb_rope_fill() over every position and pair).  Row r is
 * position r for every axis; lb_cpu_rope_3d() picks the axis's position
 * per column range.
 */
void
lb_rope_tables_new (int head_dim, int max_pos, double theta,
    LbTensor ** cos_out, LbTensor ** sin_out)
{
  g_return_if_fail (head_dim >= 2 && head_dim % 2 == 0 && max_pos >= 0);
  g_return_if_fail (cos_out != NULL && sin_out != NULL);
  const int half = head_dim / 2;
  int64_t shape[2] = { max_pos, half };
  LbTensor *c = lb_tensor_new (LB_DTYPE_F32, 2, shape);
  LbTensor *s = lb_tensor_new (LB_DTYPE_F32, 2, shape);
  lb_rope_fill (head_dim, theta, 0, max_pos, 0, half, c->data, s->data);
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

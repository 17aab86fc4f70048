/* lingbot-gst: CPU fused ops of the DiT block (norm + modulation, RMS norm
 * + RoPE, gated residual + modulation)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Each op here is bit-identical to the pair of CPU ops it replaces
 * (kernels/ops.h): the same row statistics accumulated in double in the
 * same order (norm.c; the layer norm's row is lb_cpu_layer_norm_row()
 * itself); the modulation and the gated residual run the very row kernels
 * (rows-item.h, of lb_cpu_isa()'s variant) that modulate and
 * gated_residual run, on the row while it is still in cache; the RMS norm
 * + RoPE writes rope_3d's float rotation (rope.c) as rope_3d writes it,
 * applied to the normalised value still in a register.  Those scalar
 * steps need the two translation units compiled alike (both for the
 * baseline, where gcc has no FMA to contract with;
 * tests/unit/test-ops-fused.c says so if they ever differ).
 */
#include "kernels/cpu/cpu-internal.h"

#include <math.h>

/* Below this many elements a parallel region costs more than it saves
 * (the threshold of norm.c and rope.c, so the row split is theirs). */
#define PAR_MIN_ELEMS 32768

/**
 * lb_cpu_norm_modulate:
 * @s: a CPU stream
 * @x: f32 rows [M, D] (contiguous N-D, or a 2-D row-strided view)
 * @weight: (nullable): f32 [D], LayerNorm gain
 * @bias: (nullable): f32 [D], LayerNorm bias
 * @eps: added to the variance
 * @scale: f32 [D] (broadcast over rows) or rows [M, D]
 * @shift: f32 [D] or rows [M, D]
 * @y: f32 rows [M, D]; may be @x.  Or bf16 rows (the next GEMM's input,
 *   spec 1.11), not overlapping @x: the f32 result rounded to nearest even
 *   (lb_cpu_layer_norm_row_bf16())
 * @error: %LB_ERROR_SHAPE on mismatched operands (lb_check_norm_modulate())
 *
 * `y = LN(x) * (1 + scale) + shift` (spec 1.7 norm1/norm2 with their adaLN
 * modulation, spec 1.10 the head's): lb_cpu_layer_norm() then
 * lb_cpu_modulate(), bit for bit, in one pass over the row.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_norm_modulate (LbStream * s, const LbTensor * x,
    const LbTensor * weight, const LbTensor * bias, float eps,
    const LbTensor * scale, const LbTensor * shift, LbTensor * y,
    GError ** error)
{
  LbRowsGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "norm_modulate", error, "x", x,
          "weight", weight, "bias", bias, "scale", scale, "shift", shift,
          "y", y, NULL) ||
      !lb_check_norm_modulate (x, weight, bias, scale, shift, y, &g, error))
    return FALSE;
  const int64_t m = g.m, d = g.d, xld = g.x_ld, yld = g.y_ld;
  const int64_t sld = g.s_ld, hld = g.h_ld;
  if (d == 0)
    return TRUE;

  const float *xd = x->data, *wd = weight ? weight->data : NULL;
  const float *bd = bias ? bias->data : NULL;
  const float *sd = scale->data, *hd = shift->data;
  float *yd = y->data;
  const LbCpuRowKernels *rk = lb_cpu_row_kernels ();

  if (y->dtype == LB_DTYPE_BF16) {
#pragma omp parallel for schedule(static) if (m * d >= PAR_MIN_ELEMS)
    for (int64_t i = 0; i < m; i++)
      lb_cpu_layer_norm_row_bf16 (xd + i * xld, wd, bd, eps, sd + i * sld,
          hd + i * hld, (uint16_t *) y->data + i * yld, d);
    return TRUE;
  }
#pragma omp parallel for schedule(static) if (m * d >= PAR_MIN_ELEMS)
  for (int64_t i = 0; i < m; i++) {
    const float *xr = xd + i * xld, *sr = sd + i * sld, *hr = hd + i * hld;
    float *yr = yd + i * yld;
    lb_cpu_layer_norm_row (xr, wd, bd, eps, yr, d);     /* layer_norm's output */
    /* then modulate's row kernel on it, in place */
    rk->modulate (yr, sr, hr, yr, d);
  }
  return TRUE;
}

/* One head's pairs [p0, p1) of the normalised row, rotated by the angles
 * of table rows @c / @sn: rms_norm's `(float) (x * r * w)`, then rope's
 * float rotation.  In place safe: each pair is read before it is written. */
static inline void
norm_rotate_pairs (const float *xh, const float *wh, double r, float *v,
    const float *c, const float *sn, int64_t p0, int64_t p1)
{
  for (int64_t p = p0; p < p1; p++) {
    const double a0 = xh[2 * p] * r, a1 = xh[2 * p + 1] * r;
    const float x0 = (float) (wh ? a0 * wh[2 * p] : a0);
    const float x1 = (float) (wh ? a1 * wh[2 * p + 1] : a1);
    v[2 * p] = x0 * c[p] - x1 * sn[p];
    v[2 * p + 1] = x0 * sn[p] + x1 * c[p];
  }
}

/* norm_rotate_pairs() into a bf16 head: the same f32 values, each rounded
 * to nearest even by lb_f32_to_bf16() (a bf16 KV cache's slots). */
static inline void
norm_rotate_pairs_bf16 (const float *xh, const float *wh, double r,
    uint16_t * v, const float *c, const float *sn, int64_t p0, int64_t p1)
{
  for (int64_t p = p0; p < p1; p++) {
    const double a0 = xh[2 * p] * r, a1 = xh[2 * p + 1] * r;
    const float x0 = (float) (wh ? a0 * wh[2 * p] : a0);
    const float x1 = (float) (wh ? a1 * wh[2 * p + 1] : a1);
    const float y0 = x0 * c[p] - x1 * sn[p];
    const float y1 = x0 * sn[p] + x1 * c[p];
    v[2 * p] = lb_f32_to_bf16 (y0);
    v[2 * p + 1] = lb_f32_to_bf16 (y1);
  }
}

/**
 * lb_cpu_rms_norm_rope:
 * @s: a CPU stream
 * @x: f32 [N, H*hd], 2-D with unit column stride
 * @weight: (nullable): f32 [H*hd]
 * @eps: added to the mean square
 * @cos: f32 [P, hd/2] from lb_rope_tables_new()
 * @sin: f32 [P, hd/2]
 * @grid_f: frames in @x
 * @grid_h: token rows per frame
 * @grid_w: token columns per row (N = grid_f * grid_h * grid_w)
 * @frame_offset: absolute latent frame of the first frame (spec 1.8 F0)
 * @row_offset: height position of the first row
 * @y: f32 or bf16 [N, H, hd], any view with stride[2] == 1 (e.g.
 *   KV-cache slots); an f32 @y may be @x itself seen as [N, H, hd], must
 *   not overlap it otherwise
 * @error: %LB_ERROR_SHAPE on mismatched operands or positions >= P
 *   (lb_check_rms_norm_rope())
 *
 * The self-attention q/k path of spec 1.8: RMSNorm over the whole row (all
 * heads; mean square in double) times @weight, then the 3-D RoPE of each
 * head at positions (frame_offset + f, row_offset + i, j):
 * lb_cpu_rms_norm() then lb_cpu_rope_3d(), bit for bit, written straight
 * into @y; a bf16 @y (a bf16 KV cache, spec 1.11) gets those f32 values
 * rounded by lb_f32_to_bf16().
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_rms_norm_rope (LbStream * s, const LbTensor * x,
    const LbTensor * weight, float eps, const LbTensor * cos,
    const LbTensor * sin, int64_t grid_f, int64_t grid_h, int64_t grid_w,
    int64_t frame_offset, int64_t row_offset, LbTensor * y, GError ** error)
{
  LbRowsGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "rms_norm_rope", error, "x", x,
          "weight", weight, "cos", cos, "sin", sin, "y", y, NULL) ||
      !lb_check_rms_norm_rope (x, weight, cos, sin, grid_f, grid_h, grid_w,
          frame_offset, row_offset, y, &g, error))
    return FALSE;
  const int64_t n = g.m, d = g.d, xld = g.x_ld;
  const int64_t nh = y->shape[1], hdim = y->shape[2], half = hdim / 2;
  if (n == 0 || d == 0)
    return TRUE;
  /* the axis split of rope.c's rope_split() */
  const int64_t hp = hdim / 6, tp = (hdim - 4 * (hdim / 6)) / 2;
  const int64_t ys0 = y->stride[0], ys1 = y->stride[1];
  const float *xd = x->data, *wd = weight ? weight->data : NULL;
  const float *cd = cos->data, *sd = sin->data;
  const gboolean y16 = y->dtype == LB_DTYPE_BF16;
  float *yd = y16 ? NULL : y->data;
  uint16_t *yh = y16 ? y->data : NULL;

  /* rms_norm parallelises when m * d is large, rope when n * H * hd is:
   * the same count here */
#pragma omp parallel for schedule(static) if (n * d >= PAR_MIN_ELEMS)
  for (int64_t t = 0; t < n; t++) {
    const float *xr = xd + t * xld;
    double ss = 0.0;
    for (int64_t j = 0; j < d; j++)
      ss += (double) xr[j] * xr[j];
    const double r = 1.0 / sqrt (ss / (double) d + (double) eps);
    const int64_t f = t / (grid_h * grid_w), i = (t / grid_w) % grid_h;
    const int64_t j = t % grid_w;
    const float *ct = cd + (frame_offset + f) * half;
    const float *st = sd + (frame_offset + f) * half;
    const float *ch = cd + (row_offset + i) * half;
    const float *sh = sd + (row_offset + i) * half;
    const float *cw = cd + j * half, *sw = sd + j * half;
    for (int64_t h = 0; h < nh; h++) {
      const float *xh = xr + h * hdim, *wh = wd ? wd + h * hdim : NULL;
      if (y16) {
        uint16_t *v = yh + t * ys0 + h * ys1;
        norm_rotate_pairs_bf16 (xh, wh, r, v, ct, st, 0, tp);
        norm_rotate_pairs_bf16 (xh, wh, r, v, ch, sh, tp, tp + hp);
        norm_rotate_pairs_bf16 (xh, wh, r, v, cw, sw, tp + hp, half);
        continue;
      }
      float *v = yd + t * ys0 + h * ys1;
      norm_rotate_pairs (xh, wh, r, v, ct, st, 0, tp);
      norm_rotate_pairs (xh, wh, r, v, ch, sh, tp, tp + hp);
      norm_rotate_pairs (xh, wh, r, v, cw, sw, tp + hp, half);
    }
  }
  return TRUE;
}

/**
 * lb_cpu_gated_residual_modulate:
 * @s: a CPU stream
 * @x: f32 rows [M, D], updated in place
 * @y: f32 rows [M, D]
 * @gate: (nullable): f32 [D] or rows [M, D]; %NULL means 1
 * @scale: f32 [D] or rows [M, D]
 * @shift: f32 [D] or rows [M, D]
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *   (lb_check_gated_residual_modulate())
 *
 * `x = (x + gate * y) * (1 + scale) + shift`: the self-attention's gated
 * residual followed by the camera injection (spec 1.7),
 * lb_cpu_gated_residual() then lb_cpu_modulate() in place, bit for bit.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_gated_residual_modulate (LbStream * s, LbTensor * x,
    const LbTensor * y, const LbTensor * gate, const LbTensor * scale,
    const LbTensor * shift, GError ** error)
{
  LbRowsGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "gated_residual_modulate", error,
          "x", x, "y", y, "gate", gate, "scale", scale, "shift", shift,
          NULL) ||
      !lb_check_gated_residual_modulate (x, y, gate, scale, shift, &g, error))
    return FALSE;
  const int64_t m = g.m, d = g.d, xld = g.x_ld, yld = g.y_ld;
  const int64_t gld = g.g_ld, sld = g.s_ld, hld = g.h_ld;

  float *xd = x->data;
  const float *yd = y->data, *gd = gate ? gate->data : NULL;
  const float *sd = scale->data, *hd = shift->data;
  const LbCpuRowKernels *rk = lb_cpu_row_kernels ();
#pragma omp parallel for schedule(static) if (m * d >= PAR_MIN_ELEMS)
  for (int64_t i = 0; i < m; i++) {
    /* gated_residual's then modulate's row kernels, row by row */
    float *xr = xd + i * xld;
    rk->gated_residual (xr, yd + i * yld, gd ? gd + i * gld : NULL, d);
    rk->modulate (xr, sd + i * sld, hd + i * hld, xr, d);
  }
  return TRUE;
}

/**
 * lb_cpu_residual_norm_modulate:
 * @s: a CPU stream
 * @x: f32 rows [M, D], updated in place
 * @y: f32 rows [M, D]
 * @gate: (nullable): f32 [D] or rows [M, D]; %NULL means 1
 * @weight: (nullable): f32 [D], LayerNorm gain
 * @bias: (nullable): f32 [D], LayerNorm bias
 * @eps: added to the variance
 * @scale: f32 [D] or rows [M, D]
 * @shift: f32 [D] or rows [M, D]
 * @out: f32 or bf16 rows [M, D], not overlapping @x
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *   (lb_check_residual_norm_modulate())
 *
 * `x += gate * y`, then `out = LN(x) * (1 + scale) + shift` (spec 1.7:
 * the cross-attention's residual and the FFN's norm):
 * lb_cpu_gated_residual() then lb_cpu_norm_modulate(), bit for bit, row
 * by row while the row is in cache.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_residual_norm_modulate (LbStream * s, LbTensor * x,
    const LbTensor * y, const LbTensor * gate, const LbTensor * weight,
    const LbTensor * bias, float eps, const LbTensor * scale,
    const LbTensor * shift, LbTensor * out, GError ** error)
{
  LbRowsGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "residual_norm_modulate", error,
          "x", x, "y", y, "gate", gate, "weight", weight, "bias", bias,
          "scale", scale, "shift", shift, "out", out, NULL) ||
      !lb_check_residual_norm_modulate (x, y, gate, weight, bias, scale,
          shift, out, &g, error))
    return FALSE;
  const int64_t m = g.m, d = g.d;
  if (d == 0)
    return TRUE;
  float *xd = x->data;
  const float *yd = y->data, *gd = gate ? gate->data : NULL;
  const float *wd = weight ? weight->data : NULL;
  const float *bd = bias ? bias->data : NULL;
  const float *sd = scale->data, *hd = shift->data;
  const gboolean o16 = out->dtype == LB_DTYPE_BF16;
  const LbCpuRowKernels *rk = lb_cpu_row_kernels ();
#pragma omp parallel for schedule(static) if (m * d >= PAR_MIN_ELEMS)
  for (int64_t i = 0; i < m; i++) {
    float *xr = xd + i * g.x_ld;
    const float *sr = sd + i * g.s_ld, *hr = hd + i * g.h_ld;
    rk->gated_residual (xr, yd + i * g.y_ld, gd ? gd + i * g.g_ld : NULL, d);
    if (o16) {
      lb_cpu_layer_norm_row_bf16 (xr, wd, bd, eps, sr, hr,
          (uint16_t *) out->data + i * g.o_ld, d);
    } else {
      float *orow = (float *) out->data + i * g.o_ld;
      lb_cpu_layer_norm_row (xr, wd, bd, eps, orow, d);
      rk->modulate (orow, sr, hr, orow, d);
    }
  }
  return TRUE;
}

/**
 * lb_cpu_norm_fp8:
 * @s: a CPU stream
 * @x: f32 rows [M, D]; updated in place (`x += gate * y`) when @y is given
 * @y: (nullable): f32 rows [M, D]
 * @gate: (nullable): f32 [D] or rows [M, D] (only with @y)
 * @weight: (nullable): f32 [D], LayerNorm gain
 * @bias: (nullable): f32 [D], LayerNorm bias
 * @eps: added to the variance
 * @scale: (nullable): f32 [D] or rows [M, D] (given with @shift)
 * @shift: (nullable): f32 [D] or rows [M, D]
 * @q: %LB_DTYPE_F8E4M3 rows [M, D], the codes
 * @sq: f32 [M], the rows' scales
 * @error: %LB_ERROR_SHAPE on mismatched operands (lb_check_norm_fp8())
 *
 * The oracle of norm_fp8 (kernels/ops-list.h): per row the row kernels of
 * lb_cpu_residual_norm_modulate() (with @y), lb_cpu_norm_modulate() (with
 * @scale) or lb_cpu_layer_norm() on the whole row into a row buffer, then
 * lb_quantize_e4m3_row() of it, which is what lb_cpu_gemm_fp8() does to
 * the f32 rows those ops write: bit for bit the pair.  The row buffers
 * (one per thread, D floats) are allocated by the call.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_norm_fp8 (LbStream * s, LbTensor * x, const LbTensor * y,
    const LbTensor * gate, const LbTensor * weight, const LbTensor * bias,
    float eps, const LbTensor * scale, const LbTensor * shift, LbTensor * q,
    LbTensor * sq, GError ** error)
{
  LbRowsGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "norm_fp8", error, "x", x, "y", y,
          "gate", gate, "weight", weight, "bias", bias, "scale", scale,
          "shift", shift, "q", q, "sq", sq, NULL) ||
      !lb_check_norm_fp8 (x, y, gate, weight, bias, scale, shift, q, sq, &g,
          error))
    return FALSE;
  const int64_t m = g.m, d = g.d;
  (void) s;
  if (m == 0)
    return TRUE;
  float *xd = x->data, *sqd = sq->data;
  const float *yd = y ? y->data : NULL, *gd = gate ? gate->data : NULL;
  const float *wd = weight ? weight->data : NULL;
  const float *bd = bias ? bias->data : NULL;
  const float *sd = scale ? scale->data : NULL;
  const float *hd = shift ? shift->data : NULL;
  uint8_t *qd = q->data;
  const LbCpuRowKernels *rk = lb_cpu_row_kernels ();
#pragma omp parallel if (m * d >= PAR_MIN_ELEMS)
  {
    g_autofree float *v = g_new (float, MAX (d, 1));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; i++) {
      float *xr = xd + i * g.x_ld;
      if (yd)
        rk->gated_residual (xr, yd + i * g.y_ld, gd ? gd + i * g.g_ld : NULL,
            d);
      if (d > 0) {
        lb_cpu_layer_norm_row (xr, wd, bd, eps, v, d);
        if (sd)
          rk->modulate (v, sd + i * g.s_ld, hd + i * g.h_ld, v, d);
      }
      lb_quantize_e4m3_row (v, d, qd + i * g.o_ld, &sqd[i]);
    }
  }
  return TRUE;
}

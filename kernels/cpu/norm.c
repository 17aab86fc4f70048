/* lingbot-gst: CPU normalisations and adaLN modulation
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Row statistics are accumulated in double, so these ops are at least as
 * accurate as the float32 reference (spec lingbot_model_spec.md 1.7, 1.8).
 */
#include "kernels/cpu/cpu-internal.h"

#include <math.h>

/* Rows per OpenMP chunk decision: below this many elements a parallel
 * region costs more than it saves. */
#define PAR_MIN_ELEMS 32768

/* The statistics of one layer_norm row: the mean and `1 / sqrt(var +
 * eps)` of the biased variance, both in double. */
static void
layer_norm_stats (const float *xr, float eps, int64_t d, double *mean,
    double *rstd)
{
  double sum = 0.0;
  for (int64_t j = 0; j < d; j++)
    sum += xr[j];
  double mu = sum / (double) d, var = 0.0;
  for (int64_t j = 0; j < d; j++) {
    double t = xr[j] - mu;
    var += t * t;
  }
  var /= (double) d;
  *mean = mu;
  *rstd = 1.0 / sqrt (var + (double) eps);
}

/* Elements [j0, j0 + n) of a normalised row: `(x - mean) * rstd`, times
 * @wd[j] and plus @bd[j] where given, into @yr[0, n). */
static void
layer_norm_apply (const float *xr, const float *wd, const float *bd,
    double mean, double rstd, float *yr, int64_t j0, int64_t n)
{
  for (int64_t j = j0; j < j0 + n; j++) {
    double v = (xr[j] - mean) * rstd;
    if (wd)
      v *= wd[j];
    if (bd)
      v += bd[j];
    yr[j - j0] = (float) v;
  }
}

/* One row of lb_cpu_layer_norm: the mean and biased variance in double,
 * then `(x - mean) * rstd`, times @wd[j] and plus @bd[j] where given, into
 * @yr (what lb_cpu_modulated_layer_norm's rows start from too). */
void
lb_cpu_layer_norm_row (const float *xr, const float *wd, const float *bd,
    float eps, float *yr, int64_t d)
{
  double mean, rstd;
  layer_norm_stats (xr, eps, d, &mean, &rstd);
  layer_norm_apply (xr, wd, bd, mean, rstd, yr, 0, d);
}

/**
 * lb_cpu_layer_norm_row_bf16:
 * @xr: f32 [d], the row
 * @wd: (nullable): f32 [d] gain
 * @bd: (nullable): f32 [d] bias
 * @eps: added to the variance
 * @sr: (nullable): f32 [d] modulation scale (then @hr too): the row is
 *   then modulated, `y * (1 + scale) + shift`
 * @hr: (nullable): f32 [d] modulation shift
 * @yr: bf16 [d] output
 * @d: elements
 *
 * lb_cpu_layer_norm_row() (and, with @sr, the modulate row kernel on it,
 * as norm_modulate runs it) into a bf16 row: each f32 value rounded to
 * nearest even by lb_f32_to_bf16(), so the result is the bf16 rounding of
 * the f32 op's result bit for bit.  Works through a stack block of
 * %LB_CPU_BF16_BLOCK floats (a multiple of every vector width: the row
 * kernels see the lanes they see on the whole row).
 */
void
lb_cpu_layer_norm_row_bf16 (const float *xr, const float *wd,
    const float *bd, float eps, const float *sr, const float *hr,
    uint16_t * yr, int64_t d)
{
  const LbCpuRowKernels *rk = lb_cpu_row_kernels ();
  float buf[LB_CPU_BF16_BLOCK];
  double mean, rstd;
  layer_norm_stats (xr, eps, d, &mean, &rstd);
  for (int64_t j0 = 0; j0 < d; j0 += LB_CPU_BF16_BLOCK) {
    const int64_t n = MIN (LB_CPU_BF16_BLOCK, d - j0);
    layer_norm_apply (xr, wd, bd, mean, rstd, buf, j0, n);
    if (sr)
      rk->modulate (buf, sr + j0, hr + j0, buf, n);
    lb_cpu_round_bf16 (buf, yr + j0, n);
  }
}

/**
 * lb_cpu_round_bf16:
 * @x: f32 [n]
 * @y: bf16 [n]
 * @n: elements
 *
 * `y[i] = lb_f32_to_bf16 (x[i])`: round to nearest even (NaN stays NaN).
 */
void
lb_cpu_round_bf16 (const float *x, uint16_t * y, int64_t n)
{
  for (int64_t i = 0; i < n; i++)
    y[i] = lb_f32_to_bf16 (x[i]);
}

/**
 * lb_cpu_layer_norm:
 * @s: a CPU stream
 * @x: f32 rows [M, D] (contiguous N-D, or a 2-D row-strided view)
 * @weight: (nullable): f32 [D]
 * @bias: (nullable): f32 [D]
 * @eps: added to the variance
 * @y: f32 rows [M, D]; may be @x.  Or bf16 rows (the next GEMM's input,
 *   spec 1.11), not overlapping @x: the f32 result rounded to nearest even
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * Per row `(x - mean) / sqrt(var + eps)` with the biased variance, then
 * `* weight + bias` for whichever is non-%NULL (spec 1.7: norm1/norm2
 * without affine, norm3 with).  Statistics in double.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_layer_norm (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, float eps, LbTensor * y, GError ** error)
{
  LbRowsGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "layer_norm", error, "x", x,
          "weight", weight, "bias", bias, "y", y, NULL) ||
      !lb_check_layer_norm (x, weight, bias, y, &g, error))
    return FALSE;
  const int64_t m = g.m, d = g.d, xld = g.x_ld, yld = g.y_ld;
  if (d == 0)
    return TRUE;

  const float *xd = x->data, *wd = weight ? weight->data : NULL;
  const float *bd = bias ? bias->data : NULL;
  const gboolean y16 = y->dtype == LB_DTYPE_BF16;

#pragma omp parallel for schedule(static) if (m * d >= PAR_MIN_ELEMS)
  for (int64_t i = 0; i < m; i++) {
    const float *xr = xd + i * xld;
    if (y16)
      lb_cpu_layer_norm_row_bf16 (xr, wd, bd, eps, NULL, NULL,
          (uint16_t *) y->data + i * yld, d);
    else
      lb_cpu_layer_norm_row (xr, wd, bd, eps, (float *) y->data + i * yld, d);
  }
  return TRUE;
}

/**
 * lb_cpu_rms_norm:
 * @s: a CPU stream
 * @x: f32 rows [M, D]
 * @weight: (nullable): f32 [D]
 * @eps: added to the mean square
 * @y: f32 rows [M, D]; may be @x
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * Per row `x * rsqrt(mean(x^2) + eps) * weight` (spec 1.8 q/k norms, and
 * the T5 norm of spec 5.2).  The mean square is accumulated in double.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_rms_norm (LbStream * s, const LbTensor * x, const LbTensor * weight,
    float eps, LbTensor * y, GError ** error)
{
  LbRowsGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "rms_norm", error, "x", x,
          "weight", weight, "y", y, NULL) ||
      !lb_check_rms_norm (x, weight, y, &g, error))
    return FALSE;
  const int64_t m = g.m, d = g.d, xld = g.x_ld, yld = g.y_ld;
  if (d == 0)
    return TRUE;

  const float *xd = x->data, *wd = weight ? weight->data : NULL;
  float *yd = y->data;

#pragma omp parallel for schedule(static) if (m * d >= PAR_MIN_ELEMS)
  for (int64_t i = 0; i < m; i++) {
    const float *xr = xd + i * xld;
    float *yr = yd + i * yld;
    double ss = 0.0;
    for (int64_t j = 0; j < d; j++)
      ss += (double) xr[j] * xr[j];
    double r = 1.0 / sqrt (ss / (double) d + (double) eps);
    for (int64_t j = 0; j < d; j++) {
      double v = xr[j] * r;
      yr[j] = (float) (wd ? v * wd[j] : v);
    }
  }
  return TRUE;
}

/**
 * lb_cpu_modulate:
 * @s: a CPU stream
 * @x: f32 rows [M, D]
 * @scale: f32 [D] (broadcast over rows) or rows [M, D]
 * @shift: f32 [D] or rows [M, D]
 * @y: f32 rows [M, D]; may be @x
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * adaLN modulation `y = x * (1 + scale) + shift` (spec 1.7, 1.10).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_modulate (LbStream * s, const LbTensor * x, const LbTensor * scale,
    const LbTensor * shift, LbTensor * y, GError ** error)
{
  LbRowsGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "modulate", error, "x", x,
          "scale", scale, "shift", shift, "y", y, NULL) ||
      !lb_check_modulate (x, scale, shift, y, &g, error))
    return FALSE;
  const int64_t m = g.m, d = g.d, xld = g.x_ld, yld = g.y_ld;
  const int64_t sld = g.s_ld, hld = g.h_ld;

  const float *xd = x->data, *sd = scale->data, *hd = shift->data;
  float *yd = y->data;
  const LbCpuRowKernels *rk = lb_cpu_row_kernels ();
#pragma omp parallel for schedule(static) if (m * d >= PAR_MIN_ELEMS)
  for (int64_t i = 0; i < m; i++)
    rk->modulate (xd + i * xld, sd + i * sld, hd + i * hld, yd + i * yld, d);
  return TRUE;
}

/**
 * lb_cpu_gated_residual:
 * @s: a CPU stream
 * @x: f32 rows [M, D], updated in place
 * @y: f32 rows [M, D]
 * @gate: (nullable): f32 [D] or rows [M, D]; %NULL means 1
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `x += gate * y` (spec 1.7 gated residuals).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_gated_residual (LbStream * s, LbTensor * x, const LbTensor * y,
    const LbTensor * gate, GError ** error)
{
  LbRowsGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "gated_residual", error, "x", x,
          "y", y, "gate", gate, NULL) ||
      !lb_check_gated_residual (x, y, gate, &g, error))
    return FALSE;
  const int64_t m = g.m, d = g.d, xld = g.x_ld, yld = g.y_ld, gld = g.s_ld;

  float *xd = x->data;
  const float *yd = y->data, *gd = gate ? gate->data : NULL;
  const LbCpuRowKernels *rk = lb_cpu_row_kernels ();
#pragma omp parallel for schedule(static) if (m * d >= PAR_MIN_ELEMS)
  for (int64_t i = 0; i < m; i++)
    rk->gated_residual (xd + i * xld, yd + i * yld, gd ? gd + i * gld : NULL,
        d);
  return TRUE;
}

#define CHNORM_OMP_MIN (1 << 20)

/**
 * lb_cpu_channel_rms_norm:
 * @s: a CPU stream
 * @x: f32 [C, T, H, W] view (any strides)
 * @gamma: f32 [C] contiguous
 * @silu: apply SiLU after the norm
 * @y: f32 or bf16 [C, T, H, W] view (any strides; must not overlap @x)
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * Wan2.1 RMS_norm over channels (spec A.3), in the reference's order:
 * `y = x / max(sqrt(sum_c x^2), 1e-12) * sqrt(C) * gamma[c]`, then
 * optionally `y * sigmoid(y)` (kernels/ops.h).  The row kernel of
 * lb_cpu_isa()'s variant (rows-item.h) takes 4 vectors of voxels along W
 * at a time, so their channel sums stay in registers; a view strided
 * along W runs it on a packed copy of each row, and a bf16 y (the
 * channels-last conv input of a bf16 VAE decode) is that packed result
 * rounded to nearest even.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_channel_rms_norm (LbStream * s, const LbTensor * x,
    const LbTensor * gamma, gboolean silu, LbTensor * y, GError ** error)
{
  if (!lb_check_devices (LB_CPU_DEVICE, "channel_rms_norm", error, "x", x,
          "gamma", gamma, "y", y, NULL)
      || !lb_check_channel_rms_norm (x, gamma, y, error))
    return FALSE;
  const int64_t C = x->shape[0], T = x->shape[1], H = x->shape[2],
      W = x->shape[3];
  const float *xs = x->data, *g = gamma->data;
  float *ys = y->data;
  uint16_t *ys16 = y->data;
  const gboolean y16 = y->dtype == LB_DTYPE_BF16;
  const float scale = (float) sqrt ((double) C);
  const int64_t rows = T * H;
  const int64_t xsw = x->stride[3], ysw = y->stride[3];
  const gboolean unit = xsw == 1 && ysw == 1 && !y16;
  const LbCpuRowKernels *rk = lb_cpu_row_kernels ();
#pragma omp parallel for schedule(static) if (C * rows * W >= CHNORM_OMP_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t t = r / H, h = r % H;
    const float *xr = xs + t * x->stride[1] + h * x->stride[2];
    const int64_t yo = t * y->stride[1] + h * y->stride[2];
    float *yr = ys + yo;
    if (unit) {
      /* the vector kernel of lb_cpu_isa()'s variant */
      rk->channel_rms_norm (xr, x->stride[0], yr, y->stride[0], C, W, g,
          scale, silu);
      continue;
    }
    /* strided along W: the same kernel on a packed copy of the row, so a
     * view gets the bits of a contiguous tensor */
    float *px = lb_cpu_scratch ((gsize) (2 * C * W)), *py = px + C * W;
    for (int64_t c = 0; c < C; c++)
      for (int64_t w = 0; w < W; w++)
        px[c * W + w] = xr[c * x->stride[0] + w * xsw];
    rk->channel_rms_norm (px, W, py, W, C, W, g, scale, silu);
    if (y16) {
      /* bf16: the f32 result rounded to nearest even */
      uint16_t *yr16 = ys16 + yo;
      for (int64_t w = 0; w < W; w++)
        for (int64_t c = 0; c < C; c++)
          yr16[c * y->stride[0] + w * ysw] = lb_f32_to_bf16 (py[c * W + w]);
      continue;
    }
    for (int64_t c = 0; c < C; c++)
      for (int64_t w = 0; w < W; w++)
        yr[c * y->stride[0] + w * ysw] = py[c * W + w];
  }
  return TRUE;
}

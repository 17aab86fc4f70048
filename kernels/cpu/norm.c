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

/* y must have as many rows of D as x. */
static gboolean
check_out_rows (const char *op, const char *arg, const LbTensor * t,
    const LbTensor * like, int64_t rows, int64_t d, int64_t * ld,
    GError ** error)
{
  int64_t r;
  if (!lb_cpu_check_rows (op, arg, t, d, &r, ld, error))
    return FALSE;
  if (r != rows) {
    g_autofree char *have = lb_tensor_shape_string (t);
    g_autofree char *want = lb_tensor_shape_string (like);
    return lb_cpu_fail (error, "%s: %s is f32 %s, expected %s", op, arg, have,
        want);
  }
  return TRUE;
}

/* A per-feature vector: [D] (broadcast over rows) or M rows of D.
 * Sets *ld to 0 for broadcast. */
static gboolean
check_vec_or_rows (const char *op, const char *arg, const LbTensor * t,
    int64_t rows, int64_t d, int64_t * ld, GError ** error)
{
  int64_t r;
  if (!lb_cpu_check_rows (op, arg, t, d, &r, ld, error))
    return FALSE;
  if (r == 1) {
    *ld = 0;
    return TRUE;
  }
  if (r != rows) {
    g_autofree char *have = lb_tensor_shape_string (t);
    return lb_cpu_fail (error, "%s: %s is f32 %s, expected [%" G_GINT64_FORMAT
        "] or [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]", op, arg, have, d,
        rows, d);
  }
  return TRUE;
}

static gboolean
check_vec (const char *op, const char *arg, const LbTensor * t, int64_t d,
    GError ** error)
{
  int64_t shape[1] = { d };
  return lb_cpu_check (op, arg, t, LB_DTYPE_F32, 1, shape, TRUE, error);
}

/**
 * lb_cpu_layer_norm:
 * @s: a CPU stream
 * @x: f32 rows [M, D] (contiguous N-D, or a 2-D row-strided view)
 * @weight: (nullable): f32 [D]
 * @bias: (nullable): f32 [D]
 * @eps: added to the variance
 * @y: f32 rows [M, D]; may be @x
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
  int64_t m, xld, yld;
  if (!lb_cpu_check_rows ("layer_norm", "x", x, LB_ANY, &m, &xld, error))
    return FALSE;
  int64_t d = x->shape[x->ndim - 1];
  if (!check_out_rows ("layer_norm", "y", y, x, m, d, &yld, error))
    return FALSE;
  if (weight && !check_vec ("layer_norm", "weight", weight, d, error))
    return FALSE;
  if (bias && !check_vec ("layer_norm", "bias", bias, d, error))
    return FALSE;
  if (d == 0)
    return TRUE;

  const float *xd = x->data, *wd = weight ? weight->data : NULL;
  const float *bd = bias ? bias->data : NULL;
  float *yd = y->data;

#pragma omp parallel for schedule(static) if (m * d >= PAR_MIN_ELEMS)
  for (int64_t i = 0; i < m; i++) {
    const float *xr = xd + i * xld;
    float *yr = yd + i * yld;
    double sum = 0.0;
    for (int64_t j = 0; j < d; j++)
      sum += xr[j];
    double mean = sum / (double) d, var = 0.0;
    for (int64_t j = 0; j < d; j++) {
      double t = xr[j] - mean;
      var += t * t;
    }
    var /= (double) d;
    double rstd = 1.0 / sqrt (var + (double) eps);
    for (int64_t j = 0; j < d; j++) {
      double v = (xr[j] - mean) * rstd;
      if (wd)
        v *= wd[j];
      if (bd)
        v += bd[j];
      yr[j] = (float) v;
    }
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
  int64_t m, xld, yld;
  if (!lb_cpu_check_rows ("rms_norm", "x", x, LB_ANY, &m, &xld, error))
    return FALSE;
  int64_t d = x->shape[x->ndim - 1];
  if (!check_out_rows ("rms_norm", "y", y, x, m, d, &yld, error))
    return FALSE;
  if (weight && !check_vec ("rms_norm", "weight", weight, d, error))
    return FALSE;
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
  int64_t m, xld, yld, sld, hld;
  if (!lb_cpu_check_rows ("modulate", "x", x, LB_ANY, &m, &xld, error))
    return FALSE;
  int64_t d = x->shape[x->ndim - 1];
  if (!check_out_rows ("modulate", "y", y, x, m, d, &yld, error) ||
      !check_vec_or_rows ("modulate", "scale", scale, m, d, &sld, error) ||
      !check_vec_or_rows ("modulate", "shift", shift, m, d, &hld, error))
    return FALSE;

  const float *xd = x->data, *sd = scale->data, *hd = shift->data;
  float *yd = y->data;
#pragma omp parallel for schedule(static) if (m * d >= PAR_MIN_ELEMS)
  for (int64_t i = 0; i < m; i++) {
    const float *xr = xd + i * xld, *sr = sd + i * sld, *hr = hd + i * hld;
    float *yr = yd + i * yld;
    for (int64_t j = 0; j < d; j++)
      yr[j] = xr[j] * (1.0f + sr[j]) + hr[j];
  }
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
  int64_t m, xld, yld, gld = 0;
  if (!lb_cpu_check_rows ("gated_residual", "x", x, LB_ANY, &m, &xld, error))
    return FALSE;
  int64_t d = x->shape[x->ndim - 1];
  if (!check_out_rows ("gated_residual", "y", y, x, m, d, &yld, error))
    return FALSE;
  if (gate && !check_vec_or_rows ("gated_residual", "gate", gate, m, d, &gld,
          error))
    return FALSE;

  float *xd = x->data;
  const float *yd = y->data, *gd = gate ? gate->data : NULL;
#pragma omp parallel for schedule(static) if (m * d >= PAR_MIN_ELEMS)
  for (int64_t i = 0; i < m; i++) {
    float *xr = xd + i * xld;
    const float *yr = yd + i * yld;
    if (gd) {
      const float *gr = gd + i * gld;
      for (int64_t j = 0; j < d; j++)
        xr[j] += gr[j] * yr[j];
    } else {
      for (int64_t j = 0; j < d; j++)
        xr[j] += yr[j];
    }
  }
  return TRUE;
}

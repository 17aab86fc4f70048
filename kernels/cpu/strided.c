/* lingbot-gst: CPU strided ops: copy, clamp, fill, accumulate, latent
 * (de)normalisation, and the halo-band nearest upsample
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Moved from lingbot/vae-ops.c (the VAE's local helpers) unchanged in their
 * arithmetic, so the VAE's results stay bit-identical.  Every op walks its
 * operands as 5-D views (LbStrided5): an outer loop over the first four
 * dims and an inner loop over the last.
 */
#include "kernels/cpu/cpu-internal.h"

#include <string.h>

/* Work items (elements) below which an op stays single-threaded. */
#define STRIDED_OMP_MIN (1 << 20)

static inline void
strided_offsets (const LbStrided5 * it, int64_t o, int64_t * od, int64_t * os)
{
  int64_t i3 = o % it->shape[3];
  o /= it->shape[3];
  int64_t i2 = o % it->shape[2];
  o /= it->shape[2];
  int64_t i1 = o % it->shape[1];
  int64_t i0 = o / it->shape[1];
  *od = i0 * it->ys[0] + i1 * it->ys[1] + i2 * it->ys[2] + i3 * it->ys[3];
  *os = i0 * it->xs[0] + i1 * it->xs[1] + i2 * it->xs[2] + i3 * it->xs[3];
}

static inline int64_t
strided_outer (const LbStrided5 * it)
{
  return it->shape[0] * it->shape[1] * it->shape[2] * it->shape[3];
}

/* Runs the statement ... for every run (the last dim) of the walk @it (an
 * LbStrided5), in parallel (OpenMP) when there are enough elements: @od
 * and @os name the run's first offsets in y and x. */
#define STRIDED_FOR_EACH_RUN(it, od, os, ...) \
  do { \
    const int64_t outer_ = strided_outer (&(it)); \
    const int64_t work_ = outer_ * (it).shape[4]; \
    _Pragma ("omp parallel for schedule(static) if (work_ >= STRIDED_OMP_MIN)") \
    for (int64_t o_ = 0; o_ < outer_; o_++) { \
      int64_t od, os; \
      strided_offsets (&(it), o_, &od, &os); \
      __VA_ARGS__; \
    } \
  } while (0)

/* Runs the statement ... for every element of the walk @it, as
 * STRIDED_FOR_EACH_RUN(): @yi and @xi name the element's offsets in y and
 * x. */
#define STRIDED_FOR_EACH(it, yi, xi, ...) \
  do { \
    const int64_t n_ = (it).shape[4], sdn_ = (it).ys[4], ssn_ = (it).xs[4]; \
    STRIDED_FOR_EACH_RUN (it, od_, os_, \
        for (int64_t i_ = 0; i_ < n_; i_++) { \
          const int64_t yi = od_ + i_ * sdn_; \
          const int64_t xi G_GNUC_UNUSED = os_ + i_ * ssn_; \
          __VA_ARGS__; \
        }); \
  } while (0)

/* copy between dtypes: one run of @n elements, strides @sdn / @ssn. */
static void
copy_run_convert (void *d, LbDType dt, const void *src, LbDType st,
    int64_t n, int64_t sdn, int64_t ssn)
{
  if (dt == LB_DTYPE_BF16 && st == LB_DTYPE_F32) {
    uint16_t *y = d;
    const float *x = src;
    for (int64_t i = 0; i < n; i++)
      y[i * sdn] = lb_f32_to_bf16 (x[i * ssn]);
  } else if (dt == LB_DTYPE_F32 && st == LB_DTYPE_BF16) {
    float *y = d;
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++)
      y[i * sdn] = lb_bf16_to_f32 (x[i * ssn]);
  } else {                      /* bf16 -> bf16: the bits */
    uint16_t *y = d;
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++)
      y[i * sdn] = x[i * ssn];
  }
}

/* f32 copy: one run of @n elements, strides @sdn / @ssn. */
static inline void
copy_run_f32 (float *d, const float *src, int64_t n, int64_t sdn, int64_t ssn)
{
  if (sdn == 1 && ssn == 1) {
    memcpy (d, src, (size_t) n * sizeof (float));
  } else {
    for (int64_t i = 0; i < n; i++)
      d[i * sdn] = src[i * ssn];
  }
}

/**
 * lb_cpu_copy:
 * @s: a CPU stream
 * @x: f32 or bf16 view, any strides
 * @y: f32 or bf16 view of the same shape, any strides
 * @error: %LB_ERROR_SHAPE on mismatched operands (lb_check_copy())
 *
 * `y = x` (kernels/ops.h): f32 -> bf16 rounds to nearest even
 * (lb_f32_to_bf16()), bf16 -> f32 widens exactly (lb_bf16_to_f32()),
 * equal dtypes copy the bits.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_copy (LbStream * s, const LbTensor * x, LbTensor * y, GError ** error)
{
  LbStrided5 it;
  if (!lb_check_devices (LB_CPU_DEVICE, "copy", error, "x", x, "y", y, NULL)
      || !lb_check_copy (x, y, &it, error))
    return FALSE;
  int64_t n = it.shape[4], sdn = it.ys[4], ssn = it.xs[4];
  if (x->dtype != LB_DTYPE_F32 || y->dtype != LB_DTYPE_F32) {
    const gsize ye = lb_dtype_size (y->dtype), xe = lb_dtype_size (x->dtype);
    guint8 *d = y->data;
    const guint8 *src = x->data;
    STRIDED_FOR_EACH_RUN (it, od, os, copy_run_convert (d + od * (int64_t) ye,
            y->dtype, src + os * (int64_t) xe, x->dtype, n, sdn, ssn));
    return TRUE;
  }
  float *d = y->data;
  const float *src = x->data;
  STRIDED_FOR_EACH_RUN (it, od, os, copy_run_f32 (d + od, src + os, n, sdn,
          ssn));
  return TRUE;
}

/* clamp(v, lo, hi) as torch.clamp: NaN stays NaN. */
static inline float
clamp_value (float v, float lo, float hi)
{
  v = v < lo ? lo : v;
  return v > hi ? hi : v;
}

/**
 * lb_cpu_clamp:
 * @s: a CPU stream
 * @x: f32 view, any strides
 * @lo: lower bound
 * @hi: upper bound
 * @y: f32 view of the same shape, any strides (may be @x)
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `y = clamp(x, lo, hi)`, NaN stays NaN (as torch.clamp).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_clamp (LbStream * s, const LbTensor * x, float lo, float hi,
    LbTensor * y, GError ** error)
{
  LbStrided5 it;
  if (!lb_check_devices (LB_CPU_DEVICE, "clamp", error, "x", x, "y", y, NULL)
      || !lb_check_strided ("clamp", x, y, &it, error))
    return FALSE;
  float *d = y->data;
  const float *src = x->data;
  STRIDED_FOR_EACH (it, yi, xi, d[yi] = clamp_value (src[xi], lo, hi));
  return TRUE;
}

/**
 * lb_cpu_fill:
 * @s: a CPU stream
 * @y: f32 or bf16 view, any strides
 * @value: the value
 * @error: %LB_ERROR_SHAPE on a bad operand
 *
 * `y[...] = value` (a bf16 y holds lb_f32_to_bf16() of it).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_fill (LbStream * s, LbTensor * y, float value, GError ** error)
{
  LbStrided5 it;
  if (!lb_check_devices (LB_CPU_DEVICE, "fill", error, "y", y, NULL)
      || !lb_check_fill (y, &it, error))
    return FALSE;
  if (y->dtype == LB_DTYPE_BF16) {
    uint16_t *d16 = y->data;
    const uint16_t v16 = lb_f32_to_bf16 (value);
    STRIDED_FOR_EACH (it, yi, xi, d16[yi] = v16);
    return TRUE;
  }
  float *d = y->data;
  STRIDED_FOR_EACH (it, yi, xi, d[yi] = value);
  return TRUE;
}

/**
 * lb_cpu_accumulate:
 * @s: a CPU stream
 * @x: f32 view, any strides
 * @y: f32 view of the same shape, any strides
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * In place `y += x`.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_accumulate (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  LbStrided5 it;
  if (!lb_check_devices (LB_CPU_DEVICE, "accumulate", error, "x", x, "y", y,
          NULL) || !lb_check_strided ("accumulate", x, y, &it, error))
    return FALSE;
  float *d = y->data;
  const float *src = x->data;
  STRIDED_FOR_EACH (it, yi, xi, d[yi] += src[xi]);
  return TRUE;
}

/**
 * lb_cpu_latent_affine:
 * @s: a CPU stream
 * @x: f32 [C, ...] (2 to 5 dims, any strides)
 * @mean: f32 [C]
 * @inv_std: f32 [C]
 * @denormalize: %TRUE: `y = x / inv_std + mean`; %FALSE:
 *   `y = (x - mean) * inv_std`
 * @y: f32 of x's shape, any strides
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * Per-channel latent (de)normalisation (spec A.2, C.6).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_latent_affine (LbStream * s, const LbTensor * x, const LbTensor * mean,
    const LbTensor * inv_std, gboolean denormalize, LbTensor * y,
    GError ** error)
{
  LbStrided5 it;
  if (!lb_check_devices (LB_CPU_DEVICE, "latent_affine", error, "x", x,
          "mean", mean, "inv_std", inv_std, "y", y, NULL)
      || !lb_check_latent_affine (x, mean, inv_std, y, &it, error))
    return FALSE;
  float *d = y->data;
  const float *src = x->data, *mp = mean->data, *ip = inv_std->data;
  int64_t outer = strided_outer (&it), n = it.shape[4];
  int64_t sdn = it.ys[4], ssn = it.xs[4];
  int64_t per_c = x->shape[0] > 0 ? outer / x->shape[0] : 0;
  for (int64_t o = 0; o < outer; o++) {
    int64_t od, os, c = o / per_c;
    strided_offsets (&it, o, &od, &os);
    float m = mp[c], is = ip[c];
    if (denormalize) {
      for (int64_t i = 0; i < n; i++)
        d[od + i * sdn] = src[os + i * ssn] / is + m;
    } else {
      for (int64_t i = 0; i < n; i++)
        d[od + i * sdn] = (src[os + i * ssn] - m) * is;
    }
  }
  return TRUE;
}

/**
 * lb_cpu_upsample_nearest2x_halo:
 * @s: a CPU stream
 * @x: f32 [C, T, h + 2, w] view with stride[3] == 1
 * @y: [C, T, 2h + 2, 2w], f32 contiguous or bf16 channels-last
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `y[c, t, r, j] = x[c, t, (r + 1) / 2, j / 2]` (kernels/ops.h), rounded
 * by lb_f32_to_bf16() into a bf16 y.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_upsample_nearest2x_halo (LbStream * s, const LbTensor * x,
    LbTensor * y, GError ** error)
{
  if (!lb_check_devices (LB_CPU_DEVICE, "upsample_nearest2x_halo", error,
          "x", x, "y", y, NULL)
      || !lb_check_upsample_nearest2x_halo (x, y, error))
    return FALSE;
  const int64_t T = y->shape[1], Ho = y->shape[2], Wo = y->shape[3],
      Wi = x->shape[3];
  const float *xs = x->data;
  if (y->dtype == LB_DTYPE_BF16) {
    /* channels-last: output row (t, r) is Wo runs of C values */
    const int64_t C = y->shape[0];
    uint16_t *yb = y->data;
#pragma omp parallel for schedule(static) if (C * T * Ho * Wo >= STRIDED_OMP_MIN)
    for (int64_t r = 0; r < T * Ho; r++) {
      const int64_t ho = r % Ho, t = r / Ho;
      const float *xr = xs + t * x->stride[1] + ((ho + 1) / 2) * x->stride[2];
      uint16_t *yr = yb + r * Wo * C;
      for (int64_t j = 0; j < Wi; j++)
        for (int64_t c = 0; c < C; c++) {
          const uint16_t v = lb_f32_to_bf16 (xr[c * x->stride[0] + j]);
          yr[(2 * j) * C + c] = v;
          yr[(2 * j + 1) * C + c] = v;
        }
    }
    return TRUE;
  }
  float *ys = y->data;
  const int64_t rows = y->shape[0] * T * Ho;
#pragma omp parallel for schedule(static) if (rows * Wo >= STRIDED_OMP_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t ho = r % Ho, ct = r / Ho, t = ct % T, c = ct / T;
    const float *xr = xs + c * x->stride[0] + t * x->stride[1]
        + ((ho + 1) / 2) * x->stride[2];
    float *yr = ys + r * Wo;
    for (int64_t j = 0; j < Wi; j++) {
      yr[2 * j] = xr[j];
      yr[2 * j + 1] = xr[j];
    }
  }
  return TRUE;
}

/* lingbot-gst: CPU layout ops: nearest upsample, (un)patchify, bicubic
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/cpu/cpu-internal.h"
#include "kernels/bicubic.h"

#include <math.h>
#include <string.h>

#define PAR_MIN_ELEMS 32768

/**
 * lb_cpu_upsample_nearest2x:
 * @s: a CPU stream
 * @x: f32 [..., H, W] contiguous (at least 2-D)
 * @y: f32 [..., 2H, 2W] contiguous
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `y[..., i, j] = x[..., i/2, j/2]` (vae_and_distributed_spec.md A.3
 * Upsample: nearest-exact x2, which for an exact factor is this).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_upsample_nearest2x (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  if (!lb_check_devices (LB_CPU_DEVICE, "upsample_nearest2x", error, "x", x,
          "y", y, NULL) || !lb_check_upsample_nearest2x (x, y, error))
    return FALSE;
  const int nd = x->ndim;
  int64_t h = x->shape[nd - 2], w = x->shape[nd - 1];
  int64_t rows = h > 0 ? lb_tensor_numel (x) / MAX (w, 1) : 0;
  if (w == 0)
    return TRUE;
  const float *xd = x->data;
  float *yd = y->data;
#pragma omp parallel for schedule(static) if (rows * w >= PAR_MIN_ELEMS)
  for (int64_t r = 0; r < rows; r++) {
    const float *src = xd + r * w;
    float *d0 = yd + 2 * r * 2 * w;
    for (int64_t j = 0; j < w; j++)
      d0[2 * j] = d0[2 * j + 1] = src[j];
    memcpy (d0 + 2 * w, d0, 2 * w * sizeof (float));
  }
  return TRUE;
}

/**
 * lb_cpu_patchify:
 * @s: a CPU stream
 * @x: f32 [C, F, H, W] contiguous, H % @ph == 0, W % @pw == 0
 * @ph: patch height
 * @pw: patch width
 * @y: f32 [F*(H/ph)*(W/pw), C*ph*pw] contiguous
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * Token (f, i, j) in row-major order gets feature `c*ph*pw + kh*pw + kw`
 * = x[c, f, i*ph + kh, j*pw + kw] (spec 1.3 patch embedding as a Linear,
 * 1.6 control tokens).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_patchify (LbStream * s, const LbTensor * x, int ph, int pw,
    LbTensor * y, GError ** error)
{
  if (!lb_check_devices (LB_CPU_DEVICE, "patchify", error, "x", x, "y", y,
          NULL) || !lb_check_patchify (x, ph, pw, y, error))
    return FALSE;
  const int64_t c = x->shape[0], f = x->shape[1], h = x->shape[2];
  const int64_t w = x->shape[3];
  const int64_t hp = h / ph, wp = w / pw, feat = c * ph * pw;

  const float *xd = x->data;
  float *yd = y->data;
  int64_t ntok = f * hp * wp;
#pragma omp parallel for schedule(static) if (ntok * feat >= PAR_MIN_ELEMS)
  for (int64_t t = 0; t < ntok; t++) {
    int64_t fi = t / (hp * wp), i = (t / wp) % hp, j = t % wp;
    float *dst = yd + t * feat;
    for (int64_t ci = 0; ci < c; ci++)
      for (int64_t kh = 0; kh < ph; kh++) {
        const float *src = xd + ((ci * f + fi) * h + i * ph + kh) * w + j * pw;
        memcpy (dst + (ci * ph + kh) * pw, src, pw * sizeof (float));
      }
  }
  return TRUE;
}

/**
 * lb_cpu_unpatchify:
 * @s: a CPU stream
 * @z: f32 [F*Hp*Wp, ph*pw*C] contiguous
 * @ph: patch height
 * @pw: patch width
 * @y: f32 [C, F, Hp*ph, Wp*pw] contiguous; its shape sets C, F, Hp, Wp
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `y[c, f, i*ph + kh, j*pw + kw] = z[(f*Hp + i)*Wp + j, (kh*pw + kw)*C + c]`
 * (spec 1.10: the channel is the fastest feature index, the reverse of
 * patchify).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_unpatchify (LbStream * s, const LbTensor * z, int ph, int pw,
    LbTensor * y, GError ** error)
{
  if (!lb_check_devices (LB_CPU_DEVICE, "unpatchify", error, "z", z, "y", y,
          NULL) || !lb_check_unpatchify (z, ph, pw, y, error))
    return FALSE;
  const int64_t c = y->shape[0], f = y->shape[1], h = y->shape[2];
  const int64_t w = y->shape[3];
  const int64_t hp = h / ph, wp = w / pw, feat = c * ph * pw;

  const float *zd = z->data;
  float *yd = y->data;
  int64_t nrows = c * f * h;
#pragma omp parallel for schedule(static) if (nrows * w >= PAR_MIN_ELEMS)
  for (int64_t r = 0; r < nrows; r++) {
    int64_t ci = r / (f * h), fi = (r / h) % f, row = r % h;
    int64_t i = row / ph, kh = row % ph;
    float *dst = yd + r * w;
    for (int64_t col = 0; col < w; col++) {
      int64_t j = col / pw, kw = col % pw;
      dst[col] = zd[((fi * hp + i) * wp + j) * feat + (kh * pw + kw) * c + ci];
    }
  }
  return TRUE;
}

/**
 * lb_cpu_resize_bicubic:
 * @s: a CPU stream
 * @x: f32 [C, H, W] contiguous
 * @y: f32 [C, H', W'] contiguous
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * Bicubic resize exactly as torch.nn.functional.interpolate(mode="bicubic",
 * align_corners=False, antialias=False) on the CPU (golden README 4; spec
 * 6.2): scale = in/out in float32, source coordinate
 * `scale * (o + 0.5) - 0.5` and its fraction evaluated in double (not
 * clamped), cubic convolution with
 * A = -0.75, the 4 taps clamped to the border, rows of 4 width taps
 * combined first, all in float32.  Downscaling does not low-pass filter.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_resize_bicubic (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  if (!lb_check_devices (LB_CPU_DEVICE, "resize_bicubic", error, "x", x,
          "y", y, NULL) || !lb_check_resize_bicubic (x, y, error))
    return FALSE;
  const int64_t c = x->shape[0], h = x->shape[1], w = x->shape[2];
  const int64_t ho = y->shape[1], wo = y->shape[2];
  if (c == 0 || ho == 0 || wo == 0)
    return TRUE;

  const float sh = (float) h / (float) ho, sw = (float) w / (float) wo;
  const float *xd = x->data;
  float *yd = y->data;
  int64_t nrows = c * ho;
#pragma omp parallel for schedule(static) if (nrows * wo >= PAR_MIN_ELEMS / 4)
  for (int64_t r = 0; r < nrows; r++) {
    int64_t ci = r / ho, oy = r % ho;
    int64_t iy[4], ix[4];
    float wy[4], wx[4];
    lb_cubic_taps (sh, oy, h, iy, wy);
    const float *plane = xd + ci * h * w;
    float *dst = yd + r * wo;
    for (int64_t ox = 0; ox < wo; ox++) {
      lb_cubic_taps (sw, ox, w, ix, wx);
      dst[ox] = lb_cubic_combine (plane, w, iy, wy, ix, wx);
    }
  }
  return TRUE;
}

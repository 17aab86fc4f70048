/* lingbot-gst: VAE-local CPU helpers that the op table (kernels/ops.h) lacks
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * TODO(op table): every function in this file should move into LbOps with a
 * CUDA version; until then the VAE runs on CPU streams only.  They are:
 * - vae_copy / vae_copy_clamp / vae_fill / vae_add_into: strided 5-D
 *   copy (optionally clamped), fill and accumulate.  The VAE uses them for
 *   halo rows, cache updates (last 2 frames of a conv input), the
 *   upsample3d time interleave, the encoder's stride-2 frame pick, the
 *   residual add of the attention output (token-major -> channel-major) and
 *   writing a band of output rows into the frame buffer.
 * - vae_rms_norm_channels: Wan's RMS_norm over the C channels of every
 *   voxel of a [C, T, H, W] tensor (spec A.3: x / max(|x|_2, 1e-12) *
 *   sqrt(C) * gamma), with an optional fused SiLU, written into a strided
 *   destination (the interior of a halo-padded conv input, or token-major
 *   [N, C] for the attention).  ops.h's rms_norm normalises rows of [M, D]
 *   and would need a transpose on each side.
 * - vae_upsample2x_halo: nearest x2 of a frame band that carries one halo
 *   row on each side, keeping exactly one upsampled halo row per side.
 * - vae_latent_denormalize / vae_latent_normalize: per-channel latent
 *   (de)normalisation in the reference's order of operations (spec A.2:
 *   divide by the float32 reciprocal).
 */
#include "lingbot/vae-private.h"

#include <math.h>
#include <string.h>

/* Work items (elements) below which a helper stays single-threaded. */
#define VAE_OMP_MIN (1 << 20)

typedef struct
{
  int64_t shape[5];
  int64_t sd[5];
  int64_t ss[5];
} Iter5;

static gboolean
check_f32 (const char *op, const char *arg, const LbTensor *t, GError **error)
{
  if (t->dtype != LB_DTYPE_F32 || t->device.type != LB_DEVICE_CPU) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "%s: %s must be a float32 CPU tensor (got %s)", op, arg,
        lb_dtype_name (t->dtype));
    return FALSE;
  }
  return TRUE;
}

static gboolean
iter5_init (Iter5 *it, const char *op, const LbTensor *dst, const LbTensor *src,
    GError **error)
{
  if (!check_f32 (op, "dst", dst, error))
    return FALSE;
  if (src != NULL) {
    if (!check_f32 (op, "src", src, error))
      return FALSE;
    if (!lb_tensor_same_shape (dst, src)) {
      g_autofree char *a = lb_tensor_shape_string (dst);
      g_autofree char *b = lb_tensor_shape_string (src);
      g_set_error (error, LB_ERROR, LB_ERROR_SHAPE, "%s: dst is %s, src is %s",
          op, a, b);
      return FALSE;
    }
  }
  int pad = 5 - dst->ndim;
  for (int i = 0; i < 5; i++) {
    int j = i - pad;
    it->shape[i] = j < 0 ? 1 : dst->shape[j];
    it->sd[i] = j < 0 ? 0 : dst->stride[j];
    it->ss[i] = (j < 0 || src == NULL) ? 0 : src->stride[j];
  }
  return TRUE;
}

static inline void
iter5_offsets (const Iter5 *it, int64_t o, int64_t *od, int64_t *os)
{
  int64_t i3 = o % it->shape[3];
  o /= it->shape[3];
  int64_t i2 = o % it->shape[2];
  o /= it->shape[2];
  int64_t i1 = o % it->shape[1];
  int64_t i0 = o / it->shape[1];
  *od = i0 * it->sd[0] + i1 * it->sd[1] + i2 * it->sd[2] + i3 * it->sd[3];
  *os = i0 * it->ss[0] + i1 * it->ss[1] + i2 * it->ss[2] + i3 * it->ss[3];
}

static inline int64_t
iter5_outer (const Iter5 *it)
{
  return it->shape[0] * it->shape[1] * it->shape[2] * it->shape[3];
}

/**
 * vae_copy:
 * @dst: f32 view, any strides
 * @src: f32 view of the same shape, any strides
 *
 * dst = src.  Regions must not overlap.
 */
gboolean
vae_copy (LbTensor *dst, const LbTensor *src, GError **error)
{
  Iter5 it;
  if (!iter5_init (&it, "vae_copy", dst, src, error))
    return FALSE;
  float *d = dst->data;
  const float *s = src->data;
  int64_t outer = iter5_outer (&it), n = it.shape[4];
  int64_t sdn = it.sd[4], ssn = it.ss[4];
#pragma omp parallel for schedule(static) if (outer * n >= VAE_OMP_MIN)
  for (int64_t o = 0; o < outer; o++) {
    int64_t od, os;
    iter5_offsets (&it, o, &od, &os);
    if (sdn == 1 && ssn == 1) {
      memcpy (d + od, s + os, (size_t)n * sizeof (float));
    } else {
      for (int64_t i = 0; i < n; i++)
        d[od + i * sdn] = s[os + i * ssn];
    }
  }
  return TRUE;
}

/**
 * vae_copy_clamp:
 *
 * dst = clamp(src, lo, hi) (NaN stays NaN, as torch.clamp).
 */
gboolean
vae_copy_clamp (
    LbTensor *dst, const LbTensor *src, float lo, float hi, GError **error)
{
  Iter5 it;
  if (!iter5_init (&it, "vae_copy_clamp", dst, src, error))
    return FALSE;
  float *d = dst->data;
  const float *s = src->data;
  int64_t outer = iter5_outer (&it), n = it.shape[4];
  int64_t sdn = it.sd[4], ssn = it.ss[4];
#pragma omp parallel for schedule(static) if (outer * n >= VAE_OMP_MIN)
  for (int64_t o = 0; o < outer; o++) {
    int64_t od, os;
    iter5_offsets (&it, o, &od, &os);
    for (int64_t i = 0; i < n; i++) {
      float v = s[os + i * ssn];
      v = v < lo ? lo : v;
      v = v > hi ? hi : v;
      d[od + i * sdn] = v;
    }
  }
  return TRUE;
}

/**
 * vae_fill:
 *
 * dst[...] = value.
 */
gboolean
vae_fill (LbTensor *dst, float value, GError **error)
{
  Iter5 it;
  if (!iter5_init (&it, "vae_fill", dst, NULL, error))
    return FALSE;
  float *d = dst->data;
  int64_t outer = iter5_outer (&it), n = it.shape[4], sdn = it.sd[4];
#pragma omp parallel for schedule(static) if (outer * n >= VAE_OMP_MIN)
  for (int64_t o = 0; o < outer; o++) {
    int64_t od, os;
    iter5_offsets (&it, o, &od, &os);
    for (int64_t i = 0; i < n; i++)
      d[od + i * sdn] = value;
  }
  return TRUE;
}

/**
 * vae_add_into:
 *
 * dst += src (same shape, any strides).  Used where the addend is laid out
 * differently (token-major attention output added to a channel-major
 * residual); for equal layouts use ops->gated_residual.
 */
gboolean
vae_add_into (LbTensor *dst, const LbTensor *src, GError **error)
{
  Iter5 it;
  if (!iter5_init (&it, "vae_add_into", dst, src, error))
    return FALSE;
  float *d = dst->data;
  const float *s = src->data;
  int64_t outer = iter5_outer (&it), n = it.shape[4];
  int64_t sdn = it.sd[4], ssn = it.ss[4];
#pragma omp parallel for schedule(static) if (outer * n >= VAE_OMP_MIN)
  for (int64_t o = 0; o < outer; o++) {
    int64_t od, os;
    iter5_offsets (&it, o, &od, &os);
    for (int64_t i = 0; i < n; i++)
      d[od + i * sdn] += s[os + i * ssn];
  }
  return TRUE;
}

#define RMS_BLOCK 64

/**
 * vae_rms_norm_channels:
 * @x: f32 [C, T, H, W] view (any strides)
 * @gamma: f32 [C] contiguous
 * @silu: apply SiLU after the norm
 * @y: f32 [C, T, H, W] view (any strides; must not overlap @x)
 *
 * Wan2.1 RMS_norm over channels (spec A.3), in the reference's order:
 * `y = x / max(sqrt(sum_c x^2), 1e-12) * sqrt(C) * gamma[c]`, then
 * optionally `y * sigmoid(y)`.
 */
gboolean
vae_rms_norm_channels (const LbTensor *x, const LbTensor *gamma, gboolean silu,
    LbTensor *y, GError **error)
{
  const char *op = "vae_rms_norm_channels";
  if (!check_f32 (op, "x", x, error) || !check_f32 (op, "y", y, error)
      || !check_f32 (op, "gamma", gamma, error))
    return FALSE;
  if (x->ndim != 4 || !lb_tensor_same_shape (x, y) || gamma->ndim != 1
      || gamma->shape[0] != x->shape[0] || gamma->stride[0] != 1) {
    g_autofree char *a = lb_tensor_shape_string (x);
    g_autofree char *b = lb_tensor_shape_string (y);
    g_autofree char *g = lb_tensor_shape_string (gamma);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "%s: x %s, y %s, gamma %s; expected x = y = [C,T,H,W], gamma [C]", op,
        a, b, g);
    return FALSE;
  }
  const int64_t C = x->shape[0], T = x->shape[1], H = x->shape[2],
                W = x->shape[3];
  const float *xs = x->data, *g = gamma->data;
  float *ys = y->data;
  const float scale = (float)sqrt ((double)C);
  const int64_t rows = T * H;
  const int64_t xsw = x->stride[3], ysw = y->stride[3];
  const gboolean unit = xsw == 1 && ysw == 1;
#pragma omp parallel for schedule(static) if (C * rows * W >= VAE_OMP_MIN)
  for (int64_t r = 0; r < rows; r++) {
    int64_t t = r / H, h = r % H;
    const float *xr = xs + t * x->stride[1] + h * x->stride[2];
    float *yr = ys + t * y->stride[1] + h * y->stride[2];
    for (int64_t w0 = 0; w0 < W; w0 += RMS_BLOCK) {
      int64_t nw = MIN (RMS_BLOCK, W - w0);
      float acc[RMS_BLOCK];
      for (int64_t i = 0; i < nw; i++)
        acc[i] = 0.f;
      for (int64_t c = 0; c < C; c++) {
        const float *xc = xr + c * x->stride[0] + w0 * xsw;
        if (unit) {
          for (int64_t i = 0; i < nw; i++)
            acc[i] += xc[i] * xc[i];
        } else {
          for (int64_t i = 0; i < nw; i++) {
            float v = xc[i * xsw];
            acc[i] += v * v;
          }
        }
      }
      for (int64_t i = 0; i < nw; i++) {
        float n = sqrtf (acc[i]);
        acc[i] = n > 1e-12f ? n : 1e-12f;
      }
      for (int64_t c = 0; c < C; c++) {
        const float *xc = xr + c * x->stride[0] + w0 * xsw;
        float *yc = yr + c * y->stride[0] + w0 * ysw;
        const float gc = g[c];
        if (unit && silu) {
          for (int64_t i = 0; i < nw; i++) {
            float v = xc[i] / acc[i] * scale * gc;
            yc[i] = v / (1.f + expf (-v));
          }
        } else {
          for (int64_t i = 0; i < nw; i++) {
            float v = xc[i * xsw] / acc[i] * scale * gc;
            if (silu)
              v = v / (1.f + expf (-v));
            yc[i * ysw] = v;
          }
        }
      }
    }
  }
  return TRUE;
}

/**
 * vae_upsample2x_halo:
 * @x: f32 [C, T, h + 2, w] view with row stride w-contiguous (stride[3] = 1):
 *   a band of h rows with one halo row above and below
 * @y: f32 [C, T, 2h + 2, 2w] contiguous
 *
 * Nearest x2 (spec A.3, `out[i] = in[i/2]`) of the band, keeping one
 * upsampled halo row per side: y[.., r, j] = x[.., (r + 1) / 2, j / 2].
 * The full upsample would have 2h + 4 rows; the outermost ones are never
 * read by the following 3x3 conv.
 */
gboolean
vae_upsample2x_halo (const LbTensor *x, LbTensor *y, GError **error)
{
  const char *op = "vae_upsample2x_halo";
  if (!check_f32 (op, "x", x, error) || !check_f32 (op, "y", y, error))
    return FALSE;
  if (x->ndim != 4 || y->ndim != 4 || x->shape[0] != y->shape[0]
      || x->shape[1] != y->shape[1] || y->shape[2] != 2 * x->shape[2] - 2
      || y->shape[3] != 2 * x->shape[3] || x->stride[3] != 1
      || !lb_tensor_is_contiguous (y)) {
    g_autofree char *a = lb_tensor_shape_string (x);
    g_autofree char *b = lb_tensor_shape_string (y);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "%s: x %s, y %s; expected [C,T,h+2,w] -> [C,T,2h+2,2w]", op, a, b);
    return FALSE;
  }
  const int64_t C = y->shape[0], T = y->shape[1], Ho = y->shape[2],
                Wo = y->shape[3], Wi = x->shape[3];
  const float *xs = x->data;
  float *ys = y->data;
  const int64_t rows = C * T * Ho;
#pragma omp parallel for schedule(static) if (rows * Wo >= VAE_OMP_MIN)
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

static gboolean
latent_affine (const char *op, const LbTensor *z, const float *mean,
    const float *inv_std, gboolean denorm, LbTensor *y, GError **error)
{
  Iter5 it;
  if (!iter5_init (&it, op, y, z, error))
    return FALSE;
  if (z->ndim != 4 || z->shape[0] != VAE_Z_DIM) {
    g_autofree char *a = lb_tensor_shape_string (z);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "%s: latent is %s, expected [%d, L, h, w]", op, a, VAE_Z_DIM);
    return FALSE;
  }
  float *d = y->data;
  const float *s = z->data;
  int64_t outer = iter5_outer (&it), n = it.shape[4];
  int64_t sdn = it.sd[4], ssn = it.ss[4];
  int64_t per_c = outer / VAE_Z_DIM;
  for (int64_t o = 0; o < outer; o++) {
    int64_t od, os, c = o / per_c;
    iter5_offsets (&it, o, &od, &os);
    float m = mean[c], is = inv_std[c];
    if (denorm) {
      for (int64_t i = 0; i < n; i++)
        d[od + i * sdn] = s[os + i * ssn] / is + m;
    } else {
      for (int64_t i = 0; i < n; i++)
        d[od + i * sdn] = (s[os + i * ssn] - m) * is;
    }
  }
  return TRUE;
}

/**
 * vae_latent_denormalize:
 * @z: f32 [16, L, h, w] normalised latents (any strides)
 * @y: f32 [16, L, h, w] model-space latents
 *
 * y = z / inv_std[c] + mean[c] (spec A.2, C.6).
 */
gboolean
vae_latent_denormalize (const LbTensor *z, const float *mean,
    const float *inv_std, LbTensor *y, GError **error)
{
  return latent_affine (
      "vae_latent_denormalize", z, mean, inv_std, TRUE, y, error);
}

/**
 * vae_latent_normalize:
 * @mu: f32 [16, L, h, w] posterior mean (any strides)
 * @y: f32 [16, L, h, w]
 *
 * y = (mu - mean[c]) * inv_std[c] (spec A.2).
 */
gboolean
vae_latent_normalize (const LbTensor *mu, const float *mean,
    const float *inv_std, LbTensor *y, GError **error)
{
  return latent_affine (
      "vae_latent_normalize", mu, mean, inv_std, FALSE, y, error);
}

/**
 * vae_view_flat:
 *
 * A contiguous view of the first elements of a flat scratch buffer @buf,
 * shaped @shape.  The caller sized @buf at session creation.
 */
void
vae_view_flat (
    LbTensor *out, const LbTensor *buf, int ndim, const int64_t *shape)
{
  int64_t n = 1;
  for (int i = 0; i < ndim; i++)
    n *= shape[i];
  g_assert (n <= lb_tensor_numel (buf));
  lb_tensor_view_init (
      out, buf->dtype, buf->data, buf->device, ndim, shape, NULL);
}

void
vae_view4 (LbTensor *out, const LbTensor *buf, int64_t c, int64_t t, int64_t h,
    int64_t w)
{
  int64_t shape[4] = { c, t, h, w };
  vae_view_flat (out, buf, 4, shape);
}

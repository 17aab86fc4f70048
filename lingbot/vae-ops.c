/* lingbot-gst: view helpers of the VAE (no allocation, no compute)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The VAE's former local CPU helpers (strided copy, clamp, fill and add,
 * the channel RMS norm with fused SiLU, the halo-band nearest upsample and
 * the latent (de)normalisation) are op-table ops now (kernels/ops.h: copy,
 * clamp, fill, accumulate, channel_rms_norm, upsample_nearest2x_halo,
 * latent_affine), implemented by every backend (kernels/cpu/strided.c,
 * kernels/cpu/norm.c, kernels/cuda/kernels-strided.cu).
 */
#include "lingbot/vae-private.h"

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

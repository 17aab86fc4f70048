/* lingbot-gst: view and staging helpers of the VAE (no allocation, no
 * compute)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Views into flat scratch buffers, and the host <-> device moves of the
 * API tensors of a device session (docs/design/cuda.md, VAE).
 *
 * The VAE's former local CPU helpers (strided copy, clamp, fill and add,
 * the channel RMS norm with fused SiLU, the halo-band nearest upsample and
 * the latent (de)normalisation) are op-table ops now (kernels/ops.h: copy,
 * clamp, fill, accumulate, channel_rms_norm, upsample_nearest2x_halo,
 * latent_affine), implemented by every backend (kernels/cpu/strided.c,
 * kernels/cpu/norm.c, kernels/cuda/kernels-strided.cu).
 */
#include "lingbot/vae-private.h"
#include "lingbot/copy-runs.h"

/**
 * vae_view_flat:
 *
 * A contiguous view of the first elements of a flat scratch buffer @buf,
 * shaped @shape.  The caller sized @buf at session creation.
 */
void
vae_view_flat (LbTensor * out, const LbTensor * buf, int ndim,
    const int64_t * shape)
{
  int64_t n = 1;
  for (int i = 0; i < ndim; i++)
    n *= shape[i];
  g_assert (n <= lb_tensor_numel (buf));
  lb_tensor_view_init (out, buf->dtype, buf->data, buf->device, ndim, shape,
      NULL);
}

void
vae_view4 (LbTensor * out, const LbTensor * buf, int64_t c, int64_t t,
    int64_t h, int64_t w)
{
  int64_t shape[4] = { c, t, h, w };
  vae_view_flat (out, buf, 4, shape);
}

/**
 * vae_stream_is_host:
 * @stream: a session's stream
 *
 * Returns: whether @stream computes in host memory (the CPU backend), so
 * the session reads and writes the API's host tensors in place.
 */
gboolean
vae_stream_is_host (LbStream * stream)
{
  return stream->backend->device_type == LB_DEVICE_CPU;
}

/**
 * vae_check_host:
 * @t: an API tensor (latents, frames, pixels, image, y)
 * @func: the calling API, for the message ("VAE decode")
 * @what: the argument's name
 * @error: %LB_ERROR_INVALID_ARGUMENT "FUNC: WHAT must be a host tensor, got
 *   cuda:N"
 *
 * The public VAE API takes and returns host tensors on every backend
 * (vae.h); a device session stages them itself.
 *
 * Returns: %TRUE when @t lives in host memory.
 */
gboolean
vae_check_host (const LbTensor * t, const char *func, const char *what,
    GError ** error)
{
  if (t->device.type == LB_DEVICE_CPU)
    return TRUE;
  g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
      "%s: %s must be a host tensor, got %s:%d", func, what,
      t->device.type == LB_DEVICE_CUDA ? "cuda" : "device", t->device.index);
  return FALSE;
}

/**
 * vae_copy_runs:
 * @stream: the session's stream (its backend copies)
 * @dst: f32 view, 1 to 5 dims, on the host (@kind device-to-host) or on
 *   @stream's device (host-to-device)
 * @src: f32 view of @dst's shape on the other side
 * @kind: %LB_COPY_HOST_TO_DEVICE or %LB_COPY_DEVICE_TO_HOST
 * @what: the API argument, for the message
 * @error: %LB_ERROR_SHAPE when the last dimension (of more than one
 *   element) does not have unit stride in both views; %LB_ERROR_DEVICE from
 *   the backend's copy
 *
 * Moves a strided view between the host and the device with one backend
 * copy per contiguous run: the trailing dimensions laid out contiguously
 * in both views form one run (size-1 dimensions ignored), the leading ones
 * are iterated in index order.  So a contiguous tensor is one copy, a band
 * of rows of every frame [3, T, rows, W] of a full frame buffer is 3 T
 * copies.  Asynchronous on a CUDA stream: the host memory must stay valid
 * (and, for device-to-host, unread) until the stream is synchronised.
 * Allocates nothing.  Host code only computes addresses; it never reads
 * device memory.
 *
 * Returns: %TRUE on success.
 */
gboolean
vae_copy_runs (LbStream * stream, LbTensor * dst, const LbTensor * src,
    LbCopyKind kind, const char *what, GError ** error)
{
  g_assert (dst->ndim == src->ndim && lb_tensor_same_shape (dst, src));
  g_assert (dst->dtype == LB_DTYPE_F32 && src->dtype == LB_DTYPE_F32);
  const int nd = src->ndim;
  const int64_t numel = lb_tensor_numel (src);
  if (numel == 0)
    return TRUE;
  /* dims [k, nd) are contiguous in both views: one run of @run elements */
  int64_t run;
  const int k = lingbot_copy_runs_split (dst, src, &run);
  if (run == 1 && numel > 1) {
    g_autofree char *shape = lb_tensor_shape_string (src);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "%s %s: a device session needs unit stride in the last dimension "
        "(source stride %" G_GINT64_FORMAT ", destination stride "
        "%" G_GINT64_FORMAT ")",
        what, shape, src->stride[nd - 1], dst->stride[nd - 1]);
    return FALSE;
  }
  return lingbot_copy_runs (stream, dst, src, k, run, kind, error);
}

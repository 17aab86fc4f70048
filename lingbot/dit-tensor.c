/* lingbot-gst: LingBot-World v2 causal DiT: tensor helpers of the DiT files
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The few tensor operations the DiT's files share (dit-ranks.c,
 * dit-kvcache.c, dit-block.c, dit-ulysses.c, dit-session.c): f32 buffers on
 * a rank's device, copies between views, flat views.
 */
#include "lingbot/dit-private.h"
#include "lingbot/copy-runs.h"

/**
 * lingbot_dit_tensor_new:
 * @s: a stream
 * @d0: rows
 * @d1: columns
 * @error: %LB_ERROR_DEVICE
 *
 * Returns: (transfer full) (nullable): an uninitialised f32 [d0, d1] on
 * @s's device.
 */
LbTensor *
lingbot_dit_tensor_new (LbStream * s, int64_t d0, int64_t d1, GError ** error)
{
  int64_t shape[2] = { d0, d1 };
  return lb_tensor_new_on (s, LB_DTYPE_F32, 2, shape, error);
}

/**
 * lingbot_dit_copy_rows:
 * @s: the stream both tensors live on
 * @dst: a tensor or view on @s's device
 * @src: a tensor or view on @s's device of the same dtype and shape; it
 *   must not overlap @dst
 * @error: %LB_ERROR_SHAPE, %LB_ERROR_DEVICE
 *
 * Copies @src into @dst with the backend's copy on @s (host-to-host on the
 * CPU backend, device-to-device otherwise): a single copy when the
 * innermost dimensions of both are contiguous over the whole tensor, else
 * one copy per contiguous run (the trailing dimensions that are
 * contiguous in both views).  This is the only place the DiT computes
 * addresses inside a tensor; everything else slices with lb_tensor_view_*().
 * Empty tensors copy nothing.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_copy_rows (LbStream * s, LbTensor * dst, const LbTensor * src,
    GError ** error)
{
  if (dst->dtype != src->dtype || !lb_tensor_same_shape (dst, src)) {
    g_autofree char *a = lb_tensor_shape_string (dst);
    g_autofree char *b = lb_tensor_shape_string (src);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT copy: destination %s %s and source %s %s differ",
        lb_dtype_name (dst->dtype), a, lb_dtype_name (src->dtype), b);
    return FALSE;
  }
  const int64_t n = lb_tensor_numel (src);
  if (n == 0)
    return TRUE;
  /* trailing dims [k, ndim) are one contiguous run in both */
  int64_t run;
  const int k = lingbot_copy_runs_split (dst, src, &run);
  if (k == 0 && dst->data == src->data)
    return TRUE;
  return lingbot_copy_runs (s, dst, src, k, run, lingbot_dit_is_host (s) ?
      LB_COPY_HOST_TO_HOST : LB_COPY_DEVICE_TO_DEVICE, error);
}

/**
 * lingbot_dit_flat_view:
 * @out: (out): a 1-D view
 * @t: a contiguous tensor
 * @offset: first element
 * @count: elements
 *
 * Elements [@offset, @offset + @count) of @t in storage order.
 *
 * Returns: %FALSE when @t is not contiguous or the range is outside it.
 */
gboolean
lingbot_dit_flat_view (LbTensor * out, const LbTensor * t, int64_t offset,
    int64_t count)
{
  LbTensor flat;
  int64_t n = lb_tensor_numel (t);
  return lb_tensor_view_reshape (&flat, t, 1, &n) &&
      lb_tensor_view_narrow (out, &flat, 0, offset, count);
}

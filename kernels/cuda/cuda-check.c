/* lingbot-gst: error checks of the CUDA module
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lb_cuda_check() turns a CUDA runtime status into a GError for every C
 * file of the module (here, not in cuda-backend.c, so that the files that
 * only need it do not depend on the backend's file).  The CUDA ops validate dtypes, shapes and strides with the
 * backend-independent checks of kernels/ops-check.h (the very checks and
 * messages of the CPU ops); what is theirs alone is that every tensor must
 * live on the stream's device.
 */
#include "kernels/cuda/cuda-internal.h"

/**
 * lb_cuda_bytes_hash:
 * @p: the key
 * @n: its size in bytes
 *
 * FNV-1a over the bytes of a plan table's key.
 *
 * Returns: the hash.
 */
guint
lb_cuda_bytes_hash (const void *p, gsize n)
{
  const guchar *b = p;
  guint32 h = 2166136261u;
  for (gsize i = 0; i < n; i++)
    h = (h ^ b[i]) * 16777619u;
  return h;
}

/**
 * lb_cuda_check:
 * @err: a CUDA runtime status
 * @what: the call, for the message
 * @error: set to %LB_ERROR_DEVICE with CUDA's error string on failure
 *
 * Returns: %TRUE when @err is cudaSuccess.
 */
gboolean
lb_cuda_check (cudaError_t err, const char *what, GError ** error)
{
  if (err == cudaSuccess)
    return TRUE;
  g_set_error (error, LB_ERROR, LB_ERROR_DEVICE, "%s: %s (%s)", what,
      cudaGetErrorString (err), cudaGetErrorName (err));
  return FALSE;
}

/**
 * lb_cuda_check_devices:
 * @s: a CUDA stream
 * @op: op name for the message
 * @error: (out) (optional): %LB_ERROR_SHAPE such as
 *   "silu: x is on device cpu:0, expected cuda:0"
 * @first_arg: name of the first tensor argument
 * @...: the first tensor (nullable), then more (name, tensor) pairs, then
 *   %NULL
 *
 * lb_check_devices() for @s's device.
 *
 * Returns: %TRUE when every tensor is absent or on @s's device.
 */
gboolean
lb_cuda_check_devices (LbStream * s, const char *op, GError ** error,
    const char *first_arg, ...)
{
  LbDevice device = { LB_DEVICE_CUDA, s->device };
  va_list ap;
  va_start (ap, first_arg);
  gboolean ok = lb_check_devices_valist (device, op, error, first_arg, ap);
  va_end (ap);
  return ok;
}

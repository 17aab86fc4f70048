/* lingbot-gst: argument checks of the CUDA ops
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The CUDA ops report bad arguments with the very messages of the CPU ops.
 * The CPU check helpers (kernels/cpu/cpu-util.c, in liblingbot) also insist
 * on CPU residency, so these wrappers first check that a tensor lives on
 * the stream's device, then run the CPU helper on a descriptor copy marked
 * as host memory (only shape, dtype and strides are looked at).
 */
#include "kernels/cuda/cuda-internal.h"
#include "kernels/cpu/cpu-internal.h"

static gboolean
on_device (LbStream * s, const char *op, const char *arg, const LbTensor * t,
    GError ** error)
{
  if (t->device.type == LB_DEVICE_CUDA && t->device.index == s->device)
    return TRUE;
  return lb_cpu_fail (error, "%s: %s is on device %s:%d, expected cuda:%d",
      op, arg, t->device.type == LB_DEVICE_CPU ? "cpu" :
      (t->device.type == LB_DEVICE_CUDA ? "cuda" : "unknown"),
      t->device.index, s->device);
}

/**
 * lb_cuda_check_t:
 *
 * lb_cpu_check() for a tensor on @s's CUDA device.
 */
gboolean
lb_cuda_check_t (LbStream * s, const char *op, const char *arg,
    const LbTensor * t, LbDType dtype, int ndim, const int64_t * shape,
    gboolean contiguous, GError ** error)
{
  if (t == NULL)
    return lb_cpu_check (op, arg, t, dtype, ndim, shape, contiguous, error);
  if (!on_device (s, op, arg, t, error))
    return FALSE;
  LbTensor host = *t;
  host.device = LB_DEVICE_HOST;
  return lb_cpu_check (op, arg, &host, dtype, ndim, shape, contiguous, error);
}

/**
 * lb_cuda_check_rows:
 *
 * lb_cpu_check_rows() for a tensor on @s's CUDA device.
 */
gboolean
lb_cuda_check_rows (LbStream * s, const char *op, const char *arg,
    const LbTensor * t, int64_t cols, int64_t * rows, int64_t * ld,
    GError ** error)
{
  if (t == NULL)
    return lb_cpu_check_rows (op, arg, t, cols, rows, ld, error);
  if (!on_device (s, op, arg, t, error))
    return FALSE;
  LbTensor host = *t;
  host.device = LB_DEVICE_HOST;
  return lb_cpu_check_rows (op, arg, &host, cols, rows, ld, error);
}

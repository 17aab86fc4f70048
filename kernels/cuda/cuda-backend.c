/* lingbot-gst: the CUDA backend module (lingbot-backend-cuda.so)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Loaded at run time by lingbot/backend.c.  This is the only binary that
 * links cudart, cuBLAS(Lt), cuDNN and NCCL.
 */
#include "kernels/cuda/cuda-internal.h"
#include "kernels/cuda/comm-nccl.h"
#include "lingbot/backend.h"

#include <gmodule.h>

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

static gpointer
cuda_alloc (LbBackend * self, int device, gsize nbytes, GError ** error)
{
  return lb_cuda_pool_alloc (device, nbytes, error);
}

static void
cuda_free (LbBackend * self, int device, gpointer ptr)
{
  lb_cuda_pool_free (device, ptr);
}

static gboolean
cuda_copy (LbStream * s, void *dst, const void *src, gsize nbytes,
    LbCopyKind kind, GError ** error)
{
  static const enum cudaMemcpyKind kinds[] = {
    [LB_COPY_HOST_TO_DEVICE] = cudaMemcpyHostToDevice,
    [LB_COPY_DEVICE_TO_HOST] = cudaMemcpyDeviceToHost,
    [LB_COPY_DEVICE_TO_DEVICE] = cudaMemcpyDeviceToDevice,
    [LB_COPY_HOST_TO_HOST] = cudaMemcpyHostToHost,
  };
  LbCudaStream *cs = s->priv;
  return lb_cuda_check (cudaMemcpyAsync (dst, src, nbytes, kinds[kind],
          cs->stream), "cudaMemcpyAsync", error);
}

static void cuda_stream_free (LbStream * s);

static LbStream *
cuda_stream_new (LbBackend * self, int device, GError ** error)
{
  if (!lb_cuda_check (cudaSetDevice (device), "cudaSetDevice", error))
    return NULL;
  LbStream *s = g_new0 (LbStream, 1);
  LbCudaStream *cs = g_new0 (LbCudaStream, 1);
  s->backend = self;
  s->device = device;
  s->priv = cs;
  cs->device = device;
  if (!lb_cuda_check (cudaStreamCreateWithFlags (&cs->stream,
              cudaStreamNonBlocking), "cudaStreamCreate", error))
    goto fail;
  s->native = cs->stream;
  lb_cuda_pool_register_stream (device, cs->stream);
  if (cublasLtCreate (&cs->lt) != CUBLAS_STATUS_SUCCESS) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "cublasLtCreate failed on device %d", device);
    goto fail;
  }
  cs->workspace_size = LB_CUDA_GEMM_WORKSPACE;
  if (!lb_cuda_check (cudaMalloc (&cs->workspace, cs->workspace_size),
          "cudaMalloc (GEMM workspace)", error))
    goto fail;
  return s;

fail:
  cuda_stream_free (s);
  return NULL;
}

static void
cuda_stream_free (LbStream * s)
{
  if (s == NULL)
    return;
  LbCudaStream *cs = s->priv;
  cudaSetDevice (s->device);
  if (cs->stream) {
    cudaStreamSynchronize (cs->stream);
    lb_cuda_pool_unregister_stream (s->device, cs->stream);
  }
  lb_cuda_gemm_plans_free (cs);
  if (cs->workspace)
    cudaFree (cs->workspace);
  if (cs->lt)
    cublasLtDestroy (cs->lt);
  if (cs->stream)
    cudaStreamDestroy (cs->stream);
  g_free (cs);
  g_free (s);
}

static gboolean
cuda_stream_synchronize (LbStream * s, GError ** error)
{
  LbCudaStream *cs = s->priv;
  return lb_cuda_check (cudaStreamSynchronize (cs->stream),
      "cudaStreamSynchronize", error);
}

static LbBackend cuda_backend = {
  .name = "cuda",
  .device_type = LB_DEVICE_CUDA,
  .ops = &lb_cuda_ops,
  .alloc = cuda_alloc,
  .free = cuda_free,
  .copy = cuda_copy,
  .stream_new = cuda_stream_new,
  .stream_free = cuda_stream_free,
  .stream_synchronize = cuda_stream_synchronize,
};

G_MODULE_EXPORT LbBackend *lingbot_backend_module_init (GError ** error);
G_MODULE_EXPORT gsize lingbot_backend_cuda_trim (int device);
G_MODULE_EXPORT void lingbot_backend_cuda_memory_stats (int device,
    gsize * in_use, gsize * cached);

/**
 * lingbot_backend_cuda_trim:
 * @device: CUDA ordinal
 *
 * Releases the caching allocator's free blocks on @device to the driver
 * (for an application that wants memory back between sessions; resolve it
 * with g_module_symbol).  Blocks in use are untouched.
 *
 * Returns: bytes released.
 */
gsize
lingbot_backend_cuda_trim (int device)
{
  return lb_cuda_pool_trim (device);
}

/**
 * lingbot_backend_cuda_memory_stats:
 * @device: CUDA ordinal
 * @in_use: (out) (optional): bytes handed out by the allocator
 * @cached: (out) (optional): bytes held free in its cache
 */
void
lingbot_backend_cuda_memory_stats (int device, gsize * in_use, gsize * cached)
{
  lb_cuda_pool_stats (device, in_use, cached);
}

/**
 * lingbot_backend_module_init:
 * @error: %LB_ERROR_DEVICE when the driver is missing or no device exists
 *
 * The module's entry point (%LINGBOT_BACKEND_MODULE_INIT): probes devices.
 *
 * Returns: (transfer none) (nullable): the CUDA backend.
 */
LbBackend *
lingbot_backend_module_init (GError ** error)
{
  int count = 0;
  cudaError_t err = cudaGetDeviceCount (&count);
  if (err != cudaSuccess) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "no usable CUDA device: cudaGetDeviceCount: %s",
        cudaGetErrorString (err));
    return NULL;
  }
  if (count == 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "no usable CUDA device: none visible");
    return NULL;
  }
  cuda_backend.device_count = count;
  lb_collectives_register (LB_DEVICE_CUDA, lb_nccl_collectives ());
  return &cuda_backend;
}

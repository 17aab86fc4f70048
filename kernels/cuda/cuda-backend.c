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
  void *ptr = NULL;
  if (!lb_cuda_check (cudaSetDevice (device), "cudaSetDevice", error))
    return NULL;
  if (!lb_cuda_check (cudaMalloc (&ptr, nbytes), "cudaMalloc", error))
    return NULL;
  return ptr;
}

static void
cuda_free (LbBackend * self, int device, gpointer ptr)
{
  cudaSetDevice (device);
  cudaFree (ptr);
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
  if (!lb_cuda_check (cudaStreamCreateWithFlags (&cs->stream,
              cudaStreamNonBlocking), "cudaStreamCreate", error))
    goto fail;
  s->native = cs->stream;
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
  if (cs->stream)
    cudaStreamSynchronize (cs->stream);
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

/* Ops the CUDA backend has so far; the registry refuses to pick a backend
 * with gaps for model work (lb_ops_first_missing()). */
static const LbOps cuda_ops = {
  .gemm = lb_cuda_gemm,
};

static LbBackend cuda_backend = {
  .name = "cuda",
  .device_type = LB_DEVICE_CUDA,
  .ops = &cuda_ops,
  .alloc = cuda_alloc,
  .free = cuda_free,
  .copy = cuda_copy,
  .stream_new = cuda_stream_new,
  .stream_free = cuda_stream_free,
  .stream_synchronize = cuda_stream_synchronize,
};

G_MODULE_EXPORT LbBackend *lingbot_backend_module_init (GError ** error);

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

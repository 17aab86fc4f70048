/* lingbot-gst: CUDA backend internals
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "kernels/backend.h"
#include "kernels/error.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

G_BEGIN_DECLS

#define LB_CUDA_GEMM_WORKSPACE (32u << 20)

/* Per-stream state: the CUDA stream, a cuBLASLt handle and its workspace. */
typedef struct
{
  cudaStream_t stream;
  cublasLtHandle_t lt;
  void *workspace;
  gsize workspace_size;
} LbCudaStream;

gboolean lb_cuda_check (cudaError_t err, const char *what, GError ** error);
gboolean lb_cuda_gemm (LbStream * s, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error);

G_END_DECLS

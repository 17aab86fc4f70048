/* lingbot-gst: CUDA backend internals
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Shared by the C files of the module (backend, allocator, GEMM, op
 * wrappers) and, through the "launch" section, by the .cu kernel files,
 * which are C++: everything here has C linkage.
 */
#pragma once

#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/ops-check.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda-kernels.h"

G_BEGIN_DECLS

#define LB_CUDA_GEMM_WORKSPACE (32u << 20)

/* Floats of per-call scratch the conv (im2col) and the large-head-dim
 * attention path take at most per block (128 MiB); both split their work so
 * that it fits. */
#define LB_CUDA_SCRATCH_LIMIT ((gsize) 32 << 20)

/* Per-stream state: the CUDA stream, a cuBLASLt handle and its workspace,
 * the cache of GEMM plans (descriptors + chosen algorithm per shape). */
typedef struct
{
  cudaStream_t stream;
  int device;
  cublasLtHandle_t lt;
  void *workspace;
  gsize workspace_size;
  GHashTable *gemm_plans;       /* LbCudaGemmKey -> plan (cuda-gemm.c) */
  /* graph capture (cuda-backend.c): while capturing, op scratch is taken
   * from and released to these lists instead of the pool, so the graph
   * keeps every block its kernels use */
  gboolean capturing;
  GPtrArray *capture_blocks;    /* LbCudaScratchBlock *, all taken */
  GPtrArray *capture_free;      /* LbCudaScratchBlock *, released */
} LbCudaStream;

typedef struct
{
  void *ptr;
  gsize size;
} LbCudaScratchBlock;

gboolean lb_cuda_check (cudaError_t err, const char *what, GError ** error);

/* ---- caching allocator (cuda-alloc.c) ---- */

void *lb_cuda_pool_alloc (int device, gsize nbytes, GError ** error);
void lb_cuda_pool_free (int device, void *ptr);
void lb_cuda_pool_register_stream (int device, cudaStream_t stream);
void lb_cuda_pool_unregister_stream (int device, cudaStream_t stream);
gsize lb_cuda_pool_trim (int device);
void lb_cuda_pool_stats (int device, gsize * in_use, gsize * cached);

/* Scratch for one op call on @s: pool memory, returned with
 * lb_cuda_scratch_release() after the op's kernels are enqueued (reuse by
 * a later op on the same stream is stream-ordered). */
void *lb_cuda_scratch (LbStream * s, gsize nbytes, GError ** error);
void lb_cuda_scratch_release (LbStream * s, void *ptr);

/* ---- GEMM (cuda-gemm.c) ---- */

gboolean lb_cuda_gemm (LbStream * s, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error);
/* Row-major C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C + bias[n]
 * (op(A) = A^T stored [k,m] when @ta; op(B) = B^T stored [n,k] when @tb),
 * float32, FP32 compute, through a cached cuBLASLt plan. */
gboolean lb_cuda_gemm_rm (LbStream * s, gboolean ta, gboolean tb, int64_t m,
    int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
    const float *b, int64_t ldb, const float *bias, float beta, float *c,
    int64_t ldc, GError ** error);
void lb_cuda_gemm_plans_free (LbCudaStream * cs);

/* ---- argument checks (cuda-check.c; the rest is kernels/ops-check.h) ---- */

gboolean lb_cuda_check_devices (LbStream * s, const char *op, GError ** error,
    const char *first_arg, ...) G_GNUC_NULL_TERMINATED;

/* ---- ops (cuda-ops.c) ---- */

extern const LbOps lb_cuda_ops;

G_END_DECLS

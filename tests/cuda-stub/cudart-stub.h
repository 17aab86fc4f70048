/* lingbot-gst: a host stub of the CUDA runtime, for CPU tests of the CUDA
 * module's host code
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include <cuda_runtime_api.h>

G_BEGIN_DECLS

/**
 * CudaStubStats:
 * @n_malloc: cudaMalloc calls that returned memory
 * @n_free: cudaFree calls that freed memory
 * @n_device_syncs: cudaDeviceSynchronize calls (succeeded or not)
 * @n_refused: calls refused because a capture forbade them (each also
 *   invalidated that capture)
 * @n_captured_records: cudaEventRecord calls into a capturing stream
 * @live: allocations not yet freed
 * @live_bytes: their bytes
 */
typedef struct
{
  int n_malloc, n_free, n_device_syncs, n_refused, n_captured_records;
  int live;
  gsize live_bytes;
} CudaStubStats;

void cuda_stub_reset (void);
CudaStubStats cuda_stub_stats (void);
void cuda_stub_set_auto_complete (gboolean on);
void cuda_stub_set_memory (gsize total);
void cuda_stub_set_query_error (cudaError_t err);
void cuda_stub_enqueue (cudaStream_t stream);
void cuda_stub_complete (cudaStream_t stream);
gboolean cuda_stub_pending (cudaStream_t stream);

G_END_DECLS

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
 * @n_launches: work run on a stream (launches, copies, memsets; each
 *   node of a replayed graph again)
 * @n_captured_launches: work recorded into a capture instead
 * @n_captures: cudaStreamBeginCapture calls that began a capture
 * @n_capture_joins: streams that joined another stream's capture (a wait
 *   on an event recorded in it)
 * @n_instantiated: cudaGraphInstantiate calls that made an executable graph
 * @n_graph_launches: cudaGraphLaunch calls that replayed one
 * @live: allocations not yet freed
 * @live_bytes: their bytes
 * @streams_live: streams created and not yet destroyed
 * @graphs_live: graphs (cudaStreamEndCapture) not yet destroyed
 * @execs_live: executable graphs not yet destroyed
 */
typedef struct
{
  int n_malloc, n_free, n_device_syncs, n_refused, n_captured_records;
  int n_launches, n_captured_launches, n_captures, n_instantiated;
  int n_graph_launches, n_capture_joins;
  int live;
  gsize live_bytes;
  int streams_live, graphs_live, execs_live;
} CudaStubStats;

void cuda_stub_reset (void);
CudaStubStats cuda_stub_stats (void);
void cuda_stub_set_auto_complete (gboolean on);
void cuda_stub_set_memory (gsize total);
void cuda_stub_set_query_error (cudaError_t err);
void cuda_stub_enqueue (cudaStream_t stream);
void cuda_stub_complete (cudaStream_t stream);
gboolean cuda_stub_pending (cudaStream_t stream);
cudaError_t cuda_stub_launch (const char *name, cudaStream_t stream);
char **cuda_stub_take_log (void);
void cuda_stub_set_instantiate_error (cudaError_t err);
void cuda_stub_fail_captures (int n);
void cuda_stub_set_devices (int count, cudaError_t err);

/**
 * CudaStubLtStats:
 * @n_plans_made: matmul descriptors created (one per GEMM plan built)
 * @n_heuristics: cublasLtMatmulAlgoGetHeuristic calls
 * @n_matmuls: cublasLtMatmul calls on live objects (each one launch)
 * @handles_live: cuBLASLt handles not yet destroyed
 * @objects_live: descriptors, layouts and preferences not yet destroyed
 *
 * The cuBLASLt stub's counters (cublaslt-stub.c).
 */
typedef struct
{
  int n_plans_made, n_heuristics, n_matmuls;
  int handles_live, objects_live;
} CudaStubLtStats;

void cuda_stub_lt_reset (void);
CudaStubLtStats cuda_stub_lt_stats (void);
void cuda_stub_lt_set_create_status (int st);
void cuda_stub_lt_refuse (gboolean all, gboolean gelu_epilogue);

G_END_DECLS

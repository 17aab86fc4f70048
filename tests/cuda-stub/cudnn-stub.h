/* lingbot-gst: a host stub of cuDNN's graph API, for CPU tests of the CUDA
 * module's cuDNN paths
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include <cuda_runtime_api.h>

G_BEGIN_DECLS

/**
 * CudnnStubControl:
 * @launch: called by each cudnnBackendExecute with the handle's stream
 *   (the test sets cuda_stub_launch(), so the execution is a named launch
 *   on the stream, captured like a kernel); %NULL: nothing is recorded
 * @refuse: the heuristics give no engine configuration for any graph
 * @fail_execute: cudnnBackendExecute answers CUDNN_STATUS_EXECUTION_FAILED
 * @workspace: the workspace bytes every execution plan reports
 * @n_created: backend descriptors created
 * @n_plans: execution plans finalized
 * @n_executes: executions that ran (@launch called)
 * @handles_live: cuDNN handles not yet destroyed
 * @descriptors_live: backend descriptors not yet destroyed
 *
 * The knobs and counters of the stub (tests/cuda-stub/cudnn-stub.c),
 * found in the loaded stub with g_module_symbol ("cudnn_stub_control").
 */
typedef struct
{
  cudaError_t (*launch) (const char *name, cudaStream_t stream);
  gboolean refuse, fail_execute;
  gint64 workspace;
  int n_created, n_plans, n_executes;
  int handles_live, descriptors_live;
} CudnnStubControl;

typedef CudnnStubControl *(*CudnnStubControlFunc) (void);

G_END_DECLS

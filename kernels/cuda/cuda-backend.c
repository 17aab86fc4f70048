/* lingbot-gst: the CUDA backend module (lingbot-backend-cuda.so)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Loaded at run time by lingbot/backend.c.  This is the only binary that
 * links cudart, cuBLAS(Lt), cuDNN and NCCL.  It calls nothing above
 * kernels/: what it offers besides the op table (the NCCL collectives of
 * comm/collectives-nccl.c, built into it; allocator and cuDNN hooks) the
 * layers above look up by name, lb_backend_get_proc().
 */
#include "kernels/cuda/cuda-internal.h"

#include <gmodule.h>

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

/* Peer access between the devices that have streams (ranks of worker
 * groups): device-to-device copies between them (the local collectives,
 * channels) then go over NVLink / PCIe P2P instead of through the host.
 * Enabled once per ordered pair, when the driver says it can; NCCL finds
 * its own P2P paths and does not need it.  Lazily, so that a process that
 * uses one GPU does not create contexts on the others. */
#define MAX_PEER_DEVICES 64
static GMutex peer_lock;
static gboolean peer_used[MAX_PEER_DEVICES];
static gboolean peer_done[MAX_PEER_DEVICES][MAX_PEER_DEVICES];

static void
enable_peer (int from, int to)
{
  int can = 0;
  if (peer_done[from][to])
    return;
  peer_done[from][to] = TRUE;
  if (cudaDeviceCanAccessPeer (&can, from, to) != cudaSuccess || !can ||
      cudaSetDevice (from) != cudaSuccess)
    return;
  cudaError_t e = cudaDeviceEnablePeerAccess (to, 0);
  if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled)
    g_debug ("cuda: no peer access %d -> %d: %s", from, to,
        cudaGetErrorString (e));
  cudaGetLastError ();          /* neither outcome is an error of ours */
}

static void
peer_access_add (int device)
{
  if (device < 0 || device >= MAX_PEER_DEVICES)
    return;
  g_mutex_lock (&peer_lock);
  if (!peer_used[device]) {
    peer_used[device] = TRUE;
    for (int d = 0; d < MAX_PEER_DEVICES; d++)
      if (d != device && peer_used[d]) {
        enable_peer (device, d);
        enable_peer (d, device);
      }
    cudaSetDevice (device);
  }
  g_mutex_unlock (&peer_lock);
}

static void capture_blocks_release (int device, GPtrArray * blocks);

static LbStream *
cuda_stream_new (LbBackend * self, int device, GError ** error)
{
  if (!lb_cuda_check (cudaSetDevice (device), "cudaSetDevice", error))
    return NULL;
  peer_access_add (device);
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
  int major = 0, minor = 0;
  cudaError_t rc = cudaDeviceGetAttribute (&major,
      cudaDevAttrComputeCapabilityMajor, device);
  if (rc == cudaSuccess)
    rc = cudaDeviceGetAttribute (&minor, cudaDevAttrComputeCapabilityMinor,
        device);
  if (!lb_cuda_check (rc, "cudaDeviceGetAttribute", error))
    goto fail;
  cs->cc = major * 10 + minor;
  lb_cuda_pool_register_stream (device, cs->stream);
  if (cublasLtCreate (&cs->lt) != CUBLAS_STATUS_SUCCESS) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "cublasLtCreate failed on device %d", device);
    goto fail;
  }
  /* from the pool: no cudaFree when the stream goes, which would
   * invalidate another thread's capture on the device */
  cs->workspace_size = LB_CUDA_GEMM_WORKSPACE;
  cs->workspace = lb_cuda_pool_alloc (device, cs->workspace_size, error);
  if (cs->workspace == NULL) {
    g_prefix_error (error, "GEMM workspace: ");
    goto fail;
  }
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
  if (cs->capturing) {
    cudaGraph_t g = NULL;
    if (lb_cuda_pool_capture_end (s->device, cs->stream, &g) == cudaSuccess
        && g)
      cudaGraphDestroy (g);
    cudaGetLastError ();
    cs->capturing = FALSE;
    g_ptr_array_free (cs->capture_free, TRUE);
    capture_blocks_release (s->device, cs->capture_blocks);
  }
  lb_cuda_scratch_arena_free (s);
  if (cs->stream) {
    cudaStreamSynchronize (cs->stream);
    lb_cuda_pool_unregister_stream (s->device, cs->stream);
  }
  lb_cuda_gemm_plans_free (cs);
  lb_cuda_cudnn_free (cs);
  lb_cuda_pool_free (s->device, cs->workspace);
  if (cs->lt)
    cublasLtDestroy (cs->lt);
  if (cs->stream)
    cudaStreamDestroy (cs->stream);
  g_free (cs);
  g_free (s);
}

/* LbBackend.stream_reserve: the scratch arena (cuda-alloc.c) and the
 * cuDNN workspace (cuda-cudnn.c), allocated now. */
static gboolean
cuda_stream_reserve (LbStream * s, gsize scratch_bytes, gsize workspace_bytes,
    GError ** error)
{
  cudaSetDevice (s->device);
  return lb_cuda_scratch_reserve (s, scratch_bytes, error) &&
      lb_cudnn_reserve_bytes (s, workspace_bytes, error);
}

static gboolean
cuda_stream_synchronize (LbStream * s, GError ** error)
{
  LbCudaStream *cs = s->priv;
  return lb_cuda_check (cudaStreamSynchronize (cs->stream),
      "cudaStreamSynchronize", error);
}

static gpointer
cuda_host_alloc (LbBackend * self, gsize nbytes, GError ** error)
{
  (void) self;
  void *p = NULL;
  if (!lb_cuda_check (cudaHostAlloc (&p, nbytes, cudaHostAllocPortable),
          "cudaHostAlloc", error)) {
    cudaGetLastError ();
    return NULL;
  }
  return p;
}

static void
cuda_host_free (LbBackend * self, gpointer ptr)
{
  (void) self;
  cudaFreeHost (ptr);
}

/* ---- graphs ---- */

struct _LbGraph
{
  int device;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  GPtrArray *blocks;            /* LbCudaScratchBlock *, owned */
};

static void
capture_blocks_release (int device, GPtrArray * blocks)
{
  if (blocks == NULL)
    return;
  for (guint i = 0; i < blocks->len; i++) {
    LbCudaScratchBlock *b = g_ptr_array_index (blocks, i);
    lb_cuda_pool_free (device, b->ptr);
    g_free (b);
  }
  g_ptr_array_free (blocks, TRUE);
}

/* Relaxed mode: the pool may still cudaMalloc a block the first time a
 * capture needs more scratch than earlier ones (not a stream operation, so
 * nothing of it is recorded), and other threads (a decoder group on the
 * same GPU) may allocate meanwhile.  The pool knows the capture
 * (lb_cuda_pool_capture_begin()): it fences nothing into it and neither
 * frees nor synchronises the device until it ends. */
static gboolean
cuda_graph_begin (LbStream * s, GError ** error)
{
  LbCudaStream *cs = s->priv;
  if (cs->capturing) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "graph capture: stream of device %d is already capturing", s->device);
    return FALSE;
  }
  if (!lb_cuda_check (cudaSetDevice (s->device), "cudaSetDevice", error) ||
      !lb_cuda_pool_capture_begin (s->device, cs->stream,
          cudaStreamCaptureModeRelaxed, error))
    return FALSE;
  cs->capturing = TRUE;
  cs->capture_blocks = g_ptr_array_new ();
  cs->capture_free = g_ptr_array_new ();
  return TRUE;
}

static LbGraph *
cuda_graph_end (LbStream * s, GError ** error)
{
  LbCudaStream *cs = s->priv;
  if (!cs->capturing) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "graph capture: stream of device %d is not capturing", s->device);
    return NULL;
  }
  cudaGraph_t graph = NULL;
  cudaSetDevice (s->device);
  cudaError_t e = lb_cuda_pool_capture_end (s->device, cs->stream, &graph);
  GPtrArray *blocks = cs->capture_blocks;
  cs->capturing = FALSE;
  cs->capture_blocks = NULL;
  g_ptr_array_free (cs->capture_free, TRUE);
  cs->capture_free = NULL;
  cudaGraphExec_t exec = NULL;
  if (e == cudaSuccess)
    e = cudaGraphInstantiate (&exec, graph, 0);
  if (!lb_cuda_check (e, "graph capture", error)) {
    cudaGetLastError ();
    if (graph)
      cudaGraphDestroy (graph);
    /* nothing was run: the scratch is idle */
    capture_blocks_release (s->device, blocks);
    return NULL;
  }
  LbGraph *g = g_new0 (LbGraph, 1);
  g->device = s->device;
  g->graph = graph;
  g->exec = exec;
  g->blocks = blocks;
  return g;
}

static gboolean
cuda_graph_launch (LbStream * s, LbGraph * graph, GError ** error)
{
  LbCudaStream *cs = s->priv;
  return lb_cuda_check (cudaGraphLaunch (graph->exec, cs->stream),
      "cudaGraphLaunch", error);
}

static void
cuda_graph_free (LbStream * s, LbGraph * graph)
{
  if (graph == NULL)
    return;
  LbCudaStream *cs = s->priv;
  cudaSetDevice (graph->device);
  cudaStreamSynchronize (cs->stream);
  cudaGraphExecDestroy (graph->exec);
  cudaGraphDestroy (graph->graph);
  capture_blocks_release (graph->device, graph->blocks);
  g_free (graph);
}

/* ---- events ---- */

struct _LbEvent
{
  cudaEvent_t event;
  int device;
};

static LbEvent *
cuda_event_new (LbBackend * self, int device, GError ** error)
{
  (void) self;
  LbEvent *e = g_new0 (LbEvent, 1);
  e->device = device;
  if (!lb_cuda_check (cudaSetDevice (device), "cudaSetDevice", error) ||
      !lb_cuda_check (cudaEventCreateWithFlags (&e->event,
              cudaEventDisableTiming), "cudaEventCreate", error)) {
    g_free (e);
    return NULL;
  }
  return e;
}

static void
cuda_event_free (LbBackend * self, LbEvent * event)
{
  (void) self;
  if (event == NULL)
    return;
  cudaSetDevice (event->device);
  cudaEventDestroy (event->event);
  g_free (event);
}

static gboolean
cuda_event_record (LbStream * s, LbEvent * event, GError ** error)
{
  LbCudaStream *cs = s->priv;
  return lb_cuda_check (cudaEventRecord (event->event, cs->stream),
      "cudaEventRecord", error);
}

static gboolean
cuda_stream_wait_event (LbStream * s, LbEvent * event, GError ** error)
{
  LbCudaStream *cs = s->priv;
  return lb_cuda_check (cudaStreamWaitEvent (cs->stream, event->event, 0),
      "cudaStreamWaitEvent", error);
}

/* ---- extras by name ---- */

/* this module, as GModule opened it (g_module_check_init()) */
static GModule *self_module;

G_MODULE_EXPORT const char *g_module_check_init (GModule * module);

/* GModule's load hook: keeps the module's handle for
 * cuda_get_proc_address(); NULL: the module always loads. */
const char *
g_module_check_init (GModule * module)
{
  self_module = module;
  return NULL;
}

/* Every G_MODULE_EXPORT function of the module is an extra (the list is at
 * LbBackend.get_proc_address). */
static gpointer
cuda_get_proc_address (LbBackend * self, const char *name)
{
  gpointer sym = NULL;
  if (self_module == NULL || !g_module_symbol (self_module, name, &sym))
    return NULL;
  return sym;
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
  .stream_reserve = cuda_stream_reserve,
  .attention_prepare = lb_cuda_attention_prepare,
  .stream_synchronize = cuda_stream_synchronize,
  .host_alloc = cuda_host_alloc,
  .host_free = cuda_host_free,
  .graph_begin = cuda_graph_begin,
  .graph_end = cuda_graph_end,
  .graph_launch = cuda_graph_launch,
  .graph_free = cuda_graph_free,
  .event_new = cuda_event_new,
  .event_free = cuda_event_free,
  .event_record = cuda_event_record,
  .stream_wait_event = cuda_stream_wait_event,
  .get_proc_address = cuda_get_proc_address,
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
 * with lb_backend_get_proc()).  Blocks in use are untouched.
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
 * The module's entry point (%LB_BACKEND_MODULE_INIT): probes devices.
 * The registry then registers the NCCL collectives ("lb_collectives_nccl")
 * for CUDA worker groups.
 *
 * Returns: (transfer none) (nullable): the CUDA backend.
 */
LbBackend *
lingbot_backend_module_init (GError ** error)
{
  int count = 0;
  cudaError_t err = cudaGetDeviceCount (&count);
  if (err != cudaSuccess) {
    /* cudaErrorInsufficientDriver is also what a machine without any
     * NVIDIA driver reports */
    const char *hint = err == cudaErrorInsufficientDriver ?
        "no NVIDIA driver, or one older than the CUDA runtime" :
        err == cudaErrorNoDevice ? "no device present" : "the driver failed";
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "no usable CUDA device: %s (cudaGetDeviceCount: %s)", hint,
        cudaGetErrorString (err));
    return NULL;
  }
  if (count == 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "no usable CUDA device: none visible");
    return NULL;
  }
  cuda_backend.device_count = count;
  return &cuda_backend;
}

/* lingbot-gst: a host stub of the CUDA runtime
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The cudart entry points the CUDA module's host code calls (every C file
 * of kernels/cuda: the caching allocator, the backend's streams, events
 * and graphs, the GEMM and cuDNN paths), implemented on the host so that
 * code runs in CPU tests, linked in place of libcudart.  Memory is host
 * memory.  A stream is a queue of work items: the kernel launchers'
 * recording stubs (gen-launch-stubs.py) and those of cuBLASLt and cuDNN
 * enqueue one per launch (cuda_stub_launch(), named, listed by
 * cuda_stub_take_log()); copies and memsets are done when enqueued; a test
 * enqueues anonymous work with cuda_stub_enqueue().  Work is done when the
 * test says so (cuda_stub_complete()) or at once
 * (cuda_stub_set_auto_complete()).  An
 * event recorded on a stream is complete once the work enqueued before it
 * is; cudaStreamSynchronize, cudaEventSynchronize and cudaDeviceSynchronize
 * complete the work they wait for.
 *
 * Stream capture follows CUDA's rules as far as this code needs them:
 * work and events recorded into a capturing stream go into its graph (a
 * query of such an event answers cudaErrorCapturedEvent); cudaMalloc is
 * refused while a capture in global mode is in progress on the device
 * (from any thread), or a thread-local one from its own thread;
 * cudaFree and cudaDeviceSynchronize are refused while any capture is in
 * progress on the device (they synchronise the device: a conservative
 * model of the relaxed mode, where CUDA forbids the implicit
 * synchronisation with the capturing stream), as is synchronising a
 * capturing stream.  A refused call answers
 * cudaErrorStreamCaptureUnsupported and invalidates the capture, whose
 * cudaStreamEndCapture then answers cudaErrorStreamCaptureInvalidated.
 * A graph keeps the captured work (named launches, copies, memsets);
 * cudaGraphInstantiate copies it (or answers the error
 * cuda_stub_set_instantiate_error() set) and cudaGraphLaunch enqueues it
 * again, in order.  Graphs and executable graphs are tracked: destroying
 * or launching one that is not live answers cudaErrorInvalidValue.  Not
 * A capture spans streams as in CUDA: a stream that waits on an event
 * recorded in it joins it, its work going into the same graph (in call
 * order: the replay runs every node on the launching stream), and must be
 * joined back (the beginning stream waits on an event recorded after its
 * last work) before cudaStreamEndCapture, which only the beginning stream
 * may call.  Not modelled: the order between streams (events and waits
 * order nothing here; tests/common/fakedev.c's checker proves that), a
 * join back through another joined stream, kernel arguments and results.
 * Like cudart, a failed call also sets the thread's last error.
 */
#include "cudart-stub.h"

#include <string.h>

#define STUB_DEVICES 64

struct CUstream_st
{
  int device;
  guint64 enqueued, done;
  gboolean capturing, invalidated, destroyed;
  enum cudaStreamCaptureMode mode;
  GThread *thread;
  guint64 captured_work;
  GPtrArray *nodes;             /* StubNode *, the capture's work */
  guint64 capture_id;           /* the capture this stream began */
  GPtrArray *joined;            /* cudaStream_t that joined that capture */
  cudaStream_t origin;          /* joined: the stream that began it */
  guint64 join_pos;             /* joined: captured_work when joined back */
};

struct CUevent_st
{
  cudaStream_t stream;          /* NULL: never recorded */
  guint64 pos;
  gboolean captured;
  guint64 capture_id, cap_pos;  /* captured: the capture, stream's work */
};

/* One work item of a graph: a kernel launch (by name) or a copy / memset
 * (done again at each replay). */
typedef struct
{
  char *name;
  void *dst;
  const void *src;              /* NULL: a memset of @value (or a kernel) */
  gsize n;
  int value;
  gboolean is_copy;
} StubNode;

struct CUgraph_st
{
  guint64 work;
  GPtrArray *nodes;             /* StubNode * */
};

struct CUgraphExec_st
{
  GPtrArray *nodes;             /* StubNode *, the graph's, copied */
};

static GMutex lock;
static GHashTable *allocs;      /* ptr -> size */
static GPtrArray *streams;      /* cudaStream_t, live */
static CudaStubStats stats;
static gboolean auto_complete;
static gsize memory_total = (gsize) 1 << 40;
static cudaError_t query_error;
static GPrivate current_device;
static GPrivate last_error;
static GPtrArray *launch_log;   /* char *: work run on streams, in order */
static GHashTable *live_graphs, *live_execs;
static cudaError_t instantiate_error, device_count_error;
static int fail_captures;
static guint64 n_capture_ids;
static int device_count = STUB_DEVICES;
static gboolean peer_enabled[STUB_DEVICES][STUB_DEVICES];

static cudaError_t
fail (cudaError_t e)
{
  g_private_set (&last_error, GINT_TO_POINTER ((int) e));
  return e;
}

static void
init_locked (void)
{
  if (allocs == NULL) {
    allocs = g_hash_table_new (g_direct_hash, g_direct_equal);
    streams = g_ptr_array_new ();
    launch_log = g_ptr_array_new_with_free_func (g_free);
    live_graphs = g_hash_table_new (g_direct_hash, g_direct_equal);
    live_execs = g_hash_table_new (g_direct_hash, g_direct_equal);
  }
}

static StubNode *
node_new (const char *name, void *dst, const void *src, gsize n, int value,
    gboolean is_copy)
{
  StubNode *node = g_new0 (StubNode, 1);
  node->name = g_strdup (name);
  node->dst = dst;
  node->src = src;
  node->n = n;
  node->value = value;
  node->is_copy = is_copy;
  return node;
}

static StubNode *
node_dup (const StubNode * node)
{
  return node_new (node->name, node->dst, node->src, node->n, node->value,
      node->is_copy);
}

static void
node_free (gpointer p)
{
  StubNode *node = p;
  g_free (node->name);
  g_free (node);
}

/* Lock held.  Runs @node on @stream now: one work item enqueued, its name
 * logged, a copy or memset done (host memory, in call order). */
static void
node_run_locked (cudaStream_t stream, const StubNode * node)
{
  stream->enqueued++;
  if (auto_complete)
    stream->done = stream->enqueued;
  g_ptr_array_add (launch_log, g_strdup (node->name));
  stats.n_launches++;
  if (node->is_copy && node->src)
    memmove (node->dst, node->src, node->n);
  else if (node->is_copy)
    memset (node->dst, node->value, node->n);
}

/* The stream whose capture @s takes part in (itself, or the one it
 * joined). */
static cudaStream_t
cap_of (cudaStream_t s)
{
  return s->origin ? s->origin : s;
}

/* Lock held.  @node (owned) on @stream: into its capture, or run now. */
static void
work_locked (cudaStream_t stream, StubNode * node)
{
  if (stream->capturing) {
    stream->captured_work++;
    stats.n_captured_launches++;
    g_ptr_array_add (cap_of (stream)->nodes, node);
  } else {
    node_run_locked (stream, node);
    node_free (node);
  }
}

static int
device_now (void)
{
  return GPOINTER_TO_INT (g_private_get (&current_device));
}

/* Lock held.  Whether a capture on @device refuses a call: @malloc_only,
 * cudaMalloc; otherwise a device synchronisation.  Refusing invalidates
 * the captures that forbid it. */
static gboolean
refused_locked (int device, gboolean malloc_only)
{
  GThread *self = g_thread_self ();
  gboolean refused = FALSE;
  for (guint i = 0; i < streams->len; i++) {
    cudaStream_t s = g_ptr_array_index (streams, i);
    if (!s->capturing || s->device != device)
      continue;
    if (!malloc_only || s->mode == cudaStreamCaptureModeGlobal ||
        (s->mode == cudaStreamCaptureModeThreadLocal && s->thread == self)) {
      cap_of (s)->invalidated = TRUE;
      refused = TRUE;
    }
  }
  if (refused)
    stats.n_refused++;
  return refused;
}

/**
 * cuda_stub_reset:
 *
 * Back to the start: no allocation is tracked any more (the test frees
 * its own), counters at 0, manual completion, 1 TiB of memory, real event
 * queries.  Streams stay.
 */
void
cuda_stub_reset (void)
{
  g_mutex_lock (&lock);
  init_locked ();
  g_hash_table_remove_all (allocs);
  g_ptr_array_set_size (launch_log, 0);
  memset (&stats, 0, sizeof stats);
  auto_complete = FALSE;
  memory_total = (gsize) 1 << 40;
  query_error = cudaSuccess;
  instantiate_error = cudaSuccess;
  fail_captures = 0;
  device_count_error = cudaSuccess;
  device_count = STUB_DEVICES;
  g_mutex_unlock (&lock);
}

/**
 * cuda_stub_stats:
 *
 * Returns: the counters so far (#CudaStubStats).
 */
CudaStubStats
cuda_stub_stats (void)
{
  g_mutex_lock (&lock);
  init_locked ();
  CudaStubStats st = stats;
  st.live = (int) g_hash_table_size (allocs);
  for (guint i = 0; i < streams->len; i++)
    st.streams_live += !((cudaStream_t) g_ptr_array_index (streams,
            i))->destroyed;
  st.graphs_live = (int) g_hash_table_size (live_graphs);
  st.execs_live = (int) g_hash_table_size (live_execs);
  g_mutex_unlock (&lock);
  return st;
}

/**
 * cuda_stub_set_auto_complete:
 * @on: %TRUE: work enqueued outside a capture is done at once
 */
void
cuda_stub_set_auto_complete (gboolean on)
{
  g_mutex_lock (&lock);
  auto_complete = on;
  g_mutex_unlock (&lock);
}

/**
 * cuda_stub_set_memory:
 * @total: bytes the device has: a cudaMalloc that would hold more answers
 *   cudaErrorMemoryAllocation
 */
void
cuda_stub_set_memory (gsize total)
{
  g_mutex_lock (&lock);
  memory_total = total;
  g_mutex_unlock (&lock);
}

/**
 * cuda_stub_set_query_error:
 * @err: what cudaEventQuery answers for a recorded event whose work is not
 *   done (cudaErrorNotReady when @err is cudaSuccess, the default); e.g.
 *   cudaErrorCapturedEvent, as CUDA answers for an event recorded into a
 *   capture
 */
void
cuda_stub_set_query_error (cudaError_t err)
{
  g_mutex_lock (&lock);
  query_error = err;
  g_mutex_unlock (&lock);
}

/**
 * cuda_stub_enqueue:
 * @stream: a stream
 *
 * Enqueues one work item (a kernel) on @stream, or records it into the
 * stream's capture.
 */
void
cuda_stub_enqueue (cudaStream_t stream)
{
  g_mutex_lock (&lock);
  init_locked ();
  work_locked (stream, node_new ("work", NULL, NULL, 0, 0, FALSE));
  g_mutex_unlock (&lock);
}

/**
 * cuda_stub_launch:
 * @name: the kernel (the launcher's name)
 * @stream: the stream it is launched on
 *
 * What the recording stubs of the kernel launchers (generated from
 * kernels/cuda/cuda-kernels.h) and of cuBLASLt / cuDNN executions call:
 * cuda_stub_enqueue() with a name, which cuda_stub_take_log() lists once
 * the launch runs (now, or at each replay of a graph it was captured
 * into).
 *
 * Returns: cudaSuccess; cudaErrorInvalidResourceHandle for a %NULL or
 *   destroyed stream (the module never launches on the legacy stream).
 */
cudaError_t
cuda_stub_launch (const char *name, cudaStream_t stream)
{
  g_mutex_lock (&lock);
  init_locked ();
  if (stream == NULL || stream->destroyed) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorInvalidResourceHandle);
  }
  work_locked (stream, node_new (name, NULL, NULL, 0, 0, FALSE));
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

/**
 * cuda_stub_take_log:
 *
 * Returns: (transfer full): the names of the work run on streams since
 *   the last call (or cuda_stub_reset()), in order: launches, copies
 *   ("cudaMemcpyAsync"), memsets ("cudaMemsetAsync"), each replayed graph
 *   node again; g_strfreev() it.
 */
char **
cuda_stub_take_log (void)
{
  g_mutex_lock (&lock);
  init_locked ();
  GStrvBuilder *b = g_strv_builder_new ();
  for (guint i = 0; i < launch_log->len; i++)
    g_strv_builder_add (b, g_ptr_array_index (launch_log, i));
  g_ptr_array_set_size (launch_log, 0);
  g_mutex_unlock (&lock);
  char **log = g_strv_builder_end (b);
  g_strv_builder_unref (b);
  return log;
}

/**
 * cuda_stub_set_instantiate_error:
 * @err: what cudaGraphInstantiate answers from now on (cudaSuccess: it
 *   instantiates)
 */
void
cuda_stub_set_instantiate_error (cudaError_t err)
{
  g_mutex_lock (&lock);
  instantiate_error = err;
  g_mutex_unlock (&lock);
}

/**
 * cuda_stub_fail_captures:
 * @n: how many of the next captures fail (-1: all): each is invalidated
 *   as it begins, as when another thread's call invalidates it, so its
 *   cudaStreamEndCapture answers cudaErrorStreamCaptureInvalidated
 */
void
cuda_stub_fail_captures (int n)
{
  g_mutex_lock (&lock);
  fail_captures = n;
  g_mutex_unlock (&lock);
}

/**
 * cuda_stub_set_devices:
 * @count: devices cudaGetDeviceCount reports
 * @err: what it answers (cudaSuccess: @count), e.g. cudaErrorNoDevice
 */
void
cuda_stub_set_devices (int count, cudaError_t err)
{
  g_mutex_lock (&lock);
  device_count = count;
  device_count_error = err;
  g_mutex_unlock (&lock);
}

/**
 * cuda_stub_complete:
 * @stream: a stream
 *
 * Completes all the work enqueued on @stream so far.
 */
void
cuda_stub_complete (cudaStream_t stream)
{
  g_mutex_lock (&lock);
  stream->done = stream->enqueued;
  g_mutex_unlock (&lock);
}

/**
 * cuda_stub_pending:
 * @stream: a stream
 *
 * Returns: whether work enqueued on @stream is not done yet.
 */
gboolean
cuda_stub_pending (cudaStream_t stream)
{
  g_mutex_lock (&lock);
  gboolean p = stream->done < stream->enqueued;
  g_mutex_unlock (&lock);
  return p;
}

/* ---- the runtime API ---- */

cudaError_t
cudaGetDevice (int *device)
{
  *device = device_now ();
  return cudaSuccess;
}

cudaError_t
cudaSetDevice (int device)
{
  if (device < 0 || device >= STUB_DEVICES)
    return fail (cudaErrorInvalidDevice);
  g_private_set (&current_device, GINT_TO_POINTER (device));
  return cudaSuccess;
}

cudaError_t
cudaGetDeviceCount (int *count)
{
  g_mutex_lock (&lock);
  cudaError_t e = device_count_error;
  *count = e == cudaSuccess ? device_count : 0;
  g_mutex_unlock (&lock);
  return e == cudaSuccess ? e : fail (e);
}

/* A device of compute capability 9.0 (an H100 / H200). */
cudaError_t
cudaDeviceGetAttribute (int *value, enum cudaDeviceAttr attr, int device)
{
  if (device < 0 || device >= STUB_DEVICES)
    return fail (cudaErrorInvalidDevice);
  *value = attr == cudaDevAttrComputeCapabilityMajor ? 9 : 0;
  return cudaSuccess;
}

cudaError_t
cudaDeviceCanAccessPeer (int *can, int device, int peer)
{
  *can = device != peer;
  return cudaSuccess;
}

/* From the current device to @peer; a second time answers
 * cudaErrorPeerAccessAlreadyEnabled, as CUDA does. */
cudaError_t
cudaDeviceEnablePeerAccess (int peer, unsigned int flags)
{
  (void) flags;
  const int device = device_now ();
  if (peer < 0 || peer >= STUB_DEVICES || peer == device)
    return fail (cudaErrorInvalidDevice);
  g_mutex_lock (&lock);
  gboolean again = peer_enabled[device][peer];
  peer_enabled[device][peer] = TRUE;
  g_mutex_unlock (&lock);
  return again ? fail (cudaErrorPeerAccessAlreadyEnabled) : cudaSuccess;
}

cudaError_t
cudaHostAlloc (void **ptr, size_t size, unsigned int flags)
{
  (void) flags;
  *ptr = g_malloc (MAX (size, 1));
  return cudaSuccess;
}

cudaError_t
cudaFreeHost (void *ptr)
{
  g_free (ptr);
  return cudaSuccess;
}

cudaError_t
cudaGetLastError (void)
{
  cudaError_t e = (cudaError_t) GPOINTER_TO_INT (g_private_get (&last_error));
  g_private_set (&last_error, GINT_TO_POINTER (0));
  return e;
}

const char *
cudaGetErrorName (cudaError_t e)
{
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorCapturedEvent:
      return "cudaErrorCapturedEvent";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorPeerAccessAlreadyEnabled:
      return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnjoined:
      return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureUnmatched:
      return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureIsolation:
      return "cudaErrorStreamCaptureIsolation";
    default:
      return "cudaErrorUnknown";
  }
}

const char *
cudaGetErrorString (cudaError_t e)
{
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    case cudaErrorCapturedEvent:
      return "operation not permitted on an event last recorded in a "
          "capturing stream";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNotSupported:
      return "operation not supported";
    case cudaErrorStreamCaptureUnjoined:
      return "capture has a fork that was not joined to the origin stream";
    case cudaErrorStreamCaptureUnmatched:
      return "capture was not begun on this stream";
    case cudaErrorStreamCaptureIsolation:
      return "dependency would cross the capture's boundary";
    default:
      return cudaGetErrorName (e);
  }
}

cudaError_t
cudaMalloc (void **ptr, size_t size)
{
  g_mutex_lock (&lock);
  init_locked ();
  if (refused_locked (device_now (), TRUE)) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorStreamCaptureUnsupported);
  }
  if (stats.live_bytes + size > memory_total) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorMemoryAllocation);
  }
  *ptr = g_malloc (MAX (size, 1));
  g_hash_table_insert (allocs, *ptr, GSIZE_TO_POINTER (size));
  stats.live_bytes += size;
  stats.n_malloc++;
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaFree (void *ptr)
{
  g_mutex_lock (&lock);
  init_locked ();
  if (refused_locked (device_now (), FALSE)) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorStreamCaptureUnsupported);
  }
  gpointer size;
  if (ptr != NULL && !g_hash_table_lookup_extended (allocs, ptr, NULL, &size)) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorInvalidValue);
  }
  if (ptr != NULL) {
    g_hash_table_remove (allocs, ptr);
    stats.live_bytes -= GPOINTER_TO_SIZE (size);
    stats.n_free++;
    g_free (ptr);
  }
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaMemGetInfo (size_t *free_bytes, size_t *total)
{
  g_mutex_lock (&lock);
  init_locked ();
  *total = memory_total;
  *free_bytes = memory_total - MIN (memory_total, stats.live_bytes);
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaDeviceSynchronize (void)
{
  g_mutex_lock (&lock);
  init_locked ();
  stats.n_device_syncs++;
  const int device = device_now ();
  if (refused_locked (device, FALSE)) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorStreamCaptureUnsupported);
  }
  for (guint i = 0; i < streams->len; i++) {
    cudaStream_t s = g_ptr_array_index (streams, i);
    if (s->device == device)
      s->done = s->enqueued;
  }
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaStreamCreateWithFlags (cudaStream_t * stream, unsigned int flags)
{
  (void) flags;
  cudaStream_t s = g_new0 (struct CUstream_st, 1);
  s->device = device_now ();
  g_mutex_lock (&lock);
  init_locked ();
  g_ptr_array_add (streams, s);
  g_mutex_unlock (&lock);
  *stream = s;
  return cudaSuccess;
}

cudaError_t
cudaStreamCreate (cudaStream_t * stream)
{
  return cudaStreamCreateWithFlags (stream, cudaStreamDefault);
}

static gboolean capture_release_locked (cudaStream_t origin);

/* The stream's record stays (in the list, as destroyed): events recorded
 * on it may still be queried. */
cudaError_t
cudaStreamDestroy (cudaStream_t stream)
{
  g_mutex_lock (&lock);
  stream->destroyed = TRUE;
  if (stream->capturing && stream->origin) {
    /* a joined stream destroyed: its capture cannot be joined back */
    stream->origin->invalidated = TRUE;
    g_ptr_array_remove (stream->origin->joined, stream);
    stream->origin = NULL;
  } else if (stream->capturing) {
    capture_release_locked (stream);
  }
  stream->capturing = FALSE;
  g_clear_pointer (&stream->nodes, g_ptr_array_unref);
  stream->done = stream->enqueued;
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaStreamSynchronize (cudaStream_t stream)
{
  g_mutex_lock (&lock);
  if (stream->capturing) {
    cap_of (stream)->invalidated = TRUE;
    stats.n_refused++;
    g_mutex_unlock (&lock);
    return fail (cudaErrorStreamCaptureUnsupported);
  }
  stream->done = stream->enqueued;
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaStreamBeginCapture (cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
  g_mutex_lock (&lock);
  if (stream->capturing) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorIllegalState);
  }
  stream->capturing = TRUE;
  stream->invalidated = fail_captures != 0;
  if (fail_captures > 0)
    fail_captures--;
  stats.n_captures++;
  stream->mode = mode;
  stream->thread = g_thread_self ();
  stream->captured_work = 0;
  stream->nodes = g_ptr_array_new_with_free_func (node_free);
  stream->capture_id = ++n_capture_ids;
  stream->joined = g_ptr_array_new ();
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

/* Lock held.  The streams that joined @origin's capture leave it;
 * whether each had been joined back (its last captured work before an
 * event @origin waited for). */
static gboolean
capture_release_locked (cudaStream_t origin)
{
  gboolean joined = TRUE;
  for (guint i = 0; origin->joined && i < origin->joined->len; i++) {
    cudaStream_t j = g_ptr_array_index (origin->joined, i);
    joined = joined && j->join_pos == j->captured_work;
    j->capturing = FALSE;
    j->origin = NULL;
  }
  g_clear_pointer (&origin->joined, g_ptr_array_unref);
  return joined;
}

/* Only on the stream that began the capture
 * (cudaErrorStreamCaptureUnmatched otherwise), which ends it for the
 * streams that joined it too; they must have been joined back
 * (cudaErrorStreamCaptureUnjoined). */
cudaError_t
cudaStreamEndCapture (cudaStream_t stream, cudaGraph_t * graph)
{
  g_mutex_lock (&lock);
  *graph = NULL;
  if (!stream->capturing) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorIllegalState);
  }
  if (stream->origin) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorStreamCaptureUnmatched);
  }
  const gboolean joined = capture_release_locked (stream);
  stream->capturing = FALSE;
  GPtrArray *nodes = g_steal_pointer (&stream->nodes);
  if (stream->invalidated || !joined) {
    g_ptr_array_unref (nodes);
    g_mutex_unlock (&lock);
    return fail (stream->invalidated ? cudaErrorStreamCaptureInvalidated :
        cudaErrorStreamCaptureUnjoined);
  }
  *graph = g_new0 (struct CUgraph_st, 1);
  (*graph)->work = stream->captured_work;
  (*graph)->nodes = nodes;
  g_hash_table_add (live_graphs, *graph);
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaStreamIsCapturing (cudaStream_t stream,
    enum cudaStreamCaptureStatus *status)
{
  g_mutex_lock (&lock);
  *status = !stream->capturing ? cudaStreamCaptureStatusNone :
      cap_of (stream)->invalidated ? cudaStreamCaptureStatusInvalidated :
      cudaStreamCaptureStatusActive;
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

/* A graph or executable graph not live (never made, or destroyed)
 * answers cudaErrorInvalidValue: a double destroy or a use after destroy
 * shows as an error instead of a crash. */
cudaError_t
cudaGraphDestroy (cudaGraph_t graph)
{
  g_mutex_lock (&lock);
  init_locked ();
  if (!g_hash_table_remove (live_graphs, graph)) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorInvalidValue);
  }
  g_mutex_unlock (&lock);
  g_ptr_array_unref (graph->nodes);
  g_free (graph);
  return cudaSuccess;
}

cudaError_t
cudaGraphInstantiate (cudaGraphExec_t * exec, cudaGraph_t graph,
    unsigned long long flags)
{
  (void) flags;
  g_mutex_lock (&lock);
  init_locked ();
  cudaError_t e = !g_hash_table_contains (live_graphs, graph) ?
      cudaErrorInvalidValue : instantiate_error;
  if (e != cudaSuccess) {
    g_mutex_unlock (&lock);
    return fail (e);
  }
  cudaGraphExec_t x = g_new0 (struct CUgraphExec_st, 1);
  x->nodes = g_ptr_array_new_with_free_func (node_free);
  for (guint i = 0; i < graph->nodes->len; i++)
    g_ptr_array_add (x->nodes, node_dup (g_ptr_array_index (graph->nodes, i)));
  g_hash_table_add (live_execs, x);
  stats.n_instantiated++;
  g_mutex_unlock (&lock);
  *exec = x;
  return cudaSuccess;
}

/* Each node of @exec once on @stream, in capture order (into @stream's
 * capture when it is capturing). */
cudaError_t
cudaGraphLaunch (cudaGraphExec_t exec, cudaStream_t stream)
{
  g_mutex_lock (&lock);
  init_locked ();
  if (!g_hash_table_contains (live_execs, exec) || stream == NULL ||
      stream->destroyed) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorInvalidValue);
  }
  for (guint i = 0; i < exec->nodes->len; i++)
    work_locked (stream, node_dup (g_ptr_array_index (exec->nodes, i)));
  stats.n_graph_launches++;
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaGraphExecDestroy (cudaGraphExec_t exec)
{
  g_mutex_lock (&lock);
  init_locked ();
  if (!g_hash_table_remove (live_execs, exec)) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorInvalidValue);
  }
  g_mutex_unlock (&lock);
  g_ptr_array_unref (exec->nodes);
  g_free (exec);
  return cudaSuccess;
}

/* The copy is done when it is enqueued (host memory, in call order) or, in
 * a capture, at each replay. */
cudaError_t
cudaMemcpyAsync (void *dst, const void *src, size_t count,
    enum cudaMemcpyKind kind, cudaStream_t stream)
{
  (void) kind;
  g_mutex_lock (&lock);
  init_locked ();
  work_locked (stream, node_new ("cudaMemcpyAsync", dst, src, count, 0, TRUE));
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaMemsetAsync (void *ptr, int value, size_t count, cudaStream_t stream)
{
  g_mutex_lock (&lock);
  init_locked ();
  work_locked (stream, node_new ("cudaMemsetAsync", ptr, NULL, count, value,
          TRUE));
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

/* Cross-stream order is not modelled (each stream completes on its own;
 * the fakedev checker is what proves the waits).  A wait on an event
 * recorded in a capture under way: a stream outside any capture joins it
 * (CUDA's fork: its work goes into that graph until the capture ends),
 * the stream that began it joins back the stream that recorded the event
 * (when that was its last work), a stream of another capture is refused
 * (cudaErrorStreamCaptureIsolation).  An event last recorded in a capture
 * that has ended orders nothing. */
cudaError_t
cudaStreamWaitEvent (cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
  (void) flags;
  cudaError_t e = cudaSuccess;
  g_mutex_lock (&lock);
  cudaStream_t origin = event->captured && event->stream->capturing ?
      cap_of (event->stream) : NULL;
  if (origin != NULL && origin->capture_id != event->capture_id)
    origin = NULL;
  if (origin == NULL) {
    /* nothing to capture */
  } else if (!stream->capturing) {
    stream->capturing = TRUE;
    stream->origin = origin;
    stream->mode = origin->mode;
    stream->thread = origin->thread;
    stream->captured_work = 0;
    stream->join_pos = G_MAXUINT64;
    g_ptr_array_add (origin->joined, stream);
    stats.n_capture_joins++;
  } else if (cap_of (stream) != origin) {
    e = cudaErrorStreamCaptureIsolation;
  } else if (stream == origin && event->stream != origin) {
    event->stream->join_pos = event->cap_pos;
  }
  g_mutex_unlock (&lock);
  return e == cudaSuccess ? e : fail (e);
}

cudaError_t
cudaEventCreateWithFlags (cudaEvent_t * event, unsigned int flags)
{
  (void) flags;
  *event = g_new0 (struct CUevent_st, 1);
  return cudaSuccess;
}

cudaError_t
cudaEventCreate (cudaEvent_t * event)
{
  return cudaEventCreateWithFlags (event, cudaEventDefault);
}

cudaError_t
cudaEventDestroy (cudaEvent_t event)
{
  g_free (event);
  return cudaSuccess;
}

cudaError_t
cudaEventRecord (cudaEvent_t event, cudaStream_t stream)
{
  g_mutex_lock (&lock);
  event->stream = stream;
  event->captured = stream->capturing;
  event->pos = stream->enqueued;
  event->capture_id = stream->capturing ? cap_of (stream)->capture_id : 0;
  event->cap_pos = stream->captured_work;
  if (stream->capturing)
    stats.n_captured_records++;
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaEventQuery (cudaEvent_t event)
{
  g_mutex_lock (&lock);
  cudaError_t e = cudaSuccess;
  if (event->captured)
    e = cudaErrorCapturedEvent;
  else if (event->stream && event->stream->done < event->pos)
    e = query_error != cudaSuccess ? query_error : cudaErrorNotReady;
  g_mutex_unlock (&lock);
  return e == cudaSuccess || e == cudaErrorNotReady ? e : fail (e);
}

cudaError_t
cudaEventSynchronize (cudaEvent_t event)
{
  g_mutex_lock (&lock);
  if (event->captured) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorCapturedEvent);
  }
  if (event->stream && event->stream->done < event->pos)
    event->stream->done = event->pos;
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

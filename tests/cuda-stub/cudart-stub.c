/* lingbot-gst: a host stub of the CUDA runtime
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The cudart entry points the CUDA module's host code calls (its caching
 * allocator, kernels/cuda/cuda-alloc.c, and cuda-check.c), implemented on
 * the host so that code runs in CPU tests, linked in place of libcudart.
 * Memory is host memory.  A stream is a queue of work items: the test
 * enqueues one for each kernel it pretends to launch
 * (cuda_stub_enqueue()), and the work is done when the test says so
 * (cuda_stub_complete()) or at once (cuda_stub_set_auto_complete()).  An
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
};

struct CUevent_st
{
  cudaStream_t stream;          /* NULL: never recorded */
  guint64 pos;
  gboolean captured;
};

struct CUgraph_st
{
  guint64 work;
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
      s->invalidated = TRUE;
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
  memset (&stats, 0, sizeof stats);
  auto_complete = FALSE;
  memory_total = (gsize) 1 << 40;
  query_error = cudaSuccess;
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
  if (stream->capturing) {
    stream->captured_work++;
  } else {
    stream->enqueued++;
    if (auto_complete)
      stream->done = stream->enqueued;
  }
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
  *count = STUB_DEVICES;
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

/* The stream's record stays (in the list, as destroyed): events recorded
 * on it may still be queried. */
cudaError_t
cudaStreamDestroy (cudaStream_t stream)
{
  g_mutex_lock (&lock);
  stream->destroyed = TRUE;
  stream->capturing = FALSE;
  stream->done = stream->enqueued;
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaStreamSynchronize (cudaStream_t stream)
{
  g_mutex_lock (&lock);
  if (stream->capturing) {
    stream->invalidated = TRUE;
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
  stream->invalidated = FALSE;
  stream->mode = mode;
  stream->thread = g_thread_self ();
  stream->captured_work = 0;
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaStreamEndCapture (cudaStream_t stream, cudaGraph_t * graph)
{
  g_mutex_lock (&lock);
  if (!stream->capturing) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorIllegalState);
  }
  stream->capturing = FALSE;
  *graph = NULL;
  if (stream->invalidated) {
    g_mutex_unlock (&lock);
    return fail (cudaErrorStreamCaptureInvalidated);
  }
  *graph = g_new0 (struct CUgraph_st, 1);
  (*graph)->work = stream->captured_work;
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaStreamIsCapturing (cudaStream_t stream,
    enum cudaStreamCaptureStatus *status)
{
  g_mutex_lock (&lock);
  *status = !stream->capturing ? cudaStreamCaptureStatusNone :
      stream->invalidated ? cudaStreamCaptureStatusInvalidated :
      cudaStreamCaptureStatusActive;
  g_mutex_unlock (&lock);
  return cudaSuccess;
}

cudaError_t
cudaGraphDestroy (cudaGraph_t graph)
{
  g_free (graph);
  return cudaSuccess;
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

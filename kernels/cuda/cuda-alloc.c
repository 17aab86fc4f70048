/* lingbot-gst: caching device allocator of the CUDA backend
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * One pool per device.  Requests are rounded up to a size class (512 B,
 * then 4 classes per power of two, so at most 25% slack) and freed blocks
 * go to their class's free list instead of cudaFree, so once a session's
 * buffers and per-op scratch have been seen once, nothing calls cudaMalloc
 * (or cudaFree, which synchronises the device) again.
 *
 * Stream safety.  LbBackend.free() has no stream, so the pool knows the
 * streams of its device (registered by stream_new).  With one stream on a
 * device (one rank per GPU, the normal case) all work is ordered on it and
 * a freed block may be reused at once: later work on the same stream runs
 * after the work that used it.  With several streams, a free records an
 * event on every stream of the device and the block is reused only when
 * they have all completed; meanwhile a request of that class allocates a
 * new block.  Op scratch knows its stream (lb_cuda_scratch()): a block
 * released by stream S skips S's own event when S asks for it again (its
 * later work is ordered after the release anyway), so a rank with a second
 * stream (communication overlap) still reuses its scratch at once instead
 * of allocating while the host runs ahead of the device.  Registering a
 * second stream synchronises the device once, so blocks freed without
 * events are idle by then.
 *
 * lb_cuda_pool_trim() gives every cached block back to the driver (after
 * its events); an allocation that fails trims its device and retries.
 *
 * Graph capture.  A stream is captured between lb_cuda_pool_capture_begin()
 * and lb_cuda_pool_capture_end() (cuda-backend.c's graph_begin and
 * graph_end), and the pool knows it: an event recorded into a capturing
 * stream would become a node of the graph (cudaEventQuery then answers
 * cudaErrorCapturedEvent, and every replay re-records the event, even
 * after the pool has recycled it as another block's fence).  So a block
 * freed while a stream S of its device is being captured gets its events
 * on the other streams at once and is held back from reuse until the
 * capture ends; then its fence on S is recorded (covering the work
 * enqueued on S before the capture) and it joins its free list.  While a
 * capture runs the pool calls neither cudaFree nor cudaDeviceSynchronize
 * on that device (a trim or a stream registration from another thread
 * waits for the capture to end), nor cudaMalloc during a capture in
 * global mode (or thread-local mode, from its thread); a thread that
 * would have to wait for its own capture gets an error instead, which
 * fails that capture cleanly (the caller then runs the work eagerly).
 * A fence whose query answers anything but cudaSuccess is not ready.
 * Another registered stream can be capturing without the pool having
 * begun it: one that joined a capture by waiting on an event recorded in
 * it (the DiT's communication stream under the Ulysses overlap).  Such a
 * stream (cudaStreamIsCapturing) gets no fence either: the block is held
 * back until a capture ends and the stream has left its capture, then
 * fenced on it.
 */
#include "kernels/cuda/cuda-internal.h"

#define MAX_DEVICES 64
#define N_CLASSES 256

typedef struct
{
  void *ptr;
  gsize size;                   /* rounded */
  int cls;
  GPtrArray *events;            /* cudaEvent_t pending, or NULL */
  cudaStream_t owner;           /* the stream that released it, or NULL */
  int owner_ev;                 /* index of owner's event in events, or -1 */
  guint64 serial;               /* which hand-out of the block (while live) */
  int held;                     /* captures it waits for (freed during them) */
} Block;

/* A fence owed to a stream that was capturing without the pool knowing
 * (it joined a capture), recorded once it has left it. */
typedef struct
{
  Block *block;
  cudaStream_t stream;
} Deferred;

/* A capture in progress on one stream of the pool's device. */
typedef struct
{
  cudaStream_t stream;
  enum cudaStreamCaptureMode mode;
  GThread *thread;              /* the thread that began it */
  GPtrArray *held;              /* Block *, freed during the capture */
} Capture;

typedef struct
{
  GMutex lock;
  gboolean init;
  GHashTable *live;             /* ptr -> Block */
  GQueue free_lists[N_CLASSES];
  GPtrArray *streams;           /* cudaStream_t */
  GPtrArray *event_pool;        /* cudaEvent_t, idle */
  gsize in_use, cached;
  guint64 serial;               /* hand-outs so far */
  GPtrArray *captures;          /* Capture *, in progress */
  GArray *deferred;             /* Deferred */
  GCond capture_done;           /* signalled when a capture ends */
  guint waiting;                /* threads waiting for a capture to end */
} Pool;

static Pool pools[MAX_DEVICES];
static GMutex pools_lock;

static Pool *
pool_get (int device)
{
  if (device < 0 || device >= MAX_DEVICES)
    return NULL;
  Pool *p = &pools[device];
  g_mutex_lock (&pools_lock);
  if (!p->init) {
    g_mutex_init (&p->lock);
    p->live = g_hash_table_new (g_direct_hash, g_direct_equal);
    for (int i = 0; i < N_CLASSES; i++)
      g_queue_init (&p->free_lists[i]);
    p->streams = g_ptr_array_new ();
    p->event_pool = g_ptr_array_new ();
    p->captures = g_ptr_array_new ();
    p->deferred = g_array_new (FALSE, FALSE, sizeof (Deferred));
    g_cond_init (&p->capture_done);
    p->init = TRUE;
  }
  g_mutex_unlock (&pools_lock);
  return p;
}

/* Size class of @n: index and rounded size. */
static int
size_class (gsize n, gsize * rounded)
{
  if (n <= 512) {
    *rounded = 512;
    return 0;
  }
  int o = 63 - __builtin_clzll ((unsigned long long) (n - 1));
  gsize base = (gsize) 1 << o, step = base >> 2;
  gsize q = (n - base + step - 1) / step;       /* 1..4 */
  *rounded = base + q * step;
  return 1 + (o - 9) * 4 + (int) (q - 1);
}

/* Current device switched to @device for the lifetime of a call. */
typedef struct
{
  int prev;
  gboolean changed;
} DevGuard;

static DevGuard
dev_enter (int device)
{
  DevGuard g = { 0, FALSE };
  if (cudaGetDevice (&g.prev) == cudaSuccess && g.prev != device)
    g.changed = cudaSetDevice (device) == cudaSuccess;
  return g;
}

static void
dev_leave (DevGuard g)
{
  if (g.changed)
    cudaSetDevice (g.prev);
}

/* Whether @b may be used by work on @stream (NULL: any stream). */
static gboolean
block_ready (Block * b, cudaStream_t stream)
{
  if (b->events == NULL)
    return TRUE;
  for (guint i = 0; i < b->events->len; i++) {
    if (stream != NULL && stream == b->owner && (int) i == b->owner_ev)
      continue;                 /* ordered on the stream that released it */
    cudaError_t e = cudaEventQuery (g_ptr_array_index (b->events, i));
    if (e == cudaSuccess)
      continue;
    /* cudaErrorNotReady, or an event captured into a graph
     * (cudaErrorCapturedEvent), or a failed device: not known to be done */
    if (e != cudaErrorNotReady)
      cudaGetLastError ();
    return FALSE;
  }
  return TRUE;
}

/* Lock held.  The capture in progress on @stream, or NULL. */
static Capture *
capture_of (Pool * p, cudaStream_t stream)
{
  for (guint i = 0; i < p->captures->len; i++) {
    Capture *c = g_ptr_array_index (p->captures, i);
    if (c->stream == stream)
      return c;
  }
  return NULL;
}

/* Whether @stream is being captured (begun there, or joined). */
static gboolean
stream_capturing (cudaStream_t stream)
{
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing (stream, &st) != cudaSuccess) {
    cudaGetLastError ();
    return FALSE;
  }
  return st != cudaStreamCaptureStatusNone;
}

/* Lock held.  The fences owed to streams that have left their capture
 * (or the pool) now: recorded, and their blocks released when nothing
 * else holds them. */
static void block_fence (Pool * p, Block * b, cudaStream_t si);

static void
deferred_settle (Pool * p)
{
  for (guint i = p->deferred->len; i-- > 0;) {
    Deferred d = g_array_index (p->deferred, Deferred, i);
    const gboolean registered = g_ptr_array_find (p->streams, d.stream, NULL);
    if (registered && stream_capturing (d.stream))
      continue;
    g_array_remove_index_fast (p->deferred, i);
    if (registered)
      block_fence (p, d.block, d.stream);
    if (--d.block->held == 0)
      g_queue_push_head (&p->free_lists[d.block->cls], d.block);
  }
}

/* Lock held.  Waits until no capture on the device forbids what the caller
 * is about to do: @malloc_only, a cudaMalloc (forbidden by a capture in
 * global mode, and by a thread-local one to its own thread); otherwise a
 * cudaFree or a device synchronisation (forbidden by any capture).
 * Returns %FALSE at once when a capture of the calling thread forbids it
 * (it would wait for itself). */
static gboolean
wait_captures (Pool * p, gboolean malloc_only)
{
  GThread *self = g_thread_self ();
  for (;;) {
    gboolean blocked = FALSE;
    for (guint i = 0; i < p->captures->len; i++) {
      const Capture *c = g_ptr_array_index (p->captures, i);
      gboolean forbids = !malloc_only ||
          c->mode == cudaStreamCaptureModeGlobal ||
          (c->mode == cudaStreamCaptureModeThreadLocal && c->thread == self);
      if (forbids && c->thread == self)
        return FALSE;
      blocked = blocked || forbids;
    }
    if (!blocked)
      return TRUE;
    p->waiting++;
    g_cond_wait (&p->capture_done, &p->lock);
    p->waiting--;
  }
}

/* An idle event of the pool, or a new one; NULL when none can be made. */
static cudaEvent_t
event_take (Pool * p)
{
  cudaEvent_t ev = NULL;
  if (p->event_pool->len > 0)
    return g_ptr_array_steal_index_fast (p->event_pool, p->event_pool->len - 1);
  if (cudaEventCreateWithFlags (&ev, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError ();
    return NULL;
  }
  return ev;
}

/* Lock held; @si is not being captured.  Adds to @b a fence on @si (an
 * event after the work enqueued on @si so far), or, when no event can be
 * recorded, waits for @si. */
static void
block_fence (Pool * p, Block * b, cudaStream_t si)
{
  cudaEvent_t ev = event_take (p);
  if (ev == NULL || cudaEventRecord (ev, si) != cudaSuccess) {
    cudaGetLastError ();
    if (ev)
      g_ptr_array_add (p->event_pool, ev);
    cudaStreamSynchronize (si); /* cannot fence: wait for the stream */
    return;
  }
  if (b->events == NULL)
    b->events = g_ptr_array_new ();
  if (si == b->owner)
    b->owner_ev = (int) b->events->len;
  g_ptr_array_add (b->events, ev);
}

static void
block_drop_events (Pool * p, Block * b, gboolean wait)
{
  if (b->events == NULL)
    return;
  for (guint i = 0; i < b->events->len; i++) {
    cudaEvent_t ev = g_ptr_array_index (b->events, i);
    if (wait)
      cudaEventSynchronize (ev);
    g_ptr_array_add (p->event_pool, ev);
  }
  g_ptr_array_free (b->events, TRUE);
  b->events = NULL;
  b->owner = NULL;
  b->owner_ev = -1;
}

/* Lock held. */
static gsize
trim_locked (Pool * p)
{
  gsize freed = 0;
  for (int c = 0; c < N_CLASSES; c++) {
    Block *b;
    while ((b = g_queue_pop_head (&p->free_lists[c])) != NULL) {
      block_drop_events (p, b, TRUE);
      cudaFree (b->ptr);
      freed += b->size;
      p->cached -= b->size;
      g_free (b);
    }
  }
  return freed;
}

static void *pool_alloc (int device, gsize nbytes, cudaStream_t stream,
    GError ** error);
static void pool_free (int device, void *ptr, cudaStream_t stream);

/**
 * lb_cuda_pool_alloc:
 * @device: CUDA ordinal
 * @nbytes: bytes (0 gets the smallest class)
 * @error: %LB_ERROR_DEVICE when the device is out of memory even after
 *   trimming the cache
 *
 * Returns: (nullable): device memory, 256-byte aligned, idle on every
 * stream of @device.
 */
void *
lb_cuda_pool_alloc (int device, gsize nbytes, GError ** error)
{
  return pool_alloc (device, nbytes, NULL, error);
}

/**
 * lb_cuda_pool_free:
 * @device: the device @ptr was allocated on
 * @ptr: (nullable): from lb_cuda_pool_alloc()
 *
 * Returns the block to the cache (see the file comment for when it is
 * reused).  A pointer the pool does not know is given to cudaFree (after
 * the graph captures in progress on @device, from another thread).
 */
void
lb_cuda_pool_free (int device, void *ptr)
{
  pool_free (device, ptr, NULL);
}

/* A block for work on @stream (NULL: for any stream). */
static void *
pool_alloc (int device, gsize nbytes, cudaStream_t stream, GError ** error)
{
  Pool *p = pool_get (device);
  if (p == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "cuda alloc: device %d out of range", device);
    return NULL;
  }
  gsize size;
  int cls = size_class (nbytes, &size);
  if (cls >= N_CLASSES) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "cuda alloc: %" G_GSIZE_FORMAT " bytes is too large", nbytes);
    return NULL;
  }
  DevGuard g = dev_enter (device);
  g_mutex_lock (&p->lock);
  Block *b = NULL;
  for (GList * l = p->free_lists[cls].head; l != NULL; l = l->next) {
    Block *cand = l->data;
    if (block_ready (cand, stream)) {
      g_queue_delete_link (&p->free_lists[cls], l);
      b = cand;
      block_drop_events (p, b, FALSE);
      p->cached -= b->size;
      break;
    }
  }
  if (b == NULL) {
    void *ptr = NULL;
    cudaError_t e = cudaErrorMemoryAllocation;
    const gboolean may = wait_captures (p, TRUE);
    if (may) {
      e = cudaMalloc (&ptr, size);
      if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError ();    /* clear the sticky-free error state */
        /* a trim calls cudaFree: not inside this thread's own capture */
        if (wait_captures (p, FALSE) && trim_locked (p) > 0)
          e = cudaMalloc (&ptr, size);
      }
    }
    if (!may) {
      /* a capture of this thread: a new block would invalidate it */
      g_mutex_unlock (&p->lock);
      dev_leave (g);
      g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
          "cuda alloc: device %d, %" G_GSIZE_FORMAT " bytes: no cached "
          "block, and a graph capture in progress on this thread forbids "
          "cudaMalloc", device, size);
      return NULL;
    }
    if (!lb_cuda_check (e, "cudaMalloc", error)) {
      cudaGetLastError ();
      g_mutex_unlock (&p->lock);
      dev_leave (g);
      g_prefix_error (error, "device %d, %" G_GSIZE_FORMAT " bytes: ",
          device, size);
      return NULL;
    }
    b = g_new0 (Block, 1);
    b->ptr = ptr;
    b->size = size;
    b->cls = cls;
    b->owner_ev = -1;
  }
  b->serial = ++p->serial;
  g_hash_table_insert (p->live, b->ptr, b);
  p->in_use += b->size;
  g_mutex_unlock (&p->lock);
  dev_leave (g);
  return b->ptr;
}

/* Caches @ptr; @stream: the stream whose work used it last, if known. */
static void
pool_free (int device, void *ptr, cudaStream_t stream)
{
  if (ptr == NULL)
    return;
  Pool *p = pool_get (device);
  DevGuard g = dev_enter (device);
  if (p == NULL) {
    cudaFree (ptr);
    dev_leave (g);
    return;
  }
  g_mutex_lock (&p->lock);
  Block *b = g_hash_table_lookup (p->live, ptr);
  if (b == NULL) {
    /* not the pool's: cudaFree, after any capture on the device (it
     * would invalidate it; the capturing thread's own frees it anyway) */
    wait_captures (p, FALSE);
    cudaFree (ptr);
    g_mutex_unlock (&p->lock);
    dev_leave (g);
    return;
  }
  g_hash_table_remove (p->live, ptr);
  p->in_use -= b->size;
  if (p->streams->len > 1) {
    b->owner = stream;
    b->owner_ev = -1;
    for (guint i = 0; i < p->streams->len; i++) {
      cudaStream_t si = g_ptr_array_index (p->streams, i);
      Capture *c = capture_of (p, si);
      if (c == NULL && stream_capturing (si)) {
        /* joined to a capture: fenced when it has left it */
        Deferred d = { b, si };
        g_array_append_val (p->deferred, d);
        b->held++;
      } else if (c == NULL) {
        block_fence (p, b, si);
      } else {
        /* fenced on si when the capture ends (file comment) */
        g_ptr_array_add (c->held, b);
        b->held++;
      }
    }
  }
  p->cached += b->size;
  if (b->held == 0)
    g_queue_push_head (&p->free_lists[b->cls], b);      /* LIFO: warm blocks first */
  g_mutex_unlock (&p->lock);
  dev_leave (g);
}

/**
 * lb_cuda_pool_find:
 * @device: CUDA ordinal
 * @ptr: device memory
 * @nbytes: bytes from @ptr that must lie in the same block
 * @base: (out): the live block holding them
 * @serial: (out): which hand-out of that block this is
 *
 * Finds the live pool allocation that holds [@ptr, @ptr + @nbytes): a
 * walk over the live blocks (for a cache keyed by a device pointer, once
 * per entry; lb_cuda_pool_same() then checks the allocation in O(1)).
 *
 * Returns: %FALSE when no live block holds the range (memory the pool did
 * not hand out, or freed).
 */
gboolean
lb_cuda_pool_find (int device, const void *ptr, gsize nbytes, void **base,
    guint64 * serial)
{
  Pool *p = pool_get (device);
  gboolean found = FALSE;
  if (p == NULL)
    return FALSE;
  g_mutex_lock (&p->lock);
  GHashTableIter it;
  gpointer k, v;
  g_hash_table_iter_init (&it, p->live);
  while (!found && g_hash_table_iter_next (&it, &k, &v)) {
    const Block *b = v;
    const guintptr lo = (guintptr) b->ptr, at = (guintptr) ptr;
    if (at >= lo && at - lo <= b->size && nbytes <= b->size - (at - lo)) {
      *base = b->ptr;
      *serial = b->serial;
      found = TRUE;
    }
  }
  g_mutex_unlock (&p->lock);
  return found;
}

/**
 * lb_cuda_pool_same:
 * @device: CUDA ordinal
 * @base: a block's address from lb_cuda_pool_find()
 * @serial: the serial lb_cuda_pool_find() gave with it
 *
 * Returns: %TRUE while that allocation is still live (not freed since,
 * whether or not the block was handed out again).
 */
gboolean
lb_cuda_pool_same (int device, void *base, guint64 serial)
{
  Pool *p = pool_get (device);
  if (p == NULL)
    return FALSE;
  g_mutex_lock (&p->lock);
  const Block *b = g_hash_table_lookup (p->live, base);
  gboolean same = b != NULL && b->serial == serial;
  g_mutex_unlock (&p->lock);
  return same;
}

/**
 * lb_cuda_pool_register_stream:
 *
 * Called by stream_new: frees on @device are fenced against @stream.
 */
void
lb_cuda_pool_register_stream (int device, cudaStream_t stream)
{
  Pool *p = pool_get (device);
  if (p == NULL)
    return;
  DevGuard g = dev_enter (device);
  g_mutex_lock (&p->lock);
  /* blocks freed without events are idle after it; not while the first
   * stream is being captured (a device synchronisation would invalidate
   * the capture): after it */
  if (p->streams->len == 1) {
    if (wait_captures (p, FALSE))
      cudaDeviceSynchronize ();
    else
      g_warning ("cuda alloc: stream registered on device %d by the thread "
          "capturing its other stream: cached blocks are not fenced", device);
  }
  g_ptr_array_add (p->streams, stream);
  g_mutex_unlock (&p->lock);
  dev_leave (g);
}

/**
 * lb_cuda_pool_unregister_stream:
 *
 * Called by stream_free after the stream is synchronised.
 */
void
lb_cuda_pool_unregister_stream (int device, cudaStream_t stream)
{
  Pool *p = pool_get (device);
  if (p == NULL)
    return;
  g_mutex_lock (&p->lock);
  g_ptr_array_remove (p->streams, stream);
  deferred_settle (p);          /* a stream leaving owes no fence */
  g_mutex_unlock (&p->lock);
}

/**
 * lb_cuda_pool_capture_begin:
 * @device: CUDA ordinal of @stream
 * @stream: a stream registered with lb_cuda_pool_register_stream()
 * @mode: the capture mode, given to cudaStreamBeginCapture()
 * @error: %LB_ERROR_DEVICE when cudaStreamBeginCapture() fails
 *
 * Starts capturing @stream into a graph, the pool knowing it (see the file
 * comment): until lb_cuda_pool_capture_end(), blocks freed on @device are
 * fenced on @stream only when the capture ends, and the pool makes no
 * call that would invalidate the capture.  The current device must be
 * @device.
 *
 * Returns: %TRUE when the capture started.
 */
gboolean
lb_cuda_pool_capture_begin (int device, cudaStream_t stream,
    enum cudaStreamCaptureMode mode, GError ** error)
{
  Pool *p = pool_get (device);
  if (p == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "graph capture: device %d out of range", device);
    return FALSE;
  }
  /* known to the pool first: a free from another thread between the two
   * then already holds its block back (and no pool call that would
   * invalidate the capture is under way: they run under the lock) */
  Capture *c = g_new0 (Capture, 1);
  c->stream = stream;
  c->mode = mode;
  c->thread = g_thread_self ();
  c->held = g_ptr_array_new ();
  g_mutex_lock (&p->lock);
  g_ptr_array_add (p->captures, c);
  g_mutex_unlock (&p->lock);
  cudaError_t e = cudaStreamBeginCapture (stream, mode);
  if (e != cudaSuccess) {
    cudaGetLastError ();
    lb_cuda_pool_capture_end (device, stream, NULL);
    return lb_cuda_check (e, "cudaStreamBeginCapture", error);
  }
  return TRUE;
}

/**
 * lb_cuda_pool_capture_end:
 * @device: CUDA ordinal of @stream
 * @stream: a stream lb_cuda_pool_capture_begin() started capturing
 * @graph: (out) (optional): the captured graph (cudaStreamEndCapture());
 *   %NULL: the capture failed to start, only the pool's record ends
 *
 * Ends the capture on @stream: the blocks freed during it get their fence
 * on @stream (after the work enqueued on it before the capture) and go
 * back to their free lists; threads waiting for the capture to end go on.
 * The current device must be @device.
 *
 * Returns: what cudaStreamEndCapture() returned (cudaSuccess without
 * @graph), e.g. cudaErrorStreamCaptureInvalidated for a capture that an
 * illegal call invalidated.
 */
cudaError_t
lb_cuda_pool_capture_end (int device, cudaStream_t stream, cudaGraph_t * graph)
{
  cudaError_t e = cudaSuccess;
  if (graph)
    e = cudaStreamEndCapture (stream, graph);
  Pool *p = pool_get (device);
  if (p == NULL)
    return e;
  g_mutex_lock (&p->lock);
  Capture *c = capture_of (p, stream);
  if (c != NULL) {
    g_ptr_array_remove (p->captures, c);
    for (guint i = 0; i < c->held->len; i++) {
      Block *b = g_ptr_array_index (c->held, i);
      if (g_ptr_array_find (p->streams, stream, NULL))
        block_fence (p, b, stream);
      if (--b->held == 0)
        g_queue_push_head (&p->free_lists[b->cls], b);
    }
    g_ptr_array_free (c->held, TRUE);
    g_free (c);
    g_cond_broadcast (&p->capture_done);
  }
  deferred_settle (p);
  g_mutex_unlock (&p->lock);
  return e;
}

/**
 * lb_cuda_pool_waiting:
 * @device: CUDA ordinal
 *
 * Returns: the threads waiting in the pool of @device for a graph capture
 * to end (for tests).
 */
guint
lb_cuda_pool_waiting (int device)
{
  Pool *p = pool_get (device);
  if (p == NULL)
    return 0;
  g_mutex_lock (&p->lock);
  guint n = p->waiting;
  g_mutex_unlock (&p->lock);
  return n;
}

/**
 * lb_cuda_pool_trim:
 * @device: CUDA ordinal
 *
 * Gives every cached (free) block of @device back to the driver, waiting
 * for pending work on them first.  Waits for graph captures in progress
 * on @device to end (cudaFree would invalidate them); releases nothing
 * when called by a thread that is capturing a stream of @device.
 *
 * Returns: the bytes released.
 */
gsize
lb_cuda_pool_trim (int device)
{
  Pool *p = pool_get (device);
  if (p == NULL)
    return 0;
  DevGuard g = dev_enter (device);
  g_mutex_lock (&p->lock);
  /* cudaFree invalidates a capture: after any in progress, none from the
   * thread that captures */
  gsize freed = wait_captures (p, FALSE) ? trim_locked (p) : 0;
  g_mutex_unlock (&p->lock);
  dev_leave (g);
  return freed;
}

/**
 * lb_cuda_pool_stats:
 * @device: CUDA ordinal
 * @in_use: (out) (optional): bytes handed out (rounded sizes)
 * @cached: (out) (optional): bytes held in free lists (and blocks held
 *   back until a graph capture ends)
 */
void
lb_cuda_pool_stats (int device, gsize * in_use, gsize * cached)
{
  Pool *p = pool_get (device);
  g_mutex_lock (p ? &p->lock : &pools_lock);
  if (in_use)
    *in_use = p ? p->in_use : 0;
  if (cached)
    *cached = p ? p->cached : 0;
  g_mutex_unlock (p ? &p->lock : &pools_lock);
}

/**
 * lb_cuda_scratch:
 * @s: the stream the scratch is used on
 * @nbytes: bytes
 * @error: %LB_ERROR_DEVICE
 *
 * Per-call scratch from the pool; give it back with
 * lb_cuda_scratch_release() once the kernels that use it are enqueued.
 * While @s is being captured into a graph the block comes from the
 * capture's own list (a block released earlier in the same capture, whose
 * use is ordered before this one inside the graph) or, failing that, from
 * the pool, and it stays with the graph until the graph is freed.
 *
 * Returns: (nullable): device memory.
 */
void *
lb_cuda_scratch (LbStream * s, gsize nbytes, GError ** error)
{
  LbCudaStream *cs = s->priv;
  if (!cs->capturing) {
    /* from the reserved arena when it fits (256-byte aligned pieces) */
    const gsize piece = (nbytes + 255) & ~(gsize) 255;
    if (cs->arena && piece <= cs->arena_size - cs->arena_top) {
      void *p = cs->arena + cs->arena_top;
      cs->arena_top += piece;
      cs->arena_live++;
      return p;
    }
    return pool_alloc (s->device, nbytes, cs->stream, error);
  }
  for (guint i = 0; i < cs->capture_free->len; i++) {
    LbCudaScratchBlock *b = g_ptr_array_index (cs->capture_free, i);
    if (b->size >= nbytes) {
      g_ptr_array_remove_index_fast (cs->capture_free, i);
      return b->ptr;
    }
  }
  void *ptr = lb_cuda_pool_alloc (s->device, nbytes, error);
  if (ptr == NULL)
    return NULL;
  LbCudaScratchBlock *b = g_new (LbCudaScratchBlock, 1);
  b->ptr = ptr;
  b->size = nbytes;
  g_ptr_array_add (cs->capture_blocks, b);
  return ptr;
}

/**
 * lb_cuda_scratch_release:
 * @s: the stream given to lb_cuda_scratch()
 * @ptr: (nullable): the scratch
 *
 * Returns scratch to the pool, or, while @s is being captured, to the
 * capture's list.
 */
void
lb_cuda_scratch_release (LbStream * s, void *ptr)
{
  LbCudaStream *cs = s->priv;
  if (ptr == NULL)
    return;
  if (cs->arena && (guint8 *) ptr >= cs->arena &&
      (guint8 *) ptr < cs->arena + cs->arena_size) {
    /* the arena is reused from its start once nothing taken is held:
     * later work on the stream is ordered after the work that used it */
    if (--cs->arena_live == 0)
      cs->arena_top = 0;
    return;
  }
  if (cs->capturing) {
    for (guint i = 0; i < cs->capture_blocks->len; i++) {
      LbCudaScratchBlock *b = g_ptr_array_index (cs->capture_blocks, i);
      if (b->ptr == ptr) {
        g_ptr_array_add (cs->capture_free, b);
        return;
      }
    }
  }
  pool_free (s->device, ptr, cs->stream);
}

/**
 * lb_cuda_scratch_reserve:
 * @s: a CUDA stream, not being captured
 * @nbytes: bytes of scratch to hold for @s's ops
 * @error: %LB_ERROR_DEVICE
 *
 * The scratch side of LbBackend.stream_reserve: a pool block of @nbytes
 * kept by the stream (its arena) from which lb_cuda_scratch() serves,
 * outside captures, the requests that fit into what the op call has not
 * taken yet (an op holding several pieces at once takes them one after
 * another; the arena is reused from its start when every piece has been
 * released).  Requests that do not fit, and those of a capture (kept by
 * the graph), go to the pool as before.  Growing replaces the arena with
 * a larger one once no piece is held (the old block goes back to the
 * pool, reused after the work enqueued on @s); a smaller @nbytes keeps
 * the arena.  Freed with the stream (lb_cuda_scratch_arena_free()).
 *
 * Returns: %TRUE on success (the arena is unchanged on failure).
 */
gboolean
lb_cuda_scratch_reserve (LbStream * s, gsize nbytes, GError ** error)
{
  LbCudaStream *cs = s->priv;
  if (nbytes <= cs->arena_size)
    return TRUE;
  if (cs->capturing || cs->arena_live > 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE, "stream_reserve: the "
        "scratch of device %d's stream is in use (%s)", s->device,
        cs->capturing ? "a graph capture" : "an op call");
    return FALSE;
  }
  guint8 *a = pool_alloc (s->device, nbytes, cs->stream, error);
  if (a == NULL)
    return FALSE;
  lb_cuda_scratch_arena_free (s);
  cs->arena = a;
  cs->arena_size = nbytes;
  cs->arena_top = 0;
  return TRUE;
}

/**
 * lb_cuda_scratch_arena_free:
 * @s: a CUDA stream
 *
 * Gives @s's reserved scratch (lb_cuda_scratch_reserve()) back to the
 * pool, after the work enqueued on @s.
 */
void
lb_cuda_scratch_arena_free (LbStream * s)
{
  LbCudaStream *cs = s->priv;
  if (cs->arena)
    pool_free (s->device, cs->arena, cs->stream);
  cs->arena = NULL;
  cs->arena_size = cs->arena_top = 0;
  cs->arena_live = 0;
}

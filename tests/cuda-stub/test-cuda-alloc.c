/* lingbot-gst: the CUDA caching allocator and graph capture, on the host
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * kernels/cuda/cuda-alloc.c built against the host stub of the CUDA
 * runtime (cudart-stub.c), which models streams, events and CUDA's rules
 * for stream capture.  The case the tests stand for: the DiT captures its
 * passes into graphs on stream A while a decoder group on the same GPU
 * (stream B, another thread) allocates and frees from the same pool.
 * Each test uses its own device, so its own pool.
 */
#include "cudart-stub.h"
#include "kernels/cuda/cuda-internal.h"

#define MiB ((gsize) 1 << 20)

/* Two registered streams on @device, A and B (NULL: only A). */
static void
streams_new (int device, cudaStream_t * a, cudaStream_t * b)
{
  g_assert_cmpint (cudaSetDevice (device), ==, cudaSuccess);
  g_assert_cmpint (cudaStreamCreateWithFlags (a, cudaStreamNonBlocking), ==,
      cudaSuccess);
  lb_cuda_pool_register_stream (device, *a);
  if (b) {
    g_assert_cmpint (cudaStreamCreateWithFlags (b, cudaStreamNonBlocking),
        ==, cudaSuccess);
    lb_cuda_pool_register_stream (device, *b);
  }
}

static void *
alloc_ok (int device, gsize n)
{
  g_autoptr (GError) err = NULL;
  void *p = lb_cuda_pool_alloc (device, n, &err);
  g_assert_no_error (err);
  g_assert_nonnull (p);
  return p;
}

static void
end_ok (int device, cudaStream_t s)
{
  cudaGraph_t graph = NULL;
  g_assert_cmpint (lb_cuda_pool_capture_end (device, s, &graph), ==,
      cudaSuccess);
  g_assert_nonnull (graph);
  cudaGraphDestroy (graph);
}

/* A block freed (by the decoder) while the DiT's stream A is being
 * captured: no fence is recorded into the capture, and the block is not
 * handed out again until the work A had enqueued before the capture, which
 * used it, is done (also after the capture ended). */
static void
test_free_during_capture (void)
{
  const int dev = 1;
  cudaStream_t a, b;
  cuda_stub_reset ();
  streams_new (dev, &a, &b);
  void *x = alloc_ok (dev, MiB);
  cuda_stub_enqueue (a);        /* a kernel on A that uses x */
  g_assert_true (lb_cuda_pool_capture_begin (dev, a,
          cudaStreamCaptureModeRelaxed, NULL));
  lb_cuda_pool_free (dev, x);
  g_assert_cmpint (cuda_stub_stats ().n_captured_records, ==, 0);
  void *y = alloc_ok (dev, MiB);
  g_assert_true (y != x);
  end_ok (dev, a);
  void *z = alloc_ok (dev, MiB);
  g_assert_true (z != x);       /* A's kernel still runs */
  cuda_stub_complete (a);
  void *w = alloc_ok (dev, MiB);
  g_assert_true (w == x);
  g_assert_cmpint (cuda_stub_stats ().n_refused, ==, 0);
  lb_cuda_pool_free (dev, y);
  lb_cuda_pool_free (dev, z);
  lb_cuda_pool_free (dev, w);
}

/* A stream that joined stream A's capture (the Ulysses communication
 * stream B waits on an event recorded in the DiT's capture) is capturing
 * too: a block freed meanwhile records no fence into it (it would be a
 * node of the graph), is not handed out again while B's earlier work may
 * still use it, and gets its fence on B once B has left the capture. */
static void
test_free_during_joined_capture (void)
{
  const int dev = 20;
  cudaStream_t a, b;
  cudaEvent_t fork, join;
  cuda_stub_reset ();
  streams_new (dev, &a, &b);
  g_assert_cmpint (cudaEventCreate (&fork), ==, cudaSuccess);
  g_assert_cmpint (cudaEventCreate (&join), ==, cudaSuccess);
  void *x = alloc_ok (dev, MiB);
  cuda_stub_enqueue (b);        /* a kernel on B that uses x */
  g_assert_true (lb_cuda_pool_capture_begin (dev, a,
          cudaStreamCaptureModeRelaxed, NULL));
  g_assert_cmpint (cudaEventRecord (fork, a), ==, cudaSuccess);
  g_assert_cmpint (cudaStreamWaitEvent (b, fork, 0), ==, cudaSuccess);
  g_assert_cmpint (cuda_stub_stats ().n_capture_joins, ==, 1);
  lb_cuda_pool_free (dev, x);
  g_assert_cmpint (cuda_stub_stats ().n_captured_records, ==, 1);
  void *y = alloc_ok (dev, MiB);
  g_assert_true (y != x);
  g_assert_cmpint (cudaEventRecord (join, b), ==, cudaSuccess);
  g_assert_cmpint (cudaStreamWaitEvent (a, join, 0), ==, cudaSuccess);
  end_ok (dev, a);
  g_assert_cmpint (cuda_stub_stats ().n_captured_records, ==, 2);
  void *z = alloc_ok (dev, MiB);
  g_assert_true (z != x);       /* B's kernel still runs */
  cuda_stub_complete (b);
  cuda_stub_complete (a);
  void *w = alloc_ok (dev, MiB);
  g_assert_true (w == x);
  g_assert_cmpint (cuda_stub_stats ().n_refused, ==, 0);
  lb_cuda_pool_free (dev, y);
  lb_cuda_pool_free (dev, z);
  lb_cuda_pool_free (dev, w);
  cudaEventDestroy (fork);
  cudaEventDestroy (join);
}

/* A fence whose query answers cudaErrorCapturedEvent (an event that was
 * recorded into a capture) is not ready. */
static void
test_captured_event_not_ready (void)
{
  const int dev = 2;
  cudaStream_t a, b;
  cuda_stub_reset ();
  streams_new (dev, &a, &b);
  void *x = alloc_ok (dev, MiB);
  cuda_stub_enqueue (b);
  lb_cuda_pool_free (dev, x);
  cuda_stub_set_query_error (cudaErrorCapturedEvent);
  void *y = alloc_ok (dev, MiB);
  g_assert_true (y != x);
  cuda_stub_set_query_error (cudaSuccess);
  cuda_stub_complete (b);
  void *z = alloc_ok (dev, MiB);
  g_assert_true (z == x);
  lb_cuda_pool_free (dev, y);
  lb_cuda_pool_free (dev, z);
}

/* In a global-mode capture the capturing thread's allocation of a size
 * the cache lacks fails with a clear error instead of calling cudaMalloc,
 * and a trim frees nothing: the capture survives. */
static void
test_global_capture_no_malloc (void)
{
  const int dev = 3;
  cudaStream_t a;
  cuda_stub_reset ();
  streams_new (dev, &a, NULL);
  lb_cuda_pool_free (dev, alloc_ok (dev, MiB)); /* one cached block */
  const CudaStubStats st0 = cuda_stub_stats ();
  g_assert_true (lb_cuda_pool_capture_begin (dev, a,
          cudaStreamCaptureModeGlobal, NULL));
  g_autoptr (GError) err = NULL;
  g_assert_null (lb_cuda_pool_alloc (dev, 2 * MiB, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "cuda alloc: device 3, 2097152 bytes: "
      "no cached block, and a graph capture in progress on this thread "
      "forbids cudaMalloc");
  g_assert_cmpuint (lb_cuda_pool_trim (dev), ==, 0);
  void *x = alloc_ok (dev, MiB);        /* the cached one: no cudaMalloc */
  const CudaStubStats st1 = cuda_stub_stats ();
  g_assert_cmpint (st1.n_malloc, ==, st0.n_malloc);
  g_assert_cmpint (st1.n_free, ==, st0.n_free);
  g_assert_cmpint (st1.n_refused, ==, 0);
  end_ok (dev, a);
  lb_cuda_pool_free (dev, x);
  void *y = alloc_ok (dev, 2 * MiB);
  g_assert_cmpint (cuda_stub_stats ().n_malloc, ==, st0.n_malloc + 1);
  lb_cuda_pool_free (dev, y);
}

typedef struct
{
  int dev;
  gboolean trim;
  void *foreign;                /* to free instead, not the pool's */
  gsize result;                 /* bytes trimmed, or 1 for an allocation */
  gint done;
} Other;

static gpointer
other_thread (gpointer data)
{
  Other *o = data;
  g_assert_cmpint (cudaSetDevice (o->dev), ==, cudaSuccess);
  if (o->foreign) {
    lb_cuda_pool_free (o->dev, o->foreign);
    o->result = 1;
  } else if (o->trim) {
    o->result = lb_cuda_pool_trim (o->dev);
  } else {
    void *p = alloc_ok (o->dev, 3 * MiB);
    lb_cuda_pool_free (o->dev, p);
    o->result = 1;
  }
  g_atomic_int_set (&o->done, 1);
  return NULL;
}

/* Until @o's thread is done or waits in the pool (10 s hang guard);
 * returns whether it waits. */
static gboolean
other_waits (Other * o)
{
  const gint64 end = g_get_monotonic_time () + 10 * G_TIME_SPAN_SECOND;
  while (!g_atomic_int_get (&o->done) && lb_cuda_pool_waiting (o->dev) == 0) {
    g_assert_cmpint (g_get_monotonic_time (), <, end);
    g_usleep (1000);
  }
  return !g_atomic_int_get (&o->done);
}

/* Another thread (the decoder) that needs cudaMalloc during a global-mode
 * capture, or a trim or the free of memory the pool does not know
 * (cudaFree) during a relaxed one, waits for the capture to end, then goes
 * on; the capture survives. */
static void
test_other_thread_waits (void)
{
  const int dev = 4;
  cudaStream_t a, b;
  cuda_stub_reset ();
  cuda_stub_set_auto_complete (TRUE);
  streams_new (dev, &a, &b);
  lb_cuda_pool_free (dev, alloc_ok (dev, MiB));
  const CudaStubStats st0 = cuda_stub_stats ();

  g_assert_true (lb_cuda_pool_capture_begin (dev, a,
          cudaStreamCaptureModeGlobal, NULL));
  Other o = { dev, FALSE, NULL, 0, 0 };
  GThread *t = g_thread_new ("decoder", other_thread, &o);
  g_assert_true (other_waits (&o));
  g_assert_cmpint (cuda_stub_stats ().n_malloc, ==, st0.n_malloc);
  end_ok (dev, a);
  g_thread_join (t);
  g_assert_cmpuint (o.result, ==, 1);
  g_assert_cmpint (cuda_stub_stats ().n_malloc, ==, st0.n_malloc + 1);

  g_assert_true (lb_cuda_pool_capture_begin (dev, a,
          cudaStreamCaptureModeRelaxed, NULL));
  Other tr = { dev, TRUE, NULL, 0, 0 };
  t = g_thread_new ("trim", other_thread, &tr);
  g_assert_true (other_waits (&tr));
  g_assert_cmpint (cuda_stub_stats ().n_free, ==, st0.n_free);
  end_ok (dev, a);
  g_thread_join (t);
  g_assert_cmpuint (tr.result, ==, MiB + 3 * MiB);
  g_assert_cmpint (cuda_stub_stats ().n_free, ==, st0.n_free + 2);

  /* memory the pool does not know (a stream's own, say) goes to cudaFree:
   * also after the capture */
  void *foreign = NULL;
  g_assert_cmpint (cudaMalloc (&foreign, 4096), ==, cudaSuccess);
  g_assert_true (lb_cuda_pool_capture_begin (dev, a,
          cudaStreamCaptureModeRelaxed, NULL));
  Other fr = { dev, FALSE, foreign, 0, 0 };
  t = g_thread_new ("free", other_thread, &fr);
  g_assert_true (other_waits (&fr));
  g_assert_cmpint (cuda_stub_stats ().n_free, ==, st0.n_free + 2);
  end_ok (dev, a);
  g_thread_join (t);
  const CudaStubStats st = cuda_stub_stats ();
  g_assert_cmpint (st.n_free, ==, st0.n_free + 3);
  g_assert_cmpint (st.n_refused, ==, 0);
}

/* Out of memory in the capturing thread during a relaxed capture: no trim
 * (cudaFree would invalidate the capture), the cudaMalloc error; after the
 * capture the same allocation trims the cache and succeeds. */
static void
test_capture_oom_no_trim (void)
{
  const int dev = 5;
  cudaStream_t a;
  cuda_stub_reset ();
  streams_new (dev, &a, NULL);
  lb_cuda_pool_free (dev, alloc_ok (dev, MiB));
  cuda_stub_set_memory (2 * MiB);
  const CudaStubStats st0 = cuda_stub_stats ();
  g_assert_true (lb_cuda_pool_capture_begin (dev, a,
          cudaStreamCaptureModeRelaxed, NULL));
  g_autoptr (GError) err = NULL;
  g_assert_null (lb_cuda_pool_alloc (dev, 2 * MiB, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "device 5, 2097152 bytes: cudaMalloc: "
      "out of memory (cudaErrorMemoryAllocation)");
  g_assert_cmpint (cuda_stub_stats ().n_free, ==, st0.n_free);
  end_ok (dev, a);
  void *x = alloc_ok (dev, 2 * MiB);
  const CudaStubStats st = cuda_stub_stats ();
  g_assert_cmpint (st.n_free, ==, st0.n_free + 1);
  g_assert_cmpint (st.n_refused, ==, 0);
  lb_cuda_pool_free (dev, x);
  cuda_stub_set_memory ((gsize) 1 << 40);
}

/* What the pool did before captures still holds: one stream reuses a
 * freed block at once; with two, a free waits for both streams' work,
 * except for scratch asked again by the stream that released it; the
 * statistics and a trim give everything cached back. */
static void
test_reuse_and_trim (void)
{
  const int dev = 6;
  cudaStream_t a, b;
  cuda_stub_reset ();
  g_assert_cmpint (cudaSetDevice (dev), ==, cudaSuccess);
  g_assert_cmpint (cudaStreamCreateWithFlags (&a, cudaStreamNonBlocking), ==,
      cudaSuccess);
  lb_cuda_pool_register_stream (dev, a);
  void *x = alloc_ok (dev, 1000);
  cuda_stub_enqueue (a);
  lb_cuda_pool_free (dev, x);
  g_assert_true (alloc_ok (dev, 1000) == x);    /* stream-ordered */
  void *big = alloc_ok (dev, 5 * MiB);
  gsize in_use, cached;
  lb_cuda_pool_stats (dev, &in_use, &cached);
  g_assert_cmpuint (in_use, ==, 1024 + 5 * MiB);
  g_assert_cmpuint (cached, ==, 0);

  /* a second stream: registering waits for the device once */
  g_assert_cmpint (cudaStreamCreateWithFlags (&b, cudaStreamNonBlocking), ==,
      cudaSuccess);
  lb_cuda_pool_register_stream (dev, b);
  g_assert_false (cuda_stub_pending (a));
  cuda_stub_enqueue (b);
  lb_cuda_pool_free (dev, x);
  void *y = alloc_ok (dev, 1000);
  g_assert_true (y != x);
  cuda_stub_complete (b);
  g_assert_true (alloc_ok (dev, 1000) == x);

  /* scratch released by A is A's again at once, not anyone else's */
  LbCudaStream cs = {.stream = a,.device = dev };
  LbStream s = {.device = dev,.priv = &cs };
  void *sc = lb_cuda_scratch (&s, 64 * 1024, NULL);
  g_assert_nonnull (sc);
  cuda_stub_enqueue (a);
  lb_cuda_scratch_release (&s, sc);
  void *other = alloc_ok (dev, 64 * 1024);
  g_assert_true (other != sc);
  g_assert_true (lb_cuda_scratch (&s, 64 * 1024, NULL) == sc);
  lb_cuda_scratch_release (&s, sc);
  lb_cuda_pool_free (dev, other);

  lb_cuda_pool_free (dev, x);
  lb_cuda_pool_free (dev, y);
  lb_cuda_pool_free (dev, big);
  lb_cuda_pool_stats (dev, &in_use, &cached);
  g_assert_cmpuint (in_use, ==, 0);
  const gsize all = 2 * 1024 + 5 * MiB + 2 * 64 * 1024;
  g_assert_cmpuint (cached, ==, all);
  const int live0 = cuda_stub_stats ().live;
  g_assert_cmpuint (lb_cuda_pool_trim (dev), ==, all);
  g_assert_cmpint (cuda_stub_stats ().live, ==, live0 - 5);
  lb_cuda_pool_stats (dev, &in_use, &cached);
  g_assert_cmpuint (cached, ==, 0);
  g_assert_false (cuda_stub_pending (a));       /* the trim waited */
}

/* The scratch a stream reserves (LbBackend.stream_reserve, issue 3.2
 * item 4): one cudaMalloc at the reserve, then the op calls' scratch
 * (several pieces held at once, reused once all are released) without
 * any; a request beyond the arena goes to the pool; a smaller reserve
 * keeps it, a reserve while a piece is held is refused; the arena goes
 * back to the pool's cache, not to cudaFree. */
static void
test_scratch_reserve (void)
{
  const int dev = 7;
  cudaStream_t a;
  cuda_stub_reset ();
  cuda_stub_set_auto_complete (TRUE);
  streams_new (dev, &a, NULL);
  LbCudaStream cs = {.stream = a,.device = dev };
  LbStream s = {.device = dev,.priv = &cs };
  g_autoptr (GError) err = NULL;
  const CudaStubStats st0 = cuda_stub_stats ();
  g_assert_true (lb_cuda_scratch_reserve (&s, MiB, &err));
  g_assert_no_error (err);
  g_assert_cmpint (cuda_stub_stats ().n_malloc, ==, st0.n_malloc + 1);
  for (int call = 0; call < 3; call++) {
    /* one op call holding three pieces, 256-byte aligned, disjoint */
    guint8 *p1 = lb_cuda_scratch (&s, 100 * 1000, &err);
    guint8 *p2 = lb_cuda_scratch (&s, 300 * 1000, &err);
    guint8 *p3 = lb_cuda_scratch (&s, 1, &err);
    g_assert_no_error (err);
    g_assert_true (p1 == cs.arena);
    g_assert_true (p2 == p1 + 391 * 256);       /* 100000 rounded up */
    g_assert_true (p3 == p2 + 1172 * 256);      /* 300000 rounded up */
    lb_cuda_scratch_release (&s, p2);
    lb_cuda_scratch_release (&s, p1);
    lb_cuda_scratch_release (&s, p3);
  }
  /* the whole arena, after the release */
  void *whole = lb_cuda_scratch (&s, MiB, &err);
  g_assert_true (whole == cs.arena);
  g_assert_cmpint (cuda_stub_stats ().n_malloc, ==, st0.n_malloc + 1);
  /* no room left: the pool */
  void *more = lb_cuda_scratch (&s, 1024, &err);
  g_assert_no_error (err);
  g_assert_nonnull (more);
  g_assert_cmpint (cuda_stub_stats ().n_malloc, ==, st0.n_malloc + 2);
  g_assert_false (lb_cuda_scratch_reserve (&s, 2 * MiB, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "stream_reserve: the scratch of device "
      "7's stream is in use (an op call)");
  g_clear_error (&err);
  lb_cuda_scratch_release (&s, more);
  lb_cuda_scratch_release (&s, whole);
  /* smaller: kept; larger: replaced (the old block cached) */
  g_assert_true (lb_cuda_scratch_reserve (&s, 4096, &err));
  g_assert_cmpuint (cs.arena_size, ==, MiB);
  g_assert_true (lb_cuda_scratch_reserve (&s, 2 * MiB, &err));
  g_assert_no_error (err);
  g_assert_cmpuint (cs.arena_size, ==, 2 * MiB);
  g_assert_cmpint (cuda_stub_stats ().n_malloc, ==, st0.n_malloc + 3);
  lb_cuda_scratch_arena_free (&s);
  g_assert_null (cs.arena);
  gsize in_use = 0, cached = 0;
  lb_cuda_pool_stats (dev, &in_use, &cached);
  g_assert_cmpuint (in_use, ==, 0);
  g_assert_cmpuint (cached, ==, 3 * MiB + 1024);
  g_assert_cmpint (cuda_stub_stats ().n_free, ==, st0.n_free);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cuda-alloc/capture/free-held", test_free_during_capture);
  g_test_add_func ("/cuda-alloc/captured-event-not-ready",
      test_captured_event_not_ready);
  g_test_add_func ("/cuda-alloc/capture/global-no-malloc",
      test_global_capture_no_malloc);
  g_test_add_func ("/cuda-alloc/capture/other-thread-waits",
      test_other_thread_waits);
  g_test_add_func ("/cuda-alloc/capture/oom-no-trim", test_capture_oom_no_trim);
  g_test_add_func ("/cuda-alloc/capture/free-during-joined",
      test_free_during_joined_capture);
  g_test_add_func ("/cuda-alloc/reuse-and-trim", test_reuse_and_trim);
  g_test_add_func ("/cuda-alloc/scratch-reserve", test_scratch_reserve);
  return g_test_run ();
}

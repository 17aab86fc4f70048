/* lingbot-gst: the emulated device's asynchronous mode and capture modes
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * fakedev_set_async() (FAKEDEV_ASYNC=1) gives each stream a worker thread
 * that runs its queued work later, after seeded random delays, so a
 * missing event wait shows as wrong bytes, not only as the ordering
 * checker's refusal.  These tests run with the checker off (so the wrong
 * program runs) and make each wrong ordering certain with
 * fakedev_hold_stream(): the producer's worker is held until the host
 * lets it go.  The capture tests check CUDA's capture-mode rules
 * (FakeDevCaptureMode) with its exact error text, on both kinds of
 * stream.
 */
#include "fakedev.h"
#include "kernels/error.h"
#include "lingbot/text-encoder.h"

#include <string.h>
#include <glib/gstdio.h>

#define N 1024
#define NB ((gsize) N * sizeof (float))

typedef struct
{
  LbBackend *be;
  LbStream *a, *b;
  LbTensor *x, *y;              /* [N] f32 on device 0 */
  LbTensor *host;               /* [N] f32: i */
  LbTensor *out;                /* [N] f32, downloads */
} Fx;

static const int64_t n_elems = N;

/* streams made with the mode of @seed: 0 at once, else asynchronous */
static void
fx_init (Fx * fx, guint32 seed)
{
  GError *err = NULL;
  fx->be = fakedev_backend ();
  fakedev_set_async (seed != 0, seed, 200);
  fx->a = fx->be->stream_new (fx->be, 0, &err);
  g_assert_no_error (err);
  fx->b = fx->be->stream_new (fx->be, 0, &err);
  g_assert_no_error (err);
  fakedev_set_async (FALSE, 0, 0);
  fx->x = lb_tensor_new_on (fx->a, LB_DTYPE_F32, 1, &n_elems, &err);
  g_assert_no_error (err);
  fx->y = lb_tensor_new_on (fx->a, LB_DTYPE_F32, 1, &n_elems, &err);
  g_assert_no_error (err);
  fx->host = lb_tensor_new (LB_DTYPE_F32, 1, &n_elems);
  fx->out = lb_tensor_new (LB_DTYPE_F32, 1, &n_elems);
  for (int i = 0; i < N; i++)
    ((float *) fx->host->data)[i] = (float) i;
  /* x = y = i, complete on both streams */
  g_assert_true (lb_tensor_upload (fx->a, fx->x, fx->host, &err));
  g_assert_true (lb_tensor_upload (fx->a, fx->y, fx->host, &err));
  g_assert_true (fx->be->stream_synchronize (fx->a, &err));
  g_assert_no_error (err);
}

static void
fx_clear (Fx * fx)
{
  fakedev_skip_waits (-1, 0);
  lb_tensor_free (fx->x);
  lb_tensor_free (fx->y);
  fx->be->stream_free (fx->a);
  fx->be->stream_free (fx->b);
  lb_tensor_free (fx->host);
  lb_tensor_free (fx->out);
}

/* fx->out holds @mul * i + @add for every i */
static void
assert_out (Fx * fx, float mul, float add, guint32 seed)
{
  const float *o = fx->out->data;
  for (int i = 0; i < N; i++)
    if (o[i] != mul * (float) i + add)
      g_error ("seed %u: out[%d] = %g, expected %g", seed, i, o[i],
          mul * (float) i + add);
}

/* The producer/consumer hand-off: a writes x = 3i + 1, records; b waits,
 * then y = 2x.  With the wait, y = 6i + 2 whatever the delays. */
static void
handoff (Fx * fx, gboolean skip_wait)
{
  GError *err = NULL;
  LbEvent *ev = fx->be->event_new (fx->be, 0, &err);
  g_assert_no_error (err);
  g_assert_true (lb_ops (fx->a)->scale (fx->a, fx->x, 3.0f, 1.0f, fx->x, &err));
  g_assert_true (fx->be->event_record (fx->a, ev, &err));
  if (skip_wait)
    fakedev_skip_waits (0, 1);
  g_assert_true (fx->be->stream_wait_event (fx->b, ev, &err));
  g_assert_true (lb_ops (fx->b)->scale (fx->b, fx->x, 2.0f, 0.0f, fx->y, &err));
  g_assert_no_error (err);
  fx->be->event_free (fx->be, ev);      /* still queued: kept alive */
}

/* (1) the hand-off with its wait gives the right bytes over many seeds */
static void
test_handoff_seeds (void)
{
  const FakeDevStats st0 = fakedev_stats ();
  for (guint32 seed = 1; seed <= 40; seed++) {
    Fx fx;
    GError *err = NULL;
    fx_init (&fx, seed);
    handoff (&fx, FALSE);
    g_assert_true (lb_tensor_download (fx.b, fx.out, fx.y, &err));
    g_assert_no_error (err);
    assert_out (&fx, 6.0f, 2.0f, seed);
    fx_clear (&fx);
  }
  const FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.bad, ==, st0.bad);
  /* 40 x (2 uploads, scale, record, wait, scale, download, 4 frees) */
  g_assert_cmpint (st.n_async_jobs - st0.n_async_jobs, >=, 40 * 11);
}

/* (1) with the producer held until everything is queued: the consumer's
 * worker reaches the wait first and must block there */
static void
test_handoff_held (void)
{
  Fx fx;
  GError *err = NULL;
  fx_init (&fx, 7);
  fakedev_hold_stream (fx.a, TRUE);
  handoff (&fx, FALSE);
  fakedev_hold_stream (fx.a, FALSE);
  g_assert_true (lb_tensor_download (fx.b, fx.out, fx.y, &err));
  g_assert_no_error (err);
  assert_out (&fx, 6.0f, 2.0f, 7);
  fx_clear (&fx);
}

/* (2) the wait left out, the checker off: b runs before a (held) and
 * reads the old x, for every seed; at once (seed 0) the bytes are right,
 * which is why the asynchronous mode exists */
static void
test_handoff_no_wait (void)
{
  const guint32 seeds[] = { 0, 1, 2, 3, 11, 12345 };
  const int waits0 = fakedev_stats ().n_waits;
  for (guint k = 0; k < G_N_ELEMENTS (seeds); k++) {
    Fx fx;
    GError *err = NULL;
    fx_init (&fx, seeds[k]);
    fakedev_hold_stream (fx.a, TRUE);
    handoff (&fx, TRUE);
    g_assert_true (lb_tensor_download (fx.b, fx.out, fx.y, &err));
    g_assert_no_error (err);
    fakedev_hold_stream (fx.a, FALSE);
    g_assert_true (fx.be->stream_synchronize (fx.a, &err));
    g_assert_no_error (err);
    if (seeds[k] == 0)
      assert_out (&fx, 6.0f, 2.0f, seeds[k]);
    else
      assert_out (&fx, 2.0f, 0.0f, seeds[k]);   /* 2 * the old x */
    /* a's write did land, after b read */
    g_assert_true (lb_tensor_download (fx.a, fx.out, fx.x, &err));
    assert_out (&fx, 3.0f, 1.0f, seeds[k]);
    fx_clear (&fx);
  }
  g_assert_cmpint (fakedev_stats ().n_waits - waits0, ==, 6);
}

/* An op's tensor descriptors are taken by value when it is enqueued: the
 * caller may change or free its descriptor before the op runs. */
static void
test_descriptor_by_value (void)
{
  Fx fx;
  GError *err = NULL;
  fx_init (&fx, 5);
  fakedev_hold_stream (fx.a, TRUE);
  LbTensor in = *fx.x, res = *fx.y;
  in.storage = res.storage = NULL;
  g_assert_true (lb_ops (fx.a)->scale (fx.a, &in, 5.0f, 0.0f, &res, &err));
  /* the same structs reused for a half-size call the other way round */
  in.shape[0] = res.shape[0] = N / 2;
  LbTensor tmp = in;
  in = res;
  res = tmp;
  g_assert_true (lb_ops (fx.a)->scale (fx.a, &in, 1.0f, 1.0f, &res, &err));
  memset (&in, 0, sizeof (in));
  memset (&res, 0, sizeof (res));
  fakedev_hold_stream (fx.a, FALSE);
  g_assert_true (lb_tensor_download (fx.a, fx.out, fx.y, &err));
  g_assert_no_error (err);
  assert_out (&fx, 5.0f, 0.0f, 5);      /* y = 5i */
  g_assert_true (lb_tensor_download (fx.a, fx.out, fx.x, &err));
  const float *o = fx.out->data;
  for (int i = 0; i < N; i++)   /* x[i] = 5i + 1 in the first half */
    g_assert_cmpfloat (o[i], ==, i < N / 2 ? 5.0f * i + 1.0f : (float) i);
  fx_clear (&fx);
}

/* A download is asynchronous (LbBackend.copy): the host's buffer holds the
 * bytes after the synchronisation, not before; a free while work that
 * uses the block is queued releases it after that work. */
static void
test_download_and_free (void)
{
  Fx fx;
  GError *err = NULL;
  fx_init (&fx, 9);
  memset (fx.out->data, 0, NB);
  fakedev_hold_stream (fx.a, TRUE);
  g_assert_true (fx.be->copy (fx.a, fx.out->data, fx.x->data, NB,
          LB_COPY_DEVICE_TO_HOST, &err));
  const float *o = fx.out->data;
  g_assert_cmpfloat (o[N - 1], ==, 0.0f);       /* not run: held */
  LbTensor *z = lb_tensor_new_on (fx.a, LB_DTYPE_F32, 1, &n_elems, &err);
  g_assert_no_error (err);
  g_assert_true (lb_ops (fx.a)->scale (fx.a, fx.x, 1.0f, 0.0f, z, &err));
  const int live = fakedev_stats ().live_blocks;
  lb_tensor_free (z);           /* leaves the device now, released later */
  g_assert_cmpint (fakedev_stats ().live_blocks, ==, live - 1);
  fakedev_hold_stream (fx.a, FALSE);
  g_assert_true (fx.be->stream_synchronize (fx.a, &err));
  g_assert_no_error (err);
  assert_out (&fx, 1.0f, 0.0f, 9);
  fx_clear (&fx);
}

/* A graph replay enqueues the recorded calls: two launches queued behind
 * a held worker run in order. */
static void
test_replay (void)
{
  Fx fx;
  GError *err = NULL;
  fx_init (&fx, 3);
  g_assert_true (fx.be->graph_begin (fx.a, &err));
  g_assert_true (lb_ops (fx.a)->scale (fx.a, fx.x, 2.0f, 1.0f, fx.x, &err));
  LbGraph *g = fx.be->graph_end (fx.a, &err);
  g_assert_no_error (err);
  fakedev_hold_stream (fx.a, TRUE);
  g_assert_true (fx.be->graph_launch (fx.a, g, &err));
  g_assert_true (fx.be->graph_launch (fx.a, g, &err));
  fakedev_hold_stream (fx.a, FALSE);
  g_assert_true (lb_tensor_download (fx.a, fx.out, fx.x, &err));
  g_assert_no_error (err);
  assert_out (&fx, 4.0f, 3.0f, 3);      /* 2 (2i + 1) + 1 */
  fx.be->graph_free (fx.a, g);
  fx_clear (&fx);
}

/* The fork/join of the Ulysses overlap: a scales x, records; b waits,
 * y = 2x, records; a waits and x += y.  From x = y = i: x = 9i + 3,
 * y = 6i + 2. */
static void
fork_join (Fx * fx, LbEvent * e1, LbEvent * e2)
{
  GError *err = NULL;
  g_assert_true (lb_ops (fx->a)->scale (fx->a, fx->x, 3.0f, 1.0f, fx->x, &err));
  g_assert_true (fx->be->event_record (fx->a, e1, &err));
  g_assert_true (fx->be->stream_wait_event (fx->b, e1, &err));
  g_assert_true (lb_ops (fx->b)->scale (fx->b, fx->x, 2.0f, 0.0f, fx->y, &err));
  g_assert_true (fx->be->event_record (fx->b, e2, &err));
  g_assert_true (fx->be->stream_wait_event (fx->a, e2, &err));
  g_assert_true (lb_ops (fx->a)->add (fx->a, fx->x, fx->y, fx->x, &err));
  g_assert_no_error (err);
}

/* x = y = i again, complete */
static void
fx_reset (Fx * fx)
{
  GError *err = NULL;
  g_assert_true (lb_tensor_upload (fx->a, fx->x, fx->host, &err));
  g_assert_true (lb_tensor_upload (fx->a, fx->y, fx->host, &err));
  g_assert_true (fx->be->stream_synchronize (fx->a, &err));
  g_assert_no_error (err);
}

/* A graph captured across two streams (b joins a's capture by waiting on
 * an event a recorded in it, and is joined back by a's wait on b's
 * event), as CUDA captures the Ulysses communication stream: the capture
 * runs nothing, b's work is part of the graph, and each replay on a gives
 * the eager program's bytes, at once and under random delays, twice in a
 * row (the second from the first's results). */
static void
test_capture_two_streams (void)
{
  const guint32 seeds[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 };
  const FakeDevStats st0 = fakedev_stats ();
  for (guint k = 0; k < G_N_ELEMENTS (seeds); k++) {
    Fx fx;
    GError *err = NULL;
    fx_init (&fx, seeds[k]);
    LbEvent *e1 = fx.be->event_new (fx.be, 0, &err);
    LbEvent *e2 = fx.be->event_new (fx.be, 0, &err);
    fork_join (&fx, e1, e2);    /* eager */
    g_assert_true (lb_tensor_download (fx.a, fx.out, fx.x, &err));
    assert_out (&fx, 9.0f, 3.0f, seeds[k]);
    g_assert_true (lb_tensor_download (fx.a, fx.out, fx.y, &err));
    assert_out (&fx, 6.0f, 2.0f, seeds[k]);

    fx_reset (&fx);
    g_assert_true (fx.be->graph_begin (fx.a, &err));
    fork_join (&fx, e1, e2);
    LbGraph *g = fx.be->graph_end (fx.a, &err);
    g_assert_no_error (err);
    g_assert_nonnull (g);
    /* b left the capture with it: it synchronises again */
    g_assert_true (fx.be->stream_synchronize (fx.b, &err));
    g_assert_no_error (err);
    g_assert_true (lb_tensor_download (fx.a, fx.out, fx.x, &err));
    assert_out (&fx, 1.0f, 0.0f, seeds[k]);     /* nothing ran */
    g_assert_true (lb_tensor_download (fx.a, fx.out, fx.y, &err));
    assert_out (&fx, 1.0f, 0.0f, seeds[k]);

    g_assert_true (fx.be->graph_launch (fx.a, g, &err));
    g_assert_true (lb_tensor_download (fx.a, fx.out, fx.x, &err));
    assert_out (&fx, 9.0f, 3.0f, seeds[k]);
    g_assert_true (lb_tensor_download (fx.a, fx.out, fx.y, &err));
    assert_out (&fx, 6.0f, 2.0f, seeds[k]);
    g_assert_true (fx.be->graph_launch (fx.a, g, &err));
    g_assert_true (fx.be->graph_launch (fx.a, g, &err));
    g_assert_true (lb_tensor_download (fx.a, fx.out, fx.x, &err));
    /* x -> 9x + 3 twice more: 81 (9i + 3) + 30 */
    assert_out (&fx, 729.0f, 273.0f, seeds[k]);
    g_assert_no_error (err);
    fx.be->graph_free (fx.a, g);
    fx.be->event_free (fx.be, e1);
    fx.be->event_free (fx.be, e2);
    fx_clear (&fx);
  }
  g_assert_cmpint (fakedev_stats ().bad, ==, st0.bad);
}

/* lingbot_prompt_context_new() uploads a prompt-embeds file from a host
 * tensor it frees before returning: LbBackend.copy lets the host free a
 * host-to-device copy's source only after a synchronisation, so nothing
 * may still be queued when it returns (the stream held: the copy cannot
 * run unless the function synchronises), and the context holds the
 * file's values. */
static void
test_prompt_context_upload (void)
{
  Fx fx;
  GError *err = NULL;
  fx_init (&fx, 21);
  g_autofree char *dir = g_dir_make_tmp ("fakedev-async-XXXXXX", &err);
  g_assert_no_error (err);
  g_autofree char *path = g_build_filename (dir, "embeds.safetensors",
      NULL);
  const int64_t shape[2] = { 512, 8 };
  g_autoptr (LbTensor) want = lb_tensor_new (LB_DTYPE_F32, 2, shape);
  for (int i = 0; i < 512 * 8; i++)
    ((float *) want->data)[i] = (float) (i % 977) * 0.25f - 7.0f;
  g_assert_true (lingbot_prompt_embeds_save (path, want, "p", 3, &err));
  g_assert_no_error (err);
  fakedev_hold_stream (fx.a, TRUE);
  g_autoptr (LbTensor) ctx = lingbot_prompt_context_new (fx.a, path, NULL,
      NULL, NULL, 8, &err);
  g_assert_no_error (err);
  g_assert_nonnull (ctx);
  g_assert_cmpuint (fakedev_stream_queued (fx.a), ==, 0);
  fakedev_hold_stream (fx.a, FALSE);
  g_autoptr (LbTensor) got = lb_tensor_new (LB_DTYPE_F32, 2, shape);
  g_assert_true (lb_tensor_download (fx.a, got, ctx, &err));
  g_assert_no_error (err);
  g_assert_cmpmem (got->data, 512 * 8 * 4, want->data, 512 * 8 * 4);
  lb_tensor_free (g_steal_pointer (&ctx));
  fx_clear (&fx);
  g_unlink (path);
  g_rmdir (dir);
}

/* ---- capture modes ---- */

typedef enum
{ CALL_ALLOC, CALL_FREE, CALL_SYNC, CALL_OP } Call;

typedef struct
{
  Fx *fx;
  Call call;
  gpointer block;               /* CALL_FREE: freed; CALL_ALLOC: made */
  GError *err;
  gboolean ok;
} Other;

static gpointer
other_thread (gpointer data)
{
  Other *o = data;
  LbBackend *be = o->fx->be;
  switch (o->call) {
    case CALL_ALLOC:
      o->block = be->alloc (be, 0, 4096, &o->err);
      o->ok = o->block != NULL;
      break;
    case CALL_FREE:
      be->free (be, 0, o->block);
      o->ok = TRUE;
      break;
    case CALL_SYNC:
      o->ok = be->stream_synchronize (o->fx->b, &o->err);
      break;
    case CALL_OP:              /* on the capturing stream: recorded */
      o->ok = lb_ops (o->fx->a)->scale (o->fx->a, o->fx->x, 10.0f, 0.0f,
          o->fx->x, &o->err);
      break;
  }
  return NULL;
}

static void
run_other (Other * o)
{
  g_thread_join (g_thread_new ("other", other_thread, o));
}

/* Global mode: an allocation, a free or a synchronisation from another
 * thread is refused with CUDA's error and invalidates the capture. */
static void
test_capture_global (gconstpointer data)
{
  const guint32 seed = GPOINTER_TO_UINT (data);
  static const char *const what[] = { "cudaMalloc", "cudaFree",
    "cudaStreamSynchronize"
  };
  for (Call call = CALL_ALLOC; call <= CALL_SYNC; call++) {
    Fx fx;
    GError *err = NULL;
    fx_init (&fx, seed);
    gpointer block = fx.be->alloc (fx.be, 0, 64, &err);
    g_assert_no_error (err);
    const FakeDevStats st0 = fakedev_stats ();
    fakedev_set_capture_mode (FAKEDEV_CAPTURE_GLOBAL);
    g_assert_true (fx.be->graph_begin (fx.a, &err));
    g_assert_true (lb_ops (fx.a)->scale (fx.a, fx.x, 2.0f, 0.0f, fx.x, &err));
    Other o = {.fx = &fx,.call = call,.block = block };
    run_other (&o);
    g_autofree char *msg = g_strdup_printf ("%s: operation not permitted "
        "when stream is capturing (cudaErrorStreamCaptureUnsupported)",
        what[call]);
    if (call == CALL_FREE) {
      /* LbBackend.free cannot fail: refused, counted, freed all the same */
      g_assert_cmpint (fakedev_stats ().live_blocks, ==, st0.live_blocks - 1);
    } else {
      g_assert_false (o.ok);
      g_assert_error (o.err, LB_ERROR, LB_ERROR_DEVICE);
      g_assert_cmpstr (o.err->message, ==, msg);
      g_clear_error (&o.err);
    }
    LbGraph *g = fx.be->graph_end (fx.a, &err);
    g_assert_null (g);
    g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
    g_assert_cmpstr (err->message, ==, "graph capture: operation failed "
        "due to a previous error during capture "
        "(cudaErrorStreamCaptureInvalidated)");
    g_clear_error (&err);
    fakedev_set_capture_mode (FAKEDEV_CAPTURE_RELAXED);
    const FakeDevStats st = fakedev_stats ();
    g_assert_cmpint (st.n_capture_unsupported - st0.n_capture_unsupported,
        ==, 1);
    g_assert_cmpint (st.bad - st0.bad, ==, 1);
    g_assert_cmpint (st.n_capture_fails, ==, st0.n_capture_fails);
    /* after the capture, the same calls are allowed; nothing captured ran */
    if (call != CALL_FREE)
      fx.be->free (fx.be, 0, block);
    if (o.block != NULL && call == CALL_ALLOC)
      fx.be->free (fx.be, 0, o.block);
    g_assert_true (lb_tensor_download (fx.a, fx.out, fx.x, &err));
    g_assert_no_error (err);
    assert_out (&fx, 1.0f, 0.0f, seed);
    g_assert_cmpint (fakedev_stats ().bad, ==, st.bad);
    fx_clear (&fx);
  }
}

/* Relaxed mode (the CUDA backend's): another thread allocates, frees and
 * synchronises another stream freely, and an op it enqueues on the
 * capturing stream is recorded into the graph, not run; the capturing
 * thread itself still may not allocate. */
static void
test_capture_relaxed (gconstpointer data)
{
  const guint32 seed = GPOINTER_TO_UINT (data);
  Fx fx;
  GError *err = NULL;
  fx_init (&fx, seed);
  const FakeDevStats st0 = fakedev_stats ();
  g_assert_true (fx.be->graph_begin (fx.a, &err));
  g_assert_true (lb_ops (fx.a)->scale (fx.a, fx.x, 2.0f, 0.0f, fx.x, &err));
  Other o = {.fx = &fx,.call = CALL_ALLOC };
  run_other (&o);
  g_assert_no_error (o.err);
  g_assert_true (o.ok);
  o.call = CALL_FREE;
  run_other (&o);
  o.call = CALL_SYNC;
  run_other (&o);
  g_assert_no_error (o.err);
  g_assert_true (o.ok);
  o.call = CALL_OP;
  run_other (&o);
  g_assert_no_error (o.err);
  g_assert_true (o.ok);
  g_assert_null (fx.be->alloc (fx.be, 0, 1024, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "alloc of 1024 bytes during a graph "
      "capture");
  g_clear_error (&err);
  LbGraph *g = fx.be->graph_end (fx.a, &err);
  g_assert_no_error (err);
  g_assert_nonnull (g);
  /* recorded, not run */
  g_assert_true (lb_tensor_download (fx.a, fx.out, fx.x, &err));
  assert_out (&fx, 1.0f, 0.0f, seed);
  g_assert_true (fx.be->graph_launch (fx.a, g, &err));
  g_assert_true (lb_tensor_download (fx.a, fx.out, fx.x, &err));
  g_assert_no_error (err);
  assert_out (&fx, 20.0f, 0.0f, seed);  /* both ops, in order */
  fx.be->graph_free (fx.a, g);
  const FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.bad - st0.bad, ==, 1);    /* the own-thread alloc */
  g_assert_cmpint (st.n_capture_unsupported, ==, st0.n_capture_unsupported);
  fx_clear (&fx);
}

int
main (int argc, char **argv)
{
  /* the wrong programs here must run: the checker would refuse them */
  g_setenv ("FAKEDEV_ORDER", "off", TRUE);
  g_unsetenv ("FAKEDEV_ASYNC");
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/fakedev/async/handoff-seeds", test_handoff_seeds);
  g_test_add_func ("/fakedev/async/handoff-held", test_handoff_held);
  g_test_add_func ("/fakedev/async/handoff-no-wait", test_handoff_no_wait);
  g_test_add_func ("/fakedev/async/descriptor-by-value",
      test_descriptor_by_value);
  g_test_add_func ("/fakedev/async/download-and-free", test_download_and_free);
  g_test_add_func ("/fakedev/async/replay", test_replay);
  g_test_add_func ("/fakedev/async/prompt-context-upload",
      test_prompt_context_upload);
  g_test_add_func ("/fakedev/capture/two-streams", test_capture_two_streams);
  g_test_add_data_func ("/fakedev/capture/global-at-once",
      GUINT_TO_POINTER (0), test_capture_global);
  g_test_add_data_func ("/fakedev/capture/global-async",
      GUINT_TO_POINTER (4), test_capture_global);
  g_test_add_data_func ("/fakedev/capture/relaxed-at-once",
      GUINT_TO_POINTER (0), test_capture_relaxed);
  g_test_add_data_func ("/fakedev/capture/relaxed-async",
      GUINT_TO_POINTER (4), test_capture_relaxed);
  return g_test_run ();
}

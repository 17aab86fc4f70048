/* lingbot-gst: the stream-ordering checker of the emulated device
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Two fakedev streams built by hand, each rule broken once (a wait left
 * out) and kept once (the wait, a synchronisation, disjoint bytes): the
 * broken program is refused with the message naming both accesses, the
 * kept one runs.  The checker's model is docs/design.md "The stream
 * model"; tests/comm/test-channel-device.c breaks the tensor channel's
 * hand-off the same way.
 */
#include "fakedev.h"
#include "kernels/error.h"

#include <string.h>

typedef struct
{
  LbBackend *be;
  LbStream *a, *b;
  char *na, *nb;                /* fakedev_stream_name() */
  LbTensor *x, *y;              /* [N] f32 on device 0 */
  LbTensor *host;               /* [N] f32, pageable */
  FakeDevStats st0;
} Fx;

#define N 256
#define NB ((gsize) N * sizeof (float))

static void
fx_setup (Fx * fx, gconstpointer data)
{
  (void) data;
  GError *err = NULL;
  const int64_t n = N;
  fx->be = fakedev_backend ();
  fx->a = fx->be->stream_new (fx->be, 0, &err);
  g_assert_no_error (err);
  fx->b = fx->be->stream_new (fx->be, 0, &err);
  g_assert_no_error (err);
  fx->na = fakedev_stream_name (fx->a);
  fx->nb = fakedev_stream_name (fx->b);
  fx->x = lb_tensor_new_on (fx->a, LB_DTYPE_F32, 1, &n, &err);
  g_assert_no_error (err);
  fx->y = lb_tensor_new_on (fx->a, LB_DTYPE_F32, 1, &n, &err);
  g_assert_no_error (err);
  fx->host = lb_tensor_new (LB_DTYPE_F32, 1, &n);
  for (int i = 0; i < N; i++)
    ((float *) fx->host->data)[i] = (float) i;
  /* both buffers written on a and seen complete by the host */
  g_assert_true (lb_tensor_upload (fx->a, fx->x, fx->host, &err));
  g_assert_true (lb_tensor_upload (fx->a, fx->y, fx->host, &err));
  g_assert_true (fx->be->stream_synchronize (fx->a, &err));
  g_assert_no_error (err);
  fx->st0 = fakedev_stats ();
}

static void
fx_teardown (Fx * fx, gconstpointer data)
{
  (void) data;
  fakedev_skip_waits (-1, 0);
  lb_tensor_free (fx->x);
  lb_tensor_free (fx->y);
  lb_tensor_free (fx->host);
  fx->be->stream_free (fx->a);
  fx->be->stream_free (fx->b);
  g_free (fx->na);
  g_free (fx->nb);
}

/* *@errp is the refusal "stream order: <rule> in allocation #<serial of p>
 * (<size> bytes on fakedev:0, made by ...): <tail>"; cleared. */
static void
assert_refused (GError ** errp, const char *rule, const void *p, gsize size,
    gboolean pinned, const char *tail)
{
  GError *err = *errp;
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_autofree char *head = pinned ?
      g_strdup_printf ("stream order: %s in host_alloc block #%"
      G_GUINT64_FORMAT " (%" G_GSIZE_FORMAT " bytes, made by ", rule,
      fakedev_block_serial (p), size) :
      g_strdup_printf ("stream order: %s in allocation #%" G_GUINT64_FORMAT
      " (%" G_GSIZE_FORMAT " bytes on fakedev:0, made by ", rule,
      fakedev_block_serial (p), size);
  g_autofree char *end = g_strdup_printf ("): %s", tail);
  if (!g_str_has_prefix (err->message, head) ||
      !g_str_has_suffix (err->message, end))
    g_error ("message\n  %s\nexpected\n  %s...%s", err->message, head, end);
  g_clear_error (errp);
}

static void
assert_violations (Fx * fx, int n)
{
  const FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.n_order_violations - fx->st0.n_order_violations, ==, n);
  g_assert_cmpint (st.bad - fx->st0.bad, ==, n);
  g_assert_cmpint (st.n_order_checks, >, fx->st0.n_order_checks);
}

/* read after write: b copies x while a may still be scaling it */
static void
test_raw (Fx * fx, gconstpointer data)
{
  (void) data;
  GError *err = NULL;
  g_assert_true (lb_ops (fx->a)->scale (fx->a, fx->x, 2.0f, 0.0f, fx->x, &err));
  g_assert_false (lb_ops (fx->b)->copy (fx->b, fx->x, fx->y, &err));
  g_autofree char *tail = g_strdup_printf ("copy on %s reads bytes [0, %"
      G_GSIZE_FORMAT "), not ordered after scale on %s, which wrote bytes "
      "[0, %" G_GSIZE_FORMAT ") (no event wait or synchronisation between "
      "them)", fx->nb, NB, fx->na, NB);
  assert_refused (&err, "read after write", fx->x->data, NB, FALSE, tail);
  assert_violations (fx, 1);
}

/* the same with the event: ordered */
static void
test_raw_event (Fx * fx, gconstpointer data)
{
  (void) data;
  GError *err = NULL;
  LbEvent *ev = fx->be->event_new (fx->be, 0, &err);
  g_assert_true (lb_ops (fx->a)->scale (fx->a, fx->x, 2.0f, 0.0f, fx->x, &err));
  g_assert_true (fx->be->event_record (fx->a, ev, &err));
  g_assert_true (fx->be->stream_wait_event (fx->b, ev, &err));
  g_assert_true (lb_ops (fx->b)->copy (fx->b, fx->x, fx->y, &err));
  g_assert_no_error (err);
  assert_violations (fx, 0);
  fx->be->event_free (fx->be, ev);
}

/* an event records the point reached when it is recorded: a write after
 * it is not covered; an event never recorded orders nothing */
static void
test_raw_event_early (Fx * fx, gconstpointer data)
{
  (void) data;
  GError *err = NULL;
  LbEvent *ev = fx->be->event_new (fx->be, 0, &err);
  LbEvent *never = fx->be->event_new (fx->be, 0, &err);
  g_assert_true (fx->be->event_record (fx->a, ev, &err));
  g_assert_true (lb_ops (fx->a)->scale (fx->a, fx->x, 2.0f, 0.0f, fx->x, &err));
  g_assert_true (fx->be->stream_wait_event (fx->b, ev, &err));
  g_assert_true (fx->be->stream_wait_event (fx->b, never, &err));
  g_assert_false (lb_ops (fx->b)->copy (fx->b, fx->x, fx->y, &err));
  g_autofree char *tail = g_strdup_printf ("copy on %s reads bytes [0, %"
      G_GSIZE_FORMAT "), not ordered after scale on %s, which wrote bytes "
      "[0, %" G_GSIZE_FORMAT ") (no event wait or synchronisation between "
      "them)", fx->nb, NB, fx->na, NB);
  assert_refused (&err, "read after write", fx->x->data, NB, FALSE, tail);
  assert_violations (fx, 1);
  fx->be->event_free (fx->be, ev);
  fx->be->event_free (fx->be, never);
}

/* a skipped wait (fakedev_skip_waits) is a wait left out */
static void
test_raw_skipped_wait (Fx * fx, gconstpointer data)
{
  (void) data;
  GError *err = NULL;
  LbEvent *ev = fx->be->event_new (fx->be, 0, &err);
  g_assert_true (lb_ops (fx->a)->scale (fx->a, fx->x, 2.0f, 0.0f, fx->x, &err));
  g_assert_true (fx->be->event_record (fx->a, ev, &err));
  fakedev_skip_waits (0, 1);
  g_assert_true (fx->be->stream_wait_event (fx->b, ev, &err));
  g_assert_false (lb_ops (fx->b)->copy (fx->b, fx->x, fx->y, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_nonnull (strstr (err->message, "read after write"));
  g_clear_error (&err);
  /* only one wait skipped: the next one orders */
  g_assert_true (fx->be->stream_wait_event (fx->b, ev, &err));
  g_assert_true (lb_ops (fx->b)->copy (fx->b, fx->x, fx->y, &err));
  g_assert_no_error (err);
  assert_violations (fx, 1);
  fx->be->event_free (fx->be, ev);
}

/* write after read: a reads x into y, b overwrites x */
static void
test_war (Fx * fx, gconstpointer data)
{
  (void) data;
  GError *err = NULL;
  g_assert_true (lb_ops (fx->a)->copy (fx->a, fx->x, fx->y, &err));
  g_assert_false (lb_ops (fx->b)->scale (fx->b, fx->x, 2.0f, 0.0f, fx->x,
          &err));
  g_autofree char *tail = g_strdup_printf ("scale on %s writes bytes [0, %"
      G_GSIZE_FORMAT "), not ordered after copy on %s, which read bytes "
      "[0, %" G_GSIZE_FORMAT ") (no event wait or synchronisation between "
      "them)", fx->nb, NB, fx->na, NB);
  assert_refused (&err, "write after read", fx->x->data, NB, FALSE, tail);
  assert_violations (fx, 1);
}

/* write after write, by a device copy into half of y */
static void
test_waw (Fx * fx, gconstpointer data)
{
  (void) data;
  GError *err = NULL;
  g_assert_true (lb_ops (fx->a)->scale (fx->a, fx->y, 2.0f, 0.0f, fx->y, &err));
  g_assert_false (fx->be->copy (fx->b, (char *) fx->y->data + NB / 2,
          fx->x->data, NB / 2, LB_COPY_DEVICE_TO_DEVICE, &err));
  g_autofree char *tail = g_strdup_printf ("D2D copy on %s writes bytes [%"
      G_GSIZE_FORMAT ", %" G_GSIZE_FORMAT "), not ordered after scale on %s, "
      "which wrote bytes [0, %" G_GSIZE_FORMAT ") (no event wait or "
      "synchronisation between them)", fx->nb, NB / 2, NB, fx->na, NB);
  assert_refused (&err, "write after write", fx->y->data, NB, FALSE, tail);
  assert_violations (fx, 1);
}

/* disjoint bytes of one allocation do not conflict */
static void
test_disjoint (Fx * fx, gconstpointer data)
{
  (void) data;
  GError *err = NULL;
  g_assert_true (fx->be->copy (fx->a, fx->y->data, fx->x->data, NB / 2,
          LB_COPY_DEVICE_TO_DEVICE, &err));
  g_assert_true (fx->be->copy (fx->b, (char *) fx->y->data + NB / 2,
          fx->x->data, NB / 2, LB_COPY_DEVICE_TO_DEVICE, &err));
  g_assert_no_error (err);
  assert_violations (fx, 0);
}

/* a host download on b of what a wrote; after a's synchronisation it is
 * ordered */
static void
test_download (Fx * fx, gconstpointer data)
{
  (void) data;
  GError *err = NULL;
  g_assert_true (lb_ops (fx->a)->scale (fx->a, fx->x, 2.0f, 0.0f, fx->x, &err));
  g_assert_false (lb_tensor_download (fx->b, fx->host, fx->x, &err));
  g_autofree char *tail = g_strdup_printf ("D2H copy on %s reads bytes "
      "[0, %" G_GSIZE_FORMAT "), not ordered after scale on %s, which wrote "
      "bytes [0, %" G_GSIZE_FORMAT ") (no event wait or synchronisation "
      "between them)", fx->nb, NB, fx->na, NB);
  assert_refused (&err, "download after write", fx->x->data, NB, FALSE, tail);
  g_assert_true (fx->be->stream_synchronize (fx->a, &err));
  g_assert_true (lb_tensor_download (fx->b, fx->host, fx->x, &err));
  g_assert_no_error (err);
  g_assert_cmpfloat (((float *) fx->host->data)[3], ==, 6.0f);
  assert_violations (fx, 1);
}

/* page-locked staging: a downloads into it asynchronously, b uploads
 * from it; the host read of an unsynchronised download is the same rule
 * on a host_alloc block */
static void
test_staging (Fx * fx, gconstpointer data)
{
  (void) data;
  GError *err = NULL;
  const int64_t n = N;
  LbTensor *pin = lb_tensor_new_host (fx->a, LB_DTYPE_F32, 1, &n, &err);
  g_assert_no_error (err);
  g_assert_true (fx->be->copy (fx->a, pin->data, fx->x->data, NB,
          LB_COPY_DEVICE_TO_HOST, &err));
  g_assert_false (fx->be->copy (fx->b, fx->y->data, pin->data, NB,
          LB_COPY_HOST_TO_DEVICE, &err));
  g_autofree char *tail = g_strdup_printf ("H2D copy on %s reads bytes "
      "[0, %" G_GSIZE_FORMAT "), not ordered after D2H copy on %s, which "
      "wrote bytes [0, %" G_GSIZE_FORMAT ") (no event wait or "
      "synchronisation between them)", fx->nb, NB, fx->na, NB);
  assert_refused (&err, "read after write", pin->data, NB, TRUE, tail);
  assert_violations (fx, 1);
  lb_tensor_free (pin);
}

/* a freed block's history goes with it (the CUDA pool fences reuse) */
static void
test_free_drops (Fx * fx, gconstpointer data)
{
  (void) data;
  GError *err = NULL;
  const int64_t n = N;
  g_assert_true (lb_ops (fx->a)->scale (fx->a, fx->x, 2.0f, 0.0f, fx->x, &err));
  lb_tensor_free (fx->x);
  fx->x = lb_tensor_new_on (fx->b, LB_DTYPE_F32, 1, &n, &err);
  g_assert_true (lb_tensor_upload (fx->b, fx->x, fx->host, &err));
  g_assert_no_error (err);
  assert_violations (fx, 0);
}

/* A graph captured across two streams (b joins a's capture through
 * event e1, a joins b back through e2) replays b's part on a stream of its
 * own, ordered inside the graph only by the captured waits: here a writes
 * x after e1 while b reads it, a race inside the graph that the checker
 * refuses at the replay as it would eagerly; with a's write after e2 the
 * replay is clean. */
static void
capture_fork_join (Fx * fx, gboolean race, LbGraph ** graph)
{
  GError *err = NULL;
  LbEvent *e1 = fx->be->event_new (fx->be, 0, &err);
  LbEvent *e2 = fx->be->event_new (fx->be, 0, &err);
  const LbOps *oa = lb_ops (fx->a), *ob = lb_ops (fx->b);
  g_assert_true (fx->be->graph_begin (fx->a, &err));
  g_assert_true (oa->scale (fx->a, fx->x, 2.0f, 0.0f, fx->x, &err));
  g_assert_true (fx->be->event_record (fx->a, e1, &err));
  g_assert_true (fx->be->stream_wait_event (fx->b, e1, &err));
  g_assert_true (ob->copy (fx->b, fx->x, fx->y, &err));
  if (race)
    g_assert_true (oa->scale (fx->a, fx->x, 2.0f, 0.0f, fx->x, &err));
  g_assert_true (fx->be->event_record (fx->b, e2, &err));
  g_assert_true (fx->be->stream_wait_event (fx->a, e2, &err));
  if (!race)
    g_assert_true (oa->scale (fx->a, fx->x, 2.0f, 0.0f, fx->x, &err));
  *graph = fx->be->graph_end (fx->a, &err);
  g_assert_no_error (err);
  g_assert_nonnull (*graph);
  fx->be->event_free (fx->be, e1);
  fx->be->event_free (fx->be, e2);
}

static void
test_capture_branch_race (Fx * fx, gconstpointer data)
{
  (void) data;
  GError *err = NULL;
  LbGraph *g;
  capture_fork_join (fx, FALSE, &g);
  g_assert_true (fx->be->graph_launch (fx->a, g, &err));
  g_assert_true (fx->be->graph_launch (fx->a, g, &err));
  g_assert_no_error (err);
  assert_violations (fx, 0);
  fx->be->graph_free (fx->a, g);

  capture_fork_join (fx, TRUE, &g);
  assert_violations (fx, 0);    /* captured: nothing ran */
  g_assert_false (fx->be->graph_launch (fx->a, g, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_autofree char *what = g_strdup_printf ("): scale on %s writes bytes "
      "[0, %" G_GSIZE_FORMAT "), not ordered after copy on stream #", fx->na,
      NB);
  if (!g_str_has_prefix (err->message, "stream order: write after read in "
          "allocation #") || strstr (err->message, what) == NULL)
    g_error ("message\n  %s\nexpected ...%s...", err->message, what);
  g_clear_error (&err);
  assert_violations (fx, 1);
  g_assert_true (fx->be->stream_synchronize (fx->a, &err));
  fx->be->graph_free (fx->a, g);
}

/* CUDA's rules for a capture across streams: it ends on the stream that
 * began it, and only once every stream that joined it was joined back;
 * either way the joined stream is out of the capture afterwards. */
static void
test_capture_unjoined (Fx * fx, gconstpointer data)
{
  (void) data;
  GError *err = NULL;
  LbEvent *e1 = fx->be->event_new (fx->be, 0, &err);
  g_assert_true (fx->be->graph_begin (fx->a, &err));
  g_assert_true (fx->be->event_record (fx->a, e1, &err));
  g_assert_true (fx->be->stream_wait_event (fx->b, e1, &err));
  g_assert_true (lb_ops (fx->b)->copy (fx->b, fx->x, fx->y, &err));
  g_assert_null (fx->be->graph_end (fx->b, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "graph capture: ended on a stream that "
      "joined it, not the one that began it "
      "(cudaErrorStreamCaptureUnmatched)");
  g_clear_error (&err);
  g_assert_null (fx->be->graph_end (fx->a, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "graph capture: capturing stream has "
      "unjoined work (cudaErrorStreamCaptureUnjoined)");
  g_clear_error (&err);
  g_assert_cmpint (fakedev_stats ().bad - fx->st0.bad, ==, 2);
  g_assert_true (fx->be->stream_synchronize (fx->b, &err));
  g_assert_no_error (err);
  fx->be->event_free (fx->be, e1);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (g_strcmp0 (g_getenv ("FAKEDEV_ORDER"), "off") == 0) {
    g_test_skip ("FAKEDEV_ORDER=off");
    return 77;
  }
#define T(path, f) g_test_add ("/fakedev/order/" path, Fx, NULL, fx_setup, \
    f, fx_teardown)
  T ("raw", test_raw);
  T ("raw-event", test_raw_event);
  T ("raw-event-early", test_raw_event_early);
  T ("raw-skipped-wait", test_raw_skipped_wait);
  T ("war", test_war);
  T ("waw", test_waw);
  T ("disjoint", test_disjoint);
  T ("download", test_download);
  T ("staging", test_staging);
  T ("free-drops", test_free_drops);
  T ("capture-branch-race", test_capture_branch_race);
  T ("capture-unjoined", test_capture_unjoined);
  return g_test_run ();
}

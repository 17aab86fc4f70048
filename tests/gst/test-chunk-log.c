/* lingbot-gst: the chunk statistics of lingbotgen and lingbotvaedec in
 * bounded memory
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Issue 3.1: a live pipeline's RSS grew by ~0.2 kB a chunk (~20 MB a
 * day): both elements kept a 56-byte record of every chunk for their
 * `stats` (a GArray, doubling).  GstLingbotChunkLog (gst/gstlingbotutil.c,
 * compiled in here) keeps the last `window` records and running figures.
 * Checked against a list of every record with the formulas of
 * docs/elements.md: chunks, frames, steady figures, totals, means and
 * maxima over all chunks, bit for bit; percentiles over the last `window`
 * chunks (over all of them while they fit); the decode-hidden fraction
 * over all chunks; and never more than `window` records kept.
 */
#include <math.h>
#include <stdlib.h>

#include <gst/check/gsttestclock.h>

#include "gst/gstlingbotutil.h"

/* ---- the reference: every record in a list ---- */

static int
cmp_double (gconstpointer a, gconstpointer b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

/* nearest rank of the last @n values of @v (copied, sorted) */
static double
ref_percentile (const double *v, guint n, double p)
{
  if (n == 0)
    return 0.0;
  g_autofree double *s = g_memdup2 (v, n * sizeof (double));
  qsort (s, n, sizeof (double), cmp_double);
  guint rank = (guint) ceil (p / 100.0 * n - 1e-9);
  return s[CLAMP (rank, 1, n) - 1];
}

static void
check_double (const GstStructure * s, const char *field, double want)
{
  double got = NAN;
  g_assert_true (gst_structure_get_double (s, field, &got));
  if (got != want)
    g_error ("%s: %.17g, expected %.17g", field, got, want);
}

/* the distribution fields NAME-* of @v (@n values, in order): mean and
 * max over all, percentiles over the last @window */
static void
check_distribution (const GstStructure * s, const char *name,
    const double *v, guint n, guint window)
{
  double total = 0.0, max = 0.0;
  for (guint i = 0; i < n; i++) {
    total += v[i];
    max = i ? MAX (max, v[i]) : v[i];
  }
  guint last = MIN (n, window);
  const double *tail = v + (n - last);
  g_autofree char *mean = g_strdup_printf ("%s-mean", name);
  g_autofree char *p50 = g_strdup_printf ("%s-p50", name);
  g_autofree char *p90 = g_strdup_printf ("%s-p90", name);
  g_autofree char *p99 = g_strdup_printf ("%s-p99", name);
  g_autofree char *mx = g_strdup_printf ("%s-max", name);
  check_double (s, mean, n ? total / n : 0.0);
  check_double (s, p50, ref_percentile (tail, last, 50));
  check_double (s, p90, ref_percentile (tail, last, 90));
  check_double (s, p99, ref_percentile (tail, last, 99));
  check_double (s, mx, n ? max : 0.0);
}

/* the share of the decode time of chunks 0 .. n - 2 hidden behind the
 * generation of later chunks, from the whole list */
static double
ref_hidden_fraction (const GstLingbotChunkTimes * c, guint n)
{
  gint64 decode = 0, hidden = 0;
  for (guint k = 0; k + 1 < n; k++) {
    const gint64 ds = c[k].decode_start_us, de = c[k].end_us;
    if (de <= ds)
      continue;
    decode += de - ds;
    for (guint j = k + 1; j < n; j++) {
      if (c[j].generate_end_us == 0)
        continue;
      if (c[j].generate_start_us >= de)
        break;
      hidden += MAX (0, MIN (de, c[j].generate_end_us) -
          MAX (ds, c[j].generate_start_us));
    }
  }
  return decode > 0 ? (double) hidden / (double) decode : 0.0;
}

static void
check_stats (const GstLingbotChunkLog * log, const GstLingbotChunkTimes * c,
    guint n, guint window)
{
  g_autoptr (GstStructure) s = gst_lingbot_chunk_stats_new ("lingbot-stats",
      log, TRUE);
  guint chunks = 0;
  guint64 frames = 0, steady_frames = 0, got64 = 0;
  double steady_s = 0.0, decode = 0.0;
  g_autofree double *v = g_new0 (double, MAX (n, 1));

  for (guint i = 0; i < n; i++) {
    frames += (guint64) c[i].frames;
    decode += c[i].decode_seconds;
    if (i > 0) {
      steady_s += c[i].compute_seconds;
      steady_frames += (guint64) c[i].frames;
    }
  }
  g_assert_true (gst_structure_get_uint (s, "chunks", &chunks));
  g_assert_cmpuint (chunks, ==, n);
  g_assert_true (gst_structure_get_uint64 (s, "frames", &got64));
  g_assert_cmpuint (got64, ==, frames);
  g_assert_true (gst_structure_get_uint64 (s, "steady-frames", &got64));
  g_assert_cmpuint (got64, ==, steady_frames);
  check_double (s, "steady-seconds", steady_s);
  check_double (s, "steady-fps",
      steady_s > 0.0 ? (double) steady_frames / steady_s : 0.0);
  double total = 0.0;
  for (guint i = 0; i < n; i++) {
    v[i] = c[i].compute_seconds;
    total += v[i];
  }
  check_double (s, "compute-seconds-total", total);
  check_distribution (s, "compute-seconds", v, n, window);
  for (guint i = 1; i < n; i++)
    v[i - 1] = (double) (c[i].end_us - c[i - 1].end_us) / G_USEC_PER_SEC;
  /* the window's periods: those of its chunks after the first of all */
  check_distribution (s, "period-seconds", v, n ? n - 1 : 0,
      n > window ? window : (n ? n - 1 : 0));
  check_double (s, "decode-seconds-total", decode);
  check_double (s, "decode-seconds-mean", n ? decode / n : 0.0);
  check_double (s, "decode-hidden-fraction", ref_hidden_fraction (c, n));
}

/* @n chunks as the elements see them: frames 13 then 16, compute seconds
 * drawn from @rand, each decode overlapping the next chunk's generation
 * (every 7th chunk without lingbotgen's meta) */
static GstLingbotChunkTimes *
make_chunks (guint n, GRand * rand)
{
  GstLingbotChunkTimes *c = g_new0 (GstLingbotChunkTimes, n);
  gint64 t = 1000000;
  for (guint i = 0; i < n; i++) {
    gint64 gen = g_rand_int_range (rand, 50000, 400000);
    gint64 dec = g_rand_int_range (rand, 20000, 300000);
    c[i].frames = i ? 16 : 13;
    c[i].generate_start_us = i % 7 == 3 ? 0 : t;
    c[i].generate_end_us = i % 7 == 3 ? 0 : t + gen;
    c[i].decode_start_us = t + gen + g_rand_int_range (rand, 0, 5000);
    c[i].end_us = c[i].decode_start_us + dec;
    c[i].decode_seconds = (double) dec / G_USEC_PER_SEC;
    c[i].compute_seconds = (double) (gen + dec) / G_USEC_PER_SEC +
        g_rand_double (rand) * 1e-3;
    t += gen + g_rand_int_range (rand, 0, 20000);
  }
  return c;
}

/* 1000 chunks through a window of 64: never more than 64 records, every
 * figure as from the list of all */
static void
test_bounded (void)
{
  const guint window = 64, n = 1000;
  g_autoptr (GRand) rand = g_rand_new_with_seed (7);
  g_autofree GstLingbotChunkTimes *c = make_chunks (n, rand);
  GstLingbotChunkLog *log = gst_lingbot_chunk_log_new (window);

  check_stats (log, c, 0, window);
  for (guint i = 0; i < n; i++) {
    gst_lingbot_chunk_log_add (log, &c[i]);
    g_assert_cmpuint (gst_lingbot_chunk_log_get_n_kept (log), ==,
        MIN (i + 1, window));
    g_assert_cmpuint (gst_lingbot_chunk_log_get_n_chunks (log), ==, i + 1);
    if (i < 3 || i == window - 1 || i == window || i % 97 == 0 || i == n - 1)
      check_stats (log, c, i + 1, window);
  }
  /* a new stream */
  gst_lingbot_chunk_log_clear (log);
  g_assert_cmpuint (gst_lingbot_chunk_log_get_n_kept (log), ==, 0);
  check_stats (log, c, 0, window);
  for (guint i = 0; i < 5; i++)
    gst_lingbot_chunk_log_add (log, &c[i]);
  check_stats (log, c, 5, window);
  gst_lingbot_chunk_log_free (log);
}

/* with the elements' window, a run that fits gives what a list of every
 * record gives, percentiles included */
static void
test_window_default (void)
{
  const guint n = 3000;
  g_autoptr (GRand) rand = g_rand_new_with_seed (11);
  g_autofree GstLingbotChunkTimes *c = make_chunks (n, rand);
  GstLingbotChunkLog *log =
      gst_lingbot_chunk_log_new (GST_LINGBOT_CHUNK_LOG_WINDOW);

  for (guint i = 0; i < n; i++)
    gst_lingbot_chunk_log_add (log, &c[i]);
  g_assert_cmpuint (gst_lingbot_chunk_log_get_n_kept (log), ==, n);
  check_stats (log, c, n, G_MAXUINT);
  gst_lingbot_chunk_log_free (log);
}

/* ---- the live latency estimate (issue 3.4) ---- */

/* The reported latency came from 1.25 x the worst chunk of the stream
 * and never came down: one slow chunk (a warm-up, a 3 s stall) delayed
 * the rest of the session by it.  GstLingbotLatencyEstimate: the largest
 * of the last 4 chunks plus an eighth is the goal when a chunk is above
 * it or when it falls by more than a tenth.  A steady 0.5 s chunk, a
 * 3.5 s one (a 3 s stall), then steady again: the goal is 0.5625 s,
 * 3.9375 s from the stall on (one move up), and 0.5625 s again 4 chunks
 * after it (one move down); jitter of +-5 % moves nothing.  The announced
 * figure follows the goal up at once and down only by steps. */
static void
test_latency_recovers (void)
{
  GstLingbotLatencyEstimate e;
  const GstClockTime ms = GST_MSECOND;
  guint moves = 0, back = 0;

  gst_lingbot_latency_estimate_reset (&e);
  g_assert_cmpuint (e.announced, ==, GST_CLOCK_TIME_NONE);
  g_assert_false (gst_lingbot_latency_estimate_falling (&e));
  g_assert_false (gst_lingbot_latency_estimate_step (&e, GST_CLOCK_TIME_NONE));
  g_assert_true (gst_lingbot_latency_estimate_add (&e, 500 * ms));
  g_assert_cmpuint (e.announced, ==, 562500 * GST_USECOND);
  g_assert_cmpuint (e.goal, ==, 562500 * GST_USECOND);
  for (int i = 0; i < 8; i++)
    g_assert_false (gst_lingbot_latency_estimate_add (&e,
            (i % 2 ? 525 : 475) * ms));
  g_assert_cmpuint (e.goal, ==, 562500 * GST_USECOND);

  /* the stall */
  g_assert_true (gst_lingbot_latency_estimate_add (&e, 3500 * ms));
  g_assert_cmpuint (e.announced, ==, 3937500 * GST_USECOND);
  for (guint k = 1; k <= 5; k++) {
    GstClockTime goal = e.goal;

    /* a fall is not announced by the samples */
    g_assert_false (gst_lingbot_latency_estimate_add (&e, 500 * ms));
    moves += e.goal != goal;
    if (back == 0 && e.goal <= 562500 * GST_USECOND * 11 / 10)
      back = k;
  }
  g_assert_cmpuint (moves, ==, 1);
  g_assert_cmpuint (back, ==, 4);
  g_assert_cmpuint (e.goal, ==, 562500 * GST_USECOND);
  g_assert_cmpuint (e.announced, ==, 3937500 * GST_USECOND);
  /* the steps take it down, never below the goal */
  g_assert_true (gst_lingbot_latency_estimate_falling (&e));
  g_assert_false (gst_lingbot_latency_estimate_step (&e, 0));
  g_assert_true (gst_lingbot_latency_estimate_step (&e, 1000 * ms));
  g_assert_cmpuint (e.announced, ==, 2937500 * GST_USECOND);
  g_assert_true (gst_lingbot_latency_estimate_step (&e, 3000 * ms));
  g_assert_cmpuint (e.announced, ==, 562500 * GST_USECOND);
  g_assert_false (gst_lingbot_latency_estimate_falling (&e));
  g_assert_false (gst_lingbot_latency_estimate_step (&e, 1000 * ms));

  /* slowly slower: moves up as soon as a chunk is above the figure */
  g_assert_false (gst_lingbot_latency_estimate_add (&e, 560 * ms));
  g_assert_true (gst_lingbot_latency_estimate_add (&e, 570 * ms));
  g_assert_cmpuint (e.announced, ==, 641250 * GST_USECOND);

  /* a sink's lateness raises the newest chunk, and leaves with it */
  g_assert_true (gst_lingbot_latency_estimate_raise (&e, 1000 * ms));
  g_assert_cmpuint (e.announced, ==, 1125 * ms);
  g_assert_false (gst_lingbot_latency_estimate_raise (&e, 900 * ms));
  for (int i = 0; i < 4; i++)
    g_assert_false (gst_lingbot_latency_estimate_add (&e, 500 * ms));
  g_assert_cmpuint (e.goal, ==, 562500 * GST_USECOND);
  g_assert_cmpuint (e.announced, ==, 1125 * ms);
  /* falling, a chunk above the goal moves the goal (still below: the
   * steps go on to it), one above the announced figure moves both */
  g_assert_false (gst_lingbot_latency_estimate_add (&e, 700 * ms));
  g_assert_cmpuint (e.goal, ==, 787500 * GST_USECOND);
  g_assert_true (gst_lingbot_latency_estimate_falling (&e));
  g_assert_true (gst_lingbot_latency_estimate_add (&e, 1200 * ms));
  g_assert_cmpuint (e.announced, ==, 1350 * ms);
  g_assert_false (gst_lingbot_latency_estimate_falling (&e));

  /* a new stream forgets it all; a raise with no chunk is a chunk */
  gst_lingbot_latency_estimate_reset (&e);
  g_assert_true (gst_lingbot_latency_estimate_raise (&e, 800 * ms));
  g_assert_cmpuint (e.announced, ==, 900 * ms);
}

/* the LATENCY messages on @bus */
static guint
pop_latency_messages (GstBus * bus)
{
  GstMessage *m;
  guint n = 0;

  while ((m = gst_bus_pop (bus)) != NULL) {
    n += GST_MESSAGE_TYPE (m) == GST_MESSAGE_LATENCY;
    gst_message_unref (m);
  }
  return n;
}

/* @e's goal 0.45 s, its announced figure 0.9 s */
static void
make_fall (GstLingbotLatencyEstimate * e, GMutex * lock)
{
  g_mutex_lock (lock);
  gst_lingbot_latency_estimate_reset (e);
  g_assert_true (gst_lingbot_latency_estimate_add (e, 800 * GST_MSECOND));
  for (int i = 0; i < 4; i++)
    g_assert_false (gst_lingbot_latency_estimate_add (e, 400 * GST_MSECOND));
  g_assert_cmpuint (e->announced, ==, 900 * GST_MSECOND);
  g_assert_cmpuint (e->goal, ==, 450 * GST_MSECOND);
  g_mutex_unlock (lock);
}

static GstClockTime
announced_now (GstLingbotLatencyEstimate * e, GMutex * lock)
{
  GstClockTime a;

  g_mutex_lock (lock);
  a = e->announced;
  g_mutex_unlock (lock);
  return a;
}

/* the next pending step is at @t */
static void
assert_pending_at (GstTestClock * tc, GstClockTime t)
{
  GstClockID id;

  gst_test_clock_wait_for_next_pending_id (tc, &id);
  g_assert_cmpuint (gst_clock_id_get_time (id), ==, t);
  gst_clock_id_unref (id);
  g_assert_cmpuint (gst_test_clock_peek_id_count (tc), ==, 1);
}

GST_DEBUG_CATEGORY_STATIC (test_stepper_debug);

/* a log function: counts the stepper's lines in test_stepper_debug (the
 * element's category; they went to GStreamer's default one, so that
 * GST_DEBUG=lingbotgen:4 showed the latency's rises but not its falls) */
static void
count_step_lines (GstDebugCategory * category, GstDebugLevel level,
    const gchar * file, const gchar * function, gint line, GObject * object,
    GstDebugMessage * message, gpointer data)
{
  guint *n = data;

  if (category == test_stepper_debug
      && g_str_has_prefix (gst_debug_message_get (message),
          "latency share falls to"))
    g_atomic_int_inc (n);
}

/* the stepper's jump function: counts the falls taken at once */
static void
count_jump (gpointer data)
{
  guint *n = data;

  (*n)++;
}

/* A fall of the live latency distributed at once made the frames queued
 * at a sink with the higher figure late by up to the fall: those beyond a
 * frame plus max-lateness were dropped (bursts after each fall).
 * GstLingbotLatencyStepper takes it in steps of a quarter of a frame, a
 * frame apart on the element's clock, a LATENCY message with each: on a
 * test clock, 0.45 s at 100 ms frames is 18 steps of 25 ms, the first
 * 100 ms after the start, then nothing is scheduled.  Not PLAYING it
 * waits; without a clock the figure goes at once; what lies beyond `most`
 * goes at once too; leaving PLAYING cancels the next step and the return
 * takes them up again; a start while steps are under way adds none;
 * above 30 fps the steps are 1/30 s apart, a frame each.  The jump
 * function is called for each fall taken at once (without a clock, and
 * beyond `most`), never for a quarter-frame step.  Each message is logged
 * (INFO) in the element's debug category. */
static void
test_latency_steps (void)
{
  GstLingbotLatencyEstimate e;
  GstLingbotLatencyStepper *s;
  GstElement *el = gst_element_factory_make ("identity", NULL);
  GstClock *clock = gst_test_clock_new_with_start_time (10 * GST_SECOND);
  GstTestClock *tc = GST_TEST_CLOCK (clock);
  GstBus *bus = gst_bus_new ();
  const GstClockTime ms = GST_MSECOND;
  GMutex lock;
  guint jumps = 0, lines = 0;

  g_assert_nonnull (el);
  g_mutex_init (&lock);
  gst_element_set_bus (el, bus);
  make_fall (&e, &lock);
  GST_DEBUG_CATEGORY_INIT (test_stepper_debug, "test-stepper", 0,
      "the stepper's log lines");
  gst_debug_set_threshold_for_name ("test-stepper", GST_LEVEL_INFO);
  gst_debug_add_log_function (count_step_lines, &lines, NULL);
  s = gst_lingbot_latency_stepper_new (el, test_stepper_debug, &lock, &e);
  gst_lingbot_latency_stepper_set_jump_func (s, count_jump, &jumps);

  /* not PLAYING: nothing yet; PLAYING with no clock: at once */
  gst_lingbot_latency_stepper_start (s, 100 * ms, GST_CLOCK_TIME_NONE);
  g_assert_cmpuint (announced_now (&e, &lock), ==, 900 * ms);
  g_assert_cmpuint (pop_latency_messages (bus), ==, 0);
  gst_lingbot_latency_stepper_set_playing (s, TRUE);
  g_assert_cmpuint (announced_now (&e, &lock), ==, 450 * ms);
  g_assert_cmpuint (pop_latency_messages (bus), ==, 1);
  g_assert_cmpuint (jumps, ==, 1);
  g_assert_cmpuint (g_atomic_int_get (&lines), ==, 1);

  /* on a clock: a step each crank, 25 ms each, a frame apart */
  make_fall (&e, &lock);
  gst_element_set_clock (el, clock);
  gst_lingbot_latency_stepper_start (s, 100 * ms, GST_CLOCK_TIME_NONE);
  g_assert_cmpuint (pop_latency_messages (bus), ==, 0);
  for (guint k = 1; k <= 18; k++) {
    assert_pending_at (tc, 10 * GST_SECOND + k * 100 * ms);
    gst_lingbot_latency_stepper_start (s, 100 * ms, GST_CLOCK_TIME_NONE);
    g_assert_cmpuint (gst_test_clock_peek_id_count (tc), ==, 1);
    g_assert_true (gst_test_clock_crank (tc));
    g_assert_cmpuint (announced_now (&e, &lock), ==, 900 * ms - k * 25 * ms);
    g_assert_cmpuint (pop_latency_messages (bus), ==, 1);
  }
  g_assert_false (gst_lingbot_latency_estimate_falling (&e));
  g_assert_cmpuint (gst_test_clock_peek_id_count (tc), ==, 0);
  g_assert_cmpuint (jumps, ==, 1);
  /* (the steps' lines: the clock's thread, done before the crank
   * returns its entry) */
  g_assert_cmpuint (g_atomic_int_get (&lines), ==, 19);

  /* at most 0.2 s in steps: 0.25 s at once (a message), then 8 steps */
  make_fall (&e, &lock);
  gst_lingbot_latency_stepper_start (s, 100 * ms, 200 * ms);
  g_assert_cmpuint (announced_now (&e, &lock), ==, 650 * ms);
  g_assert_cmpuint (pop_latency_messages (bus), ==, 1);
  g_assert_cmpuint (jumps, ==, 2);
  for (guint k = 1; k <= 8; k++)
    g_assert_true (gst_test_clock_crank (tc));
  g_assert_cmpuint (announced_now (&e, &lock), ==, 450 * ms);
  g_assert_cmpuint (pop_latency_messages (bus), ==, 8);
  g_assert_cmpuint (jumps, ==, 2);
  g_assert_cmpuint (gst_test_clock_peek_id_count (tc), ==, 0);

  /* 200 fps: steps 1/30 s apart, 5 ms (a frame) each, not a message
   * every 5 ms */
  make_fall (&e, &lock);
  gst_lingbot_latency_stepper_start (s, 5 * ms, GST_CLOCK_TIME_NONE);
  for (guint k = 1; k <= 90; k++) {
    assert_pending_at (tc, gst_clock_get_time (clock) + GST_SECOND / 30);
    g_assert_true (gst_test_clock_crank (tc));
    g_assert_cmpuint (announced_now (&e, &lock), ==, 900 * ms - k * 5 * ms);
  }
  g_assert_cmpuint (pop_latency_messages (bus), ==, 90);
  g_assert_cmpuint (gst_test_clock_peek_id_count (tc), ==, 0);
  g_assert_cmpuint (jumps, ==, 2);

  /* leaving PLAYING cancels the next step, the return takes them up */
  make_fall (&e, &lock);
  gst_lingbot_latency_stepper_start (s, 100 * ms, GST_CLOCK_TIME_NONE);
  g_assert_true (gst_test_clock_crank (tc));
  g_assert_cmpuint (gst_test_clock_peek_id_count (tc), ==, 1);
  gst_lingbot_latency_stepper_set_playing (s, FALSE);
  g_assert_cmpuint (gst_test_clock_peek_id_count (tc), ==, 0);
  g_assert_cmpuint (announced_now (&e, &lock), ==, 875 * ms);
  gst_lingbot_latency_stepper_set_playing (s, TRUE);
  assert_pending_at (tc, gst_clock_get_time (clock) + 100 * ms);
  g_assert_true (gst_test_clock_crank (tc));
  g_assert_cmpuint (announced_now (&e, &lock), ==, 850 * ms);
  /* freed with a step pending */
  g_assert_cmpuint (gst_test_clock_peek_id_count (tc), ==, 1);
  gst_lingbot_latency_stepper_free (s);
  g_assert_cmpuint (gst_test_clock_peek_id_count (tc), ==, 0);
  g_assert_cmpuint (announced_now (&e, &lock), ==, 850 * ms);

  gst_debug_remove_log_function (count_step_lines);
  gst_element_set_bus (el, NULL);
  gst_object_unref (bus);
  gst_object_unref (el);
  gst_object_unref (clock);
  g_mutex_clear (&lock);
}

int
main (int argc, char **argv)
{
  gst_init (&argc, &argv);
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/chunk-log/bounded", test_bounded);
  g_test_add_func ("/chunk-log/window-default", test_window_default);
  g_test_add_func ("/latency/recovers", test_latency_recovers);
  g_test_add_func ("/latency/steps", test_latency_steps);
  return g_test_run ();
}

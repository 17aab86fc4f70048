/* lingbot-gst: the control schedule: key events in, one key set per chunk
 * out (the offline virtual clock and the live snapshots)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * golden README section 3.3 (key state, timing model); lingbot_model_spec.md
 * 2.1 and B.7 (taps, held set, prefetch while chunks are in flight).
 *
 * The virtual clock is lingbot_control_trace_schedule()'s, made
 * incremental: the events come one at a time (push), with "every event
 * before t is known" (set_horizon) and "no more events" (end) in between,
 * and a chunk is decided only when no event still to come could change
 * the decision: every step of the clock stays below the horizon.  Because
 * the events arrive in time order, a decision taken that way is the one
 * the whole trace gives, so a trace yields the same plan however it is
 * fed.  The state is the key state, the clock, the last few chunks' times
 * and the events not yet reached by the clock: each decision costs the
 * same at chunk 1 and at chunk 10000.
 */
#include "lingbot/control.h"
#include "kernels/error.h"

#include <math.h>
#include <string.h>

#define MAX_WAITING 2           /* submitted chunks waiting to start */
/* Chunks run one after another, so at most one runs at the clock's time,
 * and a chunk is decided only while fewer than MAX_WAITING wait: the
 * chunks not finished at the clock's time are among the last
 * MAX_WAITING + 1.  The ring keeps one more. */
#define RING (MAX_WAITING + 2)

struct _LingbotControlSchedule
{
  guint chunk_size;
  guint fps_n, fps_d;

  /* the input */
  GArray *queue;                /* LingbotControlEvent, not yet applied */
  guint head;                   /* the first of them in queue */
  double last_time;             /* time of the last pushed event */
  double horizon;               /* every event before it is known */
  gboolean ended;

  /* the virtual clock (lingbot_control_schedule_next()) */
  LingbotKeyState vk;
  guint v_base;                 /* presses before the last reset */
  gboolean v_reset;             /* a reset since the last decision */
  double now;
  double last_end;
  guint v_done;                 /* decisions taken */
  double ring_start[RING], ring_end[RING];
  guint ring_n, ring_pos;

  /* the live snapshots (lingbot_control_schedule_take_live()) */
  LingbotKeyState lk;
  guint l_base;
  gboolean l_reset;

  guint n_chunks;               /* chunks handed out, both kinds */
};

static gboolean
check_timing (guint chunk_size, guint fps_n, guint fps_d, GError ** error)
{
  if (chunk_size < 1 || fps_n < 1 || fps_d < 1) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "control schedule: need chunk_size >= 1 and a frame rate "
        "fps_n/fps_d > 0, got chunk_size %u, %u/%u", chunk_size, fps_n, fps_d);
    return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_control_schedule_new:
 * @chunk_size: latent frames per chunk (4)
 * @fps_n: frame rate numerator (16)
 * @fps_d: frame rate denominator (1)
 * @error: return location for a #GError
 *
 * An empty schedule: no events, the virtual clock at 0, nothing held.
 * Feed it with lingbot_control_schedule_push() (events in time order),
 * lingbot_control_schedule_set_horizon() and lingbot_control_schedule_end();
 * take chunks with lingbot_control_schedule_next() (the deterministic
 * virtual clock) or lingbot_control_schedule_take_live() (the key state as
 * it is now).  A chunk k plays lingbot_chunk_video_frames(k, chunk_size)
 * video frames, that many * fps_d / fps_n seconds on the virtual clock.
 * Not thread-safe: the caller locks.
 *
 * Returns: (transfer full): the schedule, or %NULL with
 *   %LINGBOT_ERROR_INVALID_ARGUMENT for a zero chunk size or frame rate.
 */
LingbotControlSchedule *
lingbot_control_schedule_new (guint chunk_size, guint fps_n, guint fps_d,
    GError ** error)
{
  LingbotControlSchedule *s;

  if (!check_timing (chunk_size, fps_n, fps_d, error))
    return NULL;
  s = g_new0 (LingbotControlSchedule, 1);
  s->chunk_size = chunk_size;
  s->fps_n = fps_n;
  s->fps_d = fps_d;
  s->queue = g_array_new (FALSE, FALSE, sizeof (LingbotControlEvent));
  lingbot_control_schedule_reset (s);
  return s;
}

/**
 * lingbot_control_schedule_reset:
 * @sched: a schedule
 *
 * Back to the state of lingbot_control_schedule_new() (events, chunks,
 * key states and clock forgotten; the timing kept), for a new stream.
 */
void
lingbot_control_schedule_reset (LingbotControlSchedule * sched)
{
  g_array_set_size (sched->queue, 0);
  sched->head = 0;
  sched->last_time = 0.0;
  sched->horizon = -INFINITY;
  sched->ended = FALSE;
  lingbot_key_state_init (&sched->vk);
  sched->v_base = 0;
  sched->v_reset = FALSE;
  sched->now = 0.0;
  sched->last_end = 0.0;
  sched->v_done = 0;
  sched->ring_n = sched->ring_pos = 0;
  lingbot_key_state_init (&sched->lk);
  sched->l_base = 0;
  sched->l_reset = FALSE;
  sched->n_chunks = 0;
}

/**
 * lingbot_control_schedule_free:
 * @sched: (transfer full) (nullable): a schedule
 *
 * Frees @sched.
 */
void
lingbot_control_schedule_free (LingbotControlSchedule * sched)
{
  if (sched == NULL)
    return;
  g_array_unref (sched->queue);
  g_free (sched);
}

/**
 * lingbot_control_schedule_set_timing:
 * @sched: a schedule
 * @chunk_size: latent frames per chunk
 * @fps_n: frame rate numerator
 * @fps_d: frame rate denominator
 * @error: return location for a #GError
 *
 * Changes the chunk size and frame rate, for a caller that creates the
 * schedule (and pushes events) before it knows them; allowed until the
 * first chunk is taken.  Setting the values it already has is always
 * allowed.
 *
 * Returns: %TRUE; %FALSE with %LINGBOT_ERROR_INVALID_ARGUMENT for a zero value
 *   or a change after the first chunk.
 */
gboolean
lingbot_control_schedule_set_timing (LingbotControlSchedule * sched,
    guint chunk_size, guint fps_n, guint fps_d, GError ** error)
{
  if (!check_timing (chunk_size, fps_n, fps_d, error))
    return FALSE;
  if (chunk_size == sched->chunk_size && fps_n == sched->fps_n
      && fps_d == sched->fps_d)
    return TRUE;
  if (sched->n_chunks > 0 || sched->v_done > 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "control schedule: chunk size %u at %u/%u fps cannot change to %u "
        "at %u/%u after %u chunks", sched->chunk_size, sched->fps_n,
        sched->fps_d, chunk_size, fps_n, fps_d, sched->n_chunks);
    return FALSE;
  }
  sched->chunk_size = chunk_size;
  sched->fps_n = fps_n;
  sched->fps_d = fps_d;
  return TRUE;
}

static void
apply (LingbotKeyState * ks, guint * base, gboolean * reset,
    const LingbotControlEvent * e)
{
  switch (e->type) {
    case LINGBOT_CONTROL_EVENT_PRESS:
      lingbot_key_state_press (ks, e->key);
      break;
    case LINGBOT_CONTROL_EVENT_RELEASE:
      lingbot_key_state_release (ks, e->key);
      break;
    case LINGBOT_CONTROL_EVENT_RESET:
      /* the revision stays monotonic across resets */
      *base += ks->revision;
      lingbot_key_state_init (ks);
      *reset = TRUE;
      break;
  }
}

/**
 * lingbot_control_schedule_push:
 * @sched: a schedule
 * @event: the next event
 *
 * Adds an event.  Events must come in time order: one earlier than the
 * previous one is taken at the previous one's time (the clock cannot go
 * back).  Since they come in order, an event at t also says that every
 * event before t is known (the horizon moves to t).  The live key state
 * takes the event at once; the virtual clock when it reaches its time.
 * One event may carry several key bits (a record of several keys): a
 * press of W|D is the press of W, then of D.
 *
 * Returns: %TRUE; %FALSE (the event is dropped) after
 *   lingbot_control_schedule_end().
 */
gboolean
lingbot_control_schedule_push (LingbotControlSchedule * sched,
    const LingbotControlEvent * event)
{
  LingbotControlEvent e = *event;

  if (sched->ended)
    return FALSE;
  if (!(e.time_s >= sched->last_time))
    e.time_s = sched->last_time;        /* also a NaN */
  sched->last_time = e.time_s;
  if (e.time_s > sched->horizon)
    sched->horizon = e.time_s;
  g_array_append_val (sched->queue, e);
  apply (&sched->lk, &sched->l_base, &sched->l_reset, &e);
  return TRUE;
}

/**
 * lingbot_control_schedule_set_horizon:
 * @sched: a schedule
 * @time_s: seconds from the session start
 *
 * Says that every event before @time_s has been pushed (an event at
 * exactly @time_s may still come).  The horizon only moves forward.
 */
void
lingbot_control_schedule_set_horizon (LingbotControlSchedule * sched,
    double time_s)
{
  if (time_s > sched->horizon)
    sched->horizon = time_s;
}

/**
 * lingbot_control_schedule_end:
 * @sched: a schedule
 *
 * Says that no more events come: every chunk is decidable from now on.
 */
void
lingbot_control_schedule_end (LingbotControlSchedule * sched)
{
  sched->ended = TRUE;
  sched->horizon = INFINITY;
}

/**
 * lingbot_control_schedule_is_ended:
 * @sched: a schedule
 *
 * Returns: whether lingbot_control_schedule_end() was called.
 */
gboolean
lingbot_control_schedule_is_ended (const LingbotControlSchedule * sched)
{
  return sched->ended;
}

/**
 * lingbot_control_schedule_get_n_queued:
 * @sched: a schedule
 *
 * Returns: the events pushed that the virtual clock has not reached yet
 *   (what the schedule keeps of its input; the others are dropped).
 */
guint
lingbot_control_schedule_get_n_queued (const LingbotControlSchedule * sched)
{
  return sched->queue->len - sched->head;
}

static double
chunk_seconds (const LingbotControlSchedule * s, guint index)
{
  return (double) lingbot_chunk_video_frames (index, s->chunk_size) *
      (double) s->fps_d / (double) s->fps_n;
}

static void
ring_add (LingbotControlSchedule * s, double start, double end)
{
  s->ring_start[s->ring_pos] = start;
  s->ring_end[s->ring_pos] = end;
  s->ring_pos = (s->ring_pos + 1) % RING;
  if (s->ring_n < RING)
    s->ring_n++;
}

/* Fills @out with the next virtual chunk, requested now with @keys
 * (@is_tap) and starting at @start, and books it on the clock: it ends
 * its playback time later; the pending reset goes with it. */
static void
take_chunk (LingbotControlSchedule * s, guint keys, gboolean is_tap,
    double start, LingbotScheduleChunk * out)
{
  out->index = s->v_done;
  out->keys = keys;
  out->is_tap = is_tap;
  out->reset_before = s->v_reset;
  out->revision = s->v_base + s->vk.revision;
  out->request_time_s = s->now;
  out->start_time_s = start;
  out->end_time_s = start + chunk_seconds (s, s->v_done);
  s->last_end = out->end_time_s;
  ring_add (s, out->start_time_s, out->end_time_s);
  s->v_reset = FALSE;
  s->v_done++;
}

/* one decision of the virtual clock, lingbot_control_trace_schedule()'s
 * loop body repeated until it takes a chunk or cannot go on without events
 * it does not know */
static LingbotScheduleStatus
decide (LingbotControlSchedule * s, LingbotScheduleChunk * out)
{
  for (;;) {
    const LingbotControlEvent *q;
    guint n_q, waiting = 0, keys = 0;
    gboolean idle, took = FALSE, is_tap = FALSE;
    double next = INFINITY;

    /* the events at or before now must all be known */
    if (!(s->now < s->horizon))
      return LINGBOT_SCHEDULE_WAIT;
    q = (const LingbotControlEvent *) s->queue->data;
    n_q = s->queue->len;
    for (; s->head < n_q && q[s->head].time_s <= s->now; s->head++)
      apply (&s->vk, &s->v_base, &s->v_reset, &q[s->head]);
    if (s->head == n_q) {
      g_array_set_size (s->queue, 0);
      s->head = 0;
      n_q = 0;
    } else if (s->head >= 64 && 2 * s->head >= n_q) {
      g_array_remove_range (s->queue, 0, s->head);
      s->head = 0;
      n_q = s->queue->len;
      q = (const LingbotControlEvent *) s->queue->data;
    }

    idle = !(s->last_end > s->now);
    for (guint i = 0; i < s->ring_n; i++)
      if (s->ring_start[i] > s->now)
        waiting++;

    if (s->vk.has_tap && (idle || waiting < MAX_WAITING))
      took = lingbot_key_state_take (&s->vk, idle, &keys, &is_tap);
    else if (!s->vk.has_tap && idle)
      took = lingbot_key_state_take (&s->vk, TRUE, &keys, &is_tap);

    if (took) {
      take_chunk (s, keys, is_tap, MAX (s->now, s->last_end), out);
      return LINGBOT_SCHEDULE_CHUNK;
    }

    if (s->head < n_q)
      next = q[s->head].time_s;
    for (guint i = 0; i < s->ring_n; i++) {
      if (s->ring_start[i] > s->now && s->ring_start[i] < next)
        next = s->ring_start[i];
      if (s->ring_end[i] > s->now && s->ring_end[i] < next)
        next = s->ring_end[i];
    }
    if (!isfinite (next)) {
      if (!s->ended)
        return LINGBOT_SCHEDULE_WAIT;
      /* nothing held, no input left: the chunks after the events, with no
       * key, back to back (nothing runs now: idle) */
      take_chunk (s, 0, FALSE, s->now, out);
      return LINGBOT_SCHEDULE_ENDED;
    }
    /* an event not known yet could come before next */
    if (!(next < s->horizon))
      return LINGBOT_SCHEDULE_WAIT;
    s->now = next;
  }
}

/**
 * lingbot_control_schedule_next:
 * @sched: a schedule
 * @out: (out caller-allocates): the chunk, with %LINGBOT_SCHEDULE_CHUNK or
 *   %LINGBOT_SCHEDULE_ENDED
 *
 * Decides the next chunk on the virtual clock of golden README 3.3, as
 * lingbot_control_trace_schedule() does for a whole trace: each chunk takes
 * exactly its playback time, one at a time, starting when requested or
 * when the previous one ends; the events at or before the clock's time are
 * applied before each decision; a decision takes a pending tap (also while
 * chunks are in flight, as long as fewer than 2 submitted chunks wait to
 * start) or, when idle, the held set; otherwise the clock advances to the
 * next event, chunk start or chunk end.  The decision is taken only when
 * no event still to come could change it (every clock step below the
 * horizon, or lingbot_control_schedule_end() called); then it is the one
 * the whole trace gives.  @out->revision counts the presses applied at the
 * decision (one per newly held key, not restarted by resets).
 *
 * When chunks were taken with lingbot_control_schedule_take_live() since
 * the clock's last decision, the clock first decides (and drops) those
 * chunks, so that chunk k is always the virtual clock's chunk k.
 *
 * Returns: %LINGBOT_SCHEDULE_CHUNK (*@out is the chunk);
 *   %LINGBOT_SCHEDULE_WAIT when the chunk depends on events not known yet
 *   (push more, move the horizon or end; nothing was consumed); or
 *   %LINGBOT_SCHEDULE_ENDED when the events ended with nothing held:
 *   *@out is then the chunk that follows them, no key held (@keys 0,
 *   @is_tap %FALSE, @reset_before for a reset after the last chunk, only
 *   on the first of them), requested when the previous one ends.  Both
 *   count as a chunk.
 */
LingbotScheduleStatus
lingbot_control_schedule_next (LingbotControlSchedule * sched,
    LingbotScheduleChunk * out)
{
  LingbotScheduleStatus st;

  while (sched->v_done < sched->n_chunks) {
    LingbotScheduleChunk skipped;
    if (decide (sched, &skipped) == LINGBOT_SCHEDULE_WAIT)
      return LINGBOT_SCHEDULE_WAIT;
  }
  st = decide (sched, out);
  if (st != LINGBOT_SCHEDULE_WAIT)
    sched->n_chunks++;
  return st;
}

/**
 * lingbot_control_schedule_take_live:
 * @sched: a schedule
 * @out: (out caller-allocates): the chunk, when one is taken
 *
 * The live choice when a chunk starts (the streaming service with nothing
 * in flight, spec B.7): a pending tap (the held set stored by the last
 * press, consumed), else the held set if not empty, of the key state with
 * every pushed event applied, regardless of the horizon.  @out->revision
 * is the tap's revision or, for the held set, the presses so far (not
 * restarted by resets); @out->reset_before says a reset was pushed since
 * the last chunk taken here.  The virtual-clock times are NAN.
 *
 * Returns: %TRUE with *@out when a chunk should be generated now; %FALSE
 *   when nothing is held and no tap is pending (wait for events).
 */
gboolean
lingbot_control_schedule_take_live (LingbotControlSchedule * sched,
    LingbotScheduleChunk * out)
{
  guint keys = 0;
  gboolean is_tap = FALSE;

  if (!lingbot_key_state_take (&sched->lk, TRUE, &keys, &is_tap))
    return FALSE;
  out->index = sched->n_chunks;
  out->keys = keys;
  out->is_tap = is_tap;
  out->reset_before = sched->l_reset;
  out->revision = sched->l_base + (is_tap ? sched->lk.tap_revision :
      sched->lk.revision);
  out->request_time_s = out->start_time_s = out->end_time_s = NAN;
  sched->l_reset = FALSE;
  sched->n_chunks++;
  /* let the virtual clock follow as far as it can, so that its queue of
   * events does not grow while chunks are taken live */
  while (sched->v_done < sched->n_chunks) {
    LingbotScheduleChunk skipped;
    if (decide (sched, &skipped) == LINGBOT_SCHEDULE_WAIT)
      break;
  }
  return TRUE;
}

/**
 * lingbot_control_schedule_peek_live:
 * @sched: a schedule
 * @out: (out caller-allocates): the chunk lingbot_control_schedule_take_live()
 *   would take now
 *
 * What lingbot_control_schedule_take_live() would take now, without taking
 * it (no tap consumed, no chunk counted, the pending reset kept): for a
 * chunk in flight that may restart with a newer key state
 * (lingbot_control_schedule_retake_live()).  @out->index is the chunk
 * take_live would count.
 *
 * Returns: %TRUE with *@out when take_live would take a chunk; %FALSE
 *   when nothing is held and no tap is pending.
 */
gboolean
lingbot_control_schedule_peek_live (const LingbotControlSchedule * sched,
    LingbotScheduleChunk * out)
{
  const LingbotKeyState *lk = &sched->lk;

  if (!lk->has_tap && !lk->held)
    return FALSE;
  out->index = sched->n_chunks;
  out->keys = lk->has_tap ? lk->tap : lk->held;
  out->is_tap = lk->has_tap;
  out->reset_before = sched->l_reset;
  out->revision = sched->l_base + (lk->has_tap ? lk->tap_revision :
      lk->revision);
  out->request_time_s = out->start_time_s = out->end_time_s = NAN;
  return TRUE;
}

/**
 * lingbot_control_schedule_retake_live:
 * @sched: a schedule that took a chunk live
 * @out: (out caller-allocates): the chunk, when one is taken
 *
 * Takes the key state again for the chunk lingbot_control_schedule_take_live()
 * took last (a restart of that chunk with newer keys): as take_live (a
 * pending tap consumed, else the held set), but the chunk is not counted
 * again (@out->index is the last one's) and a pending reset is left for
 * the next chunk (@out->reset_before is %FALSE: the chunk in flight has
 * moved its camera already).
 *
 * Returns: %TRUE with *@out when there is a key state to take; %FALSE
 *   (nothing changed) when nothing is held and no tap is pending, or no
 *   chunk was taken yet.
 */
gboolean
lingbot_control_schedule_retake_live (LingbotControlSchedule * sched,
    LingbotScheduleChunk * out)
{
  guint keys = 0;
  gboolean is_tap = FALSE;

  if (sched->n_chunks == 0 ||
      !lingbot_key_state_take (&sched->lk, TRUE, &keys, &is_tap))
    return FALSE;
  out->index = sched->n_chunks - 1;
  out->keys = keys;
  out->is_tap = is_tap;
  out->reset_before = FALSE;
  out->revision = sched->l_base + (is_tap ? sched->lk.tap_revision :
      sched->lk.revision);
  out->request_time_s = out->start_time_s = out->end_time_s = NAN;
  return TRUE;
}

/* lingbot-gst: lingbotgen, the chunk task
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The streaming thread: one chunk per iteration (keys, generate, the
 * latent buffer and its chunk message), live pacing and stamping, the
 * compute latency, the preview, pause and reset of the stream.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>

#include "gst/gstlingbotgen-private.h"

#define GST_CAT_DEFAULT gst_lingbot_gen_debug

/* ---- the streaming thread ---- */

static void
post_chunk_message (GstLingbotGen * self, const LingbotChunkStats * st,
    const GstLingbotGenKeys * ck, GstClockTime pts, GstClockTime start,
    GstClockTime ready, GstClockTime latency, gboolean cut)
{
  static const char *const kinds[] = { "none", "tap", "held" };
  g_autofree char *keys = lingbot_keys_to_string (st->keys);
  GstStructure *s = gst_structure_new ("lingbot-chunk",
      "index", G_TYPE_UINT64, st->index,
      "frames", G_TYPE_INT, st->frames,
      "keys", G_TYPE_UINT, st->keys,
      "keys-string", G_TYPE_STRING, keys,
      "revision", G_TYPE_UINT, ck->revision,
      "tap", G_TYPE_BOOLEAN, ck->kind == GST_LINGBOT_GEN_SNAPSHOT_TAP,
      "snapshot", G_TYPE_STRING, kinds[ck->kind],
      "dit-seconds", G_TYPE_DOUBLE, st->dit_seconds,
      "vae-seconds", G_TYPE_DOUBLE, st->vae_seconds,
      "compute-seconds", G_TYPE_DOUBLE, st->compute_seconds,
      "pts", G_TYPE_UINT64, pts,
      "running-time", G_TYPE_UINT64, start,
      "ready-time", G_TYPE_UINT64, ready,
      "latency", G_TYPE_UINT64, latency,
      "restarts", G_TYPE_UINT, st->restarts,
      "restart-passes", G_TYPE_UINT, st->restart_passes,
      "cut", G_TYPE_BOOLEAN, cut, NULL);

  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_element (GST_OBJECT (self), s));
}

/* The chunk's latents as system-memory bytes (caps without
 * memory:LingbotDevice): read out of the session, which then lets the
 * chunk go (the bytes carry it). */
static GstBuffer *
latents_to_buffer (LingbotSession * s, guint64 chunk, GError ** error)
{
  const gsize nbytes = lingbot_session_get_chunk_bytes (s);
  GstBuffer *buf;
  GstMapInfo map;
  gboolean ok;

  buf = gst_lingbot_buffer_try_new (nbytes);
  if (buf == NULL) {
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_DEVICE, "cannot allocate %"
        G_GSIZE_FORMAT " bytes of system memory for the latents", nbytes);
    return NULL;
  }
  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  ok = lingbot_session_read_chunk (s, chunk, map.data, map.size, error);
  gst_buffer_unmap (buf, &map);
  lingbot_session_release_chunk (s, chunk);
  if (!ok)
    gst_clear_buffer (&buf);
  return buf;
}

/* Pauses the task.  GST_FLOW_EOS: EOS downstream (after stream-start and
 * caps when nothing went out yet).  A fatal flow return: the error is
 * posted (unless @posted: the caller posted its own) and EOS follows only
 * when chunks went out before it, so that what was generated can be
 * finished downstream; an error before the first chunk pushes nothing (an
 * EOS would preroll the sinks, and a pipeline shutting down on the error
 * could wait on them). */
static void
gst_lingbot_gen_pause (GstLingbotGen * self, GstFlowReturn ret, gboolean posted)
{
  GST_DEBUG_OBJECT (self, "pausing task: %s", gst_flow_get_name (ret));
  gst_pad_pause_task (self->srcpad);
  if (ret == GST_FLOW_EOS) {
    if (!self->caps_sent && self->handle)
      gst_lingbot_gen_session_push_stream_start (self);
    else if (!self->caps_sent)
      /* an EOS before the session existed (send_event): no caps to say */
      gst_pad_push_event (self->srcpad,
          gst_event_new_stream_start ("lingbot-latents/none"));
    gst_pad_push_event (self->srcpad, gst_event_new_eos ());
  } else if (ret == GST_FLOW_NOT_LINKED || ret < GST_FLOW_EOS) {
    if (!posted)
      GST_ELEMENT_FLOW_ERROR (self, ret);
    if (self->chunk > 0)
      gst_pad_push_event (self->srcpad, gst_event_new_eos ());
  }
}

/* Offers the session to a decoder downstream before the first chunk
 * (GST_LINGBOT_ATTACH_DECODER_QUERY): lingbotvaedec moves the decode onto
 * its own worker group, fed by a tensor channel from the DiT ranks, so
 * that chunk k decodes while chunk k + 1 generates.  Without an answer the
 * decode stays serial. */
static void
attach_decoder (GstLingbotGen * self)
{
  GstQuery *q = gst_query_new_custom (GST_QUERY_CUSTOM,
      gst_structure_new (GST_LINGBOT_ATTACH_DECODER_QUERY, "handle",
          GST_TYPE_LINGBOT_SESSION_HANDLE, self->handle, NULL));
  gboolean attached = FALSE;

  if (gst_pad_peer_query (self->srcpad, q))
    gst_structure_get_boolean (gst_query_get_structure (q), "attached",
        &attached);
  gst_query_unref (q);
  GST_INFO_OBJECT (self, "decode %s", attached ? "beside the generation, "
      "on its own ranks" : "serial (no decoder attached)");
}

/* The running time of the element's clock now, GST_CLOCK_TIME_NONE
 * without a clock. */
static GstClockTime
running_time_now (GstLingbotGen * self)
{
  GstClock *clock = gst_element_get_clock (GST_ELEMENT (self));
  GstClockTime now, base;

  if (clock == NULL)
    return GST_CLOCK_TIME_NONE;
  now = gst_clock_get_time (clock);
  base = gst_element_get_base_time (GST_ELEMENT (self));
  gst_object_unref (clock);
  return now > base ? now - base : 0;
}

/* The preview (GstLingbotGen:preview): a serialized custom downstream
 * event (GST_LINGBOT_PREVIEW_EVENT) with the session and the running time
 * of the session's start: 0 before PLAYING (a live session is made in
 * PAUSED), the running time now when PLAYING; 0 offline. */
static void
push_preview (GstLingbotGen * self, gboolean live)
{
  GstClockTime pts = 0;
  GstStructure *s;

  if (live && GST_STATE (self) == GST_STATE_PLAYING) {
    pts = running_time_now (self);
    if (!GST_CLOCK_TIME_IS_VALID (pts))
      pts = 0;
  }
  s = gst_structure_new (GST_LINGBOT_PREVIEW_EVENT,
      "handle", GST_TYPE_LINGBOT_SESSION_HANDLE, self->handle,
      "pts", G_TYPE_UINT64, (guint64) pts, NULL);
  GST_DEBUG_OBJECT (self, "preview at %" GST_TIME_FORMAT, GST_TIME_ARGS (pts));
  /* live: the preview is a frame like the others, so the first chunk is
   * stamped after its one frame (live_pts(): timestamps increase) */
  if (live && self->session_fps_n > 0) {
    GstClockTime end = pts + gst_util_uint64_scale (GST_SECOND,
        (guint64) self->session_fps_d, (guint64) self->session_fps_n);
    if (!GST_CLOCK_TIME_IS_VALID (self->next_pts) || self->next_pts < end)
      self->next_pts = end;
  }
  gst_pad_push_event (self->srcpad,
      gst_event_new_custom (GST_EVENT_CUSTOM_DOWNSTREAM, s));
}

/* GST_LINGBOT_REPEAT_EVENT (the streaming thread, without the lock,
 * while a live session waits for a key): the last frame again at the
 * running time now, or at the end of the frames stamped when that is
 * later; the next chunk is stamped after its one frame, as after the
 * preview, and never before it (no key-cut back over it). */
static void
push_repeat (GstLingbotGen * self)
{
  GstClockTime pts = running_time_now (self), frame;

  if (self->session_fps_n <= 0)
    return;
  if (!GST_CLOCK_TIME_IS_VALID (pts))
    pts = 0;
  if (GST_CLOCK_TIME_IS_VALID (self->next_pts) && pts < self->next_pts)
    pts = self->next_pts;
  frame = gst_util_uint64_scale (GST_SECOND, (guint64) self->session_fps_d,
      (guint64) self->session_fps_n);
  self->next_pts = pts + frame;
  self->last_pts = pts;
  self->cut_next = FALSE;
  GST_DEBUG_OBJECT (self, "the last frame again at %" GST_TIME_FORMAT,
      GST_TIME_ARGS (pts));
  gst_pad_push_event (self->srcpad,
      gst_event_new_custom (GST_EVENT_CUSTOM_DOWNSTREAM,
          gst_structure_new (GST_LINGBOT_REPEAT_EVENT, "pts", G_TYPE_UINT64,
              (guint64) pts, NULL)));
}

typedef enum
{
  WAIT_OK,
  WAIT_FLUSHING,
  WAIT_EOS,
  WAIT_PAUSED,                  /* PLAYING -> PAUSED: wait_playing () again */
} WaitResult;

/* A live source makes nothing while PAUSED: waits for PLAYING (or a flush,
 * or a pending EOS). */
static WaitResult
wait_playing (GstLingbotGen * self)
{
  WaitResult r;

  g_mutex_lock (&self->lock);
  while (!self->playing && !self->flushing && !self->eos_pending)
    g_cond_wait (&self->cond, &self->lock);
  r = self->flushing ? WAIT_FLUSHING : self->eos_pending ? WAIT_EOS : WAIT_OK;
  g_mutex_unlock (&self->lock);
  return r;
}

/* (lock) A live session's announced compute latency (ns); @chunk, one
 * chunk's duration (real time), before a chunk was measured */
GstClockTime
gst_lingbot_gen_task_compute_latency_unlocked (GstLingbotGen * self,
    GstClockTime chunk)
{
  return GST_CLOCK_TIME_IS_VALID (self->compute_latency.announced) ?
      self->compute_latency.announced : chunk;
}

/* A live source does not run ahead of the clock: the next chunk starts no
 * earlier than the running time its first frame is due (next_pts).  The
 * latency the element reports (the compute latency) is what lets it be
 * made after that: a chunk started at its due time is ready within the
 * latency, so it keeps its PTS and reaches the sink in time, and its keys
 * are taken as late as possible.  (Starting it the compute estimate before
 * its due time, as before, spent that latency twice: a key waited one more
 * latency for the screen.)  Without pacing, a generator faster than real
 * time behind an unbounded queue made minutes of video before a key showed.
 * Waits on cond (flushing, EOS and PAUSED wake it). */
/* (lock) whether the live key state would give the next chunk other keys
 * than the previous one (a newer tap or a changed held set; not a pending
 * reset, nor a release of every key): what on_restart() asks of a chunk
 * in flight */
static gboolean
key_change_unlocked (GstLingbotGen * self)
{
  LingbotScheduleChunk c;

  return self->have_last_keys
      && lingbot_control_schedule_peek_live (self->schedule, &c)
      && !c.reset_before && c.keys != 0 && c.keys != self->last_keys;
}

static WaitResult
pace_live (GstLingbotGen * self)
{
  GstClock *clock = gst_element_get_clock (GST_ELEMENT (self));
  WaitResult r = WAIT_OK;
  gboolean cut;

  GST_OBJECT_LOCK (self);
  cut = self->key_cut;
  GST_OBJECT_UNLOCK (self);
  if (clock == NULL)
    return WAIT_OK;
  g_mutex_lock (&self->lock);
  while (GST_CLOCK_TIME_IS_VALID (self->next_pts)) {
    GstClockTime due =
        gst_element_get_base_time (GST_ELEMENT (self)) + self->next_pts;
    GstClockTime now;

    if (self->flushing || self->eos_pending || !self->playing) {
      r = self->flushing ? WAIT_FLUSHING : self->eos_pending ? WAIT_EOS :
          WAIT_PAUSED;
      break;
    }
    now = gst_clock_get_time (clock);
    if (now >= due)
      break;
    if (cut && key_change_unlocked (self)) {
      GST_DEBUG_OBJECT (self, "a key change %" GST_TIME_FORMAT " before "
          "chunk %" G_GUINT64_FORMAT " is due: it starts now (key-cut)",
          GST_TIME_ARGS (due - now), self->chunk);
      self->cut_next = TRUE;
      break;
    }
    g_cond_wait_until (&self->cond, &self->lock, g_get_monotonic_time () +
        (gint64) ((due - now) / GST_USECOND) + 1);
  }
  g_mutex_unlock (&self->lock);
  gst_object_unref (clock);
  return r;
}

/* A live session's latency share (docs/elements.md "Latency"): a chunk's
 * compute from the last chunks' measured times (#GstLingbotLatencyEstimate:
 * the largest of the last 4 plus an eighth, re-announced when a chunk is
 * above it or it falls by more than a tenth, so it recovers 4 chunks after
 * a slow one); GST_MESSAGE_LATENCY is posted when it moves (the pipeline
 * then re-distributes it): up at once, down a quarter of a frame at a
 * time, a frame apart (#GstLingbotLatencyStepper), so that the frames
 * already at a sink stay on time.  @measured: a chunk's compute time; with
 * @late > 0, a sink's QoS lateness instead: the newest chunk took the
 * time the announced figure stands for (less its eighth) plus @late. */
void
gst_lingbot_gen_task_note_compute_time (GstLingbotGen * self,
    GstClockTime measured, GstClockTimeDiff late)
{
  GstClockTime old, now, frame = GST_CLOCK_TIME_NONE;
  gboolean live, automatic, moved, falling;

  GST_OBJECT_LOCK (self);
  live = self->live;
  automatic = !GST_CLOCK_TIME_IS_VALID (self->latency);
  GST_OBJECT_UNLOCK (self);
  g_mutex_lock (&self->lock);
  old = self->compute_latency.announced;
  if (late > 0 && GST_CLOCK_TIME_IS_VALID (old))
    /* the time the figure stands for (without its eighth) plus the
     * lateness: the figure grows by the lateness and its eighth, not by
     * another eighth of itself */
    moved = gst_lingbot_latency_estimate_raise (&self->compute_latency,
        old - old / 9 + (GstClockTime) late);
  else if (late > 0)
    moved = FALSE;
  else
    moved = gst_lingbot_latency_estimate_add (&self->compute_latency, measured);
  /* a fall is taken in steps while the figure is distributed, at once
   * otherwise */
  falling = gst_lingbot_latency_estimate_falling (&self->compute_latency);
  if (falling && !(live && automatic))
    gst_lingbot_latency_estimate_step (&self->compute_latency,
        GST_CLOCK_TIME_NONE);
  if (self->session_fps_n > 0)
    frame = gst_util_uint64_scale (GST_SECOND, (guint64) self->session_fps_d,
        (guint64) self->session_fps_n);
  now = self->compute_latency.announced;
  /* the frames stamped so far count on the old figure: their QoS says
   * nothing new after a move up (each late frame of a chunk would raise
   * the figure again) */
  if (moved)
    self->qos_from = self->stamped_end;
  g_mutex_unlock (&self->lock);
  if (falling && live && automatic)
    gst_lingbot_latency_stepper_start (self->latency_stepper, frame,
        gst_lingbot_gen_task_chunk_duration (self));
  if (moved && live && automatic) {
    GST_INFO_OBJECT (self, "compute latency %" GST_TIME_FORMAT " -> %"
        GST_TIME_FORMAT ": posting a latency message", GST_TIME_ARGS (old),
        GST_TIME_ARGS (now));
    gst_element_post_message (GST_ELEMENT (self),
        gst_message_new_latency (GST_OBJECT (self)));
  }
}

/* Live: notes a chunk's @compute time and returns the latency its frames
 * are stamped against: the `latency` property when set, else the
 * announced compute latency. */
static GstClockTime
live_latency (GstLingbotGen * self, GstClockTime compute)
{
  GstClockTime fixed, lat, chunk = gst_lingbot_gen_task_chunk_duration (self);

  gst_lingbot_gen_task_note_compute_time (self, compute, 0);
  GST_OBJECT_LOCK (self);
  fixed = self->latency;
  GST_OBJECT_UNLOCK (self);
  if (GST_CLOCK_TIME_IS_VALID (fixed))
    return fixed;
  g_mutex_lock (&self->lock);
  lat = gst_lingbot_gen_task_compute_latency_unlocked (self, chunk);
  g_mutex_unlock (&self->lock);
  return lat;
}

/* Live (docs/elements.md "Timestamps"): a chunk ready at running time
 * @ready is stamped no earlier than it can be shown, @ready less the
 * @latency it is reported with, and never before the end of the previous
 * chunk (timestamps increase), except a chunk started early on a key
 * change (key-cut, *@cut set): then as early as it can be shown, one frame
 * after the previous chunk's PTS at the earliest.  A session slower than
 * real time so leaves a gap before the chunk (fewer frames, not older
 * ones); a QoS message says so: jitter = the gap (ns), stats in frames
 * (DEFAULT): the frames delivered and those the gaps left out so far.  A
 * chunk that waited for a key until @idle_until (else NONE) counts the gap
 * from there: no frame was due while nothing was held. */
static GstClockTime
live_pts (GstLingbotGen * self, GstClockTime idle_until, GstClockTime ready,
    GstClockTime latency, int frames, gboolean * cut)
{
  GstClockTime earliest = ready > latency ? ready - latency : 0, gap, from;
  GstMessage *msg;
  guint64 skipped;

  *cut = FALSE;
  if (!GST_CLOCK_TIME_IS_VALID (self->next_pts))
    return earliest;
  if (earliest < self->next_pts && self->cut_next
      && GST_CLOCK_TIME_IS_VALID (self->last_pts)) {
    /* key-cut: as early as it can be shown, after at least one frame of
     * the previous chunk (timestamps go back to there) */
    GstClockTime floor = self->last_pts + gst_util_uint64_scale (GST_SECOND,
        (guint64) self->session_fps_d, self->session_fps_n);

    if (floor < self->next_pts) {
      *cut = TRUE;
      GST_INFO_OBJECT (self, "chunk %" G_GUINT64_FORMAT " (a key change) "
          "stamped %" GST_TIME_FORMAT " before the end of the previous one",
          self->chunk, GST_TIME_ARGS (self->next_pts - MAX (earliest, floor)));
      return MAX (earliest, floor);
    }
  }
  if (earliest <= self->next_pts)
    return self->next_pts;
  from = self->next_pts;
  if (GST_CLOCK_TIME_IS_VALID (idle_until) && idle_until > from)
    from = idle_until;
  if (earliest <= from) {
    GST_DEBUG_OBJECT (self, "chunk %" G_GUINT64_FORMAT " stamped %"
        GST_TIME_FORMAT " after the end of the previous one: it waited for "
        "a key", self->chunk, GST_TIME_ARGS (earliest - self->next_pts));
    return earliest;
  }
  gap = earliest - from;
  skipped = gst_util_uint64_scale (gap, self->session_fps_n,
      (guint64) self->session_fps_d * GST_SECOND);
  self->frames_skipped += skipped;
  GST_INFO_OBJECT (self, "chunk %" G_GUINT64_FORMAT " is %" GST_TIME_FORMAT
      " behind real time: stamped after a gap of %" G_GUINT64_FORMAT
      " frames", self->chunk, GST_TIME_ARGS (gap), skipped);
  msg = gst_message_new_qos (GST_OBJECT (self), TRUE, earliest, earliest,
      earliest, gst_util_uint64_scale (frames,
          (guint64) self->session_fps_d * GST_SECOND, self->session_fps_n));
  gst_message_set_qos_values (msg, (gint64) gap, 1.0, 1000000);
  gst_message_set_qos_stats (msg, GST_FORMAT_DEFAULT, self->frames_out +
      (guint64) frames, self->frames_skipped);
  gst_element_post_message (GST_ELEMENT (self), msg);
  return earliest;
}

static void
gst_lingbot_gen_loop (GstLingbotGen * self)
{
  g_autoptr (GError) error = NULL;
  LingbotChunkStats stats = { 0 };
  GstLingbotSessionHandle *h;
  GstBuffer *buf;
  GstFlowReturn ret;
  gint attempt;
  gboolean has_control, live, preview, ok;
  GstClockTime start = GST_CLOCK_TIME_NONE, pts;
  GstClockTime ready = GST_CLOCK_TIME_NONE, latency = GST_CLOCK_TIME_NONE;
  guint64 spills;
  gint64 end_us;
  GstLingbotChunkMeta *meta;
  GstLingbotChunkTimes times = { 0 };
  GstLingbotGenKeys ck = { 0 };
  GstLingbotGenKeysResult kr;
  gboolean cut = FALSE;

  has_control = gst_lingbot_gen_control_has_upstream (self->control_pad);
  GST_OBJECT_LOCK (self);
  live = self->live;
  preview = self->preview;
  GST_OBJECT_UNLOCK (self);

  if (self->handle == NULL) {
    gboolean need_image, flushing, eos;
    GstLingbotGenFormat format;

    /* wait for what the session is created from: the image from the pad;
     * the control stream's caps, which say whether a POSES record comes,
     * and that record */
    GST_OBJECT_LOCK (self);
    need_image = self->image_location == NULL && self->image_pad != NULL
        && gst_lingbot_gen_control_has_upstream (self->image_pad);
    GST_OBJECT_UNLOCK (self);
    g_mutex_lock (&self->lock);
    while (!self->flushing && !self->eos_pending
        && ((need_image && !self->image && !self->image_eos)
            || (has_control && !self->control_eos && (!self->control_caps
                    || (self->poses_expected && !self->poses)))))
      g_cond_wait (&self->cond, &self->lock);
    flushing = self->flushing;
    eos = self->eos_pending;
    g_mutex_unlock (&self->lock);
    if (flushing) {
      gst_lingbot_gen_pause (self, GST_FLOW_FLUSHING, TRUE);
      return;
    }
    if (eos) {
      GST_INFO_OBJECT (self, "EOS before the session started");
      gst_lingbot_gen_pause (self, GST_FLOW_EOS, FALSE);
      return;
    }

    if (!gst_lingbot_gen_session_choose_format (self, &format, &error)
        || !gst_lingbot_gen_session_create (self, &format, &error)) {
      /* a missing or unreadable input keeps its RESOURCE code, bad
       * settings LIBRARY/SETTINGS, the rest STREAM/FAILED; posted once
       * the state change that started us has returned (the session fails
       * in milliseconds, while the sources after this element are still
       * being started) */
      gst_lingbot_wait_state_change_done (GST_ELEMENT (self), &self->lock,
          &self->cond, &self->flushing);
      if (g_error_matches (error, LINGBOT_ERROR, LINGBOT_ERROR_UNSUPPORTED))
        GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, ("%s", error->message),
            (NULL));
      else
        gst_lingbot_post_error (GST_ELEMENT (self), error,
            g_error_matches (error, LINGBOT_ERROR,
                LINGBOT_ERROR_INVALID_ARGUMENT) ? GST_LINGBOT_ERROR_CONTEXT_OPEN
            : GST_LINGBOT_ERROR_CONTEXT_STREAM, error->message,
            "creating the session");
      gst_lingbot_gen_pause (self, GST_FLOW_ERROR, TRUE);
      return;
    }
    gst_lingbot_gen_session_push_stream_start (self);
    attach_decoder (self);
    if (preview)
      push_preview (self, live);
  }
  h = self->handle;

  if (lingbot_session_is_done (h->session)) {
    gst_lingbot_gen_pause (self, GST_FLOW_EOS, FALSE);
    return;
  }
  if (live) {
    WaitResult wr = wait_playing (self);

    if (wr == WAIT_OK)
      wr = pace_live (self);
    if (wr == WAIT_PAUSED)
      return;
    if (wr != WAIT_OK) {
      gst_lingbot_gen_pause (self, wr == WAIT_EOS ? GST_FLOW_EOS :
          GST_FLOW_FLUSHING, FALSE);
      return;
    }
  }

  g_mutex_lock (&self->lock);
  while ((kr = gst_lingbot_gen_control_take_keys_unlocked (self, live,
              has_control, &ck)) == GST_LINGBOT_GEN_KEYS_REPEAT) {
    g_mutex_unlock (&self->lock);
    push_repeat (self);
    g_mutex_lock (&self->lock);
  }
  if (kr == GST_LINGBOT_GEN_KEYS_OK && self->eos_pending)
    kr = GST_LINGBOT_GEN_KEYS_DONE;
  g_mutex_unlock (&self->lock);
  if (kr == GST_LINGBOT_GEN_KEYS_FLUSHING) {
    gst_lingbot_gen_pause (self, GST_FLOW_FLUSHING, TRUE);
    return;
  }
  if (kr == GST_LINGBOT_GEN_KEYS_DONE) {
    GST_INFO_OBJECT (self, "control ended with nothing held, or EOS, after "
        "%" G_GUINT64_FORMAT " chunks", self->chunk);
    gst_lingbot_gen_pause (self, GST_FLOW_EOS, FALSE);
    return;
  }

  /* live: the chunk's first frame is stamped with the running time at
   * which its generation starts */
  if (live)
    start = running_time_now (self);

  /* (the session frees the chunk's slot first: a chunk a buffer still
   * holds and no decoder claimed is moved to host memory) */
  spills = lingbot_session_get_n_spills (h->session);
  if (ck.reset)
    lingbot_control_reset_pose (lingbot_session_get_control (h->session));
  attempt = g_atomic_int_add (&self->attempt, 1) + 1;
  g_mutex_lock (&self->lock);
  self->error_attempt = attempt;
  /* live keys from the control stream may be taken again while the chunk
   * is made (on_restart()) */
  self->restart_ok = live && ck.kind != GST_LINGBOT_GEN_SNAPSHOT_NONE;
  self->restarted = FALSE;
  g_mutex_unlock (&self->lock);
  ok = lingbot_session_generate (h->session, ck.keys, &stats, &error);
  end_us = g_get_monotonic_time ();
  g_mutex_lock (&self->lock);
  self->restart_ok = FALSE;
  if (self->restarted)
    gst_lingbot_gen_control_keys_from (&ck, &self->restart_chunk);
  g_mutex_unlock (&self->lock);
  gst_lingbot_device_memory_add_preserved ((guint)
      (lingbot_session_get_n_spills (h->session) - spills));
  if (!ok)
    buf = NULL;
  else if (self->device_memory) {
    buf = gst_buffer_new ();
    gst_buffer_append_memory (buf, gst_lingbot_device_memory_new (h,
            self->chunk));
  } else {
    buf = latents_to_buffer (h->session, self->chunk, &error);
  }
  if (buf == NULL
      && g_error_matches (error, LINGBOT_ERROR, LINGBOT_ERROR_CANCELLED)) {
    /* PLAYING -> NULL: the chunk is dropped, the session stays valid */
    GST_INFO_OBJECT (self, "%s", error->message);
    gst_lingbot_gen_pause (self, GST_FLOW_FLUSHING, TRUE);
    return;
  }
  if (buf == NULL) {
    if (gst_lingbot_gen_session_claim_error (self, attempt))
      GST_ELEMENT_ERROR (self, STREAM, FAILED, ("%s", error->message),
          ("chunk %" G_GUINT64_FORMAT "%s", self->chunk,
              gst_lingbot_error_hint (error)));
    else
      /* on_failure() posted the ERROR, a rank timeout ago */
      GST_WARNING_OBJECT (self, "chunk %" G_GUINT64_FORMAT " failed: %s",
          self->chunk, error->message);
    gst_lingbot_gen_pause (self, GST_FLOW_ERROR, TRUE);
    return;
  }

  stats.index = self->chunk;
  stats.keys = ck.keys;
  if (stats.frames <= 0)
    stats.frames = lingbot_chunk_video_frames (self->chunk,
        lingbot_session_get_chunk_frames (h->session));
  if (live && GST_CLOCK_TIME_IS_VALID (start)) {
    ready = running_time_now (self);
    latency = live_latency (self, (GstClockTime) (stats.compute_seconds *
            GST_SECOND));
    pts = live_pts (self, ck.waited ? start : GST_CLOCK_TIME_NONE, ready,
        latency, stats.frames, &cut);
    g_mutex_lock (&self->lock);
    self->stamped_end = pts + gst_util_uint64_scale (stats.frames,
        (guint64) self->session_fps_d * GST_SECOND, self->session_fps_n);
    g_mutex_unlock (&self->lock);
  } else {
    pts = gst_util_uint64_scale (self->frames_out,
        (guint64) self->session_fps_d * GST_SECOND, self->session_fps_n);
  }
  GST_BUFFER_PTS (buf) = pts;
  GST_BUFFER_DURATION (buf) = gst_util_uint64_scale (stats.frames,
      (guint64) self->session_fps_d * GST_SECOND, self->session_fps_n);
  self->next_pts = pts + GST_BUFFER_DURATION (buf);
  self->last_pts = pts;
  self->cut_next = FALSE;
  g_mutex_lock (&self->lock);
  self->last_keys = ck.keys;
  self->have_last_keys = live;
  g_mutex_unlock (&self->lock);
  GST_BUFFER_OFFSET (buf) = self->chunk;
  GST_BUFFER_OFFSET_END (buf) = self->chunk + 1;
  if (self->chunk == 0)
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_DISCONT);
  meta = gst_buffer_add_lingbot_chunk_meta (buf, h, self->chunk, &stats);
  if (meta)
    meta->generate_end_us = end_us;
  GST_DEBUG_OBJECT (self, "chunk %" G_GUINT64_FORMAT " keys 0x%x: %d frames,"
      " DiT %.3f s, PTS %" GST_TIME_FORMAT, self->chunk, ck.keys,
      stats.frames, stats.dit_seconds, GST_TIME_ARGS (pts));
  times.frames = stats.frames;
  times.compute_seconds = stats.compute_seconds;
  times.end_us = end_us;
  times.generate_end_us = end_us;
  times.generate_start_us = end_us - (gint64) llround (stats.compute_seconds
      * G_USEC_PER_SEC);
  GST_OBJECT_LOCK (self);
  gst_lingbot_chunk_log_add (self->chunk_times, &times);
  self->restarts += stats.restarts;
  GST_OBJECT_UNLOCK (self);
  post_chunk_message (self, &stats, &ck, pts, start, ready, latency, cut);
  self->chunk++;
  self->frames_out += stats.frames;
  g_mutex_lock (&self->lock);
  self->frames_done = self->frames_out;
  self->chunks_done = self->chunk;
  g_mutex_unlock (&self->lock);

  ret = gst_pad_push (self->srcpad, buf);
  if (ret != GST_FLOW_OK) {
    gst_lingbot_gen_pause (self, ret, FALSE);
    return;
  }
  g_mutex_lock (&self->lock);
  ok = self->eos_pending;
  g_mutex_unlock (&self->lock);
  if (ok || lingbot_session_is_done (h->session)) {
    GST_INFO_OBJECT (self, "EOS after chunk %" G_GUINT64_FORMAT " (%"
        G_GUINT64_FORMAT " frames)%s", self->chunk - 1, self->frames_out,
        ok ? ": EOS was sent to the element" : "");
    gst_lingbot_gen_pause (self, GST_FLOW_EOS, FALSE);
  }
}

void
gst_lingbot_gen_task_reset_stream (GstLingbotGen * self)
{
  g_clear_pointer (&self->handle, gst_lingbot_session_handle_unref);
  gst_lingbot_latency_stepper_set_playing (self->latency_stepper, FALSE);
  g_mutex_lock (&self->lock);
  self->control_eos = FALSE;
  self->poses_expected = FALSE;
  gst_clear_buffer (&self->poses);
  gst_clear_buffer (&self->image);
  self->image_eos = FALSE;
  lingbot_control_schedule_reset (self->schedule);
  self->horizon = GST_CLOCK_TIME_NONE;
  self->session_chunk_frames = 0;
  self->control_caps = FALSE;
  self->eos_pending = FALSE;
  self->repeat_pending = FALSE;
  self->said_control_wait = FALSE;
  gst_lingbot_latency_estimate_reset (&self->compute_latency);
  self->frames_done = 0;
  self->chunks_done = 0;
  self->qos_from = 0;
  self->stamped_end = 0;
  self->session_fps_n = 0;
  self->session_fps_d = 1;
  self->n_frames = 0;
  g_mutex_unlock (&self->lock);
  g_atomic_int_set (&self->passes, 0);
  self->chunk = 0;
  self->frames_out = 0;
  self->frames_skipped = 0;
  self->next_pts = GST_CLOCK_TIME_NONE;
  self->last_pts = GST_CLOCK_TIME_NONE;
  self->have_last_keys = FALSE;
  self->cut_next = FALSE;
  self->caps_sent = FALSE;
  self->device_memory = FALSE;
}

gboolean
gst_lingbot_gen_task_src_activate_mode (GstPad * pad, GstObject * parent,
    GstPadMode mode, gboolean active)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (parent);

  if (mode != GST_PAD_MODE_PUSH)
    return FALSE;
  if (active) {
    g_mutex_lock (&self->lock);
    self->flushing = FALSE;
    g_mutex_unlock (&self->lock);
    g_cancellable_reset (self->cancellable);
    return gst_pad_start_task (pad, (GstTaskFunction) gst_lingbot_gen_loop,
        self, NULL);
  }
  gst_lingbot_gen_control_raise (self, &self->flushing);
  /* the chunk in flight stops at its next DiT pass boundary */
  g_cancellable_cancel (self->cancellable);
  return gst_pad_stop_task (pad);
}

/* ---- the rate and a chunk's duration ---- */

/* The frame rate: the session's once it exists, else `framerate`, `fps`
 * or 16/1. */
void
gst_lingbot_gen_task_rate (GstLingbotGen * self, int *fps_n, int *fps_d)
{
  g_mutex_lock (&self->lock);
  *fps_n = self->session_fps_n;
  *fps_d = self->session_fps_d;
  g_mutex_unlock (&self->lock);
  if (*fps_n > 0)
    return;
  GST_OBJECT_LOCK (self);
  *fps_n = self->framerate_n > 0 ? self->framerate_n :
      self->fps > 0 ? self->fps : GST_LINGBOT_GEN_FALLBACK_FPS;
  *fps_d = self->framerate_n > 0 ? self->framerate_d : 1;
  GST_OBJECT_UNLOCK (self);
}

/**
 * gst_lingbot_gen_task_chunk_duration:
 *
 * The playback time of one steady chunk (lingbot_chunk_video_frames() of
 * a chunk after the first, 4 C frames) at the session rate: the session's
 * chunk size once it exists, else `chunk-frames` (0: the world's model).
 */
GstClockTime
gst_lingbot_gen_task_chunk_duration (GstLingbotGen * self)
{
  int c, fps_n, fps_d;
  LingbotWorld *world = NULL;

  world = gst_lingbot_world_holder_dup_world (&self->holder);
  GST_OBJECT_LOCK (self);
  c = self->chunk_frames;
  GST_OBJECT_UNLOCK (self);
  gst_lingbot_gen_task_rate (self, &fps_n, &fps_d);
  g_mutex_lock (&self->lock);
  if (self->session_chunk_frames > 0)
    c = self->session_chunk_frames;
  g_mutex_unlock (&self->lock);
  if (c <= 0 && world)
    c = lingbot_world_get_chunk_frames (world);
  g_clear_pointer (&world, lingbot_world_unref);
  if (c <= 0)
    c = GST_LINGBOT_GEN_DEFAULT_CHUNK_FRAMES;
  return gst_util_uint64_scale (lingbot_chunk_video_frames (1, (guint) c),
      (guint64) fps_d * GST_SECOND, (guint64) fps_n);
}

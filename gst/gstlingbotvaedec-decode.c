/* lingbot-gst: lingbotvaedec, the decode
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The decode thread and the push task: caps and the buffer pool, the
 * statistics and lingbot-summary, the queues, the decode of each chunk
 * (the session's own decoder, else this element's), the frames out, the
 * preview.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>

#include "gst/gstlingbotvaedec-private.h"

#define GST_CAT_DEFAULT gst_lingbot_vae_dec_debug

/* Every error of this element is found in its decode thread or its push
 * task, possibly at once (bad caps): it is posted once the state change
 * that started them has returned, else gst-launch-1.0 can miss it and
 * never exit (gst_lingbot_wait_state_change_done()). */
static void
wait_started (GstLingbotVaeDec * self)
{
  gst_lingbot_wait_state_change_done (GST_ELEMENT (self), &self->qlock,
      &self->qcond, &self->flushing);
}

#define DEC_ERROR(self, domain, code, text, debug) G_STMT_START {     \
    wait_started (self);                                              \
    GST_ELEMENT_ERROR (self, domain, code, text, debug);              \
  } G_STMT_END

void
gst_lingbot_vae_dec_decode_summary_reset (GstLingbotVaeDec * self)
{
  GST_OBJECT_LOCK (self);
  gst_lingbot_chunk_log_clear (self->chunk_times);
  self->dit_unknown = FALSE;
  self->frames_cut = 0;
  GST_OBJECT_UNLOCK (self);
}

/* a new session (STREAM_START) or a flush: its first chunk decodes to 13
 * frames again, the stats start over */
void
gst_lingbot_vae_dec_decode_new_stream (GstLingbotVaeDec * self)
{
  g_clear_pointer (&self->decoder, lingbot_decoder_free);
  self->frame_index = 0;
  self->chunk = 0;
  g_mutex_lock (&self->qlock);
  gst_clear_buffer (&self->last_frame);
  g_mutex_unlock (&self->qlock);
  gst_lingbot_vae_dec_decode_summary_reset (self);
}

void
gst_lingbot_vae_dec_decode_reset (GstLingbotVaeDec * self)
{
  g_clear_pointer (&self->decoder, lingbot_decoder_free);
  if (self->pool) {
    gst_buffer_pool_set_active (self->pool, FALSE);
    gst_clear_object (&self->pool);
  }
  self->negotiated = FALSE;
  self->frame_index = 0;
  self->chunk = 0;
  if (self->latency_stepper != NULL)
    gst_lingbot_latency_stepper_set_playing (self->latency_stepper, FALSE);
  GST_OBJECT_LOCK (self);
  self->chunk_duration = GST_CLOCK_TIME_NONE;
  gst_lingbot_latency_estimate_reset (&self->decode_latency);
  self->position = GST_CLOCK_TIME_NONE;
  self->made_end = GST_CLOCK_TIME_NONE;
  self->qos_from = GST_CLOCK_TIME_NONE;
  self->frames_pushed = 0;
  self->hold_latency = GST_CLOCK_TIME_NONE;
  GST_OBJECT_UNLOCK (self);
  g_mutex_lock (&self->qlock);
  gst_clear_buffer (&self->last_frame);
  g_mutex_unlock (&self->qlock);
  self->drop_before = GST_CLOCK_TIME_NONE;
  g_clear_error (&self->stream_error);
}

/* The figures of the stats property and of lingbot-summary, one
 * function for both: this element sees both halves of every chunk's
 * compute time (the generator's DiT seconds in the chunk meta, its own
 * decode seconds) and the generate intervals (decode-hidden-fraction).
 * Object lock held. */
GstStructure *
gst_lingbot_vae_dec_decode_summary_unlocked (GstLingbotVaeDec * self,
    const char *name)
{
  GstStructure *s = gst_lingbot_chunk_stats_new (name, self->chunk_times,
      TRUE);

  gst_structure_set (s, "dit-seconds-known", G_TYPE_BOOLEAN,
      !self->dit_unknown, "frames-cut", G_TYPE_UINT64, self->frames_cut, NULL);
  return s;
}

/* lingbot-summary, as an element message for the push task to post once
 * the frames queued before it are out (decode thread): every
 * summary-interval chunks, and when EOS arrives (@eos). */
static GstMiniObject *
summary_message (GstLingbotVaeDec * self, gboolean eos)
{
  GstStructure *s;

  GST_OBJECT_LOCK (self);
  s = gst_lingbot_vae_dec_decode_summary_unlocked (self, "lingbot-summary");
  GST_OBJECT_UNLOCK (self);
  gst_structure_set (s, "eos", G_TYPE_BOOLEAN, eos, NULL);
  GST_INFO_OBJECT (self, "summary %" GST_PTR_FORMAT, s);
  return GST_MINI_OBJECT_CAST (gst_message_new_element (GST_OBJECT (self), s));
}

/* The output frames' buffer pool: downstream's from the ALLOCATION query
 * when it offers a video pool, else our own GstVideoBufferPool, so that a
 * steady stream allocates nothing per frame. */
static gboolean
setup_pool (GstLingbotVaeDec * self, GstCaps * out)
{
  GstQuery *q = gst_query_new_allocation (out, TRUE);
  GstBufferPool *pool = NULL;
  GstStructure *config;
  guint size = self->out_info.size, min = 0, max = 0;

  if (gst_pad_peer_query (self->srcpad, q)
      && gst_query_get_n_allocation_pools (q) > 0) {
    gst_query_parse_nth_allocation_pool (q, 0, &pool, &size, &min, &max);
    if (pool && !GST_IS_VIDEO_BUFFER_POOL (pool))
      gst_clear_object (&pool);
    size = MAX (size, (guint) self->out_info.size);
  }
  gst_query_unref (q);
  if (pool == NULL)
    pool = gst_video_buffer_pool_new ();
  config = gst_buffer_pool_get_config (pool);
  /* a chunk's frames in flight at most (16 for C = 4), then reuse */
  gst_buffer_pool_config_set_params (config, out, size, min, max);
  gst_buffer_pool_config_add_option (config, GST_BUFFER_POOL_OPTION_VIDEO_META);
  if (!gst_buffer_pool_set_config (pool, config)) {
    config = gst_buffer_pool_get_config (pool);
    if (!gst_buffer_pool_config_validate_params (config, out, size, min, max)
        || !gst_buffer_pool_set_config (pool, config)) {
      GST_WARNING_OBJECT (self, "no usable buffer pool: allocating frames");
      gst_object_unref (pool);
      return TRUE;
    }
  }
  if (!gst_buffer_pool_set_active (pool, TRUE)) {
    GST_WARNING_OBJECT (self, "cannot activate the buffer pool: allocating "
        "frames");
    gst_object_unref (pool);
    return TRUE;
  }
  if (self->pool) {
    gst_buffer_pool_set_active (self->pool, FALSE);
    gst_object_unref (self->pool);
  }
  self->pool = pool;
  return TRUE;
}

static gboolean
gst_lingbot_vae_dec_set_caps (GstLingbotVaeDec * self, GstCaps * caps)
{
  GstStructure *s = gst_caps_get_structure (caps, 0);
  int vw = 0, vh = 0;
  GstCaps *peer, *ours, *out;
  GstVideoFormat format;

  if (!gst_structure_get_int (s, "frames", &self->lat_frames)
      || !gst_structure_get_int (s, "height", &self->lat_h)
      || !gst_structure_get_int (s, "width", &self->lat_w)) {
    DEC_ERROR (self, CORE, NEGOTIATION, (NULL),
        ("latent caps without frames/height/width: %" GST_PTR_FORMAT, caps));
    return FALSE;
  }
  if (self->lat_frames < 1
      || self->lat_frames > GST_LINGBOT_VAE_DEC_MAX_LATENT_FRAMES
      || self->lat_h < 1 || self->lat_h > GST_LINGBOT_VAE_DEC_MAX_LATENT_SIZE
      || self->lat_w < 1 || self->lat_w > GST_LINGBOT_VAE_DEC_MAX_LATENT_SIZE) {
    DEC_ERROR (self, CORE, NEGOTIATION,
        ("Latent chunks of %d frames of %dx%d are out of range (at most %d "
            "frames of %dx%d)", self->lat_frames, self->lat_w, self->lat_h,
            GST_LINGBOT_VAE_DEC_MAX_LATENT_FRAMES,
            GST_LINGBOT_VAE_DEC_MAX_LATENT_SIZE,
            GST_LINGBOT_VAE_DEC_MAX_LATENT_SIZE), ("%" GST_PTR_FORMAT, caps));
    return FALSE;
  }
  if (!gst_structure_get_int (s, "video-width", &vw))
    vw = self->lat_w * LINGBOT_LATENT_STRIDE;
  if (!gst_structure_get_int (s, "video-height", &vh))
    vh = self->lat_h * LINGBOT_LATENT_STRIDE;
  if (vw != self->lat_w * LINGBOT_LATENT_STRIDE
      || vh != self->lat_h * LINGBOT_LATENT_STRIDE) {
    DEC_ERROR (self, CORE, NEGOTIATION,
        ("Latent caps say %dx%d video from %dx%d latents (the VAE makes "
            "%dx%d)", vw, vh, self->lat_w, self->lat_h,
            self->lat_w * LINGBOT_LATENT_STRIDE,
            self->lat_h * LINGBOT_LATENT_STRIDE), ("%" GST_PTR_FORMAT, caps));
    return FALSE;
  }
  if (!gst_structure_get_fraction (s, "framerate", &self->fps_n,
          &self->fps_d) || self->fps_n <= 0 || self->fps_d <= 0) {
    self->fps_n = 16;
    self->fps_d = 1;
  }

  /* the first of I420, NV12, RGBA, RGB that downstream takes */
  ours = gst_pad_get_pad_template_caps (self->srcpad);
  ours = gst_caps_make_writable (ours);
  gst_caps_set_simple (ours, "width", G_TYPE_INT, vw, "height", G_TYPE_INT,
      vh, "framerate", GST_TYPE_FRACTION, self->fps_n, self->fps_d, NULL);
  peer = gst_pad_peer_query_caps (self->srcpad, ours);
  if (peer) {
    GstCaps *both = gst_caps_intersect_full (ours, peer,
        GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref (peer);
    gst_caps_unref (ours);
    ours = both;
  }
  if (gst_caps_is_empty (ours)) {
    gst_caps_unref (ours);
    DEC_ERROR (self, CORE, NEGOTIATION, (NULL),
        ("downstream takes none of I420, NV12, RGBA, RGB at %dx%d", vw, vh));
    return FALSE;
  }
  ours = gst_caps_fixate (ours);
  format = gst_video_format_from_string (gst_structure_get_string
      (gst_caps_get_structure (ours, 0), "format"));
  gst_caps_unref (ours);
  gst_video_info_set_format (&self->out_info, format, vw, vh);
  self->out_info.fps_n = self->fps_n;
  self->out_info.fps_d = self->fps_d;
  out = gst_video_info_to_caps (&self->out_info);
  GST_DEBUG_OBJECT (self, "output caps %" GST_PTR_FORMAT, out);
  self->negotiated = gst_pad_push_event (self->srcpad,
      gst_event_new_caps (out));
  if (self->negotiated)
    setup_pool (self, out);
  gst_caps_unref (out);
  if (!self->negotiated)
    DEC_ERROR (self, CORE, NEGOTIATION, (NULL),
        ("downstream refused %dx%d video", vw, vh));
  g_mutex_lock (&self->qlock);
  self->max_out = 2 * (guint) lingbot_chunk_video_frames (1,
      (guint) self->lat_frames);
  g_mutex_unlock (&self->qlock);
  GST_OBJECT_LOCK (self);
  self->chunk_duration = gst_util_uint64_scale (lingbot_chunk_video_frames (1,
          (guint) self->lat_frames), (guint64) self->fps_d * GST_SECOND,
      self->fps_n);
  GST_OBJECT_UNLOCK (self);
  return self->negotiated;
}

static GstFlowReturn out_push (GstLingbotVaeDec * self, GstMiniObject * item);

static GstFlowReturn push_preview (GstLingbotVaeDec * self, GstEvent * event);
static GstFlowReturn push_repeat (GstLingbotVaeDec * self, GstEvent * event);

/* A serialized event, in order with the chunks (the decode task).  CAPS
 * is negotiated here once the frames before it are out (the push task is
 * idle then); the rest follows the frames through the output queue. */
static gboolean
handle_serialized_event (GstLingbotVaeDec * self, GstEvent * event)
{
  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_CAPS:{
      GstCaps *caps;
      gboolean ret, flushing;

      g_mutex_lock (&self->qlock);
      while (!self->flushing && (!g_queue_is_empty (&self->out)
              || self->push_busy))
        g_cond_wait (&self->qcond, &self->qlock);
      flushing = self->flushing;
      g_mutex_unlock (&self->qlock);
      if (flushing) {
        gst_event_unref (event);
        return FALSE;
      }
      gst_event_parse_caps (event, &caps);
      ret = gst_lingbot_vae_dec_set_caps (self, caps);
      gst_event_unref (event);
      return ret;
    }
    case GST_EVENT_STREAM_START:
      /* a new session: its first chunk decodes to 13 frames again */
      gst_lingbot_vae_dec_decode_new_stream (self);
      break;
    case GST_EVENT_CUSTOM_DOWNSTREAM:
      if (gst_event_has_name (event, GST_LINGBOT_PREVIEW_EVENT)
          || gst_event_has_name (event, GST_LINGBOT_REPEAT_EVENT)) {
        /* consumed: it becomes a frame */
        GstFlowReturn ret = gst_event_has_name (event,
            GST_LINGBOT_PREVIEW_EVENT) ? push_preview (self, event) :
            push_repeat (self, event);

        gst_event_unref (event);
        return ret != GST_FLOW_FLUSHING;
      }
      break;
    case GST_EVENT_EOS:
      /* lingbot-summary before EOS goes on, so that it precedes the
       * pipeline's EOS message */
      out_push (self, summary_message (self, TRUE));
      break;
    default:
      break;
  }
  return out_push (self, GST_MINI_OBJECT_CAST (event)) != GST_FLOW_FLUSHING;
}

/* Takes what is queued into @dropped, which the caller frees once qlock
 * is released: a chunk's memory releases its slot there, which waits for
 * the decode ranks, and a decode in progress takes qlock to queue its
 * frames (on_frames()).  qlock held. */
void
gst_lingbot_vae_dec_decode_clear_unlocked (GstLingbotVaeDec * self,
    GQueue * dropped)
{
  GstMiniObject *item;

  while ((item = g_queue_pop_head (&self->queue)) != NULL)
    g_queue_push_tail (dropped, item);
  self->queued_buffers = 0;
  while ((item = g_queue_pop_head (&self->out)) != NULL)
    g_queue_push_tail (dropped, item);
  self->out_buffers = 0;
  self->queued_end = GST_CLOCK_TIME_NONE;
  self->in_end = GST_CLOCK_TIME_NONE;
  self->cut_pts = GST_CLOCK_TIME_NONE;
  g_cond_broadcast (&self->qcond);
}

/* (qlock) drops the queued frames from @pts on; returns how many */
static guint
drop_queued_from (GstLingbotVaeDec * self, GstClockTime pts)
{
  GList *l = self->out.head;
  guint n = 0;

  while (l) {
    GList *next = l->next;
    GstMiniObject *item = l->data;

    if (GST_IS_BUFFER (item) && GST_BUFFER_PTS (item) >= pts) {
      g_queue_delete_link (&self->out, l);
      gst_mini_object_unref (item);
      self->out_buffers--;
      n++;
    }
    l = next;
  }
  if (GST_CLOCK_TIME_IS_VALID (self->queued_end) && pts < self->queued_end)
    self->queued_end = pts;
  g_cond_broadcast (&self->qcond);
  return n;
}

/* Live key cuts at once (docs/elements.md lingbotvaedec "Hold"): a chunk
 * chained with a PTS before the end of the chunks chained before it drops
 * their queued frames from that PTS on, and those the decode of an
 * earlier chunk still queues (out_push()), until its own decode starts
 * (cut_before()); without this a decode in progress would let the frames
 * it replaces go out while it waits. */
void
gst_lingbot_vae_dec_decode_cut_early (GstLingbotVaeDec * self, GstBuffer * buf)
{
  const GstClockTime pts = GST_BUFFER_PTS (buf);
  gboolean live;
  guint n = 0;

  GST_OBJECT_LOCK (self);
  live = self->live;
  GST_OBJECT_UNLOCK (self);
  g_mutex_lock (&self->qlock);
  if (live && GST_CLOCK_TIME_IS_VALID (pts)
      && GST_CLOCK_TIME_IS_VALID (self->in_end) && pts < self->in_end) {
    self->cut_pts = GST_CLOCK_TIME_IS_VALID (self->cut_pts) ?
        MIN (self->cut_pts, pts) : pts;
    n = drop_queued_from (self, pts);
  }
  self->in_end = GST_CLOCK_TIME_IS_VALID (pts)
      && GST_BUFFER_DURATION_IS_VALID (buf) ?
      pts + GST_BUFFER_DURATION (buf) : GST_CLOCK_TIME_NONE;
  g_mutex_unlock (&self->qlock);
  if (n > 0) {
    GST_OBJECT_LOCK (self);
    self->frames_cut += n;
    GST_OBJECT_UNLOCK (self);
  }
}

void
gst_lingbot_vae_dec_decode_set_flushing (GstLingbotVaeDec * self,
    gboolean flushing)
{
  GQueue dropped = G_QUEUE_INIT;

  g_mutex_lock (&self->qlock);
  self->flushing = flushing;
  if (flushing)
    gst_lingbot_vae_dec_decode_clear_unlocked (self, &dropped);
  else
    self->last_ret = GST_FLOW_OK;
  g_cond_broadcast (&self->qcond);
  g_mutex_unlock (&self->qlock);
  g_queue_clear_full (&dropped, (GDestroyNotify) gst_mini_object_unref);
}

static GstFlowReturn decode_buffer (GstLingbotVaeDec * self, GstBuffer * buf);

/* A latent chunk stamped @pts, before the end of the frames queued (the
 * generator's key-cut, live): the frames from @pts on that are still in
 * the output queue are dropped (the new chunk's take their place); those
 * of the new chunk before the end of what was already pushed will be
 * dropped in turn (timestamps increase on the src pad).  The decode
 * thread, before the chunk's decode. */
static void
cut_before (GstLingbotVaeDec * self, GstClockTime pts)
{
  GstClockTime pushed;
  gboolean live;
  guint n = 0;

  self->drop_before = GST_CLOCK_TIME_NONE;
  GST_OBJECT_LOCK (self);
  live = self->live;
  GST_OBJECT_UNLOCK (self);
  /* offline the timestamps only increase (a preview still and the first
   * chunk share PTS 0) */
  if (!live || !GST_CLOCK_TIME_IS_VALID (pts))
    return;
  g_mutex_lock (&self->qlock);
  /* this chunk's own cut, if the chain made it early, ends here */
  if (GST_CLOCK_TIME_IS_VALID (self->cut_pts) && pts >= self->cut_pts)
    self->cut_pts = GST_CLOCK_TIME_NONE;
  if (GST_CLOCK_TIME_IS_VALID (self->queued_end) && pts < self->queued_end)
    n = drop_queued_from (self, pts);
  g_mutex_unlock (&self->qlock);
  GST_OBJECT_LOCK (self);
  pushed = self->position;
  self->frames_cut += n;
  GST_OBJECT_UNLOCK (self);
  if (GST_CLOCK_TIME_IS_VALID (pushed) && pts < pushed)
    self->drop_before = pushed;
  if (n > 0 || GST_CLOCK_TIME_IS_VALID (self->drop_before))
    GST_INFO_OBJECT (self, "a chunk stamped %" GST_TIME_FORMAT " (a key "
        "cut): %u queued frames from there dropped%s", GST_TIME_ARGS (pts),
        n, GST_CLOCK_TIME_IS_VALID (self->drop_before) ? ", and its frames "
        "before the end of those already pushed" : "");
}

/* One item of the input queue (the decode thread). */
static void
decode_item (GstLingbotVaeDec * self, GstMiniObject * item)
{
  GstFlowReturn ret = GST_FLOW_OK;

  if (GST_IS_BUFFER (item)) {
    GstFlowReturn last;

    /* after a failure (its chunk posted the one error) the chunks queued
     * behind it are dropped, not decoded: each would fail, and post, again */
    g_mutex_lock (&self->qlock);
    last = self->last_ret;
    g_mutex_unlock (&self->qlock);
    if (last != GST_FLOW_OK) {
      GST_DEBUG_OBJECT (self, "dropping a chunk after %s",
          gst_flow_get_name (last));
      gst_mini_object_unref (item);
      return;
    }
    cut_before (self, GST_BUFFER_PTS (item));
    ret = decode_buffer (self, GST_BUFFER_CAST (item));
  } else {
    GstEvent *event = GST_EVENT_CAST (item);
    gboolean caps = GST_EVENT_TYPE (event) == GST_EVENT_CAPS;

    if (!handle_serialized_event (self, event) && caps)
      ret = GST_FLOW_NOT_NEGOTIATED;
  }
  if (ret == GST_FLOW_OK || ret == GST_FLOW_FLUSHING)
    return;
  /* the chain returns it upstream from now on */
  g_mutex_lock (&self->qlock);
  if (self->last_ret == GST_FLOW_OK)
    self->last_ret = ret;
  g_cond_broadcast (&self->qcond);
  g_mutex_unlock (&self->qlock);
  GST_DEBUG_OBJECT (self, "decode: %s", gst_flow_get_name (ret));
}

/* A task takes the head of @queue (qlock held, the queue not empty): a
 * buffer counts off @buffers, @busy stays set until item_done(); returns
 * with qlock released. */
static GstMiniObject *
item_take_unlock (GstLingbotVaeDec * self, GQueue * queue, guint * buffers,
    gboolean * busy)
{
  GstMiniObject *item = g_queue_pop_head (queue);

  if (GST_IS_BUFFER (item))
    (*buffers)--;
  *busy = TRUE;
  g_cond_broadcast (&self->qcond);
  g_mutex_unlock (&self->qlock);
  return item;
}

/* The task is done with its item: returns with qlock held. */
static void
item_done_lock (GstLingbotVaeDec * self, gboolean * busy)
{
  g_mutex_lock (&self->qlock);
  *busy = FALSE;
  g_cond_broadcast (&self->qcond);
}

/* The decode thread: chunks and serialized events in order, into the
 * output queue; idle while flushing, until stopped. */
static gpointer
decode_thread_func (gpointer data)
{
  GstLingbotVaeDec *self = data;

  g_mutex_lock (&self->qlock);
  while (self->decode_run) {
    GstMiniObject *item;

    if (self->flushing || g_queue_is_empty (&self->queue)) {
      g_cond_wait (&self->qcond, &self->qlock);
      continue;
    }
    item = item_take_unlock (self, &self->queue, &self->queued_buffers,
        &self->decode_busy);
    decode_item (self, item);
    item_done_lock (self, &self->decode_busy);
  }
  g_mutex_unlock (&self->qlock);
  return NULL;
}

static void
decode_thread_start (GstLingbotVaeDec * self)
{
  if (self->decode_thread)
    return;
  self->decode_run = TRUE;
  self->decode_thread = g_thread_new ("lingbotvaedec", decode_thread_func,
      self);
}

static void
decode_thread_stop (GstLingbotVaeDec * self)
{
  if (self->decode_thread == NULL)
    return;
  g_mutex_lock (&self->qlock);
  self->decode_run = FALSE;
  g_cond_broadcast (&self->qcond);
  g_mutex_unlock (&self->qlock);
  g_thread_join (self->decode_thread);
  self->decode_thread = NULL;
}

/* The src pad's task: frames and events out of the output queue. */
/* Live with `hold`: the monotonic time (us) until which the frame @head
 * waits, or 0 when it is due: its PTS plus upstream's latency less one
 * frame, in running time.  The frame less keeps a frame's time of margin
 * downstream on top of the decode latency (a busy machine wakes this
 * thread late), and costs a key cut at most that frame.  @clock: the
 * element's, or NULL (no wait). */
static gint64
hold_until (GstClock * clock, GstClockTime base, GstClockTime latency,
    GstMiniObject * head)
{
  GstClockTime due, now, frame;

  if (clock == NULL || !GST_CLOCK_TIME_IS_VALID (latency) || head == NULL
      || !GST_IS_BUFFER (head) || !GST_BUFFER_PTS_IS_VALID (head))
    return 0;
  frame = GST_BUFFER_DURATION_IS_VALID (head) ? GST_BUFFER_DURATION (head) : 0;
  due = base + GST_BUFFER_PTS (head) + (latency > frame ? latency - frame : 0);
  now = gst_clock_get_time (clock);
  if (now >= due)
    return 0;
  return g_get_monotonic_time () + (gint64) ((due - now) / GST_USECOND) + 1;
}

void
gst_lingbot_vae_dec_decode_push_loop (GstLingbotVaeDec * self)
{
  GstMiniObject *item;
  GstFlowReturn ret = GST_FLOW_OK;
  GstClock *clock = NULL;
  GstClockTime base = 0, latency = GST_CLOCK_TIME_NONE;
  gint64 until;

  /* live, held: frames leave at their PTS plus upstream's latency (the
   * latest upstream would have delivered them), so that a key-cut chunk
   * finds the frames it replaces still here (cut_before()) */
  GST_OBJECT_LOCK (self);
  if (self->hold && self->live)
    latency = self->hold_latency;
  GST_OBJECT_UNLOCK (self);
  if (GST_CLOCK_TIME_IS_VALID (latency)
      && (clock = gst_element_get_clock (GST_ELEMENT (self))) != NULL)
    base = gst_element_get_base_time (GST_ELEMENT (self));

  g_mutex_lock (&self->qlock);
  while (!self->flushing && g_queue_is_empty (&self->out))
    g_cond_wait (&self->qcond, &self->qlock);
  if (!self->flushing && GST_STATE (self) == GST_STATE_PLAYING
      && (until = hold_until (clock, base, latency,
              g_queue_peek_head (&self->out))) > 0) {
    /* woken early by a cut, a flush or new frames: looked at again */
    g_cond_wait_until (&self->qcond, &self->qlock, until);
    g_mutex_unlock (&self->qlock);
    gst_clear_object (&clock);
    return;
  }
  gst_clear_object (&clock);
  if (self->flushing) {
    g_mutex_unlock (&self->qlock);
    gst_pad_pause_task (self->srcpad);
    return;
  }
  item = item_take_unlock (self, &self->out, &self->out_buffers,
      &self->push_busy);

  if (GST_IS_BUFFER (item)) {
    GstBuffer *buf = GST_BUFFER_CAST (item);

    GST_OBJECT_LOCK (self);
    self->position = GST_BUFFER_PTS (buf) + GST_BUFFER_DURATION (buf);
    self->frames_pushed = GST_BUFFER_OFFSET_END (buf);
    GST_OBJECT_UNLOCK (self);
    ret = gst_pad_push (self->srcpad, buf);
  } else if (GST_IS_MESSAGE (item)) {
    /* lingbot-summary, after the frames of the chunks it counts */
    gst_element_post_message (GST_ELEMENT (self), GST_MESSAGE_CAST (item));
  } else {
    gst_pad_push_event (self->srcpad, GST_EVENT_CAST (item));
  }
  item_done_lock (self, &self->push_busy);
  if (ret == GST_FLOW_OK) {
    g_mutex_unlock (&self->qlock);
    return;
  }
  if (self->last_ret == GST_FLOW_OK || self->last_ret == GST_FLOW_FLUSHING)
    self->last_ret = ret;
  g_mutex_unlock (&self->qlock);
  GST_DEBUG_OBJECT (self, "pausing the push task: %s", gst_flow_get_name (ret));
  if (ret == GST_FLOW_NOT_LINKED || ret < GST_FLOW_EOS) {
    wait_started (self);
    GST_ELEMENT_FLOW_ERROR (self, ret);
  }
  gst_pad_pause_task (self->srcpad);
}

gboolean
gst_lingbot_vae_dec_decode_src_activate_mode (GstPad * pad, GstObject * parent,
    GstPadMode mode, gboolean active)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (parent);

  if (mode != GST_PAD_MODE_PUSH)
    return FALSE;
  if (active) {
    gst_lingbot_vae_dec_decode_set_flushing (self, FALSE);
    decode_thread_start (self);
    return gst_pad_start_task (pad, (GstTaskFunction)
        gst_lingbot_vae_dec_decode_push_loop, self, NULL);
  }
  gst_lingbot_vae_dec_decode_set_flushing (self, TRUE);
  decode_thread_stop (self);
  return gst_pad_stop_task (pad);
}

static void on_frames (const LingbotFrames * frames, int first, int n,
    gpointer data);

static gboolean
ensure_own_decoder (GstLingbotVaeDec * self, LingbotWorld * session_world,
    GError ** error)
{
  g_autoptr (LingbotWorld) world = NULL;

  if (self->decoder)
    return TRUE;
  if (session_world != NULL) {
    /* latents of a session another element decodes: on its world */
    world = lingbot_world_ref (session_world);
  } else if (!gst_lingbot_world_holder_ensure (&self->holder, NULL, FALSE,
          error)) {
    if (error && *error == NULL)
      g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_NOT_FOUND,
          "latents without a session and no lingbot.world context or "
          "model-path to decode them with");
    return FALSE;
  } else {
    world = gst_lingbot_world_holder_dup_world (&self->holder);
  }
  /* sized by the caps */
  self->decoder = lingbot_world_new_decoder (world, self->lat_h, self->lat_w,
      self->lat_frames, error);
  if (self->decoder == NULL)
    return FALSE;
  /* frames queued as each latent frame's are final (on_frames()) */
  lingbot_decoder_set_frames_func (self->decoder, on_frames, self);
  return TRUE;
}

/* Queues @item (a frame, or a serialized event: not counted) for the push
 * task; waits while two chunks of frames are queued.  Returns the push
 * task's flow (FLUSHING when flushing). */
/* @frame (about to be queued) is the one GST_LINGBOT_REPEAT_EVENT pushes
 * again until a newer one is kept: the preview always (the LATENCY query
 * that says live may come after it), a chunk's frame when the stream is
 * live (one reference: a filter that draws in place copies this one frame
 * while it is held, so not offline, where no repeat comes) */
static void
keep_last_frame (GstLingbotVaeDec * self, GstBuffer * frame, gboolean preview)
{
  gboolean live;

  GST_OBJECT_LOCK (self);
  live = self->live;
  GST_OBJECT_UNLOCK (self);
  if (!live && !preview)
    return;
  g_mutex_lock (&self->qlock);
  gst_buffer_replace (&self->last_frame, frame);
  g_mutex_unlock (&self->qlock);
}

static GstFlowReturn
out_push (GstLingbotVaeDec * self, GstMiniObject * item)
{
  const gboolean frame = GST_IS_BUFFER (item);
  GstClockTime end = GST_CLOCK_TIME_NONE;
  GstFlowReturn ret;

  g_mutex_lock (&self->qlock);
  if (frame && GST_CLOCK_TIME_IS_VALID (self->cut_pts)
      && GST_BUFFER_PTS (item) >= self->cut_pts) {
    /* a frame a key-cut chunk chained since replaces */
    g_mutex_unlock (&self->qlock);
    gst_mini_object_unref (item);
    GST_OBJECT_LOCK (self);
    self->frames_cut++;
    GST_OBJECT_UNLOCK (self);
    return GST_FLOW_OK;
  }
  /* (not during a decode: a decode rank queues its frames, on_frames(),
   * and must not wait for downstream; the decode task waits after it) */
  while (frame && !self->stream_nowait && !self->flushing
      && self->last_ret == GST_FLOW_OK && self->out_buffers >= self->max_out)
    g_cond_wait (&self->qcond, &self->qlock);
  ret = self->flushing ? GST_FLOW_FLUSHING : self->last_ret;
  if (ret == GST_FLOW_OK || !frame) {
    g_queue_push_tail (&self->out, item);
    if (frame) {
      GstBuffer *b = GST_BUFFER_CAST (item);

      self->out_buffers++;
      if (GST_BUFFER_PTS_IS_VALID (b) && GST_BUFFER_DURATION_IS_VALID (b))
        self->queued_end = end = GST_BUFFER_PTS (b) + GST_BUFFER_DURATION (b);
    }
    g_cond_broadcast (&self->qcond);
    item = NULL;
  }
  g_mutex_unlock (&self->qlock);
  if (item)
    gst_mini_object_unref (item);
  /* (the jump func reads it under the object lock alone: it is called
   * with that held, and qlock is never taken inside it) */
  if (GST_CLOCK_TIME_IS_VALID (end)) {
    GST_OBJECT_LOCK (self);
    if (!GST_CLOCK_TIME_IS_VALID (self->made_end) || end > self->made_end)
      self->made_end = end;
    GST_OBJECT_UNLOCK (self);
  }
  return ret;
}

/* Frame @i of @frames (f32 [3, T, H, W]) into the planes of an output
 * frame, in the negotiated format. */
static gboolean
convert_frame (GstLingbotVaeDec * self, const LingbotFrames * frames, int i,
    guint8 ** plane, const gsize * stride, GError ** error)
{
  switch (GST_VIDEO_INFO_FORMAT (&self->out_info)) {
    case GST_VIDEO_FORMAT_I420:
      return lingbot_frames_to_i420 (frames, i, plane[0], stride[0],
          plane[1], stride[1], plane[2], stride[2], error);
    case GST_VIDEO_FORMAT_NV12:
      return lingbot_frames_to_nv12 (frames, i, plane[0], stride[0],
          plane[1], stride[1], error);
    case GST_VIDEO_FORMAT_RGBA:
      return lingbot_frames_to_rgba (frames, i, plane[0], stride[0], error);
    default:
      return lingbot_frames_to_rgb (frames, i, plane[0], stride[0], error);
  }
}

/* Queues frames [@first, @first + @n) of a chunk whose latent buffer was
 * stamped @pts: frame i at @pts + i / fps (the generator's timestamps,
 * live or not); a chunk without a timestamp continues the element's own
 * frame count. */
static GstFlowReturn
push_frames (GstLingbotVaeDec * self, const LingbotFrames * frames,
    int first, int n, GstClockTime pts, GError ** error)
{
  const guint64 den = (guint64) self->fps_d * GST_SECOND;

  for (int i = first; i < first + n; i++) {
    GstBuffer *out = NULL;
    GstVideoFrame vf;
    guint8 *plane[GST_VIDEO_MAX_PLANES] = { NULL };
    gsize stride[GST_VIDEO_MAX_PLANES] = { 0 };
    gboolean ok;
    GstFlowReturn ret;

    if (self->pool) {
      /* never waits: a pool whose buffers all sit downstream (an appsink
       * keeping its samples) must not stop the decode, a new buffer is
       * allocated instead */
      GstBufferPoolAcquireParams params = { 0 };

      params.flags = GST_BUFFER_POOL_ACQUIRE_FLAG_DONTWAIT;
      ret = gst_buffer_pool_acquire_buffer (self->pool, &out, &params);
      if (ret == GST_FLOW_EOS)
        out = NULL;
      else if (ret != GST_FLOW_OK)
        return ret;
    }
    if (out == NULL)
      out = gst_lingbot_buffer_try_new (self->out_info.size);
    if (out == NULL) {
      g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_DEVICE,
          "cannot allocate a %" G_GSIZE_FORMAT "-byte video frame",
          self->out_info.size);
      return GST_FLOW_ERROR;
    }
    if (!gst_video_frame_map (&vf, &self->out_info, out, GST_MAP_WRITE)) {
      gst_buffer_unref (out);
      g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_INVALID_ARGUMENT,
          "cannot map an output frame");
      return GST_FLOW_ERROR;
    }
    for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES (&vf); p++) {
      plane[p] = GST_VIDEO_FRAME_PLANE_DATA (&vf, p);
      stride[p] = GST_VIDEO_FRAME_PLANE_STRIDE (&vf, p);
    }
    ok = convert_frame (self, frames, i, plane, stride, error);
    gst_video_frame_unmap (&vf);
    if (!ok) {
      gst_buffer_unref (out);
      return GST_FLOW_ERROR;
    }
    if (GST_CLOCK_TIME_IS_VALID (pts)) {
      GST_BUFFER_PTS (out) = pts + gst_util_uint64_scale (i, den, self->fps_n);
      GST_BUFFER_DURATION (out) = pts + gst_util_uint64_scale (i + 1, den,
          self->fps_n) - GST_BUFFER_PTS (out);
    } else {
      GST_BUFFER_PTS (out) = gst_util_uint64_scale (self->frame_index, den,
          self->fps_n);
      GST_BUFFER_DURATION (out) = gst_util_uint64_scale (self->frame_index
          + 1, den, self->fps_n) - GST_BUFFER_PTS (out);
    }
    GST_BUFFER_DTS (out) = GST_CLOCK_TIME_NONE;
    if (GST_CLOCK_TIME_IS_VALID (self->drop_before)
        && GST_BUFFER_PTS (out) < self->drop_before) {
      /* a key cut: a frame of this chunk at a time already pushed */
      gst_buffer_unref (out);
      GST_OBJECT_LOCK (self);
      self->frames_cut++;
      GST_OBJECT_UNLOCK (self);
      continue;
    }
    gst_buffer_add_lingbot_frame_meta (out, self->frame_chunk,
        self->frame_keys, FALSE);
    GST_BUFFER_OFFSET (out) = self->frame_index;
    GST_BUFFER_OFFSET_END (out) = self->frame_index + 1;
    if (i == 0 && self->frame_index == 0)
      GST_BUFFER_FLAG_SET (out, GST_BUFFER_FLAG_DISCONT);
    self->frame_index++;
    if (i == first + n - 1)
      keep_last_frame (self, out, FALSE);
    ret = out_push (self, GST_MINI_OBJECT_CAST (out));
    if (ret != GST_FLOW_OK)
      return ret;
  }
  return GST_FLOW_OK;
}

/* GST_LINGBOT_PREVIEW_EVENT (the decode task): the session's start image
 * as one frame, converted like a decoded one, stamped with the event's pts
 * and one frame's duration, with a GstLingbotFrameMeta that says preview;
 * not counted (OFFSET and OFFSET_END 0, the frame and chunk counts do not
 * move), so the chunks' frames keep their offsets and timestamps. */
static GstFlowReturn
push_preview (GstLingbotVaeDec * self, GstEvent * event)
{
  const GstStructure *st = gst_event_get_structure (event);
  GstLingbotSessionHandle *h = NULL;
  g_autoptr (GError) error = NULL;
  const LingbotFrames *still;
  guint8 *plane[GST_VIDEO_MAX_PLANES] = { NULL };
  gsize stride[GST_VIDEO_MAX_PLANES] = { 0 };
  guint64 pts = 0;
  GstVideoFrame vf;
  GstBuffer *out;
  gboolean ok;

  if (!self->negotiated || !gst_structure_get (st, "handle",
          GST_TYPE_LINGBOT_SESSION_HANDLE, &h, "pts", G_TYPE_UINT64, &pts,
          NULL)) {
    GST_WARNING_OBJECT (self, "ignoring a preview event %s",
        self->negotiated ? "without handle and pts" : "before caps");
    return GST_FLOW_OK;
  }
  still = lingbot_session_get_start_frames (h->session);
  if (lingbot_frames_get_height (still) != GST_VIDEO_INFO_HEIGHT
      (&self->out_info) || lingbot_frames_get_width (still) !=
      GST_VIDEO_INFO_WIDTH (&self->out_info)) {
    GST_WARNING_OBJECT (self, "ignoring a %dx%d preview for %dx%d frames",
        lingbot_frames_get_width (still), lingbot_frames_get_height (still),
        GST_VIDEO_INFO_WIDTH (&self->out_info),
        GST_VIDEO_INFO_HEIGHT (&self->out_info));
    gst_lingbot_session_handle_unref (h);
    return GST_FLOW_OK;
  }
  out = gst_lingbot_buffer_try_new (self->out_info.size);
  if (out == NULL || !gst_video_frame_map (&vf, &self->out_info, out,
          GST_MAP_WRITE)) {
    GST_WARNING_OBJECT (self, "no memory for the preview frame");
    gst_clear_buffer (&out);
    gst_lingbot_session_handle_unref (h);
    return GST_FLOW_OK;
  }
  for (guint p = 0; p < GST_VIDEO_FRAME_N_PLANES (&vf); p++) {
    plane[p] = GST_VIDEO_FRAME_PLANE_DATA (&vf, p);
    stride[p] = GST_VIDEO_FRAME_PLANE_STRIDE (&vf, p);
  }
  ok = convert_frame (self, still, 0, plane, stride, &error);
  gst_video_frame_unmap (&vf);
  gst_lingbot_session_handle_unref (h);
  if (!ok) {
    GST_WARNING_OBJECT (self, "preview: %s", error->message);
    gst_buffer_unref (out);
    return GST_FLOW_OK;
  }
  GST_BUFFER_PTS (out) = pts;
  GST_BUFFER_DURATION (out) = gst_util_uint64_scale (1,
      (guint64) self->fps_d * GST_SECOND, self->fps_n);
  GST_BUFFER_DTS (out) = GST_CLOCK_TIME_NONE;
  GST_BUFFER_OFFSET (out) = 0;
  GST_BUFFER_OFFSET_END (out) = 0;
  GST_BUFFER_FLAG_SET (out, GST_BUFFER_FLAG_DISCONT);
  gst_buffer_add_lingbot_frame_meta (out, 0, 0, TRUE);
  GST_DEBUG_OBJECT (self, "preview at %" GST_TIME_FORMAT, GST_TIME_ARGS (pts));
  keep_last_frame (self, out, TRUE);
  return out_push (self, GST_MINI_OBJECT_CAST (out));
}

/* GST_LINGBOT_REPEAT_EVENT (the decode task): the newest frame queued
 * again, stamped with the event's pts for one frame, the same memory, no
 * keys lit; not counted (OFFSET and OFFSET_END the frames so far).  The
 * generator sends it only where it waits for a key, so no chunk's frames
 * are in decode, and it stamped its next chunk after this frame.  Nothing
 * when no frame went yet (a session without preview before a key). */
static GstFlowReturn
push_repeat (GstLingbotVaeDec * self, GstEvent * event)
{
  const GstStructure *st = gst_event_get_structure (event);
  GstLingbotFrameMeta *meta;
  guint64 pts;
  GstBuffer *again = NULL;

  if (!self->negotiated || !gst_structure_get_uint64 (st, "pts", &pts)) {
    GST_WARNING_OBJECT (self, "ignoring a repeat event %s",
        self->negotiated ? "without pts" : "before caps");
    return GST_FLOW_OK;
  }
  g_mutex_lock (&self->qlock);
  if (self->last_frame != NULL)
    again = gst_buffer_copy (self->last_frame);
  g_mutex_unlock (&self->qlock);
  if (again == NULL) {
    GST_DEBUG_OBJECT (self, "no frame to repeat yet");
    return GST_FLOW_OK;
  }
  GST_BUFFER_PTS (again) = pts;
  GST_BUFFER_DURATION (again) = gst_util_uint64_scale (1,
      (guint64) self->fps_d * GST_SECOND, self->fps_n);
  GST_BUFFER_DTS (again) = GST_CLOCK_TIME_NONE;
  GST_BUFFER_OFFSET (again) = self->frame_index;
  GST_BUFFER_OFFSET_END (again) = self->frame_index;
  GST_BUFFER_FLAG_UNSET (again, GST_BUFFER_FLAG_DISCONT);
  meta = gst_buffer_get_lingbot_frame_meta (again);
  if (meta != NULL)
    meta->keys = 0;
  GST_DEBUG_OBJECT (self, "frame again at %" GST_TIME_FORMAT,
      GST_TIME_ARGS (pts));
  return out_push (self, GST_MINI_OBJECT_CAST (again));
}

/* A live stream's latency covers the decode too: the decode latency is a
 * bounded statistic of what the last chunks' frames needed
 * (#GstLingbotLatencyEstimate: the largest of the last 4 plus an eighth,
 * moved when a chunk needs more or it falls by more than a tenth), and
 * GST_MESSAGE_LATENCY is posted when it moves (live streams only: the last
 * LATENCY answer said live): up at once, down a quarter of a frame at a
 * time, a frame apart (#GstLingbotLatencyStepper), so that the frames
 * already at a sink stay on time.  @newest: @seconds is a new chunk's (a new
 * sample), else what the chunk in decode is now known to need (its sample
 * raised), so a chunk that needs more raises the latency before its later
 * frames go. */
static void
note_decode_time (GstLingbotVaeDec * self, double seconds, gboolean newest)
{
  GstClockTime t = (GstClockTime) (MAX (0, seconds) * GST_SECOND), now;
  GstClockTime chunk;
  gboolean post, falling, live;

  GST_OBJECT_LOCK (self);
  live = self->live;
  post = (newest ?
      gst_lingbot_latency_estimate_add (&self->decode_latency, t) :
      gst_lingbot_latency_estimate_raise (&self->decode_latency, t)) && live;
  /* a fall is taken in steps while the figure is distributed */
  falling = gst_lingbot_latency_estimate_falling (&self->decode_latency);
  if (falling && !live)
    gst_lingbot_latency_estimate_step (&self->decode_latency,
        GST_CLOCK_TIME_NONE);
  now = self->decode_latency.announced;
  chunk = self->chunk_duration;
  GST_OBJECT_UNLOCK (self);
  if (falling && live)
    gst_lingbot_latency_stepper_start (self->latency_stepper,
        self->fps_n > 0 ? gst_util_uint64_scale (GST_SECOND,
            (guint64) self->fps_d, (guint64) self->fps_n) :
        GST_CLOCK_TIME_NONE, chunk);
  if (post) {
    GST_INFO_OBJECT (self, "decode latency %" GST_TIME_FORMAT ": posting "
        "a latency message", GST_TIME_ARGS (now));
    gst_element_post_message (GST_ELEMENT (self),
        gst_message_new_latency (GST_OBJECT (self)));
  }
}

/* LingbotFramesFunc (rank 0's thread, the decode task waiting in the
 * decode call): frames [@first, @first + @n) of the chunk in decode are
 * final.  What the decode latency must cover is what the frames need: the
 * latest of their final times less their offsets in the chunk (frame 4k
 * is due 4k frames after frame 0), from the time the generator had the
 * chunk ready (its PTS plus upstream's latency is no earlier), so a decode
 * that waited for the one before it counts the wait.  It is noted before
 * the frames are queued: a chunk that needs more raises the latency before
 * its frames reach the sink. */
static void
on_frames (const LingbotFrames * frames, int first, int n, gpointer data)
{
  GstLingbotVaeDec *self = data;
  gint64 now = g_get_monotonic_time ();
  gint64 offset_us = (gint64) gst_util_uint64_scale (first,
      (guint64) self->fps_d * G_USEC_PER_SEC, self->fps_n);

  self->stream_due_us = MAX (self->stream_due_us, now - offset_us);
  note_decode_time (self, (self->stream_due_us - self->stream_from_us) / 1e6,
      self->stream_first_us == 0);
  if (self->stream_first_us == 0)
    self->stream_first_us = now;
  if (self->stream_ret != GST_FLOW_OK || n <= 0)
    return;
  self->stream_ret = push_frames (self, frames, first, n, self->stream_pts,
      &self->stream_error);
  self->stream_pushed = first + n;
}

/* after a decode: out_push() waits for room again */
static void
stream_wait_again (GstLingbotVaeDec * self)
{
  g_mutex_lock (&self->qlock);
  self->stream_nowait = FALSE;
  g_mutex_unlock (&self->qlock);
}

/* before a decode: the frames func armed for the chunk stamped @pts that
 * the generator had ready at @ready_us (monotonic; 0: not known, the
 * decode's start counts instead) */
static void
stream_begin (GstLingbotVaeDec * self, GstClockTime pts, gint64 ready_us)
{
  g_mutex_lock (&self->qlock);
  self->stream_nowait = TRUE;
  g_mutex_unlock (&self->qlock);
  self->stream_pts = pts;
  self->stream_from_us = ready_us > 0 ? ready_us : g_get_monotonic_time ();
  self->stream_pushed = 0;
  self->stream_due_us = G_MININT64;
  self->stream_first_us = 0;
  self->stream_ret = GST_FLOW_OK;
  g_clear_error (&self->stream_error);
}

/* After a decode of @n frames that started at @start_us and took
 * @seconds: the frames not queued yet queued (none, unless no frames
 * function ran: then the whole decode is the chunk's need). */
static GstFlowReturn
stream_end (GstLingbotVaeDec * self, const LingbotFrames * frames, int n,
    gint64 start_us, double seconds, GError ** error)
{
  stream_wait_again (self);
  self->stream_first_seconds = seconds;
  if (self->stream_first_us != 0 && start_us > 0)
    self->stream_first_seconds = MAX (0, self->stream_first_us - start_us)
        / 1e6;
  if (self->stream_first_us == 0)
    note_decode_time (self, seconds, TRUE);
  if (self->stream_ret != GST_FLOW_OK) {
    if (self->stream_error != NULL)
      g_propagate_error (error, g_steal_pointer (&self->stream_error));
    return self->stream_ret;
  }
  if (n > self->stream_pushed)
    return push_frames (self, frames, self->stream_pushed,
        n - self->stream_pushed, self->stream_pts, error);
  /* the frames queued during the decode may have passed the bound: the
   * next chunk waits until there is room again */
  g_mutex_lock (&self->qlock);
  while (!self->flushing && self->last_ret == GST_FLOW_OK
      && self->out_buffers >= self->max_out)
    g_cond_wait (&self->qcond, &self->qlock);
  g_mutex_unlock (&self->qlock);
  return GST_FLOW_OK;
}

/* after a session decode of @n frames: its time noted, its frames pushed */
static GstFlowReturn
push_decoded (GstLingbotVaeDec * self, GstLingbotSessionHandle * h,
    const LingbotChunkStats * stats, int n, GError ** error)
{
  return stream_end (self, lingbot_session_get_frames (h->session), n,
      stats->decode_start_us, stats->vae_seconds, error);
}

/* Decodes one latent buffer and pushes its frames (the decode task). */
static GstFlowReturn
decode_buffer (GstLingbotVaeDec * self, GstBuffer * buf)
{
  g_autoptr (GError) error = NULL;
  GstLingbotChunkMeta *meta = gst_buffer_get_lingbot_chunk_meta (buf);
  GstMemory *mem = gst_buffer_n_memory (buf) == 1 ?
      gst_buffer_peek_memory (buf, 0) : NULL;
  LingbotChunkStats stats = { 0 };
  GstFlowReturn ret = GST_FLOW_OK;
  GstMapInfo map;
  g_autoptr (LingbotLatents) latents = NULL;
  gsize expected;
  int n = 0;
  gint64 t0;
  gboolean ok;
  GstClockTime pts = GST_BUFFER_PTS (buf);
  GstLingbotChunkTimes times = { 0 };
  guint interval, n_chunks;
  GstLingbotSessionHandle *session;
  gboolean mine;

  if (!self->negotiated) {
    gst_buffer_unref (buf);
    return GST_FLOW_NOT_NEGOTIATED;
  }
  self->frame_chunk = meta ? meta->chunk : self->chunk;
  self->frame_keys = meta ? meta->stats.keys : 0;
  /* the generate interval (decode-hidden-fraction), before the buffer and
   * its meta go */
  if (meta && meta->generate_end_us > 0) {
    times.generate_end_us = meta->generate_end_us;
    times.generate_start_us = meta->generate_end_us - (gint64)
        llround (meta->stats.compute_seconds * G_USEC_PER_SEC);
  }
  expected = (gsize) LINGBOT_LATENT_CHANNELS *self->lat_frames *
      self->lat_h * self->lat_w * sizeof (float);
  if (gst_buffer_get_size (buf) != expected) {
    DEC_ERROR (self, STREAM, FORMAT,
        ("Latent buffer of %" G_GSIZE_FORMAT " bytes, expected %"
            G_GSIZE_FORMAT " (the caps say f32 [16, %d, %d, %d])",
            gst_buffer_get_size (buf), expected, self->lat_frames,
            self->lat_h, self->lat_w), ("chunk %" G_GUINT64_FORMAT,
            self->chunk));
    gst_buffer_unref (buf);
    return GST_FLOW_ERROR;
  }

  /* a session's chunks are decoded in it by one element; a second one
   * (behind a tee) decodes the buffers' bytes with a decoder of its own */
  session = mem && gst_is_lingbot_device_memory (mem) ?
      ((GstLingbotDeviceMemory *) mem)->handle : meta ? meta->handle : NULL;
  mine = session != NULL && gst_lingbot_session_handle_claim_decoder (session,
      self->decoder_id);
  if (session != NULL && !mine && !self->said_not_mine) {
    self->said_not_mine = TRUE;
    GST_INFO_OBJECT (self, "another element decodes this session's chunks: "
        "decoding the latent bytes with a decoder of its own");
  }

  if (mem && gst_is_lingbot_device_memory (mem) && mine) {
    /* memory:LingbotDevice: decode the session's latents where they are,
     * never mapping the buffer.  The decode consumes the chunk: while
     * another holder (a tee's other branch) may still map the buffer, its
     * system copy is made first */
    GstLingbotDeviceMemory *dm = (GstLingbotDeviceMemory *) mem;
    GstLingbotSessionHandle *h = dm->handle;

    if (GST_MINI_OBJECT_REFCOUNT_VALUE (buf) > 1
        || GST_MINI_OBJECT_REFCOUNT_VALUE (mem) > 1) {
      if (gst_buffer_map (buf, &map, GST_MAP_READ))
        gst_buffer_unmap (buf, &map);
      else
        GST_WARNING_OBJECT (self, "chunk %" G_GUINT64_FORMAT ": no system "
            "copy for the buffer's other holders", dm->chunk);
    }
    if (meta)
      stats = meta->stats;
    else
      stats.index = dm->chunk;
    /* where its latents are (a channel slot on the decode ranks, a spill,
     * or the serial latent tensor); beside the generator's next chunk */
    stream_begin (self, pts, times.generate_end_us);
    lingbot_session_set_frames_func (h->session, on_frames, self);
    ok = lingbot_session_decode_chunk (h->session, dm->chunk, &n, &stats,
        &error);
    lingbot_session_set_frames_func (h->session, NULL, NULL);
    if (ok)
      ret = push_decoded (self, h, &stats, n, &error);
    gst_buffer_unref (buf);
    goto decoded;
  }

  if (!gst_buffer_map (buf, &map, GST_MAP_READ)) {
    /* memory:LingbotDevice whose chunk the session's decoder consumed
     * before its system copy was made */
    DEC_ERROR (self, STREAM, DECODE, ("Cannot read the latents of chunk %"
            G_GUINT64_FORMAT, self->frame_chunk), ("the buffer's memory "
            "could not be mapped"));
    gst_buffer_unref (buf);
    return GST_FLOW_ERROR;
  }
  latents = lingbot_latents_new_wrapped (map.data, map.size, self->lat_frames,
      self->lat_h, self->lat_w, NULL);

  if (meta && mine) {
    GstLingbotSessionHandle *h = meta->handle;

    stats = meta->stats;
    /* sets stats.vae_seconds: the decode alone, not the wait for a
     * generate that holds the world */
    stream_begin (self, pts, times.generate_end_us);
    lingbot_session_set_frames_func (h->session, on_frames, self);
    ok = lingbot_session_decode (h->session, latents, &n, &stats, &error);
    lingbot_session_set_frames_func (h->session, NULL, NULL);
    if (ok)
      ret = push_decoded (self, h, &stats, n, &error);
  } else {
    if (meta)
      stats = meta->stats;
    stats.index = meta ? meta->chunk : self->chunk;
    stats.vae_seconds = 0;
    if (!ensure_own_decoder (self, session ? session->world : NULL, &error)) {
      g_autofree char *text = g_strdup_printf ("No VAE decoder for plain "
          "latents: %s", error ? error->message : "no world");

      gst_buffer_unmap (buf, &map);
      gst_buffer_unref (buf);
      wait_started (self);
      gst_lingbot_post_error (GST_ELEMENT (self), error,
          GST_LINGBOT_ERROR_CONTEXT_OPEN, text, NULL);
      return GST_FLOW_ERROR;
    }
    stream_begin (self, pts, 0);
    t0 = g_get_monotonic_time ();
    ok = lingbot_decoder_decode (self->decoder, latents, &n, &error);
    if (ok) {
      stats.decode_start_us = t0;
      stats.decode_end_us = g_get_monotonic_time ();
      stats.vae_seconds = (stats.decode_end_us - t0) / 1e6;
      ret = stream_end (self, lingbot_decoder_get_frames (self->decoder), n,
          t0, stats.vae_seconds, &error);
    }
  }
  gst_buffer_unmap (buf, &map);
  gst_buffer_unref (buf);

decoded:
  stream_wait_again (self);
  if (!ok || ret == GST_FLOW_ERROR) {
    DEC_ERROR (self, STREAM, DECODE, ("%s",
            error ? error->message : "decode failed"),
        ("chunk %" G_GUINT64_FORMAT "%s", self->chunk,
            gst_lingbot_error_hint (error)));
    return GST_FLOW_ERROR;
  }
  stats.frames = n;
  times.frames = n;
  times.compute_seconds = stats.dit_seconds + stats.vae_seconds;
  times.end_us = stats.decode_end_us;
  times.decode_seconds = stats.vae_seconds;
  times.decode_start_us = stats.decode_start_us;
  GST_OBJECT_LOCK (self);
  gst_lingbot_chunk_log_add (self->chunk_times, &times);
  if (meta == NULL)
    self->dit_unknown = TRUE;
  n_chunks = (guint) gst_lingbot_chunk_log_get_n_chunks (self->chunk_times);
  interval = self->summary_interval;
  GST_OBJECT_UNLOCK (self);
  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_element (GST_OBJECT (self),
          gst_structure_new ("lingbot-decode",
              "index", G_TYPE_UINT64, stats.index,
              "frames", G_TYPE_INT, n,
              "vae-seconds", G_TYPE_DOUBLE, stats.vae_seconds,
              "first-frame-seconds", G_TYPE_DOUBLE, self->stream_first_seconds,
              "compute-seconds", G_TYPE_DOUBLE,
              stats.dit_seconds + stats.vae_seconds,
              "decode-start", G_TYPE_INT64, stats.decode_start_us,
              "decode-end", G_TYPE_INT64, stats.decode_end_us, NULL)));
  GST_DEBUG_OBJECT (self, "chunk %" G_GUINT64_FORMAT ": %d frames, VAE "
      "%.3f s", stats.index, n, stats.vae_seconds);
  self->chunk++;
  /* live sessions may never see EOS: a summary every summary-interval
   * chunks, behind the chunk's frames */
  if (ret == GST_FLOW_OK && interval > 0 && n_chunks % interval == 0)
    out_push (self, summary_message (self, FALSE));
  return ret;
}

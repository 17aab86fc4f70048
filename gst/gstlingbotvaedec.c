/* lingbot-gst: lingbotvaedec, latent chunks -> video frames
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
/**
 * SECTION:element-lingbotvaedec
 * @title: lingbotvaedec
 *
 * Decodes `application/x-lingbot-latent` chunks into `video/x-raw` frames
 * (the first of I420, NV12, RGBA, RGB that downstream accepts): 13 frames
 * for the first chunk of a session, 16 after (for 4 latent frames per
 * chunk), each timestamped at the session frame rate (PTS = frame index /
 * fps).
 *
 * Beside lingbotgen it decodes beside the generation: it answers the
 * generator's `lingbot-attach-decoder` query by giving the session a
 * decoder on a worker group of its own (`devices`, default the
 * generator's), fed by a 2-slot tensor channel from the DiT ranks
 * (lingbot_session_attach_decoder()), so chunk k decodes while chunk k + 1
 * is generated and the latents never cross the host.  The element is
 * asynchronous: the chain claims and queues a chunk, a decode thread
 * decodes (lingbot_session_decode_chunk()), the src pad's task pushes the
 * frames.  `LINGBOT_DECODE_OVERLAP=0` keeps the decode serial on the DiT
 * ranks.  A #GstLingbotDeviceMemory (caps feature `memory:LingbotDevice`)
 * is decoded where the chunk is, without being mapped; system-memory
 * bytes with lingbotgen's #GstLingbotChunkMeta in that session
 * (lingbot_session_decode()).  Plain latent bytes from elsewhere are
 * decoded by a decoder of this element's own, made from the shared
 * world's VAE (GstContext "lingbot.world", or `model-path`/`devices`).
 *
 * Each chunk posts an element message `lingbot-decode` (index, frames,
 * vae-seconds, compute-seconds = the chunk's DiT + VAE seconds).  When EOS
 * arrives, and every `summary-interval` chunks (a live session may never
 * end), it posts `lingbot-summary` (chunks, frames, steady-fps, the
 * compute-seconds and chunk-period mean/p50/p90/p99/max, decode seconds,
 * decode-hidden-fraction, eos): this element is the one that sees both
 * halves of a chunk's compute time.  The read-only `stats` property holds
 * the same figures at any time.
 *
 * LATENCY queries on the src pad return upstream's answer with the minimum
 * raised to one chunk's duration.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <math.h>
#include <string.h>
#include <gst/video/video.h>

#include "gst/gstlingbotvaedec.h"
#include "gst/gstlingbotgen.h"
#include "gst/lingbot/gstlingbotmeta.h"
#include "gst/gstlingbotutil.h"
#include "gst/gstlingbotworldholder.h"

GST_DEBUG_CATEGORY_STATIC (gst_lingbot_vae_dec_debug);
#define GST_CAT_DEFAULT gst_lingbot_vae_dec_debug

#define DEFAULT_MODEL_PATH NULL
#define DEFAULT_DEVICES NULL
#define DEFAULT_SUMMARY_INTERVAL 0
/* the largest latents accepted from caps: lingbotgen's limits (video at
 * most 4096 x 4096, at most 64 latent frames per chunk) */
#define MAX_LATENT_SIZE (4096 / LINGBOT_LATENT_STRIDE)
#define MAX_LATENT_FRAMES 64

enum
{
  PROP_0,
  PROP_MODEL_PATH,
  PROP_DEVICES,
  PROP_SUMMARY_INTERVAL,
  PROP_STATS,
};

struct _GstLingbotVaeDec
{
  GstElement parent;

  GstPad *sinkpad;
  GstPad *srcpad;

  /* properties (object lock); model-path and devices are the holder's */
  GstLingbotWorldHolder holder; /* the world (object lock) */
  guint summary_interval;

  /* streaming thread */
  int lat_frames, lat_h, lat_w;
  int fps_n, fps_d;
  GstVideoInfo out_info;
  gboolean negotiated;
  GstBufferPool *pool;          /* output frames */
  guint64 frame_index;
  guint64 chunk;
  /* decode task: the frame meta of the chunk being pushed */
  guint64 frame_chunk;
  guint frame_keys;
  /* object lock: the preview still until the first chunk's frames come
   * (repeat_preview()) */
  GstBuffer *preview_frame;
  LingbotDecoder *decoder;      /* plain-bytes path */

  /* the stats property and lingbot-summary (object lock): the chunks
   * decoded in this stream, appended by the decode thread, reset at
   * STREAM_START, FLUSH_STOP and READY->PAUSED (kept after a stop) */
  GstLingbotChunkLog *chunk_times;
  gboolean dit_unknown;         /* a chunk came without the generator meta */

  GstClockTime chunk_duration;  /* object lock; NONE before caps */
  GstLingbotLatencyEstimate decode_latency;     /* object lock: decode */
  GstClockTime position;        /* object lock: end of the last frame */

  /* Two tasks (qlock): the decode task takes latent chunks (and the
   * serialized events between them) from the input queue, which the chain
   * fills, so the generator starts its next chunk at once; it turns each
   * chunk into frame buffers for the output queue, from which the src
   * pad's task pushes them.  So chunk k + 1 decodes while chunk k's frames
   * wait for a clock-synchronised sink. */
  GMutex qlock;
  GCond qcond;
  GQueue queue;                 /* input: GstBuffer / serialized GstEvent */
  guint queued_buffers;
  guint max_buffers;            /* the session's slots: 2 */
  GQueue out;                   /* output: frame GstBuffer / GstEvent */
  guint out_buffers;
  guint max_out;                /* two chunks of frames */
  gboolean flushing;
  GstFlowReturn last_ret;       /* the push task's, returned by the chain */
  GThread *decode_thread;
  gboolean decode_run;          /* the thread runs while set */
  gboolean decode_busy;         /* it works on an item now */
  gboolean push_busy;           /* the push task pushes an item now */
  gboolean live;                /* object lock: the last LATENCY answer */
  guint64 frames_pushed;        /* object lock */
};

/* the properties kept in plain fields (gst_lingbot_property_set());
 * model-path and devices are the holder's */
static const GstLingbotProperty dec_properties[] = {
  {PROP_SUMMARY_INTERVAL, G_STRUCT_OFFSET (GstLingbotVaeDec, summary_interval)},
};

#define gst_lingbot_vae_dec_parent_class parent_class
G_DEFINE_TYPE (GstLingbotVaeDec, gst_lingbot_vae_dec, GST_TYPE_ELEMENT);
GST_ELEMENT_REGISTER_DEFINE (lingbotvaedec, "lingbotvaedec", GST_RANK_NONE,
    GST_TYPE_LINGBOT_VAE_DEC);

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE ("sink",
    GST_PAD_SINK, GST_PAD_ALWAYS,
    GST_STATIC_CAPS (GST_LINGBOT_LATENT_ALL_CAPS));

static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE ("src",
    GST_PAD_SRC, GST_PAD_ALWAYS,
    GST_STATIC_CAPS (GST_VIDEO_CAPS_MAKE ("{ I420, NV12, RGBA, RGB }")));

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

static void
summary_reset (GstLingbotVaeDec * self)
{
  GST_OBJECT_LOCK (self);
  gst_lingbot_chunk_log_clear (self->chunk_times);
  self->dit_unknown = FALSE;
  GST_OBJECT_UNLOCK (self);
}

/* a new session (STREAM_START) or a flush: its first chunk decodes to 13
 * frames again, the stats start over */
static void
new_stream (GstLingbotVaeDec * self)
{
  g_clear_pointer (&self->decoder, lingbot_decoder_free);
  self->frame_index = 0;
  self->chunk = 0;
  summary_reset (self);
}

static void
gst_lingbot_vae_dec_reset (GstLingbotVaeDec * self)
{
  g_clear_pointer (&self->decoder, lingbot_decoder_free);
  if (self->pool) {
    gst_buffer_pool_set_active (self->pool, FALSE);
    gst_clear_object (&self->pool);
  }
  self->negotiated = FALSE;
  self->frame_index = 0;
  self->chunk = 0;
  GST_OBJECT_LOCK (self);
  self->chunk_duration = GST_CLOCK_TIME_NONE;
  gst_lingbot_latency_estimate_reset (&self->decode_latency);
  self->position = GST_CLOCK_TIME_NONE;
  self->frames_pushed = 0;
  gst_clear_buffer (&self->preview_frame);
  GST_OBJECT_UNLOCK (self);
}

/* The figures of the stats property and of lingbot-summary, one
 * function for both: this element sees both halves of every chunk's
 * compute time (the generator's DiT seconds in the chunk meta, its own
 * decode seconds) and the generate intervals (decode-hidden-fraction).
 * Object lock held. */
static GstStructure *
summary_structure_unlocked (GstLingbotVaeDec * self, const char *name)
{
  GstStructure *s = gst_lingbot_chunk_stats_new (name, self->chunk_times,
      TRUE);

  gst_structure_set (s, "dit-seconds-known", G_TYPE_BOOLEAN,
      !self->dit_unknown, NULL);
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
  s = summary_structure_unlocked (self, "lingbot-summary");
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
  if (self->lat_frames < 1 || self->lat_frames > MAX_LATENT_FRAMES
      || self->lat_h < 1 || self->lat_h > MAX_LATENT_SIZE
      || self->lat_w < 1 || self->lat_w > MAX_LATENT_SIZE) {
    DEC_ERROR (self, CORE, NEGOTIATION,
        ("Latent chunks of %d frames of %dx%d are out of range (at most %d "
            "frames of %dx%d)", self->lat_frames, self->lat_w, self->lat_h,
            MAX_LATENT_FRAMES, MAX_LATENT_SIZE, MAX_LATENT_SIZE),
        ("%" GST_PTR_FORMAT, caps));
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

/* The latent caps that give the video caps downstream takes: a CAPS query
 * on the sink pad asks downstream for video/x-raw in our formats and
 * translates width, height and framerate into video-width, video-height,
 * framerate (and the latent grid, video / 8, where the size is fixed), so
 * that lingbotgen can take its size and rate from a caps filter after this
 * element (docs/elements.md "Caps"). */
static GstCaps *
translate_caps (GstLingbotVaeDec * self, GstCaps * filter)
{
  GstCaps *video = gst_pad_get_pad_template_caps (self->srcpad);
  GstCaps *peer = gst_pad_peer_query_caps (self->srcpad, video);
  GstCaps *latent = gst_caps_new_empty (), *tmpl, *res;

  gst_caps_unref (video);
  if (peer == NULL || gst_caps_is_any (peer)) {
    gst_clear_caps (&peer);
    gst_caps_unref (latent);
    latent = gst_pad_get_pad_template_caps (self->sinkpad);
  } else {
    for (guint i = 0; i < gst_caps_get_size (peer); i++) {
      const GstStructure *vs = gst_caps_get_structure (peer, i);
      GstStructure *ls = gst_structure_new_empty
          (GST_LINGBOT_LATENT_MEDIA_TYPE);
      const GValue *v;
      int x;

      for (guint d = 0; d < 2; d++) {
        const char *dim = d ? "height" : "width";
        const char *vfield = d ? "video-height" : "video-width";

        if ((v = gst_structure_get_value (vs, dim)) == NULL)
          continue;
        gst_structure_set_value (ls, vfield, v);
        /* a size the VAE cannot make leaves the grid open: lingbotgen
         * then names the size in its error */
        if (gst_structure_get_int (vs, dim, &x)
            && x % LINGBOT_LATENT_STRIDE == 0)
          gst_structure_set (ls, dim, G_TYPE_INT,
              x / LINGBOT_LATENT_STRIDE, NULL);
      }
      if ((v = gst_structure_get_value (vs, "framerate")) != NULL)
        gst_structure_set_value (ls, "framerate", v);
      /* both memory kinds: the latent path does not depend on it */
      gst_caps_append_structure_full (latent, gst_structure_copy (ls),
          gst_caps_features_new (GST_CAPS_FEATURE_MEMORY_LINGBOT_DEVICE, NULL));
      gst_caps_append_structure (latent, ls);
    }
    gst_caps_unref (peer);
    tmpl = gst_pad_get_pad_template_caps (self->sinkpad);
    res = gst_caps_intersect (tmpl, latent);
    gst_caps_unref (tmpl);
    gst_caps_unref (latent);
    latent = res;
  }
  if (filter) {
    res = gst_caps_intersect_full (filter, latent, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref (latent);
    latent = res;
  }
  GST_LOG_OBJECT (self, "sink caps %" GST_PTR_FORMAT, latent);
  return latent;
}

static void gst_lingbot_vae_dec_push_loop (GstLingbotVaeDec * self);
static GstFlowReturn out_push (GstLingbotVaeDec * self, GstMiniObject * item);

static GstFlowReturn push_preview (GstLingbotVaeDec * self, GstEvent * event);

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
      new_stream (self);
      break;
    case GST_EVENT_CUSTOM_DOWNSTREAM:
      if (gst_event_has_name (event, GST_LINGBOT_PREVIEW_EVENT)) {
        /* consumed: it becomes a frame */
        GstFlowReturn ret = push_preview (self, event);

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

/* Drops what is queued (the chunks' memories release their slots).
 * qlock held. */
static void
queue_clear_unlocked (GstLingbotVaeDec * self)
{
  g_queue_clear_full (&self->queue, (GDestroyNotify) gst_mini_object_unref);
  self->queued_buffers = 0;
  g_queue_clear_full (&self->out, (GDestroyNotify) gst_mini_object_unref);
  self->out_buffers = 0;
  g_cond_broadcast (&self->qcond);
}

static void
set_flushing (GstLingbotVaeDec * self, gboolean flushing)
{
  g_mutex_lock (&self->qlock);
  self->flushing = flushing;
  if (flushing)
    queue_clear_unlocked (self);
  else
    self->last_ret = GST_FLOW_OK;
  g_cond_broadcast (&self->qcond);
  g_mutex_unlock (&self->qlock);
}

static GstFlowReturn decode_buffer (GstLingbotVaeDec * self, GstBuffer * buf);

static gboolean
gst_lingbot_vae_dec_sink_event (GstPad * pad, GstObject * parent,
    GstEvent * event)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (parent);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_FLUSH_START:{
      gboolean ret = gst_pad_push_event (self->srcpad, event);

      set_flushing (self, TRUE);
      gst_pad_pause_task (self->srcpad);
      /* the decode thread finishes what it does (its push fails) */
      g_mutex_lock (&self->qlock);
      while (self->decode_busy)
        g_cond_wait (&self->qcond, &self->qlock);
      queue_clear_unlocked (self);
      g_mutex_unlock (&self->qlock);
      return ret;
    }
    case GST_EVENT_FLUSH_STOP:{
      gboolean ret = gst_pad_push_event (self->srcpad, event);

      new_stream (self);
      set_flushing (self, FALSE);
      gst_pad_start_task (self->srcpad, (GstTaskFunction)
          gst_lingbot_vae_dec_push_loop, self, NULL);
      return ret;
    }
    default:
      break;
  }
  if (!GST_EVENT_IS_SERIALIZED (event))
    return gst_pad_event_default (pad, parent, event);
  /* behind the chunks queued before it */
  g_mutex_lock (&self->qlock);
  if (self->flushing) {
    g_mutex_unlock (&self->qlock);
    gst_event_unref (event);
    return FALSE;
  }
  g_queue_push_tail (&self->queue, event);
  g_cond_broadcast (&self->qcond);
  g_mutex_unlock (&self->qlock);
  return TRUE;
}

/* The chain queues: at most the session's slot count of chunks wait (the
 * generator then waits here, not in the DiT), and a chunk in device memory
 * is claimed, so the session never spills it to host memory. */
static GstFlowReturn
gst_lingbot_vae_dec_chain (GstPad * pad, GstObject * parent, GstBuffer * buf)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (parent);
  GstMemory *mem = gst_buffer_n_memory (buf) == 1 ?
      gst_buffer_peek_memory (buf, 0) : NULL;
  GstFlowReturn ret;

  if (mem && gst_is_lingbot_device_memory (mem)) {
    GstLingbotDeviceMemory *dm = (GstLingbotDeviceMemory *) mem;

    lingbot_session_claim_chunk (dm->handle->session, dm->chunk);
  }
  g_mutex_lock (&self->qlock);
  while (!self->flushing && self->last_ret == GST_FLOW_OK
      && self->queued_buffers >= self->max_buffers)
    g_cond_wait (&self->qcond, &self->qlock);
  ret = self->flushing ? GST_FLOW_FLUSHING : self->last_ret;
  if (ret == GST_FLOW_OK) {
    g_queue_push_tail (&self->queue, buf);
    self->queued_buffers++;
    g_cond_broadcast (&self->qcond);
    buf = NULL;
  }
  g_mutex_unlock (&self->qlock);
  gst_clear_buffer (&buf);
  return ret;
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
static void
gst_lingbot_vae_dec_push_loop (GstLingbotVaeDec * self)
{
  GstMiniObject *item;
  GstFlowReturn ret = GST_FLOW_OK;

  g_mutex_lock (&self->qlock);
  while (!self->flushing && g_queue_is_empty (&self->out))
    g_cond_wait (&self->qcond, &self->qlock);
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

static gboolean
gst_lingbot_vae_dec_src_activate_mode (GstPad * pad, GstObject * parent,
    GstPadMode mode, gboolean active)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (parent);

  if (mode != GST_PAD_MODE_PUSH)
    return FALSE;
  if (active) {
    set_flushing (self, FALSE);
    decode_thread_start (self);
    return gst_pad_start_task (pad, (GstTaskFunction)
        gst_lingbot_vae_dec_push_loop, self, NULL);
  }
  set_flushing (self, TRUE);
  decode_thread_stop (self);
  return gst_pad_stop_task (pad);
}

static gboolean
ensure_own_decoder (GstLingbotVaeDec * self, GError ** error)
{
  g_autoptr (LingbotWorld) world = NULL;

  if (self->decoder)
    return TRUE;
  if (!gst_lingbot_world_holder_ensure (&self->holder, NULL, FALSE, error)) {
    if (error && *error == NULL)
      g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_NOT_FOUND,
          "latents without a session and no lingbot.world context or "
          "model-path to decode them with");
    return FALSE;
  }
  world = gst_lingbot_world_holder_dup_world (&self->holder);
  /* sized by the caps */
  self->decoder = lingbot_world_new_decoder (world, self->lat_h, self->lat_w,
      self->lat_frames, error);
  return self->decoder != NULL;
}

/* Queues @item (a frame, or a serialized event: not counted) for the push
 * task; waits while two chunks of frames are queued.  Returns the push
 * task's flow (FLUSHING when flushing). */
static GstFlowReturn
out_push (GstLingbotVaeDec * self, GstMiniObject * item)
{
  const gboolean frame = GST_IS_BUFFER (item);
  GstFlowReturn ret;

  g_mutex_lock (&self->qlock);
  while (frame && !self->flushing && self->last_ret == GST_FLOW_OK
      && self->out_buffers >= self->max_out)
    g_cond_wait (&self->qcond, &self->qlock);
  ret = self->flushing ? GST_FLOW_FLUSHING : self->last_ret;
  if (ret == GST_FLOW_OK || !frame) {
    g_queue_push_tail (&self->out, item);
    if (frame)
      self->out_buffers++;
    g_cond_broadcast (&self->qcond);
    item = NULL;
  }
  g_mutex_unlock (&self->qlock);
  if (item)
    gst_mini_object_unref (item);
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

/* Queues the @n frames of a chunk whose latent buffer was stamped @pts:
 * frame i at @pts + i / fps (the generator's timestamps, live or not); a
 * chunk without a timestamp continues the element's own frame count. */
static GstFlowReturn
push_frames (GstLingbotVaeDec * self, const LingbotFrames * frames, int n,
    GstClockTime pts, GError ** error)
{
  const guint64 den = (guint64) self->fps_d * GST_SECOND;

  for (int i = 0; i < n; i++) {
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
    gst_buffer_add_lingbot_frame_meta (out, self->frame_chunk,
        self->frame_keys, FALSE);
    GST_BUFFER_OFFSET (out) = self->frame_index;
    GST_BUFFER_OFFSET_END (out) = self->frame_index + 1;
    if (i == 0 && self->frame_index == 0)
      GST_BUFFER_FLAG_SET (out, GST_BUFFER_FLAG_DISCONT);
    self->frame_index++;
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
  GST_OBJECT_LOCK (self);
  gst_buffer_replace (&self->preview_frame, out);
  GST_OBJECT_UNLOCK (self);
  return out_push (self, GST_MINI_OBJECT_CAST (out));
}

/* An upstream force-key-unit (a viewer that joined, e.g. a WebRTC peer
 * whose transport came up after the preview went by) while a live stream
 * still shows its preview: the preview again, stamped with the running
 * time now, so that the viewer has a picture before the first key.
 * Returns whether it was queued. */
static gboolean
repeat_preview (GstLingbotVaeDec * self)
{
  GstBuffer *again = NULL;
  GstClock *clock;

  GST_OBJECT_LOCK (self);
  if (self->preview_frame && self->live)
    again = gst_buffer_copy (self->preview_frame);
  GST_OBJECT_UNLOCK (self);
  if (again == NULL)
    return FALSE;
  clock = gst_element_get_clock (GST_ELEMENT (self));
  if (clock) {
    GstClockTime now = gst_clock_get_time (clock);
    GstClockTime base = gst_element_get_base_time (GST_ELEMENT (self));

    if (now > base && now - base > GST_BUFFER_PTS (again))
      GST_BUFFER_PTS (again) = now - base;
    gst_object_unref (clock);
  }
  GST_BUFFER_FLAG_UNSET (again, GST_BUFFER_FLAG_DISCONT);
  GST_DEBUG_OBJECT (self, "preview again at %" GST_TIME_FORMAT,
      GST_TIME_ARGS (GST_BUFFER_PTS (again)));
  return out_push (self, GST_MINI_OBJECT_CAST (again)) == GST_FLOW_OK;
}

static gboolean
gst_lingbot_vae_dec_src_event (GstPad * pad, GstObject * parent,
    GstEvent * event)
{
  /* handled when the preview went again (upstream has no key units) */
  if (gst_video_event_is_force_key_unit (event)
      && repeat_preview (GST_LINGBOT_VAE_DEC (parent))) {
    gst_pad_event_default (pad, parent, event);
    return TRUE;
  }
  return gst_pad_event_default (pad, parent, event);
}

/* A live stream's latency covers the decode too (the frames of a chunk
 * leave only after it): the decode latency is a bounded statistic of the
 * last chunks' decode times (#GstLingbotLatencyEstimate: the largest of
 * the last 4 plus an eighth, moved when a decode is above it or it falls
 * by more than a tenth), and GST_MESSAGE_LATENCY is posted when it moves
 * (live streams only: the last LATENCY answer said live). */
static void
note_decode_time (GstLingbotVaeDec * self, double seconds)
{
  GstClockTime t = (GstClockTime) (seconds * GST_SECOND), now;
  gboolean post;

  GST_OBJECT_LOCK (self);
  post = gst_lingbot_latency_estimate_add (&self->decode_latency, t)
      && self->live;
  now = self->decode_latency.announced;
  GST_OBJECT_UNLOCK (self);
  if (post) {
    GST_INFO_OBJECT (self, "decode latency %" GST_TIME_FORMAT ": posting "
        "a latency message", GST_TIME_ARGS (now));
    gst_element_post_message (GST_ELEMENT (self),
        gst_message_new_latency (GST_OBJECT (self)));
  }
}

/* after a session decode of @n frames: its time noted, its frames pushed */
static GstFlowReturn
push_decoded (GstLingbotVaeDec * self, GstLingbotSessionHandle * h,
    const LingbotChunkStats * stats, int n, GstClockTime pts, GError ** error)
{
  note_decode_time (self, stats->vae_seconds);
  return push_frames (self, lingbot_session_get_frames (h->session), n, pts,
      error);
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

  if (!self->negotiated) {
    gst_buffer_unref (buf);
    return GST_FLOW_NOT_NEGOTIATED;
  }
  self->frame_chunk = meta ? meta->chunk : self->chunk;
  self->frame_keys = meta ? meta->stats.keys : 0;
  GST_OBJECT_LOCK (self);
  gst_clear_buffer (&self->preview_frame);
  GST_OBJECT_UNLOCK (self);
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

  if (mem && gst_is_lingbot_device_memory (mem)) {
    /* memory:LingbotDevice: decode the session's latents where they are,
     * never mapping the buffer */
    GstLingbotDeviceMemory *dm = (GstLingbotDeviceMemory *) mem;
    GstLingbotSessionHandle *h = dm->handle;

    if (meta)
      stats = meta->stats;
    else
      stats.index = dm->chunk;
    /* where its latents are (a channel slot on the decode ranks, a spill,
     * or the serial latent tensor); beside the generator's next chunk */
    ok = lingbot_session_decode_chunk (h->session, dm->chunk, &n, &stats,
        &error);
    if (ok)
      ret = push_decoded (self, h, &stats, n, pts, &error);
    gst_buffer_unref (buf);
    goto decoded;
  }

  gst_buffer_map (buf, &map, GST_MAP_READ);
  /* the size was checked above: this cannot fail */
  latents = lingbot_latents_new_wrapped (map.data, map.size, self->lat_frames,
      self->lat_h, self->lat_w, NULL);

  if (meta) {
    GstLingbotSessionHandle *h = meta->handle;

    stats = meta->stats;
    /* sets stats.vae_seconds: the decode alone, not the wait for a
     * generate that holds the world */
    ok = lingbot_session_decode (h->session, latents, &n, &stats, &error);
    if (ok)
      ret = push_decoded (self, h, &stats, n, pts, &error);
  } else {
    stats.index = self->chunk;
    if (!ensure_own_decoder (self, &error)) {
      g_autofree char *text = g_strdup_printf ("No VAE decoder for plain "
          "latents: %s", error ? error->message : "no world");

      gst_buffer_unmap (buf, &map);
      gst_buffer_unref (buf);
      wait_started (self);
      gst_lingbot_post_error (GST_ELEMENT (self), error,
          GST_LINGBOT_ERROR_CONTEXT_OPEN, text, NULL);
      return GST_FLOW_ERROR;
    }
    t0 = g_get_monotonic_time ();
    ok = lingbot_decoder_decode (self->decoder, latents, &n, &error);
    if (ok) {
      stats.decode_start_us = t0;
      stats.decode_end_us = g_get_monotonic_time ();
      stats.vae_seconds = (stats.decode_end_us - t0) / 1e6;
      note_decode_time (self, stats.vae_seconds);
      ret = push_frames (self, lingbot_decoder_get_frames (self->decoder), n,
          pts, &error);
    }
  }
  gst_buffer_unmap (buf, &map);
  gst_buffer_unref (buf);

decoded:
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

/* ---- context ---- */

/* LATENCY (docs/elements.md "Latency"): upstream's answer, with min
 * raised to one chunk's duration (4 C frames at the stream's rate) when
 * upstream reports less: the frames of a chunk exist only once the whole
 * chunk arrived (not added on top, since lingbotgen already counts that
 * chunk); live, plus the decode latency (note_decode_time(): the frames
 * leave only after the decode). */
static gboolean
gst_lingbot_vae_dec_latency_query (GstLingbotVaeDec * self, GstQuery * query)
{
  gboolean live;
  GstClockTime min, max, chunk, decode;

  if (!gst_pad_peer_query (self->sinkpad, query))
    return FALSE;
  gst_query_parse_latency (query, &live, &min, &max);
  GST_OBJECT_LOCK (self);
  chunk = self->chunk_duration;
  decode = self->decode_latency.announced;
  self->live = live;
  GST_OBJECT_UNLOCK (self);
  if (GST_CLOCK_TIME_IS_VALID (chunk) && (!GST_CLOCK_TIME_IS_VALID (min)
          || min < chunk))
    min = chunk;
  if (live && GST_CLOCK_TIME_IS_VALID (decode) && GST_CLOCK_TIME_IS_VALID (min))
    min += decode;
  if (GST_CLOCK_TIME_IS_VALID (max) && max < min)
    max = min;
  gst_query_set_latency (query, live, min, max);
  return TRUE;
}

/* lingbotgen's query right after its session exists: the session's
 * decode moves onto its own worker group here (`devices`, default the
 * generator's), fed by a tensor channel from the DiT ranks, unless
 * LINGBOT_DECODE_OVERLAP=0 (then it stays serial on the DiT ranks). */
static gboolean
attach_decoder (GstLingbotVaeDec * self, GstQuery * query)
{
  GstStructure *st = gst_query_writable_structure (query);
  GstLingbotSessionHandle *h = NULL;
  g_autofree char *devices = NULL;
  g_autoptr (GError) error = NULL;
  const char *env = g_getenv ("LINGBOT_DECODE_OVERLAP");
  gboolean attached = FALSE;

  if (!gst_structure_get (st, "handle", GST_TYPE_LINGBOT_SESSION_HANDLE, &h,
          NULL) || h == NULL)
    return FALSE;
  gst_lingbot_world_holder_dup_config (&self->holder, NULL, &devices);
  if (env != NULL && g_strcmp0 (env, "0") == 0) {
    GST_INFO_OBJECT (self, "LINGBOT_DECODE_OVERLAP=0: the decode stays on "
        "the DiT ranks, serial");
  } else if (lingbot_session_has_decoder (h->session)) {
    GST_INFO_OBJECT (self, "the session has its decoder already");
  } else if (lingbot_session_attach_decoder (h->session, devices, 0, &error)) {
    attached = TRUE;
    GST_INFO_OBJECT (self, "decoding on %s, beside the generation (%d "
        "slots)", devices ? devices : "the generator's devices",
        lingbot_session_get_n_slots (h->session));
  } else {
    GST_ELEMENT_WARNING (self, RESOURCE, SETTINGS,
        ("Cannot decode beside the generation: %s", error->message),
        ("decoding on the DiT ranks instead"));
  }
  g_mutex_lock (&self->qlock);
  self->max_buffers = (guint) MAX (2, lingbot_session_get_n_slots (h->session));
  g_mutex_unlock (&self->qlock);
  gst_structure_set (st, "attached", G_TYPE_BOOLEAN, attached, NULL);
  gst_lingbot_session_handle_unref (h);
  return TRUE;
}

static gboolean
gst_lingbot_vae_dec_pad_query (GstPad * pad, GstObject * parent,
    GstQuery * query)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (parent);

  if (GST_QUERY_TYPE (query) == GST_QUERY_LATENCY && pad == self->srcpad)
    return gst_lingbot_vae_dec_latency_query (self, query);
  if (GST_QUERY_TYPE (query) == GST_QUERY_CUSTOM && pad == self->sinkpad
      && gst_structure_has_name (gst_query_get_structure (query),
          GST_LINGBOT_ATTACH_DECODER_QUERY))
    return attach_decoder (self, query);
  if (GST_QUERY_TYPE (query) == GST_QUERY_CAPS && pad == self->sinkpad) {
    GstCaps *filter, *caps;

    gst_query_parse_caps (query, &filter);
    caps = translate_caps (self, filter);
    gst_query_set_caps_result (query, caps);
    gst_caps_unref (caps);
    return TRUE;
  }
  if (GST_QUERY_TYPE (query) == GST_QUERY_POSITION && pad == self->srcpad) {
    GstFormat format;
    GstClockTime position;
    guint64 frames;

    /* where the video pushed so far ends */
    gst_query_parse_position (query, &format, NULL);
    GST_OBJECT_LOCK (self);
    position = self->position;
    frames = self->frames_pushed;
    GST_OBJECT_UNLOCK (self);
    if (format == GST_FORMAT_TIME && GST_CLOCK_TIME_IS_VALID (position)) {
      gst_query_set_position (query, format, position);
      return TRUE;
    }
    if (format == GST_FORMAT_DEFAULT) {
      gst_query_set_position (query, format, frames);
      return TRUE;
    }
  }

  if (gst_lingbot_world_holder_query (&self->holder, query))
    return TRUE;
  return gst_pad_query_default (pad, parent, query);
}

static void
gst_lingbot_vae_dec_set_context (GstElement * element, GstContext * context)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (element);

  gst_lingbot_world_holder_set_context (&self->holder, context);
  GST_ELEMENT_CLASS (parent_class)->set_context (element, context);
}

static GstStateChangeReturn
gst_lingbot_vae_dec_change_state (GstElement * element,
    GstStateChange transition)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (element);
  GstStateChangeReturn ret;

  if (transition == GST_STATE_CHANGE_READY_TO_PAUSED) {
    gst_lingbot_vae_dec_reset (self);
    /* the stats of the previous run were kept until now */
    summary_reset (self);
  }
  /* a chain waiting for queue space must return before the pads go */
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY)
    set_flushing (self, TRUE);
  ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY)
    gst_lingbot_vae_dec_reset (self);
  gst_lingbot_world_holder_change_state (&self->holder, transition);
  return ret;
}

/* ---- properties ---- */

static void
gst_lingbot_vae_dec_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (object);

  GST_OBJECT_LOCK (self);
  if (!gst_lingbot_world_holder_set_property (&self->holder, dec_properties,
          G_N_ELEMENTS (dec_properties), pspec, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  GST_OBJECT_UNLOCK (self);
}

static void
gst_lingbot_vae_dec_get_property (GObject * object, guint prop_id,
    GValue * value, GParamSpec * pspec)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (object);

  GST_OBJECT_LOCK (self);
  if (prop_id == PROP_STATS)
    g_value_take_boxed (value, summary_structure_unlocked (self,
            "lingbot-stats"));
  else if (!gst_lingbot_world_holder_get_property (&self->holder,
          dec_properties, G_N_ELEMENTS (dec_properties), pspec, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  GST_OBJECT_UNLOCK (self);
}

static void
gst_lingbot_vae_dec_finalize (GObject * object)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (object);

  gst_lingbot_vae_dec_reset (self);
  g_queue_clear_full (&self->queue, (GDestroyNotify) gst_mini_object_unref);
  g_queue_clear_full (&self->out, (GDestroyNotify) gst_mini_object_unref);
  g_mutex_clear (&self->qlock);
  g_cond_clear (&self->qcond);
  gst_lingbot_chunk_log_free (self->chunk_times);
  gst_lingbot_world_holder_clear (&self->holder);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_lingbot_vae_dec_class_init (GstLingbotVaeDecClass * klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  const GParamFlags ready = G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
      GST_PARAM_MUTABLE_READY;

  GST_DEBUG_CATEGORY_INIT (gst_lingbot_vae_dec_debug, "lingbotvaedec", 0,
      "LingBot-World VAE decoder");

  gobject_class->set_property = gst_lingbot_vae_dec_set_property;
  gobject_class->get_property = gst_lingbot_vae_dec_get_property;
  gobject_class->finalize = gst_lingbot_vae_dec_finalize;

  g_object_class_install_property (gobject_class, PROP_MODEL_PATH,
      g_param_spec_string ("model-path", "Model path",
          "Model whose VAE decodes latents that carry no session (NULL = "
          "the shared lingbot.world context)", DEFAULT_MODEL_PATH, ready));
  g_object_class_install_property (gobject_class, PROP_DEVICES,
      g_param_spec_string ("devices", "Devices",
          "Ranks of the decode beside a lingbotgen session (NULL = the "
          "generator's) and for latents that carry no session (NULL = the "
          "shared context's, else cpu:1)", DEFAULT_DEVICES, ready));
  /**
   * GstLingbotVaeDec:summary-interval:
   *
   * Post `lingbot-summary` every this many chunks (the figures since the
   * stream started, `eos` FALSE), after the frames of the chunk, besides
   * the one at EOS: a live session may never end.  0: at EOS only.
   */
  g_object_class_install_property (gobject_class, PROP_SUMMARY_INTERVAL,
      g_param_spec_uint ("summary-interval", "Summary interval",
          "Post lingbot-summary every N chunks as well as at EOS (0 = at "
          "EOS only)", 0, G_MAXUINT, DEFAULT_SUMMARY_INTERVAL,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
          GST_PARAM_MUTABLE_PLAYING));
  /**
   * GstLingbotVaeDec:stats:
   *
   * The figures of the chunks decoded in the current stream (kept after
   * the element stops, until READY->PAUSED): a "lingbot-stats" structure
   * with the fields of `lingbot-summary` but `eos` (docs/elements.md):
   * chunks, frames, steady-fps, compute-seconds-*, period-seconds-*,
   * decode-seconds-total / -mean, decode-hidden-fraction,
   * dit-seconds-known.
   */
  g_object_class_install_property (gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Statistics",
          "Chunks, frames, steady fps, compute seconds, chunk period, decode "
          "seconds and the decode's hidden fraction of the chunks decoded "
          "in this stream (the fields of lingbot-summary)",
          GST_TYPE_STRUCTURE, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (element_class,
      "LingBot-World VAE decoder", "Codec/Decoder/Video",
      "Decodes LingBot-World latent chunks to raw video frames",
      "lingbot-gst developers");

  element_class->change_state = gst_lingbot_vae_dec_change_state;
  /* a query on the element (CONTEXT): GstElement's default hands it to
   * the src pad, gst_lingbot_vae_dec_pad_query() */
  element_class->set_context = gst_lingbot_vae_dec_set_context;
}

static void
gst_lingbot_vae_dec_init (GstLingbotVaeDec * self)
{
  self->sinkpad = gst_pad_new_from_static_template (&sink_template, "sink");
  gst_pad_set_chain_function (self->sinkpad, gst_lingbot_vae_dec_chain);
  gst_pad_set_event_function (self->sinkpad, gst_lingbot_vae_dec_sink_event);
  gst_pad_set_query_function (self->sinkpad, gst_lingbot_vae_dec_pad_query);
  gst_element_add_pad (GST_ELEMENT (self), self->sinkpad);

  self->srcpad = gst_pad_new_from_static_template (&src_template, "src");
  gst_pad_set_event_function (self->srcpad, gst_lingbot_vae_dec_src_event);
  gst_pad_set_query_function (self->srcpad, gst_lingbot_vae_dec_pad_query);
  gst_pad_use_fixed_caps (self->srcpad);
  gst_pad_set_activatemode_function (self->srcpad,
      gst_lingbot_vae_dec_src_activate_mode);
  gst_element_add_pad (GST_ELEMENT (self), self->srcpad);

  gst_lingbot_world_holder_init (&self->holder, GST_ELEMENT (self),
      DEFAULT_MODEL_PATH, DEFAULT_DEVICES, TRUE);
  gst_lingbot_properties_init (self, dec_properties,
      G_N_ELEMENTS (dec_properties));
  self->chunk_times = gst_lingbot_chunk_log_new (GST_LINGBOT_CHUNK_LOG_WINDOW);
  g_mutex_init (&self->qlock);
  g_cond_init (&self->qcond);
  g_queue_init (&self->queue);
  self->max_buffers = 2;
  g_queue_init (&self->out);
  self->max_out = 32;
  self->flushing = TRUE;

  self->chunk_duration = GST_CLOCK_TIME_NONE;
  gst_lingbot_latency_estimate_reset (&self->decode_latency);
  self->position = GST_CLOCK_TIME_NONE;
}

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

#include "gst/gstlingbotvaedec-private.h"

GST_DEBUG_CATEGORY (gst_lingbot_vae_dec_debug);
#define GST_CAT_DEFAULT gst_lingbot_vae_dec_debug

#define DEFAULT_MODEL_PATH NULL
#define DEFAULT_DEVICES NULL
#define DEFAULT_SUMMARY_INTERVAL 0
#define DEFAULT_HOLD TRUE

enum
{
  PROP_0,
  PROP_MODEL_PATH,
  PROP_DEVICES,
  PROP_SUMMARY_INTERVAL,
  PROP_HOLD,
  PROP_STATS,
};

/* the properties kept in plain fields (gst_lingbot_property_set());
 * model-path and devices are the holder's */
static const GstLingbotProperty dec_properties[] = {
  {PROP_SUMMARY_INTERVAL, G_STRUCT_OFFSET (GstLingbotVaeDec, summary_interval)},
  {PROP_HOLD, G_STRUCT_OFFSET (GstLingbotVaeDec, hold)},
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

static gboolean
gst_lingbot_vae_dec_sink_event (GstPad * pad, GstObject * parent,
    GstEvent * event)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (parent);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_FLUSH_START:{
      gboolean ret = gst_pad_push_event (self->srcpad, event);
      GQueue dropped = G_QUEUE_INIT;

      gst_lingbot_vae_dec_decode_set_flushing (self, TRUE);
      gst_pad_pause_task (self->srcpad);
      /* the decode thread finishes what it does (its push fails) */
      g_mutex_lock (&self->qlock);
      while (self->decode_busy)
        g_cond_wait (&self->qcond, &self->qlock);
      gst_lingbot_vae_dec_decode_clear_unlocked (self, &dropped);
      g_mutex_unlock (&self->qlock);
      g_queue_clear_full (&dropped, (GDestroyNotify) gst_mini_object_unref);
      return ret;
    }
    case GST_EVENT_FLUSH_STOP:{
      gboolean ret = gst_pad_push_event (self->srcpad, event);

      gst_lingbot_vae_dec_decode_new_stream (self);
      gst_lingbot_vae_dec_decode_set_flushing (self, FALSE);
      gst_pad_start_task (self->srcpad, (GstTaskFunction)
          gst_lingbot_vae_dec_decode_push_loop, self, NULL);
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
  /* a new stream or segment: its first chunk cuts nothing */
  if (GST_EVENT_TYPE (event) == GST_EVENT_STREAM_START
      || GST_EVENT_TYPE (event) == GST_EVENT_SEGMENT)
    self->in_end = GST_CLOCK_TIME_NONE;
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

    /* (another lingbotvaedec behind a tee may be the session's decoder:
     * then this one maps the buffer) */
    if (gst_lingbot_session_handle_claim_decoder (dm->handle, self->decoder_id))
      lingbot_session_claim_chunk (dm->handle->session, dm->chunk);
  }
  /* a key cut takes effect now, not when this chunk's decode starts */
  gst_lingbot_vae_dec_decode_cut_early (self, buf);
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

/* ---- context ---- */

/* LATENCY (docs/elements.md "Latency"): upstream's answer.  Not live,
 * min is raised to one chunk's duration (4 C frames at the stream's rate)
 * when upstream reports less: the frames of a chunk exist only once the
 * whole chunk arrived (not added on top, since lingbotgen already counts
 * that chunk).  Live, upstream's min already holds the chunk: lingbotgen
 * pushes a chunk stamped P by P + its compute latency, all of its frames
 * with it, so the first frame is the latest and nothing is raised (raising
 * it to the chunk, as until December 2026, held every frame of a session
 * faster than real time one chunk less the compute latency longer at the
 * sink: 0.8 s at 208x128 on 2 cores); the decode latency is added
 * (note_decode_time(): what the frames of a chunk need, each latent
 * frame's leaving as soon as it is decoded). */
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
  self->hold_latency = live ? min : GST_CLOCK_TIME_NONE;
  GST_OBJECT_UNLOCK (self);
  if (!live && GST_CLOCK_TIME_IS_VALID (chunk)
      && (!GST_CLOCK_TIME_IS_VALID (min) || min < chunk))
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
    gst_lingbot_vae_dec_decode_reset (self);
    /* the stats of the previous run were kept until now */
    gst_lingbot_vae_dec_decode_summary_reset (self);
  }
  if (transition == GST_STATE_CHANGE_PLAYING_TO_PAUSED)
    gst_lingbot_latency_stepper_set_playing (self->latency_stepper, FALSE);
  /* a chain waiting for queue space must return before the pads go */
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY)
    gst_lingbot_vae_dec_decode_set_flushing (self, TRUE);
  ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY)
    gst_lingbot_vae_dec_decode_reset (self);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_PLAYING
      && ret != GST_STATE_CHANGE_FAILURE)
    gst_lingbot_latency_stepper_set_playing (self->latency_stepper, TRUE);
  gst_lingbot_world_holder_change_state (&self->holder, transition);
  return ret;
}

/* ---- properties ---- */

static void
gst_lingbot_vae_dec_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (object);

  if (!gst_lingbot_property_can_set (GST_ELEMENT (self), pspec))
    return;
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
    g_value_take_boxed (value,
        gst_lingbot_vae_dec_decode_summary_unlocked (self, "lingbot-stats"));
  else if (!gst_lingbot_world_holder_get_property (&self->holder,
          dec_properties, G_N_ELEMENTS (dec_properties), pspec, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  GST_OBJECT_UNLOCK (self);
}

static void
gst_lingbot_vae_dec_finalize (GObject * object)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (object);

  gst_lingbot_vae_dec_decode_reset (self);
  g_clear_pointer (&self->latency_stepper, gst_lingbot_latency_stepper_free);
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
   * GstLingbotVaeDec:hold:
   *
   * Live: keep each decoded frame until the running time of its PTS plus
   * the latency upstream reports (lingbotgen's compute latency), the
   * latest it would have left without this element, instead of pushing it
   * when decoded; a clock-synchronised sink waits for it anyway, and the
   * frames still here are those a chunk stamped earlier (lingbotgen
   * `key-cut`, on a key change) replaces.  Downstream keeps the decode
   * latency as its margin.  Not live: no effect.
   */
  g_object_class_install_property (gobject_class, PROP_HOLD,
      g_param_spec_boolean ("hold", "Hold",
          "Live: keep each frame until its PTS plus upstream's latency "
          "(so that a key-cut chunk can replace the frames still here)",
          DEFAULT_HOLD, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
          GST_PARAM_MUTABLE_READY));
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

/* (object lock: the stepper's estimate lock) the decode latency fell at
 * once (beyond a chunk's duration above its goal, after a slow chunk):
 * the frames queued so far were timed for the old figure and are late at
 * a sink by design; their QoS is not passed upstream, where lingbotgen
 * would raise its compute latency by their lateness (docs/elements.md
 * lingbotvaedec "Latency") */
static void
decode_latency_jumped (gpointer data)
{
  GstLingbotVaeDec *self = data;

  self->qos_from = self->made_end;
}

/* QoS about a frame queued before the decode latency last fell at once
 * goes no further (decode_latency_jumped()); everything else as the
 * default does */
static gboolean
gst_lingbot_vae_dec_src_event (GstPad * pad, GstObject * parent,
    GstEvent * event)
{
  GstLingbotVaeDec *self = GST_LINGBOT_VAE_DEC (parent);

  if (GST_EVENT_TYPE (event) == GST_EVENT_QOS) {
    GstClockTime timestamp, from;

    gst_event_parse_qos (event, NULL, NULL, NULL, &timestamp);
    GST_OBJECT_LOCK (self);
    from = self->qos_from;
    GST_OBJECT_UNLOCK (self);
    if (GST_CLOCK_TIME_IS_VALID (from) && GST_CLOCK_TIME_IS_VALID (timestamp)
        && timestamp < from) {
      GST_DEBUG_OBJECT (self, "QoS of a frame at %" GST_TIME_FORMAT
          ", queued before the decode latency fell at once (frames before %"
          GST_TIME_FORMAT "): not passed upstream", GST_TIME_ARGS (timestamp),
          GST_TIME_ARGS (from));
      gst_event_unref (event);
      return TRUE;
    }
  }
  return gst_pad_event_default (pad, parent, event);
}

static void
gst_lingbot_vae_dec_init (GstLingbotVaeDec * self)
{
  static gint next_decoder_id;

  self->decoder_id = g_atomic_int_add (&next_decoder_id, 1) + 1;
  self->sinkpad = gst_pad_new_from_static_template (&sink_template, "sink");
  gst_pad_set_chain_function (self->sinkpad, gst_lingbot_vae_dec_chain);
  gst_pad_set_event_function (self->sinkpad, gst_lingbot_vae_dec_sink_event);
  gst_pad_set_query_function (self->sinkpad, gst_lingbot_vae_dec_pad_query);
  gst_element_add_pad (GST_ELEMENT (self), self->sinkpad);

  self->srcpad = gst_pad_new_from_static_template (&src_template, "src");
  gst_pad_set_query_function (self->srcpad, gst_lingbot_vae_dec_pad_query);
  gst_pad_set_event_function (self->srcpad, gst_lingbot_vae_dec_src_event);
  gst_pad_use_fixed_caps (self->srcpad);
  gst_pad_set_activatemode_function (self->srcpad,
      gst_lingbot_vae_dec_decode_src_activate_mode);
  gst_element_add_pad (GST_ELEMENT (self), self->srcpad);

  gst_lingbot_world_holder_init (&self->holder, GST_ELEMENT (self),
      DEFAULT_MODEL_PATH, DEFAULT_DEVICES, TRUE);
  gst_lingbot_properties_init (self, dec_properties,
      G_N_ELEMENTS (dec_properties));
  self->hold_latency = GST_CLOCK_TIME_NONE;
  self->queued_end = GST_CLOCK_TIME_NONE;
  self->in_end = GST_CLOCK_TIME_NONE;
  self->cut_pts = GST_CLOCK_TIME_NONE;
  self->drop_before = GST_CLOCK_TIME_NONE;
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
  self->latency_stepper = gst_lingbot_latency_stepper_new (GST_ELEMENT (self),
      gst_lingbot_vae_dec_debug, NULL, &self->decode_latency);
  gst_lingbot_latency_stepper_set_jump_func (self->latency_stepper,
      decode_latency_jumped, self);
  self->position = GST_CLOCK_TIME_NONE;
  self->made_end = GST_CLOCK_TIME_NONE;
  self->qos_from = GST_CLOCK_TIME_NONE;
}

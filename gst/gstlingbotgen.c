/* lingbot-gst: lingbotgen, control in -> latent chunks out
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
/**
 * SECTION:element-lingbotgen
 * @title: lingbotgen
 *
 * Owns one LingBot-World generation session (lingbot/lingbot.h): takes the
 * control stream of lingbotcontrolsrc on its `control` pad, a reference
 * image (`image-location`, or raw RGB frames on a requested `image` pad),
 * a prompt (or `prompt-embeds`) and a seed, and pushes one buffer of
 * latents per chunk (`application/x-lingbot-latent`) from its own
 * streaming thread, generating on the ranks of the shared world
 * (GstContext "lingbot.world").
 *
 * Each chunk is built from one snapshot of the held keys (a tap between
 * chunks is never lost, #LingbotKeyState).  With `live=false` the control
 * times are mapped onto the chunk timeline by the deterministic virtual
 * clock of lingbot_control_trace_schedule(), so a trace gives the same
 * video on every run; with `live=true` the keys held when a chunk starts
 * are used, and nothing is generated while nothing is held.  Without a
 * linked control pad every chunk is generated with no key held.
 *
 * Every chunk posts an element message `lingbot-chunk` (index, frames,
 * keys, keys-string, revision, tap, snapshot, dit-seconds, vae-seconds,
 * compute-seconds): revision counts the presses (tap snapshots) applied so
 * far, tap/snapshot say whether the chunk took a press's snapshot or the
 * held set; compute-seconds = control + condition + DiT, vae-seconds = 0
 * (the decode is lingbotvaedec's, in its lingbot-decode message); the
 * read-only `stats` property sums them up (chunks, frames, steady fps,
 * compute seconds and chunk period percentiles).  The
 * stream ends after `frames` video frames; the end of an offline trace
 * means no more key changes (a bounded session goes on with no key held),
 * and ends an unbounded one (`frames` = 0) when nothing is held.  A control
 * pad linked only to a ghost pad without a peer counts as unlinked.
 *
 * The latent caps carry the feature `memory:LingbotDevice` whenever
 * downstream accepts it (offered first): each buffer then holds a
 * #GstLingbotDeviceMemory naming the session's latents, not a copy
 * (mapping it downloads them); otherwise the latent bytes in system
 * memory.  Either way a #GstLingbotChunkMeta names session and chunk.
 *
 * LATENCY queries on the src pad are answered, live, with the compute
 * latency (a bounded statistic of the last chunks' compute times,
 * re-announced with GST_MESSAGE_LATENCY when it moves), offline with one
 * chunk's duration (4 C frames at `fps`) as the minimum; no maximum.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 lingbotcontrolsrc location=controls.json ! lingbotgen \
 *     model-path=/models/lingbot-world-v2 image-location=start.jpg \
 *     prompt="a sunny street" devices=0,1,2,3 ! lingbotvaedec ! \
 *     videoconvert ! autovideosink
 * ]|
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/gstlingbotgen-private.h"

GST_DEBUG_CATEGORY (gst_lingbot_gen_debug);
#define GST_CAT_DEFAULT gst_lingbot_gen_debug

#define DEFAULT_MODEL_PATH NULL
#define DEFAULT_PROMPT NULL
#define DEFAULT_PROMPT_EMBEDS NULL
#define DEFAULT_IMAGE_LOCATION NULL
#define DEFAULT_SEED 42
#define DEFAULT_DEVICES "cpu:1"
#define DEFAULT_PRECISION GST_LINGBOT_PRECISION_FP32
#define DEFAULT_LOCAL_ATTN_SIZE 18
#define DEFAULT_SINK_SIZE 6
#define DEFAULT_MAX_ATTENTION_SIZE 0
#define DEFAULT_SAMPLE_SHIFT 10.0
#define DEFAULT_TIMESTEP_INDICES "0,250,500,750"
#define DEFAULT_FRAMES 0
#define DEFAULT_WIDTH 0
#define DEFAULT_HEIGHT 0
#define DEFAULT_PIXEL_AREA (480 * 832)
#define MAX_PIXEL_AREA (GST_LINGBOT_GEN_MAX_SIZE * GST_LINGBOT_GEN_MAX_SIZE)
#define DEFAULT_FPS 0
#define DEFAULT_IS_LIVE FALSE
#define DEFAULT_LATENCY GST_CLOCK_TIME_NONE
#define DEFAULT_SIGNAL_PASSES FALSE
#define DEFAULT_PREVIEW FALSE
/* key-restart: -1 = live: after any DiT pass, offline: never */
#define DEFAULT_KEY_RESTART (-1)
#define MAX_KEY_RESTART 64
#define DEFAULT_KEY_RESTART_MAX 1
#define DEFAULT_KEY_CUT TRUE
#define MAX_KEY_RESTART_MAX 8

enum
{
  PROP_0,
  PROP_MODEL_PATH,
  PROP_PROMPT,
  PROP_PROMPT_EMBEDS,
  PROP_IMAGE_LOCATION,
  PROP_SEED,
  PROP_DEVICES,
  PROP_CHUNK_FRAMES,
  PROP_LOCAL_ATTN_SIZE,
  PROP_SINK_SIZE,
  PROP_MAX_ATTENTION_SIZE,
  PROP_SAMPLE_SHIFT,
  PROP_TIMESTEP_INDICES,
  PROP_FRAMES,
  PROP_WIDTH,
  PROP_HEIGHT,
  PROP_PIXEL_AREA,
  PROP_FPS,
  PROP_FRAMERATE,
  PROP_IS_LIVE,
  PROP_LIVE,
  PROP_LATENCY,
  PROP_PRECISION,
  PROP_SIGNAL_PASSES,
  PROP_STATS,
  PROP_PREVIEW,
  PROP_KEY_RESTART,
  PROP_KEY_RESTART_MAX,
  PROP_KEY_CUT,
};

/**
 * gst_lingbot_precision_get_type:
 *
 * Returns: the #GType of #GstLingbotPrecision ("GstLingbotPrecision",
 * nicks "fp32" and "bf16", what gst-launch-1.0 and gst_util_set_object_arg()
 * take).
 */
GType
gst_lingbot_precision_get_type (void)
{
  static gsize id = 0;
  static const GEnumValue values[] = {
    {GST_LINGBOT_PRECISION_FP32, "f32 weights and math", "fp32"},
    {GST_LINGBOT_PRECISION_BF16, "bf16 matrix weights, f32 accumulation",
        "bf16"},
    {GST_LINGBOT_PRECISION_FP8, "e4m3 matrix weights and GEMM inputs with "
          "per-channel and per-token scales, f32 accumulation (Hopper+)",
        "fp8"},
    {0, NULL, NULL}
  };
  if (g_once_init_enter (&id)) {
    GType t = g_enum_register_static ("GstLingbotPrecision", values);
    g_once_init_leave (&id, t);
  }
  return (GType) id;
}

guint gst_lingbot_gen_signals[GST_LINGBOT_GEN_N_SIGNALS];

#define FIELD(id, member) { id, G_STRUCT_OFFSET (GstLingbotGen, member) }
/* the properties kept in plain fields (gst_lingbot_property_set());
 * model-path and devices are the holder's, framerate is two fields */
static const GstLingbotProperty gen_properties[] = {
  FIELD (PROP_PROMPT, prompt),
  FIELD (PROP_PROMPT_EMBEDS, prompt_embeds),
  FIELD (PROP_IMAGE_LOCATION, image_location),
  FIELD (PROP_SEED, seed),
  FIELD (PROP_PRECISION, precision),
  FIELD (PROP_CHUNK_FRAMES, chunk_frames),
  FIELD (PROP_LOCAL_ATTN_SIZE, local_attn_size),
  FIELD (PROP_SINK_SIZE, sink_size),
  FIELD (PROP_MAX_ATTENTION_SIZE, max_attention_size),
  FIELD (PROP_SAMPLE_SHIFT, sample_shift),
  FIELD (PROP_TIMESTEP_INDICES, timestep_indices),
  FIELD (PROP_FRAMES, frames),
  FIELD (PROP_WIDTH, width),
  FIELD (PROP_HEIGHT, height),
  FIELD (PROP_PIXEL_AREA, pixel_area),
  FIELD (PROP_FPS, fps),
  FIELD (PROP_IS_LIVE, live),
  FIELD (PROP_LIVE, live),
  FIELD (PROP_LATENCY, latency),
  FIELD (PROP_SIGNAL_PASSES, signal_passes),
  FIELD (PROP_PREVIEW, preview),
  FIELD (PROP_KEY_RESTART, key_restart),
  FIELD (PROP_KEY_RESTART_MAX, key_restart_max),
  FIELD (PROP_KEY_CUT, key_cut),
};

#undef FIELD

#define gst_lingbot_gen_parent_class parent_class
G_DEFINE_TYPE (GstLingbotGen, gst_lingbot_gen, GST_TYPE_ELEMENT);
GST_ELEMENT_REGISTER_DEFINE (lingbotgen, "lingbotgen", GST_RANK_NONE,
    GST_TYPE_LINGBOT_GEN);

static GstStaticPadTemplate control_template =
GST_STATIC_PAD_TEMPLATE ("control", GST_PAD_SINK, GST_PAD_ALWAYS,
    GST_STATIC_CAPS (GST_LINGBOT_CONTROL_MEDIA_TYPE));

static GstStaticPadTemplate image_template =
GST_STATIC_PAD_TEMPLATE ("image", GST_PAD_SINK, GST_PAD_REQUEST,
    GST_STATIC_CAPS ("video/x-raw, format = (string) RGB"));

static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE ("src",
    GST_PAD_SRC, GST_PAD_ALWAYS,
    GST_STATIC_CAPS (GST_LINGBOT_LATENT_ALL_CAPS));

/* ---- queries, context ---- */

/* LATENCY (docs/elements.md "Latency"): live = `is-live`; min offline =
 * one steady chunk's duration; live = the announced compute latency
 * (gst_lingbot_gen_task_note_compute_time(); before a chunk was measured,
 * one chunk's duration, real time): a live chunk is stamped no earlier
 * than its ready time less that figure (gstlingbotgen-task.c's
 * live_pts()), so none comes later than it after its timestamp; or the
 * `latency` property when set; plus a live control source's latency;
 * max = unbounded (the generator computes on demand and drops nothing
 * while downstream blocks). */
static gboolean
gst_lingbot_gen_latency_query (GstLingbotGen * self, GstQuery * query)
{
  gboolean live, up_live = FALSE;
  GstClockTime chunk = gst_lingbot_gen_task_chunk_duration (self), min = chunk;
  GstClockTime max = GST_CLOCK_TIME_NONE, up_min = 0, up_max = 0, fixed;
  GstQuery *up;

  GST_OBJECT_LOCK (self);
  live = self->live;
  fixed = self->latency;
  GST_OBJECT_UNLOCK (self);
  if (live && GST_CLOCK_TIME_IS_VALID (fixed)) {
    min = fixed;
  } else if (live) {
    g_mutex_lock (&self->lock);
    min = gst_lingbot_gen_task_compute_latency_unlocked (self, chunk);
    g_mutex_unlock (&self->lock);
  }

  up = gst_query_new_latency ();
  if (gst_lingbot_gen_control_has_upstream (self->control_pad)
      && gst_pad_peer_query (self->control_pad, up)) {
    gst_query_parse_latency (up, &up_live, &up_min, &up_max);
    if (up_live && live && GST_CLOCK_TIME_IS_VALID (up_min))
      min += up_min;
  }
  gst_query_unref (up);
  GST_DEBUG_OBJECT (self, "latency: live %d, min %" GST_TIME_FORMAT, live,
      GST_TIME_ARGS (min));
  gst_query_set_latency (query, live, min, max);
  return TRUE;
}

/* @frames video frames in @format: TIME at the rate, DEFAULT as they are;
 * FALSE for another format */
static gboolean
frames_in_format (GstFormat format, guint64 frames, int fps_n, int fps_d,
    gint64 * value)
{
  if (format == GST_FORMAT_TIME)
    *value = gst_util_uint64_scale (frames, (guint64) fps_d * GST_SECOND,
        fps_n);
  else if (format == GST_FORMAT_DEFAULT)
    *value = frames;
  else
    return FALSE;
  return TRUE;
}

/* DURATION and POSITION when `frames` (or the poses) bound the session:
 * TIME at the session rate, DEFAULT in video frames.  Live sessions answer
 * no position (the sinks do, from the clock). */
static gboolean
gst_lingbot_gen_time_query (GstLingbotGen * self, GstQuery * query)
{
  GstFormat format;
  guint64 frames, done;
  gint64 value;
  gboolean live;
  int fps_n, fps_d;

  GST_OBJECT_LOCK (self);
  frames = self->frames;
  live = self->live;
  GST_OBJECT_UNLOCK (self);
  g_mutex_lock (&self->lock);
  if (self->n_frames > 0)
    frames = self->n_frames;
  done = self->frames_done;
  g_mutex_unlock (&self->lock);
  gst_lingbot_gen_task_rate (self, &fps_n, &fps_d);

  if (GST_QUERY_TYPE (query) == GST_QUERY_DURATION) {
    gst_query_parse_duration (query, &format, NULL);
    if (frames == 0 || !frames_in_format (format, frames, fps_n, fps_d, &value))
      return FALSE;
    gst_query_set_duration (query, format, value);
    return TRUE;
  }
  gst_query_parse_position (query, &format, NULL);
  if (live || !frames_in_format (format, done, fps_n, fps_d, &value))
    return FALSE;
  gst_query_set_position (query, format, value);
  return TRUE;
}

/* Upstream events on the src pad: QoS lateness raises a live session's
 * compute latency (the newest chunk's sample,
 * gst_lingbot_gen_task_note_compute_time()), except for frames stamped
 * before the latency last moved; a seek is refused (a world is
 * generated forward only); a force-key-unit (a viewer that joined) has a
 * live session that waits for a key send GST_LINGBOT_REPEAT_EVENT, so the
 * last frame goes again; navigation goes on to the control pad's source,
 * the rest default. */
static gboolean
gst_lingbot_gen_src_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (parent);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_QOS:{
      GstQOSType type;
      gdouble proportion;
      GstClockTimeDiff diff;
      GstClockTime timestamp;
      gboolean live;

      gst_event_parse_qos (event, &type, &proportion, &diff, &timestamp);
      GST_OBJECT_LOCK (self);
      live = self->live;
      GST_OBJECT_UNLOCK (self);
      GST_LOG_OBJECT (self, "QoS: proportion %.3f, diff %" G_GINT64_FORMAT
          " ns at %" GST_TIME_FORMAT, proportion, diff,
          GST_TIME_ARGS (timestamp));
      g_mutex_lock (&self->lock);
      if (timestamp < self->qos_from)
        diff = 0;
      g_mutex_unlock (&self->lock);
      if (live && diff > 0)
        gst_lingbot_gen_task_note_compute_time (self, 0, diff);
      gst_event_unref (event);
      return TRUE;
    }
    case GST_EVENT_CUSTOM_UPSTREAM:{
      gboolean live;

      if (!gst_video_event_is_force_key_unit (event))
        break;
      GST_OBJECT_LOCK (self);
      live = self->live;
      GST_OBJECT_UNLOCK (self);
      if (!live)
        break;
      /* taken by the streaming thread where it waits for a key; a chunk
       * in flight is the picture instead (it clears the request) */
      GST_DEBUG_OBJECT (self, "force-key-unit: the last frame again if no "
          "chunk comes");
      gst_lingbot_gen_control_raise (self, &self->repeat_pending);
      gst_event_unref (event);
      return TRUE;
    }
    case GST_EVENT_SEEK:
      GST_DEBUG_OBJECT (self, "seeking is not supported");
      gst_event_unref (event);
      return FALSE;
    default:
      break;
  }
  return gst_pad_event_default (pad, parent, event);
}

/* send_event (EOS), what gst-launch-1.0 -e does on Ctrl-C: the chunk in
 * flight is finished and pushed, then EOS (GstBin sends it here because
 * the element is flagged a source: its sink pads are optional). */
static gboolean
gst_lingbot_gen_send_event (GstElement * element, GstEvent * event)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (element);

  if (GST_EVENT_TYPE (event) == GST_EVENT_EOS) {
    guint64 chunks;

    g_mutex_lock (&self->lock);
    chunks = self->chunks_done;
    g_mutex_unlock (&self->lock);
    /* (the count lets a test tell the chunk in flight from one started
     * after: tests/gst/test-gst-stop.c) */
    GST_INFO_OBJECT (self, "EOS sent after %" G_GUINT64_FORMAT " chunks: "
        "the stream ends after the chunk in flight, if one is", chunks);
    gst_lingbot_gen_control_raise (self, &self->eos_pending);
    gst_event_unref (event);
    return TRUE;
  }
  return GST_ELEMENT_CLASS (parent_class)->send_event (element, event);
}

static gboolean
gst_lingbot_gen_src_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (parent);

  if (GST_QUERY_TYPE (query) == GST_QUERY_LATENCY && pad == self->srcpad)
    return gst_lingbot_gen_latency_query (self, query);
  if ((GST_QUERY_TYPE (query) == GST_QUERY_DURATION
          || GST_QUERY_TYPE (query) == GST_QUERY_POSITION)
      && pad == self->srcpad)
    return gst_lingbot_gen_time_query (self, query);
  if (gst_lingbot_world_holder_query (&self->holder, query))
    return TRUE;
  return gst_pad_query_default (pad, parent, query);
}

static gboolean
gst_lingbot_gen_sink_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  /* answered the same way upstream and downstream */
  if (GST_QUERY_TYPE (query) == GST_QUERY_CONTEXT)
    return gst_lingbot_gen_src_query (pad, parent, query);
  return gst_pad_query_default (pad, parent, query);
}

static void
gst_lingbot_gen_set_context (GstElement * element, GstContext * context)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (element);

  gst_lingbot_world_holder_set_context (&self->holder, context);
  GST_ELEMENT_CLASS (parent_class)->set_context (element, context);
}

static GstStateChangeReturn
gst_lingbot_gen_change_state (GstElement * element, GstStateChange transition)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (element);
  GstStateChangeReturn ret;

  switch (transition) {
    case GST_STATE_CHANGE_NULL_TO_READY:
      if (!gst_lingbot_gen_session_open (self))
        return GST_STATE_CHANGE_FAILURE;
      break;
    case GST_STATE_CHANGE_READY_TO_PAUSED:{
      gboolean have_image;
      int width, height;

      GST_OBJECT_LOCK (self);
      have_image = self->image_location != NULL || self->image_pad != NULL;
      width = self->width;
      height = self->height;
      GST_OBJECT_UNLOCK (self);
      if (!gst_lingbot_gen_session_check_size (self, width, height))
        return GST_STATE_CHANGE_FAILURE;
      if (!have_image) {
        /* inside lingbotbin there is no image pad to link */
        GstObject *parent = gst_object_get_parent (GST_OBJECT (self));
        GstElementFactory *f = GST_IS_ELEMENT (parent) ?
            gst_element_get_factory (GST_ELEMENT (parent)) : NULL;
        gboolean in_bin = f != NULL && g_str_equal (GST_OBJECT_NAME (f),
            "lingbotbin");

        gst_clear_object (&parent);
        GST_ELEMENT_ERROR (self, LIBRARY, SETTINGS,
            ("No reference image: set image-location%s", in_bin ? "" :
                " (or link the image pad)"), (NULL));
        return GST_STATE_CHANGE_FAILURE;
      }
      gst_lingbot_gen_task_reset_stream (self);
      /* the stats of the previous run were kept until now */
      GST_OBJECT_LOCK (self);
      gst_lingbot_chunk_log_clear (self->chunk_times);
      self->restarts = 0;
      GST_OBJECT_UNLOCK (self);
      break;
    }
    case GST_STATE_CHANGE_PAUSED_TO_PLAYING:
      gst_lingbot_gen_control_raise (self, &self->playing);
      gst_lingbot_latency_stepper_set_playing (self->latency_stepper, TRUE);
      break;
    case GST_STATE_CHANGE_PLAYING_TO_PAUSED:
      gst_lingbot_latency_stepper_set_playing (self->latency_stepper, FALSE);
      g_mutex_lock (&self->lock);
      self->playing = FALSE;
      g_cond_broadcast (&self->cond);
      g_mutex_unlock (&self->lock);
      break;
    default:
      break;
  }

  ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  if (ret == GST_STATE_CHANGE_FAILURE)
    return ret;

  switch (transition) {
    case GST_STATE_CHANGE_READY_TO_PAUSED:
    case GST_STATE_CHANGE_PLAYING_TO_PAUSED:{
      gboolean live;

      /* a live source does not preroll: it makes chunks in PLAYING only */
      GST_OBJECT_LOCK (self);
      live = self->live;
      GST_OBJECT_UNLOCK (self);
      if (live)
        ret = GST_STATE_CHANGE_NO_PREROLL;
      break;
    }
    case GST_STATE_CHANGE_PAUSED_TO_READY:
      gst_lingbot_gen_task_reset_stream (self);
      break;
    default:
      break;
  }
  gst_lingbot_world_holder_change_state (&self->holder, transition);
  return ret;
}

/* ---- properties ---- */

static void
gst_lingbot_gen_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (object);

  if (!gst_lingbot_property_can_set (GST_ELEMENT (self), pspec))
    return;
  GST_OBJECT_LOCK (self);
  if (prop_id == PROP_FRAMERATE) {
    self->framerate_n = gst_value_get_fraction_numerator (value);
    self->framerate_d = gst_value_get_fraction_denominator (value);
  } else if (!gst_lingbot_world_holder_set_property (&self->holder,
          gen_properties, G_N_ELEMENTS (gen_properties), pspec, value)) {
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  }
  /* a new image-location: its size is read again at NULL->READY */
  if (prop_id == PROP_IMAGE_LOCATION)
    self->image_location_width = self->image_location_height = 0;
  GST_OBJECT_UNLOCK (self);
}

static void
gst_lingbot_gen_get_property (GObject * object, guint prop_id,
    GValue * value, GParamSpec * pspec)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (object);

  GST_OBJECT_LOCK (self);
  if (prop_id == PROP_FRAMERATE)
    gst_value_set_fraction (value, self->framerate_n, self->framerate_d);
  else if (prop_id == PROP_STATS) {
    GstStructure *st = gst_lingbot_chunk_stats_new ("lingbot-stats",
        self->chunk_times, FALSE);

    gst_structure_set (st, "restarts", G_TYPE_UINT64, self->restarts, NULL);
    g_value_take_boxed (value, st);
  } else if (!gst_lingbot_world_holder_get_property (&self->holder,
          gen_properties, G_N_ELEMENTS (gen_properties), pspec, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  GST_OBJECT_UNLOCK (self);
}

static void
gst_lingbot_gen_finalize (GObject * object)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (object);

  g_clear_pointer (&self->latency_stepper, gst_lingbot_latency_stepper_free);
  g_clear_pointer (&self->handle, gst_lingbot_session_handle_unref);
  gst_lingbot_world_holder_clear (&self->holder);
  gst_lingbot_properties_clear (self, gen_properties,
      G_N_ELEMENTS (gen_properties));
  gst_clear_buffer (&self->poses);
  gst_clear_buffer (&self->image);
  gst_lingbot_chunk_log_free (self->chunk_times);
  lingbot_control_schedule_free (self->schedule);
  g_clear_object (&self->cancellable);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

/**
 * gst_lingbot_gen_install_properties:
 * @klass: a class
 *
 * Installs the generator's properties on @klass (lingbotbin proxies them).
 */
void
gst_lingbot_gen_install_properties (GObjectClass * klass)
{
  const GParamFlags rw = G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS;
  const GParamFlags ready = rw | GST_PARAM_MUTABLE_READY;

  g_object_class_install_property (klass, PROP_MODEL_PATH,
      g_param_spec_string ("model-path", "Model path",
          "Model directory (transformers/, Wan2.1_VAE .pth or .safetensors, "
          "umT5, tokenizer)", DEFAULT_MODEL_PATH, ready));
  g_object_class_install_property (klass, PROP_PROMPT,
      g_param_spec_string ("prompt", "Prompt",
          "Text prompt of the session (needs the model's umT5 encoder)",
          DEFAULT_PROMPT, ready));
  g_object_class_install_property (klass, PROP_PROMPT_EMBEDS,
      g_param_spec_string ("prompt-embeds", "Prompt embeddings",
          "Prompt-embeds safetensors file (lingbot-encode-prompt), used "
          "instead of the prompt", DEFAULT_PROMPT_EMBEDS, ready));
  g_object_class_install_property (klass, PROP_IMAGE_LOCATION,
      g_param_spec_string ("image-location", "Image location",
          "Reference image (JPEG); else the first frame on the image pad",
          DEFAULT_IMAGE_LOCATION, ready));
  g_object_class_install_property (klass, PROP_SEED,
      g_param_spec_uint64 ("seed", "Seed", "Noise seed (Philox)",
          0, G_MAXUINT64, DEFAULT_SEED, ready));
  g_object_class_install_property (klass, PROP_DEVICES,
      g_param_spec_string ("devices", "Devices",
          "Ranks of the world: \"cpu:N\" or GPU ordinals \"0,1,2,3\"",
          DEFAULT_DEVICES, ready));
  g_object_class_install_property (klass, PROP_PRECISION,
      g_param_spec_enum ("precision", "Precision",
          "DiT precision on GPU ranks, used when this element creates the "
          "world: fp32 (f32 weights and math) or bf16 (bf16 matrix weights "
          "and GEMM inputs with f32 accumulation, half the weight memory) "
          "or fp8 (opt-in, Hopper and later: e4m3 matrix weights and GEMM "
          "inputs with per-channel and per-token scales, attention as "
          "bf16); CPU ranks compute in fp32 except in fp8, whose oracle "
          "they run", GST_TYPE_LINGBOT_PRECISION, DEFAULT_PRECISION, ready));
  g_object_class_install_property (klass, PROP_CHUNK_FRAMES,
      g_param_spec_int ("chunk-frames", "Chunk frames",
          "Latent frames per chunk (0 = the model's default)", 0, 64,
          GST_LINGBOT_GEN_DEFAULT_CHUNK_FRAMES, ready));
  g_object_class_install_property (klass, PROP_LOCAL_ATTN_SIZE,
      g_param_spec_int ("local-attn-size", "Local attention size",
          "KV window in latent frames (0 = the model's default, -1 = "
          "global)", -1, 4096, DEFAULT_LOCAL_ATTN_SIZE, ready));
  g_object_class_install_property (klass, PROP_SINK_SIZE,
      g_param_spec_int ("sink-size", "Sink size",
          "Attention sink in latent frames (-1 = the model's default; 0 "
          "= no sink)", -1, 4096, DEFAULT_SINK_SIZE, ready));
  g_object_class_install_property (klass, PROP_MAX_ATTENTION_SIZE,
      g_param_spec_int ("max-attention-size", "Max attention size",
          "Self-attention span in tokens: queries attend to the last N KV "
          "cache slots (0 = the model's, whose default is the whole cache; "
          "more than the cache = the whole cache)", 0, G_MAXINT,
          DEFAULT_MAX_ATTENTION_SIZE, ready));
  g_object_class_install_property (klass, PROP_SAMPLE_SHIFT,
      g_param_spec_double ("sample-shift", "Sample shift",
          "Flow-matching sampler shift (0 = the default, 10)", 0.0, 1000.0,
          DEFAULT_SAMPLE_SHIFT, ready));
  g_object_class_install_property (klass, PROP_TIMESTEP_INDICES,
      g_param_spec_string ("timestep-indices", "Timestep indices",
          "Comma-separated denoising timestep indices in [0, 999]",
          DEFAULT_TIMESTEP_INDICES, ready));
  g_object_class_install_property (klass, PROP_FRAMES,
      g_param_spec_uint ("frames", "Frames",
          "Video frames to generate, then EOS (0 = unbounded)", 0, G_MAXUINT,
          DEFAULT_FRAMES, ready));
  g_object_class_install_property (klass, PROP_WIDTH,
      g_param_spec_int ("width", "Width",
          "Output width, a multiple of 16 up to 4096 (0 = from downstream "
          "caps, else pixel-area; set both or neither; any other value "
          "fails the state change)", G_MININT, G_MAXINT, DEFAULT_WIDTH, ready));
  g_object_class_install_property (klass, PROP_HEIGHT,
      g_param_spec_int ("height", "Height",
          "Output height, a multiple of 16 up to 4096 (0 = from downstream "
          "caps, else pixel-area; set both or neither; any other value "
          "fails the state change)", G_MININT, G_MAXINT, DEFAULT_HEIGHT,
          ready));
  g_object_class_install_property (klass, PROP_PIXEL_AREA,
      g_param_spec_int ("pixel-area", "Pixel area",
          "Output pixel budget when width/height are 0 (480*832 = 480p)",
          256, MAX_PIXEL_AREA, DEFAULT_PIXEL_AREA, ready));
  g_object_class_install_property (klass, PROP_FPS,
      g_param_spec_int ("fps", "FPS",
          "Session frame rate in whole frames per second, a shortcut for "
          "framerate (0 = from downstream caps, else 16)", 0, 240,
          DEFAULT_FPS, ready));
  g_object_class_install_property (klass, PROP_FRAMERATE,
      gst_param_spec_fraction ("framerate", "Frame rate",
          "Session frame rate (0/1 = fps, else from downstream caps, else "
          "16/1)", 0, 1, 1000, 1, 0, 1, ready));
  g_object_class_install_property (klass, PROP_IS_LIVE,
      g_param_spec_boolean ("is-live", "Is live",
          "Live: a live source (no preroll, chunks stamped with the running "
          "time at which they are ready less the latency) taking the keys held when a chunk "
          "starts and waiting while none is held; offline: timestamps n/fps "
          "from 0 and control times mapped onto the chunk timeline "
          "deterministically", DEFAULT_IS_LIVE, ready));
  g_object_class_install_property (klass, PROP_LIVE,
      g_param_spec_boolean ("live", "Live", "Deprecated alias of is-live",
          DEFAULT_IS_LIVE, ready | G_PARAM_DEPRECATED));
  g_object_class_install_property (klass, PROP_LATENCY,
      g_param_spec_uint64 ("latency", "Latency",
          "Live: the minimum latency to report, in nanoseconds, instead of "
          "the measured compute latency (18446744073709551615 = measured)", 0,
          G_MAXUINT64, DEFAULT_LATENCY, rw | GST_PARAM_MUTABLE_PLAYING));
  g_object_class_install_property (klass, PROP_SIGNAL_PASSES,
      g_param_spec_boolean ("signal-passes", "Signal passes",
          "Emit the pass signal after every DiT pass", DEFAULT_SIGNAL_PASSES,
          rw | GST_PARAM_MUTABLE_PLAYING));
  g_object_class_install_property (klass, PROP_PREVIEW,
      g_param_spec_boolean ("preview", "Preview",
          "At session start, before the first chunk, send the start image "
          "(as the conditioning resizes it) downstream as a still frame: a "
          "serialized lingbot-preview event that lingbotvaedec turns into "
          "a frame flagged as the preview", DEFAULT_PREVIEW, ready));
  /**
   * GstLingbotGen:key-restart:
   *
   * Live (`is-live`): a key change while a chunk is made restarts it from
   * its first DiT pass with the new keys while fewer than this many DiT
   * passes of it ran (lingbot_session_set_restart_func()): 0 never; 1
   * only before the first pass (after the condition encode: nothing is
   * thrown away); 5 (the denoising steps + 1) after any denoising pass,
   * 6 or more after the clean pass too; -1 (the default) live after any
   * pass, offline never (a key costs at most one DiT, while waiting for
   * the next chunk costs the rest of this one and all of the next).  The
   * restarted chunk is byte for byte the chunk made with those keys in
   * the first place.  Offline nothing restarts whatever the value.
   */
  g_object_class_install_property (klass, PROP_KEY_RESTART,
      g_param_spec_int ("key-restart", "Key restart",
          "Live: restart the chunk in flight from its first DiT pass with "
          "a new key state while fewer than this many DiT passes of it ran "
          "(0 never, 1 only before the first pass, 5 after any denoising "
          "pass, 6 or more after the clean pass too; -1 = live: after any "
          "pass, offline: never)", -1, MAX_KEY_RESTART, DEFAULT_KEY_RESTART,
          ready));
  g_object_class_install_property (klass, PROP_KEY_RESTART_MAX,
      g_param_spec_uint ("key-restart-max", "Key restart max",
          "Live: restarts per chunk that throw DiT passes away, at most "
          "(so that a key storm cannot starve the output)", 0,
          MAX_KEY_RESTART_MAX, DEFAULT_KEY_RESTART_MAX, ready));
  /**
   * GstLingbotGen:key-cut:
   *
   * Live (`is-live`): a key change while the generator waits for the next
   * chunk's due time (faster than real time) starts that chunk at once and
   * stamps it as early as it can be shown, its ready time less the
   * latency, instead of after the chunk on screen: its timestamps go back
   * to there.  lingbotvaedec then drops the frames of the earlier chunks
   * it still holds from that time on (its `hold`), so the key shows about
   * one chunk's compute and decode after it is pressed rather than after
   * the chunk on screen ends.  The chunk's lingbot-chunk message says
   * `cut` = TRUE.  Offline nothing is cut whatever the value.
   */
  g_object_class_install_property (klass, PROP_KEY_CUT,
      g_param_spec_boolean ("key-cut", "Key cut",
          "Live: on a key change while waiting for the next chunk's due "
          "time, make it at once and stamp it as early as it can be shown "
          "(the frames of the chunk on screen still in lingbotvaedec from "
          "then on are dropped)", DEFAULT_KEY_CUT, ready));
  /**
   * GstLingbotGen:stats:
   *
   * The figures of the chunks generated since the element last went
   * READY->PAUSED (kept after it stops): a "lingbot-stats" structure with
   * chunks, frames, steady-frames, steady-seconds, steady-fps,
   * compute-seconds-total and compute-seconds-mean / -p50 / -p90 / -p99 /
   * -max (control + condition + DiT per chunk), period-seconds-mean /
   * -p50 / -p90 / -p99 / -max (between the ends of two consecutive
   * generates), as gst_lingbot_chunk_stats_new() builds them, and
   * restarts (uint64: the chunks' key restarts, see key-restart).
   */
  g_object_class_install_property (klass, PROP_STATS,
      g_param_spec_boxed ("stats", "Statistics",
          "Chunks, frames, steady fps, compute seconds and chunk period "
          "(mean/p50/p90/p99/max) of the chunks generated since "
          "READY->PAUSED", GST_TYPE_STRUCTURE,
          G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));
}

static void
gst_lingbot_gen_class_init (GstLingbotGenClass * klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);

  GST_DEBUG_CATEGORY_INIT (gst_lingbot_gen_debug, "lingbotgen", 0,
      "LingBot-World generator");

  gobject_class->set_property = gst_lingbot_gen_set_property;
  gobject_class->get_property = gst_lingbot_gen_get_property;
  gobject_class->finalize = gst_lingbot_gen_finalize;
  gst_lingbot_gen_install_properties (gobject_class);
  gst_type_mark_as_plugin_api (GST_TYPE_LINGBOT_PRECISION, 0);

  /**
   * GstLingbotGen::pass:
   * @gen: the element
   * @chunk: the chunk index
   * @pass: the DiT pass that just ended, from 0
   * @n_passes: the chunk's passes (the denoising steps and the clean pass)
   *
   * Emitted after every DiT pass when #GstLingbotGen:signal-passes is
   * set, from a streaming thread (the session's rank 0): progress within
   * a chunk.  The handler must not block for long.
   */
  gst_lingbot_gen_signals[GST_LINGBOT_GEN_SIGNAL_PASS] =
      g_signal_new ("pass", G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST, 0,
      NULL, NULL, NULL, G_TYPE_NONE, 3, G_TYPE_UINT64, G_TYPE_INT, G_TYPE_INT);

  gst_element_class_add_static_pad_template (element_class, &control_template);
  gst_element_class_add_static_pad_template (element_class, &image_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (element_class,
      "LingBot-World generator", "Generator/Video",
      "Generates latent video chunks of the LingBot-World model from an "
      "image, a prompt and a control stream", "lingbot-gst developers");

  element_class->change_state = gst_lingbot_gen_change_state;
  element_class->request_new_pad = gst_lingbot_gen_control_request_new_pad;
  element_class->release_pad = gst_lingbot_gen_control_release_pad;
  /* a query on the element (CONTEXT): GstElement's default hands it to
   * the src pad, gst_lingbot_gen_src_query() */
  element_class->set_context = gst_lingbot_gen_set_context;
  element_class->send_event = gst_lingbot_gen_send_event;
}

/* (self->lock: the stepper's estimate lock) the compute latency fell at
 * once (beyond a chunk's duration above its goal): the frames stamped so
 * far were stamped for the old figure and are late by design, so their
 * QoS must not raise it again (each fall would otherwise be undone by the
 * frames it drops, and come back 4 chunks later) */
static void
latency_jumped (gpointer data)
{
  GstLingbotGen *self = data;

  self->qos_from = self->stamped_end;
}

static void
gst_lingbot_gen_init (GstLingbotGen * self)
{
  self->control_pad = gst_pad_new_from_static_template (&control_template,
      "control");
  gst_pad_set_chain_function (self->control_pad, gst_lingbot_gen_control_chain);
  gst_pad_set_event_function (self->control_pad, gst_lingbot_gen_control_event);
  gst_pad_set_query_function (self->control_pad, gst_lingbot_gen_sink_query);
  gst_element_add_pad (GST_ELEMENT (self), self->control_pad);

  self->srcpad = gst_pad_new_from_static_template (&src_template, "src");
  gst_pad_set_activatemode_function (self->srcpad,
      gst_lingbot_gen_task_src_activate_mode);
  gst_pad_set_query_function (self->srcpad, gst_lingbot_gen_src_query);
  gst_pad_set_event_function (self->srcpad, gst_lingbot_gen_src_event);
  gst_pad_use_fixed_caps (self->srcpad);
  gst_element_add_pad (GST_ELEMENT (self), self->srcpad);

  gst_lingbot_world_holder_init (&self->holder, GST_ELEMENT (self),
      DEFAULT_MODEL_PATH, DEFAULT_DEVICES, FALSE);
  /* the defaults of the properties' GParamSpecs */
  gst_lingbot_properties_init (self, gen_properties,
      G_N_ELEMENTS (gen_properties));
  self->framerate_n = 0;
  self->framerate_d = 1;
  gst_lingbot_latency_estimate_reset (&self->compute_latency);
  self->next_pts = GST_CLOCK_TIME_NONE;
  self->last_pts = GST_CLOCK_TIME_NONE;
  self->session_fps_d = 1;
  self->cancellable = g_cancellable_new ();
  /* its sink pads are optional inputs: a bin sends it EOS (Ctrl-C with
   * gst-launch-1.0 -e) as it does to sources */
  GST_OBJECT_FLAG_SET (self, GST_ELEMENT_FLAG_SOURCE);
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  self->latency_stepper = gst_lingbot_latency_stepper_new (GST_ELEMENT (self),
      gst_lingbot_gen_debug, &self->lock, &self->compute_latency);
  gst_lingbot_latency_stepper_set_jump_func (self->latency_stepper,
      latency_jumped, self);
  /* chunk size and rate are the session's, set before the first chunk */
  self->schedule =
      lingbot_control_schedule_new (4, GST_LINGBOT_GEN_FALLBACK_FPS, 1, NULL);
  self->horizon = GST_CLOCK_TIME_NONE;
  self->chunk_times = gst_lingbot_chunk_log_new (GST_LINGBOT_CHUNK_LOG_WINDOW);
}

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

#include <math.h>
#include <string.h>
#include <gst/video/video.h>

#include "gst/gstlingbotgen.h"
#include "gst/gstlingbotcontrolsrc.h"
#include "gst/lingbot/gstlingbotmeta.h"
#include "gst/gstlingbotutil.h"
#include "gst/gstlingbotworldholder.h"

GST_DEBUG_CATEGORY_STATIC (gst_lingbot_gen_debug);
#define GST_CAT_DEFAULT gst_lingbot_gen_debug

#define DEFAULT_MODEL_PATH NULL
#define DEFAULT_PROMPT NULL
#define DEFAULT_PROMPT_EMBEDS NULL
#define DEFAULT_IMAGE_LOCATION NULL
#define DEFAULT_SEED 42
#define DEFAULT_DEVICES "cpu:1"
#define DEFAULT_PRECISION GST_LINGBOT_PRECISION_FP32
#define DEFAULT_CHUNK_FRAMES 4
#define DEFAULT_LOCAL_ATTN_SIZE 18
#define DEFAULT_SINK_SIZE 6
#define DEFAULT_MAX_ATTENTION_SIZE 0
#define DEFAULT_SAMPLE_SHIFT 10.0
#define DEFAULT_TIMESTEP_INDICES "0,250,500,750"
#define DEFAULT_FRAMES 0
#define DEFAULT_WIDTH 0
#define DEFAULT_HEIGHT 0
#define DEFAULT_PIXEL_AREA (480 * 832)
#define MAX_SIZE 4096
#define MAX_PIXEL_AREA (MAX_SIZE * MAX_SIZE)
#define DEFAULT_FPS 0
#define FALLBACK_FPS 16
#define DEFAULT_IS_LIVE FALSE
#define DEFAULT_LATENCY GST_CLOCK_TIME_NONE
#define DEFAULT_SIGNAL_PASSES FALSE
#define DEFAULT_PREVIEW FALSE
/* key-restart: -1 = live: after any DiT pass, offline: never */
#define DEFAULT_KEY_RESTART (-1)
#define MAX_KEY_RESTART 64
#define DEFAULT_KEY_RESTART_MAX 1
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

enum
{
  SIGNAL_PASS,
  N_SIGNALS
};

static guint signals[N_SIGNALS];

struct _GstLingbotGen
{
  GstElement parent;

  GstPad *control_pad;
  GstPad *image_pad;            /* requested, or NULL */
  GstPad *srcpad;

  /* properties (object lock); model-path and devices are the holder's */
  GstLingbotWorldHolder holder; /* the world (object lock) */
  char *prompt;
  char *prompt_embeds;
  char *image_location;
  guint64 seed;
  int precision;                /* GstLingbotPrecision */
  int chunk_frames;
  int local_attn_size;
  int sink_size;
  int max_attention_size;
  double sample_shift;
  char *timestep_indices;
  guint frames;
  int width;
  int height;
  int pixel_area;
  int fps;
  int framerate_n, framerate_d; /* 0/1: unset */
  gboolean live;
  GstClockTime latency;         /* NONE: estimated */
  gboolean signal_passes;
  gboolean preview;
  int key_restart;              /* -1 auto, 0 never, N: fewer passes ran */
  guint key_restart_max;
  guint64 restarts;             /* object lock: chunks' restarts, stats */

  /* object lock: the figures of the chunks generated since READY->PAUSED
   * (the stats property), kept after the stream stops */
  GstLingbotChunkLog *chunk_times;
  int image_location_width;     /* object lock: image-location's size, */
  int image_location_height;    /* read at NULL->READY */

  /* streaming state (lock, cond) */
  GMutex lock;
  GCond cond;
  gboolean flushing;
  gboolean control_eos;
  gboolean poses_expected;
  GstBuffer *poses;             /* the POSES record */
  LingbotControlSchedule *schedule;     /* the key state, both modes */
  GstClockTime horizon;         /* every event before this time is known */
  int session_chunk_frames;     /* 0 until the session exists */
  GstBuffer *image;             /* packed RGB */
  int image_width, image_height;
  gboolean image_eos;
  gboolean control_caps;        /* CAPS arrived on the control pad */
  gboolean playing;             /* PLAYING: live chunks wait for it */
  gboolean eos_pending;         /* send_event (EOS): after this chunk */
  gboolean said_control_wait;   /* offline: the stalled-control INFO went */
  GstLingbotLatencyEstimate compute_latency;    /* live: a chunk's compute */
  guint64 frames_done;          /* frames pushed (POSITION) */
  GstClockTime qos_from;        /* live: QoS of frames stamped before
                                 * this (under another latency) ignored */
  GstClockTime stamped_end;     /* live: the end of the chunks stamped */
  int session_fps_n, session_fps_d;     /* the negotiated rate, 0/1 before */
  guint n_frames;               /* the session's video frames, 0 unbounded */
  /* live key restarts (on_restart(), rank 0 or the streaming thread):
   * whether the chunk in flight may take newer keys, and the snapshot it
   * took when it did */
  gboolean restart_ok;
  gboolean restarted;
  LingbotScheduleChunk restart_chunk;

  /* cancels the chunk in flight at its next DiT pass when the src pad
   * deactivates (PLAYING -> NULL); reset when it activates */
  GCancellable *cancellable;
  gint passes;                  /* atomic: DiT passes run, this stream */

  /* the one ERROR of a failed chunk: posted early by on_failure() (a rank
   * timed out: posted from another thread, a rank timeout before the
   * generate returns) or by the streaming thread, whichever claims it
   * first (claim_error()) */
  gint attempt;                 /* atomic: generates started */
  gint error_attempt;           /* lock: the one whose ERROR is unposted */

  /* streaming thread only */
  GstLingbotSessionHandle *handle;
  guint64 chunk;
  guint64 frames_out;
  guint64 frames_skipped;       /* live: the frames behind real time */
  GstClockTime next_pts;        /* live: the end of the previous chunk */
  gboolean caps_sent;
  gboolean device_memory;       /* memory:LingbotDevice negotiated */
};

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

static GstClockTime gst_lingbot_gen_chunk_duration (GstLingbotGen * self);

/* ---- control pad ---- */

/* Whether @pad has something upstream: a peer that is not merely the
 * internal pad of an unlinked ghost pad (lingbotbin's `control` with
 * nothing linked to it counts as no control, like an unlinked pad). */
static gboolean
pad_has_upstream (GstPad * pad)
{
  GstPad *peer = gst_pad_get_peer (pad);

  while (peer != NULL) {
    GstProxyPad *ghost;

    if (!GST_IS_PROXY_PAD (peer) || GST_IS_GHOST_PAD (peer)) {
      gst_object_unref (peer);
      return TRUE;
    }
    /* the internal pad of a ghost pad: look past the ghost */
    ghost = gst_proxy_pad_get_internal (GST_PROXY_PAD (peer));
    gst_object_unref (peer);
    if (ghost == NULL)
      return TRUE;
    peer = gst_pad_get_peer (GST_PAD (ghost));
    gst_object_unref (ghost);
  }
  return FALSE;
}

/* a key record into the schedule, which keeps the key state of both
 * modes (the virtual clock's and the live one) */
static void
apply_record_unlocked (GstLingbotGen * self, const GstLingbotControlRecord * r,
    GstClockTime pts)
{
  LingbotControlEvent e = { 0 };

  e.time_s = GST_CLOCK_TIME_IS_VALID (pts) ? (double) pts / GST_SECOND : 0.0;
  switch (r->type) {
    case GST_LINGBOT_CONTROL_PRESS:
      e.type = LINGBOT_CONTROL_EVENT_PRESS;
      break;
    case GST_LINGBOT_CONTROL_RELEASE:
      e.type = LINGBOT_CONTROL_EVENT_RELEASE;
      break;
    case GST_LINGBOT_CONTROL_RESET:
      e.type = LINGBOT_CONTROL_EVENT_RESET;
      break;
    default:
      return;
  }
  e.key = r->keys;
  if (!lingbot_control_schedule_push (self->schedule, &e))
    GST_WARNING_OBJECT (self, "control record after the end of the control "
        "stream ignored");
}

/* sets *@flag (a field of @self) under the lock and wakes the waiters */
static void
gst_lingbot_gen_raise (GstLingbotGen * self, gboolean * flag)
{
  g_mutex_lock (&self->lock);
  *flag = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

static GstFlowReturn
gst_lingbot_gen_control_chain (GstPad * pad, GstObject * parent,
    GstBuffer * buf)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (parent);
  GstLingbotControlRecord rec;
  GstFlowReturn ret = GST_FLOW_OK;

  if (gst_buffer_extract (buf, 0, &rec, sizeof (rec)) != sizeof (rec)
      || rec.magic != GST_LINGBOT_CONTROL_MAGIC) {
    GST_WARNING_OBJECT (self, "ignoring a buffer that is not a control "
        "record");
    gst_buffer_unref (buf);
    return GST_FLOW_OK;
  }

  g_mutex_lock (&self->lock);
  if (self->flushing) {
    ret = GST_FLOW_FLUSHING;
  } else if (rec.type == GST_LINGBOT_CONTROL_POSES) {
    gst_buffer_replace (&self->poses, buf);
  } else {
    apply_record_unlocked (self, &rec, GST_BUFFER_PTS (buf));
    if (GST_BUFFER_PTS_IS_VALID (buf))
      self->horizon = MAX (self->horizon == GST_CLOCK_TIME_NONE ? 0 :
          self->horizon, GST_BUFFER_PTS (buf));
  }
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  gst_buffer_unref (buf);
  return ret;
}

static gboolean
gst_lingbot_gen_control_event (GstPad * pad, GstObject * parent,
    GstEvent * event)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (parent);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_CAPS:{
      GstCaps *caps;
      gboolean poses = FALSE;

      gst_event_parse_caps (event, &caps);
      gst_structure_get_boolean (gst_caps_get_structure (caps, 0), "poses",
          &poses);
      g_mutex_lock (&self->lock);
      self->poses_expected = poses;
      self->control_caps = TRUE;
      g_cond_broadcast (&self->cond);
      g_mutex_unlock (&self->lock);
      break;
    }
    case GST_EVENT_EOS:
      gst_lingbot_gen_raise (self, &self->control_eos);
      break;
    default:
      break;
  }
  /* the control stream's own segment, caps and EOS stay here */
  gst_event_unref (event);
  return TRUE;
}

/* ---- image pad ---- */

static GstFlowReturn
gst_lingbot_gen_image_chain (GstPad * pad, GstObject * parent, GstBuffer * buf)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (parent);
  GstCaps *caps = gst_pad_get_current_caps (pad);
  GstVideoInfo info;
  GstVideoFrame frame;
  GstBuffer *packed;
  GstMapInfo map;

  if (caps == NULL || !gst_video_info_from_caps (&info, caps)) {
    gst_clear_caps (&caps);
    gst_buffer_unref (buf);
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, (NULL),
        ("image buffer without RGB caps"));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  gst_caps_unref (caps);

  g_mutex_lock (&self->lock);
  if (self->image != NULL) {
    /* one reference image per session */
    g_mutex_unlock (&self->lock);
    gst_buffer_unref (buf);
    return GST_FLOW_EOS;
  }
  g_mutex_unlock (&self->lock);

  if (!gst_video_frame_map (&frame, &info, buf, GST_MAP_READ)) {
    gst_buffer_unref (buf);
    GST_ELEMENT_ERROR (self, STREAM, FAILED, (NULL), ("cannot map image"));
    return GST_FLOW_ERROR;
  }
  /* sized by the caps: a failed allocation is an error, not an abort */
  packed = gst_lingbot_buffer_try_new ((gsize) info.width * info.height * 3);
  if (packed == NULL) {
    gst_video_frame_unmap (&frame);
    gst_buffer_unref (buf);
    GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
        ("Cannot allocate %dx%d RGB for the reference image", info.width,
            info.height), (NULL));
    return GST_FLOW_ERROR;
  }
  gst_buffer_map (packed, &map, GST_MAP_WRITE);
  for (int y = 0; y < info.height; y++)
    memcpy (map.data + (gsize) y * info.width * 3,
        (guint8 *) GST_VIDEO_FRAME_PLANE_DATA (&frame, 0) +
        (gsize) y * GST_VIDEO_FRAME_PLANE_STRIDE (&frame, 0),
        (gsize) info.width * 3);
  gst_buffer_unmap (packed, &map);
  gst_video_frame_unmap (&frame);
  gst_buffer_unref (buf);

  g_mutex_lock (&self->lock);
  self->image = packed;
  self->image_width = info.width;
  self->image_height = info.height;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  GST_DEBUG_OBJECT (self, "reference image %dx%d", info.width, info.height);
  return GST_FLOW_OK;
}

static gboolean
gst_lingbot_gen_image_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (parent);

  if (GST_EVENT_TYPE (event) == GST_EVENT_EOS) {
    gst_lingbot_gen_raise (self, &self->image_eos);
    gst_event_unref (event);
    return TRUE;
  }
  if (GST_EVENT_TYPE (event) == GST_EVENT_CAPS)
    return gst_pad_event_default (pad, parent, event);
  gst_event_unref (event);
  return TRUE;
}

static GstPad *
gst_lingbot_gen_request_new_pad (GstElement * element, GstPadTemplate * templ,
    const gchar * name, const GstCaps * caps)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (element);
  GstPad *pad;

  GST_OBJECT_LOCK (self);
  if (self->image_pad != NULL) {
    GST_OBJECT_UNLOCK (self);
    GST_WARNING_OBJECT (self, "only one image pad");
    return NULL;
  }
  GST_OBJECT_UNLOCK (self);

  pad = gst_pad_new_from_template (templ, "image");
  gst_pad_set_chain_function (pad, gst_lingbot_gen_image_chain);
  gst_pad_set_event_function (pad, gst_lingbot_gen_image_event);
  GST_OBJECT_LOCK (self);
  self->image_pad = pad;
  GST_OBJECT_UNLOCK (self);
  gst_element_add_pad (element, pad);
  return pad;
}

static void
gst_lingbot_gen_release_pad (GstElement * element, GstPad * pad)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (element);

  GST_OBJECT_LOCK (self);
  if (self->image_pad == pad)
    self->image_pad = NULL;
  GST_OBJECT_UNLOCK (self);
  gst_element_remove_pad (element, pad);
}

/* ---- session ---- */

/* NULL = the model's default steps; anything else must be a valid list
 * (lingbot_parse_timestep_indices(): not empty, in [0, 999], strictly
 * increasing) */
static gboolean
parse_timesteps (const char *s, GArray * out, GError ** error)
{
  if (s == NULL)
    return TRUE;
  return lingbot_parse_timestep_indices (s, out, error);
}

/* ---- output format: properties, else downstream caps ---- */

/**
 * OutputFormat:
 * @width: video width (a multiple of 16)
 * @height: video height
 * @fps_n: frame rate numerator
 * @fps_d: frame rate denominator
 *
 * What the session is created for and the latent caps then say.
 */
typedef struct
{
  int width, height;
  int fps_n, fps_d;
} OutputFormat;

/* The reference image's size: the image pad's frame, else the size of
 * image-location read at NULL->READY (decoded again if it changed since). */
static gboolean
reference_image_size (GstLingbotGen * self, int *width, int *height,
    GError ** error)
{
  g_autofree char *location = NULL;

  GST_OBJECT_LOCK (self);
  location = g_strdup (self->image_location);
  *width = self->image_location_width;
  *height = self->image_location_height;
  GST_OBJECT_UNLOCK (self);
  if (location == NULL) {
    g_mutex_lock (&self->lock);
    *width = self->image_width;
    *height = self->image_height;
    g_mutex_unlock (&self->lock);
    if (*width > 0 && *height > 0)
      return TRUE;
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_INVALID_ARGUMENT,
        "no reference image: set image-location, or send a frame on the "
        "image pad (it ended without one)");
    return FALSE;
  }
  if (*width > 0 && *height > 0)
    return TRUE;
  return lingbot_session_check_image (location, width, height, error);
}

/* Decides the session's size and frame rate (docs/elements.md "Caps"):
 * `width`/`height` and `framerate`/`fps` win when set; what is unset comes
 * from the caps downstream accepts (lingbotvaedec translates video caps
 * into latent caps), fixated to the model's default size (spec 6.1 from
 * the image and `pixel-area`) and 16 fps. */
static gboolean
choose_output_format (GstLingbotGen * self, OutputFormat * out, GError ** error)
{
  GstCaps *templ = gst_pad_get_pad_template_caps (self->srcpad);
  GstCaps *peer = gst_pad_peer_query_caps (self->srcpad, templ);
  GstStructure *st = NULL;
  int width, height, area, fps, fr_n, fr_d, vw = 0, vh = 0;
  gboolean ok = TRUE;

  GST_OBJECT_LOCK (self);
  width = self->width;
  height = self->height;
  area = self->pixel_area;
  fps = self->fps;
  fr_n = self->framerate_n;
  fr_d = self->framerate_d;
  GST_OBJECT_UNLOCK (self);
  gst_caps_unref (templ);

  if (peer != NULL && gst_caps_is_empty (peer)) {
    gst_caps_unref (peer);
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_UNSUPPORTED,
        "downstream accepts no latent caps (link lingbotvaedec after "
        "lingbotgen)");
    return FALSE;
  }
  if (peer != NULL && !gst_caps_is_any (peer))
    st = gst_structure_copy (gst_caps_get_structure (peer, 0));

  if (width == 0 || height == 0) {
    int iw, ih, dw, dh;

    if (!reference_image_size (self, &iw, &ih, error)
        || !lingbot_session_output_size (iw, ih, area, &dw, &dh, error)) {
      g_clear_pointer (&st, gst_structure_free);
      gst_clear_caps (&peer);
      return FALSE;
    }
    if (st != NULL) {
      const GValue *fw = gst_structure_get_value (st, "video-width");
      const GValue *fh = gst_structure_get_value (st, "video-height");
      int x;

      /* one side fixed downstream: the other from the image's aspect, in
       * multiples of 16 (spec 6.1's rounding), not the model's default */
      if (fw && gst_value_is_fixed (fw) && !(fh && gst_value_is_fixed (fh))
          && gst_structure_get_int (st, "video-width", &x))
        dh = MAX (16, (int) ((double) x * ih / iw / 16.0 + 0.5) * 16);
      else if (fh && gst_value_is_fixed (fh) && !(fw && gst_value_is_fixed (fw))
          && gst_structure_get_int (st, "video-height", &x))
        dw = MAX (16, (int) ((double) x * iw / ih / 16.0 + 0.5) * 16);
      /* nearest to that within what downstream takes */
      if (fw)
        gst_structure_fixate_field_nearest_int (st, "video-width", dw);
      if (fh)
        gst_structure_fixate_field_nearest_int (st, "video-height", dh);
      if (gst_structure_get_int (st, "video-width", &vw)
          && gst_structure_get_int (st, "video-height", &vh))
        GST_INFO_OBJECT (self, "size %dx%d from downstream caps (the "
            "model's default %dx%d)", vw, vh, dw, dh);
    }
    width = vw > 0 ? vw : dw;
    height = vh > 0 ? vh : dh;
    if (width % 16 || height % 16 || width > MAX_SIZE || height > MAX_SIZE) {
      g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_UNSUPPORTED,
          "downstream asks for %dx%d video: the size must be multiples of "
          "16 and at most %dx%d", width, height, MAX_SIZE, MAX_SIZE);
      ok = FALSE;
    }
  }
  if (fr_n <= 0) {
    fr_n = fps > 0 ? fps : FALLBACK_FPS;
    fr_d = 1;
    if (fps <= 0 && st != NULL && gst_structure_has_field (st, "framerate")) {
      /* (FALSE when the field is fixed already) */
      gst_structure_fixate_field_nearest_fraction (st, "framerate",
          FALLBACK_FPS, 1);
      if (gst_structure_get_fraction (st, "framerate", &fr_n, &fr_d)
          && (fr_n <= 0 || fr_d <= 0)) {
        g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_UNSUPPORTED,
            "downstream asks for %d/%d fps: the frame rate must be "
            "positive", fr_n, fr_d);
        ok = FALSE;
      }
    }
  }
  g_clear_pointer (&st, gst_structure_free);
  if (ok && peer != NULL && !gst_caps_is_any (peer)) {
    /* what the properties fixed must be something downstream takes */
    GstCaps *want = gst_caps_new_simple (GST_LINGBOT_LATENT_MEDIA_TYPE,
        "video-width", G_TYPE_INT, width, "video-height", G_TYPE_INT, height,
        "framerate", GST_TYPE_FRACTION, fr_n, fr_d, NULL);
    GstCaps *any = gst_caps_copy (peer);

    /* either memory kind */
    for (guint i = 0; i < gst_caps_get_size (any); i++)
      gst_caps_set_features (any, i, NULL);
    if (!gst_caps_can_intersect (want, any)) {
      g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_UNSUPPORTED,
          "downstream does not take %dx%d video at %d/%d fps (lingbotgen's "
          "width, height, framerate or fps property)", width, height, fr_n,
          fr_d);
      ok = FALSE;
    }
    gst_caps_unref (want);
    gst_caps_unref (any);
  }
  gst_clear_caps (&peer);
  *out = (OutputFormat) { width, height, fr_n, fr_d };
  return ok;
}

/* After every DiT pass (rank 0): counts it, and emits GstLingbotGen::pass
 * when `signal-passes` is set. */
static void
on_pass (LingbotSession * session, guint64 chunk, int pass, int n_passes,
    gpointer user_data)
{
  GstLingbotGen *self = user_data;
  gboolean emit;

  g_atomic_int_inc (&self->passes);
  GST_OBJECT_LOCK (self);
  emit = self->signal_passes;
  GST_OBJECT_UNLOCK (self);
  if (emit)
    g_signal_emit (self, signals[SIGNAL_PASS], 0, chunk, pass, n_passes);
}

/* The session's restart function (lingbot_session_set_restart_func(),
 * live only): while a live chunk is made (after its condition encode, on
 * the streaming thread, and after each DiT pass, on rank 0's
 * thread) the key state is looked at again; when it would give the chunk
 * other keys (a newer tap, or a changed held set; not a pending reset,
 * nor a release of every key) the chunk takes that snapshot and restarts
 * with it, so a key change is on screen a chunk earlier. */
static gboolean
on_restart (LingbotSession * session, guint64 chunk, int passes, guint * keys,
    gpointer user_data)
{
  GstLingbotGen *self = user_data;
  LingbotScheduleChunk c;
  gboolean restart = FALSE;

  g_mutex_lock (&self->lock);
  if (self->restart_ok && !self->flushing && !self->eos_pending &&
      lingbot_control_schedule_peek_live (self->schedule, &c) &&
      !c.reset_before && c.keys != *keys &&
      lingbot_control_schedule_retake_live (self->schedule, &c)) {
    self->restart_chunk = c;
    self->restarted = TRUE;
    *keys = c.keys;
    restart = TRUE;
  }
  g_mutex_unlock (&self->lock);
  if (restart)
    GST_DEBUG_OBJECT (self, "chunk %" G_GUINT64_FORMAT " restarts after %d "
        "DiT passes with keys 0x%x", chunk, passes, *keys);
  return restart;
}

/* Whether the ERROR of generate @attempt is still to be posted; if so,
 * the caller posts it (exactly one ERROR per failed chunk). */
static gboolean
claim_error (GstLingbotGen * self, gint attempt)
{
  gboolean mine;

  g_mutex_lock (&self->lock);
  mine = self->error_attempt == attempt;
  if (mine)
    self->error_attempt = 0;
  g_mutex_unlock (&self->lock);
  return mine;
}

typedef struct
{
  gint attempt;
  guint64 chunk;
  GError *error;
} EarlyError;

static void
early_error_free (gpointer data)
{
  EarlyError *ee = data;

  g_error_free (ee->error);
  g_free (ee);
}

/* on_failure()'s post, on a thread of GStreamer's pool */
static void
post_early_error (GstElement * element, gpointer data)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (element);
  EarlyError *ee = data;

  if (!claim_error (self, ee->attempt))
    return;
  GST_ELEMENT_ERROR (self, STREAM, FAILED, ("A rank did not answer in "
          "time: %s", ee->error->message), ("chunk %" G_GUINT64_FORMAT "%s",
          ee->chunk, gst_lingbot_error_hint (ee->error)));
}

/* A rank of the chunk in flight timed out waiting for a peer
 * (lingbot_session_set_failure_func()), on that rank's thread with the
 * worker group's lock held: the chunk fails, but the generate returns only
 * once the peer is back or, stuck, abandoned a rank timeout later.  The
 * ERROR goes out now, from another thread: a bus sync handler that sets
 * the pipeline to NULL would wait for this rank's group. */
static void
on_failure (LingbotSession * session, guint64 chunk, const GError * error,
    gpointer user_data)
{
  GstLingbotGen *self = user_data;
  EarlyError *ee = g_new0 (EarlyError, 1);

  ee->attempt = g_atomic_int_get (&self->attempt);
  ee->chunk = chunk;
  ee->error = g_error_copy (error);
  gst_element_call_async (GST_ELEMENT (self), post_early_error, ee,
      early_error_free);
}

/* unmaps @buf when @map was mapped, then drops the ref; nothing when @buf
 * is NULL */
static void
buffer_release (GstBuffer * buf, GstMapInfo * map)
{
  if (buf == NULL)
    return;
  if (map->data)
    gst_buffer_unmap (buf, map);
  gst_buffer_unref (buf);
}

static gboolean
gst_lingbot_gen_create_session (GstLingbotGen * self,
    const OutputFormat * format, GError ** error)
{
  LingbotSessionOptions opts = LINGBOT_SESSION_OPTIONS_INIT;
  g_autoptr (GArray) ts = g_array_new (FALSE, FALSE, sizeof (int));
  g_autofree char *prompt = NULL, *embeds = NULL, *image_location = NULL;
  g_autofree char *timesteps = NULL;
  g_autoptr (LingbotWorld) world = NULL;
  GstBuffer *image = NULL, *poses = NULL;
  GstMapInfo imap = GST_MAP_INFO_INIT, pmap = GST_MAP_INFO_INIT;
  LingbotSession *session;
  int restart_passes, restart_max;

  world = gst_lingbot_world_holder_dup_world (&self->holder);
  GST_OBJECT_LOCK (self);
  prompt = g_strdup (self->prompt);
  embeds = g_strdup (self->prompt_embeds);
  image_location = g_strdup (self->image_location);
  timesteps = g_strdup (self->timestep_indices);
  opts.seed = self->seed;
  opts.chunk_frames = self->chunk_frames;
  opts.local_attn_frames = self->local_attn_size;
  opts.sink_frames = self->sink_size;
  opts.max_attention_size = self->max_attention_size;
  opts.sample_shift = self->sample_shift;
  opts.frames = self->frames;
  opts.pixel_area = self->pixel_area;
  GST_OBJECT_UNLOCK (self);
  opts.width = format->width;
  opts.height = format->height;
  /* the library keeps it for reference only: timing is the element's */
  opts.fps = MAX (1, (format->fps_n + format->fps_d / 2) / format->fps_d);

  if (world == NULL) {
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_INVALID_ARGUMENT,
        "no world");
    return FALSE;
  }
  if (!parse_timesteps (timesteps, ts, error))
    return FALSE;
  if (ts->len > 0) {
    opts.timestep_indices = (const int *) ts->data;
    opts.n_timestep_indices = ts->len;
  }
  opts.prompt = prompt;
  opts.prompt_embeds_path = embeds;
  opts.image_path = image_location;

  g_mutex_lock (&self->lock);
  if (self->image)
    image = gst_buffer_ref (self->image);
  if (self->poses)
    poses = gst_buffer_ref (self->poses);
  g_mutex_unlock (&self->lock);

  if (image_location == NULL && image == NULL) {
    /* the library would name its own fields (image_path, image_rgb) */
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_INVALID_ARGUMENT,
        "no reference image: set image-location, or send a frame on the "
        "image pad (it ended without one)");
    if (poses)
      gst_buffer_unref (poses);
    return FALSE;
  }
  if (image_location == NULL && image != NULL) {
    gst_buffer_map (image, &imap, GST_MAP_READ);
    opts.image_rgb = imap.data;
    opts.image_width = self->image_width;
    opts.image_height = self->image_height;
    opts.image_stride = self->image_width * 3;
  }
  if (poses != NULL) {
    const GstLingbotControlPoses *ph;

    gst_buffer_map (poses, &pmap, GST_MAP_READ);
    ph = (const GstLingbotControlPoses *) (pmap.data +
        sizeof (GstLingbotControlRecord));
    if (pmap.size < sizeof (GstLingbotControlRecord) + sizeof (*ph)
        || ph->n_poses > (pmap.size - sizeof (GstLingbotControlRecord) -
            sizeof (*ph)) / (16 * sizeof (float))
        || ph->n_intrinsics > (pmap.size - sizeof (GstLingbotControlRecord)
            - sizeof (*ph) - 16 * sizeof (float) * ph->n_poses) /
        (4 * sizeof (float))) {
      g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_FORMAT,
          "control: a POSES record of %" G_GSIZE_FORMAT " bytes is too "
          "short for its pose and intrinsics counts", pmap.size);
      gst_buffer_unmap (poses, &pmap);
      gst_buffer_unref (poses);
      buffer_release (image, &imap);
      return FALSE;
    }
    opts.poses = (const float *) (ph + 1);
    opts.n_poses = ph->n_poses;
    if (ph->n_intrinsics > 0)
      opts.intrinsics = opts.poses + 16 * ph->n_poses;
    opts.intrinsics_width = ph->intrinsics_width;
    opts.intrinsics_height = ph->intrinsics_height;
  }

  session = lingbot_session_new (world, &opts, error);

  buffer_release (image, &imap);
  if (poses) {
    gst_buffer_unmap (poses, &pmap);
    gst_buffer_unref (poses);
  }
  if (session == NULL)
    return FALSE;
  /* PLAYING -> NULL cancels the chunk in flight at its next DiT pass */
  lingbot_session_set_cancellable (session, self->cancellable);
  lingbot_session_set_pass_func (session, on_pass, self, NULL);
  lingbot_session_set_failure_func (session, on_failure, self, NULL);
  GST_OBJECT_LOCK (self);
  restart_passes = !self->live ? 0 : self->key_restart < 0 ? G_MAXINT :
      self->key_restart;
  restart_max = (int) self->key_restart_max;
  GST_OBJECT_UNLOCK (self);
  /* live: a key change restarts the chunk in flight (offline the keys
   * follow the control stream's times, so nothing restarts) */
  if (restart_passes > 0)
    lingbot_session_set_restart_func (session, on_restart, restart_passes,
        restart_max, self, NULL);
  self->handle = gst_lingbot_session_handle_new (world, session);
  g_mutex_lock (&self->lock);
  self->session_chunk_frames = lingbot_session_get_chunk_frames (session);
  self->session_fps_n = format->fps_n;
  self->session_fps_d = format->fps_d;
  self->n_frames = lingbot_session_get_n_frames (session);
  g_mutex_unlock (&self->lock);
  GST_INFO_OBJECT (self, "session %dx%d, latent %dx%d, chunk %d",
      lingbot_session_get_width (session),
      lingbot_session_get_height (session),
      lingbot_session_get_latent_width (session),
      lingbot_session_get_latent_height (session),
      lingbot_session_get_chunk_frames (session));
  return TRUE;
}

static GstCaps *
session_caps (GstLingbotGen * self)
{
  LingbotSession *s = self->handle->session;
  int fps_n, fps_d;

  g_mutex_lock (&self->lock);
  fps_n = self->session_fps_n;
  fps_d = self->session_fps_d;
  g_mutex_unlock (&self->lock);
  return gst_caps_new_simple (GST_LINGBOT_LATENT_MEDIA_TYPE,
      "dtype", G_TYPE_STRING, "f32",
      "channels", G_TYPE_INT, LINGBOT_LATENT_CHANNELS,
      "frames", G_TYPE_INT, lingbot_session_get_chunk_frames (s),
      "height", G_TYPE_INT, lingbot_session_get_latent_height (s),
      "width", G_TYPE_INT, lingbot_session_get_latent_width (s),
      "video-width", G_TYPE_INT, lingbot_session_get_width (s),
      "video-height", G_TYPE_INT, lingbot_session_get_height (s),
      "framerate", GST_TYPE_FRACTION, fps_n, fps_d, NULL);
}

/* The session's caps with memory:LingbotDevice when downstream takes it
 * (first choice: the latents then stay in the session), else plain
 * system-memory bytes. */
static GstCaps *
negotiate_caps (GstLingbotGen * self)
{
  GstCaps *plain = session_caps (self);
  GstCaps *offer = gst_caps_copy (plain);
  GstCaps *peer, *caps;

  gst_caps_set_features (offer, 0,
      gst_caps_features_new (GST_CAPS_FEATURE_MEMORY_LINGBOT_DEVICE, NULL));
  gst_caps_append (offer, gst_caps_ref (plain));
  peer = gst_pad_peer_query_caps (self->srcpad, offer);
  caps = peer ? gst_caps_intersect_full (offer, peer,
      GST_CAPS_INTERSECT_FIRST) : gst_caps_ref (offer);
  gst_clear_caps (&peer);
  gst_caps_unref (offer);
  if (gst_caps_is_empty (caps)) {
    /* the push fails with not-negotiated; plain caps say what we had */
    gst_caps_unref (caps);
    caps = gst_caps_ref (plain);
  }
  gst_caps_unref (plain);
  caps = gst_caps_fixate (caps);
  self->device_memory =
      gst_caps_features_contains (gst_caps_get_features (caps, 0),
      GST_CAPS_FEATURE_MEMORY_LINGBOT_DEVICE);
  GST_INFO_OBJECT (self, "latent caps %" GST_PTR_FORMAT, caps);
  return caps;
}

static void
push_stream_start (GstLingbotGen * self)
{
  GstSegment segment;
  /* not gst_pad_create_stream_id(): it wants at most one sink pad */
  g_autofree char *id = g_strdup_printf ("%08x%08x/lingbot-latents",
      g_random_int (), g_random_int ());
  GstCaps *caps;

  gst_pad_push_event (self->srcpad, gst_event_new_stream_start (id));
  caps = negotiate_caps (self);
  gst_pad_push_event (self->srcpad, gst_event_new_caps (caps));
  gst_caps_unref (caps);
  gst_segment_init (&segment, GST_FORMAT_TIME);
  gst_pad_push_event (self->srcpad, gst_event_new_segment (&segment));
  self->caps_sent = TRUE;
}

/* ---- choosing the keys of a chunk ---- */

typedef enum
{
  KEYS_OK,
  KEYS_DONE,
  KEYS_FLUSHING,
} KeysResult;

/* What a chunk's keys were taken from (the lingbot-chunk message's
 * "snapshot" and "revision"). */
typedef enum
{
  SNAPSHOT_NONE,                /* no control stream, or explicit poses */
  SNAPSHOT_TAP,                 /* a press's snapshot of the held set */
  SNAPSHOT_HELD,                /* the held set when the chunk was decided */
} SnapshotKind;

typedef struct
{
  guint keys;
  gboolean reset;
  SnapshotKind kind;
  guint revision;               /* presses applied so far (monotonic) */
} ChunkKeys;

/* the keys of a chunk the schedule decided */
static void
chunk_keys_from (ChunkKeys * ck, const LingbotScheduleChunk * c)
{
  ck->keys = c->keys;
  ck->reset = c->reset_before;
  ck->kind = c->is_tap ? SNAPSHOT_TAP : SNAPSHOT_HELD;
  ck->revision = c->revision;
}

/* the lingbot-waiting element message: chunk @index waits for @what
 * ("keys" or "control"); called without the lock */
static void
post_waiting (GstLingbotGen * self, guint64 index, const char *what)
{
  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_element (GST_OBJECT (self),
          gst_structure_new ("lingbot-waiting", "index", G_TYPE_UINT64, index,
              "for", G_TYPE_STRING, what, NULL)));
}

/* offline: how long the control stream may stand still before the element
 * says that it waits for it (microseconds) */
#define CONTROL_STALL_US G_TIME_SPAN_SECOND

/* called with the lock held; may wait on cond.  Both modes go through the
 * one schedule: live=false its virtual clock (a chunk decided once the
 * control stream has passed its request time, or ended), live=true the key
 * state as it is now (a tap, else the held set; wait while nothing is
 * held). */
static KeysResult
take_keys_unlocked (GstLingbotGen * self, gboolean live, gboolean has_control,
    ChunkKeys * ck)
{
  guint chunk_size = 4, fps_n = FALLBACK_FPS, fps_d = 1;
  gboolean waiting = FALSE;
  g_autoptr (GError) error = NULL;

  memset (ck, 0, sizeof (*ck));
  ck->kind = SNAPSHOT_NONE;
  if (self->handle) {
    chunk_size = lingbot_session_get_chunk_frames (self->handle->session);
    fps_n = self->session_fps_n;
    fps_d = self->session_fps_d;
  }

  while (TRUE) {
    LingbotScheduleChunk c;

    if (self->flushing)
      return KEYS_FLUSHING;
    if (self->eos_pending)
      return KEYS_DONE;
    if (!has_control || self->poses != NULL)
      return KEYS_OK;

    /* the session's timing, fixed before the first chunk */
    if (!lingbot_control_schedule_set_timing (self->schedule, chunk_size,
            fps_n, fps_d, &error)) {
      GST_WARNING_OBJECT (self, "%s", error->message);
      g_clear_error (&error);
    }
    if (GST_CLOCK_TIME_IS_VALID (self->horizon))
      lingbot_control_schedule_set_horizon (self->schedule,
          (double) self->horizon / GST_SECOND);
    if (self->control_eos)
      lingbot_control_schedule_end (self->schedule);

    if (live) {
      if (lingbot_control_schedule_take_live (self->schedule, &c)) {
        chunk_keys_from (ck, &c);
        return KEYS_OK;
      }
    } else {
      switch (lingbot_control_schedule_next (self->schedule, &c)) {
        case LINGBOT_SCHEDULE_CHUNK:
          chunk_keys_from (ck, &c);
          return KEYS_OK;
        case LINGBOT_SCHEDULE_ENDED:{
          guint frames;

          /* the trace ended with nothing held: no more key changes.  A
           * bounded session still makes its `frames` with no key held (a
           * reset after the last chunk goes with the first of them); an
           * unbounded one ends here (it would never end otherwise). */
          GST_OBJECT_LOCK (self);
          frames = self->frames;
          GST_OBJECT_UNLOCK (self);
          if (frames == 0)
            return KEYS_DONE;
          ck->keys = 0;
          ck->reset = c.reset_before;
          ck->revision = c.revision;
          ck->kind = c.revision ? SNAPSHOT_HELD : SNAPSHOT_NONE;
          return KEYS_OK;
        }
        case LINGBOT_SCHEDULE_WAIT:
          break;
      }
    }
    if (self->control_eos)
      return KEYS_DONE;
    if (live && !waiting) {
      /* say so once: a live session that waits for a key looks like a
       * hang otherwise */
      guint64 index = self->chunk;

      waiting = TRUE;
      g_mutex_unlock (&self->lock);
      GST_INFO_OBJECT (self, "live: chunk %" G_GUINT64_FORMAT " waits for a "
          "key to be held", index);
      post_waiting (self, index, "keys");
      g_mutex_lock (&self->lock);
      continue;
    }
    if (!live && !waiting) {
      /* offline, a control stream that does not move on waits silently:
       * key presses on a lingbotcontrolsrc without location all land at
       * its last event's time.  Say so once nothing has come for
       * CONTROL_STALL_US (a trace's records come at once, so a normal run
       * never gets here): a lingbot-waiting message per wait, an INFO on
       * the bus once per stream */
      gint64 deadline = g_get_monotonic_time () + CONTROL_STALL_US;
      guint64 index = self->chunk;
      gboolean say;

      if (g_cond_wait_until (&self->cond, &self->lock, deadline))
        continue;
      waiting = TRUE;
      say = !self->said_control_wait;
      self->said_control_wait = TRUE;
      g_mutex_unlock (&self->lock);
      GST_INFO_OBJECT (self, "offline: chunk %" G_GUINT64_FORMAT " waits for "
          "the control stream to move on or end", index);
      if (say)
        /* gst-launch-1.0 prints an INFO's debug text: all of it there */
        GST_ELEMENT_INFO (self, LIBRARY, SETTINGS, ("Chunk %" G_GUINT64_FORMAT
                " waits for the control stream", index), ("is-live=false: "
                "chunk %" G_GUINT64_FORMAT " waits for the control stream to "
                "pass its start or to end; key presses on a lingbotcontrolsrc "
                "without location do not move its time: set is-live=true on "
                "lingbotgen (or lingbotbin) to steer as keys come, or end the "
                "control stream (EOS)", index));
      post_waiting (self, index, "control");
      g_mutex_lock (&self->lock);
      continue;
    }
    g_cond_wait (&self->cond, &self->lock);
  }
}

/* ---- the streaming thread ---- */

static void
post_chunk_message (GstLingbotGen * self, const LingbotChunkStats * st,
    const ChunkKeys * ck, GstClockTime pts, GstClockTime start,
    GstClockTime ready, GstClockTime latency)
{
  static const char *const kinds[] = { "none", "tap", "held" };
  g_autofree char *keys = lingbot_keys_to_string (st->keys);
  GstStructure *s = gst_structure_new ("lingbot-chunk",
      "index", G_TYPE_UINT64, st->index,
      "frames", G_TYPE_INT, st->frames,
      "keys", G_TYPE_UINT, st->keys,
      "keys-string", G_TYPE_STRING, keys,
      "revision", G_TYPE_UINT, ck->revision,
      "tap", G_TYPE_BOOLEAN, ck->kind == SNAPSHOT_TAP,
      "snapshot", G_TYPE_STRING, kinds[ck->kind],
      "dit-seconds", G_TYPE_DOUBLE, st->dit_seconds,
      "vae-seconds", G_TYPE_DOUBLE, st->vae_seconds,
      "compute-seconds", G_TYPE_DOUBLE, st->compute_seconds,
      "pts", G_TYPE_UINT64, pts,
      "running-time", G_TYPE_UINT64, start,
      "ready-time", G_TYPE_UINT64, ready,
      "latency", G_TYPE_UINT64, latency,
      "restarts", G_TYPE_UINT, st->restarts,
      "restart-passes", G_TYPE_UINT, st->restart_passes, NULL);

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
      push_stream_start (self);
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
static GstClockTime
compute_latency_unlocked (GstLingbotGen * self, GstClockTime chunk)
{
  return GST_CLOCK_TIME_IS_VALID (self->compute_latency.announced) ?
      self->compute_latency.announced : chunk;
}

/* A live source does not run ahead of the clock: the next chunk starts no
 * earlier than the running time its first frame is due (next_pts) less
 * the compute estimate, so it is ready when due and its keys are taken as
 * late as the latency allows.  Without this, a generator faster than real
 * time behind an unbounded queue made minutes of video before a key showed.
 * Waits on cond (flushing, EOS and PAUSED wake it). */
static WaitResult
pace_live (GstLingbotGen * self)
{
  GstClock *clock = gst_element_get_clock (GST_ELEMENT (self));
  GstClockTime chunk = gst_lingbot_gen_chunk_duration (self);
  WaitResult r = WAIT_OK;

  if (clock == NULL)
    return WAIT_OK;
  g_mutex_lock (&self->lock);
  while (GST_CLOCK_TIME_IS_VALID (self->next_pts)) {
    GstClockTime est = compute_latency_unlocked (self, chunk);
    GstClockTime due = gst_element_get_base_time (GST_ELEMENT (self)) +
        (self->next_pts > est ? self->next_pts - est : 0);
    GstClockTime now;

    if (self->flushing || self->eos_pending || !self->playing) {
      r = self->flushing ? WAIT_FLUSHING : self->eos_pending ? WAIT_EOS :
          WAIT_PAUSED;
      break;
    }
    now = gst_clock_get_time (clock);
    if (now >= due)
      break;
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
 * then re-distributes it).  @measured: a chunk's compute time; with
 * @late > 0, a sink's QoS lateness instead: the newest chunk took the
 * time the announced figure stands for (less its eighth) plus @late. */
static void
note_compute_time (GstLingbotGen * self, GstClockTime measured,
    GstClockTimeDiff late)
{
  GstClockTime old, now;
  gboolean live, automatic, moved;

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
  now = self->compute_latency.announced;
  /* the frames stamped so far count on the old figure: a sink that has
   * the new one may find them late (after a move down), and their QoS
   * says nothing new (after a move up: each late frame of a chunk would
   * raise the figure again) */
  if (moved)
    self->qos_from = self->stamped_end;
  g_mutex_unlock (&self->lock);
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
  GstClockTime fixed, lat, chunk = gst_lingbot_gen_chunk_duration (self);

  note_compute_time (self, compute, 0);
  GST_OBJECT_LOCK (self);
  fixed = self->latency;
  GST_OBJECT_UNLOCK (self);
  if (GST_CLOCK_TIME_IS_VALID (fixed))
    return fixed;
  g_mutex_lock (&self->lock);
  lat = compute_latency_unlocked (self, chunk);
  g_mutex_unlock (&self->lock);
  return lat;
}

/* Live (docs/elements.md "Timestamps"): a chunk ready at running time
 * @ready is stamped no earlier than it can be shown, @ready less the
 * @latency it is reported with, and never before the end of the previous
 * chunk (timestamps increase).  A session slower than real time so leaves
 * a gap before the chunk (fewer frames, not older ones); a QoS message
 * says so: jitter = the gap (ns), stats in frames (DEFAULT): the frames
 * delivered and those the gaps left out so far. */
static GstClockTime
live_pts (GstLingbotGen * self, GstClockTime ready, GstClockTime latency,
    int frames)
{
  GstClockTime earliest = ready > latency ? ready - latency : 0, gap;
  GstMessage *msg;
  guint64 skipped;

  if (!GST_CLOCK_TIME_IS_VALID (self->next_pts))
    return earliest;
  if (earliest <= self->next_pts)
    return self->next_pts;
  gap = earliest - self->next_pts;
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
  ChunkKeys ck;
  KeysResult kr;

  has_control = pad_has_upstream (self->control_pad);
  GST_OBJECT_LOCK (self);
  live = self->live;
  preview = self->preview;
  GST_OBJECT_UNLOCK (self);

  if (self->handle == NULL) {
    gboolean need_image, flushing, eos;
    OutputFormat format;

    /* wait for what the session is created from: the image from the pad;
     * the control stream's caps, which say whether a POSES record comes,
     * and that record */
    GST_OBJECT_LOCK (self);
    need_image = self->image_location == NULL && self->image_pad != NULL
        && pad_has_upstream (self->image_pad);
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

    if (!choose_output_format (self, &format, &error)
        || !gst_lingbot_gen_create_session (self, &format, &error)) {
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
    push_stream_start (self);
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
  kr = take_keys_unlocked (self, live, has_control, &ck);
  if (kr == KEYS_OK && self->eos_pending)
    kr = KEYS_DONE;
  g_mutex_unlock (&self->lock);
  if (kr == KEYS_FLUSHING) {
    gst_lingbot_gen_pause (self, GST_FLOW_FLUSHING, TRUE);
    return;
  }
  if (kr == KEYS_DONE) {
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
  self->restart_ok = live && ck.kind != SNAPSHOT_NONE;
  self->restarted = FALSE;
  g_mutex_unlock (&self->lock);
  ok = lingbot_session_generate (h->session, ck.keys, &stats, &error);
  end_us = g_get_monotonic_time ();
  g_mutex_lock (&self->lock);
  self->restart_ok = FALSE;
  if (self->restarted)
    chunk_keys_from (&ck, &self->restart_chunk);
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
    if (claim_error (self, attempt))
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
    pts = live_pts (self, ready, latency, stats.frames);
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
  post_chunk_message (self, &stats, &ck, pts, start, ready, latency);
  self->chunk++;
  self->frames_out += stats.frames;
  g_mutex_lock (&self->lock);
  self->frames_done = self->frames_out;
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

static void
gst_lingbot_gen_reset_stream (GstLingbotGen * self)
{
  g_clear_pointer (&self->handle, gst_lingbot_session_handle_unref);
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
  self->said_control_wait = FALSE;
  gst_lingbot_latency_estimate_reset (&self->compute_latency);
  self->frames_done = 0;
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
  self->caps_sent = FALSE;
  self->device_memory = FALSE;
}

static gboolean
gst_lingbot_gen_src_activate_mode (GstPad * pad, GstObject * parent,
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
  gst_lingbot_gen_raise (self, &self->flushing);
  /* the chunk in flight stops at its next DiT pass boundary */
  g_cancellable_cancel (self->cancellable);
  return gst_pad_stop_task (pad);
}

/* ---- queries, context ---- */

/* The frame rate: the session's once it exists, else `framerate`, `fps`
 * or 16/1. */
static void
gst_lingbot_gen_rate (GstLingbotGen * self, int *fps_n, int *fps_d)
{
  g_mutex_lock (&self->lock);
  *fps_n = self->session_fps_n;
  *fps_d = self->session_fps_d;
  g_mutex_unlock (&self->lock);
  if (*fps_n > 0)
    return;
  GST_OBJECT_LOCK (self);
  *fps_n = self->framerate_n > 0 ? self->framerate_n :
      self->fps > 0 ? self->fps : FALLBACK_FPS;
  *fps_d = self->framerate_n > 0 ? self->framerate_d : 1;
  GST_OBJECT_UNLOCK (self);
}

/**
 * gst_lingbot_gen_chunk_duration:
 *
 * The playback time of one steady chunk (lingbot_chunk_video_frames() of
 * a chunk after the first, 4 C frames) at the session rate: the session's
 * chunk size once it exists, else `chunk-frames` (0: the world's model).
 */
static GstClockTime
gst_lingbot_gen_chunk_duration (GstLingbotGen * self)
{
  int c, fps_n, fps_d;
  LingbotWorld *world = NULL;

  world = gst_lingbot_world_holder_dup_world (&self->holder);
  GST_OBJECT_LOCK (self);
  c = self->chunk_frames;
  GST_OBJECT_UNLOCK (self);
  gst_lingbot_gen_rate (self, &fps_n, &fps_d);
  g_mutex_lock (&self->lock);
  if (self->session_chunk_frames > 0)
    c = self->session_chunk_frames;
  g_mutex_unlock (&self->lock);
  if (c <= 0 && world)
    c = lingbot_world_get_chunk_frames (world);
  g_clear_pointer (&world, lingbot_world_unref);
  if (c <= 0)
    c = DEFAULT_CHUNK_FRAMES;
  return gst_util_uint64_scale (lingbot_chunk_video_frames (1, (guint) c),
      (guint64) fps_d * GST_SECOND, (guint64) fps_n);
}

/* LATENCY (docs/elements.md "Latency"): live = `is-live`; min offline =
 * one steady chunk's duration; live = the announced compute latency
 * (note_compute_time(); before a chunk was measured, one chunk's duration,
 * real time): a live chunk is stamped no earlier than its ready time less
 * that figure (live_pts()), so none comes later than it after its
 * timestamp; or the `latency` property when set; plus a live control
 * source's latency; max = unbounded (the generator computes on demand and
 * drops nothing while downstream blocks). */
static gboolean
gst_lingbot_gen_latency_query (GstLingbotGen * self, GstQuery * query)
{
  gboolean live, up_live = FALSE;
  GstClockTime chunk = gst_lingbot_gen_chunk_duration (self), min = chunk;
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
    min = compute_latency_unlocked (self, chunk);
    g_mutex_unlock (&self->lock);
  }

  up = gst_query_new_latency ();
  if (pad_has_upstream (self->control_pad)
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
  gst_lingbot_gen_rate (self, &fps_n, &fps_d);

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
 * compute latency (the newest chunk's sample, note_compute_time()), except
 * for frames stamped before the latency last moved; a seek is refused (a world is
 * generated forward only); navigation goes on to the control pad's
 * source, the rest default. */
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
        note_compute_time (self, 0, diff);
      gst_event_unref (event);
      return TRUE;
    }
    case GST_EVENT_SEEK:
      GST_DEBUG_OBJECT (self, "seeking is not supported");
      gst_event_unref (event);
      return FALSE;
    default:
      return gst_pad_event_default (pad, parent, event);
  }
}

/* send_event (EOS), what gst-launch-1.0 -e does on Ctrl-C: the chunk in
 * flight is finished and pushed, then EOS (GstBin sends it here because
 * the element is flagged a source: its sink pads are optional). */
static gboolean
gst_lingbot_gen_send_event (GstElement * element, GstEvent * event)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (element);

  if (GST_EVENT_TYPE (event) == GST_EVENT_EOS) {
    GST_INFO_OBJECT (self, "EOS sent: the stream ends after the chunk in "
        "flight, if one is");
    gst_lingbot_gen_raise (self, &self->eos_pending);
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

/* width/height at NULL->READY and READY->PAUSED (they may change in
 * READY).  Their GParamSpecs take any int, so that an out-of-range size
 * is this error and not GLib's warning followed by a run at the default
 * size. */
static gboolean
gst_lingbot_gen_check_size (GstLingbotGen * self, int width, int height)
{
  if ((width == 0) == (height == 0) && width % 16 == 0 && height % 16 == 0
      && width >= 0 && height >= 0 && width <= MAX_SIZE && height <= MAX_SIZE)
    return TRUE;
  GST_ELEMENT_ERROR (self, LIBRARY, SETTINGS,
      ("Invalid output size %dx%d: set width and height both to "
          "multiples of 16 (at most %d), or both to 0 (size from "
          "pixel-area)", width, height, MAX_SIZE), (NULL));
  return FALSE;
}

/* The prompt against the world just taken (NULL->READY): prompt-embeds
 * of another model's text width fail RESOURCE/OPEN_READ; no prompt at
 * all, or one longer than the text encoder takes, is a WARNING (the
 * session runs, as the user may not expect). */
static gboolean
gst_lingbot_gen_check_prompt (GstLingbotGen * self, const char *prompt,
    const char *embeds, int embeds_width)
{
  g_autoptr (LingbotWorld) world =
      gst_lingbot_world_holder_dup_world (&self->holder);
  g_autoptr (GError) error = NULL;
  int text_dim, n_tokens = 0, max_tokens = 0;

  if (world == NULL)
    return TRUE;
  text_dim = lingbot_world_get_text_dim (world);
  if (embeds != NULL && embeds_width != text_dim) {
    GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ,
        ("prompt-embeds: '%s' holds embeddings %d wide, the model '%s' "
            "takes %d (the file was made for another model)", embeds,
            embeds_width, lingbot_world_get_model_path (world), text_dim),
        (NULL));
    gst_lingbot_world_holder_release (&self->holder);
    return FALSE;
  }
  if (embeds != NULL || !lingbot_world_has_text_encoder (world))
    return TRUE;
  if (prompt == NULL) {
    GST_ELEMENT_WARNING (self, LIBRARY, SETTINGS,
        ("No prompt and no prompt-embeds set: the session runs with the "
            "empty prompt's embeddings (the text encoder's output for \"\")"),
        ("set prompt, or prompt-embeds (lingbot-encode-prompt)"));
    return TRUE;
  }
  if (!lingbot_world_count_prompt_tokens (world, prompt, &n_tokens,
          &max_tokens, &error)) {
    GST_WARNING_OBJECT (self, "cannot count the prompt's tokens: %s",
        error->message);
    return TRUE;
  }
  if (n_tokens > max_tokens)
    GST_ELEMENT_WARNING (self, LIBRARY, SETTINGS,
        ("The prompt is %d tokens long (with </s>), more than the %d the "
            "text encoder takes: its last %d tokens are dropped", n_tokens,
            max_tokens, n_tokens - max_tokens), (NULL));
  return TRUE;
}

/* Error domains and codes (docs/elements.md): a missing model, image or
 * prompt-embeds file RESOURCE/NOT_FOUND, one that cannot be read
 * RESOURCE/OPEN_READ, a malformed devices string RESOURCE/SETTINGS (the
 * precision, an enum, is refused when set; its LIBRARY/SETTINGS check
 * stays for the string the world takes), a backend that cannot
 * start (no CUDA module, no such GPU) LIBRARY/INIT. */
static gboolean
gst_lingbot_gen_open (GstLingbotGen * self)
{
  g_autofree char *model_path = NULL, *devices = NULL, *embeds = NULL;
  g_autofree char *image = NULL, *timesteps = NULL, *precision = NULL;
  g_autofree char *prompt = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) ts = g_array_new (FALSE, FALSE, sizeof (int));
  int width, height, embeds_width = 0;
  LingbotPrecision math;
  const char *files[2][2];
  GQuark domain;
  gint code;

  gst_lingbot_world_holder_dup_config (&self->holder, &model_path, &devices);
  GST_OBJECT_LOCK (self);
  embeds = g_strdup (self->prompt_embeds);
  prompt = g_strdup (self->prompt);
  image = g_strdup (self->image_location);
  timesteps = g_strdup (self->timestep_indices);
  precision = g_strdup (g_enum_get_value (g_type_class_peek
          (GST_TYPE_LINGBOT_PRECISION), self->precision)->value_nick);
  width = self->width;
  height = self->height;
  GST_OBJECT_UNLOCK (self);

  if (model_path == NULL) {
    GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND,
        ("No model-path set"), (NULL));
    return FALSE;
  }
  /* the settings the session would reject, before anything is loaded */
  if (!gst_lingbot_gen_check_size (self, width, height))
    return FALSE;
  if (!parse_timesteps (timesteps, ts, &error)) {
    GST_ELEMENT_ERROR (self, LIBRARY, SETTINGS, ("%s", error->message), (NULL));
    return FALSE;
  }
  if (!lingbot_world_parse_precision (precision, &math, &error)) {
    GST_ELEMENT_ERROR (self, LIBRARY, SETTINGS,
        ("Invalid precision '%s': choose fp32, bf16 or fp8", precision),
        ("%s", error->message));
    return FALSE;
  }
  if (!lingbot_world_check_devices (devices, NULL, &error)) {
    if (g_error_matches (error, LINGBOT_ERROR, LINGBOT_ERROR_INVALID_ARGUMENT))
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
          ("Invalid devices '%s': %s", devices, error->message), (NULL));
    else
      GST_ELEMENT_ERROR (self, LIBRARY, INIT,
          ("Cannot start the backend for devices '%s': %s", devices,
              error->message), (NULL));
    return FALSE;
  }
  if (!g_file_test (model_path, G_FILE_TEST_EXISTS)) {
    GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND,
        ("Model path '%s' does not exist", model_path), (NULL));
    return FALSE;
  }
  if (!g_file_test (model_path, G_FILE_TEST_IS_DIR)) {
    GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND,
        ("Model path '%s' is not a directory (model-path is the model "
            "directory: transformers/, Wan2.1_VAE.pth or .safetensors, ...)",
            model_path), (NULL));
    return FALSE;
  }
  files[0][0] = "image-location";
  files[0][1] = image;
  files[1][0] = "prompt-embeds";
  files[1][1] = embeds;
  for (guint i = 0; i < G_N_ELEMENTS (files); i++) {
    g_autofree char *text = NULL;

    if (files[i][1] == NULL)
      continue;
    if (gst_lingbot_check_readable (files[i][1], &domain, &code, &error))
      continue;
    text = g_strdup_printf ("%s: %s", files[i][0], error->message);
    gst_element_message_full (GST_ELEMENT (self), GST_MESSAGE_ERROR, domain,
        code, g_steal_pointer (&text), NULL, __FILE__, GST_FUNCTION, __LINE__);
    return FALSE;
  }
  /* read as the session will, but before the model loads, and without
   * the rank 0 prefix of the session's error */
  if (embeds != NULL && !lingbot_session_check_prompt_embeds (embeds,
          &embeds_width, &error)) {
    GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ,
        ("prompt-embeds: '%s' is not a usable prompt-embeds file: %s",
            embeds, error->message), (NULL));
    return FALSE;
  }
  if (image != NULL) {
    /* decodable as the session will decode it (a PNG or a truncated file
     * fails the state change, not the streaming thread) */
    int image_width = 0, image_height = 0;
    gboolean ok = lingbot_session_check_image (image, &image_width,
        &image_height, &error);

    GST_OBJECT_LOCK (self);
    self->image_location_width = ok ? image_width : 0;
    self->image_location_height = ok ? image_height : 0;
    GST_OBJECT_UNLOCK (self);
    if (!ok) {
      g_autofree char *text = g_strdup_printf ("image-location: '%s' is "
          "not a usable JPEG: %s", image, error->message);

      gst_lingbot_post_error (GST_ELEMENT (self), error,
          GST_LINGBOT_ERROR_CONTEXT_OPEN, text, NULL);
      return FALSE;
    }
  }
  if (!gst_lingbot_world_holder_ensure (&self->holder, precision,
          embeds == NULL, &error)) {
    g_autofree char *text = g_strdup_printf ("Cannot load the model '%s' on "
        "%s: %s", model_path, devices, error ? error->message : "no world");

    gst_lingbot_post_error (GST_ELEMENT (self), error,
        GST_LINGBOT_ERROR_CONTEXT_OPEN, text, NULL);
    return FALSE;
  }
  return gst_lingbot_gen_check_prompt (self, prompt, embeds, embeds_width);
}

static GstStateChangeReturn
gst_lingbot_gen_change_state (GstElement * element, GstStateChange transition)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (element);
  GstStateChangeReturn ret;

  switch (transition) {
    case GST_STATE_CHANGE_NULL_TO_READY:
      if (!gst_lingbot_gen_open (self))
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
      if (!gst_lingbot_gen_check_size (self, width, height))
        return GST_STATE_CHANGE_FAILURE;
      if (!have_image) {
        GST_ELEMENT_ERROR (self, LIBRARY, SETTINGS,
            ("No reference image: set image-location (or link the image "
                "pad)"), (NULL));
        return GST_STATE_CHANGE_FAILURE;
      }
      gst_lingbot_gen_reset_stream (self);
      /* the stats of the previous run were kept until now */
      GST_OBJECT_LOCK (self);
      gst_lingbot_chunk_log_clear (self->chunk_times);
      self->restarts = 0;
      GST_OBJECT_UNLOCK (self);
      break;
    }
    case GST_STATE_CHANGE_PAUSED_TO_PLAYING:
      gst_lingbot_gen_raise (self, &self->playing);
      break;
    case GST_STATE_CHANGE_PLAYING_TO_PAUSED:
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
      gst_lingbot_gen_reset_stream (self);
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
          DEFAULT_CHUNK_FRAMES, ready));
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
  signals[SIGNAL_PASS] = g_signal_new ("pass", G_TYPE_FROM_CLASS (klass),
      G_SIGNAL_RUN_LAST, 0, NULL, NULL, NULL, G_TYPE_NONE, 3, G_TYPE_UINT64,
      G_TYPE_INT, G_TYPE_INT);

  gst_element_class_add_static_pad_template (element_class, &control_template);
  gst_element_class_add_static_pad_template (element_class, &image_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (element_class,
      "LingBot-World generator", "Generator/Video",
      "Generates latent video chunks of the LingBot-World model from an "
      "image, a prompt and a control stream", "lingbot-gst developers");

  element_class->change_state = gst_lingbot_gen_change_state;
  element_class->request_new_pad = gst_lingbot_gen_request_new_pad;
  element_class->release_pad = gst_lingbot_gen_release_pad;
  /* a query on the element (CONTEXT): GstElement's default hands it to
   * the src pad, gst_lingbot_gen_src_query() */
  element_class->set_context = gst_lingbot_gen_set_context;
  element_class->send_event = gst_lingbot_gen_send_event;
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
      gst_lingbot_gen_src_activate_mode);
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
  self->session_fps_d = 1;
  self->cancellable = g_cancellable_new ();
  /* its sink pads are optional inputs: a bin sends it EOS (Ctrl-C with
   * gst-launch-1.0 -e) as it does to sources */
  GST_OBJECT_FLAG_SET (self, GST_ELEMENT_FLAG_SOURCE);
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  /* chunk size and rate are the session's, set before the first chunk */
  self->schedule = lingbot_control_schedule_new (4, FALLBACK_FPS, 1, NULL);
  self->horizon = GST_CLOCK_TIME_NONE;
  self->chunk_times = gst_lingbot_chunk_log_new (GST_LINGBOT_CHUNK_LOG_WINDOW);
}

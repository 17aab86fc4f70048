/* lingbot-gst: lingbotgen, the session
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Opening the world at NULL->READY (size, prompt and model checks), the
 * output format (properties, else downstream caps), the session's
 * creation and callbacks (passes, key restarts, early errors), and the
 * latent caps and stream-start events.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/gstlingbotgen-private.h"

#define GST_CAT_DEFAULT gst_lingbot_gen_debug

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
gboolean
gst_lingbot_gen_session_choose_format (GstLingbotGen * self,
    GstLingbotGenFormat * out, GError ** error)
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
        "downstream accepts no latent caps: lingbotgen's src pad links to "
        "lingbotvaedec, and what follows lingbotvaedec must accept raw "
        "video (behind a tee, every branch the same format)");
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
    if (width % 16 || height % 16 || width > GST_LINGBOT_GEN_MAX_SIZE
        || height > GST_LINGBOT_GEN_MAX_SIZE) {
      g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_UNSUPPORTED,
          "downstream asks for %dx%d video: the size must be multiples of "
          "16 and at most %dx%d", width, height, GST_LINGBOT_GEN_MAX_SIZE,
          GST_LINGBOT_GEN_MAX_SIZE);
      ok = FALSE;
    }
  }
  if (fr_n <= 0) {
    fr_n = fps > 0 ? fps : GST_LINGBOT_GEN_FALLBACK_FPS;
    fr_d = 1;
    if (fps <= 0 && st != NULL && gst_structure_has_field (st, "framerate")) {
      /* (FALSE when the field is fixed already) */
      gst_structure_fixate_field_nearest_fraction (st, "framerate",
          GST_LINGBOT_GEN_FALLBACK_FPS, 1);
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
  *out = (GstLingbotGenFormat) { width, height, fr_n, fr_d };
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
    g_signal_emit (self, gst_lingbot_gen_signals[GST_LINGBOT_GEN_SIGNAL_PASS],
        0, chunk, pass, n_passes);
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
gboolean
gst_lingbot_gen_session_claim_error (GstLingbotGen * self, gint attempt)
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

  if (!gst_lingbot_gen_session_claim_error (self, ee->attempt))
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

gboolean
gst_lingbot_gen_session_create (GstLingbotGen * self,
    const GstLingbotGenFormat * format, GError ** error)
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
  if (opts.n_poses > 0) {
    /* explicit poses make whole chunks (spec 3.1 truncates the count):
     * say so when that is fewer frames than asked for or posed */
    guint asked = opts.frames > 0 ? opts.frames : opts.n_poses;
    guint made = lingbot_session_get_n_frames (session);
    int c = lingbot_session_get_chunk_frames (session);

    if (made < asked)
      GST_ELEMENT_WARNING (self, STREAM, FORMAT, ("Explicit poses: %u "
              "video frames are generated, not %u", made, asked),
          ("a session with explicit poses makes whole chunks: %d, %d, %d, "
              "... frames (4 x %d x k - 3); %s %u (set frames to one of "
              "those counts, with at least as many poses)", 4 * c - 3,
              8 * c - 3, 12 * c - 3, c, opts.frames > 0 ? "frames is" :
              "the poses file has", asked));
  }
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

void
gst_lingbot_gen_session_push_stream_start (GstLingbotGen * self)
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

/* width/height at NULL->READY and READY->PAUSED (they may change in
 * READY).  Their GParamSpecs take any int, so that an out-of-range size
 * is this error and not GLib's warning followed by a run at the default
 * size. */
gboolean
gst_lingbot_gen_session_check_size (GstLingbotGen * self, int width, int height)
{
  if ((width == 0) == (height == 0) && width % 16 == 0 && height % 16 == 0
      && width >= 0 && height >= 0 && width <= GST_LINGBOT_GEN_MAX_SIZE
      && height <= GST_LINGBOT_GEN_MAX_SIZE)
    return TRUE;
  GST_ELEMENT_ERROR (self, LIBRARY, SETTINGS,
      ("Invalid output size %dx%d: set width and height both to "
          "multiples of 16 (at most %d), or both to 0 (size from "
          "pixel-area)", width, height, GST_LINGBOT_GEN_MAX_SIZE), (NULL));
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
gboolean
gst_lingbot_gen_session_open (GstLingbotGen * self)
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
  if (!gst_lingbot_gen_session_check_size (self, width, height))
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

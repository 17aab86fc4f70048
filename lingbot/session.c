/* lingbot-gst: LingbotSession, one generation over a world
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * DESIGN.md 4.  lingbot_session_new() computes everything that is constant
 * for the session: the output size and the preprocessed image, the prompt
 * context (once; the text encoder is loaded, run and freed), the condition
 * encoder (a VAE encoder session that serves zero segments from its stored
 * fixed point), the control session, the DiT session (text K/V, RoPE,
 * sigmas, KV cache) on the world's worker group, the noise source, the VAE
 * decoder and every per-chunk buffer.  Per chunk:
 *
 *   lingbot_session_generate (keys):  control (advance + fill) ->
 *     condition y (VAE encoder on rank 0) -> DiT (4 + 1 passes, Ulysses)
 *     -> latents
 *   (on a device world the control tensor is not filled on the host: the
 *   chunk's poses go to the ranks, which build it with the ray_map op)
 *   lingbot_session_decode (latents): VAE decode (height-sharded over the
 *     same ranks) -> frames [3, T, H, W]
 *
 * Neither allocates.  The VAE runs on the world's backend like the DiT:
 * the encoder on rank 0's stream, the decoder height-sharded over the
 * ranks (or on rank 0 when the rows do not split), each rank with its own
 * copy of the VAE weights on its device (docs/design/cuda.md, VAE).
 */
#include "lingbot/session-private.h"
#include "lingbot/dit-session.h"
#include "lingbot/image.h"
#include "lingbot/noise.h"
#include "lingbot/scheduler.h"
#include "lingbot/text-encoder.h"
#include "kernels/error.h"
#include "comm/comm-private.h"

#include <string.h>

#define NOISE_INITIAL_FORMAT "output.chunk{chunk}.step0.x_in"
#define NOISE_RENOISE_FORMAT "output.chunk{chunk}.step{step}.renoise"

/* struct _LingbotSession: lingbot/session-private.h */

/**
 * lingbot_session_check_image:
 * @path: a reference image file (LingbotSessionOptions.image_path)
 * @width: (out) (optional): its width in pixels
 * @height: (out) (optional): its height in pixels
 * @error: the errors of lingbot_image_load_jpeg(): %LINGBOT_ERROR_IO for a file
 *   that cannot be read, %LINGBOT_ERROR_FORMAT for one that is not a decodable
 *   JPEG, %LINGBOT_ERROR_UNSUPPORTED (CMYK), %LINGBOT_ERROR_INVALID_ARGUMENT
 *   for more than %LINGBOT_IMAGE_MAX_PIXELS
 *
 * Checks @path as lingbot_session_new() will read it and gives its size
 * (from the header): the header checks, then a decode at the DCT scale
 * 1/8 (lingbot_image_decode_jpeg_reduced()), which reads every
 * coefficient, so a truncated or corrupt file is refused as the session
 * refuses it, at a sixty-fourth of the pixels (an 8192x8192 image costs 3
 * MiB, not 192).  For a caller that refuses an unusable image before it
 * creates a world or a session, or needs the image's size to choose the
 * output size (spec 6.1) first.
 *
 * Returns: %TRUE when @path is an image a session can start from.
 */
gboolean
lingbot_session_check_image (const char *path, int *width, int *height,
    GError ** error)
{
  g_autoptr (GMappedFile) map = NULL;
  g_autoptr (GError) ferr = NULL;
  g_autoptr (LbTensor) rgb = NULL;
  int w = 0, h = 0;

  map = g_mapped_file_new (path, FALSE, &ferr);
  if (map == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s", ferr->message);
    return FALSE;
  }
  const guint8 *data = (const guint8 *) g_mapped_file_get_contents (map);
  gsize length = g_mapped_file_get_length (map);
  if (!lingbot_image_jpeg_get_size (data, length, &w, &h, error) ||
      !(rgb = lingbot_image_decode_jpeg_reduced (data, length, 8, error))) {
    g_prefix_error (error, "%s: ", path);
    return FALSE;
  }
  if (width != NULL)
    *width = w;
  if (height != NULL)
    *height = h;
  return TRUE;
}

/**
 * lingbot_session_check_prompt_embeds:
 * @path: a prompt-embeds file (LingbotSessionOptions.prompt_embeds_path)
 * @width: (out) (optional): its width, the text width of the DiT it was
 *   made for (4096 for the real model; compare lingbot_dit_get_config()'s
 *   text_dim)
 * @error: the errors of lingbot_prompt_embeds_load(): %LINGBOT_ERROR_IO for a
 *   file that cannot be read, %LINGBOT_ERROR_FORMAT for one that is not a
 *   safetensors file ("PATH: not a checkpoint or array file: ..."),
 *   %LINGBOT_ERROR_NOT_FOUND for one without a "prompt_embeds" tensor,
 *   %LINGBOT_ERROR_SHAPE for one whose tensor is not float [n, dim] (or
 *   [1, n, dim]); each message names @path
 *
 * Reads @path as lingbot_session_new() will (lingbot_prompt_embeds_load()):
 * for a caller that refuses an unusable file before it loads a model or
 * creates a session (the session reads it on rank 0, after the model is
 * loaded, and its error then carries the rank).
 *
 * Returns: %TRUE when @path is a prompt-embeds file a session can read.
 */
gboolean
lingbot_session_check_prompt_embeds (const char *path, int *width,
    GError ** error)
{
  LbTensor *ctx = lingbot_prompt_embeds_load (path, 0, 0, error);

  if (ctx == NULL)
    return FALSE;
  if (width != NULL)
    *width = (int) ctx->shape[1];
  lb_tensor_free (ctx);
  return TRUE;
}

/**
 * lingbot_session_output_size:
 * @image_width: the reference image's width in pixels
 * @image_height: its height
 * @pixel_area: the pixel budget (LingbotSessionOptions.pixel_area)
 * @width: (out): the output width, a multiple of 16
 * @height: (out): the output height, a multiple of 16
 * @error: %LINGBOT_ERROR_INVALID_ARGUMENT when a size or the budget is not
 *   positive, or the budget gives an empty size
 *
 * The video size of a session whose LingbotSessionOptions.width and height
 * are 0: spec 6.1 from the image's aspect and the budget
 * (lingbot_image_output_size()).  For a caller that negotiates the size
 * before the session exists (lingbotgen's caps).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_session_output_size (int image_width, int image_height,
    int pixel_area, int *width, int *height, GError ** error)
{
  return lingbot_image_output_size (image_width, image_height,
      (double) pixel_area, width, height, error);
}

/* ------------------------------------------------------------------------ */
/* setup helpers                                                            */
/* ------------------------------------------------------------------------ */

static LbTensor *
load_image_rgb (const LingbotSessionOptions * o, GError ** error)
{
  if (o->image_rgb == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "session: no reference image (set image_path or image_rgb)");
    return NULL;
  }
  int stride = o->image_stride ? o->image_stride : 3 * o->image_width;
  if (o->image_width <= 0 || o->image_height <= 0 ||
      stride < 3 * o->image_width) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "session: image_rgb is %dx%d with stride %d (need a positive size "
        "and stride >= 3 * width)", o->image_width, o->image_height, stride);
    return NULL;
  }
  int64_t shape[3] = { o->image_height, o->image_width, 3 };
  LbTensor *t = lb_tensor_try_new (LB_DTYPE_U8, 3, shape, error);
  if (t == NULL) {
    g_prefix_error (error, "session: image_rgb u8 [%d, %d, 3]: ",
        o->image_height, o->image_width);
    return NULL;
  }
  for (int r = 0; r < o->image_height; r++)
    memcpy ((guint8 *) t->data + (gsize) r * 3 * o->image_width,
        o->image_rgb + (gsize) r * stride, 3 * (gsize) o->image_width);
  return t;
}

static gboolean
resolve_size (LingbotSession * s, const LingbotSessionOptions * o,
    int image_w, int image_h, GError ** error)
{
  if (o->width > 0 || o->height > 0) {
    if (o->width <= 0 || o->height <= 0 || o->width % 16 || o->height % 16) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "session: output size %dx%d: width and height must both be set "
          "and be positive multiples of 16", o->width, o->height);
      return FALSE;
    }
    s->width = o->width;
    s->height = o->height;
  } else {
    if (o->pixel_area <= 0) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "session: pixel_area %d is not positive (or set width and "
          "height)", o->pixel_area);
      return FALSE;
    }
    if (!lingbot_session_output_size (image_w, image_h, o->pixel_area,
            &s->width, &s->height, error))
      return FALSE;
    if (s->width % 16 || s->height % 16) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "session: output size %dx%d is not a multiple of 16", s->width,
          s->height);
      return FALSE;
    }
  }
  s->lat_h = s->height / LINGBOT_VAE_SPATIAL_STRIDE;
  s->lat_w = s->width / LINGBOT_VAE_SPATIAL_STRIDE;
  return TRUE;
}

/* The reference JPEG @o->image_path: its size from the header
 * (@image_w, @image_h), the output size from it (resolve_size()), then
 * the pixels, decoded at the DCT scale lingbot_image_jpeg_scale_for()
 * gives for that output: in full (PIL-exact) up to 4096x4096 pixels,
 * at 1/2, 1/4 or 1/8 above when that still leaves twice the output. */
static LbTensor *
load_image_jpeg (LingbotSession * s, const LingbotSessionOptions * o,
    int *image_w, int *image_h, GError ** error)
{
  g_autoptr (GMappedFile) map = NULL;
  g_autoptr (GError) err = NULL;
  LbTensor *t = NULL;

  map = g_mapped_file_new (o->image_path, FALSE, &err);
  if (map == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "session: cannot use image "
        "%s: %s", o->image_path, err->message);
    return NULL;
  }
  const guint8 *data = (const guint8 *) g_mapped_file_get_contents (map);
  gsize length = g_mapped_file_get_length (map);
  if (lingbot_image_jpeg_get_size (data, length, image_w, image_h, &err)) {
    if (!resolve_size (s, o, *image_w, *image_h, error))
      return NULL;
    t = lingbot_image_decode_jpeg_reduced (data, length,
        lingbot_image_jpeg_scale_for (*image_w, *image_h, s->width,
            s->height), &err);
  }
  if (t == NULL)
    g_set_error (error, LB_ERROR, err->code, "session: cannot use image "
        "%s: %s", o->image_path, err->message);
  return t;
}

/* The chunk count that yields at least @frames video frames (the last
 * chunk may be cut): 1 + 4(C-1) from chunk 0, 4C from every later one. */
static guint
chunks_for_frames (guint frames, int C)
{
  guint first = lingbot_chunk_video_frames (0, (guint) C);
  guint later = lingbot_chunk_video_frames (1, (guint) C);
  if (frames <= first)
    return 1;
  return 1 + (frames - first + later - 1) / later;
}

typedef struct
{
  LingbotSession *s;
  const LingbotSessionOptions *o;
  LbTensor *text;
} PromptJob;

static gboolean
prompt_job (LbRank * rank, gpointer data, GError ** error)
{
  PromptJob *j = data;
  LingbotWorld *w = j->s->world;
  const LingbotDitConfig *cfg = lingbot_dit_get_config (w->dit);
  g_autoptr (LbTensor) ctx = lingbot_prompt_context_new (rank->stream,
      j->o->prompt_embeds_path, j->o->prompt_embeds_path ? NULL : w->t5_path,
      w->tokenizer_path, j->o->prompt, cfg->text_dim, error);
  if (ctx == NULL)
    return FALSE;
  if (ctx->device.type == LB_DEVICE_CPU) {
    j->text = g_steal_pointer (&ctx);
    return TRUE;
  }
  /* the DiT session takes a host context */
  if (!(j->text = lb_tensor_try_new (LB_DTYPE_F32, ctx->ndim, ctx->shape,
              error))) {
    g_prefix_error (error, "session: prompt context: ");
    return FALSE;
  }
  return lb_tensor_download (rank->stream, j->text, ctx, error) &&
      rank->backend->stream_synchronize (rank->stream, error);
}

static LbTensor *
prompt_context (LingbotSession * s, const LingbotSessionOptions * o,
    GError ** error)
{
  PromptJob j = { s, o, NULL };
  if (!lb_worker_group_run_on (s->group, 0, prompt_job, &j, error)) {
    g_clear_pointer (&j.text, lb_tensor_free);
    return NULL;
  }
  return j.text;
}

static gboolean
enc_new_job (LbRank * rank, gpointer data, GError ** error)
{
  LingbotSession *s = data;
  s->enc = lingbot_vae_encoder_new (s->world->vae, rank->stream, s->height,
      s->width, error);
  return s->enc != NULL;
}

static gboolean
dec_new_job (LbRank * rank, gpointer data, GError ** error)
{
  LingbotSession *s = data;
  s->dec = lingbot_vae_decoder_new (s->world->vae, rank->stream, s->lat_h,
      s->lat_w, s->chunk_frames, error);
  return s->dec != NULL;
}

/* The unsharded VAE sessions live on rank 0's stream: freed there. */
static gboolean
enc_free_job (LbRank * rank, gpointer data, GError ** error)
{
  LingbotSession *s = data;
  g_clear_pointer (&s->enc, lingbot_vae_encoder_free);
  return TRUE;
}

static gboolean
dec_free_job (LbRank * rank, gpointer data, GError ** error)
{
  LingbotSession *s = data;
  g_clear_pointer (&s->dec, lingbot_vae_decoder_free);
  return TRUE;
}

/**
 * lingbot_session_free_decoder:
 * @s: a session, world lock held
 *
 * Frees the session's decoder where it lives (an unsharded one on rank
 * 0's thread).
 */
void
lingbot_session_free_decoder (LingbotSession * s)
{
  if (s->dec && !s->dec_sharded)
    lb_worker_group_run_on (s->group, 0, dec_free_job, s, NULL);
  g_clear_pointer (&s->dec, lingbot_vae_decoder_free);
}

static gboolean
setup_vae (LingbotSession * s, GError ** error)
{
  LingbotVae *vae = s->world->vae;
  /* on every backend: the encoder lives on rank 0's stream (its weights,
   * caches and staging on rank 0's device), so it is created and run by
   * rank-0 jobs */
  if (!lb_worker_group_run_on (s->group, 0, enc_new_job, s, error))
    return FALSE;
  if (s->n_ranks > 1) {
    /* each rank decodes its band of latent rows (halo exchange, all-gather
     * for the mid-block attention); falls back to rank 0 when the rows do
     * not split (more ranks than latent rows) */
    GError *err = NULL;
    s->dec = lingbot_vae_decoder_new_sharded (vae, s->group, s->lat_h,
        s->lat_w, s->chunk_frames, &err);
    if (s->dec) {
      s->dec_sharded = TRUE;
      return TRUE;
    }
    g_clear_error (&err);
  }
  return lb_worker_group_run_on (s->group, 0, dec_new_job, s, error);
}

static gboolean
setup_control (LingbotSession * s, const LingbotSessionOptions * o,
    int image_w, int image_h, GError ** error)
{
  LingbotControlConfig cc;
  lingbot_control_config_init (&cc, image_w, image_h, s->width, s->height);
  cc.chunk_size = (guint) s->chunk_frames;
  if (o->poses == NULL) {
    s->control = lingbot_control_new (&cc, error);
    return s->control != NULL;
  }
  /* offline poses (spec 2.9) */
  cc.has_intrinsics = TRUE;
  if (o->intrinsics) {
    memcpy (cc.intrinsics, o->intrinsics, sizeof cc.intrinsics);
    if (o->intrinsics_width > 0 && o->intrinsics_height > 0) {
      cc.intrinsics_width = o->intrinsics_width;
      cc.intrinsics_height = o->intrinsics_height;
    }
  } else {
    /* the image-size default of spec 2.5 */
    cc.intrinsics[0] = cc.intrinsics[1] = (float) image_w;
    cc.intrinsics[2] = (float) ((double) image_w / 2.0);
    cc.intrinsics[3] = (float) ((double) image_h / 2.0);
    cc.intrinsics_width = image_w;
    cc.intrinsics_height = image_h;
  }
  guint frame_num = s->frames;
  if (frame_num == 0) {
    /* the longest 4n+1 the poses cover */
    if (o->n_poses < 1) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "session: poses given with n_poses = 0");
      return FALSE;
    }
    frame_num = 4 * ((o->n_poses - 1) / 4) + 1;
  }
  guint eff = 0;
  if (!lingbot_frame_count_resolve (frame_num, (guint) s->chunk_frames,
          LINGBOT_FRAME_POLICY_TRUNCATE, &eff, NULL, error))
    return FALSE;
  s->control = lingbot_control_new_offline (&cc, o->poses, o->n_poses,
      frame_num, error);
  if (s->control == NULL)
    return FALSE;
  /* the offline path generates whole chunks only (spec 3.1) */
  s->frames = eff;
  return TRUE;
}

static LingbotScheduler *
make_scheduler (const LingbotSessionOptions * o, GError ** error)
{
  if (o->sample_shift == 0.0 && o->timestep_indices == NULL)
    return NULL;
  double shift = o->sample_shift != 0.0 ? o->sample_shift :
      LINGBOT_SCHEDULER_DEFAULT_SHIFT;
  guint def[4] = { 0, 250, 500, 750 };
  guint idx[LINGBOT_DIT_MAX_STEPS];
  const guint *ip = def;
  guint n = 4;
  if (o->timestep_indices) {
    if (o->n_timestep_indices < 1 ||
        o->n_timestep_indices > LINGBOT_DIT_MAX_STEPS) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "session: %d timestep indices, expected 1 to %d",
          o->n_timestep_indices, LINGBOT_DIT_MAX_STEPS);
      return NULL;
    }
    /* the elements' rules: [0, 999], strictly increasing */
    if (!lingbot_check_timestep_indices (o->timestep_indices,
            o->n_timestep_indices, error))
      return NULL;
    for (int i = 0; i < o->n_timestep_indices; i++)
      idx[i] = (guint) o->timestep_indices[i];
    ip = idx;
    n = (guint) o->n_timestep_indices;
  }
  return lingbot_scheduler_new (shift, LINGBOT_SCHEDULER_DEFAULT_TRAIN_STEPS,
      ip, n, error);
}

/* A zeroed f32 [1, c, f, h, w] per-chunk buffer, or NULL with an error
 * that names @what and its bytes. */
static LbTensor *
new5 (const char *what, int64_t c, int64_t f, int64_t h, int64_t w,
    GError ** error)
{
  int64_t shape[5] = { 1, c, f, h, w };
  LbTensor *t = lb_tensor_try_zeros (LB_DTYPE_F32, 5, shape, error);
  if (t == NULL)
    g_prefix_error (error, "session: %s f32 [1, %" G_GINT64_FORMAT ", %"
        G_GINT64_FORMAT ", %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]: ",
        what, c, f, h, w);
  return t;
}

/* The per-chunk buffers, sized by the geometry alone: allocated right
 * after the image and the control, before the costly parts (prompt
 * encoding, DiT and VAE setup), so a session too large for the machine
 * fails early, with the largest (the decoded frames) first. */
static gboolean
alloc_chunk_buffers (LingbotSession * s, const LingbotDitConfig * cfg,
    GError ** error)
{
  const int C = s->chunk_frames;
  int64_t fshape[4] = { 3, 4 * (int64_t) C, s->height, s->width };
  if (!(s->frames_buf = lb_tensor_try_zeros (LB_DTYPE_F32, 4, fshape, error))) {
    g_prefix_error (error, "session: decoded frames f32 [3, %d, %d, %d]: ",
        4 * C, s->height, s->width);
    return FALSE;
  }
  if (!(s->y = new5 ("condition", LINGBOT_VAE_COND_CHANNELS, C, s->lat_h,
              s->lat_w, error)))
    return FALSE;
  /* a device world builds the control tensor on its ranks from the
   * chunk's poses (lingbot_dit_session_run_chunk_noise_poses()); the CPU
   * fills it on the host, the same bytes */
  s->ctl_on_device = s->world->backend->device_type != LB_DEVICE_CPU;
  if (!s->ctl_on_device && !(s->ctl = new5 ("control",
              (int64_t) lingbot_control_get_chunk_n_elements (s->control, 0,
                  s->lat_h) / ((int64_t) C * s->lat_h * s->lat_w), C,
              s->lat_h, s->lat_w, error)))
    return FALSE;
  return (s->latents = new5 ("latents", cfg->out_dim, C, s->lat_h, s->lat_w,
          error)) != NULL;
}

/* ------------------------------------------------------------------------ */
/* public                                                                   */
/* ------------------------------------------------------------------------ */

/* session->start_frames: session->image seen as one frame, [3, 1, H, W] */
static void
init_start_frames (LingbotSession * s)
{
  int64_t shape[4] = { 3, 1, s->height, s->width };
  int64_t stride[4] = { s->image->stride[0], 0, s->image->stride[1],
    s->image->stride[2]
  };

  lb_tensor_view_init (&s->start_frames, LB_DTYPE_F32, s->image->data,
      LB_DEVICE_HOST, 4, shape, stride);
}

/**
 * lingbot_session_new:
 * @world: the world (a reference is taken)
 * @options: the session's inputs and settings (#LingbotSessionOptions)
 * @error: %LINGBOT_ERROR_INVALID_ARGUMENT (no image, a size that is not a
 *   multiple of 16, a prompt without a text encoder or embeddings, bad
 *   frame counts or schedule), %LINGBOT_ERROR_FORMAT (image not decodable),
 *   %LINGBOT_ERROR_IO / %LINGBOT_ERROR_NOT_FOUND (files), %LINGBOT_ERROR_DEVICE
 *   when a buffer sized by the image or the output size cannot be allocated
 *   (the message names the buffer and its bytes: "session: decoded frames f32
 *   [3, 16, 2048, 2048]: cannot allocate 805306368 bytes of host memory";
 *   nothing aborts, the process and its other sessions go on), and the
 *   errors of the parts (text encoder, VAE, DiT session, control, noise)
 *
 * Creates a generation session: computes the output size (explicit, or
 * spec 6.1 from the image size and @options->pixel_area), preprocesses the
 * image (spec 6.2), computes the prompt context once (the embeddings file,
 * else the world's umT5 encoder, loaded, run on rank 0 and freed), and
 * creates the condition encoder, the control session (keyboard, with the
 * image-size intrinsics of spec 2.5, or the offline @options->poses), the
 * DiT session on the world's ranks, the noise source (Philox keyed by
 * @options->seed, or @options->noise_path holding the golden fixture names
 * `output.chunk{chunk}.step0.x_in` / `output.chunk{chunk}.step{step}.renoise`),
 * the VAE decoder (height-sharded over the ranks when there are several)
 * and every per-chunk buffer.
 *
 * @options->frames bounds the session: chunks are generated until that
 * many video frames are produced (13 from chunk 0, then 16 per chunk for
 * C = 4; 77 gives 5 chunks as in spec 3.1), and lingbot_session_decode()
 * cuts the last chunk's frames to the exact count.  With offline poses the
 * count is resolved as in spec 3.1 (4n+1, whole chunks).  0 means
 * unbounded (live; offline: as many frames as the poses cover).
 *
 * Sessions of one world share its ranks: run one at a time.
 *
 * Returns: (transfer full) (nullable): the session.
 */
LingbotSession *
lingbot_session_new (LingbotWorld * world,
    const LingbotSessionOptions * options, GError ** error)
{
  g_return_val_if_fail (world != NULL && options != NULL, NULL);
  const LingbotSessionOptions *o = options;
  LingbotSession *s = g_new0 (LingbotSession, 1);
  s->world = lingbot_world_ref (world);
  s->y_chunk = G_MAXUINT64;
  g_mutex_init (&s->cancel_lock);
  lingbot_session_handoff_init (s, NULL);
  s->group = world->group;
  g_rec_mutex_lock (&world->lock);
  s->n_ranks = world->n_ranks;
  const LingbotDitConfig *cfg = lingbot_dit_get_config (world->dit);
  s->chunk_frames = o->chunk_frames > 0 ? o->chunk_frames : cfg->chunk_frames;
  s->frames = o->frames;
  g_autoptr (LbTensor) rgb = NULL;
  g_autoptr (LbTensor) text = NULL;
  g_autoptr (LingbotScheduler) sched = NULL;

  if (o->prompt_embeds_path == NULL && world->t5_path == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "session: %s needs the text encoder, but the world has none "
        "(load_text_encoder) and no prompt_embeds_path is set",
        o->prompt ? "a text prompt" : "a session without prompt embeddings");
    goto fail;
  }
  if (o->frames > 0 && (o->frames - 1) % 4 != 0 && o->poses) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "session: frames must be 4n+1 with offline poses, got %u", o->frames);
    goto fail;
  }

  if (o->sample_shift < 0.0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "session: sample_shift %g is negative", o->sample_shift);
    goto fail;
  }
  if (o->max_attention_size < 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "session: max_attention_size %d is negative (tokens; 0 = the "
        "model's)", o->max_attention_size);
    goto fail;
  }

  /* image and output size */
  int image_w = 0, image_h = 0;
  if (o->image_path) {
    if (!(rgb = load_image_jpeg (s, o, &image_w, &image_h, error)))
      goto fail;
  } else {
    if (!(rgb = load_image_rgb (o, error)))
      goto fail;
    image_w = (int) rgb->shape[1];
    image_h = (int) rgb->shape[0];
    if (!resolve_size (s, o, image_w, image_h, error))
      goto fail;
  }
  if (!(s->image = lingbot_image_preprocess (rgb, s->width, s->height, error)))
    goto fail;
  init_start_frames (s);

  /* control first: it resolves the offline frame count */
  if (!setup_control (s, o, image_w, image_h, error))
    goto fail;
  s->n_chunks = s->frames ? chunks_for_frames (s->frames, s->chunk_frames)
      : 0;
  if (!alloc_chunk_buffers (s, cfg, error))
    goto fail;

  /* the prompt context, once */
  if (!(text = prompt_context (s, o, error)))
    goto fail;

  /* DiT session */
  if (!(sched = make_scheduler (o, error)) &&
      (o->sample_shift != 0.0 || o->timestep_indices))
    goto fail;
  LingbotDitSessionOptions dso = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  dso.latent_h = s->lat_h;
  dso.latent_w = s->lat_w;
  dso.chunk_frames = s->chunk_frames;
  dso.local_attn_frames = o->local_attn_frames;
  dso.sink_frames = o->sink_frames;
  dso.max_attention_size = o->max_attention_size;
  dso.max_frames = (int64_t) s->n_chunks * s->chunk_frames;
  dso.scheduler = sched;
  dso.math = world->math;       /* LingbotWorldOptions.precision */
  int window = o->local_attn_frames ? o->local_attn_frames :
      cfg->local_attn_frames;
  if (window < 0 && s->n_chunks == 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "session: a global KV cache (local_attn_frames -1) needs a bounded "
        "session (set frames)");
    goto fail;
  }
  if (!(s->dit = lingbot_dit_session_new (world->dit, s->group, &dso, text,
              error)))
    goto fail;
  g_clear_pointer (&text, lb_tensor_free);

  /* noise */
  if (o->noise_path) {
    if (!(s->noise = lingbot_noise_new_from_file (o->noise_path,
                NOISE_INITIAL_FORMAT, NOISE_RENOISE_FORMAT, error)))
      goto fail;
  } else {
    s->noise = lingbot_noise_new_philox (o->seed);
  }

  /* VAE encoder + decoder */
  if (!setup_vae (s, error))
    goto fail;

  g_rec_mutex_unlock (&world->lock);
  return s;

fail:
  g_rec_mutex_unlock (&world->lock);
  lingbot_session_free (s);
  return NULL;
}

/**
 * lingbot_session_free:
 * @session: (transfer full) (nullable): a session
 *
 * Frees the session's state on every rank and drops its world reference.
 */
void
lingbot_session_free (LingbotSession * session)
{
  if (session == NULL)
    return;
  lingbot_session_set_cancellable (session, NULL);
  lingbot_session_set_failure_func (session, NULL, NULL, NULL);
  if (lingbot_world_is_broken (session->world))
    /* a rank stopped answering and was abandoned: what it may still use
     * (the session's rank state and tensors, the world) is leaked on
     * purpose, never freed under it */
    return;
  g_rec_mutex_lock (&session->world->lock);
  /* cleared: lingbot_session_handoff_clear() below reads session->dit */
  g_clear_pointer (&session->dit, lingbot_dit_session_free);
  /* the encoder and an unsharded decoder live on rank 0's stream: freed
   * by a rank-0 job (a sharded decoder frees each rank's state on its
   * thread itself); directly when the group cannot run jobs any more */
  if (session->enc)
    lb_worker_group_run_on (session->group, 0, enc_free_job, session, NULL);
  /* a DiT rank may wait for a slot: the channel is cancelled first */
  if (session->channel)
    lb_channel_cancel (session->channel);
  lingbot_session_free_decoder (session);
  g_clear_pointer (&session->enc, lingbot_vae_encoder_free);
  g_rec_mutex_unlock (&session->world->lock);
  if (session->entries)
    lingbot_session_handoff_clear (session);
  lingbot_control_free (session->control);
  lingbot_noise_free (session->noise);
  lb_tensor_free (session->image);
  lb_tensor_free (session->y);
  lb_tensor_free (session->ctl);
  lb_tensor_free (session->latents);
  lb_tensor_free (session->frames_buf);
  if (session->pass_notify)
    session->pass_notify (session->pass_data);
  if (session->restart_notify)
    session->restart_notify (session->restart_data);
  g_clear_error (&session->cond_cancelled);
  g_mutex_clear (&session->cancel_lock);
  lingbot_world_unref (session->world);
  g_free (session);
}

/**
 * lingbot_session_get_width:
 * @session: a session
 *
 * Returns: the output width W in pixels (a multiple of 16): the frames'
 * width, 8 x lingbot_session_get_latent_width().
 */
int
lingbot_session_get_width (LingbotSession * session)
{
  return session->width;
}

/**
 * lingbot_session_get_height:
 * @session: a session
 *
 * Returns: the output height H in pixels (a multiple of 16): the frames'
 * height, 8 x lingbot_session_get_latent_height().
 */
int
lingbot_session_get_height (LingbotSession * session)
{
  return session->height;
}

/**
 * lingbot_session_get_latent_height:
 * @session: a session
 *
 * Returns: latent rows h = H / 8.
 */
int
lingbot_session_get_latent_height (LingbotSession * session)
{
  return session->lat_h;
}

/**
 * lingbot_session_get_latent_width:
 * @session: a session
 *
 * Returns: latent columns w = W / 8.
 */
int
lingbot_session_get_latent_width (LingbotSession * session)
{
  return session->lat_w;
}

/**
 * lingbot_session_get_chunk_frames:
 * @session: a session
 *
 * Returns: latent frames per chunk C (4 for the release).
 */
int
lingbot_session_get_chunk_frames (LingbotSession * session)
{
  return session->chunk_frames;
}

/**
 * lingbot_session_get_chunk_index:
 * @session: a session
 *
 * Returns: the index of the next chunk lingbot_session_generate() makes
 * (chunks generated so far).
 */
guint64
lingbot_session_get_chunk_index (LingbotSession * session)
{
  return session->chunk;
}

/**
 * lingbot_session_get_n_chunks:
 * @session: a session
 *
 * Returns: the chunks the session generates in all, 0 when unbounded.
 */
guint
lingbot_session_get_n_chunks (LingbotSession * session)
{
  return session->n_chunks;
}

/**
 * lingbot_session_get_n_frames:
 * @session: a session
 *
 * Returns: the video frames the session delivers in all (offline: as
 * resolved from the poses), 0 when unbounded.
 */
guint
lingbot_session_get_n_frames (LingbotSession * session)
{
  return session->frames;
}

/**
 * lingbot_session_is_done:
 * @session: a session
 *
 * Returns: %TRUE once a bounded session has generated its last chunk.
 */
gboolean
lingbot_session_is_done (LingbotSession * session)
{
  return session->n_chunks > 0 && session->chunk >= session->n_chunks;
}

/**
 * lingbot_session_get_decode_ranks:
 * @session: a session
 *
 * Returns: the ranks the VAE decode runs on: the world's rank count when
 * the decode is height-sharded, 1 when it runs on rank 0 alone.
 */
int
lingbot_session_get_decode_ranks (LingbotSession * session)
{
  return lingbot_vae_decoder_get_n_ranks (session->dec);
}

/**
 * lingbot_session_get_control:
 * @session: a session
 *
 * Returns: (transfer none): the control session (live: it integrates the
 * key set given to lingbot_session_generate(), lingbot_control_reset_pose()
 * resets its pose; offline it replays the poses).
 */
LingbotControl *
lingbot_session_get_control (LingbotSession * session)
{
  return session->control;
}

/**
 * lingbot_session_get_frame_count:
 * @session: a session
 * @chunk_index: a chunk of the session
 *
 * Returns: the video frames chunk @chunk_index yields after decoding: 13
 * for chunk 0 and 16 after (C = 4), the last chunk of a bounded session
 * cut to the requested count; 0 past the end.
 */
int
lingbot_session_get_frame_count (LingbotSession * session, guint64 chunk_index)
{
  const guint C = (guint) session->chunk_frames;
  guint n = lingbot_chunk_video_frames (chunk_index == 0 ? 0 : 1, C);
  if (session->frames == 0)
    return (int) n;
  guint64 before = chunk_index == 0 ? 0 :
      lingbot_chunk_video_frames (0, C) +
      (chunk_index - 1) * (guint64) lingbot_chunk_video_frames (1, C);
  if (before >= session->frames)
    return 0;
  return (int) MIN ((guint64) n, session->frames - before);
}

/**
 * lingbot_session_get_latents:
 * @session: a session
 *
 * Returns: (transfer none): the denoised latents (f32 [1, 16, C, h, w])
 * of the last successful lingbot_session_generate(), overwritten by the
 * next (a cancelled one leaves them); for lingbot_session_decode().
 */
const LingbotLatents *
lingbot_session_get_latents (LingbotSession * session)
{
  return lingbot_latents_from_tensor (session->latents);
}

static gboolean
dec_job (LbRank * rank, gpointer data, GError ** error)
{
  LingbotSession *s = data;
  return lingbot_vae_decoder_decode (s->dec, s->job_latents, s->frames_buf,
      &s->job_n_frames, error);
}

/**
 * lingbot_session_decode_latents:
 * @s: a session
 * @latents: host f32 [1, 16, C, h, w] of the next chunk to decode
 * @n: (out): the frames the decoder made (before
 *   lingbot_session_count_frames())
 * @error: decoder errors
 *
 * The decode of host latents: on the attached decoder's ranks, or serial
 * on the DiT ranks under the world lock.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_session_decode_latents (LingbotSession * s, const LbTensor * latents,
    int *n, GError ** error)
{
  gboolean ok;

  lingbot_session_arm_frames (s);
  if (s->dec_group) {
    ok = lingbot_vae_decoder_decode (s->dec, latents, s->frames_buf, n, error);
  } else {
    g_rec_mutex_lock (&s->world->lock);
    s->job_latents = latents;
    if (s->dec_sharded)
      ok = lingbot_vae_decoder_decode (s->dec, latents, s->frames_buf,
          &s->job_n_frames, error);
    else
      ok = lb_worker_group_run_on (s->group, 0, dec_job, s, error);
    s->job_latents = NULL;
    *n = s->job_n_frames;
    g_rec_mutex_unlock (&s->world->lock);
  }
  return ok && lingbot_session_count_frames (s, n);
}

/* the decoder's frames function: the session's, cut to what a bounded
 * session still delivers (the last chunk's, lingbot_session_count_frames()) */
static void
session_frames (int first, int n, gpointer data)
{
  LingbotSession *s = data;

  if (s->frames > 0) {
    guint64 left = s->frames - MIN (s->frames, s->frames_out);

    if ((guint64) first >= left)
      return;
    n = (int) MIN ((guint64) n, left - (guint64) first);
  }
  s->frames_func (lingbot_frames_from_tensor (s->frames_buf), first, n,
      s->frames_data);
}

/**
 * lingbot_session_arm_frames:
 * @s: a session
 *
 * Hands the session's frames function (or none) to its decoder: called
 * before each decode, on the thread that starts it.
 */
void
lingbot_session_arm_frames (LingbotSession * s)
{
  if (s->dec != NULL)
    lingbot_vae_decoder_set_frames_func (s->dec,
        s->frames_func ? session_frames : NULL, s);
}

/**
 * lingbot_session_set_frames_func:
 * @session: a session, not decoding (call it before or between decodes,
 *   from the thread that decodes)
 * @func: (nullable): called as the frames of a decode become final
 *   (#LingbotFramesFunc); %NULL (the default) unsets
 * @user_data: passed to @func; the caller keeps it alive while set
 *
 * Frames of lingbot_session_decode() and lingbot_session_decode_chunk()
 * handed on as they are made: frame 0 of a chunk is final after about a
 * quarter of its decode (the first of its 4 latent frames), so a live
 * player can show it then instead of after the whole chunk.  @func gets
 * lingbot_session_get_frames() and the range [first, first + n) now final:
 * (0, 1), (1, 4), (5, 4), (9, 4) for the first chunk, (0, 4), (4, 4),
 * (8, 4), (12, 4) after; a bounded session's last chunk only up to the
 * frames it delivers.  The frames are the same bytes as without it.  On
 * device ranks each latent frame's rows are downloaded and the rank's
 * stream synchronised before @func runs (4 host waits per chunk instead
 * of 1); sharded, every rank waits for the others once per latent frame.
 * A decode that fails has handed on only frames that were final.
 */
void
lingbot_session_set_frames_func (LingbotSession * session,
    LingbotFramesFunc func, gpointer user_data)
{
  g_return_if_fail (session != NULL);
  session->frames_func = func;
  session->frames_data = user_data;
}

/**
 * lingbot_session_count_frames:
 * @s: a session
 * @n: (inout): frames a decode made; cut to what a bounded session still
 *   delivers
 *
 * Returns: %TRUE.
 */
gboolean
lingbot_session_count_frames (LingbotSession * s, int *n)
{
  if (s->frames > 0)
    *n = (int) MIN ((guint64) * n, s->frames - MIN (s->frames, s->frames_out));
  s->frames_out += (guint) * n;
  return TRUE;
}

/**
 * lingbot_session_report_decode:
 * @chunk: the chunk decoded
 * @n: the frames it made
 * @t0: monotonic time the decode started
 * @t1: monotonic time it ended
 * @n_frames: (out) (optional): set to @n
 * @stats: (inout) (optional): index, frames, vae_seconds and the decode
 *   times set, vae_seconds added to compute_seconds
 *
 * What lingbot_session_decode() and lingbot_session_decode_chunk() hand
 * back after a decode.
 */
void
lingbot_session_report_decode (guint64 chunk, int n, gint64 t0, gint64 t1,
    int *n_frames, LingbotChunkStats * stats)
{
  if (n_frames)
    *n_frames = n;
  if (stats) {
    double sec = (double) (t1 - t0) / G_USEC_PER_SEC;
    stats->index = chunk;
    stats->frames = n;
    stats->vae_seconds = sec;
    stats->compute_seconds += sec;
    stats->decode_start_us = t0;
    stats->decode_end_us = t1;
  }
}

/**
 * lingbot_session_decode:
 * @session: a session
 * @latents: (nullable): f32 [1, 16, C, h, w] (or [16, C, h, w]) host
 *   latents of the session's next undecoded chunk, in order;
 *   %NULL decodes that chunk from where the session holds it
 *   (lingbot_session_decode_chunk())
 * @n_frames: (out) (optional): the video frames of the chunk now in
 *   lingbot_session_get_frames() (13 for the first chunk, 16 after; the
 *   last chunk of a bounded session cut to the requested count, 0 when the
 *   session already delivered every frame)
 * @stats: (inout) (optional): vae_seconds is set and added to
 *   compute_seconds (pass the struct lingbot_session_generate() filled to
 *   get the chunk's total); index and frames are set to the decoded chunk
 * @error: %LINGBOT_ERROR_SHAPE for latents of the wrong shape, decoder errors
 *
 * Decodes one chunk with the session's streaming VAE decoder (its causal
 * caches continue from the previous chunk).  Not cancellable: the
 * session's cancellable (lingbot_session_set_cancellable()) stops only
 * lingbot_session_generate(); a decode runs to its end.  With several
 * ranks every rank decodes its band of rows on its own stream and device
 * (lingbot_vae_decoder_new_sharded()); the frames are host memory.  With
 * @latents given, the session's own copy of that chunk is released.
 * Allocates nothing.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_session_decode (LingbotSession * session,
    const LingbotLatents * lat, int *n_frames, LingbotChunkStats * stats,
    GError ** error)
{
  const LbTensor *latents = lingbot_latents_tensor (lat);
  LingbotSession *s = session;
  g_return_val_if_fail (s != NULL, FALSE);
  if (latents == NULL)
    return lingbot_session_decode_chunk (s, s->decoded, n_frames, stats, error);
  const guint64 chunk = s->decoded;
  gint64 t0 = g_get_monotonic_time ();
  int n = 0;
  if (!lingbot_session_decode_latents (s, latents, &n, error))
    return FALSE;
  gint64 t1 = g_get_monotonic_time ();
  g_mutex_lock (&s->dlock);
  s->decoded = chunk + 1;
  g_mutex_unlock (&s->dlock);
  /* the bytes were the caller's: the session's copy is not needed */
  lingbot_session_release_chunk (s, chunk);
  lingbot_session_report_decode (chunk, n, t0, t1, n_frames, stats);
  return TRUE;
}

/**
 * lingbot_session_get_start_frames:
 * @session: a session
 *
 * The session's start image exactly as its conditioning sees it (spec
 * 6.2: normalised to [-1, 1], bicubic-resized to the output size), shaped
 * like decoded frames: lingbot_frames_to_rgb() (frame 0) gives the
 * still a preview shows, floor((x + 1) * 127.5) clipped to [0, 255] as for
 * a decoded frame (the bicubic overshoot beyond [-1, 1] is clipped there,
 * not before).  Valid, and constant, for the session's lifetime; read-only.
 *
 * Returns: (transfer none): one frame (f32 [3, 1, H, W]), H x W the
 *   session's output size (lingbot_session_get_height(),
 *   lingbot_session_get_width()).
 */
const LingbotFrames *
lingbot_session_get_start_frames (LingbotSession * session)
{
  return lingbot_frames_from_tensor (&session->start_frames);
}

/**
 * lingbot_session_get_frames:
 * @session: a session
 *
 * Returns: (transfer none): frames (f32 [3, 4C, H, W] in [-1, 1]) whose
 * first n (lingbot_session_decode()) are the last decoded chunk;
 * overwritten by the next decode.  lingbot_frames_to_rgb(),
 * lingbot_frames_to_rgba(), lingbot_frames_to_i420() and
 * lingbot_frames_to_nv12() convert a frame.
 */
const LingbotFrames *
lingbot_session_get_frames (LingbotSession * session)
{
  return lingbot_frames_from_tensor (session->frames_buf);
}

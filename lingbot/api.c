/* lingbot-gst: the public handles of lingbot.h over the engine's types:
 * the error domain, frames, latents, the world's model figures and its
 * standalone decoder
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot.h shows no engine type: #LingbotFrames and #LingbotLatents are
 * the engine's host tensors (lingbot-private.h), #LingbotDecoder a sharded
 * VAE decoder on the world's worker group with its frame buffer.  The
 * public enums are the engine's, value for value (checked here).
 */
#include "lingbot/lingbot-private.h"

#include <string.h>

G_STATIC_ASSERT ((int) LINGBOT_ERROR_INVALID_ARGUMENT ==
    LB_ERROR_INVALID_ARGUMENT);
G_STATIC_ASSERT ((int) LINGBOT_ERROR_SHAPE == LB_ERROR_SHAPE);
G_STATIC_ASSERT ((int) LINGBOT_ERROR_IO == LB_ERROR_IO);
G_STATIC_ASSERT ((int) LINGBOT_ERROR_FORMAT == LB_ERROR_FORMAT);
G_STATIC_ASSERT ((int) LINGBOT_ERROR_NOT_FOUND == LB_ERROR_NOT_FOUND);
G_STATIC_ASSERT ((int) LINGBOT_ERROR_UNSUPPORTED == LB_ERROR_UNSUPPORTED);
G_STATIC_ASSERT ((int) LINGBOT_ERROR_DEVICE == LB_ERROR_DEVICE);
G_STATIC_ASSERT ((int) LINGBOT_ERROR_CANCELLED == LB_ERROR_CANCELLED);
G_STATIC_ASSERT ((int) LINGBOT_ERROR_TIMEOUT == LB_ERROR_TIMEOUT);
G_STATIC_ASSERT ((int) LINGBOT_ERROR_RANK_FAILED == LB_ERROR_RANK_FAILED);
G_STATIC_ASSERT ((int) LINGBOT_PRECISION_FP32 == LB_MATH_FP32);
G_STATIC_ASSERT ((int) LINGBOT_PRECISION_BF16 == LB_MATH_BF16);
G_STATIC_ASSERT ((int) LINGBOT_PRECISION_FP8 == LB_MATH_FP8);
G_STATIC_ASSERT (LINGBOT_LATENT_CHANNELS == LINGBOT_VAE_Z_DIM);
G_STATIC_ASSERT (LINGBOT_LATENT_STRIDE == LINGBOT_VAE_SPATIAL_STRIDE);

/**
 * lingbot_error_quark:
 *
 * The quark of %LINGBOT_ERROR: the library's one error domain, the quark
 * the engine's layers set their errors in (so LINGBOT_ERROR_X matches an
 * error whatever layer set it).
 *
 * Returns: the quark.
 */
GQuark
lingbot_error_quark (void)
{
  return lb_error_quark ();
}

/* ---- frames ---- */

/**
 * lingbot_frames_get_count:
 * @frames: decoded frames
 *
 * The frames @frames can hold: the decode that filled it says how many of
 * them, from the first, are the chunk's (lingbot_session_decode(),
 * lingbot_decoder_decode(): n_frames); a session's start frames hold one.
 *
 * Returns: the capacity in frames.
 */
int
lingbot_frames_get_count (const LingbotFrames * frames)
{
  g_return_val_if_fail (frames != NULL, 0);
  return (int) frames->t.shape[1];
}

/**
 * lingbot_frames_get_width:
 * @frames: decoded frames
 *
 * Returns: the frame width in pixels.
 */
int
lingbot_frames_get_width (const LingbotFrames * frames)
{
  g_return_val_if_fail (frames != NULL, 0);
  return (int) frames->t.shape[3];
}

/**
 * lingbot_frames_get_height:
 * @frames: decoded frames
 *
 * Returns: the frame height in pixels.
 */
int
lingbot_frames_get_height (const LingbotFrames * frames)
{
  g_return_val_if_fail (frames != NULL, 0);
  return (int) frames->t.shape[2];
}

/**
 * lingbot_frames_to_rgb:
 * @frames: decoded frames
 * @frame: which frame, 0 <= @frame < lingbot_frames_get_count()
 * @dst: height rows of width packed R, G, B bytes (GStreamer RGB)
 * @dst_stride: bytes between the rows of @dst (>= 3 width)
 * @error: %LINGBOT_ERROR_SHAPE for a frame out of range or a stride too
 *   small
 *
 * Converts one frame to 8-bit RGB: each value v (nominally in [-1, 1])
 * becomes (v + 1) * 127.5 in float32, clamped to [0, 255] and truncated
 * (floor, not rounded; NaN gives 0), byte-exact with the reference's
 * uint8 frames.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_frames_to_rgb (const LingbotFrames * frames, int frame, guint8 * dst,
    gsize dst_stride, GError ** error)
{
  g_return_val_if_fail (frames != NULL, FALSE);
  return lingbot_vae_frames_to_rgb8 (&frames->t, frame, dst, dst_stride, error);
}

/**
 * lingbot_frames_to_rgba:
 * @frames: decoded frames
 * @frame: which frame, 0 <= @frame < lingbot_frames_get_count()
 * @dst: height rows of width packed R, G, B, A bytes (GStreamer RGBA)
 * @dst_stride: bytes between the rows of @dst (>= 4 width)
 * @error: %LINGBOT_ERROR_SHAPE as lingbot_frames_to_rgb()
 *
 * lingbot_frames_to_rgb() with an opaque alpha byte (255) after each
 * pixel.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_frames_to_rgba (const LingbotFrames * frames, int frame, guint8 * dst,
    gsize dst_stride, GError ** error)
{
  g_return_val_if_fail (frames != NULL, FALSE);
  return lingbot_vae_frames_to_rgba (&frames->t, frame, dst, dst_stride, error);
}

/**
 * lingbot_frames_to_i420:
 * @frames: decoded frames, width and height even
 * @frame: which frame, 0 <= @frame < lingbot_frames_get_count()
 * @y: height rows of width luma bytes
 * @y_stride: bytes between the rows of @y (>= width)
 * @u: height / 2 rows of width / 2 Cb bytes
 * @u_stride: bytes between the rows of @u (>= width / 2)
 * @v: height / 2 rows of width / 2 Cr bytes
 * @v_stride: bytes between the rows of @v (>= width / 2)
 * @error: %LINGBOT_ERROR_SHAPE as lingbot_frames_to_rgb() (a frame out of
 *   range, a stride too small), also for an odd width or height
 *
 * Converts one frame to planar I420: the RGB bytes of
 * lingbot_frames_to_rgb() through BT.601 limited-range integer
 * coefficients, chroma from the rounded mean of each 2x2 block's RGB.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_frames_to_i420 (const LingbotFrames * frames, int frame, guint8 * y,
    gsize y_stride, guint8 * u, gsize u_stride, guint8 * v, gsize v_stride,
    GError ** error)
{
  g_return_val_if_fail (frames != NULL, FALSE);
  return lingbot_vae_frames_to_i420 (&frames->t, frame, y, y_stride, u,
      u_stride, v, v_stride, error);
}

/**
 * lingbot_frames_to_nv12:
 * @frames: decoded frames, width and height even
 * @frame: which frame, 0 <= @frame < lingbot_frames_get_count()
 * @y: height rows of width luma bytes
 * @y_stride: bytes between the rows of @y (>= width)
 * @uv: height / 2 rows of width / 2 interleaved Cb, Cr pairs
 * @uv_stride: bytes between the rows of @uv (>= width)
 * @error: %LINGBOT_ERROR_SHAPE as lingbot_frames_to_i420()
 *
 * The bytes of lingbot_frames_to_i420() with the chroma planes
 * interleaved (NV12).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_frames_to_nv12 (const LingbotFrames * frames, int frame, guint8 * y,
    gsize y_stride, guint8 * uv, gsize uv_stride, GError ** error)
{
  g_return_val_if_fail (frames != NULL, FALSE);
  return lingbot_vae_frames_to_nv12 (&frames->t, frame, y, y_stride, uv,
      uv_stride, error);
}

/* ---- latents ---- */

/**
 * lingbot_latents_new_wrapped:
 * @data: (array length=size) (element-type guint8): host float32 latents
 *   [16, @n_frames, @height, @width], contiguous (a latent buffer of
 *   lingbotgen, video/x-lingbot-latents)
 * @size: the bytes at @data: 4 x 16 x @n_frames x @height x @width
 * @n_frames: latent frames (the chunk size, 4 for the release model)
 * @height: latent rows (the frame height / %LINGBOT_LATENT_STRIDE)
 * @width: latent columns
 * @error: %LINGBOT_ERROR_INVALID_ARGUMENT for a size that is not positive,
 *   %LINGBOT_ERROR_SHAPE when @size does not match the shape
 *
 * Wraps the caller's bytes as latents for lingbot_session_decode() or
 * lingbot_decoder_decode(), without a copy: @data must stay valid and
 * unchanged until the handle is freed.
 *
 * Returns: (transfer full) (nullable): the handle, freed with
 * lingbot_latents_free().
 */
LingbotLatents *
lingbot_latents_new_wrapped (gconstpointer data, gsize size, int n_frames,
    int height, int width, GError ** error)
{
  LingbotLatents *l;
  int64_t shape[4], stride[4];
  guint64 expected;

  if (data == NULL || n_frames <= 0 || height <= 0 || width <= 0) {
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_INVALID_ARGUMENT,
        "latents: %d frames of %dx%d%s", n_frames, width, height,
        data == NULL ? " without data" : "");
    return NULL;
  }
  expected = (guint64) LINGBOT_LATENT_CHANNELS *(guint64) n_frames *
      (guint64) height *(guint64) width *sizeof (float);
  if (size != expected) {
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_SHAPE,
        "latents: %" G_GSIZE_FORMAT " bytes, expected %" G_GUINT64_FORMAT
        " (f32 [16, %d, %d, %d])", size, expected, n_frames, height, width);
    return NULL;
  }
  shape[0] = LINGBOT_LATENT_CHANNELS;
  shape[1] = n_frames;
  shape[2] = height;
  shape[3] = width;
  lb_contiguous_strides (4, shape, stride);
  l = g_new0 (LingbotLatents, 1);
  lb_tensor_view_init (&l->t, LB_DTYPE_F32, (gpointer) data, LB_DEVICE_HOST,
      4, shape, stride);
  return l;
}

/**
 * lingbot_latents_free:
 * @latents: (nullable): latents made by lingbot_latents_new_wrapped() (not
 *   the session's, lingbot_session_get_latents())
 *
 * Frees the handle; the wrapped bytes stay the caller's.
 */
void
lingbot_latents_free (LingbotLatents * latents)
{
  g_free (latents);
}

/**
 * lingbot_latents_get_n_frames:
 * @latents: latents
 *
 * Returns: the latent frames.
 */
int
lingbot_latents_get_n_frames (const LingbotLatents * latents)
{
  g_return_val_if_fail (latents != NULL, 0);
  return (int) latents->t.shape[latents->t.ndim - 3];
}

/**
 * lingbot_latents_get_height:
 * @latents: latents
 *
 * Returns: the latent rows.
 */
int
lingbot_latents_get_height (const LingbotLatents * latents)
{
  g_return_val_if_fail (latents != NULL, 0);
  return (int) latents->t.shape[latents->t.ndim - 2];
}

/**
 * lingbot_latents_get_width:
 * @latents: latents
 *
 * Returns: the latent columns.
 */
int
lingbot_latents_get_width (const LingbotLatents * latents)
{
  g_return_val_if_fail (latents != NULL, 0);
  return (int) latents->t.shape[latents->t.ndim - 1];
}

/* ---- the world's model ---- */

/**
 * lingbot_world_has_dit:
 * @world: a world
 *
 * Returns: whether the world loaded a DiT (it can generate).
 */
gboolean
lingbot_world_has_dit (LingbotWorld * world)
{
  return world->dit != NULL;
}

/**
 * lingbot_world_has_vae:
 * @world: a world
 *
 * Returns: whether the world loaded a VAE (it can decode).
 */
gboolean
lingbot_world_has_vae (LingbotWorld * world)
{
  return world->vae != NULL;
}

/**
 * lingbot_world_get_chunk_frames:
 * @world: a world
 *
 * Returns: the model's latent frames per chunk (config.json, 4 for the
 * release), 0 without a DiT.
 */
int
lingbot_world_get_chunk_frames (LingbotWorld * world)
{
  return world->dit ? lingbot_dit_get_config (world->dit)->chunk_frames : 0;
}

/**
 * lingbot_world_get_text_dim:
 * @world: a world
 *
 * Returns: the width of the prompt embeddings the DiT takes (4096 for
 * umT5-XXL), 0 without a DiT.
 */
int
lingbot_world_get_text_dim (LingbotWorld * world)
{
  return world->dit ? lingbot_dit_get_config (world->dit)->text_dim : 0;
}

/* ---- the world's standalone decoder ---- */

struct _LingbotDecoder
{
  LingbotWorld *world;
  LingbotVaeDecoder *dec;
  int latent_height, latent_width;
  LbTensor *frames;             /* f32 [3, 4 C, 8 h, 8 w] host */
  LingbotFramesFunc frames_func;        /* lingbot_decoder_set_frames_func() */
  gpointer frames_data;
};

static void
decoder_frames (int first, int n, gpointer data)
{
  LingbotDecoder *d = data;

  d->frames_func (lingbot_frames_from_tensor (d->frames), first, n,
      d->frames_data);
}

/**
 * lingbot_decoder_set_frames_func:
 * @decoder: a decoder, not decoding
 * @func: (nullable): called as the frames of a decode become final
 *   (#LingbotFramesFunc), %NULL (the default) unsets
 * @user_data: passed to @func; the caller keeps it alive while set
 *
 * As lingbot_session_set_frames_func(), for lingbot_decoder_decode():
 * @func gets lingbot_decoder_get_frames() and the frames of each latent
 * frame as soon as they are final.
 */
void
lingbot_decoder_set_frames_func (LingbotDecoder * decoder,
    LingbotFramesFunc func, gpointer user_data)
{
  g_return_if_fail (decoder != NULL);
  decoder->frames_func = func;
  decoder->frames_data = user_data;
  lingbot_vae_decoder_set_frames_func (decoder->dec,
      func ? decoder_frames : NULL, decoder);
}

/**
 * lingbot_world_new_decoder:
 * @world: a world with a VAE
 * @latent_height: latent rows h (the frame height / 8)
 * @latent_width: latent columns w
 * @max_latent_frames: the most latent frames of one decode (the chunk
 *   size)
 * @error: %LINGBOT_ERROR_NOT_FOUND for a world without a VAE,
 *   %LINGBOT_ERROR_INVALID_ARGUMENT when the sizes are not positive or
 *   there are more ranks than latent rows, %LINGBOT_ERROR_DEVICE when the
 *   caches or the frame buffer cannot be allocated
 *
 * A VAE decoder of its own on the world's ranks (height-sharded, one band
 * per rank), for latents that come without their session: a stream of
 * chunks decoded one after the other, the first to 1 + 4 (C - 1) frames,
 * every later one to 4 C, equal to a one-shot decode of the whole stream.
 * Its caches and its frame buffer (float32 [3, 4 @max_latent_frames,
 * 8 h, 8 w]) are allocated here; decodes allocate nothing.  It holds a
 * reference on @world.
 *
 * Returns: (transfer full) (nullable): the decoder, freed with
 * lingbot_decoder_free().
 */
LingbotDecoder *
lingbot_world_new_decoder (LingbotWorld * world, int latent_height,
    int latent_width, int max_latent_frames, GError ** error)
{
  g_autoptr (LingbotVaeDecoder) dec = NULL;
  g_autoptr (LbTensor) frames = NULL;
  LingbotDecoder *d;
  int64_t shape[4];

  g_return_val_if_fail (world != NULL, NULL);
  if (world->vae == NULL) {
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_NOT_FOUND,
        "the world has no VAE");
    return NULL;
  }
  if (latent_height <= 0 || latent_width <= 0 || max_latent_frames <= 0) {
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_INVALID_ARGUMENT,
        "decoder: %d latent frames of %dx%d", max_latent_frames,
        latent_width, latent_height);
    return NULL;
  }
  lingbot_world_lock (world);
  dec = lingbot_vae_decoder_new_sharded (world->vae, world->group,
      latent_height, latent_width, max_latent_frames, error);
  lingbot_world_unlock (world);
  if (dec == NULL)
    return NULL;
  shape[0] = 3;
  shape[1] = lingbot_vae_frames_for_latents (max_latent_frames, FALSE);
  shape[2] = (int64_t) latent_height *LINGBOT_VAE_SPATIAL_STRIDE;
  shape[3] = (int64_t) latent_width *LINGBOT_VAE_SPATIAL_STRIDE;
  /* sized by the caller */
  frames = lb_tensor_try_new (LB_DTYPE_F32, 4, shape, error);
  if (frames == NULL)
    return NULL;
  d = g_new0 (LingbotDecoder, 1);
  d->world = lingbot_world_ref (world);
  d->dec = g_steal_pointer (&dec);
  d->latent_height = latent_height;
  d->latent_width = latent_width;
  d->frames = g_steal_pointer (&frames);
  return d;
}

/**
 * lingbot_decoder_free:
 * @decoder: (nullable): a decoder
 *
 * Frees the decoder, its caches and its frames, and drops its world
 * reference.
 */
void
lingbot_decoder_free (LingbotDecoder * decoder)
{
  if (decoder == NULL)
    return;
  lingbot_world_lock (decoder->world);
  lingbot_vae_decoder_free (decoder->dec);
  lingbot_world_unlock (decoder->world);
  lb_tensor_free (decoder->frames);
  lingbot_world_unref (decoder->world);
  g_free (decoder);
}

/**
 * lingbot_decoder_decode:
 * @decoder: a decoder
 * @latents: the next chunk's latents, host float32 [16, T, h, w] with h
 *   and w the decoder's and T at most its max_latent_frames
 *   (lingbot_latents_new_wrapped())
 * @n_frames: (out) (optional): the frames made: 1 + 4 (T - 1) for the
 *   decoder's first chunk, 4 T after
 * @error: %LINGBOT_ERROR_SHAPE for latents of another size; errors of the
 *   ranks (%LINGBOT_ERROR_DEVICE, %LINGBOT_ERROR_TIMEOUT,
 *   %LINGBOT_ERROR_RANK_FAILED)
 *
 * Decodes one chunk on the world's ranks, under the world's lock (a
 * session's generate on the same ranks waits, and this waits for it), into
 * lingbot_decoder_get_frames(), overwriting the previous chunk's frames.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_decoder_decode (LingbotDecoder * decoder,
    const LingbotLatents * latents, int *n_frames, GError ** error)
{
  gboolean ok;
  int n = 0;

  g_return_val_if_fail (decoder != NULL, FALSE);
  g_return_val_if_fail (latents != NULL, FALSE);
  lingbot_world_lock (decoder->world);
  ok = lingbot_vae_decoder_decode (decoder->dec, &latents->t,
      decoder->frames, &n, error);
  lingbot_world_unlock (decoder->world);
  if (ok && n_frames)
    *n_frames = n;
  return ok;
}

/**
 * lingbot_decoder_get_frames:
 * @decoder: a decoder
 *
 * Returns: (transfer none): the decoder's frames, whose first n_frames
 * (lingbot_decoder_decode()) are the last decoded chunk; valid while
 * @decoder lives, overwritten by the next decode.
 */
const LingbotFrames *
lingbot_decoder_get_frames (LingbotDecoder * decoder)
{
  g_return_val_if_fail (decoder != NULL, NULL);
  return lingbot_frames_from_tensor (decoder->frames);
}

/* ---- a session's chunk as bytes ---- */

/**
 * lingbot_session_get_chunk_bytes:
 * @session: a session
 *
 * Returns: the bytes of one chunk's latents, host float32 [1, 16, C, h, w]
 * (lingbot_session_get_chunk_frames(), lingbot_session_get_latent_height(),
 * lingbot_session_get_latent_width()): the size lingbot_session_read_chunk()
 * writes.
 */
gsize
lingbot_session_get_chunk_bytes (LingbotSession * session)
{
  return (gsize) LINGBOT_LATENT_CHANNELS *
      (gsize) lingbot_session_get_chunk_frames (session) *
      (gsize) lingbot_session_get_latent_height (session) *
      (gsize) lingbot_session_get_latent_width (session) * sizeof (float);
}

/**
 * lingbot_session_read_chunk:
 * @session: a session
 * @chunk: a generated chunk, not decoded yet (nor released)
 * @dst: (array length=size) (element-type guint8): where the latents go:
 *   host float32 [1, 16, C, h, w], contiguous
 * @size: the bytes at @dst, lingbot_session_get_chunk_bytes()
 * @error: %LINGBOT_ERROR_SHAPE for another @size;
 *   %LINGBOT_ERROR_INVALID_ARGUMENT for a chunk the session does not hold
 *   any more; device errors
 *
 * Copies @chunk's latents to @dst: for elements that map the buffer (a
 * download, counted in lingbot_session_get_latent_host_bytes()).  With a
 * decoder attached the chunk is spilled (moved to host memory, the older
 * chunks still in slots too) and stays decodable from there.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_session_read_chunk (LingbotSession * session, guint64 chunk,
    gpointer dst, gsize size, GError ** error)
{
  const gsize expected = lingbot_session_get_chunk_bytes (session);
  int64_t shape[5] = { 1, LINGBOT_LATENT_CHANNELS,
    lingbot_session_get_chunk_frames (session),
    lingbot_session_get_latent_height (session),
    lingbot_session_get_latent_width (session)
  };
  int64_t stride[5];
  LbTensor view;

  if (size != expected) {
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_SHAPE,
        "session: read_chunk into %" G_GSIZE_FORMAT " bytes, expected %"
        G_GSIZE_FORMAT " (f32 [1, 16, %" G_GINT64_FORMAT ", %"
        G_GINT64_FORMAT ", %" G_GINT64_FORMAT "])", size, expected, shape[2],
        shape[3], shape[4]);
    return FALSE;
  }
  lb_contiguous_strides (5, shape, stride);
  lb_tensor_view_init (&view, LB_DTYPE_F32, dst, LB_DEVICE_HOST, 5, shape,
      stride);
  return lingbot_session_read_chunk_tensor (session, chunk, &view, error);
}

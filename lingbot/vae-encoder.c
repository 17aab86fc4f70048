/* lingbot-gst: streaming Wan2.1 VAE encoder and the DiT condition input
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Spec: vae_and_distributed_spec.md A.6 and B.11; lingbot_model_spec.md
 * 1.2 and 6.3.
 *
 * Constant zero chunks: after the image, the condition clip is all zeros,
 * encoded in segments of 4 frames.  If a zero segment leaves every causal
 * cache slot bit-for-bit unchanged, the encoder state is a fixed point: the
 * next zero segment sees the same state and the same input, so it yields
 * the same latent and again leaves the state unchanged.  The session tracks
 * that (comparing each slot's old and new frames as it updates them) and
 * from then on returns the stored latent without running the encoder.  With
 * the Wan2.1 encoder this happens around latent index 30 (spec A.6: latents
 * are identical from index 29 on), i.e. from condition chunk 8 on.
 *
 * Devices (docs/design/cuda.md, VAE): the session uploads the encoder
 * weights once and keeps its caches, scratch, zero clip and stored latent
 * on its stream's device.  The API's pixels / image are host tensors that
 * each segment uploads into a device buffer; each latent frame is computed
 * into a device buffer and downloaded into the caller's host tensor; the
 * stream is synchronised once per call.  The condition mask channels are
 * written by host code into the host y.
 */
#include "lingbot/vae-private.h"

#include <string.h>

/* Pixel frames per encoder segment after the first (spec A.6). */
#define VAE_SEGMENT_T 4

struct _LingbotVaeEncoder
{
  LingbotVae *vae;
  VaeCtx ctx;
  VaeWeights wt;                /* on the stream's device (CPU: borrowed) */
  int64_t H, W;
  LbTensor *zeros;              /* [3, 4, H, W] */
  LbTensor *mu;                 /* [16, 1, h, w] */
  LbTensor *constant;           /* [16, 1, h, w] latent of the fixed point */
  /* device sessions only (NULL on the CPU) */
  LbTensor *px_dev;             /* [3, 4, H, W] the segment's pixels */
  LbTensor *lat_dev;            /* [16, 1, h, w] the segment's normalised latent */
  gboolean reuse;
  int constant_from;            /* segment index, -1 until found */
  int n_segments;               /* segments since the last reset */
  int n_encoded;                /* segments that ran the encoder */
  int cond_chunks;              /* condition chunks since the last reset */

  /* lingbot_vae_encoder_set_cancellable(), _set_layer_func() */
  GCancellable *cancellable;
  LingbotVaeLayerFunc layer_func;
  gpointer layer_data;
  gboolean cancel_on;           /* in a condition call: the cancellable counts */
  int segment, n_call_segments; /* the latent frame the call encodes */
  gboolean stepped;             /* the call ran a layer: the state moved */
  int replay_to;                /* a cancelled call moved the state: the
                                 * condition chunks to replay, else -1 */
};

/* Before each layer of a latent frame the encoder computes
 * (VaeCtx.step_func): the layer function, then, in a condition call, the
 * cancellable. */
static gboolean
encoder_step (gpointer data, int step, int n_steps, GError ** error)
{
  LingbotVaeEncoder *enc = data;
  if (enc->layer_func)
    enc->layer_func (enc, enc->segment, step, n_steps, enc->layer_data);
  if (enc->cancel_on && enc->cancellable
      && g_cancellable_is_cancelled (enc->cancellable)) {
    g_set_error (error, LB_ERROR, LB_ERROR_CANCELLED,
        "VAE condition encode cancelled before layer %d of %d of latent "
        "frame %d of %d", step + 1, n_steps, enc->segment + 1,
        enc->n_call_segments);
    return FALSE;
  }
  enc->stepped = TRUE;
  return TRUE;
}

/**
 * lingbot_vae_encoder_new:
 * @vae: a VAE with its encoder loaded
 * @stream: the stream to encode on (any backend).  A device session is
 *   used on the thread that owns @stream (a rank's thread)
 * @height: pixel rows H (a multiple of 8)
 * @width: pixel columns W (a multiple of 8)
 * @error: %LB_ERROR_INVALID_ARGUMENT for a bad geometry,
 *   %LB_ERROR_DEVICE when a device allocation or upload fails
 *
 * Creates a streaming encode session: the 24 cache slots, scratch and the
 * zero clip are allocated here, on @stream's device.  On a device the
 * encoder weights are uploaded here too (one f32 copy, freed with the
 * session), with a pixel buffer [3, 4, H, W] and a latent buffer
 * [16, 1, H/8, W/8] that stage the API's host tensors, and the fixed-point
 * compare buffers (docs/design/cuda.md).  Constant-chunk reuse is on by
 * default (lingbot_vae_encoder_set_reuse_constant()).
 *
 * Returns: (transfer full) (nullable): the session.
 */
LingbotVaeEncoder *
lingbot_vae_encoder_new (LingbotVae * vae, LbStream * stream, int height,
    int width, GError ** error)
{
  if (!(vae->parts & LINGBOT_VAE_ENCODER)) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "VAE encoder: the encoder weights were not loaded");
    return NULL;
  }
  if (height < 8 || width < 8 || height % 8 || width % 8) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "VAE encoder: %dx%d is not a positive multiple of 8 in both "
        "dimensions", width, height);
    return NULL;
  }
  LingbotVaeEncoder *enc = g_new0 (LingbotVaeEncoder, 1);
  enc->vae = lingbot_vae_ref (vae);
  enc->H = height;
  enc->W = width;
  enc->reuse = TRUE;
  enc->constant_from = -1;
  enc->replay_to = -1;
  enc->ctx.stream = stream;
  enc->ctx.step_func = encoder_step;
  enc->ctx.step_data = enc;
  enc->ctx.n_ranks = 1;
  enc->ctx.full_rows = height;
  int64_t h = height / 8, w = width / 8;
  int64_t zshape[4] = { 3, VAE_SEGMENT_T, height, width };
  int64_t mshape[4] = { VAE_Z_DIM, 1, h, w };
  if (!vae_weights_init (&enc->wt, stream, vae, LINGBOT_VAE_ENCODER, error)
      || !vae_ctx_plan (&enc->ctx, &enc->wt.net, 3, VAE_SEGMENT_T, height,
          width, error)
      || !vae_ctx_alloc (&enc->ctx, 0, error)
      || !vae_ctx_upload_latent_consts (&enc->ctx, vae, error)
      || !(enc->zeros
          = lb_tensor_new_on (stream, LB_DTYPE_F32, 4, zshape, error))
      || !(enc->mu = lb_tensor_new_on (stream, LB_DTYPE_F32, 4, mshape, error))
      || !(enc->constant
          = lb_tensor_new_on (stream, LB_DTYPE_F32, 4, mshape, error))) {
    lingbot_vae_encoder_free (enc);
    return NULL;
  }
  if (!vae_stream_is_host (stream)
      && (!(enc->px_dev
              = lb_tensor_new_on (stream, LB_DTYPE_F32, 4, zshape, error))
          || !(enc->lat_dev
              = lb_tensor_new_on (stream, LB_DTYPE_F32, 4, mshape, error)))) {
    lingbot_vae_encoder_free (enc);
    return NULL;
  }
  if (!lb_ops (stream)->fill (stream, enc->zeros, 0.f, error)
      || !stream->backend->stream_synchronize (stream, error)) {
    lingbot_vae_encoder_free (enc);
    return NULL;
  }
  return enc;
}

/**
 * lingbot_vae_encoder_free:
 * @enc: (nullable): a session
 */
void
lingbot_vae_encoder_free (LingbotVaeEncoder * enc)
{
  if (enc == NULL)
    return;
  vae_ctx_clear (&enc->ctx);
  lb_tensor_free (enc->zeros);
  lb_tensor_free (enc->mu);
  lb_tensor_free (enc->constant);
  lb_tensor_free (enc->px_dev);
  lb_tensor_free (enc->lat_dev);
  vae_weights_clear (&enc->wt);
  lingbot_vae_unref (enc->vae);
  g_clear_object (&enc->cancellable);
  g_free (enc);
}

/**
 * lingbot_vae_encoder_reset:
 *
 * Starts a new stream (a new image): zero history, the next call is a
 * first call again; forgets the constant latent.  Allocates nothing.
 */
void
lingbot_vae_encoder_reset (LingbotVaeEncoder * enc)
{
  g_autoptr (GError) err = NULL;
  if (!vae_ctx_reset (&enc->ctx, &err))
    g_warning ("VAE encoder reset: %s", err->message);
  enc->constant_from = -1;
  enc->n_segments = 0;
  enc->n_encoded = 0;
  enc->cond_chunks = 0;
  enc->replay_to = -1;
}

/**
 * lingbot_vae_encoder_set_cancellable:
 * @enc: a session
 * @cancellable: (nullable): cancels lingbot_vae_encoder_encode_condition()
 *   calls; %NULL unsets
 *
 * While @cancellable is cancelled, a condition call stops before the next
 * layer it would run (conv_in, a block of the trunk, the head; latent
 * frames served from the stored constant run none) and fails with
 * %LB_ERROR_CANCELLED "VAE condition encode cancelled before layer L of N
 * of latent frame F of C".  A call stopped before its first layer leaves
 * the session as it was; one stopped later has moved the causal caches,
 * and the next condition call first replays the session's condition
 * chunks from the reset (from the image it is given: pass it again),
 * which restores them bit for bit, then encodes its chunk: its y is
 * byte-identical to an uncancelled session's, at the cost of re-encoding
 * the chunks before it up to the fixed point (after it, replayed zero
 * chunks cost nothing).  On a device the check runs where the host
 * enqueues the next layer, so the layers already enqueued still run
 * (the call synchronises the stream before it returns).  Call it on the
 * thread that encodes, between calls; the session keeps a reference.
 */
void
lingbot_vae_encoder_set_cancellable (LingbotVaeEncoder * enc,
    GCancellable * cancellable)
{
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));
  if (cancellable != NULL)
    g_object_ref (cancellable);
  g_clear_object (&enc->cancellable);
  enc->cancellable = cancellable;
}

/**
 * lingbot_vae_encoder_set_layer_func:
 * @enc: a session
 * @func: (nullable): called before each layer the encoder runs
 *   (#LingbotVaeLayerFunc); %NULL unsets
 * @user_data: passed to @func
 *
 * A progress hook on the encoding thread (a cancel made in it stops the
 * call before that layer).  It sees no tensors and changes nothing that
 * is computed.
 */
void
lingbot_vae_encoder_set_layer_func (LingbotVaeEncoder * enc,
    LingbotVaeLayerFunc func, gpointer user_data)
{
  enc->layer_func = func;
  enc->layer_data = user_data;
}

/**
 * lingbot_vae_encoder_set_reuse_constant:
 * @reuse: whether zero segments may return the stored fixed-point latent
 *
 * On by default.  Off, every zero segment runs the encoder (the reference
 * behaviour, for tests).
 */
void
lingbot_vae_encoder_set_reuse_constant (LingbotVaeEncoder * enc, gboolean reuse)
{
  enc->reuse = reuse;
}

/**
 * lingbot_vae_encoder_get_constant_from:
 *
 * Returns: the index (since reset) of the first latent frame served from
 * the stored constant without running the encoder, or -1 while the state
 * has not reached its fixed point.
 */
int
lingbot_vae_encoder_get_constant_from (LingbotVaeEncoder * enc)
{
  return enc->constant_from < 0 ? -1 : enc->constant_from + 1;
}

/**
 * lingbot_vae_encoder_get_n_encoded_segments:
 *
 * Returns: how many segments actually ran the encoder since the reset.
 */
int
lingbot_vae_encoder_get_n_encoded_segments (LingbotVaeEncoder * enc)
{
  return enc->n_encoded;
}

/* The segment @x (a host view [3, t, H, W]) as the encoder reads it: @x
 * itself on the CPU; on a device, uploaded into enc->px_dev. */
static gboolean
stage_pixels (LingbotVaeEncoder * enc, const LbTensor * x, LbTensor * staged,
    const char *what, GError ** error)
{
  if (vae_stream_is_host (enc->ctx.stream)) {
    *staged = *x;
    return TRUE;
  }
  vae_view4 (staged, enc->px_dev, 3, x->shape[1], enc->H, enc->W);
  return vae_copy_runs (enc->ctx.stream, staged, x, LB_COPY_HOST_TO_DEVICE,
      what, error);
}

/* One encoder call on x [3, t, H, W] (on the stream's device); writes the
 * normalised latent frame (t = 1 or 4 -> one latent) into the host view
 * @out [16, 1, h, w] (on a device: computed into enc->lat_dev, then
 * downloaded; complete once the stream is synchronised). */
static gboolean
encode_segment (LingbotVaeEncoder * enc, const LbTensor * x,
    gboolean zero_input, LbTensor * out, GError ** error)
{
  VaeCtx *ctx = &enc->ctx;
  LbStream *st = ctx->stream;
  const LbOps *ops = lb_ops (st);
  const gboolean host = vae_stream_is_host (st);
  LbTensor *dst = host ? out : enc->lat_dev;
  if (zero_input && enc->reuse && enc->constant_from >= 0) {
    enc->n_segments++;
    return host ? ops->copy (st, enc->constant, out, error)
        : vae_copy_runs (st, out, enc->constant, LB_COPY_DEVICE_TO_HOST,
        "VAE encode: latents", error);
  }
  ctx->track_changes = zero_input && enc->reuse;
  ctx->changed = FALSE;
  VaeShape s = { 3, x->shape[1], enc->H, enc->W };
  if (!vae_net_forward (ctx, &enc->wt.net, x, &s, error))
    return FALSE;
  g_assert (s.t == 1 && s.c == 2 * VAE_Z_DIM);
  LbTensor h32;
  vae_view4 (&h32, ctx->bx, s.c, s.t, s.h, s.w);
  /* top-level conv1, mu rows only, then (mu - mean) * inv_std */
  if (!ops->conv3d_causal (st, &h32, NULL, &enc->wt.extra.w, &enc->wt.extra.b,
          0, 0, 1, 1, enc->mu, error)
      || !ops->latent_affine (st, enc->mu, ctx->mean, ctx->inv_std, FALSE, dst,
          error))
    return FALSE;
  if (ctx->track_changes && !ctx->changed && enc->n_segments > 0) {
    enc->constant_from = enc->n_segments;
    if (!ops->copy (st, dst, enc->constant, error))
      return FALSE;
  }
  if (!host
      && !vae_copy_runs (st, out, dst, LB_COPY_DEVICE_TO_HOST,
          "VAE encode: latents", error))
    return FALSE;
  ctx->track_changes = FALSE;
  enc->n_segments++;
  enc->n_encoded++;
  return TRUE;
}

/* End of an API call: on a device, wait for the queued work (also after a
 * failure, so that no copy still reads or writes the caller's memory). */
static gboolean
finish_call (LingbotVaeEncoder * enc, gboolean ok, GError ** error)
{
  LbStream *st = enc->ctx.stream;
  if (vae_stream_is_host (st))
    return ok;
  if (!st->backend->stream_synchronize (st, ok ? error : NULL))
    return FALSE;
  return ok;
}

/* Writes @value into every element of the host view @t [C, L, h, w]. */
static void
host_fill (LbTensor * t, float value)
{
  g_assert (t->ndim == 4 && t->device.type == LB_DEVICE_CPU);
  for (int64_t c = 0; c < t->shape[0]; c++)
    for (int64_t l = 0; l < t->shape[1]; l++)
      for (int64_t h = 0; h < t->shape[2]; h++) {
        float *row = (float *) t->data + c * t->stride[0] + l * t->stride[1]
            + h * t->stride[2];
        for (int64_t w = 0; w < t->shape[3]; w++)
          row[w * t->stride[3]] = value;
      }
}

static gboolean
squeeze_batch (LbTensor * out, const LbTensor * t, int ndim)
{
  if (t->ndim == ndim + 1 && t->shape[0] == 1)
    return lb_tensor_view_select (out, t, 0, 0);
  if (t->ndim != ndim)
    return FALSE;
  lb_tensor_view (out, t);
  return TRUE;
}

/* [3, H, W] -> a [3, 1, H, W] view of the same memory. */
static void
image_as_clip (LbTensor * out, const LbTensor * img)
{
  *out = *img;
  out->storage = NULL;
  out->ndim = 4;
  out->shape[3] = img->shape[2];
  out->stride[3] = img->stride[2];
  out->shape[2] = img->shape[1];
  out->stride[2] = img->stride[1];
  out->shape[1] = 1;
  out->stride[1] = img->stride[0];
}

static gboolean
check_latents (LingbotVaeEncoder * enc, const LbTensor * t, int64_t c,
    LbTensor * out, const char *what, GError ** error)
{
  if (!squeeze_batch (out, t, 4) || out->dtype != LB_DTYPE_F32
      || out->shape[0] != c || out->shape[1] < 1 || out->shape[2] != enc->H / 8
      || out->shape[3] != enc->W / 8) {
    g_autofree char *have = lb_tensor_shape_string (t);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "VAE encode: %s is %s %s, expected f32 [%" G_GINT64_FORMAT
        ", L, %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]",
        what, lb_dtype_name (t->dtype), have, c, enc->H / 8, enc->W / 8);
    return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_vae_encoder_encode:
 * @enc: a session
 * @pixels: host f32 [3, T, H, W] (or [1, 3, T, H, W]) in [-1, 1], any
 *   strides (a device session: unit stride in the last dimension);
 *   T = 4n + 1 on the first call after a reset, 4n afterwards (spec C.3)
 * @latents: host f32 [16, L, H/8, W/8], L = n + 1 on a first call, n
 *   after: receives the normalised posterior means (spec A.2)
 * @error: %LB_ERROR_SHAPE for wrong shapes or frame counts,
 *   %LB_ERROR_INVALID_ARGUMENT for a device tensor
 *
 * Streams pixels through the encoder in segments [1], [4], [4], ... with
 * the session's causal caches (spec A.6).  On a device each segment is
 * uploaded and each latent frame downloaded; the stream is synchronised
 * once, before returning.  Allocates nothing.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_vae_encoder_encode (LingbotVaeEncoder * enc, const LbTensor * pixels,
    LbTensor * latents, GError ** error)
{
  LbTensor px, lat;
  gboolean first = enc->n_segments == 0;
  if (!squeeze_batch (&px, pixels, 4) || px.dtype != LB_DTYPE_F32
      || px.shape[0] != 3 || px.shape[2] != enc->H || px.shape[3] != enc->W
      || px.shape[1] < 1 || (px.shape[1] - (first ? 1 : 0)) % 4 != 0) {
    g_autofree char *have = lb_tensor_shape_string (pixels);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "VAE encode: pixels are %s %s, expected f32 [3, %s, %" G_GINT64_FORMAT
        ", %" G_GINT64_FORMAT "]",
        lb_dtype_name (pixels->dtype), have, first ? "4n+1" : "4n", enc->H,
        enc->W);
    return FALSE;
  }
  int64_t n_lat = (px.shape[1] + (first ? 3 : 0)) / 4;
  if (!check_latents (enc, latents, VAE_Z_DIM, &lat, "latents", error)
      || !vae_check_host (pixels, "VAE encode", "pixels", error)
      || !vae_check_host (latents, "VAE encode", "latents", error))
    return FALSE;
  if (lat.shape[1] != n_lat) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "VAE encode: %" G_GINT64_FORMAT " frames give %" G_GINT64_FORMAT
        " latent frames, latents have %" G_GINT64_FORMAT,
        px.shape[1], n_lat, lat.shape[1]);
    return FALSE;
  }
  int64_t f = 0;
  gboolean ok = TRUE;
  enc->n_call_segments = (int) n_lat;
  for (int64_t l = 0; ok && l < n_lat; l++) {
    int64_t t = (first && l == 0) ? 1 : VAE_SEGMENT_T;
    LbTensor seg, x, out;
    enc->segment = (int) l;
    lb_tensor_view_narrow (&seg, &px, 1, f, t);
    lb_tensor_view_narrow (&out, &lat, 1, l, 1);
    ok = stage_pixels (enc, &seg, &x, "VAE encode: pixels", error)
        && encode_segment (enc, &x, FALSE, &out, error);
    f += t;
  }
  return finish_call (enc, ok, error);
}

/* One condition chunk (lingbot_vae_encoder_encode_condition() without
 * the replay). */
static gboolean
condition_chunk (LingbotVaeEncoder * enc, const LbTensor * image,
    LbTensor * y, GError ** error)
{
  LbTensor yy, img;
  if (!check_latents (enc, y, LINGBOT_VAE_COND_CHANNELS, &yy, "y", error)
      || !vae_check_host (y, "VAE condition", "y", error))
    return FALSE;
  gboolean first = enc->cond_chunks == 0;
  if (first) {
    if (image == NULL) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "VAE condition: the first chunk needs the image");
      return FALSE;
    }
    if (!squeeze_batch (&img, image, 3) || img.dtype != LB_DTYPE_F32
        || img.shape[0] != 3 || img.shape[1] != enc->H
        || img.shape[2] != enc->W) {
      g_autofree char *have = lb_tensor_shape_string (image);
      g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
          "VAE condition: image is %s %s, expected f32 [3, %" G_GINT64_FORMAT
          ", %" G_GINT64_FORMAT "]",
          lb_dtype_name (image->dtype), have, enc->H, enc->W);
      return FALSE;
    }
    if (!vae_check_host (image, "VAE condition", "image", error))
      return FALSE;
    if (enc->n_segments != 0) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "VAE condition: the session already encoded frames; reset it");
      return FALSE;
    }
  }
  LbTensor mask, lat, m0;
  LbStream *st = enc->ctx.stream;
  const gboolean host = vae_stream_is_host (st);
  lb_tensor_view_narrow (&mask, &yy, 0, 0, 4);
  lb_tensor_view_narrow (&lat, &yy, 0, 4, VAE_Z_DIM);
  lb_tensor_view_narrow (&m0, &mask, 1, 0, 1);
  /* the mask is host data written by host code on a device session */
  if (host) {
    if (!lb_ops (st)->fill (st, &mask, 0.f, error))
      return FALSE;
  } else {
    host_fill (&mask, 0.f);
  }
  gboolean ok = TRUE;
  enc->n_call_segments = (int) yy.shape[1];
  for (int64_t l = 0; ok && l < yy.shape[1]; l++) {
    LbTensor out, seg, x;
    enc->segment = (int) l;
    lb_tensor_view_narrow (&out, &lat, 1, l, 1);
    if (first && l == 0) {
      image_as_clip (&seg, &img);
      ok = stage_pixels (enc, &seg, &x, "VAE condition: image", error)
          && encode_segment (enc, &x, FALSE, &out, error);
      if (ok && host)
        ok = lb_ops (st)->fill (st, &m0, 1.f, error);
      else if (ok)
        host_fill (&m0, 1.f);
    } else {
      ok = encode_segment (enc, enc->zeros, TRUE, &out, error);
    }
  }
  if (!finish_call (enc, ok, error))
    return FALSE;
  enc->cond_chunks++;
  return TRUE;
}

/* condition_chunk() with the cancellable on; after a cancel, the state as
 * before the call, or the replay due. */
static gboolean
condition_call (LingbotVaeEncoder * enc, const LbTensor * image,
    LbTensor * y, GError ** error)
{
  const int n_segments = enc->n_segments, n_encoded = enc->n_encoded;
  const int constant_from = enc->constant_from;
  GError *local = NULL;
  enc->cancel_on = TRUE;
  enc->stepped = FALSE;
  const gboolean ok = condition_chunk (enc, image, y, &local);
  enc->cancel_on = FALSE;
  if (!ok && g_error_matches (local, LB_ERROR, LB_ERROR_CANCELLED)) {
    if (enc->stepped && enc->replay_to < 0)
      enc->replay_to = enc->cond_chunks;
    else if (!enc->stepped) {
      /* stopped before any layer ran: only counters moved */
      enc->n_segments = n_segments;
      enc->n_encoded = n_encoded;
      enc->constant_from = constant_from;
    }
  }
  if (local != NULL)
    g_propagate_error (error, local);
  return ok;
}

/**
 * lingbot_vae_encoder_encode_condition:
 * @enc: a session
 * @image: (nullable): host f32 [3, H, W] in [-1, 1] (preprocessed as in
 *   model spec 6.2); required for the first chunk after a reset and for
 *   the call after a cancelled one, ignored otherwise
 * @y: host f32 [20, C, H/8, W/8] (or with a leading 1): receives the DiT
 *   condition of the next chunk of C latent frames
 * @error: %LB_ERROR_SHAPE, %LB_ERROR_INVALID_ARGUMENT (no image on chunk 0,
 *   a device tensor), %LB_ERROR_CANCELLED (the session's cancellable,
 *   lingbot_vae_encoder_set_cancellable(): checked before every layer)
 *
 * Builds y = cat(mask[4], latent[16]) for one chunk exactly as LingBot's
 * encode stage (spec A.6, model spec 1.2 and 6.3): chunk 0 encodes
 * [image, 4(C-1) zero frames], later chunks 4C zero frames, continuing the
 * causal caches; the mask is 1 on all 4 channels of latent frame 0 of
 * chunk 0 and 0 elsewhere.  Once the encoder state is a fixed point, zero
 * segments are served from the stored constant (see the file comment).
 * On a device the image is uploaded, every latent frame downloaded into
 * @y, the mask written on the host, and the stream synchronised once.
 * After a call cancelled mid-way, the next call replays the chunks before
 * it first (lingbot_vae_encoder_set_cancellable()), so its @y is the
 * uncancelled session's.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_vae_encoder_encode_condition (LingbotVaeEncoder * enc,
    const LbTensor * image, LbTensor * y, GError ** error)
{
  if (enc->replay_to >= 0) {
    /* a cancelled call moved the caches: the chunks before it again from
     * the reset (into @y, which this call overwrites), bit for bit */
    const int chunks = enc->replay_to;
    if (image == NULL) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "VAE condition: a cancelled encode is replayed from the image; "
          "pass it");
      return FALSE;
    }
    lingbot_vae_encoder_reset (enc);
    enc->replay_to = chunks;
    for (int c = 0; c < chunks; c++)
      if (!condition_call (enc, image, y, error))
        return FALSE;
    enc->replay_to = -1;
  }
  return condition_call (enc, image, y, error);
}

/**
 * lingbot_vae_encode_image:
 * @vae: a VAE with its encoder loaded
 * @stream: the stream to encode on (any backend; on a device, call it on
 *   the thread that owns @stream)
 * @image: host f32 [3, H, W] in [-1, 1]
 * @latent: host f32 [16, 1, H/8, W/8] (or [1, 16, 1, h, w]): the
 *   normalised latent of the single frame
 * @error: as lingbot_vae_encoder_new() and _encode()
 *
 * One-frame encode (a fresh session, created and freed here: not for
 * per-chunk use).  Equals latent frame 0 of condition chunk 0.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_vae_encode_image (LingbotVae * vae, LbStream * stream,
    const LbTensor * image, LbTensor * latent, GError ** error)
{
  LbTensor img, px;
  if (!squeeze_batch (&img, image, 3) || img.shape[0] != 3) {
    g_autofree char *have = lb_tensor_shape_string (image);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "VAE encode: image is %s, expected [3, H, W]", have);
    return FALSE;
  }
  g_autoptr (LingbotVaeEncoder) enc =
      lingbot_vae_encoder_new (vae, stream, (int) img.shape[1],
      (int) img.shape[2], error);
  if (enc == NULL)
    return FALSE;
  image_as_clip (&px, &img);
  return lingbot_vae_encoder_encode (enc, &px, latent, error);
}

/* lingbot-gst: streaming Wan2.1 VAE decoder session, optionally
 * height-sharded over a worker group
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Spec: vae_and_distributed_spec.md A.4, A.5, A.10, C.1-C.3.
 *
 * Sharding: rank r decodes latent rows [start_r, start_r + count_r) of
 * every frame (lb_split_rows(), the split the DiT uses) at every
 * resolution (x2, x4, x8 rows further up), exchanging one halo row with
 * each neighbour before every 3x3 conv and all-gathering the mid-block
 * attention input; each rank keeps the causal caches of its own band and
 * writes its rows of the output frames into the caller's buffer.
 * Per-layer exchange was chosen over one wide halo computed redundantly:
 * the decoder's receptive field is 18 latent rows per side even without the
 * global attention (spec A.10), i.e. the whole frame at the real sizes, so
 * the redundant variant would cost nearly a full decode per rank.
 *
 * Devices (docs/design/cuda.md, VAE): every rank holds its own f32 copy of
 * the decoder weights on its device (vae_weights_init()), and its caches
 * and scratch there.  The API's latents and frames stay host tensors: a
 * rank uploads the chunk's latents into a device buffer, decodes, clamps
 * into a device frame buffer of its band and downloads that into its rows
 * of the caller's frames, then synchronises its stream once.  Halo rows and
 * the attention all-gather move between device buffers through the comm
 * layer (NCCL, or the local collectives' device copies).
 */
#include "lingbot/vae-private.h"
#include "comm/collectives.h"

#include <string.h>

typedef struct
{
  VaeCtx ctx;
  VaeWeights wt;                /* on the rank's device (CPU: borrowed) */
  LbTensor *z;                  /* [16, Lmax, rows, W] de-normalised */
  LbTensor *z2;                 /* [16, Lmax, rows, W] after conv2 */
  /* device ranks only (NULL on the CPU, which reads and writes the API's
   * host tensors in place) */
  LbTensor *lat_dev;            /* [16, Lmax, H, W] the chunk's latents */
  LbTensor *frames_dev;         /* [3, 4 Lmax, 8 rows, 8 W] this band's frames */
  int64_t row0, rows;
  gboolean first;               /* nothing decoded since the last reset */
  guint64 halo_last;            /* bytes this rank sent during its last chunk */
  gint64 halo_us_last;          /* and the time it spent in exchanges */
} DecRank;

struct _LingbotVaeDecoder
{
  LingbotVae *vae;
  LbWorkerGroup *group;         /* NULL when not sharded */
  int n_ranks;
  int64_t H, W, max_latents;
  int64_t *band_start, *band_count;
  gsize *ag_counts, *ag_displs;
  DecRank *ranks;

  /* arguments of the call in flight (lingbot_vae_decoder_decode()) */
  const LbTensor *in;
  LbTensor *out;

  /* lingbot_vae_decoder_set_frames_func(): frames handed on per latent
   * frame (rank 0 calls it) */
  LingbotVaeFramesFunc frames_func;
  gpointer frames_data;
};

static gboolean
rank_setup (DecRank * dr, LingbotVaeDecoder * dec, GError ** error)
{
  VaeCtx *ctx = &dr->ctx;
  LbStream *s = ctx->stream;
  const int64_t rows = dr->rows, W = dec->W, L = dec->max_latents;
  const int64_t S = LINGBOT_VAE_SPATIAL_STRIDE;
  vae_ctx_choose_conv_inputs (ctx);
  if (!vae_weights_init (&dr->wt, s, dec->vae, LINGBOT_VAE_DECODER, error)
      || !vae_ctx_plan (ctx, &dr->wt.net, VAE_Z_DIM, 1, rows, W, error))
    return FALSE;
  int64_t zshape[4] = { VAE_Z_DIM, L, rows, W };
  if (!(dr->z = lb_tensor_new_on (s, LB_DTYPE_F32, 4, zshape, error))
      || !(dr->z2 = lb_tensor_new_on (s, LB_DTYPE_F32, 4, zshape, error)))
    return FALSE;
  if (!vae_stream_is_host (s)) {
    int64_t lshape[4] = { VAE_Z_DIM, L, dec->H, W };
    int64_t fshape[4] = { 3, lingbot_vae_frames_for_latents ((int) L, FALSE),
      rows * S, W * S
    };
    if (!(dr->lat_dev = lb_tensor_new_on (s, LB_DTYPE_F32, 4, lshape, error))
        || !(dr->frames_dev
            = lb_tensor_new_on (s, LB_DTYPE_F32, 4, fshape, error)))
      return FALSE;
  }
  return vae_ctx_alloc (ctx, 0, error)
      && vae_ctx_upload_latent_consts (ctx, dec->vae, error);
}

static gboolean
rank_setup_func (LbRank * rank, gpointer user_data, GError ** error)
{
  LingbotVaeDecoder *dec = user_data;
  DecRank *dr = &dec->ranks[rank->rank];
  dr->ctx.stream = rank->stream;
  dr->ctx.rank = rank;
  /* see comm_ready() in vae-net.c */
  dr->ctx.comm_sync = !vae_stream_is_host (rank->stream)
      && strcmp (lb_comm_backend_name (rank), "local") == 0;
  return rank_setup (dr, dec, error);
}

static void
rank_clear (DecRank * dr)
{
  vae_ctx_clear (&dr->ctx);
  g_clear_pointer (&dr->z, lb_tensor_free);
  g_clear_pointer (&dr->z2, lb_tensor_free);
  g_clear_pointer (&dr->lat_dev, lb_tensor_free);
  g_clear_pointer (&dr->frames_dev, lb_tensor_free);
  vae_weights_clear (&dr->wt);
}

static gboolean
rank_clear_func (LbRank * rank, gpointer user_data, GError ** error)
{
  (void) error;
  LingbotVaeDecoder *dec = user_data;
  rank_clear (&dec->ranks[rank->rank]);
  return TRUE;
}

static gboolean
rank_reset (DecRank * dr, GError ** error)
{
  dr->first = TRUE;
  dr->halo_last = 0;
  dr->halo_us_last = 0;
  return vae_ctx_reset (&dr->ctx, error);
}

static gboolean
rank_reset_func (LbRank * rank, gpointer user_data, GError ** error)
{
  LingbotVaeDecoder *dec = user_data;
  return rank_reset (&dec->ranks[rank->rank], error);
}

/* With a frames function: frames [@f0, @f0 + @n) of this rank's band are
 * made ready in the caller's host frames (a device rank downloads them and
 * synchronises its stream), every rank waits for the others (a barrier,
 * when sharded), then rank 0 hands them on.  A failure of a peer releases
 * the barrier with an error. */
static gboolean
hand_on_frames (DecRank * dr, LingbotVaeDecoder * dec, LbTensor * out,
    int64_t f0, int64_t n, GError ** error)
{
  VaeCtx *ctx = &dr->ctx;
  LbStream *st = ctx->stream;
  const int64_t S = LINGBOT_VAE_SPATIAL_STRIDE;

  if (!vae_stream_is_host (st)) {
    LbTensor src, dst;
    lb_tensor_view_narrow (&src, dr->frames_dev, 1, f0, n);
    lb_tensor_view_narrow (&dst, out, 1, f0, n);
    lb_tensor_view_narrow (&dst, &dst, 2, dr->row0 * S, dr->rows * S);
    if (!vae_copy_runs (st, &dst, &src, LB_COPY_DEVICE_TO_HOST,
            "VAE decode: frames", error)
        || (ctx->rank != NULL && !lb_comm_synchronize (ctx->rank, error))
        || !st->backend->stream_synchronize (st, error))
      return FALSE;
  }
  if (dec->n_ranks > 1 && !lb_comm_barrier (ctx->rank, error))
    return FALSE;
  if (ctx->rank == NULL || ctx->rank->rank == 0)
    dec->frames_func ((int) f0, (int) n, dec->frames_data);
  return TRUE;
}

/* Decodes the chunk's frames of this rank's band; on a device the latents
 * are uploaded first and the frames left in dr->frames_dev (@f_out frames
 * in all). */
static gboolean
rank_decode_band (DecRank * dr, LingbotVaeDecoder * dec, const LbTensor * in,
    gboolean in_is_band, LbTensor * out, int64_t * f_out, GError ** error)
{
  VaeCtx *ctx = &dr->ctx;
  LbStream *st = ctx->stream;
  const gboolean host = vae_stream_is_host (st);
  const int64_t L = in->shape[1], rows = dr->rows, W = dec->W;
  const int64_t S = LINGBOT_VAE_SPATIAL_STRIDE;
  LbTensor lat, band, z, z2, xin, dst;
  int64_t zshape[4] = { VAE_Z_DIM, L, rows, W };
  if (in_is_band) {
    /* the rank's own rows, where they already are (a channel slot on the
     * rank's device, lingbot_vae_decoder_decode_band_on_rank()) */
    lat = *in;
  } else if (host) {
    lat = *in;
  } else {
    /* the whole chunk (a few MB): one copy when @in is contiguous */
    vae_view_flat (&lat, dr->lat_dev, 4, in->shape);
    if (!vae_copy_runs (st, &lat, in, LB_COPY_HOST_TO_DEVICE,
            "VAE decode: latents", error))
      return FALSE;
  }
  if (in_is_band)
    band = lat;
  else
    lb_tensor_view_narrow (&band, &lat, 2, dr->row0, rows);
  vae_view_flat (&z, dr->z, 4, zshape);
  vae_view_flat (&z2, dr->z2, 4, zshape);
  /* spec A.5: de-normalise, conv2 on the whole chunk, then per frame */
  const LbOps *ops = lb_ops (st);
  if (!ops->latent_affine (st, &band, ctx->mean, ctx->inv_std, TRUE, &z, error)
      || !ops->conv3d_causal (st, &z, NULL, &dr->wt.extra.w, &dr->wt.extra.b, 0,
          0, 1, 1, &z2, error))
    return FALSE;

  int64_t f0 = 0;
  for (int64_t l = 0; l < L; l++) {
    VaeShape s = { VAE_Z_DIM, 1, rows, W };
    lb_tensor_view_narrow (&xin, &z2, 1, l, 1);
    if (!vae_net_forward (ctx, &dr->wt.net, &xin, &s, error))
      return FALSE;
    LbTensor x;
    vae_view4 (&x, ctx->bx, s.c, s.t, s.h, s.w);
    if (host) {
      lb_tensor_view_narrow (&dst, out, 1, f0, s.t);
      lb_tensor_view_narrow (&dst, &dst, 2, dr->row0 * S, rows * S);
    } else {
      lb_tensor_view_narrow (&dst, dr->frames_dev, 1, f0, s.t);
    }
    if (!ops->clamp (st, &x, -1.f, 1.f, &dst, error))
      return FALSE;
    if (dec->frames_func != NULL
        && !hand_on_frames (dr, dec, out, f0, s.t, error))
      return FALSE;
    f0 += s.t;
  }
  *f_out = f0;
  return TRUE;
}

/* Decodes the chunk @in [16, L, H, W] (host) into this rank's rows of @out
 * (host); on a device: upload, decode, download, one stream synchronise. */
static gboolean
rank_decode (DecRank * dr, LingbotVaeDecoder * dec, const LbTensor * in,
    gboolean in_is_band, LbTensor * out, GError ** error)
{
  VaeCtx *ctx = &dr->ctx;
  LbStream *st = ctx->stream;
  const guint64 halo0 = ctx->halo_bytes;
  const gint64 halo_us0 = ctx->halo_us;
  const int64_t S = LINGBOT_VAE_SPATIAL_STRIDE;
  int64_t n = 0;
  gboolean ok = rank_decode_band (dr, dec, in, in_is_band, out, &n, error);
  if (!vae_stream_is_host (st)) {
    /* (with a frames function every frame is on the host already) */
    if (ok && dec->frames_func == NULL) {
      LbTensor src, dst;
      lb_tensor_view_narrow (&src, dr->frames_dev, 1, 0, n);
      lb_tensor_view_narrow (&dst, out, 1, 0, n);
      lb_tensor_view_narrow (&dst, &dst, 2, dr->row0 * S, dr->rows * S);
      ok = vae_copy_runs (st, &dst, &src, LB_COPY_DEVICE_TO_HOST,
          "VAE decode: frames", error);
    }
    /* NCCL: wait through the comm layer, released when a peer fails */
    if (ok && ctx->rank != NULL)
      ok = lb_comm_synchronize (ctx->rank, error);
    /* also after a failure: no copy may still target the caller's memory */
    if (!st->backend->stream_synchronize (st, ok ? error : NULL))
      ok = FALSE;
  }
  if (!ok)
    return FALSE;
  dr->first = FALSE;
  dr->halo_last = ctx->halo_bytes - halo0;
  dr->halo_us_last = ctx->halo_us - halo_us0;
  return TRUE;
}

static gboolean
rank_decode_func (LbRank * rank, gpointer user_data, GError ** error)
{
  LingbotVaeDecoder *dec = user_data;
  return rank_decode (&dec->ranks[rank->rank], dec, dec->in, FALSE, dec->out,
      error);
}

static LingbotVaeDecoder *
decoder_new (LingbotVae * vae, int n_ranks, int latent_h, int latent_w,
    int max_latent_frames, GError ** error)
{
  if (!(vae->parts & LINGBOT_VAE_DECODER)) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "VAE decoder: the decoder weights were not loaded");
    return NULL;
  }
  if (latent_h < 1 || latent_w < 1 || max_latent_frames < 1) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "VAE decoder: invalid geometry %dx%d latent, %d frames per chunk",
        latent_h, latent_w, max_latent_frames);
    return NULL;
  }
  if (n_ranks > latent_h) {
    /* each band needs at least one row: the halo exchanged before every
     * conv is one row at that conv's resolution */
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "VAE decoder: %d latent rows cannot be split into %d height bands "
        "(every rank needs at least 1 row, the halo width)", latent_h, n_ranks);
    return NULL;
  }
  LingbotVaeDecoder *dec = g_new0 (LingbotVaeDecoder, 1);
  dec->vae = lingbot_vae_ref (vae);
  dec->n_ranks = n_ranks;
  dec->H = latent_h;
  dec->W = latent_w;
  dec->max_latents = max_latent_frames;
  dec->band_start = g_new0 (int64_t, n_ranks);
  dec->band_count = g_new0 (int64_t, n_ranks);
  dec->ag_counts = g_new0 (gsize, n_ranks);
  dec->ag_displs = g_new0 (gsize, n_ranks);
  dec->ranks = g_new0 (DecRank, n_ranks);
  const int64_t C = 4 * vae->dim;
  for (int r = 0; r < n_ranks; r++) {
    lb_split_rows (latent_h, n_ranks, r, &dec->band_start[r],
        &dec->band_count[r]);
    dec->ag_counts[r] = (gsize) (dec->band_count[r] * latent_w * C);
    dec->ag_displs[r] = (gsize) (dec->band_start[r] * latent_w * C);
  }
  for (int r = 0; r < n_ranks; r++) {
    DecRank *dr = &dec->ranks[r];
    dr->row0 = dec->band_start[r];
    dr->rows = dec->band_count[r];
    dr->first = TRUE;
    dr->ctx.rank_index = r;
    dr->ctx.n_ranks = n_ranks;
    dr->ctx.band_start = dec->band_start;
    dr->ctx.band_count = dec->band_count;
    dr->ctx.full_rows = latent_h;
    dr->ctx.ag_counts = dec->ag_counts;
    dr->ctx.ag_displs = dec->ag_displs;
  }
  return dec;
}

/**
 * lingbot_vae_decoder_new:
 * @vae: a VAE with its decoder loaded
 * @stream: the stream to decode on (any backend).  A device session is
 *   used on the thread that owns @stream (a rank's thread)
 * @latent_h: latent rows h (output H = 8h)
 * @latent_w: latent columns w (output W = 8w)
 * @max_latent_frames: most latent frames per chunk (4 for LingBot)
 * @error: %LB_ERROR_INVALID_ARGUMENT for a bad geometry,
 *   %LB_ERROR_DEVICE when a device allocation or upload fails
 *
 * Creates a streaming decode session (spec A.5): all 32 cache slots (zero
 * history), scratch buffers and the latent staging buffers are allocated
 * here, on @stream's device, sized for steady-state chunks of
 * @max_latent_frames.  On a device the decoder weights are uploaded here
 * too (one f32 copy, freed with the session), plus a latent buffer
 * [16, max_latent_frames, h, w] and a frame buffer
 * [3, 4 max_latent_frames, 8h, 8w] that stage the API's host tensors.
 *
 * Returns: (transfer full) (nullable): the session.
 */
LingbotVaeDecoder *
lingbot_vae_decoder_new (LingbotVae * vae, LbStream * stream, int latent_h,
    int latent_w, int max_latent_frames, GError ** error)
{
  LingbotVaeDecoder *dec
      = decoder_new (vae, 1, latent_h, latent_w, max_latent_frames, error);
  if (dec == NULL)
    return NULL;
  dec->ranks[0].ctx.stream = stream;
  if (!rank_setup (&dec->ranks[0], dec, error)) {
    lingbot_vae_decoder_free (dec);
    return NULL;
  }
  return dec;
}

/**
 * lingbot_vae_decoder_new_sharded:
 * @vae: a VAE with its decoder loaded
 * @group: the worker group whose ranks decode (one height band each)
 * @latent_h: latent rows h; bands follow lb_split_rows() (uneven splits
 *   such as 58 rows on 4 ranks = 15,15,14,14 are fine)
 * @latent_w: latent columns w
 * @max_latent_frames: most latent frames per chunk
 * @error: %LB_ERROR_INVALID_ARGUMENT when a band would be empty (more
 *   ranks than latent rows), or errors of the ranks' allocations
 *
 * Like lingbot_vae_decoder_new() but height-sharded (spec A.10): every rank
 * allocates the caches of its own band (with halo rows) on its own stream,
 * on its own thread.  On a device backend every rank uploads its own copy
 * of the decoder weights to its device and stages its band of the frames
 * (frame buffer [3, 4 max_latent_frames, 8 rows, 8w] per rank).
 *
 * Returns: (transfer full) (nullable): the session.
 */
LingbotVaeDecoder *
lingbot_vae_decoder_new_sharded (LingbotVae * vae, LbWorkerGroup * group,
    int latent_h, int latent_w, int max_latent_frames, GError ** error)
{
  LingbotVaeDecoder *dec
      = decoder_new (vae, lb_worker_group_get_n_ranks (group), latent_h,
      latent_w, max_latent_frames, error);
  if (dec == NULL)
    return NULL;
  dec->group = lb_worker_group_ref (group);
  if (!lb_worker_group_run (group, rank_setup_func, dec, error)) {
    lingbot_vae_decoder_free (dec);
    return NULL;
  }
  return dec;
}

/* Whether the ranks' state must be touched on their own threads (device
 * ranks of a sharded session). */
static gboolean
on_rank_threads (LingbotVaeDecoder * dec)
{
  return dec->group != NULL
      && lb_worker_group_get_backend (dec->group)->device_type != LB_DEVICE_CPU;
}

/**
 * lingbot_vae_decoder_free:
 * @dec: (nullable): a session
 *
 * Frees the session: its caches, buffers and device weight copies (a
 * sharded session on a device backend frees each rank's on the rank's
 * thread; do not call it from a rank function then).
 */
void
lingbot_vae_decoder_free (LingbotVaeDecoder * dec)
{
  if (dec == NULL)
    return;
  if (!on_rank_threads (dec)
      || !lb_worker_group_run (dec->group, rank_clear_func, dec, NULL)) {
    for (int r = 0; r < dec->n_ranks; r++)
      rank_clear (&dec->ranks[r]);
  }
  g_free (dec->ranks);
  g_free (dec->band_start);
  g_free (dec->band_count);
  g_free (dec->ag_counts);
  g_free (dec->ag_displs);
  if (dec->group)
    lb_worker_group_unref (dec->group);
  lingbot_vae_unref (dec->vae);
  g_free (dec);
}

/**
 * lingbot_vae_decoder_reset:
 * @dec: a session
 *
 * Starts a new session: zero history in every cache (the fill op on each
 * rank's stream), the next chunk is a first chunk again (4L - 3 frames).
 * Allocates nothing.  Call it where decode is called: a sharded session on
 * a device backend resets every rank on its own thread (a group job, so
 * not from a rank function); an unsharded device session on the thread
 * that owns its stream.  A device error is logged with g_warning().
 */
void
lingbot_vae_decoder_reset (LingbotVaeDecoder * dec)
{
  g_autoptr (GError) err = NULL;
  if (on_rank_threads (dec)) {
    if (!lb_worker_group_run (dec->group, rank_reset_func, dec, &err))
      g_warning ("VAE decoder reset: %s", err->message);
    return;
  }
  for (int r = 0; r < dec->n_ranks; r++) {
    if (!rank_reset (&dec->ranks[r], &err)) {
      g_warning ("VAE decoder reset, rank %d: %s", r, err->message);
      g_clear_error (&err);
    }
  }
}

/* Accepts [C, ...] or [1, C, ...]; returns a 4-D view. */
static gboolean
squeeze_batch (LbTensor * out, const LbTensor * t)
{
  if (t->ndim == 5 && t->shape[0] == 1)
    return lb_tensor_view_select (out, t, 0, 0);
  if (t->ndim != 4)
    return FALSE;
  lb_tensor_view (out, t);
  return TRUE;
}

static gboolean
check_args (LingbotVaeDecoder * dec, const LbTensor * latents,
    const LbTensor * frames, gboolean first, LbTensor * in, LbTensor * out,
    int *n, GError ** error)
{
  const int64_t S = LINGBOT_VAE_SPATIAL_STRIDE;
  if (!squeeze_batch (in, latents) || in->dtype != LB_DTYPE_F32
      || in->shape[0] != VAE_Z_DIM || in->shape[1] < 1
      || in->shape[1] > dec->max_latents || in->shape[2] != dec->H
      || in->shape[3] != dec->W) {
    g_autofree char *have = lb_tensor_shape_string (latents);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "VAE decode: latents are %s %s, expected f32 [%d, 1..%" G_GINT64_FORMAT
        ", %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]",
        lb_dtype_name (latents->dtype), have, VAE_Z_DIM, dec->max_latents,
        dec->H, dec->W);
    return FALSE;
  }
  if (!vae_check_host (latents, "VAE decode", "latents", error)
      || !vae_check_host (frames, "VAE decode", "frames", error))
    return FALSE;
  *n = lingbot_vae_frames_for_latents ((int) in->shape[1], first);
  if (!squeeze_batch (out, frames) || out->dtype != LB_DTYPE_F32
      || out->shape[0] != 3 || out->shape[1] < *n || out->shape[2] != dec->H * S
      || out->shape[3] != dec->W * S) {
    g_autofree char *have = lb_tensor_shape_string (frames);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "VAE decode: frames are %s %s, expected f32 [3, >=%d, %" G_GINT64_FORMAT
        ", %" G_GINT64_FORMAT "]",
        lb_dtype_name (frames->dtype), have, *n, dec->H * S, dec->W * S);
    return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_vae_decoder_decode:
 * @dec: a session
 * @latents: host f32 [16, L, h, w] (or [1, 16, L, h, w]), normalised
 *   latents as the DiT produces them, 1 <= L <= max_latent_frames; any
 *   strides (a device session: unit stride in the last dimension)
 * @frames: host f32 [3, T, 8h, 8w] (or with a leading 1), T >= the frame
 *   count; receives the decoded frames in [-1, 1] in frames [0, n) (a
 *   device session: unit stride in the last dimension)
 * @n_frames: (out) (optional): n = 4L - 3 for the first chunk of a session,
 *   4L after (13 / 16 for L = 4)
 * @error: %LB_ERROR_SHAPE naming the argument and both shapes;
 *   %LB_ERROR_INVALID_ARGUMENT for a device tensor; errors of the ops or
 *   of a rank
 *
 * Decodes one chunk, continuing the session's causal caches (spec A.5):
 * streaming any split of a latent sequence gives the same frames as
 * decoding it at once.  Sharded sessions run every rank on its band and
 * return when all rows are written.  On a device every rank uploads the
 * latents (one copy when contiguous), downloads its rows of the frames
 * (one copy per channel and frame when sharded, per channel otherwise) and
 * synchronises its stream once, so the frames are complete on return.
 * Allocates nothing.
 *
 * Returns: %TRUE on success.  After a failure the session's state is
 * undefined: reset it.
 */
gboolean
lingbot_vae_decoder_decode (LingbotVaeDecoder * dec, const LbTensor * latents,
    LbTensor * frames, int *n_frames, GError ** error)
{
  LbTensor in, out;
  int n;
  if (!check_args (dec, latents, frames, dec->ranks[0].first, &in, &out, &n,
          error))
    return FALSE;
  dec->in = &in;
  dec->out = &out;
  gboolean ok
      = dec->group
      ? lb_worker_group_run (dec->group, rank_decode_func, dec, error)
      : rank_decode (&dec->ranks[0], dec, &in, FALSE, &out, error);
  dec->in = NULL;
  dec->out = NULL;
  if (!ok)
    return FALSE;
  if (n_frames)
    *n_frames = n;
  return TRUE;
}

/**
 * lingbot_vae_decoder_set_frames_func:
 * @dec: a session
 * @func: (nullable): called as the frames of a decode become final, or
 *   %NULL (the default) for frames only on return
 * @user_data: for @func
 *
 * Frames handed on as they are made (spec A.5: the decoder runs latent
 * frame by latent frame, so frame 0 of a chunk is final after a quarter of
 * its decode).  During every decode after this call @func is called once
 * per latent frame, in order, with the frames [first, first + n) of the
 * caller's frames tensor that are now final on the host: (0, 1), (1, 4),
 * (5, 4), (9, 4) for a session's first chunk of 4 latent frames, (0, 4)
 * ... (12, 4) after.  It runs on rank 0's thread (the caller's when not
 * sharded) after every rank has written its rows (a barrier per latent
 * frame when sharded) and before the next latent frame starts, so a slow
 * @func delays the decode; it must not call into @dec.  On a device each
 * rank downloads and synchronises once per latent frame instead of once
 * per chunk.  The frames are the same bytes either way.  Set it between
 * decodes, not during one.
 */
void
lingbot_vae_decoder_set_frames_func (LingbotVaeDecoder * dec,
    LingbotVaeFramesFunc func, gpointer user_data)
{
  g_return_if_fail (dec != NULL);
  dec->frames_func = func;
  dec->frames_data = user_data;
}

/* @rank's part of @dec, %NULL when it is not a rank of the session's
 * worker group. */
static DecRank *
group_rank (LingbotVaeDecoder * dec, LbRank * rank, GError ** error)
{
  if (dec->group == NULL || rank == NULL || rank->group != dec->group
      || rank->rank < 0 || rank->rank >= dec->n_ranks) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "VAE decode: rank is not a rank of the session's worker group");
    return NULL;
  }
  return &dec->ranks[rank->rank];
}

/**
 * lingbot_vae_decoder_decode_on_rank:
 * @dec: a session from lingbot_vae_decoder_new_sharded()
 * @rank: the calling rank of the session's worker group, on its own thread
 * @latents: as for lingbot_vae_decoder_decode(), the full latent chunk
 *   (every rank reads its band of rows from it)
 * @frames: as for lingbot_vae_decoder_decode(); the rank writes its rows
 * @n_frames: (out) (optional): frames of the chunk
 * @error: as for lingbot_vae_decoder_decode()
 *
 * The per-rank half of lingbot_vae_decoder_decode(), for a rank function
 * that already runs on the group (the DiT colocated with the decoder,
 * DESIGN.md section 3): every rank of the group must call it with the same
 * chunk, since the ranks exchange halo rows and the attention input.  The
 * frames are complete once every rank has returned.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_vae_decoder_decode_on_rank (LingbotVaeDecoder * dec, LbRank * rank,
    const LbTensor * latents, LbTensor * frames, int *n_frames, GError ** error)
{
  DecRank *dr = group_rank (dec, rank, error);
  if (dr == NULL)
    return FALSE;
  LbTensor in, out;
  int n;
  if (!check_args (dec, latents, frames, dr->first, &in, &out, &n, error)
      || !rank_decode (dr, dec, &in, FALSE, &out, error))
    return FALSE;
  if (n_frames)
    *n_frames = n;
  return TRUE;
}

/**
 * lingbot_vae_decoder_decode_band_on_rank:
 * @dec: a session from lingbot_vae_decoder_new_sharded()
 * @rank: the calling rank of the session's worker group, on its own thread
 * @band: f32 [16, L, rows, w] (or with a leading 1): this rank's band of
 *   the chunk's latents, rows = lingbot_vae_decoder_get_band() of @rank,
 *   on the rank's device (host memory on CPU ranks), unit stride in the
 *   last dimension; e.g. the view lb_channel_receive() returns
 * @frames: as for lingbot_vae_decoder_decode(): host f32; the rank writes
 *   its rows
 * @n_frames: (out) (optional): frames of the chunk
 * @error: %LB_ERROR_SHAPE for a band of the wrong shape,
 *   %LB_ERROR_INVALID_ARGUMENT for one on another device; the errors of
 *   lingbot_vae_decoder_decode()
 *
 * lingbot_vae_decoder_decode_on_rank() from the rank's own rows where they
 * already are: nothing of the latents is uploaded (DESIGN.md 3: the DiT's
 * row band is the band the decode needs, handed over through a tensor
 * channel).  The result is bit for bit that of decoding the whole chunk,
 * since a rank reads only its band of it.  Every rank of the group must
 * call it for the same chunk.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_vae_decoder_decode_band_on_rank (LingbotVaeDecoder * dec,
    LbRank * rank, const LbTensor * band, LbTensor * frames, int *n_frames,
    GError ** error)
{
  DecRank *dr = group_rank (dec, rank, error);
  if (dr == NULL)
    return FALSE;
  const int64_t S = LINGBOT_VAE_SPATIAL_STRIDE;
  LbTensor in, out;
  if (!squeeze_batch (&in, band) || in.dtype != LB_DTYPE_F32
      || in.shape[0] != VAE_Z_DIM || in.shape[1] < 1
      || in.shape[1] > dec->max_latents || in.shape[2] != dr->rows
      || in.shape[3] != dec->W || in.stride[3] != 1) {
    g_autofree char *have = lb_tensor_shape_string (band);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "VAE decode: rank %d's band is %s %s, expected f32 [%d, 1..%"
        G_GINT64_FORMAT ", %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]",
        rank->rank, lb_dtype_name (band->dtype), have, VAE_Z_DIM,
        dec->max_latents, dr->rows, dec->W);
    return FALSE;
  }
  LbStream *st = dr->ctx.stream;
  const gboolean host = vae_stream_is_host (st);
  if (host ? in.device.type != LB_DEVICE_CPU
      : (in.device.type == LB_DEVICE_CPU || in.device.index != st->device)) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "VAE decode: rank %d's band is on %s:%d, not on the rank's device",
        rank->rank, in.device.type == LB_DEVICE_CPU ? "cpu" : "cuda",
        in.device.index);
    return FALSE;
  }
  int n = lingbot_vae_frames_for_latents ((int) in.shape[1], dr->first);
  if (!vae_check_host (frames, "VAE decode", "frames", error))
    return FALSE;
  if (!squeeze_batch (&out, frames) || out.dtype != LB_DTYPE_F32
      || out.shape[0] != 3 || out.shape[1] < n || out.shape[2] != dec->H * S
      || out.shape[3] != dec->W * S) {
    g_autofree char *have = lb_tensor_shape_string (frames);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "VAE decode: frames are %s %s, expected f32 [3, >=%d, %"
        G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]",
        lb_dtype_name (frames->dtype), have, n, dec->H * S, dec->W * S);
    return FALSE;
  }
  if (!rank_decode (dr, dec, &in, TRUE, &out, error))
    return FALSE;
  if (n_frames)
    *n_frames = n;
  return TRUE;
}

/**
 * lingbot_vae_decoder_get_n_ranks:
 *
 * Returns: the number of height bands (1 when not sharded).
 */
int
lingbot_vae_decoder_get_n_ranks (LingbotVaeDecoder * dec)
{
  return dec->n_ranks;
}

/**
 * lingbot_vae_decoder_get_band:
 * @rank: 0 .. n_ranks - 1
 * @row0: (out) (optional): first latent row of the band
 * @rows: (out) (optional): latent rows in the band
 */
void
lingbot_vae_decoder_get_band (LingbotVaeDecoder * dec, int rank, int64_t * row0,
    int64_t * rows)
{
  g_return_if_fail (rank >= 0 && rank < dec->n_ranks);
  if (row0)
    *row0 = dec->band_start[rank];
  if (rows)
    *rows = dec->band_count[rank];
}

/**
 * lingbot_vae_decoder_get_halo_bytes:
 *
 * Returns: bytes of halo rows all ranks sent during the last decode call
 * (0 when not sharded).
 */
guint64
lingbot_vae_decoder_get_halo_bytes (LingbotVaeDecoder * dec)
{
  guint64 n = 0;
  for (int r = 0; r < dec->n_ranks; r++)
    n += dec->ranks[r].halo_last;
  return n;
}

/**
 * lingbot_vae_decoder_get_halo_seconds:
 *
 * Returns: the longest time one rank spent in halo exchanges during the
 * last decode call (packing, sending, waiting for its neighbours,
 * unpacking), in seconds; 0 when not sharded.
 */
double
lingbot_vae_decoder_get_halo_seconds (LingbotVaeDecoder * dec)
{
  gint64 m = 0;
  for (int r = 0; r < dec->n_ranks; r++)
    m = MAX (m, dec->ranks[r].halo_us_last);
  return m / 1e6;
}

/**
 * lingbot_vae_decoder_get_cache_bytes:
 *
 * Returns: bytes of causal cache held by all ranks of the session (spec A.5
 * table; halo rows included).
 */
gsize
lingbot_vae_decoder_get_cache_bytes (LingbotVaeDecoder * dec)
{
  gsize n = 0;
  for (int r = 0; r < dec->n_ranks; r++)
    n += vae_ctx_cache_bytes (&dec->ranks[r].ctx);
  return n;
}

/* lingbot-gst: Wan2.1 video VAE (Wan2.1_VAE.pth), streaming encode/decode
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The causal video VAE of Wan2.1 that LingBot-World uses, exactly as
 * published (vae_and_distributed_spec.md section A): float32 weights under
 * the checkpoint's own key names, the 16 latent mean/std constants, causal
 * 3-D convolutions whose last input frames are cached per session so that
 * a stream decoded chunk by chunk equals a one-shot decode.
 *
 * Tensor conventions (batch is always 1 and omitted): latents are f32
 * [16, L, h, w] (h = H/8, w = W/8), pixels/frames are f32 [3, T, H, W] in
 * [-1, 1], channel order RGB.  A session (decoder or encoder) owns its
 * causal caches and every scratch buffer, allocated once when it is
 * created; per-chunk calls allocate nothing.
 *
 * Backends: a session runs on its stream's backend (a sharded decoder on
 * its worker group's ranks).  On the CPU it borrows the model's host
 * weights and reads / writes the API tensors in place.  On a device it
 * uploads its own f32 copy of the weights at creation (one per decoder
 * rank), keeps caches and scratch on the device, and stages the API
 * tensors, which are host tensors on every backend: inputs are uploaded,
 * outputs downloaded, and the stream is synchronised once per call (per
 * rank for a sharded decode), so the outputs are complete on return.  A
 * device session is used on the thread that owns its stream (a rank's
 * thread); docs/design/cuda.md, VAE.
 */
#pragma once

#include <glib.h>
#include <gio/gio.h>
#include "kernels/backend.h"
#include "lingbot/checkpoint.h"
#include "comm/worker-group.h"

G_BEGIN_DECLS

typedef struct _LingbotVae LingbotVae;
typedef struct _LingbotVaeDecoder LingbotVaeDecoder;
typedef struct _LingbotVaeEncoder LingbotVaeEncoder;

/**
 * LingbotVaeParts:
 * @LINGBOT_VAE_ENCODER: `encoder.*` and the top-level `conv1`
 * @LINGBOT_VAE_DECODER: `decoder.*` and the top-level `conv2`
 * @LINGBOT_VAE_BOTH: everything (the 194 tensors of spec A.7)
 *
 * Which half of the checkpoint to load; the other half's tensors may be
 * absent.
 */
typedef enum
{
  LINGBOT_VAE_ENCODER = 1 << 0,
  LINGBOT_VAE_DECODER = 1 << 1,
  LINGBOT_VAE_BOTH = LINGBOT_VAE_ENCODER | LINGBOT_VAE_DECODER,
} LingbotVaeParts;

/* Latent channels (Wan2.1 z_dim). */
#define LINGBOT_VAE_Z_DIM 16
/* Pixel rows/columns per latent row/column. */
#define LINGBOT_VAE_SPATIAL_STRIDE 8
/* Channels of the DiT condition input y: 4 mask + 16 latent (model spec 1.2).
 */
#define LINGBOT_VAE_COND_CHANNELS 20
/* Published base width of Wan2.1_VAE.pth. */
#define LINGBOT_VAE_DEFAULT_DIM 96

/* ---- model ---- */

LingbotVae *lingbot_vae_new_from_checkpoint (LingbotCheckpoint * ckpt,
    LingbotVaeParts parts, GError ** error);
LingbotVae *lingbot_vae_load (const char *path, LingbotVaeParts parts,
    GError ** error);
LingbotVae *lingbot_vae_ref (LingbotVae * vae);
void lingbot_vae_unref (LingbotVae * vae);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotVae, lingbot_vae_unref)
int lingbot_vae_get_dim (LingbotVae * vae);
LingbotVaeParts lingbot_vae_get_parts (LingbotVae * vae);
const float *lingbot_vae_latent_mean (void);
const float *lingbot_vae_latent_inv_std (void);
int lingbot_vae_frames_for_latents (int n_latents, gboolean first_chunk);

/* ---- decoder session ---- */

LingbotVaeDecoder *lingbot_vae_decoder_new (LingbotVae * vae,
    LbStream * stream, int latent_h, int latent_w, int max_latent_frames,
    GError ** error);
LingbotVaeDecoder *lingbot_vae_decoder_new_sharded (LingbotVae * vae,
    LbWorkerGroup * group, int latent_h, int latent_w, int max_latent_frames,
    GError ** error);
void lingbot_vae_decoder_free (LingbotVaeDecoder * dec);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotVaeDecoder, lingbot_vae_decoder_free)
void lingbot_vae_decoder_reset (LingbotVaeDecoder * dec);
gboolean lingbot_vae_decoder_decode (LingbotVaeDecoder * dec,
    const LbTensor * latents, LbTensor * frames, int *n_frames,
    GError ** error);
/* frames [first, first + n) of the decode in flight are final */
typedef void (*LingbotVaeFramesFunc) (int first, int n, gpointer user_data);
void lingbot_vae_decoder_set_frames_func (LingbotVaeDecoder * dec,
    LingbotVaeFramesFunc func, gpointer user_data);
gboolean lingbot_vae_decoder_decode_on_rank (LingbotVaeDecoder * dec,
    LbRank * rank, const LbTensor * latents, LbTensor * frames, int *n_frames,
    GError ** error);
gboolean lingbot_vae_decoder_decode_band_on_rank (LingbotVaeDecoder * dec,
    LbRank * rank, const LbTensor * band, LbTensor * frames, int *n_frames,
    GError ** error);
int lingbot_vae_decoder_get_n_ranks (LingbotVaeDecoder * dec);
void lingbot_vae_decoder_get_band (LingbotVaeDecoder * dec, int rank,
    int64_t * row0, int64_t * rows);
guint64 lingbot_vae_decoder_get_halo_bytes (LingbotVaeDecoder * dec);
double lingbot_vae_decoder_get_halo_seconds (LingbotVaeDecoder * dec);
gsize lingbot_vae_decoder_get_cache_bytes (LingbotVaeDecoder * dec);

/* ---- encoder session ---- */

LingbotVaeEncoder *lingbot_vae_encoder_new (LingbotVae * vae,
    LbStream * stream, int height, int width, GError ** error);
void lingbot_vae_encoder_free (LingbotVaeEncoder * enc);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotVaeEncoder, lingbot_vae_encoder_free)
void lingbot_vae_encoder_reset (LingbotVaeEncoder * enc);
gboolean lingbot_vae_encoder_encode (LingbotVaeEncoder * enc,
    const LbTensor * pixels, LbTensor * latents, GError ** error);
gboolean lingbot_vae_encoder_encode_condition (LingbotVaeEncoder * enc,
    const LbTensor * image, LbTensor * y, GError ** error);
void lingbot_vae_encoder_set_reuse_constant (LingbotVaeEncoder * enc,
    gboolean reuse);

/**
 * LingbotVaeLayerFunc:
 * @enc: the encoder
 * @segment: the latent frame of the call being encoded, from 0
 * @layer: the layer about to run, 0..@n_layers-1 (conv_in, the trunk's
 *   blocks, the head)
 * @n_layers: layers per latent frame
 * @user_data: what was given to lingbot_vae_encoder_set_layer_func()
 *
 * Called on the encoding thread before each layer of a latent frame the
 * encoder computes (not for frames served from the stored constant).
 */
typedef void (*LingbotVaeLayerFunc) (LingbotVaeEncoder * enc, int segment,
    int layer, int n_layers, gpointer user_data);

void lingbot_vae_encoder_set_cancellable (LingbotVaeEncoder * enc,
    GCancellable * cancellable);
void lingbot_vae_encoder_set_layer_func (LingbotVaeEncoder * enc,
    LingbotVaeLayerFunc func, gpointer user_data);
int lingbot_vae_encoder_get_constant_from (LingbotVaeEncoder * enc);
int lingbot_vae_encoder_get_n_encoded_segments (LingbotVaeEncoder * enc);
gboolean lingbot_vae_encode_image (LingbotVae * vae, LbStream * stream,
    const LbTensor * image, LbTensor * latent, GError ** error);

/* ---- output conversion ---- */

gboolean lingbot_vae_frames_to_rgb8 (const LbTensor * frames, int frame,
    guint8 * dst, gsize dst_stride, GError ** error);
gboolean lingbot_vae_frames_to_rgba (const LbTensor * frames, int frame,
    guint8 * dst, gsize dst_stride, GError ** error);
gboolean lingbot_vae_frames_to_i420 (const LbTensor * frames, int frame,
    guint8 * y, gsize y_stride, guint8 * u, gsize u_stride, guint8 * v,
    gsize v_stride, GError ** error);
gboolean lingbot_vae_frames_to_nv12 (const LbTensor * frames, int frame,
    guint8 * y, gsize y_stride, guint8 * uv, gsize uv_stride, GError ** error);
guint8 lingbot_vae_value_to_u8 (float x);

/* ---- random-weight checkpoints (lingbot-mkmodel) ---- */

/**
 * LINGBOT_VAE_MAX_RANDOM_DIM:
 *
 * The widest random VAE lingbot_vae_write_random() and a dummy manifest
 * make (the release's is 96).
 */
#define LINGBOT_VAE_MAX_RANDOM_DIM 1024
LingbotCheckpoint *lingbot_vae_random_checkpoint (const char *label,
    int dim, guint64 seed, GError ** error);
gboolean lingbot_vae_write_random (const char *path, int dim, guint64 seed,
    GError ** error);

G_END_DECLS

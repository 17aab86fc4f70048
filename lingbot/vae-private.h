/* lingbot-gst: Wan2.1 VAE internals shared by lingbot/vae-*.c (not installed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Spec: vae_and_distributed_spec.md A.3-A.7, A.10.
 */
#pragma once

#include "lingbot/vae.h"
#include "kernels/backend.h"
#include "kernels/error.h"
#include "comm/worker-group.h"

G_BEGIN_DECLS

/* Latent channels (z_dim); the normalisation constants have this many. */
#define VAE_Z_DIM 16

/* Frames a causal 3x3x3 conv keeps of its input (spec A.5). */
#define VAE_CACHE_T 2

/* One convolution: weight [Cout, Cin, kt, kh, kw] (2-D convs are viewed
 * with kt = 1; the attention's 1x1 Conv2d weights are viewed as 2-D
 * [Cout, Cin] gemm weights), bias [Cout]. */
typedef struct
{
  LbTensor w;
  LbTensor b;
  int cin, cout, kt, kh, kw;
} VaeConv;

typedef enum
{
  VAE_LAYER_RES,
  VAE_LAYER_ATTN,
  VAE_LAYER_UP3D,
  VAE_LAYER_UP2D,
  VAE_LAYER_DOWN2D,
  VAE_LAYER_DOWN3D,
} VaeLayerKind;

/* One entry of encoder.downsamples / decoder.middle / decoder.upsamples.
 * RES: gamma_a, a (conv_a), gamma_b, b (conv_b), sc (shortcut, has_sc).
 * ATTN: gamma_a (norm), a = to_qkv [3C, C], b = proj [C, C] (2-D views).
 * UP*: a = resample conv [C/2, C, 1, 3, 3], b = time_conv (has_time).
 * DOWN*: a = resample conv [C, C, 1, 3, 3] stride 2, b = time_conv. */
typedef struct
{
  VaeLayerKind kind;
  int cin, cout;
  LbTensor gamma_a, gamma_b;    /* [C] views */
  VaeConv a, b, sc;
  gboolean has_sc, has_time;
  char name[48];                /* weight prefix, for messages */
} VaeLayer;

/* Encoder or decoder trunk: conv_in -> layers -> head. */
typedef struct
{
  VaeConv conv_in;
  VaeLayer *layers;
  int n_layers;
  LbTensor head_gamma;
  VaeConv head;
} VaeNet;

struct _LingbotVae
{
  int dim;
  LingbotVaeParts parts;
  VaeNet enc, dec;
  VaeConv conv1_mu;             /* top-level conv1, rows 0..15 (mu) only */
  VaeConv conv2;                /* top-level conv2 16 -> 16 */
  float mean[VAE_Z_DIM];
  float inv_std[VAE_Z_DIM];
  LingbotCheckpoint *ckpt;      /* keeps the mapped weights alive */
  GPtrArray *owned;             /* LbTensor* converted to f32 at load */
};

/* ---- weights on a session's device (vae.c) ---- */

/* The weights one session (the encoder, or one rank of a decoder) computes
 * with: @net is the trunk, @extra the top-level conv (decoder: conv2 16 ->
 * 16; encoder: conv1's mu rows).  On the CPU backend they borrow the
 * model's host tensors (@owned NULL, @net.layers the model's array); on any
 * other backend every tensor is a contiguous f32 copy on the stream's
 * device (@owned holds them, @net.layers is a private array). */
typedef struct
{
  VaeNet net;
  VaeConv extra;
  GPtrArray *owned;             /* LbTensor* on the device; NULL when borrowing */
  gsize nbytes;                 /* bytes of those copies */
} VaeWeights;

gboolean vae_weights_init (VaeWeights * wt, LbStream * stream,
    const LingbotVae * vae, LingbotVaeParts part, GError ** error);
void vae_weights_clear (VaeWeights * wt);

/* ---- view helpers (vae-ops.c) ----
 * The VAE's compute steps are all op-table ops (kernels/ops.h: copy, clamp,
 * fill, accumulate, channel_rms_norm, upsample_nearest2x_halo,
 * latent_affine, besides the convs, gemm and attention), called through
 * lb_ops (ctx->stream). */

/* View helpers (no allocation). */
void vae_view_flat (LbTensor * out, const LbTensor * buf, int ndim,
    const int64_t * shape);
void vae_view4 (LbTensor * out, const LbTensor * buf, int64_t c, int64_t t,
    int64_t h, int64_t w);

/* Host <-> device staging of the API tensors (vae-ops.c). */
gboolean vae_stream_is_host (LbStream * stream);
gboolean vae_check_host (const LbTensor * t, const char *func, const char *what,
    GError ** error);
gboolean vae_copy_runs (LbStream * stream, LbTensor * dst, const LbTensor * src,
    LbCopyKind kind, const char *what, GError ** error);

/* ---- shared by the encoder and the decoder (vae-net.c) ---- */

/* Shape of the activation a net walk carries in VaeCtx.bx: [c, t, h, w]
 * contiguous (h = rows of this context's band at the current resolution). */
typedef struct
{
  int64_t c, t, h, w;
} VaeShape;

/* Per-rank execution context of one session (the encoder always has one).
 * With @plan set the walk computes no values: it records the scratch sizes
 * it would need and creates the cache slots, so that a session allocates
 * everything once, before its first chunk. */
typedef struct
{
  LbStream *stream;
  LbRank *rank;                 /* NULL when not sharded */
  int rank_index, n_ranks;
  /* bands of every rank at the net's input resolution */
  const int64_t *band_start, *band_count;
  int64_t full_rows;
  gsize *ag_counts, *ag_displs; /* all-gather counts/displacements */

  /* scratch, flat f32 */
  LbTensor *bx, *by, *bp, *bu;
  LbTensor *halo_send, *halo_recv;      /* [2 * halo_cap] each */
  int64_t halo_cap;
  LbTensor *xn_local, *xn_full, *akv, *ao, *ar; /* akv: q, k, v */
  /* synchronise the stream before each halo exchange / all-gather: device
   * ranks on the local collectives, whose peers copy from this rank's
   * buffers without waiting for its stream (vae_ctx_comm_ready()) */
  gboolean comm_sync;
  guint64 halo_bytes;           /* sent by this rank since the last reset */
  gint64 halo_us;               /* time in halo exchanges (incl. waiting) */

  /* caches, one per cached conv in execution order */
  GPtrArray *caches;            /* LbTensor* */
  gboolean *started;            /* per layer (resample first-call markers) */

  /* latent mean / float32 inv_std [16] on the stream's device
   * (vae_ctx_upload_latent_consts()) */
  LbTensor *mean, *inv_std;

  /* fixed-point tracking on a device: both compared views copied into
   * cmp_dev [2 * need_cmp], downloaded into cmp_host (CPU: NULL, compared
   * in place) */
  LbTensor *cmp_dev, *cmp_host;
  int n_layers;

  /* encoder fixed-point tracking */
  gboolean track_changes;
  gboolean changed;

  /* called before each layer of vae_net_forward() (conv_in, the trunk's
   * layers, the head: net->n_layers + 2 steps) when set; FALSE with
   * @error stops the walk there (the encoder's cancel) */
    gboolean (*step_func) (gpointer data, int step, int n_steps,
      GError ** error);
  gpointer step_data;

  /* bf16 channels-last conv inputs (decoder, on a backend whose
   * convolutions take them as they are: vae_ctx_choose_conv_inputs()):
   * the halo-padded input of every cached conv fed by a norm or conv_in
   * is written as bf16 NDHWC into bp16 after the 2 frames of its cache,
   * so conv3d_causal reads cat(cache, x) in place; those caches are bf16
   * NDHWC [2, h + 2, W, C] (docs/design/cuda.md "Channels-last conv
   * inputs") */
  gboolean in16;
  LbTensor *bp16;
  /* the oracle of that path in f32 NCDHW (LINGBOT_VAE_CONV_INPUT=round):
   * the same conv inputs rounded to bf16 values in place, through bp16 */
  gboolean round16;

  /* planning */
  gboolean plan;
  int64_t need_x, need_p, need_u, need_halo, need_attn_l, need_attn_f;
  int64_t need_cmp, need_p16;
} VaeCtx;

void vae_ctx_choose_conv_inputs (VaeCtx * ctx);
gboolean vae_ctx_plan (VaeCtx * ctx, const VaeNet * net, int64_t cin, int64_t t,
    int64_t rows, int64_t width, GError ** error);
gboolean vae_ctx_alloc (VaeCtx * ctx, int64_t extra_x, GError ** error);
void vae_ctx_clear (VaeCtx * ctx);
gboolean vae_ctx_reset (VaeCtx * ctx, GError ** error);
gboolean vae_ctx_upload_latent_consts (VaeCtx * ctx, const LingbotVae * vae,
    GError ** error);
gsize vae_ctx_cache_bytes (VaeCtx * ctx);

gboolean vae_net_forward (VaeCtx * ctx, const VaeNet * net,
    const LbTensor * x_in, VaeShape * s, GError ** error);

G_END_DECLS

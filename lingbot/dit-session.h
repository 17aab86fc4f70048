/* lingbot-gst: a streaming DiT session (rolling KV cache, 4 + 1 passes per
 * chunk, Ulysses over a worker group)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot_model_spec.md section 3.  A session owns, for its whole life, the
 * state of spec 3.4 that does not change between chunks: the text
 * cross-attention K/V, the time embeddings of the five timesteps, the RoPE
 * tables, the sampler's sigmas, the KV cache and every scratch buffer.  A
 * chunk then allocates nothing.
 */
#pragma once

#include <gio/gio.h>

#include "lingbot/dit.h"
#include "lingbot/scheduler.h"
#include "lingbot/noise.h"
#include "comm/worker-group.h"
#include "comm/channel.h"
#include "kernels/backend.h"

G_BEGIN_DECLS

#define LINGBOT_DIT_MAX_STEPS 8

typedef struct _LingbotDitSession LingbotDitSession;

/**
 * LingbotDitSessionOptions:
 * @latent_h: latent rows (h_lat = H / 8; even)
 * @latent_w: latent columns (even)
 * @chunk_frames: latent frames per chunk; 0 = the model's (4)
 * @local_attn_frames: KV window in latent frames; 0 = the model's (18),
 *   -1 = global (then @max_frames bounds the cache)
 * @sink_frames: attention sink in latent frames; -1 = the model's (6)
 * @max_frames: latent frames of the whole session, for a global cache
 * @scheduler: (nullable): the sampler's timesteps and sigmas
 *   (lingbot/scheduler.h; copied at session start); %NULL = the v2 default
 *   (shift 10, indices 0/250/500/750: t = 999, 967, 908, 768)
 * @math: the precision of the ranks' math on a device backend
 *   (#LbMathMode, kernels/backend.h).  %LB_MATH_FP32 (0, the default):
 *   f32 weights and f32 everywhere, the parity mode.  %LB_MATH_BF16: the
 *   served precision of spec 1.11: every rank stream's math is set to
 *   %LB_MATH_BF16 before its first op and every GEMM weight matrix (each
 *   linear layer's w) is uploaded as bf16, so GEMMs take bf16(x) and
 *   bf16 w with f32 accumulation; biases, norm weights, modulation tables,
 *   the residual stream and every activation buffer stay f32
 *   (docs/design/cuda.md, "BF16 storage").  Ignored on the CPU backend
 *   (f32 weights borrowed from the model, f32 math).
 * @max_attention_size: the self-attention span in tokens (spec 1.8:
 *   queries attend to the cache slots [max(0, local_end - span),
 *   local_end)); 0 = the model's (#LingbotDitConfig, whose 0 is the
 *   cache's capacity); a value above the capacity is the capacity (so
 *   %G_MAXINT forces the capacity whatever the model says); negative is
 *   %LB_ERROR_INVALID_ARGUMENT
 *
 * Zero-initialise, then set @latent_h and @latent_w.
 */
typedef struct
{
  int64_t latent_h, latent_w;
  int chunk_frames;
  int local_attn_frames;
  int sink_frames;
  int64_t max_frames;
  const LingbotScheduler *scheduler;
  LbMathMode math;
  int max_attention_size;
} LingbotDitSessionOptions;

#define LINGBOT_DIT_SESSION_OPTIONS_INIT { 0, 0, 0, 0, -1, 0, NULL, \
      LB_MATH_FP32, 0 }

/**
 * LingbotDitStepFunc:
 * @session: the session
 * @chunk: chunk index
 * @step: denoising step 0..n_steps-1, or n_steps for the clean t = 0 pass
 * @x_in: f32 [16, C, h, w] the DiT input latent
 * @pred: f32 [16, C, h, w] the flow prediction v
 * @x0: (nullable): f32 [16, C, h, w] `x_in - sigma * v`; %NULL for the
 *   clean pass
 * @user_data: what was given to lingbot_dit_session_set_step_callback()
 *
 * Called on rank 0's thread after every pass (tests, tracing).  The tensors
 * are rank 0's buffers, valid only during the call.
 */
typedef void (*LingbotDitStepFunc) (LingbotDitSession * session,
    int64_t chunk, int step, const LbTensor * x_in, const LbTensor * pred,
    const LbTensor * x0, gpointer user_data);

/**
 * LingbotDitPassFunc:
 * @session: the session
 * @chunk: chunk index
 * @pass: the pass just enqueued (on the CPU: just done), 0..@n_passes-1;
 *   @n_passes - 1 is the clean pass
 * @n_passes: n_steps + 1
 * @user_data: what was given to lingbot_dit_session_set_pass_callback()
 *
 * Called on rank 0's thread after every pass, before the pass boundary
 * (a cancel made here stops the chunk at that boundary).  It must not
 * call into the session.
 */
typedef void (*LingbotDitPassFunc) (LingbotDitSession * session,
    int64_t chunk, int pass, int n_passes, gpointer user_data);

LingbotDitSession *lingbot_dit_session_new (LingbotDit * dit,
    LbWorkerGroup * group, const LingbotDitSessionOptions * options,
    const LbTensor * text, GError ** error);
void lingbot_dit_session_set_output_channel (LingbotDitSession * session,
    LbChannel * channel);
void lingbot_dit_session_free (LingbotDitSession * session);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotDitSession, lingbot_dit_session_free)
gboolean lingbot_dit_session_run_chunk (LingbotDitSession * session,
    const LbTensor * y, const LbTensor * control,
    const LbTensor * const *noise, LbTensor * out, GError ** error);
gboolean lingbot_dit_session_run_chunk_noise (LingbotDitSession * session,
    const LbTensor * y, const LbTensor * control, LingbotNoise * noise,
    LbTensor * out, GError ** error);
gboolean lingbot_dit_session_run_chunk_poses (LingbotDitSession * session,
    const LbTensor * y, const LbTensor * rel_poses, const float k[4],
    int width, int height, const LbTensor * const *noise, LbTensor * out,
    GError ** error);
gboolean lingbot_dit_session_run_chunk_noise_poses (LingbotDitSession *
    session, const LbTensor * y, const LbTensor * rel_poses,
    const float k[4], int width, int height, LingbotNoise * noise,
    LbTensor * out, GError ** error);

void lingbot_dit_session_set_step_callback (LingbotDitSession * session,
    LingbotDitStepFunc func, gpointer user_data);
void lingbot_dit_session_set_pass_callback (LingbotDitSession * session,
    LingbotDitPassFunc func, gpointer user_data);
void lingbot_dit_session_set_cancellable (LingbotDitSession * session,
    GCancellable * cancellable);
gboolean lingbot_dit_session_is_cancelled (LingbotDitSession * session);
void lingbot_dit_session_request_stop (LingbotDitSession * session);
gboolean lingbot_dit_session_check_cancelled (LingbotDitSession * session,
    GError ** error);
int lingbot_dit_session_get_n_passes (LingbotDitSession * session);
int64_t lingbot_dit_session_get_chunk_index (LingbotDitSession * session);
int64_t lingbot_dit_session_get_frame_tokens (LingbotDitSession * session);
int64_t lingbot_dit_session_get_cache_capacity (LingbotDitSession * session);
int64_t lingbot_dit_session_get_max_attention_size (LingbotDitSession *
    session);
void lingbot_dit_session_get_cursors (LingbotDitSession * session,
    int64_t * global_end, int64_t * local_end);
gboolean lingbot_dit_session_get_kv_cache (LingbotDitSession * session,
    int layer, LbTensor * k, LbTensor * v, GError ** error);
void lingbot_dit_session_get_schedule (LingbotDitSession * session,
    int *n_steps, const double **timesteps, const double **sigma_x0,
    const double **sigma_renoise);

/* for benchmarks (tools/bench-dit.c): not for generation */
gboolean lingbot_dit_session_bench_fill_window (LingbotDitSession *
    session, GError ** error);

/**
 * LingbotDitRankShare:
 * @world_ranks: the ranks the work is split over (LbRank.n_ranks: for a
 *   solo group, the world it stands in for)
 * @band_row0: first token row of the rank's band of every latent frame
 * @band_rows: token rows of the band
 * @tokens: the rank's query tokens per chunk (frames x band_rows x width)
 * @heads: attention heads the rank attends over (heads / world_ranks)
 * @kv_cache_bytes: its self-attention KV cache on its device
 *
 * What one rank of a DiT session holds and computes.
 */
typedef struct
{
  int world_ranks;
  int64_t band_row0, band_rows, tokens;
  int heads;
  guint64 kv_cache_bytes;
} LingbotDitRankShare;

gboolean lingbot_dit_session_bench_get_share (LingbotDitSession * session,
    int rank, LingbotDitRankShare * out);

G_END_DECLS

/* lingbot-gst: the DiT session's state, shared by lingbot/dit-session*.c
 * (not installed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "lingbot/dit-session.h"
#include "lingbot/dit-private.h"

G_BEGIN_DECLS

/* One rank's buffers of a session (lingbot/dit-session-setup.c makes
 * them on the rank's thread). */
typedef struct
{
  LingbotDitRank core;
  LbTensor *in_full;            /* [in_dim, C, h, w] */
  LbTensor *tok_full;           /* [N, in_dim * 4] */
  LbTensor *tok;                /* [n, in_dim * 4]; NULL with one rank */
  LbTensor *ctl_in;             /* [ctl_ch, C, h, w] */
  LbTensor *poses;              /* [C, 16]: run_chunk_poses()'s poses */
  LbTensor *ctl_full;           /* [N, ctl_in] */
  LbTensor *ctl_tok;            /* [n, ctl_in]; NULL with one rank */
  LbTensor *lat, *pred, *x0, *tmp;      /* [out_dim, C, h, w] */
  LbTensor *noise[LINGBOT_DIT_MAX_STEPS];
  LbTensor *mods[LINGBOT_DIT_MAX_STEPS + 1];    /* [L, 6, D] */
  LbTensor *head_mods[LINGBOT_DIT_MAX_STEPS + 1];       /* [2, D] */
  /* host copies for the step callback (rank 0 on a device backend) */
  LbTensor *host_lat, *host_pred, *host_x0;
  LbTensor *kv_host;            /* [2, cap, hl * hd] of the cache's dtype;
                                 * made by get_kv_cache */
  /* page-locked staging of the chunk's uploads (device ranks): f32 y,
   * then the control or the poses, then the noise draws (stage_at()) */
  LbTensor *stage;
  gboolean ready;
  /* graphs of the steady-state chunk (rank_chunk()): one per pass, each
   * denoising pass with its sampler step, then the clean pass */
  gboolean graphs_ok;
  LbGraph *graphs[LINGBOT_DIT_MAX_STEPS + 1];
  int capture_fails;            /* failed captures (run_region()) */
} LingbotDitSessionRank;

struct _LingbotDitSession
{
  LingbotDit *dit;
  LbWorkerGroup *group;
  int n_ranks;
  LingbotDitSessionRank *ranks;

  int64_t lat_h, lat_w, frames, hp, wp, frame_tokens, cap, sink, text_len;
  gboolean global_cache;
  int64_t max_attention;        /* tokens, <= cap (spec 1.8) */
  LbMathMode math;              /* options->math (device backends only) */
  gboolean graphs;              /* LINGBOT_DIT_GRAPHS != "0" */
  int n_steps;
  double timesteps[LINGBOT_DIT_MAX_STEPS];
  double sigma_x0[LINGBOT_DIT_MAX_STEPS];
  double sigma_rn[LINGBOT_DIT_MAX_STEPS];
  int64_t chunk;

  LbTensor *noise_host[LINGBOT_DIT_MAX_STEPS];  /* for run_chunk_noise */

  LingbotDitStepFunc step_func;
  gpointer step_data;
  LingbotDitPassFunc pass_func;
  gpointer pass_data;

  /* lingbot_dit_session_set_cancellable(): set from any thread, read by
   * rank 0 at every pass boundary, both under cancel_lock */
  GMutex cancel_lock;
  GCancellable *cancellable;
  /* the chunk's pass boundaries (pass_boundary()): rank 0 publishes its
   * decision for each boundary, the other ranks wait for it */
  GMutex stop_lock;
  GCond stop_cond;
  int decided;                  /* last boundary rank 0 decided, -1 */
  int stop_at;                  /* boundary the chunk stopped at, -1 */
  gboolean rank0_failed;        /* rank 0 left the chunk with an error */
  gint stop_request;            /* atomic: lingbot_dit_session_request_stop() */

  /* lingbot_dit_session_set_output_channel(): each rank sends its row band
   * of every chunk's x0 there (set between chunks) */
  LbChannel *out_channel;
};

G_END_DECLS

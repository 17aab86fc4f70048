/* lingbot-gst: a streaming DiT session's setup: its ranks, new and free
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Split from lingbot/dit-session.c (see there): the per-rank buffers made
 * on each rank's thread, the session's options, lingbot_dit_session_new()
 * and lingbot_dit_session_free().
 */
#include "lingbot/dit-session.h"
#include "lingbot/dit-private.h"
#include "lingbot/dit-session-private.h"
#include "lingbot/scheduler.h"
#include "lingbot/control.h"
#include "comm/collectives.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* per-rank setup                                                           */
/* ------------------------------------------------------------------------ */

typedef struct
{
  LingbotDitSession *ses;
  const LbTensor *text;
} InitArgs;

static LbTensor *
new_4d (LbStream * s, int64_t c, int64_t f, int64_t h, int64_t w,
    GError ** error)
{
  int64_t shape[4] = { c, f, h, w };
  return lb_tensor_new_on (s, LB_DTYPE_F32, 4, shape, error);
}

static gboolean
rank_init (LbRank * rank, gpointer data, GError ** error)
{
  InitArgs *a = data;
  LingbotDitSession *ses = a->ses;
  LingbotDitSessionRank *sr = &ses->ranks[rank->rank];
  const LingbotDitConfig *cfg = &ses->dit->cfg;
  LbStream *s = rank->stream;
  LingbotDitRank *rs = &sr->core;

  /* the session's precision, before the stream's first op (the weights
   * upload reads it); the CPU backend computes in f32 whatever it says,
   * but in fp8 a CPU rank runs the oracle of the fp8 path (e4m3 weights,
   * gemm_fp8, a bf16 KV cache) */
  if (s->backend->device_type != LB_DEVICE_CPU)
    s->math = ses->math;
  else
    s->math = ses->math == LB_MATH_FP8 ? LB_MATH_FP8 : LB_MATH_FP32;
  if (!lingbot_dit_rank_init (rs, s, rank, ses->dit, ses->frames, ses->hp,
          ses->wp, ses->cap, ses->sink, ses->text_len, error))
    return FALSE;
  lingbot_dit_cache_set_max_attention (rs, ses->max_attention);
  if (!lingbot_dit_rank_reserve (rs, error))
    return FALSE;
  const int64_t F = ses->frames, h = ses->lat_h, w = ses->lat_w;
  const int64_t N = rs->sh.n_tokens, n = rs->sh.n_local;
  const int64_t pf = (int64_t) cfg->in_dim * 4;
  const int64_t cf = cfg->control_in_features;
  if (!(sr->in_full = new_4d (s, cfg->in_dim, F, h, w, error)) ||
      !(sr->tok_full = lingbot_dit_tensor_new (s, N, pf, error)) ||
      !(sr->ctl_in = new_4d (s, cf / 4, F, h, w, error)) ||
      !(sr->poses = lb_tensor_new_on (s, LB_DTYPE_F32, 2,
              (const int64_t[2]) { F, 16 }, error)) ||
      !(sr->ctl_full = lingbot_dit_tensor_new (s, N, cf, error)) ||
      !(sr->lat = new_4d (s, cfg->out_dim, F, h, w, error)) ||
      !(sr->pred = new_4d (s, cfg->out_dim, F, h, w, error)) ||
      !(sr->x0 = new_4d (s, cfg->out_dim, F, h, w, error)) ||
      !(sr->tmp = new_4d (s, cfg->out_dim, F, h, w, error)))
    return FALSE;
  if (rs->sh.n_ranks > 1 &&
      (!(sr->tok = lingbot_dit_tensor_new (s, n, pf, error)) ||
          !(sr->ctl_tok = lingbot_dit_tensor_new (s, n, cf, error))))
    return FALSE;
  for (int i = 0; i < ses->n_steps; i++)
    if (!(sr->noise[i] = new_4d (s, cfg->out_dim, F, h, w, error)))
      return FALSE;
  for (int p = 0; p <= ses->n_steps; p++) {
    int64_t ms[3] = { cfg->num_layers, 6, cfg->dim };
    int64_t hs[2] = { 2, cfg->dim };
    if (!(sr->mods[p] = lb_tensor_new_on (s, LB_DTYPE_F32, 3, ms, error)) ||
        !(sr->head_mods[p] = lb_tensor_new_on (s, LB_DTYPE_F32, 2, hs, error)))
      return FALSE;
    double t = p < ses->n_steps ? ses->timesteps[p] : 0.0;
    if (!lingbot_dit_time_mods (rs, t, sr->mods[p], sr->head_mods[p], error))
      return FALSE;
  }
  if (!lingbot_dit_text_kv (rs, a->text, FALSE, error))
    return FALSE;
  if (rank->rank == 0 && s->backend->device_type != LB_DEVICE_CPU) {
    /* page-locked where the backend has it: downloaded every pass */
    if (!(sr->host_lat = lb_tensor_new_host (s, LB_DTYPE_F32, 4,
                sr->lat->shape, error)) ||
        !(sr->host_pred = lb_tensor_new_host (s, LB_DTYPE_F32, 4,
                sr->lat->shape, error)) ||
        !(sr->host_x0 = lb_tensor_new_host (s, LB_DTYPE_F32, 4,
                sr->lat->shape, error)))
      return FALSE;
  }
  /* the chunk's inputs are staged in page-locked memory: an upload from
   * pageable memory can stall the rank thread while its peers' collectives
   * wait for it (docs/design.md "Multi-GPU start-up") */
  if (s->backend->device_type != LB_DEVICE_CPU) {
    int64_t n_stage = lb_tensor_numel (sr->in_full) -
        lb_tensor_numel (sr->lat) + MAX (lb_tensor_numel (sr->ctl_in),
        lb_tensor_numel (sr->poses)) + ses->n_steps * lb_tensor_numel (sr->lat);
    if (!(sr->stage = lb_tensor_new_host (s, LB_DTYPE_F32, 1, &n_stage, error)))
      return FALSE;
  }
  /* every start-up op done before the rank's first collective */
  if (s->backend->device_type != LB_DEVICE_CPU &&
      !s->backend->stream_synchronize (s, error))
    return FALSE;
  /* graph replay needs a capturing backend and collectives that run on the
   * stream (NCCL, solo; the local collectives synchronise host threads) */
  sr->graphs_ok = ses->graphs && lb_stream_can_capture (s) &&
      (rank->n_ranks == 1 || lb_comm_is_stream_ordered (rank));
  sr->ready = TRUE;
  return TRUE;
}

static void
rank_clear (LingbotDitSessionRank * sr)
{
  LbTensor **one[] = {
    &sr->in_full, &sr->tok_full, &sr->tok, &sr->ctl_in, &sr->poses,
    &sr->ctl_full,
    &sr->ctl_tok, &sr->lat, &sr->pred, &sr->x0, &sr->tmp, &sr->host_lat,
    &sr->host_pred, &sr->host_x0, &sr->kv_host, &sr->stage,
  };
  for (guint i = 0; i < G_N_ELEMENTS (one); i++)
    g_clear_pointer (one[i], lb_tensor_free);
  for (int i = 0; i < LINGBOT_DIT_MAX_STEPS; i++)
    g_clear_pointer (&sr->noise[i], lb_tensor_free);
  for (int i = 0; i <= LINGBOT_DIT_MAX_STEPS; i++) {
    g_clear_pointer (&sr->mods[i], lb_tensor_free);
    g_clear_pointer (&sr->head_mods[i], lb_tensor_free);
  }
  if (sr->core.s) {
    LbStream *s = sr->core.s;
    for (int p = 0; p <= LINGBOT_DIT_MAX_STEPS; p++) {
      if (sr->graphs[p])
        s->backend->graph_free (s, sr->graphs[p]);
      sr->graphs[p] = NULL;
    }
  }
  lingbot_dit_rank_clear (&sr->core);
}

static gboolean
rank_free (LbRank * rank, gpointer data, GError ** error)
{
  LingbotDitSession *ses = data;
  rank_clear (&ses->ranks[rank->rank]);
  return TRUE;
}

/* ------------------------------------------------------------------------ */
/* session                                                                  */
/* ------------------------------------------------------------------------ */

static gboolean
resolve_options (LingbotDitSession * ses, const LingbotDitSessionOptions * o,
    const LbTensor * text, GError ** error)
{
  const LingbotDitConfig *cfg = &ses->dit->cfg;
  if (o->latent_h <= 0 || o->latent_w <= 0 || o->latent_h % 2 ||
      o->latent_w % 2) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT session: latent grid %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
        " must be positive and even (patch 2x2)", o->latent_h, o->latent_w);
    return FALSE;
  }
  if (o->math != LB_MATH_FP32 && o->math != LB_MATH_BF16 &&
      o->math != LB_MATH_FP8) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT session: math mode %d, expected LB_MATH_FP32 (0), "
        "LB_MATH_BF16 (1) or LB_MATH_FP8 (2)", (int) o->math);
    return FALSE;
  }
  ses->math = o->math;
  ses->graphs = g_strcmp0 (g_getenv ("LINGBOT_DIT_GRAPHS"), "0") != 0;
  ses->lat_h = o->latent_h;
  ses->lat_w = o->latent_w;
  ses->hp = o->latent_h / 2;
  ses->wp = o->latent_w / 2;
  ses->frame_tokens = ses->hp * ses->wp;
  ses->frames = o->chunk_frames > 0 ? o->chunk_frames : cfg->chunk_frames;
  int window = o->local_attn_frames != 0 ? o->local_attn_frames :
      cfg->local_attn_frames;
  int sink = o->sink_frames >= 0 ? o->sink_frames : cfg->sink_frames;
  if (window == -1) {
    if (o->max_frames < ses->frames) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "DiT session: a global KV cache (local_attn_frames -1) needs "
          "max_frames >= %" G_GINT64_FORMAT, ses->frames);
      return FALSE;
    }
    ses->cap = o->max_frames * ses->frame_tokens;
    ses->sink = 0;
    ses->global_cache = TRUE;
  } else {
    if (window < sink + ses->frames) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "DiT session: window of %d frames cannot hold the %d-frame sink "
          "and a %" G_GINT64_FORMAT "-frame chunk", window, sink, ses->frames);
      return FALSE;
    }
    ses->cap = (int64_t) window *ses->frame_tokens;
    ses->sink = (int64_t) sink *ses->frame_tokens;
  }
  /* the attention span in tokens: the session's, else the model's; 0 and
   * anything past the capacity is the capacity */
  if (o->max_attention_size < 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT session: max_attention_size %d is negative (tokens; 0 = the "
        "model's)", o->max_attention_size);
    return FALSE;
  }
  ses->max_attention = o->max_attention_size > 0 ? o->max_attention_size :
      cfg->max_attention_size;
  if (ses->max_attention <= 0 || ses->max_attention > ses->cap)
    ses->max_attention = ses->cap;
  if (ses->hp > LINGBOT_DIT_ROPE_MAX_POS || ses->wp > LINGBOT_DIT_ROPE_MAX_POS) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT session: token grid wider than the RoPE table");
    return FALSE;
  }

  int64_t rows = text->ndim >= 2 ? text->shape[text->ndim - 2] : 0;
  int64_t width = text->shape[text->ndim - 1];
  if (text->dtype != LB_DTYPE_F32 || !lb_tensor_is_contiguous (text) ||
      width != cfg->text_dim || rows <= 0 ||
      lb_tensor_numel (text) != rows * width) {
    g_autofree char *have = lb_tensor_shape_string (text);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT session: text context is %s %s, expected contiguous f32 "
        "[1, L, %d]", lb_dtype_name (text->dtype), have, cfg->text_dim);
    return FALSE;
  }
  ses->text_len = rows;

  const LingbotScheduler *sched = o->scheduler;
  g_autoptr (LingbotScheduler) own = NULL;
  if (sched == NULL)
    sched = own = lingbot_scheduler_new_default ();
  ses->n_steps = (int) lingbot_scheduler_get_n_steps (sched);
  if (ses->n_steps < 1 || ses->n_steps > LINGBOT_DIT_MAX_STEPS) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT session: %d steps, expected 1 to %d", ses->n_steps,
        LINGBOT_DIT_MAX_STEPS);
    return FALSE;
  }
  for (int st = 0; st < ses->n_steps; st++) {
    ses->timesteps[st] =
        (double) lingbot_scheduler_get_step_timestep (sched, st);
    ses->sigma_x0[st] = lingbot_scheduler_get_x0_sigma (sched, st);
    ses->sigma_rn[st] = lingbot_scheduler_get_renoise_sigma (sched, st);
  }
  return TRUE;
}

/**
 * lingbot_dit_session_new:
 * @dit: the model (a reference is taken)
 * @group: (nullable): the worker group whose ranks run the DiT
 *   (sequence-parallel over all of them); %NULL makes a one-rank CPU group
 * @options: geometry, window/sink, schedule, precision (@options->math:
 *   on a device backend it sets every rank stream's #LbMathMode and, with
 *   %LB_MATH_BF16, the dtype of the uploaded GEMM weights)
 * @text: f32 [1, L, text_dim] umT5 output with padded rows zero (host)
 * @error: %LB_ERROR_INVALID_ARGUMENT (bad geometry, rank count not dividing
 *   the heads, a math mode that is not an #LbMathMode), %LB_ERROR_SHAPE
 *   (text), backend/op errors, %LB_ERROR_DEVICE when a buffer sized by the
 *   latent geometry cannot be allocated (the message names it and its
 *   bytes: "DiT session: noise of step 0 f32 [1, 16, 4, 60, 104]: cannot
 *   allocate ... bytes of host memory")
 *
 * Allocates every rank's buffers and computes what the session keeps: the
 * text cross-attention K/V of every block, the time embeddings and
 * modulations of the n + 1 timesteps, the RoPE tables and the sigmas.
 *
 * Returns: (transfer full) (nullable): the session.
 */
LingbotDitSession *
lingbot_dit_session_new (LingbotDit * dit, LbWorkerGroup * group,
    const LingbotDitSessionOptions * options, const LbTensor * text,
    GError ** error)
{
  LingbotDitSession *ses = g_new0 (LingbotDitSession, 1);
  g_mutex_init (&ses->cancel_lock);
  g_mutex_init (&ses->stop_lock);
  g_cond_init (&ses->stop_cond);
  ses->decided = ses->stop_at = -1;
  ses->dit = lingbot_dit_ref (dit);
  if (!resolve_options (ses, options, text, error))
    goto fail;
  if (group) {
    ses->group = lb_worker_group_ref (group);
  } else {
    LbWorkerGroupOptions go = { 0, NULL, "dit" };
    ses->group = lb_worker_group_new (lb_cpu_backend (), 1, NULL, &go, error);
    if (ses->group == NULL)
      goto fail;
  }
  ses->n_ranks = lb_worker_group_get_n_ranks (ses->group);
  if (dit->cfg.num_heads % ses->n_ranks != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT Ulysses: %d ranks do not divide the %d attention heads "
        "(use a rank count that divides %d)", ses->n_ranks,
        dit->cfg.num_heads, dit->cfg.num_heads);
    goto fail;
  }
  int64_t ns[5] = { 1, dit->cfg.out_dim, ses->frames, ses->lat_h,
    ses->lat_w
  };
  /* sized by the latent geometry: an error, not an abort */
  for (int i = 0; i < ses->n_steps; i++) {
    if (!(ses->noise_host[i] = lb_tensor_try_new (LB_DTYPE_F32, 5, ns, error))) {
      g_autofree char *sh = lb_shape_string (5, ns);
      g_prefix_error (error, "DiT session: noise of step %d f32 %s: ", i, sh);
      goto fail;
    }
  }
  ses->ranks = g_new0 (LingbotDitSessionRank, ses->n_ranks);
  InitArgs a = { ses, text };
  if (!lb_worker_group_run (ses->group, rank_init, &a, error))
    goto fail;
  return ses;

fail:
  lingbot_dit_session_free (ses);
  return NULL;
}

/**
 * lingbot_dit_session_free:
 * @session: (transfer full) (nullable): a session
 */
void
lingbot_dit_session_free (LingbotDitSession * session)
{
  if (session == NULL)
    return;
  if (session->group && lb_worker_group_is_broken (session->group))
    return;                     /* a rank may still use it: leaked */
  if (session->ranks) {
    if (session->group &&
        !lb_worker_group_run (session->group, rank_free, session, NULL)) {
      for (int r = 0; r < session->n_ranks; r++)
        rank_clear (&session->ranks[r]);
    }
    g_free (session->ranks);
  }
  if (session->group)
    lb_worker_group_unref (session->group);
  for (int i = 0; i < LINGBOT_DIT_MAX_STEPS; i++)
    g_clear_pointer (&session->noise_host[i], lb_tensor_free);
  lingbot_dit_unref (session->dit);
  g_clear_object (&session->cancellable);
  g_mutex_clear (&session->cancel_lock);
  g_mutex_clear (&session->stop_lock);
  g_cond_clear (&session->stop_cond);
  g_free (session);
}

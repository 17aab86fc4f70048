/* lingbot-gst: a streaming DiT session
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Spec 3.3-3.7.  Per chunk, on every rank of the worker group:
 *   control -> control tokens -> per-block camera scale/shift   (once)
 *   x = noise; 4 x { v = DiT(x, t_s); x0 = x - sigma_s v; re-noise }  (4 passes)
 *   DiT(x0, t = 0)  -- the clean pass that commits the chunk's K/V  (1 pass)
 * Every rank holds the whole latent (the head output is all-gathered), so
 * the sampler runs replicated, bit-identically, as in the reference.
 *
 * Between passes (and before the first) are the chunk's pass boundaries,
 * where a cancelled chunk stops (pass_boundary()); a stopped chunk leaves
 * the session as a repeat of the same chunk expects it (spec 3.3's
 * repeat-call rule, see lingbot_dit_session_set_cancellable()).
 *
 * The same code runs on any backend (docs/design/dit-devices.md): every
 * buffer is on the rank's device, the sampler is ops on that device, and
 * the host sees device data only through lb_tensor_download() (the chunk's
 * output, the step callback's copies, lingbot_dit_session_get_kv_cache()).
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
/* one chunk                                                                */
/* ------------------------------------------------------------------------ */

/* The error of a chunk cancelled at pass boundary @passes. */
static void
set_cancelled_error (LingbotDitSession * ses, int passes, GError ** error)
{
  g_set_error (error, LB_ERROR, LB_ERROR_CANCELLED,
      "chunk %" G_GUINT64_FORMAT " cancelled after %d of %d DiT passes",
      (guint64) ses->chunk, passes, ses->n_steps + 1);
}

/* One chunk's inputs: the control tensor itself (@control), or the poses
 * it is built from on every rank (@poses, @k, @width, @height; @control
 * %NULL). */
typedef struct
{
  LingbotDitSession *ses;
  const LbTensor *y, *control;
  const LbTensor *const *noise;
  LbTensor *out;
  const LbTensor *poses;
  float k[4];
  int width, height;
} ChunkArgs;

/* Where an input of the chunk is staged in sr->stage: 0 y, 1 the control
 * or the poses, 2 + i noise draw i; NULL on CPU ranks (no staging). */
static float *
stage_at (LingbotDitSession * ses, LingbotDitSessionRank * sr, int slot)
{
  if (sr->stage == NULL)
    return NULL;
  const int64_t lat = lb_tensor_numel (sr->lat);
  const int64_t y = lb_tensor_numel (sr->in_full) - lat;
  const int64_t ctl = MAX (lb_tensor_numel (sr->ctl_in),
      lb_tensor_numel (sr->poses));
  g_assert (slot < 2 + ses->n_steps);
  float *base = sr->stage->data;
  return slot == 0 ? base : slot == 1 ? base + y : base + y + ctl +
      (slot - 2) * lat;
}

/* Uploads a host tensor of matching element count into a device buffer
 * (or a contiguous part of one), through @stage (page-locked room for it)
 * when not %NULL. */
static gboolean
upload_as (LbStream * s, LbTensor * dst, const LbTensor * src, float *stage,
    const char *what, GError ** error)
{
  LbTensor v;
  if (src->dtype != LB_DTYPE_F32 || !lb_tensor_is_contiguous (src) ||
      lb_tensor_numel (src) != lb_tensor_numel (dst) ||
      !lb_tensor_view_reshape (&v, src, dst->ndim, dst->shape)) {
    g_autofree char *have = lb_tensor_shape_string (src);
    g_autofree char *want = lb_tensor_shape_string (dst);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT chunk: %s is %s %s, expected contiguous f32 [1, %s]", what,
        lb_dtype_name (src->dtype), have, want + 1);
    return FALSE;
  }
  if (stage != NULL) {
    memcpy (stage, src->data, (gsize) lb_tensor_numel (src) * sizeof (float));
    lb_tensor_view_init (&v, LB_DTYPE_F32, stage, LB_DEVICE_HOST, dst->ndim,
        dst->shape, NULL);
  }
  return lb_tensor_upload (s, dst, &v, error);
}

/* 2-D [rows, cols] view of a contiguous 4-D latent (for elementwise ops). */
static void
flat_view (LbTensor * out, const LbTensor * t)
{
  int64_t shape[2] = { t->shape[0], lb_tensor_numel (t) / t->shape[0] };
  lb_tensor_view_reshape (out, t, 2, shape);
}

static gboolean
forward (LingbotDitSession * ses, LingbotDitSessionRank * sr,
    const LbTensor * lat, int pass, int64_t current_start, GError ** error)
{
  LingbotDitRank *rs = &sr->core;
  LbStream *s = rs->s;
  const LbOps *ops = lb_ops (s);
  const int L = ses->dit->cfg.num_layers;
  const LbTensor *tok = sr->tok ? sr->tok : sr->tok_full;

  /* [x_t, y] -> tokens (spec 1.2, 1.3) */
  LbTensor xpart;
  lb_tensor_view_narrow (&xpart, sr->in_full, 0, 0, lat->shape[0]);
  if (!lingbot_dit_copy_rows (s, &xpart, lat, error) ||
      !ops->patchify (s, sr->in_full, 2, 2, sr->tok_full, error))
    return FALSE;
  if (sr->tok && !lingbot_dit_gather_band_rows (rs, sr->tok_full, sr->tok,
          error))
    return FALSE;
  if (rs->sh.n_local > 0 && !lingbot_dit_linear_apply (s, tok,
          &rs->wt.patch, 0.0f, rs->x, error))
    return FALSE;

  lingbot_dit_cache_begin (rs, current_start);
  for (int l = 0; l < L; l++) {
    LbTensor mod;
    lb_tensor_view_select (&mod, sr->mods[pass], 0, l);
    if (!lingbot_dit_block_forward (rs, l, &mod, current_start, error))
      return FALSE;
  }
  lingbot_dit_cache_end (rs, current_start);

  if (!lingbot_dit_head_forward (rs, sr->head_mods[pass], error))
    return FALSE;
  const LbTensor *z = rs->sh.n_ranks > 1 ? rs->z_full : rs->z;
  return ops->unpatchify (s, z, 2, 2, sr->pred, error);
}

/* The step callback sees host tensors: rank 0's own buffers on the CPU
 * backend, downloads into host copies made at session start otherwise. */
static gboolean
call_step_func (LingbotDitSession * ses, LingbotDitSessionRank * sr, int step,
    const LbTensor * x_in, const LbTensor * pred, const LbTensor * x0,
    GError ** error)
{
  LbStream *s = sr->core.s;
  if (s->backend->device_type != LB_DEVICE_CPU) {
    if (!lb_tensor_download (s, sr->host_lat, x_in, error) ||
        !lb_tensor_download (s, sr->host_pred, pred, error) ||
        (x0 && !lb_tensor_download (s, sr->host_x0, x0, error)))
      return FALSE;
    x_in = sr->host_lat;
    pred = sr->host_pred;
    x0 = x0 ? sr->host_x0 : NULL;
  }
  ses->step_func (ses, ses->chunk, step, x_in, pred, x0, ses->step_data);
  return TRUE;
}

/* Pass @pass of the chunk (spec 3.6-3.7).  A denoising pass (@pass <
 * n_steps): v = DiT(x), x0 = x - sigma v, then x re-noised for the next
 * pass; pass 0 starts from the initial noise.  The clean pass (@pass ==
 * n_steps): DiT(x0, t = 0), which commits the chunk's K/V. */
static gboolean
run_pass (LingbotDitSession * ses, LingbotDitSessionRank * sr, LbRank * rank,
    int64_t current_start, int pass, GError ** error)
{
  LbStream *s = sr->core.s;
  const LbOps *ops = lb_ops (s);
  const gboolean call = rank->rank == 0 && ses->step_func != NULL;
  if (pass == ses->n_steps)
    return forward (ses, sr, sr->x0, pass, current_start, error) &&
        (!call || call_step_func (ses, sr, pass, sr->x0, sr->pred, NULL,
            error));
  const int step = pass;
  LbTensor lat2, pred2, x02, tmp2, noise2;
  flat_view (&lat2, sr->lat);
  flat_view (&pred2, sr->pred);
  flat_view (&x02, sr->x0);
  flat_view (&tmp2, sr->tmp);
  if (step == 0 && !lingbot_dit_copy_rows (s, sr->lat, sr->noise[0], error))
    return FALSE;
  if (!forward (ses, sr, sr->lat, step, current_start, error))
    return FALSE;
  /* x0 = x - sigma v as float32 ops on every backend: sigma v rounded,
   * then the sum rounded (the reference evaluates it in float64 and
   * rounds once, lingbot_scheduler_x0(); within the golden tolerance,
   * see docs/design/dit-devices.md "Sampler") */
  const float sx = (float) ses->sigma_x0[step];
  if (!ops->scale (s, &pred2, -sx, 0.0f, &tmp2, error) ||
      !ops->add (s, &lat2, &tmp2, &x02, error))
    return FALSE;
  if (call && !call_step_func (ses, sr, step, sr->lat, sr->pred, sr->x0, error))
    return FALSE;
  if (step + 1 < ses->n_steps) {
    const float sr_ = (float) ses->sigma_rn[step];
    flat_view (&noise2, sr->noise[step + 1]);
    if (!ops->scale (s, &x02, 1.0f - sr_, 0.0f, &lat2, error) ||
        !ops->scale (s, &noise2, sr_, 0.0f, &tmp2, error) ||
        !ops->add (s, &lat2, &tmp2, &lat2, error))
      return FALSE;
  }
  return TRUE;
}

/* Failed captures after which a rank runs its passes directly for the
 * rest of the session (run_region()). */
#define CAPTURE_TRIES 3

/* Runs pass @pass directly, or, with @use_graph, as a graph: the first
 * time it is captured (the host code runs once in capture mode, so the
 * KV-cache cursors advance as usual) and launched; later the cursors are
 * advanced on the host as the pass would and the graph is replayed.  Only
 * for chunks that start from the same cache state (the caller's
 * steady-state test), so every pointer, view and scalar the pass uses is
 * the same as at capture.  One graph per pass, so that the pass boundaries
 * (cancellation, the pass callback) are the same with and without graphs.
 *
 * A capture that fails (graph_begin, the pass while capturing, or
 * graph_end: e.g. a call another thread made invalidated it) ran nothing
 * on the device, so the cursors the pass advanced on the host are put back
 * and the pass runs directly: the chunk goes on with the same bytes (an
 * error of the pass itself then comes from that run).  A later chunk
 * tries the capture again (the usual cause is transient), until the rank
 * has failed CAPTURE_TRIES captures: then it runs directly for the rest of
 * the session (a capture that cannot succeed would cost every chunk an
 * extra host pass). */
static gboolean
run_region (LingbotDitSession * ses, LingbotDitSessionRank * sr, LbRank * rank,
    int64_t current_start, int pass, gboolean use_graph, GError ** error)
{
  LingbotDitRank *rs = &sr->core;
  LbStream *s = rs->s;
  LbBackend *be = s->backend;
  LbGraph **graph = &sr->graphs[pass];
  if (!use_graph || (*graph == NULL && !sr->graphs_ok))
    return run_pass (ses, sr, rank, current_start, pass, error);
  if (*graph == NULL) {
    const int64_t ge = rs->global_end, le = rs->local_end;
    const int64_t pe = rs->pend_evict, pl = rs->pend_local_end;
    GError *local = NULL;
    LbGraph *g = NULL;
    if (be->graph_begin (s, &local)) {
      gboolean ok = run_pass (ses, sr, rank, current_start, pass, &local);
      g = be->graph_end (s, ok ? &local : NULL);
      if (!ok && g) {
        be->graph_free (s, g);
        g = NULL;
      }
    }
    if (g == NULL) {
      rs->global_end = ge;
      rs->local_end = le;
      rs->pend_evict = pe;
      rs->pend_local_end = pl;
      if (++sr->capture_fails >= CAPTURE_TRIES) {
        sr->graphs_ok = FALSE;
        g_message ("DiT rank %d: %d graph captures failed, passes run "
            "directly from now on (last: %s)", rank->rank, sr->capture_fails,
            local ? local->message : "no error");
      }
      g_clear_error (&local);
      return run_pass (ses, sr, rank, current_start, pass, error);
    }
    *graph = g;
  } else {
    lingbot_dit_cache_begin (rs, current_start);
    lingbot_dit_cache_end (rs, current_start);
  }
  return be->graph_launch (s, *graph, error);
}

/* Pass boundary @b of the chunk (@b passes done: 0 before the first,
 * n_passes after the clean pass).  Rank 0 decides from the cancellable
 * whether the chunk stops here and publishes the decision; every other
 * rank waits for rank 0's decision on the same boundary before it goes on.
 * So all ranks stop at one boundary, the first one rank 0 reaches after
 * the cancel (no rank can be in a pass the others skip, which would leave
 * it waiting in an all-to-all), and a cancel made on rank 0's thread
 * after pass p (the pass callback) stops the chunk at boundary p + 1 on
 * every rank.  Only host threads meet here (a mutex and a condition, no
 * collective, nothing on a stream): on device ranks the other ranks' host
 * threads wait for rank 0's host thread to have enqueued the pass.
 * Returns %FALSE on a group abort, rank 0's failure or the group's
 * timeout; *@stop tells whether the chunk stops at @b. */
static gboolean
pass_boundary (LingbotDitSession * ses, LbRank * rank, int b,
    gboolean * stop, GError ** error)
{
  if (rank->rank == 0) {
    *stop = lingbot_dit_session_is_cancelled (ses) ||
        g_atomic_int_get (&ses->stop_request);
    g_mutex_lock (&ses->stop_lock);
    ses->decided = b;
    if (*stop)
      ses->stop_at = b;
    g_cond_broadcast (&ses->stop_cond);
    g_mutex_unlock (&ses->stop_lock);
    return TRUE;
  }
  const gint64 deadline = lb_rank_deadline (rank);
  gboolean ok = TRUE;
  g_mutex_lock (&ses->stop_lock);
  while (ok && ses->decided < b && !ses->rank0_failed) {
    /* wake now and then to notice a group abort (a failed rank) */
    const gint64 now = g_get_monotonic_time ();
    if (now >= deadline) {
      g_set_error (error, LB_ERROR, LB_ERROR_TIMEOUT,
          "DiT chunk: rank %d waited %u ms for rank 0 at pass boundary %d",
          rank->rank, lb_worker_group_get_timeout_ms (rank->group), b);
      ok = FALSE;
      break;
    }
    g_cond_wait_until (&ses->stop_cond, &ses->stop_lock,
        MIN (deadline, now + 20 * G_TIME_SPAN_MILLISECOND));
    g_mutex_unlock (&ses->stop_lock);
    ok = lb_rank_check_abort (rank, error);
    g_mutex_lock (&ses->stop_lock);
  }
  if (ok && ses->decided < b) {
    g_set_error (error, LB_ERROR, LB_ERROR_RANK_FAILED,
        "DiT chunk: rank 0 failed before pass boundary %d", b);
    ok = FALSE;
  }
  *stop = ok && ses->stop_at == b;
  g_mutex_unlock (&ses->stop_lock);
  return ok;
}

static gboolean
rank_chunk_run (LbRank * rank, ChunkArgs * a, GError ** error)
{
  LingbotDitSession *ses = a->ses;
  LingbotDitSessionRank *sr = &ses->ranks[rank->rank];
  LingbotDitRank *rs = &sr->core;
  LbStream *s = rs->s;
  const LbOps *ops = lb_ops (s);
  const int L = ses->dit->cfg.num_layers;
  const int n_passes = ses->n_steps + 1;
  const int64_t current_start = ses->chunk * ses->frames * ses->frame_tokens;
  const int64_t out_ch = ses->dit->cfg.out_dim;
  gboolean stop = FALSE;

  /* boundary 0: a chunk cancelled before its passes changes nothing */
  if (!pass_boundary (ses, rank, 0, &stop, error))
    return FALSE;
  if (stop)
    return TRUE;

  /* inputs of the chunk */
  LbTensor ypart;
  lb_tensor_view_narrow (&ypart, sr->in_full, 0, out_ch,
      sr->in_full->shape[0] - out_ch);
  if (!upload_as (s, &ypart, a->y, stage_at (ses, sr, 0), "y", error))
    return FALSE;
  if (a->control == NULL) {
    /* the control tensor from the chunk's poses, on the rank's device
     * (spec 2.6-2.7; bit-identical to lingbot_control_fill()) */
    if (!upload_as (s, sr->poses, a->poses, stage_at (ses, sr, 1),
            "rel_poses", error) ||
        !ops->ray_map (s, sr->poses, a->k[0], a->k[1], a->k[2], a->k[3],
            a->width, a->height, 0, sr->ctl_in, error))
      return FALSE;
  } else if (!upload_as (s, sr->ctl_in, a->control, stage_at (ses, sr, 1),
          "control", error)) {
    return FALSE;
  }
  for (int i = 0; i < ses->n_steps; i++)
    if (!upload_as (s, sr->noise[i], a->noise[i], stage_at (ses, sr, 2 + i),
            "noise", error))
      return FALSE;

  /* control tokens and the camera scale/shift of every block: once */
  if (!ops->patchify (s, sr->ctl_in, 2, 2, sr->ctl_full, error))
    return FALSE;
  if (sr->ctl_tok && !lingbot_dit_gather_band_rows (rs, sr->ctl_full,
          sr->ctl_tok, error))
    return FALSE;
  if (!lingbot_dit_control_tokens (rs, sr->ctl_tok ? sr->ctl_tok :
          sr->ctl_full, error))
    return FALSE;
  for (int l = 0; l < L; l++)
    if (!lingbot_dit_camera_precompute (rs, l, error))
      return FALSE;
  /* the chunk's RoPE frame positions: after this nothing in a pass depends
   * on the chunk index */
  if (!lingbot_dit_rope_chunk (rs, current_start / ses->frame_tokens, error))
    return FALSE;

  /* Steady state of a rolling window: the window was full when the chunk
   * starts and the chunk follows the last one, so every chunk from here on
   * evicts, writes and attends at the same cache slots: its passes are
   * captured once and replayed (CUDA Graphs; not with a step callback,
   * which downloads inside the passes).  A chunk repeated after a cancel
   * starts from other cursors (spec 3.3's repeat call) and runs directly. */
  const gboolean use_graph = sr->graphs_ok && ses->step_func == NULL &&
      !ses->global_cache && rs->local_end == ses->cap &&
      rs->global_end == current_start;

  for (int pass = 0; pass < n_passes && !stop; pass++) {
    if (!run_region (ses, sr, rank, current_start, pass, use_graph, error))
      return FALSE;
    if (rank->rank == 0 && ses->pass_func)
      ses->pass_func (ses, ses->chunk, pass, n_passes, ses->pass_data);
    if (!pass_boundary (ses, rank, pass + 1, &stop, error))
      return FALSE;
  }

  /* the chunk's result: x0 of the last denoising pass (the clean pass
   * reads it and leaves it), only for a chunk that was not stopped */
  if (!stop && rank->rank == 0 && a->out) {
    LbTensor outv;
    if (!lb_tensor_view_reshape (&outv, a->out, 4, sr->x0->shape) ||
        !lb_tensor_download (s, sr->host_x0 ? sr->host_x0 : &outv, sr->x0,
            error))
      return FALSE;
    /* through page-locked memory on a device (host_x0) */
    if (sr->host_x0)
      memcpy (outv.data, sr->host_x0->data,
          (gsize) lb_tensor_numel (sr->x0) * sizeof (float));
  }
  /* ... and through the output channel: this rank's row band, where it
   * is (the slot's commit orders it on device ranks; it waits for a free
   * slot when the decode is behind) */
  if (!stop && ses->out_channel) {
    int64_t r0, nr;
    LbTensor band;
    lb_split_rows (ses->lat_h, rank->n_ranks, rank->rank, &r0, &nr);
    lb_tensor_view_narrow (&band, sr->x0, 2, r0, nr);
    /* (the band is strided: copied into the slot by runs) */
    LbTensor slot;
    if (!lb_channel_acquire (ses->out_channel, rank, &slot, error) ||
        !lingbot_dit_copy_rows (s, &slot, &band, error) ||
        !lb_channel_commit (ses->out_channel, rank, error))
      return FALSE;
  }
  /* the chunk is done when run_chunk returns (and its errors are its own);
   * a stopped one too: its uploads read host buffers the next chunk
   * rewrites */
  return s->backend->device_type == LB_DEVICE_CPU ||
      s->backend->stream_synchronize (s, error);
}

static gboolean
rank_chunk (LbRank * rank, gpointer data, GError ** error)
{
  ChunkArgs *a = data;
  LingbotDitSession *ses = a->ses;
  if (rank_chunk_run (rank, a, error))
    return TRUE;
  if (rank->rank == 0) {
    /* the other ranks may be waiting for rank 0 at a pass boundary */
    g_mutex_lock (&ses->stop_lock);
    ses->rank0_failed = TRUE;
    g_cond_broadcast (&ses->stop_cond);
    g_mutex_unlock (&ses->stop_lock);
  }
  return FALSE;
}

/* The chunk checks shared by run_chunk and run_chunk_poses, then
 * rank_chunk() on every rank. */
static gboolean
run_chunk_args (LingbotDitSession * session, ChunkArgs * a, GError ** error)
{
  /* no limit on the frame positions: past the RoPE tables the chunk's
   * angles come from the same formula (lingbot_dit_rope_chunk()) */
  const int64_t end_frame = (session->chunk + 1) * session->frames;
  if (!lingbot_dit_session_check_cancelled (session, error))
    return FALSE;
  if (session->global_cache && end_frame * session->frame_tokens > session->cap) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "DiT session: global KV cache full after %" G_GINT64_FORMAT
        " chunks", session->chunk);
    return FALSE;
  }
  for (int i = 0; i < session->n_steps; i++) {
    if (a->noise[i] == NULL) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "DiT chunk: noise draw %d is missing", i);
      return FALSE;
    }
  }
  LbTensor *out = a->out;
  if (out && (out->dtype != LB_DTYPE_F32 || !lb_tensor_is_contiguous (out) ||
          lb_tensor_numel (out) != lb_tensor_numel (session->ranks[0].x0))) {
    g_autofree char *have = lb_tensor_shape_string (out);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT chunk: out is %s, expected contiguous f32 [1, %d, %"
        G_GINT64_FORMAT ", %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]", have,
        session->dit->cfg.out_dim, session->frames, session->lat_h,
        session->lat_w);
    return FALSE;
  }
  session->decided = session->stop_at = -1;
  session->rank0_failed = FALSE;
  g_atomic_int_set (&session->stop_request, 0);
  if (!lb_worker_group_run (session->group, rank_chunk, a, error))
    return FALSE;
  if (session->stop_at >= 0) {
    set_cancelled_error (session, session->stop_at, error);
    return FALSE;
  }
  session->chunk++;
  return TRUE;
}

/**
 * lingbot_dit_session_set_output_channel:
 * @session: a session, between chunks
 * @channel: (nullable): a channel from the session's worker group
 *   (producer) of f32 [out_dim, C, h, w] messages sharded on dim 2 with
 *   the default producer split (lb_split_rows() over the group's ranks);
 *   %NULL stops sending.  The caller keeps it alive while it is set
 *
 * After every chunk that was not stopped, each rank sends its row band of
 * the chunk's x0 into @channel (lb_channel_send() on the rank's stream):
 * message m is the m-th chunk made since.  A rank waits there for a free
 * slot when the consumer is n_slots chunks behind.  The host output of
 * run_chunk (@out) still works beside it.
 */
void
lingbot_dit_session_set_output_channel (LingbotDitSession * session,
    LbChannel * channel)
{
  session->out_channel = channel;
}

/**
 * lingbot_dit_session_run_chunk:
 * @session: a session
 * @y: f32 [1, 20, C, h, w] mask + condition latent (host)
 * @control: f32 [1, 384, C, h, w] camera control (host; lingbot/control.h)
 * @noise: (array length=n_steps): f32 [1, 16, C, h, w] host tensors: the
 *   chunk's initial noise, then the re-noise draw of each step s < n-1
 * @out: (nullable): f32 [1, 16, C, h, w] host tensor for the denoised
 *   latent x0
 * @error: %LB_ERROR_SHAPE for inputs of the wrong shape;
 *   %LB_ERROR_CANCELLED when the session's cancellable is cancelled
 *   (lingbot_dit_session_set_cancellable()); op or collective errors
 *   (%LB_ERROR_RANK_FAILED on the other ranks)
 *
 * Generates chunk k = lingbot_dit_session_get_chunk_index(): the control
 * tokens and the per-block camera scale/shift once, n denoising passes at
 * current_start = k C T_f, then the clean t = 0 pass that leaves the
 * chunk's clean K/V in the cache (spec 3.3-3.7).  Any chunk index works:
 * past the RoPE tables' 1024 frames the angles come from the same
 * formula (lingbot_dit_rope_chunk()); time and memory per chunk do not
 * depend on k.  After each pass the pass callback runs on rank 0's thread
 * (lingbot_dit_session_set_pass_callback()).
 *
 * Returns: %TRUE on success; the chunk index then advances.
 */
gboolean
lingbot_dit_session_run_chunk (LingbotDitSession * session,
    const LbTensor * y, const LbTensor * control,
    const LbTensor * const *noise, LbTensor * out, GError ** error)
{
  g_return_val_if_fail (session && y && control && noise, FALSE);
  ChunkArgs a = { session, y, control, noise, out, NULL, {0}, 0, 0 };
  return run_chunk_args (session, &a, error);
}

/**
 * lingbot_dit_session_run_chunk_poses:
 * @session: a session
 * @y: f32 [1, 20, C, h, w] mask + condition latent (host)
 * @rel_poses: f32 host tensor of C x 16 elements, contiguous (e.g.
 *   [C, 4, 4]): the chunk's relative camera-to-world poses, row-major
 *   4x4, translation already scaled (lingbot_control_get_chunk_rel_poses())
 * @k: fx, fy, cx, cy in pixels at the output size
 *   (lingbot_control_get_intrinsics())
 * @width: output width in pixels, 8 w
 * @height: output height in pixels, 8 h
 * @noise: as for lingbot_dit_session_run_chunk()
 * @out: (nullable): as for lingbot_dit_session_run_chunk()
 * @error: %LB_ERROR_SHAPE for inputs of the wrong shape,
 *   %LB_ERROR_INVALID_ARGUMENT for a size that is not the latent grid's,
 *   %LB_ERROR_UNSUPPORTED for a model whose control input is not the
 *   384-channel ray map; the errors of lingbot_dit_session_run_chunk()
 *
 * lingbot_dit_session_run_chunk() with the control tensor built on every
 * rank's device: each rank uploads the C x 16 poses (into a buffer made
 * with the session) and runs the ray_map op (kernels/ops.h) into its
 * control input instead of uploading the [384, C, h, w] tensor (38 MB at
 * 832x480).  The op is bit-identical to lingbot_control_pack() of the
 * same poses and intrinsics (spec 2.6-2.7), so the chunk is too.
 *
 * Returns: %TRUE on success; the chunk index then advances.
 */
gboolean
lingbot_dit_session_run_chunk_poses (LingbotDitSession * session,
    const LbTensor * y, const LbTensor * rel_poses, const float k[4],
    int width, int height, const LbTensor * const *noise, LbTensor * out,
    GError ** error)
{
  g_return_val_if_fail (session && y && rel_poses && k && noise, FALSE);
  const LbTensor *ctl_in = session->ranks[0].ctl_in;
  if (ctl_in->shape[0] != LINGBOT_CONTROL_CHANNELS) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "DiT chunk: the model's control input has %" G_GINT64_FORMAT
        " channels, the ray map has %d", ctl_in->shape[0],
        LINGBOT_CONTROL_CHANNELS);
    return FALSE;
  }
  if (rel_poses->dtype != LB_DTYPE_F32 ||
      !lb_tensor_is_contiguous (rel_poses) ||
      lb_tensor_numel (rel_poses) != session->frames * 16) {
    g_autofree char *have = lb_tensor_shape_string (rel_poses);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT chunk: rel_poses is %s %s, expected contiguous f32 [%"
        G_GINT64_FORMAT ", 16]", lb_dtype_name (rel_poses->dtype), have,
        session->frames);
    return FALSE;
  }
  if ((int64_t) width != session->lat_w * 8 ||
      (int64_t) height != session->lat_h * 8) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT chunk: output size %dx%d is not the latent grid's %"
        G_GINT64_FORMAT "x%" G_GINT64_FORMAT, width, height,
        session->lat_w * 8, session->lat_h * 8);
    return FALSE;
  }
  ChunkArgs a = { session, y, NULL, noise, out, rel_poses,
    {k[0], k[1], k[2], k[3]}, width, height
  };
  return run_chunk_args (session, &a, error);
}

/* The chunk's initial noise and re-noise draws into noise_host. */
static gboolean
draw_noise (LingbotDitSession * session, LingbotNoise * noise, GError ** error)
{
  const guint chunk = (guint) session->chunk;
  for (int i = 0; i < session->n_steps; i++) {
    LingbotNoisePurpose p = i ? LINGBOT_NOISE_RENOISE : LINGBOT_NOISE_INITIAL;
    if (!lingbot_noise_fill (noise, chunk, p, i ? i - 1 : 0,
            session->noise_host[i], session->lat_h, 0, error))
      return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_dit_session_run_chunk_noise:
 * @session: a session
 * @y: as for lingbot_dit_session_run_chunk()
 * @control: as for lingbot_dit_session_run_chunk()
 * @noise: the session's noise source (lingbot/noise.h: Philox keyed by
 *   seed, chunk and element, or tensors from a file)
 * @out: (nullable): as for lingbot_dit_session_run_chunk()
 * @error: noise or chunk errors
 *
 * Draws the chunk's initial noise and its re-noise draws from @noise (into
 * buffers allocated with the session), then runs the chunk.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_session_run_chunk_noise (LingbotDitSession * session,
    const LbTensor * y, const LbTensor * control, LingbotNoise * noise,
    LbTensor * out, GError ** error)
{
  return lingbot_dit_session_check_cancelled (session, error) &&
      draw_noise (session, noise, error) &&
      lingbot_dit_session_run_chunk (session, y, control,
      (const LbTensor * const *) session->noise_host, out, error);
}

/**
 * lingbot_dit_session_run_chunk_noise_poses:
 * @session: a session
 * @y: as for lingbot_dit_session_run_chunk()
 * @rel_poses: as for lingbot_dit_session_run_chunk_poses()
 * @k: as for lingbot_dit_session_run_chunk_poses()
 * @width: as for lingbot_dit_session_run_chunk_poses()
 * @height: as for lingbot_dit_session_run_chunk_poses()
 * @noise: the session's noise source, as for
 *   lingbot_dit_session_run_chunk_noise()
 * @out: (nullable): as for lingbot_dit_session_run_chunk()
 * @error: noise or chunk errors
 *
 * lingbot_dit_session_run_chunk_noise() with the control tensor built on
 * the ranks' devices (lingbot_dit_session_run_chunk_poses()).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_session_run_chunk_noise_poses (LingbotDitSession * session,
    const LbTensor * y, const LbTensor * rel_poses, const float k[4],
    int width, int height, LingbotNoise * noise, LbTensor * out,
    GError ** error)
{
  return lingbot_dit_session_check_cancelled (session, error) &&
      draw_noise (session, noise, error) &&
      lingbot_dit_session_run_chunk_poses (session, y, rel_poses, k, width,
      height, (const LbTensor * const *) session->noise_host, out, error);
}

/* ------------------------------------------------------------------------ */
/* accessors                                                                */
/* ------------------------------------------------------------------------ */

/**
 * lingbot_dit_session_set_step_callback:
 * @session: a session
 * @func: (nullable): called after every pass, see #LingbotDitStepFunc
 * @user_data: passed to @func
 */
void
lingbot_dit_session_set_step_callback (LingbotDitSession * session,
    LingbotDitStepFunc func, gpointer user_data)
{
  session->step_func = func;
  session->step_data = user_data;
}

/**
 * lingbot_dit_session_set_pass_callback:
 * @session: an idle session (not while a chunk runs)
 * @func: (nullable): called after every pass, see #LingbotDitPassFunc
 * @user_data: passed to @func
 *
 * Unlike the step callback this one sees no tensors, so it does not
 * prevent graph replay; cheap enough for progress reports.
 */
void
lingbot_dit_session_set_pass_callback (LingbotDitSession * session,
    LingbotDitPassFunc func, gpointer user_data)
{
  session->pass_func = func;
  session->pass_data = user_data;
}

/**
 * lingbot_dit_session_set_cancellable:
 * @session: a session
 * @cancellable: (nullable): the cancellable a chunk watches; %NULL unsets
 *
 * While @cancellable is cancelled, a chunk stops at its next pass boundary
 * (before the first pass, or after any pass, the clean pass included) on
 * every rank at the same boundary, and the run_chunk call fails with
 * %LB_ERROR_CANCELLED "chunk K cancelled after P of N DiT passes" (P
 * passes ran, N = n_steps + 1); a call made while it is cancelled fails
 * at once (P = 0, nothing done).  Rank 0 reads the cancellable at every
 * boundary (its thread runs the pass callback: a cancel made there after
 * pass p stops the chunk after p + 1 passes, exactly); the other ranks
 * follow rank 0's decision (dit-session.c pass_boundary()).  On device
 * ranks the boundary is the moment the host enqueues the next pass, so a
 * cancel takes effect once the passes enqueued before it have run (the
 * call waits for them; with graph replay the host enqueues a whole
 * chunk's passes within microseconds, so a cancel then usually comes too
 * late for the chunk in flight and stops the next one at boundary 0).
 *
 * A cancelled chunk leaves the session as it expects a repeat of the same
 * chunk: the chunk index is unchanged, the noise is keyed by it, and the
 * KV-cache cursors are where the chunk's first pass put them (eviction
 * done once, spec 3.3).  spec 3.3's rule makes every later call at the
 * same current_start a repeat call: no second eviction, the same slots,
 * overwritten in every layer before that layer's attention reads them.
 * So the evicted rows (the oldest non-sink frames, which the chunk drops
 * in any case) are never needed again and the retried chunk is bit for
 * bit the chunk of a session that was never cancelled (given the same
 * inputs).  The session takes a reference on @cancellable; this and
 * g_cancellable_cancel() may be called from any thread while a chunk
 * runs.
 */
void
lingbot_dit_session_set_cancellable (LingbotDitSession * session,
    GCancellable * cancellable)
{
  g_return_if_fail (session != NULL);
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));
  if (cancellable)
    g_object_ref (cancellable);
  g_mutex_lock (&session->cancel_lock);
  GCancellable *old = session->cancellable;
  session->cancellable = cancellable;
  g_mutex_unlock (&session->cancel_lock);
  if (old)
    g_object_unref (old);
}

/**
 * lingbot_dit_session_is_cancelled:
 * @session: a session
 *
 * Any thread.
 *
 * Returns: whether the session's cancellable is set and cancelled.
 */
gboolean
lingbot_dit_session_is_cancelled (LingbotDitSession * session)
{
  g_mutex_lock (&session->cancel_lock);
  const gboolean c = session->cancellable != NULL &&
      g_cancellable_is_cancelled (session->cancellable);
  g_mutex_unlock (&session->cancel_lock);
  return c;
}

/**
 * lingbot_dit_session_request_stop:
 * @session: a session with a chunk running
 *
 * Stops the chunk in flight at its next pass boundary as a cancel does
 * (lingbot_dit_session_set_cancellable(): the run_chunk call fails with
 * %LB_ERROR_CANCELLED "chunk K cancelled after P of N DiT passes" and
 * leaves the session as a repeat of the chunk expects it), for this chunk
 * only: the request is forgotten when the next run_chunk call starts.
 * For a caller that restarts the chunk with other inputs (a key change,
 * lingbot_session_set_restart_func()); meant for the pass callback on
 * rank 0 (after pass p the chunk then stops after p + 1 passes, exactly).
 * Any thread.
 */
void
lingbot_dit_session_request_stop (LingbotDitSession * session)
{
  g_atomic_int_set (&session->stop_request, 1);
}

/**
 * lingbot_dit_session_check_cancelled:
 * @session: an idle session
 * @error: %LB_ERROR_CANCELLED "chunk K cancelled after 0 of N DiT passes"
 *   (K the next chunk index)
 *
 * The check a run_chunk call makes before anything else, for callers that
 * prepare a chunk's inputs first (lingbot_session_generate()).
 *
 * Returns: %FALSE when the session's cancellable is cancelled.
 */
gboolean
lingbot_dit_session_check_cancelled (LingbotDitSession * session,
    GError ** error)
{
  if (!lingbot_dit_session_is_cancelled (session))
    return TRUE;
  set_cancelled_error (session, 0, error);
  return FALSE;
}

/**
 * lingbot_dit_session_get_n_passes:
 * @session: a session
 *
 * Returns: DiT passes per chunk: n_steps + 1 (the clean pass).
 */
int
lingbot_dit_session_get_n_passes (LingbotDitSession * session)
{
  return session->n_steps + 1;
}

/**
 * lingbot_dit_session_set_rope_formula:
 * @session: an idle session
 * @always: compute the chunk's RoPE frame angles with the formula for
 *   every chunk, not only past the tables (tests: the two paths must give
 *   the same bytes)
 *
 * dit-private.h; see lingbot_dit_rope_chunk().
 */
void
lingbot_dit_session_set_rope_formula (LingbotDitSession * session,
    gboolean always)
{
  for (int r = 0; r < session->n_ranks; r++)
    session->ranks[r].core.rope_formula = always;
}

/**
 * lingbot_dit_session_get_chunk_index:
 * @session: a session
 *
 * Returns: the index of the next chunk (chunks generated so far).
 */
int64_t
lingbot_dit_session_get_chunk_index (LingbotDitSession * session)
{
  return session->chunk;
}

/**
 * lingbot_dit_session_get_frame_tokens:
 * @session: a session
 *
 * Returns: tokens per latent frame, T_f = (h/2) (w/2).
 */
int64_t
lingbot_dit_session_get_frame_tokens (LingbotDitSession * session)
{
  return session->frame_tokens;
}

/**
 * lingbot_dit_session_get_cache_capacity:
 * @session: a session
 *
 * Returns: KV-cache slots per layer (window frames x T_f).
 */
int64_t
lingbot_dit_session_get_cache_capacity (LingbotDitSession * session)
{
  return session->cap;
}

/**
 * lingbot_dit_session_get_max_attention_size:
 * @session: a session
 *
 * Returns: the self-attention span in tokens every rank uses (spec 1.8,
 * #LingbotDitSessionOptions.max_attention_size resolved: at most the
 * cache capacity).
 */
int64_t
lingbot_dit_session_get_max_attention_size (LingbotDitSession * session)
{
  return session->max_attention;
}

/**
 * lingbot_dit_session_get_cursors:
 * @session: an idle session
 * @global_end: (out) (optional): tokens seen so far
 * @local_end: (out) (optional): filled cache slots
 *
 * The KV-cache cursors of spec 3.3 (the same for every layer and rank).
 * After a cancelled chunk they are where its first pass put them
 * (@global_end counts its tokens), the state its repeat expects
 * (lingbot_dit_session_set_cancellable()).
 */
void
lingbot_dit_session_get_cursors (LingbotDitSession * session,
    int64_t * global_end, int64_t * local_end)
{
  if (global_end)
    *global_end = session->ranks[0].core.global_end;
  if (local_end)
    *local_end = session->ranks[0].core.local_end;
}

/**
 * lingbot_dit_session_get_schedule:
 * @session: a session
 * @n_steps: (out) (optional): denoising steps
 * @timesteps: (out) (optional) (transfer none): t per step
 * @sigma_x0: (out) (optional) (transfer none): x0 sigma per step
 * @sigma_renoise: (out) (optional) (transfer none): re-noise sigma per step
 */
void
lingbot_dit_session_get_schedule (LingbotDitSession * session, int *n_steps,
    const double **timesteps, const double **sigma_x0,
    const double **sigma_renoise)
{
  if (n_steps)
    *n_steps = session->n_steps;
  if (timesteps)
    *timesteps = session->timesteps;
  if (sigma_x0)
    *sigma_x0 = session->sigma_x0;
  if (sigma_renoise)
    *sigma_renoise = session->sigma_rn;
}

typedef struct
{
  LingbotDitSession *ses;
  int layer;
} KvArgs;

/* On the rank's own thread (its stream belongs to it): the layer's K and V
 * shards into the rank's host buffer (the cache's dtype: a bf16 cache is
 * downloaded as it is and widened on the host), allocated on first use. */
static gboolean
rank_kv_download (LbRank * rank, gpointer data, GError ** error)
{
  KvArgs *a = data;
  LingbotDitSessionRank *sr = &a->ses->ranks[rank->rank];
  LingbotDitRank *rs = &sr->core;
  const int64_t *shape = rs->cache_k[a->layer]->shape;
  if (sr->kv_host == NULL) {
    int64_t hs[3] = { 2, shape[0], shape[1] };
    if (!(sr->kv_host = lb_tensor_try_new (rs->kv_dtype, 3, hs, error))) {
      g_autofree char *sh = lb_shape_string (3, hs);
      g_prefix_error (error, "DiT session: KV host copy %s %s: ",
          lb_dtype_name (rs->kv_dtype), sh);
      return FALSE;
    }
  }
  for (int i = 0; i < 2; i++) {
    LbTensor h;
    lb_tensor_view_select (&h, sr->kv_host, 0, i);
    if (!lb_tensor_download (rs->s, &h, i ? rs->cache_v[a->layer] :
            rs->cache_k[a->layer], error))
      return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_dit_session_get_kv_cache:
 * @session: an idle session (no chunk running)
 * @layer: block index
 * @k: (out): f32 host tensor of [cap, H, hd] elements (e.g. [1, cap, H, hd])
 * @v: (out): the same for the values
 * @error: %LB_ERROR_SHAPE, %LB_ERROR_INVALID_ARGUMENT, copy errors,
 *   %LB_ERROR_DEVICE when a rank's host buffer cannot be allocated
 *
 * Copies the layer's whole self-attention cache (every slot, used or not;
 * keys post-RoPE), assembling the ranks' head shards.  Each rank downloads
 * its shard on its own thread into a host buffer made on the first call.
 * A bf16 cache (device ranks in %LB_MATH_BF16, lingbot_dit_kv_dtype()) is
 * widened exactly to f32 here.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_session_get_kv_cache (LingbotDitSession * session, int layer,
    LbTensor * k, LbTensor * v, GError ** error)
{
  const LingbotDitConfig *cfg = &session->dit->cfg;
  if (layer < 0 || layer >= cfg->num_layers) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT session: no layer %d", layer);
    return FALSE;
  }
  const int64_t total = session->cap * cfg->dim;
  LbTensor *dst[2] = { k, v };
  for (int i = 0; i < 2; i++) {
    if (dst[i]->dtype != LB_DTYPE_F32 || !lb_tensor_is_contiguous (dst[i]) ||
        lb_tensor_numel (dst[i]) != total) {
      g_autofree char *have = lb_tensor_shape_string (dst[i]);
      g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
          "DiT session: KV output is %s, expected f32 [%" G_GINT64_FORMAT
          ", %d, %d]", have, session->cap, cfg->num_heads,
          cfg->dim / cfg->num_heads);
      return FALSE;
    }
  }
  KvArgs ka = { session, layer };
  if (!lb_worker_group_run (session->group, rank_kv_download, &ka, error))
    return FALSE;
  for (int r = 0; r < session->n_ranks; r++) {
    const LingbotDitSessionRank *sr = &session->ranks[r];
    const int64_t piece = sr->core.sh.heads_local * sr->core.head_dim;
    const gboolean bf16 = sr->kv_host->dtype == LB_DTYPE_BF16;
    for (int i = 0; i < 2; i++) {
      float *d = dst[i]->data;
      if (bf16) {
        const uint16_t *hsrc = (const uint16_t *) sr->kv_host->data +
            i * session->cap * piece;
        for (int64_t t = 0; t < session->cap; t++)
          for (int64_t e = 0; e < piece; e++)
            d[t * cfg->dim + r * piece + e] =
                lb_bf16_to_f32 (hsrc[t * piece + e]);
        continue;
      }
      const float *hsrc = (const float *) sr->kv_host->data +
          i * session->cap * piece;
      for (int64_t t = 0; t < session->cap; t++)
        memcpy (d + t * cfg->dim + r * piece, hsrc + t * piece,
            piece * sizeof (float));
    }
  }
  return TRUE;
}

/**
 * lingbot_dit_session_get_kv_info:
 * @session: a session
 * @rank: a rank of its worker group
 * @dtype: (out) (optional): the dtype of the rank's self-attention KV
 *   cache (lingbot_dit_kv_dtype())
 * @nbytes: (out) (optional): the bytes the rank's KV cache occupies on its
 *   device (every layer's keys and values)
 *
 * For tests and memory reports (dit-private.h).
 *
 * Returns: %FALSE when @rank is not a rank of the session.
 */
gboolean
lingbot_dit_session_get_kv_info (LingbotDitSession * session, int rank,
    LbDType * dtype, gsize * nbytes)
{
  if (rank < 0 || rank >= session->n_ranks)
    return FALSE;
  const LingbotDitRank *rs = &session->ranks[rank].core;
  if (dtype)
    *dtype = rs->kv_dtype;
  if (nbytes)
    *nbytes = rs->kv_bytes;
  return TRUE;
}

/* ------------------------------------------------------------------------ */
/* for benchmarks                                                           */
/* ------------------------------------------------------------------------ */

/**
 * lingbot_dit_session_bench_get_share:
 * @session: a session
 * @rank: a rank (rank thread) of its worker group
 * @out: (out): the rank's band, heads and KV cache, #LingbotDitRankShare
 *
 * For benchmarks: what the rank computes, as its shard says (for a solo
 * group, lb_worker_group_new_solo(), the share of rank 0 of the world).
 *
 * Returns: %FALSE when @rank is not a rank of the session.
 */
gboolean
lingbot_dit_session_bench_get_share (LingbotDitSession * session, int rank,
    LingbotDitRankShare * out)
{
  if (rank < 0 || rank >= session->n_ranks)
    return FALSE;
  const LingbotDitRank *rs = &session->ranks[rank].core;
  out->world_ranks = rs->sh.n_ranks;
  out->band_row0 = rs->sh.row0;
  out->band_rows = rs->sh.n_rows;
  out->tokens = rs->sh.n_local;
  out->heads = (int) rs->sh.heads_local;
  out->kv_cache_bytes = rs->kv_bytes;
  return TRUE;
}

typedef struct
{
  LingbotDitSession *ses;
  int64_t global_end, local_end;
} FillArgs;

/* On the rank's thread, like every other access to its state. */
static gboolean
rank_fill_window (LbRank * rank, gpointer data, GError ** error)
{
  const FillArgs *a = data;
  LingbotDitRank *rs = &a->ses->ranks[rank->rank].core;
  rs->global_end = a->global_end;
  rs->local_end = a->local_end;
  rs->pend_evict = 0;
  rs->pend_local_end = a->local_end;
  return TRUE;
}

/**
 * lingbot_dit_session_bench_fill_window:
 * @session: an idle session with a rolling KV window
 * @error: %LB_ERROR_INVALID_ARGUMENT for a global cache (nothing to fill)
 *
 * For benchmarks only (`lingbot-bench dit --window-full`).  Moves the chunk
 * index and every rank's KV-cache cursors (spec 3.3) to where they are
 * once the window is full, without running the chunks that fill it: chunk
 * index k = max (current, ceil (window / C)), global_end = k C T_f,
 * local_end = the capacity (window x T_f).  The next chunk then does what
 * a steady-state chunk does: it evicts C T_f keys on its first pass,
 * shifts the rolling part and attends over the whole window (capacity
 * keys per layer) in every pass.  The cache holds whatever its slots hold
 * (zeros from session creation, or older keys), so the chunk's values
 * mean nothing; its time and FLOPs are those of steady state.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_session_bench_fill_window (LingbotDitSession * session,
    GError ** error)
{
  g_return_val_if_fail (session != NULL, FALSE);
  if (session->global_cache) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT session: a global KV cache has no window to fill");
    return FALSE;
  }
  const int64_t window = session->cap / session->frame_tokens;
  const int64_t k = MAX (session->chunk,
      (window + session->frames - 1) / session->frames);
  FillArgs a = { session, k * session->frames * session->frame_tokens,
    session->cap
  };
  if (!lb_worker_group_run (session->group, rank_fill_window, &a, error))
    return FALSE;
  session->chunk = k;
  return TRUE;
}

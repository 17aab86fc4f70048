/* lingbot-gst: LingbotSession's chunks: generate, cancel, restart
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Split from lingbot/session.c (see there for the session as a whole):
 * lingbot_session_generate() with the chunk's condition and DiT passes,
 * the session's cancellable, the pass, restart and failure callbacks, and
 * the key restart of a running chunk.
 */
#include "lingbot/session-private.h"
#include "lingbot/dit-session.h"
#include "kernels/error.h"
#include "comm/comm-private.h"

/* The condition of the chunk on rank 0, cancellable at the encoder's
 * layers: a cancel is not a rank failure (the group is not aborted), it is
 * handed to lingbot_session_generate() in s->cond_cancelled. */
static gboolean
cond_job (LbRank * rank, gpointer data, GError ** error)
{
  LingbotSession *s = data;
  GError *local = NULL;
  g_mutex_lock (&s->cancel_lock);
  lingbot_vae_encoder_set_cancellable (s->enc, s->cancellable);
  g_mutex_unlock (&s->cancel_lock);
  gboolean ok = lingbot_vae_encoder_encode_condition (s->enc, s->image, s->y,
      &local);
  if (!ok && g_error_matches (local, LB_ERROR, LB_ERROR_CANCELLED)) {
    s->cond_cancelled = local;
    return TRUE;
  }
  if (local != NULL)
    g_propagate_error (error, local);
  return ok;
}

/* The DiT's pass callback, on rank 0's thread: the session's. */
static void
dit_pass (LingbotDitSession * dit, int64_t chunk, int pass, int n_passes,
    gpointer user_data)
{
  LingbotSession *s = user_data;
  guint keys;
  (void) dit;
  if (s->pass_func)
    s->pass_func (s, (guint64) chunk, pass, n_passes, s->pass_data);
  /* a key change after a pass (the clean pass too: the chunk is not
   * handed on before the boundary that follows it): stop at the next
   * boundary, the generate restarts */
  if (!s->restart_armed || pass + 1 >= s->restart_passes)
    return;
  keys = s->restart_keys;
  if (s->restart_func (s, (guint64) chunk, pass + 1, &keys, s->restart_data)
      && keys != s->restart_keys) {
    s->restart_keys = keys;
    s->restart_at = pass + 1;
    s->restart_armed = FALSE;
    lingbot_dit_session_request_stop (s->dit);
  }
}

/**
 * lingbot_session_set_cancellable:
 * @session: a session
 * @cancellable: (nullable): the session's cancellable; %NULL unsets
 *
 * While @cancellable is cancelled, lingbot_session_generate() stops at the
 * next DiT pass boundary (before the first pass or after any pass, the
 * clean pass included; all ranks stop at the same boundary: rank 0 reads
 * the cancellable and the other ranks follow its decision) and fails with
 * %LINGBOT_ERROR_CANCELLED "chunk K cancelled after P of N DiT passes".  The
 * chunk is dropped and the session is as before that call: after
 * g_cancellable_reset() the next generate makes the same chunk index
 * again, bit-identical to a session that was never cancelled (given the
 * same keys).  A generate started while @cancellable is cancelled fails at
 * once ("after 0 of N"), before it touches the control.
 *
 * What a chunk changes before it completes, and what a cancel does with
 * it: the camera (lingbot_control_advance(), undone by
 * lingbot_control_rewind()); the condition y (the streaming VAE encoder
 * advances its causal caches once per chunk, and y does not depend on the
 * keys, so the y of the dropped chunk is kept and the retry does not
 * encode again); the DiT's KV cache and cursors (left as spec 3.3's repeat
 * call expects them, lingbot_dit_session_set_cancellable()); the noise
 * (keyed by the chunk index: drawn again, the same); the chunk index, the
 * latents (lingbot_session_get_latents() still holds the last completed
 * chunk) and the stats (not touched).
 *
 * The chunk's condition encode (the VAE encoder on rank 0, most of a
 * chunk's time at small sizes) stops at its next layer: the generate fails
 * with %LINGBOT_ERROR_CANCELLED "chunk K cancelled after 0 of N DiT passes, in
 * its condition encode: VAE condition encode cancelled before layer L of
 * M of latent frame F of C"; the retry replays the encoder's causal caches
 * from the image (lingbot_vae_encoder_set_cancellable(): the chunks before
 * it are encoded again, so the retry takes longer) and is bit-identical
 * too.  So a stop lasts at most one DiT pass or one encoder layer,
 * whichever runs.
 *
 * On GPU ranks the boundary is where the host enqueues the next pass
 * (with graph replay, the next pass's graph) or layer, so a cancel takes
 * effect once the work already enqueued has run; lingbot_session_decode()
 * is not cancellable.  Should a rank never reach a boundary (a kernel,
 * driver call or collective that never returns), the cancel bounds the
 * chunk anyway: a rank-side timeout after the cancel the world's group is
 * cancelled, and ranks still busy a timeout later are abandoned (the
 * world is broken, lingbot_world_is_broken(); the generate fails with
 * %LINGBOT_ERROR_TIMEOUT naming them), so a stop returns within about twice
 * the rank-side timeout whatever the ranks do.  The session takes a
 * reference on @cancellable.  This and g_cancellable_cancel() may be
 * called from any thread, also while a generate runs.
 */
/* "cancelled" of the session's cancellable, in the thread that cancels:
 * whatever the ranks run then must end within the rank-side timeout (the
 * chunk stops at its next boundary long before), else the group is
 * cancelled, and ranks still busy a timeout later are abandoned
 * (lb_worker_group_cancel_after()): a stop returns even when a rank never
 * does. */
static void
session_cancelled (GCancellable * cancellable, gpointer data)
{
  LingbotSession *s = data;
  (void) cancellable;
  lb_worker_group_cancel_after (s->group,
      lb_worker_group_get_timeout_ms (s->group));
}

void
lingbot_session_set_cancellable (LingbotSession * session,
    GCancellable * cancellable)
{
  g_return_if_fail (session != NULL);
  g_return_if_fail (cancellable == NULL || G_IS_CANCELLABLE (cancellable));
  if (session->dit)
    lingbot_dit_session_set_cancellable (session->dit, cancellable);
  const gulong id = cancellable == NULL ? 0 :
      g_cancellable_connect (cancellable, G_CALLBACK (session_cancelled),
      session, NULL);
  g_mutex_lock (&session->cancel_lock);
  GCancellable *old = session->cancellable;
  const gulong old_id = session->cancel_handler;
  session->cancellable = cancellable ? g_object_ref (cancellable) : NULL;
  session->cancel_handler = id;
  g_mutex_unlock (&session->cancel_lock);
  if (old != NULL) {
    g_cancellable_disconnect (old, old_id);
    g_object_unref (old);
  }
}

/**
 * lingbot_session_set_pass_func:
 * @session: a session, not generating (call it before or between
 *   generates)
 * @func: (nullable): called after each DiT pass (#LingbotPassFunc), on
 *   rank 0's worker thread; %NULL unsets
 * @user_data: passed to @func
 * @notify: (nullable): frees @user_data when the function is replaced or
 *   the session freed
 *
 * The callback does not change what is computed (it sees no tensors, so
 * GPU graph replay stays on).
 */
void
lingbot_session_set_pass_func (LingbotSession * session,
    LingbotPassFunc func, gpointer user_data, GDestroyNotify notify)
{
  g_return_if_fail (session != NULL);
  GDestroyNotify old_notify = session->pass_notify;
  gpointer old_data = session->pass_data;
  session->pass_func = func;
  session->pass_data = user_data;
  session->pass_notify = notify;
  lingbot_dit_session_set_pass_callback (session->dit, func ||
      session->restart_func ? dit_pass : NULL, session);
  if (old_notify)
    old_notify (old_data);
}

/**
 * lingbot_session_set_restart_func:
 * @session: a session, not generating (call it before or between
 *   generates)
 * @func: (nullable): asked whether the chunk in flight should restart
 *   with other keys (#LingbotRestartFunc); %NULL unsets
 * @max_passes: ask only while fewer than this many DiT passes of the
 *   chunk ran: 0 never, 1 only before the first pass (after the condition
 *   encode: nothing is discarded), n_steps + 1 (5 by default) after
 *   every denoising pass too, n_steps + 2 or more after the clean pass
 *   too (the chunk's last pass; it is handed on only after that
 *   boundary)
 * @max_restarts: restarts per chunk that discard DiT passes (0 to 64);
 *   once reached the chunk is not asked again, so that a key change per
 *   pass cannot starve the output.  The free one before the first pass
 *   is not counted
 * @user_data: passed to @func
 * @notify: (nullable): frees @user_data when the function is replaced or
 *   the session freed
 *
 * Live key changes while a chunk is being made, so that a key reaches the
 * screen within about one chunk's compute and decode instead of waiting
 * for the chunk in flight to end.  lingbot_session_generate() takes the
 * keys it is given; after the chunk's condition encode (when @max_passes
 * > 0) and after each DiT pass p with p + 1 < @max_passes it asks
 * @func, and when @func returns %TRUE with another key set, the chunk is
 * made with those keys: before the first pass by moving the camera again
 * (lingbot_control_rewind(), lingbot_control_advance()); after a pass by
 * stopping the DiT at the next boundary
 * (lingbot_dit_session_request_stop(), left as a cancel leaves it: the
 * KV-cache cursors of spec 3.3's repeat call, the noise keyed by the
 * chunk index, the condition y kept), moving the camera again and running
 * the DiT from pass 0.  The chunk is then byte for byte the chunk
 * lingbot_session_generate() makes when given the new keys in the first
 * place (test `/session/key-restart`).  #LingbotChunkStats counts the
 * restarts and the passes discarded; their time is in the chunk's
 * dit_seconds and compute_seconds.  Sessions with offline poses ignore
 * keys and never ask.  On device ranks @func runs when the host has
 * enqueued a pass (with graph replay all of a chunk's passes are enqueued
 * within microseconds), so a restart there catches only changes made
 * before that.
 */
void
lingbot_session_set_restart_func (LingbotSession * session,
    LingbotRestartFunc func, int max_passes, int max_restarts,
    gpointer user_data, GDestroyNotify notify)
{
  g_return_if_fail (session != NULL);
  g_return_if_fail (max_passes >= 0);
  g_return_if_fail (max_restarts >= 0 && max_restarts <= 64);
  GDestroyNotify old_notify = session->restart_notify;
  gpointer old_data = session->restart_data;
  session->restart_func = func;
  session->restart_data = user_data;
  session->restart_notify = notify;
  session->restart_passes = func ? max_passes : 0;
  session->restart_max = max_restarts;
  lingbot_dit_session_set_pass_callback (session->dit, func ||
      session->pass_func ? dit_pass : NULL, session);
  if (old_notify)
    old_notify (old_data);
}

/* (generate, world lock) the camera of the chunk moved again with @keys:
 * rewound, advanced, and the control tensor filled on the CPU */
static gboolean
readvance_control (LingbotSession * s, guint keys, GError ** error)
{
  lingbot_control_rewind (s->control);
  if (!lingbot_control_advance (s->control, keys, error))
    return FALSE;
  return s->ctl_on_device || lingbot_control_fill (s->control, s->ctl->data,
      (gsize) lb_tensor_numel (s->ctl), 0, s->lat_h, error);
}

/* (generate, world lock) the chunk's DiT passes with the keys the camera
 * was advanced with (@keys), restarted from pass 0 with new keys as the
 * restart function asks (lingbot_session_set_restart_func()).  *@keys,
 * *@restarts and *@discarded are updated; *@advanced is cleared when a
 * camera move failed (nothing to rewind then). */
static gboolean
run_dit_restartable (LingbotSession * s, LbTensor * out, guint * keys,
    guint * restarts, guint * discarded, gboolean * advanced, GError ** error)
{
  const gboolean can_restart = s->restart_func != NULL &&
      s->restart_passes > 0 && !lingbot_control_is_offline (s->control);
  int dit_restarts = 0;

  /* before the first pass: free */
  if (can_restart) {
    guint k = *keys;
    if (s->restart_func (s, s->chunk, 0, &k, s->restart_data) && k != *keys) {
      *keys = k;
      (*restarts)++;
      if (!readvance_control (s, k, error)) {
        *advanced = FALSE;
        return FALSE;
      }
    }
  }
  while (TRUE) {
    GError *local = NULL;
    gboolean ok;

    s->restart_keys = *keys;
    s->restart_at = 0;
    s->restart_armed = can_restart && dit_restarts < s->restart_max;
    if (s->ctl_on_device) {
      /* the poses (C x 16 floats) go to the ranks, which build the ray
       * map */
      LbTensor poses;
      float k[4];
      const int64_t pshape[2] = { s->chunk_frames, 16 };
      lingbot_control_get_intrinsics (s->control, k);
      lb_tensor_view_init (&poses, LB_DTYPE_F32,
          (void *) lingbot_control_get_chunk_rel_poses (s->control),
          LB_DEVICE_HOST, 2, pshape, NULL);
      ok = lingbot_dit_session_run_chunk_noise_poses (s->dit, s->y, &poses,
          k, s->width, s->height, s->noise, out, &local);
    } else {
      ok = lingbot_dit_session_run_chunk_noise (s->dit, s->y, s->ctl,
          s->noise, out, &local);
    }
    s->restart_armed = FALSE;
    if (ok)
      return TRUE;
    /* a restart, not a cancel: the same chunk with the new keys */
    if (s->restart_at > 0 && g_error_matches (local, LB_ERROR,
            LB_ERROR_CANCELLED) && !lingbot_dit_session_is_cancelled (s->dit)) {
      g_clear_error (&local);
      dit_restarts++;
      (*restarts)++;
      *discarded += (guint) s->restart_at;
      *keys = s->restart_keys;
      if (!readvance_control (s, *keys, error)) {
        *advanced = FALSE;
        return FALSE;
      }
      continue;
    }
    g_propagate_error (error, local);
    return FALSE;
  }
}

/* An abort notify of the world's group (its lock held, on the thread
 * that aborts it): a rank of this session's generate timed out. */
static void
session_group_aborted (gpointer data, const GError * why)
{
  LingbotSession *s = data;

  if (!g_error_matches (why, LB_ERROR, LB_ERROR_TIMEOUT))
    return;
  if (g_atomic_int_compare_and_exchange (&s->failure_armed, 1, 0))
    s->failure_func (s, s->failure_chunk, why, s->failure_data);
}

/**
 * lingbot_session_set_failure_func:
 * @session: a session, not generating (call it before or between
 *   generates)
 * @func: (nullable): called when a rank fails the chunk in flight with a
 *   timeout (#LingbotFailureFunc); %NULL unsets
 * @user_data: passed to @func
 * @notify: (nullable): frees @user_data when the function is replaced or
 *   the session freed
 *
 * Reports a rank that does not answer as early as the library knows it.
 * When a rank of the session's world times out in a wait for a peer (a
 * collective, a channel; %LINGBOT_ERROR_TIMEOUT: the peer did not answer within
 * the rank timeout, #LingbotWorldOptions.timeout_ms or
 * `LINGBOT_RANK_TIMEOUT_MS`), the chunk fails; lingbot_session_generate()
 * returns once every rank is back, and gives a rank that is still busy
 * (stuck in a kernel, driver call or collective) one more rank timeout
 * before it abandons it and fails with "worker group world: rank N stopped
 * answering (...)".  @func is called as soon as the timeout happens, a
 * rank timeout before that, with the timeout's error: at most once per
 * lingbot_session_generate() call, on the rank thread that timed out,
 * while that call still runs.  Only timeouts: other failures (and a
 * cancel) end the generate at once, and its error is the one to report.
 * A timeout of a lingbot_session_decode() is not reported here.  @func
 * must not block and must not call the session (see #LingbotFailureFunc).
 */
void
lingbot_session_set_failure_func (LingbotSession * session,
    LingbotFailureFunc func, gpointer user_data, GDestroyNotify notify)
{
  g_return_if_fail (session != NULL);
  GDestroyNotify old_notify = session->failure_notify;
  gpointer old_data = session->failure_data;

  /* removing the notify takes the group's lock: no call runs after it */
  if (session->failure_func != NULL)
    lb_worker_group_remove_abort_notify (session->group, session);
  session->failure_func = func;
  session->failure_data = user_data;
  session->failure_notify = notify;
  if (func != NULL)
    lb_worker_group_add_abort_notify (session->group, session_group_aborted,
        session);
  if (old_notify)
    old_notify (old_data);
}

/**
 * lingbot_session_generate:
 * @session: a session
 * @keys: the #LingbotKey set steering this chunk (ignored with offline
 *   poses); 0 keeps the camera still
 * @stats: (out caller-allocates) (optional): receives index, frames (what
 *   the chunk yields once decoded), keys, dit_seconds and compute_seconds
 *   (control + condition + DiT), restarts and restart_passes; vae_seconds
 *   is set to 0; untouched on failure
 * @error: %LINGBOT_ERROR_INVALID_ARGUMENT past the session's last chunk;
 *   %LINGBOT_ERROR_CANCELLED "chunk K cancelled after P of N DiT passes" (", in
 *   its condition encode: ..." when it stopped there) when the session's
 *   cancellable is cancelled (lingbot_session_set_cancellable(): the
 *   chunk is dropped, the session is as before the call); the errors of
 *   the control, the VAE encoder and the DiT; %LINGBOT_ERROR_TIMEOUT "worker
 *   group world: rank N stopped answering (...): ..." when a rank never
 *   came back (the world is broken: lingbot_world_is_broken())
 *
 * Generates the next chunk: the control tensor of @keys
 * (lingbot_control_advance() + fill on the CPU; on a device world the
 * ranks build it from the chunk's poses,
 * lingbot_dit_session_run_chunk_noise_poses()), the condition y of the
 * chunk (mask + VAE latent of [image, zeros] / zeros, spec 1.2 and 6.3;
 * kept from a cancelled try of the same chunk), then the DiT's 4 + 1
 * passes over the worker group with the session's noise, calling the
 * pass function (lingbot_session_set_pass_func()) after each pass and
 * stopping at the next pass boundary when the session's cancellable is
 * cancelled, and restarting with other keys when the restart function
 * asks (lingbot_session_set_restart_func(); the stats then carry the
 * final keys).  The result is lingbot_session_get_latents(), valid until the
 * next successful call.  On any failure the camera is rewound
 * (lingbot_control_rewind()) and the chunk index stays.  Allocates
 * nothing.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_session_generate (LingbotSession * session, guint keys,
    LingbotChunkStats * stats, GError ** error)
{
  LingbotSession *s = session;
  g_return_val_if_fail (s != NULL, FALSE);
  if (lingbot_session_is_done (s)) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "session: all %u chunks (%u frames) were generated", s->n_chunks,
        s->frames);
    return FALSE;
  }
  /* cancelled already: fail before touching anything */
  if (!lingbot_dit_session_check_cancelled (s->dit, error))
    return FALSE;
  /* the slot of this chunk: the previous chunk (serial) or the one
   * n_slots back (a decoder attached) leaves it */
  if (!lingbot_session_handoff_prepare (s, error))
    return FALSE;
  LbTensor *out = s->channel ? NULL : s->latents;
  g_rec_mutex_lock (&s->world->lock);
  /* the failure callback may run for this chunk from now on */
  s->failure_chunk = s->chunk;
  g_atomic_int_set (&s->failure_armed, 1);
  gint64 t0 = g_get_monotonic_time ();
  const gboolean advanced = lingbot_control_advance (s->control, keys, error);
  gboolean ok = advanced &&
      (s->ctl_on_device || lingbot_control_fill (s->control, s->ctl->data,
          (gsize) lb_tensor_numel (s->ctl), 0, s->lat_h, error));
  /* the condition of this chunk, unless a cancelled try already encoded
   * it (the encoder's caches advance once per chunk) */
  if (ok && s->y_chunk != s->chunk) {
    ok = lb_worker_group_run_on (s->group, 0, cond_job, s, error);
    if (ok && s->cond_cancelled != NULL) {
      /* stopped within the encode, at a layer: retried, it replays */
      g_set_error (error, LB_ERROR, LB_ERROR_CANCELLED, "chunk %"
          G_GUINT64_FORMAT " cancelled after 0 of %d DiT passes, in its "
          "condition encode: %s", s->chunk,
          lingbot_dit_session_get_n_passes (s->dit),
          s->cond_cancelled->message);
      g_clear_error (&s->cond_cancelled);
      ok = FALSE;
    }
    if (ok)
      s->y_chunk = s->chunk;
  }
  gint64 t1 = g_get_monotonic_time ();
  guint restarts = 0, discarded = 0;
  gboolean moved = advanced;
  if (ok)
    ok = run_dit_restartable (s, out, &keys, &restarts, &discarded, &moved,
        error);
  /* a chunk that was not made does not move the camera */
  if (!ok && moved)
    lingbot_control_rewind (s->control);
  gint64 t2 = g_get_monotonic_time ();
  g_atomic_int_set (&s->failure_armed, 0);
  g_rec_mutex_unlock (&s->world->lock);
  if (!ok)
    return FALSE;
  if (stats) {
    stats->index = s->chunk;
    stats->frames = lingbot_session_get_frame_count (s, s->chunk);
    stats->keys = lingbot_control_is_offline (s->control) ? 0 : keys;
    stats->dit_seconds = (double) (t2 - t1) / G_USEC_PER_SEC;
    stats->vae_seconds = 0.0;
    stats->compute_seconds = (double) (t2 - t0) / G_USEC_PER_SEC;
    stats->restarts = restarts;
    stats->restart_passes = discarded;
  }
  lingbot_session_handoff_generated (s, s->chunk);
  g_mutex_lock (&s->dlock);
  s->chunk++;
  g_mutex_unlock (&s->dlock);
  return TRUE;
}

/* lingbot-gst: the session's decode hand-off (DESIGN.md 3, docs/design.md
 * "Decode beside generation")
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A generated chunk's latents wait in a slot until the decode takes them:
 *
 * - with a decoder attached (lingbot_session_attach_decoder()): a slot of
 *   the tensor channel from the DiT ranks to the decoder's own worker group
 *   (comm/channel.h).  Each DiT rank sends its row band of x0 where it is
 *   (lingbot_dit_session_set_output_channel()); each decode rank receives
 *   its band on its device, decodes it and acks the slot: nothing of the
 *   latents crosses the host, and the DiT of chunk k + 1 runs while chunk k
 *   decodes (generate holds the world lock, the decode does not);
 * - serial (no decoder attached): the session's latent tensor, downloaded
 *   from rank 0 after every chunk and decoded on the DiT ranks.
 *
 * Messages leave their slots in chunk order (the channel's order).  A
 * chunk leaves its slot when it is decoded, drained (its holder released
 * it: lingbot_session_release_chunk()) or spilled: copied to host memory
 * because the next chunk needs the slot while nobody claimed it for a
 * decode (an element kept the buffer: a queue before the decoder, an
 * appsink), or because someone reads it (lingbot_session_read_chunk()).
 * A claimed chunk is never spilled by generation: the DiT's send waits for
 * its slot (bounded by the group timeout), which is the back-pressure.
 */
#include "lingbot/session-private.h"
#include "lingbot/backend.h"
#include "lingbot/vae-private.h"
#include "kernels/error.h"

#include <string.h>

/* ------------------------------------------------------------------------ */
/* state                                                                    */
/* ------------------------------------------------------------------------ */

/**
 * lingbot_session_handoff_init:
 * @s: a session being created
 * @error: unused (for symmetry)
 *
 * Serial hand-off: one slot, the session's latent tensor.
 *
 * Returns: %TRUE.
 */
gboolean
lingbot_session_handoff_init (LingbotSession * s, GError ** error)
{
  (void) error;
  g_mutex_init (&s->dlock);
  g_cond_init (&s->dcond);
  g_queue_init (&s->spills);
  s->n_slots = 1;
  s->entries = g_new0 (HandoffEntry, 1);
  return TRUE;
}

static void
spill_free (HandoffSpill * sp)
{
  lb_tensor_free (sp->latents);
  g_free (sp);
}

/**
 * lingbot_session_handoff_clear:
 * @s: a session being freed
 *
 * Cancels the channel (waking a DiT rank blocked on a slot), frees it, the
 * spills and the decoder's worker group.  The decoder itself is freed by
 * the caller first.
 */
void
lingbot_session_handoff_clear (LingbotSession * s)
{
  if (s->channel)
    lb_channel_cancel (s->channel);
  if (s->dit)
    lingbot_dit_session_set_output_channel (s->dit, NULL);
  g_clear_pointer (&s->channel, lb_channel_free);
  g_queue_clear_full (&s->spills, (GDestroyNotify) spill_free);
  g_clear_pointer (&s->entries, g_free);
  if (s->dec_group) {
    lb_worker_group_shutdown (s->dec_group);
    g_clear_pointer (&s->dec_group, lb_worker_group_unref);
  }
  g_cond_clear (&s->dcond);
  g_mutex_clear (&s->dlock);
}

static gboolean
in_slot_unlocked (LingbotSession * s, guint64 chunk)
{
  return chunk >= s->slot_next && chunk < s->chunk;
}

static HandoffEntry *
entry_unlocked (LingbotSession * s, guint64 chunk)
{
  return &s->entries[chunk % (guint64) s->n_slots];
}

static HandoffSpill *
find_spill_unlocked (LingbotSession * s, guint64 chunk)
{
  for (GList * l = s->spills.head; l; l = l->next) {
    HandoffSpill *sp = l->data;
    if (sp->chunk == chunk)
      return sp;
  }
  return NULL;
}

static gsize
chunk_bytes (LingbotSession * s)
{
  return (gsize) lb_tensor_nbytes (s->latents);
}

/* ------------------------------------------------------------------------ */
/* decode-group jobs                                                        */
/* ------------------------------------------------------------------------ */

typedef enum
{
  JOB_DECODE,                   /* receive, decode the band, ack */
  JOB_SPILL,                    /* receive, copy the band to host, ack */
  JOB_DRAIN,                    /* receive, ack */
} HandoffJobKind;

typedef struct
{
  LingbotSession *s;
  HandoffJobKind kind;
  LbTensor *host;               /* JOB_SPILL: [1, 16, C, h, w] */
} HandoffJob;

static gboolean
handoff_rank_job (LbRank * rank, gpointer data, GError ** error)
{
  HandoffJob *j = data;
  LingbotSession *s = j->s;
  LbTensor band;
  gboolean ok;

  if (!lb_channel_receive (s->channel, rank, &band, error))
    return FALSE;
  switch (j->kind) {
    case JOB_DECODE:{
      int n = 0;
      ok = lingbot_vae_decoder_decode_band_on_rank (s->dec, rank, &band,
          s->frames_buf, &n, error);
      if (ok && rank->rank == 0)
        s->job_n_frames = n;
      break;
    }
    case JOB_SPILL:{
      int64_t r0, nr;
      LbTensor full, dst;

      lingbot_vae_decoder_get_band (s->dec, rank->rank, &r0, &nr);
      lb_tensor_view_select (&full, j->host, 0, 0);
      lb_tensor_view_narrow (&dst, &full, 2, r0, nr);
      ok = vae_copy_runs (rank->stream, &dst, &band, LB_COPY_DEVICE_TO_HOST,
          "latent spill", error) && (vae_stream_is_host (rank->stream)
          || rank->stream->backend->stream_synchronize (rank->stream, error));
      break;
    }
    default:
      ok = TRUE;
      break;
  }
  /* the slot goes back also after a failed decode: the DiT must not wait
   * for it forever (the decode's error is the caller's) */
  if (!lb_channel_ack (s->channel, rank, ok ? error : NULL))
    ok = FALSE;
  return ok;
}

/* Runs @kind for the front chunk (s->slot_next) on the decoder's ranks,
 * dlock held (the job is submitted under it, so jobs of the decode group
 * keep chunk order).  JOB_DECODE submits only: the caller waits with the
 * lock released (lingbot_session_decode_chunk()). */
static gboolean
front_job_unlocked (LingbotSession * s, HandoffJob * job, LbWorkerJob * wj,
    gboolean wait, GError ** error)
{
  if (!lb_worker_group_submit (s->dec_group, wj, -1, handoff_rank_job, job,
          error))
    return FALSE;
  return !wait || lb_worker_group_wait (s->dec_group, wj, error);
}

/* Moves the front chunk out of its slot: SPILL copies it to host memory
 * (the session keeps the copy until it is decoded or released), DRAIN
 * drops it.  dlock held. */
static gboolean
consume_front_unlocked (LingbotSession * s, gboolean spill, GError ** error)
{
  const guint64 chunk = s->slot_next;
  HandoffEntry *e = entry_unlocked (s, chunk);
  LbTensor *host = NULL;

  g_assert (in_slot_unlocked (s, chunk) && !e->decoding);
  if (spill) {
    host = lb_tensor_try_new (LB_DTYPE_F32, s->latents->ndim,
        s->latents->shape, error);
    if (host == NULL)
      return FALSE;
  }
  if (s->channel) {
    HandoffJob job = { s, spill ? JOB_SPILL : JOB_DRAIN, host };
    LbWorkerJob wj = LB_WORKER_JOB_INIT;

    if (!front_job_unlocked (s, &job, &wj, TRUE, error)) {
      lb_tensor_free (host);
      return FALSE;
    }
  } else if (spill) {
    memcpy (host->data, s->latents->data, chunk_bytes (s));
  }
  if (spill) {
    HandoffSpill *sp = g_new0 (HandoffSpill, 1);

    sp->chunk = chunk;
    sp->latents = host;
    g_queue_push_tail (&s->spills, sp);
    s->n_spills++;
    if (s->channel)
      s->latent_host_bytes += chunk_bytes (s);
  }
  memset (e, 0, sizeof (*e));
  s->slot_next++;
  g_cond_broadcast (&s->dcond);
  return TRUE;
}

/* Drains the released chunks at the front (after a consume).  dlock
 * held; errors are logged (the release that asked for it has returned). */
static void
drain_released_unlocked (LingbotSession * s)
{
  while (in_slot_unlocked (s, s->slot_next)) {
    HandoffEntry *e = entry_unlocked (s, s->slot_next);
    g_autoptr (GError) err = NULL;

    if (!e->released || e->decoding)
      return;
    if (!consume_front_unlocked (s, FALSE, &err)) {
      g_warning ("session: dropping chunk %" G_GUINT64_FORMAT ": %s",
          s->slot_next, err->message);
      return;
    }
  }
}

/**
 * lingbot_session_handoff_prepare:
 * @s: a session, before lingbot_session_generate() takes the world lock
 * @error: errors of a spill (allocation, device copy)
 *
 * Frees the slot the next chunk needs.  Serial: the previous chunk leaves
 * the latent tensor: drained when released, waited for while claimed
 * (its decode runs on the DiT ranks, which are free now), spilled when
 * nobody claimed it or the wait passed the group timeout.  With a decoder
 * attached: the chunk n_slots back is drained or spilled when it is not
 * claimed; a claimed one is left to its decode (the DiT's send waits for
 * the slot).
 *
 * Returns: %TRUE when the slot is free or will be.
 */
gboolean
lingbot_session_handoff_prepare (LingbotSession * s, GError ** error)
{
  const guint64 k = s->chunk;
  gboolean ok = TRUE;

  if (k < (guint64) s->n_slots)
    return TRUE;
  g_mutex_lock (&s->dlock);
  while (ok && s->slot_next + s->n_slots <= k) {
    HandoffEntry *e = entry_unlocked (s, s->slot_next);

    if (e->released && !e->decoding) {
      ok = consume_front_unlocked (s, FALSE, error);
    } else if (e->decoding || e->claimed) {
      gint64 deadline;

      if (s->channel)
        break;                  /* the DiT's send waits for its slot */
      deadline = g_get_monotonic_time () + (gint64)
          lb_worker_group_get_timeout_ms (s->group) * G_TIME_SPAN_MILLISECOND;
      if (!g_cond_wait_until (&s->dcond, &s->dlock, deadline)
          && !e->decoding && s->slot_next + s->n_slots <= k) {
        /* claimed but not decoded in time: keep it in host memory */
        ok = consume_front_unlocked (s, TRUE, error);
      }
    } else {
      ok = consume_front_unlocked (s, TRUE, error);
    }
  }
  g_mutex_unlock (&s->dlock);
  return ok;
}

/**
 * lingbot_session_handoff_generated:
 * @s: a session
 * @chunk: the chunk just generated (it is in its slot now)
 *
 * Records the chunk's slot entry.  Serial: its latents crossed the host.
 */
void
lingbot_session_handoff_generated (LingbotSession * s, guint64 chunk)
{
  g_mutex_lock (&s->dlock);
  HandoffEntry *e = entry_unlocked (s, chunk);
  memset (e, 0, sizeof (*e));
  e->chunk = chunk;
  if (s->channel == NULL)
    s->latent_host_bytes += chunk_bytes (s);
  g_mutex_unlock (&s->dlock);
}

/* ------------------------------------------------------------------------ */
/* the public calls                                                         */
/* ------------------------------------------------------------------------ */

/* the decode ranks compute in the world's precision, as the DiT ranks'
 * streams the serial decode ran on (docs/performance.md: the VAE's cuDNN
 * convolutions take the TF32/bf16 engines in LB_MATH_BF16) */
static gboolean
set_rank_math (LbRank * rank, gpointer data, GError ** error)
{
  (void) error;
  if (rank->stream->backend->device_type != LB_DEVICE_CPU)
    rank->stream->math = *(const LbMathMode *) data;
  return TRUE;
}

/**
 * lingbot_session_attach_decoder:
 * @session: a session before its first chunk
 * @devices: (nullable): the decoder's ranks, "cpu:N" or GPU ordinals as for
 *   the world (lingbot_backend_parse_devices()), on the world's backend;
 *   %NULL for the world's own devices (a second worker group on them: its
 *   own threads and streams)
 * @n_slots: chunks in flight between the DiT and the decode, >= 2 (2 lets
 *   chunk k + 1 be written while chunk k is decoded); 0 for 2
 * @error: %LINGBOT_ERROR_INVALID_ARGUMENT after the first chunk, for another
 *   backend, or for more ranks than latent rows; the errors of the worker
 *   group, decoder and channel
 *
 * Moves the session's decode onto a worker group of its own, beside the
 * DiT's (DESIGN.md 3): a height-sharded VAE decoder there, and a tensor
 * channel of @n_slots slots from the DiT ranks to it.  From the next chunk
 * on, every DiT rank sends its row band of the chunk's latents into the
 * channel, the decode ranks take their bands from it
 * (lingbot_session_decode_chunk()), and generate and decode no longer
 * serialise on the world lock.  The decode ranks' streams compute in the
 * world's precision (as the DiT's, on which the serial decode runs).  lingbot_session_get_latents() is then not
 * written any more (use lingbot_session_read_chunk()).
 *
 * Returns: %TRUE on success; on failure the session decodes as before.
 */
gboolean
lingbot_session_attach_decoder (LingbotSession * session,
    const char *devices, int n_slots, GError ** error)
{
  LingbotSession *s = session;
  LingbotWorld *w = s->world;
  g_autofree int *ordinals = NULL;
  LbBackend *backend = NULL;
  LbWorkerGroup *group = NULL;
  LingbotVaeDecoder *dec = NULL;
  LbChannel *channel = NULL;
  int n = 0;

  g_return_val_if_fail (s != NULL, FALSE);
  if (n_slots == 0)
    n_slots = 2;
  if (s->chunk > 0 || s->dec_group != NULL || n_slots < 2) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "session: %s", s->dec_group ? "a decoder is attached already" :
        n_slots < 2 ? "a decoder needs at least 2 slots" :
        "attach the decoder before the first chunk");
    return FALSE;
  }
  if (devices == NULL) {
    backend = w->backend;
    n = w->n_ranks;
    ordinals = g_memdup2 (w->ordinals, sizeof (int) * (gsize) n);
  } else if (!lingbot_backend_parse_devices (devices, &backend, &n,
          &ordinals, error)) {
    return FALSE;
  }
  if (backend != w->backend) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "session: decoder devices '%s' are on another backend than the "
        "world's '%s'", devices, w->devices);
    return FALSE;
  }
  LbWorkerGroupOptions go = { lb_worker_group_get_timeout_ms (s->group),
    NULL, "decode"
  };
  group = lb_worker_group_new (backend, n, ordinals, &go, error);
  if (group == NULL)
    return FALSE;
  if (!lb_worker_group_run (group, set_rank_math, &w->math, error))
    goto fail;
  dec = lingbot_vae_decoder_new_sharded (w->vae, group, s->lat_h, s->lat_w,
      s->chunk_frames, error);
  if (dec == NULL)
    goto fail;
  int64_t *rows = g_new0 (int64_t, n);
  for (int r = 0; r < n; r++) {
    int64_t r0;
    lingbot_vae_decoder_get_band (dec, r, &r0, &rows[r]);
  }
  LbChannelConfig cc = { 0 };
  cc.producer = s->group;
  cc.consumer = group;
  cc.dtype = LB_DTYPE_F32;
  cc.ndim = 4;
  for (int i = 0; i < 4; i++)
    cc.shape[i] = s->latents->shape[i + 1];
  cc.shard_dim = 2;
  cc.consumer_rows = rows;
  cc.n_slots = n_slots;
  cc.name = "latents";
  channel = lb_channel_new (&cc, error);
  g_free (rows);
  if (channel == NULL)
    goto fail;

  /* the serial decoder goes (freed where it lives), the new one takes
   * over */
  g_rec_mutex_lock (&w->lock);
  lingbot_session_free_decoder (s);
  s->dec = dec;
  s->dec_sharded = TRUE;
  g_mutex_lock (&s->dlock);
  s->dec_group = group;
  s->channel = channel;
  g_free (s->entries);
  s->n_slots = n_slots;
  s->entries = g_new0 (HandoffEntry, n_slots);
  g_mutex_unlock (&s->dlock);
  lingbot_dit_session_set_output_channel (s->dit, channel);
  g_rec_mutex_unlock (&w->lock);
  return TRUE;

fail:
  lingbot_vae_decoder_free (dec);
  lb_worker_group_shutdown (group);
  lb_worker_group_unref (group);
  return FALSE;
}

/**
 * lingbot_session_has_decoder:
 * @session: a session
 *
 * Returns: whether a decoder is attached (lingbot_session_attach_decoder()).
 */
gboolean
lingbot_session_has_decoder (LingbotSession * session)
{
  return session->channel != NULL;
}

/**
 * lingbot_session_get_n_slots:
 * @session: a session
 *
 * Returns: chunks that can wait for their decode without being spilled: the
 * attached decoder's channel slots, 1 serial.
 */
int
lingbot_session_get_n_slots (LingbotSession * session)
{
  return session->n_slots;
}

/**
 * lingbot_session_claim_chunk:
 * @session: a session
 * @chunk: a generated chunk
 *
 * Says that a decoder will call lingbot_session_decode_chunk() for @chunk
 * (an element that queued it for decoding): generation then never spills
 * it to host memory, it waits for the decode to free its slot.  Any
 * thread.
 */
void
lingbot_session_claim_chunk (LingbotSession * session, guint64 chunk)
{
  g_mutex_lock (&session->dlock);
  if (in_slot_unlocked (session, chunk))
    entry_unlocked (session, chunk)->claimed = TRUE;
  g_mutex_unlock (&session->dlock);
}

/**
 * lingbot_session_release_chunk:
 * @session: a session
 * @chunk: a generated chunk
 *
 * The holder of @chunk lets it go without a (further) decode or read: its
 * slot is drained now when it is the oldest one, else when the older ones
 * leave theirs; its host copy, if it was spilled, is freed.  Decoded
 * chunks are unaffected.  Any thread but a rank thread of the session.
 */
void
lingbot_session_release_chunk (LingbotSession * session, guint64 chunk)
{
  LingbotSession *s = session;
  HandoffSpill *sp;

  g_mutex_lock (&s->dlock);
  if (in_slot_unlocked (s, chunk)) {
    entry_unlocked (s, chunk)->released = TRUE;
    drain_released_unlocked (s);
  } else if ((sp = find_spill_unlocked (s, chunk)) != NULL) {
    g_queue_remove (&s->spills, sp);
    spill_free (sp);
  }
  g_cond_broadcast (&s->dcond);
  g_mutex_unlock (&s->dlock);
}

/* Takes the chunks before @chunk out of their slots in order: released
 * ones drained, the others spilled (they stay readable and decodable).
 * dlock held; FALSE when one of them is being decoded. */
static gboolean
consume_before_unlocked (LingbotSession * s, guint64 chunk, GError ** error)
{
  while (s->slot_next < chunk && in_slot_unlocked (s, s->slot_next)) {
    HandoffEntry *e = entry_unlocked (s, s->slot_next);

    if (e->decoding) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "session: chunk %" G_GUINT64_FORMAT " is being decoded",
          s->slot_next);
      return FALSE;
    }
    if (!consume_front_unlocked (s, !e->released, error))
      return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_session_read_chunk_tensor:
 * @session: a session
 * @chunk: a generated chunk, not decoded yet (nor released)
 * @dst: contiguous host f32 [1, 16, C, h, w] (or [16, C, h, w])
 * @error: %LB_ERROR_SHAPE for @dst; %LB_ERROR_INVALID_ARGUMENT for a chunk
 *   the session does not hold any more; device errors
 *
 * Copies @chunk's latents to @dst: for elements that map the buffer (a
 * download, counted in lingbot_session_get_latent_host_bytes()).  With a
 * decoder attached the chunk is spilled (moved to host memory, the older
 * chunks still in slots too) and stays decodable from there.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_session_read_chunk_tensor (LingbotSession * session, guint64 chunk,
    LbTensor * dst, GError ** error)
{
  LingbotSession *s = session;
  HandoffSpill *sp;
  const LbTensor *src = NULL;
  gboolean ok = TRUE;

  if (dst->dtype != LB_DTYPE_F32 || !lb_tensor_is_contiguous (dst)
      || lb_tensor_numel (dst) != lb_tensor_numel (s->latents)
      || dst->device.type != LB_DEVICE_CPU) {
    g_autofree char *have = lb_tensor_shape_string (dst);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "session: read_chunk into %s %s, expected a contiguous host f32 "
        "tensor of %" G_GINT64_FORMAT " elements", lb_dtype_name (dst->dtype),
        have, lb_tensor_numel (s->latents));
    return FALSE;
  }
  g_mutex_lock (&s->dlock);
  if (s->channel && in_slot_unlocked (s, chunk)) {
    ok = consume_before_unlocked (s, chunk, error);
    if (ok && entry_unlocked (s, chunk)->decoding) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "session: chunk %" G_GUINT64_FORMAT " is being decoded", chunk);
      ok = FALSE;
    }
    if (ok)
      ok = consume_front_unlocked (s, TRUE, error);
  }
  if (ok && (sp = find_spill_unlocked (s, chunk)) != NULL)
    src = sp->latents;
  else if (ok && s->channel == NULL && in_slot_unlocked (s, chunk))
    src = s->latents;
  if (ok && src == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "session: chunk %" G_GUINT64_FORMAT " is not held any more (decoded "
        "or released)", chunk);
    ok = FALSE;
  }
  if (ok) {
    memcpy (dst->data, src->data, chunk_bytes (s));
    if (src == s->latents)
      s->latent_host_bytes += chunk_bytes (s);
  }
  g_mutex_unlock (&s->dlock);
  return ok;
}

/* The serial decode of the chunk in @latents (the DiT group, the world
 * lock); the attached decoder's from host latents (its group). */
static gboolean
decode_host (LingbotSession * s, const LbTensor * latents, int *n,
    GError ** error)
{
  return lingbot_session_decode_latents (s, latents, n, error);
}

/**
 * lingbot_session_decode_chunk:
 * @session: a session
 * @chunk: the chunk to decode: the next undecoded one, or a later one when
 *   every chunk in between was released (the decoder skips them)
 * @n_frames: (out) (optional): as for lingbot_session_decode()
 * @stats: (inout) (optional): as for lingbot_session_decode()
 * @error: %LINGBOT_ERROR_INVALID_ARGUMENT for a chunk out of order or not held;
 *   decoder errors
 *
 * Decodes @chunk from where its latents are: its channel slot (every
 * decode rank decodes its band on its device and frees the slot; no host
 * copy), its host copy when it was spilled, or the session's latent tensor
 * (serial).  With a decoder attached this runs beside
 * lingbot_session_generate() (call it from another thread); serial it
 * takes the world lock.  The frames are in lingbot_session_get_frames().
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_session_decode_chunk (LingbotSession * session, guint64 chunk,
    int *n_frames, LingbotChunkStats * stats, GError ** error)
{
  LingbotSession *s = session;
  HandoffSpill *sp;
  gboolean ok = TRUE;
  int n = 0;

  g_return_val_if_fail (s != NULL, FALSE);
  g_mutex_lock (&s->dlock);
  if (chunk < s->decoded || chunk >= s->chunk) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "session: chunk %" G_GUINT64_FORMAT " cannot be decoded (%"
        G_GUINT64_FORMAT " decoded, %" G_GUINT64_FORMAT " generated)",
        chunk, s->decoded, s->chunk);
    g_mutex_unlock (&s->dlock);
    return FALSE;
  }
  /* chunks skipped over must have been released */
  for (guint64 c = s->decoded; c < chunk; c++) {
    gboolean released = in_slot_unlocked (s, c) ?
        entry_unlocked (s, c)->released : find_spill_unlocked (s, c) == NULL;
    if (!released) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "session: chunk %" G_GUINT64_FORMAT " decoded before chunk %"
          G_GUINT64_FORMAT, chunk, c);
      g_mutex_unlock (&s->dlock);
      return FALSE;
    }
  }
  s->decoded = chunk;           /* the skipped ones */
  gint64 t0 = g_get_monotonic_time ();
  if ((sp = find_spill_unlocked (s, chunk)) != NULL) {
    g_queue_remove (&s->spills, sp);
    g_mutex_unlock (&s->dlock);
    ok = decode_host (s, sp->latents, &n, error);
    spill_free (sp);
    g_mutex_lock (&s->dlock);
  } else if (in_slot_unlocked (s, chunk)) {
    HandoffEntry *e = entry_unlocked (s, chunk);

    ok = consume_before_unlocked (s, chunk, error);
    if (ok && s->channel) {
      HandoffJob job = { s, JOB_DECODE, NULL };
      LbWorkerJob wj = LB_WORKER_JOB_INIT;

      lingbot_session_arm_frames (s);
      /* the job takes the message out of the channel (and acks its slot,
       * which the next chunk's send may be waiting for): it leaves the
       * slot now, in submission order, before the lock is dropped */
      ok = front_job_unlocked (s, &job, &wj, FALSE, error);
      if (ok) {
        memset (e, 0, sizeof (*e));
        s->slot_next = chunk + 1;
      }
      g_mutex_unlock (&s->dlock);
      if (ok)
        ok = lb_worker_group_wait (s->dec_group, &wj, error);
      n = s->job_n_frames;
      if (ok)
        ok = lingbot_session_count_frames (s, &n);
      g_mutex_lock (&s->dlock);
    } else if (ok) {
      /* serial: the latent tensor stays until the decode is done (the
       * next generate waits for it, lingbot_session_handoff_prepare()) */
      e->decoding = TRUE;
      g_mutex_unlock (&s->dlock);
      ok = decode_host (s, s->latents, &n, error);
      g_mutex_lock (&s->dlock);
      memset (e, 0, sizeof (*e));
      s->slot_next = chunk + 1;
    }
  } else {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "session: chunk %" G_GUINT64_FORMAT " is not held any more", chunk);
    ok = FALSE;
  }
  gint64 t1 = g_get_monotonic_time ();
  if (ok)
    s->decoded = chunk + 1;
  drain_released_unlocked (s);
  g_cond_broadcast (&s->dcond);
  g_mutex_unlock (&s->dlock);
  if (!ok)
    return FALSE;
  lingbot_session_report_decode (chunk, n, t0, t1, n_frames, stats);
  return TRUE;
}

/* A counter of @s guarded by dlock. */
static guint64
locked_get (LingbotSession * s, const guint64 * counter)
{
  g_mutex_lock (&s->dlock);
  guint64 v = *counter;
  g_mutex_unlock (&s->dlock);
  return v;
}

/**
 * lingbot_session_get_latent_host_bytes:
 * @session: a session
 *
 * Returns: bytes of latents that crossed host memory so far: serial, every
 * chunk (the download from rank 0); with a decoder attached, only spills
 * and reads (0 when every chunk went from the DiT ranks to the decode
 * ranks through the channel).
 */
guint64
lingbot_session_get_latent_host_bytes (LingbotSession * session)
{
  return locked_get (session, &session->latent_host_bytes);
}

/**
 * lingbot_session_get_n_spills:
 * @session: a session
 *
 * Returns: chunks moved to host memory because their slot was needed (or
 * they were read) before a decoder took them.
 */
guint64
lingbot_session_get_n_spills (LingbotSession * session)
{
  return locked_get (session, &session->n_spills);
}

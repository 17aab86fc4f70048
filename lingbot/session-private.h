/* lingbot-gst: the session's private state, shared by session.c and the
 * decode hand-off (session-handoff.c)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "lingbot/lingbot-private.h"
#include "lingbot/dit-session.h"
#include "lingbot/noise.h"
#include "comm/channel.h"

G_BEGIN_DECLS

/**
 * HandoffEntry:
 * @chunk: the chunk whose latents the slot holds
 * @claimed: a decoder will decode it (lingbot_session_claim_chunk())
 * @released: its holder let it go undecoded (lingbot_session_release_chunk())
 * @decoding: a decode of it runs now (the decode lock is not held then)
 *
 * One chunk still in its slot: a channel slot (a decoder attached), or
 * the session's latent tensor (serial).
 */
typedef struct
{
  guint64 chunk;
  gboolean claimed;
  gboolean released;
  gboolean decoding;
} HandoffEntry;

/**
 * HandoffSpill:
 * @chunk: the chunk
 * @latents: host f32 [16, C, h, w], its latents
 *
 * A chunk moved out of its slot into host memory while undecoded (its
 * holder did not give it to a decoder in time, or it was read).
 */
typedef struct
{
  guint64 chunk;
  LbTensor *latents;
} HandoffSpill;

struct _LingbotSession
{
  LingbotWorld *world;
  LbWorkerGroup *group;
  int n_ranks;

  int width, height, lat_h, lat_w, chunk_frames;
  guint frames;                 /* 0 = unbounded */
  guint n_chunks;               /* 0 = unbounded */

  LbTensor *image;              /* f32 [3, H, W] */
  LbTensor start_frames;        /* view of image as f32 [3, 1, H, W] */
  LingbotVaeEncoder *enc;
  LingbotVaeDecoder *dec;
  gboolean dec_sharded;
  LingbotControl *control;
  LingbotDitSession *dit;
  LingbotNoise *noise;

  LbTensor *y;                  /* [1, 20, C, h, w] */
  LbTensor *ctl;                /* [1, 384, C, h, w]; CPU backend only */
  gboolean ctl_on_device;       /* ray map built on the ranks (ray_map op) */
  LbTensor *latents;            /* [1, 16, C, h, w] */
  LbTensor *frames_buf;         /* [3, 4C, H, W] */

  guint64 chunk;                /* chunks generated */
  guint64 y_chunk;              /* the chunk y holds the condition of,
                                 * G_MAXUINT64 before the first */
  guint64 decoded;              /* chunks decoded */
  guint64 frames_out;           /* video frames decoded so far */

  /* arguments of the rank-0 jobs (no allocation per chunk) */
  const LbTensor *job_latents;
  int job_n_frames;

  /* the decode hand-off (session-handoff.c, docs/design.md "Decode beside
   * generation"): with a decoder attached, its own worker group and a
   * channel from the DiT ranks; else (serial) the DiT group and
   * @latents.  Everything below is under dlock. */
  GMutex dlock;
  GCond dcond;
  LbWorkerGroup *dec_group;     /* attached decoder's ranks, or NULL */
  LbChannel *channel;           /* DiT ranks -> dec_group, or NULL */
  int n_slots;                  /* channel slots (1 serial: @latents) */
  HandoffEntry *entries;        /* [n_slots], by chunk % n_slots */
  guint64 slot_next;            /* chunks below it left their slot */
  GQueue spills;                /* HandoffSpill, by chunk */
  guint64 latent_host_bytes;    /* latents that crossed the host */
  guint64 n_spills;
  /* arguments of the decode jobs */
  guint64 job_chunk;
  gboolean job_ok;

  /* lingbot_session_set_cancellable() (cancel_lock): read by the
   * condition encode on rank 0; its "cancelled" handler bounds the stop */
  GMutex cancel_lock;
  GCancellable *cancellable;
  gulong cancel_handler;
  GError *cond_cancelled;       /* the encoder's cancel, from cond_job */

  /* lingbot_session_set_frames_func() (armed on the decoder per decode,
   * lingbot_session_arm_frames()) */
  LingbotFramesFunc frames_func;
  gpointer frames_data;

  /* lingbot_session_set_pass_func() */
  LingbotPassFunc pass_func;
  gpointer pass_data;
  GDestroyNotify pass_notify;

  /* lingbot_session_set_restart_func(): asked by the generate thread
   * before the first DiT pass and by rank 0 after each denoising pass
   * (dit_pass()); restart_keys / restart_at / restart_armed belong to the
   * chunk in flight (written by rank 0 within the DiT call only) */
  LingbotRestartFunc restart_func;
  gpointer restart_data;
  GDestroyNotify restart_notify;
  int restart_passes;           /* asked while fewer passes ran */
  int restart_max;              /* restarts per chunk that discard passes */
  guint restart_keys;           /* the keys of the DiT run in flight */
  int restart_at;               /* passes done when it asked for one, 0 */
  gboolean restart_armed;       /* this DiT run may still restart */

  /* lingbot_session_set_failure_func(): while set, an abort notify of
   * the world's group (the fields change only while it is not
   * registered); armed (atomic) while a generate runs, disarmed by the
   * call, so that it runs at most once per generate and only for this
   * session's chunks */
  LingbotFailureFunc failure_func;
  gpointer failure_data;
  GDestroyNotify failure_notify;
  gint failure_armed;
  guint64 failure_chunk;
};

gboolean lingbot_session_handoff_init (LingbotSession * s, GError ** error);
void lingbot_session_handoff_clear (LingbotSession * s);
gboolean lingbot_session_handoff_prepare (LingbotSession * s, GError ** error);
void lingbot_session_handoff_generated (LingbotSession * s, guint64 chunk);
void lingbot_session_free_decoder (LingbotSession * s);
gboolean lingbot_session_decode_latents (LingbotSession * s,
    const LbTensor * latents, int *n, GError ** error);
gboolean lingbot_session_count_frames (LingbotSession * s, int *n);
void lingbot_session_arm_frames (LingbotSession * s);
void lingbot_session_report_decode (guint64 chunk, int n, gint64 t0,
    gint64 t1, int *n_frames, LingbotChunkStats * stats);

G_END_DECLS

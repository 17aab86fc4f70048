/* lingbot-gst: lingbotvaedec's rooms: what they share
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbotvaedec is two files: gstlingbotvaedec.c (the element: class,
 * properties, pads, caps translation, events, queries, state changes)
 * and gstlingbotvaedec-decode.c (the decode thread and the push task:
 * negotiation, statistics, queues, the decode, the frames out, the
 * preview).  This header is theirs alone: the instance struct and the
 * functions the element calls in the decode room, named after it.
 */
#pragma once

#include <gst/gst.h>
#include <gst/video/video.h>

#include "gst/gstlingbotvaedec.h"
#include "gst/gstlingbotgen.h"
#include "gst/lingbot/gstlingbotmeta.h"
#include "gst/gstlingbotutil.h"
#include "gst/gstlingbotworldholder.h"

G_BEGIN_DECLS

GST_DEBUG_CATEGORY_EXTERN (gst_lingbot_vae_dec_debug);

/* the largest latents accepted from caps: lingbotgen's limits (video at
 * most 4096 x 4096, at most 64 latent frames per chunk) */
#define GST_LINGBOT_VAE_DEC_MAX_LATENT_SIZE (4096 / LINGBOT_LATENT_STRIDE)
#define GST_LINGBOT_VAE_DEC_MAX_LATENT_FRAMES 64

struct _GstLingbotVaeDec
{
  GstElement parent;

  GstPad *sinkpad;
  GstPad *srcpad;

  /* properties (object lock); model-path and devices are the holder's */
  GstLingbotWorldHolder holder; /* the world (object lock) */
  guint summary_interval;

  /* streaming thread */
  int lat_frames, lat_h, lat_w;
  int fps_n, fps_d;
  GstVideoInfo out_info;
  gboolean negotiated;
  GstBufferPool *pool;          /* output frames */
  guint64 frame_index;
  guint64 chunk;
  /* this element as a session's decoder
   * (gst_lingbot_session_handle_claim_decoder()) */
  gint decoder_id;
  gboolean said_not_mine;       /* (decode thread) */
  /* decode task: the frame meta of the chunk being pushed */
  guint64 frame_chunk;
  guint frame_keys;
  /* qlock: the newest frame queued (the preview always, each frame
   * group's last when live), pushed again on GST_LINGBOT_REPEAT_EVENT */
  GstBuffer *last_frame;
  LingbotDecoder *decoder;      /* plain-bytes path */

  /* the stats property and lingbot-summary (object lock): the chunks
   * decoded in this stream, appended by the decode thread, reset at
   * STREAM_START, FLUSH_STOP and READY->PAUSED (kept after a stop) */
  GstLingbotChunkLog *chunk_times;
  gboolean dit_unknown;         /* a chunk came without the generator meta */

  GstClockTime chunk_duration;  /* object lock; NONE before caps */
  GstLingbotLatencyEstimate decode_latency;     /* object lock: decode */
  GstLingbotLatencyStepper *latency_stepper;    /* its falls */
  GstClockTime position;        /* object lock: end of the last frame */
  GstClockTime made_end;        /* object lock: the latest end of a frame
                                 * queued for the push task */
  GstClockTime qos_from;        /* object lock: QoS of frames before it is
                                 * not passed upstream (queued before the
                                 * decode latency last fell at once) */

  /* Two tasks (qlock): the decode task takes latent chunks (and the
   * serialized events between them) from the input queue, which the chain
   * fills, so the generator starts its next chunk at once; it turns each
   * chunk into frame buffers for the output queue, from which the src
   * pad's task pushes them.  So chunk k + 1 decodes while chunk k's frames
   * wait for a clock-synchronised sink. */
  GMutex qlock;
  GCond qcond;
  GQueue queue;                 /* input: GstBuffer / serialized GstEvent */
  guint queued_buffers;
  guint max_buffers;            /* the session's slots: 2 */
  GQueue out;                   /* output: frame GstBuffer / GstEvent */
  guint out_buffers;
  guint max_out;                /* two chunks of frames */
  gboolean flushing;
  GstFlowReturn last_ret;       /* the push task's, returned by the chain */
  GThread *decode_thread;
  gboolean decode_run;          /* the thread runs while set */
  gboolean decode_busy;         /* it works on an item now */
  gboolean push_busy;           /* the push task pushes an item now */
  gboolean live;                /* object lock: the last LATENCY answer */
  guint64 frames_pushed;        /* object lock */

  /* live hold and key cuts (docs/elements.md lingbotvaedec "Hold"):
   * frames wait in the output queue until their PTS plus upstream's
   * latency; a chunk stamped before the end of the frames queued (the
   * generator's key-cut) replaces the frames it overlaps that are still
   * here */
  gboolean hold;                /* object lock: the property */
  GstClockTime hold_latency;    /* object lock: upstream's live min, or
                                 * NONE (not live, not known) */
  GstClockTime queued_end;      /* qlock: end of the last frame queued */
  GstClockTime drop_before;     /* decode task: this chunk's frames before
                                 * it are dropped (already pushed past) */
  guint64 frames_cut;           /* object lock: frames dropped by cuts */
  GstClockTime in_end;          /* qlock: end of the last chunk chained */
  GstClockTime cut_pts;         /* qlock: a key-cut chunk chained, not yet
                                 * decoding: frames of the chunks before it
                                 * from here on are dropped */

  /* the chunk in decode, its frames pushed as each latent frame's are
   * final (on_frames(), rank 0's thread, while the decode task waits in
   * the decode call) */
  gboolean stream_nowait;       /* a decode is in flight: out_push() does
                                 * not wait for room (qlock to read) */
  GstClockTime stream_pts;
  int stream_pushed;            /* frames of the chunk queued so far */
  gint64 stream_due_us;         /* the latest (final time - offset of the
                                 * frames in the chunk), monotonic us */
  gint64 stream_from_us;        /* when the generator had it ready (the
                                 * chunk meta), else the decode's start */
  gint64 stream_first_us;       /* when its first frames were final */
  double stream_first_seconds;  /* and that from the decode's start */
  GstFlowReturn stream_ret;
  GError *stream_error;
};

/* the statistics of the previous run dropped (READY->PAUSED) */
void gst_lingbot_vae_dec_decode_summary_reset (GstLingbotVaeDec * self);
/* a new session or a flush: the first chunk decodes to 13 frames again */
void gst_lingbot_vae_dec_decode_new_stream (GstLingbotVaeDec * self);
/* drops the stream's state: decoder, pool, counters, preview */
void gst_lingbot_vae_dec_decode_reset (GstLingbotVaeDec * self);
/* (object lock) the stats property's structure, named @name */
GstStructure *gst_lingbot_vae_dec_decode_summary_unlocked (GstLingbotVaeDec *
    self, const char *name);
/* the chain: a live chunk stamped before the end of those chained before
 * it (lingbotgen's key-cut) ends them at its PTS now */
void gst_lingbot_vae_dec_decode_cut_early (GstLingbotVaeDec * self,
    GstBuffer * buf);
/* (qlock) takes what is queued into @dropped, freed by the caller after
 * qlock is released */
void gst_lingbot_vae_dec_decode_clear_unlocked (GstLingbotVaeDec * self,
    GQueue * dropped);
/* sets or clears flushing, dropping the queues when set */
void gst_lingbot_vae_dec_decode_set_flushing (GstLingbotVaeDec * self,
    gboolean flushing);
/* the src pad's task: frames and events out of the output queue */
void gst_lingbot_vae_dec_decode_push_loop (GstLingbotVaeDec * self);
/* the src pad's activate-mode: the decode thread and the push task */
gboolean gst_lingbot_vae_dec_decode_src_activate_mode (GstPad * pad,
    GstObject * parent, GstPadMode mode, gboolean active);

G_END_DECLS

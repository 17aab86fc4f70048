/* lingbot-gst: lingbotgen's rooms: what they share
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbotgen is four files: gstlingbotgen.c (the element: class,
 * properties, pads, caps, state changes, queries), gstlingbotgen-control.c
 * (the control and image inputs, the keys of a chunk),
 * gstlingbotgen-session.c (opening the world, the output format, the
 * session and its callbacks) and gstlingbotgen-task.c (the chunk task:
 * live pacing, latency, stamping).  This header is theirs alone: the
 * instance struct and the functions one room calls in another, named
 * after the room that defines them.
 */
#pragma once

#include <gst/gst.h>
#include <gst/video/video.h>

#include "gst/gstlingbotgen.h"
#include "gst/gstlingbotcontrolsrc.h"
#include "gst/lingbot/gstlingbotmeta.h"
#include "gst/gstlingbotutil.h"
#include "gst/gstlingbotworldholder.h"

G_BEGIN_DECLS

GST_DEBUG_CATEGORY_EXTERN (gst_lingbot_gen_debug);

/* the largest width or height, the rate without fps or framerate, and
 * `chunk-frames`' default */
#define GST_LINGBOT_GEN_MAX_SIZE 4096
#define GST_LINGBOT_GEN_FALLBACK_FPS 16
#define GST_LINGBOT_GEN_DEFAULT_CHUNK_FRAMES 4

enum
{
  GST_LINGBOT_GEN_SIGNAL_PASS,
  GST_LINGBOT_GEN_N_SIGNALS
};

/* the element's signals (gstlingbotgen.c's class_init) */
extern guint gst_lingbot_gen_signals[GST_LINGBOT_GEN_N_SIGNALS];

struct _GstLingbotGen
{
  GstElement parent;

  GstPad *control_pad;
  GstPad *image_pad;            /* requested, or NULL */
  GstPad *srcpad;

  /* properties (object lock); model-path and devices are the holder's */
  GstLingbotWorldHolder holder; /* the world (object lock) */
  char *prompt;
  char *prompt_embeds;
  char *image_location;
  guint64 seed;
  int precision;                /* GstLingbotPrecision */
  int chunk_frames;
  int local_attn_size;
  int sink_size;
  int max_attention_size;
  double sample_shift;
  char *timestep_indices;
  guint frames;
  int width;
  int height;
  int pixel_area;
  int fps;
  int framerate_n, framerate_d; /* 0/1: unset */
  gboolean live;
  GstClockTime latency;         /* NONE: estimated */
  gboolean signal_passes;
  gboolean preview;
  int key_restart;              /* -1 auto, 0 never, N: fewer passes ran */
  guint key_restart_max;
  gboolean key_cut;
  guint64 restarts;             /* object lock: chunks' restarts, stats */

  /* object lock: the figures of the chunks generated since READY->PAUSED
   * (the stats property), kept after the stream stops */
  GstLingbotChunkLog *chunk_times;
  int image_location_width;     /* object lock: image-location's size, */
  int image_location_height;    /* read at NULL->READY */

  /* streaming state (lock, cond) */
  GMutex lock;
  GCond cond;
  gboolean flushing;
  gboolean control_eos;
  gboolean poses_expected;
  GstBuffer *poses;             /* the POSES record */
  LingbotControlSchedule *schedule;     /* the key state, both modes */
  GstClockTime horizon;         /* every event before this time is known */
  int session_chunk_frames;     /* 0 until the session exists */
  GstBuffer *image;             /* packed RGB */
  int image_width, image_height;
  gboolean image_eos;
  gboolean control_caps;        /* CAPS arrived on the control pad */
  gboolean playing;             /* PLAYING: live chunks wait for it */
  gboolean eos_pending;         /* send_event (EOS): after this chunk */
  gboolean repeat_pending;      /* live: a force-key-unit came; the frame
                                 * again if it waits for a key
                                 * (GST_LINGBOT_REPEAT_EVENT) */
  gboolean said_control_wait;   /* offline: the stalled-control INFO went */
  GstLingbotLatencyEstimate compute_latency;    /* live: a chunk's compute */
  GstLingbotLatencyStepper *latency_stepper;    /* its falls */
  guint64 frames_done;          /* frames pushed (POSITION) */
  guint64 chunks_done;          /* chunks counted out, as frames_done */
  GstClockTime qos_from;        /* live: QoS of frames stamped before
                                 * this (under another latency) ignored */
  GstClockTime stamped_end;     /* live: the end of the chunks stamped */
  int session_fps_n, session_fps_d;     /* the negotiated rate, 0/1 before */
  guint n_frames;               /* the session's video frames, 0 unbounded */
  /* live key restarts (on_restart(), rank 0 or the streaming thread):
   * whether the chunk in flight may take newer keys, and the snapshot it
   * took when it did */
  gboolean restart_ok;
  gboolean restarted;
  LingbotScheduleChunk restart_chunk;

  /* cancels the chunk in flight at its next DiT pass when the src pad
   * deactivates (PLAYING -> NULL); reset when it activates */
  GCancellable *cancellable;
  gint passes;                  /* atomic: DiT passes run, this stream */

  /* the one ERROR of a failed chunk: posted early by on_failure() (a rank
   * timed out: posted from another thread, a rank timeout before the
   * generate returns) or by the streaming thread, whichever claims it
   * first (gst_lingbot_gen_session_claim_error()) */
  gint attempt;                 /* atomic: generates started */
  gint error_attempt;           /* lock: the one whose ERROR is unposted */

  /* streaming thread only */
  GstLingbotSessionHandle *handle;
  guint64 chunk;
  guint64 frames_out;
  guint64 frames_skipped;       /* live: the frames behind real time */
  GstClockTime next_pts;        /* live: the end of the previous chunk */
  GstClockTime last_pts;        /* live: the previous chunk's PTS */
  guint last_keys;              /* the previous chunk's keys */
  gboolean have_last_keys;
  gboolean cut_next;            /* live: pace_live() stopped early on a key
                                 * change (key-cut) */
  gboolean caps_sent;
  gboolean device_memory;       /* memory:LingbotDevice negotiated */
};

/**
 * GstLingbotGenFormat:
 * @width: video width (a multiple of 16)
 * @height: video height
 * @fps_n: frame rate numerator
 * @fps_d: frame rate denominator
 *
 * What the session is created for and the latent caps then say.
 */
typedef struct
{
  int width, height;
  int fps_n, fps_d;
} GstLingbotGenFormat;

/* What gst_lingbot_gen_control_take_keys_unlocked() found */
typedef enum
{
  GST_LINGBOT_GEN_KEYS_OK,
  GST_LINGBOT_GEN_KEYS_DONE,
  GST_LINGBOT_GEN_KEYS_FLUSHING,
  /* live: it waits for a key and a force-key-unit came: the caller sends
   * GST_LINGBOT_REPEAT_EVENT and asks again with the same @ck */
  GST_LINGBOT_GEN_KEYS_REPEAT,
} GstLingbotGenKeysResult;

/* What a chunk's keys were taken from (the lingbot-chunk message's
 * "snapshot" and "revision"). */
typedef enum
{
  /* no control stream, or explicit poses */
  GST_LINGBOT_GEN_SNAPSHOT_NONE,
  /* a press's snapshot of the held set */
  GST_LINGBOT_GEN_SNAPSHOT_TAP,
  /* the held set when the chunk was decided */
  GST_LINGBOT_GEN_SNAPSHOT_HELD,
} GstLingbotGenSnapshot;

typedef struct
{
  guint keys;
  gboolean reset;
  GstLingbotGenSnapshot kind;
  guint revision;               /* presses applied so far (monotonic) */
  gboolean waited;              /* live: nothing was held, it waited for a
                                 * key (idle, not behind: no QoS gap) */
} GstLingbotGenKeys;

/* gstlingbotgen-control.c: whether @pad has a real peer upstream */
gboolean gst_lingbot_gen_control_has_upstream (GstPad * pad);
/* gstlingbotgen-control.c: sets *@flag under the lock, wakes the waiters */
void gst_lingbot_gen_control_raise (GstLingbotGen * self, gboolean * flag);
/* gstlingbotgen-control.c: the control pad's chain function */
GstFlowReturn gst_lingbot_gen_control_chain (GstPad * pad, GstObject * parent,
    GstBuffer * buf);
/* gstlingbotgen-control.c: the control pad's event function */
gboolean gst_lingbot_gen_control_event (GstPad * pad, GstObject * parent,
    GstEvent * event);
/* gstlingbotgen-control.c: GstElement::request_new_pad (the image pad) */
GstPad *gst_lingbot_gen_control_request_new_pad (GstElement * element,
    GstPadTemplate * templ, const gchar * name, const GstCaps * caps);
/* gstlingbotgen-control.c: GstElement::release_pad (the image pad) */
void gst_lingbot_gen_control_release_pad (GstElement * element, GstPad * pad);
/* gstlingbotgen-control.c: the keys of a chunk the schedule decided */
void gst_lingbot_gen_control_keys_from (GstLingbotGenKeys * ck,
    const LingbotScheduleChunk * c);
/* gstlingbotgen-control.c: (lock, may wait) the next chunk's keys */
GstLingbotGenKeysResult gst_lingbot_gen_control_take_keys_unlocked
    (GstLingbotGen * self, gboolean live, gboolean has_control,
    GstLingbotGenKeys * ck);

/* gstlingbotgen-session.c: the size the session is made for */
gboolean gst_lingbot_gen_session_choose_format (GstLingbotGen * self,
    GstLingbotGenFormat * out, GError ** error);
/* gstlingbotgen-session.c: whether the ERROR of @attempt is still to post */
gboolean gst_lingbot_gen_session_claim_error (GstLingbotGen * self,
    gint attempt);
/* gstlingbotgen-session.c: creates the session for @format */
gboolean gst_lingbot_gen_session_create (GstLingbotGen * self,
    const GstLingbotGenFormat * format, GError ** error);
/* gstlingbotgen-session.c: stream-start, caps and segment downstream */
void gst_lingbot_gen_session_push_stream_start (GstLingbotGen * self);
/* gstlingbotgen-session.c: width/height valid, else an ERROR posted */
gboolean gst_lingbot_gen_session_check_size (GstLingbotGen * self, int width,
    int height);
/* gstlingbotgen-session.c: NULL->READY: the world and the checks */
gboolean gst_lingbot_gen_session_open (GstLingbotGen * self);

/* gstlingbotgen-task.c: (lock) a live session's compute latency (ns) */
GstClockTime gst_lingbot_gen_task_compute_latency_unlocked (GstLingbotGen *
    self, GstClockTime chunk);
/* gstlingbotgen-task.c: a chunk's compute time or a sink's lateness */
void gst_lingbot_gen_task_note_compute_time (GstLingbotGen * self,
    GstClockTime measured, GstClockTimeDiff late);
/* gstlingbotgen-task.c: drops the session and the stream's state */
void gst_lingbot_gen_task_reset_stream (GstLingbotGen * self);
/* gstlingbotgen-task.c: the session's rate, else the properties' */
void gst_lingbot_gen_task_rate (GstLingbotGen * self, int *fps_n, int *fps_d);
/* gstlingbotgen-task.c: one steady chunk's duration at that rate (ns) */
GstClockTime gst_lingbot_gen_task_chunk_duration (GstLingbotGen * self);
/* gstlingbotgen-task.c: the src pad's activate-mode (starts the task) */
gboolean gst_lingbot_gen_task_src_activate_mode (GstPad * pad,
    GstObject * parent, GstPadMode mode, gboolean active);

G_END_DECLS

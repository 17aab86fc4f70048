/* lingbot-gst: helpers private to the plugin (error mapping, file checks,
 * chunk statistics, property tables)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gst/gst.h>
#include "lingbot/lingbot.h"

G_BEGIN_DECLS

/**
 * GstLingbotErrorContext:
 * @GST_LINGBOT_ERROR_CONTEXT_OPEN: starting (world, devices, files)
 * @GST_LINGBOT_ERROR_CONTEXT_STREAM: generating or decoding
 *
 * Decides the fallback of gst_lingbot_post_error(): LIBRARY/INIT when
 * starting, STREAM/FAILED while streaming.
 */
typedef enum
{
  GST_LINGBOT_ERROR_CONTEXT_OPEN,
  GST_LINGBOT_ERROR_CONTEXT_STREAM,
} GstLingbotErrorContext;

void gst_lingbot_error_map (const GError * error, GstLingbotErrorContext ctx,
    GQuark * domain, gint * code);

#define gst_lingbot_post_error(el, error, ctx, text, debug) \
  gst_lingbot_post_error_full ((el), (error), (ctx), (text), (debug), \
      __FILE__, GST_FUNCTION, __LINE__)
const char *gst_lingbot_error_hint (const GError * error);
void gst_lingbot_post_error_full (GstElement * element, const GError * error,
    GstLingbotErrorContext ctx, const char *text, const char *debug,
    const char *file, const char *function, int line);
void gst_lingbot_wait_state_change_done (GstElement * element, GMutex * lock,
    GCond * cond, const gboolean * stop);

gboolean gst_lingbot_check_readable (const char *path, GQuark * domain,
    gint * code, GError ** error);

GstBuffer *gst_lingbot_buffer_try_new (gsize size);

/**
 * GstLingbotChunkTimes:
 * @frames: video frames of the chunk
 * @compute_seconds: the element's compute seconds of the chunk (lingbotgen:
 *   control + condition + DiT; lingbotvaedec: DiT + VAE)
 * @end_us: g_get_monotonic_time() when the element was done with the chunk
 *   (generated, decoded): the chunk period is the time between two ends
 * @decode_seconds: the decode (lingbotvaedec; 0 in lingbotgen)
 * @decode_start_us: when the decode started (it ended at @end_us)
 * @generate_start_us: when the chunk's generation started (its compute
 *   seconds before @generate_end_us), 0 when unknown
 * @generate_end_us: when lingbot_session_generate() returned, 0 when unknown
 *
 * One chunk's figures, as lingbotgen and lingbotvaedec add them to their
 * #GstLingbotChunkLog for the `stats` property and the `lingbot-summary`
 * message (gst_lingbot_chunk_stats_new()).
 */
typedef struct
{
  int frames;
  double compute_seconds;
  gint64 end_us;
  double decode_seconds;
  gint64 decode_start_us;
  gint64 generate_start_us;
  gint64 generate_end_us;
} GstLingbotChunkTimes;

/**
 * GST_LINGBOT_CHUNK_LOG_WINDOW:
 *
 * The chunks whose records lingbotgen and lingbotvaedec keep for the
 * percentiles of their statistics (#GstLingbotChunkLog): 8192, 2 h 16 min
 * of one-second chunks in 576 KiB per element.
 */
#define GST_LINGBOT_CHUNK_LOG_WINDOW 8192

typedef struct _GstLingbotChunkLog GstLingbotChunkLog;

GstLingbotChunkLog *gst_lingbot_chunk_log_new (guint window);
void gst_lingbot_chunk_log_free (GstLingbotChunkLog * log);
void gst_lingbot_chunk_log_clear (GstLingbotChunkLog * log);
void gst_lingbot_chunk_log_add (GstLingbotChunkLog * log,
    const GstLingbotChunkTimes * times);
guint64 gst_lingbot_chunk_log_get_n_chunks (const GstLingbotChunkLog * log);
guint gst_lingbot_chunk_log_get_n_kept (const GstLingbotChunkLog * log);

GstStructure *gst_lingbot_chunk_stats_new (const char *name,
    const GstLingbotChunkLog * log, gboolean decoder);

/**
 * GST_LINGBOT_LATENCY_WINDOW:
 *
 * The chunks a #GstLingbotLatencyEstimate looks back on: 4, so that one
 * slow chunk stops counting 4 chunks later.
 */
#define GST_LINGBOT_LATENCY_WINDOW 4

/**
 * GstLingbotLatencyEstimate:
 * @samples: the last %GST_LINGBOT_LATENCY_WINDOW per-chunk times (ns),
 *   oldest first once full
 * @n: how many samples were added since the last reset
 * @announced: the figure reported (ns), %GST_CLOCK_TIME_NONE before the
 *   first sample
 *
 * A live element's share of the latency (lingbotgen: a chunk's compute;
 * lingbotvaedec: its decode), from a bounded statistic of the last chunks
 * (docs/elements.md "Latency"): the target is the largest of the last
 * %GST_LINGBOT_LATENCY_WINDOW samples plus an eighth; the announced figure
 * @goal: where the rule puts the figure (ns): @announced is @goal, except
 *   while @announced falls to it step by step
 *
 * A live element's share of the latency (lingbotgen: a chunk's compute;
 * lingbotvaedec: its decode), from a bounded statistic of the last chunks
 * (docs/elements.md "Latency"): the target is the largest of the last
 * %GST_LINGBOT_LATENCY_WINDOW samples plus an eighth; the goal moves to
 * the target when a sample is above it (up) or when the target is more
 * than a tenth below it (down), and stays otherwise, so that jitter does
 * not re-announce the latency at every chunk.  The announced figure
 * follows the goal at once up, and down only by
 * gst_lingbot_latency_estimate_step() (a #GstLingbotLatencyStepper takes
 * the steps), so that a fall does not make the frames already waiting at
 * a sink late.  Plain data: the caller locks.
 */
typedef struct
{
  GstClockTime samples[GST_LINGBOT_LATENCY_WINDOW];
  guint n;
  GstClockTime announced;
  GstClockTime goal;
} GstLingbotLatencyEstimate;

void gst_lingbot_latency_estimate_reset (GstLingbotLatencyEstimate * e);
gboolean gst_lingbot_latency_estimate_add (GstLingbotLatencyEstimate * e,
    GstClockTime sample);
gboolean gst_lingbot_latency_estimate_raise (GstLingbotLatencyEstimate * e,
    GstClockTime sample);
gboolean gst_lingbot_latency_estimate_step (GstLingbotLatencyEstimate * e,
    GstClockTime step);
gboolean gst_lingbot_latency_estimate_falling (const GstLingbotLatencyEstimate
    * e);

/**
 * GstLingbotLatencyStepper:
 *
 * Lowers a live element's #GstLingbotLatencyEstimate to its goal a quarter
 * of a frame at a time, a frame apart on the element's clock (above
 * 30 fps: 1/30 s apart, a frame each), and posts
 * %GST_MESSAGE_LATENCY at each step (the clock's thread).  Each
 * re-distribution then makes the frames already waiting at a sink due at
 * most a quarter of a frame sooner: the frame in the sink's clock wait
 * keeps its time, the next one is shown a quarter of a frame early, and
 * none is late; the video plays 4/3 as fast until the figure is down
 * (all at once, the frames due within the fall less a frame and the
 * sink's max-lateness were dropped).  Stopped while the element is not
 * PLAYING.  Opaque; the element frees it.
 */
typedef struct _GstLingbotLatencyStepper GstLingbotLatencyStepper;

GstLingbotLatencyStepper *gst_lingbot_latency_stepper_new (GstElement *
    element, GstDebugCategory * cat, GMutex * lock,
    GstLingbotLatencyEstimate * estimate);
void gst_lingbot_latency_stepper_start (GstLingbotLatencyStepper * s,
    GstClockTime frame, GstClockTime most);
void gst_lingbot_latency_stepper_set_playing (GstLingbotLatencyStepper * s,
    gboolean playing);
void gst_lingbot_latency_stepper_free (GstLingbotLatencyStepper * s);

/**
 * GstLingbotLatencyJumpFunc:
 * @data: the data given with it
 *
 * See gst_lingbot_latency_stepper_set_jump_func().
 */
typedef void (*GstLingbotLatencyJumpFunc) (gpointer data);

void gst_lingbot_latency_stepper_set_jump_func (GstLingbotLatencyStepper * s,
    GstLingbotLatencyJumpFunc func, gpointer data);

/**
 * GstLingbotProperty:
 * @prop_id: the property's id
 * @offset: where its field lies in the instance (G_STRUCT_OFFSET())
 *
 * A property an element keeps in a plain field of its instance, under
 * the object lock.  The field's C type follows the property's value type:
 * `char *` (string, owned by the instance), #gboolean, `int` (int or
 * enum), #guint, #guint64 or `double`.  A table of them is written and read
 * with gst_lingbot_property_set() and gst_lingbot_property_get(), set to
 * the GParamSpec defaults with gst_lingbot_properties_init() and freed
 * with gst_lingbot_properties_clear().
 */
typedef struct
{
  guint prop_id;
  gsize offset;
} GstLingbotProperty;

gboolean gst_lingbot_property_can_set (GstElement * element,
    const GParamSpec * pspec);
gboolean gst_lingbot_property_set (gpointer instance,
    const GstLingbotProperty * props, guint n_props, const GParamSpec * pspec,
    const GValue * value);
gboolean gst_lingbot_property_get (gpointer instance,
    const GstLingbotProperty * props, guint n_props, const GParamSpec * pspec,
    GValue * value);
void gst_lingbot_properties_init (gpointer instance,
    const GstLingbotProperty * props, guint n_props);
void gst_lingbot_properties_clear (gpointer instance,
    const GstLingbotProperty * props, guint n_props);

G_END_DECLS

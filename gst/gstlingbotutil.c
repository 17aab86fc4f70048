/* lingbot-gst: helpers private to the plugin
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <glib/gstdio.h>

#include "gst/gstlingbotutil.h"

/**
 * gst_lingbot_error_map:
 * @error: (nullable): a library error
 * @ctx: where it happened
 * @domain: (out): a GStreamer error domain
 * @code: (out): its code
 *
 * The error domains and codes of the plugin (docs/elements.md):
 * %LINGBOT_ERROR_NOT_FOUND -> RESOURCE/NOT_FOUND; %LINGBOT_ERROR_IO and
 * %LINGBOT_ERROR_FORMAT (a file that cannot be read as what it should be) ->
 * RESOURCE/OPEN_READ; %LINGBOT_ERROR_DEVICE, %LINGBOT_ERROR_UNSUPPORTED,
 * %LINGBOT_ERROR_RANK_FAILED, %LINGBOT_ERROR_TIMEOUT while starting -> LIBRARY/INIT;
 * %LINGBOT_ERROR_INVALID_ARGUMENT while starting -> LIBRARY/SETTINGS; anything
 * else -> LIBRARY/INIT when starting, STREAM/FAILED while streaming.
 */
void
gst_lingbot_error_map (const GError * error, GstLingbotErrorContext ctx,
    GQuark * domain, gint * code)
{
  gboolean open = ctx == GST_LINGBOT_ERROR_CONTEXT_OPEN;

  *domain = open ? GST_LIBRARY_ERROR : GST_STREAM_ERROR;
  *code = open ? GST_LIBRARY_ERROR_INIT : GST_STREAM_ERROR_FAILED;
  if (error == NULL || error->domain != LINGBOT_ERROR)
    return;
  switch (error->code) {
    case LINGBOT_ERROR_NOT_FOUND:
      *domain = GST_RESOURCE_ERROR;
      *code = GST_RESOURCE_ERROR_NOT_FOUND;
      break;
    case LINGBOT_ERROR_IO:
    case LINGBOT_ERROR_FORMAT:
      *domain = GST_RESOURCE_ERROR;
      *code = GST_RESOURCE_ERROR_OPEN_READ;
      break;
    case LINGBOT_ERROR_DEVICE:
    case LINGBOT_ERROR_UNSUPPORTED:
    case LINGBOT_ERROR_RANK_FAILED:
    case LINGBOT_ERROR_TIMEOUT:
      if (open) {
        *domain = GST_LIBRARY_ERROR;
        *code = GST_LIBRARY_ERROR_INIT;
      }
      break;
    case LINGBOT_ERROR_INVALID_ARGUMENT:
      if (open) {
        *domain = GST_LIBRARY_ERROR;
        *code = GST_LIBRARY_ERROR_SETTINGS;
      }
      break;
    default:
      break;
  }
}

/**
 * gst_lingbot_post_error_full:
 * @element: the element posting
 * @error: (nullable): the library error, mapped by gst_lingbot_error_map()
 * @ctx: where it happened
 * @text: the message (translated-style, for the user)
 * @debug: (nullable): debug details
 * @file: source file
 * @function: function
 * @line: line
 *
 * GST_ELEMENT_ERROR() with a domain and code chosen at run time.
 */
/**
 * gst_lingbot_error_hint:
 * @error: (nullable): a library error
 *
 * What to append to an ERROR's debug text for @error: for a rank timeout
 * (%LINGBOT_ERROR_TIMEOUT), where that timeout is set, since no property sets
 * it; "" otherwise.
 *
 * Returns: (transfer none): a static string, "" or starting with "; ".
 */
const char *
gst_lingbot_error_hint (const GError * error)
{
  if (g_error_matches (error, LINGBOT_ERROR, LINGBOT_ERROR_TIMEOUT))
    return "; the rank timeout is the environment variable "
        "LINGBOT_RANK_TIMEOUT_MS (milliseconds, default 60000)";
  return "";
}

void
gst_lingbot_post_error_full (GstElement * element, const GError * error,
    GstLingbotErrorContext ctx, const char *text, const char *debug,
    const char *file, const char *function, int line)
{
  GQuark domain;
  gint code;

  gst_lingbot_error_map (error, ctx, &domain, &code);
  GST_WARNING_OBJECT (element, "error: %s", text);
  gst_element_message_full (element, GST_MESSAGE_ERROR, domain, code,
      g_strdup (text), g_strdup (debug), file, function, line);
}

/**
 * gst_lingbot_wait_state_change_done:
 * @element: the element whose streaming thread is about to post an error
 * @lock: the mutex guarding @stop (not held by the caller)
 * @cond: the condition signalled when @stop is set
 * @stop: set (under @lock) when the element deactivates or flushes
 *
 * Waits until the state change that started @element's streaming thread
 * has returned: the top-level element's state lock is free (polled every
 * millisecond: the thread changing the state may be waiting for this one,
 * and deactivating sets @stop), then for at most 50 ms more until a thread
 * runs the default main context; or until @stop.  For an error found at
 * once in a streaming thread: an ERROR posted while the application is
 * still inside gst_element_set_state() is lost by gst-launch-1.0 (1.22 and
 * later), which quits its main loop from a bus sync handler: a
 * g_main_loop_quit() before g_main_loop_run() is forgotten, and it never
 * exits.
 */
void
gst_lingbot_wait_state_change_done (GstElement * element, GMutex * lock,
    GCond * cond, const gboolean * stop)
{
  GstObject *top = gst_object_ref (GST_OBJECT (element)), *parent;
  gint64 deadline = 0;

  while ((parent = gst_object_get_parent (top)) != NULL) {
    gst_object_unref (top);
    top = parent;
  }
  g_mutex_lock (lock);
  while (!*stop) {
    if (deadline == 0 && g_rec_mutex_trylock (GST_STATE_GET_LOCK (top))) {
      g_rec_mutex_unlock (GST_STATE_GET_LOCK (top));
      deadline = g_get_monotonic_time () + 50 * G_TIME_SPAN_MILLISECOND;
    }
    if (deadline != 0) {
      /* returned; then a moment for the application to enter its main
       * loop (gst-launch-1.0 runs the default context's) */
      if (g_get_monotonic_time () >= deadline)
        break;
      if (!g_main_context_acquire (NULL))
        break;
      g_main_context_release (NULL);
    }
    g_cond_wait_until (cond, lock, g_get_monotonic_time () +
        G_TIME_SPAN_MILLISECOND);
  }
  g_mutex_unlock (lock);
  gst_object_unref (top);
}

/**
 * gst_lingbot_buffer_try_new:
 * @size: bytes
 *
 * A system-memory buffer of @size bytes allocated with g_try_malloc(): for
 * the allocations whose size comes from input (caps, a reference image),
 * where a failure must become an element error rather than an abort.
 *
 * Returns: (transfer full) (nullable): the buffer, or %NULL when the memory
 *   cannot be had.
 */
GstBuffer *
gst_lingbot_buffer_try_new (gsize size)
{
  gpointer data = g_try_malloc (MAX (size, 1));

  if (data == NULL)
    return NULL;
  return gst_buffer_new_wrapped_full (0, data, size, 0, size, data, g_free);
}

/**
 * gst_lingbot_check_readable:
 * @path: a file the element is going to read
 * @domain: (out): RESOURCE on failure
 * @code: (out): NOT_FOUND when @path does not exist, OPEN_READ when it
 *   exists but cannot be read as a file (permissions, a directory)
 * @error: (out): the reason
 *
 * Returns: %TRUE when the file can be opened and read.
 */
gboolean
gst_lingbot_check_readable (const char *path, GQuark * domain, gint * code,
    GError ** error)
{
  FILE *f;
  int saved;

  *domain = GST_RESOURCE_ERROR;
  if (!g_file_test (path, G_FILE_TEST_EXISTS)) {
    *code = GST_RESOURCE_ERROR_NOT_FOUND;
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_NOT_FOUND,
        "'%s' does not exist", path);
    return FALSE;
  }
  *code = GST_RESOURCE_ERROR_OPEN_READ;
  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR)) {
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_IO,
        "'%s' is not a regular file", path);
    return FALSE;
  }
  f = g_fopen (path, "rb");
  if (f == NULL) {
    saved = errno;
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_IO, "cannot open '%s': %s",
        path, g_strerror (saved));
    return FALSE;
  }
  if (fgetc (f) == EOF && ferror (f)) {
    saved = errno;
    fclose (f);
    g_set_error (error, LINGBOT_ERROR, LINGBOT_ERROR_IO, "cannot read '%s': %s",
        path, g_strerror (saved));
    return FALSE;
  }
  fclose (f);
  return TRUE;
}

/* ---- chunk statistics (the stats property, lingbot-summary) ---- */

static int
cmp_double (gconstpointer a, gconstpointer b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

/* nearest rank: the smallest value with at least p % of the values at or
 * below it; @sorted ascending */
static double
percentile (const double *sorted, guint n, double p)
{
  guint rank;

  if (n == 0)
    return 0.0;
  rank = (guint) ceil (p / 100.0 * n - 1e-9);
  return sorted[CLAMP (rank, 1, n) - 1];
}

typedef struct
{
  GstLingbotChunkTimes t;
  double period;                /* seconds since the previous chunk's end */
  gboolean has_period;          /* FALSE for the first chunk */
} ChunkEntry;

/**
 * GstLingbotChunkLog:
 *
 * The figures of a stream's chunks for gst_lingbot_chunk_stats_new(),
 * in bounded memory: totals, means, maxima and the decode-hidden
 * fraction over every chunk, in the order and arithmetic of a list of
 * every record; the records themselves (for the percentiles) of the last
 * @window chunks only, in a ring.  Not locked: the elements hold their
 * object lock.
 */
struct _GstLingbotChunkLog
{
  guint window;
  GArray *ring;                 /* ChunkEntry; grows to @window, then wraps */
  guint head;                   /* oldest entry once full */
  guint64 n;                    /* chunks added since the last clear */
  gint64 last_end_us;
  double compute_total, compute_max, steady_seconds, decode_total;
  double period_total, period_max;
  guint64 frames, steady_frames, n_periods;
  /* the decode-hidden figures of the chunks that left the ring */
  gint64 gone_decode_us, gone_hidden_us;
};

/**
 * gst_lingbot_chunk_log_new:
 * @window: how many chunk records to keep (>= 2), e.g.
 *   %GST_LINGBOT_CHUNK_LOG_WINDOW
 *
 * Returns: (transfer full): an empty log; gst_lingbot_chunk_log_free()
 */
GstLingbotChunkLog *
gst_lingbot_chunk_log_new (guint window)
{
  GstLingbotChunkLog *log = g_new0 (GstLingbotChunkLog, 1);

  log->window = MAX (window, 2);
  log->ring = g_array_new (FALSE, FALSE, sizeof (ChunkEntry));
  return log;
}

/**
 * gst_lingbot_chunk_log_free:
 * @log: (transfer full) (nullable): a log
 */
void
gst_lingbot_chunk_log_free (GstLingbotChunkLog * log)
{
  if (log == NULL)
    return;
  g_array_unref (log->ring);
  g_free (log);
}

/**
 * gst_lingbot_chunk_log_clear:
 * @log: a log
 *
 * Forgets every chunk (a new stream); keeps the ring's memory.
 */
void
gst_lingbot_chunk_log_clear (GstLingbotChunkLog * log)
{
  GArray *ring = log->ring;
  guint window = log->window;

  g_array_set_size (ring, 0);
  memset (log, 0, sizeof *log);
  log->ring = ring;
  log->window = window;
}

/* entry @i of the ring in chronological order (0 = oldest kept) */
static ChunkEntry *
ring_at (const GstLingbotChunkLog * log, guint i)
{
  return &g_array_index (log->ring, ChunkEntry,
      (log->head + i) % log->ring->len);
}

/* record @i in chronological order of the kept ones followed by @extra
 * (NULL for none) */
static const GstLingbotChunkTimes *
record_at (const GstLingbotChunkLog * log, const GstLingbotChunkTimes * extra,
    guint i)
{
  return i < log->ring->len ? &ring_at (log, i)->t : extra;
}

/* The decode time of record @k (its decode interval) and the part of it
 * during which the generator computed a later chunk: the overlap with the
 * generate intervals of records @k + 1 .. @n - 1 (one generator: they are
 * in order, so the scan stops at the first that starts after the
 * decode). */
static void
decode_hidden (const GstLingbotChunkLog * log,
    const GstLingbotChunkTimes * extra, guint k, guint n, gint64 * decode,
    gint64 * hidden)
{
  const GstLingbotChunkTimes *c = record_at (log, extra, k);
  const gint64 ds = c->decode_start_us, de = c->end_us;

  if (de <= ds)
    return;
  *decode += de - ds;
  for (guint j = k + 1; j < n; j++) {
    const GstLingbotChunkTimes *cj = record_at (log, extra, j);
    const gint64 gs = cj->generate_start_us, ge = cj->generate_end_us;

    if (ge == 0)
      continue;                 /* not from lingbotgen's meta */
    if (gs >= de)
      break;
    *hidden += MAX (0, MIN (de, ge) - MAX (ds, gs));
  }
}

/**
 * gst_lingbot_chunk_log_add:
 * @log: a log
 * @times: the next chunk's figures
 *
 * Adds a chunk: its figures to the totals, its record to the ring; when
 * the ring is full the oldest record leaves it, its decode-hidden share
 * first computed against the records after it (exact as long as a chunk
 * generated within @window chunks starts after its decode ends).
 */
void
gst_lingbot_chunk_log_add (GstLingbotChunkLog * log,
    const GstLingbotChunkTimes * times)
{
  ChunkEntry e = { *times, 0.0, FALSE };

  if (log->n > 0) {
    e.period = (double) (times->end_us - log->last_end_us) / G_USEC_PER_SEC;
    e.has_period = TRUE;
    log->period_total += e.period;
    log->period_max = log->n_periods ? MAX (log->period_max, e.period) :
        e.period;
    log->n_periods++;
    log->steady_seconds += times->compute_seconds;
    log->steady_frames += (guint64) MAX (times->frames, 0);
  }
  log->compute_total += times->compute_seconds;
  log->compute_max = log->n ? MAX (log->compute_max, times->compute_seconds) :
      times->compute_seconds;
  log->decode_total += times->decode_seconds;
  log->frames += (guint64) MAX (times->frames, 0);
  log->last_end_us = times->end_us;
  log->n++;

  if (log->ring->len < log->window) {
    g_array_append_val (log->ring, e);
    return;
  }
  /* full: the oldest leaves, its decode share counted against the rest
   * and the newcomer */
  decode_hidden (log, times, 0, log->ring->len + 1, &log->gone_decode_us,
      &log->gone_hidden_us);
  *ring_at (log, 0) = e;
  log->head = (log->head + 1) % log->window;
}

/**
 * gst_lingbot_chunk_log_get_n_chunks:
 * @log: a log
 *
 * Returns: the chunks added since the last clear
 */
guint64
gst_lingbot_chunk_log_get_n_chunks (const GstLingbotChunkLog * log)
{
  return log->n;
}

/**
 * gst_lingbot_chunk_log_get_n_kept:
 * @log: a log
 *
 * Returns: the chunk records held, at most the log's window
 */
guint
gst_lingbot_chunk_log_get_n_kept (const GstLingbotChunkLog * log)
{
  return log->ring->len;
}

/* sorts @v (n values) and sets NAME-mean (@total / @count), -p50, -p90,
 * -p99 (of @v) and -max (@max); 0 for no values */
static void
set_distribution (GstStructure * s, const char *name, double *v, guint n,
    double total, guint64 count, double max)
{
  g_autofree char *mean = g_strdup_printf ("%s-mean", name);
  g_autofree char *p50 = g_strdup_printf ("%s-p50", name);
  g_autofree char *p90 = g_strdup_printf ("%s-p90", name);
  g_autofree char *p99 = g_strdup_printf ("%s-p99", name);
  g_autofree char *mx = g_strdup_printf ("%s-max", name);

  qsort (v, n, sizeof (double), cmp_double);
  gst_structure_set (s,
      mean, G_TYPE_DOUBLE, count ? total / count : 0.0,
      p50, G_TYPE_DOUBLE, percentile (v, n, 50),
      p90, G_TYPE_DOUBLE, percentile (v, n, 90),
      p99, G_TYPE_DOUBLE, percentile (v, n, 99),
      mx, G_TYPE_DOUBLE, count ? max : 0.0, NULL);
}

/**
 * gst_lingbot_chunk_stats_new:
 * @name: the structure's name ("lingbot-stats", "lingbot-summary")
 * @log: the chunks so far
 * @decoder: add the decode fields (lingbotvaedec)
 *
 * Builds the figures of lingbotgen's and lingbotvaedec's `stats` property
 * and of lingbotvaedec's `lingbot-summary` message (docs/elements.md):
 * chunks, frames, steady-frames / -seconds / -fps (the chunks after the
 * first, over their compute seconds), compute-seconds-total and its
 * distribution (-mean, -p50, -p90, -p99, -max, nearest rank), the same
 * of the chunk period (period-seconds-*: the time between the ends of
 * two consecutive chunks, one value fewer than chunks); with @decoder
 * decode-seconds-total / -mean and decode-hidden-fraction.  Every figure
 * is over all the chunks but the percentiles, which are over the last
 * %GST_LINGBOT_CHUNK_LOG_WINDOW (the log's window).
 *
 * Returns: (transfer full): a new structure
 */
GstStructure *
gst_lingbot_chunk_stats_new (const char *name, const GstLingbotChunkLog * log,
    gboolean decoder)
{
  const guint kept = log->ring->len;
  g_autofree double *v = g_new0 (double, MAX (kept, 1));
  GstStructure *s;
  guint np = 0;

  s = gst_structure_new (name,
      "chunks", G_TYPE_UINT, (guint) MIN (log->n, G_MAXUINT),
      "frames", G_TYPE_UINT64, log->frames,
      "steady-frames", G_TYPE_UINT64, log->steady_frames,
      "steady-seconds", G_TYPE_DOUBLE, log->steady_seconds,
      "steady-fps", G_TYPE_DOUBLE,
      log->steady_seconds > 0.0 ?
      (double) log->steady_frames / log->steady_seconds : 0.0,
      "compute-seconds-total", G_TYPE_DOUBLE, log->compute_total, NULL);
  for (guint i = 0; i < kept; i++)
    v[i] = ring_at (log, i)->t.compute_seconds;
  set_distribution (s, "compute-seconds", v, kept, log->compute_total,
      log->n, log->compute_max);
  for (guint i = 0; i < kept; i++)
    if (ring_at (log, i)->has_period)
      v[np++] = ring_at (log, i)->period;
  set_distribution (s, "period-seconds", v, np, log->period_total,
      log->n_periods, log->period_max);
  if (decoder) {
    /* the kept chunks but the newest (nothing generated after it can
     * hide its decode), after those that left the ring */
    gint64 decode_us = log->gone_decode_us, hidden_us = log->gone_hidden_us;
    for (guint k = 0; k + 1 < kept; k++)
      decode_hidden (log, NULL, k, kept, &decode_us, &hidden_us);
    gst_structure_set (s,
        "decode-seconds-total", G_TYPE_DOUBLE, log->decode_total,
        "decode-seconds-mean", G_TYPE_DOUBLE,
        log->n ? log->decode_total / log->n : 0.0,
        "decode-hidden-fraction", G_TYPE_DOUBLE,
        decode_us > 0 ? (double) hidden_us / (double) decode_us : 0.0, NULL);
  }
  return s;
}

/* ---- property tables ---- */

/* the field types besides strings: the fundamental GType, the field's C
 * type, the GValue accessors' name */
#define FIELD_TYPES(X) \
  X (G_TYPE_BOOLEAN, gboolean, boolean) \
  X (G_TYPE_INT, int, int) \
  X (G_TYPE_ENUM, int, enum) \
  X (G_TYPE_UINT, guint, uint) \
  X (G_TYPE_UINT64, guint64, uint64) \
  X (G_TYPE_DOUBLE, double, double)

#define SET_FIELD(gtype, ctype, name) \
  case gtype: \
    *(ctype *) field = g_value_get_##name (value); \
    break;
#define GET_FIELD(gtype, ctype, name) \
  case gtype: \
    g_value_set_##name (value, *(ctype *) field); \
    break;

static gpointer
property_field (gpointer instance, const GstLingbotProperty * props,
    guint n_props, guint prop_id)
{
  for (guint i = 0; i < n_props; i++)
    if (props[i].prop_id == prop_id)
      return (guint8 *) instance + props[i].offset;
  return NULL;
}

/**
 * gst_lingbot_property_can_set:
 * @element: the element whose property is being set
 * @pspec: the property
 *
 * Whether @pspec may be set in @element's current state: a property
 * flagged %GST_PARAM_MUTABLE_READY only in NULL or READY, one flagged
 * %GST_PARAM_MUTABLE_PAUSED not in PLAYING (what gst-inspect-1.0 prints as
 * "changeable only in ...").  Otherwise it says so with a GLib warning
 * (domain "lingbot") naming the element, the property and the state, as
 * filesrc does for a
 * `location` set while a file is open, and the caller keeps the value it
 * has: a session already made would not use the new one, and reading the
 * property back must not report a value that is not in effect.  Takes the
 * object lock: call before the set_property vfunc takes it.
 *
 * Returns: %TRUE when the new value may be stored
 */
gboolean
gst_lingbot_property_can_set (GstElement * element, const GParamSpec * pspec)
{
  GstState state, limit;

  if (pspec->flags & GST_PARAM_MUTABLE_PLAYING)
    return TRUE;
  if (pspec->flags & GST_PARAM_MUTABLE_PAUSED)
    limit = GST_STATE_PAUSED;
  else if (pspec->flags & GST_PARAM_MUTABLE_READY)
    limit = GST_STATE_READY;
  else
    return TRUE;
  GST_OBJECT_LOCK (element);
  state = GST_STATE (element);
  GST_OBJECT_UNLOCK (element);
  if (state <= limit)
    return TRUE;
  /* g_log(), not g_warning(): a handler of the domain "lingbot" sees it
   * (g_warning() goes to the structured writer) */
  g_log ("lingbot", G_LOG_LEVEL_WARNING, "%s: property '%s' can only be "
      "changed in the NULL%s state, "
      "not in %s: the new value is ignored (set it before the pipeline "
      "starts, or set the element to READY first)", GST_ELEMENT_NAME (element),
      pspec->name, limit == GST_STATE_READY ? " or READY" :
      ", READY or PAUSED", gst_element_state_get_name (state));
  return FALSE;
}

/**
 * gst_lingbot_property_set:
 * @instance: the element
 * @props: (array length=n_props): its table
 * @n_props: the table's length
 * @pspec: the property being set
 * @value: its value
 *
 * Stores @value in the field of @pspec; call with the object lock held
 * (the set_property vfunc).
 *
 * Returns: %TRUE when @pspec is in @props
 */
gboolean
gst_lingbot_property_set (gpointer instance, const GstLingbotProperty * props,
    guint n_props, const GParamSpec * pspec, const GValue * value)
{
  gpointer field = property_field (instance, props, n_props, pspec->param_id);

  if (field == NULL)
    return FALSE;
  switch (G_TYPE_FUNDAMENTAL (pspec->value_type)) {
    case G_TYPE_STRING:
      g_free (*(char **) field);
      *(char **) field = g_value_dup_string (value);
      break;
      FIELD_TYPES (SET_FIELD)
    default:
      g_return_val_if_reached (FALSE);
  }
  return TRUE;
}

/**
 * gst_lingbot_property_get:
 * @instance: the element
 * @props: (array length=n_props): its table
 * @n_props: the table's length
 * @pspec: the property being read
 * @value: (out caller-allocates): its value
 *
 * Reads the field of @pspec into @value; call with the object lock held
 * (the get_property vfunc).
 *
 * Returns: %TRUE when @pspec is in @props
 */
gboolean
gst_lingbot_property_get (gpointer instance, const GstLingbotProperty * props,
    guint n_props, const GParamSpec * pspec, GValue * value)
{
  gpointer field = property_field (instance, props, n_props, pspec->param_id);

  if (field == NULL)
    return FALSE;
  switch (G_TYPE_FUNDAMENTAL (pspec->value_type)) {
    case G_TYPE_STRING:
      g_value_set_string (value, *(char **) field);
      break;
      FIELD_TYPES (GET_FIELD)
    default:
      g_return_val_if_reached (FALSE);
  }
  return TRUE;
}

/* @init: sets the fields of @props to their GParamSpecs' defaults; else
 * frees the strings among them.  Only the specs @instance's own type
 * installed (an id may stand twice: a deprecated alias shares its
 * field). */
static void
properties_reset (gpointer instance, const GstLingbotProperty * props,
    guint n_props, gboolean init)
{
  guint n = 0;
  g_autofree GParamSpec **all =
      g_object_class_list_properties (G_OBJECT_GET_CLASS (instance), &n);

  for (guint i = 0; i < n; i++) {
    GParamSpec *pspec = all[i];
    gpointer field = property_field (instance, props, n_props,
        pspec->param_id);

    if (field == NULL || pspec->owner_type != G_OBJECT_TYPE (instance))
      continue;
    if (init)
      gst_lingbot_property_set (instance, props, n_props, pspec,
          g_param_spec_get_default_value (pspec));
    else if (G_TYPE_FUNDAMENTAL (pspec->value_type) == G_TYPE_STRING)
      g_clear_pointer ((char **) field, g_free);
  }
}

/**
 * gst_lingbot_properties_init:
 * @instance: the element, in its instance init
 * @props: (array length=n_props): its table
 * @n_props: the table's length
 *
 * Sets every field of @props to its GParamSpec's default: the defaults
 * are said once, where the properties are installed.
 */
void
gst_lingbot_properties_init (gpointer instance,
    const GstLingbotProperty * props, guint n_props)
{
  properties_reset (instance, props, n_props, TRUE);
}

/**
 * gst_lingbot_properties_clear:
 * @instance: the element, in its finalize
 * @props: (array length=n_props): its table
 * @n_props: the table's length
 *
 * Frees the string fields of @props.
 */
void
gst_lingbot_properties_clear (gpointer instance,
    const GstLingbotProperty * props, guint n_props)
{
  properties_reset (instance, props, n_props, FALSE);
}

/**
 * gst_lingbot_latency_estimate_reset:
 * @e: an estimate
 *
 * Forgets every sample (a new stream): nothing announced.
 */
void
gst_lingbot_latency_estimate_reset (GstLingbotLatencyEstimate * e)
{
  memset (e, 0, sizeof (*e));
  e->announced = GST_CLOCK_TIME_NONE;
  e->goal = GST_CLOCK_TIME_NONE;
}

/* the goal after the samples changed; the announced figure follows it up
 * (TRUE if that moved) */
static gboolean
latency_estimate_update (GstLingbotLatencyEstimate * e)
{
  guint n = MIN (e->n, GST_LINGBOT_LATENCY_WINDOW);
  GstClockTime worst = 0, target;

  for (guint i = 0; i < n; i++)
    worst = MAX (worst, e->samples[i]);
  target = worst + worst / 8;
  if (GST_CLOCK_TIME_IS_VALID (e->goal) && worst <= e->goal
      && target >= e->goal - e->goal / 10)
    return FALSE;
  e->goal = target;
  if (GST_CLOCK_TIME_IS_VALID (e->announced) && target <= e->announced)
    return FALSE;
  e->announced = target;
  return TRUE;
}

/**
 * gst_lingbot_latency_estimate_add:
 * @e: an estimate
 * @sample: one chunk's time (ns)
 *
 * Records the time of a new chunk (the oldest of a full window leaves)
 * and moves the goal by the rule of #GstLingbotLatencyEstimate; the
 * announced figure follows a goal above it.
 *
 * Returns: whether @e->announced changed (post GST_MESSAGE_LATENCY then);
 *   a goal below it leaves it, gst_lingbot_latency_estimate_falling() says
 *   so
 */
gboolean
gst_lingbot_latency_estimate_add (GstLingbotLatencyEstimate * e,
    GstClockTime sample)
{
  e->samples[e->n % GST_LINGBOT_LATENCY_WINDOW] = sample;
  e->n++;
  return latency_estimate_update (e);
}

/**
 * gst_lingbot_latency_estimate_raise:
 * @e: an estimate
 * @sample: a time (ns) the newest chunk is now known to have taken, e.g.
 *   the announced figure plus a sink's QoS lateness
 *
 * Raises the newest sample to @sample (a new one when there is none), so
 * that the raise leaves the window with that chunk, and moves the goal by
 * the rule.
 *
 * Returns: whether @e->announced changed
 */
gboolean
gst_lingbot_latency_estimate_raise (GstLingbotLatencyEstimate * e,
    GstClockTime sample)
{
  GstClockTime *newest;

  if (e->n == 0)
    return gst_lingbot_latency_estimate_add (e, sample);
  newest = &e->samples[(e->n - 1) % GST_LINGBOT_LATENCY_WINDOW];
  *newest = MAX (*newest, sample);
  return latency_estimate_update (e);
}

/**
 * gst_lingbot_latency_estimate_falling:
 * @e: an estimate
 *
 * Returns: whether the announced figure is above the goal (steps to take)
 */
gboolean
gst_lingbot_latency_estimate_falling (const GstLingbotLatencyEstimate * e)
{
  return GST_CLOCK_TIME_IS_VALID (e->announced)
      && GST_CLOCK_TIME_IS_VALID (e->goal) && e->announced > e->goal;
}

/**
 * gst_lingbot_latency_estimate_step:
 * @e: an estimate
 * @step: the most the announced figure may fall (ns),
 *   %GST_CLOCK_TIME_NONE for all the way to the goal
 *
 * Lowers the announced figure towards the goal by @step at most.
 *
 * Returns: whether @e->announced changed (post GST_MESSAGE_LATENCY then)
 */
gboolean
gst_lingbot_latency_estimate_step (GstLingbotLatencyEstimate * e,
    GstClockTime step)
{
  if (!gst_lingbot_latency_estimate_falling (e) || step == 0)
    return FALSE;
  if (!GST_CLOCK_TIME_IS_VALID (step) || e->announced - e->goal <= step)
    e->announced = e->goal;
  else
    e->announced -= step;
  return TRUE;
}

struct _GstLingbotLatencyStepper
{
  GMutex lock;
  GstElement *element;          /* not held; NULL once freed */
  GstDebugCategory *cat;        /* the element's, for its log lines */
  GMutex *estimate_lock;        /* NULL: the element's object lock */
  GstLingbotLatencyEstimate *estimate;
  GstClockID id;                /* the next step, NULL when none */
  GstClockTime interval, step;  /* from the last start's frame */
  GstClockTime most;            /* the last start's */
  gboolean playing;
  GstLingbotLatencyJumpFunc jump_func;  /* NULL: none */
  gpointer jump_data;
};

/* Steps are a frame apart, and 1/30 s at the least, so that a high rate
 * does not post a message a frame; each a quarter of that, a frame at the
 * most: a step of up to a frame makes no queued frame late. */
#define STEP_MIN_INTERVAL (GST_SECOND / 30)

static void
stepper_lock_estimate (GstLingbotLatencyStepper * s)
{
  if (s->estimate_lock)
    g_mutex_lock (s->estimate_lock);
  else
    GST_OBJECT_LOCK (s->element);
}

static void
stepper_unlock_estimate (GstLingbotLatencyStepper * s)
{
  if (s->estimate_lock)
    g_mutex_unlock (s->estimate_lock);
  else
    GST_OBJECT_UNLOCK (s->element);
}

static void
stepper_clear (gpointer data)
{
  GstLingbotLatencyStepper *s = data;

  g_mutex_clear (&s->lock);
}

static void
stepper_release (gpointer data)
{
  g_atomic_rc_box_release_full (data, stepper_clear);
}

static gboolean stepper_fire (GstClock * clock, GstClockTime time,
    GstClockID id, gpointer data);

/* (s->lock) the next step at @time on @clock */
static void
stepper_arm (GstLingbotLatencyStepper * s, GstClock * clock, GstClockTime time)
{
  s->id = gst_clock_new_single_shot_id (clock, time);
  if (gst_clock_id_wait_async (s->id, stepper_fire,
          g_atomic_rc_box_acquire (s), stepper_release) != GST_CLOCK_OK) {
    /* (a new entry with a valid time on a clock that has async waits
     * fails only in the clock's own wait_async, after the entry took the
     * data: it is released with the entry) */
    gst_clock_id_unref (s->id);
    s->id = NULL;
  }
}

static void
stepper_post (GstDebugCategory * cat, GstElement * element,
    GstClockTime announced)
{
  GST_CAT_INFO_OBJECT (cat, element, "latency share falls to %"
      GST_TIME_FORMAT ": posting a latency message", GST_TIME_ARGS (announced));
  gst_element_post_message (element,
      gst_message_new_latency (GST_OBJECT (element)));
  gst_object_unref (element);
}

/* (s->lock, element set, PLAYING) @step off the announced figure (after
 * what lies above s->most with @cap), the next step armed a frame from
 * now while it is above its goal; the element to post with (a ref) when
 * it moved */
static GstElement *
stepper_take (GstLingbotLatencyStepper * s, GstClock * clock,
    GstClockTime step, gboolean cap, GstClockTime * announced)
{
  GstLingbotLatencyEstimate *e = s->estimate;
  gboolean moved = FALSE, falling;

  stepper_lock_estimate (s);
  if (clock == NULL)
    step = GST_CLOCK_TIME_NONE;
  else if (cap && gst_lingbot_latency_estimate_falling (e)
      && GST_CLOCK_TIME_IS_VALID (s->most) && e->announced - e->goal > s->most)
    step = e->announced - e->goal - s->most;
  moved = gst_lingbot_latency_estimate_step (e, step);
  /* a fall beyond a quarter-frame step went at once: the frames queued
   * for the old figure are late by design */
  if (moved && step > s->step && s->jump_func != NULL)
    s->jump_func (s->jump_data);
  falling = gst_lingbot_latency_estimate_falling (e);
  *announced = e->announced;
  stepper_unlock_estimate (s);
  if (falling && clock != NULL && s->id == NULL)
    stepper_arm (s, clock, gst_clock_get_time (clock) + s->interval);
  return moved ? gst_object_ref (s->element) : NULL;
}

/* the clock's thread: one step */
static gboolean
stepper_fire (GstClock * clock, GstClockTime time, GstClockID id, gpointer data)
{
  GstLingbotLatencyStepper *s = data;
  GstElement *element = NULL;
  GstClockTime announced = GST_CLOCK_TIME_NONE;

  g_mutex_lock (&s->lock);
  if (s->element != NULL && s->playing && s->id == id) {
    gst_clock_id_unref (s->id);
    s->id = NULL;
    element = stepper_take (s, clock, s->step, FALSE, &announced);
  }
  g_mutex_unlock (&s->lock);
  if (element != NULL)
    stepper_post (s->cat, element, announced);
  return TRUE;
}

/* (s->lock) what a start or the return to PLAYING does */
static GstElement *
stepper_resume (GstLingbotLatencyStepper * s, GstClockTime * announced)
{
  GstElement *element;
  GstClock *clock;

  if (s->element == NULL || !s->playing)
    return NULL;
  clock = gst_element_get_clock (s->element);
  element = stepper_take (s, clock, 0, TRUE, announced);
  gst_clear_object (&clock);
  return element;
}

/**
 * gst_lingbot_latency_stepper_new:
 * @element: the live element whose share @estimate is
 * @cat: (nullable): @element's debug category, for the steps' log lines
 *   (%NULL: GStreamer's default category)
 * @lock: (nullable): the lock that guards @estimate, %NULL for @element's
 *   object lock
 * @estimate: the estimate to lower (lives as long as @element)
 *
 * Returns: (transfer full): a stepper, idle until
 *   gst_lingbot_latency_stepper_set_playing(); free it with
 *   gst_lingbot_latency_stepper_free() before @element is finalized
 */
GstLingbotLatencyStepper *
gst_lingbot_latency_stepper_new (GstElement * element,
    GstDebugCategory * cat, GMutex * lock, GstLingbotLatencyEstimate * estimate)
{
  GstLingbotLatencyStepper *s = g_atomic_rc_box_new0 (GstLingbotLatencyStepper);

  g_mutex_init (&s->lock);
  s->element = element;
  s->cat = cat != NULL ? cat : GST_CAT_DEFAULT;
  s->estimate_lock = lock;
  s->estimate = estimate;
  s->interval = GST_SECOND / 16;
  s->step = s->interval / 4;
  s->most = GST_CLOCK_TIME_NONE;
  return s;
}

/**
 * gst_lingbot_latency_stepper_start:
 * @s: a stepper
 * @frame: a frame's duration (ns); %GST_CLOCK_TIME_NONE or 0: 1/16 s
 * @most: the most that is taken in steps (ns, e.g. a chunk's duration),
 *   %GST_CLOCK_TIME_NONE for no bound
 *
 * Called when the estimate's goal may have fallen below its announced
 * figure (with neither its lock nor @s's held; nothing happens when it
 * did not).  While the element is PLAYING (else from the return to it):
 * what lies more than @most above the goal goes at once (a stall's fall:
 * the frames queued with it are dropped rather than shown 4/3 as fast for
 * three times as long), the rest in steps of a quarter of @frame, the
 * first a frame from now and each next a frame later, a
 * %GST_MESSAGE_LATENCY with each (the first, for a fall beyond @most, in
 * the caller's thread).  Above 30 fps the steps are 1/30 s apart, a
 * quarter of that each (a frame at the most).  Steps under way go on.
 * Without a clock (no frame
 * waits at a synchronised sink) the figure goes to its goal at once.
 */
void
gst_lingbot_latency_stepper_start (GstLingbotLatencyStepper * s,
    GstClockTime frame, GstClockTime most)
{
  GstElement *element;
  GstClockTime announced = GST_CLOCK_TIME_NONE;

  if (!GST_CLOCK_TIME_IS_VALID (frame) || frame == 0)
    frame = GST_SECOND / 16;
  g_mutex_lock (&s->lock);
  s->interval = MAX (frame, STEP_MIN_INTERVAL);
  s->step = MIN (s->interval / 4, frame);
  s->most = most;
  element = stepper_resume (s, &announced);
  g_mutex_unlock (&s->lock);
  if (element != NULL)
    stepper_post (s->cat, element, announced);
}

/**
 * gst_lingbot_latency_stepper_set_playing:
 * @s: a stepper
 * @playing: whether the element is PLAYING (from its change_state)
 *
 * Leaving PLAYING cancels the next step (the frames queued at a sink wait
 * with the running time); the return to it takes the steps up again, as
 * the last gst_lingbot_latency_stepper_start() said.
 */
void
gst_lingbot_latency_stepper_set_playing (GstLingbotLatencyStepper * s,
    gboolean playing)
{
  GstElement *element = NULL;
  GstClockTime announced = GST_CLOCK_TIME_NONE;

  g_mutex_lock (&s->lock);
  s->playing = playing;
  if (!playing && s->id != NULL) {
    gst_clock_id_unschedule (s->id);
    gst_clock_id_unref (s->id);
    s->id = NULL;
  }
  if (playing)
    element = stepper_resume (s, &announced);
  g_mutex_unlock (&s->lock);
  if (element != NULL)
    stepper_post (s->cat, element, announced);
}

/**
 * gst_lingbot_latency_stepper_set_jump_func:
 * @s: a stepper
 * @func: (nullable): called with the estimate's lock held when a fall is
 *   taken at once (what lies beyond the last start's @most, or the whole
 *   fall without a clock), before the message is posted
 * @data: its argument
 *
 * The frames already stamped for the old figure are late at a sink by
 * design after such a fall: an element that raises its figure from a
 * sink's QoS lateness notes here that their QoS says nothing new.  Set
 * before the element leaves READY.
 */
void
gst_lingbot_latency_stepper_set_jump_func (GstLingbotLatencyStepper * s,
    GstLingbotLatencyJumpFunc func, gpointer data)
{
  g_mutex_lock (&s->lock);
  s->jump_func = func;
  s->jump_data = data;
  g_mutex_unlock (&s->lock);
}

/**
 * gst_lingbot_latency_stepper_free:
 * @s: (transfer full) (nullable): a stepper
 *
 * Cancels the next step and detaches @s from its element: a step the
 * clock's thread is about to take does nothing.
 */
void
gst_lingbot_latency_stepper_free (GstLingbotLatencyStepper * s)
{
  if (s == NULL)
    return;
  gst_lingbot_latency_stepper_set_playing (s, FALSE);
  g_mutex_lock (&s->lock);
  s->element = NULL;
  g_mutex_unlock (&s->lock);
  stepper_release (s);
}

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
 * %LB_ERROR_NOT_FOUND -> RESOURCE/NOT_FOUND; %LB_ERROR_IO and
 * %LB_ERROR_FORMAT (a file that cannot be read as what it should be) ->
 * RESOURCE/OPEN_READ; %LB_ERROR_DEVICE, %LB_ERROR_UNSUPPORTED,
 * %LB_ERROR_RANK_FAILED, %LB_ERROR_TIMEOUT while starting -> LIBRARY/INIT;
 * %LB_ERROR_INVALID_ARGUMENT while starting -> LIBRARY/SETTINGS; anything
 * else -> LIBRARY/INIT when starting, STREAM/FAILED while streaming.
 */
void
gst_lingbot_error_map (const GError * error, GstLingbotErrorContext ctx,
    GQuark * domain, gint * code)
{
  gboolean open = ctx == GST_LINGBOT_ERROR_CONTEXT_OPEN;

  *domain = open ? GST_LIBRARY_ERROR : GST_STREAM_ERROR;
  *code = open ? GST_LIBRARY_ERROR_INIT : GST_STREAM_ERROR_FAILED;
  if (error == NULL || error->domain != LB_ERROR)
    return;
  switch (error->code) {
    case LB_ERROR_NOT_FOUND:
      *domain = GST_RESOURCE_ERROR;
      *code = GST_RESOURCE_ERROR_NOT_FOUND;
      break;
    case LB_ERROR_IO:
    case LB_ERROR_FORMAT:
      *domain = GST_RESOURCE_ERROR;
      *code = GST_RESOURCE_ERROR_OPEN_READ;
      break;
    case LB_ERROR_DEVICE:
    case LB_ERROR_UNSUPPORTED:
    case LB_ERROR_RANK_FAILED:
    case LB_ERROR_TIMEOUT:
      if (open) {
        *domain = GST_LIBRARY_ERROR;
        *code = GST_LIBRARY_ERROR_INIT;
      }
      break;
    case LB_ERROR_INVALID_ARGUMENT:
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
    g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND, "'%s' does not exist",
        path);
    return FALSE;
  }
  *code = GST_RESOURCE_ERROR_OPEN_READ;
  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR)) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "'%s' is not a regular file",
        path);
    return FALSE;
  }
  f = g_fopen (path, "rb");
  if (f == NULL) {
    saved = errno;
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "cannot open '%s': %s", path,
        g_strerror (saved));
    return FALSE;
  }
  if (fgetc (f) == EOF && ferror (f)) {
    saved = errno;
    fclose (f);
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "cannot read '%s': %s", path,
        g_strerror (saved));
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

/* sorts @v (n values) and sets NAME-mean, -p50, -p90, -p99, -max (0 for
 * none) */
static void
set_distribution (GstStructure * s, const char *name, double *v, guint n)
{
  g_autofree char *mean = g_strdup_printf ("%s-mean", name);
  g_autofree char *p50 = g_strdup_printf ("%s-p50", name);
  g_autofree char *p90 = g_strdup_printf ("%s-p90", name);
  g_autofree char *p99 = g_strdup_printf ("%s-p99", name);
  g_autofree char *max = g_strdup_printf ("%s-max", name);
  double total = 0.0;

  for (guint i = 0; i < n; i++)
    total += v[i];
  qsort (v, n, sizeof (double), cmp_double);
  gst_structure_set (s,
      mean, G_TYPE_DOUBLE, n ? total / n : 0.0,
      p50, G_TYPE_DOUBLE, percentile (v, n, 50),
      p90, G_TYPE_DOUBLE, percentile (v, n, 90),
      p99, G_TYPE_DOUBLE, percentile (v, n, 99),
      max, G_TYPE_DOUBLE, n ? v[n - 1] : 0.0, NULL);
}

/* The share of the decode time of chunks 0 .. n - 2 (each but the newest,
 * which nothing generated after it can hide) during which the generator
 * was computing a later chunk: the overlap of each decode interval with
 * the generate intervals of the chunks after it (one generator: they are
 * in order). */
static double
decode_hidden_fraction (const GstLingbotChunkTimes * c, guint n)
{
  gint64 decode = 0, hidden = 0;

  for (guint k = 0; k + 1 < n; k++) {
    const gint64 ds = c[k].decode_start_us, de = c[k].end_us;

    if (de <= ds)
      continue;
    decode += de - ds;
    for (guint j = k + 1; j < n; j++) {
      const gint64 gs = c[j].generate_start_us, ge = c[j].generate_end_us;

      if (ge == 0)
        continue;               /* not from lingbotgen's meta */
      if (gs >= de)
        break;
      hidden += MAX (0, MIN (de, ge) - MAX (ds, gs));
    }
  }
  return decode > 0 ? (double) hidden / (double) decode : 0.0;
}

/**
 * gst_lingbot_chunk_stats_new:
 * @name: the structure's name ("lingbot-stats", "lingbot-summary")
 * @chunks: (element-type GstLingbotChunkTimes): the chunks so far, in
 *   order
 * @decoder: add the decode fields (lingbotvaedec)
 *
 * Builds the figures of lingbotgen's and lingbotvaedec's `stats` property
 * and of lingbotvaedec's `lingbot-summary` message (docs/elements.md):
 * chunks, frames, steady-frames / -seconds / -fps (the chunks after the
 * first, over their compute seconds), compute-seconds-total and its
 * distribution (-mean, -p50, -p90, -p99, -max, nearest rank), the same
 * of the chunk period (period-seconds-*: the time between the ends of
 * two consecutive chunks, one value fewer than chunks); with @decoder
 * decode-seconds-total / -mean and decode-hidden-fraction.
 *
 * Returns: (transfer full): a new structure
 */
GstStructure *
gst_lingbot_chunk_stats_new (const char *name, const GArray * chunks,
    gboolean decoder)
{
  const GstLingbotChunkTimes *c = (const GstLingbotChunkTimes *) (void *)
      chunks->data;
  const guint n = chunks->len;
  g_autofree double *v = g_new0 (double, MAX (n, 1));
  double total = 0.0, steady_s = 0.0, decode = 0.0;
  guint64 frames = 0, steady_frames = 0;
  GstStructure *s;

  for (guint i = 0; i < n; i++) {
    total += c[i].compute_seconds;
    decode += c[i].decode_seconds;
    frames += (guint64) MAX (c[i].frames, 0);
    if (i > 0) {
      steady_s += c[i].compute_seconds;
      steady_frames += (guint64) MAX (c[i].frames, 0);
    }
  }
  s = gst_structure_new (name,
      "chunks", G_TYPE_UINT, n,
      "frames", G_TYPE_UINT64, frames,
      "steady-frames", G_TYPE_UINT64, steady_frames,
      "steady-seconds", G_TYPE_DOUBLE, steady_s,
      "steady-fps", G_TYPE_DOUBLE,
      steady_s > 0.0 ? (double) steady_frames / steady_s : 0.0,
      "compute-seconds-total", G_TYPE_DOUBLE, total, NULL);
  for (guint i = 0; i < n; i++)
    v[i] = c[i].compute_seconds;
  set_distribution (s, "compute-seconds", v, n);
  for (guint i = 1; i < n; i++)
    v[i - 1] = (double) (c[i].end_us - c[i - 1].end_us) / G_USEC_PER_SEC;
  set_distribution (s, "period-seconds", v, n > 0 ? n - 1 : 0);
  if (decoder)
    gst_structure_set (s,
        "decode-seconds-total", G_TYPE_DOUBLE, decode,
        "decode-seconds-mean", G_TYPE_DOUBLE, n ? decode / n : 0.0,
        "decode-hidden-fraction", G_TYPE_DOUBLE,
        decode_hidden_fraction (c, n), NULL);
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

/* lingbot-gst: JSON control traces and their virtual-clock chunk schedule
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Trace format (the bundled stream_lingbot_controls.json):
 *   {"events": [{"delay_s": 1.0,
 *                "message": {"type": "control", "key": "ArrowUp",
 *                            "action": "press"}}, ...]}
 * delay_s is the time from the session start.  golden README 3.3.
 */
#include "lingbot/control.h"
#include "kernels/error.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

struct _LingbotControlTrace
{
  GArray *events;               /* LingbotControlEvent, sorted by time */
  GPtrArray *warnings;          /* NULL-terminated strings */
};

static void trace_warn (LingbotControlTrace * t, const char *fmt, ...)
    G_GNUC_PRINTF (2, 3);

static void
trace_warn (LingbotControlTrace * t, const char *fmt, ...)
{
  va_list ap;
  char *msg;

  va_start (ap, fmt);
  msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_debug ("%s", msg);
  /* keep the array NULL-terminated */
  g_ptr_array_remove_index (t->warnings, t->warnings->len - 1);
  g_ptr_array_add (t->warnings, msg);
  g_ptr_array_add (t->warnings, NULL);
}

static gint
event_cmp (gconstpointer a, gconstpointer b)
{
  const LingbotControlEvent *x = a, *y = b;
  return x->time_s < y->time_s ? -1 : x->time_s > y->time_s ? 1 : 0;
}

/* indices into the events, by time then by index */
static gint
order_cmp (gconstpointer a, gconstpointer b, gpointer data)
{
  const LingbotControlEvent *e = data;
  const guint i = *(const guint *) a, j = *(const guint *) b;
  const gint c = event_cmp (&e[i], &e[j]);
  return c != 0 ? c : i < j ? -1 : i > j ? 1 : 0;
}

static gboolean
bad_event (GError ** error, guint index, const char *field, const char *why)
{
  g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
      "control trace: event %u: field '%s' %s", index, field, why);
  return FALSE;
}

static gboolean
is_number (JsonNode * n)
{
  GType t;

  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n))
    return FALSE;
  t = json_node_get_value_type (n);
  return t == G_TYPE_DOUBLE || t == G_TYPE_INT64;
}

static const char *
member_string (JsonObject * o, const char *name)
{
  JsonNode *n = json_object_get_member (o, name);

  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n)
      || json_node_get_value_type (n) != G_TYPE_STRING)
    return NULL;
  return json_node_get_string (n);
}

static gboolean
parse_event (LingbotControlTrace * t, JsonNode * node, guint index,
    GError ** error)
{
  JsonObject *ev, *msg;
  JsonNode *delay, *mnode;
  LingbotControlEvent e = { 0 };
  const char *type, *key, *action;

  if (!JSON_NODE_HOLDS_OBJECT (node)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "control trace: event %u is not an object", index);
    return FALSE;
  }
  ev = json_node_get_object (node);
  delay = json_object_get_member (ev, "delay_s");
  if (delay == NULL)
    return bad_event (error, index, "delay_s", "is missing");
  if (!is_number (delay))
    return bad_event (error, index, "delay_s", "is not a number");
  e.time_s = json_node_get_double (delay);
  if (!(e.time_s >= 0.0) || !isfinite (e.time_s))
    return bad_event (error, index, "delay_s", "must be a finite number >= 0");

  mnode = json_object_get_member (ev, "message");
  if (mnode == NULL)
    return bad_event (error, index, "message", "is missing");
  if (!JSON_NODE_HOLDS_OBJECT (mnode))
    return bad_event (error, index, "message", "is not an object");
  msg = json_node_get_object (mnode);

  type = member_string (msg, "type");
  if (json_object_has_member (msg, "type") && type == NULL)
    return bad_event (error, index, "message.type", "is not a string");
  if (type != NULL && strcmp (type, "reset_pose") == 0) {
    e.type = LINGBOT_CONTROL_EVENT_RESET;
    g_array_append_val (t->events, e);
    return TRUE;
  }
  if (type != NULL && strcmp (type, "control") != 0) {
    trace_warn (t, "control trace: event %u: message type '%s' ignored",
        index, type);
    return TRUE;
  }

  action = member_string (msg, "action");
  if (action == NULL && json_object_has_member (msg, "event"))
    action = member_string (msg, "event");
  if (action == NULL && (json_object_has_member (msg, "action")
          || json_object_has_member (msg, "event")))
    return bad_event (error, index, "message.action", "is not a string");
  if (action == NULL || g_ascii_strcasecmp (action, "press") == 0
      || g_ascii_strcasecmp (action, "keydown") == 0) {
    e.type = LINGBOT_CONTROL_EVENT_PRESS;
  } else if (g_ascii_strcasecmp (action, "release") == 0
      || g_ascii_strcasecmp (action, "keyup") == 0
      || g_ascii_strcasecmp (action, "end") == 0) {
    e.type = LINGBOT_CONTROL_EVENT_RELEASE;
  } else if (g_ascii_strcasecmp (action, "reset") == 0) {
    /* the service's "reset": every key up, the pose stays (a key, if
     * any, does not matter); reset_pose, a message type, is above */
    e.type = LINGBOT_CONTROL_EVENT_RELEASE;
    e.key = LINGBOT_KEYS_ALL;
    g_array_append_val (t->events, e);
    return TRUE;
  } else {
    trace_warn (t, "control trace: event %u: unknown action '%s' ignored "
        "(press, release or reset)", index, action);
    return TRUE;
  }

  key = member_string (msg, "key");
  if (key == NULL)
    key = member_string (msg, "control");
  if (key == NULL)
    key = member_string (msg, "direction");
  if (key == NULL)
    return bad_event (error, index, "message.key",
        "is missing or not a string");
  e.key = lingbot_key_from_name (key);
  if (e.key == 0) {
    trace_warn (t, "control trace: event %u: unknown key '%s' ignored",
        index, key);
    return TRUE;
  }
  g_array_append_val (t->events, e);
  return TRUE;
}

/**
 * lingbot_control_trace_new_from_data:
 * @data: JSON text
 * @length: its length, or -1 when NUL-terminated
 * @error: return location for a #GError
 *
 * Parses a control trace: an object with an "events" array whose items
 * carry "delay_s" (seconds from the session start, >= 0) and a "message"
 * object: type "control" with "key" (lingbot_key_from_name()) and
 * "action" ("press"/"keydown" or no action: a press; "release"/"keyup"/
 * "end"; "reset": every key released, the pose kept, a release of
 * %LINGBOT_KEYS_ALL), or type "reset_pose" (pose back to identity, keys
 * cleared: %LINGBOT_CONTROL_EVENT_RESET).  Unknown keys, actions and
 * message types are skipped and listed by
 * lingbot_control_trace_get_warnings().  Events are ordered by time
 * (stable for equal times).
 *
 * Returns: (transfer full): the trace, or %NULL with %LINGBOT_ERROR_FORMAT
 *   naming the event index and the field at fault (invalid JSON, a missing
 *   or negative delay_s, a message that is not an object, a non-string
 *   type/action/key, a press or release without a key).
 */
LingbotControlTrace *
lingbot_control_trace_new_from_data (const char *data, gssize length,
    GError ** error)
{
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) jerr = NULL;
  LingbotControlTrace *t;
  JsonNode *root, *events;
  JsonArray *arr;

  if (!json_parser_load_from_data (parser, data, length, &jerr)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "control trace: invalid JSON: %s", jerr->message);
    return NULL;
  }
  root = json_parser_get_root (parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "control trace: the top level is not an object");
    return NULL;
  }
  events = json_object_get_member (json_node_get_object (root), "events");
  if (events == NULL || !JSON_NODE_HOLDS_ARRAY (events)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "control trace: field 'events' is missing or not an array");
    return NULL;
  }
  arr = json_node_get_array (events);

  t = g_new0 (LingbotControlTrace, 1);
  t->events = g_array_new (FALSE, FALSE, sizeof (LingbotControlEvent));
  t->warnings = g_ptr_array_new_with_free_func (g_free);
  g_ptr_array_add (t->warnings, NULL);
  for (guint i = 0; i < json_array_get_length (arr); i++) {
    if (!parse_event (t, json_array_get_element (arr, i), i, error)) {
      lingbot_control_trace_free (t);
      return NULL;
    }
  }
  /* by time, events at equal times in file order: a merge sort of the
   * indices with the index as the tie-break (O(n log n); the insertion
   * sort this replaces took 13 s on 50k reversed events) */
  {
    const guint n = t->events->len;
    const LingbotControlEvent *e = (const LingbotControlEvent *)
        t->events->data;
    guint *order = g_new (guint, MAX (n, 1));
    for (guint i = 0; i < n; i++)
      order[i] = i;
    g_qsort_with_data (order, (gint) n, sizeof (guint), order_cmp,
        (gpointer) e);
    GArray *sorted = g_array_sized_new (FALSE, FALSE,
        sizeof (LingbotControlEvent), n);
    for (guint i = 0; i < n; i++)
      g_array_append_val (sorted, e[order[i]]);
    g_free (order);
    g_array_unref (t->events);
    t->events = sorted;
  }
  return t;
}

/**
 * lingbot_control_trace_new_from_file:
 * @path: a JSON trace file
 * @error: return location for a #GError
 *
 * Returns: (transfer full): the trace, or %NULL (%LINGBOT_ERROR_IO when the
 *   file cannot be read, else as lingbot_control_trace_new_from_data()).
 */
LingbotControlTrace *
lingbot_control_trace_new_from_file (const char *path, GError ** error)
{
  g_autofree char *data = NULL;
  gsize len = 0;
  g_autoptr (GError) ferr = NULL;
  LingbotControlTrace *t;

  if (!g_file_get_contents (path, &data, &len, &ferr)) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s", ferr->message);
    return NULL;
  }
  t = lingbot_control_trace_new_from_data (data, (gssize) len, error);
  if (t == NULL && error && *error)
    g_prefix_error (error, "%s: ", path);
  return t;
}

/**
 * lingbot_control_trace_free:
 * @trace: (transfer full) (nullable): a trace
 *
 * Frees @trace, its events and warnings.
 */
void
lingbot_control_trace_free (LingbotControlTrace * trace)
{
  if (trace == NULL)
    return;
  g_array_unref (trace->events);
  g_ptr_array_unref (trace->warnings);
  g_free (trace);
}

/**
 * lingbot_control_trace_get_events:
 * @trace: a trace
 * @n_events: (out) (optional): number of events
 *
 * Returns: (transfer none) (array length=n_events): the events in time
 *   order (skipped ones excluded).
 */
const LingbotControlEvent *
lingbot_control_trace_get_events (const LingbotControlTrace * trace,
    guint * n_events)
{
  if (n_events)
    *n_events = trace->events->len;
  return (const LingbotControlEvent *) trace->events->data;
}

/**
 * lingbot_control_trace_get_warnings:
 * @trace: a trace
 *
 * Returns: (transfer none) (array zero-terminated=1): what was skipped
 *   while parsing (unknown keys, actions and message types), one line per
 *   event ("control trace: event 3: unknown action 'tap' ignored (press,
 *   release or reset)").
 */
const char *const *
lingbot_control_trace_get_warnings (const LingbotControlTrace * trace)
{
  return (const char *const *) trace->warnings->pdata;
}

/* ------------------------------------------------------------------ */

/**
 * lingbot_control_trace_schedule:
 * @trace: a trace
 * @n_chunks: chunks in the session (e.g. 60 for 957 frames at C = 4)
 * @chunk_size: latent frames per chunk
 * @fps: video frame rate
 * @out: (out caller-allocates) (array length=n_chunks): per chunk key set,
 *   source, revision and virtual-clock times
 *
 * Maps the trace onto the chunk timeline with the documented virtual clock
 * (golden README 3.3; lingbot_control_schedule_next() gives the rules):
 * the trace's events pushed into a #LingbotControlSchedule, then ended,
 * then one decision per chunk.  Deterministic; O(events + chunks).
 *
 * Returns: the number of chunks scheduled; fewer than @n_chunks when the
 *   trace ends with nothing held (the entries after them are not written),
 *   0 for a zero @chunk_size or @fps.
 */
guint
lingbot_control_trace_schedule (const LingbotControlTrace * trace,
    guint n_chunks, guint chunk_size, guint fps, LingbotTraceChunk * out)
{
  g_autoptr (LingbotControlSchedule) sched =
      lingbot_control_schedule_new (chunk_size, fps, 1, NULL);
  const LingbotControlEvent *events;
  guint n_ev = 0, done = 0;

  if (sched == NULL)
    return 0;
  events = lingbot_control_trace_get_events (trace, &n_ev);
  for (guint i = 0; i < n_ev; i++)
    lingbot_control_schedule_push (sched, &events[i]);
  lingbot_control_schedule_end (sched);
  while (done < n_chunks) {
    LingbotScheduleChunk c;
    if (lingbot_control_schedule_next (sched, &c) != LINGBOT_SCHEDULE_CHUNK)
      break;
    out[done++] = c;
  }
  return done;
}

/* lingbot-gst: lingbotcontrolsrc, where control comes from
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
/**
 * SECTION:element-lingbotcontrolsrc
 * @title: lingbotcontrolsrc
 *
 * Emits the control stream of a LingBot-World session
 * (`application/x-lingbot-control`, one #GstLingbotControlRecord per
 * buffer) from any mix of:
 *
 * - a JSON trace (`location`, the `{"events":[{"delay_s","message":{...}}]}`
 *   format), emitted at the trace times (paced by the clock when `is-live`);
 * - upstream GstNavigation key events (key-press / key-release) arriving
 *   on the src pad from a video sink (X keysym names: Up, w, W, ...) or a
 *   WebRTC data channel (browser names: ArrowUp, KeyW, w, ...): the key
 *   table is docs/elements.md, "Keys";
 * - the action signals `press-key`, `release-key` and `reset-pose`;
 * - explicit camera poses (`poses-location` + `intrinsics-location`, .npy),
 *   sent as a first POSES record.
 *
 * With a trace the stream ends after its last event; without one it runs
 * until the pipeline stops.  Unknown keys are ignored with a warning.
 *
 * X video sinks (ximagesink, xvimagesink, glimagesink on X11) turn a held
 * key into a key-release and key-press pair per auto-repeat (about 25 a
 * second): taken as they come, every pair would be a new tap, so a key
 * let go would still steer the next chunk (the tap of its last repeat).  A
 * navigation key-release is therefore held back for `key-repeat-window`: a
 * press of the same key within it cancels both (the key stays held, no
 * record), anything else sends the release first, with its own time.  A
 * navigation press of a key already held (browsers' and Wayland's
 * auto-repeat) sends nothing either.  The action signals and traces are
 * taken as they are.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 lingbotcontrolsrc location=controls.json ! lingbotgen \
 *     model-path=/models/lingbot-world-v2 image-location=start.jpg ! \
 *     lingbotvaedec ! videoconvert ! autovideosink
 * ]|
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>
#include <gst/video/navigation.h>

#include "gst/gstlingbotcontrolsrc.h"
#include "gst/gstlingbotutil.h"

GST_DEBUG_CATEGORY_STATIC (gst_lingbot_control_src_debug);
#define GST_CAT_DEFAULT gst_lingbot_control_src_debug

#define DEFAULT_LOCATION NULL
#define DEFAULT_IS_LIVE FALSE
#define DEFAULT_POSES_LOCATION NULL
#define DEFAULT_INTRINSICS_LOCATION NULL
#define DEFAULT_INTRINSICS_WIDTH 832
#define DEFAULT_INTRINSICS_HEIGHT 480
#define DEFAULT_KEY_REPEAT_WINDOW (30 * GST_MSECOND)
#define MAX_KEY_REPEAT_WINDOW GST_SECOND

enum
{
  PROP_0,
  PROP_LOCATION,
  PROP_IS_LIVE,
  PROP_POSES_LOCATION,
  PROP_INTRINSICS_LOCATION,
  PROP_INTRINSICS_WIDTH,
  PROP_INTRINSICS_HEIGHT,
  PROP_KEY_REPEAT_WINDOW,
};

enum
{
  SIGNAL_PRESS_KEY,
  SIGNAL_RELEASE_KEY,
  SIGNAL_RESET_POSE,
  N_SIGNALS
};

static guint signals[N_SIGNALS];

struct _GstLingbotControlSrc
{
  GstPushSrc parent;

  /* properties (object lock) */
  char *location;
  gboolean is_live;
  char *poses_location;
  char *intrinsics_location;
  int intrinsics_width;
  int intrinsics_height;
  guint64 key_repeat_window;

  /* streaming state (lock) */
  GMutex lock;
  GCond cond;
  gboolean flushing;
  GQueue pending;               /* GstBuffer*: records from events/signals */
  LingbotControlTrace *trace;
  guint next_event;
  guint held;
  GstClockTime last_time;       /* PTS of the last record pushed */
  GstBuffer *poses;             /* the POSES record still to send */
  gboolean eos_queued;          /* send_event (EOS): after the records */
  /* a navigation key-release held back for key-repeat-window (an X
   * auto-repeat pair's release, if the press follows) */
  guint deferred_keys;          /* 0: none */
  GstClockTime deferred_time;   /* its session time */
  gint64 deferred_deadline;     /* monotonic time it is sent at */
};

#define FIELD(id, member) { id, G_STRUCT_OFFSET (GstLingbotControlSrc, member) }
/* the properties, each in its field (gst_lingbot_property_set()) */
static const GstLingbotProperty src_properties[] = {
  FIELD (PROP_LOCATION, location),
  FIELD (PROP_IS_LIVE, is_live),
  FIELD (PROP_POSES_LOCATION, poses_location),
  FIELD (PROP_INTRINSICS_LOCATION, intrinsics_location),
  FIELD (PROP_INTRINSICS_WIDTH, intrinsics_width),
  FIELD (PROP_INTRINSICS_HEIGHT, intrinsics_height),
  FIELD (PROP_KEY_REPEAT_WINDOW, key_repeat_window),
};

#undef FIELD

#define gst_lingbot_control_src_parent_class parent_class
G_DEFINE_TYPE (GstLingbotControlSrc, gst_lingbot_control_src,
    GST_TYPE_PUSH_SRC);
GST_ELEMENT_REGISTER_DEFINE (lingbotcontrolsrc, "lingbotcontrolsrc",
    GST_RANK_NONE, GST_TYPE_LINGBOT_CONTROL_SRC);

static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE ("src",
    GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_LINGBOT_CONTROL_CAPS));

static GstBuffer *
record_new (GstLingbotControlRecordType type, guint keys, guint held,
    GstClockTime pts, gsize payload_size)
{
  GstBuffer *buf = gst_buffer_new_allocate (NULL,
      sizeof (GstLingbotControlRecord) + payload_size, NULL);
  const GstLingbotControlRecord rec = {
    .magic = GST_LINGBOT_CONTROL_MAGIC,
    .type = type,
    .keys = keys,
    .held = held,
    .time_ns = pts,
    .payload_size = payload_size,
  };

  gst_buffer_fill (buf, 0, &rec, sizeof (rec));
  GST_BUFFER_PTS (buf) = pts;
  return buf;
}

/* the session time of an event arriving now: the running time when live,
 * else the time of the last record (events join the offline timeline
 * where it stands) */
static GstClockTime
event_time_unlocked (GstLingbotControlSrc * self)
{
  GstClock *clock;
  GstClockTime now, base;
  GstClockTime t = GST_CLOCK_TIME_IS_VALID (self->last_time) ?
      self->last_time : 0;

  if (!self->is_live)
    return t;
  clock = gst_element_get_clock (GST_ELEMENT (self));
  if (clock == NULL)
    return t;
  now = gst_clock_get_time (clock);
  base = gst_element_get_base_time (GST_ELEMENT (self));
  gst_object_unref (clock);
  return now > base ? MAX (now - base, t) : t;
}

/* (lock) queues the record of an event at session time @t */
static void
queue_record_unlocked (GstLingbotControlSrc * self,
    GstLingbotControlRecordType type, guint keys, GstClockTime t)
{
  switch (type) {
    case GST_LINGBOT_CONTROL_PRESS:
      self->held |= keys;
      break;
    case GST_LINGBOT_CONTROL_RELEASE:
      self->held &= ~keys;
      break;
    default:
      self->held = 0;
      break;
  }
  g_queue_push_tail (&self->pending, record_new (type, keys, self->held, t, 0));
  g_cond_broadcast (&self->cond);
}

/* (lock) queues the release held back, if any, with the time it came at:
 * before anything that came after it */
static void
flush_deferred_unlocked (GstLingbotControlSrc * self)
{
  guint keys = self->deferred_keys;

  if (keys == 0)
    return;
  self->deferred_keys = 0;
  queue_record_unlocked (self, GST_LINGBOT_CONTROL_RELEASE, keys,
      self->deferred_time);
}

static void
queue_event (GstLingbotControlSrc * self, GstLingbotControlRecordType type,
    guint keys)
{
  g_mutex_lock (&self->lock);
  flush_deferred_unlocked (self);
  queue_record_unlocked (self, type, keys, event_time_unlocked (self));
  g_mutex_unlock (&self->lock);
}

/* A navigation key event: auto-repeat folded (the section comment).
 * Returns whether it was queued or held back (FALSE: folded away). */
static gboolean
navigation_key (GstLingbotControlSrc * self, guint key, gboolean pressed)
{
  guint64 window;
  gboolean queued = TRUE;

  GST_OBJECT_LOCK (self);
  window = self->key_repeat_window;
  GST_OBJECT_UNLOCK (self);

  g_mutex_lock (&self->lock);
  if (pressed && (self->deferred_keys & key)) {
    /* the press of an auto-repeat pair: the key stays held */
    self->deferred_keys &= ~key;
    queued = FALSE;
  } else if (pressed && (self->held & key) && window > 0) {
    /* a repeat without a release: nothing changes */
    queued = FALSE;
  } else {
    flush_deferred_unlocked (self);
    if (pressed || window == 0) {
      queue_record_unlocked (self, pressed ? GST_LINGBOT_CONTROL_PRESS :
          GST_LINGBOT_CONTROL_RELEASE, key, event_time_unlocked (self));
    } else {
      self->deferred_keys = key;
      self->deferred_time = event_time_unlocked (self);
      self->deferred_deadline = g_get_monotonic_time () +
          (gint64) (window / GST_USECOND);
      g_cond_broadcast (&self->cond);
    }
  }
  g_mutex_unlock (&self->lock);
  return queued;
}

/* @navigation: from an upstream GstNavigation event (auto-repeat folded),
 * else from an action signal */
static gboolean
key_event (GstLingbotControlSrc * self, const char *name, gboolean pressed,
    gboolean navigation)
{
  guint key = name ? lingbot_key_from_name (name) : 0;

  if (key == 0) {
    GST_WARNING_OBJECT (self, "unknown key '%s' ignored", GST_STR_NULL (name));
    return FALSE;
  }
  if (!navigation) {
    GST_DEBUG_OBJECT (self, "key %s %s", name, pressed ? "press" : "release");
    queue_event (self, pressed ? GST_LINGBOT_CONTROL_PRESS :
        GST_LINGBOT_CONTROL_RELEASE, key);
  } else if (navigation_key (self, key, pressed)) {
    GST_DEBUG_OBJECT (self, "key %s %s%s", name, pressed ? "press" : "release",
        pressed ? "" : " (held back for key-repeat-window)");
  } else {
    GST_LOG_OBJECT (self, "key %s press: auto-repeat of a held key", name);
  }
  return TRUE;
}

static gboolean
gst_lingbot_control_src_press_key (GstLingbotControlSrc * self, const char *key)
{
  return key_event (self, key, TRUE, FALSE);
}

static gboolean
gst_lingbot_control_src_release_key (GstLingbotControlSrc * self,
    const char *key)
{
  return key_event (self, key, FALSE, FALSE);
}

static void
gst_lingbot_control_src_reset_pose (GstLingbotControlSrc * self)
{
  GST_DEBUG_OBJECT (self, "reset pose");
  queue_event (self, GST_LINGBOT_CONTROL_RESET, 0);
}

static gboolean
gst_lingbot_control_src_event (GstBaseSrc * src, GstEvent * event)
{
  GstLingbotControlSrc *self = GST_LINGBOT_CONTROL_SRC (src);

  if (GST_EVENT_TYPE (event) == GST_EVENT_NAVIGATION) {
    GstNavigationEventType type = gst_navigation_event_get_type (event);
    const char *key = NULL;

    if (type == GST_NAVIGATION_EVENT_KEY_PRESS
        || type == GST_NAVIGATION_EVENT_KEY_RELEASE) {
      if (gst_navigation_event_parse_key_event (event, &key))
        key_event (self, key, type == GST_NAVIGATION_EVENT_KEY_PRESS, TRUE);
      return TRUE;
    }
    /* mouse and touch events carry no control */
    return TRUE;
  }
  return GST_BASE_SRC_CLASS (parent_class)->event (src, event);
}

/* the POSES record: lingbot_poses_load()'s arrays after the header
 * (called with the object lock held) */
static GstBuffer *
load_poses (GstLingbotControlSrc * self, GError ** error)
{
  g_autoptr (LingbotPoses) p = lingbot_poses_load (self->poses_location,
      self->intrinsics_location, error);
  GstLingbotControlPoses hdr = { 0 };
  gsize psize, isize;
  GstBuffer *buf;

  if (p == NULL)
    return NULL;
  hdr.n_poses = p->n_poses;
  hdr.n_intrinsics = p->n_intrinsics;
  hdr.intrinsics_width = self->intrinsics_width;
  hdr.intrinsics_height = self->intrinsics_height;

  psize = sizeof (float) * 16 * hdr.n_poses;
  isize = sizeof (float) * 4 * hdr.n_intrinsics;
  buf = record_new (GST_LINGBOT_CONTROL_POSES, 0, 0, 0,
      sizeof (hdr) + psize + isize);
  gst_buffer_fill (buf, sizeof (GstLingbotControlRecord), &hdr, sizeof (hdr));
  gst_buffer_fill (buf, sizeof (GstLingbotControlRecord) + sizeof (hdr),
      p->poses, psize);
  if (isize)
    gst_buffer_fill (buf, sizeof (GstLingbotControlRecord) + sizeof (hdr) +
        psize, p->intrinsics, isize);
  return buf;
}

/* Reads the trace and the poses (READY -> PAUSED, before GstBaseSrc
 * starts): a failure posts its one precise error and fails the state
 * change, so basesrc's generic "Failed to start" never follows it. */
static gboolean
load_inputs (GstLingbotControlSrc * self)
{
  g_autoptr (GError) error = NULL;
  LingbotControlTrace *trace = NULL;
  GstBuffer *poses = NULL;

  GST_OBJECT_LOCK (self);
  /* a missing file RESOURCE/NOT_FOUND, an unreadable one
   * RESOURCE/OPEN_READ, a malformed trace STREAM/DECODE */
  {
    const char *files[3] = { self->location, self->poses_location,
      self->intrinsics_location
    };
    for (guint i = 0; i < G_N_ELEMENTS (files); i++) {
      GQuark domain;
      gint code;

      if (files[i] == NULL
          || gst_lingbot_check_readable (files[i], &domain, &code, &error))
        continue;
      GST_OBJECT_UNLOCK (self);
      gst_element_message_full (GST_ELEMENT (self), GST_MESSAGE_ERROR, domain,
          code, g_strdup (error->message), NULL, __FILE__, GST_FUNCTION,
          __LINE__);
      return FALSE;
    }
  }
  if (self->location) {
    trace = lingbot_control_trace_new_from_file (self->location, &error);
    if (trace == NULL) {
      GST_OBJECT_UNLOCK (self);
      if (g_error_matches (error, LINGBOT_ERROR, LINGBOT_ERROR_IO))
        GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ, ("%s", error->message),
            (NULL));
      else
        GST_ELEMENT_ERROR (self, STREAM, DECODE, ("%s", error->message),
            (NULL));
      return FALSE;
    }
    {
      /* unknown keys and message types are ignored; say so on the bus
       * (gst-launch-1.0 prints element warnings), once for the trace */
      const char *const *w = lingbot_control_trace_get_warnings (trace);
      guint n = w ? g_strv_length ((char **) w) : 0;

      if (n > 0) {
        GString *text = g_string_new (NULL);
        g_autofree char *where = g_strdup (self->location);
        guint i;

        for (i = 0; i < n; i++)
          GST_WARNING_OBJECT (self, "%s", w[i]);
        for (i = 0; i < MIN (n, 8); i++)
          g_string_append_printf (text, "%s%s", i ? "; " : "",
              g_str_has_prefix (w[i], "control trace: ") ?
              w[i] + strlen ("control trace: ") : w[i]);
        if (n > 8)
          g_string_append_printf (text, "; and %u more", n - 8);
        GST_OBJECT_UNLOCK (self);
        GST_ELEMENT_WARNING (self, STREAM, DECODE,
            ("Control trace: %u event(s) ignored: %s", n, text->str),
            ("%s", where));
        GST_OBJECT_LOCK (self);
        g_string_free (text, TRUE);
      }
    }
  }
  if (self->poses_location) {
    poses = load_poses (self, &error);
    if (poses == NULL) {
      GST_OBJECT_UNLOCK (self);
      lingbot_control_trace_free (trace);
      GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ, ("%s", error->message),
          (NULL));
      return FALSE;
    }
  }
  GST_OBJECT_UNLOCK (self);

  g_mutex_lock (&self->lock);
  g_clear_pointer (&self->trace, lingbot_control_trace_free);
  gst_clear_buffer (&self->poses);
  self->trace = trace;
  self->next_event = 0;
  self->held = 0;
  self->deferred_keys = 0;
  self->last_time = GST_CLOCK_TIME_NONE;
  self->poses = poses;
  self->flushing = FALSE;
  self->eos_queued = FALSE;
  g_mutex_unlock (&self->lock);
  return TRUE;
}

/* EOS sent to a started element goes after the records already queued
 * (a key pressed just before it is not lost): GstBaseSrc's own EOS would
 * unblock create() and drop them */
static gboolean
gst_lingbot_control_src_send_event (GstElement * element, GstEvent * event)
{
  GstLingbotControlSrc *self = GST_LINGBOT_CONTROL_SRC (element);

  if (GST_EVENT_TYPE (event) == GST_EVENT_EOS
      && GST_BASE_SRC_IS_STARTED (element)) {
    g_mutex_lock (&self->lock);
    self->eos_queued = TRUE;
    g_cond_broadcast (&self->cond);
    g_mutex_unlock (&self->lock);
    gst_event_unref (event);
    return TRUE;
  }
  return GST_ELEMENT_CLASS (parent_class)->send_event (element, event);
}

static GstStateChangeReturn
gst_lingbot_control_src_change_state (GstElement * element,
    GstStateChange transition)
{
  if (transition == GST_STATE_CHANGE_READY_TO_PAUSED &&
      !load_inputs (GST_LINGBOT_CONTROL_SRC (element)))
    return GST_STATE_CHANGE_FAILURE;
  return GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
}

static gboolean
gst_lingbot_control_src_stop (GstBaseSrc * src)
{
  GstLingbotControlSrc *self = GST_LINGBOT_CONTROL_SRC (src);

  g_mutex_lock (&self->lock);
  g_clear_pointer (&self->trace, lingbot_control_trace_free);
  gst_clear_buffer (&self->poses);
  g_queue_clear_full (&self->pending, (GDestroyNotify) gst_buffer_unref);
  /* a restart begins with no key held (presses made while stopped are
   * queued again, their records' held set from none) */
  self->held = 0;
  self->deferred_keys = 0;
  g_mutex_unlock (&self->lock);
  return TRUE;
}

static GstCaps *
gst_lingbot_control_src_get_caps (GstBaseSrc * src, GstCaps * filter)
{
  GstLingbotControlSrc *self = GST_LINGBOT_CONTROL_SRC (src);
  GstCaps *caps = gst_caps_from_string (GST_LINGBOT_CONTROL_CAPS);
  gboolean poses;

  GST_OBJECT_LOCK (self);
  poses = self->poses_location != NULL;
  GST_OBJECT_UNLOCK (self);
  gst_caps_set_simple (caps, "poses", G_TYPE_BOOLEAN, poses, NULL);
  if (filter) {
    GstCaps *tmp = gst_caps_intersect_full (filter, caps,
        GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref (caps);
    caps = tmp;
  }
  return caps;
}

/* unlock (TRUE) wakes create() to return FLUSHING; unlock_stop (FALSE)
 * lets it wait again */
static gboolean
set_flushing (GstBaseSrc * src, gboolean flushing)
{
  GstLingbotControlSrc *self = GST_LINGBOT_CONTROL_SRC (src);

  g_mutex_lock (&self->lock);
  self->flushing = flushing;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  return TRUE;
}

static gboolean
gst_lingbot_control_src_unlock (GstBaseSrc * src)
{
  return set_flushing (src, TRUE);
}

static gboolean
gst_lingbot_control_src_unlock_stop (GstBaseSrc * src)
{
  return set_flushing (src, FALSE);
}

/* the monotonic time at which the pipeline clock reads base + t */
static gint64
clock_deadline (GstLingbotControlSrc * self, GstClockTime t)
{
  GstClock *clock = gst_element_get_clock (GST_ELEMENT (self));
  GstClockTime now, target;
  gint64 mono = g_get_monotonic_time ();

  if (clock == NULL)
    return mono;
  now = gst_clock_get_time (clock);
  target = gst_element_get_base_time (GST_ELEMENT (self)) + t;
  gst_object_unref (clock);
  if (target <= now)
    return mono;
  return mono + (gint64) ((target - now) / GST_USECOND);
}

static GstBuffer *
trace_record_unlocked (GstLingbotControlSrc * self,
    const LingbotControlEvent * e)
{
  GstClockTime t = (GstClockTime) (e->time_s * GST_SECOND + 0.5);
  GstLingbotControlRecordType type;
  guint keys = e->key;

  switch (e->type) {
    case LINGBOT_CONTROL_EVENT_PRESS:
      type = GST_LINGBOT_CONTROL_PRESS;
      self->held |= e->key;
      break;
    case LINGBOT_CONTROL_EVENT_RELEASE:
      type = GST_LINGBOT_CONTROL_RELEASE;
      /* the action "reset" (every key up): a release of the keys held */
      if (e->key == LINGBOT_KEYS_ALL)
        keys = self->held;
      self->held &= ~e->key;
      break;
    default:
      type = GST_LINGBOT_CONTROL_RESET;
      self->held = 0;
      break;
  }
  if (GST_CLOCK_TIME_IS_VALID (self->last_time))
    t = MAX (t, self->last_time);
  return record_new (type, keys, self->held, t, 0);
}

static GstFlowReturn
gst_lingbot_control_src_create (GstPushSrc * src, GstBuffer ** out)
{
  GstLingbotControlSrc *self = GST_LINGBOT_CONTROL_SRC (src);
  GstBuffer *buf = NULL;

  g_mutex_lock (&self->lock);
  while (buf == NULL) {
    const LingbotControlEvent *events = NULL;
    guint n_events = 0;

    if (self->flushing) {
      g_mutex_unlock (&self->lock);
      return GST_FLOW_FLUSHING;
    }
    if (self->poses) {
      buf = self->poses;
      self->poses = NULL;
      break;
    }
    /* a release held back goes once its window has passed, or before an
     * EOS or the next trace event */
    if (self->deferred_keys
        && (self->eos_queued || g_get_monotonic_time () >=
            self->deferred_deadline))
      flush_deferred_unlocked (self);
    if (!g_queue_is_empty (&self->pending)) {
      buf = g_queue_pop_head (&self->pending);
      break;
    }
    /* an EOS sent to the element ends the stream after the records queued
     * before it (and before the rest of a trace) */
    if (self->eos_queued) {
      g_mutex_unlock (&self->lock);
      GST_DEBUG_OBJECT (self, "EOS sent to the element");
      return GST_FLOW_EOS;
    }
    if (self->trace)
      events = lingbot_control_trace_get_events (self->trace, &n_events);
    if (self->next_event < n_events) {
      const LingbotControlEvent *e = &events[self->next_event];
      GstClockTime t = (GstClockTime) (e->time_s * GST_SECOND + 0.5);
      gint64 deadline = self->is_live ? clock_deadline (self, t) : 0;

      /* live: wait for the event's running time, waking for app events */
      if (self->is_live && g_get_monotonic_time () < deadline) {
        if (self->deferred_keys)
          deadline = MIN (deadline, self->deferred_deadline);
        g_cond_wait_until (&self->cond, &self->lock, deadline);
        continue;
      }
      if (self->deferred_keys) {
        flush_deferred_unlocked (self);
        continue;
      }
      buf = trace_record_unlocked (self, e);
      self->next_event++;
      break;
    }
    if (self->deferred_keys) {
      g_cond_wait_until (&self->cond, &self->lock, self->deferred_deadline);
      continue;
    }
    if (self->trace) {
      g_mutex_unlock (&self->lock);
      GST_DEBUG_OBJECT (self, "trace done");
      return GST_FLOW_EOS;
    }
    g_cond_wait (&self->cond, &self->lock);
  }
  self->last_time = GST_BUFFER_PTS (buf);
  g_mutex_unlock (&self->lock);

  GST_LOG_OBJECT (self, "record at %" GST_TIME_FORMAT,
      GST_TIME_ARGS (GST_BUFFER_PTS (buf)));
  *out = buf;
  return GST_FLOW_OK;
}

static void
gst_lingbot_control_src_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstLingbotControlSrc *self = GST_LINGBOT_CONTROL_SRC (object);
  gboolean live;

  if (!gst_lingbot_property_can_set (GST_ELEMENT (self), pspec))
    return;
  GST_OBJECT_LOCK (self);
  if (!gst_lingbot_property_set (self, src_properties,
          G_N_ELEMENTS (src_properties), pspec, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  live = self->is_live;
  GST_OBJECT_UNLOCK (self);
  if (prop_id == PROP_IS_LIVE)
    gst_base_src_set_live (GST_BASE_SRC (self), live);
}

static void
gst_lingbot_control_src_get_property (GObject * object, guint prop_id,
    GValue * value, GParamSpec * pspec)
{
  GstLingbotControlSrc *self = GST_LINGBOT_CONTROL_SRC (object);

  GST_OBJECT_LOCK (self);
  if (!gst_lingbot_property_get (self, src_properties,
          G_N_ELEMENTS (src_properties), pspec, value))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
  GST_OBJECT_UNLOCK (self);
}

static void
gst_lingbot_control_src_finalize (GObject * object)
{
  GstLingbotControlSrc *self = GST_LINGBOT_CONTROL_SRC (object);

  gst_lingbot_properties_clear (self, src_properties,
      G_N_ELEMENTS (src_properties));
  g_clear_pointer (&self->trace, lingbot_control_trace_free);
  gst_clear_buffer (&self->poses);
  g_queue_clear_full (&self->pending, (GDestroyNotify) gst_buffer_unref);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_lingbot_control_src_class_init (GstLingbotControlSrcClass * klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  GstBaseSrcClass *basesrc_class = GST_BASE_SRC_CLASS (klass);
  GstPushSrcClass *pushsrc_class = GST_PUSH_SRC_CLASS (klass);
  const GParamFlags rw = G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS;

  GST_DEBUG_CATEGORY_INIT (gst_lingbot_control_src_debug, "lingbotcontrolsrc",
      0, "LingBot-World control source");

  gobject_class->set_property = gst_lingbot_control_src_set_property;
  gobject_class->get_property = gst_lingbot_control_src_get_property;
  gobject_class->finalize = gst_lingbot_control_src_finalize;

  g_object_class_install_property (gobject_class, PROP_LOCATION,
      g_param_spec_string ("location", "Location",
          "JSON control trace ({\"events\":[{\"delay_s\",\"message\"}]})",
          DEFAULT_LOCATION, rw | GST_PARAM_MUTABLE_READY));
  g_object_class_install_property (gobject_class, PROP_IS_LIVE,
      g_param_spec_boolean ("is-live", "Is live",
          "Pace trace events by the clock and stamp events with the "
          "running time", DEFAULT_IS_LIVE, rw | GST_PARAM_MUTABLE_READY));
  g_object_class_install_property (gobject_class, PROP_POSES_LOCATION,
      g_param_spec_string ("poses-location", "Poses location",
          "Explicit camera poses, .npy float [n, 4, 4] camera-to-world "
          "(keys are then ignored)", DEFAULT_POSES_LOCATION,
          rw | GST_PARAM_MUTABLE_READY));
  g_object_class_install_property (gobject_class, PROP_INTRINSICS_LOCATION,
      g_param_spec_string ("intrinsics-location", "Intrinsics location",
          "Camera intrinsics for the poses, .npy float [4], [1, 4] or [n, 4] "
          "(fx, fy, cx, cy; the first row is used)",
          DEFAULT_INTRINSICS_LOCATION, rw | GST_PARAM_MUTABLE_READY));
  g_object_class_install_property (gobject_class, PROP_INTRINSICS_WIDTH,
      g_param_spec_int ("intrinsics-width", "Intrinsics width",
          "Image width the intrinsics are calibrated at", 1, 65536,
          DEFAULT_INTRINSICS_WIDTH, rw | GST_PARAM_MUTABLE_READY));
  g_object_class_install_property (gobject_class, PROP_INTRINSICS_HEIGHT,
      g_param_spec_int ("intrinsics-height", "Intrinsics height",
          "Image height the intrinsics are calibrated at", 1, 65536,
          DEFAULT_INTRINSICS_HEIGHT, rw | GST_PARAM_MUTABLE_READY));
  g_object_class_install_property (gobject_class, PROP_KEY_REPEAT_WINDOW,
      g_param_spec_uint64 ("key-repeat-window", "Key repeat window",
          "How long a navigation key-release is held back (ns): a press of "
          "the same key within it is an auto-repeat (X sinks send a "
          "release and a press per repeat) and both are dropped; 0 takes "
          "every event as it comes", 0, MAX_KEY_REPEAT_WINDOW,
          DEFAULT_KEY_REPEAT_WINDOW, rw | GST_PARAM_MUTABLE_PLAYING));

  /**
   * GstLingbotControlSrc::press-key:
   * @src: the element
   * @key: a key name of the table in docs/elements.md, "Keys"
   *   (lingbot_key_from_name(): browser code/key names, X keysym names,
   *   aliases; any case)
   *
   * Presses @key (held until release-key or reset-pose).
   *
   * Returns: %FALSE when the key is unknown (ignored, with a GST_WARNING)
   */
  signals[SIGNAL_PRESS_KEY] = g_signal_new_class_handler ("press-key",
      G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION,
      G_CALLBACK (gst_lingbot_control_src_press_key), NULL, NULL, NULL,
      G_TYPE_BOOLEAN, 1, G_TYPE_STRING);
  /**
   * GstLingbotControlSrc::release-key:
   * @src: the element
   * @key: a key name, as for #GstLingbotControlSrc::press-key
   *   (docs/elements.md, "Keys")
   *
   * Releases @key.
   *
   * Returns: %FALSE when the key is unknown (ignored, with a GST_WARNING)
   */
  signals[SIGNAL_RELEASE_KEY] = g_signal_new_class_handler ("release-key",
      G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION,
      G_CALLBACK (gst_lingbot_control_src_release_key), NULL, NULL, NULL,
      G_TYPE_BOOLEAN, 1, G_TYPE_STRING);
  /**
   * GstLingbotControlSrc::reset-pose:
   * @src: the element
   *
   * Pose back to identity, keys cleared.
   */
  signals[SIGNAL_RESET_POSE] = g_signal_new_class_handler ("reset-pose",
      G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION,
      G_CALLBACK (gst_lingbot_control_src_reset_pose), NULL, NULL, NULL,
      G_TYPE_NONE, 0);

  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (element_class,
      "LingBot-World control source", "Source/Control",
      "Keyboard and camera control for lingbotgen from a trace, navigation "
      "events, action signals or explicit poses", "lingbot-gst developers");

  element_class->change_state = gst_lingbot_control_src_change_state;
  element_class->send_event = gst_lingbot_control_src_send_event;
  basesrc_class->stop = gst_lingbot_control_src_stop;
  basesrc_class->get_caps = gst_lingbot_control_src_get_caps;
  basesrc_class->unlock = gst_lingbot_control_src_unlock;
  basesrc_class->unlock_stop = gst_lingbot_control_src_unlock_stop;
  basesrc_class->event = gst_lingbot_control_src_event;
  pushsrc_class->create = gst_lingbot_control_src_create;
}

static void
gst_lingbot_control_src_init (GstLingbotControlSrc * self)
{
  gst_lingbot_properties_init (self, src_properties,
      G_N_ELEMENTS (src_properties));
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  g_queue_init (&self->pending);
  self->last_time = GST_CLOCK_TIME_NONE;
  gst_base_src_set_format (GST_BASE_SRC (self), GST_FORMAT_TIME);
  gst_base_src_set_live (GST_BASE_SRC (self), DEFAULT_IS_LIVE);
}

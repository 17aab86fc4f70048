/* lingbot-gst: lingbotgen, the inputs
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The control pad (the POSES record, the key events of lingbotcontrolsrc,
 * EOS and flushes), the requested image pad, and the choice of the keys
 * of each chunk from the control schedule, live or offline.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <string.h>

#include "gst/gstlingbotgen-private.h"

#define GST_CAT_DEFAULT gst_lingbot_gen_debug

/* ---- control pad ---- */

/* Whether @pad has something upstream: a peer that is not merely the
 * internal pad of an unlinked ghost pad (lingbotbin's `control` with
 * nothing linked to it counts as no control, like an unlinked pad). */
gboolean
gst_lingbot_gen_control_has_upstream (GstPad * pad)
{
  GstPad *peer = gst_pad_get_peer (pad);

  while (peer != NULL) {
    GstProxyPad *ghost;

    if (!GST_IS_PROXY_PAD (peer) || GST_IS_GHOST_PAD (peer)) {
      gst_object_unref (peer);
      return TRUE;
    }
    /* the internal pad of a ghost pad: look past the ghost */
    ghost = gst_proxy_pad_get_internal (GST_PROXY_PAD (peer));
    gst_object_unref (peer);
    if (ghost == NULL)
      return TRUE;
    peer = gst_pad_get_peer (GST_PAD (ghost));
    gst_object_unref (ghost);
  }
  return FALSE;
}

/* a key record into the schedule, which keeps the key state of both
 * modes (the virtual clock's and the live one) */
static void
apply_record_unlocked (GstLingbotGen * self, const GstLingbotControlRecord * r,
    GstClockTime pts)
{
  LingbotControlEvent e = { 0 };

  e.time_s = GST_CLOCK_TIME_IS_VALID (pts) ? (double) pts / GST_SECOND : 0.0;
  switch (r->type) {
    case GST_LINGBOT_CONTROL_PRESS:
      e.type = LINGBOT_CONTROL_EVENT_PRESS;
      break;
    case GST_LINGBOT_CONTROL_RELEASE:
      e.type = LINGBOT_CONTROL_EVENT_RELEASE;
      break;
    case GST_LINGBOT_CONTROL_RESET:
      e.type = LINGBOT_CONTROL_EVENT_RESET;
      break;
    default:
      return;
  }
  e.key = r->keys;
  if (!lingbot_control_schedule_push (self->schedule, &e))
    GST_WARNING_OBJECT (self, "control record after the end of the control "
        "stream ignored");
}

/* sets *@flag (a field of @self) under the lock and wakes the waiters */
void
gst_lingbot_gen_control_raise (GstLingbotGen * self, gboolean * flag)
{
  g_mutex_lock (&self->lock);
  *flag = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

GstFlowReturn
gst_lingbot_gen_control_chain (GstPad * pad, GstObject * parent,
    GstBuffer * buf)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (parent);
  GstLingbotControlRecord rec;
  GstFlowReturn ret = GST_FLOW_OK;

  if (gst_buffer_extract (buf, 0, &rec, sizeof (rec)) != sizeof (rec)
      || rec.magic != GST_LINGBOT_CONTROL_MAGIC) {
    GST_WARNING_OBJECT (self, "ignoring a buffer that is not a control "
        "record");
    gst_buffer_unref (buf);
    return GST_FLOW_OK;
  }

  g_mutex_lock (&self->lock);
  if (self->flushing) {
    ret = GST_FLOW_FLUSHING;
  } else if (rec.type == GST_LINGBOT_CONTROL_POSES) {
    gst_buffer_replace (&self->poses, buf);
  } else {
    apply_record_unlocked (self, &rec, GST_BUFFER_PTS (buf));
    if (GST_BUFFER_PTS_IS_VALID (buf))
      self->horizon = MAX (self->horizon == GST_CLOCK_TIME_NONE ? 0 :
          self->horizon, GST_BUFFER_PTS (buf));
  }
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  gst_buffer_unref (buf);
  return ret;
}

gboolean
gst_lingbot_gen_control_event (GstPad * pad, GstObject * parent,
    GstEvent * event)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (parent);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_CAPS:{
      GstCaps *caps;
      gboolean poses = FALSE;

      gst_event_parse_caps (event, &caps);
      gst_structure_get_boolean (gst_caps_get_structure (caps, 0), "poses",
          &poses);
      g_mutex_lock (&self->lock);
      self->poses_expected = poses;
      self->control_caps = TRUE;
      g_cond_broadcast (&self->cond);
      g_mutex_unlock (&self->lock);
      break;
    }
    case GST_EVENT_EOS:
      gst_lingbot_gen_control_raise (self, &self->control_eos);
      break;
    default:
      break;
  }
  /* the control stream's own segment, caps and EOS stay here */
  gst_event_unref (event);
  return TRUE;
}

/* ---- image pad ---- */

static GstFlowReturn
gst_lingbot_gen_image_chain (GstPad * pad, GstObject * parent, GstBuffer * buf)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (parent);
  GstCaps *caps = gst_pad_get_current_caps (pad);
  GstVideoInfo info;
  GstVideoFrame frame;
  GstBuffer *packed;
  GstMapInfo map;

  if (caps == NULL || !gst_video_info_from_caps (&info, caps)) {
    gst_clear_caps (&caps);
    gst_buffer_unref (buf);
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, (NULL),
        ("image buffer without RGB caps"));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  gst_caps_unref (caps);

  g_mutex_lock (&self->lock);
  if (self->image != NULL) {
    /* one reference image per session */
    g_mutex_unlock (&self->lock);
    gst_buffer_unref (buf);
    return GST_FLOW_EOS;
  }
  g_mutex_unlock (&self->lock);

  if (!gst_video_frame_map (&frame, &info, buf, GST_MAP_READ)) {
    gst_buffer_unref (buf);
    GST_ELEMENT_ERROR (self, STREAM, FAILED, (NULL), ("cannot map image"));
    return GST_FLOW_ERROR;
  }
  /* sized by the caps: a failed allocation is an error, not an abort */
  packed = gst_lingbot_buffer_try_new ((gsize) info.width * info.height * 3);
  if (packed == NULL) {
    gst_video_frame_unmap (&frame);
    gst_buffer_unref (buf);
    GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT,
        ("Cannot allocate %dx%d RGB for the reference image", info.width,
            info.height), (NULL));
    return GST_FLOW_ERROR;
  }
  gst_buffer_map (packed, &map, GST_MAP_WRITE);
  for (int y = 0; y < info.height; y++)
    memcpy (map.data + (gsize) y * info.width * 3,
        (guint8 *) GST_VIDEO_FRAME_PLANE_DATA (&frame, 0) +
        (gsize) y * GST_VIDEO_FRAME_PLANE_STRIDE (&frame, 0),
        (gsize) info.width * 3);
  gst_buffer_unmap (packed, &map);
  gst_video_frame_unmap (&frame);
  gst_buffer_unref (buf);

  g_mutex_lock (&self->lock);
  self->image = packed;
  self->image_width = info.width;
  self->image_height = info.height;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  GST_DEBUG_OBJECT (self, "reference image %dx%d", info.width, info.height);
  return GST_FLOW_OK;
}

static gboolean
gst_lingbot_gen_image_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (parent);

  if (GST_EVENT_TYPE (event) == GST_EVENT_EOS) {
    gst_lingbot_gen_control_raise (self, &self->image_eos);
    gst_event_unref (event);
    return TRUE;
  }
  if (GST_EVENT_TYPE (event) == GST_EVENT_CAPS)
    return gst_pad_event_default (pad, parent, event);
  gst_event_unref (event);
  return TRUE;
}

GstPad *
gst_lingbot_gen_control_request_new_pad (GstElement * element,
    GstPadTemplate * templ, const gchar * name, const GstCaps * caps)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (element);
  GstPad *pad;

  GST_OBJECT_LOCK (self);
  if (self->image_pad != NULL) {
    GST_OBJECT_UNLOCK (self);
    GST_WARNING_OBJECT (self, "only one image pad");
    return NULL;
  }
  GST_OBJECT_UNLOCK (self);

  pad = gst_pad_new_from_template (templ, "image");
  gst_pad_set_chain_function (pad, gst_lingbot_gen_image_chain);
  gst_pad_set_event_function (pad, gst_lingbot_gen_image_event);
  GST_OBJECT_LOCK (self);
  self->image_pad = pad;
  GST_OBJECT_UNLOCK (self);
  gst_element_add_pad (element, pad);
  return pad;
}

void
gst_lingbot_gen_control_release_pad (GstElement * element, GstPad * pad)
{
  GstLingbotGen *self = GST_LINGBOT_GEN (element);

  GST_OBJECT_LOCK (self);
  if (self->image_pad == pad)
    self->image_pad = NULL;
  GST_OBJECT_UNLOCK (self);
  gst_element_remove_pad (element, pad);
}

/* ---- choosing the keys of a chunk ---- */

/* the keys of a chunk the schedule decided */
void
gst_lingbot_gen_control_keys_from (GstLingbotGenKeys * ck,
    const LingbotScheduleChunk * c)
{
  ck->keys = c->keys;
  ck->reset = c->reset_before;
  ck->kind =
      c->is_tap ? GST_LINGBOT_GEN_SNAPSHOT_TAP : GST_LINGBOT_GEN_SNAPSHOT_HELD;
  ck->revision = c->revision;
}

/* the lingbot-waiting element message: chunk @index waits for @what
 * ("keys" or "control"); called without the lock */
static void
post_waiting (GstLingbotGen * self, guint64 index, const char *what)
{
  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_element (GST_OBJECT (self),
          gst_structure_new ("lingbot-waiting", "index", G_TYPE_UINT64, index,
              "for", G_TYPE_STRING, what, NULL)));
}

/* offline: how long the control stream may stand still before the element
 * says that it waits for it (microseconds) */
#define CONTROL_STALL_US G_TIME_SPAN_SECOND

/* called with the lock held; may wait on cond.  Both modes go through the
 * one schedule: live=false its virtual clock (a chunk decided once the
 * control stream has passed its request time, or ended), live=true the key
 * state as it is now (a tap, else the held set; wait while nothing is
 * held).  @ck zeroed by the caller, kept as it is for the call after a
 * GST_LINGBOT_GEN_KEYS_REPEAT (which carries the wait's state on). */
GstLingbotGenKeysResult
gst_lingbot_gen_control_take_keys_unlocked (GstLingbotGen * self, gboolean live,
    gboolean has_control, GstLingbotGenKeys * ck)
{
  guint chunk_size = 4, fps_n = GST_LINGBOT_GEN_FALLBACK_FPS, fps_d = 1;
  gboolean waiting = ck->waited;
  g_autoptr (GError) error = NULL;

  memset (ck, 0, sizeof (*ck));
  ck->kind = GST_LINGBOT_GEN_SNAPSHOT_NONE;
  if (self->handle) {
    chunk_size = lingbot_session_get_chunk_frames (self->handle->session);
    fps_n = self->session_fps_n;
    fps_d = self->session_fps_d;
  }

  while (TRUE) {
    LingbotScheduleChunk c;

    if (self->flushing)
      return GST_LINGBOT_GEN_KEYS_FLUSHING;
    if (self->eos_pending)
      return GST_LINGBOT_GEN_KEYS_DONE;
    if (!has_control || self->poses != NULL)
      return GST_LINGBOT_GEN_KEYS_OK;

    /* the session's timing, fixed before the first chunk */
    if (!lingbot_control_schedule_set_timing (self->schedule, chunk_size,
            fps_n, fps_d, &error)) {
      GST_WARNING_OBJECT (self, "%s", error->message);
      g_clear_error (&error);
    }
    if (GST_CLOCK_TIME_IS_VALID (self->horizon))
      lingbot_control_schedule_set_horizon (self->schedule,
          (double) self->horizon / GST_SECOND);
    if (self->control_eos)
      lingbot_control_schedule_end (self->schedule);

    if (live) {
      if (lingbot_control_schedule_take_live (self->schedule, &c)) {
        gst_lingbot_gen_control_keys_from (ck, &c);
        /* this chunk's frames are the picture a viewer that joined
         * asked for */
        self->repeat_pending = FALSE;
        ck->waited = waiting;
        return GST_LINGBOT_GEN_KEYS_OK;
      }
    } else {
      switch (lingbot_control_schedule_next (self->schedule, &c)) {
        case LINGBOT_SCHEDULE_CHUNK:
          gst_lingbot_gen_control_keys_from (ck, &c);
          return GST_LINGBOT_GEN_KEYS_OK;
        case LINGBOT_SCHEDULE_ENDED:{
          guint frames;

          /* the trace ended with nothing held: no more key changes.  A
           * bounded session still makes its `frames` with no key held (a
           * reset after the last chunk goes with the first of them); an
           * unbounded one ends here (it would never end otherwise). */
          GST_OBJECT_LOCK (self);
          frames = self->frames;
          GST_OBJECT_UNLOCK (self);
          if (frames == 0)
            return GST_LINGBOT_GEN_KEYS_DONE;
          ck->keys = 0;
          ck->reset = c.reset_before;
          ck->revision = c.revision;
          ck->kind =
              c.revision ? GST_LINGBOT_GEN_SNAPSHOT_HELD :
              GST_LINGBOT_GEN_SNAPSHOT_NONE;
          return GST_LINGBOT_GEN_KEYS_OK;
        }
        case LINGBOT_SCHEDULE_WAIT:
          break;
      }
    }
    if (self->control_eos)
      return GST_LINGBOT_GEN_KEYS_DONE;
    if (live && !waiting) {
      /* say so once: a live session that waits for a key looks like a
       * hang otherwise */
      guint64 index = self->chunk;

      waiting = TRUE;
      g_mutex_unlock (&self->lock);
      GST_INFO_OBJECT (self, "live: chunk %" G_GUINT64_FORMAT " waits for a "
          "key to be held", index);
      post_waiting (self, index, "keys");
      g_mutex_lock (&self->lock);
      continue;
    }
    if (!live && !waiting) {
      /* offline, a control stream that does not move on waits silently:
       * key presses on a lingbotcontrolsrc without location all land at
       * its last event's time.  Say so once nothing has come for
       * CONTROL_STALL_US (a trace's records come at once, so a normal run
       * never gets here): a lingbot-waiting message per wait, an INFO on
       * the bus once per stream */
      gint64 deadline = g_get_monotonic_time () + CONTROL_STALL_US;
      guint64 index = self->chunk;
      gboolean say;

      if (g_cond_wait_until (&self->cond, &self->lock, deadline))
        continue;
      waiting = TRUE;
      say = !self->said_control_wait;
      self->said_control_wait = TRUE;
      g_mutex_unlock (&self->lock);
      GST_INFO_OBJECT (self, "offline: chunk %" G_GUINT64_FORMAT " waits for "
          "the control stream to move on or end", index);
      if (say)
        /* gst-launch-1.0 prints an INFO's debug text: all of it there */
        GST_ELEMENT_INFO (self, LIBRARY, SETTINGS, ("Chunk %" G_GUINT64_FORMAT
                " waits for the control stream", index), ("is-live=false: "
                "chunk %" G_GUINT64_FORMAT " waits for the control stream to "
                "pass its start or to end; key presses on a lingbotcontrolsrc "
                "without location do not move its time: set is-live=true on "
                "lingbotgen (or lingbotbin) to steer as keys come, or end the "
                "control stream (EOS)", index));
      post_waiting (self, index, "control");
      g_mutex_lock (&self->lock);
      continue;
    }
    if (live && self->repeat_pending && self->playing) {
      /* a viewer joined while nothing is generated: the caller sends the
       * last frame again (GST_LINGBOT_REPEAT_EVENT); the wait goes on
       * (already said) when it asks again */
      self->repeat_pending = FALSE;
      ck->waited = waiting;
      return GST_LINGBOT_GEN_KEYS_REPEAT;
    }
    g_cond_wait (&self->cond, &self->lock);
  }
}

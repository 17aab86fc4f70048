/* lingbot-gst: the WebRTC sender's peer room
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A Peer is one browser connection: its WebSocket (a Conn) and a bin
 * `queue ! webrtcbin` linked to the session's tee.  Here: sending on its
 * data channels, key frames, its release, webrtcbin's signalling (offer,
 * ICE, connection state, liveness), the input from the browser and the
 * branch.  See webrtc-server-private.h.
 */
#define GST_USE_UNSTABLE_API 1

#include <string.h>
#include <gst/gst.h>
#include <gst/sdp/sdp.h>
#include <gst/video/navigation.h>
#include <gst/video/video.h>
#include <gst/webrtc/webrtc.h>

#include "lingbot/control.h"
#include "webrtc-messages.h"
#include "webrtc-server-private.h"

#define LABEL_INPUT "input"
#define LABEL_CONTROL "control"
#define MAX_PENDING_KEYS 256
#define MAX_HELD_KEYS 32
#define WEBRTC_LATENCY_MS 50

/* ------------------------------------------------------------------ */
/* peers: references                                                  */
/* ------------------------------------------------------------------ */

static void
peer_clear (Peer * p)
{
  g_debug ("peer %u: freed", p->id);
  g_ptr_array_unref (p->held);
  g_ptr_array_unref (p->promises);
  g_mutex_clear (&p->promise_lock);
  session_unref (p->session);
  g_main_context_unref (p->context);
}

void
peer_unref (Peer * p)
{
  g_atomic_rc_box_release_full (p, (GDestroyNotify) peer_clear);
}

static void
peer_unref_closure (gpointer data, GClosure * closure)
{
  peer_unref (data);
}

/* connects @callback to @signal of @instance with a reference of @p for its
 * data, dropped with the handler */
static void
peer_connect (gpointer instance, const char *signal, GCallback callback,
    Peer * p)
{
  g_signal_connect_data (instance, signal, callback,
      g_atomic_rc_box_acquire (p), peer_unref_closure, 0);
}

/* Hands @promise to webrtcbin's next call: the peer keeps a reference
 * until its branch is stopped.  webrtcbin (1.22) frees the operations still
 * queued on its thread when it stops, with their promises unanswered; one
 * freed pending is a GStreamer warning (fatal in the tests) and a change
 * function never called (the peer reference it holds leaks).  Returns
 * @promise. */
GstPromise *
peer_track_promise (Peer * p, GstPromise * promise)
{
  g_mutex_lock (&p->promise_lock);
  g_ptr_array_add (p->promises, gst_promise_ref (promise));
  g_mutex_unlock (&p->promise_lock);
  return promise;
}

/* the branch is stopped (webrtcbin's thread joined): a promise it never
 * answered is interrupted (its change function runs, here, and sees
 * GST_PROMISE_RESULT_INTERRUPTED) */
static void
peer_interrupt_promises (Peer * p)
{
  GPtrArray *promises;

  g_mutex_lock (&p->promise_lock);
  promises = p->promises;
  p->promises = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_promise_unref);
  g_mutex_unlock (&p->promise_lock);
  /* a no-op on a replied promise */
  for (guint i = 0; i < promises->len; i++)
    gst_promise_interrupt (g_ptr_array_index (promises, i));
  g_ptr_array_unref (promises);
}

/* ------------------------------------------------------------------ */
/* peers: sending                                                     */
/* ------------------------------------------------------------------ */

static gboolean
channel_open (GstWebRTCDataChannel * ch)
{
  GstWebRTCDataChannelState state = GST_WEBRTC_DATA_CHANNEL_STATE_CLOSED;

  if (ch == NULL)
    return FALSE;
  g_object_get (ch, "ready-state", &state, NULL);
  return state == GST_WEBRTC_DATA_CHANNEL_STATE_OPEN;
}

void
peer_control_send (Peer * p, const char *text)
{
  if (!p->released && channel_open (p->control))
    gst_webrtc_data_channel_send_string (p->control, text);
}

/* a dropped message: one log line, a count, an error reply */
void
peer_reject (Peer * p, const char *where, const char *why, gsize size,
    gboolean has_id, gint64 id)
{
  LingbotWebrtcServer *server = p->session->server;
  g_autofree char *text = server_error_json ("bad-message", why, FALSE, where,
      has_id, id);

  g_atomic_int_inc (&server->n_dropped);
  g_message ("session %u: peer %u: %s message dropped (%" G_GSIZE_FORMAT
      " bytes): %s", p->session->id, p->id, where, size, why);
  if (strcmp (where, "signalling") == 0)
    signalling_conn_send (p->conn, text);
  else
    peer_control_send (p, text);
}

static char *
status_json (Session * s, Peer * p)
{
  g_autoptr (JsonBuilder) b = server_message_new ("status");

  server_put_int (b, "session", s->id);
  server_put_int (b, "peer", p->id);
  server_put_boolean (b, "active", s->active == p);
  server_put_int (b, "next-chunk", s->last_chunk + 1);
  server_put_string (b, "state", s->state);
  server_put_int (b, "chunk", s->state_chunk);
  return server_message_finish (b);
}

/* ------------------------------------------------------------------ */
/* key frames                                                         */
/* ------------------------------------------------------------------ */

/* upstream from the peer's tee pad: tee, payloader, encoder */
static void
peer_force_key_unit (Peer * p, const char *why)
{
  GstEvent *ev = gst_video_event_new_upstream_force_key_unit
      (GST_CLOCK_TIME_NONE, TRUE, (guint)++ p->key_unit_count);

  g_debug ("peer %u: force key unit (%s)", p->id, why);
  if (p->tee_pad)
    gst_pad_send_event (p->tee_pad, ev);
  else
    gst_event_unref (ev);
}

/* ------------------------------------------------------------------ */
/* peers: release                                                     */
/* ------------------------------------------------------------------ */

static void
peer_release_keys (Peer * p)
{
  Session *s = p->session;

  for (guint i = 0; i < p->held->len; i++) {
    const char *key = g_ptr_array_index (p->held, i);

    g_debug ("session %u: peer %u gone: releasing %s", s->id, p->id, key);
    if (!s->closed)
      session_send_navigation (s, gst_navigation_event_new_key_release (key,
              0));
  }
  g_ptr_array_set_size (p->held, 0);
}

/* the branch is stopped: its signal handlers hold references to the peer,
 * and the peer holds the branch */
void
peer_cleanup (Peer * p)
{
  if (p->webrtc)
    g_signal_handlers_disconnect_by_data (p->webrtc, p);
  if (p->input)
    g_signal_handlers_disconnect_by_data (p->input, p);
  if (p->control)
    g_signal_handlers_disconnect_by_data (p->control, p);
  g_clear_object (&p->input);
  g_clear_object (&p->control);
  g_clear_object (&p->tee_pad);
  g_clear_object (&p->bin_sink);
  g_clear_object (&p->webrtc);
  g_clear_object (&p->bin);
  peer_interrupt_promises (p);
}

/* after the tee pad went idle and was unlinked: drop the branch */
static void
peer_drop_branch (gpointer obj, gpointer data)
{
  Peer *p = obj;
  Session *s = p->session;

  if (!s->closed && s->tee && p->tee_pad)
    gst_element_release_request_pad (s->tee, p->tee_pad);
  if (p->bin) {
    gst_element_set_state (p->bin, GST_STATE_NULL);
    if (!s->closed && s->pipeline
        && GST_OBJECT_PARENT (p->bin) == GST_OBJECT (s->pipeline))
      gst_bin_remove (GST_BIN (s->pipeline), p->bin);
  }
  if (p->bin)
    g_ptr_array_remove (s->leaving, p->bin);
  g_debug ("session %u: peer %u branch removed", s->id, p->id);
  if (!s->closed)
    peer_cleanup (p);
}

static GstPadProbeReturn
peer_unlink_probe (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  Peer *p = user_data;

  gst_pad_unlink (p->tee_pad, p->bin_sink);
  server_invoke_full (p, TRUE, TRUE, peer_drop_branch, NULL, NULL);
  return GST_PAD_PROBE_REMOVE;
}

void
peer_release (Peer * p, const char *reason, gushort close_code,
    const char *error_code, const char *message)
{
  Session *s = p->session;
  LingbotWebrtcServer *server = s->server;
  Conn *c = p->conn;

  if (p->released)
    return;
  p->released = TRUE;
  g_message ("session %u: peer %u released (%s)", s->id, p->id, reason);
  peer_release_keys (p);
  if (s->active == p)
    s->active = NULL;
  s->peers = g_list_remove (s->peers, p);
  if (p->tick) {
    g_source_destroy (p->tick);
    g_clear_pointer (&p->tick, g_source_unref);
  }
  if (c) {
    c->peer = NULL;
    p->conn = NULL;
    if (error_code) {
      g_autofree char *text =
          server_error_json (error_code, message, TRUE, NULL,
          FALSE, 0);
      signalling_conn_send (c, text);
    }
    signalling_conn_close (c, close_code, reason);
  }
  if (!s->closed && p->bin)
    g_ptr_array_add (s->leaving, gst_object_ref (p->bin));
  if (!s->closed && p->tee_pad && gst_pad_is_linked (p->tee_pad)) {
    /* unlinked once no buffer is on its way through the pad */
    gst_pad_add_probe (p->tee_pad, GST_PAD_PROBE_TYPE_IDLE,
        peer_unlink_probe, g_atomic_rc_box_acquire (p),
        (GDestroyNotify) peer_unref);
  } else if (!s->closed && p->bin) {
    server_invoke_full (p, TRUE, TRUE, peer_drop_branch, NULL, NULL);
  }
  if (server)
    g_atomic_int_add (&server->n_peers, -1);
  if (!s->closed && s->peers == NULL)
    session_detached (s);
  peer_unref (p);               /* the session's list */
}

/* ------------------------------------------------------------------ */
/* peers: webrtcbin signalling                                        */
/* ------------------------------------------------------------------ */

static void
send_offer (Peer * p, char *sdp)
{
  g_autoptr (JsonBuilder) b = server_message_new ("offer");

  server_put_string (b, "sdp", sdp);
  signalling_conn_send_message (p->conn, b);
}

static void
peer_no_offer (Peer * p, gpointer data)
{
  peer_release (p, "webrtcbin created no offer", 1011, "webrtc",
      "the server could not create an offer");
}

static void
on_offer_created (GstPromise * promise, gpointer user_data)
{
  Peer *p = user_data;
  GstWebRTCSessionDescription *offer = NULL;
  const GstStructure *reply;

  if (gst_promise_wait (promise) != GST_PROMISE_RESULT_REPLIED) {
    gst_promise_unref (promise);
    return;
  }
  reply = gst_promise_get_reply (promise);
  if (reply && gst_structure_has_field (reply, "offer"))
    gst_structure_get (reply, "offer",
        GST_TYPE_WEBRTC_SESSION_DESCRIPTION, &offer, NULL);
  if (offer) {
    /* a promise of our own: webrtcbin (1.22) replies with an error when it
     * is already closed (a peer gone while the offer was made), and that
     * reply leaks without a promise to hold it */
    GstPromise *set = peer_track_promise (p, gst_promise_new ());

    g_signal_emit_by_name (p->webrtc, "set-local-description", offer, set);
    gst_promise_unref (set);
    peer_invoke (p, send_offer, gst_sdp_message_as_text (offer->sdp), g_free);
    gst_webrtc_session_description_free (offer);
  } else {
    peer_invoke (p, peer_no_offer, NULL, NULL);
  }
  gst_promise_unref (promise);
}

static void
create_offer (Peer * p, gpointer data)
{
  GstPromise *promise;

  if (p->offered)
    return;                     /* no renegotiation */
  p->offered = TRUE;
  promise = peer_track_promise (p,
      gst_promise_new_with_change_func (on_offer_created,
          g_atomic_rc_box_acquire (p), (GDestroyNotify) peer_unref));
  g_signal_emit_by_name (p->webrtc, "create-offer", NULL, promise);
}

static void
on_negotiation_needed (GstElement * webrtc, gpointer user_data)
{
  peer_invoke (user_data, create_offer, NULL, NULL);
}

typedef struct
{
  guint mline;
  char *candidate;
} Candidate;

static void
candidate_free (Candidate * c)
{
  g_free (c->candidate);
  g_free (c);
}

static void
send_candidate (Peer * p, Candidate * c)
{
  g_autoptr (JsonBuilder) b = server_message_new ("ice");

  server_put_string (b, "candidate", c->candidate);
  server_put_int (b, "sdpMLineIndex", c->mline);
  signalling_conn_send_message (p->conn, b);
}

static void
on_ice_candidate (GstElement * webrtc, guint mline, const char *candidate,
    gpointer user_data)
{
  Candidate *c = g_new0 (Candidate, 1);

  c->mline = mline;
  c->candidate = g_strdup (candidate);
  peer_invoke (user_data, send_candidate, c, (GDestroyNotify) candidate_free);
}

static GstPadProbeReturn
rx_probe (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  Peer *p = user_data;

  g_atomic_int_inc (&p->rx_packets);
  return GST_PAD_PROBE_OK;
}

/* count what arrives from the browser: every nicesrc's output (RTCP, SCTP
 * over DTLS; STUN stays inside libnice) */
static void
peer_probe_rx (Peer * p)
{
  GstIterator *it;
  GValue v = G_VALUE_INIT;

  if (p->rx_probed)
    return;
  p->rx_probed = TRUE;
  it = gst_bin_iterate_recurse (GST_BIN (p->webrtc));
  while (gst_iterator_next (it, &v) == GST_ITERATOR_OK) {
    GstElement *e = g_value_get_object (&v);
    GstElementFactory *f = gst_element_get_factory (e);

    if (f && strcmp (GST_OBJECT_NAME (f), "nicesrc") == 0) {
      GstPad *src = gst_element_get_static_pad (e, "src");

      if (src) {
        gst_pad_add_probe (src, GST_PAD_PROBE_TYPE_BUFFER |
            GST_PAD_PROBE_TYPE_BUFFER_LIST, rx_probe,
            g_atomic_rc_box_acquire (p), (GDestroyNotify) peer_unref);
        gst_object_unref (src);
      }
    }
    g_value_reset (&v);
  }
  g_value_unset (&v);
  gst_iterator_free (it);
}

static void
peer_connected (Peer * p)
{
  Session *s = p->session;
  LingbotWebrtcServer *server = s->server;

  if (p->connected)
    return;
  p->connected = TRUE;
  p->last_rx_us = g_get_monotonic_time ();
  peer_probe_rx (p);
  g_message ("session %u: peer %u connected", s->id, p->id);
  /* the key frame sent when the branch was linked may have gone out
   * before DTLS was up */
  peer_force_key_unit (p, "connected");
  session_repeat_preview (s);
  if (s->active != p) {
    Peer *old = s->active;

    s->active = p;
    if (old) {
      g_atomic_int_inc (&server->n_replaced);
      peer_release (old, "replaced by a newer connection",
          LINGBOT_WEBRTC_CLOSE_REPLACED, "replaced",
          "another connection to this session (a reload or another tab) "
          "took it over");
    }
  }
}

static void
connection_state_changed (Peer * p, gpointer data)
{
  GstWebRTCPeerConnectionState state = GPOINTER_TO_INT (data);

  switch (state) {
    case GST_WEBRTC_PEER_CONNECTION_STATE_CONNECTED:
      peer_connected (p);
      break;
    case GST_WEBRTC_PEER_CONNECTION_STATE_FAILED:{
      g_autofree char *hint = ice_failure_hint (p->session->server);
      g_autofree char *why = g_strconcat ("the WebRTC connection failed",
          hint, NULL);

      peer_release (p, "ICE/DTLS connection failed",
          LINGBOT_WEBRTC_CLOSE_TIMEOUT, "ice", why);
      break;
    }
    case GST_WEBRTC_PEER_CONNECTION_STATE_CLOSED:
      peer_release (p, "WebRTC connection closed",
          LINGBOT_WEBRTC_CLOSE_TIMEOUT, "ice", "the WebRTC connection closed");
      break;
    default:
      break;
  }
}

static void
on_connection_state (GObject * webrtc, GParamSpec * pspec, gpointer user_data)
{
  GstWebRTCPeerConnectionState state;

  g_object_get (webrtc, "connection-state", &state, NULL);
  peer_invoke (user_data, connection_state_changed,
      GINT_TO_POINTER (state), NULL);
}

static void
ice_state_changed (Peer * p, gpointer data)
{
  if (GPOINTER_TO_INT (data) == GST_WEBRTC_ICE_CONNECTION_STATE_FAILED)
    peer_release (p, "ICE connection failed", LINGBOT_WEBRTC_CLOSE_TIMEOUT,
        "ice", "the ICE connection failed");
}

static void
on_ice_state (GObject * webrtc, GParamSpec * pspec, gpointer user_data)
{
  GstWebRTCICEConnectionState state;

  g_object_get (webrtc, "ice-connection-state", &state, NULL);
  peer_invoke (user_data, ice_state_changed, GINT_TO_POINTER (state), NULL);
}

/* the peer's timer: liveness and keepalive */
static gboolean
peer_tick (gpointer user_data)
{
  Peer *p = user_data;
  Session *s = p->session;
  LingbotWebrtcServer *server = s->server;
  guint timeout = server->peer_timeout;
  guint keepalive = CLAMP (timeout / 5, 1, 5);
  gint64 now = g_get_monotonic_time ();
  gint rx = g_atomic_int_get (&p->rx_packets);
  g_autofree char *why = NULL;

  if (rx != p->rx_seen) {
    p->rx_seen = rx;
    p->last_rx_us = now;
  }
  if (!p->connected && now - p->created_us > timeout * G_USEC_PER_SEC) {
    g_autofree char *hint = ice_failure_hint (server);

    why = g_strdup_printf ("the browser did not connect within %u s%s",
        timeout, hint);
  } else if (p->connected && now - p->last_rx_us > timeout * G_USEC_PER_SEC)
    why = g_strdup_printf ("nothing arrived from the browser for %u s",
        timeout);
  if (why) {
    g_atomic_int_inc (&server->n_timeouts);
    peer_release (p, why, LINGBOT_WEBRTC_CLOSE_TIMEOUT, "timeout", why);
    return G_SOURCE_REMOVE;
  }
  /* a live browser acknowledges this (SCTP), so something always comes
   * back while it is there */
  if (++p->ticks % keepalive == 0 && channel_open (p->control)) {
    g_autofree char *text = status_json (s, p);

    peer_control_send (p, text);
  }
  return G_SOURCE_CONTINUE;
}

/* ------------------------------------------------------------------ */
/* peers: input from the browser                                      */
/* ------------------------------------------------------------------ */

static void
peer_track_key (Peer * p, const char *key, gboolean press)
{
  for (guint i = 0; i < p->held->len; i++)
    if (g_ascii_strcasecmp (g_ptr_array_index (p->held, i), key) == 0) {
      if (!press)
        g_ptr_array_remove_index_fast (p->held, i);
      return;
    }
  if (press && p->held->len < MAX_HELD_KEYS && lingbot_key_from_name (key))
    g_ptr_array_add (p->held, g_strdup (key));
}

/* a key press or release of the viewer: stamped (a press with an id is
 * echoed with the chunk that used it), tracked (released when the peer
 * goes), sent upstream */
static void
peer_key (Peer * p, const LingbotWebrtcInput * in)
{
  Session *s = p->session;

  if (in->press && in->has_id && in->key_bit != 0) {
    KeyStamp *k = g_new0 (KeyStamp, 1);

    k->id = in->id;
    k->key = in->key_bit;
    k->name = g_strdup (in->key);
    k->min_chunk = (guint64) (s->last_chunk + 1);
    k->t_us = g_get_monotonic_time ();
    g_queue_push_tail (&s->pending_keys, k);
    while (s->pending_keys.length > MAX_PENDING_KEYS)
      session_key_stamp_free (g_queue_pop_head (&s->pending_keys));
  }
  peer_track_key (p, in->key, in->press);
  g_debug ("session %u: %s %s", s->id, in->event, in->key);
  session_send_navigation (s, in->press ?
      gst_navigation_event_new_key_press (in->key, 0) :
      gst_navigation_event_new_key_release (in->key, 0));
}

typedef struct
{
  gboolean control;             /* arrived on "control" */
  gboolean binary;
  gsize size;
  char *text;
} ChannelMessage;

static void
channel_message_free (ChannelMessage * m)
{
  g_free (m->text);
  g_free (m);
}

/* the checks are lingbot_webrtc_check_input()'s (webrtc-messages.c) */
static void
handle_channel_message (Peer * p, ChannelMessage * m)
{
  LingbotWebrtcInput in = { 0 };

  in.control = m->control;
  in.viewer = p->session->active == p;
  lingbot_webrtc_check_input (&in, m->binary, m->text, m->size);
  switch (in.verdict) {
    case LINGBOT_WEBRTC_INPUT_DROP:
      peer_reject (p, m->control ? LABEL_CONTROL : LABEL_INPUT, in.why,
          m->size, in.has_id, in.id);
      break;
    case LINGBOT_WEBRTC_INPUT_IGNORE:
      g_debug ("session %u: %s ignored (no control)", p->session->id, in.event);
      break;
    case LINGBOT_WEBRTC_INPUT_KEY:
      peer_key (p, &in);
      break;
  }
  lingbot_webrtc_input_clear (&in);
}

static void
post_channel_message (Peer * p, GstWebRTCDataChannel * channel,
    const char *text, gsize size, gboolean binary)
{
  ChannelMessage *m = g_new0 (ChannelMessage, 1);
  gsize limit = p->session->max_message;

  m->control = channel == p->control;
  m->binary = binary;
  m->size = size;
  /* no copy of what is dropped anyway */
  if (!binary && size <= limit)
    m->text = g_strndup (text ? text : "", size);
  peer_invoke (p, handle_channel_message, m,
      (GDestroyNotify) channel_message_free);
}

static void
on_channel_message (GstWebRTCDataChannel * channel, const char *text,
    gpointer user_data)
{
  post_channel_message (user_data, channel, text, text ? strlen (text) : 0,
      FALSE);
}

static void
on_channel_data (GstWebRTCDataChannel * channel, GBytes * data,
    gpointer user_data)
{
  post_channel_message (user_data, channel, NULL,
      data ? g_bytes_get_size (data) : 0, TRUE);
}

static void
control_opened (Peer * p, gpointer data)
{
  g_autofree char *text = status_json (p->session, p);

  peer_control_send (p, text);
  /* the picture once more, now that the browser's end is surely up: the
   * one sent when our transport came up alone did not reach a webrtcbin
   * receiver's decoder after a reload (webrtc-test-client: 0 frames) */
  peer_force_key_unit (p, "channel open");
  session_repeat_preview (p->session);
}

static void
on_channel_state (GObject * channel, GParamSpec * pspec, gpointer user_data)
{
  if (channel_open (GST_WEBRTC_DATA_CHANNEL (channel)))
    peer_invoke (user_data, control_opened, NULL, NULL);
}

static GstWebRTCDataChannel *
create_channel (Peer * p, const char *label)
{
  GstWebRTCDataChannel *channel = NULL;
  GstStructure *opts = gst_structure_new ("config",
      "ordered", G_TYPE_BOOLEAN, TRUE,
      "priority", GST_TYPE_WEBRTC_PRIORITY_TYPE,
      GST_WEBRTC_PRIORITY_TYPE_HIGH, NULL);

  g_signal_emit_by_name (p->webrtc, "create-data-channel", label, opts,
      &channel);
  gst_structure_free (opts);
  if (channel == NULL)
    return NULL;
  peer_connect (channel, "on-message-string", G_CALLBACK (on_channel_message),
      p);
  peer_connect (channel, "on-message-data", G_CALLBACK (on_channel_data), p);
  if (strcmp (label, LABEL_CONTROL) == 0)
    peer_connect (channel, "notify::ready-state", G_CALLBACK (on_channel_state),
        p);
  return channel;
}

/* ------------------------------------------------------------------ */
/* peers: the branch                                                  */
/* ------------------------------------------------------------------ */

static gboolean
forward_sticky (GstPad * pad, GstEvent ** event, gpointer user_data)
{
  gst_pad_send_event (user_data, gst_event_ref (*event));
  return TRUE;
}

static GstPadProbeReturn
block_probe (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  return GST_PAD_PROBE_OK;
}

gboolean
peer_build (Peer * p, GError ** error)
{
  Session *s = p->session;
  LingbotWebrtcServer *server = s->server;
  g_autofree char *name = g_strdup_printf ("peer%u", p->id);
  g_autofree char *desc = g_strdup_printf ("queue name=q leaky=downstream "
      "max-size-buffers=2000 max-size-bytes=0 max-size-time=0 ! webrtcbin "
      "name=webrtc bundle-policy=max-bundle latency=%d", WEBRTC_LATENCY_MS);
  g_autoptr (GstCaps) prefs = gst_caps_from_string (s->enc->preferences);
  GstWebRTCRTPTransceiver *trans = NULL;
  GstWebRTCICE *ice = NULL;
  GstElement *q;
  GstPad *qsrc, *wsink;
  gulong block;

  p->bin = gst_parse_bin_from_description_full (desc, TRUE, NULL,
      GST_PARSE_FLAG_FATAL_ERRORS, error);
  if (p->bin == NULL)
    return FALSE;
  gst_object_ref_sink (p->bin);
  gst_object_set_name (GST_OBJECT (p->bin), name);
  p->webrtc = gst_bin_get_by_name (GST_BIN (p->bin), "webrtc");
  p->bin_sink = gst_element_get_static_pad (p->bin, "sink");

  /* the offer's codec and fmtp come from the transceiver's preferences,
   * intersected with the payloader's caps */
  q = gst_bin_get_by_name (GST_BIN (p->bin), "q");
  qsrc = gst_element_get_static_pad (q, "src");
  wsink = gst_pad_get_peer (qsrc);
  if (wsink && g_object_class_find_property (G_OBJECT_GET_CLASS (wsink),
          "transceiver"))
    g_object_get (wsink, "transceiver", &trans, NULL);
  if (trans) {
    g_object_set (trans, "codec-preferences", prefs, "direction",
        GST_WEBRTC_RTP_TRANSCEIVER_DIRECTION_SENDONLY, NULL);
    gst_object_unref (trans);
  }
  g_clear_object (&wsink);
  gst_object_unref (qsrc);
  gst_object_unref (q);

  if (!ice_configure (server, p->webrtc, error))
    return FALSE;
  g_object_get (p->webrtc, "ice-agent", &ice, NULL);
  if (ice) {
    GObject *agent = NULL;

    /* libnice checks a connected pair with requests, not indications, and
     * fails it when they go unanswered */
    if (g_object_class_find_property (G_OBJECT_GET_CLASS (ice), "agent"))
      g_object_get (ice, "agent", &agent, NULL);
    if (agent && g_object_class_find_property (G_OBJECT_GET_CLASS (agent),
            "keepalive-conncheck"))
      g_object_set (agent, "keepalive-conncheck", TRUE, NULL);
    g_clear_object (&agent);
    if (server->ice_loopback
        && g_signal_lookup ("add-local-ip-address", G_OBJECT_TYPE (ice))) {
      gboolean ok = FALSE;

      g_signal_emit_by_name (ice, "add-local-ip-address", "127.0.0.1", &ok);
      if (!ok)
        g_message ("session %u: could not restrict ICE to 127.0.0.1", s->id);
    }
    g_clear_object (&ice);
  }

  peer_connect (p->webrtc, "on-negotiation-needed",
      G_CALLBACK (on_negotiation_needed), p);
  peer_connect (p->webrtc, "on-ice-candidate", G_CALLBACK (on_ice_candidate),
      p);
  peer_connect (p->webrtc, "notify::connection-state",
      G_CALLBACK (on_connection_state), p);
  peer_connect (p->webrtc, "notify::ice-connection-state",
      G_CALLBACK (on_ice_state), p);

  /* data channels are created in READY, before the offer (as webrtcsink) */
  gst_bin_add (GST_BIN (s->pipeline), p->bin);
  if (gst_element_set_state (p->bin, GST_STATE_READY) ==
      GST_STATE_CHANGE_FAILURE) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
        "webrtcbin cannot start");
    return FALSE;
  }
  p->input = create_channel (p, LABEL_INPUT);
  p->control = create_channel (p, LABEL_CONTROL);
  if (!p->input || !p->control) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
        "webrtcbin created no data channel");
    return FALSE;
  }

  /* linked while the tee pad is blocked, so that the stream's sticky
   * events (its caps: the offer waits for them) reach webrtcbin now, even
   * when no frame flows because no key is held, and before any buffer */
  p->tee_pad = gst_element_request_pad_simple (s->tee, "src_%u");
  block = gst_pad_add_probe (p->tee_pad, GST_PAD_PROBE_TYPE_BLOCK_DOWNSTREAM,
      block_probe, NULL, NULL);
  if (gst_pad_link (p->tee_pad, p->bin_sink) != GST_PAD_LINK_OK) {
    gst_pad_remove_probe (p->tee_pad, block);
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
        "cannot link the peer's branch");
    return FALSE;
  }
  gst_element_sync_state_with_parent (p->bin);
  gst_pad_sticky_events_foreach (p->tee_pad, forward_sticky, p->bin_sink);
  gst_pad_remove_probe (p->tee_pad, block);
  peer_force_key_unit (p, "joined");
  return TRUE;
}

Peer *
peer_new (Session * s, Conn * c)
{
  LingbotWebrtcServer *server = s->server;
  Peer *p = g_atomic_rc_box_new0 (Peer);        /* the session's list */

  p->session = g_atomic_rc_box_acquire (s);
  p->context = g_main_context_ref (s->context);
  p->id = ++server->next_peer;
  p->held = g_ptr_array_new_with_free_func (g_free);
  g_mutex_init (&p->promise_lock);
  p->promises = g_ptr_array_new_with_free_func ((GDestroyNotify)
      gst_promise_unref);
  p->created_us = g_get_monotonic_time ();
  p->conn = c;
  c->peer = p;
  s->peers = g_list_append (s->peers, p);
  if (s->active == NULL && s->peers->next == NULL)
    s->active = p;
  g_atomic_int_inc (&server->n_peers);
  if (s->resume) {
    g_source_destroy (s->resume);
    g_clear_pointer (&s->resume, g_source_unref);
  }
  p->tick = g_timeout_source_new_seconds (1);
  g_source_set_callback (p->tick, peer_tick, p, NULL);
  g_source_attach (p->tick, s->context);
  return p;
}

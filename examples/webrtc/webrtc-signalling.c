/* lingbot-gst: the WebRTC sender's signalling room
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The WebSocket endpoint (`/ws`): its handshake, the upgrade that takes
 * the TCP connection over behind the size guard (ws-guard.c), the
 * connection (a Conn) and the signalling messages from the browser
 * (checked by webrtc-messages.c), which open, resume or take over a
 * session and answer its peer's offer.  See webrtc-server-private.h.
 */
#define GST_USE_UNSTABLE_API 1

#include <string.h>
#include <gst/gst.h>
#include <gst/sdp/sdp.h>
#include <gst/webrtc/webrtc.h>

#include "webrtc-messages.h"
#include "webrtc-server-private.h"
#include "ws-guard.h"

/* ------------------------------------------------------------------ */
/* WebSocket connections                                              */
/* ------------------------------------------------------------------ */

void
signalling_conn_send (Conn * c, const char *text)
{
  if (c && c->ws && soup_websocket_connection_get_state (c->ws) ==
      SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_send_text (c->ws, text);
}

/* server_message_finish() @b, then signalling_conn_send() it */
void
signalling_conn_send_message (Conn * c, JsonBuilder * b)
{
  g_autofree char *text = server_message_finish (b);

  signalling_conn_send (c, text);
}

/* a close frame is a control frame: at most 125 bytes, 2 of them the
 * code; the reason is cut at a character boundary (the full text went in
 * the error message before) */
void
signalling_conn_close (Conn * c, gushort code, const char *reason)
{
  char cut[121];
  const char *end;

  if (!c || !c->ws || soup_websocket_connection_get_state (c->ws) !=
      SOUP_WEBSOCKET_STATE_OPEN)
    return;
  g_strlcpy (cut, reason ? reason : "", sizeof cut);
  if (!g_utf8_validate (cut, -1, &end))
    cut[end - cut] = '\0';
  soup_websocket_connection_close (c->ws, code, cut);
}

void
signalling_conn_free (Conn * c)
{
  if (c->trip) {
    g_source_destroy (c->trip);
    g_source_unref (c->trip);
  }
  if (c->ws) {
    g_clear_signal_handler (&c->message_id, c->ws);
    g_clear_signal_handler (&c->closed_id, c->ws);
    g_object_unref (c->ws);
  }
  g_clear_object (&c->guard);
  g_free (c);
}

/* a message above the hard limit, fragments included: close with 1009 */
static gboolean
conn_too_big (gpointer user_data)
{
  Conn *c = user_data;

  g_atomic_int_inc (&c->server->n_too_big);
  g_message ("connection %u: a message of at least %" G_GUINT64_FORMAT
      " bytes (all fragments) is above the limit of %u: closing with 1009",
      c->id, c->trip_size, LINGBOT_WEBRTC_WS_HARD_LIMIT);
  signalling_conn_close (c, SOUP_WEBSOCKET_CLOSE_TOO_BIG, "message too big");
  lingbot_ws_guard_finish (c->guard);
  g_clear_pointer (&c->trip, g_source_unref);
  return G_SOURCE_REMOVE;
}

static void
conn_tripped (gpointer user_data, guint64 size)
{
  Conn *c = user_data;

  c->trip_size = size;
  if (c->trip)
    return;
  /* called from within libsoup's read: close from an idle */
  c->trip = g_idle_source_new ();
  g_source_set_callback (c->trip, conn_too_big, c, NULL);
  g_source_attach (c->trip, c->server->context);
}

/* ------------------------------------------------------------------ */
/* signalling messages from the browser                               */
/* ------------------------------------------------------------------ */

static void
answer_refused (Peer * p, char *why)
{
  peer_release (p, why, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR, "webrtc", why);
}

static void
on_answer_set (GstPromise * promise, gpointer user_data)
{
  Peer *p = user_data;
  const GstStructure *reply = NULL;
  GError *err = NULL;

  if (gst_promise_wait (promise) == GST_PROMISE_RESULT_REPLIED)
    reply = gst_promise_get_reply (promise);
  if (reply && gst_structure_has_field (reply, "error"))
    gst_structure_get (reply, "error", G_TYPE_ERROR, &err, NULL);
  if (err) {
    peer_invoke (p, answer_refused, g_strdup_printf ("webrtcbin refused the "
            "answer: %s", err->message), g_free);
    g_error_free (err);
  }
  gst_promise_unref (promise);
}

/* a checked answer: webrtcbin takes it (and the SDP) */
static void
peer_answer (Peer * p, GstSDPMessage * sdp)
{
  GstWebRTCSessionDescription *answer;

  p->answered = TRUE;
  answer = gst_webrtc_session_description_new (GST_WEBRTC_SDP_TYPE_ANSWER, sdp);
  g_signal_emit_by_name (p->webrtc, "set-remote-description", answer,
      peer_track_promise (p, gst_promise_new_with_change_func (on_answer_set,
              g_atomic_rc_box_acquire (p), (GDestroyNotify) peer_unref)));
  gst_webrtc_session_description_free (answer);
}

/* the checks are lingbot_webrtc_check_signal()'s (webrtc-messages.c) */
static void
on_ws_message (SoupWebsocketConnection * ws, gint type, GBytes * message,
    gpointer user_data)
{
  Conn *c = user_data;
  LingbotWebrtcServer *server = c->server;
  Peer *p = c->peer;
  LingbotWebrtcSignal sig = { 0 };
  const char *data;
  gsize len;

  if (p == NULL || p->released)
    return;                     /* refused or being closed */
  data = g_bytes_get_data (message, &len);
  sig.max_message = server->max_message_size;
  sig.offered = p->offered;
  sig.answered = p->answered;
  sig.pt = p->session->enc->pt;
  sig.codec = p->session->enc->codec;
  sig.encoder = p->session->enc->name;
  sig.ice_loopback = server->ice_loopback;
  lingbot_webrtc_check_signal (&sig, type != SOUP_WEBSOCKET_DATA_TEXT, data,
      len);
  switch (sig.verdict) {
    case LINGBOT_WEBRTC_SIGNAL_DROP:
      peer_reject (p, "signalling", sig.why, len, FALSE, 0);
      break;
    case LINGBOT_WEBRTC_SIGNAL_ANSWER:
      peer_answer (p, g_steal_pointer (&sig.sdp));
      break;
    case LINGBOT_WEBRTC_SIGNAL_CODEC:
      peer_release (p, sig.why, LINGBOT_WEBRTC_CLOSE_CODEC, "codec", sig.why);
      break;
    case LINGBOT_WEBRTC_SIGNAL_ICE:
      g_signal_emit_by_name (p->webrtc, "add-ice-candidate", sig.mline,
          sig.candidate);
      break;
    case LINGBOT_WEBRTC_SIGNAL_ICE_END:
      break;
    case LINGBOT_WEBRTC_SIGNAL_MDNS:
      /* Browsers hide their host addresses behind mDNS names
       * (<uuid>.local).  With ICE on 127.0.0.1 only the browser runs on
       * this host: it reaches our 127.0.0.1 candidates, and its checks
       * teach webrtcbin a peer-reflexive candidate, so the name is not
       * needed; resolving it would only try DNS for a name that no DNS
       * server knows and log an ERROR.  On other interfaces the candidate
       * goes on to webrtcbin, which resolves it where the system can
       * (nss-mdns) and otherwise relies on peer-reflexive discovery as
       * well. */
      g_atomic_int_inc (&server->n_mdns_ignored);
      if (p->mdns_ignored++ == 0)
        g_message ("session %u: peer %u: ignoring the browser's mDNS "
            "(.local) candidates, ICE on 127.0.0.1 relies on peer-reflexive "
            "discovery", p->session->id, p->id);
      break;
    case LINGBOT_WEBRTC_SIGNAL_BYE:{
      Session *s = p->session;

      if (s->active == p || s->peers->next == NULL)
        session_close (s, "bye from the browser");
      else
        peer_release (p, "bye from the browser", SOUP_WEBSOCKET_CLOSE_NORMAL,
            NULL, NULL);
      break;
    }
  }
  lingbot_webrtc_signal_clear (&sig);
}

static void
on_ws_closed (SoupWebsocketConnection * ws, gpointer user_data)
{
  Conn *c = user_data;
  LingbotWebrtcServer *server = c->server;

  g_debug ("connection %u: closed (%u)", c->id,
      soup_websocket_connection_get_close_code (ws));
  if (c->peer)
    peer_release (c->peer, "WebSocket closed", SOUP_WEBSOCKET_CLOSE_NORMAL,
        NULL, NULL);
  g_hash_table_remove (server->conns, c);
}

static void
send_welcome (Peer * p, gboolean resumed)
{
  Session *s = p->session;
  LingbotWebrtcServer *server = s->server;
  g_autoptr (JsonBuilder) b = server_message_new ("welcome");

  server_put_int (b, "session", s->id);
  server_put_int (b, "peer", p->id);
  server_put_string (b, "encoder", server->encoder);
  server_put_string (b, "codec", s->enc->codec);
  server_put_int (b, "max-message-size", (gint64) server->max_message_size);
  server_put_string (b, "resume", s->token);
  server_put_boolean (b, "resumed", resumed);
  server_put_int (b, "next-chunk", s->last_chunk + 1);
  server_put_string (b, "state", s->state);
  json_builder_set_member_name (b, "start-image");
  if (server->image_real)
    json_builder_add_string_value (b, START_IMAGE_PATH);
  else
    json_builder_add_null_value (b);
  server_put_int (b, "peer-timeout", server->peer_timeout);
  server_put_int (b, "resume-timeout", server->resume_timeout);
  ice_put_welcome (server, b);
  json_builder_set_member_name (b, "group");
  if (s->group >= 0)
    json_builder_add_int_value (b, s->group);
  else
    json_builder_add_null_value (b);
  server_put_string_or_null (b, "server", server->server_id);
  signalling_conn_send_message (p->conn, b);
}

/* a new WebSocket: resume the session of its token, or a new session, or
 * refused */
static void
on_websocket_open (LingbotWebrtcServer * server, Conn * c, const char *token)
{
  g_autoptr (GError) err = NULL;
  Session *s = session_by_token (server, token);
  gboolean resumed = s != NULL && !s->spare;
  gboolean spare = FALSE;
  Peer *p;

  if (s && s->spare)
    s = NULL;                   /* a spare's token is no one's yet */
  if (s == NULL && !groups_slot_free (server)) {
    /* the expected wait: known when a session waits for its reload (it
     * ends at its resume timeout unless the reload comes); a session with
     * a browser has no end the server knows of */
    gint64 retry = groups_retry_after (server);
    g_autofree char *wait = retry >= 0 ? g_strdup_printf ("one may be free "
        "in %" G_GINT64_FORMAT " s (a session kept for a reload)", retry) :
        g_strdup ("try again later");
    g_autofree char *text = g_strdup_printf ("the server is busy: %u of %u "
        "sessions in use, %s", groups_n_active (server),
        server->max_sessions, wait);
    g_autoptr (JsonBuilder) b = server_message_new ("error");
    g_autofree char *json = NULL;

    server_put_string (b, "code", "busy");
    server_put_string (b, "message", text);
    server_put_boolean (b, "fatal", TRUE);
    json_builder_set_member_name (b, "retry-after");
    if (retry >= 0)
      json_builder_add_int_value (b, retry);
    else
      json_builder_add_null_value (b);
    json = server_message_finish (b);

    g_message ("connection %u: refused a session: %s%s", c->id, text,
        token ? " (unknown or expired resume token)" : "");
    signalling_conn_send (c, json);
    signalling_conn_close (c, LINGBOT_WEBRTC_CLOSE_BUSY, "busy");
    return;
  }
  if (s == NULL && (s = groups_spare (server)) != NULL) {
    /* the world made for its group: it is this browser's now */
    s->spare = FALSE;
    spare = TRUE;
    g_message ("session %u: the world of group %d taken (%u of %u)", s->id,
        s->group, groups_n_active (server), server->max_sessions);
  } else if (s == NULL) {
    s = session_new (server, -1);
    if (s->group >= 0)
      g_message ("session %u: opened on group %d (%s) (%u of %u)", s->id,
          s->group, groups_devices (server, s),
          g_hash_table_size (server->sessions), server->max_sessions);
    else
      g_message ("session %u: opened (%u of %u)", s->id,
          g_hash_table_size (server->sessions), server->max_sessions);
    if (!groups_build_world (server, s, &err)) {
      g_autofree char *json = server_error_json ("pipeline", err->message, TRUE,
          NULL, FALSE, 0);

      g_message ("session %u: %s", s->id, err->message);

      signalling_conn_send (c, json);
      signalling_conn_close (c, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR, "pipeline");
      session_close (s, "pipeline");
      return;
    }
  } else {
    /* a replacement that has not connected yet is replaced itself */
    for (GList * l = s->peers; l;) {
      Peer *other = l->data;

      l = l->next;
      if (other != s->active) {
        g_atomic_int_inc (&server->n_replaced);
        peer_release (other, "replaced by a newer connection",
            LINGBOT_WEBRTC_CLOSE_REPLACED, "replaced",
            "a newer connection resumed this session");
      }
    }
  }
  p = peer_new (s, c);
  g_message ("session %u: peer %u %s (connection %u)", s->id, p->id,
      resumed ? (s->active == p ? "resumes it" : "takes it over, the viewer "
          "keeps streaming until it is connected") : spare ? "joins the world "
      "made for its group" : "joins", c->id);
  send_welcome (p, resumed);
  if (!peer_build (p, &err))
    peer_release (p, err->message, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR,
        "pipeline", err->message);
}

/* ------------------------------------------------------------------ */
/* the WebSocket endpoint: handshake and upgrade                      */
/* ------------------------------------------------------------------ */

/* 101 sent: take the connection over, behind the size guard */
static void
on_ws_upgraded (SoupServerMessage * msg, gpointer user_data)
{
  LingbotWebrtcServer *server = user_data;
  GUri *uri = soup_server_message_get_uri (msg);
  SoupMessageHeaders *req = soup_server_message_get_request_headers (msg);
  const char *token = g_object_get_data (G_OBJECT (msg), "lingbot-resume");
  Client *cl = http_client_of_message (server, msg);
  GSocket *socket = NULL;
  GIOStream *stream;
  Conn *c;

  /* a WebSocket has no deadline of its own: its peer's timeouts apply */
  if (cl) {
    http_client_stop_timer (cl);
    socket = g_object_ref (cl->socket);
  }
  stream = soup_server_message_steal_connection (msg);
  if (stream == NULL) {
    g_clear_object (&socket);
    return;
  }
  c = g_new0 (Conn, 1);
  c->server = server;
  c->id = ++server->next_conn;
  c->guard = lingbot_ws_guard_new (stream, LINGBOT_WEBRTC_WS_HARD_LIMIT,
      conn_tripped, c);
  lingbot_ws_guard_set_socket (c->guard, socket);
  g_debug ("connection %u: WebSocket on TCP connection %u%s", c->id,
      cl ? cl->id : 0, socket ? "" : " (no socket: no lingering close)");
  g_clear_object (&socket);
  g_object_unref (stream);
  c->ws = soup_websocket_connection_new (c->guard, uri,
      SOUP_WEBSOCKET_CONNECTION_SERVER,
      soup_message_headers_get_one (req, "Origin"), NULL, NULL);
  soup_websocket_connection_set_max_incoming_payload_size (c->ws,
      LINGBOT_WEBRTC_WS_HARD_LIMIT);
  g_hash_table_add (server->conns, c);
  c->message_id = g_signal_connect (c->ws, "message",
      G_CALLBACK (on_ws_message), c);
  c->closed_id = g_signal_connect (c->ws, "closed",
      G_CALLBACK (on_ws_closed), c);
  on_websocket_open (server, c, token);
}

/* a page of another site may not open the signalling socket: an Origin,
 * when there is one, must name the host the request went to */
static gboolean
origin_allowed (SoupServerMessage * msg)
{
  SoupMessageHeaders *req = soup_server_message_get_request_headers (msg);
  const char *origin = soup_message_headers_get_one (req, "Origin");
  const char *host = soup_message_headers_get_one (req, "Host");
  const char *rest;

  if (origin == NULL)
    return TRUE;
  if (host == NULL)
    return FALSE;
  if (g_str_has_prefix (origin, "http://"))
    rest = origin + 7;
  else if (g_str_has_prefix (origin, "https://"))
    rest = origin + 8;
  else
    return FALSE;
  return g_ascii_strcasecmp (rest, host) == 0;
}

void
signalling_on_ws_http (SoupServer * soup, SoupServerMessage * msg,
    const char *path, GHashTable * query, gpointer user_data)
{
  LingbotWebrtcServer *server = user_data;
  g_autoptr (GError) err = NULL;
  const char *token = query ? g_hash_table_lookup (query, "resume") : NULL;

  if (strcmp (path, WS_PATH) != 0) {
    soup_server_message_set_status (msg, SOUP_STATUS_NOT_FOUND, NULL);
    return;
  }
  if (!origin_allowed (msg)) {
    g_message ("http: WebSocket from another origin refused (%s)",
        soup_message_headers_get_one (soup_server_message_get_request_headers
            (msg), "Origin"));
    soup_server_message_set_status (msg, SOUP_STATUS_FORBIDDEN, NULL);
    return;
  }
  /* no extensions: permessage-deflate would make frame sizes say nothing
   * about message sizes; "Connection: Upgrade", not http_on_request_read()'s
   * "close" */
  soup_message_headers_remove (soup_server_message_get_response_headers
      (msg), "Connection");
  if (!soup_websocket_server_check_handshake (msg, NULL, NULL, NULL, &err)
      || !soup_websocket_server_process_handshake (msg, NULL, NULL, NULL, NULL)) {
    g_message ("http: %s " WS_PATH " -> 400 (%s)",
        soup_server_message_get_method (msg),
        err ? err->message : "bad WebSocket handshake");
    soup_message_headers_replace (soup_server_message_get_response_headers
        (msg), "Connection", "close");
    soup_server_message_set_status (msg, SOUP_STATUS_BAD_REQUEST, NULL);
    return;
  }
  if (token)
    g_object_set_data_full (G_OBJECT (msg), "lingbot-resume",
        g_strndup (token, 64), g_free);
  g_signal_connect (msg, "wrote-informational", G_CALLBACK (on_ws_upgraded),
      server);
}

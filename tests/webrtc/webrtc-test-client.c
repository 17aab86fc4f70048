/* lingbot-gst: a receiving webrtcbin that plays the page's part (tests)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * What the page (examples/webrtc/www/app.js) does, for the tests that run
 * the server program in other network namespaces or behind nginx: opens
 * the WebSocket, takes the ICE servers and the transport policy of
 * `welcome` (as RTCPeerConnection's iceServers), answers the offer,
 * trickles ICE and counts the decoded frames.  With --reload it then
 * drops its WebSocket and pipeline and connects again with the resume
 * token, as a reloaded page does, and counts frames again.
 *
 *   webrtc-test-client [OPTION...] ws://HOST:PORT/ws
 *
 * Prints one line per event on stdout:
 *   welcome session=N peer=N resumed=0|1 server=ID   (ID: "server" of
 *                                                     welcome, or -)
 *   frames N
 *   pair local=TYPE remote=TYPE   (the selected ICE candidate pair)
 *   error CODE: MESSAGE           (a fatal error of the server)
 *   busy: MESSAGE                 (a refused session)
 * and exits 0 when the frames arrived (each time with --reload; with
 * --expect-relay a candidate of the selected pair is a relay), 3 when
 * the server refused the session as busy, 1 otherwise, with a "FAIL:"
 * line.
 */
#define GST_USE_UNSTABLE_API 1

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gst/gst.h>
#include <gst/app/gstappsink.h>
#include <gst/sdp/sdp.h>
#include <gst/webrtc/webrtc.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>

static char *url;
static int want_frames = 10;
static int timeout_s = 30;
static int hold_s = 0;
static gboolean reload;
static gboolean expect_relay;

static GMainLoop *loop;
static int exit_code = 1;

typedef struct
{
  SoupSession *http;
  SoupWebsocketConnection *ws;
  GstElement *pipe, *webrtc;
  char *token;
  gint n_frames;                /* atomic */
  gboolean reported;
  guint poll;
} Client;

static Client cl;
static guint round_no;          /* 0, then 1 after the reload */

static void client_connect (const char *token);

static void finish (int code, const char *fmt, ...) G_GNUC_PRINTF (2, 3);

static void
finish (int code, const char *fmt, ...)
{
  if (fmt) {
    va_list ap;

    va_start (ap, fmt);
    vprintf (fmt, ap);
    va_end (ap);
    putchar ('\n');
  }
  fflush (stdout);
  exit_code = code;
  g_main_loop_quit (loop);
}

static void
send_json (JsonBuilder * b)
{
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  g_autofree char *text = json_to_string (root, FALSE);

  if (cl.ws
      && soup_websocket_connection_get_state (cl.ws) ==
      SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_send_text (cl.ws, text);
}

/* webrtcbin's signals come on its threads: their messages go out on the
 * main context */
typedef struct
{
  guint round;
  JsonBuilder *b;
} Out;

static gboolean
out_run (gpointer data)
{
  Out *o = data;

  if (o->round == round_no)
    send_json (o->b);
  g_object_unref (o->b);
  g_free (o);
  return G_SOURCE_REMOVE;
}

static void
post (JsonBuilder * b)
{
  Out *o = g_new0 (Out, 1);

  o->round = round_no;
  o->b = b;
  g_idle_add (out_run, o);
}

static void
on_ice_candidate (GstElement * webrtc, guint mline, const char *candidate,
    gpointer data)
{
  JsonBuilder *b = json_builder_new ();

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, "ice");
  json_builder_set_member_name (b, "candidate");
  json_builder_add_string_value (b, candidate);
  json_builder_set_member_name (b, "sdpMLineIndex");
  json_builder_add_int_value (b, mline);
  json_builder_end_object (b);
  post (b);
}

static void
on_answer_created (GstPromise * promise, gpointer data)
{
  GstElement *webrtc = data;
  GstWebRTCSessionDescription *answer = NULL;
  JsonBuilder *b;
  g_autofree char *sdp = NULL;
  const GstStructure *reply;

  if (gst_promise_wait (promise) != GST_PROMISE_RESULT_REPLIED
      || (reply = gst_promise_get_reply (promise)) == NULL) {
    gst_promise_unref (promise);
    return;
  }
  gst_structure_get (reply, "answer", GST_TYPE_WEBRTC_SESSION_DESCRIPTION,
      &answer, NULL);
  gst_promise_unref (promise);
  if (answer == NULL)
    return;
  g_signal_emit_by_name (webrtc, "set-local-description", answer, NULL);
  sdp = gst_sdp_message_as_text (answer->sdp);
  gst_webrtc_session_description_free (answer);
  b = json_builder_new ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, "answer");
  json_builder_set_member_name (b, "sdp");
  json_builder_add_string_value (b, sdp);
  json_builder_end_object (b);
  post (b);
}

static void
on_offer_set (GstPromise * promise, gpointer data)
{
  gst_promise_unref (promise);
  g_signal_emit_by_name (data, "create-answer", NULL,
      gst_promise_new_with_change_func (on_answer_created, data, NULL));
}

static GstFlowReturn
on_sample (GstAppSink * sink, gpointer data)
{
  GstSample *s = gst_app_sink_pull_sample (sink);

  if (s) {
    g_atomic_int_inc (&cl.n_frames);
    gst_sample_unref (s);
  }
  return GST_FLOW_OK;
}

static void
on_pad_added (GstElement * webrtc, GstPad * pad, gpointer data)
{
  GstAppSinkCallbacks cb = { 0 };
  GstElement *bin, *sink;
  GstPad *sinkpad;

  if (GST_PAD_DIRECTION (pad) != GST_PAD_SRC)
    return;
  bin = gst_parse_bin_from_description ("queue ! rtpvp8depay ! vp8dec ! "
      "appsink name=frames sync=false", TRUE, NULL);
  sink = gst_bin_get_by_name (GST_BIN (bin), "frames");
  cb.new_sample = on_sample;
  gst_app_sink_set_callbacks (GST_APP_SINK (sink), &cb, NULL, NULL);
  gst_object_unref (sink);
  gst_bin_add (GST_BIN (cl.pipe), bin);
  gst_element_sync_state_with_parent (bin);
  sinkpad = gst_element_get_static_pad (bin, "sink");
  gst_pad_link (pad, sinkpad);
  gst_object_unref (sinkpad);
}

/* the page's iceServers to webrtcbin's stun-server and add-turn-server */
static void
take_ice_servers (JsonObject * welcome)
{
  JsonArray *servers = json_object_has_member (welcome, "ice-servers") ?
      json_object_get_array_member (welcome, "ice-servers") : NULL;
  const char *policy = json_object_get_string_member_with_default (welcome,
      "ice-transport-policy", "all");

  for (guint i = 0; servers && i < json_array_get_length (servers); i++) {
    JsonObject *s = json_array_get_object_element (servers, i);
    JsonNode *urls = json_object_get_member (s, "urls");
    const char *user = json_object_get_string_member_with_default (s,
        "username", NULL);
    const char *cred = json_object_get_string_member_with_default (s,
        "credential", NULL);
    g_autoptr (JsonArray) one = NULL;
    JsonArray *list;

    if (JSON_NODE_HOLDS_ARRAY (urls)) {
      list = json_node_get_array (urls);
    } else {
      one = json_array_new ();
      json_array_add_string_element (one, json_node_get_string (urls));
      list = one;
    }
    for (guint j = 0; j < json_array_get_length (list); j++) {
      const char *u = json_array_get_string_element (list, j);
      const char *colon = strchr (u, ':');
      g_autofree char *scheme = g_strndup (u, colon - u);
      g_autofree char *gst = NULL;
      gboolean ok = FALSE;

      if (strcmp (scheme, "stun") == 0) {
        gst = g_strdup_printf ("stun://%s", colon + 1);
        g_object_set (cl.webrtc, "stun-server", gst, NULL);
      } else if (user && cred) {
        g_autofree char *eu = g_uri_escape_string (user, NULL, FALSE);
        g_autofree char *ec = g_uri_escape_string (cred, NULL, FALSE);

        gst = g_strdup_printf ("%s://%s:%s@%s", scheme, eu, ec, colon + 1);
        g_signal_emit_by_name (cl.webrtc, "add-turn-server", gst, &ok);
        if (!ok)
          g_printerr ("webrtcbin refused the TURN server %s\n", u);
      }
    }
  }
  if (strcmp (policy, "relay") == 0)
    g_object_set (cl.webrtc, "ice-transport-policy",
        GST_WEBRTC_ICE_TRANSPORT_POLICY_RELAY, NULL);
}

/* as the server does (ice_configure()): libnice's UPnP discovery
 * (gupnp-igd) off; its SSDP clients race on a hash table (a GLib
 * critical) and a test's peers need no port mapping */
static void
no_upnp (void)
{
  GstWebRTCICE *ice = NULL;
  GObject *agent = NULL;

  g_object_get (cl.webrtc, "ice-agent", &ice, NULL);
  if (ice && g_object_class_find_property (G_OBJECT_GET_CLASS (ice), "agent"))
    g_object_get (ice, "agent", &agent, NULL);
  if (agent && g_object_class_find_property (G_OBJECT_GET_CLASS (agent),
          "upnp"))
    g_object_set (agent, "upnp", FALSE, NULL);
  g_clear_object (&agent);
  if (ice)
    gst_object_unref (ice);
}

static void
start_pipeline (void)
{
  cl.pipe = gst_pipeline_new ("browser");
  cl.webrtc = gst_element_factory_make ("webrtcbin", "recv");
  g_object_set (cl.webrtc, "bundle-policy",
      GST_WEBRTC_BUNDLE_POLICY_MAX_BUNDLE, NULL);
  gst_bin_add (GST_BIN (cl.pipe), cl.webrtc);
  no_upnp ();
  g_signal_connect (cl.webrtc, "on-ice-candidate",
      G_CALLBACK (on_ice_candidate), NULL);
  g_signal_connect (cl.webrtc, "pad-added", G_CALLBACK (on_pad_added), NULL);
}

/* a stats value's string (candidate-type is a string or an enum) */
static char *
stat_string (const GstStructure * s, const char *field)
{
  const GValue *v = s ? gst_structure_get_value (s, field) : NULL;

  if (v == NULL)
    return g_strdup ("?");
  if (G_VALUE_HOLDS_STRING (v))
    return g_value_dup_string (v);
  return gst_value_serialize (v);
}

static const GstStructure *
stats_by_id (const GstStructure * stats, const char *id)
{
  const GValue *v = id ? gst_structure_get_value (stats, id) : NULL;

  return v && GST_VALUE_HOLDS_STRUCTURE (v) ? gst_value_get_structure (v) :
      NULL;
}

static gboolean
find_pair (GQuark field, const GValue * value, gpointer data)
{
  char **pair_id = data;
  const GstStructure *s;

  if (*pair_id || !GST_VALUE_HOLDS_STRUCTURE (value))
    return TRUE;
  s = gst_value_get_structure (value);
  if (gst_structure_has_field (s, "selected-candidate-pair-id"))
    *pair_id = g_strdup (gst_structure_get_string (s,
            "selected-candidate-pair-id"));
  return TRUE;
}

/* prints the selected pair; TRUE when one of its candidates is a relay
 * (ours, or the server's reached from our server-reflexive address) */
static gboolean
report_pair (void)
{
  GstPromise *promise = gst_promise_new ();
  const GstStructure *stats, *pair;
  g_autofree char *pair_id = NULL;
  g_autofree char *local = NULL;
  g_autofree char *remote = NULL;

  g_signal_emit_by_name (cl.webrtc, "get-stats", NULL, promise);
  if (gst_promise_wait (promise) != GST_PROMISE_RESULT_REPLIED) {
    gst_promise_unref (promise);
    printf ("pair local=? remote=?\n");
    return FALSE;
  }
  stats = gst_promise_get_reply (promise);
  gst_structure_foreach (stats, find_pair, &pair_id);
  pair = stats_by_id (stats, pair_id);
  local = stat_string (stats_by_id (stats, pair ?
          gst_structure_get_string (pair, "local-candidate-id") : NULL),
      "candidate-type");
  remote = stat_string (stats_by_id (stats, pair ?
          gst_structure_get_string (pair, "remote-candidate-id") : NULL),
      "candidate-type");
  gst_promise_unref (promise);
  printf ("pair local=%s remote=%s\n", local, remote);
  fflush (stdout);
  return strcmp (local, "relay") == 0 || strcmp (remote, "relay") == 0;
}

static void
client_drop (void)
{
  if (cl.poll)
    g_source_remove (cl.poll);
  cl.poll = 0;
  if (cl.ws) {
    g_signal_handlers_disconnect_matched (cl.ws, G_SIGNAL_MATCH_DATA, 0, 0,
        NULL, NULL, &cl);
    if (soup_websocket_connection_get_state (cl.ws) ==
        SOUP_WEBSOCKET_STATE_OPEN)
      soup_websocket_connection_close (cl.ws, SOUP_WEBSOCKET_CLOSE_NORMAL,
          NULL);
    g_clear_object (&cl.ws);
  }
  if (cl.pipe) {
    gst_element_set_state (cl.pipe, GST_STATE_NULL);
    g_clear_object (&cl.pipe);
    cl.webrtc = NULL;
  }
  g_clear_object (&cl.http);
  g_atomic_int_set (&cl.n_frames, 0);
  cl.reported = FALSE;
}

static gboolean
on_held (gpointer data)
{
  finish (0, NULL);
  return G_SOURCE_REMOVE;
}

static gboolean
on_poll (gpointer data)
{
  gint n = g_atomic_int_get (&cl.n_frames);
  g_autofree char *token = NULL;

  if (n < want_frames || cl.reported)
    return G_SOURCE_CONTINUE;
  cl.reported = TRUE;
  printf ("frames %d\n", n);
  if (!report_pair () && expect_relay) {
    finish (1, "FAIL: the selected candidate pair is not relayed");
    return G_SOURCE_CONTINUE;
  }
  if (reload && round_no == 0) {
    token = g_strdup (cl.token);
    cl.poll = 0;
    client_drop ();
    round_no++;
    client_connect (token);
    return G_SOURCE_REMOVE;
  }
  if (hold_s > 0)
    g_timeout_add_seconds (hold_s, on_held, NULL);
  else
    finish (0, NULL);
  return G_SOURCE_CONTINUE;
}

static void
on_ws_message (SoupWebsocketConnection * ws, gint type, GBytes * message,
    gpointer data)
{
  g_autoptr (JsonParser) parser = json_parser_new ();
  gsize len;
  const char *text = g_bytes_get_data (message, &len);
  JsonObject *o;
  const char *kind;

  if (!json_parser_load_from_data (parser, text, (gssize) len, NULL))
    return;
  o = json_node_get_object (json_parser_get_root (parser));
  kind = json_object_get_string_member_with_default (o, "type", "");
  if (strcmp (kind, "welcome") == 0) {
    g_free (cl.token);
    cl.token = g_strdup (json_object_get_string_member (o, "resume"));
    printf ("welcome session=%" G_GINT64_FORMAT " peer=%" G_GINT64_FORMAT
        " resumed=%d server=%s\n", json_object_get_int_member (o, "session"),
        json_object_get_int_member (o, "peer"),
        json_object_get_boolean_member (o, "resumed"),
        json_object_get_string_member_with_default (o, "server", "-"));
    fflush (stdout);
    start_pipeline ();
    take_ice_servers (o);
    gst_element_set_state (cl.pipe, GST_STATE_PLAYING);
    cl.poll = g_timeout_add (50, on_poll, NULL);
  } else if (strcmp (kind, "error") == 0
      && json_object_get_boolean_member_with_default (o, "fatal", FALSE)) {
    const char *code = json_object_get_string_member (o, "code");
    const char *msg = json_object_get_string_member (o, "message");

    if (strcmp (code, "busy") == 0)
      finish (3, "busy: %s", msg);
    else
      finish (1, "error %s: %s", code, msg);
  } else if (strcmp (kind, "offer") == 0 && cl.webrtc) {
    GstSDPMessage *sdp = NULL;
    GstWebRTCSessionDescription *offer;

    if (gst_sdp_message_new_from_text (json_object_get_string_member (o,
                "sdp"), &sdp) != GST_SDP_OK)
      return;
    offer = gst_webrtc_session_description_new (GST_WEBRTC_SDP_TYPE_OFFER, sdp);
    g_signal_emit_by_name (cl.webrtc, "set-remote-description", offer,
        gst_promise_new_with_change_func (on_offer_set, cl.webrtc, NULL));
    gst_webrtc_session_description_free (offer);
  } else if (strcmp (kind, "ice") == 0 && cl.webrtc) {
    g_signal_emit_by_name (cl.webrtc, "add-ice-candidate",
        (guint) json_object_get_int_member (o, "sdpMLineIndex"),
        json_object_get_string_member (o, "candidate"));
  }
}

static void
on_ws_closed (SoupWebsocketConnection * ws, gpointer data)
{
  finish (1, "FAIL: the server closed the WebSocket (%u)",
      soup_websocket_connection_get_close_code (ws));
}

static void
on_ws_connected (GObject * session, GAsyncResult * res, gpointer data)
{
  g_autoptr (GError) err = NULL;

  cl.ws = soup_session_websocket_connect_finish (SOUP_SESSION (session), res,
      &err);
  if (cl.ws == NULL) {
    finish (1, "FAIL: WebSocket %s: %s", url, err->message);
    return;
  }
  soup_websocket_connection_set_max_incoming_payload_size (cl.ws, 1 << 20);
  g_signal_connect (cl.ws, "message", G_CALLBACK (on_ws_message), &cl);
  g_signal_connect (cl.ws, "closed", G_CALLBACK (on_ws_closed), &cl);
}

static void
client_connect (const char *token)
{
  g_autofree char *u = token ? g_strdup_printf ("%s?resume=%s", url, token) :
      g_strdup (url);
  g_autoptr (SoupMessage) msg = soup_message_new ("GET", u);

  if (msg == NULL) {
    finish (1, "FAIL: not a URL: %s", u);
    return;
  }
  cl.http = soup_session_new ();
  soup_session_websocket_connect_async (cl.http, msg, NULL, NULL,
      G_PRIORITY_DEFAULT, NULL, on_ws_connected, NULL);
}

static gboolean
on_timeout (gpointer data)
{
  finish (1, "FAIL: %d frames (of %d) within %d s", g_atomic_int_get
      (&cl.n_frames), want_frames, timeout_s);
  return G_SOURCE_REMOVE;
}

int
main (int argc, char **argv)
{
  g_autoptr (GOptionContext) opts = NULL;
  g_autoptr (GError) err = NULL;
  GOptionEntry entries[] = {
    {"frames", 'n', 0, G_OPTION_ARG_INT, &want_frames,
        "Frames to receive (default 10)", "N"},
    {"timeout", 't', 0, G_OPTION_ARG_INT, &timeout_s,
        "Give up after this long (default 30)", "S"},
    {"hold", 0, 0, G_OPTION_ARG_INT, &hold_s,
        "Keep the session this long after the frames", "S"},
    {"reload", 0, 0, G_OPTION_ARG_NONE, &reload,
        "Then reconnect with the resume token, as a reload", NULL},
    {"expect-relay", 0, 0, G_OPTION_ARG_NONE, &expect_relay,
        "Fail unless a candidate of the selected pair is a relay", NULL},
    {NULL}
  };

  opts = g_option_context_new ("ws://HOST:PORT/ws");
  g_option_context_add_main_entries (opts, entries, NULL);
  g_option_context_add_group (opts, gst_init_get_option_group ());
  if (!g_option_context_parse (opts, &argc, &argv, &err) || argc != 2) {
    g_printerr ("%s\n", err ? err->message : "one URL is needed");
    return 2;
  }
  url = argv[1];
  loop = g_main_loop_new (NULL, FALSE);
  client_connect (NULL);
  g_timeout_add_seconds (timeout_s, on_timeout, NULL);
  g_main_loop_run (loop);
  client_drop ();
  g_free (cl.token);
  g_main_loop_unref (loop);
  return exit_code;
}

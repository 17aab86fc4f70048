/* lingbot-gst: the WebRTC sender (suite webrtc)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The server of examples/webrtc runs in a thread of this process on
 * 127.0.0.1 (any free port), with lingbotcontrolsrc ! lingbotbin on a tiny
 * random model (64x64, cpu:1).  The test thread is the browser: a libsoup
 * WebSocket client and a receiving webrtcbin (ICE on 127.0.0.1 only) that
 * answers the server's offer, decodes the VP8 video, sends key events on
 * the "input" data channel and reads chunk metrics and key echoes on
 * "control".  Also: a second concurrent session is refused, malformed /
 * oversized / unknown messages are survived, the page cannot be escaped.
 *
 * Every wait is bounded (TEST_TIMEOUT_S).  Exit 77 when webrtcbin, libnice
 * or VP8 are not installed.
 */
#define GST_USE_UNSTABLE_API 1

#include "test-fixture.h"
#include <string.h>
#include <glib/gstdio.h>
#include <gio/gio.h>
#include <gst/gst.h>
#include <gst/app/gstappsink.h>
#include <gst/sdp/sdp.h>
#include <gst/video/video.h>
#include <gst/webrtc/webrtc.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>

#include "lingbot/lingbot.h"
#include "lingbot/text-encoder.h"
#include "webrtc-server.h"

#define TEST_TIMEOUT_S 80
#define TEST_MAX_MESSAGE 4096
#define SIZE 64

/* ---- fixture: a tiny random model ---- */

static char *tmpdir, *model_dir, *embeds_path, *image_path;

static void
write_fixture (void)
{
  g_autoptr (GError) err = NULL;

  tmpdir = g_dir_make_tmp ("lingbot-webrtc-XXXXXX", &err);
  g_assert_no_error (err);
  model_dir = lingbot_test_write_model (tmpdir);
  embeds_path = lingbot_test_write_prompt_embeds (tmpdir, "a castle");
  image_path = lingbot_test_write_start_jpeg (tmpdir);
}


/* ---- the server, in its own thread and main context ---- */

typedef struct
{
  GMutex lock;
  GCond cond;
  GMainContext *context;
  GMainLoop *loop;
  LingbotWebrtcServer *server;
  guint port;
  gboolean ready;
  char *error;
} ServerThread;

static ServerThread srv;

static gpointer
server_thread (gpointer data)
{
  g_autoptr (GError) err = NULL;
  const char *props[] = { "width=64", "height=64", "seed=7", NULL };
  LingbotWebrtcConfig cfg;
  LingbotWebrtcServer *server;

  g_main_context_push_thread_default (srv.context);
  lingbot_webrtc_config_init (&cfg);
  cfg.port = 0;
  cfg.www_dir = g_getenv ("LINGBOT_WEBRTC_WWW");
  cfg.model = model_dir;
  cfg.image = image_path;
  cfg.prompt_embeds = embeds_path;
  cfg.devices = "cpu:1";
  cfg.gen_props = props;
  cfg.max_message_size = TEST_MAX_MESSAGE;
  server = lingbot_webrtc_server_new (&cfg, &err);

  g_mutex_lock (&srv.lock);
  srv.server = server;
  srv.port = server ? lingbot_webrtc_server_get_port (server) : 0;
  srv.error = err ? g_strdup (err->message) : NULL;
  srv.ready = TRUE;
  g_cond_signal (&srv.cond);
  g_mutex_unlock (&srv.lock);

  if (server)
    g_main_loop_run (srv.loop);
  lingbot_webrtc_server_free (server);
  g_main_context_pop_thread_default (srv.context);
  return NULL;
}

/* ---- HTTP: the page and path traversal ---- */

static guint
raw_get (const char *path, char **body)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (GSocketClient) client = g_socket_client_new ();
  g_autoptr (GSocketConnection) conn = NULL;
  g_autofree char *req = NULL;
  GString *resp = g_string_new (NULL);
  char buf[4096];
  gssize n;
  guint status = 0;

  g_socket_client_set_timeout (client, 10);
  conn = g_socket_client_connect_to_host (client, "127.0.0.1", srv.port,
      NULL, &err);
  g_assert_no_error (err);
  req = g_strdup_printf ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Connection: close\r\n\r\n", path);
  g_assert_true (g_output_stream_write_all (g_io_stream_get_output_stream
          (G_IO_STREAM (conn)), req, strlen (req), NULL, NULL, &err));
  g_assert_no_error (err);
  while ((n = g_input_stream_read (g_io_stream_get_input_stream (G_IO_STREAM
                  (conn)), buf, sizeof buf, NULL, NULL)) > 0)
    g_string_append_len (resp, buf, n);
  if (g_str_has_prefix (resp->str, "HTTP/1.1 "))
    status = (guint) g_ascii_strtoull (resp->str + 9, NULL, 10);
  if (body)
    *body = g_strdup (resp->str);
  g_string_free (resp, TRUE);
  return status;
}

static void
test_http (void)
{
  const char *escapes[] = {
    "/../meson.build", "/../../meson.build", "/%2e%2e/meson.build",
    "/%2E%2E/%2e%2e/meson.build", "/..%2fmeson.build", "/%2e%2e%2fmeson.build",
    "/.%2e/.%2e/meson.build", "/%252e%252e/meson.build",
    "/..%5cmeson.build", "/%00", "/index.html%00.js", "/./../meson.build",
    "//etc/passwd", "/%2fetc%2fpasswd",
  };
  /* normalised to "/" by the URI parser: the page itself, nothing above */
  const char *to_root[] = { "/..", "/%2e%2e", "/.%2e/", "/a/%2e%2e/.." };
  g_autofree char *body = NULL;
  guint status;
  char *p;

  status = raw_get ("/", &body);
  g_assert_cmpuint (status, ==, 200);
  g_assert_nonnull (strstr (body, "<video"));
  g_clear_pointer (&body, g_free);
  g_assert_cmpuint (raw_get ("/app.js", NULL), ==, 200);
  g_assert_cmpuint (raw_get ("/style.css", NULL), ==, 200);
  g_assert_cmpuint (raw_get ("/nothere.html", NULL), ==, 404);

  for (guint i = 0; i < G_N_ELEMENTS (escapes); i++) {
    status = raw_get (escapes[i], &body);
    g_test_message ("GET %s -> %u", escapes[i], status);
    g_assert_true (status == 403 || status == 404 || status == 400);
    g_assert_null (strstr (body, "project('lingbot-gst'"));
    g_assert_null (strstr (body, "root:"));
    g_clear_pointer (&body, g_free);
  }

  for (guint i = 0; i < G_N_ELEMENTS (to_root); i++) {
    status = raw_get (to_root[i], &body);
    g_test_message ("GET %s -> %u", to_root[i], status);
    g_assert_true (status == 403 || status == 404 || status == 400
        || (status == 200 && strstr (body, "<video") != NULL));
    g_clear_pointer (&body, g_free);
  }

  /* the resolver itself */
  p = lingbot_webrtc_resolve_path (g_getenv ("LINGBOT_WEBRTC_WWW"),
      "/%2e%2e/meson.build", &status);
  g_assert_null (p);
  g_assert_cmpuint (status, ==, 403);
  p = lingbot_webrtc_resolve_path (g_getenv ("LINGBOT_WEBRTC_WWW"),
      "/a/../../x", &status);
  g_assert_null (p);
  g_assert_cmpuint (status, ==, 403);
  p = lingbot_webrtc_resolve_path (g_getenv ("LINGBOT_WEBRTC_WWW"), "/",
      &status);
  g_assert_nonnull (p);
  g_assert_true (g_str_has_suffix (p, "/index.html"));
  g_free (p);
}

/* ---- the browser: WebSocket + receiving webrtcbin ---- */

typedef struct
{
  SoupSession *http;
  SoupWebsocketConnection *ws;
  GstElement *pipe;
  GstElement *webrtc;
  GstWebRTCDataChannel *input, *control;
  gboolean welcome;
  char *error_code;
  gboolean closed;
  guint n_frames;
  int width, height;
  guint n_chunks;
  gint64 echo_chunk[4];         /* by key id, -1 until echoed */
  char *echo_key[4];
  gboolean ice_connected;
} Peer;

static void
peer_send (Peer * p, const char *text)
{
  if (p->ws && soup_websocket_connection_get_state (p->ws) ==
      SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_send_text (p->ws, text);
}

typedef struct
{
  Peer *p;
  char *text;
  gboolean control;             /* a control-channel message */
} PeerMsg;

static gboolean
peer_msg_run (gpointer data)
{
  PeerMsg *m = data;

  if (!m->control) {
    peer_send (m->p, m->text);
  } else {
    g_autoptr (JsonParser) parser = json_parser_new ();
    JsonObject *o;
    const char *type;

    g_assert_true (json_parser_load_from_data (parser, m->text, -1, NULL));
    o = json_node_get_object (json_parser_get_root (parser));
    type = json_object_get_string_member (o, "type");
    if (strcmp (type, "chunk") == 0) {
      g_assert_cmpint (json_object_get_int_member (o, "index"), ==,
          m->p->n_chunks);
      g_assert_cmpint (json_object_get_int_member (o, "frames"), ==,
          m->p->n_chunks == 0 ? 13 : 16);
      g_assert_cmpfloat (json_object_get_double_member (o, "compute-fps"), >,
          0.0);
      m->p->n_chunks++;
    } else if (strcmp (type, "key-echo") == 0) {
      gint64 id = json_object_get_int_member (o, "id");

      g_assert_true (id >= 0 && id < 4);
      g_assert_cmpint (m->p->echo_chunk[id], ==, -1);
      m->p->echo_chunk[id] = json_object_get_int_member (o, "chunk");
      m->p->echo_key[id] = g_strdup (json_object_get_string_member (o,
              "key"));
      g_assert_cmpint (json_object_get_int_member (o, "first-frame"), >=, 0);
      g_assert_cmpfloat (json_object_get_double_member (o, "server-ms"), >=,
          0.0);
    }
    g_test_message ("control: %s", m->text);
  }
  g_free (m->text);
  g_free (m);
  return G_SOURCE_REMOVE;
}

static void
post (Peer * p, char *text, gboolean control)
{
  PeerMsg *m = g_new0 (PeerMsg, 1);

  m->p = p;
  m->text = text;
  m->control = control;
  g_idle_add (peer_msg_run, m);
}

static char *
ice_json (guint mline, const char *candidate)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autoptr (JsonNode) root = NULL;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, "ice");
  json_builder_set_member_name (b, "candidate");
  json_builder_add_string_value (b, candidate);
  json_builder_set_member_name (b, "sdpMLineIndex");
  json_builder_add_int_value (b, mline);
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  return json_to_string (root, FALSE);
}

static void
on_ice_candidate (GstElement * webrtc, guint mline, const char *candidate,
    Peer * p)
{
  post (p, ice_json (mline, candidate), FALSE);
}

static void
on_answer_created (GstPromise * promise, gpointer data)
{
  Peer *p = data;
  GstWebRTCSessionDescription *answer = NULL;
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autoptr (JsonNode) root = NULL;
  g_autofree char *sdp = NULL;

  g_assert_cmpint (gst_promise_wait (promise), ==, GST_PROMISE_RESULT_REPLIED);
  gst_structure_get (gst_promise_get_reply (promise), "answer",
      GST_TYPE_WEBRTC_SESSION_DESCRIPTION, &answer, NULL);
  gst_promise_unref (promise);
  g_assert_nonnull (answer);
  g_signal_emit_by_name (p->webrtc, "set-local-description", answer, NULL);
  sdp = gst_sdp_message_as_text (answer->sdp);
  gst_webrtc_session_description_free (answer);

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, "answer");
  json_builder_set_member_name (b, "sdp");
  json_builder_add_string_value (b, sdp);
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  post (p, json_to_string (root, FALSE), FALSE);
}

static void
on_offer_set (GstPromise * promise, gpointer data)
{
  Peer *p = data;

  gst_promise_unref (promise);
  g_signal_emit_by_name (p->webrtc, "create-answer", NULL,
      gst_promise_new_with_change_func (on_answer_created, p, NULL));
}

static void
on_control_message (GstWebRTCDataChannel * ch, const char *text, Peer * p)
{
  post (p, g_strdup (text), TRUE);
}

static void
on_data_channel (GstElement * webrtc, GstWebRTCDataChannel * ch, Peer * p)
{
  g_autofree char *label = NULL;

  g_object_get (ch, "label", &label, NULL);
  g_test_message ("data channel %s", label);
  if (strcmp (label, "input") == 0) {
    p->input = g_object_ref (ch);
  } else if (strcmp (label, "control") == 0) {
    p->control = g_object_ref (ch);
    g_signal_connect (ch, "on-message-string",
        G_CALLBACK (on_control_message), p);
  }
}

static void
on_ice_state (GObject * webrtc, GParamSpec * pspec, Peer * p)
{
  GstWebRTCICEConnectionState st;

  g_object_get (webrtc, "ice-connection-state", &st, NULL);
  if (st == GST_WEBRTC_ICE_CONNECTION_STATE_CONNECTED
      || st == GST_WEBRTC_ICE_CONNECTION_STATE_COMPLETED)
    p->ice_connected = TRUE;
}

static GstFlowReturn
on_sample (GstAppSink * sink, gpointer data)
{
  Peer *p = data;
  GstSample *s = gst_app_sink_pull_sample (sink);
  GstVideoInfo info;

  if (s && gst_video_info_from_caps (&info, gst_sample_get_caps (s))) {
    g_atomic_int_set (&p->width, info.width);
    g_atomic_int_set (&p->height, info.height);
    g_atomic_int_inc (&p->n_frames);
  }
  if (s)
    gst_sample_unref (s);
  return GST_FLOW_OK;
}

static void
on_pad_added (GstElement * webrtc, GstPad * pad, Peer * p)
{
  GError *err = NULL;
  GstElement *bin;
  GstElement *sink;
  GstPad *sinkpad;
  GstAppSinkCallbacks cb = { 0 };

  if (GST_PAD_DIRECTION (pad) != GST_PAD_SRC)
    return;
  cb.new_sample = on_sample;
  bin = gst_parse_bin_from_description ("queue ! rtpvp8depay ! vp8dec ! "
      "videoconvert ! video/x-raw,format=I420 ! appsink name=frames "
      "sync=false", TRUE, &err);
  g_assert_no_error (err);
  sink = gst_bin_get_by_name (GST_BIN (bin), "frames");
  gst_app_sink_set_callbacks (GST_APP_SINK (sink), &cb, p, NULL);
  gst_object_unref (sink);
  gst_bin_add (GST_BIN (p->pipe), bin);
  gst_element_sync_state_with_parent (bin);
  sinkpad = gst_element_get_static_pad (bin, "sink");
  g_assert_cmpint (gst_pad_link (pad, sinkpad), ==, GST_PAD_LINK_OK);
  gst_object_unref (sinkpad);
}

static void
on_ws_message (SoupWebsocketConnection * ws, gint type, GBytes * message,
    Peer * p)
{
  g_autoptr (JsonParser) parser = json_parser_new ();
  gsize len;
  const char *data = g_bytes_get_data (message, &len);
  JsonObject *o;
  const char *kind;

  g_assert_true (json_parser_load_from_data (parser, data, (gssize) len,
          NULL));
  o = json_node_get_object (json_parser_get_root (parser));
  kind = json_object_get_string_member (o, "type");
  if (strcmp (kind, "welcome") == 0) {
    p->welcome = TRUE;
  } else if (strcmp (kind, "error") == 0) {
    g_test_message ("ws error: %.*s", (int) len, data);
    g_free (p->error_code);
    p->error_code = g_strdup (json_object_get_string_member (o, "code"));
  } else if (strcmp (kind, "offer") == 0) {
    GstSDPMessage *sdp = NULL;
    GstWebRTCSessionDescription *offer;

    g_assert_cmpint (gst_sdp_message_new_from_text
        (json_object_get_string_member (o, "sdp"), &sdp), ==, GST_SDP_OK);
    offer = gst_webrtc_session_description_new (GST_WEBRTC_SDP_TYPE_OFFER,
        sdp);
    g_signal_emit_by_name (p->webrtc, "set-remote-description", offer,
        gst_promise_new_with_change_func (on_offer_set, p, NULL));
    gst_webrtc_session_description_free (offer);
  } else if (strcmp (kind, "ice") == 0) {
    g_signal_emit_by_name (p->webrtc, "add-ice-candidate",
        (guint) json_object_get_int_member (o, "sdpMLineIndex"),
        json_object_get_string_member (o, "candidate"));
  }
}

static void
on_ws_closed (SoupWebsocketConnection * ws, Peer * p)
{
  p->closed = TRUE;
}

static void
on_ws_connected (GObject * session, GAsyncResult * res, gpointer data)
{
  Peer *p = data;
  g_autoptr (GError) err = NULL;

  p->ws = soup_session_websocket_connect_finish (SOUP_SESSION (session), res,
      &err);
  g_assert_no_error (err);
  soup_websocket_connection_set_max_incoming_payload_size (p->ws, 1 << 20);
  g_signal_connect (p->ws, "message", G_CALLBACK (on_ws_message), p);
  g_signal_connect (p->ws, "closed", G_CALLBACK (on_ws_closed), p);
}

static void
peer_start (Peer * p, gboolean media)
{
  g_autofree char *url = g_strdup_printf ("ws://127.0.0.1:%u/ws", srv.port);
  g_autoptr (SoupMessage) msg = soup_message_new ("GET", url);

  for (guint i = 0; i < G_N_ELEMENTS (p->echo_chunk); i++)
    p->echo_chunk[i] = -1;
  p->http = soup_session_new ();
  if (media) {
    GstWebRTCICE *ice = NULL;
    gboolean ok = FALSE;

    p->pipe = gst_pipeline_new ("browser");
    p->webrtc = gst_element_factory_make ("webrtcbin", "recv");
    g_object_set (p->webrtc, "bundle-policy",
        GST_WEBRTC_BUNDLE_POLICY_MAX_BUNDLE, NULL);
    gst_bin_add (GST_BIN (p->pipe), p->webrtc);
    g_object_get (p->webrtc, "ice-agent", &ice, NULL);
    g_signal_emit_by_name (ice, "add-local-ip-address", "127.0.0.1", &ok);
    g_assert_true (ok);
    gst_object_unref (ice);
    g_signal_connect (p->webrtc, "on-ice-candidate",
        G_CALLBACK (on_ice_candidate), p);
    g_signal_connect (p->webrtc, "on-data-channel",
        G_CALLBACK (on_data_channel), p);
    g_signal_connect (p->webrtc, "pad-added", G_CALLBACK (on_pad_added), p);
    g_signal_connect (p->webrtc, "notify::ice-connection-state",
        G_CALLBACK (on_ice_state), p);
    g_assert_cmpint (gst_element_set_state (p->pipe, GST_STATE_PLAYING), !=,
        GST_STATE_CHANGE_FAILURE);
  }
  soup_session_websocket_connect_async (p->http, msg, NULL, NULL,
      G_PRIORITY_DEFAULT, NULL, on_ws_connected, p);
}

static void
peer_stop (Peer * p)
{
  if (p->ws) {
    if (soup_websocket_connection_get_state (p->ws) ==
        SOUP_WEBSOCKET_STATE_OPEN)
      soup_websocket_connection_close (p->ws, SOUP_WEBSOCKET_CLOSE_NORMAL,
          NULL);
    g_signal_handlers_disconnect_by_data (p->ws, p);
    g_clear_object (&p->ws);
  }
  if (p->pipe) {
    gst_element_set_state (p->pipe, GST_STATE_NULL);
    g_clear_object (&p->pipe);
  }
  g_clear_object (&p->input);
  g_clear_object (&p->control);
  g_clear_object (&p->http);
  g_clear_pointer (&p->error_code, g_free);
  for (guint i = 0; i < G_N_ELEMENTS (p->echo_key); i++)
    g_clear_pointer (&p->echo_key[i], g_free);
}

static gint64 deadline;

/* run the default context until cond() or the deadline */
static gboolean
wait_for (gboolean (*cond) (Peer *), Peer * p, const char *what)
{
  while (!cond (p)) {
    if (g_get_monotonic_time () > deadline) {
      g_test_message ("timed out waiting for %s", what);
      return FALSE;
    }
    g_main_context_iteration (NULL, FALSE);
    g_usleep (2000);
  }
  return TRUE;
}

static gboolean
has_welcome_or_error (Peer * p)
{
  return p->welcome || p->error_code != NULL;
}

static gboolean
is_closed (Peer * p)
{
  return p->closed;
}

static gboolean
channels_open (Peer * p)
{
  GstWebRTCDataChannelState a = 0, b = 0;

  if (!p->input || !p->control || !p->ice_connected)
    return FALSE;
  g_object_get (p->input, "ready-state", &a, NULL);
  g_object_get (p->control, "ready-state", &b, NULL);
  return a == GST_WEBRTC_DATA_CHANNEL_STATE_OPEN
      && b == GST_WEBRTC_DATA_CHANNEL_STATE_OPEN;
}

static gboolean
echo1 (Peer * p)
{
  return p->echo_chunk[1] >= 0;
}

static gboolean
echo2 (Peer * p)
{
  return p->echo_chunk[2] >= 0;
}

static gboolean
first_chunk_frames (Peer * p)
{
  return g_atomic_int_get (&p->n_frames) >= 13;
}

static void
send_garbage (Peer * p)
{
  GString *big = g_string_new ("{\"event\":\"KeyPress\",\"key\":\"");
  guint dropped_before = lingbot_webrtc_server_get_n_dropped (srv.server);
  const char *bad[] = {
    "{not json", "[1,2,3]", "42", "{\"event\":\"Bogus\",\"key\":\"a\"}",
    "{\"event\":\"KeyPress\"}", "{\"event\":\"KeyPress\",\"key\":7}",
    "{\"id\":5,\"request\":{\"type\":\"customUpstreamEvent\"}}",
  };
  const char *bad_ws[] = {
    "{not json", "[]", "{\"type\":\"bogus\"}", "{\"type\":\"ice\"}",
    "{\"type\":\"answer\",\"sdp\":\"garbage\"}", "\"just a string\"",
  };
  guint expected = 0;
  guint mdns_before = lingbot_webrtc_server_get_n_mdns_ignored (srv.server);
  g_autofree char *mdns = ice_json (0, "candidate:2712353452 1 udp 2122260223 "
      "8c5e1b0e-5b1a-4f4e-9d0c-1f2e3d4c5b6a.local 51234 typ host generation 0 "
      "ufrag abcd network-id 1");

  /* a browser's mDNS host candidate: ignored, not dropped (first, so that
   * the dropped count below would see it) */
  peer_send (p, mdns);

  while (big->len < TEST_MAX_MESSAGE + 100)
    g_string_append_c (big, 'x');
  g_string_append (big, "\"}");

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++, expected++)
    gst_webrtc_data_channel_send_string (p->input, bad[i]);
  gst_webrtc_data_channel_send_string (p->input, big->str);
  expected++;
  gst_webrtc_data_channel_send_string (p->control, "{\"type\":\"hello\"}");
  expected++;
  for (guint i = 0; i < G_N_ELEMENTS (bad_ws); i++, expected++)
    peer_send (p, bad_ws[i]);
  peer_send (p, big->str);
  expected++;
  soup_websocket_connection_send_binary (p->ws, "\x01\x02", 2);
  expected++;
  g_string_free (big, TRUE);

  /* all of them are dropped (and counted) by the server */
  while (lingbot_webrtc_server_get_n_dropped (srv.server) - dropped_before <
      expected && g_get_monotonic_time () < deadline) {
    g_main_context_iteration (NULL, FALSE);
    g_usleep (2000);
  }
  g_assert_cmpuint (lingbot_webrtc_server_get_n_dropped (srv.server) -
      dropped_before, ==, expected);
  g_assert_cmpuint (lingbot_webrtc_server_get_n_mdns_ignored (srv.server) -
      mdns_before, ==, 1);
}

static void
test_session (void)
{
  Peer p = { 0 }, busy = { 0 }, again = { 0 };

  deadline = g_get_monotonic_time () + TEST_TIMEOUT_S * G_USEC_PER_SEC;

  peer_start (&p, TRUE);
  g_assert_true (wait_for (has_welcome_or_error, &p, "welcome"));
  g_assert_null (p.error_code);

  /* a second concurrent session is refused with a message, then closed */
  peer_start (&busy, FALSE);
  g_assert_true (wait_for (has_welcome_or_error, &busy, "refusal"));
  g_assert_false (busy.welcome);
  g_assert_cmpstr (busy.error_code, ==, "busy");
  g_assert_true (wait_for (is_closed, &busy, "refused close"));
  g_assert_cmpint (soup_websocket_connection_get_close_code (busy.ws), ==,
      LINGBOT_WEBRTC_CLOSE_BUSY);
  peer_stop (&busy);

  g_assert_true (wait_for (channels_open, &p, "ICE + data channels"));
  send_garbage (&p);
  g_assert_null (p.error_code);

  /* a key press with an id: echoed with the chunk that used it */
  gst_webrtc_data_channel_send_string (p.input,
      "{\"event\":\"KeyPress\",\"key\":\"ArrowUp\",\"modifier_state\":\"\","
      "\"id\":1}");
  g_assert_true (wait_for (echo1, &p, "key echo 1"));
  g_assert_cmpint (p.echo_chunk[1], ==, 0);
  g_assert_cmpstr (p.echo_key[1], ==, "ArrowUp");
  g_assert_true (wait_for (first_chunk_frames, &p, "13 frames"));
  gst_webrtc_data_channel_send_string (p.input,
      "{\"event\":\"KeyRelease\",\"key\":\"ArrowUp\",\"modifier_state\":\"\"}");

  /* gstwebrtc-api's form on "control", X keysym name */
  gst_webrtc_data_channel_send_string (p.control,
      "{\"id\":2,\"request\":{\"type\":\"navigationEvent\",\"event\":"
      "{\"event\":\"KeyPress\",\"key\":\"Right\",\"modifier_state\":\"\"}}}");
  g_assert_true (wait_for (echo2, &p, "key echo 2"));
  g_assert_cmpint (p.echo_chunk[2], >=, 1);
  g_assert_cmpstr (p.echo_key[2], ==, "ArrowRight");
  gst_webrtc_data_channel_send_string (p.input,
      "{\"event\":\"KeyRelease\",\"key\":\"Right\"}");

  g_assert_cmpint (g_atomic_int_get (&p.width), ==, SIZE);
  g_assert_cmpint (g_atomic_int_get (&p.height), ==, SIZE);
  g_assert_cmpuint (p.n_chunks, >=, 2);
  g_test_message ("frames decoded %u, chunks %u, echoes at chunks %"
      G_GINT64_FORMAT " and %" G_GINT64_FORMAT, g_atomic_int_get (&p.n_frames),
      p.n_chunks, p.echo_chunk[1], p.echo_chunk[2]);
  g_assert_null (p.error_code);
  g_assert_false (p.closed);

  /* closing the page ends the session and frees the slot */
  peer_stop (&p);
  peer_start (&again, FALSE);
  while (g_get_monotonic_time () < deadline) {
    g_main_context_iteration (NULL, FALSE);
    if (again.welcome)
      break;
    if (again.error_code) {
      /* the first session may still be closing: retry */
      peer_stop (&again);
      memset (&again, 0, sizeof again);
      g_usleep (100000);
      peer_start (&again, FALSE);
    }
    g_usleep (2000);
  }
  g_assert_true (again.welcome);
  peer_stop (&again);
}

int
main (int argc, char **argv)
{
  const char *needed[] = { "webrtcbin", "nicesrc", "nicesink", "dtlssrtpenc",
    "sctpenc", "vp8enc", "vp8dec", "rtpvp8pay", "rtpvp8depay", "jpegenc",
    "lingbotcontrolsrc", "lingbotbin", NULL
  };
  GThread *thread;
  int ret;

  g_test_init (&argc, &argv, NULL);
  gst_init (&argc, &argv);
  for (guint i = 0; needed[i]; i++) {
    GstElementFactory *f = gst_element_factory_find (needed[i]);
    if (f == NULL) {
      g_print ("SKIP: GStreamer element %s is not installed\n", needed[i]);
      return 77;
    }
    gst_object_unref (f);
  }
  if (g_getenv ("LINGBOT_WEBRTC_WWW") == NULL) {
    g_print ("SKIP: LINGBOT_WEBRTC_WWW is not set\n");
    return 77;
  }

  write_fixture ();
  g_mutex_init (&srv.lock);
  g_cond_init (&srv.cond);
  srv.context = g_main_context_new ();
  srv.loop = g_main_loop_new (srv.context, FALSE);
  thread = g_thread_new ("server", server_thread, NULL);
  g_mutex_lock (&srv.lock);
  while (!srv.ready)
    g_cond_wait (&srv.cond, &srv.lock);
  g_mutex_unlock (&srv.lock);
  if (srv.server == NULL)
    g_error ("server: %s", srv.error);

  g_test_add_func ("/webrtc/http", test_http);
  g_test_add_func ("/webrtc/session", test_session);
  ret = g_test_run ();

  g_main_loop_quit (srv.loop);
  g_thread_join (thread);
  g_main_loop_unref (srv.loop);
  g_main_context_unref (srv.context);
  lingbot_test_rm_rf (tmpdir);
  return ret;
}

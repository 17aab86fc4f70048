/* lingbot-gst: the WebRTC sender (suite webrtc)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The server of examples/webrtc runs in a thread of this process on
 * 127.0.0.1 (any free port), with lingbotcontrolsrc ! lingbotbin on a tiny
 * random model (64x64, cpu:1): one server with VP8, one with x264.  The test
 * thread is the browser: a libsoup WebSocket client and a receiving
 * webrtcbin (ICE on 127.0.0.1 only) that answers the server's offer,
 * decodes the video, sends key events on the "input" data channel and reads
 * progress, chunk metrics and key echoes on "control"; and a raw WebSocket
 * client of its own for what libsoup cannot send (fragmented frames).
 *
 * Checked: the offer comes before any key (VP8 and H.264; fmtp values), a
 * table of malformed messages on the signalling socket and both channels
 * (each dropped with an error reply, the session goes on), a browser PLI
 * reaching the encoder, a second session refused with 4409, a reload (a
 * new WebSocket with the resume token while the old one is open) taking the
 * running session over at the next chunk, a malformed replacement answered
 * with errors while the viewer keeps streaming, messages above the limit
 * across continuation frames closed with 1009, a silent peer released after
 * the peer timeout and its slot free after the resume timeout, a browser
 * refusing the codec, the page's files and the path traversal rules.
 *
 * Every wait is bounded (TEST_TIMEOUT_S) and every check counts things.
 * Exit 77 when webrtcbin, libnice or VP8 are not installed.
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
#include "webrtc-server.h"
#include "ws-guard.h"
#include "test-ws-frame.h"

#define TEST_TIMEOUT_S 90
#define TEST_MAX_MESSAGE 4096
#define TEST_PEER_TIMEOUT 3
#define TEST_RESUME_TIMEOUT 2
#define SIZE 64

/* ---- fixture: a tiny random model ---- */

static char *tmpdir, *model_dir, *embeds_path, *image_path;

/* ---- the servers, in their own thread and main context ---- */

typedef struct
{
  GMutex lock;
  GCond cond;
  GMainContext *context;
  GMainLoop *loop;
  LingbotWebrtcServer *vp8, *h264;
  guint port, port264;
  gboolean ready;
  char *error;
} ServerThread;

static ServerThread srv;
static gboolean have_h264;

static LingbotWebrtcServer *
start_server (const char *encoder, GError ** err)
{
  static const char *props[] = { "width=64", "height=64", "seed=7", NULL };
  LingbotWebrtcConfig cfg;

  lingbot_webrtc_config_init (&cfg);
  cfg.port = 0;
  cfg.www_dir = g_getenv ("LINGBOT_WEBRTC_WWW");
  cfg.model = model_dir;
  cfg.image = image_path;
  cfg.prompt_embeds = embeds_path;
  cfg.devices = "cpu:1";
  cfg.gen_props = props;
  cfg.encoder = encoder;
  cfg.max_message_size = TEST_MAX_MESSAGE;
  cfg.peer_timeout = TEST_PEER_TIMEOUT;
  cfg.resume_timeout = TEST_RESUME_TIMEOUT;
  return lingbot_webrtc_server_new (&cfg, err);
}

static gpointer
server_thread (gpointer data)
{
  g_autoptr (GError) err = NULL;
  LingbotWebrtcServer *vp8, *h264 = NULL;

  g_main_context_push_thread_default (srv.context);
  vp8 = start_server ("vp8", &err);
  if (vp8 && have_h264)
    h264 = start_server ("x264", &err);

  g_mutex_lock (&srv.lock);
  srv.vp8 = vp8;
  srv.h264 = h264;
  srv.port = vp8 ? lingbot_webrtc_server_get_port (vp8) : 0;
  srv.port264 = h264 ? lingbot_webrtc_server_get_port (h264) : 0;
  srv.error = err ? g_strdup (err->message) : NULL;
  srv.ready = TRUE;
  g_cond_signal (&srv.cond);
  g_mutex_unlock (&srv.lock);

  if (vp8 && (h264 || !have_h264))
    g_main_loop_run (srv.loop);
  lingbot_webrtc_server_free (h264);
  lingbot_webrtc_server_free (vp8);
  g_main_context_pop_thread_default (srv.context);
  return NULL;
}

static gint64 deadline;

static void
pump (void)
{
  g_main_context_iteration (NULL, FALSE);
  g_usleep (2000);
}

#define WAIT_UNTIL(cond, what) G_STMT_START { \
    while (!(cond)) { \
      if (g_get_monotonic_time () > deadline) \
        g_error ("timed out waiting for %s", what); \
      pump (); \
    } \
  } G_STMT_END

/* ---- the WebSocket size guard's scanner ---- */

/* a masked client frame header for a payload of @len (no payload), key
 * 01 02 03 04 */
static gsize
frame_header (guint8 * out, gboolean fin, guint8 opcode, guint64 len)
{
  return lingbot_test_ws_frame_header (out, fin, opcode, len, 0x01020304);
}

/* frames of @lens (fin on the last), each followed by its payload */
static GByteArray *
fragments (const guint64 * lens, guint n, guint8 first_opcode)
{
  GByteArray *b = g_byte_array_new ();

  for (guint i = 0; i < n; i++) {
    guint8 hdr[14];
    gsize h = frame_header (hdr, i == n - 1, i == 0 ? first_opcode : 0,
        lens[i]);

    g_byte_array_append (b, hdr, (guint) h);
    g_byte_array_set_size (b, b->len + (guint) lens[i]);
  }
  return b;
}

static void
test_ws_scan (void)
{
  const guint64 three[] = { 100, 100, 100 };
  LingbotWsScan scan = { 0 };
  g_autoptr (GByteArray) msg = fragments (three, 3, 1);
  gsize pass, total = 0;
  guint8 ping[6 + 125];
  guint8 big[14];
  gsize bh;

  /* 300 bytes in three fragments, limit 250: stops before the third
   * header (6 bytes each, masked, short length) */
  pass = lingbot_ws_scan_feed (&scan, msg->data, msg->len, 250);
  g_assert_true (scan.tripped);
  g_assert_cmpuint (pass, ==, 106 + 106);
  g_assert_cmpuint (scan.trip_size, ==, 300);
  g_assert_cmpuint (lingbot_ws_scan_feed (&scan, msg->data, 1, 250), ==, 0);

  /* the same byte by byte: the header's first 5 bytes went on before its
   * length was complete */
  memset (&scan, 0, sizeof scan);
  for (guint i = 0; i < msg->len && !scan.tripped; i++)
    total += lingbot_ws_scan_feed (&scan, msg->data + i, 1, 250);
  g_assert_true (scan.tripped);
  g_assert_cmpuint (total, ==, 106 + 106 + 5);

  /* at the limit: passes whole; control frames between fragments do not
   * count; a new message starts again from 0 */
  memset (&scan, 0, sizeof scan);
  g_assert_cmpuint (lingbot_ws_scan_feed (&scan, msg->data, 212, 300), ==, 212);
  memset (ping, 0, sizeof ping);
  g_assert_cmpuint (frame_header (ping, TRUE, 9, 125), ==, 6);
  g_assert_cmpuint (lingbot_ws_scan_feed (&scan, ping, sizeof ping, 300), ==,
      sizeof ping);
  g_assert_cmpuint (lingbot_ws_scan_feed (&scan, msg->data + 212,
          msg->len - 212, 300), ==, msg->len - 212);
  g_assert_false (scan.tripped);
  g_assert_cmpuint (scan.message, ==, 300);
  g_assert_cmpuint (lingbot_ws_scan_feed (&scan, msg->data, msg->len, 300),
      ==, msg->len);
  g_assert_false (scan.tripped);

  /* a 64-bit length of 2^40: at once, saturating nothing */
  memset (&scan, 0, sizeof scan);
  bh = frame_header (big, TRUE, 2, G_GUINT64_CONSTANT (1) << 40);
  g_assert_cmpuint (bh, ==, 14);
  g_assert_cmpuint (lingbot_ws_scan_feed (&scan, big, bh, 1 << 20), ==, 0);
  g_assert_true (scan.tripped);
  g_assert_cmpuint (scan.trip_size, ==, G_GUINT64_CONSTANT (1) << 40);
}

/* ---- HTTP: the page, the start image, path traversal ---- */

static guint
raw_request (guint port, const char *req, char **body, gsize * body_len)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (GSocketClient) client = g_socket_client_new ();
  g_autoptr (GSocketConnection) conn = NULL;
  GString *resp = g_string_new (NULL);
  char buf[4096];
  gssize n;
  guint status = 0;

  g_socket_client_set_timeout (client, 10);
  conn = g_socket_client_connect_to_host (client, "127.0.0.1", port, NULL,
      &err);
  g_assert_no_error (err);
  g_assert_true (g_output_stream_write_all (g_io_stream_get_output_stream
          (G_IO_STREAM (conn)), req, strlen (req), NULL, NULL, &err));
  g_assert_no_error (err);
  while ((n = g_input_stream_read (g_io_stream_get_input_stream (G_IO_STREAM
                  (conn)), buf, sizeof buf, NULL, NULL)) > 0)
    g_string_append_len (resp, buf, n);
  if (g_str_has_prefix (resp->str, "HTTP/1.1 "))
    status = (guint) g_ascii_strtoull (resp->str + 9, NULL, 10);
  if (body_len)
    *body_len = resp->len;
  if (body)
    *body = g_memdup2 (resp->str, resp->len + 1);
  g_string_free (resp, TRUE);
  return status;
}

static guint
raw_get (const char *path, char **body)
{
  g_autofree char *req = g_strdup_printf ("GET %s HTTP/1.1\r\nHost: "
      "127.0.0.1\r\nConnection: close\r\n\r\n", path);

  return raw_request (srv.port, req, body, NULL);
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
  g_autofree char *body = NULL, *jpeg = NULL, *req = NULL;
  gsize jpeg_len, body_len = 0;
  guint status;
  char *p;

  status = raw_get ("/", &body);
  g_assert_cmpuint (status, ==, 200);
  g_assert_nonnull (strstr (body, "<video"));
  g_clear_pointer (&body, g_free);
  g_assert_cmpuint (raw_get ("/app.js", NULL), ==, 200);
  g_assert_cmpuint (raw_get ("/style.css", NULL), ==, 200);
  g_assert_cmpuint (raw_get ("/nothere.html", NULL), ==, 404);

  /* the configured start image, byte for byte */
  g_assert_true (g_file_get_contents (image_path, &jpeg, &jpeg_len, NULL));
  status = raw_request (srv.port, "GET /start-image HTTP/1.1\r\nHost: "
      "127.0.0.1\r\nConnection: close\r\n\r\n", &body, &body_len);
  g_assert_cmpuint (status, ==, 200);
  g_assert_nonnull (strstr (body, "Content-Type: image/jpeg"));
  g_assert_cmpmem (body + body_len - jpeg_len, jpeg_len, jpeg, jpeg_len);
  g_clear_pointer (&body, g_free);

  /* /ws: not an upgrade -> 400; an upgrade from another site -> 403 */
  g_assert_cmpuint (raw_get ("/ws", NULL), ==, 400);
  req = g_strdup_printf ("GET /ws HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n"
      "Origin: http://evil.example\r\nUpgrade: websocket\r\n"
      "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
      "Sec-WebSocket-Version: 13\r\nConnection: close\r\n\r\n", srv.port);
  g_assert_cmpuint (raw_request (srv.port, req, NULL, NULL), ==, 403);

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
  /* set before peer_start */
  guint port;
  const char *codec;            /* "VP8", "H264" */
  char *resume;                 /* resume token, or NULL */
  gboolean reject_video;        /* answer with the video refused */

  SoupSession *http;
  SoupWebsocketConnection *ws;
  GstElement *pipe;
  GstElement *webrtc;
  GstPad *video_src;            /* webrtcbin's video pad */
  GstWebRTCDataChannel *input, *control;
  /* the promises handed to webrtcbin: interrupted once it is stopped (it
   * frees the calls still queued unanswered, see peer_track_promise() in
   * webrtc-peer.c) */
  GMutex promise_lock;
  GPtrArray *promises;

  /* signalling */
  gboolean welcome, resumed;
  gint64 session, next_chunk;
  char *token;
  char *offer;
  char *error_code;             /* the last fatal error */
  guint n_ws_bad;               /* non-fatal error replies */
  gboolean closed;
  gushort close_code;
  gboolean ice_connected;

  /* media and control */
  guint n_frames;               /* atomic */
  int width, height;
  guint n_chunks;
  gint64 first_chunk, last_chunk;
  int last_frames;
  double last_dit, last_generate, last_vae, last_compute, last_fps;
  guint n_progress, n_decoding, n_status, n_ctl_bad;
  gint64 waiting_chunk;         /* the chunk the generator waits to start */
  gint64 passes;
  char *decoding_keys;
  gint64 echo_chunk[4];         /* by key id, -1 until echoed */
  char *echo_key[4];
} Peer;

static void
peer_send (Peer * p, const char *text)
{
  if (p->ws && soup_websocket_connection_get_state (p->ws) ==
      SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_send_text (p->ws, text);
}

static void
on_control_text (Peer * p, const char *text)
{
  g_autoptr (JsonParser) parser = json_parser_new ();
  JsonObject *o;
  const char *type;

  g_assert_true (json_parser_load_from_data (parser, text, -1, NULL));
  o = json_node_get_object (json_parser_get_root (parser));
  type = json_object_get_string_member (o, "type");
  if (strcmp (type, "chunk") == 0) {
    gint64 index = json_object_get_int_member (o, "index");
    int frames = (int) json_object_get_int_member (o, "frames");

    /* chunk indices only go up by one, across reconnects too */
    if (p->last_chunk >= 0)
      g_assert_cmpint (index, ==, p->last_chunk + 1);
    else
      p->first_chunk = index;
    p->last_chunk = index;
    g_assert_cmpint (frames, ==, index == 0 ? 13 : 16);
    p->last_frames = frames;
    p->last_dit = json_object_get_double_member (o, "dit-seconds");
    p->last_generate = json_object_get_double_member (o, "generate-seconds");
    p->last_vae = json_object_get_double_member (o, "vae-seconds");
    p->last_compute = json_object_get_double_member (o, "compute-seconds");
    p->last_fps = json_object_get_double_member (o, "compute-fps");
    p->n_chunks++;
  } else if (strcmp (type, "key-echo") == 0) {
    gint64 id = json_object_get_int_member (o, "id");

    g_assert_true (id >= 0 && id < 4);
    g_assert_cmpint (p->echo_chunk[id], ==, -1);
    p->echo_chunk[id] = json_object_get_int_member (o, "chunk");
    p->echo_key[id] = g_strdup (json_object_get_string_member (o, "key"));
    g_assert_cmpint (json_object_get_int_member (o, "first-frame"), >=, 0);
    g_assert_cmpfloat (json_object_get_double_member (o, "server-ms"), >=, 0.0);
  } else if (strcmp (type, "progress") == 0) {
    g_assert_cmpint (json_object_get_int_member (o, "pass"), <,
        json_object_get_int_member (o, "passes"));
    p->passes = json_object_get_int_member (o, "passes");
    p->n_progress++;
  } else if (strcmp (type, "decoding") == 0) {
    g_free (p->decoding_keys);
    p->decoding_keys = g_strdup (json_object_get_string_member (o, "keys"));
    p->n_decoding++;
  } else if (strcmp (type, "waiting") == 0) {
    p->waiting_chunk = json_object_get_int_member (o, "chunk");
  } else if (strcmp (type, "status") == 0) {
    p->n_status++;
  } else if (strcmp (type, "error") == 0) {
    g_assert_cmpstr (json_object_get_string_member (o, "code"), ==,
        "bad-message");
    g_assert_false (json_object_get_boolean_member (o, "fatal"));
    p->n_ctl_bad++;
  }
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

  if (!m->control)
    peer_send (m->p, m->text);
  else
    on_control_text (m->p, m->text);
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

static GstPromise *
track_promise (Peer * p, GstPromise * promise)
{
  g_mutex_lock (&p->promise_lock);
  if (p->promises == NULL)
    p->promises = g_ptr_array_new_with_free_func ((GDestroyNotify)
        gst_promise_unref);
  g_ptr_array_add (p->promises, gst_promise_ref (promise));
  g_mutex_unlock (&p->promise_lock);
  return promise;
}

static void
on_answer_created (GstPromise * promise, gpointer data)
{
  Peer *p = data;
  GstWebRTCSessionDescription *answer = NULL;
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autoptr (JsonNode) root = NULL;
  g_autofree char *sdp = NULL;

  if (gst_promise_wait (promise) == GST_PROMISE_RESULT_INTERRUPTED) {
    gst_promise_unref (promise);        /* stopped (peer_stop()) */
    return;
  }
  g_assert_cmpint (gst_promise_wait (promise), ==, GST_PROMISE_RESULT_REPLIED);
  gst_structure_get (gst_promise_get_reply (promise), "answer",
      GST_TYPE_WEBRTC_SESSION_DESCRIPTION, &answer, NULL);
  gst_promise_unref (promise);
  g_assert_nonnull (answer);
  /* with a promise: without one, the reply webrtcbin makes when it is
   * closed leaks */
  GstPromise *set = track_promise (p, gst_promise_new ());
  g_signal_emit_by_name (p->webrtc, "set-local-description", answer, set);
  gst_promise_unref (set);
  sdp = gst_sdp_message_as_text (answer->sdp);
  gst_webrtc_session_description_free (answer);
  if (p->reject_video) {
    /* what a browser without the codec answers: the section refused */
    char *m = strstr (sdp, "m=video 9 ");

    g_assert_nonnull (m);
    m[8] = '0';
  }

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
  GstPromiseResult result = gst_promise_wait (promise);

  gst_promise_unref (promise);
  if (result == GST_PROMISE_RESULT_INTERRUPTED)
    return;                     /* stopped (peer_stop()) */
  g_signal_emit_by_name (p->webrtc, "create-answer", NULL,
      track_promise (p, gst_promise_new_with_change_func (on_answer_created,
              p, NULL)));
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
  g_autofree char *desc = NULL;

  if (GST_PAD_DIRECTION (pad) != GST_PAD_SRC)
    return;
  cb.new_sample = on_sample;
  desc = g_strdup_printf ("queue ! %s ! videoconvert ! "
      "video/x-raw,format=I420 ! appsink name=frames sync=false",
      strcmp (p->codec, "H264") == 0 ? "rtph264depay ! h264parse ! "
      "openh264dec" : "rtpvp8depay ! vp8dec");
  bin = gst_parse_bin_from_description (desc, TRUE, &err);
  g_assert_no_error (err);
  sink = gst_bin_get_by_name (GST_BIN (bin), "frames");
  gst_app_sink_set_callbacks (GST_APP_SINK (sink), &cb, p, NULL);
  gst_object_unref (sink);
  gst_bin_add (GST_BIN (p->pipe), bin);
  gst_element_sync_state_with_parent (bin);
  sinkpad = gst_element_get_static_pad (bin, "sink");
  g_assert_cmpint (gst_pad_link (pad, sinkpad), ==, GST_PAD_LINK_OK);
  gst_object_unref (sinkpad);
  p->video_src = gst_object_ref (pad);
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

  g_assert_true (json_parser_load_from_data (parser, data, (gssize) len, NULL));
  o = json_node_get_object (json_parser_get_root (parser));
  kind = json_object_get_string_member (o, "type");
  if (strcmp (kind, "welcome") == 0) {
    p->welcome = TRUE;
    p->resumed = json_object_get_boolean_member (o, "resumed");
    p->session = json_object_get_int_member (o, "session");
    p->next_chunk = json_object_get_int_member (o, "next-chunk");
    p->token = g_strdup (json_object_get_string_member (o, "resume"));
    g_assert_cmpstr (json_object_get_string_member (o, "codec"), ==, p->codec);
    g_assert_cmpstr (json_object_get_string_member (o, "start-image"), ==,
        "/start-image");
    g_assert_cmpint (json_object_get_int_member (o, "peer-timeout"), ==,
        TEST_PEER_TIMEOUT);
  } else if (strcmp (kind, "error") == 0) {
    g_test_message ("ws error: %.*s", (int) len, data);
    if (json_object_get_boolean_member (o, "fatal")) {
      g_free (p->error_code);
      p->error_code = g_strdup (json_object_get_string_member (o, "code"));
    } else {
      g_assert_cmpstr (json_object_get_string_member (o, "code"), ==,
          "bad-message");
      p->n_ws_bad++;
    }
  } else if (strcmp (kind, "offer") == 0) {
    GstSDPMessage *sdp = NULL;
    GstWebRTCSessionDescription *offer;

    p->offer = g_strdup (json_object_get_string_member (o, "sdp"));
    if (p->webrtc == NULL)
      return;
    g_assert_cmpint (gst_sdp_message_new_from_text (p->offer, &sdp), ==,
        GST_SDP_OK);
    offer = gst_webrtc_session_description_new (GST_WEBRTC_SDP_TYPE_OFFER, sdp);
    g_signal_emit_by_name (p->webrtc, "set-remote-description", offer,
        track_promise (p, gst_promise_new_with_change_func (on_offer_set, p,
                NULL)));
    gst_webrtc_session_description_free (offer);
  } else if (strcmp (kind, "ice") == 0 && p->webrtc) {
    g_signal_emit_by_name (p->webrtc, "add-ice-candidate",
        (guint) json_object_get_int_member (o, "sdpMLineIndex"),
        json_object_get_string_member (o, "candidate"));
  }
}

static void
on_ws_closed (SoupWebsocketConnection * ws, Peer * p)
{
  p->closed = TRUE;
  p->close_code = soup_websocket_connection_get_close_code (ws);
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

/* as the server does (ice_configure()): libnice's UPnP discovery
 * (gupnp-igd, on its own thread) is off; a loopback peer has no use for it,
 * and gupnp's SSDP clients race on a hash table (a GLib critical, fatal
 * here) */
static void
no_upnp (GstWebRTCICE * ice)
{
  GObject *agent = NULL;

  if (g_object_class_find_property (G_OBJECT_GET_CLASS (ice), "agent"))
    g_object_get (ice, "agent", &agent, NULL);
  if (agent && g_object_class_find_property (G_OBJECT_GET_CLASS (agent),
          "upnp"))
    g_object_set (agent, "upnp", FALSE, NULL);
  g_clear_object (&agent);
}

static void
peer_start (Peer * p, guint port, const char *codec, gboolean media)
{
  g_autofree char *url = NULL;
  g_autoptr (SoupMessage) msg = NULL;

  p->port = port;
  p->codec = codec;
  p->first_chunk = p->last_chunk = p->waiting_chunk = -1;
  url = p->resume ? g_strdup_printf ("ws://127.0.0.1:%u/ws?resume=%s", port,
      p->resume) : g_strdup_printf ("ws://127.0.0.1:%u/ws", port);
  msg = soup_message_new ("GET", url);
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
    no_upnp (ice);
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
  /* webrtcbin's thread is joined: what it never answered is interrupted */
  if (p->promises) {
    for (guint i = 0; i < p->promises->len; i++)
      gst_promise_interrupt (g_ptr_array_index (p->promises, i));
    g_clear_pointer (&p->promises, g_ptr_array_unref);
  }
  g_clear_object (&p->video_src);
  g_clear_object (&p->input);
  g_clear_object (&p->control);
  g_clear_object (&p->http);
  g_clear_pointer (&p->error_code, g_free);
  g_clear_pointer (&p->token, g_free);
  g_clear_pointer (&p->offer, g_free);
  g_clear_pointer (&p->resume, g_free);
  g_clear_pointer (&p->decoding_keys, g_free);
  for (guint i = 0; i < G_N_ELEMENTS (p->echo_key); i++)
    g_clear_pointer (&p->echo_key[i], g_free);
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

static void
press (Peer * p, const char *key, int id)
{
  g_autofree char *text = id >= 0 ?
      g_strdup_printf ("{\"event\":\"KeyPress\",\"key\":\"%s\","
      "\"modifier_state\":\"\",\"id\":%d}", key, id) :
      g_strdup_printf ("{\"event\":\"KeyPress\",\"key\":\"%s\"}", key);

  gst_webrtc_data_channel_send_string (p->input, text);
}

static void
release (Peer * p, const char *key)
{
  g_autofree char *text = g_strdup_printf ("{\"event\":\"KeyRelease\","
      "\"key\":\"%s\",\"modifier_state\":\"\"}", key);

  gst_webrtc_data_channel_send_string (p->input, text);
}

static GstPadProbeReturn
drop_probe (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  return GST_PAD_PROBE_DROP;
}

/* the browser vanishes: nothing it sends leaves any more (libnice still
 * answers connectivity checks itself, so ICE stays "connected") */
static void
peer_go_silent (Peer * p)
{
  GstIterator *it = gst_bin_iterate_recurse (GST_BIN (p->webrtc));
  GValue v = G_VALUE_INIT;
  guint n = 0;

  while (gst_iterator_next (it, &v) == GST_ITERATOR_OK) {
    GstElement *e = g_value_get_object (&v);
    GstElementFactory *f = gst_element_get_factory (e);

    if (f && strcmp (GST_OBJECT_NAME (f), "nicesink") == 0) {
      GstPad *sink = gst_element_get_static_pad (e, "sink");

      gst_pad_add_probe (sink, GST_PAD_PROBE_TYPE_BUFFER |
          GST_PAD_PROBE_TYPE_BUFFER_LIST, drop_probe, NULL, NULL);
      gst_object_unref (sink);
      n++;
    }
    g_value_reset (&v);
  }
  g_value_unset (&v);
  gst_iterator_free (it);
  g_assert_cmpuint (n, >=, 1);
}

/* ---- a raw WebSocket client: fragmented and oversized frames ---- */

typedef struct
{
  GSocketConnection *conn;
  GSocket *sock;
  GByteArray *in;
  GPtrArray *texts;             /* text messages received */
  gboolean closed;
  guint close_code;
} RawWs;

static void
raw_ws_open (RawWs * r, guint port, const char *resume)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (GSocketClient) client = g_socket_client_new ();
  g_autofree char *req = g_strdup_printf ("GET /ws%s%s HTTP/1.1\r\n"
      "Host: 127.0.0.1:%u\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
      "Sec-WebSocket-Version: 13\r\n\r\n", resume ? "?resume=" : "",
      resume ? resume : "", port);
  char *end = NULL;

  memset (r, 0, sizeof *r);
  r->in = g_byte_array_new ();
  r->texts = g_ptr_array_new_with_free_func (g_free);
  r->conn = g_socket_client_connect_to_host (client, "127.0.0.1", port, NULL,
      &err);
  g_assert_no_error (err);
  r->sock = g_socket_connection_get_socket (r->conn);
  g_assert_cmpint (g_socket_send (r->sock, req, strlen (req), NULL, &err), ==,
      (gssize) strlen (req));
  g_socket_set_blocking (r->sock, FALSE);
  /* the 101 response */
  while (r->in->len == 0 || (end = g_strstr_len ((char *) r->in->data,
              r->in->len, "\r\n\r\n")) == NULL) {
    char buf[1024];
    gssize n = g_socket_receive (r->sock, buf, sizeof buf, NULL, NULL);

    if (n > 0)
      g_byte_array_append (r->in, (guint8 *) buf, (guint) n);
    if (g_get_monotonic_time () > deadline)
      g_error ("no WebSocket handshake reply");
    pump ();
  }
  g_assert_true (g_str_has_prefix ((char *) r->in->data,
          "HTTP/1.1 101 Switching Protocols"));
  g_byte_array_remove_range (r->in, 0, (guint) (end + 4 -
          (char *) r->in->data));
}

/* read what is there, split server frames (unmasked) */
static void
raw_ws_poll (RawWs * r)
{
  char buf[16384];
  gssize n;

  while (!r->closed) {
    g_autoptr (GError) err = NULL;

    n = g_socket_receive (r->sock, buf, sizeof buf, NULL, &err);
    if (n > 0) {
      g_byte_array_append (r->in, (guint8 *) buf, (guint) n);
      continue;
    }
    if (n == 0 || !g_error_matches (err, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
      r->closed = TRUE;         /* EOF or reset */
    break;
  }
  while (r->in->len >= 2) {
    guint8 *h = r->in->data;
    guint64 len = h[1] & 0x7f;
    guint at = 2;

    if (len == 126) {
      if (r->in->len < 4)
        return;
      len = ((guint) h[2] << 8) | h[3];
      at = 4;
    } else if (len == 127) {
      if (r->in->len < 10)
        return;
      len = 0;
      for (int i = 0; i < 8; i++)
        len = (len << 8) | h[2 + i];
      at = 10;
    }
    if (r->in->len < at + len)
      return;
    if ((h[0] & 0x0f) == 1) {
      char *text = g_strndup ((char *) h + at, (gsize) len);

      /* trickle ICE candidates are not counted */
      if (strstr (text, "\"type\":\"ice\"") == NULL)
        g_ptr_array_add (r->texts, text);
      else
        g_free (text);
    } else if ((h[0] & 0x0f) == 8 && len >= 2) {
      r->close_code = ((guint) h[at] << 8) | h[at + 1];
      r->closed = TRUE;
    }
    g_byte_array_remove_range (r->in, 0, at + (guint) len);
  }
}

/* one masked frame; FALSE when the server is gone */
static gboolean
raw_ws_frame (RawWs * r, gboolean fin, guint8 opcode, const char *data,
    gsize len)
{
  guint8 hdr[14];
  gsize h = frame_header (hdr, fin, opcode, len);
  g_autofree guint8 *frame = g_malloc (h + len);
  gsize sent = 0;

  memcpy (frame, hdr, h);
  for (gsize i = 0; i < len; i++)
    frame[h + i] = (guint8) (data ? data[i] : 'x') ^ (guint8) ((i % 4) + 1);
  while (sent < h + len) {
    g_autoptr (GError) err = NULL;
    gssize n = g_socket_send (r->sock, (char *) frame + sent, h + len - sent,
        NULL, &err);

    if (n > 0) {
      sent += (gsize) n;
      continue;
    }
    if (!g_error_matches (err, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
      return FALSE;             /* reset: the server closed */
    raw_ws_poll (r);
    if (r->closed)
      return FALSE;
    if (g_get_monotonic_time () > deadline)
      g_error ("raw WebSocket write stalled");
    pump ();
  }
  return TRUE;
}

/* wait until the server sent @n text messages in all */
static void
raw_ws_wait_texts (RawWs * r, guint n)
{
  while (r->texts->len < n) {
    raw_ws_poll (r);
    if (r->closed && r->texts->len < n)
      g_error ("raw WebSocket closed (%u) after %u of %u messages",
          r->close_code, r->texts->len, n);
    if (g_get_monotonic_time () > deadline)
      g_error ("timed out waiting for %u messages (%u)", n, r->texts->len);
    pump ();
  }
}

static const char *
raw_ws_text (RawWs * r, guint i)
{
  return g_ptr_array_index (r->texts, i);
}

static void
raw_ws_free (RawWs * r)
{
  g_clear_object (&r->conn);
  g_byte_array_unref (r->in);
  g_ptr_array_unref (r->texts);
}

/* ---- the tests ---- */

static void
send_garbage (Peer * p)
{
  GString *big = g_string_new ("{\"event\":\"KeyPress\",\"key\":\"");
  guint dropped_before = lingbot_webrtc_server_get_n_dropped (srv.vp8);
  guint mdns_before = lingbot_webrtc_server_get_n_mdns_ignored (srv.vp8);
  /* on "input" */
  const char *bad_input[] = {
    "{not json", "[1,2,3]", "42", "{\"event\":\"Bogus\",\"key\":\"a\"}",
    "{\"event\":\"KeyPress\"}", "{\"event\":\"KeyPress\",\"key\":7}",
    "{\"event\":\"KeyPress\",\"key\":\"\"}",
    "{\"event\":\"KeyPress\",\"key\":null}", "{\"event\":5}",
    "{\"id\":5,\"request\":{\"type\":3}}",
    "{\"id\":5,\"request\":{\"type\":\"customUpstreamEvent\"}}",
    "{\"id\":5,\"request\":5}",
    "{\"id\":5,\"request\":{\"type\":\"navigationEvent\"}}",
    "{\"id\":5,\"request\":{\"type\":\"navigationEvent\",\"event\":5}}",
    "{\"id\":\"x\",\"request\":{\"type\":null,\"event\":{}}}",
    "{\"event\":\"KeyPress\",\"key\":\"ArrowUp\",\"id\":\"str\"}",
  };
  /* on "control" */
  const char *bad_control[] = {
    "{\"type\":\"hello\"}", "{\"type\":5}", "{}", "\"x\"",
    "{\"id\":5,\"request\":{\"type\":3}}",
  };
  /* on the signalling WebSocket */
  const char *bad_ws[] = {
    "{not json", "[]", "\"just a string\"", "{}", "{\"type\":1}",
    "{\"type\":null}", "{\"type\":[\"answer\"]}", "{\"type\":{}}",
    "{\"type\":\"bogus\"}", "{\"type\":\"ice\"}",
    "{\"type\":\"ice\",\"candidate\":5,\"sdpMLineIndex\":0}",
    "{\"type\":\"ice\",\"candidate\":\"x\",\"sdpMLineIndex\":0}",
    "{\"type\":\"ice\",\"candidate\":\"candidate:1\",\"sdpMLineIndex\":\"0\"}",
    "{\"type\":\"ice\",\"candidate\":\"candidate:1\",\"sdpMLineIndex\":-1}",
    "{\"type\":\"answer\"}", "{\"type\":\"answer\",\"sdp\":5}",
    "{\"type\":\"answer\",\"sdp\":\"garbage\"}",
    "{\"type\":\"offer\",\"sdp\":\"v=0\"}",
  };
  guint n_ws = 0, n_ctl = 0;
  g_autoptr (GBytes) binary = g_bytes_new_static ("\x01\x02\x03", 3);
  GString *deep = g_string_new (NULL);
  g_autofree char *mdns = ice_json (0, "candidate:2712353452 1 udp 2122260223 "
      "8c5e1b0e-5b1a-4f4e-9d0c-1f2e3d4c5b6a.local 51234 typ host generation 0 "
      "ufrag abcd network-id 1");

  /* a browser's mDNS host candidate: ignored, not dropped */
  peer_send (p, mdns);

  while (big->len < TEST_MAX_MESSAGE + 100)
    g_string_append_c (big, 'x');
  g_string_append (big, "\"}");
  /* nested 2000 deep, under the size limit */
  for (guint i = 0; i < 2000; i++)
    g_string_append_c (deep, '[');
  for (guint i = 0; i < 2000; i++)
    g_string_append_c (deep, ']');

  for (guint i = 0; i < G_N_ELEMENTS (bad_input); i++, n_ctl++)
    gst_webrtc_data_channel_send_string (p->input, bad_input[i]);
  gst_webrtc_data_channel_send_string (p->input, big->str);
  gst_webrtc_data_channel_send_string (p->input, deep->str);
  gst_webrtc_data_channel_send_data (p->input, binary);
  n_ctl += 3;
  for (guint i = 0; i < G_N_ELEMENTS (bad_control); i++, n_ctl++)
    gst_webrtc_data_channel_send_string (p->control, bad_control[i]);
  gst_webrtc_data_channel_send_data (p->control, binary);
  n_ctl++;
  for (guint i = 0; i < G_N_ELEMENTS (bad_ws); i++, n_ws++)
    peer_send (p, bad_ws[i]);
  peer_send (p, big->str);
  peer_send (p, deep->str);
  soup_websocket_connection_send_binary (p->ws, "\x01\x02", 2);
  n_ws += 3;
  g_string_free (big, TRUE);
  g_string_free (deep, TRUE);

  /* every one dropped (and counted) by the server, with an error reply on
   * the WebSocket or on "control", none fatal */
  WAIT_UNTIL (p->n_ws_bad >= n_ws && p->n_ctl_bad >= n_ctl, "error replies");
  g_assert_cmpuint (lingbot_webrtc_server_get_n_dropped (srv.vp8) -
      dropped_before, ==, n_ws + n_ctl);
  g_assert_cmpuint (p->n_ws_bad, ==, n_ws);
  g_assert_cmpuint (p->n_ctl_bad, ==, n_ctl);
  g_assert_cmpuint (lingbot_webrtc_server_get_n_mdns_ignored (srv.vp8) -
      mdns_before, ==, 1);
  g_assert_null (p->error_code);
  g_assert_false (p->closed);
}

/* the malformed replacement: a raw WebSocket resuming the session with
 * errors, fragments and too much, while @viewer keeps streaming */
static void
malformed_replacement (Peer * viewer)
{
  const char frag1[] = "{\"type\":", frag2[] = "\"bo", frag3[] = "gus\"}";
  guint replaced = lingbot_webrtc_server_get_n_replaced (srv.vp8);
  guint too_big = lingbot_webrtc_server_get_n_too_big (srv.vp8);
  g_autofree char *pad = g_malloc0 (2000);
  g_autofree char *chunk = NULL;
  guint frames, chunks;
  gboolean ok = TRUE;
  RawWs r;

  press (viewer, "KeyW", -1);
  raw_ws_open (&r, srv.port, viewer->token);
  raw_ws_wait_texts (&r, 2);    /* welcome, offer */
  frames = g_atomic_int_get (&viewer->n_frames);
  g_assert_nonnull (strstr (raw_ws_text (&r, 0), "\"resumed\":true"));
  g_assert_nonnull (strstr (raw_ws_text (&r, 1), "\"type\":\"offer\""));
  g_assert_cmpuint (lingbot_webrtc_server_get_n_peers (srv.vp8), ==, 2);

  raw_ws_frame (&r, TRUE, 1, "{\"type\":\"answer\",\"sdp\":\"garbage\"}", 33);
  /* empty: the SDP parser asserted (g_critical) on it (fuzz corpus
   * webrtc-signalling/repro-answer-empty-sdp) */
  raw_ws_frame (&r, TRUE, 1, "{\"type\":\"answer\",\"sdp\":\"\"}", 26);
  raw_ws_frame (&r, TRUE, 1, "{\"type\":1}", 10);
  /* fragmented, reassembled, then refused for its type */
  raw_ws_frame (&r, FALSE, 1, frag1, strlen (frag1));
  raw_ws_frame (&r, FALSE, 0, frag2, strlen (frag2));
  raw_ws_frame (&r, TRUE, 0, frag3, strlen (frag3));
  /* 6000 bytes in 3 fragments: above --max-message-size, refused */
  memset (pad, ' ', 2000);
  raw_ws_frame (&r, FALSE, 1, pad, 2000);
  raw_ws_frame (&r, FALSE, 0, pad, 2000);
  raw_ws_frame (&r, TRUE, 0, pad, 2000);
  raw_ws_wait_texts (&r, 2 + 5);
  for (guint i = 2; i < 7; i++) {
    g_test_message ("replacement got %s", raw_ws_text (&r, i));
    g_assert_nonnull (strstr (raw_ws_text (&r, i), "\"code\":\"bad-message\""));
    g_assert_nonnull (strstr (raw_ws_text (&r, i), "\"fatal\":false"));
  }
  g_assert_nonnull (strstr (raw_ws_text (&r, 2), "unusable SDP"));
  g_assert_nonnull (strstr (raw_ws_text (&r, 3),
          "unusable SDP (no media section)"));
  g_assert_nonnull (strstr (raw_ws_text (&r, 4), "no \\\"type\\\" string"));
  g_assert_nonnull (strstr (raw_ws_text (&r, 5), "unknown message type"));
  g_assert_nonnull (strstr (raw_ws_text (&r, 6), "too big"));

  /* the viewer streamed on meanwhile (it holds a key) */
  WAIT_UNTIL ((guint) g_atomic_int_get (&viewer->n_frames) > frames,
      "frames while a replacement misbehaves");
  g_assert_cmpuint (lingbot_webrtc_server_get_n_peers (srv.vp8), ==, 2);

  /* 2 MiB in 256 KiB fragments, each under the frame limit: closed with
   * 1009 once past 1 MiB, before the rest is even read */
  chunk = g_malloc (256 * 1024);
  memset (chunk, 'y', 256 * 1024);
  raw_ws_frame (&r, FALSE, 1, chunk, 256 * 1024);
  for (guint i = 1; i < 8 && ok; i++)
    ok = raw_ws_frame (&r, i == 7, 0, chunk, 256 * 1024);
  while (!r.closed) {
    raw_ws_poll (&r);
    if (g_get_monotonic_time () > deadline)
      g_error ("no close after 2 MiB of fragments");
    pump ();
  }
  g_assert_cmpuint (r.close_code, ==, SOUP_WEBSOCKET_CLOSE_TOO_BIG);
  g_assert_cmpuint (lingbot_webrtc_server_get_n_too_big (srv.vp8), ==,
      too_big + 1);
  raw_ws_free (&r);
  release (viewer, "KeyW");

  /* the replacement is gone, never promoted; the viewer is the one peer */
  WAIT_UNTIL (lingbot_webrtc_server_get_n_peers (srv.vp8) == 1,
      "the replacement released");
  g_assert_cmpuint (lingbot_webrtc_server_get_n_replaced (srv.vp8), ==,
      replaced);
  g_assert_false (viewer->closed);
  frames = g_atomic_int_get (&viewer->n_frames);
  chunks = viewer->n_chunks;
  press (viewer, "KeyS", -1);
  WAIT_UNTIL (viewer->n_chunks > chunks
      && (guint) g_atomic_int_get (&viewer->n_frames) > frames,
      "frames after the replacement was closed");
  release (viewer, "KeyS");

  /* one 2 MiB frame: closed with 1009 as well */
  raw_ws_open (&r, srv.port, viewer->token);
  g_free (chunk);
  chunk = g_malloc (2 * 1024 * 1024);
  memset (chunk, 'z', 2 * 1024 * 1024);
  raw_ws_frame (&r, TRUE, 1, chunk, 2 * 1024 * 1024);
  while (!r.closed) {
    raw_ws_poll (&r);
    if (g_get_monotonic_time () > deadline)
      g_error ("no close after a 2 MiB frame");
    pump ();
  }
  g_assert_cmpuint (r.close_code, ==, SOUP_WEBSOCKET_CLOSE_TOO_BIG);
  raw_ws_free (&r);
  WAIT_UNTIL (lingbot_webrtc_server_get_n_peers (srv.vp8) == 1,
      "the second replacement released");
  g_assert_false (viewer->closed);
}

static gboolean
is_viewer_ready (Peer * p)
{
  return p->welcome && channels_open (p);
}

static void
test_session (void)
{
  Peer a = { 0 }, busy = { 0 }, b = { 0 }, again = { 0 };
  guint key_units, timeouts, replaced;
  gint64 last_a;

  deadline = g_get_monotonic_time () + TEST_TIMEOUT_S * G_USEC_PER_SEC;

  /* the first browser: a new session, offered before any key */
  peer_start (&a, srv.port, "VP8", TRUE);
  WAIT_UNTIL (a.offer != NULL || a.error_code, "the offer");
  g_assert_null (a.error_code);
  g_assert_true (a.welcome);
  g_assert_false (a.resumed);
  g_assert_cmpint (a.next_chunk, ==, 0);
  g_assert_cmpuint (strlen (a.token), ==, 32);
  g_assert_nonnull (strstr (a.offer, "a=rtpmap:96 VP8/90000"));
  g_assert_nonnull (strstr (a.offer, "a=rtcp-fb:96 nack pli"));
  g_assert_nonnull (strstr (a.offer, "a=rtcp-fb:96 ccm fir"));
  g_assert_nonnull (strstr (a.offer, "a=sendonly"));

  /* a second concurrent session is refused with a message, then closed */
  peer_start (&busy, srv.port, "VP8", FALSE);
  WAIT_UNTIL (busy.welcome || busy.error_code, "refusal");
  g_assert_false (busy.welcome);
  g_assert_cmpstr (busy.error_code, ==, "busy");
  WAIT_UNTIL (busy.closed, "refused close");
  g_assert_cmpint (busy.close_code, ==, LINGBOT_WEBRTC_CLOSE_BUSY);
  peer_stop (&busy);

  WAIT_UNTIL (is_viewer_ready (&a), "ICE + data channels");
  WAIT_UNTIL (a.n_status > 0, "a status message");
  /* the preview (lingbotgen preview=true): the start image reaches the
   * browser before any key is held */
  WAIT_UNTIL (g_atomic_int_get (&a.n_frames) >= 1, "the preview frame");
  send_garbage (&a);

  /* a key press with an id: echoed with the chunk that used it; the chunk
   * is reported while generated, decoded, and with generate + decode */
  press (&a, "ArrowUp", 1);
  WAIT_UNTIL (a.echo_chunk[1] >= 0, "key echo 1");
  g_assert_cmpint (a.echo_chunk[1], ==, 0);
  g_assert_cmpstr (a.echo_key[1], ==, "ArrowUp");
  WAIT_UNTIL (g_atomic_int_get (&a.n_frames) >= 13 && a.n_chunks >= 1,
      "13 frames and the first chunk's metrics");
  g_assert_cmpint (a.first_chunk, ==, 0);
  g_assert_cmpuint (a.n_progress, >=, 1);
  g_assert_cmpint (a.passes, ==, 5);
  g_assert_cmpuint (a.n_decoding, >=, 1);
  g_assert_nonnull (strstr (a.decoding_keys, "w"));
  g_assert_cmpfloat (a.last_vae, >, 0.0);
  g_assert_cmpfloat (a.last_generate, >=, a.last_dit);
  g_assert_cmpfloat (a.last_dit, >, 0.0);
  g_assert_cmpfloat_with_epsilon (a.last_compute,
      a.last_generate + a.last_vae, 1e-9);
  g_assert_cmpfloat_with_epsilon (a.last_fps, a.last_frames /
      a.last_compute, 1e-6);
  release (&a, "ArrowUp");

  /* gstwebrtc-api's form on "control", X keysym name */
  gst_webrtc_data_channel_send_string (a.control,
      "{\"id\":2,\"request\":{\"type\":\"navigationEvent\",\"event\":"
      "{\"event\":\"KeyPress\",\"key\":\"Right\",\"modifier_state\":\"\"}}}");
  WAIT_UNTIL (a.echo_chunk[2] >= 0, "key echo 2");
  g_assert_cmpint (a.echo_chunk[2], >=, 1);
  g_assert_cmpstr (a.echo_key[2], ==, "ArrowRight");
  gst_webrtc_data_channel_send_string (a.input,
      "{\"event\":\"KeyRelease\",\"key\":\"Right\"}");
  g_assert_cmpint (g_atomic_int_get (&a.width), ==, SIZE);
  g_assert_cmpint (g_atomic_int_get (&a.height), ==, SIZE);

  /* a PLI from the browser: the receiver asks for a key unit, rtpsession
   * sends the PLI, the server's rtpsession turns it into a force-key-unit
   * that reaches the encoder */
  key_units = lingbot_webrtc_server_get_n_key_units (srv.vp8);
  g_assert_nonnull (a.video_src);
  gst_pad_send_event (a.video_src, gst_video_event_new_upstream_force_key_unit
      (GST_CLOCK_TIME_NONE, TRUE, 1));
  WAIT_UNTIL (lingbot_webrtc_server_get_n_key_units (srv.vp8) > key_units,
      "a force-key-unit from the browser's PLI");

  /* a reload: a new WebSocket with the session's token while the old one
   * is still open takes the running session over */
  WAIT_UNTIL (a.n_chunks >= 2, "the chunk of key 2");
  /* with no key held the generator waits for the next chunk */
  WAIT_UNTIL (a.waiting_chunk >= 0 && a.waiting_chunk == a.last_chunk + 1,
      "the generator waiting");
  last_a = a.last_chunk;
  key_units = lingbot_webrtc_server_get_n_key_units (srv.vp8);
  replaced = lingbot_webrtc_server_get_n_replaced (srv.vp8);
  b.resume = g_strdup (a.token);
  peer_start (&b, srv.port, "VP8", TRUE);
  WAIT_UNTIL (b.welcome || b.error_code, "the replacement's welcome");
  g_assert_null (b.error_code);
  g_assert_true (b.resumed);
  g_assert_cmpint (b.session, ==, a.session);
  g_assert_cmpint (b.next_chunk, ==, last_a + 1);
  g_assert_cmpstr (b.token, ==, a.token);
  WAIT_UNTIL (a.closed, "the old peer released");
  g_assert_cmpstr (a.error_code, ==, "replaced");
  g_assert_cmpint (a.close_code, ==, LINGBOT_WEBRTC_CLOSE_REPLACED);
  g_assert_cmpuint (lingbot_webrtc_server_get_n_replaced (srv.vp8), ==,
      replaced + 1);
  WAIT_UNTIL (lingbot_webrtc_server_get_n_peers (srv.vp8) == 1,
      "one peer left");
  g_assert_cmpuint (lingbot_webrtc_server_get_n_sessions (srv.vp8), ==, 1);
  /* the joiner got key units of its own (joined, connected) */
  g_assert_cmpuint (lingbot_webrtc_server_get_n_key_units (srv.vp8), >=,
      key_units + 1);
  WAIT_UNTIL (is_viewer_ready (&b), "the new peer's channels");
  peer_stop (&a);
  /* a picture before any key: the generator waits for one, and the
   * replacement's force-key-unit has the last frame of chunk last_a sent
   * again (lingbotgen's lingbot-repeat) */
  WAIT_UNTIL (g_atomic_int_get (&b.n_frames) >= 1, "the last frame again at "
      "the new peer");
  g_assert_cmpint (b.n_chunks, ==, 0);

  /* its video continues from the current chunk, not from 0 */
  press (&b, "KeyD", 3);
  WAIT_UNTIL (b.echo_chunk[3] >= 0 && b.n_chunks >= 1, "the new peer's "
      "first chunk");
  g_assert_cmpint (b.first_chunk, ==, last_a + 1);
  g_assert_cmpint (b.echo_chunk[3], ==, last_a + 1);
  WAIT_UNTIL (g_atomic_int_get (&b.n_frames) >= 8, "frames at the new peer");
  release (&b, "KeyD");

  /* a malformed replacement does not disturb the viewer */
  malformed_replacement (&b);

  /* the viewer vanishes: released after the peer timeout (its socket gets
   * 4408), the session after the resume timeout; the slot is free */
  timeouts = lingbot_webrtc_server_get_n_timeouts (srv.vp8);
  peer_go_silent (&b);
  WAIT_UNTIL (b.closed, "the silent peer released");
  g_assert_cmpint (b.close_code, ==, LINGBOT_WEBRTC_CLOSE_TIMEOUT);
  g_assert_cmpstr (b.error_code, ==, "timeout");
  g_assert_cmpuint (lingbot_webrtc_server_get_n_timeouts (srv.vp8), ==,
      timeouts + 1);
  WAIT_UNTIL (lingbot_webrtc_server_get_n_sessions (srv.vp8) == 0,
      "the session closed after the resume timeout");
  g_assert_cmpuint (lingbot_webrtc_server_get_n_peers (srv.vp8), ==, 0);
  peer_stop (&b);

  /* a new browser gets a new session (chunk 0 next); "bye" ends it */
  peer_start (&again, srv.port, "VP8", FALSE);
  WAIT_UNTIL (again.welcome || again.error_code, "welcome of a new session");
  g_assert_null (again.error_code);
  g_assert_false (again.resumed);
  g_assert_cmpint (again.next_chunk, ==, 0);
  peer_send (&again, "{\"type\":\"bye\"}");
  WAIT_UNTIL (again.closed, "closed after bye");
  g_assert_cmpint (again.close_code, ==, SOUP_WEBSOCKET_CLOSE_NORMAL);
  WAIT_UNTIL (lingbot_webrtc_server_get_n_sessions (srv.vp8) == 0,
      "no session after bye");
  peer_stop (&again);
}

/* H.264 (x264): offered before any key with the fmtp browsers need,
 * decoded here with openh264; a browser refusing it gets a codec error */
static void
test_h264 (void)
{
  Peer p = { 0 }, again = { 0 }, refuse = { 0 };
  gint64 last, session;

  if (srv.h264 == NULL) {
    g_test_skip ("x264enc, rtph264pay/depay or openh264dec not installed");
    return;
  }
  deadline = g_get_monotonic_time () + TEST_TIMEOUT_S * G_USEC_PER_SEC;

  peer_start (&p, srv.port264, "H264", TRUE);
  WAIT_UNTIL (p.offer != NULL || p.error_code, "the H.264 offer");
  g_assert_null (p.error_code);
  g_assert_nonnull (strstr (p.offer, "a=rtpmap:102 H264/90000"));
  g_assert_nonnull (strstr (p.offer, "a=fmtp:102 packetization-mode=1;"
          "profile-level-id=42e01f;level-asymmetry-allowed=1"));
  g_assert_nonnull (strstr (p.offer, "a=rtcp-fb:102 nack pli"));
  g_assert_nonnull (strstr (p.offer, "a=rtcp-fb:102 ccm fir"));
  WAIT_UNTIL (is_viewer_ready (&p), "ICE + data channels (H.264)");
  press (&p, "ArrowUp", 1);
  WAIT_UNTIL (g_atomic_int_get (&p.n_frames) >= 13, "13 H.264 frames");
  g_assert_cmpint (g_atomic_int_get (&p.width), ==, SIZE);
  release (&p, "ArrowUp");
  WAIT_UNTIL (p.n_chunks >= 1 && p.waiting_chunk == p.last_chunk + 1,
      "the H.264 generator waiting");

  /* the page closed first (a reload whose old socket is gone before the
   * new one opens): the session waits, the next socket resumes it */
  last = p.last_chunk;
  session = p.session;
  again.resume = g_strdup (p.token);
  peer_stop (&p);
  WAIT_UNTIL (lingbot_webrtc_server_get_n_peers (srv.h264) == 0,
      "the closed page's peer released");
  g_assert_cmpuint (lingbot_webrtc_server_get_n_sessions (srv.h264), ==, 1);
  peer_start (&again, srv.port264, "H264", TRUE);
  WAIT_UNTIL (again.welcome || again.error_code, "the resuming welcome");
  g_assert_null (again.error_code);
  g_assert_true (again.resumed);
  g_assert_cmpint (again.session, ==, session);
  g_assert_cmpint (again.next_chunk, ==, last + 1);
  WAIT_UNTIL (is_viewer_ready (&again), "the resumed peer's channels");
  press (&again, "ArrowUp", -1);
  WAIT_UNTIL (again.n_chunks >= 1 && g_atomic_int_get (&again.n_frames) >= 8,
      "H.264 frames after the resume");
  g_assert_cmpint (again.first_chunk, ==, last + 1);
  release (&again, "ArrowUp");
  peer_send (&again, "{\"type\":\"bye\"}");
  WAIT_UNTIL (again.closed, "closed after bye");
  peer_stop (&again);
  WAIT_UNTIL (lingbot_webrtc_server_get_n_sessions (srv.h264) == 0,
      "no H.264 session");

  /* the answer refuses the video section, as a browser without H.264 */
  refuse.reject_video = TRUE;
  peer_start (&refuse, srv.port264, "H264", TRUE);
  WAIT_UNTIL (refuse.closed, "the codec refusal");
  g_assert_cmpstr (refuse.error_code, ==, "codec");
  g_assert_cmpint (refuse.close_code, ==, LINGBOT_WEBRTC_CLOSE_CODEC);
  peer_stop (&refuse);
}

static gboolean
have_elements (const char *const *names)
{
  for (guint i = 0; names[i]; i++) {
    GstElementFactory *f = gst_element_factory_find (names[i]);

    if (f == NULL)
      return FALSE;
    gst_object_unref (f);
  }
  return TRUE;
}

int
main (int argc, char **argv)
{
  const char *needed[] = { "webrtcbin", "nicesrc", "nicesink", "dtlssrtpenc",
    "sctpenc", "vp8enc", "vp8dec", "rtpvp8pay", "rtpvp8depay", "jpegenc",
    "tee", "lingbotcontrolsrc", "lingbotbin", NULL
  };
  const char *h264[] = { "x264enc", "rtph264pay", "rtph264depay", "h264parse",
    "openh264dec", NULL
  };
  GThread *thread;
  int ret;

  g_test_init (&argc, &argv, NULL);
  gst_init (&argc, &argv);
  for (guint i = 0; needed[i]; i++) {
    const char *one[] = { needed[i], NULL };

    if (!have_elements (one)) {
      g_print ("SKIP: GStreamer element %s is not installed\n", needed[i]);
      return 77;
    }
  }
  if (g_getenv ("LINGBOT_WEBRTC_WWW") == NULL) {
    g_print ("SKIP: LINGBOT_WEBRTC_WWW is not set\n");
    return 77;
  }
  have_h264 = have_elements (h264);

  tmpdir = lingbot_test_write_fixture ("lingbot-webrtc-XXXXXX", &model_dir,
      &embeds_path, &image_path);
  g_mutex_init (&srv.lock);
  g_cond_init (&srv.cond);
  srv.context = g_main_context_new ();
  srv.loop = g_main_loop_new (srv.context, FALSE);
  thread = g_thread_new ("server", server_thread, NULL);
  g_mutex_lock (&srv.lock);
  while (!srv.ready)
    g_cond_wait (&srv.cond, &srv.lock);
  g_mutex_unlock (&srv.lock);
  if (srv.vp8 == NULL || (have_h264 && srv.h264 == NULL))
    g_error ("server: %s", srv.error);

  g_test_add_func ("/webrtc/ws-scan", test_ws_scan);
  g_test_add_func ("/webrtc/http", test_http);
  g_test_add_func ("/webrtc/session", test_session);
  g_test_add_func ("/webrtc/h264", test_h264);
  ret = g_test_run ();

  g_main_loop_quit (srv.loop);
  g_thread_join (thread);
  g_main_loop_unref (srv.loop);
  g_main_context_unref (srv.context);
  lingbot_test_rm_rf (tmpdir);
  return ret;
}

/* lingbot-gst: the WebRTC server under hostile clients (suite webrtc)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Each test runs a lingbot-webrtc-server of its own in a thread of this
 * process on 127.0.0.1 (any free port), with a stand-in source
 * (videotestsrc) instead of the model; the test thread is the clients, on
 * raw sockets with every wait bounded (HANG_GUARD_S).
 *
 *   /webrtc-hardening/linger       a client sends more than 1 MiB in one
 *     message and then keeps its socket open and silent: the server closes
 *     it with 1009, lingers at most 2 s without blocking, and meanwhile
 *     answers another client's HTTP request and its WebSocket (welcome);
 *     the lingering connection is released though A never closes; an
 *     upgraded WebSocket outlives the 1 s idle timeout
 *   /webrtc-hardening/idle-timeout a silent connection and one with half a
 *     request are closed after the idle timeout (1 s here); a complete
 *     request is answered, with "Connection: close"
 *   /webrtc-hardening/cap          with --max-connections 4, a 5th
 *     connection gets a 503 and is closed; once the 4 close, a client is
 *     served again
 *   /webrtc-hardening/emfile       with RLIMIT_NOFILE lowered in this
 *     process, connections are opened until accept() fails with EMFILE;
 *     once they close, a new client is served again
 *   /webrtc-hardening/leave-during-offer  16 peers of one session leave
 *     (the socket closed; the last one says bye) right after their welcome
 *     or their offer; for the first 3, webrtcbin's thread is held
 *     (gst_sdp_message_as_text() is wrapped) with set-local-description
 *     queued until the branch is being stopped: no promise is freed
 *     unanswered (a GStreamer warning, fatal here) and no peer leaks
 *     (LeakSanitizer in the sanitizer suite)
 *   /webrtc-hardening/parse-no-gerror  json-glib failing without a GError
 *     (simulated here: json_parser_load_from_data() is wrapped) gives
 *     "not JSON (the JSON parser gave no reason)", not a crash
 *
 * Exit 77 when the elements of the stand-in session are not installed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <gio/gio.h>
#include <gst/gst.h>
#include <gst/sdp/sdp.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>

#include "lingbot/control.h"
#include "webrtc-messages.h"
#include "webrtc-server.h"
#include "test-server-thread.h"
#include "test-ws-frame.h"

#define HANG_GUARD_S 15

/* ---- json-glib failing without a GError, on demand ---- */

static gboolean json_fails_silently;

/* the server's copy of webrtc-messages.c calls this one (the executable's
 * definition wins over libjson-glib's) */
gboolean
json_parser_load_from_data (JsonParser * parser, const gchar * data,
    gssize length, GError ** error)
{
  static gboolean (*real) (JsonParser *, const gchar *, gssize, GError **);

  if (json_fails_silently)
    return FALSE;
  if (real == NULL)
    real = dlsym (RTLD_NEXT, "json_parser_load_from_data");
  g_assert_nonnull (real);
  return real (parser, data, length, error);
}

/* ---- a window in webrtcbin's operation thread, on demand ---- */

static gint offer_window;       /* atomic: 1 armed, 2 open, 3 closing */

/* Armed, the first call on a webrtcbin operation thread ("webrtc:pc"):
 * the server's on_offer_created(), right after it queued
 * set-local-description (webrtcbin's own call comes when that runs).  It
 * holds the thread until the test has closed the client's socket and the
 * peer is released, then 300 ms more: the server stops the branch meanwhile
 * (its state change waits for this thread), and the queued call is dropped
 * unanswered. */
gchar *
gst_sdp_message_as_text (const GstSDPMessage * msg)
{
  static gchar *(*real) (const GstSDPMessage *);
  char name[17] = "";

  if (real == NULL)
    real = dlsym (RTLD_NEXT, "gst_sdp_message_as_text");
  g_assert_nonnull (real);
  prctl (PR_GET_NAME, name, 0, 0, 0);
  if (g_str_has_prefix (name, "webrtc:pc")
      && g_atomic_int_compare_and_exchange (&offer_window, 1, 2)) {
    while (g_atomic_int_get (&offer_window) != 3)
      g_usleep (1000);
    g_usleep (300 * 1000);
    g_atomic_int_set (&offer_window, 0);
  }
  return real (msg);
}

static gint64 deadline;

#define WAIT_UNTIL(cond, what) G_STMT_START { \
    while (!(cond)) { \
      if (g_get_monotonic_time () > deadline) \
        g_error ("timed out waiting for %s", what); \
      g_usleep (5000); \
    } \
  } G_STMT_END

/* ---- raw clients ---- */

/* a blocking TCP socket to the server (operations time out after
 * HANG_GUARD_S), or NULL with @error set */
static GSocket *
tcp_connect (guint port, GError ** error)
{
  g_autoptr (GInetAddress) lo = g_inet_address_new_loopback
      (G_SOCKET_FAMILY_IPV4);
  g_autoptr (GSocketAddress) addr = g_inet_socket_address_new (lo,
      (guint16) port);
  GSocket *s = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
      G_SOCKET_PROTOCOL_TCP, error);

  if (s == NULL)
    return NULL;
  g_socket_set_timeout (s, HANG_GUARD_S);
  if (!g_socket_connect (s, addr, NULL, error)) {
    g_object_unref (s);
    return NULL;
  }
  return s;
}

static void
send_all (GSocket * s, const void *data, gsize len)
{
  gsize sent = 0;

  while (sent < len) {
    g_autoptr (GError) err = NULL;
    gssize n = g_socket_send (s, (const char *) data + sent, len - sent, NULL,
        &err);

    g_assert_no_error (err);
    sent += (gsize) n;
  }
}

/* reads into @acc until it holds @needle (or, with %NULL, until the end of
 * the stream or a reset) or @within_s seconds passed: whether that came */
static gboolean
read_until (GSocket * s, GString * acc, const char *needle, int within_s)
{
  gint64 end = g_get_monotonic_time () + within_s * G_USEC_PER_SEC;

  for (;;) {
    g_autoptr (GError) err = NULL;
    char buf[16384];
    gint64 left = end - g_get_monotonic_time ();
    gssize n;

    if (needle && g_strstr_len (acc->str, (gssize) acc->len, needle))
      return TRUE;
    if (left <= 0)
      return FALSE;
    if (!g_socket_condition_timed_wait (s, G_IO_IN, left, NULL, NULL))
      return FALSE;
    n = g_socket_receive_with_blocking (s, buf, sizeof buf, FALSE, NULL, &err);
    if (n > 0)
      g_string_append_len (acc, buf, n);
    else if (n == 0 || !g_error_matches (err, G_IO_ERROR,
            G_IO_ERROR_WOULD_BLOCK))
      return needle == NULL;    /* the end of the stream, or a reset */
  }
}

/* GET @path on a new connection: the whole answer, or NULL when none came
 * within @within_s seconds */
static char *
http_get (guint port, const char *path, int within_s)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (GSocket) s = tcp_connect (port, &err);
  g_autofree char *req = g_strdup_printf ("GET %s HTTP/1.1\r\nHost: "
      "127.0.0.1:%u\r\n\r\n", path, port);
  GString *acc = g_string_new (NULL);

  g_assert_no_error (err);
  send_all (s, req, strlen (req));
  if (!read_until (s, acc, NULL, within_s) || acc->len == 0) {
    g_string_free (acc, TRUE);
    return NULL;
  }
  return g_string_free (acc, FALSE);
}

static guint
status_of (const char *answer)
{
  if (answer == NULL || !g_str_has_prefix (answer, "HTTP/1.1 "))
    return 0;
  return (guint) g_ascii_strtoull (answer + 9, NULL, 10);
}

/* a WebSocket on /ws: the socket after the 101, the bytes after it in
 * @acc */
static GSocket *
ws_open_path (guint port, const char *path, GString * acc, int within_s)
{
  g_autoptr (GError) err = NULL;
  GSocket *s = tcp_connect (port, &err);
  g_autofree char *req = g_strdup_printf ("GET %s HTTP/1.1\r\n"
      "Host: 127.0.0.1:%u\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
      "Sec-WebSocket-Version: 13\r\n\r\n", path, port);
  char *end;

  g_assert_no_error (err);
  send_all (s, req, strlen (req));
  if (!read_until (s, acc, "\r\n\r\n", within_s))
    g_error ("no WebSocket handshake answer within %d s", within_s);
  g_assert_true (g_str_has_prefix (acc->str,
          "HTTP/1.1 101 Switching Protocols"));
  g_assert_nonnull (strstr (acc->str, "Connection: Upgrade"));
  end = strstr (acc->str, "\r\n\r\n");
  g_string_erase (acc, 0, end + 4 - acc->str);
  return s;
}

static GSocket *
ws_open (guint port, GString * acc, int within_s)
{
  return ws_open_path (port, "/ws", acc, within_s);
}

/* the server's frames in @acc (unmasked): the close code of a close frame
 * (0: none yet); with @text, whether a text frame containing it came */
static guint
ws_scan (GString * acc, const char *text, gboolean * found)
{
  gsize at = 0;

  if (found)
    *found = FALSE;
  while (acc->len - at >= 2) {
    const guint8 *h = (const guint8 *) acc->str + at;
    guint64 len = h[1] & 0x7f;
    gsize hl = 2;

    if (len == 126) {
      if (acc->len - at < 4)
        break;
      len = ((guint) h[2] << 8) | h[3];
      hl = 4;
    } else if (len == 127) {
      if (acc->len - at < 10)
        break;
      len = 0;
      for (int i = 0; i < 8; i++)
        len = (len << 8) | h[2 + i];
      hl = 10;
    }
    if (acc->len - at < hl + len)
      break;
    if ((h[0] & 0x0f) == 8)
      return len >= 2 ? ((guint) h[hl] << 8) | h[hl + 1] : 1005;
    if ((h[0] & 0x0f) == 1 && text && found
        && g_strstr_len ((const char *) h + hl, (gssize) len, text))
      *found = TRUE;
    at += hl + (gsize) len;
  }
  return 0;
}

/* reads what comes within @within_ms: FALSE at the end of the stream */
static gboolean
read_some (GSocket * s, GString * acc, int within_ms)
{
  g_autoptr (GError) err = NULL;
  char buf[16384];
  gssize n;

  if (!g_socket_condition_timed_wait (s, G_IO_IN,
          within_ms * G_TIME_SPAN_MILLISECOND, NULL, NULL))
    return TRUE;
  n = g_socket_receive_with_blocking (s, buf, sizeof buf, FALSE, NULL, &err);
  if (n > 0)
    g_string_append_len (acc, buf, n);
  return n > 0 || g_error_matches (err, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK);
}

/* reads until a text frame containing @text came: FALSE after @within_s
 * seconds, a close frame or the end of the stream */
static gboolean
ws_wait_text (GSocket * s, GString * acc, const char *text, int within_s)
{
  gint64 end = g_get_monotonic_time () + within_s * G_USEC_PER_SEC;
  gboolean found = FALSE;

  for (;;) {
    if (ws_scan (acc, text, &found) != 0 && !found)
      return FALSE;
    if (found)
      return TRUE;
    if (g_get_monotonic_time () >= end || !read_some (s, acc, 100))
      return FALSE;
  }
}

/* reads until a close frame came: its code, or 0 */
static guint
ws_wait_close (GSocket * s, GString * acc, int within_s)
{
  gint64 end = g_get_monotonic_time () + within_s * G_USEC_PER_SEC;
  guint code;

  while ((code = ws_scan (acc, NULL, NULL)) == 0) {
    if (g_get_monotonic_time () >= end || !read_some (s, acc, 100))
      return 0;
  }
  return code;
}

static void
ws_send_text (GSocket * s, const char *text)
{
  guint8 hdr[14];
  gsize h = lingbot_test_ws_frame_header (hdr, TRUE, 1, strlen (text), 0);

  send_all (s, hdr, h);
  send_all (s, text, strlen (text));
}

/* ---- the tests ---- */

static void
test_linger (void)
{
  TestServer ts;
  g_autoptr (GString) a_in = g_string_new (NULL);
  g_autoptr (GString) c_in = g_string_new (NULL);
  g_autoptr (GSocket) a = NULL;
  g_autoptr (GSocket) c = NULL;
  g_autofree char *answer = NULL, *again = NULL;
  g_autofree guint8 *payload = g_malloc0 (64 * 1024);
  guint8 hdr[14];
  gsize h;

  test_server_config (&ts);
  ts.cfg.idle_timeout = 1;
  test_server_start (&ts);
  deadline = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;

  /* A: a session, then one text message of 2 MiB: its header and 64 KiB,
   * then silence with the socket open */
  a = ws_open (ts.port, a_in, HANG_GUARD_S);
  g_assert_true (ws_wait_text (a, a_in, "\"type\":\"welcome\"", HANG_GUARD_S));
  h = lingbot_test_ws_frame_header (hdr, TRUE, 1, 2 * 1024 * 1024, 0);
  send_all (a, hdr, h);
  send_all (a, payload, 64 * 1024);
  g_assert_cmpuint (ws_wait_close (a, a_in, HANG_GUARD_S), ==,
      SOUP_WEBSOCKET_CLOSE_TOO_BIG);
  g_assert_cmpuint (lingbot_webrtc_server_get_n_too_big (ts.server), ==, 1);

  /* while the server lingers on A: an HTTP answer and a WebSocket
   * welcome for others, within 5 s each */
  answer = http_get (ts.port, "/", 5);
  g_assert_cmpuint (status_of (answer), ==, 200);
  c = ws_open (ts.port, c_in, 5);
  g_assert_true (ws_wait_text (c, c_in, "\"type\":\"welcome\"", 5));

  /* A got the end of the stream with the close frame (the write side is
   * shut down first), but it stays open and silent: the server drops
   * A's connection at the end of the lingering (2 s) all the same, and
   * still answers after it */
  g_assert_true (read_until (a, a_in, NULL, HANG_GUARD_S));
  WAIT_UNTIL (lingbot_webrtc_server_get_n_connections (ts.server) == 1,
      "the lingering connection released (C's left)");
  again = http_get (ts.port, "/app.js", 5);
  g_assert_cmpuint (status_of (again), ==, 200);

  /* C, a WebSocket, was open longer than the idle timeout (1 s): not
   * closed by it */
  g_assert_cmpuint (ws_scan (c_in, NULL, NULL), ==, 0);
  g_assert_true (read_some (c, c_in, 10));
  g_assert_cmpuint (ws_scan (c_in, NULL, NULL), ==, 0);
  g_assert_cmpuint (lingbot_webrtc_server_get_n_idle_timeouts (ts.server), ==,
      0);
  ws_send_text (c, "{\"type\":\"bye\"}");
  g_assert_cmpuint (ws_wait_close (c, c_in, HANG_GUARD_S), ==,
      SOUP_WEBSOCKET_CLOSE_NORMAL);
  test_server_stop (&ts);
}

static void
test_idle_timeout (void)
{
  TestServer ts;
  g_autoptr (GError) err = NULL;
  g_autoptr (GSocket) silent = NULL;
  g_autoptr (GSocket) half = NULL;
  g_autoptr (GString) acc = g_string_new (NULL);
  g_autofree char *answer = NULL;
  const char partial[] = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n";

  test_server_config (&ts);
  ts.cfg.idle_timeout = 1;
  test_server_start (&ts);
  deadline = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;

  silent = tcp_connect (ts.port, &err);
  g_assert_no_error (err);
  half = tcp_connect (ts.port, &err);
  g_assert_no_error (err);
  send_all (half, partial, strlen (partial));
  WAIT_UNTIL (lingbot_webrtc_server_get_n_connections (ts.server) == 2,
      "two connections accepted");

  /* both closed by the server after 1 s, without an answer */
  g_assert_true (read_until (silent, acc, NULL, HANG_GUARD_S));
  g_assert_cmpuint (acc->len, ==, 0);
  g_assert_true (read_until (half, acc, NULL, HANG_GUARD_S));
  g_assert_cmpuint (acc->len, ==, 0);
  g_assert_cmpuint (lingbot_webrtc_server_get_n_idle_timeouts (ts.server), ==,
      2);
  WAIT_UNTIL (lingbot_webrtc_server_get_n_connections (ts.server) == 0,
      "the closed connections' descriptors released");

  /* a complete request: answered, and the connection closed after it */
  answer = http_get (ts.port, "/style.css", 5);
  g_assert_cmpuint (status_of (answer), ==, 200);
  g_assert_nonnull (strstr (answer, "\r\nConnection: close\r\n"));
  g_assert_cmpuint (lingbot_webrtc_server_get_n_idle_timeouts (ts.server), ==,
      2);
  test_server_stop (&ts);
}

static void
test_cap (void)
{
  TestServer ts;
  g_autoptr (GError) err = NULL;
  g_autoptr (GSocket) fifth = NULL;
  g_autoptr (GString) acc = g_string_new (NULL);
  g_autofree char *answer = NULL;
  GSocket *idle[4];

  test_server_config (&ts);
  ts.cfg.max_connections = 4;
  ts.cfg.idle_timeout = 60;
  test_server_start (&ts);
  g_assert_cmpuint (lingbot_webrtc_server_get_max_connections (ts.server), ==,
      4);
  deadline = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;

  for (guint i = 0; i < 4; i++) {
    idle[i] = tcp_connect (ts.port, &err);
    g_assert_no_error (err);
  }
  WAIT_UNTIL (lingbot_webrtc_server_get_n_connections (ts.server) == 4,
      "four connections accepted");

  /* the 5th: a 503 unasked, then the end of the stream */
  fifth = tcp_connect (ts.port, &err);
  g_assert_no_error (err);
  g_assert_true (read_until (fifth, acc, NULL, HANG_GUARD_S));
  g_assert_true (g_str_has_prefix (acc->str,
          "HTTP/1.1 503 Service Unavailable\r\n"));
  g_assert_cmpuint (lingbot_webrtc_server_get_n_refused (ts.server), ==, 1);
  g_assert_cmpuint (lingbot_webrtc_server_get_n_connections (ts.server), ==, 4);

  /* the four go: served again */
  for (guint i = 0; i < 4; i++)
    g_object_unref (idle[i]);
  WAIT_UNTIL (lingbot_webrtc_server_get_n_connections (ts.server) == 0,
      "the four connections released");
  answer = http_get (ts.port, "/", 5);
  g_assert_cmpuint (status_of (answer), ==, 200);
  g_assert_cmpuint (lingbot_webrtc_server_get_n_refused (ts.server), ==, 1);
  test_server_stop (&ts);
}

static guint
open_descriptors (void)
{
  GDir *d = g_dir_open ("/proc/self/fd", 0, NULL);
  guint n = 0;

  g_assert_nonnull (d);
  while (g_dir_read_name (d))
    n++;
  g_dir_close (d);
  return n;
}

static void
test_emfile (void)
{
  TestServer ts;
  g_autoptr (GPtrArray) conns = g_ptr_array_new_with_free_func (g_object_unref);
  g_autofree char *answer = NULL;
  struct rlimit old, low;
  guint errors;
  int spare;

  test_server_config (&ts);
  ts.cfg.idle_timeout = 60;
  test_server_start (&ts);
  deadline = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;
  errors = lingbot_webrtc_server_get_n_accept_errors (ts.server);

  /* a spare descriptor, then a limit a few dozen above what is open */
  spare = open ("/dev/null", O_RDONLY | O_CLOEXEC);
  g_assert_cmpint (spare, >=, 0);
  g_assert_cmpint (getrlimit (RLIMIT_NOFILE, &old), ==, 0);
  low = old;
  low.rlim_cur = MAX (64, open_descriptors () + 24);
  g_assert_cmpuint (low.rlim_cur, <, old.rlim_cur);
  g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &low), ==, 0);

  /* connections (a descriptor here and one in the server each) until
   * this process has none left */
  for (;;) {
    g_autoptr (GError) err = NULL;
    GSocket *s = tcp_connect (ts.port, &err);

    if (s == NULL) {
      g_assert_error (err, G_IO_ERROR, G_IO_ERROR_TOO_MANY_OPEN_FILES);
      break;
    }
    g_ptr_array_add (conns, s);
    g_assert_cmpuint (conns->len, <, 1000);
  }
  g_test_message ("%u connections with RLIMIT_NOFILE %u", conns->len,
      (guint) low.rlim_cur);
  /* the server may have hit EMFILE already; if not, one more connection
   * on the spare descriptor waits in the backlog with none left */
  g_usleep (200 * 1000);
  if (lingbot_webrtc_server_get_n_accept_errors (ts.server) == errors) {
    g_autoptr (GError) err = NULL;
    GSocket *s;

    close (spare);
    spare = -1;
    s = tcp_connect (ts.port, &err);
    g_assert_no_error (err);
    g_ptr_array_add (conns, s);
  }
  WAIT_UNTIL (lingbot_webrtc_server_get_n_accept_errors (ts.server) > errors,
      "accept() failing with EMFILE");

  /* all go: the server accepts again (the limit is still the low one) */
  g_ptr_array_set_size (conns, 0);
  if (spare >= 0)
    close (spare);
  answer = http_get (ts.port, "/", 5);
  g_assert_cmpuint (status_of (answer), ==, 200);
  WAIT_UNTIL (lingbot_webrtc_server_get_n_connections (ts.server) == 0,
      "every connection released");
  g_assert_cmpint (setrlimit (RLIMIT_NOFILE, &old), ==, 0);
  test_server_stop (&ts);
}

/* the resume token of the welcome in @acc */
static char *
welcome_token (GString * acc)
{
  const char *at = strstr (acc->str, "\"resume\":\"");
  const char *end;

  g_assert_nonnull (at);
  at += strlen ("\"resume\":\"");
  end = strchr (at, '"');
  g_assert_nonnull (end);
  return g_strndup (at, end - at);
}

static void
test_leave_during_offer (void)
{
  TestServer ts;
  g_autofree char *token = NULL;
  const guint rounds = 16, held = 3;

  test_server_config (&ts);
  ts.cfg.resume_timeout = 5;
  test_server_start (&ts);
  deadline = g_get_monotonic_time () + 120 * G_USEC_PER_SEC;

  for (guint i = 0; i < rounds; i++) {
    g_autoptr (GString) in = g_string_new (NULL);
    g_autofree char *path = token ? g_strdup_printf ("/ws?resume=%s",
        token) : g_strdup ("/ws");
    g_autoptr (GSocket) c = NULL;

    if (i < held)
      g_atomic_int_set (&offer_window, 1);
    c = ws_open_path (ts.port, path, in, HANG_GUARD_S);
    g_assert_true (ws_wait_text (c, in, "\"type\":\"welcome\"", HANG_GUARD_S));
    if (token == NULL)
      token = welcome_token (in);
    if (i < held) {
      /* the offer made, its setting queued, the thread held */
      WAIT_UNTIL (g_atomic_int_get (&offer_window) == 2, "the offer");
    } else if (i % 2) {
      /* gone right after the offer (webrtcbin sets it) */
      g_assert_true (ws_wait_text (c, in, "\"type\":\"offer\"", HANG_GUARD_S));
    }
    /* else gone right after the welcome (webrtcbin makes the offer) */
    if (i + 1 == rounds) {
      ws_send_text (c, "{\"type\":\"bye\"}");
      g_assert_cmpuint (ws_wait_close (c, in, HANG_GUARD_S), ==,
          SOUP_WEBSOCKET_CLOSE_NORMAL);
    } else {
      g_socket_close (c, NULL);
      /* the next one resumes the session after this peer is released
       * (else it would take the session over: another path) */
      WAIT_UNTIL (lingbot_webrtc_server_get_n_peers (ts.server) == 0,
          "the peer released");
    }
    if (i < held) {
      g_atomic_int_set (&offer_window, 3);
      WAIT_UNTIL (g_atomic_int_get (&offer_window) == 0, "the window");
    }
  }
  WAIT_UNTIL (lingbot_webrtc_server_get_n_sessions (ts.server) == 0,
      "the session closed by the bye");
  g_assert_cmpint (lingbot_webrtc_server_get_n_replaced (ts.server), ==, 0);
  test_server_stop (&ts);
}

static void
test_parse_no_gerror (void)
{
  g_autoptr (JsonParser) parser = NULL;
  g_autofree char *why = NULL;
  LingbotWebrtcSignal sig = { 0 };
  LingbotWebrtcInput in = { 0 };
  JsonObject *o = NULL;

  json_fails_silently = TRUE;
  parser = lingbot_webrtc_parse_object ("{}", 2, &o, &why);
  g_assert_null (parser);
  g_assert_null (o);
  g_assert_cmpstr (why, ==, "not JSON (the JSON parser gave no reason)");

  /* the same reason in the replies of both handlers */
  sig.max_message = 1024;
  lingbot_webrtc_check_signal (&sig, FALSE, "{\"type\":\"bye\"}", 14);
  g_assert_cmpint (sig.verdict, ==, LINGBOT_WEBRTC_SIGNAL_DROP);
  g_assert_cmpstr (sig.why, ==, "not JSON (the JSON parser gave no reason)");
  lingbot_webrtc_signal_clear (&sig);
  in.viewer = TRUE;
  lingbot_webrtc_check_input (&in, FALSE, "{\"event\":\"KeyPress\","
      "\"key\":\"KeyW\"}", 33);
  g_assert_cmpint (in.verdict, ==, LINGBOT_WEBRTC_INPUT_DROP);
  g_assert_cmpstr (in.why, ==, "not JSON (the JSON parser gave no reason)");
  g_assert_false (in.has_id);
  lingbot_webrtc_input_clear (&in);
  json_fails_silently = FALSE;

  /* and json-glib itself again */
  lingbot_webrtc_check_input (&in, FALSE, "{\"event\":\"KeyPress\","
      "\"key\":\"KeyW\"}", 33);
  g_assert_cmpint (in.verdict, ==, LINGBOT_WEBRTC_INPUT_KEY);
  g_assert_cmpstr (in.key, ==, "KeyW");
  lingbot_webrtc_input_clear (&in);
  lingbot_webrtc_check_signal (&sig, FALSE, "{\"type\":", 8);
  g_assert_cmpint (sig.verdict, ==, LINGBOT_WEBRTC_SIGNAL_DROP);
  g_assert_true (g_str_has_prefix (sig.why, "not JSON ("));
  lingbot_webrtc_signal_clear (&sig);
}

/* one input message: the verdict and the reason (NULL: not a DROP) */
static void
assert_input (const char *text, LingbotWebrtcInputVerdict verdict,
    const char *why)
{
  LingbotWebrtcInput in = { 0 };

  in.viewer = TRUE;
  lingbot_webrtc_check_input (&in, FALSE, text, strlen (text));
  g_assert_cmpint (in.verdict, ==, verdict);
  g_assert_cmpstr (in.why, ==, why);
  lingbot_webrtc_input_clear (&in);
}

/* mistyped "id" members are refused with a reason, not pressed, and key
 * names that are no key of the world are ignored, not sent upstream
 * (earlier versions sent both upstream without a word: no error, no
 * echo) */
static void
test_input_members (void)
{
  LingbotWebrtcInput in = { 0 };

  assert_input ("{\"event\":\"KeyPress\",\"key\":\"ArrowUp\",\"id\":\"str\"}",
      LINGBOT_WEBRTC_INPUT_DROP, "\"id\" is not an integer");
  assert_input ("{\"event\":\"KeyPress\",\"key\":\"ArrowUp\",\"id\":1.5}",
      LINGBOT_WEBRTC_INPUT_DROP, "\"id\" is not an integer");
  assert_input ("{\"event\":\"KeyRelease\",\"key\":\"KeyW\",\"id\":null}",
      LINGBOT_WEBRTC_INPUT_DROP, "\"id\" is not an integer");
  assert_input ("{\"id\":\"7\",\"request\":{\"type\":\"navigationEvent\","
      "\"event\":{\"event\":\"KeyPress\",\"key\":\"Up\"}}}",
      LINGBOT_WEBRTC_INPUT_DROP, "\"id\" is not an integer");
  /* a key the world has no use for is ignored, as a mouse event: no
   * error reply for Shift (gstwebrtc-api sends every key) */
  assert_input ("{\"event\":\"KeyPress\",\"key\":\"NoSuchKey\"}",
      LINGBOT_WEBRTC_INPUT_IGNORE, NULL);
  assert_input ("{\"event\":\"KeyRelease\",\"key\":\"Shift_L\",\"id\":3}",
      LINGBOT_WEBRTC_INPUT_IGNORE, NULL);
  /* the valid forms still pass: DOM codes, X keysyms, aliases, any case */
  assert_input ("{\"event\":\"KeyPress\",\"key\":\"ArrowUp\",\"id\":17}",
      LINGBOT_WEBRTC_INPUT_KEY, NULL);
  assert_input ("{\"event\":\"KeyRelease\",\"key\":\"w\"}",
      LINGBOT_WEBRTC_INPUT_KEY, NULL);
  assert_input ("{\"event\":\"MouseMove\",\"x\":1.0,\"y\":2.0}",
      LINGBOT_WEBRTC_INPUT_IGNORE, NULL);

  /* the id of an accepted press is reported for the echo, the key's bit
   * set, the X keysym mapped */
  in.viewer = TRUE;
  lingbot_webrtc_check_input (&in, FALSE, "{\"event\":\"KeyPress\","
      "\"key\":\"Left\",\"id\":9}", 40);
  g_assert_cmpint (in.verdict, ==, LINGBOT_WEBRTC_INPUT_KEY);
  g_assert_true (in.has_id);
  g_assert_cmpint (in.id, ==, 9);
  g_assert_cmpstr (in.key, ==, "ArrowLeft");
  g_assert_cmpuint (in.key_bit, ==, LINGBOT_KEY_A);
  lingbot_webrtc_input_clear (&in);
}

int
main (int argc, char **argv)
{
  const char *needed[] = { "webrtcbin", "nicesrc", "nicesink", "dtlssrtpenc",
    "sctpenc", "videotestsrc", "videoconvert", "clocksync", "tee", "queue",
    "vp8enc", "rtpvp8pay", NULL
  };

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
  g_test_add_func ("/webrtc-hardening/parse-no-gerror", test_parse_no_gerror);
  g_test_add_func ("/webrtc-hardening/input-members", test_input_members);
  g_test_add_func ("/webrtc-hardening/idle-timeout", test_idle_timeout);
  g_test_add_func ("/webrtc-hardening/cap", test_cap);
  g_test_add_func ("/webrtc-hardening/emfile", test_emfile);
  g_test_add_func ("/webrtc-hardening/linger", test_linger);
  g_test_add_func ("/webrtc-hardening/leave-during-offer",
      test_leave_during_offer);
  return g_test_run ();
}

/* lingbot-gst: the WebRTC sender's HTTP room
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * TCP connections, accepted by the server itself (see Client in
 * webrtc-server-private.h): the connection cap, the idle timeout, failed
 * accept() calls; and the static files of the page and the start image.
 */
#define GST_USE_UNSTABLE_API 1

#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <gst/gst.h>

#include "webrtc-server-private.h"

/* after a failed accept() (EMFILE, ENFILE, ENOBUFS, an error of the
 * connection), the listener is watched again this much later (ms) */
#define ACCEPT_RETRY_MS 100

/* ------------------------------------------------------------------ */
/* TCP connections: accept, cap, idle timeout                         */
/* ------------------------------------------------------------------ */

#define CLIENT_KEY "lingbot-client"

void
http_client_stop_timer (Client * cl)
{
  if (cl->idle) {
    g_source_destroy (cl->idle);
    g_clear_pointer (&cl->idle, g_source_unref);
  }
}

/* the GSocketConnection is finalised: its descriptor is closed */
static void
client_free (gpointer data)
{
  Client *cl = data;

  http_client_stop_timer (cl);
  if (cl->server) {
    g_hash_table_remove (cl->server->clients, GUINT_TO_POINTER (cl->id));
    g_atomic_int_add (&cl->server->n_connections, -1);
  }
  g_free (cl);
}

/* too slow: both directions are shut down, so that libsoup reads the end
 * of the stream (or fails its write) and lets the connection go; the
 * descriptor is closed with it */
static gboolean
client_idle_expired (gpointer user_data)
{
  Client *cl = user_data;

  g_clear_pointer (&cl->idle, g_source_unref);
  if (g_socket_is_closed (cl->socket))
    return G_SOURCE_REMOVE;     /* done, not released yet */
  g_atomic_int_inc (&cl->server->n_idle_timeouts);
  g_message ("connection %u: no complete HTTP request (or response taken) "
      "within %u s: closed", cl->id, cl->server->idle_timeout);
  g_socket_shutdown (cl->socket, TRUE, TRUE, NULL);
  return G_SOURCE_REMOVE;
}

/* (re)starts the deadline: idle_timeout seconds from now */
static void
client_arm (Client * cl)
{
  http_client_stop_timer (cl);
  cl->idle = g_timeout_source_new (cl->server->idle_timeout * 1000);
  g_source_set_callback (cl->idle, client_idle_expired, cl, NULL);
  g_source_attach (cl->idle, cl->server->context);
}

Client *
http_client_of_message (LingbotWebrtcServer * server, SoupServerMessage * msg)
{
  GSocketAddress *addr = soup_server_message_get_remote_address (msg);
  gpointer id = addr ? g_object_get_data (G_OBJECT (addr), CLIENT_KEY) : NULL;

  return id ? g_hash_table_lookup (server->clients, id) : NULL;
}

/* a complete request: its response has idle_timeout seconds; the
 * connection closes after it (RFC 9112 9.6: a server without persistent
 * connections says "close" in every response) */
void
http_on_request_read (SoupServer * soup, SoupServerMessage * msg,
    gpointer user_data)
{
  Client *cl = http_client_of_message (user_data, msg);

  soup_message_headers_replace (soup_server_message_get_response_headers
      (msg), "Connection", "close");
  if (cl)
    client_arm (cl);
}

/* answered (or failed): soup closes the connection now */
void
http_on_request_done (SoupServer * soup, SoupServerMessage * msg,
    gpointer user_data)
{
  Client *cl = http_client_of_message (user_data, msg);

  if (cl)
    http_client_stop_timer (cl);
}

/* over the cap: a 503 (what the client sent is read first, so that the
 * close is not a reset that could discard the answer), then closed */
static void
client_refuse (LingbotWebrtcServer * server, GSocketConnection * conn)
{
  static const char answer[] = "HTTP/1.1 503 Service Unavailable\r\n"
      "Connection: close\r\nContent-Length: 0\r\n\r\n";
  GSocket *socket = g_socket_connection_get_socket (conn);
  char drain[4096];
  guint n = (guint) g_atomic_int_add (&server->n_refused, 1) + 1;

  if (n == 1 || n % 100 == 0)
    g_message ("connection refused with 503: %u of %u connections open "
        "(--max-connections); %u refused so far",
        (guint) g_atomic_int_get (&server->n_connections),
        server->max_connections, n);
  g_socket_receive_with_blocking (socket, drain, sizeof drain, FALSE, NULL,
      NULL);
  g_socket_send_with_blocking (socket, answer, sizeof answer - 1, FALSE, NULL,
      NULL);
  g_io_stream_close (G_IO_STREAM (conn), NULL, NULL);
}

static void
client_new (LingbotWebrtcServer * server, GSocketConnection * conn)
{
  g_autoptr (GSocketAddress) local = NULL;
  g_autoptr (GSocketAddress) remote = NULL;
  Client *cl;

  local = g_socket_connection_get_local_address (conn, NULL);
  remote = g_socket_connection_get_remote_address (conn, NULL);
  if (local == NULL || remote == NULL) {        /* gone already */
    g_io_stream_close (G_IO_STREAM (conn), NULL, NULL);
    return;
  }
  if ((guint) g_atomic_int_get (&server->n_connections) >=
      server->max_connections) {
    client_refuse (server, conn);
    return;
  }
  cl = g_new0 (Client, 1);
  cl->server = server;
  if (++server->next_client == 0)
    server->next_client = 1;
  cl->id = server->next_client;
  cl->socket = g_socket_connection_get_socket (conn);
  g_atomic_int_inc (&server->n_connections);
  g_hash_table_insert (server->clients, GUINT_TO_POINTER (cl->id), cl);
  g_object_set_data_full (G_OBJECT (conn), CLIENT_KEY, cl, client_free);
  g_object_set_data (G_OBJECT (remote), CLIENT_KEY, GUINT_TO_POINTER (cl->id));
  g_socket_set_option (cl->socket, IPPROTO_TCP, TCP_NODELAY, TRUE, NULL);
  client_arm (cl);
  soup_server_accept_iostream (server->soup, G_IO_STREAM (conn), local,
      remote, NULL);
}

static gboolean
accept_retry (gpointer user_data)
{
  LingbotWebrtcServer *server = user_data;

  g_clear_pointer (&server->accept_retry, g_source_unref);
  http_accept_next (server);
  return G_SOURCE_REMOVE;
}

/* the listening socket stays readable while accept() fails (the
 * connection waits in the backlog): watched again after a pause, not at
 * once, which would spin */
static void
accept_failed (LingbotWebrtcServer * server, const GError * err)
{
  g_atomic_int_inc (&server->n_accept_errors);
  if (server->accept_failures++ == 0)
    g_message ("accept() failed: %s (%u connections open); trying again "
        "every %u ms", err->message,
        (guint) g_atomic_int_get (&server->n_connections), ACCEPT_RETRY_MS);
  server->accept_retry = g_timeout_source_new (ACCEPT_RETRY_MS);
  g_source_set_callback (server->accept_retry, accept_retry, server, NULL);
  g_source_attach (server->accept_retry, server->context);
}

static void
on_accepted (GObject * source, GAsyncResult * res, gpointer user_data)
{
  LingbotWebrtcServer *server = user_data;
  g_autoptr (GError) err = NULL;
  GSocketConnection *conn;

  conn = g_socket_listener_accept_finish (G_SOCKET_LISTENER (source), res,
      NULL, &err);
  if (g_error_matches (err, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return;                     /* the server is gone */
  g_main_context_push_thread_default (server->context);
  if (conn == NULL) {
    accept_failed (server, err);
  } else {
    if (server->accept_failures > 0) {
      g_message ("accepting again after %u failed accept() calls",
          server->accept_failures);
      server->accept_failures = 0;
    }
    client_new (server, conn);
    g_object_unref (conn);
    http_accept_next (server);
  }
  g_main_context_pop_thread_default (server->context);
}

/* one accept at a time, on the server's context */
void
http_accept_next (LingbotWebrtcServer * server)
{
  g_main_context_push_thread_default (server->context);
  g_socket_listener_accept_async (server->listener, server->accept_cancel,
      on_accepted, server);
  g_main_context_pop_thread_default (server->context);
}

/* ------------------------------------------------------------------ */
/* static files                                                       */
/* ------------------------------------------------------------------ */

/**
 * lingbot_webrtc_resolve_path:
 * @root: the page folder
 * @path: a request path as received (still percent-encoded), from "/"
 * @status: (out): 200, 403 (an escape: "..", a backslash, NUL, a bad
 *   escape, a link out of @root) or 404 (missing, hidden, not a file)
 *
 * Returns: (transfer full) (nullable): the real path of the file below
 *   @root ("/" is index.html), or %NULL with *@status 403 or 404
 */
char *
lingbot_webrtc_resolve_path (const char *root, const char *path, guint * status)
{
  g_autofree char *decoded = NULL, *root_real = NULL, *full = NULL;
  g_autofree char *real = NULL;
  g_auto (GStrv) parts = NULL;
  GPtrArray *keep;

  *status = 404;
  if (path == NULL || path[0] != '/')
    return NULL;
  /* NULL for bad escapes and for %00 */
  decoded = g_uri_unescape_string (path, NULL);
  if (decoded == NULL || strchr (decoded, '\\') != NULL) {
    *status = 403;
    return NULL;
  }
  parts = g_strsplit (decoded, "/", -1);
  keep = g_ptr_array_new ();
  for (guint i = 0; parts[i]; i++) {
    if (strcmp (parts[i], "..") == 0) {
      g_ptr_array_free (keep, TRUE);
      *status = 403;
      return NULL;
    }
    if (parts[i][0] == '\0' || strcmp (parts[i], ".") == 0)
      continue;
    if (parts[i][0] == '.') {   /* no hidden files */
      g_ptr_array_free (keep, TRUE);
      return NULL;
    }
    g_ptr_array_add (keep, parts[i]);
  }
  if (keep->len == 0)
    g_ptr_array_add (keep, (gpointer) "index.html");
  g_ptr_array_insert (keep, 0, (gpointer) root);
  g_ptr_array_add (keep, NULL);
  full = g_build_filenamev ((char **) keep->pdata);
  g_ptr_array_free (keep, TRUE);

  root_real = realpath (root, NULL);
  real = realpath (full, NULL);
  if (root_real == NULL || real == NULL)
    return NULL;
  /* a symbolic link out of the folder */
  if (!g_str_has_prefix (real, root_real)
      || real[strlen (root_real)] != G_DIR_SEPARATOR) {
    *status = 403;
    return NULL;
  }
  if (!g_file_test (real, G_FILE_TEST_IS_REGULAR))
    return NULL;
  *status = 200;
  return g_steal_pointer (&real);
}

static const char *
content_type (const char *file)
{
  static const struct
  {
    const char *suffix, *type;
  } types[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".json", "application/json"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".jpg", "image/jpeg"},
    {".jpeg", "image/jpeg"},
    {".JPG", "image/jpeg"},
    {".JPEG", "image/jpeg"},
  };

  for (guint i = 0; i < G_N_ELEMENTS (types); i++)
    if (g_str_has_suffix (file, types[i].suffix))
      return types[i].type;
  return "application/octet-stream";
}

void
http_on_http (SoupServer * soup, SoupServerMessage * msg, const char *path,
    GHashTable * query, gpointer user_data)
{
  LingbotWebrtcServer *server = user_data;
  const char *method = soup_server_message_get_method (msg);
  GUri *uri = soup_server_message_get_uri (msg);
  const char *raw = uri ? g_uri_get_path (uri) : path;
  g_autofree char *file = NULL;
  g_autofree char *contents = NULL;
  gsize len = 0;
  guint status = 404;

  if (strcmp (method, "GET") != 0 && strcmp (method, "HEAD") != 0) {
    soup_server_message_set_status (msg, SOUP_STATUS_METHOD_NOT_ALLOWED, NULL);
    return;
  }
  if (strcmp (raw, START_IMAGE_PATH) == 0) {
    /* the configured start image, not a file of the page folder */
    if (server->image_real) {
      file = g_strdup (server->image_real);
      status = 200;
    }
  } else {
    /* the raw (still percent-encoded) path, not libsoup's decoded one */
    file = lingbot_webrtc_resolve_path (server->www_dir, raw, &status);
  }
  if (file == NULL || !g_file_get_contents (file, &contents, &len, NULL)) {
    g_message ("http: %s %s -> %u", method, raw, status == 200 ? 404 : status);
    soup_server_message_set_status (msg, status == 200 ? 404 : status, NULL);
    return;
  }
  soup_message_headers_replace (soup_server_message_get_response_headers
      (msg), "Cache-Control", "no-store");
  soup_server_message_set_status (msg, SOUP_STATUS_OK, NULL);
  soup_server_message_set_response (msg, content_type (file),
      SOUP_MEMORY_TAKE, g_steal_pointer (&contents), len);
}

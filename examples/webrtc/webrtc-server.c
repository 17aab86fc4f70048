/* lingbot-gst: the WebRTC sender of the live example (server side)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Objects.  A Session is one running world: its pipeline is the generation
 * part, `SOURCE ! videoconvert ! queue ! ENCODER ! PAY ! tee`.  A Peer is
 * one browser connection: a WebSocket (a Conn) and a bin
 * `queue ! webrtcbin` linked to the tee while the generator runs, and
 * unlinked and dropped again without stopping it.  A session has at most
 * two peers: the active one (whose keys steer, the first one or the one a
 * takeover promoted) and a replacement that is negotiating; the replacement
 * becomes active once its connection is up, and the old one is released.
 * A session without peers is kept for resume_timeout seconds for a reload
 * to resume it (the welcome message gives the page a token for that).
 *
 * Threads: everything of the server (HTTP, WebSockets, bus watches, session
 * and peer life) runs on the main context that was thread-default when the
 * server was created.  webrtcbin, its data channels and the pad probes call
 * back from streaming threads; those callbacks only copy what they got and
 * hop to that context (invoke()), where the peer or session may already be
 * gone, which every hop checks first.  The counters the getters read are
 * atomic.
 *
 * This file holds the encoders, the JSON helpers, the hop to that context
 * and the server object; the other rooms are listed in
 * webrtc-server-private.h.
 */
#define GST_USE_UNSTABLE_API 1

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <gst/gst.h>
#include <lingbot/lingbot.h>

#include "webrtc-server-private.h"

#define LISTEN_BACKLOG 128

/* ------------------------------------------------------------------ */
/* encoders                                                           */
/* ------------------------------------------------------------------ */

/* the H.264 encoders' caps, payloader and its output */
#define H264_PAY_CHAIN "! video/x-h264,profile=constrained-baseline," \
  "stream-format=byte-stream,alignment=au " \
  "! rtph264pay name=pay pt=102 config-interval=-1 " \
  "aggregate-mode=zero-latency"
#define H264_RTP_CAPS "application/x-rtp,media=video,encoding-name=H264," \
  "payload=102,clock-rate=90000"

#define H264_PREFERENCES(pt) "application/x-rtp,media=video," \
  "encoding-name=H264,payload=" pt ",clock-rate=90000," \
  "packetization-mode=(string)1,profile-level-id=(string)42e01f," \
  "level-asymmetry-allowed=(string)1,rtcp-fb-nack-pli=(boolean)true," \
  "rtcp-fb-ccm-fir=(boolean)true"

static const Encoder encoders[] = {
  {"vp8", "VP8", "vp8enc name=enc deadline=1 keyframe-max-dist=%d "
        "cpu-used=8 ! rtpvp8pay name=pay pt=96 picture-id-mode=15-bit", 96,
        "application/x-rtp,media=video,encoding-name=VP8,payload=96,"
        "clock-rate=90000",
      "application/x-rtp,media=video,encoding-name=VP8,payload=96,"
        "clock-rate=90000,rtcp-fb-nack-pli=(boolean)true,"
        "rtcp-fb-ccm-fir=(boolean)true"},
  {"x264", "H264", "x264enc name=enc tune=zerolatency speed-preset=ultrafast "
        "key-int-max=%d bframes=0 aud=false "
        H264_PAY_CHAIN, 102, H264_RTP_CAPS, H264_PREFERENCES ("102")},
  {"openh264", "H264", "openh264enc name=enc complexity=low gop-size=%d "
        H264_PAY_CHAIN, 102, H264_RTP_CAPS, H264_PREFERENCES ("102")},
};

const Encoder *
server_find_encoder (const char *name)
{
  for (guint i = 0; i < G_N_ELEMENTS (encoders); i++)
    if (g_strcmp0 (encoders[i].name, name) == 0)
      return &encoders[i];
  return NULL;
}

/* ------------------------------------------------------------------ */
/* helpers                                                            */
/* ------------------------------------------------------------------ */

/* one member of the object a builder is in: name and value */
void
server_put_string (JsonBuilder * b, const char *name, const char *value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_string_value (b, value);
}

void
server_put_string_or_null (JsonBuilder * b, const char *name, const char *value)
{
  json_builder_set_member_name (b, name);
  if (value)
    json_builder_add_string_value (b, value);
  else
    json_builder_add_null_value (b);
}

void
server_put_int (JsonBuilder * b, const char *name, gint64 value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_int_value (b, value);
}

void
server_put_boolean (JsonBuilder * b, const char *name, gboolean value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_boolean_value (b, value);
}

void
server_put_double (JsonBuilder * b, const char *name, double value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_double_value (b, value);
}

/* a builder inside a JSON object whose "type" member is @type: every
 * message has one, and server_message_finish() closes it */
JsonBuilder *
server_message_new (const char *type)
{
  JsonBuilder *b = json_builder_new ();

  json_builder_begin_object (b);
  server_put_string (b, "type", type);
  return b;
}

/* closes the object of server_message_new(): the message as text */
char *
server_message_finish (JsonBuilder * b)
{
  g_autoptr (JsonNode) root = NULL;

  json_builder_end_object (b);
  root = json_builder_get_root (b);
  return json_to_string (root, FALSE);
}

char *
server_error_json (const char *code, const char *message, gboolean fatal,
    const char *where, gboolean has_id, gint64 id)
{
  g_autoptr (JsonBuilder) b = server_message_new ("error");

  server_put_string (b, "code", code);
  server_put_string (b, "message", message);
  server_put_boolean (b, "fatal", fatal);
  if (where)
    server_put_string (b, "where", where);
  if (has_id)
    server_put_int (b, "id", id);
  return server_message_finish (b);
}

/* ------------------------------------------------------------------ */
/* hopping to the server's context                                    */
/* ------------------------------------------------------------------ */

typedef struct
{
  gpointer obj;
  gboolean peer;                /* obj is a Peer (else a Session) */
  gboolean always;              /* run even when released / closed */
  HopFunc func;
  gpointer data;
  GDestroyNotify free;
} Hop;

static gboolean
hop_run (gpointer user_data)
{
  Hop *h = user_data;
  gboolean alive = h->peer ? !((Peer *) h->obj)->released :
      !((Session *) h->obj)->closed;

  if (alive || h->always)
    h->func (h->obj, h->data);
  return G_SOURCE_REMOVE;
}

static void
hop_free (gpointer user_data)
{
  Hop *h = user_data;

  if (h->free)
    h->free (h->data);
  if (h->peer)
    peer_unref (h->obj);
  else
    session_unref (h->obj);
  g_free (h);
}

void
server_invoke_full (gpointer obj, gboolean peer, gboolean always, HopFunc func,
    gpointer data, GDestroyNotify free_func)
{
  Hop *h = g_new0 (Hop, 1);
  GSource *src = g_idle_source_new ();
  GMainContext *context = peer ? ((Peer *) obj)->context :
      ((Session *) obj)->context;

  h->obj = g_atomic_rc_box_acquire (obj);
  h->peer = peer;
  h->always = always;
  h->func = func;
  h->data = data;
  h->free = free_func;
  g_source_set_callback (src, hop_run, h, hop_free);
  g_source_attach (src, context);
  g_source_unref (src);
}

/* ------------------------------------------------------------------ */
/* server                                                             */
/* ------------------------------------------------------------------ */

/**
 * lingbot_webrtc_config_init:
 * @cfg: the configuration to reset
 *
 * Sets every field of @cfg to its default (the LINGBOT_WEBRTC_DEFAULT_*
 * values; no model, image or page folder).
 */
void
lingbot_webrtc_config_init (LingbotWebrtcConfig * cfg)
{
  memset (cfg, 0, sizeof *cfg);
  cfg->address = LINGBOT_WEBRTC_DEFAULT_ADDRESS;
  cfg->port = LINGBOT_WEBRTC_DEFAULT_PORT;
  cfg->devices = LINGBOT_WEBRTC_DEFAULT_DEVICES;
  cfg->encoder = LINGBOT_WEBRTC_DEFAULT_ENCODER;
  cfg->max_sessions = 0;        /* automatic: 1, or one per device group */
  cfg->max_message_size = LINGBOT_WEBRTC_DEFAULT_MAX_MESSAGE_SIZE;
  cfg->ice_loopback = -1;
  cfg->peer_timeout = LINGBOT_WEBRTC_DEFAULT_PEER_TIMEOUT;
  cfg->resume_timeout = LINGBOT_WEBRTC_DEFAULT_RESUME_TIMEOUT;
  cfg->max_connections = 0;
  cfg->idle_timeout = LINGBOT_WEBRTC_DEFAULT_IDLE_TIMEOUT;
}

/**
 * lingbot_webrtc_raise_fd_limit:
 * @soft: (out) (optional): the soft limit now (descriptors)
 * @error: where to put an error
 *
 * Raises this process's soft RLIMIT_NOFILE to its hard limit (the server
 * program does so at start: every connection and every session's ICE
 * sockets take descriptors).  Call it before lingbot_webrtc_server_new(),
 * which sizes the automatic connection cap from the soft limit.
 *
 * Returns: %TRUE, or %FALSE with @error set (G_IO_ERROR, from errno) when
 *   the limit cannot be read or set
 */
gboolean
lingbot_webrtc_raise_fd_limit (guint64 * soft, GError ** error)
{
  struct rlimit rl;

  if (getrlimit (RLIMIT_NOFILE, &rl) != 0) {
    int e = errno;

    g_set_error (error, G_IO_ERROR, g_io_error_from_errno (e),
        "getrlimit(RLIMIT_NOFILE): %s", g_strerror (e));
    return FALSE;
  }
  if (rl.rlim_cur != rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit (RLIMIT_NOFILE, &rl) != 0) {
      int e = errno;

      g_set_error (error, G_IO_ERROR, g_io_error_from_errno (e),
          "setrlimit(RLIMIT_NOFILE, %" G_GUINT64_FORMAT "): %s",
          (guint64) rl.rlim_max, g_strerror (e));
      return FALSE;
    }
  }
  if (soft)
    *soft = (guint64) rl.rlim_cur;
  return TRUE;
}

/* the connection cap: the configured one, or automatic; FALSE with @error
 * when RLIMIT_NOFILE leaves too few descriptors for it */
static gboolean
connection_cap (LingbotWebrtcServer * server, guint wanted, GError ** error)
{
  struct rlimit rl;
  guint64 soft = G_MAXUINT64, reserve, room;

  if (getrlimit (RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    soft = (guint64) rl.rlim_cur;
  reserve = LINGBOT_WEBRTC_FD_RESERVE +
      (guint64) LINGBOT_WEBRTC_FD_RESERVE_PER_SESSION *server->max_sessions;
  room = soft > reserve ? soft - reserve : 0;
  if (wanted == 0)
    wanted = (guint) MIN (room, LINGBOT_WEBRTC_DEFAULT_MAX_CONNECTIONS);
  if (room < 1) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_TOO_MANY_OPEN_FILES,
        "RLIMIT_NOFILE is %" G_GUINT64_FORMAT ": too few descriptors for "
        "any connection with %u session%s (%u + %u per session are kept "
        "for the pipelines); lower --max-sessions, or raise the limit "
        "(ulimit -n)", soft, server->max_sessions,
        server->max_sessions == 1 ? "" : "s", LINGBOT_WEBRTC_FD_RESERVE,
        LINGBOT_WEBRTC_FD_RESERVE_PER_SESSION);
    return FALSE;
  }
  if (wanted < 1 || wanted > room) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_TOO_MANY_OPEN_FILES,
        "RLIMIT_NOFILE is %" G_GUINT64_FORMAT ": %u connection%s need%s %"
        G_GUINT64_FORMAT " descriptors with %u session%s (%u + %u per "
        "session kept for the pipelines); lower --max-connections or "
        "--max-sessions, or raise the limit (ulimit -n)", soft,
        MAX (wanted, 1), wanted > 1 ? "s" : "", wanted > 1 ? "" : "s",
        MAX (wanted, 1) + reserve, server->max_sessions,
        server->max_sessions == 1 ? "" : "s", LINGBOT_WEBRTC_FD_RESERVE,
        LINGBOT_WEBRTC_FD_RESERVE_PER_SESSION);
    return FALSE;
  }
  server->max_connections = wanted;
  return TRUE;
}

static void
session_table_unref (gpointer data)
{
  Session *s = data;

  g_mutex_lock (&s->lock);
  s->server = NULL;
  g_mutex_unlock (&s->lock);
  session_unref (s);
}

static gboolean
address_is_loopback (const char *address)
{
  g_autoptr (GInetAddress) a = g_inet_address_new_from_string (address);

  return a != NULL && g_inet_address_get_is_loopback (a);
}

/* @message without the "PATH: " the library starts it with (the option's
 * line names the file already) */
static const char *
after_path (const char *message, const char *path)
{
  gsize n = strlen (path);

  if (strncmp (message, path, n) == 0 && strncmp (message + n, ": ", 2) == 0)
    return message + n + 2;
  return message;
}

/* What every session's pipeline will need, checked once at start so that
 * a mistake is said when the server starts, not when a browser connects:
 * the lingbot elements, the model folder and its parts (located, not
 * loaded: lingbot_world_check_model()), the start image (decoded as the
 * session will), the prompt embeddings (read), the devices of every
 * session (lingbot_world_check_devices(): no ranks made), and each
 * --set NAME=VALUE naming a lingbotbin property with a value of its
 * type (values the element refuses only when it starts, such as a size
 * it cannot make, are said to the browser and the log then). */
static gboolean
check_session_config (LingbotWebrtcServer * server, GError ** error)
{
  const char *lingbot[] = { "lingbotcontrolsrc", "lingbotbin", NULL };
  g_autoptr (GstElement) bin = NULL;
  g_autoptr (GError) why = NULL;

  for (guint i = 0; lingbot[i]; i++) {
    GstElementFactory *f = gst_element_factory_find (lingbot[i]);

    if (f == NULL) {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
          "GStreamer element '%s' is not installed (the lingbot plugin: "
          "set GST_PLUGIN_PATH to the folder of libgstlingbot.so)", lingbot[i]);
      return FALSE;
    }
    gst_object_unref (f);
  }
  if (server->model && !g_file_test (server->model, G_FILE_TEST_IS_DIR)) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
        g_file_test (server->model, G_FILE_TEST_EXISTS) ?
        "--model %s: not a folder (give the model folder)" :
        "--model %s: no such folder", server->model);
    return FALSE;
  }
  /* the model's parts located as the world will load them (no weight is
   * read); the text encoder only when no prompt embeddings are given */
  if (server->model && !lingbot_world_check_model (server->model,
          server->prompt_embeds == NULL, &why)) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND, "--model %s: %s",
        server->model, why->message);
    return FALSE;
  }
  if (server->image && g_file_test (server->image, G_FILE_TEST_IS_DIR)) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
        "--image %s: a folder, not a JPEG file", server->image);
    return FALSE;
  }
  if (server->image && !g_file_test (server->image, G_FILE_TEST_IS_REGULAR)) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
        "--image %s: no such file", server->image);
    return FALSE;
  }
  /* decoded as the session will (at a 64th of the pixels) */
  if (server->image && !lingbot_session_check_image (server->image, NULL,
          NULL, &why)) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
        "--image %s: not a usable JPEG: %s", server->image,
        after_path (why->message, server->image));
    return FALSE;
  }
  if (server->prompt_embeds && !lingbot_session_check_prompt_embeds
      (server->prompt_embeds, NULL, &why)) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
        "--prompt-embeds %s: not a usable prompt-embeds file: %s",
        server->prompt_embeds, after_path (why->message,
            server->prompt_embeds));
    return FALSE;
  }
  /* the devices of every session (each group's, else --devices) */
  for (guint i = 0; i < MAX (server->n_groups, 1); i++) {
    const char *devices = server->n_groups ? server->groups[i].devices :
        server->devices;

    if (lingbot_world_check_devices (devices, NULL, &why))
      continue;
    if (server->n_groups)
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
          "invalid --device-groups: group %u '%s': %s", i + 1, devices,
          why->message);
    else
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
          "invalid --devices '%s': %s", devices, why->message);
    return FALSE;
  }
  bin = gst_object_ref_sink (gst_element_factory_make ("lingbotbin", NULL));
  for (guint i = 0; bin && server->gen_props && server->gen_props[i]; i++) {
    g_auto (GStrv) kv = g_strsplit (server->gen_props[i], "=", 2);
    GParamSpec *ps = kv[0] ? g_object_class_find_property
        (G_OBJECT_GET_CLASS (bin), kv[0]) : NULL;
    g_auto (GValue) v = G_VALUE_INIT;

    if (kv[0] == NULL || kv[1] == NULL || *kv[0] == '\0') {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
          "invalid --set '%s': not NAME=VALUE (a lingbotbin property and "
          "its value, e.g. width=256)", server->gen_props[i]);
      return FALSE;
    }
    if (ps == NULL) {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
          "not a lingbotbin property: %s", server->gen_props[i]);
      return FALSE;
    }
    g_value_init (&v, ps->value_type);
    if (!gst_value_deserialize_with_pspec (&v, kv[1], ps) ||
        g_param_value_validate (ps, &v)) {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
          "--set %s: not a value of lingbotbin's %s (%s)",
          server->gen_props[i], kv[0], g_type_name (ps->value_type));
      return FALSE;
    }
  }
  return TRUE;
}

/* The session pipeline's launch line parses (a --source fragment
 * included) and every element in it exists: made once, in NULL (no model
 * is loaded), and dropped. */
static gboolean
check_pipeline (LingbotWebrtcServer * server, GError ** error)
{
  g_autofree char *desc = session_description (server,
      server_find_encoder (server->encoder));
  g_autoptr (GError) why = NULL;
  GstElement *pipeline = gst_parse_launch_full (desc, NULL,
      GST_PARSE_FLAG_FATAL_ERRORS, &why);

  if (pipeline == NULL) {
    if (server->source)
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
          "invalid --source '%s': %s", server->source, why->message);
    else
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
          "the session pipeline cannot be made: %s", why->message);
    return FALSE;
  }
  gst_object_unref (gst_object_ref_sink (pipeline));
  return TRUE;
}

/**
 * lingbot_webrtc_server_new:
 * @cfg: the configuration (copied)
 * @error: where to put an error
 *
 * Checks the encoder and the GStreamer elements, sizes the connection cap
 * (@cfg's max_connections, or automatic from RLIMIT_NOFILE), binds the
 * HTTP server on the calling thread's default main context (everything of
 * the server runs there) and returns.  Without device groups sessions are
 * made when browsers connect; with them a world is made on every group
 * now, and again on a group whose session ended, before any browser.
 *
 * Returns: (transfer full): the server, or %NULL with @error set (G_IO_ERROR:
 *   an unknown encoder, a missing element, no model folder or a model
 *   part missing, a start image that is not a usable JPEG, prompt
 *   embeddings that cannot be read, devices (or a device group) that
 *   lingbot_world_check_devices() refuses, a --source that does not
 *   parse, a --set that is not a lingbotbin property or value, no page
 *   folder, not an IP
 *   address, an ICE server URL or TURN configuration that
 *   lingbot_webrtc_ice_url_check() refuses, RLIMIT_NOFILE too low for the cap
 *   (G_IO_ERROR_TOO_MANY_OPEN_FILES), or the bind failed)
 */
LingbotWebrtcServer *
lingbot_webrtc_server_new (const LingbotWebrtcConfig * cfg, GError ** error)
{
  g_autoptr (LingbotWebrtcServer) server = g_new0 (LingbotWebrtcServer, 1);
  g_autoptr (GInetAddress) inet = NULL;
  g_autoptr (GSocketAddress) addr = NULL;
  g_autoptr (GSocketAddress) bound = NULL;
  g_autofree char *host = NULL;
  const char *needed[] = { "webrtcbin", "videoconvert", "queue", "tee",
    "clocksync", NULL
  };

  server->context = g_main_context_ref_thread_default ();
  server->sessions = g_hash_table_new_full (NULL, NULL, NULL,
      session_table_unref);
  server->conns = g_hash_table_new_full (NULL, NULL, NULL,
      (GDestroyNotify) signalling_conn_free);
  server->clients = g_hash_table_new (NULL, NULL);
  server->address = g_strdup (cfg->address ? cfg->address :
      LINGBOT_WEBRTC_DEFAULT_ADDRESS);
  server->model = g_strdup (cfg->model);
  server->image = g_strdup (cfg->image);
  server->prompt = g_strdup (cfg->prompt);
  server->prompt_embeds = g_strdup (cfg->prompt_embeds);
  server->devices = g_strdup (cfg->devices);
  server->encoder = g_strdup (cfg->encoder ? cfg->encoder :
      LINGBOT_WEBRTC_DEFAULT_ENCODER);
  server->source = g_strdup (cfg->source);
  server->gen_props = g_strdupv ((char **) cfg->gen_props);
  server->server_id = g_strdup (cfg->server_id);
  if (server->server_id) {
    gsize n = strlen (server->server_id);
    gboolean ok = n >= 1 && n <= LINGBOT_WEBRTC_SERVER_ID_MAX;

    for (gsize i = 0; ok && i < n; i++)
      ok = g_ascii_isalnum (server->server_id[i])
          || server->server_id[i] == '_';
    if (!ok) {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
          "invalid --server-id '%s': 1 to %u letters, digits or _",
          server->server_id, LINGBOT_WEBRTC_SERVER_ID_MAX);
      return NULL;
    }
  }
  server->max_message_size = cfg->max_message_size ? cfg->max_message_size :
      LINGBOT_WEBRTC_DEFAULT_MAX_MESSAGE_SIZE;
  server->ice_loopback = cfg->ice_loopback < 0 ?
      address_is_loopback (server->address) : cfg->ice_loopback > 0;
  server->peer_timeout = cfg->peer_timeout ? cfg->peer_timeout :
      LINGBOT_WEBRTC_DEFAULT_PEER_TIMEOUT;
  server->resume_timeout = cfg->resume_timeout ? cfg->resume_timeout :
      LINGBOT_WEBRTC_DEFAULT_RESUME_TIMEOUT;
  server->idle_timeout = cfg->idle_timeout ? cfg->idle_timeout :
      LINGBOT_WEBRTC_DEFAULT_IDLE_TIMEOUT;
  if (cfg->image)
    server->image_real = realpath (cfg->image, NULL);
  if (!ice_setup (server, cfg, error))
    return NULL;
  if (!groups_setup (server, cfg, error))
    return NULL;

  if (server_find_encoder (server->encoder) == NULL) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
        "unknown encoder '%s' (vp8, x264 or openh264)", server->encoder);
    return NULL;
  }
  for (guint i = 0; needed[i]; i++) {
    GstElementFactory *f = gst_element_factory_find (needed[i]);

    if (f == NULL) {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
          "GStreamer element '%s' is not installed", needed[i]);
      return NULL;
    }
    gst_object_unref (f);
  }
  if (server->source == NULL && !check_session_config (server, error))
    return NULL;
  if (!check_pipeline (server, error))
    return NULL;
  if (cfg->www_dir == NULL
      || (server->www_dir = realpath (cfg->www_dir, NULL)) == NULL) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
        "page folder not found: %s", GST_STR_NULL (cfg->www_dir));
    return NULL;
  }

  inet = g_inet_address_new_from_string (server->address);
  if (inet == NULL) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
        "not an IP address: %s", server->address);
    return NULL;
  }
  addr = g_inet_socket_address_new (inet, (guint16) cfg->port);

  if (!connection_cap (server, cfg->max_connections, error))
    return NULL;

  server->soup = soup_server_new ("server-header", "lingbot-webrtc ", NULL);
  soup_server_add_handler (server->soup, NULL, http_on_http, server, NULL);
  soup_server_add_handler (server->soup, WS_PATH, signalling_on_ws_http, server,
      NULL);
  soup_server_add_handler (server->soup, STATUS_PATH, groups_on_status, server,
      NULL);
  g_signal_connect (server->soup, "request-read",
      G_CALLBACK (http_on_request_read), server);
  g_signal_connect (server->soup, "request-finished",
      G_CALLBACK (http_on_request_done), server);
  g_signal_connect (server->soup, "request-aborted",
      G_CALLBACK (http_on_request_done), server);
  server->listener = g_socket_listener_new ();
  g_socket_listener_set_backlog (server->listener, LISTEN_BACKLOG);
  if (!g_socket_listener_add_address (server->listener, addr,
          G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, NULL, &bound, error))
    return NULL;
  server->port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
  server->accept_cancel = g_cancellable_new ();
  http_accept_next (server);
  /* with device groups: a world on each, before any browser */
  groups_make_worlds (server);
  /* an IPv6 address in a URL is in brackets (RFC 3986) */
  host = g_inet_address_get_family (inet) == G_SOCKET_FAMILY_IPV6 ?
      g_strdup_printf ("[%s]", server->address) : g_strdup (server->address);
  g_message ("listening on http://%s:%u/ (page %s, encoder %s, at most %u "
      "session%s%s, peer timeout %u s, resume %u s, at most %u connections, "
      "idle timeout %u s)", host,
      server->port, server->www_dir, server->encoder, server->max_sessions,
      server->max_sessions == 1 ? "" : "s",
      server->ice_loopback ? ", ICE on 127.0.0.1" : "",
      server->peer_timeout, server->resume_timeout, server->max_connections,
      server->idle_timeout);
  if (server->stun_url || server->turn_urls[0]) {
    g_autofree char *turn = g_strjoinv (", ", server->turn_urls);

    g_message ("ICE: STUN %s, TURN %s%s%s%s, transport policy %s",
        server->stun_url ? server->stun_url : "none", *turn ? turn : "none",
        server->turn_user ? " (user " : "",
        server->turn_user ? server->turn_user : "",
        server->turn_user ? ")" : "", server->ice_relay_only ? "relay" : "all");
  }
  return g_steal_pointer (&server);
}

/**
 * lingbot_webrtc_server_get_port:
 * @server: a server
 *
 * Returns: the TCP port it listens on (the one picked for port 0)
 */
guint
lingbot_webrtc_server_get_port (LingbotWebrtcServer * server)
{
  return server->port;
}

/* the getter lingbot_webrtc_server_get_FIELD() of an atomic counter (a
 * gint: the static assertion takes the semicolon after the macro) */
#define COUNTER_GETTER(field) \
  guint \
  lingbot_webrtc_server_get_##field (LingbotWebrtcServer * server) \
  { \
    return (guint) g_atomic_int_get (&server->field); \
  } \
  G_STATIC_ASSERT (sizeof (((LingbotWebrtcServer *) NULL)->field) == \
      sizeof (gint))

/**
 * lingbot_webrtc_server_get_n_sessions:
 * @server: a server
 *
 * Returns: the sessions (running worlds) open now, with or without a peer
 */
COUNTER_GETTER (n_sessions);

/**
 * lingbot_webrtc_server_get_n_peers:
 * @server: a server
 *
 * Returns: the browser connections attached to sessions now (viewers and
 *   replacements still negotiating)
 */
COUNTER_GETTER (n_peers);

/**
 * lingbot_webrtc_server_get_n_dropped:
 * @server: a server
 *
 * Returns: signalling and data-channel messages dropped so far (each had a
 *   log line and an error reply)
 */
COUNTER_GETTER (n_dropped);

/**
 * lingbot_webrtc_server_get_n_mdns_ignored:
 * @server: a server
 *
 * Returns: browser mDNS (.local) candidates not passed on (ICE on 127.0.0.1)
 */
COUNTER_GETTER (n_mdns_ignored);

/**
 * lingbot_webrtc_server_get_n_key_units:
 * @server: a server
 *
 * Returns: force-key-unit requests that reached an encoder so far (one per
 *   joining peer and per connection, and one per browser PLI/FIR)
 */
COUNTER_GETTER (n_key_units);

/**
 * lingbot_webrtc_server_get_n_too_big:
 * @server: a server
 *
 * Returns: WebSockets closed with 1009 for a message above
 *   %LINGBOT_WEBRTC_WS_HARD_LIMIT (all its fragments)
 */
COUNTER_GETTER (n_too_big);

/**
 * lingbot_webrtc_server_get_n_timeouts:
 * @server: a server
 *
 * Returns: peers released because they did not connect, or went silent,
 *   for the peer timeout
 */
COUNTER_GETTER (n_timeouts);

/**
 * lingbot_webrtc_server_get_n_replaced:
 * @server: a server
 *
 * Returns: peers released because a newer connection took their session
 */
COUNTER_GETTER (n_replaced);

/**
 * lingbot_webrtc_server_get_n_connections:
 * @server: a server
 *
 * Returns: TCP connections open now (HTTP requests being read or answered,
 *   WebSockets, lingering closes): those whose descriptor is not closed yet
 */
COUNTER_GETTER (n_connections);

/**
 * lingbot_webrtc_server_get_n_refused:
 * @server: a server
 *
 * Returns: connections refused with 503 so far because the cap
 *   (lingbot_webrtc_server_get_max_connections()) was reached
 */
COUNTER_GETTER (n_refused);

/**
 * lingbot_webrtc_server_get_n_idle_timeouts:
 * @server: a server
 *
 * Returns: connections closed so far because no complete HTTP request came
 *   (or the response was not taken) within the idle timeout
 */
COUNTER_GETTER (n_idle_timeouts);

/**
 * lingbot_webrtc_server_get_n_accept_errors:
 * @server: a server
 *
 * Returns: failed accept() calls so far (EMFILE and the like); after each
 *   the listener is watched again 100 ms later
 */
COUNTER_GETTER (n_accept_errors);

/**
 * lingbot_webrtc_server_get_max_connections:
 * @server: a server
 *
 * Returns: the connection cap in force (the configured one, or the
 *   automatic one from RLIMIT_NOFILE)
 */
guint
lingbot_webrtc_server_get_max_connections (LingbotWebrtcServer * server)
{
  return server->max_connections;
}

/**
 * lingbot_webrtc_server_free:
 * @server: (nullable): a server
 *
 * Closes every session (their pipelines go to NULL) and connection, then
 * frees the server.  Call it on the server's thread.
 */
void
lingbot_webrtc_server_free (LingbotWebrtcServer * server)
{
  if (server == NULL)
    return;
  server->stopping = TRUE;      /* no new worlds for the groups */
  if (server->sessions) {
    GList *all = g_hash_table_get_values (server->sessions);

    for (GList * l = all; l; l = l->next)
      session_fail (l->data, "shutdown", "the server is shutting down");
    g_list_free (all);
    g_hash_table_unref (server->sessions);
  }
  if (server->conns) {
    GHashTableIter it;
    gpointer key;

    g_hash_table_iter_init (&it, server->conns);
    while (g_hash_table_iter_next (&it, &key, NULL)) {
      Conn *c = key;

      c->peer = NULL;
      if (c->ws) {
        g_clear_signal_handler (&c->message_id, c->ws);
        g_clear_signal_handler (&c->closed_id, c->ws);
      }
      signalling_conn_close (c, SOUP_WEBSOCKET_CLOSE_GOING_AWAY, "shutdown");
    }
    g_hash_table_unref (server->conns);
  }
  if (server->accept_cancel) {
    g_cancellable_cancel (server->accept_cancel);
    g_object_unref (server->accept_cancel);
  }
  if (server->accept_retry) {
    g_source_destroy (server->accept_retry);
    g_source_unref (server->accept_retry);
  }
  if (server->listener) {
    g_socket_listener_close (server->listener);
    g_object_unref (server->listener);
  }
  /* connections that outlive the server (soup's, closing below; a
   * lingering WebSocket) no longer count */
  if (server->clients) {
    GHashTableIter it;
    gpointer value;

    g_hash_table_iter_init (&it, server->clients);
    while (g_hash_table_iter_next (&it, NULL, &value)) {
      Client *cl = value;

      http_client_stop_timer (cl);
      cl->server = NULL;
    }
    g_hash_table_unref (server->clients);
  }
  if (server->soup) {
    soup_server_disconnect (server->soup);
    g_object_unref (server->soup);
  }
  free (server->www_dir);
  free (server->image_real);
  g_free (server->address);
  g_free (server->model);
  g_free (server->image);
  g_free (server->prompt);
  g_free (server->prompt_embeds);
  g_free (server->devices);
  g_free (server->encoder);
  g_free (server->source);
  g_strfreev (server->gen_props);
  ice_clear (server);
  groups_clear (server);
  g_free (server->server_id);
  if (server->context)
    g_main_context_unref (server->context);
  g_free (server);
}

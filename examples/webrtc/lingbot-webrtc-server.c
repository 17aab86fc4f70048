/* lingbot-gst: lingbot-webrtc-server, a live LingBot-World session in a
 * browser tab over WebRTC
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-webrtc-server --model DIR --image start.jpg \
 *       --prompt-embeds prompt.safetensors [--port 8080] [--encoder vp8]
 *       [--max-connections N] [--idle-timeout S]
 *
 * then open http://127.0.0.1:8080/ and hold the arrow keys (or WASD, IJKL).
 * See docs/webrtc.md.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <glib-unix.h>
#include <gst/gst.h>
#include <json-glib/json-glib.h>

#include "webrtc-server.h"

#ifndef LINGBOT_WEBRTC_WWW_DIR
#define LINGBOT_WEBRTC_WWW_DIR "www"
#endif

/* The page, found relative to the executable (no build-tree or source-tree
 * path is compiled in).  Uninstalled, the executable is in examples/webrtc/
 * of a meson build folder and the page is the source tree's
 * examples/webrtc/www, the source folder that the build folder's
 * meson-info/meson-info.json names; installed, LINGBOT_WEBRTC_WWW_DIR from
 * bindir (the prefix's share/lingbot-gst/webrtc).  Newly allocated. */
static char *
default_www (void)
{
  g_autofree char *exe = g_file_read_link ("/proc/self/exe", NULL);
  g_autofree char *dir = exe ? g_path_get_dirname (exe) : g_strdup (".");
  g_autofree char *info = g_build_filename (dir, "..", "..", "meson-info",
      "meson-info.json", NULL);
  g_autoptr (JsonParser) parser = json_parser_new ();

  if (g_file_test (info, G_FILE_TEST_IS_REGULAR)
      && json_parser_load_from_file (parser, info, NULL)) {
    JsonNode *root = json_parser_get_root (parser);
    JsonObject *dirs = JSON_NODE_HOLDS_OBJECT (root) ?
        json_object_get_object_member (json_node_get_object (root),
        "directories") : NULL;
    const char *source = dirs ? json_object_get_string_member_with_default
        (dirs, "source", NULL) : NULL;
    if (source)
      return g_build_filename (source, "examples", "webrtc", "www", NULL);
  }
  if (g_path_is_absolute (LINGBOT_WEBRTC_WWW_DIR))
    return g_strdup (LINGBOT_WEBRTC_WWW_DIR);
  return g_build_filename (dir, LINGBOT_WEBRTC_WWW_DIR, NULL);
}

/* Registers this tree's lingbot plugin when GStreamer's own search
 * (GST_PLUGIN_PATH, the system folders) did not find it: the folder is
 * relative to the executable, never fixed at build time.  Installed,
 * LINGBOT_WEBRTC_PLUGIN_DIR from bindir (the prefix's libdir/gstreamer-1.0,
 * which GStreamer does not search under /usr/local); uninstalled (two
 * folders up is a meson build folder), that build folder's gst/. */
static void
scan_plugin_dir (void)
{
  GstElementFactory *f = gst_element_factory_find ("lingbotbin");
  g_autofree char *exe = NULL, *dir = NULL, *info = NULL, *plugins = NULL;

  if (f != NULL) {
    gst_object_unref (f);
    return;
  }
  exe = g_file_read_link ("/proc/self/exe", NULL);
  if (exe == NULL)
    return;
  dir = g_path_get_dirname (exe);
  info = g_build_filename (dir, "..", "..", "meson-info", NULL);
  if (g_file_test (info, G_FILE_TEST_IS_DIR))
    plugins = g_canonicalize_filename ("../../gst", dir);
  else if (g_path_is_absolute (LINGBOT_WEBRTC_PLUGIN_DIR))
    plugins = g_strdup (LINGBOT_WEBRTC_PLUGIN_DIR);
  else
    plugins = g_canonicalize_filename (LINGBOT_WEBRTC_PLUGIN_DIR, dir);
  if (g_file_test (plugins, G_FILE_TEST_IS_DIR))
    gst_registry_scan_path (gst_registry_get (), plugins);
}

/* A refusal at start: one line, "lingbot-webrtc-server: " and @fmt, on
 * stderr; returns @status (2: the command line is wrong, 1: a setting
 * the server checked cannot be used; docs/webrtc.md) */
static int refuse (int status, const char *fmt, ...)
    G_GNUC_PRINTF (2, 3);

static int
refuse (int status, const char *fmt, ...)
{
  va_list ap;
  g_autofree char *text = NULL;

  va_start (ap, fmt);
  text = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_printerr ("lingbot-webrtc-server: %s\n", text);
  return status;
}

static gboolean
on_signal (gpointer user_data)
{
  g_message ("stopping");
  g_main_loop_quit (user_data);
  return G_SOURCE_REMOVE;
}

int
main (int argc, char **argv)
{
  g_autoptr (GOptionContext) opts = NULL;
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotWebrtcServer) server = NULL;
  g_autoptr (GMainLoop) loop = NULL;
  LingbotWebrtcConfig cfg;
  char *address = NULL, *www = NULL, *model = NULL, *image = NULL;
  char *prompt = NULL, *prompt_embeds = NULL, *devices = NULL;
  char *encoder = NULL, *source = NULL;
  char *stun = NULL, *turn_credentials = NULL, *ice_policy = NULL;
  char *turn_user = NULL, *turn_password = NULL;
  char *device_groups = NULL, *server_id = NULL;
  char **props = NULL, **turn = NULL;
  gboolean overlay = FALSE;
  int port = LINGBOT_WEBRTC_DEFAULT_PORT;
  int max_sessions = G_MININT;  /* not given: 1, or one per group */
  int max_message = LINGBOT_WEBRTC_DEFAULT_MAX_MESSAGE_SIZE;
  int ice_loopback = -1;
  int peer_timeout = LINGBOT_WEBRTC_DEFAULT_PEER_TIMEOUT;
  int resume_timeout = LINGBOT_WEBRTC_DEFAULT_RESUME_TIMEOUT;
  int max_connections = 0;
  int idle_timeout = LINGBOT_WEBRTC_DEFAULT_IDLE_TIMEOUT;
  guint64 fd_limit = 0;
  GOptionEntry entries[] = {
    {"address", 'a', 0, G_OPTION_ARG_STRING, &address,
        "Address to bind (default " LINGBOT_WEBRTC_DEFAULT_ADDRESS ")", "IP"},
    {"port", 'p', 0, G_OPTION_ARG_INT, &port,
        "TCP port (default 8080, 0 = any)", "PORT"},
    {"model", 'm', 0, G_OPTION_ARG_FILENAME, &model,
        "Model folder (lingbotbin model-path)", "DIR"},
    {"image", 'i', 0, G_OPTION_ARG_FILENAME, &image,
        "Start image (lingbotbin image-location)", "FILE"},
    {"prompt", 0, 0, G_OPTION_ARG_STRING, &prompt, "Prompt", "TEXT"},
    {"prompt-embeds", 0, 0, G_OPTION_ARG_FILENAME, &prompt_embeds,
        "Prompt embeddings file (no text encoder needed)", "FILE"},
    {"devices", 'd', 0, G_OPTION_ARG_STRING, &devices,
        "Ranks: cpu:N or GPU ordinals 0,1,2,3 (default "
          LINGBOT_WEBRTC_DEFAULT_DEVICES ")", "LIST"},
    {"set", 's', 0, G_OPTION_ARG_STRING_ARRAY, &props,
        "Another lingbotbin property (width=, height=, seed=, frames=, ...); "
          "repeatable", "NAME=VALUE"},
    {"overlay", 0, 0, G_OPTION_ARG_NONE, &overlay,
          "Draw the controls overlay on the video (lingbotbin overlay=true)",
        NULL},
    {"max-sessions", 0, 0, G_OPTION_ARG_INT, &max_sessions,
        "Concurrent sessions; the next browser is refused (default 1, or "
          "one per device group)", "N"},
    {"device-groups", 0, 0, G_OPTION_ARG_STRING, &device_groups,
          "One session per group of devices, each with its own world, e.g. "
          "\"0,1,2,3;4,5,6,7\" or \"cpu:1;cpu:1\" (instead of --devices)",
        "GROUPS"},
    {"server-id", 0, 0, G_OPTION_ARG_STRING, &server_id,
        "This process's name in a fleet, told in welcome and /status "
          "(default: none)", "NAME"},
    {"encoder", 'e', 0, G_OPTION_ARG_STRING, &encoder,
        "vp8 (default), x264 or openh264", "NAME"},
    {"max-message-size", 0, 0, G_OPTION_ARG_INT, &max_message,
        "Bigger signalling/data-channel messages are dropped (bytes)", "N"},
    {"www", 0, 0, G_OPTION_ARG_FILENAME, &www,
        "Folder of the page (default: the installed/source one)", "DIR"},
    {"source", 0, 0, G_OPTION_ARG_STRING, &source,
        "Launch-line fragment replacing 'lingbotcontrolsrc ! lingbotbin' "
          "(e.g. \"videotestsrc is-live=true\", to try the page without a "
          "model)", "DESC"},
    {"ice-loopback", 0, 0, G_OPTION_ARG_INT, &ice_loopback,
        "ICE candidates: 1 = 127.0.0.1 only, 0 = all interfaces, "
          "-1 = 1 when --address is a loopback address (default)", "N"},
    {"peer-timeout", 0, 0, G_OPTION_ARG_INT, &peer_timeout,
        "Seconds a browser may take to connect, or stay silent, before its "
          "connection is released (default 20)", "S"},
    {"resume-timeout", 0, 0, G_OPTION_ARG_INT, &resume_timeout,
        "Seconds a session without a browser is kept for a reload to resume "
          "it (default 10)", "S"},
    {"max-connections", 0, 0, G_OPTION_ARG_INT, &max_connections,
          "TCP connections at once, WebSockets included; the next one gets a "
          "503 (default 0 = 256, or fewer when the descriptor limit is low)",
        "N"},
    {"idle-timeout", 0, 0, G_OPTION_ARG_INT, &idle_timeout,
        "Seconds a connection may take to send its HTTP request, and then "
          "to take the response, before it is closed (default 10)", "S"},
    {"stun", 0, 0, G_OPTION_ARG_STRING, &stun,
          "STUN server for ICE, given to webrtcbin and the page",
        "stun:HOST[:PORT]"},
    {"turn", 0, 0, G_OPTION_ARG_STRING_ARRAY, &turn,
          "TURN relay for ICE (coturn), given to webrtcbin and the page; "
          "repeatable; credentials from --turn-credentials or the environment",
        "turn:HOST[:PORT][?transport=udp|tcp]"},
    {"turn-credentials", 0, 0, G_OPTION_ARG_FILENAME, &turn_credentials,
        "File whose first line is the TURN user:password (default: "
          "LINGBOT_TURN_USER and LINGBOT_TURN_PASSWORD; never on the command "
          "line)", "FILE"},
    {"ice-transport-policy", 0, 0, G_OPTION_ARG_STRING, &ice_policy,
        "all (default) or relay: only relayed candidates, on both ends "
          "(needs --turn)", "POLICY"},
    {NULL}
  };
  int ret = EXIT_SUCCESS;

  opts = g_option_context_new ("- live LingBot-World sessions over WebRTC");
  g_option_context_add_main_entries (opts, entries, NULL);
  g_option_context_add_group (opts, gst_init_get_option_group ());
  if (!g_option_context_parse (opts, &argc, &argv, &err)) {
    ret = refuse (2, "%s", err->message);
    goto out;
  }
  if (argc > 1) {
    ret = refuse (2, "unexpected argument '%s' (the server takes options "
        "only: see --help)", argv[1]);
    goto out;
  }
  {
    /* each numeric option against its range: the message names the one
     * that is out of it */
    const struct
    {
      const char *name;
      int value, min, max;
      const char *note;
    } ranges[] = {
      {"port", port, 0, 65535, ""},
      {"max-sessions", max_sessions == G_MININT ? 1 : max_sessions, 1,
          G_MAXINT, ""},
      {"max-message-size", max_message, 64, LINGBOT_WEBRTC_WS_HARD_LIMIT, ""},
      {"peer-timeout", peer_timeout, 1, 3600, " seconds"},
      {"resume-timeout", resume_timeout, 1, 86400, " seconds"},
      {"max-connections", max_connections, 0, G_MAXINT, " (0 = automatic)"},
      {"idle-timeout", idle_timeout, 1, 3600, " seconds"},
      {"ice-loopback", ice_loopback, -1, 1,
          " (1 = 127.0.0.1 only, 0 = all interfaces, -1 = from --address)"},
    };
    for (guint i = 0; i < G_N_ELEMENTS (ranges); i++) {
      if (ranges[i].value >= ranges[i].min && ranges[i].value <= ranges[i].max)
        continue;
      if (ranges[i].max == G_MAXINT)
        ret = refuse (2, "invalid --%s %d: at least %d%s", ranges[i].name,
            ranges[i].value, ranges[i].min, ranges[i].note);
      else
        ret = refuse (2, "invalid --%s %d: %d..%d%s", ranges[i].name,
            ranges[i].value, ranges[i].min, ranges[i].max, ranges[i].note);
      goto out;
    }
  }
  for (guint i = 0; props && props[i]; i++) {
    if (strchr (props[i], '=') == NULL || props[i][0] == '=') {
      ret = refuse (2, "invalid --set '%s': not NAME=VALUE (a lingbotbin "
          "property and its value, e.g. width=256)", props[i]);
      goto out;
    }
  }
  if (devices && device_groups) {
    ret = refuse (2, "--devices and --device-groups exclude each other (a "
        "group is a devices value)");
    goto out;
  }
  if (device_groups) {
    guint n = 0;
    g_auto (GStrv) groups = lingbot_webrtc_device_groups_check (device_groups,
        &n, &err);

    if (groups == NULL) {
      ret = refuse (2, "%s", err->message);
      goto out;
    }
    if (max_sessions != G_MININT && (guint) max_sessions > n) {
      ret = refuse (2, "--max-sessions %d is more than the %u device groups "
          "(one session per group)", max_sessions, n);
      goto out;
    }
  }
  if (ice_policy && strcmp (ice_policy, "all") != 0
      && strcmp (ice_policy, "relay") != 0) {
    ret = refuse (2, "invalid --ice-transport-policy '%s': all or relay",
        ice_policy);
    goto out;
  }
  {
    /* each ICE URL now, with the option's exit status */
    g_autofree char *url = stun ?
        lingbot_webrtc_ice_url_check ("--stun", stun, &err) : NULL;

    for (guint i = 0; err == NULL && turn && turn[i]; i++) {
      g_free (url);
      url = lingbot_webrtc_ice_url_check ("--turn", turn[i], &err);
    }
    if (err) {
      ret = refuse (2, "%s", err->message);
      goto out;
    }
  }
  if (turn && !lingbot_webrtc_turn_credentials (turn_credentials, &turn_user,
          &turn_password, &err)) {
    ret = refuse (2, "%s", err->message);
    goto out;
  }
  if (turn && turn_user == NULL) {
    ret = refuse (2, "--turn needs credentials: --turn-credentials FILE "
        "(user:password) or LINGBOT_TURN_USER and LINGBOT_TURN_PASSWORD");
    goto out;
  }
  if (turn == NULL && turn_credentials) {
    ret = refuse (2, "--turn-credentials without --turn");
    goto out;
  }
  if (g_strcmp0 (ice_policy, "relay") == 0 && turn == NULL) {
    ret = refuse (2, "--ice-transport-policy relay needs --turn");
    goto out;
  }
  if (source == NULL && (model == NULL || image == NULL)) {
    ret = refuse (2, "--model and --image are needed (or --source)");
    goto out;
  }

  /* every connection and every session's ICE sockets take descriptors:
   * as many as the hard limit allows; the cap is sized from it */
  if (!lingbot_webrtc_raise_fd_limit (&fd_limit, &err)) {
    g_warning ("%s (going on with the current limit)", err->message);
    g_clear_error (&err);
    fd_limit = 0;
  }

  if (overlay) {
    /* one more lingbotbin property, after those of --set */
    guint n = props ? g_strv_length (props) : 0;

    props = g_renew (char *, props, n + 2);
    props[n] = g_strdup ("overlay=true");
    props[n + 1] = NULL;
  }

  scan_plugin_dir ();
  lingbot_webrtc_config_init (&cfg);
  if (address)
    cfg.address = address;
  cfg.port = (guint) port;
  if (www == NULL)
    www = default_www ();
  cfg.www_dir = www;
  cfg.model = model;
  cfg.image = image;
  cfg.prompt = prompt;
  cfg.prompt_embeds = prompt_embeds;
  if (devices)
    cfg.devices = devices;
  cfg.gen_props = (const char *const *) props;
  if (encoder)
    cfg.encoder = encoder;
  cfg.max_sessions = max_sessions == G_MININT ? 0 : (guint) max_sessions;
  cfg.device_groups = device_groups;
  cfg.server_id = server_id;
  cfg.max_message_size = (gsize) max_message;
  cfg.source = source;
  cfg.ice_loopback = ice_loopback;
  cfg.peer_timeout = (guint) peer_timeout;
  cfg.resume_timeout = (guint) resume_timeout;
  cfg.max_connections = (guint) max_connections;
  cfg.idle_timeout = (guint) idle_timeout;
  cfg.stun_server = stun;
  cfg.turn_servers = (const char *const *) turn;
  cfg.turn_user = turn_user;
  cfg.turn_password = turn_password;
  cfg.ice_relay_only = g_strcmp0 (ice_policy, "relay") == 0;

  server = lingbot_webrtc_server_new (&cfg, &err);
  if (server == NULL) {
    ret = refuse (EXIT_FAILURE, "%s", err->message);
    goto out;
  }
  /* said once the server runs: a refusal above is its only line */
  if (fd_limit)
    g_message ("descriptor limit (RLIMIT_NOFILE): %" G_GUINT64_FORMAT,
        fd_limit);
  loop = g_main_loop_new (NULL, FALSE);
  g_unix_signal_add (SIGINT, on_signal, loop);
  g_unix_signal_add (SIGTERM, on_signal, loop);
  g_main_loop_run (loop);

out:
  g_clear_pointer (&server, lingbot_webrtc_server_free);
  g_free (address);
  g_free (www);
  g_free (model);
  g_free (image);
  g_free (prompt);
  g_free (prompt_embeds);
  g_free (devices);
  g_free (encoder);
  g_free (source);
  g_strfreev (props);
  g_free (device_groups);
  g_free (server_id);
  g_free (stun);
  g_strfreev (turn);
  g_free (turn_credentials);
  g_free (ice_policy);
  g_free (turn_user);
  if (turn_password)
    memset (turn_password, 0, strlen (turn_password));
  g_free (turn_password);
  return ret;
}

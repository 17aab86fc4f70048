/* lingbot-gst: the WebRTC sender's ICE servers (STUN, TURN, the policy)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * One room of the server of webrtc-server.h (see webrtc-server-private.h):
 * the STUN server and TURN relays of the configuration, checked once,
 * given to every peer's webrtcbin and told to the page in `welcome`.
 * Behind a NAT, on mobile networks or corporate firewalls the host
 * candidates of the two ends do not reach each other; a STUN server gives
 * the browser its public (server-reflexive) address, a TURN relay (coturn)
 * carries the media when nothing else gets through.
 */
#define GST_USE_UNSTABLE_API 1

#include "webrtc-server-private.h"

#include <string.h>

#define TURN_CREDENTIALS_HINT "--turn-credentials FILE (user:password) or " \
  "LINGBOT_TURN_USER and LINGBOT_TURN_PASSWORD"

/**
 * lingbot_webrtc_ice_url_check:
 * @option: the option the URL came with, "--stun" or "--turn" (names the
 *   schemes it takes: stun, or turn and turns; and the error message)
 * @url: "SCHEME:HOST[:PORT][?transport=udp|tcp]" (RFC 7064 / 7065, the
 *   form of RTCPeerConnection's iceServers) or "SCHEME://HOST[:PORT]..."
 *   (webrtcbin's form); an IPv6 address in brackets
 * @error: where to put an error
 *
 * Checks an ICE server URL.  Credentials are refused in it: a URL given
 * on the command line shows in `ps`; TURN credentials come from
 * lingbot_webrtc_turn_credentials().
 *
 * Returns: (transfer full): the URL in the page's form with its port
 *   ("turn:relay.example:3478?transport=udp"; 3478 when none is given,
 *   5349 for turns), or %NULL with @error set (G_IO_ERROR_INVALID_ARGUMENT,
 *   "invalid --turn 'URL': ..." naming what is wrong)
 */
char *
lingbot_webrtc_ice_url_check (const char *option, const char *url,
    GError ** error)
{
  gboolean turn = g_strcmp0 (option, "--turn") == 0;
  const char *form = turn ? "turn:HOST[:PORT][?transport=udp|tcp] or "
      "turns:HOST[:PORT]" : "stun:HOST[:PORT]";
  const char *colon = url ? strchr (url, ':') : NULL;
  g_autofree char *scheme = NULL;
  g_autofree char *full = NULL;
  g_autoptr (GUri) uri = NULL;
  const char *rest, *host, *query, *transport = NULL;
  int port;

  if (colon == NULL)
    goto bad;
  scheme = g_ascii_strdown (url, colon - url);
  if (turn ? strcmp (scheme, "turn") != 0 && strcmp (scheme, "turns") != 0 :
      strcmp (scheme, "stun") != 0)
    goto bad;
  rest = colon + 1;
  if (g_str_has_prefix (rest, "//"))
    rest += 2;
  full = g_strconcat ("ice://", rest, NULL);
  uri = g_uri_parse (full, G_URI_FLAGS_NONE, NULL);
  if (uri == NULL)
    goto bad;
  if (g_uri_get_userinfo (uri)) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
        "invalid %s '%s': credentials do not belong in the URL (it shows in "
        "ps): use " TURN_CREDENTIALS_HINT, option, url);
    return NULL;
  }
  host = g_uri_get_host (uri);
  if (host == NULL || *host == '\0' || *g_uri_get_path (uri) != '\0'
      || g_uri_get_fragment (uri))
    goto bad;
  query = g_uri_get_query (uri);
  if (query) {
    if (strcmp (scheme, "turn") == 0 && strcmp (query, "transport=udp") == 0)
      transport = "udp";
    else if (strcmp (scheme, "turn") == 0
        && strcmp (query, "transport=tcp") == 0)
      transport = "tcp";
    else {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
          "invalid %s '%s': the only parameter is transport=udp or "
          "transport=tcp (turn: only)", option, url);
      return NULL;
    }
  }
  port = g_uri_get_port (uri);
  if (port == 0) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
        "invalid %s '%s': port 0", option, url);
    return NULL;
  }
  if (port < 0)
    port = strcmp (scheme, "turns") == 0 ? 5349 : 3478;
  return g_strdup_printf ("%s:%s%s%s:%d%s%s", scheme,
      strchr (host, ':') ? "[" : "", host, strchr (host, ':') ? "]" : "",
      port, transport ? "?transport=" : "", transport ? transport : "");

bad:
  g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
      "invalid %s '%s': not %s", option, GST_STR_NULL (url), form);
  return NULL;
}

static gboolean
split_credentials (const char *line, const char *where, char **user,
    char **password, GError ** error)
{
  const char *colon = strchr (line, ':');

  if (colon == NULL || colon == line || colon[1] == '\0') {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
        "%s: the first line is not user:password", where);
    return FALSE;
  }
  *user = g_strndup (line, colon - line);
  *password = g_strdup (colon + 1);
  return TRUE;
}

/**
 * lingbot_webrtc_turn_credentials:
 * @file: (nullable): a file whose first line is "user:password" (the
 *   user name has no colon; the password is the rest of the line), or
 *   %NULL for the environment
 * @user: (out): the user name, or %NULL when none is configured
 * @password: (out): the password, or %NULL when none is configured
 * @error: where to put an error
 *
 * Reads the TURN credentials from @file, else from the environment
 * (LINGBOT_TURN_USER and LINGBOT_TURN_PASSWORD, both or neither): never
 * from the command line, where `ps` shows them.
 *
 * Returns: %TRUE (with *@user and *@password %NULL when @file is %NULL and
 *   neither variable is set), or %FALSE with @error set: the file cannot be
 *   read (G_FILE_ERROR), its first line is not user:password, or one of
 *   the two variables is set without the other (G_IO_ERROR_INVALID_DATA)
 */
gboolean
lingbot_webrtc_turn_credentials (const char *file, char **user,
    char **password, GError ** error)
{
  const char *env_user = g_getenv ("LINGBOT_TURN_USER");
  const char *env_password = g_getenv ("LINGBOT_TURN_PASSWORD");

  *user = *password = NULL;
  if (file) {
    g_autofree char *text = NULL;
    g_autofree char *where = g_strdup_printf ("--turn-credentials %s", file);
    g_autoptr (GError) err = NULL;
    char *eol;

    if (!g_file_get_contents (file, &text, NULL, &err)) {
      g_set_error (error, err->domain, err->code, "%s: %s", where,
          err->message);
      return FALSE;
    }
    eol = strpbrk (text, "\r\n");
    if (eol)
      *eol = '\0';
    return split_credentials (text, where, user, password, error);
  }
  if (env_user == NULL && env_password == NULL)
    return TRUE;
  if (env_user == NULL || env_password == NULL || *env_user == '\0'
      || *env_password == '\0') {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
        "LINGBOT_TURN_USER and LINGBOT_TURN_PASSWORD are needed together");
    return FALSE;
  }
  *user = g_strdup (env_user);
  *password = g_strdup (env_password);
  return TRUE;
}

/* "turn:host:port?transport=udp" -> webrtcbin's
 * "turn://user:password@host:port?transport=udp" (percent-encoded) */
static char *
gst_form (const char *url, const char *user, const char *password)
{
  const char *colon = strchr (url, ':');
  g_autofree char *scheme = g_strndup (url, colon - url);
  g_autofree char *u = NULL;
  g_autofree char *pw = NULL;

  if (user == NULL)
    return g_strdup_printf ("%s://%s", scheme, colon + 1);
  u = g_uri_escape_string (user, NULL, FALSE);
  pw = g_uri_escape_string (password, NULL, FALSE);
  return g_strdup_printf ("%s://%s:%s@%s", scheme, u, pw, colon + 1);
}

gboolean
ice_setup (LingbotWebrtcServer * server, const LingbotWebrtcConfig * cfg,
    GError ** error)
{
  guint n = cfg->turn_servers ? g_strv_length ((char **) cfg->turn_servers) : 0;

  if (cfg->stun_server) {
    server->stun_url = lingbot_webrtc_ice_url_check ("--stun",
        cfg->stun_server, error);
    if (server->stun_url == NULL)
      return FALSE;
    server->stun_gst = gst_form (server->stun_url, NULL, NULL);
  }
  if (n && (cfg->turn_user == NULL || cfg->turn_password == NULL)) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
        "--turn needs credentials: " TURN_CREDENTIALS_HINT);
    return FALSE;
  }
  if (cfg->ice_relay_only && n == 0) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
        "--ice-transport-policy relay needs --turn");
    return FALSE;
  }
  server->turn_urls = g_new0 (char *, n + 1);
  server->turn_gst = g_new0 (char *, n + 1);
  for (guint i = 0; i < n; i++) {
    server->turn_urls[i] = lingbot_webrtc_ice_url_check ("--turn",
        cfg->turn_servers[i], error);
    if (server->turn_urls[i] == NULL)
      return FALSE;
    server->turn_gst[i] = gst_form (server->turn_urls[i], cfg->turn_user,
        cfg->turn_password);
  }
  if (n) {
    server->turn_user = g_strdup (cfg->turn_user);
    server->turn_password = g_strdup (cfg->turn_password);
  }
  server->ice_relay_only = cfg->ice_relay_only;
  return TRUE;
}

void
ice_clear (LingbotWebrtcServer * server)
{
  g_clear_pointer (&server->stun_url, g_free);
  g_clear_pointer (&server->stun_gst, g_free);
  g_clear_pointer (&server->turn_urls, g_strfreev);
  g_clear_pointer (&server->turn_gst, g_strfreev);
  g_clear_pointer (&server->turn_user, g_free);
  g_clear_pointer (&server->turn_password, g_free);
}

gboolean
ice_configure (LingbotWebrtcServer * server, GstElement * webrtc,
    GError ** error)
{
  GstWebRTCICE *ice = NULL;

  /* no UPnP port mappings: a server is reached through its address, STUN
   * or a relay; libnice's UPnP discovery (gupnp-igd) only adds SSDP
   * traffic, and a warning when its port is taken */
  g_object_get (webrtc, "ice-agent", &ice, NULL);
  if (ice) {
    GObject *agent = NULL;

    if (g_object_class_find_property (G_OBJECT_GET_CLASS (ice), "agent"))
      g_object_get (ice, "agent", &agent, NULL);
    if (agent && g_object_class_find_property (G_OBJECT_GET_CLASS (agent),
            "upnp"))
      g_object_set (agent, "upnp", FALSE, NULL);
    g_clear_object (&agent);
    gst_object_unref (ice);
  }
  if (server->stun_gst)
    g_object_set (webrtc, "stun-server", server->stun_gst, NULL);
  for (guint i = 0; server->turn_gst && server->turn_gst[i]; i++) {
    gboolean ok = FALSE;

    g_signal_emit_by_name (webrtc, "add-turn-server", server->turn_gst[i], &ok);
    if (!ok) {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
          "webrtcbin refused the TURN server %s", server->turn_urls[i]);
      return FALSE;
    }
  }
  if (server->ice_relay_only)
    g_object_set (webrtc, "ice-transport-policy",
        GST_WEBRTC_ICE_TRANSPORT_POLICY_RELAY, NULL);
  return TRUE;
}

void
ice_put_welcome (LingbotWebrtcServer * server, JsonBuilder * b)
{
  json_builder_set_member_name (b, "ice-servers");
  json_builder_begin_array (b);
  if (server->stun_url) {
    json_builder_begin_object (b);
    server_put_string (b, "urls", server->stun_url);
    json_builder_end_object (b);
  }
  if (server->turn_urls && server->turn_urls[0]) {
    json_builder_begin_object (b);
    json_builder_set_member_name (b, "urls");
    json_builder_begin_array (b);
    for (guint i = 0; server->turn_urls[i]; i++)
      json_builder_add_string_value (b, server->turn_urls[i]);
    json_builder_end_array (b);
    server_put_string (b, "username", server->turn_user);
    server_put_string (b, "credential", server->turn_password);
    json_builder_end_object (b);
  }
  json_builder_end_array (b);
  server_put_string (b, "ice-transport-policy",
      server->ice_relay_only ? "relay" : "all");
}

char *
ice_failure_hint (LingbotWebrtcServer * server)
{
  g_autofree char *turn = NULL;

  if (server->turn_urls == NULL || server->turn_urls[0] == NULL)
    return g_strdup ("");
  turn = g_strjoinv (", ", server->turn_urls);
  return g_strdup_printf (" (%s through the TURN relay %s: is it running, "
      "reachable from both ends, and are the credentials right?)",
      server->ice_relay_only ? "only" : "no direct path and none", turn);
}

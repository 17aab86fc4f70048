/* lingbot-gst: the WebRTC sender of the live example (server side)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * One libsoup-3.0 server: static files of the page, the start image and a
 * WebSocket signalling endpoint (`/ws`).  A session is one running world
 * with its own pipeline, the generation part
 *
 *   lingbotcontrolsrc ! lingbotbin ! videoconvert ! queue ! ENCODER ! PAY !
 *   tee
 *
 * and, per browser connection (a peer), a branch `queue ! webrtcbin` linked
 * to the tee at runtime and removed again without stopping the generator:
 * a reload takes the session over (it continues from the current chunk)
 * and a silent browser is released.  Each webrtcbin has two data channels
 * created by the sender, as webrtcsink does: "input" (browser -> server,
 * JSON navigation events, turned into upstream GstNavigation events) and
 * "control" (server -> browser, progress, chunk metrics and key echoes).
 * The message schema and the limits are in docs/webrtc.md.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define LINGBOT_WEBRTC_DEFAULT_ADDRESS "127.0.0.1"
#define LINGBOT_WEBRTC_DEFAULT_PORT 8080
#define LINGBOT_WEBRTC_DEFAULT_MAX_SESSIONS 1
#define LINGBOT_WEBRTC_DEFAULT_ENCODER "vp8"
#define LINGBOT_WEBRTC_DEFAULT_DEVICES "cpu:1"
/* signalling and data-channel messages above this are dropped (bytes) */
#define LINGBOT_WEBRTC_DEFAULT_MAX_MESSAGE_SIZE (64 * 1024)
/* WebSocket messages above this, counted over all their fragments, close
 * the connection with 1009 (SOUP_WEBSOCKET_CLOSE_TOO_BIG) */
#define LINGBOT_WEBRTC_WS_HARD_LIMIT (1024 * 1024)
/* a peer that has not connected, or from which nothing arrived, for this
 * long is released (seconds) */
#define LINGBOT_WEBRTC_DEFAULT_PEER_TIMEOUT 20
/* a session without a peer is kept this long for a reload to resume it */
#define LINGBOT_WEBRTC_DEFAULT_RESUME_TIMEOUT 10
/* TCP connections at most (WebSockets included); the automatic cap is
 * this or what RLIMIT_NOFILE leaves after the reserve below, the smaller */
#define LINGBOT_WEBRTC_DEFAULT_MAX_CONNECTIONS 256
/* descriptors kept for everything but the connections: the process and
 * the server, plus each session's pipeline and peers (webrtcbin's ICE
 * sockets, GStreamer's wake-up pipes, model files) */
#define LINGBOT_WEBRTC_FD_RESERVE 64
#define LINGBOT_WEBRTC_FD_RESERVE_PER_SESSION 128
/* a connection that has not sent a complete HTTP request within this long,
 * or not taken its response within as long again, is closed (seconds) */
#define LINGBOT_WEBRTC_DEFAULT_IDLE_TIMEOUT 10
/* a server id (--server-id) is at most this long: letters, digits, '_' */
#define LINGBOT_WEBRTC_SERVER_ID_MAX 31
/* WebSocket close codes (application range 4000-4999, as HTTP statuses):
 * a refused session (libsoup refuses 1013, "try again later"; 409 as the
 * reference's HTTP refusal), a silent peer, a peer replaced by a newer
 * connection to its session, a browser that cannot take the codec */
#define LINGBOT_WEBRTC_CLOSE_BUSY 4409
#define LINGBOT_WEBRTC_CLOSE_TIMEOUT 4408
#define LINGBOT_WEBRTC_CLOSE_REPLACED 4410
#define LINGBOT_WEBRTC_CLOSE_CODEC 4415

/**
 * LingbotWebrtcConfig:
 * @address: address to bind (%LINGBOT_WEBRTC_DEFAULT_ADDRESS); when it is a
 *   loopback address, ICE gathers loopback candidates only
 * @port: TCP port, 0 = any free port (see lingbot_webrtc_server_get_port())
 * @www_dir: folder of the page (index.html, app.js, style.css)
 * @model: lingbotbin model-path
 * @image: lingbotbin image-location
 * @prompt: lingbotbin prompt (or %NULL)
 * @prompt_embeds: lingbotbin prompt-embeds (or %NULL)
 * @devices: lingbotbin devices
 * @gen_props: extra lingbotbin properties "name=value" (%NULL-terminated),
 *   set with gst_util_set_object_arg(): width, height, frames, seed, ...
 * @encoder: "vp8", "x264" or "openh264"
 * @max_sessions: concurrent sessions; the next one is refused.  0 =
 *   automatic: 1, or one per device group with @device_groups (more than
 *   the groups is an error: a group holds one session)
 * @max_message_size: bigger messages are dropped with a log line
 * @source: a launch-line fragment that replaces
 *   `lingbotcontrolsrc ! lingbotbin` (a stand-in such as
 *   "videotestsrc is-live=true"), or %NULL
 * @ice_loopback: -1 = from @address, 0 = all interfaces, 1 = 127.0.0.1 only
 * @peer_timeout: seconds a peer may take to connect, and may stay silent
 *   once connected (nothing received over its connection), before it is
 *   released; 0 = %LINGBOT_WEBRTC_DEFAULT_PEER_TIMEOUT
 * @resume_timeout: seconds a session without any peer is kept for a
 *   reload to resume it; 0 = %LINGBOT_WEBRTC_DEFAULT_RESUME_TIMEOUT
 * @max_connections: TCP connections open at once (HTTP and WebSocket);
 *   the next one gets a 503 and is closed.  0 = automatic:
 *   %LINGBOT_WEBRTC_DEFAULT_MAX_CONNECTIONS, or fewer when RLIMIT_NOFILE
 *   leaves less after %LINGBOT_WEBRTC_FD_RESERVE +
 *   %LINGBOT_WEBRTC_FD_RESERVE_PER_SESSION per session
 * @idle_timeout: seconds a connection may take to send a complete HTTP
 *   request, and then to take its response, before it is closed (a
 *   WebSocket is exempt once upgraded); 0 =
 *   %LINGBOT_WEBRTC_DEFAULT_IDLE_TIMEOUT
 * @stun_server: a STUN server for ICE, "stun:HOST[:PORT]" (or %NULL); see
 *   lingbot_webrtc_ice_url_check()
 * @turn_servers: TURN relays, "turn:HOST[:PORT][?transport=udp|tcp]" or
 *   "turns:..." (%NULL-terminated, or %NULL), all with @turn_user and
 *   @turn_password
 * @turn_user: the TURN user name (needed with @turn_servers)
 * @turn_password: the TURN password (needed with @turn_servers)
 * @ice_relay_only: only relayed candidates, on both ends (webrtcbin's
 *   ice-transport-policy and the page's iceTransportPolicy "relay"); needs
 *   @turn_servers
 *
 * @device_groups: device groups "0,1,2,3;4,5,6,7" (or "cpu:1;cpu:1"), see
 *   lingbot_webrtc_device_groups_check(): each session runs on a free
 *   group of its own (lingbotbin devices), instead of @devices shared by
 *   all; %NULL = no groups
 * @server_id: this process's name in a fleet (`welcome`'s and /status's
 *   "server", and the start of its resume tokens, "ID-" and 32 hex
 *   digits, by which a front door routes a reload to this process): 1 to
 *   %LINGBOT_WEBRTC_SERVER_ID_MAX letters, digits or '_'; or %NULL
 *
 * The ICE servers are given to every peer's webrtcbin (stun-server,
 * add-turn-server) and to the page in `welcome` ("ice-servers", in the
 * form of RTCPeerConnection's iceServers, credentials included: the page
 * needs them to allocate a relay).
 *
 * Set with lingbot_webrtc_config_init() first.
 */
typedef struct
{
  const char *address;
  guint port;
  const char *www_dir;
  const char *model;
  const char *image;
  const char *prompt;
  const char *prompt_embeds;
  const char *devices;
  const char *const *gen_props;
  const char *encoder;
  guint max_sessions;
  gsize max_message_size;
  const char *source;
  int ice_loopback;
  guint peer_timeout;
  guint resume_timeout;
  guint max_connections;
  guint idle_timeout;
  const char *stun_server;
  const char *const *turn_servers;
  const char *turn_user;
  const char *turn_password;
  gboolean ice_relay_only;
  const char *device_groups;
  const char *server_id;
} LingbotWebrtcConfig;

typedef struct _LingbotWebrtcServer LingbotWebrtcServer;

void lingbot_webrtc_config_init (LingbotWebrtcConfig * cfg);
char *lingbot_webrtc_ice_url_check (const char *option, const char *url,
    GError ** error);
char **lingbot_webrtc_device_groups_check (const char *groups,
    guint * n_groups, GError ** error);
gboolean lingbot_webrtc_turn_credentials (const char *file, char **user,
    char **password, GError ** error);
gboolean lingbot_webrtc_raise_fd_limit (guint64 * soft, GError ** error);

LingbotWebrtcServer *lingbot_webrtc_server_new (const LingbotWebrtcConfig * cfg,
    GError ** error);
guint lingbot_webrtc_server_get_port (LingbotWebrtcServer * server);
/* counters, readable from any thread (see webrtc-server.c) */
guint lingbot_webrtc_server_get_n_sessions (LingbotWebrtcServer * server);
guint lingbot_webrtc_server_get_n_peers (LingbotWebrtcServer * server);
guint lingbot_webrtc_server_get_n_dropped (LingbotWebrtcServer * server);
/* browser mDNS (.local) candidates not passed on (ICE on 127.0.0.1 only) */
guint lingbot_webrtc_server_get_n_mdns_ignored (LingbotWebrtcServer * server);
guint lingbot_webrtc_server_get_n_key_units (LingbotWebrtcServer * server);
guint lingbot_webrtc_server_get_n_too_big (LingbotWebrtcServer * server);
guint lingbot_webrtc_server_get_n_timeouts (LingbotWebrtcServer * server);
guint lingbot_webrtc_server_get_n_replaced (LingbotWebrtcServer * server);
guint lingbot_webrtc_server_get_max_connections (LingbotWebrtcServer * server);
guint lingbot_webrtc_server_get_n_connections (LingbotWebrtcServer * server);
guint lingbot_webrtc_server_get_n_refused (LingbotWebrtcServer * server);
guint lingbot_webrtc_server_get_n_idle_timeouts (LingbotWebrtcServer * server);
guint lingbot_webrtc_server_get_n_accept_errors (LingbotWebrtcServer * server);
void lingbot_webrtc_server_free (LingbotWebrtcServer * server);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotWebrtcServer, lingbot_webrtc_server_free)
/* exposed for the tests: a request path (percent-encoded, as received) to
 * a file under @root, or %NULL with *status 403 (escapes) / 404 */
char *lingbot_webrtc_resolve_path (const char *root, const char *path,
    guint * status);

G_END_DECLS

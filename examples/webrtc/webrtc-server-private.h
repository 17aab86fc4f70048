/* lingbot-gst: the WebRTC sender's rooms, what they share (private)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The server of webrtc-server.h is one object in seven files, one room
 * each (the first five along the sections it had when it was one file):
 *
 *   webrtc-server.c      encoders, JSON helpers, the hop to the server's
 *                        context, the server object and its public API
 *   webrtc-signalling.c  the WebSocket endpoint: handshake, upgrade,
 *                        connections and the browser's signalling messages
 *   webrtc-http.c        TCP connections (accept, cap, idle timeout) and
 *                        the static files
 *   webrtc-peer.c        peers: sending, key frames, release, webrtcbin
 *                        signalling, input from the browser, the branch
 *   webrtc-session.c     sessions: their pipeline, bus and key echo
 *   webrtc-ice.c         the ICE servers: STUN, TURN, the transport policy
 *   webrtc-groups.c      device groups, one session each; /status
 *
 * This header holds the types more than one room uses and the functions
 * one room calls in another, each prefixed with its room (server_,
 * signalling_, http_, peer_, session_, ice_, groups_); everything else
 * stays static in its room.  Include it after defining GST_USE_UNSTABLE_API.
 */
#pragma once

#include <gst/gst.h>
#include <gst/webrtc/webrtc.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>

#include "webrtc-server.h"

G_BEGIN_DECLS

#define WS_PATH "/ws"
#define START_IMAGE_PATH "/start-image"
#define STATUS_PATH "/status"
#define CHUNK_RING 8

typedef struct _Session Session;
typedef struct _Peer Peer;
typedef struct _Conn Conn;
typedef struct _Client Client;

/* a device group (webrtc-groups.c) */
typedef struct
{
  char *devices;                /* lingbotbin devices */
  Session *session;             /* the session on it, or NULL */
  char *error;                  /* why its last world could not be made,
                                 * or NULL (made, or never tried) */
} Group;

struct _LingbotWebrtcServer
{
  GMainContext *context;
  SoupServer *soup;
  GSocketListener *listener;    /* accepts; each connection goes to soup */
  GCancellable *accept_cancel;
  GSource *accept_retry;        /* the re-arm after a failed accept */
  guint accept_failures;        /* in a row */
  GHashTable *clients;          /* id -> Client (not owned) */
  guint next_client;
  guint max_connections, idle_timeout;
  guint port;
  char *www_dir;                /* realpath */
  char *image_real;             /* realpath of the start image, or NULL */
  GHashTable *sessions;         /* id -> Session (a reference) */
  GHashTable *conns;            /* Conn set (owned) */
  guint next_session, next_peer, next_conn;

  /* atomic counters */
  gint n_sessions, n_peers;
  gint n_dropped, n_mdns_ignored, n_key_units, n_too_big, n_timeouts;
  gint n_replaced;
  gint n_connections, n_refused, n_idle_timeouts, n_accept_errors;

  /* config, owned copies */
  char *address;
  char *model, *image, *prompt, *prompt_embeds, *devices, *encoder, *source;
  char **gen_props;
  guint max_sessions;
  gsize max_message_size;
  gboolean ice_loopback;
  guint peer_timeout, resume_timeout;
  /* ICE servers (webrtc-ice.c): the page's form and webrtcbin's */
  char *stun_url, *stun_gst;
  char **turn_urls, **turn_gst;
  char *turn_user, *turn_password;
  gboolean ice_relay_only;
  /* device groups (webrtc-groups.c); none: n_groups 0 */
  Group *groups;
  guint n_groups;
  GSource *refill;              /* the next groups_make_worlds() */
  gboolean stopping;            /* being freed: no world is made */
  char *server_id;
};

typedef struct
{
  const char *name;
  const char *codec;            /* the RTP encoding name */
  const char *chain;            /* ENC name=enc ! ... ! PAY name=pay */
  guint pt;
  const char *rtp_caps;         /* the payloader's output */
  const char *preferences;      /* the transceiver's codec preferences */
} Encoder;

typedef struct
{
  gint64 id;
  guint key;                    /* LingbotKey bit */
  char *name;
  guint64 min_chunk;            /* first chunk that may have used it */
  gint64 t_us;                  /* when it arrived */
} KeyStamp;

typedef struct
{
  gint64 id;
  char *name;
  guint64 chunk;
  guint64 first_frame;          /* session frame number of the chunk's first */
  gint64 t_us;                  /* when the key arrived */
  guint32 rtp_ts;               /* RTP timestamp of that first frame */
  double server_ms;             /* key arrival -> first frame at the payloader */
} Echo;

/* a lingbot-chunk waiting for its lingbot-decode */
typedef struct
{
  gint64 index;                 /* -1 = free */
  int frames;
  guint64 first_frame;
  char keys[32];
  double dit, generate;
} ChunkInfo;

struct _Conn
{
  LingbotWebrtcServer *server;
  guint id;
  SoupWebsocketConnection *ws;
  GIOStream *guard;
  GSource *trip;
  guint64 trip_size;
  gulong message_id, closed_id;
  Peer *peer;                   /* the peer it signals for, or NULL */
};

/* Sessions and peers are atomic reference-counted boxes (g_atomic_rc_box):
 * a reference is g_atomic_rc_box_acquire(), and session_unref() /
 * peer_unref() drop one */
struct _Session
{
  LingbotWebrtcServer *server;  /* valid while !closed */
  GMainContext *context;
  guint id;
  gint group;                   /* its device group, or -1 */
  /* made for its group before any browser (at start, or after the group's
   * previous session ended); FALSE once a browser joined */
  gboolean spare;
  /* the resume token: 32 hex digits, after "SERVER-ID-" with a server id
   * (a front door routes a reload to this process by it) */
  char token[LINGBOT_WEBRTC_SERVER_ID_MAX + 1 + 32 + 1];
  gboolean closed;
  const Encoder *enc;
  gsize max_message;            /* the server's, for streaming threads */
  GstElement *pipeline;
  GstElement *tee;
  GstElement *control_src;      /* NULL with a stand-in source */
  GstElement *gen;              /* lingbotgen inside lingbotbin, or NULL */
  GstPad *pay_src;
  guint bus_watch;
  GList *peers;                 /* Peer, a reference each */
  /* the bins of released peers until their branch is dropped: their
   * elements' last errors (an SCTP association torn down) are no error of
   * the session */
  GPtrArray *leaving;
  Peer *active;
  GSource *resume;              /* the no-peer timer */

  /* main context only */
  GQueue pending_keys;          /* KeyStamp */
  gint64 last_chunk;            /* -1 before the first */
  guint64 frames_total;         /* frames of the chunks announced so far */
  const char *state;            /* starting, waiting, generating, decoding, ready */
  gint64 state_chunk;
  /* the chunk the generator waits to make (lingbot-waiting), -1 while it
   * works: it runs ahead of the decode, so its wait is announced again
   * once the chunks before it are decoded */
  gint64 waiting_chunk;
  gint64 last_decoded;          /* -1 before the first decode */
  ChunkInfo ring[CHUNK_RING];

  /* shared with the pay probe */
  GMutex lock;
  GQueue pending_echo;          /* Echo */
  guint64 frames_sent;          /* RTP frames seen at the payloader */
  guint32 last_rtp_ts;
  gboolean have_rtp_ts;
};

struct _Peer
{
  Session *session;             /* a reference */
  GMainContext *context;
  guint id;
  gboolean released;
  Conn *conn;                   /* NULL once its WebSocket is gone */
  GstElement *bin, *webrtc;
  GstPad *tee_pad, *bin_sink;
  GstWebRTCDataChannel *input, *control;
  gboolean offered, answered, connected;
  guint mdns_ignored;
  GPtrArray *held;              /* key names pressed and not released */
  /* every promise handed to webrtcbin (a reference each, under
   * promise_lock): interrupted when the branch stops (peer_cleanup()) */
  GMutex promise_lock;
  GPtrArray *promises;
  gint64 created_us, last_rx_us;
  gint rx_packets;              /* atomic: packets from the browser */
  gint rx_seen;
  GSource *tick;
  guint ticks;
  gboolean rx_probed;
  gint key_unit_count;
};

/* One accepted TCP connection, from its accept to the finalisation of its
 * GSocketConnection, which closes the descriptor: soup reads its HTTP
 * request, a WebSocket upgrade steals it into a Conn.  It lives as data of
 * that GSocketConnection and is found from a message through the remote
 * address object given to soup_server_accept_iostream(), which soup keeps
 * and returns as the message's.
 *
 * The server accepts itself (a GSocketListener) rather than with
 * soup_server_listen(): libsoup 3.2's listener stops watching its socket
 * for good after one failed accept() (EMFILE, or a network error of the
 * connection), and it has no cap and no timeout.  Connections handed over
 * with soup_server_accept_iostream() serve one request each (libsoup keeps
 * only its own listeners' connections alive); the responses say so. */
struct _Client
{
  LingbotWebrtcServer *server;  /* NULL once the server is freed */
  guint id;
  GSocket *socket;              /* the connection's: valid while it lives */
  GSource *idle;                /* the request's (or response's) deadline */
};

/* hopping to the server's context (webrtc-server.c) */
typedef void (*HopFunc) (gpointer obj, gpointer data);

#define peer_invoke(p, f, d, fr) \
  server_invoke_full ((p), TRUE, FALSE, (HopFunc) (f), (d), (fr))
#define session_invoke(s, f, d, fr) \
  server_invoke_full ((s), FALSE, FALSE, (HopFunc) (f), (d), (fr))

/* webrtc-server.c */
/* the encoder called @name, or NULL */
const Encoder *server_find_encoder (const char *name);
/* one member of the object a builder is in: name and value */
void server_put_string (JsonBuilder * b, const char *name, const char *value);
void server_put_int (JsonBuilder * b, const char *name, gint64 value);
void server_put_string_or_null (JsonBuilder * b, const char *name,
    const char *value);
void server_put_boolean (JsonBuilder * b, const char *name, gboolean value);
void server_put_double (JsonBuilder * b, const char *name, double value);
/* a builder inside a JSON object whose "type" member is @type */
JsonBuilder *server_message_new (const char *type);
/* closes the object of server_message_new(): the message as text */
char *server_message_finish (JsonBuilder * b);
/* an "error" message (code, message, fatal, where, id) as text */
char *server_error_json (const char *code, const char *message,
    gboolean fatal, const char *where, gboolean has_id, gint64 id);
/* runs @func on the context of @obj (a Peer if @peer, else a Session) with
 * a reference held, unless it was released / closed meanwhile (or @always) */
void server_invoke_full (gpointer obj, gboolean peer, gboolean always,
    HopFunc func, gpointer data, GDestroyNotify free_func);

/* webrtc-signalling.c */
/* sends @text over the WebSocket of @c while it is open */
void signalling_conn_send (Conn * c, const char *text);
/* server_message_finish() @b, then signalling_conn_send() it */
void signalling_conn_send_message (Conn * c, JsonBuilder * b);
/* closes the WebSocket of @c with @code, the reason cut to a close frame */
void signalling_conn_close (Conn * c, gushort code, const char *reason);
/* frees a Conn (the destroy function of the server's table) */
void signalling_conn_free (Conn * c);
/* soup's handler of the WebSocket path: checks, then upgrades */
void signalling_on_ws_http (SoupServer * soup, SoupServerMessage * msg,
    const char *path, GHashTable * query, gpointer user_data);

/* webrtc-http.c */
/* stops the idle deadline of a TCP connection */
void http_client_stop_timer (Client * cl);
/* the TCP connection a request came on, or NULL */
Client *http_client_of_message (LingbotWebrtcServer * server,
    SoupServerMessage * msg);
/* soup's request-read: the response's deadline, "Connection: close" */
void http_on_request_read (SoupServer * soup, SoupServerMessage * msg,
    gpointer user_data);
/* soup's request-finished and request-aborted: no deadline left */
void http_on_request_done (SoupServer * soup, SoupServerMessage * msg,
    gpointer user_data);
/* soup's handler of every other path: the static files, the start image */
void http_on_http (SoupServer * soup, SoupServerMessage * msg,
    const char *path, GHashTable * query, gpointer user_data);
/* one accept at a time, on the server's context */
void http_accept_next (LingbotWebrtcServer * server);

/* webrtc-peer.c */
/* drops a reference of a peer */
void peer_unref (Peer * p);
/* sends @text on the peer's "control" channel while it is open */
void peer_control_send (Peer * p, const char *text);
/* a dropped message: one log line, a count, an error reply */
void peer_reject (Peer * p, const char *where, const char *why, gsize size,
    gboolean has_id, gint64 id);
/* after its branch is stopped: drops the peer's signal handlers and branch */
void peer_cleanup (Peer * p);
GstPromise *peer_track_promise (Peer * p, GstPromise * promise);
/* releases a peer: told (@error_code), WebSocket closed, branch dropped */
void peer_release (Peer * p, const char *reason, gushort close_code,
    const char *error_code, const char *message);
/* builds the peer's branch, links it to the tee and makes its channels */
gboolean peer_build (Peer * p, GError ** error);
/* a new peer of @s for the WebSocket @c, in the session's list */
Peer *peer_new (Session * s, Conn * c);

/* webrtc-ice.c */
/* checks and copies the ICE servers of @cfg */
gboolean ice_setup (LingbotWebrtcServer * server,
    const LingbotWebrtcConfig * cfg, GError ** error);
/* frees what ice_setup() copied */
void ice_clear (LingbotWebrtcServer * server);
/* gives the ICE servers and the policy to a peer's webrtcbin */
gboolean ice_configure (LingbotWebrtcServer * server, GstElement * webrtc,
    GError ** error);
/* "ice-servers" and "ice-transport-policy" of `welcome` */
void ice_put_welcome (LingbotWebrtcServer * server, JsonBuilder * b);
/* what to add to an ICE failure: the relay to check, or "" without one */
char *ice_failure_hint (LingbotWebrtcServer * server);

/* webrtc-groups.c */
/* checks and copies the device groups of @cfg; sets max_sessions */
gboolean groups_setup (LingbotWebrtcServer * server,
    const LingbotWebrtcConfig * cfg, GError ** error);
/* frees what groups_setup() copied */
void groups_clear (LingbotWebrtcServer * server);
/* gives @s group @group when it is free, or with @group -1 a free group,
 * one whose last world was made before one that failed (TRUE without
 * groups); FALSE when none is free */
gboolean groups_take (LingbotWebrtcServer * server, Session * s, gint group);
/* session_build() of @s, its result recorded on its group: a failure is
 * the group's error (/status) until a world is made on it again */
gboolean groups_build_world (LingbotWebrtcServer * server, Session * s,
    GError ** error);
/* frees the group of @s */
void groups_release (LingbotWebrtcServer * server, Session * s);
/* the lingbotbin devices of @s: its group's, else the server's */
const char *groups_devices (LingbotWebrtcServer * server, Session * s);
/* seconds until a session kept for a reload expires (the soonest), or -1
 * when none is waiting for its reload */
gint64 groups_retry_after (LingbotWebrtcServer * server);
/* makes a world (a spare session) on every group without one */
void groups_make_worlds (LingbotWebrtcServer * server);
/* a session of a group ended: a new world for it, soon */
void groups_session_ended (LingbotWebrtcServer * server, Session * s);
/* a spare world for a new browser, or NULL */
Session *groups_spare (LingbotWebrtcServer * server);
/* sessions with a browser (or kept for its reload): not the spares */
guint groups_n_active (LingbotWebrtcServer * server);
/* whether a new browser can have a session now */
gboolean groups_slot_free (LingbotWebrtcServer * server);
/* the JSON of /status */
char *groups_status_json (LingbotWebrtcServer * server);
/* soup's handler of /status */
void groups_on_status (SoupServer * soup, SoupServerMessage * msg,
    const char *path, GHashTable * query, gpointer user_data);

/* webrtc-session.c */
/* drops a reference of a session */
void session_unref (Session * s);
/* frees a key press waiting for the chunk that uses it */
void session_key_stamp_free (KeyStamp * k);
/* sends @event upstream from the payloader, else to the control source */
void session_send_navigation (Session * s, GstEvent * event);
/* has lingbotvaedec push its preview still again (a force-key-unit) */
void session_repeat_preview (Session * s);
/* ends a session normally: its peers released, the pipeline stopped */
void session_close (Session * s, const char *reason);
/* a fatal session error: every peer is told, then the session ends */
void session_fail (Session * s, const char *code, const char *message);
/* the last peer is gone: keep the world for a reload to resume it */
void session_detached (Session * s);
/* the launch line of a session's pipeline with @enc (newly allocated) */
char *session_description (LingbotWebrtcServer * server, const Encoder * enc);
/* makes the pipeline of @s and starts it */
gboolean session_build (Session * s, GError ** error);
/* a new session in the server's table, on device group @group (-1: a
 * free one, see groups_take()) */
Session *session_new (LingbotWebrtcServer * server, gint group);
/* the open session of a resume token, or NULL */
Session *session_by_token (LingbotWebrtcServer * server, const char *token);

G_END_DECLS

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
 */
#define GST_USE_UNSTABLE_API 1

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <gst/gst.h>
#include <gst/rtp/gstrtpbuffer.h>
#include <gst/sdp/sdp.h>
#include <gst/video/navigation.h>
#include <gst/video/video.h>
#include <gst/webrtc/webrtc.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>

#include "lingbot/control.h"
#include "webrtc-messages.h"
#include "webrtc-server.h"
#include "ws-guard.h"

#define WS_PATH "/ws"
#define START_IMAGE_PATH "/start-image"
#define LABEL_INPUT "input"
#define LABEL_CONTROL "control"
#define MAX_PENDING_KEYS 256
#define MAX_HELD_KEYS 32
#define CHUNK_RING 8
#define WEBRTC_LATENCY_MS 50
/* periodic keyframes as a safety net; joiners and PLI/FIR force one */
#define KEY_INTERVAL 64
/* after a failed accept() (EMFILE, ENFILE, ENOBUFS, an error of the
 * connection), the listener is watched again this much later (ms) */
#define ACCEPT_RETRY_MS 100
#define LISTEN_BACKLOG 128

typedef struct _Session Session;
typedef struct _Peer Peer;
typedef struct _Conn Conn;
typedef struct _Client Client;

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
  char token[33];
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
  gint64 created_us, last_rx_us;
  gint rx_packets;              /* atomic: packets from the browser */
  gint rx_seen;
  GSource *tick;
  guint ticks;
  gboolean rx_probed;
  gint key_unit_count;
};

static void session_close (Session * s, const char *reason);
static void session_fail (Session * s, const char *code, const char *message);
static void peer_release (Peer * p, const char *reason, gushort close_code,
    const char *error_code, const char *message);
static void session_detached (Session * s);

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

static const Encoder *
find_encoder (const char *name)
{
  for (guint i = 0; i < G_N_ELEMENTS (encoders); i++)
    if (g_strcmp0 (encoders[i].name, name) == 0)
      return &encoders[i];
  return NULL;
}

/* ------------------------------------------------------------------ */
/* helpers                                                            */
/* ------------------------------------------------------------------ */

static void
key_stamp_free (KeyStamp * k)
{
  g_free (k->name);
  g_free (k);
}

static void
echo_free (Echo * e)
{
  g_free (e->name);
  g_free (e);
}

/* what the last reference of a session frees (not the box) */
static void
session_clear (Session * s)
{
  g_assert (s->pipeline == NULL);
  g_debug ("session %u: freed", s->id);
  g_ptr_array_unref (s->leaving);
  g_queue_clear_full (&s->pending_keys, (GDestroyNotify) key_stamp_free);
  g_queue_clear_full (&s->pending_echo, (GDestroyNotify) echo_free);
  g_mutex_clear (&s->lock);
  g_main_context_unref (s->context);
}

static void
session_unref (Session * s)
{
  g_atomic_rc_box_release_full (s, (GDestroyNotify) session_clear);
}

static void
peer_clear (Peer * p)
{
  g_debug ("peer %u: freed", p->id);
  g_ptr_array_unref (p->held);
  session_unref (p->session);
  g_main_context_unref (p->context);
}

static void
peer_unref (Peer * p)
{
  g_atomic_rc_box_release_full (p, (GDestroyNotify) peer_clear);
}

static void
peer_unref_closure (gpointer data, GClosure * closure)
{
  peer_unref (data);
}

/* connects @callback to @signal of @instance with a reference of @p for its
 * data, dropped with the handler */
static void
peer_connect (gpointer instance, const char *signal, GCallback callback,
    Peer * p)
{
  g_signal_connect_data (instance, signal, callback,
      g_atomic_rc_box_acquire (p), peer_unref_closure, 0);
}

/* one member of the object a builder is in: name and value */
static void
put_string (JsonBuilder * b, const char *name, const char *value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_string_value (b, value);
}

static void
put_int (JsonBuilder * b, const char *name, gint64 value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_int_value (b, value);
}

static void
put_boolean (JsonBuilder * b, const char *name, gboolean value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_boolean_value (b, value);
}

static void
put_double (JsonBuilder * b, const char *name, double value)
{
  json_builder_set_member_name (b, name);
  json_builder_add_double_value (b, value);
}

/* a builder inside a JSON object whose "type" member is @type: every
 * message has one, and message_finish() closes it */
static JsonBuilder *
message_new (const char *type)
{
  JsonBuilder *b = json_builder_new ();

  json_builder_begin_object (b);
  put_string (b, "type", type);
  return b;
}

/* closes the object of message_new(): the message as text */
static char *
message_finish (JsonBuilder * b)
{
  g_autoptr (JsonNode) root = NULL;

  json_builder_end_object (b);
  root = json_builder_get_root (b);
  return json_to_string (root, FALSE);
}

static char *
error_json (const char *code, const char *message, gboolean fatal,
    const char *where, gboolean has_id, gint64 id)
{
  g_autoptr (JsonBuilder) b = message_new ("error");

  put_string (b, "code", code);
  put_string (b, "message", message);
  put_boolean (b, "fatal", fatal);
  if (where)
    put_string (b, "where", where);
  if (has_id)
    put_int (b, "id", id);
  return message_finish (b);
}

static void
make_token (char out[33])
{
  guint8 raw[16];

  if (getrandom (raw, sizeof raw, 0) != (ssize_t) sizeof raw)
    for (guint i = 0; i < sizeof raw; i++)
      raw[i] = (guint8) g_random_int ();
  for (guint i = 0; i < sizeof raw; i++)
    g_snprintf (out + 2 * i, 3, "%02x", raw[i]);
}

/* ------------------------------------------------------------------ */
/* hopping to the server's context                                    */
/* ------------------------------------------------------------------ */

typedef void (*HopFunc) (gpointer obj, gpointer data);

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

static void
invoke_full (gpointer obj, gboolean peer, gboolean always, HopFunc func,
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

#define peer_invoke(p, f, d, fr) \
  invoke_full ((p), TRUE, FALSE, (HopFunc) (f), (d), (fr))
#define session_invoke(s, f, d, fr) \
  invoke_full ((s), FALSE, FALSE, (HopFunc) (f), (d), (fr))

/* ------------------------------------------------------------------ */
/* WebSocket connections                                              */
/* ------------------------------------------------------------------ */

static void
conn_send (Conn * c, const char *text)
{
  if (c && c->ws && soup_websocket_connection_get_state (c->ws) ==
      SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_send_text (c->ws, text);
}

/* message_finish() @b, then conn_send() it */
static void
conn_send_message (Conn * c, JsonBuilder * b)
{
  g_autofree char *text = message_finish (b);

  conn_send (c, text);
}

/* a close frame is a control frame: at most 125 bytes, 2 of them the
 * code; the reason is cut at a character boundary (the full text went in
 * the error message before) */
static void
conn_close (Conn * c, gushort code, const char *reason)
{
  char cut[121];
  const char *end;

  if (!c || !c->ws || soup_websocket_connection_get_state (c->ws) !=
      SOUP_WEBSOCKET_STATE_OPEN)
    return;
  g_strlcpy (cut, reason ? reason : "", sizeof cut);
  if (!g_utf8_validate (cut, -1, &end))
    cut[end - cut] = '\0';
  soup_websocket_connection_close (c->ws, code, cut);
}

static void
conn_free (Conn * c)
{
  if (c->trip) {
    g_source_destroy (c->trip);
    g_source_unref (c->trip);
  }
  if (c->ws) {
    g_clear_signal_handler (&c->message_id, c->ws);
    g_clear_signal_handler (&c->closed_id, c->ws);
    g_object_unref (c->ws);
  }
  g_clear_object (&c->guard);
  g_free (c);
}

/* a message above the hard limit, fragments included: close with 1009 */
static gboolean
conn_too_big (gpointer user_data)
{
  Conn *c = user_data;

  g_atomic_int_inc (&c->server->n_too_big);
  g_message ("connection %u: a message of at least %" G_GUINT64_FORMAT
      " bytes (all fragments) is above the limit of %u: closing with 1009",
      c->id, c->trip_size, LINGBOT_WEBRTC_WS_HARD_LIMIT);
  conn_close (c, SOUP_WEBSOCKET_CLOSE_TOO_BIG, "message too big");
  lingbot_ws_guard_finish (c->guard);
  g_clear_pointer (&c->trip, g_source_unref);
  return G_SOURCE_REMOVE;
}

static void
conn_tripped (gpointer user_data, guint64 size)
{
  Conn *c = user_data;

  c->trip_size = size;
  if (c->trip)
    return;
  /* called from within libsoup's read: close from an idle */
  c->trip = g_idle_source_new ();
  g_source_set_callback (c->trip, conn_too_big, c, NULL);
  g_source_attach (c->trip, c->server->context);
}

/* ------------------------------------------------------------------ */
/* peers: sending                                                     */
/* ------------------------------------------------------------------ */

static gboolean
channel_open (GstWebRTCDataChannel * ch)
{
  GstWebRTCDataChannelState state = GST_WEBRTC_DATA_CHANNEL_STATE_CLOSED;

  if (ch == NULL)
    return FALSE;
  g_object_get (ch, "ready-state", &state, NULL);
  return state == GST_WEBRTC_DATA_CHANNEL_STATE_OPEN;
}

static void
control_send (Peer * p, const char *text)
{
  if (!p->released && channel_open (p->control))
    gst_webrtc_data_channel_send_string (p->control, text);
}

static void
session_broadcast (Session * s, const char *text)
{
  for (GList * l = s->peers; l; l = l->next)
    control_send (l->data, text);
}

/* a dropped message: one log line, a count, an error reply */
static void
peer_reject (Peer * p, const char *where, const char *why, gsize size,
    gboolean has_id, gint64 id)
{
  LingbotWebrtcServer *server = p->session->server;
  g_autofree char *text = error_json ("bad-message", why, FALSE, where,
      has_id, id);

  g_atomic_int_inc (&server->n_dropped);
  g_message ("session %u: peer %u: %s message dropped (%" G_GSIZE_FORMAT
      " bytes): %s", p->session->id, p->id, where, size, why);
  if (strcmp (where, "signalling") == 0)
    conn_send (p->conn, text);
  else
    control_send (p, text);
}

static char *
status_json (Session * s, Peer * p)
{
  g_autoptr (JsonBuilder) b = message_new ("status");

  put_int (b, "session", s->id);
  put_int (b, "peer", p->id);
  put_boolean (b, "active", s->active == p);
  put_int (b, "next-chunk", s->last_chunk + 1);
  put_string (b, "state", s->state);
  put_int (b, "chunk", s->state_chunk);
  return message_finish (b);
}

/* ------------------------------------------------------------------ */
/* key frames                                                         */
/* ------------------------------------------------------------------ */

/* upstream from the peer's tee pad: tee, payloader, encoder */
static void
peer_force_key_unit (Peer * p, const char *why)
{
  GstEvent *ev = gst_video_event_new_upstream_force_key_unit
      (GST_CLOCK_TIME_NONE, TRUE, (guint)++ p->key_unit_count);

  g_debug ("peer %u: force key unit (%s)", p->id, why);
  if (p->tee_pad)
    gst_pad_send_event (p->tee_pad, ev);
  else
    gst_event_unref (ev);
}

/* ------------------------------------------------------------------ */
/* peers: release                                                     */
/* ------------------------------------------------------------------ */

static void
send_navigation (Session * s, GstEvent * event)
{
  /* upstream from the payloader, as webrtcsink does from webrtcbin; the
   * control source is reached through encoder, converter, decoder and
   * generator */
  if (s->pay_src && gst_pad_send_event (s->pay_src, gst_event_ref (event))) {
    gst_event_unref (event);
    return;
  }
  if (s->control_src)
    gst_element_send_event (s->control_src, event);
  else
    gst_event_unref (event);
}

static void
peer_release_keys (Peer * p)
{
  Session *s = p->session;

  for (guint i = 0; i < p->held->len; i++) {
    const char *key = g_ptr_array_index (p->held, i);

    g_debug ("session %u: peer %u gone: releasing %s", s->id, p->id, key);
    if (!s->closed)
      send_navigation (s, gst_navigation_event_new_key_release (key, 0));
  }
  g_ptr_array_set_size (p->held, 0);
}

/* the branch is stopped: its signal handlers hold references to the peer,
 * and the peer holds the branch */
static void
peer_cleanup (Peer * p)
{
  if (p->webrtc)
    g_signal_handlers_disconnect_by_data (p->webrtc, p);
  if (p->input)
    g_signal_handlers_disconnect_by_data (p->input, p);
  if (p->control)
    g_signal_handlers_disconnect_by_data (p->control, p);
  g_clear_object (&p->input);
  g_clear_object (&p->control);
  g_clear_object (&p->tee_pad);
  g_clear_object (&p->bin_sink);
  g_clear_object (&p->webrtc);
  g_clear_object (&p->bin);
}

/* after the tee pad went idle and was unlinked: drop the branch */
static void
peer_drop_branch (gpointer obj, gpointer data)
{
  Peer *p = obj;
  Session *s = p->session;

  if (!s->closed && s->tee && p->tee_pad)
    gst_element_release_request_pad (s->tee, p->tee_pad);
  if (p->bin) {
    gst_element_set_state (p->bin, GST_STATE_NULL);
    if (!s->closed && s->pipeline
        && GST_OBJECT_PARENT (p->bin) == GST_OBJECT (s->pipeline))
      gst_bin_remove (GST_BIN (s->pipeline), p->bin);
  }
  if (p->bin)
    g_ptr_array_remove (s->leaving, p->bin);
  g_debug ("session %u: peer %u branch removed", s->id, p->id);
  if (!s->closed)
    peer_cleanup (p);
}

static GstPadProbeReturn
peer_unlink_probe (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  Peer *p = user_data;

  gst_pad_unlink (p->tee_pad, p->bin_sink);
  invoke_full (p, TRUE, TRUE, peer_drop_branch, NULL, NULL);
  return GST_PAD_PROBE_REMOVE;
}

static void
peer_release (Peer * p, const char *reason, gushort close_code,
    const char *error_code, const char *message)
{
  Session *s = p->session;
  LingbotWebrtcServer *server = s->server;
  Conn *c = p->conn;

  if (p->released)
    return;
  p->released = TRUE;
  g_message ("session %u: peer %u released (%s)", s->id, p->id, reason);
  peer_release_keys (p);
  if (s->active == p)
    s->active = NULL;
  s->peers = g_list_remove (s->peers, p);
  if (p->tick) {
    g_source_destroy (p->tick);
    g_clear_pointer (&p->tick, g_source_unref);
  }
  if (c) {
    c->peer = NULL;
    p->conn = NULL;
    if (error_code) {
      g_autofree char *text = error_json (error_code, message, TRUE, NULL,
          FALSE, 0);
      conn_send (c, text);
    }
    conn_close (c, close_code, reason);
  }
  if (!s->closed && p->bin)
    g_ptr_array_add (s->leaving, gst_object_ref (p->bin));
  if (!s->closed && p->tee_pad && gst_pad_is_linked (p->tee_pad)) {
    /* unlinked once no buffer is on its way through the pad */
    gst_pad_add_probe (p->tee_pad, GST_PAD_PROBE_TYPE_IDLE,
        peer_unlink_probe, g_atomic_rc_box_acquire (p),
        (GDestroyNotify) peer_unref);
  } else if (!s->closed && p->bin) {
    invoke_full (p, TRUE, TRUE, peer_drop_branch, NULL, NULL);
  }
  if (server)
    g_atomic_int_add (&server->n_peers, -1);
  if (!s->closed && s->peers == NULL)
    session_detached (s);
  peer_unref (p);               /* the session's list */
}

/* ------------------------------------------------------------------ */
/* peers: webrtcbin signalling                                        */
/* ------------------------------------------------------------------ */

static void
send_offer (Peer * p, char *sdp)
{
  g_autoptr (JsonBuilder) b = message_new ("offer");

  put_string (b, "sdp", sdp);
  conn_send_message (p->conn, b);
}

static void
peer_no_offer (Peer * p, gpointer data)
{
  peer_release (p, "webrtcbin created no offer", 1011, "webrtc",
      "the server could not create an offer");
}

static void
on_offer_created (GstPromise * promise, gpointer user_data)
{
  Peer *p = user_data;
  GstWebRTCSessionDescription *offer = NULL;
  const GstStructure *reply;

  if (gst_promise_wait (promise) != GST_PROMISE_RESULT_REPLIED) {
    gst_promise_unref (promise);
    return;
  }
  reply = gst_promise_get_reply (promise);
  if (reply && gst_structure_has_field (reply, "offer"))
    gst_structure_get (reply, "offer",
        GST_TYPE_WEBRTC_SESSION_DESCRIPTION, &offer, NULL);
  if (offer) {
    /* a promise of our own: webrtcbin (1.22) replies with an error when it
     * is already closed (a peer gone while the offer was made), and that
     * reply leaks without a promise to hold it */
    GstPromise *set = gst_promise_new ();
    g_signal_emit_by_name (p->webrtc, "set-local-description", offer, set);
    gst_promise_unref (set);
    peer_invoke (p, send_offer, gst_sdp_message_as_text (offer->sdp), g_free);
    gst_webrtc_session_description_free (offer);
  } else {
    peer_invoke (p, peer_no_offer, NULL, NULL);
  }
  gst_promise_unref (promise);
}

static void
create_offer (Peer * p, gpointer data)
{
  GstPromise *promise;

  if (p->offered)
    return;                     /* no renegotiation */
  p->offered = TRUE;
  promise = gst_promise_new_with_change_func (on_offer_created,
      g_atomic_rc_box_acquire (p), (GDestroyNotify) peer_unref);
  g_signal_emit_by_name (p->webrtc, "create-offer", NULL, promise);
}

static void
on_negotiation_needed (GstElement * webrtc, gpointer user_data)
{
  peer_invoke (user_data, create_offer, NULL, NULL);
}

typedef struct
{
  guint mline;
  char *candidate;
} Candidate;

static void
candidate_free (Candidate * c)
{
  g_free (c->candidate);
  g_free (c);
}

static void
send_candidate (Peer * p, Candidate * c)
{
  g_autoptr (JsonBuilder) b = message_new ("ice");

  put_string (b, "candidate", c->candidate);
  put_int (b, "sdpMLineIndex", c->mline);
  conn_send_message (p->conn, b);
}

static void
on_ice_candidate (GstElement * webrtc, guint mline, const char *candidate,
    gpointer user_data)
{
  Candidate *c = g_new0 (Candidate, 1);

  c->mline = mline;
  c->candidate = g_strdup (candidate);
  peer_invoke (user_data, send_candidate, c, (GDestroyNotify) candidate_free);
}

static GstPadProbeReturn
rx_probe (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  Peer *p = user_data;

  g_atomic_int_inc (&p->rx_packets);
  return GST_PAD_PROBE_OK;
}

/* count what arrives from the browser: every nicesrc's output (RTCP, SCTP
 * over DTLS; STUN stays inside libnice) */
static void
peer_probe_rx (Peer * p)
{
  GstIterator *it;
  GValue v = G_VALUE_INIT;

  if (p->rx_probed)
    return;
  p->rx_probed = TRUE;
  it = gst_bin_iterate_recurse (GST_BIN (p->webrtc));
  while (gst_iterator_next (it, &v) == GST_ITERATOR_OK) {
    GstElement *e = g_value_get_object (&v);
    GstElementFactory *f = gst_element_get_factory (e);

    if (f && strcmp (GST_OBJECT_NAME (f), "nicesrc") == 0) {
      GstPad *src = gst_element_get_static_pad (e, "src");

      if (src) {
        gst_pad_add_probe (src, GST_PAD_PROBE_TYPE_BUFFER |
            GST_PAD_PROBE_TYPE_BUFFER_LIST, rx_probe,
            g_atomic_rc_box_acquire (p), (GDestroyNotify) peer_unref);
        gst_object_unref (src);
      }
    }
    g_value_reset (&v);
  }
  g_value_unset (&v);
  gst_iterator_free (it);
}

/* Before the first key the picture is lingbotvaedec's preview still,
 * which went by before this peer's transport was up: a force-key-unit
 * sent upstream from the world's src pad has lingbotvaedec push it again
 * (nothing when the first chunk's frames came already, or with --source). */
static void
session_repeat_preview (Session * s)
{
  GstElement *world = s->pipeline ?
      gst_bin_get_by_name (GST_BIN (s->pipeline), "world") : NULL;
  GstPad *src = world ? gst_element_get_static_pad (world, "src") : NULL;

  if (src)
    gst_pad_send_event (src, gst_video_event_new_upstream_force_key_unit
        (GST_CLOCK_TIME_NONE, TRUE, 0));
  gst_clear_object (&src);
  gst_clear_object (&world);
}

static void
peer_connected (Peer * p)
{
  Session *s = p->session;
  LingbotWebrtcServer *server = s->server;

  if (p->connected)
    return;
  p->connected = TRUE;
  p->last_rx_us = g_get_monotonic_time ();
  peer_probe_rx (p);
  g_message ("session %u: peer %u connected", s->id, p->id);
  /* the key frame sent when the branch was linked may have gone out
   * before DTLS was up */
  peer_force_key_unit (p, "connected");
  session_repeat_preview (s);
  if (s->active != p) {
    Peer *old = s->active;

    s->active = p;
    if (old) {
      g_atomic_int_inc (&server->n_replaced);
      peer_release (old, "replaced by a newer connection",
          LINGBOT_WEBRTC_CLOSE_REPLACED, "replaced",
          "another connection to this session (a reload or another tab) "
          "took it over");
    }
  }
}

static void
connection_state_changed (Peer * p, gpointer data)
{
  GstWebRTCPeerConnectionState state = GPOINTER_TO_INT (data);

  switch (state) {
    case GST_WEBRTC_PEER_CONNECTION_STATE_CONNECTED:
      peer_connected (p);
      break;
    case GST_WEBRTC_PEER_CONNECTION_STATE_FAILED:
      peer_release (p, "ICE/DTLS connection failed",
          LINGBOT_WEBRTC_CLOSE_TIMEOUT, "ice", "the WebRTC connection failed");
      break;
    case GST_WEBRTC_PEER_CONNECTION_STATE_CLOSED:
      peer_release (p, "WebRTC connection closed",
          LINGBOT_WEBRTC_CLOSE_TIMEOUT, "ice", "the WebRTC connection closed");
      break;
    default:
      break;
  }
}

static void
on_connection_state (GObject * webrtc, GParamSpec * pspec, gpointer user_data)
{
  GstWebRTCPeerConnectionState state;

  g_object_get (webrtc, "connection-state", &state, NULL);
  peer_invoke (user_data, connection_state_changed,
      GINT_TO_POINTER (state), NULL);
}

static void
ice_state_changed (Peer * p, gpointer data)
{
  if (GPOINTER_TO_INT (data) == GST_WEBRTC_ICE_CONNECTION_STATE_FAILED)
    peer_release (p, "ICE connection failed", LINGBOT_WEBRTC_CLOSE_TIMEOUT,
        "ice", "the ICE connection failed");
}

static void
on_ice_state (GObject * webrtc, GParamSpec * pspec, gpointer user_data)
{
  GstWebRTCICEConnectionState state;

  g_object_get (webrtc, "ice-connection-state", &state, NULL);
  peer_invoke (user_data, ice_state_changed, GINT_TO_POINTER (state), NULL);
}

/* the peer's timer: liveness and keepalive */
static gboolean
peer_tick (gpointer user_data)
{
  Peer *p = user_data;
  Session *s = p->session;
  LingbotWebrtcServer *server = s->server;
  guint timeout = server->peer_timeout;
  guint keepalive = CLAMP (timeout / 5, 1, 5);
  gint64 now = g_get_monotonic_time ();
  gint rx = g_atomic_int_get (&p->rx_packets);
  g_autofree char *why = NULL;

  if (rx != p->rx_seen) {
    p->rx_seen = rx;
    p->last_rx_us = now;
  }
  if (!p->connected && now - p->created_us > timeout * G_USEC_PER_SEC)
    why = g_strdup_printf ("the browser did not connect within %u s", timeout);
  else if (p->connected && now - p->last_rx_us > timeout * G_USEC_PER_SEC)
    why = g_strdup_printf ("nothing arrived from the browser for %u s",
        timeout);
  if (why) {
    g_atomic_int_inc (&server->n_timeouts);
    peer_release (p, why, LINGBOT_WEBRTC_CLOSE_TIMEOUT, "timeout", why);
    return G_SOURCE_REMOVE;
  }
  /* a live browser acknowledges this (SCTP), so something always comes
   * back while it is there */
  if (++p->ticks % keepalive == 0 && channel_open (p->control)) {
    g_autofree char *text = status_json (s, p);

    control_send (p, text);
  }
  return G_SOURCE_CONTINUE;
}

/* ------------------------------------------------------------------ */
/* peers: input from the browser                                      */
/* ------------------------------------------------------------------ */

static void
peer_track_key (Peer * p, const char *key, gboolean press)
{
  for (guint i = 0; i < p->held->len; i++)
    if (g_ascii_strcasecmp (g_ptr_array_index (p->held, i), key) == 0) {
      if (!press)
        g_ptr_array_remove_index_fast (p->held, i);
      return;
    }
  if (press && p->held->len < MAX_HELD_KEYS && lingbot_key_from_name (key))
    g_ptr_array_add (p->held, g_strdup (key));
}

/* a key press or release of the viewer: stamped (a press with an id is
 * echoed with the chunk that used it), tracked (released when the peer
 * goes), sent upstream */
static void
peer_key (Peer * p, const LingbotWebrtcInput * in)
{
  Session *s = p->session;

  if (in->press && in->has_id && in->key_bit != 0) {
    KeyStamp *k = g_new0 (KeyStamp, 1);

    k->id = in->id;
    k->key = in->key_bit;
    k->name = g_strdup (in->key);
    k->min_chunk = (guint64) (s->last_chunk + 1);
    k->t_us = g_get_monotonic_time ();
    g_queue_push_tail (&s->pending_keys, k);
    while (s->pending_keys.length > MAX_PENDING_KEYS)
      key_stamp_free (g_queue_pop_head (&s->pending_keys));
  }
  peer_track_key (p, in->key, in->press);
  g_debug ("session %u: %s %s", s->id, in->event, in->key);
  send_navigation (s, in->press ?
      gst_navigation_event_new_key_press (in->key, 0) :
      gst_navigation_event_new_key_release (in->key, 0));
}

typedef struct
{
  gboolean control;             /* arrived on "control" */
  gboolean binary;
  gsize size;
  char *text;
} ChannelMessage;

static void
channel_message_free (ChannelMessage * m)
{
  g_free (m->text);
  g_free (m);
}

/* the checks are lingbot_webrtc_check_input()'s (webrtc-messages.c) */
static void
handle_channel_message (Peer * p, ChannelMessage * m)
{
  LingbotWebrtcInput in = { 0 };

  in.control = m->control;
  in.viewer = p->session->active == p;
  lingbot_webrtc_check_input (&in, m->binary, m->text, m->size);
  switch (in.verdict) {
    case LINGBOT_WEBRTC_INPUT_DROP:
      peer_reject (p, m->control ? LABEL_CONTROL : LABEL_INPUT, in.why,
          m->size, in.has_id, in.id);
      break;
    case LINGBOT_WEBRTC_INPUT_IGNORE:
      g_debug ("session %u: %s ignored (no control)", p->session->id, in.event);
      break;
    case LINGBOT_WEBRTC_INPUT_KEY:
      peer_key (p, &in);
      break;
  }
  lingbot_webrtc_input_clear (&in);
}

static void
post_channel_message (Peer * p, GstWebRTCDataChannel * channel,
    const char *text, gsize size, gboolean binary)
{
  ChannelMessage *m = g_new0 (ChannelMessage, 1);
  gsize limit = p->session->max_message;

  m->control = channel == p->control;
  m->binary = binary;
  m->size = size;
  /* no copy of what is dropped anyway */
  if (!binary && size <= limit)
    m->text = g_strndup (text ? text : "", size);
  peer_invoke (p, handle_channel_message, m,
      (GDestroyNotify) channel_message_free);
}

static void
on_channel_message (GstWebRTCDataChannel * channel, const char *text,
    gpointer user_data)
{
  post_channel_message (user_data, channel, text, text ? strlen (text) : 0,
      FALSE);
}

static void
on_channel_data (GstWebRTCDataChannel * channel, GBytes * data,
    gpointer user_data)
{
  post_channel_message (user_data, channel, NULL,
      data ? g_bytes_get_size (data) : 0, TRUE);
}

static void
control_opened (Peer * p, gpointer data)
{
  g_autofree char *text = status_json (p->session, p);

  control_send (p, text);
}

static void
on_channel_state (GObject * channel, GParamSpec * pspec, gpointer user_data)
{
  if (channel_open (GST_WEBRTC_DATA_CHANNEL (channel)))
    peer_invoke (user_data, control_opened, NULL, NULL);
}

static GstWebRTCDataChannel *
create_channel (Peer * p, const char *label)
{
  GstWebRTCDataChannel *channel = NULL;
  GstStructure *opts = gst_structure_new ("config",
      "ordered", G_TYPE_BOOLEAN, TRUE,
      "priority", GST_TYPE_WEBRTC_PRIORITY_TYPE,
      GST_WEBRTC_PRIORITY_TYPE_HIGH, NULL);

  g_signal_emit_by_name (p->webrtc, "create-data-channel", label, opts,
      &channel);
  gst_structure_free (opts);
  if (channel == NULL)
    return NULL;
  peer_connect (channel, "on-message-string", G_CALLBACK (on_channel_message),
      p);
  peer_connect (channel, "on-message-data", G_CALLBACK (on_channel_data), p);
  if (strcmp (label, LABEL_CONTROL) == 0)
    peer_connect (channel, "notify::ready-state", G_CALLBACK (on_channel_state),
        p);
  return channel;
}

/* ------------------------------------------------------------------ */
/* peers: the branch                                                  */
/* ------------------------------------------------------------------ */

static gboolean
forward_sticky (GstPad * pad, GstEvent ** event, gpointer user_data)
{
  gst_pad_send_event (user_data, gst_event_ref (*event));
  return TRUE;
}

static GstPadProbeReturn
block_probe (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  return GST_PAD_PROBE_OK;
}

static gboolean
peer_build (Peer * p, GError ** error)
{
  Session *s = p->session;
  LingbotWebrtcServer *server = s->server;
  g_autofree char *name = g_strdup_printf ("peer%u", p->id);
  g_autofree char *desc = g_strdup_printf ("queue name=q leaky=downstream "
      "max-size-buffers=2000 max-size-bytes=0 max-size-time=0 ! webrtcbin "
      "name=webrtc bundle-policy=max-bundle latency=%d", WEBRTC_LATENCY_MS);
  g_autoptr (GstCaps) prefs = gst_caps_from_string (s->enc->preferences);
  GstWebRTCRTPTransceiver *trans = NULL;
  GstWebRTCICE *ice = NULL;
  GstElement *q;
  GstPad *qsrc, *wsink;
  gulong block;

  p->bin = gst_parse_bin_from_description_full (desc, TRUE, NULL,
      GST_PARSE_FLAG_FATAL_ERRORS, error);
  if (p->bin == NULL)
    return FALSE;
  gst_object_ref_sink (p->bin);
  gst_object_set_name (GST_OBJECT (p->bin), name);
  p->webrtc = gst_bin_get_by_name (GST_BIN (p->bin), "webrtc");
  p->bin_sink = gst_element_get_static_pad (p->bin, "sink");

  /* the offer's codec and fmtp come from the transceiver's preferences,
   * intersected with the payloader's caps */
  q = gst_bin_get_by_name (GST_BIN (p->bin), "q");
  qsrc = gst_element_get_static_pad (q, "src");
  wsink = gst_pad_get_peer (qsrc);
  if (wsink && g_object_class_find_property (G_OBJECT_GET_CLASS (wsink),
          "transceiver"))
    g_object_get (wsink, "transceiver", &trans, NULL);
  if (trans) {
    g_object_set (trans, "codec-preferences", prefs, "direction",
        GST_WEBRTC_RTP_TRANSCEIVER_DIRECTION_SENDONLY, NULL);
    gst_object_unref (trans);
  }
  g_clear_object (&wsink);
  gst_object_unref (qsrc);
  gst_object_unref (q);

  g_object_get (p->webrtc, "ice-agent", &ice, NULL);
  if (ice) {
    GObject *agent = NULL;

    /* libnice checks a connected pair with requests, not indications, and
     * fails it when they go unanswered */
    if (g_object_class_find_property (G_OBJECT_GET_CLASS (ice), "agent"))
      g_object_get (ice, "agent", &agent, NULL);
    if (agent && g_object_class_find_property (G_OBJECT_GET_CLASS (agent),
            "keepalive-conncheck"))
      g_object_set (agent, "keepalive-conncheck", TRUE, NULL);
    g_clear_object (&agent);
    if (server->ice_loopback
        && g_signal_lookup ("add-local-ip-address", G_OBJECT_TYPE (ice))) {
      gboolean ok = FALSE;

      g_signal_emit_by_name (ice, "add-local-ip-address", "127.0.0.1", &ok);
      if (!ok)
        g_message ("session %u: could not restrict ICE to 127.0.0.1", s->id);
    }
    g_clear_object (&ice);
  }

  peer_connect (p->webrtc, "on-negotiation-needed",
      G_CALLBACK (on_negotiation_needed), p);
  peer_connect (p->webrtc, "on-ice-candidate", G_CALLBACK (on_ice_candidate),
      p);
  peer_connect (p->webrtc, "notify::connection-state",
      G_CALLBACK (on_connection_state), p);
  peer_connect (p->webrtc, "notify::ice-connection-state",
      G_CALLBACK (on_ice_state), p);

  /* data channels are created in READY, before the offer (as webrtcsink) */
  gst_bin_add (GST_BIN (s->pipeline), p->bin);
  if (gst_element_set_state (p->bin, GST_STATE_READY) ==
      GST_STATE_CHANGE_FAILURE) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
        "webrtcbin cannot start");
    return FALSE;
  }
  p->input = create_channel (p, LABEL_INPUT);
  p->control = create_channel (p, LABEL_CONTROL);
  if (!p->input || !p->control) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
        "webrtcbin created no data channel");
    return FALSE;
  }

  /* linked while the tee pad is blocked, so that the stream's sticky
   * events (its caps: the offer waits for them) reach webrtcbin now, even
   * when no frame flows because no key is held, and before any buffer */
  p->tee_pad = gst_element_request_pad_simple (s->tee, "src_%u");
  block = gst_pad_add_probe (p->tee_pad, GST_PAD_PROBE_TYPE_BLOCK_DOWNSTREAM,
      block_probe, NULL, NULL);
  if (gst_pad_link (p->tee_pad, p->bin_sink) != GST_PAD_LINK_OK) {
    gst_pad_remove_probe (p->tee_pad, block);
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
        "cannot link the peer's branch");
    return FALSE;
  }
  gst_element_sync_state_with_parent (p->bin);
  gst_pad_sticky_events_foreach (p->tee_pad, forward_sticky, p->bin_sink);
  gst_pad_remove_probe (p->tee_pad, block);
  peer_force_key_unit (p, "joined");
  return TRUE;
}

static Peer *
peer_new (Session * s, Conn * c)
{
  LingbotWebrtcServer *server = s->server;
  Peer *p = g_atomic_rc_box_new0 (Peer);        /* the session's list */

  p->session = g_atomic_rc_box_acquire (s);
  p->context = g_main_context_ref (s->context);
  p->id = ++server->next_peer;
  p->held = g_ptr_array_new_with_free_func (g_free);
  p->created_us = g_get_monotonic_time ();
  p->conn = c;
  c->peer = p;
  s->peers = g_list_append (s->peers, p);
  if (s->active == NULL && s->peers->next == NULL)
    s->active = p;
  g_atomic_int_inc (&server->n_peers);
  if (s->resume) {
    g_source_destroy (s->resume);
    g_clear_pointer (&s->resume, g_source_unref);
  }
  p->tick = g_timeout_source_new_seconds (1);
  g_source_set_callback (p->tick, peer_tick, p, NULL);
  g_source_attach (p->tick, s->context);
  return p;
}

/* ------------------------------------------------------------------ */
/* key echo: which chunk first used a key press                       */
/* ------------------------------------------------------------------ */

static void
send_echo (Session * s, Echo * e)
{
  g_autoptr (JsonBuilder) b = message_new ("key-echo");
  g_autofree char *text = NULL;

  put_int (b, "id", e->id);
  put_string (b, "key", e->name);
  put_int (b, "chunk", (gint64) e->chunk);
  put_int (b, "first-frame", (gint64) e->first_frame);
  put_int (b, "rtp-timestamp", e->rtp_ts);
  put_double (b, "server-ms", e->server_ms);
  text = message_finish (b);
  g_debug ("session %u: %s", s->id, text);
  if (s->active)
    control_send (s->active, text);
}

/* the payloader's output: count frames (one RTP timestamp each) and
 * release the echoes whose chunk's first frame is now on its way */
static void
count_rtp_buffer (Session * s, GstBuffer * buf, GQueue * ready)
{
  GstRTPBuffer rtp = GST_RTP_BUFFER_INIT;
  guint32 ts;

  if (!gst_rtp_buffer_map (buf, GST_MAP_READ, &rtp))
    return;
  ts = gst_rtp_buffer_get_timestamp (&rtp);
  gst_rtp_buffer_unmap (&rtp);

  if (s->have_rtp_ts && ts == s->last_rtp_ts)
    return;
  if (s->have_rtp_ts)
    s->frames_sent++;
  s->have_rtp_ts = TRUE;
  s->last_rtp_ts = ts;

  /* frames_sent is the number of the frame that starts now */
  for (GList * l = s->pending_echo.head; l;) {
    GList *next = l->next;
    Echo *e = l->data;

    if (e->first_frame <= s->frames_sent) {
      e->rtp_ts = ts;
      e->server_ms = (g_get_monotonic_time () - e->t_us) / 1000.0;
      g_queue_delete_link (&s->pending_echo, l);
      g_queue_push_tail (ready, e);
    }
    l = next;
  }
}

static gboolean
count_list_item (GstBuffer ** buf, guint idx, gpointer user_data)
{
  gpointer *args = user_data;

  count_rtp_buffer (args[0], *buf, args[1]);
  return TRUE;
}

static void
session_eos (Session * s, gpointer data)
{
  session_fail (s, "eos", "the session's video ended");
}

static GstPadProbeReturn
pay_probe (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  Session *s = user_data;
  GQueue ready = G_QUEUE_INIT;
  gboolean closed;
  Echo *e;

  if (info->type & GST_PAD_PROBE_TYPE_EVENT_UPSTREAM) {
    GstEvent *ev = GST_PAD_PROBE_INFO_EVENT (info);

    if (gst_video_event_is_force_key_unit (ev)) {
      g_mutex_lock (&s->lock);
      if (!s->closed && s->server)
        g_atomic_int_inc (&s->server->n_key_units);
      g_mutex_unlock (&s->lock);
    }
    return GST_PAD_PROBE_OK;
  }
  if (info->type & GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM) {
    if (GST_EVENT_TYPE (GST_PAD_PROBE_INFO_EVENT (info)) == GST_EVENT_EOS)
      session_invoke (s, session_eos, NULL, NULL);
    return GST_PAD_PROBE_OK;
  }

  g_mutex_lock (&s->lock);
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    count_rtp_buffer (s, GST_PAD_PROBE_INFO_BUFFER (info), &ready);
  } else if (info->type & GST_PAD_PROBE_TYPE_BUFFER_LIST) {
    gpointer args[2] = { s, &ready };
    gst_buffer_list_foreach (GST_PAD_PROBE_INFO_BUFFER_LIST (info),
        count_list_item, args);
  }
  closed = s->closed;
  g_mutex_unlock (&s->lock);

  while ((e = g_queue_pop_head (&ready))) {
    if (!closed)
      session_invoke (s, send_echo, e, (GDestroyNotify) echo_free);
    else
      echo_free (e);
  }
  return GST_PAD_PROBE_OK;
}

/* ------------------------------------------------------------------ */
/* bus: progress, chunk metrics, errors                               */
/* ------------------------------------------------------------------ */

static void
send_simple (Session * s, const char *type, gint64 chunk, const char *k1,
    gint64 v1, const char *k2, gint64 v2, const char *keys)
{
  g_autoptr (JsonBuilder) b = message_new (type);
  g_autofree char *text = NULL;

  put_int (b, "chunk", chunk);
  if (k1)
    put_int (b, k1, v1);
  if (k2)
    put_int (b, k2, v2);
  if (keys)
    put_string (b, "keys", keys);
  text = message_finish (b);
  session_broadcast (s, text);
}

typedef struct
{
  guint64 chunk;
  int pass, n_passes;
} Pass;

static void
handle_pass (Session * s, Pass * ps)
{
  s->state = "generating";
  s->state_chunk = (gint64) ps->chunk;
  s->waiting_chunk = -1;
  send_simple (s, "progress", (gint64) ps->chunk, "pass", ps->pass,
      "passes", ps->n_passes, NULL);
}

/* lingbotgen's pass signal, from its streaming thread */
static void
on_pass (GstElement * gen, guint64 chunk, gint pass, gint n_passes,
    gpointer user_data)
{
  Pass *ps = g_new0 (Pass, 1);

  ps->chunk = chunk;
  ps->pass = pass;
  ps->n_passes = n_passes;
  session_invoke (user_data, handle_pass, ps, g_free);
}

static void
handle_waiting (Session * s, const GstStructure * st)
{
  guint64 index = 0;

  gst_structure_get_uint64 (st, "index", &index);
  s->waiting_chunk = (gint64) index;
  if (s->last_decoded + 1 < (gint64) index)
    return;                     /* said once the decode caught up */
  s->state = "waiting";
  s->state_chunk = (gint64) index;
  send_simple (s, "waiting", (gint64) index, NULL, 0, NULL, 0, NULL);
}

static void
handle_chunk (Session * s, const GstStructure * st)
{
  guint64 index = 0;
  gint frames = 0;
  guint keys = 0;
  double dit = 0, compute = 0;
  const char *keys_string = gst_structure_get_string (st, "keys-string");
  guint64 first_frame;
  ChunkInfo *ci;

  gst_structure_get_uint64 (st, "index", &index);
  gst_structure_get_int (st, "frames", &frames);
  gst_structure_get_uint (st, "keys", &keys);
  gst_structure_get_double (st, "dit-seconds", &dit);
  gst_structure_get_double (st, "compute-seconds", &compute);

  first_frame = s->frames_total;
  s->frames_total += (guint64) MAX (frames, 0);
  s->last_chunk = (gint64) index;
  s->waiting_chunk = -1;
  s->state = "decoding";
  s->state_chunk = (gint64) index;

  ci = &s->ring[index % CHUNK_RING];
  ci->index = (gint64) index;
  ci->frames = frames;
  ci->first_frame = first_frame;
  g_strlcpy (ci->keys, keys_string ? keys_string : "", sizeof ci->keys);
  ci->dit = dit;
  ci->generate = compute;
  send_simple (s, "decoding", (gint64) index, "frames", frames,
      "first-frame", (gint64) first_frame, ci->keys);

  /* the first chunk after a press whose keys hold the key used it */
  g_mutex_lock (&s->lock);
  for (GList * l = s->pending_keys.head; l;) {
    GList *next = l->next;
    KeyStamp *k = l->data;

    if (index >= k->min_chunk && (keys & k->key)) {
      Echo *e = g_new0 (Echo, 1);

      e->id = k->id;
      e->name = g_strdup (k->name);
      e->chunk = index;
      e->first_frame = first_frame;
      e->t_us = k->t_us;
      g_queue_push_tail (&s->pending_echo, e);
      key_stamp_free (k);
      g_queue_delete_link (&s->pending_keys, l);
    }
    l = next;
  }
  g_mutex_unlock (&s->lock);
}

/* lingbotvaedec decoded a chunk: its metrics, generate + decode */
static void
handle_decode (Session * s, const GstStructure * st)
{
  g_autoptr (JsonBuilder) b = NULL;
  g_autofree char *text = NULL;
  guint64 index = 0;
  gint frames = 0;
  double vae = 0, dit = 0, generate = 0, compute;
  const char *keys = "";
  guint64 first_frame = 0;
  ChunkInfo *ci;

  gst_structure_get_uint64 (st, "index", &index);
  gst_structure_get_int (st, "frames", &frames);
  gst_structure_get_double (st, "vae-seconds", &vae);
  ci = &s->ring[index % CHUNK_RING];
  if (ci->index == (gint64) index) {
    dit = ci->dit;
    generate = ci->generate;
    keys = ci->keys;
    first_frame = ci->first_frame;
  } else {
    /* no lingbot-chunk seen: the decoder's own DiT + VAE figure */
    gst_structure_get_double (st, "compute-seconds", &generate);
    generate = MAX (generate - vae, 0.0);
  }
  compute = generate + vae;
  s->state = "ready";
  s->state_chunk = (gint64) index;

  b = message_new ("chunk");
  put_int (b, "index", (gint64) index);
  put_int (b, "frames", frames);
  put_int (b, "first-frame", (gint64) first_frame);
  put_string (b, "keys", keys);
  put_double (b, "dit-seconds", dit);
  put_double (b, "generate-seconds", generate);
  put_double (b, "vae-seconds", vae);
  put_double (b, "compute-seconds", compute);
  put_double (b, "compute-fps", compute > 0 ? frames / compute : 0.0);
  text = message_finish (b);
  session_broadcast (s, text);
  s->last_decoded = (gint64) index;
  /* the generator went idle while this chunk was still being decoded */
  if (s->waiting_chunk >= 0 && (gint64) index + 1 >= s->waiting_chunk) {
    s->state = "waiting";
    s->state_chunk = s->waiting_chunk;
    send_simple (s, "waiting", s->waiting_chunk, NULL, 0, NULL, 0, NULL);
  }
}

static Peer *
peer_of_object (Session * s, GstObject * obj)
{
  for (GList * l = s->peers; l; l = l->next) {
    Peer *p = l->data;

    if (p->bin && (obj == GST_OBJECT (p->bin)
            || gst_object_has_as_ancestor (obj, GST_OBJECT (p->bin))))
      return p;
  }
  return NULL;
}

/* inside the bin of a peer that is leaving, or no longer in the pipeline */
static gboolean
object_left (Session * s, GstObject * obj)
{
  if (obj != GST_OBJECT (s->pipeline)
      && !gst_object_has_as_ancestor (obj, GST_OBJECT (s->pipeline)))
    return TRUE;
  for (guint i = 0; i < s->leaving->len; i++) {
    GstObject *bin = g_ptr_array_index (s->leaving, i);

    if (obj == bin || gst_object_has_as_ancestor (obj, bin))
      return TRUE;
  }
  return FALSE;
}

static gboolean
on_bus_message (GstBus * bus, GstMessage * msg, gpointer user_data)
{
  Session *s = user_data;

  if (s->closed)
    return G_SOURCE_REMOVE;
  switch (GST_MESSAGE_TYPE (msg)) {
    case GST_MESSAGE_ELEMENT:{
      const GstStructure *st = gst_message_get_structure (msg);

      if (st && gst_structure_has_name (st, "lingbot-chunk"))
        handle_chunk (s, st);
      else if (st && gst_structure_has_name (st, "lingbot-decode"))
        handle_decode (s, st);
      else if (st && gst_structure_has_name (st, "lingbot-waiting"))
        handle_waiting (s, st);
      break;
    }
    case GST_MESSAGE_LATENCY:
      gst_bin_recalculate_latency (GST_BIN (s->pipeline));
      break;
    case GST_MESSAGE_ERROR:{
      g_autoptr (GError) err = NULL;
      g_autofree char *dbg = NULL;
      g_autofree char *text = NULL;
      Peer *p = peer_of_object (s, GST_MESSAGE_SRC (msg));

      gst_message_parse_error (msg, &err, &dbg);
      text = g_strdup_printf ("%s: %s", GST_OBJECT_NAME (msg->src),
          err->message);
      if (p == NULL && object_left (s, GST_MESSAGE_SRC (msg))) {
        g_debug ("session %u: error of a peer that left, ignored: %s",
            s->id, text);
        break;
      }
      g_message ("session %u: %s error: %s (%s)", s->id, p ? "peer" :
          "pipeline", text, GST_STR_NULL (dbg));
      /* a peer's error ends that peer, not the world */
      if (p) {
        peer_release (p, text, 1011, "webrtc", text);
        break;
      }
      s->bus_watch = 0;
      session_fail (s, "pipeline", text);
      return G_SOURCE_REMOVE;
    }
    case GST_MESSAGE_EOS:
      s->bus_watch = 0;
      session_fail (s, "eos", "the session's video ended");
      return G_SOURCE_REMOVE;
    default:
      break;
  }
  return G_SOURCE_CONTINUE;
}

/* ------------------------------------------------------------------ */
/* sessions                                                           */
/* ------------------------------------------------------------------ */

/* the end of a session: its peers are told (when @error_code is set) and
 * released, the pipeline stops */
static void
session_end (Session * s, const char *reason, gushort close_code,
    const char *error_code, const char *message)
{
  LingbotWebrtcServer *server = s->server;
  GList *released = NULL;

  if (s->closed)
    return;
  g_message ("session %u: closed (%s)", s->id, reason);
  /* under the lock: streaming threads check it before touching the rest */
  g_mutex_lock (&s->lock);
  s->closed = TRUE;
  g_mutex_unlock (&s->lock);
  while (s->peers) {
    Peer *p = s->peers->data;

    released = g_list_prepend (released, g_atomic_rc_box_acquire (p));
    peer_release (p, reason, close_code, error_code, message);
  }

  if (s->resume) {
    g_source_destroy (s->resume);
    g_clear_pointer (&s->resume, g_source_unref);
  }
  if (s->bus_watch) {
    /* on the server's context, not the default one: no g_source_remove() */
    GstBus *bus = gst_element_get_bus (s->pipeline);

    gst_bus_remove_watch (bus);
    gst_object_unref (bus);
    s->bus_watch = 0;
  }
  if (s->gen)
    g_signal_handlers_disconnect_by_func (s->gen, on_pass, s);
  if (s->pipeline) {
    /* stops the generator and frees the ranks of its world */
    gst_element_set_state (s->pipeline, GST_STATE_NULL);
  }
  for (GList * l = released; l; l = l->next)
    peer_cleanup (l->data);
  g_list_free_full (released, (GDestroyNotify) peer_unref);
  g_clear_object (&s->pay_src);
  g_clear_object (&s->control_src);
  g_clear_object (&s->gen);
  g_clear_object (&s->tee);
  g_clear_object (&s->pipeline);
  g_atomic_int_add (&server->n_sessions, -1);
  /* drops the table's reference */
  g_hash_table_remove (server->sessions, GUINT_TO_POINTER (s->id));
}

static void
session_close (Session * s, const char *reason)
{
  session_end (s, reason, SOUP_WEBSOCKET_CLOSE_NORMAL, NULL, NULL);
}

/* a fatal session error: every peer is told, then the session ends */
static void
session_fail (Session * s, const char *code, const char *message)
{
  gushort close_code = SOUP_WEBSOCKET_CLOSE_SERVER_ERROR;

  if (strcmp (code, "eos") == 0)
    close_code = SOUP_WEBSOCKET_CLOSE_NORMAL;
  else if (strcmp (code, "shutdown") == 0)
    close_code = SOUP_WEBSOCKET_CLOSE_GOING_AWAY;
  session_end (s, code, close_code, code, message);
}

static gboolean
session_resume_expired (gpointer user_data)
{
  Session *s = user_data;
  g_autofree char *why = g_strdup_printf ("no browser for %u s",
      s->server->resume_timeout);

  g_clear_pointer (&s->resume, g_source_unref);
  session_close (s, why);
  return G_SOURCE_REMOVE;
}

/* the last peer is gone: keep the world for a reload to resume it */
static void
session_detached (Session * s)
{
  if (s->resume || s->closed)
    return;
  g_message ("session %u: no browser; kept %u s for a reload to resume it",
      s->id, s->server->resume_timeout);
  s->resume = g_timeout_source_new_seconds (s->server->resume_timeout);
  g_source_set_callback (s->resume, session_resume_expired, s, NULL);
  g_source_attach (s->resume, s->context);
}

static gboolean
set_gen_properties (LingbotWebrtcServer * server, GstElement * gen,
    GError ** error)
{
  GObjectClass *klass = G_OBJECT_GET_CLASS (gen);
  const struct
  {
    const char *name;
    const char *value;
  } props[] = {
    {"model-path", server->model}, {"image-location", server->image},
    {"prompt", server->prompt}, {"prompt-embeds", server->prompt_embeds},
    {"devices", server->devices}, {"is-live", "true"},
    {"signal-passes", "true"},
    /* the start image at once, before the first key (lingbotgen preview) */
    {"preview", "true"},
  };

  for (guint i = 0; i < G_N_ELEMENTS (props); i++)
    if (props[i].value && g_object_class_find_property (klass, props[i].name))
      gst_util_set_object_arg (G_OBJECT (gen), props[i].name, props[i].value);

  for (guint i = 0; server->gen_props && server->gen_props[i]; i++) {
    g_auto (GStrv) kv = g_strsplit (server->gen_props[i], "=", 2);

    if (!kv[0] || !kv[1] || !g_object_class_find_property (klass, kv[0])) {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
          "not a lingbotbin property: %s", server->gen_props[i]);
      return FALSE;
    }
    gst_util_set_object_arg (G_OBJECT (gen), kv[0], kv[1]);
  }
  return TRUE;
}

/* GstVideoEncoder pushes its caps with the first encoded frame, and x264enc
 * asks for none earlier; webrtcbin makes no offer before caps reached it,
 * and no frame comes before a key is held, which needs the offer: push
 * them as soon as the encoder has its input caps (vp8enc does so itself) */
static void
on_encoder_caps (GObject * pad, GParamSpec * pspec, gpointer user_data)
{
  GstCaps *caps = gst_pad_get_current_caps (GST_PAD (pad));

  if (caps) {
    gst_caps_unref (caps);
    if (!gst_video_encoder_negotiate (GST_VIDEO_ENCODER (user_data)))
      GST_WARNING_OBJECT (user_data, "could not negotiate early");
  }
}

static gboolean
session_build (Session * s, GError ** error)
{
  LingbotWebrtcServer *server = s->server;
  g_autofree char *chain = g_strdup_printf (s->enc->chain, KEY_INTERVAL);
  g_autofree char *desc = NULL;
  g_autoptr (GstBus) bus = NULL;
  GstElement *world, *pay, *enc;

  /* paced here, before the tee: webrtcbin (1.22) syncs each branch to the
   * clock, and a branch linked later must not find the stream ahead of it
   * (a generator faster than real time would otherwise run ahead, and a
   * reloaded page would wait for its first frame as long) */
  desc = g_strdup_printf ("%s ! videoconvert ! video/x-raw,format=I420 "
      "! queue max-size-buffers=64 max-size-bytes=0 max-size-time=0 "
      "! clocksync name=pace ! %s ! %s ! tee name=out allow-not-linked=true",
      server->source ? server->source :
      "lingbotcontrolsrc name=control is-live=true ! lingbotbin name=world",
      chain, s->enc->rtp_caps);
  g_debug ("session %u: %s", s->id, desc);
  s->pipeline = gst_parse_launch_full (desc, NULL, GST_PARSE_FLAG_FATAL_ERRORS,
      error);
  if (s->pipeline == NULL)
    return FALSE;
  gst_object_ref_sink (s->pipeline);

  s->tee = gst_bin_get_by_name (GST_BIN (s->pipeline), "out");
  s->control_src = gst_bin_get_by_name (GST_BIN (s->pipeline), "control");
  pay = gst_bin_get_by_name (GST_BIN (s->pipeline), "pay");
  s->pay_src = gst_element_get_static_pad (pay, "src");
  gst_object_unref (pay);
  enc = gst_bin_get_by_name (GST_BIN (s->pipeline), "enc");
  if (GST_IS_VIDEO_ENCODER (enc)) {
    GstPad *sink = gst_element_get_static_pad (enc, "sink");

    g_signal_connect_object (sink, "notify::caps",
        G_CALLBACK (on_encoder_caps), enc, 0);
    gst_object_unref (sink);
  }
  gst_object_unref (enc);

  world = gst_bin_get_by_name (GST_BIN (s->pipeline), "world");
  if (world) {
    gboolean ok = set_gen_properties (server, world, error);

    if (ok && GST_IS_BIN (world))
      s->gen = gst_bin_get_by_name (GST_BIN (world), "gen");
    gst_object_unref (world);
    if (!ok)
      return FALSE;
    if (s->gen && g_signal_lookup ("pass", G_OBJECT_TYPE (s->gen)))
      g_signal_connect (s->gen, "pass", G_CALLBACK (on_pass), s);
  }

  gst_pad_add_probe (s->pay_src, GST_PAD_PROBE_TYPE_BUFFER |
      GST_PAD_PROBE_TYPE_BUFFER_LIST | GST_PAD_PROBE_TYPE_EVENT_UPSTREAM |
      GST_PAD_PROBE_TYPE_EVENT_DOWNSTREAM, pay_probe,
      g_atomic_rc_box_acquire (s), (GDestroyNotify) session_unref);

  bus = gst_element_get_bus (s->pipeline);
  s->bus_watch = gst_bus_add_watch (bus, on_bus_message, s);

  /* live: the generator creates its session in PAUSED, announces its caps
   * and waits for a key; peers come and go while it runs */
  if (gst_element_set_state (s->pipeline, GST_STATE_PLAYING) ==
      GST_STATE_CHANGE_FAILURE) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
        "the session pipeline cannot start (model, image or devices?)");
    return FALSE;
  }
  return TRUE;
}

static Session *
session_new (LingbotWebrtcServer * server)
{
  Session *s = g_atomic_rc_box_new0 (Session);  /* the table's */

  s->server = server;
  s->context = g_main_context_ref (server->context);
  s->leaving = g_ptr_array_new_with_free_func (gst_object_unref);
  s->id = ++server->next_session;
  s->enc = find_encoder (server->encoder);
  s->max_message = server->max_message_size;
  s->last_chunk = -1;
  s->waiting_chunk = -1;
  s->last_decoded = -1;
  s->state = "starting";
  s->state_chunk = 0;
  for (guint i = 0; i < CHUNK_RING; i++)
    s->ring[i].index = -1;
  make_token (s->token);
  g_mutex_init (&s->lock);
  g_queue_init (&s->pending_keys);
  g_queue_init (&s->pending_echo);
  g_hash_table_insert (server->sessions, GUINT_TO_POINTER (s->id), s);
  g_atomic_int_inc (&server->n_sessions);
  return s;
}

static Session *
session_by_token (LingbotWebrtcServer * server, const char *token)
{
  GHashTableIter it;
  gpointer value;

  if (token == NULL || strlen (token) != 32)
    return NULL;
  g_hash_table_iter_init (&it, server->sessions);
  while (g_hash_table_iter_next (&it, NULL, &value)) {
    Session *s = value;

    if (!s->closed && strcmp (s->token, token) == 0)
      return s;
  }
  return NULL;
}

/* ------------------------------------------------------------------ */
/* signalling messages from the browser                               */
/* ------------------------------------------------------------------ */

static void
answer_refused (Peer * p, char *why)
{
  peer_release (p, why, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR, "webrtc", why);
}

static void
on_answer_set (GstPromise * promise, gpointer user_data)
{
  Peer *p = user_data;
  const GstStructure *reply = NULL;
  GError *err = NULL;

  if (gst_promise_wait (promise) == GST_PROMISE_RESULT_REPLIED)
    reply = gst_promise_get_reply (promise);
  if (reply && gst_structure_has_field (reply, "error"))
    gst_structure_get (reply, "error", G_TYPE_ERROR, &err, NULL);
  if (err) {
    peer_invoke (p, answer_refused, g_strdup_printf ("webrtcbin refused the "
            "answer: %s", err->message), g_free);
    g_error_free (err);
  }
  gst_promise_unref (promise);
}

/* a checked answer: webrtcbin takes it (and the SDP) */
static void
peer_answer (Peer * p, GstSDPMessage * sdp)
{
  GstWebRTCSessionDescription *answer;

  p->answered = TRUE;
  answer = gst_webrtc_session_description_new (GST_WEBRTC_SDP_TYPE_ANSWER, sdp);
  g_signal_emit_by_name (p->webrtc, "set-remote-description", answer,
      gst_promise_new_with_change_func (on_answer_set,
          g_atomic_rc_box_acquire (p), (GDestroyNotify) peer_unref));
  gst_webrtc_session_description_free (answer);
}

/* the checks are lingbot_webrtc_check_signal()'s (webrtc-messages.c) */
static void
on_ws_message (SoupWebsocketConnection * ws, gint type, GBytes * message,
    gpointer user_data)
{
  Conn *c = user_data;
  LingbotWebrtcServer *server = c->server;
  Peer *p = c->peer;
  LingbotWebrtcSignal sig = { 0 };
  const char *data;
  gsize len;

  if (p == NULL || p->released)
    return;                     /* refused or being closed */
  data = g_bytes_get_data (message, &len);
  sig.max_message = server->max_message_size;
  sig.offered = p->offered;
  sig.answered = p->answered;
  sig.pt = p->session->enc->pt;
  sig.codec = p->session->enc->codec;
  sig.encoder = p->session->enc->name;
  sig.ice_loopback = server->ice_loopback;
  lingbot_webrtc_check_signal (&sig, type != SOUP_WEBSOCKET_DATA_TEXT, data,
      len);
  switch (sig.verdict) {
    case LINGBOT_WEBRTC_SIGNAL_DROP:
      peer_reject (p, "signalling", sig.why, len, FALSE, 0);
      break;
    case LINGBOT_WEBRTC_SIGNAL_ANSWER:
      peer_answer (p, g_steal_pointer (&sig.sdp));
      break;
    case LINGBOT_WEBRTC_SIGNAL_CODEC:
      peer_release (p, sig.why, LINGBOT_WEBRTC_CLOSE_CODEC, "codec", sig.why);
      break;
    case LINGBOT_WEBRTC_SIGNAL_ICE:
      g_signal_emit_by_name (p->webrtc, "add-ice-candidate", sig.mline,
          sig.candidate);
      break;
    case LINGBOT_WEBRTC_SIGNAL_ICE_END:
      break;
    case LINGBOT_WEBRTC_SIGNAL_MDNS:
      /* Browsers hide their host addresses behind mDNS names
       * (<uuid>.local).  With ICE on 127.0.0.1 only the browser runs on
       * this host: it reaches our 127.0.0.1 candidates, and its checks
       * teach webrtcbin a peer-reflexive candidate, so the name is not
       * needed; resolving it would only try DNS for a name that no DNS
       * server knows and log an ERROR.  On other interfaces the candidate
       * goes on to webrtcbin, which resolves it where the system can
       * (nss-mdns) and otherwise relies on peer-reflexive discovery as
       * well. */
      g_atomic_int_inc (&server->n_mdns_ignored);
      if (p->mdns_ignored++ == 0)
        g_message ("session %u: peer %u: ignoring the browser's mDNS "
            "(.local) candidates, ICE on 127.0.0.1 relies on peer-reflexive "
            "discovery", p->session->id, p->id);
      break;
    case LINGBOT_WEBRTC_SIGNAL_BYE:{
      Session *s = p->session;

      if (s->active == p || s->peers->next == NULL)
        session_close (s, "bye from the browser");
      else
        peer_release (p, "bye from the browser", SOUP_WEBSOCKET_CLOSE_NORMAL,
            NULL, NULL);
      break;
    }
  }
  lingbot_webrtc_signal_clear (&sig);
}

static void
on_ws_closed (SoupWebsocketConnection * ws, gpointer user_data)
{
  Conn *c = user_data;
  LingbotWebrtcServer *server = c->server;

  g_debug ("connection %u: closed (%u)", c->id,
      soup_websocket_connection_get_close_code (ws));
  if (c->peer)
    peer_release (c->peer, "WebSocket closed", SOUP_WEBSOCKET_CLOSE_NORMAL,
        NULL, NULL);
  g_hash_table_remove (server->conns, c);
}

static void
send_welcome (Peer * p, gboolean resumed)
{
  Session *s = p->session;
  LingbotWebrtcServer *server = s->server;
  g_autoptr (JsonBuilder) b = message_new ("welcome");

  put_int (b, "session", s->id);
  put_int (b, "peer", p->id);
  put_string (b, "encoder", server->encoder);
  put_string (b, "codec", s->enc->codec);
  put_int (b, "max-message-size", (gint64) server->max_message_size);
  put_string (b, "resume", s->token);
  put_boolean (b, "resumed", resumed);
  put_int (b, "next-chunk", s->last_chunk + 1);
  put_string (b, "state", s->state);
  json_builder_set_member_name (b, "start-image");
  if (server->image_real)
    json_builder_add_string_value (b, START_IMAGE_PATH);
  else
    json_builder_add_null_value (b);
  put_int (b, "peer-timeout", server->peer_timeout);
  put_int (b, "resume-timeout", server->resume_timeout);
  conn_send_message (p->conn, b);
}

/* a new WebSocket: resume the session of its token, or a new session, or
 * refused */
static void
on_websocket_open (LingbotWebrtcServer * server, Conn * c, const char *token)
{
  g_autoptr (GError) err = NULL;
  Session *s = session_by_token (server, token);
  gboolean resumed = s != NULL;
  Peer *p;

  if (s == NULL && g_hash_table_size (server->sessions) >= server->max_sessions) {
    g_autofree char *text = g_strdup_printf ("the server is busy: %u of %u "
        "sessions in use, try again later",
        g_hash_table_size (server->sessions), server->max_sessions);
    g_autofree char *json = error_json ("busy", text, TRUE, NULL, FALSE, 0);

    g_message ("connection %u: refused a session: %s%s", c->id, text,
        token ? " (unknown or expired resume token)" : "");
    conn_send (c, json);
    conn_close (c, LINGBOT_WEBRTC_CLOSE_BUSY, "busy");
    return;
  }
  if (s == NULL) {
    s = session_new (server);
    g_message ("session %u: opened (%u of %u)", s->id,
        g_hash_table_size (server->sessions), server->max_sessions);
    if (!session_build (s, &err)) {
      g_autofree char *json = error_json ("pipeline", err->message, TRUE,
          NULL, FALSE, 0);

      conn_send (c, json);
      conn_close (c, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR, "pipeline");
      session_close (s, "pipeline");
      return;
    }
  } else {
    /* a replacement that has not connected yet is replaced itself */
    for (GList * l = s->peers; l;) {
      Peer *other = l->data;

      l = l->next;
      if (other != s->active) {
        g_atomic_int_inc (&server->n_replaced);
        peer_release (other, "replaced by a newer connection",
            LINGBOT_WEBRTC_CLOSE_REPLACED, "replaced",
            "a newer connection resumed this session");
      }
    }
  }
  p = peer_new (s, c);
  g_message ("session %u: peer %u %s (connection %u)", s->id, p->id,
      resumed ? (s->active == p ? "resumes it" : "takes it over, the viewer "
          "keeps streaming until it is connected") : "joins", c->id);
  send_welcome (p, resumed);
  if (!peer_build (p, &err))
    peer_release (p, err->message, SOUP_WEBSOCKET_CLOSE_SERVER_ERROR,
        "pipeline", err->message);
}

/* ------------------------------------------------------------------ */
/* TCP connections: accept, cap, idle timeout                         */
/* ------------------------------------------------------------------ */

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

#define CLIENT_KEY "lingbot-client"

static void accept_next (LingbotWebrtcServer * server);

static void
client_stop_timer (Client * cl)
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

  client_stop_timer (cl);
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
  client_stop_timer (cl);
  cl->idle = g_timeout_source_new (cl->server->idle_timeout * 1000);
  g_source_set_callback (cl->idle, client_idle_expired, cl, NULL);
  g_source_attach (cl->idle, cl->server->context);
}

static Client *
client_of_message (LingbotWebrtcServer * server, SoupServerMessage * msg)
{
  GSocketAddress *addr = soup_server_message_get_remote_address (msg);
  gpointer id = addr ? g_object_get_data (G_OBJECT (addr), CLIENT_KEY) : NULL;

  return id ? g_hash_table_lookup (server->clients, id) : NULL;
}

/* a complete request: its response has idle_timeout seconds; the
 * connection closes after it (RFC 9112 9.6: a server without persistent
 * connections says "close" in every response) */
static void
on_request_read (SoupServer * soup, SoupServerMessage * msg, gpointer user_data)
{
  Client *cl = client_of_message (user_data, msg);

  soup_message_headers_replace (soup_server_message_get_response_headers
      (msg), "Connection", "close");
  if (cl)
    client_arm (cl);
}

/* answered (or failed): soup closes the connection now */
static void
on_request_done (SoupServer * soup, SoupServerMessage * msg, gpointer user_data)
{
  Client *cl = client_of_message (user_data, msg);

  if (cl)
    client_stop_timer (cl);
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
  accept_next (server);
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
    accept_next (server);
  }
  g_main_context_pop_thread_default (server->context);
}

/* one accept at a time, on the server's context */
static void
accept_next (LingbotWebrtcServer * server)
{
  g_main_context_push_thread_default (server->context);
  g_socket_listener_accept_async (server->listener, server->accept_cancel,
      on_accepted, server);
  g_main_context_pop_thread_default (server->context);
}

/* 101 sent: take the connection over, behind the size guard */
static void
on_ws_upgraded (SoupServerMessage * msg, gpointer user_data)
{
  LingbotWebrtcServer *server = user_data;
  GUri *uri = soup_server_message_get_uri (msg);
  SoupMessageHeaders *req = soup_server_message_get_request_headers (msg);
  const char *token = g_object_get_data (G_OBJECT (msg), "lingbot-resume");
  Client *cl = client_of_message (server, msg);
  GSocket *socket = NULL;
  GIOStream *stream;
  Conn *c;

  /* a WebSocket has no deadline of its own: its peer's timeouts apply */
  if (cl) {
    client_stop_timer (cl);
    socket = g_object_ref (cl->socket);
  }
  stream = soup_server_message_steal_connection (msg);
  if (stream == NULL) {
    g_clear_object (&socket);
    return;
  }
  c = g_new0 (Conn, 1);
  c->server = server;
  c->id = ++server->next_conn;
  c->guard = lingbot_ws_guard_new (stream, LINGBOT_WEBRTC_WS_HARD_LIMIT,
      conn_tripped, c);
  lingbot_ws_guard_set_socket (c->guard, socket);
  g_debug ("connection %u: WebSocket on TCP connection %u%s", c->id,
      cl ? cl->id : 0, socket ? "" : " (no socket: no lingering close)");
  g_clear_object (&socket);
  g_object_unref (stream);
  c->ws = soup_websocket_connection_new (c->guard, uri,
      SOUP_WEBSOCKET_CONNECTION_SERVER,
      soup_message_headers_get_one (req, "Origin"), NULL, NULL);
  soup_websocket_connection_set_max_incoming_payload_size (c->ws,
      LINGBOT_WEBRTC_WS_HARD_LIMIT);
  g_hash_table_add (server->conns, c);
  c->message_id = g_signal_connect (c->ws, "message",
      G_CALLBACK (on_ws_message), c);
  c->closed_id = g_signal_connect (c->ws, "closed",
      G_CALLBACK (on_ws_closed), c);
  on_websocket_open (server, c, token);
}

/* a page of another site may not open the signalling socket: an Origin,
 * when there is one, must name the host the request went to */
static gboolean
origin_allowed (SoupServerMessage * msg)
{
  SoupMessageHeaders *req = soup_server_message_get_request_headers (msg);
  const char *origin = soup_message_headers_get_one (req, "Origin");
  const char *host = soup_message_headers_get_one (req, "Host");
  const char *rest;

  if (origin == NULL)
    return TRUE;
  if (host == NULL)
    return FALSE;
  if (g_str_has_prefix (origin, "http://"))
    rest = origin + 7;
  else if (g_str_has_prefix (origin, "https://"))
    rest = origin + 8;
  else
    return FALSE;
  return g_ascii_strcasecmp (rest, host) == 0;
}

static void
on_ws_http (SoupServer * soup, SoupServerMessage * msg, const char *path,
    GHashTable * query, gpointer user_data)
{
  LingbotWebrtcServer *server = user_data;
  g_autoptr (GError) err = NULL;
  const char *token = query ? g_hash_table_lookup (query, "resume") : NULL;

  if (strcmp (path, WS_PATH) != 0) {
    soup_server_message_set_status (msg, SOUP_STATUS_NOT_FOUND, NULL);
    return;
  }
  if (!origin_allowed (msg)) {
    g_message ("http: WebSocket from another origin refused (%s)",
        soup_message_headers_get_one (soup_server_message_get_request_headers
            (msg), "Origin"));
    soup_server_message_set_status (msg, SOUP_STATUS_FORBIDDEN, NULL);
    return;
  }
  /* no extensions: permessage-deflate would make frame sizes say nothing
   * about message sizes; "Connection: Upgrade", not on_request_read()'s
   * "close" */
  soup_message_headers_remove (soup_server_message_get_response_headers
      (msg), "Connection");
  if (!soup_websocket_server_check_handshake (msg, NULL, NULL, NULL, &err)
      || !soup_websocket_server_process_handshake (msg, NULL, NULL, NULL, NULL)) {
    g_message ("http: %s " WS_PATH " -> 400 (%s)",
        soup_server_message_get_method (msg),
        err ? err->message : "bad WebSocket handshake");
    soup_message_headers_replace (soup_server_message_get_response_headers
        (msg), "Connection", "close");
    soup_server_message_set_status (msg, SOUP_STATUS_BAD_REQUEST, NULL);
    return;
  }
  if (token)
    g_object_set_data_full (G_OBJECT (msg), "lingbot-resume",
        g_strndup (token, 64), g_free);
  g_signal_connect (msg, "wrote-informational", G_CALLBACK (on_ws_upgraded),
      server);
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

static void
on_http (SoupServer * soup, SoupServerMessage * msg, const char *path,
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
  cfg->max_sessions = LINGBOT_WEBRTC_DEFAULT_MAX_SESSIONS;
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

/**
 * lingbot_webrtc_server_new:
 * @cfg: the configuration (copied)
 * @error: where to put an error
 *
 * Checks the encoder and the GStreamer elements, sizes the connection cap
 * (@cfg's max_connections, or automatic from RLIMIT_NOFILE), binds the
 * HTTP server on the calling thread's default main context (everything of
 * the server runs there) and returns.  Sessions are made when browsers
 * connect.
 *
 * Returns: (transfer full): the server, or %NULL with @error set (G_IO_ERROR:
 *   an unknown encoder, a missing element, no page folder, not an IP
 *   address, RLIMIT_NOFILE too low for the cap
 *   (G_IO_ERROR_TOO_MANY_OPEN_FILES), or the bind failed)
 */
LingbotWebrtcServer *
lingbot_webrtc_server_new (const LingbotWebrtcConfig * cfg, GError ** error)
{
  g_autoptr (LingbotWebrtcServer) server = g_new0 (LingbotWebrtcServer, 1);
  g_autoptr (GInetAddress) inet = NULL;
  g_autoptr (GSocketAddress) addr = NULL;
  g_autoptr (GSocketAddress) bound = NULL;
  const char *needed[] = { "webrtcbin", "videoconvert", "queue", "tee",
    "clocksync", NULL
  };

  server->context = g_main_context_ref_thread_default ();
  server->sessions = g_hash_table_new_full (NULL, NULL, NULL,
      session_table_unref);
  server->conns = g_hash_table_new_full (NULL, NULL, NULL,
      (GDestroyNotify) conn_free);
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
  server->max_sessions = MAX (cfg->max_sessions, 1);
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

  if (find_encoder (server->encoder) == NULL) {
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
  soup_server_add_handler (server->soup, NULL, on_http, server, NULL);
  soup_server_add_handler (server->soup, WS_PATH, on_ws_http, server, NULL);
  g_signal_connect (server->soup, "request-read", G_CALLBACK (on_request_read),
      server);
  g_signal_connect (server->soup, "request-finished",
      G_CALLBACK (on_request_done), server);
  g_signal_connect (server->soup, "request-aborted",
      G_CALLBACK (on_request_done), server);
  server->listener = g_socket_listener_new ();
  g_socket_listener_set_backlog (server->listener, LISTEN_BACKLOG);
  if (!g_socket_listener_add_address (server->listener, addr,
          G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, NULL, &bound, error))
    return NULL;
  server->port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
  server->accept_cancel = g_cancellable_new ();
  accept_next (server);
  g_message ("listening on http://%s:%u/ (page %s, encoder %s, at most %u "
      "session%s%s, peer timeout %u s, resume %u s, at most %u connections, "
      "idle timeout %u s)", server->address,
      server->port, server->www_dir, server->encoder, server->max_sessions,
      server->max_sessions == 1 ? "" : "s",
      server->ice_loopback ? ", ICE on 127.0.0.1" : "",
      server->peer_timeout, server->resume_timeout, server->max_connections,
      server->idle_timeout);
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
      conn_close (c, SOUP_WEBSOCKET_CLOSE_GOING_AWAY, "shutdown");
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

      client_stop_timer (cl);
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
  if (server->context)
    g_main_context_unref (server->context);
  g_free (server);
}

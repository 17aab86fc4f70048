/* lingbot-gst: the WebRTC sender of the live example (server side)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Threads: everything of the server (HTTP, WebSockets, bus watches, session
 * life) runs on the main context that was thread-default when the server
 * was created.  webrtcbin, its data channels and the pad probe call back
 * from streaming threads; those callbacks only copy what they got and hop
 * to that context (session_invoke()), where the session may already be
 * closed, which every hop checks first.
 */
#define GST_USE_UNSTABLE_API 1

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <gst/gst.h>
#include <gst/rtp/gstrtpbuffer.h>
#include <gst/sdp/sdp.h>
#include <gst/video/navigation.h>
#include <gst/webrtc/webrtc.h>
#include <json-glib/json-glib.h>
#include <libsoup/soup.h>

#include "lingbot/control.h"
#include "webrtc-server.h"

#define WS_PATH "/ws"
#define LABEL_INPUT "input"
#define LABEL_CONTROL "control"
#define MAX_KEY_NAME 64
#define MAX_PENDING_KEYS 256
#define WEBRTC_LATENCY_MS 50

struct _LingbotWebrtcServer
{
  GMainContext *context;
  SoupServer *soup;
  guint port;
  char *www_dir;                /* realpath */
  GHashTable *sessions;         /* id -> Session (owned) */
  guint next_id;
  gint n_dropped;               /* atomic */
  gint n_mdns_ignored;          /* atomic: browser .local candidates */

  /* config, owned copies */
  char *address;
  char *model, *image, *prompt, *prompt_embeds, *devices, *encoder, *source;
  char **gen_props;
  guint max_sessions;
  gsize max_message_size;
  gboolean ice_loopback;
};

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

typedef struct
{
  gint refs;
  LingbotWebrtcServer *server;  /* valid while !closed */
  guint id;
  gboolean closed;
  gboolean offered;
  gboolean answered;
  guint mdns_ignored;           /* .local candidates not passed on */
  SoupWebsocketConnection *ws;
  gulong ws_message_id, ws_closed_id;
  GstElement *pipeline;
  GstElement *webrtc;
  GstElement *control_src;      /* NULL with a stand-in source */
  GstPad *pay_src;
  GstWebRTCDataChannel *input, *control;
  guint bus_watch;

  /* main context only */
  GQueue pending_keys;          /* KeyStamp */
  gint64 last_chunk;            /* -1 before the first */
  guint64 frames_total;         /* frames of the chunks announced so far */

  /* shared with the pay probe */
  GMutex lock;
  GQueue pending_echo;          /* Echo */
  guint64 frames_sent;          /* RTP frames seen at the payloader */
  guint32 last_rtp_ts;
  gboolean have_rtp_ts;
} Session;

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

static Session *
session_ref (Session * s)
{
  g_atomic_int_inc (&s->refs);
  return s;
}

static void
session_unref (Session * s)
{
  if (!g_atomic_int_dec_and_test (&s->refs))
    return;
  g_assert (s->pipeline == NULL);
  g_debug ("session %u: freed", s->id);
  g_queue_clear_full (&s->pending_keys, (GDestroyNotify) key_stamp_free);
  g_queue_clear_full (&s->pending_echo, (GDestroyNotify) echo_free);
  g_mutex_clear (&s->lock);
  g_free (s);
}

static void
session_unref_closure (gpointer data, GClosure * closure)
{
  session_unref (data);
}

static char *
builder_to_string (JsonBuilder * b)
{
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  return json_to_string (root, FALSE);
}

static void
note_drop (LingbotWebrtcServer * server, guint session, const char *where,
    const char *why, gsize size)
{
  g_atomic_int_inc (&server->n_dropped);
  g_message ("session %u: %s message dropped (%" G_GSIZE_FORMAT
      " bytes): %s", session, where, size, why);
}

/* ------------------------------------------------------------------ */
/* hopping to the server's context                                    */
/* ------------------------------------------------------------------ */

typedef void (*SessionFunc) (Session * s, gpointer data);

typedef struct
{
  Session *s;
  SessionFunc func;
  gpointer data;
  GDestroyNotify free;
} Hop;

static gboolean
hop_run (gpointer user_data)
{
  Hop *h = user_data;

  if (!h->s->closed)
    h->func (h->s, h->data);
  return G_SOURCE_REMOVE;
}

static void
hop_free (gpointer user_data)
{
  Hop *h = user_data;

  if (h->free)
    h->free (h->data);
  session_unref (h->s);
  g_free (h);
}

static void
session_invoke (Session * s, GMainContext * context, SessionFunc func,
    gpointer data, GDestroyNotify free_func)
{
  Hop *h = g_new0 (Hop, 1);
  GSource *src = g_idle_source_new ();

  h->s = session_ref (s);
  h->func = func;
  h->data = data;
  h->free = free_func;
  g_source_set_callback (src, hop_run, h, hop_free);
  g_source_attach (src, context);
  g_source_unref (src);
}

/* ------------------------------------------------------------------ */
/* sending                                                            */
/* ------------------------------------------------------------------ */

static void
ws_send (Session * s, const char *text)
{
  if (s->ws && soup_websocket_connection_get_state (s->ws) ==
      SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_send_text (s->ws, text);
}

static void
ws_send_error (SoupWebsocketConnection * ws, const char *code,
    const char *message)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autofree char *text = NULL;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, "error");
  json_builder_set_member_name (b, "code");
  json_builder_add_string_value (b, code);
  json_builder_set_member_name (b, "message");
  json_builder_add_string_value (b, message);
  json_builder_end_object (b);
  text = builder_to_string (b);
  if (soup_websocket_connection_get_state (ws) == SOUP_WEBSOCKET_STATE_OPEN)
    soup_websocket_connection_send_text (ws, text);
}

static void
control_send (Session * s, const char *text)
{
  GstWebRTCDataChannelState state = GST_WEBRTC_DATA_CHANNEL_STATE_CLOSED;

  if (s->control == NULL)
    return;
  g_object_get (s->control, "ready-state", &state, NULL);
  if (state == GST_WEBRTC_DATA_CHANNEL_STATE_OPEN)
    gst_webrtc_data_channel_send_string (s->control, text);
  else
    g_debug ("session %u: control channel not open, dropped %s", s->id, text);
}

/* ------------------------------------------------------------------ */
/* session end                                                        */
/* ------------------------------------------------------------------ */

static void
session_close (Session * s, const char *reason)
{
  LingbotWebrtcServer *server = s->server;
  SoupWebsocketConnection *ws;

  if (s->closed)
    return;
  /* under the lock: streaming threads check it before touching the rest */
  g_mutex_lock (&s->lock);
  s->closed = TRUE;
  g_mutex_unlock (&s->lock);
  g_message ("session %u: closed (%s)", s->id, reason);

  if (s->bus_watch) {
    /* on the server's context, not the default one: no g_source_remove() */
    GstBus *bus = gst_element_get_bus (s->pipeline);

    gst_bus_remove_watch (bus);
    gst_object_unref (bus);
    s->bus_watch = 0;
  }
  if (s->pipeline) {
    /* stops the generator and frees the ranks of its world */
    gst_element_set_state (s->pipeline, GST_STATE_NULL);
  }
  g_clear_object (&s->input);
  g_clear_object (&s->control);
  g_clear_object (&s->pay_src);
  g_clear_object (&s->control_src);
  g_clear_object (&s->webrtc);
  g_clear_object (&s->pipeline);

  ws = g_steal_pointer (&s->ws);
  if (ws) {
    g_clear_signal_handler (&s->ws_message_id, ws);
    g_clear_signal_handler (&s->ws_closed_id, ws);
    if (soup_websocket_connection_get_state (ws) ==
        SOUP_WEBSOCKET_STATE_OPEN)
      soup_websocket_connection_close (ws, SOUP_WEBSOCKET_CLOSE_NORMAL,
          reason);
    g_object_unref (ws);
  }
  /* drops the table's reference */
  g_hash_table_remove (server->sessions, GUINT_TO_POINTER (s->id));
}

static void
session_fail (Session * s, const char *code, const char *message)
{
  if (s->closed)
    return;
  if (s->ws)
    ws_send_error (s->ws, code, message);
  session_close (s, code);
}

/* ------------------------------------------------------------------ */
/* key echo: which chunk first used a key press                       */
/* ------------------------------------------------------------------ */

static void
send_echo (Session * s, gpointer data)
{
  Echo *e = data;
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autofree char *text = NULL;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, "key-echo");
  json_builder_set_member_name (b, "id");
  json_builder_add_int_value (b, e->id);
  json_builder_set_member_name (b, "key");
  json_builder_add_string_value (b, e->name);
  json_builder_set_member_name (b, "chunk");
  json_builder_add_int_value (b, (gint64) e->chunk);
  json_builder_set_member_name (b, "first-frame");
  json_builder_add_int_value (b, (gint64) e->first_frame);
  json_builder_set_member_name (b, "rtp-timestamp");
  json_builder_add_int_value (b, e->rtp_ts);
  json_builder_set_member_name (b, "server-ms");
  json_builder_add_double_value (b, e->server_ms);
  json_builder_end_object (b);
  text = builder_to_string (b);
  g_debug ("session %u: %s", s->id, text);
  control_send (s, text);
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

static GstPadProbeReturn
pay_probe (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  Session *s = user_data;
  GQueue ready = G_QUEUE_INIT;
  GMainContext *context;
  Echo *e;

  g_mutex_lock (&s->lock);
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER) {
    count_rtp_buffer (s, GST_PAD_PROBE_INFO_BUFFER (info), &ready);
  } else if (info->type & GST_PAD_PROBE_TYPE_BUFFER_LIST) {
    gpointer args[2] = { s, &ready };
    gst_buffer_list_foreach (GST_PAD_PROBE_INFO_BUFFER_LIST (info),
        count_list_item, args);
  }
  context = s->closed ? NULL : s->server->context;
  g_mutex_unlock (&s->lock);

  while ((e = g_queue_pop_head (&ready))) {
    if (context)
      session_invoke (s, context, send_echo, e, (GDestroyNotify) echo_free);
    else
      echo_free (e);
  }
  return GST_PAD_PROBE_OK;
}

/* ------------------------------------------------------------------ */
/* bus: chunk metrics, errors, end of stream                          */
/* ------------------------------------------------------------------ */

static void
handle_chunk (Session * s, const GstStructure * st)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autofree char *text = NULL;
  guint64 index = 0;
  gint frames = 0;
  guint keys = 0;
  double dit = 0, vae = 0, compute = 0;
  const char *keys_string = gst_structure_get_string (st, "keys-string");
  guint64 first_frame;

  gst_structure_get_uint64 (st, "index", &index);
  gst_structure_get_int (st, "frames", &frames);
  gst_structure_get_uint (st, "keys", &keys);
  gst_structure_get_double (st, "dit-seconds", &dit);
  gst_structure_get_double (st, "vae-seconds", &vae);
  gst_structure_get_double (st, "compute-seconds", &compute);

  first_frame = s->frames_total;
  s->frames_total += (guint64) MAX (frames, 0);
  s->last_chunk = (gint64) index;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, "chunk");
  json_builder_set_member_name (b, "index");
  json_builder_add_int_value (b, (gint64) index);
  json_builder_set_member_name (b, "frames");
  json_builder_add_int_value (b, frames);
  json_builder_set_member_name (b, "first-frame");
  json_builder_add_int_value (b, (gint64) first_frame);
  json_builder_set_member_name (b, "keys");
  json_builder_add_string_value (b, keys_string ? keys_string : "");
  json_builder_set_member_name (b, "dit-seconds");
  json_builder_add_double_value (b, dit);
  json_builder_set_member_name (b, "vae-seconds");
  json_builder_add_double_value (b, vae);
  json_builder_set_member_name (b, "compute-seconds");
  json_builder_add_double_value (b, compute);
  json_builder_set_member_name (b, "compute-fps");
  json_builder_add_double_value (b, compute > 0 ? frames / compute : 0.0);
  json_builder_end_object (b);
  text = builder_to_string (b);
  control_send (s, text);

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
      break;
    }
    case GST_MESSAGE_ERROR:{
      g_autoptr (GError) err = NULL;
      g_autofree char *dbg = NULL;
      g_autofree char *text = NULL;

      gst_message_parse_error (msg, &err, &dbg);
      text = g_strdup_printf ("%s: %s", GST_OBJECT_NAME (msg->src),
          err->message);
      g_message ("session %u: pipeline error: %s (%s)", s->id, text,
          GST_STR_NULL (dbg));
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
/* webrtcbin signalling                                               */
/* ------------------------------------------------------------------ */

static void
send_sdp (Session * s, gpointer data)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autofree char *text = NULL;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, "offer");
  json_builder_set_member_name (b, "sdp");
  json_builder_add_string_value (b, data);
  json_builder_end_object (b);
  text = builder_to_string (b);
  ws_send (s, text);
}

static void
on_offer_created (GstPromise * promise, gpointer user_data)
{
  Session *s = user_data;
  GstWebRTCSessionDescription *offer = NULL;
  const GstStructure *reply;
  GstElement *webrtc;
  GMainContext *context;

  if (gst_promise_wait (promise) != GST_PROMISE_RESULT_REPLIED) {
    gst_promise_unref (promise);
    return;
  }
  reply = gst_promise_get_reply (promise);
  if (reply)
    gst_structure_get (reply, "offer",
        GST_TYPE_WEBRTC_SESSION_DESCRIPTION, &offer, NULL);
  g_mutex_lock (&s->lock);
  webrtc = s->closed || !s->webrtc ? NULL : gst_object_ref (s->webrtc);
  context = s->closed ? NULL : s->server->context;
  g_mutex_unlock (&s->lock);
  if (offer && webrtc && context) {
    g_signal_emit_by_name (webrtc, "set-local-description", offer, NULL);
    session_invoke (s, context, send_sdp,
        gst_sdp_message_as_text (offer->sdp), g_free);
  } else if (offer == NULL) {
    g_message ("session %u: webrtcbin created no offer", s->id);
  }
  if (offer)
    gst_webrtc_session_description_free (offer);
  if (webrtc)
    gst_object_unref (webrtc);
  /* ours (create_offer's); the last one drops the session reference */
  gst_promise_unref (promise);
}

static void
create_offer (Session * s, gpointer data)
{
  GstPromise *promise;

  if (s->offered)
    return;
  s->offered = TRUE;
  promise = gst_promise_new_with_change_func (on_offer_created,
      session_ref (s), (GDestroyNotify) session_unref);
  g_signal_emit_by_name (s->webrtc, "create-offer", NULL, promise);
}

static void
on_negotiation_needed (GstElement * webrtc, gpointer user_data)
{
  Session *s = user_data;

  g_mutex_lock (&s->lock);
  if (!s->closed)
    session_invoke (s, s->server->context, create_offer, NULL, NULL);
  g_mutex_unlock (&s->lock);
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
send_candidate (Session * s, gpointer data)
{
  Candidate *c = data;
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autofree char *text = NULL;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, "ice");
  json_builder_set_member_name (b, "candidate");
  json_builder_add_string_value (b, c->candidate);
  json_builder_set_member_name (b, "sdpMLineIndex");
  json_builder_add_int_value (b, c->mline);
  json_builder_end_object (b);
  text = builder_to_string (b);
  ws_send (s, text);
}

static void
on_ice_candidate (GstElement * webrtc, guint mline, const char *candidate,
    gpointer user_data)
{
  Session *s = user_data;
  Candidate *c = g_new0 (Candidate, 1);

  c->mline = mline;
  c->candidate = g_strdup (candidate);
  g_mutex_lock (&s->lock);
  if (!s->closed)
    session_invoke (s, s->server->context, send_candidate, c,
        (GDestroyNotify) candidate_free);
  else
    candidate_free (c);
  g_mutex_unlock (&s->lock);
}

static void
ice_state_changed (Session * s, gpointer data)
{
  GstWebRTCICEConnectionState state = GPOINTER_TO_INT (data);

  if (state == GST_WEBRTC_ICE_CONNECTION_STATE_FAILED)
    session_fail (s, "ice", "ICE connection failed");
  else if (state == GST_WEBRTC_ICE_CONNECTION_STATE_CLOSED)
    session_close (s, "ICE connection closed");
}

static void
on_ice_state (GObject * webrtc, GParamSpec * pspec, gpointer user_data)
{
  Session *s = user_data;
  GstWebRTCICEConnectionState state;

  g_object_get (webrtc, "ice-connection-state", &state, NULL);
  g_mutex_lock (&s->lock);
  if (!s->closed)
    session_invoke (s, s->server->context, ice_state_changed,
        GINT_TO_POINTER (state), NULL);
  g_mutex_unlock (&s->lock);
}

/* ------------------------------------------------------------------ */
/* input: navigation events from the browser                          */
/* ------------------------------------------------------------------ */

/* X keysym names (gstwebrtc-api sends those) -> DOM codes */
static const char *
normalize_key (const char *key)
{
  static const char *const map[][2] = {
    {"Up", "ArrowUp"}, {"Down", "ArrowDown"},
    {"Left", "ArrowLeft"}, {"Right", "ArrowRight"},
  };

  for (guint i = 0; i < G_N_ELEMENTS (map); i++)
    if (strcmp (key, map[i][0]) == 0)
      return map[i][1];
  return key;
}

static void
send_navigation (Session * s, GstEvent * event)
{
  /* upstream from the webrtcbin side, as webrtcsink does; the control
   * source is reached through encoder, converter, decoder and generator */
  if (s->pay_src && gst_pad_send_event (s->pay_src, gst_event_ref (event))) {
    gst_event_unref (event);
    return;
  }
  if (s->control_src)
    gst_element_send_event (s->control_src, event);
  else
    gst_event_unref (event);
}

/* one navigation event object: the webrtcsink "input" form
 * {"event":"KeyPress","key":"ArrowUp","modifier_state":"..."} plus our
 * optional "id" (an integer stamp echoed with the chunk that used it) */
static gboolean
handle_navigation (Session * s, JsonObject * o, gboolean has_id, gint64 id,
    const char **why)
{
  const char *event, *key;
  gboolean press;
  JsonNode *n;

  n = json_object_get_member (o, "event");
  if (!n || !JSON_NODE_HOLDS_VALUE (n)
      || json_node_get_value_type (n) != G_TYPE_STRING) {
    *why = "no \"event\" string";
    return FALSE;
  }
  event = json_node_get_string (n);
  if (g_str_has_prefix (event, "Mouse") || g_str_has_prefix (event, "Touch")) {
    g_debug ("session %u: %s ignored (no control)", s->id, event);
    return TRUE;
  }
  if (strcmp (event, "KeyPress") == 0)
    press = TRUE;
  else if (strcmp (event, "KeyRelease") == 0)
    press = FALSE;
  else {
    *why = "unknown navigation event";
    return FALSE;
  }

  n = json_object_get_member (o, "key");
  if (!n || !JSON_NODE_HOLDS_VALUE (n)
      || json_node_get_value_type (n) != G_TYPE_STRING
      || strlen (json_node_get_string (n)) == 0
      || strlen (json_node_get_string (n)) > MAX_KEY_NAME
      || !g_utf8_validate (json_node_get_string (n), -1, NULL)) {
    *why = "no valid \"key\"";
    return FALSE;
  }
  key = normalize_key (json_node_get_string (n));

  if (press && has_id) {
    guint bit = lingbot_key_from_name (key);

    if (bit != 0) {
      KeyStamp *k = g_new0 (KeyStamp, 1);

      k->id = id;
      k->key = bit;
      k->name = g_strdup (key);
      k->min_chunk = (guint64) (s->last_chunk + 1);
      k->t_us = g_get_monotonic_time ();
      g_mutex_lock (&s->lock);
      g_queue_push_tail (&s->pending_keys, k);
      while (s->pending_keys.length > MAX_PENDING_KEYS)
        key_stamp_free (g_queue_pop_head (&s->pending_keys));
      g_mutex_unlock (&s->lock);
    }
  }

  g_debug ("session %u: %s %s", s->id, event, key);
  send_navigation (s, press ? gst_navigation_event_new_key_press (key, 0) :
      gst_navigation_event_new_key_release (key, 0));
  return TRUE;
}

static gboolean
get_int_member (JsonObject * o, const char *name, gint64 * out)
{
  JsonNode *n = json_object_get_member (o, name);

  if (!n || !JSON_NODE_HOLDS_VALUE (n)
      || json_node_get_value_type (n) != G_TYPE_INT64)
    return FALSE;
  *out = json_node_get_int (n);
  return TRUE;
}

typedef struct
{
  gboolean control;             /* arrived on "control" */
  char *text;
} ChannelMessage;

static void
channel_message_free (ChannelMessage * m)
{
  g_free (m->text);
  g_free (m);
}

static void
handle_channel_message (Session * s, gpointer data)
{
  ChannelMessage *m = data;
  const char *where = m->control ? LABEL_CONTROL : LABEL_INPUT;
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) err = NULL;
  const char *why = NULL;
  JsonObject *o, *req;
  JsonNode *root, *n;
  gint64 id = 0;
  gboolean has_id;
  gsize len = strlen (m->text);

  if (len > s->server->max_message_size) {
    note_drop (s->server, s->id, where, "too big", len);
    return;
  }
  if (!json_parser_load_from_data (parser, m->text, (gssize) len, &err)) {
    note_drop (s->server, s->id, where, err->message, len);
    return;
  }
  root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root)) {
    note_drop (s->server, s->id, where, "not a JSON object", len);
    return;
  }
  o = json_node_get_object (root);
  has_id = get_int_member (o, "id", &id);

  /* gstwebrtc-api's control request:
   * {"id":N,"request":{"type":"navigationEvent","event":{...}}} */
  n = json_object_get_member (o, "request");
  if (n && JSON_NODE_HOLDS_OBJECT (n)) {
    const char *type;

    req = json_node_get_object (n);
    type = json_object_get_string_member_with_default (req, "type", "");
    n = json_object_get_member (req, "event");
    if (strcmp (type, "navigationEvent") != 0 || !n
        || !JSON_NODE_HOLDS_OBJECT (n)) {
      note_drop (s->server, s->id, where, "unknown request", len);
      return;
    }
    if (!handle_navigation (s, json_node_get_object (n), has_id, id, &why))
      note_drop (s->server, s->id, where, why, len);
    return;
  }

  if (m->control) {
    note_drop (s->server, s->id, where, "unknown message type", len);
    return;
  }
  if (!handle_navigation (s, o, has_id, id, &why))
    note_drop (s->server, s->id, where, why, len);
}

static void
on_channel_message (GstWebRTCDataChannel * channel, const char *text,
    gpointer user_data)
{
  Session *s = user_data;
  ChannelMessage *m;
  gsize len = text ? strlen (text) : 0;

  g_mutex_lock (&s->lock);
  if (s->closed) {
    g_mutex_unlock (&s->lock);
    return;
  }
  if (len > s->server->max_message_size) {
    /* no copy of what is dropped anyway */
    note_drop (s->server, s->id, "data channel", "too big", len);
    g_mutex_unlock (&s->lock);
    return;
  }
  m = g_new0 (ChannelMessage, 1);
  m->control = channel == s->control;
  m->text = g_strdup (text ? text : "");
  session_invoke (s, s->server->context, handle_channel_message, m,
      (GDestroyNotify) channel_message_free);
  g_mutex_unlock (&s->lock);
}

static void
on_channel_data (GstWebRTCDataChannel * channel, GBytes * data,
    gpointer user_data)
{
  Session *s = user_data;

  note_drop (s->server, s->id, "data channel", "binary",
      data ? g_bytes_get_size (data) : 0);
}

static GstWebRTCDataChannel *
create_channel (Session * s, const char *label)
{
  GstWebRTCDataChannel *channel = NULL;
  GstStructure *opts = gst_structure_new ("config",
      "ordered", G_TYPE_BOOLEAN, TRUE,
      "priority", GST_TYPE_WEBRTC_PRIORITY_TYPE,
      GST_WEBRTC_PRIORITY_TYPE_HIGH, NULL);

  g_signal_emit_by_name (s->webrtc, "create-data-channel", label, opts,
      &channel);
  gst_structure_free (opts);
  if (channel == NULL)
    return NULL;
  g_signal_connect_data (channel, "on-message-string",
      G_CALLBACK (on_channel_message), session_ref (s),
      session_unref_closure, 0);
  g_signal_connect_data (channel, "on-message-data",
      G_CALLBACK (on_channel_data), session_ref (s),
      session_unref_closure, 0);
  return channel;
}

/* ------------------------------------------------------------------ */
/* the session pipeline                                               */
/* ------------------------------------------------------------------ */

typedef struct
{
  const char *name;
  const char *chain;            /* encoder ! payloader name=pay */
  const char *rtp_caps;
} Encoder;

static const Encoder encoders[] = {
  {"vp8", "vp8enc deadline=1 keyframe-max-dist=32 cpu-used=8 "
        "! rtpvp8pay name=pay pt=96 picture-id-mode=15-bit",
      "application/x-rtp,media=video,encoding-name=VP8,payload=96,"
        "clock-rate=90000"},
  {"x264", "x264enc tune=zerolatency speed-preset=ultrafast key-int-max=32 "
        "bframes=0 ! video/x-h264,profile=constrained-baseline "
        "! rtph264pay name=pay pt=102 config-interval=-1 "
        "aggregate-mode=zero-latency",
      "application/x-rtp,media=video,encoding-name=H264,payload=102,"
        "clock-rate=90000"},
  {"openh264", "openh264enc complexity=low gop-size=32 "
        "! video/x-h264,profile=constrained-baseline "
        "! rtph264pay name=pay pt=102 config-interval=-1 "
        "aggregate-mode=zero-latency",
      "application/x-rtp,media=video,encoding-name=H264,payload=102,"
        "clock-rate=90000"},
};

static const Encoder *
find_encoder (const char *name)
{
  for (guint i = 0; i < G_N_ELEMENTS (encoders); i++)
    if (g_strcmp0 (encoders[i].name, name) == 0)
      return &encoders[i];
  return NULL;
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

static gboolean
session_build (Session * s, GError ** error)
{
  LingbotWebrtcServer *server = s->server;
  const Encoder *enc = find_encoder (server->encoder);
  g_autofree char *desc = NULL;
  g_autoptr (GstBus) bus = NULL;
  GstElement *gen;
  GstWebRTCICE *ice = NULL;

  g_assert (enc != NULL);
  desc = g_strdup_printf ("%s ! videoconvert ! video/x-raw,format=I420 "
      "! queue max-size-buffers=64 max-size-bytes=0 max-size-time=0 "
      "! %s ! %s ! webrtcbin name=webrtc bundle-policy=max-bundle latency=%d",
      server->source ? server->source :
      "lingbotcontrolsrc name=control is-live=true ! lingbotbin name=gen",
      enc->chain, enc->rtp_caps, WEBRTC_LATENCY_MS);
  g_debug ("session %u: %s", s->id, desc);
  s->pipeline = gst_parse_launch_full (desc, NULL, GST_PARSE_FLAG_FATAL_ERRORS,
      error);
  if (s->pipeline == NULL)
    return FALSE;
  gst_object_ref_sink (s->pipeline);

  s->webrtc = gst_bin_get_by_name (GST_BIN (s->pipeline), "webrtc");
  s->control_src = gst_bin_get_by_name (GST_BIN (s->pipeline), "control");
  {
    GstElement *pay = gst_bin_get_by_name (GST_BIN (s->pipeline), "pay");
    s->pay_src = gst_element_get_static_pad (pay, "src");
    gst_object_unref (pay);
  }
  gen = gst_bin_get_by_name (GST_BIN (s->pipeline), "gen");
  if (gen) {
    gboolean ok = set_gen_properties (server, gen, error);

    gst_object_unref (gen);
    if (!ok)
      return FALSE;
  }

  if (server->ice_loopback) {
    g_object_get (s->webrtc, "ice-agent", &ice, NULL);
    if (ice && g_signal_lookup ("add-local-ip-address", G_OBJECT_TYPE (ice))) {
      gboolean ok = FALSE;

      g_signal_emit_by_name (ice, "add-local-ip-address", "127.0.0.1", &ok);
      if (!ok)
        g_message ("session %u: could not restrict ICE to 127.0.0.1", s->id);
    }
    g_clear_object (&ice);
  }

  gst_pad_add_probe (s->pay_src, GST_PAD_PROBE_TYPE_BUFFER |
      GST_PAD_PROBE_TYPE_BUFFER_LIST, pay_probe, session_ref (s),
      (GDestroyNotify) session_unref);
  g_signal_connect_data (s->webrtc, "on-negotiation-needed",
      G_CALLBACK (on_negotiation_needed), session_ref (s),
      session_unref_closure, 0);
  g_signal_connect_data (s->webrtc, "on-ice-candidate",
      G_CALLBACK (on_ice_candidate), session_ref (s),
      session_unref_closure, 0);
  g_signal_connect_data (s->webrtc, "notify::ice-connection-state",
      G_CALLBACK (on_ice_state), session_ref (s), session_unref_closure, 0);

  bus = gst_element_get_bus (s->pipeline);
  s->bus_watch = gst_bus_add_watch (bus, on_bus_message, s);

  /* data channels are created in READY, before the offer (as webrtcsink) */
  if (gst_element_set_state (s->pipeline, GST_STATE_READY) ==
      GST_STATE_CHANGE_FAILURE) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
        "the session pipeline cannot start");
    return FALSE;
  }
  s->input = create_channel (s, LABEL_INPUT);
  s->control = create_channel (s, LABEL_CONTROL);
  if (!s->input || !s->control) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
        "webrtcbin created no data channel");
    return FALSE;
  }
  if (gst_element_set_state (s->pipeline, GST_STATE_PLAYING) ==
      GST_STATE_CHANGE_FAILURE) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
        "the session pipeline cannot start (model, image or devices?)");
    return FALSE;
  }
  return TRUE;
}

/* ------------------------------------------------------------------ */
/* signalling messages from the browser                               */
/* ------------------------------------------------------------------ */

static void
on_answer_set (GstPromise * promise, gpointer user_data)
{
  gst_promise_unref (promise);
}

static gboolean
handle_answer (Session * s, JsonObject * o, const char **why)
{
  const char *sdp_text = json_object_get_string_member_with_default (o, "sdp",
      NULL);
  GstSDPMessage *sdp = NULL;
  GstWebRTCSessionDescription *answer;

  if (!s->offered || s->answered || sdp_text == NULL) {
    *why = !s->offered ? "answer before the offer" : s->answered ?
        "a second answer" : "answer without \"sdp\"";
    return FALSE;
  }
  /* the SDP parser accepts about anything: ask for a media section */
  if (gst_sdp_message_new_from_text (sdp_text, &sdp) != GST_SDP_OK
      || gst_sdp_message_medias_len (sdp) == 0) {
    if (sdp)
      gst_sdp_message_free (sdp);
    *why = "unusable SDP";
    return FALSE;
  }
  s->answered = TRUE;
  answer = gst_webrtc_session_description_new (GST_WEBRTC_SDP_TYPE_ANSWER,
      sdp);
  g_signal_emit_by_name (s->webrtc, "set-remote-description", answer,
      gst_promise_new_with_change_func (on_answer_set, NULL, NULL));
  gst_webrtc_session_description_free (answer);
  return TRUE;
}

/* "candidate:F C proto prio ADDRESS port typ ..." with ADDRESS a .local name */
static gboolean
candidate_is_mdns (const char *candidate)
{
  g_auto (GStrv) fields = g_strsplit_set (candidate, " \t", 7);
  const char *address;
  gsize len;

  if (g_strv_length (fields) < 6)
    return FALSE;
  address = fields[4];
  len = strlen (address);
  if (len > 0 && address[len - 1] == '.')       /* fully qualified */
    len--;
  return len > 6 && g_ascii_strncasecmp (address + len - 6, ".local", 6) == 0;
}

static gboolean
handle_ice (Session * s, JsonObject * o, const char **why)
{
  const char *candidate =
      json_object_get_string_member_with_default (o, "candidate", NULL);
  gint64 mline = -1;

  if (!get_int_member (o, "sdpMLineIndex", &mline) || mline < 0
      || mline > 64) {
    *why = "ice without a valid \"sdpMLineIndex\"";
    return FALSE;
  }
  if (candidate == NULL) {
    *why = "ice without \"candidate\"";
    return FALSE;
  }
  if (candidate[0] == '\0')     /* end of candidates */
    return TRUE;
  /* Browsers hide their host addresses behind mDNS names
   * (<uuid>.local).  With ICE on 127.0.0.1 only the browser runs on this
   * host: it reaches our 127.0.0.1 candidates, and its checks teach webrtcbin
   * a peer-reflexive candidate, so the name is not needed; resolving it would
   * only try DNS for a name that no DNS server knows and log an ERROR.  On
   * other interfaces the candidate goes on to webrtcbin, which resolves it
   * where the system can (nss-mdns) and otherwise relies on peer-reflexive
   * discovery as well. */
  if (s->server->ice_loopback && candidate_is_mdns (candidate)) {
    g_atomic_int_inc (&s->server->n_mdns_ignored);
    if (s->mdns_ignored++ == 0)
      g_message ("session %u: ignoring the browser's mDNS (.local) "
          "candidates, ICE on 127.0.0.1 relies on peer-reflexive discovery",
          s->id);
    return TRUE;
  }
  g_signal_emit_by_name (s->webrtc, "add-ice-candidate", (guint) mline,
      candidate);
  return TRUE;
}

static void
on_ws_message (SoupWebsocketConnection * ws, gint type, GBytes * message,
    gpointer user_data)
{
  Session *s = user_data;
  LingbotWebrtcServer *server = s->server;
  g_autoptr (JsonParser) parser = NULL;
  g_autoptr (GError) err = NULL;
  const char *data, *kind, *why = NULL;
  gsize len;
  JsonNode *root;
  JsonObject *o;

  if (s->closed)
    return;
  data = g_bytes_get_data (message, &len);
  if (type != SOUP_WEBSOCKET_DATA_TEXT) {
    note_drop (server, s->id, "signalling", "binary", len);
    return;
  }
  if (len > server->max_message_size) {
    note_drop (server, s->id, "signalling", "too big", len);
    return;
  }
  parser = json_parser_new ();
  if (!json_parser_load_from_data (parser, data, (gssize) len, &err)) {
    note_drop (server, s->id, "signalling", err->message, len);
    return;
  }
  root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root)) {
    note_drop (server, s->id, "signalling", "not a JSON object", len);
    return;
  }
  o = json_node_get_object (root);
  kind = json_object_get_string_member_with_default (o, "type", "");

  if (strcmp (kind, "answer") == 0) {
    if (!handle_answer (s, o, &why))
      note_drop (server, s->id, "signalling", why, len);
  } else if (strcmp (kind, "ice") == 0) {
    if (!handle_ice (s, o, &why))
      note_drop (server, s->id, "signalling", why, len);
  } else if (strcmp (kind, "bye") == 0) {
    session_close (s, "bye from the client");
  } else {
    note_drop (server, s->id, "signalling", "unknown message type", len);
  }
}

static void
on_ws_closed (SoupWebsocketConnection * ws, gpointer user_data)
{
  session_close (user_data, "WebSocket closed");
}

static void
send_welcome (Session * s)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autofree char *text = NULL;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, "welcome");
  json_builder_set_member_name (b, "session");
  json_builder_add_int_value (b, s->id);
  json_builder_set_member_name (b, "encoder");
  json_builder_add_string_value (b, s->server->encoder);
  json_builder_set_member_name (b, "max-message-size");
  json_builder_add_int_value (b, (gint64) s->server->max_message_size);
  json_builder_end_object (b);
  text = builder_to_string (b);
  ws_send (s, text);
}

static void
ws_refused_closed (SoupWebsocketConnection * ws, gpointer user_data)
{
  g_object_unref (ws);
}

static void
on_websocket (SoupServer * soup, SoupServerMessage * msg, const char *path,
    SoupWebsocketConnection * ws, gpointer user_data)
{
  LingbotWebrtcServer *server = user_data;
  g_autoptr (GError) err = NULL;
  Session *s;

  soup_websocket_connection_set_max_incoming_payload_size (ws,
      LINGBOT_WEBRTC_WS_HARD_LIMIT);

  if (g_hash_table_size (server->sessions) >= server->max_sessions) {
    g_autofree char *text = g_strdup_printf ("the server is busy: %u of %u "
        "sessions in use, try again later",
        g_hash_table_size (server->sessions), server->max_sessions);

    g_message ("refused a session: %s", text);
    g_object_ref (ws);
    g_signal_connect (ws, "closed", G_CALLBACK (ws_refused_closed), NULL);
    ws_send_error (ws, "busy", text);
    soup_websocket_connection_close (ws, LINGBOT_WEBRTC_CLOSE_BUSY, "busy");
    return;
  }

  s = g_new0 (Session, 1);
  s->refs = 1;                  /* the table's */
  s->server = server;
  s->id = ++server->next_id;
  s->last_chunk = -1;
  g_mutex_init (&s->lock);
  g_queue_init (&s->pending_keys);
  g_queue_init (&s->pending_echo);
  s->ws = g_object_ref (ws);
  g_hash_table_insert (server->sessions, GUINT_TO_POINTER (s->id), s);
  g_message ("session %u: opened (%u of %u)", s->id,
      g_hash_table_size (server->sessions), server->max_sessions);

  s->ws_message_id = g_signal_connect (ws, "message",
      G_CALLBACK (on_ws_message), s);
  s->ws_closed_id = g_signal_connect (ws, "closed",
      G_CALLBACK (on_ws_closed), s);
  send_welcome (s);

  if (!session_build (s, &err))
    session_fail (s, "pipeline", err->message);
}

/* ------------------------------------------------------------------ */
/* static files                                                       */
/* ------------------------------------------------------------------ */

char *
lingbot_webrtc_resolve_path (const char *root, const char *path,
    guint * status)
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
  if (g_str_has_suffix (file, ".html"))
    return "text/html; charset=utf-8";
  if (g_str_has_suffix (file, ".js"))
    return "text/javascript; charset=utf-8";
  if (g_str_has_suffix (file, ".css"))
    return "text/css; charset=utf-8";
  if (g_str_has_suffix (file, ".json"))
    return "application/json";
  if (g_str_has_suffix (file, ".svg"))
    return "image/svg+xml";
  return "application/octet-stream";
}

static void
on_http (SoupServer * soup, SoupServerMessage * msg, const char *path,
    GHashTable * query, gpointer user_data)
{
  LingbotWebrtcServer *server = user_data;
  const char *method = soup_server_message_get_method (msg);
  GUri *uri = soup_server_message_get_uri (msg);
  g_autofree char *file = NULL;
  g_autofree char *contents = NULL;
  gsize len = 0;
  guint status = 404;

  if (strcmp (method, "GET") != 0 && strcmp (method, "HEAD") != 0) {
    soup_server_message_set_status (msg, SOUP_STATUS_METHOD_NOT_ALLOWED,
        NULL);
    return;
  }
  /* the raw (still percent-encoded) path, not libsoup's decoded one */
  file = lingbot_webrtc_resolve_path (server->www_dir,
      uri ? g_uri_get_path (uri) : path, &status);
  if (file == NULL || !g_file_get_contents (file, &contents, &len, NULL)) {
    g_message ("http: %s %s -> %u", method, uri ? g_uri_get_path (uri) :
        path, status == 200 ? 404 : status);
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

LingbotWebrtcServer *
lingbot_webrtc_server_new (const LingbotWebrtcConfig * cfg, GError ** error)
{
  g_autoptr (LingbotWebrtcServer) server = g_new0 (LingbotWebrtcServer, 1);
  g_autoptr (GInetAddress) inet = NULL;
  g_autoptr (GSocketAddress) addr = NULL;
  GSList *uris;
  const char *needed[] = { "webrtcbin", "videoconvert", "queue", NULL };

  server->context = g_main_context_ref_thread_default ();
  server->sessions = g_hash_table_new_full (NULL, NULL, NULL,
      session_table_unref);
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

  server->soup = soup_server_new ("server-header", "lingbot-webrtc ", NULL);
  soup_server_add_handler (server->soup, NULL, on_http, server, NULL);
  soup_server_add_websocket_handler (server->soup, WS_PATH, NULL, NULL,
      on_websocket, server, NULL);
  if (!soup_server_listen (server->soup, addr, 0, error))
    return NULL;
  uris = soup_server_get_uris (server->soup);
  if (uris)
    server->port = (guint) g_uri_get_port (uris->data);
  g_slist_free_full (uris, (GDestroyNotify) g_uri_unref);
  g_message ("listening on http://%s:%u/ (page %s, encoder %s, at most %u "
      "session%s%s)", server->address, server->port, server->www_dir,
      server->encoder, server->max_sessions,
      server->max_sessions == 1 ? "" : "s",
      server->ice_loopback ? ", ICE on 127.0.0.1" : "");
  return g_steal_pointer (&server);
}

guint
lingbot_webrtc_server_get_port (LingbotWebrtcServer * server)
{
  return server->port;
}

guint
lingbot_webrtc_server_get_n_sessions (LingbotWebrtcServer * server)
{
  return g_hash_table_size (server->sessions);
}

guint
lingbot_webrtc_server_get_n_dropped (LingbotWebrtcServer * server)
{
  return (guint) g_atomic_int_get (&server->n_dropped);
}

guint
lingbot_webrtc_server_get_n_mdns_ignored (LingbotWebrtcServer * server)
{
  return (guint) g_atomic_int_get (&server->n_mdns_ignored);
}

void
lingbot_webrtc_server_free (LingbotWebrtcServer * server)
{
  if (server == NULL)
    return;
  if (server->sessions) {
    GList *all = g_hash_table_get_values (server->sessions);

    for (GList * l = all; l; l = l->next)
      session_close (l->data, "server shutting down");
    g_list_free (all);
    g_hash_table_unref (server->sessions);
  }
  if (server->soup) {
    soup_server_disconnect (server->soup);
    g_object_unref (server->soup);
  }
  g_free (server->www_dir);
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

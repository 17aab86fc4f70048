/* lingbot-gst: the WebRTC sender's session room
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A Session is one running world: its pipeline
 * `SOURCE ! videoconvert ! queue ! ENCODER ! PAY ! tee`, its bus
 * (progress, chunk metrics, errors), the key echo (which chunk first used
 * a key press) and its life: opened, kept for a reload, closed.  See
 * webrtc-server-private.h.
 */
#define GST_USE_UNSTABLE_API 1

#include <string.h>
#include <sys/random.h>
#include <gst/gst.h>
#include <gst/rtp/gstrtpbuffer.h>
#include <gst/video/video.h>

#include "webrtc-server-private.h"

/* periodic keyframes as a safety net; joiners and PLI/FIR force one */
#define KEY_INTERVAL 64

/* ------------------------------------------------------------------ */
/* sessions: references, key stamps, sending                          */
/* ------------------------------------------------------------------ */

void
session_key_stamp_free (KeyStamp * k)
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
  g_queue_clear_full (&s->pending_keys,
      (GDestroyNotify) session_key_stamp_free);
  g_queue_clear_full (&s->pending_echo, (GDestroyNotify) echo_free);
  g_mutex_clear (&s->lock);
  g_main_context_unref (s->context);
}

void
session_unref (Session * s)
{
  g_atomic_rc_box_release_full (s, (GDestroyNotify) session_clear);
}

static void
make_token (LingbotWebrtcServer * server, char *out, gsize size)
{
  guint8 raw[16];
  gsize at = 0;

  if (server->server_id)
    at = g_snprintf (out, size, "%s-", server->server_id);
  out += at;

  if (getrandom (raw, sizeof raw, 0) != (ssize_t) sizeof raw)
    for (guint i = 0; i < sizeof raw; i++)
      raw[i] = (guint8) g_random_int ();
  for (guint i = 0; i < sizeof raw; i++)
    g_snprintf (out + 2 * i, 3, "%02x", raw[i]);
}

static void
session_broadcast (Session * s, const char *text)
{
  for (GList * l = s->peers; l; l = l->next)
    peer_control_send (l->data, text);
}

void
session_send_navigation (Session * s, GstEvent * event)
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

/* While the world waits for a key, its last frame (the preview still
 * before the first chunk) went by before this peer's transport was up: a
 * force-key-unit sent upstream from the world's src pad has lingbotgen
 * send it again (lingbot-repeat; nothing while a chunk is made, whose
 * frames come anyway, or with --source). */
void
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

/* ------------------------------------------------------------------ */
/* key echo: which chunk first used a key press                       */
/* ------------------------------------------------------------------ */

static void
send_echo (Session * s, Echo * e)
{
  g_autoptr (JsonBuilder) b = server_message_new ("key-echo");
  g_autofree char *text = NULL;

  server_put_int (b, "id", e->id);
  server_put_string (b, "key", e->name);
  server_put_int (b, "chunk", (gint64) e->chunk);
  server_put_int (b, "first-frame", (gint64) e->first_frame);
  server_put_int (b, "rtp-timestamp", e->rtp_ts);
  server_put_double (b, "server-ms", e->server_ms);
  text = server_message_finish (b);
  g_debug ("session %u: %s", s->id, text);
  if (s->active)
    peer_control_send (s->active, text);
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
  g_autoptr (JsonBuilder) b = server_message_new (type);
  g_autofree char *text = NULL;

  server_put_int (b, "chunk", chunk);
  if (k1)
    server_put_int (b, k1, v1);
  if (k2)
    server_put_int (b, k2, v2);
  if (keys)
    server_put_string (b, "keys", keys);
  text = server_message_finish (b);
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
      session_key_stamp_free (k);
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

  b = server_message_new ("chunk");
  server_put_int (b, "index", (gint64) index);
  server_put_int (b, "frames", frames);
  server_put_int (b, "first-frame", (gint64) first_frame);
  server_put_string (b, "keys", keys);
  server_put_double (b, "dit-seconds", dit);
  server_put_double (b, "generate-seconds", generate);
  server_put_double (b, "vae-seconds", vae);
  server_put_double (b, "compute-seconds", compute);
  server_put_double (b, "compute-fps", compute > 0 ? frames / compute : 0.0);
  text = server_message_finish (b);
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
  /* the pipeline is stopped: its devices are free for the next session,
   * and the group gets a new world */
  groups_release (server, s);
  groups_session_ended (server, s);
  /* drops the table's reference */
  g_hash_table_remove (server->sessions, GUINT_TO_POINTER (s->id));
}

void
session_close (Session * s, const char *reason)
{
  session_end (s, reason, SOUP_WEBSOCKET_CLOSE_NORMAL, NULL, NULL);
}

/* a fatal session error: every peer is told, then the session ends */
void
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
void
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
set_gen_properties (LingbotWebrtcServer * server, Session * s,
    GstElement * gen, GError ** error)
{
  GObjectClass *klass = G_OBJECT_GET_CLASS (gen);
  const struct
  {
    const char *name;
    const char *value;
  } props[] = {
    {"model-path", server->model}, {"image-location", server->image},
    {"prompt", server->prompt}, {"prompt-embeds", server->prompt_embeds},
    {"devices", groups_devices (server, s)}, {"is-live", "true"},
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

char *
session_description (LingbotWebrtcServer * server, const Encoder * enc)
{
  g_autofree char *chain = g_strdup_printf (enc->chain, KEY_INTERVAL);

  /* paced here, before the tee: webrtcbin (1.22) syncs each branch to the
   * clock, and a branch linked later must not find the stream ahead of it
   * (a generator faster than real time would otherwise run ahead, and a
   * reloaded page would wait for its first frame as long) */
  return g_strdup_printf ("%s ! videoconvert ! video/x-raw,format=I420 "
      "! queue max-size-buffers=64 max-size-bytes=0 max-size-time=0 "
      "! clocksync name=pace ! %s ! %s ! tee name=out allow-not-linked=true",
      server->source ? server->source :
      "lingbotcontrolsrc name=control is-live=true ! lingbotbin name=world",
      chain, enc->rtp_caps);
}

gboolean
session_build (Session * s, GError ** error)
{
  LingbotWebrtcServer *server = s->server;
  g_autofree char *desc = session_description (server, s->enc);
  g_autoptr (GstBus) bus = NULL;
  GstElement *world, *pay, *enc;

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
    gboolean ok = set_gen_properties (server, s, world, error);

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
    /* the element that refused posted why (a model that does not load, a
     * size lingbotgen refuses, devices it cannot open): say that */
    g_autoptr (GstMessage) m = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
    g_autoptr (GError) why = NULL;

    if (m)
      gst_message_parse_error (m, &why, NULL);
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
        "the session pipeline cannot start: %s", why ? why->message :
        "no element said why (model, image or devices?)");
    return FALSE;
  }
  return TRUE;
}

Session *
session_new (LingbotWebrtcServer * server, gint group)
{
  Session *s = g_atomic_rc_box_new0 (Session);  /* the table's */

  s->server = server;
  s->context = g_main_context_ref (server->context);
  s->leaving = g_ptr_array_new_with_free_func (gst_object_unref);
  s->id = ++server->next_session;
  /* the caller checked that a slot is free: with groups, one of them */
  groups_take (server, s, group);
  s->enc = server_find_encoder (server->encoder);
  s->max_message = server->max_message_size;
  s->last_chunk = -1;
  s->waiting_chunk = -1;
  s->last_decoded = -1;
  s->state = "starting";
  s->state_chunk = 0;
  for (guint i = 0; i < CHUNK_RING; i++)
    s->ring[i].index = -1;
  make_token (server, s->token, sizeof s->token);
  g_mutex_init (&s->lock);
  g_queue_init (&s->pending_keys);
  g_queue_init (&s->pending_echo);
  g_hash_table_insert (server->sessions, GUINT_TO_POINTER (s->id), s);
  g_atomic_int_inc (&server->n_sessions);
  return s;
}

Session *
session_by_token (LingbotWebrtcServer * server, const char *token)
{
  GHashTableIter it;
  gpointer value;

  if (token == NULL || strlen (token) < 32)
    return NULL;
  g_hash_table_iter_init (&it, server->sessions);
  while (g_hash_table_iter_next (&it, NULL, &value)) {
    Session *s = value;

    if (!s->closed && strcmp (s->token, token) == 0)
      return s;
  }
  return NULL;
}

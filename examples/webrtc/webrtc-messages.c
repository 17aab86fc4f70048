/* lingbot-gst: the checks of the browser's messages (WebRTC example)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * See webrtc-messages.h.  Nothing here touches a peer, a session or a
 * socket: the functions are pure checks of what arrived.
 */
#include <string.h>

#include "lingbot/control.h"
#include "webrtc-messages.h"

/* a member of the given JSON type, or NULL / FALSE: never trust a type */
static const char *
member_string (JsonObject * o, const char *name)
{
  JsonNode *n = json_object_get_member (o, name);

  if (!n || !JSON_NODE_HOLDS_VALUE (n)
      || json_node_get_value_type (n) != G_TYPE_STRING)
    return NULL;
  return json_node_get_string (n);
}

static gboolean
member_int (JsonObject * o, const char *name, gint64 * out)
{
  JsonNode *n = json_object_get_member (o, name);

  if (!n || !JSON_NODE_HOLDS_VALUE (n)
      || json_node_get_value_type (n) != G_TYPE_INT64)
    return FALSE;
  *out = json_node_get_int (n);
  return TRUE;
}

static JsonObject *
member_object (JsonObject * o, const char *name)
{
  JsonNode *n = json_object_get_member (o, name);

  return n && JSON_NODE_HOLDS_OBJECT (n) ? json_node_get_object (n) : NULL;
}

/**
 * lingbot_webrtc_parse_object:
 * @data: the message's bytes (UTF-8 JSON text, not NUL-terminated)
 * @len: how many
 * @out: (out) (transfer none): the root object, valid as long as the
 *   returned parser
 * @why: (out) (transfer full): on failure, the reason for the error reply:
 *   "not JSON (json-glib's message)" or "not a JSON object"
 *
 * Parses a message that must be a JSON object.  When json-glib fails
 * without a GError, the reason is "not JSON (the JSON parser gave no
 * reason)".
 *
 * Returns: (transfer full) (nullable): the parser, or %NULL with *@why set
 */
JsonParser *
lingbot_webrtc_parse_object (const char *data, gsize len, JsonObject ** out,
    char **why)
{
  JsonParser *parser = json_parser_new ();
  g_autoptr (GError) err = NULL;
  JsonNode *root;

  if (!json_parser_load_from_data (parser, data, (gssize) len, &err)) {
    /* json-glib's failure paths set one, but a NULL here must not crash
     * the server: a GError of our own then */
    if (err == NULL)
      g_set_error_literal (&err, JSON_PARSER_ERROR,
          JSON_PARSER_ERROR_INVALID_DATA, "the JSON parser gave no reason");
    *why = g_strdup_printf ("not JSON (%s)", err->message);
    g_object_unref (parser);
    return NULL;
  }
  root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root)) {
    *why = g_strdup ("not a JSON object");
    g_object_unref (parser);
    return NULL;
  }
  *out = json_node_get_object (root);
  return parser;
}

/* ---- signalling ---- */

/* the browser cannot take the codec: its answer rejects the video section
 * (port 0) or leaves our payload type out */
static const char *
answer_codec_problem (GstSDPMessage * sdp, guint pt, gboolean * has_video)
{
  g_autofree char *pt_str = g_strdup_printf ("%u", pt);

  *has_video = FALSE;
  for (guint i = 0; i < gst_sdp_message_medias_len (sdp); i++) {
    const GstSDPMedia *m = gst_sdp_message_get_media (sdp, i);

    if (g_strcmp0 (gst_sdp_media_get_media (m), "video") != 0)
      continue;
    *has_video = TRUE;
    if (gst_sdp_media_get_port (m) == 0)
      return "rejects the video";
    for (guint f = 0; f < gst_sdp_media_formats_len (m); f++)
      if (g_strcmp0 (gst_sdp_media_get_format (m, f), pt_str) == 0)
        return NULL;
    return "has no payload type of the offered codec";
  }
  return NULL;
}

/* an answer's SDP: parsed, with a media section, or NULL (the SDP parser
 * accepts about anything but asserts on an empty text) */
static GstSDPMessage *
parse_answer_sdp (const char *sdp_text)
{
  GstSDPMessage *sdp = NULL;

  if (sdp_text[0] == '\0')
    return NULL;
  if (gst_sdp_message_new_from_text (sdp_text, &sdp) != GST_SDP_OK
      || gst_sdp_message_medias_len (sdp) == 0) {
    if (sdp)
      gst_sdp_message_free (sdp);
    return NULL;
  }
  return sdp;
}

static void
signal_drop (LingbotWebrtcSignal * sig, const char *why)
{
  sig->verdict = LINGBOT_WEBRTC_SIGNAL_DROP;
  sig->why = g_strdup (why);
}

static void
check_answer (LingbotWebrtcSignal * sig, JsonObject * o)
{
  const char *sdp_text = member_string (o, "sdp");
  GstSDPMessage *sdp;
  const char *problem;
  gboolean has_video;

  if (sdp_text == NULL) {
    signal_drop (sig, "answer without an \"sdp\" string");
    return;
  }
  if (!sig->offered || sig->answered) {
    signal_drop (sig, !sig->offered ? "answer before the offer" :
        "a second answer (no renegotiation)");
    return;
  }
  sdp = parse_answer_sdp (sdp_text);
  if (sdp == NULL) {
    signal_drop (sig, "unusable SDP (no media section)");
    return;
  }
  problem = answer_codec_problem (sdp, sig->pt, &has_video);
  if (!has_video) {
    gst_sdp_message_free (sdp);
    signal_drop (sig, "answer without a video section");
    return;
  }
  if (problem) {
    gst_sdp_message_free (sdp);
    sig->verdict = LINGBOT_WEBRTC_SIGNAL_CODEC;
    sig->why = g_strdup_printf ("the browser's answer %s: it cannot decode "
        "%s (the server's --encoder %s)%s", problem, sig->codec, sig->encoder,
        g_strcmp0 (sig->codec, "VP8") == 0 ? "" :
        "; try a browser with H.264, or --encoder vp8");
    return;
  }
  sig->verdict = LINGBOT_WEBRTC_SIGNAL_ANSWER;
  sig->sdp = sdp;
}

/**
 * lingbot_webrtc_candidate_is_mdns:
 * @candidate: an ICE candidate line, "candidate:F C proto prio ADDRESS
 *   port typ ..."
 *
 * Returns: whether ADDRESS is an mDNS name (ends in ".local", with or
 *   without the final dot)
 */
gboolean
lingbot_webrtc_candidate_is_mdns (const char *candidate)
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

static void
check_ice (LingbotWebrtcSignal * sig, JsonObject * o)
{
  const char *candidate = member_string (o, "candidate");
  gint64 mline = -1;

  if (!member_int (o, "sdpMLineIndex", &mline) || mline < 0 || mline > 64) {
    signal_drop (sig, "ice without a valid \"sdpMLineIndex\"");
    return;
  }
  if (candidate == NULL) {
    signal_drop (sig, "ice without a \"candidate\" string");
    return;
  }
  if (candidate[0] == '\0') {   /* end of candidates */
    sig->verdict = LINGBOT_WEBRTC_SIGNAL_ICE_END;
    return;
  }
  if (strlen (candidate) > LINGBOT_WEBRTC_MAX_CANDIDATE
      || !g_str_has_prefix (candidate, "candidate:")) {
    signal_drop (sig, "not an ICE candidate line");
    return;
  }
  if (sig->ice_loopback && lingbot_webrtc_candidate_is_mdns (candidate)) {
    sig->verdict = LINGBOT_WEBRTC_SIGNAL_MDNS;
    return;
  }
  sig->verdict = LINGBOT_WEBRTC_SIGNAL_ICE;
  sig->candidate = g_strdup (candidate);
  sig->mline = (guint) mline;
}

/**
 * lingbot_webrtc_check_signal:
 * @sig: the peer's state in, the verdict out (lingbot_webrtc_signal_clear()
 *   it after)
 * @binary: it came in a binary frame
 * @data: the message's bytes (all its fragments)
 * @len: how many
 *
 * The checks of a signalling message, in order: text, at most
 * @sig->max_message bytes, a JSON object with a string "type"; then per
 * type: "answer" (a string "sdp", after the offer and only once, an SDP
 * with a media section and a video section that takes @sig->pt), "ice" (an
 * integer "sdpMLineIndex" in 0..64, a string "candidate": empty, or
 * "candidate:..." of at most %LINGBOT_WEBRTC_MAX_CANDIDATE bytes), "bye".
 * Anything else is a DROP with the reason the error reply gives.
 */
void
lingbot_webrtc_check_signal (LingbotWebrtcSignal * sig, gboolean binary,
    const char *data, gsize len)
{
  g_autoptr (JsonParser) parser = NULL;
  g_autofree char *why = NULL;
  JsonObject *o = NULL;
  const char *kind;

  sig->verdict = LINGBOT_WEBRTC_SIGNAL_DROP;
  if (binary) {
    signal_drop (sig, "binary message (JSON text expected)");
    return;
  }
  if (len > sig->max_message) {
    signal_drop (sig, "too big");
    return;
  }
  parser = lingbot_webrtc_parse_object (data, len, &o, &why);
  if (parser == NULL) {
    sig->why = g_steal_pointer (&why);
    return;
  }
  kind = member_string (o, "type");
  if (kind == NULL)
    signal_drop (sig, "no \"type\" string");
  else if (strcmp (kind, "answer") == 0)
    check_answer (sig, o);
  else if (strcmp (kind, "ice") == 0)
    check_ice (sig, o);
  else if (strcmp (kind, "bye") == 0)
    sig->verdict = LINGBOT_WEBRTC_SIGNAL_BYE;
  else if (strcmp (kind, "offer") == 0)
    signal_drop (sig, "the server makes the offer: send an \"answer\"");
  else
    signal_drop (sig, "unknown message type");
}

/**
 * lingbot_webrtc_signal_clear:
 * @sig: a verdict of lingbot_webrtc_check_signal()
 *
 * Frees what the verdict holds (the reason, the SDP unless stolen, the
 * candidate); the state fields stay.
 */
void
lingbot_webrtc_signal_clear (LingbotWebrtcSignal * sig)
{
  g_clear_pointer (&sig->why, g_free);
  g_clear_pointer (&sig->sdp, gst_sdp_message_free);
  g_clear_pointer (&sig->candidate, g_free);
}

/* ---- data channels ---- */

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

/* one navigation event object: the webrtcsink "input" form
 * {"event":"KeyPress","key":"ArrowUp","modifier_state":"..."}; FALSE with
 * in->why set when it is refused */
static gboolean
check_navigation (LingbotWebrtcInput * in, JsonObject * o)
{
  const char *event, *key;
  gboolean press;

  event = member_string (o, "event");
  if (event == NULL) {
    in->why = g_strdup ("no \"event\" string");
    return FALSE;
  }
  if (g_str_has_prefix (event, "Mouse") || g_str_has_prefix (event, "Touch")) {
    in->verdict = LINGBOT_WEBRTC_INPUT_IGNORE;
    in->event = g_strdup (event);
    return TRUE;
  }
  if (strcmp (event, "KeyPress") == 0)
    press = TRUE;
  else if (strcmp (event, "KeyRelease") == 0)
    press = FALSE;
  else {
    in->why = g_strdup ("unknown navigation event");
    return FALSE;
  }
  key = member_string (o, "key");
  if (key == NULL || key[0] == '\0'
      || strlen (key) > LINGBOT_WEBRTC_MAX_KEY_NAME
      || !g_utf8_validate (key, -1, NULL)) {
    in->why = g_strdup ("no valid \"key\" string");
    return FALSE;
  }
  key = normalize_key (key);
  if (!in->viewer) {
    in->why = g_strdup ("keys from a connection that is not the session's "
        "viewer");
    return FALSE;
  }
  /* a key the world has no use for (Shift, Tab, ...: gstwebrtc-api sends
   * every key the user presses) is ignored as a mouse event is: nothing
   * upstream, no error reply for a legitimate press */
  if (lingbot_key_from_name (key) == 0) {
    in->verdict = LINGBOT_WEBRTC_INPUT_IGNORE;
    in->event = g_strdup (event);
    return TRUE;
  }
  in->verdict = LINGBOT_WEBRTC_INPUT_KEY;
  in->event = g_strdup (event);
  in->press = press;
  in->key = g_strdup (key);
  in->key_bit = lingbot_key_from_name (key);
  return TRUE;
}

/**
 * lingbot_webrtc_check_input:
 * @in: the peer's state in, the verdict out (lingbot_webrtc_input_clear()
 *   it after)
 * @binary: a binary message
 * @text: (nullable): the text (@size bytes, NUL-terminated after them), or
 *   %NULL when it was above the size limit and not copied
 * @size: the message's size (bytes)
 *
 * The checks of a data-channel message, in order: text, under the limit,
 * a JSON object; then either gstwebrtc-api's request
 * `{"id":N,"request":{"type":"navigationEvent","event":{...}}}` (on either
 * channel) or, on "input" only, a bare navigation event.  A navigation
 * event is a string "event": Mouse* and Touch* are ignored, KeyPress and
 * KeyRelease need a valid UTF-8 string "key" of 1 to
 * %LINGBOT_WEBRTC_MAX_KEY_NAME bytes and a peer that is the viewer; a key
 * that is none of the world's keys (lingbot_key_from_name(), after the X
 * keysym arrows are mapped) is ignored as Mouse* are.  An "id" member must
 * be an integer; it is reported whatever the verdict.
 */
void
lingbot_webrtc_check_input (LingbotWebrtcInput * in, gboolean binary,
    const char *text, gsize size)
{
  g_autoptr (JsonParser) parser = NULL;
  g_autofree char *bad = NULL;
  JsonObject *o = NULL, *req, *event;

  in->verdict = LINGBOT_WEBRTC_INPUT_DROP;
  in->has_id = FALSE;
  if (binary) {
    in->why = g_strdup ("binary message (JSON text expected)");
    return;
  }
  if (text == NULL) {
    in->why = g_strdup ("too big");
    return;
  }
  parser = lingbot_webrtc_parse_object (text, size, &o, &bad);
  if (parser == NULL) {
    in->why = g_steal_pointer (&bad);
    return;
  }
  in->has_id = member_int (o, "id", &in->id);
  if (!in->has_id && json_object_has_member (o, "id")) {
    in->why = g_strdup ("\"id\" is not an integer");
    return;
  }

  /* gstwebrtc-api's control request */
  if (json_object_has_member (o, "request")) {
    const char *type;

    req = member_object (o, "request");
    type = req ? member_string (req, "type") : NULL;
    event = req ? member_object (req, "event") : NULL;
    if (req == NULL)
      in->why = g_strdup ("\"request\" is not an object");
    else if (type == NULL)
      in->why = g_strdup ("request without a \"type\" string");
    else if (strcmp (type, "navigationEvent") != 0)
      in->why = g_strdup ("unknown request type");
    else if (event == NULL)
      in->why = g_strdup ("navigationEvent without an \"event\" object");
    else
      check_navigation (in, event);
    return;
  }
  if (in->control) {
    in->why = g_strdup (member_string (o, "type") ? "unknown message type" :
        "no \"request\" object");
    return;
  }
  check_navigation (in, o);
}

/**
 * lingbot_webrtc_input_clear:
 * @in: a verdict of lingbot_webrtc_check_input()
 *
 * Frees what the verdict holds; the state fields stay.
 */
void
lingbot_webrtc_input_clear (LingbotWebrtcInput * in)
{
  g_clear_pointer (&in->why, g_free);
  g_clear_pointer (&in->event, g_free);
  g_clear_pointer (&in->key, g_free);
}

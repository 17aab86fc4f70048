/* lingbot-gst: fuzz harness of the WebRTC example's message parsers
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * examples/webrtc/webrtc-server.c is compiled into this harness (its
 * parsers are static): the input is one text message, taken through the
 * same parse and checks as the server, without a peer to act on.
 *   FUZZ_WEBRTC_CHANNEL=0  a signalling message (on_ws_message): type,
 *                          then an answer's SDP (parse_answer_sdp() and
 *                          answer_codec_problem()) or an ice candidate
 *   FUZZ_WEBRTC_CHANNEL=1  a data-channel message (handle_channel_message):
 *                          the gstwebrtc-api request or a bare navigation
 *                          event, its key name through normalize_key() and
 *                          lingbot_key_from_name()
 */
#include "examples/webrtc/webrtc-server.c"

#include "fuzz-common.h"

#ifndef FUZZ_WEBRTC_CHANNEL
#error FUZZ_WEBRTC_CHANNEL must be 0 or 1
#endif

static void
fuzz_signalling (JsonObject * o)
{
  const char *kind = member_string (o, "type");

  if (kind == NULL)
    return;
  if (strcmp (kind, "answer") == 0) {
    const char *sdp_text = member_string (o, "sdp");
    GstSDPMessage *sdp;
    gboolean has_video;

    if (sdp_text == NULL)
      return;
    sdp = parse_answer_sdp (sdp_text);
    if (sdp == NULL)
      return;
    answer_codec_problem (sdp, 96, &has_video);
    gst_sdp_message_free (sdp);
  } else if (strcmp (kind, "ice") == 0) {
    const char *candidate = member_string (o, "candidate");
    gint64 mline = -1;

    if (!member_int (o, "sdpMLineIndex", &mline) || mline < 0 || mline > 64
        || candidate == NULL || candidate[0] == '\0')
      return;
    if (strlen (candidate) > MAX_CANDIDATE
        || !g_str_has_prefix (candidate, "candidate:"))
      return;
    candidate_is_mdns (candidate);
  }
}

static void
fuzz_navigation (JsonObject * o)
{
  const char *event = member_string (o, "event"), *key;

  if (event == NULL || g_str_has_prefix (event, "Mouse") ||
      g_str_has_prefix (event, "Touch"))
    return;
  if (strcmp (event, "KeyPress") != 0 && strcmp (event, "KeyRelease") != 0)
    return;
  key = member_string (o, "key");
  if (key == NULL || key[0] == '\0' || strlen (key) > MAX_KEY_NAME
      || !g_utf8_validate (key, -1, NULL))
    return;
  key = normalize_key (key);
  lingbot_key_from_name (key);
}

static void
fuzz_channel (JsonObject * o)
{
  gint64 id = 0;
  JsonObject *req, *event;

  member_int (o, "id", &id);
  if (json_object_has_member (o, "request")) {
    const char *type;

    req = member_object (o, "request");
    type = req ? member_string (req, "type") : NULL;
    event = req ? member_object (req, "event") : NULL;
    if (type != NULL && strcmp (type, "navigationEvent") == 0 && event)
      fuzz_navigation (event);
    return;
  }
  fuzz_navigation (o);
}

int
LLVMFuzzerTestOneInput (const uint8_t * data, size_t size)
{
  g_autoptr (JsonParser) parser = NULL;
  g_autofree char *why = NULL;
  /* the data channel's text is a NUL-terminated copy
   * (post_channel_message), the WebSocket's the message's bytes as they
   * came */
  g_autofree char *text = FUZZ_WEBRTC_CHANNEL ?
      g_strndup ((const char *) data, size) : NULL;
  JsonObject *o = NULL;

  parser = parse_object (text ? text : (const char *) data, size, &o, &why);
  if (parser == NULL) {
    g_assert (why != NULL);
    return 0;
  }
  if (FUZZ_WEBRTC_CHANNEL)
    fuzz_channel (o);
  else
    fuzz_signalling (o);
  return 0;
}

/* lingbot-gst: fuzz harness of the WebRTC example's message checks
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The input is one message from a browser, taken through the server's own
 * checks (examples/webrtc/webrtc-messages.c, compiled in instrumented):
 * the functions whose verdict on_ws_message() and handle_channel_message()
 * act on, with the peer's state as arguments instead of a peer.
 *   FUZZ_WEBRTC_CHANNEL=0  a signalling message: lingbot_webrtc_check_signal()
 *                          for each peer state of the table below (before
 *                          the offer, waiting for the answer with VP8 or
 *                          H.264, answered, a tiny size limit), and once
 *                          as a binary frame
 *   FUZZ_WEBRTC_CHANNEL=1  a data-channel message (a NUL-terminated copy,
 *                          as post_channel_message() makes):
 *                          lingbot_webrtc_check_input() on "input" and on
 *                          "control", from the viewer and from another
 *                          peer, and as binary / over the limit
 * Each verdict is checked for what the server relies on: a reason for
 * every refusal (valid UTF-8: it goes into a JSON text frame), an SDP for
 * an answer, a candidate line for a candidate, a bounded key name.
 */
#include <string.h>

#include "webrtc-messages.h"

#include "fuzz-common.h"

#ifndef FUZZ_WEBRTC_CHANNEL
#error FUZZ_WEBRTC_CHANNEL must be 0 or 1
#endif

#if !FUZZ_WEBRTC_CHANNEL
static const struct
{
  gboolean offered, answered, loopback;
  guint pt;
  const char *codec, *encoder;
  gsize max_message;
} states[] = {
  {TRUE, FALSE, TRUE, 96, "VP8", "vp8", 65536},
  {TRUE, FALSE, FALSE, 102, "H264", "x264", 65536},
  {FALSE, FALSE, TRUE, 96, "VP8", "vp8", 65536},
  {TRUE, TRUE, FALSE, 96, "VP8", "vp8", 65536},
  {TRUE, FALSE, TRUE, 96, "VP8", "vp8", 64},
};

static void
check_signal (const uint8_t * data, size_t size, guint state, gboolean binary)
{
  LingbotWebrtcSignal sig = { 0 };

  sig.offered = states[state].offered;
  sig.answered = states[state].answered;
  sig.ice_loopback = states[state].loopback;
  sig.pt = states[state].pt;
  sig.codec = states[state].codec;
  sig.encoder = states[state].encoder;
  sig.max_message = states[state].max_message;
  lingbot_webrtc_check_signal (&sig, binary, (const char *) data, size);
  switch (sig.verdict) {
    case LINGBOT_WEBRTC_SIGNAL_DROP:
    case LINGBOT_WEBRTC_SIGNAL_CODEC:
      g_assert (sig.why != NULL && g_utf8_validate (sig.why, -1, NULL));
      g_assert (sig.sdp == NULL && sig.candidate == NULL);
      break;
    case LINGBOT_WEBRTC_SIGNAL_ANSWER:
      g_assert (sig.sdp != NULL && sig.offered && !sig.answered);
      g_assert (gst_sdp_message_medias_len (sig.sdp) > 0);
      break;
    case LINGBOT_WEBRTC_SIGNAL_ICE:
      g_assert (sig.candidate != NULL && sig.mline <= 64);
      g_assert (g_str_has_prefix (sig.candidate, "candidate:"));
      g_assert (strlen (sig.candidate) <= LINGBOT_WEBRTC_MAX_CANDIDATE);
      break;
    case LINGBOT_WEBRTC_SIGNAL_MDNS:
      g_assert (sig.ice_loopback);
      break;
    case LINGBOT_WEBRTC_SIGNAL_ICE_END:
    case LINGBOT_WEBRTC_SIGNAL_BYE:
      break;
  }
  g_assert (!binary || sig.verdict == LINGBOT_WEBRTC_SIGNAL_DROP);
  g_assert (size <= sig.max_message || sig.verdict ==
      LINGBOT_WEBRTC_SIGNAL_DROP);
  if (g_getenv ("FUZZ_VERBOSE"))
    printf ("  state %u%s: verdict %d%s%s\n", state, binary ? " (binary)" : "",
        sig.verdict, sig.why ? ": " : "", sig.why ? sig.why : "");
  lingbot_webrtc_signal_clear (&sig);
}
#else
static void
check_input (const char *text, size_t size, gboolean control,
    gboolean viewer, gboolean binary)
{
  LingbotWebrtcInput in = { 0 };

  in.control = control;
  in.viewer = viewer;
  lingbot_webrtc_check_input (&in, binary, text, size);
  switch (in.verdict) {
    case LINGBOT_WEBRTC_INPUT_DROP:
      g_assert (in.why != NULL && g_utf8_validate (in.why, -1, NULL));
      g_assert (in.key == NULL);
      break;
    case LINGBOT_WEBRTC_INPUT_IGNORE:
      g_assert (in.event != NULL && in.key == NULL);
      break;
    case LINGBOT_WEBRTC_INPUT_KEY:
      g_assert (viewer && in.key != NULL && in.key[0] != '\0');
      g_assert (strlen (in.key) <= LINGBOT_WEBRTC_MAX_KEY_NAME);
      g_assert (g_utf8_validate (in.key, -1, NULL));
      break;
  }
  g_assert (text != NULL || in.verdict == LINGBOT_WEBRTC_INPUT_DROP);
  if (g_getenv ("FUZZ_VERBOSE"))
    printf ("  %s, %s%s%s: verdict %d%s%s\n", control ? "control" : "input",
        viewer ? "viewer" : "not the viewer", binary ? ", binary" : "",
        text ? "" : ", too big", in.verdict, in.why ? ": " : "",
        in.why ? in.why : "");
  lingbot_webrtc_input_clear (&in);
}
#endif

int
LLVMFuzzerTestOneInput (const uint8_t * data, size_t size)
{
#if FUZZ_WEBRTC_CHANNEL
  /* the data channel's text is a NUL-terminated copy of the message */
  g_autofree char *text = g_strndup ((const char *) data, size);

  for (guint i = 0; i < 4; i++)
    check_input (text, size, i & 1, (i >> 1) & 1, FALSE);
  check_input (text, size, FALSE, TRUE, TRUE);
  check_input (NULL, size, TRUE, TRUE, FALSE);
#else
  /* the WebSocket's message is its bytes as they came */
  for (guint i = 0; i < G_N_ELEMENTS (states); i++)
    check_signal (data, size, i, FALSE);
  check_signal (data, size, 0, TRUE);
#endif
  return 0;
}

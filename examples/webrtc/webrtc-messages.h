/* lingbot-gst: the checks of the browser's messages (WebRTC example)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * What the server does with a message from a browser, on the signalling
 * WebSocket or on a data channel, is decided here from the message's bytes
 * and the state of the peer that sent it, without the peer: every check,
 * in the order the server makes them, ends in a verdict.  The server's
 * signalling and peer rooms (webrtc-signalling.c, webrtc-peer.c) act on
 * the verdict (an error reply, the answer to webrtcbin, a key
 * upstream, ...); the fuzz harnesses (tests/fuzz/fuzz-webrtc.c) and the
 * tests drive the same functions with no webrtcbin behind them.  The
 * schema and the limits are in docs/webrtc.md.
 */
#pragma once

#include <gst/sdp/sdp.h>
#include <json-glib/json-glib.h>

G_BEGIN_DECLS

/* key names longer than this are refused (bytes) */
#define LINGBOT_WEBRTC_MAX_KEY_NAME 64
/* ICE candidate lines longer than this are refused (bytes) */
#define LINGBOT_WEBRTC_MAX_CANDIDATE 2048

JsonParser *lingbot_webrtc_parse_object (const char *data, gsize len,
    JsonObject ** out, char **why);

/**
 * LingbotWebrtcSignalVerdict:
 * @LINGBOT_WEBRTC_SIGNAL_DROP: refused: drop it with an error reply (@why)
 * @LINGBOT_WEBRTC_SIGNAL_ANSWER: an answer to set as the remote
 *   description (@sdp)
 * @LINGBOT_WEBRTC_SIGNAL_CODEC: an answer that refuses the offered codec:
 *   release the peer (close 4415), @why says what the browser lacks
 * @LINGBOT_WEBRTC_SIGNAL_ICE: a remote candidate (@candidate, @mline)
 * @LINGBOT_WEBRTC_SIGNAL_ICE_END: the empty candidate (end of candidates):
 *   nothing to do
 * @LINGBOT_WEBRTC_SIGNAL_MDNS: a browser's mDNS (.local) candidate while
 *   ICE runs on 127.0.0.1 only: ignored, not dropped
 * @LINGBOT_WEBRTC_SIGNAL_BYE: the browser ends the session
 */
typedef enum
{
  LINGBOT_WEBRTC_SIGNAL_DROP,
  LINGBOT_WEBRTC_SIGNAL_ANSWER,
  LINGBOT_WEBRTC_SIGNAL_CODEC,
  LINGBOT_WEBRTC_SIGNAL_ICE,
  LINGBOT_WEBRTC_SIGNAL_ICE_END,
  LINGBOT_WEBRTC_SIGNAL_MDNS,
  LINGBOT_WEBRTC_SIGNAL_BYE,
} LingbotWebrtcSignalVerdict;

/**
 * LingbotWebrtcSignal:
 * @max_message: (in) larger messages are dropped (bytes)
 * @offered: (in) the offer went out to this peer
 * @answered: (in) the peer's answer was taken already
 * @pt: (in) the offered payload type (96 VP8, 102 H.264)
 * @codec: (in) its RTP encoding name ("VP8", "H264")
 * @encoder: (in) the server's --encoder, for the codec message
 * @ice_loopback: (in) ICE runs on 127.0.0.1 only
 * @verdict: (out) what to do
 * @why: (out) for DROP and CODEC: the reason, for the error reply
 * @sdp: (out) for ANSWER: the parsed answer (owned; steal it)
 * @candidate: (out) for ICE: the candidate line
 * @mline: (out) for ICE: its sdpMLineIndex (0 to 64)
 *
 * A signalling message and its verdict: fill in the peer's state, call
 * lingbot_webrtc_check_signal(), act, then lingbot_webrtc_signal_clear().
 */
typedef struct
{
  gsize max_message;
  gboolean offered, answered;
  guint pt;
  const char *codec;
  const char *encoder;
  gboolean ice_loopback;

  LingbotWebrtcSignalVerdict verdict;
  char *why;
  GstSDPMessage *sdp;
  char *candidate;
  guint mline;
} LingbotWebrtcSignal;

void lingbot_webrtc_check_signal (LingbotWebrtcSignal * sig, gboolean binary,
    const char *data, gsize len);
void lingbot_webrtc_signal_clear (LingbotWebrtcSignal * sig);

/**
 * LingbotWebrtcInputVerdict:
 * @LINGBOT_WEBRTC_INPUT_DROP: refused: drop it with an error reply (@why)
 * @LINGBOT_WEBRTC_INPUT_IGNORE: a mouse or touch event, or a key that is
 *   none of the world's keys (Shift, Tab: gstwebrtc-api sends every key
 *   the user presses): accepted, no effect
 * @LINGBOT_WEBRTC_INPUT_KEY: a key press or release (@press, @key)
 */
typedef enum
{
  LINGBOT_WEBRTC_INPUT_DROP,
  LINGBOT_WEBRTC_INPUT_IGNORE,
  LINGBOT_WEBRTC_INPUT_KEY,
} LingbotWebrtcInputVerdict;

/**
 * LingbotWebrtcInput:
 * @control: (in) it arrived on "control" (else on "input")
 * @viewer: (in) the peer is its session's viewer (only the viewer steers)
 * @verdict: (out) what to do
 * @why: (out) for DROP: the reason
 * @has_id: (out) the message had an integer "id" (echo it in the reply)
 * @id: (out) that id
 * @event: (out) the navigation event's name ("KeyPress", "MouseMove", ...)
 *   for IGNORE and KEY
 * @press: (out) for KEY: a press (else a release)
 * @key: (out) for KEY: the key name, X keysym arrows mapped to DOM codes
 * @key_bit: (out) for KEY: lingbot_key_from_name() of @key (never 0: a
 *   name that is not a key of the world is IGNORE)
 *
 * A data-channel message and its verdict: fill in the peer's state, call
 * lingbot_webrtc_check_input(), act, then lingbot_webrtc_input_clear().
 */
typedef struct
{
  gboolean control;
  gboolean viewer;

  LingbotWebrtcInputVerdict verdict;
  char *why;
  gboolean has_id;
  gint64 id;
  char *event;
  gboolean press;
  char *key;
  guint key_bit;
} LingbotWebrtcInput;

void lingbot_webrtc_check_input (LingbotWebrtcInput * in, gboolean binary,
    const char *text, gsize size);
void lingbot_webrtc_input_clear (LingbotWebrtcInput * in);

gboolean lingbot_webrtc_candidate_is_mdns (const char *candidate);

G_END_DECLS

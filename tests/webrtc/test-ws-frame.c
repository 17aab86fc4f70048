/* lingbot-gst: WebSocket client frame headers for the server tests
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "test-ws-frame.h"

/**
 * lingbot_test_ws_frame_header:
 * @out: (out caller-allocates): room for 14 bytes
 * @fin: the FIN bit (the last frame of a message)
 * @opcode: the frame's opcode (0 continuation, 1 text, 2 binary, 8 close,
 *   9 ping)
 * @len: the payload's length in bytes
 * @mask: the masking key, written big-endian (a client's frames are
 *   masked; with 0 the payload goes as it is)
 *
 * Writes the header of a masked client frame (RFC 6455 section 5.2): the
 * 7-bit, 16-bit or 64-bit length form, then the key.  The payload, masked
 * by the caller, follows it.
 *
 * Returns: the header's length: 6, 8 or 14 bytes
 */
gsize
lingbot_test_ws_frame_header (guint8 * out, gboolean fin, guint8 opcode,
    guint64 len, guint32 mask)
{
  gsize n = 0;

  out[n++] = (fin ? 0x80 : 0) | opcode;
  if (len < 126) {
    out[n++] = 0x80 | (guint8) len;
  } else if (len <= 0xffff) {
    out[n++] = 0x80 | 126;
    out[n++] = (guint8) (len >> 8);
    out[n++] = (guint8) len;
  } else {
    out[n++] = 0x80 | 127;
    for (int i = 7; i >= 0; i--)
      out[n++] = (guint8) (len >> (8 * i));
  }
  for (int i = 3; i >= 0; i--)
    out[n++] = (guint8) (mask >> (8 * i));
  return n;
}

/* lingbot-gst: a size guard for server-side WebSocket connections
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * libsoup 3.2 bounds each WebSocket frame (max-incoming-payload-size) but
 * not a message fragmented into continuation frames: it buffers the
 * fragments until the last one, however many there are.  The guard sits
 * between the TCP stream and SoupWebsocketConnection: it reads the client's
 * frame headers as the bytes go through (RFC 6455 section 5.2; payloads are
 * skipped, never copied) and stops passing bytes on before the first frame
 * that would make a data message longer than the limit (a single frame that
 * is too big included: libsoup would drop such a connection without a close
 * frame).  The owner is told
 * (once), closes the connection with 1009, then calls
 * lingbot_ws_guard_finish() so that the reader sees the end of the stream.
 */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

/**
 * LingbotWsScan:
 * @hdr: the frame header bytes collected so far (at most 14)
 * @hdr_len: how many of them
 * @payload_left: payload bytes of the current frame still to come
 * @message: bytes of the current data message (text or binary, all its
 *   fragments) so far
 * @tripped: a frame would have made a message longer than the limit
 * @trip_size: that message's size with the frame (saturated at G_MAXUINT64)
 *
 * The state of lingbot_ws_scan_feed(); zero-initialise it.
 */
typedef struct
{
  guint8 hdr[14];
  guint hdr_len;
  guint64 payload_left;
  guint64 message;
  gboolean tripped;
  guint64 trip_size;
} LingbotWsScan;

gsize lingbot_ws_scan_feed (LingbotWsScan * scan, const guint8 * data,
    gsize len, guint64 max_message);

/**
 * LingbotWsGuardTripped:
 * @user_data: as given to lingbot_ws_guard_new()
 * @message_size: the size the message would have had (bytes)
 *
 * Called once, from within a read of the guarded stream (do not close the
 * WebSocket from here: schedule it).
 */
typedef void (*LingbotWsGuardTripped) (gpointer user_data,
    guint64 message_size);

void lingbot_ws_guard_set_socket (GIOStream * guard, GSocket * socket);
GIOStream *lingbot_ws_guard_new (GIOStream * base, guint64 max_message,
    LingbotWsGuardTripped tripped, gpointer user_data);
void lingbot_ws_guard_finish (GIOStream * guard);

G_END_DECLS

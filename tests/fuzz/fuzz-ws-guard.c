/* lingbot-gst: fuzz harness of the WebSocket size guard (ws-guard.c)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * examples/webrtc/ws-guard.c is compiled in instrumented.  The input:
 *   bytes 0-1  the message limit (little-endian, 0..65535 bytes)
 *   byte 2     the seed of the read sizes and of sync / non-blocking reads
 *   the rest   what a client sends, frames or not
 * It goes through lingbot_ws_scan_feed() at once and through the guard
 * stream itself (lingbot_ws_guard_new() over a memory stream), read in
 * pieces of 1 to 4096 bytes, alternately with g_input_stream_read() and
 * g_pollable_input_stream_read_nonblocking().  Checked: every read passes
 * on exactly the bytes a scanner fed the same pieces passes, unchanged; a
 * read that stops at the first byte of an oversized frame is an error
 * (G_IO_ERROR_MESSAGE_TOO_LARGE, or WOULD_BLOCK without waiting), never an
 * end of stream; the owner is told once, with the same size as the one-go
 * scan; the pieces pass at most one partial header (13 bytes) more than
 * the one-go scan; after lingbot_ws_guard_finish() the stream ends.
 */
#include <string.h>

#include "ws-guard.h"

#include "fuzz-common.h"

typedef struct
{
  guint calls;
  guint64 size;
} Tripped;

static void
on_tripped (gpointer user_data, guint64 size)
{
  Tripped *t = user_data;

  t->calls++;
  t->size = size;
}

int
LLVMFuzzerTestOneInput (const uint8_t * data, size_t size)
{
  g_autoptr (GInputStream) mem_in = NULL;
  g_autoptr (GOutputStream) mem_out = NULL;
  g_autoptr (GIOStream) base = NULL;
  g_autoptr (GIOStream) guard = NULL;
  g_autofree guint8 *buf = g_malloc (4096);
  LingbotWsScan whole = { 0 }, ref = { 0 };
  Tripped t = { 0 };
  GInputStream *in;
  guint64 limit;
  guint32 rng;
  gsize off = 0, whole_pass, passed = 0;

  if (size < 3)
    return 0;
  limit = (guint64) data[0] | ((guint64) data[1] << 8);
  rng = 0x9e3779b9u ^ data[2];
  data += 3;
  size -= 3;

  whole_pass = lingbot_ws_scan_feed (&whole, data, size, limit);
  g_assert (whole_pass <= size);
  g_assert (whole.tripped || whole_pass == size);
  g_assert (!whole.tripped || lingbot_ws_scan_feed (&whole, data, size,
          limit) == 0);
  g_assert (whole.hdr_len < 14);

  mem_in = g_memory_input_stream_new_from_data (data, (gssize) size, NULL);
  mem_out = g_memory_output_stream_new_resizable ();
  base = g_simple_io_stream_new (mem_in, mem_out);
  guard = lingbot_ws_guard_new (base, limit, on_tripped, &t);
  in = g_io_stream_get_input_stream (guard);
  g_assert (g_pollable_input_stream_can_poll (G_POLLABLE_INPUT_STREAM (in)));

  for (;;) {
    g_autoptr (GError) err = NULL;
    gsize want, chunk, expect = 0;
    gboolean nonblocking, stopped;
    gssize n;

    rng = rng * 1664525u + 1013904223u;
    want = 1 + (rng >> 8) % 4096;
    nonblocking = (rng >> 4) & 1;
    stopped = ref.tripped;      /* tripped before: no read of the base */
    chunk = stopped ? 0 : MIN (want, size - off);
    if (chunk > 0)
      expect = lingbot_ws_scan_feed (&ref, data + off, chunk, limit);
    n = nonblocking ?
        g_pollable_input_stream_read_nonblocking (G_POLLABLE_INPUT_STREAM
        (in), buf, want, NULL, &err) :
        g_input_stream_read (in, buf, want, NULL, &err);
    if (stopped || (ref.tripped && expect == 0)) {
      g_assert (n == -1);
      g_assert (g_error_matches (err, G_IO_ERROR, nonblocking ?
              G_IO_ERROR_WOULD_BLOCK : G_IO_ERROR_MESSAGE_TOO_LARGE));
      off += chunk;
      break;
    }
    g_assert_no_error (err);
    if (chunk == 0) {
      g_assert (n == 0);        /* the end of the client's bytes */
      break;
    }
    g_assert (n >= 0 && (gsize) n == expect);
    g_assert (memcmp (buf, data + off, expect) == 0);
    off += chunk;
    passed += expect;
  }

  /* the same verdict in pieces as at once */
  g_assert (ref.tripped == whole.tripped);
  g_assert (t.calls == (whole.tripped ? 1u : 0u));
  if (whole.tripped) {
    g_autoptr (GError) err = NULL;
    GSource *source;

    g_assert (t.size == whole.trip_size && ref.trip_size == whole.trip_size);
    g_assert (whole.trip_size > limit);
    g_assert (passed >= whole_pass && passed <= whole_pass + 13);
    g_assert (!g_pollable_input_stream_is_readable (G_POLLABLE_INPUT_STREAM
            (in)));
    /* a reader waiting on the stopped stream is woken by finish() and
     * reads its end */
    source = g_pollable_input_stream_create_source (G_POLLABLE_INPUT_STREAM
        (in), NULL);
    lingbot_ws_guard_finish (guard);
    g_assert (g_pollable_input_stream_is_readable (G_POLLABLE_INPUT_STREAM
            (in)));
    g_assert (g_input_stream_read (in, buf, 16, NULL, &err) == 0);
    g_assert_no_error (err);
    g_source_destroy (source);
    g_source_unref (source);
  } else {
    g_assert (passed == size && whole_pass == size);
  }
  g_assert (g_io_stream_close (guard, NULL, NULL));
  if (g_getenv ("FUZZ_VERBOSE"))
    printf ("  limit %" G_GUINT64_FORMAT ": %s, %" G_GSIZE_FORMAT " of %"
        G_GSIZE_FORMAT " bytes passed in pieces\n", limit, whole.tripped ?
        "tripped" : "within the limit", passed, size);
  return 0;
}

/* lingbot-gst: a size guard for server-side WebSocket connections
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * See ws-guard.h.  Everything runs on the thread that reads the connection
 * (libsoup reads from its connection's main context).
 */
#include "ws-guard.h"

/* RFC 6455 5.2: 2 bytes, then 2 or 8 bytes of extended length, then the
 * 4-byte mask (client frames are masked); 0 while unknown */
static guint
header_size (const guint8 * hdr, guint len)
{
  guint n;

  if (len < 2)
    return 0;
  n = 2;
  switch (hdr[1] & 0x7f) {
    case 126:
      n += 2;
      break;
    case 127:
      n += 8;
      break;
    default:
      break;
  }
  if (hdr[1] & 0x80)
    n += 4;
  return n;
}

static guint64
payload_length (const guint8 * hdr)
{
  guint64 len = hdr[1] & 0x7f;

  if (len == 126)
    return ((guint64) hdr[2] << 8) | hdr[3];
  if (len == 127) {
    len = 0;
    for (guint i = 0; i < 8; i++)
      len = (len << 8) | hdr[2 + i];
  }
  return len;
}

/**
 * lingbot_ws_scan_feed:
 * @scan: the scanner state (zero-initialised before the first call)
 * @data: the next bytes the client sent, as read from the connection
 * @len: how many
 * @max_message: the largest data message allowed (bytes, all fragments)
 *
 * Follows the client's frames through @data: headers are parsed, payloads
 * skipped.  Data frames (opcodes 0-7) add their payload length to the
 * current message (a non-continuation opcode starts a new one); control
 * frames (8-15) do not count.  When a frame header would take the message
 * above @max_message, @scan becomes tripped and the bytes up to the end of
 * that header are the last ones passed on.
 *
 * Returns: how many bytes of @data may be passed on (@len unless tripped;
 *   0 for any call once tripped)
 */
gsize
lingbot_ws_scan_feed (LingbotWsScan * scan, const guint8 * data, gsize len,
    guint64 max_message)
{
  gsize pos = 0, hdr_begin = 0;

  if (scan->tripped)
    return 0;
  while (pos < len) {
    guint need;
    guint64 plen;
    guint8 opcode;

    if (scan->payload_left > 0) {
      guint64 n = MIN (scan->payload_left, (guint64) (len - pos));

      pos += (gsize) n;
      scan->payload_left -= n;
      continue;
    }
    if (scan->hdr_len == 0)
      hdr_begin = pos;
    scan->hdr[scan->hdr_len++] = data[pos++];
    need = header_size (scan->hdr, scan->hdr_len);
    if (need == 0 || scan->hdr_len < need)
      continue;

    plen = payload_length (scan->hdr);
    opcode = scan->hdr[0] & 0x0f;
    scan->hdr_len = 0;
    if (opcode < 8) {
      if (opcode != 0)
        scan->message = 0;
      if (plen > max_message || scan->message > max_message - plen) {
        scan->tripped = TRUE;
        scan->trip_size = plen > G_MAXUINT64 - scan->message ? G_MAXUINT64 :
            scan->message + plen;
        return hdr_begin;
      }
      scan->message += plen;
    }
    scan->payload_left = plen;
  }
  return len;
}

/* ---- the input stream ---- */

#define LINGBOT_TYPE_WS_GUARD_INPUT (lingbot_ws_guard_input_get_type ())
G_DECLARE_FINAL_TYPE (LingbotWsGuardInput, lingbot_ws_guard_input, LINGBOT,
    WS_GUARD_INPUT, GFilterInputStream)
struct _LingbotWsGuardInput
{
  GFilterInputStream parent;
  LingbotWsScan scan;
  guint64 max_message;
  gboolean notified;
  gboolean eof;                 /* lingbot_ws_guard_finish() was called */
  GSource *wake;                /* child of the last source handed out */
  LingbotWsGuardTripped tripped;
  gpointer user_data;
};

static void
lingbot_ws_guard_input_pollable_init (GPollableInputStreamInterface * iface);

G_DEFINE_TYPE_WITH_CODE (LingbotWsGuardInput, lingbot_ws_guard_input,
    G_TYPE_FILTER_INPUT_STREAM,
    G_IMPLEMENT_INTERFACE (G_TYPE_POLLABLE_INPUT_STREAM,
        lingbot_ws_guard_input_pollable_init))
static GInputStream *
guard_base (LingbotWsGuardInput * self)
{
  return g_filter_input_stream_get_base_stream (G_FILTER_INPUT_STREAM (self));
}

/* bytes just read: how many of them go on */
static gssize
guard_filter (LingbotWsGuardInput * self, void *buffer, gssize n)
{
  gsize pass;

  if (n <= 0)
    return n;
  pass = lingbot_ws_scan_feed (&self->scan, buffer, (gsize) n,
      self->max_message);
  if (self->scan.tripped && !self->notified) {
    self->notified = TRUE;
    if (self->tripped)
      self->tripped (self->user_data, self->scan.trip_size);
  }
  return (gssize) pass;
}

/* TRUE with @error set (@code) once the guard tripped: no more input */
static gboolean
guard_stopped (LingbotWsGuardInput * self, GIOErrorEnum code, GError ** error)
{
  if (!self->scan.tripped)
    return FALSE;
  g_set_error_literal (error, G_IO_ERROR, code,
      code == G_IO_ERROR_WOULD_BLOCK ?
      "WebSocket message too big: input stopped" : "WebSocket message too big");
  return TRUE;
}

static gssize
guard_read (GInputStream * stream, void *buffer, gsize count,
    GCancellable * cancellable, GError ** error)
{
  LingbotWsGuardInput *self = LINGBOT_WS_GUARD_INPUT (stream);
  gssize n;

  if (self->eof)
    return 0;
  if (guard_stopped (self, G_IO_ERROR_MESSAGE_TOO_LARGE, error))
    return -1;
  n = g_input_stream_read (guard_base (self), buffer, count, cancellable,
      error);
  n = guard_filter (self, buffer, n);
  /* stopped at the first byte read: an error, not the end of the stream */
  if (n == 0 && guard_stopped (self, G_IO_ERROR_MESSAGE_TOO_LARGE, error))
    return -1;
  return n;
}

static gboolean
guard_can_poll (GPollableInputStream * stream)
{
  LingbotWsGuardInput *self = LINGBOT_WS_GUARD_INPUT (stream);
  GInputStream *base = guard_base (self);

  return G_IS_POLLABLE_INPUT_STREAM (base)
      && g_pollable_input_stream_can_poll (G_POLLABLE_INPUT_STREAM (base));
}

static gboolean
guard_is_readable (GPollableInputStream * stream)
{
  LingbotWsGuardInput *self = LINGBOT_WS_GUARD_INPUT (stream);

  if (self->eof)
    return TRUE;
  if (self->scan.tripped)
    return FALSE;
  return g_pollable_input_stream_is_readable (G_POLLABLE_INPUT_STREAM
      (guard_base (self)));
}

static gssize
guard_read_nonblocking (GPollableInputStream * stream, void *buffer,
    gsize count, GError ** error)
{
  LingbotWsGuardInput *self = LINGBOT_WS_GUARD_INPUT (stream);
  gssize n;

  if (self->eof)
    return 0;
  if (guard_stopped (self, G_IO_ERROR_WOULD_BLOCK, error))
    return -1;
  n = g_pollable_input_stream_read_nonblocking (G_POLLABLE_INPUT_STREAM
      (guard_base (self)), buffer, count, NULL, error);
  n = guard_filter (self, buffer, n);
  if (n == 0 && guard_stopped (self, G_IO_ERROR_WOULD_BLOCK, error))
    return -1;
  return n;
}

/* a source that is never ready until lingbot_ws_guard_finish() sets its
 * ready time */
static gboolean
wake_dispatch (GSource * source, GSourceFunc callback, gpointer user_data)
{
  g_source_set_ready_time (source, -1);
  return callback ? callback (user_data) : G_SOURCE_CONTINUE;
}

static GSourceFuncs wake_funcs = { NULL, NULL, wake_dispatch, NULL, NULL,
  NULL
};

static GSource *
guard_create_source (GPollableInputStream * stream, GCancellable * cancellable)
{
  LingbotWsGuardInput *self = LINGBOT_WS_GUARD_INPUT (stream);
  GSource *child, *source;

  if (self->scan.tripped || self->eof) {
    /* no callback on the child: wake_dispatch() copes without one */
    source = g_pollable_source_new (G_OBJECT (stream));
    child = g_source_new (&wake_funcs, sizeof (GSource));
    g_source_set_ready_time (child, self->eof ? 0 : -1);
    g_source_add_child_source (source, child);
    g_clear_pointer (&self->wake, g_source_unref);
    self->wake = child;
    return source;
  }
  child = g_pollable_input_stream_create_source (G_POLLABLE_INPUT_STREAM
      (guard_base (self)), cancellable);
  source = g_pollable_source_new_full (stream, child, cancellable);
  g_source_unref (child);
  return source;
}

static void
lingbot_ws_guard_input_pollable_init (GPollableInputStreamInterface * iface)
{
  iface->can_poll = guard_can_poll;
  iface->is_readable = guard_is_readable;
  iface->create_source = guard_create_source;
  iface->read_nonblocking = guard_read_nonblocking;
}

static void
lingbot_ws_guard_input_finalize (GObject * object)
{
  LingbotWsGuardInput *self = LINGBOT_WS_GUARD_INPUT (object);

  g_clear_pointer (&self->wake, g_source_unref);
  G_OBJECT_CLASS (lingbot_ws_guard_input_parent_class)->finalize (object);
}

static void
lingbot_ws_guard_input_class_init (LingbotWsGuardInputClass * klass)
{
  G_OBJECT_CLASS (klass)->finalize = lingbot_ws_guard_input_finalize;
  G_INPUT_STREAM_CLASS (klass)->read_fn = guard_read;
}

static void
lingbot_ws_guard_input_init (LingbotWsGuardInput * self)
{
}

/* ---- the IO stream: our input, the base's output ---- */

#define LINGBOT_TYPE_WS_GUARD (lingbot_ws_guard_get_type ())
G_DECLARE_FINAL_TYPE (LingbotWsGuard, lingbot_ws_guard, LINGBOT, WS_GUARD,
    GIOStream)
struct _LingbotWsGuard
{
  GIOStream parent;
  GIOStream *base;
  GInputStream *input;
  GSocket *socket;              /* for the lingering close, or NULL */
};

G_DEFINE_TYPE (LingbotWsGuard, lingbot_ws_guard, G_TYPE_IO_STREAM)
static GInputStream *
guard_get_input (GIOStream * stream)
{
  return LINGBOT_WS_GUARD (stream)->input;
}

static GOutputStream *
guard_get_output (GIOStream * stream)
{
  return g_io_stream_get_output_stream (LINGBOT_WS_GUARD (stream)->base);
}

/* closing the base stream closes the socket; the filter does not close its
 * base (close-base-stream is FALSE): the base IO stream does */
static gboolean
guard_close (GIOStream * stream, GCancellable * cancellable, GError ** error)
{
  LingbotWsGuard *self = LINGBOT_WS_GUARD (stream);

  g_input_stream_close (self->input, NULL, NULL);
  return g_io_stream_close (self->base, cancellable, error);
}

static void
base_closed (GObject * source, GAsyncResult * res, gpointer user_data)
{
  GTask *task = user_data;
  GError *error = NULL;

  if (g_io_stream_close_finish (G_IO_STREAM (source), res, &error))
    g_task_return_boolean (task, TRUE);
  else
    g_task_return_error (task, error);
  g_object_unref (task);
}

/* A lingering close (RFC 6455 7.1.1, and TCP's own rule): closing a
 * socket with unread data makes the kernel send a reset, which can discard
 * the close frame before the client reads it (a client still sending the
 * rest of an oversized message).  So the write side is shut down first
 * (the close frame, then FIN), and what the client still sends is read and
 * dropped until it closes too, for at most LINGER_MS and LINGER_MAX_BYTES.
 * The reads never block (the socket libsoup hands over is a blocking
 * GSocket: g_socket_receive() on it would wait in poll() for the client,
 * and with it the whole main context), and one dispatch reads at most
 * LINGER_SLICE bytes, so a client that floods the socket does not hold the
 * context either. */
#define LINGER_MS 2000
#define LINGER_MAX_BYTES (4 * 1024 * 1024)
#define LINGER_SLICE (64 * 1024)

typedef struct
{
  GTask *task;
  GIOStream *base;
  GSocket *socket;
  GSource *source;              /* the socket's input */
  GSource *timer;               /* LINGER_MS: a source of its own (a socket
                                 * source drops its ready time once it has
                                 * dispatched) */
  guint64 dropped;
  int io_priority;
} Linger;

static void
linger_done (Linger * l)
{
  g_source_destroy (l->source);
  g_source_unref (l->source);
  g_source_destroy (l->timer);
  g_source_unref (l->timer);
  g_io_stream_close_async (l->base, l->io_priority,
      g_task_get_cancellable (l->task), base_closed, l->task);
  g_object_unref (l->socket);
  g_object_unref (l->base);
  g_free (l);
}

static gboolean
linger_expired (gpointer user_data)
{
  linger_done (user_data);
  return G_SOURCE_REMOVE;
}

/* one dispatch: what is there now (LINGER_SLICE at most), never waiting;
 * done when the client closed or failed, or LINGER_MAX_BYTES are dropped */
static gboolean
linger_read (GSocket * socket, GIOCondition cond, gpointer user_data)
{
  Linger *l = user_data;
  char scratch[16384];
  gsize slice = 0;

  while (l->dropped < LINGER_MAX_BYTES) {
    GError *error = NULL;
    gssize n;

    if (slice >= LINGER_SLICE)
      return G_SOURCE_CONTINUE; /* the rest in a later dispatch */
    n = g_socket_receive_with_blocking (socket, scratch, sizeof scratch,
        FALSE, NULL, &error);
    if (n > 0) {
      slice += (gsize) n;
      l->dropped += (guint64) n;
      continue;
    }
    if (n < 0 && g_error_matches (error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK)) {
      g_error_free (error);
      return G_SOURCE_CONTINUE;
    }
    g_clear_error (&error);
    break;                      /* the client closed or failed */
  }
  linger_done (l);
  return G_SOURCE_REMOVE;
}

/* on the caller's context, as the base stream closes (GIOStream's default
 * would run guard_close() in a worker thread) */
static void
guard_close_async (GIOStream * stream, int io_priority,
    GCancellable * cancellable, GAsyncReadyCallback callback,
    gpointer user_data)
{
  LingbotWsGuard *self = LINGBOT_WS_GUARD (stream);
  GTask *task = g_task_new (stream, cancellable, callback, user_data);
  GSocket *socket = self->socket;

  g_input_stream_close (self->input, NULL, NULL);
  if (socket != NULL && g_socket_shutdown (socket, FALSE, TRUE, NULL)) {
    Linger *l = g_new0 (Linger, 1);

    l->task = task;
    l->base = g_object_ref (self->base);
    l->socket = g_object_ref (socket);
    l->io_priority = io_priority;
    l->source = g_socket_create_source (socket, G_IO_IN | G_IO_HUP |
        G_IO_ERR, NULL);
    g_source_set_callback (l->source, (GSourceFunc) (void (*)(void))
        linger_read, l, NULL);
    g_source_attach (l->source, g_main_context_get_thread_default ());
    l->timer = g_timeout_source_new (LINGER_MS);
    g_source_set_callback (l->timer, linger_expired, l, NULL);
    g_source_attach (l->timer, g_main_context_get_thread_default ());
    return;
  }
  g_io_stream_close_async (self->base, io_priority, cancellable, base_closed,
      task);
}

static gboolean
guard_close_finish (GIOStream * stream, GAsyncResult * result, GError ** error)
{
  return g_task_propagate_boolean (G_TASK (result), error);
}

static void
lingbot_ws_guard_finalize (GObject * object)
{
  LingbotWsGuard *self = LINGBOT_WS_GUARD (object);

  g_clear_object (&self->input);
  g_clear_object (&self->base);
  g_clear_object (&self->socket);
  G_OBJECT_CLASS (lingbot_ws_guard_parent_class)->finalize (object);
}

static void
lingbot_ws_guard_class_init (LingbotWsGuardClass * klass)
{
  GIOStreamClass *io = G_IO_STREAM_CLASS (klass);

  G_OBJECT_CLASS (klass)->finalize = lingbot_ws_guard_finalize;
  io->get_input_stream = guard_get_input;
  io->get_output_stream = guard_get_output;
  io->close_fn = guard_close;
  io->close_async = guard_close_async;
  io->close_finish = guard_close_finish;
}

static void
lingbot_ws_guard_init (LingbotWsGuard * self)
{
}

/**
 * lingbot_ws_guard_new:
 * @base: the connection (as stolen from the upgraded HTTP request); its
 *   input stream must be pollable
 * @max_message: the largest client data message, all fragments (bytes)
 * @tripped: called once when a message would exceed @max_message
 * @user_data: for @tripped
 *
 * Wraps @base for soup_websocket_connection_new(): writes go to @base as
 * they are; reads pass through lingbot_ws_scan_feed(), and from the first
 * frame that would exceed @max_message on, nothing more is read (the
 * reader would block) until lingbot_ws_guard_finish().
 *
 * Returns: (transfer full): the guarded stream
 */
GIOStream *
lingbot_ws_guard_new (GIOStream * base, guint64 max_message,
    LingbotWsGuardTripped tripped, gpointer user_data)
{
  LingbotWsGuard *self = g_object_new (LINGBOT_TYPE_WS_GUARD, NULL);
  LingbotWsGuardInput *in = g_object_new (LINGBOT_TYPE_WS_GUARD_INPUT,
      "base-stream", g_io_stream_get_input_stream (base),
      "close-base-stream", FALSE, NULL);

  in->max_message = max_message;
  in->tripped = tripped;
  in->user_data = user_data;
  self->base = g_object_ref (base);
  self->input = G_INPUT_STREAM (in);
  return G_IO_STREAM (self);
}

/**
 * lingbot_ws_guard_set_socket:
 * @guard: a stream of lingbot_ws_guard_new()
 * @socket: (nullable): the socket under the base stream (libsoup's stolen
 *   stream wraps it: the accepted connection's GSocket)
 *
 * With a socket, closing @guard is a lingering close: the write side is
 * shut down first (after the close frame), and what the client still sends
 * is read and dropped until it closes too, 2 s have passed or 4 MiB were
 * dropped, so that the kernel does not answer unread data with a reset
 * that would discard the close frame before the client reads it.  The
 * lingering never blocks the main context: the socket is read without
 * waiting, from a source of that context.
 */
void
lingbot_ws_guard_set_socket (GIOStream * guard, GSocket * socket)
{
  LingbotWsGuard *self;

  g_return_if_fail (G_IS_IO_STREAM (guard));
  g_return_if_fail (socket == NULL || G_IS_SOCKET (socket));
  if (!G_TYPE_CHECK_INSTANCE_TYPE (guard, LINGBOT_TYPE_WS_GUARD))
    return;
  self = LINGBOT_WS_GUARD (guard);
  g_set_object (&self->socket, socket);
}

/**
 * lingbot_ws_guard_finish:
 * @guard: a stream of lingbot_ws_guard_new() that tripped
 *
 * From now on reads report the end of the stream, so that the WebSocket
 * reading it finishes its close at once instead of waiting for the
 * client's close frame (which would come after the rest of the message).
 * The pending read source, if any, becomes ready.
 */
void
lingbot_ws_guard_finish (GIOStream * guard)
{
  LingbotWsGuardInput *in;

  g_return_if_fail (G_IS_IO_STREAM (guard));
  if (!G_TYPE_CHECK_INSTANCE_TYPE (guard, LINGBOT_TYPE_WS_GUARD))
    return;
  in = LINGBOT_WS_GUARD_INPUT (LINGBOT_WS_GUARD (guard)->input);
  in->eof = TRUE;
  if (in->wake)
    g_source_set_ready_time (in->wake, 0);
}

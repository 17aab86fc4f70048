/* lingbot-gst: channel transports (the interface a new transport implements)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A transport moves one piece (a row band from one producer rank to one
 * consumer rank) of one slot.  The channel calls @prepare once per (slot,
 * piece) at creation, @push on the producer rank at commit, @pull on the
 * consumer rank at receive, @release at destruction.  Each leg runs on the
 * calling rank's stream.  On CPU ranks it is complete (synchronised) when
 * it returns; on device ranks with events it is only enqueued, and the
 * channel orders the legs by its per-slot commit and ack events (see
 * comm/channel.c), so a leg must enqueue all its work on that stream.
 *
 * A CUDA-IPC transport for a consumer in another process fits as: @prepare
 * exports the consumer buffer with cudaIpcGetMemHandle (or opens a handle
 * received out of band) and keeps it in @priv; @push copies into the
 * opened pointer and records an event the consumer waits on in @pull.
 */
#pragma once

#include "comm/channel.h"

G_BEGIN_DECLS

/**
 * LbChannelSlotPiece:
 * @piece: the plan entry
 * @src: first byte of the piece in the producer's slot buffer
 * @src_pitch: bytes between consecutive outer blocks in the source
 * @dst: first byte of the piece in the consumer's slot buffer (%NULL for a
 *   hand-over)
 * @dst_pitch: bytes between outer blocks in the destination
 * @run: contiguous bytes per outer block (rows * bytes per row)
 * @n_runs: outer blocks (product of the dims before the shard dim)
 * @src_device: where @src lives
 * @dst_device: where @dst lives
 * @staging: host bytes for @n_runs * @run, packed (host-staged)
 * @priv: the transport's own per-piece data
 */
typedef struct
{
  const LbChannelPiece *piece;
  char *src;
  gsize src_pitch;
  char *dst;
  gsize dst_pitch;
  gsize run;
  gsize n_runs;
  LbDevice src_device;
  LbDevice dst_device;
  void *staging;
  gpointer priv;
} LbChannelSlotPiece;

typedef struct _LbChannelTransport LbChannelTransport;

/**
 * LbChannelTransport:
 * @kind: which #LbTransportKind it implements
 * @name: for logs and the benchmark
 * @prepare: (nullable): allocate per-piece resources
 * @push: (nullable): producer-side leg; add the copies made to *@n_copies
 * @pull: (nullable): consumer-side leg; add the copies made to *@n_copies
 * @release: (nullable): free what @prepare made
 */
struct _LbChannelTransport
{
  LbTransportKind kind;
  const char *name;
    gboolean (*prepare) (LbChannel * channel, LbChannelSlotPiece * sp,
      GError ** error);
    gboolean (*push) (LbChannel * channel, LbRank * producer,
      LbChannelSlotPiece * sp, guint * n_copies, GError ** error);
    gboolean (*pull) (LbChannel * channel, LbRank * consumer,
      LbChannelSlotPiece * sp, guint * n_copies, GError ** error);
  void (*release) (LbChannel * channel, LbChannelSlotPiece * sp);
};

gboolean lb_channel_copy_runs (LbStream * stream, void *dst, gsize dst_pitch,
    const void *src, gsize src_pitch, gsize run, gsize n_runs,
    LbDevice dst_device, LbDevice src_device, GError ** error);

G_END_DECLS

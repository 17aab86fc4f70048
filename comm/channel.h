/* lingbot-gst: tensor channels between worker groups
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A channel moves a stream of tensors (e.g. DiT latents, [C, T, H, W]
 * sharded by rows of H) from the ranks of a producer group to the ranks of
 * a consumer group without the orchestrating thread touching the data
 * (DESIGN.md section 3, spec B.5).  It owns a fixed pool of slots; each
 * message occupies one slot from the producers' commit until every
 * consumer rank acknowledged it.  Messages are received in send order.
 * See docs/design/comm.md for the lifecycle, transports and cancellation.
 */
#pragma once

#include "comm/worker-group.h"

G_BEGIN_DECLS

typedef struct _LbChannel LbChannel;

/**
 * LbTransportKind:
 * @LB_TRANSPORT_SAME_DEVICE: the consumer's band lies inside one producer's
 *   band on the same device: its view points into the producer's slot
 *   buffer (no copy)
 * @LB_TRANSPORT_PEER: a device-to-device copy (NVLink/P2P; memcpy between
 *   CPU ranks), made by the producer rank at commit
 * @LB_TRANSPORT_HOST_STAGED: producer copies to a host staging buffer at
 *   commit, the consumer copies it to its device at receive (the fallback
 *   when peer copies are disabled)
 * @LB_TRANSPORT_IPC: reserved for CUDA IPC handles to another process (not
 *   implemented yet; the transport vtable is ready for it)
 */
typedef enum
{
  LB_TRANSPORT_SAME_DEVICE = 0,
  LB_TRANSPORT_PEER,
  LB_TRANSPORT_HOST_STAGED,
  LB_TRANSPORT_IPC,
  LB_TRANSPORT_COUNT
} LbTransportKind;

/**
 * LbChannelFlags:
 * @LB_CHANNEL_NO_PEER_COPY: never copy device to device across devices;
 *   stage through host memory instead (P2P unavailable or distrusted)
 * @LB_CHANNEL_NO_HANDOVER: copy even when a pointer hand-over is possible
 *   (the consumer keeps the data while the producer's buffer is reused)
 */
typedef enum
{
  LB_CHANNEL_FLAGS_NONE = 0,
  LB_CHANNEL_NO_PEER_COPY = 1 << 0,
  LB_CHANNEL_NO_HANDOVER = 1 << 1,
} LbChannelFlags;

/**
 * LbChannelConfig:
 * @producer: the producing group (the channel holds a reference)
 * @consumer: the consuming group (may be @producer)
 * @dtype: element type of the payload
 * @ndim: 1..%LB_MAX_DIMS
 * @shape: the full (gathered) tensor shape of one message
 * @shard_dim: the dimension split into row bands on both sides
 * @producer_rows: (array) (nullable): rows per producer rank, summing to
 *   @shape[@shard_dim]; %NULL for lb_split_rows()
 * @consumer_rows: (array) (nullable): the same for consumer ranks
 * @n_slots: messages in flight at most (slot pool size), >= 1
 * @flags: #LbChannelFlags
 * @timeout_ms: deadline of each wait, 0 for the calling rank's group
 *   timeout
 * @name: for messages; may be %NULL
 */
typedef struct
{
  LbWorkerGroup *producer;
  LbWorkerGroup *consumer;
  LbDType dtype;
  int ndim;
  int64_t shape[LB_MAX_DIMS];
  int shard_dim;
  const int64_t *producer_rows;
  const int64_t *consumer_rows;
  int n_slots;
  LbChannelFlags flags;
  guint timeout_ms;
  const char *name;
} LbChannelConfig;

/**
 * LbChannelPiece:
 * @src_rank: producer rank
 * @dst_rank: consumer rank
 * @row_start: first row (of @shard_dim, in full-tensor coordinates)
 * @row_count: rows
 * @transport: how these rows travel
 *
 * One entry of the channel's plan, fixed at creation.
 */
typedef struct
{
  int src_rank;
  int dst_rank;
  int64_t row_start;
  int64_t row_count;
  LbTransportKind transport;
} LbChannelPiece;

/**
 * LbChannelStats:
 * @bytes: payload bytes delivered per transport (for
 *   %LB_TRANSPORT_SAME_DEVICE: bytes handed over without a copy)
 * @copies: copy operations per transport (a host-staged piece costs two;
 *   a strided piece still counts one per leg)
 * @fill_bytes: bytes copied in by lb_channel_send() (not transport)
 * @messages_sent: messages whose every producer committed
 * @messages_received: consumer-rank receives
 * @waits: calls that had to block (slot exhaustion, nothing ready)
 * @wait_us: total blocked time in microseconds
 * @cancels: lb_channel_cancel() calls that found work in flight
 */
typedef struct
{
  guint64 bytes[LB_TRANSPORT_COUNT];
  guint64 copies[LB_TRANSPORT_COUNT];
  guint64 fill_bytes;
  guint64 messages_sent;
  guint64 messages_received;
  guint64 waits;
  gint64 wait_us;
  guint64 cancels;
} LbChannelStats;

LbChannel *lb_channel_new (const LbChannelConfig * config, GError ** error);
void lb_channel_free (LbChannel * channel);

gboolean lb_channel_acquire (LbChannel * channel, LbRank * rank,
    LbTensor * shard, GError ** error);
gboolean lb_channel_commit (LbChannel * channel, LbRank * rank,
    GError ** error);
gboolean lb_channel_send (LbChannel * channel, LbRank * rank,
    const LbTensor * shard, GError ** error);
gboolean lb_channel_receive (LbChannel * channel, LbRank * rank,
    LbTensor * shard, GError ** error);
gboolean lb_channel_ack (LbChannel * channel, LbRank * rank, GError ** error);

void lb_channel_cancel (LbChannel * channel);
gboolean lb_channel_reset (LbChannel * channel, GError ** error);
gboolean lb_channel_is_cancelled (LbChannel * channel);

const LbChannelPiece *lb_channel_get_plan (LbChannel * channel, int *n_pieces);
int lb_channel_get_n_slots (LbChannel * channel);
void lb_channel_get_stats (LbChannel * channel, LbChannelStats * stats);
void lb_channel_clear_stats (LbChannel * channel);
const char *lb_transport_kind_name (LbTransportKind kind);

G_END_DECLS

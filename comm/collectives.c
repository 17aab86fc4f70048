/* lingbot-gst: collectives front end (validation, dispatch, registry)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "comm/comm-private.h"

#include <string.h>

static GMutex registry_lock;
static const LbCollectivesClass *registry[2];

/**
 * lb_collectives_register:
 * @device_type: the device type whose worker groups use @klass by default
 * @klass: (transfer none): a static class, e.g. the NCCL one that the CUDA
 *   backend module registers from its init function
 *
 * Later lb_worker_group_new() calls without an explicit collectives class
 * pick @klass for backends of @device_type.
 */
void
lb_collectives_register (LbDeviceType device_type,
    const LbCollectivesClass * klass)
{
  g_return_if_fail ((guint) device_type < G_N_ELEMENTS (registry));
  g_mutex_lock (&registry_lock);
  registry[device_type] = klass;
  g_mutex_unlock (&registry_lock);
}

/**
 * lb_collectives_lookup:
 * @device_type: a device type
 *
 * Returns: (transfer none): the class registered for @device_type, else
 * the local one (shared memory; on a non-CPU device it moves bytes with
 * the backend's device-to-device copy and has no reductions).
 */
const LbCollectivesClass *
lb_collectives_lookup (LbDeviceType device_type)
{
  const LbCollectivesClass *k = NULL;
  g_mutex_lock (&registry_lock);
  if ((guint) device_type < G_N_ELEMENTS (registry))
    k = registry[device_type];
  g_mutex_unlock (&registry_lock);
  return k ? k : lb_local_collectives ();
}

/**
 * lb_comm_copy:
 * @rank: the calling rank (its backend copies)
 * @stream: where the copy is enqueued when not @host
 * @host: the ranks' memory is host memory: memcpy
 * @dst: destination
 * @src: source
 * @bytes: bytes to copy; nothing to do for 0 or when @dst is @src
 * @error: the backend's copy error
 *
 * The byte movement of the local and solo collectives: a memcpy on the
 * CPU backend, else the backend's device-to-device copy on @stream.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_copy (LbRank * rank, LbStream * stream, gboolean host, void *dst,
    const void *src, gsize bytes, GError ** error)
{
  if (bytes == 0 || dst == src)
    return TRUE;
  if (host) {
    memcpy (dst, src, bytes);
    return TRUE;
  }
  return rank->backend->copy (stream, dst, src, bytes,
      LB_COPY_DEVICE_TO_DEVICE, error);
}

static inline const LbCollectivesClass *
klass_of (LbRank * rank)
{
  return lb_worker_group_get_collectives (rank->group);
}

static inline gpointer
state_of (LbRank * rank)
{
  return lb_worker_group_get_collectives_state (rank->group);
}

/**
 * lb_comm_backend_name:
 * @rank: a rank
 *
 * Returns: "local", "nccl" or "solo" (the class's name).
 */
const char *
lb_comm_backend_name (LbRank * rank)
{
  return klass_of (rank)->name;
}

/**
 * lb_comm_is_stream_ordered:
 * @rank: a rank
 *
 * Whether the group's collectives run in the order of the rank's streams
 * without a host rendezvous (LbCollectivesClass.stream_ordered: nccl,
 * solo), so that they may be overlapped with compute through events and
 * captured into graphs; the local collectives synchronise host threads.
 *
 * Returns: %TRUE for stream-ordered collectives.
 */
gboolean
lb_comm_is_stream_ordered (LbRank * rank)
{
  return klass_of (rank)->stream_ordered;
}

static gboolean
check_dtype (LbDType dtype, gboolean reduce, LbReduceOp op, GError ** error)
{
  if ((guint) dtype >= LB_DTYPE_COUNT) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "collective: invalid dtype %d", (int) dtype);
    return FALSE;
  }
  if (reduce && (op != LB_REDUCE_SUM || (dtype != LB_DTYPE_F32 &&
              dtype != LB_DTYPE_F64 && dtype != LB_DTYPE_I32 &&
              dtype != LB_DTYPE_I64))) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "collective: reduction %d over %s is not supported (sum of f32, "
        "f64, i32, i64)", (int) op, lb_dtype_name (dtype));
    return FALSE;
  }
  return TRUE;
}

static gboolean
check_rank (LbRank * rank, int r, const char *what, GError ** error)
{
  if (r < 0 || r >= rank->n_ranks) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "%s: rank %d is outside 0..%d", what, r, rank->n_ranks - 1);
    return FALSE;
  }
  return TRUE;
}

/* check_rank(), and @peer must not be the calling rank, which cannot
 * @verb ("send to") itself. */
static gboolean
check_peer (LbRank * rank, int peer, const char *what, const char *verb,
    GError ** error)
{
  if (!check_rank (rank, peer, what, error))
    return FALSE;
  if (peer == rank->rank) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "%s: rank %d cannot %s itself", what, peer, verb);
    return FALSE;
  }
  return TRUE;
}

/**
 * lb_comm_all_to_all:
 * @rank: the calling rank (every rank of the group calls)
 * @dtype: element type (any; pure data movement)
 * @send: n_ranks * @count elements; block j goes to rank j
 * @recv: n_ranks * @count elements; block i comes from rank i.  Must not
 *   overlap @send.
 * @count: elements per block
 * @error: %LB_ERROR_RANK_FAILED / %LB_ERROR_CANCELLED when the group
 *   aborts, %LB_ERROR_TIMEOUT past the group's timeout, %LB_ERROR_DEVICE
 *
 * The Ulysses exchange (spec B.3): with blocks laid out [rank][tokens]
 * [heads/n][head_dim] it scatters heads and gathers sequence.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_all_to_all (LbRank * rank, LbDType dtype, const void *send,
    void *recv, gsize count, GError ** error)
{
  if (!check_dtype (dtype, FALSE, 0, error))
    return FALSE;
  return klass_of (rank)->all_to_all (state_of (rank), rank, dtype, send,
      recv, count, error);
}

/**
 * lb_comm_all_to_all_v:
 * @rank: the calling rank
 * @dtype: element type
 * @send: send buffer
 * @send_counts: (array): n_ranks counts; @send_counts[j] elements go to j
 * @send_displs: (array): n_ranks offsets into @send, in elements
 * @recv: receive buffer, not overlapping @send
 * @recv_counts: (array): n_ranks counts; must equal what rank i sends here
 * @recv_displs: (array): n_ranks offsets into @recv, in elements
 * @error: as lb_comm_all_to_all(); %LB_ERROR_SHAPE when counts disagree
 *
 * All-to-all with unequal splits (sequence shards that do not divide
 * evenly, spec C.16).  The count arrays must stay valid until the
 * operation completes (lb_comm_group_end() inside a group).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_all_to_all_v (LbRank * rank, LbDType dtype, const void *send,
    const gsize * send_counts, const gsize * send_displs, void *recv,
    const gsize * recv_counts, const gsize * recv_displs, GError ** error)
{
  if (!check_dtype (dtype, FALSE, 0, error))
    return FALSE;
  return klass_of (rank)->all_to_all_v (state_of (rank), rank, dtype, send,
      send_counts, send_displs, recv, recv_counts, recv_displs, error);
}

/**
 * lb_comm_all_gather:
 * @rank: the calling rank
 * @dtype: element type
 * @send: @count elements
 * @recv: n_ranks * @count elements, block i from rank i.  @send may be
 *   @recv + rank * @count (in place).
 * @count: elements per rank
 * @error: as lb_comm_all_to_all()
 *
 * The end-of-forward gather of the head output (spec B.3) and the VAE
 * mid-block K/V gather (DESIGN.md section 3).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_all_gather (LbRank * rank, LbDType dtype, const void *send,
    void *recv, gsize count, GError ** error)
{
  if (!check_dtype (dtype, FALSE, 0, error))
    return FALSE;
  return klass_of (rank)->all_gather (state_of (rank), rank, dtype, send,
      recv, count, error);
}

/**
 * lb_comm_all_gather_v:
 * @rank: the calling rank
 * @dtype: element type
 * @send: @send_count elements
 * @send_count: must equal @recv_counts[rank]
 * @recv: receive buffer
 * @recv_counts: (array): n_ranks counts
 * @recv_displs: (array): n_ranks offsets into @recv, in elements
 * @error: as lb_comm_all_to_all(); %LB_ERROR_SHAPE when counts disagree
 *
 * All-gather with unequal contributions (uneven height bands, spec C.10).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_all_gather_v (LbRank * rank, LbDType dtype, const void *send,
    gsize send_count, void *recv, const gsize * recv_counts,
    const gsize * recv_displs, GError ** error)
{
  if (!check_dtype (dtype, FALSE, 0, error))
    return FALSE;
  if (send_count != recv_counts[rank->rank]) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "all_gather_v: rank %d sends %" G_GSIZE_FORMAT " elements but "
        "recv_counts says %" G_GSIZE_FORMAT, rank->rank, send_count,
        recv_counts[rank->rank]);
    return FALSE;
  }
  return klass_of (rank)->all_gather_v (state_of (rank), rank, dtype, send,
      send_count, recv, recv_counts, recv_displs, error);
}

/**
 * lb_comm_reduce_scatter:
 * @rank: the calling rank
 * @dtype: %LB_DTYPE_F32 (also F64, I32, I64)
 * @send: n_ranks * @recv_count elements
 * @recv: @recv_count elements: block @rank of the element-wise sum over
 *   ranks (summed in rank order, so every backend of the same order gives
 *   the same bits).  May be @send + rank * @recv_count.
 * @recv_count: elements per rank
 * @op: %LB_REDUCE_SUM
 * @error: as lb_comm_all_to_all(); %LB_ERROR_UNSUPPORTED for other dtypes
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_reduce_scatter (LbRank * rank, LbDType dtype, const void *send,
    void *recv, gsize recv_count, LbReduceOp op, GError ** error)
{
  if (!check_dtype (dtype, TRUE, op, error))
    return FALSE;
  return klass_of (rank)->reduce_scatter (state_of (rank), rank, dtype, send,
      recv, recv_count, op, error);
}

/**
 * lb_comm_all_reduce:
 * @rank: the calling rank
 * @dtype: %LB_DTYPE_F32 (also F64, I32, I64)
 * @send: @count elements
 * @recv: @count elements, the element-wise sum over ranks; may equal @send
 * @count: elements
 * @op: %LB_REDUCE_SUM
 * @error: as lb_comm_reduce_scatter()
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_all_reduce (LbRank * rank, LbDType dtype, const void *send,
    void *recv, gsize count, LbReduceOp op, GError ** error)
{
  if (!check_dtype (dtype, TRUE, op, error))
    return FALSE;
  return klass_of (rank)->all_reduce (state_of (rank), rank, dtype, send,
      recv, count, op, error);
}

/**
 * lb_comm_broadcast:
 * @rank: the calling rank
 * @dtype: element type
 * @buf: @count elements: input on @root, output elsewhere
 * @count: elements
 * @root: the sending rank
 * @error: as lb_comm_all_to_all(); %LB_ERROR_INVALID_ARGUMENT for @root
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_broadcast (LbRank * rank, LbDType dtype, void *buf, gsize count,
    int root, GError ** error)
{
  if (!check_dtype (dtype, FALSE, 0, error) ||
      !check_rank (rank, root, "broadcast", error))
    return FALSE;
  return klass_of (rank)->broadcast (state_of (rank), rank, dtype, buf,
      count, root, error);
}

/**
 * lb_comm_send:
 * @rank: the calling rank
 * @dtype: element type
 * @buf: @count elements, valid until the matching receive completed
 * @count: elements; the receiver must ask for as many
 * @peer: the receiving rank (not @rank)
 * @error: as lb_comm_all_to_all()
 *
 * Point-to-point send, matched in order with lb_comm_recv() on @peer (the
 * halo exchange, DESIGN.md section 3).  Outside a group it is a rendezvous
 * on "local": it returns once @peer has copied the data, so two ranks that
 * send to each other must bracket send and recv with lb_comm_group_start()
 * / lb_comm_group_end().
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_send (LbRank * rank, LbDType dtype, const void *buf, gsize count,
    int peer, GError ** error)
{
  if (!check_dtype (dtype, FALSE, 0, error) ||
      !check_peer (rank, peer, "send", "send to", error))
    return FALSE;
  return klass_of (rank)->send (state_of (rank), rank, dtype, buf, count,
      peer, error);
}

/**
 * lb_comm_recv:
 * @rank: the calling rank
 * @dtype: element type
 * @buf: room for @count elements
 * @count: elements; must equal the matching send's count
 * @peer: the sending rank (not @rank)
 * @error: as lb_comm_all_to_all(); %LB_ERROR_SHAPE on a count mismatch
 *
 * Point-to-point receive of the next message from @peer.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_recv (LbRank * rank, LbDType dtype, void *buf, gsize count, int peer,
    GError ** error)
{
  if (!check_dtype (dtype, FALSE, 0, error) ||
      !check_peer (rank, peer, "recv", "receive from", error))
    return FALSE;
  return klass_of (rank)->recv (state_of (rank), rank, dtype, buf, count,
      peer, error);
}

/**
 * lb_comm_barrier:
 * @rank: the calling rank
 * @error: as lb_comm_all_to_all()
 *
 * Returns when every rank of the group has called it (on "nccl": when
 * every rank's stream has reached it).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_barrier (LbRank * rank, GError ** error)
{
  return klass_of (rank)->barrier (state_of (rank), rank, error);
}

/**
 * lb_comm_group_start:
 * @rank: the calling rank
 * @error: %LB_ERROR_INVALID_ARGUMENT when already inside a group (local)
 *
 * Starts a group of independent operations (e.g. the q, k, v all-to-alls
 * of spec B.3, or a halo exchange's sends and receives): they are only
 * queued until lb_comm_group_end(), which completes them together (local:
 * one publish barrier, one final barrier; nccl: ncclGroupStart/End).  No
 * operation of a group may read what another one writes, and buffers must
 * stay untouched until the group ends.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_group_start (LbRank * rank, GError ** error)
{
  return klass_of (rank)->group_start (state_of (rank), rank, error);
}

/**
 * lb_comm_group_end:
 * @rank: the calling rank
 * @error: the first error of the grouped operations
 *
 * Completes the operations queued since lb_comm_group_start().
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_group_end (LbRank * rank, GError ** error)
{
  return klass_of (rank)->group_end (state_of (rank), rank, error);
}

/**
 * lb_comm_synchronize:
 * @rank: the calling rank
 * @error: %LB_ERROR_TIMEOUT, %LB_ERROR_RANK_FAILED, %LB_ERROR_DEVICE
 *
 * Waits until every operation this rank issued is complete on its stream,
 * bounded by the group's timeout and released by its abort flag.  On
 * "local" it only checks the abort flag (operations complete on return).
 * Rank code on NCCL must wait through this, not a plain stream
 * synchronisation, to be released when another rank fails.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_synchronize (LbRank * rank, GError ** error)
{
  return klass_of (rank)->synchronize (state_of (rank), rank, error);
}

static gboolean
check_tensor (const LbTensor * t, const char *what, const char *name,
    GError ** error)
{
  if (!lb_tensor_is_contiguous (t) || t->ndim < 1) {
    g_autofree char *s = lb_tensor_shape_string (t);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "%s: %s %s must be contiguous with at least one dimension", what,
        name, s);
    return FALSE;
  }
  return TRUE;
}

/**
 * lb_comm_all_to_all_tensor:
 * @rank: the calling rank
 * @send: contiguous [n_ranks, ...] tensor; slice j goes to rank j
 * @recv: contiguous tensor of equal dtype and shape; slice i from rank i
 * @error: %LB_ERROR_SHAPE, or as lb_comm_all_to_all()
 *
 * lb_comm_all_to_all() over dim 0 of two tensors.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_all_to_all_tensor (LbRank * rank, const LbTensor * send,
    LbTensor * recv, GError ** error)
{
  if (!check_tensor (send, "all_to_all", "send", error) ||
      !check_tensor (recv, "all_to_all", "recv", error))
    return FALSE;
  if (send->dtype != recv->dtype || !lb_tensor_same_shape (send, recv) ||
      send->shape[0] != rank->n_ranks) {
    g_autofree char *a = lb_tensor_shape_string (send);
    g_autofree char *b = lb_tensor_shape_string (recv);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "all_to_all: send %s and recv %s must have equal dtype and shape "
        "with dim 0 = %d ranks", a, b, rank->n_ranks);
    return FALSE;
  }
  gsize count = (gsize) (lb_tensor_numel (send) / rank->n_ranks);
  return lb_comm_all_to_all (rank, send->dtype, send->data, recv->data,
      count, error);
}

/**
 * lb_comm_all_gather_tensor:
 * @rank: the calling rank
 * @send: contiguous tensor [...]
 * @recv: contiguous tensor [n_ranks, ...] of the same dtype; slice i is
 *   rank i's @send
 * @error: %LB_ERROR_SHAPE, or as lb_comm_all_gather()
 *
 * lb_comm_all_gather() of equal tensors.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_comm_all_gather_tensor (LbRank * rank, const LbTensor * send,
    LbTensor * recv, GError ** error)
{
  if (!check_tensor (send, "all_gather", "send", error) ||
      !check_tensor (recv, "all_gather", "recv", error))
    return FALSE;
  if (send->dtype != recv->dtype ||
      lb_tensor_numel (recv) != lb_tensor_numel (send) * rank->n_ranks) {
    g_autofree char *a = lb_tensor_shape_string (send);
    g_autofree char *b = lb_tensor_shape_string (recv);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "all_gather: recv %s must hold %d copies of send %s, same dtype", b,
        rank->n_ranks, a);
    return FALSE;
  }
  return lb_comm_all_gather (rank, send->dtype, send->data, recv->data,
      (gsize) lb_tensor_numel (send), error);
}

/**
 * lb_split_rows:
 * @total: rows to split (e.g. 58 latent rows, spec C.10)
 * @n_parts: number of parts (ranks)
 * @part: 0..@n_parts-1
 * @start: (out): first row of @part
 * @count: (out): rows of @part
 *
 * The balanced split every sharded path uses: the first total % n parts
 * get one extra row (58 over 4: 15, 15, 14, 14).
 */
void
lb_split_rows (int64_t total, int n_parts, int part, int64_t * start,
    int64_t * count)
{
  int64_t base = total / n_parts, rem = total % n_parts;
  *count = base + (part < rem ? 1 : 0);
  *start = part * base + MIN ((int64_t) part, rem);
}

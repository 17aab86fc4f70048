/* lingbot-gst: "solo" collectives (one rank standing in for rank 0 of N)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A worker group made with lb_worker_group_new_solo (N ranks) has one
 * rank thread whose LbRank says rank 0 of N ranks.  Code above it (the
 * DiT's Ulysses sharding) then computes exactly what rank 0 of an N-rank
 * world computes: its token band, its heads, its KV cache.  The peers do
 * not exist, so each collective moves the bytes rank 0 would receive from
 * them with copies of rank 0's own buffers: the slot of peer j of a
 * receive buffer gets as many elements as peer j would send, taken from
 * what rank 0 sends to j (or from its first longest send block when that
 * is shorter, repeated when even that is too short).  The values are
 * meaningless; the sizes, the number of operations and the streams they
 * run on are those of the real rank 0.
 *
 * Copies are memcpy on the CPU backend and the backend's device-to-device
 * copy elsewhere, enqueued on the rank's communication stream when one is
 * set (LbRank.comm_stream) and on its stream otherwise, without any
 * synchronisation: the class is stream ordered as NCCL is, so the DiT
 * takes the same overlapped and graph-replayed paths as on NCCL ranks.
 * Only the operations the DiT uses have a stand-in (all-to-all,
 * all-gather, a broadcast from rank 0, barriers); reductions, broadcasts
 * from a peer and point-to-point messages need data that only the peers
 * would have, and report %LB_ERROR_UNSUPPORTED.
 */
#include "comm/comm-private.h"

typedef struct
{
  LbWorkerGroup *group;
  gboolean host;
  int depth;                    /* group_start nesting (one rank) */
  guint64 moved;                /* atomic: bytes written into peer slots */
} SoloComm;

static gpointer
solo_create (LbWorkerGroup * group, GError ** error)
{
  if (lb_worker_group_get_n_ranks (group) != 1) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "solo collectives: the group has %d rank threads, expected one",
        lb_worker_group_get_n_ranks (group));
    return NULL;
  }
  SoloComm *c = g_new0 (SoloComm, 1);
  c->group = group;
  c->host = lb_worker_group_get_backend (group)->device_type == LB_DEVICE_CPU;
  return c;
}

static void
solo_destroy (gpointer state)
{
  g_free (state);
}

static gboolean
solo_reset (gpointer state, GError ** error)
{
  SoloComm *c = state;
  c->depth = 0;
  return TRUE;
}

static void
solo_abort (gpointer state)
{
  /* nothing waits inside this class */
}

/* One copy of @bytes on the rank's communication stream (or stream). */
static gboolean
move (SoloComm * c, LbRank * rank, void *dst, const void *src, gsize bytes,
    GError ** error)
{
  return lb_comm_copy (rank, rank->comm_stream ? rank->comm_stream :
      rank->stream, c->host, dst, src, bytes, error);
}

/* Fills @bytes of a peer's receive slot from @src (@src_bytes long),
 * repeating @src when it is shorter, and counts them as moved. */
static gboolean
fill_slot (SoloComm * c, LbRank * rank, int peer, char *dst,
    const char *src, gsize src_bytes, gsize bytes, GError ** error)
{
  if (bytes == 0)
    return TRUE;
  if (src_bytes == 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "solo collectives: rank 0 sends nothing, so the %" G_GSIZE_FORMAT
        " bytes rank %d would send it have no stand-in", bytes, peer);
    return FALSE;
  }
  for (gsize off = 0; off < bytes; off += src_bytes)
    if (!move (c, rank, dst + off, src, MIN (src_bytes, bytes - off), error))
      return FALSE;
  __atomic_fetch_add (&c->moved, (guint64) bytes, __ATOMIC_RELAXED);
  return TRUE;
}

static gboolean
solo_all_to_all_v (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, const gsize * sc, const gsize * sd, void *recv,
    const gsize * rc, const gsize * rd, GError ** error)
{
  SoloComm *c = state;
  const gsize es = lb_dtype_size (dtype);
  const int n = rank->n_ranks;
  if (!lb_rank_check_abort (rank, error))
    return FALSE;
  if (sc[0] != rc[0]) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "all_to_all_v: rank 0 sends itself %" G_GSIZE_FORMAT " elements but "
        "expects %" G_GSIZE_FORMAT, sc[0], rc[0]);
    return FALSE;
  }
  int longest = 0;
  for (int j = 1; j < n; j++)
    if (sc[j] > sc[longest])
      longest = j;
  if (!move (c, rank, (char *) recv + rd[0] * es, (const char *) send +
          sd[0] * es, rc[0] * es, error))
    return FALSE;
  for (int j = 1; j < n; j++) {
    const int from = sc[j] >= rc[j] ? j : longest;
    if (!fill_slot (c, rank, j, (char *) recv + rd[j] * es,
            (const char *) send + sd[from] * es, sc[from] * es, rc[j] * es,
            error))
      return FALSE;
  }
  return TRUE;
}

static gboolean
solo_all_gather_v (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, gsize send_count, void *recv, const gsize * rc,
    const gsize * rd, GError ** error)
{
  SoloComm *c = state;
  const gsize es = lb_dtype_size (dtype);
  if (!lb_rank_check_abort (rank, error) ||
      !move (c, rank, (char *) recv + rd[0] * es, send, send_count * es, error))
    return FALSE;
  for (int j = 1; j < rank->n_ranks; j++)
    if (!fill_slot (c, rank, j, (char *) recv + rd[j] * es, send,
            send_count * es, rc[j] * es, error))
      return FALSE;
  return TRUE;
}

/* An all-to-all (@gather FALSE) or all-gather of @count elements per
 * rank: the _v variant with counts @count and displacements j * @count. */
static gboolean
solo_uniform (gpointer state, LbRank * rank, LbDType dtype, const void *send,
    void *recv, gsize count, gboolean gather, GError ** error)
{
  const int n = rank->n_ranks;
  g_autofree gsize *cnt = g_new (gsize, 2 * n);
  for (int j = 0; j < n; j++) {
    cnt[j] = count;
    cnt[n + j] = (gsize) j *count;
  }
  if (gather)
    return solo_all_gather_v (state, rank, dtype, send, count, recv, cnt,
        cnt + n, error);
  return solo_all_to_all_v (state, rank, dtype, send, cnt, cnt + n, recv,
      cnt, cnt + n, error);
}

static gboolean
solo_all_to_all (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize count, GError ** error)
{
  return solo_uniform (state, rank, dtype, send, recv, count, FALSE, error);
}

static gboolean
solo_all_gather (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize count, GError ** error)
{
  return solo_uniform (state, rank, dtype, send, recv, count, TRUE, error);
}

static gboolean
unsupported (const char *what, GError ** error)
{
  g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
      "solo collectives: %s needs data only the other ranks have (a solo "
      "rank stands in for rank 0 in all-to-all and all-gather only)", what);
  return FALSE;
}

static gboolean
solo_reduce_scatter (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize recv_count, LbReduceOp op,
    GError ** error)
{
  return unsupported ("reduce_scatter", error);
}

static gboolean
solo_all_reduce (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize count, LbReduceOp op, GError ** error)
{
  return unsupported ("all_reduce", error);
}

static gboolean
solo_broadcast (gpointer state, LbRank * rank, LbDType dtype, void *buf,
    gsize count, int root, GError ** error)
{
  /* from rank 0: rank 0 receives nothing */
  if (root == 0)
    return lb_rank_check_abort (rank, error);
  return unsupported ("a broadcast from another rank", error);
}

static gboolean
solo_send (gpointer state, LbRank * rank, LbDType dtype, const void *buf,
    gsize count, int peer, GError ** error)
{
  return unsupported ("send", error);
}

static gboolean
solo_recv (gpointer state, LbRank * rank, LbDType dtype, void *buf,
    gsize count, int peer, GError ** error)
{
  return unsupported ("recv", error);
}

static gboolean
solo_barrier (gpointer state, LbRank * rank, GError ** error)
{
  return lb_rank_check_abort (rank, error);
}

/* Operations run when called: the ones of a group are independent, and
 * each copies only from the rank's own send buffers. */
static gboolean
solo_group_start (gpointer state, LbRank * rank, GError ** error)
{
  SoloComm *c = state;
  if (c->depth > 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "group_start: rank 0 is already inside a group");
    return FALSE;
  }
  c->depth = 1;
  return TRUE;
}

static gboolean
solo_group_end (gpointer state, LbRank * rank, GError ** error)
{
  SoloComm *c = state;
  if (c->depth == 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "group_end: rank 0 is not inside a group");
    return FALSE;
  }
  c->depth = 0;
  return lb_rank_check_abort (rank, error);
}

static gboolean
solo_synchronize (gpointer state, LbRank * rank, GError ** error)
{
  SoloComm *c = state;
  if (!lb_rank_check_abort (rank, error))
    return FALSE;
  if (c->host)
    return TRUE;
  return rank->backend->stream_synchronize (rank->stream, error) &&
      (rank->comm_stream == NULL ||
      rank->backend->stream_synchronize (rank->comm_stream, error));
}

static const LbCollectivesClass solo_class = {
  .name = "solo",
  LB_COLLECTIVES_OPS (solo),
  .stream_ordered = TRUE,
};

/**
 * lb_solo_collectives:
 *
 * The collectives of a group made with lb_worker_group_new_solo():
 * one rank thread standing in for rank 0 of N ranks, whose
 * all-to-alls and all-gathers fill every peer's receive slot with as many
 * bytes as that peer would send, copied from the rank's own send buffers
 * (on the rank's communication stream when set, else its stream; stream
 * ordered, no synchronisation).  Reductions, broadcasts from a peer and
 * point-to-point messages report %LB_ERROR_UNSUPPORTED.  Wrapping it
 * (copying the class and replacing members, as lingbot-bench does to
 * count bytes) keeps its behaviour.
 *
 * Returns: (transfer none): the static class, named "solo".
 */
const LbCollectivesClass *
lb_solo_collectives (void)
{
  return &solo_class;
}

/**
 * lb_solo_collectives_get_moved:
 * @group: a worker group
 *
 * What the solo collectives of @group wrote into the receive slots of the
 * absent peers since the group was made: the bytes the real rank 0 would
 * have received from the other ranks (its own block not counted).
 *
 * Returns: the bytes; 0 when @group does not use the solo collectives
 * (itself or a copy of it with the same name).
 */
guint64
lb_solo_collectives_get_moved (LbWorkerGroup * group)
{
  const LbCollectivesClass *k = lb_worker_group_get_collectives (group);
  if (k == NULL || g_strcmp0 (k->name, "solo") != 0)
    return 0;
  SoloComm *c = lb_worker_group_get_collectives_state (group);
  return c ? __atomic_load_n (&c->moved, __ATOMIC_RELAXED) : 0;
}

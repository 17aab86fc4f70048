/* lingbot-gst: collectives over the ranks of a worker group
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Every rank of a group calls the same collective with matching arguments
 * (like MPI/NCCL).  Counts and displacements are in elements of @dtype.
 * Three backends implement LbCollectivesClass: "local" (CPU ranks in one
 * process, shared memory), "nccl" (comm/collectives-nccl.c) and "solo"
 * (one rank standing in for rank 0 of N, comm/collectives-solo.c).
 *
 * Completion is stream ordered: on "local" an operation is complete when
 * the call returns (or at lb_comm_group_end()); on "nccl" it is enqueued on
 * the rank's stream, and lb_comm_synchronize() waits for it with the
 * group's timeout and abort flag.  See docs/design/comm.md.
 */
#pragma once

#include "comm/worker-group.h"

G_BEGIN_DECLS

typedef enum
{
  LB_REDUCE_SUM = 0,
} LbReduceOp;

/**
 * LbCollectivesClass:
 * @name: "local" or "nccl"
 * @create: builds the per-group state (communicators) on the orchestrating
 *   thread after every rank's stream exists
 * @destroy: frees it (group idle or shut down)
 * @reset: called with the group idle after an abort; bring the state back
 *   to usable (local: clear barrier and mailbox counters; nccl: re-create
 *   the communicators).  May fail, then the group stays aborted.
 * @abort: wakes every rank waiting inside the backend (the group's abort
 *   flag is already set); called with the group's lock held
 * @stream_ordered: operations are enqueued on the rank's stream (or
 *   LbRank.comm_stream) and complete in stream order, with no host
 *   rendezvous between ranks (nccl, solo): callers may overlap them with
 *   compute through events and capture them into graphs
 *
 * The operations take the state from @create and the calling rank; their
 * arguments were validated by the lb_comm_*() wrappers.  Everything is in
 * elements of @dtype.  @group_start/@group_end bracket independent
 * operations that complete together.
 */
struct _LbCollectivesClass
{
  const char *name;
    gpointer (*create) (LbWorkerGroup * group, GError ** error);
  void (*destroy) (gpointer state);
    gboolean (*reset) (gpointer state, GError ** error);
  void (*abort) (gpointer state);

    gboolean (*all_to_all) (gpointer state, LbRank * rank, LbDType dtype,
      const void *send, void *recv, gsize count, GError ** error);
    gboolean (*all_to_all_v) (gpointer state, LbRank * rank, LbDType dtype,
      const void *send, const gsize * send_counts, const gsize * send_displs,
      void *recv, const gsize * recv_counts, const gsize * recv_displs,
      GError ** error);
    gboolean (*all_gather) (gpointer state, LbRank * rank, LbDType dtype,
      const void *send, void *recv, gsize count, GError ** error);
    gboolean (*all_gather_v) (gpointer state, LbRank * rank, LbDType dtype,
      const void *send, gsize send_count, void *recv,
      const gsize * recv_counts, const gsize * recv_displs, GError ** error);
    gboolean (*reduce_scatter) (gpointer state, LbRank * rank, LbDType dtype,
      const void *send, void *recv, gsize recv_count, LbReduceOp op,
      GError ** error);
    gboolean (*all_reduce) (gpointer state, LbRank * rank, LbDType dtype,
      const void *send, void *recv, gsize count, LbReduceOp op,
      GError ** error);
    gboolean (*broadcast) (gpointer state, LbRank * rank, LbDType dtype,
      void *buf, gsize count, int root, GError ** error);
    gboolean (*send) (gpointer state, LbRank * rank, LbDType dtype,
      const void *buf, gsize count, int peer, GError ** error);
    gboolean (*recv) (gpointer state, LbRank * rank, LbDType dtype,
      void *buf, gsize count, int peer, GError ** error);
    gboolean (*barrier) (gpointer state, LbRank * rank, GError ** error);
    gboolean (*group_start) (gpointer state, LbRank * rank, GError ** error);
    gboolean (*group_end) (gpointer state, LbRank * rank, GError ** error);
    gboolean (*synchronize) (gpointer state, LbRank * rank, GError ** error);
  gboolean stream_ordered;
};

void lb_collectives_register (LbDeviceType device_type,
    const LbCollectivesClass * klass);
const LbCollectivesClass *lb_collectives_lookup (LbDeviceType device_type);

/* The NCCL collectives live in the CUDA backend module (they call
 * cudart): the registry takes them from lb_backend_get_proc (cuda,
 * LB_COLLECTIVES_NCCL_PROC), an LbCollectivesProc that returns NULL with
 * an error when NCCL cannot be loaded. */
#define LB_COLLECTIVES_NCCL_PROC "lb_collectives_nccl"
typedef const LbCollectivesClass *(*LbCollectivesProc) (GError ** error);

const LbCollectivesClass *lb_solo_collectives (void);
guint64 lb_solo_collectives_get_moved (LbWorkerGroup * group);

const char *lb_comm_backend_name (LbRank * rank);
gboolean lb_comm_is_stream_ordered (LbRank * rank);

gboolean lb_comm_all_to_all (LbRank * rank, LbDType dtype, const void *send,
    void *recv, gsize count, GError ** error);
gboolean lb_comm_all_to_all_v (LbRank * rank, LbDType dtype,
    const void *send, const gsize * send_counts, const gsize * send_displs,
    void *recv, const gsize * recv_counts, const gsize * recv_displs,
    GError ** error);
gboolean lb_comm_all_gather (LbRank * rank, LbDType dtype, const void *send,
    void *recv, gsize count, GError ** error);
gboolean lb_comm_all_gather_v (LbRank * rank, LbDType dtype,
    const void *send, gsize send_count, void *recv, const gsize * recv_counts,
    const gsize * recv_displs, GError ** error);
gboolean lb_comm_reduce_scatter (LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize recv_count, LbReduceOp op,
    GError ** error);
gboolean lb_comm_all_reduce (LbRank * rank, LbDType dtype, const void *send,
    void *recv, gsize count, LbReduceOp op, GError ** error);
gboolean lb_comm_broadcast (LbRank * rank, LbDType dtype, void *buf,
    gsize count, int root, GError ** error);
gboolean lb_comm_send (LbRank * rank, LbDType dtype, const void *buf,
    gsize count, int peer, GError ** error);
gboolean lb_comm_recv (LbRank * rank, LbDType dtype, void *buf, gsize count,
    int peer, GError ** error);
gboolean lb_comm_barrier (LbRank * rank, GError ** error);
gboolean lb_comm_group_start (LbRank * rank, GError ** error);
gboolean lb_comm_group_end (LbRank * rank, GError ** error);
gboolean lb_comm_synchronize (LbRank * rank, GError ** error);

gboolean lb_comm_all_to_all_tensor (LbRank * rank, const LbTensor * send,
    LbTensor * recv, GError ** error);
gboolean lb_comm_all_gather_tensor (LbRank * rank, const LbTensor * send,
    LbTensor * recv, GError ** error);

void lb_split_rows (int64_t total, int n_parts, int part, int64_t * start,
    int64_t * count);

G_END_DECLS

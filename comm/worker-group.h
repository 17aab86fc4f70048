/* lingbot-gst: worker groups (one thread per rank/device)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A worker group owns N ranks.  Each rank is one thread bound to one device
 * with its own LbStream and a FIFO of jobs.  The orchestrating thread
 * submits a per-rank function to all ranks (or to one) and waits; it never
 * touches tensor payloads.  See docs/design/comm.md and DESIGN.md section 3.
 */
#pragma once

#include "kernels/backend.h"
#include "kernels/error.h"

G_BEGIN_DECLS

typedef struct _LbWorkerGroup LbWorkerGroup;
typedef struct _LbRank LbRank;
typedef struct _LbWorkerJob LbWorkerJob;
typedef struct _LbCollectivesClass LbCollectivesClass;

/* Default deadline of every rank-side wait (collectives, barriers,
 * channels, queue space), in milliseconds. */
#define LB_COMM_DEFAULT_TIMEOUT_MS 60000

/* Jobs a rank can hold queued before a submitter waits for space. */
#define LB_WORKER_QUEUE_LEN 64

/**
 * LbRank:
 * @group: the group this rank belongs to
 * @rank: index of this rank in the group, 0..@n_ranks-1
 * @n_ranks: size of the group
 * @backend: the backend of every rank of the group
 * @device: the device ordinal this rank computes on (for the CPU backend a
 *   virtual device id, see lb_worker_group_new())
 * @stream: this rank's execution queue, created on the rank's own thread
 * @comm_stream: (nullable): when set, backend-native collectives (NCCL)
 *   are enqueued on this stream instead of @stream; the caller orders the
 *   two with events (LbBackend.event_record / stream_wait_event).  The
 *   local collectives ignore it.  %NULL by default.
 * @user_data: free for the layer above (per-rank session state)
 *
 * What a rank function sees.  Owned by the group; valid until the group is
 * freed.  Only the rank's own thread may use @stream.
 */
struct _LbRank
{
  LbWorkerGroup *group;
  int rank;
  int n_ranks;
  LbBackend *backend;
  int device;
  LbStream *stream;
  LbStream *comm_stream;
  gpointer user_data;
};

/**
 * LbRankFunc:
 * @rank: the rank running the function, on its own thread
 * @user_data: what was given to lb_worker_group_submit()
 * @error: set it when returning %FALSE
 *
 * Returns: %TRUE on success.  On %FALSE the group aborts: every other
 * rank's pending wait returns %LB_ERROR_RANK_FAILED promptly.
 */
typedef gboolean (*LbRankFunc) (LbRank * rank, gpointer user_data,
    GError ** error);

/**
 * LbWorkerJob:
 *
 * A caller-owned completion record (put it on the stack or in a session
 * struct: submitting never allocates).  Zero-initialise it (or use
 * %LB_WORKER_JOB_INIT) before its first submit; it may be submitted to
 * several ranks and reused after lb_worker_group_wait() returned.
 */
struct _LbWorkerJob
{
  /*< private > */
  int pending;
  GError *error;
};

#define LB_WORKER_JOB_INIT { 0, NULL }

/**
 * LbWorkerGroupOptions:
 * @timeout_ms: deadline of every rank-side wait, 0 for
 *   %LB_COMM_DEFAULT_TIMEOUT_MS
 * @collectives: the collectives backend; %NULL picks the one registered for
 *   the backend's device type (lb_collectives_register()), else the local one
 * @name: used in thread names ("lb-NAME-RANK") and messages; may be %NULL
 */
typedef struct
{
  guint timeout_ms;
  const LbCollectivesClass *collectives;
  const char *name;
} LbWorkerGroupOptions;

LbWorkerGroup *lb_worker_group_new (LbBackend * backend, int n_ranks,
    const int *ordinals, const LbWorkerGroupOptions * options, GError ** error);
LbWorkerGroup *lb_worker_group_new_solo (LbBackend * backend, int ordinal,
    int world_ranks, const LbWorkerGroupOptions * options, GError ** error);
LbWorkerGroup *lb_worker_group_ref (LbWorkerGroup * group);
void lb_worker_group_unref (LbWorkerGroup * group);
void lb_worker_group_shutdown (LbWorkerGroup * group);

int lb_worker_group_get_n_ranks (LbWorkerGroup * group);
LbRank *lb_worker_group_get_rank (LbWorkerGroup * group, int rank);
LbBackend *lb_worker_group_get_backend (LbWorkerGroup * group);
const char *lb_worker_group_get_name (LbWorkerGroup * group);
guint lb_worker_group_get_timeout_ms (LbWorkerGroup * group);
void lb_worker_group_set_timeout_ms (LbWorkerGroup * group, guint timeout_ms);

gboolean lb_worker_group_submit (LbWorkerGroup * group, LbWorkerJob * job,
    int rank, LbRankFunc func, gpointer user_data, GError ** error);
gboolean lb_worker_group_wait (LbWorkerGroup * group, LbWorkerJob * job,
    GError ** error);
gboolean lb_worker_group_run (LbWorkerGroup * group, LbRankFunc func,
    gpointer user_data, GError ** error);
gboolean lb_worker_group_run_on (LbWorkerGroup * group, int rank,
    LbRankFunc func, gpointer user_data, GError ** error);

void lb_worker_group_cancel (LbWorkerGroup * group);
void lb_worker_group_cancel_after (LbWorkerGroup * group, guint timeout_ms);
gboolean lb_worker_group_is_aborted (LbWorkerGroup * group);
gboolean lb_worker_group_is_broken (LbWorkerGroup * group);
gboolean lb_rank_check_abort (LbRank * rank, GError ** error);
gint64 lb_rank_deadline (LbRank * rank);

G_END_DECLS

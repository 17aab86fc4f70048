/* lingbot-gst: worker groups (one thread per rank/device)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Locking: one group mutex guards the rank queues, job counters and the
 * abort state; each rank thread sleeps on its own GCond, submitters and
 * waiters on done_cond.  The abort flag is also readable without the lock
 * (atomic) so that rank-side waits in collectives and channels can poll it.
 *
 * A rank that stops answering (a kernel, driver call or collective that
 * never returns): once the group is aborted, waiters give the ranks still
 * busy the group's timeout to come back; a rank that does not is
 * abandoned (abandon_locked()): its jobs complete with an error, the group
 * is broken for good, and its thread is never joined and never touches a
 * job again.  A broken group's memory is never freed (the abandoned thread
 * may still use it); its healthy threads are stopped and joined.
 */
#include "comm/comm-private.h"

#include <omp.h>
#include <string.h>

enum
{
  ABORT_NONE = 0,
  ABORT_FAILED = 1,
  ABORT_CANCELLED = 2,
};

typedef struct
{
  LbRankFunc func;
  gpointer user_data;
  LbWorkerJob *job;
} QueuedJob;

typedef struct
{
  LbRank pub;                   /* first: LbRank* <-> RankPriv* */
  GThread *thread;
  GCond cond;
  QueuedJob queue[LB_WORKER_QUEUE_LEN];
  guint head;
  guint len;
  LbWorkerJob *running;         /* the job the thread runs now, or NULL */
  gboolean abandoned;           /* stopped answering: never joined */
  gboolean exited;              /* left its loop: joinable */
} RankPriv;

typedef struct
{
  LbAbortNotify notify;
  gpointer data;
} AbortNotify;

struct _LbWorkerGroup
{
  gatomicrefcount ref;
  char *name;
  LbBackend *backend;
  int n;
  int cpu_threads;              /* OpenMP threads shared by the CPU ranks */
  RankPriv *ranks;

  GMutex lock;
  GCond done_cond;
  gint abort_state;             /* atomic; ABORT_* */
  gint abort_rank;              /* atomic; the rank that failed first */
  gint timeout_ms;              /* atomic */
  gint64 abort_time;            /* monotonic µs of the last abort */
  gint64 cancel_deadline;       /* lb_worker_group_cancel_after(), 0: none */
  gint broken;                  /* atomic; a rank was abandoned */
  int inflight;
  gboolean shutdown;
  gboolean joined;
  int started;
  GError *init_error;

  const LbCollectivesClass *klass;
  gpointer comm;
  gboolean native;              /* holds native_groups' claim on devices */
  GArray *notifies;             /* AbortNotify */
};

/* The live groups whose collectives are the device library registered for
 * their device type (NCCL): at most one such communicator set per device
 * (native_claim()). */
static GMutex native_lock;
static GList *native_groups;

static gboolean
groups_share_device (LbWorkerGroup * a, LbWorkerGroup * b)
{
  if (a->backend != b->backend)
    return FALSE;
  for (int i = 0; i < a->n; i++)
    for (int j = 0; j < b->n; j++)
      if (a->ranks[i].pub.device == b->ranks[j].pub.device)
        return TRUE;
  return FALSE;
}

/* One ordering of device collectives per device.  Device collectives
 * (NCCL) on two communicator sets that share a device and are issued from
 * unrelated threads (the DiT's world group and a decoder group attached on
 * the same GPUs) may deadlock: a collective kernel holds its device until
 * every rank of its communicator arrives, and nothing orders the two sets'
 * kernels the same way on every device.  So the registered device class
 * goes to the first live group on a set of devices; a later group with no
 * explicit class (@chosen %NULL) that shares one of them takes the local
 * collectives, whose device copies and host barriers never wait for
 * another group's work.  Called with the ranks' devices set. */
static void
native_claim (LbWorkerGroup * g, const LbCollectivesClass * chosen)
{
  const LbCollectivesClass *native = lb_collectives_lookup
      (g->backend->device_type);
  if (native == lb_local_collectives () || g->klass != native)
    return;
  g_mutex_lock (&native_lock);
  for (GList * l = native_groups; l && chosen == NULL; l = l->next)
    if (groups_share_device (g, l->data)) {
      g->klass = lb_local_collectives ();
      break;
    }
  if (g->klass == native) {
    g->native = TRUE;
    native_groups = g_list_prepend (native_groups, g);
  }
  g_mutex_unlock (&native_lock);
}

static void
native_release (LbWorkerGroup * g)
{
  if (!g->native)
    return;
  g_mutex_lock (&native_lock);
  native_groups = g_list_remove (native_groups, g);
  g_mutex_unlock (&native_lock);
  g->native = FALSE;
}

static gboolean
is_abort_error (const GError * e)
{
  return e != NULL && e->domain == LB_ERROR &&
      (e->code == LB_ERROR_RANK_FAILED || e->code == LB_ERROR_CANCELLED);
}

/* Group lock held.  @why: the error of @rank that aborts the group
 * ("rank N: ..."), handed to the abort notifies; %NULL for a cancel. */
static void
group_abort_locked (LbWorkerGroup * g, int state, int rank, const GError * why)
{
  if (!g_atomic_int_compare_and_exchange (&g->abort_state, ABORT_NONE, state))
    return;
  g_atomic_int_set (&g->abort_rank, rank);
  g->abort_time = g_get_monotonic_time ();
  g->cancel_deadline = 0;
  if (g->klass != NULL && g->comm != NULL && g->klass->abort != NULL)
    g->klass->abort (g->comm);
  for (guint i = 0; i < g->notifies->len; i++) {
    AbortNotify *an = &g_array_index (g->notifies, AbortNotify, i);
    an->notify (an->data, why);
  }
  for (int r = 0; r < g->n; r++)
    g_cond_broadcast (&g->ranks[r].cond);
  g_cond_broadcast (&g->done_cond);
}

/* Group lock held; the group is idle (no job queued or running). */
static void
group_recover_locked (LbWorkerGroup * g)
{
  g->cancel_deadline = 0;
  if (g_atomic_int_get (&g->abort_state) == ABORT_NONE || g->shutdown
      || g_atomic_int_get (&g->broken))
    return;
  if (g->klass != NULL && g->comm != NULL && g->klass->reset != NULL) {
    GError *err = NULL;
    if (!g->klass->reset (g->comm, &err)) {
      /* Stays aborted: later submits fail with this group's abort error. */
      g_warning ("worker group %s: collectives reset failed: %s", g->name,
          err->message);
      g_clear_error (&err);
      return;
    }
  }
  g_atomic_int_set (&g->abort_state, ABORT_NONE);
  g_atomic_int_set (&g->abort_rank, -1);
}

static void
job_record_error (LbWorkerJob * job, GError * e)
{
  if (job->error == NULL) {
    job->error = e;
  } else if (is_abort_error (job->error) && !is_abort_error (e)) {
    /* The root cause beats the "another rank failed" echoes. */
    g_error_free (job->error);
    job->error = e;
  } else {
    g_error_free (e);
  }
}

/* Group lock held.  Completes one entry of @job for an abandoned rank. */
static void
job_drop_locked (LbWorkerGroup * g, LbWorkerJob * job, const GError * why)
{
  if (job->error == NULL)
    job->error = g_error_copy (why);
  job->pending--;
  g->inflight--;
}

/* Group lock held.  Whether rank @r is to be abandoned by a waiter of
 * @job: it is busy and runs @job or has it queued; for a shutdown (@job
 * NULL), whether it has not left its loop. */
static gboolean
holds_locked (RankPriv * r, LbWorkerJob * job)
{
  if (r->abandoned)
    return FALSE;
  if (job == NULL)
    return r->thread != NULL && !r->exited;
  if (r->running == NULL)
    return FALSE;
  if (r->running == job)
    return TRUE;
  for (guint k = 0; k < r->len; k++)
    if (r->queue[(r->head + k) % LB_WORKER_QUEUE_LEN].job == job)
      return TRUE;
  return FALSE;
}

/* Group lock held; the group is aborted and the ranks holding @job
 * (holds_locked()) did not come back within the group's timeout.  They
 * are abandoned: the group is broken (no job runs on it again, it never
 * recovers, its memory is never freed), the job each ran completes with a
 * %LB_ERROR_TIMEOUT naming the ranks, followed by the job's own
 * root-cause error (the rank that timed out waiting for them, and in
 * which operation), and the jobs queued behind them complete with the
 * same error.  An abandoned thread is never joined; should it come back,
 * it leaves without touching its job (rank_thread()).
 * Returns whether a rank was abandoned. */
static gboolean
abandon_locked (LbWorkerGroup * g, LbWorkerJob * job)
{
  GString *ranks = g_string_new (NULL);
  gboolean mine[64] = { FALSE };
  int n = 0;

  for (int i = 0; i < g->n; i++) {
    mine[i] = holds_locked (&g->ranks[i], job);
    if (mine[i])
      g_string_append_printf (ranks, "%s%d", n++ ? ", " : "", i);
  }
  if (n == 0) {
    g_string_free (ranks, TRUE);
    return FALSE;
  }
  g_autoptr (GError) why = g_error_new (LB_ERROR, LB_ERROR_TIMEOUT,
      "worker group %s: rank%s %s stopped answering (still busy %u ms after "
      "the group aborted; the group is broken and its threads abandoned)",
      g->name, n > 1 ? "s" : "", ranks->str,
      lb_worker_group_get_timeout_ms (g));
  g_string_free (ranks, TRUE);
  g_atomic_int_set (&g->broken, TRUE);

  LbWorkerJob *told[64];
  int n_told = 0;
  for (int i = 0; i < g->n; i++) {
    RankPriv *r = &g->ranks[i];
    if (!mine[i])
      continue;
    r->abandoned = TRUE;
    LbWorkerJob *rj = r->running;
    r->running = NULL;
    if (rj != NULL) {
      gboolean seen = FALSE;
      for (int k = 0; k < n_told; k++)
        seen |= told[k] == rj;
      if (!seen && rj->error != NULL) {
        /* the ranks that stopped answering, then the root cause (the rank
         * that timed out waiting for them, and in which operation) */
        GError *root = rj->error;
        rj->error = g_error_new (LB_ERROR, is_abort_error (root) ?
            LB_ERROR_TIMEOUT : root->code, "%s: %s", why->message,
            root->message);
        g_error_free (root);
      }
      if (!seen)
        told[n_told++] = rj;
      job_drop_locked (g, rj, why);
    }
    /* what was queued behind it never runs */
    while (r->len > 0) {
      LbWorkerJob *qj = r->queue[r->head].job;
      r->head = (r->head + 1) % LB_WORKER_QUEUE_LEN;
      r->len--;
      job_drop_locked (g, qj, why);
    }
  }
  g_cond_broadcast (&g->done_cond);
  return TRUE;
}

/* Group lock held.  When the waits of the group must give up (monotonic
 * µs), G_MAXINT64 for never: the group timeout after an abort (then busy
 * ranks are abandoned), or the deadline of lb_worker_group_cancel_after()
 * (then the group is cancelled). */
static gint64
give_up_time_locked (LbWorkerGroup * g)
{
  if (g_atomic_int_get (&g->abort_state) != ABORT_NONE)
    return g->abort_time +
        (gint64) lb_worker_group_get_timeout_ms (g) * G_TIME_SPAN_MILLISECOND;
  if (g->cancel_deadline > 0)
    return g->cancel_deadline;
  return G_MAXINT64;
}

/* Group lock held; give_up_time_locked() has passed: cancels the group,
 * or abandons the ranks holding @job (NULL: every rank still in its loop).
 * Returns whether anything changed. */
static gboolean
give_up_locked (LbWorkerGroup * g, LbWorkerJob * job)
{
  if (g_get_monotonic_time () < give_up_time_locked (g))
    return FALSE;
  if (g_atomic_int_get (&g->abort_state) == ABORT_NONE) {
    group_abort_locked (g, ABORT_CANCELLED, -1, NULL);
    return TRUE;
  }
  return abandon_locked (g, job);
}

static gpointer
rank_thread (gpointer data)
{
  RankPriv *r = data;
  LbWorkerGroup *g = r->pub.group;
  GError *err = NULL;

  /* Ranks share the process's cores: each rank thread's OpenMP team (the
   * CPU kernels' loops and, with OpenBLAS's OpenMP build, their GEMMs; a
   * device rank's host-side loops) gets an equal share of the team the
   * process would have, at least one thread.  Fixed per group size (not
   * by what else runs, nor by the backend, so the emulated device's CPU
   * kernels run as a CPU rank's), so a rank's results do not depend on
   * other groups. */
  omp_set_num_threads (MAX (1, g->cpu_threads / g->n));
  r->pub.stream = g->backend->stream_new (g->backend, r->pub.device, &err);

  g_mutex_lock (&g->lock);
  g->started++;
  if (r->pub.stream == NULL) {
    if (err == NULL)
      g_set_error (&err, LB_ERROR, LB_ERROR_DEVICE, "stream_new failed");
    g_prefix_error (&err, "rank %d: ", r->pub.rank);
    if (g->init_error == NULL)
      g->init_error = err;
    else
      g_error_free (err);
    r->exited = TRUE;
    g_cond_broadcast (&g->done_cond);
    g_mutex_unlock (&g->lock);
    return NULL;
  }
  g_cond_broadcast (&g->done_cond);

  for (;;) {
    while (r->len == 0 && !g->shutdown)
      g_cond_wait (&r->cond, &g->lock);
    if (r->len == 0)
      break;
    QueuedJob qj = r->queue[r->head];
    r->head = (r->head + 1) % LB_WORKER_QUEUE_LEN;
    r->len--;
    r->running = qj.job;
    g_cond_broadcast (&g->done_cond);   /* queue space */
    gboolean shutting_down = g->shutdown;
    g_mutex_unlock (&g->lock);

    GError *e = NULL;
    gboolean ok = FALSE;
    if (shutting_down)
      g_set_error (&e, LB_ERROR, LB_ERROR_CANCELLED,
          "worker group %s was shut down before the job ran", g->name);
    else if (lb_rank_check_abort (&r->pub, &e))
      ok = qj.func (&r->pub, qj.user_data, &e);
    if (!ok && e == NULL)
      g_set_error (&e, LB_ERROR, LB_ERROR_DEVICE,
          "rank function failed without an error");

    g_mutex_lock (&g->lock);
    if (r->abandoned) {
      /* back after the group gave up on it (abandon_locked()): the job
       * completed without it and its waiter may be gone, so nothing of it
       * is touched; the thread leaves, never joined, its stream leaked */
      g_clear_error (&e);
      g_mutex_unlock (&g->lock);
      return NULL;
    }
    r->running = NULL;
    if (!ok) {
      g_prefix_error (&e, "rank %d: ", r->pub.rank);
      if (!is_abort_error (e) || g_atomic_int_get (&g->abort_state) ==
          ABORT_NONE)
        group_abort_locked (g, ABORT_FAILED, r->pub.rank, e);
      job_record_error (qj.job, e);
    }
    qj.job->pending--;
    g->inflight--;
    if (g->inflight == 0)
      group_recover_locked (g);
    g_cond_broadcast (&g->done_cond);
  }
  r->exited = TRUE;
  g_cond_broadcast (&g->done_cond);
  g_mutex_unlock (&g->lock);

  g->backend->stream_free (r->pub.stream);
  r->pub.stream = NULL;
  return NULL;
}

/**
 * lb_worker_group_new:
 * @backend: the backend every rank runs on (from
 *   lingbot_backend_parse_devices() in lingbot/, or lb_cpu_backend())
 * @n_ranks: number of ranks, 1..64
 * @ordinals: (array length=n_ranks) (nullable): device ordinal per rank;
 *   %NULL means 0..n_ranks-1.  For the CPU backend ordinals are virtual
 *   device ids: channels treat CPU ranks with equal ordinals as one device
 *   (pointer hand-over) and unequal ones as peers (memcpy).
 * @options: (nullable): timeouts, collectives backend, name; with no
 *   collectives backend given, a device group whose @ordinals name a device
 *   twice takes the local collectives (device copies: NCCL refuses a
 *   device twice in a communicator), and so does a device group sharing a
 *   device with a live group that holds the device collectives (NCCL):
 *   one communicator set per device, docs/design.md "One ordering of
 *   collectives per device"
 * @error: %LB_ERROR_INVALID_ARGUMENT, the backend's stream error, or the
 *   collectives backend's error (e.g. NCCL communicator creation)
 *
 * Starts one thread per rank; each creates its LbStream on its own thread
 * (DESIGN.md section 3).  The collectives state is created once here.
 *
 * Returns: (transfer full) (nullable): the group; lb_worker_group_unref().
 */
static LbWorkerGroup *group_new (LbBackend * backend, int n_ranks,
    const int *ordinals, int world_ranks,
    const LbWorkerGroupOptions * options, GError ** error);

LbWorkerGroup *
lb_worker_group_new (LbBackend * backend, int n_ranks, const int *ordinals,
    const LbWorkerGroupOptions * options, GError ** error)
{
  if (backend == NULL || n_ranks < 1 || n_ranks > 64) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "worker group: need a backend and 1..64 ranks (got %d)", n_ranks);
    return NULL;
  }
  return group_new (backend, n_ranks, ordinals, 0, options, error);
}

/**
 * lb_worker_group_new_solo:
 * @backend: the backend the rank runs on
 * @ordinal: its device ordinal
 * @world_ranks: the size of the world it stands in for, 2..64
 * @options: (nullable): as for lb_worker_group_new(); %NULL collectives
 *   means lb_solo_collectives() (give a wrapper of it, e.g. a counting
 *   copy, or the group's collectives will not stand in for the peers)
 * @error: %LB_ERROR_INVALID_ARGUMENT, or as lb_worker_group_new()
 *
 * A group of one rank thread that stands in for rank 0 of a world of
 * @world_ranks ranks: its LbRank has rank 0 and n_ranks @world_ranks, so
 * sharded code (the DiT's Ulysses bands and heads) computes exactly rank
 * 0's share, and the solo collectives move the bytes the absent peers
 * would exchange with copies of the rank's own buffers.  For measuring one
 * rank's work on one device (`lingbot-bench dit --rank-of N`): the results
 * are not the model's, since the peers' data is missing.
 * lb_worker_group_get_n_ranks() is 1.
 *
 * Returns: (transfer full) (nullable): the group; lb_worker_group_unref().
 */
LbWorkerGroup *
lb_worker_group_new_solo (LbBackend * backend, int ordinal, int world_ranks,
    const LbWorkerGroupOptions * options, GError ** error)
{
  if (backend == NULL || world_ranks < 2 || world_ranks > 64) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "worker group: a solo rank stands in for rank 0 of 2..64 ranks "
        "(got %d)", world_ranks);
    return NULL;
  }
  LbWorkerGroupOptions o = { 0 };
  if (options != NULL)
    o = *options;
  if (o.collectives == NULL)
    o.collectives = lb_solo_collectives ();
  return group_new (backend, 1, &ordinal, world_ranks, &o, error);
}

static LbWorkerGroup *
group_new (LbBackend * backend, int n_ranks, const int *ordinals,
    int world_ranks, const LbWorkerGroupOptions * options, GError ** error)
{
  LbWorkerGroupOptions defaults = { 0 };
  if (options == NULL)
    options = &defaults;

  LbWorkerGroup *g = g_new0 (LbWorkerGroup, 1);
  g_atomic_ref_count_init (&g->ref);
  g->name = g_strdup (options->name ? options->name : "group");
  g->backend = backend;
  g->n = n_ranks;
  g->timeout_ms = options->timeout_ms ? (gint) options->timeout_ms :
      LB_COMM_DEFAULT_TIMEOUT_MS;
  g->abort_rank = -1;
  g_mutex_init (&g->lock);
  g_cond_init (&g->done_cond);
  g->notifies = g_array_new (FALSE, FALSE, sizeof (AbortNotify));
  g->ranks = g_new0 (RankPriv, n_ranks);

  /* the OpenMP team the creating thread would start (OMP_NUM_THREADS, or
   * one per core), shared out among CPU ranks in rank_thread() */
  g->cpu_threads = omp_get_max_threads ();
  g->klass = options->collectives;
  if (g->klass == NULL)
    g->klass = lb_collectives_lookup (backend->device_type);
  /* several ranks on one device (a test of the sharded path on one GPU):
   * a device collectives library such as NCCL refuses a device twice in a
   * communicator, so such a group takes the local collectives (device
   * copies), unless the caller chose */
  if (options->collectives == NULL && ordinals != NULL &&
      backend->device_type != LB_DEVICE_CPU) {
    for (int i = 0; i < n_ranks && g->klass != lb_local_collectives (); i++)
      for (int j = 0; j < i; j++)
        if (ordinals[i] == ordinals[j]) {
          g->klass = lb_local_collectives ();
          break;
        }
  }

  for (int i = 0; i < n_ranks; i++) {
    RankPriv *r = &g->ranks[i];
    r->pub.group = g;
    r->pub.rank = i;
    r->pub.n_ranks = world_ranks > 0 ? world_ranks : n_ranks;
    r->pub.backend = backend;
    r->pub.device = ordinals ? ordinals[i] : i;
    g_cond_init (&r->cond);
  }
  native_claim (g, options->collectives);
  for (int i = 0; i < n_ranks; i++) {
    char tname[16];
    g_snprintf (tname, sizeof tname, "lb-%.8s-%d", g->name, i);
    g->ranks[i].thread = g_thread_new (tname, rank_thread, &g->ranks[i]);
  }

  g_mutex_lock (&g->lock);
  while (g->started < n_ranks)
    g_cond_wait (&g->done_cond, &g->lock);
  GError *init_error = g->init_error;
  g->init_error = NULL;
  g_mutex_unlock (&g->lock);

  if (init_error == NULL) {
    g->comm = g->klass->create (g, &init_error);
    if (g->comm == NULL && init_error == NULL)
      g_set_error (&init_error, LB_ERROR, LB_ERROR_DEVICE,
          "collectives backend %s failed", g->klass->name);
  }
  if (init_error != NULL) {
    g_propagate_prefixed_error (error, init_error, "worker group %s: ",
        g->name);
    lb_worker_group_unref (g);
    return NULL;
  }
  return g;
}

/**
 * lb_worker_group_ref:
 * @group: a group
 *
 * Returns: (transfer full): @group with one more reference.
 */
LbWorkerGroup *
lb_worker_group_ref (LbWorkerGroup * group)
{
  g_atomic_ref_count_inc (&group->ref);
  return group;
}

/**
 * lb_worker_group_shutdown:
 * @group: a group
 *
 * Stops the rank threads: a running job is released through the abort flag
 * (its waits return %LB_ERROR_CANCELLED), queued jobs complete with
 * %LB_ERROR_CANCELLED, every stream is freed on its thread and the threads
 * are joined.  A rank still busy the group's timeout after the abort
 * (stuck in a call that never returns) is abandoned instead: the group is
 * broken (lb_worker_group_is_broken()) and that thread is never joined, so
 * this returns within about the group's timeout whatever the ranks do.
 * Later submits fail with %LB_ERROR_CANCELLED.  Idempotent;
 * lb_worker_group_unref() of the last reference calls it.  Must not be
 * called from a rank thread.
 */
void
lb_worker_group_shutdown (LbWorkerGroup * group)
{
  LbWorkerGroup *g = group;
  g_mutex_lock (&g->lock);
  if (g->joined) {
    g_mutex_unlock (&g->lock);
    return;
  }
  if (g->inflight > 0)
    group_abort_locked (g, ABORT_CANCELLED, -1, NULL);
  g->shutdown = TRUE;
  for (int i = 0; i < g->n; i++)
    g_cond_broadcast (&g->ranks[i].cond);
  /* idle threads leave at once; busy ones once their job sees the abort,
   * or they are abandoned */
  const gint64 idle_deadline = g_get_monotonic_time () +
      (gint64) lb_worker_group_get_timeout_ms (g) * G_TIME_SPAN_MILLISECOND;
  for (;;) {
    gboolean left = TRUE;
    for (int i = 0; i < g->n; i++) {
      RankPriv *r = &g->ranks[i];
      left &= r->thread == NULL || r->exited || r->abandoned;
    }
    if (left)
      break;
    gint64 deadline = give_up_time_locked (g);
    if (deadline == G_MAXINT64)
      deadline = idle_deadline;
    if (!g_cond_wait_until (&g->done_cond, &g->lock, deadline)) {
      if (g_atomic_int_get (&g->abort_state) == ABORT_NONE)
        group_abort_locked (g, ABORT_CANCELLED, -1, NULL);
      else if (!give_up_locked (g, NULL))
        g_cond_wait_until (&g->done_cond, &g->lock,
            g_get_monotonic_time () + 10 * G_TIME_SPAN_MILLISECOND);
    }
  }
  g_mutex_unlock (&g->lock);

  for (int i = 0; i < g->n; i++) {
    if (g->ranks[i].thread != NULL && !g->ranks[i].abandoned)
      g_thread_join (g->ranks[i].thread);
    g->ranks[i].thread = NULL;
  }
  g_mutex_lock (&g->lock);
  g->joined = TRUE;
  g_mutex_unlock (&g->lock);
}

/* The last reference is gone: shuts the group down and frees what it
 * holds; a broken group only stops its healthy threads and is leaked (an
 * abandoned thread may still be inside its collectives state, its locks or
 * its rank records). */
static void
group_clear (LbWorkerGroup * group)
{
  lb_worker_group_shutdown (group);
  if (g_atomic_int_get (&group->broken))
    return;
  if (group->comm != NULL)
    group->klass->destroy (group->comm);
  native_release (group);
  for (int i = 0; i < group->n; i++)
    g_cond_clear (&group->ranks[i].cond);
  g_clear_error (&group->init_error);
  g_array_unref (group->notifies);
  g_cond_clear (&group->done_cond);
  g_mutex_clear (&group->lock);
  g_free (group->ranks);
  g_free (group->name);
  g_free (group);
}

/**
 * lb_worker_group_unref:
 * @group: (transfer full) (nullable): a group
 *
 * Drops a reference; the last one shuts the group down and frees it (a
 * broken group is shut down and leaked: lb_worker_group_is_broken()).
 * Every channel made on the group holds a reference.
 */
void
lb_worker_group_unref (LbWorkerGroup * group)
{
  if (group != NULL && g_atomic_ref_count_dec (&group->ref))
    group_clear (group);
}

/**
 * lb_worker_group_is_broken:
 * @group: a group
 *
 * A group breaks when a rank stops answering: the group was aborted (a
 * rank failed or timed out waiting for a peer, lb_worker_group_cancel(),
 * lb_worker_group_cancel_after(), a shutdown) and a rank was still busy
 * the group's timeout later.  That rank's thread is abandoned (never
 * joined; its stream, and everything its job may still touch, must be
 * leaked rather than freed under it), no job runs on the group again
 * (submits fail with %LB_ERROR_RANK_FAILED) and the group is never freed.
 * Should the stuck call return after all, the thread stops at its next
 * wait or abort check (the group stays aborted) and leaves without
 * touching its job; until then it may still read its job's arguments,
 * which its submitter may have freed (docs/design.md "A rank that stops
 * answering"): restart the process when convenient.  Lock-free.
 *
 * Returns: %TRUE once the group is broken (for good).
 */
gboolean
lb_worker_group_is_broken (LbWorkerGroup * group)
{
  return g_atomic_int_get (&group->broken);
}

/**
 * lb_worker_group_get_n_ranks:
 * @group: a group
 *
 * Returns: the number of ranks (rank threads: 1 for a solo group, whose
 * LbRank.n_ranks is the size of the world it stands in for).
 */
int
lb_worker_group_get_n_ranks (LbWorkerGroup * group)
{
  return group->n;
}

/**
 * lb_worker_group_get_rank:
 * @group: a group
 * @rank: 0..n_ranks-1
 *
 * For setting up per-rank user_data before the first job; rank functions
 * get their LbRank as an argument.
 *
 * Returns: (transfer none): the rank.
 */
LbRank *
lb_worker_group_get_rank (LbWorkerGroup * group, int rank)
{
  g_return_val_if_fail (rank >= 0 && rank < group->n, NULL);
  return &group->ranks[rank].pub;
}

/**
 * lb_worker_group_get_backend:
 * @group: a group
 *
 * Returns: (transfer none): the backend of its ranks.
 */
LbBackend *
lb_worker_group_get_backend (LbWorkerGroup * group)
{
  return group->backend;
}

/**
 * lb_worker_group_get_name:
 * @group: a group
 *
 * Returns: the name given at creation ("group" by default).
 */
const char *
lb_worker_group_get_name (LbWorkerGroup * group)
{
  return group->name;
}

/**
 * lb_worker_group_get_timeout_ms:
 * @group: a group
 *
 * Returns: the deadline of rank-side waits, in milliseconds.
 */
guint
lb_worker_group_get_timeout_ms (LbWorkerGroup * group)
{
  return (guint) g_atomic_int_get (&group->timeout_ms);
}

/**
 * lb_worker_group_set_timeout_ms:
 * @group: a group
 * @timeout_ms: deadline of rank-side waits, in milliseconds; 0 restores
 *   %LB_COMM_DEFAULT_TIMEOUT_MS
 *
 * Applies to waits that start after the call.
 */
void
lb_worker_group_set_timeout_ms (LbWorkerGroup * group, guint timeout_ms)
{
  g_atomic_int_set (&group->timeout_ms,
      timeout_ms ? (gint) timeout_ms : LB_COMM_DEFAULT_TIMEOUT_MS);
}

static gboolean
submit_check_locked (LbWorkerGroup * g, GError ** error)
{
  if (g->shutdown) {
    g_set_error (error, LB_ERROR, LB_ERROR_CANCELLED,
        "worker group %s is shut down", g->name);
    return FALSE;
  }
  if (g_atomic_int_get (&g->broken)) {
    g_set_error (error, LB_ERROR, LB_ERROR_RANK_FAILED,
        "worker group %s is broken: a rank stopped answering and was "
        "abandoned; it runs no more jobs", g->name);
    return FALSE;
  }
  int state = g_atomic_int_get (&g->abort_state);
  if (state != ABORT_NONE) {
    g_set_error (error, LB_ERROR, state == ABORT_CANCELLED ?
        LB_ERROR_CANCELLED : LB_ERROR_RANK_FAILED,
        "worker group %s is aborted (rank %d failed) and still has jobs "
        "running; wait for them first", g->name,
        g_atomic_int_get (&g->abort_rank));
    return FALSE;
  }
  return TRUE;
}

/**
 * lb_worker_group_submit:
 * @group: a group
 * @job: caller-owned completion record (zero-initialised or waited on)
 * @rank: the rank to run on, or -1 for every rank
 * @func: the rank function
 * @user_data: passed to @func on each rank (shared: index it by rank)
 * @error: %LB_ERROR_CANCELLED after shutdown; %LB_ERROR_RANK_FAILED while
 *   the group is aborted with jobs still running; %LB_ERROR_TIMEOUT when a
 *   rank's queue stayed full past the group's timeout;
 *   %LB_ERROR_INVALID_ARGUMENT for a bad @rank
 *
 * Queues @func without waiting for it and without allocating.  A submit to
 * every rank is atomic with respect to other submitters, so all ranks see
 * jobs from concurrent submitters in the same order (collectives inside
 * them cannot cross).  Wait with lb_worker_group_wait().
 *
 * Returns: %TRUE when queued.
 */
gboolean
lb_worker_group_submit (LbWorkerGroup * group, LbWorkerJob * job, int rank,
    LbRankFunc func, gpointer user_data, GError ** error)
{
  LbWorkerGroup *g = group;
  if (rank < -1 || rank >= g->n || func == NULL || job == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "worker group %s: cannot submit to rank %d of %d", g->name, rank, g->n);
    return FALSE;
  }
  int first = rank < 0 ? 0 : rank;
  int last = rank < 0 ? g->n - 1 : rank;
  gint64 deadline = g_get_monotonic_time () +
      (gint64) lb_worker_group_get_timeout_ms (g) * 1000;

  g_mutex_lock (&g->lock);
  for (;;) {
    if (!submit_check_locked (g, error)) {
      g_mutex_unlock (&g->lock);
      return FALSE;
    }
    gboolean space = TRUE;
    for (int i = first; i <= last && space; i++)
      space = g->ranks[i].len < LB_WORKER_QUEUE_LEN;
    if (space)
      break;
    if (!g_cond_wait_until (&g->done_cond, &g->lock, deadline)) {
      g_mutex_unlock (&g->lock);
      g_set_error (error, LB_ERROR, LB_ERROR_TIMEOUT,
          "worker group %s: rank queue full for %u ms", g->name,
          lb_worker_group_get_timeout_ms (g));
      return FALSE;
    }
  }
  for (int i = first; i <= last; i++) {
    RankPriv *r = &g->ranks[i];
    QueuedJob *qj = &r->queue[(r->head + r->len) % LB_WORKER_QUEUE_LEN];
    qj->func = func;
    qj->user_data = user_data;
    qj->job = job;
    r->len++;
    job->pending++;
    g->inflight++;
    g_cond_signal (&r->cond);
  }
  g_mutex_unlock (&g->lock);
  return TRUE;
}

/**
 * lb_worker_group_wait:
 * @group: a group
 * @job: a job submitted to @group
 * @error: the first error of any rank that ran @job, prefixed "rank N: ";
 *   a rank's own failure is preferred over the %LB_ERROR_RANK_FAILED
 *   echoes of the ranks it released
 *
 * Waits until every rank that @job was submitted to has run it.  Not
 * bounded by a timeout while the group runs normally (a job may compute
 * for long): ranks are, in every wait they make.  Once the group is
 * aborted (a rank failed or timed out, lb_worker_group_cancel(), the
 * deadline of lb_worker_group_cancel_after()), the ranks still running
 * @job get the group's timeout to come back; those that do not are
 * abandoned and the group is broken (lb_worker_group_is_broken()): this
 * then returns %LB_ERROR_TIMEOUT "worker group G: rank N stopped answering
 * (...)" followed by the root cause (e.g. "rank 0: all_to_all (publish):
 * no progress within T ms (worker group G), waiting for rank N").  So a
 * wait returns within twice the group's timeout of a rank getting stuck in
 * a collective, whatever that rank does.  After a failure that every rank
 * came back from, the group recovers by itself as soon as no job is
 * queued or running (collectives state reset, abort flag cleared), so it
 * stays usable; when @job was the only work, that has happened by the
 * time this returns.  @job can be reused afterwards.
 *
 * Returns: %TRUE when every rank succeeded.
 */
gboolean
lb_worker_group_wait (LbWorkerGroup * group, LbWorkerJob * job, GError ** error)
{
  g_mutex_lock (&group->lock);
  while (job->pending > 0) {
    const gint64 deadline = give_up_time_locked (group);
    if (deadline == G_MAXINT64)
      g_cond_wait (&group->done_cond, &group->lock);
    else if (!g_cond_wait_until (&group->done_cond, &group->lock, deadline)
        && job->pending > 0 && !give_up_locked (group, job))
      /* the job is on its way to an idle rank: look again shortly */
      g_cond_wait_until (&group->done_cond, &group->lock,
          g_get_monotonic_time () + 10 * G_TIME_SPAN_MILLISECOND);
  }
  GError *e = job->error;
  job->error = NULL;
  g_mutex_unlock (&group->lock);
  if (e != NULL) {
    g_propagate_error (error, e);
    return FALSE;
  }
  return TRUE;
}

/**
 * lb_worker_group_run:
 * @group: a group
 * @func: the rank function
 * @user_data: passed to @func on every rank
 * @error: see lb_worker_group_submit() and lb_worker_group_wait()
 *
 * Runs @func on every rank and waits for all of them.
 *
 * Returns: %TRUE when every rank succeeded.
 */
gboolean
lb_worker_group_run (LbWorkerGroup * group, LbRankFunc func,
    gpointer user_data, GError ** error)
{
  LbWorkerJob job = LB_WORKER_JOB_INIT;
  if (!lb_worker_group_submit (group, &job, -1, func, user_data, error))
    return FALSE;
  return lb_worker_group_wait (group, &job, error);
}

/**
 * lb_worker_group_run_on:
 * @group: a group
 * @rank: 0..n_ranks-1
 * @func: the rank function
 * @user_data: passed to @func
 * @error: see lb_worker_group_submit() and lb_worker_group_wait()
 *
 * Runs @func on one rank and waits for it.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_worker_group_run_on (LbWorkerGroup * group, int rank, LbRankFunc func,
    gpointer user_data, GError ** error)
{
  LbWorkerJob job = LB_WORKER_JOB_INIT;
  if (rank < 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "worker group %s: rank %d out of range", group->name, rank);
    return FALSE;
  }
  if (!lb_worker_group_submit (group, &job, rank, func, user_data, error))
    return FALSE;
  return lb_worker_group_wait (group, &job, error);
}

/**
 * lb_worker_group_cancel:
 * @group: a group
 *
 * Aborts what the group is running (a flush or session end): every
 * rank-side wait returns %LB_ERROR_CANCELLED promptly, queued jobs are
 * skipped with the same error.  The group recovers once idle, like after a
 * rank failure.  A no-op when nothing is queued or running.
 */
void
lb_worker_group_cancel (LbWorkerGroup * group)
{
  g_mutex_lock (&group->lock);
  if (group->inflight > 0)
    group_abort_locked (group, ABORT_CANCELLED, -1, NULL);
  g_mutex_unlock (&group->lock);
}

/**
 * lb_worker_group_cancel_after:
 * @group: a group
 * @timeout_ms: milliseconds from now
 *
 * Bounds what the group runs now: if a job is still queued or running
 * @timeout_ms from now, a waiter (lb_worker_group_wait()) cancels the
 * group then (as lb_worker_group_cancel()), and ranks not back within the
 * group's timeout after that are abandoned (the group is broken).  For a
 * stop that lets the job end at its own boundary first (a DiT chunk's
 * next pass) but must return even when a rank never does.  An earlier
 * deadline already set is kept; the deadline is forgotten when the group
 * goes idle.  A no-op when nothing is queued or running.  Any thread.
 */
void
lb_worker_group_cancel_after (LbWorkerGroup * group, guint timeout_ms)
{
  g_mutex_lock (&group->lock);
  if (group->inflight > 0
      && g_atomic_int_get (&group->abort_state) == ABORT_NONE) {
    const gint64 d = g_get_monotonic_time () +
        (gint64) timeout_ms * G_TIME_SPAN_MILLISECOND;
    if (group->cancel_deadline == 0 || d < group->cancel_deadline)
      group->cancel_deadline = d;
    g_cond_broadcast (&group->done_cond);
  }
  g_mutex_unlock (&group->lock);
}

/**
 * lb_worker_group_is_aborted:
 * @group: a group
 *
 * Lock-free; for polling in long waits.
 *
 * Returns: %TRUE while the group is aborted (a rank failed or
 * lb_worker_group_cancel() was called) and not yet recovered.
 */
gboolean
lb_worker_group_is_aborted (LbWorkerGroup * group)
{
  return g_atomic_int_get (&group->abort_state) != ABORT_NONE;
}

/**
 * lb_rank_check_abort:
 * @rank: the calling rank
 * @error: %LB_ERROR_RANK_FAILED ("rank N of group G failed") or
 *   %LB_ERROR_CANCELLED when the group is aborted
 *
 * For rank functions that compute for a long time between waits.
 *
 * Returns: %TRUE when the group is not aborted.
 */
gboolean
lb_rank_check_abort (LbRank * rank, GError ** error)
{
  LbWorkerGroup *g = rank->group;
  int state = g_atomic_int_get (&g->abort_state);
  if (state == ABORT_NONE)
    return TRUE;
  if (state == ABORT_CANCELLED)
    g_set_error (error, LB_ERROR, LB_ERROR_CANCELLED,
        "worker group %s was cancelled", g->name);
  else
    g_set_error (error, LB_ERROR, LB_ERROR_RANK_FAILED,
        "aborted: rank %d of worker group %s failed",
        g_atomic_int_get (&g->abort_rank), g->name);
  return FALSE;
}

/**
 * lb_rank_deadline:
 * @rank: the calling rank
 *
 * Returns: the monotonic time (µs, g_get_monotonic_time()) at which a wait
 * that starts now must give up: now + the group's timeout.
 */
gint64
lb_rank_deadline (LbRank * rank)
{
  return g_get_monotonic_time () +
      (gint64) lb_worker_group_get_timeout_ms (rank->group) * 1000;
}

gboolean
lb_comm_set_timeout_error (LbRank * rank, const char *what, GError ** error)
{
  g_set_error (error, LB_ERROR, LB_ERROR_TIMEOUT,
      "%s: no progress within %u ms (worker group %s)", what,
      lb_worker_group_get_timeout_ms (rank->group), rank->group->name);
  return FALSE;
}

void
lb_worker_group_add_abort_notify (LbWorkerGroup * group, LbAbortNotify notify,
    gpointer data)
{
  AbortNotify an = { notify, data };
  g_mutex_lock (&group->lock);
  g_array_append_val (group->notifies, an);
  g_mutex_unlock (&group->lock);
}

void
lb_worker_group_remove_abort_notify (LbWorkerGroup * group, gpointer data)
{
  g_mutex_lock (&group->lock);
  for (guint i = 0; i < group->notifies->len; i++) {
    if (g_array_index (group->notifies, AbortNotify, i).data == data) {
      g_array_remove_index (group->notifies, i);
      break;
    }
  }
  g_mutex_unlock (&group->lock);
}

gpointer
lb_worker_group_get_collectives_state (LbWorkerGroup * group)
{
  return group->comm;
}

const LbCollectivesClass *
lb_worker_group_get_collectives (LbWorkerGroup * group)
{
  return group->klass;
}

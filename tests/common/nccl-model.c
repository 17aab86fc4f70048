/* lingbot-gst: a CPU model of NCCL's per-device blocking, for tests
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * See nccl-model.h.  Each operation is the local collectives' own, run
 * between hold_device() and release_device(); inside lb_comm_group_start()
 * / lb_comm_group_end() the local class only records, so the device is held
 * around the group's end, when the grouped operations run (as NCCL launches
 * one kernel for a group at ncclGroupEnd()).
 */
#include "nccl-model.h"
#include "comm/comm-private.h"

#include <string.h>

#define MAX_DEVICES 64

typedef struct
{
  gpointer local;
  const char *name;             /* interned */
  int depth[MAX_DEVICES];       /* group nesting per rank */
} Model;

static GMutex dev_lock;
static GCond dev_cond;
static Model *holder[MAX_DEVICES];
static GPtrArray *dev_log[MAX_DEVICES];

static const LbCollectivesClass *
L (void)
{
  return lb_local_collectives ();
}

static gboolean
hold_device (Model * m, LbRank * rank, GError ** error)
{
  const int d = rank->device;
  const gint64 deadline = lb_rank_deadline (rank);
  g_assert (d >= 0 && d < MAX_DEVICES);
  g_mutex_lock (&dev_lock);
  while (holder[d] != NULL && holder[d] != m) {
    if (!lb_rank_check_abort (rank, error)) {
      g_mutex_unlock (&dev_lock);
      return FALSE;
    }
    const gint64 now = g_get_monotonic_time ();
    if (now >= deadline) {
      g_set_error (error, LB_ERROR, LB_ERROR_TIMEOUT,
          "nccl model: device %d: a collective of group %s waited %u ms "
          "for the device, held by a collective of group %s (deadlock)",
          d, m->name, lb_worker_group_get_timeout_ms (rank->group),
          holder[d]->name);
      g_mutex_unlock (&dev_lock);
      return FALSE;
    }
    /* wake now and then to notice an abort */
    g_cond_wait_until (&dev_cond, &dev_lock,
        MIN (deadline, now + 20 * G_TIME_SPAN_MILLISECOND));
  }
  holder[d] = m;
  if (dev_log[d] == NULL)
    dev_log[d] = g_ptr_array_new ();
  g_ptr_array_add (dev_log[d], (gpointer) m->name);
  g_cond_broadcast (&dev_cond);
  g_mutex_unlock (&dev_lock);
  return TRUE;
}

static void
release_device (Model * m, LbRank * rank)
{
  g_mutex_lock (&dev_lock);
  if (holder[rank->device] == m)
    holder[rank->device] = NULL;
  g_cond_broadcast (&dev_cond);
  g_mutex_unlock (&dev_lock);
}

static gpointer
model_create (LbWorkerGroup * group, GError ** error)
{
  Model *m = g_new0 (Model, 1);
  m->name = g_intern_string (lb_worker_group_get_name (group));
  m->local = L ()->create (group, error);
  if (m->local == NULL) {
    g_free (m);
    return NULL;
  }
  return m;
}

static void
model_destroy (gpointer state)
{
  Model *m = state;
  L ()->destroy (m->local);
  g_free (m);
}

static gboolean
model_reset (gpointer state, GError ** error)
{
  Model *m = state;
  memset (m->depth, 0, sizeof m->depth);
  return L ()->reset (m->local, error);
}

static void
model_abort (gpointer state)
{
  Model *m = state;
  L ()->abort (m->local);
  g_mutex_lock (&dev_lock);
  g_cond_broadcast (&dev_cond);
  g_mutex_unlock (&dev_lock);
}

/* Runs @call (a local operation) holding the device, unless inside a
 * group: then it is only recorded. */
#define HELD(m, rank, error, call)                                        \
  do {                                                                    \
    if ((m)->depth[(rank)->rank] > 0)                                     \
      return (call);                                                      \
    if (!hold_device ((m), (rank), (error)))                              \
      return FALSE;                                                       \
    gboolean ok_ = (call);                                                \
    release_device ((m), (rank));                                         \
    return ok_;                                                           \
  } while (0)

static gboolean
model_all_to_all (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize count, GError ** error)
{
  Model *m = state;
  HELD (m, rank, error, L ()->all_to_all (m->local, rank, dtype, send, recv,
          count, error));
}

static gboolean
model_all_to_all_v (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, const gsize * send_counts, const gsize * send_displs,
    void *recv, const gsize * recv_counts, const gsize * recv_displs,
    GError ** error)
{
  Model *m = state;
  HELD (m, rank, error, L ()->all_to_all_v (m->local, rank, dtype, send,
          send_counts, send_displs, recv, recv_counts, recv_displs, error));
}

static gboolean
model_all_gather (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize count, GError ** error)
{
  Model *m = state;
  HELD (m, rank, error, L ()->all_gather (m->local, rank, dtype, send, recv,
          count, error));
}

static gboolean
model_all_gather_v (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, gsize send_count, void *recv,
    const gsize * recv_counts, const gsize * recv_displs, GError ** error)
{
  Model *m = state;
  HELD (m, rank, error, L ()->all_gather_v (m->local, rank, dtype, send,
          send_count, recv, recv_counts, recv_displs, error));
}

static gboolean
model_reduce_scatter (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize recv_count, LbReduceOp op,
    GError ** error)
{
  Model *m = state;
  HELD (m, rank, error, L ()->reduce_scatter (m->local, rank, dtype, send,
          recv, recv_count, op, error));
}

static gboolean
model_all_reduce (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize count, LbReduceOp op, GError ** error)
{
  Model *m = state;
  HELD (m, rank, error, L ()->all_reduce (m->local, rank, dtype, send, recv,
          count, op, error));
}

static gboolean
model_broadcast (gpointer state, LbRank * rank, LbDType dtype, void *buf,
    gsize count, int root, GError ** error)
{
  Model *m = state;
  HELD (m, rank, error, L ()->broadcast (m->local, rank, dtype, buf, count,
          root, error));
}

static gboolean
model_send (gpointer state, LbRank * rank, LbDType dtype, const void *buf,
    gsize count, int peer, GError ** error)
{
  Model *m = state;
  HELD (m, rank, error, L ()->send (m->local, rank, dtype, buf, count, peer,
          error));
}

static gboolean
model_recv (gpointer state, LbRank * rank, LbDType dtype, void *buf,
    gsize count, int peer, GError ** error)
{
  Model *m = state;
  HELD (m, rank, error, L ()->recv (m->local, rank, dtype, buf, count, peer,
          error));
}

static gboolean
model_barrier (gpointer state, LbRank * rank, GError ** error)
{
  Model *m = state;
  HELD (m, rank, error, L ()->barrier (m->local, rank, error));
}

static gboolean
model_group_start (gpointer state, LbRank * rank, GError ** error)
{
  Model *m = state;
  if (!L ()->group_start (m->local, rank, error))
    return FALSE;
  m->depth[rank->rank]++;
  return TRUE;
}

static gboolean
model_group_end (gpointer state, LbRank * rank, GError ** error)
{
  Model *m = state;
  if (m->depth[rank->rank] > 0)
    m->depth[rank->rank]--;
  HELD (m, rank, error, L ()->group_end (m->local, rank, error));
}

static gboolean
model_synchronize (gpointer state, LbRank * rank, GError ** error)
{
  Model *m = state;
  return L ()->synchronize (m->local, rank, error);
}

static const LbCollectivesClass model_class = {
  .name = "nccl-model",
  LB_COLLECTIVES_OPS (model),
  .stream_ordered = FALSE,
};

const LbCollectivesClass *
nccl_model_collectives (void)
{
  return &model_class;
}

char **
nccl_model_log (int device)
{
  GStrvBuilder *b = g_strv_builder_new ();
  g_mutex_lock (&dev_lock);
  if (device >= 0 && device < MAX_DEVICES && dev_log[device] != NULL)
    for (guint i = 0; i < dev_log[device]->len; i++)
      g_strv_builder_add (b, g_ptr_array_index (dev_log[device], i));
  g_mutex_unlock (&dev_lock);
  char **v = g_strv_builder_end (b);
  g_strv_builder_unref (b);
  return v;
}

void
nccl_model_clear_log (void)
{
  g_mutex_lock (&dev_lock);
  for (int d = 0; d < MAX_DEVICES; d++)
    g_clear_pointer (&dev_log[d], g_ptr_array_unref);
  g_mutex_unlock (&dev_lock);
}

const char *
nccl_model_holder (int device)
{
  g_mutex_lock (&dev_lock);
  const char *n = holder[device] ? holder[device]->name : NULL;
  g_mutex_unlock (&dev_lock);
  return n;
}

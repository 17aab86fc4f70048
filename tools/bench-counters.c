/* lingbot-gst: lingbot-bench's counting collectives
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A copy of a collectives class whose operations count calls and bytes per
 * rank before calling the wrapped class's.  `lingbot-bench direct` registers
 * one for the device type before the world exists and reports the sums
 * over ranks; `lingbot-bench dit` gives one to its worker group and reports
 * rank 0's counts, which is what --rank-of compares with the real run.
 */
#include "tools/bench-counters.h"

#include <string.h>

const char *const lingbot_bench_op_names[LINGBOT_BENCH_N_OPS] = {
  "all_to_all", "all_gather", "reduce_scatter", "all_reduce", "broadcast",
  "send_recv", "barrier"
};

#define MAX_CLASSES 4

static LingbotBenchCommCounts counts[LINGBOT_BENCH_MAX_RANKS];
static GMutex wrap_lock;
static int n_classes;
static const LbCollectivesClass *inner_class[MAX_CLASSES];
static LbCollectivesClass wrapped_class[MAX_CLASSES];

/* the wrapped class of a rank's group: the one of the same name (a
 * wrapper keeps its inner class's name) */
static const LbCollectivesClass *
inner_of (LbRank * rank)
{
  const char *name = lb_comm_backend_name (rank);
  for (int i = 0; i < n_classes; i++)
    if (g_str_equal (inner_class[i]->name, name))
      return inner_class[i];
  g_assert_not_reached ();
  return NULL;
}

static void
count (LbRank * rank, int op, gboolean call, guint64 recv, guint64 sent)
{
  LingbotBenchCommCounts *c = &counts[MIN (rank->rank,
          LINGBOT_BENCH_MAX_RANKS - 1)];
  if (call)
    __atomic_fetch_add (&c->calls[op], 1, __ATOMIC_RELAXED);
  __atomic_fetch_add (&c->bytes[op], recv, __ATOMIC_RELAXED);
  __atomic_fetch_add (&c->sent[op], sent, __ATOMIC_RELAXED);
  __atomic_fetch_add (&c->link[op], MAX (recv, sent), __ATOMIC_RELAXED);
}

/* the sum of @v over the ranks other than the caller's */
static guint64
peers_sum (LbRank * r, const gsize * v)
{
  guint64 n = 0;
  for (int i = 0; i < r->n_ranks; i++)
    if (i != r->rank)
      n += v[i];
  return n;
}

/* one call of a collective that moves @n elements of @dt to and from
 * each peer (all-to-all, all-gather, reduce-scatter) */
static void
count_peers (LbRank * r, int op, LbDType dt, gsize n)
{
  const guint64 b = (guint64) n * lb_dtype_size (dt) * (r->n_ranks - 1);
  count (r, op, TRUE, b, b);
}

/* the wrapper of all_to_all or all_gather (@name), counted as @OP: the
 * two have one signature and move @n elements to and from each peer */
#define W_PEERS(name, OP) \
  static gboolean \
  w_##name (gpointer st, LbRank * r, LbDType dt, const void *send, \
      void *recv, gsize n, GError ** e) \
  { \
    count_peers (r, OP, dt, n); \
    return inner_of (r)->name (st, r, dt, send, recv, n, e); \
  }

W_PEERS (all_to_all, LINGBOT_BENCH_OP_ALL_TO_ALL)
W_PEERS (all_gather, LINGBOT_BENCH_OP_ALL_GATHER)

static gboolean
w_all_to_all_v (gpointer st, LbRank * r, LbDType dt, const void *send,
    const gsize * sc, const gsize * sd, void *recv, const gsize * rc,
    const gsize * rd, GError ** e)
{
  const gsize es = lb_dtype_size (dt);
  count (r, LINGBOT_BENCH_OP_ALL_TO_ALL, TRUE, peers_sum (r, rc) * es,
      peers_sum (r, sc) * es);
  return inner_of (r)->all_to_all_v (st, r, dt, send, sc, sd, recv, rc, rd, e);
}

static gboolean
w_all_gather_v (gpointer st, LbRank * r, LbDType dt, const void *send,
    gsize send_count, void *recv, const gsize * rc, const gsize * rd,
    GError ** e)
{
  const gsize es = lb_dtype_size (dt);
  count (r, LINGBOT_BENCH_OP_ALL_GATHER, TRUE, peers_sum (r, rc) * es,
      (guint64) send_count * es * (r->n_ranks - 1));
  return inner_of (r)->all_gather_v (st, r, dt, send, send_count, recv, rc,
      rd, e);
}

static gboolean
w_reduce_scatter (gpointer st, LbRank * r, LbDType dt, const void *send,
    void *recv, gsize recv_count, LbReduceOp op, GError ** e)
{
  count_peers (r, LINGBOT_BENCH_OP_REDUCE_SCATTER, dt, recv_count);
  return inner_of (r)->reduce_scatter (st, r, dt, send, recv, recv_count, op,
      e);
}

static gboolean
w_all_reduce (gpointer st, LbRank * r, LbDType dt, const void *send,
    void *recv, gsize n, LbReduceOp op, GError ** e)
{
  /* ring equivalent: 2 (n-1)/n of the buffer per rank, both ways */
  const guint64 b = r->n_ranks > 1 ? 2 * (guint64) n * lb_dtype_size (dt) *
      (guint64) (r->n_ranks - 1) / r->n_ranks : 0;
  count (r, LINGBOT_BENCH_OP_ALL_REDUCE, TRUE, b, b);
  return inner_of (r)->all_reduce (st, r, dt, send, recv, n, op, e);
}

static gboolean
w_broadcast (gpointer st, LbRank * r, LbDType dt, void *buf, gsize n,
    int root, GError ** e)
{
  const guint64 b = (guint64) n * lb_dtype_size (dt);
  count (r, LINGBOT_BENCH_OP_BROADCAST, TRUE, r->rank == root ? 0 : b,
      r->rank == root ? b * (r->n_ranks - 1) : 0);
  return inner_of (r)->broadcast (st, r, dt, buf, n, root, e);
}

static gboolean
w_send (gpointer st, LbRank * r, LbDType dt, const void *buf, gsize n,
    int peer, GError ** e)
{
  count (r, LINGBOT_BENCH_OP_SEND_RECV, FALSE, 0,
      (guint64) n * lb_dtype_size (dt));
  return inner_of (r)->send (st, r, dt, buf, n, peer, e);
}

static gboolean
w_recv (gpointer st, LbRank * r, LbDType dt, void *buf, gsize n, int peer,
    GError ** e)
{
  /* calls = receives, on any rank */
  count (r, LINGBOT_BENCH_OP_SEND_RECV, TRUE,
      (guint64) n * lb_dtype_size (dt), 0);
  return inner_of (r)->recv (st, r, dt, buf, n, peer, e);
}

static gboolean
w_barrier (gpointer st, LbRank * r, GError ** e)
{
  count (r, LINGBOT_BENCH_OP_BARRIER, TRUE, 0, 0);
  return inner_of (r)->barrier (st, r, e);
}

/**
 * lingbot_bench_counting_collectives:
 * @inner: the class to wrap ("local", "nccl", "solo"); a class this
 *   function returned is returned as it is (never counted twice)
 *
 * A copy of @inner, with its name and flags, whose operations count calls
 * and bytes per rank (lingbot_bench_comm_counts_rank()) before running
 * @inner's.  Call it before the groups that use the copy exist.
 *
 * Returns: (transfer none): the counting class (static storage; at most
 * four distinct inner classes per process).
 */
const LbCollectivesClass *
lingbot_bench_counting_collectives (const LbCollectivesClass * inner)
{
  const LbCollectivesClass *k = NULL;
  g_mutex_lock (&wrap_lock);
  for (int i = 0; i < n_classes && k == NULL; i++)
    if (inner == inner_class[i] || inner == &wrapped_class[i])
      k = &wrapped_class[i];
  if (k == NULL) {
    g_assert (n_classes < MAX_CLASSES);
    LbCollectivesClass *w = &wrapped_class[n_classes];
    *w = *inner;
    /* each operation @inner has, counted */
#define WRAP(op) if (w->op) w->op = w_##op
    WRAP (all_to_all);
    WRAP (all_to_all_v);
    WRAP (all_gather);
    WRAP (all_gather_v);
    WRAP (reduce_scatter);
    WRAP (all_reduce);
    WRAP (broadcast);
    WRAP (send);
    WRAP (recv);
    WRAP (barrier);
#undef WRAP
    inner_class[n_classes++] = inner;
    k = w;
  }
  g_mutex_unlock (&wrap_lock);
  return k;
}

static void
load (int rank, LingbotBenchCommCounts * out)
{
  const LingbotBenchCommCounts *c = &counts[rank];
  for (int i = 0; i < LINGBOT_BENCH_N_OPS; i++) {
    out->calls[i] = __atomic_load_n (&c->calls[i], __ATOMIC_RELAXED);
    out->bytes[i] = __atomic_load_n (&c->bytes[i], __ATOMIC_RELAXED);
    out->sent[i] = __atomic_load_n (&c->sent[i], __ATOMIC_RELAXED);
    out->link[i] = __atomic_load_n (&c->link[i], __ATOMIC_RELAXED);
  }
}

/**
 * lingbot_bench_comm_counts_rank:
 * @rank: a rank index (ranks past the last counted one share its slot)
 * @out: (out): what that rank counted so far, every group together
 */
void
lingbot_bench_comm_counts_rank (int rank, LingbotBenchCommCounts * out)
{
  load (CLAMP (rank, 0, LINGBOT_BENCH_MAX_RANKS - 1), out);
}

/**
 * lingbot_bench_comm_counts_total:
 * @out: (out): bytes summed over every rank; calls are rank 0's (one per
 *   collective), except send_recv's, the receives of every rank
 */
void
lingbot_bench_comm_counts_total (LingbotBenchCommCounts * out)
{
  memset (out, 0, sizeof *out);
  for (int r = 0; r < LINGBOT_BENCH_MAX_RANKS; r++) {
    LingbotBenchCommCounts c;
    load (r, &c);
    for (int i = 0; i < LINGBOT_BENCH_N_OPS; i++) {
      if (r == 0 || i == LINGBOT_BENCH_OP_SEND_RECV)
        out->calls[i] += c.calls[i];
      out->bytes[i] += c.bytes[i];
      out->sent[i] += c.sent[i];
      out->link[i] += c.link[i];
    }
  }
}

/**
 * lingbot_bench_comm_counts_diff:
 * @after: a later snapshot
 * @before: an earlier one
 * @out: (out): @after - @before, member by member (may be @after)
 */
void
lingbot_bench_comm_counts_diff (const LingbotBenchCommCounts * after,
    const LingbotBenchCommCounts * before, LingbotBenchCommCounts * out)
{
  for (int i = 0; i < LINGBOT_BENCH_N_OPS; i++) {
    out->calls[i] = after->calls[i] - before->calls[i];
    out->bytes[i] = after->bytes[i] - before->bytes[i];
    out->sent[i] = after->sent[i] - before->sent[i];
    out->link[i] = after->link[i] - before->link[i];
  }
}

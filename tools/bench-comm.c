/* lingbot-gst: `lingbot-bench comm`: throughput of the comm/ layer on CPU
 * ranks, next to a plain memcpy of the same bytes
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-bench comm [--ranks 2,4] [--size-mib 1,16,64] [--iters K] [--json]
 *
 * Sizes follow nccl-tests: S is the bytes of each rank's output buffer
 * (all-gather: each rank contributes S/n; all-to-all: S in and S out).
 * "GB/s" is the bytes written into receive buffers by all ranks together
 * per second (10^9 B/s); "memcpy" is one thread copying S bytes between two
 * warm buffers, and the ratio compares the group with that one thread
 * (on this 2-core machine, 4 ranks share 2 cores).
 */
#include "tools/bench-comm.h"
#include "tools/bench-common.h"
#include "tools/tool-common.h"
#include "tools/tool-json.h"
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum
{
  OP_ALL_TO_ALL,
  OP_ALL_GATHER,
  OP_ALL_REDUCE,
  OP_BROADCAST,
  OP_SEND_RECV,
  OP_COUNT
} BenchOp;

static const char *op_names[OP_COUNT] = {
  "all-to-all", "all-gather", "all-reduce", "broadcast", "send/recv",
};

typedef struct
{
  int n;
  gsize bytes;                  /* S */
  int iters;
  BenchOp op;
  void *send[64];
  void *recv[64];
} CollBench;

static gboolean
rank_alloc (LbRank * rank, gpointer data, GError ** error)
{
  CollBench *b = data;
  b->send[rank->rank] = g_aligned_alloc (1, b->bytes, 64);
  b->recv[rank->rank] = g_aligned_alloc (1, b->bytes, 64);
  /* First touch on the rank's own thread. */
  memset (b->send[rank->rank], rank->rank, b->bytes);
  memset (b->recv[rank->rank], 0, b->bytes);
  return TRUE;
}

static gboolean
rank_free (LbRank * rank, gpointer data, GError ** error)
{
  CollBench *b = data;
  g_aligned_free (b->send[rank->rank]);
  g_aligned_free (b->recv[rank->rank]);
  return TRUE;
}

static gboolean
rank_coll (LbRank * rank, gpointer data, GError ** error)
{
  CollBench *b = data;
  int n = b->n, me = rank->rank;
  void *s = b->send[me], *r = b->recv[me];
  gsize S = b->bytes;
  for (int it = 0; it < b->iters; it++) {
    gboolean ok = TRUE;
    switch (b->op) {
      case OP_ALL_TO_ALL:
        ok = lb_comm_all_to_all (rank, LB_DTYPE_U8, s, r, S / n, error);
        break;
      case OP_ALL_GATHER:
        ok = lb_comm_all_gather (rank, LB_DTYPE_U8, s, r, S / n, error);
        break;
      case OP_ALL_REDUCE:
        ok = lb_comm_all_reduce (rank, LB_DTYPE_F32, s, r, S / 4,
            LB_REDUCE_SUM, error);
        break;
      case OP_BROADCAST:
        ok = lb_comm_broadcast (rank, LB_DTYPE_U8, me == 0 ? s : r, S, 0,
            error);
        break;
      case OP_SEND_RECV:{
        int peer = me ^ 1;
        if (peer >= n)
          break;
        ok = lb_comm_group_start (rank, error) &&
            lb_comm_send (rank, LB_DTYPE_U8, s, S, peer, error) &&
            lb_comm_recv (rank, LB_DTYPE_U8, r, S, peer, error) &&
            lb_comm_group_end (rank, error);
        break;
      }
      default:
        break;
    }
    if (!ok)
      return FALSE;
  }
  return lb_comm_synchronize (rank, error);
}

static double
received_bytes (BenchOp op, int n, gsize S)
{
  switch (op) {
    case OP_BROADCAST:
      return (double) (n - 1) * S;
    case OP_SEND_RECV:
      return (double) (n / 2 * 2) * S;
    default:
      return (double) n *S;
  }
}

/* ---- channels ---- */

typedef struct
{
  LbChannel *ch;
  int iters;
} ChanBench;

/* one side of the channel: @b's iters bands, each taken (acquire /
 * receive) and then handed on (commit / ack) */
typedef gboolean (*BandTake) (LbChannel *, LbRank *, LbTensor *, GError **);
typedef gboolean (*BandDone) (LbChannel *, LbRank *, GError **);

static gboolean
rank_bands (ChanBench * b, LbRank * rank, BandTake take, BandDone done,
    GError ** error)
{
  for (int it = 0; it < b->iters; it++) {
    LbTensor band;
    if (!take (b->ch, rank, &band, error) || !done (b->ch, rank, error))
      return FALSE;
  }
  return TRUE;
}

static gboolean
rank_produce (LbRank * rank, gpointer data, GError ** error)
{
  return rank_bands (data, rank, lb_channel_acquire, lb_channel_commit, error);
}

static gboolean
rank_consume (LbRank * rank, gpointer data, GError ** error)
{
  return rank_bands (data, rank, lb_channel_receive, lb_channel_ack, error);
}

static gboolean
run_pair (LbWorkerGroup * gp, LbWorkerGroup * gc, ChanBench * b,
    GError ** error)
{
  LbWorkerJob jp = LB_WORKER_JOB_INIT, jc = LB_WORKER_JOB_INIT;
  if (!lb_worker_group_submit (gp, &jp, -1, rank_produce, b, error))
    return FALSE;
  if (!lb_worker_group_submit (gc, &jc, -1, rank_consume, b, error)) {
    lb_channel_cancel (b->ch);
    lb_worker_group_wait (gp, &jp, NULL);
    return FALSE;
  }
  gboolean okp = lb_worker_group_wait (gp, &jp, error);
  gboolean okc = lb_worker_group_wait (gc, &jc, okp ? error : NULL);
  return okp && okc;
}

/* Returns seconds per message, or < 0 on error. */
static double
bench_channel (int n, gsize S, int iters, LbTransportKind kind,
    LbChannelStats * stats, GError ** error)
{
  int prod_ord[64], cons_ord[64];
  for (int i = 0; i < n; i++) {
    prod_ord[i] = i;
    cons_ord[i] = kind == LB_TRANSPORT_SAME_DEVICE ? i : n + i;
  }
  LbWorkerGroupOptions po = {.name = "prod" }, co = {.name = "cons" };
  LbWorkerGroup *gp = lb_worker_group_new (lb_cpu_backend (), n, prod_ord,
      &po, error);
  if (gp == NULL)
    return -1;
  LbWorkerGroup *gc = lb_worker_group_new (lb_cpu_backend (), n, cons_ord,
      &co, error);
  if (gc == NULL) {
    lb_worker_group_unref (gp);
    return -1;
  }
  /* [n * 256 rows, S / 256 bytes per row], one band of S bytes per rank. */
  LbChannelConfig cfg = {.producer = gp,.consumer = gc,.dtype = LB_DTYPE_U8,
    .ndim = 2,.shape = {n * 256, (int64_t) (S / 256)},.shard_dim = 0,
    .n_slots = 2,.name = "bench",
    .flags = kind == LB_TRANSPORT_HOST_STAGED ? LB_CHANNEL_NO_PEER_COPY : 0,
  };
  double secs = -1;
  /* Warm-up: every slot once, so page faults of first touch are not
   * measured. */
  ChanBench b = {.iters = 2 * cfg.n_slots };
  b.ch = lb_channel_new (&cfg, error);
  if (b.ch != NULL && run_pair (gp, gc, &b, error)) {
    lb_channel_clear_stats (b.ch);
    b.iters = iters;
    gint64 t0 = g_get_monotonic_time ();
    if (run_pair (gp, gc, &b, error)) {
      secs = lingbot_bench_seconds_since (t0) / iters;
      lb_channel_get_stats (b.ch, stats);
    }
  }
  lb_channel_free (b.ch);
  lb_worker_group_unref (gp);
  lb_worker_group_unref (gc);
  return secs;
}

/* ---- memcpy reference ---- */

static double
memcpy_gbps (gsize S, int iters)
{
  char *a = g_aligned_alloc (1, S, 64), *b = g_aligned_alloc (1, S, 64);
  memset (a, 1, S);
  memset (b, 2, S);
  memcpy (b, a, S);
  gint64 t0 = g_get_monotonic_time ();
  for (int i = 0; i < iters; i++) {
    a[i % S] = (char) i;
    memcpy (b, a, S);
  }
  double secs = lingbot_bench_seconds_since (t0);
  volatile char sink = b[S / 2];
  (void) sink;
  g_aligned_free (a);
  g_aligned_free (b);
  return (double) S *iters / secs / 1e9;
}

/* ---- driver ---- */

static gboolean
parse_list (const char *s, int *out, int max, int *n_out, int lo, int hi)
{
  g_auto (GStrv) parts = g_strsplit (s, ",", -1);
  int n = 0;
  for (int i = 0; parts[i] != NULL; i++) {
    char *end = NULL;
    long v = strtol (parts[i], &end, 10);
    if (end == parts[i] || *end != '\0' || v < lo || v > hi || n == max)
      return FALSE;
    out[n++] = (int) v;
  }
  *n_out = n;
  return n > 0;
}

static int
auto_iters (gsize S)
{
  /* About 128 MiB of traffic per rank and measurement, at least 3. */
  return (int) MAX (3, MIN (50, (gsize) 128 * 1024 * 1024 / S));
}

/* one row: a JSON line or a table row; @copies_per_msg and @wait_ms_per_msg
 * (a channel's) are left out when negative */
static void
print_row (gboolean json, int n, int mib, const char *what, int iters,
    double secs_per_iter, double bytes, double mc, double copies_per_msg,
    double wait_ms_per_msg)
{
  double gbps = bytes / secs_per_iter / 1e9;
  if (json) {
    g_autoptr (JsonBuilder) b = json_builder_new ();
    json_builder_begin_object (b);
    lingbot_json_string (b, "bench", "comm");
    lingbot_json_int (b, "ranks", n);
    lingbot_json_int (b, "size_mib", mib);
    lingbot_json_string (b, "op", what);
    lingbot_json_int (b, "iters", iters);
    lingbot_json_double (b, "seconds_per_iter", secs_per_iter);
    lingbot_json_double (b, "gbps", gbps);
    lingbot_json_double (b, "memcpy_gbps", mc);
    lingbot_json_double (b, "ratio", gbps / mc);
    if (copies_per_msg >= 0) {
      lingbot_json_double (b, "copies_per_msg", copies_per_msg);
      lingbot_json_double (b, "wait_ms_per_msg", wait_ms_per_msg);
    }
    json_builder_end_object (b);
    lingbot_json_print (b);
  } else if (copies_per_msg >= 0) {
    printf ("%5d %8d  %-22s %6d %11.3f %9.2f %9.2f %7.2f  copies/msg %.1f, "
        "wait %.2f ms/msg\n", n, mib, what, iters, secs_per_iter * 1e3, gbps,
        mc, gbps / mc, copies_per_msg, wait_ms_per_msg);
  } else {
    printf ("%5d %8d  %-22s %6d %11.3f %9.2f %9.2f %7.2f  \n", n, mib,
        what, iters, secs_per_iter * 1e3, gbps, mc, gbps / mc);
  }
}

/**
 * lingbot_bench_comm_main:
 * @argc: argument count (argv[0] is the command name)
 * @argv: --ranks LIST (default 2,4), --size-mib LIST (default 1,16,64),
 *   --iters K (default: about 128 MiB per rank per measurement), --json
 *
 * `lingbot-bench comm`: GB/s of the local collectives (all-to-all,
 * all-gather, all-reduce, broadcast, send/recv) and of tensor channels per
 * transport (same-device, peer, host-staged) on CPU ranks, each next to a
 * one-thread memcpy of S bytes and the ratio to it.  About 20-30 s with
 * the defaults on 2 cores.
 *
 * Returns: the process exit status (0, 1 on a run error, 2 on bad options).
 */
int
lingbot_bench_comm_main (int argc, char **argv)
{
  g_autofree char *ranks_s = NULL, *sizes_s = NULL;
  gint iters_opt = 0;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    {"ranks", 0, 0, G_OPTION_ARG_STRING, &ranks_s,
        "CPU rank counts (2,4)", "LIST"},
    {"size-mib", 0, 0, G_OPTION_ARG_STRING, &sizes_s,
        "bytes per rank in MiB (1,16,64)", "LIST"},
    {"iters", 0, 0, G_OPTION_ARG_INT, &iters_opt,
        "timed repetitions (0: about 128 MiB per rank)", "K"},
    {"json", 0, 0, G_OPTION_ARG_NONE, &json, "one JSON object per line",
        NULL},
    {NULL}
  };
  const char *prog = "lingbot-bench comm";
  if (!lingbot_tool_parse (prog, "- collectives and channel throughput",
          NULL, entries, &argc, &argv))
    return LINGBOT_TOOL_USAGE;
  /* defaults set after parsing: GOption drops (leaks) a string it
   * replaces */
  if (ranks_s == NULL)
    ranks_s = g_strdup ("2,4");
  if (sizes_s == NULL)
    sizes_s = g_strdup ("1,16,64");
  int ranks[16], sizes[16], n_ranks, n_sizes;
  if (iters_opt < 0 || !parse_list (ranks_s, ranks, 16, &n_ranks, 1, 64) ||
      !parse_list (sizes_s, sizes, 16, &n_sizes, 1, 4096))
    return lingbot_tool_usage_error (prog, "--ranks takes 1..64, --size-mib "
        "1..4096 (comma lists), --iters >= 0");
  g_autoptr (GError) err = NULL;

  if (!json)
    printf ("ranks size_MiB  %-22s %6s %11s %9s %9s %7s\n", "operation",
        "iters", "ms/iter", "GB/s", "memcpy", "ratio");
  for (int si = 0; si < n_sizes; si++) {
    gsize S = (gsize) sizes[si] * 1024 * 1024;
    int iters = iters_opt ? iters_opt : auto_iters (S);
    double mc = memcpy_gbps (S, iters);
    for (int ri = 0; ri < n_ranks; ri++) {
      int n = ranks[ri];
      LbWorkerGroupOptions opts = {.name = "bench" };
      LbWorkerGroup *g = lb_worker_group_new (lb_cpu_backend (), n, NULL,
          &opts, &err);
      if (g == NULL) {
        fprintf (stderr, "lingbot-bench comm: %s\n", err->message);
        return 1;
      }
      CollBench b = {.n = n,.bytes = S };
      if (!lb_worker_group_run (g, rank_alloc, &b, &err)) {
        fprintf (stderr, "lingbot-bench comm: %s\n", err->message);
        lb_worker_group_unref (g);
        return 1;
      }
      print_row (json, n, sizes[si], "memcpy (1 thread)", iters,
          (double) S / mc / 1e9, (double) S, mc, -1, -1);
      for (int op = 0; op < OP_COUNT; op++) {
        if (op == OP_SEND_RECV && n < 2)
          continue;
        b.op = op;
        b.iters = 1;            /* warm-up */
        gboolean ok = lb_worker_group_run (g, rank_coll, &b, &err);
        b.iters = iters;
        gint64 t0 = g_get_monotonic_time ();
        ok = ok && lb_worker_group_run (g, rank_coll, &b, &err);
        double secs = lingbot_bench_seconds_since (t0) / iters;
        if (!ok) {
          fprintf (stderr, "lingbot-bench comm: %s\n", err->message);
          lb_worker_group_run (g, rank_free, &b, NULL);
          lb_worker_group_unref (g);
          return 1;
        }
        print_row (json, n, sizes[si], op_names[op], iters, secs,
            received_bytes (op, n, S), mc, -1, -1);
      }
      lb_worker_group_run (g, rank_free, &b, NULL);
      lb_worker_group_unref (g);

      static const LbTransportKind kinds[3] = { LB_TRANSPORT_SAME_DEVICE,
        LB_TRANSPORT_PEER, LB_TRANSPORT_HOST_STAGED
      };
      for (int k = 0; k < 3; k++) {
        LbChannelStats st;
        double secs = bench_channel (n, S, iters, kinds[k], &st, &err);
        if (secs < 0) {
          fprintf (stderr, "lingbot-bench comm: %s\n", err->message);
          return 1;
        }
        char what[64];
        g_snprintf (what, sizeof what, "channel %s",
            lb_transport_kind_name (kinds[k]));
        guint64 copies = 0;
        for (int t = 0; t < LB_TRANSPORT_COUNT; t++)
          copies += st.copies[t];
        print_row (json, n, sizes[si], what, iters, secs, (double) n * S,
            mc, (double) copies / iters, st.wait_us / 1e3 / iters);
      }
    }
  }
  return 0;
}

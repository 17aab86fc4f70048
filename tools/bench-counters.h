/* lingbot-gst: lingbot-bench's counting collectives (bytes per rank and
 * operation kind)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "comm/comm.h"

G_BEGIN_DECLS

typedef enum
{
  LINGBOT_BENCH_OP_ALL_TO_ALL,
  LINGBOT_BENCH_OP_ALL_GATHER,
  LINGBOT_BENCH_OP_REDUCE_SCATTER,
  LINGBOT_BENCH_OP_ALL_REDUCE,
  LINGBOT_BENCH_OP_BROADCAST,
  LINGBOT_BENCH_OP_SEND_RECV,
  LINGBOT_BENCH_OP_BARRIER,
  LINGBOT_BENCH_N_OPS
} LingbotBenchOp;

/* most ranks counted separately (a worker group has at most 64) */
#define LINGBOT_BENCH_MAX_RANKS 64

extern const char *const lingbot_bench_op_names[LINGBOT_BENCH_N_OPS];

/**
 * LingbotBenchCommCounts:
 * @calls: operations (see the functions that fill it)
 * @bytes: bytes received from the other ranks
 * @sent: bytes sent to the other ranks
 * @link: the sum over operations of max (@sent, @bytes) of the call: the
 *   bytes one full-duplex link per rank carries in its busier direction
 *
 * Counts per operation kind (#LingbotBenchOp).  all_reduce counts the
 * ring's 2 (n - 1) / n of the buffer both ways; send_recv is counted at the
 * receiver (@bytes) and at the sender (@sent).
 */
typedef struct
{
  guint64 calls[LINGBOT_BENCH_N_OPS];
  guint64 bytes[LINGBOT_BENCH_N_OPS];
  guint64 sent[LINGBOT_BENCH_N_OPS];
  guint64 link[LINGBOT_BENCH_N_OPS];
} LingbotBenchCommCounts;

const LbCollectivesClass *lingbot_bench_counting_collectives (const
    LbCollectivesClass * inner);
void lingbot_bench_comm_counts_total (LingbotBenchCommCounts * out);
void lingbot_bench_comm_counts_rank (int rank, LingbotBenchCommCounts * out);
void lingbot_bench_comm_counts_diff (const LingbotBenchCommCounts * after,
    const LingbotBenchCommCounts * before, LingbotBenchCommCounts * out);

G_END_DECLS

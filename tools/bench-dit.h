/* lingbot-gst: `lingbot-bench dit` (streamed DiT chunks), its FLOP and
 * device-memory models
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

#include "lingbot/dit.h"

G_BEGIN_DECLS

/* spec/performance_anchors.md 2.2, 832x480 (latent 60x104, 6240 query
 * tokens, window 18 frames = 28080 keys, 512 text tokens, 5 passes), in
 * TFLOP per chunk: with the camera path once per chunk (what lingbot runs)
 * and as the reference executes it (camera path in every pass). */
#define LINGBOT_BENCH_SPEC_14B_480P_TFLOP 1529.9
#define LINGBOT_BENCH_SPEC_14B_480P_REFERENCE_TFLOP 1742.3

/**
 * LingbotBenchDitFlops:
 * @linear: the x-dependent GEMMs of one pass: per block self-attention
 *   q, k, v, o and cross-attention q, o (6 D^2 per token), FFN (2 D F),
 *   plus the patch embedding and the head
 * @self_attn: QK^T and PV of one pass over all blocks, 4 N K D per block
 * @cross_attn: the same against the text K/V, 4 N L_text D per block
 * @pass: @linear + @self_attn + @cross_attn
 * @camera: the x-independent part: control patch embedding, the c2ws MLP
 *   (2 D^2) and the 4 D^2 camera linears of every block, per token
 * @chunk: n_passes x @pass + @camera: a chunk as lingbot executes it
 *   (camera path once per chunk)
 * @chunk_reference: n_passes x (@pass + @camera): the reference's count
 *   (camera path recomputed in every pass), the numerator of the anchors'
 *   MFU
 *
 * FLOPs (2 per multiply-add), float64.
 */
typedef struct
{
  double linear, self_attn, cross_attn, pass, camera, chunk, chunk_reference;
} LingbotBenchDitFlops;

void lingbot_bench_dit_flops (const LingbotDitConfig * cfg, int64_t tokens,
    int64_t text_len, int64_t keys, int n_passes, LingbotBenchDitFlops * out);

/**
 * LingbotBenchDitMemory:
 * @weights: one full copy of the weights (Ulysses replicates them)
 * @kv_cache: self-attention K and V of every block, this rank's heads
 * @camera: per-block camera scale and shift of this rank's tokens
 * @cross_kv: text K and V of every block (all heads)
 * @activations: the forward's scratch (x a q k v o t1 ctl, FFN hidden, z)
 * @ulysses: exchange buffers (0 with one rank)
 * @session: latents, tokens, control, noise, time modulations
 * @total: the sum
 *
 * Device bytes per rank (docs/design/dit-devices.md "Memory per rank";
 * not counted: CUDA context, cuBLASLt/attention workspaces, allocator
 * slack).
 */
typedef struct
{
  guint64 weights, kv_cache, camera, cross_kv, activations, ulysses, session,
      total;
} LingbotBenchDitMemory;

void lingbot_bench_dit_memory (const LingbotDitConfig * cfg, int64_t lat_h,
    int64_t lat_w, int64_t text_len, int n_ranks, int n_steps,
    int weight_bytes, LingbotBenchDitMemory * out);

/**
 * LingbotBenchDitExchange:
 * @all_to_alls: Ulysses all-to-alls per chunk (4 per block and pass)
 * @bytes_f32: bytes leaving one rank per chunk with f32 exchanges
 * @bytes_bf16: the same in bf16 mode (lingbot/dit-ulysses.c: k, v and the
 *   attention output as bf16, q as bf16 too at head dim 64 or 128)
 * @exposed_bf16: of @bytes_bf16, what the overlap does not hide (q's
 *   exchange and 1/G of the output's, G = 2 head groups)
 *
 * The sequence-parallel traffic of one chunk for a rank with the mean
 * band (spec performance anchors 2.6): each exchange sends N / R tokens x
 * D elements, (R - 1) / R of it to peers; 0 with one rank.
 */
typedef struct
{
  guint64 all_to_alls, bytes_f32, bytes_bf16, exposed_bf16;
} LingbotBenchDitExchange;

void lingbot_bench_dit_exchange (const LingbotDitConfig * cfg, int64_t lat_h,
    int64_t lat_w, int n_ranks, int n_passes, LingbotBenchDitExchange * out);

/**
 * LingbotBenchDitRankExchange:
 * @recv: bytes one rank receives from the others per chunk, by exchange:
 *   0 q, 1 k, 2 v, 3 the attention output (the Ulysses all-to-alls), 4 the
 *   head output (the all-gather of every pass)
 * @sent: bytes it sends to the others, in the same order
 * @link: max (@recv, @sent) of each call, summed: what its link carries
 *   in the busier direction
 * @all_to_all_recv: @recv[0..3] summed
 * @all_gather_recv: @recv[4]
 * @link_total: @link summed
 * @out_groups: head groups of the overlapped output exchange (1: none)
 * @overlap: whether the exposure below assumes the overlap
 * @exposed_link: of @link_total, what the overlap leaves exposed
 *   (docs/design/cuda.md "Communication overlap": q's all-to-all, 1 /
 *   @out_groups of the output's, the head-output all-gather; k's and v's
 *   run behind the v and q GEMMs); all of it without the overlap
 *
 * The exchange of one given rank of a Ulysses world per chunk, from the
 * bands and heads of lingbot_dit_shard_init() and the exchange dtypes of
 * lingbot/dit-ulysses.c.
 */
typedef struct
{
  guint64 recv[5], sent[5], link[5];
  guint64 all_to_all_recv, all_gather_recv, link_total;
  int out_groups;
  gboolean overlap;
  guint64 exposed_link;
} LingbotBenchDitRankExchange;

int lingbot_bench_dit_out_groups (int heads_local);
void lingbot_bench_dit_rank_exchange (const LingbotDitConfig * cfg,
    int64_t lat_h, int64_t lat_w, int world_ranks, int rank, int n_passes,
    gboolean bf16, gboolean overlap, LingbotBenchDitRankExchange * out);

int lingbot_bench_dit_main (int argc, char **argv);

G_END_DECLS

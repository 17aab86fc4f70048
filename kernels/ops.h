/* lingbot-gst: the op table every backend implements
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Conventions for every op:
 * - the first argument is the LbStream the op runs on; tensors live on its
 *   device;
 * - activations are float32 unless stated; weights may be f32, or bf16/f16
 *   where the op says so (the CPU backend widens weights once at load time,
 *   so its ops take f32 weights);
 * - output tensors are preallocated by the caller (no allocation inside an
 *   op, so per-chunk loops allocate nothing) and must not alias inputs unless
 *   the op says "in place";
 * - tensors are contiguous unless the op says strided views are accepted;
 * - a shape/dtype mismatch returns FALSE with an %LB_ERROR_SHAPE GError that
 *   names the op, the argument and both shapes.  Ops never abort.
 *
 * The ops themselves, each with its contract, are listed in
 * kernels/ops-list.h.  The CPU implementation (kernels/cpu/) is the
 * reference for parity tests of every other backend.
 */
#pragma once

#include "kernels/tensor.h"

G_BEGIN_DECLS

typedef struct _LbStream LbStream;

/* The usual expansions of an op's arguments (LB_OP_ARGS_name (M) in
 * kernels/ops-list.h): a parameter declaration (`, const LbTensor * x`)
 * and the argument's name (`, x`). */
#define LB_OP_PARAM_IN(n) , const LbTensor * n
#define LB_OP_PARAM_OUT(n) , LbTensor * n
#define LB_OP_PARAM_F32(n) , float n
#define LB_OP_PARAM_INT(n) , int n
#define LB_OP_PARAM_I64(n) , int64_t n
#define LB_OP_PARAM_BOOL(n) , gboolean n
#define LB_OP_PARAM(kind, n) LB_OP_PARAM_##kind (n)
#define LB_OP_ARG_NAME(kind, n) , n

/**
 * LbOps:
 *
 * One function pointer per op, in the order of kernels/ops-list.h, each
 * `gboolean (*name) (LbStream * s, ..., GError ** error)` with the
 * arguments and the contract (shapes, dtypes, in-place rules, spec
 * sections) of its entry there.
 */
typedef struct _LbOps
{
#define LB_OP(name) \
  gboolean (*name) (LbStream * s LB_OP_ARGS_##name (LB_OP_PARAM), \
      GError ** error);
#include "kernels/ops-list.h"
} LbOps;

/**
 * lb_rope_tables_new:
 * @head_dim: per-head dimension (even)
 * @max_pos: positions per axis (1024 in the reference)
 * @theta: frequency base (10000)
 * @cos_out: (out) (transfer full): [max_pos, head_dim/2] float32
 * @sin_out: (out) (transfer full): [max_pos, head_dim/2] float32
 *
 * Builds the 3-D RoPE tables of spec 1.8 in float64 and rounds to float32
 * (bit-identical to the golden `trace.freqs_cos/sin` for head_dim 32):
 * with t = (head_dim - 4*(head_dim/6))/2 temporal pairs and h = head_dim/6
 * pairs each for height and width, column p < t holds angle
 * pos * theta^(-2p/(2t)), column t + j (j < h) holds pos * theta^(-2j/(2h))
 * and column t + h + j the same for width.  Row r is position r for every
 * axis; the op picks the axis's position per column range.
 * Implemented in kernels/cpu/rope.c.
 */
void lb_rope_tables_new (int head_dim, int max_pos, double theta,
    LbTensor ** cos_out, LbTensor ** sin_out);

/**
 * lb_rope_pair_frequency:
 * @head_dim: per-head dimension (even)
 * @theta: frequency base (10000)
 * @pair: pair index < head_dim / 2
 *
 * The float64 frequency of a pair's column in lb_rope_tables_new().
 * Implemented in kernels/cpu/rope.c.
 *
 * Returns: radians per position.
 */
double lb_rope_pair_frequency (int head_dim, double theta, int pair);

/**
 * lb_rope_fill:
 * @head_dim: per-head dimension (even)
 * @theta: frequency base (10000)
 * @pos0: first position (unbounded)
 * @n_pos: positions
 * @pair0: first pair
 * @n_pairs: pairs
 * @cos_out: (out caller-allocates): f32 [n_pos, n_pairs]
 * @sin_out: (out caller-allocates): f32 [n_pos, n_pairs]
 *
 * The table formula of lb_rope_tables_new() for any positions and a range
 * of pairs (bit for bit the table's entries inside it).  Allocates
 * nothing.  Implemented in kernels/cpu/rope.c.
 */
void lb_rope_fill (int head_dim, double theta, int64_t pos0, int64_t n_pos,
    int pair0, int n_pairs, float *cos_out, float *sin_out);

G_END_DECLS

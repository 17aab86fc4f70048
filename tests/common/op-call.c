/* lingbot-gst: one op call as data, run through any LbOps table (tests)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "op-call.h"

/* ---- the arguments' kinds and names ---- */

#define ONE(kind, n) + 1
#define TENSOR_IN 1
#define TENSOR_OUT 1
#define TENSOR_F32 0
#define TENSOR_INT 0
#define TENSOR_I64 0
#define TENSOR_BOOL 0
#define TENSOR(kind, n) + TENSOR_##kind
#define KIND(kind, n) OP_ARG_##kind,
#define NAME(kind, n) #n,

static const OpInfo op_infos[OP_COUNT] = {
#define LB_OP(name) \
  [OP_##name] = { #name, 0 LB_OP_ARGS_##name (ONE), \
    { LB_OP_ARGS_##name (KIND) }, { LB_OP_ARGS_##name (NAME) }, \
    0 LB_OP_ARGS_##name (TENSOR) },
#include "kernels/ops-list.h"
};

/* every op's arguments fit an OpCall */
#define FLOAT_IN 0
#define FLOAT_OUT 0
#define FLOAT_F32 1
#define FLOAT_INT 0
#define FLOAT_I64 0
#define FLOAT_BOOL 0
#define FLOAT(kind, n) + FLOAT_##kind
#define LB_OP(name) \
  G_STATIC_ASSERT ((0 LB_OP_ARGS_##name (ONE)) <= OP_CALL_MAX_ARGS); \
  G_STATIC_ASSERT ((0 LB_OP_ARGS_##name (TENSOR)) <= OP_CALL_MAX_TENSORS); \
  G_STATIC_ASSERT ((0 LB_OP_ARGS_##name (FLOAT)) <= OP_CALL_MAX_FLOATS); \
  G_STATIC_ASSERT ((0 LB_OP_ARGS_##name (ONE) - (0 LB_OP_ARGS_##name \
              (TENSOR)) - (0 LB_OP_ARGS_##name (FLOAT))) <= \
      OP_CALL_MAX_INTS);
#include "kernels/ops-list.h"

/**
 * op_info:
 * @op: an op
 *
 * Returns: (transfer none): its name and arguments.
 */
const OpInfo *
op_info (OpId op)
{
  g_return_val_if_fail (op >= 0 && op < OP_COUNT, NULL);
  return &op_infos[op];
}

/* ---- the typed call ---- */

/* One statement per argument, in order, so the counters are sequenced. */
#define UNPACK_IN(n) LbTensor *a_##n = c->t[kt++];
#define UNPACK_OUT(n) LbTensor *a_##n = c->t[kt++];
#define UNPACK_F32(n) float a_##n = c->f[kf++];
#define UNPACK_INT(n) int a_##n = (int) c->i[ki++];
#define UNPACK_I64(n) int64_t a_##n = c->i[ki++];
#define UNPACK_BOOL(n) gboolean a_##n = (gboolean) c->i[ki++];
#define UNPACK(kind, n) UNPACK_##kind (n)
#define PASS(kind, n) , a_##n

typedef gboolean (*RunFunc) (const LbOps * ops, LbStream * s,
    const OpCall * c, GError ** error);

#define LB_OP(name) \
static gboolean \
run_##name (const LbOps * ops, LbStream * s, const OpCall * c, \
    GError ** error) \
{ \
  int kt = 0, kf = 0, ki = 0; \
  LB_OP_ARGS_##name (UNPACK) \
  (void) kt; \
  (void) kf; \
  (void) ki; \
  return ops->name (s LB_OP_ARGS_##name (PASS), error); \
}
#include "kernels/ops-list.h"

static const RunFunc runners[OP_COUNT] = {
#define LB_OP(name) [OP_##name] = run_##name,
#include "kernels/ops-list.h"
};

/**
 * op_call_run:
 * @ops: the table to call
 * @s: the stream the op runs on
 * @c: the op and its arguments
 * @error: the op's error
 *
 * Calls `ops->op (s, <c's arguments>, error)`.
 *
 * Returns: what the op returns.
 */
gboolean
op_call_run (const LbOps * ops, LbStream * s, const OpCall * c, GError ** error)
{
  g_return_val_if_fail (c->op >= 0 && c->op < OP_COUNT, FALSE);
  return runners[c->op] (ops, s, c, error);
}

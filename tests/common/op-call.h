/* lingbot-gst: one op call as data, run through any LbOps table (tests)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Generated from kernels/ops-list.h: an id per op, its arguments' kinds
 * and names, and op_call_run(), which unpacks an #OpCall into the typed
 * call of a table.  fakedev replays its recorded graphs with it, and the
 * table-driven parity tests (op-cases.h) run each case with it on the CPU
 * and on the backend under test.
 */
#pragma once

#include "kernels/backend.h"

G_BEGIN_DECLS

typedef enum
{
#define LB_OP(name) OP_##name,
#include "kernels/ops-list.h"
  OP_COUNT
} OpId;

typedef enum
{
  OP_ARG_IN,
  OP_ARG_OUT,
  OP_ARG_F32,
  OP_ARG_INT,
  OP_ARG_I64,
  OP_ARG_BOOL,
} OpArgKind;

#define OP_CALL_MAX_ARGS 12
#define OP_CALL_MAX_TENSORS 10
#define OP_CALL_MAX_FLOATS 4
#define OP_CALL_MAX_INTS 8

/**
 * OpInfo:
 * @name: the LbOps member
 * @n_args: arguments between the stream and the error
 * @kind: (array length=n_args): each argument's kind
 * @arg: (array length=n_args): each argument's name
 * @n_tensors: the IN and OUT arguments
 */
typedef struct
{
  const char *name;
  int n_args;
  OpArgKind kind[OP_CALL_MAX_ARGS];
  const char *arg[OP_CALL_MAX_ARGS];
  int n_tensors;
} OpInfo;

/**
 * OpCall:
 * @op: the op
 * @t: its tensor arguments in order (%NULL where none is passed)
 * @f: its F32 arguments in order
 * @i: its INT, I64 and BOOL arguments in order
 */
typedef struct
{
  OpId op;
  LbTensor *t[OP_CALL_MAX_TENSORS];
  float f[OP_CALL_MAX_FLOATS];
  int64_t i[OP_CALL_MAX_INTS];
} OpCall;

const OpInfo *op_info (OpId op);
gboolean op_call_run (const LbOps * ops, LbStream * s, const OpCall * c,
    GError ** error);

G_END_DECLS

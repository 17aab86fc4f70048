/* lingbot-gst: the table of op parity cases (test-backend-ops style)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * One list of cases (op, argument shapes and views, scalars, tolerance),
 * built in tests/common/op-cases.c, run by one driver against any backend:
 * random inputs made on the host, uploaded, the op run through
 * op_call_run() on the CPU (the oracle) and on the backend's stream, and
 * every output's whole buffer (views' gaps included) compared.  Outputs
 * start as NaN on both sides, so an element the backend leaves unwritten
 * fails.  A case may instead expect both backends to refuse the call with
 * the same %LB_ERROR_SHAPE message.  tests/unit/test-ops-parity.c runs it
 * on fakedev (bit for bit: fakedev runs the CPU kernels),
 * tests/gpu/test-ops-parity.c on CUDA (each case's tolerance).
 */
#pragma once

#include "kernels/backend.h"

G_BEGIN_DECLS

/**
 * OpCasesTarget:
 * @ref: a CPU stream (the oracle)
 * @dev: the stream of the backend under test
 * @exact: every output must equal the CPU's byte for byte, whatever the
 *   case's tolerance (a backend that runs the CPU kernels)
 */
typedef struct
{
  LbStream *ref;
  LbStream *dev;
  gboolean exact;
} OpCasesTarget;

void op_cases_add_tests (const char *prefix, const OpCasesTarget * target);

G_END_DECLS

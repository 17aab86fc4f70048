/* lingbot-gst: lingbot-bench ops (tools/bench-ops.c)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

int lingbot_bench_ops (int argc, char **argv);

G_END_DECLS

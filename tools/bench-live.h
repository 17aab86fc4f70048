/* lingbot-gst: `lingbot-bench live` (tools/bench-live.c)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

int lingbot_bench_live_main (int argc, char **argv);

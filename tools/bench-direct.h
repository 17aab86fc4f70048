/* lingbot-gst: `lingbot-bench direct` and `lingbot-bench replay` (the
 * whole pipeline, chunk by chunk, with the metrics of DESIGN.md 6)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

int lingbot_bench_direct_main (int argc, char **argv);
int lingbot_bench_replay_main (int argc, char **argv);
#ifdef LINGBOT_BENCH_HAVE_GST
void lingbot_bench_scan_plugin_dir (void);
#endif

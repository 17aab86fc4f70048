/* lingbot-gst: `lingbot-bench comm` (collectives and channel throughput)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

int lingbot_bench_comm_main (int argc, char **argv);

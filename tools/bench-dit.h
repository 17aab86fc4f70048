/* lingbot-gst: `lingbot-bench dit` (streamed DiT chunks)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

int lingbot_bench_dit_main (int argc, char **argv);

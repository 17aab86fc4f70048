/* lingbot-gst: `lingbot-bench vae` (streamed, height-sharded VAE decode)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

int lingbot_bench_vae_main (int argc, char **argv);

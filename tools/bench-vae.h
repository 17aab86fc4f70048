/* lingbot-gst: `lingbot-bench vae` (streamed, height-sharded VAE decode)
 * and its decode FLOP model
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

double lingbot_bench_vae_decode_flops (int dim, int latent_h, int latent_w,
    int latent_frames);

int lingbot_bench_vae_main (int argc, char **argv);

G_END_DECLS

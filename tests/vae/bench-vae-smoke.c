/* lingbot-gst: runs tools/bench-vae.c on a tiny model (build + smoke test
 * of `lingbot-bench vae` before the lead wires it into lingbot-bench)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <stddef.h>

#include "tools/bench-vae.h"

int
main (int argc, char **argv)
{
  /* with arguments: behave as `lingbot-bench vae ARGS` */
  if (argc > 1)
    return lingbot_bench_vae_main (argc, argv);
  char *args[] = { (char *) "vae", (char *) "--dim", (char *) "4",
    (char *) "--latent", (char *) "5x6", (char *) "--chunks", (char *) "2",
    (char *) "--chunk-latents", (char *) "2", (char *) "--ranks",
    (char *) "1,2,4",
    (char *) "--json", NULL
  };
  return lingbot_bench_vae_main (12, args);
}

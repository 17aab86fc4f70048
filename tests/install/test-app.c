/* lingbot-gst: a program built against the installed tree with only
 * `pkg-config --cflags --libs lingbot-1.0` (tests/install/test-install.sh)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Prints what the public API returns for fixed inputs; the script compares
 * the output with the expected lines.
 */
#include <lingbot/lingbot.h>

#include <stdio.h>

int
main (void)
{
  LingbotWorldOptions opts = LINGBOT_WORLD_OPTIONS_INIT;
  g_autoptr (GError) error = NULL;
  g_autofree char *keys = NULL;
  LingbotPrecision math = LINGBOT_PRECISION_FP32;
  LingbotWorld *world;

  keys = lingbot_keys_to_string (lingbot_key_from_name ("ArrowUp") |
      lingbot_key_from_name ("KeyD") | lingbot_key_from_name ("j"));
  printf ("keys %s\n", keys);

  if (lingbot_world_parse_precision ("bf16", &math, NULL))
    printf ("precision bf16 %s\n", math == LINGBOT_PRECISION_BF16 ?
        "LINGBOT_PRECISION_BF16" : "other");
  if (!lingbot_world_parse_precision ("fp8x", &math, &error))
    printf ("%s\n", error->message);
  g_clear_error (&error);

  opts.devices = "cpu:1";
  opts.model_path = "/nonexistent/lingbot-model";
  world = lingbot_world_new (&opts, &error);
  printf ("%s\n", world ? "world created" : error->message);
  if (world)
    lingbot_world_unref (world);
  return 0;
}

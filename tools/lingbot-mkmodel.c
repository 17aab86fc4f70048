/* lingbot-mkmodel: writes a random-weight LingBot-World v2 DiT checkpoint
 * in the published layout (key names, bf16, sharding, index, config.json)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-mkmodel --preset tiny --out models/tiny
 *   lingbot-mkmodel --preset 1.3b --dim 192 --ffn 256 --out /tmp/m --shards 4
 *   lingbot-mkmodel --dim 128 --layers 3 --heads 4 --ffn 256 --text-dim 64 \
 *       --out /tmp/m
 *
 * The output directory holds model-0000N-of-0000M.safetensors,
 * model.safetensors.index.json and config.json (what the release keeps
 * under transformers/); lingbot_dit_load() reads it, or its parent.
 */
#include <stdio.h>
#include <stdlib.h>

#include "lingbot/dit.h"

int
main (int argc, char **argv)
{
  g_autofree char *preset = NULL, *out = NULL, *dtype_name = NULL;
  int dim = 0, layers = 0, heads = 0, ffn = 0, text_dim = 0, freq_dim = 0;
  int in_dim = 0, out_dim = 0, window = 0, sink = -1, chunk = 0, shards = 0;
  gint64 seed = 42;
  gboolean quiet = FALSE;
  GOptionEntry entries[] = {
    {"preset", 'p', 0, G_OPTION_ARG_STRING, &preset,
        "Start from a published shape: 14b, 1.3b or tiny (default tiny)", "P"},
    {"dim", 0, 0, G_OPTION_ARG_INT, &dim, "Hidden width D", "N"},
    {"layers", 0, 0, G_OPTION_ARG_INT, &layers, "Transformer blocks", "N"},
    {"heads", 0, 0, G_OPTION_ARG_INT, &heads, "Attention heads", "N"},
    {"ffn", 0, 0, G_OPTION_ARG_INT, &ffn, "FFN hidden width", "N"},
    {"text-dim", 0, 0, G_OPTION_ARG_INT, &text_dim, "Text-encoder width",
        "N"},
    {"freq-dim", 0, 0, G_OPTION_ARG_INT, &freq_dim,
        "Sinusoidal timestep features", "N"},
    {"in-dim", 0, 0, G_OPTION_ARG_INT, &in_dim, "Input channels (36)", "N"},
    {"out-dim", 0, 0, G_OPTION_ARG_INT, &out_dim, "Output channels (16)", "N"},
    {"local-attn", 0, 0, G_OPTION_ARG_INT, &window,
        "KV window in latent frames (config.json local_attn_size)", "N"},
    {"sink", 0, 0, G_OPTION_ARG_INT, &sink, "Sink in latent frames", "N"},
    {"chunk", 0, 0, G_OPTION_ARG_INT, &chunk, "Latent frames per chunk", "N"},
    {"shards", 0, 0, G_OPTION_ARG_INT, &shards,
        "Number of safetensors shards (default 8 for 14b, else 1)", "N"},
    {"dtype", 0, 0, G_OPTION_ARG_STRING, &dtype_name,
        "Storage dtype: bf16 (default, as published), f16 or f32", "T"},
    {"seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Weight seed (default 42)", "S"},
    {"out", 'o', 0, G_OPTION_ARG_FILENAME, &out, "Output directory", "DIR"},
    {"quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet, "Print nothing", NULL},
    {NULL}
  };
  g_autoptr (GOptionContext) ctx =
      g_option_context_new ("- write a random-weight LingBot DiT checkpoint");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_autoptr (GError) err = NULL;
  if (!g_option_context_parse (ctx, &argc, &argv, &err)) {
    fprintf (stderr, "lingbot-mkmodel: %s\n", err->message);
    return 2;
  }
  if (out == NULL) {
    fprintf (stderr, "lingbot-mkmodel: --out DIR is required\n");
    return 2;
  }

  LingbotDitPreset p = LINGBOT_DIT_PRESET_TINY;
  if (preset && !lingbot_dit_config_preset_from_name (preset, &p)) {
    fprintf (stderr, "lingbot-mkmodel: unknown preset \"%s\" (14b, 1.3b, "
        "tiny)\n", preset);
    return 2;
  }
  LingbotDitConfig cfg;
  lingbot_dit_config_init_preset (&cfg, p);
#define SET(field, v) if ((v) > 0) cfg.field = (v)
  SET (dim, dim);
  SET (num_layers, layers);
  SET (num_heads, heads);
  SET (ffn_dim, ffn);
  SET (text_dim, text_dim);
  SET (freq_dim, freq_dim);
  SET (in_dim, in_dim);
  SET (out_dim, out_dim);
  SET (chunk_frames, chunk);
#undef SET
  if (window != 0)
    cfg.local_attn_frames = window;
  if (sink >= 0)
    cfg.sink_frames = sink;
  if (shards <= 0)
    shards = p == LINGBOT_DIT_PRESET_14B ? 8 : 1;

  LbDType dtype = LB_DTYPE_BF16;
  if (dtype_name && !lb_dtype_from_safetensors (dtype_name, &dtype)) {
    g_autofree char *up = g_ascii_strup (dtype_name, -1);
    if (!lb_dtype_from_safetensors (up, &dtype)) {
      fprintf (stderr, "lingbot-mkmodel: unknown dtype \"%s\"\n", dtype_name);
      return 2;
    }
  }

  if (!lingbot_dit_write_random (&cfg, out, (guint) shards, dtype,
          (guint64) seed, &err)) {
    fprintf (stderr, "lingbot-mkmodel: %s\n", err->message);
    return 1;
  }
  if (!quiet) {
    printf ("wrote %s: %s DiT, dim %d, %d layers, %d heads, ffn %d, text %d, "
        "%" G_GUINT64_FORMAT " parameters, %s, %d shard(s)\n", out,
        lingbot_dit_config_variant (&cfg), cfg.dim, cfg.num_layers,
        cfg.num_heads, cfg.ffn_dim, cfg.text_dim,
        lingbot_dit_config_n_params (&cfg), lb_dtype_name (dtype), shards);
  }
  return 0;
}

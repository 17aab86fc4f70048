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
 *
 * With --full the output is a whole model directory in the release layout
 * of lingbot/lingbot.h, which lingbot_world_new() opens:
 *
 *   lingbot-mkmodel --full --preset tiny --chunk 4 \
 *       --tokenizer build/tests/text/test-spm.model --out models/tiny
 *
 *   DIR/transformers/                      the DiT (as above)
 *   DIR/Wan2.1_VAE.pth                     random Wan2.1 VAE (--vae-dim),
 *                                          float32
 *   DIR/models_t5_umt5-xxl-enc-bf16.pth    random umT5 encoder of width
 *                                          text_dim, bf16 (only with
 *                                          --tokenizer)
 *   DIR/google/umt5-xxl/spiece.model       a copy of --tokenizer FILE
 *
 * With --dummy (vLLM's load format "dummy") the same directory holds only
 * configs, under 1 MB for any preset: transformers/config.json with a
 * "lingbot_dummy" member (seed, dtype), Wan2.1_VAE.dummy.json and
 * models_t5_umt5-xxl-enc-bf16.dummy.json (the shapes and seeds), and the
 * tokenizer copy.  Every loader draws the weights the --full files would
 * hold for that seed (lingbot/dummy.c):
 *
 *   lingbot-mkmodel --dummy --preset 14b \
 *       --tokenizer build/tests/text/test-spm.model --out /tmp/m14b
 *
 * The VAE and the encoder are written in the torch.save layout of the
 * published files (lingbot_pth_write()); --format safetensors writes
 * Wan2.1_VAE.safetensors and models_t5_umt5-xxl-enc-bf16.safetensors
 * instead, which the world also accepts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "lingbot/dit.h"
#include "lingbot/vae.h"
#include "lingbot/text-encoder-random.h"
#include "lingbot/dummy.h"
#include "kernels/error.h"
#include "lingbot/tokenizer.h"
#include "tools/tool-common.h"
#include "tools/tool-dit-shape.h"
#include "tools/tool-json.h"

static gboolean
write_full (const LingbotDitConfig * cfg, const char *out, guint shards,
    LbDType dtype, guint64 seed, int vae_dim, const char *tokenizer,
    int t5_layers, const char *ext, gboolean dummy, gboolean quiet,
    GError ** error)
{
  if (g_mkdir_with_parents (out, 0755) != 0) {
    g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (errno),
        "cannot create %s: %s", out, g_strerror (errno));
    return FALSE;
  }
  g_autofree char *dit_dir = g_build_filename (out, "transformers", NULL);
  if (dummy) {
    /* the configs alone: the loaders draw what the writers would write */
    g_autofree char *dit_cfg = lingbot_dit_config_to_json (cfg);
    g_autofree char *dit_json = g_build_filename (dit_dir, "config.json",
        NULL);
    if (g_mkdir_with_parents (dit_dir, 0755) != 0) {
      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (errno),
          "cannot create %s: %s", dit_dir, g_strerror (errno));
      return FALSE;
    }
    if (!lingbot_dit_config_validate (cfg, error) ||
        !lingbot_dummy_write (dit_json, dit_cfg, seed, dtype, error))
      return FALSE;
    ext = LINGBOT_DUMMY_SUFFIX;
  } else if (!lingbot_dit_write_random (cfg, dit_dir, shards, dtype, seed,
          error)) {
    return FALSE;
  }
  g_autofree char *vae_name = g_strconcat ("Wan2.1_VAE", ext, NULL);
  g_autofree char *vae = g_build_filename (out, vae_name, NULL);
  if (dummy) {
    g_autoptr (JsonBuilder) vb = json_builder_new ();
    json_builder_begin_object (vb);
    lingbot_json_int (vb, "dim", vae_dim);
    lingbot_json_int (vb, "z_dim", 16);
    json_builder_end_object (vb);
    g_autoptr (JsonNode) vroot = json_builder_get_root (vb);
    g_autofree char *vae_cfg = json_to_string (vroot, FALSE);
    if (vae_dim < 2 || vae_dim % 2 || vae_dim > LINGBOT_VAE_MAX_RANDOM_DIM) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "VAE width %d: must be even and in [2, %d]", vae_dim,
          LINGBOT_VAE_MAX_RANDOM_DIM);
      return FALSE;
    }
    if (!lingbot_dummy_write (vae, vae_cfg, seed + 1, LB_DTYPE_F32, error))
      return FALSE;
  } else if (!lingbot_vae_write_random (vae, vae_dim, seed + 1, error)) {
    return FALSE;
  }
  if (!quiet)
    printf ("wrote %s (VAE dim %d)\n", vae, vae_dim);
  if (tokenizer == NULL) {
    if (!quiet)
      printf ("no --tokenizer: no text encoder written (sessions need "
          "prompt embeddings)\n");
    return TRUE;
  }
  g_autofree char *tok_dir = g_build_filename (out, "google", "umt5-xxl",
      NULL);
  g_autofree char *tok_path = g_build_filename (tok_dir, "spiece.model",
      NULL);
  g_autofree char *contents = NULL;
  gsize len = 0;
  if (!g_file_get_contents (tokenizer, &contents, &len, error))
    return FALSE;
  if (g_mkdir_with_parents (tok_dir, 0755) != 0) {
    g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (errno),
        "cannot create %s: %s", tok_dir, g_strerror (errno));
    return FALSE;
  }
  if (!g_file_set_contents (tok_path, contents, (gssize) len, error))
    return FALSE;
  g_autoptr (LingbotTokenizer) tok = lingbot_tokenizer_new (tok_path, error);
  if (tok == NULL)
    return FALSE;
  LingbotTextEncoderConfig tc;
  lingbot_text_encoder_config_init_tiny (&tc, cfg->text_dim,
      lingbot_tokenizer_get_vocab_size (tok));
  if (t5_layers > 0)
    tc.num_layers = t5_layers;
  g_autofree char *t5_name = g_strconcat ("models_t5_umt5-xxl-enc-bf16",
      ext, NULL);
  g_autofree char *t5 = g_build_filename (out, t5_name, NULL);
  if (dummy) {
    g_autoptr (JsonBuilder) tb = json_builder_new ();
    json_builder_begin_object (tb);
    lingbot_json_int (tb, "vocab", tc.vocab);
    lingbot_json_int (tb, "dim", tc.dim);
    lingbot_json_int (tb, "dim_attn", tc.dim_attn);
    lingbot_json_int (tb, "dim_ffn", tc.dim_ffn);
    lingbot_json_int (tb, "num_heads", tc.num_heads);
    lingbot_json_int (tb, "num_layers", tc.num_layers);
    lingbot_json_int (tb, "num_buckets", tc.num_buckets);
    json_builder_end_object (tb);
    g_autoptr (JsonNode) troot = json_builder_get_root (tb);
    g_autofree char *t5_cfg = json_to_string (troot, FALSE);
    if (!lingbot_dummy_write (t5, t5_cfg, seed + 2, LB_DTYPE_BF16, error))
      return FALSE;
  } else if (!lingbot_text_encoder_write_random (t5, &tc, LB_DTYPE_BF16,
          seed + 2, error)) {
    return FALSE;
  }
  if (!quiet)
    printf ("wrote %s (umT5 dim %" G_GINT64_FORMAT ", %d layers, %d heads, "
        "vocab %" G_GINT64_FORMAT ") and %s\n", t5, tc.dim, tc.num_layers,
        tc.num_heads, tc.vocab, tok_path);
  return TRUE;
}

int
main (int argc, char **argv)
{
  g_autofree char *out = NULL, *dtype_name = NULL;
  g_auto (LingbotToolDitShape) shape = { 0 };
  int freq_dim = 0;
  int in_dim = 0, out_dim = 0, window = 0, sink = -1, chunk = 0, shards = 0;
  int max_attention = G_MININT; /* unset */
  gint64 seed = 42;
  gboolean quiet = FALSE, full = FALSE, dummy = FALSE;
  int vae_dim = 0, t5_layers = 0;
  g_autofree char *tokenizer = NULL, *format = NULL;
  GOptionEntry entries[] = {
    LINGBOT_TOOL_DIT_SHAPE_ENTRIES (&shape),
    {"freq-dim", 0, 0, G_OPTION_ARG_INT, &freq_dim,
        "Sinusoidal timestep features", "N"},
    {"in-dim", 0, 0, G_OPTION_ARG_INT, &in_dim, "Input channels (36)", "N"},
    {"out-dim", 0, 0, G_OPTION_ARG_INT, &out_dim, "Output channels (16)", "N"},
    {"local-attn", 0, 0, G_OPTION_ARG_INT, &window,
        "KV window in latent frames (config.json local_attn_size)", "N"},
    {"sink", 0, 0, G_OPTION_ARG_INT, &sink, "Sink in latent frames", "N"},
    {"max-attention-size", 0, 0, G_OPTION_ARG_INT, &max_attention,
        "Self-attention span in tokens (config.json max_attention_size; "
          "0 = the KV cache's capacity, the default)", "N"},
    {"chunk", 0, 0, G_OPTION_ARG_INT, &chunk, "Latent frames per chunk", "N"},
    {"shards", 0, 0, G_OPTION_ARG_INT, &shards,
        "Number of safetensors shards (default 8 for 14b, else 1)", "N"},
    {"dtype", 0, 0, G_OPTION_ARG_STRING, &dtype_name,
        "Storage dtype: bf16 (default, as published), f16 or f32", "T"},
    {"seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Weight seed (default 42)", "S"},
    {"out", 'o', 0, G_OPTION_ARG_FILENAME, &out, "Output directory", "DIR"},
    {"quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet, "Print nothing", NULL},
    {"full", 0, 0, G_OPTION_ARG_NONE, &full,
        "Write a whole model directory (DiT, VAE, umT5, tokenizer)", NULL},
    {"dummy", 0, 0, G_OPTION_ARG_NONE, &dummy,
        "A dummy model directory (implies --full): the configs only, the "
          "weights drawn when it is loaded (vLLM's load format \"dummy\"); "
          "loads to the bytes --full writes for the same seed", NULL},
    {"vae-dim", 0, 0, G_OPTION_ARG_INT, &vae_dim,
        "VAE base width with --full (default 96, 8 for tiny)", "N"},
    {"tokenizer", 0, 0, G_OPTION_ARG_FILENAME, &tokenizer,
          "SentencePiece model to install with --full (also writes the umT5)",
        "FILE"},
    {"t5-layers", 0, 0, G_OPTION_ARG_INT, &t5_layers,
        "umT5 blocks with --full (default 2)", "N"},
    {"format", 0, 0, G_OPTION_ARG_STRING, &format,
        "VAE and umT5 file format with --full: pth (default, as published) "
          "or safetensors", "F"},
    {NULL}
  };
  const char *prog = "lingbot-mkmodel";
  if (!lingbot_tool_parse (prog,
          "- write a random-weight LingBot DiT checkpoint", NULL, entries,
          &argc, &argv))
    return LINGBOT_TOOL_USAGE;
  if (out == NULL)
    return lingbot_tool_usage_error (prog, "--out DIR is required");
  g_autoptr (GError) err = NULL;

  LingbotDitConfig cfg;
  LingbotDitPreset p;
  if (!lingbot_tool_dit_shape_apply (prog, &shape, &cfg, &p))
    return LINGBOT_TOOL_USAGE;
#define SET(field, v) if ((v) > 0) cfg.field = (v)
  SET (freq_dim, freq_dim);
  SET (in_dim, in_dim);
  SET (out_dim, out_dim);
  SET (chunk_frames, chunk);
#undef SET
  if (window != 0)
    cfg.local_attn_frames = window;
  if (sink >= 0)
    cfg.sink_frames = sink;
  if (max_attention != G_MININT)
    cfg.max_attention_size = max_attention;
  if (shards <= 0)
    shards = p == LINGBOT_DIT_PRESET_14B ? 8 : 1;

  LbDType dtype = LB_DTYPE_BF16;
  if (dtype_name && !lb_dtype_from_safetensors (dtype_name, &dtype)) {
    g_autofree char *up = g_ascii_strup (dtype_name, -1);
    if (!lb_dtype_from_safetensors (up, &dtype))
      return lingbot_tool_usage_error (prog, "unknown dtype \"%s\"",
          dtype_name);
  }

  const char *ext = ".pth";
  if (format && g_ascii_strcasecmp (format, "safetensors") == 0)
    ext = ".safetensors";
  else if (format && g_ascii_strcasecmp (format, "pth") != 0)
    return lingbot_tool_usage_error (prog, "unknown format \"%s\" (pth, "
        "safetensors)", format);

  if (vae_dim <= 0)
    vae_dim = (p == LINGBOT_DIT_PRESET_TINY || p == LINGBOT_DIT_PRESET_DEMO) ?
        8 : LINGBOT_VAE_DEFAULT_DIM;
  if (dummy)
    full = TRUE;
  if (full ? !write_full (&cfg, out, (guint) shards, dtype, (guint64) seed,
          vae_dim, tokenizer, t5_layers, ext, dummy, quiet, &err) :
      !lingbot_dit_write_random (&cfg, out, (guint) shards, dtype,
          (guint64) seed, &err)) {
    fprintf (stderr, "lingbot-mkmodel: %s\n", err->message);
    return 1;
  }
  if (!quiet && dummy) {
    printf ("wrote %s: dummy %s DiT, dim %d, %d layers, %d heads, ffn %d, "
        "text %d, %" G_GUINT64_FORMAT " parameters drawn at load (%s, seed %"
        G_GINT64_FORMAT ")\n", out, lingbot_dit_config_variant (&cfg),
        cfg.dim, cfg.num_layers, cfg.num_heads, cfg.ffn_dim, cfg.text_dim,
        lingbot_dit_config_n_params (&cfg), lb_dtype_name (dtype), seed);
  } else if (!quiet) {
    printf ("wrote %s: %s DiT, dim %d, %d layers, %d heads, ffn %d, text %d, "
        "%" G_GUINT64_FORMAT " parameters, %s, %d shard(s)\n", out,
        lingbot_dit_config_variant (&cfg), cfg.dim, cfg.num_layers,
        cfg.num_heads, cfg.ffn_dim, cfg.text_dim,
        lingbot_dit_config_n_params (&cfg), lb_dtype_name (dtype), shards);
  }
  return 0;
}

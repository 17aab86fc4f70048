/* lingbot-gst: the tiny model and prompt embeddings the session- and
 * GStreamer-level tests share (no GStreamer needed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "test-fixture.h"

#include "lingbot/dit.h"
#include "lingbot/text-encoder.h"
#include "lingbot/vae.h"

#include <glib/gstdio.h>

/* DIR/model: the tiny DiT preset with the released 4-frame chunks (bf16,
 * seed 3) and a Wan VAE of width 8 (seed 5).  Returns the model folder. */
char *
lingbot_test_write_model (const char *dir)
{
  g_autoptr (GError) err = NULL;
  LingbotDitConfig cfg;
  char *model_dir = g_build_filename (dir, "model", NULL);
  g_autofree char *dit = g_build_filename (model_dir, "transformers", NULL);
  g_autofree char *vae = g_build_filename (model_dir,
      "Wan2.1_VAE.safetensors", NULL);

  g_assert_cmpint (g_mkdir_with_parents (dit, 0755), ==, 0);
  lingbot_dit_config_init_preset (&cfg, LINGBOT_DIT_PRESET_TINY);
  cfg.chunk_frames = 4;
  g_assert_true (lingbot_dit_write_random (&cfg, dit, 1, LB_DTYPE_BF16, 3,
          &err));
  g_assert_no_error (err);
  g_assert_true (lingbot_vae_write_random (vae, 8, 5, &err));
  g_assert_no_error (err);
  return model_dir;
}

/* DIR/prompt.safetensors: a fixed [16, text_dim] context for the tiny
 * preset, so no text encoder is needed.  Returns its path. */
char *
lingbot_test_write_prompt_embeds (const char *dir, const char *prompt)
{
  g_autoptr (GError) err = NULL;
  LingbotDitConfig cfg;
  char *path = g_build_filename (dir, "prompt.safetensors", NULL);

  lingbot_dit_config_init_preset (&cfg, LINGBOT_DIT_PRESET_TINY);
  g_autoptr (LbTensor) ctx = lb_tensor_new_f32 (2, (int64_t) 16,
      (int64_t) cfg.text_dim);
  for (int64_t i = 0; i < lb_tensor_numel (ctx); i++)
    ((float *) ctx->data)[i] = (float) ((i * 37 % 101) - 50) / 50.0f;
  g_assert_true (lingbot_prompt_embeds_save (path, ctx, prompt, 16, &err));
  g_assert_no_error (err);
  return path;
}

/* @rgb: @width x @height packed RGB (stride 3 * @width), the start image
 * of the session tests: red 3 x, green 5 y, blue a checkerboard of 8x8
 * squares, 40 and 200. */
void
lingbot_test_fill_image (guint8 * rgb, int width, int height)
{
  for (int y = 0; y < height; y++)
    for (int x = 0; x < width; x++) {
      guint8 *p = rgb + 3 * (y * width + x);
      p[0] = (guint8) (x * 3);
      p[1] = (guint8) (y * 5);
      p[2] = (guint8) (((x / 8) + (y / 8)) % 2 ? 200 : 40);
    }
}

void
lingbot_test_rm_rf (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR)) {
    GDir *d = g_dir_open (path, 0, NULL);
    const char *n;
    while (d && (n = g_dir_read_name (d))) {
      g_autofree char *c = g_build_filename (path, n, NULL);
      lingbot_test_rm_rf (c);
    }
    if (d)
      g_dir_close (d);
    g_rmdir (path);
  } else {
    g_unlink (path);
  }
}

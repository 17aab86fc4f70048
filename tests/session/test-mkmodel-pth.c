/* lingbot-mkmodel --full writes the VAE and the umT5 encoder in the
 * torch.save layout of the published Wan2.1_VAE.pth and
 * models_t5_umt5-xxl-enc-bf16.pth, and the loaders read them.
 *
 *   test-mkmodel-pth LINGBOT_MKMODEL TEST_SPM_MODEL
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "lingbot/checkpoint.h"
#include "lingbot/text-encoder.h"
#include "lingbot/vae.h"
#include "kernels/backend.h"
#include "kernels/error.h"

#include <string.h>
#include <glib/gstdio.h>

static const char *mkmodel;
static const char *spm_model;

static void
rm_rf (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR)
      && !g_file_test (path, G_FILE_TEST_IS_SYMLINK)) {
    GDir *d = g_dir_open (path, 0, NULL);
    const char *e;
    while (d && (e = g_dir_read_name (d)) != NULL) {
      char *p = g_build_filename (path, e, NULL);
      rm_rf (p);
      g_free (p);
    }
    if (d)
      g_dir_close (d);
    g_rmdir (path);
  } else {
    g_unlink (path);
  }
}

static void
run_mkmodel (const char *out, const char *format)
{
  const char *argv[] = { mkmodel, "--full", "--quiet", "--tokenizer",
    spm_model, "--out", out, format ? "--format" : NULL, format, NULL
  };
  char *so = NULL, *se = NULL;
  int status = 0;
  GError *error = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_DEFAULT,
          NULL, NULL, &so, &se, &status, &error));
  g_assert_no_error (error);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("lingbot-mkmodel failed:\n%s%s", so, se);
  g_free (so);
  g_free (se);
}

/* opens @path, checks its format and that every tensor has @dtype */
static guint
check_checkpoint (const char *path, LingbotCheckpointFormat format,
    LbDType dtype)
{
  GError *error = NULL;
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpint (lingbot_checkpoint_get_format (ckpt), ==, format);
  guint n = 0;
  const char *const *names = lingbot_checkpoint_list_tensors (ckpt, &n);
  g_assert_cmpuint (n, >, 0);
  for (guint i = 0; i < n; i++) {
    const LbTensor *t = lingbot_checkpoint_get (ckpt, names[i], &error);
    g_assert_no_error (error);
    g_assert_cmpint (t->dtype, ==, dtype);
  }
  lingbot_checkpoint_unref (ckpt);
  return n;
}

static void
check_model (const char *dir, const char *ext, LingbotCheckpointFormat format)
{
  char *vae_name = g_strconcat ("Wan2.1_VAE", ext, NULL);
  char *t5_name = g_strconcat ("models_t5_umt5-xxl-enc-bf16", ext, NULL);
  char *vae_path = g_build_filename (dir, vae_name, NULL);
  char *t5_path = g_build_filename (dir, t5_name, NULL);

  /* the VAE: float32, the 194 published tensors */
  g_assert_cmpuint (check_checkpoint (vae_path, format, LB_DTYPE_F32), ==, 194);
  GError *error = NULL;
  LingbotVae *vae = lingbot_vae_load (vae_path, LINGBOT_VAE_BOTH, &error);
  g_assert_no_error (error);
  g_assert_nonnull (vae);
  g_assert_cmpint (lingbot_vae_get_dim (vae), ==, 8);
  lingbot_vae_unref (vae);

  /* the encoder: bf16, 2 blocks of 10 tensors + embedding + final norm */
  g_assert_cmpuint (check_checkpoint (t5_path, format, LB_DTYPE_BF16), ==, 22);
  LbBackend *be = lb_cpu_backend ();
  LbStream *stream = be->stream_new (be, 0, &error);
  g_assert_no_error (error);
  LingbotTextEncoder *enc = lingbot_text_encoder_load (t5_path, stream,
      &error);
  g_assert_no_error (error);
  g_assert_nonnull (enc);
  const LingbotTextEncoderConfig *cfg = lingbot_text_encoder_get_config (enc);
  g_assert_cmpint (cfg->num_layers, ==, 2);
  g_assert_cmpint (cfg->dim, ==, 32);
  lingbot_text_encoder_free (enc);
  be->stream_free (stream);

  g_free (vae_name);
  g_free (t5_name);
  g_free (vae_path);
  g_free (t5_path);
}

static void
test_full_pth (void)
{
  char *dir = g_dir_make_tmp ("lingbot-mkmodel-pth-XXXXXX", NULL);
  g_assert_nonnull (dir);
  run_mkmodel (dir, NULL);
  check_model (dir, ".pth", LINGBOT_CHECKPOINT_PTH);
  /* nothing else in the old layout */
  char *st = g_build_filename (dir, "Wan2.1_VAE.safetensors", NULL);
  g_assert_false (g_file_test (st, G_FILE_TEST_EXISTS));
  g_free (st);
  st = g_build_filename (dir, "models_t5_umt5-xxl-enc-bf16.safetensors", NULL);
  g_assert_false (g_file_test (st, G_FILE_TEST_EXISTS));
  g_free (st);
  rm_rf (dir);
  g_free (dir);
}

static void
test_full_safetensors (void)
{
  char *dir = g_dir_make_tmp ("lingbot-mkmodel-st-XXXXXX", NULL);
  g_assert_nonnull (dir);
  run_mkmodel (dir, "safetensors");
  check_model (dir, ".safetensors", LINGBOT_CHECKPOINT_SAFETENSORS);
  rm_rf (dir);
  g_free (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (argc < 3) {
    g_printerr ("usage: %s LINGBOT_MKMODEL TEST_SPM_MODEL\n", argv[0]);
    return 2;
  }
  mkmodel = argv[1];
  spm_model = argv[2];
  g_test_add_func ("/mkmodel/full-pth", test_full_pth);
  g_test_add_func ("/mkmodel/full-safetensors", test_full_safetensors);
  return g_test_run ();
}

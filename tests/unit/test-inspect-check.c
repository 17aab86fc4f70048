/* Unit tests: `lingbot-inspect --check DIR` on models written here: a
 * complete one (OK, exit 0), and copies with one shard truncated, the
 * VAE truncated, one shard missing, one tensor's dtype changed, a config.json that contradicts the
 * shapes, the umT5 missing, a dummy model (each: the exact lines, exit 1
 * or 0).
 * Usage: test-inspect-check PATH-TO-lingbot-inspect PATH-TO-lingbot-mkmodel
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The DiT (tiny preset, 3 shards) and the VAE come from
 * `lingbot-mkmodel --full`; the umT5 part is a small safetensors file and
 * the tokenizer a placeholder, since --check reads the encoder's tensor
 * list and only looks for the tokenizer.
 */
#define _GNU_SOURCE             /* memmem() */
#include "lingbot/checkpoint.h"

#include <string.h>
#include <unistd.h>
#include <glib/gstdio.h>

static const char *inspect, *mkmodel;
static char *tmpdir, *model;

static int
run (const char *const *argv, char **out)
{
  int status = -1;
  g_autoptr (GError) error = NULL;
  g_autofree char *err = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_SEARCH_PATH,
          NULL, NULL, out, &err, &status, &error));
  g_assert_no_error (error);
  g_assert_cmpstr (err, ==, "");
  if (g_spawn_check_wait_status (status, &error))
    return 0;
  return error->domain == G_SPAWN_EXIT_ERROR ? error->code : -1;
}

static int
check (const char *dir, char **out)
{
  const char *argv[] = { inspect, "--check", dir, NULL };
  return run (argv, out);
}

/* a copy of the complete model under @name */
static char *
copy_model (const char *name)
{
  char *dir = g_build_filename (tmpdir, name, NULL);
  const char *argv[] = { "cp", "-r", model, dir, NULL };
  g_autofree char *out = NULL;
  g_assert_cmpint (run (argv, &out), ==, 0);
  return dir;
}

static const char *const tail =
    "%s/Wan2.1_VAE.pth: 194 tensors, 3697964 bytes: complete\n"
    "%s/models_t5_umt5-xxl-enc-bf16.safetensors: 2 tensors, 96 bytes: "
    "complete\n";

static void
test_complete (void)
{
  g_autofree char *out = NULL;
  g_autofree char *want = NULL, *parts = g_strdup_printf (tail, model, model);
  g_assert_cmpint (check (model, &out), ==, 0);
  want = g_strdup_printf ("%s/transformers: 3 shards, 91 tensors (BF16), "
      "613248 bytes, dim 64, 2 layers: complete\n%s%s: OK\n", model, parts,
      model);
  g_assert_cmpstr (out, ==, want);
}

static void
test_truncated (void)
{
  g_autofree char *dir = copy_model ("truncated");
  g_autofree char *shard = g_build_filename (dir, "transformers",
      "model-00002-of-00003.safetensors", NULL);
  g_autofree char *out = NULL, *want = NULL;
  g_autofree char *parts = g_strdup_printf (tail, dir, dir);
  GStatBuf st;
  g_assert_cmpint (g_stat (shard, &st), ==, 0);
  g_assert_cmpint (truncate (shard, st.st_size / 2), ==, 0);

  g_assert_cmpint (check (dir, &out), ==, 1);
  want = g_strdup_printf ("%s: truncated: %" G_GINT64_FORMAT " bytes, its "
      "header describes %" G_GINT64_FORMAT "\n%s%s: 1 problem, not "
      "complete\n", shard, (gint64) st.st_size / 2, (gint64) st.st_size,
      parts, dir);
  g_assert_cmpstr (out, ==, want);
}

/* the VAE cut short, as an interrupted download leaves it: "truncated",
 * not libzip's "Not a zip archive" */
static void
test_truncated_vae (void)
{
  g_autofree char *dir = copy_model ("truncated-vae");
  g_autofree char *vae = g_build_filename (dir, "Wan2.1_VAE.pth", NULL);
  g_autofree char *out = NULL, *want = NULL;

  g_assert_cmpint (truncate (vae, 100000), ==, 0);
  g_assert_cmpint (check (dir, &out), ==, 1);
  want = g_strdup_printf ("%s/transformers: 3 shards, 91 tensors (BF16), "
      "613248 bytes, dim 64, 2 layers: complete\n"
      "%s: truncated: 100000 bytes, not a complete .pth (zip) file: it has "
      "no end of central directory record\n"
      "%s/models_t5_umt5-xxl-enc-bf16.safetensors: 2 tensors, 96 bytes: "
      "complete\n%s: 1 problem, not complete\n", dir, vae, dir, dir);
  g_assert_cmpstr (out, ==, want);
}

static void
test_missing_shard (void)
{
  g_autofree char *dir = copy_model ("missing");
  g_autofree char *shard = g_build_filename (dir, "transformers",
      "model-00003-of-00003.safetensors", NULL);
  g_autofree char *out = NULL, *want = NULL;
  g_autofree char *parts = g_strdup_printf (tail, dir, dir);
  g_assert_cmpint (g_unlink (shard), ==, 0);

  g_assert_cmpint (check (dir, &out), ==, 1);
  /* the tensors of the missing shard are not listed one by one */
  want = g_strdup_printf ("%s: missing (the index lists 50 tensors in it)\n"
      "%s%s: 1 problem, not complete\n", shard, parts, dir);
  g_assert_cmpstr (out, ==, want);
}

/* @from replaced by @to (same length) in @path's bytes, once */
static void
patch_file (const char *path, const char *from, const char *to)
{
  g_autofree char *data = NULL;
  gsize len;
  g_autoptr (GError) error = NULL;
  g_assert_cmpuint (strlen (from), ==, strlen (to));
  g_assert_true (g_file_get_contents (path, &data, &len, &error));
  char *at = memmem (data, len, from, strlen (from));
  g_assert_nonnull (at);
  memcpy (at, to, strlen (to));
  g_assert_true (g_file_set_contents (path, data, len, &error));
}

static void
test_wrong_dtype (void)
{
  g_autofree char *dir = copy_model ("dtype");
  g_autofree char *shard = g_build_filename (dir, "transformers",
      "model-00001-of-00003.safetensors", NULL);
  g_autofree char *out = NULL, *want = NULL;
  g_autofree char *parts = g_strdup_printf (tail, dir, dir);
  /* F16 has BF16's size: the header stays consistent, the reader opens it */
  patch_file (shard, "\"patch_embedding.bias\":{\"dtype\":\"BF16\"",
      "\"patch_embedding.bias\":{\"dtype\":\"F16\" ");

  g_assert_cmpint (check (dir, &out), ==, 1);
  want = g_strdup_printf ("%s: tensor patch_embedding.bias has dtype F16, "
      "expected BF16\n%s%s: 1 problem, not complete\n", shard, parts, dir);
  g_assert_cmpstr (out, ==, want);
}

static void
test_wrong_shape (void)
{
  g_autofree char *dir = copy_model ("shape");
  g_autofree char *config = g_build_filename (dir, "transformers",
      "config.json", NULL);
  g_autofree char *out = NULL, *want = NULL;
  g_autofree char *parts = g_strdup_printf (tail, dir, dir);
  patch_file (config, "\"ffn_dim\" : 128", "\"ffn_dim\" : 96 ");

  g_assert_cmpint (check (dir, &out), ==, 1);
  want =
      g_strdup_printf
      ("%1$s/transformers/model-00003-of-00003.safetensors: tensor "
      "blocks.0.ffn.0.bias has shape [128], expected [96] (config.json)\n"
      "%1$s/transformers/model-00003-of-00003.safetensors: tensor "
      "blocks.0.ffn.0.weight has shape [128, 64], expected [96, 64] "
      "(config.json)\n"
      "%1$s/transformers/model-00003-of-00003.safetensors: tensor "
      "blocks.0.ffn.2.weight has shape [64, 128], expected [64, 96] "
      "(config.json)\n"
      "%1$s/transformers/model-00003-of-00003.safetensors: tensor "
      "blocks.1.ffn.0.bias has shape [128], expected [96] (config.json)\n"
      "%1$s/transformers/model-00003-of-00003.safetensors: tensor "
      "blocks.1.ffn.0.weight has shape [128, 64], expected [96, 64] "
      "(config.json)\n"
      "%1$s/transformers/model-00003-of-00003.safetensors: tensor "
      "blocks.1.ffn.2.weight has shape [64, 128], expected [64, 96] "
      "(config.json)\n" "%2$s%1$s: 6 problems, not complete\n", dir, parts);
  g_assert_cmpstr (out, ==, want);
}

static void
test_no_encoder (void)
{
  g_autofree char *dir = copy_model ("no-encoder");
  g_autofree char *t5 = g_build_filename (dir,
      "models_t5_umt5-xxl-enc-bf16.safetensors", NULL);
  g_autofree char *out = NULL, *want = NULL;
  g_assert_cmpint (g_unlink (t5), ==, 0);

  g_assert_cmpint (check (dir, &out), ==, 1);
  want = g_strdup_printf ("%1$s/transformers: 3 shards, 91 tensors (BF16), "
      "613248 bytes, dim 64, 2 layers: complete\n"
      "%1$s/Wan2.1_VAE.pth: 194 tensors, 3697964 bytes: complete\n"
      "%1$s/models_t5_umt5-xxl-enc-bf16.pth: missing (nor "
      "models_t5_umt5-xxl-enc-bf16.safetensors or "
      "models_t5_umt5-xxl-enc-bf16.dummy.json; the umT5 text encoder, "
      "needed unless prompt embeddings are given)\n"
      "%1$s: 1 problem, not complete\n", dir);
  g_assert_cmpstr (out, ==, want);
}

static void
test_dummy (void)
{
  g_autofree char *dir = g_build_filename (tmpdir, "dummy", NULL);
  g_autofree char *out = NULL, *want = NULL;
  const char *argv[] = { mkmodel, "--dummy", "--preset", "tiny", "--out",
    dir, "--quiet", NULL
  };
  g_assert_cmpint (run (argv, &out), ==, 0);
  g_clear_pointer (&out, g_free);

  /* without --tokenizer, lingbot-mkmodel writes no umT5 */
  g_assert_cmpint (check (dir, &out), ==, 1);
  want = g_strdup_printf ("%1$s/transformers: dummy (lingbot-mkmodel "
      "--dummy), dim 64, 2 layers: complete\n"
      "%1$s/Wan2.1_VAE.dummy.json: dummy (lingbot-mkmodel --dummy): "
      "complete\n"
      "%1$s/models_t5_umt5-xxl-enc-bf16.pth: missing (nor "
      "models_t5_umt5-xxl-enc-bf16.safetensors or "
      "models_t5_umt5-xxl-enc-bf16.dummy.json; the umT5 text encoder, "
      "needed unless prompt embeddings are given)\n"
      "%1$s/google/umt5-xxl/spiece.model: missing (nor tokenizer.model; the "
      "umT5 tokenizer, needed unless prompt embeddings are given)\n"
      "%1$s: 2 problems, not complete\n", dir);
  g_assert_cmpstr (out, ==, want);
}

static void
test_not_a_model (void)
{
  g_autofree char *out = NULL, *want = NULL;
  g_autofree char *none = g_build_filename (tmpdir, "none", NULL);
  g_assert_cmpint (check (tmpdir, &out), ==, 1);
  want = g_strdup_printf ("%1$s/transformers: missing (the DiT: config.json, "
      "model.safetensors.index.json and the shards)\n"
      "%1$s: 1 problem, not complete\n", tmpdir);
  g_assert_cmpstr (out, ==, want);
  g_clear_pointer (&out, g_free);
  g_clear_pointer (&want, g_free);
  g_assert_cmpint (check (none, &out), ==, 1);
  want = g_strdup_printf ("%1$s: not a directory\n"
      "%1$s: 1 problem, not complete\n", none);
  g_assert_cmpstr (out, ==, want);
}

/* the complete model: lingbot-mkmodel --full (3 shards), an encoder file
 * and a tokenizer placeholder */
static void
make_model (void)
{
  g_autofree char *out = NULL;
  g_autofree char *t5 = NULL, *tok = NULL, *tok_dir = NULL;
  const char *argv[] = { mkmodel, "--full", "--preset", "tiny", "--chunk",
    "4", "--shards", "3", "--seed", "7", "--out", model, "--quiet", NULL
  };
  g_autoptr (GError) error = NULL;
  LbTensor *a = lb_tensor_new_zeros (LB_DTYPE_BF16, 2,
      (int64_t[]) { 4, 8 });
  LbTensor *b = lb_tensor_new_zeros (LB_DTYPE_BF16, 1, (int64_t[]) { 16 });
  const LbTensor *ts[] = { a, b };
  const char *names[] = { "token_embedding.weight", "norm.weight" };

  g_assert_cmpint (run (argv, &out), ==, 0);
  t5 = g_build_filename (model, "models_t5_umt5-xxl-enc-bf16.safetensors",
      NULL);
  g_assert_true (lingbot_safetensors_write (t5, names, ts, 2, NULL, &error));
  g_assert_no_error (error);
  tok_dir = g_build_filename (model, "google", "umt5-xxl", NULL);
  g_assert_cmpint (g_mkdir_with_parents (tok_dir, 0755), ==, 0);
  tok = g_build_filename (tok_dir, "spiece.model", NULL);
  g_assert_true (g_file_set_contents (tok, "placeholder", -1, &error));
  lb_tensor_free (a);
  lb_tensor_free (b);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (argc < 3) {
    g_printerr ("usage: %s PATH-TO-lingbot-inspect PATH-TO-lingbot-mkmodel\n",
        argv[0]);
    return 1;
  }
  inspect = argv[1];
  mkmodel = argv[2];
  tmpdir = g_dir_make_tmp ("lingbot-check-XXXXXX", NULL);
  g_assert_nonnull (tmpdir);
  model = g_build_filename (tmpdir, "model", NULL);
  make_model ();

  g_test_add_func ("/inspect/check/complete", test_complete);
  g_test_add_func ("/inspect/check/truncated-shard", test_truncated);
  g_test_add_func ("/inspect/check/truncated-vae", test_truncated_vae);
  g_test_add_func ("/inspect/check/missing-shard", test_missing_shard);
  g_test_add_func ("/inspect/check/wrong-dtype", test_wrong_dtype);
  g_test_add_func ("/inspect/check/wrong-shape", test_wrong_shape);
  g_test_add_func ("/inspect/check/no-encoder", test_no_encoder);
  g_test_add_func ("/inspect/check/dummy", test_dummy);
  g_test_add_func ("/inspect/check/not-a-model", test_not_a_model);
  int ret = g_test_run ();

  const char *rm[] = { "rm", "-rf", tmpdir, NULL };
  g_autofree char *out = NULL;
  run (rm, &out);
  g_free (model);
  g_free (tmpdir);
  return ret;
}

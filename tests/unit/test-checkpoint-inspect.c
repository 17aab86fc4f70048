/* Unit tests: the lingbot-inspect tool on a file written here, on the .pth
 * fixture, on a golden file (skipped when absent) and on a corrupt file.
 * Usage: test-checkpoint-inspect PATH-TO-lingbot-inspect
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "lingbot/checkpoint.h"

#include <string.h>
#include <glib/gstdio.h>

static const char *tool;
static char *tmpdir;

static int
run_tool (const char *a1, const char *a2, char **out, char **err)
{
  const char *argv[] = { tool, a1, a2, NULL };
  int status = -1;
  GError *error = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_DEFAULT,
          NULL, NULL, out, err, &status, &error));
  g_assert_no_error (error);
  if (g_spawn_check_wait_status (status, &error))
    return 0;
  int code = error->domain == G_SPAWN_EXIT_ERROR ? error->code : -1;
  g_error_free (error);
  return code;
}

static void
test_written_file (void)
{
  char *path = g_build_filename (tmpdir, "w.safetensors", NULL);
  LbTensor *a = lb_tensor_new_zeros (LB_DTYPE_F32, 2, (int64_t[]) { 16, 4 });
  LbTensor *b = lb_tensor_new_zeros (LB_DTYPE_BF16, 1, (int64_t[]) { 3 });
  const LbTensor *ts[] = { a, b };
  const char *names[] = { "blocks.0.ffn.0.weight", "norm.weight" };
  GHashTable *md = g_hash_table_new (g_str_hash, g_str_equal);
  g_hash_table_insert (md, "fixture", "unit");
  GError *error = NULL;
  g_assert_true (lingbot_safetensors_write (path, names, ts, 2, md, &error));
  g_assert_no_error (error);

  char *out, *err;
  g_assert_cmpint (run_tool ("--metadata", path, &out, &err), ==, 0);
  g_assert_cmpstr (out, ==,
      "blocks.0.ffn.0.weight\tf32\t[16, 4]\t256\n"
      "norm.weight\tbf16\t[3]\t6\n"
      "total: 2 tensors, 262 bytes\n"
      "metadata: 1 keys\n" "  fixture = unit\n");
  g_free (out);
  g_free (err);

  lb_tensor_free (a);
  lb_tensor_free (b);
  g_hash_table_unref (md);
  g_free (path);
}

static void
test_pth_fixture (void)
{
  const char *root = g_getenv ("LINGBOT_SOURCE_ROOT");
  char *p = g_build_filename (root ? root : ".", "tests", "data", "fixtures",
      "tiny_state_dict.pth", NULL);
  char *out, *err;
  g_assert_cmpint (run_tool (p, NULL, &out, &err), ==, 0);
  g_assert_nonnull (strstr (out, "transposed\tf32\t[3, 2]\t24\t"
          "non-contiguous\n"));
  g_assert_nonnull (strstr (out, "total: 11 tensors, 239 bytes\n"));
  g_free (out);
  g_free (err);
  g_free (p);
}

static void
test_golden (void)
{
  const char *shared = g_getenv ("LINGBOT_SHARED_DIR");
  char *p = g_build_filename (shared ? shared : "../shared", "golden",
      "dit_tiny.safetensors", NULL);
  if (!g_file_test (p, G_FILE_TEST_EXISTS)) {
    g_test_skip ("golden/dit_tiny.safetensors not found");
    g_free (p);
    return;
  }
  char *out, *err;
  g_assert_cmpint (run_tool (p, NULL, &out, &err), ==, 0);
  g_assert_nonnull (strstr (out, "\npatch_embedding.weight\tf32\t"
          "[128, 36, 1, 2, 2]\t73728\n"));
  g_assert_nonnull (strstr (out, "\ntotal: "));
  g_free (out);
  g_free (err);
  g_free (p);
}

static void
test_failure (void)
{
  char *p = g_build_filename (tmpdir, "bad.safetensors", NULL);
  g_assert_true (g_file_set_contents (p, "\x01\x02", 2, NULL));
  char *out, *err;
  g_assert_cmpint (run_tool (p, NULL, &out, &err), ==, 1);
  g_assert_nonnull (strstr (err, "truncated safetensors header"));
  g_assert_nonnull (strstr (err, p));
  g_free (out);
  g_free (err);
  g_unlink (p);
  g_free (p);
}

/* a model directory stands for its parts; dummy parts say what they are */
static void
test_model_dir (void)
{
  char *model = g_build_filename (tmpdir, "model", NULL);
  char *dit = g_build_filename (model, "transformers", NULL);
  char *st = g_build_filename (dit, "model.safetensors", NULL);
  char *vae = g_build_filename (model, "Wan2.1_VAE.dummy.json", NULL);
  g_assert_cmpint (g_mkdir_with_parents (dit, 0755), ==, 0);
  LbTensor *a = lb_tensor_new_zeros (LB_DTYPE_F32, 1, (int64_t[]) { 4 });
  const LbTensor *ts[] = { a };
  const char *names[] = { "head.modulation" };
  GError *error = NULL;
  g_assert_true (lingbot_safetensors_write (st, names, ts, 1, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (g_file_set_contents (vae, "{\"lingbot_dummy\": {\"seed\": "
          "5, \"dtype\": \"f16\"}, \"dim\": 8}", -1, NULL));

  char *out, *err;
  g_assert_cmpint (run_tool (model, NULL, &out, &err), ==, 0);
  char *want = g_strdup_printf ("== %s (safetensors-sharded)\n"
      "head.modulation\tf32\t[4]\t16\n"
      "total: 1 tensors, 16 bytes\n"
      "%s: dummy (lingbot-mkmodel --dummy): no tensors stored, the weights "
      "are drawn when it loads (seed 5, f16)\n", dit, vae);
  g_assert_cmpstr (out, ==, want);
  g_free (want);
  g_free (out);
  g_free (err);

  /* without a manifest member the JSON is read as a safetensors index */
  g_assert_true (g_file_set_contents (vae, "{\"dim\": 8}", -1, NULL));
  g_assert_cmpint (run_tool (vae, NULL, &out, &err), ==, 1);
  g_assert_nonnull (strstr (err, "weight_map"));
  g_free (out);
  g_free (err);

  g_unlink (st);
  g_unlink (vae);
  g_rmdir (dit);
  g_rmdir (model);
  lb_tensor_free (a);
  g_free (st);
  g_free (vae);
  g_free (dit);
  g_free (model);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (argc < 2) {
    g_printerr ("usage: %s PATH-TO-lingbot-inspect\n", argv[0]);
    return 77;
  }
  tool = argv[1];
  GError *error = NULL;
  tmpdir = g_dir_make_tmp ("lingbot-inspect-XXXXXX", &error);
  g_assert_no_error (error);

  g_test_add_func ("/checkpoint/inspect/written", test_written_file);
  g_test_add_func ("/checkpoint/inspect/pth", test_pth_fixture);
  g_test_add_func ("/checkpoint/inspect/golden", test_golden);
  g_test_add_func ("/checkpoint/inspect/failure", test_failure);
  g_test_add_func ("/checkpoint/inspect/model-dir", test_model_dir);
  int ret = g_test_run ();

  char *w = g_build_filename (tmpdir, "w.safetensors", NULL);
  g_unlink (w);
  g_free (w);
  g_rmdir (tmpdir);
  g_free (tmpdir);
  return ret;
}

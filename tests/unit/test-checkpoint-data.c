/* Unit tests: the readers on the project's real inputs (poses.npy,
 * intrinsics.npy; lingbot_model_spec.md 2.10) and a golden safetensors file.
 * Exits 77 (skip) when $LINGBOT_SHARED_DIR/data/poses.npy is absent.
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "lingbot/checkpoint.h"
#include "kernels/error.h"

#include <stdlib.h>

static char *shared_dir;

static void
test_poses (void)
{
  char *p = g_build_filename (shared_dir, "data", "poses.npy", NULL);
  GError *error = NULL;
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (p, &error);
  g_assert_no_error (error);
  const LbTensor *t = lingbot_checkpoint_get_checked (ckpt, "poses", 3,
      (int64_t[]) { 269, 4, 4 }, LB_DTYPE_F32, &error);
  g_assert_no_error (error);
  g_assert_true (lb_tensor_is_contiguous (t));

  /* spec 2.10: frame 0 R and t (4 significant digits) */
  static const double r0[3][4] = {
    {0.9961, -0.0017, 0.0887, -15.46},
    {0.0, 0.9998, 0.0191, -5.84},
    {-0.0887, -0.019, 0.9959, 1.88},
  };
  for (int64_t i = 0; i < 3; i++)
    for (int64_t j = 0; j < 4; j++)
      g_assert_cmpfloat_with_epsilon (lb_tensor_get (t,
              (int64_t[]) { 0, i, j }), r0[i][j], j == 3 ? 5e-3 : 1e-4);
  /* exact float32 values read with numpy */
  g_assert_cmpfloat (lb_tensor_get (t, (int64_t[]) { 0, 0, 0 }), ==,
      (double) 9.9606127e-01f);
  g_assert_cmpfloat (lb_tensor_get (t, (int64_t[]) { 0, 0, 3 }), ==,
      (double) -1.5462932e+01f);
  /* the last row of every matrix is [0, 0, 0, 1] */
  for (int64_t f = 0; f < 269; f++)
    for (int64_t j = 0; j < 4; j++)
      g_assert_cmpfloat (lb_tensor_get (t, (int64_t[]) { f, 3, j }), ==,
          j == 3 ? 1.0 : 0.0);
  /* by frame 268 the camera has yawed about 180 degrees: R[0][0] ~ -1 */
  g_assert_cmpfloat (lb_tensor_get (t, (int64_t[]) { 268, 0, 0 }), <, -0.99);
  lingbot_checkpoint_unref (ckpt);
  g_free (p);
}

static void
test_intrinsics (void)
{
  char *p = g_build_filename (shared_dir, "data", "intrinsics.npy", NULL);
  if (!g_file_test (p, G_FILE_TEST_EXISTS)) {
    g_test_skip ("intrinsics.npy not found");
    g_free (p);
    return;
  }
  GError *error = NULL;
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (p, &error);
  g_assert_no_error (error);
  const LbTensor *t = lingbot_checkpoint_get_checked (ckpt, "intrinsics", 2,
      (int64_t[]) { 269, 4 }, LB_DTYPE_F32, &error);
  g_assert_no_error (error);
  static const double row[4] = { 415.53, 415.692, 415.778, 239.778 };
  for (int64_t f = 0; f < 269; f++)
    for (int64_t j = 0; j < 4; j++)
      g_assert_cmpfloat_with_epsilon (lb_tensor_get (t, (int64_t[]) { f, j }),
          row[j], 1e-3);
  lingbot_checkpoint_unref (ckpt);
  g_free (p);
}

static void
test_golden_dit (void)
{
  char *p = g_build_filename (shared_dir, "golden", "dit_tiny.safetensors",
      NULL);
  if (!g_file_test (p, G_FILE_TEST_EXISTS)) {
    g_test_skip ("golden/dit_tiny.safetensors not found");
    g_free (p);
    return;
  }
  GError *error = NULL;
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (p, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (lingbot_checkpoint_get_n_tensors (ckpt), >, 100);
  g_assert_cmpstr (lingbot_checkpoint_get_metadata_value (ckpt, "fixture"),
      ==, "dit_tiny");
  /* spec 4 / README 0.1: in_dim = patch_embedding.weight dim 1 = 36 */
  g_assert_nonnull (lingbot_checkpoint_get_checked (ckpt,
          "patch_embedding.weight", 5, (int64_t[]) { -1, 36, 1, 2, 2 },
          LB_DTYPE_F32, &error));
  g_assert_no_error (error);
  lingbot_checkpoint_unref (ckpt);
  g_free (p);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  const char *dir = g_getenv ("LINGBOT_SHARED_DIR");
  shared_dir = g_strdup (dir ? dir : "../shared");
  char *poses = g_build_filename (shared_dir, "data", "poses.npy", NULL);
  if (!g_file_test (poses, G_FILE_TEST_EXISTS)) {
    g_printerr ("%s not found: skipping\n", poses);
    g_free (poses);
    g_free (shared_dir);
    return 77;
  }
  g_free (poses);

  g_test_add_func ("/checkpoint/data/poses", test_poses);
  g_test_add_func ("/checkpoint/data/intrinsics", test_intrinsics);
  g_test_add_func ("/checkpoint/data/golden-dit", test_golden_dit);
  int ret = g_test_run ();
  g_free (shared_dir);
  return ret;
}

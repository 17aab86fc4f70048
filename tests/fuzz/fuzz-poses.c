/* lingbot-gst: fuzz harness of the poses/intrinsics files (tests/fuzz)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The input is two .npy files: a little-endian 16-bit length n, the poses
 * file of the next n bytes (at most what there is), then the intrinsics
 * file of the rest (none when the rest is empty); both go to
 * lingbot_poses_load().
 */
#include "fuzz-common.h"

#include "lingbot/control.h"

int
LLVMFuzzerTestOneInput (const uint8_t * data, size_t size)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *poses = NULL;
  g_autofree char *intrinsics = NULL;
  LingbotPoses *p;
  size_t split;

  if (size < 2)
    return 0;
  split = MIN ((size_t) (data[0] | data[1] << 8), size - 2);
  poses = fuzz_write_file ("poses.npy", data + 2, split);
  if (size - 2 > split)
    intrinsics = fuzz_write_file ("intrinsics.npy", data + 2 + split,
        size - 2 - split);
  p = lingbot_poses_load (poses, intrinsics, &err);
  fuzz_report (err);
  g_assert ((p == NULL) == (err != NULL));
  if (p != NULL) {
    g_assert (p->n_poses >= 1);
    g_assert (p->n_intrinsics == 0 || p->n_intrinsics == 1 ||
        p->n_intrinsics == p->n_poses);
  }
  lingbot_poses_free (p);
  return 0;
}

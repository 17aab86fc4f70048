/* lingbot-gst: helpers shared by the DiT tests
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include <math.h>
#include <stdlib.h>

#include "kernels/error.h"
#include "lingbot/checkpoint.h"

/* The golden tolerance (golden README 0.2): max|c - g| <= 1e-4 max|g|. */
#define DIT_GOLDEN_TOL 1e-4

static inline char *
dit_fixture_path (void)
{
  const char *root = g_getenv ("LINGBOT_SOURCE_ROOT");
  return g_build_filename (root ? root : ".", "tests", "data", "golden",
      "dit_tiny.safetensors", NULL);
}

/* max|c - g| / max|g| over @n floats (g may be any float dtype). */
static inline double
dit_rel_error (const float *c, const LbTensor * g, int64_t n)
{
  g_assert_cmpint (lb_tensor_numel (g), ==, n);
  double maxg = 0.0, maxd = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double gv = lb_tensor_get_flat (g, i);
    maxg = MAX (maxg, fabs (gv));
    double d = fabs ((double) c[i] - gv);
    if (isnan (d))
      d = INFINITY;
    maxd = MAX (maxd, d);
  }
  return maxg > 0.0 ? maxd / maxg : maxd;
}

static inline const LbTensor *
dit_fixture_get (LingbotCheckpoint * ckpt, const char *name)
{
  g_autoptr (GError) err = NULL;
  const LbTensor *t = lingbot_checkpoint_get (ckpt, name, &err);
  g_assert_no_error (err);
  g_assert_nonnull (t);
  return t;
}

/* The dit_tiny fixture's inputs of chunk @c (0..3): @noise the initial
 * noise then the re-noise draws of steps 0-2, @y the condition, @control
 * (optional) the camera control. */
static inline void
dit_fixture_chunk (LingbotCheckpoint * ckpt, int c, const LbTensor * noise[4],
    const LbTensor ** y, const LbTensor ** control)
{
  char name[96];
  g_snprintf (name, sizeof name, "output.chunk%d.step0.x_in", c);
  noise[0] = dit_fixture_get (ckpt, name);
  for (int s = 0; s < 3; s++) {
    g_snprintf (name, sizeof name, "output.chunk%d.step%d.renoise", c, s);
    noise[s + 1] = dit_fixture_get (ckpt, name);
  }
  g_snprintf (name, sizeof name, "input.chunk%d.y", c);
  *y = dit_fixture_get (ckpt, name);
  if (control) {
    g_snprintf (name, sizeof name, "input.chunk%d.control", c);
    *control = dit_fixture_get (ckpt, name);
  }
}

/* lingbot-gst: helpers shared by the golden-fixture tests
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Fixtures live in tests/data/golden/ (found through LINGBOT_SOURCE_ROOT);
 * the published example data in ../shared/data (LINGBOT_SHARED_DIR).
 */
#pragma once

#include <glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lingbot-test-config.h"
#include "lingbot/checkpoint.h"

static inline char *
golden_fixture_path (const char *file)
{
  const char *root = g_getenv ("LINGBOT_SOURCE_ROOT");
  if (root == NULL)
    root = LINGBOT_SOURCE_ROOT;
  return g_build_filename (root, "tests", "data", "golden", file, NULL);
}

/* A file of ../shared/data, or NULL when that folder is not there. */
static inline char *
golden_shared_data_path (const char *file)
{
  const char *dir = g_getenv ("LINGBOT_SHARED_DIR");
  g_autofree char *def = NULL;
  char *p;

  if (dir == NULL) {
    def = g_build_filename (LINGBOT_SOURCE_ROOT, "..", "shared", NULL);
    dir = def;
  }
  p = g_build_filename (dir, "data", file, NULL);
  if (!g_file_test (p, G_FILE_TEST_EXISTS)) {
    g_free (p);
    return NULL;
  }
  return p;
}

static inline LingbotCheckpoint *
golden_open (const char *file)
{
  g_autofree char *path = golden_fixture_path (file);
  g_autoptr (GError) err = NULL;
  LingbotCheckpoint *ck = lingbot_checkpoint_open (path, &err);
  g_assert_no_error (err);
  g_assert_nonnull (ck);
  return ck;
}

static inline const LbTensor *
golden_get (LingbotCheckpoint * ck, const char *name)
{
  g_autoptr (GError) err = NULL;
  const LbTensor *t = lingbot_checkpoint_get (ck, name, &err);
  g_assert_no_error (err);
  g_assert_nonnull (t);
  return t;
}

/* A copy of a stored tensor as doubles (any dtype). */
static inline double *
golden_f64 (LingbotCheckpoint * ck, const char *name, int64_t * n)
{
  const LbTensor *t = golden_get (ck, name);
  int64_t cnt = lb_tensor_numel (t);
  double *d = g_new (double, cnt);
  for (int64_t i = 0; i < cnt; i++)
    d[i] = lb_tensor_get_flat (t, i);
  if (n)
    *n = cnt;
  return d;
}

/* A contiguous float32 view of a stored float32 tensor. */
static inline const float *
golden_f32 (LingbotCheckpoint * ck, const char *name, int64_t * n)
{
  const LbTensor *t = golden_get (ck, name);
  g_assert_cmpint (t->dtype, ==, LB_DTYPE_F32);
  g_assert_true (lb_tensor_is_contiguous (t));
  if (n)
    *n = lb_tensor_numel (t);
  return t->data;
}

static inline double
golden_max_abs_diff_f32 (const float *a, const float *b, int64_t n)
{
  double m = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double d = fabs ((double) a[i] - (double) b[i]);
    if (!(d <= m))
      m = isnan (d) ? INFINITY : d;
  }
  return m;
}

static inline double
golden_max_abs_f32 (const float *a, int64_t n)
{
  double m = 0.0;
  for (int64_t i = 0; i < n; i++)
    m = MAX (m, fabs ((double) a[i]));
  return m;
}

/* Reported in the test log (meson-logs/testlog.txt). */
#define golden_report(...) g_printerr ("# " __VA_ARGS__)

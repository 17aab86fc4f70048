/* lingbot-gst: helpers shared by the VAE tests
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "lingbot-test-config.h"
#include "kernels/backend.h"
#include "lingbot/checkpoint.h"
#include "lingbot/vae.h"

static inline char *
vae_test_data_path (const char *file)
{
  const char *root = g_getenv ("LINGBOT_SOURCE_ROOT");
  if (root == NULL)
    root = LINGBOT_SOURCE_ROOT;
  return g_build_filename (root, "tests", "data", "golden", file, NULL);
}

static inline LingbotCheckpoint *
vae_test_open_golden (void)
{
  g_autofree char *path = vae_test_data_path ("vae_tiny.safetensors");
  g_autoptr (GError) err = NULL;
  LingbotCheckpoint *ck = lingbot_checkpoint_open (path, &err);
  g_assert_no_error (err);
  return ck;
}

static inline const LbTensor *
vae_test_get (LingbotCheckpoint * ck, const char *name)
{
  g_autoptr (GError) err = NULL;
  const LbTensor *t = lingbot_checkpoint_get (ck, name, &err);
  g_assert_no_error (err);
  return t;
}

/* @img: a view of the golden input image (input.image_tensor, [3, 48,
 * 80]): rows @y0 to @y0 + @H - 1, columns @x0 to @x0 + @W - 1 */
static inline void
vae_test_image_crop (LingbotCheckpoint * ck, LbTensor * img, int y0, int x0,
    int H, int W)
{
  const LbTensor *image = vae_test_get (ck, "input.image_tensor");
  lb_tensor_view_narrow (img, image, 1, y0, H);
  lb_tensor_view_narrow (img, img, 2, x0, W);
}

static inline LbStream *
vae_test_stream (void)
{
  LbBackend *be = lb_cpu_backend ();
  g_autoptr (GError) err = NULL;
  LbStream *s = be->stream_new (be, 0, &err);
  g_assert_no_error (err);
  return s;
}

/* max |a - b| over the first n elements of two tensors of any strides,
 * compared in row-major order of @b's shape; @a must have >= as many. */
static inline double
vae_test_max_abs_diff (const LbTensor * a, const LbTensor * b)
{
  g_assert_cmpint (lb_tensor_numel (a), ==, lb_tensor_numel (b));
  double m = 0;
  for (int64_t i = 0; i < lb_tensor_numel (b); i++) {
    double d = fabs (lb_tensor_get_flat (a, i) - lb_tensor_get_flat (b, i));
    if (!(d <= m))
      m = isnan (d) ? INFINITY : d;
  }
  return m;
}

static inline double
vae_test_max_abs (const LbTensor * a)
{
  double m = 0;
  for (int64_t i = 0; i < lb_tensor_numel (a); i++)
    m = MAX (m, fabs (lb_tensor_get_flat (a, i)));
  return m;
}

/* A deterministic pseudo-random f32 tensor in [-amp, amp]. */
static inline LbTensor *
vae_test_random (int ndim, const int64_t * shape, guint32 seed, float amp)
{
  LbTensor *t = lb_tensor_new (LB_DTYPE_F32, ndim, shape);
  float *d = t->data;
  guint32 x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < lb_tensor_numel (t); i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    d[i] = amp * ((float) (x >> 8) / 8388608.f - 1.f);
  }
  return t;
}

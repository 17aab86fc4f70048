/* lingbot-gst: CUDA GEMM against the CPU oracle.  Exits 77 (skip) when no
 * CUDA device or no CUDA module is available.
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "lingbot/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* FP32 accumulation in a different order: relative to the row's magnitude. */
#define GEMM_REL_TOL 1e-5

static LbBackend *cuda;

static void
fill_random (LbTensor * t, GRand * r)
{
  float *d = t->data;
  for (int64_t i = 0; i < lb_tensor_numel (t); i++)
    d[i] = (float) g_rand_double_range (r, -1.0, 1.0);
}

static void
check_case (int64_t m, int64_t n, int64_t k, gboolean trans_w,
    gboolean with_bias, float beta)
{
  g_autoptr (GRand) r = g_rand_new_with_seed ((guint32) (m * 131 + n * 7 + k));
  g_autoptr (GError) err = NULL;
  LbBackend *cpu = lb_cpu_backend ();
  LbStream *cs = cpu->stream_new (cpu, 0, NULL);
  LbStream *gs = cuda->stream_new (cuda, 0, &err);
  g_assert_no_error (err);

  int64_t xs[2] = { m, k }, ws[2] = { trans_w ? n : k, trans_w ? k : n };
  int64_t ys[2] = { m, n }, bs[1] = { n };
  g_autoptr (LbTensor) x = lb_tensor_new (LB_DTYPE_F32, 2, xs);
  g_autoptr (LbTensor) w = lb_tensor_new (LB_DTYPE_F32, 2, ws);
  g_autoptr (LbTensor) b = lb_tensor_new (LB_DTYPE_F32, 1, bs);
  g_autoptr (LbTensor) y0 = lb_tensor_new (LB_DTYPE_F32, 2, ys);
  fill_random (x, r);
  fill_random (w, r);
  fill_random (b, r);
  fill_random (y0, r);
  g_autoptr (LbTensor) ycpu = lb_tensor_copy (y0);
  g_autoptr (LbTensor) yback = lb_tensor_copy (y0);

  g_autoptr (LbTensor) dx = lb_tensor_new_on (gs, LB_DTYPE_F32, 2, xs, &err);
  g_autoptr (LbTensor) dw = lb_tensor_new_on (gs, LB_DTYPE_F32, 2, ws, &err);
  g_autoptr (LbTensor) db = lb_tensor_new_on (gs, LB_DTYPE_F32, 1, bs, &err);
  g_autoptr (LbTensor) dy = lb_tensor_new_on (gs, LB_DTYPE_F32, 2, ys, &err);
  g_assert_no_error (err);
  g_assert_true (lb_tensor_upload (gs, dx, x, &err));
  g_assert_true (lb_tensor_upload (gs, dw, w, &err));
  g_assert_true (lb_tensor_upload (gs, db, b, &err));
  g_assert_true (lb_tensor_upload (gs, dy, y0, &err));

  g_assert_true (lb_ops (cs)->gemm (cs, x, w, trans_w, with_bias ? b : NULL,
          0.5f, beta, ycpu, &err));
  g_assert_true (lb_ops (gs)->gemm (gs, dx, dw, trans_w, with_bias ? db : NULL,
          0.5f, beta, dy, &err));
  g_assert_no_error (err);
  g_assert_true (lb_tensor_download (gs, yback, dy, &err));
  g_assert_no_error (err);

  double maxabs = 0, maxdiff = 0;
  const float *a = ycpu->data, *g = yback->data;
  for (int64_t i = 0; i < m * n; i++) {
    maxabs = fmax (maxabs, fabs (a[i]));
    maxdiff = fmax (maxdiff, fabs ((double) a[i] - g[i]));
  }
  g_test_message ("gemm M=%" G_GINT64_FORMAT " N=%" G_GINT64_FORMAT " K=%"
      G_GINT64_FORMAT " trans=%d bias=%d beta=%g: max rel %.3g", m, n, k,
      trans_w, with_bias, beta, maxdiff / maxabs);
  g_assert_cmpfloat (maxdiff, <=, GEMM_REL_TOL * maxabs);
  cuda->stream_free (gs);
  cpu->stream_free (cs);
}

static void
test_gemm_parity (void)
{
  static const int64_t shapes[][3] = {
    {1, 1, 1}, {7, 13, 5}, {64, 64, 64}, {257, 129, 511}, {1024, 768, 384},
  };
  for (guint i = 0; i < G_N_ELEMENTS (shapes); i++) {
    for (int tw = 0; tw < 2; tw++) {
      check_case (shapes[i][0], shapes[i][1], shapes[i][2], tw, TRUE, 0.0f);
      check_case (shapes[i][0], shapes[i][1], shapes[i][2], tw, FALSE, 0.25f);
    }
  }
}

int
main (int argc, char **argv)
{
  g_autoptr (GError) err = NULL;
  g_test_init (&argc, &argv, NULL);
  cuda = lingbot_backend_cuda (&err);
  if (cuda == NULL) {
    printf ("SKIP: %s\n", err->message);
    return 77;
  }
  g_test_add_func ("/gpu/gemm/parity", test_gemm_parity);
  return g_test_run ();
}

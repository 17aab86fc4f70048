/* lingbot-gst: the fp8 gemm (gemm_fp8, kernels/ops.h) on the CPU oracle
 * and on the emulated device
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Checked here:
 * - exact results where every product and sum is exact in f32 (small
 *   integers, scales that are powers of two), so the quantisation, the
 *   per-row and per-column scales, alpha, beta and bias are each seen to
 *   act exactly as the contract writes them;
 * - the activations are really rounded to E4M3 (17 -> 16, a tie to even),
 *   saturation cannot happen (the row's amax maps to 448), an all-zero row
 *   takes scale 1;
 * - random operands against a float64 reference computed from the
 *   quantised operands (the contract's own definition) within f32
 *   summation error, and within the E4M3 quantisation error of the f32
 *   gemm;
 * - a row of y does not depend on the other rows (bit for bit);
 * - the argument errors, exact messages;
 * - the same op on fakedev (tests/common/fakedev.c), directly and through
 *   a captured graph, bit-identical to the CPU.
 */
#include "test-ops-common.h"
#include "fakedev.h"
#include "test-compare.h"

/* K f32 products of exact E4M3 values, summed in f32: ~sqrt(K) * 6e-8
 * relative, K <= 300 here. */
#define TOL_SUM 1e-5

/* An f8e4m3 [n, k] weight and its scales quantised from f32 @w. */
static void
quantize_weight (const LbTensor * w, LbTensor ** wq, LbTensor ** sw)
{
  const int64_t n = w->shape[0], k = w->shape[1];
  *wq = lb_tensor_new (LB_DTYPE_F8E4M3, 2, w->shape);
  *sw = lb_tensor_new (LB_DTYPE_F32, 1, (const int64_t[1]) { n });
  for (int64_t j = 0; j < n; j++)
    lb_quantize_e4m3_row ((const float *) w->data + j * k, k,
        (uint8_t *) (*wq)->data + j * k, (float *) (*sw)->data + j);
}

static LbTensor *
f32_2d (int64_t m, int64_t n, const float *v)
{
  LbTensor *t = lb_tensor_new (LB_DTYPE_F32, 2, (const int64_t[2]) { m, n });
  memcpy (t->data, v, m * n * sizeof (float));
  return t;
}

static void
test_exact (void)
{
  LbStream *s = test_stream ();
  /* row 0: amax 448, sx = 1, every value exact in E4M3; row 1: amax 14,
   * sx = 14 / 448 = 1/32 exactly, x / sx = 32 x exact; row 2: zeros */
  const float xv[3 * 4] = {
    448, 2, -3, 16,
    7, -14, 0.5f, 1,
    0, 0, 0, 0,
  };
  /* w rows with amax 448 (sw = 1) and 224 (sw = 0.5) */
  const float wv[2 * 4] = {
    1, 0, 448, -2,
    224, 32, 0, 4,
  };
  g_autoptr (LbTensor) x = f32_2d (3, 4, xv);
  g_autoptr (LbTensor) w = f32_2d (2, 4, wv);
  LbTensor *wq_, *sw_;
  quantize_weight (w, &wq_, &sw_);
  g_autoptr (LbTensor) wq = wq_;
  g_autoptr (LbTensor) sw = sw_;
  g_assert_cmpfloat (((float *) sw->data)[0], ==, 1.0f);
  g_assert_cmpfloat (((float *) sw->data)[1], ==, 0.5f);
  const float bv[2] = { 0.25f, -1 };
  g_autoptr (LbTensor) bias = lb_tensor_new (LB_DTYPE_F32, 1,
      (const int64_t[1]) { 2 });
  memcpy (bias->data, bv, sizeof bv);
  g_autoptr (LbTensor) y = poisoned (2, (const int64_t[2]) { 3, 2 });

  assert_op_ok (lb_cpu_gemm_fp8 (s, x, wq, sw, bias, 1.0f, 0.0f, y, error));
  const float *yd = y->data;
  /* the f32 products exactly (every operand exact in E4M3) */
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++) {
      double ref = bv[j];
      for (int l = 0; l < 4; l++)
        ref += (double) xv[i * 4 + l] * wv[j * 4 + l];
      g_assert_cmpfloat (yd[i * 2 + j], ==, (float) ref);
    }
  g_assert_cmpfloat (yd[0], ==, 448.0f + 448 * -3 - 32 + 0.25f);
  g_assert_cmpfloat (yd[4], ==, 0.25f); /* zero row: bias */
  g_assert_cmpfloat (yd[5], ==, -1.0f);

  /* alpha and beta: y = ((alpha acc) sx) sw + (beta y + bias) */
  g_autoptr (LbTensor) y0 = lb_tensor_copy (y);
  assert_op_ok (lb_cpu_gemm_fp8 (s, x, wq, sw, bias, -0.5f, 2.0f, y, error));
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++) {
      double acc = 0;
      for (int l = 0; l < 4; l++)
        acc += (double) xv[i * 4 + l] * wv[j * 4 + l];
      const float prev = ((float *) y0->data)[i * 2 + j];
      g_assert_cmpfloat (yd[i * 2 + j], ==, (float) (-0.5 * acc +
              (2.0 * prev + bv[j])));
    }
  /* no bias, beta 0: NaN in y is not read */
  g_autoptr (LbTensor) yn = poisoned (2, (const int64_t[2]) { 3, 2 });
  assert_op_ok (lb_cpu_gemm_fp8 (s, x, wq, sw, NULL, 1.0f, 0.0f, yn, error));
  g_assert_cmpfloat (((float *) yn->data)[0], ==, 448.0f + 448 * -3 - 32);
  g_assert_cmpfloat (((float *) yn->data)[5], ==, 0.0f);
}

/* x is rounded to E4M3 after scaling: [448, 17] has sx = 1 and 17 lies
 * halfway between 16 and 18, so it becomes 16 (even mantissa); 19 -> 20
 * (the tie 18|20 goes to 20 = 1.25 * 16, even). */
static void
test_rounds_x (void)
{
  LbStream *s = test_stream ();
  const float xv[2 * 2] = { 448, 17, -448, 19 };
  const float wv[1 * 2] = { 0, 1 };
  g_autoptr (LbTensor) x = f32_2d (2, 2, xv);
  g_autoptr (LbTensor) w = f32_2d (1, 2, wv);
  LbTensor *wq_, *sw_;
  quantize_weight (w, &wq_, &sw_);
  g_autoptr (LbTensor) wq = wq_;
  g_autoptr (LbTensor) sw = sw_;
  /* sw = 1/448: w = [0, 448 * (1/448)] */
  g_assert_cmpfloat (((float *) sw->data)[0], ==, 1.0f / 448.0f);
  g_autoptr (LbTensor) y = poisoned (2, (const int64_t[2]) { 2, 1 });
  assert_op_ok (lb_cpu_gemm_fp8 (s, x, wq, sw, NULL, 1.0f, 0.0f, y, error));
  g_assert_cmpfloat (((float *) y->data)[0], ==, (16.0f * 448.0f) *
      (1.0f / 448.0f));
  g_assert_cmpfloat (((float *) y->data)[1], ==, (20.0f * 448.0f) *
      (1.0f / 448.0f));
  /* the f32 gemm gives 17 and 19 */
  g_assert_cmpfloat (((float *) y->data)[0], !=, 17.0f);
}

/* Random operands: the float64 sum of the quantised products (the
 * contract's definition) within f32 summation error; the f32 gemm within
 * E4M3 quantisation error (2^-4 relative per operand, partly cancelling);
 * a row computed alone is bit-identical to the same row among others. */
static void
test_random (void)
{
  LbStream *s = test_stream ();
  static const int64_t sizes[][3] = {
    {1, 1, 1}, {5, 3, 7}, {17, 9, 33}, {40, 24, 300}, {3, 70, 16},
  };
  for (guint c = 0; c < G_N_ELEMENTS (sizes); c++) {
    const int64_t m = sizes[c][0], n = sizes[c][1], k = sizes[c][2];
    g_autoptr (LbTensor) x = rand_tensor (2, (const int64_t[2]) { m, k },
        -3, 3);
    g_autoptr (LbTensor) w = rand_tensor (2, (const int64_t[2]) { n, k },
        -0.2, 0.2);
    g_autoptr (LbTensor) bias = rand_tensor (1, (const int64_t[1]) { n },
        -1, 1);
    LbTensor *wq_, *sw_;
    quantize_weight (w, &wq_, &sw_);
    g_autoptr (LbTensor) wq = wq_;
    g_autoptr (LbTensor) sw = sw_;
    g_autoptr (LbTensor) y = poisoned (2, (const int64_t[2]) { m, n });
    assert_op_ok (lb_cpu_gemm_fp8 (s, x, wq, sw, bias, 1.0f, 0.0f, y, error));

    /* the reference from the quantised operands */
    g_autofree double *ref = g_new (double, m * n);
    g_autofree double *f32ref = g_new (double, m * n);
    g_autofree uint8_t *xq = g_malloc (k);
    const float *xd = x->data, *wd = w->data, *bd = bias->data;
    for (int64_t i = 0; i < m; i++) {
      float sx;
      lb_quantize_e4m3_row (xd + i * k, k, xq, &sx);
      for (int64_t j = 0; j < n; j++) {
        double acc = 0, exact = 0;
        for (int64_t l = 0; l < k; l++) {
          acc += (double) lb_e4m3_to_f32 (xq[l]) *
              lb_e4m3_to_f32 (((uint8_t *) wq->data)[j * k + l]);
          exact += (double) xd[i * k + l] * wd[j * k + l];
        }
        ref[i * n + j] = acc * sx * ((float *) sw->data)[j] + bd[j];
        f32ref[i * n + j] = exact + bd[j];
      }
    }
    assert_close_scaled ("gemm_fp8", y, ref, TOL_SUM, (double) k);
    double err = 0, big = 0;
    for (int64_t i = 0; i < m * n; i++) {
      err = MAX (err, fabs (((float *) y->data)[i] - f32ref[i]));
      big = MAX (big, fabs (f32ref[i]));
    }
    g_test_message ("gemm_fp8 %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%"
        G_GINT64_FORMAT ": rel_to_max %.3g against the f32 product", m, n, k,
        err / big);
    g_assert_cmpfloat (err / big, <, 0.1);

    /* each row alone */
    for (int64_t i = 0; i < m; i++) {
      LbTensor xr, yr;
      lb_tensor_view_narrow (&xr, x, 0, i, 1);
      g_autoptr (LbTensor) y1 = poisoned (2, (const int64_t[2]) { 1, n });
      lb_tensor_view (&yr, y1);
      assert_op_ok (lb_cpu_gemm_fp8 (s, &xr, wq, sw, bias, 1.0f, 0.0f, &yr,
              error));
      g_assert_true (memcmp (y1->data, (float *) y->data + i * n,
              n * sizeof (float)) == 0);
    }
  }
}

static void
test_errors (void)
{
  LbStream *s = test_stream ();
  g_autoptr (LbTensor) x = rand_tensor (2, (const int64_t[2]) { 4, 8 }, -1, 1);
  g_autoptr (LbTensor) w32 = rand_tensor (2, (const int64_t[2]) { 3, 8 }, -1,
      1);
  g_autoptr (LbTensor) w = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 3, 8 });
  g_autoptr (LbTensor) w6 = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 3, 6 });
  g_autoptr (LbTensor) sw = rand_tensor (1, (const int64_t[1]) { 3 }, 1, 2);
  g_autoptr (LbTensor) sw4 = rand_tensor (1, (const int64_t[1]) { 4 }, 1, 2);
  g_autoptr (LbTensor) y = poisoned (2, (const int64_t[2]) { 4, 3 });
  g_autoptr (LbTensor) y5 = poisoned (2, (const int64_t[2]) { 4, 5 });
  g_autoptr (LbTensor) b2 = rand_tensor (1, (const int64_t[1]) { 2 }, 1, 2);
  g_autoptr (LbTensor) x16 = lb_tensor_new_zeros (LB_DTYPE_BF16, 2,
      (const int64_t[2]) { 4, 8 });
  LbTensor wt;
  lb_tensor_view_permute (&wt, w, (const int[2]) { 1, 0 });

  assert_op_error (lb_cpu_gemm_fp8 (s, x, w32, sw, NULL, 1, 0, y, error),
      "gemm_fp8: w is f32 [3, 8], expected f8e4m3 [N, 8] contiguous");
  assert_op_error (lb_cpu_gemm_fp8 (s, x, &wt, sw, NULL, 1, 0, y, error),
      "gemm_fp8: w is f8e4m3 [8, 3], expected f8e4m3 [N, 8] contiguous");
  assert_op_error (lb_cpu_gemm_fp8 (s, x, w6, sw, NULL, 1, 0, y, error),
      "gemm_fp8: inner dimensions differ: x [4, 8], w [3, 6] (w is [N, K])");
  assert_op_error (lb_cpu_gemm_fp8 (s, x, w, sw4, NULL, 1, 0, y, error),
      "gemm_fp8: sw is f32 [4], expected f32 [3] contiguous");
  assert_op_error (lb_cpu_gemm_fp8 (s, x, w, NULL, NULL, 1, 0, y, error),
      "gemm_fp8: sw is NULL, expected f32 [3] contiguous");
  assert_op_error (lb_cpu_gemm_fp8 (s, x, w, sw, b2, 1, 0, y, error),
      "gemm_fp8: bias is f32 [2], expected f32 [3] contiguous");
  assert_op_error (lb_cpu_gemm_fp8 (s, x, w, sw, NULL, 1, 0, y5, error),
      "gemm_fp8: y is f32 [4, 5], expected f32 [4, 3] with unit column "
      "stride");
  assert_op_error (lb_cpu_gemm_fp8 (s, x16, w, sw, NULL, 1, 0, y, error),
      "gemm_fp8: x is bf16 [4, 8], expected f32 [M, K] with unit column "
      "stride");
  assert_op_error (lb_cpu_gemm_fp8 (s, x, NULL, sw, NULL, 1, 0, y, error),
      "gemm_fp8: w is NULL, expected f8e4m3 [N, 8] contiguous");
}

/* fakedev: the op directly (round 0), captured (round 1) and replayed on
 * new inputs (rounds 1-3), bit-identical to the CPU every time. */
static void
test_fakedev (void)
{
  g_autoptr (GError) err = NULL;
  const FakeDevStats st0 = fakedev_stats ();
  LbBackend *be = fakedev_backend ();
  LbStream *ds = be->stream_new (be, 0, &err);
  g_assert_no_error (err);
  LbStream *cs = test_stream ();
  const int64_t m = 19, n = 12, k = 40;
  g_autoptr (LbTensor) w = rand_tensor (2, (const int64_t[2]) { n, k }, -1, 1);
  g_autoptr (LbTensor) bias = rand_tensor (1, (const int64_t[1]) { n }, -1, 1);
  LbTensor *wq_, *sw_;
  quantize_weight (w, &wq_, &sw_);
  g_autoptr (LbTensor) wq = wq_;
  g_autoptr (LbTensor) sw = sw_;
  g_autoptr (LbTensor) dwq = test_upload (ds, wq);
  g_autoptr (LbTensor) dsw = test_upload (ds, sw);
  g_autoptr (LbTensor) db = test_upload (ds, bias);
  g_autoptr (LbTensor) dx = NULL;
  g_autoptr (LbTensor) dy = NULL;
  LbGraph *graph = NULL;
  for (int round = 0; round < 4; round++) {
    g_autoptr (LbTensor) x = rand_tensor (2, (const int64_t[2]) { m, k }, -4,
        4);
    g_autoptr (LbTensor) y = rand_tensor (2, (const int64_t[2]) { m, n }, -1,
        1);
    if (dx == NULL) {
      dx = test_upload (ds, x);
      dy = test_upload (ds, y);
    } else {
      g_assert_true (lb_tensor_upload (ds, dx, x, &err) &&
          lb_tensor_upload (ds, dy, y, &err));
      g_assert_no_error (err);
    }
    /* the CPU reference below writes y in place: the uploads must have
     * read it (LbBackend.copy) */
    g_assert_true (be->stream_synchronize (ds, &err));
    assert_op_ok (lb_cpu_gemm_fp8 (cs, x, wq, sw, bias, 0.75f, 0.5f, y, error));
    if (round == 0) {
      g_assert_true (lb_ops (ds)->gemm_fp8 (ds, dx, dwq, dsw, db, 0.75f,
              0.5f, dy, &err));
    } else if (round == 1) {
      g_assert_true (be->graph_begin (ds, &err));
      g_assert_true (lb_ops (ds)->gemm_fp8 (ds, dx, dwq, dsw, db, 0.75f,
              0.5f, dy, &err));
      graph = be->graph_end (ds, &err);
      g_assert_nonnull (graph);
      g_assert_true (be->graph_launch (ds, graph, &err));
    } else {
      g_assert_true (be->graph_launch (ds, graph, &err));
    }
    g_assert_no_error (err);
    g_autoptr (LbTensor) hy = lb_tensor_new (LB_DTYPE_F32, 2, y->shape);
    g_assert_true (lb_tensor_download (ds, hy, dy, &err));
    g_assert_no_error (err);
    g_assert_true (memcmp (hy->data, y->data, lb_tensor_nbytes (y)) == 0);
  }
  be->graph_free (ds, graph);
  /* a host weight is refused (wrong device) */
  g_assert_false (lb_ops (ds)->gemm_fp8 (ds, dx, wq, dsw, db, 1.0f, 0.0f, dy,
          &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "gemm_fp8: wrong device");
  g_clear_error (&err);
  FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.bad, ==, st0.bad + 2);
  g_assert_cmpint (st.n_captures, ==, st0.n_captures + 1);
  g_assert_cmpint (st.n_launches, ==, st0.n_launches + 3);
  g_clear_pointer (&dx, lb_tensor_free);
  g_clear_pointer (&dy, lb_tensor_free);
  g_clear_pointer (&dwq, lb_tensor_free);
  g_clear_pointer (&dsw, lb_tensor_free);
  g_clear_pointer (&db, lb_tensor_free);
  be->stream_free (ds);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ops/fp8/exact", test_exact);
  g_test_add_func ("/ops/fp8/rounds-x", test_rounds_x);
  g_test_add_func ("/ops/fp8/random", test_random);
  g_test_add_func ("/ops/fp8/errors", test_errors);
  g_test_add_func ("/ops/fp8/fakedev", test_fakedev);
  return g_test_run ();
}

/* lingbot-gst: the fp8 GEMM inputs written by their producer (norm_fp8,
 * gemm_fp8_q; kernels/ops-list.h) on the CPU oracle and on the emulated
 * device
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Checked here, byte for byte (the ops' contract is the composition of
 * the ops they replace, not a tolerance):
 * - norm_fp8 against layer_norm / norm_modulate / residual_norm_modulate
 *   into f32 followed by lb_quantize_e4m3_row() of each row (what
 *   gemm_fp8 does to its x): the codes, the row scales and the updated
 *   residual, over affine or not, broadcast or per-row modulation, gated
 *   or plain residual, row-strided x and q views, a zero row (scale 1),
 *   a row holding a NaN, D = 1 and M = 0;
 * - gemm_fp8_q on the quantised rows against gemm_fp8 on the f32 rows,
 *   with bias, alpha and beta, a row-strided x, K = 0;
 * - the DiT's chain norm_fp8 -> gemm_fp8_q against norm_modulate ->
 *   gemm_fp8;
 * - gemm_fp8_gelu_q against gemm_fp8_q -> gelu_tanh -> the rows quantised
 *   (codes and scales), and the FFN's second layer on its codes
 *   (gemm_fp8_q) against gemm_fp8 on the f32 hidden, with and without
 *   bias, K = 0, alpha = 0, row-strided x and y, N = 13824;
 * - the argument errors, exact messages;
 * - the three ops on fakedev, directly and through a captured graph replayed
 *   on new inputs, bit-identical to the CPU.
 */
#include "test-ops-common.h"
#include "fakedev.h"
#include "test-compare.h"

#define EPS 1e-6f

typedef struct
{
  int64_t m, d;
  gboolean affine;              /* LayerNorm weight and bias */
  gboolean modulate;            /* scale and shift */
  gboolean per_row;             /* scale and shift [M, D] (else [D]) */
  gboolean residual;            /* y first (then modulate too) */
  int gate;                     /* 0 none, 1 [D], 2 [M, D] */
  gboolean strided;             /* x and q row-strided views */
  gboolean nan;                 /* a NaN in row 2 */
} NormCase;

static gboolean
same (const void *a, const void *b, gsize n)
{
  return memcmp (a, b, n) == 0;
}

/* A copy of @t's [m, d] values as a [m, d] view into a wider buffer
 * (row stride d + 5) when @strided, else a contiguous copy; the owner of
 * the memory in *@owner. */
static void
rows_copy (const LbTensor * t, gboolean strided, LbTensor ** owner,
    LbTensor * view)
{
  const int64_t m = t->shape[0], d = t->shape[1];
  if (!strided) {
    *owner = lb_tensor_new (LB_DTYPE_F32, 2, t->shape);
    memcpy ((*owner)->data, t->data, lb_tensor_nbytes (t));
    lb_tensor_view (view, *owner);
    return;
  }
  *owner = poisoned (2, (const int64_t[2]) { m, d + 5 });
  lb_tensor_view_narrow (view, *owner, 1, 2, d);
  for (int64_t i = 0; i < m; i++)
    memcpy ((float *) view->data + i * view->stride[0],
        (const float *) t->data + i * d, d * sizeof (float));
}

static void
norm_case (LbStream * s, const NormCase * c)
{
  const int64_t m = c->m, d = c->d;
  const int64_t md[2] = { m, d };
  g_autoptr (LbTensor) x0 = rand_tensor (2, md, -3, 3);
  g_autoptr (LbTensor) y = c->residual ? rand_tensor (2, md, -2, 2) : NULL;
  if (m > 1) {
    /* row 1 all zero after the residual: LN gives zeros (scale 1 unless
     * a bias or a shift follows) */
    for (int64_t j = 0; j < d; j++) {
      ((float *) x0->data)[d + j] = 0.0f;
      if (y)
        ((float *) y->data)[d + j] = 0.0f;
    }
  }
  if (c->nan && m > 2)
    ((float *) x0->data)[2 * d + d / 2] = NAN;
  g_autoptr (LbTensor) w = c->affine ? rand_tensor (1, &d, 0.5, 1.5) : NULL;
  g_autoptr (LbTensor) b = c->affine ? rand_tensor (1, &d, -0.5, 0.5) : NULL;
  const int64_t sshape[2] = { c->per_row ? m : d, d };
  const int sdim = c->per_row ? 2 : 1;
  const int64_t *sp = c->per_row ? sshape : &d;
  g_autoptr (LbTensor) sc = c->modulate ? rand_tensor (sdim, sp, -0.5, 0.5) :
      NULL;
  g_autoptr (LbTensor) sh = c->modulate ? rand_tensor (sdim, sp, -1, 1) : NULL;
  g_autoptr (LbTensor) gate = c->gate == 1 ? rand_tensor (1, &d, -1, 1) :
      c->gate == 2 ? rand_tensor (2, md, -1, 1) : NULL;

  /* the pair: the f32 op, then gemm_fp8's quantisation of each row */
  LbTensor xr, xf, q;
  LbTensor *xr_ = NULL, *xf_ = NULL;
  rows_copy (x0, c->strided, &xr_, &xr);
  rows_copy (x0, c->strided, &xf_, &xf);
  g_autoptr (LbTensor) xr_own = xr_;
  g_autoptr (LbTensor) xf_own = xf_;
  g_autoptr (LbTensor) out = poisoned (2, md);
  if (c->residual)
    assert_op_ok (lb_ops (s)->residual_norm_modulate (s, &xr, y, gate, w, b,
            EPS, sc, sh, out, error));
  else if (c->modulate)
    assert_op_ok (lb_ops (s)->norm_modulate (s, &xr, w, b, EPS, sc, sh, out,
            error));
  else
    assert_op_ok (lb_ops (s)->layer_norm (s, &xr, w, b, EPS, out, error));
  g_autofree uint8_t *qref = g_malloc (MAX (m * d, 1));
  g_autofree float *sref = g_new (float, MAX (m, 1));
  for (int64_t i = 0; i < m; i++)
    lb_quantize_e4m3_row ((const float *) out->data + i * d, d,
        qref + i * d, &sref[i]);

  /* the fused op */
  const int64_t qld = c->strided ? d + 16 : d;
  g_autoptr (LbTensor) qbuf = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { m, qld });
  memset (qbuf->data, 0x7f, lb_tensor_nbytes (qbuf));   /* NaN codes */
  lb_tensor_view_narrow (&q, qbuf, 1, 0, d);
  g_autoptr (LbTensor) sq = poisoned (1, &m);
  assert_op_ok (lb_ops (s)->norm_fp8 (s, &xf, y, gate, w, b, EPS, sc, sh, &q,
          sq, error));

  for (int64_t i = 0; i < m; i++) {
    g_assert_true (same ((uint8_t *) qbuf->data + i * qld, qref + i * d, d));
    /* the bytes past the row are not written */
    for (int64_t j = d; j < qld; j++)
      g_assert_cmpuint (((uint8_t *) qbuf->data)[i * qld + j], ==, 0x7f);
    g_assert_true (same ((float *) xf.data + i * xf.stride[0],
            (float *) xr.data + i * xr.stride[0], d * sizeof (float)));
  }
  g_assert_true (same (sq->data, sref, m * sizeof (float)));
  if (m > 1 && !c->affine && !c->modulate)
    /* an all-zero normalised row takes scale 1 */
    g_assert_cmpfloat (((float *) sq->data)[1], ==, 1.0f);
  if (c->residual && m > 0)
    /* the residual really went in (x is not its initial value) */
    g_assert_false (same (xf.data, x0->data, d * sizeof (float)));
  g_test_message ("norm_fp8 [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]: "
      "codes, scales and x bit-identical to the pair", m, d);
}

static const NormCase norm_cases[] = {
  /* layer_norm (the cross-attention's norm3, with affine), plain */
  {5, 64, TRUE, FALSE, FALSE, FALSE, 0, FALSE, FALSE},
  {4, 33, FALSE, FALSE, FALSE, FALSE, 0, TRUE, TRUE},
  /* norm_modulate (self-attention, head) */
  {7, 96, FALSE, TRUE, FALSE, FALSE, 0, FALSE, FALSE},
  {6, 130, TRUE, TRUE, TRUE, FALSE, 0, TRUE, TRUE},
  {3, 1, FALSE, TRUE, FALSE, FALSE, 0, FALSE, FALSE},
  /* residual_norm_modulate (the FFN's norm) */
  {9, 80, FALSE, TRUE, FALSE, TRUE, 0, FALSE, FALSE},
  {5, 48, TRUE, TRUE, TRUE, TRUE, 1, TRUE, FALSE},
  {4, 40, FALSE, TRUE, FALSE, TRUE, 2, FALSE, TRUE},
  {0, 16, FALSE, TRUE, FALSE, TRUE, 0, FALSE, FALSE},
  /* wide rows, the block's D, many rows */
  {40, 5120, FALSE, TRUE, FALSE, TRUE, 0, FALSE, FALSE},
};

static void
test_norm_pair (void)
{
  LbStream *s = test_stream ();
  for (guint i = 0; i < G_N_ELEMENTS (norm_cases); i++)
    norm_case (s, &norm_cases[i]);
}

/* @x's rows quantised as gemm_fp8 quantises them: codes into @xq (row
 * stride @qld), scales into @sx. */
static void
quantize_rows (const LbTensor * x, uint8_t * xq, int64_t qld, float *sx)
{
  const int64_t m = x->shape[0], k = x->shape[1];
  for (int64_t i = 0; i < m; i++)
    lb_quantize_e4m3_row ((const float *) x->data + i * k, k, xq + i * qld,
        &sx[i]);
}

static void
quantize_weight (const LbTensor * w, LbTensor ** wq, LbTensor ** sw)
{
  const int64_t n = w->shape[0];
  *wq = lb_tensor_new (LB_DTYPE_F8E4M3, 2, w->shape);
  *sw = lb_tensor_new (LB_DTYPE_F32, 1, &n);
  quantize_rows (w, (*wq)->data, w->shape[1], (*sw)->data);
}

static void
gemm_case (LbStream * s, int64_t m, int64_t n, int64_t k, gboolean with_bias,
    float alpha, float beta, int64_t pad)
{
  g_autoptr (LbTensor) x = rand_tensor (2, (const int64_t[2]) { m, k }, -3, 3);
  g_autoptr (LbTensor) w = rand_tensor (2, (const int64_t[2]) { n, k },
      -0.3, 0.3);
  g_autoptr (LbTensor) bias = rand_tensor (1, &n, -1, 1);
  g_autoptr (LbTensor) y0 = rand_tensor (2, (const int64_t[2]) { m, n }, -1, 1);
  LbTensor *wq_, *sw_;
  quantize_weight (w, &wq_, &sw_);
  g_autoptr (LbTensor) wq = wq_;
  g_autoptr (LbTensor) sw = sw_;
  if (m > 1)
    memset ((float *) x->data + k, 0, k * sizeof (float));      /* a zero row */
  /* the codes in a row-strided buffer when @pad */
  g_autoptr (LbTensor) qbuf = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { m, k + pad });
  g_autoptr (LbTensor) sx = lb_tensor_new (LB_DTYPE_F32, 1, &m);
  quantize_rows (x, qbuf->data, k + pad, sx->data);
  LbTensor xq;
  lb_tensor_view_narrow (&xq, qbuf, 1, 0, k);

  g_autoptr (LbTensor) y1 = lb_tensor_new (LB_DTYPE_F32, 2, y0->shape);
  g_autoptr (LbTensor) y2 = lb_tensor_new (LB_DTYPE_F32, 2, y0->shape);
  memcpy (y1->data, y0->data, lb_tensor_nbytes (y0));
  memcpy (y2->data, y0->data, lb_tensor_nbytes (y0));
  const LbTensor *b = with_bias ? bias : NULL;
  assert_op_ok (lb_ops (s)->gemm_fp8 (s, x, wq, sw, b, alpha, beta, y1, error));
  assert_op_ok (lb_ops (s)->gemm_fp8_q (s, &xq, sx, wq, sw, b, alpha, beta,
          y2, error));
  g_assert_true (same (y1->data, y2->data, lb_tensor_nbytes (y1)));
  if (beta != 0.0f && m > 0 && n > 0)
    g_assert_false (same (y1->data, y0->data, lb_tensor_nbytes (y0)));
}

static void
test_gemm_pair (void)
{
  LbStream *s = test_stream ();
  gemm_case (s, 1, 1, 1, TRUE, 1.0f, 0.0f, 0);
  gemm_case (s, 7, 12, 40, TRUE, 1.0f, 0.0f, 0);
  gemm_case (s, 9, 16, 33, FALSE, 0.5f, 0.25f, 16);
  gemm_case (s, 5, 24, 64, TRUE, 1.0f, 1.0f, 3);
  gemm_case (s, 4, 8, 0, TRUE, 1.0f, 0.5f, 0);
  gemm_case (s, 33, 48, 300, TRUE, 0.75f, 0.0f, 4);
}

/* The DiT's chain on one rank: norm_fp8 -> gemm_fp8_q (three GEMMs on one
 * quantised input) is norm_modulate -> gemm_fp8 (each quantising it). */
static void
test_chain (void)
{
  LbStream *s = test_stream ();
  const int64_t m = 12, d = 64, n = 48;
  g_autoptr (LbTensor) x = rand_tensor (2, (const int64_t[2]) { m, d }, -3, 3);
  g_autoptr (LbTensor) sc = rand_tensor (1, &d, -0.5, 0.5);
  g_autoptr (LbTensor) sh = rand_tensor (1, &d, -1, 1);
  g_autoptr (LbTensor) bias = rand_tensor (1, &n, -1, 1);
  g_autoptr (LbTensor) a = poisoned (2, (const int64_t[2]) { m, d });
  g_autoptr (LbTensor) q = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2, a->shape);
  g_autoptr (LbTensor) sq = poisoned (1, &m);
  assert_op_ok (lb_ops (s)->norm_modulate (s, x, NULL, NULL, EPS, sc, sh, a,
          error));
  assert_op_ok (lb_ops (s)->norm_fp8 (s, x, NULL, NULL, NULL, NULL, EPS, sc,
          sh, q, sq, error));
  for (int l = 0; l < 3; l++) {
    g_autoptr (LbTensor) w = rand_tensor (2, (const int64_t[2]) { n, d },
        -0.3, 0.3);
    LbTensor *wq_, *sw_;
    quantize_weight (w, &wq_, &sw_);
    g_autoptr (LbTensor) wq = wq_;
    g_autoptr (LbTensor) sw = sw_;
    g_autoptr (LbTensor) y1 = poisoned (2, (const int64_t[2]) { m, n });
    g_autoptr (LbTensor) y2 = poisoned (2, (const int64_t[2]) { m, n });
    assert_op_ok (lb_ops (s)->gemm_fp8 (s, a, wq, sw, bias, 1.0f, 0.0f, y1,
            error));
    assert_op_ok (lb_ops (s)->gemm_fp8_q (s, q, sq, wq, sw, bias, 1.0f, 0.0f,
            y2, error));
    g_assert_true (same (y1->data, y2->data, lb_tensor_nbytes (y1)));
  }
}

static void
test_errors (void)
{
  LbStream *s = test_stream ();
  const int64_t d = 8;
  g_autoptr (LbTensor) x = rand_tensor (2, (const int64_t[2]) { 4, 8 }, -1, 1);
  g_autoptr (LbTensor) q = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 4, 8 });
  g_autoptr (LbTensor) q7 = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 4, 7 });
  g_autoptr (LbTensor) q32 = rand_tensor (2, (const int64_t[2]) { 4, 8 }, -1,
      1);
  g_autoptr (LbTensor) sq = poisoned (1, (const int64_t[1]) { 4 });
  g_autoptr (LbTensor) sq3 = poisoned (1, (const int64_t[1]) { 3 });
  g_autoptr (LbTensor) sc = rand_tensor (1, &d, -1, 1);
  g_autoptr (LbTensor) sc9 = rand_tensor (1, (const int64_t[1]) { 9 }, -1, 1);
  g_autoptr (LbTensor) y = rand_tensor (2, (const int64_t[2]) { 4, 8 }, -1, 1);

  assert_op_error (lb_ops (s)->norm_fp8 (s, x, NULL, NULL, NULL, NULL, EPS,
          NULL, NULL, q32, sq, error),
      "norm_fp8: q is f32 [4, 8], expected f8e4m3 [4, 8] with unit column "
      "stride");
  assert_op_error (lb_ops (s)->norm_fp8 (s, x, NULL, NULL, NULL, NULL, EPS,
          NULL, NULL, q7, sq, error),
      "norm_fp8: q is f8e4m3 [4, 7], expected f8e4m3 [4, 8] with unit "
      "column stride");
  assert_op_error (lb_ops (s)->norm_fp8 (s, x, NULL, NULL, NULL, NULL, EPS,
          NULL, NULL, NULL, sq, error),
      "norm_fp8: q is NULL, expected f8e4m3 [4, 8] with unit column stride");
  assert_op_error (lb_ops (s)->norm_fp8 (s, x, NULL, NULL, NULL, NULL, EPS,
          NULL, NULL, q, sq3, error),
      "norm_fp8: sq is f32 [3], expected f32 [4] contiguous");
  assert_op_error (lb_ops (s)->norm_fp8 (s, x, NULL, NULL, NULL, NULL, EPS,
          sc, NULL, q, sq, error),
      "norm_fp8: scale and shift must be given together");
  assert_op_error (lb_ops (s)->norm_fp8 (s, x, NULL, sc, NULL, NULL, EPS,
          NULL, NULL, q, sq, error), "norm_fp8: gate is given without y");
  assert_op_error (lb_ops (s)->norm_fp8 (s, x, NULL, NULL, NULL, NULL, EPS,
          sc9, sc9, q, sq, error),
      "norm_fp8: scale is f32 [9], expected f32 [..., 8]");
  assert_op_error (lb_ops (s)->norm_fp8 (s, x, y, sc9, NULL, NULL, EPS,
          NULL, NULL, q, sq, error),
      "norm_fp8: gate is f32 [9], expected f32 [..., 8]");

  g_autoptr (LbTensor) w = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 3, 8 });
  g_autoptr (LbTensor) sw = rand_tensor (1, (const int64_t[1]) { 3 }, 1, 2);
  g_autoptr (LbTensor) out = poisoned (2, (const int64_t[2]) { 4, 3 });
  assert_op_error (lb_ops (s)->gemm_fp8_q (s, x, sq, w, sw, NULL, 1, 0, out,
          error),
      "gemm_fp8_q: x is f32 [4, 8], expected f8e4m3 [M, K] with unit column "
      "stride");
  assert_op_error (lb_ops (s)->gemm_fp8_q (s, q, sq3, w, sw, NULL, 1, 0, out,
          error), "gemm_fp8_q: sx is f32 [3], expected f32 [4] contiguous");
  assert_op_error (lb_ops (s)->gemm_fp8_q (s, q, NULL, w, sw, NULL, 1, 0, out,
          error), "gemm_fp8_q: sx is NULL, expected f32 [4] contiguous");
  assert_op_error (lb_ops (s)->gemm_fp8_q (s, q7, sq, w, sw, NULL, 1, 0, out,
          error),
      "gemm_fp8_q: inner dimensions differ: x [4, 7], w [3, 8] (w is [N, K])");
  assert_op_error (lb_ops (s)->gemm_fp8_q (s, q, sq, w, sq, NULL, 1, 0, out,
          error), "gemm_fp8_q: sw is f32 [4], expected f32 [3] contiguous");
}

/* Both ops on fakedev: directly (round 0), captured (round 1) and
 * replayed on new inputs (rounds 1-3), bit-identical to the CPU. */
static void
test_fakedev (void)
{
  g_autoptr (GError) err = NULL;
  const FakeDevStats st0 = fakedev_stats ();
  LbBackend *be = fakedev_backend ();
  LbStream *ds = be->stream_new (be, 0, &err);
  g_assert_no_error (err);
  LbStream *cs = test_stream ();
  const int64_t m = 11, d = 48, n = 32;
  const int64_t md[2] = { m, d }, mn[2] = { m, n };
  g_autoptr (LbTensor) w = rand_tensor (2, (const int64_t[2]) { n, d }, -1, 1);
  g_autoptr (LbTensor) bias = rand_tensor (1, &n, -1, 1);
  g_autoptr (LbTensor) sc = rand_tensor (2, md, -0.5, 0.5);
  g_autoptr (LbTensor) sh = rand_tensor (1, &d, -1, 1);
  LbTensor *wq_, *sw_;
  quantize_weight (w, &wq_, &sw_);
  g_autoptr (LbTensor) wq = wq_;
  g_autoptr (LbTensor) sw = sw_;
  g_autoptr (LbTensor) dwq = test_upload (ds, wq);
  g_autoptr (LbTensor) dsw = test_upload (ds, sw);
  g_autoptr (LbTensor) db = test_upload (ds, bias);
  g_autoptr (LbTensor) dsc = test_upload (ds, sc);
  g_autoptr (LbTensor) dsh = test_upload (ds, sh);
  g_autoptr (LbTensor) q = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2, md);
  g_autoptr (LbTensor) sq = poisoned (1, &m);
  g_autoptr (LbTensor) dq = test_upload (ds, q);
  g_autoptr (LbTensor) dsq = test_upload (ds, sq);
  g_autoptr (LbTensor) dx = NULL;
  g_autoptr (LbTensor) dr = NULL;
  g_autoptr (LbTensor) dy = NULL;
  LbGraph *graph = NULL;
  for (int round = 0; round < 4; round++) {
    g_autoptr (LbTensor) x = rand_tensor (2, md, -4, 4);
    g_autoptr (LbTensor) r = rand_tensor (2, md, -1, 1);
    g_autoptr (LbTensor) y = rand_tensor (2, mn, -1, 1);
    if (dx == NULL) {
      dx = test_upload (ds, x);
      dr = test_upload (ds, r);
      dy = test_upload (ds, y);
    } else {
      g_assert_true (lb_tensor_upload (ds, dx, x, &err) &&
          lb_tensor_upload (ds, dr, r, &err) &&
          lb_tensor_upload (ds, dy, y, &err));
      g_assert_no_error (err);
    }
    /* the CPU reference below writes x and y in place: the uploads must
     * have read them (LbBackend.copy) */
    g_assert_true (be->stream_synchronize (ds, &err));
    assert_op_ok (lb_ops (cs)->norm_fp8 (cs, x, r, NULL, NULL, NULL, EPS, sc,
            sh, q, sq, error));
    assert_op_ok (lb_ops (cs)->gemm_fp8_q (cs, q, sq, wq, sw, bias, 0.75f,
            0.5f, y, error));
    if (round == 1)
      g_assert_true (be->graph_begin (ds, &err));
    if (round <= 1) {
      g_assert_true (lb_ops (ds)->norm_fp8 (ds, dx, dr, NULL, NULL, NULL, EPS,
              dsc, dsh, dq, dsq, &err));
      g_assert_true (lb_ops (ds)->gemm_fp8_q (ds, dq, dsq, dwq, dsw, db,
              0.75f, 0.5f, dy, &err));
    }
    if (round == 1) {
      graph = be->graph_end (ds, &err);
      g_assert_nonnull (graph);
    }
    if (round >= 1)
      g_assert_true (be->graph_launch (ds, graph, &err));
    g_assert_no_error (err);
    g_autoptr (LbTensor) hx = lb_tensor_new (LB_DTYPE_F32, 2, md);
    g_autoptr (LbTensor) hq = lb_tensor_new (LB_DTYPE_F8E4M3, 2, md);
    g_autoptr (LbTensor) hsq = lb_tensor_new (LB_DTYPE_F32, 1, &m);
    g_autoptr (LbTensor) hy = lb_tensor_new (LB_DTYPE_F32, 2, mn);
    g_assert_true (lb_tensor_download (ds, hx, dx, &err) &&
        lb_tensor_download (ds, hq, dq, &err) &&
        lb_tensor_download (ds, hsq, dsq, &err) &&
        lb_tensor_download (ds, hy, dy, &err));
    g_assert_no_error (err);
    g_assert_true (same (hx->data, x->data, lb_tensor_nbytes (x)));
    g_assert_true (same (hq->data, q->data, lb_tensor_nbytes (q)));
    g_assert_true (same (hsq->data, sq->data, lb_tensor_nbytes (sq)));
    g_assert_true (same (hy->data, y->data, lb_tensor_nbytes (y)));
  }
  be->graph_free (ds, graph);
  /* host codes are refused (wrong device) */
  g_assert_false (lb_ops (ds)->gemm_fp8_q (ds, q, dsq, dwq, dsw, db, 1.0f,
          0.0f, dy, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "gemm_fp8_q: wrong device");
  g_clear_error (&err);
  FakeDevStats st = fakedev_stats ();
  /* the refusal counts the argument and the call */
  g_assert_cmpint (st.bad, ==, st0.bad + 2);
  g_assert_cmpint (st.n_captures, ==, st0.n_captures + 1);
  g_assert_cmpint (st.n_launches, ==, st0.n_launches + 3);
  /* round 0 direct, round 1 recorded, three replays: 4 runs of each */
  g_assert_cmpint (st.n_norm_fp8, ==, st0.n_norm_fp8 + 4);
  g_assert_cmpint (st.n_gemm_fp8_q, ==, st0.n_gemm_fp8_q + 4);
  g_clear_pointer (&dx, lb_tensor_free);
  g_clear_pointer (&dr, lb_tensor_free);
  g_clear_pointer (&dy, lb_tensor_free);
  g_clear_pointer (&dq, lb_tensor_free);
  g_clear_pointer (&dsq, lb_tensor_free);
  g_clear_pointer (&dwq, lb_tensor_free);
  g_clear_pointer (&dsw, lb_tensor_free);
  g_clear_pointer (&db, lb_tensor_free);
  g_clear_pointer (&dsc, lb_tensor_free);
  g_clear_pointer (&dsh, lb_tensor_free);
  be->stream_free (ds);
}

/* The FFN's first fp8 layer: the op pair (gemm_fp8_q with beta 0 into an
 * f32 hidden, gelu_tanh in place, then each row quantised as gemm_fp8
 * quantises its x) against gemm_fp8_gelu_q, codes and row scales byte for
 * byte (@xpad, @ypad: row-strided code views); then the second layer both
 * ways (gemm_fp8 on the f32 hidden, gemm_fp8_q on the codes). */
static void
gelu_case (LbStream * s, int64_t m, int64_t n, int64_t k, gboolean with_bias,
    float alpha, int64_t xpad, int64_t ypad)
{
  const int64_t mn[2] = { m, n }, n2 = 24;
  g_autoptr (LbTensor) x = rand_tensor (2, (const int64_t[2]) { m, k }, -3, 3);
  g_autoptr (LbTensor) w = rand_tensor (2, (const int64_t[2]) { n, k },
      -0.3, 0.3);
  g_autoptr (LbTensor) w2 = rand_tensor (2, (const int64_t[2]) { n2, n },
      -0.3, 0.3);
  g_autoptr (LbTensor) bias = rand_tensor (1, &n, -1, 1);
  g_autoptr (LbTensor) bias2 = rand_tensor (1, &n2, -1, 1);
  LbTensor *wq_, *sw_, *w2q_, *sw2_;
  quantize_weight (w, &wq_, &sw_);
  quantize_weight (w2, &w2q_, &sw2_);
  g_autoptr (LbTensor) wq = wq_;
  g_autoptr (LbTensor) sw = sw_;
  g_autoptr (LbTensor) w2q = w2q_;
  g_autoptr (LbTensor) sw2 = sw2_;
  if (m > 1)
    memset ((float *) x->data + k, 0, k * sizeof (float));      /* a zero row */
  g_autoptr (LbTensor) xbuf = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { m, k + xpad });
  g_autoptr (LbTensor) sx = lb_tensor_new (LB_DTYPE_F32, 1, &m);
  quantize_rows (x, xbuf->data, k + xpad, sx->data);
  LbTensor xq;
  lb_tensor_view_narrow (&xq, xbuf, 1, 0, k);
  const LbTensor *b = with_bias ? bias : NULL;

  /* the pair */
  g_autoptr (LbTensor) h = poisoned (2, mn);
  assert_op_ok (lb_ops (s)->gemm_fp8_q (s, &xq, sx, wq, sw, b, alpha, 0.0f, h,
          error));
  assert_op_ok (lb_ops (s)->gelu_tanh (s, h, h, error));
  g_autofree uint8_t *qref = g_malloc (MAX (m * n, 1));
  g_autofree float *sref = g_new (float, MAX (m, 1));
  quantize_rows (h, qref, n, sref);

  /* the fused op */
  g_autoptr (LbTensor) ybuf = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { m, n + ypad });
  memset (ybuf->data, 0x7f, lb_tensor_nbytes (ybuf));   /* NaN codes */
  LbTensor yq;
  lb_tensor_view_narrow (&yq, ybuf, 1, 0, n);
  g_autoptr (LbTensor) sy = poisoned (1, &m);
  assert_op_ok (lb_ops (s)->gemm_fp8_gelu_q (s, &xq, sx, wq, sw, b, alpha,
          &yq, sy, error));
  for (int64_t i = 0; i < m; i++) {
    const uint8_t *yr = (const uint8_t *) ybuf->data + i * (n + ypad);
    g_assert_true (same (yr, qref + i * n, n));
    for (int64_t j = n; j < n + ypad; j++)
      g_assert_cmpuint (yr[j], ==, 0x7f);
  }
  g_assert_true (same (sy->data, sref, m * sizeof (float)));
  if (m > 0 && k > 0 && alpha != 0.0f)
    /* a real product went through (row 0 is random) */
    g_assert_cmpfloat (((float *) sy->data)[0], !=, 1.0f);
  if (m > 1 && !with_bias)
    /* the zero row: GELU (0) = 0, scale 1, codes 0 */
    g_assert_cmpfloat (((float *) sy->data)[1], ==, 1.0f);

  /* the second layer: gemm_fp8 quantising the f32 hidden, gemm_fp8_q
   * reading the codes */
  g_autoptr (LbTensor) y1 = poisoned (2, (const int64_t[2]) { m, n2 });
  g_autoptr (LbTensor) y2 = poisoned (2, (const int64_t[2]) { m, n2 });
  assert_op_ok (lb_ops (s)->gemm_fp8 (s, h, w2q, sw2, bias2, 1.0f, 0.0f, y1,
          error));
  assert_op_ok (lb_ops (s)->gemm_fp8_q (s, &yq, sy, w2q, sw2, bias2, 1.0f,
          0.0f, y2, error));
  g_assert_true (same (y1->data, y2->data, lb_tensor_nbytes (y1)));
  g_test_message ("gemm_fp8_gelu_q [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
      "] K %" G_GINT64_FORMAT ": codes, scales and the next layer "
      "bit-identical to the pair", m, n, k);
}

static void
test_gelu_pair (void)
{
  LbStream *s = test_stream ();
  gelu_case (s, 1, 16, 16, TRUE, 1.0f, 0, 0);
  gelu_case (s, 7, 48, 40, TRUE, 1.0f, 0, 0);
  gelu_case (s, 9, 33, 64, FALSE, 0.5f, 16, 5);
  gelu_case (s, 33, 96, 300, TRUE, 0.75f, 4, 3);
  /* no product: the GELU of the bias, of zeros */
  gelu_case (s, 5, 24, 0, TRUE, 1.0f, 0, 0);
  gelu_case (s, 4, 16, 32, FALSE, 0.0f, 0, 0);
  gelu_case (s, 0, 16, 16, TRUE, 1.0f, 0, 0);
  /* the 14B model's hidden width (ffn_dim 13824) */
  gelu_case (s, 3, 13824, 64, TRUE, 1.0f, 0, 0);
}

static void
test_gelu_errors (void)
{
  LbStream *s = test_stream ();
  g_autoptr (LbTensor) x = rand_tensor (2, (const int64_t[2]) { 4, 8 }, -1, 1);
  g_autoptr (LbTensor) q = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 4, 8 });
  g_autoptr (LbTensor) sq = poisoned (1, (const int64_t[1]) { 4 });
  g_autoptr (LbTensor) sq3 = poisoned (1, (const int64_t[1]) { 3 });
  g_autoptr (LbTensor) w = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 3, 8 });
  g_autoptr (LbTensor) sw = rand_tensor (1, (const int64_t[1]) { 3 }, 1, 2);
  g_autoptr (LbTensor) y = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 4, 3 });
  g_autoptr (LbTensor) y32 = poisoned (2, (const int64_t[2]) { 4, 3 });
  g_autoptr (LbTensor) y5 = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2,
      (const int64_t[2]) { 4, 5 });

  assert_op_error (lb_ops (s)->gemm_fp8_gelu_q (s, x, sq, w, sw, NULL, 1, y,
          sq, error),
      "gemm_fp8_gelu_q: x is f32 [4, 8], expected f8e4m3 [M, K] with unit "
      "column stride");
  assert_op_error (lb_ops (s)->gemm_fp8_gelu_q (s, q, sq, w, sw, NULL, 1, y32,
          sq, error),
      "gemm_fp8_gelu_q: y is f32 [4, 3], expected f8e4m3 [4, 3] with unit "
      "column stride");
  assert_op_error (lb_ops (s)->gemm_fp8_gelu_q (s, q, sq, w, sw, NULL, 1, y5,
          sq, error),
      "gemm_fp8_gelu_q: y is f8e4m3 [4, 5], expected f8e4m3 [4, 3] with "
      "unit column stride");
  assert_op_error (lb_ops (s)->gemm_fp8_gelu_q (s, q, NULL, w, sw, NULL, 1, y,
          sq, error),
      "gemm_fp8_gelu_q: sx is NULL, expected f32 [4] contiguous");
  assert_op_error (lb_ops (s)->gemm_fp8_gelu_q (s, q, sq, w, sw, NULL, 1, y,
          sq3, error),
      "gemm_fp8_gelu_q: sy is f32 [3], expected f32 [4] contiguous");
  assert_op_error (lb_ops (s)->gemm_fp8_gelu_q (s, q, sq, w, sw, NULL, 1, y,
          NULL, error),
      "gemm_fp8_gelu_q: sy is NULL, expected f32 [4] contiguous");
  assert_op_error (lb_ops (s)->gemm_fp8_gelu_q (s, q, sq, w, sq, NULL, 1, y,
          sq, error),
      "gemm_fp8_gelu_q: sw is f32 [4], expected f32 [3] contiguous");
}

/* gemm_fp8_gelu_q on fakedev: directly (round 0), captured (round 1) and
 * replayed on new inputs (rounds 1-3), bit-identical to the CPU. */
static void
test_gelu_fakedev (void)
{
  g_autoptr (GError) err = NULL;
  const FakeDevStats st0 = fakedev_stats ();
  LbBackend *be = fakedev_backend ();
  LbStream *ds = be->stream_new (be, 0, &err);
  g_assert_no_error (err);
  LbStream *cs = test_stream ();
  const int64_t m = 11, k = 48, n = 64;
  const int64_t mk[2] = { m, k }, mn[2] = { m, n };
  g_autoptr (LbTensor) w = rand_tensor (2, (const int64_t[2]) { n, k }, -1, 1);
  g_autoptr (LbTensor) bias = rand_tensor (1, &n, -1, 1);
  LbTensor *wq_, *sw_;
  quantize_weight (w, &wq_, &sw_);
  g_autoptr (LbTensor) wq = wq_;
  g_autoptr (LbTensor) sw = sw_;
  g_autoptr (LbTensor) dwq = test_upload (ds, wq);
  g_autoptr (LbTensor) dsw = test_upload (ds, sw);
  g_autoptr (LbTensor) db = test_upload (ds, bias);
  g_autoptr (LbTensor) xq = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2, mk);
  g_autoptr (LbTensor) sx = poisoned (1, &m);
  g_autoptr (LbTensor) yq = lb_tensor_new_zeros (LB_DTYPE_F8E4M3, 2, mn);
  g_autoptr (LbTensor) sy = poisoned (1, &m);
  g_autoptr (LbTensor) dxq = test_upload (ds, xq);
  g_autoptr (LbTensor) dsx = test_upload (ds, sx);
  g_autoptr (LbTensor) dyq = test_upload (ds, yq);
  g_autoptr (LbTensor) dsy = test_upload (ds, sy);
  LbGraph *graph = NULL;
  for (int round = 0; round < 4; round++) {
    g_autoptr (LbTensor) x = rand_tensor (2, mk, -4, 4);
    quantize_rows (x, xq->data, k, sx->data);
    g_assert_true (lb_tensor_upload (ds, dxq, xq, &err) &&
        lb_tensor_upload (ds, dsx, sx, &err));
    g_assert_no_error (err);
    assert_op_ok (lb_ops (cs)->gemm_fp8_gelu_q (cs, xq, sx, wq, sw, bias,
            0.75f, yq, sy, error));
    if (round == 1)
      g_assert_true (be->graph_begin (ds, &err));
    if (round <= 1)
      g_assert_true (lb_ops (ds)->gemm_fp8_gelu_q (ds, dxq, dsx, dwq, dsw, db,
              0.75f, dyq, dsy, &err));
    if (round == 1) {
      graph = be->graph_end (ds, &err);
      g_assert_nonnull (graph);
    }
    if (round >= 1)
      g_assert_true (be->graph_launch (ds, graph, &err));
    g_assert_no_error (err);
    g_autoptr (LbTensor) hq = lb_tensor_new (LB_DTYPE_F8E4M3, 2, mn);
    g_autoptr (LbTensor) hsy = lb_tensor_new (LB_DTYPE_F32, 1, &m);
    g_assert_true (lb_tensor_download (ds, hq, dyq, &err) &&
        lb_tensor_download (ds, hsy, dsy, &err));
    g_assert_no_error (err);
    g_assert_true (same (hq->data, yq->data, lb_tensor_nbytes (yq)));
    g_assert_true (same (hsy->data, sy->data, lb_tensor_nbytes (sy)));
  }
  be->graph_free (ds, graph);
  /* host codes are refused (wrong device) */
  g_assert_false (lb_ops (ds)->gemm_fp8_gelu_q (ds, dxq, dsx, dwq, dsw, db,
          1.0f, yq, dsy, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "gemm_fp8_gelu_q: wrong device");
  g_clear_error (&err);
  FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.bad, ==, st0.bad + 2);
  /* round 0 direct, round 1 recorded, three replays: 4 runs */
  g_assert_cmpint (st.n_gemm_fp8_gelu_q, ==, st0.n_gemm_fp8_gelu_q + 4);
  g_clear_pointer (&dxq, lb_tensor_free);
  g_clear_pointer (&dsx, lb_tensor_free);
  g_clear_pointer (&dyq, lb_tensor_free);
  g_clear_pointer (&dsy, lb_tensor_free);
  g_clear_pointer (&dwq, lb_tensor_free);
  g_clear_pointer (&dsw, lb_tensor_free);
  g_clear_pointer (&db, lb_tensor_free);
  be->stream_free (ds);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ops/fp8-inputs/norm-pair", test_norm_pair);
  g_test_add_func ("/ops/fp8-inputs/gemm-pair", test_gemm_pair);
  g_test_add_func ("/ops/fp8-inputs/chain", test_chain);
  g_test_add_func ("/ops/fp8-inputs/errors", test_errors);
  g_test_add_func ("/ops/fp8-inputs/fakedev", test_fakedev);
  g_test_add_func ("/ops/fp8-inputs/gelu-pair", test_gelu_pair);
  g_test_add_func ("/ops/fp8-inputs/gelu-errors", test_gelu_errors);
  g_test_add_func ("/ops/fp8-inputs/gelu-fakedev", test_gelu_fakedev);
  return g_test_run ();
}

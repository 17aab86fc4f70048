/* lingbot-gst: CUDA attention against the CPU oracle.  Exits 77 (skip)
 * when no CUDA device or module is available.
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Head dims 32, 48 (padded in the kernel), 64, 128 (the fused flash
 * kernel) and 384 (the GEMM path of the VAE mid-block); query and key
 * counts that are not multiples of the 64-wide tiles; K/V as strided views
 * of a packed [N, 2, H, hd] buffer (a KV cache); q/out as views with row
 * padding; optional bias [H, Nq, Nk] (with -inf entries) and u8 key mask
 * (including all keys hidden, and Nk = 0: zero rows).
 *
 * Tolerance: 2e-5 relative to max |out|: FP32 throughout, but the CPU
 * tiles keys by 128 and the device by 64 (flash) or not at all (GEMM path),
 * so the online-softmax rescalings round differently.
 */
#include "tests/gpu/gpu-test-util.h"

#define TOL 2e-5

typedef enum {
  MASK_NONE,
  MASK_SOME,
  MASK_ALL,
} MaskKind;

static void
attention_case (int64_t nq, int64_t nk, int64_t nh, int64_t hd,
    gboolean with_bias, MaskKind mask, gboolean strided)
{
  g_autoptr (GError) err = NULL;
  const int qpad = strided ? 3 : 0;
  /* q and out: [Nq, H, hd + qpad] narrowed; k, v: packed [Nk, 2, H, hd] */
  g_autoptr (LbTensor) qp = host_random (3, S (nq, nh, hd + qpad), -2, 2);
  g_autoptr (LbTensor) kvp = host_random (4, S (nk, 2, nh, hd), -2, 2);
  g_autoptr (LbTensor) dqp = to_dev (qp);
  g_autoptr (LbTensor) dkvp = to_dev (kvp);
  LbTensor q, k, v, dq, dk, dv;
  lb_tensor_view_narrow (&q, qp, 2, 0, hd);
  lb_tensor_view_narrow (&dq, dqp, 2, 0, hd);
  lb_tensor_view_select (&k, kvp, 1, 0);
  lb_tensor_view_select (&v, kvp, 1, 1);
  lb_tensor_view_select (&dk, dkvp, 1, 0);
  lb_tensor_view_select (&dv, dkvp, 1, 1);
  g_autoptr (LbTensor) kc = NULL, vc = NULL, dkc = NULL, dvc = NULL;
  if (!strided) {
    /* contiguous k and v */
    kc = lb_tensor_new (LB_DTYPE_F32, 3, k.shape);
    vc = lb_tensor_new (LB_DTYPE_F32, 3, v.shape);
    g_assert_true (lb_tensor_copy_into (kc, &k, NULL));
    g_assert_true (lb_tensor_copy_into (vc, &v, NULL));
    dkc = to_dev (kc);
    dvc = to_dev (vc);
    lb_tensor_view (&k, kc);
    lb_tensor_view (&v, vc);
    lb_tensor_view (&dk, dkc);
    lb_tensor_view (&dv, dvc);
  }

  g_autoptr (LbTensor) bias = NULL, dbias = NULL;
  if (with_bias) {
    bias = host_random (3, S (nh, nq, nk), -3, 3);
    float *b = bias->data;
    for (int64_t i = 0; i < lb_tensor_numel (bias); i += 7)
      b[i] = -INFINITY;
    dbias = to_dev (bias);
  }
  g_autoptr (LbTensor) m = NULL, dm = NULL;
  if (mask != MASK_NONE) {
    m = lb_tensor_new (LB_DTYPE_U8, 1, S (nk));
    guint8 *md = m->data;
    for (int64_t j = 0; j < nk; j++)
      md[j] = mask == MASK_ALL ? 0 : (j % 3 != 1);
    dm = to_dev (m);
  }

  g_autoptr (LbTensor) outp = host_nan (3, S (nq, nh, hd + qpad));
  g_autoptr (LbTensor) doutp = dev_poison (3, S (nq, nh, hd + qpad));
  LbTensor out, dout;
  lb_tensor_view_narrow (&out, outp, 2, 0, hd);
  lb_tensor_view_narrow (&dout, doutp, 2, 0, hd);
  float scale = 1.0f / sqrtf ((float) hd);

  g_assert_true (lb_ops (gctx.cs)->attention (gctx.cs, &q, &k, &v, bias, m,
          scale, &out, &err));
  g_assert_no_error (err);
  g_assert_true (lb_ops (gctx.gs)->attention (gctx.gs, &dq, &dk, &dv, dbias,
          dm, scale, &dout, &err));
  g_assert_no_error (err);
  g_autoptr (LbTensor) hback = to_host (doutp);
  LbTensor got;
  view_like (&got, hback, &dout, doutp);
  g_test_message ("attention Nq=%" G_GINT64_FORMAT " Nk=%" G_GINT64_FORMAT
      " H=%" G_GINT64_FORMAT " hd=%" G_GINT64_FORMAT " bias=%d mask=%d "
      "strided=%d", nq, nk, nh, hd, with_bias, mask, strided);
  compare ("attention", &out, &got, TOL);
  if (mask == MASK_ALL || nk == 0) {
    g_autoptr (LbTensor) c = lb_tensor_new (LB_DTYPE_F32, 3, got.shape);
    g_assert_true (lb_tensor_copy_into (c, &got, NULL));
    const float *d = c->data;
    for (int64_t i = 0; i < lb_tensor_numel (c); i++)
      g_assert_cmpfloat (d[i], ==, 0.0f);
  }
}

static void
test_flash (void)
{
  static const int64_t hds[] = { 32, 48, 64, 128 };
  for (guint i = 0; i < G_N_ELEMENTS (hds); i++) {
    int64_t hd = hds[i];
    attention_case (1, 1, 1, hd, FALSE, MASK_NONE, FALSE);
    attention_case (37, 53, 3, hd, FALSE, MASK_NONE, TRUE);
    attention_case (100, 130, 2, hd, TRUE, MASK_NONE, FALSE);
    attention_case (65, 200, 2, hd, FALSE, MASK_SOME, TRUE);
    attention_case (129, 67, 1, hd, TRUE, MASK_SOME, TRUE);
    attention_case (17, 40, 2, hd, FALSE, MASK_ALL, FALSE);
    attention_case (5, 0, 2, hd, FALSE, MASK_NONE, TRUE);
  }
  /* DiT-like: 40 heads, several key tiles, 1-row and 64-row edges */
  attention_case (257, 1000, 40, 128, FALSE, MASK_NONE, TRUE);
  attention_case (64, 64, 4, 128, FALSE, MASK_NONE, FALSE);
  attention_case (200, 512, 8, 128, FALSE, MASK_SOME, FALSE);
}

static void
test_gemm_path (void)
{
  attention_case (1, 1, 1, 384, FALSE, MASK_NONE, FALSE);
  attention_case (70, 90, 1, 384, FALSE, MASK_NONE, TRUE);
  attention_case (130, 300, 2, 384, TRUE, MASK_SOME, TRUE);
  attention_case (33, 50, 1, 384, FALSE, MASK_ALL, FALSE);
  attention_case (9, 0, 1, 384, FALSE, MASK_NONE, FALSE);
  attention_case (1040, 1040, 1, 384, FALSE, MASK_NONE, FALSE);
  attention_case (20, 30, 2, 200, TRUE, MASK_NONE, TRUE);
}

static void
test_errors (void)
{
  g_autoptr (GError) e1 = NULL;
  g_autoptr (GError) e2 = NULL;
  g_autoptr (LbTensor) q = host_rand (3, S (4, 2, 32));
  g_autoptr (LbTensor) k = host_rand (3, S (6, 3, 32));
  g_autoptr (LbTensor) o = host_rand (3, S (4, 2, 32));
  g_autoptr (LbTensor) dq = to_dev (q);
  g_autoptr (LbTensor) dk = to_dev (k);
  g_autoptr (LbTensor) dout = to_dev (o);
  gboolean c_ok = lb_ops (gctx.cs)->attention (gctx.cs, q, k, k, NULL, NULL,
      1.0f, o, &e1);
  gboolean g_ok = lb_ops (gctx.gs)->attention (gctx.gs, dq, dk, dk, NULL,
      NULL, 1.0f, dout, &e2);
  same_error ("attention heads differ", c_ok, e1, g_ok, e2);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (!gpu_ctx_init ())
    return 77;
  g_test_add_func ("/gpu/attention/flash", test_flash);
  g_test_add_func ("/gpu/attention/gemm-path", test_gemm_path);
  g_test_add_func ("/gpu/attention/errors", test_errors);
  return g_test_run ();
}

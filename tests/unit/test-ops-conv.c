/* lingbot-gst: CPU convolutions against float64 references
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "test-ops-common.h"

/* im2col + sgemm or the direct tiles: K = Cin*kt*kh*kw float products
 * per output (K <= 432 here); ~sqrt(K) * 6e-8 relative, 1e-5 leaves a
 * wide margin. */
#define TOL_CONV 1e-5

/* Element (c, t, r, col) of the causal temporal input [zeros, cache, x]. */
static double
vin (const LbTensor * x, const LbTensor * cache, int64_t zeros, int64_t c,
    int64_t t, int64_t r, int64_t col)
{
  int64_t tc = cache ? cache->shape[1] : 0;
  if (t < zeros)
    return 0.0;
  t -= zeros;
  const LbTensor *src = x;
  if (t < tc)
    src = cache;
  else
    t -= tc;
  int64_t idx[4] = { c, t, r, col };
  return lb_tensor_get (src, idx);
}

static void
check_conv3d (int64_t cin, int64_t cout, int64_t t, int64_t h, int64_t w,
    int64_t kt, int64_t kh, int64_t kw, int64_t tc, int ph, int pw, int sh,
    int sw, gboolean with_bias, gsize scratch_limit)
{
  int64_t xs[4] = { cin, t, h, w }, cs[4] = { cin, tc, h, w };
  int64_t ws[5] = { cout, cin, kt, kh, kw }, bs[1] = { cout };
  g_autoptr (LbTensor) x = rand_tensor (4, xs, -1, 1);
  g_autoptr (LbTensor) cache = tc >= 0 ? rand_tensor (4, cs, -1, 1) : NULL;
  g_autoptr (LbTensor) wt = rand_tensor (5, ws, -0.5, 0.5);
  g_autoptr (LbTensor) bias = rand_tensor (1, bs, -1, 1);
  int64_t tcv = MAX (tc, 0), zeros = MAX (0, kt - 1 - tcv);
  int64_t to = zeros + tcv + t - kt + 1;
  int64_t ho = (h + 2 * ph - kh) / sh + 1, wo = (w + 2 * pw - kw) / sw + 1;
  int64_t ys[4] = { cout, to, ho, wo };
  g_autoptr (LbTensor) y = poisoned (4, ys);

  double *ref = g_new0 (double, MAX (cout * to * ho * wo, 1));
  for (int64_t co = 0; co < cout; co++)
    for (int64_t ot = 0; ot < to; ot++)
      for (int64_t oy = 0; oy < ho; oy++)
        for (int64_t ox = 0; ox < wo; ox++) {
          double acc = with_bias ? ((float *) bias->data)[co] : 0.0;
          for (int64_t ci = 0; ci < cin; ci++)
            for (int64_t dt = 0; dt < kt; dt++)
              for (int64_t dy = 0; dy < kh; dy++)
                for (int64_t dx = 0; dx < kw; dx++) {
                  int64_t iy = oy * sh - ph + dy, ix = ox * sw - pw + dx;
                  if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                    continue;
                  int64_t wi[5] = { co, ci, dt, dy, dx };
                  acc += lb_tensor_get (wt, wi) * vin (x, cache, zeros, ci,
                      ot + dt, iy, ix);
                }
          ref[((co * to + ot) * ho + oy) * wo + ox] = acc;
        }
  lb_cpu_conv_set_scratch_limit (scratch_limit);
  assert_op_ok (lb_cpu_conv3d_causal (test_stream (), x, cache, wt,
          with_bias ? bias : NULL, ph, pw, sh, sw, y, error));
  lb_cpu_conv_set_scratch_limit (0);
  g_autofree char *what = g_strdup_printf ("conv3d k %" G_GINT64_FORMAT "x%"
      G_GINT64_FORMAT "x%" G_GINT64_FORMAT " cache %" G_GINT64_FORMAT
      " pad %d,%d stride %d,%d", kt, kh, kw, tc, ph, pw, sh, sw);
  assert_close (what, y, ref, TOL_CONV);
  g_free (ref);
}

static void
test_conv3d (void)
{
  /* cin, cout, T, H, W, kt, kh, kw, Tc (-1: no cache), ph, pw, sh, sw */
  const int64_t cases[][13] = {
    {3, 5, 4, 7, 9, 3, 3, 3, -1, 1, 1, 1, 1},   /* no cache: 2 zero frames */
    {3, 5, 4, 7, 9, 3, 3, 3, 2, 1, 1, 1, 1},    /* full cache */
    {3, 5, 1, 7, 9, 3, 3, 3, 1, 1, 1, 1, 1},    /* cache shorter than kt-1 */
    {3, 5, 2, 7, 9, 3, 3, 3, 0, 1, 1, 1, 1},    /* empty cache tensor */
    {2, 4, 2, 5, 6, 3, 3, 3, 3, 1, 1, 1, 1},    /* longer cache: T' = T+1 */
    {8, 16, 3, 6, 10, 1, 1, 1, -1, 0, 0, 1, 1}, /* 1x1x1 (direct) */
    {4, 3, 2, 5, 5, 1, 1, 1, 1, 0, 0, 1, 1},    /* 1x1x1 over a cache frame */
    {6, 12, 3, 4, 5, 3, 1, 1, 1, 0, 0, 1, 1},   /* time_conv 3x1x1 */
    {3, 4, 2, 9, 11, 3, 3, 3, -1, 0, 0, 2, 2},  /* stride 2, no padding */
    {3, 4, 2, 8, 7, 2, 3, 5, 1, 1, 2, 2, 1},    /* odd kernel, mixed stride */
    {16, 32, 1, 6, 10, 3, 3, 3, 2, 1, 1, 1, 1}, /* VAE decoder conv1 shape */
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    const int64_t *c = cases[i];
    check_conv3d (c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8],
        (int) c[9], (int) c[10], (int) c[11], (int) c[12], i % 2 == 0, 0);
    check_conv3d (c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8],
        (int) c[9], (int) c[10], (int) c[11], (int) c[12], i % 2 == 1, 0);
  }
  /* scratch limit forcing one and two output rows per block */
  check_conv3d (3, 5, 3, 7, 9, 3, 3, 3, 1, 1, 1, 1, 1, TRUE, 1);
  check_conv3d (3, 5, 3, 7, 9, 3, 3, 3, -1, 1, 1, 1, 1, TRUE, 81 * 9 * 2);
  check_conv3d (3, 4, 2, 9, 11, 3, 3, 3, -1, 1, 0, 2, 2, FALSE, 81 * 5 * 3);
}

/* Decoding in pieces with the Wan cache rule (keep the last 2 frames of
 * the conv input; a 1-frame call prepends the previous cache's last frame)
 * equals one call over the whole sequence (vae_and_distributed_spec.md
 * A.5 "chunking is exact"). */
static void
test_conv3d_streaming (void)
{
  const int64_t cin = 4, cout = 6, h = 5, w = 7, total = 6;
  const int64_t pieces[] = { 1, 1, 3, 1 };
  int64_t xs[4] = { cin, total, h, w }, ws[5] = { cout, cin, 3, 3, 3 };
  int64_t bs[1] = { cout }, ys[4] = { cout, total, h, w };
  g_autoptr (LbTensor) x = rand_tensor (4, xs, -1, 1);
  g_autoptr (LbTensor) wt = rand_tensor (5, ws, -0.5, 0.5);
  g_autoptr (LbTensor) bias = rand_tensor (1, bs, -1, 1);
  g_autoptr (LbTensor) full = poisoned (4, ys);
  assert_op_ok (lb_cpu_conv3d_causal (test_stream (), x, NULL, wt, bias, 1, 1,
          1, 1, full, error));

  g_autoptr (LbTensor) cache = NULL;
  int64_t t0 = 0;
  for (guint p = 0; p < G_N_ELEMENTS (pieces); p++) {
    int64_t n = pieces[p];
    int64_t ps[4] = { cin, n, h, w }, pys[4] = { cout, n, h, w };
    g_autoptr (LbTensor) xp = tensor_new (4, ps);
    g_autoptr (LbTensor) yp = poisoned (4, pys);
    for (int64_t c = 0; c < cin; c++)
      memcpy ((float *) xp->data + c * n * h * w,
          (float *) x->data + (c * total + t0) * h * w, n * h * w * 4);
    assert_op_ok (lb_cpu_conv3d_causal (test_stream (), xp, cache, wt, bias,
            1, 1, 1, 1, yp, error));
    double *ref = g_new (double, cout * n * h * w);
    for (int64_t c = 0; c < cout; c++)
      for (int64_t e = 0; e < n * h * w; e++)
        ref[c * n * h * w + e] =
            ((float *) full->data)[(c * total + t0) * h * w + e];
    assert_close ("conv3d piece", yp, ref, TOL_CONV);
    g_free (ref);

    /* new cache: last 2 frames of [old cache, piece] */
    int64_t tc = cache ? cache->shape[1] : 0, keep = MIN (2, tc + n);
    int64_t ncs[4] = { cin, keep, h, w };
    LbTensor *nc = tensor_new (4, ncs);
    for (int64_t c = 0; c < cin; c++)
      for (int64_t k = 0; k < keep; k++) {
        int64_t v = tc + n - keep + k;  /* index into [cache, piece] */
        const float *src = v < tc ?
            (float *) cache->data + (c * tc + v) * h * w :
            (float *) xp->data + (c * n + v - tc) * h * w;
        memcpy ((float *) nc->data + (c * keep + k) * h * w, src, h * w * 4);
      }
    g_clear_pointer (&cache, lb_tensor_free);
    cache = nc;
    t0 += n;
  }
  g_assert_cmpint (t0, ==, total);
}

static void
check_conv2d (int64_t nb, int64_t cin, int64_t cout, int64_t h, int64_t w,
    int64_t kh, int64_t kw, int ph, int pw, int sh, int sw, gboolean with_bias)
{
  gboolean batched = nb > 0;
  int64_t b = MAX (nb, 1);
  int64_t xs[4] = { b, cin, h, w }, ws[4] = { cout, cin, kh, kw };
  int64_t bs[1] = { cout };
  int64_t ho = (h + 2 * ph - kh) / sh + 1, wo = (w + 2 * pw - kw) / sw + 1;
  int64_t ys[4] = { b, cout, ho, wo };
  g_autoptr (LbTensor) x = batched ? rand_tensor (4, xs, -1, 1) :
      rand_tensor (3, xs + 1, -1, 1);
  g_autoptr (LbTensor) wt = rand_tensor (4, ws, -0.5, 0.5);
  g_autoptr (LbTensor) bias = rand_tensor (1, bs, -1, 1);
  g_autoptr (LbTensor) y = batched ? poisoned (4, ys) : poisoned (3, ys + 1);
  double *ref = g_new0 (double, MAX (b * cout * ho * wo, 1));
  const float *xd = x->data;
  /* the largest sum of |terms| of an output: the scale of the f32
   * rounding (a single-term output whose bias cancels the product would
   * make max |ref| meaningless as one) */
  double mag = 0.0;
  for (int64_t n = 0; n < b; n++)
    for (int64_t co = 0; co < cout; co++)
      for (int64_t oy = 0; oy < ho; oy++)
        for (int64_t ox = 0; ox < wo; ox++) {
          double acc = with_bias ? ((float *) bias->data)[co] : 0.0;
          double abs_sum = fabs (acc);
          for (int64_t ci = 0; ci < cin; ci++)
            for (int64_t dy = 0; dy < kh; dy++)
              for (int64_t dx = 0; dx < kw; dx++) {
                int64_t iy = oy * sh - ph + dy, ix = ox * sw - pw + dx;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                  continue;
                int64_t wi[4] = { co, ci, dy, dx };
                const double t = lb_tensor_get (wt, wi) *
                    xd[((n * cin + ci) * h + iy) * w + ix];
                acc += t;
                abs_sum += fabs (t);
              }
          ref[((n * cout + co) * ho + oy) * wo + ox] = acc;
          mag = MAX (mag, abs_sum);
        }
  assert_op_ok (lb_cpu_conv2d (test_stream (), x, wt, with_bias ? bias : NULL,
          ph, pw, sh, sw, y, error));
  assert_close_scaled ("conv2d", y, ref, TOL_CONV, mag);
  g_free (ref);
}

static void
test_conv2d (void)
{
  for (int wb = 0; wb < 2; wb++) {
    check_conv2d (0, 3, 5, 7, 9, 3, 3, 1, 1, 1, 1, wb);
    check_conv2d (2, 3, 5, 7, 9, 3, 3, 1, 1, 1, 1, wb);
    check_conv2d (0, 4, 4, 9, 11, 3, 3, 0, 0, 2, 2, wb);        /* downsample2d */
    check_conv2d (3, 4, 6, 8, 8, 3, 3, 1, 1, 2, 2, wb);
    check_conv2d (0, 8, 24, 6, 10, 1, 1, 0, 0, 1, 1, wb);       /* to_qkv 1x1 */
    check_conv2d (2, 8, 3, 6, 10, 1, 1, 0, 0, 1, 1, wb);
    check_conv2d (1, 2, 3, 5, 6, 3, 1, 1, 0, 1, 1, wb); /* 3x1 kernel */
    check_conv2d (0, 2, 3, 4, 5, 1, 1, 1, 2, 1, 2, wb); /* 1x1 padded */
    check_conv2d (0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, wb);
  }
}

/* the direct variant's bits do not depend on how the rows are blocked
 * (a rank holding a band of the rows, or a smaller scratch) */
static void
test_direct_blocking (void)
{
  int64_t xs[4] = { 5, 3, 9, 37 }, ws[5] = { 7, 5, 3, 3, 3 }, bs[1] = { 7 };
  int64_t ys[4] = { 7, 3, 9, 37 };
  g_autoptr (LbTensor) x = rand_tensor (4, xs, -1, 1);
  g_autoptr (LbTensor) wt = rand_tensor (5, ws, -0.5, 0.5);
  g_autoptr (LbTensor) bias = rand_tensor (1, bs, -1, 1);
  g_autoptr (LbTensor) whole = poisoned (4, ys);
  lb_cpu_conv_set_direct (1);
  assert_op_ok (lb_cpu_conv3d_causal (test_stream (), x, NULL, wt, bias, 1, 1,
          1, 1, whole, error));
  for (gsize limit = 1; limit <= 5 * 3 * 80 * 4; limit += 5 * 3 * 80) {
    g_autoptr (LbTensor) y = poisoned (4, ys);
    lb_cpu_conv_set_scratch_limit (limit);
    assert_op_ok (lb_cpu_conv3d_causal (test_stream (), x, NULL, wt, bias, 1,
            1, 1, 1, y, error));
    g_assert_cmpmem (y->data, lb_tensor_nbytes (y), whole->data,
        lb_tensor_nbytes (whole));
  }
  lb_cpu_conv_set_scratch_limit (0);
  lb_cpu_conv_set_direct (-1);
}

/* ------------------------------------- bf16 channels-last conv inputs */

/* Rounds the f32 [C, T, H, W] contiguous @f to bf16 values in place and
 * writes them channels-last (NDHWC) to @dst. */
static void
round_to_channels_last (LbTensor * f, uint16_t * dst)
{
  const int64_t C = f->shape[0], T = f->shape[1], H = f->shape[2],
      W = f->shape[3];
  float *v = f->data;
  for (int64_t c = 0; c < C; c++)
    for (int64_t e = 0; e < T * H * W; e++) {
      const uint16_t b = lb_f32_to_bf16 (v[c * T * H * W + e]);
      v[c * T * H * W + e] = lb_bf16_to_f32 (b);
      dst[e * C + c] = b;
    }
}

/* The bf16 channels-last x (and cache) the VAE decoder hands a conv on
 * CUDA, laid out as there: [cache | x] frames in one NDHWC buffer.  The
 * CPU widens them exactly, so y equals, bit for bit, the f32 conv of the
 * same (rounded) values in the usual NCDHW layout. */
static void
check_conv3d_bf16 (int64_t cin, int64_t cout, int64_t t, int64_t h,
    int64_t w, int64_t kt, int64_t khw, int64_t tc, int pad)
{
  int64_t xs[4] = { cin, t, h, w }, cs[4] = { cin, MAX (tc, 0), h, w };
  int64_t ws[5] = { cout, cin, kt, khw, khw }, bs[1] = { cout };
  g_autoptr (LbTensor) x = rand_tensor (4, xs, -2, 2);
  g_autoptr (LbTensor) cache = rand_tensor (4, cs, -2, 2);
  g_autoptr (LbTensor) wt = rand_tensor (5, ws, -0.5, 0.5);
  g_autoptr (LbTensor) bias = rand_tensor (1, bs, -1, 1);
  const int64_t tcv = MAX (tc, 0), frame = h * w * cin;
  int64_t rs[1] = { (tcv + t) * frame };
  g_autoptr (LbTensor) run = lb_tensor_new (LB_DTYPE_BF16, 1, rs);
  uint16_t *r16 = run->data;
  round_to_channels_last (cache, r16);
  round_to_channels_last (x, r16 + tcv * frame);
  const int64_t st[4] = { 1, h * w * cin, w * cin, cin };
  LbTensor x16, c16;
  lb_tensor_view_init (&x16, LB_DTYPE_BF16, r16 + tcv * frame,
      LB_DEVICE_HOST, 4, xs, st);
  lb_tensor_view_init (&c16, LB_DTYPE_BF16, r16, LB_DEVICE_HOST, 4, cs, st);

  const int64_t zeros = MAX (0, kt - 1 - tcv), to = zeros + tcv + t - kt + 1;
  const int64_t ho = h + 2 * pad - khw + 1, wo = w + 2 * pad - khw + 1;
  int64_t ys[4] = { cout, to, ho, wo };
  g_autoptr (LbTensor) yf = poisoned (4, ys);
  g_autoptr (LbTensor) y16 = poisoned (4, ys);
  assert_op_ok (lb_cpu_conv3d_causal (test_stream (), x, tc >= 0 ? cache :
          NULL, wt, bias, pad, pad, 1, 1, yf, error));
  assert_op_ok (lb_cpu_conv3d_causal (test_stream (), &x16, tc >= 0 ? &c16 :
          NULL, wt, bias, pad, pad, 1, 1, y16, error));
  g_assert_cmpmem (y16->data, lb_tensor_nbytes (y16), yf->data,
      lb_tensor_nbytes (yf));
}

static void
test_conv3d_bf16 (void)
{
  /* cin, cout, T, H, W, kt, kh = kw, Tc (-1: no cache), padding */
  const int64_t cases[][9] = {
    {16, 8, 2, 8, 10, 3, 3, 2, 1},      /* a decoder conv on a full cache */
    {16, 8, 2, 8, 10, 3, 3, 2, 0},      /* halo rows already in x */
    {3, 5, 4, 7, 9, 3, 3, -1, 1},       /* no cache: 2 zero frames */
    {4, 6, 1, 5, 7, 3, 3, 1, 1},        /* cache shorter than kt - 1 */
    {6, 5, 2, 4, 5, 3, 3, 0, 1},        /* empty cache */
    {8, 4, 3, 4, 5, 1, 1, -1, 0},       /* 1x1x1 */
    {1, 3, 2, 3, 4, 3, 3, 2, 1},        /* one channel */
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    const int64_t *c = cases[i];
    check_conv3d_bf16 (c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7],
        (int) c[8]);
  }

  /* the layout is checked, and the cache follows x's dtype */
  LbStream *s = test_stream ();
  int64_t xs[4] = { 4, 2, 3, 5 }, ws[5] = { 2, 4, 3, 3, 3 };
  int64_t ys[4] = { 2, 2, 3, 5 }, st[4] = { 1, 60, 20, 4 };
  g_autoptr (LbTensor) wt = rand_tensor (5, ws, -1, 1);
  g_autoptr (LbTensor) y = poisoned (4, ys);
  g_autoptr (LbTensor) ncdhw = lb_tensor_new (LB_DTYPE_BF16, 4, xs);
  g_autoptr (LbTensor) f32 = rand_tensor (4, xs, -1, 1);
  g_autoptr (LbTensor) buf = lb_tensor_new_zeros (LB_DTYPE_BF16, 1,
      (int64_t[1]) { 4 * 2 * 3 * 5 });
  LbTensor cl;
  lb_tensor_view_init (&cl, LB_DTYPE_BF16, buf->data, LB_DEVICE_HOST, 4, xs,
      st);
  assert_op_error (lb_cpu_conv3d_causal (s, ncdhw, NULL, wt, NULL, 1, 1, 1,
          1, y, error), "conv3d_causal: x is bf16 [4, 2, 3, 5] with strides "
      "[30, 15, 5, 1], expected a channels-last bf16 tensor (strides "
      "[1, H*W*C, W*C, C])");
  assert_op_error (lb_cpu_conv3d_causal (s, &cl, f32, wt, NULL, 1, 1, 1, 1, y,
          error), "conv3d_causal: cache is f32 [4, 2, 3, 5], expected bf16 "
      "[4, *, 3, 5]");
  assert_op_error (lb_cpu_conv3d_causal (s, f32, &cl, wt, NULL, 1, 1, 1, 1, y,
          error), "conv3d_causal: cache is bf16 [4, 2, 3, 5], expected f32 "
      "[4, *, 3, 5]");
  /* an all-zero input gives the bias (here none: zeros) */
  assert_op_ok (lb_cpu_conv3d_causal (s, &cl, NULL, wt, NULL, 1, 1, 1, 1, y,
          error));
  for (int64_t i = 0; i < lb_tensor_numel (y); i++)
    g_assert_cmpfloat (((float *) y->data)[i], ==, 0.f);
}

/* each test on im2col + sgemm, on the direct variant, and as chosen by
 * shape */
static void
run_with_direct (gconstpointer data)
{
  const int mode = GPOINTER_TO_INT (data) / 16 - 1;
  static const GTestFunc funcs[] = { test_conv3d, test_conv3d_streaming,
    test_conv2d
  };
  lb_cpu_conv_set_direct (mode);
  funcs[GPOINTER_TO_INT (data) & 15] ();
  lb_cpu_conv_set_direct (-1);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  static const char *const tests[] = { "/ops/conv3d-causal",
    "/ops/conv3d-causal/streaming", "/ops/conv2d"
  };
  static const char *const modes[] = { "by-shape", "im2col", "direct" };
  for (int m = -1; m <= 1; m++)
    for (int i = 0; i < 3; i++) {
      g_autofree char *path = g_strdup_printf ("%s/%s", tests[i],
          modes[m + 1]);
      /* (m + 1) * 16 + i: a left shift of m = -1 is undefined */
      g_test_add_data_func (path, GINT_TO_POINTER ((m + 1) * 16 + i),
          run_with_direct);
    }
  g_test_add_func ("/ops/conv3d-causal/direct-blocking", test_direct_blocking);
  g_test_add_func ("/ops/conv3d-causal/bf16-channels-last", test_conv3d_bf16);
  return g_test_run ();
}

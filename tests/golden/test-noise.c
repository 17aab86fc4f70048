/* lingbot-gst: Philox noise (known answers, split invariance, statistics)
 * and noise read from a fixture
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "golden-common.h"
#include "lingbot/noise.h"
#include "kernels/error.h"

/* Random123 tests/kat_vectors, philox4x32 10 (also in TensorFlow's
 * philox tests): counter, key -> output */
static const guint32 kat[3][10] = {
  {0, 0, 0, 0, 0, 0,
      0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
  {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff,
      0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
  {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0,
      0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1},
};

static void
test_kat (void)
{
  for (int i = 0; i < 3; i++) {
    guint32 out[4];
    lingbot_philox4x32_10 (kat[i], kat[i] + 4, out);
    for (int j = 0; j < 4; j++)
      g_assert_cmphex (out[j], ==, kat[i][6 + j]);
  }
}

static void
test_box_muller_mapping (void)
{
  /* element 4b+l is lane l of block b: check against the documented
   * formula on the raw Philox words */
  const guint64 seed = 0x0123456789abcdefULL;
  const guint32 chunk = 3, stream = lingbot_noise_stream_id
      (LINGBOT_NOISE_RENOISE, 2);
  guint32 ctr[4] = { 5, 0, chunk, stream }, key[2] = {
    (guint32) seed, (guint32) (seed >> 32)
  }, r[4];
  float v[4];

  g_assert_cmphex (stream, ==, 0x10002);
  lingbot_philox4x32_10 (ctr, key, r);
  lingbot_noise_normal_range (seed, chunk, stream, 20, 4, v);
  for (int p = 0; p < 2; p++) {
    double u1 = ((double) r[2 * p] + 1.0) * 2.3283064365386963e-10;
    double u2 = (double) r[2 * p + 1] * 2.3283064365386963e-10;
    double rad = sqrt (-2.0 * log (u1)), th = 6.283185307179586 * u2;
    g_assert_true (v[2 * p] == (float) (rad * cos (th)));
    g_assert_true (v[2 * p + 1] == (float) (rad * sin (th)));
  }
}

static void
test_split_invariance (void)
{
  /* a chunk latent [16, 4, 58, 104] of the 480p session, reduced in the
   * rows for speed: [16, 4, 13, 21] (odd sizes: bands start mid-block) */
  const gint64 outer = 16 * 4, rows = 13, rl = 21, n = outer * rows * rl;
  const guint64 seed = 42;
  const guint32 stream = lingbot_noise_stream_id (LINGBOT_NOISE_INITIAL, 0);
  g_autofree float *full = g_new (float, n);
  g_autofree float *part = g_new (float, n);
  GRand *rnd = g_rand_new_with_seed (7);

  lingbot_noise_normal_range (seed, 1, stream, 0, n, full);

  /* arbitrary contiguous splits */
  for (int trial = 0; trial < 50; trial++) {
    gint64 a = g_rand_int_range (rnd, 0, (gint32) n);
    gint64 b = g_rand_int_range (rnd, (gint32) a, (gint32) n + 1);
    lingbot_noise_normal_range (seed, 1, stream, a, b - a, part);
    g_assert_cmpmem (part, (b - a) * 4, full + a, (b - a) * 4);
  }
  /* row bands of 1..4 ranks */
  for (int ranks = 1; ranks <= 4; ranks++) {
    for (int r = 0; r < ranks; r++) {
      gint64 r0 = rows * r / ranks, r1 = rows * (r + 1) / ranks;
      lingbot_noise_normal_rows (seed, 1, stream, outer, rows, rl, r0, r1,
          part);
      for (gint64 o = 0; o < outer; o++)
        g_assert_cmpmem (part + o * (r1 - r0) * rl, (r1 - r0) * rl * 4,
            full + (o * rows + r0) * rl, (r1 - r0) * rl * 4);
    }
  }
  g_rand_free (rnd);

  /* the same through a LingbotNoise source and tensors */
  {
    g_autoptr (LingbotNoise) src = lingbot_noise_new_philox (seed);
    int64_t fs[4] = { 16, 4, rows, rl }, bs[4] = { 16, 4, 5, rl };
    g_autoptr (LbTensor) ft = lb_tensor_new (LB_DTYPE_F32, 4, fs);
    g_autoptr (LbTensor) bt = lb_tensor_new (LB_DTYPE_F32, 4, bs);
    g_autoptr (GError) err = NULL;
    const float *fd, *bd;

    g_assert_true (lingbot_noise_fill (src, 1, LINGBOT_NOISE_INITIAL, 0, ft,
            rows, 0, &err));
    g_assert_no_error (err);
    g_assert_cmpmem (ft->data, n * 4, full, n * 4);
    g_assert_true (lingbot_noise_fill (src, 1, LINGBOT_NOISE_INITIAL, 0, bt,
            rows, 7, &err));
    fd = ft->data;
    bd = bt->data;
    for (gint64 o = 0; o < outer; o++)
      g_assert_cmpmem (bd + o * 5 * rl, 5 * rl * 4, fd + (o * rows + 7) * rl,
          5 * rl * 4);
    g_assert_false (lingbot_noise_fill (src, 1, LINGBOT_NOISE_INITIAL, 0, bt,
            rows, 9, &err));
    g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  }
}

static void
test_streams_differ (void)
{
  float a[8], b[8];
  const guint32 init = lingbot_noise_stream_id (LINGBOT_NOISE_INITIAL, 0);

  lingbot_noise_normal_range (42, 0, init, 0, 8, a);
  lingbot_noise_normal_range (42, 0, lingbot_noise_stream_id
      (LINGBOT_NOISE_RENOISE, 0), 0, 8, b);
  g_assert_true (memcmp (a, b, sizeof a) != 0);
  lingbot_noise_normal_range (42, 1, init, 0, 8, b);
  g_assert_true (memcmp (a, b, sizeof a) != 0);
  lingbot_noise_normal_range (43, 0, init, 0, 8, b);
  g_assert_true (memcmp (a, b, sizeof a) != 0);
  lingbot_noise_normal_range (42ULL | (1ULL << 40), 0, init, 0, 8, b);
  g_assert_true (memcmp (a, b, sizeof a) != 0);
  lingbot_noise_normal_range (42, 0, init, 0, 8, b);
  g_assert_cmpmem (a, sizeof a, b, sizeof b);
}

static void
test_statistics (void)
{
  const gsize n = 1000000;
  g_autofree float *v = g_new (float, n);
  double sum = 0.0, sq = 0.0, m3 = 0.0, m4 = 0.0, mean, var;
  gsize within1 = 0;

  lingbot_noise_normal_range (42, 0, 0, 0, n, v);
  for (gsize i = 0; i < n; i++) {
    double x = v[i];
    g_assert_true (isfinite (x));
    sum += x;
    sq += x * x;
    m3 += x * x * x;
    m4 += x * x * x * x;
    within1 += fabs (x) < 1.0;
  }
  mean = sum / n;
  var = sq / n - mean * mean;
  golden_report ("noise: mean %.5f var %.5f skew %.5f kurt %.4f P(|x|<1) "
      "%.5f over %" G_GSIZE_FORMAT " samples\n", mean, var, m3 / n, m4 / n,
      (double) within1 / n, n);
  /* standard errors: mean 1e-3, var 1.4e-3, skew 2.4e-3, kurt 1e-2 */
  g_assert_cmpfloat (fabs (mean), <, 0.005);
  g_assert_cmpfloat (fabs (var - 1.0), <, 0.007);
  g_assert_cmpfloat (fabs (m3 / n), <, 0.012);
  g_assert_cmpfloat (fabs (m4 / n - 3.0), <, 0.05);
  g_assert_cmpfloat (fabs ((double) within1 / n - 0.682689), <, 0.003);
}

static void
test_from_file (void)
{
  g_autofree char *path = golden_fixture_path ("scheduler.safetensors");
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotNoise) src = lingbot_noise_new_from_file (path,
      "input.example_x_start", "input.example_noise_{step}", &err);
  g_autoptr (LingbotCheckpoint) ck = golden_open ("scheduler.safetensors");
  int64_t fs[4] = { 16, 2, 2, 3 }, bs[4] = { 16, 2, 1, 3 };
  g_autoptr (LbTensor) ft = lb_tensor_new (LB_DTYPE_F32, 4, fs);
  g_autoptr (LbTensor) bt = lb_tensor_new (LB_DTYPE_F32, 4, bs);
  const float *want;
  const float *bd;

  g_assert_no_error (err);
  for (guint step = 0; step < 3; step++) {
    g_autofree char *name = g_strdup_printf ("input.example_noise_%u", step);
    want = golden_f32 (ck, name, NULL);
    g_assert_true (lingbot_noise_fill (src, 0, LINGBOT_NOISE_RENOISE, step,
            ft, 2, 0, &err));
    g_assert_no_error (err);
    g_assert_cmpmem (ft->data, 192 * 4, want, 192 * 4);
    /* rank band: row 1 of 2 */
    g_assert_true (lingbot_noise_fill (src, 0, LINGBOT_NOISE_RENOISE, step,
            bt, 2, 1, &err));
    bd = bt->data;
    for (int o = 0; o < 32; o++)
      g_assert_cmpmem (bd + o * 3, 12, want + (o * 2 + 1) * 3, 12);
  }
  want = golden_f32 (ck, "input.example_x_start", NULL);
  g_assert_true (lingbot_noise_fill (src, 5, LINGBOT_NOISE_INITIAL, 0, ft, 2,
          0, &err));
  g_assert_cmpmem (ft->data, 192 * 4, want, 192 * 4);

  /* a missing tensor names itself */
  g_assert_false (lingbot_noise_fill (src, 0, LINGBOT_NOISE_RENOISE, 7, ft,
          2, 0, &err));
  g_assert_nonnull (err);
  g_assert_nonnull (strstr (err->message, "input.example_noise_7"));
  g_clear_error (&err);

  {
    g_autoptr (LbTensor) t = lingbot_noise_read_tensor (path,
        "input.example_noise_1", &err);
    g_assert_no_error (err);
    g_assert_cmpint (lb_tensor_numel (t), ==, 192);
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/golden/noise/philox-kat", test_kat);
  g_test_add_func ("/golden/noise/box-muller-mapping", test_box_muller_mapping);
  g_test_add_func ("/golden/noise/split-invariance", test_split_invariance);
  g_test_add_func ("/golden/noise/streams-differ", test_streams_differ);
  g_test_add_func ("/golden/noise/statistics", test_statistics);
  g_test_add_func ("/golden/noise/from-file", test_from_file);
  return g_test_run ();
}

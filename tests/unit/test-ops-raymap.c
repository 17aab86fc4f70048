/* lingbot-gst: the ray_map op (camera control tensor, spec 2.6-2.7)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The CPU op must give exactly the bytes of lingbot_control_pack() (the
 * host path of lingbot/control.c) for any size, intrinsics, band of
 * latent rows and poses; both must equal an independent float32
 * transcription of the formula of kernels/ops.h (same operations, same
 * order) written here, and stay within 1e-6 of a float64 evaluation.
 * Bad sizes and bands fail with exact messages.
 */
#include "test-ops-common.h"
#include "lingbot/control.h"

/* The transcription below must round every product, as the op does. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

/* A random rigid pose: rotation from a random unit quaternion, translation
 * in [-3, 3); with @raw every entry is just uniform in [-2, 2). */
static void
rand_pose (float p[16], gboolean raw)
{
  if (raw) {
    for (int i = 0; i < 16; i++)
      p[i] = (float) g_test_rand_double_range (-2.0, 2.0);
    return;
  }
  double q[4], n = 0.0;
  for (int i = 0; i < 4; i++) {
    q[i] = g_test_rand_double_range (-1.0, 1.0);
    n += q[i] * q[i];
  }
  n = sqrt (n);
  for (int i = 0; i < 4; i++)
    q[i] /= n;
  const double w = q[0], x = q[1], y = q[2], z = q[3];
  const double r[9] = {
    1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
    2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
    2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
  };
  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++)
      p[i * 4 + j] = (float) r[i * 3 + j];
    p[i * 4 + 3] = (float) g_test_rand_double_range (-3.0, 3.0);
  }
  p[12] = p[13] = p[14] = 0.0f;
  p[15] = 1.0f;
}

/* Channel @ch of cell (frame n, latent row ly, column lx) per the op's
 * formula, in float32 (@f64 FALSE: the same operations in the same order
 * as kernels/ops.h says) or float64. */
static double
ref_value (const float *pose, const float k[4], int ch, int ly, int lx,
    gboolean f64)
{
  const int c = ch / 64, r = (ch % 64) / 8, s = ch % 8;
  const int v = ly * 8 + r, u = lx * 8 + s;
  if (c < 3)
    return pose[c * 4 + 3];
  const int i = c - 3;
  if (f64) {
    double x = ((double) u + 0.5 - k[2]) / k[0];
    double y = ((double) v + 0.5 - k[3]) / k[1];
    double nrm = sqrt (x * x + y * y + 1.0);
    return x / nrm * pose[i * 4] + y / nrm * pose[i * 4 + 1] +
        1.0 / nrm * pose[i * 4 + 2];
  }
  float x = ((float) u + 0.5f - k[2]) / k[0];
  float y = ((float) v + 0.5f - k[3]) / k[1];
  float xx = x * x, yy = y * y;
  float acc = 0.0f + xx;
  acc = acc + yy;
  acc = acc + 1.0f;
  float nrm = sqrtf (acc);
  float d0 = x / nrm, d1 = y / nrm, d2 = 1.0f / nrm;
  float p0 = d0 * pose[i * 4], p1 = d1 * pose[i * 4 + 1],
      p2 = d2 * pose[i * 4 + 2];
  float a = 0.0f + p0;
  a = a + p1;
  a = a + p2;
  return a;
}

typedef struct
{
  int width, height, frames, row0, rows;
  float k[4];
  gboolean raw;
} Case;

static void
run_case (const Case * cs)
{
  g_autoptr (GError) err = NULL;
  const int wl = cs->width / 8;
  int64_t pshape[2] = { cs->frames, 16 };
  int64_t yshape[4] = { 384, cs->frames, cs->rows, wl };
  g_autoptr (LbTensor) poses = tensor_new (2, pshape);
  for (int n = 0; n < cs->frames; n++)
    rand_pose ((float *) poses->data + 16 * n, cs->raw);
  g_autoptr (LbTensor) y = poisoned (4, yshape);
  g_autoptr (LbTensor) host = poisoned (4, yshape);

  g_assert_true (lb_ops (test_stream ())->ray_map (test_stream (), poses,
          cs->k[0], cs->k[1], cs->k[2], cs->k[3], cs->width, cs->height,
          cs->row0, y, &err));
  g_assert_no_error (err);
  g_assert_true (lingbot_control_pack (poses->data, (guint) cs->frames,
          cs->k, cs->width, cs->height, cs->row0, cs->row0 + cs->rows,
          host->data, &err));
  g_assert_no_error (err);
  g_assert_true (memcmp (y->data, host->data, lb_tensor_nbytes (y)) == 0);

  /* the formula itself, float32 bit for bit and float64 within 1e-6 */
  const float *got = y->data;
  double maxd = 0.0, maxr = 0.0;
  int64_t i = 0;
  for (int ch = 0; ch < 384; ch++)
    for (int n = 0; n < cs->frames; n++)
      for (int ly = cs->row0; ly < cs->row0 + cs->rows; ly++)
        for (int lx = 0; lx < wl; lx++, i++) {
          const float *p = (const float *) poses->data + 16 * n;
          float f = (float) ref_value (p, cs->k, ch, ly, lx, FALSE);
          if (memcmp (&f, &got[i], sizeof f) != 0)
            g_error ("ray_map %dx%d rows [%d, %d): channel %d frame %d cell "
                "(%d, %d) is %.9g, the formula gives %.9g", cs->width,
                cs->height, cs->row0, cs->row0 + cs->rows, ch, n, ly, lx,
                got[i], f);
          double d = ref_value (p, cs->k, ch, ly, lx, TRUE);
          maxd = MAX (maxd, fabs (d - got[i]));
          maxr = MAX (maxr, fabs (d));
        }
  g_assert_cmpint (i, ==, lb_tensor_numel (y));
  if (i > 0)
    g_assert_cmpfloat (maxd / maxr, <=, 1e-6);
  g_test_message ("ray_map %dx%d, %d frames, rows [%d, %d): %" G_GINT64_FORMAT
      " values equal to lingbot_control_pack, rel_to_max vs float64 %.3g",
      cs->width, cs->height, cs->frames, cs->row0, cs->row0 + cs->rows, i,
      i > 0 ? maxd / maxr : 0.0);
}

static void
test_pack_equal (void)
{
  float kt[4];
  const float k0[4] = { 502.1f, 498.7f, 416.3f, 239.9f };
  lingbot_control_intrinsics_transform (k0, 832, 480, 160, 96, kt);
  const Case cases[] = {
    /* the image-size default intrinsics (spec 2.5), whole map */
    {80, 48, 4, 0, 6, {80.f, 80.f, 40.f, 24.f}, FALSE},
    /* bands, one frame, odd latent widths */
    {72, 64, 1, 3, 2, {72.f, 72.f, 36.f, 32.f}, FALSE},
    {40, 56, 3, 6, 1, {33.3f, 29.1f, 21.7f, 30.2f}, FALSE},
    /* transformed calibration intrinsics, a middle band */
    {160, 96, 4, 4, 5, {kt[0], kt[1], kt[2], kt[3]}, FALSE},
    /* arbitrary matrices and an off-centre principal point */
    {24, 16, 5, 0, 2, {7.5f, 9.25f, -3.0f, 20.0f}, TRUE},
    /* an empty band */
    {16, 16, 2, 2, 0, {16.f, 16.f, 8.f, 8.f}, FALSE},
  };
  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    for (int rep = 0; rep < 3; rep++)
      run_case (&cases[c]);
}

/* Bands stacked along the row axis are the whole map. */
static void
test_bands (void)
{
  g_autoptr (GError) err = NULL;
  const int W = 48, H = 40, C = 2, hl = H / 8, wl = W / 8;
  const float k[4] = { 41.f, 43.f, 23.5f, 19.f };
  int64_t pshape[2] = { C, 16 };
  g_autoptr (LbTensor) poses = tensor_new (2, pshape);
  for (int n = 0; n < C; n++)
    rand_pose ((float *) poses->data + 16 * n, FALSE);
  int64_t fshape[4] = { 384, C, hl, wl };
  g_autoptr (LbTensor) full = poisoned (4, fshape);
  g_assert_true (lb_ops (test_stream ())->ray_map (test_stream (), poses, k[0],
          k[1], k[2], k[3], W, H, 0, full, &err));
  g_assert_no_error (err);
  const int splits[] = { 0, 2, 3, 5 };
  for (int b = 0; b < 3; b++) {
    const int r0 = splits[b], rows = splits[b + 1] - r0;
    int64_t bshape[4] = { 384, C, rows, wl };
    g_autoptr (LbTensor) band = poisoned (4, bshape);
    g_assert_true (lb_ops (test_stream ())->ray_map (test_stream (), poses,
            k[0], k[1], k[2], k[3], W, H, r0, band, &err));
    g_assert_no_error (err);
    for (int64_t ch = 0; ch < 384 * C; ch++)
      g_assert_true (memcmp ((float *) band->data + ch * rows * wl,
              (float *) full->data + (ch * hl + r0) * wl,
              (gsize) rows * wl * sizeof (float)) == 0);
  }
}

static void
expect_error (const LbTensor * poses, int width, int height, int row0,
    LbTensor * y, const char *message)
{
  GError *err = NULL;
  g_assert_false (lb_ops (test_stream ())->ray_map (test_stream (), poses, 10.f,
          10.f, 5.f, 5.f, width, height, row0, y, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpstr (err->message, ==, message);
  g_error_free (err);
}

static void
test_errors (void)
{
  int64_t p4[2] = { 4, 16 }, p12[2] = { 4, 12 };
  int64_t y_ok[4] = { 384, 4, 6, 10 }, y_c3[4] = { 384, 4, 2, 9 },
      y_f3[4] = { 384, 3, 6, 10 }, y_ch[4] = { 6, 4, 6, 10 };
  g_autoptr (LbTensor) poses = tensor_new (2, p4);
  g_autoptr (LbTensor) poses12 = tensor_new (2, p12);
  g_autoptr (LbTensor) y = tensor_new (4, y_ok);
  g_autoptr (LbTensor) y9 = tensor_new (4, y_c3);
  g_autoptr (LbTensor) y3 = tensor_new (4, y_f3);
  g_autoptr (LbTensor) y6 = tensor_new (4, y_ch);

  expect_error (poses12, 80, 48, 0, y,
      "ray_map: rel_poses is f32 [4, 12], expected [*, 16]");
  expect_error (poses, 84, 48, 0, y,
      "ray_map: width 84 and height 48 must be positive multiples of 8");
  expect_error (poses, 80, 44, 0, y,
      "ray_map: width 80 and height 44 must be positive multiples of 8");
  expect_error (poses, 0, 48, 0, y,
      "ray_map: width 0 and height 48 must be positive multiples of 8");
  expect_error (poses, 80, 48, 0, y9,
      "ray_map: y is f32 [384, 4, 2, 9], expected [384, 4, *, 10]");
  expect_error (poses, 80, 48, 0, y3,
      "ray_map: y is f32 [384, 3, 6, 10], expected [384, 4, *, 10]");
  expect_error (poses, 80, 48, 0, y6,
      "ray_map: y is f32 [6, 4, 6, 10], expected [384, 4, *, 10]");
  expect_error (poses, 80, 48, 1, y,
      "ray_map: latent rows [1, 7) outside 0..6");
  expect_error (poses, 80, 48, -1, y,
      "ray_map: latent rows [-1, 5) outside 0..6");
  expect_error (poses, 80, 40, 0, y,
      "ray_map: latent rows [0, 6) outside 0..5");
  /* a strided y is refused */
  LbTensor view;
  lb_tensor_view_narrow (&view, y, 2, 0, 3);
  GError *err = NULL;
  g_assert_false (lb_ops (test_stream ())->ray_map (test_stream (), poses, 10.f,
          10.f, 5.f, 5.f, 80, 48, 0, &view, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_true (g_str_has_prefix (err->message, "ray_map: y "));
  g_error_free (err);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ops/ray-map/pack-equal", test_pack_equal);
  g_test_add_func ("/ops/ray-map/bands", test_bands);
  g_test_add_func ("/ops/ray-map/errors", test_errors);
  return g_test_run ();
}

/* lingbot-gst: the reduced-scale JPEG decode of large reference images
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot_image_jpeg_scale_for()'s rule on a table of sizes, and an
 * 8192x8192 JPEG written here (tests/common/test-jpeg.c, a smooth
 * picture) read from its header and decoded at 1/4: a 2048x2048 buffer
 * whose pixels are the 4x4 block means of the picture within the JPEG's
 * error.  The golden, PIL-exact decode of normal images is
 * tests/golden/test-preprocess.c.
 */
#include <math.h>
#include <string.h>

#include "kernels/error.h"
#include "lingbot/image.h"
#include "test-jpeg.h"

static void
test_scale_for (void)
{
  static const struct
  {
    int iw, ih, w, h, denom;
  } cases[] = {
    /* the golden image at 480p and at the tiny size: under 4096x4096
     * pixels, always the full (PIL-exact) decode */
    {5145, 2894, 832, 464, 1},
    {5145, 2894, 80, 48, 1},
    {4096, 4096, 16, 16, 1},
    /* one pixel more: the coarsest scale leaving twice the output */
    {4097, 4096, 16, 16, 8},
    /* 8192x8192 at 480p (624x624): 1/4 gives 2048 >= 1248, 1/8 1024 */
    {8192, 8192, 624, 624, 4},
    {8192, 8192, 64, 64, 8},
    {8192, 8192, 2048, 2048, 2},
    /* 1/2 would leave less than twice the output: full */
    {8192, 8192, 2064, 2048, 1},
    {8192, 8192, 4096, 4096, 1},
    /* each side counts: 8192x4096 for 832x464 -> 1/4 (2048x1024) */
    {8192, 4096, 832, 464, 4},
    {8192, 2049, 64, 512, 2},
    /* ceil: 8191 / 8 -> 1024 = 2 x 512 */
    {8191, 8191, 512, 512, 8},
    {0, 4096, 64, 64, 1},
    {8192, 8192, 0, 64, 1},
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_test_message ("%dx%d for %dx%d", cases[i].iw, cases[i].ih, cases[i].w,
        cases[i].h);
    g_assert_cmpint (lingbot_image_jpeg_scale_for (cases[i].iw, cases[i].ih,
            cases[i].w, cases[i].h), ==, cases[i].denom);
  }
}

/* the mean of the picture over the 4x4 block of output pixel (x, y) */
static double
block_mean (int x, int y, int c)
{
  int sum = 0;
  for (int dy = 0; dy < 4; dy++)
    for (int dx = 0; dx < 4; dx++)
      sum += lingbot_test_smooth_pixel (4 * x + dx, 4 * y + dy, c);
  return sum / 16.0;
}

static void
test_reduced_decode (void)
{
  g_autoptr (GError) err = NULL;
  gsize len = 0;
  g_autofree guint8 *jpeg = lingbot_test_smooth_jpeg (8192, 8192, 95, &len);
  int w = 0, h = 0;

  g_test_message ("8192x8192 JPEG: %" G_GSIZE_FORMAT " bytes", len);
  g_assert_true (lingbot_image_jpeg_get_size (jpeg, len, &w, &h, &err));
  g_assert_no_error (err);
  g_assert_cmpint (w, ==, 8192);
  g_assert_cmpint (h, ==, 8192);
  g_assert_cmpint (lingbot_image_jpeg_scale_for (w, h, 624, 624), ==, 4);

  g_autoptr (LbTensor) rgb = lingbot_image_decode_jpeg_reduced (jpeg, len, 4,
      &err);
  g_assert_no_error (err);
  /* the decode buffer: 12 MiB, not the full image's 192 */
  g_assert_true (lb_tensor_has_shape (rgb, 3, (int64_t) 2048,
          (int64_t) 2048, (int64_t) 3));
  g_assert_cmpuint (lb_tensor_nbytes (rgb), ==, 12582912);

  /* every pixel within 4 levels of its block's mean (JPEG at quality 95,
   * 4:2:0 chroma, scaled IDCT; measured: at most 3.25, 0.47 on average) */
  const guint8 *px = rgb->data;
  double worst = 0.0, sum = 0.0;
  for (int y = 0; y < 2048; y++)
    for (int x = 0; x < 2048; x++)
      for (int c = 0; c < 3; c++) {
        double e = fabs (px[3 * ((gsize) y * 2048 + x) + c] -
            block_mean (x, y, c));
        worst = MAX (worst, e);
        sum += e;
      }
  g_test_message ("1/4 decode against the 4x4 means: max %.2f, mean %.3f",
      worst, sum / (2048.0 * 2048 * 3));
  g_assert_cmpfloat (worst, <=, 4.0);
  g_assert_cmpfloat (sum / (2048.0 * 2048 * 3), <=, 1.0);

  /* scales libjpeg does by DCT scaling only */
  g_assert_null (lingbot_image_decode_jpeg_reduced (jpeg, len, 3, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==,
      "JPEG: scale 1/3 is not one of 1, 1/2, 1/4, 1/8");
}

/* the header read refuses what the decode refuses, before any decode */
static void
test_header_errors (void)
{
  g_autoptr (GError) err = NULL;
  int w = -1, h = -1;
  gsize len = 0;
  g_autofree guint8 *jpeg = lingbot_test_smooth_jpeg (64, 48, 90, &len);

  g_assert_true (lingbot_image_jpeg_get_size (jpeg, len, &w, &h, &err));
  g_assert_cmpint (w, ==, 64);
  g_assert_cmpint (h, ==, 48);
  /* SOF0's height and width patched to 60000 x 60000 */
  gsize sof = 0;
  for (gsize i = 0; i + 9 < len; i++)
    if (jpeg[i] == 0xff && jpeg[i + 1] == 0xc0) {
      sof = i;
      break;
    }
  g_assert_cmpuint (sof, >, 0);
  jpeg[sof + 5] = jpeg[sof + 7] = 60000 >> 8;
  jpeg[sof + 6] = jpeg[sof + 8] = 60000 & 0xff;
  g_assert_false (lingbot_image_jpeg_get_size (jpeg, len, &w, &h, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, "JPEG: 60000x60000 pixels is more "
      "than an image may have (67108864 pixels, LINGBOT_IMAGE_MAX_PIXELS)");
  g_clear_error (&err);
  g_assert_false (lingbot_image_jpeg_get_size ((const guint8 *) "hello", 5,
          &w, &h, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_FORMAT);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/image/scale-for", test_scale_for);
  g_test_add_func ("/image/reduced-decode", test_reduced_decode);
  g_test_add_func ("/image/header-errors", test_header_errors);
  return g_test_run ();
}

/* lingbot-gst: image preparation against preprocess.safetensors
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * golden README section 4: output-size rule, a bit-exact JPEG decode
 * (channel sums, two 32x32 crops, SHA-256 of the RGB buffer), then the
 * normalised bicubic-resized tensors at 80x48 and 832x464 within 1e-4 of
 * their largest value.  Needs ../shared/data/image.jpg (exit 77 without).
 */
#include "golden-common.h"
#include "lingbot/image.h"
#include "kernels/error.h"

#include <json-glib/json-glib.h>

static LingbotCheckpoint *fx;
static char *image_path;
static LbTensor *rgb;           /* decoded once */

static void
test_output_size (void)
{
  g_autofree double *wh = golden_f64 (fx, "input.image_size_wh", NULL);
  g_autoptr (GError) err = NULL;
  int w, h;

  g_assert_true (lingbot_image_output_size ((int) wh[0], (int) wh[1],
          LINGBOT_IMAGE_MAX_AREA_480P, &w, &h, &err));
  g_assert_cmpint (w, ==, 832);
  g_assert_cmpint (h, ==, 464);
  g_assert_true (lingbot_image_output_size ((int) wh[0], (int) wh[1], 4224.0,
          &w, &h, &err));
  g_assert_cmpint (w, ==, 80);
  g_assert_cmpint (h, ==, 48);
  /* the spec 6.1 quirk: an exactly 832x480 image also gives 464 rows */
  g_assert_true (lingbot_image_output_size (832, 480,
          LINGBOT_IMAGE_MAX_AREA_480P, &w, &h, &err));
  g_assert_cmpint (w, ==, 832);
  g_assert_cmpint (h, ==, 464);
  g_assert_true (lingbot_image_output_size (1280, 720,
          LINGBOT_IMAGE_MAX_AREA_720P, &w, &h, &err));
  g_assert_cmpint (w % 16, ==, 0);
  g_assert_cmpint (h % 16, ==, 0);
  g_assert_false (lingbot_image_output_size (0, 480, 1000.0, &w, &h, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
}

static void
test_decode (void)
{
  const LbTensor *sums = golden_get (fx, "check.rgb_channel_sum");
  const LbTensor *tl = golden_get (fx, "check.rgb_crop_topleft_32");
  const LbTensor *ce = golden_get (fx, "check.rgb_crop_center_32");
  g_autofree double *org = golden_f64 (fx, "check.rgb_crop_center_origin_yx",
      NULL);
  g_autofree double *wh = golden_f64 (fx, "input.image_size_wh", NULL);
  const char *cfg = lingbot_checkpoint_get_metadata_value (fx, "config");
  g_autoptr (JsonParser) p = json_parser_new ();
  g_autofree char *sha = NULL;
  const guint8 *px = rgb->data;
  int64_t h = rgb->shape[0], w = rgb->shape[1];
  gint64 s[3] = { 0, 0, 0 };

  g_assert_cmpint (w, ==, (int64_t) wh[0]);
  g_assert_cmpint (h, ==, (int64_t) wh[1]);
  for (int64_t i = 0; i < h * w; i++)
    for (int c = 0; c < 3; c++)
      s[c] += px[3 * i + c];
  for (int c = 0; c < 3; c++)
    g_assert_cmpint (s[c], ==, ((const int64_t *) sums->data)[c]);
  for (int y = 0; y < 32; y++) {
    g_assert_cmpmem (px + (gsize) y * w * 3, 96,
        (const guint8 *) tl->data + y * 96, 96);
    g_assert_cmpmem (px + ((gsize) (org[0] + y) * w + (gsize) org[1]) * 3, 96,
        (const guint8 *) ce->data + y * 96, 96);
  }

  g_assert_nonnull (cfg);
  g_assert_true (json_parser_load_from_data (p, cfg, -1, NULL));
  sha = g_compute_checksum_for_data (G_CHECKSUM_SHA256, px,
      (gsize) (h * w * 3));
  g_assert_cmpstr (sha, ==,
      json_object_get_string_member (json_node_get_object
          (json_parser_get_root (p)), "rgb_sha256"));
  golden_report ("JPEG decode: %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
      " RGB bit-identical to PIL (sha256 %s)\n", w, h, sha);
}

static void
check_resized (int w, int h, const char *name)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LbTensor) t = lingbot_image_preprocess (rgb, w, h, &err);
  int64_t n;
  const float *want;
  double e, m;

  g_assert_no_error (err);
  g_assert_true (lb_tensor_has_shape (t, 3, (int64_t) 3, (int64_t) h,
          (int64_t) w));
  want = golden_f32 (fx, name, &n);
  g_assert_cmpint (n, ==, lb_tensor_numel (t));
  e = golden_max_abs_diff_f32 (t->data, want, n);
  m = golden_max_abs_f32 (want, n);
  golden_report ("%s: max abs err %.3g, rel to max %.3g\n", name, e, e / m);
  g_assert_cmpfloat (e, <=, 1e-4 * m);
}

static void
test_resize_tiny (void)
{
  check_resized (80, 48, "output.image_tensor_tiny");
}

static void
test_resize_480p (void)
{
  check_resized (832, 464, "output.image_tensor_480p");
}

static void
test_normalize (void)
{
  guint8 px[6] = { 0, 255, 128, 1, 254, 127 };
  int64_t shape[3] = { 1, 2, 3 };
  g_autoptr (LbTensor) in = lb_tensor_new (LB_DTYPE_U8, 3, shape);
  g_autoptr (LbTensor) out = NULL;
  g_autoptr (GError) err = NULL;
  const float *d;

  memcpy (in->data, px, 6);
  out = lingbot_image_normalize (in, &err);
  g_assert_no_error (err);
  g_assert_true (lb_tensor_has_shape (out, 3, (int64_t) 3, (int64_t) 1,
          (int64_t) 2));
  d = out->data;
  g_assert_cmpfloat (d[0], ==, -1.0f);  /* R of pixel 0 */
  g_assert_cmpfloat (d[1], ==, (1.0f / 255.0f - 0.5f) / 0.5f);
  g_assert_cmpfloat (d[2], ==, 1.0f);   /* G of pixel 0 */
  g_assert_cmpfloat (fabs (d[4] - 0.00392157), <, 1e-6);        /* B: 128 */

  /* wrong layout */
  {
    int64_t bad[3] = { 2, 2, 4 };
    g_autoptr (LbTensor) b = lb_tensor_new (LB_DTYPE_U8, 3, bad);
    g_assert_null (lingbot_image_normalize (b, &err));
    g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  }
}

static void
test_bad_files (void)
{
  g_autoptr (GError) err = NULL;
  static const guint8 junk[] = { 0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 'J' };

  g_assert_null (lingbot_image_load_jpeg ("/nonexistent/image.jpg", &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_IO);
  g_clear_error (&err);
  g_assert_null (lingbot_image_decode_jpeg (junk, sizeof junk, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_FORMAT);
  g_clear_error (&err);
  g_assert_null (lingbot_image_decode_jpeg ((const guint8 *) "hello", 5, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_FORMAT);
}

/* A JPEG whose header declares more than LINGBOT_IMAGE_MAX_PIXELS (the
 * project's start image with its SOF0 size patched, as a decompression
 * bomb declares it) is refused from the header, with the exact message */
static void
test_too_many_pixels (void)
{
  g_autofree char *fixture = golden_fixture_path ("x");
  g_autofree char *dir = g_path_get_dirname (fixture);
  g_autofree char *path = g_build_filename (dir, "..", "gpu-start.jpg", NULL);
  g_autofree guint8 *data = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (path, (char **) &data, &len, NULL));
  static const struct
  {
    guint w, h;
    const char *msg;
  } cases[] = {
    {60000, 60000, "JPEG: 60000x60000 pixels is more than an image may "
          "have (67108864 pixels, LINGBOT_IMAGE_MAX_PIXELS)"},
    {8192, 8193, "JPEG: 8192x8193 pixels is more than an image may have "
          "(67108864 pixels, LINGBOT_IMAGE_MAX_PIXELS)"},
  };
  gsize sof = 0;
  for (gsize i = 0; i + 9 < len; i++)
    if (data[i] == 0xff && data[i + 1] == 0xc0) {
      sof = i;
      break;
    }
  g_assert_cmpuint (sof, >, 0);
  for (guint c = 0; c < G_N_ELEMENTS (cases); c++) {
    g_autoptr (GError) err = NULL;
    data[sof + 5] = cases[c].h >> 8;
    data[sof + 6] = cases[c].h & 0xff;
    data[sof + 7] = cases[c].w >> 8;
    data[sof + 8] = cases[c].w & 0xff;
    g_assert_null (lingbot_image_decode_jpeg (data, len, &err));
    g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
    g_assert_cmpstr (err->message, ==, cases[c].msg);
  }
}

static void
test_load (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LbTensor) t = lingbot_image_load (image_path, 4224.0, &err);
  const float *want = golden_f32 (fx, "output.image_tensor_tiny", NULL);

  g_assert_no_error (err);
  g_assert_true (lb_tensor_has_shape (t, 3, (int64_t) 3, (int64_t) 48,
          (int64_t) 80));
  g_assert_cmpfloat (golden_max_abs_diff_f32 (t->data, want, 3 * 48 * 80),
      <=, 1e-4);
}

int
main (int argc, char **argv)
{
  int rc;
  g_autoptr (GError) err = NULL;

  g_test_init (&argc, &argv, NULL);
  image_path = golden_shared_data_path ("image.jpg");
  if (image_path == NULL) {
    g_printerr ("../shared/data/image.jpg not found: skipping\n");
    return 77;
  }
  fx = golden_open ("preprocess.safetensors");
  rgb = lingbot_image_load_jpeg (image_path, &err);
  g_assert_no_error (err);

  g_test_add_func ("/golden/preprocess/output-size", test_output_size);
  g_test_add_func ("/golden/preprocess/jpeg-decode", test_decode);
  g_test_add_func ("/golden/preprocess/normalize", test_normalize);
  g_test_add_func ("/golden/preprocess/resize-tiny", test_resize_tiny);
  g_test_add_func ("/golden/preprocess/resize-480p", test_resize_480p);
  g_test_add_func ("/golden/preprocess/load", test_load);
  g_test_add_func ("/golden/preprocess/bad-files", test_bad_files);
  g_test_add_func ("/golden/preprocess/too-many-pixels", test_too_many_pixels);
  rc = g_test_run ();
  lb_tensor_free (rgb);
  lingbot_checkpoint_unref (fx);
  g_free (image_path);
  return rc;
}

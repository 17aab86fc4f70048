/* lingbot-gst: Wan2.1 VAE against the TeleFuser golden fixture
 * (tests/data/golden/vae_tiny.safetensors, golden README section 5)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Tolerances (golden README 0.2): decoded frames max|c - g| <= 1e-4
 * absolute; encoder outputs max|c - g| <= 1e-4 * max|g|; bytes +-1.
 */
#include "vae-test-common.h"

#define N_CHUNKS 4

static LingbotCheckpoint *ck;
static LingbotVae *vae;
static LbStream *stream;

static void
test_decode_stream (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotVaeDecoder) dec
      = lingbot_vae_decoder_new (vae, stream, 6, 10, 4, &err);
  g_assert_no_error (err);
  int64_t fshape[4] = { 3, 16, 48, 80 };
  g_autoptr (LbTensor) frames = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  guint8 *rgb = g_malloc (48 * 80 * 3);
  double worst = 0;
  for (int k = 0; k < N_CHUNKS; k++) {
    char name[64];
    g_snprintf (name, sizeof name, "input.latent_chunk%d", k);
    const LbTensor *lat = vae_test_get (ck, name);
    g_snprintf (name, sizeof name, "output.decoded_chunk%d", k);
    const LbTensor *want = vae_test_get (ck, name);
    g_snprintf (name, sizeof name, "output.frames_u8_chunk%d", k);
    const LbTensor *want8 = vae_test_get (ck, name);
    int n = 0;
    gboolean ok = lingbot_vae_decoder_decode (dec, lat, frames, &n, &err);
    g_assert_no_error (err);
    g_assert_true (ok);
    g_assert_cmpint (n, ==, k == 0 ? 13 : 16);
    g_assert_cmpint (want->shape[1], ==, n);
    LbTensor got;
    lb_tensor_view_narrow (&got, frames, 1, 0, n);
    double e = vae_test_max_abs_diff (&got, want);
    g_print ("decoded_chunk%d: %d frames, max|c-g| = %.3g\n", k, n, e);
    worst = MAX (worst, e);
    g_assert_cmpfloat (e, <=, 1e-4);

    /* bytes: the reference truncates; +-1 where rounding noise crosses a
     * step */
    int64_t exact = 0, total = 0;
    int maxd = 0;
    for (int f = 0; f < n; f++) {
      g_assert_true (lingbot_vae_frames_to_rgb8 (frames, f, rgb, 80 * 3, &err));
      for (int i = 0; i < 48 * 80 * 3; i++) {
        int64_t idx = (int64_t) f * 48 * 80 * 3 + i;
        int w = (int) lb_tensor_get_flat (want8, idx);
        int d = abs (w - rgb[i]);
        maxd = MAX (maxd, d);
        exact += d == 0;
        total++;
      }
    }
    g_print ("frames_u8_chunk%d: %.4f%% exact, max diff %d\n", k,
        100.0 * exact / total, maxd);
    g_assert_cmpint (maxd, <=, 1);
  }
  g_print ("decode: worst max|c-g| = %.3g (limit 1e-4)\n", worst);
  g_free (rgb);
}

static void
test_condition_stream (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotVaeEncoder) enc
      = lingbot_vae_encoder_new (vae, stream, 48, 80, &err);
  g_assert_no_error (err);
  const LbTensor *image = vae_test_get (ck, "input.image_tensor");
  int64_t yshape[4] = { 20, 4, 6, 10 };
  g_autoptr (LbTensor) y = lb_tensor_new (LB_DTYPE_F32, 4, yshape);
  for (int k = 0; k < N_CHUNKS; k++) {
    char name[64];
    g_snprintf (name, sizeof name, "output.cond_chunk%d", k);
    const LbTensor *want = vae_test_get (ck, name);
    gboolean ok =
        lingbot_vae_encoder_encode_condition (enc, k == 0 ? image : NULL, y,
        &err);
    g_assert_no_error (err);
    g_assert_true (ok);
    double e = vae_test_max_abs_diff (y, want);
    double m = vae_test_max_abs (want);
    g_print ("cond_chunk%d: max|c-g| = %.3g, max|g| = %.3g, rel %.3g\n", k, e,
        m, e / m);
    g_assert_cmpfloat (e, <=, 1e-4 * m);
  }
}

static void
test_image_latent (void)
{
  g_autoptr (GError) err = NULL;
  const LbTensor *image = vae_test_get (ck, "input.image_tensor");
  const LbTensor *want = vae_test_get (ck, "output.image_latent");
  int64_t shape[4] = { 16, 1, 6, 10 };
  g_autoptr (LbTensor) lat = lb_tensor_new (LB_DTYPE_F32, 4, shape);
  gboolean ok = lingbot_vae_encode_image (vae, stream, image, lat, &err);
  g_assert_no_error (err);
  g_assert_true (ok);
  double e = vae_test_max_abs_diff (lat, want);
  double m = vae_test_max_abs (want);
  g_print ("image_latent: max|c-g| = %.3g, rel %.3g\n", e, e / m);
  g_assert_cmpfloat (e, <=, 1e-4 * m);
}

/* The same weights as a Wan2.1_VAE.pth-layout file (torch.save of a plain
 * dict; tests/vae/make_vae_pth.py): identical tensors, identical decode. */
static void
test_pth (void)
{
  g_autoptr (GError) err = NULL;
  const char *root = g_getenv ("LINGBOT_SOURCE_ROOT");
  g_autofree char *path = g_build_filename (root ? root : LINGBOT_SOURCE_ROOT,
      "tests", "vae", "data", "vae_tiny_weights.pth", NULL);
  g_autoptr (LingbotCheckpoint) pk = lingbot_checkpoint_open (path, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_checkpoint_get_format (pk), ==,
      LINGBOT_CHECKPOINT_PTH);
  g_assert_cmpuint (lingbot_checkpoint_get_n_tensors (pk), ==, 194);
  guint n = 0;
  const char *const *names = lingbot_checkpoint_list_tensors (pk, &n);
  for (guint i = 0; i < n; i++) {
    const LbTensor *a = vae_test_get (pk, names[i]);
    const LbTensor *b = vae_test_get (ck, names[i]);
    g_assert_true (lb_tensor_same_shape (a, b));
    g_assert_cmpfloat (vae_test_max_abs_diff (a, b), ==, 0.0);
  }
  g_autoptr (LingbotVae) pv
      = lingbot_vae_new_from_checkpoint (pk, LINGBOT_VAE_BOTH, &err);
  g_assert_no_error (err);
  g_autoptr (LingbotVaeDecoder) dec
      = lingbot_vae_decoder_new (pv, stream, 6, 10, 4, &err);
  g_assert_no_error (err);
  int64_t fshape[4] = { 3, 13, 48, 80 };
  g_autoptr (LbTensor) frames = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_assert_true (lingbot_vae_decoder_decode (dec, vae_test_get (ck,
              "input.latent_chunk0"), frames, NULL, &err));
  g_assert_no_error (err);
  double e = vae_test_max_abs_diff (frames, vae_test_get (ck,
          "output.decoded_chunk0"));
  g_print (".pth decode chunk0: max|c-g| = %.3g\n", e);
  g_assert_cmpfloat (e, <=, 1e-4);
}

static void
test_constants (void)
{
  const LbTensor *mean = vae_test_get (ck, "const.latent_mean");
  const LbTensor *inv = vae_test_get (ck, "const.latent_inv_std");
  const float *m = lingbot_vae_latent_mean ();
  const float *is = lingbot_vae_latent_inv_std ();
  for (int c = 0; c < 16; c++) {
    g_assert_cmpfloat ((float) lb_tensor_get_flat (mean, c), ==, m[c]);
    g_assert_cmpfloat ((float) lb_tensor_get_flat (inv, c), ==, is[c]);
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  ck = vae_test_open_golden ();
  g_autoptr (GError) err = NULL;
  vae = lingbot_vae_new_from_checkpoint (ck, LINGBOT_VAE_BOTH, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_vae_get_dim (vae), ==, 8);
  stream = vae_test_stream ();
  g_test_add_func ("/vae/golden/constants", test_constants);
  g_test_add_func ("/vae/golden/decode-stream", test_decode_stream);
  g_test_add_func ("/vae/golden/condition-stream", test_condition_stream);
  g_test_add_func ("/vae/golden/image-latent", test_image_latent);
  g_test_add_func ("/vae/golden/pth", test_pth);
  int ret = g_test_run ();
  lingbot_vae_unref (vae);
  lingbot_checkpoint_unref (ck);
  stream->backend->stream_free (stream);
  return ret;
}

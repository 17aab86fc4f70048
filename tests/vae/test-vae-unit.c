/* lingbot-gst: VAE error paths, byte conversion, random-weight writer
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "vae-test-common.h"

static LingbotCheckpoint *ck;
static LingbotVae *vae;
static LbStream *stream;

static void
test_bad_latents (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotVaeDecoder) dec
      = lingbot_vae_decoder_new (vae, stream, 6, 10, 4, &err);
  g_assert_no_error (err);
  int64_t fshape[4] = { 3, 16, 48, 80 };
  g_autoptr (LbTensor) frames = lb_tensor_new (LB_DTYPE_F32, 4, fshape);

  int64_t s1[4] = { 15, 4, 6, 10 };
  g_autoptr (LbTensor) l1 = lb_tensor_new_zeros (LB_DTYPE_F32, 4, s1);
  g_assert_false (lingbot_vae_decoder_decode (dec, l1, frames, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_print ("%s\n", err->message);
  g_assert_nonnull (strstr (err->message, "[15, 4, 6, 10]"));
  g_assert_nonnull (strstr (err->message, "expected f32 [16, 1..4, 6, 10]"));
  g_clear_error (&err);

  int64_t s2[4] = { 16, 4, 7, 10 };
  g_autoptr (LbTensor) l2 = lb_tensor_new_zeros (LB_DTYPE_F32, 4, s2);
  g_assert_false (lingbot_vae_decoder_decode (dec, l2, frames, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_nonnull (strstr (err->message, "[16, 4, 7, 10]"));
  g_clear_error (&err);

  int64_t s3[4] = { 16, 5, 6, 10 };
  g_autoptr (LbTensor) l3 = lb_tensor_new_zeros (LB_DTYPE_F32, 4, s3);
  g_assert_false (lingbot_vae_decoder_decode (dec, l3, frames, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_clear_error (&err);

  /* frames too small for a first chunk of 4 (13 frames) */
  int64_t s4[4] = { 16, 4, 6, 10 }, fs[4] = { 3, 12, 48, 80 };
  g_autoptr (LbTensor) l4 = lb_tensor_new_zeros (LB_DTYPE_F32, 4, s4);
  g_autoptr (LbTensor) small = lb_tensor_new (LB_DTYPE_F32, 4, fs);
  g_assert_false (lingbot_vae_decoder_decode (dec, l4, small, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_print ("%s\n", err->message);
  g_assert_nonnull (strstr (err->message, "frames are"));
  g_assert_nonnull (strstr (err->message, ">=13"));
  g_clear_error (&err);

  /* encoder geometry */
  g_assert_null (lingbot_vae_encoder_new (vae, stream, 44, 80, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_clear_error (&err);
  g_autoptr (LingbotVaeEncoder) enc
      = lingbot_vae_encoder_new (vae, stream, 48, 80, &err);
  int64_t ys[4] = { 20, 4, 6, 10 };
  g_autoptr (LbTensor) y = lb_tensor_new (LB_DTYPE_F32, 4, ys);
  g_assert_false (lingbot_vae_encoder_encode_condition (enc, NULL, y, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (err->message, "needs the image"));
  g_clear_error (&err);
}

/* A checkpoint without one tensor: the error names it. */
static void
test_missing_tensor (void)
{
  const char *drop = "decoder.upsamples.7.time_conv.bias";
  guint n = 0;
  const char *const *names = lingbot_checkpoint_list_tensors (ck, &n);
  GPtrArray *keep_names = g_ptr_array_new ();
  GPtrArray *keep = g_ptr_array_new ();
  for (guint i = 0; i < n; i++) {
    if (g_str_has_prefix (names[i], "decoder.")
        || !strcmp (names[i], "conv2.weight")
        || !strcmp (names[i], "conv2.bias")) {
      if (!strcmp (names[i], drop))
        continue;
      g_ptr_array_add (keep_names, (gpointer) names[i]);
      g_ptr_array_add (keep, (gpointer) vae_test_get (ck, names[i]));
    }
  }
  g_autoptr (GError) err = NULL;
  g_autofree char *dir = g_dir_make_tmp ("vae-unit-XXXXXX", &err);
  g_assert_no_error (err);
  g_autofree char *path = g_build_filename (dir, "vae.safetensors", NULL);
  g_assert_true (lingbot_safetensors_write (path,
          (const char *const *) keep_names->pdata,
          (const LbTensor * const *) keep->pdata, keep->len, NULL, &err));
  g_assert_no_error (err);

  g_assert_null (lingbot_vae_load (path, LINGBOT_VAE_DECODER, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_NOT_FOUND);
  g_print ("%s\n", err->message);
  g_assert_nonnull (strstr (err->message, drop));
  g_clear_error (&err);

  /* the decoder half alone loads; asking for the encoder fails */
  g_assert_null (lingbot_vae_load (path, LINGBOT_VAE_ENCODER, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (err->message, "encoder.conv1.weight"));
  g_clear_error (&err);

  g_unlink (path);
  g_rmdir (dir);
  g_ptr_array_unref (keep_names);
  g_ptr_array_unref (keep);
}

static void
test_wrong_shape_tensor (void)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *dir = g_dir_make_tmp ("vae-unit-XXXXXX", &err);
  g_autofree char *path = g_build_filename (dir, "vae.safetensors", NULL);
  guint n = 0;
  const char *const *names = lingbot_checkpoint_list_tensors (ck, &n);
  GPtrArray *nn = g_ptr_array_new (), *tt = g_ptr_array_new ();
  int64_t bad_shape[1] = { 7 };
  g_autoptr (LbTensor) bad = lb_tensor_new_zeros (LB_DTYPE_F32, 1, bad_shape);
  for (guint i = 0; i < n; i++) {
    if (!g_str_has_prefix (names[i], "decoder.")
        && !g_str_has_prefix (names[i], "conv2."))
      continue;
    g_ptr_array_add (nn, (gpointer) names[i]);
    g_ptr_array_add (tt, !strcmp (names[i], "decoder.middle.0.residual.2.bias")
        ? (gpointer) bad : (gpointer) vae_test_get (ck, names[i]));
  }
  g_assert_true (lingbot_safetensors_write (path,
          (const char *const *) nn->pdata, (const LbTensor * const *) tt->pdata,
          tt->len, NULL, &err));
  g_assert_null (lingbot_vae_load (path, LINGBOT_VAE_DECODER, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_print ("%s\n", err->message);
  g_assert_nonnull (strstr (err->message, "decoder.middle.0.residual.2.bias"));
  g_assert_nonnull (strstr (err->message, "[7]"));
  g_assert_nonnull (strstr (err->message, "[32]"));
  g_unlink (path);
  g_rmdir (dir);
  g_ptr_array_unref (nn);
  g_ptr_array_unref (tt);
}

/* TeleFuser's internal names ("model." + official) load too. */
static void
test_model_prefix (void)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *dir = g_dir_make_tmp ("vae-unit-XXXXXX", &err);
  g_autofree char *path = g_build_filename (dir, "vae.safetensors", NULL);
  guint n = 0;
  const char *const *names = lingbot_checkpoint_list_tensors (ck, &n);
  GPtrArray *nn = g_ptr_array_new_with_free_func (g_free);
  GPtrArray *tt = g_ptr_array_new ();
  for (guint i = 0; i < n; i++) {
    if (!g_str_has_prefix (names[i], "decoder.")
        && !g_str_has_prefix (names[i], "conv2."))
      continue;
    g_ptr_array_add (nn, g_strconcat ("model.", names[i], NULL));
    g_ptr_array_add (tt, (gpointer) vae_test_get (ck, names[i]));
  }
  g_assert_true (lingbot_safetensors_write (path,
          (const char *const *) nn->pdata, (const LbTensor * const *) tt->pdata,
          tt->len, NULL, &err));
  g_autoptr (LingbotVae) v = lingbot_vae_load (path, LINGBOT_VAE_DECODER, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_vae_get_dim (v), ==, 8);
  g_assert_cmpint (lingbot_vae_get_parts (v), ==, LINGBOT_VAE_DECODER);
  g_clear_pointer (&v, lingbot_vae_unref);
  g_unlink (path);
  g_rmdir (dir);
  g_ptr_array_unref (nn);
  g_ptr_array_unref (tt);
}

static void
test_u8_rounding (void)
{
  /* floor((x + 1) * 127.5) in float32, clipped (spec C.8) */
  g_assert_cmpint (lingbot_vae_value_to_u8 (-1.f), ==, 0);
  g_assert_cmpint (lingbot_vae_value_to_u8 (1.f), ==, 255);
  g_assert_cmpint (lingbot_vae_value_to_u8 (0.f), ==, 127);     /* 127.5 */
  g_assert_cmpint (lingbot_vae_value_to_u8 (-2.f), ==, 0);
  g_assert_cmpint (lingbot_vae_value_to_u8 (3.f), ==, 255);
  g_assert_cmpint (lingbot_vae_value_to_u8 (NAN), ==, 0);
  g_assert_cmpint (lingbot_vae_value_to_u8 (0.999f), ==, 254);  /* 254.87 */
  g_assert_cmpint (lingbot_vae_value_to_u8 (-0.999f), ==, 0);   /* 0.1275 */
  /* (x + 1) * 127.5 lands just below 1 in float32 (torch gives 0 too):
   * truncation, not rounding */
  g_assert_cmpint (lingbot_vae_value_to_u8 (2.f / 255.f - 1.f), ==, 0);
  /* the float32 product, not the real one, is truncated */
  for (int k = 0; k <= 255; k++) {
    float x = (float) k / 127.5f - 1.f;
    float v = (x + 1.f) * 127.5f;
    g_assert_cmpint (lingbot_vae_value_to_u8 (x), ==, (int) v);
  }
}

static void
test_rgb_i420 (void)
{
  g_autoptr (GError) err = NULL;
  /* 2 frames of 2x4: white, black | red, mid-grey */
  int64_t shape[4] = { 3, 2, 2, 4 };
  g_autoptr (LbTensor) f = lb_tensor_new (LB_DTYPE_F32, 4, shape);
  float *d = f->data;
  for (int c = 0; c < 3; c++)
    for (int t = 0; t < 2; t++)
      for (int y = 0; y < 2; y++)
        for (int x = 0; x < 4; x++) {
          float v;
          if (t == 0)
            v = x < 2 ? 1.f : -1.f;
          else
            v = x < 2 ? (c == 0 ? 1.f : -1.f) : 0.f;
          d[((c * 2 + t) * 2 + y) * 4 + x] = v;
        }
  guint8 rgb[2 * 4 * 3];
  g_assert_true (lingbot_vae_frames_to_rgb8 (f, 1, rgb, 12, &err));
  g_assert_cmpint (rgb[0], ==, 255);
  g_assert_cmpint (rgb[1], ==, 0);
  g_assert_cmpint (rgb[2], ==, 0);
  g_assert_cmpint (rgb[6], ==, 127);
  guint8 yp[8], up[2], vp[2];
  g_assert_true (lingbot_vae_frames_to_i420 (f, 0, yp, 4, up, 2, vp, 2, &err));
  g_assert_cmpint (yp[0], ==, 235);
  g_assert_cmpint (yp[3], ==, 16);
  g_assert_cmpint (yp[4], ==, 235);
  g_assert_cmpint (up[0], ==, 128);
  g_assert_cmpint (vp[0], ==, 128);
  g_assert_cmpint (up[1], ==, 128);
  g_assert_true (lingbot_vae_frames_to_i420 (f, 1, yp, 4, up, 2, vp, 2, &err));
  /* BT.601 red: 82, 90, 240 */
  g_assert_cmpint (yp[0], ==, 82);
  g_assert_cmpint (up[0], ==, 90);
  g_assert_cmpint (vp[0], ==, 240);
  g_assert_cmpint (yp[2], ==, 125);
  /* RGBA: the RGB bytes of the same frame and an opaque alpha */
  guint8 rgba[2 * 4 * 4];
  g_assert_true (lingbot_vae_frames_to_rgba (f, 1, rgba, 16, &err));
  for (int p = 0; p < 8; p++) {
    for (int c = 0; c < 3; c++)
      g_assert_cmpint (rgba[4 * p + c], ==, rgb[3 * p + c]);
    g_assert_cmpint (rgba[4 * p + 3], ==, 255);
  }
  /* NV12: the I420 bytes, Cb and Cr interleaved */
  for (int t = 0; t < 2; t++) {
    guint8 ny[8], nuv[4];
    g_assert_true (lingbot_vae_frames_to_i420 (f, t, yp, 4, up, 2, vp, 2,
            &err));
    g_assert_true (lingbot_vae_frames_to_nv12 (f, t, ny, 4, nuv, 4, &err));
    g_assert_cmpmem (ny, sizeof ny, yp, sizeof yp);
    for (int x = 0; x < 2; x++) {
      g_assert_cmpint (nuv[2 * x], ==, up[x]);
      g_assert_cmpint (nuv[2 * x + 1], ==, vp[x]);
    }
  }
  /* odd sizes have no 4:2:0 layout */
  {
    LbTensor odd;
    g_assert_true (lb_tensor_view_narrow (&odd, f, 3, 0, 3));
    guint8 oy[6], ouv[2];
    g_assert_false (lingbot_vae_frames_to_nv12 (&odd, 0, oy, 3, ouv, 2, &err));
    g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
    g_assert_nonnull (strstr (err->message, "NV12 needs even sizes"));
    g_clear_error (&err);
  }
  /* out-of-range frame index */
  g_assert_false (lingbot_vae_frames_to_rgb8 (f, 2, rgb, 12, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
}

/* lingbot_vae_write_random(): the 194 published keys at a chosen width,
 * loadable, decodes. */
static void
test_random_model (void)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *dir = g_dir_make_tmp ("vae-unit-XXXXXX", &err);
  g_autofree char *path = g_build_filename (dir, "vae4.safetensors", NULL);
  g_assert_true (lingbot_vae_write_random (path, 4, 7, &err));
  g_assert_no_error (err);
  g_autoptr (LingbotCheckpoint) rk = lingbot_checkpoint_open (path, &err);
  g_assert_no_error (err);
  g_assert_cmpuint (lingbot_checkpoint_get_n_tensors (rk), ==, 194);
  /* same key set as the golden (official names) */
  guint n = 0;
  const char *const *names = lingbot_checkpoint_list_tensors (rk, &n);
  for (guint i = 0; i < n; i++)
    g_assert_true (lingbot_checkpoint_has_tensor (ck, names[i]));
  g_autoptr (LingbotVae) v
      = lingbot_vae_new_from_checkpoint (rk, LINGBOT_VAE_BOTH, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_vae_get_dim (v), ==, 4);
  g_autoptr (LingbotVaeDecoder) dec
      = lingbot_vae_decoder_new (v, stream, 2, 3, 2, &err);
  g_assert_no_error (err);
  int64_t ls[4] = { 16, 2, 2, 3 }, fs[4] = { 3, 8, 16, 24 };
  g_autoptr (LbTensor) lat = vae_test_random (4, ls, 3, 2.f);
  g_autoptr (LbTensor) fr = lb_tensor_new (LB_DTYPE_F32, 4, fs);
  int nf = 0;
  g_assert_true (lingbot_vae_decoder_decode (dec, lat, fr, &nf, &err));
  g_assert_no_error (err);
  g_assert_cmpint (nf, ==, 5);
  for (int64_t i = 0; i < 3 * 5 * 16 * 24; i++) {
    float x
        =
        ((float *) fr->data)[(i / (5 * 16 * 24)) * 8 * 16 * 24 +
        i % (5 * 16 * 24)];
    g_assert_true (x >= -1.f && x <= 1.f);
  }
  g_unlink (path);
  g_rmdir (dir);
}

static void
test_frames_for (void)
{
  g_assert_cmpint (lingbot_vae_frames_for_latents (4, TRUE), ==, 13);
  g_assert_cmpint (lingbot_vae_frames_for_latents (4, FALSE), ==, 16);
  g_assert_cmpint (lingbot_vae_frames_for_latents (1, TRUE), ==, 1);
  g_assert_cmpint (lingbot_vae_frames_for_latents (0, FALSE), ==, 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  ck = vae_test_open_golden ();
  g_autoptr (GError) err = NULL;
  vae = lingbot_vae_new_from_checkpoint (ck, LINGBOT_VAE_BOTH, &err);
  g_assert_no_error (err);
  stream = vae_test_stream ();
  g_test_add_func ("/vae/unit/bad-latents", test_bad_latents);
  g_test_add_func ("/vae/unit/missing-tensor", test_missing_tensor);
  g_test_add_func ("/vae/unit/wrong-shape-tensor", test_wrong_shape_tensor);
  g_test_add_func ("/vae/unit/model-prefix", test_model_prefix);
  g_test_add_func ("/vae/unit/u8-rounding", test_u8_rounding);
  g_test_add_func ("/vae/unit/rgb-i420", test_rgb_i420);
  g_test_add_func ("/vae/unit/random-model", test_random_model);
  g_test_add_func ("/vae/unit/frames-for", test_frames_for);
  int ret = g_test_run ();
  lingbot_vae_unref (vae);
  lingbot_checkpoint_unref (ck);
  stream->backend->stream_free (stream);
  return ret;
}

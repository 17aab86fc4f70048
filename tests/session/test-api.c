/* lingbot-gst: the public handles of lingbot.h (lingbot/api.c) against the
 * engine paths they replaced in the elements, on the tiny random model
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * - frames: lingbot_frames_to_rgb(), _rgba(), _i420(), _nv12() on a
 *   session's decoded frames and start frame write the bytes of
 *   lingbot_vae_frames_to_rgb8(), _rgba(), _i420(), _nv12() on the tensor
 *   behind them, padding included, and fail with the same error;
 * - decoder: lingbot_world_new_decoder() + lingbot_decoder_decode() on a
 *   session's latents, read as plain bytes (lingbot_session_read_chunk()),
 *   make the frames of a sharded VAE decoder on the world's worker group
 *   (lingbot_vae_decoder_new_sharded(), what lingbotvaedec built before),
 *   float for float, chunk after chunk;
 * - errors: LINGBOT_ERROR is the engine's domain, with its codes; the
 *   size checks of the bytes entry points; the world's model figures.
 */
#include <string.h>

#include "lingbot/lingbot-private.h"
#include "test-fixture.h"

#define IMG_W 80
#define IMG_H 48
#define OUT_W 80
#define OUT_H 48
#define N_CHUNKS 3

static char *tmpdir, *model_dir, *embeds;
static guint8 image[IMG_W * IMG_H * 3];

static LingbotWorld *
new_world (void)
{
  g_autoptr (GError) err = NULL;
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  LingbotWorld *w;

  wo.devices = "cpu:2";
  wo.model_path = model_dir;
  wo.load_text_encoder = FALSE;
  w = lingbot_world_new (&wo, &err);
  g_assert_no_error (err);
  return w;
}

static LingbotSession *
new_session (LingbotWorld * w)
{
  g_autoptr (GError) err = NULL;
  LingbotSessionOptions o = LINGBOT_SESSION_OPTIONS_INIT;
  LingbotSession *s;

  o.prompt_embeds_path = embeds;
  o.image_rgb = image;
  o.image_width = IMG_W;
  o.image_height = IMG_H;
  o.image_stride = IMG_W * 3;
  o.width = OUT_W;
  o.height = OUT_H;
  o.seed = 5;
  o.frames = 13 + 16 * (N_CHUNKS - 1);
  s = lingbot_session_new (w, &o, &err);
  g_assert_no_error (err);
  return s;
}

/* one frame through the public function and the engine's, into planes
 * padded past each row and pre-filled: every byte must agree */
static void
check_frame (const LingbotFrames * frames, int i)
{
  const LbTensor *t = lingbot_frames_tensor (frames);
  const int w = lingbot_frames_get_width (frames);
  const int h = lingbot_frames_get_height (frames);
  const gsize pad = 7;
  const gsize rgb_stride = 3 * (gsize) w + pad, rgba_stride = 4 * (gsize) w
      + pad, y_stride = (gsize) w + pad, c_stride = (gsize) w / 2 + pad,
      uv_stride = (gsize) w + pad;
  const gsize rgb_n = rgb_stride * h, rgba_n = rgba_stride * h;
  const gsize y_n = y_stride * h, c_n = c_stride * (h / 2);
  const gsize uv_n = uv_stride * (h / 2);
  g_autofree guint8 *a = g_malloc (rgba_n), *b = g_malloc (rgba_n);
  g_autofree guint8 *ay = g_malloc (y_n), *by = g_malloc (y_n);
  g_autofree guint8 *au = g_malloc (uv_n), *bu = g_malloc (uv_n);
  g_autofree guint8 *av = g_malloc (c_n), *bv = g_malloc (c_n);
  g_autoptr (GError) err = NULL;

  memset (a, 0xa5, rgba_n);
  memset (b, 0xa5, rgba_n);
  g_assert_true (lingbot_frames_to_rgb (frames, i, a, rgb_stride, &err));
  g_assert_no_error (err);
  g_assert_true (lingbot_vae_frames_to_rgb8 (t, i, b, rgb_stride, &err));
  g_assert_cmpmem (a, rgb_n, b, rgb_n);

  memset (a, 0x5a, rgba_n);
  memset (b, 0x5a, rgba_n);
  g_assert_true (lingbot_frames_to_rgba (frames, i, a, rgba_stride, &err));
  g_assert_no_error (err);
  g_assert_true (lingbot_vae_frames_to_rgba (t, i, b, rgba_stride, &err));
  g_assert_cmpmem (a, rgba_n, b, rgba_n);

  memset (ay, 1, y_n);
  memset (by, 1, y_n);
  memset (au, 2, uv_n);
  memset (bu, 2, uv_n);
  memset (av, 3, c_n);
  memset (bv, 3, c_n);
  g_assert_true (lingbot_frames_to_i420 (frames, i, ay, y_stride, au,
          c_stride, av, c_stride, &err));
  g_assert_no_error (err);
  g_assert_true (lingbot_vae_frames_to_i420 (t, i, by, y_stride, bu,
          c_stride, bv, c_stride, &err));
  g_assert_cmpmem (ay, y_n, by, y_n);
  g_assert_cmpmem (au, c_n, bu, c_n);
  g_assert_cmpmem (av, c_n, bv, c_n);

  memset (ay, 4, y_n);
  memset (by, 4, y_n);
  memset (au, 5, uv_n);
  memset (bu, 5, uv_n);
  g_assert_true (lingbot_frames_to_nv12 (frames, i, ay, y_stride, au,
          uv_stride, &err));
  g_assert_no_error (err);
  g_assert_true (lingbot_vae_frames_to_nv12 (t, i, by, y_stride, bu,
          uv_stride, &err));
  g_assert_cmpmem (ay, y_n, by, y_n);
  g_assert_cmpmem (au, uv_n, bu, uv_n);
}

/* a plane stride one byte short of a row: the documented
 * LINGBOT_ERROR_SHAPE, and not a byte written (the rows would overlap, and
 * a buffer of stride x height bytes would be overrun) */
static void
expect_short_stride (gboolean ok, GError ** err, const char *what,
    const guint8 * buf, gsize n)
{
  g_assert_false (ok);
  g_assert_error (*err, LINGBOT_ERROR, LINGBOT_ERROR_SHAPE);
  g_assert_nonnull (strstr ((*err)->message, what));
  g_clear_error (err);
  for (gsize k = 0; k < n; k++)
    g_assert_cmpint (buf[k], ==, 0xee);
}

static void
check_short_strides (const LingbotFrames * f)
{
  g_autoptr (GError) err = NULL;
  const gsize w = OUT_W, h = OUT_H;
  const gsize n = 4 * w * h;
  g_autofree guint8 *a = g_malloc (n), *b = g_malloc (n), *c = g_malloc (n);

  memset (a, 0xee, n);
  memset (b, 0xee, n);
  memset (c, 0xee, n);
  expect_short_stride (lingbot_frames_to_rgb (f, 0, a, 3 * w - 1, &err),
      &err, "RGB row stride", a, n);
  expect_short_stride (lingbot_frames_to_rgba (f, 0, a, 4 * w - 1, &err),
      &err, "RGBA row stride", a, n);
  expect_short_stride (lingbot_frames_to_i420 (f, 0, a, w - 1, b, w / 2, c,
          w / 2, &err), &err, "I420 Y row stride", a, n);
  expect_short_stride (lingbot_frames_to_i420 (f, 0, a, w, b, w / 2 - 1, c,
          w / 2, &err), &err, "I420 U row stride", b, n);
  expect_short_stride (lingbot_frames_to_i420 (f, 0, a, w, b, w / 2, c,
          w / 2 - 1, &err), &err, "I420 V row stride", c, n);
  expect_short_stride (lingbot_frames_to_nv12 (f, 0, a, w - 1, b, w, &err),
      &err, "NV12 Y row stride", a, n);
  expect_short_stride (lingbot_frames_to_nv12 (f, 0, a, w, b, w - 1, &err),
      &err, "NV12 UV row stride", b, n);
  /* the engine's functions behind them refuse the same */
  expect_short_stride (lingbot_vae_frames_to_rgb8 (lingbot_frames_tensor (f),
          0, a, 3 * w - 1, &err), &err, "RGB row stride", a, n);
  /* exactly a row is enough */
  g_assert_true (lingbot_frames_to_rgb (f, 0, a, 3 * w, &err));
  g_assert_no_error (err);
  g_assert_true (lingbot_frames_to_nv12 (f, 0, a, w, b, w, &err));
  g_assert_no_error (err);
  g_assert_true (lingbot_frames_to_i420 (f, 0, a, w, b, w / 2, c, w / 2, &err));
  g_assert_no_error (err);
}

static void
test_frames (void)
{
  g_autoptr (GError) err = NULL, err2 = NULL;
  g_autoptr (LingbotWorld) w = new_world ();
  g_autoptr (LingbotSession) s = new_session (w);
  const LingbotFrames *f, *still;
  guint8 px[3 * OUT_W];
  int n = 0;

  still = lingbot_session_get_start_frames (s);
  g_assert_cmpint (lingbot_frames_get_count (still), ==, 1);
  g_assert_cmpint (lingbot_frames_get_width (still), ==, OUT_W);
  g_assert_cmpint (lingbot_frames_get_height (still), ==, OUT_H);
  check_frame (still, 0);

  f = lingbot_session_get_frames (s);
  g_assert_cmpint (lingbot_frames_get_count (f), ==, 16);
  g_assert_cmpint (lingbot_frames_get_width (f), ==, OUT_W);
  g_assert_cmpint (lingbot_frames_get_height (f), ==, OUT_H);
  for (int c = 0; c < 2; c++) {
    g_assert_true (lingbot_session_generate (s, c ? LINGBOT_KEY_D : 0, NULL,
            &err));
    g_assert_no_error (err);
    g_assert_true (lingbot_session_decode (s, NULL, &n, NULL, &err));
    g_assert_no_error (err);
    g_assert_cmpint (n, ==, c ? 16 : 13);
    g_assert_true (lingbot_session_get_frames (s) == f);
    for (int i = 0; i < n; i++)
      check_frame (f, i);
  }

  /* a frame out of range: the engine's error, in the public domain */
  g_assert_false (lingbot_frames_to_rgb (f, 16, px, 0, &err));
  g_assert_error (err, LINGBOT_ERROR, LINGBOT_ERROR_SHAPE);
  g_assert_false (lingbot_vae_frames_to_rgb8 (lingbot_frames_tensor (f), 16,
          px, 0, &err2));
  g_assert_cmpstr (err->message, ==, err2->message);
  g_clear_error (&err);

  check_short_strides (f);
}

/* the frames of the engine's sharded decoder on the world's group, as
 * lingbotvaedec made them before, for latents given as bytes */
typedef struct
{
  LingbotVaeDecoder *dec;
  LbTensor *frames;
} OldDecoder;

static void
test_decoder (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotWorld) w = new_world ();
  g_autoptr (LingbotSession) s = new_session (w);
  const int C = lingbot_session_get_chunk_frames (s);
  const int lh = lingbot_session_get_latent_height (s);
  const int lw = lingbot_session_get_latent_width (s);
  const gsize bytes = lingbot_session_get_chunk_bytes (s);
  g_autoptr (LingbotDecoder) dec = NULL;
  const LingbotFrames *frames;
  OldDecoder old;
  int64_t fshape[4] = { 3, 4 * C, (int64_t) lh * 8, (int64_t) lw * 8 };
  int64_t lshape[4] = { 16, C, lh, lw }, lstride[4];

  g_assert_cmpuint (bytes, ==, (gsize) 16 * C * lh * lw * sizeof (float));
  g_assert_cmpint (lh, ==, OUT_H / LINGBOT_LATENT_STRIDE);
  g_assert_cmpint (lw, ==, OUT_W / LINGBOT_LATENT_STRIDE);
  dec = lingbot_world_new_decoder (w, lh, lw, C, &err);
  g_assert_no_error (err);
  frames = lingbot_decoder_get_frames (dec);
  g_assert_cmpint (lingbot_frames_get_count (frames), ==, 4 * C);
  g_assert_cmpint (lingbot_frames_get_width (frames), ==, OUT_W);
  g_assert_cmpint (lingbot_frames_get_height (frames), ==, OUT_H);

  old.dec = lingbot_vae_decoder_new_sharded (lingbot_world_get_vae (w),
      lingbot_world_get_group (w), lh, lw, C, &err);
  g_assert_no_error (err);
  old.frames = lb_tensor_new_zeros (LB_DTYPE_F32, 4, fshape);

  for (int c = 0; c < N_CHUNKS; c++) {
    g_autofree guint8 *lat = g_malloc (bytes);
    g_autoptr (LingbotLatents) l = NULL;
    const LbTensor *t;
    LbTensor view;
    int n_new = -1, n_old = -1;

    g_assert_true (lingbot_session_generate (s, c == 1 ? LINGBOT_KEY_W : 0,
            NULL, &err));
    g_assert_no_error (err);
    /* what lingbotgen pushes as a plain latent buffer */
    g_assert_true (lingbot_session_read_chunk (s, (guint64) c, lat, bytes,
            &err));
    g_assert_no_error (err);
    g_assert_cmpmem (lat, bytes, lingbot_session_get_latents_tensor (s)->data,
        bytes);
    lingbot_session_release_chunk (s, (guint64) c);

    l = lingbot_latents_new_wrapped (lat, bytes, C, lh, lw, &err);
    g_assert_no_error (err);
    g_assert_cmpint (lingbot_latents_get_n_frames (l), ==, C);
    g_assert_cmpint (lingbot_latents_get_height (l), ==, lh);
    g_assert_cmpint (lingbot_latents_get_width (l), ==, lw);
    g_assert_true (lingbot_decoder_decode (dec, l, &n_new, &err));
    g_assert_no_error (err);

    lb_contiguous_strides (4, lshape, lstride);
    lb_tensor_view_init (&view, LB_DTYPE_F32, lat, LB_DEVICE_HOST, 4, lshape,
        lstride);
    g_assert_true (lingbot_vae_decoder_decode (old.dec, &view, old.frames,
            &n_old, &err));
    g_assert_no_error (err);

    g_assert_cmpint (n_new, ==, c ? 4 * C : 4 * C - 3);
    g_assert_cmpint (n_new, ==, n_old);
    t = lingbot_frames_tensor (frames);
    for (int ch = 0; ch < 3; ch++) {
      const gsize plane = (gsize) n_new * fshape[2] * fshape[3];
      const float *a = (const float *) t->data + ch * t->stride[0];
      const float *b = (const float *) old.frames->data +
          ch * old.frames->stride[0];

      g_assert_cmpmem (a, plane * sizeof (float), b, plane * sizeof (float));
    }
    /* and they are pictures, not a buffer left as it was */
    g_assert_true (((const float *) t->data)[0] != 0.0f ||
        ((const float *) t->data)[1] != 0.0f);
  }
  lingbot_vae_decoder_free (old.dec);
  lb_tensor_free (old.frames);
}

static void
test_errors (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotWorld) w = new_world ();
  g_autoptr (LingbotSession) s = new_session (w);
  LingbotPrecision p = (LingbotPrecision) 99;
  float lat[16 * 8 * 8];
  guint8 small[10];

  /* one domain, the same codes */
  g_assert_cmpuint (LINGBOT_ERROR, ==, LB_ERROR);
  g_assert_true (lingbot_world_parse_precision ("bf16", &p, &err));
  g_assert_cmpint (p, ==, LINGBOT_PRECISION_BF16);
  g_assert_true (lingbot_world_parse_precision (NULL, &p, &err));
  g_assert_cmpint (p, ==, LINGBOT_PRECISION_FP32);
  g_assert_true (lingbot_world_parse_precision ("fp8", &p, &err));
  g_assert_cmpint (p, ==, LINGBOT_PRECISION_FP8);
  g_assert_false (lingbot_world_parse_precision ("fp16", &p, &err));
  g_assert_error (err, LINGBOT_ERROR, LINGBOT_ERROR_INVALID_ARGUMENT);
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_clear_error (&err);

  /* the model's figures, as the DiT's config has them */
  g_assert_true (lingbot_world_has_dit (w));
  g_assert_true (lingbot_world_has_vae (w));
  g_assert_cmpint (lingbot_world_get_chunk_frames (w), ==,
      lingbot_dit_get_config (lingbot_world_get_dit (w))->chunk_frames);
  g_assert_cmpint (lingbot_world_get_chunk_frames (w), ==, 4);
  g_assert_cmpint (lingbot_world_get_text_dim (w), ==,
      lingbot_dit_get_config (lingbot_world_get_dit (w))->text_dim);
  g_assert_cmpint (lingbot_world_get_text_dim (w), >, 0);

  /* bytes of the wrong size */
  g_assert_null (lingbot_latents_new_wrapped (lat, sizeof (lat) - 4, 1, 8, 8,
          &err));
  g_assert_error (err, LINGBOT_ERROR, LINGBOT_ERROR_SHAPE);
  g_assert_cmpstr (err->message, ==, "latents: 4092 bytes, expected 4096 "
      "(f32 [16, 1, 8, 8])");
  g_clear_error (&err);
  g_assert_null (lingbot_latents_new_wrapped (NULL, 0, 1, 8, 8, &err));
  g_assert_error (err, LINGBOT_ERROR, LINGBOT_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, "latents: 1 frames of 8x8 without data");
  g_clear_error (&err);
  g_assert_true (lingbot_session_generate (s, 0, NULL, &err));
  g_assert_no_error (err);
  g_assert_false (lingbot_session_read_chunk (s, 0, small, sizeof (small),
          &err));
  g_assert_error (err, LINGBOT_ERROR, LINGBOT_ERROR_SHAPE);
  g_assert_cmpstr (err->message, ==, "session: read_chunk into 10 bytes, "
      "expected 15360 (f32 [1, 16, 4, 6, 10])");
  g_clear_error (&err);

  /* a decoder of no size */
  g_assert_null (lingbot_world_new_decoder (w, 0, 8, 4, &err));
  g_assert_error (err, LINGBOT_ERROR, LINGBOT_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, "decoder: 4 latent frames of 8x0");
  g_clear_error (&err);
}

int
main (int argc, char **argv)
{
  int ret;

  g_test_init (&argc, &argv, NULL);
  tmpdir = g_dir_make_tmp ("lingbot-api-XXXXXX", NULL);
  g_assert_nonnull (tmpdir);
  model_dir = lingbot_test_write_model (tmpdir);
  embeds = lingbot_test_write_prompt_embeds (tmpdir, "a castle");
  lingbot_test_fill_image (image, IMG_W, IMG_H);
  g_test_add_func ("/api/frames", test_frames);
  g_test_add_func ("/api/decoder", test_decoder);
  g_test_add_func ("/api/errors", test_errors);
  ret = g_test_run ();
  lingbot_test_rm_rf (tmpdir);
  g_free (tmpdir);
  g_free (model_dir);
  g_free (embeds);
  return ret;
}

/* lingbot-gst: streaming properties of the Wan2.1 VAE sessions
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * - a streamed decode (any split into chunks) equals a one-shot decode of
 *   the concatenated latents (spec A.5 "chunking is exact");
 * - the condition encoder's zero chunks reach a fixed point, and serving
 *   them from the stored constant gives bit-identical y (spec A.6, B.11).
 */
#include "vae-test-common.h"
#include "test-layer-cancel.h"

static LingbotCheckpoint *ck;
static LingbotVae *vae;
static LbStream *stream;

/* Decodes @lat [16, L, h, w] in chunks of the given sizes; returns all
 * frames [3, 4L - 3, 8h, 8w]. */
static LbTensor *
decode_split (const LbTensor * lat, const int *sizes, int n_sizes)
{
  g_autoptr (GError) err = NULL;
  int64_t L = lat->shape[1], h = lat->shape[2], w = lat->shape[3];
  int maxc = 0;
  for (int i = 0; i < n_sizes; i++)
    maxc = MAX (maxc, sizes[i]);
  g_autoptr (LingbotVaeDecoder) dec
      = lingbot_vae_decoder_new (vae, stream, (int) h, (int) w, maxc, &err);
  g_assert_no_error (err);
  int64_t fshape[4] = { 3, 4 * L - 3, 8 * h, 8 * w };
  LbTensor *all = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  int64_t l0 = 0, f0 = 0;
  for (int i = 0; i < n_sizes; i++) {
    LbTensor in, out;
    lb_tensor_view_narrow (&in, lat, 1, l0, sizes[i]);
    lb_tensor_view_narrow (&out, all, 1, f0, fshape[1] - f0);
    /* the decoder writes a contiguous-in-rows strided view directly */
    int n = 0;
    gboolean ok = lingbot_vae_decoder_decode (dec, &in, &out, &n, &err);
    g_assert_no_error (err);
    g_assert_true (ok);
    g_assert_cmpint (n, ==, lingbot_vae_frames_for_latents (sizes[i], i == 0));
    l0 += sizes[i];
    f0 += n;
  }
  g_assert_cmpint (l0, ==, L);
  g_assert_cmpint (f0, ==, fshape[1]);
  return all;
}

static void
test_decode_chunking (void)
{
  /* 8 latent frames: the golden chunks 0 and 1 concatenated */
  int64_t shape[4] = { 16, 8, 6, 10 };
  g_autoptr (LbTensor) lat = lb_tensor_new (LB_DTYPE_F32, 4, shape);
  for (int k = 0; k < 2; k++) {
    char name[64];
    g_snprintf (name, sizeof name, "input.latent_chunk%d", k);
    LbTensor src, dst;
    lb_tensor_view_select (&src, vae_test_get (ck, name), 0, 0);
    lb_tensor_view_narrow (&dst, lat, 1, 4 * k, 4);
    g_assert_true (lb_tensor_copy_into (&dst, &src, NULL));
  }
  const int one[] = { 8 }, two[] = { 4, 4 }, odd[] = { 1, 3, 2, 2 };
  g_autoptr (LbTensor) a = decode_split (lat, one, 1);
  g_autoptr (LbTensor) b = decode_split (lat, two, 2);
  g_autoptr (LbTensor) c = decode_split (lat, odd, 4);
  double eab = vae_test_max_abs_diff (a, b), eac = vae_test_max_abs_diff (a, c);
  g_print ("one-shot vs 4+4: max diff %.3g; vs 1+3+2+2: %.3g\n", eab, eac);
  g_assert_cmpfloat (eab, <=, 1e-6);
  g_assert_cmpfloat (eac, <=, 1e-6);

  /* and the streamed result equals the golden streamed chunks */
  const LbTensor *g1 = vae_test_get (ck, "output.decoded_chunk1");
  LbTensor got;
  lb_tensor_view_narrow (&got, a, 1, 13, 16);
  g_assert_cmpfloat (vae_test_max_abs_diff (&got, g1), <=, 1e-4);
}

static void
test_decode_reset (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotVaeDecoder) dec
      = lingbot_vae_decoder_new (vae, stream, 6, 10, 4, &err);
  g_assert_no_error (err);
  int64_t fshape[4] = { 3, 16, 48, 80 };
  g_autoptr (LbTensor) f1 = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_autoptr (LbTensor) f2 = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  const LbTensor *l0 = vae_test_get (ck, "input.latent_chunk0");
  const LbTensor *l1 = vae_test_get (ck, "input.latent_chunk1");
  int n;
  g_assert_true (lingbot_vae_decoder_decode (dec, l0, f1, &n, &err));
  g_assert_true (lingbot_vae_decoder_decode (dec, l1, f2, &n, &err));
  g_assert_cmpint (n, ==, 16);
  lingbot_vae_decoder_reset (dec);
  g_assert_true (lingbot_vae_decoder_decode (dec, l0, f2, &n, &err));
  g_assert_no_error (err);
  g_assert_cmpint (n, ==, 13);
  LbTensor a, b;
  lb_tensor_view_narrow (&a, f1, 1, 0, 13);
  lb_tensor_view_narrow (&b, f2, 1, 0, 13);
  g_assert_cmpfloat (vae_test_max_abs_diff (&a, &b), ==, 0.0);
}

/* Condition chunks with and without constant reuse are bit-identical, and
 * reuse does kick in. */
static void
test_condition_constant (void)
{
  g_autoptr (GError) err = NULL;
  const int H = 16, W = 16, n_chunks = 10;
  LbTensor img;
  vae_test_image_crop (ck, &img, 8, 16, H, W);
  g_autoptr (LingbotVaeEncoder) ref
      = lingbot_vae_encoder_new (vae, stream, H, W, &err);
  g_assert_no_error (err);
  g_autoptr (LingbotVaeEncoder) fast
      = lingbot_vae_encoder_new (vae, stream, H, W, &err);
  g_assert_no_error (err);
  lingbot_vae_encoder_set_reuse_constant (ref, FALSE);
  int64_t yshape[4] = { 20, 4, H / 8, W / 8 };
  g_autoptr (LbTensor) ya = lb_tensor_new (LB_DTYPE_F32, 4, yshape);
  g_autoptr (LbTensor) yb = lb_tensor_new (LB_DTYPE_F32, 4, yshape);
  g_autoptr (LbTensor) prev = lb_tensor_new (LB_DTYPE_F32, 4, yshape);
  int first_const_chunk = -1;
  for (int k = 0; k < n_chunks; k++) {
    g_assert_true (lingbot_vae_encoder_encode_condition (ref,
            k == 0 ? &img : NULL, ya, &err));
    g_assert_no_error (err);
    g_assert_true (lingbot_vae_encoder_encode_condition (fast,
            k == 0 ? &img : NULL, yb, &err));
    g_assert_no_error (err);
    g_assert_cmpint (memcmp (ya->data, yb->data, lb_tensor_nbytes (ya)), ==, 0);
    if (k > 0 && first_const_chunk < 0
        && memcmp (ya->data, prev->data, lb_tensor_nbytes (ya)) == 0)
      first_const_chunk = k;
    memcpy (prev->data, ya->data, lb_tensor_nbytes (ya));
  }
  int from = lingbot_vae_encoder_get_constant_from (fast);
  int ran = lingbot_vae_encoder_get_n_encoded_segments (fast);
  g_print ("reference chunks constant from chunk %d; reuse from latent %d; "
      "encoder ran %d of %d segments\n",
      first_const_chunk, from, ran, 4 * n_chunks);
  g_assert_cmpint (from, >, 0);
  g_assert_cmpint (ran, <, 4 * n_chunks);
  g_assert_cmpint (lingbot_vae_encoder_get_constant_from (ref), ==, -1);
  g_assert_cmpint (lingbot_vae_encoder_get_n_encoded_segments (ref), ==,
      4 * n_chunks);

  /* reset forgets the constant */
  lingbot_vae_encoder_reset (fast);
  g_assert_cmpint (lingbot_vae_encoder_get_constant_from (fast), ==, -1);
}

/* The condition encode stopped before every layer of every latent frame
 * of chunk 0 (the image's chunk), and before the first two, a middle and
 * the last layer of every latent frame of chunk 2 (zero frames, before the
 * fixed point): the exact error; retried after g_cancellable_reset(), that
 * chunk and the next are byte-identical to an uncancelled encoder's (a
 * stop before the first layer leaves the encoder as it was; later ones
 * replay the chunks before from the image), with as many segments
 * encoded. */
static void
test_condition_cancel (void)
{
  g_autoptr (GError) err = NULL;
  const int H = 16, W = 16, n_ref = 4;
  LbTensor img;
  vae_test_image_crop (ck, &img, 8, 16, H, W);
  int64_t yshape[4] = { 20, 4, H / 8, W / 8 };
  const gsize ybytes = 20 * 4 * (H / 8) * (W / 8) * sizeof (float);
  g_autoptr (LbTensor) y = lb_tensor_new (LB_DTYPE_F32, 4, yshape);
  g_autofree guint8 *want = g_malloc (n_ref * ybytes);
  int want_encoded[4];
  {
    g_autoptr (LingbotVaeEncoder) ref
        = lingbot_vae_encoder_new (vae, stream, H, W, &err);
    g_assert_no_error (err);
    for (int k = 0; k < n_ref; k++) {
      g_assert_true (lingbot_vae_encoder_encode_condition (ref, &img, y, &err));
      g_assert_no_error (err);
      memcpy (want + k * ybytes, y->data, ybytes);
      want_encoded[k] = lingbot_vae_encoder_get_n_encoded_segments (ref);
    }
  }
  int n_layers = 0, n_checked = 0;
  for (int k = 0; k <= 2; k += 2)
    for (int seg = 0; seg < 4; seg++)
      for (int layer = 0; n_layers == 0 || layer < n_layers; layer++) {
        if (k > 0 && layer > 1 && layer != n_layers / 2
            && layer != n_layers - 1)
          continue;
        g_autoptr (GCancellable) c = g_cancellable_new ();
        LingbotTestLayerCancel at = { c, seg, layer, 0 };
        g_autoptr (LingbotVaeEncoder) enc
            = lingbot_vae_encoder_new (vae, stream, H, W, &err);
        g_assert_no_error (err);
        lingbot_vae_encoder_set_cancellable (enc, c);
        for (int i = 0; i < k; i++)
          g_assert_true (lingbot_vae_encoder_encode_condition (enc, &img, y,
                  &err));
        lingbot_vae_encoder_set_layer_func (enc,
            lingbot_test_cancel_at_layer, &at);
        const int before = lingbot_vae_encoder_get_n_encoded_segments (enc);
        g_assert_false (lingbot_vae_encoder_encode_condition (enc, &img, y,
                &err));
        n_layers = at.n_layers;
        g_assert_cmpint (n_layers, >, 2);
        g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
        g_autofree char *msg = g_strdup_printf ("VAE condition encode "
            "cancelled before layer %d of %d of latent frame %d of 4",
            layer + 1, n_layers, seg + 1);
        g_assert_cmpstr (err->message, ==, msg);
        g_clear_error (&err);
        /* cancelled at once by its first layer: nothing moved */
        if (seg == 0 && layer == 0)
          g_assert_cmpint (lingbot_vae_encoder_get_n_encoded_segments (enc),
              ==, before);
        /* still cancelled: fails again, at its first layer */
        lingbot_vae_encoder_set_layer_func (enc, NULL, NULL);
        g_assert_false (lingbot_vae_encoder_encode_condition (enc, &img, y,
                &err));
        g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
        g_clear_error (&err);
        g_cancellable_reset (c);
        for (int i = k; i < k + 2; i++) {
          g_assert_true (lingbot_vae_encoder_encode_condition (enc, &img, y,
                  &err));
          g_assert_no_error (err);
          g_assert_cmpint (memcmp (y->data, want + i * ybytes, ybytes), ==, 0);
          g_assert_cmpint (lingbot_vae_encoder_get_n_encoded_segments (enc),
              ==, want_encoded[i]);
        }
        n_checked++;
      }
  g_print ("condition encode cancelled at %d layer boundaries (%d layers "
      "per latent frame), every retry bit-identical\n", n_checked, n_layers);
  g_assert_cmpint (n_checked, ==, 4 * n_layers + 4 * 4);
}

/* Streaming encode of [image, 12 zeros] equals condition chunk 0. */
static void
test_encode_matches_condition (void)
{
  g_autoptr (GError) err = NULL;
  const LbTensor *image = vae_test_get (ck, "input.image_tensor");
  const LbTensor *want = vae_test_get (ck, "output.cond_chunk0");
  int64_t pshape[4] = { 3, 13, 48, 80 };
  g_autoptr (LbTensor) px = lb_tensor_new_zeros (LB_DTYPE_F32, 4, pshape);
  LbTensor f0, src;
  lb_tensor_view_narrow (&f0, px, 1, 0, 1);
  lb_tensor_view_reshape (&src, image, 4, (int64_t[4]) { 3, 1, 48, 80 });
  g_assert_true (lb_tensor_copy_into (&f0, &src, NULL));
  g_autoptr (LingbotVaeEncoder) enc
      = lingbot_vae_encoder_new (vae, stream, 48, 80, &err);
  int64_t lshape[4] = { 16, 4, 6, 10 };
  g_autoptr (LbTensor) lat = lb_tensor_new (LB_DTYPE_F32, 4, lshape);
  g_assert_true (lingbot_vae_encoder_encode (enc, px, lat, &err));
  g_assert_no_error (err);
  LbTensor w;
  lb_tensor_view_select (&w, want, 0, 0);
  lb_tensor_view_narrow (&w, &w, 0, 4, 16);
  double e = vae_test_max_abs_diff (lat, &w);
  g_print ("streaming encode vs cond_chunk0 latents: %.3g\n", e);
  g_assert_cmpfloat (e, <=, 1e-4 * vae_test_max_abs (&w));
  /* the next call must have 4n frames */
  g_assert_false (lingbot_vae_encoder_encode (enc, px, lat, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_nonnull (strstr (err->message, "4n"));
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
  g_test_add_func ("/vae/stream/decode-chunking", test_decode_chunking);
  g_test_add_func ("/vae/stream/decode-reset", test_decode_reset);
  g_test_add_func ("/vae/stream/condition-constant", test_condition_constant);
  g_test_add_func ("/vae/stream/condition-cancel", test_condition_cancel);
  g_test_add_func ("/vae/stream/encode-matches-condition",
      test_encode_matches_condition);
  int ret = g_test_run ();
  lingbot_vae_unref (vae);
  lingbot_checkpoint_unref (ck);
  stream->backend->stream_free (stream);
  return ret;
}

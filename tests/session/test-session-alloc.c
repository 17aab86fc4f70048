/* lingbot-gst: a session too large for the memory fails alone
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Issue 3.1 item 4: every allocation sized by the input or by a session's
 * geometry is a try-allocation, so a session the machine cannot hold
 * fails with a GError naming what and how many bytes, and the process
 * (the WebRTC server's other sessions, the pipeline) goes on.
 *
 * The test lowers its own address-space limit (RLIMIT_AS) to what it uses
 * after a small session has run, plus MARGIN, then asks for sessions,
 * a DiT session and a tensor channel whose first allocation larger than
 * the margin is known, and checks the exact messages; a small session
 * before and after gives the same frames byte for byte.  Sanitizers and
 * valgrind reserve address space of their own: the test is skipped (77)
 * under them.  On the tiny random model of tests/session (written at
 * start-up, prompt embeddings instead of umT5), one rank.
 */
#include <stdio.h>
#include <string.h>

#include "comm/channel.h"
#include "kernels/error.h"
#include "lingbot/dit-session.h"
#include "lingbot/image.h"
#include "lingbot/lingbot-private.h"
#include "lingbot/text-encoder.h"
#include "test-fixture.h"
#include "test-jpeg.h"
#include "test-rlimit.h"

/* the address space left to the process above what it uses */
#define MARGIN ((guint64) 384 << 20)

#define IMG_W 80
#define IMG_H 48

static char *tmpdir;
static char *embeds;
static LingbotWorld *world;
static guint8 image[IMG_W * IMG_H * 3];

static void
init_options (LingbotSessionOptions * o, int width, int height)
{
  LingbotSessionOptions def = LINGBOT_SESSION_OPTIONS_INIT;
  *o = def;
  o->prompt_embeds_path = embeds;
  o->image_rgb = image;
  o->image_width = IMG_W;
  o->image_height = IMG_H;
  o->image_stride = IMG_W * 3;
  o->width = width;
  o->height = height;
  o->seed = 42;
  o->frames = 29;
}

/* a 64x64 session: two chunks generated and decoded, every frame's bytes
 * appended to @out */
static void
small_session (GByteArray * out)
{
  g_autoptr (GError) err = NULL;
  LingbotSessionOptions o;
  init_options (&o, 64, 64);
  g_autoptr (LingbotSession) s = lingbot_session_new (world, &o, &err);
  g_assert_no_error (err);
  for (int c = 0; c < 2; c++) {
    int n = 0;
    g_assert_true (lingbot_session_generate (s, 0, NULL, &err));
    g_assert_no_error (err);
    g_assert_true (lingbot_session_decode (s, NULL, &n, NULL, &err));
    g_assert_no_error (err);
    g_assert_cmpint (n, ==, c ? 16 : 13);
    const LbTensor *f = lingbot_session_get_frames_tensor (s);
    g_byte_array_append (out, f->data, (guint) lb_tensor_nbytes (f));
  }
}

/* lingbot_session_new() of @o fails with LB_ERROR_DEVICE and @message */
static void
assert_session_fails (const LingbotSessionOptions * o, const char *message)
{
  g_autoptr (GError) err = NULL;
  LingbotSession *s = lingbot_session_new (world, o, &err);
  g_assert_null (s);
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, message);
}

typedef void (*LimitedCase) (void);

/* 8192x8192 JPEG (tests/common/test-jpeg.c), written in the case's child
 * before the limit */
static char *big_jpeg;

/* 4096x4096, lingbotgen's largest size: the resized image (201 MB) fits,
 * the decoded frames of a chunk (16 frames, 3.2 GB) do not: the first of
 * the per-chunk buffers, allocated before the prompt, DiT and VAE setup
 * (before them, the DiT noise buffers of 67 MB a step went over the limit
 * and aborted) */
static void
case_frames (void)
{
  LingbotSessionOptions o;
  init_options (&o, 4096, 4096);
  assert_session_fails (&o, "session: decoded frames f32 [3, 16, 4096, "
      "4096]: cannot allocate 3221225472 bytes of host memory");
}

/* a reference image of 8192x4096 given as pixels (as lingbotgen's image
 * pad gives them), made before the limit: the session's copy of it
 * (100 MB) fits, its float32 normalisation (402 MB) does not */
static guint8 *big_image;
#define BIG_W 8192
#define BIG_H 4096

static void
case_image (void)
{
  LingbotSessionOptions o;
  init_options (&o, 64, 64);
  o.image_rgb = big_image;
  o.image_width = BIG_W;
  o.image_height = BIG_H;
  o.image_stride = BIG_W * 3;
  assert_session_fails (&o, "image: normalised f32 [3, 4096, 8192]: "
      "cannot allocate 402653184 bytes of host memory");
}

/* the DiT session's noise buffers (latent 1024x2048: 537 MB a step) */
static void
case_dit_noise (void)
{
  g_autoptr (GError) err = NULL;
  LingbotDitSessionOptions dso = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  dso.latent_h = 1024;
  dso.latent_w = 2048;
  dso.chunk_frames = 4;
  LingbotDit *dit = lingbot_world_get_dit (world);
  int64_t tshape[3] = { 1, 512, lingbot_dit_get_config (dit)->text_dim };
  g_autoptr (LbTensor) text = lb_tensor_new_zeros (LB_DTYPE_F32, 3, tshape);
  LingbotDitSession *ds = lingbot_dit_session_new (dit,
      lingbot_world_get_group (world), &dso, text, &err);
  g_assert_null (ds);
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "DiT session: noise of step 0 f32 "
      "[1, 16, 4, 1024, 2048]: cannot allocate 536870912 bytes of host "
      "memory");
}

/* a tensor channel's slots (the decode beside generation): 1 GiB each */
static void
case_channel (void)
{
  g_autoptr (GError) err = NULL;
  LbChannelConfig cc = { 0 };
  cc.producer = cc.consumer = lingbot_world_get_group (world);
  cc.dtype = LB_DTYPE_F32;
  cc.ndim = 5;
  cc.shape[0] = 1;
  cc.shape[1] = 16;
  cc.shape[2] = 4;
  cc.shape[3] = 2048;
  cc.shape[4] = 2048;
  cc.shard_dim = 3;
  cc.n_slots = 2;
  cc.name = "latents";
  LbChannel *ch = lb_channel_new (&cc, &err);
  g_assert_null (ch);
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "channel latents: cannot allocate "
      "1073741824 bytes of host memory");
}

/* frames of chunk 0 of a 64x64 session from @o */
static void
first_chunk (LingbotSessionOptions * o, GByteArray * out)
{
  g_autoptr (GError) err = NULL;
  int n = 0;
  g_autoptr (LingbotSession) s = lingbot_session_new (world, o, &err);
  g_assert_no_error (err);
  g_assert_true (lingbot_session_generate (s, 0, NULL, &err));
  g_assert_true (lingbot_session_decode (s, NULL, &n, NULL, &err));
  g_assert_no_error (err);
  g_assert_cmpint (n, ==, 13);
  const LbTensor *f = lingbot_session_get_frames_tensor (s);
  g_byte_array_append (out, f->data, (guint) lb_tensor_nbytes (f));
}

/* a session from an 8192x8192 JPEG at 64x64 decodes it at 1/8
 * (lingbot_image_jpeg_scale_for()): 3 MiB of pixels, where the full
 * decode (192 MiB) and its normalisation (768 MiB) do not fit; its frames
 * are those of a session given the 1/8 decode's pixels */
static void
case_large_jpeg (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (GByteArray) from_file = g_byte_array_new ();
  g_autoptr (GByteArray) from_pixels = g_byte_array_new ();
  LingbotSessionOptions o;

  init_options (&o, 64, 64);
  o.image_rgb = NULL;
  o.image_path = big_jpeg;
  first_chunk (&o, from_file);

  g_autofree char *data = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (big_jpeg, &data, &len, NULL));
  g_autoptr (LbTensor) rgb = lingbot_image_decode_jpeg_reduced ((const
          guint8 *) data, len, 8, &err);
  g_assert_no_error (err);
  g_assert_true (lb_tensor_has_shape (rgb, 3, (int64_t) 1024,
          (int64_t) 1024, (int64_t) 3));
  init_options (&o, 64, 64);
  o.image_rgb = rgb->data;
  o.image_width = o.image_height = 1024;
  o.image_stride = 3 * 1024;
  first_chunk (&o, from_pixels);
  g_assert_cmpuint (from_file->len, ==, from_pixels->len);
  g_assert_true (memcmp (from_file->data, from_pixels->data,
          from_file->len) == 0);
}

/* In a child process (g_test_trap_subprocess()): a small session, the
 * limit, @data's case, the small session again with the same bytes.  On
 * code that aborts on a failed allocation the child dies (SIGTRAP) and
 * the parent's assertion fails. */
static void
test_limited (gconstpointer data)
{
  LimitedCase run = (LimitedCase) data;
  if (!g_test_subprocess ()) {
    g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_INHERIT_STDOUT |
        G_TEST_SUBPROCESS_INHERIT_STDERR);
    g_test_trap_assert_passed ();
    return;
  }
  g_autoptr (GByteArray) before = g_byte_array_new ();
  g_autoptr (GByteArray) after = g_byte_array_new ();
  if (run == case_image) {
    big_image = g_malloc ((gsize) BIG_W * BIG_H * 3);
    for (gsize i = 0; i < (gsize) BIG_W * BIG_H * 3; i++)
      big_image[i] = (guint8) (i * 7);
  }

  if (run == case_large_jpeg) {
    gsize len = 0;
    g_autofree guint8 *jpeg = lingbot_test_smooth_jpeg (8192, 8192, 90, &len);
    big_jpeg = g_build_filename (tmpdir, "big.jpg", NULL);
    g_assert_true (g_file_set_contents (big_jpeg, (const char *) jpeg,
            (gssize) len, NULL));
  }

  /* every thread (ranks, OpenMP, OpenBLAS) started, its arena made */
  small_session (before);

  if (!lingbot_test_rlimit_lower (MARGIN))
    return;

  run ();

  /* the process goes on: the same small session, the same bytes */
  small_session (after);
  g_assert_cmpuint (after->len, ==, before->len);
  g_assert_true (memcmp (after->data, before->data, before->len) == 0);
  g_clear_pointer (&big_image, g_free);
  g_clear_pointer (&big_jpeg, g_free);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (!lingbot_test_rlimit_init ())
    return 77;
  g_autoptr (GError) err = NULL;
  tmpdir = g_dir_make_tmp ("lingbot-alloc-XXXXXX", &err);
  g_assert_no_error (err);

  g_autofree char *model_dir = lingbot_test_write_model (tmpdir);
  LingbotDitConfig cfg;
  lingbot_dit_config_init_preset (&cfg, LINGBOT_DIT_PRESET_TINY);
  int64_t shape[2] = { 512, cfg.text_dim };
  g_autoptr (LbTensor) ctx = lb_tensor_new_zeros (LB_DTYPE_F32, 2, shape);
  for (int i = 0; i < 6 * cfg.text_dim; i++)
    ((float *) ctx->data)[i] = 0.1f * (float) ((i % 13) - 6);
  embeds = g_build_filename (tmpdir, "embeds.safetensors", NULL);
  g_assert_true (lingbot_prompt_embeds_save (embeds, ctx, "x", 6, &err));
  g_assert_no_error (err);
  lingbot_test_fill_image (image, IMG_W, IMG_H);

  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  wo.model_path = model_dir;
  wo.load_text_encoder = FALSE;
  world = lingbot_world_new (&wo, &err);
  g_assert_no_error (err);

  g_test_add_data_func ("/session-alloc/frames", case_frames, test_limited);
  g_test_add_data_func ("/session-alloc/image", case_image, test_limited);
  g_test_add_data_func ("/session-alloc/dit-noise", case_dit_noise,
      test_limited);
  g_test_add_data_func ("/session-alloc/channel", case_channel, test_limited);
  g_test_add_data_func ("/session-alloc/large-jpeg", case_large_jpeg,
      test_limited);
  int rc = g_test_run ();

  lingbot_world_unref (world);
  lingbot_test_rm_rf (tmpdir);
  g_free (tmpdir);
  g_free (embeds);
  return rc;
}

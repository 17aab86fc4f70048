/* lingbot-gst: the session API (lingbot/lingbot.h) on a tiny random model
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The model is written at start-up into a temporary directory in the
 * release layout, with the functions lingbot-mkmodel --full uses: the tiny
 * DiT (2 heads, chunk 4), a VAE of width 8, a 2-layer umT5 of width 32 and
 * the test SentencePiece model (argv[1]).  Output 64x64 (latent 8x8).
 */
#include <math.h>
#include <string.h>
#include <glib/gstdio.h>

#include "kernels/error.h"
#include "lingbot/lingbot-private.h"
#include "lingbot/noise.h"
#include "lingbot/session-private.h"    /* the condition encoder's hook */
#include "lingbot/text-encoder-random.h"
#include "lingbot/tokenizer.h"
#include "test-fixture.h"
#include "test-layer-cancel.h"

static char *tmpdir;
static char *model_dir;
static const char *spm_path;
static LingbotWorld *world1;    /* cpu:1 with the text encoder */
static LingbotWorld *world2;    /* cpu:2 with the text encoder */

#define IMG_W 80
#define IMG_H 48
static guint8 image[IMG_W * IMG_H * 3];

static void
tiny_config (LingbotDitConfig * cfg)
{
  lingbot_dit_config_init_preset (cfg, LINGBOT_DIT_PRESET_TINY);
  cfg->chunk_frames = 4;
}

/* the model directory of write_model() with the DiT of @cfg */
static void
write_model_with (const char *dir, const LingbotDitConfig * dit_cfg,
    gboolean with_vae, gboolean with_t5)
{
  g_autoptr (GError) err = NULL;
  LingbotDitConfig cfg = *dit_cfg;
  g_autofree char *dit = g_build_filename (dir, "transformers", NULL);
  g_assert_true (lingbot_dit_write_random (&cfg, dit, 1, LB_DTYPE_BF16, 3,
          &err));
  g_assert_no_error (err);
  if (with_vae) {
    g_autofree char *vae = g_build_filename (dir, "Wan2.1_VAE.safetensors",
        NULL);
    g_assert_true (lingbot_vae_write_random (vae, 8, 5, &err));
    g_assert_no_error (err);
  }
  if (with_t5) {
    g_autofree char *tdir = g_build_filename (dir, "google", "umt5-xxl",
        NULL);
    g_assert_cmpint (g_mkdir_with_parents (tdir, 0755), ==, 0);
    g_autofree char *tok = g_build_filename (tdir, "spiece.model", NULL);
    g_autofree char *data = NULL;
    gsize len;
    g_assert_true (g_file_get_contents (spm_path, &data, &len, &err));
    g_assert_true (g_file_set_contents (tok, data, (gssize) len, &err));
    LingbotTextEncoderConfig tc;
    lingbot_text_encoder_config_init_tiny (&tc, cfg.text_dim, 500);
    g_autofree char *t5 = g_build_filename (dir,
        "models_t5_umt5-xxl-enc-bf16.safetensors", NULL);
    g_assert_true (lingbot_text_encoder_write_random (t5, &tc, LB_DTYPE_BF16,
            7, &err));
    g_assert_no_error (err);
  }
}

static void
write_model (const char *dir, gboolean with_vae, gboolean with_t5)
{
  LingbotDitConfig cfg;
  tiny_config (&cfg);
  write_model_with (dir, &cfg, with_vae, with_t5);
}

static void
init_options (LingbotSessionOptions * o)
{
  LingbotSessionOptions def = LINGBOT_SESSION_OPTIONS_INIT;
  *o = def;
  o->prompt = "a small castle on a hill";
  o->image_rgb = image;
  o->image_width = IMG_W;
  o->image_height = IMG_H;
  o->image_stride = IMG_W * 3;
  o->width = 64;
  o->height = 64;
  o->seed = 42;
  o->frames = 29;
}

static void
check_frames (const LbTensor * f, int n)
{
  g_assert_cmpint (f->ndim, ==, 4);
  g_assert_cmpint (f->shape[0], ==, 3);
  g_assert_cmpint (f->shape[1], >=, n);
  g_assert_cmpint (f->shape[2], ==, 64);
  g_assert_cmpint (f->shape[3], ==, 64);
  const float *p = f->data;
  for (int c = 0; c < 3; c++)
    for (int t = 0; t < n; t++)
      for (int64_t i = 0; i < 64 * 64; i++) {
        float v = p[(c * f->shape[1] + t) * 64 * 64 + i];
        g_assert_true (isfinite (v));
        g_assert_cmpfloat (v, >=, -1.0f);
        g_assert_cmpfloat (v, <=, 1.0f);
      }
}

/* Runs @n chunks with @keys; appends each chunk's decoded frames (and the
 * latents) to @out. */
static void
run_chunks (LingbotSession * s, int n, guint keys, GArray * out, GArray * lat)
{
  g_autoptr (GError) err = NULL;
  for (int c = 0; c < n; c++) {
    LingbotChunkStats st = { 0 };
    int nf = -1;
    g_assert_true (lingbot_session_generate (s, keys, &st, &err));
    g_assert_no_error (err);
    g_assert_cmpuint (st.index, ==, (guint64) c);
    g_assert_cmpfloat (st.dit_seconds, >, 0.0);
    const LbTensor *l = lingbot_session_get_latents_tensor (s);
    if (lat)
      g_array_append_vals (lat, l->data, (guint) lb_tensor_numel (l));
    g_assert_true (lingbot_session_decode (s, NULL, &nf, &st, &err));
    g_assert_no_error (err);
    g_assert_cmpint (nf, ==, st.frames);
    g_assert_cmpfloat (st.vae_seconds, >, 0.0);
    g_assert_cmpfloat (st.compute_seconds, >=, st.dit_seconds + st.vae_seconds);
    const LbTensor *f = lingbot_session_get_frames_tensor (s);
    check_frames (f, nf);
    if (out) {
      /* [3, T, H, W]: append frames 0..nf-1 of every channel */
      for (int ch = 0; ch < 3; ch++)
        g_array_append_vals (out, (const float *) f->data +
            (gsize) ch * f->shape[1] * 64 * 64, (guint) nf * 64 * 64);
    }
  }
}

static void
test_chunks (void)
{
  g_autoptr (GError) err = NULL;
  LingbotSessionOptions o;
  init_options (&o);
  g_autoptr (LingbotSession) s = lingbot_session_new (world1, &o, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_session_get_width (s), ==, 64);
  g_assert_cmpint (lingbot_session_get_height (s), ==, 64);
  g_assert_cmpint (lingbot_session_get_latent_width (s), ==, 8);
  g_assert_cmpint (lingbot_session_get_latent_height (s), ==, 8);
  g_assert_cmpint (lingbot_session_get_chunk_frames (s), ==, 4);
  g_assert_cmpuint (lingbot_session_get_n_chunks (s), ==, 2);
  g_assert_cmpuint (lingbot_session_get_n_frames (s), ==, 29);
  g_assert_cmpint (lingbot_session_get_frame_count (s, 0), ==, 13);
  g_assert_cmpint (lingbot_session_get_frame_count (s, 1), ==, 16);
  g_assert_cmpint (lingbot_session_get_frame_count (s, 2), ==, 0);
  g_assert_nonnull (lingbot_session_get_control (s));
  const LbTensor *l = lingbot_session_get_latents_tensor (s);
  g_assert_true (lb_tensor_has_shape (l, 5, 1, 16, 4, 8, 8));

  g_assert_false (lingbot_session_is_done (s));
  int counts[2];
  for (int c = 0; c < 2; c++) {
    LingbotChunkStats st = { 0 };
    g_assert_cmpuint (lingbot_session_get_chunk_index (s), ==, c);
    g_assert_true (lingbot_session_generate (s, LINGBOT_KEY_W, &st, &err));
    g_assert_no_error (err);
    g_assert_cmpuint (st.keys, ==, LINGBOT_KEY_W);
    g_assert_true (lingbot_session_decode (s, NULL, &counts[c], &st, &err));
    g_assert_no_error (err);
    check_frames (lingbot_session_get_frames_tensor (s), counts[c]);
  }
  g_assert_cmpint (counts[0], ==, 13);
  g_assert_cmpint (counts[1], ==, 16);
  g_assert_true (lingbot_session_is_done (s));
  g_assert_false (lingbot_session_generate (s, 0, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (err->message, "all 2 chunks"));
}

/* frame accounting: 77 -> 5 chunks (spec 3.1); 20 -> 13 + 7 (cut) */
static void
test_frame_accounting (void)
{
  g_autoptr (GError) err = NULL;
  LingbotSessionOptions o;
  init_options (&o);
  o.frames = 77;
  LingbotSession *s = lingbot_session_new (world1, &o, &err);
  g_assert_no_error (err);
  g_assert_cmpuint (lingbot_session_get_n_chunks (s), ==, 5);
  g_assert_cmpint (lingbot_session_get_frame_count (s, 4), ==, 16);
  lingbot_session_free (s);

  o.frames = 20;
  s = lingbot_session_new (world1, &o, &err);
  g_assert_no_error (err);
  g_assert_cmpuint (lingbot_session_get_n_chunks (s), ==, 2);
  g_assert_cmpint (lingbot_session_get_frame_count (s, 1), ==, 7);
  int n0 = 0, n1 = 0;
  g_assert_true (lingbot_session_generate (s, 0, NULL, &err));
  g_assert_true (lingbot_session_decode (s, NULL, &n0, NULL, &err));
  g_assert_true (lingbot_session_generate (s, 0, NULL, &err));
  g_assert_true (lingbot_session_decode (s, NULL, &n1, NULL, &err));
  g_assert_no_error (err);
  g_assert_cmpint (n0, ==, 13);
  g_assert_cmpint (n1, ==, 7);
  lingbot_session_free (s);

  /* unbounded */
  o.frames = 0;
  s = lingbot_session_new (world1, &o, &err);
  g_assert_no_error (err);
  g_assert_cmpuint (lingbot_session_get_n_chunks (s), ==, 0);
  g_assert_false (lingbot_session_is_done (s));
  g_assert_cmpint (lingbot_session_get_frame_count (s, 100), ==, 16);
  lingbot_session_free (s);
}

static GArray *
run_session (LingbotWorld * w, guint64 seed, int n, guint keys, GArray * lat)
{
  g_autoptr (GError) err = NULL;
  LingbotSessionOptions o;
  init_options (&o);
  o.seed = seed;
  g_autoptr (LingbotSession) s = lingbot_session_new (w, &o, &err);
  g_assert_no_error (err);
  /* the decode is height-sharded over every rank */
  g_assert_cmpint (lingbot_session_get_decode_ranks (s), ==,
      lingbot_world_get_n_ranks (w));
  GArray *out = g_array_new (FALSE, FALSE, sizeof (float));
  run_chunks (s, n, keys, out, lat);
  return out;
}

static double
max_diff (GArray * a, GArray * b)
{
  g_assert_cmpuint (a->len, ==, b->len);
  double m = 0.0;
  for (guint i = 0; i < a->len; i++)
    m = MAX (m, fabs ((double) g_array_index (a, float, i) -
            (double) g_array_index (b, float, i)));
  return m;
}

static void
test_determinism (void)
{
  g_autoptr (GArray) a = run_session (world1, 42, 2, LINGBOT_KEY_W, NULL);
  g_autoptr (GArray) b = run_session (world1, 42, 2, LINGBOT_KEY_W, NULL);
  g_assert_cmpuint (a->len, ==, 3 * 29 * 64 * 64);
  g_assert_cmpint (memcmp (a->data, b->data, a->len * sizeof (float)), ==, 0);
  g_autoptr (GArray) c = run_session (world1, 43, 1, LINGBOT_KEY_W, NULL);
  g_array_set_size (a, c->len);
  g_assert_cmpfloat (max_diff (a, c), >, 1e-3);
}

static void
test_ranks (void)
{
  g_autoptr (GArray) la = g_array_new (FALSE, FALSE, sizeof (float));
  g_autoptr (GArray) lb = g_array_new (FALSE, FALSE, sizeof (float));
  g_autoptr (GArray) a = run_session (world1, 7, 2, LINGBOT_KEY_D, la);
  g_autoptr (GArray) b = run_session (world2, 7, 2, LINGBOT_KEY_D, lb);
  /* the DiT's token bands and the VAE's height bands give the bytes of
   * one rank (docs/design.md "Determinism") */
  g_assert_cmpuint (la->len, ==, lb->len);
  g_assert_cmpuint (a->len, ==, b->len);
  g_assert_cmpmem (la->data, la->len * sizeof (float), lb->data,
      lb->len * sizeof (float));
  g_assert_cmpmem (a->data, a->len * sizeof (float), b->data,
      b->len * sizeof (float));
}

static void
test_keys (void)
{
  g_autoptr (GArray) a = run_session (world1, 42, 2, 0, NULL);
  g_autoptr (GArray) b = run_session (world1, 42, 2, LINGBOT_KEY_W, NULL);
  /* chunk 1 = frames 13..28 of each channel */
  double m = 0.0;
  for (int ch = 0; ch < 3; ch++)
    for (guint i = 13 * 64 * 64; i < 29 * 64 * 64; i++) {
      guint k = (guint) ch * 29 * 64 * 64 + i;
      m = MAX (m, fabs (g_array_index (a, float, k) -
              g_array_index (b, float, k)));
    }
  g_test_message ("w vs no key, chunk 1: %.3g", m);
  g_assert_cmpfloat (m, >, 1e-4);
}

static void
test_offline_poses (void)
{
  g_autoptr (GError) err = NULL;
  enum
  { N = 29 };
  float poses[N * 16];
  for (int i = 0; i < N; i++) {
    float *p = poses + 16 * i;
    memset (p, 0, 16 * sizeof (float));
    double yaw = 0.02 * i;
    p[0] = (float) cos (yaw);
    p[2] = (float) sin (yaw);
    p[5] = 1.0f;
    p[8] = (float) -sin (yaw);
    p[10] = (float) cos (yaw);
    p[11] = 0.05f * (float) i;
    p[15] = 1.0f;
  }
  const float k[4] = { 500.f, 500.f, 416.f, 240.f };
  LingbotSessionOptions o;
  init_options (&o);
  o.poses = poses;
  o.n_poses = N;
  o.intrinsics = k;
  o.intrinsics_width = 832;
  o.intrinsics_height = 480;
  o.frames = 0;                 /* every frame the poses cover: 29 */
  g_autoptr (LingbotSession) s = lingbot_session_new (world1, &o, &err);
  g_assert_no_error (err);
  g_assert_true (lingbot_control_is_offline (lingbot_session_get_control (s)));
  g_assert_cmpuint (lingbot_session_get_n_frames (s), ==, 29);
  g_assert_cmpuint (lingbot_session_get_n_chunks (s), ==, 2);
  g_autoptr (GArray) out = g_array_new (FALSE, FALSE, sizeof (float));
  run_chunks (s, 2, LINGBOT_KEY_W, out, NULL);
  g_assert_true (lingbot_session_is_done (s));
  g_assert_cmpuint (out->len, ==, 3 * 29 * 64 * 64);

  /* without intrinsics: the image-size default; 4n+1 required */
  o.intrinsics = NULL;
  o.frames = 13;
  g_autoptr (LingbotSession) s2 = lingbot_session_new (world1, &o, &err);
  g_assert_no_error (err);
  g_assert_cmpuint (lingbot_session_get_n_chunks (s2), ==, 1);
  run_chunks (s2, 1, 0, NULL, NULL);
  o.frames = 14;
  g_assert_null (lingbot_session_new (world1, &o, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (err->message, "4n+1"));
}

/* the spec 6.1 size rule, and prompt embeddings on a world without the
 * text encoder */
static void
test_pixel_area_and_embeds (void)
{
  g_autoptr (GError) err = NULL;
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  wo.model_path = model_dir;
  wo.load_text_encoder = FALSE;
  g_autoptr (LingbotWorld) w = lingbot_world_new (&wo, &err);
  g_assert_no_error (err);
  g_assert_false (lingbot_world_has_text_encoder (w));

  int64_t shape[2] = { 512, 32 };
  g_autoptr (LbTensor) ctx = lb_tensor_new_zeros (LB_DTYPE_F32, 2, shape);
  for (int i = 0; i < 6 * 32; i++)
    ((float *) ctx->data)[i] = 0.1f * sinf ((float) i);
  g_autofree char *embeds = g_build_filename (tmpdir, "embeds.safetensors",
      NULL);
  g_assert_true (lingbot_prompt_embeds_save (embeds, ctx, "x", 6, &err));
  g_assert_no_error (err);

  LingbotSessionOptions o;
  init_options (&o);
  o.prompt = NULL;
  o.prompt_embeds_path = embeds;
  o.width = o.height = 0;
  o.pixel_area = IMG_W * IMG_H; /* 80x48 -> 80x48 */
  o.frames = 13;
  g_autoptr (LingbotSession) s = lingbot_session_new (w, &o, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_session_get_width (s), ==, 80);
  g_assert_cmpint (lingbot_session_get_height (s), ==, 48);
  int n = 0;
  g_assert_true (lingbot_session_generate (s, 0, NULL, &err));
  g_assert_true (lingbot_session_decode (s, NULL, &n, NULL, &err));
  g_assert_no_error (err);
  g_assert_cmpint (n, ==, 13);
  const LbTensor *f = lingbot_session_get_frames_tensor (s);
  g_assert_cmpint (f->shape[2], ==, 48);
  g_assert_cmpint (f->shape[3], ==, 80);

  /* a text prompt needs the encoder */
  o.prompt = "hello";
  o.prompt_embeds_path = NULL;
  g_assert_null (lingbot_session_new (w, &o, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (err->message, "text encoder"));
  g_assert_nonnull (strstr (err->message, "prompt_embeds_path"));
}

/* noise_path: the Philox draws stored under the golden names replay the
 * Philox session bit for bit */
static void
test_noise_file (void)
{
  g_autoptr (GError) err = NULL;
  const guint64 seed = 11;
  const int64_t n = 16 * 4 * 8 * 8;
  int64_t shape[5] = { 1, 16, 4, 8, 8 };
  GPtrArray *names = g_ptr_array_new_with_free_func (g_free);
  GPtrArray *tensors = g_ptr_array_new_with_free_func ((GDestroyNotify)
      lb_tensor_free);
  for (guint c = 0; c < 2; c++)
    for (guint st = 0; st < 4; st++) {
      LbTensor *t = lb_tensor_new (LB_DTYPE_F32, 5, shape);
      guint32 stream = st == 0 ?
          lingbot_noise_stream_id (LINGBOT_NOISE_INITIAL, 0) :
          lingbot_noise_stream_id (LINGBOT_NOISE_RENOISE, st - 1);
      lingbot_noise_normal_range (seed, c, stream, 0, (gsize) n, t->data);
      g_ptr_array_add (names, st == 0 ?
          g_strdup_printf ("output.chunk%u.step0.x_in", c) :
          g_strdup_printf ("output.chunk%u.step%u.renoise", c, st - 1));
      g_ptr_array_add (tensors, t);
    }
  g_autofree char *path = g_build_filename (tmpdir, "noise.safetensors",
      NULL);
  g_assert_true (lingbot_safetensors_write (path,
          (const char *const *) names->pdata,
          (const LbTensor * const *) tensors->pdata, names->len, NULL, &err));
  g_assert_no_error (err);
  g_ptr_array_unref (names);
  g_ptr_array_unref (tensors);

  g_autoptr (GArray) la = g_array_new (FALSE, FALSE, sizeof (float));
  g_autoptr (GArray) lb = g_array_new (FALSE, FALSE, sizeof (float));
  g_autoptr (GArray) a = run_session (world1, seed, 2, LINGBOT_KEY_W, la);
  LingbotSessionOptions o;
  init_options (&o);
  o.seed = 999;                 /* ignored */
  o.noise_path = path;
  g_autoptr (LingbotSession) s = lingbot_session_new (world1, &o, &err);
  g_assert_no_error (err);
  run_chunks (s, 2, LINGBOT_KEY_W, NULL, lb);
  g_assert_cmpuint (la->len, ==, lb->len);
  g_assert_cmpint (memcmp (la->data, lb->data, la->len * sizeof (float)),
      ==, 0);

  g_autofree char *missing = g_build_filename (tmpdir, "nonoise.st", NULL);
  o.noise_path = missing;
  g_assert_null (lingbot_session_new (world1, &o, &err));
  g_assert_nonnull (err);
  g_assert_nonnull (strstr (err->message, "nonoise.st"));
}

/* ------------------------------------------------------------------------ */
/* cancellation and the pass callback                                       */
/* ------------------------------------------------------------------------ */

#define N_PASSES 5              /* the default schedule: 4 steps + clean */

static const guint chunk_keys[] = {
  LINGBOT_KEY_W, LINGBOT_KEY_W | LINGBOT_KEY_J, LINGBOT_KEY_D,
  LINGBOT_KEY_A | LINGBOT_KEY_L, LINGBOT_KEY_S,
};

/* What the pass callback saw. */
typedef struct
{
  GThread *rank0;               /* rank 0's worker thread */
  guint64 chunk;                /* the chunk the test is generating */
  int calls;                    /* calls during that chunk */
  int bad;                      /* calls off rank 0, out of order, wrong n */
  int cancel_at;                /* cancel after this pass; -1 never */
  GCancellable *cancellable;
} PassLog;

static void
on_pass (LingbotSession * s, guint64 chunk, int pass, int n_passes,
    gpointer user_data)
{
  PassLog *log = user_data;
  (void) s;
  if (g_thread_self () != log->rank0 || chunk != log->chunk ||
      pass != log->calls || n_passes != N_PASSES)
    log->bad++;
  log->calls++;
  if (pass == log->cancel_at)
    g_cancellable_cancel (log->cancellable);
}

static gboolean
record_thread (LbRank * rank, gpointer data, GError ** error)
{
  (void) rank;
  (void) error;
  *(GThread **) data = g_thread_self ();
  return TRUE;
}

static LingbotSession *
cancel_session (LingbotWorld * w)
{
  g_autoptr (GError) err = NULL;
  LingbotSessionOptions o;
  init_options (&o);
  o.seed = 77;
  o.frames = 0;                 /* live, unbounded */
  o.local_attn_frames = 8;      /* eviction from chunk 2 */
  o.sink_frames = 2;
  LingbotSession *s = lingbot_session_new (w, &o, &err);
  g_assert_no_error (err);
  return s;
}

/* One chunk made and decoded; its latents and frames appended. */
static void
make_chunk (LingbotSession * s, PassLog * log, GByteArray * lat,
    GByteArray * frames)
{
  g_autoptr (GError) err = NULL;
  const guint64 c = lingbot_session_get_chunk_index (s);
  LingbotChunkStats st = { 0 };
  int nf = -1;
  if (log) {
    log->chunk = c;
    log->calls = 0;
  }
  g_assert_true (lingbot_session_generate (s, chunk_keys[c], &st, &err));
  g_assert_no_error (err);
  g_assert_cmpuint (st.index, ==, c);
  if (log)
    g_assert_cmpint (log->calls, ==, N_PASSES);
  const LbTensor *l = lingbot_session_get_latents_tensor (s);
  g_byte_array_append (lat, l->data, (guint) lb_tensor_nbytes (l));
  g_assert_true (lingbot_session_decode (s, NULL, &nf, NULL, &err));
  g_assert_no_error (err);
  g_assert_cmpint (nf, ==, c == 0 ? 13 : 16);
  const LbTensor *f = lingbot_session_get_frames_tensor (s);
  g_byte_array_append (frames, f->data, (guint) lb_tensor_nbytes (f));
}

/* @c, @p: cancel chunk @c after pass @p (-1: before the generate starts)
 * from the pass callback on rank 0, on a world of @n_ranks ranks (a group
 * timeout of 10 s turns a hang into a failure).  The generate fails with
 * the exact error after p + 1 passes, the chunk index and the latents stay;
 * after g_cancellable_reset() chunks c, c + 1, c + 2 and their decoded
 * frames are byte-identical to the uncancelled session's. */
typedef struct
{
  LingbotWorld *world;
  GByteArray *lat, *frames;     /* the uncancelled session, chunks 0-4 */
  GThread *rank0;
} CancelRef;

/* a chunk's latents and decoded frames, f32 */
#define LAT_BYTES ((gsize) 16 * 4 * 8 * 8 * sizeof (float))
#define FRAME_BYTES ((gsize) 3 * 16 * 64 * 64 * sizeof (float))

/* @ref on a world of @n_ranks ranks (a group timeout of 10 s turns a hang
 * into a failure), rank 0's worker thread recorded, nothing generated */
static void
cancel_ref_init (CancelRef * ref, int n_ranks)
{
  g_autoptr (GError) err = NULL;
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  wo.model_path = model_dir;
  wo.devices = n_ranks == 1 ? "cpu:1" : "cpu:2";
  wo.timeout_ms = 10000;
  ref->world = lingbot_world_new (&wo, &err);
  g_assert_no_error (err);
  ref->lat = g_byte_array_new ();
  ref->frames = g_byte_array_new ();
  ref->rank0 = NULL;
  g_assert_true (lb_worker_group_run_on (lingbot_world_get_group (ref->world),
          0, record_thread, &ref->rank0, &err));
  g_assert_no_error (err);
  g_assert_true (ref->rank0 != g_thread_self ());
}

static void
cancel_ref_clear (CancelRef * ref)
{
  g_byte_array_unref (ref->lat);
  g_byte_array_unref (ref->frames);
  lingbot_world_unref (ref->world);
}

/* One try at cancelling chunk @c: a session of the reference's world with
 * a cancellable and the pass callback, chunks 0 to c - 1 made. */
typedef struct
{
  GCancellable *cancellable;
  PassLog log;
  LingbotSession *s;
  GByteArray *lat, *frames;     /* this session's chunks */
} CancelTry;

static void
cancel_try_start (CancelTry * t, CancelRef * ref, int c)
{
  PassLog log = { ref->rank0, 0, 0, 0, -1, NULL };
  t->cancellable = g_cancellable_new ();
  t->log = log;
  t->log.cancellable = t->cancellable;
  t->s = cancel_session (ref->world);
  lingbot_session_set_cancellable (t->s, t->cancellable);
  lingbot_session_set_pass_func (t->s, on_pass, &t->log, NULL);
  t->lat = g_byte_array_new ();
  t->frames = g_byte_array_new ();
  for (int i = 0; i < c; i++)
    make_chunk (t->s, &t->log, t->lat, t->frames);
}

/* after chunk @c failed: the chunk index is still @c, and the latents are
 * those of the last completed chunk */
static void
check_cancel_kept (CancelRef * ref, LingbotSession * s, int c)
{
  g_assert_cmpuint (lingbot_session_get_chunk_index (s), ==, (guint64) c);
  if (c > 0) {
    const LbTensor *l = lingbot_session_get_latents_tensor (s);
    g_assert_true (memcmp (l->data, ref->lat->data + (c - 1) * LAT_BYTES,
            LAT_BYTES) == 0);
  }
}

/* g_cancellable_reset(), then chunk @c again and two more: the latents
 * and frames of chunks 0 to c + 2 byte-identical to the uncancelled
 * session's; frees @t */
static void
cancel_try_finish (CancelTry * t, CancelRef * ref, int c)
{
  g_cancellable_reset (t->cancellable);
  for (int i = c; i < c + 3; i++)
    make_chunk (t->s, &t->log, t->lat, t->frames);
  g_assert_cmpint (t->log.bad, ==, 0);
  g_assert_cmpuint (t->lat->len, ==, (guint) ((c + 3) * LAT_BYTES));
  g_assert_true (memcmp (t->lat->data, ref->lat->data, t->lat->len) == 0);
  g_assert_cmpuint (t->frames->len, ==, (guint) ((c + 3) * FRAME_BYTES));
  g_assert_true (memcmp (t->frames->data, ref->frames->data,
          t->frames->len) == 0);
  lingbot_session_free (t->s);
  g_byte_array_unref (t->lat);
  g_byte_array_unref (t->frames);
  g_object_unref (t->cancellable);
}

static void
check_cancel (CancelRef * ref, int c, int p)
{
  g_autoptr (GError) err = NULL;
  CancelTry t;
  cancel_try_start (&t, ref, c);
  LingbotSession *s = t.s;

  /* the cancelled chunk */
  t.log.chunk = (guint64) c;
  t.log.calls = 0;
  t.log.cancel_at = p;
  if (p < 0)
    g_cancellable_cancel (t.cancellable);
  g_assert_false (lingbot_session_generate (s, chunk_keys[c], NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
  g_autofree char *want = g_strdup_printf ("chunk %d cancelled after %d of "
      "%d DiT passes", c, p + 1, N_PASSES);
  g_assert_cmpstr (err->message, ==, want);
  g_clear_error (&err);
  g_assert_cmpint (t.log.calls, ==, p + 1);
  g_assert_cmpint (t.log.bad, ==, 0);
  check_cancel_kept (ref, s, c);
  /* still cancelled: the next generate fails at once */
  t.log.calls = 0;
  t.log.cancel_at = -1;
  g_assert_false (lingbot_session_generate (s, chunk_keys[c], NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
  g_free (want);
  want = g_strdup_printf ("chunk %d cancelled after 0 of %d DiT passes", c,
      N_PASSES);
  g_assert_cmpstr (err->message, ==, want);
  g_clear_error (&err);
  g_assert_cmpint (t.log.calls, ==, 0);
  g_assert_cmpuint (lingbot_session_get_chunk_index (s), ==, (guint64) c);

  /* reset: the same chunk again and two more, as if never cancelled */
  cancel_try_finish (&t, ref, c);
}

static void
test_cancel (gconstpointer data)
{
  CancelRef ref;
  cancel_ref_init (&ref, GPOINTER_TO_INT (data));

  /* the uncancelled session, with the pass callback: 5 calls per chunk,
   * passes 0-4 in order, on rank 0's thread */
  g_autoptr (GCancellable) unused = g_cancellable_new ();
  PassLog log = { ref.rank0, 0, 0, 0, -1, unused };
  LingbotSession *s = cancel_session (ref.world);
  lingbot_session_set_pass_func (s, on_pass, &log, NULL);
  for (int c = 0; c < 5; c++)
    make_chunk (s, &log, ref.lat, ref.frames);
  g_assert_cmpint (log.bad, ==, 0);
  lingbot_session_free (s);

  /* a later chunk (chunk 2 evicts the oldest non-sink frames on its first
   * pass): cancelled before the generate and after every pass, the clean
   * pass included */
  for (int p = -1; p < N_PASSES; p++)
    check_cancel (&ref, 2, p);
  /* the first chunk (the image's condition, a first-chunk camera) */
  for (int p = -1; p < N_PASSES; p += 2)
    check_cancel (&ref, 0, p);

  cancel_ref_clear (&ref);
}

/* Chunk @c cancelled in its condition encode, before layer @layer of
 * latent frame @segment: the generate fails with the exact error before
 * any DiT pass, the chunk index and the latents stay; after
 * g_cancellable_reset() chunks c, c + 1, c + 2 and their frames are
 * byte-identical to the uncancelled session's (the encoder replays its
 * caches). */
static void
check_cancel_encode (CancelRef * ref, int c, int segment, int layer)
{
  g_autoptr (GError) err = NULL;
  CancelTry t;
  cancel_try_start (&t, ref, c);
  LingbotSession *s = t.s;
  LingbotTestLayerCancel ec = { t.cancellable, segment, layer, 0 };

  lingbot_vae_encoder_set_layer_func (s->enc, lingbot_test_cancel_at_layer,
      &ec);
  t.log.chunk = (guint64) c;
  t.log.calls = 0;
  g_assert_false (lingbot_session_generate (s, chunk_keys[c], NULL, &err));
  lingbot_vae_encoder_set_layer_func (s->enc, NULL, NULL);
  g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
  g_assert_cmpint (ec.n_layers, >, 2);
  g_autofree char *want = g_strdup_printf ("chunk %d cancelled after 0 of "
      "%d DiT passes, in its condition encode: VAE condition encode "
      "cancelled before layer %d of %d of latent frame %d of 4", c, N_PASSES,
      (layer < 0 ? ec.n_layers + layer : layer) + 1, ec.n_layers,
      segment + 1);
  g_assert_cmpstr (err->message, ==, want);
  g_clear_error (&err);
  g_assert_cmpint (t.log.calls, ==, 0);
  check_cancel_kept (ref, s, c);

  cancel_try_finish (&t, ref, c);
}

/* A stop within the condition encode (docs/elements.md: a stop waits for
 * one DiT pass or one encoder layer), on 1 and 2 ranks: chunk 0 (the
 * image) and chunk 1 (zero frames), before the first, a middle and the
 * last layer of some latent frames. */
static void
test_cancel_encode (gconstpointer data)
{
  CancelRef ref;
  cancel_ref_init (&ref, GPOINTER_TO_INT (data));
  LingbotSession *s = cancel_session (ref.world);
  for (int c = 0; c < 4; c++)
    make_chunk (s, NULL, ref.lat, ref.frames);
  lingbot_session_free (s);

  check_cancel_encode (&ref, 0, 0, 0);
  check_cancel_encode (&ref, 0, 0, 5);
  check_cancel_encode (&ref, 0, 3, -1);
  check_cancel_encode (&ref, 1, 0, 0);
  check_cancel_encode (&ref, 1, 2, 7);
  check_cancel_encode (&ref, 1, 3, -1);

  cancel_ref_clear (&ref);
}

static void
count_notify (gpointer data)
{
  (*(int *) data)++;
}

static void
count_pass (LingbotSession * s, guint64 chunk, int pass, int n_passes,
    gpointer user_data)
{
  (void) s;
  (void) chunk;
  (void) pass;
  (void) n_passes;
  (*(int *) user_data) += 100;
}

/* set_pass_func replaces and frees user data; NULL unsets; a cancellable
 * set to NULL no longer cancels. */
static void
test_pass_func_notify (void)
{
  g_autoptr (GError) err = NULL;
  int freed_a = 0, freed_b = 0;
  LingbotSession *s = cancel_session (world1);
  lingbot_session_set_pass_func (s, count_pass, &freed_a, count_notify);
  lingbot_session_set_pass_func (s, NULL, &freed_b, count_notify);
  g_assert_cmpint (freed_a, ==, 1);
  g_assert_cmpint (freed_b, ==, 0);
  GCancellable *c = g_cancellable_new ();
  lingbot_session_set_cancellable (s, c);
  g_cancellable_cancel (c);
  g_assert_false (lingbot_session_generate (s, 0, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
  g_clear_error (&err);
  lingbot_session_set_cancellable (s, NULL);
  g_object_unref (c);
  g_assert_true (lingbot_session_generate (s, 0, NULL, &err));
  g_assert_no_error (err);
  g_assert_cmpuint (lingbot_session_get_chunk_index (s), ==, 1);
  /* unset: not called */
  g_assert_cmpint (freed_a, ==, 1);
  g_assert_cmpint (freed_b, ==, 0);
  lingbot_session_free (s);
  g_assert_cmpint (freed_b, ==, 1);
}

/* ---- lingbot_session_set_failure_func() ---- */

#define SLOW_T_MS 1000

/* rank 0 slower than the rank timeout once, after pass 0 of chunk 1:
 * it stays in the pass callback until the failure callback has been
 * called (rank 1's timeout), then comes back at once, inside the grace.
 * A sleep of 1.5 T stood for that: it held only while rank 1 reached
 * the boundary within 0.5 T of rank 0 and rank 0 ran again within 0.5 T
 * of its sleep's end (a process held off the CPUs across both deadlines
 * woke both at once, and the call could find rank 0 back). */
typedef struct
{
  GMutex lock;
  GCond cond;
  gboolean slow;                /* rank 0 stays away after pass 0 */
  gboolean back;                /* rank 0 returned from the pass callback */
  gint calls;                   /* failure callback calls */
  gboolean back_at_call;        /* rank 0 was back at the call */
  GThread *thread;              /* the call's thread */
  guint64 chunk;
  GError *error;                /* a copy of the call's */
  int freed;                    /* the GDestroyNotify ran */
} SlowLog;

static void
slow_pass (LingbotSession * s, guint64 chunk, int pass, int n_passes,
    gpointer user_data)
{
  SlowLog *log = user_data;
  /* bounded: without the call, rank 0 is abandoned at 2 T and the
   * generate returns while it still waits (log.back unset: the test
   * fails); the wait ends after 60 s all the same */
  gint64 until = g_get_monotonic_time () + 60 * G_USEC_PER_SEC;
  (void) s;
  (void) chunk;
  (void) n_passes;
  g_mutex_lock (&log->lock);
  if (pass == 0 && log->slow) {
    log->slow = FALSE;
    while (log->calls == 0
        && g_cond_wait_until (&log->cond, &log->lock, until));
    log->back = TRUE;
  }
  g_mutex_unlock (&log->lock);
}

static void
on_failure (LingbotSession * s, guint64 chunk, const GError * error,
    gpointer user_data)
{
  SlowLog *log = user_data;
  (void) s;
  g_mutex_lock (&log->lock);
  log->back_at_call = log->back;
  log->thread = g_thread_self ();
  log->chunk = chunk;
  g_clear_error (&log->error);
  log->error = g_error_copy (error);
  log->calls++;
  g_cond_broadcast (&log->cond);
  g_mutex_unlock (&log->lock);
}

static void
slow_log_freed (gpointer data)
{
  ((SlowLog *) data)->freed++;
}

/* Rank 0 is slower than the rank timeout T once (in the pass callback
 * of chunk 1's first pass until the failure callback is called): rank 1
 * times out waiting for it, and the failure callback gets that timeout at
 * once, on rank 1's thread, while rank 0 is still away (were the call
 * made only with the generate's return, rank 0 would come back only after
 * its abandonment, 2 T, and the world would be broken); the generate
 * returns when rank 0 is back (within the grace T: not abandoned), with
 * the same error.  The world is not broken: the chunk is made on the next
 * try, with no further call. */
static void
test_failure_func (void)
{
  g_autoptr (GError) err = NULL;
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  SlowLog log = { 0 };
  GThread *caller = g_thread_self ();

  g_mutex_init (&log.lock);
  g_cond_init (&log.cond);

  wo.model_path = model_dir;
  wo.devices = "cpu:2";
  wo.timeout_ms = SLOW_T_MS;
  LingbotWorld *w = lingbot_world_new (&wo, &err);
  g_assert_no_error (err);
  LingbotSession *s = cancel_session (w);
  lingbot_session_set_pass_func (s, slow_pass, &log, NULL);
  lingbot_session_set_failure_func (s, on_failure, &log, slow_log_freed);

  g_assert_true (lingbot_session_generate (s, chunk_keys[0], NULL, &err));
  g_assert_no_error (err);
  g_assert_cmpint (log.calls, ==, 0);

  g_mutex_lock (&log.lock);
  log.slow = TRUE;
  g_mutex_unlock (&log.lock);
  g_assert_false (lingbot_session_generate (s, chunk_keys[1], NULL, &err));
  g_assert_true (log.back);
  g_assert_cmpint (log.calls, ==, 1);
  g_assert_false (log.back_at_call);
  g_assert_true (log.thread != caller);
  g_assert_cmpuint (log.chunk, ==, 1);
  g_assert_error (log.error, LB_ERROR, LB_ERROR_TIMEOUT);
  g_assert_cmpstr (log.error->message, ==, "rank 1: DiT chunk: rank 1 "
      "waited 1000 ms for rank 0 at pass boundary 1");
  /* rank 0 came back within the grace: the root cause, not an
   * abandonment */
  g_assert_error (err, LB_ERROR, LB_ERROR_TIMEOUT);
  g_assert_cmpstr (err->message, ==, log.error->message);
  g_clear_error (&err);
  g_assert_false (lingbot_world_is_broken (w));
  g_assert_cmpuint (lingbot_session_get_chunk_index (s), ==, 1);

  /* usable: chunk 1 again, no call */
  g_assert_true (lingbot_session_generate (s, chunk_keys[1], NULL, &err));
  g_assert_no_error (err);
  g_assert_cmpuint (lingbot_session_get_chunk_index (s), ==, 2);
  g_assert_cmpint (log.calls, ==, 1);

  g_assert_cmpint (log.freed, ==, 0);
  lingbot_session_free (s);
  g_assert_cmpint (log.freed, ==, 1);
  g_clear_error (&log.error);
  g_mutex_clear (&log.lock);
  g_cond_clear (&log.cond);
  lingbot_world_unref (w);
}

/* lingbot_control_rewind(): undoes exactly the last advance, live and
 * offline; once only; not after a reset. */
static void
snapshot (LingbotControl * ctl, double *poses, float *rel, gint * chunk)
{
  memcpy (poses, lingbot_control_get_chunk_poses (ctl), 64 * sizeof (double));
  memcpy (rel, lingbot_control_get_chunk_rel_poses (ctl), 64 * sizeof (float));
  *chunk = lingbot_control_get_chunk_index (ctl);
}

/* A DiT whose widths do not fit the VAE or the ray map is refused when
 * the world loads, naming the tensor (issue 2.8), not at chunk 0. */
static void
test_dit_widths (void)
{
  static const struct
  {
    const char *name;
    int in_dim, ctl, out_dim;
    const char *tensor, *rest;
  } cases[] = {
    {"ctl1540", 36, 1540, 16, "patch_embedding_wancamctrl.weight",
        "has 1540 input features, expected 1536 (the 384-channel camera ray "
          "map in 2x2 patches)"},
    {"in20", 20, 1536, 16, "patch_embedding.weight",
        "has 20 input channels, expected 36 (16 latent + 20 condition "
          "channels of the VAE)"},
    {"out8", 36, 1536, 8, "head.head.bias",
        "gives 8 output channels, expected 16 (the VAE's latent channels)"},
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    LingbotDitConfig cfg;
    tiny_config (&cfg);
    cfg.in_dim = cases[i].in_dim;
    cfg.control_in_features = cases[i].ctl;
    cfg.out_dim = cases[i].out_dim;
    g_autofree char *dir = g_build_filename (tmpdir, cases[i].name, NULL);
    write_model_with (dir, &cfg, TRUE, TRUE);
    LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
    wo.model_path = dir;
    g_autoptr (GError) err = NULL;
    g_assert_null (lingbot_world_new (&wo, &err));
    g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
    g_autofree char *want = g_strdup_printf ("DiT checkpoint %s/"
        "transformers: tensor %s %s", dir, cases[i].tensor, cases[i].rest);
    g_assert_cmpstr (err->message, ==, want);
  }
}

static void
test_control_rewind (void)
{
  g_autoptr (GError) err = NULL;
  LingbotControlConfig cc;
  lingbot_control_config_init (&cc, IMG_W, IMG_H, 64, 64);
  g_autoptr (LingbotControl) ctl = lingbot_control_new (&cc, &err);
  g_assert_no_error (err);
  lingbot_control_rewind (ctl); /* nothing to undo */
  g_assert_cmpint (lingbot_control_get_chunk_index (ctl), ==, -1);
  g_assert_true (lingbot_control_advance (ctl, LINGBOT_KEY_W, &err));
  double p1[64], p2[64], q[64];
  float r1[64], r2[64], rq[64];
  gint c1, c2, cq;
  LingbotCamera cam1 = *lingbot_control_get_camera (ctl);
  snapshot (ctl, p1, r1, &c1);
  g_assert_true (lingbot_control_advance (ctl, LINGBOT_KEY_D |
          LINGBOT_KEY_L, &err));
  snapshot (ctl, p2, r2, &c2);
  double prev2[16];
  memcpy (prev2, lingbot_control_get_previous_pose (ctl), sizeof prev2);
  lingbot_control_rewind (ctl);
  snapshot (ctl, q, rq, &cq);
  g_assert_cmpint (cq, ==, c1);
  g_assert_true (memcmp (q, p1, sizeof q) == 0);
  g_assert_true (memcmp (rq, r1, sizeof rq) == 0);
  g_assert_null (lingbot_control_get_previous_pose (ctl));      /* chunk 0 */
  g_assert_true (memcmp (lingbot_control_get_camera (ctl), &cam1,
          sizeof cam1) == 0);
  lingbot_control_rewind (ctl); /* once only */
  g_assert_cmpint (lingbot_control_get_chunk_index (ctl), ==, c1);
  /* the same advance again gives the same chunk */
  g_assert_true (lingbot_control_advance (ctl, LINGBOT_KEY_D |
          LINGBOT_KEY_L, &err));
  snapshot (ctl, q, rq, &cq);
  g_assert_cmpint (cq, ==, c2);
  g_assert_true (memcmp (q, p2, sizeof q) == 0);
  g_assert_true (memcmp (rq, r2, sizeof rq) == 0);
  g_assert_true (memcmp (lingbot_control_get_previous_pose (ctl), prev2,
          sizeof prev2) == 0);
  /* a reset wins over a rewind */
  lingbot_control_reset_pose (ctl);
  lingbot_control_rewind (ctl);
  g_assert_cmpint (lingbot_control_get_chunk_index (ctl), ==, c2);
  g_assert_true (lingbot_control_advance (ctl, 0, &err));
  g_assert_null (lingbot_control_get_previous_pose (ctl));      /* first */

  /* offline: the chunk index and the relative poses */
  enum
  { N = 29 };
  float poses[N * 16];
  for (int i = 0; i < N; i++) {
    float *m = poses + 16 * i;
    memset (m, 0, 16 * sizeof (float));
    m[0] = m[5] = m[10] = m[15] = 1.0f;
    m[3] = 0.1f * (float) i;
    m[11] = 0.02f * (float) (i * i);
  }
  cc.has_intrinsics = TRUE;
  const float k[4] = { 500.f, 500.f, 416.f, 240.f };
  memcpy (cc.intrinsics, k, sizeof k);
  g_autoptr (LingbotControl) off = lingbot_control_new_offline (&cc, poses,
      N, N, &err);
  g_assert_no_error (err);
  g_assert_true (lingbot_control_advance (off, 0, &err));
  memcpy (r1, lingbot_control_get_chunk_rel_poses (off), sizeof r1);
  g_assert_true (lingbot_control_advance (off, 0, &err));
  memcpy (r2, lingbot_control_get_chunk_rel_poses (off), sizeof r2);
  g_assert_false (lingbot_control_advance (off, 0, &err));      /* the end */
  g_clear_error (&err);
  lingbot_control_rewind (off);
  g_assert_cmpint (lingbot_control_get_chunk_index (off), ==, 0);
  g_assert_true (memcmp (lingbot_control_get_chunk_rel_poses (off), r1,
          sizeof r1) == 0);
  g_assert_true (lingbot_control_advance (off, 0, &err));
  g_assert_true (memcmp (lingbot_control_get_chunk_rel_poses (off), r2,
          sizeof r2) == 0);
}

static void
test_errors (void)
{
  g_autoptr (GError) err = NULL;
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;

  /* bad devices */
  wo.model_path = model_dir;
  wo.devices = "cpu:zero";
  g_assert_null (lingbot_world_new (&wo, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (err->message, "cpu:zero"));
  g_clear_error (&err);
  wo.devices = "cpu:1";

  /* no model directory */
  g_autofree char *nowhere = g_build_filename (tmpdir, "nowhere", NULL);
  wo.model_path = nowhere;
  g_assert_null (lingbot_world_new (&wo, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (err->message, nowhere));
  g_clear_error (&err);

  /* missing VAE, missing text encoder */
  g_autofree char *partial = g_build_filename (tmpdir, "partial", NULL);
  write_model (partial, FALSE, FALSE);
  wo.model_path = partial;
  g_assert_null (lingbot_world_new (&wo, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (err->message, "Wan2.1_VAE.pth"));
  g_clear_error (&err);
  g_autofree char *vae = g_build_filename (partial,
      "Wan2.1_VAE.safetensors", NULL);
  g_assert_true (lingbot_vae_write_random (vae, 8, 5, &err));
  g_assert_null (lingbot_world_new (&wo, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (err->message, "models_t5_umt5-xxl-enc-bf16.pth"));
  g_clear_error (&err);
  /* missing DiT */
  g_autofree char *nodit = g_build_filename (tmpdir, "nodit", NULL);
  g_assert_cmpint (g_mkdir_with_parents (nodit, 0755), ==, 0);
  wo.model_path = nodit;
  g_assert_null (lingbot_world_new (&wo, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (err->message, "transformers"));
  g_clear_error (&err);

  /* image not decodable */
  LingbotSessionOptions o;
  init_options (&o);
  g_autofree char *bad = g_build_filename (tmpdir, "bad.jpg", NULL);
  g_assert_true (g_file_set_contents (bad, "not a jpeg at all", -1, NULL));
  o.image_path = bad;
  g_assert_null (lingbot_session_new (world1, &o, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_FORMAT);
  g_assert_nonnull (strstr (err->message, bad));
  g_clear_error (&err);
  g_autofree char *missing = g_build_filename (tmpdir, "missing.jpg", NULL);
  o.image_path = missing;
  g_assert_null (lingbot_session_new (world1, &o, &err));
  g_assert_nonnull (strstr (err->message, missing));
  g_clear_error (&err);

  /* no image */
  init_options (&o);
  o.image_rgb = NULL;
  g_assert_null (lingbot_session_new (world1, &o, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (err->message, "no reference image"));
  g_clear_error (&err);

  /* sizes not multiples of 16 */
  init_options (&o);
  o.width = 72;
  g_assert_null (lingbot_session_new (world1, &o, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (err->message, "72x64"));
  g_assert_nonnull (strstr (err->message, "multiples of 16"));
  g_clear_error (&err);
  o.width = 64;
  o.height = 0;
  g_assert_null (lingbot_session_new (world1, &o, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_clear_error (&err);

  /* bad schedule */
  init_options (&o);
  const int idx[2] = { 0, -3 };
  o.timestep_indices = idx;
  o.n_timestep_indices = 2;
  g_assert_null (lingbot_session_new (world1, &o, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==,
      "timestep-indices: '-3' is not an index in [0, 999]");
  g_clear_error (&err);
  /* the library refuses what the elements refuse: out of order */
  const int unordered[2] = { 250, 0 };
  o.timestep_indices = unordered;
  g_assert_null (lingbot_session_new (world1, &o, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_true (g_str_has_prefix (err->message, "timestep-indices: "
          "'250,0' is not strictly increasing (0 after 250)"));
  g_clear_error (&err);
}

/* ---- the decode beside generation (lingbot_session_attach_decoder) ---- */

#define OV_FRAMES 61            /* 4 chunks: 13 + 16 + 16 + 16 */
#define OV_CHUNKS 4

typedef struct
{
  GArray *frames[OV_CHUNKS];    /* float, every decoded frame */
  int n[OV_CHUNKS];
} Decoded;

static void
decoded_clear (Decoded * d)
{
  for (int c = 0; c < OV_CHUNKS; c++)
    g_clear_pointer (&d->frames[c], g_array_unref);
}

static void
keep_frames (LingbotSession * s, Decoded * d, int c, int n)
{
  const LbTensor *f = lingbot_session_get_frames_tensor (s);
  d->frames[c] = g_array_new (FALSE, FALSE, sizeof (float));
  d->n[c] = n;
  check_frames (f, n);
  for (int ch = 0; ch < 3; ch++)
    g_array_append_vals (d->frames[c], (const float *) f->data +
        (gsize) ch * f->shape[1] * 64 * 64, (guint) n * 64 * 64);
}

static guint
ov_keys (int c)
{
  static const guint keys[OV_CHUNKS] = { LINGBOT_KEY_W, LINGBOT_KEY_A,
    LINGBOT_KEY_W | LINGBOT_KEY_J, 0
  };
  return keys[c];
}

static LingbotSession *
ov_session (LingbotWorld * w, const char *decode_devices, gboolean attach)
{
  g_autoptr (GError) err = NULL;
  LingbotSessionOptions o;
  init_options (&o);
  o.frames = OV_FRAMES;
  LingbotSession *s = lingbot_session_new (w, &o, &err);
  g_assert_no_error (err);
  if (attach) {
    g_assert_true (lingbot_session_attach_decoder (s, decode_devices, 2, &err));
    g_assert_no_error (err);
    g_assert_true (lingbot_session_has_decoder (s));
    g_assert_cmpint (lingbot_session_get_n_slots (s), ==, 2);
  }
  return s;
}

static void
ov_generate (LingbotSession * s, int c)
{
  g_autoptr (GError) err = NULL;
  g_assert_true (lingbot_session_generate (s, ov_keys (c), NULL, &err));
  g_assert_no_error (err);
}

static void
ov_decode (LingbotSession * s, int c, Decoded * d)
{
  g_autoptr (GError) err = NULL;
  LingbotChunkStats st = { 0 };
  int n = -1;
  gboolean ok = lingbot_session_decode_chunk (s, (guint64) c, &n, &st, &err);
  g_assert_no_error (err);
  g_assert_true (ok);
  g_assert_cmpuint (st.index, ==, (guint64) c);
  g_assert_cmpint (st.decode_end_us, >=, st.decode_start_us);
  keep_frames (s, d, c, n);
}

/* the serial reference: generate and decode in lockstep on the DiT ranks */
static void
ov_serial (LingbotWorld * w, Decoded * d)
{
  g_autoptr (LingbotSession) s = ov_session (w, NULL, FALSE);
  for (int c = 0; c < OV_CHUNKS; c++) {
    ov_generate (s, c);
    ov_decode (s, c, d);
  }
  g_assert_cmpuint (lingbot_session_get_n_spills (s), ==, 0);
  g_assert_cmpuint (lingbot_session_get_latent_host_bytes (s), ==,
      OV_CHUNKS * 16 * 4 * 8 * 8 * sizeof (float));
}

static void
ov_assert_equal (const Decoded * a, const Decoded * b, double tol)
{
  for (int c = 0; c < OV_CHUNKS; c++) {
    g_assert_cmpint (a->n[c], ==, b->n[c]);
    g_assert_cmpuint (a->frames[c]->len, ==, b->frames[c]->len);
    if (tol == 0.0) {
      g_assert_cmpmem (a->frames[c]->data, a->frames[c]->len * sizeof (float),
          b->frames[c]->data, b->frames[c]->len * sizeof (float));
      continue;
    }
    double worst = 0;
    for (guint i = 0; i < a->frames[c]->len; i++)
      worst = MAX (worst, fabs (g_array_index (a->frames[c], float, i) -
              g_array_index (b->frames[c], float, i)));
    g_assert_cmpfloat (worst, <=, tol);
  }
}

typedef struct
{
  LingbotSession *s;
  GAsyncQueue *q;               /* chunk index + 1 */
  Decoded d;
} DecodeThread;

static gpointer
decode_thread (gpointer data)
{
  DecodeThread *t = data;
  for (int c = 0; c < OV_CHUNKS; c++) {
    int got = GPOINTER_TO_INT (g_async_queue_pop (t->q)) - 1;
    g_assert_cmpint (got, ==, c);
    ov_decode (t->s, c, &t->d);
  }
  return NULL;
}

/* The decoder on a worker group of its own, fed through the channel:
 * byte-identical to the serial decode, with nothing of the latents in host
 * memory; as a second thread beside generation too */
static void
test_overlap (gconstpointer data)
{
  const int n = GPOINTER_TO_INT (data);
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotWorld) w = NULL;
  Decoded ref = { 0 }, lag = { 0 };

  /* (the tiny DiT's 2 heads allow 1 or 2 Ulysses ranks) */
  w = lingbot_world_ref (n == 1 ? world1 : world2);
  ov_serial (w, &ref);

  /* the decode one chunk behind: chunk k + 1 goes into the second slot
   * while chunk k waits for its decode */
  {
    g_autoptr (LingbotSession) s = ov_session (w, NULL, TRUE);
    ov_generate (s, 0);
    for (int c = 0; c < OV_CHUNKS; c++) {
      lingbot_session_claim_chunk (s, (guint64) c);
      if (c + 1 < OV_CHUNKS)
        ov_generate (s, c + 1);
      ov_decode (s, c, &lag);
    }
    g_assert_cmpuint (lingbot_session_get_n_spills (s), ==, 0);
    g_assert_cmpuint (lingbot_session_get_latent_host_bytes (s), ==, 0);
  }
  ov_assert_equal (&ref, &lag, 0.0);

  /* a decode thread beside the generating one */
  {
    DecodeThread t = { 0 };
    t.s = ov_session (w, NULL, TRUE);
    t.q = g_async_queue_new ();
    GThread *th = g_thread_new ("decode", decode_thread, &t);
    for (int c = 0; c < OV_CHUNKS; c++) {
      ov_generate (t.s, c);
      lingbot_session_claim_chunk (t.s, (guint64) c);
      g_async_queue_push (t.q, GINT_TO_POINTER (c + 1));
    }
    g_thread_join (th);
    g_assert_cmpuint (lingbot_session_get_n_spills (t.s), ==, 0);
    g_assert_cmpuint (lingbot_session_get_latent_host_bytes (t.s), ==, 0);
    ov_assert_equal (&ref, &t.d, 0.0);
    decoded_clear (&t.d);
    g_async_queue_unref (t.q);
    lingbot_session_free (t.s);
  }
  decoded_clear (&lag);
  decoded_clear (&ref);
}

/* What a frames function saw during one decode: the ranges in call order
 * and, for each, the frames' bytes at that moment (laid out as the
 * session's frames tensor, [3, T, 64, 64]) */
typedef struct
{
  GArray *ranges;               /* int pairs (first, n) */
  float *snap;                  /* 3 x T x 64 x 64 */
  int64_t t_max;
  gboolean in_decode;           /* set around the decode call */
} Streamed;

static void
streamed_frames (const LingbotFrames * frames, int first, int n, gpointer data)
{
  Streamed *st = data;
  const LbTensor *f = lingbot_frames_tensor (frames);
  int pair[2] = { first, n };

  g_assert_true (st->in_decode);
  g_assert_cmpint (f->shape[1], ==, st->t_max);
  g_array_append_vals (st->ranges, pair, 2);
  for (int ch = 0; ch < 3; ch++)
    memcpy (st->snap + ((gsize) ch * st->t_max + first) * 64 * 64,
        (const float *) f->data + ((gsize) ch * f->shape[1] + first) * 64 * 64,
        (gsize) n * 64 * 64 * sizeof (float));
}

/* Decodes chunk @c of @s with a frames function: the ranges it was given
 * are exactly @want (pairs, @n_want of them), each range's bytes when it
 * was handed on are its final bytes; the frames are kept in @d. */
static void
streamed_decode (LingbotSession * s, int c, gboolean by_chunk,
    const int *want, int n_want, Decoded * d)
{
  g_autoptr (GError) err = NULL;
  Streamed st = { 0 };
  const LbTensor *f = lingbot_session_get_frames_tensor (s);
  int n = -1;

  st.ranges = g_array_new (FALSE, FALSE, sizeof (int));
  st.t_max = f->shape[1];
  st.snap = g_new0 (float, (gsize) 3 * st.t_max * 64 * 64);
  lingbot_session_set_frames_func (s, streamed_frames, &st);
  st.in_decode = TRUE;
  gboolean ok = by_chunk ?
      lingbot_session_decode_chunk (s, (guint64) c, &n, NULL, &err) :
      lingbot_session_decode (s, NULL, &n, NULL, &err);
  st.in_decode = FALSE;
  lingbot_session_set_frames_func (s, NULL, NULL);
  g_assert_no_error (err);
  g_assert_true (ok);
  g_assert_cmpuint (st.ranges->len, ==, (guint) n_want * 2);
  g_assert_cmpmem (st.ranges->data, st.ranges->len * sizeof (int), want,
      (gsize) n_want * 2 * sizeof (int));
  for (int ch = 0; ch < 3; ch++)
    g_assert_cmpmem (st.snap + (gsize) ch * st.t_max * 64 * 64,
        (gsize) n * 64 * 64 * sizeof (float),
        (const float *) f->data + (gsize) ch * st.t_max * 64 * 64,
        (gsize) n * 64 * 64 * sizeof (float));
  keep_frames (s, d, c, n);
  g_array_unref (st.ranges);
  g_free (st.snap);
}

/* lingbot_session_set_frames_func(): each latent frame's frames handed on
 * as they are made, final bytes, in order; the same frames as without it,
 * serial on 1 and 2 ranks (the height-sharded decode waits for every band)
 * and on a decoder attached beside generation; a bounded session's last
 * chunk handed on only up to its count */
static void
test_frames_func (void)
{
  static const int first[] = { 0, 1, 1, 4, 5, 4, 9, 4 };
  static const int later[] = { 0, 4, 4, 4, 8, 4, 12, 4 };
  LingbotWorld *worlds[2] = { world1, world2 };

  for (int wi = 0; wi < 2; wi++) {
    Decoded ref = { 0 }, serial = { 0 }, attached = { 0 };

    ov_serial (worlds[wi], &ref);
    {
      g_autoptr (LingbotSession) s = ov_session (worlds[wi], NULL, FALSE);
      for (int c = 0; c < OV_CHUNKS; c++) {
        ov_generate (s, c);
        streamed_decode (s, c, FALSE, c ? later : first, 4, &serial);
      }
    }
    ov_assert_equal (&ref, &serial, 0.0);
    if (wi == 1) {
      g_autoptr (LingbotSession) s = ov_session (worlds[wi], NULL, TRUE);
      for (int c = 0; c < OV_CHUNKS; c++) {
        ov_generate (s, c);
        lingbot_session_claim_chunk (s, (guint64) c);
        streamed_decode (s, c, TRUE, c ? later : first, 4, &attached);
      }
      ov_assert_equal (&ref, &attached, 0.0);
    }
    decoded_clear (&attached);
    decoded_clear (&serial);
    decoded_clear (&ref);
  }

  /* 20 frames: 13, then 7 of the second chunk's 16 */
  {
    g_autoptr (GError) err = NULL;
    static const int cut[] = { 0, 4, 4, 3 };
    LingbotSessionOptions o;
    Decoded d = { 0 };

    init_options (&o);
    o.frames = 20;
    g_autoptr (LingbotSession) s = lingbot_session_new (world2, &o, &err);
    g_assert_no_error (err);
    ov_generate (s, 0);
    streamed_decode (s, 0, FALSE, first, 4, &d);
    ov_generate (s, 1);
    streamed_decode (s, 1, FALSE, cut, 2, &d);
    g_assert_cmpint (d.n[1], ==, 7);
    decoded_clear (&d);
  }
}

/* Chunks nobody claimed are spilled to host memory when their slot is
 * needed (and a read spills too), released ones drained; the decode from
 * a spill is the same; a decoder on other ranks than the DiT's */
static void
test_overlap_spill (void)
{
  g_autoptr (GError) err = NULL;
  const gsize chunk_bytes = 16 * 4 * 8 * 8 * sizeof (float);
  Decoded ref = { 0 }, d = { 0 }, other = { 0 };

  ov_serial (world2, &ref);
  {
    g_autoptr (LingbotSession) s = ov_session (world2, NULL, TRUE);
    int64_t shape[5] = { 1, 16, 4, 8, 8 };
    g_autoptr (LbTensor) lat = lb_tensor_new (LB_DTYPE_F32, 5, shape);
    g_autoptr (LingbotSession) serial = ov_session (world2, NULL, FALSE);

    ov_generate (s, 0);
    ov_generate (s, 1);
    /* chunk 0 still unclaimed when chunk 2 needs its slot */
    ov_generate (s, 2);
    g_assert_cmpuint (lingbot_session_get_n_spills (s), ==, 1);
    g_assert_cmpuint (lingbot_session_get_latent_host_bytes (s), ==,
        chunk_bytes);
    ov_decode (s, 0, &d);
    /* reading chunk 1 spills it: its bytes are the serial session's */
    g_assert_true (lingbot_session_read_chunk_tensor (s, 1, lat, &err));
    g_assert_no_error (err);
    g_assert_cmpuint (lingbot_session_get_n_spills (s), ==, 2);
    ov_generate (serial, 0);
    ov_generate (serial, 1);
    g_assert_cmpmem (lat->data, chunk_bytes,
        lingbot_session_get_latents_tensor (serial)->data, chunk_bytes);
    ov_decode (s, 1, &d);
    ov_decode (s, 2, &d);
    ov_generate (s, 3);
    ov_decode (s, 3, &d);
    g_assert_cmpuint (lingbot_session_get_latent_host_bytes (s), ==,
        2 * chunk_bytes);
    ov_assert_equal (&ref, &d, 0.0);

    /* out of order, twice, after the end */
    g_assert_false (lingbot_session_decode_chunk (s, 3, NULL, NULL, &err));
    g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
    g_assert_cmpstr (err->message, ==, "session: chunk 3 cannot be decoded "
        "(4 decoded, 4 generated)");
    g_clear_error (&err);
    /* attach after the first chunk */
    g_assert_false (lingbot_session_attach_decoder (serial, NULL, 2, &err));
    g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
    g_assert_cmpstr (err->message, ==,
        "session: attach the decoder before the first chunk");
    g_clear_error (&err);
  }
  {
    /* released chunks are drained (no host copy) and skipped */
    g_autoptr (LingbotSession) s = ov_session (world2, NULL, TRUE);
    Decoded skip = { 0 };
    ov_generate (s, 0);
    lingbot_session_release_chunk (s, 0);
    ov_generate (s, 1);
    ov_generate (s, 2);
    g_assert_false (lingbot_session_decode_chunk (s, 2, NULL, NULL, &err));
    g_assert_cmpstr (err->message, ==,
        "session: chunk 2 decoded before chunk 1");
    g_clear_error (&err);
    lingbot_session_claim_chunk (s, 1);
    ov_decode (s, 1, &skip);
    g_assert_cmpuint (lingbot_session_get_n_spills (s), ==, 0);
    g_assert_cmpuint (lingbot_session_get_latent_host_bytes (s), ==, 0);
    decoded_clear (&skip);
  }
  for (int i = 0; i < 3; i++) {
    /* the decode on other ranks than the DiT's (1 for 2, 3 and 4 for 1):
     * the same frames, byte for byte (other height bands, the same
     * order of every sum: docs/design.md "Determinism") */
    static const char *const devs[] = { "cpu:1", "cpu:3", "cpu:4" };
    static const int ranks[] = { 1, 3, 4 };
    Decoded r1 = { 0 };
    if (i > 0)
      ov_serial (world1, &r1);
    g_autoptr (LingbotSession) s = ov_session (i ? world1 : world2, devs[i],
        TRUE);
    g_assert_cmpint (lingbot_session_get_decode_ranks (s), ==, ranks[i]);
    for (int c = 0; c < OV_CHUNKS; c++) {
      ov_generate (s, c);
      ov_decode (s, c, &other);
    }
    g_assert_cmpuint (lingbot_session_get_latent_host_bytes (s), ==, 0);
    ov_assert_equal (i ? &r1 : &ref, &other, 0.0);
    decoded_clear (&other);
    decoded_clear (&r1);
    if (i > 0)
      continue;
    g_assert_false (lingbot_session_attach_decoder (s, "cpu:1", 2, &err));
    g_assert_cmpstr (err->message, ==,
        "session: a decoder is attached already");
    g_clear_error (&err);
  }
  decoded_clear (&ref);
  decoded_clear (&d);
  decoded_clear (&other);
}

/* The latents of 2 chunks (W held) of a session on @w with
 * LingbotSessionOptions.max_attention_size @span. */
static GByteArray *
span_latents (LingbotWorld * w, int span)
{
  g_autoptr (GError) err = NULL;
  LingbotSessionOptions o;
  init_options (&o);
  o.max_attention_size = span;
  g_autoptr (LingbotSession) s = lingbot_session_new (w, &o, &err);
  g_assert_no_error (err);
  GByteArray *lat = g_byte_array_new ();
  for (int c = 0; c < 2; c++) {
    g_assert_true (lingbot_session_generate (s, LINGBOT_KEY_W, NULL, &err));
    g_assert_no_error (err);
    const LbTensor *l = lingbot_session_get_latents_tensor (s);
    g_byte_array_append (lat, l->data, (guint) lb_tensor_nbytes (l));
  }
  return lat;
}

static LingbotWorld *
span_world (const char *name, int config_span)
{
  g_autoptr (GError) err = NULL;
  LingbotDitConfig cfg;
  tiny_config (&cfg);
  cfg.max_attention_size = config_span;
  g_autofree char *dir = g_build_filename (tmpdir, name, NULL);
  write_model_with (dir, &cfg, TRUE, TRUE);
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  wo.model_path = dir;
  LingbotWorld *w = lingbot_world_new (&wo, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_dit_get_config (lingbot_world_get_dit
          (w))->max_attention_size, ==, config_span);
  return w;
}

static gboolean
same_bytes (const GByteArray * a, const GByteArray * b)
{
  return a->len == b->len && memcmp (a->data, b->data, a->len) == 0;
}

/* max_attention_size (spec 1.8) of the tiny model (cache 6 frames x 16
 * tokens = 96): the config's capacity is the default's bytes; the
 * config's 40 changes them; the session's value wins over the config's
 * both ways; negative values are refused, in the session options and in
 * config.json. */
static void
test_max_attention (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (GByteArray) def = span_latents (world1, 0);
  g_assert_cmpuint (def->len, ==, 2 * LAT_BYTES);

  g_autoptr (LingbotWorld) wcap = span_world ("span96", 96);
  g_autoptr (GByteArray) cap = span_latents (wcap, 0);
  g_assert_true (same_bytes (cap, def));

  g_autoptr (LingbotWorld) w40 = span_world ("span40", 40);
  g_autoptr (GByteArray) c40 = span_latents (w40, 0);
  g_assert_false (same_bytes (c40, def));
  /* chunk 0 already: 64 tokens cached, 40 attended */
  g_assert_true (memcmp (c40->data, def->data, LAT_BYTES) != 0);
  /* the session's span over the config's */
  g_autoptr (GByteArray) o96 = span_latents (w40, 96);
  g_assert_true (same_bytes (o96, def));
  g_autoptr (GByteArray) omax = span_latents (w40, G_MAXINT);
  g_assert_true (same_bytes (omax, def));
  g_autoptr (GByteArray) o40 = span_latents (world1, 40);
  g_assert_true (same_bytes (o40, c40));

  LingbotSessionOptions o;
  init_options (&o);
  o.max_attention_size = -1;
  g_assert_null (lingbot_session_new (world1, &o, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, "session: max_attention_size -1 is "
      "negative (tokens; 0 = the model's)");
  g_clear_error (&err);

  /* a config.json that says -3 */
  g_autofree char *cj = g_build_filename (tmpdir, "span40", "transformers",
      "config.json", NULL);
  g_autofree char *text = NULL;
  g_assert_true (g_file_get_contents (cj, &text, NULL, &err));
  g_autoptr (GRegex) re = g_regex_new ("\"max_attention_size\" : 40", 0, 0,
      NULL);
  g_autofree char *bad = g_regex_replace_literal (re, text, -1, 0,
      "\"max_attention_size\" : -3", 0, NULL);
  g_assert_cmpstr (bad, !=, text);
  g_assert_true (g_file_set_contents (cj, bad, -1, &err));
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  g_autofree char *dir = g_build_filename (tmpdir, "span40", NULL);
  wo.model_path = dir;
  g_assert_null (lingbot_world_new (&wo, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, "DiT config: max_attention_size -3 is "
      "negative (tokens; 0 = the KV cache's capacity)");
}

/* ------------------------------------------------------------------------ */
/* key restarts (lingbot_session_set_restart_func())                        */
/* ------------------------------------------------------------------------ */

/* One chunk's script: generated with @start; the restart function answers
 * @to when asked at @at passes (-1: never), or, with @storm, a set other
 * than the current one at every ask (toggling @start / @to). */
typedef struct
{
  guint start;
  int at;
  guint to;
  gboolean storm;
  guint want_keys;              /* the keys the chunk ends with */
  guint want_restarts;
  guint want_discarded;
  int want_asks;                /* calls of the restart function */
} RestartScript;

#define KW LINGBOT_KEY_W
#define KS LINGBOT_KEY_S
#define KA LINGBOT_KEY_A
#define KD LINGBOT_KEY_D
static const RestartScript restart_script[] = {
  /* swapped before the first pass: free, then asked after each of the 5
   * passes */
  {KW, 0, KD, FALSE, KD, 1, 0, 1 + 5},
  /* after the 2nd pass: 2 passes discarded; the rerun is asked after each
   * pass again (not before its first) */
  {KW | LINGBOT_KEY_J, 2, KA, FALSE, KA, 1, 2, 3 + 5},
  /* after the last denoising pass, in the first chunk that evicts */
  {KD, 4, KA | LINGBOT_KEY_L, FALSE, KA | LINGBOT_KEY_L, 1, 4, 5 + 5},
  /* a key storm, max_restarts 2: swapped before pass 0, restarted after
   * the first pass of the first and of the second run, the third runs out */
  {KS, -1, KW, TRUE, KW, 3, 2, 1 + 1 + 1 + 0},
  /* after the clean pass (its K/V committed): the whole DiT again */
  {KS, 5, KW, FALSE, KW, 1, 5, 6 + 5},
  /* nothing changes */
  {KA, -1, KA, FALSE, KA, 0, 0, 6},
};

#define N_RESTART_CHUNKS G_N_ELEMENTS (restart_script)

typedef struct
{
  GThread *rank0;
  GThread *caller;
  guint64 chunk;
  int asks;
  int bad;                      /* wrong chunk, thread or keys */
  int last_passes;
  guint cur;                    /* the keys the chunk runs with */
  gboolean fired;               /* the scripted change was made */
} RestartLog;

/* before each generate */
static void
restart_log_start (RestartLog * log, guint64 chunk, guint keys)
{
  log->chunk = chunk;
  log->asks = 0;
  log->cur = keys;
  log->fired = FALSE;
}

static gboolean
on_restart (LingbotSession * s, guint64 chunk, int passes, guint * keys,
    gpointer user_data)
{
  RestartLog *log = user_data;
  const RestartScript *r = &restart_script[chunk];
  (void) s;
  /* before the first pass on the calling thread, else on rank 0 */
  if (chunk != log->chunk || g_thread_self () != (passes == 0 ?
          log->caller : log->rank0) || passes < 0 || passes > 5)
    log->bad++;
  log->asks++;
  log->last_passes = passes;
  /* the keys the chunk runs with so far */
  if (*keys != log->cur)
    log->bad++;
  if (r->storm) {
    *keys = *keys == r->start ? r->to : r->start;
    log->cur = *keys;
    return TRUE;
  }
  if (passes == r->at && !log->fired) {
    log->fired = TRUE;
    *keys = log->cur = r->to;
    return TRUE;
  }
  return FALSE;
}

/* Chunks 0-5 of cancel_session() on @n ranks with the restart script, and
 * a session given the final keys up front: latents and decoded frames
 * byte-identical, the stats count the restarts and discarded passes, and
 * the keys matter (the start keys' chunk 1 differs). */
static void
test_key_restart (gconstpointer data)
{
  CancelRef ref;
  RestartLog log = { 0 };
  g_autoptr (GByteArray) lat = g_byte_array_new ();
  g_autoptr (GByteArray) frames = g_byte_array_new ();
  g_autoptr (GError) err = NULL;

  cancel_ref_init (&ref, GPOINTER_TO_INT (data));
  log.rank0 = ref.rank0;
  log.caller = g_thread_self ();

  /* the session given each chunk's final keys */
  LingbotSession *s = cancel_session (ref.world);
  for (guint c = 0; c < N_RESTART_CHUNKS; c++) {
    LingbotChunkStats st = { 0 };
    int nf = -1;
    g_assert_true (lingbot_session_generate (s, restart_script[c].want_keys,
            &st, &err));
    g_assert_no_error (err);
    g_assert_cmpuint (st.restarts, ==, 0);
    g_assert_cmpuint (st.restart_passes, ==, 0);
    const LbTensor *l = lingbot_session_get_latents_tensor (s);
    g_byte_array_append (ref.lat, l->data, (guint) lb_tensor_nbytes (l));
    g_assert_true (lingbot_session_decode (s, NULL, &nf, NULL, &err));
    g_assert_no_error (err);
    const LbTensor *f = lingbot_session_get_frames_tensor (s);
    g_byte_array_append (ref.frames, f->data, (guint) lb_tensor_nbytes (f));
  }
  lingbot_session_free (s);

  /* the restarted session: max_passes 6 (after every pass, the clean
   * pass included), 2 restarts per chunk */
  s = cancel_session (ref.world);
  lingbot_session_set_restart_func (s, on_restart, 6, 2, &log, NULL);
  for (guint c = 0; c < N_RESTART_CHUNKS; c++) {
    const RestartScript *r = &restart_script[c];
    LingbotChunkStats st = { 0 };
    int nf = -1;
    restart_log_start (&log, c, r->start);
    g_assert_true (lingbot_session_generate (s, r->start, &st, &err));
    g_assert_no_error (err);
    g_assert_cmpuint (st.index, ==, c);
    g_assert_cmpuint (st.keys, ==, r->want_keys);
    g_assert_cmpuint (st.restarts, ==, r->want_restarts);
    g_assert_cmpuint (st.restart_passes, ==, r->want_discarded);
    g_assert_cmpint (log.asks, ==, r->want_asks);
    const LbTensor *l = lingbot_session_get_latents_tensor (s);
    g_byte_array_append (lat, l->data, (guint) lb_tensor_nbytes (l));
    g_assert_true (lingbot_session_decode (s, NULL, &nf, NULL, &err));
    g_assert_no_error (err);
    const LbTensor *f = lingbot_session_get_frames_tensor (s);
    g_byte_array_append (frames, f->data, (guint) lb_tensor_nbytes (f));
    g_assert_cmpuint (lat->len, ==, (guint) ((c + 1) * LAT_BYTES));
    g_assert_true (memcmp (lat->data + c * LAT_BYTES, ref.lat->data +
            c * LAT_BYTES, LAT_BYTES) == 0);
  }
  g_assert_cmpint (log.bad, ==, 0);
  g_assert_cmpuint (frames->len, ==, ref.frames->len);
  g_assert_true (memcmp (frames->data, ref.frames->data, frames->len) == 0);
  lingbot_session_free (s);

  /* the keys matter: chunk 1 made with its start keys differs */
  s = cancel_session (ref.world);
  for (guint c = 0; c < 2; c++) {
    g_assert_true (lingbot_session_generate (s, c == 0 ? KD :
            restart_script[1].start, NULL, &err));
    g_assert_no_error (err);
  }
  g_assert_false (memcmp (lingbot_session_get_latents_tensor (s)->data,
          ref.lat->data + LAT_BYTES, LAT_BYTES) == 0);
  lingbot_session_free (s);
  cancel_ref_clear (&ref);
}

/* The policy's bounds: max_passes 1 asks once per chunk, before the
 * first pass; 0 never. */
static void
test_key_restart_bounds (void)
{
  g_autoptr (GError) err = NULL;
  RestartLog log = { 0 };
  CancelRef ref;
  cancel_ref_init (&ref, 1);
  log.rank0 = ref.rank0;
  log.caller = g_thread_self ();

  LingbotSession *s = cancel_session (ref.world);
  lingbot_session_set_restart_func (s, on_restart, 1, 2, &log, NULL);
  /* chunk 0's script: asked at 0 and swapped there */
  LingbotChunkStats st = { 0 };
  restart_log_start (&log, 0, KW);
  g_assert_true (lingbot_session_generate (s, KW, &st, &err));
  g_assert_no_error (err);
  g_assert_cmpint (log.asks, ==, 1);
  g_assert_cmpint (log.last_passes, ==, 0);
  g_assert_cmpuint (st.keys, ==, KD);
  g_assert_cmpuint (st.restarts, ==, 1);
  /* chunk 1's script asks for a restart at 2 passes: never asked there */
  restart_log_start (&log, 1, restart_script[1].start);
  g_assert_true (lingbot_session_generate (s, restart_script[1].start, &st,
          &err));
  g_assert_no_error (err);
  g_assert_cmpint (log.asks, ==, 1);
  g_assert_cmpuint (st.keys, ==, restart_script[1].start);
  g_assert_cmpuint (st.restarts, ==, 0);
  /* 0: never asked */
  lingbot_session_set_restart_func (s, on_restart, 0, 2, &log, NULL);
  restart_log_start (&log, 2, KD);
  g_assert_true (lingbot_session_generate (s, KD, &st, &err));
  g_assert_no_error (err);
  g_assert_cmpint (log.asks, ==, 0);
  g_assert_cmpuint (st.restarts, ==, 0);
  g_assert_cmpint (log.bad, ==, 0);
  lingbot_session_free (s);
  cancel_ref_clear (&ref);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (argc < 2) {
    g_printerr ("usage: %s TEST-SPM-MODEL\n", argv[0]);
    return 1;
  }
  spm_path = argv[1];
  g_autoptr (GError) err = NULL;
  tmpdir = g_dir_make_tmp ("lingbot-session-XXXXXX", &err);
  g_assert_no_error (err);
  model_dir = g_build_filename (tmpdir, "model", NULL);
  write_model (model_dir, TRUE, TRUE);
  lingbot_test_fill_image (image, IMG_W, IMG_H);

  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  wo.model_path = model_dir;
  world1 = lingbot_world_new (&wo, &err);
  g_assert_no_error (err);
  g_assert_true (lingbot_world_has_text_encoder (world1));
  g_assert_cmpint (lingbot_world_get_n_ranks (world1), ==, 1);
  wo.devices = "cpu:2";
  world2 = lingbot_world_new (&wo, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_world_get_n_ranks (world2), ==, 2);
  g_assert_cmpstr (lingbot_world_get_devices (world2), ==, "cpu:2");
  g_assert_cmpstr (lingbot_world_get_model_path (world2), ==, model_dir);
  g_assert_nonnull (lingbot_world_get_group (world2));
  g_assert_nonnull (lingbot_world_get_dit (world2));
  g_assert_nonnull (lingbot_world_get_vae (world2));

  g_test_add_func ("/session/chunks", test_chunks);
  g_test_add_func ("/session/frame-accounting", test_frame_accounting);
  g_test_add_func ("/session/determinism", test_determinism);
  g_test_add_func ("/session/ranks", test_ranks);
  g_test_add_func ("/session/keys", test_keys);
  g_test_add_func ("/session/offline-poses", test_offline_poses);
  g_test_add_func ("/session/pixel-area-embeds", test_pixel_area_and_embeds);
  g_test_add_func ("/session/noise-file", test_noise_file);
  g_test_add_func ("/session/errors", test_errors);
  g_test_add_func ("/session/control-rewind", test_control_rewind);
  g_test_add_func ("/session/dit-widths", test_dit_widths);
  g_test_add_func ("/session/max-attention", test_max_attention);
  g_test_add_func ("/session/pass-func-notify", test_pass_func_notify);
  g_test_add_func ("/session/failure-func", test_failure_func);
  g_test_add_data_func ("/session/cancel/1", GINT_TO_POINTER (1), test_cancel);
  g_test_add_data_func ("/session/cancel/2", GINT_TO_POINTER (2), test_cancel);
  g_test_add_data_func ("/session/cancel-encode/1", GINT_TO_POINTER (1),
      test_cancel_encode);
  g_test_add_data_func ("/session/cancel-encode/2", GINT_TO_POINTER (2),
      test_cancel_encode);
  for (int n = 1; n <= 2; n++) {
    g_autofree char *path = g_strdup_printf ("/session/overlap/%d", n);
    g_test_add_data_func (path, GINT_TO_POINTER (n), test_overlap);
  }
  g_test_add_func ("/session/overlap/spill", test_overlap_spill);
  g_test_add_func ("/session/frames-func", test_frames_func);
  g_test_add_data_func ("/session/key-restart/1", GINT_TO_POINTER (1),
      test_key_restart);
  g_test_add_data_func ("/session/key-restart/2", GINT_TO_POINTER (2),
      test_key_restart);
  g_test_add_func ("/session/key-restart/bounds", test_key_restart_bounds);
  int rc = g_test_run ();

  lingbot_world_unref (world1);
  lingbot_world_unref (world2);
  lingbot_test_rm_rf (tmpdir);
  g_free (tmpdir);
  g_free (model_dir);
  return rc;
}

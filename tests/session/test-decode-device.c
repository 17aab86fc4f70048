/* lingbot-gst: the decode beside generation on an emulated device
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A whole session on "fakedev" (tests/common/fakedev.c: device-labelled
 * host memory with residency checks and copy counters, the CPU kernels),
 * 1 and 2 ranks: the serial decode (the DiT downloads x0 on rank 0, every
 * decode rank uploads the chunk) against a decoder attached on its own
 * worker group (lingbot_session_attach_decoder()): the same frames byte
 * for byte, and per chunk exactly that download and those uploads fewer:
 * nothing of the latents crosses the host.  In a bf16 world both decodes
 * run every convolution on streams in LB_MATH_BF16 (the decode group takes
 * the world's precision, as the DiT ranks the serial decode runs on).
 */
#include <string.h>

#include "fakedev.h"
#include "nccl-model.h"
#include "test-fixture.h"
#include "kernels/error.h"
#include "lingbot/lingbot-private.h"
#include "lingbot/dummy.h"

#define N_CHUNKS 3
#define IMG_W 80
#define IMG_H 48

static char *tmpdir, *model_dir, *embeds;
static guint8 image[IMG_W * IMG_H * 3];

typedef struct
{
  GArray *frames;               /* float: every frame of every chunk */
  FakeDevStats before[N_CHUNKS], mid[N_CHUNKS], after[N_CHUNKS];
} Run;

/* the fixture's session of N_CHUNKS chunks, with a decoder of its own
 * beside generation when @attach */
static LingbotSession *
new_session (LingbotWorld * w, gboolean attach)
{
  g_autoptr (GError) err = NULL;
  LingbotSessionOptions o = LINGBOT_SESSION_OPTIONS_INIT;

  o.prompt_embeds_path = embeds;
  o.image_rgb = image;
  o.image_width = IMG_W;
  o.image_height = IMG_H;
  o.width = o.height = 64;
  o.seed = 11;
  o.frames = 13 + 16 * (N_CHUNKS - 1);
  LingbotSession *s = lingbot_session_new (w, &o, &err);
  g_assert_no_error (err);
  if (attach) {
    g_assert_true (lingbot_session_attach_decoder (s, NULL, 2, &err));
    g_assert_no_error (err);
  }
  return s;
}

static void
run_session (LingbotWorld * w, gboolean attach, Run * run)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotSession) s = new_session (w, attach);

  run->frames = g_array_new (FALSE, FALSE, sizeof (float));
  for (int c = 0; c < N_CHUNKS; c++) {
    int n = 0;
    run->before[c] = fakedev_stats ();
    gboolean ok = lingbot_session_generate (s, c ? LINGBOT_KEY_W : 0, NULL,
        &err);
    g_assert_no_error (err);
    g_assert_true (ok);
    run->mid[c] = fakedev_stats ();
    lingbot_session_claim_chunk (s, (guint64) c);
    ok = lingbot_session_decode_chunk (s, (guint64) c, &n, NULL, &err);
    g_assert_no_error (err);
    g_assert_true (ok);
    run->after[c] = fakedev_stats ();
    const LbTensor *f = lingbot_session_get_frames_tensor (s);
    for (int ch = 0; ch < 3; ch++)
      g_array_append_vals (run->frames, (const float *) f->data +
          (gsize) ch * f->shape[1] * 64 * 64, (guint) n * 64 * 64);
  }
  g_assert_cmpuint (lingbot_session_get_latent_host_bytes (s), ==,
      attach ? 0 : N_CHUNKS * 16 * 4 * 8 * 8 * sizeof (float));
  g_assert_cmpuint (lingbot_session_get_n_spills (s), ==, 0);
}

static void
test_device (gconstpointer data)
{
  const int n = GPOINTER_TO_INT (data) % 10;
  const gboolean bf16 = GPOINTER_TO_INT (data) >= 10;
  g_autoptr (GError) err = NULL;
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  Run serial = { 0 }, overlap = { 0 };

  wo.model_path = model_dir;
  wo.devices = "fakedev";
  wo.load_text_encoder = FALSE;
  wo.precision = bf16 ? "bf16" : "fp32";
  g_autoptr (LingbotWorld) w = lingbot_world_new_on_backend (&wo,
      fakedev_backend (), n, &err);
  g_assert_no_error (err);
  run_session (w, FALSE, &serial);
  run_session (w, TRUE, &overlap);

  g_assert_cmpuint (serial.frames->len, ==, overlap.frames->len);
  g_assert_cmpmem (serial.frames->data, serial.frames->len * sizeof (float),
      overlap.frames->data, overlap.frames->len * sizeof (float));
  for (int c = 1; c < N_CHUNKS; c++) {
    int d2h_s = serial.after[c].n_d2h - serial.before[c].n_d2h;
    int d2h_o = overlap.after[c].n_d2h - overlap.before[c].n_d2h;
    int h2d_s = serial.after[c].n_h2d - serial.before[c].n_h2d;
    int h2d_o = overlap.after[c].n_h2d - overlap.before[c].n_h2d;
    g_print ("# %d rank(s), chunk %d: serial %d D2H + %d H2D copies, "
        "overlapped %d + %d\n", n, c, d2h_s, h2d_s, d2h_o, h2d_o);
    /* rank 0's download of x0, and every decode rank's upload of the
     * chunk: gone; everything else (noise, condition, poses, frames) the
     * same */
    g_assert_cmpint (d2h_s - d2h_o, ==, 1);
    g_assert_cmpint (h2d_s - h2d_o, ==, n);
  }
  /* every decode convolution in the world's precision, both ways */
  for (int c = 0; c < N_CHUNKS; c++) {
    const Run *r[2] = { &serial, &overlap };
    for (int i = 0; i < 2; i++) {
      int f32 = r[i]->after[c].n_convs_fp32 - r[i]->mid[c].n_convs_fp32;
      int b16 = r[i]->after[c].n_convs_bf16 - r[i]->mid[c].n_convs_bf16;
      g_assert_cmpint (f32 + b16, >, 0);
      g_assert_cmpint (bf16 ? f32 : b16, ==, 0);
    }
  }
  g_assert_cmpint (fakedev_stats ().bad, ==, 0);
  g_array_unref (serial.frames);
  g_array_unref (overlap.frames);
}

/* lingbot_session_set_frames_func() on device ranks: each latent frame's
 * rows are downloaded and the streams synchronised before they are handed
 * on, every band first (2 ranks): with every copy and op run late by the
 * streams' workers (fakedev asynchronous mode), the bytes handed on are
 * the final ones and the frames those of a decode without it */
typedef struct
{
  float *snap;                  /* [3, T, 64, 64] as handed on */
  int64_t t_max;
  int calls, frames;
} Streamed;

static void
streamed_frames (const LingbotFrames * frames, int first, int n, gpointer data)
{
  Streamed *st = data;
  const LbTensor *f = lingbot_frames_tensor (frames);

  g_assert_cmpint (first, ==, st->frames);
  for (int ch = 0; ch < 3; ch++)
    memcpy (st->snap + ((gsize) ch * st->t_max + first) * 64 * 64,
        (const float *) f->data + ((gsize) ch * f->shape[1] + first) * 64 * 64,
        (gsize) n * 64 * 64 * sizeof (float));
  st->calls++;
  st->frames += n;
}

static void
test_frames_func (gconstpointer data)
{
  const gboolean attach = GPOINTER_TO_INT (data);
  g_autoptr (GError) err = NULL;
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  Run ref = { 0 };

  wo.model_path = model_dir;
  wo.devices = "fakedev";
  wo.load_text_encoder = FALSE;
  fakedev_set_async (TRUE, 5, 200);
  g_autoptr (LingbotWorld) w = lingbot_world_new_on_backend (&wo,
      fakedev_backend (), 2, &err);
  g_assert_no_error (err);
  run_session (w, attach, &ref);

  g_autoptr (LingbotSession) s = new_session (w, attach);
  g_autoptr (GArray) got = g_array_new (FALSE, FALSE, sizeof (float));
  for (int c = 0; c < N_CHUNKS; c++) {
    const LbTensor *f = lingbot_session_get_frames_tensor (s);
    Streamed st = { 0 };
    int n = 0;

    st.t_max = f->shape[1];
    st.snap = g_new0 (float, (gsize) 3 * st.t_max * 64 * 64);
    g_assert_true (lingbot_session_generate (s, c ? LINGBOT_KEY_W : 0, NULL,
            &err));
    g_assert_no_error (err);
    lingbot_session_claim_chunk (s, (guint64) c);
    lingbot_session_set_frames_func (s, streamed_frames, &st);
    g_assert_true (lingbot_session_decode_chunk (s, (guint64) c, &n, NULL,
            &err));
    lingbot_session_set_frames_func (s, NULL, NULL);
    g_assert_no_error (err);
    g_assert_cmpint (st.calls, ==, 4);
    g_assert_cmpint (st.frames, ==, n);
    for (int ch = 0; ch < 3; ch++) {
      g_assert_cmpmem (st.snap + (gsize) ch * st.t_max * 64 * 64,
          (gsize) n * 64 * 64 * sizeof (float),
          (const float *) f->data + (gsize) ch * st.t_max * 64 * 64,
          (gsize) n * 64 * 64 * sizeof (float));
      g_array_append_vals (got, (const float *) f->data +
          (gsize) ch * f->shape[1] * 64 * 64, (guint) n * 64 * 64);
    }
    g_free (st.snap);
  }
  fakedev_set_async (FALSE, 0, 0);
  g_assert_cmpuint (got->len, ==, ref.frames->len);
  g_assert_cmpmem (got->data, got->len * sizeof (float), ref.frames->data,
      ref.frames->len * sizeof (float));
  g_assert_cmpint (fakedev_stats ().bad, ==, 0);
  g_array_unref (ref.frames);
}

/* A dummy model (lingbot/dummy.c) of the fixture's seeds draws the
 * fixture's weights: the same frames on cpu:1 and on the emulated device
 * as the checkpoint lingbot_test_write_model() writes. */
static void
test_dummy (void)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *dir = g_build_filename (tmpdir, "dummy", NULL);
  g_autofree char *dit = g_build_filename (dir, "transformers", NULL);
  g_autofree char *dit_json = g_build_filename (dit, "config.json", NULL);
  g_autofree char *vae = g_build_filename (dir, "Wan2.1_VAE.dummy.json",
      NULL);
  LingbotDitConfig cfg;
  Run ref = { 0 }, cpu = { 0 }, dev = { 0 };

  g_assert_cmpint (g_mkdir_with_parents (dit, 0755), ==, 0);
  lingbot_dit_config_init_preset (&cfg, LINGBOT_DIT_PRESET_TINY);
  cfg.chunk_frames = 4;
  g_autofree char *cfg_json = lingbot_dit_config_to_json (&cfg);
  /* lingbot_test_write_model(): DiT seed 3 in bf16, VAE width 8 seed 5 */
  g_assert_true (lingbot_dummy_write (dit_json, cfg_json, 3, LB_DTYPE_BF16,
          &err));
  g_assert_true (lingbot_dummy_write (vae, "{\"dim\": 8}", 5, LB_DTYPE_F32,
          &err));
  g_assert_no_error (err);

  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  wo.load_text_encoder = FALSE;
  wo.model_path = model_dir;
  wo.devices = "cpu:1";
  {
    g_autoptr (LingbotWorld) w = lingbot_world_new (&wo, &err);
    g_assert_no_error (err);
    run_session (w, FALSE, &ref);
  }
  wo.model_path = dir;
  {
    g_autoptr (LingbotWorld) w = lingbot_world_new (&wo, &err);
    g_assert_no_error (err);
    run_session (w, FALSE, &cpu);
  }
  wo.devices = "fakedev";
  {
    g_autoptr (LingbotWorld) w = lingbot_world_new_on_backend (&wo,
        fakedev_backend (), 1, &err);
    g_assert_no_error (err);
    run_session (w, TRUE, &dev);
  }
  g_assert_cmpuint (ref.frames->len, >, 0);
  g_assert_cmpmem (ref.frames->data, ref.frames->len * sizeof (float),
      cpu.frames->data, cpu.frames->len * sizeof (float));
  g_assert_cmpmem (ref.frames->data, ref.frames->len * sizeof (float),
      dev.frames->data, dev.frames->len * sizeof (float));
  g_assert_cmpint (fakedev_stats ().bad, ==, 0);
  g_array_unref (ref.frames);
  g_array_unref (cpu.frames);
  g_array_unref (dev.frames);
}

/* The decoder attached on the world's devices under a CPU model of NCCL's
 * blocking registered for them (tests/common/nccl-model.c): the world's
 * group holds the device collectives, the decode group takes the local
 * ones (lb_worker_group_new()), so only "world" collectives ever hold a
 * device and the frames are the serial decode's.  With both groups on the
 * model the two would interleave on the shared devices in no fixed order. */
static void
test_nccl_order (void)
{
  g_autoptr (GError) err = NULL;
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  Run serial = { 0 }, overlap = { 0 };

  wo.model_path = model_dir;
  wo.devices = "fakedev";
  wo.load_text_encoder = FALSE;
  lb_collectives_register (LB_DEVICE_CUDA, nccl_model_collectives ());
  nccl_model_clear_log ();
  {
    g_autoptr (LingbotWorld) w = lingbot_world_new_on_backend (&wo,
        fakedev_backend (), 2, &err);
    g_assert_no_error (err);
    run_session (w, FALSE, &serial);
    run_session (w, TRUE, &overlap);
  }
  lb_collectives_register (LB_DEVICE_CUDA, NULL);
  g_assert_cmpmem (serial.frames->data, serial.frames->len * sizeof (float),
      overlap.frames->data, overlap.frames->len * sizeof (float));
  for (int d = 0; d < 2; d++) {
    g_auto (GStrv) log = nccl_model_log (d);
    g_assert_cmpuint (g_strv_length (log), >, 0);
    for (guint i = 0; log[i]; i++)
      g_assert_cmpstr (log[i], ==, "world");
  }
  g_array_unref (serial.frames);
  g_array_unref (overlap.frames);
}

/* Key restarts on the emulated device (ray map built on the ranks from the
 * chunk's poses, the chunk handed to an attached decoder through the
 * channel only once it is made): chunk 1 restarts after its 2nd pass and
 * chunk 2 after its clean pass, each with a new key set; the decoded
 * frames are byte-identical to a session given those keys up front, and
 * a stopped chunk never reaches the decoder. */
typedef struct
{
  int at[N_CHUNKS];             /* restart when asked at this many passes */
  guint to[N_CHUNKS];
  int restarts;
} RestartPlan;

static gboolean
restart_plan (LingbotSession * s, guint64 chunk, int passes, guint * keys,
    gpointer data)
{
  RestartPlan *p = data;
  (void) s;
  if (passes != p->at[chunk] || *keys == p->to[chunk])
    return FALSE;
  *keys = p->to[chunk];
  p->restarts++;
  return TRUE;
}

static void
restart_run (LingbotWorld * w, RestartPlan * plan, const guint * keys,
    GArray * frames)
{
  g_autoptr (GError) err = NULL;
  LingbotSessionOptions o = LINGBOT_SESSION_OPTIONS_INIT;

  o.prompt_embeds_path = embeds;
  o.image_rgb = image;
  o.image_width = IMG_W;
  o.image_height = IMG_H;
  o.width = o.height = 64;
  o.seed = 11;
  o.frames = 13 + 16 * (N_CHUNKS - 1);
  g_autoptr (LingbotSession) s = lingbot_session_new (w, &o, &err);
  g_assert_no_error (err);
  g_assert_true (lingbot_session_attach_decoder (s, NULL, 2, &err));
  g_assert_no_error (err);
  if (plan)
    lingbot_session_set_restart_func (s, restart_plan, 6, 1, plan, NULL);
  for (int c = 0; c < N_CHUNKS; c++) {
    LingbotChunkStats st = { 0 };
    int n = 0;
    g_assert_true (lingbot_session_generate (s, keys[c], &st, &err));
    g_assert_no_error (err);
    g_assert_cmpuint (st.restarts, ==, plan && plan->at[c] > 0 ? 1 : 0);
    g_assert_cmpuint (st.restart_passes, ==, plan ? MAX (plan->at[c], 0) : 0);
    g_assert_cmpuint (st.keys, ==, plan && plan->at[c] > 0 ? plan->to[c] :
        keys[c]);
    lingbot_session_claim_chunk (s, (guint64) c);
    g_assert_true (lingbot_session_decode_chunk (s, (guint64) c, &n, NULL,
            &err));
    g_assert_no_error (err);
    const LbTensor *f = lingbot_session_get_frames_tensor (s);
    for (int ch = 0; ch < 3; ch++)
      g_array_append_vals (frames, (const float *) f->data +
          (gsize) ch * f->shape[1] * 64 * 64, (guint) n * 64 * 64);
  }
}

static void
test_key_restart (void)
{
  g_autoptr (GError) err = NULL;
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  const guint start[N_CHUNKS] = { LINGBOT_KEY_W, LINGBOT_KEY_W,
    LINGBOT_KEY_W
  };
  const guint final[N_CHUNKS] = { LINGBOT_KEY_W, LINGBOT_KEY_D,
    LINGBOT_KEY_A | LINGBOT_KEY_J
  };
  RestartPlan plan = { {-1, 2, 5}, {0, LINGBOT_KEY_D,
      LINGBOT_KEY_A | LINGBOT_KEY_J}, 0
  };
  g_autoptr (GArray) want = g_array_new (FALSE, FALSE, sizeof (float));
  g_autoptr (GArray) got = g_array_new (FALSE, FALSE, sizeof (float));
  g_autoptr (GArray) plain = g_array_new (FALSE, FALSE, sizeof (float));

  wo.model_path = model_dir;
  wo.devices = "fakedev";
  wo.load_text_encoder = FALSE;
  g_autoptr (LingbotWorld) w = lingbot_world_new_on_backend (&wo,
      fakedev_backend (), 2, &err);
  g_assert_no_error (err);
  restart_run (w, NULL, final, want);
  restart_run (w, &plan, start, got);
  restart_run (w, NULL, start, plain);
  g_assert_cmpint (plan.restarts, ==, 2);
  g_assert_cmpuint (got->len, ==, want->len);
  g_assert_cmpmem (got->data, got->len * sizeof (float), want->data,
      want->len * sizeof (float));
  /* the keys matter */
  g_assert_false (memcmp (plain->data, want->data, want->len *
          sizeof (float)) == 0);
  g_assert_cmpint (fakedev_stats ().bad, ==, 0);
}

int
main (int argc, char **argv)
{
  g_autoptr (GError) err = NULL;

  g_test_init (&argc, &argv, NULL);
  for (int i = 0; i < IMG_W * IMG_H * 3; i++)
    image[i] = (guint8) ((i * 7) % 251);
  tmpdir = g_dir_make_tmp ("lingbot-decode-device-XXXXXX", &err);
  g_assert_no_error (err);
  model_dir = lingbot_test_write_model (tmpdir);
  embeds = lingbot_test_write_prompt_embeds (tmpdir, "a castle");
  g_test_add_data_func ("/session/decode-device/1", GINT_TO_POINTER (1),
      test_device);
  g_test_add_data_func ("/session/decode-device/2", GINT_TO_POINTER (2),
      test_device);
  g_test_add_data_func ("/session/decode-device/bf16/2",
      GINT_TO_POINTER (12), test_device);
  g_test_add_data_func ("/session/decode-device/frames-func/serial",
      GINT_TO_POINTER (FALSE), test_frames_func);
  g_test_add_data_func ("/session/decode-device/frames-func/attached",
      GINT_TO_POINTER (TRUE), test_frames_func);
  g_test_add_func ("/session/decode-device/dummy", test_dummy);
  g_test_add_func ("/session/decode-device/nccl-order", test_nccl_order);
  g_test_add_func ("/session/decode-device/key-restart", test_key_restart);
  int rc = g_test_run ();
  lingbot_test_rm_rf (tmpdir);
  g_free (tmpdir);
  g_free (model_dir);
  g_free (embeds);
  return rc;
}

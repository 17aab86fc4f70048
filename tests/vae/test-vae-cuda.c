/* lingbot-gst: the Wan2.1 VAE on CUDA ranks against the golden fixture
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Suite "gpu" (tests/gpu/run.sh runs it); exits 77 (skip) without a CUDA
 * device.  The vae_tiny golden streams on CUDA:
 *   - decode, 4 chunks of 4 latents (6 x 10 -> 48 x 80): unsharded on
 *     device 0; height-sharded on 2 and 3 ranks of device 0 (local
 *     collectives: device copies) and on 2 ranks of distinct devices (NCCL)
 *     when there are enough; every chunk within the golden tolerance
 *     (max|c - g| <= 1e-4) and compared with the CPU backend's decode of
 *     the same configuration (printed; same bound: the CUDA kernels round
 *     differently, so not bit-identical).  The host frame buffer is NaN
 *     before every decode, so a row the download misses fails;
 *   - random latents on 7 rows, 3 ranks (uneven bands 3,2,2), against the
 *     CPU;
 *   - bf16 streams whose convs read bf16 channels-last inputs, on 1 and 3
 *     ranks, against the CPU's bf16-input decode;
 *   - the condition stream (4 chunks, 48 x 80) within the golden tolerance
 *     (1e-4 max|g|) and against the CPU, and a 10-chunk 16 x 16 stream that
 *     reaches the encoder's fixed point (the device compare buffers).
 * The device code paths themselves are checked without a GPU, bit for bit,
 * by tests/vae/test-vae-device.c.
 */
#include <stdio.h>

#include "vae-test-common.h"
#include "comm/comm-private.h"
#include "comm/worker-group.h"
#include "lingbot/backend.h"

#define N_CHUNKS 4
#define GOLDEN_ABS 1e-4

static LingbotCheckpoint *ck;
static LingbotVae *vae;
static LbBackend *cuda;
static LbStream *cpu_stream;

typedef struct
{
  int n_ranks;                  /* 0: lingbot_vae_decoder_new() on one stream */
  gboolean nccl;                /* ranks on distinct devices with NCCL */
} DecCase;

static void
assert_finite (const LbTensor * t)
{
  for (int64_t i = 0; i < lb_tensor_numel (t); i++) {
    double x = lb_tensor_get_flat (t, i);
    if (!(x >= -1.0 && x <= 1.0))
      g_error ("decoded value %" G_GINT64_FORMAT " is %g", i, x);
  }
}

static LingbotVaeDecoder *
new_decoder (LbBackend * be, const DecCase * c, LbStream ** stream,
    LbWorkerGroup ** group)
{
  g_autoptr (GError) err = NULL;
  LingbotVaeDecoder *dec;
  *stream = NULL;
  *group = NULL;
  if (c->n_ranks == 0) {
    *stream = be->stream_new (be, 0, &err);
    g_assert_no_error (err);
    dec = lingbot_vae_decoder_new (vae, *stream, 6, 10, 4, &err);
  } else {
    int ordinals[8];
    for (int r = 0; r < c->n_ranks; r++)
      ordinals[r] = c->nccl ? r : 0;
    const gboolean dev = be != lb_cpu_backend ();
    LbWorkerGroupOptions go = { 0,
      dev && !c->nccl ? lb_local_collectives () : NULL, "vae-cuda-test"
    };
    *group =
        lb_worker_group_new (be, c->n_ranks, dev ? ordinals : NULL, &go, &err);
    g_assert_no_error (err);
    dec = lingbot_vae_decoder_new_sharded (vae, *group, 6, 10, 4, &err);
  }
  g_assert_no_error (err);
  return dec;
}

/* The 4 golden chunks through @ref (CPU) and @dec (CUDA, NaN-poisoned
 * frames): the largest |dec - golden| and |dec - ref| into @golden and
 * @vs_cpu, each chunk printed; returns the seconds @dec took. */
static double
decode_golden (LingbotVaeDecoder * ref, LingbotVaeDecoder * dec,
    double *golden, double *vs_cpu)
{
  g_autoptr (GError) err = NULL;
  int64_t fshape[4] = { 3, 16, 48, 80 };
  g_autoptr (LbTensor) fa = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_autoptr (LbTensor) fb = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  double secs = 0;
  for (int k = 0; k < N_CHUNKS; k++) {
    char name[64];
    g_snprintf (name, sizeof name, "input.latent_chunk%d", k);
    const LbTensor *lat = vae_test_get (ck, name);
    g_snprintf (name, sizeof name, "output.decoded_chunk%d", k);
    const LbTensor *want = vae_test_get (ck, name);
    int na = 0, nb = 0;
    memset (fb->data, 0xff, lb_tensor_nbytes (fb));
    g_assert_true (lingbot_vae_decoder_decode (ref, lat, fa, &na, &err));
    g_assert_no_error (err);
    gint64 t0 = g_get_monotonic_time ();
    g_assert_true (lingbot_vae_decoder_decode (dec, lat, fb, &nb, &err));
    g_assert_no_error (err);
    secs += (g_get_monotonic_time () - t0) / 1e6;
    g_assert_cmpint (nb, ==, na);
    g_assert_cmpint (nb, ==, k == 0 ? 13 : 16);
    LbTensor a, b;
    lb_tensor_view_narrow (&a, fa, 1, 0, na);
    lb_tensor_view_narrow (&b, fb, 1, 0, nb);
    assert_finite (&b);
    double eg = vae_test_max_abs_diff (&b, want);
    double ec = vae_test_max_abs_diff (&b, &a);
    printf ("#   chunk %d: max|cuda - golden| %.3g, max|cuda - cpu| %.3g\n", k,
        eg, ec);
    *golden = MAX (*golden, eg);
    *vs_cpu = MAX (*vs_cpu, ec);
  }
  return secs;
}

static void
test_decode (gconstpointer data)
{
  const DecCase *c = data;
  if (c->nccl && cuda->device_count < c->n_ranks) {
    g_test_skip ("not enough CUDA devices for NCCL ranks");
    return;
  }
  g_autoptr (GError) err = NULL;
  LbStream *cs, *gs;
  LbWorkerGroup *cg, *gg;
  LingbotVaeDecoder *ref = new_decoder (lb_cpu_backend (), c, &cs, &cg);
  LingbotVaeDecoder *dec = new_decoder (cuda, c, &gs, &gg);
  double golden = 0, vs_cpu = 0;
  const double secs = decode_golden (ref, dec, &golden, &vs_cpu);
  g_autofree char *what = c->n_ranks == 0 ? g_strdup ("unsharded, device 0")
      : g_strdup_printf ("%d ranks, %s", c->n_ranks,
      c->nccl ? "distinct devices, nccl" : "device 0, local collectives");
  printf ("# vae decode cuda, %s: golden max abs err %.3g, max|cuda - cpu| "
      "%.3g (limit %.0e), %.3f s for %d chunks\n",
      what, golden, vs_cpu, GOLDEN_ABS, secs, N_CHUNKS);
  g_assert_cmpfloat (golden, <=, GOLDEN_ABS);
  g_assert_cmpfloat (vs_cpu, <=, GOLDEN_ABS);
  lingbot_vae_decoder_free (dec);
  lingbot_vae_decoder_free (ref);
  if (gs)
    gs->backend->stream_free (gs);
  if (cs)
    cs->backend->stream_free (cs);
  if (gg)
    lb_worker_group_unref (gg);
  if (cg)
    lb_worker_group_unref (cg);
}

/* Random latents (amplitude 2) on 7 rows, 3 ranks of device 0 (uneven
 * bands 3,2,2), 3 chunks: CUDA against the CPU's sharded decode, with
 * NaN-poisoned frames. */
static void
test_decode_random (void)
{
  g_autoptr (GError) err = NULL;
  const int rows = 7, R = 3;
  int ordinals[3] = { 0, 0, 0 };
  LbWorkerGroupOptions go = { 0, lb_local_collectives (), "vae-cuda-test" };
  LbWorkerGroup *gg = lb_worker_group_new (cuda, R, ordinals, &go, &err);
  g_assert_no_error (err);
  LbWorkerGroup *cg
      = lb_worker_group_new (lb_cpu_backend (), R, NULL, NULL, &err);
  g_assert_no_error (err);
  LingbotVaeDecoder *dec
      = lingbot_vae_decoder_new_sharded (vae, gg, rows, 10, 4, &err);
  g_assert_no_error (err);
  LingbotVaeDecoder *ref
      = lingbot_vae_decoder_new_sharded (vae, cg, rows, 10, 4, &err);
  g_assert_no_error (err);
  int64_t lshape[4] = { 16, 4, rows, 10 }, fshape[4] = { 3, 16, 8 * rows, 80 };
  g_autoptr (LbTensor) fa = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_autoptr (LbTensor) fb = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  double worst = 0;
  for (int k = 0; k < 3; k++) {
    g_autoptr (LbTensor) lat = vae_test_random (4, lshape, 101 + k, 2.f);
    int na = 0, nb = 0;
    memset (fb->data, 0xff, lb_tensor_nbytes (fb));
    g_assert_true (lingbot_vae_decoder_decode (ref, lat, fa, &na, &err));
    g_assert_true (lingbot_vae_decoder_decode (dec, lat, fb, &nb, &err));
    g_assert_no_error (err);
    g_assert_cmpint (nb, ==, na);
    LbTensor a, b;
    lb_tensor_view_narrow (&a, fa, 1, 0, na);
    lb_tensor_view_narrow (&b, fb, 1, 0, nb);
    assert_finite (&b);
    worst = MAX (worst, vae_test_max_abs_diff (&b, &a));
  }
  printf ("# vae decode cuda, random latents, 7 rows on 3 ranks of device 0 "
      "(3,2,2): max|cuda - cpu| %.3g (limit %.0e)\n", worst, GOLDEN_ABS);
  g_assert_cmpfloat (worst, <=, GOLDEN_ABS);
  lingbot_vae_decoder_free (dec);
  lingbot_vae_decoder_free (ref);
  lb_worker_group_unref (gg);
  lb_worker_group_unref (cg);
}

static LingbotVaeDecoder *
decoder_on (LbWorkerGroup * g, LbStream * s)
{
  g_autoptr (GError) err = NULL;
  LingbotVaeDecoder *d = g ? lingbot_vae_decoder_new_sharded (vae, g, 6, 10,
      4, &err) : lingbot_vae_decoder_new (vae, s, 6, 10, 4, &err);
  g_assert_no_error (err);
  return d;
}

static gboolean
set_bf16 (LbRank * rank, gpointer data, GError ** error)
{
  (void) data;
  (void) error;
  rank->stream->math = LB_MATH_BF16;
  return TRUE;
}

typedef void (*ConvInputStats) (guint64 * in_place, guint64 * concatenated,
    guint64 * widened);

/* bf16 streams with LINGBOT_CUDA_CONV_LAYOUT=ndhwc: the decoder's convs
 * read bf16 channels-last inputs (docs/design/cuda.md "Channels-last conv
 * inputs").  Oracle: the CPU decoder with LINGBOT_VAE_CONV_INPUT=bf16 on
 * the same bands (the same roundings of the conv inputs; CUDA sums the
 * exact bf16 products in another order, so an input near a rounding
 * boundary may round the other way).  Every bf16-input call is taken by a
 * channels-last graph (none widened), and the golden is within the bound
 * fakedev measured for bf16 inputs against f32 (max 0.056 there). */
static void
test_decode_in16 (gconstpointer data)
{
  const int R = GPOINTER_TO_INT (data);
  g_autoptr (GError) err = NULL;
  ConvInputStats stats = (ConvInputStats) lb_backend_get_proc (cuda,
      "lingbot_backend_cuda_conv_input_stats");
  g_assert_nonnull (stats);
  LbWorkerGroup *cg = NULL, *gg = NULL;
  LbStream *gs = NULL;
  g_setenv ("LINGBOT_VAE_CONV_INPUT", "bf16", TRUE);
  if (R > 1) {
    cg = lb_worker_group_new (lb_cpu_backend (), R, NULL, NULL, &err);
    g_assert_no_error (err);
  }
  LingbotVaeDecoder *ref = decoder_on (cg, cpu_stream);
  g_unsetenv ("LINGBOT_VAE_CONV_INPUT");
  g_setenv ("LINGBOT_CUDA_CONV_LAYOUT", "ndhwc", TRUE);
  if (R > 1) {
    int ordinals[8] = { 0 };
    LbWorkerGroupOptions go = { 0, lb_local_collectives (), "vae-cuda-in16" };
    gg = lb_worker_group_new (cuda, R, ordinals, &go, &err);
    g_assert_no_error (err);
    g_assert_true (lb_worker_group_run (gg, set_bf16, NULL, &err));
  } else {
    gs = cuda->stream_new (cuda, 0, &err);
    g_assert_no_error (err);
    gs->math = LB_MATH_BF16;
  }
  LingbotVaeDecoder *dec = decoder_on (gg, gs);
  double golden = 0, vs_cpu = 0;
  guint64 c0[3], c1[3];
  stats (&c0[0], &c0[1], &c0[2]);
  decode_golden (ref, dec, &golden, &vs_cpu);
  stats (&c1[0], &c1[1], &c1[2]);
  g_unsetenv ("LINGBOT_CUDA_CONV_LAYOUT");
  const guint64 calls = c1[0] + c1[1] + c1[2] - c0[0] - c0[1] - c0[2];
  printf ("# vae decode cuda, bf16 channels-last conv inputs, %d rank(s) of "
      "device 0: max|cuda - cpu bf16-input| %.3g, golden max abs %.3g; "
      "%" G_GUINT64_FORMAT " calls: %" G_GUINT64_FORMAT " in place, %"
      G_GUINT64_FORMAT " concatenated, %" G_GUINT64_FORMAT " widened\n", R,
      vs_cpu, golden, calls, c1[0] - c0[0], c1[1] - c0[1], c1[2] - c0[2]);
  /* 33 convs per latent frame and rank (tests/vae/test-vae-device.c
   * IN16_CONVS), 4 latent frames per chunk */
  g_assert_cmpuint (calls, ==, (guint64) N_CHUNKS * 4 * 33 * R);
  g_assert_cmpuint (c1[2] - c0[2], ==, 0);
  g_assert_cmpfloat (vs_cpu, <=, 5e-2);
  g_assert_cmpfloat (golden, <=, 0.1);
  lingbot_vae_decoder_free (dec);
  lingbot_vae_decoder_free (ref);
  if (gs)
    gs->backend->stream_free (gs);
  if (gg)
    lb_worker_group_unref (gg);
  if (cg)
    lb_worker_group_unref (cg);
}

static void
check_condition (int H, int W, int x0, int y0, int n_chunks)
{
  g_autoptr (GError) err = NULL;
  LbStream *gs = cuda->stream_new (cuda, 0, &err);
  g_assert_no_error (err);
  LbTensor img;
  vae_test_image_crop (ck, &img, y0, x0, H, W);
  LingbotVaeEncoder *ref
      = lingbot_vae_encoder_new (vae, cpu_stream, H, W, &err);
  g_assert_no_error (err);
  LingbotVaeEncoder *enc = lingbot_vae_encoder_new (vae, gs, H, W, &err);
  g_assert_no_error (err);
  int64_t yshape[4] = { 20, 4, H / 8, W / 8 };
  g_autoptr (LbTensor) ya = lb_tensor_new (LB_DTYPE_F32, 4, yshape);
  g_autoptr (LbTensor) yb = lb_tensor_new (LB_DTYPE_F32, 4, yshape);
  double golden = 0, vs_cpu = 0;
  for (int k = 0; k < n_chunks; k++) {
    memset (yb->data, 0xff, lb_tensor_nbytes (yb));
    g_assert_true (lingbot_vae_encoder_encode_condition (ref,
            k == 0 ? &img : NULL, ya, &err));
    g_assert_true (lingbot_vae_encoder_encode_condition (enc,
            k == 0 ? &img : NULL, yb, &err));
    g_assert_no_error (err);
    double m = MAX (vae_test_max_abs (ya), 1e-30);
    double ec = vae_test_max_abs_diff (yb, ya) / m;
    vs_cpu = MAX (vs_cpu, ec);
    if (H == 48 && k < 4) {
      char name[64];
      g_snprintf (name, sizeof name, "output.cond_chunk%d", k);
      const LbTensor *want = vae_test_get (ck, name);
      double eg = vae_test_max_abs_diff (yb, want) / vae_test_max_abs (want);
      golden = MAX (golden, eg);
      printf ("#   cond_chunk%d: rel err vs golden %.3g, vs cpu %.3g\n", k, eg,
          ec);
    }
  }
  printf ("# vae condition cuda %dx%d, %d chunks: golden max rel err %.3g, "
      "max rel |cuda - cpu| %.3g; constant from latent %d (cpu %d), "
      "encoder ran %d segments (cpu %d)\n",
      W, H, n_chunks, golden, vs_cpu,
      lingbot_vae_encoder_get_constant_from (enc),
      lingbot_vae_encoder_get_constant_from (ref),
      lingbot_vae_encoder_get_n_encoded_segments (enc),
      lingbot_vae_encoder_get_n_encoded_segments (ref));
  g_assert_cmpfloat (golden, <=, 1e-4);
  g_assert_cmpfloat (vs_cpu, <=, 1e-4);
  lingbot_vae_encoder_free (enc);
  lingbot_vae_encoder_free (ref);
  gs->backend->stream_free (gs);
}

static void
test_condition_golden (void)
{
  check_condition (48, 80, 0, 0, 4);
}

static void
test_condition_fixed_point (void)
{
  check_condition (16, 16, 16, 8, 10);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autoptr (GError) err = NULL;
  cuda = lingbot_backend_cuda (&err);
  if (cuda == NULL) {
    printf ("SKIP: %s\n", err->message);
    return 77;
  }
  ck = vae_test_open_golden ();
  vae = lingbot_vae_new_from_checkpoint (ck, LINGBOT_VAE_BOTH, &err);
  g_assert_no_error (err);
  cpu_stream = vae_test_stream ();

  static const DecCase cases[] = {
    {0, FALSE},
    {2, FALSE},
    {3, FALSE},
    {2, TRUE},
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    char *name = cases[i].n_ranks == 0 ? g_strdup ("/vae/cuda/decode/unsharded")
        : g_strdup_printf ("/vae/cuda/decode/%s%d",
        cases[i].nccl ? "nccl" : "local", cases[i].n_ranks);
    g_test_add_data_func (name, &cases[i], test_decode);
    g_free (name);
  }
  g_test_add_func ("/vae/cuda/decode/random-7rows-3", test_decode_random);
  g_test_add_data_func ("/vae/cuda/decode/bf16-input-1", GINT_TO_POINTER (1),
      test_decode_in16);
  g_test_add_data_func ("/vae/cuda/decode/bf16-input-3", GINT_TO_POINTER (3),
      test_decode_in16);
  g_test_add_func ("/vae/cuda/condition/golden", test_condition_golden);
  g_test_add_func ("/vae/cuda/condition/fixed-point",
      test_condition_fixed_point);
  int rc = g_test_run ();
  lingbot_vae_unref (vae);
  lingbot_checkpoint_unref (ck);
  cpu_stream->backend->stream_free (cpu_stream);
  return rc;
}

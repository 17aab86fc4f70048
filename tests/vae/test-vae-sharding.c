/* lingbot-gst: height-sharded VAE decode equals the unsharded decode
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * For 1 to 5 CPU ranks (spec A.10, DESIGN.md section 3): the golden
 * tiny VAE on its 6x10 latent (4 ranks: bands 2,2,1,1, so some bands are
 * one row, the halo width; 5 ranks: 2,1,1,1,1), on a 5-row crop (bands
 * 2,1,1,1 on 4 ranks) and a 7-row latent (3,2,2 on 3 ranks); all four
 * golden chunks streamed.  The frames are compared byte for byte
 * (docs/design.md "Determinism"), and the unsharded decode on one OpenMP
 * thread equals it on the test's OMP_NUM_THREADS.  A latent with fewer
 * rows than ranks is refused at configure time.
 */
#include "vae-test-common.h"
#include "comm/worker-group.h"

#include <omp.h>

#define N_CHUNKS 4

static LingbotCheckpoint *ck;
static LingbotVae *vae;
static LbStream *stream;
#define MAX_RANKS 5

static LbWorkerGroup *groups[MAX_RANKS + 1];

/* the first @n frames of two [3, T, H, W] f32 tensors, byte for byte */
static void
assert_frames_equal (const LbTensor * a, const LbTensor * b, int n)
{
  const int64_t plane = a->shape[2] * a->shape[3];
  for (int c = 0; c < 3; c++)
    g_assert_cmpmem ((const float *) a->data + c * a->shape[1] * plane,
        n * plane * 4, (const float *) b->data + c * b->shape[1] * plane,
        n * plane * 4);
}

/* latents of chunk k with @rows rows (cropped from, or tiled over, the
 * golden 6 rows) */
static LbTensor *
chunk_latents (int k, int rows)
{
  char name[64];
  g_snprintf (name, sizeof name, "input.latent_chunk%d", k);
  const LbTensor *g = vae_test_get (ck, name);
  int64_t shape[4] = { 16, 4, rows, 10 };
  LbTensor *t = lb_tensor_new (LB_DTYPE_F32, 4, shape);
  float *d = t->data;
  for (int c = 0; c < 16; c++)
    for (int l = 0; l < 4; l++)
      for (int h = 0; h < rows; h++)
        for (int w = 0; w < 10; w++) {
          int64_t idx[5] = { 0, c, l, h % 6, w };
          d[((c * 4 + l) * rows + h) * 10 + w] = (float) lb_tensor_get (g, idx);
        }
  return t;
}

static void
check_geometry (int rows, int n_ranks)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotVaeDecoder) ref
      = lingbot_vae_decoder_new (vae, stream, rows, 10, 4, &err);
  g_assert_no_error (err);
  g_autoptr (LingbotVaeDecoder) sh =
      lingbot_vae_decoder_new_sharded (vae, groups[n_ranks], rows, 10, 4, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_vae_decoder_get_n_ranks (sh), ==, n_ranks);
  GString *bands = g_string_new (NULL);
  int64_t total = 0;
  for (int r = 0; r < n_ranks; r++) {
    int64_t r0, nr;
    lingbot_vae_decoder_get_band (sh, r, &r0, &nr);
    g_assert_cmpint (r0, ==, total);
    g_assert_cmpint (nr, >=, 1);
    total += nr;
    g_string_append_printf (bands, "%s%" G_GINT64_FORMAT, r ? "," : "", nr);
  }
  g_assert_cmpint (total, ==, rows);

  int64_t fshape[4] = { 3, 16, 8 * rows, 80 };
  g_autoptr (LbTensor) fa = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_autoptr (LbTensor) fb = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  guint64 halo = 0;
  for (int k = 0; k < N_CHUNKS; k++) {
    g_autoptr (LbTensor) lat = chunk_latents (k, rows);
    int na = 0, nb = 0;
    memset (fb->data, 0xff, lb_tensor_nbytes (fb));     /* NaN: unwritten */
    g_assert_true (lingbot_vae_decoder_decode (ref, lat, fa, &na, &err));
    g_assert_no_error (err);
    g_assert_true (lingbot_vae_decoder_decode (sh, lat, fb, &nb, &err));
    g_assert_no_error (err);
    g_assert_cmpint (na, ==, nb);
    /* every op computes an element in an order that does not depend on
     * the band (nor on the thread count): the bytes of the whole frame */
    assert_frames_equal (fa, fb, na);
    halo = lingbot_vae_decoder_get_halo_bytes (sh);
  }
  g_print ("%d rows on %d ranks (bands %s): byte-identical, halo "
      "%" G_GUINT64_FORMAT " bytes/chunk\n", rows, n_ranks, bands->str, halo);
  g_string_free (bands, TRUE);
  if (n_ranks > 1)
    g_assert_cmpuint (halo, >, 0);
}

static void
test_ranks (gconstpointer data)
{
  int n = GPOINTER_TO_INT (data);
  check_geometry (6, n);
  if (n == 4)
    check_geometry (5, n);
  if (n == 3)
    check_geometry (7, n);
}

/* The real session geometry's 58 latent rows (464x832 video, spec C.10) on
 * 4 ranks (15,15,14,14); 4 latent columns keep it cheap.  (A width-2 random
 * model is too ill-conditioned for this check: its 2-channel RMS norms
 * amplify rounding differences to 1e-3.) */
static void
test_58_rows (void)
{
  g_autoptr (GError) err = NULL;
  LingbotVae *v = vae;
  g_autoptr (LingbotVaeDecoder) ref
      = lingbot_vae_decoder_new (v, stream, 58, 4, 2, &err);
  g_assert_no_error (err);
  g_autoptr (LingbotVaeDecoder) sh
      = lingbot_vae_decoder_new_sharded (v, groups[4], 58, 4, 2, &err);
  g_assert_no_error (err);
  int64_t r0, nr;
  lingbot_vae_decoder_get_band (sh, 3, &r0, &nr);
  g_assert_cmpint (r0, ==, 44);
  g_assert_cmpint (nr, ==, 14);
  int64_t ls[4] = { 16, 2, 58, 4 }, fs[4] = { 3, 8, 464, 32 };
  g_autoptr (LbTensor) fa = lb_tensor_new (LB_DTYPE_F32, 4, fs);
  g_autoptr (LbTensor) fb = lb_tensor_new (LB_DTYPE_F32, 4, fs);
  for (int k = 0; k < 2; k++) {
    g_autoptr (LbTensor) lat = vae_test_random (4, ls, 11 + k, 2.f);
    int n = 0;
    g_assert_true (lingbot_vae_decoder_decode (ref, lat, fa, &n, &err));
    g_assert_true (lingbot_vae_decoder_decode (sh, lat, fb, &n, &err));
    g_assert_no_error (err);
    assert_frames_equal (fa, fb, n);
  }
}

/* The unsharded decode on one OpenMP thread gives the bytes of the decode
 * on the test's OMP_NUM_THREADS (2 under meson). */
static void
test_threads (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotVaeDecoder) a
      = lingbot_vae_decoder_new (vae, stream, 6, 10, 4, &err);
  g_assert_no_error (err);
  g_autoptr (LingbotVaeDecoder) b
      = lingbot_vae_decoder_new (vae, stream, 6, 10, 4, &err);
  g_assert_no_error (err);
  int64_t fshape[4] = { 3, 16, 48, 80 };
  g_autoptr (LbTensor) fa = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_autoptr (LbTensor) fb = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  const int threads = omp_get_max_threads ();
  for (int k = 0; k < N_CHUNKS; k++) {
    g_autoptr (LbTensor) lat = chunk_latents (k, 6);
    int na = 0, nb = 0;
    g_assert_true (lingbot_vae_decoder_decode (a, lat, fa, &na, &err));
    omp_set_num_threads (1);
    g_assert_true (lingbot_vae_decoder_decode (b, lat, fb, &nb, &err));
    omp_set_num_threads (threads);
    g_assert_no_error (err);
    g_assert_cmpint (na, ==, nb);
    assert_frames_equal (fa, fb, na);
  }
}

typedef struct
{
  LingbotVaeDecoder *dec;
  const LbTensor *lat;
  LbTensor *frames;
  int n[4];
} OnRankArgs;

static gboolean
on_rank (LbRank * rank, gpointer user_data, GError ** error)
{
  OnRankArgs *a = user_data;
  return lingbot_vae_decoder_decode_on_rank (a->dec, rank, a->lat, a->frames,
      &a->n[rank->rank], error);
}

/* The per-rank entry point, called from rank functions, equals decode(). */
static void
test_on_rank (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotVaeDecoder) a
      = lingbot_vae_decoder_new_sharded (vae, groups[3], 6, 10, 4, &err);
  g_assert_no_error (err);
  g_autoptr (LingbotVaeDecoder) b
      = lingbot_vae_decoder_new_sharded (vae, groups[3], 6, 10, 4, &err);
  g_assert_no_error (err);
  int64_t fshape[4] = { 3, 16, 48, 80 };
  g_autoptr (LbTensor) fa = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_autoptr (LbTensor) fb = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  for (int k = 0; k < 2; k++) {
    g_autoptr (LbTensor) lat = chunk_latents (k, 6);
    int n = 0;
    g_assert_true (lingbot_vae_decoder_decode (a, lat, fa, &n, &err));
    OnRankArgs args = { b, lat, fb, {0} };
    g_assert_true (lb_worker_group_run (groups[3], on_rank, &args, &err));
    g_assert_no_error (err);
    for (int r = 0; r < 3; r++)
      g_assert_cmpint (args.n[r], ==, n);
    LbTensor va, vb;
    lb_tensor_view_narrow (&va, fa, 1, 0, n);
    lb_tensor_view_narrow (&vb, fb, 1, 0, n);
    g_assert_cmpfloat (vae_test_max_abs_diff (&va, &vb), ==, 0.0);
  }
  /* a rank of another group is refused */
  LbRank *other = lb_worker_group_get_rank (groups[2], 0);
  g_assert_false (lingbot_vae_decoder_decode_on_rank (b, other, NULL, fb, NULL,
          &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
}

static void
test_too_many_ranks (void)
{
  g_autoptr (GError) err = NULL;
  g_assert_null (lingbot_vae_decoder_new_sharded (vae, groups[4], 3, 10, 4,
          &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_print ("%s\n", err->message);
  g_assert_nonnull (strstr (err->message, "3 latent rows"));
  g_assert_nonnull (strstr (err->message, "4 height bands"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  ck = vae_test_open_golden ();
  g_autoptr (GError) err = NULL;
  vae = lingbot_vae_new_from_checkpoint (ck, LINGBOT_VAE_DECODER, &err);
  g_assert_no_error (err);
  stream = vae_test_stream ();
  for (int n = 1; n <= MAX_RANKS; n++) {
    groups[n] = lb_worker_group_new (lb_cpu_backend (), n, NULL, NULL, &err);
    g_assert_no_error (err);
  }
  g_test_add_data_func ("/vae/sharding/ranks-1", GINT_TO_POINTER (1),
      test_ranks);
  g_test_add_data_func ("/vae/sharding/ranks-2", GINT_TO_POINTER (2),
      test_ranks);
  g_test_add_data_func ("/vae/sharding/ranks-3", GINT_TO_POINTER (3),
      test_ranks);
  g_test_add_data_func ("/vae/sharding/ranks-4", GINT_TO_POINTER (4),
      test_ranks);
  g_test_add_data_func ("/vae/sharding/ranks-5", GINT_TO_POINTER (5),
      test_ranks);
  g_test_add_func ("/vae/sharding/58-rows", test_58_rows);
  g_test_add_func ("/vae/sharding/threads", test_threads);
  g_test_add_func ("/vae/sharding/on-rank", test_on_rank);
  g_test_add_func ("/vae/sharding/too-many-ranks", test_too_many_ranks);
  int ret = g_test_run ();
  for (int n = 1; n <= MAX_RANKS; n++)
    lb_worker_group_unref (groups[n]);
  lingbot_vae_unref (vae);
  lingbot_checkpoint_unref (ck);
  stream->backend->stream_free (stream);
  return ret;
}

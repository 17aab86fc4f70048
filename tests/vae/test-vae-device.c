/* lingbot-gst: the VAE's device code paths, on an emulated device
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * No GPU is needed: "fakedev" (tests/common/fakedev.c) says it drives CUDA
 * devices, keeps its memory in host allocations it tracks (fresh blocks
 * are NaN), refuses copies and ops whose pointers are not where they claim
 * to be, and runs the CPU kernels.  So a VAE session on it takes the path
 * of a CUDA rank (weights uploaded per rank, buffers from
 * lb_tensor_new_on(), API tensors staged by backend copies, halos through
 * the collectives with device pointers) and must reproduce the CPU backend
 * bit for bit:
 *   - decoder: the vae_tiny golden latents (6 x 10) unsharded and on 1 and
 *     2 ranks, 7 rows on 2 and 3 ranks (uneven bands 4,3 and 3,2,2), 6
 *     chunks each (causal caches and halos carried across
 *     chunks), then a reset and chunk 0 again;
 *   - encoder: the golden condition stream, a 10-chunk condition stream
 *     that reaches the fixed point (the device compare buffers), the
 *     streaming encode and the one-frame image encode.
 * It also counts what a chunk does on the device: no allocation, the
 * expected number of uploads / downloads, one stream synchronise per
 * chunk and rank where no collective runs, and no refused call.  A
 * backend wrapper (the fakedev table with counting alloc / synchronize)
 * does the counting.  What it cannot check is the CUDA kernels and NCCL
 * (tests/vae/test-vae-cuda.c, suite gpu).
 */
#include <math.h>

#include "vae-test-common.h"
#include "fakedev.h"
#include "comm/worker-group.h"

#define N_CHUNKS 6

static LingbotCheckpoint *ck;
static LingbotVae *vae;
static LbStream *cpu_stream;

/* ---- fakedev with counters ---- */

static LbBackend counted;
static gint n_alloc, n_sync;

static gpointer
counted_alloc (LbBackend * self, int device, gsize nbytes, GError ** error)
{
  (void) self;
  g_atomic_int_inc (&n_alloc);
  return fakedev_backend ()->alloc (fakedev_backend (), device, nbytes, error);
}

static void
counted_free (LbBackend * self, int device, gpointer ptr)
{
  (void) self;
  fakedev_backend ()->free (fakedev_backend (), device, ptr);
}

static gboolean
counted_sync (LbStream * s, GError ** error)
{
  g_atomic_int_inc (&n_sync);
  return fakedev_backend ()->stream_synchronize (s, error);
}

static LbBackend *
dev_backend (void)
{
  static gsize once = 0;
  if (g_once_init_enter (&once)) {
    counted = *fakedev_backend ();
    counted.name = "fakedev-counted";
    counted.alloc = counted_alloc;
    counted.free = counted_free;
    counted.stream_synchronize = counted_sync;
    g_once_init_leave (&once, 1);
  }
  return &counted;
}

typedef struct
{
  FakeDevStats st;
  int alloc, sync;
} Snap;

static Snap
snap (void)
{
  Snap s = { fakedev_stats (), g_atomic_int_get (&n_alloc),
    g_atomic_int_get (&n_sync)
  };
  return s;
}

/* ---- inputs ---- */

/* Latents of chunk @k (golden chunk k % 4) with @rows rows: the golden 6
 * rows cropped or tiled (as test-vae-sharding.c). */
static LbTensor *
chunk_latents (int k, int rows)
{
  char name[64];
  g_snprintf (name, sizeof name, "input.latent_chunk%d", k % 4);
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
poison (LbTensor * t)
{
  memset (t->data, 0xff, lb_tensor_nbytes (t));
}

/* Every value of the first @n frames is finite and in [-1, 1]. */
static void
assert_written (const LbTensor * frames, int n)
{
  LbTensor v;
  lb_tensor_view_narrow (&v, frames, 1, 0, n);
  for (int64_t i = 0; i < lb_tensor_numel (&v); i++) {
    double x = lb_tensor_get_flat (&v, i);
    if (!(x >= -1.0 && x <= 1.0))
      g_error ("frame value %" G_GINT64_FORMAT " is %g (unwritten?)", i, x);
  }
}

static int
bytes_cmp (const LbTensor * a, const LbTensor * b, int n)
{
  LbTensor va, vb;
  lb_tensor_view_narrow (&va, a, 1, 0, n);
  lb_tensor_view_narrow (&vb, b, 1, 0, n);
  /* both are [3, T, H, W] contiguous buffers: compare channel by channel */
  for (int c = 0; c < 3; c++) {
    LbTensor ca, cb;
    lb_tensor_view_select (&ca, &va, 0, c);
    lb_tensor_view_select (&cb, &vb, 0, c);
    int r = memcmp (ca.data, cb.data, lb_tensor_nbytes (&ca));
    if (r != 0)
      return r;
  }
  return 0;
}

/* ---- decoder ---- */

typedef struct
{
  int rows, n_ranks;
  gboolean sharded;             /* FALSE: lingbot_vae_decoder_new() on one stream */
} DecCase;

static void
test_decode (gconstpointer data)
{
  const DecCase *c = data;
  const int R = c->n_ranks, rows = c->rows;
  g_autoptr (GError) err = NULL;
  LbWorkerGroup *gcpu = NULL, *gdev = NULL;
  LbStream *dev_stream = NULL;
  LingbotVaeDecoder *ref, *dec;
  const Snap s_start = snap ();
  if (c->sharded) {
    LbWorkerGroupOptions go = { 0, NULL, "vae-device-test" };
    gcpu = lb_worker_group_new (lb_cpu_backend (), R, NULL, &go, &err);
    g_assert_no_error (err);
    gdev = lb_worker_group_new (dev_backend (), R, NULL, &go, &err);
    g_assert_no_error (err);
    ref = lingbot_vae_decoder_new_sharded (vae, gcpu, rows, 10, 4, &err);
    g_assert_no_error (err);
    dec = lingbot_vae_decoder_new_sharded (vae, gdev, rows, 10, 4, &err);
    g_assert_no_error (err);
  } else {
    dev_stream = dev_backend ()->stream_new (dev_backend (), 0, &err);
    g_assert_no_error (err);
    ref = lingbot_vae_decoder_new (vae, cpu_stream, rows, 10, 4, &err);
    g_assert_no_error (err);
    dec = lingbot_vae_decoder_new (vae, dev_stream, rows, 10, 4, &err);
    g_assert_no_error (err);
  }
  g_assert_cmpint (lingbot_vae_decoder_get_n_ranks (dec), ==, R);
  g_assert_cmpuint (lingbot_vae_decoder_get_cache_bytes (dec), ==,
      lingbot_vae_decoder_get_cache_bytes (ref));
  GString *bands = g_string_new (NULL);
  for (int r = 0; r < R; r++) {
    int64_t nr;
    lingbot_vae_decoder_get_band (dec, r, NULL, &nr);
    g_string_append_printf (bands, "%s%" G_GINT64_FORMAT, r ? "," : "", nr);
  }
  const Snap s_created = snap ();
  g_assert_cmpint (s_created.st.bad, ==, s_start.st.bad);
  /* every rank holds weights, caches and staging on its device */
  g_assert_cmpint (s_created.st.live_blocks - s_start.st.live_blocks, >,
      100 * R);

  int64_t fshape[4] = { 3, 16, 8 * rows, 80 };
  g_autoptr (LbTensor) fa = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_autoptr (LbTensor) fb = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_autoptr (LbTensor) first = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  int live[N_CHUNKS];
  double golden_worst = 0;
  guint64 halo = 0;
  for (int k = 0; k < N_CHUNKS; k++) {
    g_autoptr (LbTensor) lat = chunk_latents (k, rows);
    int na = 0, nb = 0;
    poison (fa);
    poison (fb);
    g_assert_true (lingbot_vae_decoder_decode (ref, lat, fa, &na, &err));
    g_assert_no_error (err);
    const Snap s0 = snap ();
    g_assert_true (lingbot_vae_decoder_decode (dec, lat, fb, &nb, &err));
    g_assert_no_error (err);
    const Snap s1 = snap ();
    g_assert_cmpint (na, ==, k == 0 ? 13 : 16);
    g_assert_cmpint (nb, ==, na);
    assert_written (fb, nb);
    g_assert_cmpint (bytes_cmp (fa, fb, na), ==, 0);
    if (k == 0)
      memcpy (first->data, fb->data, lb_tensor_nbytes (fb));
    if (rows == 6 && k < 4) {
      char name[64];
      g_snprintf (name, sizeof name, "output.decoded_chunk%d", k);
      LbTensor got;
      lb_tensor_view_narrow (&got, fb, 1, 0, nb);
      golden_worst =
          MAX (golden_worst, vae_test_max_abs_diff (&got, vae_test_get (ck,
                  name)));
    }
    /* what the chunk did on the device */
    const int h2d = s1.st.n_h2d - s0.st.n_h2d;
    const int d2h = s1.st.n_d2h - s0.st.n_d2h;
    const int syncs = s1.sync - s0.sync;
    const int want_d2h = R == 1 ? (nb == 16 ? 1 : 3) : 3 * nb * R;
    g_print ("  chunk %d: %d ops, %d H2D, %d D2H, %d D2D, %d syncs, %d "
        "allocations, %d live blocks\n",
        k, s1.st.n_ops - s0.st.n_ops, h2d, d2h, s1.st.n_d2d - s0.st.n_d2d,
        syncs, s1.alloc - s0.alloc, s1.st.live_blocks);
    g_assert_cmpint (s1.alloc - s0.alloc, ==, 0);
    g_assert_cmpint (s1.st.live_blocks, ==, s0.st.live_blocks);
    g_assert_cmpint (s1.st.bad, ==, s_start.st.bad);
    g_assert_cmpint (h2d, ==, R);       /* one latent upload per rank */
    g_assert_cmpint (d2h, ==, want_d2h);
    if (R == 1)
      g_assert_cmpint (syncs, ==, 1);
    else
      g_assert_cmpint (s1.st.n_d2d - s0.st.n_d2d, >, 0);        /* halo moves */
    live[k] = s1.st.live_blocks;
    halo = lingbot_vae_decoder_get_halo_bytes (dec);
    g_assert_cmpuint (halo, ==, lingbot_vae_decoder_get_halo_bytes (ref));
  }
  g_assert_cmpint (live[2], ==, live[5]);
  g_assert_cmpint (live[0], ==, live[5]);

  /* reset: zero history again, chunk 0 again gives the first frames */
  lingbot_vae_decoder_reset (ref);
  lingbot_vae_decoder_reset (dec);
  g_autoptr (LbTensor) lat0 = chunk_latents (0, rows);
  int na = 0, nb = 0;
  poison (fb);
  g_assert_true (lingbot_vae_decoder_decode (ref, lat0, fa, &na, &err));
  g_assert_true (lingbot_vae_decoder_decode (dec, lat0, fb, &nb, &err));
  g_assert_no_error (err);
  g_assert_cmpint (nb, ==, 13);
  g_assert_cmpint (bytes_cmp (fa, fb, 13), ==, 0);
  g_assert_cmpint (bytes_cmp (first, fb, 13), ==, 0);

  g_autofree char *golden
      = rows == 6 ? g_strdup_printf ("golden max|c-g| %.3g", golden_worst)
      : g_strdup ("no golden at this size");
  g_print ("%s, %d rows on %d rank(s) (bands %s): %d chunks bit-identical "
      "to the CPU; %s; halo %" G_GUINT64_FORMAT
      " bytes/chunk; %d live device blocks\n",
      c->sharded ? "sharded" : "unsharded", rows, R, bands->str, N_CHUNKS,
      golden, halo, live[5] - s_start.st.live_blocks);
  g_string_free (bands, TRUE);
  if (rows == 6)
    g_assert_cmpfloat (golden_worst, <=, 1e-4);
  if (R > 1)
    g_assert_cmpuint (halo, >, 0);

  lingbot_vae_decoder_free (dec);
  lingbot_vae_decoder_free (ref);
  if (dev_stream)
    dev_stream->backend->stream_free (dev_stream);
  if (gdev)
    lb_worker_group_unref (gdev);
  if (gcpu)
    lb_worker_group_unref (gcpu);
  const Snap s_end = snap ();
  g_assert_cmpint (s_end.st.bad, ==, 0);
  /* everything the session put on the devices is freed with it */
  g_assert_cmpint (s_end.st.live_blocks, ==, s_start.st.live_blocks);
}

/* ---- decoder with bf16 channels-last conv inputs ---- */

static gboolean
set_bf16 (LbRank * rank, gpointer data, GError ** error)
{
  (void) data;
  (void) error;
  rank->stream->math = LB_MATH_BF16;
  return TRUE;
}

/* Largest and mean |a - b| over the first @n frames of two [3, T, H, W]
 * buffers. */
static double
frames_diff (const LbTensor * a, const LbTensor * b, int n, double *mean)
{
  LbTensor va, vb;
  lb_tensor_view_narrow (&va, a, 1, 0, n);
  lb_tensor_view_narrow (&vb, b, 1, 0, n);
  double sum = 0;
  int64_t count = 0;
  for (int c = 0; c < 3; c++) {
    LbTensor ca, cb;
    lb_tensor_view_select (&ca, &va, 0, c);
    lb_tensor_view_select (&cb, &vb, 0, c);
    const float *pa = ca.data, *pb = cb.data;
    for (int64_t i = 0; i < lb_tensor_numel (&ca); i++)
      sum += fabs ((double) pa[i] - pb[i]);
    count += lb_tensor_numel (&ca);
  }
  *mean = sum / (double) count;
  return vae_test_max_abs_diff (&va, &vb);
}

/* Per latent frame, vae_tiny's decoder runs 33 convs on bf16 inputs: the
 * 30 cached ones fed by a norm or by the latent (conv_in, 2 in each of
 * its 14 residual blocks, the head; 29 of them after a norm, all but
 * conv_in) and the 3 after an upsample. */
#define IN16_CONVS 33
#define IN16_NORMS 29

static LingbotVaeDecoder *
decoder_on (LbWorkerGroup * g, LbStream * s, int rows)
{
  g_autoptr (GError) err = NULL;
  LingbotVaeDecoder *d = g ? lingbot_vae_decoder_new_sharded (vae, g, rows,
      10, 4, &err) : lingbot_vae_decoder_new (vae, s, rows, 10, 4, &err);
  g_assert_no_error (err);
  return d;
}

/* A decoder on fakedev bf16 streams whose backend says its convolutions
 * take bf16 channels-last inputs (as CUDA with
 * LINGBOT_CUDA_CONV_LAYOUT=ndhwc): every cached conv fed by a norm or the
 * latent reads bf16 NDHWC from the padded buffer, after its cache, each
 * upsample writes its conv's input as bf16 NDHWC, and the halo rows
 * travel as bf16.  Its oracle is the CPU decoder with
 * LINGBOT_VAE_CONV_INPUT=bf16 on the same bands: bit for bit; and that
 * one equals, bit for bit, the f32 NCDHW decode that only rounds the same
 * conv inputs to bf16 values (LINGBOT_VAE_CONV_INPUT=round), so the
 * layout, the bf16 caches and the bf16 halo rows change no value.
 * Against the f32 decode the frames move only by that rounding. */
static void
test_decode_in16 (gconstpointer data)
{
  const DecCase *c = data;
  const int R = c->n_ranks, rows = c->rows;
  g_autoptr (GError) err = NULL;
  const Snap s_start = snap ();
  LbWorkerGroup *gcpu = NULL, *gdev = NULL;
  LbStream *one = NULL;
  LbWorkerGroupOptions go = { 0, NULL, "vae-device-in16" };
  /* the oracle's ranks start (and read the variable) before anything
   * else runs */
  LbWorkerGroup *gcpu_r = NULL;
  g_setenv ("LINGBOT_VAE_CONV_INPUT", "bf16", TRUE);
  if (R > 1) {
    gcpu = lb_worker_group_new (lb_cpu_backend (), R, NULL, &go, &err);
    g_assert_no_error (err);
  }
  LingbotVaeDecoder *ref16 = decoder_on (gcpu, cpu_stream, rows);
  g_setenv ("LINGBOT_VAE_CONV_INPUT", "round", TRUE);
  if (R > 1) {
    gcpu_r = lb_worker_group_new (lb_cpu_backend (), R, NULL, &go, &err);
    g_assert_no_error (err);
  }
  LingbotVaeDecoder *refr = decoder_on (gcpu_r, cpu_stream, rows);
  g_unsetenv ("LINGBOT_VAE_CONV_INPUT");
  LingbotVaeDecoder *ref = decoder_on (NULL, cpu_stream, rows);
  if (R > 1) {
    gdev = lb_worker_group_new (dev_backend (), R, NULL, &go, &err);
    g_assert_no_error (err);
    g_assert_true (lb_worker_group_run (gdev, set_bf16, NULL, &err));
  } else {
    one = dev_backend ()->stream_new (dev_backend (), 0, &err);
    g_assert_no_error (err);
    one->math = LB_MATH_BF16;
  }
  fakedev_set_conv_input_bf16 (TRUE);
  LingbotVaeDecoder *dec = decoder_on (gdev, one, rows);
  fakedev_set_conv_input_bf16 (FALSE);
  g_assert_cmpuint (lingbot_vae_decoder_get_cache_bytes (dec), ==,
      lingbot_vae_decoder_get_cache_bytes (ref16));
  if (R == 1) {
    /* the bf16 NDHWC caches take half the bytes of f32 ones, the time
     * convs' stay f32 */
    g_assert_cmpuint (lingbot_vae_decoder_get_cache_bytes (dec), <,
        lingbot_vae_decoder_get_cache_bytes (ref));
    g_assert_cmpuint (lingbot_vae_decoder_get_cache_bytes (dec), >,
        lingbot_vae_decoder_get_cache_bytes (ref) / 2);
  }

  int64_t fshape[4] = { 3, 16, 8 * rows, 80 };
  g_autoptr (LbTensor) fr = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_autoptr (LbTensor) f16 = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_autoptr (LbTensor) fround = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_autoptr (LbTensor) fd = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_autoptr (LbTensor) first = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  double worst = 0, mean_worst = 0;
  for (int k = 0; k < N_CHUNKS; k++) {
    g_autoptr (LbTensor) lat = chunk_latents (k, rows);
    int nr = 0, n16 = 0, nd = 0;
    poison (f16);
    poison (fd);
    g_assert_true (lingbot_vae_decoder_decode (ref, lat, fr, &nr, &err));
    g_assert_true (lingbot_vae_decoder_decode (ref16, lat, f16, &n16, &err));
    g_assert_no_error (err);
    int nround = 0;
    g_assert_true (lingbot_vae_decoder_decode (refr, lat, fround, &nround,
            &err));
    g_assert_no_error (err);
    g_assert_cmpint (nround, ==, nr);
    /* the layout, the bf16 caches and halo rows change no value: the f32
     * decode with the same inputs rounded gives the same bytes */
    g_assert_cmpint (bytes_cmp (fround, f16, nr), ==, 0);
    const Snap s0 = snap ();
    g_assert_true (lingbot_vae_decoder_decode (dec, lat, fd, &nd, &err));
    g_assert_no_error (err);
    const Snap s1 = snap ();
    g_assert_cmpint (n16, ==, nr);
    g_assert_cmpint (nd, ==, nr);
    assert_written (fd, nd);
    g_assert_cmpint (bytes_cmp (f16, fd, nd), ==, 0);
    g_assert_cmpint (s1.alloc - s0.alloc, ==, 0);
    g_assert_cmpint (s1.st.bad, ==, s_start.st.bad);
    /* 4 latent frames a chunk, on each of the R ranks */
    g_assert_cmpint (s1.st.n_conv_bf16_x - s0.st.n_conv_bf16_x, ==,
        4 * IN16_CONVS * R);
    g_assert_cmpint (s1.st.n_norm_bf16_y - s0.st.n_norm_bf16_y, ==,
        4 * IN16_NORMS * R);
    double mean;
    worst = MAX (worst, frames_diff (fr, fd, nd, &mean));
    mean_worst = MAX (mean_worst, mean);
    if (k == 0)
      memcpy (first->data, fd->data, lb_tensor_nbytes (fd));
  }
  /* the halo rows of the bf16-input convs travel in half the bytes (a
   * steady chunk's); the time convs' rows stay f32 */
  const guint64 halo16 = lingbot_vae_decoder_get_halo_bytes (dec);
  const guint64 halo32 = lingbot_vae_decoder_get_halo_bytes (refr);
  g_assert_cmpuint (halo16, ==, lingbot_vae_decoder_get_halo_bytes (ref16));
  if (R > 1) {
    g_assert_cmpuint (halo16, <, halo32);
    g_assert_cmpuint (halo16, >, halo32 / 2);
  } else {
    g_assert_cmpuint (halo16, ==, 0);
  }
  /* reset: the bf16 caches are zeroed again */
  lingbot_vae_decoder_reset (dec);
  g_autoptr (LbTensor) lat0 = chunk_latents (0, rows);
  int n0 = 0;
  g_assert_true (lingbot_vae_decoder_decode (dec, lat0, fd, &n0, &err));
  g_assert_no_error (err);
  g_assert_cmpint (bytes_cmp (first, fd, n0), ==, 0);
  g_print ("bf16 channels-last conv inputs, %d rows on %d rank(s): %d chunks "
      "bit-identical to the CPU's bf16-input decode; against f32 max %.3g, "
      "mean %.3g (worst chunk)\n", rows, R, N_CHUNKS, worst, mean_worst);
  /* the rounding is seen, and bounded: 33 conv inputs per latent frame
   * rounded to 8 significant bits (relative 2^-9) move frames in [-1, 1]
   * by at most 0.056 and on average 5.5e-3 (measured on 1-3 ranks) on
   * this random model */
  g_assert_cmpfloat (worst, >, 0);
  g_assert_cmpfloat (worst, <=, 0.1);
  g_assert_cmpfloat (mean_worst, <=, 1e-2);

  lingbot_vae_decoder_free (dec);
  lingbot_vae_decoder_free (ref16);
  lingbot_vae_decoder_free (refr);
  lingbot_vae_decoder_free (ref);
  if (one)
    one->backend->stream_free (one);
  if (gdev)
    lb_worker_group_unref (gdev);
  if (gcpu)
    lb_worker_group_unref (gcpu);
  if (gcpu_r)
    lb_worker_group_unref (gcpu_r);
  const Snap s_end = snap ();
  g_assert_cmpint (s_end.st.bad, ==, 0);
  g_assert_cmpint (s_end.st.live_blocks, ==, s_start.st.live_blocks);
}

/* ---- encoder ---- */

static LbStream *
new_dev_stream (int device)
{
  g_autoptr (GError) err = NULL;
  LbStream *s = dev_backend ()->stream_new (dev_backend (), device, &err);
  g_assert_no_error (err);
  return s;
}

/* The golden condition stream (48 x 80, 4 chunks), and a 16 x 16 crop for
 * 10 chunks that reaches the fixed point, so zero chunks are served from
 * the stored latent after the device compare buffers saw no change. */
static void
check_condition (int H, int W, int x0, int y0, int n_chunks)
{
  g_autoptr (GError) err = NULL;
  LbStream *ds = new_dev_stream (1);
  const Snap s_start = snap ();
  LbTensor img;
  vae_test_image_crop (ck, &img, y0, x0, H, W);
  LingbotVaeEncoder *ref
      = lingbot_vae_encoder_new (vae, cpu_stream, H, W, &err);
  g_assert_no_error (err);
  LingbotVaeEncoder *enc = lingbot_vae_encoder_new (vae, ds, H, W, &err);
  g_assert_no_error (err);
  int64_t yshape[4] = { 20, 4, H / 8, W / 8 };
  g_autoptr (LbTensor) ya = lb_tensor_new (LB_DTYPE_F32, 4, yshape);
  g_autoptr (LbTensor) yb = lb_tensor_new (LB_DTYPE_F32, 4, yshape);
  int served_chunk = -1;
  double golden_worst = 0;
  for (int k = 0; k < n_chunks; k++) {
    poison (yb);
    g_assert_true (lingbot_vae_encoder_encode_condition (ref,
            k == 0 ? &img : NULL, ya, &err));
    g_assert_no_error (err);
    const Snap s0 = snap ();
    const int ran0 = lingbot_vae_encoder_get_n_encoded_segments (enc);
    g_assert_true (lingbot_vae_encoder_encode_condition (enc,
            k == 0 ? &img : NULL, yb, &err));
    g_assert_no_error (err);
    const Snap s1 = snap ();
    g_assert_cmpint (memcmp (ya->data, yb->data, lb_tensor_nbytes (ya)), ==, 0);
    g_assert_cmpint (s1.alloc - s0.alloc, ==, 0);
    g_assert_cmpint (s1.st.bad, ==, 0);
    if (H == 48 && k < 4) {
      char name[64];
      g_snprintf (name, sizeof name, "output.cond_chunk%d", k);
      const LbTensor *want = vae_test_get (ck, name);
      golden_worst = MAX (golden_worst,
          vae_test_max_abs_diff (yb, want) / vae_test_max_abs (want));
    }
    if (lingbot_vae_encoder_get_n_encoded_segments (enc) == ran0) {
      /* a chunk served from the stored latent: 4 segments x 16 channel
       * downloads, no op, no upload, one synchronise */
      if (served_chunk < 0)
        served_chunk = k;
      g_assert_cmpint (s1.st.n_ops - s0.st.n_ops, ==, 0);
      g_assert_cmpint (s1.st.n_h2d - s0.st.n_h2d, ==, 0);
      g_assert_cmpint (s1.st.n_d2h - s0.st.n_d2h, ==, 4 * 16);
      g_assert_cmpint (s1.sync - s0.sync, ==, 1);
    }
  }
  g_assert_cmpint (lingbot_vae_encoder_get_constant_from (enc), ==,
      lingbot_vae_encoder_get_constant_from (ref));
  g_assert_cmpint (lingbot_vae_encoder_get_n_encoded_segments (enc), ==,
      lingbot_vae_encoder_get_n_encoded_segments (ref));
  g_autofree char *golden
      = H == 48 ? g_strdup_printf ("golden max rel %.3g", golden_worst)
      : g_strdup ("no golden at this size");
  g_print ("condition %dx%d, %d chunks: bit-identical to the CPU; constant "
      "from latent %d, encoder ran %d segments, first served chunk %d; "
      "%s\n",
      W, H, n_chunks, lingbot_vae_encoder_get_constant_from (enc),
      lingbot_vae_encoder_get_n_encoded_segments (enc), served_chunk, golden);
  if (H == 48)
    g_assert_cmpfloat (golden_worst, <=, 1e-4);
  else
    g_assert_cmpint (served_chunk, >, 0);
  lingbot_vae_encoder_free (enc);
  lingbot_vae_encoder_free (ref);
  ds->backend->stream_free (ds);
  g_assert_cmpint (snap ().st.live_blocks, ==, s_start.st.live_blocks);
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

/* lingbot_vae_encoder_encode() of [image, 12 zeros] then 4 more frames,
 * and lingbot_vae_encode_image(). */
static void
test_encode_stream (void)
{
  g_autoptr (GError) err = NULL;
  LbStream *ds = new_dev_stream (2);
  const LbTensor *image = vae_test_get (ck, "input.image_tensor");
  int64_t pshape[4] = { 3, 13, 48, 80 };
  g_autoptr (LbTensor) px = vae_test_random (4, pshape, 7, 1.f);
  LbTensor f0, src;
  lb_tensor_view_narrow (&f0, px, 1, 0, 1);
  lb_tensor_view_reshape (&src, image, 4, (int64_t[4]) { 3, 1, 48, 80 });
  g_assert_true (lb_tensor_copy_into (&f0, &src, NULL));
  g_autoptr (LingbotVaeEncoder) ref
      = lingbot_vae_encoder_new (vae, cpu_stream, 48, 80, &err);
  g_autoptr (LingbotVaeEncoder) enc
      = lingbot_vae_encoder_new (vae, ds, 48, 80, &err);
  g_assert_no_error (err);
  int64_t lshape[4] = { 16, 4, 6, 10 };
  g_autoptr (LbTensor) la = lb_tensor_new (LB_DTYPE_F32, 4, lshape);
  g_autoptr (LbTensor) lb = lb_tensor_new (LB_DTYPE_F32, 4, lshape);
  poison (lb);
  g_assert_true (lingbot_vae_encoder_encode (ref, px, la, &err));
  const Snap s0 = snap ();
  g_assert_true (lingbot_vae_encoder_encode (enc, px, lb, &err));
  g_assert_no_error (err);
  const Snap s1 = snap ();
  g_assert_cmpint (memcmp (la->data, lb->data, lb_tensor_nbytes (la)), ==, 0);
  /* 4 segments: 3 channel uploads each (frames of a contiguous clip),
   * 16 channel downloads each, one synchronise */
  g_assert_cmpint (s1.st.n_h2d - s0.st.n_h2d, ==, 4 * 3);
  g_assert_cmpint (s1.st.n_d2h - s0.st.n_d2h, ==, 4 * 16);
  g_assert_cmpint (s1.sync - s0.sync, ==, 1);
  g_assert_cmpint (s1.alloc - s0.alloc, ==, 0);

  /* a second call: 4 frames -> 1 latent, caches carried over */
  LbTensor p4, l1a, l1b;
  lb_tensor_view_narrow (&p4, px, 1, 1, 4);
  lb_tensor_view_narrow (&l1a, la, 1, 0, 1);
  lb_tensor_view_narrow (&l1b, lb, 1, 0, 1);
  poison (lb);
  g_assert_true (lingbot_vae_encoder_encode (ref, &p4, &l1a, &err));
  g_assert_true (lingbot_vae_encoder_encode (enc, &p4, &l1b, &err));
  g_assert_no_error (err);
  g_assert_cmpfloat (vae_test_max_abs_diff (&l1a, &l1b), ==, 0.0);
  g_assert_cmpfloat (vae_test_max_abs (&l1b), >, 0.0);

  int64_t ishape[4] = { 16, 1, 6, 10 };
  g_autoptr (LbTensor) ia = lb_tensor_new (LB_DTYPE_F32, 4, ishape);
  g_autoptr (LbTensor) ib = lb_tensor_new (LB_DTYPE_F32, 4, ishape);
  poison (ib);
  g_assert_true (lingbot_vae_encode_image (vae, cpu_stream, image, ia, &err));
  g_assert_true (lingbot_vae_encode_image (vae, ds, image, ib, &err));
  g_assert_no_error (err);
  g_assert_cmpint (memcmp (ia->data, ib->data, lb_tensor_nbytes (ia)), ==, 0);
  double e
      = vae_test_max_abs_diff (ib, vae_test_get (ck, "output.image_latent"));
  g_print ("streaming encode and image encode bit-identical to the CPU; "
      "image latent max|c-g| %.3g\n", e);
  g_assert_cmpfloat (e, <=, 1e-4 * vae_test_max_abs (ib));
  g_assert_cmpint (snap ().st.bad, ==, 0);
  g_clear_pointer (&enc, lingbot_vae_encoder_free);
  ds->backend->stream_free (ds);
}

/* API tensors must be host memory; a device session needs unit-stride
 * rows in them. */
static void
test_errors (void)
{
  g_autoptr (GError) err = NULL;
  LbStream *ds = new_dev_stream (0);
  g_autoptr (LingbotVaeDecoder) dec
      = lingbot_vae_decoder_new (vae, ds, 6, 10, 4, &err);
  g_assert_no_error (err);
  int64_t lshape[4] = { 16, 4, 6, 10 }, fshape[4] = { 3, 16, 48, 80 };
  g_autoptr (LbTensor) dlat
      = lb_tensor_new_on (ds, LB_DTYPE_F32, 4, lshape, &err);
  g_assert_no_error (err);
  g_autoptr (LbTensor) frames = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  g_assert_false (lingbot_vae_decoder_decode (dec, dlat, frames, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==,
      "VAE decode: latents must be a host tensor, got cuda:0");
  g_clear_error (&err);

  /* frames whose columns are every other float of a wider buffer */
  int64_t wshape[4] = { 3, 16, 48, 160 };
  g_autoptr (LbTensor) wide = lb_tensor_new (LB_DTYPE_F32, 4, wshape);
  LbTensor strided;
  int64_t st[4] = { 16 * 48 * 160, 48 * 160, 160, 2 };
  lb_tensor_view_init (&strided, LB_DTYPE_F32, wide->data, LB_DEVICE_HOST, 4,
      fshape, st);
  g_autoptr (LbTensor) lat = chunk_latents (0, 6);
  g_assert_false (lingbot_vae_decoder_decode (dec, lat, &strided, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpstr (err->message, ==,
      "VAE decode: frames [3, 13, 48, 80]: a device session needs unit "
      "stride in the last dimension (source stride 1, destination stride 2)");
  g_clear_error (&err);
  /* the CPU session writes such a view in place */
  g_autoptr (LingbotVaeDecoder) cpu
      = lingbot_vae_decoder_new (vae, cpu_stream, 6, 10, 4, &err);
  g_assert_true (lingbot_vae_decoder_decode (cpu, lat, &strided, NULL, &err));
  g_assert_no_error (err);

  g_autoptr (LingbotVaeEncoder) enc
      = lingbot_vae_encoder_new (vae, ds, 48, 80, &err);
  g_assert_no_error (err);
  int64_t yshape[4] = { 20, 4, 6, 10 };
  g_autoptr (LbTensor) dy
      = lb_tensor_new_on (ds, LB_DTYPE_F32, 4, yshape, &err);
  g_assert_false (lingbot_vae_encoder_encode_condition (enc, vae_test_get (ck,
              "input.image_tensor"), dy, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==,
      "VAE condition: y must be a host tensor, got cuda:0");
  g_clear_pointer (&dlat, lb_tensor_free);
  g_clear_pointer (&dy, lb_tensor_free);
  g_clear_pointer (&enc, lingbot_vae_encoder_free);
  g_clear_pointer (&dec, lingbot_vae_decoder_free);
  ds->backend->stream_free (ds);
  g_assert_cmpint (snap ().st.bad, ==, 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  ck = vae_test_open_golden ();
  g_autoptr (GError) err = NULL;
  vae = lingbot_vae_new_from_checkpoint (ck, LINGBOT_VAE_BOTH, &err);
  g_assert_no_error (err);
  cpu_stream = vae_test_stream ();

  static const DecCase cases[] = {
    {6, 1, FALSE},
    {6, 1, TRUE},
    {6, 2, TRUE},
    {7, 2, TRUE},
    {7, 3, TRUE},
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    char *name = g_strdup_printf ("/vae/device/decode/%s-%drows-%d",
        cases[i].sharded ? "sharded" : "unsharded", cases[i].rows,
        cases[i].n_ranks);
    g_test_add_data_func (name, &cases[i], test_decode);
    g_free (name);
  }
  static const DecCase in16[] = {
    {6, 1, FALSE},
    {6, 2, TRUE},
    {7, 3, TRUE},
  };
  for (guint i = 0; i < G_N_ELEMENTS (in16); i++) {
    char *name = g_strdup_printf ("/vae/device/decode-bf16-input/%drows-%d",
        in16[i].rows, in16[i].n_ranks);
    g_test_add_data_func (name, &in16[i], test_decode_in16);
    g_free (name);
  }
  g_test_add_func ("/vae/device/condition/golden", test_condition_golden);
  g_test_add_func ("/vae/device/condition/fixed-point",
      test_condition_fixed_point);
  g_test_add_func ("/vae/device/encode-stream", test_encode_stream);
  g_test_add_func ("/vae/device/errors", test_errors);
  int ret = g_test_run ();
  lingbot_vae_unref (vae);
  lingbot_checkpoint_unref (ck);
  cpu_stream->backend->stream_free (cpu_stream);
  return ret;
}

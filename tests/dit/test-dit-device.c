/* lingbot-gst: the DiT's device code paths, on an emulated device
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * No GPU is needed: "fakedev" is a backend that says it drives CUDA
 * devices but keeps its memory in host allocations it tracks.  Its copy
 * refuses a transfer whose kind does not match where the pointers live
 * (a host pointer in a device-to-device copy, a device pointer read as
 * host memory, overlapping device copies), its ops refuse any tensor that
 * is not one of its device tensors and then run the CPU kernels, and fresh
 * device memory is filled with NaN so a buffer the DiT forgets to write
 * shows.  With no CUDA module loaded its worker groups use the local
 * collectives, which move device bytes with the backend's copy.
 *
 * So a session on fakedev runs exactly the code a CUDA rank runs (weights
 * uploaded per rank, buffers from lb_tensor_new_on(), every copy through
 * the backend, host reads through lb_tensor_download(), Ulysses packing by
 * ops) and, since the kernels are the CPU's, must reproduce the CPU
 * backend bit for bit: the dit_tiny stream (4 chunks, eviction) at 1, 2
 * and 4 ranks, every pass's x_in / pred / x0, the outputs and the KV
 * caches.  What it cannot check is the CUDA kernels themselves (the gpu
 * suite, tests/gpu/run.sh) and NCCL.
 */
#include <string.h>

#include "dit-test-util.h"
#include "comm/worker-group.h"
#include "lingbot/dit-private.h"
#include "lingbot/dit-session.h"

static LingbotCheckpoint *fixture;
static LingbotDit *dit;

/* ------------------------------------------------------------------------ */
/* the emulated device                                                      */
/* ------------------------------------------------------------------------ */

typedef struct {
  GMutex lock;
  GHashTable *blocks;           /* ptr -> size */
  gint bad;                     /* refused calls */
  gint n_h2d, n_d2h, n_d2d, n_ops;
} FakeDev;

static FakeDev fake;

/* Whether [p, p + n) lies inside one device allocation. */
static gboolean
is_dev (const void *p, gsize n)
{
  gboolean found = FALSE;
  GHashTableIter it;
  gpointer k, v;
  g_mutex_lock (&fake.lock);
  g_hash_table_iter_init (&it, fake.blocks);
  while (!found && g_hash_table_iter_next (&it, &k, &v)) {
    const guint8 *b = k;
    gsize size = GPOINTER_TO_SIZE (v);
    found = (const guint8 *) p >= b && (const guint8 *) p + n <= b + size;
  }
  g_mutex_unlock (&fake.lock);
  return found;
}

static gboolean
refuse (GError ** error, const char *format, ...) G_GNUC_PRINTF (2, 3);

static gboolean
refuse (GError ** error, const char *format, ...)
{
  va_list ap;
  va_start (ap, format);
  g_autofree char *msg = g_strdup_vprintf (format, ap);
  va_end (ap);
  g_atomic_int_inc (&fake.bad);
  g_printerr ("fakedev: %s\n", msg);
  g_set_error_literal (error, LB_ERROR, LB_ERROR_DEVICE, msg);
  return FALSE;
}

static gpointer
fake_alloc (LbBackend * self, int device, gsize nbytes, GError ** error)
{
  (void) self;
  (void) device;
  (void) error;
  guint8 *p = g_malloc (nbytes);
  memset (p, 0xff, nbytes);     /* NaN in every float */
  g_mutex_lock (&fake.lock);
  g_hash_table_insert (fake.blocks, p, GSIZE_TO_POINTER (nbytes));
  g_mutex_unlock (&fake.lock);
  return p;
}

static void
fake_free (LbBackend * self, int device, gpointer ptr)
{
  (void) self;
  (void) device;
  g_mutex_lock (&fake.lock);
  gboolean known = g_hash_table_remove (fake.blocks, ptr);
  g_mutex_unlock (&fake.lock);
  if (!known)
    refuse (NULL, "free of %p, not a device allocation", ptr);
  g_free (ptr);
}

static gboolean
fake_copy (LbStream * s, void *dst, const void *src, gsize nbytes,
    LbCopyKind kind, GError ** error)
{
  (void) s;
  const gboolean dd = is_dev (dst, nbytes), sd = is_dev (src, nbytes);
  static const char *const names[] = { "H2D", "D2H", "D2D", "H2H" };
  const gboolean want_dd = kind == LB_COPY_HOST_TO_DEVICE ||
      kind == LB_COPY_DEVICE_TO_DEVICE;
  const gboolean want_sd = kind == LB_COPY_DEVICE_TO_HOST ||
      kind == LB_COPY_DEVICE_TO_DEVICE;
  if (dd != want_dd || sd != want_sd)
    return refuse (error, "%s copy of %" G_GSIZE_FORMAT " bytes with the "
        "destination on the %s and the source on the %s", names[kind], nbytes,
        dd ? "device" : "host", sd ? "device" : "host");
  if (kind == LB_COPY_DEVICE_TO_DEVICE && nbytes > 0 &&
      (const guint8 *) dst < (const guint8 *) src + nbytes &&
      (const guint8 *) src < (const guint8 *) dst + nbytes && dst != src)
    return refuse (error, "overlapping D2D copy of %" G_GSIZE_FORMAT " bytes",
        nbytes);
  g_atomic_int_inc (kind == LB_COPY_HOST_TO_DEVICE ? &fake.n_h2d :
      kind == LB_COPY_DEVICE_TO_HOST ? &fake.n_d2h : &fake.n_d2d);
  memmove (dst, src, nbytes);
  return TRUE;
}

static LbStream *
fake_stream_new (LbBackend * self, int device, GError ** error)
{
  (void) error;
  LbStream *s = g_new0 (LbStream, 1);
  s->backend = self;
  s->device = device;
  return s;
}

static void
fake_stream_free (LbStream * s)
{
  g_free (s);
}

static gboolean
fake_stream_synchronize (LbStream * s, GError ** error)
{
  (void) s;
  (void) error;
  return TRUE;
}

/* Checks that @t is a tensor of @s's device and returns a host-labelled
 * copy of its descriptor for the CPU kernel. */
static const LbTensor *
H (LbStream * s, const LbTensor * t, LbTensor * tmp, const char *op,
    gboolean * ok)
{
  if (t == NULL)
    return NULL;
  if (t->device.type != LB_DEVICE_CUDA || t->device.index != s->device ||
      !is_dev (t->data, 0)) {
    refuse (NULL, "%s: an argument on %s:%d at %p is not a tensor of "
        "fakedev:%d", op, t->device.type == LB_DEVICE_CPU ? "cpu" : "cuda",
        t->device.index, t->data, s->device);
    *ok = FALSE;
  }
  *tmp = *t;
  tmp->device = LB_DEVICE_HOST;
  tmp->storage = NULL;
  return tmp;
}

#define CPU (lb_cpu_backend ()->ops)
#define PRE(op) gboolean ok = TRUE; LbTensor t0, t1, t2, t3, t4, t5; \
  const char *opn = op; g_atomic_int_inc (&fake.n_ops); \
  (void) t0; (void) t1; (void) t2; (void) t3; (void) t4; (void) t5
#define A(i, x) H (s, x, &t##i, opn, &ok)
#define W(i, x) ((LbTensor *) H (s, x, &t##i, opn, &ok))
#define CHECK if (!ok) return refuse (error, "%s: wrong device", opn)

static gboolean
f_gemm (LbStream * s, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  PRE ("gemm");
  const LbTensor *hx = A (0, x), *hw = A (1, w), *hb = A (2, bias);
  LbTensor *hy = W (3, y);
  CHECK;
  return CPU->gemm (s, hx, hw, trans_w, hb, alpha, beta, hy, error);
}

static gboolean
f_layer_norm (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, float eps, LbTensor * y, GError ** error)
{
  PRE ("layer_norm");
  const LbTensor *hx = A (0, x), *hw = A (1, weight), *hb = A (2, bias);
  LbTensor *hy = W (3, y);
  CHECK;
  return CPU->layer_norm (s, hx, hw, hb, eps, hy, error);
}

static gboolean
f_rms_norm (LbStream * s, const LbTensor * x, const LbTensor * weight,
    float eps, LbTensor * y, GError ** error)
{
  PRE ("rms_norm");
  const LbTensor *hx = A (0, x), *hw = A (1, weight);
  LbTensor *hy = x == y ? (LbTensor *) hx : W (3, y);
  CHECK;
  return CPU->rms_norm (s, hx, hw, eps, hy, error);
}

static gboolean
f_modulate (LbStream * s, const LbTensor * x, const LbTensor * scale,
    const LbTensor * shift, LbTensor * y, GError ** error)
{
  PRE ("modulate");
  const LbTensor *hx = A (0, x), *hs = A (1, scale), *hh = A (2, shift);
  LbTensor *hy = x == y ? (LbTensor *) hx : W (3, y);
  CHECK;
  return CPU->modulate (s, hx, hs, hh, hy, error);
}

static gboolean
f_gated_residual (LbStream * s, LbTensor * x, const LbTensor * y,
    const LbTensor * gate, GError ** error)
{
  PRE ("gated_residual");
  LbTensor *hx = W (0, x);
  const LbTensor *hy = A (1, y), *hg = A (2, gate);
  CHECK;
  return CPU->gated_residual (s, hx, hy, hg, error);
}

static gboolean
f_rope_3d (LbStream * s, LbTensor * x, const LbTensor * cos,
    const LbTensor * sin, int64_t gf, int64_t gh, int64_t gw, int64_t fo,
    int64_t ro, GError ** error)
{
  PRE ("rope_3d");
  LbTensor *hx = W (0, x);
  const LbTensor *hc = A (1, cos), *hs = A (2, sin);
  CHECK;
  return CPU->rope_3d (s, hx, hc, hs, gf, gh, gw, fo, ro, error);
}

static gboolean
f_attention (LbStream * s, const LbTensor * q, const LbTensor * k,
    const LbTensor * v, const LbTensor * bias, const LbTensor * key_mask,
    float scale, LbTensor * out, GError ** error)
{
  PRE ("attention");
  const LbTensor *hq = A (0, q), *hk = A (1, k), *hv = A (2, v),
      *hb = A (3, bias), *hm = A (4, key_mask);
  LbTensor *ho = W (5, out);
  CHECK;
  return CPU->attention (s, hq, hk, hv, hb, hm, scale, ho, error);
}

#define UNARY(name) \
static gboolean \
f_##name (LbStream * s, const LbTensor * x, LbTensor * y, GError ** error) \
{ \
  PRE (#name); \
  const LbTensor *hx = A (0, x); \
  LbTensor *hy = x == y ? (LbTensor *) hx : W (1, y); \
  CHECK; \
  return CPU->name (s, hx, hy, error); \
}
UNARY (gelu_tanh)
UNARY (silu)
#undef UNARY

#define BINARY(name) \
static gboolean \
f_##name (LbStream * s, const LbTensor * a, const LbTensor * b, LbTensor * y, \
    GError ** error) \
{ \
  PRE (#name); \
  const LbTensor *ha = A (0, a), *hb = A (1, b); \
  LbTensor *hy = y == a ? (LbTensor *) ha : y == b ? (LbTensor *) hb : \
      W (2, y); \
  CHECK; \
  return CPU->name (s, ha, hb, hy, error); \
}
BINARY (add)
BINARY (mul)
#undef BINARY

static gboolean
f_scale (LbStream * s, const LbTensor * x, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  PRE ("scale");
  const LbTensor *hx = A (0, x);
  LbTensor *hy = x == y ? (LbTensor *) hx : W (1, y);
  CHECK;
  return CPU->scale (s, hx, alpha, beta, hy, error);
}

static gboolean
f_patchify (LbStream * s, const LbTensor * x, int ph, int pw, LbTensor * y,
    GError ** error)
{
  PRE ("patchify");
  const LbTensor *hx = A (0, x);
  LbTensor *hy = W (1, y);
  CHECK;
  return CPU->patchify (s, hx, ph, pw, hy, error);
}

static gboolean
f_unpatchify (LbStream * s, const LbTensor * z, int ph, int pw, LbTensor * y,
    GError ** error)
{
  PRE ("unpatchify");
  const LbTensor *hz = A (0, z);
  LbTensor *hy = W (1, y);
  CHECK;
  return CPU->unpatchify (s, hz, ph, pw, hy, error);
}

/* The DiT uses no convolution, upsampling or resize: those stay NULL and
 * would crash the test if it called them. */
static const LbOps fake_ops = {
  .gemm = f_gemm,
  .layer_norm = f_layer_norm,
  .rms_norm = f_rms_norm,
  .modulate = f_modulate,
  .gated_residual = f_gated_residual,
  .rope_3d = f_rope_3d,
  .attention = f_attention,
  .gelu_tanh = f_gelu_tanh,
  .silu = f_silu,
  .add = f_add,
  .mul = f_mul,
  .scale = f_scale,
  .patchify = f_patchify,
  .unpatchify = f_unpatchify,
};

static LbBackend fake_backend = {
  .name = "fakedev",
  .device_type = LB_DEVICE_CUDA,
  .device_count = 8,
  .ops = &fake_ops,
  .alloc = fake_alloc,
  .free = fake_free,
  .copy = fake_copy,
  .stream_new = fake_stream_new,
  .stream_free = fake_stream_free,
  .stream_synchronize = fake_stream_synchronize,
};

/* ------------------------------------------------------------------------ */
/* one stream run, recorded                                                 */
/* ------------------------------------------------------------------------ */

typedef struct {
  GByteArray *bytes;            /* everything the session let us see */
  int n_steps;
} Record;

static void
append (Record * rec, const LbTensor * t)
{
  g_assert_cmpint (t->device.type, ==, LB_DEVICE_CPU);
  g_byte_array_append (rec->bytes, t->data, (guint) lb_tensor_nbytes (t));
}

static void
on_step (LingbotDitSession * ses, int64_t chunk, int step,
    const LbTensor * x_in, const LbTensor * pred, const LbTensor * x0,
    gpointer user_data)
{
  (void) ses;
  (void) chunk;
  (void) step;
  Record *rec = user_data;
  append (rec, x_in);
  append (rec, pred);
  if (x0)
    append (rec, x0);
  rec->n_steps++;
}

static GByteArray *
run_stream (LbBackend * be, int n_ranks)
{
  g_autoptr (GError) err = NULL;
  const LingbotDitConfig *cfg = lingbot_dit_get_config (dit);
  LbWorkerGroupOptions go = { 0, NULL, "dit-device-test" };
  LbWorkerGroup *group = lb_worker_group_new (be, n_ranks, NULL, &go, &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  Record rec = { g_byte_array_new (), 0 };
  lingbot_dit_session_set_step_callback (ses, on_step, &rec);
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  int64_t kvshape[4] = { 1, 150, cfg->num_heads, cfg->dim / cfg->num_heads };
  g_autoptr (LbTensor) k = lb_tensor_new (LB_DTYPE_F32, 4, kvshape);
  g_autoptr (LbTensor) v = lb_tensor_new (LB_DTYPE_F32, 4, kvshape);
  for (int c = 0; c < 4; c++) {
    char name[96];
    const LbTensor *noise[4];
    g_snprintf (name, sizeof name, "output.chunk%d.step0.x_in", c);
    noise[0] = dit_fixture_get (fixture, name);
    for (int s = 0; s < 3; s++) {
      g_snprintf (name, sizeof name, "output.chunk%d.step%d.renoise", c, s);
      noise[s + 1] = dit_fixture_get (fixture, name);
    }
    g_snprintf (name, sizeof name, "input.chunk%d.y", c);
    const LbTensor *y = dit_fixture_get (fixture, name);
    g_snprintf (name, sizeof name, "input.chunk%d.control", c);
    const LbTensor *ctl = dit_fixture_get (fixture, name);
    g_assert_true (lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
            &err));
    g_assert_no_error (err);
    append (&rec, out);
    g_snprintf (name, sizeof name, "output.chunk%d.denoised", c);
    const LbTensor *g = dit_fixture_get (fixture, name);
    g_assert_cmpfloat (dit_rel_error (out->data, g, lb_tensor_numel (g)), <=,
        DIT_GOLDEN_TOL);
    for (int l = 0; l < cfg->num_layers; l++) {
      g_assert_true (lingbot_dit_session_get_kv_cache (ses, l, k, v, &err));
      g_assert_no_error (err);
      append (&rec, k);
      append (&rec, v);
    }
  }
  g_assert_cmpint (rec.n_steps, ==, 20);
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
  return rec.bytes;
}

static void
test_stream_bit_identical (gconstpointer data)
{
  const int n_ranks = GPOINTER_TO_INT (data);
  g_autoptr (GByteArray) cpu = run_stream (lb_cpu_backend (), n_ranks);
  const int d2d0 = fake.n_d2d, ops0 = fake.n_ops, h2d0 = fake.n_h2d;
  g_autoptr (GByteArray) dev = run_stream (&fake_backend, n_ranks);
  g_assert_cmpint (fake.bad, ==, 0);
  g_assert_cmpint (fake.n_ops, >, ops0);
  g_assert_cmpint (fake.n_d2d, >, d2d0);
  g_assert_cmpint (fake.n_h2d, >, h2d0);
  g_assert_cmpuint (cpu->len, ==, dev->len);
  g_assert_true (memcmp (cpu->data, dev->data, cpu->len) == 0);
  g_print ("# dit on fakedev, %d rank(s): bit-identical to the CPU backend "
      "over %u bytes of passes, outputs and KV caches\n", n_ranks, cpu->len);
}

/* Weights: uploaded once per rank on a device, borrowed on the CPU. */
static void
test_weights (void)
{
  g_autoptr (GError) err = NULL;
  const int L = lingbot_dit_get_config (dit)->num_layers;
  LbStream *cs = lb_cpu_backend ()->stream_new (lb_cpu_backend (), 0, &err);
  LbStream *ds = fake_backend.stream_new (&fake_backend, 1, &err);
  LingbotDitWeights w;
  gboolean owned;
  gsize nbytes;
  g_assert_true (lingbot_dit_weights_init (&w, &owned, &nbytes, cs, dit,
          &err));
  g_assert_false (owned);
  g_assert_cmpuint (nbytes, ==, 0);
  g_assert_true (w.blocks[L - 1].cam_shift.w == dit->w.blocks[L - 1].cam_shift.w);
  lingbot_dit_weights_clear (&w, owned, L);

  g_assert_true (lingbot_dit_weights_init (&w, &owned, &nbytes, ds, dit,
          &err));
  g_assert_no_error (err);
  g_assert_true (owned);
  gsize total = 0;
  GHashTableIter it;
  gpointer name, t;
  g_hash_table_iter_init (&it, dit->by_name);
  while (g_hash_table_iter_next (&it, &name, &t))
    total += lb_tensor_nbytes (t);
  g_assert_cmpuint (nbytes, ==, total);       /* every weight, once */
  const LbTensor *a = w.blocks[L - 1].cam_shift.w;
  const LbTensor *b = dit->w.blocks[L - 1].cam_shift.w;
  g_assert_cmpint (a->device.type, ==, LB_DEVICE_CUDA);
  g_assert_cmpint (a->device.index, ==, 1);
  g_assert_true (lb_tensor_same_shape (a, b));
  g_assert_true (memcmp (a->data, b->data, lb_tensor_nbytes (b)) == 0);
  g_assert_true (w.head_modulation->ndim == 2);
  lingbot_dit_weights_clear (&w, owned, L);
  g_assert_cmpint (fake.bad, ==, 0);
  lb_cpu_backend ()->stream_free (cs);
  fake_backend.stream_free (ds);
}

/* lingbot_dit_copy_rows: one copy when contiguous, one per run else. */
static void
test_copy_rows (void)
{
  g_autoptr (GError) err = NULL;
  LbStream *s = fake_backend.stream_new (&fake_backend, 0, &err);
  int64_t shape[2] = { 6, 8 };
  g_autoptr (LbTensor) a = lb_tensor_new_on (s, LB_DTYPE_F32, 2, shape, &err);
  g_autoptr (LbTensor) b = lb_tensor_new_on (s, LB_DTYPE_F32, 2, shape, &err);
  g_autoptr (LbTensor) h = lb_tensor_new (LB_DTYPE_F32, 2, shape);
  for (int i = 0; i < 48; i++)
    ((float *) h->data)[i] = (float) i;
  g_assert_true (lb_tensor_upload (s, a, h, &err));
  int before = fake.n_d2d;
  g_assert_true (lingbot_dit_copy_rows (s, b, a, &err));
  g_assert_cmpint (fake.n_d2d - before, ==, 1);
  LbTensor va, vb;
  lb_tensor_view_narrow (&va, a, 1, 2, 3);
  lb_tensor_view_narrow (&vb, b, 1, 5, 3);
  before = fake.n_d2d;
  g_assert_true (lingbot_dit_copy_rows (s, &vb, &va, &err));
  g_assert_cmpint (fake.n_d2d - before, ==, 6);
  g_assert_true (lb_tensor_download (s, h, b, &err));
  for (int r = 0; r < 6; r++)
    for (int c = 0; c < 8; c++)
      g_assert_cmpfloat (((float *) h->data)[r * 8 + c], ==,
          (float) (r * 8 + (c >= 5 ? c - 3 : c)));
  /* shape mismatch */
  lb_tensor_view_narrow (&vb, b, 1, 4, 4);
  g_assert_false (lingbot_dit_copy_rows (s, &vb, &va, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpint (fake.bad, ==, 0);
  fake_backend.stream_free (s);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_mutex_init (&fake.lock);
  fake.blocks = g_hash_table_new (g_direct_hash, g_direct_equal);
  g_autofree char *path = dit_fixture_path ();
  g_autoptr (GError) err = NULL;
  fixture = lingbot_checkpoint_open (path, &err);
  g_assert_no_error (err);
  dit = lingbot_dit_load_checkpoint (fixture, NULL, LINGBOT_DIT_LOAD_DEFAULT,
      &err);
  g_assert_no_error (err);

  g_test_add_func ("/dit/device/copy-rows", test_copy_rows);
  g_test_add_func ("/dit/device/weights", test_weights);
  g_test_add_data_func ("/dit/device/stream/1", GINT_TO_POINTER (1),
      test_stream_bit_identical);
  g_test_add_data_func ("/dit/device/stream/2", GINT_TO_POINTER (2),
      test_stream_bit_identical);
  g_test_add_data_func ("/dit/device/stream/4", GINT_TO_POINTER (4),
      test_stream_bit_identical);
  int rc = g_test_run ();
  lingbot_dit_unref (dit);
  lingbot_checkpoint_unref (fixture);
  return rc;
}

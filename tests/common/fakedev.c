/* lingbot-gst: an emulated device backend for tests (no GPU needed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * "fakedev" says it drives CUDA devices but keeps its memory in host
 * allocations it tracks.  Its copy refuses a transfer whose kind does not
 * match where the pointers live (a host pointer in a device-to-device
 * copy, a device pointer read as host memory, overlapping device copies),
 * its ops refuse any tensor that is not one of its device tensors and then
 * run the CPU kernels, and fresh device memory is filled with NaN so a
 * buffer the caller forgets to write shows.  With no CUDA module loaded its
 * worker groups use the local collectives, which move device bytes with
 * the backend's copy.
 *
 * So code run on fakedev takes exactly the path a CUDA rank takes (weights
 * uploaded, buffers from lb_tensor_new_on(), every copy through the
 * backend, host reads through lb_tensor_download()) and, the kernels being
 * the CPU's, must reproduce the CPU backend bit for bit.  What it cannot
 * check is the CUDA kernels themselves (suite gpu) and NCCL.
 */
#include <string.h>

#include "fakedev.h"
#include "kernels/error.h"

typedef struct {
  GMutex lock;
  GHashTable *blocks;           /* ptr -> size */
  gint bad;
  gint n_h2d, n_d2h, n_d2d, n_ops;
} FakeDev;

static FakeDev fake;

/**
 * fakedev_is_device:
 * @p: an address
 * @n: bytes from @p
 *
 * Returns: whether [p, p + n) lies inside one live fakedev allocation.
 */
gboolean
fakedev_is_device (const void *p, gsize n)
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
  guint8 *p = g_malloc (MAX (nbytes, 1));
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
  const gboolean dd = fakedev_is_device (dst, nbytes);
  const gboolean sd = fakedev_is_device (src, nbytes);
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

/* ------------------------------------------------------------------------ */
/* ops: check residency, then the CPU kernel on host-labelled descriptors   */
/* ------------------------------------------------------------------------ */

/* Up to 8 tensor arguments per op; an argument whose pointer equals an
 * earlier one maps to the same host descriptor (in-place calls stay
 * in-place for the CPU kernel's aliasing checks). */
typedef struct {
  LbStream *s;
  const char *op;
  gboolean ok;
  int n;
  const LbTensor *orig[8];
  LbTensor host[8];
} Args;

static LbTensor *
arg (Args * a, const LbTensor * t)
{
  if (t == NULL)
    return NULL;
  for (int i = 0; i < a->n; i++)
    if (a->orig[i] == t)
      return &a->host[i];
  g_assert (a->n < 8);
  if (t->device.type != LB_DEVICE_CUDA || t->device.index != a->s->device ||
      !fakedev_is_device (t->data, 0)) {
    refuse (NULL, "%s: an argument on %s:%d at %p is not a tensor of "
        "fakedev:%d", a->op, t->device.type == LB_DEVICE_CPU ? "cpu" : "cuda",
        t->device.index, t->data, a->s->device);
    a->ok = FALSE;
  }
  LbTensor *h = &a->host[a->n];
  a->orig[a->n++] = t;
  *h = *t;
  h->device = LB_DEVICE_HOST;
  h->storage = NULL;
  return h;
}

#define CPU (lb_cpu_backend ()->ops)
#define PRE(name) Args a_ = { s, name, TRUE, 0, { NULL }, { { 0 } } }; \
  g_atomic_int_inc (&fake.n_ops)
#define A(x) arg (&a_, (x))
#define CHECK if (!a_.ok) return refuse (error, "%s: wrong device", a_.op)

static gboolean
f_gemm (LbStream * s, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  PRE ("gemm");
  const LbTensor *hx = A (x), *hw = A (w), *hb = A (bias);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->gemm (s, hx, hw, trans_w, hb, alpha, beta, hy, error);
}

static gboolean
f_layer_norm (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, float eps, LbTensor * y, GError ** error)
{
  PRE ("layer_norm");
  const LbTensor *hx = A (x), *hw = A (weight), *hb = A (bias);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->layer_norm (s, hx, hw, hb, eps, hy, error);
}

static gboolean
f_rms_norm (LbStream * s, const LbTensor * x, const LbTensor * weight,
    float eps, LbTensor * y, GError ** error)
{
  PRE ("rms_norm");
  const LbTensor *hx = A (x), *hw = A (weight);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->rms_norm (s, hx, hw, eps, hy, error);
}

static gboolean
f_modulate (LbStream * s, const LbTensor * x, const LbTensor * scale,
    const LbTensor * shift, LbTensor * y, GError ** error)
{
  PRE ("modulate");
  const LbTensor *hx = A (x), *hs = A (scale), *hh = A (shift);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->modulate (s, hx, hs, hh, hy, error);
}

static gboolean
f_gated_residual (LbStream * s, LbTensor * x, const LbTensor * y,
    const LbTensor * gate, GError ** error)
{
  PRE ("gated_residual");
  LbTensor *hx = A (x);
  const LbTensor *hy = A (y), *hg = A (gate);
  CHECK;
  return CPU->gated_residual (s, hx, hy, hg, error);
}

static gboolean
f_rope_3d (LbStream * s, LbTensor * x, const LbTensor * cos,
    const LbTensor * sin, int64_t gf, int64_t gh, int64_t gw, int64_t fo,
    int64_t ro, GError ** error)
{
  PRE ("rope_3d");
  LbTensor *hx = A (x);
  const LbTensor *hc = A (cos), *hs = A (sin);
  CHECK;
  return CPU->rope_3d (s, hx, hc, hs, gf, gh, gw, fo, ro, error);
}

static gboolean
f_attention (LbStream * s, const LbTensor * q, const LbTensor * k,
    const LbTensor * v, const LbTensor * bias, const LbTensor * key_mask,
    float scale, LbTensor * out, GError ** error)
{
  PRE ("attention");
  const LbTensor *hq = A (q), *hk = A (k), *hv = A (v), *hb = A (bias),
      *hm = A (key_mask);
  LbTensor *ho = A (out);
  CHECK;
  return CPU->attention (s, hq, hk, hv, hb, hm, scale, ho, error);
}

#define UNARY(name) \
static gboolean \
f_##name (LbStream * s, const LbTensor * x, LbTensor * y, GError ** error) \
{ \
  PRE (#name); \
  const LbTensor *hx = A (x); \
  LbTensor *hy = A (y); \
  CHECK; \
  return CPU->name (s, hx, hy, error); \
}
UNARY (gelu_tanh)
UNARY (silu)
UNARY (upsample_nearest2x)
UNARY (resize_bicubic)
UNARY (copy)
UNARY (upsample_nearest2x_halo)
#undef UNARY

#define BINARY(name) \
static gboolean \
f_##name (LbStream * s, const LbTensor * a, const LbTensor * b, LbTensor * y, \
    GError ** error) \
{ \
  PRE (#name); \
  const LbTensor *ha = A (a), *hb = A (b); \
  LbTensor *hy = A (y); \
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
  const LbTensor *hx = A (x);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->scale (s, hx, alpha, beta, hy, error);
}

static gboolean
f_conv3d_causal (LbStream * s, const LbTensor * x, const LbTensor * cache,
    const LbTensor * weight, const LbTensor * bias, int pad_h, int pad_w,
    int stride_h, int stride_w, LbTensor * y, GError ** error)
{
  PRE ("conv3d_causal");
  const LbTensor *hx = A (x), *hc = A (cache), *hw = A (weight),
      *hb = A (bias);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->conv3d_causal (s, hx, hc, hw, hb, pad_h, pad_w, stride_h,
      stride_w, hy, error);
}

static gboolean
f_conv2d (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, int pad_h, int pad_w, int stride_h, int stride_w,
    LbTensor * y, GError ** error)
{
  PRE ("conv2d");
  const LbTensor *hx = A (x), *hw = A (weight), *hb = A (bias);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->conv2d (s, hx, hw, hb, pad_h, pad_w, stride_h, stride_w, hy,
      error);
}

static gboolean
f_patchify (LbStream * s, const LbTensor * x, int ph, int pw, LbTensor * y,
    GError ** error)
{
  PRE ("patchify");
  const LbTensor *hx = A (x);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->patchify (s, hx, ph, pw, hy, error);
}

static gboolean
f_unpatchify (LbStream * s, const LbTensor * z, int ph, int pw, LbTensor * y,
    GError ** error)
{
  PRE ("unpatchify");
  const LbTensor *hz = A (z);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->unpatchify (s, hz, ph, pw, hy, error);
}

static gboolean
f_clamp (LbStream * s, const LbTensor * x, float lo, float hi, LbTensor * y,
    GError ** error)
{
  PRE ("clamp");
  const LbTensor *hx = A (x);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->clamp (s, hx, lo, hi, hy, error);
}

static gboolean
f_fill (LbStream * s, LbTensor * y, float value, GError ** error)
{
  PRE ("fill");
  LbTensor *hy = A (y);
  CHECK;
  return CPU->fill (s, hy, value, error);
}

static gboolean
f_accumulate (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  PRE ("accumulate");
  const LbTensor *hx = A (x);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->accumulate (s, hx, hy, error);
}

static gboolean
f_channel_rms_norm (LbStream * s, const LbTensor * x, const LbTensor * gamma,
    gboolean silu, LbTensor * y, GError ** error)
{
  PRE ("channel_rms_norm");
  const LbTensor *hx = A (x), *hg = A (gamma);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->channel_rms_norm (s, hx, hg, silu, hy, error);
}

static gboolean
f_latent_affine (LbStream * s, const LbTensor * x, const LbTensor * mean,
    const LbTensor * inv_std, gboolean denormalize, LbTensor * y,
    GError ** error)
{
  PRE ("latent_affine");
  const LbTensor *hx = A (x), *hm = A (mean), *hi = A (inv_std);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->latent_affine (s, hx, hm, hi, denormalize, hy, error);
}

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
  .conv3d_causal = f_conv3d_causal,
  .conv2d = f_conv2d,
  .upsample_nearest2x = f_upsample_nearest2x,
  .patchify = f_patchify,
  .unpatchify = f_unpatchify,
  .resize_bicubic = f_resize_bicubic,
  .copy = f_copy,
  .clamp = f_clamp,
  .fill = f_fill,
  .accumulate = f_accumulate,
  .channel_rms_norm = f_channel_rms_norm,
  .upsample_nearest2x_halo = f_upsample_nearest2x_halo,
  .latent_affine = f_latent_affine,
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

/**
 * fakedev_backend:
 *
 * The emulated device backend (8 "CUDA" devices in host memory, CPU
 * kernels, every op table entry filled), initialised on first use.
 *
 * Returns: (transfer none): the backend.
 */
LbBackend *
fakedev_backend (void)
{
  static gsize once = 0;
  if (g_once_init_enter (&once)) {
    g_mutex_init (&fake.lock);
    fake.blocks = g_hash_table_new (g_direct_hash, g_direct_equal);
    g_assert (lb_ops_first_missing (&fake_ops) == NULL);
    g_once_init_leave (&once, 1);
  }
  return &fake_backend;
}

/**
 * fakedev_stats:
 *
 * Returns: the counters so far (see #FakeDevStats).
 */
FakeDevStats
fakedev_stats (void)
{
  FakeDevStats st;
  st.bad = g_atomic_int_get (&fake.bad);
  st.n_h2d = g_atomic_int_get (&fake.n_h2d);
  st.n_d2h = g_atomic_int_get (&fake.n_d2h);
  st.n_d2d = g_atomic_int_get (&fake.n_d2d);
  st.n_ops = g_atomic_int_get (&fake.n_ops);
  g_mutex_lock (&fake.lock);
  st.live_blocks = fake.blocks ? (int) g_hash_table_size (fake.blocks) : 0;
  g_mutex_unlock (&fake.lock);
  return st;
}

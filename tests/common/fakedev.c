/* lingbot-gst: an emulated device backend for tests (no GPU needed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * "fakedev" says it drives CUDA devices but keeps its memory in host
 * allocations it tracks.  Its copy refuses a transfer whose kind does not
 * match where the pointers live (a host pointer in a device-to-device
 * copy, a device pointer read as host memory, overlapping device copies),
 * its ops refuse any tensor that is not one of its device tensors (every
 * byte a view can reach, in its own dtype's size, must lie in one device
 * allocation: a bf16 KV cache's views are checked as bf16) and then run
 * the CPU kernels, and fresh device memory is filled with NaN so a
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
  gint n_captures, n_launches, n_capturing, n_waits;
  gint n_records, n_syncs, n_host_blocks;
  gint n_convs_fp32, n_convs_bf16;
} FakeDev;

typedef enum {
  FOP_GEMM,
  FOP_GEMM_FP8,
  FOP_LAYER_NORM,
  FOP_RMS_NORM,
  FOP_MODULATE,
  FOP_GATED_RESIDUAL,
  FOP_ROPE_3D,
  FOP_ATTENTION,
  FOP_GELU_TANH,
  FOP_SILU,
  FOP_ADD,
  FOP_MUL,
  FOP_SCALE,
  FOP_CONV3D_CAUSAL,
  FOP_CONV2D,
  FOP_UPSAMPLE_NEAREST2X,
  FOP_PATCHIFY,
  FOP_UNPATCHIFY,
  FOP_RESIZE_BICUBIC,
  FOP_COPY,
  FOP_CLAMP,
  FOP_FILL,
  FOP_ACCUMULATE,
  FOP_CHANNEL_RMS_NORM,
  FOP_UPSAMPLE_NEAREST2X_HALO,
  FOP_LATENT_AFFINE,
  FOP_NORM_MODULATE,
  FOP_RMS_NORM_ROPE,
  FOP_GATED_RESIDUAL_MODULATE,
  FOP_RAY_MAP,
  FOP_RAW_COPY,
} FakeOpId;

/* A recorded call (graph capture): tensor descriptors by value, with
 * arguments that were the same pointer mapped to the same copy. */
typedef struct {
  int op;                       /* FakeOpId */
  int n;
  LbTensor t[8];
  const LbTensor *orig[8];      /* while recording only */
  int idx[8];                   /* tensor argument k -> t[idx[k]], or -1 */
  float f[4];
  int64_t i[8];
  void *dst;                    /* FOP_RAW_COPY */
  const void *src;
  gsize nbytes;
} FakeCall;

typedef struct {
  gboolean capturing;
  GArray *calls;                /* FakeCall, while capturing */
} FakeStream;

struct _LbGraph {
  GArray *calls;
};

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
  if (g_atomic_int_get (&fake.n_capturing) > 0) {
    refuse (error, "alloc of %" G_GSIZE_FORMAT " bytes during a graph "
        "capture", nbytes);
    return NULL;
  }
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
  if (g_atomic_int_get (&fake.n_capturing) > 0)
    refuse (NULL, "free of %p during a graph capture", ptr);
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
  FakeStream *fs = s->priv;
  if (fs->capturing) {
    if (kind != LB_COPY_DEVICE_TO_DEVICE)
      return refuse (error, "%s copy during a graph capture (only device "
          "copies can be captured)", kind == LB_COPY_HOST_TO_DEVICE ? "H2D" :
          kind == LB_COPY_DEVICE_TO_HOST ? "D2H" : "H2H");
    FakeCall c = { 0 };
    c.op = FOP_RAW_COPY;
    c.dst = dst;
    c.src = src;
    c.nbytes = nbytes;
    g_array_append_val (fs->calls, c);
    return TRUE;
  }
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
  s->priv = g_new0 (FakeStream, 1);
  return s;
}

static void
fake_stream_free (LbStream * s)
{
  FakeStream *fs = s->priv;
  if (fs->capturing) {
    g_atomic_int_add (&fake.n_capturing, -1);
    g_array_free (fs->calls, TRUE);
  }
  g_free (fs);
  g_free (s);
}

static gboolean
fake_stream_synchronize (LbStream * s, GError ** error)
{
  FakeStream *fs = s->priv;
  if (fs->capturing)
    return refuse (error, "stream synchronize during a graph capture");
  g_atomic_int_inc (&fake.n_syncs);
  return TRUE;
}

static gboolean
stream_capturing (LbStream * s)
{
  return ((FakeStream *) s->priv)->capturing;
}

static FakeCall *
rec_call (LbStream * s, int op)
{
  FakeStream *fs = s->priv;
  FakeCall c = { 0 };
  c.op = op;
  for (int k = 0; k < 8; k++)
    c.idx[k] = -1;
  g_array_append_val (fs->calls, c);
  return &g_array_index (fs->calls, FakeCall, fs->calls->len - 1);
}

static void
rec_tensor (FakeCall * c, int k, const LbTensor * t)
{
  if (t == NULL)
    return;
  for (int j = 0; j < c->n; j++)
    if (c->orig[j] == t) {
      c->idx[k] = j;
      return;
    }
  c->orig[c->n] = t;
  c->t[c->n] = *t;
  c->t[c->n].storage = NULL;    /* a borrowed view: the graph owns nothing */
  c->idx[k] = c->n++;
}

#define RT(k) (c->idx[k] < 0 ? NULL : &c->t[c->idx[k]])

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

/* The bytes a view can touch: from its lowest to its highest element,
 * in its dtype's size (a bf16 view spans half the bytes of an f32 one of
 * the same shape and strides).  An empty view touches nothing. */
static void
view_span (const LbTensor * t, const guint8 ** start, gsize * nbytes)
{
  int64_t lo = 0, hi = 0;
  gboolean empty = FALSE;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] == 0)
      empty = TRUE;
    const int64_t far = (t->shape[d] - 1) * t->stride[d];
    if (far < 0)
      lo += far;
    else
      hi += far;
  }
  const int64_t es = (int64_t) lb_dtype_size (t->dtype);
  *start = (const guint8 *) t->data + lo * es;
  *nbytes = empty ? 0 : (gsize) ((hi - lo + 1) * es);
}

static LbTensor *
arg (Args * a, const LbTensor * t)
{
  if (t == NULL)
    return NULL;
  for (int i = 0; i < a->n; i++)
    if (a->orig[i] == t)
      return &a->host[i];
  g_assert (a->n < 8);
  const guint8 *span;
  gsize span_bytes;
  view_span (t, &span, &span_bytes);
  if (t->device.type != LB_DEVICE_CUDA || t->device.index != a->s->device ||
      !fakedev_is_device (t->data, 0)) {
    refuse (NULL, "%s: an argument on %s:%d at %p is not a tensor of "
        "fakedev:%d", a->op, t->device.type == LB_DEVICE_CPU ? "cpu" : "cuda",
        t->device.index, t->data, a->s->device);
    a->ok = FALSE;
  } else if (!fakedev_is_device (span, span_bytes)) {
    g_autofree char *shape = lb_tensor_shape_string (t);
    refuse (NULL, "%s: a %s %s view at %p spans %" G_GSIZE_FORMAT " bytes "
        "that are not inside one fakedev:%d allocation", a->op,
        lb_dtype_name (t->dtype), shape, t->data, span_bytes, a->s->device);
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

/* convolutions by the stream's math mode (what a CUDA rank would hand
 * cuDNN: TF32/bf16 engines in LB_MATH_BF16) */
static void
count_conv (LbStream * s)
{
  g_atomic_int_inc (s->math != LB_MATH_FP32 ? &fake.n_convs_bf16 :
      &fake.n_convs_fp32);
}

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
f_gemm_fp8 (LbStream * s, const LbTensor * x, const LbTensor * w,
    const LbTensor * sw, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  PRE ("gemm_fp8");
  const LbTensor *hx = A (x), *hw = A (w), *hs = A (sw), *hb = A (bias);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->gemm_fp8 (s, hx, hw, hs, hb, alpha, beta, hy, error);
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
  count_conv (s);
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
  count_conv (s);
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

static gboolean
f_norm_modulate (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, float eps, const LbTensor * scale,
    const LbTensor * shift, LbTensor * y, GError ** error)
{
  PRE ("norm_modulate");
  const LbTensor *hx = A (x), *hw = A (weight), *hb = A (bias),
      *hs = A (scale), *hh = A (shift);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->norm_modulate (s, hx, hw, hb, eps, hs, hh, hy, error);
}

static gboolean
f_rms_norm_rope (LbStream * s, const LbTensor * x, const LbTensor * weight,
    float eps, const LbTensor * cos, const LbTensor * sin, int64_t gf,
    int64_t gh, int64_t gw, int64_t fo, int64_t ro, LbTensor * y,
    GError ** error)
{
  PRE ("rms_norm_rope");
  const LbTensor *hx = A (x), *hw = A (weight), *hc = A (cos),
      *hs = A (sin);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->rms_norm_rope (s, hx, hw, eps, hc, hs, gf, gh, gw, fo, ro, hy,
      error);
}

static gboolean
f_gated_residual_modulate (LbStream * s, LbTensor * x, const LbTensor * y,
    const LbTensor * gate, const LbTensor * scale, const LbTensor * shift,
    GError ** error)
{
  PRE ("gated_residual_modulate");
  LbTensor *hx = A (x);
  const LbTensor *hy = A (y), *hg = A (gate), *hs = A (scale),
      *hh = A (shift);
  CHECK;
  return CPU->gated_residual_modulate (s, hx, hy, hg, hs, hh, error);
}

static gboolean
f_ray_map (LbStream * s, const LbTensor * rel_poses, float fx, float fy,
    float cx, float cy, int width, int height, int row0, LbTensor * y,
    GError ** error)
{
  PRE ("ray_map");
  const LbTensor *hp = A (rel_poses);
  LbTensor *hy = A (y);
  CHECK;
  return CPU->ray_map (s, hp, fx, fy, cx, cy, width, height, row0, hy, error);
}

/* ---- graph capture: every op call recorded, replayed by graph_launch ---- */


static gboolean
d_gemm (LbStream * s, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_gemm (s, x, w, trans_w, bias, alpha, beta, y, error);
  FakeCall *c = rec_call (s, FOP_GEMM);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, w);
  c->i[0] = trans_w;
  rec_tensor (c, 2, bias);
  c->f[0] = alpha;
  c->f[1] = beta;
  rec_tensor (c, 3, y);
  (void) error;
  return TRUE;
}

static gboolean
d_gemm_fp8 (LbStream * s, const LbTensor * x, const LbTensor * w,
    const LbTensor * sw, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_gemm_fp8 (s, x, w, sw, bias, alpha, beta, y, error);
  FakeCall *c = rec_call (s, FOP_GEMM_FP8);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, w);
  rec_tensor (c, 2, sw);
  rec_tensor (c, 3, bias);
  c->f[0] = alpha;
  c->f[1] = beta;
  rec_tensor (c, 4, y);
  (void) error;
  return TRUE;
}

static gboolean
d_layer_norm (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, float eps, LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_layer_norm (s, x, weight, bias, eps, y, error);
  FakeCall *c = rec_call (s, FOP_LAYER_NORM);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, weight);
  rec_tensor (c, 2, bias);
  c->f[0] = eps;
  rec_tensor (c, 3, y);
  (void) error;
  return TRUE;
}

static gboolean
d_rms_norm (LbStream * s, const LbTensor * x, const LbTensor * weight,
    float eps, LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_rms_norm (s, x, weight, eps, y, error);
  FakeCall *c = rec_call (s, FOP_RMS_NORM);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, weight);
  c->f[0] = eps;
  rec_tensor (c, 2, y);
  (void) error;
  return TRUE;
}

static gboolean
d_modulate (LbStream * s, const LbTensor * x, const LbTensor * scale,
    const LbTensor * shift, LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_modulate (s, x, scale, shift, y, error);
  FakeCall *c = rec_call (s, FOP_MODULATE);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, scale);
  rec_tensor (c, 2, shift);
  rec_tensor (c, 3, y);
  (void) error;
  return TRUE;
}

static gboolean
d_gated_residual (LbStream * s, LbTensor * x, const LbTensor * y,
    const LbTensor * gate, GError ** error)
{
  if (!stream_capturing (s))
    return f_gated_residual (s, x, y, gate, error);
  FakeCall *c = rec_call (s, FOP_GATED_RESIDUAL);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, y);
  rec_tensor (c, 2, gate);
  (void) error;
  return TRUE;
}

static gboolean
d_rope_3d (LbStream * s, LbTensor * x, const LbTensor * cos,
    const LbTensor * sin, int64_t grid_f, int64_t grid_h, int64_t grid_w,
    int64_t frame_offset, int64_t row_offset, GError ** error)
{
  if (!stream_capturing (s))
    return f_rope_3d (s, x, cos, sin, grid_f, grid_h, grid_w, frame_offset,
        row_offset, error);
  FakeCall *c = rec_call (s, FOP_ROPE_3D);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, cos);
  rec_tensor (c, 2, sin);
  c->i[0] = grid_f;
  c->i[1] = grid_h;
  c->i[2] = grid_w;
  c->i[3] = frame_offset;
  c->i[4] = row_offset;
  (void) error;
  return TRUE;
}

static gboolean
d_attention (LbStream * s, const LbTensor * q, const LbTensor * k,
    const LbTensor * v, const LbTensor * bias, const LbTensor * key_mask,
    float scale, LbTensor * out, GError ** error)
{
  if (!stream_capturing (s))
    return f_attention (s, q, k, v, bias, key_mask, scale, out, error);
  FakeCall *c = rec_call (s, FOP_ATTENTION);
  rec_tensor (c, 0, q);
  rec_tensor (c, 1, k);
  rec_tensor (c, 2, v);
  rec_tensor (c, 3, bias);
  rec_tensor (c, 4, key_mask);
  c->f[0] = scale;
  rec_tensor (c, 5, out);
  (void) error;
  return TRUE;
}

static gboolean
d_gelu_tanh (LbStream * s, const LbTensor * x, LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_gelu_tanh (s, x, y, error);
  FakeCall *c = rec_call (s, FOP_GELU_TANH);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, y);
  (void) error;
  return TRUE;
}

static gboolean
d_silu (LbStream * s, const LbTensor * x, LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_silu (s, x, y, error);
  FakeCall *c = rec_call (s, FOP_SILU);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, y);
  (void) error;
  return TRUE;
}

static gboolean
d_add (LbStream * s, const LbTensor * a, const LbTensor * b, LbTensor * y,
    GError ** error)
{
  if (!stream_capturing (s))
    return f_add (s, a, b, y, error);
  FakeCall *c = rec_call (s, FOP_ADD);
  rec_tensor (c, 0, a);
  rec_tensor (c, 1, b);
  rec_tensor (c, 2, y);
  (void) error;
  return TRUE;
}

static gboolean
d_mul (LbStream * s, const LbTensor * a, const LbTensor * b, LbTensor * y,
    GError ** error)
{
  if (!stream_capturing (s))
    return f_mul (s, a, b, y, error);
  FakeCall *c = rec_call (s, FOP_MUL);
  rec_tensor (c, 0, a);
  rec_tensor (c, 1, b);
  rec_tensor (c, 2, y);
  (void) error;
  return TRUE;
}

static gboolean
d_scale (LbStream * s, const LbTensor * x, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_scale (s, x, alpha, beta, y, error);
  FakeCall *c = rec_call (s, FOP_SCALE);
  rec_tensor (c, 0, x);
  c->f[0] = alpha;
  c->f[1] = beta;
  rec_tensor (c, 1, y);
  (void) error;
  return TRUE;
}

static gboolean
d_conv3d_causal (LbStream * s, const LbTensor * x, const LbTensor * cache,
    const LbTensor * weight, const LbTensor * bias, int pad_h, int pad_w,
    int stride_h, int stride_w, LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_conv3d_causal (s, x, cache, weight, bias, pad_h, pad_w, stride_h,
        stride_w, y, error);
  FakeCall *c = rec_call (s, FOP_CONV3D_CAUSAL);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, cache);
  rec_tensor (c, 2, weight);
  rec_tensor (c, 3, bias);
  c->i[0] = pad_h;
  c->i[1] = pad_w;
  c->i[2] = stride_h;
  c->i[3] = stride_w;
  rec_tensor (c, 4, y);
  (void) error;
  return TRUE;
}

static gboolean
d_conv2d (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, int pad_h, int pad_w, int stride_h, int stride_w,
    LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_conv2d (s, x, weight, bias, pad_h, pad_w, stride_h, stride_w, y,
        error);
  FakeCall *c = rec_call (s, FOP_CONV2D);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, weight);
  rec_tensor (c, 2, bias);
  c->i[0] = pad_h;
  c->i[1] = pad_w;
  c->i[2] = stride_h;
  c->i[3] = stride_w;
  rec_tensor (c, 3, y);
  (void) error;
  return TRUE;
}

static gboolean
d_upsample_nearest2x (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  if (!stream_capturing (s))
    return f_upsample_nearest2x (s, x, y, error);
  FakeCall *c = rec_call (s, FOP_UPSAMPLE_NEAREST2X);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, y);
  (void) error;
  return TRUE;
}

static gboolean
d_patchify (LbStream * s, const LbTensor * x, int ph, int pw, LbTensor * y,
    GError ** error)
{
  if (!stream_capturing (s))
    return f_patchify (s, x, ph, pw, y, error);
  FakeCall *c = rec_call (s, FOP_PATCHIFY);
  rec_tensor (c, 0, x);
  c->i[0] = ph;
  c->i[1] = pw;
  rec_tensor (c, 1, y);
  (void) error;
  return TRUE;
}

static gboolean
d_unpatchify (LbStream * s, const LbTensor * z, int ph, int pw, LbTensor * y,
    GError ** error)
{
  if (!stream_capturing (s))
    return f_unpatchify (s, z, ph, pw, y, error);
  FakeCall *c = rec_call (s, FOP_UNPATCHIFY);
  rec_tensor (c, 0, z);
  c->i[0] = ph;
  c->i[1] = pw;
  rec_tensor (c, 1, y);
  (void) error;
  return TRUE;
}

static gboolean
d_resize_bicubic (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  if (!stream_capturing (s))
    return f_resize_bicubic (s, x, y, error);
  FakeCall *c = rec_call (s, FOP_RESIZE_BICUBIC);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, y);
  (void) error;
  return TRUE;
}

static gboolean
d_copy (LbStream * s, const LbTensor * x, LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_copy (s, x, y, error);
  FakeCall *c = rec_call (s, FOP_COPY);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, y);
  (void) error;
  return TRUE;
}

static gboolean
d_clamp (LbStream * s, const LbTensor * x, float lo, float hi, LbTensor * y,
    GError ** error)
{
  if (!stream_capturing (s))
    return f_clamp (s, x, lo, hi, y, error);
  FakeCall *c = rec_call (s, FOP_CLAMP);
  rec_tensor (c, 0, x);
  c->f[0] = lo;
  c->f[1] = hi;
  rec_tensor (c, 1, y);
  (void) error;
  return TRUE;
}

static gboolean
d_fill (LbStream * s, LbTensor * y, float value, GError ** error)
{
  if (!stream_capturing (s))
    return f_fill (s, y, value, error);
  FakeCall *c = rec_call (s, FOP_FILL);
  rec_tensor (c, 0, y);
  c->f[0] = value;
  (void) error;
  return TRUE;
}

static gboolean
d_accumulate (LbStream * s, const LbTensor * x, LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_accumulate (s, x, y, error);
  FakeCall *c = rec_call (s, FOP_ACCUMULATE);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, y);
  (void) error;
  return TRUE;
}

static gboolean
d_channel_rms_norm (LbStream * s, const LbTensor * x, const LbTensor * gamma,
    gboolean silu, LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_channel_rms_norm (s, x, gamma, silu, y, error);
  FakeCall *c = rec_call (s, FOP_CHANNEL_RMS_NORM);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, gamma);
  c->i[0] = silu;
  rec_tensor (c, 2, y);
  (void) error;
  return TRUE;
}

static gboolean
d_upsample_nearest2x_halo (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  if (!stream_capturing (s))
    return f_upsample_nearest2x_halo (s, x, y, error);
  FakeCall *c = rec_call (s, FOP_UPSAMPLE_NEAREST2X_HALO);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, y);
  (void) error;
  return TRUE;
}

static gboolean
d_latent_affine (LbStream * s, const LbTensor * x, const LbTensor * mean,
    const LbTensor * inv_std, gboolean denormalize, LbTensor * y,
    GError ** error)
{
  if (!stream_capturing (s))
    return f_latent_affine (s, x, mean, inv_std, denormalize, y, error);
  FakeCall *c = rec_call (s, FOP_LATENT_AFFINE);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, mean);
  rec_tensor (c, 2, inv_std);
  c->i[0] = denormalize;
  rec_tensor (c, 3, y);
  (void) error;
  return TRUE;
}

static gboolean
d_norm_modulate (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, float eps, const LbTensor * scale,
    const LbTensor * shift, LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_norm_modulate (s, x, weight, bias, eps, scale, shift, y, error);
  FakeCall *c = rec_call (s, FOP_NORM_MODULATE);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, weight);
  rec_tensor (c, 2, bias);
  c->f[0] = eps;
  rec_tensor (c, 3, scale);
  rec_tensor (c, 4, shift);
  rec_tensor (c, 5, y);
  (void) error;
  return TRUE;
}

static gboolean
d_rms_norm_rope (LbStream * s, const LbTensor * x, const LbTensor * weight,
    float eps, const LbTensor * cos, const LbTensor * sin, int64_t grid_f,
    int64_t grid_h, int64_t grid_w, int64_t frame_offset, int64_t row_offset,
    LbTensor * y, GError ** error)
{
  if (!stream_capturing (s))
    return f_rms_norm_rope (s, x, weight, eps, cos, sin, grid_f, grid_h,
        grid_w, frame_offset, row_offset, y, error);
  FakeCall *c = rec_call (s, FOP_RMS_NORM_ROPE);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, weight);
  c->f[0] = eps;
  rec_tensor (c, 2, cos);
  rec_tensor (c, 3, sin);
  c->i[0] = grid_f;
  c->i[1] = grid_h;
  c->i[2] = grid_w;
  c->i[3] = frame_offset;
  c->i[4] = row_offset;
  rec_tensor (c, 4, y);
  (void) error;
  return TRUE;
}

static gboolean
d_gated_residual_modulate (LbStream * s, LbTensor * x, const LbTensor * y,
    const LbTensor * gate, const LbTensor * scale, const LbTensor * shift,
    GError ** error)
{
  if (!stream_capturing (s))
    return f_gated_residual_modulate (s, x, y, gate, scale, shift, error);
  FakeCall *c = rec_call (s, FOP_GATED_RESIDUAL_MODULATE);
  rec_tensor (c, 0, x);
  rec_tensor (c, 1, y);
  rec_tensor (c, 2, gate);
  rec_tensor (c, 3, scale);
  rec_tensor (c, 4, shift);
  (void) error;
  return TRUE;
}

static gboolean
d_ray_map (LbStream * s, const LbTensor * rel_poses, float fx, float fy,
    float cx, float cy, int width, int height, int row0, LbTensor * y,
    GError ** error)
{
  if (!stream_capturing (s))
    return f_ray_map (s, rel_poses, fx, fy, cx, cy, width, height, row0, y,
        error);
  FakeCall *c = rec_call (s, FOP_RAY_MAP);
  rec_tensor (c, 0, rel_poses);
  c->f[0] = fx;
  c->f[1] = fy;
  c->f[2] = cx;
  c->f[3] = cy;
  c->i[0] = width;
  c->i[1] = height;
  c->i[2] = row0;
  rec_tensor (c, 1, y);
  (void) error;
  return TRUE;
}

static gboolean
replay_call (LbStream * s, FakeCall * c, GError ** error)
{
  switch (c->op) {
    case FOP_GEMM:
      return f_gemm (s, RT (0), RT (1), (gboolean) c->i[0], RT (2), c->f[0],
          c->f[1], RT (3), error);
    case FOP_GEMM_FP8:
      return f_gemm_fp8 (s, RT (0), RT (1), RT (2), RT (3), c->f[0], c->f[1],
          RT (4), error);
    case FOP_LAYER_NORM:
      return f_layer_norm (s, RT (0), RT (1), RT (2), c->f[0], RT (3), error);
    case FOP_RMS_NORM:
      return f_rms_norm (s, RT (0), RT (1), c->f[0], RT (2), error);
    case FOP_MODULATE:
      return f_modulate (s, RT (0), RT (1), RT (2), RT (3), error);
    case FOP_GATED_RESIDUAL:
      return f_gated_residual (s, RT (0), RT (1), RT (2), error);
    case FOP_ROPE_3D:
      return f_rope_3d (s, RT (0), RT (1), RT (2), c->i[0], c->i[1], c->i[2],
          c->i[3], c->i[4], error);
    case FOP_ATTENTION:
      return f_attention (s, RT (0), RT (1), RT (2), RT (3), RT (4), c->f[0],
          RT (5), error);
    case FOP_GELU_TANH:
      return f_gelu_tanh (s, RT (0), RT (1), error);
    case FOP_SILU:
      return f_silu (s, RT (0), RT (1), error);
    case FOP_ADD:
      return f_add (s, RT (0), RT (1), RT (2), error);
    case FOP_MUL:
      return f_mul (s, RT (0), RT (1), RT (2), error);
    case FOP_SCALE:
      return f_scale (s, RT (0), c->f[0], c->f[1], RT (1), error);
    case FOP_CONV3D_CAUSAL:
      return f_conv3d_causal (s, RT (0), RT (1), RT (2), RT (3),
          (int) c->i[0], (int) c->i[1], (int) c->i[2], (int) c->i[3], RT (4),
          error);
    case FOP_CONV2D:
      return f_conv2d (s, RT (0), RT (1), RT (2), (int) c->i[0],
          (int) c->i[1], (int) c->i[2], (int) c->i[3], RT (3), error);
    case FOP_UPSAMPLE_NEAREST2X:
      return f_upsample_nearest2x (s, RT (0), RT (1), error);
    case FOP_PATCHIFY:
      return f_patchify (s, RT (0), (int) c->i[0], (int) c->i[1], RT (1),
          error);
    case FOP_UNPATCHIFY:
      return f_unpatchify (s, RT (0), (int) c->i[0], (int) c->i[1], RT (1),
          error);
    case FOP_RESIZE_BICUBIC:
      return f_resize_bicubic (s, RT (0), RT (1), error);
    case FOP_COPY:
      return f_copy (s, RT (0), RT (1), error);
    case FOP_CLAMP:
      return f_clamp (s, RT (0), c->f[0], c->f[1], RT (1), error);
    case FOP_FILL:
      return f_fill (s, RT (0), c->f[0], error);
    case FOP_ACCUMULATE:
      return f_accumulate (s, RT (0), RT (1), error);
    case FOP_CHANNEL_RMS_NORM:
      return f_channel_rms_norm (s, RT (0), RT (1), (gboolean) c->i[0],
          RT (2), error);
    case FOP_UPSAMPLE_NEAREST2X_HALO:
      return f_upsample_nearest2x_halo (s, RT (0), RT (1), error);
    case FOP_LATENT_AFFINE:
      return f_latent_affine (s, RT (0), RT (1), RT (2), (gboolean) c->i[0],
          RT (3), error);
    case FOP_NORM_MODULATE:
      return f_norm_modulate (s, RT (0), RT (1), RT (2), c->f[0], RT (3),
          RT (4), RT (5), error);
    case FOP_RMS_NORM_ROPE:
      return f_rms_norm_rope (s, RT (0), RT (1), c->f[0], RT (2), RT (3),
          c->i[0], c->i[1], c->i[2], c->i[3], c->i[4], RT (4), error);
    case FOP_GATED_RESIDUAL_MODULATE:
      return f_gated_residual_modulate (s, RT (0), RT (1), RT (2), RT (3),
          RT (4), error);
    case FOP_RAY_MAP:
      return f_ray_map (s, RT (0), c->f[0], c->f[1], c->f[2], c->f[3],
          (int) c->i[0], (int) c->i[1], (int) c->i[2], RT (1), error);
    case FOP_RAW_COPY:
      return fake_copy (s, c->dst, c->src, c->nbytes,
          LB_COPY_DEVICE_TO_DEVICE, error);
  }
  g_assert_not_reached ();
  return FALSE;
}

static const LbOps fake_ops = {
  .gemm = d_gemm,
  .gemm_fp8 = d_gemm_fp8,
  .layer_norm = d_layer_norm,
  .rms_norm = d_rms_norm,
  .modulate = d_modulate,
  .gated_residual = d_gated_residual,
  .rope_3d = d_rope_3d,
  .attention = d_attention,
  .gelu_tanh = d_gelu_tanh,
  .silu = d_silu,
  .add = d_add,
  .mul = d_mul,
  .scale = d_scale,
  .conv3d_causal = d_conv3d_causal,
  .conv2d = d_conv2d,
  .upsample_nearest2x = d_upsample_nearest2x,
  .patchify = d_patchify,
  .unpatchify = d_unpatchify,
  .resize_bicubic = d_resize_bicubic,
  .copy = d_copy,
  .clamp = d_clamp,
  .fill = d_fill,
  .accumulate = d_accumulate,
  .channel_rms_norm = d_channel_rms_norm,
  .upsample_nearest2x_halo = d_upsample_nearest2x_halo,
  .latent_affine = d_latent_affine,
  .norm_modulate = d_norm_modulate,
  .rms_norm_rope = d_rms_norm_rope,
  .gated_residual_modulate = d_gated_residual_modulate,
  .ray_map = d_ray_map,
};


static gboolean
fake_graph_begin (LbStream * s, GError ** error)
{
  FakeStream *fs = s->priv;
  if (fs->capturing)
    return refuse (error, "graph capture: already capturing");
  fs->capturing = TRUE;
  fs->calls = g_array_new (FALSE, FALSE, sizeof (FakeCall));
  g_atomic_int_inc (&fake.n_capturing);
  return TRUE;
}

static LbGraph *
fake_graph_end (LbStream * s, GError ** error)
{
  FakeStream *fs = s->priv;
  if (!fs->capturing) {
    refuse (error, "graph capture: not capturing");
    return NULL;
  }
  LbGraph *g = g_new0 (LbGraph, 1);
  g->calls = fs->calls;
  for (guint n = 0; n < g->calls->len; n++)
    memset (g_array_index (g->calls, FakeCall, n).orig, 0,
        sizeof (((FakeCall *) NULL)->orig));
  fs->calls = NULL;
  fs->capturing = FALSE;
  g_atomic_int_add (&fake.n_capturing, -1);
  g_atomic_int_inc (&fake.n_captures);
  return g;
}

/* Replays the recorded calls in order through the same residency checks
 * (a tensor freed since the capture is refused). */
static gboolean
fake_graph_launch (LbStream * s, LbGraph * graph, GError ** error)
{
  if (stream_capturing (s))
    return refuse (error, "graph launch during a capture");
  g_atomic_int_inc (&fake.n_launches);
  for (guint n = 0; n < graph->calls->len; n++)
    if (!replay_call (s, &g_array_index (graph->calls, FakeCall, n), error))
      return FALSE;
  return TRUE;
}

static void
fake_graph_free (LbStream * s, LbGraph * graph)
{
  (void) s;
  if (graph == NULL)
    return;
  g_array_free (graph->calls, TRUE);
  g_free (graph);
}


/* Events: fakedev runs everything at once, so an event only has to exist
 * (and is counted: a stream wait is where a real device would order two
 * streams). */
struct _LbEvent
{
  int device;
};

static LbEvent *
fake_event_new (LbBackend * self, int device, GError ** error)
{
  (void) self;
  (void) error;
  LbEvent *e = g_new0 (LbEvent, 1);
  e->device = device;
  return e;
}

static void
fake_event_free (LbBackend * self, LbEvent * event)
{
  (void) self;
  g_free (event);
}

static gboolean
fake_event_record (LbStream * s, LbEvent * event, GError ** error)
{
  if (event->device != s->device)
    return refuse (error, "event of device %d recorded on fakedev:%d",
        event->device, s->device);
  g_atomic_int_inc (&fake.n_records);
  return TRUE;
}

/* Any device's event may be waited for (cudaStreamWaitEvent allows an
 * event of another device: a peer rank's stream). */
static gboolean
fake_stream_wait_event (LbStream * s, LbEvent * event, GError ** error)
{
  (void) s;
  (void) event;
  (void) error;
  g_atomic_int_inc (&fake.n_waits);
  return TRUE;
}

/* Page-locked host memory stands in as plain host memory, counted. */
static gpointer
fake_host_alloc (LbBackend * self, gsize nbytes, GError ** error)
{
  (void) self;
  (void) error;
  g_atomic_int_inc (&fake.n_host_blocks);
  return g_malloc0 (MAX (nbytes, 1));
}

static void
fake_host_free (LbBackend * self, gpointer ptr)
{
  (void) self;
  if (ptr == NULL)
    return;
  g_atomic_int_add (&fake.n_host_blocks, -1);
  g_free (ptr);
}

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
  .graph_begin = fake_graph_begin,
  .graph_end = fake_graph_end,
  .graph_launch = fake_graph_launch,
  .graph_free = fake_graph_free,
  .host_alloc = fake_host_alloc,
  .host_free = fake_host_free,
  .event_new = fake_event_new,
  .event_free = fake_event_free,
  .event_record = fake_event_record,
  .stream_wait_event = fake_stream_wait_event,
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
  st.n_captures = g_atomic_int_get (&fake.n_captures);
  st.n_launches = g_atomic_int_get (&fake.n_launches);
  st.n_waits = g_atomic_int_get (&fake.n_waits);
  st.n_records = g_atomic_int_get (&fake.n_records);
  st.n_syncs = g_atomic_int_get (&fake.n_syncs);
  st.host_blocks = g_atomic_int_get (&fake.n_host_blocks);
  st.n_convs_fp32 = g_atomic_int_get (&fake.n_convs_fp32);
  st.n_convs_bf16 = g_atomic_int_get (&fake.n_convs_bf16);
  g_mutex_lock (&fake.lock);
  st.live_blocks = fake.blocks ? (int) g_hash_table_size (fake.blocks) : 0;
  g_mutex_unlock (&fake.lock);
  return st;
}

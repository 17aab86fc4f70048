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
#include "op-call.h"
#include "kernels/error.h"

typedef struct
{
  GMutex lock;
  GHashTable *blocks;           /* ptr -> size */
  gint bad;
  gint n_h2d, n_d2h, n_d2d, n_ops;
  gint n_captures, n_launches, n_capturing, n_waits;
  gint n_records, n_syncs, n_host_blocks;
  gint n_convs_fp32, n_convs_bf16;
  gint n_gemm_bf16_x, n_attention_bf16_q, n_attention_bf16_out;
  gint n_gemm_fp8, n_gemm_fp8_q, n_norm_fp8;
  gint n_gemm_fp8_gelu_q, n_gelu_tanh;
  gint n_reserves;
  gsize reserve_scratch, reserve_workspace;     /* the largest asked */
  gint n_conv_bf16_x, n_norm_bf16_y;
  gint conv_input_bf16;         /* fakedev_set_conv_input_bf16() */
  GHashTable *host;             /* host_alloc blocks: ptr -> size */
  gint n_allocs, n_h2d_pinned, n_d2h_pinned;
  gint fail_graph_end;          /* fakedev_fail_graph_end() */
  gint n_capture_fails;
} FakeDev;

/* A recorded call's op: an OpId (op-call.h), or a device copy. */
#define FOP_RAW_COPY OP_COUNT

/* A recorded call (graph capture): tensor descriptors by value, with
 * arguments that were the same pointer mapped to the same copy. */
typedef struct
{
  int op;                       /* OpId, or FOP_RAW_COPY */
  int n;
  LbTensor t[OP_CALL_MAX_TENSORS];
  const LbTensor *orig[OP_CALL_MAX_TENSORS];    /* while recording only */
  int idx[OP_CALL_MAX_TENSORS]; /* tensor argument k -> t[idx[k]], or -1 */
  float f[OP_CALL_MAX_FLOATS];
  int64_t i[OP_CALL_MAX_INTS];
  void *dst;                    /* FOP_RAW_COPY */
  const void *src;
  gsize nbytes;
} FakeCall;

typedef struct
{
  gboolean capturing;
  GArray *calls;                /* FakeCall, while capturing */
} FakeStream;

struct _LbGraph
{
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

static gboolean refuse (GError ** error, const char *format, ...)
    G_GNUC_PRINTF (2, 3);

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
  g_atomic_int_inc (&fake.n_allocs);
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

/* [p, p + n) lies inside one live host_alloc block */
static gboolean
is_pinned (const void *p, gsize n)
{
  gboolean found = FALSE;
  GHashTableIter it;
  gpointer k, v;
  g_mutex_lock (&fake.lock);
  g_hash_table_iter_init (&it, fake.host);
  while (!found && g_hash_table_iter_next (&it, &k, &v)) {
    const guint8 *b = k;
    found = (const guint8 *) p >= b &&
        (const guint8 *) p + n <= b + GPOINTER_TO_SIZE (v);
  }
  g_mutex_unlock (&fake.lock);
  return found;
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
  if (kind == LB_COPY_HOST_TO_DEVICE && is_pinned (src, nbytes))
    g_atomic_int_inc (&fake.n_h2d_pinned);
  if (kind == LB_COPY_DEVICE_TO_HOST && is_pinned (dst, nbytes))
    g_atomic_int_inc (&fake.n_d2h_pinned);
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

/* LbBackend.stream_reserve: fakedev's ops take no device scratch, so it
 * only counts the calls and keeps the largest sizes asked
 * (FakeDevStats.n_reserves); refused during a capture. */
static gboolean
fake_stream_reserve (LbStream * s, gsize scratch_bytes, gsize workspace_bytes,
    GError ** error)
{
  FakeStream *fs = s->priv;
  if (fs->capturing)
    return refuse (error, "stream reserve during a graph capture");
  g_mutex_lock (&fake.lock);
  fake.n_reserves++;
  fake.reserve_scratch = MAX (fake.reserve_scratch, scratch_bytes);
  fake.reserve_workspace = MAX (fake.reserve_workspace, workspace_bytes);
  g_mutex_unlock (&fake.lock);
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
  for (int k = 0; k < OP_CALL_MAX_TENSORS; k++)
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

/* Up to OP_CALL_MAX_TENSORS tensor arguments per op; an argument whose pointer equals an
 * earlier one maps to the same host descriptor (in-place calls stay
 * in-place for the CPU kernel's aliasing checks). */
typedef struct
{
  LbStream *s;
  const char *op;
  gboolean ok;
  int n;
  const LbTensor *orig[OP_CALL_MAX_TENSORS];
  LbTensor host[OP_CALL_MAX_TENSORS];
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
  g_assert (a->n < OP_CALL_MAX_TENSORS);
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

/* the bf16 operands the counters follow (FakeDevStats): gemm's x is its
 * first tensor, attention's q its first and out its last; and the fp8
 * GEMMs and their norm_fp8 producer */
static void
count_bf16 (OpId op, const Args * a)
{
  if ((op == OP_gemm || op == OP_gemm_gelu_tanh) &&
      a->host[0].dtype == LB_DTYPE_BF16)
    g_atomic_int_inc (&fake.n_gemm_bf16_x);
  if (op == OP_attention && a->host[0].dtype == LB_DTYPE_BF16)
    g_atomic_int_inc (&fake.n_attention_bf16_q);
  if (op == OP_attention && a->n > 0 &&
      a->host[a->n - 1].dtype == LB_DTYPE_BF16)
    g_atomic_int_inc (&fake.n_attention_bf16_out);
  if (op == OP_gemm_fp8)
    g_atomic_int_inc (&fake.n_gemm_fp8);
  if (op == OP_gemm_fp8_q)
    g_atomic_int_inc (&fake.n_gemm_fp8_q);
  if (op == OP_norm_fp8)
    g_atomic_int_inc (&fake.n_norm_fp8);
  if (op == OP_gemm_fp8_gelu_q)
    g_atomic_int_inc (&fake.n_gemm_fp8_gelu_q);
  if (op == OP_gelu_tanh)
    g_atomic_int_inc (&fake.n_gelu_tanh);
  if (op == OP_conv3d_causal && a->host[0].dtype == LB_DTYPE_BF16)
    g_atomic_int_inc (&fake.n_conv_bf16_x);
  if (op == OP_channel_rms_norm && a->n > 0 &&
      a->host[a->n - 1].dtype == LB_DTYPE_BF16)
    g_atomic_int_inc (&fake.n_norm_bf16_y);
}

/* f_<op> for every op of kernels/ops-list.h: each tensor argument checked
 * and relabelled as host memory (in argument order, so an in-place call
 * stays in place), then the CPU kernel. */
#define HOST_IN(n) LbTensor *h_##n = A (n);
#define HOST_OUT(n) LbTensor *h_##n = A (n);
#define HOST_F32(n)
#define HOST_INT(n)
#define HOST_I64(n)
#define HOST_BOOL(n)
#define HOST(kind, n) HOST_##kind (n)
#define ON_HOST_IN(n) , h_##n
#define ON_HOST_OUT(n) , h_##n
#define ON_HOST_F32(n) , n
#define ON_HOST_INT(n) , n
#define ON_HOST_I64(n) , n
#define ON_HOST_BOOL(n) , n
#define ON_HOST(kind, n) ON_HOST_##kind (n)

#define LB_OP(name) \
static gboolean \
f_##name (LbStream * s LB_OP_ARGS_##name (LB_OP_PARAM), GError ** error) \
{ \
  PRE (#name); \
  if (OP_##name == OP_conv3d_causal || OP_##name == OP_conv2d) \
    count_conv (s); \
  LB_OP_ARGS_##name (HOST) \
  CHECK; \
  count_bf16 (OP_##name, &a_); \
  return CPU->name (s LB_OP_ARGS_##name (ON_HOST), error); \
}
#include "kernels/ops-list.h"

/* The checked ops, run at once: what graph_launch replays through. */
static const LbOps fake_direct_ops = {
#define LB_OP(name) .name = f_##name,
#include "kernels/ops-list.h"
};

/* ---- graph capture: every op call recorded, replayed by graph_launch ---- */

/* d_<op>: f_<op>, or while capturing its arguments recorded in order
 * (tensors by value, scalars in f[] and i[] as an OpCall holds them). */
#define REC_IN(n) rec_tensor (c, kt++, n);
#define REC_OUT(n) rec_tensor (c, kt++, n);
#define REC_F32(n) c->f[kf++] = n;
#define REC_INT(n) c->i[ki++] = n;
#define REC_I64(n) c->i[ki++] = n;
#define REC_BOOL(n) c->i[ki++] = n;
#define REC(kind, n) REC_##kind (n)

#define LB_OP(name) \
static gboolean \
d_##name (LbStream * s LB_OP_ARGS_##name (LB_OP_PARAM), GError ** error) \
{ \
  if (!stream_capturing (s)) \
    return f_##name (s LB_OP_ARGS_##name (LB_OP_ARG_NAME), error); \
  FakeCall *c = rec_call (s, OP_##name); \
  int kt = 0, kf = 0, ki = 0; \
  LB_OP_ARGS_##name (REC) \
  (void) kt; \
  (void) kf; \
  (void) ki; \
  return TRUE; \
}
#include "kernels/ops-list.h"

static gboolean
replay_call (LbStream * s, FakeCall * c, GError ** error)
{
  if (c->op == FOP_RAW_COPY)
    return fake_copy (s, c->dst, c->src, c->nbytes,
        LB_COPY_DEVICE_TO_DEVICE, error);
  OpCall call = {.op = c->op };
  for (int k = 0; k < OP_CALL_MAX_TENSORS; k++)
    call.t[k] = RT (k);
  memcpy (call.f, c->f, sizeof (call.f));
  memcpy (call.i, c->i, sizeof (call.i));
  return op_call_run (&fake_direct_ops, s, &call, error);
}

static const LbOps fake_ops = {
#define LB_OP(name) .name = d_##name,
#include "kernels/ops-list.h"
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
  /* an injected failure: the capture was invalidated, nothing of it ran */
  gint left = g_atomic_int_get (&fake.fail_graph_end);
  while (left != 0 && !g_atomic_int_compare_and_exchange (&fake.fail_graph_end,
          left, left > 0 ? left - 1 : left))
    left = g_atomic_int_get (&fake.fail_graph_end);
  if (left != 0) {
    g_array_free (fs->calls, TRUE);
    fs->calls = NULL;
    fs->capturing = FALSE;
    g_atomic_int_add (&fake.n_capturing, -1);
    g_atomic_int_inc (&fake.n_capture_fails);
    g_set_error_literal (error, LB_ERROR, LB_ERROR_DEVICE, "graph capture: "
        "operation failed due to a previous error during capture "
        "(cudaErrorStreamCaptureInvalidated)");
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
  gpointer p = g_malloc0 (MAX (nbytes, 1));
  g_mutex_lock (&fake.lock);
  g_hash_table_insert (fake.host, p, GSIZE_TO_POINTER (nbytes));
  g_mutex_unlock (&fake.lock);
  return p;
}

static void
fake_host_free (LbBackend * self, gpointer ptr)
{
  (void) self;
  if (ptr == NULL)
    return;
  g_atomic_int_add (&fake.n_host_blocks, -1);
  g_mutex_lock (&fake.lock);
  g_hash_table_remove (fake.host, ptr);
  g_mutex_unlock (&fake.lock);
  g_free (ptr);
}

/* The CUDA extra "lingbot_backend_conv_input_bf16", as the CUDA module
 * answers it with LINGBOT_CUDA_CONV_LAYOUT=ndhwc, while switched on. */
static gboolean
fake_conv_input_bf16 (LbStream * s)
{
  return g_atomic_int_get (&fake.conv_input_bf16) && s->math != LB_MATH_FP32;
}

static gpointer
fake_get_proc_address (LbBackend * self, const char *name)
{
  (void) self;
  if (g_strcmp0 (name, "lingbot_backend_conv_input_bf16") == 0)
    return (gpointer) fake_conv_input_bf16;
  return NULL;
}

/**
 * fakedev_set_conv_input_bf16:
 * @on: whether the backend extra "lingbot_backend_conv_input_bf16" says
 *   %TRUE for bf16/fp8 streams (as CUDA does with
 *   LINGBOT_CUDA_CONV_LAYOUT=ndhwc); off at start
 *
 * Makes a VAE decoder created afterwards on fakedev streams lay out its
 * conv inputs as bf16 channels-last.  Process-wide.
 */
void
fakedev_set_conv_input_bf16 (gboolean on)
{
  g_atomic_int_set (&fake.conv_input_bf16, on ? 1 : 0);
}

/**
 * fakedev_fail_graph_end:
 * @n: how many of the next graph_end calls fail (-1: all, 0: none)
 *
 * Fault injection: such a graph_end answers %NULL and "graph capture:
 * operation failed due to a previous error during capture
 * (cudaErrorStreamCaptureInvalidated)" (%LB_ERROR_DEVICE), the message
 * of the CUDA backend for a capture that an illegal call invalidated,
 * and drops what was recorded (nothing of it ran).  Counted in
 * #FakeDevStats.n_capture_fails; not a refusal (@bad).  Process-wide.
 */
void
fakedev_fail_graph_end (int n)
{
  g_atomic_int_set (&fake.fail_graph_end, n);
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
  .get_proc_address = fake_get_proc_address,
  .stream_reserve = fake_stream_reserve,
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
    fake.host = g_hash_table_new (g_direct_hash, g_direct_equal);
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
  st.n_capture_fails = g_atomic_int_get (&fake.n_capture_fails);
  st.n_waits = g_atomic_int_get (&fake.n_waits);
  st.n_records = g_atomic_int_get (&fake.n_records);
  st.n_syncs = g_atomic_int_get (&fake.n_syncs);
  st.host_blocks = g_atomic_int_get (&fake.n_host_blocks);
  st.n_convs_fp32 = g_atomic_int_get (&fake.n_convs_fp32);
  st.n_convs_bf16 = g_atomic_int_get (&fake.n_convs_bf16);
  st.n_gemm_bf16_x = g_atomic_int_get (&fake.n_gemm_bf16_x);
  st.n_attention_bf16_q = g_atomic_int_get (&fake.n_attention_bf16_q);
  st.n_attention_bf16_out = g_atomic_int_get (&fake.n_attention_bf16_out);
  st.n_gemm_fp8 = g_atomic_int_get (&fake.n_gemm_fp8);
  st.n_gemm_fp8_q = g_atomic_int_get (&fake.n_gemm_fp8_q);
  st.n_norm_fp8 = g_atomic_int_get (&fake.n_norm_fp8);
  st.n_gemm_fp8_gelu_q = g_atomic_int_get (&fake.n_gemm_fp8_gelu_q);
  st.n_gelu_tanh = g_atomic_int_get (&fake.n_gelu_tanh);
  g_mutex_lock (&fake.lock);
  st.n_reserves = fake.n_reserves;
  st.reserve_scratch = fake.reserve_scratch;
  st.reserve_workspace = fake.reserve_workspace;
  g_mutex_unlock (&fake.lock);
  st.n_conv_bf16_x = g_atomic_int_get (&fake.n_conv_bf16_x);
  st.n_norm_bf16_y = g_atomic_int_get (&fake.n_norm_bf16_y);
  st.n_allocs = g_atomic_int_get (&fake.n_allocs);
  st.n_h2d_pinned = g_atomic_int_get (&fake.n_h2d_pinned);
  st.n_d2h_pinned = g_atomic_int_get (&fake.n_d2h_pinned);
  g_mutex_lock (&fake.lock);
  st.live_blocks = fake.blocks ? (int) g_hash_table_size (fake.blocks) : 0;
  g_mutex_unlock (&fake.lock);
  return st;
}

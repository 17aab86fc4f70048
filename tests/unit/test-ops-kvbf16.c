/* lingbot-gst: the ops of a bf16 KV cache (spec 1.11: "the KV cache is
 * bf16") on the CPU oracle and on the emulated device
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * kernels/ops.h lets three ops touch bf16 tensors for the cache:
 * attention reads bf16 k and v, rms_norm_rope writes the rotated keys into
 * bf16 slots, copy converts between f32 and bf16.  Checked here:
 *
 * - attention with bf16 k/v equals, bit for bit, the f32 op run on k/v
 *   widened exactly (lb_bf16_to_f32) into f32 tensors stored elsewhere
 *   (other addresses and alignments, so the CPU's loops must not depend on
 *   where the operands are), for cache-window and head-slice views, bias,
 *   mask, all keys hidden, Nk = 0, several tilings and the threaded path;
 *   and it is close to a float64 reference (it is not trivially equal);
 * - rms_norm_rope into bf16 y: every element is lb_f32_to_bf16 of the f32
 *   op's element, for own, cache-slot and packed views; slots outside the
 *   view keep their bits;
 * - copy: every bf16 pattern widened exactly and back; f32 -> bf16 equal
 *   to lb_f32_to_bf16 (ties to even, NaN, inf, overflow, subnormals) and
 *   to hand-computed patterns; strided, permuted, broadcast and 5-D
 *   views; bf16 -> bf16 bits;
 * - attention with a bf16 q and/or a bf16 out (the DiT's exchanges and
 *   output projections): the f32 op's bits on q's values, and every
 *   output element lb_f32_to_bf16 of the f32 op's, for strided views,
 *   bias, mask, Nk = 0 and the threaded path;
 * - the exact error messages for the dtypes the ops still refuse;
 * - the same three ops on fakedev (tests/common/fakedev.c), directly and
 *   through a graph capture replayed on new inputs, bit-identical to the
 *   CPU; fakedev refuses a view whose dtype makes it reach past its
 *   allocation.
 */
#include "test-ops-common.h"
#include "fakedev.h"
#include "test-compare.h"

/* attention in f32 over <= a few hundred keys (test-ops-attention.c) */
#define TOL_ATTN 1e-5

/* A contiguous bf16 tensor of random values in [lo, hi) (each the
 * rounding of a random float). */
static LbTensor *
rand_bf16 (int ndim, const int64_t * shape, double lo, double hi)
{
  LbTensor *t = lb_tensor_new (LB_DTYPE_BF16, ndim, shape);
  uint16_t *d = t->data;
  for (int64_t i = 0; i < lb_tensor_numel (t); i++)
    d[i] = lb_f32_to_bf16 ((float) g_test_rand_double_range (lo, hi));
  return t;
}

/* Element @flat (row-major) of a possibly strided 16-bit view. */
static uint16_t
at16 (const LbTensor * t, int64_t flat)
{
  int64_t off = 0;
  for (int i = t->ndim - 1; i >= 0; i--) {
    off += (flat % t->shape[i]) * t->stride[i];
    flat /= t->shape[i];
  }
  return ((const uint16_t *) t->data)[off];
}

/* ------------------------------------------------------------------------ */
/* attention                                                                */
/* ------------------------------------------------------------------------ */

typedef struct
{
  int64_t nq, nk, nh, hd;
  gboolean bias, mask, heads_slice;
  int mask_mode;                /* 0 random, 1 all hidden */
  int qb, kt;                   /* tiles, 0 = default */
  int64_t win0;                 /* first cache row of the window */
} KvCase;

/* float64 softmax attention over f32 views (the widened cache). */
static void
ref_attention (const LbTensor * q, const LbTensor * k, const LbTensor * v,
    const LbTensor * bias, const guint8 * mask, double scale, double *ref)
{
  const int64_t nq = q->shape[0], nh = q->shape[1], hd = q->shape[2];
  const int64_t nk = k->shape[0];
  double *logit = g_new (double, MAX (nk, 1));
  for (int64_t h = 0; h < nh; h++)
    for (int64_t i = 0; i < nq; i++) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < nk; j++) {
        logit[j] = -INFINITY;
        if (mask && !mask[j])
          continue;
        double d = 0;
        for (int64_t e = 0; e < hd; e++)
          d += (double) at (q, (i * nh + h) * hd + e) *
              at (k, (j * nh + h) * hd + e);
        d *= scale;
        if (bias)
          d += ((const float *) bias->data)[(h * nq + i) * nk + j];
        logit[j] = d;
        mx = MAX (mx, d);
      }
      double sum = 0;
      for (int64_t j = 0; j < nk && mx > -INFINITY; j++)
        sum += exp (logit[j] - mx);
      for (int64_t e = 0; e < hd; e++) {
        double acc = 0;
        for (int64_t j = 0; j < nk && sum > 0; j++)
          acc += exp (logit[j] - mx) * at (v, (j * nh + h) * hd + e);
        ref[(i * nh + h) * hd + e] = sum > 0 ? acc / sum : 0.0;
      }
    }
  g_free (logit);
}

/* The cache-window view [win0, win0 + nk) of a base [cap, H', hd] (heads
 * [nh, 2 nh) of 2 nh when @heads_slice), as the DiT passes it. */
static void
window_view (LbTensor * out, const LbTensor * base, const KvCase * c)
{
  LbTensor rows;
  g_assert_true (lb_tensor_view_narrow (&rows, base, 0, c->win0, c->nk));
  if (c->heads_slice)
    g_assert_true (lb_tensor_view_narrow (out, &rows, 1, c->nh, c->nh));
  else
    lb_tensor_view (out, &rows);
}

/* An f32 copy of bf16 @src (contiguous) widened exactly, stored @shift
 * floats into a larger buffer: a different address and alignment. */
static LbTensor *
widened_base (const LbTensor * src, int64_t shift, LbTensor * view)
{
  int64_t n = lb_tensor_numel (src) + shift;
  LbTensor *buf = lb_tensor_new (LB_DTYPE_F32, 1, &n);
  float *d = (float *) buf->data + shift;
  const uint16_t *s = src->data;
  for (int64_t i = 0; i < lb_tensor_numel (src); i++)
    d[i] = lb_bf16_to_f32 (s[i]);
  lb_tensor_view_init (view, LB_DTYPE_F32, d, LB_DEVICE_HOST, src->ndim,
      src->shape, NULL);
  return buf;
}

/* The random operands of a case: q [nq, nh, hd], bf16 k and v [rows, hb,
 * hd], a bias [nh, nq, nk] and a key mask (c->mask_mode) with its [nk]
 * view; b and m are what the op gets (NULL unless the case asks). */
typedef struct
{
  LbTensor *q, *k, *v, *bias, *mask;
  LbTensor maskv;
  const LbTensor *b, *m;
} KvInputs;

static void
kv_inputs_init (KvInputs * in, const KvCase * c, int64_t rows, int64_t hb)
{
  int64_t qs[3] = { c->nq, c->nh, c->hd }, ks[3] = { rows, hb, c->hd };
  int64_t bs[3] = { c->nh, c->nq, c->nk }, ms[1] = { MAX (c->nk, 1) };
  in->q = rand_tensor (3, qs, -2, 2);
  in->k = rand_bf16 (3, ks, -2, 2);
  in->v = rand_bf16 (3, ks, -3, 3);
  in->bias = rand_tensor (3, bs, -2, 2);
  in->mask = lb_tensor_new (LB_DTYPE_U8, 1, ms);
  guint8 *md = in->mask->data;
  for (int64_t j = 0; j < c->nk; j++)
    md[j] = c->mask_mode == 1 ? 0 : g_test_rand_int_range (0, 3) != 0;
  lb_tensor_view_narrow (&in->maskv, in->mask, 0, 0, c->nk);
  in->b = c->bias ? in->bias : NULL;
  in->m = c->mask ? &in->maskv : NULL;
}

static void
kv_inputs_clear (KvInputs * in)
{
  lb_tensor_free (in->q);
  lb_tensor_free (in->k);
  lb_tensor_free (in->v);
  lb_tensor_free (in->bias);
  lb_tensor_free (in->mask);
}

static void
kv_case (const KvCase * c)
{
  const int64_t cap = c->win0 + c->nk + 3;
  const int64_t hb = c->heads_slice ? 2 * c->nh : c->nh;
  int64_t qs[3] = { c->nq, c->nh, c->hd };
  int qb0, kt0;
  lb_cpu_attention_get_tiles (&qb0, &kt0);
  lb_cpu_attention_set_tiles (c->qb, c->kt);

  KvInputs in;
  kv_inputs_init (&in, c, cap, hb);
  const LbTensor *q = in.q, *b = in.b, *m = in.m;
  const guint8 *md = in.mask->data;
  LbTensor kcw, vcw;
  g_autoptr (LbTensor) kbuf = widened_base (in.k, 1, &kcw);
  g_autoptr (LbTensor) vbuf = widened_base (in.v, 3, &vcw);

  LbTensor k16, v16, k32, v32;
  window_view (&k16, in.k, c);
  window_view (&v16, in.v, c);
  window_view (&k32, &kcw, c);
  window_view (&v32, &vcw, c);
  g_assert_cmpint (k16.dtype, ==, LB_DTYPE_BF16);

  const float scale = 1.0f / sqrtf ((float) c->hd);
  g_autoptr (LbTensor) o16 = poisoned (3, qs);
  g_autoptr (LbTensor) o32 = poisoned (3, qs);
  assert_op_ok (lb_cpu_attention (test_stream (), q, &k16, &v16, b, m, scale,
          o16, error));
  assert_op_ok (lb_cpu_attention (test_stream (), q, &k32, &v32, b, m, scale,
          o32, error));
  const gsize nb = lb_tensor_nbytes (o16);
  if (memcmp (o16->data, o32->data, nb) != 0) {
    const uint32_t *a = o16->data, *r = o32->data;
    for (gsize i = 0; i < nb / 4; i++)
      if (a[i] != r[i])
        g_error ("attention bf16 k/v [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
            ", %" G_GINT64_FORMAT "], %" G_GINT64_FORMAT " keys: element %"
            G_GSIZE_FORMAT " is 0x%08x, the f32 op on the widened k/v gives "
            "0x%08x", c->nq, c->nh, c->hd, c->nk, i, a[i], r[i]);
  }
  double *ref = g_new (double, lb_tensor_numel (q));
  ref_attention (q, &k32, &v32, b, c->mask ? md : NULL, scale, ref);
  assert_close ("attention bf16 k/v", o16, ref, TOL_ATTN);
  /* hidden queries get zeros, others not (the reference is not all 0) */
  double mx = 0.0;
  for (int64_t i = 0; i < lb_tensor_numel (q); i++)
    mx = MAX (mx, fabs (ref[i]));
  if (c->nk > 0 && !(c->mask && c->mask_mode == 1))
    g_assert_cmpfloat (mx, >, 0.1);
  else
    g_assert_cmpfloat (mx, ==, 0.0);
  g_free (ref);
  kv_inputs_clear (&in);
  lb_cpu_attention_set_tiles (qb0, kt0);
}

/* the cases of test_attention() and test_attention_bf16_io() */
static const KvCase kv_cases[] = {
  /* nq nk nh hd  bias  mask  heads  mm qb kt win0 */
  {5, 7, 2, 8, FALSE, FALSE, FALSE, 0, 0, 0, 0},
  {9, 37, 3, 16, TRUE, FALSE, FALSE, 0, 4, 8, 5},
  {9, 37, 3, 16, FALSE, TRUE, TRUE, 0, 4, 8, 2},
  {6, 20, 2, 3, TRUE, TRUE, FALSE, 0, 3, 5, 1}, /* odd hd */
  {4, 12, 2, 8, FALSE, TRUE, FALSE, 1, 0, 0, 0},        /* every key hidden */
  {4, 0, 2, 8, FALSE, FALSE, FALSE, 0, 0, 0, 0},        /* Nk = 0 */
  {33, 150, 2, 128, FALSE, FALSE, TRUE, 0, 0, 0, 7},    /* DiT hd */
  /* threaded (nq nk hd >= 65536) and several key tiles */
  {70, 300, 2, 64, TRUE, TRUE, TRUE, 0, 16, 64, 11},
};

static void
test_attention (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (kv_cases); i++)
    kv_case (&kv_cases[i]);
}

static void
test_attention_errors (void)
{
  LbStream *s = test_stream ();
  int64_t qs[3] = { 4, 2, 8 }, ks[3] = { 6, 2, 8 };
  g_autoptr (LbTensor) q = tensor_new (3, qs);
  g_autoptr (LbTensor) o = tensor_new (3, qs);
  g_autoptr (LbTensor) k32 = tensor_new (3, ks);
  g_autoptr (LbTensor) k16 = lb_tensor_new (LB_DTYPE_BF16, 3, ks);
  g_autoptr (LbTensor) kh = lb_tensor_new (LB_DTYPE_F16, 3, ks);
  g_autoptr (LbTensor) q16 = lb_tensor_new (LB_DTYPE_BF16, 3, qs);
  g_autoptr (LbTensor) qh = lb_tensor_new (LB_DTYPE_F16, 3, qs);
  g_autoptr (LbTensor) oh = lb_tensor_new (LB_DTYPE_F16, 3, qs);
  int64_t ks5[3] = { 5, 2, 8 };
  g_autoptr (LbTensor) o5 = lb_tensor_new (LB_DTYPE_BF16, 3, ks5);
  g_autoptr (LbTensor) v5 = lb_tensor_new (LB_DTYPE_BF16, 3, ks5);

  assert_op_error (lb_cpu_attention (s, q, kh, kh, NULL, NULL, 1.f, o, error),
      "attention: k is f16 [6, 2, 8], expected f32 or bf16 [*, 2, 8]");
  assert_op_error (lb_cpu_attention (s, q, k16, k32, NULL, NULL, 1.f, o,
          error), "attention: v is f32 [6, 2, 8], expected bf16 [6, 2, 8] "
      "(the dtype of k)");
  assert_op_error (lb_cpu_attention (s, q, k32, k16, NULL, NULL, 1.f, o,
          error), "attention: v is bf16 [6, 2, 8], expected f32 [6, 2, 8] "
      "(the dtype of k)");
  assert_op_error (lb_cpu_attention (s, q, k16, v5, NULL, NULL, 1.f, o,
          error), "attention: v is bf16 [5, 2, 8], expected [6, 2, 8]");
  /* q and out: f32 or bf16 (test_attention_bf16_io()), nothing else */
  assert_op_error (lb_cpu_attention (s, qh, k16, k16, NULL, NULL, 1.f, o,
          error), "attention: q is f16 [4, 2, 8], expected f32 or bf16 "
      "[*, *, *]");
  assert_op_error (lb_cpu_attention (s, q16, k16, k16, NULL, NULL, 1.f, oh,
          error), "attention: out is f16 [4, 2, 8], expected f32 or bf16 "
      "[4, 2, 8]");
  assert_op_error (lb_cpu_attention (s, q16, k16, k16, NULL, NULL, 1.f, o5,
          error), "attention: out is bf16 [5, 2, 8], expected [4, 2, 8]");
  /* a bf16 k with a strided last dim is refused like an f32 one */
  LbTensor kt;
  static const int perm[3] = { 0, 2, 1 };
  int64_t kts[3] = { 6, 8, 2 };
  g_autoptr (LbTensor) ktb = lb_tensor_new (LB_DTYPE_BF16, 3, kts);
  g_assert_true (lb_tensor_view_permute (&kt, ktb, perm));
  assert_op_error (lb_cpu_attention (s, q, &kt, &kt, NULL, NULL, 1.f, o,
          error), "attention: k is bf16 [6, 2, 8] with strides [16, 1, 2], "
      "expected unit stride on the last dimension");
}

/* ------------------------------------------------------------------------ */
/* attention with a bf16 q and a bf16 out                                   */
/* ------------------------------------------------------------------------ */

/* A [n, nh, hd] view of a fresh bf16 base: heads [nh, 2 nh) of a base
 * [n, 2 nh, hd] when @slice, else all of a base [n, nh, hd]; every element
 * of the base set to @fill. */
static LbTensor *
bf16_heads (int64_t n, int64_t nh, int64_t hd, gboolean slice,
    uint16_t fill, LbTensor * view)
{
  int64_t bs[3] = { n, slice ? 2 * nh : nh, hd };
  LbTensor *base = lb_tensor_new (LB_DTYPE_BF16, 3, bs);
  uint16_t *d = base->data;
  for (int64_t i = 0; i < lb_tensor_numel (base); i++)
    d[i] = fill;
  if (slice)
    g_assert_true (lb_tensor_view_narrow (view, base, 1, nh, nh));
  else
    lb_tensor_view (view, base);
  return base;
}

/* The attention op with q and out each f32 or bf16 (kernels/ops.h): a bf16
 * q gives the bits of an f32 q holding its values, a bf16 out holds every
 * f32 result rounded by lb_f32_to_bf16(), and the out base's elements
 * outside the view keep their bits; on a stream in LB_MATH_BF16 with hd
 * 64 or 128 (which rounds q itself) a bf16 q gives the f32 q's bits. */
static void
bf16_io_case (const KvCase * c)
{
  const int64_t nq = c->nq, nh = c->nh, hd = c->hd, nk = c->nk;
  int64_t qs[3] = { nq, nh, hd };
  int qb0, kt0;
  lb_cpu_attention_get_tiles (&qb0, &kt0);
  lb_cpu_attention_set_tiles (c->qb, c->kt);

  KvInputs in;
  kv_inputs_init (&in, c, nk, nh);
  const LbTensor *q = in.q, *k = in.k, *v = in.v, *b = in.b, *m = in.m;
  LbTensor q16, o16a, o16b;

  /* q16: q rounded to bf16 (a strided view when heads_slice), qw: its
   * values in f32 */
  g_autoptr (LbTensor) q16_base = bf16_heads (nq, nh, hd, c->heads_slice,
      0x7fc1, &q16);
  g_autoptr (LbTensor) qw = tensor_new (3, qs);
  for (int64_t i = 0; i < lb_tensor_numel (q); i++) {
    const uint16_t r = lb_f32_to_bf16 (((const float *) q->data)[i]);
    const int64_t t = i / (nh * hd), h = (i / hd) % nh, e = i % hd;
    ((uint16_t *) q16.data)[t * q16.stride[0] + h * q16.stride[1] + e] = r;
    ((float *) qw->data)[i] = lb_bf16_to_f32 (r);
  }

  const float scale = 1.0f / sqrtf ((float) hd);
  LbStream *s = test_stream ();
  g_autoptr (LbTensor) oref = poisoned (3, qs);
  g_autoptr (LbTensor) of = poisoned (3, qs);
  assert_op_ok (lb_cpu_attention (s, qw, k, v, b, m, scale, oref, error));
  assert_op_ok (lb_cpu_attention (s, &q16, k, v, b, m, scale, of, error));
  g_assert_cmpmem (of->data, lb_tensor_nbytes (of), oref->data,
      lb_tensor_nbytes (oref));

  /* bf16 out, from the f32 q and from the bf16 q */
  const uint16_t fill = 0x7fc3;
  g_autoptr (LbTensor) oa_base = bf16_heads (nq, nh, hd, c->heads_slice,
      fill, &o16a);
  g_autoptr (LbTensor) ob_base = bf16_heads (nq, nh, hd, c->heads_slice,
      fill, &o16b);
  assert_op_ok (lb_cpu_attention (s, qw, k, v, b, m, scale, &o16a, error));
  assert_op_ok (lb_cpu_attention (s, &q16, k, v, b, m, scale, &o16b, error));
  for (int64_t i = 0; i < lb_tensor_numel (oref); i++) {
    const uint16_t want = lb_f32_to_bf16 (((const float *) oref->data)[i]);
    if (at16 (&o16a, i) != want || at16 (&o16b, i) != want)
      g_error ("attention bf16 out [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
          ", %" G_GINT64_FORMAT "], %" G_GINT64_FORMAT " keys: element %"
          G_GINT64_FORMAT " is 0x%04x (f32 q) / 0x%04x (bf16 q), expected "
          "0x%04x", nq, nh, hd, nk, i, at16 (&o16a, i), at16 (&o16b, i), want);
  }
  if (c->heads_slice) {
    /* the other heads of the bases are untouched */
    LbTensor rest;
    g_assert_true (lb_tensor_view_narrow (&rest, oa_base, 1, 0, nh));
    for (int64_t i = 0; i < lb_tensor_numel (&rest); i++)
      g_assert_cmpuint (at16 (&rest, i), ==, fill);
  }

  /* LB_MATH_BF16 rounds an f32 q for hd 64 and 128: a bf16 q is then the
   * same operand */
  if (hd == 64 || hd == 128) {
    LbStream *s16 = lb_cpu_backend ()->stream_new (lb_cpu_backend (), 0,
        NULL);
    s16->math = LB_MATH_BF16;
    g_autoptr (LbTensor) o1 = poisoned (3, qs);
    g_autoptr (LbTensor) o2 = poisoned (3, qs);
    assert_op_ok (lb_cpu_attention (s16, q, k, v, b, m, scale, o1, error));
    assert_op_ok (lb_cpu_attention (s16, &q16, k, v, b, m, scale, o2, error));
    g_assert_cmpmem (o1->data, lb_tensor_nbytes (o1), o2->data,
        lb_tensor_nbytes (o2));
    s16->backend->stream_free (s16);
  }
  kv_inputs_clear (&in);
  lb_cpu_attention_set_tiles (qb0, kt0);
}

/* kv_cases[], q and out views sliced out of wider bases where the case
 * slices heads (win0 is not used) */
static void
test_attention_bf16_io (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (kv_cases); i++)
    bf16_io_case (&kv_cases[i]);
}

/* ------------------------------------------------------------------------ */
/* rms_norm_rope into bf16                                                  */
/* ------------------------------------------------------------------------ */

typedef enum
{
  Y_OWN,                        /* [n, nh, hd] contiguous */
  Y_CACHE,                      /* rows [3, 3 + n) of [n + 8, nh * hd] */
  Y_PACKED,                     /* [:, 1] of [n, 2, nh, hd] */
} YKind;

static void
y_view (LbTensor * y, YKind kind, LbTensor * base, int64_t n, int64_t nh,
    int64_t hd)
{
  LbTensor rows;
  int64_t s3[3] = { n, nh, hd };
  switch (kind) {
    case Y_OWN:
      lb_tensor_view (y, base);
      break;
    case Y_CACHE:
      g_assert_true (lb_tensor_view_narrow (&rows, base, 0, 3, n));
      g_assert_true (lb_tensor_view_reshape (y, &rows, 3, s3));
      break;
    case Y_PACKED:
      g_assert_true (lb_tensor_view_select (y, base, 1, 1));
      break;
  }
}

static LbTensor *
y_base (LbDType dtype, YKind kind, int64_t n, int64_t nh, int64_t hd)
{
  int64_t own[3] = { n, nh, hd }, cache[2] = { n + 8, nh * hd };
  int64_t packed[4] = { n, 2, nh, hd };
  LbTensor *t = kind == Y_OWN ? lb_tensor_new (dtype, 3, own) :
      kind == Y_CACHE ? lb_tensor_new (dtype, 2, cache) :
      lb_tensor_new (dtype, 4, packed);
  memset (t->data, 0xff, lb_tensor_nbytes (t)); /* NaN poison */
  return t;
}

static void
rope_case (int64_t gf, int64_t gh, int64_t gw, int64_t nh, int64_t hd,
    int64_t f0, int64_t r0, int64_t pad, YKind kind)
{
  LbStream *s = test_stream ();
  LbTensor *cs, *sn;
  lb_rope_tables_new ((int) hd, 64, 10000.0, &cs, &sn);
  g_autoptr (LbTensor) cos_t = cs;
  g_autoptr (LbTensor) sin_t = sn;
  const int64_t n = gf * gh * gw, d = nh * hd;
  int64_t xs[2] = { n, d + pad }, ws[1] = { d }, ys[3] = { n, nh, hd };
  g_autoptr (LbTensor) xp = rand_tensor (2, xs, -2, 3);
  g_autoptr (LbTensor) w = rand_tensor (1, ws, 0.5, 1.5);
  LbTensor x;
  lb_tensor_view_narrow (&x, xp, 1, 0, d);

  g_autoptr (LbTensor) y32 = poisoned (3, ys);
  assert_op_ok (lb_cpu_rms_norm_rope (s, &x, w, 1e-6f, cos_t, sin_t, gf, gh,
          gw, f0, r0, y32, error));
  g_autoptr (LbTensor) base = y_base (LB_DTYPE_BF16, kind, n, nh, hd);
  g_autoptr (LbTensor) before = lb_tensor_copy (base);
  LbTensor y16;
  y_view (&y16, kind, base, n, nh, hd);
  g_assert_cmpint (y16.dtype, ==, LB_DTYPE_BF16);
  assert_op_ok (lb_cpu_rms_norm_rope (s, &x, w, 1e-6f, cos_t, sin_t, gf, gh,
          gw, f0, r0, &y16, error));
  const float *r = y32->data;
  for (int64_t i = 0; i < n * d; i++) {
    g_assert_true (isfinite (r[i]));
    if (at16 (&y16, i) != lb_f32_to_bf16 (r[i]))
      g_error ("rms_norm_rope bf16 y (kind %d): element %" G_GINT64_FORMAT
          " is 0x%04x, lb_f32_to_bf16 (%.9g) is 0x%04x", kind, i,
          at16 (&y16, i), (double) r[i], lb_f32_to_bf16 (r[i]));
  }
  /* the slots outside the view keep their bits: mark the view's elements
   * in the copy taken before, then the two bases must be equal */
  LbTensor yb;
  y_view (&yb, kind, before, n, nh, hd);
  for (int64_t i = 0; i < n * d; i++) {
    int64_t off = 0, f = i;
    for (int k = 2; k >= 0; k--) {
      off += (f % yb.shape[k]) * yb.stride[k];
      f /= yb.shape[k];
    }
    ((uint16_t *) yb.data)[off] = at16 (&y16, i);
  }
  g_assert_true (memcmp (before->data, base->data,
          lb_tensor_nbytes (base)) == 0);
}

static void
test_rope (void)
{
  rope_case (1, 1, 1, 1, 2, 0, 0, 0, Y_OWN);
  rope_case (2, 3, 5, 2, 32, 3, 0, 5, Y_CACHE);
  rope_case (3, 5, 11, 5, 64, 0, 7, 3, Y_PACKED);
  rope_case (2, 4, 13, 4, 128, 21, 30, 0, Y_CACHE);
  /* threaded (n * d >= 32768) */
  rope_case (2, 6, 10, 8, 128, 1, 2, 4, Y_CACHE);
}

static void
test_rope_errors (void)
{
  LbStream *s = test_stream ();
  LbTensor *cs, *sn;
  lb_rope_tables_new (8, 16, 10000.0, &cs, &sn);
  g_autoptr (LbTensor) cos_t = cs;
  g_autoptr (LbTensor) sin_t = sn;
  int64_t xs[2] = { 6, 16 }, ys[3] = { 6, 2, 8 }, bad[3] = { 6, 2, 4 };
  int64_t odd[3] = { 6, 1, 16 };
  g_autoptr (LbTensor) x = rand_tensor (2, xs, -1, 1);
  g_autoptr (LbTensor) yh = lb_tensor_new (LB_DTYPE_F16, 3, ys);
  g_autoptr (LbTensor) yb = lb_tensor_new (LB_DTYPE_BF16, 3, bad);
  g_autoptr (LbTensor) y16 = lb_tensor_new (LB_DTYPE_BF16, 3, ys);
  g_autoptr (LbTensor) yo = lb_tensor_new (LB_DTYPE_BF16, 3, odd);

  assert_op_error (lb_cpu_rms_norm_rope (s, x, NULL, 1e-6f, cos_t, sin_t, 1,
          2, 3, 0, 0, yh, error), "rms_norm_rope: y is f16 [6, 2, 8], "
      "expected f32 or bf16 [6, *, *]");
  assert_op_error (lb_cpu_rms_norm_rope (s, x, NULL, 1e-6f, cos_t, sin_t, 1,
          2, 3, 0, 0, yb, error), "rms_norm_rope: y is bf16 [6, 2, 4], "
      "expected [6, H, hd] with H * hd = 16");
  assert_op_error (lb_cpu_rms_norm_rope (s, x, NULL, 1e-6f, cos_t, sin_t, 1,
          2, 3, 0, 0, yo, error), "rms_norm_rope: cos is f32 [16, 4], "
      "expected [*, 8]");
  assert_op_error (lb_cpu_rms_norm_rope (s, x, NULL, 1e-6f, cos_t, sin_t, 1,
          2, 2, 0, 0, y16, error), "rms_norm_rope: y is bf16 [6, 2, 8], "
      "expected [4, *, *] for a grid of 1 x 2 x 2");
  assert_op_error (lb_cpu_rms_norm_rope (s, x, NULL, 1e-6f, cos_t, sin_t, 1,
          2, 3, 16, 0, y16, error), "rms_norm_rope: cos is f32 [16, 4], too "
      "short for frames [16, 17), rows [0, 2), columns [0, 3)");
  /* an odd head dim is refused with the view's dtype in the message */
  int64_t ys3[3] = { 6, 16, 1 };
  g_autoptr (LbTensor) y1 = lb_tensor_new (LB_DTYPE_BF16, 3, ys3);
  assert_op_error (lb_cpu_rms_norm_rope (s, x, NULL, 1e-6f, cos_t, sin_t, 1,
          2, 3, 0, 0, y1, error), "rms_norm_rope: y is bf16 [6, 16, 1] with "
      "strides [16, 1, 1], expected [N, H, hd] with even hd and unit stride "
      "on hd");
}

/* ------------------------------------------------------------------------ */
/* copy                                                                     */
/* ------------------------------------------------------------------------ */

static void
test_copy_patterns (void)
{
  LbStream *s = test_stream ();
  int64_t n = 65536;
  g_autoptr (LbTensor) b = lb_tensor_new (LB_DTYPE_BF16, 1, &n);
  g_autoptr (LbTensor) f = poisoned (1, &n);
  g_autoptr (LbTensor) back = lb_tensor_new (LB_DTYPE_BF16, 1, &n);
  uint16_t *bd = b->data, *kd = back->data;
  for (int64_t i = 0; i < n; i++)
    bd[i] = (uint16_t) i;
  assert_op_ok (lb_cpu_copy (s, b, f, error));
  assert_op_ok (lb_cpu_copy (s, f, back, error));
  const float *fd = f->data;
  for (int64_t i = 0; i < n; i++) {
    /* exact widening: the pattern in the high half, zeros below */
    g_assert_cmphex (f2u (fd[i]), ==, (uint32_t) i << 16);
    /* back: the same pattern, a signalling NaN quietened */
    const gboolean nan = (i & 0x7fff) > 0x7f80;
    g_assert_cmphex (kd[i], ==, nan ? (i | 0x40) : i);
  }
  /* bf16 -> bf16: the bits, NaNs included */
  g_autoptr (LbTensor) same = lb_tensor_new (LB_DTYPE_BF16, 1, &n);
  assert_op_ok (lb_cpu_copy (s, b, same, error));
  g_assert_true (memcmp (same->data, b->data, lb_tensor_nbytes (b)) == 0);
}

static void
test_copy_round (void)
{
  LbStream *s = test_stream ();
  /* hand-computed patterns: value bits -> nearest even bf16 */
  static const uint32_t in[][2] = {
    {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80},       /* tie -> even */
    {0x3f818000u, 0x3f82}, {0x3f808001u, 0x3f81},       /* tie up, above */
    {0xbf80ffffu, 0xbf81}, {0x7f7fffffu, 0x7f80},       /* overflow: inf */
    {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80},       /* infinities */
    {0x00000001u, 0x0000}, {0x00008000u, 0x0000},       /* subnormal ties */
    {0x00018000u, 0x0002}, {0x80000000u, 0x8000},       /* -0 */
    {0x7fa00000u, 0x7fe0}, {0xffc00001u, 0xffc0},       /* NaNs quiet */
  };
  int64_t n = G_N_ELEMENTS (in);
  g_autoptr (LbTensor) x = tensor_new (1, &n);
  g_autoptr (LbTensor) y = lb_tensor_new (LB_DTYPE_BF16, 1, &n);
  for (int64_t i = 0; i < n; i++)
    ((float *) x->data)[i] = u2f (in[i][0]);
  assert_op_ok (lb_cpu_copy (s, x, y, error));
  for (int64_t i = 0; i < n; i++)
    g_assert_cmphex (((uint16_t *) y->data)[i], ==, in[i][1]);

  /* random floats of every magnitude: lb_f32_to_bf16 each */
  int64_t m = 4099;
  g_autoptr (LbTensor) xr = tensor_new (1, &m);
  g_autoptr (LbTensor) yr = lb_tensor_new (LB_DTYPE_BF16, 1, &m);
  for (int64_t i = 0; i < m; i++)
    ((float *) xr->data)[i] = u2f (g_test_rand_int ());
  assert_op_ok (lb_cpu_copy (s, xr, yr, error));
  for (int64_t i = 0; i < m; i++)
    g_assert_cmphex (((uint16_t *) yr->data)[i], ==,
        lb_f32_to_bf16 (((float *) xr->data)[i]));
}

/* f32 x [a, b, c] permuted to [c, a, b] -> bf16 contiguous, back into a
 * strided f32 view, a bf16 0-stride broadcast, and a 5-D bf16 -> bf16
 * with a gap. */
static void
test_copy_strided (void)
{
  LbStream *s = test_stream ();
  int64_t xs[3] = { 4, 3, 5 }, ys[3] = { 5, 4, 3 };
  static const int perm[3] = { 2, 0, 1 };
  g_autoptr (LbTensor) x = rand_tensor (3, xs, -100, 100);
  LbTensor xp;
  g_assert_true (lb_tensor_view_permute (&xp, x, perm));
  g_autoptr (LbTensor) y = lb_tensor_new (LB_DTYPE_BF16, 3, ys);
  assert_op_ok (lb_cpu_copy (s, &xp, y, error));
  for (int64_t i = 0; i < 60; i++)
    g_assert_cmphex (at16 (y, i), ==, lb_f32_to_bf16 (at (&xp, i)));

  /* bf16 -> every other column of an f32 [5, 4, 6] */
  int64_t zs[3] = { 5, 4, 6 };
  g_autoptr (LbTensor) z = poisoned (3, zs);
  LbTensor zv;
  int64_t zst[3] = { 24, 6, 2 };
  lb_tensor_view_init (&zv, LB_DTYPE_F32, z->data, LB_DEVICE_HOST, 3, ys, zst);
  assert_op_ok (lb_cpu_copy (s, y, &zv, error));
  for (int64_t i = 0; i < 60; i++) {
    g_assert_cmphex (f2u (at (&zv, i)), ==, (uint32_t) at16 (y, i) << 16);
    g_assert_true (isnan (((float *) z->data)[2 * i + 1]));
  }

  /* a bf16 row broadcast (stride 0) over 3 rows of f32 */
  int64_t rs[1] = { 7 }, bs[2] = { 3, 7 }, bst[2] = { 0, 1 };
  g_autoptr (LbTensor) row = rand_bf16 (1, rs, -1, 1);
  LbTensor bc;
  lb_tensor_view_init (&bc, LB_DTYPE_BF16, row->data, LB_DEVICE_HOST, 2, bs,
      bst);
  g_autoptr (LbTensor) out = poisoned (2, bs);
  assert_op_ok (lb_cpu_copy (s, &bc, out, error));
  for (int64_t i = 0; i < 21; i++)
    g_assert_cmphex (f2u (((float *) out->data)[i]), ==,
        (uint32_t) ((uint16_t *) row->data)[i % 7] << 16);

  /* 5-D bf16 -> bf16 into slots [1, 3) of dim 2 of a bigger tensor */
  int64_t s5[5] = { 2, 3, 2, 2, 3 }, b5[5] = { 2, 3, 4, 2, 3 };
  g_autoptr (LbTensor) src5 = rand_bf16 (5, s5, -5, 5);
  g_autoptr (LbTensor) dst5 = lb_tensor_new (LB_DTYPE_BF16, 5, b5);
  memset (dst5->data, 0xff, lb_tensor_nbytes (dst5));
  LbTensor d5;
  g_assert_true (lb_tensor_view_narrow (&d5, dst5, 2, 1, 2));
  assert_op_ok (lb_cpu_copy (s, src5, &d5, error));
  int64_t hits = 0;
  for (int64_t i = 0; i < lb_tensor_numel (dst5); i++) {
    const int64_t slot = (i / 6) % 4;
    const uint16_t v = ((uint16_t *) dst5->data)[i];
    if (slot == 1 || slot == 2) {
      hits++;
    } else {
      g_assert_cmphex (v, ==, 0xffff);
    }
  }
  g_assert_cmpint (hits, ==, lb_tensor_numel (src5));
  for (int64_t i = 0; i < lb_tensor_numel (src5); i++)
    g_assert_cmphex (at16 (&d5, i), ==, ((uint16_t *) src5->data)[i]);
}

static void
test_copy_errors (void)
{
  LbStream *s = test_stream ();
  int64_t a[2] = { 3, 4 }, b[2] = { 3, 5 };
  g_autoptr (LbTensor) f = tensor_new (2, a);
  g_autoptr (LbTensor) h = lb_tensor_new (LB_DTYPE_F16, 2, a);
  g_autoptr (LbTensor) d = lb_tensor_new (LB_DTYPE_F64, 2, a);
  g_autoptr (LbTensor) bf = lb_tensor_new (LB_DTYPE_BF16, 2, b);
  g_autoptr (LbTensor) b4 = lb_tensor_new (LB_DTYPE_BF16, 2, a);
  assert_op_error (lb_cpu_copy (s, f, h, error),
      "copy: y is f16 [3, 4], expected f32 or bf16 [3, 4]");
  assert_op_error (lb_cpu_copy (s, d, b4, error),
      "copy: x is f64 [3, 4], expected f32 or bf16 [3, 4]");
  assert_op_error (lb_cpu_copy (s, bf, f, error),
      "copy: x is bf16 [3, 5], expected [3, 4]");
  assert_op_error (lb_cpu_copy (s, NULL, b4, error),
      "copy: x is NULL, expected f32 or bf16 [3, 4]");
  assert_op_error (lb_cpu_copy (s, f, NULL, error),
      "copy: y is NULL, expected f32 or bf16 [1 to 5 dims]");
  /* the other strided ops stay f32, but fill (test-ops-strided.c
   * /ops/strided/fill-bf16) */
  assert_op_error (lb_cpu_accumulate (s, b4, f, error),
      "accumulate: x is bf16 [3, 4], expected f32 [3, 4]");
  assert_op_error (lb_cpu_fill (s, h, 0.f, error),
      "fill: y is f16 [3, 4], expected f32 or bf16");
}

/* ------------------------------------------------------------------------ */
/* on the emulated device                                                   */
/* ------------------------------------------------------------------------ */

static LbTensor *
fd_download (LbStream * ds, const LbTensor * d)
{
  g_autoptr (GError) err = NULL;
  LbTensor *h = lb_tensor_new (d->dtype, d->ndim, d->shape);
  g_assert_true (lb_tensor_download (ds, h, d, &err));
  g_assert_no_error (err);
  return h;
}

/* The one-rank DiT layer's cache path on @ops: the chunk's keys rotated
 * into bf16 slots [slot0, slot0 + n) of kc, values copied (rounded) into
 * the same slots of vc, then attention of q over the window [0, slot0 +
 * n) of both. */
static gboolean
cache_path (LbStream * st, const LbTensor * xk, const LbTensor * xv,
    const LbTensor * q, const LbTensor * cos_t, const LbTensor * sin_t,
    LbTensor * kc, LbTensor * vc, int64_t slot0, int64_t nh, int64_t hd,
    int64_t gh, int64_t gw, LbTensor * out, GError ** error)
{
  const LbOps *ops = lb_ops (st);
  const int64_t n = xk->shape[0];
  int64_t s3[3] = { n, nh, hd }, w3[3] = { slot0 + n, nh, hd };
  LbTensor krows, vrows, k3, kw, vw;
  lb_tensor_view_narrow (&krows, kc, 0, slot0, n);
  lb_tensor_view_narrow (&vrows, vc, 0, slot0, n);
  lb_tensor_view_reshape (&k3, &krows, 3, s3);
  lb_tensor_view_narrow (&kw, kc, 0, 0, slot0 + n);
  lb_tensor_view_reshape (&kw, &kw, 3, w3);
  lb_tensor_view_narrow (&vw, vc, 0, 0, slot0 + n);
  lb_tensor_view_reshape (&vw, &vw, 3, w3);
  return ops->rms_norm_rope (st, xk, NULL, 1e-6f, cos_t, sin_t, 1, gh, gw, 0,
      0, &k3, error) &&
      ops->copy (st, xv, &vrows, error) &&
      ops->attention (st, q, &kw, &vw, NULL, NULL, 0.125f, out, error);
}

static void
test_fakedev (void)
{
  g_autoptr (GError) err = NULL;
  const FakeDevStats st0 = fakedev_stats ();
  LbBackend *be = fakedev_backend ();
  LbStream *ds = be->stream_new (be, 0, &err);
  g_assert_no_error (err);
  ds->math = LB_MATH_BF16;
  LbStream *cs = test_stream ();

  const int64_t nh = 2, hd = 32, gh = 3, gw = 4, n = gh * gw, slot0 = 5;
  const int64_t cap = slot0 + n + 2;
  int64_t xs[2] = { n, nh * hd }, cshape[2] = { cap, nh * hd };
  int64_t qs[3] = { 7, nh, hd };
  LbTensor *c_, *s_;
  lb_rope_tables_new ((int) hd, 16, 10000.0, &c_, &s_);
  g_autoptr (LbTensor) cos_t = c_;
  g_autoptr (LbTensor) sin_t = s_;
  g_autoptr (LbTensor) kc = rand_bf16 (2, cshape, -1, 1);
  g_autoptr (LbTensor) vc = lb_tensor_copy (kc);

  g_autoptr (LbTensor) dcos = test_upload (ds, cos_t);
  g_autoptr (LbTensor) dsin = test_upload (ds, sin_t);
  g_autoptr (LbTensor) dkc = test_upload (ds, kc);
  g_autoptr (LbTensor) dvc = test_upload (ds, vc);
  g_autoptr (LbTensor) dxk = NULL;
  g_autoptr (LbTensor) dxv = NULL;
  g_autoptr (LbTensor) dq = NULL;
  g_autoptr (LbTensor) prev = NULL;
  g_autoptr (LbTensor) dout = lb_tensor_new_on (ds, LB_DTYPE_F32, 3, qs, &err);
  g_assert_no_error (err);
  g_autoptr (LbTensor) out = poisoned (3, qs);

  /* round 0: op by op; round 1: captured into a graph (nothing runs);
   * rounds 2, 3: new inputs uploaded, the graph replayed */
  LbGraph *graph = NULL;
  for (int round = 0; round < 4; round++) {
    g_autoptr (LbTensor) xk = rand_tensor (2, xs, -2, 2);
    g_autoptr (LbTensor) xv = rand_tensor (2, xs, -2, 2);
    g_autoptr (LbTensor) q = rand_tensor (3, qs, -2, 2);
    if (dxk == NULL) {
      dxk = test_upload (ds, xk);
      dxv = test_upload (ds, xv);
      dq = test_upload (ds, q);
    } else {
      g_assert_true (lb_tensor_upload (ds, dxk, xk, &err) &&
          lb_tensor_upload (ds, dxv, xv, &err) &&
          lb_tensor_upload (ds, dq, q, &err));
      g_assert_no_error (err);
    }
    /* the CPU on its own copy of the cache */
    g_assert_true (cache_path (cs, xk, xv, q, cos_t, sin_t, kc, vc, slot0,
            nh, hd, gh, gw, out, &err));
    g_assert_no_error (err);
    if (round == 0) {
      g_assert_true (cache_path (ds, dxk, dxv, dq, dcos, dsin, dkc, dvc,
              slot0, nh, hd, gh, gw, dout, &err));
    } else if (round == 1) {
      g_assert_true (be->graph_begin (ds, &err));
      g_assert_true (cache_path (ds, dxk, dxv, dq, dcos, dsin, dkc, dvc,
              slot0, nh, hd, gh, gw, dout, &err));
      graph = be->graph_end (ds, &err);
      g_assert_nonnull (graph);
      g_assert_true (be->graph_launch (ds, graph, &err));
    } else {
      g_assert_true (be->graph_launch (ds, graph, &err));
    }
    g_assert_no_error (err);
    g_autoptr (LbTensor) hk = fd_download (ds, dkc);
    g_autoptr (LbTensor) hv = fd_download (ds, dvc);
    g_autoptr (LbTensor) ho = fd_download (ds, dout);
    g_assert_cmpint (hk->dtype, ==, LB_DTYPE_BF16);
    g_assert_true (memcmp (hk->data, kc->data, lb_tensor_nbytes (kc)) == 0);
    g_assert_true (memcmp (hv->data, vc->data, lb_tensor_nbytes (vc)) == 0);
    g_assert_true (memcmp (ho->data, out->data, lb_tensor_nbytes (out)) == 0);
    /* a replay computed this round's inputs, not the captured round's */
    if (prev != NULL)
      g_assert_false (memcmp (ho->data, prev->data, lb_tensor_nbytes (out))
          == 0);
    g_clear_pointer (&prev, lb_tensor_free);
    prev = g_steal_pointer (&ho);
  }
  be->graph_free (ds, graph);
  FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.bad, ==, st0.bad);
  g_assert_cmpint (st.n_captures, ==, st0.n_captures + 1);
  g_assert_cmpint (st.n_launches, ==, st0.n_launches + 3);

  /* an f32 view of the bf16 cache's storage reaches twice as far: refused
   * (the residency check counts the view's own dtype) */
  LbTensor as32;
  lb_tensor_view_init (&as32, LB_DTYPE_F32, dkc->data, dkc->device, 2,
      cshape, NULL);
  g_autoptr (LbTensor) dall = lb_tensor_new_on (ds, LB_DTYPE_F32, 2, cshape,
      &err);
  g_assert_no_error (err);
  g_assert_false (lb_ops (ds)->copy (ds, &as32, dall, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "copy: wrong device");
  st = fakedev_stats ();
  g_assert_cmpint (st.bad, ==, st0.bad + 2);    /* the view, then the op */
  /* the same storage as bf16 is fine */
  LbTensor as16;
  lb_tensor_view_init (&as16, LB_DTYPE_BF16, dkc->data, dkc->device, 2,
      cshape, NULL);
  g_clear_error (&err);
  g_assert_true (lb_ops (ds)->copy (ds, &as16, dall, &err));
  g_assert_no_error (err);
  g_autoptr (LbTensor) hall = fd_download (ds, dall);
  for (int64_t i = 0; i < cap * nh * hd; i++)
    g_assert_cmphex (f2u (((float *) hall->data)[i]), ==,
        (uint32_t) ((uint16_t *) kc->data)[i] << 16);
  g_assert_cmpint (fakedev_stats ().bad, ==, st0.bad + 2);

  g_clear_pointer (&dxk, lb_tensor_free);
  g_clear_pointer (&dxv, lb_tensor_free);
  g_clear_pointer (&dq, lb_tensor_free);
  g_clear_pointer (&dall, lb_tensor_free);
  g_clear_pointer (&dout, lb_tensor_free);
  g_clear_pointer (&dkc, lb_tensor_free);
  g_clear_pointer (&dvc, lb_tensor_free);
  g_clear_pointer (&dcos, lb_tensor_free);
  g_clear_pointer (&dsin, lb_tensor_free);
  be->stream_free (ds);
  g_assert_cmpint (fakedev_stats ().live_blocks, ==, st0.live_blocks);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ops/kv-bf16/attention", test_attention);
  g_test_add_func ("/ops/kv-bf16/attention-errors", test_attention_errors);
  g_test_add_func ("/ops/kv-bf16/attention-bf16-q-out", test_attention_bf16_io);
  g_test_add_func ("/ops/kv-bf16/rms-norm-rope", test_rope);
  g_test_add_func ("/ops/kv-bf16/rms-norm-rope-errors", test_rope_errors);
  g_test_add_func ("/ops/kv-bf16/copy-patterns", test_copy_patterns);
  g_test_add_func ("/ops/kv-bf16/copy-round", test_copy_round);
  g_test_add_func ("/ops/kv-bf16/copy-strided", test_copy_strided);
  g_test_add_func ("/ops/kv-bf16/copy-errors", test_copy_errors);
  g_test_add_func ("/ops/kv-bf16/fakedev", test_fakedev);
  return g_test_run ();
}

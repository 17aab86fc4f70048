/* lingbot-gst: the fused DiT ops (norm_modulate, rms_norm_rope,
 * gated_residual_modulate) against the CPU op pairs they replace
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Each fused CPU op must be bit-identical to its pair (kernels/ops.h):
 * both run on copies of the same inputs whose output storage is poisoned
 * with the same NaN pattern, and the whole output storage (the gaps of a
 * strided view included) is compared with memcmp.  Shapes cover one
 * element, odd widths, row-strided inputs and outputs, broadcast and
 * per-row scale/shift/gate, no affine, in place, and for rms_norm_rope
 * outputs that are KV-cache slot ranges and head-strided views.  One case
 * per op is also checked against a float64 reference, and the argument
 * errors are checked word for word.
 */
#include "test-ops-common.h"

/* fused vs float64 reference: one float rounding of the norm output, then
 * the float modulation (rel_to_max with the denominator at least 1, as
 * test-ops.c does for modulate) */
#define TOL_REF 1e-6

static const LbOps *
cpu (void)
{
  return lb_cpu_backend ()->ops;
}

/* A contiguous copy of @t's whole storage (a contiguous base tensor). */
static LbTensor *
clone (const LbTensor * t)
{
  LbTensor *c = lb_tensor_new (t->dtype, t->ndim, t->shape);
  memcpy (c->data, t->data, lb_tensor_nbytes (t));
  return c;
}

/* @out: the view of @parent that @child is of @child_parent (same offset,
 * shape and strides). */
static void
same_view (LbTensor * out, const LbTensor * parent, const LbTensor * child,
    const LbTensor * child_parent)
{
  ptrdiff_t off = (const float *) child->data -
      (const float *) child_parent->data;
  lb_tensor_view_init (out, child->dtype, (float *) parent->data + off,
      parent->device, child->ndim, child->shape, child->stride);
}

/* [m, d] rows of random values: contiguous when @pad is 0, else columns
 * [1, 1 + d) of an [m, d + pad] tensor (a row-strided view).  Returns the
 * owning tensor; @view is the rows. */
static LbTensor *
rows_new (int64_t m, int64_t d, int64_t pad, double lo, double hi,
    LbTensor * view)
{
  int64_t shape[2] = { m, d + pad };
  LbTensor *b = rand_tensor (2, shape, lo, hi);
  g_assert_true (lb_tensor_view_narrow (view, b, 1, pad ? 1 : 0, d));
  return b;
}

/* Compares the whole storage of two same-shape base tensors bytewise. */
static void
assert_same_bytes (const char *what, const LbTensor * got,
    const LbTensor * want)
{
  g_assert_cmpuint (lb_tensor_nbytes (got), ==, lb_tensor_nbytes (want));
  const guint32 *a = got->data, *b = want->data;
  gsize n = lb_tensor_nbytes (got) / 4;
  for (gsize i = 0; i < n; i++)
    if (a[i] != b[i])
      g_error ("%s: float %" G_GSIZE_FORMAT " of %" G_GSIZE_FORMAT " is "
          "%08x (%.9g) fused, %08x (%.9g) unfused", what, i, n, a[i],
          ((const float *) got->data)[i], b[i],
          ((const float *) want->data)[i]);
  g_assert_true (memcmp (got->data, want->data, lb_tensor_nbytes (got)) == 0);
}

/* ------------------------------------------------------- norm_modulate */

typedef struct
{
  int64_t m, d;
  gboolean weight, bias;
  gboolean scale_rows, shift_rows;      /* [M, D] rather than [D] */
  int64_t xpad, ypad, spad;     /* row-strided views when > 0 */
  gboolean in_place;
} NormModCase;

static void
check_norm_modulate (const NormModCase * c)
{
  const int64_t m = c->m, d = c->d;
  LbTensor x, y, sc, sh, x2, y2;
  int64_t dshape[1] = { d };
  g_autoptr (LbTensor) xb = rows_new (m, d, c->xpad, -3, 5, &x);
  g_autoptr (LbTensor) w = rand_tensor (1, dshape, 0.5, 1.5);
  g_autoptr (LbTensor) b = rand_tensor (1, dshape, -1, 1);
  g_autoptr (LbTensor) scb = c->scale_rows ?
      rows_new (m, d, c->spad, -1, 1, &sc) : rand_tensor (1, dshape, -1, 1);
  g_autoptr (LbTensor) shb = c->shift_rows ?
      rows_new (m, d, c->spad, -1, 1, &sh) : rand_tensor (1, dshape, -1, 1);
  if (!c->scale_rows)
    lb_tensor_view (&sc, scb);
  if (!c->shift_rows)
    lb_tensor_view (&sh, shb);
  g_autoptr (LbTensor) yb = NULL;
  if (c->in_place) {
    y = x;
  } else {
    int64_t ys[2] = { m, d + c->ypad };
    yb = poisoned (2, ys);
    g_assert_true (lb_tensor_view_narrow (&y, yb, 1, c->ypad ? 1 : 0, d));
  }
  /* the pair's copies */
  g_autoptr (LbTensor) xb2 = clone (xb);
  g_autoptr (LbTensor) yb2 = yb ? clone (yb) : NULL;
  same_view (&x2, xb2, &x, xb);
  if (c->in_place)
    y2 = x2;
  else
    same_view (&y2, yb2, &y, yb);
  const float eps = 1e-6f;
  const LbTensor *wp = c->weight ? w : NULL, *bp = c->bias ? b : NULL;

  /* float64 reference of the fused formula, from the inputs */
  double *ref = g_new (double, m * d);
  for (int64_t i = 0; i < m; i++) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; j++)
      mean += at (&x, i * d + j);
    mean /= d;
    for (int64_t j = 0; j < d; j++)
      var += (at (&x, i * d + j) - mean) * (at (&x, i * d + j) - mean);
    var /= d;
    for (int64_t j = 0; j < d; j++) {
      double v = (at (&x, i * d + j) - mean) / sqrt (var + eps);
      if (wp)
        v *= ((const float *) w->data)[j];
      if (bp)
        v += ((const float *) b->data)[j];
      double s = at (&sc, c->scale_rows ? i * d + j : j);
      double h = at (&sh, c->shift_rows ? i * d + j : j);
      ref[i * d + j] = v * (1 + s) + h;
    }
  }

  assert_op_ok (cpu ()->norm_modulate (test_stream (), &x, wp, bp, eps, &sc,
          &sh, &y, error));
  assert_op_ok (lb_cpu_layer_norm (test_stream (), &x2, wp, bp, eps, &y2,
          error));
  assert_op_ok (lb_cpu_modulate (test_stream (), &y2, &sc, &sh, &y2, error));
  g_autofree char *what = g_strdup_printf ("norm_modulate [%" G_GINT64_FORMAT
      ", %" G_GINT64_FORMAT "] w%d b%d rows%d%d pads %" G_GINT64_FORMAT
      "/%" G_GINT64_FORMAT "/%" G_GINT64_FORMAT " in-place %d", m, d,
      c->weight, c->bias, c->scale_rows, c->shift_rows, c->xpad, c->ypad,
      c->spad, c->in_place);
  if (c->in_place)
    assert_same_bytes (what, xb, xb2);
  else
    assert_same_bytes (what, yb, yb2);
  assert_close_scaled (what, &y, ref, TOL_REF, 1.0);
  g_free (ref);
}

static void
test_norm_modulate (void)
{
  static const int64_t sizes[][2] = {
    {1, 1}, {7, 13}, {33, 257}, {5, 4099}, {64, 1536}, {200, 256},
  };
  for (guint k = 0; k < G_N_ELEMENTS (sizes); k++) {
    for (int v = 0; v < 8; v++) {
      NormModCase c = {
        .m = sizes[k][0],.d = sizes[k][1],
        .weight = v & 1,.bias = (v >> 1) & 1,
        .scale_rows = (v >> 2) & 1,.shift_rows = ((v >> 2) ^ v) & 1,
        .xpad = v % 3 == 1 ? 3 : 0,.ypad = v % 3 == 2 ? 5 : 0,
        .spad = v == 4 ? 2 : 0,.in_place = v == 7,
      };
      check_norm_modulate (&c);
    }
  }
}

/* An N-D contiguous x ([2, 3, D]) with 2-D y rows [6, D], as layer_norm
 * accepts. */
static void
test_norm_modulate_nd (void)
{
  int64_t xs[3] = { 2, 3, 40 }, ys[2] = { 6, 40 }, ds[1] = { 40 };
  g_autoptr (LbTensor) x = rand_tensor (3, xs, -2, 2);
  g_autoptr (LbTensor) sc = rand_tensor (2, ys, -1, 1);
  g_autoptr (LbTensor) sh = rand_tensor (1, ds, -1, 1);
  g_autoptr (LbTensor) y = poisoned (2, ys);
  g_autoptr (LbTensor) y2 = poisoned (2, ys);
  assert_op_ok (cpu ()->norm_modulate (test_stream (), x, NULL, NULL, 1e-5f,
          sc, sh, y, error));
  assert_op_ok (lb_cpu_layer_norm (test_stream (), x, NULL, NULL, 1e-5f, y2,
          error));
  assert_op_ok (lb_cpu_modulate (test_stream (), y2, sc, sh, y2, error));
  assert_same_bytes ("norm_modulate [2, 3, 40]", y, y2);
}

/* ------------------------------------------------------- rms_norm_rope */

typedef enum
{
  Y_CONTIGUOUS,                 /* its own [N, H, hd] */
  Y_IN_PLACE,                   /* x itself seen as [N, H, hd] */
  Y_CACHE,                      /* slots [slot0, slot0 + N) of [cap, H*hd] */
  Y_PACKED,                     /* k of a packed [N, 2, H, hd] (row stride) */
  Y_HEAD_GAPS,                  /* [N, H, hd] of [N, H, hd + 6] (head stride) */
} YKind;

typedef struct
{
  int64_t gf, gh, gw, nh, hd;
  int64_t f0, r0;
  gboolean weight;
  int64_t xpad;
  YKind y;
} RopeCase;

static void
check_rms_norm_rope (const RopeCase * c)
{
  const int64_t n = c->gf * c->gh * c->gw, d = c->nh * c->hd;
  const float eps = 1e-6f;
  LbTensor *cs, *sn;
  lb_rope_tables_new ((int) c->hd, 64, 10000.0, &cs, &sn);
  g_autoptr (LbTensor) cosv = cs;
  g_autoptr (LbTensor) sinv = sn;
  int64_t dshape[1] = { d };
  g_autoptr (LbTensor) w = rand_tensor (1, dshape, 0.5, 1.5);
  const LbTensor *wp = c->weight ? w : NULL;
  LbTensor x, y, x2, y2;
  g_autoptr (LbTensor) xb = rows_new (n, d, c->xpad, -2, 3, &x);
  g_autoptr (LbTensor) yb = NULL;
  int64_t heads[3] = { n, c->nh, c->hd };
  switch (c->y) {
    case Y_CONTIGUOUS:
      yb = poisoned (3, heads);
      lb_tensor_view (&y, yb);
      break;
    case Y_IN_PLACE:
      g_assert_cmpint (c->xpad, ==, 0);
      g_assert_true (lb_tensor_view_reshape (&y, xb, 3, heads));
      break;
    case Y_CACHE:{
      int64_t cshape[2] = { n + 9, d };
      LbTensor rows;
      yb = poisoned (2, cshape);
      g_assert_true (lb_tensor_view_narrow (&rows, yb, 0, 4, n));
      g_assert_true (lb_tensor_view_reshape (&y, &rows, 3, heads));
      break;
    }
    case Y_PACKED:{
      int64_t pshape[4] = { n, 2, c->nh, c->hd };
      yb = poisoned (4, pshape);
      g_assert_true (lb_tensor_view_select (&y, yb, 1, 1));
      break;
    }
    case Y_HEAD_GAPS:{
      int64_t gshape[3] = { n, c->nh, c->hd + 6 };
      yb = poisoned (3, gshape);
      g_assert_true (lb_tensor_view_narrow (&y, yb, 2, 2, c->hd));
      break;
    }
  }
  g_autoptr (LbTensor) xb2 = clone (xb);
  g_autoptr (LbTensor) yb2 = yb ? clone (yb) : NULL;
  same_view (&x2, xb2, &x, xb);
  if (c->y == Y_IN_PLACE)
    same_view (&y2, xb2, &y, xb);
  else
    same_view (&y2, yb2, &y, yb);

  /* float64 reference from the inputs (before an in-place call) */
  double *ref = g_new (double, n * d);
  {
    const int64_t half = c->hd / 2, hp = c->hd / 6;
    const int64_t tp = (c->hd - 4 * hp) / 2;
    const float *ct = cosv->data, *st = sinv->data;
    for (int64_t t = 0; t < n; t++) {
      double ss = 0;
      for (int64_t j = 0; j < d; j++)
        ss += (double) at (&x, t * d + j) * at (&x, t * d + j);
      double r = 1.0 / sqrt (ss / d + eps);
      int64_t pos[3] = { c->f0 + t / (c->gh * c->gw),
        c->r0 + (t / c->gw) % c->gh, t % c->gw
      };
      for (int64_t h = 0; h < c->nh; h++)
        for (int64_t p = 0; p < half; p++) {
          int64_t j0 = h * c->hd + 2 * p;
          int axis = p < tp ? 0 : (p < tp + hp ? 1 : 2);
          double co = ct[pos[axis] * half + p], si = st[pos[axis] * half + p];
          double a = at (&x, t * d + j0) * r, b = at (&x, t * d + j0 + 1) * r;
          if (wp) {
            a *= ((const float *) w->data)[j0];
            b *= ((const float *) w->data)[j0 + 1];
          }
          ref[t * d + j0] = a * co - b * si;
          ref[t * d + j0 + 1] = a * si + b * co;
        }
    }
  }

  assert_op_ok (cpu ()->rms_norm_rope (test_stream (), &x, wp, eps, cosv,
          sinv, c->gf, c->gh, c->gw, c->f0, c->r0, &y, error));
  /* the pair, as the DiT ran it: rms_norm into rows, rope_3d on them, then
   * (for a y that is not x) the exact copy into y */
  int64_t rshape[2] = { n, d };
  g_autoptr (LbTensor) tmp = poisoned (2, rshape);
  LbTensor tmp3;
  g_assert_true (lb_tensor_view_reshape (&tmp3, tmp, 3, heads));
  if (c->y == Y_IN_PLACE) {
    assert_op_ok (lb_cpu_rms_norm (test_stream (), &x2, wp, eps, &x2, error));
    assert_op_ok (lb_cpu_rope_3d (test_stream (), &y2, cosv, sinv, c->gf,
            c->gh, c->gw, c->f0, c->r0, error));
  } else {
    assert_op_ok (lb_cpu_rms_norm (test_stream (), &x2, wp, eps, tmp, error));
    assert_op_ok (lb_cpu_rope_3d (test_stream (), &tmp3, cosv, sinv, c->gf,
            c->gh, c->gw, c->f0, c->r0, error));
    assert_op_ok (lb_cpu_copy (test_stream (), &tmp3, &y2, error));
  }
  static const char *kinds[] = { "contiguous", "in place", "cache slots",
    "packed", "head gaps"
  };
  g_autofree char *what = g_strdup_printf ("rms_norm_rope grid %"
      G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT " H %"
      G_GINT64_FORMAT " hd %" G_GINT64_FORMAT " w%d xpad %" G_GINT64_FORMAT
      " y %s", c->gf, c->gh, c->gw, c->nh, c->hd, c->weight, c->xpad,
      kinds[c->y]);
  if (c->y == Y_IN_PLACE)
    assert_same_bytes (what, xb, xb2);
  else
    assert_same_bytes (what, yb, yb2);
  /* the inputs of a not-in-place call are untouched */
  if (c->y != Y_IN_PLACE)
    assert_same_bytes ("rms_norm_rope x", xb, xb2);
  assert_close (what, &y, ref, TOL_REF);
  g_free (ref);
}

static void
test_rms_norm_rope (void)
{
  static const RopeCase cases[] = {
    {1, 1, 1, 1, 2, 0, 0, TRUE, 0, Y_CONTIGUOUS},
    {1, 1, 1, 1, 2, 0, 0, FALSE, 0, Y_IN_PLACE},
    {2, 3, 5, 2, 32, 3, 0, TRUE, 0, Y_CONTIGUOUS},
    {2, 3, 5, 2, 32, 3, 0, TRUE, 0, Y_IN_PLACE},
    {2, 3, 5, 2, 32, 0, 2, FALSE, 4, Y_CACHE},
    {3, 4, 5, 4, 128, 10, 4, TRUE, 0, Y_CACHE},
    {3, 4, 5, 4, 128, 10, 4, TRUE, 3, Y_PACKED},
    {2, 2, 3, 3, 64, 7, 1, FALSE, 0, Y_HEAD_GAPS},
    {4, 6, 7, 3, 24, 20, 9, TRUE, 1, Y_HEAD_GAPS},
    {1, 12, 16, 2, 128, 30, 0, TRUE, 0, Y_IN_PLACE},    /* parallel rows */
    {2, 8, 12, 1, 6, 0, 0, TRUE, 0, Y_CONTIGUOUS},      /* hd 6: 1/1/1 */
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    check_rms_norm_rope (&cases[i]);
}

/* --------------------------------------------- gated_residual_modulate */

typedef struct
{
  int64_t m, d;
  int gate;                     /* 0: NULL, 1: [D], 2: [M, D] */
  gboolean scale_rows, shift_rows;
  int64_t xpad, ypad;
} GrmCase;

/* The inputs of a GrmCase: x (rows of xb) and its copy x2 (of xb2), y,
 * the gate (gp: NULL when the case has none), scale and shift. */
typedef struct
{
  LbTensor x, y, x2;
  LbTensor *xb, *yb, *xb2, *gate, *sc, *sh;
  const LbTensor *gp;
} GrmInputs;

static void
grm_inputs_init (GrmInputs * in, const GrmCase * c)
{
  const int64_t m = c->m, d = c->d;
  int64_t dshape[1] = { d }, mshape[2] = { m, d };
  in->xb = rows_new (m, d, c->xpad, -4, 4, &in->x);
  in->yb = rows_new (m, d, c->ypad, -2, 2, &in->y);
  in->gate = c->gate == 2 ? rand_tensor (2, mshape, -1, 1) :
      rand_tensor (1, dshape, -1, 1);
  in->sc = c->scale_rows ? rand_tensor (2, mshape, -1, 1) :
      rand_tensor (1, dshape, -1, 1);
  in->sh = c->shift_rows ? rand_tensor (2, mshape, -1, 1) :
      rand_tensor (1, dshape, -1, 1);
  in->gp = c->gate ? in->gate : NULL;
  in->xb2 = clone (in->xb);
  same_view (&in->x2, in->xb2, &in->x, in->xb);
}

static void
grm_inputs_clear (GrmInputs * in)
{
  LbTensor **t[] = { &in->xb, &in->yb, &in->xb2, &in->gate, &in->sc,
    &in->sh
  };
  for (guint i = 0; i < G_N_ELEMENTS (t); i++)
    g_clear_pointer (t[i], lb_tensor_free);
}

/* Variant @v (0..11) of a shape: the gate absent, broadcast or per row,
 * scale and shift broadcast or per row, some x and y row-strided. */
static GrmCase
grm_case (const int64_t size[2], int v)
{
  GrmCase c = { 0 };
  c.m = size[0];
  c.d = size[1];
  c.gate = v % 3;
  c.scale_rows = (v / 3) & 1;
  c.shift_rows = (v / 6) & 1;
  c.xpad = v % 4 == 1 ? 2 : 0;
  c.ypad = v % 5 == 2 ? 7 : 0;
  return c;
}

static void
check_grm (const GrmCase * c)
{
  const int64_t m = c->m, d = c->d;
  GrmInputs in;
  grm_inputs_init (&in, c);
  LbTensor x = in.x, y = in.y, x2 = in.x2;
  LbTensor *gate = in.gate, *sc = in.sc, *sh = in.sh;
  LbTensor *xb = in.xb, *xb2 = in.xb2;
  const LbTensor *gp = in.gp;

  double *ref = g_new (double, m * d);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < d; j++) {
      double g = gp ? at (gate, c->gate == 2 ? i * d + j : j) : 1.0;
      double r = at (&x, i * d + j) + g * at (&y, i * d + j);
      ref[i * d + j] = r * (1 + at (sc, c->scale_rows ? i * d + j : j)) +
          at (sh, c->shift_rows ? i * d + j : j);
    }

  assert_op_ok (cpu ()->gated_residual_modulate (test_stream (), &x, &y, gp,
          sc, sh, error));
  assert_op_ok (lb_cpu_gated_residual (test_stream (), &x2, &y, gp, error));
  assert_op_ok (lb_cpu_modulate (test_stream (), &x2, sc, sh, &x2, error));
  g_autofree char *what = g_strdup_printf ("gated_residual_modulate [%"
      G_GINT64_FORMAT ", %" G_GINT64_FORMAT "] gate %d rows %d%d pads %"
      G_GINT64_FORMAT "/%" G_GINT64_FORMAT, m, d, c->gate, c->scale_rows,
      c->shift_rows, c->xpad, c->ypad);
  assert_same_bytes (what, xb, xb2);
  /* x + g*y can cancel: rounding is relative to the terms (|x| <= 4) */
  assert_close_scaled (what, &x, ref, TOL_REF, 8.0);
  g_free (ref);
  grm_inputs_clear (&in);
}

static void
test_gated_residual_modulate (void)
{
  static const int64_t sizes[][2] = {
    {1, 1}, {9, 31}, {129, 640}, {64, 1000}, {300, 130},
  };
  for (guint k = 0; k < G_N_ELEMENTS (sizes); k++)
    for (int v = 0; v < 12; v++) {
      const GrmCase c = grm_case (sizes[k], v);
      check_grm (&c);
    }
}

/* ---------------------------------------------- residual_norm_modulate */

/* residual_norm_modulate against gated_residual then norm_modulate on
 * copies: x and out byte for byte (out f32 or bf16, the gaps of strided
 * views included), with and without the affine, the gate broadcast or
 * per row or absent, scale/shift per row or broadcast. */
static void
check_rnm (const GrmCase * c, gboolean affine, gboolean out16)
{
  const int64_t m = c->m, d = c->d;
  int64_t dshape[1] = { d }, oshape[2] = { m, d + 3 };
  GrmInputs in;
  grm_inputs_init (&in, c);
  LbTensor x = in.x, y = in.y, x2 = in.x2, o, o2;
  g_autoptr (LbTensor) w = rand_tensor (1, dshape, 0.5, 1.5);
  g_autoptr (LbTensor) bias = rand_tensor (1, dshape, -1, 1);
  const LbTensor *gp = in.gp, *sc = in.sc, *sh = in.sh;
  /* out: columns [2, 2 + d) of [m, d + 3], poisoned */
  g_autoptr (LbTensor) ob = lb_tensor_new (out16 ? LB_DTYPE_BF16 :
      LB_DTYPE_F32, 2, oshape);
  memset (ob->data, 0xff, lb_tensor_nbytes (ob));
  g_autoptr (LbTensor) ob2 = clone (ob);
  g_assert_true (lb_tensor_view_narrow (&o, ob, 1, 2, d));
  g_assert_true (lb_tensor_view_narrow (&o2, ob2, 1, 2, d));

  assert_op_ok (cpu ()->residual_norm_modulate (test_stream (), &x, &y, gp,
          affine ? w : NULL, affine ? bias : NULL, 1e-6f, sc, sh, &o, error));
  assert_op_ok (lb_cpu_gated_residual (test_stream (), &x2, &y, gp, error));
  assert_op_ok (lb_cpu_norm_modulate (test_stream (), &x2, affine ? w : NULL,
          affine ? bias : NULL, 1e-6f, sc, sh, &o2, error));
  g_autofree char *what = g_strdup_printf ("residual_norm_modulate [%"
      G_GINT64_FORMAT ", %" G_GINT64_FORMAT "] gate %d rows %d%d pads %"
      G_GINT64_FORMAT "/%" G_GINT64_FORMAT "%s%s", m, d, c->gate,
      c->scale_rows, c->shift_rows, c->xpad, c->ypad,
      affine ? " affine" : "", out16 ? " bf16 out" : "");
  assert_same_bytes (what, in.xb, in.xb2);
  assert_same_bytes (what, ob, ob2);
  grm_inputs_clear (&in);
}

static void
test_residual_norm_modulate (void)
{
  static const int64_t sizes[][2] = {
    {1, 1}, {9, 31}, {129, 640}, {64, 1000}, {3, 20000},
  };
  for (guint k = 0; k < G_N_ELEMENTS (sizes); k++)
    for (int v = 0; v < 12; v++) {
      const GrmCase c = grm_case (sizes[k], v);
      check_rnm (&c, v % 2, (v / 2) % 2);
    }
}

/* -------------------------------------------------------------- errors */

static void
test_errors (void)
{
  LbStream *s = test_stream ();
  const LbOps *o = cpu ();
  int64_t s48[2] = { 4, 8 }, s38[2] = { 3, 8 }, s58[2] = { 5, 8 };
  int64_t s49[2] = { 4, 9 }, s7[1] = { 7 }, s8[1] = { 8 };
  g_autoptr (LbTensor) x = rand_tensor (2, s48, -1, 1);
  g_autoptr (LbTensor) y = rand_tensor (2, s48, -1, 1);
  g_autoptr (LbTensor) v8 = rand_tensor (1, s8, -1, 1);
  g_autoptr (LbTensor) v7 = rand_tensor (1, s7, -1, 1);
  g_autoptr (LbTensor) r38 = rand_tensor (2, s38, -1, 1);
  g_autoptr (LbTensor) r58 = rand_tensor (2, s58, -1, 1);
  g_autoptr (LbTensor) r49 = rand_tensor (2, s49, -1, 1);

  /* norm_modulate: x, y, weight, bias, scale, shift */
  assert_op_error (o->norm_modulate (s, x, v7, NULL, 1e-6f, v8, v8, y, error),
      "norm_modulate: weight is f32 [7], expected [8]");
  assert_op_error (o->norm_modulate (s, x, NULL, v7, 1e-6f, v8, v8, y, error),
      "norm_modulate: bias is f32 [7], expected [8]");
  assert_op_error (o->norm_modulate (s, x, NULL, NULL, 1e-6f, r38, v8, y,
          error), "norm_modulate: scale is f32 [3, 8], expected [8] or "
      "[4, 8]");
  assert_op_error (o->norm_modulate (s, x, NULL, NULL, 1e-6f, v8, NULL, y,
          error), "norm_modulate: shift is NULL, expected f32 [..., 8]");
  assert_op_error (o->norm_modulate (s, x, NULL, NULL, 1e-6f, v8, v8, r58,
          error), "norm_modulate: y is f32 [5, 8], expected [4, 8]");
  assert_op_error (o->norm_modulate (s, x, NULL, NULL, 1e-6f, v8, v8, r49,
          error), "norm_modulate: y is f32 [4, 9], expected f32 [..., 8]");
  /* a tensor labelled as device memory */
  LbTensor dev;
  lb_tensor_view_init (&dev, LB_DTYPE_F32, x->data,
      (LbDevice) { LB_DEVICE_CUDA, 0 }, 2, x->shape, x->stride);
  assert_op_error (o->norm_modulate (s, &dev, NULL, NULL, 1e-6f, v8, v8, y,
          error), "norm_modulate: x is on device cuda:0, expected the CPU");

  /* gated_residual_modulate: x, y, gate, scale, shift */
  assert_op_error (o->gated_residual_modulate (s, x, r49, NULL, v8, v8,
          error), "gated_residual_modulate: y is f32 [4, 9], expected "
      "f32 [..., 8]");
  assert_op_error (o->gated_residual_modulate (s, x, y, r38, v8, v8, error),
      "gated_residual_modulate: gate is f32 [3, 8], expected [8] or [4, 8]");
  assert_op_error (o->gated_residual_modulate (s, x, y, v8, NULL, v8, error),
      "gated_residual_modulate: scale is NULL, expected f32 [..., 8]");
  assert_op_error (o->gated_residual_modulate (s, x, y, NULL, v8, r58,
          error), "gated_residual_modulate: shift is f32 [5, 8], expected "
      "[8] or [4, 8]");
  assert_op_error (o->gated_residual_modulate (s, x, y, NULL, v8, v7, error),
      "gated_residual_modulate: shift is f32 [7], expected f32 [..., 8]");

  /* residual_norm_modulate: x, y, gate, weight, bias, scale, shift, out */
  int64_t s48b[2] = { 4, 8 };
  g_autoptr (LbTensor) o16 = lb_tensor_new_zeros (LB_DTYPE_F16, 2, s48b);
  assert_op_error (o->residual_norm_modulate (s, x, r49, NULL, NULL, NULL,
          1e-6f, v8, v8, y, error), "residual_norm_modulate: y is f32 [4, "
      "9], expected f32 [..., 8]");
  assert_op_error (o->residual_norm_modulate (s, x, y, v7, NULL, NULL,
          1e-6f, v8, v8, r58, error), "residual_norm_modulate: gate is f32 "
      "[7], expected f32 [..., 8]");
  assert_op_error (o->residual_norm_modulate (s, x, y, NULL, v7, NULL,
          1e-6f, v8, v8, r58, error), "residual_norm_modulate: weight is f32 "
      "[7], expected [8]");
  assert_op_error (o->residual_norm_modulate (s, x, y, NULL, NULL, NULL,
          1e-6f, r38, v8, r58, error), "residual_norm_modulate: scale is f32 "
      "[3, 8], expected [8] or [4, 8]");
  assert_op_error (o->residual_norm_modulate (s, x, y, NULL, NULL, NULL,
          1e-6f, v8, v8, r58, error), "residual_norm_modulate: out is f32 "
      "[5, 8], expected [4, 8]");
  assert_op_error (o->residual_norm_modulate (s, x, y, NULL, NULL, NULL,
          1e-6f, v8, v8, o16, error), "residual_norm_modulate: out is f16 "
      "[4, 8], expected f32 or bf16 [..., 8]");

  /* rms_norm_rope: x [6, 16] = grid 1 x 2 x 3, H 2, hd 8, tables P 8 */
  LbTensor *cs, *sn;
  lb_rope_tables_new (8, 8, 10000.0, &cs, &sn);
  g_autoptr (LbTensor) cosv = cs;
  g_autoptr (LbTensor) sinv = sn;
  int64_t xs[2] = { 6, 16 }, x3[3] = { 6, 2, 8 }, ys3[3] = { 6, 3, 8 };
  int64_t y5[3] = { 5, 2, 8 }, y1[3] = { 6, 16, 1 }, w15[1] = { 15 };
  int64_t w16[1] = { 16 }, xw[2] = { 6, 32 }, c3[2] = { 8, 3 };
  g_autoptr (LbTensor) rx = rand_tensor (2, xs, -1, 1);
  g_autoptr (LbTensor) rx3 = rand_tensor (3, x3, -1, 1);
  g_autoptr (LbTensor) rxw = rand_tensor (2, xw, -1, 1);
  g_autoptr (LbTensor) ry = rand_tensor (3, x3, -1, 1);
  g_autoptr (LbTensor) ry3 = rand_tensor (3, ys3, -1, 1);
  g_autoptr (LbTensor) ry5 = rand_tensor (3, y5, -1, 1);
  g_autoptr (LbTensor) ry1 = rand_tensor (3, y1, -1, 1);
  g_autoptr (LbTensor) rw15 = rand_tensor (1, w15, -1, 1);
  g_autoptr (LbTensor) rw16 = rand_tensor (1, w16, -1, 1);
  g_autoptr (LbTensor) c83 = rand_tensor (2, c3, -1, 1);
  LbTensor xcols;               /* [6, 16] with column stride 2 */
  int64_t cst[2] = { 32, 2 };
  lb_tensor_view_init (&xcols, LB_DTYPE_F32, rxw->data, LB_DEVICE_HOST, 2, xs,
      cst);
  assert_op_ok (o->rms_norm_rope (s, rx, rw16, 1e-6f, cosv, sinv, 1, 2, 3, 0,
          0, ry, error));
  assert_op_error (o->rms_norm_rope (s, rx3, rw16, 1e-6f, cosv, sinv, 1, 2,
          3, 0, 0, ry, error), "rms_norm_rope: x is f32 [6, 2, 8], expected "
      "[*, *]");
  assert_op_error (o->rms_norm_rope (s, &xcols, rw16, 1e-6f, cosv, sinv, 1,
          2, 3, 0, 0, ry, error), "rms_norm_rope: x is f32 [6, 16] with "
      "strides [32, 2], expected a contiguous tensor or a 2-D view with unit "
      "column stride");
  assert_op_error (o->rms_norm_rope (s, rx, rw15, 1e-6f, cosv, sinv, 1, 2, 3,
          0, 0, ry, error), "rms_norm_rope: weight is f32 [15], expected "
      "[16]");
  assert_op_error (o->rms_norm_rope (s, rx, rw16, 1e-6f, cosv, sinv, 1, 2, 3,
          0, 0, ry5, error), "rms_norm_rope: y is f32 [5, 2, 8], expected "
      "[6, *, *]");
  assert_op_error (o->rms_norm_rope (s, rx, rw16, 1e-6f, cosv, sinv, 1, 2, 3,
          0, 0, ry3, error), "rms_norm_rope: y is f32 [6, 3, 8], expected "
      "[6, H, hd] with H * hd = 16");
  assert_op_error (o->rms_norm_rope (s, rx, rw16, 1e-6f, cosv, sinv, 1, 2, 3,
          0, 0, ry1, error), "rms_norm_rope: y is f32 [6, 16, 1] with "
      "strides [16, 1, 1], expected [N, H, hd] with even hd and unit stride "
      "on hd");
  assert_op_error (o->rms_norm_rope (s, rx, rw16, 1e-6f, c83, sinv, 1, 2, 3,
          0, 0, ry, error), "rms_norm_rope: cos is f32 [8, 3], expected "
      "[*, 4]");
  assert_op_error (o->rms_norm_rope (s, rx, rw16, 1e-6f, cosv, NULL, 1, 2, 3,
          0, 0, ry, error), "rms_norm_rope: sin is NULL, expected f32 "
      "[8, 4]");
  assert_op_error (o->rms_norm_rope (s, rx, rw16, 1e-6f, cosv, sinv, 1, 2, 2,
          0, 0, ry, error), "rms_norm_rope: y is f32 [6, 2, 8], expected "
      "[4, *, *] for a grid of 1 x 2 x 2");
  assert_op_error (o->rms_norm_rope (s, rx, rw16, 1e-6f, cosv, sinv, 1, 2, 3,
          8, 0, ry, error), "rms_norm_rope: cos is f32 [8, 4], too short for "
      "frames [8, 9), rows [0, 2), columns [0, 3)");
  assert_op_error (o->rms_norm_rope (s, rx, rw16, 1e-6f, cosv, sinv, 1, 2, 3,
          0, 7, ry, error), "rms_norm_rope: cos is f32 [8, 4], too short for "
      "frames [0, 1), rows [7, 9), columns [0, 3)");
  /* rope_3d keeps its own messages (the check it shares) */
  assert_op_error (o->rope_3d (s, ry, cosv, sinv, 1, 2, 2, 0, 0, error),
      "rope_3d: x is f32 [6, 2, 8], expected [4, *, *] for a grid of "
      "1 x 2 x 2");
}

/* Empty operands are accepted and write nothing. */
static void
test_empty (void)
{
  LbStream *s = test_stream ();
  int64_t e2[2] = { 0, 8 }, d8[1] = { 8 }, e3[3] = { 0, 2, 4 };
  g_autoptr (LbTensor) x = tensor_new (2, e2);
  g_autoptr (LbTensor) y = tensor_new (2, e2);
  g_autoptr (LbTensor) v = rand_tensor (1, d8, -1, 1);
  g_autoptr (LbTensor) y3 = tensor_new (3, e3);
  LbTensor *cs, *sn;
  lb_rope_tables_new (4, 8, 10000.0, &cs, &sn);
  g_autoptr (LbTensor) cosv = cs;
  g_autoptr (LbTensor) sinv = sn;
  assert_op_ok (cpu ()->norm_modulate (s, x, NULL, NULL, 1e-6f, v, v, y,
          error));
  assert_op_ok (cpu ()->gated_residual_modulate (s, x, y, v, v, v, error));
  assert_op_ok (cpu ()->rms_norm_rope (s, x, v, 1e-6f, cosv, sinv, 0, 2, 3,
          0, 0, y3, error));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_assert_null (lb_ops_first_missing (lb_cpu_backend ()->ops));
  g_test_add_func ("/ops/fused/norm-modulate", test_norm_modulate);
  g_test_add_func ("/ops/fused/norm-modulate-nd", test_norm_modulate_nd);
  g_test_add_func ("/ops/fused/rms-norm-rope", test_rms_norm_rope);
  g_test_add_func ("/ops/fused/residual-norm-modulate",
      test_residual_norm_modulate);
  g_test_add_func ("/ops/fused/gated-residual-modulate",
      test_gated_residual_modulate);
  g_test_add_func ("/ops/fused/errors", test_errors);
  g_test_add_func ("/ops/fused/empty", test_empty);
  return g_test_run ();
}

/* lingbot-gst: CPU elementwise ops (activations, add/mul/scale)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/cpu/cpu-internal.h"

#include <math.h>

/* Elements per parallel work item when the operands are contiguous. */
#define SPAN 16384

typedef struct
{
  float alpha, beta;
} Params;

/* y[0..n) = f(a[0..n), b[0..n)). */
typedef void (*SpanFunc) (const float *a, const float *b, float *y,
    int64_t n, const Params * p);

/* the activations run the row kernels of lb_cpu_isa()'s variant
 * (rows-item.h) */
static void
span_gelu_tanh (const float *a, const float *b, float *y, int64_t n,
    const Params * p)
{
  lb_cpu_row_kernels ()->gelu_tanh (a, y, n);
}

static void
span_silu (const float *a, const float *b, float *y, int64_t n,
    const Params * p)
{
  lb_cpu_row_kernels ()->silu (a, y, n);
}

static void
span_add (const float *a, const float *b, float *y, int64_t n, const Params * p)
{
  for (int64_t i = 0; i < n; i++)
    y[i] = a[i] + b[i];
}

static void
span_mul (const float *a, const float *b, float *y, int64_t n, const Params * p)
{
  for (int64_t i = 0; i < n; i++)
    y[i] = a[i] * b[i];
}

static void
span_scale (const float *a, const float *b, float *y, int64_t n,
    const Params * p)
{
  const float alpha = p->alpha, beta = p->beta;
  for (int64_t i = 0; i < n; i++)
    y[i] = alpha * a[i] + beta;
}

/* Runs @f over M rows of D.  @bld is 0 when b is one broadcast row.  When
 * every operand is dense (or there is one row) the rows are fused into one
 * vector and split in SPAN-sized pieces so that [1, N] tensors still use
 * every core. */
static void
run (SpanFunc f, const float *a, int64_t ald, const float *b, int64_t bld,
    float *y, int64_t yld, int64_t m, int64_t d, const Params * p)
{
  gboolean dense = ald == d && yld == d && (b == NULL || bld == d);
  if (dense || m == 1) {
    int64_t n = m * d;
    int64_t pieces = (n + SPAN - 1) / SPAN;
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (int64_t i = 0; i < pieces; i++) {
      int64_t o = i * SPAN, len = MIN (SPAN, n - o);
      f (a + o, b ? b + o : NULL, y + o, len, p);
    }
  } else {
#pragma omp parallel for schedule(static) if (m * d >= SPAN)
    for (int64_t i = 0; i < m; i++)
      f (a + i * ald, b ? b + i * bld : NULL, y + i * yld, d, p);
  }
}

/* @f over a span of n into a bf16 y: through a stack block of
 * LB_CPU_BF16_BLOCK floats, each value rounded by lb_f32_to_bf16().  The
 * blocks start at multiples of the block from the span's start, so the
 * row kernels give every element the value they give it in f32. */
static void
span_to_bf16 (SpanFunc f, const float *a, uint16_t * y, int64_t n,
    const Params * p)
{
  float buf[LB_CPU_BF16_BLOCK];
  for (int64_t o = 0; o < n; o += LB_CPU_BF16_BLOCK) {
    const int64_t len = MIN (LB_CPU_BF16_BLOCK, n - o);
    f (a + o, NULL, buf, len, p);
    lb_cpu_round_bf16 (buf, y + o, len);
  }
}

/* run() of a unary @f into a bf16 y: the same split into spans. */
static void
run_to_bf16 (SpanFunc f, const float *a, int64_t ald, uint16_t * y,
    int64_t yld, int64_t m, int64_t d, const Params * p)
{
  if ((ald == d && yld == d) || m == 1) {
    const int64_t n = m * d, pieces = (n + SPAN - 1) / SPAN;
#pragma omp parallel for schedule(static) if (pieces > 1)
    for (int64_t i = 0; i < pieces; i++) {
      int64_t o = i * SPAN;
      span_to_bf16 (f, a + o, y + o, MIN (SPAN, n - o), p);
    }
  } else {
#pragma omp parallel for schedule(static) if (m * d >= SPAN)
    for (int64_t i = 0; i < m; i++)
      span_to_bf16 (f, a + i * ald, y + i * yld, d, p);
  }
}

static gboolean
unary (const char *op, SpanFunc f, const LbTensor * x, LbTensor * y,
    const Params * p, GError ** error)
{
  LbRowsGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, op, error, "x", x, "y", y, NULL) ||
      !lb_check_unary (op, x, y, &g, error))
    return FALSE;
  if (y->dtype == LB_DTYPE_BF16)
    run_to_bf16 (f, x->data, g.x_ld, y->data, g.y_ld, g.m, g.d, p);
  else
    run (f, x->data, g.x_ld, NULL, 0, y->data, g.y_ld, g.m, g.d, p);
  return TRUE;
}

static gboolean
binary (const char *op, SpanFunc f, const LbTensor * a, const LbTensor * b,
    LbTensor * y, GError ** error)
{
  LbRowsGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, op, error, "a", a, "b", b, "y", y,
          NULL) || !lb_check_binary (op, a, b, y, &g, error))
    return FALSE;
  /* s_ld 0 (b is one row broadcast) reads the same row for every row of a */
  run (f, a->data, g.x_ld, b->data, g.s_ld, y->data, g.y_ld, g.m, g.d, NULL);
  return TRUE;
}

/**
 * lb_cpu_gelu_tanh:
 * @s: a CPU stream
 * @x: f32 rows [..., D] (contiguous, or a 2-D row-strided view)
 * @y: f32, the shape of @x; may be @x.  Or bf16 (the next GEMM's input,
 *   spec 1.11), not overlapping @x: the f32 result rounded to nearest even
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` (spec 1.5, 1.7, 5.2).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_gelu_tanh (LbStream * s, const LbTensor * x, LbTensor * y,
    GError ** error)
{
  return unary ("gelu_tanh", span_gelu_tanh, x, y, NULL, error);
}

/**
 * lb_cpu_silu:
 * @s: a CPU stream
 * @x: f32 rows [..., D]
 * @y: f32, the shape of @x; may be @x (or bf16, as lb_cpu_gelu_tanh())
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `x * sigmoid(x)` (spec 1.4, 1.6, vae_and_distributed_spec.md A.3).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_silu (LbStream * s, const LbTensor * x, LbTensor * y, GError ** error)
{
  return unary ("silu", span_silu, x, y, NULL, error);
}

/**
 * lb_cpu_scale:
 * @s: a CPU stream
 * @x: f32 rows [..., D]
 * @alpha: multiplier
 * @beta: offset
 * @y: f32, the shape of @x; may be @x (or bf16, as lb_cpu_gelu_tanh())
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `y = alpha * x + beta`.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_scale (LbStream * s, const LbTensor * x, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  Params p = { alpha, beta };
  return unary ("scale", span_scale, x, y, &p, error);
}

/**
 * lb_cpu_add:
 * @s: a CPU stream
 * @a: f32 rows [..., D]
 * @b: f32 of the shape of @a, or [D] broadcast over the rows of @a
 * @y: f32, the shape of @a; may be @a or @b
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `y = a + b`.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_add (LbStream * s, const LbTensor * a, const LbTensor * b,
    LbTensor * y, GError ** error)
{
  return binary ("add", span_add, a, b, y, error);
}

/**
 * lb_cpu_mul:
 * @s: a CPU stream
 * @a: f32 rows [..., D]
 * @b: f32 of the shape of @a, or [D] broadcast over the rows of @a
 * @y: f32, the shape of @a; may be @a or @b
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `y = a * b`.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_mul (LbStream * s, const LbTensor * a, const LbTensor * b,
    LbTensor * y, GError ** error)
{
  return binary ("mul", span_mul, a, b, y, error);
}

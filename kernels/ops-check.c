/* lingbot-gst: backend-independent argument checks of the op table
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * See kernels/ops-check.h.  The checks of one op run in a fixed order
 * (the order of its arguments, outputs once their expected shape is
 * known), so every backend reports the first problem with the same
 * message.
 */
#include "kernels/ops-check.h"
#include "kernels/ops-check-private.h"

#include <string.h>

/* ---- generic helpers ---- */

/**
 * lb_check_fail:
 * @error: (out) (optional): where the error goes
 * @format: printf format of the whole message ("op: ...")
 *
 * Sets an %LB_ERROR_SHAPE error.
 *
 * Returns: %FALSE, so callers can `return lb_check_fail (...)`.
 */
gboolean
lb_check_fail (GError ** error, const char *format, ...)
{
  va_list ap;
  va_start (ap, format);
  if (error) {
    g_autofree char *msg = g_strdup_vprintf (format, ap);
    g_set_error_literal (error, LB_ERROR, LB_ERROR_SHAPE, msg);
  }
  va_end (ap);
  return FALSE;
}

static const char *
device_name (LbDeviceType type)
{
  switch (type) {
    case LB_DEVICE_CPU:
      return "cpu";
    case LB_DEVICE_CUDA:
      return "cuda";
  }
  return "unknown";
}

/**
 * lb_check_device:
 * @t: (nullable): the tensor; %NULL passes (a missing tensor is reported
 *   by the op's shape checks)
 * @device: where the op runs; for the CPU only the type is compared
 * @op: op name for the message
 * @arg: argument name
 * @error: (out) (optional): %LB_ERROR_SHAPE with a message such as
 *   "silu: x is on device cpu:0, expected cuda:0" or
 *   "scale: x is on device cuda:0, expected the CPU"
 *
 * Returns: %TRUE when @t is absent or lives on @device.
 */
gboolean
lb_check_device (const LbTensor * t, LbDevice device, const char *op,
    const char *arg, GError ** error)
{
  if (t == NULL || (t->device.type == device.type &&
          (device.type == LB_DEVICE_CPU || t->device.index == device.index)))
    return TRUE;
  if (device.type == LB_DEVICE_CPU)
    return lb_check_fail (error, "%s: %s is on device %s:%d, expected the CPU",
        op, arg, device_name (t->device.type), t->device.index);
  return lb_check_fail (error, "%s: %s is on device %s:%d, expected %s:%d", op,
      arg, device_name (t->device.type), t->device.index,
      device_name (device.type), device.index);
}

/**
 * lb_check_devices_valist:
 * @device: where the op runs
 * @op: op name for the message
 * @error: (out) (optional): as lb_check_device()
 * @first_arg: name of the first tensor argument, or %NULL
 * @args: the first tensor (`const LbTensor *`, nullable), then more
 *   (name, tensor) pairs, ended by a %NULL name
 *
 * lb_check_device() on each tensor in turn.
 *
 * Returns: %TRUE when every tensor is absent or on @device.
 */
gboolean
lb_check_devices_valist (LbDevice device, const char *op, GError ** error,
    const char *first_arg, va_list args)
{
  for (const char *arg = first_arg; arg != NULL;
      arg = va_arg (args, const char *))
  {
    const LbTensor *t = va_arg (args, const LbTensor *);
    if (!lb_check_device (t, device, op, arg, error))
      return FALSE;
  }
  return TRUE;
}

/**
 * lb_check_devices:
 * @device: where the op runs
 * @op: op name for the message
 * @error: (out) (optional): as lb_check_device()
 * @first_arg: name of the first tensor argument
 * @...: the first tensor, then more (name, tensor) pairs, then %NULL
 *
 * The device placement check of a whole op:
 * `lb_check_devices (dev, "add", error, "a", a, "b", b, "y", y, NULL)`.
 *
 * Returns: %TRUE when every tensor is absent or on @device.
 */
gboolean
lb_check_devices (LbDevice device, const char *op, GError ** error,
    const char *first_arg, ...)
{
  va_list ap;
  va_start (ap, first_arg);
  gboolean ok = lb_check_devices_valist (device, op, error, first_arg, ap);
  va_end (ap);
  return ok;
}

static char *
expected_string (int ndim, const int64_t * shape)
{
  GString *s = g_string_new ("[");
  for (int i = 0; i < ndim; i++) {
    if (i)
      g_string_append (s, ", ");
    if (shape[i] < 0)
      g_string_append_c (s, '*');
    else
      g_string_append_printf (s, "%" G_GINT64_FORMAT, shape[i]);
  }
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

gboolean
lb_check_present (const char *op, const char *arg, const LbTensor * t,
    const char *expect, GError ** error)
{
  if (t == NULL)
    return lb_check_fail (error, "%s: %s is NULL, expected %s", op, arg,
        expect);
  if (t->ndim < 0 || t->ndim > LB_MAX_DIMS)
    return lb_check_fail (error, "%s: %s has %d dimensions, expected %s", op,
        arg, t->ndim, expect);
  return TRUE;
}

gboolean
lb_check_fail_strides (const char *op, const char *arg, const LbTensor * t,
    const char *expect, GError ** error)
{
  g_autofree char *have = lb_tensor_shape_string (t);
  g_autofree char *st = lb_shape_string (t->ndim, t->stride);
  return lb_check_fail (error, "%s: %s is %s %s with strides %s, expected %s",
      op, arg, lb_dtype_name (t->dtype), have, st, expect);
}

/**
 * lb_check_tensor:
 * @op: op name for the message ("layer_norm")
 * @arg: argument name ("weight")
 * @t: (nullable): the tensor (%NULL is an error)
 * @dtype: required dtype
 * @ndim: required number of dimensions
 * @shape: (array length=ndim): required extents, %LB_ANY matches any
 * @contiguous: whether @t must be contiguous
 * @error: (out) (optional): %LB_ERROR_SHAPE with a message such as
 *   "layer_norm: weight is f32 [7], expected [8]"
 *
 * Returns: %TRUE when @t has the required dtype and shape.
 */
gboolean
lb_check_tensor (const char *op, const char *arg, const LbTensor * t,
    LbDType dtype, int ndim, const int64_t * shape, gboolean contiguous,
    GError ** error)
{
  g_autofree char *exp = expected_string (ndim, shape);
  if (t == NULL) {
    g_autofree char *e = g_strdup_printf ("%s %s", lb_dtype_name (dtype), exp);
    return lb_check_present (op, arg, t, e, error);
  }
  if (!lb_check_present (op, arg, t, exp, error))
    return FALSE;
  gboolean ok = t->dtype == dtype && t->ndim == ndim;
  for (int i = 0; ok && i < ndim; i++)
    if (shape[i] >= 0 && t->shape[i] != shape[i])
      ok = FALSE;
  if (!ok) {
    g_autofree char *have = lb_tensor_shape_string (t);
    return lb_check_fail (error, "%s: %s is %s %s, expected %s%s%s", op, arg,
        lb_dtype_name (t->dtype), have,
        t->dtype != dtype ? lb_dtype_name (dtype) : "",
        t->dtype != dtype ? " " : "", exp);
  }
  if (contiguous && !lb_tensor_is_contiguous (t))
    return lb_check_fail_strides (op, arg, t, "a contiguous tensor", error);
  return TRUE;
}

/* lb_check_rows(), with a bf16 @t accepted too when @bf16_ok (then a
 * tensor of another dtype, or none, is told "f32 or bf16"; one of the
 * right dtype and the wrong width is told its own dtype). */
static gboolean
check_rows_typed (const char *op, const char *arg, const LbTensor * t,
    int64_t cols, gboolean bf16_ok, int64_t * rows, int64_t * ld,
    GError ** error)
{
  const gboolean is16 = t && bf16_ok && t->dtype == LB_DTYPE_BF16;
  const char *types = is16 ? "bf16" : bf16_ok && (t == NULL ||
      t->dtype != LB_DTYPE_F32) ? "f32 or bf16" : "f32";
  g_autofree char *e = cols >= 0 ?
      g_strdup_printf ("%s [..., %" G_GINT64_FORMAT "]", types, cols) :
      g_strdup_printf ("%s [..., D]", types);
  if (!lb_check_present (op, arg, t, e, error))
    return FALSE;
  if ((t->dtype != LB_DTYPE_F32 && !is16) || t->ndim < 1 || (cols >= 0
          && t->shape[t->ndim - 1] != cols)) {
    g_autofree char *have = lb_tensor_shape_string (t);
    return lb_check_fail (error, "%s: %s is %s %s, expected %s", op, arg,
        lb_dtype_name (t->dtype), have, e);
  }
  int64_t c = t->shape[t->ndim - 1];
  if (t->ndim == 2 && (t->stride[1] == 1 || c <= 1) &&
      (t->shape[0] <= 1 || t->stride[0] >= c)) {
    *rows = t->shape[0];
    *ld = t->shape[0] > 1 ? t->stride[0] : c;
    return TRUE;
  }
  if (!lb_tensor_is_contiguous (t))
    return lb_check_fail_strides (op, arg, t,
        "a contiguous tensor or a 2-D view with " "unit column stride", error);
  *rows = 1;
  for (int i = 0; i < t->ndim - 1; i++)
    *rows *= t->shape[i];
  *ld = c;
  return TRUE;
}

/**
 * lb_check_rows:
 * @op: op name for the message
 * @arg: argument name
 * @t: (nullable): the tensor
 * @cols: required last extent, or %LB_ANY
 * @rows: (out): number of rows
 * @ld: (out): elements between consecutive rows
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Accepts a float32 tensor seen as a matrix of rows: either a 2-D view
 * whose columns have unit stride (a row-strided view) or a contiguous
 * tensor of any rank flattened to [numel / last, last].
 *
 * Returns: %TRUE when @t can be read as rows.
 */
gboolean
lb_check_rows (const char *op, const char *arg, const LbTensor * t,
    int64_t cols, int64_t * rows, int64_t * ld, GError ** error)
{
  return check_rows_typed (op, arg, t, cols, FALSE, rows, ld, error);
}

/* ---- gemm ---- */

/* Row stride of a 2-D view whose last dim is unit-stride, or of a contiguous
 * N-D tensor flattened to [numel/last, last].  Returns FALSE otherwise.
 * Looks at the geometry only (the dtype is the caller's check). */
static gboolean
as_matrix (const LbTensor * t, int64_t * rows, int64_t * cols, int64_t * ld)
{
  if (t->ndim < 1)
    return FALSE;
  *cols = t->shape[t->ndim - 1];
  if (t->ndim == 1) {
    *rows = 1;
    *ld = *cols;
    return TRUE;
  }
  if (t->ndim == 2) {
    if (t->stride[1] != 1 && t->shape[1] > 1)
      return FALSE;
    *rows = t->shape[0];
    *ld = t->shape[0] > 1 ? t->stride[0] : *cols;
    return *ld >= *cols;
  }
  if (!lb_tensor_is_contiguous (t))
    return FALSE;
  *rows = lb_tensor_numel (t) / MAX (*cols, 1);
  *ld = *cols;
  return TRUE;
}

static gboolean
gemm_shape_error (GError ** error, const char *op, const char *what,
    const LbTensor * t, const char *expect)
{
  g_autofree char *s = lb_tensor_shape_string (t);
  return lb_check_fail (error, "%s: %s is %s %s, expected %s", op, what,
      lb_dtype_name (t->dtype), s, expect);
}

/* lb_check_gemm() for @op; a bf16 y is accepted with a bf16 w when
 * @y16_ok (gemm_gelu_tanh). */
static gboolean
check_gemm_op (const char *op, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, const LbTensor * y,
    gboolean y16_ok, LbGemmGeom * g, GError ** error);

/**
 * lb_check_gemm:
 * @x: [M, K] float32 (or contiguous [..., K], flattened); bfloat16 when
 *   @w is (a GEMM input written in bf16 by the op before, spec 1.11)
 * @w: [N, K] when @trans_w else [K, N], float32 or bfloat16
 *   (%LB_DTYPE_BF16), 2-D
 * @trans_w: whether @w is stored transposed
 * @bias: (nullable): [N] float32 contiguous
 * @y: [M, N] float32
 * @g: (out): the matrix geometry
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * The checks of the gemm op (kernels/ops.h).  The weight may be bf16
 * (spec 1.11 storage), and x with it; any other dtype of @w (f16,
 * integers, f64) is refused with "gemm: w is f16 [N, K], expected f32 or
 * bf16 (the weight dtypes gemm supports)", a bf16 x with an f32 w with
 * "gemm: x is bf16 [4, 8], expected f32 [M, K] with unit column stride
 * (bf16 only with a bf16 w)".
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_gemm (const LbTensor * x, const LbTensor * w, gboolean trans_w,
    const LbTensor * bias, const LbTensor * y, LbGemmGeom * g, GError ** error)
{
  return check_gemm_op ("gemm", x, w, trans_w, bias, y, FALSE, g, error);
}

/**
 * lb_check_gemm_gelu_tanh:
 * @x: as lb_check_gemm()'s
 * @w: as lb_check_gemm()'s
 * @trans_w: as lb_check_gemm()'s
 * @bias: as lb_check_gemm()'s
 * @y: [M, N] float32, or bfloat16 when @w is
 * @g: (out): the matrix geometry
 * @error: (out) (optional): %LB_ERROR_SHAPE, the messages of
 *   lb_check_gemm() under the op's name ("gemm_gelu_tanh: y is bf16 [4,
 *   6], expected f32 [4, 6] (bf16 only with a bf16 w)")
 *
 * The checks of the gemm_gelu_tanh op (kernels/ops.h).
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_gemm_gelu_tanh (const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, const LbTensor * y,
    LbGemmGeom * g, GError ** error)
{
  return check_gemm_op ("gemm_gelu_tanh", x, w, trans_w, bias, y, TRUE, g,
      error);
}

static gboolean
check_gemm_op (const char *op, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, const LbTensor * y,
    gboolean y16_ok, LbGemmGeom * g, GError ** error)
{
  int64_t wr, wc, ym, yn;
  const gboolean x16 = x->dtype == LB_DTYPE_BF16 && w->dtype == LB_DTYPE_BF16;
  const gboolean y16 = y16_ok && y->dtype == LB_DTYPE_BF16 &&
      w->dtype == LB_DTYPE_BF16;
  if ((x->dtype != LB_DTYPE_F32 && !x16) ||
      !as_matrix (x, &g->m, &g->k, &g->xld))
    return gemm_shape_error (error, op, "x", x, x->dtype == LB_DTYPE_BF16 ?
        "f32 [M, K] with unit column stride (bf16 only with a bf16 w)" :
        "f32 [M, K] with unit column stride");
  if (w->dtype != LB_DTYPE_F32 && w->dtype != LB_DTYPE_BF16)
    return gemm_shape_error (error, op, "w", w,
        "f32 or bf16 (the weight dtypes gemm supports)");
  if (!as_matrix (w, &wr, &wc, &g->wld) || w->ndim != 2)
    return gemm_shape_error (error, op, "w", w, "2-D with unit column stride");
  g->n = trans_w ? wr : wc;
  if ((trans_w ? wc : wr) != g->k) {
    g_autofree char *xs = lb_tensor_shape_string (x);
    g_autofree char *ws = lb_tensor_shape_string (w);
    return lb_check_fail (error,
        "%s: inner dimensions differ: x %s, w %s (%s)", op, xs, ws,
        trans_w ? "w is [N, K]" : "w is [K, N]");
  }
  if ((y->dtype != LB_DTYPE_F32 && !y16) ||
      !as_matrix (y, &ym, &yn, &g->yld) || ym != g->m || yn != g->n) {
    g_autofree char *e = g_strdup_printf ("%s [%" G_GINT64_FORMAT ", %"
        G_GINT64_FORMAT "]%s", y16 ? "bf16" : "f32", g->m, g->n,
        y16_ok && y->dtype == LB_DTYPE_BF16 && !y16 ?
        " (bf16 only with a bf16 w)" : "");
    return gemm_shape_error (error, op, "y", y, e);
  }
  if (bias && (bias->dtype != LB_DTYPE_F32 || lb_tensor_numel (bias) != g->n
          || !lb_tensor_is_contiguous (bias))) {
    g_autofree char *e = g_strdup_printf ("f32 [%" G_GINT64_FORMAT "]", g->n);
    return gemm_shape_error (error, op, "bias", bias, e);
  }
  return TRUE;
}

static gboolean check_gemm_fp8_op (const char *op, const LbTensor * x,
    LbDType x_dtype, const LbTensor * w, const LbTensor * sw,
    const LbTensor * bias, const LbTensor * y, LbDType y_dtype,
    LbGemmGeom * g, GError ** error);
static gboolean check_row_scales (const char *op, const char *arg,
    const LbTensor * t, int64_t m, GError ** error);

/**
 * lb_check_gemm_fp8:
 * @x: [M, K] float32 (or contiguous [..., K], flattened)
 * @w: [N, K] %LB_DTYPE_F8E4M3, contiguous
 * @sw: [N] float32 contiguous (per-output-channel scales)
 * @bias: (nullable): [N] float32 contiguous
 * @y: [M, N] float32
 * @g: (out): the matrix geometry (wld = K)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * The checks of the gemm_fp8 op (kernels/ops.h), with messages such as
 * "gemm_fp8: w is f32 [3, 8], expected f8e4m3 [N, 8] contiguous",
 * "gemm_fp8: inner dimensions differ: x [4, 8], w [3, 6] (w is [N, K])",
 * "gemm_fp8: sw is NULL, expected f32 [3] contiguous".
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_gemm_fp8 (const LbTensor * x, const LbTensor * w,
    const LbTensor * sw, const LbTensor * bias, const LbTensor * y,
    LbGemmGeom * g, GError ** error)
{
  return check_gemm_fp8_op ("gemm_fp8", x, LB_DTYPE_F32, w, sw, bias, y,
      LB_DTYPE_F32, g, error);
}

/**
 * lb_check_gemm_fp8_q:
 * @x: [M, K] %LB_DTYPE_F8E4M3 codes (or contiguous [..., K], flattened)
 * @sx: [M] float32 contiguous (x's per-row scales)
 * @w: [N, K] %LB_DTYPE_F8E4M3, contiguous
 * @sw: [N] float32 contiguous
 * @bias: (nullable): [N] float32 contiguous
 * @y: [M, N] float32
 * @g: (out): the matrix geometry (wld = K; xld in codes)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * The checks of the gemm_fp8_q op (kernels/ops-list.h): lb_check_gemm_fp8()'s
 * under the name "gemm_fp8_q" with an e4m3 x ("gemm_fp8_q: x is f32
 * [4, 8], expected f8e4m3 [M, K] with unit column stride"), then @sx
 * ("gemm_fp8_q: sx is f32 [3], expected f32 [4] contiguous").
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_gemm_fp8_q (const LbTensor * x, const LbTensor * sx,
    const LbTensor * w, const LbTensor * sw, const LbTensor * bias,
    const LbTensor * y, LbGemmGeom * g, GError ** error)
{
  const char *op = "gemm_fp8_q";
  return check_gemm_fp8_op (op, x, LB_DTYPE_F8E4M3, w, sw, bias, y,
      LB_DTYPE_F32, g, error) && check_row_scales (op, "sx", sx, g->m, error);
}

/**
 * lb_check_gemm_fp8_gelu_q:
 * @x: [M, K] %LB_DTYPE_F8E4M3 codes (or contiguous [..., K], flattened)
 * @sx: [M] float32 contiguous (x's per-row scales)
 * @w: [N, K] %LB_DTYPE_F8E4M3, contiguous
 * @sw: [N] float32 contiguous
 * @bias: (nullable): [N] float32 contiguous
 * @y: [M, N] %LB_DTYPE_F8E4M3 (the codes written; unit column stride)
 * @sy: [M] float32 contiguous (y's row scales, written)
 * @g: (out): the matrix geometry (wld = K; xld and yld in codes)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * The checks of the gemm_fp8_gelu_q op (kernels/ops-list.h):
 * lb_check_gemm_fp8_q()'s under the name "gemm_fp8_gelu_q" with an e4m3
 * y ("gemm_fp8_gelu_q: y is f32 [4, 3], expected f8e4m3 [4, 3] with unit
 * column stride"), then @sx and @sy ("gemm_fp8_gelu_q: sy is f32 [3],
 * expected f32 [4] contiguous").
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_gemm_fp8_gelu_q (const LbTensor * x, const LbTensor * sx,
    const LbTensor * w, const LbTensor * sw, const LbTensor * bias,
    const LbTensor * y, const LbTensor * sy, LbGemmGeom * g, GError ** error)
{
  const char *op = "gemm_fp8_gelu_q";
  return check_gemm_fp8_op (op, x, LB_DTYPE_F8E4M3, w, sw, bias, y,
      LB_DTYPE_F8E4M3, g, error) &&
      check_row_scales (op, "sx", sx, g->m, error) &&
      check_row_scales (op, "sy", sy, g->m, error);
}

/* @t (named @arg) must be the f32 [@m] contiguous row scales of an fp8
 * operand. */
static gboolean
check_row_scales (const char *op, const char *arg, const LbTensor * t,
    int64_t m, GError ** error)
{
  g_autofree char *se = g_strdup_printf ("f32 [%" G_GINT64_FORMAT
      "] contiguous", m);
  if (!lb_check_present (op, arg, t, se, error))
    return FALSE;
  if (t->dtype != LB_DTYPE_F32 || t->ndim != 1 || t->shape[0] != m ||
      !lb_tensor_is_contiguous (t)) {
    g_autofree char *ss = lb_tensor_shape_string (t);
    return lb_check_fail (error, "%s: %s is %s %s, expected %s", op, arg,
        lb_dtype_name (t->dtype), ss, se);
  }
  return TRUE;
}

/* The checks of lb_check_gemm_fp8() under the name @op, with x of
 * @x_dtype (f32, or e4m3 codes for gemm_fp8_q) and y of @y_dtype (f32, or
 * e4m3 codes for gemm_fp8_gelu_q). */
static gboolean
check_gemm_fp8_op (const char *op, const LbTensor * x, LbDType x_dtype,
    const LbTensor * w, const LbTensor * sw, const LbTensor * bias,
    const LbTensor * y, LbDType y_dtype, LbGemmGeom * g, GError ** error)
{
  int64_t ym, yn;
  g_autofree char *xe = g_strdup_printf ("%s [M, K] with unit column stride",
      lb_dtype_name (x_dtype));
  if (!lb_check_present (op, "x", x, xe, error))
    return FALSE;
  if (x->dtype != x_dtype || !as_matrix (x, &g->m, &g->k, &g->xld)) {
    g_autofree char *xs = lb_tensor_shape_string (x);
    return lb_check_fail (error, "%s: x is %s %s, expected %s", op,
        lb_dtype_name (x->dtype), xs, xe);
  }
  g_autofree char *we = g_strdup_printf ("f8e4m3 [N, %" G_GINT64_FORMAT
      "] contiguous", g->k);
  if (!lb_check_present (op, "w", w, we, error))
    return FALSE;
  if (w->dtype != LB_DTYPE_F8E4M3 || w->ndim != 2 ||
      !lb_tensor_is_contiguous (w)) {
    g_autofree char *ws = lb_tensor_shape_string (w);
    return lb_check_fail (error, "%s: w is %s %s, expected %s", op,
        lb_dtype_name (w->dtype), ws, we);
  }
  if (w->shape[1] != g->k) {
    g_autofree char *xs = lb_tensor_shape_string (x);
    g_autofree char *ws = lb_tensor_shape_string (w);
    return lb_check_fail (error,
        "%s: inner dimensions differ: x %s, w %s (w is [N, K])", op, xs, ws);
  }
  g->n = w->shape[0];
  g->wld = g->k;
  g_autofree char *ve = g_strdup_printf ("f32 [%" G_GINT64_FORMAT
      "] contiguous", g->n);
  if (!lb_check_present (op, "sw", sw, ve, error))
    return FALSE;
  if (sw->dtype != LB_DTYPE_F32 || lb_tensor_numel (sw) != g->n ||
      sw->ndim != 1 || !lb_tensor_is_contiguous (sw)) {
    g_autofree char *ss = lb_tensor_shape_string (sw);
    return lb_check_fail (error, "%s: sw is %s %s, expected %s", op,
        lb_dtype_name (sw->dtype), ss, ve);
  }
  if (bias && (bias->dtype != LB_DTYPE_F32 || lb_tensor_numel (bias) != g->n
          || !lb_tensor_is_contiguous (bias))) {
    g_autofree char *bs = lb_tensor_shape_string (bias);
    return lb_check_fail (error, "%s: bias is %s %s, expected %s", op,
        lb_dtype_name (bias->dtype), bs, ve);
  }
  g_autofree char *ye = g_strdup_printf ("%s [%" G_GINT64_FORMAT ", %"
      G_GINT64_FORMAT "] with unit column stride", lb_dtype_name (y_dtype),
      g->m, g->n);
  if (!lb_check_present (op, "y", y, ye, error))
    return FALSE;
  if (y->dtype != y_dtype || !as_matrix (y, &ym, &yn, &g->yld) ||
      ym != g->m || yn != g->n) {
    g_autofree char *ys = lb_tensor_shape_string (y);
    return lb_check_fail (error, "%s: y is %s %s, expected %s", op,
        lb_dtype_name (y->dtype), ys, ye);
  }
  return TRUE;
}

/* ---- row ops: norms, modulation, elementwise ---- */

/* @t must be rows of @d, as many as @like has; with @same_shape also of
 * @like's shape unless either is 2-D. */
static gboolean
check_out_rows (const char *op, const char *arg, const LbTensor * t,
    const LbTensor * like, int64_t rows, int64_t d, gboolean same_shape,
    gboolean bf16_ok, int64_t * ld, GError ** error)
{
  int64_t r;
  if (!check_rows_typed (op, arg, t, d, bf16_ok, &r, ld, error))
    return FALSE;
  if (r != rows || (same_shape && t->ndim != 2 && like->ndim != 2 &&
          !lb_tensor_same_shape (t, like))) {
    g_autofree char *have = lb_tensor_shape_string (t);
    g_autofree char *want = lb_tensor_shape_string (like);
    return lb_check_fail (error, "%s: %s is %s %s, expected %s", op, arg,
        lb_dtype_name (t->dtype), have, want);
  }
  return TRUE;
}

/* A per-feature vector: [D] (broadcast over rows) or M rows of D.
 * Sets *ld to 0 for broadcast. */
static gboolean
check_vec_or_rows (const char *op, const char *arg, const LbTensor * t,
    int64_t rows, int64_t d, int64_t * ld, GError ** error)
{
  int64_t r;
  if (!lb_check_rows (op, arg, t, d, &r, ld, error))
    return FALSE;
  if (r == 1) {
    *ld = 0;
    return TRUE;
  }
  if (r != rows) {
    g_autofree char *have = lb_tensor_shape_string (t);
    return lb_check_fail (error, "%s: %s is f32 %s, expected [%"
        G_GINT64_FORMAT "] or [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]",
        op, arg, have, d, rows, d);
  }
  return TRUE;
}

static gboolean
check_vec (const char *op, const char *arg, const LbTensor * t, int64_t d,
    GError ** error)
{
  int64_t shape[1] = { d };
  return lb_check_tensor (op, arg, t, LB_DTYPE_F32, 1, shape, TRUE, error);
}

/* x (named @xarg) as rows [M, D], then y as M rows of D; with @y_bf16 y
 * may also be bf16 (the GEMM input an op writes, kernels/ops-list.h). */
static gboolean
check_in_out (const char *op, const char *xarg, const LbTensor * x,
    const LbTensor * y, gboolean same_shape, gboolean y_bf16, LbRowsGeom * g,
    GError ** error)
{
  memset (g, 0, sizeof *g);
  if (!lb_check_rows (op, xarg, x, LB_ANY, &g->m, &g->x_ld, error))
    return FALSE;
  g->d = x->shape[x->ndim - 1];
  return check_out_rows (op, "y", y, x, g->m, g->d, same_shape, y_bf16,
      &g->y_ld, error);
}

/* A norm's optional weight and bias (@weight, @bias nullable): [D] each,
 * D of @g. */
static gboolean
check_norm_affine (const char *op, const LbTensor * weight,
    const LbTensor * bias, const LbRowsGeom * g, GError ** error)
{
  return (weight == NULL || check_vec (op, "weight", weight, g->d, error)) &&
      (bias == NULL || check_vec (op, "bias", bias, g->d, error));
}

/* A residual's optional @gate: [D] or the rows of @g, its ld into *@ld. */
static gboolean
check_gate (const char *op, const LbTensor * gate, const LbRowsGeom * g,
    int64_t * ld, GError ** error)
{
  return gate == NULL || check_vec_or_rows (op, "gate", gate, g->m, g->d, ld,
      error);
}

/* The adaLN modulation's @scale and @shift: [D] or the rows of @g, their
 * lds into g->s_ld and g->h_ld. */
static gboolean
check_scale_shift (const char *op, const LbTensor * scale,
    const LbTensor * shift, LbRowsGeom * g, GError ** error)
{
  return check_vec_or_rows (op, "scale", scale, g->m, g->d, &g->s_ld, error)
      && check_vec_or_rows (op, "shift", shift, g->m, g->d, &g->h_ld, error);
}

/**
 * lb_check_layer_norm:
 * @x: f32 rows [M, D] (contiguous N-D, or a 2-D row-strided view)
 * @weight: (nullable): f32 [D]
 * @bias: (nullable): f32 [D]
 * @y: f32 rows [M, D]
 * @g: (out): the rows geometry (x_ld, y_ld)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_layer_norm (const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, const LbTensor * y, LbRowsGeom * g, GError ** error)
{
  const char *op = "layer_norm";
  return check_in_out (op, "x", x, y, FALSE, TRUE, g, error) &&
      check_norm_affine (op, weight, bias, g, error);
}

/**
 * lb_check_rms_norm:
 * @x: f32 rows [M, D]
 * @weight: (nullable): f32 [D]
 * @y: f32 rows [M, D]
 * @g: (out): the rows geometry (x_ld, y_ld)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_rms_norm (const LbTensor * x, const LbTensor * weight,
    const LbTensor * y, LbRowsGeom * g, GError ** error)
{
  return check_in_out ("rms_norm", "x", x, y, FALSE, FALSE, g, error) &&
      check_norm_affine ("rms_norm", weight, NULL, g, error);
}

/**
 * lb_check_modulate:
 * @x: f32 rows [M, D]
 * @scale: f32 [D] or rows [M, D]
 * @shift: f32 [D] or rows [M, D]
 * @y: f32 rows [M, D]
 * @g: (out): the rows geometry (x_ld, y_ld, s_ld for @scale, h_ld for
 *   @shift)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_modulate (const LbTensor * x, const LbTensor * scale,
    const LbTensor * shift, const LbTensor * y, LbRowsGeom * g, GError ** error)
{
  const char *op = "modulate";
  return check_in_out (op, "x", x, y, FALSE, FALSE, g, error) &&
      check_scale_shift (op, scale, shift, g, error);
}

/**
 * lb_check_gated_residual:
 * @x: f32 rows [M, D]
 * @y: f32 rows [M, D]
 * @gate: (nullable): f32 [D] or rows [M, D]
 * @g: (out): the rows geometry (x_ld, y_ld, s_ld for @gate)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_gated_residual (const LbTensor * x, const LbTensor * y,
    const LbTensor * gate, LbRowsGeom * g, GError ** error)
{
  const char *op = "gated_residual";
  return check_in_out (op, "x", x, y, FALSE, FALSE, g, error) &&
      check_gate (op, gate, g, &g->s_ld, error);
}

/**
 * lb_check_unary:
 * @op: "gelu_tanh", "silu" or "scale"
 * @x: f32 rows [..., D]
 * @y: f32, the shape of @x (or as many rows of D when either is 2-D)
 * @g: (out): the rows geometry (x_ld, y_ld)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_unary (const char *op, const LbTensor * x, const LbTensor * y,
    LbRowsGeom * g, GError ** error)
{
  return check_in_out (op, "x", x, y, TRUE, TRUE, g, error);
}

/**
 * lb_check_binary:
 * @op: "add" or "mul"
 * @a: f32 rows [..., D]
 * @b: f32 of the shape of @a, or [D] broadcast over the rows of @a
 * @y: f32, the shape of @a
 * @g: (out): the rows geometry (x_ld for @a, s_ld for @b: 0 when
 *   broadcast, y_ld)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_binary (const char *op, const LbTensor * a, const LbTensor * b,
    const LbTensor * y, LbRowsGeom * g, GError ** error)
{
  int64_t bm;
  memset (g, 0, sizeof *g);
  if (!lb_check_rows (op, "a", a, LB_ANY, &g->m, &g->x_ld, error))
    return FALSE;
  g->d = a->shape[a->ndim - 1];
  if (!lb_check_rows (op, "b", b, g->d, &bm, &g->s_ld, error))
    return FALSE;
  gboolean bcast = b->ndim == 1 && a->ndim != 1;
  if (!bcast && (bm != g->m || (b->ndim != 2 && a->ndim != 2 &&
              !lb_tensor_same_shape (a, b)))) {
    g_autofree char *have = lb_tensor_shape_string (b);
    g_autofree char *want = lb_tensor_shape_string (a);
    return lb_check_fail (error, "%s: b is f32 %s, expected %s or [%"
        G_GINT64_FORMAT "]", op, have, want, g->d);
  }
  if (bcast)
    g->s_ld = 0;
  return check_out_rows (op, "y", y, a, g->m, g->d, TRUE, FALSE, &g->y_ld,
      error);
}

/* ---- RoPE ---- */

/* The RoPE checks after @x (named @xarg) is known to be 3-D of a valid
 * dtype (f32; rms_norm_rope's y also bf16): even hd with unit stride, the
 * tables, the grid and the positions.  Shared by rope_3d and rms_norm_rope
 * (whose rotated tensor is its output y). */
static gboolean
check_rope (const char *op, const char *xarg, const LbTensor * x,
    const LbTensor * cos, const LbTensor * sin, int64_t grid_f,
    int64_t grid_h, int64_t grid_w, int64_t frame_offset, int64_t row_offset,
    GError ** error)
{
  int64_t n = x->shape[0], hd = x->shape[2];
  if ((hd % 2) != 0 || (x->stride[2] != 1 && hd > 1))
    return lb_check_fail_strides (op, xarg, x, "[N, H, hd] with even hd and "
        "unit stride on hd", error);
  int64_t tshape[2] = { LB_ANY, hd / 2 };
  if (!lb_check_tensor (op, "cos", cos, LB_DTYPE_F32, 2, tshape, TRUE, error))
    return FALSE;
  tshape[0] = cos->shape[0];
  if (!lb_check_tensor (op, "sin", sin, LB_DTYPE_F32, 2, tshape, TRUE, error))
    return FALSE;
  int64_t max_pos = cos->shape[0];
  if (grid_f < 0 || grid_h < 0 || grid_w < 0 || grid_f * grid_h * grid_w != n) {
    g_autofree char *have = lb_tensor_shape_string (x);
    return lb_check_fail (error, "%s: %s is %s %s, expected [%"
        G_GINT64_FORMAT ", *, *] for a grid of %" G_GINT64_FORMAT " x %"
        G_GINT64_FORMAT " x %" G_GINT64_FORMAT, op, xarg,
        lb_dtype_name (x->dtype), have,
        MAX (grid_f, 0) * MAX (grid_h, 0) * MAX (grid_w, 0), grid_f, grid_h,
        grid_w);
  }
  if (n > 0 && (frame_offset < 0 || row_offset < 0 ||
          frame_offset + grid_f > max_pos || row_offset + grid_h > max_pos ||
          grid_w > max_pos)) {
    g_autofree char *have = lb_tensor_shape_string (cos);
    return lb_check_fail (error, "%s: cos is f32 %s, too short for "
        "frames [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "), rows [%"
        G_GINT64_FORMAT ", %" G_GINT64_FORMAT "), columns [0, %"
        G_GINT64_FORMAT ")", op, have, frame_offset, frame_offset + grid_f,
        row_offset, row_offset + grid_h, grid_w);
  }
  return TRUE;
}

/**
 * lb_check_rope_3d:
 * @x: f32 [N, H, hd], even hd, stride[2] == 1
 * @cos: f32 [P, hd/2] contiguous
 * @sin: f32 [P, hd/2] contiguous
 * @grid_f: frames
 * @grid_h: token rows per frame
 * @grid_w: token columns per row (N = grid_f * grid_h * grid_w)
 * @frame_offset: first frame position
 * @row_offset: first row position
 * @error: (out) (optional): %LB_ERROR_SHAPE, also for positions >= P
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_rope_3d (const LbTensor * x, const LbTensor * cos,
    const LbTensor * sin, int64_t grid_f, int64_t grid_h, int64_t grid_w,
    int64_t frame_offset, int64_t row_offset, GError ** error)
{
  int64_t any3[3] = { LB_ANY, LB_ANY, LB_ANY };
  return lb_check_tensor ("rope_3d", "x", x, LB_DTYPE_F32, 3, any3, FALSE,
      error) &&
      check_rope ("rope_3d", "x", x, cos, sin, grid_f, grid_h, grid_w,
      frame_offset, row_offset, error);
}

/* ---- attention ---- */

static gboolean
check_heads (const char *arg, const LbTensor * t, LbDType dtype, int64_t n,
    int64_t h, int64_t hd, GError ** error)
{
  int64_t shape[3] = { n, h, hd };
  if (!lb_check_tensor ("attention", arg, t, dtype, 3, shape, FALSE, error))
    return FALSE;
  if (t->stride[2] != 1 && t->shape[2] > 1)
    return lb_check_fail_strides ("attention", arg, t,
        "unit stride on the last dimension", error);
  return TRUE;
}

/* check_heads() for q and out, which may be f32 or bf16 (kernels/ops.h):
 * a tensor of another dtype is told both. */
static gboolean
check_heads_f32_or_bf16 (const char *arg, const LbTensor * t, int64_t n,
    int64_t h, int64_t hd, GError ** error)
{
  if (t != NULL && t->dtype != LB_DTYPE_F32 && t->dtype != LB_DTYPE_BF16 &&
      t->ndim >= 0 && t->ndim <= LB_MAX_DIMS) {
    int64_t shape[3] = { n, h, hd };
    g_autofree char *have = lb_tensor_shape_string (t);
    g_autofree char *exp = expected_string (3, shape);
    return lb_check_fail (error, "attention: %s is %s %s, expected f32 or "
        "bf16 %s", arg, lb_dtype_name (t->dtype), have, exp);
  }
  return check_heads (arg, t, t != NULL ? t->dtype : LB_DTYPE_F32, n, h, hd,
      error);
}

/**
 * lb_check_attention:
 * @q: f32 or bf16 [Nq, H, hd] with stride[2] == 1
 * @k: f32 or bf16 [Nk, H, hd] (same strides rule)
 * @v: [Nk, H, hd] of @k's dtype (same strides rule)
 * @bias: (nullable): f32 [H, Nq, Nk] contiguous
 * @key_mask: (nullable): u8 [Nk] contiguous
 * @out: f32 or bf16 [Nq, H, hd] with stride[2] == 1
 * @error: (out) (optional): %LB_ERROR_SHAPE, e.g.
 *   "attention: k is f16 [6, 2, 8], expected f32 or bf16 [*, 2, 8]",
 *   "attention: out is f16 [4, 2, 8], expected f32 or bf16 [4, 2, 8]" or
 *   "attention: v is f32 [6, 2, 8], expected bf16 [6, 2, 8] (the dtype of
 *   k)"
 *
 * The checks of the attention op (kernels/ops.h), in the order q, k, v,
 * out, bias, key_mask.  k and v may be bfloat16 (a bf16 KV cache, spec
 * 1.11), both or neither; q and out may each be f32 or bfloat16 (the
 * attention's bf16 operands of the served precision).
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_attention (const LbTensor * q, const LbTensor * k,
    const LbTensor * v, const LbTensor * bias, const LbTensor * key_mask,
    const LbTensor * out, GError ** error)
{
  if (!check_heads_f32_or_bf16 ("q", q, LB_ANY, LB_ANY, LB_ANY, error))
    return FALSE;
  int64_t nq = q->shape[0], nh = q->shape[1], hd = q->shape[2];
  if (k != NULL && k->dtype != LB_DTYPE_F32 && k->dtype != LB_DTYPE_BF16) {
    g_autofree char *have = lb_tensor_shape_string (k);
    return lb_check_fail (error, "attention: k is %s %s, expected f32 or "
        "bf16 [*, %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]",
        lb_dtype_name (k->dtype), have, nh, hd);
  }
  const LbDType kv = k != NULL ? k->dtype : LB_DTYPE_F32;
  if (!check_heads ("k", k, kv, LB_ANY, nh, hd, error))
    return FALSE;
  int64_t nk = k->shape[0];
  if (v != NULL && v->dtype != kv && v->ndim >= 0 && v->ndim <= LB_MAX_DIMS) {
    g_autofree char *have = lb_tensor_shape_string (v);
    return lb_check_fail (error, "attention: v is %s %s, expected %s [%"
        G_GINT64_FORMAT ", %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "] (the "
        "dtype of k)", lb_dtype_name (v->dtype), have, lb_dtype_name (kv),
        nk, nh, hd);
  }
  if (!check_heads ("v", v, kv, nk, nh, hd, error) ||
      !check_heads_f32_or_bf16 ("out", out, nq, nh, hd, error))
    return FALSE;
  int64_t bshape[3] = { nh, nq, nk }, mshape[1] = { nk };
  return (bias == NULL || lb_check_tensor ("attention", "bias", bias,
          LB_DTYPE_F32, 3, bshape, TRUE, error)) &&
      (key_mask == NULL || lb_check_tensor ("attention", "key_mask",
          key_mask, LB_DTYPE_U8, 1, mshape, TRUE, error));
}

/* ---- fused DiT ops ---- */

/**
 * lb_check_norm_modulate:
 * @x: f32 rows [M, D] (contiguous N-D, or a 2-D row-strided view)
 * @weight: (nullable): f32 [D]
 * @bias: (nullable): f32 [D]
 * @scale: f32 [D] or rows [M, D]
 * @shift: f32 [D] or rows [M, D]
 * @y: f32 rows [M, D]
 * @g: (out): the rows geometry (x_ld, y_ld, s_ld for @scale, h_ld for
 *   @shift; 0 when broadcast)
 * @error: (out) (optional): %LB_ERROR_SHAPE, the messages of
 *   lb_check_layer_norm() and lb_check_modulate() under the op name
 *   "norm_modulate"
 *
 * The checks of the norm_modulate op (layer_norm then modulate,
 * kernels/ops.h), in the order x, y, weight, bias, scale, shift.
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_norm_modulate (const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, const LbTensor * scale, const LbTensor * shift,
    const LbTensor * y, LbRowsGeom * g, GError ** error)
{
  const char *op = "norm_modulate";
  return check_in_out (op, "x", x, y, FALSE, TRUE, g, error) &&
      check_norm_affine (op, weight, bias, g, error) &&
      check_scale_shift (op, scale, shift, g, error);
}

/**
 * lb_check_rms_norm_rope:
 * @x: f32 [N, D], 2-D with unit column stride (row stride free)
 * @weight: (nullable): f32 [D]
 * @cos: f32 [P, hd/2] contiguous
 * @sin: f32 [P, hd/2] contiguous
 * @grid_f: frames
 * @grid_h: token rows per frame
 * @grid_w: token columns per row (N = grid_f * grid_h * grid_w)
 * @frame_offset: first frame position
 * @row_offset: first row position
 * @y: f32 or bf16 [N, H, hd] with H * hd = D, even hd, stride[2] == 1
 *   (other strides free); bf16 is a bf16 KV cache's slots (spec 1.11)
 * @g: (out): the rows geometry of @x (m = N, d = D, x_ld; y_ld unused)
 * @error: (out) (optional): %LB_ERROR_SHAPE, also for positions >= P;
 *   another dtype of @y is "rms_norm_rope: y is f16 [6, 2, 8], expected
 *   f32 or bf16 [6, *, *]"
 *
 * The checks of the rms_norm_rope op (kernels/ops.h), in the order x,
 * weight, y, then the RoPE checks of lb_check_rope_3d() on y (tables,
 * grid, positions) under the op name "rms_norm_rope".
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_rms_norm_rope (const LbTensor * x, const LbTensor * weight,
    const LbTensor * cos, const LbTensor * sin, int64_t grid_f,
    int64_t grid_h, int64_t grid_w, int64_t frame_offset, int64_t row_offset,
    const LbTensor * y, LbRowsGeom * g, GError ** error)
{
  const char *op = "rms_norm_rope";
  int64_t any2[2] = { LB_ANY, LB_ANY };
  memset (g, 0, sizeof *g);
  if (!lb_check_tensor (op, "x", x, LB_DTYPE_F32, 2, any2, FALSE, error) ||
      !lb_check_rows (op, "x", x, LB_ANY, &g->m, &g->x_ld, error))
    return FALSE;
  g->d = x->shape[1];
  if (!check_norm_affine (op, weight, NULL, g, error))
    return FALSE;
  int64_t yshape[3] = { g->m, LB_ANY, LB_ANY };
  if (y != NULL && y->dtype != LB_DTYPE_F32 && y->dtype != LB_DTYPE_BF16) {
    g_autofree char *have = lb_tensor_shape_string (y);
    return lb_check_fail (error, "%s: y is %s %s, expected f32 or bf16 [%"
        G_GINT64_FORMAT ", *, *]", op, lb_dtype_name (y->dtype), have, g->m);
  }
  if (!lb_check_tensor (op, "y", y, y != NULL ? y->dtype : LB_DTYPE_F32, 3,
          yshape, FALSE, error))
    return FALSE;
  if (y->shape[1] * y->shape[2] != g->d) {
    g_autofree char *have = lb_tensor_shape_string (y);
    return lb_check_fail (error, "%s: y is %s %s, expected [%"
        G_GINT64_FORMAT ", H, hd] with H * hd = %" G_GINT64_FORMAT, op,
        lb_dtype_name (y->dtype), have, g->m, g->d);
  }
  return check_rope (op, "y", y, cos, sin, grid_f, grid_h, grid_w,
      frame_offset, row_offset, error);
}

/**
 * lb_check_gated_residual_modulate:
 * @x: f32 rows [M, D], updated in place
 * @y: f32 rows [M, D]
 * @gate: (nullable): f32 [D] or rows [M, D]
 * @scale: f32 [D] or rows [M, D]
 * @shift: f32 [D] or rows [M, D]
 * @g: (out): the rows geometry (x_ld, y_ld, g_ld for @gate, s_ld for
 *   @scale, h_ld for @shift; 0 when broadcast or absent)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * The checks of the gated_residual_modulate op (kernels/ops.h), in the
 * order x, y, gate, scale, shift.
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_gated_residual_modulate (const LbTensor * x, const LbTensor * y,
    const LbTensor * gate, const LbTensor * scale, const LbTensor * shift,
    LbRowsGeom * g, GError ** error)
{
  const char *op = "gated_residual_modulate";
  return check_in_out (op, "x", x, y, FALSE, FALSE, g, error) &&
      check_gate (op, gate, g, &g->g_ld, error) &&
      check_scale_shift (op, scale, shift, g, error);
}

/**
 * lb_check_residual_norm_modulate:
 * @x: f32 rows [M, D], updated in place
 * @y: f32 rows [M, D]
 * @gate: (nullable): f32 [D] or rows [M, D]
 * @weight: (nullable): f32 [D]
 * @bias: (nullable): f32 [D]
 * @scale: f32 [D] or rows [M, D]
 * @shift: f32 [D] or rows [M, D]
 * @out: f32 or bf16 rows [M, D]
 * @g: (out): the rows geometry (x_ld, y_ld, g_ld for @gate, s_ld for
 *   @scale, h_ld for @shift, o_ld for @out; 0 when broadcast or absent)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * The checks of the residual_norm_modulate op (kernels/ops-list.h), in
 * the order x, y, gate, weight, bias, scale, shift, out.
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_residual_norm_modulate (const LbTensor * x, const LbTensor * y,
    const LbTensor * gate, const LbTensor * weight, const LbTensor * bias,
    const LbTensor * scale, const LbTensor * shift, const LbTensor * out,
    LbRowsGeom * g, GError ** error)
{
  const char *op = "residual_norm_modulate";
  return check_in_out (op, "x", x, y, FALSE, FALSE, g, error) &&
      check_gate (op, gate, g, &g->g_ld, error) &&
      check_norm_affine (op, weight, bias, g, error) &&
      check_scale_shift (op, scale, shift, g, error) &&
      check_out_rows (op, "out", out, x, g->m, g->d, FALSE, TRUE, &g->o_ld,
      error);
}

/**
 * lb_check_norm_fp8:
 * @x: f32 rows [M, D] (updated in place when @y is given)
 * @y: (nullable): f32 rows [M, D], the residual's addend
 * @gate: (nullable): f32 [D] or rows [M, D]; only with @y
 * @weight: (nullable): f32 [D]
 * @bias: (nullable): f32 [D]
 * @scale: (nullable): f32 [D] or rows [M, D]; given with @shift
 * @shift: (nullable): f32 [D] or rows [M, D]; given with @scale
 * @q: %LB_DTYPE_F8E4M3 rows [M, D]: a 2-D view with unit column stride or
 *   contiguous
 * @sq: f32 [M] contiguous
 * @g: (out): the rows geometry (x_ld, y_ld, g_ld for @gate, s_ld for
 *   @scale, h_ld for @shift, o_ld for @q; 0 when broadcast or absent)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * The checks of the norm_fp8 op (kernels/ops-list.h), in the order x, y,
 * gate, weight, bias, scale, shift, q, sq, with messages such as
 * "norm_fp8: q is f32 [4, 8], expected f8e4m3 [4, 8] with unit column
 * stride", "norm_fp8: sq is f32 [3], expected f32 [4] contiguous",
 * "norm_fp8: scale and shift must be given together", "norm_fp8: gate is
 * given without y".
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_norm_fp8 (const LbTensor * x, const LbTensor * y,
    const LbTensor * gate, const LbTensor * weight, const LbTensor * bias,
    const LbTensor * scale, const LbTensor * shift, const LbTensor * q,
    const LbTensor * sq, LbRowsGeom * g, GError ** error)
{
  const char *op = "norm_fp8";
  memset (g, 0, sizeof *g);
  if (!lb_check_rows (op, "x", x, LB_ANY, &g->m, &g->x_ld, error))
    return FALSE;
  g->d = x->shape[x->ndim - 1];
  if (y && !check_out_rows (op, "y", y, x, g->m, g->d, FALSE, FALSE, &g->y_ld,
          error))
    return FALSE;
  if (gate && !y)
    return lb_check_fail (error, "%s: gate is given without y", op);
  if (!check_gate (op, gate, g, &g->g_ld, error) ||
      !check_norm_affine (op, weight, bias, g, error))
    return FALSE;
  if ((scale == NULL) != (shift == NULL))
    return lb_check_fail (error, "%s: scale and shift must be given "
        "together", op);
  if (scale && !check_scale_shift (op, scale, shift, g, error))
    return FALSE;
  int64_t qm = 0, qd = 0;
  g_autofree char *qe = g_strdup_printf ("f8e4m3 [%" G_GINT64_FORMAT ", %"
      G_GINT64_FORMAT "] with unit column stride", g->m, g->d);
  if (!lb_check_present (op, "q", q, qe, error))
    return FALSE;
  if (q->dtype != LB_DTYPE_F8E4M3 || !as_matrix (q, &qm, &qd, &g->o_ld) ||
      qm != g->m || qd != g->d) {
    g_autofree char *qs = lb_tensor_shape_string (q);
    return lb_check_fail (error, "%s: q is %s %s, expected %s", op,
        lb_dtype_name (q->dtype), qs, qe);
  }
  g_autofree char *se = g_strdup_printf ("f32 [%" G_GINT64_FORMAT
      "] contiguous", g->m);
  if (!lb_check_present (op, "sq", sq, se, error))
    return FALSE;
  if (sq->dtype != LB_DTYPE_F32 || sq->ndim != 1 || sq->shape[0] != g->m ||
      !lb_tensor_is_contiguous (sq)) {
    g_autofree char *ss = lb_tensor_shape_string (sq);
    return lb_check_fail (error, "%s: sq is %s %s, expected %s", op,
        lb_dtype_name (sq->dtype), ss, se);
  }
  return TRUE;
}

/**
 * lb_check_ray_map:
 * @rel_poses: f32 [C, 16] contiguous
 * @width: output width in pixels
 * @height: output height in pixels
 * @row0: first latent row
 * @y: f32 [384, C, rows, width / 8] contiguous
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * The checks of the ray_map op (kernels/ops.h, spec 2.6-2.7), in the order
 * rel_poses, size, y, band: width and height positive multiples of 8,
 * latent rows [row0, row0 + rows) inside 0..height/8.
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_ray_map (const LbTensor * rel_poses, int width, int height,
    int row0, const LbTensor * y, GError ** error)
{
  const char *op = "ray_map";
  int64_t ps[2] = { LB_ANY, 16 };
  if (!lb_check_tensor (op, "rel_poses", rel_poses, LB_DTYPE_F32, 2, ps, TRUE,
          error))
    return FALSE;
  if (width <= 0 || height <= 0 || width % 8 || height % 8)
    return lb_check_fail (error, "%s: width %d and height %d must be "
        "positive multiples of 8", op, width, height);
  int64_t ys[4] = { 384, rel_poses->shape[0], LB_ANY, width / 8 };
  if (!lb_check_tensor (op, "y", y, LB_DTYPE_F32, 4, ys, TRUE, error))
    return FALSE;
  if (row0 < 0 || row0 + y->shape[2] > height / 8)
    return lb_check_fail (error, "%s: latent rows [%d, %" G_GINT64_FORMAT
        ") outside 0..%d", op, row0, row0 + y->shape[2], height / 8);
  return TRUE;
}

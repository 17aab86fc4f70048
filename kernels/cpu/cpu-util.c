/* lingbot-gst: argument checks and scratch memory for the CPU ops
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/cpu/cpu-internal.h"

#include <stdarg.h>

/**
 * lb_cpu_fail:
 * @error: (out) (optional): where the error goes
 * @format: printf format of the whole message ("op: ...")
 *
 * Sets an %LB_ERROR_SHAPE error.
 *
 * Returns: %FALSE, so callers can `return lb_cpu_fail (...)`.
 */
gboolean
lb_cpu_fail (GError ** error, const char *format, ...)
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

static gboolean
check_present (const char *op, const char *arg, const LbTensor * t,
    const char *expect, GError ** error)
{
  if (t == NULL)
    return lb_cpu_fail (error, "%s: %s is NULL, expected %s", op, arg, expect);
  if (t->device.type != LB_DEVICE_CPU)
    return lb_cpu_fail (error, "%s: %s is on device %s:%d, expected the CPU",
        op, arg, t->device.type == LB_DEVICE_CUDA ? "cuda" : "unknown",
        t->device.index);
  if (t->ndim < 0 || t->ndim > LB_MAX_DIMS)
    return lb_cpu_fail (error, "%s: %s has %d dimensions, expected %s", op,
        arg, t->ndim, expect);
  return TRUE;
}

/**
 * lb_cpu_check:
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
 * Returns: %TRUE when @t is a CPU tensor of the required dtype and shape.
 */
gboolean
lb_cpu_check (const char *op, const char *arg, const LbTensor * t,
    LbDType dtype, int ndim, const int64_t * shape, gboolean contiguous,
    GError ** error)
{
  g_autofree char *exp = expected_string (ndim, shape);
  if (t == NULL) {
    g_autofree char *e = g_strdup_printf ("%s %s", lb_dtype_name (dtype), exp);
    return check_present (op, arg, t, e, error);
  }
  if (!check_present (op, arg, t, exp, error))
    return FALSE;
  gboolean ok = t->dtype == dtype && t->ndim == ndim;
  for (int i = 0; ok && i < ndim; i++)
    if (shape[i] >= 0 && t->shape[i] != shape[i])
      ok = FALSE;
  if (!ok) {
    g_autofree char *have = lb_tensor_shape_string (t);
    return lb_cpu_fail (error, "%s: %s is %s %s, expected %s%s%s", op, arg,
        lb_dtype_name (t->dtype), have,
        t->dtype != dtype ? lb_dtype_name (dtype) : "",
        t->dtype != dtype ? " " : "", exp);
  }
  if (contiguous && !lb_tensor_is_contiguous (t)) {
    g_autofree char *have = lb_tensor_shape_string (t);
    g_autofree char *st = lb_shape_string (t->ndim, t->stride);
    return lb_cpu_fail (error,
        "%s: %s is %s %s with strides %s, expected a contiguous tensor", op,
        arg, lb_dtype_name (t->dtype), have, st);
  }
  return TRUE;
}

/**
 * lb_cpu_check_rows:
 * @op: op name for the message
 * @arg: argument name
 * @t: (nullable): the tensor
 * @cols: required last extent, or %LB_ANY
 * @rows: (out): number of rows
 * @ld: (out): elements between consecutive rows
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Accepts a float32 CPU tensor seen as a matrix of rows: either a 2-D view
 * whose columns have unit stride (a row-strided view) or a contiguous
 * tensor of any rank flattened to [numel / last, last].
 *
 * Returns: %TRUE when @t can be read as rows.
 */
gboolean
lb_cpu_check_rows (const char *op, const char *arg, const LbTensor * t,
    int64_t cols, int64_t * rows, int64_t * ld, GError ** error)
{
  const char *expect = cols >= 0 ? NULL : "f32 [..., D]";
  g_autofree char *e = cols >= 0 ?
      g_strdup_printf ("f32 [..., %" G_GINT64_FORMAT "]", cols) : NULL;
  if (!check_present (op, arg, t, e ? e : expect, error))
    return FALSE;
  if (t->dtype != LB_DTYPE_F32 || t->ndim < 1 ||
      (cols >= 0 && t->shape[t->ndim - 1] != cols)) {
    g_autofree char *have = lb_tensor_shape_string (t);
    return lb_cpu_fail (error, "%s: %s is %s %s, expected %s", op, arg,
        lb_dtype_name (t->dtype), have, e ? e : expect);
  }
  int64_t c = t->shape[t->ndim - 1];
  if (t->ndim == 2 && (t->stride[1] == 1 || c <= 1) &&
      (t->shape[0] <= 1 || t->stride[0] >= c)) {
    *rows = t->shape[0];
    *ld = t->shape[0] > 1 ? t->stride[0] : c;
    return TRUE;
  }
  if (!lb_tensor_is_contiguous (t)) {
    g_autofree char *have = lb_tensor_shape_string (t);
    g_autofree char *st = lb_shape_string (t->ndim, t->stride);
    return lb_cpu_fail (error, "%s: %s is %s %s with strides %s, expected "
        "a contiguous tensor or a 2-D view with unit column stride", op, arg,
        lb_dtype_name (t->dtype), have, st);
  }
  *rows = 1;
  for (int i = 0; i < t->ndim - 1; i++)
    *rows *= t->shape[i];
  *ld = c;
  return TRUE;
}

/* ---- scratch ---- */

typedef struct
{
  float *data;
  gsize n;
} Scratch;

static void
scratch_free (gpointer p)
{
  Scratch *sc = p;
  if (sc) {
    g_aligned_free (sc->data);
    g_free (sc);
  }
}

static GPrivate scratch_key = G_PRIVATE_INIT (scratch_free);

/**
 * lb_cpu_scratch:
 * @n_floats: floats needed
 *
 * Per-thread scratch memory for the CPU ops (im2col blocks, attention
 * tiles).  Each thread (the caller's, or an OpenMP worker) owns one
 * 64-byte-aligned buffer that only grows, so after the first chunk of a
 * stream no op allocates; it is freed when the thread exits.  The pointer
 * stays valid until the next call on the same thread with a larger size, so
 * an op takes its scratch once and does not call another op meanwhile.
 *
 * Returns: (transfer none): at least @n_floats floats, contents undefined.
 */
float *
lb_cpu_scratch (gsize n_floats)
{
  Scratch *sc = g_private_get (&scratch_key);
  if (sc == NULL) {
    sc = g_new0 (Scratch, 1);
    g_private_set (&scratch_key, sc);
  }
  if (sc->n < n_floats || sc->data == NULL) {
    gsize n = MAX (n_floats, MAX (sc->n + sc->n / 2, 1024));
    g_aligned_free (sc->data);
    sc->data = g_aligned_alloc (n, sizeof (float), 64);
    sc->n = n;
  }
  return sc->data;
}

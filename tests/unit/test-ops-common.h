/* lingbot-gst: helpers shared by the CPU op unit tests
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Inputs come from g_test_rand_*(), so a failure is reproduced with the
 * --seed that the test log prints.  Outputs are poisoned with NaN before
 * each call so an element the op forgets to write fails the comparison.
 * References are computed in double; the comparison metric is the golden
 * README's rel_to_max: max |got - ref| / max |ref| (max |ref| floored at 1e-30
 * so an all-zero reference demands exact zeros, or at a caller's scale).
 */
#pragma once

#include "kernels/backend.h"
#include "kernels/cpu/cpu-internal.h"

#include <math.h>
#include <string.h>

/* The bits of a float and back (bf16 tests). */
static inline uint32_t
f2u (float v)
{
  uint32_t u;
  memcpy (&u, &v, 4);
  return u;
}

static inline float
u2f (uint32_t u)
{
  float v;
  memcpy (&v, &u, 4);
  return v;
}

static inline LbStream *
test_stream (void)
{
  static LbStream *s;
  if (s == NULL)
    s = lb_cpu_backend ()->stream_new (lb_cpu_backend (), 0, NULL);
  return s;
}

static inline LbTensor *
tensor_new (int ndim, const int64_t * shape)
{
  return lb_tensor_new (LB_DTYPE_F32, ndim, shape);
}

/* A contiguous f32 tensor of uniform values in [lo, hi). */
static inline LbTensor *
rand_tensor (int ndim, const int64_t * shape, double lo, double hi)
{
  LbTensor *t = tensor_new (ndim, shape);
  float *d = t->data;
  int64_t n = lb_tensor_numel (t);
  for (int64_t i = 0; i < n; i++)
    d[i] = (float) g_test_rand_double_range (lo, hi);
  return t;
}

static inline void
poison (LbTensor * t)
{
  /* every float of the storage, so views poison their gaps as well */
  float *d = t->storage ? t->storage->data : t->data;
  gsize n = t->storage ? t->storage->nbytes / sizeof (float) :
      (gsize) lb_tensor_numel (t);
  for (gsize i = 0; i < n; i++)
    d[i] = NAN;
}

static inline LbTensor *
poisoned (int ndim, const int64_t * shape)
{
  LbTensor *t = tensor_new (ndim, shape);
  poison (t);
  return t;
}

/* Element @flat (row-major over the shape) of a possibly strided f32. */
static inline float
at (const LbTensor * t, int64_t flat)
{
  int64_t off = 0;
  for (int i = t->ndim - 1; i >= 0; i--) {
    off += (flat % t->shape[i]) * t->stride[i];
    flat /= t->shape[i];
  }
  return ((const float *) t->data)[off];
}

/* Compares every element of @got (any strides) to @ref with the
 * rel_to_max metric; reports the worst element on failure. */
static inline void
assert_close_ (const char *file, int line, const char *what,
    const LbTensor * got, const double *ref, double tol, double scale)
{
  int64_t n = lb_tensor_numel (got);
  double maxref = MAX (scale, 1e-30), worst = 0.0;
  int64_t worst_i = -1;
  for (int64_t i = 0; i < n; i++)
    maxref = MAX (maxref, fabs (ref[i]));
  for (int64_t i = 0; i < n; i++) {
    double e = fabs ((double) at (got, i) - ref[i]);
    if (!(e <= worst) || isnan (e)) {
      worst = isnan (e) ? INFINITY : e;
      worst_i = i;
      if (isnan (e))
        break;
    }
  }
  if (n > 0 && worst_i >= 0 && !(worst <= tol * maxref)) {
    g_autofree char *shape = lb_tensor_shape_string (got);
    g_autofree char *msg = g_strdup_printf ("%s %s: element %" G_GINT64_FORMAT
        " is %.9g, reference %.9g (error %.3g, rel_to_max %.3g > tol %.3g)",
        what, shape, worst_i, (double) at (got, worst_i), ref[worst_i],
        worst, worst / maxref, tol);
    g_assertion_message (G_LOG_DOMAIN, file, line, G_STRFUNC, msg);
  }
}

#define assert_close(what, got, ref, tol) \
  assert_close_ (__FILE__, __LINE__, what, got, ref, tol, 0.0)

/* The same with the denominator at least @scale: for ops whose result can
 * cancel (x*(1+s) + shift), where rounding is relative to the terms. */
#define assert_close_scaled(what, got, ref, tol, scale) \
  assert_close_ (__FILE__, __LINE__, what, got, ref, tol, scale)

/* Runs an op call expression that must fail with LB_ERROR_SHAPE and the
 * exact message @msg (NULL: any message). */
#define assert_op_error(call, msg) G_STMT_START { \
    GError *err_ = NULL; \
    GError **error = &err_; \
    gboolean ok_ = (call); \
    g_assert_false (ok_); \
    g_assert_error (err_, LB_ERROR, LB_ERROR_SHAPE); \
    if ((msg) != NULL) \
      g_assert_cmpstr (err_->message, ==, (msg)); \
    g_clear_error (&err_); \
  } G_STMT_END

#define assert_op_ok(call) G_STMT_START { \
    GError *err_ = NULL; \
    GError **error = &err_; \
    gboolean ok_ = (call); \
    g_assert_no_error (err_); \
    g_assert_true (ok_); \
  } G_STMT_END

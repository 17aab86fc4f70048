/* lingbot-gst: a backend's result against the CPU's (tests): upload,
 * compare
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Shared by the CUDA parity tests (tests/gpu/gpu-test-util.h), the
 * table of op cases (tests/common/op-cases.c) and the fakedev op tests.
 * Header-only.
 */
#pragma once

#include "kernels/backend.h"

#include <math.h>

/* A device copy of a contiguous host tensor (any dtype) on @s's device. */
static inline LbTensor *
test_upload (LbStream * s, const LbTensor * h)
{
  g_autoptr (GError) err = NULL;
  LbTensor *d = lb_tensor_new_on (s, h->dtype, h->ndim, h->shape, &err);
  g_assert_no_error (err);
  g_assert_true (lb_tensor_upload (s, d, h, &err));
  g_assert_no_error (err);
  return d;
}

/* Compares host tensors (any strides) over their elements:
 * `max |ref - got| <= tol * max(max |ref|, 1e-30)` over the finite
 * elements, and the same non-finite elements on both (a NaN matches any
 * NaN); a failure names the first mismatched non-finite element or the
 * largest difference. */
static inline void
test_compare (const char *what, const LbTensor * ref, const LbTensor * got,
    double tol)
{
  g_assert_cmpint (ref->ndim, ==, got->ndim);
  g_assert_true (lb_tensor_same_shape (ref, got));
  g_autoptr (LbTensor) a = lb_tensor_new (LB_DTYPE_F32, ref->ndim, ref->shape);
  g_autoptr (LbTensor) b = lb_tensor_new (LB_DTYPE_F32, got->ndim, got->shape);
  g_assert_true (lb_tensor_copy_into (a, ref, NULL));
  g_assert_true (lb_tensor_copy_into (b, got, NULL));
  const float *x = a->data, *y = b->data;
  double maxabs = 0, maxdiff = 0;
  int64_t bad = -1, n = lb_tensor_numel (a);
  for (int64_t i = 0; i < n; i++) {
    if (isfinite (x[i]))
      maxabs = fmax (maxabs, fabs (x[i]));
    if (isfinite (x[i]) != isfinite (y[i]) ||
        (!isfinite (x[i]) && !(isnan (x[i]) && isnan (y[i])) && x[i] != y[i])) {
      if (bad < 0)
        bad = i;
      continue;
    }
    if (isfinite (x[i]))
      maxdiff = fmax (maxdiff, fabs ((double) x[i] - y[i]));
  }
  g_autofree char *shape = lb_tensor_shape_string (ref);
  double rel = maxdiff / fmax (maxabs, 1e-30);
  g_test_message ("%s %s: max |ref| %.3g, max diff %.3g, rel %.3g (tol %.1g)",
      what, shape, maxabs, maxdiff, rel, tol);
  if (bad >= 0)
    g_error ("%s %s: element %" G_GINT64_FORMAT
        " is %g on the device, %g on the CPU", what, shape, bad, y[bad],
        x[bad]);
  if (!(maxdiff <= tol * fmax (maxabs, 1e-30)))
    g_error ("%s %s: max diff %.3g > %.1g * max |ref| %.3g", what, shape,
        maxdiff, tol, maxabs);
}

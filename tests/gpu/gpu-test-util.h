/* lingbot-gst: helpers for the CUDA parity tests (header-only)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A parity case builds random host tensors, uploads them, runs the CPU op
 * on the host copies and the CUDA op on the device copies, downloads and
 * compares.  Device outputs are poisoned first (a NaN upload), so an
 * element the CUDA op does not write shows up as NaN and fails.
 * Comparisons are `max |cpu - cuda| <= tol * max(max |cpu|, 1e-30)`, with
 * any NaN/Inf mismatch a failure.
 */
#pragma once

#include "lingbot/backend.h"
#include "kernels/cpu/cpu-internal.h"
#include "tests/common/test-compare.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct
{
  LbBackend *cpu, *cuda;
  LbStream *cs, *gs;
  GRand *rand;
} GpuCtx;

static GpuCtx gctx;

/* main(): returns FALSE (and prints SKIP) when there is no CUDA device. */
static inline gboolean
gpu_ctx_init (void)
{
  g_autoptr (GError) err = NULL;
  gctx.cuda = lingbot_backend_cuda (&err);
  if (gctx.cuda == NULL) {
    printf ("SKIP: %s\n", err->message);
    return FALSE;
  }
  gctx.cpu = lb_cpu_backend ();
  gctx.cs = gctx.cpu->stream_new (gctx.cpu, 0, NULL);
  gctx.gs = gctx.cuda->stream_new (gctx.cuda, 0, &err);
  if (gctx.gs == NULL) {
    printf ("SKIP: no CUDA stream: %s\n", err->message);
    return FALSE;
  }
  gctx.rand = g_rand_new_with_seed (1234);
  return TRUE;
}

static inline LbTensor *
host_random (int ndim, const int64_t * shape, double lo, double hi)
{
  LbTensor *t = lb_tensor_new (LB_DTYPE_F32, ndim, shape);
  float *d = t->data;
  for (int64_t i = 0; i < lb_tensor_numel (t); i++)
    d[i] = (float) g_rand_double_range (gctx.rand, lo, hi);
  return t;
}

static inline LbTensor *
host_rand (int ndim, const int64_t * shape)
{
  return host_random (ndim, shape, -1.0, 1.0);
}

static inline LbTensor *
host_nan (int ndim, const int64_t * shape)
{
  LbTensor *t = lb_tensor_new (LB_DTYPE_F32, ndim, shape);
  float *d = t->data;
  for (int64_t i = 0; i < lb_tensor_numel (t); i++)
    d[i] = NAN;
  return t;
}

/* Device copy of a contiguous host tensor (any dtype). */
static inline LbTensor *
to_dev (const LbTensor * h)
{
  g_autoptr (GError) err = NULL;
  LbTensor *d = lb_tensor_new_on (gctx.gs, h->dtype, h->ndim, h->shape, &err);
  g_assert_no_error (err);
  g_assert_true (lb_tensor_upload (gctx.gs, d, h, &err));
  g_assert_no_error (err);
  g_assert_true (gctx.gs->backend->stream_synchronize (gctx.gs, &err));
  return d;
}

/* A poisoned (NaN) device tensor of @shape. */
static inline LbTensor *
dev_poison (int ndim, const int64_t * shape)
{
  g_autoptr (LbTensor) h = host_nan (ndim, shape);
  return to_dev (h);
}

/* Host copy of a contiguous device tensor. */
static inline LbTensor *
to_host (const LbTensor * d)
{
  g_autoptr (GError) err = NULL;
  LbTensor *h = lb_tensor_new (d->dtype, d->ndim, d->shape);
  g_assert_true (lb_tensor_download (gctx.gs, h, d, &err));
  g_assert_no_error (err);
  return h;
}

/* A view of @parent (host or device) with @child's geometry relative to
 * @child_parent: same offset, shape and strides. */
static inline void
view_like (LbTensor * out, const LbTensor * parent, const LbTensor * child,
    const LbTensor * child_parent)
{
  gsize es = lb_dtype_size (child->dtype);
  ptrdiff_t off = ((const char *) child->data -
      (const char *) child_parent->data) / (ptrdiff_t) es;
  lb_tensor_view_init (out, child->dtype, (float *) parent->data + off,
      parent->device, child->ndim, child->shape, child->stride);
}

/* Compares host tensors (any strides) over their elements. */
static inline void
compare (const char *what, const LbTensor * ref, const LbTensor * got,
    double tol)
{
  test_compare (what, ref, got, tol);
}

/* Compares a device tensor with the host reference. */
static inline void
compare_dev (const char *what, const LbTensor * ref, const LbTensor * dev,
    double tol)
{
  g_autoptr (LbTensor) h = to_host (dev);
  compare (what, ref, h, tol);
}

/* Both backends must fail with the same message (device-free argument
 * errors). */
static inline void
same_error (const char *what, gboolean cpu_ok, GError * cpu_err,
    gboolean gpu_ok, GError * gpu_err)
{
  g_assert_false (cpu_ok);
  g_assert_false (gpu_ok);
  g_assert_nonnull (cpu_err);
  g_assert_nonnull (gpu_err);
  g_test_message ("%s: %s", what, gpu_err->message);
  g_assert_error (gpu_err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpstr (gpu_err->message, ==, cpu_err->message);
}

#define S(...) ((const int64_t[]) { __VA_ARGS__ })

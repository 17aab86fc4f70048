/* lingbot-gst: the CPU backend (always present; the oracle)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/backend.h"
#include "kernels/cpu/cpu-internal.h"
#include "kernels/cpu/cpu-ops.h"
#include "kernels/error.h"

#include <stdlib.h>
#include <string.h>

/* 64-byte aligned host memory; a size the machine cannot give is an
 * error, not an abort (tensor channel slots are sized by a session's
 * geometry) */
static gpointer
cpu_alloc (LbBackend * self, int device, gsize nbytes, GError ** error)
{
  void *ptr = NULL;
  if (posix_memalign (&ptr, 64, MAX (nbytes, 1)) != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "cannot allocate %" G_GSIZE_FORMAT " bytes of host memory", nbytes);
    return NULL;
  }
  return ptr;
}

static void
cpu_free (LbBackend * self, int device, gpointer ptr)
{
  free (ptr);
}

static gboolean
cpu_copy (LbStream * stream, void *dst, const void *src, gsize nbytes,
    LbCopyKind kind, GError ** error)
{
  memmove (dst, src, nbytes);
  return TRUE;
}

static LbStream *
cpu_stream_new (LbBackend * self, int device, GError ** error)
{
  LbStream *s = g_new0 (LbStream, 1);
  s->backend = self;
  s->device = 0;
  /* no OpenBLAS advice: the ranks' GEMMs are lb_cpu_sgemm() (gemm.c,
   * docs/design.md "Determinism"), whatever kernels OpenBLAS chose */
  return s;
}

static void
cpu_stream_free (LbStream * stream)
{
  g_free (stream);
}

static gboolean
cpu_stream_synchronize (LbStream * stream, GError ** error)
{
  return TRUE;
}

static LbBackend cpu_backend = {
  .name = "cpu",
  .device_type = LB_DEVICE_CPU,
  .device_count = 1,
  .ops = &lb_cpu_ops,
  .alloc = cpu_alloc,
  .free = cpu_free,
  .copy = cpu_copy,
  .stream_new = cpu_stream_new,
  .stream_free = cpu_stream_free,
  .stream_synchronize = cpu_stream_synchronize,
};

/**
 * lb_cpu_backend:
 *
 * Returns: (transfer none): the process-wide CPU backend.
 */
LbBackend *
lb_cpu_backend (void)
{
  return &cpu_backend;
}

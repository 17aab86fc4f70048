/* lingbot-gst: scratch memory for the CPU ops
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/cpu/cpu-internal.h"

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

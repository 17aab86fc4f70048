/* lingbot-gst: scratch memory for the CPU ops
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/cpu/cpu-internal.h"

/* ---- scratch ---- */

typedef struct
{
  float *data[LB_CPU_SCRATCH_SLOTS];
  gsize n[LB_CPU_SCRATCH_SLOTS];
  float *input;                 /* lb_cpu_scratch_try()'s, g_try_malloc'd */
  gsize n_input;
} Scratch;

static void
scratch_free (gpointer p)
{
  Scratch *sc = p;
  if (sc) {
    for (int i = 0; i < LB_CPU_SCRATCH_SLOTS; i++)
      g_aligned_free (sc->data[i]);
    g_free (sc->input);
    g_free (sc);
  }
}

static GPrivate scratch_key = G_PRIVATE_INIT (scratch_free);

static Scratch *
thread_scratch (void)
{
  Scratch *sc = g_private_get (&scratch_key);
  if (sc == NULL) {
    sc = g_new0 (Scratch, 1);
    g_private_set (&scratch_key, sc);
  }
  return sc;
}

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
  return lb_cpu_scratch_slot (0, n_floats);
}

/**
 * lb_cpu_scratch_slot:
 * @slot: 0 .. %LB_CPU_SCRATCH_SLOTS - 1 (0 is lb_cpu_scratch()'s)
 * @n_floats: floats needed
 *
 * lb_cpu_scratch() with a buffer of its own per slot, for an op that needs
 * one buffer shared by its OpenMP team (taken on the calling thread,
 * slot 1) beside every thread's own (slot 0); slot 2 holds the packed
 * weight of lb_cpu_sgemm(), which an op may call while it holds the other
 * two.
 *
 * Returns: (transfer none): at least @n_floats floats, 64-byte aligned.
 */
float *
lb_cpu_scratch_slot (int slot, gsize n_floats)
{
  g_return_val_if_fail (slot >= 0 && slot < LB_CPU_SCRATCH_SLOTS, NULL);
  Scratch *sc = thread_scratch ();
  if (sc->n[slot] < n_floats || sc->data[slot] == NULL) {
    gsize n = MAX (n_floats, MAX (sc->n[slot] + sc->n[slot] / 2, 1024));
    g_aligned_free (sc->data[slot]);
    sc->data[slot] = g_aligned_alloc (n, sizeof (float), 64);
    sc->n[slot] = n;
  }
  return sc->data[slot];
}

/**
 * lb_cpu_scratch_try:
 * @n_floats: floats needed
 *
 * A third per-thread buffer, for a copy of an op's input whose size the
 * caller's data sets (the f32 widening of a bf16 conv input): it grows
 * like lb_cpu_scratch()'s, so a stream's steady chunks allocate nothing,
 * but with g_try_malloc(), so a size that cannot be had is the caller's
 * error to report, not an abort.  16-byte aligned.
 *
 * Returns: (transfer none) (nullable): at least @n_floats floats, or
 * %NULL when they cannot be allocated.
 */
float *
lb_cpu_scratch_try (gsize n_floats)
{
  Scratch *sc = thread_scratch ();
  if (sc->n_input < n_floats || sc->input == NULL) {
    gsize n = MAX (n_floats, MAX (sc->n_input + sc->n_input / 2, 1024));
    g_free (sc->input);
    sc->n_input = 0;
    if (n > G_MAXSIZE / sizeof (float)
        || (sc->input = g_try_malloc (n * sizeof (float))) == NULL)
      return NULL;
    sc->n_input = n;
  }
  return sc->input;
}

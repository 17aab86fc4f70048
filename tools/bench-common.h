/* lingbot-gst: what the lingbot-bench programs share: timing, sorting and
 * percentiles
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Static inline functions: tests/bench and tests/vae build tools/bench-dit.c
 * and tools/bench-vae.c into programs of their own, with no further file
 * of lingbot-bench's.
 */
#pragma once

#include <glib.h>
#include <stdlib.h>

G_BEGIN_DECLS

/**
 * lingbot_bench_seconds_since:
 * @t0: a g_get_monotonic_time() reading
 *
 * Returns: the seconds since @t0
 */
static inline double
lingbot_bench_seconds_since (gint64 t0)
{
  return (g_get_monotonic_time () - t0) / 1e6;
}

/**
 * lingbot_bench_cmp_double:
 * @a: a double
 * @b: another
 *
 * The qsort() order of doubles (ascending).
 *
 * Returns: -1, 0 or 1
 */
static inline int
lingbot_bench_cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

/**
 * lingbot_bench_sort:
 * @v: (array length=n): doubles, sorted in place
 * @n: how many
 *
 * Sorts @v ascending.
 */
static inline void
lingbot_bench_sort (double *v, gsize n)
{
  qsort (v, n, sizeof (double), lingbot_bench_cmp_double);
}

/**
 * lingbot_bench_percentile:
 * @sorted: (array length=n): ascending doubles
 * @n: how many
 * @p: the fraction, 0 to 1
 *
 * Linear interpolation between the closest ranks (numpy's default).
 *
 * Returns: the @p quantile of @sorted, 0 when @n is 0
 */
static inline double
lingbot_bench_percentile (const double *sorted, gsize n, double p)
{
  if (n == 0)
    return 0.0;
  double pos = p * (n - 1);
  gsize i = (gsize) pos;
  double f = pos - i;
  return i + 1 < n ? sorted[i] * (1 - f) + sorted[i + 1] * f : sorted[i];
}

G_END_DECLS

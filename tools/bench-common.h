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
#include <glib/gstdio.h>
#include <stdlib.h>
#include <unistd.h>

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

/**
 * lingbot_bench_check_output:
 * @path: (nullable): the --output file, %NULL for stdout
 * @error: %G_OPTION_ERROR_BAD_VALUE naming @path and what is wrong
 *
 * Refuses an --output the report could not be written to (its directory
 * missing or not writable, or @path a directory) before the run, not
 * after it: a run can take minutes (a 60 s replay, a 14B chunk on GPUs)
 * and its figures would be lost.
 *
 * Returns: %TRUE when @path is %NULL or its directory takes a new file.
 */
static inline gboolean
lingbot_bench_check_output (const char *path, GError ** error)
{
  if (path == NULL)
    return TRUE;
  g_autofree char *dir = g_path_get_dirname (path);
  const char *what = NULL;
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    what = "is a directory";
  else if (!g_file_test (dir, G_FILE_TEST_IS_DIR))
    what = "its directory does not exist";
  else if (g_access (dir, W_OK) != 0)
    what = "its directory is not writable";
  if (what) {
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
        "--output %s: %s", path, what);
    return FALSE;
  }
  return TRUE;
}

G_END_DECLS

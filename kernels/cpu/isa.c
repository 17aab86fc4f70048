/* lingbot-gst: the instruction set the CPU kernels run with
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The library is built for the baseline of its architecture (never
 * -march=native: the next machine may be another CPU).  The hot kernels
 * are also compiled for x86-64-v3 (AVX2 + FMA) and x86-64-v4 (AVX-512) and
 * pick their variant here at run time: the best the CPU and the OS
 * support, or lower with LINGBOT_CPU_ISA=baseline|avx2|avx512 (tests run
 * every variant the machine has).
 */
#include "kernels/cpu/cpu-internal.h"
#include "lingbot-config.h"

#include <string.h>

/* OpenBLAS: 0 sequential, 1 pthreads, 2 OpenMP */
int openblas_get_parallel (void);
char *openblas_get_corename (void);

static const char *const isa_names[] = { "baseline", "avx2", "avx512" };

static gint selected = -1;

/**
 * lb_cpu_isa_best:
 *
 * Returns: the best #LbCpuIsa this CPU (and its OS) supports:
 * %LB_CPU_ISA_AVX512 with AVX-512 F/CD/BW/DQ/VL, %LB_CPU_ISA_AVX2 with
 * AVX2 + FMA, else %LB_CPU_ISA_BASELINE (also on every non-x86 build).
 */
LbCpuIsa
lb_cpu_isa_best (void)
{
#if LB_CPU_HAVE_X86_ISAS
  __builtin_cpu_init ();
  if (__builtin_cpu_supports ("avx512f") && __builtin_cpu_supports ("avx512vl")
      && __builtin_cpu_supports ("avx512bw")
      && __builtin_cpu_supports ("avx512dq")
      && __builtin_cpu_supports ("avx512cd"))
    return LB_CPU_ISA_AVX512;
  if (__builtin_cpu_supports ("avx2") && __builtin_cpu_supports ("fma"))
    return LB_CPU_ISA_AVX2;
#endif
  return LB_CPU_ISA_BASELINE;
}

/**
 * lb_cpu_isa_name:
 * @isa: an #LbCpuIsa
 *
 * Returns: "baseline", "avx2" or "avx512".
 */
const char *
lb_cpu_isa_name (LbCpuIsa isa)
{
  return (guint) isa < G_N_ELEMENTS (isa_names) ? isa_names[isa] : "?";
}

/**
 * lb_cpu_isa_parse:
 * @name: "baseline", "avx2" or "avx512"
 * @isa: (out): the matching #LbCpuIsa
 *
 * Returns: whether @name is one of them.
 */
gboolean
lb_cpu_isa_parse (const char *name, LbCpuIsa * isa)
{
  for (guint i = 0; name && i < G_N_ELEMENTS (isa_names); i++) {
    if (strcmp (name, isa_names[i]) == 0) {
      *isa = (LbCpuIsa) i;
      return TRUE;
    }
  }
  return FALSE;
}

/**
 * lb_cpu_isa:
 *
 * The variant the CPU kernels run: lb_cpu_isa_best(), or
 * LINGBOT_CPU_ISA's value when it is lower (read on the first call; a
 * value above the best, or not a name, is warned about and ignored), or
 * what lb_cpu_isa_set() chose.
 *
 * Returns: the #LbCpuIsa in use.
 */
LbCpuIsa
lb_cpu_isa (void)
{
  gint v = g_atomic_int_get (&selected);
  if (v >= 0)
    return (LbCpuIsa) v;
  LbCpuIsa best = lb_cpu_isa_best (), isa = best;
  const char *env = g_getenv ("LINGBOT_CPU_ISA");
  if (env && *env) {
    LbCpuIsa want;
    if (!lb_cpu_isa_parse (env, &want))
      g_warning ("LINGBOT_CPU_ISA=%s: not baseline, avx2 or avx512; using "
          "%s", env, lb_cpu_isa_name (best));
    else if (want > best)
      g_warning ("LINGBOT_CPU_ISA=%s: this CPU supports at most %s", env,
          lb_cpu_isa_name (best));
    else
      isa = want;
  }
  g_atomic_int_compare_and_exchange (&selected, -1, (gint) isa);
  return (LbCpuIsa) g_atomic_int_get (&selected);
}

/**
 * lb_cpu_isa_set:
 * @isa: the variant to run, at most lb_cpu_isa_best()
 *
 * For tests and benchmarks: runs the CPU kernels with @isa from now on
 * (process-wide; not while another thread runs a CPU op).
 *
 * Returns: %FALSE (and nothing changes) when the CPU lacks @isa.
 */
gboolean
lb_cpu_isa_set (LbCpuIsa isa)
{
  if (isa > lb_cpu_isa_best ())
    return FALSE;
  g_atomic_int_set (&selected, (gint) isa);
  return TRUE;
}

/**
 * lb_cpu_blas_threading:
 *
 * How the linked OpenBLAS runs its threads: "openmp" (the build meson.build
 * asks for: one pool with the kernels' OpenMP loops, and cblas calls made
 * inside a parallel region run on the calling thread), "pthreads" (a pool
 * of its own) or "sequential".
 *
 * Returns: (transfer none): the name.
 */
const char *
lb_cpu_blas_threading (void)
{
  switch (openblas_get_parallel ()) {
    case 0:
      return "sequential";
    case 1:
      return "pthreads";
    default:
      return "openmp";
  }
}

/**
 * lb_cpu_blas_expected:
 *
 * Returns: what lb_cpu_blas_threading() must say for this build: "openmp"
 * when meson found OpenBLAS's OpenMP build (LINGBOT_BLAS_OPENMP), else
 * %NULL (anything goes).
 */
const char *
lb_cpu_blas_expected (void)
{
  return LINGBOT_BLAS_OPENMP ? "openmp" : NULL;
}

/* OpenBLAS's x86 core names and the instruction set of their sgemm
 * kernels (lower case; names not listed are taken as the baseline) */
static const struct
{
  const char *name;
  LbCpuIsa isa;
} blas_cores[] = {
  {"skylakex", LB_CPU_ISA_AVX512}, {"cooperlake", LB_CPU_ISA_AVX512},
  {"sapphirerapids", LB_CPU_ISA_AVX512}, {"haswell", LB_CPU_ISA_AVX2},
  {"zen", LB_CPU_ISA_AVX2}, {"skylake", LB_CPU_ISA_AVX2},
};

/**
 * lb_cpu_blas_core:
 * @isa: (out) (optional): the #LbCpuIsa of that core's kernels
 *
 * The kernels OpenBLAS chose when it loaded (openblas_get_corename():
 * "SkylakeX", "Haswell", "Prescott", ...; OPENBLAS_CORETYPE overrides its
 * choice).
 *
 * Returns: (transfer none): the core's name.
 */
const char *
lb_cpu_blas_core (LbCpuIsa * isa)
{
  const char *core = openblas_get_corename ();
  if (core == NULL)
    core = "unknown";
  if (isa) {
    *isa = LB_CPU_ISA_BASELINE;
    for (guint i = 0; i < G_N_ELEMENTS (blas_cores); i++)
      if (g_ascii_strcasecmp (core, blas_cores[i].name) == 0)
        *isa = blas_cores[i].isa;
  }
  return core;
}

/**
 * lb_cpu_blas_advice:
 *
 * When OpenBLAS runs kernels below this CPU's instruction set (it falls
 * back to Prescott, SSE3, for a CPU model it does not know, such as
 * family 6 model 207 under OpenBLAS 0.3.21; every sgemm then runs several
 * times slower), the OPENBLAS_CORETYPE to set before the process starts
 * ("SkylakeX" with AVX-512, "Haswell" with AVX2), as
 * tools/openblas-coretype.sh prints it.  OpenBLAS reads it when it loads,
 * before liblingbot's code runs, so the library cannot set it itself.
 *
 * Returns: (nullable): the core type to set, or %NULL when OpenBLAS's
 * kernels match the CPU (or OPENBLAS_CORETYPE is set already).
 */
const char *
lb_cpu_blas_advice (void)
{
  LbCpuIsa core_isa;
  lb_cpu_blas_core (&core_isa);
  const LbCpuIsa best = lb_cpu_isa_best ();
  const char *env = g_getenv ("OPENBLAS_CORETYPE");
  if (core_isa >= best || (env && *env))
    return NULL;
  return best >= LB_CPU_ISA_AVX512 ? "SkylakeX" : "Haswell";
}

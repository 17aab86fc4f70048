/* lingbot-gst: the per-ISA tables of the element-wise and norm row kernels
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * rows-item.h is compiled three times here: for the baseline (4 lanes),
 * x86-64-v3 (AVX2 + FMA, 8 lanes) and x86-64-v4 (AVX-512, 16 lanes), and
 * lb_cpu_row_kernels() hands the ops in elementwise.c and norm.c the one
 * lb_cpu_isa() chose.  The library itself is built for the baseline.
 */
#include "kernels/cpu/cpu-internal.h"

#include <math.h>
#include <string.h>

#define VW 4
#define ROWS_FN(name) rows_baseline_##name
#define ROWS_TARGET
#define ROWS_TABLE rows_baseline
#define VFMA(a, b, c) LB_CPU_FMA_BASELINE (VF, a, b, c)
#include "kernels/cpu/rows-item.h"

#if LB_CPU_HAVE_X86_ISAS
#define VW 8
#define ROWS_FN(name) rows_avx2_##name
#define ROWS_TARGET LB_CPU_TARGET_AVX2
#define ROWS_TABLE rows_avx2
#define VFMA(a, b, c) LB_CPU_FMA_AVX2 (VF, a, b, c)
#include "kernels/cpu/rows-item.h"

#define VW 16
#define ROWS_FN(name) rows_avx512_##name
#define ROWS_TARGET LB_CPU_TARGET_AVX512
#define ROWS_TABLE rows_avx512
#define VFMA(a, b, c) LB_CPU_FMA_AVX512 (VF, a, b, c)
#include "kernels/cpu/rows-item.h"
#endif

/**
 * lb_cpu_row_kernels:
 *
 * Returns: (transfer none): the row kernels of the variant lb_cpu_isa()
 * runs (read on every call, so lb_cpu_isa_set() takes effect at once).
 */
const LbCpuRowKernels *
lb_cpu_row_kernels (void)
{
#if LB_CPU_HAVE_X86_ISAS
  switch (lb_cpu_isa ()) {
    case LB_CPU_ISA_AVX512:
      return &rows_avx512;
    case LB_CPU_ISA_AVX2:
      return &rows_avx2;
    default:
      break;
  }
#endif
  return &rows_baseline;
}

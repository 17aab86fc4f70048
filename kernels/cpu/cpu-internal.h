/* lingbot-gst: helpers shared by the CPU op implementations
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Everything here is internal to the CPU backend (and its unit tests): the
 * op functions that fill lb_cpu_ops, the per-thread scratch buffer and the
 * tiling knobs.  Argument checks are the backend-independent ones of
 * kernels/ops-check.h.
 */
#pragma once

#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/ops-check.h"
#include "kernels/raymap.h"

G_BEGIN_DECLS

/* Where every tensor of a CPU op lives (lb_check_devices()). */
#define LB_CPU_DEVICE LB_DEVICE_HOST

/* ---- instruction set (isa.c) ---- */

/**
 * LbCpuIsa:
 * @LB_CPU_ISA_BASELINE: the architecture's baseline (x86-64: SSE2)
 * @LB_CPU_ISA_AVX2: x86-64-v3 (AVX2, FMA)
 * @LB_CPU_ISA_AVX512: x86-64-v4 (AVX-512 F, CD, BW, DQ, VL)
 *
 * The variants of the hot CPU kernels, chosen at run time (lb_cpu_isa()).
 */
typedef enum
{
  LB_CPU_ISA_BASELINE,
  LB_CPU_ISA_AVX2,
  LB_CPU_ISA_AVX512,
} LbCpuIsa;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LB_CPU_HAVE_X86_ISAS 1
#define LB_CPU_TARGET_AVX2 __attribute__ ((target ("arch=x86-64-v3")))
#define LB_CPU_TARGET_AVX512 __attribute__ ((target ("arch=x86-64-v4")))
#include <immintrin.h>
#else
#define LB_CPU_HAVE_X86_ISAS 0
#endif

/* Fused multiply-adds, written where they are wanted.  The files that
 * compile the per-ISA kernels (attention.c, conv.c and rows.c, with the
 * *-item.h they include) are built with -ffp-contract=off
 * (kernels/cpu/meson.build): left to itself, the compiler contracts
 * a * b + c into an FMA only where its inlining and scheduling leave the
 * operands in registers, so the full-vector and the partial-vector path of
 * one kernel could round differently and an element's bits would depend on
 * where its span starts (an AddressSanitizer build did exactly that to
 * modulate: vfmadd on the full vectors, vmulps + vaddps on the last
 * partial one).  Each variant defines VFMA (a, b, c) = a * b + c from one
 * of these, VT its vector type; an operand may be a vector or a float (a
 * float is broadcast: x - 0 is x for every x, -0 included).  The baseline
 * (SSE2) has no FMA instruction and rounds twice, as it always did. */
#define LB_CPU_FMA_BASELINE(VT, a, b, c) ((a) * (b) + (c))
#define LB_CPU_VEC(VT, x) ((x) - (VT) { 0 })
#if LB_CPU_HAVE_X86_ISAS
#define LB_CPU_FMA_AVX2(VT, a, b, c) ((VT) _mm256_fmadd_ps ( \
      (__m256) LB_CPU_VEC (VT, a), (__m256) LB_CPU_VEC (VT, b), \
      (__m256) LB_CPU_VEC (VT, c)))
#define LB_CPU_FMA_AVX512(VT, a, b, c) ((VT) _mm512_fmadd_ps ( \
      (__m512) LB_CPU_VEC (VT, a), (__m512) LB_CPU_VEC (VT, b), \
      (__m512) LB_CPU_VEC (VT, c)))
#endif

/* p = e^x from the float vectors (or scalars) x and n = round(x log2 e)
 * chosen by the caller, without the 2^n factor: x - n ln 2 in two parts
 * (Cody and Waite), then Cephes' degree-6 polynomial (about 2 ulp).  The
 * vector exps of attention-item.h and rows-item.h, which round n and
 * guard the range each their own way; the same operations give the same
 * bits in both.  FMA is the variant's VFMA. */
#define LB_CPU_EXP_POLY(p, x, n, FMA) do { \
    const __typeof__ (p) r_ = FMA (n, 2.12194440e-4f, \
        FMA (-(n), 0.693359375f, x)); \
    (p) = FMA (r_, 1.9875691500e-4f, 1.3981999507e-3f); \
    (p) = FMA (p, r_, 8.3334519073e-3f); \
    (p) = FMA (p, r_, 4.1665795894e-2f); \
    (p) = FMA (p, r_, 1.6666665459e-1f); \
    (p) = FMA (p, r_, 5.0000001201e-1f); \
    (p) = FMA (p, r_ * r_, r_) + 1.0f; \
  } while (0)

LbCpuIsa lb_cpu_isa (void);
LbCpuIsa lb_cpu_isa_best (void);
gboolean lb_cpu_isa_set (LbCpuIsa isa);
gboolean lb_cpu_isa_parse (const char *name, LbCpuIsa * isa);
const char *lb_cpu_isa_name (LbCpuIsa isa);
const char *lb_cpu_blas_threading (void);
const char *lb_cpu_blas_expected (void);
const char *lb_cpu_blas_core (LbCpuIsa * isa);
const char *lb_cpu_blas_advice (void);

/**
 * LbCpuRowKernels:
 * @silu: `y[i] = x[i] / (1 + e^-x[i])` for i < n (in place allowed)
 * @gelu_tanh: the tanh GELU as `x * sigmoid(2u)` (in place allowed)
 * @modulate: `y = x * (1 + scale) + shift` over one row of n
 * @gated_residual: `x += gate * y` over one row (gate %NULL: `x += y`)
 * @channel_rms_norm: Wan RMS_norm over C channels (stride xcs, ycs) of a
 *   row of W voxels with unit stride, optionally followed by SiLU
 *
 * The element-wise and norm row kernels of one instruction set
 * (rows-item.h, rows.c): every element through the same vector code, so
 * results do not depend on where a row or span starts.
 */
typedef struct
{
  void (*silu) (const float *x, float *y, int64_t n);
  void (*gelu_tanh) (const float *x, float *y, int64_t n);
  void (*modulate) (const float *x, const float *scale, const float *shift,
      float *y, int64_t n);
  void (*gated_residual) (float *x, const float *y, const float *gate,
      int64_t n);
  void (*channel_rms_norm) (const float *x, int64_t xcs, float *y,
      int64_t ycs, int64_t c, int64_t w, const float *gamma, float scale,
      gboolean silu);
} LbCpuRowKernels;

const LbCpuRowKernels *lb_cpu_row_kernels (void);

/* ---- shared row arithmetic (norm.c) ---- */

void lb_cpu_layer_norm_row (const float *xr, const float *wd,
    const float *bd, float eps, float *yr, int64_t d);

/* Floats per stack block of the ops that write a bf16 y (a multiple of
 * every vector width of rows-item.h). */
#define LB_CPU_BF16_BLOCK 256

void lb_cpu_layer_norm_row_bf16 (const float *xr, const float *wd,
    const float *bd, float eps, const float *sr, const float *hr,
    uint16_t * yr, int64_t d);
void lb_cpu_round_bf16 (const float *x, uint16_t * y, int64_t n);

/* ---- scratch (cpu-util.c) ---- */

#define LB_CPU_SCRATCH_SLOTS 3
float *lb_cpu_scratch (gsize n_floats);
float *lb_cpu_scratch_slot (int slot, gsize n_floats);
float *lb_cpu_scratch_try (gsize n_floats);

/* ---- the f32 GEMM (gemm.c) ---- */

void lb_cpu_sgemm (const float *x, int64_t xld, const float *w,
    gboolean trans_w, int64_t wld, int64_t m, int64_t n, int64_t k,
    float alpha, float b, float *y, int64_t yld);

/* ---- attention tiling, for tests (attention.c) ---- */

void lb_cpu_attention_set_tiles (int query_block, int key_tile);
void lb_cpu_attention_get_tiles (int *query_block, int *key_tile);

/* ---- conv blocking, for tests (conv.c) ---- */

void lb_cpu_conv_set_scratch_limit (gsize n_floats);
void lb_cpu_conv_set_direct (int mode);

/* ---- ops ---- */

/* lb_cpu_<op> for every entry of kernels/ops-list.h, in lb_cpu_ops
 * (cpu-ops.c): gemm.c, norm.c, rope.c, attention.c, elementwise.c,
 * rows.c, conv.c, layout.c, strided.c, fused.c (the fused DiT ops) and
 * raymap.c (camera control; the arithmetic it shares with
 * lingbot/control-raymap.c is declared in kernels/raymap.h). */
#define LB_OP(name) \
  gboolean lb_cpu_##name (LbStream * s LB_OP_ARGS_##name (LB_OP_PARAM), \
      GError ** error);
#include "kernels/ops-list.h"

G_END_DECLS

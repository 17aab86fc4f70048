/* lingbot-gst: the element-wise and norm row kernels, compiled once per ISA
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Included by rows.c with ROWS_TABLE (the #LbCpuRowKernels to define),
 * ROWS_FN (a macro naming this variant's functions), ROWS_TARGET (a target
 * attribute, or nothing for the baseline) and VW (the vector lanes: 4 on
 * the baseline, 8 with AVX2, 16 with AVX-512).  From VW this file defines
 * the vector types VF (VW floats), VFU (the same at a float's alignment)
 * and VI (VW ints).
 *
 * Every element goes through the same vector code whatever its position:
 * a span's last partial vector is loaded into a zeroed vector and stored
 * back lane by lane (ldp/stp), so an element's result does not depend on
 * where a span or a row starts (a rank holding part of a tensor gets the
 * bits of the whole-tensor op).  The arithmetic is the same for every ISA;
 * AVX2 and AVX-512 compute the VFMA (a, b, c) (rows.c) as FMAs, the
 * baseline with two roundings, and nothing else is contracted
 * (cpu-internal.h), so results agree within the op's tolerance across ISAs
 * and bit for bit within one.
 */

typedef float ROWS_FN (vf) __attribute__((vector_size (4 * VW)));
typedef float ROWS_FN (vfu) __attribute__((vector_size (4 * VW), aligned (4)));
typedef int ROWS_FN (vi) __attribute__((vector_size (4 * VW)));
#define VF ROWS_FN (vf)
#define VFU ROWS_FN (vfu)
#define VI ROWS_FN (vi)

ROWS_TARGET static inline VF ROWS_FN (ldp) (const float *p, int64_t n)
{
  if (n >= VW)
    return *(const VFU *) p;
  VF v = { 0 };
  memcpy (&v, p, sizeof (float) * (gsize) n);
  return v;
}

ROWS_TARGET static inline void ROWS_FN (stp) (float *p, VF v, int64_t n)
{
  if (n >= VW)
    *(VFU *) p = v;
  else
    memcpy (p, &v, sizeof (float) * (gsize) n);
}

/* e^x lane by lane for any x: 2^n e^r with n = round (x log2 e) and
 * r = x - n ln 2 in two parts (Cody and Waite), e^r by Cephes' degree-6
 * polynomial (about 2 ulp).  Above 88 it gives +inf (e^88.7 is the last
 * float; x / (1 + e^-x) is then -0 for a very negative x, as libm's expf
 * gives) and 0 below -87.3, where e^x is no longer a normal float; NaN
 * gives 0, so the activations below keep a NaN input's NaN (x / 1). */
ROWS_TARGET static inline VF ROWS_FN (exp) (VF x)
{
  const VF zero = { 0 }, lo = zero - 87.3f, hi = zero + 88.0f;
  const VI live = (VI) (x >= lo), big = (VI) (x > hi);
  x = (VF) (((VI) x & ~big) | ((VI) hi & big));
  x = (VF) (((VI) x & live) | ((VI) lo & ~live));
  const VF t = VFMA (x, 1.44269504f, 0.5f);
  VI ni = __builtin_convertvector (t, VI);      /* towards zero */
  ni += (VI) (__builtin_convertvector (ni, VF) > t);    /* floor */
  const VF n = __builtin_convertvector (ni, VF);
  VF p;
  LB_CPU_EXP_POLY (p, x, n, VFMA);
  const VI scale = (ni + 127) << 23, inf = (VI) (zero + INFINITY);
  return (VF) (((VI) (p * (VF) scale) & live & ~big) | (inf & big));
}

/* y = x * sigmoid(x) = x / (1 + e^-x) */
ROWS_TARGET static inline VF ROWS_FN (silu1) (VF x)
{
  const VF zero = { 0 };
  return x / (1.0f + ROWS_FN (exp) (zero - x));
}

ROWS_TARGET static void ROWS_FN (silu) (const float *a, float *y, int64_t n)
{
  for (int64_t i = 0; i < n; i += VW) {
    const int64_t k = n - i;
    ROWS_FN (stp) (y + i, ROWS_FN (silu1) (ROWS_FN (ldp) (a + i, k)), k);
  }
}

/* 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3):
 * the same function without the cancellation of 1 + tanh(u) for u < 0 */
ROWS_TARGET static void
ROWS_FN (gelu_tanh) (const float *a, float *y, int64_t n)
{
  const float k2 = 2.0f * 0.7978845608028654f;  /* 2 sqrt(2/pi) */
  const VF zero = { 0 };
  for (int64_t i = 0; i < n; i += VW) {
    const int64_t k = n - i;
    const VF x = ROWS_FN (ldp) (a + i, k);
    const VF u = zero - k2 * VFMA (0.044715f * x * x, x, x);
    ROWS_FN (stp) (y + i, x / (1.0f + ROWS_FN (exp) (u)), k);
  }
}

/* y = x * (1 + scale) + shift over one row */
ROWS_TARGET static void
ROWS_FN (modulate) (const float *x, const float *sc, const float *sh,
    float *y, int64_t n)
{
  for (int64_t i = 0; i < n; i += VW) {
    const int64_t k = n - i;
    const VF v = VFMA (ROWS_FN (ldp) (x + i, k),
        1.0f + ROWS_FN (ldp) (sc + i, k), ROWS_FN (ldp) (sh + i, k));
    ROWS_FN (stp) (y + i, v, k);
  }
}

/* x += gate * y (gate NULL: x += y) over one row */
ROWS_TARGET static void
ROWS_FN (gated_residual) (float *x, const float *y, const float *g, int64_t n)
{
  for (int64_t i = 0; i < n; i += VW) {
    const int64_t k = n - i;
    const VF yv = ROWS_FN (ldp) (y + i, k);
    const VF v = g ? VFMA (ROWS_FN (ldp) (g + i, k), yv,
        ROWS_FN (ldp) (x + i, k)) : ROWS_FN (ldp) (x + i, k) + yv;
    ROWS_FN (stp) (x + i, v, k);
  }
}

/* Wan RMS_norm over the C channels of one row of W voxels with unit
 * stride along W (channel c of voxel w at x[c * xcs + w]):
 * y = x / max(|x|_2, 1e-12) * sqrt(C) * gamma[c], then SiLU if asked.
 * 4 VW voxels at a time, so their sums stay in registers; each voxel's
 * sum runs over the channels in order. */
#define ROWS_CHNORM_NV 4
ROWS_TARGET static void
ROWS_FN (channel_rms_norm) (const float *xr, int64_t xcs, float *yr,
    int64_t ycs, int64_t c_n, int64_t w_n, const float *gamma, float scale,
    gboolean silu)
{
  for (int64_t w0 = 0; w0 < w_n; w0 += ROWS_CHNORM_NV * VW) {
    VF acc[ROWS_CHNORM_NV] = { {0}
    };
    const int64_t left = w_n - w0;
    const int64_t nv = MIN (ROWS_CHNORM_NV, (left + VW - 1) / VW);
    for (int64_t c = 0; c < c_n; c++) {
      const float *xc = xr + c * xcs + w0;
      for (int64_t v = 0; v < nv; v++) {
        const VF t = ROWS_FN (ldp) (xc + v * VW, left - v * VW);
        acc[v] = VFMA (t, t, acc[v]);
      }
    }
    for (int64_t v = 0; v < nv; v++)
      for (int u = 0; u < VW; u++) {
        const float nrm = sqrtf (acc[v][u]);
        acc[v][u] = nrm > 1e-12f ? nrm : 1e-12f;
      }
    for (int64_t c = 0; c < c_n; c++) {
      const float *xc = xr + c * xcs + w0;
      float *yc = yr + c * ycs + w0;
      const float gc = gamma[c];
      for (int64_t v = 0; v < nv; v++) {
        const int64_t k = left - v * VW;
        VF t = ROWS_FN (ldp) (xc + v * VW, k) / acc[v] * scale * gc;
        if (silu)
          t = ROWS_FN (silu1) (t);
        ROWS_FN (stp) (yc + v * VW, t, k);
      }
    }
  }
}

#undef ROWS_CHNORM_NV

static const LbCpuRowKernels ROWS_TABLE = {
  .silu = ROWS_FN (silu),
  .gelu_tanh = ROWS_FN (gelu_tanh),
  .modulate = ROWS_FN (modulate),
  .gated_residual = ROWS_FN (gated_residual),
  .channel_rms_norm = ROWS_FN (channel_rms_norm),
};

/* the variant's parameters, undefined for rows.c to define the next */
#undef VF
#undef VFU
#undef VI
#undef VW
#undef ROWS_FN
#undef ROWS_TARGET
#undef ROWS_TABLE
#undef VFMA

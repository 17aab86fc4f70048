/* lingbot-gst: the f32 GEMM's register tile, compiled once per ISA
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Included by gemm.c with GEMM_FN (a macro naming this variant's
 * functions), GEMM_TARGET (a target attribute, or nothing for the
 * baseline), VW (the vector lanes; this file defines VF, VW floats),
 * GEMM_MR (rows of y per tile), GEMM_NV (vectors of y columns per tile)
 * and GEMM_TABLE: a tile keeps GEMM_MR x GEMM_NV accumulators in
 * registers while it runs over the whole of K.
 *
 * An element of the product is `acc = 0; acc = x[i, l] * w[l, j] + acc`
 * for l = 0, 1, ..., K - 1 in that order (one VFMA each), then
 * `v = alpha * acc` and `y = b == 0 ? v : v + b * y`, whatever its row
 * and column: the rows past the last whole tile take one-row tiles of the
 * same code, the columns past N are zero columns of the packed weight
 * whose lanes are not stored, and nothing depends on the thread that runs
 * a tile.  So a row of y does not depend on how many rows are computed
 * with it, nor a column on how many columns (a rank holding a band of the
 * tokens, or of a convolution's output rows, gets the bits of the whole
 * product), nor on OMP_NUM_THREADS or the OpenBLAS core type (OpenBLAS is
 * not called).  The multiply-adds are VFMA (gemm.c): one rounding with
 * AVX2 and AVX-512, two on the baseline; nothing else is contracted
 * (cpu-internal.h).
 */

typedef float GEMM_FN (vf) __attribute__((vector_size (4 * VW)));
typedef float GEMM_FN (vfu) __attribute__((vector_size (4 * VW), aligned (4)));
#define VF GEMM_FN (vf)
#define VFU GEMM_FN (vfu)
#define GEMM_NB (GEMM_NV * VW)

/* Columns [p NB, p NB + NB) of op(w) (op(w) is [K, N]: w [N, K] when
 * @trans_w, else [K, N]; row stride wld) into @dst as [K][NB], zero past
 * n. */
GEMM_TARGET static void
GEMM_FN (pack) (const float *w, gboolean trans_w, int64_t wld, int64_t n,
    int64_t k, int64_t p, float *dst)
{
  const int64_t j0 = p * GEMM_NB, nj = MIN (GEMM_NB, n - j0);
  if (trans_w) {
    for (int64_t j = 0; j < nj; j++) {
      const float *src = w + (j0 + j) * wld;
      for (int64_t l = 0; l < k; l++)
        dst[l * GEMM_NB + j] = src[l];
    }
    for (int64_t l = 0; l < k && nj < GEMM_NB; l++)
      memset (dst + l * GEMM_NB + nj, 0, sizeof (float) * (gsize) (GEMM_NB -
              nj));
  } else {
    for (int64_t l = 0; l < k; l++) {
      memcpy (dst + l * GEMM_NB, w + l * wld + j0, sizeof (float) * (gsize) nj);
      if (nj < GEMM_NB)
        memset (dst + l * GEMM_NB + nj, 0, sizeof (float) * (gsize) (GEMM_NB -
                nj));
    }
  }
}

/* @mr (a constant once inlined: GEMM_MR or 1) rows of x times one packed
 * panel @wp [k][NB] into the first @nj columns of @mr rows of y. */
GEMM_TARGET static inline __attribute__((always_inline))
     void GEMM_FN (tile) (const int mr, const float *x, int64_t xld,
    const float *wp, int64_t k, float alpha, float b, float *y, int64_t yld,
    int64_t nj)
{
  VF acc[GEMM_MR][GEMM_NV];
  const VF zero = { 0 };
#pragma GCC unroll 16
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 16
    for (int p = 0; p < GEMM_NV; p++)
      acc[r][p] = zero;
  for (int64_t l = 0; l < k; l++) {
    VF in[GEMM_NV];
#pragma GCC unroll 16
    for (int p = 0; p < GEMM_NV; p++)
      in[p] = *(const VF *) (wp + l * GEMM_NB + p * VW);
#pragma GCC unroll 16
    for (int r = 0; r < mr; r++) {
      const float xv = x[r * xld + l];
#pragma GCC unroll 16
      for (int p = 0; p < GEMM_NV; p++)
        acc[r][p] = VFMA (xv, in[p], acc[r][p]);
    }
  }
  for (int r = 0; r < mr; r++) {
    float *yr = y + r * yld;
    for (int p = 0; p < GEMM_NV; p++) {
      const int64_t n = nj - p * VW;
      if (n <= 0)
        break;
      if (n >= VW) {
        VF v = acc[r][p] * alpha;
        if (b != 0.0f)
          v = v + *(VFU *) (yr + p * VW) * b;
        *(VFU *) (yr + p * VW) = v;
      } else {
        /* the same two operations lane by lane */
        float t[VW];
        memcpy (t, &acc[r][p], sizeof t);
        for (int64_t j = 0; j < n; j++) {
          const float v = t[j] * alpha;
          yr[p * VW + j] = b == 0.0f ? v : v + yr[p * VW + j] * b;
        }
      }
    }
  }
}

/* Rows [r0, r1) of y times panels [p0, p1) of @wpack (each [k][NB]). */
GEMM_TARGET static void
GEMM_FN (block) (const float *x, int64_t xld, const float *wpack, int64_t n,
    int64_t k, float alpha, float b, float *y, int64_t yld, int64_t r0,
    int64_t r1, int64_t p0, int64_t p1)
{
  for (int64_t p = p0; p < p1; p++) {
    const float *wp = wpack + p * k * GEMM_NB;
    const int64_t j0 = p * GEMM_NB, nj = MIN (GEMM_NB, n - j0);
    int64_t i = r0;
    for (; i + GEMM_MR <= r1; i += GEMM_MR)
      GEMM_FN (tile) (GEMM_MR, x + i * xld, xld, wp, k, alpha, b,
          y + i * yld + j0, yld, nj);
    for (; i < r1; i++)
      GEMM_FN (tile) (1, x + i * xld, xld, wp, k, alpha, b, y + i * yld + j0,
          yld, nj);
  }
}

static const GemmKernel GEMM_TABLE = {
  .mr = GEMM_MR,
  .nb = GEMM_NB,
  .pack = GEMM_FN (pack),
  .block = GEMM_FN (block),
};

/* the variant's parameters, undefined for gemm.c to define the next */
#undef VF
#undef VFU
#undef VW
#undef GEMM_NB
#undef GEMM_MR
#undef GEMM_NV
#undef GEMM_FN
#undef GEMM_TARGET
#undef GEMM_TABLE
#undef VFMA

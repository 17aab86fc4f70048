/* lingbot-gst: the direct convolution's register tile, compiled once per ISA
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Included by conv.c with CONV_FN (a macro naming this variant's
 * functions), CONV_TARGET (a target attribute, or nothing for the
 * baseline), VW (the vector lanes; this file defines VF, VW floats, and
 * VFU, the same at a float's alignment), CONV_COB (output channels per
 * tile) and CONV_NPV (vectors of output pixels per tile), CONV_MAX_COUT
 * (the most output channels for which conv.c chooses this variant by
 * shape): a tile keeps CONV_COB x CONV_NPV accumulators in registers while
 * it runs over every input channel and tap.
 *
 * An output element is `bias + sum over (ci, dt, dy, dx) of w * x` in
 * that order, the zero padding included as zero terms, whatever its
 * position: the padded block (DirectArgs.pad) has slack columns so that
 * the last partial vector of a row is computed like the others and stored
 * lane by lane.  So a rank holding a band of the rows gets the bits of the
 * whole frame, and a rerun gets the same bits.  The multiply-adds are
 * VFMA (conv.c): one rounding with AVX2 and AVX-512, two on the baseline;
 * nothing else is contracted (cpu-internal.h).
 */

typedef float CONV_FN (vf) __attribute__((vector_size (4 * VW)));
typedef float CONV_FN (vfu) __attribute__((vector_size (4 * VW), aligned (4)));
#define VF CONV_FN (vf)
#define VFU CONV_FN (vfu)

/* w [cout, cin, kt, kh, kw] -> wpack [cout / COB][cin][taps][COB], zero
 * for the channels past cout */
CONV_TARGET static void
CONV_FN (pack) (const float *w, int64_t cout, int64_t cin, int64_t taps,
    float *wpack)
{
  const int64_t ncob = (cout + CONV_COB - 1) / CONV_COB;
  for (int64_t b = 0; b < ncob; b++)
    for (int64_t ci = 0; ci < cin; ci++)
      for (int64_t k = 0; k < taps; k++) {
        float *d = wpack + ((b * cin + ci) * taps + k) * CONV_COB;
        for (int64_t j = 0; j < CONV_COB; j++) {
          const int64_t co = b * CONV_COB + j;
          d[j] = co < cout ? w[(co * cin + ci) * taps + k] : 0.0f;
        }
      }
}

/* output row rr of the block (frame a->t, row a->r0 + rr), channels of
 * tile cob, every column */
CONV_TARGET static void
CONV_FN (row) (const DirectArgs * a, int64_t rr, int64_t cob)
{
  const int64_t cin = a->cin, kt = a->kt, kh = a->kh, kw = a->kw;
  const int64_t taps = kt * kh * kw, wo = a->wo, wp = a->wp;
  const int64_t co0 = cob * CONV_COB;
  const int64_t nco = MIN (CONV_COB, a->cout - co0);
  const float *wb = a->wpack + cob * cin * taps * CONV_COB;
  const VF zero = { 0 };

  for (int64_t o0 = 0; o0 < wo; o0 += CONV_NPV * VW) {
    VF acc[CONV_COB][CONV_NPV];
    for (int k = 0; k < CONV_COB; k++) {
      const float b = a->bias && k < nco ? a->bias[co0 + k] : 0.0f;
      for (int p = 0; p < CONV_NPV; p++)
        acc[k][p] = zero + b;
    }
    const float *wk = wb;
    for (int64_t ci = 0; ci < cin; ci++)
      for (int64_t dt = 0; dt < kt; dt++)
        for (int64_t dy = 0; dy < kh; dy++) {
          const float *row = a->pad + ((ci * kt + dt) * a->rows + rr + dy) *
              wp + o0;
          for (int64_t dx = 0; dx < kw; dx++, wk += CONV_COB) {
            VF in[CONV_NPV];
            /* unrolled whatever the build (a sanitizer's one too), so the
             * tile stays in registers */
#pragma GCC unroll 16
            for (int p = 0; p < CONV_NPV; p++)
              in[p] = *(const VFU *) (row + dx + p * VW);
#pragma GCC unroll 16
            for (int k = 0; k < CONV_COB; k++)
#pragma GCC unroll 16
              for (int p = 0; p < CONV_NPV; p++)
                acc[k][p] = VFMA (wk[k], in[p], acc[k][p]);
          }
        }
    for (int k = 0; k < nco; k++) {
      float *yr = a->y + (co0 + k) * a->y_cs + rr * wo + o0;
      for (int p = 0; p < CONV_NPV; p++) {
        const int64_t n = wo - o0 - p * VW;
        if (n <= 0)
          break;
        if (n >= VW)
          *(VFU *) (yr + p * VW) = acc[k][p];
        else
          memcpy (yr + p * VW, &acc[k][p], sizeof (float) * (gsize) n);
      }
    }
  }
}

static const ConvDirect CONV_TABLE = {
  .cob = CONV_COB,
  .max_cout = CONV_MAX_COUT,
  .slack = CONV_NPV * VW,
  .pack = CONV_FN (pack),
  .row = CONV_FN (row),
};

/* the variant's parameters, undefined for conv.c to define the next */
#undef VF
#undef VFU
#undef VW
#undef CONV_COB
#undef CONV_NPV
#undef CONV_MAX_COUT
#undef CONV_FN
#undef CONV_TARGET
#undef CONV_TABLE
#undef VFMA

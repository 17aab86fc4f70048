/* lingbot-gst: one attention work item, compiled once per ISA
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Included by attention.c with ITEM_NAME (the function's name), ITEM_EXP
 * (its vector exp's), ITEM_TARGET (a target attribute, or nothing for the
 * baseline), VF (the vector type: 4 floats on the baseline, 8 with AVX2,
 * 16 with AVX-512) and VW (its lanes).  A register tile is 4 queries x 2 VW keys (scores)
 * or 4 queries x 2 VW output features (p . v).  The
 * arithmetic is the same for every ISA but for two things: AVX2 and
 * AVX-512 compute VFMA (a, b, c) (attention.c) as FMAs where the baseline
 * rounds twice (nothing else is contracted, cpu-internal.h), and the
 * softmax denominator is
 * summed in VW lane partials; so results agree within the op's tolerance
 * across ISAs and bit for bit within one.
 *
 * Every element goes through the same full register tile whatever its
 * position: a query row is padded to a multiple of 4 rows, a key tile to a
 * multiple of 2 VW columns and the head dimension to a multiple of 32, with
 * zeros, so no element is ever computed by a tail loop.  An element's score
 * is the sum over the head dimension in order, its output the running sum
 * over the keys in order, so a query's result does not depend on which
 * other queries share its block (a rank holding a band of the queries
 * gets the bits of the whole-sequence op).
 */

/* e^x for x <= 0 (the softmax's x - max), lane by lane: 2^n e^r with
 * n = round (x log2 e), r = x - n ln 2 in two parts (Cody and Waite), e^r
 * by Cephes' degree-6 polynomial (about 2 ulp); 0 below -87.3, where e^x
 * is no longer a normal float (and for -inf, a hidden key). */
ITEM_TARGET static inline VF
ITEM_EXP (VF x)
{
  typedef int vi __attribute__((vector_size (sizeof (VF))));
  const VF zero = { 0 }, lo = zero - 87.3f;
  const vi live = (vi) (x >= lo);
  x = (VF) (((vi) x & live) | ((vi) lo & ~live));
  const vi ni = -__builtin_convertvector (VFMA (-x, 1.44269504f, 0.5f), vi);
  const VF n = __builtin_convertvector (ni, VF);
  VF p;
  LB_CPU_EXP_POLY (p, x, n, VFMA);
  const vi scale = (ni + 127) << 23;
  return (VF) ((vi) (p * (VF) scale) & live);
}

ITEM_TARGET static void
ITEM_NAME (const AttnArgs * a, int64_t h, int64_t b, float *buf)
{
  typedef int VI __attribute__((vector_size (sizeof (VF))));
  /* the head's keys, tile t transposed at [t][hd][ktp], and its values
   * [nk][hdp], packed by attention.c */
  const float *kpack = a->kpack + h * a->kpack_head;
  const float *vpack = a->vpack + h * a->vpack_head;
  const int64_t hd = a->hd, hdp = a->hdp, ktp = a->ktp, kt = a->kt;
  const int64_t i0 = b * a->qb, ni = MIN (a->qb, a->nq - i0);
  const int64_t ni4 = (ni + 3) & ~(int64_t) 3;
  float *qp = buf;              /* [qb4][hd] */
  float *acc = qp + a->qb4 * hd;        /* [qb4][hdp] */
  float *mrow = acc + a->qb4 * hdp;     /* [qb4] */
  float *lrow = mrow + a->qb4;  /* [qb4] */
  float *sc = lrow + a->qb4;    /* [qb4][ktp] */

  for (int64_t i = 0; i < ni4; i++) {
    mrow[i] = -INFINITY;
    lrow[i] = 0.0f;
  }
  memset (acc, 0, sizeof (float) * (gsize) (ni4 * hdp));
  for (int64_t i = 0; i < ni4; i++) {
    float *qr = qp + i * hd;
    if (i >= ni) {
      memset (qr, 0, sizeof (float) * (gsize) hd);
      continue;
    }
    const int64_t qoff = (i0 + i) * a->qs0 + h * a->qs1;
    if (a->qh) {
      for (int64_t e = 0; e < hd; e++)
        qr[e] = lb_bf16_to_f32 (a->qh[qoff + e]);
    } else if (a->q16) {
      for (int64_t e = 0; e < hd; e++)
        qr[e] = lb_bf16_to_f32 (lb_f32_to_bf16 (a->q[qoff + e]));
    } else {
      memcpy (qr, a->q + qoff, sizeof (float) * (gsize) hd);
    }
  }

  for (int64_t j0 = 0; j0 < a->nk; j0 += kt) {
    const int64_t nj = MIN (kt, a->nk - j0);
    const int64_t njp = (nj + 2 * VW - 1) & ~(int64_t) (2 * VW - 1);

    const float *ktr = kpack + (j0 / kt) * hd * ktp;
    const float *vp = vpack + j0 * hdp;

    /* scores [ni4][njp] = scale * q . k^T in 4 x 2 VW register tiles */
    for (int64_t r = 0; r < ni4; r += 4) {
      const float *q0 = qp + r * hd, *q1 = q0 + hd, *q2 = q1 + hd,
          *q3 = q2 + hd;
      for (int64_t c = 0; c < njp; c += 2 * VW) {
        VF s0l = { 0 }, s0h = { 0 }, s1l = { 0 }, s1h = { 0 };
        VF s2l = { 0 }, s2h = { 0 }, s3l = { 0 }, s3h = { 0 };
        const float *kc = ktr + c;
        for (int64_t e = 0; e < hd; e++) {
          const VF kl = LDV (kc + e * ktp), kh8 = LDV (kc + e * ktp + VW);
          s0l = VFMA (q0[e], kl, s0l);
          s0h = VFMA (q0[e], kh8, s0h);
          s1l = VFMA (q1[e], kl, s1l);
          s1h = VFMA (q1[e], kh8, s1h);
          s2l = VFMA (q2[e], kl, s2l);
          s2h = VFMA (q2[e], kh8, s2h);
          s3l = VFMA (q3[e], kl, s3l);
          s3h = VFMA (q3[e], kh8, s3h);
        }
        float *sr = sc + r * ktp + c;
        STV (sr, s0l * a->scale);
        STV (sr + VW, s0h * a->scale);
        STV (sr + ktp, s1l * a->scale);
        STV (sr + ktp + VW, s1h * a->scale);
        STV (sr + 2 * ktp, s2l * a->scale);
        STV (sr + 2 * ktp + VW, s2h * a->scale);
        STV (sr + 3 * ktp, s3l * a->scale);
        STV (sr + 3 * ktp + VW, s3h * a->scale);
      }
    }

    /* the online softmax per query: scores become probabilities (0 for a
     * hidden key and for the padding rows) */
    gboolean any = FALSE;
    for (int64_t i = 0; i < ni4; i++) {
      float *si = sc + i * ktp;
      if (i >= ni) {
        memset (si, 0, sizeof (float) * (gsize) nj);
        continue;
      }
      const float *brow = a->bias ?
          a->bias + (h * a->nq + i0 + i) * a->nk + j0 : NULL;
      float mt = -INFINITY;
      int64_t j1 = 0;
      if (!a->mask && !brow) {
        /* the scores as they are: their maximum in vectors (exact in any
         * order; a NaN is kept, so the query's output is NaN), the tail and the padding columns apart */
        VF mv = { 0 };
        mv += -INFINITY;
        for (; j1 + VW <= nj; j1 += VW) {
          const VF x = LDV (si + j1);
          /* a NaN score wins and stays */
          const VI take = (VI) (x > mv) | (VI) (x != x);
          mv = (VF) (((VI) x & take) | ((VI) mv & ~take));
        }
        for (int u = 0; u < VW; u++)
          if (mv[u] > mt || isnan (mv[u]))
            mt = mv[u];
      }
      for (; j1 < nj; j1++) {
        float x = si[j1];
        if (a->mask && !a->mask[j0 + j1])
          x = -INFINITY;
        else if (brow)
          x += brow[j1];
        si[j1] = x;
        if (x > mt || isnan (x))        /* a NaN stays */
          mt = x;
      }
      if (mt == -INFINITY) {
        /* every key of this tile hidden for this query */
        memset (si, 0, sizeof (float) * (gsize) nj);
        continue;
      }
      const float mnew = MAX (mrow[i], mt);
      const float corr = expf (mrow[i] - mnew); /* 0 on the first tile */
      if (corr != 1.0f) {
        float *ai = acc + i * hdp;
        lrow[i] *= corr;
        for (int64_t e = 0; e < hdp; e++)
          ai[e] *= corr;
      }
      /* the padding columns (nj .. njp) are -inf: e^x 0 */
      for (int64_t jj = nj; jj < njp; jj++)
        si[jj] = -INFINITY;
      VF lv = { 0 };
      for (int64_t jj = 0; jj < njp; jj += VW) {
        const VF p = ITEM_EXP (LDV (si + jj) - mnew);
        STV (si + jj, p);
        lv += p;
      }
      float l = 0.0f;
      for (int u = 0; u < VW; u++)
        l += lv[u];
      lrow[i] += l;
      mrow[i] = mnew;
      any = TRUE;
    }
    if (!any)
      continue;

    /* acc [ni4][hdp] += p . v in 4 x 2 VW register tiles, keys in order */
    for (int64_t r = 0; r < ni4; r += 4) {
      const float *p0 = sc + r * ktp, *p1 = p0 + ktp, *p2 = p1 + ktp,
          *p3 = p2 + ktp;
      for (int64_t e0 = 0; e0 < hdp; e0 += 2 * VW) {
        float *ar = acc + r * hdp + e0;
        VF o0l = LDV (ar), o0h = LDV (ar + VW);
        VF o1l = LDV (ar + hdp), o1h = LDV (ar + hdp + VW);
        VF o2l = LDV (ar + 2 * hdp), o2h = LDV (ar + 2 * hdp + VW);
        VF o3l = LDV (ar + 3 * hdp), o3h = LDV (ar + 3 * hdp + VW);
        const float *vc = vp + e0;
        for (int64_t jj = 0; jj < nj; jj++) {
          const VF vl = LDV (vc + jj * hdp), vh8 = LDV (vc + jj * hdp + VW);
          o0l = VFMA (p0[jj], vl, o0l);
          o0h = VFMA (p0[jj], vh8, o0h);
          o1l = VFMA (p1[jj], vl, o1l);
          o1h = VFMA (p1[jj], vh8, o1h);
          o2l = VFMA (p2[jj], vl, o2l);
          o2h = VFMA (p2[jj], vh8, o2h);
          o3l = VFMA (p3[jj], vl, o3l);
          o3h = VFMA (p3[jj], vh8, o3h);
        }
        STV (ar, o0l);
        STV (ar + VW, o0h);
        STV (ar + hdp, o1l);
        STV (ar + hdp + VW, o1h);
        STV (ar + 2 * hdp, o2l);
        STV (ar + 2 * hdp + VW, o2h);
        STV (ar + 3 * hdp, o3l);
        STV (ar + 3 * hdp + VW, o3h);
      }
    }
  }

  for (int64_t i = 0; i < ni; i++) {
    const int64_t ooff = (i0 + i) * a->os0 + h * a->os1;
    const float *ai = acc + i * hdp;
    const float inv = lrow[i] == 0.0f ? 0.0f : 1.0f / lrow[i];
    if (a->outh) {
      for (int64_t e = 0; e < hd; e++)
        a->outh[ooff + e] = lb_f32_to_bf16 (ai[e] * inv);
    } else {
      for (int64_t e = 0; e < hd; e++)
        a->out[ooff + e] = ai[e] * inv;
    }
  }
}

/* the variant's parameters, undefined for attention.c to define the next */
#undef ITEM_NAME
#undef ITEM_EXP
#undef VFMA
#undef ITEM_TARGET
#undef VF
#undef VW
#undef LDV
#undef STV

/* lingbot-gst: CPU softmax attention with an online (tiled) softmax
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * One work item is (head, block of queries).  It walks the keys in tiles,
 * keeping per query the running maximum m, the running sum l and an
 * unnormalised accumulator acc[hd] (the FlashAttention recurrence), so the
 * memory per thread is O(query_block * (key_tile + hd)) whatever Nk is.
 * Items are spread over OpenMP threads; the inner products are plain loops
 * marked `omp simd` (no BLAS calls inside the parallel region: the OpenBLAS
 * build is pthreads-threaded and must not be entered from many threads).
 *
 * bf16 keys and values (a bf16 KV cache): each tile of the item's head is
 * widened exactly into the thread's scratch ([tile][hd] keys, then values)
 * before the same f32 loops run on it, so the result is the f32 op's on
 * the widened tensors, bit for bit (the arithmetic and its order do not
 * depend on where the operands are: the loops have no alignment-dependent
 * splitting, see tests/unit/test-ops-kvbf16.c).
 */
#include "kernels/cpu/cpu-internal.h"

#include <math.h>

#define DEFAULT_QUERY_BLOCK 32
#define DEFAULT_KEY_TILE 128

static int query_block = DEFAULT_QUERY_BLOCK;
static int key_tile = DEFAULT_KEY_TILE;

/**
 * lb_cpu_attention_set_tiles:
 * @qb: queries per work item, or <= 0 for the default (32)
 * @kt: keys per tile, or <= 0 for the default (128)
 *
 * Overrides the tiling of lb_cpu_attention(), so tests can put tile
 * boundaries where they want.  Process-wide; not for use while another
 * thread runs attention.
 */
void
lb_cpu_attention_set_tiles (int qb, int kt)
{
  query_block = qb > 0 ? qb : DEFAULT_QUERY_BLOCK;
  key_tile = kt > 0 ? kt : DEFAULT_KEY_TILE;
}

/**
 * lb_cpu_attention_get_tiles:
 * @qb: (out) (optional): queries per work item
 * @kt: (out) (optional): keys per tile
 */
void
lb_cpu_attention_get_tiles (int *qb, int *kt)
{
  if (qb)
    *qb = query_block;
  if (kt)
    *kt = key_tile;
}

static inline float
dot (const float *a, const float *b, int64_t n)
{
  float acc = 0.0f;
#pragma omp simd reduction(+:acc)
  for (int64_t i = 0; i < n; i++)
    acc += a[i] * b[i];
  return acc;
}

/**
 * lb_cpu_attention:
 * @s: a CPU stream
 * @q: f32 [Nq, H, hd] (a view with stride[2] == 1 is accepted)
 * @k: f32 or bf16 [Nk, H, hd] (same)
 * @v: [Nk, H, hd] of @k's dtype (same)
 * @bias: (nullable): f32 [H, Nq, Nk] contiguous, added to the logits
 * @key_mask: (nullable): u8 [Nk] contiguous; 0 hides a key
 * @scale: logit scale (1/sqrt(hd) for the DiT, 1 for umT5)
 * @out: f32 [Nq, H, hd] (a view with stride[2] == 1 is accepted); must not
 *   alias the inputs
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `out = softmax(q . k^T * scale + bias) . v` per head (spec 1.8, 1.9,
 * 5.2; vae_and_distributed_spec.md A.3 AttentionBlock), computed in tiles of
 * keys with an online softmax (see the file comment; tile sizes in
 * lb_cpu_attention_set_tiles()).  A query whose every key is hidden (by
 * the mask or a -inf bias), or Nk = 0, gets a zero output row.  With bf16
 * k and v the result is bit for bit the f32 op's on their exact widening
 * (kernels/ops.h); they are widened tile by tile into per-thread scratch.
 * On an %LB_MATH_BF16 stream with hd 64 or 128, q is rounded to bf16 first
 * (per query block, into scratch), as the device kernels do.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_attention (LbStream * s, const LbTensor * q, const LbTensor * k,
    const LbTensor * v, const LbTensor * bias, const LbTensor * key_mask,
    float scale, LbTensor * out, GError ** error)
{
  if (!lb_check_devices (LB_CPU_DEVICE, "attention", error, "q", q, "k", k,
          "v", v, "bias", bias, "key_mask", key_mask, "out", out, NULL) ||
      !lb_check_attention (q, k, v, bias, key_mask, out, error))
    return FALSE;
  const int64_t nq = q->shape[0], nh = q->shape[1], hd = q->shape[2];
  const int64_t nk = k->shape[0];
  if (nq == 0 || nh == 0 || hd == 0)
    return TRUE;

  const int64_t qb = query_block, kt = key_tile;
  const int64_t nqb = (nq + qb - 1) / qb;
  const gboolean kv16 = k->dtype == LB_DTYPE_BF16;
  const float *qd = q->data, *kd = kv16 ? NULL : k->data;
  const float *vd = kv16 ? NULL : v->data;
  const uint16_t *kh = kv16 ? k->data : NULL, *vh = kv16 ? v->data : NULL;
  const float *bd = bias ? bias->data : NULL;
  const guint8 *md = key_mask ? key_mask->data : NULL;
  float *od = out->data;
  const int64_t qs0 = q->stride[0], qs1 = q->stride[1];
  const int64_t ks0 = k->stride[0], ks1 = k->stride[1];
  const int64_t vs0 = v->stride[0], vs1 = v->stride[1];
  const int64_t os0 = out->stride[0], os1 = out->stride[1];
  const gboolean par = nh * nqb > 1 && nq * nk * hd >= 65536;
  /* kernels/ops.h: the served precision rounds q to bf16 */
  const gboolean q16 = s->math == LB_MATH_BF16 && (hd == 64 || hd == 128);

#pragma omp parallel if (par)
  {
    /* acc [qb][hd], m [qb], l [qb], scores [qb][kt]; with bf16 k/v the
     * widened tile, keys [kt][hd] then values [kt][hd] */
    float *buf = lb_cpu_scratch (qb * hd + 2 * qb + qb * kt +
        (kv16 ? 2 * kt * hd : 0) + (q16 ? qb * hd : 0));
    float *acc = buf, *mrow = acc + qb * hd, *lrow = mrow + qb;
    float *sc = lrow + qb;
    float *kwide = sc + qb * kt, *vwide = kwide + kt * hd;
    /* the block's q rows rounded to bf16, [qb][hd] */
    float *qround = sc + qb * kt + (kv16 ? 2 * kt * hd : 0);

#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t h = 0; h < nh; h++) {
      for (int64_t b = 0; b < nqb; b++) {
        const int64_t i0 = b * qb, ni = MIN (qb, nq - i0);
        for (int64_t i = 0; i < ni; i++) {
          mrow[i] = -INFINITY;
          lrow[i] = 0.0f;
        }
        for (int64_t e = 0; e < ni * hd; e++)
          acc[e] = 0.0f;
        for (int64_t i = 0; q16 && i < ni; i++) {
          const float *qr = qd + (i0 + i) * qs0 + h * qs1;
          for (int64_t e = 0; e < hd; e++)
            qround[i * hd + e] = lb_bf16_to_f32 (lb_f32_to_bf16 (qr[e]));
        }

        for (int64_t j0 = 0; j0 < nk; j0 += kt) {
          const int64_t nj = MIN (kt, nk - j0);
          /* key jj of the tile is kt0 + jj * kst (values: vt0, vst) */
          const float *kt0, *vt0;
          int64_t kst, vst;
          if (kv16) {
            for (int64_t jj = 0; jj < nj; jj++) {
              const uint16_t *kr = kh + (j0 + jj) * ks0 + h * ks1;
              const uint16_t *vr = vh + (j0 + jj) * vs0 + h * vs1;
              float *kw = kwide + jj * hd, *vw = vwide + jj * hd;
              for (int64_t e = 0; e < hd; e++) {
                kw[e] = lb_bf16_to_f32 (kr[e]);
                vw[e] = lb_bf16_to_f32 (vr[e]);
              }
            }
            kt0 = kwide;
            vt0 = vwide;
            kst = vst = hd;
          } else {
            kt0 = kd + j0 * ks0 + h * ks1;
            vt0 = vd + j0 * vs0 + h * vs1;
            kst = ks0;
            vst = vs0;
          }
          for (int64_t i = 0; i < ni; i++) {
            const float *qi = q16 ? qround + i * hd :
                qd + (i0 + i) * qs0 + h * qs1;
            const float *brow = bd ? bd + (h * nq + i0 + i) * nk + j0 : NULL;
            float *si = sc + i * kt;
            float mt = -INFINITY;
            for (int64_t jj = 0; jj < nj; jj++) {
              float x;
              if (md && !md[j0 + jj]) {
                x = -INFINITY;
              } else {
                x = dot (qi, kt0 + jj * kst, hd) * scale;
                if (brow)
                  x += brow[jj];
              }
              si[jj] = x;
              mt = MAX (mt, x);
            }
            if (mt == -INFINITY)
              continue;         /* every key of this tile hidden */
            float mnew = MAX (mrow[i], mt);
            float corr = expf (mrow[i] - mnew);   /* 0 on the first tile */
            float *ai = acc + i * hd;
            if (corr != 1.0f) {
              lrow[i] *= corr;
              for (int64_t e = 0; e < hd; e++)
                ai[e] *= corr;
            }
            float l = 0.0f;
            for (int64_t jj = 0; jj < nj; jj++) {
              float p = expf (si[jj] - mnew);
              if (p == 0.0f)
                continue;
              l += p;
              const float *vj = vt0 + jj * vst;
#pragma omp simd
              for (int64_t e = 0; e < hd; e++)
                ai[e] += p * vj[e];
            }
            lrow[i] += l;
            mrow[i] = mnew;
          }
        }

        for (int64_t i = 0; i < ni; i++) {
          float *oi = od + (i0 + i) * os0 + h * os1;
          const float *ai = acc + i * hd;
          float inv = lrow[i] == 0.0f ? 0.0f : 1.0f / lrow[i];
          for (int64_t e = 0; e < hd; e++)
            oi[e] = ai[e] * inv;
        }
      }
    }
  }
  return TRUE;
}

/* lingbot-gst: CPU softmax attention with an online (tiled) softmax
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * One work item is (head, block of queries).  It walks the keys in tiles,
 * keeping per query the running maximum m, the running sum l and an
 * unnormalised accumulator acc[hd] (the FlashAttention recurrence), so the
 * memory per thread is O(query_block * (key_tile + hd)) whatever Nk is.
 * Items are spread over OpenMP threads.  Per key tile, the scores
 * (q . k^T) and the value update (p . v) are register-tiled 4 x 16
 * products on packed tiles (attention-item.h), compiled for the baseline
 * (4 lanes), AVX2 (8) and AVX-512 (16 lanes) and chosen at run time (lb_cpu_isa()).  Not sgemm:
 * OpenBLAS's result for a row depends on the rows computed with it (its
 * blocking and edge kernels), and a rank holding a band of the queries
 * must get the bits the whole-sequence op gives.
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
#include <string.h>

#define DEFAULT_QUERY_BLOCK 64
/* key tiles and the head dimension are zero-padded to a multiple of the
 * widest register tile (2 x 16 lanes, AVX-512) */
#define LB_ATTN_PAD 32
#define DEFAULT_KEY_TILE 128

static int query_block = DEFAULT_QUERY_BLOCK;
static int key_tile = DEFAULT_KEY_TILE;

/**
 * lb_cpu_attention_set_tiles:
 * @qb: queries per work item, or <= 0 for the default (64)
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

/* what every work item reads (attention-item.h) */
typedef struct
{
  int64_t nq, nk, hd, hdp, qb, qb4, kt, ktp;
  float scale;
  gboolean q16;
  const float *q, *k, *v, *bias;
  const uint16_t *qh, *kh, *vh;
  const guint8 *mask;
  float *out;
  uint16_t *outh;
  int64_t qs0, qs1, ks0, ks1, vs0, vs1, os0, os1;
  /* packed by pack_tile(): per head kpack_head floats of keys (tile by
   * tile, transposed to [hd][ktp], zero-padded) and vpack_head of values
   * ([nk][hdp], zero-padded) */
  float *kpack, *vpack;
  int64_t kpack_head, vpack_head;
} AttnArgs;

/* tile t of head h into the shared packs (bf16 widened exactly) */
static void
pack_tile (const AttnArgs * a, int64_t h, int64_t t)
{
  const int64_t hd = a->hd, hdp = a->hdp, ktp = a->ktp;
  const int64_t j0 = t * a->kt, nj = MIN (a->kt, a->nk - j0);
  float *ktr = a->kpack + h * a->kpack_head + t * hd * ktp;
  float *vp = a->vpack + h * a->vpack_head + j0 * hdp;
  for (int64_t jj = 0; jj < nj; jj++) {
    const int64_t kr = (j0 + jj) * a->ks0 + h * a->ks1;
    const int64_t vr = (j0 + jj) * a->vs0 + h * a->vs1;
    float *vw = vp + jj * hdp;
    if (a->kh) {
      for (int64_t e = 0; e < hd; e++) {
        ktr[e * ktp + jj] = lb_bf16_to_f32 (a->kh[kr + e]);
        vw[e] = lb_bf16_to_f32 (a->vh[vr + e]);
      }
    } else {
      for (int64_t e = 0; e < hd; e++)
        ktr[e * ktp + jj] = a->k[kr + e];
      memcpy (vw, a->v + vr, sizeof (float) * (gsize) hd);
    }
    for (int64_t e = hd; e < hdp; e++)
      vw[e] = 0.0f;
  }
  for (int64_t e = 0; e < hd; e++)
    for (int64_t jj = nj; jj < ktp; jj++)
      ktr[e * ktp + jj] = 0.0f;
}

typedef void (*AttnItemFunc) (const AttnArgs * a, int64_t h, int64_t b,
    float *buf);

/* 4, 8 and 16 floats; the u types at any float's alignment, for the
 * loads and stores */
typedef float v4f __attribute__((vector_size (16)));
typedef float v4u __attribute__((vector_size (16), aligned (4)));
typedef float v8f __attribute__((vector_size (32)));
typedef float v8u __attribute__((vector_size (32), aligned (4)));
typedef float v16f __attribute__((vector_size (64)));
typedef float v16u __attribute__((vector_size (64), aligned (4)));

#define VF v4f
#define VW 4
#define LDV(p) ((v4f) * (const v4u *) (p))
#define STV(p, x) (*(v4u *) (p) = (x))
#define ITEM_NAME item_baseline
#define ITEM_EXP exp_baseline
#define ITEM_TARGET
#define VFMA(a, b, c) LB_CPU_FMA_BASELINE (VF, a, b, c)
#include "kernels/cpu/attention-item.h"
#if LB_CPU_HAVE_X86_ISAS
#define VF v8f
#define VW 8
#define LDV(p) ((v8f) * (const v8u *) (p))
#define STV(p, x) (*(v8u *) (p) = (x))
#define ITEM_NAME item_avx2
#define ITEM_EXP exp_avx2
#define ITEM_TARGET LB_CPU_TARGET_AVX2
#define VFMA(a, b, c) LB_CPU_FMA_AVX2 (VF, a, b, c)
#include "kernels/cpu/attention-item.h"
#define VF v16f
#define VW 16
#define LDV(p) ((v16f) * (const v16u *) (p))
#define STV(p, x) (*(v16u *) (p) = (x))
#define ITEM_NAME item_avx512
#define ITEM_EXP exp_avx512
#define ITEM_TARGET LB_CPU_TARGET_AVX512
#define VFMA(a, b, c) LB_CPU_FMA_AVX512 (VF, a, b, c)
#include "kernels/cpu/attention-item.h"
#endif

static AttnItemFunc
item_for_isa (LbCpuIsa isa)
{
#if LB_CPU_HAVE_X86_ISAS
  if (isa >= LB_CPU_ISA_AVX512)
    return item_avx512;
  if (isa >= LB_CPU_ISA_AVX2)
    return item_avx2;
#endif
  (void) isa;
  return item_baseline;
}

/**
 * lb_cpu_attention:
 * @s: a CPU stream
 * @q: f32 or bf16 [Nq, H, hd] (a view with stride[2] == 1 is accepted)
 * @k: f32 or bf16 [Nk, H, hd] (same)
 * @v: [Nk, H, hd] of @k's dtype (same)
 * @bias: (nullable): f32 [H, Nq, Nk] contiguous, added to the logits
 * @key_mask: (nullable): u8 [Nk] contiguous; 0 hides a key
 * @scale: logit scale (1/sqrt(hd) for the DiT, 1 for umT5)
 * @out: f32 or bf16 [Nq, H, hd] (a view with stride[2] == 1 is
 *   accepted); must not alias the inputs
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `out = softmax(q . k^T * scale + bias) . v` per head (spec 1.8, 1.9,
 * 5.2; vae_and_distributed_spec.md A.3 AttentionBlock), computed in tiles of
 * keys with an online softmax (see the file comment; tile sizes in
 * lb_cpu_attention_set_tiles()).  A query whose every key is hidden (by
 * the mask or a -inf bias), or Nk = 0, gets a zero output row.  With bf16
 * k and v the result is bit for bit the f32 op's on their exact widening
 * (kernels/ops.h); they are widened tile by tile into per-thread scratch.
 * A bf16 q is widened exactly as its query block is loaded, and a bf16
 * out gets each f32 result rounded to nearest even (lb_f32_to_bf16()).
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

  const gboolean kv16 = k->dtype == LB_DTYPE_BF16;
  AttnArgs a = { 0 };
  a.nq = nq;
  a.nk = nk;
  a.hd = hd;
  a.hdp = (hd + LB_ATTN_PAD - 1) & ~(int64_t) (LB_ATTN_PAD - 1);
  a.qb = query_block;
  a.qb4 = (a.qb + 3) & ~(int64_t) 3;
  a.kt = key_tile;
  a.ktp = (a.kt + LB_ATTN_PAD - 1) & ~(int64_t) (LB_ATTN_PAD - 1);
  a.scale = scale;
  a.q = q->dtype == LB_DTYPE_BF16 ? NULL : q->data;
  a.qh = q->dtype == LB_DTYPE_BF16 ? q->data : NULL;
  a.k = kv16 ? NULL : k->data;
  a.v = kv16 ? NULL : v->data;
  a.kh = kv16 ? k->data : NULL;
  a.vh = kv16 ? v->data : NULL;
  a.bias = bias ? bias->data : NULL;
  a.mask = key_mask ? key_mask->data : NULL;
  a.out = out->dtype == LB_DTYPE_BF16 ? NULL : out->data;
  a.outh = out->dtype == LB_DTYPE_BF16 ? out->data : NULL;
  a.qs0 = q->stride[0];
  a.qs1 = q->stride[1];
  a.ks0 = k->stride[0];
  a.ks1 = k->stride[1];
  a.vs0 = v->stride[0];
  a.vs1 = v->stride[1];
  a.os0 = out->stride[0];
  a.os1 = out->stride[1];
  /* kernels/ops.h: the served precision rounds q to bf16 (a bf16 q is
   * already so) */
  a.q16 = a.qh == NULL && s->math != LB_MATH_FP32 && (hd == 64 || hd == 128);

  const int64_t nqb = (nq + a.qb - 1) / a.qb;
  const int64_t ntiles = (nk + a.kt - 1) / a.kt;
  const gsize scratch = (gsize) (a.qb4 * hd + a.qb4 * a.hdp + 2 * a.qb4 +
      a.qb4 * a.ktp);
  const AttnItemFunc item = item_for_isa (lb_cpu_isa ());
  const gboolean par = nh * nqb > 1 && nq * nk * hd >= 65536;

  /* every head's keys and values packed once, shared by its query blocks
   * (the caller's second scratch slot: it joins the team below) */
  a.kpack_head = ntiles * hd * a.ktp;
  a.vpack_head = ntiles * a.kt * a.hdp;
  a.kpack = lb_cpu_scratch_slot (1, (gsize) (nh * (a.kpack_head +
              a.vpack_head)));
  a.vpack = a.kpack + nh * a.kpack_head;

#pragma omp parallel if (par)
  {
#pragma omp for collapse(2) schedule(static)
    for (int64_t h = 0; h < nh; h++)
      for (int64_t t = 0; t < ntiles; t++)
        pack_tile (&a, h, t);
    float *buf = lb_cpu_scratch (scratch);
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t h = 0; h < nh; h++)
      for (int64_t b = 0; b < nqb; b++)
        item (&a, h, b, buf);
  }
  return TRUE;
}

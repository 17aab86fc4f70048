/* lingbot-gst: CUDA attention on tensor cores (BF16 inputs, FP32 accumulate)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * flash_bf16_kernel<D, VEC, BIAS>: the FlashAttention-2 forward recurrence
 * for head dims D = 64 and 128, used when the stream's math mode is
 * LB_MATH_BF16 (docs/design/cuda.md, "BF16 attention").  Same semantics as
 * the FP32 flash kernel of kernels-attention.cu: q [Nq, H, D], k/v [Nk, H, D]
 * f32 strided views (unit last stride), optional bias [H, Nq, Nk] and u8 key
 * mask, out [Nq, H, D]; a query with no visible key gets zeros.  VEC: q, k
 * and v rows are 16-byte aligned (float4 loads; 8-byte uint2 loads of 4
 * bf16 for a bf16 K/V); BIAS: a bias is given; KV: float, or uint16_t for
 * K/V stored as bf16 (a bf16 KV cache, LbCudaAttnArgs.k16 / v16).
 *
 * Block: 256 threads = 8 warps, 128 queries of one head (grid x: query
 * blocks, grid y: heads).  Warp w owns the block's query rows 16 w .. 16 w +
 * 15 for the whole kernel.  Keys are walked in tiles of 64.  Per tile:
 *
 *   1. all threads convert the K tile (row-major) and the V tile (transposed:
 *      Vt[d][key]) from f32 to bf16 (round to nearest even) into shared
 *      memory; keys past Nk or hidden by the mask are stored as zeros and
 *      get an additive -inf (kadd[]) on their logits.  A bf16 K/V is
 *      copied as it is (the V tile's words re-paired by key): the same
 *      bits as the rounding of its exact f32 widening, so the kernel's
 *      result is the f32-K/V kernel's on the widened tensors, bit for bit;
 *   2. each warp, in two steps of SK = 32 keys (a 64-key step needs more
 *      than the 128 registers of 2 blocks per SM and spills at D = 128):
 *      S = Q K^T (16 x 32, f32) with mma.m16n8k16, logits
 *      x = S * scale + kadd + bias, online softmax update of the running max
 *      m and sum l of its 16 rows (f32), P = exp(x - m) rounded to bf16, and
 *      O = O * exp(m_old - m) + P V (16 x D, f32) with mma.m16n8k16.  S, P
 *      and O never leave registers: the accumulator layout of S is the A
 *      operand layout of P (see below).
 *
 * The output is O / l in f32, l being the sum of the bf16-rounded
 * probabilities that multiplied V (so the weights of a row sum to 1 up to
 * f32 rounding).  Q is staged once as bf16 in shared memory.
 *
 * Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16" with
 * .bf16 inputs and .f32 accumulators).  In a warp, lane = 4 g + t with
 * g = lane >> 2 (0..7, "groupID") and t = lane & 3 (0..3,
 * "threadID_in_group").  A 32-bit register holding two bf16 holds the
 * lower-indexed element in its low 16 bits.
 *   A (16 x 16, row-major, M x K), 4 registers:
 *     a[0] = A[g    ][2t, 2t+1]      a[1] = A[g + 8][2t, 2t+1]
 *     a[2] = A[g    ][2t+8, 2t+9]    a[3] = A[g + 8][2t+8, 2t+9]
 *   B (16 x 8, K x N, "col": given per column n), 2 registers:
 *     b[0] = B[2t, 2t+1][g]          b[1] = B[2t+8, 2t+9][g]
 *   C/D (16 x 8, f32), 4 registers:
 *     c[0] = C[g][2t]     c[1] = C[g][2t+1]
 *     c[2] = C[g+8][2t]   c[3] = C[g+8][2t+1]
 *
 * Operands in shared memory are 32-bit words, each a pair of bf16 adjacent
 * along the reduction dimension, so every fragment register is one word:
 *   S = Q K^T: A[r][k] = Q[r][k]      -> word (row r, dims k, k+1) of sq;
 *              B[k][n] = K[n][k]      -> word (row n, dims k, k+1) of sk;
 *   O = P V:   A[r][k] = P[r][key k]  -> from the S accumulators (below);
 *              B[k][n] = V[k][n]      -> word (row d = n, keys k, k+1) of
 *                                        the transposed tile sv.
 * The S accumulators of n-tile nt (keys 8 nt .. 8 nt + 7 of a softmax step)
 * hold s[nt][0..1] = S[g][8nt + 2t + {0,1}], s[nt][2..3] = S[g+8][same
 * keys].  The A fragment of P for the step's keys 16 kc .. 16 kc + 15 is
 *   a[0] = (s[2kc][0], s[2kc][1])      a[1] = (s[2kc][2], s[2kc][3])
 *   a[2] = (s[2kc+1][0], s[2kc+1][1])  a[3] = (s[2kc+1][2], s[2kc+1][3])
 * (keys 16kc + 2t + {0,1} for a[0..1], 16kc + 8 + 2t + {0,1} for a[2..3]).
 * The rows g and g + 8 of a warp are spread over the 4 lanes of a quad
 * (same g), so row max / row sum are quad reductions (shfl_xor 1 and 2).
 * exp(x - m) is computed as exp2f((x - m) * log2 e).
 *
 * Shared memory (32-bit words; rows padded by 4 words so that the fragment
 * reads, 8 rows g x 4 words t per instruction, hit 32 distinct banks: the
 * row pitch is 4 mod 32 words):
 *   sq  [128][D/2 + 4]   Q block
 *   sk  [64][D/2 + 4]    K tile
 *   sv  [D][64/2 + 4]    V tile transposed
 *   kadd[64] (f32)       0 or -inf per key of the tile
 * = 70912 bytes at D = 128, 37120 bytes at D = 64 (dynamic, > 48 KB opt-in).
 */
#include "kernels/cuda/kernels-common.cuh"

using namespace lbk;

namespace {

constexpr int BQ = 128;        /* queries per block: 8 warps x 16 rows */
constexpr int BK = 64;         /* keys per tile */
constexpr int SK = 32;         /* keys per online-softmax step */
constexpr int NT = 256;        /* threads per block */
constexpr int VW = BK / 2 + 4; /* words per row of the transposed V tile */
constexpr float LOG2E = 1.4426950408889634f;

template <int D> struct Bf16Geo
{
  static constexpr int QW = D / 2 + 4; /* words per row of sq and sk */
  static constexpr int q_words = BQ * QW;
  static constexpr int k_words = BK * QW;
  static constexpr int v_words = D * VW;
  static constexpr int words = q_words + k_words + v_words + BK;
};

static_assert (BK % SK == 0 && SK % 16 == 0, "whole k-steps of P V");
static_assert (
    Bf16Geo<64>::QW % 32 == 4 && Bf16Geo<128>::QW % 32 == 4 && VW % 32 == 4,
    "fragment reads must be bank-conflict free");
static_assert (
    (Bf16Geo<128>::q_words + Bf16Geo<128>::k_words + Bf16Geo<128>::v_words) % 4
        == 0,
    "16-byte aligned regions");

/* Two floats -> two bf16 (round to nearest even) in one word, @lo in the
 * low half. */
__device__ __forceinline__ uint32_t
pack_bf16x2 (float lo, float hi)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r;
  /* cvt.rn.bf16x2.f32 d, a, b puts a in the upper half, b in the lower */
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  /* the same rounding in integer arithmetic (NaN -> quiet NaN) */
  uint32_t u[2] = { __float_as_uint (lo), __float_as_uint (hi) };
  for (int i = 0; i < 2; i++) {
    if ((u[i] & 0x7fffffffu) > 0x7f800000u)
      u[i] = 0x7fc00000u;
    else
      u[i] += 0x7fffu + ((u[i] >> 16) & 1u);
  }
  return (u[0] >> 16) | (u[1] & 0xffff0000u);
#endif
}

__device__ __forceinline__ float
bf16_lo (uint32_t w)
{
  return __uint_as_float (w << 16);
}

__device__ __forceinline__ float
bf16_hi (uint32_t w)
{
  return __uint_as_float (w & 0xffff0000u);
}

/* d += A B for one warp: A 16 x 16 bf16, B 16 x 8 bf16, d 16 x 8 f32, in
 * the fragment layouts of the file comment. */
__device__ __forceinline__ void
mma_bf16_16816 (float d[4], const uint32_t a[4], const uint32_t b[2])
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  /* Reference formulation of the same product with shuffles (not built
   * for the sm_80+ targets; it spells out the layouts).  Lane (g, t)
   * needs row g and g + 8 of A, held by the quad lanes 4 g + u, and
   * columns 2 t and 2 t + 1 of B, held by lanes 4 (2 t) + u and
   * 4 (2 t + 1) + u, u = 0..3; lane 4 g + u holds k = 2u, 2u + 1 in its
   * a[0], a[1], b[0] and k = 2u + 8, 2u + 9 in a[2], a[3], b[1]. */
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  for (int u = 0; u < 4; u++) {
    uint32_t ar[4], br[2][2];
    for (int i = 0; i < 4; i++)
      ar[i] = __shfl_sync (0xffffffffu, a[i], 4 * g + u);
    for (int c = 0; c < 2; c++)
      for (int i = 0; i < 2; i++)
        br[c][i] = __shfl_sync (0xffffffffu, b[i], 4 * (2 * t + c) + u);
    for (int r = 0; r < 2; r++)   /* row g + 8 r: a[r], a[r + 2] */
      for (int c = 0; c < 2; c++) /* column 2 t + c */
        d[2 * r + c] += bf16_lo (ar[r]) * bf16_lo (br[c][0])
                        + bf16_hi (ar[r]) * bf16_hi (br[c][0])
                        + bf16_lo (ar[r + 2]) * bf16_lo (br[c][1])
                        + bf16_hi (ar[r + 2]) * bf16_hi (br[c][1]);
  }
#endif
}

/* Four consecutive floats of a row; VEC: one 16-byte load (the caller
 * checked the alignment). */
template <bool VEC>
__device__ __forceinline__ float4
load4 (const float *p)
{
  if (VEC)
    return *reinterpret_cast<const float4 *> (p);
  return make_float4 (p[0], p[1], p[2], p[3]);
}

/* Four consecutive bf16 of a row as two words, the lower-indexed element
 * in each word's low half; VEC: one 8-byte load (the caller checked the
 * alignment). */
template <bool VEC>
__device__ __forceinline__ uint2
load4_bf16 (const uint16_t *p)
{
  if (VEC)
    return *reinterpret_cast<const uint2 *> (p);
  return make_uint2 ((uint32_t)p[0] | ((uint32_t)p[1] << 16),
      (uint32_t)p[2] | ((uint32_t)p[3] << 16));
}

/* Words of the K tile row for dims 4 c4 .. 4 c4 + 3 of @row (f32: rounded
 * to bf16 pairs; bf16: as stored), zeros when !@live. */
template <bool VEC>
__device__ __forceinline__ uint2
k_words (const float *row, bool live)
{
  const float4 x = live ? load4<VEC> (row) : make_float4 (0.f, 0.f, 0.f, 0.f);
  return make_uint2 (pack_bf16x2 (x.x, x.y), pack_bf16x2 (x.z, x.w));
}

template <bool VEC>
__device__ __forceinline__ uint2
k_words (const uint16_t *row, bool live)
{
  return live ? load4_bf16<VEC> (row) : make_uint2 (0u, 0u);
}

/* The 4 words of the transposed V tile for dims 4 d4 .. + 3 of keys kj
 * (@r0, low halves) and kj + 1 (@r1, high halves): word i pairs dim
 * 4 d4 + i of the two keys. */
template <bool VEC>
__device__ __forceinline__ void
v_words (
    const float *r0, bool live0, const float *r1, bool live1, uint32_t w[4])
{
  const float4 z = make_float4 (0.f, 0.f, 0.f, 0.f);
  const float4 x0 = live0 ? load4<VEC> (r0) : z;
  const float4 x1 = live1 ? load4<VEC> (r1) : z;
  w[0] = pack_bf16x2 (x0.x, x1.x);
  w[1] = pack_bf16x2 (x0.y, x1.y);
  w[2] = pack_bf16x2 (x0.z, x1.z);
  w[3] = pack_bf16x2 (x0.w, x1.w);
}

template <bool VEC>
__device__ __forceinline__ void
v_words (const uint16_t *r0, bool live0, const uint16_t *r1, bool live1,
    uint32_t w[4])
{
  const uint2 x0 = live0 ? load4_bf16<VEC> (r0) : make_uint2 (0u, 0u);
  const uint2 x1 = live1 ? load4_bf16<VEC> (r1) : make_uint2 (0u, 0u);
  w[0] = (x0.x & 0xffffu) | (x1.x << 16);
  w[1] = (x0.x >> 16) | (x1.x & 0xffff0000u);
  w[2] = (x0.y & 0xffffu) | (x1.y << 16);
  w[3] = (x0.y >> 16) | (x1.y & 0xffff0000u);
}

/* A lane's outputs of one row: dims 8 dt + (0, 1) from @off (elements)
 * are o[dt][C], o[dt][C + 1] times @inv (C a constant: o stays in
 * registers); f32, or rounded to bf16 pairs
 * (one 4-byte store where the pair is aligned) for a bf16 output. */
template <int DT, int C>
__device__ __forceinline__ void
store_row (const LbCudaAttnArgs &a, int64_t off, const float (*o)[4], float inv)
{
  if (a.out16 != nullptr) {
    uint16_t *orow = a.out16 + off;
    const bool pair = ((uintptr_t)orow & 3u) == 0;
#pragma unroll
    for (int dt = 0; dt < DT; dt++) {
      const uint32_t w = pack_bf16x2 (o[dt][C] * inv, o[dt][C + 1] * inv);
      if (pair) {
        *reinterpret_cast<uint32_t *> (orow + 8 * dt) = w;
      } else {
        orow[8 * dt] = (uint16_t)(w & 0xffffu);
        orow[8 * dt + 1] = (uint16_t)(w >> 16);
      }
    }
    return;
  }
  float *orow = a.out + off;
#pragma unroll
  for (int dt = 0; dt < DT; dt++) {
    orow[8 * dt] = o[dt][C] * inv;
    orow[8 * dt + 1] = o[dt][C + 1] * inv;
  }
}

template <int D, bool VEC, bool BIAS, typename KV>
__global__ void
__launch_bounds__ (NT, 2) flash_bf16_kernel (LbCudaAttnArgs a)
{
  typedef Bf16Geo<D> G;
  constexpr int QW = G::QW;
  constexpr int D4 = D / 4;  /* float4 per row */
  constexpr int KC = D / 16; /* k-steps of S = Q K^T */
  constexpr int DT = D / 8;  /* n-tiles of O */
  constexpr int NS = SK / 8; /* n-tiles of S per step */
  extern __shared__ uint4 smem_bf16[];
  uint32_t *sq = reinterpret_cast<uint32_t *> (smem_bf16);
  uint32_t *sk = sq + G::q_words;
  uint32_t *sv = sk + G::k_words;
  float *kadd = reinterpret_cast<float *> (sv + G::v_words);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int64_t h = blockIdx.y;
  const int64_t i0 = (int64_t)blockIdx.x * BQ;
  const KV *kb = kv_base<KV> (a.k, a.k16), *vb = kv_base<KV> (a.v, a.v16);

  /* Q block: row r, dims 4 c4 .. 4 c4 + 3 -> words 2 c4, 2 c4 + 1 of row
   * r (8-byte store: QW is even); rows past Nq are zeros. */
  for (int e = tid; e < BQ * D4; e += NT) {
    const int r = e / D4, c4 = e % D4;
    const int64_t qi = i0 + r;
    const int64_t qo = qi * a.qs0 + h * a.qs1 + 4 * c4;
    /* a bf16 q as it is, an f32 one rounded (k_words()) */
    *reinterpret_cast<uint2 *> (sq + r * QW + 2 * c4)
        = a.q16 ? k_words<VEC> (a.q16 + qo, qi < a.nq)
                : k_words<VEC> (a.q + qo, qi < a.nq);
  }

  /* this lane's rows of the block: qr and qr + 8 */
  const int qr = warp * 16 + g;
  const int64_t qi0 = i0 + qr, qi1 = qi0 + 8;
  const bool warp_live = i0 + warp * 16 < a.nq; /* warp-uniform */
  /* BIAS: bias rows of qr and qr + 8 (NULL: not a query) */
  const float *brow0
      = BIAS && qi0 < a.nq ? a.bias + (h * a.nq + qi0) * a.nk : nullptr;
  const float *brow1
      = BIAS && qi1 < a.nq ? a.bias + (h * a.nq + qi1) * a.nk : nullptr;

  float o[DT][4]; /* O[qr + 8 (c >> 1)][8 dt + 2 t + (c & 1)] */
#pragma unroll
  for (int dt = 0; dt < DT; dt++)
#pragma unroll
    for (int c = 0; c < 4; c++)
      o[dt][c] = 0.0f;
  /* running max (natural-log units) and this lane's part of the running
   * sum, rows qr (…0) and qr + 8 (…1) */
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  for (int64_t j0 = 0; j0 < a.nk; j0 += BK) {
    __syncthreads (); /* every warp is done with the last tile */

    /* K tile: key row r, dims 4 c4 .. + 3 -> words 2 c4, 2 c4 + 1 */
    for (int e = tid; e < BK * D4; e += NT) {
      const int r = e / D4, c4 = e % D4;
      const int64_t kj = j0 + r;
      const bool live = kj < a.nk && (a.mask == nullptr || a.mask[kj]);
      /* rows past Nk are not read: the address is only formed */
      *reinterpret_cast<uint2 *> (sk + r * QW + 2 * c4)
          = k_words<VEC> (kb + kj * a.ks0 + h * a.ks1 + 4 * c4, live);
    }
    /* V tile, transposed: thread item e covers keys 2p, 2p + 1 and dims
     * 4 d4 .. 4 d4 + 3 and writes word p (keys 2p low, 2p + 1 high) of
     * rows 4 d4 + i of sv.  Bits of e: 0-3 = p & 15, 4 = d4 & 1,
     * 5 = p >> 4, 6.. = d4 >> 1, so the 32 lanes of a warp store to
     * banks (16 (d4 & 1) + (p & 15) + 4 i) mod 32 (VW = 36): no
     * conflict; and read 16 key rows x 32 contiguous bytes. */
    for (int e = tid; e < (BK / 2) * D4; e += NT) {
      const int p = (e & 15) | (((e >> 5) & 1) << 4);
      const int d4 = ((e >> 4) & 1) | ((e >> 6) << 1);
      const int64_t kj = j0 + 2 * p;
      const bool live0 = kj < a.nk && (a.mask == nullptr || a.mask[kj]);
      const bool live1 = kj + 1 < a.nk && (a.mask == nullptr || a.mask[kj + 1]);
      const KV *vrow = vb + kj * a.vs0 + h * a.vs1 + 4 * d4;
      uint32_t w[4];
      v_words<VEC> (vrow, live0, vrow + a.vs0, live1, w);
      uint32_t *col = sv + (4 * d4) * VW + p;
      col[0 * VW] = w[0];
      col[1 * VW] = w[1];
      col[2 * VW] = w[2];
      col[3 * VW] = w[3];
    }
    if (tid < BK) {
      const int64_t kj = j0 + tid;
      kadd[tid]
          = kj < a.nk && (a.mask == nullptr || a.mask[kj]) ? 0.0f : -INFINITY;
    }
    __syncthreads (); /* tiles ready */

    if (!warp_live)
      continue;
    const int kn = (int)min ((int64_t)BK, a.nk - j0); /* keys in tile */

    /* the tile in steps of SK keys (one online-softmax update each) */
#pragma unroll 1
    for (int ks = 0; ks < BK; ks += SK) {
      /* S = Q K^T for rows qr, qr + 8 and keys ks .. ks + SK - 1 */
      float s[NS][4];
#pragma unroll
      for (int nt = 0; nt < NS; nt++)
#pragma unroll
        for (int c = 0; c < 4; c++)
          s[nt][c] = 0.0f;
#pragma unroll
      for (int kc = 0; kc < KC; kc++) {
        /* dims 16 kc + 2 t (+ 8) = word 8 kc + t (+ 4) */
        uint32_t af[4];
        af[0] = sq[qr * QW + 8 * kc + t];
        af[1] = sq[(qr + 8) * QW + 8 * kc + t];
        af[2] = sq[qr * QW + 8 * kc + 4 + t];
        af[3] = sq[(qr + 8) * QW + 8 * kc + 4 + t];
#pragma unroll
        for (int nt = 0; nt < NS; nt++) {
          uint32_t bf[2]; /* key ks + 8 nt + g */
          bf[0] = sk[(ks + 8 * nt + g) * QW + 8 * kc + t];
          bf[1] = sk[(ks + 8 * nt + g) * QW + 8 * kc + 4 + t];
          mma_bf16_16816 (s[nt], af, bf);
        }
      }

      /* logits and the step's row maxima; s[nt][c] is row qr + 8 (c >> 1),
       * key ks + 8 nt + 2 t + (c & 1) of the tile */
      float mt0 = -INFINITY, mt1 = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < NS; nt++) {
#pragma unroll
        for (int c = 0; c < 4; c++) {
          const int col = ks + 8 * nt + 2 * t + (c & 1);
          float x = s[nt][c] * a.scale + kadd[col];
          if (BIAS) {
            const float *brow = c < 2 ? brow0 : brow1;
            if (brow != nullptr && col < kn)
              x += brow[j0 + col];
          }
          s[nt][c] = x;
          if (c < 2)
            mt0 = fmaxf (mt0, x);
          else
            mt1 = fmaxf (mt1, x);
        }
      }
      mt0 = fmaxf (mt0, __shfl_xor_sync (0xffffffffu, mt0, 1));
      mt0 = fmaxf (mt0, __shfl_xor_sync (0xffffffffu, mt0, 2));
      mt1 = fmaxf (mt1, __shfl_xor_sync (0xffffffffu, mt1, 1));
      mt1 = fmaxf (mt1, __shfl_xor_sync (0xffffffffu, mt1, 2));

      /* new maxima; mu = m, or 0 while the row has no visible key (then
       * every x is -inf and exp gives 0 instead of NaN) */
      const float mn0 = fmaxf (m0, mt0), mn1 = fmaxf (m1, mt1);
      const float mu0 = mn0 == -INFINITY ? 0.0f : mn0;
      const float mu1 = mn1 == -INFINITY ? 0.0f : mn1;
      const float corr0 = exp2f ((m0 - mu0) * LOG2E); /* 0 from -inf */
      const float corr1 = exp2f ((m1 - mu1) * LOG2E);
      m0 = mn0;
      m1 = mn1;
      l0 *= corr0;
      l1 *= corr1;
#pragma unroll
      for (int dt = 0; dt < DT; dt++) {
        o[dt][0] *= corr0;
        o[dt][1] *= corr0;
        o[dt][2] *= corr1;
        o[dt][3] *= corr1;
      }

      /* P = exp(x - m) as bf16 pairs: pw[nt][0] row qr, pw[nt][1] row
       * qr + 8, keys ks + 8 nt + 2 t, + 1 */
      uint32_t pw[NS][2];
#pragma unroll
      for (int nt = 0; nt < NS; nt++) {
        pw[nt][0] = pack_bf16x2 (
            exp2f ((s[nt][0] - mu0) * LOG2E), exp2f ((s[nt][1] - mu0) * LOG2E));
        pw[nt][1] = pack_bf16x2 (
            exp2f ((s[nt][2] - mu1) * LOG2E), exp2f ((s[nt][3] - mu1) * LOG2E));
        l0 += bf16_lo (pw[nt][0]) + bf16_hi (pw[nt][0]);
        l1 += bf16_lo (pw[nt][1]) + bf16_hi (pw[nt][1]);
      }

      /* O += P V, keys ks + 16 kc .. + 15 per k-step */
#pragma unroll
      for (int kc = 0; kc < SK / 16; kc++) {
        const uint32_t af[4] = { pw[2 * kc][0], pw[2 * kc][1],
          pw[2 * kc + 1][0], pw[2 * kc + 1][1] };
#pragma unroll
        for (int dt = 0; dt < DT; dt++) {
          uint32_t bf[2]; /* dim 8 dt + g, keys ks + 16 kc + 2 t (+ 8) */
          bf[0] = sv[(8 * dt + g) * VW + ks / 2 + 8 * kc + t];
          bf[1] = sv[(8 * dt + g) * VW + ks / 2 + 8 * kc + 4 + t];
          mma_bf16_16816 (o[dt], af, bf);
        }
      }
    }
  }

  if (!warp_live)
    return; /* no row of this warp is a query */
  /* the row sums are spread over the quad's 4 lanes */
  l0 += __shfl_xor_sync (0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync (0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync (0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync (0xffffffffu, l1, 2);
  const float inv0 = l0 == 0.0f ? 0.0f : 1.0f / l0;
  const float inv1 = l1 == 0.0f ? 0.0f : 1.0f / l1;
  if (qi0 < a.nq)
    store_row<DT, 0> (a, qi0 * a.os0 + h * a.os1 + 2 * t, o, inv0);
  if (qi1 < a.nq)
    store_row<DT, 2> (a, qi1 * a.os0 + h * a.os1 + 2 * t, o, inv1);
}

/* ---- launcher ---- */

template <int D, bool VEC, bool BIAS, typename KV>
cudaError_t
launch_flash_bf16 (cudaStream_t st, const LbCudaAttnArgs *a)
{
  const size_t smem = (size_t)Bf16Geo<D>::words * sizeof (uint32_t);
  cudaError_t e = cudaFuncSetAttribute (flash_bf16_kernel<D, VEC, BIAS, KV>,
      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess)
    return e;
  dim3 grid ((unsigned int)((a->nq + BQ - 1) / BQ), (unsigned int)a->nh);
  flash_bf16_kernel<D, VEC, BIAS, KV><<<grid, NT, smem, st>>> (*a);
  return cudaGetLastError ();
}

template <int D, typename KV>
cudaError_t
launch_flash_bf16_kv (cudaStream_t st, const LbCudaAttnArgs *a, bool vec)
{
  if (a->bias != nullptr)
    return vec ? launch_flash_bf16<D, true, true, KV> (st, a)
               : launch_flash_bf16<D, false, true, KV> (st, a);
  return vec ? launch_flash_bf16<D, true, false, KV> (st, a)
             : launch_flash_bf16<D, false, false, KV> (st, a);
}

template <int D>
cudaError_t
launch_flash_bf16_aligned (cudaStream_t st, const LbCudaAttnArgs *a)
{
  /* vector loads of 4 elements: q (f32) needs a 16-byte aligned base, k
   * and v 16 bytes (f32) or 8 bytes (bf16), and every row/head stride a
   * multiple of 4 elements (D itself is) */
  const bool strides4
      = (a->qs0 | a->qs1 | a->ks0 | a->ks1 | a->vs0 | a->vs1) % 4 == 0;
  /* q: 16 bytes for f32, 8 for bf16 */
  const bool q_al = a->q16 != nullptr ? (uintptr_t)a->q16 % 8 == 0
                                      : (uintptr_t)a->q % 16 == 0;
  if (a->k16 != nullptr) {
    const bool vec
        = strides4 && q_al && ((uintptr_t)a->k16 | (uintptr_t)a->v16) % 8 == 0;
    return launch_flash_bf16_kv<D, uint16_t> (st, a, vec);
  }
  const bool vec
      = strides4 && q_al && ((uintptr_t)a->k | (uintptr_t)a->v) % 16 == 0;
  return launch_flash_bf16_kv<D, float> (st, a, vec);
}

} // namespace

/**
 * lb_cuda_launch_flash_attention_bf16:
 * @st: the stream to enqueue on (its device must be current)
 * @a: device pointers and extents: q [nq, nh, hd], k/v [nk, nh, hd], out
 *   [nq, nh, hd] f32 with unit last stride (strides qs0/qs1 ... in
 *   elements), or k/v bf16 at k16/v16 (a bf16 KV cache; k/v unused), bias
 *   [nh, nq, nk] contiguous f32 or NULL, mask [nk] u8 or NULL (0 hides a
 *   key), scale the logit factor
 *
 * Enqueues `out = softmax(q k^T * scale + bias) v` per head (the semantics
 * of lb_cpu_attention(), spec 1.8 / 1.9) at LB_MATH_BF16 precision: q, k,
 * v and the probabilities rounded to bfloat16 (nearest even), products on
 * tensor cores with f32 accumulation, softmax statistics and the
 * normalisation in f32.  A query without a visible key (or nk = 0) gets a
 * zero row.  bf16 k/v are used as stored, which is what rounding their
 * exact f32 widening gives: the result equals the f32-k/v call's on the
 * widened tensors bit for bit.  Requires sm_80 or newer.  Asynchronous;
 * nothing is allocated.
 *
 * Returns: cudaSuccess, cudaErrorInvalidValue when hd is not 64 or 128,
 * or the launch error (cudaFuncSetAttribute / cudaGetLastError).
 */
extern "C" cudaError_t
lb_cuda_launch_flash_attention_bf16 (cudaStream_t st, const LbCudaAttnArgs *a)
{
  if (a->nq <= 0 || a->nh <= 0)
    return cudaSuccess;
  if (a->hd == 64)
    return launch_flash_bf16_aligned<64> (st, a);
  if (a->hd == 128)
    return launch_flash_bf16_aligned<128> (st, a);
  return cudaErrorInvalidValue;
}

/* lingbot-gst: CUDA attention kernels (FP32)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * flash_kernel<D>: one block of 256 threads per (block of 64 queries,
 * head).  It walks the keys in tiles of 64 with the online-softmax
 * (FlashAttention) recurrence of kernels/cpu/attention.c: running maximum
 * m, running sum l and an unnormalised accumulator per query, so memory is
 * O(tile) whatever Nk is.  D (32, 64 or 128) is the head dimension rounded
 * up; the padding is loaded as zeros.  Shared memory holds the Q block, one
 * K-or-V tile (K for the logits, then V for the update, same buffer) and
 * the 64x64 logits/probabilities; rows are padded by one float so the
 * column-wise reads do not conflict on banks.  Thread (ty, tx), 16 x 16,
 * owns queries ty + 16 i (i < 4) and keys tx + 16 j (j < 4) of a logit
 * tile, and dims tx + 16 j of those queries' accumulators.  The softmax
 * step gives each query row to 4 adjacent lanes.
 *
 * softmax_rows_kernel: the exact softmax of a row of precomputed logits,
 * for the GEMM path of large head dims (ops: cuda-ops.c).
 *
 * K and V may be bf16 (a bf16 KV cache: LbCudaAttnArgs.k16 / v16): the
 * kernel is instantiated for both element types (KV = float or uint16_t)
 * and a bf16 element is widened exactly on its way into shared memory, so
 * the result is the f32 kernel's on the widened tensors, bit for bit.  A
 * bf16 q (q16) is widened as it is loaded and a bf16 output (out16) gets
 * the f32 result rounded to nearest even: a block-uniform branch, once per
 * element loaded or stored.
 */
#include "kernels/cuda/kernels-common.cuh"

using namespace lbk;

namespace {

constexpr int BQ = 64, BK = 64, NT = 256;

template <int D>
constexpr size_t
flash_smem_floats ()
{
  return (size_t)BQ * (D + 1) + (size_t)BK * (D + 1) + (size_t)BQ * (BK + 1)
         + BQ;
}

/* Keys (or values) [j0, j0 + BK) of head @h into the shared tile
 * skv[BK][D + 1], widened to f32; keys past @nk and dims past @hd are
 * zeros. */
template <int D, typename KV>
__device__ __forceinline__ void
load_kv_tile (float *skv, const KV *base, int64_t s0, int64_t s1, int64_t h,
    int64_t j0, int64_t nk, int hd, int tid)
{
  for (int e = tid; e < BK * D; e += NT) {
    const int c = e / D, d = e % D;
    const int64_t kj = j0 + c;
    skv[c * (D + 1) + d] = (kj < nk && d < hd)
                               ? load_as_float (base + kj * s0 + h * s1 + d)
                               : 0.0f;
  }
}

template <int D, typename KV>
__global__ void
__launch_bounds__ (NT) flash_kernel (LbCudaAttnArgs a)
{
  constexpr int QS = D + 1, KS = D + 1, SS = BK + 1, DJ = D / 16;
  extern __shared__ float smem[];
  float *sq = smem;           /* [BQ][QS] */
  float *skv = sq + BQ * QS;  /* [BK][KS] */
  float *ss = skv + BK * KS;  /* [BQ][SS] */
  float *srow = ss + BQ * SS; /* [BQ] correction, then l */

  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
  const int64_t h = blockIdx.y;
  const int64_t i0 = (int64_t)blockIdx.x * BQ;
  const int hd = (int)a.hd;
  const KV *kb = kv_base<KV> (a.k, a.k16), *vb = kv_base<KV> (a.v, a.v16);

  for (int e = tid; e < BQ * D; e += NT) {
    int r = e / D, d = e % D;
    int64_t qi = i0 + r;
    const int64_t qo = qi * a.qs0 + h * a.qs1 + d;
    sq[r * QS + d] = (qi < a.nq && d < hd)
                         ? (a.q16 ? bf16_widen (a.q16[qo]) : a.q[qo])
                         : 0.0f;
  }

  float o[4][DJ];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int j = 0; j < DJ; j++)
      o[i][j] = 0.0f;

  /* softmax state of row (tid >> 2), kept by its 4 lanes */
  const int srow_id = tid >> 2, part = tid & 3;
  float m_run = -INFINITY, l_run = 0.0f;

  for (int64_t j0 = 0; j0 < a.nk; j0 += BK) {
    __syncthreads (); /* the previous V tile is consumed */
    load_kv_tile<D> (skv, kb, a.ks0, a.ks1, h, j0, a.nk, hd, tid);
    __syncthreads ();

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++)
        acc[i][j] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < D; d++) {
      float qv[4], kv[4];
#pragma unroll
      for (int i = 0; i < 4; i++)
        qv[i] = sq[(ty + 16 * i) * QS + d];
#pragma unroll
      for (int j = 0; j < 4; j++)
        kv[j] = skv[(tx + 16 * j) * KS + d];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
          acc[i][j] += qv[i] * kv[j];
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int r = ty + 16 * i;
      const int64_t qi = i0 + r;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int c = tx + 16 * j;
        const int64_t kj = j0 + c;
        float x;
        if (kj >= a.nk || qi >= a.nq || (a.mask && !a.mask[kj])) {
          x = -INFINITY;
        } else {
          x = acc[i][j] * a.scale;
          if (a.bias)
            x += a.bias[(h * a.nq + qi) * a.nk + kj];
        }
        ss[r * SS + c] = x;
      }
    }
    __syncthreads (); /* logits written, K tile consumed */

    load_kv_tile<D> (skv, vb, a.vs0, a.vs1, h, j0, a.nk, hd, tid);

    {
      float *sr = ss + srow_id * SS + part * 16;
      float mt = -INFINITY;
#pragma unroll
      for (int c = 0; c < 16; c++)
        mt = fmaxf (mt, sr[c]);
      mt = fmaxf (mt, __shfl_xor_sync (0xffffffffu, mt, 1));
      mt = fmaxf (mt, __shfl_xor_sync (0xffffffffu, mt, 2));
      /* Every lane runs the shuffles below: a row whose keys in this
       * tile are all hidden (a padding row past Nq, or a masked tile)
       * can share its warp with rows that see keys, and a
       * __shfl_xor_sync(0xffffffff) reached by only part of the warp
       * is undefined (it hung on an H200).  Such a row gets p = 0 and
       * keeps its state. */
      const bool hidden = mt == -INFINITY;
      const float mnew = hidden ? m_run : fmaxf (m_run, mt);
      float l = 0.0f;
#pragma unroll
      for (int c = 0; c < 16; c++) {
        const float p = hidden ? 0.0f : expf (sr[c] - mnew);
        sr[c] = p;
        l += p;
      }
      l += __shfl_xor_sync (0xffffffffu, l, 1);
      l += __shfl_xor_sync (0xffffffffu, l, 2);
      float corr = 1.0f;
      if (!hidden) {
        corr = expf (m_run - mnew); /* 0 on the first visible tile */
        l_run = l_run * corr + l;
        m_run = mnew;
      }
      if (part == 0)
        srow[srow_id] = corr;
    }
    __syncthreads (); /* probabilities and V tile ready */

#pragma unroll
    for (int i = 0; i < 4; i++) {
      const float corr = srow[ty + 16 * i];
#pragma unroll
      for (int j = 0; j < DJ; j++)
        o[i][j] *= corr;
    }
#pragma unroll 4
    for (int c = 0; c < BK; c++) {
      float pv[4];
#pragma unroll
      for (int i = 0; i < 4; i++)
        pv[i] = ss[(ty + 16 * i) * SS + c];
#pragma unroll
      for (int j = 0; j < DJ; j++) {
        const float vv = skv[c * KS + tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; i++)
          o[i][j] += pv[i] * vv;
      }
    }
  }

  __syncthreads ();
  if (part == 0)
    srow[srow_id] = l_run;
  __syncthreads ();
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int r = ty + 16 * i;
    const int64_t qi = i0 + r;
    if (qi >= a.nq)
      continue;
    const float l = srow[r];
    const float inv = l == 0.0f ? 0.0f : 1.0f / l;
    const int64_t oo = qi * a.os0 + h * a.os1;
#pragma unroll
    for (int j = 0; j < DJ; j++) {
      const int d = tx + 16 * j;
      if (d >= hd)
        continue;
      if (a.out16)
        store_from_float (a.out16 + oo + d, o[i][j] * inv);
      else
        a.out[oo + d] = o[i][j] * inv;
    }
  }
}

template <int D, typename KV>
cudaError_t
launch_flash_kv (cudaStream_t st, const LbCudaAttnArgs *a)
{
  const size_t smem = flash_smem_floats<D> () * sizeof (float);
  cudaError_t e = cudaFuncSetAttribute (flash_kernel<D, KV>,
      cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess)
    return e;
  dim3 grid ((unsigned int)((a->nq + BQ - 1) / BQ), (unsigned int)a->nh);
  flash_kernel<D, KV><<<grid, NT, smem, st>>> (*a);
  return cudaGetLastError ();
}

template <int D>
cudaError_t
launch_flash (cudaStream_t st, const LbCudaAttnArgs *a)
{
  if (a->k16 != nullptr)
    return launch_flash_kv<D, uint16_t> (st, a);
  return launch_flash_kv<D, float> (st, a);
}

__global__ void
softmax_rows_kernel (float *s, int64_t rows, int64_t nk, float scale,
    const float *bias, const unsigned char *mask)
{
  __shared__ float red[32];
  __shared__ double redd[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float *row = s + r * nk;
    const float *brow = bias ? bias + r * nk : nullptr;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < nk; j += blockDim.x) {
      float x;
      if (mask && !mask[j]) {
        x = -INFINITY;
      } else {
        x = row[j] * scale;
        if (brow)
          x += brow[j];
      }
      row[j] = x;
      mx = fmaxf (mx, x);
    }
    mx = block_max (mx, red);
    if (mx == -INFINITY) {
      for (int64_t j = threadIdx.x; j < nk; j += blockDim.x)
        row[j] = 0.0f;
      continue;
    }
    double sum = 0.0;
    for (int64_t j = threadIdx.x; j < nk; j += blockDim.x) {
      float p = expf (row[j] - mx);
      row[j] = p;
      sum += p;
    }
    sum = block_sum (sum, redd);
    const float inv = (float)(1.0 / sum);
    for (int64_t j = threadIdx.x; j < nk; j += blockDim.x)
      row[j] *= inv;
  }
}

} // namespace

extern "C" cudaError_t
lb_cuda_launch_flash_attention (cudaStream_t st, const LbCudaAttnArgs *a)
{
  if (a->nq <= 0 || a->nh <= 0 || a->hd <= 0)
    return cudaSuccess;
  if (a->hd <= 32)
    return launch_flash<32> (st, a);
  if (a->hd <= 64)
    return launch_flash<64> (st, a);
  if (a->hd <= 128)
    return launch_flash<128> (st, a);
  return cudaErrorInvalidValue;
}

extern "C" cudaError_t
lb_cuda_launch_softmax_rows (cudaStream_t st, float *s, int64_t rows,
    int64_t nk, float scale, const float *bias_rows, const unsigned char *mask)
{
  if (rows <= 0 || nk <= 0)
    return cudaSuccess;
  unsigned int g = (unsigned int)(rows > 1048576 ? 1048576 : rows);
  softmax_rows_kernel<<<g, kThreads, 0, st>>> (
      s, rows, nk, scale, bias_rows, mask);
  return cudaGetLastError ();
}

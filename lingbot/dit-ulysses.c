/* lingbot-gst: DiT sequence parallelism (Ulysses) over a worker group
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Every rank holds the full weights and a band of token rows of every latent
 * frame (DESIGN.md 3; lingbot_dit_shard_init()).  Around self-attention an
 * all-to-all swaps token shards for head shards (vae_and_distributed_spec.md
 * B.3): rank r receives the whole chunk's q/k/v for heads
 * [r*H/R, (r+1)*H/R), in rank-major token order, writes k/v into its
 * head-sharded KV cache in frame-major order (so the sink and eviction keep
 * whole frames, exactly as one rank does), attends, and a second all-to-all
 * brings the output back to the token owners.  RoPE runs before the first
 * exchange on the band's own positions (it is per token and per head, so it
 * commutes with the exchange); the q/k RMSNorm over the full width also runs
 * before it.  Cross-attention, FFN and the camera injection are local.  The
 * head output is all-gathered so every rank holds the whole prediction and
 * runs the (tiny, elementwise) sampler step itself, bit-identically.
 */
#include "lingbot/dit-private.h"
#include "comm/collectives.h"

#include <string.h>

/**
 * lingbot_dit_ulysses_alloc:
 * @rs: a rank state of a group with more than one rank
 * @error: %LB_ERROR_DEVICE
 *
 * Allocates the exchange buffers and the per-peer counts, once.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_ulysses_alloc (LingbotDitRank * rs, GError ** error)
{
  const LingbotDitShard *sh = &rs->sh;
  const int R = sh->n_ranks;
  const int64_t n = sh->n_local, N = sh->n_tokens;
  const int64_t hl = sh->heads_local, hd = rs->head_dim;
  const int64_t zf = (int64_t) rs->cfg->out_dim * 4;
  int64_t s3[3] = { N, hl, hd };

  if (!(rs->send = lingbot_dit_tensor_new (rs->s, 3, MAX (n, 1) * hl * hd * R,
              error)) ||
      !(rs->recv = lingbot_dit_tensor_new (rs->s, 1, MAX (n, 1) * hl * hd * R,
              error)) ||
      !(rs->q_r = lb_tensor_new_on (rs->s, LB_DTYPE_F32, 3, s3, error)) ||
      !(rs->k_r = lb_tensor_new_on (rs->s, LB_DTYPE_F32, 3, s3, error)) ||
      !(rs->v_r = lb_tensor_new_on (rs->s, LB_DTYPE_F32, 3, s3, error)) ||
      !(rs->o_r = lb_tensor_new_on (rs->s, LB_DTYPE_F32, 3, s3, error)) ||
      !(rs->z_rm = lingbot_dit_tensor_new (rs->s, N, zf, error)) ||
      !(rs->z_full = lingbot_dit_tensor_new (rs->s, N, zf, error)))
    return FALSE;

  rs->cnt_a = g_new0 (gsize, R);
  rs->dsp_a = g_new0 (gsize, R);
  rs->cnt_b = g_new0 (gsize, 2 * R);
  rs->dsp_b = g_new0 (gsize, 2 * R);
  for (int r = 0; r < R; r++) {
    const int64_t nr = sh->frames * sh->band_rows[r] * sh->wp;
    rs->cnt_a[r] = (gsize) (n * hl * hd);
    rs->dsp_a[r] = (gsize) (r * n * hl * hd);
    rs->cnt_b[r] = (gsize) (nr * hl * hd);
    rs->dsp_b[r] = (gsize) (sh->band_tok0[r] * hl * hd);
    rs->cnt_b[R + r] = (gsize) (nr * zf);
    rs->dsp_b[R + r] = (gsize) (sh->band_tok0[r] * zf);
  }
  return TRUE;
}

/* rows x width bytes from a pitched source to a pitched destination. */
static gboolean
copy_2d (LbStream * s, guint8 * dst, gsize dst_pitch, const guint8 * src,
    gsize src_pitch, gsize width, int64_t rows, GError ** error)
{
  if (s->backend->device_type == LB_DEVICE_CPU) {
    for (int64_t i = 0; i < rows; i++)
      memcpy (dst + i * dst_pitch, src + i * src_pitch, width);
    return TRUE;
  }
  /* TODO: a strided-copy op; one copy per row works on any backend */
  for (int64_t i = 0; i < rows; i++)
    if (!lingbot_dit_copy (s, dst + i * dst_pitch, src + i * src_pitch,
            width, error))
      return FALSE;
  return TRUE;
}

/* src [n, H*hd] -> send [R][n][hl*hd] (heads of rank d in block d). */
static gboolean
pack_heads (LingbotDitRank * rs, const LbTensor * src, guint8 * send,
    GError ** error)
{
  const LingbotDitShard *sh = &rs->sh;
  const gsize piece = (gsize) sh->heads_local * rs->head_dim * sizeof (float);
  const gsize pitch = (gsize) rs->cfg->dim * sizeof (float);
  for (int d = 0; d < sh->n_ranks; d++)
    if (!copy_2d (rs->s, send + d * sh->n_local * piece, piece,
            (const guint8 *) src->data + d * piece, pitch, piece, sh->n_local,
            error))
      return FALSE;
  return TRUE;
}

/**
 * lingbot_dit_ulysses_qkv:
 * @rs: a rank state with rs->q/k/v [n_local, D] (normed, rotated)
 * @error: collective errors
 *
 * Scatters heads, gathers tokens: rs->q_r/k_r/v_r become [N, H/R, hd] for
 * this rank's heads over the whole chunk, in rank-major token order.  The
 * three exchanges are submitted together.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_ulysses_qkv (LingbotDitRank * rs, GError ** error)
{
  const LingbotDitShard *sh = &rs->sh;
  const gsize block = (gsize) sh->n_local * sh->heads_local * rs->head_dim *
      sh->n_ranks * sizeof (float);
  guint8 *send = rs->send->data;
  const LbTensor *src[3] = { rs->q, rs->k, rs->v };
  LbTensor *dst[3] = { rs->q_r, rs->k_r, rs->v_r };
  for (int i = 0; i < 3; i++)
    if (!pack_heads (rs, src[i], send + i * block, error))
      return FALSE;
  if (!lb_comm_group_start (rs->rank, error))
    return FALSE;
  for (int i = 0; i < 3; i++) {
    if (!lb_comm_all_to_all_v (rs->rank, LB_DTYPE_F32, send + i * block,
            rs->cnt_a, rs->dsp_a, dst[i]->data, rs->cnt_b, rs->dsp_b, error))
      return FALSE;
  }
  return lb_comm_group_end (rs->rank, error);
}

/**
 * lingbot_dit_ulysses_out:
 * @rs: a rank state with rs->o_r [N, H/R, hd] (rank-major tokens)
 * @error: collective errors
 *
 * The reverse exchange: rs->o becomes [n_local, D] with every head.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_ulysses_out (LingbotDitRank * rs, GError ** error)
{
  const LingbotDitShard *sh = &rs->sh;
  if (!lb_comm_all_to_all_v (rs->rank, LB_DTYPE_F32, rs->o_r->data,
          rs->cnt_b, rs->dsp_b, rs->recv->data, rs->cnt_a, rs->dsp_a, error))
    return FALSE;
  const gsize piece = (gsize) sh->heads_local * rs->head_dim * sizeof (float);
  const gsize pitch = (gsize) rs->cfg->dim * sizeof (float);
  const guint8 *recv = rs->recv->data;
  for (int s = 0; s < sh->n_ranks; s++)
    if (!copy_2d (rs->s, (guint8 *) rs->o->data + s * piece, pitch,
            recv + s * sh->n_local * piece, piece, piece, sh->n_local, error))
      return FALSE;
  return TRUE;
}

/**
 * lingbot_dit_ulysses_gather_z:
 * @rs: a rank state with rs->z [n_local, 64]
 * @error: collective errors
 *
 * All-gathers the head output and reorders it frame-major into
 * rs->z_full [N, 64], ready for unpatchify.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_ulysses_gather_z (LingbotDitRank * rs, GError ** error)
{
  const LingbotDitShard *sh = &rs->sh;
  const int R = sh->n_ranks;
  const int64_t zf = rs->z->shape[1];
  const gsize row = (gsize) zf * sizeof (float);
  if (!lb_comm_all_gather_v (rs->rank, LB_DTYPE_F32, rs->z->data,
          (gsize) (sh->n_local * zf), rs->z_rm->data, rs->cnt_b + R,
          rs->dsp_b + R, error))
    return FALSE;
  const guint8 *src = rs->z_rm->data;
  guint8 *dst = rs->z_full->data;
  for (int r = 0; r < R; r++) {
    const int64_t band = sh->band_rows[r] * sh->wp;
    for (int64_t f = 0; f < sh->frames && band > 0; f++)
      if (!lingbot_dit_copy (rs->s,
              dst + (f * sh->frame_tokens + sh->band_row0[r] * sh->wp) * row,
              src + (sh->band_tok0[r] + f * band) * row, band * row, error))
        return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_dit_gather_band_rows:
 * @rs: a rank state
 * @full: f32 [N, C] token features of the whole chunk (frame-major)
 * @band: (out): f32 [n_local, C] this rank's tokens
 * @error: copy errors
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_gather_band_rows (LingbotDitRank * rs, const LbTensor * full,
    LbTensor * band, GError ** error)
{
  const LingbotDitShard *sh = &rs->sh;
  const gsize row = (gsize) full->shape[1] * sizeof (float);
  const int64_t nb = sh->n_rows * sh->wp;
  for (int64_t f = 0; f < sh->frames && nb > 0; f++)
    if (!lingbot_dit_copy (rs->s, (guint8 *) band->data + f * nb * row,
            (const guint8 *) full->data + (f * sh->frame_tokens +
                sh->row0 * sh->wp) * row, nb * row, error))
      return FALSE;
  return TRUE;
}

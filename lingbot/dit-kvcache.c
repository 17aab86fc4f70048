/* lingbot-gst: LingBot-World v2 causal DiT: the self-attention KV cache
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Spec 3.3: per layer [cap, heads_local * head_dim] slots of the rank's
 * heads, sink frames at the front, the rest a rolling window; the cursor
 * rule (lingbot_dit_cache_begin(), lingbot_dit_cache_end()), the eviction
 * shift and the views the attention reads.  Allocated by
 * lingbot_dit_rank_init().
 */
#include "lingbot/dit-private.h"

#define OPS (lb_ops (rs->s))

/**
 * lingbot_dit_kv_dtype:
 * @s: a rank's stream, its #LbMathMode set
 *
 * The dtype of the rank's self-attention KV cache (spec 1.11: "Q, K, V ...
 * are bf16.  The KV cache is bf16"): %LB_DTYPE_BF16 on a device rank whose
 * stream computes in %LB_MATH_BF16, %LB_DTYPE_F32 otherwise (every CPU
 * rank, as CPU ranks keep f32 weights, and every %LB_MATH_FP32 stream);
 * %LB_DTYPE_BF16 on every rank, CPU ranks included, whose stream is in
 * %LB_MATH_FP8 (CPU ranks then run the device path's oracle).
 *
 * Returns: %LB_DTYPE_BF16 or %LB_DTYPE_F32.
 */
LbDType
lingbot_dit_kv_dtype (LbStream * s)
{
  if (s->math == LB_MATH_FP8)
    return LB_DTYPE_BF16;
  return !lingbot_dit_is_host (s) && s->math == LB_MATH_BF16 ? LB_DTYPE_BF16 :
      LB_DTYPE_F32;
}

/**
 * lingbot_dit_kv_cache_bytes:
 * @cfg: the model
 * @cap: KV-cache slots per layer (window frames x T_f)
 * @n_ranks: Ulysses ranks (each holds heads / @n_ranks of every slot)
 * @dtype: the cache's dtype (lingbot_dit_kv_dtype())
 *
 * The bytes of one rank's self-attention KV cache, keys and values of
 * every layer: `2 L cap (D / R) size(dtype)`, what lingbot_dit_rank_init()
 * allocates (docs/design/dit-devices.md "Memory per rank").
 *
 * Returns: bytes per rank.
 */
guint64
lingbot_dit_kv_cache_bytes (const LingbotDitConfig * cfg, int64_t cap,
    int n_ranks, LbDType dtype)
{
  const guint64 per_rank = (guint64) (cfg->dim / MAX (n_ranks, 1));
  return 2 * (guint64) cfg->num_layers * (guint64) cap *per_rank *
      lb_dtype_size (dtype);
}

/* ------------------------------------------------------------------------ */
/* KV cache (spec 3.3)                                                      */
/* ------------------------------------------------------------------------ */

/**
 * lingbot_dit_cache_begin:
 * @rs: a rank state
 * @current_start: absolute index of the chunk's first token
 *
 * Applies the cursor rule of spec 3.3 for a call with the chunk's tokens:
 * on the first call of a chunk that does not fit, the oldest non-sink
 * tokens are evicted (each block then shifts its cache in
 * lingbot_dit_block_forward()); repeated calls with the same start leave the
 * cursors and overwrite the chunk's own slots.
 */
void
lingbot_dit_cache_begin (LingbotDitRank * rs, int64_t current_start)
{
  const int64_t n = rs->sh.n_tokens, e = current_start + n;
  if (e > rs->global_end && n + rs->local_end > rs->cap) {
    rs->pend_evict = n + rs->local_end - rs->cap;
    rs->pend_local_end = rs->local_end + (e - rs->global_end) - rs->pend_evict;
  } else {
    rs->pend_evict = 0;
    rs->pend_local_end = rs->local_end + MAX (e - rs->global_end, 0);
  }
}

/**
 * lingbot_dit_cache_end:
 * @rs: a rank state
 * @current_start: the same as for lingbot_dit_cache_begin()
 *
 * Commits the cursors after every block ran.
 */
void
lingbot_dit_cache_end (LingbotDitRank * rs, int64_t current_start)
{
  rs->local_end = rs->pend_local_end;
  rs->global_end = MAX (rs->global_end, current_start + rs->sh.n_tokens);
  rs->pend_evict = 0;
}

/* [cap, hl * hd] rows [row0, row0 + count) of a layer's cache. */
static void
cache_rows (LbTensor * out, const LbTensor * cache, int64_t row0, int64_t count)
{
  lb_tensor_view_narrow (out, cache, 0, row0, count);
}

/**
 * lingbot_dit_cache_evict:
 * @rs: a rank state after lingbot_dit_cache_begin()
 * @layer: block index
 * @error: copy errors
 *
 * Shifts the non-sink part of the layer's cache down by pend_evict slots.
 * The source and destination overlap, so the move goes front to back in
 * pieces of at most pend_evict rows, each a copy between disjoint ranges
 * (a device copy must not overlap).  The rows move as bytes of the
 * cache's dtype (a bf16 cache moves half the bytes).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_cache_evict (LingbotDitRank * rs, int layer, GError ** error)
{
  const int64_t ev = rs->pend_evict;
  if (ev <= 0)
    return TRUE;
  const int64_t rolled = rs->local_end - ev - rs->sink;
  if (rolled <= 0)
    return TRUE;
  for (int i = 0; i < 2; i++) {
    LbTensor *c = i ? rs->cache_v[layer] : rs->cache_k[layer];
    for (int64_t done = 0; done < rolled; done += ev) {
      const int64_t m = MIN (ev, rolled - done);
      LbTensor dst, src;
      cache_rows (&dst, c, rs->sink + done, m);
      cache_rows (&src, c, rs->sink + ev + done, m);
      if (!lingbot_dit_copy_rows (rs->s, &dst, &src, error))
        return FALSE;
    }
  }
  return TRUE;
}

/**
 * lingbot_dit_cache_slots:
 * @rs: a rank state after lingbot_dit_cache_begin()
 * @cache: one layer's cache_k or cache_v
 * @rows: (out): the view
 *
 * The chunk's slots [local_end - N, local_end) of a layer's cache,
 * [N, heads_local * hd]: where one rank's self-attention (dit-block.c)
 * writes its keys and values (frame-major token order), after
 * lingbot_dit_cache_evict().
 */
void
lingbot_dit_cache_slots (LingbotDitRank * rs, const LbTensor * cache,
    LbTensor * rows)
{
  cache_rows (rows, cache, rs->pend_local_end - rs->sh.n_tokens,
      rs->sh.n_tokens);
}

/**
 * lingbot_dit_cache_write_sharded:
 * @rs: a rank state whose k_r / v_r hold the exchanged keys and values
 * @layer: block index
 * @error: copy errors
 *
 * Received keys/values of every rank's band (rank-major) into the cache in
 * frame-major order, so the sink and eviction see whole frames: per source
 * rank one strided copy of F runs of band * hl * hd elements.  With a
 * bf16 cache the exchange already moved bf16 (rounded by the packing copy
 * with lb_f32_to_bf16(), as rms_norm_rope rounds on one rank, so 1 and R
 * ranks store the same bits) and the copy op moves them as they are.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_cache_write_sharded (LingbotDitRank * rs, int layer,
    GError ** error)
{
  const LingbotDitShard *sh = &rs->sh;
  const int64_t slot0 = rs->pend_local_end - sh->n_tokens;
  const int64_t row = sh->heads_local * rs->head_dim;
  const LbTensor *src_all[2] = { rs->k_r, rs->v_r };
  LbTensor *cache[2] = { rs->cache_k[layer], rs->cache_v[layer] };
  for (int i = 0; i < 2; i++) {
    LbTensor chunk, frames, src;
    int64_t fshape[2] = { sh->frames, sh->frame_tokens * row };
    cache_rows (&chunk, cache[i], slot0, sh->n_tokens);
    lb_tensor_view_reshape (&frames, &chunk, 2, fshape);
    for (int r = 0; r < sh->n_ranks; r++) {
      const int64_t band = sh->band_rows[r] * sh->wp;
      if (band == 0)
        continue;
      LbTensor dst;
      int64_t bshape[2] = { sh->frames, band * row };
      lb_tensor_view_narrow (&dst, &frames, 1, sh->band_row0[r] * sh->wp * row,
          band * row);
      if (!lingbot_dit_flat_view (&src, src_all[i], sh->band_tok0[r] * row,
              sh->frames * band * row) ||
          !lb_tensor_view_reshape (&src, &src, 2, bshape))
        return FALSE;
      if (rs->kv_dtype != LB_DTYPE_F32 ?
          !OPS->copy (rs->s, &src, &dst, error) :
          !lingbot_dit_copy_rows (rs->s, &dst, &src, error))
        return FALSE;
    }
  }
  return TRUE;
}

/**
 * lingbot_dit_cache_set_max_attention:
 * @rs: a rank state after lingbot_dit_rank_init()
 * @tokens: the self-attention span (spec 1.8 max_attention_size) in
 *   tokens; 0 or anything above the capacity is the capacity (what
 *   lingbot_dit_rank_init() sets)
 *
 * Sets how many cache slots up to the chunk's end the queries attend to
 * (lingbot_dit_cache_window()).  The span is over tokens, not heads, so
 * every rank of a Ulysses group is given the same value.
 */
void
lingbot_dit_cache_set_max_attention (LingbotDitRank * rs, int64_t tokens)
{
  g_return_if_fail (tokens >= 0);
  rs->max_attention = tokens == 0 || tokens > rs->cap ? rs->cap : tokens;
}

/**
 * lingbot_dit_cache_window_at:
 * @rs: a rank state
 * @layer: block index
 * @end: the slot after the chunk's last (pend_local_end during a chunk)
 * @k: (out): [window, heads_local, hd] view of the keys attention reads
 * @v: (out): the same of the values
 *
 * The last max_attention slots up to @end (spec 3.3): what
 * lingbot_dit_cache_window() gives during a chunk ending at @end, and
 * what lingbot_dit_rank_reserve() readies the attention for.
 */
void
lingbot_dit_cache_window_at (LingbotDitRank * rs, int layer, int64_t end,
    LbTensor * k, LbTensor * v)
{
  const int64_t start = MAX (0, end - rs->max_attention);
  int64_t shape[3] = { rs->cap, rs->sh.heads_local, rs->head_dim };
  LbTensor full;
  lb_tensor_view_reshape (&full, rs->cache_k[layer], 3, shape);
  lb_tensor_view_narrow (k, &full, 0, start, end - start);
  lb_tensor_view_reshape (&full, rs->cache_v[layer], 3, shape);
  lb_tensor_view_narrow (v, &full, 0, start, end - start);
}

/**
 * lingbot_dit_cache_window:
 * @rs: a rank state after lingbot_dit_cache_begin()
 * @layer: block index
 * @k: (out): [window, heads_local, hd] view of the keys attention reads
 * @v: (out): the same of the values
 *
 * The last max_attention slots up to the chunk's end (spec 3.3).
 */
void
lingbot_dit_cache_window (LingbotDitRank * rs, int layer, LbTensor * k,
    LbTensor * v)
{
  lingbot_dit_cache_window_at (rs, layer, rs->pend_local_end, k, v);
}

/**
 * lingbot_dit_cache_window_ends:
 * @rs: a rank state after lingbot_dit_rank_init()
 * @ends: (out caller-allocates): room for @max values
 * @max: the room
 *
 * The distinct chunk ends (pend_local_end) a session's chunks reach under
 * the cursor rule of lingbot_dit_cache_begin(): N, 2N, ... while the chunks
 * fit, then the capacity (eviction keeps the end there), N the chunk's
 * tokens.  Chunks that restart at an earlier start reach no other end.
 *
 * Returns: how many were written (at most @max; the capacity is always
 *   the last).
 */
int
lingbot_dit_cache_window_ends (LingbotDitRank * rs, int64_t * ends, int max)
{
  const int64_t n = rs->sh.n_tokens;
  int count = 0;
  for (int64_t e = n; count < max; e += n) {
    ends[count++] = MIN (e, rs->cap);
    if (e >= rs->cap)
      break;
  }
  if (count == max)
    ends[max - 1] = rs->cap;
  return count;
}

/* lingbot-gst: LingBot-World v2 causal DiT: one rank's state and buffers
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * What lingbot_dit_rank_init() sets up for one rank: its band of tokens
 * (lingbot_dit_shard_init()), its copy of the weights on its device (bf16
 * or e4m3 GEMM matrices by its math mode), the KV cache and every buffer a
 * pass needs, so that the per-pass functions (dit-block.c, dit-kvcache.c,
 * dit-ulysses.c) allocate nothing.
 */
#include "lingbot/dit-private.h"
#include "comm/collectives.h"

#include <string.h>

/* ------------------------------------------------------------------------ */
/* buffers                                                                  */
/* ------------------------------------------------------------------------ */

/* Zeroes a contiguous tensor on @s's device.  Not for per-chunk use: on a
 * device it uploads @zeros (a host tensor of zeros of @t's dtype and
 * shape, made by the caller once for all layers) and waits for it. */
static gboolean
zero_fill (LbStream * s, LbTensor * t, LbTensor ** zeros, GError ** error)
{
  if (lingbot_dit_is_host (s)) {
    memset (t->data, 0, lb_tensor_nbytes (t));
    return TRUE;
  }
  if (*zeros == NULL)
    *zeros = lb_tensor_new_zeros (t->dtype, t->ndim, t->shape);
  return lb_tensor_upload (s, t, *zeros, error) &&
      s->backend->stream_synchronize (s, error);
}

/* A contiguous copy of host tensor @src on @s's device (uploaded and
 * waited for, so @src may go away).  Init-time only. */
static LbTensor *
upload_new (LbStream * s, const LbTensor * src, GError ** error)
{
  g_autoptr (LbTensor) dev = lb_tensor_new_on (s, src->dtype, src->ndim,
      src->shape, error);
  if (dev == NULL || !lb_tensor_upload (s, dev, src, error) ||
      !s->backend->stream_synchronize (s, error))
    return NULL;
  return g_steal_pointer (&dev);
}

/**
 * lingbot_dit_shard_init:
 * @sh: (out): the shard description
 * @rank: this rank
 * @n_ranks: ranks of the group
 * @frames: latent frames per chunk
 * @hp: token rows per frame (h_lat / 2)
 * @wp: token columns per frame (w_lat / 2)
 * @num_heads: attention heads
 * @error: %LB_ERROR_INVALID_ARGUMENT when @n_ranks does not divide the heads
 *
 * Splits the token rows of every frame into @n_ranks contiguous bands
 * (lb_split_rows(): the first ranks get one more row when they do not
 * divide; a rank may get none) and the heads into equal shards.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_shard_init (LingbotDitShard * sh, int rank, int n_ranks,
    int64_t frames, int64_t hp, int64_t wp, int num_heads, GError ** error)
{
  memset (sh, 0, sizeof (*sh));
  if (n_ranks < 1 || num_heads % n_ranks != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT Ulysses: %d ranks do not divide the %d attention heads "
        "(use a rank count that divides %d)", n_ranks, num_heads, num_heads);
    return FALSE;
  }
  sh->rank = rank;
  sh->n_ranks = n_ranks;
  sh->frames = frames;
  sh->hp = hp;
  sh->wp = wp;
  sh->frame_tokens = hp * wp;
  sh->n_tokens = frames * hp * wp;
  sh->heads_local = num_heads / n_ranks;
  sh->band_row0 = g_new0 (int64_t, n_ranks);
  sh->band_rows = g_new0 (int64_t, n_ranks);
  sh->band_tok0 = g_new0 (int64_t, n_ranks);
  int64_t tok = 0;
  for (int r = 0; r < n_ranks; r++) {
    lb_split_rows (hp, n_ranks, r, &sh->band_row0[r], &sh->band_rows[r]);
    sh->band_tok0[r] = tok;
    tok += frames * sh->band_rows[r] * wp;
  }
  sh->row0 = sh->band_row0[rank];
  sh->n_rows = sh->band_rows[rank];
  sh->n_local = frames * sh->n_rows * wp;
  return TRUE;
}

/**
 * lingbot_dit_shard_clear:
 * @sh: a shard description
 */
void
lingbot_dit_shard_clear (LingbotDitShard * sh)
{
  g_clear_pointer (&sh->band_row0, g_free);
  g_clear_pointer (&sh->band_rows, g_free);
  g_clear_pointer (&sh->band_tok0, g_free);
}

/* @n_layers tensors [d0, d1] of @dtype on @s's device, zeroed when
 * @zero. */
static LbTensor **
new_per_layer (LbStream * s, int n_layers, LbDType dtype, int64_t d0,
    int64_t d1, gboolean zero, GError ** error)
{
  LbTensor **a = g_new0 (LbTensor *, n_layers);
  g_autoptr (LbTensor) zeros = NULL;
  const int64_t shape[2] = { d0, d1 };
  for (int l = 0; l < n_layers; l++) {
    a[l] = lb_tensor_new_on (s, dtype, 2, shape, error);
    if (a[l] == NULL || (zero && !zero_fill (s, a[l], &zeros, error))) {
      for (int i = 0; i <= l; i++)
        g_clear_pointer (&a[i], lb_tensor_free);
      g_free (a);
      return NULL;
    }
  }
  return a;
}

static void
free_per_layer (LbTensor *** a, int n_layers)
{
  if (*a == NULL)
    return;
  for (int l = 0; l < n_layers; l++)
    g_clear_pointer (&(*a)[l], lb_tensor_free);
  g_clear_pointer (a, g_free);
}

/* ------------------------------------------------------------------------ */
/* weights on the rank's device                                             */
/* ------------------------------------------------------------------------ */

/* A weight slot of LingbotDitWeights / LingbotDitBlock: where the pointer
 * is, and whether it is a linear layer's w (the GEMM matrices, stored as
 * bf16 on a device in LB_MATH_BF16). */
typedef enum
{
  SLOT_PLAIN,                   /* copied as stored (f32) */
  SLOT_GEMM_W,                  /* a linear w: bf16 / e4m3 by the mode */
  SLOT_SCALE,                   /* the e4m3 scales of the slot before the
                                 * bias before it (made with the w) */
} SlotKind;

typedef struct
{
  glong offset;
  SlotKind kind;
} WeightSlot;

#define LIN(f) { G_STRUCT_OFFSET (T, f.w), SLOT_GEMM_W }, \
  { G_STRUCT_OFFSET (T, f.b), SLOT_PLAIN }, \
  { G_STRUCT_OFFSET (T, f.s), SLOT_SCALE }
#define ONE(f) { G_STRUCT_OFFSET (T, f), SLOT_PLAIN }
#define T LingbotDitWeights
static const WeightSlot top_slots[] = {
  LIN (patch), LIN (ctl_patch), LIN (c2ws1), LIN (c2ws2), LIN (text0),
  LIN (text2), LIN (time0), LIN (time2), LIN (time_proj), LIN (head),
  ONE (head_modulation),
};

#undef T
#define T LingbotDitBlock
static const WeightSlot block_slots[] = {
  ONE (modulation), LIN (sa_q), LIN (sa_k), LIN (sa_v), LIN (sa_o),
  ONE (sa_norm_q), ONE (sa_norm_k), ONE (norm3_w), ONE (norm3_b),
  LIN (ca_q), LIN (ca_k), LIN (ca_v), LIN (ca_o), ONE (ca_norm_q),
  ONE (ca_norm_k), LIN (ffn0), LIN (ffn2), LIN (cam1), LIN (cam2),
  LIN (cam_scale), LIN (cam_shift),
};

#undef T
#undef LIN
#undef ONE

/* Every member is listed above (a new weight must be added there). */
G_STATIC_ASSERT (sizeof (LingbotDitBlock) ==
    G_N_ELEMENTS (block_slots) * sizeof (LbTensor *));
G_STATIC_ASSERT (G_STRUCT_OFFSET (LingbotDitWeights, blocks) ==
    (glong) (G_N_ELEMENTS (top_slots) * sizeof (LbTensor *)));

/* State of one weights upload: the stream, whether GEMM matrices go as
 * bf16 or as e4m3, the host buffer they are rounded into (grown to the
 * largest matrix, reused for all) and the device bytes so far. */
typedef struct
{
  LbStream *s;
  gboolean bf16, fp8;
  uint16_t *buf;
  gsize buf_len;                /* elements */
  gsize nbytes;
} WeightUpload;

/* A bf16 copy of f32 matrix @h on the device: rounded on the host
 * (lb_f32_to_bf16, nearest even) into the reused buffer, uploaded, and
 * waited for before the buffer can be overwritten. */
static LbTensor *
upload_bf16 (WeightUpload * u, const LbTensor * h, GError ** error)
{
  if (h->dtype != LB_DTYPE_F32 || !lb_tensor_is_contiguous (h)) {
    g_autofree char *shape = lb_tensor_shape_string (h);
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT weights: a linear weight is %s %s, expected contiguous f32 to "
        "round to bf16", lb_dtype_name (h->dtype), shape);
    return NULL;
  }
  const int64_t n = lb_tensor_numel (h);
  if ((gsize) n > u->buf_len) {
    g_free (u->buf);
    u->buf = g_new (uint16_t, MAX (n, 1));
    u->buf_len = (gsize) n;
  }
  const float *src = h->data;
  uint16_t *dst = u->buf;
#pragma omp parallel for schedule(static) if (n >= (1 << 20))
  for (int64_t i = 0; i < n; i++)
    dst[i] = lb_f32_to_bf16 (src[i]);
  LbTensor view;
  lb_tensor_view_init (&view, LB_DTYPE_BF16, u->buf, LB_DEVICE_HOST, h->ndim,
      h->shape, NULL);
  return upload_new (u->s, &view, error);
}

/* An e4m3 copy of f32 matrix @h [out, in] on the device and its
 * per-output-channel scales (*@scale, f32 [out]): each row quantised by
 * lb_quantize_e4m3_row() (sw = amax / 448) on the host into the reused
 * buffer (codes, then the scales after them), uploaded, waited for. */
static LbTensor *
upload_fp8 (WeightUpload * u, const LbTensor * h, LbTensor ** scale,
    GError ** error)
{
  if (h->dtype != LB_DTYPE_F32 || h->ndim != 2 || !lb_tensor_is_contiguous (h)) {
    g_autofree char *shape = lb_tensor_shape_string (h);
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT weights: a linear weight is %s %s, expected contiguous 2-D f32 "
        "to quantise to fp8", lb_dtype_name (h->dtype), shape);
    return NULL;
  }
  const int64_t rows = h->shape[0], cols = h->shape[1];
  /* codes (rows * cols bytes) then rows floats, in uint16_t elements */
  const gsize need = ((gsize) (rows * cols) + 1) / 2 + 2 * (gsize) rows + 2;
  if (need > u->buf_len) {
    g_free (u->buf);
    u->buf = g_new (uint16_t, need);
    u->buf_len = need;
  }
  uint8_t *codes = (uint8_t *) u->buf;
  float *sc = (float *) (codes + ((rows * cols + 3) & ~(int64_t) 3));
  const float *src = h->data;
#pragma omp parallel for schedule(static) if (rows * cols >= (1 << 20))
  for (int64_t r = 0; r < rows; r++)
    lb_quantize_e4m3_row (src + r * cols, cols, codes + r * cols, &sc[r]);
  LbTensor view, sview;
  lb_tensor_view_init (&view, LB_DTYPE_F8E4M3, codes, LB_DEVICE_HOST, 2,
      h->shape, NULL);
  lb_tensor_view_init (&sview, LB_DTYPE_F32, sc, LB_DEVICE_HOST, 1,
      &rows, NULL);
  g_autoptr (LbTensor) w = upload_new (u->s, &view, error);
  if (w == NULL || !(*scale = upload_new (u->s, &sview, error)))
    return NULL;
  return g_steal_pointer (&w);
}

static gboolean
upload_slots (WeightUpload * u, gpointer dst, gconstpointer src,
    const WeightSlot * slots, guint n_slots, GError ** error)
{
  for (guint i = 0; i < n_slots; i++) {
    const LbTensor *h = G_STRUCT_MEMBER (LbTensor *, src, slots[i].offset);
    LbTensor **d = &G_STRUCT_MEMBER (LbTensor *, dst, slots[i].offset);
    if (h == NULL || slots[i].kind == SLOT_SCALE)
      continue;
    if (slots[i].kind == SLOT_GEMM_W && u->fp8) {
      /* LIN(): the scale slot is two after the w */
      g_assert (i + 2 < n_slots && slots[i + 2].kind == SLOT_SCALE);
      LbTensor **sd = &G_STRUCT_MEMBER (LbTensor *, dst,
          slots[i + 2].offset);
      *d = upload_fp8 (u, h, sd, error);
      if (*d == NULL)
        return FALSE;
      u->nbytes += lb_tensor_nbytes (*sd);
    } else if (slots[i].kind == SLOT_GEMM_W && u->bf16) {
      *d = upload_bf16 (u, h, error);
    } else {
      *d = upload_new (u->s, h, error);
    }
    if (*d == NULL)
      return FALSE;
    u->nbytes += lb_tensor_nbytes (*d);
  }
  return TRUE;
}

static void
free_slots (gpointer w, const WeightSlot * slots, guint n_slots)
{
  for (guint i = 0; i < n_slots; i++)
    g_clear_pointer (&G_STRUCT_MEMBER (LbTensor *, w, slots[i].offset),
        lb_tensor_free);
}

/**
 * lingbot_dit_weights_init:
 * @wt: (out): the weights for @s's device
 * @owned: (out): whether @wt holds its own copies (free them with
 *   lingbot_dit_weights_clear())
 * @nbytes: (out): device bytes of those copies (0 when borrowed)
 * @s: a rank's stream; on a device backend its #LbMathMode (@s->math, set
 *   by the session before this call) chooses the storage
 * @dit: the model (host f32 weights)
 * @error: %LB_ERROR_DEVICE, %LB_ERROR_INVALID_ARGUMENT (a linear weight of
 *   the model that is not contiguous f32, in bf16 mode)
 *
 * On the CPU backend @wt is @dit's own weights (no copy: every rank
 * borrows the same host tensors), whatever @s->math says.  On any other
 * backend every weight is uploaded once as a contiguous tensor on @s's
 * device, each upload waited for: one full copy per rank (Ulysses
 * replicates the weights).  With %LB_MATH_FP32 every tensor is f32.  With
 * %LB_MATH_BF16 (spec 1.11) the GEMM matrices, i.e. the w of every
 * #LingbotDitLinear (patch and control embeddings, text and time MLPs,
 * every attention / FFN / camera projection, the head), are rounded to
 * bf16 on the host (nearest even, lb_f32_to_bf16(), one host buffer
 * reused for all) and uploaded as %LB_DTYPE_BF16 [out, in]; the biases,
 * norm weights and modulation tables stay f32.  *@nbytes counts the bytes
 * as stored (2 per bf16 element).
 *
 * With %LB_MATH_FP8, on every backend (a CPU rank too: it then runs the
 * FP8 oracle, owning its copies), the GEMM matrices are quantised on the
 * host once, each output channel (row) n with its scale
 * `sw[n] = amax |w[n, :]| / 448` (lb_quantize_e4m3_row()), and stored as
 * %LB_DTYPE_F8E4M3 [out, in] with the scales in the linear's s (f32
 * [out]); everything else as with %LB_MATH_FP32.  *@nbytes counts 1 byte
 * per code plus the scales.
 *
 * Returns: %TRUE on success; on failure @wt may hold part of the copies
 * (*@owned is then %TRUE: clear it).
 */
gboolean
lingbot_dit_weights_init (LingbotDitWeights * wt, gboolean * owned,
    gsize * nbytes, LbStream * s, const LingbotDit * dit, GError ** error)
{
  *nbytes = 0;
  if (lingbot_dit_is_host (s) && s->math != LB_MATH_FP8) {
    *wt = dit->w;
    *owned = FALSE;
    return TRUE;
  }
  memset (wt, 0, sizeof (*wt));
  *owned = TRUE;
  const int L = dit->cfg.num_layers;
  WeightUpload u = { s, s->math == LB_MATH_BF16, s->math == LB_MATH_FP8,
    NULL, 0, 0
  };
  gboolean ok = TRUE;
  wt->blocks = g_new0 (LingbotDitBlock, L);
  ok = upload_slots (&u, wt, &dit->w, top_slots, G_N_ELEMENTS (top_slots),
      error);
  for (int l = 0; ok && l < L; l++)
    ok = upload_slots (&u, &wt->blocks[l], &dit->w.blocks[l], block_slots,
        G_N_ELEMENTS (block_slots), error);
  g_free (u.buf);
  *nbytes = u.nbytes;
  return ok;
}

/**
 * lingbot_dit_weights_clear:
 * @wt: weights from lingbot_dit_weights_init()
 * @owned: what lingbot_dit_weights_init() said
 * @num_layers: blocks
 *
 * Frees owned copies; forgets borrowed ones.
 */
void
lingbot_dit_weights_clear (LingbotDitWeights * wt, gboolean owned,
    int num_layers)
{
  if (owned) {
    free_slots (wt, top_slots, G_N_ELEMENTS (top_slots));
    for (int l = 0; wt->blocks && l < num_layers; l++)
      free_slots (&wt->blocks[l], block_slots, G_N_ELEMENTS (block_slots));
    g_free (wt->blocks);
  }
  memset (wt, 0, sizeof (*wt));
}

/* rs->a16 and rs->h16 (dit-private.h) where the rank's GEMM weights are
 * bf16, rs->a8, rs->a8s, rs->h8 and rs->h8s where they are e4m3, unless
 * LINGBOT_DIT_GEMM_INPUTS is "f32". */
static gboolean
gemm_inputs_alloc (LingbotDitRank * rs, GError ** error)
{
  const char *env = g_getenv ("LINGBOT_DIT_GEMM_INPUTS");
  if (lingbot_dit_is_host (rs->s) || g_strcmp0 (env, "f32") == 0)
    return TRUE;
  if (rs->s->math == LB_MATH_FP8) {
    const int64_t q_shape[2] = { rs->sh.n_local, rs->cfg->dim };
    const int64_t h_shape[2] = { rs->sh.n_local, rs->cfg->ffn_dim };
    const int64_t s_shape[1] = { rs->sh.n_local };
    return (rs->a8 = lb_tensor_new_on (rs->s, LB_DTYPE_F8E4M3, 2, q_shape,
            error)) != NULL &&
        (rs->a8s = lb_tensor_new_on (rs->s, LB_DTYPE_F32, 1, s_shape,
            error)) != NULL &&
        (rs->h8 = lb_tensor_new_on (rs->s, LB_DTYPE_F8E4M3, 2, h_shape,
            error)) != NULL &&
        (rs->h8s = lb_tensor_new_on (rs->s, LB_DTYPE_F32, 1, s_shape,
            error)) != NULL;
  }
  if (rs->s->math != LB_MATH_BF16)
    return TRUE;
  const int64_t a_shape[2] = { rs->sh.n_local, rs->cfg->dim };
  const int64_t h_shape[2] = { rs->sh.n_local, rs->cfg->ffn_dim };
  return (rs->a16 = lb_tensor_new_on (rs->s, LB_DTYPE_BF16, 2, a_shape,
          error)) != NULL &&
      (rs->h16 = lb_tensor_new_on (rs->s, LB_DTYPE_BF16, 2, h_shape,
          error)) != NULL;
}

/**
 * lingbot_dit_rank_init:
 * @rs: (out): the rank state
 * @s: the rank's stream (its device holds the buffers)
 * @rank: (nullable): the worker-group rank; %NULL for one rank without
 *   collectives
 * @dit: the model (host float32 weights; on a device backend they are
 *   uploaded here, lingbot_dit_weights_init())
 * @frames: latent frames per chunk
 * @hp: token rows per frame
 * @wp: token columns per frame
 * @cap: KV-cache capacity in tokens
 * @sink: attention-sink size in tokens
 * @text_len: text-context tokens
 * @error: %LB_ERROR_INVALID_ARGUMENT, %LB_ERROR_DEVICE
 *
 * Allocates every buffer a forward pass needs, once, on @s's device, and
 * puts the weights and the RoPE tables there (docs/design/dit-devices.md).
 * The KV cache starts zeroed with both cursors at 0 (spec 3.3); its dtype
 * is lingbot_dit_kv_dtype() of @s (bf16 on a device rank in
 * %LB_MATH_BF16, so @s->math must be set before this call).  Such a rank
 * also gets bf16 buffers for the block's GEMM inputs (rs->a16, rs->h16:
 * the norms and the GELU write them in bf16, so the bf16 GEMMs read them
 * without a conversion; LINGBOT_DIT_GEMM_INPUTS=f32 keeps the f32 inputs,
 * which give the same bits); it then has no f32 attention output rs->o
 * (the attention writes rs->a16) and no f32 FFN hidden rs->h
 * (gemm_gelu_tanh writes rs->h16).  A device rank in %LB_MATH_FP8 gets
 * the e4m3 input of the layers after each norm instead (rs->a8 codes and
 * rs->a8s row scales, written by the norm_fp8 op and read by gemm_fp8_q)
 * and of the FFN's second layer (rs->h8, rs->h8s, written by
 * gemm_fp8_gelu_q: it has no f32 FFN hidden rs->h);
 * LINGBOT_DIT_GEMM_INPUTS=f32 again keeps the f32 norm output and hidden,
 * which give the same bits.
 *
 * A device rank then reserves its ops' per-call scratch with
 * lingbot_dit_rank_reserve(), once its attention span is set.
 *
 * Returns: %TRUE on success; on failure call lingbot_dit_rank_clear().
 */
gboolean
lingbot_dit_rank_init (LingbotDitRank * rs, LbStream * s, LbRank * rank,
    const LingbotDit * dit, int64_t frames, int64_t hp, int64_t wp,
    int64_t cap, int64_t sink, int64_t text_len, GError ** error)
{
  memset (rs, 0, sizeof (*rs));
  const LingbotDitConfig *cfg = &dit->cfg;
  rs->s = s;
  rs->rank = rank;
  rs->dit = dit;
  rs->cfg = cfg;
  if (!lingbot_dit_shard_init (&rs->sh, rank ? rank->rank : 0,
          rank ? rank->n_ranks : 1, frames, hp, wp, cfg->num_heads, error))
    return FALSE;
  rs->head_dim = cfg->dim / cfg->num_heads;
  rs->cap = cap;
  rs->sink = sink;
  rs->max_attention = cap;
  rs->text_len = text_len;

  const int64_t n = rs->sh.n_local, d = cfg->dim, L = cfg->num_layers;
  const int64_t hl = rs->sh.heads_local, hd = rs->head_dim;
#define ALLOC(field, r, c) if (!(rs->field = lingbot_dit_tensor_new (s, r, c, error))) return FALSE
  ALLOC (x, n, d);
  ALLOC (a, n, d);
  ALLOC (q, n, d);
  ALLOC (k, n, d);
  ALLOC (v, n, d);
  ALLOC (t1, n, d);
  ALLOC (ctl, n, d);
  ALLOC (z, n, (int64_t) cfg->out_dim * 4);
  const LbDType f32 = LB_DTYPE_F32;
  rs->kv_dtype = lingbot_dit_kv_dtype (s);
  if (!(rs->cam_scale = new_per_layer (s, L, f32, n, d, FALSE, error)) ||
      !(rs->cam_shift = new_per_layer (s, L, f32, n, d, FALSE, error)) ||
      !(rs->cache_k = new_per_layer (s, L, rs->kv_dtype, cap, hl * hd, TRUE,
              error)) ||
      !(rs->cache_v = new_per_layer (s, L, rs->kv_dtype, cap, hl * hd, TRUE,
              error)) ||
      !(rs->cross_k = new_per_layer (s, L, f32, text_len, d, TRUE, error)) ||
      !(rs->cross_v = new_per_layer (s, L, f32, text_len, d, TRUE, error)))
    return FALSE;
  for (int64_t l = 0; l < L; l++)
    rs->kv_bytes += lb_tensor_nbytes (rs->cache_k[l]) +
        lb_tensor_nbytes (rs->cache_v[l]);
  lb_rope_tables_new ((int) hd, LINGBOT_DIT_ROPE_MAX_POS,
      LINGBOT_DIT_ROPE_THETA, &rs->rope_cos, &rs->rope_sin);
  if (!lingbot_dit_is_host (s)) {
    g_autoptr (LbTensor) hc = g_steal_pointer (&rs->rope_cos);
    g_autoptr (LbTensor) hs = g_steal_pointer (&rs->rope_sin);
    if (!(rs->rope_cos = upload_new (s, hc, error)) ||
        !(rs->rope_sin = upload_new (s, hs, error)))
      return FALSE;
  }
  if (!(rs->rope_cos_c = lb_tensor_new_on (s, LB_DTYPE_F32, 2,
              rs->rope_cos->shape, error)) ||
      !(rs->rope_sin_c = lb_tensor_new_on (s, LB_DTYPE_F32, 2,
              rs->rope_sin->shape, error)) ||
      !lingbot_dit_copy_rows (s, rs->rope_cos_c, rs->rope_cos, error) ||
      !lingbot_dit_copy_rows (s, rs->rope_sin_c, rs->rope_sin, error))
    return FALSE;
  /* staging of lingbot_dit_rope_chunk()'s formula path: [2 (cos, sin), F,
   * t_pairs] */
  const int64_t rope_shape[3] = { 2, frames, (hd - 4 * (hd / 6)) / 2 };
  if (!(rs->rope_host = lb_tensor_new_host (s, LB_DTYPE_F32, 3, rope_shape,
              error)))
    return FALSE;
  if (!lingbot_dit_is_host (s)
      && !(rs->rope_dev =
          lb_tensor_new_on (s, LB_DTYPE_F32, 3, rope_shape, error)))
    return FALSE;
  if (!lingbot_dit_weights_init (&rs->wt, &rs->wt_owned, &rs->wt_bytes, s,
          dit, error) || !gemm_inputs_alloc (rs, error))
    return FALSE;
  /* the f32 attention output and FFN hidden, where no bf16 or fp8 buffer
   * takes them (lingbot_dit_attn_out(); gemm_gelu_tanh writes h16,
   * gemm_fp8_gelu_q h8) */
  if (rs->a16 == NULL)
    ALLOC (o, n, d);
  if (rs->h16 == NULL && rs->h8 == NULL)
    ALLOC (h, n, cfg->ffn_dim);
#undef ALLOC
  return rs->sh.n_ranks == 1 || lingbot_dit_ulysses_alloc (rs, error);
}

/**
 * lingbot_dit_rank_reserve:
 * @rs: a device rank state after lingbot_dit_rank_init() and
 *   lingbot_dit_cache_set_max_attention()
 * @error: lb_attention_prepare() or lb_stream_reserve() errors
 *
 * Holds the ops' per-call scratch and workspace of the rank's stream from
 * now on, before the ranks' first collective (issue 3.2 item 4): every
 * attention call of the chunks readied (lingbot_dit_attention_prepare():
 * on CUDA the cuDNN SDPA plans built and their workspace grown), then one
 * lb_stream_reserve() of the larger of the GEMM paths' two
 * LB_STREAM_SCRATCH_BLOCK and 1 MiB and the largest attention scratch (an
 * op call takes its pieces one after another and the arena is reused
 * from its start, so the largest call bounds it), and the largest
 * workspace.  A host rank has nothing to hold.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_rank_reserve (LingbotDitRank * rs, GError ** error)
{
  if (lingbot_dit_is_host (rs->s))
    return TRUE;
  gsize attn_scratch = 0, workspace = 0;
  if (!lingbot_dit_attention_prepare (rs, &attn_scratch, &workspace, error))
    return FALSE;
  const gsize gemm = 2 * LB_STREAM_SCRATCH_BLOCK + ((gsize) 1 << 20);
  return lb_stream_reserve (rs->s, MAX (gemm, attn_scratch), workspace, error);
}

/**
 * lingbot_dit_rank_clear:
 * @rs: a rank state
 *
 * Frees everything lingbot_dit_rank_init() allocated.
 */
void
lingbot_dit_rank_clear (LingbotDitRank * rs)
{
  const int L = rs->cfg ? rs->cfg->num_layers : 0;
  LbTensor **one[] = {
    &rs->x, &rs->a, &rs->q, &rs->k, &rs->v, &rs->o, &rs->t1, &rs->h, &rs->z,
    &rs->a16, &rs->h16, &rs->a8, &rs->a8s, &rs->h8, &rs->h8s, &rs->ctl,
    &rs->rope_cos,
    &rs->rope_sin, &rs->rope_cos_c,
    &rs->rope_sin_c, &rs->rope_host, &rs->rope_dev, &rs->send, &rs->q_r,
    &rs->k_r, &rs->v_r, &rs->o_r, &rs->recv, &rs->send_kv, &rs->o16,
    &rs->recv16, &rs->q16, &rs->z_rm, &rs->z_full, &rs->ones,
    &rs->trace_self_attn, &rs->trace_cross_attn, &rs->trace_ffn,
  };
  for (guint i = 0; i < G_N_ELEMENTS (one); i++)
    g_clear_pointer (one[i], lb_tensor_free);
  free_per_layer (&rs->cam_scale, L);
  free_per_layer (&rs->cam_shift, L);
  lingbot_dit_ulysses_free (rs);
  free_per_layer (&rs->cache_k, L);
  free_per_layer (&rs->cache_v, L);
  free_per_layer (&rs->cross_k, L);
  free_per_layer (&rs->cross_v, L);
  g_clear_pointer (&rs->cnt_a, g_free);
  g_clear_pointer (&rs->dsp_a, g_free);
  g_clear_pointer (&rs->cnt_b, g_free);
  g_clear_pointer (&rs->dsp_b, g_free);
  lingbot_dit_weights_clear (&rs->wt, rs->wt_owned, L);
  rs->wt_owned = FALSE;
  lingbot_dit_shard_clear (&rs->sh);
}

/* lingbot-gst: LingBot-World v2 causal DiT: the forward math of one rank
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Everything here runs on one rank's stream through the backend's op table
 * (lb_ops()), on the rank's tokens: a band of token rows of every latent
 * frame of the chunk.  Spec references are lingbot_model_spec.md 1.3-1.11
 * and 3.3.  All buffers are allocated by lingbot_dit_rank_init(); the
 * per-pass functions allocate nothing.
 */
#include "lingbot/dit-private.h"
#include "comm/collectives.h"

#include <math.h>
#include <string.h>

#define OPS (lb_ops (rs->s))

/* ------------------------------------------------------------------------ */
/* buffers                                                                  */
/* ------------------------------------------------------------------------ */

/**
 * lingbot_dit_tensor_new:
 * @s: a stream
 * @d0: rows
 * @d1: columns
 * @error: %LB_ERROR_DEVICE
 *
 * Returns: (transfer full) (nullable): an uninitialised f32 [d0, d1] on
 * @s's device.
 */
LbTensor *
lingbot_dit_tensor_new (LbStream * s, int64_t d0, int64_t d1, GError ** error)
{
  int64_t shape[2] = { d0, d1 };
  return lb_tensor_new_on (s, LB_DTYPE_F32, 2, shape, error);
}

static gboolean
is_host (LbStream * s)
{
  return s->backend->device_type == LB_DEVICE_CPU;
}

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
  return !is_host (s) && s->math == LB_MATH_BF16 ? LB_DTYPE_BF16 :
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
  return 2 * (guint64) cfg->num_layers * (guint64) cap * per_rank *
      lb_dtype_size (dtype);
}

/* Zeroes a contiguous tensor on @s's device.  Not for per-chunk use: on a
 * device it uploads @zeros (a host tensor of zeros of @t's dtype and
 * shape, made by the caller once for all layers) and waits for it. */
static gboolean
zero_fill (LbStream * s, LbTensor * t, LbTensor ** zeros, GError ** error)
{
  if (is_host (s)) {
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
 * lingbot_dit_copy_rows:
 * @s: the stream both tensors live on
 * @dst: a tensor or view on @s's device
 * @src: a tensor or view on @s's device of the same dtype and shape; it
 *   must not overlap @dst
 * @error: %LB_ERROR_SHAPE, %LB_ERROR_DEVICE
 *
 * Copies @src into @dst with the backend's copy on @s (host-to-host on the
 * CPU backend, device-to-device otherwise): a single copy when the
 * innermost dimensions of both are contiguous over the whole tensor, else
 * one copy per contiguous run (the trailing dimensions that are
 * contiguous in both views).  This is the only place the DiT computes
 * addresses inside a tensor; everything else slices with lb_tensor_view_*().
 * Empty tensors copy nothing.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_copy_rows (LbStream * s, LbTensor * dst, const LbTensor * src,
    GError ** error)
{
  if (dst->dtype != src->dtype || !lb_tensor_same_shape (dst, src)) {
    g_autofree char *a = lb_tensor_shape_string (dst);
    g_autofree char *b = lb_tensor_shape_string (src);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT copy: destination %s %s and source %s %s differ",
        lb_dtype_name (dst->dtype), a, lb_dtype_name (src->dtype), b);
    return FALSE;
  }
  const int64_t n = lb_tensor_numel (src);
  if (n == 0)
    return TRUE;
  /* trailing dims [k, ndim) are one contiguous run in both */
  int k = src->ndim;
  int64_t run = 1;
  while (k > 0) {
    const int d = k - 1;
    if (src->shape[d] != 1 &&
        (src->stride[d] != run || dst->stride[d] != run))
      break;
    run *= src->shape[d];
    k--;
  }
  if (k == 0 && dst->data == src->data)
    return TRUE;
  const gsize es = lb_dtype_size (src->dtype);
  const LbCopyKind kind = is_host (s) ? LB_COPY_HOST_TO_HOST :
      LB_COPY_DEVICE_TO_DEVICE;
  int64_t idx[LB_MAX_DIMS] = { 0 };
  for (int64_t o = 0; o < n / run; o++) {
    int64_t so = 0, dof = 0;
    for (int d = 0; d < k; d++) {
      so += idx[d] * src->stride[d];
      dof += idx[d] * dst->stride[d];
    }
    if (!s->backend->copy (s, (guint8 *) dst->data + dof * (int64_t) es,
            (const guint8 *) src->data + so * (int64_t) es, (gsize) run * es,
            kind, error))
      return FALSE;
    for (int d = k - 1; d >= 0; d--) {
      if (++idx[d] < src->shape[d])
        break;
      idx[d] = 0;
    }
  }
  return TRUE;
}

/**
 * lingbot_dit_flat_view:
 * @out: (out): a 1-D view
 * @t: a contiguous tensor
 * @offset: first element
 * @count: elements
 *
 * Elements [@offset, @offset + @count) of @t in storage order.
 *
 * Returns: %FALSE when @t is not contiguous or the range is outside it.
 */
gboolean
lingbot_dit_flat_view (LbTensor * out, const LbTensor * t, int64_t offset,
    int64_t count)
{
  LbTensor flat;
  int64_t n = lb_tensor_numel (t);
  return lb_tensor_view_reshape (&flat, t, 1, &n) &&
      lb_tensor_view_narrow (out, &flat, 0, offset, count);
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
typedef enum {
  SLOT_PLAIN,                   /* copied as stored (f32) */
  SLOT_GEMM_W,                  /* a linear w: bf16 / e4m3 by the mode */
  SLOT_SCALE,                   /* the e4m3 scales of the slot before the
                                 * bias before it (made with the w) */
} SlotKind;

typedef struct {
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
typedef struct {
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
  if (h->dtype != LB_DTYPE_F32 || h->ndim != 2 ||
      !lb_tensor_is_contiguous (h)) {
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
  if (is_host (s) && s->math != LB_MATH_FP8) {
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
 * %LB_MATH_BF16, so @s->math must be set before this call).
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
  ALLOC (o, n, d);
  ALLOC (t1, n, d);
  ALLOC (ctl, n, d);
  ALLOC (h, n, cfg->ffn_dim);
  ALLOC (z, n, (int64_t) cfg->out_dim * 4);
#undef ALLOC
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
  if (!is_host (s)) {
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
  if (!is_host (s) && !(rs->rope_dev = lb_tensor_new_on (s, LB_DTYPE_F32, 3,
              rope_shape, error)))
    return FALSE;
  if (!lingbot_dit_weights_init (&rs->wt, &rs->wt_owned, &rs->wt_bytes, s,
          dit, error))
    return FALSE;
  if (rs->sh.n_ranks > 1 && !lingbot_dit_ulysses_alloc (rs, error))
    return FALSE;
  return TRUE;
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
    &rs->ctl, &rs->rope_cos, &rs->rope_sin, &rs->rope_cos_c,
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

/* ------------------------------------------------------------------------ */
/* small helpers                                                            */
/* ------------------------------------------------------------------------ */

/**
 * lingbot_dit_linear_apply:
 * @s: the rank's stream
 * @x: [M, in] f32
 * @l: a linear layer of the rank's weights (lingbot_dit_weights_init())
 * @beta: scale of the previous content of @y (0 or 1)
 * @y: [M, out] f32
 * @error: the op's errors
 *
 * `y = x . w^T + b + beta * y` through the gemm op (f32 or bf16 w), or
 * through gemm_fp8 when the layer holds e4m3 codes and their scales
 * (%LB_MATH_FP8 ranks).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_linear_apply (LbStream * s, const LbTensor * x,
    const LingbotDitLinear * l, float beta, LbTensor * y, GError ** error)
{
  if (l->s != NULL)
    return lb_ops (s)->gemm_fp8 (s, x, l->w, l->s, l->b, 1.0f, beta, y,
        error);
  return lb_ops (s)->gemm (s, x, l->w, TRUE, l->b, 1.0f, beta, y, error);
}

static gboolean
linear (LingbotDitRank * rs, const LbTensor * x, const LingbotDitLinear * l,
    float beta, LbTensor * y, GError ** error)
{
  return lingbot_dit_linear_apply (rs->s, x, l, beta, y, error);
}

/* [rows, D] row r of a contiguous 2-D tensor, as a [D] view. */
static void
row_view (LbTensor * out, const LbTensor * t, int64_t r)
{
  lb_tensor_view_select (out, t, 0, r);
}

/* [n, H, hd] view of a [n, H * hd] buffer. */
static void
heads_view (LbTensor * out, const LbTensor * t, int64_t heads, int64_t hd)
{
  int64_t shape[3] = { t->shape[0], heads, hd };
  lb_tensor_view_reshape (out, t, 3, shape);
}

/* ------------------------------------------------------------------------ */
/* embeddings (once per session / once per chunk)                           */
/* ------------------------------------------------------------------------ */

/**
 * lingbot_dit_timestep_features:
 * @t: the timestep (999, 967, 908, 768 or 0)
 * @freq_dim: feature count (256)
 * @out: (out) (array length=freq_dim): `[cos(t w_k), sin(t w_k)]` with
 *   w_k = 10000^(-k / (freq_dim / 2)), computed in float64 (spec 1.4 step 1)
 */
void
lingbot_dit_timestep_features (double t, int freq_dim, float *out)
{
  int half = freq_dim / 2;
  for (int k = 0; k < half; k++) {
    double w = pow (10000.0, -(double) k / half);
    out[k] = (float) cos (t * w);
    out[half + k] = (float) sin (t * w);
  }
}

/**
 * lingbot_dit_time_mods:
 * @rs: a rank state
 * @t: the timestep
 * @block_mods: (out): f32 [L, 6, D]: `blocks.l.modulation + tmod` (spec 1.4
 *   step 5; rows shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp,
 *   gate_mlp)
 * @head_mod: (out): f32 [2, D]: `head.modulation + emb` (shift, scale)
 * @error: op errors
 *
 * The time embedding depends only on t, and a session uses the same five t
 * values for every chunk, so these are computed once per session.
 * Allocates small temporaries (not for per-chunk use).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_time_mods (LingbotDitRank * rs, double t, LbTensor * block_mods,
    LbTensor * head_mod, GError ** error)
{
  const LingbotDitWeights *dit = &rs->wt;
  const int64_t d = rs->cfg->dim;
  g_autoptr (LbTensor) feat_h = lb_tensor_new_f32 (2, (int64_t) 1,
      (int64_t) rs->cfg->freq_dim);
  lingbot_dit_timestep_features (t, rs->cfg->freq_dim, feat_h->data);
  g_autoptr (LbTensor) feat = lingbot_dit_tensor_new (rs->s, 1,
      rs->cfg->freq_dim, error);
  g_autoptr (LbTensor) e1 = lingbot_dit_tensor_new (rs->s, 1, d, error);
  g_autoptr (LbTensor) emb = lingbot_dit_tensor_new (rs->s, 1, d, error);
  g_autoptr (LbTensor) tmod = lingbot_dit_tensor_new (rs->s, 1, 6 * d, error);
  if (!feat || !e1 || !emb || !tmod)
    return FALSE;
  if (!lb_tensor_upload (rs->s, feat, feat_h, error) ||
      !linear (rs, feat, &dit->time0, 0.0f, e1, error) ||
      !OPS->silu (rs->s, e1, e1, error) ||
      !linear (rs, e1, &dit->time2, 0.0f, emb, error) ||
      !OPS->silu (rs->s, emb, e1, error) ||
      !linear (rs, e1, &dit->time_proj, 0.0f, tmod, error))
    return FALSE;
  LbTensor tm6, embv;
  int64_t s6[2] = { 6, d };
  lb_tensor_view_reshape (&tm6, tmod, 2, s6);
  lb_tensor_view_reshape (&embv, emb, 1, &d);
  for (int l = 0; l < rs->cfg->num_layers; l++) {
    LbTensor out;
    lb_tensor_view_select (&out, block_mods, 0, l);
    if (!OPS->add (rs->s, dit->blocks[l].modulation, &tm6, &out, error))
      return FALSE;
  }
  /* the temporaries are freed on return: let a device finish with them */
  return OPS->add (rs->s, dit->head_modulation, &embv, head_mod, error) &&
      (is_host (rs->s) || rs->s->backend->stream_synchronize (rs->s, error));
}

/**
 * lingbot_dit_text_kv:
 * @rs: a rank state
 * @text: f32 [text_len, text_dim] umT5 output (padded rows zero), or
 *   [text_len, D] when @embedded; a contiguous host tensor (uploaded to
 *   the rank's device first on a device backend)
 * @embedded: whether @text already went through the text-embedding MLP
 * @error: op errors
 *
 * Spec 1.5 and 1.9: ctx = text_embedding(text), then per layer the
 * cross-attention `k = RMSNorm(Wk ctx + bk) * norm_k` and `v = Wv ctx + bv`
 * over all heads, cached for the session (no mask: padded rows attend).
 * Allocates a temporary (once per session).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_text_kv (LingbotDitRank * rs, const LbTensor * text,
    gboolean embedded, GError ** error)
{
  const LingbotDitWeights *dit = &rs->wt;
  const int64_t d = rs->cfg->dim, tl = rs->text_len;
  g_autoptr (LbTensor) ctx = lingbot_dit_tensor_new (rs->s, tl, d, error);
  g_autoptr (LbTensor) tmp = lingbot_dit_tensor_new (rs->s, tl, d, error);
  if (!ctx || !tmp)
    return FALSE;
  LbTensor t2;
  int64_t shape[2] = { tl, embedded ? d : rs->cfg->text_dim };
  if (lb_tensor_numel (text) != shape[0] * shape[1] ||
      !lb_tensor_view_reshape (&t2, text, 2, shape)) {
    g_autofree char *have = lb_tensor_shape_string (text);
    g_autofree char *want = lb_shape_string (2, shape);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT text context is %s, expected %s", have, want);
    return FALSE;
  }
  g_autoptr (LbTensor) dev = NULL;
  const LbTensor *src = &t2;
  if (!is_host (rs->s)) {
    if (!(dev = lingbot_dit_tensor_new (rs->s, shape[0], shape[1], error)) ||
        !lb_tensor_upload (rs->s, dev, &t2, error))
      return FALSE;
    src = dev;
  }
  if (embedded) {
    if (!lingbot_dit_copy_rows (rs->s, ctx, src, error))
      return FALSE;
  } else if (!linear (rs, src, &dit->text0, 0.0f, tmp, error) ||
      !OPS->gelu_tanh (rs->s, tmp, tmp, error) ||
      !linear (rs, tmp, &dit->text2, 0.0f, ctx, error)) {
    return FALSE;
  }
  for (int l = 0; l < rs->cfg->num_layers; l++) {
    const LingbotDitBlock *b = &dit->blocks[l];
    if (!linear (rs, ctx, &b->ca_k, 0.0f, rs->cross_k[l], error) ||
        !OPS->rms_norm (rs->s, rs->cross_k[l], b->ca_norm_k,
            (float) rs->cfg->eps, rs->cross_k[l], error) ||
        !linear (rs, ctx, &b->ca_v, 0.0f, rs->cross_v[l], error))
      return FALSE;
  }
  /* ctx, tmp and dev are freed on return */
  return is_host (rs->s) || rs->s->backend->stream_synchronize (rs->s, error);
}

/**
 * lingbot_dit_control_tokens:
 * @rs: a rank state
 * @ctl_patches: f32 [n_local, control_in_features]: the rank's tokens of
 *   the patchified control tensor (feature `ch * 4 + kh * 2 + kw`)
 * @error: op errors
 *
 * Spec 1.6: `c0 = patch_embedding_wancamctrl(u)`,
 * `ctl = c0 + c2ws2(SiLU(c2ws1(c0)))`, into rs->ctl.  Once per chunk: the
 * five passes of a chunk share the control.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_control_tokens (LingbotDitRank * rs, const LbTensor * ctl_patches,
    GError ** error)
{
  const LingbotDitWeights *dit = &rs->wt;
  if (rs->sh.n_local == 0)
    return TRUE;
  return linear (rs, ctl_patches, &dit->ctl_patch, 0.0f, rs->ctl, error) &&
      linear (rs, rs->ctl, &dit->c2ws1, 0.0f, rs->a, error) &&
      OPS->silu (rs->s, rs->a, rs->a, error) &&
      linear (rs, rs->a, &dit->c2ws2, 1.0f, rs->ctl, error);
}

/**
 * lingbot_dit_rope_chunk:
 * @rs: a rank state
 * @frame0: the chunk's first latent frame (current_start / T_f), >= 0
 * @error: %LB_ERROR_INVALID_ARGUMENT for a negative @frame0; copy errors
 *
 * Once per chunk, before its passes: puts the temporal cos/sin of frames
 * [@frame0, @frame0 + F) into the temporal columns of rows [0, F) of the
 * chunk's tables (rs->rope_cos_c / rope_sin_c; their height and width
 * columns are the base tables' own, copied at rank init).  RoPE at frame
 * offset 0 with the chunk's tables is then RoPE at @frame0 (spec 1.8), and
 * nothing in a pass depends on the chunk index: a captured pass replays
 * for every chunk that starts from the same cache state.
 *
 * Frames inside the base tables (@frame0 + F <= %LINGBOT_DIT_ROPE_MAX_POS,
 * the first 256 chunks of 4 frames) copy the tables' rows, as the
 * reference indexes its table.  Later frames (hours-long sessions; the
 * reference's table ends there) get the same float64 formula continued:
 * lb_rope_fill() computes the F x t_pairs values on the host into
 * rs->rope_host (allocated at rank init; on a device rank page-locked and
 * uploaded into rs->rope_dev, one upload of 2 F t_pairs floats, no
 * synchronisation) and they are copied into the same columns.  Inside the
 * tables the formula gives the tables' bits, so the two paths agree
 * (rs->rope_formula makes every chunk take the formula, for tests).
 * Allocates nothing; the cost is the same for every chunk.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_rope_chunk (LingbotDitRank * rs, int64_t frame0, GError ** error)
{
  const int64_t hd = rs->head_dim, rows = rs->rope_cos->shape[0];
  const int64_t t_pairs = (hd - 4 * (hd / 6)) / 2, F = rs->sh.frames;
  if (frame0 < 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT: latent frame %" G_GINT64_FORMAT " is negative", frame0);
    return FALSE;
  }
  const gboolean from_table = !rs->rope_formula && frame0 + F <= rows;
  const LbTensor *computed = NULL;
  if (!from_table) {
    float *h = rs->rope_host->data;
    lb_rope_fill ((int) hd, LINGBOT_DIT_ROPE_THETA, frame0, F, 0,
        (int) t_pairs, h, h + F * t_pairs);
    if (rs->rope_dev && !lb_tensor_upload (rs->s, rs->rope_dev,
            rs->rope_host, error))
      return FALSE;
    computed = rs->rope_dev ? rs->rope_dev : rs->rope_host;
  }
  for (int i = 0; i < 2; i++) {
    LbTensor *dst_t = i ? rs->rope_sin_c : rs->rope_cos_c;
    LbTensor src, dst;
    if (from_table) {
      lb_tensor_view_narrow (&src, i ? rs->rope_sin : rs->rope_cos, 0,
          frame0, F);
      lb_tensor_view_narrow (&src, &src, 1, 0, t_pairs);
    } else {
      lb_tensor_view_select (&src, computed, 0, i);
    }
    lb_tensor_view_narrow (&dst, dst_t, 0, 0, F);
    lb_tensor_view_narrow (&dst, &dst, 1, 0, t_pairs);
    if (!lingbot_dit_copy_rows (rs->s, &dst, &src, error))
      return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_dit_camera_precompute:
 * @rs: a rank state with rs->ctl set
 * @layer: block index
 * @error: op errors
 *
 * Spec 1.7: `hid = ctl + cam_injector_layer2(SiLU(cam_injector_layer1(ctl)))`
 * and the injection's scale and shift `cam_scale_layer(hid)`,
 * `cam_shift_layer(hid)`.  They depend only on the control, so they are
 * computed once per chunk per block and reused by all five passes (the
 * reference recomputes them every pass: 4 D x D GEMMs per block per pass).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_camera_precompute (LingbotDitRank * rs, int layer,
    GError ** error)
{
  const LingbotDitBlock *b = &rs->wt.blocks[layer];
  if (rs->sh.n_local == 0)
    return TRUE;
  return linear (rs, rs->ctl, &b->cam1, 0.0f, rs->a, error) &&
      OPS->silu (rs->s, rs->a, rs->a, error) &&
      lingbot_dit_copy_rows (rs->s, rs->t1, rs->ctl, error) &&
      linear (rs, rs->a, &b->cam2, 1.0f, rs->t1, error) &&
      linear (rs, rs->t1, &b->cam_scale, 0.0f, rs->cam_scale[layer], error) &&
      linear (rs, rs->t1, &b->cam_shift, 0.0f, rs->cam_shift[layer], error);
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
cache_rows (LbTensor * out, const LbTensor * cache, int64_t row0,
    int64_t count)
{
  lb_tensor_view_narrow (out, cache, 0, row0, count);
}

/* Shifts the non-sink part of the cache down by pend_evict slots.  The
 * source and destination overlap, so the move goes front to back in
 * pieces of at most pend_evict rows, each a copy between disjoint ranges
 * (a device copy must not overlap).  The rows move as bytes of the
 * cache's dtype (a bf16 cache moves half the bytes). */
static gboolean
cache_evict (LingbotDitRank * rs, int layer, GError ** error)
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

/* The chunk's slots [local_end - N, local_end) of a layer's cache,
 * [N, heads_local * hd]: where one rank's self_attn_qkv() writes its keys
 * and values (frame-major token order), after cache_evict(). */
static void
cache_slots (LingbotDitRank * rs, const LbTensor * cache, LbTensor * rows)
{
  cache_rows (rows, cache, rs->pend_local_end - rs->sh.n_tokens,
      rs->sh.n_tokens);
}

/* Received keys/values of every rank's band (rank-major) into the cache in
 * frame-major order, so the sink and eviction see whole frames: per source
 * rank one strided copy of F runs of band * hl * hd elements.  With a
 * bf16 cache the exchange already moved bf16 (rounded by the packing copy
 * with lb_f32_to_bf16(), as rms_norm_rope rounds on one rank, so 1 and R
 * ranks store the same bits) and the copy op moves them as they are. */
static gboolean
cache_write_sharded (LingbotDitRank * rs, int layer, GError ** error)
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

static void
cache_window (LingbotDitRank * rs, int layer, LbTensor * k, LbTensor * v)
{
  const int64_t end = rs->pend_local_end;
  const int64_t start = MAX (0, end - rs->max_attention);
  int64_t shape[3] = { rs->cap, rs->sh.heads_local, rs->head_dim };
  LbTensor full;
  lb_tensor_view_reshape (&full, rs->cache_k[layer], 3, shape);
  lb_tensor_view_narrow (k, &full, 0, start, end - start);
  lb_tensor_view_reshape (&full, rs->cache_v[layer], 3, shape);
  lb_tensor_view_narrow (v, &full, 0, start, end - start);
}

/* ------------------------------------------------------------------------ */
/* transformer block (spec 1.7-1.9)                                         */
/* ------------------------------------------------------------------------ */

static gboolean
trace_copy (LingbotDitRank * rs, LbTensor * dst, const LbTensor * src,
    GError ** error)
{
  if (dst == NULL)
    return TRUE;
  return lingbot_dit_copy_rows (rs->s, dst, src, error);
}

/* v = Wv a + bv into @vrows: on one rank the chunk's cache slots.  An f32
 * cache takes the GEMM's output directly; a bf16 one (the GEMM writes f32)
 * gets it through rs->v and the copy op, which rounds as rms_norm_rope
 * rounds the keys. */
static gboolean
value_rows (LingbotDitRank * rs, const LingbotDitBlock * b, LbTensor * vrows,
    GError ** error)
{
  if (vrows->dtype == LB_DTYPE_F32)
    return linear (rs, rs->a, &b->sa_v, 0.0f, vrows, error);
  return linear (rs, rs->a, &b->sa_v, 0.0f, rs->v, error) &&
      OPS->copy (rs->s, rs->v, vrows, error);
}

/* Spec 1.7-1.8: a = LN(x) * (1 + scale_msa) + shift_msa, then
 * q = RoPE(RMSNorm(Wq a + bq) * norm_q), k likewise, v = Wv a + bv, with
 * the fused ops (norm_modulate, rms_norm_rope).  On one rank the keys and
 * values go straight into the chunk's cache slots (the rope writes k
 * there, in the cache's dtype; the gemm writes v there, through rs->v and
 * a converting copy for a bf16 cache: value_rows()), so cache_evict() must
 * have run first; with several ranks they stay in rs->k / rs->v (f32) for
 * the all-to-all. */
static gboolean
self_attn_qkv (LingbotDitRank * rs, int layer, const LbTensor * mod,
    int64_t current_start, GError ** error)
{
  const LingbotDitBlock *b = &rs->wt.blocks[layer];
  const float eps = (float) rs->cfg->eps;
  const LingbotDitShard *sh = &rs->sh;
  LbTensor shift, scale, q3, k3, krows, vrows;
  row_view (&shift, mod, 0);
  row_view (&scale, mod, 1);
  if (sh->n_ranks == 1) {
    /* heads_local == num_heads: a cache row is a token's k (or v) */
    cache_slots (rs, rs->cache_k[layer], &krows);
    cache_slots (rs, rs->cache_v[layer], &vrows);
  } else {
    lb_tensor_view (&krows, rs->k);
    lb_tensor_view (&vrows, rs->v);
  }
  heads_view (&q3, rs->q, rs->cfg->num_heads, rs->head_dim);
  heads_view (&k3, &krows, rs->cfg->num_heads, rs->head_dim);
  /* frame positions current_start / T_f.. are in the chunk's tables
   * (lingbot_dit_rope_chunk()), so the frame offset is 0 */
  (void) current_start;
  if (rs->overlap)
    /* k, v, q each exchanged as soon as it is ready, behind the next GEMM
     * (lingbot_dit_ulysses_send()) */
    return OPS->norm_modulate (rs->s, rs->x, NULL, NULL, eps, &scale,
        &shift, rs->a, error) &&
        linear (rs, rs->a, &b->sa_k, 0.0f, rs->k, error) &&
        OPS->rms_norm_rope (rs->s, rs->k, b->sa_norm_k, eps, rs->rope_cos_c,
        rs->rope_sin_c, sh->frames, sh->n_rows, sh->wp, 0, sh->row0, &k3,
        error) &&
        lingbot_dit_ulysses_send (rs, 1, error) &&
        value_rows (rs, b, &vrows, error) &&
        lingbot_dit_ulysses_send (rs, 2, error) &&
        linear (rs, rs->a, &b->sa_q, 0.0f, rs->q, error) &&
        OPS->rms_norm_rope (rs->s, rs->q, b->sa_norm_q, eps, rs->rope_cos_c,
        rs->rope_sin_c, sh->frames, sh->n_rows, sh->wp, 0, sh->row0, &q3,
        error) &&
        lingbot_dit_ulysses_send (rs, 0, error) &&
        lingbot_dit_ulysses_recv_wait (rs, error);
  return OPS->norm_modulate (rs->s, rs->x, NULL, NULL, eps, &scale, &shift,
      rs->a, error) &&
      linear (rs, rs->a, &b->sa_q, 0.0f, rs->q, error) &&
      OPS->rms_norm_rope (rs->s, rs->q, b->sa_norm_q, eps, rs->rope_cos_c,
      rs->rope_sin_c, sh->frames, sh->n_rows, sh->wp, 0, sh->row0, &q3,
      error) &&
      linear (rs, rs->a, &b->sa_k, 0.0f, rs->k, error) &&
      OPS->rms_norm_rope (rs->s, rs->k, b->sa_norm_k, eps, rs->rope_cos_c,
      rs->rope_sin_c, sh->frames, sh->n_rows, sh->wp, 0, sh->row0, &k3,
      error) &&
      value_rows (rs, b, &vrows, error);
}

static gboolean
self_attention (LingbotDitRank * rs, int layer, GError ** error)
{
  const float scale = 1.0f / sqrtf ((float) rs->head_dim);
  LbTensor kw, vw, q3, o3;
  if (rs->sh.n_ranks == 1) {
    /* the chunk's keys and values are in the cache (self_attn_qkv) */
    cache_window (rs, layer, &kw, &vw);
    heads_view (&q3, rs->q, rs->cfg->num_heads, rs->head_dim);
    heads_view (&o3, rs->o, rs->cfg->num_heads, rs->head_dim);
    return OPS->attention (rs->s, &q3, &kw, &vw, NULL, NULL, scale, &o3,
        error);
  }
  if ((!rs->overlap && !lingbot_dit_ulysses_qkv (rs, error)) ||
      !cache_write_sharded (rs, layer, error) ||
      (rs->q16 && !OPS->copy (rs->s, rs->q16, rs->q_r, error)))
    return FALSE;
  cache_window (rs, layer, &kw, &vw);
  if (rs->overlap && rs->out_groups > 1)
    return lingbot_dit_ulysses_attention_out (rs, &kw, &vw, scale, error);
  if (!OPS->attention (rs->s, rs->q_r, &kw, &vw, NULL, NULL, scale, rs->o_r,
          error))
    return FALSE;
  return lingbot_dit_ulysses_out (rs, error);
}

static gboolean
block_rest (LingbotDitRank * rs, int layer, const LbTensor * mod,
    GError ** error)
{
  const LingbotDitBlock *b = &rs->wt.blocks[layer];
  const float eps = (float) rs->cfg->eps;
  const float scale = 1.0f / sqrtf ((float) rs->head_dim);
  const int64_t H = rs->cfg->num_heads, hd = rs->head_dim;
  LbTensor gate_msa, shift_mlp, scale_mlp, gate_mlp, q3, o3, ck, cv;
  row_view (&gate_msa, mod, 2);
  row_view (&shift_mlp, mod, 3);
  row_view (&scale_mlp, mod, 4);
  row_view (&gate_mlp, mod, 5);
  heads_view (&q3, rs->q, H, hd);
  heads_view (&o3, rs->o, H, hd);
  heads_view (&ck, rs->cross_k[layer], H, hd);
  heads_view (&cv, rs->cross_v[layer], H, hd);

  /* x += gate_msa * o(attn), then the camera injection
   * x = x * (1 + cam_scale) + cam_shift (spec 1.7 order), in one op */
  if (!linear (rs, rs->o, &b->sa_o, 0.0f, rs->t1, error) ||
      !trace_copy (rs, rs->trace_self_attn, rs->t1, error) ||
      !OPS->gated_residual_modulate (rs->s, rs->x, rs->t1, &gate_msa,
          rs->cam_scale[layer], rs->cam_shift[layer], error))
    return FALSE;

  /* cross-attention, ungated */
  if (!OPS->layer_norm (rs->s, rs->x, b->norm3_w, b->norm3_b, eps, rs->a,
          error) ||
      !linear (rs, rs->a, &b->ca_q, 0.0f, rs->q, error) ||
      !OPS->rms_norm (rs->s, rs->q, b->ca_norm_q, eps, rs->q, error) ||
      !OPS->attention (rs->s, &q3, &ck, &cv, NULL, NULL, scale, &o3, error) ||
      !linear (rs, rs->o, &b->ca_o, 0.0f, rs->t1, error) ||
      !trace_copy (rs, rs->trace_cross_attn, rs->t1, error) ||
      !OPS->gated_residual (rs->s, rs->x, rs->t1, NULL, error))
    return FALSE;

  /* FFN */
  return OPS->norm_modulate (rs->s, rs->x, NULL, NULL, eps, &scale_mlp,
      &shift_mlp, rs->a, error) &&
      linear (rs, rs->a, &b->ffn0, 0.0f, rs->h, error) &&
      OPS->gelu_tanh (rs->s, rs->h, rs->h, error) &&
      linear (rs, rs->h, &b->ffn2, 0.0f, rs->t1, error) &&
      trace_copy (rs, rs->trace_ffn, rs->t1, error) &&
      OPS->gated_residual (rs->s, rs->x, rs->t1, &gate_mlp, error);
}

/**
 * lingbot_dit_block_forward:
 * @rs: a rank state; rs->x [n_local, D] holds the residual stream (updated
 *   in place), rs->cam_scale/shift[@layer] are set, the chunk's RoPE
 *   tables by lingbot_dit_rope_chunk(), the cursors were advanced by
 *   lingbot_dit_cache_begin()
 * @layer: block index
 * @mod: f32 [6, D]: `blocks.layer.modulation + tmod`
 * @current_start: absolute index of the chunk's first token
 * @error: op or collective errors
 *
 * One transformer block (spec 1.7): modulated self-attention over the KV
 * cache (q/k RMSNorm over the full width, 3-D RoPE at absolute frame
 * positions, the chunk's keys written post-RoPE into the cache), camera
 * injection, cross-attention to the cached text K/V, gated GELU(tanh) FFN.
 * With several ranks the self-attention runs head-sharded (Ulysses).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_block_forward (LingbotDitRank * rs, int layer,
    const LbTensor * mod, int64_t current_start, GError ** error)
{
  const gboolean local = rs->sh.n_local > 0;
  /* the eviction shift moves the cache's non-sink rows before this
   * chunk's keys land in their slots (on one rank self_attn_qkv() writes
   * them there) */
  if (!cache_evict (rs, layer, error))
    return FALSE;
  if (local && !self_attn_qkv (rs, layer, mod, current_start, error))
    return FALSE;
  /* a rank without tokens still takes part in the exchanges, in the order
   * the others send */
  if (!local && rs->overlap &&
      (!lingbot_dit_ulysses_send (rs, 1, error) ||
          !lingbot_dit_ulysses_send (rs, 2, error) ||
          !lingbot_dit_ulysses_send (rs, 0, error) ||
          !lingbot_dit_ulysses_recv_wait (rs, error)))
    return FALSE;
  if (!self_attention (rs, layer, error))
    return FALSE;
  return !local || block_rest (rs, layer, mod, error);
}

/**
 * lingbot_dit_head_forward:
 * @rs: a rank state after the last block
 * @head_mod: f32 [2, D] (shift, scale)
 * @error: op or collective errors
 *
 * Spec 1.10: `z = head(LN(x) * (1 + scale) + shift)` into rs->z
 * [n_local, 64]; with several ranks every rank then holds the whole chunk's
 * z in frame-major order in rs->z_full (all-gather).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_head_forward (LingbotDitRank * rs, const LbTensor * head_mod,
    GError ** error)
{
  LbTensor shift, scale;
  row_view (&shift, head_mod, 0);
  row_view (&scale, head_mod, 1);
  if (rs->sh.n_local > 0 &&
      (!OPS->norm_modulate (rs->s, rs->x, NULL, NULL, (float) rs->cfg->eps,
              &scale, &shift, rs->a, error) ||
          !linear (rs, rs->a, &rs->wt.head, 0.0f, rs->z, error)))
    return FALSE;
  if (rs->sh.n_ranks > 1)
    return lingbot_dit_ulysses_gather_z (rs, error);
  return TRUE;
}

/* lingbot-gst: LingBot-World v2 causal DiT: the forward math of one rank
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Everything here runs on one rank's stream through the backend's op table
 * (lb_ops()), on the rank's tokens: a band of token rows of every latent
 * frame of the chunk.  Spec references are lingbot_model_spec.md 1.3-1.11
 * and 3.3.  All buffers are allocated by lingbot_dit_rank_init()
 * (dit-ranks.c); the per-pass functions allocate nothing.
 */
#include "lingbot/dit-private.h"

#include <math.h>

#define OPS (lb_ops (rs->s))

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
    return lb_ops (s)->gemm_fp8 (s, x, l->w, l->s, l->b, 1.0f, beta, y, error);
  return lb_ops (s)->gemm (s, x, l->w, TRUE, l->b, 1.0f, beta, y, error);
}

static gboolean
linear (LingbotDitRank * rs, const LbTensor * x, const LingbotDitLinear * l,
    float beta, LbTensor * y, GError ** error)
{
  return lingbot_dit_linear_apply (rs->s, x, l, beta, y, error);
}

/* The FFN's first layer and its activation, `y = GELU_tanh(x . w^T + b)`
 * (spec 1.7): one gemm_gelu_tanh op (a device backend applies the GELU in
 * the GEMM's epilogue and writes a bf16 y directly), or for an fp8 layer
 * gemm_fp8 into rs->h, then gelu_tanh into y. */
static gboolean
linear_gelu (LingbotDitRank * rs, const LbTensor * x,
    const LingbotDitLinear * l, LbTensor * y, GError ** error)
{
  if (l->s != NULL)
    return linear (rs, x, l, 0.0f, rs->h, error) &&
        OPS->gelu_tanh (rs->s, rs->h, y, error);
  return OPS->gemm_gelu_tanh (rs->s, x, l->w, TRUE, l->b, 1.0f, y, error);
}


/* The buffer of a GEMM input [n_local, D] (@wide false) or [n_local,
 * ffn_dim]: the rank's bf16 one where it has them (rs->a16, rs->h16), else
 * the f32 one.  The op writing it rounds to bf16 exactly as the bf16 GEMM
 * would round its f32 input (kernels/ops-list.h), so the result is the
 * same either way; the bf16 buffer saves the GEMM's conversion pass. */
static LbTensor *
gemm_input (LingbotDitRank * rs, gboolean wide)
{
  if (wide)
    return rs->h16 ? rs->h16 : rs->h;
  return rs->a16 ? rs->a16 : rs->a;
}

/* The norm in front of the block's linear layers, into their input:
 * `LN(x)` with the optional affine @weight / @bias, with @scale and
 * @shift modulated, with @y after `x += y` in place (layer_norm,
 * norm_modulate, residual_norm_modulate).  An fp8 rank with rs->a8 gets
 * the e4m3 codes and row scales from the norm_fp8 op, which gives the
 * codes and scales gemm_fp8 would make of the f32 output (kernels/
 * ops-list.h), so norm_input() and linear_after_norm() give the same
 * bits with or without rs->a8. */
static gboolean
norm_input (LingbotDitRank * rs, LbTensor * x, const LbTensor * y,
    const LbTensor * weight, const LbTensor * bias, const LbTensor * scale,
    const LbTensor * shift, GError ** error)
{
  const float eps = (float) rs->cfg->eps;
  LbTensor *a = gemm_input (rs, FALSE);
  if (rs->a8)
    return OPS->norm_fp8 (rs->s, x, y, NULL, weight, bias, eps, scale, shift,
        rs->a8, rs->a8s, error);
  if (y)
    return OPS->residual_norm_modulate (rs->s, x, y, NULL, weight, bias, eps,
        scale, shift, a, error);
  if (scale)
    return OPS->norm_modulate (rs->s, x, weight, bias, eps, scale, shift, a,
        error);
  return OPS->layer_norm (rs->s, x, weight, bias, eps, a, error);
}

/* linear() of norm_input()'s output: gemm_fp8_q on rs->a8 (every linear
 * of a rank with rs->a8 is e4m3), else linear() of the f32 or bf16
 * buffer. */
static gboolean
linear_after_norm (LingbotDitRank * rs, const LingbotDitLinear * l,
    float beta, LbTensor * y, GError ** error)
{
  if (rs->a8)
    return OPS->gemm_fp8_q (rs->s, rs->a8, rs->a8s, l->w, l->s, l->b, 1.0f,
        beta, y, error);
  return linear (rs, gemm_input (rs, FALSE), l, beta, y, error);
}

/* The FFN after norm_input(), its output [n_local, D] into rs->t1:
 * linear_gelu() (h: the GELU's output, rs->h or rs->h16) then the second
 * linear.  A rank with rs->h8 runs gemm_fp8_gelu_q, which writes the e4m3
 * codes and row scales gemm_fp8 would make of the f32 GELU output
 * (kernels/ops-list.h), then gemm_fp8_q on them: the same bits, without
 * the f32 hidden, the GELU pass and the second GEMM's quantisation. */
static gboolean
ffn_after_norm (LingbotDitRank * rs, const LingbotDitBlock * b, GError ** error)
{
  if (rs->h8)
    return OPS->gemm_fp8_gelu_q (rs->s, rs->a8, rs->a8s, b->ffn0.w,
        b->ffn0.s, b->ffn0.b, 1.0f, rs->h8, rs->h8s, error) &&
        OPS->gemm_fp8_q (rs->s, rs->h8, rs->h8s, b->ffn2.w, b->ffn2.s,
        b->ffn2.b, 1.0f, 0.0f, rs->t1, error);
  LbTensor *h = gemm_input (rs, TRUE);
  return linear_gelu (rs, gemm_input (rs, FALSE), &b->ffn0, h, error) &&
      linear (rs, h, &b->ffn2, 0.0f, rs->t1, error);
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
      (lingbot_dit_is_host (rs->s)
      || rs->s->backend->stream_synchronize (rs->s, error));
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
  if (!lingbot_dit_is_host (rs->s)) {
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
  return lingbot_dit_is_host (rs->s)
      || rs->s->backend->stream_synchronize (rs->s, error);
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
  LbTensor *a = gemm_input (rs, FALSE);
  return linear (rs, ctl_patches, &dit->ctl_patch, 0.0f, rs->ctl, error) &&
      linear (rs, rs->ctl, &dit->c2ws1, 0.0f, rs->a, error) &&
      OPS->silu (rs->s, rs->a, a, error) &&
      linear (rs, a, &dit->c2ws2, 1.0f, rs->ctl, error);
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
lingbot_dit_camera_precompute (LingbotDitRank * rs, int layer, GError ** error)
{
  const LingbotDitBlock *b = &rs->wt.blocks[layer];
  if (rs->sh.n_local == 0)
    return TRUE;
  LbTensor *a = gemm_input (rs, FALSE);
  return linear (rs, rs->ctl, &b->cam1, 0.0f, rs->a, error) &&
      OPS->silu (rs->s, rs->a, a, error) &&
      lingbot_dit_copy_rows (rs->s, rs->t1, rs->ctl, error) &&
      linear (rs, a, &b->cam2, 1.0f, rs->t1, error) &&
      linear (rs, rs->t1, &b->cam_scale, 0.0f, rs->cam_scale[layer], error) &&
      linear (rs, rs->t1, &b->cam_shift, 0.0f, rs->cam_shift[layer], error);
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
value_rows (LingbotDitRank * rs, const LingbotDitBlock * b,
    LbTensor * vrows, GError ** error)
{
  if (vrows->dtype == LB_DTYPE_F32)
    return linear_after_norm (rs, &b->sa_v, 0.0f, vrows, error);
  return linear_after_norm (rs, &b->sa_v, 0.0f, rs->v, error) &&
      OPS->copy (rs->s, rs->v, vrows, error);
}

/* Spec 1.7-1.8: a = LN(x) * (1 + scale_msa) + shift_msa, then
 * q = RoPE(RMSNorm(Wq a + bq) * norm_q), k likewise, v = Wv a + bv, with
 * the fused ops (norm_modulate, rms_norm_rope).  On one rank the keys and
 * values go straight into the chunk's cache slots (the rope writes k
 * there, in the cache's dtype; the gemm writes v there, through rs->v and
 * a converting copy for a bf16 cache: value_rows()), so
 * lingbot_dit_cache_evict() must have run first; with several ranks they stay in rs->k / rs->v (f32) for
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
    lingbot_dit_cache_slots (rs, rs->cache_k[layer], &krows);
    lingbot_dit_cache_slots (rs, rs->cache_v[layer], &vrows);
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
    return norm_input (rs, rs->x, NULL, NULL, NULL, &scale, &shift, error) &&
        linear_after_norm (rs, &b->sa_k, 0.0f, rs->k, error) &&
        OPS->rms_norm_rope (rs->s, rs->k, b->sa_norm_k, eps, rs->rope_cos_c,
        rs->rope_sin_c, sh->frames, sh->n_rows, sh->wp, 0, sh->row0, &k3,
        error) &&
        lingbot_dit_ulysses_send (rs, 1, error) &&
        value_rows (rs, b, &vrows, error) &&
        lingbot_dit_ulysses_send (rs, 2, error) &&
        linear_after_norm (rs, &b->sa_q, 0.0f, rs->q, error) &&
        OPS->rms_norm_rope (rs->s, rs->q, b->sa_norm_q, eps, rs->rope_cos_c,
        rs->rope_sin_c, sh->frames, sh->n_rows, sh->wp, 0, sh->row0, &q3,
        error) &&
        lingbot_dit_ulysses_send (rs, 0, error) &&
        lingbot_dit_ulysses_recv_wait (rs, error);
  return norm_input (rs, rs->x, NULL, NULL, NULL, &scale, &shift, error) &&
      linear_after_norm (rs, &b->sa_q, 0.0f, rs->q, error) &&
      OPS->rms_norm_rope (rs->s, rs->q, b->sa_norm_q, eps, rs->rope_cos_c,
      rs->rope_sin_c, sh->frames, sh->n_rows, sh->wp, 0, sh->row0, &q3,
      error) &&
      linear_after_norm (rs, &b->sa_k, 0.0f, rs->k, error) &&
      OPS->rms_norm_rope (rs->s, rs->k, b->sa_norm_k, eps, rs->rope_cos_c,
      rs->rope_sin_c, sh->frames, sh->n_rows, sh->wp, 0, sh->row0, &k3,
      error) && value_rows (rs, b, &vrows, error);
}

static gboolean
self_attention (LingbotDitRank * rs, int layer, GError ** error)
{
  const float scale = 1.0f / sqrtf ((float) rs->head_dim);
  LbTensor kw, vw, q3, o3;
  if (rs->sh.n_ranks == 1) {
    /* the chunk's keys and values are in the cache (self_attn_qkv) */
    lingbot_dit_cache_window (rs, layer, &kw, &vw);
    heads_view (&q3, rs->q, rs->cfg->num_heads, rs->head_dim);
    heads_view (&o3, lingbot_dit_attn_out (rs), rs->cfg->num_heads,
        rs->head_dim);
    return OPS->attention (rs->s, &q3, &kw, &vw, NULL, NULL, scale, &o3, error);
  }
  if ((!rs->overlap && !lingbot_dit_ulysses_qkv (rs, error)) ||
      !lingbot_dit_cache_write_sharded (rs, layer, error))
    return FALSE;
  lingbot_dit_cache_window (rs, layer, &kw, &vw);
  if (rs->overlap && rs->out_groups > 1)
    return lingbot_dit_ulysses_attention_out (rs, &kw, &vw, scale, error);
  /* bf16 exchanges: the op reads the bf16 q and writes a bf16 output */
  if (!OPS->attention (rs->s, rs->q16 ? rs->q16 : rs->q_r, &kw, &vw, NULL,
          NULL, scale, rs->o16 ? rs->o16 : rs->o_r, error))
    return FALSE;
  return lingbot_dit_ulysses_out (rs, error);
}

/* One attention call readied (lb_attention_prepare()), its scratch and
 * workspace folded into the largest seen. */
static gboolean
prepare_one (LingbotDitRank * rs, const LbTensor * q, const LbTensor * k,
    const LbTensor * v, const LbTensor * out, gsize * scratch,
    gsize * workspace, GError ** error)
{
  gsize sc = 0, ws = 0;
  if (!lb_attention_prepare (rs->s, q, k, v, out, &sc, &ws, error))
    return FALSE;
  *scratch = MAX (*scratch, sc);
  *workspace = MAX (*workspace, ws);
  return TRUE;
}

/**
 * lingbot_dit_attention_prepare:
 * @rs: a rank state after lingbot_dit_rank_init() and
 *   lingbot_dit_cache_set_max_attention()
 * @scratch: (out): the largest op scratch one of its attention calls takes
 * @workspace: (out): the largest library workspace one needs
 * @error: lb_attention_prepare() errors
 *
 * Readies every attention call the rank's chunks will make, with the very
 * operands self_attention() and block_rest() pass: the self-attention for
 * each window length the chunks reach (lingbot_dit_cache_window_ends(): one
 * per chunk until the cache is full; with Ulysses the exchanged q and
 * output, per head group with the output overlap) and the
 * cross-attention over the text tokens.  On CUDA this builds every cuDNN
 * SDPA plan now (issue 3.2 item 4: no plan build, kernel load or
 * workspace growth between the ranks' collectives).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_attention_prepare (LingbotDitRank * rs, gsize * scratch,
    gsize * workspace, GError ** error)
{
  *scratch = 0;
  *workspace = 0;
  const int64_t H = rs->cfg->num_heads, hd = rs->head_dim;
  LbTensor q3, o3, kw, vw;
  if (rs->sh.n_local > 0) {
    /* the cross-attention: the rank's own tokens, every head */
    LbTensor ck, cv;
    heads_view (&q3, rs->q, H, hd);
    heads_view (&o3, lingbot_dit_attn_out (rs), H, hd);
    heads_view (&ck, rs->cross_k[0], H, hd);
    heads_view (&cv, rs->cross_v[0], H, hd);
    if (!prepare_one (rs, &q3, &ck, &cv, &o3, scratch, workspace, error))
      return FALSE;
  }
  int64_t ends[64];
  const int n_ends = lingbot_dit_cache_window_ends (rs, ends, G_N_ELEMENTS
      (ends));
  for (int i = 0; i < n_ends; i++) {
    lingbot_dit_cache_window_at (rs, 0, ends[i], &kw, &vw);
    if (rs->sh.n_ranks == 1) {
      heads_view (&q3, rs->q, H, hd);
      heads_view (&o3, lingbot_dit_attn_out (rs), H, hd);
      if (!prepare_one (rs, &q3, &kw, &vw, &o3, scratch, workspace, error))
        return FALSE;
    } else if (rs->overlap && rs->out_groups > 1) {
      for (int g = 0; g < rs->out_groups; g++) {
        LbTensor qg, kg, vg, og;
        if (!lingbot_dit_ulysses_group_views (rs, &kw, &vw, g, &qg, &kg, &vg,
                &og, error) ||
            !prepare_one (rs, &qg, &kg, &vg, &og, scratch, workspace, error))
          return FALSE;
      }
    } else if (!prepare_one (rs, rs->q16 ? rs->q16 : rs->q_r, &kw, &vw,
            rs->o16 ? rs->o16 : rs->o_r, scratch, workspace, error))
      return FALSE;
  }
  return TRUE;
}

static gboolean
block_rest (LingbotDitRank * rs, int layer, const LbTensor * mod,
    GError ** error)
{
  const LingbotDitBlock *b = &rs->wt.blocks[layer];
  const float eps = (float) rs->cfg->eps;
  const float scale = 1.0f / sqrtf ((float) rs->head_dim);
  const int64_t H = rs->cfg->num_heads, hd = rs->head_dim;
  LbTensor *o = lingbot_dit_attn_out (rs);
  LbTensor gate_msa, shift_mlp, scale_mlp, gate_mlp, q3, o3, ck, cv;
  row_view (&gate_msa, mod, 2);
  row_view (&shift_mlp, mod, 3);
  row_view (&scale_mlp, mod, 4);
  row_view (&gate_mlp, mod, 5);
  heads_view (&q3, rs->q, H, hd);
  heads_view (&o3, o, H, hd);
  heads_view (&ck, rs->cross_k[layer], H, hd);
  heads_view (&cv, rs->cross_v[layer], H, hd);

  /* x += gate_msa * o(attn), then the camera injection
   * x = x * (1 + cam_scale) + cam_shift (spec 1.7 order), in one op */
  if (!linear (rs, o, &b->sa_o, 0.0f, rs->t1, error) ||
      !trace_copy (rs, rs->trace_self_attn, rs->t1, error) ||
      !OPS->gated_residual_modulate (rs->s, rs->x, rs->t1, &gate_msa,
          rs->cam_scale[layer], rs->cam_shift[layer], error))
    return FALSE;

  /* cross-attention, ungated */
  if (!norm_input (rs, rs->x, NULL, b->norm3_w, b->norm3_b, NULL, NULL,
          error) ||
      !linear_after_norm (rs, &b->ca_q, 0.0f, rs->q, error) ||
      !OPS->rms_norm (rs->s, rs->q, b->ca_norm_q, eps, rs->q, error) ||
      !OPS->attention (rs->s, &q3, &ck, &cv, NULL, NULL, scale, &o3, error) ||
      !linear (rs, o, &b->ca_o, 0.0f, rs->t1, error) ||
      !trace_copy (rs, rs->trace_cross_attn, rs->t1, error))
    return FALSE;

  /* the cross-attention's residual and the FFN's norm in one op, then the
   * FFN */
  return norm_input (rs, rs->x, rs->t1, NULL, NULL, &scale_mlp, &shift_mlp,
      error) && ffn_after_norm (rs, b, error) &&
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
  if (!lingbot_dit_cache_evict (rs, layer, error))
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
      (!norm_input (rs, rs->x, NULL, NULL, NULL, &scale, &shift, error) ||
          !linear_after_norm (rs, &rs->wt.head, 0.0f, rs->z, error)))
    return FALSE;
  if (rs->sh.n_ranks > 1)
    return lingbot_dit_ulysses_gather_z (rs, error);
  return TRUE;
}

/* lingbot-gst: DiT internals shared by the lingbot/dit*.c files and the
 * DiT tests (not installed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "lingbot/dit.h"
#include "kernels/backend.h"
#include "kernels/error.h"
#include "comm/worker-group.h"

G_BEGIN_DECLS

/* most head groups of the overlapped output exchange */
#define LINGBOT_DIT_MAX_OUT_GROUPS 8

typedef struct
{
  LbTensor *w;                  /* [out, in] f32 (bf16 / f8e4m3 on ranks) */
  LbTensor *b;                  /* [out] f32 */
  /* [out] f32 per-output-channel scales of an f8e4m3 w (LB_MATH_FP8
   * ranks, lingbot_dit_weights_init()); NULL otherwise */
  LbTensor *s;
} LingbotDitLinear;

typedef struct
{
  LbTensor *modulation;         /* [6, D] */
  LingbotDitLinear sa_q, sa_k, sa_v, sa_o;
  LbTensor *sa_norm_q, *sa_norm_k;
  LbTensor *norm3_w, *norm3_b;
  LingbotDitLinear ca_q, ca_k, ca_v, ca_o;
  LbTensor *ca_norm_q, *ca_norm_k;
  LingbotDitLinear ffn0, ffn2;
  LingbotDitLinear cam1, cam2, cam_scale, cam_shift;
} LingbotDitBlock;

/* Every tensor of the model in the forward's layout (f32; 2-D patch
 * embedding and modulations).  LingbotDitBlock and LingbotDitLinear hold
 * only LbTensor pointers; lingbot_dit_weights_init() walks them through
 * offset tables in dit-ranks.c (a static assertion there fails when a
 * member is added to LingbotDitBlock without adding it to the table). */
typedef struct
{
  LingbotDitLinear patch;       /* w [D, in_dim * 4] */
  LingbotDitLinear ctl_patch;   /* w [D, control_in_features] */
  LingbotDitLinear c2ws1, c2ws2;
  LingbotDitLinear text0, text2;
  LingbotDitLinear time0, time2, time_proj;
  LingbotDitLinear head;
  LbTensor *head_modulation;    /* [2, D] */
  LingbotDitBlock *blocks;      /* [num_layers] */
} LingbotDitWeights;

struct _LingbotDit
{
  LingbotDitConfig cfg;
  char *path;
  GHashTable *by_name;          /* name -> LbTensor* (owned, host f32) */
  LingbotDitWeights w;          /* host tensors, borrowed from by_name */
};

/* ---- per-rank forward state (dit-ranks.c, dit-kvcache.c, dit-block.c) */

/* a rank computing on the host (the CPU backend) */
static inline gboolean
lingbot_dit_is_host (LbStream * s)
{
  return s->backend->device_type == LB_DEVICE_CPU;
}

/* dit-block.c */
gboolean lingbot_dit_linear_apply (LbStream * s, const LbTensor * x,
    const LingbotDitLinear * l, float beta, LbTensor * y, GError ** error);

/* Token layout of one rank: a band of token rows [row0, row0 + n_rows) of
 * every latent frame of the chunk (DESIGN.md 3).  Local token index is
 * (f, i - row0, j) row-major. */
typedef struct
{
  int rank, n_ranks;
  int64_t frames, hp, wp;       /* token grid of a chunk */
  int64_t frame_tokens;         /* hp * wp */
  int64_t n_tokens;             /* frames * hp * wp */
  int64_t row0, n_rows;         /* this rank's band */
  int64_t n_local;              /* frames * n_rows * wp */
  int64_t heads_local;          /* heads / n_ranks */
  /* every rank's band, for the exchanges */
  int64_t *band_row0, *band_rows, *band_tok0;   /* [n_ranks] */
} LingbotDitShard;

typedef struct
{
  LbStream *s;
  LbRank *rank;                 /* NULL: single rank, no collectives */
  const LingbotDit *dit;
  const LingbotDitConfig *cfg;
  /* the weights on this rank's device: dit->w itself on the CPU backend
   * (borrowed), an uploaded f32 copy on any other (owned) */
  LingbotDitWeights wt;
  gboolean wt_owned;
  gsize wt_bytes;               /* device bytes of an owned copy */
  LingbotDitShard sh;
  int64_t head_dim;

  /* KV cache, per layer [cap, heads_local * head_dim] of kv_dtype
   * (lingbot_dit_kv_dtype(): bf16 on a device rank in LB_MATH_BF16, else
   * f32); kv_bytes: the device (or host) bytes of all of it */
  int64_t cap, sink, max_attention;
  int64_t global_end, local_end;
  int64_t pend_evict, pend_local_end;   /* computed by cache_begin */
  LbDType kv_dtype;
  gsize kv_bytes;
  LbTensor **cache_k, **cache_v;

  /* cross-attention K/V, per layer [text_len, D] (all heads) */
  int64_t text_len;
  LbTensor **cross_k, **cross_v;

  /* camera injection per layer [n_local, D] (once per chunk) */
  LbTensor **cam_scale, **cam_shift;
  LbTensor *ctl;                /* [n_local, D] control tokens */

  LbTensor *rope_cos, *rope_sin;        /* [1024, hd/2] */
  /* the chunk's tables (lingbot_dit_rope_chunk()): temporal columns of rows
   * [0, F) hold the base rows [frame0, frame0 + F), the other columns the
   * base's own rows, so rope at frame offset 0 with them is rope at frame0
   * with the base; every pass of every chunk then runs with the same
   * arguments (graph replay) */
  LbTensor *rope_cos_c, *rope_sin_c;
  /* the formula path of lingbot_dit_rope_chunk() (frames past the base
   * tables): rope_host [2, F, t_pairs] host staging of the chunk's
   * temporal cos and sin (page-locked on a device rank), rope_dev its
   * device copy (NULL on the CPU); rope_formula: take that path for every
   * chunk (tests: lingbot_dit_session_set_rope_formula()) */
  LbTensor *rope_host, *rope_dev;
  gboolean rope_formula;

  /* scratch, [n_local, *] */
  LbTensor *x, *a, *q, *k, *v, *o, *t1, *h;
  LbTensor *z;                  /* [n_local, out_dim * 4] */
  /* the bf16 GEMM inputs of a rank whose linear weights are bf16 (a
   * device rank in LB_MATH_BF16, spec 1.11): a16 [n_local, D] and h16
   * [n_local, ffn_dim], written in bf16 by the norms and the GELU that
   * feed the block's GEMMs, which then read them without a conversion
   * pass (lingbot_dit_rank_init()); NULL otherwise, and with
   * LINGBOT_DIT_GEMM_INPUTS=f32 (the f32 inputs rounded by the GEMM: the
   * same bits, kept to compare) */
  LbTensor *a16, *h16;
  /* the fp8 GEMM input of the layers after a norm on a device rank in
   * LB_MATH_FP8 (every linear w e4m3): a8 [n_local, D] e4m3 codes and
   * a8s [n_local] f32 row scales, written by the norm_fp8 op and read by
   * gemm_fp8_q (no f32 round trip, no quantisation pass per GEMM); NULL
   * otherwise, and with LINGBOT_DIT_GEMM_INPUTS=f32 (the f32 norm output
   * quantised by each gemm_fp8: the same bits, kept to compare) */
  LbTensor *a8, *a8s;
  /* with a8, the fp8 input of the FFN's second layer: h8 [n_local,
   * ffn_dim] e4m3 codes and h8s [n_local] row scales, written by
   * gemm_fp8_gelu_q (the first layer, its GELU and the quantisation in
   * one op) and read by gemm_fp8_q; such a rank has no f32 hidden rs->h */
  LbTensor *h8, *h8s;

  /* Ulysses scratch (n_ranks > 1) */
  LbTensor *send;               /* [n_local * D] */
  /* [n_tokens, heads_local, hd]; q_r NULL where q16 takes q, o_r NULL
   * where o16 takes the attention output */
  LbTensor *q_r, *k_r, *v_r, *o_r;
  LbTensor *recv;               /* [n_ranks * n_local * hl * hd] */
  /* bf16 exchanges (a bf16 KV cache, lingbot_dit_ulysses_alloc()): k and
   * v are sent as bf16 (send_kv [2, n_local * D], k_r / v_r bf16), and
   * the attention output too (o16 [n_tokens, hl, hd], written by the
   * attention op in bf16, and recv16 [n_ranks * n_local * hl * hd]);
   * NULL when the exchanges are f32 */
  LbTensor *send_kv, *o16, *recv16;
  /* q as bf16 too where the attention op rounds q to bf16 anyway
   * (LB_MATH_BF16, hd 64 or 128; kernels/ops.h): then send_kv holds the
   * q, k, v rows and q16 [n_tokens, hl, hd] receives q, which the
   * attention op reads as it is; NULL otherwise */
  LbTensor *q16;
  LbTensor *z_rm;               /* [n_tokens, out_dim * 4] rank-major */
  LbTensor *z_full;             /* [n_tokens, out_dim * 4] frame-major */
  gsize *cnt_a, *dsp_a, *cnt_b, *dsp_b;
  LbTensor *ones;               /* [hl * hd] of 1.0f; device backends only */
  /* overlap (lingbot_dit_ulysses_send()): the q/k/v exchanges run on
   * comm_s while the next GEMM runs on s, ordered by events */
  gboolean overlap;
  LbStream *comm_s;
  LbEvent *ev_packed[3], *ev_comm;
  /* output overlap (lingbot_dit_ulysses_attention_out()): attention in
   * out_groups groups of heads, each group's output exchanged on comm_s
   * while the next group is computed; 1 = one exchange after attention.
   * cnt_g: per-rank counts and displacements of one group's exchange
   * (send counts, send displacements, receive counts, receive
   * displacements; R each), relative to the group's buffers */
  int out_groups;
  LbEvent *ev_out[LINGBOT_DIT_MAX_OUT_GROUPS];
  gsize *cnt_g;

  /* optional per-block traces (tests) */
  LbTensor *trace_self_attn, *trace_cross_attn, *trace_ffn;
} LingbotDitRank;

/* dit-ranks.c */
gboolean lingbot_dit_shard_init (LingbotDitShard * sh, int rank, int n_ranks,
    int64_t frames, int64_t hp, int64_t wp, int num_heads, GError ** error);
void lingbot_dit_shard_clear (LingbotDitShard * sh);

gboolean lingbot_dit_weights_init (LingbotDitWeights * wt,
    gboolean * owned, gsize * nbytes, LbStream * s, const LingbotDit * dit,
    GError ** error);
void lingbot_dit_weights_clear (LingbotDitWeights * wt, gboolean owned,
    int num_layers);

gboolean lingbot_dit_rank_init (LingbotDitRank * rs, LbStream * s,
    LbRank * rank, const LingbotDit * dit, int64_t frames, int64_t hp,
    int64_t wp, int64_t cap, int64_t sink, int64_t text_len, GError ** error);
void lingbot_dit_rank_clear (LingbotDitRank * rs);
gboolean lingbot_dit_rank_reserve (LingbotDitRank * rs, GError ** error);
gboolean lingbot_dit_attention_prepare (LingbotDitRank * rs, gsize * scratch,
    gsize * workspace, GError ** error);

/* The attention output [n_local, D] that feeds the output projections: the
 * bf16 GEMM input rs->a16 where the rank has it (the attention op rounds
 * its result to bf16 exactly as the bf16 GEMM would round an f32 x, and
 * rs->a is not read between the q/k/v projections and the next norm), else
 * rs->o. */
static inline LbTensor *
lingbot_dit_attn_out (LingbotDitRank * rs)
{
  return rs->a16 ? rs->a16 : rs->o;
}

/* dit-tensor.c */
LbTensor *lingbot_dit_tensor_new (LbStream * s, int64_t d0, int64_t d1,
    GError ** error);
gboolean lingbot_dit_copy_rows (LbStream * s, LbTensor * dst,
    const LbTensor * src, GError ** error);
gboolean lingbot_dit_flat_view (LbTensor * out, const LbTensor * t,
    int64_t offset, int64_t count);

/* dit-kvcache.c */
LbDType lingbot_dit_kv_dtype (LbStream * s);
guint64 lingbot_dit_kv_cache_bytes (const LingbotDitConfig * cfg,
    int64_t cap, int n_ranks, LbDType dtype);

void lingbot_dit_cache_set_max_attention (LingbotDitRank * rs, int64_t tokens);
void lingbot_dit_cache_begin (LingbotDitRank * rs, int64_t current_start);
gboolean lingbot_dit_cache_evict (LingbotDitRank * rs, int layer,
    GError ** error);
void lingbot_dit_cache_slots (LingbotDitRank * rs, const LbTensor * cache,
    LbTensor * rows);
gboolean lingbot_dit_cache_write_sharded (LingbotDitRank * rs, int layer,
    GError ** error);
void lingbot_dit_cache_window (LingbotDitRank * rs, int layer, LbTensor * k,
    LbTensor * v);
void lingbot_dit_cache_window_at (LingbotDitRank * rs, int layer,
    int64_t end, LbTensor * k, LbTensor * v);
int lingbot_dit_cache_window_ends (LingbotDitRank * rs, int64_t * ends,
    int max);
void lingbot_dit_cache_end (LingbotDitRank * rs, int64_t current_start);

/* dit-block.c */
void lingbot_dit_timestep_features (double t, int freq_dim, float *out);
gboolean lingbot_dit_time_mods (LingbotDitRank * rs, double t,
    LbTensor * block_mods /* [L, 6, D] */ , LbTensor * head_mod /* [2, D] */ ,
    GError ** error);
gboolean lingbot_dit_text_kv (LingbotDitRank * rs, const LbTensor * text,
    gboolean embedded, GError ** error);
gboolean lingbot_dit_control_tokens (LingbotDitRank * rs,
    const LbTensor * ctl_patches /* [n_local, ctl_in] */ , GError ** error);
gboolean lingbot_dit_rope_chunk (LingbotDitRank * rs, int64_t frame0,
    GError ** error);
gboolean lingbot_dit_camera_precompute (LingbotDitRank * rs, int layer,
    GError ** error);

gboolean lingbot_dit_block_forward (LingbotDitRank * rs, int layer,
    const LbTensor * mod /* [6, D] */ , int64_t current_start,
    GError ** error);
gboolean lingbot_dit_head_forward (LingbotDitRank * rs,
    const LbTensor * head_mod, GError ** error);

/* dit-ulysses.c */
gboolean lingbot_dit_ulysses_alloc (LingbotDitRank * rs, GError ** error);
gboolean lingbot_dit_ulysses_qkv (LingbotDitRank * rs, GError ** error);
gboolean lingbot_dit_ulysses_send (LingbotDitRank * rs, int which,
    GError ** error);
gboolean lingbot_dit_ulysses_recv_wait (LingbotDitRank * rs, GError ** error);
void lingbot_dit_ulysses_free (LingbotDitRank * rs);
gboolean lingbot_dit_ulysses_out (LingbotDitRank * rs, GError ** error);
gboolean lingbot_dit_ulysses_group_views (LingbotDitRank * rs,
    const LbTensor * kw, const LbTensor * vw, int g, LbTensor * qg,
    LbTensor * kg, LbTensor * vg, LbTensor * og, GError ** error);
gboolean lingbot_dit_ulysses_attention_out (LingbotDitRank * rs,
    const LbTensor * kw, const LbTensor * vw, float scale, GError ** error);
gboolean lingbot_dit_ulysses_gather_z (LingbotDitRank * rs, GError ** error);
gboolean lingbot_dit_gather_band_rows (LingbotDitRank * rs,
    const LbTensor * full /* [n_tokens, C] */ , LbTensor * band,
    GError ** error);

/* dit-session.c: debug accessors for tests */
typedef struct _LingbotDitSession LingbotDitSession;
gboolean lingbot_dit_session_get_kv_info (LingbotDitSession * session,
    int rank, LbDType * dtype, gsize * nbytes);
void lingbot_dit_session_set_rope_formula (LingbotDitSession * session,
    gboolean always);

G_END_DECLS

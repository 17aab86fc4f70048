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
 *
 * Exchange dtypes: f32, except on ranks with a bf16 KV cache (device ranks
 * in LB_MATH_BF16), where k, v and the attention output travel as bf16:
 * the cache would round k and v to bf16 after the exchange, and the output
 * projection's bf16-weight GEMM rounds its input to bf16 (kernels/ops.h
 * @gemm), so rounding before the exchange gives the same bits with 10
 * bytes per element of the four exchanges instead of 16.  Where the
 * attention op rounds q to bf16 itself (LB_MATH_BF16 with hd 64 or 128,
 * kernels/ops.h: the DiT's 128) q travels as bf16 too (8 bytes of 16).
 * The attention op reads that bf16 q and writes its output in bf16
 * (kernels/ops.h @attention) straight into the exchange buffers, and the
 * reverse exchange lands in the bf16 input of the output projection
 * (lingbot_dit_attn_out()) where the rank has one: no conversion pass
 * between the exchanges, the attention and the GEMM.
 */
#include "lingbot/dit-private.h"
#include "comm/collectives.h"


static gboolean out_groups_alloc (LingbotDitRank * rs, GError ** error);

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
  const int64_t block = MAX (n, 1) * hl * hd * R;
  int64_t s2[2] = { 2, block }, s1[1] = { block };
  /* With a bf16 KV cache (device ranks in LB_MATH_BF16) k, v and the
   * attention output travel as bf16: the cache stores k and v rounded
   * anyway (the same rounding, before instead of after the exchange), and
   * the output projection's bf16 GEMM rounds its input to bf16 (kernels/
   * ops.h @gemm), so the result is the same bits with 10 of the 16 bytes
   * per element exchanged. */
  const LbDType xd = rs->kv_dtype;
  /* q too where the attention op rounds it to bf16 (kernels/ops.h) */
  const gboolean qx16 = xd != LB_DTYPE_F32 && (hd == 64 || hd == 128);
  s2[0] = qx16 ? 3 : 2;

  if (!(rs->send = lingbot_dit_tensor_new (rs->s, xd == LB_DTYPE_F32 ? 3 : 1,
              block, error)) ||
      !(rs->recv = lingbot_dit_tensor_new (rs->s, 1, block, error)) ||
      !(rs->k_r = lb_tensor_new_on (rs->s, xd, 3, s3, error)) ||
      !(rs->v_r = lb_tensor_new_on (rs->s, xd, 3, s3, error)) ||
      !(rs->z_rm = lingbot_dit_tensor_new (rs->s, N, zf, error)) ||
      !(rs->z_full = lingbot_dit_tensor_new (rs->s, N, zf, error)))
    return FALSE;
  if (xd != LB_DTYPE_F32 &&
      (!(rs->send_kv = lb_tensor_new_on (rs->s, xd, 2, s2, error)) ||
          !(rs->o16 = lb_tensor_new_on (rs->s, xd, 3, s3, error)) ||
          !(rs->recv16 = lb_tensor_new_on (rs->s, xd, 1, s1, error))))
    return FALSE;
  if (qx16 && !(rs->q16 = lb_tensor_new_on (rs->s, xd, 3, s3, error)))
    return FALSE;
  /* the f32 q and output of the attention where those are not bf16 (the
   * op reads q16 and writes o16 as they are) */
  if ((!qx16 && !(rs->q_r = lb_tensor_new_on (rs->s, LB_DTYPE_F32, 3, s3,
                  error))) || (xd == LB_DTYPE_F32 &&
          !(rs->o_r = lb_tensor_new_on (rs->s, LB_DTYPE_F32, 3, s3, error))))
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
  /* compute/communication overlap: stream-ordered collectives (NCCL, or
   * the solo stand-in for rank 0 of N) of a backend with events; LINGBOT_COMM_OVERLAP=0 turns it off, =1 on
   * for any collectives (tests: the local ones run synchronously, so the
   * same code path gives the same bytes) */
  LbBackend *be = rs->s->backend;
  const char *env = g_getenv ("LINGBOT_COMM_OVERLAP");
  rs->overlap = rs->rank != NULL && be->event_new != NULL &&
      be->event_record != NULL && be->stream_wait_event != NULL &&
      g_strcmp0 (env, "0") != 0 && (g_strcmp0 (env, "1") == 0 ||
      lb_comm_is_stream_ordered (rs->rank));
  if (rs->overlap) {
    if (!(rs->comm_s = be->stream_new (be, rs->s->device, error)) ||
        !(rs->ev_comm = be->event_new (be, rs->s->device, error)))
      return FALSE;
    for (int i = 0; i < 3; i++)
      if (!(rs->ev_packed[i] = be->event_new (be, rs->s->device, error)))
        return FALSE;
  }
  if (rs->overlap && !out_groups_alloc (rs, error))
    return FALSE;
  if (rs->s->backend->device_type != LB_DEVICE_CPU) {
    g_autoptr (LbTensor) one = lb_tensor_new_f32 (1, hl * hd);
    for (int64_t i = 0; i < hl * hd; i++)
      ((float *) one->data)[i] = 1.0f;
    if (!(rs->ones = lb_tensor_new_on (rs->s, LB_DTYPE_F32, 1, one->shape,
                error)) ||
        !lb_tensor_upload (rs->s, rs->ones, one, error) ||
        !rs->s->backend->stream_synchronize (rs->s, error))
      return FALSE;
  }
  return TRUE;
}

/* The output exchange's head groups (lingbot_dit_ulysses_attention_out()):
 * LINGBOT_COMM_OUT_GROUPS (default 2, at most LINGBOT_DIT_MAX_OUT_GROUPS),
 * lowered to the largest divisor of the local head count, so every rank
 * picks the same G and runs the same G exchanges.  One group (a single
 * local head, or the variable set to 1) keeps the exchange after the
 * whole attention (lingbot_dit_ulysses_out()). */
static gboolean
out_groups_alloc (LingbotDitRank * rs, GError ** error)
{
  LbBackend *be = rs->s->backend;
  const int R = rs->sh.n_ranks;
  const int64_t hl = rs->sh.heads_local;
  const char *env = g_getenv ("LINGBOT_COMM_OUT_GROUPS");
  gint64 want = 2;
  if (env != NULL && *env != '\0') {
    char *end = NULL;
    want = g_ascii_strtoll (env, &end, 10);
    if (end == env || *end != '\0' || want < 1) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "LINGBOT_COMM_OUT_GROUPS: '%s' is not a positive integer", env);
      return FALSE;
    }
  }
  want = MIN (want, LINGBOT_DIT_MAX_OUT_GROUPS);
  while (want > 1 && hl % want != 0)
    want--;
  rs->out_groups = (int) want;
  if (want == 1)
    return TRUE;
  for (int g = 0; g < rs->out_groups; g++)
    if (!(rs->ev_out[g] = be->event_new (be, rs->s->device, error)))
      return FALSE;
  /* one group moves 1/G of every block of the full exchange (hl * hd
   * floats per token become hg * hd), at offsets relative to the group's
   * own [N, hg, hd] output slab and [R, n, hg * hd] receive slab */
  rs->cnt_g = g_new0 (gsize, 4 * R);
  for (int r = 0; r < R; r++) {
    rs->cnt_g[r] = rs->cnt_b[r] / (gsize) want;
    rs->cnt_g[R + r] = rs->dsp_b[r] / (gsize) want;
    rs->cnt_g[2 * R + r] = rs->cnt_a[r] / (gsize) want;
    rs->cnt_g[3 * R + r] = rs->dsp_a[r] / (gsize) want;
  }
  return TRUE;
}

/* The [R, n, hl * hd] rank-major view of a [n, D] token buffer: block d
 * holds the heads of rank d (strided: runs of hl * hd floats). */
static void
heads_by_rank (LbTensor * out, const LbTensor * t, int R, int64_t piece)
{
  LbTensor v;
  int64_t shape[3] = { t->shape[0], R, piece };
  static const int perm[3] = { 1, 0, 2 };
  lb_tensor_view_reshape (&v, t, 3, shape);
  lb_tensor_view_permute (out, &v, perm);
}

/* Elements [0, R * n * piece) of a contiguous exchange buffer as
 * [R, n, piece]. */
static gboolean
rank_blocks (LbTensor * out, const LbTensor * buf, int R, int64_t n,
    int64_t piece)
{
  int64_t shape[3] = { R, n, piece };
  return lingbot_dit_flat_view (out, buf, 0, R * n * piece) &&
      lb_tensor_view_reshape (out, out, 3, shape);
}

/* dst[d] = src[d] for the R blocks of [R, n, piece] views whose rows are
 * strided (n * R runs of piece floats).  The CPU backend copies the runs
 * (lingbot_dit_copy_rows()); a device backend would need n * R tiny
 * copies per exchange, so there each block is one row-strided op instead:
 * `dst = src * 1.0f` (ops->mul with a [piece] vector of ones), which is
 * exact for every value (x * 1 == x, signed zeros and infinities kept;
 * only a NaN's payload may change). */
static gboolean
move_blocks (LingbotDitRank * rs, LbTensor * dst, const LbTensor * src,
    GError ** error)
{
  if (dst->dtype != LB_DTYPE_F32 || src->dtype != LB_DTYPE_F32) {
    /* a bf16 exchange: the copy op converts (rounds to bf16 or widens
     * exactly) or copies bf16 bits, one strided op per block */
    for (int64_t d = 0; dst->shape[1] > 0 && d < dst->shape[0]; d++) {
      LbTensor db, sb;
      lb_tensor_view_select (&db, dst, 0, d);
      lb_tensor_view_select (&sb, src, 0, d);
      if (!lb_ops (rs->s)->copy (rs->s, &sb, &db, error))
        return FALSE;
    }
    return TRUE;
  }
  if (rs->ones == NULL)
    return lingbot_dit_copy_rows (rs->s, dst, src, error);
  if (dst->shape[1] == 0)
    return TRUE;
  LbTensor ones;
  if (!lb_tensor_view_narrow (&ones, rs->ones, 0, 0, dst->shape[2])) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT Ulysses: %" G_GINT64_FORMAT " floats per block, more than the "
        "%" G_GINT64_FORMAT " of the ones vector", dst->shape[2],
        rs->ones->shape[0]);
    return FALSE;
  }
  for (int64_t d = 0; d < dst->shape[0]; d++) {
    LbTensor db, sb;
    lb_tensor_view_select (&db, dst, 0, d);
    lb_tensor_view_select (&sb, src, 0, d);
    if (!lb_ops (rs->s)->mul (rs->s, &sb, &ones, &db, error))
      return FALSE;
  }
  return TRUE;
}

/* Packs q (0), k (1) or v (2) into its row of rs->send as [R, n, piece]
 * (@send: that row's view). */
static gboolean
pack (LingbotDitRank * rs, int which, LbTensor * send, GError ** error)
{
  const LingbotDitShard *sh = &rs->sh;
  const int64_t piece = sh->heads_local * rs->head_dim;
  const LbTensor *src[3] = { rs->q, rs->k, rs->v };
  LbTensor row, from;
  if (rs->q16 != NULL)          /* q, k, v rows, bf16 */
    lb_tensor_view_select (&row, rs->send_kv, 0, which);
  else if (which > 0 && rs->send_kv != NULL)    /* k, v rows, bf16 */
    lb_tensor_view_select (&row, rs->send_kv, 0, which - 1);
  else
    lb_tensor_view_select (&row, rs->send, 0, which);
  if (!rank_blocks (send, &row, sh->n_ranks, sh->n_local, piece))
    return FALSE;
  heads_by_rank (&from, src[which], sh->n_ranks, piece);
  return move_blocks (rs, send, &from, error);
}

/**
 * lingbot_dit_ulysses_qkv:
 * @rs: a rank state with rs->q/k/v [n_local, D] (normed, rotated)
 * @error: collective errors
 *
 * Scatters heads, gathers tokens: rs->q_r/k_r/v_r become [N, H/R, hd] for
 * this rank's heads over the whole chunk, in rank-major token order.  Each
 * of q, k, v is packed into its row of rs->send (move_blocks()); the
 * three exchanges are submitted together.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_ulysses_qkv (LingbotDitRank * rs, GError ** error)
{
  LbTensor *dst[3] = { rs->q16 ? rs->q16 : rs->q_r, rs->k_r, rs->v_r };
  LbTensor send[3];
  for (int i = 0; i < 3; i++)
    if (!pack (rs, i, &send[i], error))
      return FALSE;
  if (!lb_comm_group_start (rs->rank, error))
    return FALSE;
  for (int i = 0; i < 3; i++) {
    if (!lb_comm_all_to_all_v (rs->rank, dst[i]->dtype, send[i].data,
            rs->cnt_a, rs->dsp_a, dst[i]->data, rs->cnt_b, rs->dsp_b, error))
      return FALSE;
  }
  return lb_comm_group_end (rs->rank, error);
}

/**
 * lingbot_dit_ulysses_send:
 * @rs: a rank state with rs->overlap; rs->q (0), rs->k (1) or rs->v (2)
 *   written on the compute stream
 * @which: 0, 1 or 2
 * @error: collective or event errors
 *
 * The exchange of one of q, k, v without waiting for it: packs it on the
 * compute stream, records an event there, and enqueues the all-to-all into
 * rs->q_r / k_r / v_r on the communication stream after that event, so
 * the GEMMs enqueued next on the compute stream run while it moves.  Every
 * rank sends in the same order (k, v, q in lingbot_dit_block_forward()).
 * lingbot_dit_ulysses_recv_wait() makes the compute stream wait for all.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_ulysses_send (LingbotDitRank * rs, int which, GError ** error)
{
  LbBackend *be = rs->s->backend;
  LbTensor *dst[3] = { rs->q16 ? rs->q16 : rs->q_r, rs->k_r, rs->v_r };
  LbTensor send;
  if (!pack (rs, which, &send, error) ||
      !be->event_record (rs->s, rs->ev_packed[which], error) ||
      !be->stream_wait_event (rs->comm_s, rs->ev_packed[which], error))
    return FALSE;
  rs->rank->comm_stream = rs->comm_s;
  gboolean ok = lb_comm_all_to_all_v (rs->rank, dst[which]->dtype, send.data,
      rs->cnt_a, rs->dsp_a, dst[which]->data, rs->cnt_b, rs->dsp_b, error);
  rs->rank->comm_stream = NULL;
  return ok;
}

/**
 * lingbot_dit_ulysses_recv_wait:
 * @rs: a rank state with rs->overlap, after the three sends
 * @error: event errors
 *
 * Orders the compute stream after every exchange enqueued on the
 * communication stream (the join of lingbot_dit_ulysses_send()).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_ulysses_recv_wait (LingbotDitRank * rs, GError ** error)
{
  LbBackend *be = rs->s->backend;
  return be->event_record (rs->comm_s, rs->ev_comm, error) &&
      be->stream_wait_event (rs->s, rs->ev_comm, error);
}

/**
 * lingbot_dit_ulysses_free:
 * @rs: a rank state
 *
 * Frees the overlap's stream and events (the buffers are rank tensors).
 */
void
lingbot_dit_ulysses_free (LingbotDitRank * rs)
{
  LbBackend *be = rs->s ? rs->s->backend : NULL;
  if (be == NULL)
    return;
  if (rs->comm_s)
    be->stream_free (rs->comm_s);
  rs->comm_s = NULL;
  for (int i = 0; i < 3; i++) {
    if (rs->ev_packed[i])
      be->event_free (be, rs->ev_packed[i]);
    rs->ev_packed[i] = NULL;
  }
  if (rs->ev_comm)
    be->event_free (be, rs->ev_comm);
  rs->ev_comm = NULL;
  for (int g = 0; g < LINGBOT_DIT_MAX_OUT_GROUPS; g++) {
    if (rs->ev_out[g])
      be->event_free (be, rs->ev_out[g]);
    rs->ev_out[g] = NULL;
  }
  g_clear_pointer (&rs->cnt_g, g_free);
  rs->out_groups = 1;
  rs->overlap = FALSE;
}

/**
 * lingbot_dit_ulysses_out:
 * @rs: a rank state with the attention output [N, H/R, hd] (rank-major
 *   tokens) in rs->o16 (bf16 exchanges) or rs->o_r
 * @error: collective errors
 *
 * The reverse exchange: lingbot_dit_attn_out() becomes [n_local, D] with
 * every head (move_blocks() out of rs->recv16 or rs->recv).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_ulysses_out (LingbotDitRank * rs, GError ** error)
{
  const LingbotDitShard *sh = &rs->sh;
  const int R = sh->n_ranks;
  const int64_t piece = sh->heads_local * rs->head_dim;
  const LbTensor *out = rs->o16 ? rs->o16 : rs->o_r;
  const LbTensor *in = rs->recv16 ? rs->recv16 : rs->recv;
  if (!lb_comm_all_to_all_v (rs->rank, out->dtype, out->data, rs->cnt_b,
          rs->dsp_b, in->data, rs->cnt_a, rs->dsp_a, error))
    return FALSE;
  LbTensor from, to;
  if (!rank_blocks (&from, in, R, sh->n_local, piece))
    return FALSE;
  heads_by_rank (&to, lingbot_dit_attn_out (rs), R, piece);
  return move_blocks (rs, &to, &from, error);
}

/**
 * lingbot_dit_ulysses_group_views:
 * @rs: a rank state with rs->out_groups = G > 1
 * @kw: [Nk, hl, hd] the layer's key window
 * @vw: [Nk, hl, hd] its value window
 * @g: the head group, 0 <= @g < G
 * @qg: (out): [N, hg, hd] the group's queries (rs->q16 or rs->q_r)
 * @kg: (out): [Nk, hg, hd] its keys
 * @vg: (out): [Nk, hg, hd] its values
 * @og: (out): [N, hg, hd] its slab of rs->o16 or rs->o_r
 * @error: %LB_ERROR_SHAPE when a view cannot be made
 *
 * The operands of head group @g's attention call in
 * lingbot_dit_ulysses_attention_out() (and of what
 * lingbot_dit_attention_prepare() readies).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_ulysses_group_views (LingbotDitRank * rs, const LbTensor * kw,
    const LbTensor * vw, int g, LbTensor * qg, LbTensor * kg, LbTensor * vg,
    LbTensor * og, GError ** error)
{
  const int G = rs->out_groups;
  const int64_t N = rs->sh.n_tokens, hd = rs->head_dim;
  const int64_t hg = rs->sh.heads_local / G, slab = N * hg * hd;
  /* bf16 exchange: each group attends into its slab of rs->o16, received
   * into rs->recv16 (ulysses_out()) */
  const LbTensor *q = rs->q16 ? rs->q16 : rs->q_r;
  const LbTensor *out = rs->o16 ? rs->o16 : rs->o_r;
  int64_t oshape[3] = { N, hg, hd };
  if (!lb_tensor_view_narrow (qg, q, 1, g * hg, hg) ||
      !lb_tensor_view_narrow (kg, kw, 1, g * hg, hg) ||
      !lb_tensor_view_narrow (vg, vw, 1, g * hg, hg) ||
      !lingbot_dit_flat_view (og, out, g * slab, slab) ||
      !lb_tensor_view_reshape (og, og, 3, oshape)) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT Ulysses: cannot view head group %d of %d", g, G);
    return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_dit_ulysses_attention_out:
 * @rs: a rank state with rs->overlap and rs->out_groups = G > 1; q [N,
 *   hl, hd] (rank-major tokens) in rs->q16 or rs->q_r, and the cache
 *   written
 * @kw: [Nk, hl, hd] the layer's key window (a cache view; f32, or bf16
 *   for a bf16 KV cache, lingbot_dit_kv_dtype())
 * @vw: [Nk, hl, hd] its value window, of @kw's dtype
 * @scale: logit scale, 1 / sqrt(hd)
 * @error: op, collective or event errors
 *
 * Self-attention and the reverse exchange, overlapped (spec B.3, Ulysses):
 * the hl local heads are split into G groups of hg = hl / G heads.  Group
 * g attends into its own slab of rs->o_r (rs->o16 for bf16 exchanges),
 * used group-major as [G][N, hg, hd], so that each destination's rows of
 * it are contiguous; an event recorded after it lets the communication
 * stream send that slab (an all-to-all of 1/G of the full volume, into the
 * group's slab of rs->recv or rs->recv16, [G][R, n, hg * hd]) while the
 * compute stream goes on with group g + 1.  After the last group the
 * compute stream waits for the exchanges and moves every group's heads
 * into lingbot_dit_attn_out() [n_local, D] (head h = d * hl + g * hg + j
 * of destination rank d).  Attention is per head,
 * so the result is the same bytes as attention over all heads followed by
 * lingbot_dit_ulysses_out(); only the last group's exchange is left
 * exposed (1/G of it).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_ulysses_attention_out (LingbotDitRank * rs, const LbTensor * kw,
    const LbTensor * vw, float scale, GError ** error)
{
  LbBackend *be = rs->s->backend;
  const LingbotDitShard *sh = &rs->sh;
  const int R = sh->n_ranks, G = rs->out_groups;
  const int64_t N = sh->n_tokens, n = sh->n_local, hd = rs->head_dim;
  const int64_t hl = sh->heads_local, hg = hl / G;
  const int64_t slab = N * hg * hd, rslab = (int64_t) R * n * hg * hd;
  const LbTensor *out = rs->o16 ? rs->o16 : rs->o_r;
  const LbTensor *in = rs->recv16 ? rs->recv16 : rs->recv;
  const gsize esz = lb_dtype_size (out->dtype);

  for (int g = 0; g < G; g++) {
    LbTensor qg, kg, vg, og;
    if (!lingbot_dit_ulysses_group_views (rs, kw, vw, g, &qg, &kg, &vg, &og,
            error))
      return FALSE;
    if (!lb_ops (rs->s)->attention (rs->s, &qg, &kg, &vg, NULL, NULL, scale,
            &og, error) ||
        !be->event_record (rs->s, rs->ev_out[g], error) ||
        !be->stream_wait_event (rs->comm_s, rs->ev_out[g], error))
      return FALSE;
    rs->rank->comm_stream = rs->comm_s;
    gboolean ok = lb_comm_all_to_all_v (rs->rank, out->dtype,
        (char *) out->data + (gsize) (g * slab) * esz, rs->cnt_g,
        rs->cnt_g + R, (char *) in->data + (gsize) (g * rslab) * esz,
        rs->cnt_g + 2 * R, rs->cnt_g + 3 * R, error);
    rs->rank->comm_stream = NULL;
    if (!ok)
      return FALSE;
  }
  if (!lingbot_dit_ulysses_recv_wait (rs, error))
    return FALSE;
  /* the output [n, D] as [n, R, G, hg * hd]: group g of every
   * destination's block */
  LbTensor o4;
  int64_t shape4[4] = { n, R, G, hg * hd };
  static const int perm[3] = { 1, 0, 2 };
  if (!lb_tensor_view_reshape (&o4, lingbot_dit_attn_out (rs), 4, shape4)) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT Ulysses: the attention output is not a contiguous [n, D]");
    return FALSE;
  }
  for (int g = 0; g < G; g++) {
    LbTensor from, sel, to, rbuf;
    lb_tensor_view_select (&sel, &o4, 2, g);
    lb_tensor_view_permute (&to, &sel, perm);
    if (!lingbot_dit_flat_view (&rbuf, in, g * rslab, rslab) ||
        !rank_blocks (&from, &rbuf, R, n, hg * hd) ||
        !move_blocks (rs, &to, &from, error))
      return FALSE;
  }
  return TRUE;
}

/* Frame-major [N, C] rows of rank r's band as [F, band * C] (strided), and
 * the rank-major [n_r, C] rows of that band as [F, band * C]. */
static gboolean
band_views (const LingbotDitShard * sh, int r, const LbTensor * frame_major,
    const LbTensor * rank_major, int64_t rank_major_tok0, LbTensor * fm,
    LbTensor * rm)
{
  const int64_t C = frame_major->shape[1];
  const int64_t band = sh->band_rows[r] * sh->wp;
  int64_t fshape[2] = { sh->frames, sh->frame_tokens * C };
  int64_t bshape[2] = { sh->frames, band * C };
  LbTensor frames;
  return lb_tensor_view_reshape (&frames, frame_major, 2, fshape) &&
      lb_tensor_view_narrow (fm, &frames, 1, sh->band_row0[r] * sh->wp * C,
      band * C) &&
      lingbot_dit_flat_view (rm, rank_major, rank_major_tok0 * C,
      sh->frames * band * C) && lb_tensor_view_reshape (rm, rm, 2, bshape);
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
  if (!lb_comm_all_gather_v (rs->rank, LB_DTYPE_F32, rs->z->data,
          (gsize) (sh->n_local * zf), rs->z_rm->data, rs->cnt_b + R,
          rs->dsp_b + R, error))
    return FALSE;
  for (int r = 0; r < R; r++) {
    LbTensor fm, rm;
    if (sh->band_rows[r] == 0)
      continue;
    if (!band_views (sh, r, rs->z_full, rs->z_rm, sh->band_tok0[r], &fm, &rm)
        || !lingbot_dit_copy_rows (rs->s, &fm, &rm, error))
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
  LbTensor fm, rm;
  if (sh->n_rows == 0)
    return TRUE;
  if (!band_views (sh, sh->rank, full, band, 0, &fm, &rm)) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT band rows: token buffers are not contiguous [N, C] / [n, C]");
    return FALSE;
  }
  return lingbot_dit_copy_rows (rs->s, &rm, &fm, error);
}

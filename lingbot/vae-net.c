/* lingbot-gst: one walk of the Wan2.1 VAE encoder or decoder trunk
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Spec: vae_and_distributed_spec.md A.3 (blocks), A.4/A.6 (layer lists),
 * A.5 (feature cache), A.10 (height sharding with halo exchange).
 *
 * Activations are [C, T, h, W] float32, h being the rows of this rank's
 * band.  Every 3x3 conv reads a halo-padded copy of its input
 * [C, T, h + 2, W] whose first and last rows are zeros at the frame edges
 * and the neighbour ranks' boundary rows inside the frame (exchanged
 * before each conv); the conv then runs with pad_h = 0, pad_w = 1.  The
 * causal caches keep the last 2 frames of the padded input, halo rows
 * included, so cached frames never need a second exchange.  Unsharded runs
 * are the 1-rank case (both halo rows zero).
 *
 * Cache slots start zeroed: 2 zero frames of history are exactly the
 * reference's "no cache" (2 leading zero frames) and "1 cached frame" (one
 * zero frame) cases, so every call passes 2 cached frames.
 */
#include "lingbot/vae-private.h"
#include "comm/collectives.h"

#include <math.h>
#include <string.h>

static void
need (int64_t * have, int64_t n)
{
  if (n > *have)
    *have = n;
}

static gboolean
conv_run (VaeCtx * ctx, const VaeConv * cv, const LbTensor * x,
    const LbTensor * cache, int pad_h, int pad_w, int stride, LbTensor * y,
    GError ** error)
{
  return lb_ops (ctx->stream)
      ->conv3d_causal (ctx->stream, x, cache, &cv->w, &cv->b, pad_h, pad_w,
      stride, stride, y, error);
}

/* Bitwise comparison of two equally shaped host views. */
static gboolean
host_views_equal (const LbTensor * a, const LbTensor * b)
{
  g_assert (a->ndim == 4 && lb_tensor_same_shape (a, b));
  const float *pa = a->data, *pb = b->data;
  for (int64_t c = 0; c < a->shape[0]; c++)
    for (int64_t t = 0; t < a->shape[1]; t++)
      for (int64_t h = 0; h < a->shape[2]; h++) {
        const float *ra
            = pa + c * a->stride[0] + t * a->stride[1] + h * a->stride[2];
        const float *rb
            = pb + c * b->stride[0] + t * b->stride[1] + h * b->stride[2];
        if (a->stride[3] == 1 && b->stride[3] == 1) {
          if (memcmp (ra, rb, sizeof (float) * a->shape[3]) != 0)
            return FALSE;
        } else {
          for (int64_t w = 0; w < a->shape[3]; w++)
            if (memcmp (ra + w * a->stride[3], rb + w * b->stride[3],
                    sizeof (float))
                != 0)
              return FALSE;
        }
      }
  return TRUE;
}

/* Fixed-point tracking (encoder): sets ctx->changed when the views @a and
 * @b (equal shapes, at most a cache slot's elements each) differ bitwise.
 * On the CPU they are compared in place; on a device both are copied into
 * the contiguous device scratch ctx->cmp_dev and downloaded into the host
 * buffer ctx->cmp_host (both allocated once by vae_ctx_alloc()). */
static gboolean
track_change (VaeCtx * ctx, const LbTensor * a, const LbTensor * b,
    GError ** error)
{
  if (!ctx->track_changes || ctx->changed)
    return TRUE;
  if (ctx->stream->backend->device_type == LB_DEVICE_CPU) {
    if (!host_views_equal (a, b))
      ctx->changed = TRUE;
    return TRUE;
  }
  const LbOps *ops = lb_ops (ctx->stream);
  int64_t n = lb_tensor_numel (a);
  g_assert (2 * n <= lb_tensor_numel (ctx->cmp_dev));
  LbTensor da, db, both, host;
  vae_view_flat (&both, ctx->cmp_dev, 1, (int64_t[1]) { 2 * n });
  vae_view_flat (&host, ctx->cmp_host, 1, (int64_t[1]) { 2 * n });
  lb_tensor_view_init (&da, LB_DTYPE_F32, both.data, both.device, a->ndim,
      a->shape, NULL);
  lb_tensor_view_init (&db, LB_DTYPE_F32, (float *) both.data + n, both.device,
      b->ndim, b->shape, NULL);
  if (!ops->copy (ctx->stream, a, &da, error)
      || !ops->copy (ctx->stream, b, &db, error)
      || !lb_tensor_download (ctx->stream, &host, &both, error))
    return FALSE;
  const float *h = host.data;
  if (memcmp (h, h + n, (gsize) n * sizeof (float)) != 0)
    ctx->changed = TRUE;
  return TRUE;
}

static LbTensor *
cache_slot (VaeCtx * ctx, int slot, int64_t c, int64_t t, int64_t h, int64_t w,
    GError ** error)
{
  if (ctx->plan) {
    g_assert ((guint) slot == ctx->caches->len);
    int64_t shape[4] = { c, t, h, w };
    LbTensor *tn
        = lb_tensor_new_on (ctx->stream, LB_DTYPE_F32, 4, shape, error);
    if (tn == NULL)
      return NULL;
    g_ptr_array_add (ctx->caches, tn);
    need (&ctx->need_cmp, c * t * h * w);
    return tn;
  }
  g_assert ((guint) slot < ctx->caches->len);
  LbTensor *tn = g_ptr_array_index (ctx->caches, slot);
  g_assert (tn->shape[0] == c && tn->shape[2] == h && tn->shape[3] == w);
  return tn;
}

/* Spec A.5: the slot becomes the last 2 frames of the conv input, or
 * [previous last frame, x] when x has one frame. */
static gboolean
cache_update (VaeCtx * ctx, LbTensor * cache, const LbTensor * x,
    GError ** error)
{
  const LbOps *ops = lb_ops (ctx->stream);
  int64_t t = x->shape[1];
  LbTensor a, b;
  if (t >= 2) {
    lb_tensor_view_narrow (&a, x, 1, t - 2, 2);
    return track_change (ctx, cache, &a, error)
        && ops->copy (ctx->stream, &a, cache, error);
  }
  LbTensor c0, c1;
  lb_tensor_view_narrow (&c0, cache, 1, 0, 1);
  lb_tensor_view_narrow (&c1, cache, 1, 1, 1);
  lb_tensor_view (&b, x);
  return track_change (ctx, &c0, &c1, error)
      && track_change (ctx, &c1, &b, error)
      && ops->copy (ctx->stream, &c1, &c0, error)
      && ops->copy (ctx->stream, &b, &c1, error);
}

/* A causal conv over the halo-padded input @p [Cin, t, hp, w] with the
 * cache of @slot; y = [Cout, t, hp - 2*halo, w]. */
static gboolean
conv_cached (VaeCtx * ctx, const VaeConv * cv, LbTensor * p, int slot,
    int pad_w, LbTensor * y, GError ** error)
{
  LbTensor *cache =
      cache_slot (ctx, slot, p->shape[0], VAE_CACHE_T, p->shape[2], p->shape[3],
      error);
  if (cache == NULL)
    return FALSE;
  if (ctx->plan)
    return TRUE;
  return conv_run (ctx, cv, p, cache, 0, pad_w, 1, y, error)
      && cache_update (ctx, cache, p, error);
}

/* Before a collective that publishes this rank's buffers: on device ranks
 * served by the local collectives a peer copies from them as soon as they
 * are posted, on its own stream, so the kernels that wrote them must be
 * finished (ctx->comm_sync; NCCL orders the transfer on the stream and
 * needs nothing). */
static gboolean
comm_ready (VaeCtx * ctx, GError ** error)
{
  return !ctx->comm_sync
      || ctx->stream->backend->stream_synchronize (ctx->stream, error);
}

/* @out = a [C, T, H, W] bf16 view of @data in the channels-last layout
 * (strides {1, H*W*C, W*C, C}: NDHWC in memory). */
static void
view_cl16 (LbTensor * out, void *data, LbDevice device, int64_t C, int64_t T,
    int64_t H, int64_t W)
{
  const int64_t shape[4] = { C, T, H, W };
  const int64_t stride[4] = { 1, H * W * C, W * C, C };
  lb_tensor_view_init (out, LB_DTYPE_BF16, data, device, 4, shape, stride);
}

/* A halo row of @p [C, T, hp, W] in a send/receive buffer at @data: f32
 * [C, T, 1, W] contiguous, or for a bf16 channels-last @p the same layout
 * as its rows (each frame's row one run of W*C). */
static void
halo_row_buffer (LbTensor * buf, const LbTensor * p, void *data)
{
  const int64_t C = p->shape[0], T = p->shape[1], W = p->shape[3];
  if (p->dtype == LB_DTYPE_BF16) {
    view_cl16 (buf, data, p->device, C, T, 1, W);
    return;
  }
  const int64_t shape[4] = { C, T, 1, W };
  lb_tensor_view_init (buf, LB_DTYPE_F32, data, p->device, 4, shape, NULL);
}

/* Fills the two halo rows of @p [C, T, h + 2, W] (f32, or bf16
 * channels-last): zeros at the frame's top and bottom edges, the
 * neighbours' boundary rows elsewhere (spec A.10). */
static gboolean
halo_exchange (VaeCtx * ctx, LbTensor * p, GError ** error)
{
  int64_t C = p->shape[0], T = p->shape[1], hp = p->shape[2], W = p->shape[3];
  int64_t n = C * T * W;
  gboolean up = ctx->rank != NULL && ctx->rank_index > 0;
  gboolean down = ctx->rank != NULL && ctx->rank_index < ctx->n_ranks - 1;
  if (ctx->plan) {
    if (up || down)
      need (&ctx->need_halo, n);
    return TRUE;
  }
  const LbOps *ops = lb_ops (ctx->stream);
  LbTensor top, bot;
  lb_tensor_view_narrow (&top, p, 2, 0, 1);
  lb_tensor_view_narrow (&bot, p, 2, hp - 1, 1);
  if (!up && !ops->fill (ctx->stream, &top, 0.f, error))
    return FALSE;
  if (!down && !ops->fill (ctx->stream, &bot, 0.f, error))
    return FALSE;
  if (!up && !down)
    return TRUE;

  const gint64 t0 = g_get_monotonic_time ();
  const LbDType dt = p->dtype;
  const gsize esz = lb_dtype_size (dt);
  char *send = ctx->halo_send->data, *recv = ctx->halo_recv->data;
  char *send_up = send, *send_down = send + ctx->halo_cap * esz;
  char *recv_up = recv, *recv_down = recv + ctx->halo_cap * esz;
  LbTensor row, buf;
  if (up) {
    lb_tensor_view_narrow (&row, p, 2, 1, 1);
    halo_row_buffer (&buf, p, send_up);
    if (!ops->copy (ctx->stream, &row, &buf, error))
      return FALSE;
  }
  if (down) {
    lb_tensor_view_narrow (&row, p, 2, hp - 2, 1);
    halo_row_buffer (&buf, p, send_down);
    if (!ops->copy (ctx->stream, &row, &buf, error))
      return FALSE;
  }
  LbRank *r = ctx->rank;
  if (!comm_ready (ctx, error) || !lb_comm_group_start (r, error))
    return FALSE;
  gboolean ok = TRUE;
  if (up)
    ok = lb_comm_send (r, dt, send_up, n, ctx->rank_index - 1, error)
        && lb_comm_recv (r, dt, recv_up, n, ctx->rank_index - 1, error);
  if (ok && down)
    ok = lb_comm_send (r, dt, send_down, n, ctx->rank_index + 1, error)
        && lb_comm_recv (r, dt, recv_down, n, ctx->rank_index + 1, error);
  if (!lb_comm_group_end (r, ok ? error : NULL) || !ok)
    return FALSE;
  if (up) {
    halo_row_buffer (&buf, p, recv_up);
    if (!ops->copy (ctx->stream, &buf, &top, error))
      return FALSE;
  }
  if (down) {
    halo_row_buffer (&buf, p, recv_down);
    if (!ops->copy (ctx->stream, &buf, &bot, error))
      return FALSE;
  }
  ctx->halo_bytes += (guint64) ((up ? 1 : 0) + (down ? 1 : 0)) * n * esz;
  ctx->halo_us += g_get_monotonic_time () - t0;
  return TRUE;
}

static void
swap_xy (VaeCtx * ctx)
{
  LbTensor *t = ctx->bx;
  ctx->bx = ctx->by;
  ctx->by = t;
}

/* x [C, t, h, W] -> padded buffer interior; optional RMS norm + SiLU. */
static gboolean
pad_input (VaeCtx * ctx, const LbTensor * x, const LbTensor * gamma,
    LbTensor * p, GError ** error)
{
  int64_t C = x->shape[0], t = x->shape[1], h = x->shape[2], W = x->shape[3];
  need (&ctx->need_p, C * t * (h + 2) * W);
  if (ctx->plan) {
    lb_tensor_view_init (p, LB_DTYPE_F32, NULL, x->device, 4,
        (int64_t[4]) { C, t, h + 2, W }, NULL);
    return halo_exchange (ctx, p, error);
  }
  vae_view4 (p, ctx->bp, C, t, h + 2, W);
  LbTensor in;
  lb_tensor_view_narrow (&in, p, 2, 1, h);
  const LbOps *ops = lb_ops (ctx->stream);
  gboolean ok
      = gamma ? ops->channel_rms_norm (ctx->stream, x, gamma, TRUE, &in, error)
      : ops->copy (ctx->stream, x, &in, error);
  return ok && halo_exchange (ctx, p, error);
}

/* With ctx->round16: @t (f32, contiguous) rounded to bf16 values in
 * place, through bp16 (the copy op rounds as lb_f32_to_bf16()). */
static gboolean
round_bf16 (VaeCtx * ctx, LbTensor * t, GError ** error)
{
  if (!ctx->round16)
    return TRUE;
  need (&ctx->need_p16, lb_tensor_numel (t));
  if (ctx->plan)
    return TRUE;
  LbTensor tmp;
  lb_tensor_view_init (&tmp, LB_DTYPE_BF16, ctx->bp16->data,
      ctx->bp16->device, t->ndim, t->shape, NULL);
  const LbOps *ops = lb_ops (ctx->stream);
  return ops->copy (ctx->stream, t, &tmp, error)
      && ops->copy (ctx->stream, &tmp, t, error);
}

/* The bf16 channels-last cache of @slot, [C, 2, hp, W] over NDHWC
 * storage [2, hp, W, C] (created when planning, as cache_slot()). */
static gboolean
cache_slot16 (VaeCtx * ctx, int slot, int64_t C, int64_t hp, int64_t W,
    LbTensor * view, GError ** error)
{
  LbTensor *tn;
  if (ctx->plan) {
    g_assert ((guint) slot == ctx->caches->len);
    const int64_t shape[4] = { VAE_CACHE_T, hp, W, C };
    tn = lb_tensor_new_on (ctx->stream, LB_DTYPE_BF16, 4, shape, error);
    if (tn == NULL)
      return FALSE;
    g_ptr_array_add (ctx->caches, tn);
  } else {
    g_assert ((guint) slot < ctx->caches->len);
    tn = g_ptr_array_index (ctx->caches, slot);
    g_assert (tn->dtype == LB_DTYPE_BF16 && tn->shape[1] == hp
        && tn->shape[2] == W && tn->shape[3] == C);
  }
  view_cl16 (view, tn->data, tn->device, C, VAE_CACHE_T, hp, W);
  return TRUE;
}

/* x [C, t, h, W] (f32) -> optional RMS norm + SiLU -> halo-padded input
 * of the causal conv @cv with the cache of @slot -> y.  With ctx->in16
 * the padded input is bf16 channels-last in bp16 right after a copy of
 * the cache, so the conv reads cat(cache, x) in place, and the cache
 * becomes the last 2 frames of that run (spec A.5, as cache_update()). */
static gboolean
pad_conv_cached (VaeCtx * ctx, const LbTensor * x, const LbTensor * gamma,
    const VaeConv * cv, int slot, LbTensor * y, GError ** error)
{
  LbTensor p;
  if (!ctx->in16)
    return pad_input (ctx, x, gamma, &p, error) && round_bf16 (ctx, &p, error)
        && conv_cached (ctx, cv, &p, slot, 1, y, error);
  const int64_t C = x->shape[0], t = x->shape[1], h = x->shape[2],
      W = x->shape[3], hp = h + 2, tc = VAE_CACHE_T;
  LbTensor cache, run, cat_cache, in, tail;
  if (!cache_slot16 (ctx, slot, C, hp, W, &cache, error))
    return FALSE;
  need (&ctx->need_p16, C * (tc + t) * hp * W);
  if (ctx->plan) {
    view_cl16 (&p, NULL, x->device, C, t, hp, W);
    return halo_exchange (ctx, &p, error);
  }
  g_assert (!ctx->track_changes);
  const LbOps *ops = lb_ops (ctx->stream);
  view_cl16 (&run, ctx->bp16->data, ctx->bp16->device, C, tc + t, hp, W);
  lb_tensor_view_narrow (&cat_cache, &run, 1, 0, tc);
  lb_tensor_view_narrow (&p, &run, 1, tc, t);
  lb_tensor_view_narrow (&in, &p, 2, 1, h);
  lb_tensor_view_narrow (&tail, &run, 1, t, tc);
  return ops->copy (ctx->stream, &cache, &cat_cache, error)
      && (gamma ? ops->channel_rms_norm (ctx->stream, x, gamma, TRUE, &in,
          error) : ops->copy (ctx->stream, x, &in, error))
      && halo_exchange (ctx, &p, error)
      && conv_run (ctx, cv, &p, &cat_cache, 0, 1, 1, y, error)
      && ops->copy (ctx->stream, &tail, &cache, error);
}

static void
view_x (VaeCtx * ctx, LbTensor * out, LbTensor * buf, const VaeShape * s)
{
  need (&ctx->need_x, s->c * s->t * s->h * s->w);
  if (ctx->plan)
    lb_tensor_view_init (out, LB_DTYPE_F32, NULL, LB_DEVICE_HOST, 4,
        (int64_t[4]) { s->c, s->t, s->h, s->w }, NULL);
  else
    vae_view4 (out, buf, s->c, s->t, s->h, s->w);
}

static gboolean
residual_add (VaeCtx * ctx, LbTensor * x, const LbTensor * y, GError ** error)
{
  int64_t shape[2] = { x->shape[0], lb_tensor_numel (x) / x->shape[0] };
  LbTensor x2, y2;
  lb_tensor_view_reshape (&x2, x, 2, shape);
  lb_tensor_view_reshape (&y2, y, 2, shape);
  return lb_ops (ctx->stream)
      ->gated_residual (ctx->stream, &x2, &y2, NULL, error);
}

/* Spec A.3 ResidualBlock. */
static gboolean
res_block (VaeCtx * ctx, const VaeLayer * l, VaeShape * s, int *slot,
    GError ** error)
{
  LbTensor x, y;
  VaeShape so = { l->cout, s->t, s->h, s->w };
  view_x (ctx, &x, ctx->bx, s);
  view_x (ctx, &y, ctx->by, &so);
  if (!pad_conv_cached (ctx, &x, &l->gamma_a, &l->a, (*slot)++, &y, error)
      || !pad_conv_cached (ctx, &y, &l->gamma_b, &l->b, (*slot)++, &y, error))
    return FALSE;
  if (l->has_sc) {
    /* shortcut(x) lands in the padded buffer, free again by now */
    need (&ctx->need_p, so.c * so.t * so.h * so.w);
    if (!ctx->plan) {
      LbTensor sc;
      vae_view4 (&sc, ctx->bp, so.c, so.t, so.h, so.w);
      if (!conv_run (ctx, &l->sc, &x, NULL, 0, 0, 1, &sc, error)
          || !residual_add (ctx, &y, &sc, error))
        return FALSE;
    }
    swap_xy (ctx);
  } else if (!ctx->plan && !residual_add (ctx, &x, &y, error)) {
    return FALSE;
  }
  *s = so;
  return TRUE;
}

/* Spec A.3 AttentionBlock, per frame.  Sharded: every rank all-gathers the
 * normalised input of the whole frame (token-major rows are in frame order
 * because bands are contiguous row ranges) and computes q, k, v for every
 * token with the same gemm as an unsharded run (so the shards agree with it
 * bit for bit; q of other ranks' rows is the only redundant work, C^2 MACs
 * per token), then attends with its own query rows. */
static gboolean
attn_block (VaeCtx * ctx, const VaeLayer * l, VaeShape * s, GError ** error)
{
  const int64_t C = s->c, Nl = s->h * s->w;
  const gboolean sharded = ctx->rank != NULL && ctx->n_ranks > 1;
  const int64_t N = sharded ? ctx->full_rows * s->w : Nl;
  const int64_t q0 = sharded ? ctx->band_start[ctx->rank_index] * s->w : 0;
  if (sharded && s->h != ctx->band_count[ctx->rank_index]) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "%s: sharded attention only at the latent resolution", l->name);
    return FALSE;
  }
  need (&ctx->need_attn_l, Nl * C);
  need (&ctx->need_attn_f, N * C);
  if (ctx->plan)
    return TRUE;

  const LbOps *ops = lb_ops (ctx->stream);
  LbTensor x, xf, xn, xnf, xn4, qkv, q3, k3, v3, o, o3, r, r4;
  view_x (ctx, &x, ctx->bx, s);
  vae_view_flat (&xn, ctx->xn_local, 2, (int64_t[2]) { Nl, C });
  /* the same memory seen as [C, 1, h, w] for the channel norm */
  lb_tensor_view_init (&xn4, LB_DTYPE_F32, xn.data, xn.device, 4,
      (int64_t[4]) { C, 1, s->h, s->w },
      (int64_t[4]) { 1, Nl * C, s->w * C, C });
  r4 = xn4;
  if (sharded)
    vae_view_flat (&xnf, ctx->xn_full, 2, (int64_t[2]) { N, C });
  else
    xnf = xn;
  vae_view_flat (&qkv, ctx->akv, 2, (int64_t[2]) { N, 3 * C });
  vae_view_flat (&o, ctx->ao, 2, (int64_t[2]) { Nl, C });
  vae_view_flat (&r, ctx->ar, 2, (int64_t[2]) { Nl, C });
  const int64_t st[3] = { 3 * C, C, 1 };
  float *base = qkv.data;
  lb_tensor_view_init (&q3, LB_DTYPE_F32, base + q0 * 3 * C, qkv.device, 3,
      (int64_t[3]) { Nl, 1, C }, st);
  lb_tensor_view_init (&k3, LB_DTYPE_F32, base + C, qkv.device, 3,
      (int64_t[3]) { N, 1, C }, st);
  lb_tensor_view_init (&v3, LB_DTYPE_F32, base + 2 * C, qkv.device, 3,
      (int64_t[3]) { N, 1, C }, st);
  lb_tensor_view_init (&o3, LB_DTYPE_F32, o.data, o.device, 3,
      (int64_t[3]) { Nl, 1, C }, NULL);
  r4.data = r.data;
  const float scale = (float) (1.0 / sqrt ((double) C));

  for (int64_t f = 0; f < s->t; f++) {
    lb_tensor_view_narrow (&xf, &x, 1, f, 1);
    if (!ops->channel_rms_norm (ctx->stream, &xf, &l->gamma_a, FALSE, &xn4,
            error))
      return FALSE;
    if (sharded && (!comm_ready (ctx, error)
            || !lb_comm_all_gather_v (ctx->rank, LB_DTYPE_F32, xn.data,
                (gsize) (Nl * C), xnf.data, ctx->ag_counts, ctx->ag_displs,
                error)))
      return FALSE;
    if (!ops->gemm (ctx->stream, &xnf, &l->a.w, TRUE, &l->a.b, 1.f, 0.f, &qkv,
            error)
        || !ops->attention (ctx->stream, &q3, &k3, &v3, NULL, NULL, scale, &o3,
            error)
        || !ops->gemm (ctx->stream, &o, &l->b.w, TRUE, &l->b.b, 1.f, 0.f, &r,
            error)
        || !ops->accumulate (ctx->stream, &r4, &xf, error))
      return FALSE;
  }
  return TRUE;
}

/* Spec A.3 upsample2d / upsample3d. */
static gboolean
up_block (VaeCtx * ctx, const VaeLayer * l, int li, VaeShape * s, int *slot,
    GError ** error)
{
  const int64_t C = s->c, h = s->h, W = s->w;
  int64_t t2 = s->t;
  LbTensor x, p;
  view_x (ctx, &x, ctx->bx, s);
  gboolean run_time = FALSE;
  if (l->has_time) {
    /* first call: marker only, the time_conv is skipped (spec C.2) */
    run_time = ctx->plan || ctx->started[li];
    if (!ctx->plan && !ctx->started[li]) {
      ctx->started[li] = TRUE;
      ctx->changed = TRUE;
    }
  }
  if (run_time) {
    t2 = 2 * s->t;
    VaeShape st = { 2 * C, s->t, h, W };
    LbTensor yt;
    view_x (ctx, &yt, ctx->by, &st);
    if (!conv_cached (ctx, &l->b, &x, *slot, 0, &yt, error))
      return FALSE;
    need (&ctx->need_p, C * t2 * (h + 2) * W);
    if (!ctx->plan) {
      /* channel half j of time step i is frame 2i + j */
      vae_view4 (&p, ctx->bp, C, t2, h + 2, W);
      LbTensor p5, dst, src;
      lb_tensor_view_reshape (&p5, &p, 5,
          (int64_t[5]) { C, s->t, 2, h + 2, W });
      for (int j = 0; j < 2; j++) {
        lb_tensor_view_select (&dst, &p5, 2, j);
        lb_tensor_view_narrow (&dst, &dst, 2, 1, h);
        lb_tensor_view_narrow (&src, &yt, 0, j * C, C);
        if (!lb_ops (ctx->stream)->copy (ctx->stream, &src, &dst, error))
          return FALSE;
      }
    } else {
      lb_tensor_view_init (&p, LB_DTYPE_F32, NULL, LB_DEVICE_HOST, 4,
          (int64_t[4]) { C, t2, h + 2, W }, NULL);
    }
    if (!halo_exchange (ctx, &p, error))
      return FALSE;
  } else {
    if (l->has_time && !cache_slot (ctx, *slot, C, VAE_CACHE_T, h, W, error))
      return FALSE;
    if (!pad_input (ctx, &x, NULL, &p, error))
      return FALSE;
  }
  if (l->has_time)
    (*slot)++;

  /* with ctx->in16 the upsampled input goes to the conv as bf16
   * channels-last (in bu's storage: half its bytes are enough) */
  int64_t ushape[4] = { C, t2, 2 * h + 2, 2 * W };
  const int64_t nu = C * t2 * (2 * h + 2) * 2 * W;
  need (&ctx->need_u, ctx->in16 ? (nu + 1) / 2 : nu);
  VaeShape so = { l->cout, t2, 2 * h, 2 * W };
  LbTensor u, y;
  view_x (ctx, &y, ctx->bx, &so);
  if (ctx->plan) {
    if (ctx->round16)
      need (&ctx->need_p16, nu);
    *s = so;
    return TRUE;
  }
  if (ctx->in16)
    view_cl16 (&u, ctx->bu->data, ctx->bu->device, C, t2, 2 * h + 2, 2 * W);
  else
    vae_view_flat (&u, ctx->bu, 4, ushape);
  if (!lb_ops (ctx->stream)
      ->upsample_nearest2x_halo (ctx->stream, &p, &u, error)
      || !round_bf16 (ctx, &u, error)
      || !conv_run (ctx, &l->a, &u, NULL, 0, 1, 1, &y, error))
    return FALSE;
  *s = so;
  return TRUE;
}

/* Spec A.3 downsample2d / downsample3d (encoder; never sharded). */
static gboolean
down_block (VaeCtx * ctx, const VaeLayer * l, int li, VaeShape * s, int *slot,
    GError ** error)
{
  const int64_t C = s->c, t = s->t, h = s->h, W = s->w;
  const int64_t ho = (h + 1 - 3) / 2 + 1, wo = (W + 1 - 3) / 2 + 1;
  const LbOps *ops = lb_ops (ctx->stream);
  LbTensor x, p, y, in;
  VaeShape sy = { C, t, ho, wo };
  view_x (ctx, &x, ctx->bx, s);
  view_x (ctx, &y, ctx->by, &sy);
  need (&ctx->need_p, C * t * (h + 1) * (W + 1));
  if (!ctx->plan) {
    /* zero pad right and bottom only (spec C.4), then 3x3 stride 2 */
    vae_view4 (&p, ctx->bp, C, t, h + 1, W + 1);
    LbTensor edge;
    lb_tensor_view_narrow (&in, &p, 2, 0, h);
    lb_tensor_view_narrow (&in, &in, 3, 0, W);
    lb_tensor_view_narrow (&edge, &p, 2, h, 1);
    if (!ops->copy (ctx->stream, &x, &in, error)
        || !ops->fill (ctx->stream, &edge, 0.f, error))
      return FALSE;
    lb_tensor_view_narrow (&edge, &p, 3, W, 1);
    if (!ops->fill (ctx->stream, &edge, 0.f, error)
        || !conv_run (ctx, &l->a, &p, NULL, 0, 0, 2, &y, error))
      return FALSE;
  }
  if (!l->has_time) {
    swap_xy (ctx);
    *s = sy;
    return TRUE;
  }

  LbTensor *cache = cache_slot (ctx, (*slot)++, C, 1, ho, wo, error);
  if (cache == NULL)
    return FALSE;
  LbTensor last;
  if (!ctx->plan && !ctx->started[li]) {
    /* first call: keep the last frame, pass the frames through */
    ctx->started[li] = TRUE;
    ctx->changed = TRUE;
    lb_tensor_view_narrow (&last, &y, 1, t - 1, 1);
    if (!ops->copy (ctx->stream, &last, cache, error))
      return FALSE;
    swap_xy (ctx);
    *s = sy;
    return TRUE;
  }
  if (t % 2 != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "%s: temporal downsample needs an even frame count, got "
        "%" G_GINT64_FORMAT, l->name, t);
    return FALSE;
  }
  /* time_conv (3,1,1) stride 2 over [cached, new frames]: a stride-1
   * causal conv with the 1-frame cache (one zero frame in front) whose odd
   * outputs are the stride-2 ones */
  VaeShape so = { C, t / 2, ho, wo };
  LbTensor z, xo;
  need (&ctx->need_p, C * t * ho * wo);
  view_x (ctx, &xo, ctx->bx, &so);
  if (ctx->plan) {
    *s = so;
    return TRUE;
  }
  vae_view4 (&z, ctx->bp, C, t, ho, wo);
  if (!conv_run (ctx, &l->b, &y, cache, 0, 0, 1, &z, error))
    return FALSE;
  lb_tensor_view_narrow (&last, &y, 1, t - 1, 1);
  if (!track_change (ctx, cache, &last, error))
    return FALSE;
  LbTensor z5, odd;
  lb_tensor_view_reshape (&z5, &z, 5, (int64_t[5]) { C, t / 2, 2, ho, wo });
  lb_tensor_view_select (&odd, &z5, 2, 1);
  if (!ops->copy (ctx->stream, &last, cache, error)
      || !ops->copy (ctx->stream, &odd, &xo, error))
    return FALSE;
  *s = so;
  return TRUE;
}

/* Before step @i of @n of a forward (not while planning): the context's
 * step function, which may stop the walk. */
static inline gboolean
step (VaeCtx * ctx, int i, int n, GError ** error)
{
  return ctx->plan || ctx->step_func == NULL
      || ctx->step_func (ctx->step_data, i, n, error);
}

/**
 * vae_net_forward:
 * @ctx: the rank's context
 * @net: encoder or decoder trunk
 * @x_in: [Cin, t, h, W] input frames of this band (any strides; ignored
 *   when planning)
 * @s: (inout): on input the shape of @x_in; on output the shape of the
 *   result, which is in ctx->bx
 *
 * conv_in -> layers -> head (RMS, SiLU, conv), caches updated in execution
 * order (the slot counter restarts at every call, spec A.5).  Before each
 * of these n_layers + 2 steps, ctx->step_func when set: its FALSE stops
 * the walk (the caches of the steps run are then updated, the others not).
 */
gboolean
vae_net_forward (VaeCtx * ctx, const VaeNet * net, const LbTensor * x_in,
    VaeShape * s, GError ** error)
{
  int slot = 0;
  const int n_steps = net->n_layers + 2;
  LbTensor x, xin;
  VaeShape so = { net->conv_in.cout, s->t, s->h, s->w };
  if (ctx->plan)                /* only the shape is read when planning */
    lb_tensor_view_init (&xin, LB_DTYPE_F32, NULL, LB_DEVICE_HOST, 4,
        (int64_t[4]) { s->c, s->t, s->h, s->w }, NULL);
  else
    lb_tensor_view (&xin, x_in);
  view_x (ctx, &x, ctx->bx, &so);
  if (!step (ctx, 0, n_steps, error)
      || !pad_conv_cached (ctx, &xin, NULL, &net->conv_in, slot++, &x, error))
    return FALSE;
  *s = so;

  for (int i = 0; i < net->n_layers; i++) {
    const VaeLayer *l = &net->layers[i];
    gboolean ok = TRUE;
    if (!step (ctx, 1 + i, n_steps, error))
      return FALSE;
    switch (l->kind) {
      case VAE_LAYER_RES:
        ok = res_block (ctx, l, s, &slot, error);
        break;
      case VAE_LAYER_ATTN:
        ok = attn_block (ctx, l, s, error);
        break;
      case VAE_LAYER_UP2D:
      case VAE_LAYER_UP3D:
        ok = up_block (ctx, l, i, s, &slot, error);
        break;
      case VAE_LAYER_DOWN2D:
      case VAE_LAYER_DOWN3D:
        ok = down_block (ctx, l, i, s, &slot, error);
        break;
    }
    if (!ok)
      return FALSE;
  }

  so = (VaeShape) { net->head.cout, s->t, s->h, s->w };
  LbTensor y;
  view_x (ctx, &x, ctx->bx, s);
  view_x (ctx, &y, ctx->by, &so);
  if (!step (ctx, n_steps - 1, n_steps, error)
      || !pad_conv_cached (ctx, &x, &net->head_gamma, &net->head, slot++, &y,
          error))
    return FALSE;
  swap_xy (ctx);
  *s = so;
  return TRUE;
}

/**
 * vae_ctx_choose_conv_inputs:
 * @ctx: a context whose stream is set (and its math mode)
 *
 * Sets ctx->in16 (a decoder calls it before vae_ctx_plan()): asks the
 * stream's backend for the extra "lingbot_backend_conv_input_bf16"
 * (lb_backend_get_proc(): CUDA answers %TRUE on a bf16 or fp8 stream with
 * LINGBOT_CUDA_CONV_LAYOUT=ndhwc); the CPU backend has no extras, so the
 * CPU keeps its f32 NCDHW buffers.  LINGBOT_VAE_CONV_INPUT overrides the
 * answer: "f32" turns the path off, "bf16" turns it on for any backend
 * (the CPU ops take bf16 channels-last conv inputs too), and "round"
 * keeps f32 NCDHW but rounds the same conv inputs to bf16 values in place
 * (ctx->round16): the path's values through none of its layout, its
 * caches or its bf16 halo rows, which makes it the path's oracle.  Another
 * value warns once and is ignored.
 */
void
vae_ctx_choose_conv_inputs (VaeCtx * ctx)
{
  const char *env = g_getenv ("LINGBOT_VAE_CONV_INPUT");
  static gsize warned;
  if (env && *env && g_strcmp0 (env, "f32") != 0 && g_strcmp0 (env,
          "bf16") != 0 && g_strcmp0 (env, "round") != 0
      && g_once_init_enter (&warned)) {
    g_warning ("LINGBOT_VAE_CONV_INPUT is \"%s\", not f32, bf16 or round: "
        "ignored (the backend chooses)", env);
    g_once_init_leave (&warned, 1);
  }
  ctx->round16 = g_strcmp0 (env, "round") == 0;
  if (g_strcmp0 (env, "f32") == 0 || ctx->round16) {
    ctx->in16 = FALSE;
    return;
  }
  if (g_strcmp0 (env, "bf16") == 0) {
    ctx->in16 = TRUE;
    return;
  }
  typedef gboolean (*ConvInputBf16) (LbStream * s);
  ConvInputBf16 f = (ConvInputBf16) lb_backend_get_proc (ctx->stream->backend,
      "lingbot_backend_conv_input_bf16");
  ctx->in16 = f != NULL && f (ctx->stream);
}

/**
 * vae_ctx_plan:
 *
 * Walks @net once in planning mode for a steady-state call (every resample
 * past its first call) on a [cin, t, rows, width] input: creates the cache
 * slots (zeroed by vae_ctx_reset()) and records scratch sizes.
 */
gboolean
vae_ctx_plan (VaeCtx * ctx, const VaeNet * net, int64_t cin, int64_t t,
    int64_t rows, int64_t width, GError ** error)
{
  if (ctx->caches == NULL)
    ctx->caches
        = g_ptr_array_new_with_free_func ((GDestroyNotify) lb_tensor_free);
  if (ctx->started == NULL) {
    ctx->n_layers = net->n_layers;
    ctx->started = g_new0 (gboolean, net->n_layers);
  }
  ctx->plan = TRUE;
  VaeShape s = { cin, t, rows, width };
  gboolean ok = vae_net_forward (ctx, net, NULL, &s, error);
  ctx->plan = FALSE;
  return ok;
}

static LbTensor *
alloc_flat (VaeCtx * ctx, int64_t n, GError ** error)
{
  int64_t shape[1] = { MAX (n, 1) };
  return lb_tensor_new_on (ctx->stream, LB_DTYPE_F32, 1, shape, error);
}

/**
 * vae_ctx_alloc:
 * @extra_x: minimum capacity of the bx/by/bp buffers (the caller's own use)
 *
 * Allocates the scratch recorded by vae_ctx_plan() and zeroes the caches.
 */
gboolean
vae_ctx_alloc (VaeCtx * ctx, int64_t extra_x, GError ** error)
{
  need (&ctx->need_x, extra_x);
  need (&ctx->need_p, extra_x);
  if (!(ctx->bx = alloc_flat (ctx, ctx->need_x, error))
      || !(ctx->by = alloc_flat (ctx, ctx->need_x, error))
      || !(ctx->bp = alloc_flat (ctx, ctx->need_p, error))
      || !(ctx->bu = alloc_flat (ctx, ctx->need_u, error)))
    return FALSE;
  if (ctx->need_p16 > 0) {
    int64_t shape[1] = { ctx->need_p16 };
    if (!(ctx->bp16 = lb_tensor_new_on (ctx->stream, LB_DTYPE_BF16, 1, shape,
                error)))
      return FALSE;
  }
  ctx->halo_cap = ctx->need_halo;
  if (ctx->halo_cap > 0
      && (!(ctx->halo_send = alloc_flat (ctx, 2 * ctx->halo_cap, error))
          || !(ctx->halo_recv = alloc_flat (ctx, 2 * ctx->halo_cap, error))))
    return FALSE;
  if (ctx->need_attn_l > 0) {
    gboolean sharded = ctx->rank != NULL && ctx->n_ranks > 1;
    if (!(ctx->xn_local = alloc_flat (ctx, ctx->need_attn_l, error))
        || (sharded
            && !(ctx->xn_full = alloc_flat (ctx, ctx->need_attn_f, error)))
        || !(ctx->akv = alloc_flat (ctx, 3 * ctx->need_attn_f, error))
        || !(ctx->ao = alloc_flat (ctx, ctx->need_attn_l, error))
        || !(ctx->ar = alloc_flat (ctx, ctx->need_attn_l, error)))
      return FALSE;
  }
  if (ctx->stream->backend->device_type != LB_DEVICE_CPU && ctx->need_cmp > 0) {
    int64_t shape[1] = { 2 * ctx->need_cmp };
    if (!(ctx->cmp_dev = alloc_flat (ctx, 2 * ctx->need_cmp, error)))
      return FALSE;
    if (!(ctx->cmp_host = lb_tensor_try_new (LB_DTYPE_F32, 1, shape, error))) {
      g_prefix_error (error, "VAE: compare host copy of %" G_GINT64_FORMAT
          " floats: ", shape[0]);
      return FALSE;
    }
  }
  return vae_ctx_reset (ctx, error);
}

/**
 * vae_ctx_upload_latent_consts:
 * @vae: the model whose mean / inv_std the session uses
 *
 * Copies the 16 latent means and float32 reciprocal stds onto the
 * context's device (ctx->mean, ctx->inv_std, [16] each), once per session,
 * for the latent_affine op.
 */
gboolean
vae_ctx_upload_latent_consts (VaeCtx * ctx, const LingbotVae * vae,
    GError ** error)
{
  int64_t shape[1] = { VAE_Z_DIM };
  LbTensor hm, hs;
  lb_tensor_view_init (&hm, LB_DTYPE_F32, (void *) vae->mean, LB_DEVICE_HOST, 1,
      shape, NULL);
  lb_tensor_view_init (&hs, LB_DTYPE_F32, (void *) vae->inv_std, LB_DEVICE_HOST,
      1, shape, NULL);
  if (!(ctx->mean =
          lb_tensor_new_on (ctx->stream, LB_DTYPE_F32, 1, shape, error))
      || !(ctx->inv_std =
          lb_tensor_new_on (ctx->stream, LB_DTYPE_F32, 1, shape, error)))
    return FALSE;
  return lb_tensor_upload (ctx->stream, ctx->mean, &hm, error)
      && lb_tensor_upload (ctx->stream, ctx->inv_std, &hs, error)
      && ctx->stream->backend->stream_synchronize (ctx->stream, error);
}

/**
 * vae_ctx_reset:
 *
 * Starts a new stream: zero history in every cache slot (the backend's
 * fill op, so the slots may live on a device), every resample back to its
 * first call.
 *
 * Returns: %FALSE when a fill failed (only on a device error).
 */
gboolean
vae_ctx_reset (VaeCtx * ctx, GError ** error)
{
  gboolean ok = TRUE;
  for (guint i = 0; ok && ctx->caches && i < ctx->caches->len; i++) {
    LbTensor *t = g_ptr_array_index (ctx->caches, i);
    ok = lb_ops (ctx->stream)->fill (ctx->stream, t, 0.f, error);
  }
  if (ctx->started)
    memset (ctx->started, 0, sizeof (gboolean) * ctx->n_layers);
  ctx->halo_bytes = 0;
  ctx->halo_us = 0;
  ctx->changed = FALSE;
  return ok;
}

gsize
vae_ctx_cache_bytes (VaeCtx * ctx)
{
  gsize n = 0;
  for (guint i = 0; ctx->caches && i < ctx->caches->len; i++)
    n += lb_tensor_nbytes (g_ptr_array_index (ctx->caches, i));
  return n;
}

void
vae_ctx_clear (VaeCtx * ctx)
{
  LbTensor **bufs[] = { &ctx->bx, &ctx->by, &ctx->bp, &ctx->bp16, &ctx->bu,
    &ctx->halo_send,
    &ctx->halo_recv, &ctx->xn_local, &ctx->xn_full, &ctx->akv, &ctx->ao,
    &ctx->ar, &ctx->cmp_dev, &ctx->cmp_host, &ctx->mean, &ctx->inv_std
  };
  for (guint i = 0; i < G_N_ELEMENTS (bufs); i++)
    g_clear_pointer (bufs[i], lb_tensor_free);
  g_clear_pointer (&ctx->caches, g_ptr_array_unref);
  g_clear_pointer (&ctx->started, g_free);
}

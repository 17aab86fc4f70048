/* lingbot-gst: a tensor channel flow between device ranks, shared by the
 * emulated-device test (tests/comm/test-channel-device.c) and the CUDA one
 * (tests/gpu/test-channel-cuda.c)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Producer ranks upload each message's band and (with @slow > 0) rework it
 * in place with @slow doubling ops before committing; consumer ranks copy
 * the band they receive (the copy op: a hand-over of a strict sub-band is
 * a strided view) into a private device buffer, ack at once, and
 * only then download and check the copy.  Nothing in between synchronises
 * the host, so on a real device the values are right only if the channel
 * orders the producer's writes before the consumer's copy (commit event)
 * and the consumer's copy before the producer's next write into the slot
 * (ack event, with one slot).
 */
#pragma once

#include "comm-test-util.h"

#include <math.h>

typedef struct
{
  LbChannel *ch;
  int n_messages;
  int64_t shape[4];             /* [C, T, H, W], sharded by H (dim 2) */
  int slow;                     /* doubling ops per message on the band */
  gint syncs;                   /* stream synchronisations by this code */
} DevFlow;

/* The value of element (c, t, h, w) of message m: exact in f32. */
static inline float
dev_flow_elem (int m, int64_t c, int64_t t, int64_t h, int64_t w)
{
  return (float) ((m % 97) * 100000 + c * 20000 + t * 5000 + h * 64 + w);
}

/* First row of @rank's band on the given side of the plan. */
static inline int64_t
dev_flow_row0 (LbChannel * ch, int rank, gboolean producer)
{
  int n_pieces;
  const LbChannelPiece *plan = lb_channel_get_plan (ch, &n_pieces);
  int64_t h0 = G_MAXINT64;
  for (int i = 0; i < n_pieces; i++)
    if ((producer ? plan[i].src_rank : plan[i].dst_rank) == rank)
      h0 = MIN (h0, plan[i].row_start);
  return h0;
}

static inline gboolean
dev_flow_produce (LbRank * rank, gpointer data, GError ** error)
{
  DevFlow *f = data;
  LbStream *s = rank->stream;
  const float down = ldexpf (1.0f, -f->slow);
  GPtrArray *hosts = g_ptr_array_new_with_free_func (
      (GDestroyNotify) lb_tensor_free);
  gboolean ok = TRUE;
  for (int m = 0; ok && m < f->n_messages; m++) {
    LbTensor band;
    if (!lb_channel_acquire (f->ch, rank, &band, error)) {
      ok = FALSE;
      break;
    }
    const int64_t h0 = dev_flow_row0 (f->ch, rank->rank, TRUE);
    /* one host buffer per message: an upload reads it asynchronously */
    LbTensor *h = lb_tensor_new (LB_DTYPE_F32, 4, band.shape);
    g_ptr_array_add (hosts, h);
    float *p = h->data;
    for (int64_t c = 0; c < band.shape[0]; c++)
      for (int64_t t = 0; t < band.shape[1]; t++)
        for (int64_t r = 0; r < band.shape[2]; r++)
          for (int64_t w = 0; w < band.shape[3]; w++)
            *p++ = dev_flow_elem (m, c, t, h0 + r, w) * down;
    ok = lb_tensor_upload (s, &band, h, error);
    for (int k = 0; ok && k < f->slow; k++)
      ok = lb_ops (s)->scale (s, &band, 2.0f, 0.0f, &band, error);
    ok = ok && lb_channel_commit (f->ch, rank, error);
  }
  if (s->backend->stream_synchronize (s, ok ? error : NULL))
    g_atomic_int_inc (&f->syncs);
  else
    ok = FALSE;
  g_ptr_array_unref (hosts);
  return ok;
}

static inline gboolean
dev_flow_consume (LbRank * rank, gpointer data, GError ** error)
{
  DevFlow *f = data;
  LbStream *s = rank->stream;
  const int64_t h0 = dev_flow_row0 (f->ch, rank->rank, FALSE);
  g_autoptr (LbTensor) mine = NULL;
  g_autoptr (LbTensor) host = NULL;
  for (int m = 0; m < f->n_messages; m++) {
    LbTensor band;
    if (!lb_channel_receive (f->ch, rank, &band, error))
      return FALSE;
    if (mine == NULL) {
      if (!(mine = lb_tensor_new_on (s, LB_DTYPE_F32, 4, band.shape, error)))
        return FALSE;
      host = lb_tensor_new (LB_DTYPE_F32, 4, band.shape);
    }
    /* the copy op: a hand-over of a strict sub-band is a strided view */
    if (!lb_ops (s)->copy (s, &band, mine, error) ||
        !lb_channel_ack (f->ch, rank, error) ||
        !lb_tensor_download (s, host, mine, error))
      return FALSE;
    g_atomic_int_inc (&f->syncs);       /* the download waits */
    const float *p = host->data;
    for (int64_t c = 0; c < band.shape[0]; c++)
      for (int64_t t = 0; t < band.shape[1]; t++)
        for (int64_t r = 0; r < band.shape[2]; r++)
          for (int64_t w = 0; w < band.shape[3]; w++, p++)
            RCHECK (*p == dev_flow_elem (m, c, t, h0 + r, w),
                "message %d rank %d at (%d,%d,%d,%d): %g: ", m, rank->rank,
                (int) c, (int) t, (int) (h0 + r), (int) w, (double) *p);
  }
  return TRUE;
}

/* A channel of @f's shape between @prod and @cons (rows NULL: even). */
static inline LbChannel *
dev_flow_channel (DevFlow * f, LbWorkerGroup * prod, LbWorkerGroup * cons,
    const int64_t * prod_rows, const int64_t * cons_rows, int n_slots,
    LbChannelFlags flags)
{
  LbChannelConfig cfg = {
    .producer = prod,.consumer = cons,.dtype = LB_DTYPE_F32,.ndim = 4,
    .shard_dim = 2,.producer_rows = prod_rows,.consumer_rows = cons_rows,
    .n_slots = n_slots,.flags = flags,.name = "device-test",
  };
  memcpy (cfg.shape, f->shape, sizeof f->shape);
  GError *err = NULL;
  LbChannel *ch = lb_channel_new (&cfg, &err);
  g_assert_no_error (err);
  g_assert_nonnull (ch);
  f->ch = ch;
  return ch;
}

/* A group of @n ranks of @be on @ordinals. */
static inline LbWorkerGroup *
dev_flow_group (LbBackend * be, int n, const int *ordinals, const char *name)
{
  GError *err = NULL;
  LbWorkerGroupOptions opts = {.timeout_ms = 60000,.name = name };
  LbWorkerGroup *g = lb_worker_group_new (be, n, ordinals, &opts, &err);
  g_assert_no_error (err);
  g_assert_nonnull (g);
  return g;
}

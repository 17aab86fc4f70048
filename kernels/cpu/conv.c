/* lingbot-gst: CPU convolutions (causal 3-D with cache, 2-D)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Both ops share one core: for each output frame and each block of output
 * rows, the receptive fields are unfolded (im2col) into a [K, rows*W']
 * matrix in the calling thread's scratch buffer (lb_cpu_scratch(), filled
 * by OpenMP threads), and one lb_cpu_sgemm() multiplies the weight matrix
 * [Cout, K] (K = Cin*kt*kh*kw, the weight's own row-major layout) into
 * the output block, whose channel rows are `y_channel_stride` apart: each
 * output pixel is a column of that product, computed in an order that does
 * not depend on the other columns, so a band of rows (a rank's) or a block
 * of them gets the bits of the whole frame.
 * Blocks are sized so the unfolded matrix stays under a scratch limit
 * (4 Mi floats by default), so memory does not grow with the frame size.
 * 1x1 convolutions with stride 1 skip the unfold and multiply the input
 * frames directly.
 *
 * Stride-1 convolutions with few output channels (the CPU demo's decoder
 * at width 8) run a direct variant instead (conv-item.h, per ISA): the kt
 * input frames' rows of a block of output rows are copied once into a
 * zero-padded block, and register tiles of output channels x pixels run
 * over every input channel and tap; sgemm on a [K, pixels] unfold with
 * 8-16 output rows is far from its rate.
 */
#include "kernels/cpu/cpu-internal.h"

#include <string.h>

#define DEFAULT_SCRATCH_LIMIT ((gsize) 4 << 20)

static gsize scratch_limit = DEFAULT_SCRATCH_LIMIT;

/**
 * lb_cpu_conv_set_scratch_limit:
 * @n_floats: the most floats one unfolded block may take, or 0 for the
 *   default (4 Mi floats = 16 MiB)
 *
 * Lets tests force several row blocks per frame.  At least one output row
 * is always unfolded at a time, whatever the limit.  Process-wide.
 */
void
lb_cpu_conv_set_scratch_limit (gsize n_floats)
{
  scratch_limit = n_floats ? n_floats : DEFAULT_SCRATCH_LIMIT;
}

/* -1 by shape, 0 never, 1 whenever the shape allows */
static int direct_mode = -1;

/**
 * lb_cpu_conv_set_direct:
 * @mode: -1 to choose by shape (the default), 0 for im2col + sgemm always,
 *   1 for the direct variant wherever it applies (stride 1)
 *
 * Lets tests and lingbot-bench ops run both variants of the stride-1
 * convolutions.  Process-wide; not while another thread runs a conv.
 */
void
lb_cpu_conv_set_direct (int mode)
{
  direct_mode = CLAMP (mode, -1, 1);
}

static inline const float *
frame_ptr (const LbConvIn * c, int64_t v, int64_t ci)
{
  if (v < c->zeros)
    return NULL;
  v -= c->zeros;
  if (v < c->cache_t)
    return c->cache + ci * c->cache_cs + v * c->cache_fs;
  v -= c->cache_t;
  return c->x + ci * c->x_cs + v * c->x_fs;
}

/* Unfolds output rows [r0, r0 + nr) of output frame t into col [K][nr*wo]. */
static void
im2col (const LbConvIn * c, int64_t t, int64_t r0, int64_t nr, float *col)
{
  const int64_t taps = c->kt * c->kh * c->kw, kdim = c->cin * taps;
  const int64_t ncols = nr * c->wo;

#pragma omp parallel for schedule(static) if (kdim * ncols >= 65536)
  for (int64_t k = 0; k < kdim; k++) {
    int64_t ci = k / taps, rem = k % taps;
    int64_t dt = rem / (c->kh * c->kw), dy = (rem / c->kw) % c->kh;
    int64_t dx = rem % c->kw;
    const float *src = frame_ptr (c, t + dt, ci);
    float *dst = col + k * ncols;
    /* output columns whose input column is inside the frame */
    int64_t lo = 0, hi = c->wo;
    while (lo < hi && lo * c->sw - c->pw + dx < 0)
      lo++;
    while (hi > lo && (hi - 1) * c->sw - c->pw + dx >= c->w)
      hi--;
    for (int64_t r = 0; r < nr; r++) {
      float *d = dst + r * c->wo;
      int64_t ih = (r0 + r) * c->sh - c->ph + dy;
      if (src == NULL || ih < 0 || ih >= c->h || lo >= hi) {
        memset (d, 0, c->wo * sizeof (float));
        continue;
      }
      const float *srow = src + ih * c->w;
      for (int64_t o = 0; o < lo; o++)
        d[o] = 0.0f;
      if (c->sw == 1) {
        memcpy (d + lo, srow + lo - c->pw + dx, (hi - lo) * sizeof (float));
      } else {
        for (int64_t o = lo; o < hi; o++)
          d[o] = srow[o * c->sw - c->pw + dx];
      }
      for (int64_t o = hi; o < c->wo; o++)
        d[o] = 0.0f;
    }
  }
}

/* ---- the direct variant (conv-item.h) ---- */

/* One block of output rows of one output frame: what a tile reads. */
typedef struct
{
  int64_t cin, kt, kh, kw, wo, cout;
  /* the padded input block [cin][kt][rows][wp]: row ry of tap frame dt is
   * input row r0 - pad_h + ry, with pad_w zero columns in front and zeros
   * after the frame's columns up to wp */
  const float *pad;
  int64_t rows, wp;
  const float *wpack, *bias;
  /* output channel 0 of the block's first row; channels y_cs apart */
  float *y;
  int64_t y_cs;
} DirectArgs;

typedef struct
{
  int cob;                      /* output channels per tile */
  int max_cout;                 /* chosen by shape up to this many */
  int slack;                    /* columns a tile may read past a row */
  void (*pack) (const float *w, int64_t cout, int64_t cin, int64_t taps,
      float *wpack);
  void (*row) (const DirectArgs * a, int64_t rr, int64_t cob);
} ConvDirect;

#define VW 4
#define CONV_COB 4
#define CONV_NPV 2
#define CONV_MAX_COUT 0
#define CONV_FN(name) direct_baseline_##name
#define CONV_TARGET
#define CONV_TABLE direct_baseline
#define VFMA(a, b, c) LB_CPU_FMA_BASELINE (VF, a, b, c)
#include "kernels/cpu/conv-item.h"

#if LB_CPU_HAVE_X86_ISAS
#define VW 8
#define CONV_COB 6
#define CONV_NPV 2
#define CONV_MAX_COUT 16
#define CONV_FN(name) direct_avx2_##name
#define CONV_TARGET LB_CPU_TARGET_AVX2
#define CONV_TABLE direct_avx2
#define VFMA(a, b, c) LB_CPU_FMA_AVX2 (VF, a, b, c)
#include "kernels/cpu/conv-item.h"

#define VW 16
#define CONV_COB 8
#define CONV_NPV 2
#define CONV_MAX_COUT 16
#define CONV_FN(name) direct_avx512_##name
#define CONV_TARGET LB_CPU_TARGET_AVX512
#define CONV_TABLE direct_avx512
#define VFMA(a, b, c) LB_CPU_FMA_AVX512 (VF, a, b, c)
#include "kernels/cpu/conv-item.h"
#endif

static const ConvDirect *
direct_for_isa (LbCpuIsa isa)
{
#if LB_CPU_HAVE_X86_ISAS
  if (isa >= LB_CPU_ISA_AVX512)
    return &direct_avx512;
  if (isa >= LB_CPU_ISA_AVX2)
    return &direct_avx2;
#endif
  (void) isa;
  return &direct_baseline;
}

/* The direct variant applies to stride 1; by shape it is chosen for at
 * most the variant's max_cout output channels (docs/performance.md, "The
 * VAE convolutions": the baseline's tiles, without FMA, never win),
 * whatever the number of rows, so every rank of a sharded decode takes
 * the same variant. */
static gboolean
use_direct (const LbConvIn * c, int64_t cout)
{
  if (c->sh != 1 || c->sw != 1 || direct_mode == 0)
    return FALSE;
  return direct_mode == 1 || cout <= direct_for_isa (lb_cpu_isa ())->max_cout;
}

/* The direct variant for stride 1 and few output channels (see
 * lb_cpu_conv_set_direct()): per output frame and block of output rows,
 * the kt input frames' rows are copied once into a zero-padded block (the
 * calling thread's scratch, read by the whole team), then register tiles
 * of (output channels x 2 vectors of pixels) run over every input channel
 * and tap.  No im2col: the block is kt times the input rows, not
 * kt*kh*kw times. */
static void
direct_core (const LbConvIn * c, const float *w, const float *bias,
    int64_t cout, int64_t tout, float *y, int64_t y_cs, int64_t y_fs)
{
  const ConvDirect *d = direct_for_isa (lb_cpu_isa ());
  const int64_t cin = c->cin, kt = c->kt, kh = c->kh, kw = c->kw;
  const int64_t taps = kt * kh * kw, ncob = (cout + d->cob - 1) / d->cob;
  float *wpack = lb_cpu_scratch_slot (1, (gsize) (ncob * d->cob * cin * taps));
  d->pack (w, cout, cin, taps, wpack);

  const int64_t wp = c->w + 2 * c->pw + d->slack;
  const gsize per_row = (gsize) (cin * kt * wp);
  const int64_t nr = CLAMP ((int64_t) (scratch_limit / per_row) - (kh - 1),
      1, c->ho);
  float *pad = lb_cpu_scratch (per_row * (gsize) (nr + kh - 1));

  DirectArgs a = {
    .cin = cin,.kt = kt,.kh = kh,.kw = kw,.wo = c->wo,.cout = cout,
    .pad = pad,.wp = wp,.wpack = wpack,.bias = bias,.y_cs = y_cs,
  };
  for (int64_t t = 0; t < tout; t++) {
    for (int64_t r0 = 0; r0 < c->ho; r0 += nr) {
      const int64_t rows = MIN (nr, c->ho - r0), prow = rows + kh - 1;
      const int64_t nfill = cin * kt * prow;
#pragma omp parallel for schedule(static) if (nfill * wp >= 65536)
      for (int64_t i = 0; i < nfill; i++) {
        const int64_t ry = i % prow, dt = (i / prow) % kt, ci = i / (prow * kt);
        const float *src = frame_ptr (c, t + dt, ci);
        const int64_t ih = r0 - c->ph + ry;
        float *dst = pad + i * wp;
        if (src == NULL || ih < 0 || ih >= c->h) {
          memset (dst, 0, sizeof (float) * (gsize) wp);
          continue;
        }
        memset (dst, 0, sizeof (float) * (gsize) c->pw);
        memcpy (dst + c->pw, src + ih * c->w, sizeof (float) * (gsize) c->w);
        memset (dst + c->pw + c->w, 0, sizeof (float) * (gsize) (wp - c->pw -
                c->w));
      }
      a.rows = prow;
      a.y = y + t * y_fs + r0 * c->wo;
      const int64_t items = rows * ncob;
#pragma omp parallel for schedule(static) if (items > 1 && \
    items * c->wo * cin * taps >= 65536)
      for (int64_t i = 0; i < items; i++)
        d->row (&a, i / ncob, i % ncob);
    }
  }
}

/* y rows: co*y_cs + t*y_fs + row*wo + col, for t < tout. */
static void
conv_core (const LbConvIn * c, const float *w, const float *bias, int64_t cout,
    int64_t tout, float *y, int64_t y_cs, int64_t y_fs)
{
  const int64_t kdim = c->cin * c->kt * c->kh * c->kw;
  const int64_t plane = c->ho * c->wo;
  if (cout == 0 || plane == 0 || tout == 0)
    return;
  const gboolean direct = c->kt == 1 && c->kh == 1 && c->kw == 1 &&
      c->sh == 1 && c->sw == 1 && c->ph == 0 && c->pw == 0;
  if (!direct && kdim > 0 && use_direct (c, cout)) {
    direct_core (c, w, bias, cout, tout, y, y_cs, y_fs);
    return;
  }
  int64_t nr = c->ho;
  float *col = NULL;
  if (!direct && kdim > 0) {
    gsize per_row = (gsize) kdim * (gsize) c->wo;
    nr = CLAMP ((int64_t) (scratch_limit / MAX (per_row, 1)), 1, c->ho);
    col = lb_cpu_scratch (per_row * nr);
  }

  for (int64_t t = 0; t < tout; t++) {
    for (int64_t r0 = 0; r0 < c->ho; r0 += nr) {
      const int64_t rows = MIN (nr, c->ho - r0), ncols = rows * c->wo;
      float *yb = y + t * y_fs + r0 * c->wo;
      for (int64_t co = 0; co < cout; co++) {
        float *yr = yb + co * y_cs;
        float b = bias ? bias[co] : 0.0f;
        for (int64_t e = 0; e < ncols; e++)
          yr[e] = b;
      }
      if (kdim == 0)
        continue;
      const float *bmat;
      int64_t ldb;
      if (direct) {
        const float *src = frame_ptr (c, t, 0);
        if (src == NULL)
          continue;             /* a zero frame adds nothing */
        bmat = src + r0 * c->wo;
        ldb = t < c->zeros + c->cache_t ? c->cache_cs : c->x_cs;
      } else {
        im2col (c, t, r0, rows, col);
        bmat = col;
        ldb = ncols;
      }
      lb_cpu_sgemm (w, kdim, bmat, FALSE, ldb, cout, ncols, kdim, 1.0f, 1.0f,
          yb, y_cs);
    }
  }
}

/* @dst [C, T, H, W] contiguous f32 = the bf16 view @t (a channels-last
 * conv operand), widened exactly. */
static void
widen_channels_last (const LbTensor * t, float *dst)
{
  const int64_t C = t->shape[0], T = t->shape[1], H = t->shape[2],
      W = t->shape[3];
  const uint16_t *src = t->data;
#pragma omp parallel for schedule(static) if (C * T * H * W >= (1 << 20))
  for (int64_t r = 0; r < T * H; r++) {
    const int64_t f = r / H, h = r % H;
    const uint16_t *row = src + f * t->stride[1] + h * t->stride[2];
    float *out = dst + f * H * W + h * W;
    for (int64_t w = 0; w < W; w++)
      for (int64_t c = 0; c < C; c++)
        out[c * T * H * W + w] =
            lb_bf16_to_f32 (row[w * t->stride[3] + c * t->stride[0]]);
  }
}

/**
 * lb_cpu_conv3d_causal:
 * @s: a CPU stream
 * @x: [Cin, T, H, W], f32 contiguous or bf16 channels-last (strides
 *   [1, H*W*Cin, W*Cin, Cin]; widened exactly into f32 scratch first)
 * @cache: (nullable): [Cin, Tc, H, W] of x's dtype and layout: the frames
 *   that precede @x (a Wan CausalConv3d cache slot holds the last 2 frames
 *   of the conv's own input)
 * @weight: f32 [Cout, Cin, kt, kh, kw] contiguous
 * @bias: (nullable): f32 [Cout]
 * @pad_h: zero rows above and below
 * @pad_w: zero columns left and right
 * @stride_h: vertical stride (>= 1)
 * @stride_w: horizontal stride (>= 1)
 * @y: f32 [Cout, T', H', W'] contiguous, H' = (H + 2 pad_h - kh) / stride_h
 *   + 1, likewise W'
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * Causal 3-D convolution with temporal stride 1 (vae_and_distributed_spec.md
 * A.3, A.5; golden README 5).  The temporal input is
 * `cat(zeros(Z), cache, x)` with Z = max(0, kt - 1 - Tc) zero frames (no
 * cache: kt - 1 zero frames, Wan's 2*pt front padding), so
 * T' = Z + Tc + T - kt + 1; with Tc <= kt - 1 that is T' = T.
 *
 * Returns: %TRUE on success; %FALSE with %LB_ERROR_DEVICE when the f32
 * copy of a bf16 input cannot be allocated.
 */
gboolean
lb_cpu_conv3d_causal (LbStream * s, const LbTensor * x, const LbTensor * cache,
    const LbTensor * weight, const LbTensor * bias, int pad_h, int pad_w,
    int stride_h, int stride_w, LbTensor * y, GError ** error)
{
  LbConvGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "conv3d_causal", error, "x", x,
          "cache", cache, "weight", weight, "bias", bias, "y", y, NULL) ||
      !lb_check_conv3d_causal (x, cache, weight, bias, pad_h, pad_w, stride_h,
          stride_w, y, &g, error))
    return FALSE;

  const float *xd = x->data, *cd = cache ? cache->data : NULL;
  float *wide = NULL;
  if (x->dtype == LB_DTYPE_BF16) {
    /* the oracle of bf16 channels-last operands: their exact f32 values,
     * contiguous, then the f32 core */
    const gsize nx = (gsize) lb_tensor_numel (x);
    const gsize nc = cache ? (gsize) lb_tensor_numel (cache) : 0;
    wide = lb_cpu_scratch_try (nx + nc);
    if (wide == NULL) {
      g_set_error (error, LB_ERROR, LB_ERROR_DEVICE, "conv3d_causal: cannot "
          "allocate %" G_GSIZE_FORMAT " bytes to widen the bf16 input",
          (nx + nc) * sizeof (float));
      return FALSE;
    }
    widen_channels_last (x, wide);
    if (cache)
      widen_channels_last (cache, wide + nx);
    xd = wide;
    cd = cache ? wide + nx : NULL;
  }
  const LbConvIn c =
      lb_conv_input (&g, FALSE, cd, xd, pad_h, pad_w, stride_h, stride_w);
  conv_core (&c, weight->data, bias ? bias->data : NULL, g.cout, g.tout,
      y->data, g.tout * g.ho * g.wo, g.ho * g.wo);
  return TRUE;
}

/**
 * lb_cpu_conv2d:
 * @s: a CPU stream
 * @x: f32 [Cin, H, W] or [B, Cin, H, W], contiguous
 * @weight: f32 [Cout, Cin, kh, kw] contiguous
 * @bias: (nullable): f32 [Cout]
 * @pad_h: zero rows above and below
 * @pad_w: zero columns left and right
 * @stride_h: vertical stride (>= 1)
 * @stride_w: horizontal stride (>= 1)
 * @y: f32 [Cout, H', W'] or [B, Cout, H', W'] (the rank of @x), contiguous
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * Plain 2-D convolution (vae_and_distributed_spec.md A.3: the resample
 * convs, 1x1 attention projections).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_conv2d (LbStream * s, const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, int pad_h, int pad_w, int stride_h, int stride_w,
    LbTensor * y, GError ** error)
{
  LbConvGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "conv2d", error, "x", x,
          "weight", weight, "bias", bias, "y", y, NULL) ||
      !lb_check_conv2d (x, weight, bias, pad_h, pad_w, stride_h, stride_w, y,
          &g, error))
    return FALSE;

  /* batch elements are the "frames" of the core: kt = 1, no cache */
  const LbConvIn c =
      lb_conv_input (&g, TRUE, NULL, x->data, pad_h, pad_w, stride_h, stride_w);
  conv_core (&c, weight->data, bias ? bias->data : NULL, g.cout, g.tout,
      y->data, g.ho * g.wo, g.cout * g.ho * g.wo);
  return TRUE;
}

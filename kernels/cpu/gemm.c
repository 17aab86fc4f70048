/* lingbot-gst: CPU GEMMs
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * f32 weights go through lb_cpu_sgemm(), this file's own register-tiled
 * kernel (gemm-item.h, one variant per ISA): every element of the product
 * is one dot product over K in order, a fused multiply-add per term, so a
 * row of y does not depend on how many rows are computed with it, nor on
 * the thread count.  cblas_sgemm does not promise that: its blocking and
 * its micro-kernels depend on M (OpenBLAS 0.3.21's Haswell sgemm rounds
 * the token rows 6-11 of every 12 in another order than rows 0-5, so a
 * rank holding a band of the tokens got other bits than the whole
 * sequence), on the threads it splits M and N among and on the core type
 * it dispatched to (docs/design.md "Determinism").  A bf16 weight (spec
 * 1.11 storage) is the oracle of the device
 * backends' bf16 GEMM: x is rounded
 * to bf16 and both operands are widened (exactly) to f32 in a per-call
 * scratch, then every output element is one f32 dot product over K in a
 * fixed order (8 interleaved partial sums, combined pairwise), so the
 * result is `bf16(x) . w` accumulated in f32 (kernels/ops.h) and a row of
 * y does not depend on how many rows are computed with it either.  That
 * path allocates on every call and is not tuned: CPU ranks keep f32
 * weights in production, and only tests and the emulated device backend
 * use it.
 *
 * The fp8 gemm (gemm_fp8, kernels/ops.h) is the oracle of the device
 * backends' FP8 GEMM in the same way: each row of x is quantised to E4M3
 * with its own scale (lb_quantize_e4m3_row()) into a per-call scratch,
 * every output is one f32 dot product of the E4M3 values (widened exactly
 * through a 256-entry table) in the bf16 path's fixed order, then scaled
 * by sx[m] and sw[n]; rows stay independent of each other.
 */
#include "kernels/cpu/cpu-internal.h"

#include <string.h>

/* ---- the f32 GEMM (gemm-item.h) ---- */

typedef struct
{
  int mr;                       /* rows per tile */
  int nb;                       /* columns per packed panel */
  void (*pack) (const float *w, gboolean trans_w, int64_t wld, int64_t n,
      int64_t k, int64_t p, float *dst);
  void (*block) (const float *x, int64_t xld, const float *wpack, int64_t n,
      int64_t k, float alpha, float b, float *y, int64_t yld, int64_t r0,
      int64_t r1, int64_t p0, int64_t p1);
} GemmKernel;

#define VW 4
#define GEMM_MR 4
#define GEMM_NV 2
#define GEMM_FN(name) sgemm_baseline_##name
#define GEMM_TARGET
#define GEMM_TABLE sgemm_baseline
#define VFMA(a, b, c) LB_CPU_FMA_BASELINE (VF, a, b, c)
#include "kernels/cpu/gemm-item.h"

#if LB_CPU_HAVE_X86_ISAS
#define VW 8
#define GEMM_MR 6
#define GEMM_NV 2
#define GEMM_FN(name) sgemm_avx2_##name
#define GEMM_TARGET LB_CPU_TARGET_AVX2
#define GEMM_TABLE sgemm_avx2
#define VFMA(a, b, c) LB_CPU_FMA_AVX2 (VF, a, b, c)
#include "kernels/cpu/gemm-item.h"

#define VW 16
#define GEMM_MR 12
#define GEMM_NV 2
#define GEMM_FN(name) sgemm_avx512_##name
#define GEMM_TARGET LB_CPU_TARGET_AVX512
#define GEMM_TABLE sgemm_avx512
#define VFMA(a, b, c) LB_CPU_FMA_AVX512 (VF, a, b, c)
#include "kernels/cpu/gemm-item.h"
#endif

static const GemmKernel *
sgemm_for_isa (LbCpuIsa isa)
{
#if LB_CPU_HAVE_X86_ISAS
  if (isa >= LB_CPU_ISA_AVX512)
    return &sgemm_avx512;
  if (isa >= LB_CPU_ISA_AVX2)
    return &sgemm_avx2;
#endif
  (void) isa;
  return &sgemm_baseline;
}

/* tiles of rows per block of rows a thread takes */
#define SGEMM_BLOCK_TILES 8

/**
 * lb_cpu_sgemm:
 * @x: [m, k] f32, row stride @xld
 * @w: op(w) is [k, n]: w [n, k] when @trans_w, else [k, n]; row stride @wld
 * @trans_w: whether @w is stored transposed
 * @wld: row stride of @w, in floats
 * @m: rows of x and y
 * @n: columns of y
 * @k: the inner dimension, > 0
 * @alpha: scale of the product
 * @b: scale of the previous y (0: y is not read, NaN overwritten)
 * @y: [m, n] f32, row stride @yld
 * @yld: row stride of @y
 *
 * `y = alpha * x . op(w) + b * y` with the f32 kernel of the current ISA
 * (lb_cpu_isa(), gemm-item.h): every element is `alpha * acc (+ b * y)`
 * where acc sums x[i, l] w[l, j] for l = 0 .. k - 1 in order, one fused
 * multiply-add per term (two roundings on the baseline).  Rows and columns
 * are independent: a band of rows (or columns) computed on its own gives
 * the bits of the whole product, under any thread count and OpenBLAS core
 * type.  Threads split the rows in blocks (and a short product's column
 * panels); op(w) is packed in panels into the calling thread's third
 * scratch slot (n k floats, rounded up to a panel).
 */
void
lb_cpu_sgemm (const float *x, int64_t xld, const float *w, gboolean trans_w,
    int64_t wld, int64_t m, int64_t n, int64_t k, float alpha, float b,
    float *y, int64_t yld)
{
  if (m <= 0 || n <= 0 || k <= 0)
    return;
  const GemmKernel *g = sgemm_for_isa (lb_cpu_isa ());
  const int64_t np = (n + g->nb - 1) / g->nb;
  float *wpack = lb_cpu_scratch_slot (2, (gsize) (np * g->nb * k));
#pragma omp parallel for schedule(static) if (n * k >= (1 << 16) && np > 1)
  for (int64_t p = 0; p < np; p++)
    g->pack (w, trans_w, wld, n, k, p, wpack + p * k * g->nb);

  /* items: blocks of rows times groups of panels (several groups only when
   * there are few row blocks); the split changes no element's bits */
  const int64_t rows = (int64_t) g->mr * SGEMM_BLOCK_TILES;
  const int64_t nrb = (m + rows - 1) / rows;
  const int64_t npg = nrb >= 4 ? 1 : MIN (np, 8);
  const int64_t ppg = (np + npg - 1) / npg;
  const int64_t items = nrb * npg;
#pragma omp parallel for schedule(static) if (items > 1 && \
    m * n * k >= (1 << 17))
  for (int64_t it = 0; it < items; it++) {
    const int64_t rb = it / npg, pg = it % npg;
    const int64_t r0 = rb * rows, p0 = pg * ppg;
    if (p0 < np)
      g->block (x, xld, wpack, n, k, alpha, b, y, yld, r0,
          MIN (m, r0 + rows), p0, MIN (np, p0 + ppg));
  }
}

/* op(w)^T of a bf16 @w as a contiguous f32 [n, k] block (K innermost),
 * widened exactly. */
static float *
widen_bf16_nk (const uint16_t * w, gboolean trans_w, int64_t n, int64_t k,
    int64_t wld)
{
  float *dst = g_malloc (MAX (n * k, 1) * sizeof (float));
  for (int64_t j = 0; j < n; j++)
    for (int64_t l = 0; l < k; l++)
      dst[j * k + l] = lb_bf16_to_f32 (trans_w ? w[j * wld + l] :
          w[l * wld + j]);
  return dst;
}

/* The f32 dot product of the bf16 path: lane t of 8 sums the products
 * l = t, t + 8, ... in order, then the lanes are added pairwise. */
static float
dot_f32 (const float *a, const float *b, int64_t k)
{
  float acc[8] = { 0 };
  int64_t l = 0;
  for (; l + 8 <= k; l += 8)
#pragma GCC unroll 8
    for (int t = 0; t < 8; t++)
      acc[t] += a[l + t] * b[l + t];
  for (int t = 0; l + t < k; t++)
    acc[t] += a[l + t] * b[l + t];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
      ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* y = alpha * bf16(x) . op(w) + b * y (b == 0: y is not read) with x
 * [m, k] (row stride xld; f32, or bf16 when @x_bf16: then it is widened
 * as it is, which is what rounding its f32 value would give) and a bf16
 * w; see the file comment. */
static void
gemm_bf16 (const void *x, gboolean x_bf16, int64_t xld, const uint16_t * w,
    gboolean trans_w, int64_t wld, int64_t m, int64_t n, int64_t k,
    float alpha, float b, float *y, int64_t yld)
{
  g_autofree float *xs = g_malloc (MAX (m * k, 1) * sizeof (float));
  g_autofree float *ws = widen_bf16_nk (w, trans_w, n, k, wld);
  const float *x32 = x;
  const uint16_t *x16 = x;
  for (int64_t i = 0; i < m; i++)
    for (int64_t l = 0; l < k; l++)
      xs[i * k + l] = lb_bf16_to_f32 (x_bf16 ? x16[i * xld + l] :
          lb_f32_to_bf16 (x32[i * xld + l]));
#pragma omp parallel for schedule(static) if (m * n * k >= (1 << 18))
  for (int64_t i = 0; i < m; i++) {
    float *row = y + i * yld;
    for (int64_t j = 0; j < n; j++) {
      float v = alpha * dot_f32 (xs + i * k, ws + j * k, k);
      row[j] = b == 0.0f ? v : v + b * row[j];
    }
  }
}

/* The common start of both gemms: y = beta * y + bias when there is a
 * bias (then *b = 1: the product is added to y), else *b = beta.  Returns
 * FALSE when nothing is left to compute (an empty y, K = 0 or alpha = 0:
 * then y = b * y has been applied, b == 0 overwriting NaN too). */
static gboolean
gemm_prologue (const LbGemmGeom * g, const LbTensor * bias, float alpha,
    float beta, float *yd, float *b)
{
  const int64_t m = g->m, n = g->n, yld = g->yld;
  *b = beta;
  if (bias) {
    const float *bd = bias->data;
    for (int64_t i = 0; i < m; i++) {
      float *row = yd + i * yld;
      if (beta == 0.0f)
        memcpy (row, bd, n * sizeof (float));
      else
        for (int64_t j = 0; j < n; j++)
          row[j] = beta * row[j] + bd[j];
    }
    *b = 1.0f;
  }
  if (m == 0 || n == 0)
    return FALSE;
  if (g->k == 0 || alpha == 0.0f) {
    /* nothing to multiply: y = b * y (b == 0 overwrites, NaN included) */
    for (int64_t i = 0; i < m && *b != 1.0f; i++) {
      float *row = yd + i * yld;
      if (*b == 0.0f)
        memset (row, 0, n * sizeof (float));
      else
        for (int64_t j = 0; j < n; j++)
          row[j] *= *b;
    }
    return FALSE;
  }
  return TRUE;
}

/**
 * lb_cpu_gemm:
 * @s: a CPU stream
 * @x: [M, K] float32 (or contiguous [..., K], flattened); bfloat16 with a
 *   bfloat16 @w
 * @w: [N, K] when @trans_w (PyTorch Linear weight) else [K, N], float32 or
 *   bfloat16
 * @trans_w: whether @w is stored transposed
 * @bias: (nullable): [N] float32
 * @alpha: scale of x.w
 * @beta: scale of the previous content of @y (0 ignores it, NaN included)
 * @y: [M, N] float32 output
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *
 * `y = alpha * x . op(w) + beta * y + bias` through lb_cpu_sgemm() (its
 * OpenMP threads; each row of y independent of M, the thread count and the
 * OpenBLAS core type).  With K = 0 or @alpha = 0, x and w are not read
 * (BLAS convention) and y = bias + beta * y.
 *
 * With a bf16 @w: `y = alpha * bf16(x) . op(w) + beta * y + bias`, x
 * rounded to bfloat16 element by element (a bf16 x is taken as it is),
 * products accumulated in f32 in
 * a fixed order per output element, so each row of y is independent of M
 * (kernels/ops.h and the file comment); x and w are widened into scratch
 * allocated by this call (M K + N K floats), which makes it the reference
 * for other backends, not a production path.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_gemm (LbStream * s, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  LbGemmGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "gemm", error, "x", x, "w", w,
          "bias", bias, "y", y, NULL) ||
      !lb_check_gemm (x, w, trans_w, bias, y, &g, error))
    return FALSE;
  const int64_t m = g.m, n = g.n, k = g.k, yld = g.yld;
  const int64_t xld = g.xld, wld = g.wld;

  float *yd = y->data;
  float b;
  if (!gemm_prologue (&g, bias, alpha, beta, yd, &b))
    return TRUE;
  if (w->dtype == LB_DTYPE_BF16) {
    gemm_bf16 (x->data, x->dtype == LB_DTYPE_BF16, xld, w->data, trans_w, wld,
        m, n, k, alpha, b, yd, yld);
    return TRUE;
  }
  lb_cpu_sgemm (x->data, xld, w->data, trans_w, wld, m, n, k, alpha, b, yd,
      yld);
  return TRUE;
}

/* rows of y per block of lb_cpu_gemm_gelu_tanh() with a bf16 y */
#define GELU_BLOCK_ROWS 64

/**
 * lb_cpu_gemm_gelu_tanh:
 * @s: a CPU stream
 * @x: as lb_cpu_gemm()'s
 * @w: as lb_cpu_gemm()'s
 * @trans_w: as lb_cpu_gemm()'s
 * @bias: (nullable): as lb_cpu_gemm()'s
 * @alpha: scale of the product
 * @y: [M, N] f32, or bf16 with a bf16 @w
 * @error: the messages of lb_check_gemm_gelu_tanh()
 *
 * `y = gelu_tanh(alpha * x . op(w) + bias)` (kernels/ops.h): exactly
 * lb_cpu_gemm() with beta 0, then lb_cpu_gelu_tanh().  A bf16 y takes
 * blocks of %GELU_BLOCK_ROWS rows through an f32 block of the calling
 * thread's second scratch slot (a bf16 w's product rows do not depend on
 * the other rows, so the blocks give the whole op's bits).
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_gemm_gelu_tanh (LbStream * s, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, float alpha, LbTensor * y,
    GError ** error)
{
  LbGemmGeom g;
  if (!lb_check_devices (LB_CPU_DEVICE, "gemm_gelu_tanh", error, "x", x, "w",
          w, "bias", bias, "y", y, NULL) ||
      !lb_check_gemm_gelu_tanh (x, w, trans_w, bias, y, &g, error))
    return FALSE;
  if (y->dtype == LB_DTYPE_F32)
    return lb_cpu_gemm (s, x, w, trans_w, bias, alpha, 0.0f, y, error) &&
        lb_cpu_gelu_tanh (s, y, y, error);
  if (g.m == 0 || g.n == 0)
    return TRUE;
  const int64_t rows = MIN (g.m, GELU_BLOCK_ROWS);
  float *blk = lb_cpu_scratch_slot (1, (gsize) (rows * g.n));
  const gsize xes = lb_dtype_size (x->dtype);
  for (int64_t r0 = 0; r0 < g.m; r0 += rows) {
    const int64_t nr = MIN (rows, g.m - r0);
    int64_t xs[2] = { nr, g.k }, xst[2] = { g.xld, 1 };
    int64_t ys[2] = { nr, g.n }, yst[2] = { g.yld, 1 }, fst[2] = { g.n, 1 };
    LbTensor xb, yb, fb;
    lb_tensor_view_init (&xb, x->dtype, (char *) x->data + (gsize) (r0 *
            g.xld) * xes, x->device, 2, xs, xst);
    lb_tensor_view_init (&yb, LB_DTYPE_BF16, (uint16_t *) y->data + r0 *
        g.yld, y->device, 2, ys, yst);
    lb_tensor_view_init (&fb, LB_DTYPE_F32, blk, LB_CPU_DEVICE, 2, ys, fst);
    if (!lb_cpu_gemm (s, &xb, w, trans_w, bias, alpha, 0.0f, &fb, error) ||
        !lb_cpu_gelu_tanh (s, &fb, &yb, error))
      return FALSE;
  }
  return TRUE;
}

/* f32 values of the 256 E4M3 codes (lb_e4m3_to_f32()). */
static const float *
e4m3_table (void)
{
  static float table[256];
  static gsize done = 0;
  if (g_once_init_enter (&done)) {
    for (int c = 0; c < 256; c++)
      table[c] = lb_e4m3_to_f32 ((uint8_t) c);
    g_once_init_leave (&done, 1);
  }
  return table;
}

/* The dot product of two E4M3 code vectors in dot_f32()'s order. */
static float
dot_e4m3 (const uint8_t * a, const uint8_t * b, int64_t k, const float *lut)
{
  float acc[8] = { 0 };
  int64_t l = 0;
  for (; l + 8 <= k; l += 8)
    for (int t = 0; t < 8; t++)
      acc[t] += lut[a[l + t]] * lut[b[l + t]];
  for (int t = 0; l + t < k; t++)
    acc[t] += lut[a[l + t]] * lut[b[l + t]];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
      ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/* Row @i of the fp8 GEMM on quantised x (@xr its [K] codes, @sxi its
 * scale) into @row [N]: `acc` by dot_e4m3(), then
 * `((alpha acc) sxi) sw[j]` plus `b * row[j]` where @b (gemm_prologue()'s
 * beta, the bias already in the row) is not 0. */
static inline void
fp8_row (const LbGemmGeom * g, const uint8_t * xr, float sxi,
    const uint8_t * wd, const float *swd, float alpha, float b, float *row,
    const float *lut)
{
  const int64_t n = g->n, k = g->k;
  for (int64_t j = 0; j < n; j++) {
    const float acc = dot_e4m3 (xr, wd + j * k, k, lut);
    const float v = ((alpha * acc) * sxi) * swd[j];
    row[j] = b == 0.0f ? v : v + b * row[j];
  }
}

/* The rows of the fp8 GEMM on quantised x (@xq [M, K] codes, row stride
 * @xqld, row scales @sx): fp8_row() into y. */
static void
fp8_rows (const LbGemmGeom * g, const uint8_t * xq, int64_t xqld,
    const float *sx, const uint8_t * wd, const float *swd, float alpha,
    float b, float *yd)
{
  const int64_t m = g->m, n = g->n, k = g->k, yld = g->yld;
  const float *lut = e4m3_table ();
#pragma omp parallel for schedule(static) if (m * n * k >= (1 << 18))
  for (int64_t i = 0; i < m; i++)
    fp8_row (g, xq + i * xqld, sx[i], wd, swd, alpha, b, yd + i * yld, lut);
}

/**
 * lb_cpu_gemm_fp8:
 * @s: a CPU stream
 * @x: [M, K] float32 (or contiguous [..., K], flattened)
 * @w: [N, K] %LB_DTYPE_F8E4M3 contiguous (PyTorch Linear layout)
 * @sw: [N] float32: w's per-output-channel scales
 * @bias: (nullable): [N] float32
 * @alpha: scale of the product
 * @beta: scale of the previous content of @y (0 ignores it, NaN included)
 * @y: [M, N] float32 output
 * @error: %LB_ERROR_SHAPE on mismatched operands (lb_check_gemm_fp8())
 *
 * The oracle of the FP8 GEMM (kernels/ops.h @gemm_fp8): each row of x is
 * quantised to E4M3 with its scale `sx[m] = amax / 448`
 * (lb_quantize_e4m3_row()), `acc` is the f32 dot product of the E4M3
 * values in a fixed order (8 interleaved partial sums, combined pairwise),
 * and `y = ((alpha * acc) * sx[m]) * sw[n] + (beta * y + bias)`.  A row of
 * y does not depend on the other rows.  The quantised x (M K bytes) and
 * the M scales live in a scratch allocated by this call: a reference, not
 * a production path.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_gemm_fp8 (LbStream * s, const LbTensor * x, const LbTensor * w,
    const LbTensor * sw, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error)
{
  LbGemmGeom g;
  if (!lb_check_gemm_fp8 (x, w, sw, bias, y, &g, error) ||
      !lb_check_devices (LB_CPU_DEVICE, "gemm_fp8", error, "x", x, "w", w,
          "sw", sw, "bias", bias, "y", y, NULL))
    return FALSE;
  const int64_t m = g.m, k = g.k, xld = g.xld;
  float *yd = y->data;
  float b;
  (void) s;
  if (!gemm_prologue (&g, bias, alpha, beta, yd, &b))
    return TRUE;

  const float *xd = x->data;
  g_autofree uint8_t *xq = g_malloc ((gsize) (m * k));
  g_autofree float *sx = g_new (float, m);
#pragma omp parallel for schedule(static) if (m * k >= (1 << 18))
  for (int64_t i = 0; i < m; i++)
    lb_quantize_e4m3_row (xd + i * xld, k, xq + i * k, &sx[i]);
  fp8_rows (&g, xq, k, sx, w->data, sw->data, alpha, b, yd);
  return TRUE;
}

/**
 * lb_cpu_gemm_fp8_q:
 * @s: a CPU stream
 * @x: [M, K] %LB_DTYPE_F8E4M3 codes (or contiguous [..., K], flattened)
 * @sx: [M] float32: x's per-row scales
 * @w: [N, K] %LB_DTYPE_F8E4M3 contiguous (PyTorch Linear layout)
 * @sw: [N] float32: w's per-output-channel scales
 * @bias: (nullable): [N] float32
 * @alpha: scale of the product
 * @beta: scale of the previous content of @y (0 ignores it, NaN included)
 * @y: [M, N] float32 output
 * @error: %LB_ERROR_SHAPE on mismatched operands (lb_check_gemm_fp8_q())
 *
 * lb_cpu_gemm_fp8() on an x already quantised (kernels/ops-list.h
 * @gemm_fp8_q): the same dot products and epilogue, so it gives the bits
 * of lb_cpu_gemm_fp8() on any f32 x whose rows lb_quantize_e4m3_row()
 * turns into @x and @sx.  Allocates nothing.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_gemm_fp8_q (LbStream * s, const LbTensor * x, const LbTensor * sx,
    const LbTensor * w, const LbTensor * sw, const LbTensor * bias,
    float alpha, float beta, LbTensor * y, GError ** error)
{
  LbGemmGeom g;
  if (!lb_check_gemm_fp8_q (x, sx, w, sw, bias, y, &g, error) ||
      !lb_check_devices (LB_CPU_DEVICE, "gemm_fp8_q", error, "x", x, "sx", sx,
          "w", w, "sw", sw, "bias", bias, "y", y, NULL))
    return FALSE;
  float *yd = y->data;
  float b;
  (void) s;
  if (!gemm_prologue (&g, bias, alpha, beta, yd, &b))
    return TRUE;
  fp8_rows (&g, x->data, g.xld, sx->data, w->data, sw->data, alpha, b, yd);
  return TRUE;
}

/**
 * lb_cpu_gemm_fp8_gelu_q:
 * @s: a CPU stream
 * @x: [M, K] %LB_DTYPE_F8E4M3 codes (or contiguous [..., K], flattened)
 * @sx: [M] float32: x's per-row scales
 * @w: [N, K] %LB_DTYPE_F8E4M3 contiguous (PyTorch Linear layout)
 * @sw: [N] float32: w's per-output-channel scales
 * @bias: (nullable): [N] float32
 * @alpha: scale of the product
 * @y: [M, N] %LB_DTYPE_F8E4M3: the codes of the GELU's rows
 * @sy: [M] float32: their row scales
 * @error: %LB_ERROR_SHAPE on mismatched operands
 *   (lb_check_gemm_fp8_gelu_q())
 *
 * The oracle of gemm_fp8_gelu_q (kernels/ops-list.h): per row, the row
 * lb_cpu_gemm_fp8_q() writes with beta 0 (the bias first, as
 * gemm_prologue() puts it in y, then fp8_row()) into a row buffer, the
 * row kernel of lb_cpu_gelu_tanh() on it, then lb_quantize_e4m3_row(),
 * what lb_cpu_gemm_fp8() does to its x: bit for bit that op chain.  The
 * row buffers (one per thread, N floats) are allocated by the call.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_cpu_gemm_fp8_gelu_q (LbStream * s, const LbTensor * x,
    const LbTensor * sx, const LbTensor * w, const LbTensor * sw,
    const LbTensor * bias, float alpha, LbTensor * y, LbTensor * sy,
    GError ** error)
{
  LbGemmGeom g;
  if (!lb_check_gemm_fp8_gelu_q (x, sx, w, sw, bias, y, sy, &g, error) ||
      !lb_check_devices (LB_CPU_DEVICE, "gemm_fp8_gelu_q", error, "x", x,
          "sx", sx, "w", w, "sw", sw, "bias", bias, "y", y, "sy", sy, NULL))
    return FALSE;
  const int64_t m = g.m, n = g.n, k = g.k;
  (void) s;
  if (m == 0)
    return TRUE;
  const uint8_t *xd = x->data, *wd = w->data;
  const float *sxd = sx->data, *swd = sw->data;
  const float *bd = bias ? bias->data : NULL;
  float *syd = sy->data;
  uint8_t *yd = y->data;
  const gboolean product = k != 0 && alpha != 0.0f;
  const float *lut = e4m3_table ();
  const LbCpuRowKernels *rk = lb_cpu_row_kernels ();
#pragma omp parallel if (m * n * MAX (k, 1) >= (1 << 18))
  {
    g_autofree float *h = g_new (float, MAX (n, 1));
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; i++) {
      if (bd)
        memcpy (h, bd, n * sizeof (float));
      else
        memset (h, 0, n * sizeof (float));
      if (product)
        fp8_row (&g, xd + i * g.xld, sxd[i], wd, swd, alpha,
            bd ? 1.0f : 0.0f, h, lut);
      rk->gelu_tanh (h, h, n);
      lb_quantize_e4m3_row (h, n, yd + i * g.yld, &syd[i]);
    }
  }
  return TRUE;
}

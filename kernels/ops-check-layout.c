/* lingbot-gst: argument checks of the convolution, layout and strided ops
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Split from kernels/ops-check.c (see there and kernels/ops-check.h):
 * the checks of the VAE-side ops (conv3d/conv2d, upsampling, patchify,
 * resize, strided copy/fill, latent affine, channel norm).
 */
#include "kernels/ops-check.h"
#include "kernels/ops-check-private.h"

#include <string.h>

/* ---- convolutions ---- */

static gboolean
check_geometry (const char *op, int pad_h, int pad_w, int stride_h,
    int stride_w, GError ** error)
{
  if (pad_h < 0 || pad_w < 0 || stride_h < 1 || stride_w < 1)
    return lb_check_fail (error, "%s: padding (%d, %d) and stride (%d, %d) "
        "invalid, expected padding >= 0 and stride >= 1", op, pad_h, pad_w,
        stride_h, stride_w);
  return TRUE;
}

static gboolean
out_extent (const char *op, const char *what, int64_t in, int64_t k,
    int64_t pad, int64_t stride, int64_t * out, GError ** error)
{
  if (in + 2 * pad < k)
    return lb_check_fail (error, "%s: input %s %" G_GINT64_FORMAT " with "
        "padding %" G_GINT64_FORMAT " is smaller than the kernel (%"
        G_GINT64_FORMAT ")", op, what, in, pad, k);
  *out = (in + 2 * pad - k) / stride + 1;
  return TRUE;
}

/* After x and weight: bias [cout], padding/stride, kt, then the output
 * extents into @g. */
static gboolean
check_conv_rest (const char *op, const LbTensor * weight,
    const LbTensor * bias, int pad_h, int pad_w, int stride_h, int stride_w,
    LbConvGeom * g, GError ** error)
{
  int64_t bshape[1] = { g->cout };
  if (bias && !lb_check_tensor (op, "bias", bias, LB_DTYPE_F32, 1, bshape,
          TRUE, error))
    return FALSE;
  if (!check_geometry (op, pad_h, pad_w, stride_h, stride_w, error))
    return FALSE;
  if (g->kt < 1) {
    g_autofree char *have = lb_tensor_shape_string (weight);
    return lb_check_fail (error, "%s: weight is f32 %s, expected kt >= 1", op,
        have);
  }
  return out_extent (op, "height", g->h, g->kh, pad_h, stride_h, &g->ho,
      error) &&
      out_extent (op, "width", g->w, g->kw, pad_w, stride_w, &g->wo, error);
}

/* TRUE when @t [C, T, H, W] has the channels-last layout of its shape:
 * strides {1, H*W*C, W*C, C} (NDHWC in memory); a dim of extent 1 may
 * have any stride. */
static gboolean
is_channels_last (const LbTensor * t)
{
  const int64_t *n = t->shape;
  const int64_t want[4] = { 1, n[2] * n[3] * n[0], n[3] * n[0], n[0] };
  for (int i = 0; i < 4; i++)
    if (n[i] > 1 && t->stride[i] != want[i])
      return FALSE;
  return TRUE;
}

/* conv3d_causal's x or cache: f32 contiguous, or bf16 channels-last of
 * dtype @want16 (x's, for the cache). */
static gboolean
check_conv_act (const char *op, const char *arg, const LbTensor * t,
    const int64_t * shape, LbDType want, GError ** error)
{
  if (t == NULL || (t->dtype != LB_DTYPE_F32 && t->dtype != LB_DTYPE_BF16))
    return lb_check_tensor (op, arg, t, want, 4, shape, TRUE, error);
  if (!lb_check_tensor (op, arg, t, want, 4, shape, FALSE, error))
    return FALSE;
  if (want == LB_DTYPE_F32 && !lb_tensor_is_contiguous (t))
    return lb_check_fail_strides (op, arg, t, "a contiguous tensor", error);
  if (want == LB_DTYPE_BF16 && !is_channels_last (t))
    return lb_check_fail_strides (op, arg, t,
        "a channels-last bf16 tensor (strides " "[1, H*W*C, W*C, C])", error);
  return TRUE;
}

/**
 * lb_check_conv3d_causal:
 * @x: [Cin, T, H, W]: f32 contiguous, or bf16 channels-last (strides
 *   [1, H*W*Cin, W*Cin, Cin])
 * @cache: (nullable): [Cin, Tc, H, W] of x's dtype and layout
 * @weight: f32 [Cout, Cin, kt, kh, kw] contiguous, kt >= 1
 * @bias: (nullable): f32 [Cout]
 * @pad_h: zero rows above and below (>= 0)
 * @pad_w: zero columns left and right (>= 0)
 * @stride_h: vertical stride (>= 1)
 * @stride_w: horizontal stride (>= 1)
 * @y: f32 [Cout, T', H', W'] contiguous
 * @g: (out): the geometry
 * @error: (out) (optional): %LB_ERROR_SHAPE ("conv3d_causal: x is bf16
 *   [4, 2, 3, 5] with strides [30, 15, 5, 1], expected a channels-last
 *   bf16 tensor (strides [1, H*W*C, W*C, C])", "conv3d_causal: cache is
 *   f32 [4, 2, 3, 5], expected bf16 [4, -1, 3, 5]")
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_conv3d_causal (const LbTensor * x, const LbTensor * cache,
    const LbTensor * weight, const LbTensor * bias, int pad_h, int pad_w,
    int stride_h, int stride_w, const LbTensor * y, LbConvGeom * g,
    GError ** error)
{
  const char *op = "conv3d_causal";
  int64_t any4[4] = { LB_ANY, LB_ANY, LB_ANY, LB_ANY };
  memset (g, 0, sizeof *g);
  const LbDType act = x && x->dtype == LB_DTYPE_BF16 ? LB_DTYPE_BF16 :
      LB_DTYPE_F32;
  if (!check_conv_act (op, "x", x, any4, act, error))
    return FALSE;
  g->cin = x->shape[0];
  g->t = x->shape[1];
  g->h = x->shape[2];
  g->w = x->shape[3];
  int64_t wshape[5] = { LB_ANY, g->cin, LB_ANY, LB_ANY, LB_ANY };
  if (!lb_check_tensor (op, "weight", weight, LB_DTYPE_F32, 5, wshape, TRUE,
          error))
    return FALSE;
  g->cout = weight->shape[0];
  g->kt = weight->shape[2];
  g->kh = weight->shape[3];
  g->kw = weight->shape[4];
  if (cache) {
    int64_t cshape[4] = { g->cin, LB_ANY, g->h, g->w };
    if (!check_conv_act (op, "cache", cache, cshape, act, error))
      return FALSE;
    g->tc = cache->shape[1];
  }
  if (!check_conv_rest (op, weight, bias, pad_h, pad_w, stride_h, stride_w, g,
          error))
    return FALSE;
  g->zeros = MAX (0, g->kt - 1 - g->tc);
  g->tout = g->zeros + g->tc + g->t - g->kt + 1;
  int64_t yshape[4] = { g->cout, g->tout, g->ho, g->wo };
  return lb_check_tensor (op, "y", y, LB_DTYPE_F32, 4, yshape, TRUE, error);
}

/**
 * lb_check_conv2d:
 * @x: f32 [Cin, H, W] or [B, Cin, H, W], contiguous
 * @weight: f32 [Cout, Cin, kh, kw] contiguous
 * @bias: (nullable): f32 [Cout]
 * @pad_h: zero rows above and below (>= 0)
 * @pad_w: zero columns left and right (>= 0)
 * @stride_h: vertical stride (>= 1)
 * @stride_w: horizontal stride (>= 1)
 * @y: f32 [Cout, H', W'] or [B, Cout, H', W'] (the rank of @x), contiguous
 * @g: (out): the geometry (t and tout: the batch size, 1 for a 3-D x)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_conv2d (const LbTensor * x, const LbTensor * weight,
    const LbTensor * bias, int pad_h, int pad_w, int stride_h, int stride_w,
    const LbTensor * y, LbConvGeom * g, GError ** error)
{
  const char *op = "conv2d";
  int64_t any[4] = { LB_ANY, LB_ANY, LB_ANY, LB_ANY };
  memset (g, 0, sizeof *g);
  const int nd = x && x->ndim == 4 ? 4 : 3;
  if (!lb_check_tensor (op, "x", x, LB_DTYPE_F32, nd, any, TRUE, error))
    return FALSE;
  const int batched = nd == 4;
  g->t = g->tout = batched ? x->shape[0] : 1;
  g->cin = x->shape[batched];
  g->h = x->shape[batched + 1];
  g->w = x->shape[batched + 2];
  int64_t wshape[4] = { LB_ANY, g->cin, LB_ANY, LB_ANY };
  if (!lb_check_tensor (op, "weight", weight, LB_DTYPE_F32, 4, wshape, TRUE,
          error))
    return FALSE;
  g->cout = weight->shape[0];
  g->kt = 1;
  g->kh = weight->shape[2];
  g->kw = weight->shape[3];
  if (!check_conv_rest (op, weight, bias, pad_h, pad_w, stride_h, stride_w, g,
          error))
    return FALSE;
  int64_t yshape[4] = { g->t, g->cout, g->ho, g->wo };
  return lb_check_tensor (op, "y", y, LB_DTYPE_F32, nd,
      batched ? yshape : yshape + 1, TRUE, error);
}

/**
 * lb_conv_input:
 * @g: the geometry from lb_check_conv3d_causal() or lb_check_conv2d()
 * @is_2d: %TRUE for conv2d (the batch elements are the frames)
 * @cache: (nullable): conv3d_causal's cache data
 * @x: the data of x
 * @pad_h: the op's pad_h
 * @pad_w: the op's pad_w
 * @stride_h: the op's stride_h
 * @stride_w: the op's stride_w
 *
 * Returns: the input of the backends' convolution cores for a checked
 * call.
 */
LbConvIn
lb_conv_input (const LbConvGeom * g, gboolean is_2d, const float *cache,
    const float *x, int pad_h, int pad_w, int stride_h, int stride_w)
{
  const int64_t plane = g->h * g->w;
  LbConvIn c = {
    .zeros = g->zeros,
    .cache = cache,
    .cache_t = g->tc,
    .cache_cs = g->tc * plane,
    .cache_fs = plane,
    .x = x,
    .x_cs = is_2d ? plane : g->t * plane,
    .x_fs = is_2d ? g->cin * plane : plane,
    .cin = g->cin,.h = g->h,.w = g->w,
    .kt = g->kt,.kh = g->kh,.kw = g->kw,
    .sh = stride_h,.sw = stride_w,.ph = pad_h,.pw = pad_w,
    .ho = g->ho,.wo = g->wo,
  };
  return c;
}

/* ---- layout ---- */

/**
 * lb_check_upsample_nearest2x:
 * @x: f32 [..., H, W] contiguous (at least 2-D)
 * @y: f32 [..., 2H, 2W] contiguous
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_upsample_nearest2x (const LbTensor * x, const LbTensor * y,
    GError ** error)
{
  const char *op = "upsample_nearest2x";
  int64_t shape[LB_MAX_DIMS];
  for (int i = 0; i < LB_MAX_DIMS; i++)
    shape[i] = LB_ANY;
  const int nd = x == NULL || x->ndim < 2 ? 2 : x->ndim;
  if (!lb_check_tensor (op, "x", x, LB_DTYPE_F32, nd, shape, TRUE, error))
    return FALSE;
  memcpy (shape, x->shape, sizeof (int64_t) * nd);
  shape[nd - 2] *= 2;
  shape[nd - 1] *= 2;
  return lb_check_tensor (op, "y", y, LB_DTYPE_F32, nd, shape, TRUE, error);
}

static gboolean
check_patch (const char *op, int ph, int pw, GError ** error)
{
  if (ph < 1 || pw < 1)
    return lb_check_fail (error, "%s: patch size %d x %d invalid, expected "
        ">= 1", op, ph, pw);
  return TRUE;
}

/* @arg (named for @op) as f32 [C, F, H, W] contiguous, H and W multiples of
 * the patch. */
static gboolean
check_image (const char *op, const char *arg, const LbTensor * t, int ph,
    int pw, GError ** error)
{
  int64_t any4[4] = { LB_ANY, LB_ANY, LB_ANY, LB_ANY };
  if (!check_patch (op, ph, pw, error) ||
      !lb_check_tensor (op, arg, t, LB_DTYPE_F32, 4, any4, TRUE, error))
    return FALSE;
  if (t->shape[2] % ph || t->shape[3] % pw) {
    g_autofree char *have = lb_tensor_shape_string (t);
    return lb_check_fail (error, "%s: %s is f32 %s, expected H and W "
        "multiples of the patch %d x %d", op, arg, have, ph, pw);
  }
  return TRUE;
}

/* @arg as f32 [F*(H/ph)*(W/pw), C*ph*pw] contiguous for the image @img. */
static gboolean
check_tokens (const char *op, const char *arg, const LbTensor * t,
    const LbTensor * img, int ph, int pw, GError ** error)
{
  int64_t c = img->shape[0], f = img->shape[1];
  int64_t hp = img->shape[2] / ph, wp = img->shape[3] / pw;
  int64_t shape[2] = { f * hp * wp, c * ph * pw };
  return lb_check_tensor (op, arg, t, LB_DTYPE_F32, 2, shape, TRUE, error);
}

/**
 * lb_check_patchify:
 * @x: f32 [C, F, H, W] contiguous, H % @ph == 0, W % @pw == 0
 * @ph: patch height (>= 1)
 * @pw: patch width (>= 1)
 * @y: f32 [F*(H/ph)*(W/pw), C*ph*pw] contiguous
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_patchify (const LbTensor * x, int ph, int pw, const LbTensor * y,
    GError ** error)
{
  return check_image ("patchify", "x", x, ph, pw, error) &&
      check_tokens ("patchify", "y", y, x, ph, pw, error);
}

/**
 * lb_check_unpatchify:
 * @z: f32 [F*Hp*Wp, ph*pw*C] contiguous
 * @ph: patch height (>= 1)
 * @pw: patch width (>= 1)
 * @y: f32 [C, F, Hp*ph, Wp*pw] contiguous; its shape sets C, F, Hp, Wp
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_unpatchify (const LbTensor * z, int ph, int pw, const LbTensor * y,
    GError ** error)
{
  return check_image ("unpatchify", "y", y, ph, pw, error) &&
      check_tokens ("unpatchify", "z", z, y, ph, pw, error);
}

/**
 * lb_check_resize_bicubic:
 * @x: f32 [C, H, W] contiguous, non-empty unless y is
 * @y: f32 [C, H', W'] contiguous
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_resize_bicubic (const LbTensor * x, const LbTensor * y,
    GError ** error)
{
  const char *op = "resize_bicubic";
  int64_t any3[3] = { LB_ANY, LB_ANY, LB_ANY };
  if (!lb_check_tensor (op, "x", x, LB_DTYPE_F32, 3, any3, TRUE, error))
    return FALSE;
  int64_t yshape[3] = { x->shape[0], LB_ANY, LB_ANY };
  if (!lb_check_tensor (op, "y", y, LB_DTYPE_F32, 3, yshape, TRUE, error))
    return FALSE;
  if ((x->shape[1] == 0 || x->shape[2] == 0) && y->shape[1] * y->shape[2] > 0) {
    g_autofree char *have = lb_tensor_shape_string (x);
    return lb_check_fail (error, "%s: x is f32 %s, expected a non-empty "
        "image", op, have);
  }
  return TRUE;
}

/* ---- strided ops ---- */

/* The 5-D walk of x and y (@x nullable) into @g, after their checks. */
static void
strided_walk (const LbTensor * x, const LbTensor * y, LbStrided5 * g)
{
  const int pad = 5 - y->ndim;
  g->cdim = pad;
  for (int i = 0; i < 5; i++) {
    int j = i - pad;
    g->shape[i] = j < 0 ? 1 : y->shape[j];
    g->ys[i] = j < 0 ? 0 : y->stride[j];
    g->xs[i] = (j < 0 || x == NULL) ? 0 : x->stride[j];
  }
}

/* The dims of @g reordered by y's strides, largest outermost (extent-1
 * dims first; a stable sort, so y's dim order where the strides allow):
 * the innermost loop of the CPU and the adjacent threads of CUDA then run
 * along y's smallest stride, e.g. the channels of a channels-last bf16
 * view instead of its columns.  Only for ops whose elements are
 * independent of the order (copy, fill); cdim follows its dim. */
static void
walk_by_y_strides (LbStrided5 * g)
{
#define WALK_KEY(d) (g->shape[d] == 1 ? G_MAXINT64 : ABS (g->ys[d]))
  for (int i = 1; i < 5; i++)
    for (int j = i; j > 0 && WALK_KEY (j - 1) < WALK_KEY (j); j--) {
      int64_t t = g->shape[j];
      g->shape[j] = g->shape[j - 1];
      g->shape[j - 1] = t;
      t = g->ys[j];
      g->ys[j] = g->ys[j - 1];
      g->ys[j - 1] = t;
      t = g->xs[j];
      g->xs[j] = g->xs[j - 1];
      g->xs[j - 1] = t;
      if (g->cdim == j || g->cdim == j - 1)
        g->cdim = g->cdim == j ? j - 1 : j;
    }
#undef WALK_KEY
}

/* y present with 1 to 5 dims (any dtype yet). */
static gboolean
check_strided_rank (const char *op, const LbTensor * y, const char *expect,
    GError ** error)
{
  if (!lb_check_present (op, "y", y, expect, error))
    return FALSE;
  if (y->ndim < 1 || y->ndim > 5) {
    g_autofree char *have = lb_tensor_shape_string (y);
    return lb_check_fail (error, "%s: y is %s %s, expected 1 to 5 dims", op,
        lb_dtype_name (y->dtype), have);
  }
  return TRUE;
}

/**
 * lb_check_strided:
 * @op: op name for the message
 * @x: (nullable): f32 input of @y's shape, any strides (%NULL for fill)
 * @y: f32 output of 1 to 5 dims, any strides
 * @g: (out): the 5-D walk
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_strided (const char *op, const LbTensor * x, const LbTensor * y,
    LbStrided5 * g, GError ** error)
{
  int64_t any[5] = { LB_ANY, LB_ANY, LB_ANY, LB_ANY, LB_ANY };
  if (!check_strided_rank (op, y, "f32 [1 to 5 dims]", error))
    return FALSE;
  if (!lb_check_tensor (op, "y", y, LB_DTYPE_F32, y->ndim, any, FALSE, error))
    return FALSE;
  if (x != NULL && !lb_check_tensor (op, "x", x, LB_DTYPE_F32, y->ndim,
          y->shape, FALSE, error))
    return FALSE;
  strided_walk (x, y, g);
  return TRUE;
}

/**
 * lb_check_fill:
 * @y: f32 or bf16 view of 1 to 5 dims, any strides
 * @g: (out): the 5-D walk, its dims ordered by y's strides (largest
 *   outermost)
 * @error: (out) (optional): %LB_ERROR_SHAPE ("fill: y is f16 [3, 4],
 *   expected f32 or bf16")
 *
 * The checks of the fill op: lb_check_strided() without x, except that
 * y may be bf16 (the value is then stored as lb_f32_to_bf16() of it).
 *
 * Returns: %TRUE when the operand fits.
 */
gboolean
lb_check_fill (const LbTensor * y, LbStrided5 * g, GError ** error)
{
  int64_t any[5] = { LB_ANY, LB_ANY, LB_ANY, LB_ANY, LB_ANY };
  if (y != NULL && y->dtype != LB_DTYPE_F32 && y->dtype != LB_DTYPE_BF16) {
    g_autofree char *have = lb_tensor_shape_string (y);
    return lb_check_fail (error, "fill: y is %s %s, expected f32 or bf16",
        lb_dtype_name (y->dtype), have);
  }
  if (y == NULL || y->dtype != LB_DTYPE_BF16) {
    if (!lb_check_strided ("fill", NULL, y, g, error))
      return FALSE;
  } else {
    if (!check_strided_rank ("fill", y, "f32 or bf16 [1 to 5 dims]", error)
        || !lb_check_tensor ("fill", "y", y, LB_DTYPE_BF16, y->ndim, any,
            FALSE, error))
      return FALSE;
    strided_walk (NULL, y, g);
  }
  walk_by_y_strides (g);
  return TRUE;
}

/* f32 or bf16, else the copy op's dtype message. */
static gboolean
check_copy_dtype (const char *arg, const LbTensor * t, const LbTensor * y,
    GError ** error)
{
  if (t->dtype == LB_DTYPE_F32 || t->dtype == LB_DTYPE_BF16)
    return TRUE;
  g_autofree char *have = lb_tensor_shape_string (t);
  g_autofree char *want = lb_tensor_shape_string (y);
  return lb_check_fail (error, "copy: %s is %s %s, expected f32 or bf16 %s",
      arg, lb_dtype_name (t->dtype), have, want);
}

/**
 * lb_check_copy:
 * @x: f32 or bf16 view of @y's shape, any strides
 * @y: f32 or bf16 view of 1 to 5 dims, any strides
 * @g: (out): the 5-D walk, its dims ordered by y's strides (largest
 *   outermost)
 * @error: (out) (optional): %LB_ERROR_SHAPE, in the order y, x: "copy: y is
 *   f16 [3, 4], expected f32 or bf16 [3, 4]", "copy: x is f32 [3, 5],
 *   expected [3, 4]"
 *
 * The checks of the copy op (kernels/ops.h): the strided walk of
 * lb_check_strided(), except that each of x and y may be f32 or bf16
 * independently (f32 -> bf16 rounds, bf16 -> f32 widens; a bf16 KV
 * cache, spec 1.11).
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_copy (const LbTensor * x, const LbTensor * y, LbStrided5 * g,
    GError ** error)
{
  const char *op = "copy";
  int64_t any[5] = { LB_ANY, LB_ANY, LB_ANY, LB_ANY, LB_ANY };
  if (!check_strided_rank (op, y, "f32 or bf16 [1 to 5 dims]", error) ||
      !check_copy_dtype ("y", y, y, error) ||
      !lb_check_tensor (op, "y", y, y->dtype, y->ndim, any, FALSE, error))
    return FALSE;
  if (x == NULL) {
    g_autofree char *want = lb_tensor_shape_string (y);
    return lb_check_fail (error, "copy: x is NULL, expected f32 or bf16 %s",
        want);
  }
  if ((x->ndim >= 0 && x->ndim <= LB_MAX_DIMS &&
          !check_copy_dtype ("x", x, y, error)) ||
      !lb_check_tensor (op, "x", x, x->dtype, y->ndim, y->shape, FALSE, error))
    return FALSE;
  strided_walk (x, y, g);
  walk_by_y_strides (g);
  return TRUE;
}

/**
 * lb_check_latent_affine:
 * @x: f32 [C, ...] (2 to 5 dims, any strides)
 * @mean: f32 [C] contiguous
 * @inv_std: f32 [C] contiguous
 * @y: f32 of x's shape, any strides
 * @g: (out): the 5-D walk
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_latent_affine (const LbTensor * x, const LbTensor * mean,
    const LbTensor * inv_std, const LbTensor * y, LbStrided5 * g,
    GError ** error)
{
  const char *op = "latent_affine";
  if (!lb_check_present (op, "x", x, "f32 [C, ...]", error) ||
      !lb_check_strided (op, x, y, g, error))
    return FALSE;
  if (x->ndim < 2) {
    g_autofree char *have = lb_tensor_shape_string (x);
    return lb_check_fail (error, "%s: x is f32 %s, expected [C, ...] with 2 "
        "to 5 dims", op, have);
  }
  int64_t c[1] = { x->shape[0] };
  return lb_check_tensor (op, "mean", mean, LB_DTYPE_F32, 1, c, TRUE, error)
      && lb_check_tensor (op, "inv_std", inv_std, LB_DTYPE_F32, 1, c, TRUE,
      error);
}

/**
 * lb_check_channel_rms_norm:
 * @x: f32 [C, T, H, W], any strides
 * @gamma: f32 [C] contiguous
 * @y: f32 or bf16 [C, T, H, W], any strides
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_channel_rms_norm (const LbTensor * x, const LbTensor * gamma,
    const LbTensor * y, GError ** error)
{
  const char *op = "channel_rms_norm";
  int64_t any4[4] = { LB_ANY, LB_ANY, LB_ANY, LB_ANY };
  if (!lb_check_tensor (op, "x", x, LB_DTYPE_F32, 4, any4, FALSE, error) ||
      !lb_check_tensor (op, "y", y, y && y->dtype == LB_DTYPE_BF16 ?
          LB_DTYPE_BF16 : LB_DTYPE_F32, 4, x->shape, FALSE, error))
    return FALSE;
  int64_t c[1] = { x->shape[0] };
  return lb_check_tensor (op, "gamma", gamma, LB_DTYPE_F32, 1, c, TRUE, error);
}

/**
 * lb_check_upsample_nearest2x_halo:
 * @x: f32 [C, T, h + 2, w] with stride[3] == 1
 * @y: [C, T, 2h + 2, 2w]: f32 contiguous, or bf16 channels-last (strides
 *   [1, H*W*C, W*C, C]: the input of a conv that reads bf16 NDHWC)
 * @error: (out) (optional): %LB_ERROR_SHAPE
 *
 * Returns: %TRUE when the operands fit.
 */
gboolean
lb_check_upsample_nearest2x_halo (const LbTensor * x, const LbTensor * y,
    GError ** error)
{
  const char *op = "upsample_nearest2x_halo";
  int64_t any4[4] = { LB_ANY, LB_ANY, LB_ANY, LB_ANY };
  if (!lb_check_tensor (op, "x", x, LB_DTYPE_F32, 4, any4, FALSE, error))
    return FALSE;
  if (x->shape[2] < 2)
    return lb_check_fail (error, "%s: x has %" G_GINT64_FORMAT " rows, "
        "expected a band plus 2 halo rows", op, x->shape[2]);
  if (x->shape[3] > 1 && x->stride[3] != 1)
    return lb_check_fail_strides (op, "x", x, "a view with stride[3] == 1",
        error);
  int64_t ys[4] = { x->shape[0], x->shape[1], 2 * x->shape[2] - 2,
    2 * x->shape[3]
  };
  return check_conv_act (op, "y", y, ys, y && y->dtype == LB_DTYPE_BF16 ?
      LB_DTYPE_BF16 : LB_DTYPE_F32, error);
}

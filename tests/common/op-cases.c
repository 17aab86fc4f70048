/* lingbot-gst: the table of op parity cases and its driver
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * See op-cases.h.  The cases are built in code (one builder per group of
 * ops, the shapes in the lists that call it), once per process; each case
 * draws its inputs from its own seed, so a case gives the same inputs on
 * every backend and in every run.
 *
 * Tolerances (relative to the largest reference magnitude): TOL = 1e-5
 * for the float ops (norms accumulate in double on every backend; the
 * rest are the same float formulas up to FMA contraction and the device's
 * expf, 2 ulp; convolutions in FP32 over K <= a few thousand), TOL_CHNORM
 * for the channel norm (sums and quotients rounded like the CPU, SiLU's
 * expf may differ by 2 ulp), 0 for the exact ops (layout, strided,
 * upsampling: the same single float operation on every backend), and the
 * ray map equal byte for byte (same IEEE operations, no FMA).  A bf16
 * output (the GEMM inputs the norms and activations write, spec 1.11) is
 * the f32 result rounded: an f32 difference at a rounding boundary moves
 * it by one bf16 ulp, so TOL_BF16 is a few bf16 ulps of the largest
 * magnitude; TOL_GEMM covers the f32 summation order of a K <= 1000 GEMM.
 */
#include "op-cases.h"
#include "op-call.h"
#include "kernels/error.h"
#include "test-compare.h"

#include <math.h>
#include <string.h>

#define TOL 1e-5
#define TOL_CHNORM 1e-6
#define TOL_EXACT 0.0
#define TOL_BF16 1e-2
#define TOL_GEMM 1e-4
/* a device's GEMM with its own GELU in the epilogue (cuBLASLt's tanh) */
#define TOL_GELU_EPILOGUE 2e-3

#define S(...) ((const int64_t[]) { __VA_ARGS__ })
#define MAX_DIMS 5

typedef enum
{
  FILL_NONE,                    /* a NULL argument */
  FILL_RAND,                    /* uniform in [lo, hi] */
  FILL_NAN,                     /* an output: NaN everywhere */
  FILL_SAME,                    /* the same tensor as argument @same */
  FILL_ROPE_COS,                /* lb_rope_tables_new () [max_pos, hd/2] */
  FILL_ROPE_SIN,
  FILL_POSES,                   /* [F, 16] rigid camera-to-world poses */
} Fill;

typedef enum
{
  VIEW_WHOLE,
  VIEW_NARROW,                  /* base @extra wider along @dim, from @at */
  VIEW_SELECT,                  /* base has a dim of @extra at @dim; @at */
  VIEW_PERMUTE,                 /* view = permute (base, @perm) */
} ViewKind;

typedef enum
{
  SPECIAL_NONE,
  SPECIAL_NONFINITE,            /* NaN, inf, -inf first in the buffer */
  SPECIAL_ZERO_VOXEL,           /* element 0 of every dim-0 slice is 0 */
} Special;

typedef struct
{
  Fill fill;
  int nd;
  int64_t shape[MAX_DIMS];      /* the view's */
  double lo, hi;
  ViewKind view;
  int dim;
  int64_t extra, at;
  int perm[MAX_DIMS];
  int same;
  Special special;
  LbDType dtype;                /* of the buffer: f32 (0) or bf16 */
} ArgSpec;

typedef struct
{
  OpId op;
  char *what;
  ArgSpec t[OP_CALL_MAX_TENSORS];
  float f[OP_CALL_MAX_FLOATS];
  int64_t i[OP_CALL_MAX_INTS];
  double tol;
  gboolean bytes;               /* byte equality on every backend */
  gboolean refused;             /* both refuse, with the same message */
} OpCase;

/* ---- argument specs ---- */

static ArgSpec
rng (int nd, const int64_t * shape, double lo, double hi)
{
  ArgSpec a = {.fill = FILL_RAND,.nd = nd,.lo = lo,.hi = hi };
  memcpy (a.shape, shape, sizeof (int64_t) * nd);
  return a;
}

static ArgSpec
rnd (int nd, const int64_t * shape)
{
  return rng (nd, shape, -1.0, 1.0);
}

static ArgSpec
nan_out (int nd, const int64_t * shape)
{
  ArgSpec a = rng (nd, shape, 0, 0);
  a.fill = FILL_NAN;
  return a;
}

static ArgSpec
none (void)
{
  return (ArgSpec) {
  .fill = FILL_NONE};
}

static ArgSpec
same (int k)
{
  return (ArgSpec) {
  .fill = FILL_SAME,.same = k};
}

/* @a as a view into a larger buffer: VIEW_NARROW, the buffer @extra
 * wider along @dim and the view from @at; VIEW_SELECT, a dim of @extra
 * inserted at @dim and the view at index @at */
static ArgSpec
view_of (ArgSpec a, ViewKind view, int dim, int64_t extra, int64_t at)
{
  a.view = view;
  a.dim = dim;
  a.extra = extra;
  a.at = at;
  return a;
}

static ArgSpec
narrow (ArgSpec a, int dim, int64_t extra, int64_t at)
{
  return extra == 0 ? a : view_of (a, VIEW_NARROW, dim, extra, at);
}

static ArgSpec
permuted (ArgSpec a, const int *perm)
{
  a.view = VIEW_PERMUTE;
  memcpy (a.perm, perm, sizeof (int) * a.nd);
  return a;
}

static ArgSpec
special (ArgSpec a, Special sp)
{
  a.special = sp;
  return a;
}

/* @a stored as bf16 (its values rounded by lb_f32_to_bf16()) */
static ArgSpec
bf16 (ArgSpec a)
{
  a.dtype = LB_DTYPE_BF16;
  return a;
}

/* @a [C, T, H, W] as a bf16 channels-last view: the [C, T, H, W] view of
 * a contiguous bf16 [T, H, W, C] (NDHWC) buffer */
static ArgSpec
channels_last16 (ArgSpec a)
{
  return bf16 (permuted (a, (const int[]) { 3, 0, 1, 2 }));
}

static ArgSpec
rope_table (Fill fill, int64_t hd)
{
  ArgSpec a = rng (2, S (64, hd / 2), 0, 0);
  a.fill = fill;
  return a;
}

/* ---- the table ---- */

static GPtrArray *cases;        /* OpCase, in the order they were added */

static void
case_free (gpointer p)
{
  OpCase *c = p;
  g_free (c->what);
  g_free (c);
}

static OpCase *add (OpId op, double tol, const char *format, ...)
    G_GNUC_PRINTF (3, 4);

static OpCase *
add (OpId op, double tol, const char *format, ...)
{
  OpCase *c = g_new0 (OpCase, 1);
  va_list ap;
  va_start (ap, format);
  c->what = g_strdup_vprintf (format, ap);
  va_end (ap);
  c->op = op;
  c->tol = tol;
  g_ptr_array_add (cases, c);
  return c;
}

/* the same call, refused on both backends with one message */
static OpCase *
refused (const OpCase * like, const char *why)
{
  OpCase *c = add (like->op, like->tol, "%s %s", like->what, why);
  memcpy (c->t, like->t, sizeof (c->t));
  memcpy (c->f, like->f, sizeof (c->f));
  memcpy (c->i, like->i, sizeof (c->i));
  c->refused = TRUE;
  return c;
}

/* x [m, d] a row-strided view of [m, d + pad] when pad > 0 */
static void
norm_cases (int64_t m, int64_t d, int pad, gboolean affine)
{
  const ArgSpec x = narrow (rng (2, S (m, d), -3, 5), 1, pad, 0);
  const ArgSpec w = affine ? rnd (1, S (d)) : none ();
  OpCase *c = add (OP_layer_norm, TOL, "layer_norm [%" G_GINT64_FORMAT
      ", %" G_GINT64_FORMAT "]", m, d);
  c->t[0] = x;
  c->t[1] = w;
  c->t[2] = w;
  c->f[0] = 1e-6f;
  c->t[3] = nan_out (2, S (m, d));
  /* a bad weight */
  OpCase *bad = refused (c, "bad weight");
  bad->t[1] = rnd (1, S (d + 1));
  bad->t[2] = none ();
  /* into a bf16 GEMM input */
  OpCase *c16 = add (OP_layer_norm, TOL_BF16, "%s bf16 y", c->what);
  memcpy (c16->t, c->t, sizeof (c->t));
  c16->f[0] = 1e-6f;
  c16->t[3] = bf16 (nan_out (2, S (m, d)));

  c = add (OP_rms_norm, TOL, "rms_norm [%" G_GINT64_FORMAT ", %"
      G_GINT64_FORMAT "]", m, d);
  c->t[0] = x;
  c->t[1] = w;
  c->f[0] = 1e-6f;
  c->t[2] = nan_out (2, S (m, d));

  c = add (OP_rms_norm, TOL, "rms_norm in place [%" G_GINT64_FORMAT ", %"
      G_GINT64_FORMAT "]", m, d);
  c->t[0] = rng (2, S (m, d), -3, 5);
  c->t[1] = rnd (1, S (d));
  c->f[0] = 1e-5f;
  c->t[2] = same (0);
}

static void
modulate_cases (int64_t m, int64_t d, gboolean per_row, int pad)
{
  const ArgSpec x = narrow (rnd (2, S (m, d)), 1, pad, 0);
  const ArgSpec v = per_row ? rnd (2, S (m, d)) : rnd (1, S (d));
  OpCase *c = add (OP_modulate, TOL, "modulate [%" G_GINT64_FORMAT ", %"
      G_GINT64_FORMAT "]", m, d);
  c->t[0] = x;
  c->t[1] = v;
  c->t[2] = v;
  c->t[3] = nan_out (2, S (m, d));
  /* in place on the strided view, with a gate and without */
  for (int gate = 1; gate >= 0; gate--) {
    c = add (OP_gated_residual, TOL, "gated_residual%s [%" G_GINT64_FORMAT
        ", %" G_GINT64_FORMAT "]", gate ? "" : " (no gate)", m, d);
    c->t[0] = x;
    c->t[1] = rnd (2, S (m, d));
    c->t[2] = gate ? v : none ();
  }
}

static void
elementwise_cases (int nd, const int64_t * shape, int pad)
{
  const int64_t d = shape[nd - 1];
  int64_t m = 1;
  for (int i = 0; i < nd - 1; i++)
    m *= shape[i];
  const ArgSpec a = rng (nd, shape, -6, 6);
  const ArgSpec y = nan_out (nd, shape);
  static const OpId unary[] = { OP_gelu_tanh, OP_silu, OP_scale };
  for (guint u = 0; u < G_N_ELEMENTS (unary); u++) {
    OpCase *c = add (unary[u], TOL, "%s %d-D", op_info (unary[u])->name, nd);
    c->t[0] = a;
    c->t[1] = y;
    if (unary[u] == OP_scale) {
      c->f[0] = 0.37f;
      c->f[1] = -1.5f;
    }
    OpCase *c16 = add (unary[u], TOL_BF16, "%s bf16 y", c->what);
    memcpy (c16->t, c->t, sizeof (c->t));
    memcpy (c16->f, c->f, sizeof (c->f));
    c16->t[1] = bf16 (y);
  }
  static const OpId binary[] = { OP_add, OP_mul };
  for (guint b = 0; b < G_N_ELEMENTS (binary); b++)
    for (int bc = 0; bc < 2; bc++) {
      OpCase *c = add (binary[b], TOL, "%s %d-D%s", op_info (binary[b])->name,
          nd, bc ? " (broadcast b)" : "");
      c->t[0] = a;
      c->t[1] = bc ? rnd (1, S (d)) : rnd (nd, shape);
      c->t[2] = y;
    }
  if (pad > 0) {
    /* row-strided views: a from column pad of [m, d + pad], y from 0 */
    const ArgSpec av = narrow (rnd (2, S (m, d)), 1, pad, pad);
    const ArgSpec yv = narrow (nan_out (2, S (m, d)), 1, pad, 0);
    OpCase *c = add (OP_add, TOL, "add (row-strided views)");
    c->t[0] = av;
    c->t[1] = rnd (1, S (d));
    c->t[2] = yv;
    c = add (OP_silu, TOL, "silu (row-strided views)");
    c->t[0] = av;
    c->t[1] = yv;
    c = add (OP_gelu_tanh, TOL_BF16, "gelu_tanh (row-strided views) bf16 y");
    c->t[0] = av;
    c->t[1] = bf16 (yv);
  }
  /* a mismatched b */
  OpCase *c = add (OP_add, TOL, "add %d-D bad b", nd);
  c->t[0] = a;
  c->t[1] = rnd (1, S (d + 2));
  c->t[2] = y;
  c->refused = TRUE;
}

/* strided: x is the q part of a packed [N, 2, H, hd] */
static void
rope_cases (int64_t gf, int64_t gh, int64_t gw, int64_t nh, int64_t hd,
    int64_t f0, int64_t r0, gboolean strided)
{
  const int64_t n = gf * gh * gw;
  ArgSpec x = rnd (3, S (n, nh, hd));
  OpCase *c = add (OP_rope_3d, TOL, "rope_3d %" G_GINT64_FORMAT "x%"
      G_GINT64_FORMAT "x%" G_GINT64_FORMAT " hd %" G_GINT64_FORMAT "%s", gf,
      gh, gw, hd, strided ? " (packed)" : "");
  c->t[0] = strided ? view_of (x, VIEW_SELECT, 1, 2, 1) : x;
  c->t[1] = rope_table (FILL_ROPE_COS, hd);
  c->t[2] = rope_table (FILL_ROPE_SIN, hd);
  const int64_t i[] = { gf, gh, gw, f0, r0 };
  memcpy (c->i, i, sizeof (i));
  refused (c, "past the table")->i[3] = 64;
}

static void
layout_cases (void)
{
  static const int64_t ups[][4] = { {1, 1, 1, 1}, {2, 3, 5, 7}, {1, 4, 33,
      65}
  };
  for (guint k = 0; k < G_N_ELEMENTS (ups); k++) {
    const int64_t *s = ups[k];
    OpCase *c = add (OP_upsample_nearest2x, TOL_EXACT,
        "upsample_nearest2x %u", k);
    c->t[0] = rnd (4, s);
    c->t[1] = nan_out (4, S (s[0], s[1], 2 * s[2], 2 * s[3]));
  }
  static const int64_t pat[][6] = {
    {1, 1, 1, 1, 1, 1}, {3, 2, 6, 10, 2, 2}, {36, 4, 12, 26, 2, 2},
    {5, 3, 9, 8, 3, 4},
  };
  for (guint k = 0; k < G_N_ELEMENTS (pat); k++) {
    const int64_t *p = pat[k];
    const int64_t ph = p[4], pw = p[5];
    const int64_t ntok = p[1] * (p[2] / ph) * (p[3] / pw),
        feat = p[0] * ph * pw;
    OpCase *c = add (OP_patchify, TOL_EXACT, "patchify %u", k);
    c->t[0] = rnd (4, p);
    c->i[0] = ph;
    c->i[1] = pw;
    c->t[1] = nan_out (2, S (ntok, feat));
    c = add (OP_unpatchify, TOL_EXACT, "unpatchify %u", k);
    c->t[0] = rnd (2, S (ntok, feat));
    c->i[0] = ph;
    c->i[1] = pw;
    c->t[1] = nan_out (4, p);
  }
  /* bicubic, up and down */
  static const int64_t bic[][5] = {
    {1, 1, 1, 1, 1}, {3, 17, 23, 40, 9}, {3, 100, 160, 48, 83},
    {2, 8, 8, 8, 8}, {3, 480, 640, 464, 832},
  };
  for (guint k = 0; k < G_N_ELEMENTS (bic); k++) {
    const int64_t *b = bic[k];
    OpCase *c = add (OP_resize_bicubic, TOL, "resize_bicubic %u", k);
    c->t[0] = rng (3, b, 0, 255);
    c->t[1] = nan_out (3, S (b[0], b[3], b[4]));
  }
}

/* cin, cout, T, Tc, H, W, kt, kh, kw, pad, stride, bias */
static void
conv3d_cases (int64_t cin, int64_t cout, int64_t t, int64_t tc, int64_t h,
    int64_t w, int64_t kt, int64_t kh, int64_t kw, int pad, int stride,
    gboolean with_bias)
{
  const int64_t zeros = MAX (0, kt - 1 - tc), tout = zeros + tc + t - kt + 1;
  const int64_t ho = (h + 2 * pad - kh) / stride + 1;
  const int64_t wo = (w + 2 * pad - kw) / stride + 1;
  OpCase *c = add (OP_conv3d_causal, TOL, "conv3d_causal %" G_GINT64_FORMAT
      " -> %" G_GINT64_FORMAT ", k %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
      "x%" G_GINT64_FORMAT ", cache %" G_GINT64_FORMAT, cin, cout, kt, kh, kw,
      tc);
  c->t[0] = rnd (4, S (cin, t, h, w));
  c->t[1] = tc > 0 ? rnd (4, S (cin, tc, h, w)) : none ();
  c->t[2] = rnd (5, S (cout, cin, kt, kh, kw));
  c->t[3] = with_bias ? rnd (1, S (cout)) : none ();
  const int64_t i[] = { pad, pad, stride, stride };
  memcpy (c->i, i, sizeof (i));
  c->t[4] = nan_out (4, S (cout, tout, ho, wo));
}

/* The VAE decoder's bf16 channels-last conv inputs (x and cache NDHWC,
 * widened exactly by the CPU): the f32 tolerance, the values being the
 * same on both sides.  A bf16 x in NCDHW and an f32 cache beside a bf16
 * x are refused. */
static void
conv3d_cl16_cases (int64_t cin, int64_t cout, int64_t t, int64_t tc,
    int64_t h, int64_t w, int64_t k, int pad)
{
  const int64_t zeros = MAX (0, k - 1 - tc), tout = zeros + tc + t - k + 1;
  const int64_t ho = h + 2 * pad - k + 1, wo = w + 2 * pad - k + 1;
  OpCase *c = add (OP_conv3d_causal, TOL, "conv3d_causal %" G_GINT64_FORMAT
      " -> %" G_GINT64_FORMAT ", k %" G_GINT64_FORMAT ", cache %"
      G_GINT64_FORMAT ", bf16 channels-last x", cin, cout, k, tc);
  c->t[0] = channels_last16 (rng (4, S (cin, t, h, w), -2, 2));
  c->t[1] = tc > 0 ? channels_last16 (rng (4, S (cin, tc, h, w), -2, 2)) :
      none ();
  c->t[2] = rnd (5, S (cout, cin, k, k, k));
  c->t[3] = rnd (1, S (cout));
  const int64_t i[] = { pad, pad, 1, 1 };
  memcpy (c->i, i, sizeof (i));
  c->t[4] = nan_out (4, S (cout, tout, ho, wo));
  refused (c, "bf16 NCDHW x")->t[0] = bf16 (rnd (4, S (cin, t, h, w)));
  if (tc > 0)
    refused (c, "f32 cache")->t[1] = rnd (4, S (cin, tc, h, w));
}

/* nb (0: 3-D), cin, cout, H, W, kh, kw, ph, pw, sh, sw, bias */
static void
conv2d_cases (int64_t nb, int64_t cin, int64_t cout, int64_t h, int64_t w,
    int64_t kh, int64_t kw, int ph, int pw, int sh, int sw, gboolean with_bias)
{
  const int64_t ho = (h + 2 * ph - kh) / sh + 1, wo = (w + 2 * pw - kw) / sw
      + 1;
  OpCase *c = add (OP_conv2d, TOL, "conv2d %" G_GINT64_FORMAT " x %"
      G_GINT64_FORMAT " -> %" G_GINT64_FORMAT ", k %" G_GINT64_FORMAT "x%"
      G_GINT64_FORMAT, nb, cin, cout, kh, kw);
  c->t[0] = nb > 0 ? rnd (4, S (nb, cin, h, w)) : rnd (3, S (cin, h, w));
  c->t[1] = rnd (4, S (cout, cin, kh, kw));
  c->t[2] = with_bias ? rnd (1, S (cout)) : none ();
  const int64_t i[] = { ph, pw, sh, sw };
  memcpy (c->i, i, sizeof (i));
  c->t[3] = nb > 0 ? nan_out (4, S (nb, cout, ho, wo)) :
      nan_out (3, S (cout, ho, wo));
  /* weight with the wrong Cin */
  OpCase *bad = refused (c, "bad weight");
  bad->t[1] = rnd (4, S (cout, cin + 1, kh, kw));
  bad->t[2] = none ();
}

/* x a [d0..] view with permuted strides (the transpose of a contiguous
 * buffer of the reversed shape, NaN and infinities first), y a NaN view
 * narrowed out of rows 2 wider */
static void
strided_cases (int nd, const int64_t * shape)
{
  int64_t rshape[MAX_DIMS];
  int perm[MAX_DIMS];
  for (int i = 0; i < nd; i++) {
    rshape[i] = shape[nd - 1 - i];
    perm[i] = nd - 1 - i;
  }
  ArgSpec x = special (rng (nd, rshape, -2, 2), SPECIAL_NONFINITE);
  x = permuted (x, perm);
  memcpy (x.shape, shape, sizeof (int64_t) * nd);
  const ArgSpec y = narrow (nan_out (nd, shape), nd - 1, 2, 1);
  OpCase *c = add (OP_copy, TOL_EXACT, "copy %d-D", nd);
  c->t[0] = x;
  c->t[1] = y;
  int64_t bad[MAX_DIMS];
  memcpy (bad, shape, sizeof (int64_t) * nd);
  bad[0] += 1;
  refused (c, "bad shape")->t[1] = narrow (nan_out (nd, bad), nd - 1, 2, 1);

  c = add (OP_clamp, TOL_EXACT, "clamp %d-D", nd);
  c->t[0] = x;
  c->f[0] = -1.f;
  c->f[1] = 0.5f;
  c->t[1] = y;

  /* onto clamped-range values, NaN and infinities first */
  c = add (OP_accumulate, TOL_EXACT, "accumulate %d-D", nd);
  c->t[0] = x;
  c->t[1] = special (narrow (rng (nd, shape, -1, 0.5), nd - 1, 2, 1),
      SPECIAL_NONFINITE);

  c = add (OP_fill, TOL_EXACT, "fill %d-D", nd);
  c->t[0] = y;
  c->f[0] = 0.25f;
  /* into bf16: the same rounding of a value that is not a bf16 */
  c = add (OP_fill, TOL_EXACT, "fill %d-D bf16", nd);
  c->t[0] = bf16 (y);
  c->f[0] = 0.1f;

  if (nd >= 2)
    for (int denorm = 0; denorm < 2; denorm++) {
      c = add (OP_latent_affine, TOL_EXACT, "latent_affine %d-D%s", nd,
          denorm ? " (denormalize)" : "");
      c->t[0] = x;
      c->t[1] = rnd (1, S (shape[0]));
      c->t[2] = rng (1, S (shape[0]), 0.2, 3);
      c->i[0] = denorm;
      c->t[3] = y;
    }
}

/* y the interior rows of a halo-padded buffer, or token-major: the
 * [C, T, H, W] view of a contiguous [T, H, W, C] */
static void
chnorm_cases (int64_t C, int64_t T, int64_t H, int64_t W, gboolean silu,
    gboolean token_major)
{
  OpCase *c = add (OP_channel_rms_norm, TOL_CHNORM, "channel_rms_norm%s [%"
      G_GINT64_FORMAT ", %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT ", %"
      G_GINT64_FORMAT "]%s", silu ? " silu" : "", C, T, H, W,
      token_major ? " token-major" : "");
  c->t[0] = special (rng (4, S (C, T, H, W), -3, 3), SPECIAL_ZERO_VOXEL);
  c->t[1] = rng (1, S (C), 0.5, 1.5);
  c->i[0] = silu;
  if (token_major) {
    ArgSpec y =
        permuted (nan_out (4, S (T, H, W, C)), (const int[]) { 3, 0, 1, 2 });
    memcpy (y.shape, S (C, T, H, W), sizeof (int64_t) * 4);
    c->t[2] = y;
  } else {
    c->t[2] = narrow (nan_out (4, S (C, T, H, W)), 2, 2, 1);
  }
}

/* bf16 y: the channels-last conv input of the VAE decoder ([C, T, H, W]
 * of an NDHWC buffer) and a strided NCDHW one */
static void
chnorm_bf16_cases (int64_t C, int64_t T, int64_t H, int64_t W, gboolean silu)
{
  for (int cl = 0; cl < 2; cl++) {
    OpCase *c = add (OP_channel_rms_norm, TOL_BF16, "channel_rms_norm%s [%"
        G_GINT64_FORMAT ", %" G_GINT64_FORMAT ", %" G_GINT64_FORMAT ", %"
        G_GINT64_FORMAT "] bf16 %s y", silu ? " silu" : "", C, T, H, W,
        cl ? "channels-last" : "strided");
    c->t[0] = special (rng (4, S (C, T, H, W), -3, 3), SPECIAL_ZERO_VOXEL);
    c->t[1] = rng (1, S (C), 0.5, 1.5);
    c->i[0] = silu;
    c->t[2] = cl ? channels_last16 (nan_out (4, S (C, T, H, W))) :
        bf16 (narrow (nan_out (4, S (C, T, H, W)), 2, 2, 1));
  }
}

static void
upsample_halo_cases (void)
{
  const int64_t C = 16, T = 2, h = 9, w = 13;
  OpCase *c = add (OP_upsample_nearest2x_halo, TOL_EXACT,
      "upsample_nearest2x_halo");
  /* x: rows 1 .. h + 2 of [C, T, h + 4, w] */
  c->t[0] = narrow (rnd (4, S (C, T, h + 2, w)), 2, 2, 1);
  c->t[1] = nan_out (4, S (C, T, 2 * h + 2, 2 * w));
  /* into a bf16 channels-last conv input: the same rounding everywhere;
   * 40 channels and 37 columns cut the device's 32 x 32 tiles */
  c = add (OP_upsample_nearest2x_halo, TOL_EXACT,
      "upsample_nearest2x_halo bf16 channels-last y");
  c->t[0] = narrow (rnd (4, S (40, T, h + 2, 37)), 2, 2, 1);
  c->t[1] = channels_last16 (nan_out (4, S (40, T, 2 * h + 2, 74)));
}

static void
ray_map_cases (int width, int height, int frames, int row0, int rows,
    const float k[4], gboolean raw)
{
  OpCase *c = add (OP_ray_map, TOL_EXACT, "ray_map %dx%d rows %d+%d%s",
      width, height, row0, rows, raw ? " (raw matrices)" : "");
  c->bytes = TRUE;
  c->t[0] = rng (2, S (frames, 16), -2, 2);
  if (!raw)
    c->t[0].fill = FILL_POSES;
  memcpy (c->f, k, sizeof (float) * 4);
  const int64_t i[] = { width, height, row0 };
  memcpy (c->i, i, sizeof (i));
  c->t[1] = nan_out (4, S (384, frames, rows, width / 8));
  /* a size that is not a multiple of 8, a band past the bottom */
  refused (c, "bad width")->i[0] = width + 4;
  refused (c, "bad band")->i[2] = height / 8 - rows + 1;
}

/* The fused DiT ops, on plain and row-strided views (their bit identity
 * with the op pairs is tests/unit/test-ops-fused.c's) */
static void
fused_cases (int64_t m, int64_t d, int pad, gboolean per_row)
{
  const ArgSpec v = per_row ? rnd (2, S (m, d)) : rnd (1, S (d));
  OpCase *c = add (OP_norm_modulate, TOL, "norm_modulate [%" G_GINT64_FORMAT
      ", %" G_GINT64_FORMAT "]", m, d);
  c->t[0] = narrow (rng (2, S (m, d), -3, 5), 1, pad, 0);
  c->t[1] = rng (1, S (d), 0.5, 1.5);
  c->t[2] = rnd (1, S (d));
  c->f[0] = 1e-6f;
  c->t[3] = v;
  c->t[4] = v;
  c->t[5] = nan_out (2, S (m, d));
  refused (c, "bad scale")->t[3] = rnd (2, S (m + 1, d));
  OpCase *c16 = add (OP_norm_modulate, TOL_BF16, "%s bf16 y", c->what);
  memcpy (c16->t, c->t, sizeof (c->t));
  c16->f[0] = 1e-6f;
  c16->t[5] = bf16 (narrow (nan_out (2, S (m, d)), 1, pad, pad));

  c = add (OP_gated_residual_modulate, TOL, "gated_residual_modulate [%"
      G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]", m, d);
  c->t[0] = narrow (rng (2, S (m, d), -4, 4), 1, pad, 0);
  c->t[1] = rng (2, S (m, d), -2, 2);
  c->t[2] = v;
  c->t[3] = v;
  c->t[4] = v;
  OpCase *bad = refused (c, "bad shift");
  bad->t[2] = none ();
  bad->t[4] = rnd (1, S (d + 1));

  /* the residual then the norm, into f32 and into a bf16 GEMM input */
  for (int o16 = 0; o16 < 2; o16++) {
    c = add (OP_residual_norm_modulate, o16 ? TOL_BF16 : TOL,
        "residual_norm_modulate [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
        "]%s", m, d, o16 ? " bf16 out" : "");
    c->t[0] = narrow (rng (2, S (m, d), -4, 4), 1, pad, 0);
    c->t[1] = rng (2, S (m, d), -2, 2);
    c->t[2] = o16 ? none () : v;
    c->t[3] = o16 ? rng (1, S (d), 0.5, 1.5) : none ();
    c->t[4] = o16 ? rnd (1, S (d)) : none ();
    c->f[0] = 1e-6f;
    c->t[5] = v;
    c->t[6] = v;
    const ArgSpec out = narrow (nan_out (2, S (m, d)), 1, pad, pad);
    c->t[7] = o16 ? bf16 (out) : out;
    if (!o16)
      refused (c, "bad out")->t[7] = nan_out (2, S (m + 1, d));
  }
}

static void
rms_norm_rope_cases (int64_t gf, int64_t gh, int64_t gw, int64_t nh,
    int64_t hd, int64_t f0, int64_t r0, gboolean packed)
{
  const int64_t n = gf * gh * gw, d = nh * hd;
  OpCase *c = add (OP_rms_norm_rope, TOL, "rms_norm_rope %" G_GINT64_FORMAT
      " x %" G_GINT64_FORMAT "%s", n, d, packed ? " packed" : "");
  c->t[0] = rng (2, S (n, d), -2, 3);
  c->t[1] = rng (1, S (d), 0.5, 1.5);
  c->f[0] = 1e-6f;
  c->t[2] = rope_table (FILL_ROPE_COS, hd);
  c->t[3] = rope_table (FILL_ROPE_SIN, hd);
  const int64_t i[] = { gf, gh, gw, f0, r0 };
  memcpy (c->i, i, sizeof (i));
  ArgSpec y = nan_out (3, S (n, nh, hd));
  c->t[4] = packed ? view_of (y, VIEW_SELECT, 1, 2, 1) : y;
  refused (c, "past the table")->i[3] = 64;
}

/* gemm with a bf16 w (spec 1.11 storage): x f32 (rounded by the op) or
 * bf16 (written so by the op before), x a row-strided view when pad > 0,
 * with bias and beta; a bf16 x with an f32 w is refused. */
static void
gemm_cases (int64_t m, int64_t n, int64_t k, int pad)
{
  for (int x16 = 0; x16 < 2; x16++) {
    OpCase *c = add (OP_gemm, TOL_GEMM, "gemm [%" G_GINT64_FORMAT ", %"
        G_GINT64_FORMAT "] x [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
        "]^T bf16 w, %s x", m, k, n, k, x16 ? "bf16" : "f32");
    ArgSpec x = narrow (rng (2, S (m, k), -2, 2), 1, pad, pad);
    c->t[0] = x16 ? bf16 (x) : x;
    c->t[1] = bf16 (rnd (2, S (n, k)));
    c->t[2] = rnd (1, S (n));
    c->t[3] = rnd (2, S (m, n));
    c->i[0] = TRUE;
    c->f[0] = 0.75f;
    c->f[1] = 0.5f;
    if (x16)
      refused (c, "(f32 w)")->t[1] = rnd (2, S (n, k));
  }
}

/* gemm_gelu_tanh: f32 w with f32 y; bf16 w with x f32 or bf16 and y f32
 * or bf16 (the FFN's first layer on a bf16 rank: bf16 x and y), x and y
 * row-strided when pad > 0, with and without bias; a bf16 y with an f32
 * w is refused.  Outputs in bf16: TOL_BF16 (a device's GEMM or GELU may
 * move an element across a bf16 rounding boundary); bf16 x and w (the
 * CUDA GELU epilogue): TOL_GELU_EPILOGUE. */
static void
gemm_gelu_cases (int64_t m, int64_t n, int64_t k, int pad)
{
  for (int v = 0; v < 5; v++) {
    const gboolean w16 = v > 0, x16 = v >= 3, y16 = v == 2 || v == 4;
    OpCase *c = add (OP_gemm_gelu_tanh, y16 ? TOL_BF16 : x16 ?
        TOL_GELU_EPILOGUE : TOL_GEMM,
        "gemm_gelu_tanh [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "] x [%"
        G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]^T %s w, %s x, %s y%s", m,
        k, n, k, w16 ? "bf16" : "f32", x16 ? "bf16" : "f32",
        y16 ? "bf16" : "f32", v == 1 ? ", no bias" : "");
    ArgSpec x = narrow (rng (2, S (m, k), -2, 2), 1, pad, pad);
    ArgSpec y = narrow (nan_out (2, S (m, n)), 1, pad, 0);
    ArgSpec w = rng (2, S (n, k), -0.5, 0.5);
    c->t[0] = x16 ? bf16 (x) : x;
    c->t[1] = w16 ? bf16 (w) : w;
    c->t[2] = v == 1 ? none () : rnd (1, S (n));
    c->t[3] = y16 ? bf16 (y) : y;
    c->i[0] = TRUE;
    c->f[0] = 0.75f;
    if (v == 2)
      refused (c, "(bf16 y, f32 w)")->t[1] = w;
  }
}

static void
build_cases (void)
{
  cases = g_ptr_array_new_with_free_func (case_free);
  norm_cases (1, 1, 0, TRUE);
  norm_cases (7, 13, 0, FALSE);
  norm_cases (33, 257, 3, TRUE);
  norm_cases (300, 5120, 0, TRUE);
  norm_cases (5, 4099, 17, FALSE);

  modulate_cases (1, 1, FALSE, 0);
  modulate_cases (9, 31, TRUE, 0);
  modulate_cases (129, 640, FALSE, 5);
  modulate_cases (64, 1000, TRUE, 1);

  elementwise_cases (1, S (1), 0);
  elementwise_cases (2, S (7, 5), 3);
  elementwise_cases (3, S (3, 17, 33), 0);
  elementwise_cases (2, S (1000, 1029), 7);
  elementwise_cases (2, S (1, 100003), 0);

  rope_cases (1, 1, 1, 1, 2, 0, 0, FALSE);
  rope_cases (2, 3, 5, 2, 32, 3, 0, FALSE);
  rope_cases (4, 6, 7, 3, 128, 10, 4, TRUE);
  rope_cases (3, 5, 11, 5, 64, 0, 7, TRUE);

  layout_cases ();

  conv3d_cases (1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, FALSE);
  conv3d_cases (3, 5, 4, 0, 7, 9, 3, 3, 3, 1, 1, TRUE);
  conv3d_cases (4, 6, 3, 1, 8, 6, 3, 3, 3, 1, 1, TRUE);
  conv3d_cases (6, 8, 2, 2, 9, 11, 3, 1, 1, 0, 1, TRUE);
  conv3d_cases (5, 7, 2, 0, 13, 15, 1, 3, 3, 0, 2, TRUE);
  conv3d_cases (3, 2, 2, 4, 6, 5, 3, 3, 3, 1, 1, TRUE);
  conv3d_cl16_cases (16, 8, 2, 2, 8, 10, 3, 0);
  conv3d_cl16_cases (3, 5, 1, 1, 7, 9, 3, 1);
  conv3d_cl16_cases (8, 4, 3, 0, 4, 5, 1, 0);
  conv3d_cl16_cases (33, 12, 1, 2, 6, 70, 3, 1);
  conv2d_cases (0, 3, 4, 5, 6, 3, 3, 1, 1, 1, 1, TRUE);
  conv2d_cases (2, 5, 3, 9, 7, 3, 3, 0, 0, 2, 2, FALSE);
  conv2d_cases (0, 2, 2, 4, 4, 3, 5, 2, 1, 1, 2, TRUE);

  strided_cases (1, S (7));
  strided_cases (2, S (16, 9));
  strided_cases (3, S (3, 5, 70));
  strided_cases (4, S (16, 3, 6, 10));
  strided_cases (5, S (2, 3, 4, 5, 6));
  strided_cases (4, S (96, 4, 34, 60));

  for (int silu = 0; silu < 2; silu++)
    for (int tm = 0; tm < 2; tm++) {
      chnorm_cases (1, 1, 1, 1, silu, tm);
      chnorm_cases (12, 2, 3, 70, silu, tm);
      chnorm_cases (384, 1, 34, 60, silu, tm);
    }
  for (int silu = 0; silu < 2; silu++) {
    chnorm_bf16_cases (1, 1, 1, 1, silu);
    chnorm_bf16_cases (12, 2, 3, 70, silu);
    chnorm_bf16_cases (384, 1, 34, 60, silu);
  }
  upsample_halo_cases ();

  gemm_cases (1, 1, 1, 0);
  gemm_cases (7, 5, 3, 0);
  gemm_cases (65, 129, 100, 3);
  gemm_cases (256, 384, 512, 0);
  gemm_gelu_cases (1, 1, 1, 0);
  gemm_gelu_cases (7, 5, 3, 2);
  gemm_gelu_cases (65, 129, 100, 3);
  gemm_gelu_cases (256, 384, 512, 0);

  fused_cases (1, 1, 0, FALSE);
  fused_cases (33, 257, 3, TRUE);
  fused_cases (64, 1000, 1, TRUE);
  rms_norm_rope_cases (1, 1, 1, 1, 2, 0, 0, FALSE);
  rms_norm_rope_cases (3, 5, 11, 5, 64, 0, 7, TRUE);

  /* 832x480 with the image-size default intrinsics and with calibration
   * intrinsics, the whole map (the served size); a rank's band, odd
   * latent widths, off-centre principal points and arbitrary matrices */
  const float kd[4] = { 832.f, 832.f, 416.f, 240.f };
  const float kc[4] = { 502.13f, 498.71f, 416.37f, 239.93f };
  ray_map_cases (832, 480, 4, 0, 60, kd, FALSE);
  ray_map_cases (832, 480, 4, 0, 60, kc, FALSE);
  ray_map_cases (832, 480, 4, 17, 13, kc, FALSE);
  ray_map_cases (72, 64, 1, 3, 2,
      (const float[4]) { 33.3f, 29.1f, 21.7f, 30.2f }, TRUE);
  ray_map_cases (24, 16, 5, 0, 2,
      (const float[4]) { 7.5f, 9.25f, -3.0f, 20.0f }, TRUE);
}

/* ---- the driver ---- */

/* One case's arguments on one side: owning buffers and the views. */
typedef struct
{
  LbTensor *base[OP_CALL_MAX_TENSORS];
  LbTensor view[OP_CALL_MAX_TENSORS];
} Side;

static void
side_clear (Side * side)
{
  for (int k = 0; k < OP_CALL_MAX_TENSORS; k++)
    g_clear_pointer (&side->base[k], lb_tensor_free);
}

static int
base_shape (const ArgSpec * a, int64_t * base)
{
  int nd = a->nd;
  memcpy (base, a->shape, sizeof (int64_t) * nd);
  switch (a->view) {
    case VIEW_WHOLE:
      break;
    case VIEW_NARROW:
      base[a->dim] += a->extra;
      break;
    case VIEW_SELECT:
      memmove (base + a->dim + 1, base + a->dim,
          sizeof (int64_t) * (nd - a->dim));
      base[a->dim] = a->extra;
      nd++;
      break;
    case VIEW_PERMUTE:
      for (int i = 0; i < nd; i++)
        base[a->perm[i]] = a->shape[i];
      break;
  }
  return nd;
}

static void
make_view (const ArgSpec * a, const LbTensor * base, LbTensor * out)
{
  gboolean ok = TRUE;
  switch (a->view) {
    case VIEW_WHOLE:
      lb_tensor_view (out, base);
      break;
    case VIEW_NARROW:
      ok = lb_tensor_view_narrow (out, base, a->dim, a->at, a->shape[a->dim]);
      break;
    case VIEW_SELECT:
      ok = lb_tensor_view_select (out, base, a->dim, a->at);
      break;
    case VIEW_PERMUTE:
      ok = lb_tensor_view_permute (out, base, a->perm);
      break;
  }
  g_assert_true (ok);
}

/* rigid: a rotation about a random axis mix, translation kept */
static void
fill_poses (float *p, int64_t frames, GRand * rand)
{
  for (int64_t n = 0; n < frames; n++, p += 16) {
    double a = g_rand_double_range (rand, -1.0, 1.0),
        b = g_rand_double_range (rand, -1.0, 1.0);
    const double R[9] = {
      cos (a), sin (a) * sin (b), sin (a) * cos (b),
      0.0, cos (b), -sin (b),
      -sin (a), cos (a) * sin (b), cos (a) * cos (b),
    };
    for (int i = 0; i < 3; i++)
      for (int j = 0; j < 3; j++)
        p[i * 4 + j] = (float) R[i * 3 + j];
    p[12] = p[13] = p[14] = 0.0f;
    p[15] = 1.0f;
  }
}

/* The host buffer of @a, filled. */
static LbTensor *
host_base (const ArgSpec * a, GRand * rand)
{
  int64_t shape[MAX_DIMS + 1];
  const int nd = base_shape (a, shape);
  if (a->fill == FILL_ROPE_COS || a->fill == FILL_ROPE_SIN) {
    LbTensor *cs, *sn;
    lb_rope_tables_new ((int) shape[1] * 2, (int) shape[0], 10000.0, &cs, &sn);
    lb_tensor_free (a->fill == FILL_ROPE_COS ? sn : cs);
    return a->fill == FILL_ROPE_COS ? cs : sn;
  }
  LbTensor *t = lb_tensor_new (LB_DTYPE_F32, nd, shape);
  float *v = t->data;
  const int64_t n = lb_tensor_numel (t);
  for (int64_t i = 0; i < n; i++)
    v[i] = a->fill == FILL_NAN ? NAN :
        (float) g_rand_double_range (rand, a->lo, a->hi);
  if (a->fill == FILL_POSES)
    fill_poses (v, shape[0], rand);
  if (a->special == SPECIAL_NONFINITE) {
    const float sp[] = { NAN, INFINITY, -INFINITY };
    for (int i = 0; i < 3 && i < n; i++)
      v[i] = sp[i];
  } else if (a->special == SPECIAL_ZERO_VOXEL) {
    for (int64_t c = 0; c < shape[0]; c++)
      v[c * (n / shape[0])] = 0.f;
  }
  if (a->dtype == LB_DTYPE_BF16) {
    LbTensor *b = lb_tensor_new (LB_DTYPE_BF16, nd, shape);
    uint16_t *bv = b->data;
    for (int64_t i = 0; i < n; i++)
      bv[i] = lb_f32_to_bf16 (v[i]);
    lb_tensor_free (t);
    return b;
  }
  return t;
}

/* The call of @c on @side's tensors (uploaded to @s unless @host). */
static void
build_call (const OpCase * c, Side * side, const Side * host, LbStream * s,
    OpCall * call, GRand * rand)
{
  const OpInfo *info = op_info (c->op);
  memset (call, 0, sizeof (*call));
  call->op = c->op;
  for (int k = 0; k < info->n_tensors; k++) {
    const ArgSpec *a = &c->t[k];
    if (a->fill == FILL_NONE)
      continue;
    if (a->fill == FILL_SAME) {
      g_assert_cmpint (a->same, <, k);
      call->t[k] = call->t[a->same];
      continue;
    }
    side->base[k] = host ? test_upload (s, host->base[k]) : host_base (a, rand);
    make_view (a, side->base[k], &side->view[k]);
    call->t[k] = &side->view[k];
  }
  memcpy (call->f, c->f, sizeof (call->f));
  memcpy (call->i, c->i, sizeof (call->i));
}

/* test_compare (), and with @bytes the same bytes. */
static void
compare_bases (const char *what, const LbTensor * ref, const LbTensor * got,
    double tol, gboolean bytes)
{
  test_compare (what, ref, got, tol);
  if (bytes && memcmp (ref->data, got->data, lb_tensor_nbytes (ref)) != 0)
    g_error ("%s: the bytes differ", what);
}

static void
run_case (const OpCase * c, guint seed, const OpCasesTarget * target)
{
  const OpInfo *info = op_info (c->op);
  g_autoptr (GRand) rand = g_rand_new_with_seed (seed);
  Side host, dev;
  memset (&host, 0, sizeof (host));
  memset (&dev, 0, sizeof (dev));
  OpCall hc, dc;
  build_call (c, &host, NULL, target->ref, &hc, rand);
  build_call (c, &dev, &host, target->dev, &dc, rand);
  g_autoptr (GError) herr = NULL;
  g_autoptr (GError) derr = NULL;
  gboolean hok = op_call_run (lb_ops (target->ref), target->ref, &hc, &herr);
  gboolean dok = op_call_run (lb_ops (target->dev), target->dev, &dc, &derr);
  if (c->refused) {
    /* device-free argument errors: the same message on both */
    g_assert_false (hok);
    g_assert_false (dok);
    g_assert_nonnull (herr);
    g_assert_nonnull (derr);
    g_test_message ("%s: %s", c->what, derr->message);
    g_assert_error (derr, LB_ERROR, LB_ERROR_SHAPE);
    g_assert_cmpstr (derr->message, ==, herr->message);
  } else {
    g_assert_no_error (herr);
    g_assert_no_error (derr);
    g_assert_true (hok && dok);
    /* every output's whole buffer, gaps of its view included */
    for (int k = 0; k < info->n_tensors; k++) {
      if (info->kind[k] != OP_ARG_OUT)
        continue;
      const int b = c->t[k].fill == FILL_SAME ? c->t[k].same : k;
      g_autoptr (GError) err = NULL;
      const LbTensor *ref = host.base[b];
      g_autoptr (LbTensor) got = lb_tensor_new (ref->dtype, ref->ndim,
          ref->shape);
      g_assert_true (lb_tensor_download (target->dev, got, dev.base[b], &err));
      g_assert_no_error (err);
      g_autofree char *what = g_strdup_printf ("%s: %s", c->what,
          info->arg[k]);
      compare_bases (what, ref, got, target->exact ? 0.0 : c->tol,
          target->exact || c->bytes);
    }
  }
  side_clear (&dev);
  side_clear (&host);
}

typedef struct
{
  OpCasesTarget target;
  OpId op;
} OpTest;

static void
run_op (gconstpointer data)
{
  const OpTest *t = data;
  guint n = 0;
  for (guint k = 0; k < cases->len; k++) {
    const OpCase *c = g_ptr_array_index (cases, k);
    if (c->op == t->op) {
      run_case (c, k + 1, &t->target);
      n++;
    }
  }
  g_test_message ("%s: %u cases", op_info (t->op)->name, n);
}

/**
 * op_cases_add_tests:
 * @prefix: the test path prefix ("/gpu/ops/cases")
 * @target: the streams to compare (kept by reference: they must outlive
 *   g_test_run())
 *
 * Adds one test per op that has cases in the table, `<prefix>/<op>`,
 * running each of its cases on @target's CPU stream and device stream
 * (see op-cases.h).
 */
void
op_cases_add_tests (const char *prefix, const OpCasesTarget * target)
{
  if (cases == NULL)
    build_cases ();
  for (int op = 0; op < OP_COUNT; op++) {
    gboolean any = FALSE;
    for (guint k = 0; k < cases->len && !any; k++)
      any = ((const OpCase *) g_ptr_array_index (cases, k))->op == (OpId) op;
    if (!any)
      continue;
    OpTest *t = g_new0 (OpTest, 1);
    t->target = *target;
    t->op = (OpId) op;
    g_autofree char *path = g_strdup_printf ("%s/%s", prefix,
        op_info ((OpId) op)->name);
    g_test_add_data_func_full (path, t, run_op, g_free);
  }
}

/* lingbot-gst: CUDA ops (all but GEMM and attention) against the CPU
 * oracle.  Most cases are rows of the shared table (tests/common/
 * op-cases.c, /gpu/ops/cases/<op>, the same rows fakedev runs in
 * tests/unit/test-ops-parity.c): the norms, modulation, elementwise,
 * RoPE, layout, convolutions, the VAE's strided ops, channel norm and
 * halo upsample, the fused DiT ops, the camera ray map (bit for bit: both
 * backends use the same IEEE operations without FMA) and the argument
 * errors.  Written out here: what a row cannot say: the allocator, both
 * CUDA conv paths, the bf16 conv stream and its channels-last graphs
 * (module counters, the bf16 weight copies), the fused
 * ops' bit identity with their CPU pairs and rms_norm_rope into KV-cache
 * slot views, the bf16 KV cache, and the device check.
 * Exits 77 (skip) when no CUDA device or module is available.
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Tolerances (relative to the largest reference magnitude, see
 * gpu-test-util.h): 1e-5 for every op here.  Norms accumulate in double on
 * both backends; the rest are the same float formulas up to FMA
 * contraction and the device's expf (2 ulp); the convolutions are FP32
 * (cuDNN f32 engines, or im2col + FP32 GEMMs, no TF32) over K <= a few
 * thousand; on a bf16 stream cuDNN's convolutions get TOL_CONV_BF16.
 */
#define _GNU_SOURCE             /* dladdr */
#include "tests/gpu/gpu-test-util.h"
#include "op-cases.h"

#include <dlfcn.h>
#include <gmodule.h>

#define TOL 1e-5

static const LbOps *
cpu_ops (void)
{
  return lb_ops (gctx.cs);
}

static const LbOps *
gpu_ops (void)
{
  return lb_ops (gctx.gs);
}

static void
sync_ok (void)
{
  g_autoptr (GError) err = NULL;
  g_assert_true (gctx.gs->backend->stream_synchronize (gctx.gs, &err));
  g_assert_no_error (err);
}

static void
test_table (void)
{
  g_assert_null (lb_ops_first_missing (gctx.cuda->ops));
}

static void
test_allocator (void)
{
  g_autoptr (GError) err = NULL;
  LbBackend *be = gctx.cuda;
  void *a = be->alloc (be, 0, 1000, &err);
  g_assert_no_error (err);
  g_assert_nonnull (a);
  be->free (be, 0, a);
  /* one stream on the device: the cached block comes straight back */
  void *b = be->alloc (be, 0, 1000, &err);
  g_assert_no_error (err);
  g_assert_true (a == b);
  void *c = be->alloc (be, 0, 3 << 20, &err);
  g_assert_no_error (err);
  g_assert_true (c != b);
  be->free (be, 0, b);
  be->free (be, 0, c);
  void *z = be->alloc (be, 0, 0, &err);
  g_assert_no_error (err);
  g_assert_nonnull (z);
  be->free (be, 0, z);
}

/* ---- convolutions ---- */

/* Both CUDA conv paths (cuda-cudnn-conv.c: cuDNN by default, im2col +
 * cuBLASLt with LINGBOT_CUDA_CONV=im2col) are compared with the CPU op on
 * NaN-poisoned outputs: cuDNN and im2col on the FP32 stream at TOL, and
 * cuDNN again on the stream in LB_MATH_BF16 mode (TF32 / bf16 engines
 * allowed) at TOL_CONV_BF16, and once more there with
 * LINGBOT_CUDA_CONV_LAYOUT=ndhwc (channels-last bf16 x and w, which needs
 * no aligned operands) at TOL_CONV_BF16.  The module's counters
 * (lingbot_backend_cuda_conv_stats, resolved from the loaded module) must
 * show that each call took the path asked for: a cuDNN refusal fails the
 * case with cuDNN's reason (lingbot_backend_cuda_conv_last_refusal).
 *
 * TOL_CONV_BF16: products of inputs rounded to TF32 (u = 2^-11, 2^-10 when
 * truncated) or bf16 (u = 2^-9, 2^-8 truncated) with f32 accumulation.
 * Each product has a relative error <= 2u; summed over K terms of random
 * sign against outputs of standard deviation sqrt(K)/3 (inputs uniform in
 * [-1, 1]) that is ~u relative to max |ref| for zero-mean rounding and
 * <= ~1.5u when truncation biases every product the same way: ~1e-3 for
 * TF32, ~6e-3 for truncated bf16.  2e-2 is the bound (that of the bf16
 * attention); an FP32 stream must meet TOL = 1e-5, which any TF32 engine
 * would miss by two orders of magnitude. */
#define TOL_CONV_BF16 2e-2

typedef void (*ConvStatsFunc) (guint64 * cudnn_calls, guint64 * im2col_calls,
    guint64 * plans, guint64 * refused);
typedef char *(*ConvRefusalFunc) (void);
typedef void (*ConvLayoutStatsFunc) (guint64 * ndhwc_calls,
    guint64 * weight_conversions);

static ConvLayoutStatsFunc conv_layout_stats;

/* The conv counters of the loaded CUDA module (g_module_symbol on the
 * module that holds the backend's functions). */
static void
conv_symbols (ConvStatsFunc * stats, ConvRefusalFunc * refusal)
{
  static ConvStatsFunc st;
  static ConvRefusalFunc rf;
  if (st == NULL) {
    Dl_info info;
    g_assert_true (dladdr ((void *) gctx.cuda->stream_new, &info) != 0);
    g_assert_nonnull (info.dli_fname);
    GModule *mod = g_module_open (info.dli_fname, G_MODULE_BIND_LOCAL);
    g_assert_nonnull (mod);
    g_assert_true (g_module_symbol (mod, "lingbot_backend_cuda_conv_stats",
            (gpointer *) & st));
    g_assert_true (g_module_symbol (mod,
            "lingbot_backend_cuda_conv_last_refusal", (gpointer *) & rf));
    g_assert_true (g_module_symbol (mod,
            "lingbot_backend_cuda_conv_layout_stats",
            (gpointer *) & conv_layout_stats));
    g_assert_nonnull (conv_layout_stats);
    g_assert_nonnull (st);
    g_assert_nonnull (rf);
    /* the module is resident: this reference is never dropped */
  }
  *stats = st;
  *refusal = rf;
}

/* One conv call on the device: conv2d when @is_2d (@cache unused), else
 * conv3d_causal. */
typedef struct
{
  gboolean is_2d;
  const LbTensor *x, *cache, *w, *b;
  int ph, pw, sh, sw;
} ConvCall;

static gboolean
conv_gpu (const ConvCall * c, LbTensor * y, GError ** error)
{
  if (c->is_2d)
    return gpu_ops ()->conv2d (gctx.gs, c->x, c->w, c->b, c->ph, c->pw,
        c->sh, c->sw, y, error);
  return gpu_ops ()->conv3d_causal (gctx.gs, c->x, c->cache, c->w, c->b,
      c->ph, c->pw, c->sh, c->sw, y, error);
}

enum
{
  CONV_CUDNN,
  CONV_IM2COL,
  CONV_CUDNN_BF16,
  CONV_CUDNN_NDHWC,
  CONV_N_RUNS,
};

/* Runs @c on every path against the CPU result @ref; @expect_cudnn FALSE
 * when the NCDHW cuDNN path must decline the call (unaligned operands;
 * the channels-last one takes every call: its operands are copies). */
static void
conv_paths (const char *op, const ConvCall * c, const LbTensor * ref,
    gboolean expect_cudnn)
{
  static const char *const names[CONV_N_RUNS] = { "cudnn", "im2col",
    "cudnn bf16", "cudnn bf16 ndhwc"
  };
  ConvStatsFunc stats;
  ConvRefusalFunc refusal;
  conv_symbols (&stats, &refusal);
  for (int run = 0; run < CONV_N_RUNS; run++) {
    g_autoptr (GError) err = NULL;
    g_autofree char *what = g_strdup_printf ("%s/%s", op, names[run]);
    const gboolean bf16 = run == CONV_CUDNN_BF16 || run == CONV_CUDNN_NDHWC;
    g_setenv ("LINGBOT_CUDA_CONV", run == CONV_IM2COL ? "im2col" : "cudnn",
        TRUE);
    g_setenv ("LINGBOT_CUDA_CONV_LAYOUT",
        run == CONV_CUDNN_NDHWC ? "ndhwc" : "ncdhw", TRUE);
    sync_ok ();                 /* nothing queued: the mode may change */
    gctx.gs->math = bf16 ? LB_MATH_BF16 : LB_MATH_FP32;
    g_autoptr (LbTensor) dy = dev_poison (ref->ndim, ref->shape);
    guint64 c0, i0, c1, i1, n0, n1;
    stats (&c0, &i0, NULL, NULL);
    conv_layout_stats (&n0, NULL);
    gboolean ok = conv_gpu (c, dy, &err);
    g_assert_no_error (err);
    g_assert_true (ok);
    sync_ok ();
    stats (&c1, &i1, NULL, NULL);
    conv_layout_stats (&n1, NULL);
    gctx.gs->math = LB_MATH_FP32;
    g_unsetenv ("LINGBOT_CUDA_CONV");
    g_unsetenv ("LINGBOT_CUDA_CONV_LAYOUT");
    const gboolean want_cudnn = run == CONV_CUDNN_NDHWC ||
        (run != CONV_IM2COL && expect_cudnn);
    if (want_cudnn && c1 - c0 != 1) {
      g_autofree char *why = refusal ();
      g_error ("%s: the cuDNN path did not run (cudnn +%" G_GUINT64_FORMAT
          ", im2col +%" G_GUINT64_FORMAT "; last refusal: %s)", what,
          c1 - c0, i1 - i0, why ? why : "none");
    }
    g_assert_cmpuint (c1 - c0, ==, want_cudnn ? 1 : 0);
    g_assert_cmpuint (i1 - i0, ==, want_cudnn ? 0 : 1);
    if (run == CONV_CUDNN_NDHWC && n1 - n0 != 1) {
      g_autofree char *why = refusal ();
      g_error ("%s: the channels-last graph did not run (last refusal: %s)",
          what, why ? why : "none");
    }
    g_assert_cmpuint (n1 - n0, ==, run == CONV_CUDNN_NDHWC ? 1 : 0);
    compare_dev (what, ref, dy, bf16 ? TOL_CONV_BF16 : TOL);
  }
}

static void
conv3d_case_hw (int64_t cin, int64_t cout, int64_t t, int64_t tc, int64_t h,
    int64_t w, int64_t kt, int64_t kh, int64_t kw, int pad_h, int pad_w,
    int stride, gboolean with_bias)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LbTensor) x = host_rand (4, S (cin, t, h, w));
  g_autoptr (LbTensor) cache = tc > 0 ? host_rand (4, S (cin, tc, h, w)) : NULL;
  g_autoptr (LbTensor) wt = host_rand (5, S (cout, cin, kt, kh, kw));
  g_autoptr (LbTensor) b = host_rand (1, S (cout));
  g_autoptr (LbTensor) dx = to_dev (x);
  g_autoptr (LbTensor) dcache = cache ? to_dev (cache) : NULL;
  g_autoptr (LbTensor) dw = to_dev (wt);
  g_autoptr (LbTensor) db = to_dev (b);
  int64_t zeros = MAX (0, kt - 1 - tc), tout = zeros + tc + t - kt + 1;
  int64_t ho = (h + 2 * pad_h - kh) / stride + 1;
  int64_t wo = (w + 2 * pad_w - kw) / stride + 1;
  g_autoptr (LbTensor) y = lb_tensor_new (LB_DTYPE_F32, 4, S (cout, tout, ho,
          wo));
  g_assert_true (cpu_ops ()->conv3d_causal (gctx.cs, x, cache, wt,
          with_bias ? b : NULL, pad_h, pad_w, stride, stride, y, &err));
  g_assert_no_error (err);
  ConvCall c = { FALSE, dx, dcache, dw, with_bias ? db : NULL, pad_h, pad_w,
    stride, stride
  };
  conv_paths ("conv3d_causal", &c, y, TRUE);
}

static void
conv3d_case (int64_t cin, int64_t cout, int64_t t, int64_t tc, int64_t h,
    int64_t w, int64_t kt, int64_t kh, int64_t kw, int pad, int stride,
    gboolean with_bias)
{
  conv3d_case_hw (cin, cout, t, tc, h, w, kt, kh, kw, pad, pad, stride,
      with_bias);
}

static void
conv2d_case (int64_t nb, int64_t cin, int64_t cout, int64_t h, int64_t w,
    int64_t kh, int64_t kw, int ph, int pw, int sh, int sw, gboolean with_bias)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (GError) err2 = NULL;
  gboolean batched = nb > 0;
  int64_t xs[4] = { nb, cin, h, w };
  g_autoptr (LbTensor) x = batched ? host_rand (4, xs) : host_rand (3, xs + 1);
  g_autoptr (LbTensor) wt = host_rand (4, S (cout, cin, kh, kw));
  g_autoptr (LbTensor) b = host_rand (1, S (cout));
  g_autoptr (LbTensor) dx = to_dev (x);
  g_autoptr (LbTensor) dw = to_dev (wt);
  g_autoptr (LbTensor) db = to_dev (b);
  int64_t ho = (h + 2 * ph - kh) / sh + 1, wo = (w + 2 * pw - kw) / sw + 1;
  int64_t ys[4] = { nb, cout, ho, wo };
  int nd = batched ? 4 : 3;
  const int64_t *yshape = batched ? ys : ys + 1;
  g_autoptr (LbTensor) y = lb_tensor_new (LB_DTYPE_F32, nd, yshape);
  g_autoptr (LbTensor) dy = dev_poison (nd, yshape);
  g_assert_true (cpu_ops ()->conv2d (gctx.cs, x, wt, with_bias ? b : NULL, ph,
          pw, sh, sw, y, &err));
  g_assert_no_error (err);
  ConvCall c = { TRUE, dx, NULL, dw, with_bias ? db : NULL, ph, pw, sh, sw };
  conv_paths ("conv2d", &c, y, TRUE);

  /* weight with the wrong Cin: same message */
  g_autoptr (LbTensor) wbad = host_rand (4, S (cout, cin + 1, kh, kw));
  g_autoptr (LbTensor) dwbad = to_dev (wbad);
  gboolean c_ok = cpu_ops ()->conv2d (gctx.cs, x, wbad, NULL, ph, pw, sh, sw,
      y, &err);
  gboolean g_ok = gpu_ops ()->conv2d (gctx.gs, dx, dwbad, NULL, ph, pw, sh,
      sw, dy, &err2);
  same_error ("conv2d bad weight", c_ok, err, g_ok, err2);
}

/* x one float past a 16-byte boundary: cuDNN's descriptors declare 16-byte
 * alignment, so the cuDNN path must hand the call to im2col (and still be
 * right); with a cache it convolves its aligned copy cat(cache, x). */
static void
conv3d_unaligned_case (void)
{
  g_autoptr (GError) err = NULL;
  const int64_t cin = 6, cout = 5, t = 3, h = 9, w = 11;
  g_autoptr (LbTensor) x = host_rand (4, S (cin, t, h, w));
  g_autoptr (LbTensor) cache = host_rand (4, S (cin, 2, h, w));
  g_autoptr (LbTensor) wt = host_rand (5, S (cout, cin, 3, 3, 3));
  g_autoptr (LbTensor) b = host_rand (1, S (cout));
  g_autoptr (LbTensor) dbig = dev_poison (1, S (cin * t * h * w + 1));
  LbTensor dx;
  lb_tensor_view_init (&dx, LB_DTYPE_F32, (float *) dbig->data + 1,
      dbig->device, 4, x->shape, NULL);
  g_assert_true (lb_tensor_upload (gctx.gs, &dx, x, &err));
  g_assert_no_error (err);
  g_autoptr (LbTensor) dcache = to_dev (cache);
  g_autoptr (LbTensor) dw = to_dev (wt);
  g_autoptr (LbTensor) db = to_dev (b);
  g_autoptr (LbTensor) y = lb_tensor_new (LB_DTYPE_F32, 4, S (cout, t, h, w));
  g_assert_true (cpu_ops ()->conv3d_causal (gctx.cs, x, NULL, wt, b, 1, 1, 1,
          1, y, &err));
  ConvCall c = { FALSE, &dx, NULL, dw, db, 1, 1, 1, 1 };
  conv_paths ("conv3d_causal-unaligned", &c, y, FALSE);
  g_assert_true (cpu_ops ()->conv3d_causal (gctx.cs, x, cache, wt, b, 1, 1,
          1, 1, y, &err));
  c.cache = dcache;
  conv_paths ("conv3d_causal-unaligned", &c, y, TRUE);
}

/* The channels-last path's bf16 weight copies (cuda-cudnn-conv.c
 * weight_krsc()): made once per weight allocation, reused while it lives,
 * made again for new weights even where the pool hands out the freed
 * block again (same address, other values). */
static void
test_conv_ndhwc_weights (void)
{
  g_autoptr (GError) err = NULL;
  const int64_t cin = 32, cout = 48, t = 2, h = 18, w = 20;
  ConvStatsFunc stats;
  ConvRefusalFunc refusal;
  conv_symbols (&stats, &refusal);
  g_autoptr (LbTensor) x = host_rand (4, S (cin, t, h + 2, w));
  g_autoptr (LbTensor) cache = host_rand (4, S (cin, 2, h + 2, w));
  g_autoptr (LbTensor) b = host_rand (1, S (cout));
  g_autoptr (LbTensor) dx = to_dev (x);
  g_autoptr (LbTensor) dcache = to_dev (cache);
  g_autoptr (LbTensor) db = to_dev (b);
  g_autoptr (LbTensor) y = lb_tensor_new (LB_DTYPE_F32, 4, S (cout, t, h, w));
  g_setenv ("LINGBOT_CUDA_CONV_LAYOUT", "ndhwc", TRUE);
  gctx.gs->math = LB_MATH_BF16;
  const void *first = NULL;
  for (int round = 0; round < 2; round++) {
    g_autoptr (LbTensor) wt = host_rand (5, S (cout, cin, 3, 3, 3));
    g_autoptr (LbTensor) dw = to_dev (wt);
    g_assert_true (cpu_ops ()->conv3d_causal (gctx.cs, x, cache, wt, b, 0, 1,
            1, 1, y, &err));
    g_assert_no_error (err);
    if (round == 0)
      first = dw->data;
    for (int call = 0; call < 2; call++) {
      g_autoptr (LbTensor) dy = dev_poison (4, y->shape);
      guint64 n0, n1, w0, w1;
      conv_layout_stats (&n0, &w0);
      g_assert_true (gpu_ops ()->conv3d_causal (gctx.gs, dx, dcache, dw, db,
              0, 1, 1, 1, dy, &err));
      g_assert_no_error (err);
      sync_ok ();
      conv_layout_stats (&n1, &w1);
      g_autofree char *what = g_strdup_printf ("conv3d_causal/cudnn bf16 "
          "ndhwc weights %d call %d%s", round, call,
          round == 1 && dw->data == first ? " (same address)" : "");
      g_assert_cmpuint (n1 - n0, ==, 1);
      /* converted at the first call of each allocation only */
      g_assert_cmpuint (w1 - w0, ==, call == 0 ? 1 : 0);
      compare_dev (what, y, dy, TOL_CONV_BF16);
    }
  }
  gctx.gs->math = LB_MATH_FP32;
  g_unsetenv ("LINGBOT_CUDA_CONV_LAYOUT");
}

static void
test_conv (void)
{
  /* cin, cout, T, Tc, H, W, kt, kh, kw, pad, stride, bias */
  conv3d_case (1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 1, FALSE);
  conv3d_case (3, 5, 4, 0, 7, 9, 3, 3, 3, 1, 1, TRUE);  /* no cache */
  conv3d_case (4, 6, 3, 1, 8, 6, 3, 3, 3, 1, 1, TRUE);  /* short cache */
  conv3d_case (4, 6, 3, 2, 8, 6, 3, 3, 3, 1, 1, FALSE); /* full cache */
  conv3d_case (6, 8, 2, 2, 9, 11, 3, 1, 1, 0, 1, TRUE); /* time conv */
  conv3d_case (8, 4, 3, 0, 10, 12, 1, 1, 1, 0, 1, TRUE);        /* 1x1x1 direct */
  conv3d_case (8, 4, 2, 1, 10, 12, 1, 1, 1, 0, 1, FALSE);       /* direct + cache */
  conv3d_case (5, 7, 2, 0, 13, 15, 1, 3, 3, 0, 2, TRUE);        /* downsample */
  conv3d_case (32, 48, 2, 2, 30, 52, 3, 3, 3, 1, 1, TRUE);
  conv3d_case (3, 2, 2, 4, 6, 5, 3, 3, 3, 1, 1, TRUE);  /* Tc > kt - 1 */
  /* nb (0: 3-D), cin, cout, H, W, kh, kw, ph, pw, sh, sw, bias */
  conv2d_case (0, 3, 4, 5, 6, 3, 3, 1, 1, 1, 1, TRUE);
  conv2d_case (2, 5, 3, 9, 7, 3, 3, 0, 0, 2, 2, FALSE);
  conv2d_case (3, 16, 8, 17, 19, 1, 1, 0, 0, 1, 1, TRUE);
  conv2d_case (0, 2, 2, 4, 4, 3, 5, 2, 1, 1, 2, TRUE);
  conv2d_case (1, 64, 32, 40, 52, 3, 3, 1, 1, 1, 1, TRUE);
}

/* The VAE's convs (lingbot/vae-net.c, spec vae_and_distributed_spec.md
 * A.4/A.5) at reduced sizes: 3x3 convs read a halo-padded input (pad_h 0,
 * pad_w 1), causal 3x3x3 convs with Tc = 2 (every decoder call), 1 and 0,
 * the time_conv (3,1,1) C -> 2C, the 1x1x1 shortcut, the upsample conv
 * (1,3,3), the head (-> 3 channels), the encoder's 3x3 stride-2
 * downsample, a batched stride-2 conv2d. */
static void
test_conv_vae (void)
{
  /* cin, cout, T, Tc, H, W, kt, kh, kw, pad_h, pad_w, stride, bias */
  conv3d_case_hw (64, 64, 1, 2, 20, 32, 3, 3, 3, 0, 1, 1, TRUE);
  conv3d_case_hw (32, 32, 4, 2, 34, 40, 3, 3, 3, 0, 1, 1, TRUE);
  conv3d_case_hw (32, 32, 2, 1, 34, 40, 3, 3, 3, 0, 1, 1, TRUE);
  conv3d_case_hw (32, 32, 4, 0, 34, 40, 3, 3, 3, 0, 1, 1, TRUE);
  conv3d_case_hw (48, 96, 1, 2, 12, 20, 3, 1, 1, 0, 0, 1, TRUE);
  conv3d_case_hw (48, 96, 2, 0, 16, 24, 1, 1, 1, 0, 0, 1, TRUE);
  conv3d_case_hw (64, 32, 4, 0, 26, 32, 1, 3, 3, 0, 1, 1, TRUE);
  conv3d_case_hw (32, 3, 4, 2, 34, 40, 3, 3, 3, 0, 1, 1, TRUE);
  conv3d_case_hw (32, 32, 2, 0, 17, 25, 1, 3, 3, 0, 0, 2, TRUE);
  conv2d_case (2, 32, 16, 17, 23, 3, 3, 1, 1, 2, 2, TRUE);
  conv3d_unaligned_case ();
}

/* ---- fused DiT ops ---- */

/* The CPU fused op must equal its pair bit for bit (tests/unit/
 * test-ops-fused.c checks it thoroughly; here once more on the very
 * inputs the device sees). */
static void
same_bytes (const char *what, const LbTensor * a, const LbTensor * b)
{
  g_assert_cmpuint (lb_tensor_nbytes (a), ==, lb_tensor_nbytes (b));
  if (memcmp (a->data, b->data, lb_tensor_nbytes (a)) != 0)
    g_error ("%s: the CPU fused op differs from its op pair", what);
}

/* x [m, d] (a row-strided view when pad > 0, or y itself when in_place),
 * scale/shift [d] or [m, d]. */
static void
norm_modulate_case (int64_t m, int64_t d, gboolean affine, gboolean per_row,
    int pad, gboolean in_place)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (GError) err2 = NULL;
  g_autoptr (LbTensor) xp = host_random (2, S (m, d + pad), -3, 5);
  g_autoptr (LbTensor) w = host_random (1, S (d), 0.5, 1.5);
  g_autoptr (LbTensor) b = host_rand (1, S (d));
  g_autoptr (LbTensor) sc = per_row ? host_rand (2, S (m, d)) :
      host_rand (1, S (d));
  g_autoptr (LbTensor) sh = per_row ? host_rand (2, S (m, d)) :
      host_rand (1, S (d));
  g_autoptr (LbTensor) dxp = to_dev (xp);
  g_autoptr (LbTensor) dw = to_dev (w);
  g_autoptr (LbTensor) db = to_dev (b);
  g_autoptr (LbTensor) dsc = to_dev (sc);
  g_autoptr (LbTensor) dsh = to_dev (sh);
  LbTensor x, dx;
  lb_tensor_view_narrow (&x, xp, 1, 0, d);
  lb_tensor_view_narrow (&dx, dxp, 1, 0, d);
  const LbTensor *hw = affine ? w : NULL, *hb = affine ? b : NULL;
  const LbTensor *gw = affine ? dw : NULL, *gb = affine ? db : NULL;

  g_autoptr (LbTensor) pair = lb_tensor_new (LB_DTYPE_F32, 2, S (m, d));
  g_assert_true (cpu_ops ()->layer_norm (gctx.cs, &x, hw, hb, 1e-6f, pair,
          &err));
  g_assert_true (cpu_ops ()->modulate (gctx.cs, pair, sc, sh, pair, &err));
  g_assert_no_error (err);
  if (in_place) {
    g_assert_cmpint (pad, ==, 0);
    g_assert_true (cpu_ops ()->norm_modulate (gctx.cs, xp, hw, hb, 1e-6f, sc,
            sh, xp, &err));
    g_assert_true (gpu_ops ()->norm_modulate (gctx.gs, dxp, gw, gb, 1e-6f,
            dsc, dsh, dxp, &err));
    g_assert_no_error (err);
    same_bytes ("norm_modulate in place", xp, pair);
    compare_dev ("norm_modulate in place", xp, dxp, TOL);
    return;
  }
  g_autoptr (LbTensor) y = lb_tensor_new (LB_DTYPE_F32, 2, S (m, d));
  g_autoptr (LbTensor) dy = dev_poison (2, S (m, d));
  g_assert_true (cpu_ops ()->norm_modulate (gctx.cs, &x, hw, hb, 1e-6f, sc,
          sh, y, &err));
  g_assert_true (gpu_ops ()->norm_modulate (gctx.gs, &dx, gw, gb, 1e-6f, dsc,
          dsh, dy, &err));
  g_assert_no_error (err);
  same_bytes ("norm_modulate", y, pair);
  compare_dev ("norm_modulate", y, dy, TOL);

  /* a bad scale: same message on both */
  g_autoptr (LbTensor) bad = host_rand (2, S (m + 1, d));
  g_autoptr (LbTensor) dbad = to_dev (bad);
  gboolean c_ok = cpu_ops ()->norm_modulate (gctx.cs, &x, hw, hb, 1e-6f, bad,
      sh, y, &err);
  gboolean g_ok = gpu_ops ()->norm_modulate (gctx.gs, &dx, gw, gb, 1e-6f,
      dbad, dsh, dy, &err2);
  same_error ("norm_modulate bad scale", c_ok, err, g_ok, err2);
}

static void
test_norm_modulate (void)
{
  norm_modulate_case (1, 1, TRUE, FALSE, 0, FALSE);
  norm_modulate_case (7, 13, FALSE, TRUE, 0, FALSE);
  norm_modulate_case (33, 257, TRUE, TRUE, 3, FALSE);
  norm_modulate_case (300, 5120, FALSE, FALSE, 0, FALSE);
  norm_modulate_case (5, 4099, TRUE, FALSE, 17, FALSE);
  norm_modulate_case (64, 1536, FALSE, TRUE, 0, TRUE);
}

/* A GPU fused op's result (downloaded) against its GPU pair's. */
static void
gpu_same (const char *what, const LbTensor * a, const LbTensor * b)
{
  g_assert_cmpuint (lb_tensor_nbytes (a), ==, lb_tensor_nbytes (b));
  if (memcmp (a->data, b->data, lb_tensor_nbytes (a)) != 0)
    g_error ("%s: the GPU fused op differs from its op pair on the GPU", what);
}

/* norm_fp8 (kernels/ops-list.h): on the GPU bit for bit its pair on the
 * GPU (the f32 norm op, then each row quantised as gemm_fp8 quantises x,
 * here lb_quantize_e4m3_row() on the downloaded row: the formulas of the
 * device quantiser), the residual too; against the CPU oracle each code
 * within one E4M3 step (the f32 rows may differ in the last bit) and the
 * scales within TOL.  x [m, d]; with @residual first x += y. */
static void
norm_fp8_case (int64_t m, int64_t d, gboolean affine, gboolean modulate,
    gboolean per_row, gboolean residual)
{
  g_autoptr (GError) err = NULL;
  const float eps = 1e-6f;
  g_autoptr (LbTensor) x = host_random (2, S (m, d), -3, 5);
  g_autoptr (LbTensor) y = host_rand (2, S (m, d));
  g_autoptr (LbTensor) w = host_random (1, S (d), 0.5, 1.5);
  g_autoptr (LbTensor) b = host_rand (1, S (d));
  g_autoptr (LbTensor) sc = per_row ? host_rand (2, S (m, d)) :
      host_rand (1, S (d));
  g_autoptr (LbTensor) sh = per_row ? host_rand (2, S (m, d)) :
      host_rand (1, S (d));
  g_autoptr (LbTensor) dx1 = to_dev (x);
  g_autoptr (LbTensor) dx2 = to_dev (x);
  g_autoptr (LbTensor) dy = to_dev (y);
  g_autoptr (LbTensor) dw = to_dev (w);
  g_autoptr (LbTensor) db = to_dev (b);
  g_autoptr (LbTensor) dsc = to_dev (sc);
  g_autoptr (LbTensor) dsh = to_dev (sh);
  const LbTensor *gw = affine ? dw : NULL, *gb = affine ? db : NULL;
  const LbTensor *gsc = modulate ? dsc : NULL, *gsh = modulate ? dsh : NULL;
  const LbTensor *gy = residual ? dy : NULL;

  /* the pair on the GPU */
  g_autoptr (LbTensor) da = dev_poison (2, S (m, d));
  if (residual)
    g_assert_true (gpu_ops ()->residual_norm_modulate (gctx.gs, dx1, dy, NULL,
            gw, gb, eps, dsc, dsh, da, &err));
  else if (modulate)
    g_assert_true (gpu_ops ()->norm_modulate (gctx.gs, dx1, gw, gb, eps, dsc,
            dsh, da, &err));
  else
    g_assert_true (gpu_ops ()->layer_norm (gctx.gs, dx1, gw, gb, eps, da,
            &err));
  g_assert_no_error (err);
  g_autoptr (LbTensor) ha = to_host (da);
  g_autoptr (LbTensor) qref = lb_tensor_new (LB_DTYPE_F8E4M3, 2, S (m, d));
  g_autoptr (LbTensor) sref = lb_tensor_new (LB_DTYPE_F32, 1, S (m));
  for (int64_t i = 0; i < m; i++)
    lb_quantize_e4m3_row ((const float *) ha->data + i * d, d,
        (uint8_t *) qref->data + i * d, (float *) sref->data + i);

  /* the fused op on the GPU */
  g_autoptr (LbTensor) dq = lb_tensor_new_on (gctx.gs, LB_DTYPE_F8E4M3, 2,
      S (m, d), &err);
  g_assert_no_error (err);
  g_autoptr (LbTensor) dsq = dev_poison (1, S (m));
  g_assert_true (gpu_ops ()->norm_fp8 (gctx.gs, dx2, gy, NULL, gw, gb, eps,
          gsc, gsh, dq, dsq, &err));
  g_assert_no_error (err);
  g_autoptr (LbTensor) hq = to_host (dq);
  g_autoptr (LbTensor) hsq = to_host (dsq);
  gpu_same ("norm_fp8 codes", hq, qref);
  gpu_same ("norm_fp8 scales", hsq, sref);
  g_autoptr (LbTensor) hx1 = to_host (dx1);
  g_autoptr (LbTensor) hx2 = to_host (dx2);
  gpu_same ("norm_fp8 residual", hx2, hx1);

  /* against the CPU oracle */
  g_autoptr (LbTensor) cq = lb_tensor_new (LB_DTYPE_F8E4M3, 2, S (m, d));
  g_autoptr (LbTensor) csq = lb_tensor_new (LB_DTYPE_F32, 1, S (m));
  g_assert_true (cpu_ops ()->norm_fp8 (gctx.cs, x, residual ? y : NULL, NULL,
          affine ? w : NULL, affine ? b : NULL, eps, modulate ? sc : NULL,
          modulate ? sh : NULL, cq, csq, &err));
  g_assert_no_error (err);
  int64_t differ = 0;
  const uint8_t *gc = hq->data, *cc = cq->data;
  for (int64_t i = 0; i < m * d; i++) {
    if (gc[i] == cc[i])
      continue;
    differ++;
    const double a = lb_e4m3_to_f32 (gc[i]), c = lb_e4m3_to_f32 (cc[i]);
    /* one step: 2^-3 of the value, or the subnormal step 2^-9 */
    g_assert_cmpfloat (fabs (a - c), <=, fmax (fabs (c) * 0.125, 0x1p-9));
  }
  compare ("norm_fp8 scales vs the CPU", csq, hsq, TOL);
  g_print ("# norm_fp8 [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "] affine=%d "
      "modulate=%d per_row=%d residual=%d: GPU pair bit-identical; %"
      G_GINT64_FORMAT " codes of %" G_GINT64_FORMAT " one step off the CPU\n",
      m, d, affine, modulate, per_row, residual, differ, m * d);
}

static void
test_norm_fp8 (void)
{
  norm_fp8_case (1, 16, TRUE, FALSE, FALSE, FALSE);
  norm_fp8_case (7, 13, FALSE, TRUE, TRUE, FALSE);
  norm_fp8_case (33, 257, TRUE, TRUE, FALSE, TRUE);
  norm_fp8_case (300, 5120, FALSE, TRUE, FALSE, FALSE);
  norm_fp8_case (300, 5120, TRUE, FALSE, FALSE, FALSE);
  norm_fp8_case (257, 5120, FALSE, TRUE, FALSE, TRUE);
  norm_fp8_case (9, 13824, FALSE, TRUE, TRUE, FALSE);
}

typedef enum
{
  ROPE_Y_OWN,                   /* its own [N, H, hd] */
  ROPE_Y_IN_PLACE,              /* x seen as [N, H, hd] */
  ROPE_Y_CACHE,                 /* slots [3, 3 + N) of a [N + 8, H*hd] cache */
  ROPE_Y_PACKED,                /* k of a packed [N, 2, H, hd] */
} RopeY;

/* y (host or device) of @kind inside its base @yb (or @xb in place). */
static void
rope_y_view (LbTensor * y, RopeY kind, LbTensor * yb, LbTensor * xb,
    int64_t n, int64_t nh, int64_t hd)
{
  LbTensor rows;
  switch (kind) {
    case ROPE_Y_OWN:
      lb_tensor_view (y, yb);
      break;
    case ROPE_Y_IN_PLACE:
      g_assert_true (lb_tensor_view_reshape (y, xb, 3, S (n, nh, hd)));
      break;
    case ROPE_Y_CACHE:
      g_assert_true (lb_tensor_view_narrow (&rows, yb, 0, 3, n));
      g_assert_true (lb_tensor_view_reshape (y, &rows, 3, S (n, nh, hd)));
      break;
    case ROPE_Y_PACKED:
      g_assert_true (lb_tensor_view_select (y, yb, 1, 1));
      break;
  }
}

static void
rms_norm_rope_case (int64_t gf, int64_t gh, int64_t gw, int64_t nh,
    int64_t hd, int64_t f0, int64_t r0, int pad, RopeY kind)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (GError) err2 = NULL;
  LbTensor *cs, *sn;
  lb_rope_tables_new ((int) hd, 64, 10000.0, &cs, &sn);
  g_autoptr (LbTensor) hcos = cs;
  g_autoptr (LbTensor) hsin = sn;
  g_autoptr (LbTensor) dcos = to_dev (hcos);
  g_autoptr (LbTensor) dsin = to_dev (hsin);
  const int64_t n = gf * gh * gw, d = nh * hd;
  g_autoptr (LbTensor) xp = host_random (2, S (n, d + pad), -2, 3);
  g_autoptr (LbTensor) w = host_random (1, S (d), 0.5, 1.5);
  g_autoptr (LbTensor) dxp = to_dev (xp);
  g_autoptr (LbTensor) dw = to_dev (w);
  LbTensor x, dx, y, dy;
  lb_tensor_view_narrow (&x, xp, 1, 0, d);
  lb_tensor_view_narrow (&dx, dxp, 1, 0, d);

  /* the CPU pair on the rows, for the bit-identity check */
  g_autoptr (LbTensor) pair = lb_tensor_new (LB_DTYPE_F32, 2, S (n, d));
  LbTensor pair3;
  lb_tensor_view_reshape (&pair3, pair, 3, S (n, nh, hd));
  g_assert_true (cpu_ops ()->rms_norm (gctx.cs, &x, w, 1e-6f, pair, &err));
  g_assert_true (cpu_ops ()->rope_3d (gctx.cs, &pair3, hcos, hsin, gf, gh, gw,
          f0, r0, &err));
  g_assert_no_error (err);

  g_autoptr (LbTensor) yb = NULL;
  g_autoptr (LbTensor) dyb = NULL;
  if (kind == ROPE_Y_CACHE) {
    yb = host_nan (2, S (n + 8, d));
    dyb = dev_poison (2, S (n + 8, d));
  } else if (kind == ROPE_Y_PACKED) {
    yb = host_nan (4, S (n, 2, nh, hd));
    dyb = dev_poison (4, S (n, 2, nh, hd));
  } else if (kind == ROPE_Y_OWN) {
    yb = host_nan (3, S (n, nh, hd));
    dyb = dev_poison (3, S (n, nh, hd));
  } else {
    g_assert_cmpint (pad, ==, 0);
  }
  rope_y_view (&y, kind, yb, xp, n, nh, hd);
  rope_y_view (&dy, kind, dyb, dxp, n, nh, hd);
  g_assert_true (cpu_ops ()->rms_norm_rope (gctx.cs, &x, w, 1e-6f, hcos,
          hsin, gf, gh, gw, f0, r0, &y, &err));
  g_assert_true (gpu_ops ()->rms_norm_rope (gctx.gs, &dx, dw, 1e-6f, dcos,
          dsin, gf, gh, gw, f0, r0, &dy, &err));
  g_assert_no_error (err);
  /* the whole base: slots or gaps outside the view stay NaN on both */
  static const char *names[] = { "rms_norm_rope", "rms_norm_rope in place",
    "rms_norm_rope into cache slots", "rms_norm_rope packed"
  };
  g_autoptr (LbTensor) yc = lb_tensor_new (LB_DTYPE_F32, 3, S (n, nh, hd));
  g_assert_true (lb_tensor_copy_into (yc, &y, NULL));
  same_bytes (names[kind], yc, pair);
  if (kind == ROPE_Y_IN_PLACE)
    compare_dev (names[kind], xp, dxp, TOL);
  else
    compare_dev (names[kind], yb, dyb, TOL);

  /* positions past the table: same message on both */
  gboolean c_ok = cpu_ops ()->rms_norm_rope (gctx.cs, &x, w, 1e-6f, hcos,
      hsin, gf, gh, gw, 64, r0, &y, &err);
  gboolean g_ok = gpu_ops ()->rms_norm_rope (gctx.gs, &dx, dw, 1e-6f, dcos,
      dsin, gf, gh, gw, 64, r0, &dy, &err2);
  same_error ("rms_norm_rope past the table", c_ok, err, g_ok, err2);
}

static void
test_rms_norm_rope (void)
{
  rms_norm_rope_case (1, 1, 1, 1, 2, 0, 0, 0, ROPE_Y_OWN);
  rms_norm_rope_case (2, 3, 5, 2, 32, 3, 0, 0, ROPE_Y_IN_PLACE);
  rms_norm_rope_case (2, 3, 5, 2, 32, 3, 0, 5, ROPE_Y_CACHE);
  rms_norm_rope_case (4, 6, 7, 3, 128, 10, 4, 0, ROPE_Y_CACHE);
  rms_norm_rope_case (3, 5, 11, 5, 64, 0, 7, 3, ROPE_Y_PACKED);
  /* DiT-14B heads (40 x 128 = 5120 per token): more pairs than threads */
  rms_norm_rope_case (2, 4, 13, 40, 128, 21, 30, 0, ROPE_Y_CACHE);
  rms_norm_rope_case (1, 2, 3, 40, 128, 0, 0, 0, ROPE_Y_IN_PLACE);
}

/* x [m, d] row-strided when pad > 0; gate 0: NULL, 1: [d], 2: [m, d]. */
static void
gated_residual_modulate_case (int64_t m, int64_t d, int gate,
    gboolean per_row, int pad)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (GError) err2 = NULL;
  g_autoptr (LbTensor) xp = host_random (2, S (m, d + pad), -4, 4);
  g_autoptr (LbTensor) xq = lb_tensor_copy (xp);
  g_autoptr (LbTensor) yv = host_random (2, S (m, d), -2, 2);
  g_autoptr (LbTensor) gt = gate == 2 ? host_rand (2, S (m, d)) :
      host_rand (1, S (d));
  g_autoptr (LbTensor) sc = per_row ? host_rand (2, S (m, d)) :
      host_rand (1, S (d));
  g_autoptr (LbTensor) sh = per_row ? host_rand (2, S (m, d)) :
      host_rand (1, S (d));
  g_autoptr (LbTensor) dxp = to_dev (xp);
  g_autoptr (LbTensor) dyv = to_dev (yv);
  g_autoptr (LbTensor) dgt = to_dev (gt);
  g_autoptr (LbTensor) dsc = to_dev (sc);
  g_autoptr (LbTensor) dsh = to_dev (sh);
  LbTensor x, xr, dx;
  lb_tensor_view_narrow (&x, xp, 1, 0, d);
  lb_tensor_view_narrow (&xr, xq, 1, 0, d);
  lb_tensor_view_narrow (&dx, dxp, 1, 0, d);
  g_assert_true (cpu_ops ()->gated_residual (gctx.cs, &xr, yv,
          gate ? gt : NULL, &err));
  g_assert_true (cpu_ops ()->modulate (gctx.cs, &xr, sc, sh, &xr, &err));
  g_assert_true (cpu_ops ()->gated_residual_modulate (gctx.cs, &x, yv,
          gate ? gt : NULL, sc, sh, &err));
  g_assert_true (gpu_ops ()->gated_residual_modulate (gctx.gs, &dx, dyv,
          gate ? dgt : NULL, dsc, dsh, &err));
  g_assert_no_error (err);
  same_bytes ("gated_residual_modulate", xp, xq);
  compare_dev ("gated_residual_modulate", xp, dxp, TOL);

  g_autoptr (LbTensor) bad = host_rand (1, S (d + 1));
  g_autoptr (LbTensor) dbad = to_dev (bad);
  gboolean c_ok = cpu_ops ()->gated_residual_modulate (gctx.cs, &x, yv, NULL,
      sc, bad, &err);
  gboolean g_ok = gpu_ops ()->gated_residual_modulate (gctx.gs, &dx, dyv,
      NULL, dsc, dbad, &err2);
  same_error ("gated_residual_modulate bad shift", c_ok, err, g_ok, err2);
}

static void
test_gated_residual_modulate (void)
{
  gated_residual_modulate_case (1, 1, 1, FALSE, 0);
  gated_residual_modulate_case (9, 31, 2, TRUE, 0);
  gated_residual_modulate_case (129, 640, 0, FALSE, 5);
  gated_residual_modulate_case (64, 1000, 1, TRUE, 1);
  gated_residual_modulate_case (300, 5120, 1, TRUE, 0);
}

/* ---- a bf16 KV cache: rms_norm_rope into bf16 slots, converting copy ----
 *
 * rms_norm_rope with a bf16 y must store, bit for bit, the device's own
 * f32 result (the same op into an f32 y) rounded by lb_f32_to_bf16; the
 * device's f32 result is within TOL of the CPU's (test_rms_norm_rope), so
 * against the CPU's bf16 output each element may differ by at most one
 * bf16 step (adjacent patterns), the count is printed.  Slots outside
 * the view keep their poison bits.  copy between f32 and bf16 is exact on
 * both backends: every bf16 pattern widened and rounded back, random f32
 * bit patterns (NaN, inf, subnormals) rounded, strided, permuted,
 * broadcast and 5-D views; the device's bytes equal the CPU's. */

/* A bf16 host tensor filled with 0xffff (a NaN). */
static LbTensor *
host_bf16_poison (int ndim, const int64_t * shape)
{
  LbTensor *t = lb_tensor_new (LB_DTYPE_BF16, ndim, shape);
  memset (t->data, 0xff, lb_tensor_nbytes (t));
  return t;
}

/* Element @flat (row-major) of a possibly strided bf16 view. */
static uint16_t
at_bf16 (const LbTensor * t, int64_t flat)
{
  int64_t off = 0;
  for (int i = t->ndim - 1; i >= 0; i--) {
    off += (flat % t->shape[i]) * t->stride[i];
    flat /= t->shape[i];
  }
  return ((const uint16_t *) t->data)[off];
}

/* The same view geometry on another base of the same dtype and shape. */
static void
rebase (LbTensor * out, const LbTensor * view, const LbTensor * vbase,
    const LbTensor * base)
{
  const gsize es = lb_dtype_size (view->dtype);
  const ptrdiff_t off = ((const char *) view->data -
      (const char *) vbase->data) / (ptrdiff_t) es;
  lb_tensor_view_init (out, view->dtype, (char *) base->data + off * es,
      base->device, view->ndim, view->shape, view->stride);
}

static void
rope_bf16_case (int64_t gf, int64_t gh, int64_t gw, int64_t nh, int64_t hd,
    int64_t f0, int64_t r0, int pad, RopeY kind)
{
  g_autoptr (GError) err = NULL;
  g_assert_true (kind != ROPE_Y_IN_PLACE);
  LbTensor *cs, *sn;
  lb_rope_tables_new ((int) hd, 64, 10000.0, &cs, &sn);
  g_autoptr (LbTensor) hcos = cs;
  g_autoptr (LbTensor) hsin = sn;
  g_autoptr (LbTensor) dcos = to_dev (hcos);
  g_autoptr (LbTensor) dsin = to_dev (hsin);
  const int64_t n = gf * gh * gw, d = nh * hd;
  g_autoptr (LbTensor) xp = host_random (2, S (n, d + pad), -2, 3);
  g_autoptr (LbTensor) w = host_random (1, S (d), 0.5, 1.5);
  g_autoptr (LbTensor) dxp = to_dev (xp);
  g_autoptr (LbTensor) dw = to_dev (w);
  LbTensor x, dx, y, yv, dy;
  lb_tensor_view_narrow (&x, xp, 1, 0, d);
  lb_tensor_view_narrow (&dx, dxp, 1, 0, d);

  /* the device's f32 result */
  g_autoptr (LbTensor) dy32 = dev_poison (3, S (n, nh, hd));
  g_assert_true (gpu_ops ()->rms_norm_rope (gctx.gs, &dx, dw, 1e-6f, dcos,
          dsin, gf, gh, gw, f0, r0, dy32, &err));
  g_assert_no_error (err);
  g_autoptr (LbTensor) hy32 = to_host (dy32);

  /* bf16 on both: the base of the view kind, poisoned */
  g_autoptr (LbTensor) yb = kind == ROPE_Y_CACHE ?
      host_bf16_poison (2, S (n + 8, d)) : kind == ROPE_Y_PACKED ?
      host_bf16_poison (4, S (n, 2, nh, hd)) :
      host_bf16_poison (3, S (n, nh, hd));
  g_autoptr (LbTensor) dyb = to_dev (yb);
  rope_y_view (&yv, kind, yb, xp, n, nh, hd);
  lb_tensor_view (&y, &yv);
  rebase (&dy, &yv, yb, dyb);
  g_assert_cmpint (dy.dtype, ==, LB_DTYPE_BF16);
  g_assert_true (cpu_ops ()->rms_norm_rope (gctx.cs, &x, w, 1e-6f, hcos,
          hsin, gf, gh, gw, f0, r0, &y, &err));
  g_assert_true (gpu_ops ()->rms_norm_rope (gctx.gs, &dx, dw, 1e-6f, dcos,
          dsin, gf, gh, gw, f0, r0, &dy, &err));
  g_assert_no_error (err);
  g_autoptr (LbTensor) hyb = to_host (dyb);
  LbTensor got;
  rebase (&got, &yv, yb, hyb);
  const float *r32 = hy32->data;
  int64_t steps = 0;
  for (int64_t i = 0; i < n * d; i++) {
    const uint16_t g16 = at_bf16 (&got, i), c16 = at_bf16 (&y, i);
    if (g16 != lb_f32_to_bf16 (r32[i]))
      g_error ("rms_norm_rope bf16: element %" G_GINT64_FORMAT " is 0x%04x "
          "on CUDA, the rounding of its f32 result %.9g is 0x%04x", i, g16,
          (double) r32[i], lb_f32_to_bf16 (r32[i]));
    if (g16 != c16) {
      /* same sign, adjacent magnitudes */
      if (((g16 ^ c16) & 0x8000) != 0 || ABS ((int) (g16 & 0x7fff) -
              (int) (c16 & 0x7fff)) != 1)
        g_error ("rms_norm_rope bf16: element %" G_GINT64_FORMAT " is "
            "0x%04x on CUDA, 0x%04x on the CPU", i, g16, c16);
      steps++;
    }
  }
  /* outside the view: the poison on both */
  int64_t poison_h = 0, poison_d = 0;
  for (int64_t i = 0; i < lb_tensor_numel (yb); i++) {
    poison_h += ((uint16_t *) yb->data)[i] == 0xffff;
    poison_d += ((uint16_t *) hyb->data)[i] == 0xffff;
  }
  g_assert_cmpint (poison_h, ==, poison_d);
  g_assert_cmpint (poison_d, >=, lb_tensor_numel (yb) - n * d);
  printf ("# rms_norm_rope-bf16 [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
      ", %" G_GINT64_FORMAT "]: bf16(f32) bit for bit, %" G_GINT64_FORMAT
      " of %" G_GINT64_FORMAT " one bf16 step from the CPU\n", n, nh, hd,
      steps, n * d);
}

static void
test_rms_norm_rope_bf16 (void)
{
  rope_bf16_case (1, 1, 1, 1, 2, 0, 0, 0, ROPE_Y_OWN);
  rope_bf16_case (2, 3, 5, 2, 32, 3, 0, 5, ROPE_Y_CACHE);
  rope_bf16_case (3, 5, 11, 5, 64, 0, 7, 3, ROPE_Y_PACKED);
  /* DiT-14B heads into cache slots */
  rope_bf16_case (2, 4, 13, 40, 128, 21, 30, 0, ROPE_Y_CACHE);

  /* y f16: the same message on both */
  g_autoptr (GError) e1 = NULL;
  g_autoptr (GError) e2 = NULL;
  LbTensor *cs, *sn;
  lb_rope_tables_new (8, 16, 10000.0, &cs, &sn);
  g_autoptr (LbTensor) hcos = cs;
  g_autoptr (LbTensor) hsin = sn;
  g_autoptr (LbTensor) dcos = to_dev (hcos);
  g_autoptr (LbTensor) dsin = to_dev (hsin);
  g_autoptr (LbTensor) x = host_rand (2, S (6, 16));
  g_autoptr (LbTensor) dx = to_dev (x);
  g_autoptr (LbTensor) yh = lb_tensor_new (LB_DTYPE_F16, 3, S (6, 2, 8));
  memset (yh->data, 0, lb_tensor_nbytes (yh));
  g_autoptr (LbTensor) dyh = to_dev (yh);
  gboolean c_ok = cpu_ops ()->rms_norm_rope (gctx.cs, x, NULL, 1e-6f, hcos,
      hsin, 1, 2, 3, 0, 0, yh, &e1);
  gboolean g_ok = gpu_ops ()->rms_norm_rope (gctx.gs, dx, NULL, 1e-6f, dcos,
      dsin, 1, 2, 3, 0, 0, dyh, &e2);
  same_error ("rms_norm_rope f16 y", c_ok, e1, g_ok, e2);
  g_assert_cmpstr (e2->message, ==, "rms_norm_rope: y is f16 [6, 2, 8], "
      "expected f32 or bf16 [6, *, *]");
}

/* copy @x -> @y on both backends (device views rebased on @dxb / @dyb),
 * then the whole device base of y must be the CPU's bytes. */
static void
copy_pair (const char *what, const LbTensor * x, const LbTensor * xb,
    const LbTensor * dxb, const LbTensor * y, LbTensor * yb,
    const LbTensor * dyb)
{
  g_autoptr (GError) err = NULL;
  LbTensor dx, dy, hx = *x, hy = *y;
  rebase (&dx, x, xb, dxb);
  rebase (&dy, y, yb, dyb);
  g_assert_true (cpu_ops ()->copy (gctx.cs, &hx, &hy, &err));
  g_assert_true (gpu_ops ()->copy (gctx.gs, &dx, &dy, &err));
  g_assert_no_error (err);
  g_autoptr (LbTensor) back = to_host (dyb);
  if (memcmp (back->data, yb->data, lb_tensor_nbytes (yb)) != 0)
    g_error ("copy %s: the device's bytes differ from the CPU's", what);
  printf ("# copy-%s: bit-identical over %" G_GINT64_FORMAT " elements\n",
      what, lb_tensor_numel (x));
}

static void
test_copy_bf16 (void)
{
  /* every bf16 pattern -> f32 -> bf16 */
  const int64_t n = 65536;
  g_autoptr (LbTensor) b = lb_tensor_new (LB_DTYPE_BF16, 1, S (n));
  for (int64_t i = 0; i < n; i++)
    ((uint16_t *) b->data)[i] = (uint16_t) i;
  g_autoptr (LbTensor) db = to_dev (b);
  g_autoptr (LbTensor) f = host_nan (1, S (n));
  g_autoptr (LbTensor) df = to_dev (f);
  copy_pair ("bf16-to-f32", b, b, db, f, f, df);
  for (int64_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy (&u, (float *) f->data + i, 4);
    g_assert_cmphex (u, ==, (uint32_t) i << 16);
  }
  g_autoptr (LbTensor) b2 = host_bf16_poison (1, S (n));
  g_autoptr (LbTensor) db2 = to_dev (b2);
  copy_pair ("f32-to-bf16 (patterns)", f, f, df, b2, b2, db2);

  /* random f32 bit patterns (NaN payloads, infinities, subnormals) */
  const int64_t m = 100003;
  g_autoptr (LbTensor) r = lb_tensor_new (LB_DTYPE_F32, 1, S (m));
  for (int64_t i = 0; i < m; i++) {
    uint32_t u = g_rand_int (gctx.rand);
    memcpy ((float *) r->data + i, &u, 4);
  }
  g_autoptr (LbTensor) dr = to_dev (r);
  g_autoptr (LbTensor) rb = host_bf16_poison (1, S (m));
  g_autoptr (LbTensor) drb = to_dev (rb);
  copy_pair ("f32-to-bf16 (random bits)", r, r, dr, rb, rb, drb);
  for (int64_t i = 0; i < m; i++)
    g_assert_cmphex (((uint16_t *) rb->data)[i], ==,
        lb_f32_to_bf16 (((float *) r->data)[i]));

  /* f32 [4, 3, 70] permuted to [70, 4, 3] -> bf16 rows [2, 72) of a
   * [75, 4, 3] cache */
  g_autoptr (LbTensor) x3 = host_random (3, S (4, 3, 70), -50, 50);
  g_autoptr (LbTensor) dx3 = to_dev (x3);
  static const int perm[3] = { 2, 0, 1 };
  LbTensor xp, yv;
  g_assert_true (lb_tensor_view_permute (&xp, x3, perm));
  g_autoptr (LbTensor) c3 = host_bf16_poison (3, S (75, 4, 3));
  g_autoptr (LbTensor) dc3 = to_dev (c3);
  g_assert_true (lb_tensor_view_narrow (&yv, c3, 0, 2, 70));
  copy_pair ("f32-to-bf16 (permuted into cache rows)", &xp, x3, dx3, &yv,
      c3, dc3);

  /* those bf16 rows -> every other column of an f32 [70, 4, 6] */
  g_autoptr (LbTensor) z = host_nan (3, S (70, 4, 6));
  g_autoptr (LbTensor) dz = to_dev (z);
  LbTensor zv;
  lb_tensor_view_init (&zv, LB_DTYPE_F32, z->data, LB_DEVICE_HOST, 3,
      S (70, 4, 3), S (24, 6, 2));
  g_autoptr (LbTensor) dc3b = to_dev (c3);
  copy_pair ("bf16-to-f32 (strided)", &yv, c3, dc3b, &zv, z, dz);

  /* a bf16 row broadcast (stride 0) over 33 rows of f32 */
  g_autoptr (LbTensor) row = lb_tensor_new (LB_DTYPE_BF16, 1, S (130));
  for (int64_t i = 0; i < 130; i++)
    ((uint16_t *) row->data)[i] = lb_f32_to_bf16 ((float) (i - 60) / 7.0f);
  g_autoptr (LbTensor) drow = to_dev (row);
  LbTensor bc;
  lb_tensor_view_init (&bc, LB_DTYPE_BF16, row->data, LB_DEVICE_HOST, 2,
      S (33, 130), S (0, 1));
  g_autoptr (LbTensor) o2 = host_nan (2, S (33, 130));
  g_autoptr (LbTensor) do2 = to_dev (o2);
  copy_pair ("bf16-to-f32 (broadcast)", &bc, row, drow, o2, o2, do2);

  /* 5-D bf16 -> bf16 into slots [1, 3) of dim 2 */
  g_autoptr (LbTensor) s5 = lb_tensor_new (LB_DTYPE_BF16, 5, S (2, 3, 2, 5, 7));
  for (int64_t i = 0; i < lb_tensor_numel (s5); i++)
    ((uint16_t *) s5->data)[i] = (uint16_t) g_rand_int (gctx.rand);
  g_autoptr (LbTensor) ds5 = to_dev (s5);
  g_autoptr (LbTensor) t5 = host_bf16_poison (5, S (2, 3, 4, 5, 7));
  g_autoptr (LbTensor) dt5 = to_dev (t5);
  LbTensor t5v;
  g_assert_true (lb_tensor_view_narrow (&t5v, t5, 2, 1, 2));
  copy_pair ("bf16-to-bf16 (5-D)", s5, s5, ds5, &t5v, t5, dt5);

  /* f16 is not a copy dtype: the same message on both */
  g_autoptr (GError) e1 = NULL;
  g_autoptr (GError) e2 = NULL;
  g_autoptr (LbTensor) h = lb_tensor_new (LB_DTYPE_F16, 2, S (3, 4));
  memset (h->data, 0, lb_tensor_nbytes (h));
  g_autoptr (LbTensor) dh = to_dev (h);
  g_autoptr (LbTensor) f34 = host_rand (2, S (3, 4));
  g_autoptr (LbTensor) df34 = to_dev (f34);
  gboolean c_ok = cpu_ops ()->copy (gctx.cs, h, f34, &e1);
  gboolean g_ok = gpu_ops ()->copy (gctx.gs, dh, df34, &e2);
  same_error ("copy f16 x", c_ok, e1, g_ok, e2);
  g_assert_cmpstr (e2->message, ==, "copy: x is f16 [3, 4], expected f32 or "
      "bf16 [3, 4]");
}

static void
test_device_check (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LbTensor) hx = host_rand (2, S (4, 8));
  g_autoptr (LbTensor) dy = dev_poison (2, S (4, 8));
  g_assert_false (gpu_ops ()->silu (gctx.gs, hx, dy, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_nonnull (strstr (err->message, "on device cpu:0"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (!gpu_ctx_init ())
    return 77;
  g_test_add_func ("/gpu/ops/table", test_table);
  g_test_add_func ("/gpu/ops/allocator", test_allocator);
  g_test_add_func ("/gpu/ops/conv", test_conv);
  g_test_add_func ("/gpu/ops/conv-vae", test_conv_vae);
  g_test_add_func ("/gpu/ops/conv-ndhwc-weights", test_conv_ndhwc_weights);
  g_test_add_func ("/gpu/ops/norm-modulate", test_norm_modulate);
  g_test_add_func ("/gpu/ops/norm-fp8", test_norm_fp8);
  g_test_add_func ("/gpu/ops/rms-norm-rope", test_rms_norm_rope);
  g_test_add_func ("/gpu/ops/rms-norm-rope-bf16", test_rms_norm_rope_bf16);
  g_test_add_func ("/gpu/ops/copy-bf16", test_copy_bf16);
  g_test_add_func ("/gpu/ops/gated-residual-modulate",
      test_gated_residual_modulate);
  g_test_add_func ("/gpu/ops/device-check", test_device_check);
  /* the table of op cases (tests/common/op-cases.c): the norms,
   * modulation, elementwise, RoPE, layout, strided, channel-norm, halo
   * upsample and ray-map cases, and every op's argument errors */
  const OpCasesTarget target = { gctx.cs, gctx.gs, FALSE };
  op_cases_add_tests ("/gpu/ops/cases", &target);
  int rc = g_test_run ();
  sync_ok ();
  return rc;
}

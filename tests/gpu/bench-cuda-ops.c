/* lingbot-gst: times every CUDA op at the shapes of one DiT-14B chunk
 * (spec lingbot_model_spec.md 7.1: 6240 query tokens, 40 heads x 128,
 * D = 5120, FFN 13824, KV 6240..28080 tokens) and of the VAE decoder
 * (vae_and_distributed_spec.md: 384 channels at 60x104, mid-block
 * attention hd 384).  One JSON line per case on stdout:
 *   {"op":..., "case":..., "ms":..., "gflops":..., "gbps":...}
 * (GEMMs with bf16 weights, the DiT's bf16 ranks, add "math":
 * "bf16-weights", "s" and "tflops"; the fp8 GEMMs of LB_MATH_FP8 ranks,
 * gemm_fp8 quantising an f32 x and gemm_fp8_q on the codes norm_fp8
 * writes, norm_fp8 against the f32 norm_modulate, gemm_fp8_gelu_q against
 * gemm_fp8_q + gelu_tanh, add "math": "fp8", "f32-norm_modulate" or
 * "fp8-pair"; attention adds "math": "fp32", "bf16"
 * (own tensor-core kernel) or
 * "bf16-cudnn" (cuDNN's fused SDPA, LINGBOT_CUDA_ATTENTION=cudnn, the
 * default; an "error" line when cuDNN did not take the call; at Nk 28080
 * also with bf16 K and V, the DiT's bf16 KV cache), "s" and "tflops"; the
 * convolutions add "path": "cudnn", "cudnn-ndhwc" or "im2col", "math",
 * "s", "tflops",
 * "calls_per_chunk" and "chunk_ms", see bench_conv_path()).
 * Inputs are uninitialised device memory filled with a constant (timing
 * only).  Exits 77 without a device.  Usage: bench-cuda-ops [filter]
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#define _GNU_SOURCE             /* dladdr */
#include "lingbot/backend.h"
#include "kernels/error.h"

#include <dlfcn.h>
#include <gmodule.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static LbBackend *cuda;
static LbStream *gs;
static const char *filter;

static LbTensor *
dev (int ndim, const int64_t * shape)
{
  g_autoptr (GError) err = NULL;
  LbTensor *t = lb_tensor_new_on (gs, LB_DTYPE_F32, ndim, shape, &err);
  if (t == NULL)
    g_error ("alloc: %s", err->message);
  /* small values so nothing overflows: y = 0 * y + 0.01 */
  int64_t n = lb_tensor_numel (t);
  LbTensor flat;
  lb_tensor_view_reshape (&flat, t, 1, &n);
  lb_ops (gs)->scale (gs, &flat, 0.0f, 0.01f, &flat, NULL);
  return t;
}

#define SHAPE(...) ((const int64_t[]) { __VA_ARGS__ })

/* A bf16 device copy of the f32 device tensor @x (the converting copy). */
static LbTensor *
dev_bf16 (const LbTensor * x)
{
  g_autoptr (GError) err = NULL;
  LbTensor *t = lb_tensor_new_on (gs, LB_DTYPE_BF16, x->ndim, x->shape, &err);
  if (t == NULL || !lb_ops (gs)->copy (gs, x, t, &err))
    g_error ("bf16 copy: %s", err->message);
  return t;
}

typedef gboolean (*RunFunc) (gpointer data, GError ** error);

/* Times @f on the stream in math mode @math (one warm-up call, then
 * @iters timed calls); @math_name non-NULL adds "math", "s" and "tflops"
 * to the line.  The stream is back in FP32 mode afterwards. */
static void
bench_math (const char *op, LbMathMode math, const char *math_name,
    const char *name, double flops, double bytes, int iters, RunFunc f,
    gpointer data)
{
  if (filter && strstr (op, filter) == NULL)
    return;
  g_autoptr (GError) err = NULL;
  g_autofree char *mfield = math_name ?
      g_strdup_printf (",\"math\":\"%s\"", math_name) : g_strdup ("");
  cuda->stream_synchronize (gs, NULL);  /* nothing queued: mode change */
  gs->math = math;
  gboolean ok = f (data, &err) && cuda->stream_synchronize (gs, &err);
  double ms = 0;
  if (ok) {
    gint64 t0 = g_get_monotonic_time ();
    for (int i = 0; ok && i < iters; i++)
      ok = f (data, &err);
    ok = ok && cuda->stream_synchronize (gs, &err);
    ms = (g_get_monotonic_time () - t0) / 1000.0 / iters;
  }
  cuda->stream_synchronize (gs, NULL);
  gs->math = LB_MATH_FP32;
  if (!ok) {
    printf ("{\"op\":\"%s\"%s,\"case\":\"%s\",\"error\":\"%s\"}\n", op,
        mfield, name, err ? err->message : "?");
  } else if (math_name) {
    printf ("{\"op\":\"%s\"%s,\"case\":\"%s\",\"ms\":%.4f,\"s\":%.6f,"
        "\"tflops\":%.2f,\"gflops\":%.1f,\"gbps\":%.1f}\n", op, mfield, name,
        ms, ms / 1000.0, flops / ms / 1e9, flops / ms / 1e6, bytes / ms / 1e6);
  } else {
    printf ("{\"op\":\"%s\",\"case\":\"%s\",\"ms\":%.4f,\"gflops\":%.1f,"
        "\"gbps\":%.1f}\n", op, name, ms, flops / ms / 1e6, bytes / ms / 1e6);
  }
  fflush (stdout);
}

static void
bench (const char *op, const char *name, double flops, double bytes,
    int iters, RunFunc f, gpointer data)
{
  bench_math (op, LB_MATH_FP32, NULL, name, flops, bytes, iters, f, data);
}

typedef struct
{
  LbTensor *a, *b, *c, *d, *e;
  int64_t i0, i1, i2;
  float f;
} Args;

static gboolean
run_gemm (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->gemm (gs, a->a, a->b, TRUE, a->c, 1.0f, 0.0f, a->d,
      error);
}

/* the FFN's first layer: gemm_gelu_tanh into the bf16 y a->e (cuBLASLt's
 * GELU epilogue), or with a->i0 the op pair it replaces (gemm into the
 * f32 a->d, then the GELU kernel into a->e) */
static gboolean
run_gemm_gelu (gpointer p, GError ** error)
{
  Args *a = p;
  if (a->i0)
    return lb_ops (gs)->gemm (gs, a->a, a->b, TRUE, a->c, 1.0f, 0.0f, a->d,
        error) && lb_ops (gs)->gelu_tanh (gs, a->d, a->e, error);
  return lb_ops (gs)->gemm_gelu_tanh (gs, a->a, a->b, TRUE, a->c, 1.0f, a->e,
      error);
}

/* The fp8 linear layer (LB_MATH_FP8 ranks, kernels/ops-list.h): e4m3 w
 * [N, K] and its scales sw; x f32 [M, K] quantised by gemm_fp8 (mode 0),
 * or its codes xq and row scales sx written by norm_fp8 and read by
 * gemm_fp8_q (mode 1); norm_fp8 itself (mode 2: the producer, with the
 * modulation) and the norm_modulate it replaces into f32 (mode 3); the
 * FFN's first layer writing the codes of its GELU, gemm_fp8_gelu_q (mode
 * 4), and the pair it replaces, gemm_fp8_q into f32 then gelu_tanh (mode
 * 5; the pair's third pass, the quantisation of the f32 hidden, is the
 * difference of the gemm_fp8 and gemm_fp8_q lines at K 13824). */
typedef struct
{
  LbTensor *x, *w, *sw, *bias, *y, *xq, *sx, *scale, *shift, *a;
  LbTensor *yq, *sy;            /* gemm_fp8_gelu_q's codes and scales */
  int mode;
} Fp8Args;

static gboolean
run_fp8 (gpointer p, GError ** error)
{
  Fp8Args *a = p;
  switch (a->mode) {
    case 0:
      return lb_ops (gs)->gemm_fp8 (gs, a->x, a->w, a->sw, a->bias, 1.0f,
          0.0f, a->y, error);
    case 1:
      return lb_ops (gs)->gemm_fp8_q (gs, a->xq, a->sx, a->w, a->sw, a->bias,
          1.0f, 0.0f, a->y, error);
    case 2:
      return lb_ops (gs)->norm_fp8 (gs, a->x, NULL, NULL, NULL, NULL, 1e-6f,
          a->scale, a->shift, a->xq, a->sx, error);
    case 4:
      return lb_ops (gs)->gemm_fp8_gelu_q (gs, a->xq, a->sx, a->w, a->sw,
          a->bias, 1.0f, a->yq, a->sy, error);
    case 5:
      return lb_ops (gs)->gemm_fp8_q (gs, a->xq, a->sx, a->w, a->sw, a->bias,
          1.0f, 0.0f, a->y, error) &&
          lb_ops (gs)->gelu_tanh (gs, a->y, a->y, error);
    default:
      return lb_ops (gs)->norm_modulate (gs, a->x, NULL, NULL, 1e-6f,
          a->scale, a->shift, a->a, error);
  }
}

/* A device e4m3 tensor of @shape, every code 0x38 (1.0). */
static LbTensor *
dev_e4m3 (int ndim, const int64_t * shape)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LbTensor) h = lb_tensor_new (LB_DTYPE_F8E4M3, ndim, shape);
  memset (h->data, 0x38, lb_tensor_nbytes (h));
  LbTensor *t = lb_tensor_new_on (gs, LB_DTYPE_F8E4M3, ndim, shape, &err);
  if (t == NULL || !lb_tensor_upload (gs, t, h, &err))
    g_error ("e4m3 upload: %s", err->message);
  return t;
}

/* The fp8 lines of one block GEMM [n, k] x [no, k]^T (math "fp8"): the
 * GEMM quantising its f32 x, the GEMM on norm_fp8's codes, and for K = D
 * the producer against the f32 norm it replaces. */
static void
bench_fp8 (int64_t n, int64_t no, int64_t k, const char *nm)
{
  g_autoptr (GError) err = NULL;
  Fp8Args f = { 0 };
  f.x = dev (2, SHAPE (n, k));
  f.w = dev_e4m3 (2, SHAPE (no, k));
  f.sw = dev (1, SHAPE (no));
  f.bias = dev (1, SHAPE (no));
  f.y = dev (2, SHAPE (n, no));
  f.scale = dev (1, SHAPE (k));
  f.shift = dev (1, SHAPE (k));
  f.xq = lb_tensor_new_on (gs, LB_DTYPE_F8E4M3, 2, SHAPE (n, k), &err);
  f.sx = f.xq ? lb_tensor_new_on (gs, LB_DTYPE_F32, 1, SHAPE (n), &err) : NULL;
  if (f.sx == NULL)
    g_error ("alloc: %s", err->message);
  /* the codes of x for gemm_fp8_q, by the producer */
  f.mode = 2;
  if (!run_fp8 (&f, &err))
    g_error ("norm_fp8: %s", err->message);
  const double flops = 2.0 * n * no * k;
  f.mode = 0;
  bench_math ("gemm_fp8", LB_MATH_FP8, "fp8", nm, flops,
      4.0 * n * k + (double) n * k + no * k + 4.0 * n * no, 10, run_fp8, &f);
  f.mode = 1;
  bench_math ("gemm_fp8_q", LB_MATH_FP8, "fp8", nm, flops,
      (double) n * k + 4.0 * n + no * k + 4.0 * n * no, 10, run_fp8, &f);
  if (k == 5120 && no == 5120) {
    g_autofree char *rn = g_strdup_printf ("M=%" G_GINT64_FORMAT " D=%"
        G_GINT64_FORMAT, n, k);
    f.mode = 2;
    bench_math ("norm_fp8", LB_MATH_FP8, "fp8", rn, 10.0 * n * k,
        4.0 * n * k + (double) n * k + 4.0 * n, 10, run_fp8, &f);
    f.a = dev (2, SHAPE (n, k));
    f.mode = 3;
    bench_math ("norm_fp8", LB_MATH_FP8, "f32-norm_modulate", rn,
        10.0 * n * k, 8.0 * n * k, 10, run_fp8, &f);
  }
  if (no == 13824 && k == 5120) {
    /* the FFN's first layer: the fused epilogue against the pair */
    f.yq = lb_tensor_new_on (gs, LB_DTYPE_F8E4M3, 2, SHAPE (n, no), &err);
    f.sy = f.yq ? lb_tensor_new_on (gs, LB_DTYPE_F32, 1, SHAPE (n), &err) :
        NULL;
    if (f.sy == NULL)
      g_error ("alloc: %s", err->message);
    f.mode = 4;
    /* bytes: the f32 accumulator written once and read twice, the codes
     * written */
    bench_math ("gemm_fp8_gelu_q", LB_MATH_FP8, "fp8", nm, flops,
        (double) n * k + 4.0 * n + no * k + 4.0 * n * no * 3 +
        (double) n * no, 10, run_fp8, &f);
    f.mode = 5;
    /* bytes: the f32 product written, then read and written by the
     * scale epilogue and by the GELU */
    bench_math ("gemm_fp8_gelu_q", LB_MATH_FP8, "fp8-pair", nm, flops,
        (double) n * k + 4.0 * n + no * k + 4.0 * n * no * 5, 10, run_fp8, &f);
  }
  LbTensor **all[] = { &f.x, &f.w, &f.sw, &f.bias, &f.y, &f.xq, &f.sx,
    &f.scale, &f.shift, &f.a, &f.yq, &f.sy
  };
  for (guint i = 0; i < G_N_ELEMENTS (all); i++)
    g_clear_pointer (all[i], lb_tensor_free);
}

static gboolean
run_attention (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->attention (gs, a->a, a->b, a->c, NULL, NULL, a->f, a->d,
      error);
}

/* lingbot_backend_cuda_attention_stats() of the loaded CUDA module (opened
 * with local binding: found through the file of one of its functions), to
 * check that the "bf16-cudnn" lines timed cuDNN and not the own kernel */
typedef void (*AttnStatsFunc) (guint64 * runs, guint64 * declined,
    guint64 * plans, char **last_error);
static AttnStatsFunc attn_stats;

static void
resolve_attn_stats (void)
{
  Dl_info info;
  GModule *m = NULL;
  if (dladdr ((void *) cuda->stream_new, &info) != 0 && info.dli_fname)
    m = g_module_open (info.dli_fname, G_MODULE_BIND_LOCAL);
  if (m == NULL || !g_module_symbol (m,
          "lingbot_backend_cuda_attention_stats", (gpointer *) & attn_stats))
    attn_stats = NULL;
}

/* run_attention() that fails unless cuDNN SDPA ran it */
static gboolean
run_attention_cudnn (gpointer p, GError ** error)
{
  guint64 before = 0, after = 0;
  g_autofree char *msg = NULL;
  if (attn_stats == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "the CUDA module exports no lingbot_backend_cuda_attention_stats");
    return FALSE;
  }
  attn_stats (&before, NULL, NULL, NULL);
  if (!run_attention (p, error))
    return FALSE;
  attn_stats (&after, NULL, NULL, &msg);
  if (after != before + 1) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "cuDNN SDPA did not run (own kernel instead): %s",
        msg ? msg : "no plan-build error recorded");
    return FALSE;
  }
  return TRUE;
}

static gboolean
run_layer_norm (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->layer_norm (gs, a->a, NULL, NULL, 1e-6f, a->b, error);
}

static gboolean
run_rms_norm (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->rms_norm (gs, a->a, a->c, 1e-6f, a->b, error);
}

static gboolean
run_modulate (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->modulate (gs, a->a, a->c, a->d, a->b, error);
}

static gboolean
run_gated (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->gated_residual (gs, a->b, a->a, a->c, error);
}

static gboolean
run_gelu (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->gelu_tanh (gs, a->a, a->b, error);
}

static gboolean
run_silu (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->silu (gs, a->a, a->b, error);
}

static gboolean
run_add (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->add (gs, a->a, a->b, a->b, error);
}

static gboolean
run_mul (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->mul (gs, a->a, a->c, a->b, error);
}

static gboolean
run_scale (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->scale (gs, a->a, 1.0f, 0.0f, a->b, error);
}

static gboolean
run_rope (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->rope_3d (gs, a->a, a->b, a->c, 4, 30, 52, a->i0, 0,
      error);
}

/* ---- convolutions: cuDNN vs im2col (kernels/cuda/cuda-cudnn-conv.c) ----
 *
 * Each conv case is timed four times: "path":"cudnn" on the FP32 stream
 * ("math":"fp32", f32 engines only), "cudnn" on the stream in LB_MATH_BF16
 * mode ("math":"bf16": TF32 / bf16 engines allowed), "cudnn-ndhwc" on
 * that stream with LINGBOT_CUDA_CONV_LAYOUT=ndhwc (channels-last bf16
 * graphs, their layout conversions included) and "im2col" (FP32
 * cuBLASLt, LINGBOT_CUDA_CONV=im2col).  A cudnn line whose calls did not
 * all run through cuDNN (lingbot_backend_cuda_conv_stats of the loaded
 * module), or a cudnn-ndhwc line whose calls did not all take the
 * channels-last graph (lingbot_backend_cuda_conv_layout_stats), is an
 * "error" line.  "calls_per_chunk": how many calls of the
 * shape one steady decoder chunk of 4 latent frames makes (spec
 * vae_and_distributed_spec.md A.4: the decoder runs once per latent
 * frame), so chunk_ms = ms * calls_per_chunk. */

typedef void (*ConvStatsFunc) (guint64 * cudnn_calls, guint64 * im2col_calls,
    guint64 * plans, guint64 * refused);
typedef char *(*ConvRefusalFunc) (void);
typedef void (*ConvLayoutStatsFunc) (guint64 * ndhwc_calls,
    guint64 * weight_conversions);
static ConvStatsFunc conv_stats;
static ConvRefusalFunc conv_refusal;
static ConvLayoutStatsFunc conv_layout_stats;

static void
resolve_conv_stats (void)
{
  Dl_info info;
  GModule *m = NULL;
  if (dladdr ((void *) cuda->stream_new, &info) != 0 && info.dli_fname)
    m = g_module_open (info.dli_fname, G_MODULE_BIND_LOCAL);
  if (m == NULL ||
      !g_module_symbol (m, "lingbot_backend_cuda_conv_stats",
          (gpointer *) & conv_stats) ||
      !g_module_symbol (m, "lingbot_backend_cuda_conv_last_refusal",
          (gpointer *) & conv_refusal))
    conv_stats = NULL;
  if (m == NULL ||
      !g_module_symbol (m, "lingbot_backend_cuda_conv_layout_stats",
          (gpointer *) & conv_layout_stats))
    conv_layout_stats = NULL;
}

typedef struct
{
  gboolean is_2d;
  LbTensor *x, *cache, *w, *b, *y;
  int ph, pw, stride;
} ConvArgs;

static gboolean
run_conv (const ConvArgs * c, GError ** error)
{
  if (c->is_2d)
    return lb_ops (gs)->conv2d (gs, c->x, c->w, c->b, c->ph, c->pw,
        c->stride, c->stride, c->y, error);
  return lb_ops (gs)->conv3d_causal (gs, c->x, c->cache, c->w, c->b, c->ph,
      c->pw, c->stride, c->stride, c->y, error);
}

static void
bench_conv_path (const char *op, const char *name, const char *path,
    LbMathMode math, double flops, double bytes, int iters, int per_chunk,
    const ConvArgs * c)
{
  if (filter && strstr (op, filter) == NULL)
    return;
  g_autoptr (GError) err = NULL;
  const gboolean ndhwc = g_str_equal (path, "cudnn-ndhwc");
  const gboolean want_cudnn = ndhwc || g_str_equal (path, "cudnn");
  const char *mname = math == LB_MATH_BF16 ? "bf16" : "fp32";
  guint64 c0 = 0, c1 = 0, n0 = 0, n1 = 0;
  g_setenv ("LINGBOT_CUDA_CONV", want_cudnn ? "cudnn" : path, TRUE);
  g_setenv ("LINGBOT_CUDA_CONV_LAYOUT", ndhwc ? "ndhwc" : "ncdhw", TRUE);
  cuda->stream_synchronize (gs, NULL);  /* nothing queued: mode change */
  gs->math = math;
  if (conv_stats)
    conv_stats (&c0, NULL, NULL, NULL);
  if (conv_layout_stats)
    conv_layout_stats (&n0, NULL);
  gboolean ok = run_conv (c, &err) && cuda->stream_synchronize (gs, &err);
  double ms = 0;
  if (ok) {
    gint64 t0 = g_get_monotonic_time ();
    for (int i = 0; ok && i < iters; i++)
      ok = run_conv (c, &err);
    ok = ok && cuda->stream_synchronize (gs, &err);
    ms = (g_get_monotonic_time () - t0) / 1000.0 / iters;
  }
  if (conv_stats)
    conv_stats (&c1, NULL, NULL, NULL);
  if (conv_layout_stats)
    conv_layout_stats (&n1, NULL);
  cuda->stream_synchronize (gs, NULL);
  gs->math = LB_MATH_FP32;
  g_unsetenv ("LINGBOT_CUDA_CONV");
  g_unsetenv ("LINGBOT_CUDA_CONV_LAYOUT");
  if (ok && want_cudnn && conv_stats == NULL) {
    ok = FALSE;
    g_set_error (&err, LB_ERROR, LB_ERROR_UNSUPPORTED, "the CUDA module "
        "exports no lingbot_backend_cuda_conv_stats");
  } else if (ok && want_cudnn && c1 - c0 != (guint64) iters + 1) {
    g_autofree char *why = conv_refusal ();
    ok = FALSE;
    g_set_error (&err, LB_ERROR, LB_ERROR_UNSUPPORTED, "cuDNN ran %"
        G_GUINT64_FORMAT " of %d calls (the rest im2col): %s", c1 - c0,
        iters + 1, why ? why : "no refusal recorded");
  } else if (ok && ndhwc && (conv_layout_stats == NULL ||
          n1 - n0 != (guint64) iters + 1)) {
    g_autofree char *why = conv_refusal ();
    ok = FALSE;
    g_set_error (&err, LB_ERROR, LB_ERROR_UNSUPPORTED, "the channels-last "
        "graph ran %" G_GUINT64_FORMAT " of %d calls: %s", n1 - n0,
        iters + 1, conv_layout_stats == NULL ? "no layout counters" :
        why ? why : "no refusal recorded");
  }
  if (!ok) {
    g_autofree char *msg = g_strescape (err ? err->message : "?", NULL);
    printf ("{\"op\":\"%s\",\"path\":\"%s\",\"math\":\"%s\",\"case\":\"%s\","
        "\"error\":\"%s\"}\n", op, path, mname, name, msg);
  } else {
    printf ("{\"op\":\"%s\",\"path\":\"%s\",\"math\":\"%s\",\"case\":\"%s\","
        "\"ms\":%.4f,\"s\":%.6f,\"tflops\":%.2f,\"gflops\":%.1f,"
        "\"gbps\":%.1f,\"calls_per_chunk\":%d,\"chunk_ms\":%.3f}\n", op,
        path, mname, name, ms, ms / 1000.0, flops / ms / 1e9,
        flops / ms / 1e6, bytes / ms / 1e6, per_chunk, ms * per_chunk);
  }
  fflush (stdout);
}

/* The four timings of one conv case (see above). */
static void
bench_conv (const char *op, const char *name, double flops, double bytes,
    int iters, int per_chunk, const ConvArgs * c)
{
  bench_conv_path (op, name, "cudnn", LB_MATH_FP32, flops, bytes, iters,
      per_chunk, c);
  bench_conv_path (op, name, "cudnn", LB_MATH_BF16, flops, bytes, iters,
      per_chunk, c);
  bench_conv_path (op, name, "cudnn-ndhwc", LB_MATH_BF16, flops, bytes,
      iters, per_chunk, c);
  bench_conv_path (op, name, "im2col", LB_MATH_FP32, flops, bytes, iters,
      per_chunk, c);
}

/* The VAE decoder's convs at 832x480 (latent 60x104), spec
 * vae_and_distributed_spec.md A.4, unsharded, steady state: frames per
 * call t = 1 / 2 / 4 / 4 at 60x104 / 120x208 / 240x416 / 480x832, every
 * causal conv with its 2-frame cache; 3x3 convs read the halo-padded input
 * [C, t, H + 2, W] with pad_h 0, pad_w 1 (lingbot/vae-net.c). */
static void
bench_vae_convs (void)
{
  static const struct
  {
    const char *what;
    int64_t cin, cout, t, tc, h, w, kt, kh, kw;
    int per_chunk;
  } cases[] = {
    {"res", 384, 384, 1, 2, 60, 104, 3, 3, 3, 40},
    {"time_conv", 384, 768, 1, 2, 60, 104, 3, 1, 1, 4},
    {"upsample", 384, 192, 2, 0, 120, 208, 1, 3, 3, 4},
    {"res in", 192, 384, 2, 2, 120, 208, 3, 3, 3, 4},
    {"res", 384, 384, 2, 2, 120, 208, 3, 3, 3, 20},
    {"shortcut", 192, 384, 2, 0, 120, 208, 1, 1, 1, 4},
    {"time_conv", 384, 768, 2, 2, 120, 208, 3, 1, 1, 4},
    {"upsample", 384, 192, 4, 0, 240, 416, 1, 3, 3, 4},
    {"res", 192, 192, 4, 2, 240, 416, 3, 3, 3, 24},
    {"upsample", 192, 96, 4, 0, 480, 832, 1, 3, 3, 4},
    {"res", 96, 96, 4, 2, 480, 832, 3, 3, 3, 24},
    {"head", 96, 3, 4, 2, 480, 832, 3, 3, 3, 4},
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    const int64_t cin = cases[i].cin, cout = cases[i].cout, t = cases[i].t;
    const int64_t tc = cases[i].tc, h = cases[i].h, w = cases[i].w;
    const int64_t kt = cases[i].kt, kh = cases[i].kh, kw = cases[i].kw;
    const int halo = kh == 3 ? 1 : 0;   /* 3x3: halo rows, pad_w 1 */
    const int64_t hin = h + 2 * halo;
    ConvArgs c = {.is_2d = FALSE,.ph = 0,.pw = halo,.stride = 1 };
    c.x = dev (4, SHAPE (cin, t, hin, w));
    c.cache = tc ? dev (4, SHAPE (cin, tc, hin, w)) : NULL;
    c.w = dev (5, SHAPE (cout, cin, kt, kh, kw));
    c.b = dev (1, SHAPE (cout));
    c.y = dev (4, SHAPE (cout, t, h, w));
    g_autofree char *name = g_strdup_printf ("%s %" G_GINT64_FORMAT "->%"
        G_GINT64_FORMAT " %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT "x%"
        G_GINT64_FORMAT " at %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT ", t %"
        G_GINT64_FORMAT ", cache %" G_GINT64_FORMAT, cases[i].what, cin,
        cout, kt, kh, kw, h, w, t, tc);
    const double flops = 2.0 * cout * cin * kt * kh * kw * t * h * w;
    const double bytes = 4.0 * (cin * (t + tc) * hin * w +
        cout * cin * kt * kh * kw + cout * t * h * w);
    bench_conv ("conv3d_causal", name, flops, bytes, 3, cases[i].per_chunk, &c);
    LbTensor *ts[] = { c.x, c.cache, c.w, c.b, c.y };
    for (guint j = 0; j < G_N_ELEMENTS (ts); j++)
      if (ts[j])
        lb_tensor_free (ts[j]);
  }
}

static gboolean
run_upsample (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->upsample_nearest2x (gs, a->a, a->b, error);
}

static gboolean
run_patchify (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->patchify (gs, a->a, 2, 2, a->b, error);
}

static gboolean
run_unpatchify (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->unpatchify (gs, a->a, 2, 2, a->b, error);
}

static gboolean
run_bicubic (gpointer p, GError ** error)
{
  Args *a = p;
  return lb_ops (gs)->resize_bicubic (gs, a->a, a->b, error);
}

static void
free_args (Args * a)
{
  LbTensor *ts[] = { a->a, a->b, a->c, a->d, a->e };
  for (guint i = 0; i < G_N_ELEMENTS (ts); i++)
    if (ts[i])
      lb_tensor_free (ts[i]);
  memset (a, 0, sizeof *a);
}

int
main (int argc, char **argv)
{
  g_autoptr (GError) err = NULL;
  filter = argc > 1 ? argv[1] : NULL;
  cuda = lingbot_backend_cuda (&err);
  if (cuda == NULL) {
    printf ("SKIP: %s\n", err->message);
    return 77;
  }
  gs = cuda->stream_new (cuda, 0, &err);
  if (gs == NULL)
    g_error ("stream: %s", err->message);
  resolve_attn_stats ();
  const int64_t n = 6240, d = 5120, ffn = 13824, nh = 40, hd = 128;
  Args a = { 0 };

  /* GEMMs of a block (x [N, K] . w[Nout, K]^T + bias) */
  static const int64_t gemms[][2] = { {5120, 5120}, {13824, 5120},
  {5120, 13824}, {15360, 5120}
  };
  for (guint i = 0; i < G_N_ELEMENTS (gemms); i++) {
    int64_t no = gemms[i][0], k = gemms[i][1];
    a.a = dev (2, SHAPE (n, k));
    a.b = dev (2, SHAPE (no, k));
    a.c = dev (1, SHAPE (no));
    a.d = dev (2, SHAPE (n, no));
    g_autofree char *nm = g_strdup_printf ("M=%" G_GINT64_FORMAT " N=%"
        G_GINT64_FORMAT " K=%" G_GINT64_FORMAT, n, no, k);
    bench ("gemm", nm, 2.0 * n * no * k, 4.0 * (n * k + no * k + n * no), 5,
        run_gemm, &a);
    /* bf16 weights, as the DiT's bf16 ranks hold them: x rounded to bf16
     * on the way in, f32 accumulation and output (cuda-gemm.c) */
    LbTensor *wf = a.b;
    a.b = dev_bf16 (wf);
    bench_math ("gemm", LB_MATH_BF16, "bf16-weights", nm, 2.0 * n * no * k,
        4.0 * (n * k + n * no) + 2.0 * no * k, 10, run_gemm, &a);
    if (no == ffn) {
      /* bf16 x and y: the FFN's first layer with its GELU, fused and as
       * the pair */
      LbTensor *xf = a.a;
      a.a = dev_bf16 (xf);
      a.e = dev_bf16 (a.d);
      for (int pair = 0; pair < 2; pair++) {
        a.i0 = pair;
        bench_math (pair ? "gemm_gelu_pair" : "gemm_gelu_tanh", LB_MATH_BF16,
            "bf16", nm, 2.0 * n * no * k, 2.0 * (n * k + no * k + n * no) +
            (pair ? 8.0 * n * no : 0.0), 10, run_gemm_gelu, &a);
      }
      a.i0 = 0;
      lb_tensor_free (a.a);
      a.a = xf;
    }
    lb_tensor_free (a.b);
    a.b = wf;
    free_args (&a);
    /* e4m3 weights (LB_MATH_FP8): the GEMM with and without its
     * quantisation pass, and the norm that writes the codes */
    if (filter == NULL ||
        strstr ("gemm_fp8 norm_fp8 gemm_fp8_gelu_q", filter) != NULL)
      bench_fp8 (n, no, k, nm);
  }

  /* self-attention over the visible KV of chunks 0 and >= 4, cross; one
   * GPU (40 heads) and one rank of 4-way Ulysses (10 heads); the FP32
   * flash kernel and the bf16 tensor-core kernel (LB_MATH_BF16).  FLOP =
   * 4 Nq Nk H hd (QK^T and PV). */
  static const struct
  {
    int64_t nk, nh;
    const char *note;
  } att[] = {
    {6240, 40, ""}, {28080, 40, ""}, {512, 40, ""},
    {28080, 10, " (Ulysses rank)"},
  };
  for (guint i = 0; i < G_N_ELEMENTS (att); i++) {
    const int64_t nk = att[i].nk, h = att[i].nh;
    a.a = dev (3, SHAPE (n, h, hd));
    a.b = dev (3, SHAPE (nk, h, hd));
    a.c = dev (3, SHAPE (nk, h, hd));
    a.d = dev (3, SHAPE (n, h, hd));
    a.f = 1.0f / sqrtf ((float) hd);
    g_autofree char *nm = g_strdup_printf ("Nq=%" G_GINT64_FORMAT " Nk=%"
        G_GINT64_FORMAT " H=%" G_GINT64_FORMAT " hd=128%s", n, nk, h,
        att[i].note);
    const double flops = 4.0 * n * nk * h * hd;
    const double bytes = 4.0 * (2 * n + 2 * nk) * h * hd;
    bench_math ("attention", LB_MATH_FP32, "fp32", nm, flops, bytes,
        nk * h > 400000 ? 1 : 3, run_attention, &a);
    g_setenv ("LINGBOT_CUDA_ATTENTION", "own", TRUE);
    bench_math ("attention", LB_MATH_BF16, "bf16", nm, flops, bytes,
        nk * h > 400000 ? 3 : 10, run_attention, &a);
    /* cuDNN's fused SDPA on the same operands (bf16 conversions of q, k,
     * v and of the output included in its time) */
    g_setenv ("LINGBOT_CUDA_ATTENTION", "cudnn", TRUE);
    bench_math ("attention", LB_MATH_BF16, "bf16-cudnn", nm, flops, bytes,
        nk * h > 400000 ? 3 : 10, run_attention_cudnn, &a);
    if (nk == 28080) {
      /* K and V from a bf16 KV cache, as the DiT's bf16 ranks keep them
       * (cuDNN reads them in place; the own kernel loads bf16) */
      LbTensor *kf = a.b, *vf = a.c;
      a.b = dev_bf16 (kf);
      a.c = dev_bf16 (vf);
      g_autofree char *nm16 = g_strconcat (nm, " bf16 KV", NULL);
      const double bytes16 = 4.0 * 2 * n * h * hd + 2.0 * 2 * nk * h * hd;
      g_setenv ("LINGBOT_CUDA_ATTENTION", "own", TRUE);
      bench_math ("attention", LB_MATH_BF16, "bf16", nm16, flops, bytes16,
          3, run_attention, &a);
      g_setenv ("LINGBOT_CUDA_ATTENTION", "cudnn", TRUE);
      bench_math ("attention", LB_MATH_BF16, "bf16-cudnn", nm16, flops,
          bytes16, 3, run_attention_cudnn, &a);
      lb_tensor_free (a.b);
      lb_tensor_free (a.c);
      a.b = kf;
      a.c = vf;
    }
    g_unsetenv ("LINGBOT_CUDA_ATTENTION");
    free_args (&a);
  }
  /* VAE mid-block: one frame, one head of 384 (GEMM path) */
  a.a = dev (3, SHAPE (n, 1, 384));
  a.b = dev (3, SHAPE (n, 1, 384));
  a.c = dev (3, SHAPE (n, 1, 384));
  a.d = dev (3, SHAPE (n, 1, 384));
  a.f = 1.0f / sqrtf (384.0f);
  bench ("attention", "Nq=6240 Nk=6240 H=1 hd=384 (VAE mid)",
      4.0 * n * n * 384, 4.0 * 4 * n * 384, 3, run_attention, &a);
  free_args (&a);

  /* row ops on the residual stream */
  a.a = dev (2, SHAPE (n, d));
  a.b = dev (2, SHAPE (n, d));
  a.c = dev (1, SHAPE (d));
  a.d = dev (1, SHAPE (d));
  double rw = 4.0 * 2 * n * d;
  bench ("layer_norm", "[6240, 5120]", 0, rw, 20, run_layer_norm, &a);
  bench ("rms_norm", "[6240, 5120]", 0, rw, 20, run_rms_norm, &a);
  bench ("modulate", "[6240, 5120] by [5120]", 0, rw, 20, run_modulate, &a);
  bench ("gated_residual", "[6240, 5120] gate [5120]", 0, 1.5 * rw, 20,
      run_gated, &a);
  bench ("add", "[6240, 5120] in place", 0, 1.5 * rw, 20, run_add, &a);
  bench ("mul", "[6240, 5120] by [5120]", 0, rw, 20, run_mul, &a);
  bench ("scale", "[6240, 5120]", 0, rw, 20, run_scale, &a);
  free_args (&a);
  a.a = dev (2, SHAPE (n, ffn));
  a.b = dev (2, SHAPE (n, ffn));
  bench ("gelu_tanh", "[6240, 13824]", 0, 4.0 * 2 * n * ffn, 20, run_gelu, &a);
  bench ("silu", "[6240, 13824]", 0, 4.0 * 2 * n * ffn, 20, run_silu, &a);
  free_args (&a);

  /* RoPE on q [6240, 40, 128], grid 4 x 30 x 52, frames 16..19 */
  {
    LbTensor *c, *s;
    lb_rope_tables_new (128, 1024, 10000.0, &c, &s);
    a.a = dev (3, SHAPE (n, nh, hd));
    a.b = lb_tensor_new_on (gs, LB_DTYPE_F32, 2, c->shape, &err);
    a.c = lb_tensor_new_on (gs, LB_DTYPE_F32, 2, s->shape, &err);
    lb_tensor_upload (gs, a.b, c, &err);
    lb_tensor_upload (gs, a.c, s, &err);
    cuda->stream_synchronize (gs, NULL);
    lb_tensor_free (c);
    lb_tensor_free (s);
    a.i0 = 16;
    bench ("rope_3d", "[6240, 40, 128]", 0, 4.0 * 2 * n * nh * hd, 20,
        run_rope, &a);
    free_args (&a);
  }

  /* patchify DiT input [36, 4, 60, 104] -> [6240, 144]; head unpatchify */
  a.a = dev (4, SHAPE (36, 4, 60, 104));
  a.b = dev (2, SHAPE (n, 144));
  bench ("patchify", "[36, 4, 60, 104] 1x2x2", 0, 4.0 * 2 * n * 144, 20,
      run_patchify, &a);
  free_args (&a);
  a.a = dev (2, SHAPE (n, 64));
  a.b = dev (4, SHAPE (16, 4, 60, 104));
  bench ("unpatchify", "[6240, 64] -> [16, 4, 60, 104]", 0,
      4.0 * 2 * n * 64, 20, run_unpatchify, &a);
  free_args (&a);

  /* VAE decoder convs on both paths */
  resolve_conv_stats ();
  bench_vae_convs ();
  /* upsample conv: [4, 384, 120, 208] nearest-upsampled -> 3x3 -> 192 */
  a.a = dev (4, SHAPE (4, 384, 60, 104));
  a.b = dev (4, SHAPE (4, 384, 120, 208));
  bench ("upsample_nearest2x", "[4, 384, 60, 104]", 0,
      4.0 * 5 * 4 * 384 * 60 * 104, 10, run_upsample, &a);
  free_args (&a);
  {
    /* a batched conv2d (op conv2d, NCHW) of the same size */
    ConvArgs c = {.is_2d = TRUE,.ph = 1,.pw = 1,.stride = 1 };
    c.x = dev (4, SHAPE (4, 384, 120, 208));
    c.w = dev (4, SHAPE (192, 384, 3, 3));
    c.b = dev (1, SHAPE (192));
    c.y = dev (4, SHAPE (4, 192, 120, 208));
    bench_conv ("conv2d", "[4, 384, 120, 208] 3x3 -> 192", 2.0 * 4 * 192 *
        384 * 9 * 120 * 208, 4.0 * (4 * 384 + 4 * 192) * 120 * 208, 2, 0, &c);
    lb_tensor_free (c.x);
    lb_tensor_free (c.w);
    lb_tensor_free (c.b);
    lb_tensor_free (c.y);
  }

  /* reference image resize */
  a.a = dev (3, SHAPE (3, 720, 1280));
  a.b = dev (3, SHAPE (3, 464, 832));
  bench ("resize_bicubic", "[3, 720, 1280] -> [3, 464, 832]", 0,
      4.0 * 3 * (720 * 1280 + 464 * 832), 20, run_bicubic, &a);
  free_args (&a);

  cuda->stream_free (gs);
  return 0;
}

/* lingbot-gst: the CUDA module's cuDNN graphs, checked without a GPU
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * cuDNN can plan a graph for a GPU described by a device-properties
 * descriptor instead of a handle.  The module exports deviceless checks
 * (lingbot_backend_cuda_cudnn_set_target(), lingbot_backend_cuda_sdpa_check(),
 * lingbot_backend_cuda_conv_check()) that build exactly the graphs of the
 * cuDNN attention and convolution paths and ask cuDNN's heuristics and
 * engines whether they take them on an H200 (sm_90, 132 SMs, 141 GB).  An
 * engine that accepts a graph gets as far as loading its kernels, which
 * needs a driver: with the toolkit's stub libcuda.so.1 on the library path
 * (meson sets LD_LIBRARY_PATH to a folder holding a link to it) that last
 * step fails with CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER, which counts
 * as accepted.  A graph no engine recognises (the negative controls) is
 * refused earlier.  What this cannot check: numerics, speed, execution,
 * and which memory layout an engine is fast for (a channels-last bf16
 * graph with a packed weight is taken by a tensor-core engine too).
 *
 * Shapes: the DiT-14B attention at 832x480 (6240 queries; a full window of
 * 28080 keys, the chunk's own 6240, the 512 text tokens; 40 heads on one
 * rank, 10 on each of four; hd 128) and the VAE decoder's convolutions at
 * 832x480 (spec vae_and_distributed_spec.md A.4), f32 and bf16 math, and
 * the channels-last bf16 graphs (LINGBOT_CUDA_CONV_LAYOUT=ndhwc: NDHWC
 * bf16 x and w, f32 y, bias outside the graph, a tensor-core engine).
 */
#include "kernels/backend.h"
#include "kernels/error.h"

#include <gmodule.h>
#include <stdio.h>
#include <string.h>

/* An H200 as cuDNN describes a device (CUDNN_ATTR_DEVICEPROP_JSON_
 * REPRESENTATION): compute capability 9.0, 132 SMs, 227 KiB opt-in shared
 * memory per block, 60 MiB L2, 141 GB. */
static const char h200[] = "{\"maxGridSize\":[2147483647,65535,65535],"
    "\"maxBlockSize\":[1024,1024,64],\"regsPerBlock\":65536,"
    "\"multiProcessorCount\":132,\"warpSize\":32,"
    "\"maxSharedMemoryPerBlock\":49152,"
    "\"maxSharedMemoryPerBlockOptin\":232448,"
    "\"reservedSharedMemoryPerBlock\":1024,\"maxRegistersPerSM\":65536,"
    "\"maxCtasPerSM\":32,\"maxThreadsPerBlock\":1024,\"maxThreadsPerSM\":2048,"
    "\"pciDeviceId\":0,\"isTccDriver\":0,\"supportCoopLaunch\":1,"
    "\"smClockRateKHz\":1980000,\"memClockRateKHz\":3201000,"
    "\"l2CacheSize\":62914560,\"deviceName\":\"NVIDIA H200\","
    "\"totalGlobalMem\":150754820096,\"cudaDeviceId\":0,\"deviceVer\":900,"
    "\"driverVer\":13000}";

typedef gboolean (*SetTargetFunc) (const char *json, GError ** error);
typedef gboolean (*SdpaCheckFunc) (int64_t nq, int64_t nk, int64_t heads,
    int64_t hd, gboolean kv_window, GError ** error);
typedef gboolean (*ConvCheckFunc) (gboolean is_2d, const LbTensor * x,
    const LbTensor * cache, const LbTensor * weight, const LbTensor * bias,
    int pad_h, int pad_w, int stride_h, int stride_w, const LbTensor * y,
    LbMathMode math, gboolean channels_last, gboolean * fused,
    gboolean * zeros_in_cat, gboolean * tensor_core, GError ** error);

static SdpaCheckFunc sdpa_check;
static ConvCheckFunc conv_check;

/* A shape-only f32 tensor (the checks read shape, dtype and strides). */
static void
meta (LbTensor * t, int nd, const int64_t * shape)
{
  static float dummy[4] __attribute__((aligned (256)));
  memset (t, 0, sizeof *t);
  t->dtype = LB_DTYPE_F32;
  t->ndim = nd;
  int64_t st = 1;
  for (int i = nd - 1; i >= 0; i--) {
    t->shape[i] = shape[i];
    t->stride[i] = st;
    st *= shape[i];
  }
  t->data = dummy;
  t->device.type = LB_DEVICE_CPU;
}

/* ---- attention ---- */

typedef struct
{
  const char *what;
  int64_t nq, nk, heads, hd;
  gboolean kv_window;
} SdpaCase;

static const SdpaCase sdpa_cases[] = {
  {"14B, 1 rank, full window", 6240, 28080, 40, 128, FALSE},
  {"14B, 4 ranks, full window", 6240, 28080, 10, 128, FALSE},
  {"14B, 4 ranks, bf16 cache window", 6240, 28080, 10, 128, TRUE},
  {"14B, first chunk (own keys only)", 6240, 6240, 40, 128, FALSE},
  {"14B, cross-attention (512 text tokens)", 6240, 512, 40, 128, FALSE},
  {"small, hd 64", 37, 300, 3, 64, FALSE},
};

static void
test_sdpa (gconstpointer data)
{
  const SdpaCase *c = data;
  g_autoptr (GError) err = NULL;
  gboolean ok = sdpa_check (c->nq, c->nk, c->heads, c->hd, c->kv_window,
      &err);
  printf ("# SDPA %s: Nq %" G_GINT64_FORMAT " Nk %" G_GINT64_FORMAT " H %"
      G_GINT64_FORMAT " hd %" G_GINT64_FORMAT ": %s\n", c->what, c->nq, c->nk,
      c->heads, c->hd, ok ? "an H200 engine takes it" : err->message);
  g_assert_no_error (err);
  g_assert_true (ok);
}

/* A head dim that is not a multiple of 8 is refused by every flash
 * engine: the check can fail. */
static void
test_sdpa_refused (void)
{
  g_autoptr (GError) err = NULL;
  g_assert_false (sdpa_check (1560, 1560, 1, 100, FALSE, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_UNSUPPORTED);
  g_assert_true (strstr (err->message, "attention (cuDNN SDPA): no cuDNN "
          "engine runs this graph") == err->message);
  printf ("# SDPA hd 100 refused: %s\n", err->message);
}

/* One head of 384 dims (the VAE mid-block attention, spec C): cuDNN 9.19
 * takes it on sm_90, so that attention could leave its GEMM path. */
static void
test_sdpa_hd384 (void)
{
  g_autoptr (GError) err = NULL;
  gboolean ok = sdpa_check (1560, 1560, 1, 384, FALSE, &err);
  printf ("# SDPA hd 384 (VAE mid-block, 60x26 band): %s\n",
      ok ? "an H200 engine takes it" : err->message);
  g_assert_no_error (err);
  g_assert_true (ok);
}

/* ---- convolutions ---- */

typedef struct
{
  const char *what;
  int64_t cin, cout, t, tc, h, w, kt, kh, kw;
  gboolean bias;
} ConvCase;

/* The decoder's convs at 832x480, steady state (spec
 * vae_and_distributed_spec.md A.4, the list of bench-cuda-ops.c, which
 * follows lingbot/vae-net.c: conv_in, res_block's two 3x3x3 convs and
 * 1x1x1 shortcut, up_block's 3x1x1 time_conv and 1x3x3 conv after the
 * upsample, the head), plus the first chunk (no cache) and a conv
 * without bias: 3x3 convs read the halo-padded input [C, t, H + 2, W]
 * with pad_h 0 and pad_w 1. */
static const ConvCase conv_cases[] = {
  {"conv_in 16->384 at 60x104", 16, 384, 1, 2, 60, 104, 3, 3, 3, TRUE},
  {"res 384 at 60x104", 384, 384, 1, 2, 60, 104, 3, 3, 3, TRUE},
  {"time_conv 384->768 at 60x104", 384, 768, 1, 2, 60, 104, 3, 1, 1, TRUE},
  {"upsample 384->192 at 120x208", 384, 192, 2, 0, 120, 208, 1, 3, 3, TRUE},
  {"res 192->384 at 120x208", 192, 384, 2, 2, 120, 208, 3, 3, 3, TRUE},
  {"res 384 at 120x208", 384, 384, 2, 2, 120, 208, 3, 3, 3, TRUE},
  {"shortcut 192->384 at 120x208", 192, 384, 2, 0, 120, 208, 1, 1, 1, TRUE},
  {"time_conv 384->768 at 120x208", 384, 768, 2, 2, 120, 208, 3, 1, 1, TRUE},
  {"upsample 384->192 at 240x416", 384, 192, 4, 0, 240, 416, 1, 3, 3, TRUE},
  {"res 192 at 240x416", 192, 192, 4, 2, 240, 416, 3, 3, 3, TRUE},
  {"upsample 192->96 at 480x832", 192, 96, 4, 0, 480, 832, 1, 3, 3, TRUE},
  {"res 96 at 480x832", 96, 96, 4, 2, 480, 832, 3, 3, 3, TRUE},
  {"head 96->3 at 480x832", 96, 3, 4, 2, 480, 832, 3, 3, 3, TRUE},
  {"first chunk, no cache", 96, 96, 1, 0, 480, 832, 3, 3, 3, TRUE},
  {"no bias", 384, 384, 1, 2, 60, 104, 3, 3, 3, FALSE},
};

static void
conv_case (const ConvCase * c, LbMathMode math, gboolean channels_last)
{
  const int halo = c->kh == 3 ? 1 : 0;
  const int64_t hin = c->h + 2 * halo;
  LbTensor x, cache, w, b, y;
  meta (&x, 4, (int64_t[]) { c->cin, c->t, hin, c->w });
  meta (&cache, 4, (int64_t[]) { c->cin, c->tc, hin, c->w });
  meta (&w, 5, (int64_t[]) { c->cout, c->cin, c->kt, c->kh, c->kw });
  meta (&b, 1, (int64_t[]) { c->cout });
  meta (&y, 4, (int64_t[]) { c->cout, c->t, c->h, c->w });
  gboolean fused = FALSE, zeros = FALSE, tc = FALSE;
  g_autoptr (GError) err = NULL;
  gboolean ok = conv_check (FALSE, &x, c->tc ? &cache : NULL, &w,
      c->bias ? &b : NULL, 0, halo, 1, 1, &y, math, channels_last, &fused,
      &zeros, &tc, &err);
  printf ("# conv %s (%s): %s%s%s%s\n", c->what,
      channels_last ? "bf16 NDHWC" : math == LB_MATH_BF16 ? "bf16" : "f32",
      ok ? "an H200 engine takes it" : err->message,
      ok && c->bias ? (fused ? ", bias fused" : ", bias by kernel") : "",
      ok && zeros ? ", zero frames in the input" : "",
      ok && tc ? ", tensor cores" : "");
  g_assert_no_error (err);
  g_assert_true (ok);
  /* channels-last: the bias is always the output kernel's, and a
   * tensor-core engine takes the bf16 graph */
  if (channels_last) {
    g_assert_false (fused);
    g_assert_true (tc);
  }
}

static void
test_conv_f32 (gconstpointer data)
{
  conv_case (data, LB_MATH_FP32, FALSE);
}

static void
test_conv_bf16 (gconstpointer data)
{
  conv_case (data, LB_MATH_BF16, FALSE);
}

/* the LINGBOT_CUDA_CONV_LAYOUT=ndhwc graphs: bf16 NDHWC x and w */
static void
test_conv_ndhwc (gconstpointer data)
{
  conv_case (data, LB_MATH_BF16, TRUE);
}

/* The batched conv2d (stride 2, the encoder's downsample) and the op's own
 * argument errors, which the check reports before asking cuDNN. */
static void
test_conv2d_and_errors (void)
{
  LbTensor x, w, b, y;
  g_autoptr (GError) err = NULL;
  meta (&x, 4, (int64_t[]) { 4, 96, 481, 833 });
  meta (&w, 4, (int64_t[]) { 96, 96, 3, 3 });
  meta (&b, 1, (int64_t[]) { 96 });
  meta (&y, 4, (int64_t[]) { 4, 96, 240, 416 });
  g_assert_true (conv_check (TRUE, &x, NULL, &w, &b, 0, 0, 2, 2, &y,
          LB_MATH_FP32, FALSE, NULL, NULL, NULL, &err));
  g_assert_no_error (err);
  gboolean fused = TRUE;
  g_assert_true (conv_check (TRUE, &x, NULL, &w, &b, 0, 0, 2, 2, &y,
          LB_MATH_BF16, TRUE, &fused, NULL, NULL, &err));
  g_assert_no_error (err);
  g_assert_false (fused);
  /* channels-last is a bf16-stream path */
  g_assert_false (conv_check (TRUE, &x, NULL, &w, &b, 0, 0, 2, 2, &y,
          LB_MATH_FP32, TRUE, NULL, NULL, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_clear_error (&err);
  meta (&y, 4, (int64_t[]) { 4, 96, 240, 417 });
  g_assert_false (conv_check (TRUE, &x, NULL, &w, &b, 0, 0, 2, 2, &y,
          LB_MATH_FP32, FALSE, NULL, NULL, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  printf ("# conv2d error: %s\n", err->message);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  const char *path = g_getenv ("LINGBOT_TEST_CUDA_MODULE");
  GModule *m = path ? g_module_open (path, G_MODULE_BIND_LOCAL) : NULL;
  SetTargetFunc set_target = NULL;
  if (m == NULL ||
      !g_module_symbol (m, "lingbot_backend_cuda_cudnn_set_target",
          (gpointer *) & set_target) ||
      !g_module_symbol (m, "lingbot_backend_cuda_sdpa_check",
          (gpointer *) & sdpa_check) ||
      !g_module_symbol (m, "lingbot_backend_cuda_conv_check",
          (gpointer *) & conv_check)) {
    printf ("SKIP: no CUDA module to check (%s)\n",
        path ? g_module_error () : "LINGBOT_TEST_CUDA_MODULE unset");
    return 77;
  }
  g_autoptr (GError) err = NULL;
  if (g_getenv ("LINGBOT_TEST_CUDNN_MISSING")) {
    /* the module without cuDNN (LINGBOT_CUDNN_LIBRARY points nowhere):
     * the cuDNN paths report it, nothing crashes */
    g_assert_false (set_target (h200, &err));
    g_assert_error (err, LB_ERROR, LB_ERROR_UNSUPPORTED);
    g_assert_true (g_str_has_prefix (err->message, "cuDNN is not available ("
            "/nonexistent/libcudnn.so.9: "));
    g_assert_true (g_str_has_suffix (err->message, "); the convolutions use "
            "im2col and attention the own kernels"));
    g_clear_error (&err);
    g_assert_false (sdpa_check (64, 64, 1, 64, FALSE, &err));
    g_assert_error (err, LB_ERROR, LB_ERROR_UNSUPPORTED);
    printf ("ok - without cuDNN: %s\n", err->message);
    return 0;
  }
  if (!set_target (h200, &err)) {
    printf ("FAIL: cuDNN does not take the H200 description: %s\n",
        err->message);
    return 1;
  }
  for (guint i = 0; i < G_N_ELEMENTS (sdpa_cases); i++) {
    g_autofree char *p = g_strdup_printf ("/cudnn/sdpa/%u", i);
    g_test_add_data_func (p, &sdpa_cases[i], test_sdpa);
  }
  g_test_add_func ("/cudnn/sdpa/hd100-refused", test_sdpa_refused);
  g_test_add_func ("/cudnn/sdpa/hd384", test_sdpa_hd384);
  for (guint i = 0; i < G_N_ELEMENTS (conv_cases); i++) {
    g_autofree char *p = g_strdup_printf ("/cudnn/conv/f32/%u", i);
    g_autofree char *q = g_strdup_printf ("/cudnn/conv/bf16/%u", i);
    g_autofree char *r = g_strdup_printf ("/cudnn/conv/ndhwc/%u", i);
    g_test_add_data_func (p, &conv_cases[i], test_conv_f32);
    g_test_add_data_func (q, &conv_cases[i], test_conv_bf16);
    g_test_add_data_func (r, &conv_cases[i], test_conv_ndhwc);
  }
  g_test_add_func ("/cudnn/conv2d", test_conv2d_and_errors);
  int rc = g_test_run ();
  set_target (NULL, NULL);
  return rc;
}

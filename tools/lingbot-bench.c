/* lingbot-gst: benchmarks that print numbers (never timed tests)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-bench gemm [--size N] [--iters K] [--backend cpu|cuda]
 *   lingbot-bench comm [--ranks N] [--size-mib S] [--iters K]
 *   lingbot-bench dit [--model DIR | --preset P] [--devices cpu:N|0,1]
 *       [--chunks K] [--precision fp32|bf16] [--window-full]
 *       [--peak-tflops X] [--estimate] [--json]
 *   lingbot-bench vae [--dim N] [--latent HxW] [--ranks 1,2,4 | --devices D]
 *       [--chunks K] [--dit-chunk-s S]
 *   lingbot-bench direct --model M --image I --control-trace T --frames 77 ...
 *   lingbot-bench replay --duration 60 ... (also --compare A B)
 */
#include "lingbot/backend.h"
#include "tools/bench-common.h"
#include "tools/bench-comm.h"
#include "tools/bench-dit.h"
#include "tools/bench-vae.h"
#include "tools/bench-direct.h"
#ifdef LINGBOT_BENCH_HAVE_GST
#include "tools/bench-live.h"
#endif
#include "tools/bench-ops.h"
#include "tools/tool-common.h"
#include "tools/tool-json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
bench_gemm (int argc, char **argv)
{
  gint size = 1024, iters = 10;
  g_autofree char *backend_name = NULL;
  GOptionEntry entries[] = {
    {"size", 0, 0, G_OPTION_ARG_INT, &size, "M = N = K (default 1024)", "N"},
    {"iters", 0, 0, G_OPTION_ARG_INT, &iters, "timed repetitions (10)", "K"},
    {"backend", 0, 0, G_OPTION_ARG_STRING, &backend_name,
        "cpu, cuda or auto (cpu)", "NAME"},
    {NULL}
  };
  const char *prog = "lingbot-bench gemm";
  if (!lingbot_tool_parse (prog, "- GEMM rate", NULL, entries, &argc, &argv))
    return LINGBOT_TOOL_USAGE;
  /* set after parsing: GOption drops (leaks) a default string it replaces */
  if (backend_name == NULL)
    backend_name = g_strdup ("cpu");
  if (size < 1 || iters < 1)
    return lingbot_tool_usage_error (prog,
        "--size and --iters must be positive");
  g_autoptr (GError) err = NULL;
  LbBackend *be = lingbot_backend_get (backend_name, &err);
  if (be == NULL) {
    fprintf (stderr, "lingbot-bench gemm: %s\n", err->message);
    return 1;
  }
  LbStream *s = be->stream_new (be, 0, &err);
  if (s == NULL) {
    fprintf (stderr, "lingbot-bench gemm: %s\n", err->message);
    return 1;
  }
  int64_t shape[2] = { size, size };
  g_autoptr (LbTensor) hx = lb_tensor_new (LB_DTYPE_F32, 2, shape);
  float *d = hx->data;
  for (int64_t i = 0; i < (int64_t) size * size; i++)
    d[i] = (float) ((i * 7919) % 1000) / 1000.0f - 0.5f;
  g_autoptr (LbTensor) x = lb_tensor_new_on (s, LB_DTYPE_F32, 2, shape, &err);
  g_autoptr (LbTensor) w = lb_tensor_new_on (s, LB_DTYPE_F32, 2, shape, &err);
  g_autoptr (LbTensor) y = lb_tensor_new_on (s, LB_DTYPE_F32, 2, shape, &err);
  if (y == NULL || !lb_tensor_upload (s, x, hx, &err) ||
      !lb_tensor_upload (s, w, hx, &err)) {
    fprintf (stderr, "lingbot-bench gemm: %s\n", err->message);
    return 1;
  }

  /* one warm-up call (thread pools, cuBLASLt heuristics) */
  if (!lb_ops (s)->gemm (s, x, w, TRUE, NULL, 1.0f, 0.0f, y, &err) ||
      !be->stream_synchronize (s, &err)) {
    fprintf (stderr, "lingbot-bench gemm: %s\n", err->message);
    return 1;
  }
  gint64 t0 = g_get_monotonic_time ();
  for (int i = 0; i < iters; i++)
    lb_ops (s)->gemm (s, x, w, TRUE, NULL, 1.0f, 0.0f, y, NULL);
  be->stream_synchronize (s, NULL);
  double secs = lingbot_bench_seconds_since (t0);
  double flop = 2.0 * size * (double) size * size * iters;
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  lingbot_json_string (b, "bench", "gemm");
  lingbot_json_string (b, "backend", be->name);
  lingbot_json_int (b, "m", size);
  lingbot_json_int (b, "n", size);
  lingbot_json_int (b, "k", size);
  lingbot_json_int (b, "iters", iters);
  lingbot_json_double (b, "seconds", secs);
  lingbot_json_double (b, "gflops", flop / secs / 1e9);
  json_builder_end_object (b);
  lingbot_json_print (b);
  be->stream_free (s);
  return 0;
}

static const struct
{
  const char *name;
  int (*main) (int argc, char **argv);
  const char *help;
} commands[] = {
  {"gemm", bench_gemm, "matrix multiply rate of a backend (GFLOP/s)"},
  {"ops", lingbot_bench_ops,
      "the CPU kernels (attention, conv, norms) next to sgemm, per ISA"},
  {"comm", lingbot_bench_comm_main,
      "collectives and channel GB/s on CPU ranks vs memcpy"},
  {"dit", lingbot_bench_dit_main,
      "streamed DiT chunks: chunk seconds, steady FPS, TFLOP/s, MFU"},
  {"vae", lingbot_bench_vae_main,
      "streamed VAE decode: seconds per chunk, TFLOP/s, halo bytes"},
  {"direct", lingbot_bench_direct_main,
      "the whole pipeline (elements or session): per-chunk JSON, steady FPS"},
  {"replay", lingbot_bench_replay_main,
      "real-time replay of a control trace: deadline misses and lateness"},
#ifdef LINGBOT_BENCH_HAVE_GST
  {"live", lingbot_bench_live_main,
      "a live session into a synchronised sink: key to screen, latency"},
#endif
};

static void
usage (FILE * f)
{
  fprintf (f, "usage: lingbot-bench COMMAND [OPTIONS]\n\ncommands:\n");
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
    fprintf (f, "  %-8s %s\n", commands[i].name, commands[i].help);
  fprintf (f, "\nlingbot-bench COMMAND --help for a command's options\n");
}

int
main (int argc, char **argv)
{
  if (argc < 2 || g_str_equal (argv[1], "--help") ||
      g_str_equal (argv[1], "-h")) {
    usage (argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++) {
    if (g_str_equal (argv[1], commands[i].name)) {
      /* a command's --help starts "Usage: lingbot-bench COMMAND [OPTION…]" */
      g_autofree char *prgname = g_strdup_printf ("lingbot-bench %s",
          commands[i].name);
      g_set_prgname (prgname);
      return commands[i].main (argc - 1, argv + 1);
    }
  }
  fprintf (stderr, "lingbot-bench: unknown command \"%s\"\n", argv[1]);
  usage (stderr);
  return 2;
}

/* lingbot-gst: `lingbot-bench vae`: streamed Wan2.1 VAE decode, unsharded
 * and height-sharded over worker groups on CPU or GPU ranks
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-bench vae [--model PATH | --dim N] [--latent HxW]
 *       [--chunk-latents L] [--chunks K] [--ranks 1,2,4 | --devices D]
 *       [--dit-chunk-s S] [--precision fp32|bf16] [--seed S] [--json]
 *
 * Without --model the weights are random (lingbot_vae_write_random() into a
 * temporary file).  For every rank count of --ranks (CPU ranks), or once
 * on the ranks of --devices (cpu:N, or GPU ordinals such as 0 or 0,1), it
 * decodes K chunks of L random latent frames in one session and reports
 * seconds per chunk (the first chunk, 4L - 3 frames, separately from the
 * steady ones, 4L frames), achieved TFLOP/s against the decode FLOP model
 * of spec/performance_anchors.md 2.3, and the halo bytes all ranks sent
 * per steady chunk, with the longest time one rank spent in exchanges
 * (waiting for its neighbours included).  One rank is the unsharded
 * decoder on one stream.  With --dit-chunk-s it also prints the decode's
 * share of a chunk (decode / (DiT + decode)), the anchors' "< 10 %".
 * --precision bf16 runs the one-rank decoder on a stream in LB_MATH_BF16
 * mode (kernels/ops.h: TF32/bf16 convolution engines and bf16 GEMMs on a
 * GPU; the reference decodes in FP32, the default).
 */
#include "tools/bench-vae.h"
#include "tools/bench-common.h"
#include "tools/tool-common.h"
#include "tools/tool-json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <glib/gstdio.h>

#include "comm/worker-group.h"
#include "lingbot/backend.h"
#include "lingbot/vae.h"

typedef struct
{
  int ranks;
  double first_s, steady_s;
  int steady_chunks, steady_frames;
  guint64 halo_bytes;
  double halo_s;
  gsize cache_bytes;
  gboolean have_in16;
  guint64 in16[3];              /* per steady chunk: in place, concatenated,
                                 * widened (bf16 channels-last conv inputs) */
} RunResult;

typedef void (*ConvInputStats) (guint64 * in_place, guint64 * concatenated,
    guint64 * widened);

/* The CUDA module's counters of bf16 channels-last conv inputs (docs/
 * design/cuda.md "Channels-last conv inputs"), or zeros. */
static void
in16_counts (ConvInputStats f, guint64 v[3])
{
  v[0] = v[1] = v[2] = 0;
  if (f)
    f (&v[0], &v[1], &v[2]);
}

/**
 * lingbot_bench_vae_decode_flops:
 * @dim: the decoder's base width (96 for Wan2.1)
 * @latent_h: latent rows
 * @latent_w: latent columns
 * @latent_frames: latent frames of a steady chunk (4 -> 16 video frames)
 *
 * FLOPs (2 per multiply-add) of one steady-state causal decode chunk: the
 * count of spec/performance_anchors_calc.py (wan_decode_macs) with its
 * channel widths 96/192/384 written as dim, 2 dim, 4 dim: every 3-D conv
 * (27 taps), time conv (3), spatial conv (9), shortcut (1) and the
 * mid-block attention per latent frame.  52.4 TFLOP at 58x104, 54.2 at
 * 60x104 (dim 96, 4 latents).
 *
 * Returns: the FLOPs.
 */
double
lingbot_bench_vae_decode_flops (int dim, int latent_h, int latent_w,
    int latent_frames)
{
  const double c = dim, c2 = 2.0 * dim, c4 = 4.0 * dim;
  const double P0 = (double) latent_h * latent_w;
  const double T0 = latent_frames, T1 = 2.0 * T0, T2 = 4.0 * T0;
#define CONV(cin, cout, k, pix, t) ((double) (cin) * (cout) * (k) * (pix) * (t))
  double m = CONV (16, 16, 1, P0, T0);  /* conv2, 1x1x1 */
  m += CONV (16, c4, 27, P0, T0);       /* conv1 */
  m += 4 * CONV (c4, c4, 27, P0, T0);   /* middle: 2 resblocks */
  m += T0 * (P0 * c4 * 3 * c4 + P0 * c4 * c4 + 2 * P0 * P0 * c4);       /* attn */
  m += 6 * CONV (c4, c4, 27, P0, T0);   /* up 0: 3 resblocks */
  m += CONV (c4, 2 * c4, 3, P0, T0);    /* up 0 time conv */
  m += CONV (c4, c2, 9, 4 * P0, T1);    /* up 0 spatial conv */
  m += CONV (c2, c4, 27, 4 * P0, T1) + CONV (c4, c4, 27, 4 * P0, T1)
      + CONV (c2, c4, 1, 4 * P0, T1);   /* up 1: resblock 2c -> 4c */
  m += 4 * CONV (c4, c4, 27, 4 * P0, T1);       /* up 1: 2 resblocks */
  m += CONV (c4, 2 * c4, 3, 4 * P0, T1);        /* up 1 time conv */
  m += CONV (c4, c2, 9, 16 * P0, T2);   /* up 1 spatial conv */
  m += 6 * CONV (c2, c2, 27, 16 * P0, T2);      /* up 2: 3 resblocks */
  m += CONV (c2, c, 9, 64 * P0, T2);    /* up 2 spatial conv */
  m += 6 * CONV (c, c, 27, 64 * P0, T2);        /* up 3: 3 resblocks */
  m += CONV (c, 3, 27, 64 * P0, T2);    /* head */
#undef CONV
  return 2 * m;
}

static void
fill_random (LbTensor * t, guint32 seed)
{
  float *d = t->data;
  guint32 x = seed * 2654435761u + 12345;
  for (int64_t i = 0; i < lb_tensor_numel (t); i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    d[i] = 2.f * ((float) (x >> 8) / 8388608.f - 1.f);
  }
}

static gboolean
run_one (LingbotVae * vae, LbBackend * be, int ranks, const int *ordinals,
    int h, int w, int L, int chunks, guint32 seed, LbMathMode math,
    RunResult * res, GError ** error)
{
  LbStream *stream = NULL;
  LbWorkerGroup *group = NULL;
  LingbotVaeDecoder *dec;
  if (ranks == 1) {
    stream = be->stream_new (be, ordinals ? ordinals[0] : 0, error);
    if (stream == NULL)
      return FALSE;
    stream->math = math;
    dec = lingbot_vae_decoder_new (vae, stream, h, w, L, error);
  } else {
    group = lb_worker_group_new (be, ranks, ordinals, NULL, error);
    if (group == NULL)
      return FALSE;
    dec = lingbot_vae_decoder_new_sharded (vae, group, h, w, L, error);
  }
  gboolean ok = dec != NULL;
  int64_t lshape[4] = { 16, L, h, w };
  int64_t fshape[4] = { 3, 4 * L, 8 * h, 8 * w };
  LbTensor *lat = lb_tensor_new (LB_DTYPE_F32, 4, lshape);
  LbTensor *frames = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  memset (res, 0, sizeof *res);
  res->ranks = ranks;
  ConvInputStats in16 = (ConvInputStats) lb_backend_get_proc (be,
      "lingbot_backend_cuda_conv_input_stats");
  res->have_in16 = in16 != NULL;
  guint64 in16_0[3] = { 0 }, in16_1[3];
  for (int c = 0; ok && c < chunks; c++) {
    fill_random (lat, seed + c);
    int n = 0;
    gint64 t0 = g_get_monotonic_time ();
    ok = lingbot_vae_decoder_decode (dec, lat, frames, &n, error);
    double s = lingbot_bench_seconds_since (t0);
    if (!ok)
      break;
    if (c == 0) {
      res->first_s = s;
      in16_counts (in16, in16_0);
    } else {
      res->steady_s += s;
      res->steady_chunks++;
      res->steady_frames += n;
      res->halo_bytes = lingbot_vae_decoder_get_halo_bytes (dec);
      res->halo_s += lingbot_vae_decoder_get_halo_seconds (dec);
    }
  }
  if (dec) {
    res->cache_bytes = lingbot_vae_decoder_get_cache_bytes (dec);
    lingbot_vae_decoder_free (dec);
  }
  if (res->steady_chunks) {
    res->steady_s /= res->steady_chunks;
    res->halo_s /= res->steady_chunks;
    in16_counts (in16, in16_1);
    for (int k = 0; k < 3; k++)
      res->in16[k] = (in16_1[k] - in16_0[k]) / res->steady_chunks;
  }
  lb_tensor_free (lat);
  lb_tensor_free (frames);
  if (group)
    lb_worker_group_unref (group);
  if (stream)
    be->stream_free (stream);
  return ok;
}

/**
 * lingbot_bench_vae_main:
 * @argc: arguments after "vae" (argv[0] is the sub-command name)
 * @argv: (array length=argc): the arguments
 *
 * `lingbot-bench vae`, see the head of this file and docs/performance.md.
 *
 * Returns: the process exit status (0 success, 1 run failure, 2 usage).
 */
int
lingbot_bench_vae_main (int argc, char **argv)
{
  g_autofree char *model = NULL, *latent = NULL,
      *ranks_s = NULL, *devices = NULL, *precision = NULL;
  gint dim = 8, L = 4, chunks = 3, seed = 1;
  double dit_chunk_s = 0;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    {"model", 0, 0, G_OPTION_ARG_FILENAME, &model,
        "Wan2.1_VAE.pth or safetensors (default: random weights)", "PATH"},
    {"dim", 0, 0, G_OPTION_ARG_INT, &dim,
        "base width of the random model (8; the real VAE is 96)", "N"},
    {"latent", 0, 0, G_OPTION_ARG_STRING, &latent,
        "latent rows x columns (12x20; 480x832 video is 60x104, 464x832 "
          "58x104)", "HxW"},
    {"chunk-latents", 0, 0, G_OPTION_ARG_INT, &L,
        "latent frames per chunk (4)", "L"},
    {"chunks", 0, 0, G_OPTION_ARG_INT, &chunks,
        "chunks per run; the first is reported apart (3)", "K"},
    {"ranks", 0, 0, G_OPTION_ARG_STRING, &ranks_s,
        "comma-separated CPU rank counts, one run each (1,2,4)", "LIST"},
    {"devices", 'd', 0, G_OPTION_ARG_STRING, &devices,
        "one run on these ranks: cpu:N, or GPU ordinals such as 0 or 0,1 "
          "(instead of --ranks)", "D"},
    {"dit-chunk-s", 0, 0, G_OPTION_ARG_DOUBLE, &dit_chunk_s,
        "seconds of a DiT chunk: print the decode's share of a chunk", "S"},
    {"precision", 0, 0, G_OPTION_ARG_STRING, &precision,
        "fp32 (default, the reference) or bf16 (one rank: TF32/bf16 conv "
          "engines, bf16 GEMMs)", "P"},
    {"seed", 0, 0, G_OPTION_ARG_INT, &seed, "latents/weights seed (1)", "S"},
    {"json", 0, 0, G_OPTION_ARG_NONE, &json, "print one JSON object", NULL},
    {NULL}
  };
  const char *prog = "lingbot-bench vae";
  if (!lingbot_tool_parse (prog, "- streamed VAE decode seconds per chunk",
          NULL, entries, &argc, &argv))
    return LINGBOT_TOOL_USAGE;
  int h = 0, w = 0;
  /* defaults set after parsing: GOption drops (leaks) a string it
   * replaces */
  if (latent == NULL)
    latent = g_strdup ("12x20");
  if (sscanf (latent, "%dx%d", &h, &w) != 2 || h < 1 || w < 1 || L < 1
      || chunks < 1 || dim < 2 || dit_chunk_s < 0)
    return lingbot_tool_usage_error (prog, "bad --latent, --chunk-latents, "
        "--chunks, --dim or --dit-chunk-s");
  LbMathMode math = LB_MATH_FP32;
  if (precision && strcmp (precision, "fp32") != 0) {
    if (strcmp (precision, "bf16") != 0)
      return lingbot_tool_usage_error (prog, "--precision is fp32 or bf16, "
          "not \"%s\"", precision);
    math = LB_MATH_BF16;
  }
  if (ranks_s && devices)
    return lingbot_tool_usage_error (prog, "give --ranks (CPU rank counts) "
        "or --devices (one set of ranks), not both");
  g_autoptr (GError) err = NULL;

  /* the runs: one per --ranks entry on the CPU, or the --devices set */
  LbBackend *be = lb_cpu_backend ();
  g_autofree int *ordinals = NULL;
  g_auto (GStrv) list = NULL;
  int n_runs;
  if (devices) {
    int n = 0;
    if (!lingbot_backend_parse_devices (devices, &be, &n, &ordinals, &err))
      return lingbot_tool_usage_error (prog, "%s", err->message);
    list = g_new0 (char *, 2);
    list[0] = g_strdup_printf ("%d", n);
    n_runs = 1;
  } else {
    list = g_strsplit (ranks_s ? ranks_s : "1,2,4", ",", -1);
    n_runs = (int) g_strv_length (list);
  }

  g_autofree char *tmpdir = NULL, *tmpfile = NULL;
  if (model == NULL) {
    tmpdir = g_dir_make_tmp ("lingbot-bench-vae-XXXXXX", &err);
    if (tmpdir == NULL) {
      fprintf (stderr, "lingbot-bench vae: %s\n", err->message);
      return 1;
    }
    tmpfile = g_build_filename (tmpdir, "vae.safetensors", NULL);
    if (!lingbot_vae_write_random (tmpfile, dim, (guint64) seed, &err)) {
      fprintf (stderr, "lingbot-bench vae: %s\n", err->message);
      g_rmdir (tmpdir);
      return 1;
    }
  }
  LingbotVae *vae
      = lingbot_vae_load (model ? model : tmpfile, LINGBOT_VAE_DECODER, &err);
  if (tmpfile) {
    g_unlink (tmpfile);
    g_rmdir (tmpdir);
  }
  if (vae == NULL) {
    fprintf (stderr, "lingbot-bench vae: %s\n", err->message);
    return 1;
  }

  const int vdim = lingbot_vae_get_dim (vae);
  const double flops = lingbot_bench_vae_decode_flops (vdim, h, w, L);
  RunResult *res = g_new0 (RunResult, n_runs);
  int status = 0;
  for (int i = 0; i < n_runs; i++) {
    int r = atoi (list[i]);
    if (r < 1 || (math != LB_MATH_FP32 && r != 1)
        || !run_one (vae, be, r, ordinals, h, w, L, chunks, (guint32) seed,
            math, &res[i], &err)) {
      fprintf (stderr, "lingbot-bench vae: %d %s rank(s): %s\n", r,
          be->name, err ? err->message : r < 1 ? "bad rank count"
          : "--precision bf16 runs one rank");
      status = 1;
      n_runs = i;
      break;
    }
    if (!json) {
      const double st = res[i].steady_s;
      printf ("%s ranks %d: first chunk (%d frames) %.3f s; steady %.3f "
          "s/chunk (%.2f fps, %.4g TFLOP/s of %.4g TFLOP); halo %.2f "
          "MB/chunk in %.3f s; cache %.1f MB\n",
          be->name, r, 4 * L - 3, res[i].first_s, st,
          st > 0 ? 4 * L / st : 0.0, st > 0 ? flops / st / 1e12 : 0.0,
          flops / 1e12, res[i].halo_bytes / 1e6, res[i].halo_s,
          res[i].cache_bytes / 1e6);
      if (res[i].have_in16)
        printf ("  bf16 channels-last conv inputs per steady chunk: %"
            G_GUINT64_FORMAT " read in place, %" G_GUINT64_FORMAT
            " concatenated, %" G_GUINT64_FORMAT " widened to f32\n",
            res[i].in16[0], res[i].in16[1], res[i].in16[2]);
      if (dit_chunk_s > 0 && st > 0)
        printf ("  decode share of a chunk: %.1f %% (decode %.3f s, DiT "
            "%.3f s; decode / DiT = %.3f)\n",
            100 * st / (st + dit_chunk_s), st, dit_chunk_s, st / dit_chunk_s);
    }
  }
  if (json) {
    g_autoptr (JsonBuilder) b = json_builder_new ();
    json_builder_begin_object (b);
    lingbot_json_string (b, "bench", "vae");
    lingbot_json_string (b, "backend", be->name);
    lingbot_json_string (b, "devices", devices);
    lingbot_json_int (b, "dim", vdim);
    json_builder_set_member_name (b, "latent");
    json_builder_begin_array (b);
    json_builder_add_int_value (b, h);
    json_builder_add_int_value (b, w);
    json_builder_end_array (b);
    lingbot_json_int (b, "chunk_latents", L);
    lingbot_json_int (b, "chunks", chunks);
    lingbot_json_string (b, "precision",
        math == LB_MATH_BF16 ? "bf16" : "fp32");
    lingbot_json_double (b, "decode_tflop", flops / 1e12);
    json_builder_set_member_name (b, "dit_chunk_s");
    if (dit_chunk_s > 0)
      json_builder_add_double_value (b, dit_chunk_s);
    else
      json_builder_add_null_value (b);
    json_builder_set_member_name (b, "runs");
    json_builder_begin_array (b);
    for (int i = 0; i < n_runs; i++) {
      const double st = res[i].steady_s;
      json_builder_begin_object (b);
      lingbot_json_int (b, "ranks", res[i].ranks);
      lingbot_json_double (b, "first_chunk_s", res[i].first_s);
      lingbot_json_double (b, "steady_chunk_s", st);
      lingbot_json_double (b, "steady_fps", st > 0 ? 4 * L / st : 0.0);
      lingbot_json_double (b, "steady_tflops",
          st > 0 ? flops / st / 1e12 : 0.0);
      lingbot_json_int (b, "halo_bytes_per_chunk", (gint64) res[i].halo_bytes);
      lingbot_json_double (b, "halo_s_per_chunk", res[i].halo_s);
      lingbot_json_int (b, "cache_bytes", (gint64) res[i].cache_bytes);
      if (res[i].have_in16) {
        json_builder_set_member_name (b, "conv_inputs_bf16");
        json_builder_begin_object (b);
        lingbot_json_int (b, "in_place", (gint64) res[i].in16[0]);
        lingbot_json_int (b, "concatenated", (gint64) res[i].in16[1]);
        lingbot_json_int (b, "widened", (gint64) res[i].in16[2]);
        json_builder_end_object (b);
      }
      json_builder_set_member_name (b, "decode_share");
      if (dit_chunk_s > 0 && st > 0)
        json_builder_add_double_value (b, st / (st + dit_chunk_s));
      else
        json_builder_add_null_value (b);
      json_builder_end_object (b);
    }
    json_builder_end_array (b);
    json_builder_end_object (b);
    lingbot_json_print (b);
  }
  g_free (res);
  lingbot_vae_unref (vae);
  return status;
}

/* lingbot-gst: `lingbot-bench dit`: streamed DiT chunks (4 denoising passes
 * + the clean pass each) on a worker group, with the chunk metrics of
 * DESIGN.md 6, achieved TFLOP/s and MFU
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-bench dit [--model DIR | --preset tiny|1.3b|14b [--dim N
 *       --layers N --heads N --ffn N --text-dim N]] [--devices cpu:N|0,1..]
 *       [--latent HxW] [--chunks K] [--text-len L] [--seed S]
 *       [--precision fp32|bf16|fp8] [--window-full] [--peak-tflops X]
 *       [--rank-of N [--link-gbps X]] [--estimate] [--json]
 *
 * Without --model the weights are random (lingbot_dit_new_random()).  The
 * first chunk is the warm-up; "steady" statistics are over chunks >= 1.
 * FLOPs count the GEMMs and attention products this implementation runs
 * (camera injection once per chunk, text K/V once per session); the
 * reference's count (camera path in every pass, spec/performance_anchors.md
 * 2.2) is reported next to it.  --json prints JSON lines: "setup" once,
 * "chunk" after every chunk (flushed, so a run cut short by a timeout
 * keeps what it measured), then "summary".  --estimate prints the FLOP
 * and device-memory models for the shape and builds nothing.  --rank-of N
 * runs rank 0's share of an N-rank world on the one rank of --devices (a
 * solo group, lb_worker_group_new_solo()) and adds a "rank_of" line: its
 * chunk time, its counted exchange and the N-GPU projection
 * (docs/performance.md "One rank of an N-GPU chunk").
 */
#include "tools/bench-dit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lingbot/backend.h"
#include "lingbot/dit-session.h"
#include "lingbot/noise.h"
#include "comm/collectives.h"
#include "tools/bench-common.h"
#include "tools/bench-counters.h"
#include "tools/tool-common.h"
#include "tools/tool-json.h"
#include "tools/tool-dit-shape.h"

/* Dense peaks per device, TFLOP/s, used for MFU when --peak-tflops is not
 * given on a GPU backend: H100/H200 SXM BF16 tensor cores (anchors 1c)
 * and FP32 CUDA cores. */
#define PEAK_BF16_TFLOPS 989.4
#define PEAK_FP32_TFLOPS 67.0

/**
 * lingbot_bench_dit_flops:
 * @cfg: the model
 * @tokens: query tokens of a chunk, N = C T_f (6240 at 832x480)
 * @text_len: text tokens (512 in production)
 * @keys: self-attention keys per block in the chunk's passes (the cache
 *   window after the chunk's own keys were written: 28080 when full)
 * @n_passes: forwards per chunk (4 denoising + 1 clean = 5)
 * @out: (out): the counts, see #LingbotBenchDitFlops
 *
 * The FLOP model of spec/performance_anchors.md 2.2 (its per-token MAC
 * table, 2 FLOPs per MAC, attention 4 N K D per block without masking
 * inside the window), for any shape.  Elementwise work, norms and
 * softmax are not counted, as in the anchors.
 */
void
lingbot_bench_dit_flops (const LingbotDitConfig * cfg, int64_t tokens,
    int64_t text_len, int64_t keys, int n_passes, LingbotBenchDitFlops * out)
{
  const double D = cfg->dim, F = cfg->ffn_dim, L = cfg->num_layers;
  const double N = (double) tokens;
  out->linear = L * (2 * N * D * D * 6 + 2 * N * D * F * 2)
      + 2 * N * D * cfg->in_dim * 4 + 2 * N * D * cfg->out_dim * 4;
  out->self_attn = L * 4 * N * (double) keys *D;
  out->cross_attn = L * 4 * N * (double) text_len *D;
  out->pass = out->linear + out->self_attn + out->cross_attn;
  out->camera = L * 2 * N * D * D * 4
      + 2 * N * D * cfg->control_in_features + 2 * 2 * N * D * D;
  out->chunk = n_passes * out->pass + out->camera;
  out->chunk_reference = n_passes * (out->pass + out->camera);
}

/**
 * lingbot_bench_dit_memory:
 * @cfg: the model (its chunk_frames and local_attn_frames give the chunk
 *   and the KV window; a global window counts as the model's default 18)
 * @lat_h: latent rows
 * @lat_w: latent columns
 * @text_len: text tokens
 * @n_ranks: Ulysses ranks (each on its own device)
 * @n_steps: denoising steps (4)
 * @weight_bytes: bytes per weight on the device: 4 float32 (%LB_MATH_FP32),
 *   2 bf16 (%LB_MATH_BF16), 1 E4M3 (%LB_MATH_FP8)
 * @out: (out): bytes per rank, see #LingbotBenchDitMemory
 *
 * The buffer table of docs/design/dit-devices.md "Memory per rank", what
 * lingbot_dit_rank_init() and the session allocate on a device rank.  The
 * KV cache is f32 with f32 weights and bf16 otherwise (fp8 keeps bf16's
 * cache, lingbot_dit_kv_dtype()); the fp8 weights' per-row f32 scales
 * (4 bytes per output row of each linear, about 0.05 % of the codes) are
 * not counted, as the f32 biases and norms of the bf16 figure are not.
 */
void
lingbot_bench_dit_memory (const LingbotDitConfig * cfg, int64_t lat_h,
    int64_t lat_w, int64_t text_len, int n_ranks, int n_steps,
    int weight_bytes, LingbotBenchDitMemory * out)
{
  const guint64 D = cfg->dim, L = cfg->num_layers, R = MAX (n_ranks, 1);
  const guint64 F = cfg->chunk_frames, hp = lat_h / 2, wp = lat_w / 2;
  const guint64 window = cfg->local_attn_frames > 0 ? cfg->local_attn_frames
      : LINGBOT_DIT_DEFAULT_LOCAL_ATTN_FRAMES;
  const guint64 N = F * hp * wp, n = (hp + R - 1) / R * wp * F;
  const guint64 cap = window * hp * wp, s = n_steps;
  const guint64 tok_w = (guint64) cfg->in_dim * 4, ctl_w =
      cfg->control_in_features;
  memset (out, 0, sizeof *out);
  out->weights = lingbot_dit_config_n_params (cfg) * (guint64) weight_bytes;
  /* bf16 weights go with LB_MATH_BF16, whose device ranks keep a bf16
   * KV cache (docs/design/cuda.md "BF16 KV cache") */
  out->kv_cache = 2 * L * cap * (D / R) * (guint64) (weight_bytes == 4 ? 4 : 2);
  out->camera = 2 * L * n * D * 4;
  out->cross_kv = 2 * L * text_len * D * 4;
  out->activations = (8 * n * D + n * cfg->ffn_dim + n * cfg->out_dim * 4)
      * 4;
  if (R > 1)
    out->ulysses = (4 * n * D + 4 * N * D / R + 2 * N * cfg->out_dim * 4) * 4
        + n * (tok_w + ctl_w) * 4;
  out->session = ((guint64) cfg->in_dim + ctl_w / 4 + cfg->out_dim * (4 + s))
      * F * lat_h * lat_w * 4 + N * (tok_w + ctl_w) * 4
      + (s + 1) * L * 6 * D * 4;
  out->total = out->weights + out->kv_cache + out->camera + out->cross_kv
      + out->activations + out->ulysses + out->session;
}

/* Pass timing: the session calls back on rank 0 after each of the
 * n_steps denoising passes and the clean pass; a pass lasts from the
 * previous mark (the chunk start for the first) to its callback.  On a
 * device the callback's downloads synchronise rank 0's stream, so the
 * marks are completion times, not enqueue times. */
typedef struct
{
  gint64 mark;
  int n;
  double secs[LINGBOT_DIT_MAX_STEPS + 1];
} PassTimes;

/* lingbot_backend_cuda_attention_stats() of the CUDA module (runs,
 * declined, plans built, last error) */
typedef void (*AttnStatsFunc) (guint64 * runs, guint64 * declined,
    guint64 * plans, char **last_error);

static guint64
attn_plans (AttnStatsFunc f)
{
  guint64 plans = 0;
  if (f != NULL)
    f (NULL, NULL, &plans, NULL);
  return plans;
}

static void
on_pass (LingbotDitSession * session, int64_t chunk, int step,
    const LbTensor * x_in, const LbTensor * pred, const LbTensor * x0,
    gpointer user_data)
{
  PassTimes *pt = user_data;
  gint64 now = g_get_monotonic_time ();
  if (pt->n <= LINGBOT_DIT_MAX_STEPS)
    pt->secs[pt->n++] = (now - pt->mark) / 1e6;
  pt->mark = now;
}

/* Ranks named by a --devices string without probing any backend (for
 * --estimate on a machine without the device). */
static int
count_ranks (const char *devices)
{
  if (devices == NULL || g_str_equal (devices, "cpu"))
    return 1;
  if (g_str_has_prefix (devices, "cpu:"))
    return MAX (atoi (devices + 4), 1);
  g_auto (GStrv) parts = g_strsplit (devices, ",", -1);
  return MAX ((int) g_strv_length (parts), 1);
}

/* Distinct devices among the ranks (the MFU denominator counts devices,
 * not ranks: ranks sharing a GPU share its peak). */
static int
count_devices (const LbBackend * be, const int *ordinals, int n_ranks)
{
  if (be->device_type == LB_DEVICE_CPU)
    return 1;
  int n = 0;
  for (int i = 0; i < n_ranks; i++) {
    gboolean seen = FALSE;
    for (int j = 0; j < i; j++)
      seen = seen || ordinals[j] == ordinals[i];
    n += !seen;
  }
  return MAX (n, 1);
}

static void
spec_check (double *ours, double *ours_ref)
{
  LingbotDitConfig c;
  lingbot_dit_config_init_preset (&c, LINGBOT_DIT_PRESET_14B);
  LingbotBenchDitFlops f;
  const int64_t tf = 30 * 52;   /* 832x480: latent 60x104, patch 2x2 */
  lingbot_bench_dit_flops (&c, 4 * tf, 512, 18 * tf, 5, &f);
  *ours = f.chunk;
  *ours_ref = f.chunk_reference;
}

/* the member @name of @b's object: the array [@a, @b2] */
static void
add_int_pair (JsonBuilder * b, const char *name, gint64 a, gint64 b2)
{
  json_builder_set_member_name (b, name);
  json_builder_begin_array (b);
  json_builder_add_int_value (b, a);
  json_builder_add_int_value (b, b2);
  json_builder_end_array (b);
}

/* the member "spec_14b_480p" of @b's object */
static void
add_spec_check_json (JsonBuilder * b)
{
  double ours, ours_ref;
  spec_check (&ours, &ours_ref);
  json_builder_set_member_name (b, "spec_14b_480p");
  json_builder_begin_object (b);
  lingbot_json_double (b, "tflop", ours / 1e12);
  lingbot_json_double (b, "spec_tflop", LINGBOT_BENCH_SPEC_14B_480P_TFLOP);
  lingbot_json_double (b, "reference_tflop", ours_ref / 1e12);
  lingbot_json_double (b, "spec_reference_tflop",
      LINGBOT_BENCH_SPEC_14B_480P_REFERENCE_TFLOP);
  json_builder_end_object (b);
}

static void
print_spec_check_text (void)
{
  double ours, ours_ref;
  spec_check (&ours, &ours_ref);
  printf ("FLOP model, 14B at 832x480 (window full, 512 text tokens, 5 "
      "passes): %.1f TFLOP/chunk as lingbot runs it (anchors 2.2, camera "
      "hoisted: %.1f); %.1f with the camera path in every pass (anchors, as "
      "the reference executes it: %.1f)\n", ours / 1e12,
      LINGBOT_BENCH_SPEC_14B_480P_TFLOP, ours_ref / 1e12,
      LINGBOT_BENCH_SPEC_14B_480P_REFERENCE_TFLOP);
}

/**
 * lingbot_bench_dit_exchange:
 * @cfg: the model
 * @lat_h: latent rows
 * @lat_w: latent columns
 * @n_ranks: Ulysses ranks
 * @n_passes: forwards per chunk (5: 4 denoising + the clean pass)
 * @out: (out): the chunk's exchange volume, see #LingbotBenchDitExchange
 *
 * Bytes counted as the all-to-alls move them, for a rank with the mean
 * band (N / R tokens; uneven bands move up to a row's tokens more): per
 * exchange N / R x D elements, (R - 1) / R of them to the other ranks.
 */
void
lingbot_bench_dit_exchange (const LingbotDitConfig * cfg, int64_t lat_h,
    int64_t lat_w, int n_ranks, int n_passes, LingbotBenchDitExchange * out)
{
  const guint64 R = MAX (n_ranks, 1), hp = lat_h / 2, wp = lat_w / 2;
  const guint64 N = hp * wp * (guint64) cfg->chunk_frames;
  const guint64 hd = cfg->dim / cfg->num_heads;
  const gboolean q16 = hd == 64 || hd == 128;
  memset (out, 0, sizeof *out);
  if (R == 1)
    return;
  /* elements one exchange sends to peers */
  const guint64 per = N * (guint64) cfg->dim / R * (R - 1) / R;
  const guint64 ex = (guint64) cfg->num_layers * (guint64) n_passes;
  out->all_to_alls = 4 * ex;
  out->bytes_f32 = 4 * ex * per * 4;
  out->bytes_bf16 = ex * per * ((q16 ? 2 : 4) + 3 * 2);
  /* q exposed, and half of the output (2 head groups) */
  out->exposed_bf16 = ex * per * (q16 ? 2 : 4) + ex * per * 2 / 2;
}

/**
 * lingbot_bench_dit_out_groups:
 * @heads_local: heads per rank
 *
 * The head groups of the overlapped output exchange, by the DiT's rule
 * (lingbot/dit-ulysses.c): $LINGBOT_COMM_OUT_GROUPS (default 2; an
 * invalid value counts as the default here, the DiT refuses it), at most
 * 8, lowered to the largest divisor of @heads_local.
 *
 * Returns: the group count G, 1 = no split.
 */
int
lingbot_bench_dit_out_groups (int heads_local)
{
  const char *env = g_getenv ("LINGBOT_COMM_OUT_GROUPS");
  gint64 want = 2;
  if (env != NULL && *env != '\0') {
    char *end = NULL;
    gint64 v = g_ascii_strtoll (env, &end, 10);
    if (end != env && *end == '\0' && v >= 1)
      want = v;
  }
  want = MIN (want, 8);
  while (want > 1 && heads_local % want != 0)
    want--;
  return (int) want;
}

/**
 * lingbot_bench_dit_rank_exchange:
 * @cfg: the model
 * @lat_h: latent rows
 * @lat_w: latent columns
 * @world_ranks: Ulysses ranks R (2 or more, dividing the heads)
 * @rank: the rank, 0..R-1
 * @n_passes: forwards per chunk (5)
 * @bf16: exchanges of a bf16 KV cache (device ranks in LB_MATH_BF16): k,
 *   v and the attention output as bf16, q too at head dim 64 or 128
 * @overlap: the exchanges overlap compute as on NCCL ranks
 *   (lingbot_bench_dit_out_groups() head groups)
 * @out: (out): see #LingbotBenchDitRankExchange
 *
 * Rank @rank's band is the lb_split_rows() band of the token rows; in the
 * q/k/v all-to-all it sends its band to every peer and receives each
 * peer's band of its own heads, in the output all-to-all the reverse, and
 * each pass all-gathers the head output (out_dim x 4 floats per token).
 */
void
lingbot_bench_dit_rank_exchange (const LingbotDitConfig * cfg,
    int64_t lat_h, int64_t lat_w, int world_ranks, int rank, int n_passes,
    gboolean bf16, gboolean overlap, LingbotBenchDitRankExchange * out)
{
  const int R = MAX (world_ranks, 1);
  const int64_t hp = lat_h / 2, wp = lat_w / 2, F = cfg->chunk_frames;
  const guint64 hd = cfg->dim / cfg->num_heads;
  const guint64 hl = cfg->num_heads / R;
  const guint64 zf = (guint64) cfg->out_dim * 4;
  const guint64 es[4] = { bf16 && (hd == 64 || hd == 128) ? 2 : 4,
    bf16 ? 2 : 4, bf16 ? 2 : 4, bf16 ? 2 : 4
  };
  memset (out, 0, sizeof *out);
  if (R < 2)
    return;
  int64_t r0, rows, mine;
  lb_split_rows (hp, R, rank, &r0, &mine);
  const guint64 n_me = (guint64) (F * mine * wp);
  guint64 n_peers = 0;
  for (int j = 0; j < R; j++) {
    if (j == rank)
      continue;
    lb_split_rows (hp, R, j, &r0, &rows);
    n_peers += (guint64) (F * rows * wp);
  }
  const guint64 ex = (guint64) cfg->num_layers * (guint64) n_passes;
  for (int i = 0; i < 4; i++) {
    /* q, k, v: my band to each peer, each peer's band back; out: reverse */
    const guint64 in = (i < 3 ? n_peers : n_me * (R - 1)) * hl * hd * es[i];
    const guint64 o = (i < 3 ? n_me * (R - 1) : n_peers) * hl * hd * es[i];
    out->recv[i] = ex * in;
    out->sent[i] = ex * o;
    out->link[i] = ex * MAX (in, o);
  }
  const guint64 gin = n_peers * zf * 4, gout = n_me * zf * 4 * (R - 1);
  out->recv[4] = (guint64) n_passes *gin;
  out->sent[4] = (guint64) n_passes *gout;
  out->link[4] = (guint64) n_passes *MAX (gin, gout);
  for (int i = 0; i < 5; i++)
    out->link_total += out->link[i];
  out->all_to_all_recv = out->recv[0] + out->recv[1] + out->recv[2] +
      out->recv[3];
  out->all_gather_recv = out->recv[4];
  out->overlap = overlap;
  out->out_groups = overlap ? lingbot_bench_dit_out_groups ((int) hl) : 1;
  out->exposed_link = overlap ? out->link[0] + out->link[3] /
      (guint64) out->out_groups + out->link[4] : out->link_total;
}

/* the member @name of @b's object: the memory terms of @m */
static void
add_memory_json (JsonBuilder * b, const char *name,
    const LingbotBenchDitMemory * m)
{
  json_builder_set_member_name (b, name);
  json_builder_begin_object (b);
  lingbot_json_int (b, "weights", (gint64) m->weights);
  lingbot_json_int (b, "kv_cache", (gint64) m->kv_cache);
  lingbot_json_int (b, "camera", (gint64) m->camera);
  lingbot_json_int (b, "cross_kv", (gint64) m->cross_kv);
  lingbot_json_int (b, "activations", (gint64) m->activations);
  lingbot_json_int (b, "ulysses", (gint64) m->ulysses);
  lingbot_json_int (b, "session", (gint64) m->session);
  lingbot_json_int (b, "total", (gint64) m->total);
  json_builder_end_object (b);
}

static int
run_estimate (const LingbotDitConfig * cfg, int64_t lh, int64_t lw,
    int text_len, int n_ranks, gboolean json)
{
  const int64_t tf = (lh / 2) * (lw / 2);
  const int64_t window = cfg->local_attn_frames > 0 ? cfg->local_attn_frames
      : LINGBOT_DIT_DEFAULT_LOCAL_ATTN_FRAMES;
  /* the keys attended: the window, at most the model's span */
  const int64_t keys = cfg->max_attention_size > 0 ?
      MIN (window * tf, cfg->max_attention_size) : window * tf;
  LingbotBenchDitFlops f;
  lingbot_bench_dit_flops (cfg, cfg->chunk_frames * tf, text_len, keys, 5, &f);
  LingbotBenchDitMemory m32, m16, m8;
  lingbot_bench_dit_memory (cfg, lh, lw, text_len, n_ranks, 4, 4, &m32);
  lingbot_bench_dit_memory (cfg, lh, lw, text_len, n_ranks, 4, 2, &m16);
  lingbot_bench_dit_memory (cfg, lh, lw, text_len, n_ranks, 4, 1, &m8);
  LingbotBenchDitExchange x;
  lingbot_bench_dit_exchange (cfg, lh, lw, n_ranks, 5, &x);
  const guint64 params = lingbot_dit_config_n_params (cfg);
  if (json) {
    g_autoptr (JsonBuilder) b = json_builder_new ();
    json_builder_begin_object (b);
    lingbot_json_string (b, "bench", "dit");
    lingbot_json_string (b, "event", "estimate");
    lingbot_json_string (b, "variant", lingbot_dit_config_variant (cfg));
    lingbot_json_int (b, "dim", cfg->dim);
    lingbot_json_int (b, "layers", cfg->num_layers);
    add_int_pair (b, "latent", lh, lw);
    lingbot_json_int (b, "text_len", text_len);
    lingbot_json_int (b, "ranks", n_ranks);
    lingbot_json_int (b, "params", (gint64) params);
    lingbot_json_int (b, "host_weight_bytes", (gint64) params * 4);
    lingbot_json_int (b, "window_keys", keys);
    json_builder_set_member_name (b, "flops");
    json_builder_begin_object (b);
    lingbot_json_double (b, "pass", f.pass);
    lingbot_json_double (b, "camera", f.camera);
    lingbot_json_double (b, "chunk", f.chunk);
    lingbot_json_double (b, "chunk_reference", f.chunk_reference);
    lingbot_json_double (b, "linear_pass", f.linear);
    lingbot_json_double (b, "self_attn_pass", f.self_attn);
    lingbot_json_double (b, "cross_attn_pass", f.cross_attn);
    json_builder_end_object (b);
    json_builder_set_member_name (b, "memory_per_rank");
    json_builder_begin_object (b);
    add_memory_json (b, "f32_weights", &m32);
    add_memory_json (b, "bf16_weights", &m16);
    add_memory_json (b, "fp8_weights", &m8);
    json_builder_end_object (b);
    json_builder_set_member_name (b, "exchange_per_rank");
    json_builder_begin_object (b);
    lingbot_json_int (b, "all_to_alls", (gint64) x.all_to_alls);
    lingbot_json_int (b, "bytes_f32", (gint64) x.bytes_f32);
    lingbot_json_int (b, "bytes_bf16", (gint64) x.bytes_bf16);
    lingbot_json_int (b, "exposed_bf16", (gint64) x.exposed_bf16);
    json_builder_end_object (b);
    add_spec_check_json (b);
    json_builder_end_object (b);
    lingbot_json_print (b);
  } else {
    printf ("%s, %d layers, latent %" G_GINT64_FORMAT "x%" G_GINT64_FORMAT
        ", %d text tokens, window %" G_GINT64_FORMAT " keys: %.2f TFLOP per "
        "chunk (%.2f with the camera path in every pass); %.3f G parameters "
        "(%.1f GB f32 on the host)\n", lingbot_dit_config_variant (cfg),
        cfg->num_layers, lh, lw, text_len, keys, f.chunk / 1e12,
        f.chunk_reference / 1e12, params / 1e9, params * 4 / 1e9);
    printf ("device memory per rank (%d rank(s)): %.1f GB with f32 weights, "
        "%.1f GB with bf16 weights, %.1f GB with fp8 weights (weights %.1f / "
        "%.1f / %.1f, KV cache %.1f / %.1f / %.1f, camera %.1f, cross K/V "
        "%.2f, activations %.2f, Ulysses %.2f, session %.2f GB)\n", n_ranks,
        m32.total / 1e9, m16.total / 1e9, m8.total / 1e9, m32.weights / 1e9,
        m16.weights / 1e9, m8.weights / 1e9, m32.kv_cache / 1e9,
        m16.kv_cache / 1e9, m8.kv_cache / 1e9, m32.camera / 1e9,
        m32.cross_kv / 1e9,
        m32.activations / 1e9, m32.ulysses / 1e9, m32.session / 1e9);
    if (x.all_to_alls > 0)
      printf ("Ulysses exchange per rank per chunk: %" G_GUINT64_FORMAT
          " all-to-alls, %.2f GB leaving the rank with f32 exchanges, %.2f GB "
          "in bf16 mode, of which %.2f GB not hidden by the overlap\n",
          x.all_to_alls, x.bytes_f32 / 1e9, x.bytes_bf16 / 1e9,
          x.exposed_bf16 / 1e9);
    print_spec_check_text ();
  }
  return 0;
}

/* MFU against @peak TFLOP/s per device; -1 (JSON null) without a peak. */
static double
mfu (double flops, double secs, double peak, int n_devices)
{
  if (peak <= 0 || secs <= 0)
    return -1;
  return flops / secs / (peak * 1e12 * n_devices);
}

/* the member @name of @b's object: @v, or null when it is negative (not
 * known) */
static void
add_num_or_null (JsonBuilder * b, const char *name, double v)
{
  json_builder_set_member_name (b, name);
  if (v < 0)
    json_builder_add_null_value (b);
  else
    json_builder_add_double_value (b, v);
}

/* --rank-of N needs a rank count Ulysses can split the heads over. */
static gboolean
rank_of_check (const LingbotDitConfig * cfg, int n)
{
  if (cfg->num_heads % n != 0) {
    fprintf (stderr, "lingbot-bench dit: --rank-of %d does not divide the "
        "%d attention heads (each Ulysses rank holds heads / N)\n", n,
        cfg->num_heads);
    return FALSE;
  }
  return TRUE;
}

/* the member @name of @b's object: per collective its calls and bytes in
 * @c; returns the bytes received in all */
static guint64
add_ops_json (JsonBuilder * b, const char *name,
    const LingbotBenchCommCounts * c)
{
  guint64 total = 0;
  json_builder_set_member_name (b, name);
  json_builder_begin_object (b);
  for (int i = 0; i < LINGBOT_BENCH_N_OPS; i++) {
    json_builder_set_member_name (b, lingbot_bench_op_names[i]);
    json_builder_begin_object (b);
    lingbot_json_int (b, "calls", (gint64) c->calls[i]);
    lingbot_json_int (b, "bytes", (gint64) c->bytes[i]);
    lingbot_json_int (b, "sent", (gint64) c->sent[i]);
    lingbot_json_int (b, "link", (gint64) c->link[i]);
    json_builder_end_object (b);
    total += c->bytes[i];
  }
  json_builder_end_object (b);
  return total;
}

/* "comm": rank 0's counts in chunk 0 ("ops", per chunk: every chunk runs
 * the same exchanges) and over the run as called from the host
 * ("ops_run": graph replays are not calls) */
static void
add_comm_json (JsonBuilder * b, const LingbotBenchCommCounts * first,
    const LingbotBenchCommCounts * run, const char *collectives)
{
  json_builder_set_member_name (b, "comm");
  json_builder_begin_object (b);
  lingbot_json_string (b, "collectives", collectives);
  lingbot_json_int (b, "rank", 0);
  guint64 per_chunk = add_ops_json (b, "ops", first);
  guint64 total = add_ops_json (b, "ops_run", run);
  lingbot_json_int (b, "bytes_per_chunk", (gint64) per_chunk);
  lingbot_json_int (b, "bytes_run", (gint64) total);
  json_builder_end_object (b);
}

/* What --rank-of measured and the N-GPU projection, each term.  @chunk_s:
 * rank 0's chunk time (steady mean, else the first chunk); @c: rank 0's
 * counted collectives in chunk 0, @run over the run (host calls, which
 * the solo class's @moved bytes must equal). */
static int
report_rank_of (const LingbotDitConfig * cfg, int64_t lh, int64_t lw,
    int n_passes, const LingbotDitRankShare * sh, gboolean bf16,
    gboolean on_cpu, double chunk_s, gboolean steady,
    const LingbotBenchCommCounts * c, const LingbotBenchCommCounts * run,
    guint64 moved, double link_gbps, gboolean json)
{
  const int done = 1;           /* @c: chunk 0 */
  /* the 4-GPU run this stands for is NCCL ranks with the overlap, unless
   * it is turned off (LINGBOT_COMM_OVERLAP=0) */
  const gboolean overlap = g_strcmp0 (g_getenv ("LINGBOT_COMM_OVERLAP"),
      "0") != 0;
  LingbotBenchDitRankExchange x;
  lingbot_bench_dit_rank_exchange (cfg, lh, lw, sh->world_ranks, 0, n_passes,
      bf16 && !on_cpu, overlap, &x);
  const guint64 a2a = c->bytes[LINGBOT_BENCH_OP_ALL_TO_ALL] / done;
  const guint64 ag = c->bytes[LINGBOT_BENCH_OP_ALL_GATHER] / done;
  const guint64 link = (c->link[LINGBOT_BENCH_OP_ALL_TO_ALL] +
      c->link[LINGBOT_BENCH_OP_ALL_GATHER]) / done;
  /* the split into q, k, v, output and head output comes from the model;
   * it must add up to what was counted */
  const gboolean match = a2a == x.all_to_all_recv &&
      ag == x.all_gather_recv && link == x.link_total &&
      moved == run->bytes[LINGBOT_BENCH_OP_ALL_TO_ALL] +
      run->bytes[LINGBOT_BENCH_OP_ALL_GATHER];
  if (!match) {
    fprintf (stderr, "lingbot-bench dit: --rank-of: counted exchange per "
        "chunk (all-to-all %" G_GUINT64_FORMAT ", all-gather %"
        G_GUINT64_FORMAT ", link %" G_GUINT64_FORMAT " bytes; moved %"
        G_GUINT64_FORMAT " in all) differs from rank 0's model (%"
        G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT ")\n",
        a2a, ag, link, moved, x.all_to_all_recv, x.all_gather_recv,
        x.link_total);
    return 1;
  }
  const double bw = link_gbps * 1e9;
  const double exchange_s = x.link_total / bw;
  const double q_s = x.link[0] / bw, k_s = x.link[1] / bw;
  const double v_s = x.link[2] / bw, out_s = x.link[3] / bw;
  const double ag_s = x.link[4] / bw;
  const double exposed_s = x.exposed_link / bw;
  const double period = chunk_s + exposed_s;
  const int frames = 4 * cfg->chunk_frames;
  const double fps = period > 0 ? frames / period : 0.0;
  const guint64 calls_a2a = c->calls[LINGBOT_BENCH_OP_ALL_TO_ALL] / done;
  const guint64 calls_ag = c->calls[LINGBOT_BENCH_OP_ALL_GATHER] / done;
  if (json) {
    g_autoptr (JsonBuilder) b = json_builder_new ();
    json_builder_begin_object (b);
    lingbot_json_string (b, "bench", "dit");
    lingbot_json_string (b, "event", "rank_of");
    lingbot_json_int (b, "ranks", sh->world_ranks);
    lingbot_json_int (b, "rank", 0);
    add_int_pair (b, "band_rows", sh->band_row0, sh->band_rows);
    lingbot_json_int (b, "token_rows", lh / 2);
    lingbot_json_int (b, "tokens", sh->tokens);
    lingbot_json_int (b, "heads", sh->heads);
    lingbot_json_int (b, "heads_total", cfg->num_heads);
    lingbot_json_int (b, "kv_cache_bytes", (gint64) sh->kv_cache_bytes);
    lingbot_json_double (b, "chunk_s", chunk_s);
    lingbot_json_string (b, "chunk_s_from",
        steady ? "steady_mean" : "first_chunk");
    json_builder_set_member_name (b, "all_to_all");
    json_builder_begin_object (b);
    lingbot_json_int (b, "calls_per_chunk", (gint64) calls_a2a);
    lingbot_json_int (b, "bytes_per_chunk", (gint64) a2a);
    lingbot_json_int (b, "sent_per_chunk",
        (gint64) (c->sent[LINGBOT_BENCH_OP_ALL_TO_ALL] / done));
    lingbot_json_int (b, "q", (gint64) x.recv[0]);
    lingbot_json_int (b, "k", (gint64) x.recv[1]);
    lingbot_json_int (b, "v", (gint64) x.recv[2]);
    lingbot_json_int (b, "out", (gint64) x.recv[3]);
    json_builder_end_object (b);
    json_builder_set_member_name (b, "all_gather");
    json_builder_begin_object (b);
    lingbot_json_int (b, "calls_per_chunk", (gint64) calls_ag);
    lingbot_json_int (b, "bytes_per_chunk", (gint64) ag);
    lingbot_json_int (b, "sent_per_chunk",
        (gint64) (c->sent[LINGBOT_BENCH_OP_ALL_GATHER] / done));
    json_builder_end_object (b);
    lingbot_json_int (b, "link_bytes_per_chunk", (gint64) link);
    lingbot_json_int (b, "moved_bytes", (gint64) moved);
    lingbot_json_double (b, "link_gbps", link_gbps);
    lingbot_json_double (b, "exchange_s", exchange_s);
    json_builder_set_member_name (b, "exchange_terms_s");
    json_builder_begin_object (b);
    lingbot_json_double (b, "q", q_s);
    lingbot_json_double (b, "k", k_s);
    lingbot_json_double (b, "v", v_s);
    lingbot_json_double (b, "out", out_s);
    lingbot_json_double (b, "all_gather", ag_s);
    json_builder_end_object (b);
    json_builder_set_member_name (b, "overlap");
    json_builder_add_boolean_value (b, overlap);
    lingbot_json_int (b, "out_groups", x.out_groups);
    lingbot_json_int (b, "exposed_bytes_per_chunk", (gint64) x.exposed_link);
    lingbot_json_double (b, "exposed_s", exposed_s);
    lingbot_json_double (b, "period_s", period);
    lingbot_json_int (b, "frames", frames);
    lingbot_json_double (b, "fps", fps);
    json_builder_end_object (b);
    lingbot_json_print (b);
  } else {
    printf ("rank 0 of %d (one rank standing in): token rows %"
        G_GINT64_FORMAT "..%" G_GINT64_FORMAT " of %" G_GINT64_FORMAT
        " (%" G_GINT64_FORMAT " tokens per chunk), %d of %d heads, KV cache "
        "%.4g MB\n", sh->world_ranks, sh->band_row0,
        sh->band_row0 + sh->band_rows - 1, lh / 2, sh->tokens, sh->heads,
        cfg->num_heads, sh->kv_cache_bytes / 1e6);
    printf ("rank 0's exchange per chunk (counted): %" G_GUINT64_FORMAT
        " all-to-alls, %.4g MB in, %.4g MB out (q %.4g, k %.4g, v %.4g, "
        "output %.4g MB in); %" G_GUINT64_FORMAT " all-gathers, %.4g MB in, "
        "%.4g MB out; busier direction %.4g MB\n", calls_a2a, a2a / 1e6,
        c->sent[LINGBOT_BENCH_OP_ALL_TO_ALL] / done / 1e6, x.recv[0] / 1e6,
        x.recv[1] / 1e6, x.recv[2] / 1e6, x.recv[3] / 1e6, calls_ag, ag / 1e6,
        c->sent[LINGBOT_BENCH_OP_ALL_GATHER] / done / 1e6, link / 1e6);
    printf ("exchange at %.4g GB/s per direction (nominal; default: H100 "
        "NVLink 4): %.4g ms (q %.4g, k %.4g, v %.4g, output %.4g, head "
        "output all-gather %.4g ms)\n", link_gbps, exchange_s * 1e3,
        q_s * 1e3, k_s * 1e3, v_s * 1e3, out_s * 1e3, ag_s * 1e3);
    if (overlap)
      printf ("exposed: %.4g ms = q's all-to-all + 1/%d of the output's + "
          "the all-gather (k's and v's run behind the v and q GEMMs, "
          "docs/design/cuda.md \"Communication overlap\")\n",
          exposed_s * 1e3, x.out_groups);
    else
      printf ("exposed: %.4g ms = all of it (LINGBOT_COMM_OVERLAP=0: no "
          "overlap)\n", exposed_s * 1e3);
    printf ("projected %d-GPU chunk: %.4g s (rank 0's compute, %s) + %.4g s "
        "exposed = period %.4g s = %.4g fps (%d frames per chunk); not "
        "measured: NCCL latency and launch cost, link contention, the SMs "
        "NCCL takes from the GEMMs\n", sh->world_ranks, chunk_s,
        steady ? "steady mean" : "first chunk", exposed_s, period, fps, frames);
  }
  return 0;
}

/**
 * lingbot_bench_dit_main:
 * @argc: arguments after "dit" (argv[0] is the sub-command name)
 * @argv: (array length=argc): the arguments
 *
 * `lingbot-bench dit`, see the head of this file and docs/performance.md.
 *
 * Returns: the process exit status (0 success, 1 run failure, 2 usage).
 */
int
lingbot_bench_dit_main (int argc, char **argv)
{
  g_autofree char *model = NULL, *devices = NULL;
  g_autofree char *latent = NULL, *precision = NULL;
  g_auto (LingbotToolDitShape) shape = { 0 };
  int chunks = 4, text_len = 64, rank_of = -1;
  gint64 seed = 42;
  double peak = -1, link_gbps = 450.0;
  gboolean json = FALSE, window_full = FALSE, estimate = FALSE;
  GOptionEntry entries[] = {
    {"model", 'm', 0, G_OPTION_ARG_FILENAME, &model,
        "DiT checkpoint (directory or file); default: random weights", "DIR"},
    /* the shape of the random model (without --model) */
    LINGBOT_TOOL_DIT_SHAPE_ENTRIES (&shape),
    {"devices", 'd', 0, G_OPTION_ARG_STRING, &devices,
        "Ranks: cpu:N or GPU ordinals such as 0 or 0,1 (default cpu:1)", "D"},
    {"latent", 0, 0, G_OPTION_ARG_STRING, &latent,
        "Latent grid HxW (default 16x24; 60x104 is 480x832 video, 58x104 "
          "464x832)", "HxW"},
    {"chunks", 'n', 0, G_OPTION_ARG_INT, &chunks, "Chunks (default 4)", "K"},
    {"text-len", 0, 0, G_OPTION_ARG_INT, &text_len,
        "Text tokens (default 64; 512 in production)", "L"},
    {"seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Weight/noise seed", "S"},
    {"precision", 0, 0, G_OPTION_ARG_STRING, &precision,
        "Math of the ranks' streams: fp32 (default, the parity mode), "
          "bf16 (spec 1.11; the CPU backend ignores it) or fp8 (E4M3 GEMMs; "
          "the CPU runs their oracle)", "P"},
    {"window-full", 0, 0, G_OPTION_ARG_NONE, &window_full,
        "Start with a full KV window (cursors advanced, cache contents "
          "left as they are: for timing only)", NULL},
    {"peak-tflops", 0, 0, G_OPTION_ARG_DOUBLE, &peak,
        "Dense peak per device for MFU (default on GPUs: 989.4 with bf16, "
          "67 with fp32; on CPU no MFU unless given)", "X"},
    {"rank-of", 0, 0, G_OPTION_ARG_INT, &rank_of,
        "Time what rank 0 of an N-rank Ulysses world computes (its token "
          "band, heads / N heads, its KV cache), on the one rank of "
          "--devices; the exchanges become copies of the real sizes. Prints "
          "the N-GPU projection: that time + the exposed exchange at "
          "--link-gbps", "N"},
    {"link-gbps", 0, 0, G_OPTION_ARG_DOUBLE, &link_gbps,
          "Link bandwidth per GPU and direction for the --rank-of projection, "
          "GB/s (default 450: H100 NVLink 4, 18 links x 25 GB/s; nominal)",
        "X"},
    {"estimate", 0, 0, G_OPTION_ARG_NONE, &estimate,
        "Print the FLOP and device-memory models only, build nothing", NULL},
    {"json", 0, 0, G_OPTION_ARG_NONE, &json, "JSON lines on stdout", NULL},
    {NULL}
  };
  const char *prog = "lingbot-bench dit";
  if (!lingbot_tool_parse (prog, "- DiT chunk rate", NULL, entries, &argc,
          &argv))
    return LINGBOT_TOOL_USAGE;
  g_autoptr (GError) err = NULL;

  int64_t lh = 16, lw = 24;
  if (latent && (sscanf (latent, "%" G_GINT64_FORMAT "x%" G_GINT64_FORMAT,
              &lh, &lw) != 2 || lh < 2 || lw < 2))
    return lingbot_tool_usage_error (prog, "--latent wants HxW");
  LbMathMode math = LB_MATH_FP32;
  if (precision && g_str_equal (precision, "bf16")) {
    math = LB_MATH_BF16;
  } else if (precision && g_str_equal (precision, "fp8")) {
    math = LB_MATH_FP8;
  } else if (precision && !g_str_equal (precision, "fp32")) {
    return lingbot_tool_usage_error (prog, "--precision wants fp32, bf16 or "
        "fp8, not %s", precision);
  }
  if (chunks < 1 || text_len < 1)
    return lingbot_tool_usage_error (prog, "--chunks and --text-len must be "
        "positive");
  if (rank_of != -1 && rank_of < 2)
    return lingbot_tool_usage_error (prog, "--rank-of wants 2 or more ranks, "
        "not %d", rank_of);
  if (!(link_gbps > 0))
    return lingbot_tool_usage_error (prog, "--link-gbps must be positive");

  LingbotDitConfig mc;
  if (!model && !lingbot_tool_dit_shape_apply (prog, &shape, &mc, NULL))
    return LINGBOT_TOOL_USAGE;
  if (estimate) {
    /* a model's configuration without its weights (a dummy model's
     * config.json, or a checkpoint's shapes) */
    if ((model && !lingbot_dit_load_config (model, &mc, &err)) ||
        !lingbot_dit_config_validate (&mc, &err))
      return lingbot_tool_usage_error (prog, "%s", err->message);
    if (rank_of > 0 && !rank_of_check (&mc, rank_of))
      return 2;
    return run_estimate (&mc, lh, lw, text_len, rank_of > 0 ? rank_of :
        count_ranks (devices), json);
  }
  /* before the weights are made (14B: 74 GB) */
  if (rank_of > 0 && !model && !rank_of_check (&mc, rank_of))
    return 2;
  if (rank_of > 0 && count_ranks (devices) != 1)
    return lingbot_tool_usage_error (prog, "--rank-of runs on one rank "
        "(--devices cpu:1 or one GPU ordinal), not %s", devices);

  /* the model: loaded, or random weights (timed: 14B is 74 GB of f32) */
  g_autoptr (LingbotDit) dit = NULL;
  gint64 t0 = g_get_monotonic_time ();
  if (model)
    dit = lingbot_dit_load (model, LINGBOT_DIT_LOAD_DEFAULT, &err);
  else
    dit = lingbot_dit_new_random (&mc, (guint64) seed, &err);
  if (!dit) {
    fprintf (stderr, "lingbot-bench dit: %s\n", err->message);
    return 1;
  }
  const double weights_s = lingbot_bench_seconds_since (t0);
  const LingbotDitConfig *cfg = lingbot_dit_get_config (dit);
  if (rank_of > 0 && model && !rank_of_check (cfg, rank_of))
    return 2;
  const guint64 params = lingbot_dit_config_n_params (cfg);

  LbBackend *be = NULL;
  int n_ranks = 1;
  g_autofree int *ordinals = NULL;
  if (!lingbot_backend_parse_devices (devices ? devices : "cpu:1", &be,
          &n_ranks, &ordinals, &err))
    return lingbot_tool_usage_error (prog, "%s", err->message);
  const gboolean on_cpu = be->device_type == LB_DEVICE_CPU;
  const int n_devices = count_devices (be, ordinals, n_ranks);
  if (peak <= 0 && !on_cpu)
    peak = math != LB_MATH_FP32 ? PEAK_BF16_TFLOPS : PEAK_FP32_TFLOPS;
  if (math == LB_MATH_BF16 && on_cpu)
    fprintf (stderr, "lingbot-bench dit: --precision bf16 is ignored on CPU "
        "ranks (the CPU backend computes in float32)\n");

  /* rank 0's collective bytes are counted (--rank-of compares them with
   * a real run's); a solo group stands in for rank 0 of --rank-of ranks */
  LbWorkerGroupOptions go = { 0, NULL, "bench-dit" };
  go.collectives = lingbot_bench_counting_collectives (rank_of > 0 ?
      lb_solo_collectives () : lb_collectives_lookup (be->device_type));
  LbWorkerGroup *group = rank_of > 0 ?
      lb_worker_group_new_solo (be, ordinals[0], rank_of, &go, &err) :
      lb_worker_group_new (be, n_ranks, ordinals, &go, &err);
  if (!group) {
    fprintf (stderr, "lingbot-bench dit: %s\n", err->message);
    return 1;
  }

  /* zero-padded context like production: a few real rows, the rest 0 */
  g_autoptr (LbTensor) text = lb_tensor_new_zeros (LB_DTYPE_F32, 3,
      (int64_t[]) { 1, text_len, cfg->text_dim });
  for (int64_t i = 0; i < MIN (10, text_len) * cfg->text_dim; i++)
    ((float *) text->data)[i] = 0.1f * (float) ((i * 37) % 19 - 9);

  LingbotDitSessionOptions so = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  so.latent_h = lh;
  so.latent_w = lw;
  so.math = math;
  /* cuDNN SDPA plans built by the session's start (every attention call
   * readied, lingbot_dit_rank_reserve()) and, which should stay 0, by its
   * chunks: the CUDA module's lingbot_backend_cuda_attention_stats() */
  AttnStatsFunc attn_stats = (AttnStatsFunc) lb_backend_get_proc (be,
      "lingbot_backend_cuda_attention_stats");
  guint64 plans0 = attn_plans (attn_stats);
  t0 = g_get_monotonic_time ();
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &so, text,
      &err);
  if (!ses) {
    fprintf (stderr, "lingbot-bench dit: %s\n", err->message);
    lb_worker_group_unref (group);
    return 1;
  }
  if (window_full && !lingbot_dit_session_bench_fill_window (ses, &err)) {
    fprintf (stderr, "lingbot-bench dit: %s\n", err->message);
    lingbot_dit_session_free (ses);
    lb_worker_group_unref (group);
    return 1;
  }
  const double setup_s = lingbot_bench_seconds_since (t0);
  const guint64 plans1 = attn_plans (attn_stats);

  const int C = cfg->chunk_frames;
  const int64_t tf = lingbot_dit_session_get_frame_tokens (ses);
  const int64_t cap = lingbot_dit_session_get_cache_capacity (ses);
  const int64_t N = (int64_t) C * tf;
  int n_steps;
  lingbot_dit_session_get_schedule (ses, &n_steps, NULL, NULL, NULL);
  const int n_passes = n_steps + 1;
  int64_t ge0, le0;
  lingbot_dit_session_get_cursors (ses, &ge0, &le0);
  LingbotDitRankShare share;
  lingbot_dit_session_bench_get_share (ses, 0, &share);
  if (json) {
    g_autoptr (JsonBuilder) b = json_builder_new ();
    json_builder_begin_object (b);
    lingbot_json_string (b, "bench", "dit");
    lingbot_json_string (b, "event", "setup");
    lingbot_json_string (b, "backend", be->name);
    lingbot_json_int (b, "ranks", n_ranks);
    lingbot_json_int (b, "devices", n_devices);
    lingbot_json_string (b, "variant", lingbot_dit_config_variant (cfg));
    lingbot_json_int (b, "layers", cfg->num_layers);
    lingbot_json_int (b, "params", (gint64) params);
    lingbot_json_string (b, "precision", math == LB_MATH_FP8 ? "fp8" :
        math == LB_MATH_BF16 ? "bf16" : "fp32");
    json_builder_set_member_name (b, "precision_applied");
    json_builder_add_boolean_value (b, !(math == LB_MATH_BF16 && on_cpu));
    lingbot_json_double (b, "weights_s", weights_s);
    lingbot_json_double (b, "setup_s", setup_s);
    json_builder_set_member_name (b, "window_full");
    json_builder_add_boolean_value (b, window_full);
    lingbot_json_int (b, "window_keys", cap);
    add_int_pair (b, "cursors", ge0, le0);
    lingbot_json_int (b, "next_chunk",
        lingbot_dit_session_get_chunk_index (ses));
    lingbot_json_string (b, "collectives", go.collectives->name);
    lingbot_json_int (b, "world_ranks", share.world_ranks);
    json_builder_set_member_name (b, "rank0");
    json_builder_begin_object (b);
    add_int_pair (b, "band_rows", share.band_row0, share.band_rows);
    lingbot_json_int (b, "tokens", share.tokens);
    lingbot_json_int (b, "heads", share.heads);
    lingbot_json_int (b, "kv_cache_bytes", (gint64) share.kv_cache_bytes);
    json_builder_end_object (b);
    json_builder_end_object (b);
    lingbot_json_print (b);
  } else {
    printf ("%s, %d layers, %.3f G parameters (%s %.1f s); session on %d "
        "%s rank(s) in %.1f s; precision %s%s\n",
        lingbot_dit_config_variant (cfg), cfg->num_layers, params / 1e9,
        model ? "loaded in" : "random weights in", weights_s, n_ranks,
        be->name, setup_s,
        math == LB_MATH_FP8 ? "fp8" : math == LB_MATH_BF16 ? "bf16" : "fp32",
        math == LB_MATH_BF16 && on_cpu ? " (ignored on CPU ranks)" : "");
    if (window_full)
      printf ("window full before the first timed chunk: cursors global %"
          G_GINT64_FORMAT ", local %" G_GINT64_FORMAT " = %" G_GINT64_FORMAT
          " keys per layer (%" G_GINT64_FORMAT " frames x %" G_GINT64_FORMAT
          " tokens); next chunk %" G_GINT64_FORMAT "\n", ge0, le0, cap,
          cap / tf, tf, lingbot_dit_session_get_chunk_index (ses));
  }

  const int64_t ls[5] = { 1, cfg->out_dim, C, lh, lw };
  const int64_t ys[5] = { 1, cfg->in_dim - cfg->out_dim, C, lh, lw };
  const int64_t cs[5] = { 1, cfg->control_in_features / 4, C, lh, lw };
  g_autoptr (LbTensor) y = lb_tensor_new_zeros (LB_DTYPE_F32, 5, ys);
  g_autoptr (LbTensor) ctl = lb_tensor_new (LB_DTYPE_F32, 5, cs);
  g_autoptr (LbTensor) out = lb_tensor_new (LB_DTYPE_F32, 5, ls);
  for (int64_t i = 0; i < lb_tensor_numel (ctl); i++)
    ((float *) ctl->data)[i] = (float) ((i % 13) - 6) * 0.05f;
  LbTensor *noise[LINGBOT_DIT_MAX_STEPS] = { 0 };
  for (int i = 0; i < n_steps; i++)
    noise[i] = lb_tensor_new (LB_DTYPE_F32, 5, ls);
  g_autoptr (LingbotNoise) gen = lingbot_noise_new_philox ((guint64) seed);

  double *secs = g_new0 (double, chunks);
  double *chunk_fl = g_new0 (double, chunks);
  double *chunk_ref = g_new0 (double, chunks);
  double pass_mfu_sum[LINGBOT_DIT_MAX_STEPS + 1] = { 0 };
  double pass_s_sum[LINGBOT_DIT_MAX_STEPS + 1] = { 0 };
  PassTimes passes = { 0 };
  lingbot_dit_session_set_step_callback (ses, on_pass, &passes);
  int rc = 0, done = 0;
  /* rank 0's collectives: over the run, and in chunk 0, which is never a
   * graph replay (a replayed chunk runs its recorded exchanges without
   * calling the collectives from the host, so it counts nothing) */
  LingbotBenchCommCounts comm0, comm, comm_first = { 0 };
  lingbot_bench_comm_counts_rank (0, &comm0);
  for (int c = 0; c < chunks; c++) {
    const int64_t index = lingbot_dit_session_get_chunk_index (ses);
    for (int i = 0; i < n_steps && rc == 0; i++)
      if (!lingbot_noise_fill (gen, (guint) index, i ? LINGBOT_NOISE_RENOISE
              : LINGBOT_NOISE_INITIAL, i ? i - 1 : 0, noise[i], lh, 0, &err))
        rc = 1;
    gint64 a = g_get_monotonic_time ();
    passes.mark = a;
    passes.n = 0;
    if (rc || !lingbot_dit_session_run_chunk (ses, y, ctl,
            (const LbTensor * const *) noise, out, &err)) {
      fprintf (stderr, "lingbot-bench dit: chunk %d: %s\n", c, err->message);
      rc = 1;
      break;
    }
    secs[c] = lingbot_bench_seconds_since (a);
    done = c + 1;
    if (c == 0) {
      lingbot_bench_comm_counts_rank (0, &comm_first);
      lingbot_bench_comm_counts_diff (&comm_first, &comm0, &comm_first);
    }
    /* the keys every block attended over in this chunk's passes: the
     * window after the chunk's own keys were written, at most the
     * session's attention span (spec 1.8 max_attention_size) */
    int64_t ge, le;
    lingbot_dit_session_get_cursors (ses, &ge, &le);
    const int64_t keys = MIN (le,
        lingbot_dit_session_get_max_attention_size (ses));
    LingbotBenchDitFlops f;
    lingbot_bench_dit_flops (cfg, N, text_len, keys, n_passes, &f);
    chunk_fl[c] = f.chunk;
    chunk_ref[c] = f.chunk_reference;
    const int frames = index == 0 ? 1 + 4 * (C - 1) : 4 * C;
    const double m = mfu (f.chunk, secs[c], peak, n_devices);
    g_autoptr (JsonBuilder) cb = json ? json_builder_new () : NULL;
    if (json) {
      json_builder_begin_object (cb);
      lingbot_json_string (cb, "bench", "dit");
      lingbot_json_string (cb, "event", "chunk");
      lingbot_json_int (cb, "chunk", c);
      lingbot_json_int (cb, "index", index);
      lingbot_json_int (cb, "frames", frames);
      lingbot_json_int (cb, "keys", keys);
      lingbot_json_double (cb, "compute_s", secs[c]);
      lingbot_json_double (cb, "dit_s", secs[c]);
      lingbot_json_double (cb, "tflop", f.chunk / 1e12);
      lingbot_json_double (cb, "tflops", f.chunk / secs[c] / 1e12);
      add_num_or_null (cb, "mfu", m);
      json_builder_set_member_name (cb, "passes");
      json_builder_begin_array (cb);
    } else {
      printf ("chunk %d (index %" G_GINT64_FORMAT "): %d frames, %"
          G_GINT64_FORMAT " keys per layer, %.3f s DiT, %.4g TFLOP/s", c,
          index, frames, keys, secs[c], f.chunk / secs[c] / 1e12);
      if (m >= 0)
        printf (" (MFU %.1f %%)", 100 * m);
      printf ("; passes");
    }
    for (int i = 0; i < passes.n; i++) {
      /* the first pass also ran the chunk's camera path and uploads */
      const double pf = f.pass + (i == 0 ? f.camera : 0.0);
      const double pm = mfu (pf, passes.secs[i], peak, n_devices);
      if (c > 0 && i <= LINGBOT_DIT_MAX_STEPS) {
        pass_s_sum[i] += passes.secs[i];
        pass_mfu_sum[i] += pm;
      }
      if (json) {
        json_builder_begin_object (cb);
        lingbot_json_double (cb, "s", passes.secs[i]);
        lingbot_json_double (cb, "tflops", passes.secs[i] > 0 ?
            pf / passes.secs[i] / 1e12 : 0.0);
        add_num_or_null (cb, "mfu", pm);
        json_builder_end_object (cb);
      } else {
        printf (" %.3f", passes.secs[i]);
        if (pm >= 0)
          printf (" (%.1f %%)", 100 * pm);
      }
    }
    if (json) {
      json_builder_end_array (cb);
      json_builder_end_object (cb);
      lingbot_json_print (cb);
    } else {
      printf (" s\n");
      fflush (stdout);
    }
  }

  lingbot_bench_comm_counts_rank (0, &comm);
  lingbot_bench_comm_counts_diff (&comm, &comm0, &comm);
  if (done > 0) {
    const int ns = MAX (done - 1, 0);
    double *st = g_new0 (double, MAX (ns, 1));
    double sum = 0.0, fl = 0.0, flr = 0.0;
    for (int i = 0; i < ns; i++) {
      st[i] = secs[i + 1];
      sum += st[i];
      fl += chunk_fl[i + 1];
      flr += chunk_ref[i + 1];
    }
    lingbot_bench_sort (st, ns);
    const double mean = ns ? sum / ns : 0.0;
    const double fps = mean > 0 ? 4.0 * C / mean : 0.0;
    const double tfl = sum > 0 ? fl / sum / 1e12 : 0.0;
    const double tfl_ref = sum > 0 ? flr / sum / 1e12 : 0.0;
    const double m = ns ? mfu (fl, sum, peak, n_devices) : -1;
    const double m_ref = ns ? mfu (flr, sum, peak, n_devices) : -1;
    if (json) {
      g_autoptr (JsonBuilder) b = json_builder_new ();
      json_builder_begin_object (b);
      lingbot_json_string (b, "bench", "dit");
      lingbot_json_string (b, "event", "summary");
      lingbot_json_string (b, "backend", be->name);
      lingbot_json_int (b, "ranks", n_ranks);
      lingbot_json_int (b, "devices", n_devices);
      lingbot_json_string (b, "variant", lingbot_dit_config_variant (cfg));
      lingbot_json_int (b, "dim", cfg->dim);
      lingbot_json_int (b, "layers", cfg->num_layers);
      lingbot_json_int (b, "heads", cfg->num_heads);
      lingbot_json_int (b, "ffn", cfg->ffn_dim);
      lingbot_json_int (b, "params", (gint64) params);
      add_int_pair (b, "latent", lh, lw);
      lingbot_json_int (b, "chunk_frames", C);
      lingbot_json_int (b, "tokens_per_chunk", N);
      lingbot_json_int (b, "text_len", text_len);
      lingbot_json_string (b, "precision", math == LB_MATH_FP8 ? "fp8" :
          math == LB_MATH_BF16 ? "bf16" : "fp32");
      json_builder_set_member_name (b, "precision_applied");
      json_builder_add_boolean_value (b, !(math == LB_MATH_BF16 && on_cpu));
      json_builder_set_member_name (b, "window_full");
      json_builder_add_boolean_value (b, window_full);
      lingbot_json_int (b, "window_keys", cap);
      lingbot_json_double (b, "weights_s", weights_s);
      lingbot_json_double (b, "setup_s", setup_s);
      lingbot_json_double (b, "first_chunk_s", secs[0]);
      if (attn_stats != NULL) {
        lingbot_json_int (b, "sdpa_plans_at_start", (gint64) (plans1 - plans0));
        lingbot_json_int (b, "sdpa_plans_in_chunks",
            (gint64) (attn_plans (attn_stats) - plans1));
      }
      json_builder_set_member_name (b, "chunks");
      json_builder_begin_array (b);
      for (int i = 0; i < done; i++) {
        json_builder_begin_object (b);
        lingbot_json_int (b, "chunk", i);
        lingbot_json_double (b, "compute_s", secs[i]);
        lingbot_json_double (b, "dit_s", secs[i]);
        json_builder_end_object (b);
      }
      json_builder_end_array (b);
      json_builder_set_member_name (b, "steady");
      json_builder_begin_object (b);
      lingbot_json_int (b, "chunks", ns);
      lingbot_json_double (b, "fps", fps);
      lingbot_json_double (b, "mean_s", mean);
      lingbot_json_double (b, "p50_s", lingbot_bench_percentile (st, ns, 0.5));
      lingbot_json_double (b, "p90_s", lingbot_bench_percentile (st, ns, 0.9));
      lingbot_json_double (b, "p99_s", lingbot_bench_percentile (st, ns, 0.99));
      lingbot_json_double (b, "max_s", ns ? st[ns - 1] : 0.0);
      lingbot_json_double (b, "gflops", tfl * 1e3);
      lingbot_json_double (b, "tflops", tfl);
      lingbot_json_double (b, "tflops_reference", tfl_ref);
      add_num_or_null (b, "mfu", m);
      add_num_or_null (b, "mfu_reference", m_ref);
      json_builder_set_member_name (b, "pass_s");
      json_builder_begin_array (b);
      for (int i = 0; i < n_passes; i++)
        json_builder_add_double_value (b, ns ? pass_s_sum[i] / ns : 0.0);
      json_builder_end_array (b);
      json_builder_set_member_name (b, "pass_mfu");
      json_builder_begin_array (b);
      for (int i = 0; i < n_passes; i++) {
        if (ns && peak > 0)
          json_builder_add_double_value (b, pass_mfu_sum[i] / ns);
        else
          json_builder_add_null_value (b);
      }
      json_builder_end_array (b);
      json_builder_end_object (b);
      add_num_or_null (b, "peak_tflops_per_device", peak > 0 ? peak : -1);
      double total = 0.0;
      for (int i = 0; i < done; i++)
        total += chunk_fl[i];
      lingbot_json_double (b, "total_gflop", total / 1e9);
      add_comm_json (b, &comm_first, &comm, go.collectives->name);
      add_spec_check_json (b);
      json_builder_end_object (b);
      lingbot_json_print (b);
    } else {
      printf ("steady (%d chunks): %.2f fps, mean %.3f s, p50 %.3f, p90 %.3f,"
          " p99 %.3f, max %.3f; %.4g TFLOP/s as executed, %.4g TFLOP/s at "
          "the reference's count", ns, fps, mean, lingbot_bench_percentile (st,
              ns, 0.5), lingbot_bench_percentile (st, ns, 0.9),
          lingbot_bench_percentile (st, ns, 0.99), ns ? st[ns - 1] : 0.0, tfl,
          tfl_ref);
      if (m >= 0)
        printf ("; MFU %.1f %% (reference count %.1f %%) of %.4g TFLOP/s x "
            "%d device(s)", 100 * m, 100 * m_ref, peak, n_devices);
      printf ("\n");
      /* the 14b preset's text report ends with the spec figures */
      if (shape.preset && g_str_equal (shape.preset, "14b"))
        print_spec_check_text ();
    }
    if (rank_of > 0 && rc == 0)
      rc = report_rank_of (cfg, lh, lw, n_passes, &share,
          math == LB_MATH_BF16, on_cpu, ns ? mean : secs[0], ns > 0,
          &comm_first, &comm, lb_solo_collectives_get_moved (group),
          link_gbps, json);
    g_free (st);
  }
  for (int i = 0; i < n_steps; i++)
    lb_tensor_free (noise[i]);
  g_free (secs);
  g_free (chunk_fl);
  g_free (chunk_ref);
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
  return rc;
}

/* lingbot-gst: what `lingbot-bench dit` / `vae` measure against (suite
 * bench): the DiT FLOP model against spec/performance_anchors.md 2.2 and a
 * hand computation, the device-memory model against
 * docs/design/dit-devices.md, the VAE decode FLOP model against anchors
 * 2.3, the parallel random weights (same bytes for any thread count, the
 * same values as lingbot-mkmodel writes) and --window-full's cursors.
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <math.h>
#include <string.h>

#include "kernels/error.h"
#include "lingbot/dit-session.h"
#include "tools/bench-dit.h"
#include "tools/bench-vae.h"

#define TFLOP 1e12
#define GB 1e9

/* anchors 2.2 prints TFLOP to 0.1: agreement to its last digit */
static void
assert_tflop (double flops, double anchor)
{
  g_assert_cmpfloat (fabs (flops / TFLOP - anchor), <=, 0.05 + 1e-9);
}

static void
test_dit_flops_14b (void)
{
  LingbotDitConfig c;
  lingbot_dit_config_init_preset (&c, LINGBOT_DIT_PRESET_14B);
  LingbotBenchDitFlops f;

  /* 832x480: latent 60x104, T_f = 30 x 52 = 1560, N = 6240 queries, a
   * full 18-frame window = 28080 keys, 512 text tokens, 5 passes */
  lingbot_bench_dit_flops (&c, 6240, 512, 28080, 5, &f);
  g_assert_cmpfloat (fabs (f.chunk / (LINGBOT_BENCH_SPEC_14B_480P_TFLOP *
              TFLOP) - 1), <, 0.01);
  assert_tflop (f.chunk, 1529.9);
  assert_tflop (f.chunk_reference, 1742.3);
  /* the anchors' components (table of 2.2, 832x480 columns) */
  assert_tflop (5 * f.linear, 746.0);
  assert_tflop (f.camera, 53.1);
  assert_tflop (5 * f.self_attn, 717.7);
  assert_tflop (5 * f.cross_attn, 13.1);

  /* the same by hand, float64: per token per block 6 D^2 (self q k v o,
   * cross q o) + 2 D F MACs; patch 144 -> D and head D -> 64 per token;
   * attention 4 N K D per block; camera 4 D^2 per block + control patch
   * 1536 -> D + c2ws 2 D^2 per token */
  const double D = 5120, F = 13824, N = 6240, L = 40;
  const double lin = 2 * N * (L * (6 * D * D + 2 * D * F) + 144 * D + D * 64);
  const double sa = L * 4 * N * 28080 * D, ca = L * 4 * N * 512 * D;
  const double cam = 2 * N * (L * 4 * D * D + 1536 * D + 2 * D * D);
  g_assert_cmpfloat (fabs (f.linear - lin), <=, 1e-9 * lin);
  g_assert_cmpfloat (fabs (f.self_attn - sa), <=, 1e-9 * sa);
  g_assert_cmpfloat (fabs (f.cross_attn - ca), <=, 1e-9 * ca);
  g_assert_cmpfloat (fabs (f.camera - cam), <=, 1e-9 * cam);
  g_assert_cmpfloat (fabs (f.chunk - (5 * (lin + sa + ca) + cam)), <=,
      1e-9 * f.chunk);
  g_assert_cmpfloat (fabs (f.chunk_reference - 5 * (lin + sa + ca + cam)),
      <=, 1e-9 * f.chunk);

  /* 832x464 as TeleFuser runs it: 58x104, 6032 queries, 27144 keys */
  lingbot_bench_dit_flops (&c, 6032, 512, 27144, 5, &f);
  assert_tflop (f.chunk, 1455.7);
  assert_tflop (f.chunk_reference, 1661.1);
  assert_tflop (5 * f.self_attn, 670.6);
}

static void
test_dit_flops_window (void)
{
  /* attention grows linearly with the keys; nothing else does */
  LingbotDitConfig c;
  lingbot_dit_config_init_preset (&c, LINGBOT_DIT_PRESET_1_3B);
  LingbotBenchDitFlops a, b;
  lingbot_bench_dit_flops (&c, 6240, 512, 6240, 5, &a);
  lingbot_bench_dit_flops (&c, 6240, 512, 28080, 5, &b);
  g_assert_cmpfloat (b.linear, ==, a.linear);
  g_assert_cmpfloat (b.camera, ==, a.camera);
  g_assert_cmpfloat (fabs (b.self_attn / a.self_attn - 4.5), <, 1e-12);
  /* anchors 2.2's cross-check: the 1.3B's self-attention, 30 blocks at
   * 832x464, is 150.9 TFLOP per chunk */
  lingbot_bench_dit_flops (&c, 6032, 512, 27144, 5, &a);
  assert_tflop (5 * a.self_attn, 150.9);
}

static void
assert_gb (guint64 bytes, double gb)
{
  g_assert_cmpfloat (fabs (bytes / GB - gb), <=, 0.05 + 1e-9);
}

static void
test_dit_memory (void)
{
  /* docs/design/dit-devices.md "Memory per rank", 480x832 */
  LingbotDitConfig c;
  LingbotBenchDitMemory m;
  lingbot_dit_config_init_preset (&c, LINGBOT_DIT_PRESET_14B);
  lingbot_bench_dit_memory (&c, 60, 104, 512, 1, 4, 4, &m);
  assert_gb (m.weights, 74.2);
  assert_gb (m.kv_cache, 46.0);
  assert_gb (m.camera, 10.2);
  g_assert_cmpfloat (fabs (m.cross_kv / GB - 0.84), <, 0.005);
  assert_gb (m.total, 132.7);
  g_assert_cmpuint (m.ulysses, ==, 0);
  /* KV cache = 2 L cap D 4 exactly */
  g_assert_cmpuint (m.kv_cache, ==, 2ull * 40 * 28080 * 5120 * 4);
  const double table[][2] = { {2, 104.5}, {4, 90.0}, {8, 82.6} };
  for (guint i = 0; i < G_N_ELEMENTS (table); i++) {
    lingbot_bench_dit_memory (&c, 60, 104, 512, (int) table[i][0], 4, 4, &m);
    assert_gb (m.total, table[i][1]);
  }
  /* bf16 mode: half the weight and KV-cache bytes (a device rank's cache
   * is bf16 there), the rest unchanged */
  LingbotBenchDitMemory h;
  lingbot_bench_dit_memory (&c, 60, 104, 512, 1, 4, 2, &h);
  lingbot_bench_dit_memory (&c, 60, 104, 512, 1, 4, 4, &m);
  g_assert_cmpuint (2 * h.weights, ==, m.weights);
  g_assert_cmpuint (2 * h.kv_cache, ==, m.kv_cache);
  g_assert_cmpuint (m.total - h.total, ==, h.weights + h.kv_cache);
  assert_gb (h.total, 72.6);
  /* fp8 mode: one byte per weight, bf16's cache (lingbot_dit_kv_dtype()):
   * 54.1 GB, what run.sh's gate asks of an 80 GB card for the 14B steps */
  LingbotBenchDitMemory e;
  lingbot_bench_dit_memory (&c, 60, 104, 512, 1, 4, 1, &e);
  g_assert_cmpuint (2 * e.weights, ==, h.weights);
  g_assert_cmpuint (e.kv_cache, ==, h.kv_cache);
  g_assert_cmpuint (h.total - e.total, ==, e.weights);
  assert_gb (e.total, 54.1);
  lingbot_dit_config_init_preset (&c, LINGBOT_DIT_PRESET_1_3B);
  lingbot_bench_dit_memory (&c, 60, 104, 512, 1, 4, 4, &m);
  assert_gb (m.total, 20.3);
  lingbot_bench_dit_memory (&c, 60, 104, 512, 4, 4, 4, &m);
  assert_gb (m.total, 10.6);
}

/* Ulysses volume (docs/performance.md "Physical limits"): 14B at 832x480
 * on 4 ranks, 800 all-to-alls of 1560 x 5120 elements, 3/4 to peers:
 * 19.17 GB in f32, 9.58 GB in bf16 (hd 128: q too), 3.59 GB exposed; at
 * 832x464 in bf16 the anchors' 9.27 GB (spec 2.6); nothing on 1 rank. */
static void
test_dit_exchange (void)
{
  LingbotDitConfig c;
  LingbotBenchDitExchange x;
  lingbot_dit_config_init_preset (&c, LINGBOT_DIT_PRESET_14B);
  lingbot_bench_dit_exchange (&c, 60, 104, 4, 5, &x);
  g_assert_cmpuint (x.all_to_alls, ==, 800);
  g_assert_cmpuint (x.bytes_f32, ==, 800ull * 1560 * 5120 * 3 / 4 * 4);
  g_assert_cmpuint (x.bytes_bf16 * 2, ==, x.bytes_f32);
  g_assert_cmpuint (x.exposed_bf16, ==, x.bytes_bf16 * 3 / 8);
  assert_gb (x.bytes_f32, 19.2);
  assert_gb (x.bytes_bf16, 9.6);
  lingbot_bench_dit_exchange (&c, 58, 104, 4, 5, &x);
  g_assert_cmpfloat (fabs (x.bytes_bf16 / GB - 9.27), <, 0.005);
  lingbot_bench_dit_exchange (&c, 60, 104, 1, 5, &x);
  g_assert_cmpuint (x.bytes_f32 + x.bytes_bf16 + x.all_to_alls, ==, 0);
}

/* Rank 0 of 4 at 14B 832x480 in bf16 (what `lingbot-bench dit --rank-of 4`
 * projects): 30 token rows in bands 8, 8, 7, 7 (1664 tokens of 6240), 10
 * heads of 128.  Per layer-pass it receives 4576 peer tokens x 1280 bf16
 * of q, k and v and sends its 1664 tokens x 1280 to 3 peers; the output
 * the reverse; per pass 4576 x 64 f32 of head output in, 3 x 1664 x 64
 * out.  200 layer-passes: the mean-band 9.58 GB in, links of 10.2 GB in
 * the busier direction, 3.84 GB exposed (q, half the output, the gather). */
static void
test_dit_rank_exchange (void)
{
  LingbotDitConfig c;
  LingbotBenchDitRankExchange x;
  lingbot_dit_config_init_preset (&c, LINGBOT_DIT_PRESET_14B);
  g_unsetenv ("LINGBOT_COMM_OUT_GROUPS");
  lingbot_bench_dit_rank_exchange (&c, 60, 104, 4, 0, 5, TRUE, TRUE, &x);
  const guint64 in = 4576ull * 1280 * 2, out = 3ull * 1664 * 1280 * 2;
  for (int i = 0; i < 3; i++) {
    g_assert_cmpuint (x.recv[i], ==, 200 * in);
    g_assert_cmpuint (x.sent[i], ==, 200 * out);
    g_assert_cmpuint (x.link[i], ==, 200 * out);
  }
  g_assert_cmpuint (x.recv[3], ==, 200 * out);
  g_assert_cmpuint (x.sent[3], ==, 200 * in);
  g_assert_cmpuint (x.recv[4], ==, 5ull * 4576 * 64 * 4);
  g_assert_cmpuint (x.link[4], ==, 5ull * 3 * 1664 * 64 * 4);
  /* the same volume in as the mean-band model */
  LingbotBenchDitExchange m;
  lingbot_bench_dit_exchange (&c, 60, 104, 4, 5, &m);
  g_assert_cmpuint (x.all_to_all_recv, ==, m.bytes_bf16);
  g_assert_cmpuint (x.link_total, ==, 200 * 4 * out + x.link[4]);
  g_assert_cmpint (x.out_groups, ==, 2);
  g_assert_cmpuint (x.exposed_link, ==, 200 * out + 200 * out / 2 + x.link[4]);
  assert_gb (x.exposed_link, 3.84);
  /* f32 exchanges double the all-to-alls; without the overlap all of it
   * is exposed; 3 groups lower to the divisor 2 of 10 heads, 5 stay */
  lingbot_bench_dit_rank_exchange (&c, 60, 104, 4, 0, 5, FALSE, FALSE, &x);
  g_assert_cmpuint (x.all_to_all_recv, ==, 2 * m.bytes_bf16);
  g_assert_cmpuint (x.exposed_link, ==, x.link_total);
  g_assert_cmpint (x.out_groups, ==, 1);
  g_setenv ("LINGBOT_COMM_OUT_GROUPS", "3", TRUE);
  g_assert_cmpint (lingbot_bench_dit_out_groups (10), ==, 2);
  g_setenv ("LINGBOT_COMM_OUT_GROUPS", "5", TRUE);
  g_assert_cmpint (lingbot_bench_dit_out_groups (10), ==, 5);
  g_unsetenv ("LINGBOT_COMM_OUT_GROUPS");
  g_assert_cmpint (lingbot_bench_dit_out_groups (1), ==, 1);
}

static void
test_vae_flops (void)
{
  /* anchors 2.3 (performance_anchors_calc.py): Wan2.1 decode of 4
   * latents = 16 frames */
  assert_tflop (lingbot_bench_vae_decode_flops (96, 58, 104, 4), 52.4);
  assert_tflop (lingbot_bench_vae_decode_flops (96, 60, 104, 4), 54.2);
  /* convolutions scale with dim^2; the 16-channel conv2 and conv1 and the
   * attention's P0^2 term do not, so a width-48 decoder is a bit over a
   * quarter */
  double q = lingbot_bench_vae_decode_flops (48, 60, 104, 4) /
      lingbot_bench_vae_decode_flops (96, 60, 104, 4);
  g_assert_cmpfloat (q, >, 0.25);
  g_assert_cmpfloat (q, <, 0.26);
}

/* Every weight of @a and @b has the same bytes. */
static void
assert_same_tables (GHashTable * a, GHashTable * b)
{
  g_assert_cmpuint (g_hash_table_size (a), ==, g_hash_table_size (b));
  GHashTableIter it;
  gpointer k, v;
  g_hash_table_iter_init (&it, a);
  while (g_hash_table_iter_next (&it, &k, &v)) {
    const LbTensor *x = v, *y = g_hash_table_lookup (b, k);
    g_assert_nonnull (y);
    g_assert_cmpint (lb_tensor_numel (x), ==, lb_tensor_numel (y));
    g_assert_cmpmem (x->data, lb_tensor_nbytes (x), y->data,
        lb_tensor_nbytes (y));
  }
}

static void
test_random_weights (void)
{
  g_autoptr (GError) err = NULL;
  LingbotDitConfig c;
  lingbot_dit_config_init_preset (&c, LINGBOT_DIT_PRESET_TINY);
  /* an FFN of 64 x 70000 = 4.48 Mi elements spans two 4 Mi draw blocks */
  c.ffn_dim = 70000;
  GHashTable *t1 = lingbot_dit_random_weights (&c, LB_DTYPE_BF16, 11, 1,
      &err);
  g_assert_no_error (err);
  GHashTable *t3 = lingbot_dit_random_weights (&c, LB_DTYPE_BF16, 11, 3,
      &err);
  GHashTable *t0 = lingbot_dit_random_weights (&c, LB_DTYPE_BF16, 11, 0,
      &err);
  g_assert_no_error (err);
  g_assert_cmpuint (g_hash_table_size (t1), ==, 21 + 35 * c.num_layers);
  assert_same_tables (t1, t3);
  assert_same_tables (t1, t0);

  /* the values lingbot-mkmodel writes (bf16), widened; and the model
   * lingbot_dit_new_random() builds */
  g_autoptr (LingbotDit) dit = lingbot_dit_new_random (&c, 11, &err);
  g_assert_no_error (err);
  g_autoptr (GPtrArray) names = lingbot_dit_weight_names (&c);
  for (guint i = 0; i < names->len; i++) {
    const char *name = names->pdata[i];
    const LbTensor *x = g_hash_table_lookup (t1, name);
    g_assert_true (x->dtype == LB_DTYPE_F32);
    g_autoptr (LbTensor) b = lingbot_dit_random_weight (&c, name,
        LB_DTYPE_BF16, 11);
    g_autoptr (LbTensor) w = lb_tensor_to_f32 (b);
    g_assert_cmpmem (x->data, lb_tensor_nbytes (x), w->data,
        lb_tensor_nbytes (w));
    const LbTensor *m = lingbot_dit_get_weight (dit, name);
    g_assert_nonnull (m);
    g_assert_cmpint (lb_tensor_numel (m), ==, lb_tensor_numel (x));
    g_assert_cmpint (memcmp (m->data, x->data, lb_tensor_nbytes (x)), ==, 0);
  }

  /* the stream as lingbot-mkmodel always drew it, one element after the
   * other: splitmix64 from seed ^ FNV-1a (name), u = top 53 bits / 2^53,
   * w = (1 / sqrt (fan_in = 64)) (2u - 1) in float64 -> float32 -> bf16;
   * the drawn FFN matrix is that, across both draw blocks */
  {
    const char *nm = "blocks.0.ffn.0.weight";
    guint64 st = 1469598103934665603ull;
    for (const char *p = nm; *p; p++)
      st = (st ^ (guint8) * p) * 1099511628211ull;
    st ^= 11;
    const LbTensor *x = g_hash_table_lookup (t1, nm);
    const float *xd = x->data;
    for (int64_t i = 0; i < lb_tensor_numel (x); i++) {
      guint64 z = (st += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      double u = (double) (z >> 11) / 9007199254740992.0;
      float v = (float) ((2.0 * u - 1.0) / 8.0);
      if (xd[i] != lb_bf16_to_f32 (lb_f32_to_bf16 (v)))
        g_error ("%s[%" G_GINT64_FORMAT "] = %.9g, sequential stream %.9g",
            nm, i, xd[i], lb_bf16_to_f32 (lb_f32_to_bf16 (v)));
    }
  }

  /* a weight's values: bf16 rounding of U(+-1/sqrt(fan_in)); the two
   * blocks of the big FFN matrix differ; another seed differs */
  const LbTensor *ffn = g_hash_table_lookup (t1, "blocks.0.ffn.0.weight");
  const float *d = ffn->data;
  const int64_t n = lb_tensor_numel (ffn);
  g_assert_cmpint (n, ==, 70000 * 64);
  double lim = 1.0 / sqrt (64.0), sum = 0;
  for (int64_t i = 0; i < n; i++) {
    g_assert_cmpfloat (fabs (d[i]), <=, lim * (1 + 1.0 / 128));
    g_assert_cmpfloat (lb_bf16_to_f32 (lb_f32_to_bf16 (d[i])), ==, d[i]);
    sum += d[i];
  }
  g_assert_cmpfloat (fabs (sum / n), <, 0.01 * lim);
  g_assert_cmpint (memcmp (d, d + (1 << 22), 4096 * sizeof (float)), !=, 0);
  GHashTable *other = lingbot_dit_random_weights (&c, LB_DTYPE_BF16, 12, 0,
      &err);
  const LbTensor *o = g_hash_table_lookup (other, "blocks.0.ffn.0.weight");
  g_assert_cmpint (memcmp (d, o->data, 4096 * sizeof (float)), !=, 0);

  /* f32 storage: no rounding, same stream */
  GHashTable *f = lingbot_dit_random_weights (&c, LB_DTYPE_F32, 11, 2, &err);
  g_autoptr (LbTensor) r = lingbot_dit_random_weight (&c,
      "blocks.1.self_attn.q.weight", LB_DTYPE_F32, 11);
  const LbTensor *fq = g_hash_table_lookup (f, "blocks.1.self_attn.q.weight");
  g_assert_cmpmem (fq->data, lb_tensor_nbytes (fq), r->data,
      lb_tensor_nbytes (r));

  g_assert_null (lingbot_dit_random_weights (&c, LB_DTYPE_I32, 11, 0, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==,
      "random DiT: dtype i32 is not bf16, f16 or f32");
  g_hash_table_unref (f);
  g_hash_table_unref (other);
  g_hash_table_unref (t0);
  g_hash_table_unref (t3);
  g_hash_table_unref (t1);
}

/* A tiny session's cursors and chunk index. */
static void
cursors (LingbotDitSession * s, int64_t * g, int64_t * l, int64_t * k)
{
  lingbot_dit_session_get_cursors (s, g, l);
  *k = lingbot_dit_session_get_chunk_index (s);
}

static LingbotDitSession *
tiny_session (LingbotDit * dit, int window, GError ** err)
{
  LingbotDitSessionOptions o = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  o.latent_h = 8;
  o.latent_w = 12;
  o.local_attn_frames = window;
  o.max_frames = 16;
  g_autoptr (LbTensor) text = lb_tensor_new_f32 (3, 1, 4,
      lingbot_dit_get_config (dit)->text_dim);
  return lingbot_dit_session_new (dit, NULL, &o, text, err);
}

static void
test_fill_window (void)
{
  g_autoptr (GError) err = NULL;
  LingbotDitConfig c;
  lingbot_dit_config_init_preset (&c, LINGBOT_DIT_PRESET_TINY);
  g_autoptr (LingbotDit) dit = lingbot_dit_new_random (&c, 5, &err);
  g_assert_no_error (err);
  /* tiny: chunks of 2 latent frames, window 6 frames, T_f = 4 x 6 = 24 */
  const int64_t tf = 24, C = 2, cap = 6 * tf;
  g_autoptr (LbTensor) y = lb_tensor_new_f32 (5, 1, c.in_dim - c.out_dim,
      (int) C, 8, 12);
  g_autoptr (LbTensor) ctl = lb_tensor_new_f32 (5, 1,
      c.control_in_features / 4, (int) C, 8, 12);
  g_autoptr (LingbotNoise) noise = lingbot_noise_new_philox (1);

  g_autoptr (LingbotDitSession) a = tiny_session (dit, 0, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_dit_session_get_cache_capacity (a), ==, cap);
  int64_t g, l, k;
  g_assert_true (lingbot_dit_session_bench_fill_window (a, &err));
  g_assert_no_error (err);
  /* ceil (6 / 2) = 3 chunks would have filled it */
  cursors (a, &g, &l, &k);
  g_assert_cmpint (k, ==, 3);
  g_assert_cmpint (g, ==, 3 * C * tf);
  g_assert_cmpint (l, ==, cap);
  g_assert_true (lingbot_dit_session_run_chunk_noise (a, y, ctl, noise, NULL,
          &err));
  g_assert_no_error (err);
  cursors (a, &g, &l, &k);
  g_assert_cmpint (k, ==, 4);
  g_assert_cmpint (g, ==, 4 * C * tf);
  g_assert_cmpint (l, ==, cap); /* the chunk attended over cap keys */

  /* a session that ran those 4 chunks ends with the same cursors; its
   * first chunk saw only its own C T_f keys */
  g_autoptr (LingbotDitSession) b = tiny_session (dit, 0, &err);
  g_assert_no_error (err);
  for (int i = 0; i < 4; i++) {
    g_assert_true (lingbot_dit_session_run_chunk_noise (b, y, ctl, noise,
            NULL, &err));
    g_assert_no_error (err);
    cursors (b, &g, &l, &k);
    g_assert_cmpint (l, ==, MIN ((i + 1) * C * tf, cap));
  }
  int64_t g2, l2, k2;
  cursors (a, &g2, &l2, &k2);
  g_assert_cmpint (g, ==, g2);
  g_assert_cmpint (l, ==, l2);
  g_assert_cmpint (k, ==, k2);

  /* filling again changes nothing (already past the window) */
  g_assert_true (lingbot_dit_session_bench_fill_window (b, &err));
  cursors (b, &g2, &l2, &k2);
  g_assert_cmpint (g, ==, g2);
  g_assert_cmpint (l, ==, l2);
  g_assert_cmpint (k, ==, k2);

  /* a global cache has no window */
  g_autoptr (LingbotDitSession) gl = tiny_session (dit, -1, &err);
  g_assert_no_error (err);
  g_assert_false (lingbot_dit_session_bench_fill_window (gl, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==,
      "DiT session: a global KV cache has no window to fill");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/bench/models/dit-flops-14b", test_dit_flops_14b);
  g_test_add_func ("/bench/models/dit-flops-window", test_dit_flops_window);
  g_test_add_func ("/bench/models/dit-memory", test_dit_memory);
  g_test_add_func ("/bench/models/dit-exchange", test_dit_exchange);
  g_test_add_func ("/bench/models/dit-rank-exchange", test_dit_rank_exchange);
  g_test_add_func ("/bench/models/vae-flops", test_vae_flops);
  g_test_add_func ("/bench/models/random-weights", test_random_weights);
  g_test_add_func ("/bench/models/fill-window", test_fill_window);
  return g_test_run ();
}

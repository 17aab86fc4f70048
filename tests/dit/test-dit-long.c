/* lingbot-gst: hours-long DiT sessions: RoPE frame positions past the
 * 1024-row tables, and a session whose state per chunk stays flat
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A chunk's temporal RoPE angles come from the base tables for frames
 * < 1024 and from the same float64 formula after (lb_rope_fill(),
 * lingbot_dit_rope_chunk()).  The formula must be the tables' bit for bit
 * where both exist, so a session does not change when it crosses frame
 * 1024, and a session must run any number of chunks with the same
 * KV-cache bytes and cursors.
 */
#include <math.h>
#include <string.h>

#include "dit-test-util.h"
#include "comm/worker-group.h"
#include "kernels/ops.h"
#include "lingbot/dit-private.h"
#include "lingbot/dit-session.h"
#include "lingbot/noise.h"

static LingbotCheckpoint *fixture;
static LingbotDit *dit;

/* The pair split and frequency of spec 1.8 written out again here (the
 * official split hd - 4 (hd/6) temporal dims, 2 (hd/6) height, 2 (hd/6)
 * width), independently of kernels/cpu/rope.c. */
static double
spec_frequency (int hd, int pair)
{
  const int t = (hd - 4 * (hd / 6)) / 2, h = hd / 6;
  int j = pair, sub = 2 * t;
  if (pair >= t) {
    j = (pair - t) % h;
    sub = 2 * h;
  }
  return 1.0 / pow (10000.0, (double) (2 * j) / (double) sub);
}

static guint32
bits (float f)
{
  guint32 u;
  memcpy (&u, &f, sizeof u);
  return u;
}

/* For every head dim in use (32: the tiny and demo presets; 64: the
 * device tests' random models; 128: the 14B and 1.3B): the table equals
 * the spec
 * formula at every position < 1024 in every column, lb_rope_fill() gives
 * the table's bits for every window of rows the DiT takes (F frames from
 * any frame0, the temporal columns) and for any column range, and past
 * the table it continues the same formula. */
static void
test_rope_formula (void)
{
  LingbotDitConfig tiny;
  lingbot_dit_config_init_preset (&tiny, LINGBOT_DIT_PRESET_TINY);
  const int hds[] = { lingbot_dit_config_head_dim (&tiny), 64, 128 };
  g_assert_cmpint (hds[0], ==, 32);
  for (guint k = 0; k < G_N_ELEMENTS (hds); k++) {
    const int hd = hds[k], half = hd / 2, tp = (hd - 4 * (hd / 6)) / 2;
    const int P = LINGBOT_DIT_ROPE_MAX_POS;
    g_autoptr (LbTensor) ct = NULL;
    g_autoptr (LbTensor) st = NULL;
    lb_rope_tables_new (hd, P, LINGBOT_DIT_ROPE_THETA, &ct, &st);
    const float *c = ct->data, *s = st->data;
    for (int p = 0; p < half; p++) {
      const double w = spec_frequency (hd, p);
      g_assert_true (lb_rope_pair_frequency (hd, LINGBOT_DIT_ROPE_THETA,
              p) == w);
      for (int r = 0; r < P; r++) {
        g_assert_cmphex (bits (c[r * half + p]), ==,
            bits ((float) cos ((double) r * w)));
        g_assert_cmphex (bits (s[r * half + p]), ==,
            bits ((float) sin ((double) r * w)));
      }
    }
    /* the DiT's windows: F frames of the temporal pairs from every frame0
     * whose window fits the table, F = 1, 2, 4 */
    for (int F = 1; F <= 4; F *= 2) {
      float fc[4 * 64], fs[4 * 64];
      for (int f0 = 0; f0 + F <= P; f0++) {
        lb_rope_fill (hd, LINGBOT_DIT_ROPE_THETA, f0, F, 0, tp, fc, fs);
        for (int r = 0; r < F; r++)
          for (int p = 0; p < tp; p++) {
            g_assert_cmphex (bits (fc[r * tp + p]), ==,
                bits (c[(f0 + r) * half + p]));
            g_assert_cmphex (bits (fs[r * tp + p]), ==,
                bits (s[(f0 + r) * half + p]));
          }
      }
    }
    /* any column range (height and width pairs too), every position */
    g_autofree float *fc = g_new (float, (gsize) P * half);
    g_autofree float *fs = g_new (float, (gsize) P * half);
    const int ranges[3][2] = { {0, half}, {tp, hd / 6}, {tp + hd / 6, 1} };
    for (int i = 0; i < 3; i++) {
      const int p0 = ranges[i][0], n = ranges[i][1];
      lb_rope_fill (hd, LINGBOT_DIT_ROPE_THETA, 0, P, p0, n, fc, fs);
      for (int r = 0; r < P; r++)
        for (int p = 0; p < n; p++) {
          g_assert_cmphex (bits (fc[r * n + p]), ==,
              bits (c[r * half + p0 + p]));
          g_assert_cmphex (bits (fs[r * n + p]), ==,
              bits (s[r * half + p0 + p]));
        }
    }
    /* past the table: the same formula, at 10 hours of 16 fps video
     * (36000 chunks of 4 frames) and beyond */
    const int64_t far[] = { P, P + 1, 4 * 300 - 1, 4 * 36000,
      G_GINT64_CONSTANT (1) << 40
    };
    for (guint i = 0; i < G_N_ELEMENTS (far); i++) {
      float oc[64], os[64];
      lb_rope_fill (hd, LINGBOT_DIT_ROPE_THETA, far[i], 1, 0, half, oc, os);
      for (int p = 0; p < half; p++) {
        const double a = (double) far[i] * spec_frequency (hd, p);
        g_assert_cmphex (bits (oc[p]), ==, bits ((float) cos (a)));
        g_assert_cmphex (bits (os[p]), ==, bits ((float) sin (a)));
      }
    }
  }
}

/* ------------------------------------------------------------------------ */
/* 300 chunks                                                               */
/* ------------------------------------------------------------------------ */

#define LAT_H 4
#define LAT_W 4
#define FRAMES 4
#define N_CHUNKS 300

typedef struct
{
  GByteArray *out;              /* every chunk's x0 */
  int64_t cap, frame_tokens;
  gsize kv_bytes;
} LongRun;

/* @n_chunks chunks of the dit_tiny model over a 4x4 latent (2 x 2 tokens
 * per frame), window 8, sink 2, Philox noise, fixed condition and
 * control; @formula: the formula path for every chunk. */
static void
run_long (int n_ranks, int n_chunks, gboolean formula, LongRun * run)
{
  g_autoptr (GError) err = NULL;
  LbWorkerGroupOptions go = { 0, NULL, "dit-long" };
  LbWorkerGroup *group = lb_worker_group_new (lb_cpu_backend (), n_ranks,
      NULL, &go, &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = LAT_H;
  opt.latent_w = LAT_W;
  opt.chunk_frames = FRAMES;
  opt.local_attn_frames = 8;
  opt.sink_frames = 2;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  if (formula)
    lingbot_dit_session_set_rope_formula (ses, TRUE);
  run->cap = lingbot_dit_session_get_cache_capacity (ses);
  run->frame_tokens = lingbot_dit_session_get_frame_tokens (ses);
  g_assert_cmpint (run->frame_tokens, ==, 4);
  g_assert_cmpint (run->cap, ==, 8 * 4);
  g_assert_true (lingbot_dit_session_get_kv_info (ses, 0, NULL,
          &run->kv_bytes));

  const int64_t ys[5] = { 1, 20, FRAMES, LAT_H, LAT_W };
  const int64_t cs[5] = { 1, 384, FRAMES, LAT_H, LAT_W };
  const int64_t os[5] = { 1, 16, FRAMES, LAT_H, LAT_W };
  g_autoptr (LbTensor) y = lb_tensor_new (LB_DTYPE_F32, 5, ys);
  g_autoptr (LbTensor) ctl = lb_tensor_new (LB_DTYPE_F32, 5, cs);
  g_autoptr (LbTensor) out = lb_tensor_new (LB_DTYPE_F32, 5, os);
  for (int64_t e = 0; e < lb_tensor_numel (y); e++)
    ((float *) y->data)[e] = 0.3f * sinf (0.37f * (float) e);
  for (int64_t e = 0; e < lb_tensor_numel (ctl); e++)
    ((float *) ctl->data)[e] = 0.1f * cosf (0.11f * (float) e);
  g_autoptr (LingbotNoise) noise = lingbot_noise_new_philox (1234);
  run->out = g_byte_array_new ();
  for (int c = 0; c < n_chunks; c++) {
    g_assert_cmpint (lingbot_dit_session_get_chunk_index (ses), ==, c);
    g_assert_true (lingbot_dit_session_run_chunk_noise (ses, y, ctl, noise,
            out, &err));
    g_assert_no_error (err);
    const float *o = out->data;
    double m = 0.0;
    for (int64_t e = 0; e < lb_tensor_numel (out); e++) {
      g_assert_true (isfinite (o[e]));
      m = MAX (m, fabs (o[e]));
    }
    g_assert_cmpfloat (m, >, 0.01);
    g_byte_array_append (run->out, out->data, (guint) lb_tensor_nbytes (out));
    /* spec 3.3 cursors: every chunk's tokens seen, the window full from
     * chunk 1 on; the cache's bytes never change */
    int64_t ge, le;
    lingbot_dit_session_get_cursors (ses, &ge, &le);
    g_assert_cmpint (ge, ==, (int64_t) (c + 1) * FRAMES * run->frame_tokens);
    g_assert_cmpint (le, ==, MIN ((int64_t) (c + 1) * FRAMES *
            run->frame_tokens, run->cap));
    for (int r = 0; r < n_ranks; r++) {
      gsize b = 0;
      g_assert_true (lingbot_dit_session_get_kv_info (ses, r, NULL, &b));
      g_assert_cmpuint (b, ==, run->kv_bytes);
    }
  }
  /* frame 1024 (chunk 256) and later were generated */
  g_assert_cmpint (lingbot_dit_session_get_chunk_index (ses), ==, n_chunks);
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
}

/* 300 chunks of 4 frames pass frame 1024 (the reference's table ends at
 * chunk 256) with finite outputs and constant cursors and cache bytes;
 * the table path and the formula path give the same bytes for every chunk
 * (for chunks < 256 that is the table against the formula; from chunk 256
 * on both take the formula). */
static void
test_long_session (void)
{
  LongRun table = { 0 }, formula = { 0 };
  run_long (1, N_CHUNKS, FALSE, &table);
  run_long (1, N_CHUNKS, TRUE, &formula);
  const gsize chunk_bytes = 16 * FRAMES * LAT_H * LAT_W * sizeof (float);
  g_assert_cmpuint (table.out->len, ==, N_CHUNKS * chunk_bytes);
  g_assert_cmpuint (formula.out->len, ==, table.out->len);
  g_assert_true (memcmp (table.out->data, formula.out->data,
          256 * chunk_bytes) == 0);
  g_assert_true (memcmp (table.out->data, formula.out->data,
          table.out->len) == 0);
  /* the chunks differ from each other (fresh noise per chunk) */
  g_assert_false (memcmp (table.out->data + 255 * chunk_bytes,
          table.out->data + 256 * chunk_bytes, chunk_bytes) == 0);
  g_byte_array_unref (table.out);
  g_byte_array_unref (formula.out);
}

/* The same on 2 ranks (one token row each), over chunks 0-259: the
 * formula equals the table on every rank, and the sharded session
 * crosses frame 1024. */
static void
test_long_session_ranks (void)
{
  LongRun table = { 0 }, formula = { 0 };
  run_long (2, 260, FALSE, &table);
  run_long (2, 260, TRUE, &formula);
  g_assert_cmpuint (formula.out->len, ==, table.out->len);
  g_assert_true (memcmp (table.out->data, formula.out->data,
          table.out->len) == 0);
  g_byte_array_unref (table.out);
  g_byte_array_unref (formula.out);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autofree char *path = dit_fixture_path ();
  g_autoptr (GError) err = NULL;
  fixture = lingbot_checkpoint_open (path, &err);
  g_assert_no_error (err);
  dit = lingbot_dit_load_checkpoint (fixture, NULL, LINGBOT_DIT_LOAD_DEFAULT,
      &err);
  g_assert_no_error (err);

  g_test_add_func ("/dit/rope/formula", test_rope_formula);
  g_test_add_func ("/dit/long/300-chunks", test_long_session);
  g_test_add_func ("/dit/long/ranks", test_long_session_ranks);
  int rc = g_test_run ();
  lingbot_dit_unref (dit);
  lingbot_checkpoint_unref (fixture);
  return rc;
}

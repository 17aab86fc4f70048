/* lingbot-gst: the DiT's device code paths, on an emulated device
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * No GPU is needed: "fakedev" (tests/common/fakedev.c) is a backend that
 * says it drives CUDA devices but keeps its memory in host allocations it
 * tracks, refuses copies and ops whose pointers are not where they claim
 * to be, and runs the CPU kernels.  So a session on fakedev runs exactly
 * the code a CUDA rank runs (weights uploaded per rank, buffers from
 * lb_tensor_new_on(), every copy through the backend, host reads through
 * lb_tensor_download(), Ulysses packing by ops) and must reproduce the CPU
 * backend bit for bit: the dit_tiny stream (4 chunks, eviction) at 1, 2
 * and 4 ranks, every pass's x_in / pred / x0, the outputs and the KV
 * caches.  What it cannot check is the CUDA kernels themselves (the gpu
 * suite, tests/gpu/run.sh) and NCCL.
 */
#include <math.h>
#include <string.h>

#include "dit-test-util.h"
#include "fakedev.h"
#include "comm/worker-group.h"
#include "comm/collectives.h"
#include "lingbot/dit-private.h"
#include "lingbot/dit-session.h"
#include "lingbot/control.h"

static LingbotCheckpoint *fixture;
static LingbotDit *dit;

/* ------------------------------------------------------------------------ */
/* one stream run, recorded                                                 */
/* ------------------------------------------------------------------------ */

typedef struct
{
  GByteArray *bytes;            /* everything the session let us see */
  int n_steps;
} Record;

static void
append (Record * rec, const LbTensor * t)
{
  g_assert_cmpint (t->device.type, ==, LB_DEVICE_CPU);
  g_byte_array_append (rec->bytes, t->data, (guint) lb_tensor_nbytes (t));
}

static void
on_step (LingbotDitSession * ses, int64_t chunk, int step,
    const LbTensor * x_in, const LbTensor * pred, const LbTensor * x0,
    gpointer user_data)
{
  (void) ses;
  (void) chunk;
  (void) step;
  Record *rec = user_data;
  append (rec, x_in);
  append (rec, pred);
  if (x0)
    append (rec, x0);
  rec->n_steps++;
}

static GByteArray *
run_stream (LbBackend * be, int n_ranks)
{
  g_autoptr (GError) err = NULL;
  const LingbotDitConfig *cfg = lingbot_dit_get_config (dit);
  LbWorkerGroupOptions go = { 0, NULL, "dit-device-test" };
  LbWorkerGroup *group = lb_worker_group_new (be, n_ranks, NULL, &go, &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  Record rec = { g_byte_array_new (), 0 };
  lingbot_dit_session_set_step_callback (ses, on_step, &rec);
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  int64_t kvshape[4] = { 1, 150, cfg->num_heads, cfg->dim / cfg->num_heads };
  g_autoptr (LbTensor) k = lb_tensor_new (LB_DTYPE_F32, 4, kvshape);
  g_autoptr (LbTensor) v = lb_tensor_new (LB_DTYPE_F32, 4, kvshape);
  for (int c = 0; c < 4; c++) {
    char name[96];
    const LbTensor *noise[4];
    const LbTensor *y, *ctl;
    dit_fixture_chunk (fixture, c, noise, &y, &ctl);
    g_assert_true (lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
            &err));
    g_assert_no_error (err);
    append (&rec, out);
    g_snprintf (name, sizeof name, "output.chunk%d.denoised", c);
    const LbTensor *g = dit_fixture_get (fixture, name);
    g_assert_cmpfloat (dit_rel_error (out->data, g, lb_tensor_numel (g)), <=,
        DIT_GOLDEN_TOL);
    for (int l = 0; l < cfg->num_layers; l++) {
      g_assert_true (lingbot_dit_session_get_kv_cache (ses, l, k, v, &err));
      g_assert_no_error (err);
      append (&rec, k);
      append (&rec, v);
    }
  }
  g_assert_cmpint (rec.n_steps, ==, 20);
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
  return rec.bytes;
}

static void
test_stream_bit_identical (gconstpointer data)
{
  const int n_ranks = GPOINTER_TO_INT (data);
  g_autoptr (GByteArray) cpu = run_stream (lb_cpu_backend (), n_ranks);
  const FakeDevStats st0 = fakedev_stats ();
  g_autoptr (GByteArray) dev = run_stream (fakedev_backend (), n_ranks);
  const FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.bad, ==, 0);
  g_assert_cmpint (st.n_ops, >, st0.n_ops);
  g_assert_cmpint (st.n_d2d, >, st0.n_d2d);
  g_assert_cmpint (st.n_h2d, >, st0.n_h2d);
  g_assert_cmpint (st.live_blocks, ==, st0.live_blocks);
  g_assert_cmpuint (cpu->len, ==, dev->len);
  g_assert_true (memcmp (cpu->data, dev->data, cpu->len) == 0);
  g_print ("# dit on fakedev, %d rank(s): bit-identical to the CPU backend "
      "over %u bytes of passes, outputs and KV caches\n", n_ranks, cpu->len);
}

/* Weights: uploaded once per rank on a device, borrowed on the CPU. */
static void
test_weights (void)
{
  g_autoptr (GError) err = NULL;
  const int L = lingbot_dit_get_config (dit)->num_layers;
  LbStream *cs = lb_cpu_backend ()->stream_new (lb_cpu_backend (), 0, &err);
  LbStream *ds = fakedev_backend ()->stream_new (fakedev_backend (), 1,
      &err);
  LingbotDitWeights w;
  gboolean owned;
  gsize nbytes;
  g_assert_true (lingbot_dit_weights_init (&w, &owned, &nbytes, cs, dit, &err));
  g_assert_false (owned);
  g_assert_cmpuint (nbytes, ==, 0);
  g_assert_true (w.blocks[L - 1].cam_shift.w ==
      dit->w.blocks[L - 1].cam_shift.w);
  lingbot_dit_weights_clear (&w, owned, L);

  g_assert_true (lingbot_dit_weights_init (&w, &owned, &nbytes, ds, dit, &err));
  g_assert_no_error (err);
  g_assert_true (owned);
  gsize total = 0;
  GHashTableIter it;
  gpointer name, t;
  g_hash_table_iter_init (&it, dit->by_name);
  while (g_hash_table_iter_next (&it, &name, &t))
    total += lb_tensor_nbytes (t);
  g_assert_cmpuint (nbytes, ==, total); /* every weight, once */
  const LbTensor *a = w.blocks[L - 1].cam_shift.w;
  const LbTensor *b = dit->w.blocks[L - 1].cam_shift.w;
  g_assert_cmpint (a->device.type, ==, LB_DEVICE_CUDA);
  g_assert_cmpint (a->device.index, ==, 1);
  g_assert_true (lb_tensor_same_shape (a, b));
  g_assert_true (memcmp (a->data, b->data, lb_tensor_nbytes (b)) == 0);
  g_assert_true (w.head_modulation->ndim == 2);
  lingbot_dit_weights_clear (&w, owned, L);
  g_assert_cmpint (fakedev_stats ().bad, ==, 0);
  lb_cpu_backend ()->stream_free (cs);
  fakedev_backend ()->stream_free (ds);
}

/* lingbot_dit_copy_rows: one copy when contiguous, one per run else. */
static void
test_copy_rows (void)
{
  g_autoptr (GError) err = NULL;
  LbStream *s = fakedev_backend ()->stream_new (fakedev_backend (), 0,
      &err);
  int64_t shape[2] = { 6, 8 };
  g_autoptr (LbTensor) a = lb_tensor_new_on (s, LB_DTYPE_F32, 2, shape, &err);
  g_autoptr (LbTensor) b = lb_tensor_new_on (s, LB_DTYPE_F32, 2, shape, &err);
  g_autoptr (LbTensor) h = lb_tensor_new (LB_DTYPE_F32, 2, shape);
  for (int i = 0; i < 48; i++)
    ((float *) h->data)[i] = (float) i;
  g_assert_true (lb_tensor_upload (s, a, h, &err));
  int before = fakedev_stats ().n_d2d;
  g_assert_true (lingbot_dit_copy_rows (s, b, a, &err));
  g_assert_cmpint (fakedev_stats ().n_d2d - before, ==, 1);
  LbTensor va, vb;
  lb_tensor_view_narrow (&va, a, 1, 2, 3);
  lb_tensor_view_narrow (&vb, b, 1, 5, 3);
  before = fakedev_stats ().n_d2d;
  g_assert_true (lingbot_dit_copy_rows (s, &vb, &va, &err));
  g_assert_cmpint (fakedev_stats ().n_d2d - before, ==, 6);
  g_assert_true (lb_tensor_download (s, h, b, &err));
  for (int r = 0; r < 6; r++)
    for (int c = 0; c < 8; c++)
      g_assert_cmpfloat (((float *) h->data)[r * 8 + c], ==,
          (float) (r * 8 + (c >= 5 ? c - 3 : c)));
  /* shape mismatch */
  lb_tensor_view_narrow (&vb, b, 1, 4, 4);
  g_assert_false (lingbot_dit_copy_rows (s, &vb, &va, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpint (fakedev_stats ().bad, ==, 0);
  fakedev_backend ()->stream_free (s);
}

/* Graph replay of the steady-state chunk (lingbot/dit-session.c,
 * run_region()): without a step callback, a 1-rank session on fakedev
 * captures the passes of the first chunk that starts with a full window
 * and replays them for every later one.  fakedev's capture records op
 * calls by value and refuses host transfers, allocation and
 * synchronisation while recording, so anything in a pass that changed
 * between chunks (a RoPE frame offset, a cache slot, a sigma) would make
 * the replayed chunks differ from the CPU's, which run every op. */
/* when set, run_plain() appends the cursors (global_end, local_end) after
 * every chunk */
static GArray *cursor_log;
/* run_plain()'s LingbotDitSessionOptions.max_attention_size */
static int plain_span;

static GByteArray *
run_plain (LbBackend * be, int n_chunks, gboolean rope_formula,
    int *first_steady)
{
  g_autoptr (GError) err = NULL;
  LbWorkerGroupOptions go = { 0, NULL, "dit-graph-test" };
  LbWorkerGroup *group = lb_worker_group_new (be, 1, NULL, &go, &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  opt.max_attention_size = plain_span;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  if (rope_formula)
    lingbot_dit_session_set_rope_formula (ses, TRUE);
  const int64_t cap = lingbot_dit_session_get_cache_capacity (ses);
  const int64_t chunk_tokens = 4 * lingbot_dit_session_get_frame_tokens (ses);
  GByteArray *bytes = g_byte_array_new ();
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  *first_steady = -1;
  for (int c = 0; c < n_chunks; c++) {
    const LbTensor *noise[4];
    const int f = c % 4;
    int64_t global_end, local_end;
    lingbot_dit_session_get_cursors (ses, &global_end, &local_end);
    if (*first_steady < 0 && local_end == cap && global_end == c * chunk_tokens)
      *first_steady = c;
    const LbTensor *y, *ctl;
    dit_fixture_chunk (fixture, f, noise, &y, &ctl);
    g_assert_true (lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
            &err));
    g_assert_no_error (err);
    g_byte_array_append (bytes, out->data, (guint) lb_tensor_nbytes (out));
    if (cursor_log) {
      lingbot_dit_session_get_cursors (ses, &global_end, &local_end);
      g_array_append_val (cursor_log, global_end);
      g_array_append_val (cursor_log, local_end);
    }
  }
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
  return bytes;
}

static void
test_graph_replay (void)
{
  const int n_chunks = 9;
  int steady_cpu, steady_dev;
  g_autoptr (GByteArray) cpu = run_plain (lb_cpu_backend (), n_chunks, FALSE,
      &steady_cpu);
  const FakeDevStats st0 = fakedev_stats ();
  g_autoptr (GByteArray) dev = run_plain (fakedev_backend (), n_chunks, FALSE,
      &steady_dev);
  const FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (steady_cpu, ==, steady_dev);
  g_assert_cmpint (steady_dev, >, 0);
  g_assert_cmpint (steady_dev, <, n_chunks - 2);
  g_assert_cmpint (st.bad, ==, 0);
  /* the 4 + 1 passes, one graph each, captured once each, launched for
   * every steady chunk */
  g_assert_cmpint (st.n_captures - st0.n_captures, ==, 5);
  g_assert_cmpint (st.n_launches - st0.n_launches, ==,
      5 * (n_chunks - steady_dev));
  g_assert_cmpint (st.live_blocks, ==, st0.live_blocks);
  g_assert_cmpuint (cpu->len, ==, dev->len);
  g_assert_true (memcmp (cpu->data, dev->data, cpu->len) == 0);
  g_print ("# graphs: steady from chunk %d of %d, %d launches, outputs "
      "bit-identical to the CPU over %u bytes\n", steady_dev, n_chunks,
      st.n_launches - st0.n_launches, cpu->len);

  /* LINGBOT_DIT_GRAPHS=0: every op runs directly, same bytes */
  g_setenv ("LINGBOT_DIT_GRAPHS", "0", TRUE);
  const FakeDevStats st1 = fakedev_stats ();
  g_autoptr (GByteArray) off = run_plain (fakedev_backend (), n_chunks,
      FALSE, &steady_dev);
  g_unsetenv ("LINGBOT_DIT_GRAPHS");
  g_assert_cmpint (fakedev_stats ().n_launches, ==, st1.n_launches);
  g_assert_true (memcmp (off->data, dev->data, dev->len) == 0);
}

/* A span below the capacity (75 of 150 tokens) on a device rank: the
 * steady chunks attend over the same slots [75, 150) every time, so their
 * passes are captured once and replayed, with the CPU's bytes; and the
 * span changed them (the capacity run differs). */
static void
test_graph_replay_span (void)
{
  const int n_chunks = 7;
  int steady_cpu, steady_dev;
  g_autoptr (GByteArray) full = run_plain (lb_cpu_backend (), n_chunks, FALSE,
      &steady_cpu);
  plain_span = 75;
  g_autoptr (GByteArray) cpu = run_plain (lb_cpu_backend (), n_chunks, FALSE,
      &steady_cpu);
  const FakeDevStats st0 = fakedev_stats ();
  g_autoptr (GByteArray) dev = run_plain (fakedev_backend (), n_chunks, FALSE,
      &steady_dev);
  const FakeDevStats st = fakedev_stats ();
  plain_span = 0;
  g_assert_cmpint (steady_dev, ==, steady_cpu);
  g_assert_cmpint (steady_dev, >, 0);
  g_assert_cmpint (st.bad, ==, 0);
  g_assert_cmpint (st.n_captures - st0.n_captures, ==, 5);
  g_assert_cmpint (st.n_launches - st0.n_launches, ==,
      5 * (n_chunks - steady_dev));
  g_assert_cmpuint (cpu->len, ==, dev->len);
  g_assert_true (memcmp (cpu->data, dev->data, cpu->len) == 0);
  /* chunk 0 (60 tokens cached) is the same, the later ones are not */
  const guint chunk_bytes = cpu->len / n_chunks;
  g_assert_true (memcmp (cpu->data, full->data, chunk_bytes) == 0);
  for (int c = 1; c < n_chunks; c++)
    g_assert_true (memcmp (cpu->data + c * chunk_bytes,
            full->data + c * chunk_bytes, chunk_bytes) != 0);
}

/* A graph capture that fails (fakedev_fail_graph_end(): graph_end
 * answers cudaErrorStreamCaptureInvalidated, as when another thread's
 * call invalidated the capture) runs its pass directly instead: the chunk
 * succeeds with the CPU's bytes and cursors.  Once: the next steady chunk
 * captures that pass again.  Always: after 3 failed captures the rank
 * stops trying and runs every pass directly. */
static void
test_graph_capture_fails (void)
{
  const int n_chunks = 9;
  int steady_cpu, steady_dev;
  g_autoptr (GArray) cur_cpu = g_array_new (FALSE, FALSE, sizeof (int64_t));
  g_autoptr (GArray) cur_dev = g_array_new (FALSE, FALSE, sizeof (int64_t));
  cursor_log = cur_cpu;
  g_autoptr (GByteArray) cpu = run_plain (lb_cpu_backend (), n_chunks, FALSE,
      &steady_cpu);
  for (int always = 0; always < 2; always++) {
    g_array_set_size (cur_dev, 0);
    cursor_log = cur_dev;
    const FakeDevStats st0 = fakedev_stats ();
    fakedev_fail_graph_end (always ? -1 : 1);
    g_autoptr (GByteArray) dev = run_plain (fakedev_backend (), n_chunks,
        FALSE, &steady_dev);
    fakedev_fail_graph_end (0);
    const FakeDevStats st = fakedev_stats ();
    g_assert_cmpint (st.bad, ==, st0.bad);
    g_assert_cmpint (steady_dev, ==, steady_cpu);
    if (always) {
      g_assert_cmpint (st.n_capture_fails - st0.n_capture_fails, ==, 3);
      g_assert_cmpint (st.n_captures, ==, st0.n_captures);
      g_assert_cmpint (st.n_launches, ==, st0.n_launches);
    } else {
      /* pass 0 of the first steady chunk ran directly, the next chunk
       * captured it */
      g_assert_cmpint (st.n_capture_fails - st0.n_capture_fails, ==, 1);
      g_assert_cmpint (st.n_captures - st0.n_captures, ==, 5);
      g_assert_cmpint (st.n_launches - st0.n_launches, ==,
          5 * (n_chunks - steady_dev) - 1);
    }
    g_assert_cmpint (st.live_blocks, ==, st0.live_blocks);
    g_assert_cmpuint (cur_dev->len, ==, cur_cpu->len);
    g_assert_true (memcmp (cur_dev->data, cur_cpu->data,
            cur_cpu->len * sizeof (int64_t)) == 0);
    g_assert_cmpuint (cpu->len, ==, dev->len);
    g_assert_true (memcmp (cpu->data, dev->data, cpu->len) == 0);
  }
  cursor_log = NULL;
}

/* The GPU path of `lingbot-bench dit --rank-of` on the emulated device: a
 * solo group (one fakedev rank standing in for rank 0 of 2) has
 * stream-ordered collectives, so the DiT turns on the exchange overlap
 * (events) and replays the steady chunks as graphs with the solo copies
 * inside them.  fakedev fills new device memory with NaN, so a receive
 * slot the solo collectives left unwritten would make the output NaN:
 * every chunk's output must be finite.  Nothing may be refused, and the
 * solo class must have moved exactly what rank 0 of 2 receives. */
static void
test_solo (void)
{
  g_autoptr (GError) err = NULL;
  const int n_chunks = 9;
  const LingbotDitConfig *cfg = lingbot_dit_get_config (dit);
  LbWorkerGroupOptions go = { 0, NULL, "dit-solo-test" };
  LbWorkerGroup *group = lb_worker_group_new_solo (fakedev_backend (), 0, 2,
      &go, &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  const FakeDevStats st0 = fakedev_stats ();
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  LingbotDitRankShare sh;
  g_assert_true (lingbot_dit_session_bench_get_share (ses, 0, &sh));
  /* 3 token rows: rank 0 of 2 holds rows 0..1 and half the heads */
  g_assert_cmpint (sh.world_ranks, ==, 2);
  g_assert_cmpint (sh.band_row0, ==, 0);
  g_assert_cmpint (sh.band_rows, ==, 2);
  g_assert_cmpint (sh.heads, ==, cfg->num_heads / 2);
  const int64_t cap = lingbot_dit_session_get_cache_capacity (ses);
  const int64_t chunk_tokens = 4 * lingbot_dit_session_get_frame_tokens (ses);
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  int steady = -1;
  const FakeDevStats st1 = fakedev_stats ();
  for (int c = 0; c < n_chunks; c++) {
    const LbTensor *noise[4], *y, *ctl;
    int64_t global_end, local_end;
    lingbot_dit_session_get_cursors (ses, &global_end, &local_end);
    if (steady < 0 && local_end == cap && global_end == c * chunk_tokens)
      steady = c;
    dit_fixture_chunk (fixture, c % 4, noise, &y, &ctl);
    g_assert_true (lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
            &err));
    g_assert_no_error (err);
    const float *o = out->data;
    for (int64_t i = 0; i < lb_tensor_numel (out); i++)
      if (!isfinite (o[i]))
        g_error ("chunk %d: output %" G_GINT64_FORMAT " is %g", c, i, o[i]);
  }
  const FakeDevStats st = fakedev_stats ();
  g_assert_cmpint (st.bad, ==, st0.bad);
  g_assert_cmpint (steady, >, 0);
  g_assert_cmpint (st.n_captures - st1.n_captures, ==, 5);
  g_assert_cmpint (st.n_launches - st1.n_launches, ==, 5 * (n_chunks - steady));
  /* the communication stream joined each pass's capture: the exchanges
   * are part of the graphs, as on CUDA */
  g_assert_cmpint (st.n_capture_joins - st1.n_capture_joins, ==, 5);
  /* the overlap's event waits (4 per layer and pass with one out group) */
  g_assert_cmpint (st.n_waits - st1.n_waits, >=,
      4 * cfg->num_layers * 5 * steady);
  /* per layer-pass rank 0 receives rank 1's band (1 row x 5 x 4 frames =
   * 20 tokens) of q, k and v for its heads and its own band (40 tokens)
   * of the output; per pass the head output of rank 1's 20 tokens; f32 */
  const guint64 hlhd = (guint64) (cfg->num_heads / 2) * (cfg->dim /
      cfg->num_heads);
  const guint64 per_chunk = (guint64) cfg->num_layers * 5 * (3 * 20 + 40) *
      hlhd * 4 + 5ull * 20 * cfg->out_dim * 4 * 4;
  /* counted when called from the host: the chunks before the steady
   * state and the one that captures the graphs; the replays run the
   * recorded copies without calling the class */
  g_assert_cmpuint (lb_solo_collectives_get_moved (group), ==,
      (steady + 1) * per_chunk);
  g_print ("# solo rank 0 of 2: %d chunks (steady from %d, graphs "
      "replayed), %" G_GUINT64_FORMAT " bytes stood in per chunk, outputs "
      "finite\n", n_chunks, steady, per_chunk);
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
}

/* The RoPE formula path on a device rank (lingbot_dit_rope_chunk(): the
 * host computes the chunk's temporal angles into page-locked staging,
 * one upload, a device copy into the chunk's tables), forced for every
 * chunk: the same bytes as the CPU's table path, with graph replay, and
 * per chunk exactly one more host-to-device copy than the table path, no
 * allocation and no synchronisation (fakedev refuses both inside the
 * captured passes; the counts below are per chunk). */
static void
test_rope_formula_device (void)
{
  const int n_chunks = 9;
  int steady_cpu, steady_tab, steady_for;
  g_autoptr (GByteArray) cpu = run_plain (lb_cpu_backend (), n_chunks, FALSE,
      &steady_cpu);
  const FakeDevStats st0 = fakedev_stats ();
  g_autoptr (GByteArray) tab = run_plain (fakedev_backend (), n_chunks, FALSE,
      &steady_tab);
  const FakeDevStats st1 = fakedev_stats ();
  g_autoptr (GByteArray) form = run_plain (fakedev_backend (), n_chunks, TRUE,
      &steady_for);
  const FakeDevStats st2 = fakedev_stats ();
  g_assert_cmpint (st2.bad, ==, 0);
  g_assert_cmpint (st2.live_blocks, ==, st0.live_blocks);
  g_assert_cmpint (steady_for, ==, steady_tab);
  /* the same graphs, captured and replayed alike */
  g_assert_cmpint (st2.n_captures - st1.n_captures, ==,
      st1.n_captures - st0.n_captures);
  g_assert_cmpint (st2.n_launches - st1.n_launches, ==,
      st1.n_launches - st0.n_launches);
  g_assert_cmpint (st2.n_launches - st1.n_launches, >, 0);
  g_assert_cmpint ((st2.n_h2d - st1.n_h2d) - (st1.n_h2d - st0.n_h2d), ==,
      n_chunks);
  g_assert_cmpuint (cpu->len, ==, form->len);
  g_assert_true (memcmp (cpu->data, form->data, cpu->len) == 0);
  g_assert_true (memcmp (tab->data, form->data, cpu->len) == 0);
}

/* Cancellation on a device rank with graph replay: chunks 4 (steady,
 * replayed from graphs) and 6 are cancelled from the pass callback, after
 * pass 1 and after the clean pass, and made again after a reset; the
 * stream equals the uncancelled CPU stream bit for bit (the retried chunk
 * starts from the repeat-call cursors of spec 3.3 and runs op by op, the
 * next one replays the graphs again). */
typedef struct
{
  GCancellable *cancellable;
  int64_t chunk;
  int at;
  int calls;
} CancelAt;

static void
cancel_pass (LingbotDitSession * ses, int64_t chunk, int pass, int n_passes,
    gpointer user_data)
{
  CancelAt *c = user_data;
  (void) ses;
  g_assert_cmpint (n_passes, ==, 5);
  c->calls++;
  if (chunk == c->chunk && pass == c->at)
    g_cancellable_cancel (c->cancellable);
}

static void
test_cancel_device (void)
{
  const int n_chunks = 9;
  int steady;
  g_autoptr (GByteArray) cpu = run_plain (lb_cpu_backend (), n_chunks, FALSE,
      &steady);
  g_autoptr (GError) err = NULL;
  LbWorkerGroupOptions go = { 0, NULL, "dit-cancel-test" };
  LbWorkerGroup *group = lb_worker_group_new (fakedev_backend (), 1, NULL,
      &go, &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  g_autoptr (GCancellable) cancellable = g_cancellable_new ();
  CancelAt ca = { cancellable, -1, -1, 0 };
  lingbot_dit_session_set_cancellable (ses, cancellable);
  lingbot_dit_session_set_pass_callback (ses, cancel_pass, &ca);
  const FakeDevStats st0 = fakedev_stats ();
  GByteArray *bytes = g_byte_array_new ();
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  for (int c = 0; c < n_chunks; c++) {
    const LbTensor *noise[4], *y, *ctl;
    dit_fixture_chunk (fixture, c % 4, noise, &y, &ctl);
    if (c == 4 || c == 6) {
      ca.chunk = c;
      ca.at = c == 4 ? 1 : 4;
      ca.calls = 0;
      g_assert_false (lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
              &err));
      g_assert_error (err, LB_ERROR, LB_ERROR_CANCELLED);
      g_autofree char *want = g_strdup_printf ("chunk %d cancelled after %d "
          "of 5 DiT passes", c, ca.at + 1);
      g_assert_cmpstr (err->message, ==, want);
      g_clear_error (&err);
      g_assert_cmpint (ca.calls, ==, ca.at + 1);
      g_assert_cmpint (lingbot_dit_session_get_chunk_index (ses), ==, c);
      g_cancellable_reset (cancellable);
      ca.chunk = -1;
    }
    ca.calls = 0;
    gboolean ok = lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
        &err);
    g_assert_no_error (err);
    g_assert_true (ok);
    g_assert_cmpint (ca.calls, ==, 5);
    g_byte_array_append (bytes, out->data, (guint) lb_tensor_nbytes (out));
  }
  const FakeDevStats st = fakedev_stats ();
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
  g_assert_cmpint (st.bad, ==, 0);
  /* graphs captured once and replayed (the pass callback keeps them on) */
  g_assert_cmpint (st.n_captures - st0.n_captures, ==, 5);
  g_assert_cmpint (st.n_launches - st0.n_launches, >, 0);
  g_assert_cmpuint (bytes->len, ==, cpu->len);
  g_assert_true (memcmp (bytes->data, cpu->data, cpu->len) == 0);
  g_byte_array_unref (bytes);
}

/* ------------------------------------------------------------------------ */
/* the control tensor built on the ranks (run_chunk_poses, ray_map op)      */
/* ------------------------------------------------------------------------ */

/* Host-to-device bytes through fakedev's copy (the test swaps the backend's
 * copy for this counting wrapper while a stream runs). */
static GMutex h2d_lock;
static guint64 h2d_bytes;
static gboolean (*fake_copy_real) (LbStream * s, void *dst, const void *src,
    gsize nbytes, LbCopyKind kind, GError ** error);

static gboolean
counting_copy (LbStream * s, void *dst, const void *src, gsize nbytes,
    LbCopyKind kind, GError ** error)
{
  if (kind == LB_COPY_HOST_TO_DEVICE) {
    g_mutex_lock (&h2d_lock);
    h2d_bytes += nbytes;
    g_mutex_unlock (&h2d_lock);
  }
  return fake_copy_real (s, dst, src, nbytes, kind, error);
}

/* Chunk @c's relative poses: random rigid motions (seeded by @c, so every
 * run sees the same), translations up to +-2. */
static void
chunk_poses (int c, float *rel)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (0x5eed + (guint32) c);
  for (int n = 0; n < 4; n++) {
    float *p = rel + 16 * n;
    double a = g_rand_double_range (r, -0.6, 0.6),
        b = g_rand_double_range (r, -0.6, 0.6);
    /* yaw a then pitch b: R = Ry(a) Rx(b) */
    const double R[9] = {
      cos (a), sin (a) * sin (b), sin (a) * cos (b),
      0.0, cos (b), -sin (b),
      -sin (a), cos (a) * sin (b), cos (a) * cos (b),
    };
    for (int i = 0; i < 3; i++) {
      for (int j = 0; j < 3; j++)
        p[i * 4 + j] = (float) R[i * 3 + j];
      p[i * 4 + 3] = (float) g_rand_double_range (r, -2.0, 2.0);
    }
    p[12] = p[13] = p[14] = 0.0f;
    p[15] = 1.0f;
  }
}

/* @n_chunks chunks of the dit_tiny inputs with poses of chunk_poses(): the
 * control tensor packed on the host (lingbot_control_pack, run_chunk) or
 * built on the ranks (run_chunk_poses).  With @callback every pass is
 * recorded (no graphs); without, a 1-rank session replays graphs once the
 * window is full. */
static GByteArray *
run_control_stream (LbBackend * be, int n_ranks, int n_chunks,
    gboolean callback, gboolean on_device)
{
  g_autoptr (GError) err = NULL;
  LbWorkerGroupOptions go = { 0, NULL, "dit-raymap-test" };
  LbWorkerGroup *group = lb_worker_group_new (be, n_ranks, NULL, &go, &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  Record rec = { g_byte_array_new (), 0 };
  if (callback)
    lingbot_dit_session_set_step_callback (ses, on_step, &rec);
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  g_autoptr (LbTensor) ctl = lb_tensor_new_f32 (5, (int64_t) 1,
      (int64_t) 384, (int64_t) 4, (int64_t) 6, (int64_t) 10);
  g_autoptr (LbTensor) poses = lb_tensor_new_f32 (2, (int64_t) 4, (int64_t) 16);
  /* calibration intrinsics at 832x480 brought to the 80x48 output */
  const float k0[4] = { 502.1f, 498.7f, 416.3f, 239.9f };
  float k[4];
  lingbot_control_intrinsics_transform (k0, 832, 480, 80, 48, k);
  for (int c = 0; c < n_chunks; c++) {
    const LbTensor *noise[4];
    const int f = c % 4;
    const LbTensor *y;
    dit_fixture_chunk (fixture, f, noise, &y, NULL);
    chunk_poses (c, poses->data);
    if (on_device) {
      g_assert_true (lingbot_dit_session_run_chunk_poses (ses, y, poses, k,
              80, 48, noise, out, &err));
    } else {
      g_assert_true (lingbot_control_pack (poses->data, 4, k, 80, 48, 0, 6,
              ctl->data, &err));
      g_assert_true (lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
              &err));
    }
    g_assert_no_error (err);
    g_byte_array_append (rec.bytes, out->data, (guint) lb_tensor_nbytes (out));
  }
  if (callback)
    g_assert_cmpint (rec.n_steps, ==, 5 * n_chunks);
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
  return rec.bytes;
}

static void
test_control_on_device (gconstpointer data)
{
  const int n_ranks = GPOINTER_TO_INT (data);
  /* 1 rank: 9 chunks without a callback (graph replay from the first
   * steady chunk); more: 4 chunks with every pass recorded */
  const gboolean callback = n_ranks > 1;
  const int n_chunks = callback ? 4 : 9;
  LbBackend *fd = fakedev_backend ();
  g_autoptr (GByteArray) cpu = run_control_stream (lb_cpu_backend (),
      n_ranks, n_chunks, callback, FALSE);
  g_autoptr (GByteArray) cpu_poses = run_control_stream (lb_cpu_backend (),
      n_ranks, n_chunks, callback, TRUE);

  const FakeDevStats st0 = fakedev_stats ();
  fake_copy_real = fd->copy;
  fd->copy = counting_copy;
  h2d_bytes = 0;
  g_autoptr (GByteArray) host = run_control_stream (fd, n_ranks, n_chunks,
      callback, FALSE);
  const guint64 host_bytes = h2d_bytes;
  const FakeDevStats st1 = fakedev_stats ();
  h2d_bytes = 0;
  g_autoptr (GByteArray) dev = run_control_stream (fd, n_ranks, n_chunks,
      callback, TRUE);
  const guint64 dev_bytes = h2d_bytes;
  const FakeDevStats st2 = fakedev_stats ();
  fd->copy = fake_copy_real;

  g_assert_cmpint (st2.bad, ==, 0);
  g_assert_cmpint (st2.live_blocks, ==, st0.live_blocks);
  if (!callback) {
    /* both fakedev runs replayed their passes from graphs */
    g_assert_cmpint (st1.n_launches - st0.n_launches, >, 0);
    g_assert_cmpint (st2.n_launches - st1.n_launches, ==,
        st1.n_launches - st0.n_launches);
  }
  /* the same H2D copies in number (poses in place of the control tensor),
   * fewer bytes by exactly (control - poses) per rank and chunk */
  g_assert_cmpint (st2.n_h2d - st1.n_h2d, ==, st1.n_h2d - st0.n_h2d);
  const guint64 saved = (guint64) n_ranks * n_chunks *
      (384 * 4 * 6 * 10 - 4 * 16) * sizeof (float);
  g_assert_cmpuint (host_bytes - dev_bytes, ==, saved);
  g_assert_cmpuint (dev_bytes, <, host_bytes);

  g_assert_cmpuint (cpu->len, ==, dev->len);
  g_assert_true (memcmp (cpu->data, cpu_poses->data, cpu->len) == 0);
  g_assert_true (memcmp (cpu->data, host->data, cpu->len) == 0);
  g_assert_true (memcmp (cpu->data, dev->data, cpu->len) == 0);
  g_print ("# ray map on the ranks, %d rank(s), %d chunks: bit-identical to "
      "the host control over %u bytes; H2D %" G_GUINT64_FORMAT " -> %"
      G_GUINT64_FORMAT " bytes\n", n_ranks, n_chunks, cpu->len, host_bytes,
      dev_bytes);
}

/* run_chunk_poses's own argument errors, before any rank runs. */
static void
test_control_on_device_errors (void)
{
  g_autoptr (GError) err = NULL;
  LbWorkerGroupOptions go = { 0, NULL, "dit-raymap-errors" };
  LbWorkerGroup *group = lb_worker_group_new (fakedev_backend (), 1, NULL,
      &go, &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  const LbTensor *noise[4];
  for (int st = 0; st < 4; st++)
    noise[st] = dit_fixture_get (fixture, st ? "output.chunk0.step0.renoise"
        : "output.chunk0.step0.x_in");
  const LbTensor *y = dit_fixture_get (fixture, "input.chunk0.y");
  g_autoptr (LbTensor) p3 = lb_tensor_new_f32 (2, (int64_t) 3, (int64_t) 16);
  g_autoptr (LbTensor) p4 = lb_tensor_new_f32 (3, (int64_t) 4, (int64_t) 4,
      (int64_t) 4);
  chunk_poses (0, p4->data);
  const float k[4] = { 80.f, 80.f, 40.f, 24.f };
  g_assert_false (lingbot_dit_session_run_chunk_poses (ses, y, p3, k, 80, 48,
          noise, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpstr (err->message, ==, "DiT chunk: rel_poses is f32 [3, 16], "
      "expected contiguous f32 [4, 16]");
  g_clear_error (&err);
  g_assert_false (lingbot_dit_session_run_chunk_poses (ses, y, p4, k, 80, 40,
          noise, NULL, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, "DiT chunk: output size 80x40 is not "
      "the latent grid's 80x48");
  g_clear_error (&err);
  g_assert_cmpint (lingbot_dit_session_get_chunk_index (ses), ==, 0);
  /* [4, 4, 4] poses are fine */
  g_assert_true (lingbot_dit_session_run_chunk_poses (ses, y, p4, k, 80, 48,
          noise, NULL, &err));
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_dit_session_get_chunk_index (ses), ==, 1);
  g_assert_cmpint (fakedev_stats ().bad, ==, 0);
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
}

/* Compute/communication overlap (lingbot_dit_ulysses_send() and
 * lingbot_dit_ulysses_attention_out()): forced on with the local
 * collectives (LINGBOT_COMM_OVERLAP=1), the reordered q/k/v path with its
 * per-tensor exchanges, the attention in head groups with one output
 * exchange per group, and their event waits must give the CPU's bytes.
 * Every layer of every pass waits per rank 4 times for q/k/v (3 sends
 * after their packing, the compute stream after the exchanges), plus,
 * with G > 1 head groups (data: "ranks:groups"; G is lowered to a divisor
 * of the local heads), G sends after their group's attention and one join
 * after the last. */
static void
test_overlap (gconstpointer data)
{
  const char *spec = data;
  const int n_ranks = spec[0] - '0', groups = spec[2] - '0';
  const int heads_local = lingbot_dit_get_config (dit)->num_heads / n_ranks;
  int g_eff = groups;
  while (g_eff > 1 && heads_local % g_eff != 0)
    g_eff--;
  g_autoptr (GByteArray) cpu = run_stream (lb_cpu_backend (), n_ranks);
  g_setenv ("LINGBOT_COMM_OVERLAP", "1", TRUE);
  g_autofree char *gs = g_strdup_printf ("%d", groups);
  g_setenv ("LINGBOT_COMM_OUT_GROUPS", gs, TRUE);
  const FakeDevStats st0 = fakedev_stats ();
  g_autoptr (GByteArray) dev = run_stream (fakedev_backend (), n_ranks);
  const FakeDevStats st = fakedev_stats ();
  g_unsetenv ("LINGBOT_COMM_OVERLAP");
  g_unsetenv ("LINGBOT_COMM_OUT_GROUPS");
  const int L = lingbot_dit_get_config (dit)->num_layers;
  const int per_layer = 4 + (g_eff > 1 ? g_eff + 1 : 0);
  g_assert_cmpint (st.bad, ==, 0);
  g_assert_cmpint (st.n_waits - st0.n_waits, ==,
      per_layer * L * 5 * 4 * n_ranks);
  g_assert_cmpint (st.live_blocks, ==, st0.live_blocks);
  g_assert_cmpuint (cpu->len, ==, dev->len);
  g_assert_true (memcmp (cpu->data, dev->data, cpu->len) == 0);
  g_print ("# overlap, %d ranks, %d output head groups: %d event waits, "
      "bit-identical to the CPU over %u bytes\n", n_ranks, g_eff,
      st.n_waits - st0.n_waits, cpu->len);
}

/* A malformed LINGBOT_COMM_OUT_GROUPS fails the session's creation with
 * a message naming the variable. */
static void
test_overlap_bad_groups (void)
{
  g_autoptr (GError) err = NULL;
  LbWorkerGroupOptions go = { 0, NULL, "dit-device-test" };
  LbWorkerGroup *group = lb_worker_group_new (fakedev_backend (), 2, NULL,
      &go, &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  g_setenv ("LINGBOT_COMM_OVERLAP", "1", TRUE);
  g_setenv ("LINGBOT_COMM_OUT_GROUPS", "two", TRUE);
  g_assert_null (lingbot_dit_session_new (dit, group, &opt,
          dit_fixture_get (fixture, "input.context"), &err));
  lb_worker_group_unref (group);
  g_unsetenv ("LINGBOT_COMM_OVERLAP");
  g_unsetenv ("LINGBOT_COMM_OUT_GROUPS");
  g_assert_nonnull (err);
  g_assert_true (g_str_has_suffix (err->message,
          "LINGBOT_COMM_OUT_GROUPS: 'two' is not a positive integer"));
}

/* ------------------------------------------------------------------------ */
/* multi-rank start-up: staged transfers, no allocation per chunk           */
/* ------------------------------------------------------------------------ */

/* Two ranks, three chunks (the control built on the ranks, then packed on
 * the host): every upload of a chunk's inputs and the download of its x0
 * go through page-locked staging (fakedev's host_alloc blocks), no device
 * or page-locked allocation is made once the session exists (so none
 * while the first chunk's collectives may be in flight), and the outputs
 * are the CPU backend's, bit for bit. */
static void
test_startup_staging (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (GByteArray) cpu = run_control_stream (lb_cpu_backend (), 2, 3,
      FALSE, TRUE);
  LbWorkerGroupOptions go = { 0, NULL, "dit-startup-test" };
  LbWorkerGroup *group = lb_worker_group_new (fakedev_backend (), 2, NULL, &go,
      &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  g_autoptr (LbTensor) ctl = lb_tensor_new_f32 (5, (int64_t) 1,
      (int64_t) 384, (int64_t) 4, (int64_t) 6, (int64_t) 10);
  g_autoptr (LbTensor) poses = lb_tensor_new_f32 (2, (int64_t) 4, (int64_t) 16);
  g_autoptr (GByteArray) dev = g_byte_array_new ();
  const float k0[4] = { 502.1f, 498.7f, 416.3f, 239.9f };
  float k[4];
  lingbot_control_intrinsics_transform (k0, 832, 480, 80, 48, k);
  for (int c = 0; c < 4; c++) {
    const LbTensor *noise[4], *y;
    dit_fixture_chunk (fixture, c % 4, noise, &y, NULL);
    chunk_poses (c, poses->data);
    const FakeDevStats a = fakedev_stats ();
    gboolean ok;
    if (c < 3) {
      ok = lingbot_dit_session_run_chunk_poses (ses, y, poses, k, 80, 48,
          noise, out, &err);
    } else {
      g_assert_true (lingbot_control_pack (poses->data, 4, k, 80, 48, 0, 6,
              ctl->data, &err));
      ok = lingbot_dit_session_run_chunk (ses, y, ctl, noise, out, &err);
    }
    g_assert_no_error (err);
    g_assert_true (ok);
    const FakeDevStats b = fakedev_stats ();
    if (c < 3)
      g_byte_array_append (dev, out->data, (guint) lb_tensor_nbytes (out));
    /* per rank y, the poses or control, 4 noise draws; rank 0's x0 */
    g_assert_cmpint (b.n_h2d - a.n_h2d, ==, 2 * 6);
    g_assert_cmpint (b.n_h2d_pinned - a.n_h2d_pinned, ==, 2 * 6);
    g_assert_cmpint (b.n_d2h - a.n_d2h, ==, 1);
    g_assert_cmpint (b.n_d2h_pinned - a.n_d2h_pinned, ==, 1);
    g_assert_cmpint (b.n_allocs, ==, a.n_allocs);
    g_assert_cmpint (b.host_blocks, ==, a.host_blocks);
  }
  g_assert_cmpmem (cpu->data, cpu->len, dev->data, dev->len);
  g_assert_cmpint (fakedev_stats ().bad, ==, 0);
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
}

/* Issue 3.2 item 4: each device rank reserves its ops' per-call scratch
 * right after lingbot_dit_rank_init() (lingbot_dit_rank_reserve():
 * lb_stream_reserve(), before the ranks' first collective): once per rank
 * at session creation, with the GEMM paths' two blocks and 1 MiB (the
 * fixture's head dim takes no cuDNN attention, so no attention scratch
 * and no workspace); none again during the chunks, which allocate
 * nothing. */
static void
test_stream_reserve (void)
{
  g_autoptr (GError) err = NULL;
  LbWorkerGroupOptions go = { 0, NULL, "dit-reserve-test" };
  LbWorkerGroup *group = lb_worker_group_new (fakedev_backend (), 2, NULL, &go,
      &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  const FakeDevStats a = fakedev_stats ();
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  const FakeDevStats b = fakedev_stats ();
  g_assert_cmpint (b.n_reserves - a.n_reserves, ==, 2);
  g_assert_cmpuint (b.reserve_scratch, ==,
      2 * LB_STREAM_SCRATCH_BLOCK + ((gsize) 1 << 20));
  g_assert_cmpuint (b.reserve_workspace, ==, a.reserve_workspace);
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  g_autoptr (LbTensor) poses = lb_tensor_new_f32 (2, (int64_t) 4, (int64_t) 16);
  const float k0[4] = { 502.1f, 498.7f, 416.3f, 239.9f };
  float k[4];
  lingbot_control_intrinsics_transform (k0, 832, 480, 80, 48, k);
  for (int c = 0; c < 2; c++) {
    const LbTensor *noise[4], *y;
    dit_fixture_chunk (fixture, c, noise, &y, NULL);
    chunk_poses (c, poses->data);
    g_assert_true (lingbot_dit_session_run_chunk_poses (ses, y, poses, k, 80,
            48, noise, out, &err));
    g_assert_no_error (err);
  }
  const FakeDevStats c = fakedev_stats ();
  g_assert_cmpint (c.n_reserves, ==, b.n_reserves);
  g_assert_cmpint (c.n_allocs, ==, b.n_allocs);
  g_assert_cmpint (c.bad, ==, a.bad);
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
}

/* Issue 3.2 item 4: every attention call of a session's chunks is readied
 * (lb_attention_prepare(); on CUDA the cuDNN SDPA plan built and its
 * workspace grown) when the session starts, before the ranks' first
 * collective: fakedev counts the calls whose device, shape, dtypes and
 * strides no prepare saw.  The windows grow 60, 120, 150 tokens (4
 * frames of 15 tokens a chunk, a 150-slot cache) and stay at 150 with
 * eviction; with a 90-token span they are 60 and 90.  Data:
 * "ranks:groups:math" (groups > 1: overlap with output head groups; math
 * b = LB_MATH_BF16: a bf16 KV cache, read by the attention in place).
 * Each rank prepares its cross-attention and, per window end, its
 * self-attention call (one per head group). */
static void
test_attention_prepared (gconstpointer data)
{
  const char *spec = data;
  const int n_ranks = spec[0] - '0', groups = spec[2] - '0';
  const gboolean bf16 = spec[4] == 'b';
  g_autoptr (GError) err = NULL;
  if (groups > 1) {
    g_setenv ("LINGBOT_COMM_OVERLAP", "1", TRUE);
    g_autofree char *gs = g_strdup_printf ("%d", groups);
    g_setenv ("LINGBOT_COMM_OUT_GROUPS", gs, TRUE);
  }
  for (int span = 0; span < 2; span++) {
    LbWorkerGroupOptions go = { 0, NULL, "dit-prepare-test" };
    LbWorkerGroup *group = lb_worker_group_new (fakedev_backend (), n_ranks,
        NULL, &go, &err);
    g_assert_no_error (err);
    LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
    opt.latent_h = 6;
    opt.latent_w = 10;
    opt.math = bf16 ? LB_MATH_BF16 : LB_MATH_FP32;
    opt.max_attention_size = span ? 90 : 0;
    const FakeDevStats a = fakedev_stats ();
    LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
        dit_fixture_get (fixture, "input.context"), &err);
    g_assert_no_error (err);
    const FakeDevStats b = fakedev_stats ();
    g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1,
        (int64_t) 16, (int64_t) 4, (int64_t) 6, (int64_t) 10);
    for (int c = 0; c < 4; c++) {
      const LbTensor *noise[4], *y, *ctl;
      dit_fixture_chunk (fixture, c, noise, &y, &ctl);
      g_assert_true (lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
              &err));
      g_assert_no_error (err);
    }
    const FakeDevStats c = fakedev_stats ();
    /* three window ends (60, 120, 150), self-attention calls per end: one,
     * or one per head group with the output overlap */
    const int heads_local = lingbot_dit_get_config (dit)->num_heads / n_ranks;
    int g_eff = groups;
    while (g_eff > 1 && heads_local % g_eff != 0)
      g_eff--;
    /* the cross-attention on each rank with tokens: 3 patch rows, one
     * band of rows per rank, so a fourth rank has none */
    g_assert_cmpint (b.n_attention_prepares - a.n_attention_prepares, ==,
        MIN (n_ranks, 3) + n_ranks * 3 * g_eff);
    g_assert_cmpint (c.n_attention_prepares, ==, b.n_attention_prepares);
    g_assert_cmpint (c.n_attention_unprepared - b.n_attention_unprepared, ==,
        0);
    g_assert_cmpint (c.n_allocs, ==, b.n_allocs);
    g_assert_cmpint (c.bad, ==, a.bad);
    g_print ("# %d rank(s), %d head group(s), %s, span %s: %d attention "
        "calls readied at session start, 0 made unreadied\n", n_ranks, g_eff,
        bf16 ? "bf16" : "fp32", span ? "90" : "the cache",
        b.n_attention_prepares - a.n_attention_prepares);
    lingbot_dit_session_free (ses);
    lb_worker_group_unref (group);
  }
  g_unsetenv ("LINGBOT_COMM_OVERLAP");
  g_unsetenv ("LINGBOT_COMM_OUT_GROUPS");
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

  g_test_add_func ("/dit/device/copy-rows", test_copy_rows);
  g_test_add_func ("/dit/device/weights", test_weights);
  g_test_add_func ("/dit/device/graph-replay", test_graph_replay);
  g_test_add_func ("/dit/device/graph-replay-span", test_graph_replay_span);
  g_test_add_func ("/dit/device/graph-capture-fails", test_graph_capture_fails);
  g_test_add_func ("/dit/device/solo", test_solo);
  g_test_add_func ("/dit/device/rope-formula", test_rope_formula_device);
  g_test_add_func ("/dit/device/cancel", test_cancel_device);
  g_test_add_func ("/dit/device/startup-staging", test_startup_staging);
  g_test_add_func ("/dit/device/stream-reserve", test_stream_reserve);
  g_test_add_data_func ("/dit/device/attention-prepared/1", "1:1:f",
      test_attention_prepared);
  g_test_add_data_func ("/dit/device/attention-prepared/1-bf16", "1:1:b",
      test_attention_prepared);
  g_test_add_data_func ("/dit/device/attention-prepared/2-bf16", "2:1:b",
      test_attention_prepared);
  g_test_add_data_func ("/dit/device/attention-prepared/2-groups", "2:2:b",
      test_attention_prepared);
  g_test_add_data_func ("/dit/device/attention-prepared/4", "4:1:f",
      test_attention_prepared);
  g_test_add_data_func ("/dit/device/stream/1", GINT_TO_POINTER (1),
      test_stream_bit_identical);
  g_test_add_data_func ("/dit/device/stream/2", GINT_TO_POINTER (2),
      test_stream_bit_identical);
  g_test_add_data_func ("/dit/device/stream/4", GINT_TO_POINTER (4),
      test_stream_bit_identical);
  g_test_add_data_func ("/dit/device/overlap/2", "2:1", test_overlap);
  g_test_add_data_func ("/dit/device/overlap/2-groups", "2:2", test_overlap);
  g_test_add_data_func ("/dit/device/overlap/2-groups-lowered", "2:3",
      test_overlap);
  g_test_add_data_func ("/dit/device/overlap/4", "4:2", test_overlap);
  g_test_add_func ("/dit/device/overlap/bad-groups", test_overlap_bad_groups);
  g_test_add_data_func ("/dit/device/control-on-device/1",
      GINT_TO_POINTER (1), test_control_on_device);
  g_test_add_data_func ("/dit/device/control-on-device/2",
      GINT_TO_POINTER (2), test_control_on_device);
  g_test_add_func ("/dit/device/control-on-device/errors",
      test_control_on_device_errors);
  int rc = g_test_run ();
  lingbot_dit_unref (dit);
  lingbot_checkpoint_unref (fixture);
  return rc;
}

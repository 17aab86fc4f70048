/* lingbot-gst: the DiT on CUDA ranks against the golden fixture
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Suite "gpu" (tests/gpu/run.sh runs it); exits 77 (skip) without a CUDA
 * device.  The dit_tiny stream (4 chunks x 4 + 1 passes, eviction from
 * chunk 2) on CUDA ranks: every pass's x_in / pred / x0, every denoised
 * chunk and every KV cache within the golden tolerance, and the whole
 * record compared with the CPU backend's (printed: the CUDA kernels round
 * differently, so it is not bit-identical; the sampler's x0 is the same
 * float32 op path on both).
 *   - 1, 2, 4 ranks on device 0 with the local collectives (device copies);
 *   - 2 and 4 ranks on distinct devices with NCCL, when there are enough;
 *   - 9 chunks with graph replay of the steady chunks, bit-identical to the
 *     same run op by op (LINGBOT_DIT_GRAPHS=0), on 1 rank and 2 NCCL ranks;
 *   - the served precision (LB_MATH_BF16) within 3e-2 of the CPU's f32;
 *   - compute/communication overlap on 2 NCCL ranks, bit-identical to the
 *     exchanges on the compute stream.
 * The device code paths themselves are checked without a GPU, bit for bit,
 * by tests/dit/test-dit-device.c.
 */
#include <stdio.h>
#include <string.h>

#include "dit-test-util.h"
#include "comm/comm-private.h"
#include "comm/worker-group.h"
#include "lingbot/backend.h"
#include "lingbot/dit-session.h"

static LingbotCheckpoint *fixture;
static LingbotDit *dit;
static LbBackend *cuda;

typedef struct
{
  GArray *vals;                 /* float: everything the session showed */
  double worst;                 /* max golden rel error */
  int n_steps;
} Record;

static void
check (Record * rec, const LbTensor * t, const char *name)
{
  g_assert_cmpint (t->device.type, ==, LB_DEVICE_CPU);
  g_array_append_vals (rec->vals, t->data, (guint) lb_tensor_numel (t));
  const LbTensor *g = dit_fixture_get (fixture, name);
  double e = dit_rel_error (t->data, g, lb_tensor_numel (g));
  rec->worst = MAX (rec->worst, e);
  if (!(e <= DIT_GOLDEN_TOL))
    g_error ("%s: max relative error %.3g > %.1g", name, e, DIT_GOLDEN_TOL);
}

static void
on_step (LingbotDitSession * ses, int64_t chunk, int step,
    const LbTensor * x_in, const LbTensor * pred, const LbTensor * x0,
    gpointer user_data)
{
  (void) ses;
  Record *rec = user_data;
  char name[96];
  if (step < 4) {
    g_snprintf (name, sizeof name, "output.chunk%d.step%d.x_in", (int) chunk,
        step);
    check (rec, x_in, name);
    g_snprintf (name, sizeof name, "output.chunk%d.step%d.pred", (int) chunk,
        step);
    check (rec, pred, name);
    g_snprintf (name, sizeof name, "output.chunk%d.step%d.x0", (int) chunk,
        step);
    check (rec, x0, name);
  } else {
    g_snprintf (name, sizeof name, "output.chunk%d.refresh.x_in", (int) chunk);
    check (rec, x_in, name);
    g_snprintf (name, sizeof name, "output.chunk%d.refresh.pred", (int) chunk);
    check (rec, pred, name);
  }
  rec->n_steps++;
}

static GArray *
run_stream (LbBackend * be, int n_ranks, const int *ordinals,
    const LbCollectivesClass * klass, double *worst)
{
  g_autoptr (GError) err = NULL;
  const LingbotDitConfig *cfg = lingbot_dit_get_config (dit);
  LbWorkerGroupOptions go = { 0, klass, "dit-cuda-test" };
  LbWorkerGroup *group = lb_worker_group_new (be, n_ranks, ordinals, &go,
      &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  Record rec = { g_array_new (FALSE, FALSE, sizeof (float)), 0, 0 };
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
    g_snprintf (name, sizeof name, "output.chunk%d.denoised", c);
    check (&rec, out, name);
    for (int l = 0; l < cfg->num_layers; l++) {
      g_assert_true (lingbot_dit_session_get_kv_cache (ses, l, k, v, &err));
      g_assert_no_error (err);
      g_snprintf (name, sizeof name,
          "output.chunk%d.kv_after_refresh.layer%d.k", c, l);
      check (&rec, k, name);
      g_snprintf (name, sizeof name,
          "output.chunk%d.kv_after_refresh.layer%d.v", c, l);
      check (&rec, v, name);
    }
  }
  g_assert_cmpint (rec.n_steps, ==, 20);
  int64_t ge, le;
  lingbot_dit_session_get_cursors (ses, &ge, &le);
  g_assert_cmpint (ge, ==, 240);
  g_assert_cmpint (le, ==, 150);
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
  *worst = rec.worst;
  return rec.vals;
}

typedef struct
{
  int n_ranks;
  gboolean nccl;
} Case;

static void
test_stream (gconstpointer data)
{
  const Case *c = data;
  int ordinals[8];
  for (int r = 0; r < c->n_ranks; r++)
    ordinals[r] = c->nccl ? r : 0;
  if (c->nccl && cuda->device_count < c->n_ranks) {
    g_test_skip ("not enough CUDA devices for NCCL ranks");
    return;
  }
  double wc, wg;
  g_autoptr (GArray) ref = run_stream (lb_cpu_backend (), c->n_ranks, NULL,
      NULL, &wc);
  gint64 t0 = g_get_monotonic_time ();
  g_autoptr (GArray) got = run_stream (cuda, c->n_ranks, ordinals,
      c->nccl ? NULL : lb_local_collectives (), &wg);
  double secs = (g_get_monotonic_time () - t0) / 1e6;
  g_assert_cmpuint (ref->len, ==, got->len);
  double maxd = 0, maxr = 0;
  for (guint i = 0; i < ref->len; i++) {
    float a = g_array_index (ref, float, i), b = g_array_index (got, float, i);
    g_assert_true (isfinite (b));
    maxd = MAX (maxd, fabs ((double) a - b));
    maxr = MAX (maxr, fabs ((double) a));
  }
  printf ("# dit cuda, %d rank(s), %s: golden max rel err %.3g (cpu %.3g); "
      "max |cuda - cpu| / max |cpu| = %.3g over %u values; %.2f s\n",
      c->n_ranks, c->nccl ? "nccl" : "one device, local collectives", wg, wc,
      maxd / maxr, ref->len, secs);
  g_assert_cmpfloat (maxd / maxr, <=, DIT_GOLDEN_TOL);
}

/* 9 chunks without a step callback (so steady chunks replay graphs unless
 * LINGBOT_DIT_GRAPHS=0), fixture inputs reused cyclically: every output. */
static GArray *
run_plain (LbBackend * be, int n_ranks, const int *ordinals,
    const LbCollectivesClass * klass, LbMathMode math)
{
  g_autoptr (GError) err = NULL;
  LbWorkerGroupOptions go = { 0, klass, "dit-cuda-plain" };
  LbWorkerGroup *group = lb_worker_group_new (be, n_ranks, ordinals, &go,
      &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  opt.math = math;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  GArray *vals = g_array_new (FALSE, FALSE, sizeof (float));
  g_autoptr (LbTensor) out = lb_tensor_new_f32 (5, (int64_t) 1, (int64_t) 16,
      (int64_t) 4, (int64_t) 6, (int64_t) 10);
  for (int c = 0; c < 9; c++) {
    const LbTensor *noise[4];
    const int f = c % 4;
    const LbTensor *y, *ctl;
    dit_fixture_chunk (fixture, f, noise, &y, &ctl);
    g_assert_true (lingbot_dit_session_run_chunk (ses, y, ctl, noise, out,
            &err));
    g_assert_no_error (err);
    g_array_append_vals (vals, out->data, (guint) lb_tensor_numel (out));
  }
  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
  return vals;
}

static double
rel_diff (GArray * ref, GArray * got)
{
  g_assert_cmpuint (ref->len, ==, got->len);
  double maxd = 0, maxr = 0;
  for (guint i = 0; i < ref->len; i++) {
    float a = g_array_index (ref, float, i), b = g_array_index (got, float, i);
    g_assert_true (isfinite (b));
    maxd = MAX (maxd, fabs ((double) a - b));
    maxr = MAX (maxr, fabs ((double) a));
  }
  return maxd / maxr;
}

/* Graph replay of steady chunks (docs/design/cuda.md "Graphs") against
 * the same session run op by op: the same kernels with the same arguments,
 * so bit-identical; and both within the golden tolerance of the CPU. */
static void
test_graphs (gconstpointer data)
{
  const Case *c = data;
  int ordinals[8];
  for (int r = 0; r < c->n_ranks; r++)
    ordinals[r] = c->nccl ? r : 0;
  if (c->nccl && cuda->device_count < c->n_ranks) {
    g_test_skip ("not enough CUDA devices for NCCL ranks");
    return;
  }
  g_autoptr (GArray) ref = run_plain (lb_cpu_backend (), c->n_ranks, NULL,
      NULL, LB_MATH_FP32);
  g_setenv ("LINGBOT_DIT_GRAPHS", "0", TRUE);
  g_autoptr (GArray) eager = run_plain (cuda, c->n_ranks, ordinals,
      c->nccl ? NULL : lb_local_collectives (), LB_MATH_FP32);
  g_unsetenv ("LINGBOT_DIT_GRAPHS");
  gint64 t0 = g_get_monotonic_time ();
  g_autoptr (GArray) graphs = run_plain (cuda, c->n_ranks, ordinals,
      c->nccl ? NULL : lb_local_collectives (), LB_MATH_FP32);
  double secs = (g_get_monotonic_time () - t0) / 1e6;
  const double d = rel_diff (ref, graphs);
  printf ("# dit cuda graphs, %d rank(s), %s: max |graphs - cpu| / max |cpu| "
      "= %.3g, graphs vs eager %s; %.2f s for 9 chunks\n", c->n_ranks,
      c->nccl ? "nccl" : "local", d,
      memcmp (eager->data, graphs->data, eager->len * sizeof (float)) ?
      "DIFFER" : "bit-identical", secs);
  g_assert_cmpfloat (d, <=, DIT_GOLDEN_TOL);
  g_assert_true (memcmp (eager->data, graphs->data,
          eager->len * sizeof (float)) == 0);
}

/* The served precision (LB_MATH_BF16: bf16 GEMM weights and inputs, bf16
 * attention) against the CPU's f32: within 3e-2 relative (the emulated
 * device measured 8.9e-3 for the bf16 GEMMs alone,
 * tests/dit/test-dit-precision.c). */
static void
test_bf16 (gconstpointer data)
{
  const Case *c = data;
  int ordinals[8];
  for (int r = 0; r < c->n_ranks; r++)
    ordinals[r] = c->nccl ? r : 0;
  if (c->nccl && cuda->device_count < c->n_ranks) {
    g_test_skip ("not enough CUDA devices for NCCL ranks");
    return;
  }
  g_autoptr (GArray) ref = run_plain (lb_cpu_backend (), c->n_ranks, NULL,
      NULL, LB_MATH_FP32);
  g_autoptr (GArray) got = run_plain (cuda, c->n_ranks, ordinals,
      c->nccl ? NULL : lb_local_collectives (), LB_MATH_BF16);
  const double d = rel_diff (ref, got);
  printf ("# dit cuda bf16, %d rank(s), %s: max |bf16 - cpu f32| / max |cpu| "
      "= %.3g\n", c->n_ranks, c->nccl ? "nccl" : "local", d);
  g_assert_cmpfloat (d, <=, 3e-2);
  g_assert_cmpfloat (d, >, 0.0);
}

/* Compute/communication overlap on NCCL ranks (on by default there)
 * against the exchanges on the compute stream (LINGBOT_COMM_OVERLAP=0):
 * the same kernels in another order, so bit-identical. */
static void
test_overlap (void)
{
  int ordinals[2] = { 0, 1 };
  if (cuda->device_count < 2) {
    g_test_skip ("not enough CUDA devices for NCCL ranks");
    return;
  }
  g_setenv ("LINGBOT_COMM_OVERLAP", "0", TRUE);
  g_autoptr (GArray) plain = run_plain (cuda, 2, ordinals, NULL, LB_MATH_FP32);
  g_unsetenv ("LINGBOT_COMM_OVERLAP");
  gint64 t0 = g_get_monotonic_time ();
  g_autoptr (GArray) over = run_plain (cuda, 2, ordinals, NULL, LB_MATH_FP32);
  double secs = (g_get_monotonic_time () - t0) / 1e6;
  g_assert_cmpuint (plain->len, ==, over->len);
  const gboolean same = memcmp (plain->data, over->data,
      plain->len * sizeof (float)) == 0;
  printf ("# dit cuda overlap, 2 nccl ranks: %s the exchanges on the compute "
      "stream; %.2f s for 9 chunks\n", same ? "bit-identical to" :
      "DIFFERS from", secs);
  g_assert_true (same);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autoptr (GError) err = NULL;
  cuda = lingbot_backend_cuda (&err);
  if (cuda == NULL) {
    printf ("SKIP: %s\n", err->message);
    return 77;
  }
  g_autofree char *path = dit_fixture_path ();
  fixture = lingbot_checkpoint_open (path, &err);
  g_assert_no_error (err);
  dit = lingbot_dit_load_checkpoint (fixture, NULL, LINGBOT_DIT_LOAD_DEFAULT,
      &err);
  g_assert_no_error (err);

  static const Case cases[] = {
    {1, FALSE}, {2, FALSE}, {4, FALSE}, {2, TRUE}, {4, TRUE},
  };
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    char *name = g_strdup_printf ("/dit/cuda/stream/%s%d",
        cases[i].nccl ? "nccl" : "local", cases[i].n_ranks);
    g_test_add_data_func (name, &cases[i], test_stream);
    g_free (name);
  }
  static const Case graph_cases[] = { {1, FALSE}, {2, TRUE} };
  for (guint i = 0; i < G_N_ELEMENTS (graph_cases); i++) {
    char *name = g_strdup_printf ("/dit/cuda/graphs/%s%d",
        graph_cases[i].nccl ? "nccl" : "local", graph_cases[i].n_ranks);
    g_test_add_data_func (name, &graph_cases[i], test_graphs);
    g_free (name);
    name = g_strdup_printf ("/dit/cuda/bf16/%s%d",
        graph_cases[i].nccl ? "nccl" : "local", graph_cases[i].n_ranks);
    g_test_add_data_func (name, &graph_cases[i], test_bf16);
    g_free (name);
  }
  g_test_add_func ("/dit/cuda/overlap/nccl2", test_overlap);
  int rc = g_test_run ();
  lingbot_dit_unref (dit);
  lingbot_checkpoint_unref (fixture);
  return rc;
}

/* lingbot-gst: the DiT against the golden fixture dit_tiny.safetensors
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * golden README section 6: the single-block fixture (block.*), then 4
 * streamed chunks x (4 denoising steps + the clean t = 0 pass) with the KV
 * cache after each chunk (eviction from chunk 2 on), for 1, 2 and 4 ranks
 * (Ulysses; the fixture has 4 heads).
 */
#include <string.h>

#include "dit-test-util.h"
#include "comm/worker-group.h"
#include "lingbot/dit-private.h"
#include "lingbot/dit-session.h"

static LingbotCheckpoint *fixture;
static LingbotDit *dit;

static void
report (const char *what, double err, double *worst)
{
  if (worst)
    *worst = MAX (*worst, err);
  if (g_test_verbose ())
    g_test_message ("%-40s rel err %.3g", what, err);
  if (!(err <= DIT_GOLDEN_TOL))
    g_error ("%s: max relative error %.3g > %.1g", what, err, DIT_GOLDEN_TOL);
}

static void
check (const float *c, const char *name, double *worst)
{
  const LbTensor *g = dit_fixture_get (fixture, name);
  report (name, dit_rel_error (c, g, lb_tensor_numel (g)), worst);
}

/* ---- block fixture ---- */

static void
test_block (void)
{
  g_autoptr (GError) err = NULL;
  LbBackend *be = lb_cpu_backend ();
  LbStream *s = be->stream_new (be, 0, &err);
  g_assert_no_error (err);
  const LingbotDitConfig *cfg = lingbot_dit_get_config (dit);
  const int64_t D = cfg->dim;

  LingbotDitRank rs;
  g_assert_true (lingbot_dit_rank_init (&rs, s, NULL, dit, 4, 3, 5, 150, 30,
          16, &err));
  g_assert_no_error (err);

  const LbTensor *ck = dit_fixture_get (fixture, "block.input.cache_k");
  const LbTensor *cv = dit_fixture_get (fixture, "block.input.cache_v");
  memcpy (rs.cache_k[0]->data, ck->data, lb_tensor_nbytes (ck));
  memcpy (rs.cache_v[0]->data, cv->data, lb_tensor_nbytes (cv));
  const LbTensor *cur =
      dit_fixture_get (fixture, "block.input.cache_end_before");
  rs.global_end = (int64_t) lb_tensor_get_flat (cur, 0);
  rs.local_end = (int64_t) lb_tensor_get_flat (cur, 1);
  int64_t start = (int64_t) lb_tensor_get_flat (dit_fixture_get (fixture,
          "block.input.current_start"), 0);

  g_assert_true (lingbot_dit_text_kv (&rs, dit_fixture_get (fixture,
              "block.input.context"), TRUE, &err));
  g_assert_no_error (err);
  const LbTensor *ctl = dit_fixture_get (fixture, "block.input.control_tokens");
  memcpy (rs.ctl->data, ctl->data, lb_tensor_nbytes (ctl));
  g_assert_true (lingbot_dit_camera_precompute (&rs, 0, &err));
  g_assert_no_error (err);
  const LbTensor *x = dit_fixture_get (fixture, "block.input.x");
  memcpy (rs.x->data, x->data, lb_tensor_nbytes (x));

  g_autoptr (LbTensor) mod = lb_tensor_new_f32 (2, (int64_t) 6, D);
  const LbTensor *tmod = dit_fixture_get (fixture, "block.input.t_mod");
  const LbTensor *m0 = lingbot_dit_get_weight (dit, "blocks.0.modulation");
  for (int64_t i = 0; i < 6 * D; i++)
    ((float *) mod->data)[i] = ((float *) m0->data)[i] +
        (float) lb_tensor_get_flat (tmod, i);

  rs.trace_self_attn = lingbot_dit_tensor_new (s, 60, D, NULL);
  rs.trace_cross_attn = lingbot_dit_tensor_new (s, 60, D, NULL);
  rs.trace_ffn = lingbot_dit_tensor_new (s, 60, D, NULL);

  g_assert_true (lingbot_dit_rope_chunk (&rs, start / rs.sh.frame_tokens,
          &err));
  lingbot_dit_cache_begin (&rs, start);
  g_assert_true (lingbot_dit_block_forward (&rs, 0, mod, start, &err));
  g_assert_no_error (err);
  lingbot_dit_cache_end (&rs, start);

  double worst = 0;
  check (rs.cross_k[0]->data, "block.output.cross_k", &worst);
  check (rs.cross_v[0]->data, "block.output.cross_v", &worst);
  check (rs.trace_self_attn->data, "block.output.self_attn_out", &worst);
  check (rs.trace_cross_attn->data, "block.output.cross_attn_out", &worst);
  check (rs.trace_ffn->data, "block.output.ffn_out", &worst);
  check (rs.cache_k[0]->data, "block.output.cache_k_after", &worst);
  check (rs.cache_v[0]->data, "block.output.cache_v_after", &worst);
  check (rs.x->data, "block.output.out", &worst);
  g_assert_cmpint (rs.global_end, ==, 90);
  g_assert_cmpint (rs.local_end, ==, 90);
  g_print ("# dit block fixture: max relative error %.3g\n", worst);

  lingbot_dit_rank_clear (&rs);
  be->stream_free (s);
}

/* ---- streamed chunks ---- */

typedef struct
{
  double worst;
  int n_checked;
} StepCheck;

static void
on_step (LingbotDitSession * ses, int64_t chunk, int step,
    const LbTensor * x_in, const LbTensor * pred, const LbTensor * x0,
    gpointer user_data)
{
  StepCheck *sc = user_data;
  char name[96];
  if (step < 4) {
    g_snprintf (name, sizeof name, "output.chunk%d.step%d.x_in", (int) chunk,
        step);
    check (x_in->data, name, &sc->worst);
    g_snprintf (name, sizeof name, "output.chunk%d.step%d.pred", (int) chunk,
        step);
    check (pred->data, name, &sc->worst);
    g_snprintf (name, sizeof name, "output.chunk%d.step%d.x0", (int) chunk,
        step);
    check (x0->data, name, &sc->worst);
  } else {
    g_snprintf (name, sizeof name, "output.chunk%d.refresh.x_in", (int) chunk);
    check (x_in->data, name, &sc->worst);
    g_snprintf (name, sizeof name, "output.chunk%d.refresh.pred", (int) chunk);
    check (pred->data, name, &sc->worst);
  }
  sc->n_checked++;
}

static void
test_stream (gconstpointer data)
{
  const int n_ranks = GPOINTER_TO_INT (data);
  g_autoptr (GError) err = NULL;
  const LingbotDitConfig *cfg = lingbot_dit_get_config (dit);
  LbWorkerGroupOptions go = { 0, NULL, "dit-test" };
  LbWorkerGroup *group = lb_worker_group_new (lb_cpu_backend (), n_ranks,
      NULL, &go, &err);
  g_assert_no_error (err);

  LingbotDitSessionOptions opt = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  opt.latent_h = 6;
  opt.latent_w = 10;
  LingbotDitSession *ses = lingbot_dit_session_new (dit, group, &opt,
      dit_fixture_get (fixture, "input.context"), &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_dit_session_get_cache_capacity (ses), ==, 150);

  /* the schedule must reproduce the fixture's timesteps */
  int n_steps;
  const double *ts;
  lingbot_dit_session_get_schedule (ses, &n_steps, &ts, NULL, NULL);
  const LbTensor *tsg = dit_fixture_get (fixture, "input.timesteps");
  g_assert_cmpint (n_steps, ==, 4);
  for (int i = 0; i < 4; i++)
    g_assert_cmpfloat (ts[i], ==, lb_tensor_get_flat (tsg, i));

  StepCheck sc = { 0 };
  lingbot_dit_session_set_step_callback (ses, on_step, &sc);
  const LbTensor *cursors = dit_fixture_get (fixture,
      "trace.cache_cursors_after_call");
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
    check (out->data, name, &sc.worst);
    for (int l = 0; l < cfg->num_layers; l++) {
      g_assert_true (lingbot_dit_session_get_kv_cache (ses, l, k, v, &err));
      g_assert_no_error (err);
      g_snprintf (name, sizeof name,
          "output.chunk%d.kv_after_refresh.layer%d.k", c, l);
      check (k->data, name, &sc.worst);
      g_snprintf (name, sizeof name,
          "output.chunk%d.kv_after_refresh.layer%d.v", c, l);
      check (v->data, name, &sc.worst);
      int64_t ge, le;
      lingbot_dit_session_get_cursors (ses, &ge, &le);
      int64_t call = c * 5 + 4;
      g_assert_cmpint (ge, ==, (int64_t) lb_tensor_get_flat (cursors,
              (call * cfg->num_layers + l) * 2));
      g_assert_cmpint (le, ==, (int64_t) lb_tensor_get_flat (cursors,
              (call * cfg->num_layers + l) * 2 + 1));
    }
  }
  g_assert_cmpint (sc.n_checked, ==, 20);
  int64_t ge, le;
  lingbot_dit_session_get_cursors (ses, &ge, &le);
  g_assert_cmpint (ge, ==, 240);        /* eviction happened: 240 seen ... */
  g_assert_cmpint (le, ==, 150);        /* ... 150 kept */
  g_print ("# dit stream fixture, %d rank(s): max relative error %.3g over "
      "all steps, predictions, x0, re-noised latents and KV caches\n",
      n_ranks, sc.worst);

  lingbot_dit_session_free (ses);
  lb_worker_group_unref (group);
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
  g_assert_cmpint (lingbot_dit_get_config (dit)->num_heads, ==, 4);
  g_assert_cmpint (lingbot_dit_get_config (dit)->num_layers, ==, 3);

  g_test_add_func ("/dit/golden/block", test_block);
  g_test_add_data_func ("/dit/golden/stream/cpu1", GINT_TO_POINTER (1),
      test_stream);
  g_test_add_data_func ("/dit/golden/stream/cpu2", GINT_TO_POINTER (2),
      test_stream);
  g_test_add_data_func ("/dit/golden/stream/cpu4", GINT_TO_POINTER (4),
      test_stream);
  int rc = g_test_run ();
  lingbot_dit_unref (dit);
  lingbot_checkpoint_unref (fixture);
  return rc;
}

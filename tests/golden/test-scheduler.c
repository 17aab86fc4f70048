/* lingbot-gst: the v2 schedule against scheduler.safetensors
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * golden README section 1: tables, both sigma lookups and the worked
 * example are exact (float32 bit equality).
 */
#include "golden-common.h"
#include "lingbot/scheduler.h"
#include "kernels/error.h"

static LingbotCheckpoint *fx;

static void
test_tables (void)
{
  g_autoptr (LingbotScheduler) s = lingbot_scheduler_new_default ();
  const LbTensor *gt = golden_get (fx, "output.timesteps");
  const LbTensor *gs = golden_get (fx, "output.sigmas");
  const LbTensor *gb = golden_get (fx, "trace.base_sigmas");
  guint nt, ns, nb;
  const int64_t *t = lingbot_scheduler_get_timesteps (s, &nt);
  const float *sig = lingbot_scheduler_get_sigmas (s, &ns);
  const float *base = lingbot_scheduler_get_base_sigmas (s, &nb);

  g_assert_cmpint (nt, ==, lb_tensor_numel (gt));
  g_assert_cmpint (ns, ==, lb_tensor_numel (gs));
  g_assert_cmpint (nb, ==, lb_tensor_numel (gb));
  g_assert_cmpint (gt->dtype, ==, LB_DTYPE_I64);
  g_assert_cmpmem (t, nt * sizeof (int64_t), gt->data, nt * sizeof (int64_t));
  g_assert_cmpmem (sig, ns * sizeof (float), gs->data, ns * sizeof (float));
  g_assert_cmpmem (base, nb * sizeof (float), gb->data, nb * sizeof (float));
  /* the quirk: 999 covers indices 0..8 */
  for (int i = 0; i <= 8; i++)
    g_assert_cmpint (t[i], ==, 999);
  g_assert_cmpint (t[9], <, 999);
}

static void
test_steps (void)
{
  g_autoptr (LingbotScheduler) s = lingbot_scheduler_new_default ();
  const LbTensor *sel = golden_get (fx, "output.timesteps_selected");
  const LbTensor *xi = golden_get (fx, "output.x0_sigma_index");
  const LbTensor *rni = golden_get (fx, "output.renoise_sigma_index");
  const float *xs = golden_f32 (fx, "output.x0_sigma", NULL);
  const float *rns = golden_f32 (fx, "output.renoise_sigma", NULL);
  static const int64_t expect_t[4] = { 999, 967, 908, 768 };
  static const guint expect_x0[4] = { 0, 248, 500, 750 };
  static const guint expect_rn[3] = { 249, 501, 751 };

  g_assert_cmpuint (lingbot_scheduler_get_n_steps (s), ==, 4);
  for (guint k = 0; k < 4; k++) {
    g_assert_cmpint (lingbot_scheduler_get_step_timestep (s, k), ==,
        expect_t[k]);
    g_assert_cmpint (lingbot_scheduler_get_step_timestep (s, k), ==,
        ((const int64_t *) sel->data)[k]);
    g_assert_cmpuint (lingbot_scheduler_get_x0_sigma_index (s, k), ==,
        expect_x0[k]);
    g_assert_cmpint (lingbot_scheduler_get_x0_sigma_index (s, k), ==,
        ((const int64_t *) xi->data)[k]);
    g_assert_true (lingbot_scheduler_get_x0_sigma (s, k) == xs[k]);
  }
  for (guint k = 0; k < 3; k++) {
    g_assert_cmpuint (lingbot_scheduler_get_renoise_sigma_index (s, k), ==,
        expect_rn[k]);
    g_assert_cmpint (lingbot_scheduler_get_renoise_sigma_index (s, k), ==,
        ((const int64_t *) rni->data)[k]);
    g_assert_true (lingbot_scheduler_get_renoise_sigma (s, k) == rns[k]);
  }
  g_assert_true (lingbot_scheduler_get_renoise_sigma (s, 3) == 0.0f);
  /* spec 3.5 table values */
  g_assert_cmpfloat_with_epsilon (lingbot_scheduler_get_x0_sigma (s, 1),
      0.96794939041, 1e-7);
  g_assert_cmpfloat_with_epsilon (lingbot_scheduler_get_renoise_sigma (s, 0),
      0.96778339148, 1e-7);
}

static void
test_other_indices (void)
{
  const LbTensor *v1 = golden_get (fx, "trace.fast_v1_timesteps_selected");
  static const guint v1_idx[4] = { 0, 179, 358, 679 };
  static const guint v2_idx[4] = { 0, 250, 500, 750 };
  static const int64_t shift5[4] = { 999, 937, 833, 624 };
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotScheduler) a = lingbot_scheduler_new (10.0, 1000, v1_idx,
      4, &err);
  g_autoptr (LingbotScheduler) b = NULL;
  LingbotScheduler *bad;

  g_assert_no_error (err);
  for (guint k = 0; k < 4; k++)
    g_assert_cmpint (lingbot_scheduler_get_step_timestep (a, k), ==,
        ((const int64_t *) v1->data)[k]);
  b = lingbot_scheduler_new (5.0, 1000, v2_idx, 4, &err);
  g_assert_no_error (err);
  for (guint k = 0; k < 4; k++)
    g_assert_cmpint (lingbot_scheduler_get_step_timestep (b, k), ==, shift5[k]);

  {
    static const guint out_of_range[2] = { 0, 1000 };
    bad = lingbot_scheduler_new (10.0, 1000, out_of_range, 2, &err);
    g_assert_null (bad);
    g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
    g_clear_error (&err);
    bad = lingbot_scheduler_new (0.0, 1000, v2_idx, 4, &err);
    g_assert_null (bad);
    g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  }
}

static void
test_worked_example (void)
{
  g_autoptr (LingbotScheduler) s = lingbot_scheduler_new_default ();
  /* a writable copy: checkpoint tensors map the file read-only */
  g_autoptr (LbTensor) x = lb_tensor_copy (golden_get (fx,
          "input.example_x_start"));
  g_autoptr (LbTensor) x0 = lb_tensor_new (LB_DTYPE_F32, x->ndim, x->shape);
  g_autoptr (GError) err = NULL;
  int64_t n = lb_tensor_numel (x);

  for (guint step = 0; step < 4; step++) {
    g_autofree char *pn = g_strdup_printf ("input.example_pred_%u", step);
    g_autofree char *x0n = g_strdup_printf ("output.example_x0_%u", step);
    const LbTensor *pred = golden_get (fx, pn);
    const float *want = golden_f32 (fx, x0n, NULL);

    g_assert_true (lingbot_scheduler_x0_tensor (s, step, x, pred, x0, &err));
    g_assert_no_error (err);
    g_assert_cmpmem (x0->data, n * 4, want, n * 4);
    if (step < 3) {
      g_autofree char *nn = g_strdup_printf ("input.example_noise_%u", step);
      g_autofree char *xn = g_strdup_printf ("output.example_x_%u", step + 1);
      const LbTensor *noise = golden_get (fx, nn);
      const float *wx = golden_f32 (fx, xn, NULL);
      g_assert_true (lingbot_scheduler_renoise_tensor (s, step, x0, noise, x,
              &err));
      g_assert_no_error (err);
      g_assert_cmpmem (x->data, n * 4, wx, n * 4);
    } else {
      g_assert_false (lingbot_scheduler_renoise_tensor (s, step, x0, x0, x,
              &err));
      g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
      g_clear_error (&err);
    }
  }
  golden_report ("scheduler worked example: bit-exact (max error 0)\n");
}

/* ---- the timestep-indices setting ---- */

#define CONVENTION "; the steps are indices into the 1000-entry timestep " \
  "table, strictly increasing from the noisiest step (index 0, t = 999), " \
  "e.g. '0,250,500,750'"

static void
expect_parse (const char *s, const int *want, guint n_want)
{
  g_autoptr (GArray) a = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GError) err = NULL;

  g_assert_true (lingbot_parse_timestep_indices (s, a, &err));
  g_assert_no_error (err);
  g_assert_cmpuint (a->len, ==, n_want);
  g_assert_cmpmem (a->data, a->len * sizeof (int), want, n_want * sizeof (int));
  g_assert_true (lingbot_check_timestep_indices ((const int *) a->data,
          (int) a->len, NULL));
}

static void
expect_refused (const char *s, const char *message)
{
  g_autoptr (GArray) a = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GError) err = NULL;

  g_assert_false (lingbot_parse_timestep_indices (s, a, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, message);
  /* nothing appended on failure */
  g_assert_cmpuint (a->len, ==, 0);
}

static void
test_timestep_indices (void)
{
  static const int def[] = { 0, 250, 500, 750 };
  static const int v1[] = { 0, 179, 358, 679 };
  static const int one[] = { 999 };
  int many[LINGBOT_SCHEDULER_MAX_STEPS + 1];
  g_autoptr (GString) s = g_string_new (NULL);
  g_autoptr (GError) err = NULL;

  expect_parse ("0,250,500,750", def, 4);
  expect_parse (" 0 , 250,500 ,750 ", def, 4);
  expect_parse ("0,179,358,679", v1, 4);
  expect_parse ("999", one, 1);

  expect_refused ("", "timestep-indices: the list is empty" CONVENTION);
  expect_refused (NULL, "timestep-indices: the list is empty" CONVENTION);
  expect_refused ("  ", "timestep-indices: the list is empty" CONVENTION);
  expect_refused ("0,0,500", "timestep-indices: '0,0,500' is not strictly "
      "increasing (0 repeated)" CONVENTION);
  expect_refused ("250,0", "timestep-indices: '250,0' is not strictly "
      "increasing (0 after 250)" CONVENTION);
  expect_refused ("0, 500 ,250,750", "timestep-indices: '0,500,250,750' is "
      "not strictly increasing (250 after 500)" CONVENTION);
  expect_refused ("0,1000", "timestep-indices: '1000' is not an index in "
      "[0, 999]");
  expect_refused ("0,5000", "timestep-indices: '5000' is not an index in "
      "[0, 999]");
  expect_refused ("-1,250", "timestep-indices: '-1' is not an index in "
      "[0, 999]");
  expect_refused ("0,,250", "timestep-indices: '' is not an index in "
      "[0, 999]");
  expect_refused ("0,250,", "timestep-indices: '' is not an index in "
      "[0, 999]");
  expect_refused ("a", "timestep-indices: 'a' is not an index in [0, 999]");
  expect_refused ("12x", "timestep-indices: '12x' is not an index in "
      "[0, 999]");
  expect_refused ("99999999999999999999", "timestep-indices: "
      "'99999999999999999999' is not an index in [0, 999]");

  /* the bound of the sampler: 64 steps */
  for (int i = 0; i <= LINGBOT_SCHEDULER_MAX_STEPS; i++) {
    many[i] = i;
    g_string_append_printf (s, i ? ",%d" : "%d", i);
  }
  g_assert_true (lingbot_check_timestep_indices (many,
          LINGBOT_SCHEDULER_MAX_STEPS, NULL));
  g_assert_false (lingbot_check_timestep_indices (many,
          LINGBOT_SCHEDULER_MAX_STEPS + 1, &err));
  g_assert_cmpstr (err->message, ==, "timestep-indices: 65 indices, at most "
      "64");
  g_clear_error (&err);
  expect_refused (s->str, "timestep-indices: 65 indices, at most 64");

  /* the array form names the value too */
  {
    static const int neg[] = { 0, -3 };
    static const int big[] = { 0, 1000 };
    g_assert_false (lingbot_check_timestep_indices (neg, 2, &err));
    g_assert_cmpstr (err->message, ==, "timestep-indices: '-3' is not an "
        "index in [0, 999]");
    g_clear_error (&err);
    g_assert_false (lingbot_check_timestep_indices (big, 2, &err));
    g_assert_cmpstr (err->message, ==, "timestep-indices: '1000' is not an "
        "index in [0, 999]");
    g_clear_error (&err);
    g_assert_false (lingbot_check_timestep_indices (def, 0, &err));
    g_assert_cmpstr (err->message, ==, "timestep-indices: the list is empty"
        CONVENTION);
  }
}

int
main (int argc, char **argv)
{
  int rc;

  g_test_init (&argc, &argv, NULL);
  fx = golden_open ("scheduler.safetensors");
  g_test_add_func ("/golden/scheduler/tables", test_tables);
  g_test_add_func ("/golden/scheduler/steps", test_steps);
  g_test_add_func ("/golden/scheduler/other-indices", test_other_indices);
  g_test_add_func ("/golden/scheduler/worked-example", test_worked_example);
  g_test_add_func ("/golden/scheduler/timestep-indices", test_timestep_indices);
  rc = g_test_run ();
  lingbot_checkpoint_unref (fx);
  return rc;
}

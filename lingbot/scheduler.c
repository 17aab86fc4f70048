/* lingbot-gst: the v2 few-step flow-matching schedule
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "lingbot/scheduler.h"
#include "kernels/error.h"

#include <math.h>
#include <string.h>

/* The update rules are specified operation by operation (float32 products
 * rounded before the sum); a fused multiply-add would change the last bit. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

struct _LingbotScheduler
{
  double shift;
  guint n_train;
  guint n_steps;
  float *base_sigmas;           /* [n_train] */
  float *sigmas;                /* [n_train + 1] */
  int64_t *timesteps;           /* [n_train] */
  guint indices[LINGBOT_SCHEDULER_MAX_STEPS];
  int64_t step_t[LINGBOT_SCHEDULER_MAX_STEPS];
  guint x0_index[LINGBOT_SCHEDULER_MAX_STEPS];
  guint rn_index[LINGBOT_SCHEDULER_MAX_STEPS];
};

/**
 * lingbot_scheduler_index_first:
 * @timesteps: the timestep table
 * @n: its length
 * @t: the timestep to look up
 *
 * The x0-conversion lookup: the first index p where |timesteps[p] - t| is
 * minimal (numpy argmin, first tie).  Spec 3.5 "quirk to reproduce".
 *
 * Returns: the index (0 when @n is 0).
 */
guint
lingbot_scheduler_index_first (const int64_t * timesteps, guint n, int64_t t)
{
  guint best = 0;
  int64_t best_d = G_MAXINT64;

  for (guint i = 0; i < n; i++) {
    int64_t d = timesteps[i] > t ? timesteps[i] - t : t - timesteps[i];
    if (d < best_d) {
      best_d = d;
      best = i;
    }
  }
  return best;
}

/**
 * lingbot_scheduler_index_second:
 * @timesteps: the timestep table
 * @n: its length
 * @t: the timestep to look up
 *
 * The add_noise lookup (diffusers `index_for_timestep`): among the indices
 * whose timestep equals @t, the second one when there are several, else the
 * only one.  When @t does not occur at all this falls back to
 * lingbot_scheduler_index_first().
 *
 * Returns: the index.
 */
guint
lingbot_scheduler_index_second (const int64_t * timesteps, guint n, int64_t t)
{
  guint found = 0, first = 0;

  for (guint i = 0; i < n; i++) {
    if (timesteps[i] == t) {
      if (found == 1)
        return i;
      first = i;
      found++;
    }
  }
  if (found == 1)
    return first;
  return lingbot_scheduler_index_first (timesteps, n, t);
}

/**
 * lingbot_scheduler_new:
 * @shift: the sample shift (10 for v2)
 * @num_train_timesteps: table length (1000)
 * @timestep_indices: (array length=n_steps): indices into the timestep
 *   table, one per denoising step (0, 250, 500, 750 for v2)
 * @n_steps: number of denoising steps (1 .. %LINGBOT_SCHEDULER_MAX_STEPS)
 * @error: return location for a #GError
 *
 * Builds the tables of spec 3.5 / golden README section 1 exactly:
 * base sigmas `1 - reversed(linspace(1, 1/N, N))` rounded to float32;
 * `s = linspace(sigma_max, 0, N + 1)[:-1]` in float64 with sigma_max the
 * float32 base[0]; `s' = shift*s / (1 + (shift-1)*s)`;
 * `timesteps = trunc(N * s')` (int64); `sigmas = float32(s') ++ [0]`.
 *
 * Returns: (transfer full): the schedule, or %NULL with @error set
 *   (%LB_ERROR_INVALID_ARGUMENT) for a non-positive shift, an empty or
 *   too long index list, or an index outside the table.
 */
LingbotScheduler *
lingbot_scheduler_new (double shift, guint num_train_timesteps,
    const guint * timestep_indices, guint n_steps, GError ** error)
{
  LingbotScheduler *s;
  guint n = num_train_timesteps;

  if (!(shift > 0.0) || n < 2 || n_steps == 0
      || n_steps > LINGBOT_SCHEDULER_MAX_STEPS || timestep_indices == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "scheduler: need shift > 0 (got %g), num_train_timesteps >= 2 "
        "(got %u) and 1..%d timestep indices (got %u)", shift, n,
        LINGBOT_SCHEDULER_MAX_STEPS, n_steps);
    return NULL;
  }
  for (guint i = 0; i < n_steps; i++) {
    if (timestep_indices[i] >= n) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "scheduler: timestep index %u (step %u) is outside the table of %u",
          timestep_indices[i], i, n);
      return NULL;
    }
  }

  s = g_new0 (LingbotScheduler, 1);
  s->shift = shift;
  s->n_train = n;
  s->n_steps = n_steps;
  s->base_sigmas = g_new (float, n);
  s->sigmas = g_new (float, n + 1);
  s->timesteps = g_new (int64_t, n);

  /* numpy linspace(1, 1/n, n): start + i*step, last element forced to stop */
  {
    double stop = 1.0 / n, step = (stop - 1.0) / (n - 1);
    for (guint j = 0; j < n; j++) {
      guint i = n - 1 - j;      /* reversed */
      double alpha = (i == n - 1) ? stop : (double) i * step + 1.0;
      s->base_sigmas[j] = (float) (1.0 - alpha);
    }
  }

  {
    double sigma_max = (double) s->base_sigmas[0];
    double sigma_min = (double) s->base_sigmas[n - 1];
    double step = (sigma_min - sigma_max) / n;  /* linspace of n+1 points */
    for (guint i = 0; i < n; i++) {
      double si = (double) i * step + sigma_max;
      double sh = shift * si / (1.0 + (shift - 1.0) * si);
      s->sigmas[i] = (float) sh;
      s->timesteps[i] = (int64_t) (sh * n);
    }
    s->sigmas[n] = 0.0f;
  }

  for (guint k = 0; k < n_steps; k++) {
    s->indices[k] = timestep_indices[k];
    s->step_t[k] = s->timesteps[timestep_indices[k]];
  }
  for (guint k = 0; k < n_steps; k++) {
    s->x0_index[k] = lingbot_scheduler_index_first (s->timesteps, n,
        s->step_t[k]);
    s->rn_index[k] = k + 1 < n_steps ? lingbot_scheduler_index_second (s->timesteps, n, s->step_t[k + 1]) : n;  /* sigma 0: no re-noise after the last step */
  }
  return s;
}

/**
 * lingbot_scheduler_new_default:
 *
 * The v2 schedule: shift 10, 1000 train steps, indices (0, 250, 500, 750),
 * giving t = 999, 967, 908, 768 (spec 3.5).
 *
 * Returns: (transfer full): the schedule.
 */
LingbotScheduler *
lingbot_scheduler_new_default (void)
{
  static const guint idx[4] = { 0, 250, 500, 750 };
  return lingbot_scheduler_new (LINGBOT_SCHEDULER_DEFAULT_SHIFT,
      LINGBOT_SCHEDULER_DEFAULT_TRAIN_STEPS, idx, 4, NULL);
}

/**
 * lingbot_scheduler_free:
 * @sched: (nullable): a schedule
 */
void
lingbot_scheduler_free (LingbotScheduler * sched)
{
  if (sched == NULL)
    return;
  g_free (sched->base_sigmas);
  g_free (sched->sigmas);
  g_free (sched->timesteps);
  g_free (sched);
}

/** lingbot_scheduler_get_n_steps: Returns: the number of denoising steps. */
guint
lingbot_scheduler_get_n_steps (const LingbotScheduler * sched)
{
  return sched->n_steps;
}

/** lingbot_scheduler_get_shift: Returns: the sample shift. */
double
lingbot_scheduler_get_shift (const LingbotScheduler * sched)
{
  return sched->shift;
}

/**
 * lingbot_scheduler_get_timesteps:
 * @sched: a schedule
 * @n: (out) (optional): table length (num_train_timesteps)
 *
 * Returns: (transfer none): the int64 timestep table (golden
 *   `output.timesteps`).
 */
const int64_t *
lingbot_scheduler_get_timesteps (const LingbotScheduler * sched, guint * n)
{
  if (n)
    *n = sched->n_train;
  return sched->timesteps;
}

/**
 * lingbot_scheduler_get_sigmas:
 * @sched: a schedule
 * @n: (out) (optional): table length (num_train_timesteps + 1)
 *
 * Returns: (transfer none): the float32 shifted sigma table with a final 0
 *   (golden `output.sigmas`).
 */
const float *
lingbot_scheduler_get_sigmas (const LingbotScheduler * sched, guint * n)
{
  if (n)
    *n = sched->n_train + 1;
  return sched->sigmas;
}

/**
 * lingbot_scheduler_get_base_sigmas:
 * @sched: a schedule
 * @n: (out) (optional): table length (num_train_timesteps)
 *
 * Returns: (transfer none): the unshifted float32 training sigmas
 *   (golden `trace.base_sigmas`).
 */
const float *
lingbot_scheduler_get_base_sigmas (const LingbotScheduler * sched, guint * n)
{
  if (n)
    *n = sched->n_train;
  return sched->base_sigmas;
}

/**
 * lingbot_scheduler_get_step_timestep:
 * @sched: a schedule
 * @step: denoising step, 0 .. n_steps-1
 *
 * Returns: the timestep fed to the DiT at @step (999, 967, 908, 768 for
 *   v2); the DiT takes it as a float32 value.
 */
int64_t
lingbot_scheduler_get_step_timestep (const LingbotScheduler * sched, guint step)
{
  g_return_val_if_fail (step < sched->n_steps, 0);
  return sched->step_t[step];
}

/**
 * lingbot_scheduler_get_x0_sigma_index:
 * @sched: a schedule
 * @step: denoising step
 *
 * Returns: the sigma index used to turn the flow prediction of @step into
 *   x0: first occurrence of the step's timestep (0, 248, 500, 750 for v2).
 */
guint
lingbot_scheduler_get_x0_sigma_index (const LingbotScheduler * sched,
    guint step)
{
  g_return_val_if_fail (step < sched->n_steps, 0);
  return sched->x0_index[step];
}

/**
 * lingbot_scheduler_get_x0_sigma:
 * @sched: a schedule
 * @step: denoising step
 *
 * Returns: sigmas[lingbot_scheduler_get_x0_sigma_index()].
 */
float
lingbot_scheduler_get_x0_sigma (const LingbotScheduler * sched, guint step)
{
  g_return_val_if_fail (step < sched->n_steps, 0.0f);
  return sched->sigmas[sched->x0_index[step]];
}

/**
 * lingbot_scheduler_get_renoise_sigma_index:
 * @sched: a schedule
 * @step: denoising step whose x0 is re-noised
 *
 * Returns: the sigma index used to re-noise x0 of @step to the next
 *   timestep: second occurrence of t[@step+1] (249, 501, 751 for v2); for
 *   the last step, num_train_timesteps (sigma 0, no re-noise).
 */
guint
lingbot_scheduler_get_renoise_sigma_index (const LingbotScheduler * sched,
    guint step)
{
  g_return_val_if_fail (step < sched->n_steps, 0);
  return sched->rn_index[step];
}

/**
 * lingbot_scheduler_get_renoise_sigma:
 * @sched: a schedule
 * @step: denoising step
 *
 * Returns: sigmas[lingbot_scheduler_get_renoise_sigma_index()] (0 for the
 *   last step).
 */
float
lingbot_scheduler_get_renoise_sigma (const LingbotScheduler * sched, guint step)
{
  g_return_val_if_fail (step < sched->n_steps, 0.0f);
  return sched->sigmas[sched->rn_index[step]];
}

/**
 * lingbot_scheduler_x0:
 * @sigma: the x0 sigma of the step (float32 table value)
 * @x: (array length=n): current latent x_t, float32
 * @v: (array length=n): flow prediction (v = noise - x0), float32
 * @x0: (array length=n): output; may alias @x or @v
 * @n: element count
 *
 * `x0 = x - sigma*v`, evaluated in float64 and rounded to float32 once
 * (the reference converts to double).  Spec 3.6.
 */
void
lingbot_scheduler_x0 (float sigma, const float *x, const float *v,
    float *x0, gsize n)
{
  double s = sigma;
  for (gsize i = 0; i < n; i++)
    x0[i] = (float) ((double) x[i] - s * (double) v[i]);
}

/**
 * lingbot_scheduler_renoise:
 * @sigma: the re-noise sigma of the step
 * @x0: (array length=n): clean estimate, float32
 * @noise: (array length=n): standard normal noise, float32
 * @x: (array length=n): output x_{t+1}; may alias @x0 or @noise
 * @n: element count
 *
 * `x = (1 - sigma)*x0 + sigma*noise` in float32 arithmetic: 1 - sigma,
 * both products and the sum are each rounded to float32 (add_noise of the
 * flow scheduler).  Spec 3.6.
 */
void
lingbot_scheduler_renoise (float sigma, const float *x0, const float *noise,
    float *x, gsize n)
{
  float a = 1.0f - sigma;
  for (gsize i = 0; i < n; i++) {
    float p = a * x0[i];
    float q = sigma * noise[i];
    x[i] = p + q;
  }
}

static gboolean
check_f32_same (const char *what, const LbTensor * a, const LbTensor * b,
    GError ** error)
{
  if (a->dtype != LB_DTYPE_F32 || b->dtype != LB_DTYPE_F32
      || a->device.type != LB_DEVICE_CPU || b->device.type != LB_DEVICE_CPU
      || !lb_tensor_is_contiguous (a) || !lb_tensor_is_contiguous (b)
      || lb_tensor_numel (a) != lb_tensor_numel (b)) {
    g_autofree char *sa = lb_tensor_shape_string (a);
    g_autofree char *sb = lb_tensor_shape_string (b);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "scheduler %s: need contiguous float32 CPU tensors of equal size, "
        "got %s %s and %s %s", what, lb_dtype_name (a->dtype), sa,
        lb_dtype_name (b->dtype), sb);
    return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_scheduler_x0_tensor:
 * @sched: a schedule
 * @step: denoising step (selects the x0 sigma)
 * @x: x_t, float32 contiguous CPU tensor, any shape ([16, C, h, w])
 * @v: flow prediction, same size
 * @x0: output, same size (may be @x or @v)
 * @error: return location for a #GError (%LB_ERROR_SHAPE)
 *
 * Tensor form of lingbot_scheduler_x0() with the step's x0 sigma.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_scheduler_x0_tensor (const LingbotScheduler * sched, guint step,
    const LbTensor * x, const LbTensor * v, LbTensor * x0, GError ** error)
{
  if (step >= sched->n_steps) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "scheduler: step %u out of range (%u steps)", step, sched->n_steps);
    return FALSE;
  }
  if (!check_f32_same ("x0", x, v, error)
      || !check_f32_same ("x0", x, x0, error))
    return FALSE;
  lingbot_scheduler_x0 (lingbot_scheduler_get_x0_sigma (sched, step),
      x->data, v->data, x0->data, lb_tensor_numel (x));
  return TRUE;
}

/**
 * lingbot_scheduler_renoise_tensor:
 * @sched: a schedule
 * @step: the step whose x0 is re-noised (0 .. n_steps-2)
 * @x0: clean estimate, float32 contiguous CPU tensor
 * @noise: N(0,1) noise, same size
 * @x: output x for step+1, same size (may alias)
 * @error: return location for a #GError
 *
 * Tensor form of lingbot_scheduler_renoise() with the step's re-noise
 * sigma.
 *
 * Returns: %TRUE on success; %LB_ERROR_INVALID_ARGUMENT for the last step
 *   (which is not re-noised), %LB_ERROR_SHAPE for mismatched tensors.
 */
gboolean
lingbot_scheduler_renoise_tensor (const LingbotScheduler * sched, guint step,
    const LbTensor * x0, const LbTensor * noise, LbTensor * x, GError ** error)
{
  if (step + 1 >= sched->n_steps) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "scheduler: step %u is not re-noised (%u steps)", step, sched->n_steps);
    return FALSE;
  }
  if (!check_f32_same ("renoise", x0, noise, error)
      || !check_f32_same ("renoise", x0, x, error))
    return FALSE;
  lingbot_scheduler_renoise (lingbot_scheduler_get_renoise_sigma (sched,
          step), x0->data, noise->data, x->data, lb_tensor_numel (x0));
  return TRUE;
}

/* ------------------------------------------------------------------ */
/* timestep index lists (the `timestep-indices` setting)              */
/* ------------------------------------------------------------------ */

#define INDEX_CONVENTION "the steps are indices into the 1000-entry " \
  "timestep table, strictly increasing from the noisiest step (index 0, " \
  "t = 999), e.g. '0,250,500,750'"

static char *
join_indices (const int *idx, int n)
{
  GString *s = g_string_new (NULL);

  for (int i = 0; i < n; i++)
    g_string_append_printf (s, i ? ",%d" : "%d", idx[i]);
  return g_string_free (s, FALSE);
}

/**
 * lingbot_check_timestep_indices:
 * @idx: (array length=n): denoising-step indices into the timestep table
 * @n: number of steps
 * @error: return location for a #GError
 *
 * Checks a list of timestep indices as the sampler (spec 3.5) takes them:
 * 1 to %LINGBOT_SCHEDULER_MAX_STEPS indices, each in [0, 999] (the
 * %LINGBOT_SCHEDULER_DEFAULT_TRAIN_STEPS-entry table), strictly increasing
 * (index 0 is the noisiest step, t = 999; the v2 default 0,250,500,750
 * gives t = 999, 967, 908, 768).  A repeated index would run the same step
 * twice, a decreasing one would add noise back.
 *
 * Returns: %TRUE when the list is valid; %FALSE with
 *   %LB_ERROR_INVALID_ARGUMENT naming the offending value, e.g.
 *   "timestep-indices: '250,0' is not strictly increasing (0 after 250);
 *   ...".
 */
gboolean
lingbot_check_timestep_indices (const int *idx, int n, GError ** error)
{
  if (n <= 0 || idx == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "timestep-indices: the list is empty; " INDEX_CONVENTION);
    return FALSE;
  }
  if (n > LINGBOT_SCHEDULER_MAX_STEPS) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "timestep-indices: %d indices, at most %d", n,
        LINGBOT_SCHEDULER_MAX_STEPS);
    return FALSE;
  }
  for (int i = 0; i < n; i++) {
    if (idx[i] < 0 || idx[i] >= LINGBOT_SCHEDULER_DEFAULT_TRAIN_STEPS) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "timestep-indices: '%d' is not an index in [0, %d]", idx[i],
          LINGBOT_SCHEDULER_DEFAULT_TRAIN_STEPS - 1);
      return FALSE;
    }
  }
  for (int i = 1; i < n; i++) {
    if (idx[i] <= idx[i - 1]) {
      g_autofree char *list = join_indices (idx, n);

      if (idx[i] == idx[i - 1])
        g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
            "timestep-indices: '%s' is not strictly increasing (%d "
            "repeated); " INDEX_CONVENTION, list, idx[i]);
      else
        g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
            "timestep-indices: '%s' is not strictly increasing (%d after "
            "%d); " INDEX_CONVENTION, list, idx[i], idx[i - 1]);
      return FALSE;
    }
  }
  return TRUE;
}

/**
 * lingbot_parse_timestep_indices:
 * @s: (nullable): a comma-separated list of decimal indices ("0,250,500,750";
 *   blanks around each are allowed)
 * @out: a #GArray of int; the indices are appended on success only
 * @error: return location for a #GError
 *
 * Parses the `timestep-indices` setting and checks it with
 * lingbot_check_timestep_indices().
 *
 * Returns: %TRUE on success; %FALSE with %LINGBOT_ERROR_INVALID_ARGUMENT for an
 *   empty list (%NULL, "" or only blanks), an item that is not a decimal
 *   integer in [0, 999] ("timestep-indices: 'x' is not an index in [0,
 *   999]", also for an empty item as in "0,,250"), more than
 *   %LINGBOT_SCHEDULER_MAX_STEPS items, or a list that is not strictly
 *   increasing.
 */
gboolean
lingbot_parse_timestep_indices (const char *s, GArray * out, GError ** error)
{
  g_auto (GStrv) parts = NULL;
  int idx[LINGBOT_SCHEDULER_MAX_STEPS];
  int n = 0;

  g_return_val_if_fail (out != NULL, FALSE);
  g_return_val_if_fail (g_array_get_element_size (out) == sizeof (int), FALSE);

  if (s == NULL || *s == '\0' || strspn (s, " \t\r\n") == strlen (s))
    return lingbot_check_timestep_indices (NULL, 0, error);
  parts = g_strsplit (s, ",", -1);
  for (guint i = 0; parts[i]; i++) {
    const char *p = g_strstrip (parts[i]);
    char *end = NULL;
    gint64 v;

    if (!g_ascii_isdigit (*p)) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "timestep-indices: '%s' is not an index in [0, %d]", p,
          LINGBOT_SCHEDULER_DEFAULT_TRAIN_STEPS - 1);
      return FALSE;
    }
    v = g_ascii_strtoll (p, &end, 10);
    if (*end != '\0' || v >= LINGBOT_SCHEDULER_DEFAULT_TRAIN_STEPS) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "timestep-indices: '%s' is not an index in [0, %d]", p,
          LINGBOT_SCHEDULER_DEFAULT_TRAIN_STEPS - 1);
      return FALSE;
    }
    if (n == LINGBOT_SCHEDULER_MAX_STEPS) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "timestep-indices: %u indices, at most %d", g_strv_length (parts),
          LINGBOT_SCHEDULER_MAX_STEPS);
      return FALSE;
    }
    idx[n++] = (int) v;
  }
  if (!lingbot_check_timestep_indices (idx, n, error))
    return FALSE;
  g_array_append_vals (out, idx, (guint) n);
  return TRUE;
}

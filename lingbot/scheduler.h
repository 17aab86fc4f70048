/* lingbot-gst: the v2 few-step flow-matching schedule (sigma / timestep
 * tables, x0 conversion and re-noise)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot_model_spec.md section 3.5-3.6; golden README section 1.
 * TeleFuser builds a FlowUniPCMultistepScheduler but LingBot only reads its
 * tables and its add_noise(); the UniPC update itself is never used.
 */
#pragma once

#include <glib.h>
#include <stdint.h>
#include "kernels/tensor.h"
#include "lingbot/lingbot.h"

G_BEGIN_DECLS

/** LINGBOT_SCHEDULER_DEFAULT_SHIFT: `sample_shift` of the v2 fast model. */
#define LINGBOT_SCHEDULER_DEFAULT_SHIFT 10.0
/** LINGBOT_SCHEDULER_DEFAULT_TRAIN_STEPS: `num_train_timesteps`. */
#define LINGBOT_SCHEDULER_DEFAULT_TRAIN_STEPS 1000
/** LINGBOT_SCHEDULER_MAX_STEPS: most denoising steps a schedule may have. */
#define LINGBOT_SCHEDULER_MAX_STEPS 64

typedef struct _LingbotScheduler LingbotScheduler;

LingbotScheduler *lingbot_scheduler_new (double shift,
    guint num_train_timesteps, const guint * timestep_indices, guint n_steps,
    GError ** error);
LingbotScheduler *lingbot_scheduler_new_default (void);
void lingbot_scheduler_free (LingbotScheduler * sched);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotScheduler, lingbot_scheduler_free)
guint lingbot_scheduler_get_n_steps (const LingbotScheduler * sched);
double lingbot_scheduler_get_shift (const LingbotScheduler * sched);
const int64_t *lingbot_scheduler_get_timesteps (const LingbotScheduler *
    sched, guint * n);
const float *lingbot_scheduler_get_sigmas (const LingbotScheduler * sched,
    guint * n);
const float *lingbot_scheduler_get_base_sigmas (const LingbotScheduler *
    sched, guint * n);

int64_t lingbot_scheduler_get_step_timestep (const LingbotScheduler *
    sched, guint step);
guint lingbot_scheduler_get_x0_sigma_index (const LingbotScheduler * sched,
    guint step);
float lingbot_scheduler_get_x0_sigma (const LingbotScheduler * sched,
    guint step);
guint lingbot_scheduler_get_renoise_sigma_index (const LingbotScheduler *
    sched, guint step);
float lingbot_scheduler_get_renoise_sigma (const LingbotScheduler * sched,
    guint step);

guint lingbot_scheduler_index_first (const int64_t * timesteps, guint n,
    int64_t t);
guint lingbot_scheduler_index_second (const int64_t * timesteps, guint n,
    int64_t t);

void lingbot_scheduler_x0 (float sigma, const float *x, const float *v,
    float *x0, gsize n);
void lingbot_scheduler_renoise (float sigma, const float *x0,
    const float *noise, float *x, gsize n);

gboolean lingbot_check_timestep_indices (const int *idx, int n,
    GError ** error);
/* lingbot_parse_timestep_indices() is public: lingbot/lingbot.h */

gboolean lingbot_scheduler_x0_tensor (const LingbotScheduler * sched,
    guint step, const LbTensor * x, const LbTensor * v, LbTensor * x0,
    GError ** error);
gboolean lingbot_scheduler_renoise_tensor (const LingbotScheduler * sched,
    guint step, const LbTensor * x0, const LbTensor * noise, LbTensor * x,
    GError ** error);

G_END_DECLS

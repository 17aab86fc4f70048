/* lingbot-gst: LingbotWorld internals shared by world.c and session.c
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "lingbot/lingbot.h"

G_BEGIN_DECLS

/* File names of the release layout (lingbot.h).  Each part is looked up
 * under its published name first, then under the `.safetensors` name that
 * lingbot-mkmodel --full writes (no .pth writer exists here). */
#define LINGBOT_WORLD_DIT_DIR "transformers"
#define LINGBOT_WORLD_VAE_PTH "Wan2.1_VAE.pth"
#define LINGBOT_WORLD_VAE_SAFETENSORS "Wan2.1_VAE.safetensors"
#define LINGBOT_WORLD_T5_PTH "models_t5_umt5-xxl-enc-bf16.pth"
#define LINGBOT_WORLD_T5_SAFETENSORS "models_t5_umt5-xxl-enc-bf16.safetensors"
/* dummy models (lingbot/dummy.c): manifests in place of the weights */
#define LINGBOT_WORLD_VAE_DUMMY "Wan2.1_VAE.dummy.json"
#define LINGBOT_WORLD_T5_DUMMY "models_t5_umt5-xxl-enc-bf16.dummy.json"
#define LINGBOT_WORLD_TOKENIZER_DIR "google/umt5-xxl"

struct _LingbotWorld
{
  char *devices;
  char *model_path;
  LbBackend *backend;
  int n_ranks;
  int *ordinals;
  LbWorkerGroup *group;
  /* held around every sequence of jobs a session submits to the group, so
   * that jobs of two threads (generate in one, decode in another) never
   * interleave differently on different ranks */
  GRecMutex lock;
  LingbotDit *dit;
  LingbotVae *vae;
  /* text encoder: paths only, loaded per session (lingbot_world_new()) */
  char *t5_path;
  char *tokenizer_path;
  /* LingbotWorldOptions.precision, given to every DiT session */
  LbMathMode math;
};

LingbotWorld *lingbot_world_new_on_backend (const LingbotWorldOptions *
    options, LbBackend * backend, int n_ranks, GError ** error);

G_END_DECLS

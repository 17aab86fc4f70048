/* lingbot-gst: LingbotWorld internals shared by world.c and session.c,
 * and the engine side of the public API (lingbot.h) for the in-tree tools
 * and tests: the worker group, the DiT and the VAE behind a world, the
 * tensors behind #LingbotFrames and #LingbotLatents.  Not installed.
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "lingbot/lingbot.h"
#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/tensor.h"
#include "comm/worker-group.h"
#include "lingbot/dit.h"
#include "lingbot/scheduler.h"
#include "lingbot/vae.h"

G_BEGIN_DECLS

/* The public handles are tensors: a #LingbotFrames is the f32 [3, T, H, W]
 * host tensor of a decode (in [-1, 1], RGB), a #LingbotLatents the host
 * f32 [(1,) 16, T, h, w] latents of a chunk.  The tensor is the first
 * member, so the session's and the decoder's tensors are handed out as
 * handles without a copy (a pointer to a struct is a pointer to its first
 * member). */
struct _LingbotFrames
{
  LbTensor t;
};

struct _LingbotLatents
{
  LbTensor t;
};

static inline const LbTensor *
lingbot_frames_tensor (const LingbotFrames * frames)
{
  return &frames->t;
}

static inline const LingbotFrames *
lingbot_frames_from_tensor (const LbTensor * t)
{
  return (const LingbotFrames *) t;
}

static inline const LbTensor *
lingbot_latents_tensor (const LingbotLatents * latents)
{
  return latents ? &latents->t : NULL;
}

static inline const LingbotLatents *
lingbot_latents_from_tensor (const LbTensor * t)
{
  return (const LingbotLatents *) t;
}

LbWorkerGroup *lingbot_world_get_group (LingbotWorld * world);
LingbotDit *lingbot_world_get_dit (LingbotWorld * world);
LingbotVae *lingbot_world_get_vae (LingbotWorld * world);

/* the tensors behind lingbot_session_get_latents(), _get_frames() and
 * _get_start_frames() */
static inline const LbTensor *
lingbot_session_get_latents_tensor (LingbotSession * session)
{
  return lingbot_latents_tensor (lingbot_session_get_latents (session));
}

static inline const LbTensor *
lingbot_session_get_frames_tensor (LingbotSession * session)
{
  return lingbot_frames_tensor (lingbot_session_get_frames (session));
}

static inline const LbTensor *
lingbot_session_get_start_frames_tensor (LingbotSession * session)
{
  return lingbot_frames_tensor (lingbot_session_get_start_frames (session));
}

gboolean lingbot_session_read_chunk_tensor (LingbotSession * session,
    guint64 chunk, LbTensor * dst, GError ** error);

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

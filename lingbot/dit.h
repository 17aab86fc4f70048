/* lingbot-gst: LingBot-World v2 causal DiT: configuration and weights
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The model of lingbot_model_spec.md section 1: a Wan2.x-I2V-style DiT with
 * a camera ray-map embedding injected into every block.  This header holds
 * the configuration and the weights (read once, widened to float32); the
 * streaming session that runs it chunk by chunk is lingbot/dit-session.h.
 */
#pragma once

#include <glib.h>
#include "kernels/tensor.h"
#include "lingbot/checkpoint.h"

G_BEGIN_DECLS

/* Defaults of spec 1.1 (the released 14B). */
#define LINGBOT_DIT_DEFAULT_HEAD_DIM 128
#define LINGBOT_DIT_DEFAULT_FREQ_DIM 256
#define LINGBOT_DIT_DEFAULT_EPS 1e-6
#define LINGBOT_DIT_DEFAULT_LOCAL_ATTN_FRAMES 18
#define LINGBOT_DIT_DEFAULT_SINK_FRAMES 6
#define LINGBOT_DIT_DEFAULT_CHUNK_FRAMES 4
#define LINGBOT_DIT_ROPE_THETA 10000.0
#define LINGBOT_DIT_ROPE_MAX_POS 1024

/**
 * LingbotDitConfig:
 * @dim: hidden width D (5120 for the 14B, 1536 for the 1.3B)
 * @num_layers: transformer blocks (40 / 30)
 * @num_heads: attention heads (40 / 12); not stored in the weights
 * @ffn_dim: FFN hidden width (13824 / 8960)
 * @freq_dim: sinusoidal timestep features (256)
 * @in_dim: input channels (36 = 16 latent + 4 mask + 16 condition)
 * @out_dim: output channels (16)
 * @text_dim: text-encoder width (4096)
 * @control_in_features: camera patch in-features (1536 = 6 * 64 * 4)
 * @patch: patch size (t, h, w), always (1, 2, 2)
 * @eps: epsilon of every LayerNorm and RMSNorm (1e-6)
 * @local_attn_frames: default KV window in latent frames (18; -1 = global)
 * @sink_frames: default attention sink in latent frames (6)
 * @chunk_frames: latent frames per chunk (4)
 * @max_attention_size: the self-attention span in tokens (config.json
 *   `max_attention_size`, spec 1.8): queries attend to the cache slots
 *   [max(0, local_end - max_attention_size), local_end).  0 (the default,
 *   and what the release's config.json implies by not having the key) is
 *   the KV cache's capacity; a value above the capacity acts as the
 *   capacity.  In tokens, as in the reference, so the number of frames it
 *   spans depends on the resolution (tokens per frame).
 *
 * Spec 1.1.  The last four are runtime settings a session may override.
 */
typedef struct
{
  int dim;
  int num_layers;
  int num_heads;
  int ffn_dim;
  int freq_dim;
  int in_dim;
  int out_dim;
  int text_dim;
  int control_in_features;
  int patch[3];
  double eps;
  int local_attn_frames;
  int sink_frames;
  int chunk_frames;
  int max_attention_size;
} LingbotDitConfig;

/**
 * LingbotDitPreset:
 * The published shapes: the 14B release, the Wan-1.3B-shaped sibling and
 * the tiny test model of spec 8 (dim 64, 2 layers, 2 heads).
 */
typedef enum
{
  LINGBOT_DIT_PRESET_14B,
  LINGBOT_DIT_PRESET_1_3B,
  LINGBOT_DIT_PRESET_TINY,
  LINGBOT_DIT_PRESET_DEMO,
} LingbotDitPreset;

void lingbot_dit_config_init_preset (LingbotDitConfig * cfg,
    LingbotDitPreset preset);
gboolean lingbot_dit_config_preset_from_name (const char *name,
    LingbotDitPreset * preset);
gboolean lingbot_dit_config_validate (const LingbotDitConfig * cfg,
    GError ** error);
const char *lingbot_dit_config_variant (const LingbotDitConfig * cfg);
int lingbot_dit_config_head_dim (const LingbotDitConfig * cfg);
guint64 lingbot_dit_config_n_params (const LingbotDitConfig * cfg);
char *lingbot_dit_config_to_json (const LingbotDitConfig * cfg);
gboolean lingbot_dit_config_merge_json (LingbotDitConfig * cfg,
    const char *json, GError ** error);
gboolean lingbot_dit_config_from_checkpoint (LingbotCheckpoint * ckpt,
    const char *config_json, LingbotDitConfig * cfg, GError ** error);

/* Weight names of spec 4.2, in checkpoint order. */
GPtrArray *lingbot_dit_weight_names (const LingbotDitConfig * cfg);
gboolean lingbot_dit_weight_shape (const LingbotDitConfig * cfg,
    const char *name, int *ndim, int64_t * shape);

typedef struct _LingbotDit LingbotDit;

/**
 * LingbotDitLoadFlags:
 * @LINGBOT_DIT_LOAD_STRICT: fail on tensors that are not DiT weights (the
 *   reference loads with strict=True); without it they are ignored, which
 *   lets a golden fixture file serve as a checkpoint
 * @LINGBOT_DIT_LOAD_NO_NAN_CHECK: skip the scan for NaN/Inf weights
 */
typedef enum
{
  LINGBOT_DIT_LOAD_DEFAULT = 0,
  LINGBOT_DIT_LOAD_STRICT = 1 << 0,
  LINGBOT_DIT_LOAD_NO_NAN_CHECK = 1 << 1,
} LingbotDitLoadFlags;

LingbotDit *lingbot_dit_load (const char *path, LingbotDitLoadFlags flags,
    GError ** error);
LingbotDit *lingbot_dit_load_checkpoint (LingbotCheckpoint * ckpt,
    const LingbotDitConfig * cfg, LingbotDitLoadFlags flags, GError ** error);
gboolean lingbot_dit_load_config (const char *path, LingbotDitConfig * cfg,
    GError ** error);
LingbotDit *lingbot_dit_ref (LingbotDit * dit);
void lingbot_dit_unref (LingbotDit * dit);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotDit, lingbot_dit_unref)
const LingbotDitConfig *lingbot_dit_get_config (const LingbotDit * dit);
const LbTensor *lingbot_dit_get_weight (const LingbotDit * dit,
    const char *name);

/* Random-weight checkpoints in the published layout (lingbot-mkmodel). */
LbTensor *lingbot_dit_random_weight (const LingbotDitConfig * cfg,
    const char *name, LbDType dtype, guint64 seed);
GHashTable *lingbot_dit_random_weights (const LingbotDitConfig * cfg,
    LbDType stored, guint64 seed, int n_threads, GError ** error);
LingbotDit *lingbot_dit_new_random (const LingbotDitConfig * cfg,
    guint64 seed, GError ** error);
gboolean lingbot_dit_write_random (const LingbotDitConfig * cfg,
    const char *dir, guint n_shards, LbDType dtype, guint64 seed,
    GError ** error);

G_END_DECLS

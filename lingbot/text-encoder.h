/* lingbot-gst: umT5 text encoder (prompt conditioning)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The umT5-XXL encoder of Wan ("models_t5_umt5-xxl-enc-bf16.pth"), spec
 * lingbot_model_spec.md section 5 and golden/README.md section 2, plus the
 * "prompt-embeds" file that holds a precomputed context so a session can
 * skip the encoder.  The encoder runs once per session and yields the
 * [512, dim] context the DiT's text embedding consumes (spec 1.5): rows at
 * and after the number of real tokens (including </s>) are exactly zero.
 */
#pragma once

#include <glib.h>
#include "kernels/tensor.h"
#include "kernels/backend.h"
#include "lingbot/checkpoint.h"
#include "lingbot/tokenizer.h"

G_BEGIN_DECLS

/**
 * LINGBOT_PROMPT_EMBEDS_TENSOR:
 * Name of the tensor in a prompt-embeds safetensors file: the context,
 * [n, dim] (or [1, n, dim]) F32, BF16 or F16; n is 512 for the real model.
 * Such a file may carry the metadata keys `lingbot.prompt` (the prompt
 * text) and `lingbot.n_tokens` (real tokens including </s>).
 */
#define LINGBOT_PROMPT_EMBEDS_TENSOR "prompt_embeds"

/**
 * LingbotTextEncoderConfig:
 * @vocab: token embedding rows (256384 for umT5-XXL)
 * @dim: model width (4096)
 * @dim_attn: width of q/k/v/o (4096)
 * @dim_ffn: gated-GELU hidden width (10240)
 * @num_heads: attention heads (64), from `pos_embedding` dim 1
 * @num_layers: blocks (24)
 * @num_buckets: relative-position buckets (32)
 * @max_distance: relative-position max distance (128; not in the weights)
 * @eps: RMS norm epsilon (1e-6)
 *
 * Inferred from the tensor shapes of a checkpoint (spec 5.1).
 */
typedef struct
{
  int64_t vocab;
  int64_t dim;
  int64_t dim_attn;
  int64_t dim_ffn;
  int num_heads;
  int num_layers;
  int num_buckets;
  int max_distance;
  float eps;
} LingbotTextEncoderConfig;

typedef struct _LingbotTextEncoder LingbotTextEncoder;

int lingbot_t5_relative_bucket (int64_t rel, int num_buckets, int max_distance);

LingbotTextEncoder *lingbot_text_encoder_new (LingbotCheckpoint * ckpt,
    LbStream * stream, GError ** error);
LingbotTextEncoder *lingbot_text_encoder_load (const char *path,
    LbStream * stream, GError ** error);
void lingbot_text_encoder_free (LingbotTextEncoder * enc);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotTextEncoder, lingbot_text_encoder_free)
const LingbotTextEncoderConfig *lingbot_text_encoder_get_config
    (LingbotTextEncoder * enc);

gboolean lingbot_text_encoder_forward (LingbotTextEncoder * enc,
    const int32_t * ids, const uint8_t * mask, int64_t seq_len,
    LbTensor * out, LbTensor ** block_out, GError ** error);

LbTensor *lingbot_text_encoder_encode_ids (LingbotTextEncoder * enc,
    const int32_t * ids, const uint8_t * mask, int64_t seq_len,
    GError ** error);

LbTensor *lingbot_text_encoder_encode_prompt (LingbotTextEncoder * enc,
    LingbotTokenizer * tokenizer, const char *prompt, GError ** error);

/* ---- prompt-embeds files ---- */

gboolean lingbot_prompt_embeds_save (const char *path,
    const LbTensor * context, const char *prompt, int n_tokens,
    GError ** error);
LbTensor *lingbot_prompt_embeds_load (const char *path, int64_t seq_len,
    int64_t dim, GError ** error);

LbTensor *lingbot_prompt_context_new (LbStream * stream,
    const char *prompt_embeds_path, const char *t5_path,
    const char *tokenizer_path, const char *prompt, int64_t dim,
    GError ** error);

G_END_DECLS

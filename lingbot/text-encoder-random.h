/* lingbot-gst: random-weight umT5 encoders (lingbot-mkmodel --full, tests)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include "kernels/tensor.h"
#include "lingbot/text-encoder.h"
#include "lingbot/checkpoint.h"

G_BEGIN_DECLS

/**
 * LINGBOT_TEXT_ENCODER_MAX_RANDOM_VOCAB:
 *
 * The largest vocabulary of a random (or dummy) umT5 (the release's is
 * 256384).
 */
#define LINGBOT_TEXT_ENCODER_MAX_RANDOM_VOCAB (1 << 20)

void lingbot_text_encoder_config_init_tiny (LingbotTextEncoderConfig * cfg,
    int64_t dim, int64_t vocab);
gboolean lingbot_text_encoder_write_random (const char *path,
    const LingbotTextEncoderConfig * cfg, LbDType dtype, guint64 seed,
    GError ** error);
LingbotCheckpoint *lingbot_text_encoder_random_checkpoint (const char *label,
    const LingbotTextEncoderConfig * cfg, LbDType dtype, guint64 seed,
    GError ** error);

G_END_DECLS

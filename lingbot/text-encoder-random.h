/* lingbot-gst: random-weight umT5 encoders (lingbot-mkmodel --full, tests)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include "kernels/tensor.h"
#include "lingbot/text-encoder.h"

G_BEGIN_DECLS

void lingbot_text_encoder_config_init_tiny (LingbotTextEncoderConfig * cfg,
    int64_t dim, int64_t vocab);
gboolean lingbot_text_encoder_write_random (const char *path,
    const LingbotTextEncoderConfig * cfg, LbDType dtype, guint64 seed,
    GError ** error);

G_END_DECLS

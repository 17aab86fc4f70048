/* lingbot-gst: lingbotgen, control in -> latent chunks out
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gst/gst.h>
#include "lingbot/lingbot.h"
#include "gst/lingbot/gstlingbotmemory.h"

G_BEGIN_DECLS

/**
 * GST_LINGBOT_LATENT_CAPS:
 *
 * Latent chunks: one buffer per chunk holding f32 [channels, frames,
 * height, width] latents (the VAE's 16 channels, `frames` latent frames,
 * the latent grid = video size / 8), with a #GstLingbotChunkMeta naming
 * the session; `video-width`/`video-height`/`framerate` describe the video
 * a decoder makes of them.  With the caps feature
 * %GST_CAPS_FEATURE_MEMORY_LINGBOT_DEVICE the buffer's memory is a
 * #GstLingbotDeviceMemory (the latents stay in the session, mapping
 * downloads them); without it, system-memory bytes.
 * %GST_LINGBOT_LATENT_ALL_CAPS lists both, the device feature first.
 */
#define GST_LINGBOT_LATENT_MEDIA_TYPE "application/x-lingbot-latent"
#define GST_LINGBOT_LATENT_FIELDS \
    ", dtype = (string) f32, channels = (int) 16, " \
    "frames = (int) [ 1, MAX ], height = (int) [ 1, MAX ], " \
    "width = (int) [ 1, MAX ]"
#define GST_LINGBOT_LATENT_CAPS GST_LINGBOT_LATENT_MEDIA_TYPE \
    GST_LINGBOT_LATENT_FIELDS
#define GST_LINGBOT_LATENT_DEVICE_CAPS GST_LINGBOT_LATENT_MEDIA_TYPE \
    "(" GST_CAPS_FEATURE_MEMORY_LINGBOT_DEVICE ")" GST_LINGBOT_LATENT_FIELDS
#define GST_LINGBOT_LATENT_ALL_CAPS GST_LINGBOT_LATENT_DEVICE_CAPS "; " \
    GST_LINGBOT_LATENT_CAPS

#define GST_TYPE_LINGBOT_GEN (gst_lingbot_gen_get_type ())
G_DECLARE_FINAL_TYPE (GstLingbotGen, gst_lingbot_gen, GST, LINGBOT_GEN,
    GstElement)
GST_ELEMENT_REGISTER_DECLARE (lingbotgen);

void gst_lingbot_gen_install_properties (GObjectClass * klass);

/**
 * GstLingbotPrecision:
 * @GST_LINGBOT_PRECISION_FP32: f32 weights and math ("fp32", the parity mode)
 * @GST_LINGBOT_PRECISION_BF16: bf16 matrix weights and GEMM inputs with f32
 *   accumulation ("bf16", spec 1.11's served precision)
 * @GST_LINGBOT_PRECISION_FP8: opt-in, Hopper and later: E4M3 matrix
 *   weights with per-output-channel scales, per-token E4M3 GEMM inputs,
 *   f32 accumulation; attention as bf16 ("fp8"; CPU ranks run its
 *   oracle)
 *
 * lingbotgen's `precision` property: the DiT's precision on GPU ranks (CPU
 * ranks always compute in fp32).
 */
typedef enum
{
  GST_LINGBOT_PRECISION_FP32,
  GST_LINGBOT_PRECISION_BF16,
  GST_LINGBOT_PRECISION_FP8,
} GstLingbotPrecision;

#define GST_TYPE_LINGBOT_PRECISION (gst_lingbot_precision_get_type ())
GType gst_lingbot_precision_get_type (void);

G_END_DECLS

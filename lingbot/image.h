/* lingbot-gst: reference-image loading and preprocessing
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot_model_spec.md section 6.1-6.2; golden README section 4.
 */
#pragma once

#include <glib.h>
#include "kernels/tensor.h"

G_BEGIN_DECLS

/** LINGBOT_IMAGE_MAX_AREA_480P: pixel budget of "480p" (480*832). */
#define LINGBOT_IMAGE_MAX_AREA_480P (480.0 * 832.0)
/** LINGBOT_IMAGE_MAX_AREA_720P: pixel budget of "720p" (720*1280). */
#define LINGBOT_IMAGE_MAX_AREA_720P (720.0 * 1280.0)
/**
 * LINGBOT_IMAGE_MAX_PIXELS: the most pixels a start image may have
 * (8192 x 8192, 192 MiB decoded): a JPEG whose header declares more is
 * refused before anything is allocated (a decompression bomb of a few
 * hundred bytes can declare 60000 x 60000).
 */
#define LINGBOT_IMAGE_MAX_PIXELS (8192u * 8192u)

gboolean lingbot_image_output_size (int image_width, int image_height,
    double max_area, int *width, int *height, GError ** error);

/**
 * LINGBOT_IMAGE_FULL_DECODE_PIXELS: a reference JPEG of at most this many
 * pixels (4096 x 4096) is always decoded in full, bit-identical to PIL;
 * a larger one at a reduced DCT scale (lingbot_image_jpeg_scale_for()).
 */
#define LINGBOT_IMAGE_FULL_DECODE_PIXELS (4096u * 4096u)
/**
 * LINGBOT_IMAGE_DCT_SCALE_MARGIN: how many times the output size (in both
 * dimensions) a JPEG decoded at a reduced DCT scale must still be
 * (lingbot_image_jpeg_scale_for()).
 */
#define LINGBOT_IMAGE_DCT_SCALE_MARGIN 2

LbTensor *lingbot_image_decode_jpeg (const guint8 * data, gsize length,
    GError ** error);
LbTensor *lingbot_image_decode_jpeg_reduced (const guint8 * data,
    gsize length, int scale_denom, GError ** error);
gboolean lingbot_image_jpeg_get_size (const guint8 * data, gsize length,
    int *width, int *height, GError ** error);
int lingbot_image_jpeg_scale_for (int image_width, int image_height,
    int width, int height);
LbTensor *lingbot_image_load_jpeg (const char *path, GError ** error);

LbTensor *lingbot_image_normalize (const LbTensor * rgb, GError ** error);
LbTensor *lingbot_image_preprocess (const LbTensor * rgb, int width,
    int height, GError ** error);
LbTensor *lingbot_image_load (const char *path, double max_area,
    GError ** error);

G_END_DECLS

/* lingbot-gst: counter-based Gaussian noise (Philox4x32-10 + Box-Muller)
 * and noise read from files
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * DESIGN.md section 4; lingbot_model_spec.md section 3.8.
 *
 * Exact mapping (a CUDA kernel reproduces it bit for bit):
 *
 * - Stream id: `stream = lingbot_noise_stream_id (purpose, step)` =
 *   `(purpose << 16) | step` (initial latent noise: purpose 0, step 0;
 *   re-noise after denoising step s: purpose 1, step s).
 * - Element e (flat, row-major index into the full, unsharded tensor
 *   [16, C, h_lat, w_lat] of one chunk) belongs to block b = e / 4 and lane
 *   l = e % 4.
 * - Philox4x32-10 (Salmon et al. 2011, Random123 constants) with
 *   counter = { lo32(b), hi32(b), chunk, stream } and
 *   key = { lo32(seed), hi32(seed) } gives r[0..3].
 * - Lanes 0,1 use the pair (r0, r1), lanes 2,3 the pair (r2, r3).  For a pair
 *   (a, c): `u1 = ((double) a + 1.0) * 2^-32` (in (0, 1]),
 *   `u2 = (double) c * 2^-32` (in [0, 1)), `rad = sqrt(-2.0 * log(u1))`,
 *   `theta = 6.283185307179586 * u2` (double product), and
 *   lane 0/2 = `(float) (rad * cos(theta))`, lane 1/3 =
 *   `(float) (rad * sin(theta))`, all in IEEE double, rounded to float32
 *   once.  (Double log/sin/cos of glibc and CUDA differ by at most an ulp
 *   of double, so the float32 results agree except in the rare case,
 *   p < 1e-8 per element, where a double result sits on a float32 rounding
 *   boundary.)
 *
 * Every element depends only on (seed, chunk, stream, e): any split of the
 * element range (rank bands) yields exactly the elements of the full tensor.
 */
#pragma once

#include <glib.h>
#include <stdint.h>
#include "kernels/tensor.h"

G_BEGIN_DECLS

/**
 * LingbotNoisePurpose:
 * @LINGBOT_NOISE_INITIAL: the fresh latent noise a chunk starts from
 * @LINGBOT_NOISE_RENOISE: the noise that re-noises x0 after a step
 *
 * Which draw of a chunk; with the step it selects an independent stream.
 */
typedef enum
{
  LINGBOT_NOISE_INITIAL = 0,
  LINGBOT_NOISE_RENOISE = 1,
} LingbotNoisePurpose;

void lingbot_philox4x32_10 (const guint32 counter[4], const guint32 key[2],
    guint32 out[4]);
guint32 lingbot_noise_stream_id (LingbotNoisePurpose purpose, guint step);
void lingbot_noise_normal_range (guint64 seed, guint32 chunk, guint32 stream,
    guint64 first, gsize n, float *out);
void lingbot_noise_normal_rows (guint64 seed, guint32 chunk, guint32 stream,
    int64_t outer, int64_t rows_total, int64_t row_len, int64_t row0,
    int64_t row1, float *out);

typedef struct _LingbotNoise LingbotNoise;

LingbotNoise *lingbot_noise_new_philox (guint64 seed);
LingbotNoise *lingbot_noise_new_from_file (const char *path,
    const char *initial_format, const char *renoise_format, GError ** error);
void lingbot_noise_free (LingbotNoise * noise);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotNoise, lingbot_noise_free)
gboolean lingbot_noise_fill (LingbotNoise * noise, guint chunk,
    LingbotNoisePurpose purpose, guint step, LbTensor * out,
    int64_t rows_total, int64_t row0, GError ** error);

LbTensor *lingbot_noise_read_tensor (const char *path, const char *name,
    GError ** error);

G_END_DECLS

/* lingbot-gst: counter-based Gaussian noise and noise read from files
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "lingbot/noise.h"
#include "lingbot/checkpoint.h"
#include "kernels/error.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

#define TWO_PI 6.283185307179586
#define INV_2_32 2.3283064365386963e-10 /* 2^-32, exact */

/**
 * lingbot_philox4x32_10:
 * @counter: 4 counter words
 * @key: 2 key words
 * @out: (out caller-allocates): 4 output words
 *
 * One block of Philox4x32 with 10 rounds, as Random123's philox4x32_R(10)
 * (multipliers 0xD2511F53 / 0xCD9E8D57, Weyl increments 0x9E3779B9 /
 * 0xBB67AE85).  Known answers: counter 0, key 0 ->
 * 6627e8d5 e169c58d bc57ac4c 9b00dbd8.
 */
void
lingbot_philox4x32_10 (const guint32 counter[4], const guint32 key[2],
    guint32 out[4])
{
  guint32 c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  guint32 k0 = key[0], k1 = key[1];

  for (int r = 0; r < 10; r++) {
    guint64 p0 = (guint64) PHILOX_M0 * c0;
    guint64 p1 = (guint64) PHILOX_M1 * c2;
    guint32 hi0 = (guint32) (p0 >> 32), lo0 = (guint32) p0;
    guint32 hi1 = (guint32) (p1 >> 32), lo1 = (guint32) p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/**
 * lingbot_noise_stream_id:
 * @purpose: which draw of a chunk
 * @step: the denoising step for %LINGBOT_NOISE_RENOISE (0 otherwise)
 *
 * Returns: the counter word that separates the draws of one chunk:
 *   `(purpose << 16) | step`.
 */
guint32
lingbot_noise_stream_id (LingbotNoisePurpose purpose, guint step)
{
  return ((guint32) purpose << 16) | (step & 0xffffu);
}

static inline void
box_muller (guint32 a, guint32 c, float *n0, float *n1)
{
  double u1 = ((double) a + 1.0) * INV_2_32;
  double u2 = (double) c * INV_2_32;
  double rad = sqrt (-2.0 * log (u1));
  double theta = TWO_PI * u2;
  *n0 = (float) (rad * cos (theta));
  *n1 = (float) (rad * sin (theta));
}

static inline void
normal_block (guint64 block, guint32 chunk, guint32 stream,
    const guint32 key[2], float v[4])
{
  guint32 ctr[4] = { (guint32) block, (guint32) (block >> 32), chunk, stream };
  guint32 r[4];

  lingbot_philox4x32_10 (ctr, key, r);
  box_muller (r[0], r[1], &v[0], &v[1]);
  box_muller (r[2], r[3], &v[2], &v[3]);
}

/**
 * lingbot_noise_normal_range:
 * @seed: the session seed
 * @chunk: chunk index (counter word 2)
 * @stream: lingbot_noise_stream_id() (counter word 3)
 * @first: flat index of the first element to produce
 * @n: number of elements
 * @out: (array length=n): standard normal float32 values of elements
 *   [@first, @first + @n) of the stream (see the header for the mapping)
 */
void
lingbot_noise_normal_range (guint64 seed, guint32 chunk, guint32 stream,
    guint64 first, gsize n, float *out)
{
  const guint32 key[2] = { (guint32) seed, (guint32) (seed >> 32) };
  guint64 e = first, end = first + n;
  float v[4];

  /* leading partial block */
  if (e < end && (e & 3)) {
    normal_block (e >> 2, chunk, stream, key, v);
    for (; e < end && (e & 3); e++)
      *out++ = v[e & 3];
  }
  for (; e + 4 <= end; e += 4) {
    normal_block (e >> 2, chunk, stream, key, v);
    memcpy (out, v, sizeof v);
    out += 4;
  }
  if (e < end) {
    normal_block (e >> 2, chunk, stream, key, v);
    for (; e < end; e++)
      *out++ = v[e & 3];
  }
}

/**
 * lingbot_noise_normal_rows:
 * @seed: the session seed
 * @chunk: chunk index
 * @stream: lingbot_noise_stream_id()
 * @outer: number of leading slices of the full tensor (16 * C for a latent)
 * @rows_total: rows of the full tensor (h_lat)
 * @row_len: elements per row (w_lat)
 * @row0: first row of the band
 * @row1: end row of the band (exclusive)
 * @out: (out caller-allocates): contiguous [@outer, @row1 - @row0,
 *   @row_len] float32
 *
 * The height band [@row0, @row1) of the full tensor [@outer, @rows_total,
 * @row_len]: what one Ulysses rank holds.  Equal, element for element, to
 * the same rows of lingbot_noise_normal_range() over the whole tensor.
 */
void
lingbot_noise_normal_rows (guint64 seed, guint32 chunk, guint32 stream,
    int64_t outer, int64_t rows_total, int64_t row_len, int64_t row0,
    int64_t row1, float *out)
{
  int64_t band = (row1 - row0) * row_len;

  g_return_if_fail (row0 >= 0 && row1 <= rows_total && row0 <= row1);
  for (int64_t o = 0; o < outer; o++) {
    guint64 first = (guint64) ((o * rows_total + row0) * row_len);
    lingbot_noise_normal_range (seed, chunk, stream, first, band,
        out + o * band);
  }
}

/* ---- noise sources ---- */

struct _LingbotNoise
{
  guint64 seed;
  LingbotCheckpoint *file;      /* NULL for Philox */
  char *initial_format;
  char *renoise_format;
};

/**
 * lingbot_noise_new_philox:
 * @seed: the session seed (42 in the reference examples)
 *
 * A generated noise source: lingbot_noise_fill() draws from the Philox
 * streams described in the header.  (The values are not those of
 * PyTorch's CUDA generator; parity tests read noise from a file.)
 *
 * Returns: (transfer full): the source.
 */
LingbotNoise *
lingbot_noise_new_philox (guint64 seed)
{
  LingbotNoise *n = g_new0 (LingbotNoise, 1);
  n->seed = seed;
  return n;
}

/**
 * lingbot_noise_new_from_file:
 * @path: a safetensors (or any lingbot_checkpoint_open()) file
 * @initial_format: tensor name of a chunk's initial noise, with `{chunk}`
 *   standing for the chunk index (golden DiT fixture:
 *   `output.chunk{chunk}.step0.x_in`)
 * @renoise_format: tensor name of the re-noise of a step, with `{chunk}`
 *   and `{step}` (golden: `output.chunk{chunk}.step{step}.renoise`)
 * @error: return location for a #GError
 *
 * A noise source that replays stored noise (spec 3.8: bit-exact parity
 * with the reference needs its noise, which is not reproducible here).
 *
 * Returns: (transfer full): the source, or %NULL if the file cannot be
 *   opened.
 */
LingbotNoise *
lingbot_noise_new_from_file (const char *path, const char *initial_format,
    const char *renoise_format, GError ** error)
{
  LingbotCheckpoint *ck = lingbot_checkpoint_open (path, error);
  LingbotNoise *n;

  if (ck == NULL)
    return NULL;
  n = g_new0 (LingbotNoise, 1);
  n->file = ck;
  n->initial_format = g_strdup (initial_format);
  n->renoise_format = g_strdup (renoise_format);
  return n;
}

/**
 * lingbot_noise_free:
 * @noise: (nullable): a noise source
 */
void
lingbot_noise_free (LingbotNoise * noise)
{
  if (noise == NULL)
    return;
  if (noise->file)
    lingbot_checkpoint_unref (noise->file);
  g_free (noise->initial_format);
  g_free (noise->renoise_format);
  g_free (noise);
}

static char *
expand_name (const char *format, guint chunk, guint step)
{
  g_autofree char *c = g_strdup_printf ("%u", chunk);
  g_autofree char *s = g_strdup_printf ("%u", step);
  GString *out = g_string_new (NULL);

  for (const char *p = format; *p;) {
    if (g_str_has_prefix (p, "{chunk}")) {
      g_string_append (out, c);
      p += 7;
    } else if (g_str_has_prefix (p, "{step}")) {
      g_string_append (out, s);
      p += 6;
    } else {
      g_string_append_c (out, *p++);
    }
  }
  return g_string_free (out, FALSE);
}

/**
 * lingbot_noise_fill:
 * @noise: a noise source
 * @chunk: chunk index
 * @purpose: initial noise or re-noise
 * @step: the step for %LINGBOT_NOISE_RENOISE (ignored for the initial draw)
 * @out: a contiguous float32 CPU tensor, ndim >= 2, holding rows
 *   [@row0, @row0 + out->shape[ndim-2]) of the full tensor, e.g.
 *   [16, C, band_rows, w_lat]
 * @rows_total: rows (dim ndim-2) of the full tensor; out->shape[ndim-2]
 *   when @out is the whole tensor
 * @row0: first full-tensor row held by @out
 * @error: return location for a #GError
 *
 * Fills @out with the noise of (@chunk, @purpose, @step).  A file source
 * reads the named tensor (any float dtype) whose element count must be
 * that of the full tensor and whose last dimension must match.
 *
 * Returns: %TRUE on success; %LB_ERROR_SHAPE for a bad @out or band,
 *   %LB_ERROR_NOT_FOUND / %LB_ERROR_SHAPE for a missing or mis-shaped
 *   stored tensor.
 */
gboolean
lingbot_noise_fill (LingbotNoise * noise, guint chunk,
    LingbotNoisePurpose purpose, guint step, LbTensor * out,
    int64_t rows_total, int64_t row0, GError ** error)
{
  int64_t rows, row_len, outer, numel;

  if (out->dtype != LB_DTYPE_F32 || out->device.type != LB_DEVICE_CPU
      || !lb_tensor_is_contiguous (out) || out->ndim < 2) {
    g_autofree char *s = lb_tensor_shape_string (out);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "noise: output must be a contiguous float32 CPU tensor of >= 2 "
        "dims, got %s %s", lb_dtype_name (out->dtype), s);
    return FALSE;
  }
  rows = out->shape[out->ndim - 2];
  row_len = out->shape[out->ndim - 1];
  numel = lb_tensor_numel (out);
  outer = rows * row_len > 0 ? numel / (rows * row_len) : 0;
  if (row0 < 0 || row0 + rows > rows_total) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "noise: rows [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
        ") outside a tensor of %" G_GINT64_FORMAT " rows", row0, row0 + rows,
        rows_total);
    return FALSE;
  }
  if (purpose == LINGBOT_NOISE_INITIAL)
    step = 0;

  if (noise->file == NULL) {
    lingbot_noise_normal_rows (noise->seed, chunk,
        lingbot_noise_stream_id (purpose, step), outer, rows_total, row_len,
        row0, row0 + rows, out->data);
    return TRUE;
  }

  {
    g_autofree char *name = expand_name (purpose == LINGBOT_NOISE_INITIAL ?
        noise->initial_format : noise->renoise_format, chunk, step);
    const LbTensor *src = lingbot_checkpoint_get (noise->file, name, error);
    g_autoptr (LbTensor) f = NULL;
    const float *s;
    float *d = out->data;

    if (src == NULL)
      return FALSE;
    if (lb_tensor_numel (src) != outer * rows_total * row_len
        || src->shape[src->ndim - 1] != row_len) {
      g_autofree char *ss = lb_tensor_shape_string (src);
      g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
          "noise: stored tensor '%s' has shape %s, expected %"
          G_GINT64_FORMAT " x %" G_GINT64_FORMAT " x %" G_GINT64_FORMAT,
          name, ss, outer, rows_total, row_len);
      return FALSE;
    }
    f = lb_tensor_to_f32 (src);
    s = f->data;
    for (int64_t o = 0; o < outer; o++)
      memcpy (d + o * rows * row_len,
          s + (o * rows_total + row0) * row_len,
          (gsize) (rows * row_len) * sizeof (float));
  }
  return TRUE;
}

/**
 * lingbot_noise_read_tensor:
 * @path: a checkpoint file (safetensors, .npy, .pth)
 * @name: the tensor name (ignored for .npy)
 * @error: return location for a #GError
 *
 * Reads one stored noise (or any) tensor as a new contiguous float32 CPU
 * tensor.
 *
 * Returns: (transfer full): the tensor, or %NULL with @error set.
 */
LbTensor *
lingbot_noise_read_tensor (const char *path, const char *name, GError ** error)
{
  g_autoptr (LingbotCheckpoint) ck = lingbot_checkpoint_open (path, error);
  const LbTensor *t;

  if (ck == NULL)
    return NULL;
  if (lingbot_checkpoint_get_format (ck) == LINGBOT_CHECKPOINT_NPY) {
    guint n = 0;
    const char *const *names = lingbot_checkpoint_list_tensors (ck, &n);
    if (n == 0) {
      g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND, "%s holds no array",
          path);
      return NULL;
    }
    name = names[0];
  }
  t = lingbot_checkpoint_get (ck, name, error);
  if (t == NULL)
    return NULL;
  /* the copy outlives the mapping */
  return lb_tensor_to_f32 (t);
}

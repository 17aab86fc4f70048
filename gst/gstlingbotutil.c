/* lingbot-gst: helpers private to the plugin
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <glib/gstdio.h>

#include "gst/gstlingbotutil.h"
#include "kernels/error.h"

/**
 * gst_lingbot_error_map:
 * @error: (nullable): a library error
 * @ctx: where it happened
 * @domain: (out): a GStreamer error domain
 * @code: (out): its code
 *
 * The error domains and codes of the plugin (docs/elements.md):
 * %LB_ERROR_NOT_FOUND -> RESOURCE/NOT_FOUND; %LB_ERROR_IO and
 * %LB_ERROR_FORMAT (a file that cannot be read as what it should be) ->
 * RESOURCE/OPEN_READ; %LB_ERROR_DEVICE, %LB_ERROR_UNSUPPORTED,
 * %LB_ERROR_RANK_FAILED, %LB_ERROR_TIMEOUT while starting -> LIBRARY/INIT;
 * %LB_ERROR_INVALID_ARGUMENT while starting -> LIBRARY/SETTINGS; anything
 * else -> LIBRARY/INIT when starting, STREAM/FAILED while streaming.
 */
void
gst_lingbot_error_map (const GError * error, GstLingbotErrorContext ctx,
    GQuark * domain, gint * code)
{
  gboolean open = ctx == GST_LINGBOT_ERROR_CONTEXT_OPEN;

  *domain = open ? GST_LIBRARY_ERROR : GST_STREAM_ERROR;
  *code = open ? GST_LIBRARY_ERROR_INIT : GST_STREAM_ERROR_FAILED;
  if (error == NULL || error->domain != LB_ERROR)
    return;
  switch (error->code) {
    case LB_ERROR_NOT_FOUND:
      *domain = GST_RESOURCE_ERROR;
      *code = GST_RESOURCE_ERROR_NOT_FOUND;
      break;
    case LB_ERROR_IO:
    case LB_ERROR_FORMAT:
      *domain = GST_RESOURCE_ERROR;
      *code = GST_RESOURCE_ERROR_OPEN_READ;
      break;
    case LB_ERROR_DEVICE:
    case LB_ERROR_UNSUPPORTED:
    case LB_ERROR_RANK_FAILED:
    case LB_ERROR_TIMEOUT:
      if (open) {
        *domain = GST_LIBRARY_ERROR;
        *code = GST_LIBRARY_ERROR_INIT;
      }
      break;
    case LB_ERROR_INVALID_ARGUMENT:
      if (open) {
        *domain = GST_LIBRARY_ERROR;
        *code = GST_LIBRARY_ERROR_SETTINGS;
      }
      break;
    default:
      break;
  }
}

/**
 * gst_lingbot_post_error_full:
 * @element: the element posting
 * @error: (nullable): the library error, mapped by gst_lingbot_error_map()
 * @ctx: where it happened
 * @text: the message (translated-style, for the user)
 * @debug: (nullable): debug details
 * @file: source file
 * @function: function
 * @line: line
 *
 * GST_ELEMENT_ERROR() with a domain and code chosen at run time.
 */
void
gst_lingbot_post_error_full (GstElement * element, const GError * error,
    GstLingbotErrorContext ctx, const char *text, const char *debug,
    const char *file, const char *function, int line)
{
  GQuark domain;
  gint code;

  gst_lingbot_error_map (error, ctx, &domain, &code);
  GST_WARNING_OBJECT (element, "error: %s", text);
  gst_element_message_full (element, GST_MESSAGE_ERROR, domain, code,
      g_strdup (text), g_strdup (debug), file, function, line);
}

/**
 * gst_lingbot_buffer_try_new:
 * @size: bytes
 *
 * A system-memory buffer of @size bytes allocated with g_try_malloc(): for
 * the allocations whose size comes from input (caps, a reference image),
 * where a failure must become an element error rather than an abort.
 *
 * Returns: (transfer full) (nullable): the buffer, or %NULL when the memory
 *   cannot be had.
 */
GstBuffer *
gst_lingbot_buffer_try_new (gsize size)
{
  gpointer data = g_try_malloc (MAX (size, 1));

  if (data == NULL)
    return NULL;
  return gst_buffer_new_wrapped_full (0, data, size, 0, size, data, g_free);
}

/**
 * gst_lingbot_check_readable:
 * @path: a file the element is going to read
 * @domain: (out): RESOURCE on failure
 * @code: (out): NOT_FOUND when @path does not exist, OPEN_READ when it
 *   exists but cannot be read as a file (permissions, a directory)
 * @error: (out): the reason
 *
 * Returns: %TRUE when the file can be opened and read.
 */
gboolean
gst_lingbot_check_readable (const char *path, GQuark * domain, gint * code,
    GError ** error)
{
  FILE *f;
  int saved;

  *domain = GST_RESOURCE_ERROR;
  if (!g_file_test (path, G_FILE_TEST_EXISTS)) {
    *code = GST_RESOURCE_ERROR_NOT_FOUND;
    g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND, "'%s' does not exist",
        path);
    return FALSE;
  }
  *code = GST_RESOURCE_ERROR_OPEN_READ;
  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR)) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "'%s' is not a regular file",
        path);
    return FALSE;
  }
  f = g_fopen (path, "rb");
  if (f == NULL) {
    saved = errno;
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "cannot open '%s': %s", path,
        g_strerror (saved));
    return FALSE;
  }
  if (fgetc (f) == EOF && ferror (f)) {
    saved = errno;
    fclose (f);
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "cannot read '%s': %s", path,
        g_strerror (saved));
    return FALSE;
  }
  fclose (f);
  return TRUE;
}

/* ---- frame conversions (the rounding of lingbot/vae-convert.c) ---- */

static gboolean
check_frames (const LbTensor * frames, int frame, int64_t * H, int64_t * W,
    gboolean even, GError ** error)
{
  if (frames->dtype != LB_DTYPE_F32 || frames->device.type != LB_DEVICE_CPU
      || frames->ndim != 4 || frames->shape[0] != 3 || frame < 0
      || frame >= frames->shape[1]) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "VAE frames: expected CPU f32 [3, T, H, W] with 0 <= frame < T");
    return FALSE;
  }
  *H = frames->shape[2];
  *W = frames->shape[3];
  if (even && (*H % 2 || *W % 2)) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "VAE frames: NV12 needs even sizes, got %" G_GINT64_FORMAT "x%"
        G_GINT64_FORMAT, *W, *H);
    return FALSE;
  }
  return TRUE;
}

static inline const float *
plane_row (const LbTensor * f, int c, int frame, int64_t row)
{
  return (const float *) f->data + c * f->stride[0] + frame * f->stride[1]
      + row * f->stride[2];
}

/**
 * gst_lingbot_frames_to_rgba:
 * @frames: f32 [3, T, H, W] decoded frames (CPU, any strides)
 * @frame: which frame
 * @dst: H rows of W packed R, G, B, A bytes (A = 255)
 * @dst_stride: bytes between rows (>= 4 W)
 * @error: %LB_ERROR_SHAPE
 *
 * lingbot_vae_frames_to_rgb8() with an opaque alpha byte: R, G, B are the
 * same bytes (lingbot_vae_value_to_u8()).
 *
 * Returns: %TRUE on success.
 */
gboolean
gst_lingbot_frames_to_rgba (const LbTensor * frames, int frame, guint8 * dst,
    gsize dst_stride, GError ** error)
{
  int64_t H, W, sw;

  if (!check_frames (frames, frame, &H, &W, FALSE, error))
    return FALSE;
  sw = frames->stride[3];
  for (int64_t y = 0; y < H; y++) {
    const float *r = plane_row (frames, 0, frame, y);
    const float *g = plane_row (frames, 1, frame, y);
    const float *b = plane_row (frames, 2, frame, y);
    guint8 *d = dst + y * dst_stride;

    for (int64_t x = 0; x < W; x++) {
      d[4 * x] = lingbot_vae_value_to_u8 (r[x * sw]);
      d[4 * x + 1] = lingbot_vae_value_to_u8 (g[x * sw]);
      d[4 * x + 2] = lingbot_vae_value_to_u8 (b[x * sw]);
      d[4 * x + 3] = 255;
    }
  }
  return TRUE;
}

/* BT.601 limited range, the integer coefficients of lingbot/vae-convert.c */
static inline guint8
rgb_to_y (int r, int g, int b)
{
  return (guint8) (((66 * r + 129 * g + 25 * b + 128) >> 8) + 16);
}

static inline guint8
rgb_to_u (int r, int g, int b)
{
  return (guint8) (((-38 * r - 74 * g + 112 * b + 128) >> 8) + 128);
}

static inline guint8
rgb_to_v (int r, int g, int b)
{
  return (guint8) (((112 * r - 94 * g - 18 * b + 128) >> 8) + 128);
}

/**
 * gst_lingbot_frames_to_nv12:
 * @frames: f32 [3, T, H, W] decoded frames (CPU, any strides), H, W even
 * @frame: which frame
 * @y: H rows of W luma bytes
 * @y_stride: bytes between luma rows
 * @uv: H/2 rows of W/2 interleaved Cb, Cr pairs
 * @uv_stride: bytes between chroma rows
 * @error: %LB_ERROR_SHAPE
 *
 * Byte-identical to lingbot_vae_frames_to_i420() with the chroma planes
 * interleaved: values quantised as lingbot_vae_frames_to_rgb8() does,
 * BT.601 limited-range integer coefficients, chroma from the rounded mean
 * of each 2x2 block's RGB.
 *
 * Returns: %TRUE on success.
 */
gboolean
gst_lingbot_frames_to_nv12 (const LbTensor * frames, int frame, guint8 * y,
    gsize y_stride, guint8 * uv, gsize uv_stride, GError ** error)
{
  int64_t H, W, sw;

  if (!check_frames (frames, frame, &H, &W, TRUE, error))
    return FALSE;
  sw = frames->stride[3];
  for (int64_t yy = 0; yy < H / 2; yy++) {
    const float *p[2][3];
    guint8 *y0 = y + (2 * yy) * y_stride, *y1 = y0 + y_stride;
    guint8 *uvr = uv + yy * uv_stride;

    for (int k = 0; k < 2; k++)
      for (int c = 0; c < 3; c++)
        p[k][c] = plane_row (frames, c, frame, 2 * yy + k);
    for (int64_t xx = 0; xx < W / 2; xx++) {
      int sr = 0, sg = 0, sb = 0;

      for (int k = 0; k < 2; k++)
        for (int j = 0; j < 2; j++) {
          int64_t x = (2 * xx + j) * sw;
          int r = lingbot_vae_value_to_u8 (p[k][0][x]);
          int g = lingbot_vae_value_to_u8 (p[k][1][x]);
          int b = lingbot_vae_value_to_u8 (p[k][2][x]);

          (k ? y1 : y0)[2 * xx + j] = rgb_to_y (r, g, b);
          sr += r;
          sg += g;
          sb += b;
        }
      sr = (sr + 2) >> 2;
      sg = (sg + 2) >> 2;
      sb = (sb + 2) >> 2;
      uvr[2 * xx] = rgb_to_u (sr, sg, sb);
      uvr[2 * xx + 1] = rgb_to_v (sr, sg, sb);
    }
  }
  return TRUE;
}

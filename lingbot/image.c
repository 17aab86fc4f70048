/* lingbot-gst: reference-image loading and preprocessing
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "lingbot/image.h"
#include "kernels/backend.h"
#include "kernels/error.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>

/**
 * lingbot_image_output_size:
 * @image_width: source width (pixels)
 * @image_height: source height
 * @max_area: pixel budget (%LINGBOT_IMAGE_MAX_AREA_480P)
 * @width: (out): output width, a multiple of 16
 * @height: (out): output height, a multiple of 16
 * @error: return location for a #GError
 *
 * Spec 6.1 in float64: ar = H/W, H' = floor(sqrt(A*ar)/16)*16,
 * W' = floor(sqrt(A/ar)/16)*16, each floored independently.  5145x2894 at
 * 480p gives 832x464 (not 832x480); at A = 4224, 80x48.
 *
 * Returns: %TRUE; %FALSE with %LB_ERROR_INVALID_ARGUMENT when a size is
 *   not positive or the budget gives an empty size.
 */
gboolean
lingbot_image_output_size (int image_width, int image_height,
    double max_area, int *width, int *height, GError ** error)
{
  double ar;
  int w, h;

  if (image_width <= 0 || image_height <= 0 || !(max_area > 0.0)) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "image: need a positive size and pixel budget, got %dx%d, %g",
        image_width, image_height, max_area);
    return FALSE;
  }
  ar = (double) image_height / (double) image_width;
  h = (int) floor (sqrt (max_area * ar) / 16.0) * 16;
  w = (int) floor (sqrt (max_area / ar) / 16.0) * 16;
  if (w <= 0 || h <= 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "image: a pixel budget of %g gives an empty %dx%d output for a "
        "%dx%d image", max_area, w, h, image_width, image_height);
    return FALSE;
  }
  *width = w;
  *height = h;
  return TRUE;
}

/* ---- JPEG (libjpeg-turbo, the decoder PIL uses) ---- */

typedef struct
{
  struct jpeg_error_mgr pub;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
} JpegErr;

static void
jpeg_error_exit (j_common_ptr cinfo)
{
  JpegErr *e = (JpegErr *) cinfo->err;
  (*cinfo->err->format_message) (cinfo, e->message);
  longjmp (e->jump, 1);
}

static void
jpeg_no_output (j_common_ptr cinfo)
{
  /* warnings (corrupt-data recoveries) stay silent, as in PIL */
}

/* libjpeg pads a stream that ends early with an EOI and only warns
 * (JWRN_JPEG_EOF); PIL refuses such a file ("image file is truncated"),
 * and so does this loader, with an error instead of a grey lower part.
 * Every other warning goes to jpeg_no_output. */
static void
jpeg_emit_message (j_common_ptr cinfo, int msg_level)
{
  JpegErr *e = (JpegErr *) cinfo->err;

  if (msg_level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    g_strlcpy (e->message, "truncated: the data ends before the image does",
        sizeof e->message);
    longjmp (e->jump, 1);
  }
  if (msg_level < 0)
    cinfo->err->num_warnings++;
}

/* Everything the setjmp frame needs survives in this struct, so no local
 * is modified between setjmp and longjmp. */
typedef struct
{
  struct jpeg_decompress_struct cinfo;
  JpegErr err;
  LbTensor *out;
  int scale_denom;              /* 1, 2, 4 or 8 */
  gboolean header_only;         /* stop after the header checks */
  gboolean ok;
  gboolean unsupported;
  gboolean too_big;
} JpegJob;

static gboolean
decode_into (JpegJob * job, const guint8 * data, gsize length)
{
  struct jpeg_decompress_struct *ci = &job->cinfo;

  jpeg_mem_src (ci, data, (unsigned long) length);
  jpeg_read_header (ci, TRUE);
  if (ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK) {
    g_strlcpy (job->err.message, "CMYK JPEG images are not supported",
        sizeof job->err.message);
    return FALSE;
  }
  /* PIL's defaults: islow IDCT, fancy upsampling, no scaling; grey images
   * are expanded to RGB by libjpeg exactly as PIL's convert("RGB") does */
  ci->out_color_space = JCS_RGB;
  ci->dct_method = JDCT_ISLOW;
  ci->do_fancy_upsampling = TRUE;
  /* the header's size against the cap before anything is allocated or
   * decoded: a few hundred bytes may declare 60000x60000 */
  if ((guint64) ci->image_width * ci->image_height > LINGBOT_IMAGE_MAX_PIXELS) {
    g_snprintf (job->err.message, sizeof job->err.message,
        "%ux%u pixels is more than an image may have (%u pixels, "
        "LINGBOT_IMAGE_MAX_PIXELS)", (guint) ci->image_width,
        (guint) ci->image_height, (guint) LINGBOT_IMAGE_MAX_PIXELS);
    job->too_big = TRUE;
    return FALSE;
  }
  if (job->header_only)
    return TRUE;
  /* DCT scaling (lingbot_image_jpeg_scale_for()): the IDCT produces
   * 1/scale_denom of the pixels directly */
  ci->scale_num = 1;
  ci->scale_denom = (unsigned) job->scale_denom;
  jpeg_start_decompress (ci);
  {
    int64_t shape[3] = { ci->output_height, ci->output_width, 3 };
    g_autoptr (GError) aerr = NULL;
    job->out = lb_tensor_try_new (LB_DTYPE_U8, 3, shape, &aerr);
    if (job->out == NULL) {
      g_strlcpy (job->err.message, aerr->message, sizeof job->err.message);
      job->too_big = TRUE;
      return FALSE;
    }
  }
  while (ci->output_scanline < ci->output_height) {
    JSAMPROW row = (guint8 *) job->out->data +
        (gsize) ci->output_scanline * ci->output_width * 3;
    jpeg_read_scanlines (ci, &row, 1);
  }
  jpeg_finish_decompress (ci);
  return TRUE;
}

/* Runs @job on @data: the header checks, then (unless header_only) the
 * decode at 1/job->scale_denom.  Returns the pixels, or NULL; a
 * header-only run returns NULL with job->ok set. */
static LbTensor *
jpeg_run (JpegJob * job, const guint8 * data, gsize length, GError ** error)
{
  LbTensor *out = NULL;

  job->cinfo.err = jpeg_std_error (&job->err.pub);
  job->err.pub.error_exit = jpeg_error_exit;
  job->err.pub.output_message = jpeg_no_output;
  job->err.pub.emit_message = jpeg_emit_message;
  jpeg_create_decompress (&job->cinfo);
  if (setjmp (job->err.jump) == 0) {
    job->ok = decode_into (job, data, length);
    job->unsupported = !job->ok;
  }
  if (job->ok) {
    out = job->out;
  } else {
    g_set_error (error, LB_ERROR, job->too_big ? LB_ERROR_INVALID_ARGUMENT :
        job->unsupported ? LB_ERROR_UNSUPPORTED : LB_ERROR_FORMAT,
        "JPEG: %s", job->err.message);
    if (job->out)
      lb_tensor_free (job->out);
  }
  return out;
}

/**
 * lingbot_image_decode_jpeg:
 * @data: (array length=length): JPEG bytes
 * @length: byte count
 * @error: return location for a #GError
 *
 * Decodes to RGB with libjpeg-turbo using PIL's settings (JDCT_ISLOW,
 * fancy upsampling), so the pixels equal PIL `Image.open().convert("RGB")`
 * on the same libjpeg-turbo bit for bit.
 *
 * Images of more than %LINGBOT_IMAGE_MAX_PIXELS pixels are refused from
 * their header, before anything is allocated or decoded.  A stream that
 * ends before the image does is refused, as PIL refuses it.
 *
 * Returns: (transfer full): uint8 [H, W, 3], or %NULL with
 *   %LB_ERROR_FORMAT (libjpeg's message; "truncated: ..." for a short stream), %LB_ERROR_UNSUPPORTED (CMYK) or
 *   %LB_ERROR_INVALID_ARGUMENT (too many pixels, or no memory for them).
 */
LbTensor *
lingbot_image_decode_jpeg (const guint8 * data, gsize length, GError ** error)
{
  return lingbot_image_decode_jpeg_reduced (data, length, 1, error);
}

/**
 * lingbot_image_decode_jpeg_reduced:
 * @data: (array length=length): JPEG bytes
 * @length: byte count
 * @scale_denom: 1, 2, 4 or 8 (lingbot_image_jpeg_scale_for())
 * @error: return location for a #GError
 *
 * lingbot_image_decode_jpeg() with libjpeg's DCT scaling (`scale_num` 1,
 * `scale_denom` @scale_denom): the IDCT outputs ceil(W / @scale_denom) x
 * ceil(H / @scale_denom) pixels directly, so a large image costs
 * @scale_denom^2 times less memory and much less time to decode.  The
 * pixels are libjpeg-turbo's own scaled decode (islow IDCT, fancy
 * upsampling), not PIL's full decode: only @scale_denom 1 is
 * bit-identical to PIL.  Every coefficient is still read, so a truncated
 * or corrupt stream is refused as by the full decode.
 *
 * Returns: (transfer full): uint8 [ceil(H / d), ceil(W / d), 3], or %NULL
 *   with the errors of lingbot_image_decode_jpeg() (%LB_ERROR_INVALID_ARGUMENT
 *   also for a @scale_denom other than 1, 2, 4, 8).
 */
LbTensor *
lingbot_image_decode_jpeg_reduced (const guint8 * data, gsize length,
    int scale_denom, GError ** error)
{
  if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 &&
      scale_denom != 8) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "JPEG: scale 1/%d is not one of 1, 1/2, 1/4, 1/8", scale_denom);
    return NULL;
  }
  JpegJob *job = g_new0 (JpegJob, 1);
  job->scale_denom = scale_denom;
  LbTensor *out = jpeg_run (job, data, length, error);
  jpeg_destroy_decompress (&job->cinfo);
  g_free (job);
  return out;
}

/**
 * lingbot_image_jpeg_get_size:
 * @data: (array length=length): JPEG bytes
 * @length: byte count
 * @width: (out): the image's width in pixels
 * @height: (out): its height
 * @error: return location for a #GError
 *
 * Reads the header alone, with the checks lingbot_image_decode_jpeg()
 * makes before it allocates anything (CMYK, %LINGBOT_IMAGE_MAX_PIXELS):
 * the size to choose the output size and the DCT scale from.
 *
 * Returns: %TRUE, or %FALSE with the header errors of
 *   lingbot_image_decode_jpeg().
 */
gboolean
lingbot_image_jpeg_get_size (const guint8 * data, gsize length, int *width,
    int *height, GError ** error)
{
  JpegJob *job = g_new0 (JpegJob, 1);
  job->header_only = TRUE;
  job->scale_denom = 1;
  jpeg_run (job, data, length, error);
  gboolean ok = job->ok;
  if (ok) {
    *width = (int) job->cinfo.image_width;
    *height = (int) job->cinfo.image_height;
  }
  jpeg_destroy_decompress (&job->cinfo);
  g_free (job);
  return ok;
}

/**
 * lingbot_image_jpeg_scale_for:
 * @image_width: the JPEG's width in pixels
 * @image_height: its height
 * @width: the width the image is resized to (lingbot_image_preprocess())
 * @height: the height it is resized to
 *
 * The DCT scale a session decodes its reference JPEG at.  An image of at
 * most %LINGBOT_IMAGE_FULL_DECODE_PIXELS pixels (4096 x 4096) is decoded
 * in full, bit-identical to PIL: every image of normal size, e.g. the
 * golden data's 5145x2894 for any output size.  A larger one (up to
 * %LINGBOT_IMAGE_MAX_PIXELS, 8192 x 8192) is decoded at the coarsest of
 * 1/2, 1/4, 1/8 whose size (ceil(W / d) x ceil(H / d)) is still at least
 * %LINGBOT_IMAGE_DCT_SCALE_MARGIN (2) times @width x @height in both
 * dimensions, so the bicubic resize that follows still shrinks it; in
 * full when even 1/2 would not be.  An 8192x8192 image for 624x624 (480p)
 * is decoded at 1/4: 2048x2048, 12 MiB of RGB and 48 MiB normalised,
 * instead of 192 and 768 MiB.  The pixels then differ from PIL's full
 * decode resized (libjpeg's scaled IDCT averages what the reference's
 * bicubic resize, without antialiasing, samples).
 *
 * Returns: 1, 2, 4 or 8 (1 when a size is not positive).
 */
int
lingbot_image_jpeg_scale_for (int image_width, int image_height, int width,
    int height)
{
  int best = 1;

  if (image_width <= 0 || image_height <= 0 || width <= 0 || height <= 0 ||
      (guint64) image_width * (guint64) image_height <=
      LINGBOT_IMAGE_FULL_DECODE_PIXELS)
    return 1;
  for (int d = 2; d <= 8; d *= 2) {
    gint64 w = ((gint64) image_width + d - 1) / d;
    gint64 h = ((gint64) image_height + d - 1) / d;
    if (w >= (gint64) LINGBOT_IMAGE_DCT_SCALE_MARGIN * width &&
        h >= (gint64) LINGBOT_IMAGE_DCT_SCALE_MARGIN * height)
      best = d;
  }
  return best;
}

/**
 * lingbot_image_load_jpeg:
 * @path: a JPEG file
 * @error: return location for a #GError
 *
 * lingbot_image_decode_jpeg() on a file's contents.
 *
 * Returns: (transfer full): uint8 [H, W, 3], or %NULL (%LB_ERROR_IO when
 *   the file cannot be read).
 */
LbTensor *
lingbot_image_load_jpeg (const char *path, GError ** error)
{
  g_autoptr (GMappedFile) map = NULL;
  g_autoptr (GError) ferr = NULL;
  LbTensor *t;

  map = g_mapped_file_new (path, FALSE, &ferr);
  if (map == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s", ferr->message);
    return NULL;
  }
  t = lingbot_image_decode_jpeg ((const guint8 *)
      g_mapped_file_get_contents (map), g_mapped_file_get_length (map), error);
  if (t == NULL)
    g_prefix_error (error, "%s: ", path);
  return t;
}

static gboolean
check_rgb (const LbTensor * rgb, GError ** error)
{
  if (rgb->dtype != LB_DTYPE_U8 || rgb->ndim != 3 || rgb->shape[2] != 3
      || rgb->device.type != LB_DEVICE_CPU || !lb_tensor_is_contiguous (rgb)
      || rgb->shape[0] < 1 || rgb->shape[1] < 1) {
    g_autofree char *s = lb_tensor_shape_string (rgb);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "image: expected a contiguous uint8 [H, W, 3] CPU tensor, got %s %s",
        lb_dtype_name (rgb->dtype), s);
    return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_image_normalize:
 * @rgb: uint8 [H, W, 3] RGB (contiguous, CPU)
 * @error: return location for a #GError
 *
 * Spec 6.2 step 1: `((x / 255) - 0.5) / 0.5` in float32, channel-first.
 *
 * Returns: (transfer full): float32 [3, H, W] in [-1, 1], or %NULL with
 *   %LB_ERROR_SHAPE, or %LB_ERROR_DEVICE when its memory cannot be had
 *   ("image: normalised f32 [3, H, W]: cannot allocate N bytes of host
 *   memory").
 */
LbTensor *
lingbot_image_normalize (const LbTensor * rgb, GError ** error)
{
  int64_t h, w, shape[3];
  LbTensor *out;
  const guint8 *s;
  float *d, lut[256];

  if (!check_rgb (rgb, error))
    return NULL;
  h = rgb->shape[0];
  w = rgb->shape[1];
  shape[0] = 3;
  shape[1] = h;
  shape[2] = w;
  /* sized by the image: an error, not an abort */
  out = lb_tensor_try_new (LB_DTYPE_F32, 3, shape, error);
  if (out == NULL) {
    g_prefix_error (error, "image: normalised f32 [3, %" G_GINT64_FORMAT
        ", %" G_GINT64_FORMAT "]: ", h, w);
    return NULL;
  }
  for (int v = 0; v < 256; v++) {
    float x = (float) v / 255.0f;
    lut[v] = (x - 0.5f) / 0.5f;
  }
  s = rgb->data;
  d = out->data;
  for (int64_t i = 0; i < h * w; i++) {
    d[i] = lut[s[3 * i]];
    d[h * w + i] = lut[s[3 * i + 1]];
    d[2 * h * w + i] = lut[s[3 * i + 2]];
  }
  return out;
}

/**
 * lingbot_image_preprocess:
 * @rgb: uint8 [H, W, 3] RGB
 * @width: output width (lingbot_image_output_size())
 * @height: output height
 * @error: return location for a #GError
 *
 * Spec 6.2: lingbot_image_normalize(), then a bicubic resize of the whole
 * image to @height x @width with PyTorch semantics (A = -0.75, half-pixel
 * centres, no antialias, border clamp, not clamped afterwards) using the
 * CPU backend's resize_bicubic op.
 *
 * Returns: (transfer full): float32 [3, @height, @width], or %NULL with
 *   @error set (%LB_ERROR_DEVICE when the normalised image or the output
 *   cannot be allocated: the message names the tensor and its bytes).
 */
LbTensor *
lingbot_image_preprocess (const LbTensor * rgb, int width, int height,
    GError ** error)
{
  g_autoptr (LbTensor) norm = NULL;
  LbBackend *cpu = lb_cpu_backend ();
  LbStream *s;
  LbTensor *out;
  int64_t shape[3] = { 3, height, width };
  gboolean ok;

  if (width <= 0 || height <= 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "image: output size %dx%d is not positive", width, height);
    return NULL;
  }
  norm = lingbot_image_normalize (rgb, error);
  if (norm == NULL)
    return NULL;
  if (cpu->ops->resize_bicubic == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "image: the CPU backend has no resize_bicubic op");
    return NULL;
  }
  /* sized by the session: an error, not an abort */
  out = lb_tensor_try_new (LB_DTYPE_F32, 3, shape, error);
  if (out == NULL) {
    g_prefix_error (error, "image: resized f32 [3, %d, %d]: ", height, width);
    return NULL;
  }
  s = cpu->stream_new (cpu, 0, error);
  if (s == NULL) {
    lb_tensor_free (out);
    return NULL;
  }
  ok = lb_ops (s)->resize_bicubic (s, norm, out, error);
  cpu->stream_free (s);
  if (!ok) {
    lb_tensor_free (out);
    return NULL;
  }
  return out;
}

/**
 * lingbot_image_load:
 * @path: a JPEG file
 * @max_area: pixel budget (%LINGBOT_IMAGE_MAX_AREA_480P)
 * @error: return location for a #GError
 *
 * Decode, choose the output size, normalise and resize: the image tensor
 * the VAE encodes (spec 6).  Always the full, PIL-exact decode, whatever
 * the image's size (lingbot_session_new() decodes an image of more than
 * %LINGBOT_IMAGE_FULL_DECODE_PIXELS at a reduced scale:
 * lingbot_image_jpeg_scale_for()).
 *
 * Returns: (transfer full): float32 [3, H, W], or %NULL with @error set.
 */
LbTensor *
lingbot_image_load (const char *path, double max_area, GError ** error)
{
  g_autoptr (LbTensor) rgb = lingbot_image_load_jpeg (path, error);
  int w, h;

  if (rgb == NULL)
    return NULL;
  if (!lingbot_image_output_size ((int) rgb->shape[1], (int) rgb->shape[0],
          max_area, &w, &h, error))
    return NULL;
  return lingbot_image_preprocess (rgb, w, h, error);
}

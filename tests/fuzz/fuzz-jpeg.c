/* lingbot-gst: fuzz harness of the JPEG decode + preprocess (tests/fuzz)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The path of a session's reference JPEG: lingbot_image_jpeg_get_size(),
 * the 4224-pixel budget's output size (80x48 for 16:9), the DCT scale
 * lingbot_image_jpeg_scale_for() gives for it, lingbot_image_decode_jpeg_
 * reduced() at that scale, then lingbot_image_preprocess().  Images whose
 * header declares more than 2048x2048 pixels but are decoded in full (at
 * most LINGBOT_IMAGE_FULL_DECODE_PIXELS, 4096x4096) are skipped (read
 * from the header here): decoding them only costs time.  Larger ones are
 * decoded at 1/8 (1/64 of the pixels), and headers above the decoder's cap
 * are refused from the header at once.
 */
#include "fuzz-common.h"

#include "lingbot/image.h"

#include <jpeglib.h>
#include <setjmp.h>

#define FUZZ_MAX_PIXELS (2048u * 2048u)

typedef struct
{
  struct jpeg_error_mgr pub;
  jmp_buf jump;
} PeekErr;

static void
peek_error_exit (j_common_ptr cinfo)
{
  longjmp (((PeekErr *) cinfo->err)->jump, 1);
}

static void
peek_no_output (j_common_ptr cinfo)
{
}

/* the pixel count the header declares, 0 when it cannot be read */
static guint64
peek_pixels (const uint8_t * data, size_t size)
{
  struct jpeg_decompress_struct ci;
  PeekErr err;
  volatile guint64 pixels = 0;

  ci.err = jpeg_std_error (&err.pub);
  err.pub.error_exit = peek_error_exit;
  err.pub.output_message = peek_no_output;
  jpeg_create_decompress (&ci);
  if (setjmp (err.jump) == 0) {
    jpeg_mem_src (&ci, data, (unsigned long) size);
    if (jpeg_read_header (&ci, TRUE) == JPEG_HEADER_OK)
      pixels = (guint64) ci.image_width * ci.image_height;
  }
  jpeg_destroy_decompress (&ci);
  return pixels;
}

int
LLVMFuzzerTestOneInput (const uint8_t * data, size_t size)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LbTensor) rgb = NULL;
  g_autoptr (LbTensor) out = NULL;
  guint64 pixels = peek_pixels (data, size);
  int iw, ih, w, h, d;

  if (pixels > FUZZ_MAX_PIXELS && pixels <= LINGBOT_IMAGE_FULL_DECODE_PIXELS)
    return 0;
  if (!lingbot_image_jpeg_get_size (data, size, &iw, &ih, &err)) {
    fuzz_report (err);
    g_assert (err != NULL);
    return 0;
  }
  if (!lingbot_image_output_size (iw, ih, 4224.0, &w, &h, &err))
    return 0;
  d = lingbot_image_jpeg_scale_for (iw, ih, w, h);
  rgb = lingbot_image_decode_jpeg_reduced (data, size, d, &err);
  fuzz_report (err);
  if (rgb == NULL) {
    g_assert (err != NULL);
    return 0;
  }
  g_assert (rgb->ndim == 3 && rgb->shape[2] == 3);
  g_assert (rgb->shape[1] == (iw + d - 1) / d);
  g_assert (rgb->shape[0] == (ih + d - 1) / d);
  out = lingbot_image_preprocess (rgb, w, h, &err);
  g_assert (out != NULL || err != NULL);
  return 0;
}

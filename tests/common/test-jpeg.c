/* lingbot-gst: large test JPEGs written with libjpeg
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A smooth RGB picture (slow sines, no edges) of any size, encoded row by
 * row, so an 8192x8192 JPEG costs a few MB and no full-size buffer: the
 * input of the reduced-scale decode tests (lingbot/image.c).
 */
#include "test-jpeg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <jpeglib.h>

#define MAX_SIDE 16384

/* the picture's factors per column and per row, computed once */
static double col_f[3][MAX_SIDE], row_f[3][MAX_SIDE];

static gpointer
tables_init (gpointer data)
{
  for (int c = 0; c < 3; c++)
    for (int i = 0; i < MAX_SIDE; i++) {
      col_f[c][i] = sin (2.0 * G_PI * i / (1500.0 + 300.0 * c) + c);
      row_f[c][i] = cos (2.0 * G_PI * i / (2100.0 + 400.0 * c));
    }
  return NULL;
}

/**
 * lingbot_test_smooth_pixel:
 * @x: column, below 16384
 * @y: row, below 16384
 * @c: channel 0..2
 *
 * Returns: the picture's value at (@x, @y, @c): 128 + 90 sin(2 pi x /
 *   (1500 + 300 c) + c) cos(2 pi y / (2100 + 400 c)), rounded.
 */
guint8
lingbot_test_smooth_pixel (int x, int y, int c)
{
  static GOnce once = G_ONCE_INIT;
  g_once (&once, tables_init, NULL);
  g_assert (x >= 0 && x < MAX_SIDE && y >= 0 && y < MAX_SIDE);
  return (guint8) lround (128.0 + 90.0 * col_f[c][x] * row_f[c][y]);
}

/**
 * lingbot_test_smooth_jpeg:
 * @width: pixels
 * @height: pixels
 * @quality: libjpeg quality 1..100
 * @length: (out): the JPEG's bytes
 *
 * Encodes lingbot_test_smooth_pixel() (baseline, 4:2:0, libjpeg's default
 * tables).
 *
 * Returns: (transfer full): the JPEG, g_free() it.
 */
guint8 *
lingbot_test_smooth_jpeg (int width, int height, int quality, gsize * length)
{
  struct jpeg_compress_struct ci;
  struct jpeg_error_mgr jerr;
  unsigned char *mem = NULL;
  unsigned long size = 0;
  g_autofree guint8 *row = g_malloc ((gsize) width * 3);

  ci.err = jpeg_std_error (&jerr);
  jpeg_create_compress (&ci);
  jpeg_mem_dest (&ci, &mem, &size);
  ci.image_width = (JDIMENSION) width;
  ci.image_height = (JDIMENSION) height;
  ci.input_components = 3;
  ci.in_color_space = JCS_RGB;
  jpeg_set_defaults (&ci);
  jpeg_set_quality (&ci, quality, TRUE);
  jpeg_start_compress (&ci, TRUE);
  while (ci.next_scanline < ci.image_height) {
    int y = (int) ci.next_scanline;
    JSAMPROW r = row;
    for (int x = 0; x < width; x++)
      for (int c = 0; c < 3; c++)
        row[3 * x + c] = lingbot_test_smooth_pixel (x, y, c);
    jpeg_write_scanlines (&ci, &r, 1);
  }
  jpeg_finish_compress (&ci);
  jpeg_destroy_compress (&ci);
  guint8 *out = g_memdup2 (mem, size);
  free (mem);
  *length = size;
  return out;
}

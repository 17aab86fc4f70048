/* lingbot-gst: decoded frames -> 8-bit RGB, RGBA, I420, NV12 (the one
 * conversion of the library, the elements and the tools)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Spec: vae_and_distributed_spec.md C.8; golden README section 5 (the
 * service converts with floor((x + 1) * 127.5) clipped to [0, 255]).
 */
#include "lingbot/vae-private.h"

/**
 * lingbot_vae_value_to_u8:
 * @x: a decoded value (nominally in [-1, 1])
 *
 * The reference's byte conversion (spec C.8): `(x + 1) * 127.5` in float32,
 * clipped to [0, 255], then truncated (not rounded).  NaN maps to 0.
 *
 * Returns: the byte.
 */
guint8
lingbot_vae_value_to_u8 (float x)
{
  float v = (x + 1.0f) * 127.5f;
  if (!(v > 0.f))
    return 0;
  if (v >= 255.f)
    return 255;
  return (guint8) v;
}

static gboolean
check_frames (const LbTensor * frames, int frame, int64_t * H, int64_t * W,
    GError ** error)
{
  if (frames->dtype != LB_DTYPE_F32 || frames->device.type != LB_DEVICE_CPU
      || frames->ndim != 4 || frames->shape[0] != 3 || frame < 0
      || frame >= frames->shape[1]) {
    g_autofree char *have = lb_tensor_shape_string (frames);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "VAE frames: %s %s, frame %d; expected CPU f32 [3, T, H, W] with "
        "0 <= frame < T", lb_dtype_name (frames->dtype), have, frame);
    return FALSE;
  }
  *H = frames->shape[2];
  *W = frames->shape[3];
  return TRUE;
}

/* A plane's rows must not overlap: @stride at least the @row_bytes of one
 * row, or the conversion would write rows over each other and past a
 * buffer of @stride x rows bytes. */
static gboolean
check_stride (const char *format, const char *plane, gsize stride,
    int64_t row_bytes, GError ** error)
{
  if (stride < (guint64) row_bytes) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "VAE frames: %s%s%s row stride %" G_GSIZE_FORMAT " is less than a "
        "row, %" G_GINT64_FORMAT " bytes", format, plane[0] ? " " : "", plane,
        stride, row_bytes);
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

/* Every packed layout in one loop: @bpp bytes per pixel, R, G, B and (with
 * @bpp 4) an opaque alpha byte. */
static gboolean
frames_to_packed (const LbTensor * frames, int frame, guint8 * dst,
    gsize dst_stride, int bpp, GError ** error)
{
  int64_t H, W;
  if (!check_frames (frames, frame, &H, &W, error))
    return FALSE;
  if (!check_stride (bpp == 4 ? "RGBA" : "RGB", "", dst_stride, bpp * W, error))
    return FALSE;
  const int64_t sw = frames->stride[3];
#pragma omp parallel for schedule(static) if (H * W >= 65536)
  for (int64_t y = 0; y < H; y++) {
    const float *r = plane_row (frames, 0, frame, y);
    const float *g = plane_row (frames, 1, frame, y);
    const float *b = plane_row (frames, 2, frame, y);
    guint8 *d = dst + y * dst_stride;
    for (int64_t x = 0; x < W; x++, d += bpp) {
      d[0] = lingbot_vae_value_to_u8 (r[x * sw]);
      d[1] = lingbot_vae_value_to_u8 (g[x * sw]);
      d[2] = lingbot_vae_value_to_u8 (b[x * sw]);
      if (bpp == 4)
        d[3] = 255;
    }
  }
  return TRUE;
}

/**
 * lingbot_vae_frames_to_rgb8:
 * @frames: f32 [3, T, H, W] decoded frames (CPU, any strides)
 * @frame: which frame, 0 <= frame < T
 * @dst: H rows of W packed R, G, B bytes (GStreamer RGB)
 * @dst_stride: bytes between rows of @dst (>= 3 W)
 * @error: %LB_ERROR_SHAPE (a frame out of range, a stride too small)
 *
 * Converts one frame with lingbot_vae_value_to_u8(), byte-exact with the
 * reference (golden `output.frames_u8_chunk*`).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_vae_frames_to_rgb8 (const LbTensor * frames, int frame, guint8 * dst,
    gsize dst_stride, GError ** error)
{
  return frames_to_packed (frames, frame, dst, dst_stride, 3, error);
}

/**
 * lingbot_vae_frames_to_rgba:
 * @frames: f32 [3, T, H, W] decoded frames (CPU, any strides)
 * @frame: which frame, 0 <= frame < T
 * @dst: H rows of W packed R, G, B, A bytes (GStreamer RGBA)
 * @dst_stride: bytes between rows of @dst (>= 4 W)
 * @error: %LB_ERROR_SHAPE
 *
 * lingbot_vae_frames_to_rgb8() with an opaque alpha byte (255) after each
 * pixel: R, G, B are the same bytes.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_vae_frames_to_rgba (const LbTensor * frames, int frame, guint8 * dst,
    gsize dst_stride, GError ** error)
{
  return frames_to_packed (frames, frame, dst, dst_stride, 4, error);
}

/* BT.601 limited range from 8-bit RGB, the integer form libyuv and most
 * converters use. */
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

/* Every 4:2:0 layout in one loop: Cb and Cr samples @chroma_step bytes
 * apart within their rows (1: planar I420; 2: NV12, @v = @u + 1 on the
 * same rows).  @format names the layout in the odd-size error. */
static gboolean
frames_to_yuv420 (const LbTensor * frames, int frame, guint8 * y,
    gsize y_stride, guint8 * u, gsize u_stride, guint8 * v, gsize v_stride,
    int chroma_step, const char *format, GError ** error)
{
  int64_t H, W;
  if (!check_frames (frames, frame, &H, &W, error))
    return FALSE;
  if (H % 2 || W % 2) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "VAE frames: %s needs even sizes, got %" G_GINT64_FORMAT
        "x%" G_GINT64_FORMAT, format, W, H);
    return FALSE;
  }
  /* NV12's Cb and Cr share one plane of W bytes a row */
  if (!check_stride (format, "Y", y_stride, W, error)
      || !check_stride (format, chroma_step == 2 ? "UV" : "U", u_stride,
          chroma_step * (W / 2), error)
      || (chroma_step == 1 && !check_stride (format, "V", v_stride, W / 2,
              error)))
    return FALSE;
  const int64_t sw = frames->stride[3];
#pragma omp parallel for schedule(static) if (H * W >= 65536)
  for (int64_t yy = 0; yy < H / 2; yy++) {
    const float *p[2][3];
    for (int k = 0; k < 2; k++)
      for (int c = 0; c < 3; c++)
        p[k][c] = plane_row (frames, c, frame, 2 * yy + k);
    guint8 *y0 = y + (2 * yy) * y_stride, *y1 = y0 + y_stride;
    guint8 *ur = u + yy * u_stride, *vr = v + yy * v_stride;
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
      ur[xx * chroma_step] = rgb_to_u (sr, sg, sb);
      vr[xx * chroma_step] = rgb_to_v (sr, sg, sb);
    }
  }
  return TRUE;
}

/**
 * lingbot_vae_frames_to_i420:
 * @frames: f32 [3, T, H, W] decoded frames (CPU, any strides), H and W even
 * @frame: which frame
 * @y: H rows of W luma bytes, rows @y_stride apart
 * @y_stride: bytes between rows of @y (>= W)
 * @u: H/2 rows of W/2 Cb bytes
 * @u_stride: bytes between rows of @u (>= W/2)
 * @v: H/2 rows of W/2 Cr bytes
 * @v_stride: bytes between rows of @v (>= W/2)
 * @error: %LB_ERROR_SHAPE (a frame out of range, a stride too small, odd
 *   sizes)
 *
 * Fast path to I420 without an RGB frame in between: each value is first
 * quantised exactly as lingbot_vae_frames_to_rgb8() does, then converted
 * with BT.601 limited-range integer coefficients; chroma is computed from
 * the rounded mean of each 2x2 block's RGB.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_vae_frames_to_i420 (const LbTensor * frames, int frame, guint8 * y,
    gsize y_stride, guint8 * u, gsize u_stride, guint8 * v, gsize v_stride,
    GError ** error)
{
  return frames_to_yuv420 (frames, frame, y, y_stride, u, u_stride, v, v_stride,
      1, "I420", error);
}

/**
 * lingbot_vae_frames_to_nv12:
 * @frames: f32 [3, T, H, W] decoded frames (CPU, any strides), H and W even
 * @frame: which frame
 * @y: H rows of W luma bytes, rows @y_stride apart
 * @y_stride: bytes between rows of @y (>= W)
 * @uv: H/2 rows of W/2 interleaved Cb, Cr pairs
 * @uv_stride: bytes between rows of @uv (>= W)
 * @error: %LB_ERROR_SHAPE (a frame out of range, a stride too small, odd
 *   sizes)
 *
 * The bytes of lingbot_vae_frames_to_i420() with the chroma planes
 * interleaved (NV12): the same Y, and each Cb followed by its Cr.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_vae_frames_to_nv12 (const LbTensor * frames, int frame, guint8 * y,
    gsize y_stride, guint8 * uv, gsize uv_stride, GError ** error)
{
  return frames_to_yuv420 (frames, frame, y, y_stride, uv, uv_stride, uv + 1,
      uv_stride, 2, "NV12", error);
}

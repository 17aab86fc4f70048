/* lingbot-gst: lingbotoverlay, the controls overlay (HUD)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
/**
 * SECTION:element-lingbotoverlay
 * @title: lingbotoverlay
 *
 * Draws the controls overlay on lingbotvaedec's frames, in place: a MOVE
 * panel bottom-left (W above A S D) and a ROTATE panel bottom-right (I
 * above J K L), the keys of the snapshot that built the frame's chunk lit
 * (#GstLingbotFrameMeta keys, else a #GstLingbotChunkMeta's; a frame with
 * neither shows every key unlit).  The preview still (#GstLingbotFrameMeta
 * preview) gets the idle overlay: no key lit, "READY" between the panels.
 * With `show-stats`, the chunk index and the rate at which frames arrive
 * ("#12 15.8FPS", over the last 16 frames) are drawn there instead.
 *
 * Everything is drawn in the lower half of the frame (rows from
 * height / 2 rounded up to even): the upper half's bytes never change.
 * The glyphs are a built-in 5x7 bitmap font scaled by
 * max(1, min(width, height) / 160); both panels need about 96 pixels of
 * width at scale 1.  The overlay is an ARGB #GstVideoOverlayComposition
 * blended with gst_video_overlay_composition_blend(), so any of the raw
 * formats below works; it is drawn again only when what it shows changes.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>
#include <gst/video/video.h>
#include <gst/video/video-overlay-composition.h>

#include "gst/gstlingbotoverlay.h"
#include "gst/lingbot/gstlingbotmeta.h"

GST_DEBUG_CATEGORY_STATIC (gst_lingbot_overlay_debug);
#define GST_CAT_DEFAULT gst_lingbot_overlay_debug

#define DEFAULT_SHOW_STATS FALSE
#define RATE_FRAMES 16

enum
{
  PROP_0,
  PROP_SHOW_STATS,
};

struct _GstLingbotOverlay
{
  GstVideoFilter parent;

  gboolean show_stats;          /* object lock */

  /* streaming thread */
  GstVideoOverlayComposition *comp;
  char *comp_key;               /* what comp shows (keys, text, size) */
  gint64 arrivals[RATE_FRAMES]; /* monotonic microseconds, a ring */
  guint n_arrivals;
};

#define gst_lingbot_overlay_parent_class parent_class
G_DEFINE_TYPE (GstLingbotOverlay, gst_lingbot_overlay, GST_TYPE_VIDEO_FILTER);
GST_ELEMENT_REGISTER_DEFINE (lingbotoverlay, "lingbotoverlay", GST_RANK_NONE,
    GST_TYPE_LINGBOT_OVERLAY);

#define OVERLAY_CAPS GST_VIDEO_CAPS_MAKE ("{ RGBA, RGBx, BGRA, BGRx, RGB, " \
    "BGR, I420, NV12 }")

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE ("sink",
    GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (OVERLAY_CAPS));
static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE ("src",
    GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (OVERLAY_CAPS));

/* ---- drawing into an ARGB canvas ---- */

/* A 5x7 glyph: 7 rows, bit 4 the leftmost pixel. */
typedef struct
{
  char c;
  guint8 rows[7];
} Glyph;

static const Glyph glyphs[] = {
  {'A', {0x0e, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11}},
  {'D', {0x1e, 0x11, 0x11, 0x11, 0x11, 0x11, 0x1e}},
  {'E', {0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x1f}},
  {'F', {0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x10}},
  {'I', {0x0e, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e}},
  {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0c}},
  {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}},
  {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1f}},
  {'M', {0x11, 0x1b, 0x15, 0x15, 0x11, 0x11, 0x11}},
  {'O', {0x0e, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e}},
  {'P', {0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10, 0x10}},
  {'R', {0x1e, 0x11, 0x11, 0x1e, 0x14, 0x12, 0x11}},
  {'S', {0x0f, 0x10, 0x10, 0x0e, 0x01, 0x01, 0x1e}},
  {'T', {0x1f, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
  {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0a, 0x04}},
  {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0a}},
  {'Y', {0x11, 0x11, 0x0a, 0x04, 0x04, 0x04, 0x04}},
  {'0', {0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e}},
  {'1', {0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e}},
  {'2', {0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f}},
  {'3', {0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e}},
  {'4', {0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02}},
  {'5', {0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e}},
  {'6', {0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e}},
  {'7', {0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
  {'8', {0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e}},
  {'9', {0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c}},
  {'#', {0x0a, 0x0a, 0x1f, 0x0a, 0x1f, 0x0a, 0x0a}},
  {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x0c}},
};

static const guint8 *
glyph_rows (char c)
{
  for (guint i = 0; i < G_N_ELEMENTS (glyphs); i++)
    if (glyphs[i].c == c)
      return glyphs[i].rows;
  return NULL;                  /* a space, or a character not drawn */
}

/* The canvas: 0xAARRGGBB words (GST_VIDEO_OVERLAY_COMPOSITION_FORMAT_RGB
 * in native byte order, not premultiplied); (x, y) in frame coordinates,
 * the canvas starting at row @y0. */
typedef struct
{
  guint32 *px;
  int width, height, y0;
} Canvas;

static void
put (Canvas * c, int x, int y, guint32 argb)
{
  y -= c->y0;
  if (x >= 0 && x < c->width && y >= 0 && y < c->height)
    c->px[(gsize) y * c->width + x] = argb;
}

/* a filled rectangle with corners rounded by @r pixels */
static void
fill_round_rect (Canvas * c, int x, int y, int w, int h, int r, guint32 argb)
{
  for (int j = 0; j < h; j++)
    for (int i = 0; i < w; i++) {
      int dx = i < r ? r - i : i >= w - r ? i - (w - 1 - r) : 0;
      int dy = j < r ? r - j : j >= h - r ? j - (h - 1 - r) : 0;

      if (dx * dx + dy * dy > r * r)
        continue;
      put (c, x + i, y + j, argb);
    }
}

/* @text at (x, y), each glyph pixel a @k x @k square; advance 6k */
static void
draw_text (Canvas * c, int x, int y, int k, const char *text, guint32 argb)
{
  for (; *text; text++, x += 6 * k) {
    const guint8 *rows = glyph_rows (*text);

    if (rows == NULL)
      continue;
    for (int j = 0; j < 7; j++)
      for (int i = 0; i < 5; i++)
        if (rows[j] & (0x10 >> i))
          for (int v = 0; v < k; v++)
            for (int u = 0; u < k; u++)
              put (c, x + i * k + u, y + j * k + v, argb);
  }
}

#define PANEL_BG 0x80000000u
#define KEY_BG 0xa0383838u
#define KEY_FG 0xffb0b0b0u
#define LIT_BG 0xf0ffc020u
#define LIT_FG 0xff000000u
#define TITLE_FG 0xffffffffu

/* One panel: @title above a key cluster, @keys[0] above @keys[1..3],
 * @bits their LINGBOT_KEY_* bits; its bottom-left corner at (x, bottom). */
static void
draw_panel (Canvas * c, int x, int bottom, int k, const char *title,
    const char *keys, const guint bits[4], guint lit)
{
  const int cell = 11 * k, gap = k, pad = 2 * k;
  const int pw = 3 * cell + 2 * gap + 2 * pad;
  const int ph = 7 * k + gap + 2 * cell + gap + 2 * pad;
  const int top = bottom - ph;

  fill_round_rect (c, x, top, pw, ph, 2 * k, PANEL_BG);
  draw_text (c, x + (pw - (6 * (int) strlen (title) - 1) * k) / 2, top + pad,
      k, title, TITLE_FG);
  for (int n = 0; n < 4; n++) {
    int col = n == 0 ? 1 : n - 1, row = n == 0 ? 0 : 1;
    int cx = x + pad + col * (cell + gap);
    int cy = top + pad + 7 * k + gap + row * (cell + gap);
    gboolean on = (lit & bits[n]) != 0;
    char s[2] = { keys[n], 0 };

    fill_round_rect (c, cx, cy, cell, cell, k, on ? LIT_BG : KEY_BG);
    draw_text (c, cx + 3 * k, cy + 2 * k, k, s, on ? LIT_FG : KEY_FG);
  }
}

/* The overlay of a @width x @height frame: @keys lit, @text (or NULL)
 * between the panels. */
static GstVideoOverlayComposition *
render (int width, int height, guint keys, const char *text)
{
  static const guint move[4] = { LINGBOT_KEY_W, LINGBOT_KEY_A,
    LINGBOT_KEY_S, LINGBOT_KEY_D
  };
  static const guint rotate[4] = { LINGBOT_KEY_I, LINGBOT_KEY_J,
    LINGBOT_KEY_K, LINGBOT_KEY_L
  };
  const int k = MAX (1, MIN (width, height) / 160);
  const int margin = 2 * k + MIN (width, height) / 64;
  const int pw = 3 * 11 * k + 2 * k + 4 * k;
  Canvas c;
  GstBuffer *buf;
  GstMapInfo map;
  GstVideoOverlayRectangle *rect;
  GstVideoOverlayComposition *comp;

  c.y0 = GST_ROUND_UP_2 (height / 2);
  c.width = width;
  c.height = height - c.y0;
  if (c.height <= 0)
    return NULL;
  buf = gst_buffer_new_allocate (NULL, (gsize) c.width * c.height * 4, NULL);
  gst_buffer_map (buf, &map, GST_MAP_WRITE);
  memset (map.data, 0, map.size);
  c.px = (guint32 *) map.data;
  draw_panel (&c, margin, height - margin, k, "MOVE", "WASD", move, keys);
  draw_panel (&c, width - margin - pw, height - margin, k, "ROTATE", "IJKL",
      rotate, keys);
  if (text && *text) {
    int tw = (6 * (int) strlen (text) - 1) * k;
    int x = (width - tw) / 2, y = height - margin - 7 * k - 2 * k;

    fill_round_rect (&c, x - 2 * k, y - 2 * k, tw + 4 * k, 11 * k, k, PANEL_BG);
    draw_text (&c, x, y, k, text, TITLE_FG);
  }
  gst_buffer_unmap (buf, &map);
  gst_buffer_add_video_meta (buf, GST_VIDEO_FRAME_FLAG_NONE,
      GST_VIDEO_OVERLAY_COMPOSITION_FORMAT_RGB, c.width, c.height);
  rect = gst_video_overlay_rectangle_new_raw (buf, 0, c.y0, c.width,
      c.height, GST_VIDEO_OVERLAY_FORMAT_FLAG_NONE);
  gst_buffer_unref (buf);
  comp = gst_video_overlay_composition_new (rect);
  gst_video_overlay_rectangle_unref (rect);
  return comp;
}

/* ---- the element ---- */

/* frames per second over the last RATE_FRAMES arrivals, 0 before two */
static double
note_arrival (GstLingbotOverlay * self)
{
  gint64 now = g_get_monotonic_time (), first;
  guint n;

  self->arrivals[self->n_arrivals % RATE_FRAMES] = now;
  self->n_arrivals++;
  n = MIN (self->n_arrivals, RATE_FRAMES);
  if (n < 2)
    return 0.0;
  first = self->arrivals[(self->n_arrivals - n) % RATE_FRAMES];
  return now > first ? (n - 1) * 1e6 / (double) (now - first) : 0.0;
}

static GstFlowReturn
gst_lingbot_overlay_transform_frame_ip (GstVideoFilter * filter,
    GstVideoFrame * frame)
{
  GstLingbotOverlay *self = GST_LINGBOT_OVERLAY (filter);
  GstLingbotFrameMeta *fm = gst_buffer_get_lingbot_frame_meta (frame->buffer);
  GstLingbotChunkMeta *cm = fm ? NULL :
      gst_buffer_get_lingbot_chunk_meta (frame->buffer);
  const int width = GST_VIDEO_FRAME_WIDTH (frame);
  const int height = GST_VIDEO_FRAME_HEIGHT (frame);
  gboolean preview = fm && fm->preview, stats;
  guint keys = fm ? fm->keys : cm ? cm->stats.keys : 0;
  guint64 chunk = fm ? fm->chunk : cm ? cm->chunk : 0;
  gboolean has_chunk = (fm && !fm->preview) || cm;
  double fps = note_arrival (self);
  char text[64] = "";
  g_autofree char *key = NULL;

  GST_OBJECT_LOCK (self);
  stats = self->show_stats;
  GST_OBJECT_UNLOCK (self);
  if (preview)
    g_strlcpy (text, "READY", sizeof (text));
  else if (stats && has_chunk)
    g_snprintf (text, sizeof (text), "#%" G_GUINT64_FORMAT " %.1fFPS", chunk,
        fps);
  else if (stats)
    g_snprintf (text, sizeof (text), "%.1fFPS", fps);
  key = g_strdup_printf ("%dx%d/%x/%s", width, height, keys, text);
  if (self->comp == NULL || g_strcmp0 (key, self->comp_key) != 0) {
    g_clear_pointer (&self->comp, gst_video_overlay_composition_unref);
    self->comp = render (width, height, keys, text);
    g_free (self->comp_key);
    self->comp_key = g_steal_pointer (&key);
  }
  if (self->comp && !gst_video_overlay_composition_blend (self->comp, frame))
    GST_WARNING_OBJECT (self, "cannot blend onto %s",
        gst_video_format_to_string (GST_VIDEO_FRAME_FORMAT (frame)));
  return GST_FLOW_OK;
}

static gboolean
gst_lingbot_overlay_start (GstBaseTransform * trans)
{
  GstLingbotOverlay *self = GST_LINGBOT_OVERLAY (trans);

  self->n_arrivals = 0;
  return TRUE;
}

static gboolean
gst_lingbot_overlay_stop (GstBaseTransform * trans)
{
  GstLingbotOverlay *self = GST_LINGBOT_OVERLAY (trans);

  g_clear_pointer (&self->comp, gst_video_overlay_composition_unref);
  g_clear_pointer (&self->comp_key, g_free);
  return TRUE;
}

static void
gst_lingbot_overlay_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstLingbotOverlay *self = GST_LINGBOT_OVERLAY (object);

  switch (prop_id) {
    case PROP_SHOW_STATS:
      GST_OBJECT_LOCK (self);
      self->show_stats = g_value_get_boolean (value);
      GST_OBJECT_UNLOCK (self);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
}

static void
gst_lingbot_overlay_get_property (GObject * object, guint prop_id,
    GValue * value, GParamSpec * pspec)
{
  GstLingbotOverlay *self = GST_LINGBOT_OVERLAY (object);

  switch (prop_id) {
    case PROP_SHOW_STATS:
      GST_OBJECT_LOCK (self);
      g_value_set_boolean (value, self->show_stats);
      GST_OBJECT_UNLOCK (self);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
}

static void
gst_lingbot_overlay_finalize (GObject * object)
{
  GstLingbotOverlay *self = GST_LINGBOT_OVERLAY (object);

  g_clear_pointer (&self->comp, gst_video_overlay_composition_unref);
  g_free (self->comp_key);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_lingbot_overlay_class_init (GstLingbotOverlayClass * klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  GstBaseTransformClass *trans_class = GST_BASE_TRANSFORM_CLASS (klass);
  GstVideoFilterClass *filter_class = GST_VIDEO_FILTER_CLASS (klass);

  GST_DEBUG_CATEGORY_INIT (gst_lingbot_overlay_debug, "lingbotoverlay", 0,
      "LingBot-World controls overlay");

  gobject_class->set_property = gst_lingbot_overlay_set_property;
  gobject_class->get_property = gst_lingbot_overlay_get_property;
  gobject_class->finalize = gst_lingbot_overlay_finalize;
  g_object_class_install_property (gobject_class, PROP_SHOW_STATS,
      g_param_spec_boolean ("show-stats", "Show statistics",
          "Draw the chunk index and the frame rate (over the last 16 "
          "frames) between the panels", DEFAULT_SHOW_STATS,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
          GST_PARAM_MUTABLE_PLAYING));

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (element_class,
      "LingBot-World controls overlay", "Filter/Editor/Video",
      "Draws the MOVE (WASD) and ROTATE (IJKL) panels, lit for the keys "
      "that steered each frame's chunk, in the frame's lower half",
      "lingbot-gst developers");

  trans_class->start = GST_DEBUG_FUNCPTR (gst_lingbot_overlay_start);
  trans_class->stop = GST_DEBUG_FUNCPTR (gst_lingbot_overlay_stop);
  filter_class->transform_frame_ip =
      GST_DEBUG_FUNCPTR (gst_lingbot_overlay_transform_frame_ip);
}

static void
gst_lingbot_overlay_init (GstLingbotOverlay * self)
{
  self->show_stats = DEFAULT_SHOW_STATS;
}

/* lingbot-gst: lingbotbin, lingbotgen ! lingbotvaedec in one bin
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
/**
 * SECTION:element-lingbotbin
 * @title: lingbotbin
 *
 * Convenience bin: `lingbotgen ! lingbotvaedec` with a ghost `control` sink
 * pad and a ghost video `src` pad; every lingbotgen property is proxied.
 * With `overlay`, a lingbotoverlay (named `overlay`) follows the decoder:
 * the controls overlay on every frame.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 lingbotcontrolsrc location=controls.json ! lingbotbin \
 *     model-path=/models/lingbot-world-v2 image-location=start.jpg \
 *     prompt="a sunny street" ! videoconvert ! autovideosink
 * ]|
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gst/gstlingbotbin.h"
#include "gst/gstlingbotgen.h"
#include "gst/gstlingbotutil.h"

GST_DEBUG_CATEGORY_STATIC (gst_lingbot_bin_debug);
#define GST_CAT_DEFAULT gst_lingbot_bin_debug

struct _GstLingbotBin
{
  GstBin parent;

  GstElement *gen;
  GstElement *dec;
  GstElement *overlay;          /* NULL unless the overlay property is set */
};

/* beyond lingbotgen's property ids, which the bin shares */
#define PROP_OVERLAY 1000

#define gst_lingbot_bin_parent_class parent_class
G_DEFINE_TYPE (GstLingbotBin, gst_lingbot_bin, GST_TYPE_BIN);
GST_ELEMENT_REGISTER_DEFINE (lingbotbin, "lingbotbin", GST_RANK_NONE,
    GST_TYPE_LINGBOT_BIN);

static GstStaticPadTemplate control_template =
GST_STATIC_PAD_TEMPLATE ("control", GST_PAD_SINK, GST_PAD_ALWAYS,
    GST_STATIC_CAPS ("application/x-lingbot-control"));

static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE ("src",
    GST_PAD_SRC, GST_PAD_ALWAYS,
    GST_STATIC_CAPS
    ("video/x-raw, format = (string) { I420, NV12, RGBA, RGB }"));

/* properties are lingbotgen's, forwarded by name */
/* the ghost src pad's target: the overlay's src when there is one, else
 * the decoder's */
static void
retarget_src (GstLingbotBin * self)
{
  GstPad *ghost = gst_element_get_static_pad (GST_ELEMENT (self), "src");
  GstPad *target = gst_element_get_static_pad (self->overlay ?
      self->overlay : self->dec, "src");

  if (!gst_ghost_pad_set_target (GST_GHOST_PAD (ghost), target))
    g_warn_if_reached ();
  gst_object_unref (target);
  gst_object_unref (ghost);
}

/* inserts or removes lingbotoverlay after the decoder (NULL or READY) */
static void
set_overlay (GstLingbotBin * self, gboolean on)
{
  if (on == (self->overlay != NULL))
    return;
  if (GST_STATE (self) > GST_STATE_READY) {
    GST_WARNING_OBJECT (self, "overlay can only change in NULL or READY");
    return;
  }
  if (on) {
    self->overlay = gst_element_factory_make ("lingbotoverlay", "overlay");
    g_assert (self->overlay != NULL);
    gst_bin_add (GST_BIN (self), self->overlay);
    retarget_src (self);
    if (!gst_element_link_pads (self->dec, "src", self->overlay, "sink"))
      g_warn_if_reached ();
  } else {
    GstElement *overlay = self->overlay;

    self->overlay = NULL;
    gst_element_unlink (self->dec, overlay);
    retarget_src (self);
    gst_element_set_state (overlay, GST_STATE_NULL);
    gst_bin_remove (GST_BIN (self), overlay);
  }
}

static void
gst_lingbot_bin_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstLingbotBin *self = GST_LINGBOT_BIN (object);

  if (!gst_lingbot_property_can_set (GST_ELEMENT (self), pspec))
    return;
  if (prop_id == PROP_OVERLAY)
    set_overlay (self, g_value_get_boolean (value));
  else
    g_object_set_property (G_OBJECT (self->gen), pspec->name, value);
}

static void
gst_lingbot_bin_get_property (GObject * object, guint prop_id,
    GValue * value, GParamSpec * pspec)
{
  GstLingbotBin *self = GST_LINGBOT_BIN (object);

  if (prop_id == PROP_OVERLAY)
    g_value_set_boolean (value, self->overlay != NULL);
  else
    g_object_get_property (G_OBJECT (self->gen), pspec->name, value);
}

static void
gst_lingbot_bin_class_init (GstLingbotBinClass * klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);

  GST_DEBUG_CATEGORY_INIT (gst_lingbot_bin_debug, "lingbotbin", 0,
      "LingBot-World generator + decoder bin");

  gobject_class->set_property = gst_lingbot_bin_set_property;
  gobject_class->get_property = gst_lingbot_bin_get_property;
  gst_lingbot_gen_install_properties (gobject_class);
  g_object_class_install_property (gobject_class, PROP_OVERLAY,
      g_param_spec_boolean ("overlay", "Overlay",
          "Draw the controls overlay (lingbotoverlay, the child named "
          "overlay, after the decoder)", FALSE,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS |
          GST_PARAM_MUTABLE_READY));

  gst_element_class_add_static_pad_template (element_class, &control_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (element_class,
      "LingBot-World generator bin", "Generator/Video",
      "lingbotgen ! lingbotvaedec: control stream in, raw video out",
      "lingbot-gst developers");
}

static void
gst_lingbot_bin_init (GstLingbotBin * self)
{
  GstPad *target, *ghost;

  self->gen = gst_element_factory_make ("lingbotgen", "gen");
  self->dec = gst_element_factory_make ("lingbotvaedec", "dec");
  g_assert (self->gen != NULL && self->dec != NULL);
  gst_bin_add_many (GST_BIN (self), self->gen, self->dec, NULL);
  if (!gst_element_link_pads (self->gen, "src", self->dec, "sink"))
    g_warn_if_reached ();

  target = gst_element_get_static_pad (self->gen, "control");
  ghost = gst_ghost_pad_new_from_template ("control", target,
      gst_static_pad_template_get (&control_template));
  gst_element_add_pad (GST_ELEMENT (self), ghost);
  gst_object_unref (target);

  target = gst_element_get_static_pad (self->dec, "src");
  ghost = gst_ghost_pad_new_from_template ("src", target,
      gst_static_pad_template_get (&src_template));
  gst_element_add_pad (GST_ELEMENT (self), ghost);
  gst_object_unref (target);
}

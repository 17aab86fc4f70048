/* lingbot-gst: the GStreamer plugin "lingbot"
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Registers lingbotcontrolsrc, lingbotgen, lingbotvaedec, lingbotoverlay
 * and lingbotbin, and the "LingbotDevice" allocator (gst_allocator_find()).
 * Nothing here touches a device: the elements find or create their world
 * (devices + model) when they start, so the plugin loads on any machine.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <gst/gst.h>

#include "gst/gstlingbotbin.h"
#include "gst/gstlingbotcontrolsrc.h"
#include "gst/gstlingbotgen.h"
#include "gst/lingbot/gstlingbotmemory.h"
#include "gst/gstlingbotoverlay.h"
#include "gst/gstlingbotvaedec.h"
#include "lingbot-config.h"

static gboolean
plugin_init (GstPlugin * plugin)
{
  gboolean ret = FALSE;

  ret |= GST_ELEMENT_REGISTER (lingbotcontrolsrc, plugin);
  ret |= GST_ELEMENT_REGISTER (lingbotgen, plugin);
  ret |= GST_ELEMENT_REGISTER (lingbotvaedec, plugin);
  ret |= GST_ELEMENT_REGISTER (lingbotoverlay, plugin);
  ret |= GST_ELEMENT_REGISTER (lingbotbin, plugin);
  gst_object_unref (gst_lingbot_device_allocator_get ());
  return ret;
}

#define PACKAGE "lingbot-gst"

GST_PLUGIN_DEFINE (GST_VERSION_MAJOR, GST_VERSION_MINOR, lingbot,
    "LingBot-World interactive video world model",
    plugin_init, LINGBOT_VERSION, "LGPL", PACKAGE,
    "https://github.com/lingbot-gst/lingbot-gst")

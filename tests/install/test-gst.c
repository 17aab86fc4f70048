/* lingbot-gst: a program built against the installed tree with only
 * `pkg-config --cflags --libs gstlingbot-1.0` (tests/install/test-install.sh)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Includes the GStreamer helper library's header, <gst/lingbot/lingbot.h>
 * (which includes the others), as GStreamer's own libraries are included
 * (<gst/video/video.h>), and prints the names
 * they register; the script compares the output with the expected lines.
 */
#include <gst/lingbot/lingbot.h>

#include <stdio.h>

int
main (int argc, char **argv)
{
  GstAllocator *alloc;

  gst_init (&argc, &argv);
  printf ("context %s, world type %s\n", GST_LINGBOT_WORLD_CONTEXT_TYPE,
      g_type_name (GST_TYPE_LINGBOT_WORLD));
  printf ("meta api %s\n", g_type_name (GST_LINGBOT_CHUNK_META_API_TYPE));
  alloc = gst_lingbot_device_allocator_get ();
  printf ("allocator %s, memory type %s, feature %s\n",
      G_OBJECT_TYPE_NAME (alloc), alloc->mem_type,
      GST_CAPS_FEATURE_MEMORY_LINGBOT_DEVICE);
  printf ("downloads %" G_GUINT64_FORMAT "\n",
      gst_lingbot_device_memory_get_n_downloads ());
  gst_object_unref (alloc);
  return 0;
}

/* lingbot-gst: the GStreamer helper library libgstlingbot-1.0, all of it
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Applications that run the lingbot elements include this one header
 * (`pkg-config --cflags --libs gstlingbot-1.0`):
 *
 *   #include <gst/lingbot/lingbot.h>
 *
 * as GStreamer's own libraries are included (<gst/video/video.h>): the
 * "lingbot.world" context helpers (gstlingbotcontext.h), the latent-chunk
 * meta (gstlingbotmeta.h) and the LingbotDevice memory
 * (gstlingbotmemory.h).  It includes <lingbot/lingbot.h>, the session API.
 */
#pragma once

#include "gst/lingbot/gstlingbotcontext.h"
#include "gst/lingbot/gstlingbotmeta.h"
#include "gst/lingbot/gstlingbotmemory.h"

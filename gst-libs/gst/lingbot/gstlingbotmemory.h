/* lingbot-gst: the LingbotDevice memory (latents that stay in the session)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gst/gst.h>
#include "lingbot/lingbot.h"
#include "gst/lingbot/gstlingbotmeta.h"

G_BEGIN_DECLS

/**
 * GST_CAPS_FEATURE_MEMORY_LINGBOT_DEVICE:
 *
 * The caps feature of latent buffers whose memory is a
 * #GstLingbotDeviceMemory: `application/x-lingbot-latent(memory:LingbotDevice)`.
 */
#define GST_CAPS_FEATURE_MEMORY_LINGBOT_DEVICE "memory:LingbotDevice"

/**
 * GST_LINGBOT_DEVICE_MEMORY_TYPE:
 *
 * The memory type (and registered allocator name) "LingbotDevice".
 */
#define GST_LINGBOT_DEVICE_MEMORY_TYPE "LingbotDevice"

/**
 * GstLingbotDeviceMemory:
 * @mem: parent
 * @handle: the session that holds the chunk
 * @chunk: the chunk index
 * @ndim: the latents' rank (5)
 * @shape: their shape ([1, 16, C, h, w]; float32, contiguous)
 *
 * A handle to one chunk's latents where the session keeps them: with a
 * decoder attached (lingbotvaedec, lingbot_session_attach_decoder()) a slot
 * of the tensor channel from the DiT ranks to the decode ranks, as row
 * bands on the decode ranks' devices; serial, the session's latent tensor.
 * No copy is made when lingbotgen pushes it, and lingbotvaedec decodes it
 * where it is (lingbot_session_decode_chunk()).  Mapping it for reading
 * materialises a system-memory copy on demand (lingbot_session_read_chunk():
 * a download, counted by gst_lingbot_device_memory_get_n_downloads());
 * mapping it for writing is refused (read-only: gst_buffer_map() for
 * writing gets a system copy).  Freeing it releases the chunk
 * (lingbot_session_release_chunk()).
 *
 * A chunk stays in its slot until it is decoded or released.  When the
 * next chunk needs the slot while a buffer still holds the chunk and no
 * decoder claimed it (a queue before lingbotvaedec, an appsink), the
 * session moves it to host memory first (counted by
 * gst_lingbot_device_memory_get_n_preserved()), so a memory stays valid for
 * as long as it lives and generation never waits for it.
 */
typedef struct
{
  GstMemory mem;
  GstLingbotSessionHandle *handle;
  guint64 chunk;
  int ndim;
  gint64 shape[5];
  /*< private > */
  GMutex lock;
  guint8 *host;                 /* lock: the map(READ) copy */
} GstLingbotDeviceMemory;

GType gst_lingbot_device_allocator_get_type (void);
#define GST_TYPE_LINGBOT_DEVICE_ALLOCATOR \
    (gst_lingbot_device_allocator_get_type ())

GstAllocator *gst_lingbot_device_allocator_get (void);

GstMemory *gst_lingbot_device_memory_new (GstLingbotSessionHandle * handle,
    guint64 chunk);
gboolean gst_is_lingbot_device_memory (GstMemory * mem);
void gst_lingbot_device_memory_add_preserved (guint n);

guint64 gst_lingbot_device_memory_get_n_downloads (void);
guint64 gst_lingbot_device_memory_get_n_preserved (void);

G_END_DECLS

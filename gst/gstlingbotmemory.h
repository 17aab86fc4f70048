/* lingbot-gst: the LingbotDevice memory (latents that stay in the session)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gst/gst.h>
#include "lingbot/lingbot.h"
#include "gst/gstlingbotmeta.h"

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
 * @handle: the session whose latent tensor (lingbot_session_get_latents())
 *   holds the data
 * @chunk: the chunk index the data belongs to
 * @dtype: the tensor's dtype
 * @ndim: its rank
 * @shape: its shape ([1, 16, C, h, w])
 *
 * A handle to one chunk's latents where the session computed them (on the
 * ranks' devices; host memory on the CPU backend): no copy of the data is
 * made when lingbotgen pushes it.  Mapping it for reading materialises a
 * system-memory copy on demand (a download, counted by
 * gst_lingbot_device_memory_get_n_downloads()); mapping it for writing is
 * refused (it is read-only: gst_buffer_map() for writing gets a system copy).
 *
 * The session overwrites its latent tensor with the next chunk.  Before it
 * generates chunk k + 1, lingbotgen calls
 * gst_lingbot_device_memory_preserve(): a memory of chunk k that is still
 * alive then gets its own copy of the data (counted by
 * gst_lingbot_device_memory_get_n_preserved()), so a memory stays valid for
 * as long as it lives.  With lingbotvaedec linked directly, chunk k is
 * decoded and released inside the push, before the next generate, and
 * neither copy happens.
 */
typedef struct {
  GstMemory mem;
  GstLingbotSessionHandle *handle;
  guint64 chunk;
  LbDType dtype;
  int ndim;
  int64_t shape[LB_MAX_DIMS];
  /*< private >*/
  guint64 generated;            /* the session's chunk count at creation */
  LbTensor *own;                /* handle->lock: the data once the session moved on */
  guint8 *host;                 /* handle->lock: the map(READ) copy */
} GstLingbotDeviceMemory;

GType gst_lingbot_device_allocator_get_type (void);
#define GST_TYPE_LINGBOT_DEVICE_ALLOCATOR \
    (gst_lingbot_device_allocator_get_type ())

GstAllocator *gst_lingbot_device_allocator_get (void);

GstMemory *gst_lingbot_device_memory_new (GstLingbotSessionHandle * handle,
    guint64 chunk);
gboolean gst_is_lingbot_device_memory (GstMemory * mem);
const LbTensor *gst_lingbot_device_memory_get_tensor (GstMemory * mem);
gboolean gst_lingbot_device_memory_preserve (GstLingbotSessionHandle *
    handle, GError ** error);

guint64 gst_lingbot_device_memory_get_n_downloads (void);
guint64 gst_lingbot_device_memory_get_n_preserved (void);

G_END_DECLS

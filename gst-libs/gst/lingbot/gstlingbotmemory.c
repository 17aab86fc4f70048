/* lingbot-gst: the LingbotDevice memory (latents that stay in the session)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <string.h>

#include "gst/lingbot/gstlingbotmemory.h"

GST_DEBUG_CATEGORY_STATIC (gst_lingbot_memory_debug);
#define GST_CAT_DEFAULT gst_lingbot_memory_debug

typedef struct
{
  GstAllocator parent;
} GstLingbotDeviceAllocator;

typedef struct
{
  GstAllocatorClass parent_class;
} GstLingbotDeviceAllocatorClass;

G_DEFINE_TYPE (GstLingbotDeviceAllocator, gst_lingbot_device_allocator,
    GST_TYPE_ALLOCATOR);

static gint n_downloads;
static gint n_preserved;

/* The system-memory copy of the chunk's latents, made on first use
 * (lingbot_session_read_chunk(): a download, counted).  m->lock held. */
static guint8 *
materialise_unlocked (GstLingbotDeviceMemory * m)
{
  g_autoptr (GError) error = NULL;
  guint8 *host;

  if (m->host)
    return m->host;
  host = g_try_malloc (m->mem.maxsize);
  if (host == NULL) {
    GST_ERROR ("chunk %" G_GUINT64_FORMAT ": cannot allocate %"
        G_GSIZE_FORMAT " bytes", m->chunk, m->mem.maxsize);
    return NULL;
  }
  if (!lingbot_session_read_chunk (m->handle->session, m->chunk, host,
          m->mem.maxsize, &error)) {
    GST_ERROR ("chunk %" G_GUINT64_FORMAT ": %s", m->chunk, error->message);
    g_free (host);
    return NULL;
  }
  g_atomic_int_inc (&n_downloads);
  GST_DEBUG ("chunk %" G_GUINT64_FORMAT ": %" G_GSIZE_FORMAT " bytes "
      "downloaded to system memory", m->chunk, m->mem.maxsize);
  m->host = host;
  return host;
}

/* ---- the allocator ---- */

static GstMemory *
dev_alloc (GstAllocator * allocator, gsize size, GstAllocationParams * params)
{
  GST_WARNING_OBJECT (allocator, "LingbotDevice memory is made by lingbotgen "
      "(gst_lingbot_device_memory_new()), not allocated");
  return NULL;
}

static void
dev_free (GstAllocator * allocator, GstMemory * mem)
{
  GstLingbotDeviceMemory *m = (GstLingbotDeviceMemory *) mem;

  /* nobody needs the chunk through this memory any more: the session
   * drains its slot (a decoded chunk is unaffected) */
  lingbot_session_release_chunk (m->handle->session, m->chunk);
  g_free (m->host);
  g_mutex_clear (&m->lock);
  gst_lingbot_session_handle_unref (m->handle);
  g_free (m);
}

static gpointer
dev_map (GstMemory * mem, gsize maxsize, GstMapFlags flags)
{
  GstLingbotDeviceMemory *m = (GstLingbotDeviceMemory *) mem;
  guint8 *host;

  if (flags & GST_MAP_WRITE) {
    GST_WARNING ("LingbotDevice memory is read-only");
    return NULL;
  }
  g_mutex_lock (&m->lock);
  host = materialise_unlocked (m);
  g_mutex_unlock (&m->lock);
  return host;
}

static void
dev_unmap (GstMemory * mem)
{
  /* the system copy stays until the memory is freed */
}

static GstMemory *
dev_copy (GstMemory * mem, gssize offset, gssize size)
{
  GstLingbotDeviceMemory *m = (GstLingbotDeviceMemory *) mem;
  GstMemory *copy;
  GstMapInfo map;
  guint8 *host;

  if (size == -1)
    size = mem->size > (gsize) offset ? (gssize) mem->size - offset : 0;
  g_mutex_lock (&m->lock);
  host = materialise_unlocked (m);
  g_mutex_unlock (&m->lock);
  if (host == NULL)
    return NULL;
  copy = gst_allocator_alloc (NULL, (gsize) size, NULL);
  if (copy == NULL)
    return NULL;
  gst_memory_map (copy, &map, GST_MAP_WRITE);
  memcpy (map.data, host + mem->offset + offset, (gsize) size);
  gst_memory_unmap (copy, &map);
  return copy;
}

static GstMemory *
dev_share (GstMemory * mem, gssize offset, gssize size)
{
  /* a part of a chunk is no chunk: copies (system memory) only */
  return NULL;
}

static gboolean
dev_is_span (GstMemory * mem1, GstMemory * mem2, gsize * offset)
{
  return FALSE;
}

static void
gst_lingbot_device_allocator_class_init (GstLingbotDeviceAllocatorClass * klass)
{
  GstAllocatorClass *aclass = GST_ALLOCATOR_CLASS (klass);

  aclass->alloc = dev_alloc;
  aclass->free = dev_free;
  GST_DEBUG_CATEGORY_INIT (gst_lingbot_memory_debug, "lingbotmemory", 0,
      "LingbotDevice memory");
}

static void
gst_lingbot_device_allocator_init (GstLingbotDeviceAllocator * self)
{
  GstAllocator *alloc = GST_ALLOCATOR (self);

  alloc->mem_type = GST_LINGBOT_DEVICE_MEMORY_TYPE;
  alloc->mem_map = dev_map;
  alloc->mem_unmap = dev_unmap;
  alloc->mem_copy = dev_copy;
  alloc->mem_share = dev_share;
  alloc->mem_is_span = dev_is_span;
  GST_OBJECT_FLAG_SET (alloc, GST_ALLOCATOR_FLAG_CUSTOM_ALLOC);
}

/**
 * gst_lingbot_device_allocator_get:
 *
 * The allocator of #GstLingbotDeviceMemory (registered as
 * "LingbotDevice" on first use).
 *
 * Returns: (transfer full): the allocator
 */
GstAllocator *
gst_lingbot_device_allocator_get (void)
{
  static GstAllocator *allocator = NULL;

  if (g_once_init_enter (&allocator)) {
    GstAllocator *a = g_object_new (GST_TYPE_LINGBOT_DEVICE_ALLOCATOR, NULL);

    gst_object_ref_sink (a);
    GST_OBJECT_FLAG_SET (a, GST_OBJECT_FLAG_MAY_BE_LEAKED);
    gst_allocator_register (GST_LINGBOT_DEVICE_MEMORY_TYPE, gst_object_ref (a));
    g_once_init_leave (&allocator, a);
  }
  return gst_object_ref (allocator);
}

/**
 * gst_lingbot_device_memory_new:
 * @handle: (transfer none): the session
 * @chunk: a chunk the session generated and still holds
 *
 * A memory naming @chunk of the session where its latents are (a channel
 * slot on the decode ranks' devices, or the session's latent tensor;
 * lingbot_session_claim_chunk()), without copying them.  Freeing the
 * memory releases the chunk (lingbot_session_release_chunk()); mapping it
 * reads it (lingbot_session_read_chunk()).
 *
 * Returns: (transfer full): a read-only #GstLingbotDeviceMemory
 */
GstMemory *
gst_lingbot_device_memory_new (GstLingbotSessionHandle * handle, guint64 chunk)
{
  LingbotSession *s = handle->session;
  GstAllocator *alloc = gst_lingbot_device_allocator_get ();
  GstLingbotDeviceMemory *m = g_new0 (GstLingbotDeviceMemory, 1);
  const gint64 shape[5] = { 1, LINGBOT_LATENT_CHANNELS,
    lingbot_session_get_chunk_frames (s),
    lingbot_session_get_latent_height (s),
    lingbot_session_get_latent_width (s)
  };
  gsize nbytes = sizeof (float);

  for (int i = 0; i < 5; i++)
    nbytes *= (gsize) shape[i];
  gst_memory_init (GST_MEMORY_CAST (m), GST_MEMORY_FLAG_READONLY, alloc,
      NULL, nbytes, 0, 0, nbytes);
  gst_object_unref (alloc);
  m->handle = gst_lingbot_session_handle_ref (handle);
  m->chunk = chunk;
  m->ndim = 5;
  memcpy (m->shape, shape, sizeof (shape));
  g_mutex_init (&m->lock);
  return GST_MEMORY_CAST (m);
}

/**
 * gst_is_lingbot_device_memory:
 * @mem: a memory
 *
 * Returns: whether @mem is a #GstLingbotDeviceMemory
 */
gboolean
gst_is_lingbot_device_memory (GstMemory * mem)
{
  return mem != NULL && mem->allocator != NULL
      && G_TYPE_CHECK_INSTANCE_TYPE (mem->allocator,
      GST_TYPE_LINGBOT_DEVICE_ALLOCATOR);
}

/**
 * gst_lingbot_device_memory_add_preserved:
 * @n: chunks
 *
 * Counts @n chunks that a session moved to host memory because their
 * buffer was still alive, undecoded, when the next chunk needed their
 * slot (lingbot_session_get_n_spills(); lingbotgen reports them).
 */
void
gst_lingbot_device_memory_add_preserved (guint n)
{
  g_atomic_int_add (&n_preserved, (gint) n);
}

/**
 * gst_lingbot_device_memory_get_n_downloads:
 *
 * Returns: how many #GstLingbotDeviceMemory were materialised in system
 * memory (a map for reading, or a copy) in this process
 */
guint64
gst_lingbot_device_memory_get_n_downloads (void)
{
  return (guint64) (guint) g_atomic_int_get (&n_downloads);
}

/**
 * gst_lingbot_device_memory_get_n_preserved:
 *
 * Returns: how many chunks still referenced by a #GstLingbotDeviceMemory,
 * and not claimed by a decoder, were moved to host memory when the next
 * chunk needed their slot, in this process
 */
guint64
gst_lingbot_device_memory_get_n_preserved (void)
{
  return (guint64) (guint) g_atomic_int_get (&n_preserved);
}

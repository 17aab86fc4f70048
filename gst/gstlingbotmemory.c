/* lingbot-gst: the LingbotDevice memory (latents that stay in the session)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <string.h>

#include "gst/gstlingbotmemory.h"
#include "kernels/error.h"

GST_DEBUG_CATEGORY_STATIC (gst_lingbot_memory_debug);
#define GST_CAT_DEFAULT gst_lingbot_memory_debug

typedef struct {
  GstAllocator parent;
} GstLingbotDeviceAllocator;

typedef struct {
  GstAllocatorClass parent_class;
} GstLingbotDeviceAllocatorClass;

G_DEFINE_TYPE (GstLingbotDeviceAllocator, gst_lingbot_device_allocator,
    GST_TYPE_ALLOCATOR);

/* every GstLingbotDeviceMemory alive (not referenced): what
 * gst_lingbot_device_memory_preserve() looks through */
static GMutex live_lock;
static GList *live;

static gint n_downloads;
static gint n_preserved;

/* ---- copying the latents out of the session ---- */

typedef struct {
  LbTensor *dst;
  const LbTensor *src;
} DownloadJob;

static gboolean
download_job (LbRank * rank, gpointer data, GError ** error)
{
  DownloadJob *j = data;

  return lb_tensor_download (rank->stream, j->dst, j->src, error);
}

/* @src (the session's latents, or a copy) into the host tensor @dst: a
 * copy on the CPU backend, else a download on the rank that owns the
 * device. */
static gboolean
copy_to_host (GstLingbotSessionHandle * h, const LbTensor * src,
    LbTensor * dst, GError ** error)
{
  LbWorkerGroup *group;
  DownloadJob job = { dst, src };
  int n;

  if (src->device.type == LB_DEVICE_CPU)
    return lb_tensor_copy_into (dst, src, error);
  group = lingbot_world_get_group (h->world);
  n = lb_worker_group_get_n_ranks (group);
  for (int r = 0; r < n; r++) {
    if (lb_worker_group_get_rank (group, r)->device == src->device.index) {
      gboolean ok;

      lingbot_world_lock (h->world);
      ok = lb_worker_group_run_on (group, r, download_job, &job, error);
      lingbot_world_unlock (h->world);
      return ok;
    }
  }
  g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
      "latents on device %d, which no rank of the world owns",
      src->device.index);
  return FALSE;
}

/* The tensor holding @m's data (handle->lock held): its own copy, or the
 * session's latents while they are still @m's chunk; NULL when neither
 * (a session that moved on without gst_lingbot_device_memory_preserve()). */
static const LbTensor *
memory_tensor_unlocked (GstLingbotDeviceMemory * m)
{
  LingbotSession *s = m->handle->session;

  if (m->own)
    return m->own;
  if (lingbot_session_get_chunk_index (s) == m->generated)
    return lingbot_session_get_latents (s);
  return NULL;
}

/* handle->lock held */
static guint8 *
materialise_unlocked (GstLingbotDeviceMemory * m)
{
  g_autoptr (GError) error = NULL;
  const LbTensor *src;
  LbTensor dst;
  int64_t stride[LB_MAX_DIMS];
  guint8 *host;

  if (m->host)
    return m->host;
  src = memory_tensor_unlocked (m);
  if (src == NULL) {
    GST_ERROR ("chunk %" G_GUINT64_FORMAT ": the session's latents were "
        "overwritten (not preserved)", m->chunk);
    return NULL;
  }
  host = g_malloc (m->mem.maxsize);
  lb_contiguous_strides (m->ndim, m->shape, stride);
  lb_tensor_view_init (&dst, m->dtype, host, LB_DEVICE_HOST, m->ndim,
      m->shape, stride);
  if (!copy_to_host (m->handle, src, &dst, &error)) {
    GST_ERROR ("chunk %" G_GUINT64_FORMAT ": download failed: %s", m->chunk,
        error->message);
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

  g_mutex_lock (&live_lock);
  live = g_list_remove (live, m);
  g_mutex_unlock (&live_lock);
  g_clear_pointer (&m->own, lb_tensor_free);
  g_free (m->host);
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
  g_mutex_lock (&m->handle->lock);
  host = materialise_unlocked (m);
  g_mutex_unlock (&m->handle->lock);
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
  g_mutex_lock (&m->handle->lock);
  host = materialise_unlocked (m);
  g_mutex_unlock (&m->handle->lock);
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
gst_lingbot_device_allocator_class_init (GstLingbotDeviceAllocatorClass *
    klass)
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
    gst_allocator_register (GST_LINGBOT_DEVICE_MEMORY_TYPE,
        gst_object_ref (a));
    g_once_init_leave (&allocator, a);
  }
  return gst_object_ref (allocator);
}

/**
 * gst_lingbot_device_memory_new:
 * @handle: (transfer none): the session
 * @chunk: the index of the chunk the session generated last
 *
 * A memory naming the session's current latents
 * (lingbot_session_get_latents()), without copying them.  Call it with
 * @handle's lock held, right after lingbot_session_generate(); before the
 * next generate, call gst_lingbot_device_memory_preserve().
 *
 * Returns: (transfer full): a read-only #GstLingbotDeviceMemory
 */
GstMemory *
gst_lingbot_device_memory_new (GstLingbotSessionHandle * handle,
    guint64 chunk)
{
  const LbTensor *lat = lingbot_session_get_latents (handle->session);
  GstAllocator *alloc = gst_lingbot_device_allocator_get ();
  GstLingbotDeviceMemory *m = g_new0 (GstLingbotDeviceMemory, 1);
  gsize nbytes = (gsize) lb_tensor_numel (lat) * lb_dtype_size (lat->dtype);

  gst_memory_init (GST_MEMORY_CAST (m), GST_MEMORY_FLAG_READONLY, alloc,
      NULL, nbytes, 0, 0, nbytes);
  gst_object_unref (alloc);
  m->handle = gst_lingbot_session_handle_ref (handle);
  m->chunk = chunk;
  m->dtype = lat->dtype;
  m->ndim = lat->ndim;
  memcpy (m->shape, lat->shape, sizeof (m->shape));
  m->generated = lingbot_session_get_chunk_index (handle->session);
  g_mutex_lock (&live_lock);
  live = g_list_prepend (live, m);
  g_mutex_unlock (&live_lock);
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
 * gst_lingbot_device_memory_get_tensor:
 * @mem: a #GstLingbotDeviceMemory
 *
 * Call with the memory's handle lock held, and use the tensor before
 * releasing it: the session's latents while they still hold the chunk,
 * else the memory's preserved copy.  Nothing is downloaded.
 *
 * Returns: (transfer none) (nullable): f32 [1, 16, C, h, w], or %NULL when
 * the data is gone (the session generated on without
 * gst_lingbot_device_memory_preserve())
 */
const LbTensor *
gst_lingbot_device_memory_get_tensor (GstMemory * mem)
{
  g_return_val_if_fail (gst_is_lingbot_device_memory (mem), NULL);
  return memory_tensor_unlocked ((GstLingbotDeviceMemory *) mem);
}

/**
 * gst_lingbot_device_memory_preserve:
 * @handle: a session
 * @error: a copy failed
 *
 * Called by the generator with @handle's lock held before it generates the
 * next chunk: every #GstLingbotDeviceMemory of the current chunk still
 * alive gets its own copy of the latents (host memory; counted by
 * gst_lingbot_device_memory_get_n_preserved()), so it outlives the
 * session's latent tensor being overwritten.  Nothing is copied when
 * downstream released the chunk already.
 *
 * Returns: %TRUE on success
 */
gboolean
gst_lingbot_device_memory_preserve (GstLingbotSessionHandle * handle,
    GError ** error)
{
  LingbotSession *s = handle->session;
  gboolean ok = TRUE;

  g_mutex_lock (&live_lock);
  for (GList * l = live; l != NULL && ok; l = l->next) {
    GstLingbotDeviceMemory *m = l->data;
    LbTensor *own;

    if (m->handle != handle || m->own != NULL
        || m->generated != lingbot_session_get_chunk_index (s))
      continue;
    own = lb_tensor_new (m->dtype, m->ndim, m->shape);
    ok = copy_to_host (handle, lingbot_session_get_latents (s), own, error);
    if (ok) {
      m->own = own;
      g_atomic_int_inc (&n_preserved);
      GST_DEBUG ("chunk %" G_GUINT64_FORMAT " still alive: latents copied "
          "before the next chunk", m->chunk);
    } else {
      lb_tensor_free (own);
    }
  }
  g_mutex_unlock (&live_lock);
  return ok;
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
 * Returns: how many times latents still referenced by a
 * #GstLingbotDeviceMemory were copied out of the session before its next
 * chunk, in this process
 */
guint64
gst_lingbot_device_memory_get_n_preserved (void)
{
  return (guint64) (guint) g_atomic_int_get (&n_preserved);
}

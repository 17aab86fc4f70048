/* lingbot-gst: the latent-chunk meta (a session handle + chunk index)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "gst/gstlingbotmeta.h"

/**
 * gst_lingbot_session_handle_new:
 * @world: (transfer none): the world
 * @session: (transfer full): a session created on @world
 *
 * Returns: (transfer full): a handle owning @session
 */
GstLingbotSessionHandle *
gst_lingbot_session_handle_new (LingbotWorld * world,
    LingbotSession * session)
{
  GstLingbotSessionHandle *h = g_new0 (GstLingbotSessionHandle, 1);

  h->ref_count = 1;
  h->world = lingbot_world_ref (world);
  h->session = session;
  g_mutex_init (&h->lock);
  return h;
}

GstLingbotSessionHandle *
gst_lingbot_session_handle_ref (GstLingbotSessionHandle * handle)
{
  g_atomic_int_inc (&handle->ref_count);
  return handle;
}

void
gst_lingbot_session_handle_unref (GstLingbotSessionHandle * handle)
{
  if (handle == NULL || !g_atomic_int_dec_and_test (&handle->ref_count))
    return;
  /* the session before the world whose ranks it runs on */
  lingbot_session_free (handle->session);
  lingbot_world_unref (handle->world);
  g_mutex_clear (&handle->lock);
  g_free (handle);
}

G_DEFINE_BOXED_TYPE (GstLingbotSessionHandle, gst_lingbot_session_handle,
    gst_lingbot_session_handle_ref, gst_lingbot_session_handle_unref);

GType
gst_lingbot_chunk_meta_api_get_type (void)
{
  static GType type = 0;
  static const gchar *tags[] = { NULL };

  if (g_once_init_enter (&type)) {
    GType t = gst_meta_api_type_register ("GstLingbotChunkMetaAPI", tags);
    g_once_init_leave (&type, t);
  }
  return type;
}

static gboolean
chunk_meta_init (GstMeta * meta, gpointer params, GstBuffer * buffer)
{
  GstLingbotChunkMeta *m = (GstLingbotChunkMeta *) meta;

  m->handle = NULL;
  m->chunk = 0;
  memset (&m->stats, 0, sizeof (m->stats));
  return TRUE;
}

static void
chunk_meta_free (GstMeta * meta, GstBuffer * buffer)
{
  GstLingbotChunkMeta *m = (GstLingbotChunkMeta *) meta;

  g_clear_pointer (&m->handle, gst_lingbot_session_handle_unref);
}

static gboolean
chunk_meta_transform (GstBuffer * dest, GstMeta * meta, GstBuffer * buffer,
    GQuark type, gpointer data)
{
  GstLingbotChunkMeta *m = (GstLingbotChunkMeta *) meta;

  /* the latents are the whole buffer: only a full copy keeps the meta */
  if (GST_META_TRANSFORM_IS_COPY (type)) {
    GstMetaTransformCopy *copy = data;
    if (!copy->region)
      return gst_buffer_add_lingbot_chunk_meta (dest, m->handle, m->chunk,
          &m->stats) != NULL;
  }
  return FALSE;
}

const GstMetaInfo *
gst_lingbot_chunk_meta_get_info (void)
{
  static const GstMetaInfo *info = NULL;

  if (g_once_init_enter ((GstMetaInfo **) & info)) {
    const GstMetaInfo *mi =
        gst_meta_register (GST_LINGBOT_CHUNK_META_API_TYPE,
        "GstLingbotChunkMeta", sizeof (GstLingbotChunkMeta),
        chunk_meta_init, chunk_meta_free, chunk_meta_transform);
    g_once_init_leave ((GstMetaInfo **) & info, (GstMetaInfo *) mi);
  }
  return info;
}

/**
 * gst_buffer_add_lingbot_chunk_meta:
 * @buffer: a latent buffer
 * @handle: (transfer none): the session
 * @chunk: the chunk index
 * @stats: (nullable): the generator's figures
 *
 * Returns: (transfer none): the meta
 */
GstLingbotChunkMeta *
gst_buffer_add_lingbot_chunk_meta (GstBuffer * buffer,
    GstLingbotSessionHandle * handle, guint64 chunk,
    const LingbotChunkStats * stats)
{
  GstLingbotChunkMeta *m;

  m = (GstLingbotChunkMeta *) gst_buffer_add_meta (buffer,
      GST_LINGBOT_CHUNK_META_INFO, NULL);
  if (m == NULL)
    return NULL;
  m->handle = gst_lingbot_session_handle_ref (handle);
  m->chunk = chunk;
  if (stats)
    m->stats = *stats;
  return m;
}

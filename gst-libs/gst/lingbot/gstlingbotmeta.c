/* lingbot-gst: the latent-chunk meta (a session handle + chunk index)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "gst/lingbot/gstlingbotmeta.h"

/**
 * gst_lingbot_session_handle_new: (skip)
 * @world: (transfer none): the world
 * @session: (transfer full): a session created on @world
 *
 * Not for bindings (skipped): a #LingbotSession is made in C only
 * (lingbot_session_new(), as lingbotgen does).
 *
 * Returns: (transfer full): a handle owning @session
 */
GstLingbotSessionHandle *
gst_lingbot_session_handle_new (LingbotWorld * world, LingbotSession * session)
{
  GstLingbotSessionHandle *h = g_atomic_rc_box_new0 (GstLingbotSessionHandle);

  h->world = lingbot_world_ref (world);
  h->session = session;
  g_mutex_init (&h->lock);
  return h;
}

/**
 * gst_lingbot_session_handle_ref:
 * @handle: a handle
 *
 * Returns: (transfer full): @handle, one more reference
 */
GstLingbotSessionHandle *
gst_lingbot_session_handle_ref (GstLingbotSessionHandle * handle)
{
  return g_atomic_rc_box_acquire (handle);
}

static void
session_handle_clear (GstLingbotSessionHandle * handle)
{
  /* the session before the world whose ranks it runs on */
  lingbot_session_free (handle->session);
  lingbot_world_unref (handle->world);
  g_mutex_clear (&handle->lock);
}

/**
 * gst_lingbot_session_handle_unref:
 * @handle: (nullable) (transfer full): a handle
 *
 * Drops a reference; the last one frees the session, then drops the
 * handle's reference to the world.
 */
void
gst_lingbot_session_handle_unref (GstLingbotSessionHandle * handle)
{
  if (handle != NULL)
    g_atomic_rc_box_release_full (handle,
        (GDestroyNotify) session_handle_clear);
}

/**
 * gst_lingbot_session_handle_claim_decoder:
 * @handle: a handle
 * @decoder_id: a decoder's id, > 0, unique in the process
 *
 * A session's chunks are decoded in order by one decoder, which keeps the
 * VAE's causal state from chunk to chunk and consumes each chunk (its
 * slot is freed): only one element may decode them in the session.  The
 * first caller becomes that decoder; any other (a second lingbotvaedec
 * behind a tee) must decode the bytes of the buffers itself.
 *
 * Returns: %TRUE when @decoder_id is (now) the session's decoder
 */
gboolean
gst_lingbot_session_handle_claim_decoder (GstLingbotSessionHandle * handle,
    gint decoder_id)
{
  g_return_val_if_fail (handle != NULL && decoder_id > 0, FALSE);
  return g_atomic_int_compare_and_exchange (&handle->decoder_id, 0,
      decoder_id) || g_atomic_int_get (&handle->decoder_id) == decoder_id;
}

G_DEFINE_BOXED_TYPE (GstLingbotSessionHandle, gst_lingbot_session_handle,
    gst_lingbot_session_handle_ref, gst_lingbot_session_handle_unref);

/**
 * gst_lingbot_chunk_meta_api_get_type:
 *
 * Returns: the meta API type "GstLingbotChunkMetaAPI" (no tags)
 */
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
  m->generate_end_us = 0;
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
    GstLingbotChunkMeta *dm;

    if (copy->region)
      return FALSE;
    dm = gst_buffer_add_lingbot_chunk_meta (dest, m->handle, m->chunk,
        &m->stats);
    if (dm == NULL)
      return FALSE;
    dm->generate_end_us = m->generate_end_us;
    return TRUE;
  }
  return FALSE;
}

/**
 * gst_lingbot_chunk_meta_get_info:
 *
 * Returns: (transfer none): the registered "GstLingbotChunkMeta"
 */
const GstMetaInfo *
gst_lingbot_chunk_meta_get_info (void)
{
  static const GstMetaInfo *info = NULL;

  if (g_once_init_enter ((GstMetaInfo **) & info)) {
    const GstMetaInfo *mi = gst_meta_register (GST_LINGBOT_CHUNK_META_API_TYPE,
        "GstLingbotChunkMeta", sizeof (GstLingbotChunkMeta),
        chunk_meta_init, chunk_meta_free, chunk_meta_transform);
    g_once_init_leave ((GstMetaInfo **) & info, (GstMetaInfo *) mi);
  }
  return info;
}

/**
 * gst_buffer_add_lingbot_chunk_meta: (skip)
 * @buffer: a latent buffer
 * @handle: (transfer none): the session
 * @chunk: the chunk index
 * @stats: (nullable): the generator's figures
 *
 * Attaches the chunk meta (lingbotgen does, to each latent buffer).  Not
 * for bindings (skipped): #LingbotChunkStats is a lingbot/lingbot.h
 * struct; they read a meta with gst_buffer_get_lingbot_chunk_meta().
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

/**
 * gst_buffer_get_lingbot_chunk_meta:
 * @buffer: a buffer
 *
 * The chunk meta lingbotgen attached to a latent buffer (the decoded video
 * frames of lingbotvaedec carry a #GstLingbotFrameMeta instead).  Bindings read it with this and the
 * gst_lingbot_chunk_meta_get_*() accessors.
 *
 * Returns: (transfer none) (nullable): the meta of @buffer, %NULL when it
 *   has none
 */
GstLingbotChunkMeta *
gst_buffer_get_lingbot_chunk_meta (GstBuffer * buffer)
{
  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  return (GstLingbotChunkMeta *) gst_buffer_get_meta (buffer,
      GST_LINGBOT_CHUNK_META_API_TYPE);
}

/**
 * gst_lingbot_chunk_meta_get_chunk:
 * @meta: a chunk meta
 *
 * Returns: the chunk's index in its session (0 for the first)
 */
guint64
gst_lingbot_chunk_meta_get_chunk (GstLingbotChunkMeta * meta)
{
  g_return_val_if_fail (meta != NULL, 0);
  return meta->chunk;
}

/**
 * gst_lingbot_chunk_meta_get_frames:
 * @meta: a chunk meta
 *
 * Returns: the video frames the chunk decodes to (#LingbotChunkStats
 *   frames: 4C - 3 for chunk 0, 4C after, the last possibly cut to the
 *   session's frame count; docs/elements.md)
 */
gint
gst_lingbot_chunk_meta_get_frames (GstLingbotChunkMeta * meta)
{
  g_return_val_if_fail (meta != NULL, 0);
  return meta->stats.frames;
}

/**
 * gst_lingbot_chunk_meta_get_keys:
 * @meta: a chunk meta
 *
 * Returns: the key set that steered the chunk (LINGBOT_KEY_* bits, 0
 *   offline)
 */
guint
gst_lingbot_chunk_meta_get_keys (GstLingbotChunkMeta * meta)
{
  g_return_val_if_fail (meta != NULL, 0);
  return meta->stats.keys;
}

/**
 * gst_lingbot_chunk_meta_get_dit_seconds:
 * @meta: a chunk meta
 *
 * Returns: the seconds the DiT's 4 + 1 passes of the chunk took
 */
gdouble
gst_lingbot_chunk_meta_get_dit_seconds (GstLingbotChunkMeta * meta)
{
  g_return_val_if_fail (meta != NULL, 0.0);
  return meta->stats.dit_seconds;
}

/**
 * gst_lingbot_chunk_meta_get_compute_seconds:
 * @meta: a chunk meta
 *
 * Returns: the seconds lingbotgen spent on the chunk: control + condition
 *   + DiT (the decode comes later, in lingbotvaedec)
 */
gdouble
gst_lingbot_chunk_meta_get_compute_seconds (GstLingbotChunkMeta * meta)
{
  g_return_val_if_fail (meta != NULL, 0.0);
  return meta->stats.compute_seconds;
}

/**
 * gst_lingbot_chunk_meta_get_world:
 * @meta: a chunk meta
 *
 * Returns: (transfer none): the world the chunk's session runs on
 */
LingbotWorld *
gst_lingbot_chunk_meta_get_world (GstLingbotChunkMeta * meta)
{
  g_return_val_if_fail (meta != NULL && meta->handle != NULL, NULL);
  return meta->handle->world;
}

/**
 * gst_lingbot_frame_meta_api_get_type:
 *
 * Returns: the meta API type "GstLingbotFrameMetaAPI" (no tags: video
 *   filters keep it)
 */
GType
gst_lingbot_frame_meta_api_get_type (void)
{
  static GType type = 0;
  static const gchar *tags[] = { NULL };

  if (g_once_init_enter (&type)) {
    GType t = gst_meta_api_type_register ("GstLingbotFrameMetaAPI", tags);
    g_once_init_leave (&type, t);
  }
  return type;
}

static gboolean
frame_meta_init (GstMeta * meta, gpointer params, GstBuffer * buffer)
{
  GstLingbotFrameMeta *m = (GstLingbotFrameMeta *) meta;

  m->chunk = 0;
  m->keys = 0;
  m->preview = FALSE;
  return TRUE;
}

static gboolean
frame_meta_transform (GstBuffer * dest, GstMeta * meta, GstBuffer * buffer,
    GQuark type, gpointer data)
{
  GstLingbotFrameMeta *m = (GstLingbotFrameMeta *) meta;

  /* plain values: every copy, and a converted or scaled frame, keeps it */
  return gst_buffer_add_lingbot_frame_meta (dest, m->chunk, m->keys,
      m->preview) != NULL;
}

/**
 * gst_lingbot_frame_meta_get_info:
 *
 * Returns: (transfer none): the registered "GstLingbotFrameMeta"
 */
const GstMetaInfo *
gst_lingbot_frame_meta_get_info (void)
{
  static const GstMetaInfo *info = NULL;

  if (g_once_init_enter ((GstMetaInfo **) & info)) {
    const GstMetaInfo *mi = gst_meta_register (GST_LINGBOT_FRAME_META_API_TYPE,
        "GstLingbotFrameMeta", sizeof (GstLingbotFrameMeta),
        frame_meta_init, NULL, frame_meta_transform);
    g_once_init_leave ((GstMetaInfo **) & info, (GstMetaInfo *) mi);
  }
  return info;
}

/**
 * gst_buffer_add_lingbot_frame_meta:
 * @buffer: a video frame
 * @chunk: the chunk it was decoded from
 * @keys: the chunk's key snapshot (LINGBOT_KEY_* bits)
 * @preview: whether @buffer is the preview still
 *
 * Attaches the frame meta (lingbotvaedec does, to each frame).
 *
 * Returns: (transfer none) (nullable): the meta
 */
GstLingbotFrameMeta *
gst_buffer_add_lingbot_frame_meta (GstBuffer * buffer, guint64 chunk,
    guint keys, gboolean preview)
{
  GstLingbotFrameMeta *m;

  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  m = (GstLingbotFrameMeta *) gst_buffer_add_meta (buffer,
      GST_LINGBOT_FRAME_META_INFO, NULL);
  if (m == NULL)
    return NULL;
  m->chunk = chunk;
  m->keys = keys;
  m->preview = preview;
  return m;
}

/**
 * gst_buffer_get_lingbot_frame_meta:
 * @buffer: a buffer
 *
 * Returns: (transfer none) (nullable): the frame meta of @buffer, %NULL
 *   when it has none
 */
GstLingbotFrameMeta *
gst_buffer_get_lingbot_frame_meta (GstBuffer * buffer)
{
  g_return_val_if_fail (GST_IS_BUFFER (buffer), NULL);
  return (GstLingbotFrameMeta *) gst_buffer_get_meta (buffer,
      GST_LINGBOT_FRAME_META_API_TYPE);
}

/* lingbot-gst: the latent-chunk meta (a session handle + chunk index)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gst/gst.h>
#include "lingbot/lingbot.h"

G_BEGIN_DECLS

/**
 * GstLingbotSessionHandle:
 * @world: the world the session runs on
 * @session: the session
 * @lock: for applications that call into @session from several threads
 *   of one kind; the elements do not take it (generate and decode may run
 *   at once: the session orders them itself)
 *
 * A refcounted owner of one #LingbotSession, shared by the generator and
 * every latent buffer it pushed, so a decoder downstream can decode on the
 * same ranks with the session's own VAE decoder (DESIGN.md 3).
 */
typedef struct
{
  /*< private > */
  gint _lingbot_reserved;       /* unused: the reference count is the
                                 * g_atomic_rc_box()'s; this keeps the
                                 * public fields where they were */
  /*< public > */
  LingbotWorld *world;
  LingbotSession *session;
  GMutex lock;
  /*< private > */
  gint decoder_id;              /* gst_lingbot_session_handle_claim_decoder() */
} GstLingbotSessionHandle;

#define GST_TYPE_LINGBOT_SESSION_HANDLE \
    (gst_lingbot_session_handle_get_type ())
GType gst_lingbot_session_handle_get_type (void);

/**
 * GST_LINGBOT_ATTACH_DECODER_QUERY:
 *
 * The name of the custom query (%GST_QUERY_CUSTOM) lingbotgen sends
 * downstream once its session exists, before the first chunk: field
 * `handle` (#GST_TYPE_LINGBOT_SESSION_HANDLE).  A decoder that answers it
 * (lingbotvaedec) attaches its own worker group to the session
 * (lingbot_session_attach_decoder()) and sets `attached` (boolean).  Not
 * serialized, so it reaches the decoder through a queue at once.
 */
#define GST_LINGBOT_ATTACH_DECODER_QUERY "lingbot-attach-decoder"

GstLingbotSessionHandle *gst_lingbot_session_handle_new (LingbotWorld *
    world, LingbotSession * session);
GstLingbotSessionHandle *gst_lingbot_session_handle_ref
    (GstLingbotSessionHandle * handle);
void gst_lingbot_session_handle_unref (GstLingbotSessionHandle * handle);
gboolean gst_lingbot_session_handle_claim_decoder (GstLingbotSessionHandle *
    handle, gint decoder_id);

/**
 * GstLingbotChunkMeta:
 * @meta: parent
 * @handle: the session that generated the chunk
 * @chunk: chunk index in the session
 * @stats: the generator's figures for the chunk (DiT part)
 * @generate_end_us: g_get_monotonic_time() when lingbot_session_generate()
 *   returned the chunk, 0 when unknown: the chunk was generated from
 *   @generate_end_us minus @stats.compute_seconds to @generate_end_us
 *   (lingbotvaedec's `decode-hidden-fraction`)
 *
 * Attached by lingbotgen to every latent buffer.  The buffer's memory holds
 * the same latents as bytes (f32 [16, C, h, w]), so elements that do not
 * know the meta still get the data.
 */
typedef struct
{
  GstMeta meta;
  GstLingbotSessionHandle *handle;
  guint64 chunk;
  LingbotChunkStats stats;
  gint64 generate_end_us;
} GstLingbotChunkMeta;

GType gst_lingbot_chunk_meta_api_get_type (void);
#define GST_LINGBOT_CHUNK_META_API_TYPE (gst_lingbot_chunk_meta_api_get_type ())
const GstMetaInfo *gst_lingbot_chunk_meta_get_info (void);
#define GST_LINGBOT_CHUNK_META_INFO (gst_lingbot_chunk_meta_get_info ())

GstLingbotChunkMeta *gst_buffer_get_lingbot_chunk_meta (GstBuffer * buffer);
GstLingbotChunkMeta *gst_buffer_add_lingbot_chunk_meta (GstBuffer * buffer,
    GstLingbotSessionHandle * handle, guint64 chunk,
    const LingbotChunkStats * stats);

guint64 gst_lingbot_chunk_meta_get_chunk (GstLingbotChunkMeta * meta);
gint gst_lingbot_chunk_meta_get_frames (GstLingbotChunkMeta * meta);
guint gst_lingbot_chunk_meta_get_keys (GstLingbotChunkMeta * meta);
gdouble gst_lingbot_chunk_meta_get_dit_seconds (GstLingbotChunkMeta * meta);
gdouble gst_lingbot_chunk_meta_get_compute_seconds (GstLingbotChunkMeta * meta);
LingbotWorld *gst_lingbot_chunk_meta_get_world (GstLingbotChunkMeta * meta);

/**
 * GST_LINGBOT_PREVIEW_EVENT:
 *
 * The name of the serialized custom downstream event lingbotgen sends at
 * session start, before the first chunk, when its `preview` property is
 * set: fields `handle` (#GST_TYPE_LINGBOT_SESSION_HANDLE) and `pts`
 * (guint64, the running time the session starts at; 0 offline).
 * lingbotvaedec turns it into one still frame, the session's start image
 * (lingbot_session_get_start_frames()), carrying a #GstLingbotFrameMeta
 * with `preview` set.
 */
#define GST_LINGBOT_PREVIEW_EVENT "lingbot-preview"

/**
 * GST_LINGBOT_REPEAT_EVENT:
 *
 * The name of the serialized custom downstream event a live lingbotgen
 * sends when an upstream force-key-unit event (a viewer that joined: a
 * WebRTC peer, an encoder asked for a key frame) reaches it while it
 * waits for a key with nothing to generate: field `pts` (guint64), the
 * running time now, at or after the end of every frame it stamped, and
 * the generator's next chunk is stamped after that one frame (timestamps
 * increase).  lingbotvaedec pushes the last frame it pushed (the preview
 * before the first chunk) again at `pts` for one frame's duration, the
 * same bytes, with a #GstLingbotFrameMeta of the same chunk and no keys;
 * so a viewer that joined an idle session has a picture before the next
 * key.  Not counted (OFFSET and OFFSET_END both the frames so far).
 */
#define GST_LINGBOT_REPEAT_EVENT "lingbot-repeat"

/**
 * GstLingbotFrameMeta:
 * @meta: parent
 * @chunk: the index of the chunk the frame was decoded from (0 for the
 *   preview)
 * @keys: the key snapshot that steered that chunk (LINGBOT_KEY_* bits; 0
 *   offline and for the preview)
 * @preview: %TRUE on the preview still (GST_LINGBOT_PREVIEW_EVENT), which
 *   is no chunk's frame: chunk and frame counters skip it
 *
 * Attached by lingbotvaedec to every video frame it pushes: the part of
 * the chunk meta a frame needs downstream (lingbotoverlay draws @keys),
 * without the session handle, so that frames kept downstream never keep
 * a session alive.
 */
typedef struct
{
  GstMeta meta;
  guint64 chunk;
  guint keys;
  gboolean preview;
} GstLingbotFrameMeta;

GType gst_lingbot_frame_meta_api_get_type (void);
#define GST_LINGBOT_FRAME_META_API_TYPE (gst_lingbot_frame_meta_api_get_type ())
const GstMetaInfo *gst_lingbot_frame_meta_get_info (void);
#define GST_LINGBOT_FRAME_META_INFO (gst_lingbot_frame_meta_get_info ())

GstLingbotFrameMeta *gst_buffer_get_lingbot_frame_meta (GstBuffer * buffer);
GstLingbotFrameMeta *gst_buffer_add_lingbot_frame_meta (GstBuffer * buffer,
    guint64 chunk, guint keys, gboolean preview);

G_END_DECLS

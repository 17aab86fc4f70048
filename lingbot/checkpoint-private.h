/* lingbot-gst: checkpoint readers, internals shared by the format readers
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "lingbot/checkpoint.h"
#include "kernels/error.h"

G_BEGIN_DECLS

/* Refuse anything larger than this as a header/pickle held in memory. */
#define LINGBOT_CKPT_MAX_HEADER (100u * 1024u * 1024u)

LingbotCheckpoint *lingbot_ckpt_new (const char *path,
    LingbotCheckpointFormat format);
void lingbot_ckpt_set_format (LingbotCheckpoint * ckpt,
    LingbotCheckpointFormat format);
/* Takes ownership of @tensor (also on failure).  Fails on a duplicate name. */
gboolean lingbot_ckpt_add_tensor (LingbotCheckpoint * ckpt, const char *name,
    LbTensor * tensor, const char *file, GError ** error);
/* The first value stored for a key wins. */
void lingbot_ckpt_add_metadata (LingbotCheckpoint * ckpt, const char *key,
    const char *value);
void lingbot_ckpt_finish (LingbotCheckpoint * ckpt);

/* One format's reader of a mapped file: @data (NULL for an empty file) and
 * @len are the mapping, @storage covers it for the tensors to reference. */
typedef gboolean (*LingbotCkptParseFunc) (LingbotCheckpoint * ckpt,
    const char *file, LbStorage * storage, const guint8 * data, gsize len,
    GError ** error);

/* Maps @file read-only and runs @parse on the mapping; the mapping lives on
 * as long as a tensor references it. */
gboolean lingbot_ckpt_load_mapped (LingbotCheckpoint * ckpt, const char *file,
    LingbotCkptParseFunc parse, GError ** error);

gboolean lingbot_ckpt_load_safetensors (LingbotCheckpoint * ckpt,
    const char *file, GError ** error);
gboolean lingbot_ckpt_load_safetensors_index (LingbotCheckpoint * ckpt,
    const char *index_file, GError ** error);
gboolean lingbot_ckpt_load_safetensors_dir (LingbotCheckpoint * ckpt,
    const char *dir, GError ** error);
gboolean lingbot_ckpt_load_pth (LingbotCheckpoint * ckpt, const char *file,
    GError ** error);
gboolean lingbot_ckpt_load_npy (LingbotCheckpoint * ckpt, const char *file,
    GError ** error);

/* A tensor at @offset of @storage; when that address is misaligned for
 * @dtype (legal in safetensors, whose records are packed back to back), the
 * @span bytes it covers are copied to an aligned buffer instead. */
LbTensor *lingbot_ckpt_tensor_new (LbStorage * storage, gsize offset,
    gsize span, LbDType dtype, int ndim, const int64_t * shape,
    const int64_t * stride);

/* Overflow-safe helpers.  lingbot_ckpt_nbytes() is the one shape check of
 * every reader (npy, safetensors, pth): FALSE for a bad dtype or rank, a
 * negative extent, or a shape whose byte count -- with empty extents
 * counted as 1, which bounds every stride and element count -- exceeds
 * G_MAXINT64 or G_MAXSIZE; otherwise the byte count in *nbytes. */
gboolean lingbot_ckpt_nbytes (LbDType dtype, int ndim, const int64_t * shape,
    guint64 * nbytes);
char *lingbot_ckpt_basename_noext (const char *file);

/* Writes @names / @tensors (of equal length; both taken, as by
 * lingbot_dummy_checkpoint_new()) as lingbot_pth_write() does for a `.pth`
 * @path (the published torch.save layout, with no room for @metadata),
 * else as lingbot_safetensors_write(). */
gboolean lingbot_ckpt_write_file (const char *path, GPtrArray * names,
    GPtrArray * tensors, GHashTable * metadata, GError ** error);
/* The Hugging Face shard file name of shard @shard (from 0) of @n_shards,
 * `model-0000S-of-0000N.safetensors`. */
char *lingbot_ckpt_shard_name (guint shard, guint n_shards);
/* Writes @dir/model.safetensors.index.json: `{"metadata": {"total_size":
 * @total}, "weight_map": {name: shard}}`, tensor @names[i] in shard
 * @shard_of[i].  %LB_ERROR_IO naming the file on failure. */
gboolean lingbot_ckpt_write_index (const char *dir, const char *const *names,
    const guint * shard_of, guint n_names, guint n_shards, guint64 total,
    GError ** error);

G_END_DECLS

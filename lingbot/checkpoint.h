/* lingbot-gst: checkpoint readers (safetensors, sharded safetensors,
 * PyTorch .pth, NumPy .npy)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A LingbotCheckpoint is a read-only name -> tensor table over one or more
 * memory-mapped files.  Tensors point straight into the mapping (no copy);
 * the memory is mapped read-only, so copy a tensor (lb_tensor_copy()) before
 * modifying it.  Exceptions, which get an owned aligned copy: a tensor whose
 * address is misaligned for its dtype (safetensors packs records back to
 * back) and a compressed .pth storage record.  Every offset and length read
 * from a file is bounds-checked with overflow-safe arithmetic.
 *
 * Lifetime: lingbot_checkpoint_get() and _get_checked() return tensors
 * borrowed from the checkpoint; lingbot_checkpoint_dup_tensor() returns a
 * new descriptor holding its own storage reference.  Formats: lingbot_model_spec.md section 4 (DiT shards) and
 * vae_and_distributed_spec.md A.7/A.8 (Wan2.1_VAE.pth).
 */
#pragma once

#include <glib.h>
#include "kernels/tensor.h"

G_BEGIN_DECLS

typedef struct _LingbotCheckpoint LingbotCheckpoint;

/**
 * LingbotCheckpointFormat:
 * @LINGBOT_CHECKPOINT_SAFETENSORS: one `.safetensors` file
 * @LINGBOT_CHECKPOINT_SAFETENSORS_SHARDED: several safetensors files, listed
 *   by a `*.safetensors.index.json` or found in one directory
 * @LINGBOT_CHECKPOINT_PTH: a PyTorch zip checkpoint written by torch.save()
 * @LINGBOT_CHECKPOINT_NPY: one NumPy `.npy` array
 * @LINGBOT_CHECKPOINT_DUMMY: weights drawn in memory from a dummy model's
 *   manifest (`*.dummy.json`, docs/design.md "Dummy models")
 */
typedef enum
{
  LINGBOT_CHECKPOINT_SAFETENSORS,
  LINGBOT_CHECKPOINT_SAFETENSORS_SHARDED,
  LINGBOT_CHECKPOINT_PTH,
  LINGBOT_CHECKPOINT_NPY,
  LINGBOT_CHECKPOINT_DUMMY,
} LingbotCheckpointFormat;

/**
 * LINGBOT_DTYPE_ANY:
 * Passed as the dtype of lingbot_checkpoint_get_checked() to accept any
 * element type.
 */
#define LINGBOT_DTYPE_ANY LB_DTYPE_COUNT

/**
 * LINGBOT_SAFETENSORS_INDEX_NAME:
 * File name of the index of a sharded safetensors set (Hugging Face layout).
 */
#define LINGBOT_SAFETENSORS_INDEX_NAME "model.safetensors.index.json"

LingbotCheckpoint *lingbot_checkpoint_open (const char *path, GError ** error);
LingbotCheckpoint *lingbot_checkpoint_ref (LingbotCheckpoint * ckpt);
void lingbot_checkpoint_unref (LingbotCheckpoint * ckpt);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotCheckpoint, lingbot_checkpoint_unref)
const char *lingbot_checkpoint_get_path (LingbotCheckpoint * ckpt);
LingbotCheckpointFormat lingbot_checkpoint_get_format (LingbotCheckpoint *
    ckpt);
const char *lingbot_checkpoint_format_name (LingbotCheckpointFormat format);

guint lingbot_checkpoint_get_n_tensors (LingbotCheckpoint * ckpt);
const char *const *lingbot_checkpoint_list_tensors (LingbotCheckpoint *
    ckpt, guint * n_tensors);
gboolean lingbot_checkpoint_has_tensor (LingbotCheckpoint * ckpt,
    const char *name);
const LbTensor *lingbot_checkpoint_get (LingbotCheckpoint * ckpt,
    const char *name, GError ** error);
LbTensor *lingbot_checkpoint_dup_tensor (LingbotCheckpoint * ckpt,
    const char *name, GError ** error);
const LbTensor *lingbot_checkpoint_get_checked (LingbotCheckpoint * ckpt,
    const char *name, int ndim, const int64_t * shape, LbDType dtype,
    GError ** error);
const char *lingbot_checkpoint_get_tensor_file (LingbotCheckpoint * ckpt,
    const char *name);

GHashTable *lingbot_checkpoint_get_metadata (LingbotCheckpoint * ckpt);
const char *lingbot_checkpoint_get_metadata_value (LingbotCheckpoint *
    ckpt, const char *key);

/* ---- writers ---- */

gboolean lingbot_safetensors_write (const char *path,
    const char *const *names, const LbTensor * const *tensors, guint n_tensors,
    GHashTable * metadata, GError ** error);
gboolean lingbot_safetensors_write_sharded (const char *dir,
    const char *const *names, const LbTensor * const *tensors, guint n_tensors,
    guint64 max_shard_bytes, GHashTable * metadata, GError ** error);

/**
 * lingbot_pth_write:
 * @path: the `.pth` file to write (replaced atomically)
 * @names: (array length=n): tensor names, in order
 * @tensors: (array length=n): CPU tensors (f32, bf16, f16, f64, i64, i32,
 *   u8; any strides, 0-d and empty included)
 * @n: number of tensors
 * @error: return location for a #GError
 *
 * Writes the tensors as torch.save() writes an OrderedDict state dict (zip
 * archive named after @path's basename, pickle protocol 2, stored 64-byte
 * aligned records); read back by lingbot_checkpoint_open() and torch.load().
 *
 * Returns: %TRUE on success.
 */
gboolean lingbot_pth_write (const char *path, const char *const *names,
    LbTensor * const *tensors, guint n, GError ** error);

G_END_DECLS

/* lingbot-gst: checkpoint API common to all formats
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The checkpoint object, what the format readers (npy.c, pth.c,
 * safetensors.c) build it with, and its accessors.  Opening a path (format
 * detection, then one reader) is checkpoint-open.c's, so the readers and
 * this file do not call each other in a circle.
 */
#include "lingbot/checkpoint-private.h"

#include <string.h>

typedef struct
{
  LbTensor *tensor;
  const char *file;             /* owned by LingbotCheckpoint.files */
} TensorEntry;

struct _LingbotCheckpoint
{
  char *path;
  LingbotCheckpointFormat format;
  GHashTable *tensors;          /* name -> TensorEntry */
  GHashTable *files;            /* set of file names */
  GHashTable *metadata;         /* string -> string */
  char **names;                 /* sorted, NULL-terminated */
  guint n_names;
};

static void
tensor_entry_free (gpointer p)
{
  TensorEntry *e = p;
  lb_tensor_free (e->tensor);
  g_free (e);
}

LingbotCheckpoint *
lingbot_ckpt_new (const char *path, LingbotCheckpointFormat format)
{
  LingbotCheckpoint *ckpt = g_atomic_rc_box_new0 (LingbotCheckpoint);
  ckpt->path = g_strdup (path);
  ckpt->format = format;
  ckpt->tensors = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
      tensor_entry_free);
  ckpt->files = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  ckpt->metadata = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
      g_free);
  return ckpt;
}

void
lingbot_ckpt_set_format (LingbotCheckpoint * ckpt,
    LingbotCheckpointFormat format)
{
  ckpt->format = format;
}

gboolean
lingbot_ckpt_add_tensor (LingbotCheckpoint * ckpt, const char *name,
    LbTensor * tensor, const char *file, GError ** error)
{
  TensorEntry *old = g_hash_table_lookup (ckpt->tensors, name);
  if (old != NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: tensor %s is defined twice (also in %s)", file, name, old->file);
    lb_tensor_free (tensor);
    return FALSE;
  }
  const char *f = g_hash_table_lookup (ckpt->files, file);
  if (f == NULL) {
    char *copy = g_strdup (file);
    g_hash_table_add (ckpt->files, copy);
    f = copy;
  }
  TensorEntry *e = g_new0 (TensorEntry, 1);
  e->tensor = tensor;
  e->file = f;
  g_hash_table_insert (ckpt->tensors, g_strdup (name), e);
  return TRUE;
}

void
lingbot_ckpt_add_metadata (LingbotCheckpoint * ckpt, const char *key,
    const char *value)
{
  if (!g_hash_table_contains (ckpt->metadata, key))
    g_hash_table_insert (ckpt->metadata, g_strdup (key), g_strdup (value));
}

static int
compare_names (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

void
lingbot_ckpt_finish (LingbotCheckpoint * ckpt)
{
  guint n = 0;
  g_strfreev (ckpt->names);
  ckpt->names = (char **) g_hash_table_get_keys_as_array (ckpt->tensors, &n);
  /* the keys belong to the table; copy them so the array stands alone */
  for (guint i = 0; i < n; i++)
    ckpt->names[i] = g_strdup (ckpt->names[i]);
  qsort (ckpt->names, n, sizeof (char *), compare_names);
  ckpt->n_names = n;
}

/* Maps @file read-only; *data is NULL for an empty file.  Returns a storage
 * covering the whole mapping (it owns the mapping). */
static LbStorage *
map_file (const char *file, const guint8 ** data, gsize * len, GError ** error)
{
  GError *err = NULL;
  GMappedFile *mf = g_mapped_file_new (file, FALSE, &err);
  if (mf == NULL) {
    /* a missing file (a shard an index names) is NOT_FOUND, as a missing
     * tensor is; anything else the file system says is IO */
    g_set_error (error, LB_ERROR, g_error_matches (err, G_FILE_ERROR,
            G_FILE_ERROR_NOENT) ? LB_ERROR_NOT_FOUND : LB_ERROR_IO,
        "%s: cannot map file: %s", file, err->message);
    g_error_free (err);
    return NULL;
  }
  *len = g_mapped_file_get_length (mf);
  *data = (const guint8 *) g_mapped_file_get_contents (mf);
  if (*len == 0)
    *data = NULL;
  return lb_storage_new ((void *) *data, *len, LB_DEVICE_HOST,
      (GDestroyNotify) g_mapped_file_unref, mf);
}

gboolean
lingbot_ckpt_load_mapped (LingbotCheckpoint * ckpt, const char *file,
    LingbotCkptParseFunc parse, GError ** error)
{
  const guint8 *data;
  gsize len;
  LbStorage *storage = map_file (file, &data, &len, error);
  if (storage == NULL)
    return FALSE;
  gboolean ok = parse (ckpt, file, storage, data, len, error);
  lb_storage_unref (storage);
  return ok;
}

LbTensor *
lingbot_ckpt_tensor_new (LbStorage * storage, gsize offset, gsize span,
    LbDType dtype, int ndim, const int64_t * shape, const int64_t * stride)
{
  const guint8 *p = (const guint8 *) storage->data + offset;
  if (span == 0 || (guintptr) p % lb_dtype_size (dtype) == 0)
    return lb_tensor_new_from_storage (storage, offset, dtype, ndim, shape,
        stride);
  void *copy = g_memdup2 (p, span);
  LbStorage *s = lb_storage_new (copy, span, LB_DEVICE_HOST, g_free, copy);
  LbTensor *t = lb_tensor_new_from_storage (s, 0, dtype, ndim, shape, stride);
  lb_storage_unref (s);
  return t;
}

gboolean
lingbot_ckpt_nbytes (LbDType dtype, int ndim, const int64_t * shape,
    guint64 * nbytes)
{
  guint64 n = lb_dtype_size (dtype), span = n;
  if (n == 0 || ndim < 0 || ndim > LB_MAX_DIMS)
    return FALSE;
  /* span: the product with empty extents counted as 1, so that an empty
   * tensor's other extents cannot overflow a contiguous stride, an element
   * count taken in another order or a byte offset either:
   * [0, 7774777772777777777, 1, 2] holds no byte but its first stride
   * would be 1.5e19 */
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || !g_uint64_checked_mul (&n, n, (guint64) shape[i]) ||
        !g_uint64_checked_mul (&span, span, (guint64) MAX (shape[i], 1)))
      return FALSE;
  }
  /* keep every byte count representable as int64 and gsize */
  if (span > (guint64) G_MAXINT64 || span > (guint64) G_MAXSIZE)
    return FALSE;
  *nbytes = n;
  return TRUE;
}

char *
lingbot_ckpt_basename_noext (const char *file)
{
  char *base = g_path_get_basename (file);
  char *dot = strrchr (base, '.');
  if (dot != NULL && dot != base)
    *dot = '\0';
  return base;
}

/**
 * lingbot_checkpoint_ref:
 * @ckpt: a checkpoint
 *
 * Returns: (transfer full): @ckpt
 */
LingbotCheckpoint *
lingbot_checkpoint_ref (LingbotCheckpoint * ckpt)
{
  g_return_val_if_fail (ckpt != NULL, NULL);
  return g_atomic_rc_box_acquire (ckpt);
}

static void
checkpoint_clear (gpointer p)
{
  LingbotCheckpoint *ckpt = p;
  g_hash_table_unref (ckpt->tensors);
  g_hash_table_unref (ckpt->files);
  g_hash_table_unref (ckpt->metadata);
  g_strfreev (ckpt->names);
  g_free (ckpt->path);
}

/**
 * lingbot_checkpoint_unref:
 * @ckpt: (nullable): a checkpoint
 *
 * Drops a reference.  The mapping itself lives on while tensors obtained
 * with lingbot_checkpoint_dup_tensor() hold a storage reference.
 */
void
lingbot_checkpoint_unref (LingbotCheckpoint * ckpt)
{
  if (ckpt != NULL)
    g_atomic_rc_box_release_full (ckpt, checkpoint_clear);
}

/**
 * lingbot_checkpoint_get_path:
 * @ckpt: a checkpoint
 *
 * Returns: the path passed to lingbot_checkpoint_open().
 */
const char *
lingbot_checkpoint_get_path (LingbotCheckpoint * ckpt)
{
  return ckpt->path;
}

/**
 * lingbot_checkpoint_get_format:
 * @ckpt: a checkpoint
 *
 * Returns: the detected format.
 */
LingbotCheckpointFormat
lingbot_checkpoint_get_format (LingbotCheckpoint * ckpt)
{
  return ckpt->format;
}

/**
 * lingbot_checkpoint_format_name:
 * @format: a format
 *
 * Returns: a short name: "safetensors", "safetensors-sharded", "pth", "npy".
 */
const char *
lingbot_checkpoint_format_name (LingbotCheckpointFormat format)
{
  switch (format) {
    case LINGBOT_CHECKPOINT_SAFETENSORS:
      return "safetensors";
    case LINGBOT_CHECKPOINT_SAFETENSORS_SHARDED:
      return "safetensors-sharded";
    case LINGBOT_CHECKPOINT_PTH:
      return "pth";
    case LINGBOT_CHECKPOINT_NPY:
      return "npy";
    case LINGBOT_CHECKPOINT_DUMMY:
      return "dummy";
  }
  return "unknown";
}

/**
 * lingbot_checkpoint_get_n_tensors:
 * @ckpt: a checkpoint
 *
 * Returns: the number of tensors.
 */
guint
lingbot_checkpoint_get_n_tensors (LingbotCheckpoint * ckpt)
{
  return ckpt->n_names;
}

/**
 * lingbot_checkpoint_list_tensors:
 * @ckpt: a checkpoint
 * @n_tensors: (out) (optional): number of names
 *
 * Returns: (transfer none) (array zero-terminated=1): every tensor name,
 * sorted by strcmp() (byte order), owned by @ckpt.
 */
const char *const *
lingbot_checkpoint_list_tensors (LingbotCheckpoint * ckpt, guint * n_tensors)
{
  if (n_tensors)
    *n_tensors = ckpt->n_names;
  return (const char *const *) ckpt->names;
}

/**
 * lingbot_checkpoint_has_tensor:
 * @ckpt: a checkpoint
 * @name: a tensor name
 *
 * Returns: whether @ckpt holds a tensor called @name.
 */
gboolean
lingbot_checkpoint_has_tensor (LingbotCheckpoint * ckpt, const char *name)
{
  return g_hash_table_contains (ckpt->tensors, name);
}

/**
 * lingbot_checkpoint_get:
 * @ckpt: a checkpoint
 * @name: a tensor name
 * @error: return location for a #GError
 *
 * Looks a tensor up.  The tensor is a read-only CPU tensor pointing into the
 * mapped file, with the dtype, shape and strides stored there (a .pth tensor
 * can be non-contiguous; a Fortran-order .npy has reversed strides).
 *
 * Errors: %LB_ERROR_NOT_FOUND "tensor NAME not found in PATH".
 *
 * Returns: (transfer none) (nullable): the tensor, borrowed: valid while
 * @ckpt is alive.  Use lingbot_checkpoint_dup_tensor() to keep one longer.
 */
const LbTensor *
lingbot_checkpoint_get (LingbotCheckpoint * ckpt, const char *name,
    GError ** error)
{
  g_return_val_if_fail (ckpt != NULL && name != NULL, NULL);
  TensorEntry *e = g_hash_table_lookup (ckpt->tensors, name);
  if (e == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND,
        "tensor %s not found in %s", name, ckpt->path);
    return NULL;
  }
  return e->tensor;
}

/**
 * lingbot_checkpoint_dup_tensor:
 * @ckpt: a checkpoint
 * @name: a tensor name
 * @error: return location for a #GError
 *
 * Like lingbot_checkpoint_get() but returns a new descriptor holding its own
 * reference on the mapped storage, so it stays valid after @ckpt is gone.
 * The data is not copied.
 *
 * Returns: (transfer full) (nullable): a new tensor; free with
 * lb_tensor_free().
 */
LbTensor *
lingbot_checkpoint_dup_tensor (LingbotCheckpoint * ckpt, const char *name,
    GError ** error)
{
  const LbTensor *t = lingbot_checkpoint_get (ckpt, name, error);
  if (t == NULL)
    return NULL;
  LbTensor *copy = g_new (LbTensor, 1);
  *copy = *t;
  if (copy->storage)
    lb_storage_ref (copy->storage);
  return copy;
}

/**
 * lingbot_checkpoint_get_checked:
 * @ckpt: a checkpoint
 * @name: a tensor name
 * @ndim: expected number of dimensions
 * @shape: (array length=ndim) (nullable): expected extents; -1 in an entry
 *   accepts any extent there; %NULL checks only @ndim
 * @dtype: expected dtype, or %LINGBOT_DTYPE_ANY
 * @error: return location for a #GError
 *
 * Looks a tensor up and checks its shape and dtype, the way a model loader
 * checks every weight against the configuration.
 *
 * Errors: %LB_ERROR_NOT_FOUND "tensor NAME not found in PATH";
 * %LB_ERROR_SHAPE "tensor NAME has shape [8, 4], expected [16, 4]" or
 * "tensor NAME has dtype bf16, expected f32".
 *
 * Returns: (transfer none) (nullable): the tensor, borrowed as for
 * lingbot_checkpoint_get().
 */
const LbTensor *
lingbot_checkpoint_get_checked (LingbotCheckpoint * ckpt, const char *name,
    int ndim, const int64_t * shape, LbDType dtype, GError ** error)
{
  const LbTensor *t = lingbot_checkpoint_get (ckpt, name, error);
  if (t == NULL)
    return NULL;

  gboolean match = t->ndim == ndim;
  for (int i = 0; match && shape != NULL && i < ndim; i++)
    match = shape[i] < 0 || shape[i] == t->shape[i];
  if (!match) {
    char *have = lb_tensor_shape_string (t);
    char *want;
    if (shape != NULL)
      want = lb_shape_string (ndim, shape);
    else
      want = g_strdup_printf ("%d dimensions", ndim);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "tensor %s has shape %s, expected %s", name, have, want);
    g_free (have);
    g_free (want);
    return NULL;
  }
  if (dtype != LINGBOT_DTYPE_ANY && t->dtype != dtype) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "tensor %s has dtype %s, expected %s", name, lb_dtype_name (t->dtype),
        lb_dtype_name (dtype));
    return NULL;
  }
  return t;
}

/**
 * lingbot_checkpoint_get_tensor_file:
 * @ckpt: a checkpoint
 * @name: a tensor name
 *
 * Returns: (nullable): the file holding @name (a shard of a sharded set),
 * %NULL when there is no such tensor.
 */
const char *
lingbot_checkpoint_get_tensor_file (LingbotCheckpoint * ckpt, const char *name)
{
  TensorEntry *e = g_hash_table_lookup (ckpt->tensors, name);
  return e ? e->file : NULL;
}

/**
 * lingbot_checkpoint_get_metadata:
 * @ckpt: a checkpoint
 *
 * The safetensors `__metadata__` string map.  For a sharded set: the index's
 * "metadata" object (non-string values as JSON text, e.g. "total_size")
 * merged with each shard's `__metadata__` (index first, then shards in name
 * order; the first value for a key wins).  For .pth: "pth_wrapper" when a
 * wrapper dict was unwrapped (see lingbot_checkpoint_open()), else empty.
 * Empty for .npy.
 *
 * Returns: (transfer none) (element-type utf8 utf8): the metadata, owned by
 * @ckpt.
 */
GHashTable *
lingbot_checkpoint_get_metadata (LingbotCheckpoint * ckpt)
{
  return ckpt->metadata;
}

/**
 * lingbot_checkpoint_get_metadata_value:
 * @ckpt: a checkpoint
 * @key: a metadata key
 *
 * Returns: (nullable): the value of @key, see
 * lingbot_checkpoint_get_metadata().
 */
const char *
lingbot_checkpoint_get_metadata_value (LingbotCheckpoint * ckpt,
    const char *key)
{
  return g_hash_table_lookup (ckpt->metadata, key);
}

/* lingbot-gst: PyTorch .pth writer (the torch.save zip format)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Writes a name -> tensor table the way torch.save() writes a state dict
 * (an OrderedDict of tensors), so that both lingbot/pth.c and torch.load()
 * read it:
 *
 *   <base>/data.pkl    pickle protocol 2 (below)
 *   <base>/byteorder   "little"
 *   <base>/data/<k>    one raw little-endian record per tensor, k = 0, 1, ...
 *   <base>/version     "3\n"
 *
 * where <base> is the file's basename without its extension (as torch does).
 * Entries are stored (not compressed) and, like torch's writer, each entry
 * carries an "FB" local extra field that pads its data to a 64-byte
 * boundary, so a reader can map the records in place.
 *
 * The pickle is the exact opcode sequence CPython's pickler emits for
 * torch.save(OrderedDict):
 *
 *   PROTO 2, GLOBAL collections.OrderedDict, EMPTY_TUPLE, REDUCE,
 *   then per item (batched MARK .. SETITEMS, 1000 per batch):
 *     BINUNICODE name,
 *     REDUCE(torch._utils._rebuild_tensor_v2,
 *            (BINPERSID ('storage', torch.XStorage, key, 'cpu', numel),
 *             storage_offset 0, size tuple, stride tuple, False,
 *             OrderedDict()))
 *   STOP
 *
 * with every non-empty tuple, string, global and REDUCE result memoized
 * (BINPUT) and repeated globals / strings fetched back with BINGET.
 */
#include "lingbot/checkpoint-private.h"

#include <errno.h>
#include <string.h>
#include <glib/gstdio.h>
#include <zip.h>

#define PTH_ALIGN 64
#define PTH_BATCH 1000
/* libzip adds a 20-byte Zip64 extra field to the local header of entries
 * this large (its MAX_DEFLATE_SIZE_32) */
#define PTH_ZIP64_LOCAL_THRESHOLD 4293656963u
/* the 'FB' extra-field id torch's writer pads with */
#define PTH_PAD_FIELD_ID 0x4246

/* ---- the pickle ---- */

typedef struct
{
  GByteArray *b;
  guint memo;                   /* next memo index */
  /* memo indices of the shared objects; -1 until first written */
  gint64 m_odict, m_rebuild, m_storage_str, m_cpu_str;
  gint64 m_storage_type[LB_DTYPE_COUNT];
} Pickler;

static void
pk_byte (Pickler * pk, guint8 v)
{
  g_byte_array_append (pk->b, &v, 1);
}

static void
pk_le (Pickler * pk, guint64 v, int n)
{
  guint8 buf[8];
  for (int i = 0; i < n; i++)
    buf[i] = (guint8) (v >> (8 * i));
  g_byte_array_append (pk->b, buf, (guint) n);
}

/* BINPUT / LONG_BINPUT of the object just written; returns its index */
static gint64
pk_put (Pickler * pk)
{
  guint idx = pk->memo++;
  if (idx < 256) {
    pk_byte (pk, 'q');
    pk_byte (pk, (guint8) idx);
  } else {
    pk_byte (pk, 'r');
    pk_le (pk, idx, 4);
  }
  return idx;
}

static void
pk_get (Pickler * pk, gint64 idx)
{
  if (idx < 256) {
    pk_byte (pk, 'h');
    pk_byte (pk, (guint8) idx);
  } else {
    pk_byte (pk, 'j');
    pk_le (pk, (guint64) idx, 4);
  }
}

/* a str (BINUNICODE), memoized */
static gint64
pk_str (Pickler * pk, const char *s)
{
  gsize n = strlen (s);
  pk_byte (pk, 'X');
  pk_le (pk, n, 4);
  g_byte_array_append (pk->b, (const guint8 *) s, (guint) n);
  return pk_put (pk);
}

/* a str fetched from the memo when it was written before (CPython memoizes
 * by identity; interned constants such as 'storage' and 'cpu' repeat) */
static void
pk_str_shared (Pickler * pk, const char *s, gint64 * memo)
{
  if (*memo >= 0)
    pk_get (pk, *memo);
  else
    *memo = pk_str (pk, s);
}

static void
pk_global (Pickler * pk, const char *module, const char *name, gint64 * memo)
{
  if (*memo >= 0) {
    pk_get (pk, *memo);
    return;
  }
  pk_byte (pk, 'c');
  g_byte_array_append (pk->b, (const guint8 *) module, (guint) strlen (module));
  pk_byte (pk, '\n');
  g_byte_array_append (pk->b, (const guint8 *) name, (guint) strlen (name));
  pk_byte (pk, '\n');
  *memo = pk_put (pk);
}

/* CPython's save_long for protocol 2 */
static void
pk_int (Pickler * pk, gint64 v)
{
  if (v >= 0 && v <= 0xff) {
    pk_byte (pk, 'K');
    pk_byte (pk, (guint8) v);
  } else if (v >= 0 && v <= 0xffff) {
    pk_byte (pk, 'M');
    pk_le (pk, (guint64) v, 2);
  } else if (v >= G_MININT32 && v <= G_MAXINT32) {
    pk_byte (pk, 'J');
    pk_le (pk, (guint64) v, 4);
  } else {
    /* LONG1: minimal two's-complement little-endian bytes */
    int n = 1;
    while (n < 8) {
      gint64 lo = -((gint64) 1 << (8 * n - 1));
      gint64 hi = ((gint64) 1 << (8 * n - 1)) - 1;
      if (v >= lo && v <= hi)
        break;
      n++;
    }
    pk_byte (pk, 0x8a);
    pk_byte (pk, (guint8) n);
    pk_le (pk, (guint64) v, n);
  }
}

/* a tuple of ints: EMPTY_TUPLE (not memoized), TUPLE1..3, or MARK .. TUPLE */
static void
pk_int_tuple (Pickler * pk, int n, const int64_t * v)
{
  if (n == 0) {
    pk_byte (pk, ')');
    return;
  }
  if (n > 3)
    pk_byte (pk, '(');
  for (int i = 0; i < n; i++)
    pk_int (pk, v[i]);
  pk_byte (pk, n == 1 ? 0x85 : n == 2 ? 0x86 : n == 3 ? 0x87 : 't');
  pk_put (pk);
}

static const char *
storage_type_name (LbDType dtype)
{
  switch (dtype) {
    case LB_DTYPE_F32:
      return "FloatStorage";
    case LB_DTYPE_BF16:
      return "BFloat16Storage";
    case LB_DTYPE_F16:
      return "HalfStorage";
    case LB_DTYPE_F64:
      return "DoubleStorage";
    case LB_DTYPE_I64:
      return "LongStorage";
    case LB_DTYPE_I32:
      return "IntStorage";
    case LB_DTYPE_U8:
      return "ByteStorage";
    default:
      return NULL;
  }
}

static void
pk_tensor (Pickler * pk, const LbTensor * t, guint key)
{
  char keybuf[16];
  int64_t stride[LB_MAX_DIMS];
  lb_contiguous_strides (t->ndim, t->shape, stride);

  pk_global (pk, "torch._utils", "_rebuild_tensor_v2", &pk->m_rebuild);
  pk_byte (pk, '(');
  /* persistent id ('storage', torch.XStorage, key, 'cpu', numel) */
  pk_byte (pk, '(');
  pk_str_shared (pk, "storage", &pk->m_storage_str);
  pk_global (pk, "torch", storage_type_name (t->dtype),
      &pk->m_storage_type[t->dtype]);
  g_snprintf (keybuf, sizeof keybuf, "%u", key);
  pk_str (pk, keybuf);
  pk_str_shared (pk, "cpu", &pk->m_cpu_str);
  pk_int (pk, lb_tensor_numel (t));
  pk_byte (pk, 't');
  pk_put (pk);
  pk_byte (pk, 'Q');            /* BINPERSID */
  pk_int (pk, 0);               /* storage_offset */
  pk_int_tuple (pk, t->ndim, t->shape);
  pk_int_tuple (pk, t->ndim, stride);
  pk_byte (pk, 0x89);           /* requires_grad False */
  /* backward_hooks: OrderedDict() */
  pk_global (pk, "collections", "OrderedDict", &pk->m_odict);
  pk_byte (pk, ')');
  pk_byte (pk, 'R');
  pk_put (pk);
  pk_byte (pk, 't');
  pk_put (pk);
  pk_byte (pk, 'R');
  pk_put (pk);
}

static GByteArray *
pickle_state_dict (const char *const *names, LbTensor * const *tensors, guint n)
{
  Pickler pk = { g_byte_array_new (), 0, -1, -1, -1, -1, {0} };
  for (int i = 0; i < LB_DTYPE_COUNT; i++)
    pk.m_storage_type[i] = -1;

  pk_byte (&pk, 0x80);          /* PROTO 2 */
  pk_byte (&pk, 2);
  pk_global (&pk, "collections", "OrderedDict", &pk.m_odict);
  pk_byte (&pk, ')');
  pk_byte (&pk, 'R');
  pk_put (&pk);
  for (guint first = 0; first < n; first += PTH_BATCH) {
    guint k = MIN (n - first, PTH_BATCH);
    if (k > 1)
      pk_byte (&pk, '(');
    for (guint i = first; i < first + k; i++) {
      pk_str (&pk, names[i]);
      pk_tensor (&pk, tensors[i], i);
    }
    pk_byte (&pk, k > 1 ? 'u' : 's');
  }
  pk_byte (&pk, '.');
  return pk.b;
}

/* ---- the archive ---- */

typedef struct
{
  zip_t *za;
  guint64 cursor;               /* predicted offset of the next local header */
  const char *tmp;
} Archive;

static gboolean
add_entry (Archive * ar, const char *name, const void *data, guint64 len,
    GError ** error)
{
  static const guint8 empty[1] = { 0 };
  zip_source_t *src = zip_source_buffer (ar->za, len ? data : empty, len, 0);
  zip_int64_t idx = src ? zip_file_add (ar->za, name, src,
      ZIP_FL_OVERWRITE | ZIP_FL_ENC_UTF_8) : -1;
  if (idx < 0) {
    if (src)
      zip_source_free (src);
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s: cannot add %s: %s",
        ar->tmp, name, zip_strerror (ar->za));
    return FALSE;
  }
  /* pad the local header with an 'FB' field so the data starts on a
   * 64-byte boundary (torch's writer does the same) */
  guint64 start = ar->cursor + 30 + strlen (name) + 4;
  if (len > PTH_ZIP64_LOCAL_THRESHOLD)
    start += 20;
  guint16 pad = (guint16) ((PTH_ALIGN - start % PTH_ALIGN) % PTH_ALIGN);
  guint8 padbuf[PTH_ALIGN];
  memset (padbuf, 'Z', sizeof padbuf);
  if (zip_set_file_compression (ar->za, (zip_uint64_t) idx, ZIP_CM_STORE,
          0) != 0
      || zip_file_extra_field_set (ar->za, (zip_uint64_t) idx,
          PTH_PAD_FIELD_ID, ZIP_EXTRA_FIELD_NEW, padbuf, pad, ZIP_FL_LOCAL) != 0
      /* a fixed time stamp: the same tensors give the same bytes */
      || zip_file_set_mtime (ar->za, (zip_uint64_t) idx, 315619200, 0) != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s: %s: %s", ar->tmp, name,
        zip_strerror (ar->za));
    return FALSE;
  }
  ar->cursor = start + pad + len;
  return TRUE;
}

/* lingbot_pth_write:
 * (documented in lingbot/checkpoint.h)
 *
 * @path: the file to write, normally `*.pth` (replaced atomically: written
 *   as @path.tmp, then renamed)
 * @names: (array length=n): tensor names, in the order to store them
 * @tensors: (array length=n): CPU tensors of dtype f32, bf16, f16, f64, i64,
 *   i32 or u8; any strides (stored contiguous), 0-d and empty ones included
 * @n: number of tensors
 * @error: %LB_ERROR_INVALID_ARGUMENT for a duplicate name, a non-CPU tensor
 *   or an unsupported dtype; %LB_ERROR_IO for write failures
 *
 * Writes the tensors as torch.save() writes an OrderedDict state dict: a
 * zip archive (entries stored, data 64-byte aligned) whose top folder is
 * @path's basename without its extension, holding `data.pkl` (pickle
 * protocol 2: each tensor rebuilt by torch._utils._rebuild_tensor_v2 from
 * its own storage), `byteorder`, `data/0`..`data/N-1` and `version`.
 * lingbot_checkpoint_open() and torch.load() both read the result, with
 * the names in the given order.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_pth_write (const char *path, const char *const *names,
    LbTensor * const *tensors, guint n, GError ** error)
{
  g_return_val_if_fail (path != NULL, FALSE);
  g_return_val_if_fail (n == 0 || (names != NULL && tensors != NULL), FALSE);

  g_autoptr (GHashTable) seen = g_hash_table_new (g_str_hash, g_str_equal);
  for (guint i = 0; i < n; i++) {
    const LbTensor *t = tensors[i];
    if (names[i] == NULL || t == NULL) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "%s: tensor %u has no name or no tensor", path, i);
      return FALSE;
    }
    if (!g_hash_table_add (seen, (gpointer) names[i])) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "%s: duplicate tensor name %s", path, names[i]);
      return FALSE;
    }
    if (t->device.type != LB_DEVICE_CPU) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "%s: tensor %s is not on the CPU", path, names[i]);
      return FALSE;
    }
    if ((int) t->dtype < 0 || t->dtype >= LB_DTYPE_COUNT ||
        storage_type_name (t->dtype) == NULL) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "%s: tensor %s: dtype %s has no torch storage type", path,
          names[i], lb_dtype_name (t->dtype));
      return FALSE;
    }
    if (t->ndim < 0 || t->ndim > LB_MAX_DIMS) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "%s: tensor %s has %d dimensions", path, names[i], t->ndim);
      return FALSE;
    }
  }

  char *base = lingbot_ckpt_basename_noext (path);
  char *tmp = g_strconcat (path, ".tmp", NULL);
  GByteArray *pkl = pickle_state_dict (names, tensors, n);
  /* contiguous copies of strided tensors, alive until zip_close() */
  GPtrArray *copies = g_ptr_array_new_with_free_func ((GDestroyNotify)
      lb_tensor_free);
  Archive ar = { NULL, 0, tmp };
  gboolean ok = FALSE;
  int zerr = 0;
  char *entry;

  g_unlink (tmp);
  ar.za = zip_open (tmp, ZIP_CREATE | ZIP_TRUNCATE, &zerr);
  if (ar.za == NULL) {
    zip_error_t ze;
    zip_error_init_with_code (&ze, zerr);
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s: cannot create: %s", tmp,
        zip_error_strerror (&ze));
    zip_error_fini (&ze);
    goto out;
  }

  entry = g_strconcat (base, "/data.pkl", NULL);
  ok = add_entry (&ar, entry, pkl->data, pkl->len, error);
  g_free (entry);
  if (ok) {
    entry = g_strconcat (base, "/byteorder", NULL);
    ok = add_entry (&ar, entry, "little", 6, error);
    g_free (entry);
  }
  for (guint i = 0; ok && i < n; i++) {
    const LbTensor *t = tensors[i];
    if (!lb_tensor_is_contiguous (t)) {
      t = lb_tensor_copy (t);
      g_ptr_array_add (copies, (gpointer) t);
    }
    entry = g_strdup_printf ("%s/data/%u", base, i);
    ok = add_entry (&ar, entry, t->data, lb_tensor_nbytes (t), error);
    g_free (entry);
  }
  if (ok) {
    entry = g_strconcat (base, "/version", NULL);
    ok = add_entry (&ar, entry, "3\n", 2, error);
    g_free (entry);
  }
  if (!ok)
    goto out;

  if (zip_close (ar.za) != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s: write failed: %s", tmp,
        zip_strerror (ar.za));
    ok = FALSE;
    goto out;
  }
  ar.za = NULL;
  if (g_rename (tmp, path) != 0) {
    int e = errno;
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s: cannot rename to %s: %s",
        tmp, path, g_strerror (e));
    ok = FALSE;
  }

out:
  if (ar.za != NULL)
    zip_discard (ar.za);
  if (!ok)
    g_unlink (tmp);
  g_ptr_array_unref (copies);
  g_byte_array_unref (pkl);
  g_free (tmp);
  g_free (base);
  return ok;
}

gboolean
lingbot_ckpt_write_file (const char *path, GPtrArray * names,
    GPtrArray * tensors, GHashTable * metadata, GError ** error)
{
  g_autoptr (GPtrArray) n = names;
  g_autoptr (GPtrArray) t = tensors;
  g_return_val_if_fail (n->len == t->len, FALSE);
  if (g_str_has_suffix (path, ".pth"))
    return lingbot_pth_write (path, (const char *const *) n->pdata,
        (LbTensor * const *) t->pdata, n->len, error);
  return lingbot_safetensors_write (path, (const char *const *) n->pdata,
      (const LbTensor * const *) t->pdata, n->len, metadata, error);
}

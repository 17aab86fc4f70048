/* lingbot-gst: PyTorch .pth reader (torch.save zip format)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Since torch 1.6, torch.save writes a zip archive (entries "stored", data
 * records 64-byte aligned) with one top-level folder (any name):
 *   <dir>/data.pkl     pickle (protocol 2) of the saved object
 *   <dir>/data/<key>   one raw little-endian record per storage
 *   <dir>/version, <dir>/byteorder (newer torch)
 * Tensors in the pickle are REDUCE(torch._utils._rebuild_tensor_v2,
 * (storage, storage_offset, size, stride, requires_grad, backward_hooks
 * [, metadata])) where storage is a persistent id
 * ('storage', torch.FloatStorage, key, location, numel) (spec
 * vae_and_distributed_spec.md A.8).
 *
 * The pickle is run by a small VM that knows the opcodes torch.save emits and
 * never calls anything: globals are symbols, REDUCE of an unknown callable is
 * an opaque object.  Storage records that are stored uncompressed are used in
 * place inside the mmapped archive; compressed ones are inflated into an
 * owned buffer.
 */
#include "lingbot/checkpoint-private.h"

#include <stdarg.h>
#include <string.h>
#include <zip.h>

#define PK_MAX_MARKS 4096
#define PK_MAX_STACK (1u << 24)
#define PK_MAX_NESTING 64

/* Root-dict keys that wrap the real state dict, tried in this order. */
static const char *const wrapper_keys[] = {
  "state_dict", "model_state", "model_state_dict", "model", "module", NULL
};

/* ---- a libzip source over the mapped bytes that reports read positions */

typedef struct
{
  const guint8 *data;
  guint64 len;
  guint64 pos;
  gint64 first_read;            /* position of the first READ since reset */
  zip_error_t error;
} MapSource;

static zip_int64_t
map_source_cb (void *user, void *buf, zip_uint64_t n, zip_source_cmd_t cmd)
{
  MapSource *ms = user;
  switch (cmd) {
    case ZIP_SOURCE_OPEN:
      ms->pos = 0;
      return 0;
    case ZIP_SOURCE_READ:{
      guint64 avail = ms->len - ms->pos;
      guint64 k = MIN (n, avail);
      if (ms->first_read < 0)
        ms->first_read = (gint64) ms->pos;
      if (k > 0)
        memcpy (buf, ms->data + ms->pos, k);
      ms->pos += k;
      return (zip_int64_t) k;
    }
    case ZIP_SOURCE_CLOSE:
      return 0;
    case ZIP_SOURCE_STAT:{
      zip_stat_t *st = ZIP_SOURCE_GET_ARGS (zip_stat_t, buf, n, &ms->error);
      if (st == NULL)
        return -1;
      zip_stat_init (st);
      st->size = ms->len;
      st->valid |= ZIP_STAT_SIZE;
      return sizeof (zip_stat_t);
    }
    case ZIP_SOURCE_ERROR:
      return zip_error_to_data (&ms->error, buf, n);
    case ZIP_SOURCE_FREE:
      return 0;
    case ZIP_SOURCE_SEEK:{
      zip_int64_t p = zip_source_seek_compute_offset (ms->pos, ms->len, buf,
          n, &ms->error);
      if (p < 0)
        return -1;
      ms->pos = (guint64) p;
      return 0;
    }
    case ZIP_SOURCE_TELL:
      return (zip_int64_t) ms->pos;
    case ZIP_SOURCE_SUPPORTS:
      return zip_source_make_command_bitmap (ZIP_SOURCE_OPEN, ZIP_SOURCE_READ,
          ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE,
          ZIP_SOURCE_SEEK, ZIP_SOURCE_TELL, ZIP_SOURCE_SUPPORTS, -1);
    default:
      zip_error_set (&ms->error, ZIP_ER_OPNOTSUPP, 0);
      return -1;
  }
}

/* ---- pickle objects ---- */

typedef enum
{
  PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_BYTES, PK_TUPLE, PK_LIST,
  PK_DICT, PK_GLOBAL, PK_STORAGE, PK_TENSOR, PK_OBJECT
} PkType;

typedef struct
{
  PkType type;
  gint64 i;                     /* BOOL, INT; STORAGE: numel */
  double f;
  char *s;                      /* STR, BYTES; GLOBAL: module; STORAGE: key */
  gsize slen;
  char *s2;                     /* GLOBAL: name; STORAGE: type name */
  GPtrArray *items;             /* TUPLE, LIST, DICT keys (borrowed objs) */
  GPtrArray *values;            /* DICT values */
  LbDType dtype;                /* STORAGE */
  gboolean dtype_ok;
  LbTensor *tensor;             /* TENSOR */
} PkObj;

typedef struct
{
  LbStorage *storage;
  gsize offset;
  guint64 nbytes;
  LbDType dtype;                /* the storage's type, the first seen */
} StorageRec;

typedef struct
{
  const char *file;
  const char *pkl_name;
  const guint8 *p;
  gsize len, pos, op_pos;
  GPtrArray *arena;             /* owns every PkObj */
  GPtrArray *stack;
  GArray *marks;
  GHashTable *memo;             /* guint -> PkObj */
  /* archive */
  zip_t *za;
  MapSource *ms;
  char *prefix;
  LbStorage *file_storage;
  GHashTable *storages;         /* key -> StorageRec */
} Vm;

static void
pk_free (gpointer p)
{
  PkObj *o = p;
  g_free (o->s);
  g_free (o->s2);
  if (o->items)
    g_ptr_array_unref (o->items);
  if (o->values)
    g_ptr_array_unref (o->values);
  lb_tensor_free (o->tensor);
  g_free (o);
}

static void
storage_rec_free (gpointer p)
{
  StorageRec *r = p;
  lb_storage_unref (r->storage);
  g_free (r);
}

static PkObj *
pk_new (Vm * vm, PkType type)
{
  PkObj *o = g_new0 (PkObj, 1);
  o->type = type;
  if (type == PK_TUPLE || type == PK_LIST || type == PK_DICT)
    o->items = g_ptr_array_new ();
  if (type == PK_DICT)
    o->values = g_ptr_array_new ();
  g_ptr_array_add (vm->arena, o);
  return o;
}

static gboolean
pk_is_global (const PkObj * o, const char *module, const char *name)
{
  return o && o->type == PK_GLOBAL && strcmp (o->s, module) == 0 &&
      strcmp (o->s2, name) == 0;
}

static gboolean
G_GNUC_PRINTF (3, 4)
vm_fail (Vm * vm, GError ** error, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  char *what = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
      "%s: %s: %s at offset %" G_GSIZE_FORMAT, vm->file, vm->pkl_name, what,
      vm->op_pos);
  g_free (what);
  return FALSE;
}

static gboolean
vm_need (Vm * vm, gsize n, GError ** error)
{
  if (n > vm->len - vm->pos)
    return vm_fail (vm, error, "truncated pickle");
  return TRUE;
}

static guint64
rd_le (const guint8 * p, int n)
{
  guint64 v = 0;
  for (int i = n - 1; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

/* The @w-byte little-endian unsigned argument of the op at vm->pos, into
 * @out; vm->pos moves past it. */
static gboolean
vm_read_le (Vm * vm, int w, guint64 * out, GError ** error)
{
  if (!vm_need (vm, (gsize) w, error))
    return FALSE;
  *out = rd_le (vm->p + vm->pos, w);
  vm->pos += (gsize) w;
  return TRUE;
}

static gboolean
vm_push (Vm * vm, PkObj * o, GError ** error)
{
  if (vm->stack->len >= PK_MAX_STACK)
    return vm_fail (vm, error, "pickle stack too deep");
  g_ptr_array_add (vm->stack, o);
  return TRUE;
}

/* %FALSE (with the error set) when fewer than @n items stand above the
 * last MARK. */
static gboolean
vm_check_depth (Vm * vm, guint n, GError ** error)
{
  guint floor = vm->marks->len ?
      g_array_index (vm->marks, guint, vm->marks->len - 1) : 0;
  if (vm->stack->len < floor + n)
    return vm_fail (vm, error, "pickle stack underflow");
  return TRUE;
}

static PkObj *
vm_pop (Vm * vm, GError ** error)
{
  if (!vm_check_depth (vm, 1, error))
    return NULL;
  return g_ptr_array_steal_index (vm->stack, vm->stack->len - 1);
}

static PkObj *
vm_top (Vm * vm, GError ** error)
{
  if (!vm_check_depth (vm, 1, error))
    return NULL;
  return g_ptr_array_index (vm->stack, vm->stack->len - 1);
}

/* Pops the top two items: @b the top, @a the one below it. */
static gboolean
vm_pop2 (Vm * vm, PkObj ** a, PkObj ** b, GError ** error)
{
  return (*b = vm_pop (vm, error)) != NULL && (*a = vm_pop (vm, error)) != NULL;
}

/* Pops everything above the last MARK (and the mark); returns the first
 * index of the popped run through *start; the items stay in vm->stack
 * beyond its new length until the caller truncates. */
static gboolean
vm_pop_mark (Vm * vm, guint * start, GError ** error)
{
  if (vm->marks->len == 0)
    return vm_fail (vm, error, "pickle MARK missing");
  *start = g_array_index (vm->marks, guint, vm->marks->len - 1);
  g_array_set_size (vm->marks, vm->marks->len - 1);
  return TRUE;
}

static gboolean
vm_memo_put (Vm * vm, guint64 idx, GError ** error)
{
  PkObj *top = vm_top (vm, error);
  if (top == NULL)
    return FALSE;
  if (idx > G_MAXUINT32)
    return vm_fail (vm, error, "pickle memo index too large");
  g_hash_table_insert (vm->memo, GUINT_TO_POINTER ((guint) idx), top);
  return TRUE;
}

static gboolean
vm_memo_get (Vm * vm, guint64 idx, GError ** error)
{
  PkObj *o = idx <= G_MAXUINT32 ?
      g_hash_table_lookup (vm->memo, GUINT_TO_POINTER ((guint) idx)) : NULL;
  if (o == NULL)
    return vm_fail (vm, error, "pickle memo key %" G_GUINT64_FORMAT
        " not found", idx);
  return vm_push (vm, o, error);
}

static gboolean
vm_push_str (Vm * vm, PkType type, gsize n, GError ** error)
{
  if (!vm_need (vm, n, error))
    return FALSE;
  PkObj *o = pk_new (vm, type);
  o->s = g_strndup ((const char *) vm->p + vm->pos, n);
  o->slen = n;
  vm->pos += n;
  return vm_push (vm, o, error);
}

static gboolean
vm_push_int (Vm * vm, gint64 v, GError ** error)
{
  PkObj *o = pk_new (vm, PK_INT);
  o->i = v;
  return vm_push (vm, o, error);
}

/* ---- storages and tensors ---- */

static const struct
{
  const char *name;
  LbDType dtype;
} storage_types[] = {
  {"FloatStorage", LB_DTYPE_F32}, {"DoubleStorage", LB_DTYPE_F64},
  {"HalfStorage", LB_DTYPE_F16}, {"BFloat16Storage", LB_DTYPE_BF16},
  {"LongStorage", LB_DTYPE_I64}, {"IntStorage", LB_DTYPE_I32},
  {"ByteStorage", LB_DTYPE_U8},
};

static gboolean
vm_persistent_load (Vm * vm, PkObj * pid, GError ** error)
{
  /* ('storage', torch.XStorage, key, location, numel) */
  if (pid->type != PK_TUPLE || pid->items->len != 5)
    return vm_fail (vm, error, "unsupported persistent id");
  PkObj *tag = g_ptr_array_index (pid->items, 0);
  PkObj *type = g_ptr_array_index (pid->items, 1);
  PkObj *key = g_ptr_array_index (pid->items, 2);
  PkObj *numel = g_ptr_array_index (pid->items, 4);
  if (tag->type != PK_STR || strcmp (tag->s, "storage") != 0 ||
      type->type != PK_GLOBAL || key->type != PK_STR ||
      numel->type != PK_INT || numel->i < 0)
    return vm_fail (vm, error, "unsupported persistent id");

  PkObj *o = pk_new (vm, PK_STORAGE);
  o->s = g_strdup (key->s);
  o->s2 = g_strdup_printf ("%s.%s", type->s, type->s2);
  o->i = numel->i;
  for (gsize i = 0; i < G_N_ELEMENTS (storage_types); i++) {
    if (strcmp (type->s, "torch") == 0 &&
        strcmp (type->s2, storage_types[i].name) == 0) {
      o->dtype = storage_types[i].dtype;
      o->dtype_ok = TRUE;
    }
  }
  return vm_push (vm, o, error);
}


/* why zip_fread() returned @got of @want bytes: libzip's error, or, when
 * it has none (a short read: the archive's data ends early), the counts
 * (libzip says "No error" then) */
static char *
read_failure (zip_file_t * zf, zip_int64_t got, zip_uint64_t want)
{
  zip_error_t *ze = zip_file_get_error (zf);
  if (got < 0 || (ze && zip_error_code_zip (ze) != ZIP_ER_OK))
    return g_strdup (zip_file_strerror (zf));
  return g_strdup_printf ("the data ends after %" G_GINT64_FORMAT " of %"
      G_GUINT64_FORMAT " bytes", (gint64) got, (guint64) want);
}

/* Opens the record @idx (@name) of the archive, or sets @error. */
static zip_file_t *
open_record (Vm * vm, zip_int64_t idx, const char *name, GError ** error)
{
  zip_file_t *zf = zip_fopen_index (vm->za, (zip_uint64_t) idx, 0);
  if (zf == NULL)
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: cannot open storage record %s: %s", vm->file, name,
        zip_strerror (vm->za));
  return zf;
}

/* Deflate's largest expansion: 1032 output bytes per input byte. */
#define DEFLATE_MAX_RATIO 1032

/* The record data/@key of storage @key as @dtype, of which the pickle uses
 * @need bytes (its numel times the item size): only those are read.  Sizes
 * are checked against the archive before anything is allocated: a record
 * of another size than @need, or a @need more than the record's compressed
 * size (at most the file's) can hold, is an error. */
static StorageRec *
map_storage (Vm * vm, const char *key, LbDType dtype, guint64 need,
    GError ** error)
{
  gsize align = lb_dtype_size (dtype);
  StorageRec *rec = g_hash_table_lookup (vm->storages, key);
  if (rec != NULL) {
    /* the record was mapped (or copied) aligned for its first type only;
     * torch.save refuses views of one storage as two types too */
    if (rec->dtype != dtype) {
      g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
          "%s: storage %s is used as both %s and %s", vm->file, key,
          lb_dtype_name (rec->dtype), lb_dtype_name (dtype));
      return NULL;
    }
    return rec;
  }

  char *name = g_strconcat (vm->prefix, "data/", key, NULL);
  zip_int64_t idx = zip_name_locate (vm->za, name, 0);
  zip_stat_t st;
  zip_file_t *zf = NULL;
  guint8 *buf = NULL;
  if (idx < 0 || zip_stat_index (vm->za, (zip_uint64_t) idx, 0, &st) != 0 ||
      !(st.valid & ZIP_STAT_SIZE)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: storage record %s is missing from the archive", vm->file, name);
    goto fail;
  }
  if (st.size > G_MAXSIZE) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: storage record %s is too large", vm->file, name);
    goto fail;
  }
  /* torch.save writes a record of exactly the storage's bytes; anything
   * else is a lying directory (and its size is not to be allocated) */
  if (need != st.size) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: storage %s declares %" G_GUINT64_FORMAT " elements of %s but "
        "its record has %" G_GUINT64_FORMAT " bytes", vm->file, key,
        need / align, lb_dtype_name (dtype), (guint64) st.size);
    goto fail;
  }
  gboolean stored = (st.valid & ZIP_STAT_COMP_METHOD) &&
      st.comp_method == ZIP_CM_STORE &&
      (!(st.valid & ZIP_STAT_ENCRYPTION_METHOD) ||
      st.encryption_method == ZIP_EM_NONE);
  /* a central directory and a pickle may claim any size: bound it by the
   * compressed bytes, themselves at most the file, before allocating (a
   * 3 KB file declaring a 3 GiB record of a 3 GiB storage) */
  guint64 comp = (st.valid & ZIP_STAT_COMP_SIZE) ? st.comp_size : G_MAXUINT64;
  guint64 bound = MIN (comp, (guint64) vm->ms->len);
  if (!stored)
    bound = bound > G_MAXUINT64 / DEFLATE_MAX_RATIO ? G_MAXUINT64 :
        bound * DEFLATE_MAX_RATIO;
  if (need > bound) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: storage %s needs %" G_GUINT64_FORMAT " bytes, more than its "
        "record %s can hold (%" G_GUINT64_FORMAT " compressed bytes in a "
        "file of %" G_GUINT64_FORMAT ")", vm->file, key, need, name,
        comp, (guint64) vm->ms->len);
    goto fail;
  }

  rec = g_new0 (StorageRec, 1);
  rec->nbytes = need;
  rec->dtype = dtype;

  if (need == 0) {
    rec->storage = lb_storage_ref (vm->file_storage);
    goto keep;
  }

  zf = open_record (vm, idx, name, error);
  if (zf == NULL)
    goto fail;
  if (stored) {
    /* libzip has parsed the local header (zip64 included) and seeks to the
     * record's first byte on the first read: take that position, then
     * check the bytes libzip returns against the mapping there. */
    guint8 probe[4096];
    zip_int64_t k = (zip_int64_t) MIN (need, sizeof probe);
    vm->ms->first_read = -1;
    zip_int64_t got = zip_fread (zf, probe, (zip_uint64_t) k);
    gint64 at = vm->ms->first_read;
    if (got == k && at >= 0 && (guint64) at <= vm->ms->len &&
        need <= vm->ms->len - (guint64) at &&
        memcmp (vm->ms->data + at, probe, (gsize) k) == 0 &&
        (guintptr) (vm->ms->data + at) % align == 0) {
      rec->storage = lb_storage_ref (vm->file_storage);
      rec->offset = (gsize) at;
      zip_fclose (zf);
      goto keep;
    }
    /* fall back to a copy (also when misaligned for the dtype: torch
     * aligns records to 64 bytes, other zip writers may not) */
    zip_fclose (zf);
    zf = open_record (vm, idx, name, error);
    if (zf == NULL)
      goto fail;
  }
  buf = g_try_malloc ((gsize) need);
  if (buf == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO,
        "%s: out of memory inflating storage record %s", vm->file, name);
    goto fail;
  }
  zip_int64_t got = zip_fread (zf, buf, need);
  if (got != (zip_int64_t) need) {
    g_autofree char *why = read_failure (zf, got, need);
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: cannot read storage record %s: %s", vm->file, name, why);
    goto fail;
  }
  zip_fclose (zf);
  rec->storage = lb_storage_new (buf, (gsize) need, LB_DEVICE_HOST,
      g_free, buf);

keep:
  g_hash_table_insert (vm->storages, g_strdup (key), rec);
  g_free (name);
  return rec;

fail:
  if (zf)
    zip_fclose (zf);
  g_free (buf);
  g_free (rec);
  g_free (name);
  return NULL;
}

static gboolean
int_tuple (const PkObj * o, int *n, int64_t * out)
{
  if (o->type != PK_TUPLE && o->type != PK_LIST)
    return FALSE;
  if (o->items->len > LB_MAX_DIMS)
    return FALSE;
  for (guint i = 0; i < o->items->len; i++) {
    const PkObj *v = g_ptr_array_index (o->items, i);
    if (v->type != PK_INT || v->i < 0)
      return FALSE;
    out[i] = v->i;
  }
  *n = (int) o->items->len;
  return TRUE;
}

static PkObj *
rebuild_tensor (Vm * vm, PkObj * args, GError ** error)
{
  if (args->type != PK_TUPLE || args->items->len < 4) {
    vm_fail (vm, error, "_rebuild_tensor_v2 needs (storage, offset, size, "
        "stride, ...)");
    return NULL;
  }
  PkObj *so = g_ptr_array_index (args->items, 0);
  PkObj *off = g_ptr_array_index (args->items, 1);
  PkObj *size = g_ptr_array_index (args->items, 2);
  PkObj *stride = g_ptr_array_index (args->items, 3);
  int ndim, nstride;
  int64_t shape[LB_MAX_DIMS], strides[LB_MAX_DIMS];
  if (so->type != PK_STORAGE || off->type != PK_INT || off->i < 0 ||
      !int_tuple (size, &ndim, shape) || !int_tuple (stride, &nstride,
          strides) || nstride != ndim) {
    vm_fail (vm, error, "bad _rebuild_tensor_v2 arguments (storage, offset, "
        "size, stride must be a storage, an int and two int tuples of at "
        "most %d entries)", LB_MAX_DIMS);
    return NULL;
  }
  if (!so->dtype_ok) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "%s: storage %s has unsupported type %s", vm->file, so->s, so->s2);
    return NULL;
  }
  guint64 nbytes;
  if (!lingbot_ckpt_nbytes (so->dtype, ndim, shape, &nbytes)) {
    g_autofree char *s = lb_shape_string (ndim, shape);
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: a tensor of storage %s has shape %s, too large", vm->file,
        so->s, s);
    return NULL;
  }
  guint64 es = lb_dtype_size (so->dtype), st_bytes;
  if (!g_uint64_checked_mul (&st_bytes, (guint64) so->i, es)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: storage %s declares %" G_GINT64_FORMAT " elements of %s, too "
        "many", vm->file, so->s, so->i, lb_dtype_name (so->dtype));
    return NULL;
  }
  StorageRec *rec = map_storage (vm, so->s, so->dtype, st_bytes, error);
  if (rec == NULL)
    return NULL;
  if (st_bytes > rec->nbytes) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: storage %s declares %" G_GINT64_FORMAT " elements of %s but its "
        "record has %" G_GUINT64_FORMAT " bytes", vm->file, so->s, so->i,
        lb_dtype_name (so->dtype), rec->nbytes);
    return NULL;
  }
  /* the last element addressed must lie inside the storage */
  gboolean empty = FALSE;
  guint64 last = (guint64) off->i, t;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 0)
      empty = TRUE;
    else if (!g_uint64_checked_mul (&t, (guint64) (shape[i] - 1),
            (guint64) strides[i]) || !g_uint64_checked_add (&last, last, t))
      goto out_of_range;
  }
  if (!empty && last >= (guint64) so->i)
    goto out_of_range;
  if ((guint64) off->i > (guint64) so->i)
    goto out_of_range;

  PkObj *o = pk_new (vm, PK_TENSOR);
  o->tensor = lb_tensor_new_from_storage (rec->storage,
      rec->offset + (gsize) off->i * es, so->dtype, ndim, shape, strides);
  return o;

out_of_range:
  g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
      "%s: a tensor reaches beyond its storage %s (%" G_GINT64_FORMAT
      " elements)", vm->file, so->s, so->i);
  return NULL;
}

/* Applies a callable without running anything: the few torch rebuild
 * functions become tensors, containers become containers, anything else an
 * opaque object. */
static PkObj *
vm_call (Vm * vm, PkObj * fn, PkObj * args, int depth, GError ** error)
{
  if (depth > 4) {
    vm_fail (vm, error, "nested rebuild calls");
    return NULL;
  }
  if (pk_is_global (fn, "torch._utils", "_rebuild_tensor_v2"))
    return rebuild_tensor (vm, args, error);
  if (pk_is_global (fn, "collections", "OrderedDict") ||
      pk_is_global (fn, "builtins", "dict"))
    return pk_new (vm, PK_DICT);
  if ((pk_is_global (fn, "torch._utils", "_rebuild_parameter") ||
          pk_is_global (fn, "torch._utils", "_rebuild_parameter_with_state"))
      && args->type == PK_TUPLE && args->items->len >= 1)
    return g_ptr_array_index (args->items, 0);
  if (pk_is_global (fn, "torch._tensor", "_rebuild_from_type_v2") &&
      args->type == PK_TUPLE && args->items->len >= 3)
    return vm_call (vm, g_ptr_array_index (args->items, 0),
        g_ptr_array_index (args->items, 2), depth + 1, error);
  return pk_new (vm, PK_OBJECT);
}

/* ---- the interpreter ---- */

/* The bytes of @op's little-endian integer operand (a value, a memo index
 * or the length of the string that follows), 0 for the other opcodes. */
static int
operand_width (guint8 op)
{
  switch (op) {
    case 'K':                  /* BININT1 */
    case 'U':                  /* SHORT_BINSTRING */
    case 'C':                  /* SHORT_BINBYTES */
    case 0x8c:                 /* SHORT_BINUNICODE */
    case 0x8a:                 /* LONG1 */
    case 'q':                  /* BINPUT */
    case 'h':                  /* BINGET */
      return 1;
    case 'M':                  /* BININT2 */
      return 2;
    case 'J':                  /* BININT */
    case 'X':                  /* BINUNICODE */
    case 'T':                  /* BINSTRING */
    case 'B':                  /* BINBYTES */
    case 0x8b:                 /* LONG4 */
    case 'r':                  /* LONG_BINPUT */
    case 'j':                  /* LONG_BINGET */
      return 4;
    case 0x8d:                 /* BINUNICODE8 */
      return 8;
    default:
      return 0;
  }
}

/* The container that SETITEM, SETITEMS, APPEND or APPENDS (@op) fills, on
 * the stack below the items it adds: a dict (SETITEM(S), key value pairs)
 * or a list (APPEND(S)), or an object whose state is not kept.  *start:
 * the first item (SETITEM's two, APPEND's one, or all the items above the
 * last MARK for the plural ops, the mark popped). */
static PkObj *
vm_fill_target (Vm * vm, guint8 op, guint * start, GError ** error)
{
  const PkType type = op == 's' || op == 'u' ? PK_DICT : PK_LIST;
  const char *what = op == 's' ? "SETITEM" : op == 'u' ? "SETITEMS" :
      op == 'a' ? "APPEND" : "APPENDS";
  guint per = type == PK_DICT ? 2 : 1;
  if (op == 's' || op == 'a') {
    if (!vm_check_depth (vm, per + 1, error))
      return NULL;
    *start = vm->stack->len - per;
  } else {
    if (!vm_pop_mark (vm, start, error))
      return NULL;
    if ((vm->stack->len - *start) % per != 0 || *start == 0) {
      vm_fail (vm, error, "bad %s", what);
      return NULL;
    }
  }
  PkObj *c = g_ptr_array_index (vm->stack, *start - 1);
  if (c->type != type && c->type != PK_OBJECT) {
    vm_fail (vm, error, "%s on a non-%s", what,
        type == PK_DICT ? "dict" : "list");
    return NULL;
  }
  return c;
}

/* SETITEM(S), APPEND(S): the stack's items from @start on go into @c
 * (vm_fill_target()), which keeps nothing when it is an object; the stack
 * is then cut back to @start. */
static void
vm_fill (Vm * vm, PkObj * c, guint start)
{
  for (guint i = start; c->type == PK_DICT && i < vm->stack->len; i += 2) {
    g_ptr_array_add (c->items, g_ptr_array_index (vm->stack, i));
    g_ptr_array_add (c->values, g_ptr_array_index (vm->stack, i + 1));
  }
  for (guint i = start; c->type == PK_LIST && i < vm->stack->len; i++)
    g_ptr_array_add (c->items, g_ptr_array_index (vm->stack, i));
  g_ptr_array_set_size (vm->stack, start);
}

static PkObj *
vm_run (Vm * vm, GError ** error)
{
  while (vm->pos < vm->len) {
    vm->op_pos = vm->pos;
    guint8 op = vm->p[vm->pos++];
    PkObj *a, *b, *c, *o;
    guint start;
    guint64 n = 0;
    int w = operand_width (op);

    if (w > 0 && !vm_read_le (vm, w, &n, error))
      return NULL;
    switch (op) {
      case 0x80:               /* PROTO */
        if (!vm_need (vm, 1, error))
          return NULL;
        if (vm->p[vm->pos] > 5) {
          vm_fail (vm, error, "unsupported pickle protocol %u", vm->p[vm->pos]);
          return NULL;
        }
        vm->pos++;
        break;
      case 0x95:               /* FRAME */
        if (!vm_need (vm, 8, error))
          return NULL;
        vm->pos += 8;
        break;
      case '}':                /* EMPTY_DICT */
      case ']':                /* EMPTY_LIST */
      case ')':                /* EMPTY_TUPLE */
      case 'N':                /* NONE */
        if (!vm_push (vm, pk_new (vm, op == '}' ? PK_DICT : op == ']' ?
                    PK_LIST : op == ')' ? PK_TUPLE : PK_NONE), error))
          return NULL;
        break;
      case '(':                /* MARK */
        if (vm->marks->len >= PK_MAX_MARKS) {
          vm_fail (vm, error, "too many nested pickle MARKs");
          return NULL;
        }
        g_array_append_val (vm->marks, vm->stack->len);
        break;
      case 't':                /* TUPLE */
        if (!vm_pop_mark (vm, &start, error))
          return NULL;
        o = pk_new (vm, PK_TUPLE);
        for (guint i = start; i < vm->stack->len; i++)
          g_ptr_array_add (o->items, g_ptr_array_index (vm->stack, i));
        g_ptr_array_set_size (vm->stack, start);
        if (!vm_push (vm, o, error))
          return NULL;
        break;
      case 0x85:               /* TUPLE1 */
      case 0x86:               /* TUPLE2 */
      case 0x87:{              /* TUPLE3 */
        guint k = op - 0x84;
        PkObj *items[3];
        for (guint i = 0; i < k; i++) {
          if ((items[k - 1 - i] = vm_pop (vm, error)) == NULL)
            return NULL;
        }
        o = pk_new (vm, PK_TUPLE);
        for (guint i = 0; i < k; i++)
          g_ptr_array_add (o->items, items[i]);
        if (!vm_push (vm, o, error))
          return NULL;
        break;
      }
      case 'X':                /* BINUNICODE */
      case 0x8c:               /* SHORT_BINUNICODE */
      case 0x8d:               /* BINUNICODE8 */
      case 'T':                /* BINSTRING */
      case 'U':                /* SHORT_BINSTRING */
      case 'B':                /* BINBYTES */
      case 'C':                /* SHORT_BINBYTES */
        if (n > vm->len) {
          vm_fail (vm, error, "truncated pickle");
          return NULL;
        }
        if (!vm_push_str (vm, (op == 'B' || op == 'C') ? PK_BYTES : PK_STR,
                (gsize) n, error))
          return NULL;
        break;
      case 'J':                /* BININT */
        if (!vm_push_int (vm, (gint32) (guint32) n, error))
          return NULL;
        break;
      case 'K':                /* BININT1 */
      case 'M':                /* BININT2 */
        if (!vm_push_int (vm, (gint64) n, error))
          return NULL;
        break;
      case 0x8a:               /* LONG1 */
      case 0x8b:{              /* LONG4 */
        if (n > 8) {
          vm_fail (vm, error, "pickle integer wider than 64 bits");
          return NULL;
        }
        if (!vm_need (vm, (gsize) n, error))
          return NULL;
        guint64 v = rd_le (vm->p + vm->pos, (int) n);
        if (n > 0 && n < 8 && (vm->p[vm->pos + n - 1] & 0x80))
          v |= ~(guint64) 0 << (8 * n); /* sign-extend */
        vm->pos += (gsize) n;
        if (!vm_push_int (vm, (gint64) v, error))
          return NULL;
        break;
      }
      case 'G':{               /* BINFLOAT: big-endian double */
        if (!vm_need (vm, 8, error))
          return NULL;
        guint64 bits = 0;
        for (int i = 0; i < 8; i++)
          bits = (bits << 8) | vm->p[vm->pos + i];
        vm->pos += 8;
        o = pk_new (vm, PK_FLOAT);
        memcpy (&o->f, &bits, 8);
        if (!vm_push (vm, o, error))
          return NULL;
        break;
      }
      case 0x88:               /* NEWTRUE */
      case 0x89:               /* NEWFALSE */
        o = pk_new (vm, PK_BOOL);
        o->i = op == 0x88;
        if (!vm_push (vm, o, error))
          return NULL;
        break;
      case 'c':{               /* GLOBAL: "module\nname\n" */
        const char *s = (const char *) vm->p + vm->pos;
        gsize avail = vm->len - vm->pos;
        const char *nl1 = memchr (s, '\n', avail);
        const char *nl2 = nl1 ? memchr (nl1 + 1, '\n',
            avail - (gsize) (nl1 + 1 - s)) : NULL;
        if (nl2 == NULL) {
          vm_fail (vm, error, "truncated pickle");
          return NULL;
        }
        o = pk_new (vm, PK_GLOBAL);
        o->s = g_strndup (s, (gsize) (nl1 - s));
        o->s2 = g_strndup (nl1 + 1, (gsize) (nl2 - nl1 - 1));
        vm->pos += (gsize) (nl2 + 1 - s);
        if (!vm_push (vm, o, error))
          return NULL;
        break;
      }
      case 0x93:               /* STACK_GLOBAL */
        if (!vm_pop2 (vm, &a, &b, error))
          return NULL;
        if (a->type != PK_STR || b->type != PK_STR) {
          vm_fail (vm, error, "STACK_GLOBAL needs two strings");
          return NULL;
        }
        o = pk_new (vm, PK_GLOBAL);
        o->s = g_strdup (a->s);
        o->s2 = g_strdup (b->s);
        if (!vm_push (vm, o, error))
          return NULL;
        break;
      case 'R':                /* REDUCE */
        if (!vm_pop2 (vm, &a, &b, error))
          return NULL;
        if ((o = vm_call (vm, a, b, 0, error)) == NULL ||
            !vm_push (vm, o, error))
          return NULL;
        break;
      case 0x81:               /* NEWOBJ: cls args */
        if (!vm_pop2 (vm, &a, &b, error))
          return NULL;
        o = pk_new (vm, a->type == PK_GLOBAL &&
            pk_is_global (a, "collections", "OrderedDict") ? PK_DICT :
            PK_OBJECT);
        if (!vm_push (vm, o, error))
          return NULL;
        break;
      case 0x92:               /* NEWOBJ_EX: cls args kwargs */
        if (vm_pop (vm, error) == NULL || vm_pop (vm, error) == NULL ||
            vm_pop (vm, error) == NULL ||
            !vm_push (vm, pk_new (vm, PK_OBJECT), error))
          return NULL;
        break;
      case 'b':                /* BUILD: object state is not needed */
        if (vm_pop (vm, error) == NULL || vm_top (vm, error) == NULL)
          return NULL;
        break;
      case 's':                /* SETITEM */
      case 'u':                /* SETITEMS */
      case 'a':                /* APPEND */
      case 'e':                /* APPENDS */
        if ((c = vm_fill_target (vm, op, &start, error)) == NULL)
          return NULL;
        vm_fill (vm, c, start);
        break;
      case 'q':                /* BINPUT */
      case 'r':                /* LONG_BINPUT */
      case 0x94:               /* MEMOIZE: at the next free index */
        if (!vm_memo_put (vm, op == 0x94 ? g_hash_table_size (vm->memo) : n,
                error))
          return NULL;
        break;
      case 'h':                /* BINGET */
      case 'j':                /* LONG_BINGET */
        if (!vm_memo_get (vm, n, error))
          return NULL;
        break;
      case 'Q':                /* BINPERSID */
        if ((a = vm_pop (vm, error)) == NULL ||
            !vm_persistent_load (vm, a, error))
          return NULL;
        break;
      case '0':                /* POP */
        if (vm->marks->len > 0 && g_array_index (vm->marks, guint,
                vm->marks->len - 1) == vm->stack->len) {
          g_array_set_size (vm->marks, vm->marks->len - 1);
        } else if (vm_pop (vm, error) == NULL) {
          return NULL;
        }
        break;
      case '1':                /* POP_MARK */
        if (!vm_pop_mark (vm, &start, error))
          return NULL;
        g_ptr_array_set_size (vm->stack, start);
        break;
      case '2':                /* DUP */
        if ((a = vm_top (vm, error)) == NULL || !vm_push (vm, a, error))
          return NULL;
        break;
      case '.':                /* STOP */
        if ((o = vm_pop (vm, error)) == NULL)
          return NULL;
        return o;
      default:
        g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
            "%s: %s: unsupported pickle opcode 0x%02x at offset %"
            G_GSIZE_FORMAT, vm->file, vm->pkl_name, op, vm->op_pos);
        return NULL;
    }
  }
  vm->op_pos = vm->pos;
  vm_fail (vm, error, "pickle ends without STOP");
  return NULL;
}

/* ---- turning the unpickled object into named tensors ---- */

static gboolean
flatten (Vm * vm, LingbotCheckpoint * ckpt, const char *prefix, PkObj * o,
    int depth, GError ** error)
{
  if (depth > PK_MAX_NESTING) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: %s: containers nested too deeply", vm->file, vm->pkl_name);
    return FALSE;
  }
  if (o->type == PK_TENSOR) {
    LbTensor *t = g_new (LbTensor, 1);
    *t = *o->tensor;
    lb_storage_ref (t->storage);
    return lingbot_ckpt_add_tensor (ckpt, prefix, t, vm->file, error);
  }
  if (o->type != PK_DICT && o->type != PK_LIST && o->type != PK_TUPLE)
    return TRUE;

  for (guint i = 0; i < o->items->len; i++) {
    PkObj *v;
    char *key;
    if (o->type == PK_DICT) {
      PkObj *k = g_ptr_array_index (o->items, i);
      v = g_ptr_array_index (o->values, i);
      if (k->type == PK_STR)
        key = g_strdup (k->s);
      else if (k->type == PK_INT)
        key = g_strdup_printf ("%" G_GINT64_FORMAT, k->i);
      else
        continue;
    } else {
      v = g_ptr_array_index (o->items, i);
      key = g_strdup_printf ("%u", i);
    }
    char *name = prefix[0] ? g_strconcat (prefix, ".", key, NULL) :
        g_strdup (key);
    gboolean ok = flatten (vm, ckpt, name, v, depth + 1, error);
    g_free (name);
    g_free (key);
    if (!ok)
      return FALSE;
  }
  return TRUE;
}

static PkObj *
unwrap (LingbotCheckpoint * ckpt, PkObj * root)
{
  if (root->type != PK_DICT)
    return root;
  for (guint i = 0; i < root->values->len; i++) {
    if (((PkObj *) g_ptr_array_index (root->values, i))->type == PK_TENSOR)
      return root;
  }
  for (int w = 0; wrapper_keys[w]; w++) {
    for (guint i = 0; i < root->items->len; i++) {
      PkObj *k = g_ptr_array_index (root->items, i);
      PkObj *v = g_ptr_array_index (root->values, i);
      if (k->type == PK_STR && strcmp (k->s, wrapper_keys[w]) == 0 &&
          v->type == PK_DICT) {
        lingbot_ckpt_add_metadata (ckpt, "pth_wrapper", wrapper_keys[w]);
        return v;
      }
    }
  }
  return root;
}

static gboolean
find_pickle (Vm * vm, zip_int64_t * index, GError ** error)
{
  zip_int64_t n = zip_get_num_entries (vm->za, 0);
  for (zip_int64_t i = 0; i < n; i++) {
    const char *name = zip_get_name (vm->za, (zip_uint64_t) i, 0);
    if (name == NULL)
      continue;
    const char *slash = strchr (name, '/');
    if (strcmp (name, "data.pkl") == 0 ||
        (slash != NULL && strcmp (slash + 1, "data.pkl") == 0)) {
      vm->prefix = g_strndup (name, slash ? (gsize) (slash + 1 - name) : 0);
      *index = i;
      return TRUE;
    }
  }
  g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
      "%s: zip archive has no data.pkl: not a torch.save file", vm->file);
  return FALSE;
}

static guint8 *
read_entry (Vm * vm, zip_int64_t index, gsize * len, GError ** error)
{
  zip_stat_t st;
  const char *name = zip_get_name (vm->za, (zip_uint64_t) index, 0);
  if (zip_stat_index (vm->za, (zip_uint64_t) index, 0, &st) != 0 ||
      !(st.valid & ZIP_STAT_SIZE) || st.size > LINGBOT_CKPT_MAX_HEADER) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: %s: missing or too large", vm->file, name);
    return NULL;
  }
  zip_file_t *zf = zip_fopen_index (vm->za, (zip_uint64_t) index, 0);
  if (zf == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT, "%s: %s: %s", vm->file,
        name, zip_strerror (vm->za));
    return NULL;
  }
  guint8 *buf = st.size < G_MAXSIZE ? g_try_malloc ((gsize) st.size + 1) : NULL;
  if (buf == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO,
        "%s: %s: out of memory for %" G_GUINT64_FORMAT " bytes", vm->file,
        name, (guint64) st.size);
    zip_fclose (zf);
    return NULL;
  }
  zip_int64_t got = zip_fread (zf, buf, st.size);
  if (got != (zip_int64_t) st.size) {
    g_autofree char *why = read_failure (zf, got, st.size);
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT, "%s: %s: cannot read: %s",
        vm->file, name, why);
    zip_fclose (zf);
    g_free (buf);
    return NULL;
  }
  zip_fclose (zf);
  *len = (gsize) st.size;
  return buf;
}

/* Whether @data (@len bytes), which libzip found no archive in, starts as
 * a zip archive (a local file header) but has no end of central directory
 * record (signature PK\5\6, 22 bytes and a comment of at most 65535) where
 * one must be: a file cut short, such as an interrupted download. */
static gboolean
zip_cut_short (const guint8 * data, gsize len)
{
  gsize from = len > 22 + 65535 ? len - 22 - 65535 : 0;

  if (len < 4 || memcmp (data, "PK\3\4", 4) != 0)
    return FALSE;
  for (gsize i = from; i + 22 <= len; i++)
    if (memcmp (data + i, "PK\5\6", 4) == 0)
      return FALSE;
  return TRUE;
}

static gboolean
parse_pth (LingbotCheckpoint * ckpt, const char *file, LbStorage * storage,
    const guint8 * data, gsize len, GError ** error)
{
  gboolean ok = FALSE;
  guint8 *pkl = NULL;
  MapSource ms = { data, len, 0, -1, {0}
  };
  zip_error_init (&ms.error);
  Vm vm = { 0 };
  vm.file = file;
  vm.ms = &ms;
  vm.file_storage = storage;
  vm.arena = g_ptr_array_new_with_free_func (pk_free);
  vm.stack = g_ptr_array_new ();
  vm.marks = g_array_new (FALSE, FALSE, sizeof (guint));
  vm.memo = g_hash_table_new (g_direct_hash, g_direct_equal);
  vm.storages = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
      storage_rec_free);

  if (len >= 2 && data[0] == 0x80 && data[1] <= 5) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "%s: legacy (pre-zip, torch < 1.6) torch.save format is not "
        "supported; re-save it with a current torch", file);
    goto out;
  }

  zip_error_t zerr;
  zip_error_init (&zerr);
  zip_source_t *src = zip_source_function_create (map_source_cb, &ms, &zerr);
  if (src != NULL) {
    vm.za = zip_open_from_source (src, ZIP_RDONLY, &zerr);
    if (vm.za == NULL)
      zip_source_free (src);
  }
  if (vm.za == NULL && zip_error_code_zip (&zerr) == ZIP_ER_NOZIP
      && zip_cut_short (data, len)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: truncated: %" G_GSIZE_FORMAT " bytes, not a complete .pth (zip) "
        "file: it has no end of central directory record", file, len);
    zip_error_fini (&zerr);
    goto out;
  }
  if (vm.za == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: not a valid zip archive (libzip: %s)", file,
        zip_error_strerror (&zerr));
    zip_error_fini (&zerr);
    goto out;
  }
  zip_error_fini (&zerr);

  zip_int64_t pkl_index;
  gsize pkl_len;
  if (!find_pickle (&vm, &pkl_index, error))
    goto out;
  vm.pkl_name = zip_get_name (vm.za, (zip_uint64_t) pkl_index, 0);
  pkl = read_entry (&vm, pkl_index, &pkl_len, error);
  if (pkl == NULL)
    goto out;
  vm.p = pkl;
  vm.len = pkl_len;

  PkObj *root = vm_run (&vm, error);
  if (root == NULL)
    goto out;
  root = unwrap (ckpt, root);
  if (root->type == PK_TENSOR) {
    char *name = lingbot_ckpt_basename_noext (file);
    ok = flatten (&vm, ckpt, name, root, 0, error);
    g_free (name);
  } else if (root->type == PK_DICT || root->type == PK_LIST ||
      root->type == PK_TUPLE) {
    ok = flatten (&vm, ckpt, "", root, 0, error);
  } else {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: %s holds neither a tensor nor a dict of tensors", file,
        vm.pkl_name);
  }

out:
  g_free (pkl);
  if (vm.za)
    zip_discard (vm.za);
  g_hash_table_unref (vm.storages);
  g_hash_table_unref (vm.memo);
  g_array_unref (vm.marks);
  g_ptr_array_unref (vm.stack);
  g_ptr_array_unref (vm.arena);
  g_free (vm.prefix);
  zip_error_fini (&ms.error);
  return ok;
}

gboolean
lingbot_ckpt_load_pth (LingbotCheckpoint * ckpt, const char *file,
    GError ** error)
{
  return lingbot_ckpt_load_mapped (ckpt, file, parse_pth, error);
}

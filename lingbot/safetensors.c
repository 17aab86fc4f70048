/* lingbot-gst: safetensors reader and writer, sharded sets
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Format (https://github.com/huggingface/safetensors): 8-byte little-endian
 * u64 header length N, N bytes of JSON header
 *   {"__metadata__": {str: str}, NAME: {"dtype": "F32", "shape": [..],
 *    "data_offsets": [begin, end]}, ...}
 * then the data block; offsets are relative to its start (8 + N).
 */
#include "lingbot/checkpoint-private.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

/* safetensors dtypes that exist but have no LbDType */
static const char *const known_unsupported[] = {
  "BOOL", "I8", "I16", "U16", "U32", "U64", "F8_E4M3", "F8_E5M2", NULL
};

typedef struct
{
  const char *name;
  guint64 begin, end;
} Range;

static int
compare_ranges (const void *a, const void *b)
{
  const Range *x = a, *y = b;
  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : (x->end > y->end);
}

static gboolean
json_get_u64 (JsonNode * node, guint64 * out)
{
  if (node == NULL || !JSON_NODE_HOLDS_VALUE (node) ||
      json_node_get_value_type (node) != G_TYPE_INT64)
    return FALSE;
  gint64 v = json_node_get_int (node);
  if (v < 0)
    return FALSE;
  *out = (guint64) v;
  return TRUE;
}

static gboolean
parse_entry (const char *file, const char *name, JsonNode * node,
    guint64 data_len, LbDType * dtype, int *ndim, int64_t * shape,
    Range * range, GError ** error)
{
  if (!JSON_NODE_HOLDS_OBJECT (node)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: header entry for tensor %s is not an object", file, name);
    return FALSE;
  }
  JsonObject *obj = json_node_get_object (node);
  JsonNode *dn = json_object_get_member (obj, "dtype");
  JsonNode *sn = json_object_get_member (obj, "shape");
  JsonNode *on = json_object_get_member (obj, "data_offsets");
  if (dn == NULL || sn == NULL || on == NULL ||
      json_node_get_value_type (dn) != G_TYPE_STRING ||
      !JSON_NODE_HOLDS_ARRAY (sn) || !JSON_NODE_HOLDS_ARRAY (on)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: tensor %s: header entry needs string \"dtype\", array \"shape\" "
        "and array \"data_offsets\"", file, name);
    return FALSE;
  }

  const char *dname = json_node_get_string (dn);
  if (!lb_dtype_from_safetensors (dname, dtype)) {
    gboolean known = g_strv_contains (known_unsupported, dname);
    g_set_error (error, LB_ERROR, known ? LB_ERROR_UNSUPPORTED :
        LB_ERROR_FORMAT, "%s: tensor %s: %s dtype '%s'", file, name,
        known ? "unsupported" : "unknown", dname);
    return FALSE;
  }

  JsonArray *sa = json_node_get_array (sn);
  guint nd = json_array_get_length (sa);
  if (nd > LB_MAX_DIMS) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "%s: tensor %s has %u dimensions, at most %d are supported", file,
        name, nd, LB_MAX_DIMS);
    return FALSE;
  }
  for (guint i = 0; i < nd; i++) {
    guint64 v;
    if (!json_get_u64 (json_array_get_element (sa, i), &v) ||
        v > (guint64) G_MAXINT64) {
      g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
          "%s: tensor %s: shape entry %u is not a non-negative integer", file,
          name, i);
      return FALSE;
    }
    shape[i] = (int64_t) v;
  }
  *ndim = (int) nd;

  JsonArray *oa = json_node_get_array (on);
  if (json_array_get_length (oa) != 2 ||
      !json_get_u64 (json_array_get_element (oa, 0), &range->begin) ||
      !json_get_u64 (json_array_get_element (oa, 1), &range->end) ||
      range->end < range->begin) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: tensor %s: data_offsets must be [begin, end] with 0 <= begin "
        "<= end", file, name);
    return FALSE;
  }
  if (range->end > data_len) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: tensor %s: data offsets [%" G_GUINT64_FORMAT ", %"
        G_GUINT64_FORMAT "] out of range (data block is %" G_GUINT64_FORMAT
        " bytes)", file, name, range->begin, range->end, data_len);
    return FALSE;
  }
  guint64 nbytes;
  if (!lingbot_ckpt_nbytes (*dtype, *ndim, shape, &nbytes) ||
      nbytes != range->end - range->begin) {
    char *s = lb_shape_string (*ndim, shape);
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: tensor %s: data offsets [%" G_GUINT64_FORMAT ", %"
        G_GUINT64_FORMAT "] inconsistent with dtype %s and shape %s", file,
        name, range->begin, range->end, dname, s);
    g_free (s);
    return FALSE;
  }
  range->name = name;
  return TRUE;
}

static gboolean
add_metadata (LingbotCheckpoint * ckpt, const char *file, JsonNode * node,
    GError ** error)
{
  if (!JSON_NODE_HOLDS_OBJECT (node)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: __metadata__ is not an object", file);
    return FALSE;
  }
  JsonObject *obj = json_node_get_object (node);
  GList *members = json_object_get_members (obj);
  for (GList * l = members; l; l = l->next) {
    JsonNode *v = json_object_get_member (obj, l->data);
    if (json_node_get_value_type (v) == G_TYPE_STRING) {
      lingbot_ckpt_add_metadata (ckpt, l->data, json_node_get_string (v));
    } else {
      /* not allowed by the format, but keep it readable */
      char *text = json_to_string (v, FALSE);
      lingbot_ckpt_add_metadata (ckpt, l->data, text);
      g_free (text);
    }
  }
  g_list_free (members);
  return TRUE;
}

static gboolean
parse_safetensors (LingbotCheckpoint * ckpt, const char *file,
    LbStorage * storage, const guint8 * data, gsize len, GError ** error)
{
  gboolean ok = FALSE;
  JsonParser *parser = NULL;
  GArray *ranges = g_array_new (FALSE, FALSE, sizeof (Range));
  GPtrArray *tensors = g_ptr_array_new_with_free_func ((GDestroyNotify)
      lb_tensor_free);
  GPtrArray *names = g_ptr_array_new ();

  if (len < 8) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: truncated safetensors header (file is %" G_GSIZE_FORMAT
        " bytes, the header length alone needs 8)", file, len);
    goto out;
  }
  guint64 hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = (hlen << 8) | data[i];
  if (hlen > len - 8) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: safetensors header length %" G_GUINT64_FORMAT
        " goes beyond the end of the file (%" G_GSIZE_FORMAT " bytes)", file,
        hlen, (gsize) len);
    goto out;
  }
  if (hlen > LINGBOT_CKPT_MAX_HEADER) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: safetensors header length %" G_GUINT64_FORMAT " is too large",
        file, hlen);
    goto out;
  }
  if (hlen < 2 || data[8] != '{') {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: safetensors header is not valid JSON (does not start with '{')",
        file);
    goto out;
  }

  GError *jerr = NULL;
  parser = json_parser_new_immutable ();
  if (!json_parser_load_from_data (parser, (const char *) data + 8,
          (gssize) hlen, &jerr)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: safetensors header is not valid JSON: %s", file, jerr->message);
    g_error_free (jerr);
    goto out;
  }
  JsonNode *root = json_parser_get_root (parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: safetensors header is not a JSON object", file);
    goto out;
  }

  guint64 data_start = 8 + hlen;
  guint64 data_len = len - data_start;
  JsonObject *obj = json_node_get_object (root);
  GList *members = json_object_get_members (obj);
  for (GList * l = members; l; l = l->next) {
    const char *name = l->data;
    JsonNode *node = json_object_get_member (obj, name);
    if (strcmp (name, "__metadata__") == 0) {
      if (!add_metadata (ckpt, file, node, error)) {
        g_list_free (members);
        goto out;
      }
      continue;
    }
    LbDType dtype;
    int ndim;
    int64_t shape[LB_MAX_DIMS];
    Range r;
    if (!parse_entry (file, name, node, data_len, &dtype, &ndim, shape, &r,
            error)) {
      g_list_free (members);
      goto out;
    }
    g_array_append_val (ranges, r);
    g_ptr_array_add (tensors, lingbot_ckpt_tensor_new (storage,
            data_start + r.begin, r.end - r.begin, dtype, ndim, shape, NULL));
    g_ptr_array_add (names, (gpointer) name);
  }
  g_list_free (members);

  /* The data is the tensors back to back in offset order, nothing between
   * them and nothing after (the reference validator's rule): so no two
   * share bytes, and no bytes go unaccounted for. */
  GArray *sorted = g_array_copy (ranges);
  g_array_sort (sorted, compare_ranges);
  const Range *prev = NULL;
  guint64 at = 0;
  for (guint i = 0; i < sorted->len; i++) {
    const Range *r = &g_array_index (sorted, Range, i);
    if (r->begin < at) {
      g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
          "%s: tensors %s and %s have overlapping data ranges [%"
          G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT "] and [%" G_GUINT64_FORMAT
          ", %" G_GUINT64_FORMAT "]", file, prev->name, r->name, prev->begin,
          prev->end, r->begin, r->end);
      g_array_unref (sorted);
      goto out;
    }
    if (r->begin > at) {
      g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
          "%s: tensor %s starts at byte %" G_GUINT64_FORMAT " of the data, "
          "but the tensors before it end at %" G_GUINT64_FORMAT " (the data "
          "must be the tensors back to back)", file, r->name, r->begin, at);
      g_array_unref (sorted);
      goto out;
    }
    at = r->end;
    prev = r;
  }
  if (at != data_len) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: %" G_GUINT64_FORMAT " bytes after the last tensor's data (it "
        "ends at byte %" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT ")", file,
        (guint64) data_len - at, at, (guint64) data_len);
    g_array_unref (sorted);
    goto out;
  }
  g_array_unref (sorted);

  for (guint i = 0; i < tensors->len; i++) {
    LbTensor *t = g_ptr_array_index (tensors, i);
    g_ptr_array_index (tensors, i) = NULL;      /* ownership moves on */
    if (!lingbot_ckpt_add_tensor (ckpt, g_ptr_array_index (names, i), t, file,
            error))
      goto out;
  }
  ok = TRUE;

out:
  g_ptr_array_unref (names);
  g_ptr_array_unref (tensors);
  g_array_unref (ranges);
  if (parser)
    g_object_unref (parser);
  return ok;
}

gboolean
lingbot_ckpt_load_safetensors (LingbotCheckpoint * ckpt, const char *file,
    GError ** error)
{
  return lingbot_ckpt_load_mapped (ckpt, file, parse_safetensors, error);
}

/* ---- sharded sets ---- */

/* Errors are prefixed with @where (the index or directory). */
static gboolean
load_shards (LingbotCheckpoint * ckpt, const char *where, const char *dir,
    GPtrArray * shards, GError ** error)
{
  for (guint i = 0; i < shards->len; i++) {
    const char *shard = g_ptr_array_index (shards, i);
    char *p = g_path_is_absolute (shard) ? g_strdup (shard) :
        g_build_filename (dir, shard, NULL);
    gboolean ok = lingbot_ckpt_load_safetensors (ckpt, p, error);
    g_free (p);
    if (!ok) {
      g_prefix_error (error, "%s: ", where);
      return FALSE;
    }
  }
  return TRUE;
}


/* a shard path of an index stays in the index's folder: relative, no
 * empty name, no '..' component (an index must not open /etc/passwd) */
static gboolean
shard_name_is_confined (const char *f)
{
  if (*f == '\0' || g_path_is_absolute (f))
    return FALSE;
  g_auto (GStrv) parts = g_strsplit (f, "/", -1);
  for (guint i = 0; parts[i]; i++)
    if (strcmp (parts[i], "..") == 0)
      return FALSE;
  return TRUE;
}

static int
compare_strings (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

gboolean
lingbot_ckpt_load_safetensors_index (LingbotCheckpoint * ckpt,
    const char *index_file, GError ** error)
{
  GError *jerr = NULL;
  gboolean ok = FALSE;
  JsonParser *parser = json_parser_new_immutable ();
  GPtrArray *shards = g_ptr_array_new_with_free_func (g_free);
  GHashTable *seen = g_hash_table_new (g_str_hash, g_str_equal);
  char *dir = g_path_get_dirname (index_file);

  if (!json_parser_load_from_mapped_file (parser, index_file, &jerr)) {
    g_set_error (error, LB_ERROR,
        g_error_matches (jerr, G_FILE_ERROR, G_FILE_ERROR_NOENT) ?
        LB_ERROR_NOT_FOUND : jerr->domain == G_FILE_ERROR ? LB_ERROR_IO :
        LB_ERROR_FORMAT,
        "%s: cannot read safetensors index: %s", index_file, jerr->message);
    g_error_free (jerr);
    goto out;
  }
  JsonNode *root = json_parser_get_root (parser);
  JsonObject *obj = root && JSON_NODE_HOLDS_OBJECT (root) ?
      json_node_get_object (root) : NULL;
  JsonNode *wm = obj ? json_object_get_member (obj, "weight_map") : NULL;
  if (wm == NULL || !JSON_NODE_HOLDS_OBJECT (wm)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: safetensors index has no \"weight_map\" object", index_file);
    goto out;
  }
  JsonNode *md = json_object_get_member (obj, "metadata");
  if (md != NULL && JSON_NODE_HOLDS_OBJECT (md) &&
      !add_metadata (ckpt, index_file, md, error))
    goto out;

  JsonObject *map = json_node_get_object (wm);
  GList *members = json_object_get_members (map);
  for (GList * l = members; l; l = l->next) {
    JsonNode *v = json_object_get_member (map, l->data);
    if (json_node_get_value_type (v) != G_TYPE_STRING) {
      g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
          "%s: weight_map entry for %s is not a file name", index_file,
          (const char *) l->data);
      g_list_free (members);
      goto out;
    }
    const char *f = json_node_get_string (v);
    if (!shard_name_is_confined (f)) {
      g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
          "%s: weight_map entry for %s names '%s', outside the index's "
          "folder (shards are paths relative to it, without '..')",
          index_file, (const char *) l->data, f);
      g_list_free (members);
      goto out;
    }
    if (!g_hash_table_contains (seen, f)) {
      g_hash_table_add (seen, (gpointer) f);
      g_ptr_array_add (shards, g_strdup (f));
    }
  }
  g_ptr_array_sort (shards, compare_strings);
  if (!load_shards (ckpt, index_file, dir, shards, error)) {
    g_list_free (members);
    goto out;
  }

  /* every tensor the index names must be in the shard it names */
  for (GList * l = members; l; l = l->next) {
    const char *name = l->data;
    const char *f = json_object_get_string_member (map, name);
    const char *have = lingbot_checkpoint_get_tensor_file (ckpt, name);
    char *want = g_path_is_absolute (f) ? g_strdup (f) :
        g_build_filename (dir, f, NULL);
    if (have == NULL || strcmp (have, want) != 0) {
      g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
          "%s: weight_map puts tensor %s in %s, but that shard has no such "
          "tensor", index_file, name, f);
      g_free (want);
      g_list_free (members);
      goto out;
    }
    g_free (want);
  }
  g_list_free (members);
  ok = TRUE;

out:
  g_free (dir);
  g_hash_table_unref (seen);
  g_ptr_array_unref (shards);
  g_object_unref (parser);
  return ok;
}

gboolean
lingbot_ckpt_load_safetensors_dir (LingbotCheckpoint * ckpt, const char *dir,
    GError ** error)
{
  GError *err = NULL;
  GDir *d = g_dir_open (dir, 0, &err);
  if (d == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s: cannot open directory: %s",
        dir, err->message);
    g_error_free (err);
    return FALSE;
  }
  GPtrArray *shards = g_ptr_array_new_with_free_func (g_free);
  const char *name;
  while ((name = g_dir_read_name (d)) != NULL) {
    if (g_str_has_suffix (name, ".safetensors"))
      g_ptr_array_add (shards, g_strdup (name));
  }
  g_dir_close (d);
  gboolean ok;
  if (shards->len == 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND,
        "%s: no %s and no *.safetensors files in this directory", dir,
        LINGBOT_SAFETENSORS_INDEX_NAME);
    ok = FALSE;
  } else {
    g_ptr_array_sort (shards, compare_strings);
    ok = load_shards (ckpt, dir, dir, shards, error);
  }
  g_ptr_array_unref (shards);
  return ok;
}

/* ---- writer ---- */

static gboolean
write_all (FILE * f, const void *buf, gsize n, const char *path,
    GError ** error)
{
  if (n > 0 && fwrite (buf, 1, n, f) != n) {
    int e = errno;
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s: write failed: %s", path,
        g_strerror (e));
    return FALSE;
  }
  return TRUE;
}

/* Writes the elements of @t in C order, whatever its strides. */
static gboolean
write_tensor_data (FILE * f, const LbTensor * t, const char *path,
    GError ** error)
{
  gsize es = lb_dtype_size (t->dtype);
  int64_t numel = lb_tensor_numel (t);
  if (numel == 0)
    return TRUE;
  if (lb_tensor_is_contiguous (t))
    return write_all (f, t->data, (gsize) numel * es, path, error);

  /* gather rows of the innermost dimension into a bounce buffer */
  int nd = t->ndim;
  int64_t inner = t->shape[nd - 1];
  guint8 *row = g_malloc ((gsize) inner * es);
  int64_t idx[LB_MAX_DIMS] = { 0 };
  int64_t rows = numel / inner;
  gboolean ok = TRUE;
  for (int64_t r = 0; r < rows && ok; r++) {
    int64_t off = 0;
    for (int d = 0; d < nd - 1; d++)
      off += idx[d] * t->stride[d];
    const guint8 *base = (const guint8 *) t->data;
    for (int64_t j = 0; j < inner; j++)
      memcpy (row + j * es, base + (off + j * t->stride[nd - 1]) * (int64_t) es,
          es);
    ok = write_all (f, row, (gsize) inner * es, path, error);
    for (int d = nd - 2; d >= 0; d--) {
      if (++idx[d] < t->shape[d])
        break;
      idx[d] = 0;
    }
  }
  g_free (row);
  return ok;
}

static char *
build_header (const char *const *names, const LbTensor * const *tensors,
    guint n, GHashTable * metadata, gsize * padded_len)
{
  JsonBuilder *b = json_builder_new_immutable ();
  json_builder_begin_object (b);
  if (metadata != NULL && g_hash_table_size (metadata) > 0) {
    /* sorted keys: the same input always gives the same bytes */
    guint nk;
    const char **keys = (const char **)
        g_hash_table_get_keys_as_array (metadata, &nk);
    qsort (keys, nk, sizeof (char *), compare_strings);
    json_builder_set_member_name (b, "__metadata__");
    json_builder_begin_object (b);
    for (guint i = 0; i < nk; i++) {
      json_builder_set_member_name (b, keys[i]);
      json_builder_add_string_value (b, g_hash_table_lookup (metadata,
              keys[i]));
    }
    json_builder_end_object (b);
    g_free (keys);
  }
  guint64 offset = 0;
  for (guint i = 0; i < n; i++) {
    const LbTensor *t = tensors[i];
    guint64 nbytes = lb_tensor_nbytes (t);
    json_builder_set_member_name (b, names[i]);
    json_builder_begin_object (b);
    json_builder_set_member_name (b, "dtype");
    json_builder_add_string_value (b, lb_dtype_to_safetensors (t->dtype));
    json_builder_set_member_name (b, "shape");
    json_builder_begin_array (b);
    for (int d = 0; d < t->ndim; d++)
      json_builder_add_int_value (b, t->shape[d]);
    json_builder_end_array (b);
    json_builder_set_member_name (b, "data_offsets");
    json_builder_begin_array (b);
    json_builder_add_int_value (b, (gint64) offset);
    json_builder_add_int_value (b, (gint64) (offset + nbytes));
    json_builder_end_array (b);
    json_builder_end_object (b);
    offset += nbytes;
  }
  json_builder_end_object (b);
  JsonNode *root = json_builder_get_root (b);
  char *text = json_to_string (root, FALSE);
  json_node_unref (root);
  g_object_unref (b);

  gsize len = strlen (text);
  gsize padded = (len + 7) & ~(gsize) 7;
  text = g_realloc (text, padded + 1);
  memset (text + len, ' ', padded - len);
  text[padded] = '\0';
  *padded_len = padded;
  return text;
}

static gboolean
check_tensors (const char *path, const char *const *names,
    const LbTensor * const *tensors, guint n, GError ** error)
{
  GHashTable *seen = g_hash_table_new (g_str_hash, g_str_equal);
  gboolean ok = TRUE;
  for (guint i = 0; i < n && ok; i++) {
    const LbTensor *t = tensors[i];
    guint64 nbytes;
    if (names[i] == NULL || strcmp (names[i], "__metadata__") == 0 ||
        g_hash_table_contains (seen, names[i])) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "%s: tensor name %s is missing, reserved or repeated", path,
          names[i] ? names[i] : "(null)");
      ok = FALSE;
    } else if (t == NULL || t->device.type != LB_DEVICE_CPU ||
        lb_dtype_to_safetensors (t->dtype) == NULL ||
        !lingbot_ckpt_nbytes (t->dtype, t->ndim, t->shape, &nbytes) ||
        (nbytes > 0 && t->data == NULL)) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "%s: tensor %s is not a valid CPU tensor", path, names[i]);
      ok = FALSE;
    }
    g_hash_table_add (seen, (gpointer) names[i]);
  }
  g_hash_table_unref (seen);
  return ok;
}

/**
 * lingbot_safetensors_write:
 * @path: the file to write (replaced atomically: written as @path.tmp,
 *   then renamed)
 * @names: (array length=n_tensors): tensor names, unique, not "__metadata__"
 * @tensors: (array length=n_tensors): CPU tensors of any dtype and strides
 * @n_tensors: number of tensors
 * @metadata: (nullable) (element-type utf8 utf8): the `__metadata__` map
 * @error: return location for a #GError
 *
 * Writes a safetensors file: 8-byte little-endian header length, a compact
 * JSON header padded with spaces to a multiple of 8 bytes, then the tensors'
 * elements in C order, back to back in the order given.  Data is streamed
 * from the tensors (no copy of the whole file is built in memory).
 *
 * Errors: %LB_ERROR_INVALID_ARGUMENT for a bad name or tensor,
 * %LB_ERROR_IO when writing fails.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_safetensors_write (const char *path, const char *const *names,
    const LbTensor * const *tensors, guint n_tensors, GHashTable * metadata,
    GError ** error)
{
  g_return_val_if_fail (path != NULL, FALSE);
  g_return_val_if_fail (n_tensors == 0 || (names && tensors), FALSE);
  if (!check_tensors (path, names, tensors, n_tensors, error))
    return FALSE;

  gsize hlen;
  char *header = build_header (names, tensors, n_tensors, metadata, &hlen);
  char *tmp = g_strconcat (path, ".tmp", NULL);
  gboolean ok = FALSE;
  FILE *f = g_fopen (tmp, "wb");
  if (f == NULL) {
    int e = errno;
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s: cannot create: %s", tmp,
        g_strerror (e));
    goto out;
  }
  guint8 lenbuf[8];
  for (int i = 0; i < 8; i++)
    lenbuf[i] = (guint8) ((guint64) hlen >> (8 * i));
  ok = write_all (f, lenbuf, 8, tmp, error) &&
      write_all (f, header, hlen, tmp, error);
  for (guint i = 0; ok && i < n_tensors; i++)
    ok = write_tensor_data (f, tensors[i], tmp, error);
  if (fclose (f) != 0 && ok) {
    int e = errno;
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s: write failed: %s", tmp,
        g_strerror (e));
    ok = FALSE;
  }
  if (ok && g_rename (tmp, path) != 0) {
    int e = errno;
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s: cannot rename to %s: %s",
        tmp, path, g_strerror (e));
    ok = FALSE;
  }
  if (!ok)
    g_unlink (tmp);
out:
  g_free (tmp);
  g_free (header);
  return ok;
}

char *
lingbot_ckpt_shard_name (guint shard, guint n_shards)
{
  return g_strdup_printf ("model-%05u-of-%05u.safetensors", shard + 1,
      n_shards);
}

gboolean
lingbot_ckpt_write_index (const char *dir, const char *const *names,
    const guint * shard_of, guint n_names, guint n_shards, guint64 total,
    GError ** error)
{
  g_autoptr (JsonBuilder) b = json_builder_new_immutable ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "metadata");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "total_size");
  json_builder_add_int_value (b, (gint64) total);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "weight_map");
  json_builder_begin_object (b);
  for (guint i = 0; i < n_names; i++) {
    g_autofree char *shard = lingbot_ckpt_shard_name (shard_of[i], n_shards);
    json_builder_set_member_name (b, names[i]);
    json_builder_add_string_value (b, shard);
  }
  json_builder_end_object (b);
  json_builder_end_object (b);
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  g_autofree char *text = json_to_string (root, TRUE);
  g_autofree char *p = g_build_filename (dir, LINGBOT_SAFETENSORS_INDEX_NAME,
      NULL);
  GError *err = NULL;
  if (!g_file_set_contents (p, text, -1, &err)) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s: %s", p, err->message);
    g_error_free (err);
    return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_safetensors_write_sharded:
 * @dir: an existing directory
 * @names: (array length=n_tensors): tensor names
 * @tensors: (array length=n_tensors): CPU tensors
 * @n_tensors: number of tensors
 * @max_shard_bytes: start a new shard before the data of a shard would
 *   exceed this (a shard always holds at least one tensor); 0 = one shard
 * @metadata: (nullable) (element-type utf8 utf8): `__metadata__` written
 *   into every shard
 * @error: return location for a #GError
 *
 * Writes the Hugging Face sharded layout: `model-00001-of-0000N.safetensors`
 * ... (tensors kept in the order given) and `model.safetensors.index.json`
 * = `{"metadata": {"total_size": BYTES}, "weight_map": {name: shard}}`,
 * which lingbot_checkpoint_open() reads given the directory or the index.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_safetensors_write_sharded (const char *dir, const char *const *names,
    const LbTensor * const *tensors, guint n_tensors, guint64 max_shard_bytes,
    GHashTable * metadata, GError ** error)
{
  g_return_val_if_fail (dir != NULL, FALSE);
  if (!check_tensors (dir, names, tensors, n_tensors, error))
    return FALSE;

  /* assign shards: shard_of[i] */
  guint *shard_of = g_new0 (guint, MAX (n_tensors, 1));
  guint n_shards = n_tensors ? 1 : 0;
  guint64 cur = 0, total = 0;
  for (guint i = 0; i < n_tensors; i++) {
    guint64 nb = lb_tensor_nbytes (tensors[i]);
    if (max_shard_bytes > 0 && cur > 0 && cur + nb > max_shard_bytes) {
      n_shards++;
      cur = 0;
    }
    cur += nb;
    total += nb;
    shard_of[i] = n_shards - 1;
  }

  gboolean ok = TRUE;
  guint first = 0;
  for (guint s = 0; s < n_shards && ok; s++) {
    guint last = first;
    while (last < n_tensors && shard_of[last] == s)
      last++;
    g_autofree char *shard = lingbot_ckpt_shard_name (s, n_shards);
    g_autofree char *p = g_build_filename (dir, shard, NULL);
    ok = lingbot_safetensors_write (p, names + first, tensors + first,
        last - first, metadata, error);
    first = last;
  }
  if (ok)
    ok = lingbot_ckpt_write_index (dir, names, shard_of, n_tensors, n_shards,
        total, error);
  g_free (shard_of);
  return ok;
}

/* Unit tests: safetensors (single and sharded) and .npy readers, writer,
 * error paths, lingbot_checkpoint_get_checked() messages.
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "lingbot/checkpoint.h"
#include "kernels/error.h"

#include <string.h>
#include <glib/gstdio.h>

static char *tmpdir;

static char *
tmp_path (const char *name)
{
  return g_build_filename (tmpdir, name, NULL);
}

static void
write_bytes (const char *path, const void *data, gsize len)
{
  GError *error = NULL;
  g_assert_true (g_file_set_contents (path, data, (gssize) len, &error));
  g_assert_no_error (error);
}

/* Writes a safetensors file by hand: declared header length @hlen (or the
 * real one when G_MAXUINT64), header text, then @ndata data bytes. */
static char *
write_raw_safetensors (const char *name, guint64 hlen, const char *header,
    gsize ndata)
{
  gsize len = strlen (header);
  if (hlen == G_MAXUINT64)
    hlen = len;
  GByteArray *b = g_byte_array_new ();
  for (int i = 0; i < 8; i++) {
    guint8 c = (guint8) (hlen >> (8 * i));
    g_byte_array_append (b, &c, 1);
  }
  g_byte_array_append (b, (const guint8 *) header, (guint) len);
  for (gsize i = 0; i < ndata; i++) {
    guint8 c = (guint8) i;
    g_byte_array_append (b, &c, 1);
  }
  char *path = tmp_path (name);
  write_bytes (path, b->data, b->len);
  g_byte_array_unref (b);
  return path;
}

static void
assert_open_fails (const char *path, gint code, const char *substring)
{
  GError *error = NULL;
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (path, &error);
  g_assert_null (ckpt);
  g_assert_nonnull (error);
  if (g_test_verbose ())
    g_printerr ("%s\n", error->message);
  g_assert_error (error, LB_ERROR, code);
  if (strstr (error->message, substring) == NULL)
    g_error ("message '%s' lacks '%s'", error->message, substring);
  /* every reader error names the file */
  g_assert_nonnull (strstr (error->message, path));
  g_error_free (error);
}

/* the open fails with exactly "PATH: @message" */
static void
assert_open_error_is (const char *path, gint code, const char *message)
{
  GError *error = NULL;
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (path, &error);
  g_autofree char *expected = g_strdup_printf ("%s: %s", path, message);
  g_assert_null (ckpt);
  g_assert_error (error, LB_ERROR, code);
  g_assert_cmpstr (error->message, ==, expected);
  g_error_free (error);
}

/* value of element i of test tensor k: exactly representable everywhere */
static double
test_value (LbDType dtype, int64_t i)
{
  switch (dtype) {
    case LB_DTYPE_U8:
      return (double) ((i * 37) % 256);
    case LB_DTYPE_I32:
    case LB_DTYPE_I64:
      return (double) (i * 3 - 7);
    default:
      return (double) i *0.25 - 2.0;
  }
}

static LbTensor *
make_tensor (LbDType dtype, int ndim, const int64_t * shape)
{
  LbTensor *t = lb_tensor_new (dtype, ndim, shape);
  int64_t n = lb_tensor_numel (t);
  for (int64_t i = 0; i < n; i++)
    lb_tensor_set_flat (t, i, test_value (dtype, i));
  return t;
}

static void
test_safetensors_roundtrip (void)
{
  static const int64_t shapes[LB_DTYPE_COUNT][3] = {
    {2, 3, 4}, {5, 2, 1}, {7, 1, 1}, {3, 3, 1}, {2, 2, 2}, {17, 1, 1},
    {1, 4, 1}, {3, 1, 1}
  };
  static const int ndims[LB_DTYPE_COUNT] = { 3, 2, 1, 2, 3, 1, 2, 1 };
  const char *names[LB_DTYPE_COUNT + 2];
  LbTensor *tensors[LB_DTYPE_COUNT + 2];
  char *namebuf[LB_DTYPE_COUNT];
  guint n = 0;
  for (int d = 0; d < LB_DTYPE_COUNT; d++) {
    namebuf[d] = g_strdup_printf ("t.%s", lb_dtype_name ((LbDType) d));
    names[n] = namebuf[d];
    tensors[n++] = make_tensor ((LbDType) d, ndims[d], shapes[d]);
  }
  /* a 0-d tensor and an empty one */
  names[n] = "scalar";
  tensors[n++] = make_tensor (LB_DTYPE_F32, 0, NULL);
  names[n] = "empty";
  tensors[n++] = make_tensor (LB_DTYPE_F32, 2, (int64_t[]) { 0, 3 });

  GHashTable *md = g_hash_table_new (g_str_hash, g_str_equal);
  g_hash_table_insert (md, "format", "pt");
  g_hash_table_insert (md, "config", "{\"dim\": 8}");

  char *path = tmp_path ("all.safetensors");
  GError *error = NULL;
  g_assert_true (lingbot_safetensors_write (path, names,
          (const LbTensor * const *) tensors, n, md, &error));
  g_assert_no_error (error);

  /* header padded to 8 */
  gchar *contents;
  gsize len;
  g_assert_true (g_file_get_contents (path, &contents, &len, NULL));
  guint64 hlen = 0;
  for (int i = 7; i >= 0; i--)
    hlen = (hlen << 8) | (guint8) contents[i];
  g_assert_cmpuint (hlen % 8, ==, 0);
  g_free (contents);

  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpint (lingbot_checkpoint_get_format (ckpt), ==,
      LINGBOT_CHECKPOINT_SAFETENSORS);
  g_assert_cmpuint (lingbot_checkpoint_get_n_tensors (ckpt), ==, n);
  g_assert_cmpstr (lingbot_checkpoint_get_metadata_value (ckpt, "format"), ==,
      "pt");
  g_assert_cmpstr (lingbot_checkpoint_get_metadata_value (ckpt, "config"), ==,
      "{\"dim\": 8}");
  g_assert_cmpuint (g_hash_table_size (lingbot_checkpoint_get_metadata
          (ckpt)), ==, 2);

  /* sorted names */
  guint nn;
  const char *const *list = lingbot_checkpoint_list_tensors (ckpt, &nn);
  g_assert_cmpuint (nn, ==, n);
  g_assert_null (list[nn]);
  for (guint i = 1; i < nn; i++)
    g_assert_cmpint (strcmp (list[i - 1], list[i]), <, 0);
  g_assert_cmpstr (list[0], ==, "empty");

  for (guint k = 0; k < n; k++) {
    const LbTensor *t = lingbot_checkpoint_get (ckpt, names[k], &error);
    g_assert_no_error (error);
    g_assert_cmpint (t->dtype, ==, tensors[k]->dtype);
    g_assert_true (lb_tensor_same_shape (t, tensors[k]));
    g_assert_true (lb_tensor_is_contiguous (t));
    g_assert_cmpstr (lingbot_checkpoint_get_tensor_file (ckpt, names[k]), ==,
        path);
    int64_t ne = lb_tensor_numel (t);
    for (int64_t i = 0; i < ne; i++)
      g_assert_cmpfloat (lb_tensor_get_flat (t, i), ==,
          test_value (t->dtype, i));
    /* aligned for its dtype, even where the file packs it unaligned */
    g_assert_nonnull (t->storage);
    if (ne > 0)
      g_assert_cmpuint ((guintptr) t->data % lb_dtype_size (t->dtype), ==, 0);
  }
  /* zero copy: the first tensor (offset 0) points into the mapping of the
   * whole file; u8 [17] at offset 58 makes the f64 after it unaligned, so
   * that one is a copy */
  g_assert_cmpuint (lingbot_checkpoint_get (ckpt, "t.f32",
          NULL)->storage->nbytes, ==, len);
  g_assert_cmpuint (lingbot_checkpoint_get (ckpt, "t.f64",
          NULL)->storage->nbytes, ==, 4 * 8);

  /* dup_tensor outlives the checkpoint */
  LbTensor *keep = lingbot_checkpoint_dup_tensor (ckpt, "t.f32", &error);
  g_assert_no_error (error);
  lingbot_checkpoint_unref (ckpt);
  g_assert_cmpfloat (lb_tensor_get_flat (keep, 5), ==, 5 * 0.25 - 2.0);
  lb_tensor_free (keep);

  for (guint k = 0; k < n; k++)
    lb_tensor_free (tensors[k]);
  for (int d = 0; d < LB_DTYPE_COUNT; d++)
    g_free (namebuf[d]);
  g_hash_table_unref (md);
  g_free (path);
}

static void
test_safetensors_noncontiguous_write (void)
{
  /* write a transposed view: the file holds it in C order */
  LbTensor *t = make_tensor (LB_DTYPE_F32, 2, (int64_t[]) { 2, 3 });
  LbTensor v;
  g_assert_true (lb_tensor_view_permute (&v, t, (int[]) { 1, 0 }));
  const LbTensor *arr[] = { &v };
  const char *names[] = { "t" };
  char *path = tmp_path ("transposed.safetensors");
  GError *error = NULL;
  g_assert_true (lingbot_safetensors_write (path, names, arr, 1, NULL, &error));
  g_assert_no_error (error);
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (path, &error);
  g_assert_no_error (error);
  const LbTensor *r = lingbot_checkpoint_get_checked (ckpt, "t", 2,
      (int64_t[]) { 3, 2 }, LB_DTYPE_F32, &error);
  g_assert_no_error (error);
  for (int64_t i = 0; i < 3; i++)
    for (int64_t j = 0; j < 2; j++)
      g_assert_cmpfloat (lb_tensor_get (r, (int64_t[]) { i, j }), ==,
          test_value (LB_DTYPE_F32, j * 3 + i));
  lingbot_checkpoint_unref (ckpt);
  lb_tensor_free (t);
  g_free (path);
}

static void
test_get_checked_messages (void)
{
  LbTensor *w = make_tensor (LB_DTYPE_F32, 2, (int64_t[]) { 8, 4 });
  const LbTensor *arr[] = { w };
  const char *names[] = { "blocks.0.ffn.0.weight" };
  char *path = tmp_path ("checked.safetensors");
  GError *error = NULL;
  g_assert_true (lingbot_safetensors_write (path, names, arr, 1, NULL, &error));
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (path, &error);
  g_assert_no_error (error);

  g_assert_null (lingbot_checkpoint_get_checked (ckpt,
          "blocks.0.ffn.0.weight", 2, (int64_t[]) { 16, 4 }, LB_DTYPE_F32,
          &error));
  g_assert_error (error, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpstr (error->message, ==,
      "tensor blocks.0.ffn.0.weight has shape [8, 4], expected [16, 4]");
  g_clear_error (&error);

  g_assert_null (lingbot_checkpoint_get_checked (ckpt,
          "blocks.0.ffn.0.weight", 1, (int64_t[]) { 32 }, LINGBOT_DTYPE_ANY,
          &error));
  g_assert_cmpstr (error->message, ==,
      "tensor blocks.0.ffn.0.weight has shape [8, 4], expected [32]");
  g_clear_error (&error);

  g_assert_null (lingbot_checkpoint_get_checked (ckpt,
          "blocks.0.ffn.0.weight", 2, (int64_t[]) { 8, 4 }, LB_DTYPE_BF16,
          &error));
  g_assert_error (error, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpstr (error->message, ==,
      "tensor blocks.0.ffn.0.weight has dtype f32, expected bf16");
  g_clear_error (&error);

  char *msg = g_strdup_printf ("tensor blocks.1.ffn.0.weight not found in %s",
      path);
  g_assert_null (lingbot_checkpoint_get_checked (ckpt,
          "blocks.1.ffn.0.weight", 2, (int64_t[]) { 8, 4 }, LB_DTYPE_F32,
          &error));
  g_assert_error (error, LB_ERROR, LB_ERROR_NOT_FOUND);
  g_assert_cmpstr (error->message, ==, msg);
  g_clear_error (&error);
  g_assert_null (lingbot_checkpoint_get (ckpt, "blocks.1.ffn.0.weight",
          &error));
  g_assert_cmpstr (error->message, ==, msg);
  g_clear_error (&error);
  g_assert_false (lingbot_checkpoint_has_tensor (ckpt,
          "blocks.1.ffn.0.weight"));
  g_free (msg);

  /* wildcards and dtype-any pass */
  g_assert_nonnull (lingbot_checkpoint_get_checked (ckpt,
          "blocks.0.ffn.0.weight", 2, (int64_t[]) { -1, 4 },
          LINGBOT_DTYPE_ANY, &error));
  g_assert_no_error (error);
  g_assert_nonnull (lingbot_checkpoint_get_checked (ckpt,
          "blocks.0.ffn.0.weight", 2, NULL, LB_DTYPE_F32, &error));
  g_assert_no_error (error);

  lingbot_checkpoint_unref (ckpt);
  lb_tensor_free (w);
  g_free (path);
}

static void
test_safetensors_sharded (void)
{
  char *dir = tmp_path ("sharded");
  g_assert_cmpint (g_mkdir (dir, 0755), ==, 0);
  const char *names[] = { "a.weight", "b.weight", "c.bias", "d.table" };
  LbTensor *tensors[4] = {
    make_tensor (LB_DTYPE_F32, 2, (int64_t[]) { 4, 4 }),        /* 64 B */
    make_tensor (LB_DTYPE_BF16, 2, (int64_t[]) { 4, 8 }),       /* 64 B */
    make_tensor (LB_DTYPE_F32, 1, (int64_t[]) { 4 }),   /* 16 B */
    make_tensor (LB_DTYPE_I64, 1, (int64_t[]) { 10 }),  /* 80 B */
  };
  GHashTable *md = g_hash_table_new (g_str_hash, g_str_equal);
  g_hash_table_insert (md, "producer", "test");
  GError *error = NULL;
  g_assert_true (lingbot_safetensors_write_sharded (dir, names,
          (const LbTensor * const *) tensors, 4, 100, md, &error));
  g_assert_no_error (error);

  char *s1 = g_build_filename (dir, "model-00001-of-00003.safetensors", NULL);
  char *s2 = g_build_filename (dir, "model-00002-of-00003.safetensors", NULL);
  char *s3 = g_build_filename (dir, "model-00003-of-00003.safetensors", NULL);
  char *index = g_build_filename (dir, LINGBOT_SAFETENSORS_INDEX_NAME, NULL);
  g_assert_true (g_file_test (s3, G_FILE_TEST_IS_REGULAR));

  /* open the directory, then the index itself */
  LingbotCheckpoint *ckpt;
  for (int pass = 0; pass < 2; pass++) {
    ckpt = lingbot_checkpoint_open (pass ? index : dir, &error);
    g_assert_no_error (error);
    g_assert_cmpint (lingbot_checkpoint_get_format (ckpt), ==,
        LINGBOT_CHECKPOINT_SAFETENSORS_SHARDED);
    g_assert_cmpuint (lingbot_checkpoint_get_n_tensors (ckpt), ==, 4);
    g_assert_cmpstr (lingbot_checkpoint_get_metadata_value (ckpt,
            "total_size"), ==, "224");
    g_assert_cmpstr (lingbot_checkpoint_get_metadata_value (ckpt,
            "producer"), ==, "test");
    g_assert_cmpstr (lingbot_checkpoint_get_tensor_file (ckpt, "a.weight"),
        ==, s1);
    g_assert_cmpstr (lingbot_checkpoint_get_tensor_file (ckpt, "b.weight"),
        ==, s2);
    g_assert_cmpstr (lingbot_checkpoint_get_tensor_file (ckpt, "c.bias"), ==,
        s2);
    g_assert_cmpstr (lingbot_checkpoint_get_tensor_file (ckpt, "d.table"), ==,
        s3);
    for (int k = 0; k < 4; k++) {
      const LbTensor *t = lingbot_checkpoint_get (ckpt, names[k], &error);
      g_assert_no_error (error);
      g_assert_true (lb_tensor_same_shape (t, tensors[k]));
      for (int64_t i = 0; i < lb_tensor_numel (t); i++)
        g_assert_cmpfloat (lb_tensor_get_flat (t, i), ==,
            test_value (t->dtype, i));
    }
    lingbot_checkpoint_unref (ckpt);
  }

  /* a diffusers-named index is found in the directory too */
  char *dindex = g_build_filename (dir,
      "diffusion_pytorch_model.safetensors.index.json", NULL);
  g_assert_cmpint (g_rename (index, dindex), ==, 0);
  ckpt = lingbot_checkpoint_open (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (lingbot_checkpoint_get_metadata_value (ckpt,
          "total_size"), ==, "224");
  lingbot_checkpoint_unref (ckpt);
  g_assert_cmpint (g_unlink (dindex), ==, 0);
  g_free (dindex);

  /* a directory of shards without an index also opens */
  ckpt = lingbot_checkpoint_open (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (lingbot_checkpoint_get_n_tensors (ckpt), ==, 4);
  lingbot_checkpoint_unref (ckpt);

  /* an index naming a tensor its shard lacks */
  const char *bad = "{\"metadata\": {\"total_size\": 1}, \"weight_map\": "
      "{\"a.weight\": \"model-00001-of-00003.safetensors\", "
      "\"zzz\": \"model-00001-of-00003.safetensors\"}}";
  write_bytes (index, bad, strlen (bad));
  assert_open_fails (index, LB_ERROR_FORMAT, "weight_map puts tensor zzz in");

  /* an index naming a missing shard */
  const char *missing = "{\"weight_map\": {\"a\": \"nope.safetensors\"}}";
  write_bytes (index, missing, strlen (missing));
  assert_open_fails (index, LB_ERROR_NOT_FOUND, "nope.safetensors");

  /* shard paths outside the index's folder are refused before any open */
  static const char *const outside[] = { "/etc/passwd", "../x.safetensors",
    "sub/../../x.safetensors", ""
  };
  for (guint k = 0; k < G_N_ELEMENTS (outside); k++) {
    g_autofree char *j = g_strdup_printf ("{\"weight_map\": {\"a\": \"%s\"}}",
        outside[k]);
    g_autofree char *want = g_strdup_printf ("%s: weight_map entry for a "
        "names '%s', outside the index's folder (shards are paths relative "
        "to it, without '..')", index, outside[k]);
    write_bytes (index, j, strlen (j));
    GError *oerr = NULL;
    g_assert_null (lingbot_checkpoint_open (index, &oerr));
    g_assert_error (oerr, LB_ERROR, LB_ERROR_FORMAT);
    g_assert_cmpstr (oerr->message, ==, want);
    g_error_free (oerr);
  }

  /* two shards holding the same name */
  char *dup = g_build_filename (dir, "model-00004-of-00003.safetensors",
      NULL);
  g_assert_true (lingbot_safetensors_write (dup, names,
          (const LbTensor * const *) tensors, 1, NULL, &error));
  g_assert_cmpint (g_unlink (index), ==, 0);
  assert_open_fails (dir, LB_ERROR_FORMAT, "tensor a.weight is defined twice");

  for (int k = 0; k < 4; k++)
    lb_tensor_free (tensors[k]);
  g_hash_table_unref (md);
  g_free (dup);
  g_free (s1);
  g_free (s2);
  g_free (s3);
  g_free (index);
  g_free (dir);
}

static void
test_safetensors_corrupt (void)
{
  char *p;

  p = tmp_path ("empty.safetensors");
  write_bytes (p, "", 0);
  assert_open_fails (p, LB_ERROR_FORMAT, "truncated safetensors header");
  g_free (p);

  p = tmp_path ("short.safetensors");
  write_bytes (p, "\x10\0\0\0\0", 5);
  assert_open_fails (p, LB_ERROR_FORMAT,
      "truncated safetensors header (file is 5 bytes");
  g_free (p);

  p = write_raw_safetensors ("beyond.safetensors", 1000, "{}      ", 8);
  assert_open_fails (p, LB_ERROR_FORMAT,
      "safetensors header length 1000 goes beyond the end of the file "
      "(24 bytes)");
  g_free (p);

  p = write_raw_safetensors ("huge.safetensors", G_MAXUINT64 - 3, "{}", 0);
  assert_open_fails (p, LB_ERROR_FORMAT, "goes beyond the end of the file");
  g_free (p);

  p = write_raw_safetensors ("notjson.safetensors", G_MAXUINT64,
      "{\"a\": nope}     ", 0);
  assert_open_fails (p, LB_ERROR_FORMAT, "header is not valid JSON");
  g_free (p);

  p = write_raw_safetensors ("notjson2.safetensors", G_MAXUINT64,
      "hello!!!", 0);
  assert_open_fails (p, LB_ERROR_FORMAT, "header is not valid JSON");
  g_free (p);

  p = write_raw_safetensors ("overlap.safetensors", G_MAXUINT64,
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12);
  assert_open_fails (p, LB_ERROR_FORMAT,
      "tensors a and b have overlapping data ranges [0, 8] and [4, 12]");
  g_free (p);

  /* strict layout: no gap between tensors, no bytes after the last */
  p = write_raw_safetensors ("gap.safetensors", G_MAXUINT64,
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20);
  assert_open_fails (p, LB_ERROR_FORMAT, "gap.safetensors: tensor b starts at "
      "byte 12 of the data, but the tensors before it end at 8 (the data "
      "must be the tensors back to back)");
  g_free (p);

  p = write_raw_safetensors ("trailing.safetensors", G_MAXUINT64,
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 11);
  assert_open_fails (p, LB_ERROR_FORMAT, "trailing.safetensors: 3 bytes after "
      "the last tensor's data (it ends at byte 8 of 11)");
  g_free (p);

  p = write_raw_safetensors ("range.safetensors", G_MAXUINT64,
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8);
  assert_open_fails (p, LB_ERROR_FORMAT,
      "tensor a: data offsets [0, 16] out of range (data block is 8 bytes)");
  g_free (p);

  p = write_raw_safetensors ("range2.safetensors", G_MAXUINT64,
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],"
      "\"data_offsets\":[18446744073709551600,18446744073709551615]}}", 8);
  assert_open_fails (p, LB_ERROR_FORMAT, "data_offsets must be");
  g_free (p);

  p = write_raw_safetensors ("inconsistent.safetensors", G_MAXUINT64,
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
  assert_open_fails (p, LB_ERROR_FORMAT,
      "tensor a: data offsets [0, 8] inconsistent with dtype F32 and "
      "shape [3]");
  g_free (p);

  p = write_raw_safetensors ("overflow.safetensors", G_MAXUINT64,
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904, 8],"
      "\"data_offsets\":[0,0]}}", 8);
  assert_open_fails (p, LB_ERROR_FORMAT, "inconsistent with dtype");
  g_free (p);

  /* an empty tensor whose other extents overflow the strides (fuzz
   * corpus npy/repro-empty-shape-stride-overflow, as safetensors) */
  p = write_raw_safetensors ("emptyoverflow.safetensors", G_MAXUINT64,
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[0,7774777772777777777,1,2],"
      "\"data_offsets\":[0,0]}}", 0);
  assert_open_error_is (p, LB_ERROR_FORMAT, "tensor a: data offsets [0, 0] "
      "inconsistent with dtype F32 and shape [0, 7774777772777777777, 1, 2]");
  g_free (p);

  p = write_raw_safetensors ("dtype.safetensors", G_MAXUINT64,
      "{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
  assert_open_fails (p, LB_ERROR_FORMAT, "tensor a: unknown dtype 'Q7'");
  g_free (p);

  p = write_raw_safetensors ("bool.safetensors", G_MAXUINT64,
      "{\"a\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
  assert_open_fails (p, LB_ERROR_UNSUPPORTED, "unsupported dtype 'BOOL'");
  g_free (p);

  p = write_raw_safetensors ("fields.safetensors", G_MAXUINT64,
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8);
  assert_open_fails (p, LB_ERROR_FORMAT, "header entry needs");
  g_free (p);

  p = write_raw_safetensors ("rank.safetensors", G_MAXUINT64,
      "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1],"
      "\"data_offsets\":[0,1]}}", 1);
  assert_open_fails (p, LB_ERROR_UNSUPPORTED, "has 6 dimensions");
  g_free (p);

  p = tmp_path ("does-not-exist.safetensors");
  assert_open_fails (p, LB_ERROR_NOT_FOUND, "cannot open");
  g_free (p);

  /* no signature, no known name (a JPEG given as poses): what was tried */
  p = tmp_path ("poses.jpg");
  write_bytes (p, "\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01", 13);
  g_autofree char *want = g_strdup_printf ("%s: not a checkpoint or array "
      "file: no NumPy (.npy) or PyTorch zip signature, and not safetensors "
      "(safetensors header length ", p);
  assert_open_fails (p, LB_ERROR_FORMAT, want);
  g_free (p);
}

/* ---- .npy ---- */

static char *
write_npy (const char *name, int major, const char *dict, const void *data,
    gsize ndata)
{
  GByteArray *b = g_byte_array_new ();
  gsize pre = major == 1 ? 10 : 12;
  gsize hlen = strlen (dict) + 1;       /* + '\n' */
  gsize total = (pre + hlen + 63) / 64 * 64;
  hlen = total - pre;
  g_byte_array_append (b, (const guint8 *) "\x93NUMPY", 6);
  guint8 ver[2] = { (guint8) major, 0 };
  g_byte_array_append (b, ver, 2);
  for (gsize i = 0; i < pre - 8; i++) {
    guint8 c = (guint8) (hlen >> (8 * i));
    g_byte_array_append (b, &c, 1);
  }
  char *h = g_malloc (hlen);
  memset (h, ' ', hlen);
  memcpy (h, dict, strlen (dict));
  h[hlen - 1] = '\n';
  g_byte_array_append (b, (const guint8 *) h, (guint) hlen);
  g_free (h);
  if (ndata)
    g_byte_array_append (b, data, (guint) ndata);
  char *path = tmp_path (name);
  write_bytes (path, b->data, b->len);
  g_byte_array_unref (b);
  return path;
}

static void
test_npy (void)
{
  GError *error = NULL;
  float f[6] = { 0, 1.5f, -2, 3, 4.25f, 5 };
  char *p = write_npy ("array.npy", 1,
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f,
      sizeof f);
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (p, &error);
  g_assert_no_error (error);
  g_assert_cmpint (lingbot_checkpoint_get_format (ckpt), ==,
      LINGBOT_CHECKPOINT_NPY);
  guint n;
  const char *const *names = lingbot_checkpoint_list_tensors (ckpt, &n);
  g_assert_cmpuint (n, ==, 1);
  g_assert_cmpstr (names[0], ==, "array");
  const LbTensor *t = lingbot_checkpoint_get_checked (ckpt, "array", 2,
      (int64_t[]) { 2, 3 }, LB_DTYPE_F32, &error);
  g_assert_no_error (error);
  for (int i = 0; i < 6; i++)
    g_assert_cmpfloat (lb_tensor_get_flat (t, i), ==, f[i]);
  g_assert_cmpuint (((guintptr) t->data) % 64, ==, 0);
  lingbot_checkpoint_unref (ckpt);
  g_free (p);

  /* version 2.0, int64, 1-d */
  gint64 l[4] = { -1, 0, 1, G_GINT64_CONSTANT (1) << 40 };
  p = write_npy ("ids.npy", 2,
      "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", l, sizeof l);
  ckpt = lingbot_checkpoint_open (p, &error);
  g_assert_no_error (error);
  t = lingbot_checkpoint_get_checked (ckpt, "ids", 1, (int64_t[]) { 4 },
      LB_DTYPE_I64, &error);
  g_assert_no_error (error);
  g_assert_cmpint (((const gint64 *) t->data)[3], ==, l[3]);
  lingbot_checkpoint_unref (ckpt);
  g_free (p);

  /* Fortran order: column-major data, described by reversed strides */
  double d[6] = { 0, 10, 1, 11, 2, 12 };        /* [[0,1,2],[10,11,12]] */
  p = write_npy ("fortran.npy", 3,
      "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", d,
      sizeof d);
  ckpt = lingbot_checkpoint_open (p, &error);
  g_assert_no_error (error);
  t = lingbot_checkpoint_get_checked (ckpt, "fortran", 2, (int64_t[]) { 2, 3 },
      LB_DTYPE_F64, &error);
  g_assert_no_error (error);
  for (int64_t i = 0; i < 2; i++)
    for (int64_t j = 0; j < 3; j++)
      g_assert_cmpfloat (lb_tensor_get (t, (int64_t[]) { i, j }), ==,
          i * 10 + j);
  lingbot_checkpoint_unref (ckpt);
  g_free (p);

  /* 0-d, uint8 and float16 */
  guint8 u = 200;
  p = write_npy ("u8scalar.npy", 1,
      "{'descr': '|u1', 'fortran_order': False, 'shape': (), }", &u, 1);
  ckpt = lingbot_checkpoint_open (p, &error);
  g_assert_no_error (error);
  t = lingbot_checkpoint_get_checked (ckpt, "u8scalar", 0, NULL, LB_DTYPE_U8,
      &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (lb_tensor_get_flat (t, 0), ==, 200);
  lingbot_checkpoint_unref (ckpt);
  g_free (p);

  guint16 h[2] = { lb_f32_to_f16 (0.5f), lb_f32_to_f16 (-3) };
  p = write_npy ("half.npy", 1,
      "{'descr': '<f2', 'fortran_order': False, 'shape': (2,), }", h, 4);
  ckpt = lingbot_checkpoint_open (p, &error);
  g_assert_no_error (error);
  t = lingbot_checkpoint_get (ckpt, "half", &error);
  g_assert_cmpint (t->dtype, ==, LB_DTYPE_F16);
  g_assert_cmpfloat (lb_tensor_get_flat (t, 1), ==, -3);
  lingbot_checkpoint_unref (ckpt);
  g_free (p);
}

static void
test_npy_corrupt (void)
{
  char *p = tmp_path ("badmagic.npy");
  write_bytes (p, "\x93NUMPX\x01\x00\x10\x00{}", 12);
  assert_open_fails (p, LB_ERROR_FORMAT, "not a NumPy .npy file (bad magic)");
  g_free (p);

  float f[2] = { 1, 2 };
  p = write_npy ("bigendian.npy", 1,
      "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", f, 8);
  assert_open_fails (p, LB_ERROR_UNSUPPORTED, "unsupported npy dtype '>f4'");
  g_free (p);

  p = write_npy ("truncdata.npy", 1,
      "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", f, 8);
  assert_open_fails (p, LB_ERROR_FORMAT,
      "npy data is truncated (8 bytes, expected 12)");
  g_free (p);

  p = write_npy ("badheader.npy", 1, "{'descr': '<f4', 'shape': (3,), }", f, 8);
  assert_open_fails (p, LB_ERROR_FORMAT, "npy header is not a dict with");
  g_free (p);

  /* no element, but its first contiguous stride would be 1.5e19 (fuzz
   * corpus npy/repro-empty-shape-stride-overflow) */
  p = write_npy ("emptyoverflow.npy", 1, "{'descr': '<f4', 'fortran_order': "
      "False, 'shape': (0, 7774777772777777777, 1, 2), }", f, 0);
  assert_open_error_is (p, LB_ERROR_FORMAT, "npy shape is too large");
  g_free (p);
  p = write_npy ("emptyoverflowf.npy", 1, "{'descr': '<f4', 'fortran_order': "
      "True, 'shape': (2, 1, 7774777772777777777, 0), }", f, 0);
  assert_open_error_is (p, LB_ERROR_FORMAT, "npy shape is too large");
  g_free (p);

  p = tmp_path ("hlen.npy");
  write_bytes (p, "\x93NUMPY\x01\x00\xff\x00{}", 12);
  assert_open_fails (p, LB_ERROR_FORMAT, "npy header length 255 goes beyond");
  g_free (p);

  p = tmp_path ("version.npy");
  write_bytes (p, "\x93NUMPY\x09\x00\x02\x00{}", 12);
  assert_open_fails (p, LB_ERROR_UNSUPPORTED, "npy format version 9.0");
  g_free (p);
}

static void
rm_rf (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR)) {
    GDir *d = g_dir_open (path, 0, NULL);
    const char *name;
    while (d && (name = g_dir_read_name (d)) != NULL) {
      char *child = g_build_filename (path, name, NULL);
      rm_rf (child);
      g_free (child);
    }
    if (d)
      g_dir_close (d);
    g_rmdir (path);
  } else {
    g_unlink (path);
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  GError *error = NULL;
  tmpdir = g_dir_make_tmp ("lingbot-ckpt-XXXXXX", &error);
  g_assert_no_error (error);

  g_test_add_func ("/checkpoint/safetensors/roundtrip",
      test_safetensors_roundtrip);
  g_test_add_func ("/checkpoint/safetensors/noncontiguous-write",
      test_safetensors_noncontiguous_write);
  g_test_add_func ("/checkpoint/safetensors/sharded", test_safetensors_sharded);
  g_test_add_func ("/checkpoint/safetensors/corrupt", test_safetensors_corrupt);
  g_test_add_func ("/checkpoint/get-checked", test_get_checked_messages);
  g_test_add_func ("/checkpoint/npy/read", test_npy);
  g_test_add_func ("/checkpoint/npy/corrupt", test_npy_corrupt);
  int ret = g_test_run ();
  rm_rf (tmpdir);
  g_free (tmpdir);
  return ret;
}

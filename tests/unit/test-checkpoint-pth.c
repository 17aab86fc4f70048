/* Unit tests: PyTorch .pth reader against fixtures written by real torch
 * (tests/data/fixtures/make_pth_fixture.py, torch 1.13) and corrupt archives.
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "lingbot/checkpoint.h"
#include "kernels/error.h"

#include <string.h>
#include <zip.h>
#include <glib/gstdio.h>

static char *fixtures;
static char *tmpdir;

static LingbotCheckpoint *
open_fixture (const char *name)
{
  char *p = g_build_filename (fixtures, name, NULL);
  GError *error = NULL;
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (p, &error);
  g_assert_no_error (error);
  g_assert_cmpint (lingbot_checkpoint_get_format (ckpt), ==,
      LINGBOT_CHECKPOINT_PTH);
  g_free (p);
  return ckpt;
}

static const LbTensor *
get (LingbotCheckpoint * ckpt, const char *name, int ndim,
    const int64_t * shape, LbDType dtype)
{
  GError *error = NULL;
  const LbTensor *t = lingbot_checkpoint_get_checked (ckpt, name, ndim, shape,
      dtype, &error);
  g_assert_no_error (error);
  return t;
}

static void
check_tiny_state_dict (LingbotCheckpoint * ckpt, gboolean mapped)
{
  static const char *expect[] = {
    "bf16.weight", "f16.bias", "f32.weight", "f64.x", "i64.ids", "scalar",
    "shared.a", "shared.b", "shared.base", "transposed", "u8.mask", NULL
  };
  guint n;
  const char *const *names = lingbot_checkpoint_list_tensors (ckpt, &n);
  g_assert_cmpstrv (names, expect);

  const LbTensor *t;
  t = get (ckpt, "f32.weight", 2, (int64_t[]) { 3, 4 }, LB_DTYPE_F32);
  g_assert_true (lb_tensor_is_contiguous (t));
  for (int i = 0; i < 12; i++)
    g_assert_cmpfloat (lb_tensor_get_flat (t, i), ==, i * 0.5 - 1);
  if (mapped) {
    /* zero copy: the storage is the mapping of the whole .pth */
    char *p = g_build_filename (fixtures, "tiny_state_dict.pth", NULL);
    GStatBuf st;
    g_assert_cmpint (g_stat (p, &st), ==, 0);
    g_assert_cmpuint (t->storage->nbytes, ==, (guint64) st.st_size);
    g_assert_cmpuint ((guintptr) t->data % 64, ==, 0);
    g_free (p);
  }

  t = get (ckpt, "bf16.weight", 2, (int64_t[]) { 2, 4 }, LB_DTYPE_BF16);
  for (int i = 0; i < 8; i++)
    g_assert_cmpfloat (lb_tensor_get_flat (t, i), ==, i * 0.25 - 1);

  t = get (ckpt, "f16.bias", 1, (int64_t[]) { 6 }, LB_DTYPE_F16);
  for (int i = 0; i < 6; i++)
    g_assert_cmpfloat (lb_tensor_get_flat (t, i), ==, i * 0.125);

  t = get (ckpt, "f64.x", 1, (int64_t[]) { 2 }, LB_DTYPE_F64);
  g_assert_cmpfloat (lb_tensor_get_flat (t, 0), ==, 1.0 / 3.0);
  g_assert_cmpfloat (lb_tensor_get_flat (t, 1), ==, -2.0);

  t = get (ckpt, "i64.ids", 1, (int64_t[]) { 5 }, LB_DTYPE_I64);
  for (int i = 0; i < 5; i++)
    g_assert_cmpint (((const gint64 *) t->data)[i], ==, i - 2);

  t = get (ckpt, "u8.mask", 1, (int64_t[]) { 3 }, LB_DTYPE_U8);
  g_assert_cmpint (((const guint8 *) t->data)[2], ==, 255);
  g_assert_cmpint (((const guint8 *) t->data)[1], ==, 1);

  /* (arange(6).reshape(2,3) + 100).T: shape [3,2], strides (1,3) */
  t = get (ckpt, "transposed", 2, (int64_t[]) { 3, 2 }, LB_DTYPE_F32);
  g_assert_cmpint (t->stride[0], ==, 1);
  g_assert_cmpint (t->stride[1], ==, 3);
  g_assert_false (lb_tensor_is_contiguous (t));
  for (int64_t i = 0; i < 3; i++)
    for (int64_t j = 0; j < 2; j++)
      g_assert_cmpfloat (lb_tensor_get (t, (int64_t[]) { i, j }), ==,
          100 + j * 3 + i);

  /* base = arange(10) * 10, a = base[2:6], b = base[5:], one storage */
  const LbTensor *base = get (ckpt, "shared.base", 1, (int64_t[]) { 10 },
      LB_DTYPE_F32);
  const LbTensor *a = get (ckpt, "shared.a", 1, (int64_t[]) { 4 },
      LB_DTYPE_F32);
  const LbTensor *b = get (ckpt, "shared.b", 1, (int64_t[]) { 5 },
      LB_DTYPE_F32);
  for (int i = 0; i < 10; i++)
    g_assert_cmpfloat (lb_tensor_get_flat (base, i), ==, i * 10);
  for (int i = 0; i < 4; i++)
    g_assert_cmpfloat (lb_tensor_get_flat (a, i), ==, (i + 2) * 10);
  for (int i = 0; i < 5; i++)
    g_assert_cmpfloat (lb_tensor_get_flat (b, i), ==, (i + 5) * 10);
  g_assert_true ((const float *) a->data == (const float *) base->data + 2);
  g_assert_true ((const float *) b->data == (const float *) base->data + 5);

  t = get (ckpt, "scalar", 0, NULL, LB_DTYPE_F32);
  g_assert_cmpfloat (lb_tensor_get_flat (t, 0), ==, 3.5);
}

static void
test_tiny_state_dict (void)
{
  LingbotCheckpoint *ckpt = open_fixture ("tiny_state_dict.pth");
  check_tiny_state_dict (ckpt, TRUE);
  g_assert_cmpuint (g_hash_table_size (lingbot_checkpoint_get_metadata
          (ckpt)), ==, 0);
  lingbot_checkpoint_unref (ckpt);
}

static void
test_deflated (void)
{
  LingbotCheckpoint *ckpt = open_fixture ("tiny_state_dict_deflated.pth");
  check_tiny_state_dict (ckpt, FALSE);
  lingbot_checkpoint_unref (ckpt);
}

static void
test_wrapped (void)
{
  /* {'epoch': 3, 'model_state': Linear(4,2).state_dict(), 'optimizer':
   * {...}}: the model_state dict is unwrapped, the rest ignored */
  LingbotCheckpoint *ckpt = open_fixture ("wrapped_state_dict.pth");
  static const char *expect[] = { "bias", "weight", NULL };
  g_assert_cmpstrv (lingbot_checkpoint_list_tensors (ckpt, NULL), expect);
  const LbTensor *w = get (ckpt, "weight", 2, (int64_t[]) { 2, 4 },
      LB_DTYPE_F32);
  for (int i = 0; i < 8; i++)
    g_assert_cmpfloat (lb_tensor_get_flat (w, i), ==, i / 8.0);
  const LbTensor *bias = get (ckpt, "bias", 1, (int64_t[]) { 2 },
      LB_DTYPE_F32);
  g_assert_cmpfloat (lb_tensor_get_flat (bias, 0), ==, -1);
  g_assert_cmpfloat (lb_tensor_get_flat (bias, 1), ==, 1);
  g_assert_cmpstr (lingbot_checkpoint_get_metadata_value (ckpt,
          "pth_wrapper"), ==, "model_state");
  lingbot_checkpoint_unref (ckpt);
}

static void
test_nested (void)
{
  LingbotCheckpoint *ckpt = open_fixture ("nested_state_dict.pth");
  static const char *expect[] = {
    "decoder.layers.0", "decoder.layers.1", "encoder.w", NULL
  };
  g_assert_cmpstrv (lingbot_checkpoint_list_tensors (ckpt, NULL), expect);
  const LbTensor *t = get (ckpt, "decoder.layers.1", 1, (int64_t[]) { 2 },
      LB_DTYPE_F32);
  g_assert_cmpfloat (lb_tensor_get_flat (t, 1), ==, 3);
  t = get (ckpt, "encoder.w", 1, (int64_t[]) { 4 }, LB_DTYPE_F32);
  g_assert_cmpfloat (lb_tensor_get_flat (t, 3), ==, 3);
  lingbot_checkpoint_unref (ckpt);
}

/* ---- corrupt inputs ---- */

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
  g_assert_nonnull (strstr (error->message, path));
  g_error_free (error);
}

/* Writes a stored zip holding archive/data.pkl = @pkl and, when @data is
 * given, archive/data/0 = @data. */
static char *
write_zip (const char *name, const void *pkl, gsize pkl_len,
    const void *data, gsize data_len)
{
  char *path = g_build_filename (tmpdir, name, NULL);
  int err = 0;
  zip_t *za = zip_open (path, ZIP_CREATE | ZIP_TRUNCATE, &err);
  g_assert_nonnull (za);
  zip_source_t *s = zip_source_buffer (za, pkl, pkl_len, 0);
  zip_int64_t i = zip_file_add (za, "archive/data.pkl", s, ZIP_FL_OVERWRITE);
  g_assert_cmpint (i, >=, 0);
  zip_set_file_compression (za, (zip_uint64_t) i, ZIP_CM_STORE, 0);
  if (data) {
    s = zip_source_buffer (za, data, data_len, 0);
    i = zip_file_add (za, "archive/data/0", s, ZIP_FL_OVERWRITE);
    g_assert_cmpint (i, >=, 0);
    zip_set_file_compression (za, (zip_uint64_t) i, ZIP_CM_STORE, 0);
  }
  g_assert_cmpint (zip_close (za), ==, 0);
  return path;
}

/* pickle of {'w': _rebuild_tensor_v2(('storage', torch.FloatStorage, '0',
 * 'cpu', NUMEL), OFFSET, (SIZE,), (1,), False, OrderedDict())} */
static GByteArray *
tensor_pickle (guint8 numel, guint8 offset, guint8 size)
{
  GByteArray *b = g_byte_array_new ();
#define PUT(s) g_byte_array_append (b, (const guint8 *) (s), sizeof (s) - 1)
  PUT ("\x80\x02}q\x00X\x01\x00\x00\x00wq\x01");
  PUT ("ctorch._utils\n_rebuild_tensor_v2\nq\x02(");
  PUT ("(X\x07\x00\x00\x00storageq\x03" "ctorch\nFloatStorage\nq\x04");
  PUT ("X\x01\x00\x00\x00" "0q\x05X\x03\x00\x00\x00" "cpuq\x06K");
  g_byte_array_append (b, &numel, 1);
  PUT ("tq\x07QK");
  g_byte_array_append (b, &offset, 1);
  PUT ("K");
  g_byte_array_append (b, &size, 1);
  PUT ("\x85K\x01\x85\x89");
  PUT ("ccollections\nOrderedDict\nq\x08)Rq\x09tq\x0aRq\x0bs.");
#undef PUT
  return b;
}

/* pickle of {'a': uint8 [8] of storage '0' (ByteStorage, 8 elements),
 * 'b': float32 [2] of storage '0' (FloatStorage, 2 elements)} */
static GByteArray *
two_dtype_pickle (void)
{
  GByteArray *b = g_byte_array_new ();
#define PUT(s) g_byte_array_append (b, (const guint8 *) (s), sizeof (s) - 1)
  PUT ("\x80\x02}q\x00(X\x01\x00\x00\x00" "aq\x01");
  PUT ("ctorch._utils\n_rebuild_tensor_v2\nq\x02(");
  PUT ("(X\x07\x00\x00\x00storageq\x03" "ctorch\nByteStorage\nq\x04");
  PUT ("X\x01\x00\x00\x00" "0q\x05X\x03\x00\x00\x00" "cpuq\x06K\x08");
  PUT ("tq\x07QK\x00K\x08\x85K\x01\x85\x89");
  PUT ("ccollections\nOrderedDict\nq\x08)Rq\x09tq\x0aRq\x0b");
  PUT ("X\x01\x00\x00\x00" "bq\x0ch\x02(");
  PUT ("(h\x03" "ctorch\nFloatStorage\nq\x0dh\x05h\x06K\x02");
  PUT ("tq\x0eQK\x00K\x02\x85K\x01\x85\x89h\x08)Rq\x0ftq\x10Rq\x11u.");
#undef PUT
  return b;
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

/* sets the central directory's sizes of archive/data/0 in @path */
static void
patch_record_size (const char *path, guint32 size)
{
  gsize len = 0;
  g_autofree guint8 *z = NULL;
  gboolean patched = FALSE;
  const guint32 n = GUINT32_TO_LE (size);

  g_assert_true (g_file_get_contents (path, (char **) &z, &len, NULL));
  for (gsize i = 0; i + 46 + 14 <= len; i++)
    if (memcmp (z + i, "PK\x01\x02", 4) == 0 &&
        memcmp (z + i + 46, "archive/data/0", 14) == 0) {
      memcpy (z + i + 20, &n, 4);       /* compressed size */
      memcpy (z + i + 24, &n, 4);       /* uncompressed size */
      patched = TRUE;
    }
  g_assert_true (patched);
  g_assert_true (g_file_set_contents (path, (const char *) z, len, NULL));
}

static int
file_size (const char *path)
{
  GStatBuf st;

  g_assert_cmpint (g_stat (path, &st), ==, 0);
  return (int) st.st_size;
}

static void
test_two_dtypes (void)
{
  /* one record seen as uint8 then float32: mapped in place for the first
   * (alignment 1), it would give the second a misaligned float pointer
   * (fuzz corpus pth/repro-storage-two-dtypes) */
  GByteArray *pkl = two_dtype_pickle ();
  guint8 data[8] = { 0 };
  char *p = write_zip ("twodtypes.pth", pkl->data, pkl->len, data, 8);
  assert_open_error_is (p, LB_ERROR_FORMAT,
      "storage 0 is used as both u8 and f32");
  g_free (p);
  g_byte_array_unref (pkl);
}

static void
test_corrupt (void)
{
  char *p = g_build_filename (tmpdir, "garbage.pth", NULL);
  g_assert_true (g_file_set_contents (p, "this is not a zip file at all, "
          "just text", -1, NULL));
  assert_open_fails (p, LB_ERROR_FORMAT, "not a valid zip archive");
  g_free (p);

  /* zip signature, then nothing sensible: a zip cut short, as far as
   * anyone can tell (no end of central directory record) */
  p = g_build_filename (tmpdir, "badzip.pth", NULL);
  g_assert_true (g_file_set_contents (p, "PK\x03\x04garbagegarbage", 18, NULL));
  assert_open_fails (p, LB_ERROR_FORMAT, "badzip.pth: truncated: 18 bytes, "
      "not a complete .pth (zip) file: it has no end of central directory "
      "record");
  g_free (p);

  /* legacy torch.save (raw pickle) */
  p = g_build_filename (tmpdir, "legacy.pth", NULL);
  g_assert_true (g_file_set_contents (p, "\x80\x02\x8a\x0al\xfc\x9c" "F\xf9 j",
          12, NULL));
  assert_open_fails (p, LB_ERROR_UNSUPPORTED, "legacy");
  g_free (p);

  /* a zip that is not a torch archive */
  p = g_build_filename (tmpdir, "nopkl.pth", NULL);
  {
    int err = 0;
    zip_t *za = zip_open (p, ZIP_CREATE | ZIP_TRUNCATE, &err);
    zip_source_t *s = zip_source_buffer (za, "x", 1, 0);
    zip_file_add (za, "archive/other", s, 0);
    g_assert_cmpint (zip_close (za), ==, 0);
  }
  assert_open_fails (p, LB_ERROR_FORMAT, "zip archive has no data.pkl");
  g_free (p);

  /* unknown opcode: PROTO 2, EMPTY_DICT, then 0xff at offset 3 */
  p = write_zip ("opcode.pth", "\x80\x02}\xff.", 5, NULL, 0);
  assert_open_fails (p, LB_ERROR_UNSUPPORTED,
      "archive/data.pkl: unsupported pickle opcode 0xff at offset 3");
  g_free (p);

  p = write_zip ("trunc.pth", "\x80\x02X\xff\x00\x00\x00" "ab", 9, NULL, 0);
  assert_open_fails (p, LB_ERROR_FORMAT,
      "archive/data.pkl: truncated pickle at offset 2");
  g_free (p);

  p = write_zip ("nostop.pth", "\x80\x02}", 3, NULL, 0);
  assert_open_fails (p, LB_ERROR_FORMAT, "pickle ends without STOP");
  g_free (p);

  p = write_zip ("underflow.pth", "\x80\x02s.", 4, NULL, 0);
  assert_open_fails (p, LB_ERROR_FORMAT, "pickle stack underflow at offset 2");
  g_free (p);

  p = write_zip ("memo.pth", "\x80\x02h\x05.", 5, NULL, 0);
  assert_open_fails (p, LB_ERROR_FORMAT, "pickle memo key 5 not found");
  g_free (p);

  /* a hand-written pickle that is fine: 4 floats, tensor = [1:3] */
  float data[4] = { 1, 2, 3, 4 };
  GByteArray *pk = tensor_pickle (4, 1, 2);
  p = write_zip ("handmade.pth", pk->data, pk->len, data, sizeof data);
  GError *error = NULL;
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (p, &error);
  g_assert_no_error (error);
  const LbTensor *t = lingbot_checkpoint_get_checked (ckpt, "w", 1,
      (int64_t[]) { 2 }, LB_DTYPE_F32, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (lb_tensor_get_flat (t, 0), ==, 2);
  g_assert_cmpfloat (lb_tensor_get_flat (t, 1), ==, 3);
  lingbot_checkpoint_unref (ckpt);
  g_byte_array_unref (pk);
  g_free (p);

  /* the view reaches past the storage */
  pk = tensor_pickle (4, 3, 2);
  p = write_zip ("beyond.pth", pk->data, pk->len, data, sizeof data);
  assert_open_fails (p, LB_ERROR_FORMAT,
      "a tensor reaches beyond its storage 0 (4 elements)");
  g_byte_array_unref (pk);
  g_free (p);

  /* the storage claims more elements than its record holds */
  pk = tensor_pickle (9, 0, 2);
  p = write_zip ("short-record.pth", pk->data, pk->len, data, sizeof data);
  assert_open_fails (p, LB_ERROR_FORMAT,
      "storage 0 declares 9 elements of f32 but its record has 16 bytes");
  g_byte_array_unref (pk);
  g_free (p);

  /* the central directory says 800 bytes for the record (200 floats, as
   * the storage declares) but the file has 408: refused before reading */
  pk = tensor_pickle (200, 0, 2);
  p = write_zip ("short-read.pth", pk->data, pk->len, data, sizeof data);
  patch_record_size (p, 800);
  {
    g_autofree char *m = g_strdup_printf ("storage 0 needs 800 bytes, more "
        "than its record archive/data/0 can hold (800 compressed bytes in a "
        "file of %d)", file_size (p));
    assert_open_error_is (p, LB_ERROR_FORMAT, m);
  }
  g_byte_array_unref (pk);
  g_free (p);

  /* 3 GiB declared for the record of a 4-float storage, checked before
   * anything is allocated (it reached g_try_malloc; fuzz corpus
   * pth/repro-record-size-3gib) */
  pk = tensor_pickle (4, 0, 2);
  p = write_zip ("huge-record.pth", pk->data, pk->len, data, sizeof data);
  patch_record_size (p, 3u << 30);
  assert_open_error_is (p, LB_ERROR_FORMAT,
      "storage 0 declares 4 elements of f32 but its record has 3221225472 "
      "bytes");
  g_byte_array_unref (pk);
  g_free (p);

  /* a record longer than its storage (torch writes them equal) */
  pk = tensor_pickle (3, 0, 2);
  p = write_zip ("long-record.pth", pk->data, pk->len, data, sizeof data);
  assert_open_error_is (p, LB_ERROR_FORMAT,
      "storage 0 declares 3 elements of f32 but its record has 16 bytes");
  g_byte_array_unref (pk);
  g_free (p);

  /* the storage record is missing */
  pk = tensor_pickle (4, 0, 2);
  p = write_zip ("no-record.pth", pk->data, pk->len, NULL, 0);
  assert_open_fails (p, LB_ERROR_FORMAT,
      "storage record archive/data/0 is missing from the archive");
  g_byte_array_unref (pk);
  g_free (p);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  const char *root = g_getenv ("LINGBOT_SOURCE_ROOT");
  fixtures = g_build_filename (root ? root : ".", "tests", "data", "fixtures",
      NULL);
  GError *error = NULL;
  tmpdir = g_dir_make_tmp ("lingbot-pth-XXXXXX", &error);
  g_assert_no_error (error);

  g_test_add_func ("/checkpoint/pth/tiny-state-dict", test_tiny_state_dict);
  g_test_add_func ("/checkpoint/pth/deflated", test_deflated);
  g_test_add_func ("/checkpoint/pth/wrapped", test_wrapped);
  g_test_add_func ("/checkpoint/pth/nested", test_nested);
  g_test_add_func ("/checkpoint/pth/corrupt", test_corrupt);
  g_test_add_func ("/checkpoint/pth/two-dtypes", test_two_dtypes);
  int ret = g_test_run ();

  GDir *d = g_dir_open (tmpdir, 0, NULL);
  const char *name;
  while (d && (name = g_dir_read_name (d)) != NULL) {
    char *f = g_build_filename (tmpdir, name, NULL);
    g_unlink (f);
    g_free (f);
  }
  if (d)
    g_dir_close (d);
  g_rmdir (tmpdir);
  g_free (tmpdir);
  g_free (fixtures);
  return ret;
}

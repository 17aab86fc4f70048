/* Unit tests: lingbot_pth_write() (torch.save layout) read back through
 * lingbot_checkpoint_open() and, when /usr/bin/python3 has torch, through
 * torch.load().
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "lingbot/checkpoint.h"
#include "kernels/error.h"

#include <string.h>
#include <zip.h>
#include <glib/gstdio.h>

static char *tmpdir;

/* value i of tensor k: exact in every dtype written below (bf16 keeps 8
 * significant bits, u8 0..255) */
static double
value_of (LbDType dtype, int k, int64_t i)
{
  switch (dtype) {
    case LB_DTYPE_U8:
      return (double) ((i * 7 + k) % 256);
    case LB_DTYPE_I32:
    case LB_DTYPE_I64:
      return (double) (i * 3 - 5 - k);
    default:
      return (double) ((i % 64) - 16 + k) * 0.25;
  }
}

typedef struct
{
  const char *name;
  LbDType dtype;
  int ndim;
  int64_t shape[LB_MAX_DIMS];
} Spec;

/* deliberately not in strcmp order: the pickle keeps this order */
static const Spec specs[] = {
  {"z.f32.weight", LB_DTYPE_F32, 2, {3, 4}},
  {"b.bf16.weight", LB_DTYPE_BF16, 3, {2, 3, 5}},
  {"m.f16.bias", LB_DTYPE_F16, 1, {6}},
  {"a.f64.x", LB_DTYPE_F64, 1, {2}},
  {"k.i64.ids", LB_DTYPE_I64, 1, {5}},
  {"c.i32.ids", LB_DTYPE_I32, 2, {2, 2}},
  {"u8.mask", LB_DTYPE_U8, 1, {300}},
  {"scalar", LB_DTYPE_F32, 0, {0}},
  {"scalar.bf16", LB_DTYPE_BF16, 0, {0}},
  {"empty", LB_DTYPE_F32, 2, {0, 3}},
  {"empty.bf16", LB_DTYPE_BF16, 1, {0}},
  {"five.d", LB_DTYPE_F16, 5, {1, 2, 1, 3, 2}},
};

#define N_SPECS G_N_ELEMENTS (specs)
/* names of the transposed (non-contiguous) extra tensor */
#define T_NAME "transposed"

static LbTensor *
make (const Spec * s, int k)
{
  LbTensor *t = lb_tensor_new (s->dtype, s->ndim, s->shape);
  for (int64_t i = 0; i < lb_tensor_numel (t); i++)
    lb_tensor_set_flat (t, i, value_of (s->dtype, k, i));
  return t;
}

static char *
write_specs (const char *file, LbTensor ** base_out)
{
  char *path = g_build_filename (tmpdir, file, NULL);
  const char *names[N_SPECS + 1];
  LbTensor *tensors[N_SPECS + 1];
  for (guint k = 0; k < N_SPECS; k++) {
    names[k] = specs[k].name;
    tensors[k] = make (&specs[k], (int) k);
  }
  /* a [3, 2] view of a [2, 3] f32 tensor: stored contiguous */
  int64_t s23[2] = { 2, 3 };
  LbTensor *base = lb_tensor_new (LB_DTYPE_F32, 2, s23);
  for (int64_t i = 0; i < 6; i++)
    lb_tensor_set_flat (base, i, 100.0 + (double) i);
  LbTensor view;
  static const int perm[2] = { 1, 0 };
  g_assert_true (lb_tensor_view_permute (&view, base, perm));
  g_assert_false (lb_tensor_is_contiguous (&view));
  names[N_SPECS] = T_NAME;
  tensors[N_SPECS] = &view;

  GError *error = NULL;
  g_assert_true (lingbot_pth_write (path, names, tensors, N_SPECS + 1, &error));
  g_assert_no_error (error);
  for (guint k = 0; k < N_SPECS; k++)
    lb_tensor_free (tensors[k]);
  *base_out = base;

  char *tmp = g_strconcat (path, ".tmp", NULL);
  g_assert_false (g_file_test (tmp, G_FILE_TEST_EXISTS));
  g_free (tmp);
  return path;
}

/* walks the local headers: every entry stored, its data 64-byte aligned */
static void
check_layout (const char *path, const char *base, guint n_data)
{
  char *raw;
  gsize len;
  g_assert_true (g_file_get_contents (path, &raw, &len, NULL));
  const guint8 *p = (const guint8 *) raw;
  gsize off = 0;
  guint n = 0;
  GPtrArray *names = g_ptr_array_new_with_free_func (g_free);
  while (off + 30 <= len && p[off] == 'P' && p[off + 1] == 'K' &&
      p[off + 2] == 3 && p[off + 3] == 4) {
    guint method = p[off + 8] | (p[off + 9] << 8);
    guint64 csize = p[off + 18] | (p[off + 19] << 8) |
        ((guint64) p[off + 20] << 16) | ((guint64) p[off + 21] << 24);
    guint nl = p[off + 26] | (p[off + 27] << 8);
    guint el = p[off + 28] | (p[off + 29] << 8);
    g_assert_cmpuint (method, ==, 0);
    g_ptr_array_add (names, g_strndup (raw + off + 30, nl));
    gsize data = off + 30 + nl + el;
    g_assert_cmpuint (data % 64, ==, 0);
    off = data + csize;
    n++;
  }
  g_assert_cmpuint (n, ==, n_data + 3);
  char *want = g_strconcat (base, "/data.pkl", NULL);
  g_assert_cmpstr (g_ptr_array_index (names, 0), ==, want);
  g_free (want);
  want = g_strconcat (base, "/byteorder", NULL);
  g_assert_cmpstr (g_ptr_array_index (names, 1), ==, want);
  g_free (want);
  for (guint i = 0; i < n_data; i++) {
    want = g_strdup_printf ("%s/data/%u", base, i);
    g_assert_cmpstr (g_ptr_array_index (names, i + 2), ==, want);
    g_free (want);
  }
  want = g_strconcat (base, "/version", NULL);
  g_assert_cmpstr (g_ptr_array_index (names, n_data + 2), ==, want);
  g_free (want);
  g_ptr_array_unref (names);

  /* version "3\n" and byteorder "little" through libzip */
  int zerr;
  zip_t *za = zip_open (path, ZIP_RDONLY | ZIP_CHECKCONS, &zerr);
  g_assert_nonnull (za);
  const char *entries[2][2] = { {"/version", "3\n"}, {"/byteorder",
      "little"}
  };
  for (int i = 0; i < 2; i++) {
    char *name = g_strconcat (base, entries[i][0], NULL);
    zip_file_t *zf = zip_fopen (za, name, 0);
    g_assert_nonnull (zf);
    char buf[16] = { 0 };
    g_assert_cmpint (zip_fread (zf, buf, sizeof buf - 1), ==,
        (zip_int64_t) strlen (entries[i][1]));
    g_assert_cmpstr (buf, ==, entries[i][1]);
    zip_fclose (zf);
    g_free (name);
  }
  zip_discard (za);
  g_free (raw);
}

/* the names appear in the pickle in the order given */
static void
check_pickle_order (const char *path, const char *base)
{
  int zerr;
  zip_t *za = zip_open (path, ZIP_RDONLY, &zerr);
  g_assert_nonnull (za);
  char *name = g_strconcat (base, "/data.pkl", NULL);
  zip_stat_t st;
  g_assert_cmpint (zip_stat (za, name, 0, &st), ==, 0);
  char *pkl = g_malloc0 (st.size + 1);
  zip_file_t *zf = zip_fopen (za, name, 0);
  g_assert_cmpint (zip_fread (zf, pkl, st.size), ==, (zip_int64_t) st.size);
  zip_fclose (zf);
  zip_discard (za);
  g_assert_cmpint ((guint8) pkl[0], ==, 0x80);
  g_assert_cmpint (pkl[1], ==, 2);
  g_assert_cmpint (pkl[st.size - 1], ==, '.');

  gsize last = 0;
  for (guint k = 0; k <= N_SPECS; k++) {
    const char *want = k < N_SPECS ? specs[k].name : T_NAME;
    /* BINUNICODE: 'X', u32 length, bytes */
    gsize wl = strlen (want);
    gsize found = 0;
    for (gsize i = last; i + 5 + wl <= st.size; i++) {
      if (pkl[i] == 'X' && (guint8) pkl[i + 1] == wl && pkl[i + 2] == 0 &&
          memcmp (pkl + i + 5, want, wl) == 0) {
        found = i;
        break;
      }
    }
    g_assert_cmpuint (found, >, last);
    last = found;
  }
  g_free (pkl);
  g_free (name);
}

static void
test_round_trip (void)
{
  LbTensor *base;
  char *path = write_specs ("round_trip.pth", &base);
  check_layout (path, "round_trip", N_SPECS + 1);
  check_pickle_order (path, "round_trip");

  GError *error = NULL;
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpint (lingbot_checkpoint_get_format (ckpt), ==,
      LINGBOT_CHECKPOINT_PTH);
  g_assert_cmpuint (lingbot_checkpoint_get_n_tensors (ckpt), ==, N_SPECS + 1);
  for (guint k = 0; k < N_SPECS; k++) {
    const Spec *s = &specs[k];
    const LbTensor *t = lingbot_checkpoint_get_checked (ckpt, s->name,
        s->ndim, s->shape, s->dtype, &error);
    g_assert_no_error (error);
    g_assert_true (lb_tensor_is_contiguous (t));
    for (int64_t i = 0; i < lb_tensor_numel (t); i++)
      g_assert_cmpfloat (lb_tensor_get_flat (t, i), ==,
          value_of (s->dtype, (int) k, i));
  }
  int64_t s32[2] = { 3, 2 };
  const LbTensor *t = lingbot_checkpoint_get_checked (ckpt, T_NAME, 2, s32,
      LB_DTYPE_F32, &error);
  g_assert_no_error (error);
  for (int64_t r = 0; r < 3; r++) {
    for (int64_t c = 0; c < 2; c++) {
      int64_t idx[2] = { r, c };
      g_assert_cmpfloat (lb_tensor_get (t, idx), ==, 100.0 + c * 3 + r);
    }
  }
  /* the scalar is 0-d with one element */
  t = lingbot_checkpoint_get (ckpt, "scalar", &error);
  g_assert_no_error (error);
  g_assert_cmpint (t->ndim, ==, 0);
  g_assert_cmpint (lb_tensor_numel (t), ==, 1);
  lingbot_checkpoint_unref (ckpt);
  lb_tensor_free (base);
  g_free (path);
}

/* > 256 memo entries (LONG_BINPUT / LONG_BINGET) and > 1000 items (two
 * SETITEMS batches), and a batch of exactly one item (SETITEM) */
static void
test_many (void)
{
  const guint n = 1001;
  char *path = g_build_filename (tmpdir, "many.pth", NULL);
  const char **names = g_new0 (const char *, n);
  LbTensor **tensors = g_new0 (LbTensor *, n);
  int64_t shape[1] = { 2 };
  for (guint i = 0; i < n; i++) {
    names[i] = g_strdup_printf ("layer.%u.w", i);
    tensors[i] = lb_tensor_new (i % 2 ? LB_DTYPE_BF16 : LB_DTYPE_F32, 1, shape);
    lb_tensor_set_flat (tensors[i], 0, (double) (i % 200));
    lb_tensor_set_flat (tensors[i], 1, -1.0);
  }
  GError *error = NULL;
  g_assert_true (lingbot_pth_write (path, names, tensors, n, &error));
  g_assert_no_error (error);
  check_layout (path, "many", n);

  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (lingbot_checkpoint_get_n_tensors (ckpt), ==, n);
  for (guint i = 0; i < n; i++) {
    const LbTensor *t = lingbot_checkpoint_get_checked (ckpt, names[i], 1,
        shape, i % 2 ? LB_DTYPE_BF16 : LB_DTYPE_F32, &error);
    g_assert_no_error (error);
    g_assert_cmpfloat (lb_tensor_get_flat (t, 0), ==, (double) (i % 200));
    g_assert_cmpfloat (lb_tensor_get_flat (t, 1), ==, -1.0);
  }
  lingbot_checkpoint_unref (ckpt);
  for (guint i = 0; i < n; i++) {
    g_free ((char *) names[i]);
    lb_tensor_free (tensors[i]);
  }
  g_free (names);
  g_free (tensors);
  g_free (path);
}

static void
test_empty_dict_and_errors (void)
{
  GError *error = NULL;
  char *path = g_build_filename (tmpdir, "nothing.pth", NULL);
  g_assert_true (lingbot_pth_write (path, NULL, NULL, 0, &error));
  g_assert_no_error (error);
  check_layout (path, "nothing", 0);
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (lingbot_checkpoint_get_n_tensors (ckpt), ==, 0);
  lingbot_checkpoint_unref (ckpt);

  /* a duplicate name fails and leaves the old file alone */
  int64_t shape[1] = { 1 };
  LbTensor *t = lb_tensor_new_zeros (LB_DTYPE_F32, 1, shape);
  const char *names[2] = { "x", "x" };
  LbTensor *tensors[2] = { t, t };
  g_assert_false (lingbot_pth_write (path, names, tensors, 2, &error));
  g_assert_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  ckpt = lingbot_checkpoint_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (lingbot_checkpoint_get_n_tensors (ckpt), ==, 0);
  lingbot_checkpoint_unref (ckpt);

  /* an unwritable directory: an I/O error, nothing left behind */
  char *bad = g_build_filename (tmpdir, "no-such-dir", "x.pth", NULL);
  g_assert_false (lingbot_pth_write (bad, names, tensors, 1, &error));
  g_assert_error (error, LB_ERROR, LB_ERROR_IO);
  g_clear_error (&error);
  g_free (bad);
  lb_tensor_free (t);
  g_free (path);
}

/* torch.load() of the round-trip file gives the same names, order, dtypes,
 * shapes and values (skipped without torch in /usr/bin/python3) */
static const char torch_check[] =
    "import sys, torch\n"
    "sd = torch.load(sys.argv[1])\n"
    "assert type(sd).__name__ == 'OrderedDict', type(sd)\n"
    "specs = [('z.f32.weight', torch.float32, (3, 4)),\n"
    "  ('b.bf16.weight', torch.bfloat16, (2, 3, 5)),\n"
    "  ('m.f16.bias', torch.float16, (6,)), ('a.f64.x', torch.float64, (2,)),\n"
    "  ('k.i64.ids', torch.int64, (5,)), ('c.i32.ids', torch.int32, (2, 2)),\n"
    "  ('u8.mask', torch.uint8, (300,)), ('scalar', torch.float32, ()),\n"
    "  ('scalar.bf16', torch.bfloat16, ()), ('empty', torch.float32, (0, 3)),\n"
    "  ('empty.bf16', torch.bfloat16, (0,)),\n"
    "  ('five.d', torch.float16, (1, 2, 1, 3, 2))]\n"
    "assert list(sd.keys()) == [s[0] for s in specs] + ['transposed'], "
    "list(sd.keys())\n"
    "for k, (name, dt, shape) in enumerate(specs):\n"
    "    t = sd[name]\n"
    "    assert t.dtype == dt and tuple(t.shape) == shape, (name, t.dtype, "
    "t.shape)\n"
    "    i = torch.arange(t.numel(), dtype=torch.float64)\n"
    "    if dt == torch.uint8: ref = (i * 7 + k) % 256\n"
    "    elif dt in (torch.int32, torch.int64): ref = i * 3 - 5 - k\n"
    "    else: ref = ((i % 64) - 16 + k) * 0.25\n"
    "    assert torch.equal(t.double().reshape(-1), ref), name\n"
    "    assert not t.requires_grad\n"
    "ref = (torch.arange(6, dtype=torch.float32).reshape(2, 3) + 100).t()\n"
    "assert torch.equal(sd['transposed'], ref)\n"
    "print('torch.load ok', torch.__version__)\n";

static void
test_torch_load (void)
{
  const char *py = "/usr/bin/python3";
  int status = 1;
  const char *probe[] = { py, "-c", "import torch", NULL };
  if (!g_file_test (py, G_FILE_TEST_IS_EXECUTABLE) ||
      !g_spawn_sync (NULL, (char **) probe, NULL, G_SPAWN_STDOUT_TO_DEV_NULL |
          G_SPAWN_STDERR_TO_DEV_NULL, NULL, NULL, NULL, NULL, &status, NULL) ||
      !g_spawn_check_wait_status (status, NULL)) {
    g_test_skip ("/usr/bin/python3 has no torch");
    return;
  }
  LbTensor *base;
  char *path = write_specs ("for_torch.pth", &base);
  lb_tensor_free (base);
  const char *argv[] = { py, "-c", torch_check, path, NULL };
  char *out = NULL, *err = NULL;
  GError *error = NULL;
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_DEFAULT,
          NULL, NULL, &out, &err, &status, &error));
  g_assert_no_error (error);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("torch.load check failed:\n%s%s", out, err);
  g_test_message ("%s", out);
  g_free (out);
  g_free (err);
  g_free (path);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  tmpdir = g_dir_make_tmp ("lingbot-pth-write-XXXXXX", NULL);
  g_assert_nonnull (tmpdir);
  g_test_add_func ("/pth-write/round-trip", test_round_trip);
  g_test_add_func ("/pth-write/many", test_many);
  g_test_add_func ("/pth-write/empty-and-errors", test_empty_dict_and_errors);
  g_test_add_func ("/pth-write/torch-load", test_torch_load);
  int ret = g_test_run ();

  GDir *d = g_dir_open (tmpdir, 0, NULL);
  const char *e;
  while (d && (e = g_dir_read_name (d)) != NULL) {
    char *p = g_build_filename (tmpdir, e, NULL);
    g_unlink (p);
    g_free (p);
  }
  if (d)
    g_dir_close (d);
  g_rmdir (tmpdir);
  g_free (tmpdir);
  return ret;
}

/* Unit tests: text encoder loading (missing / misshapen tensors, bf16
 * weights), prompt-embeds files, and the once-per-session context with the
 * t5_tiny weights and the build-time SentencePiece model.
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * argv[1]: the .model file built by spm_train, argv[2]: the t5_tiny
 * weights as a bf16 .pth (make-t5-pth.py), both built by
 * tests/text/meson.build.
 */
#include "lingbot/text-encoder.h"
#include "kernels/error.h"

#include <math.h>
#include <omp.h>
#include <string.h>
#include <glib/gstdio.h>

static const char *model_path;
static const char *pth_path;
static char *t5_path;
static char *tmpdir;
static LbStream *stream;

static char *
tmp_path (const char *name)
{
  return g_build_filename (tmpdir, name, NULL);
}

static char *
find_t5 (void)
{
  const char *root = g_getenv ("LINGBOT_SOURCE_ROOT");
  char *p = g_build_filename (root ? root : ".", "tests", "data", "golden",
      "t5_tiny.safetensors", NULL);
  if (g_file_test (p, G_FILE_TEST_IS_REGULAR))
    return p;
  g_free (p);
  return NULL;
}

static double
max_rel (const LbTensor * a, const LbTensor * b)
{
  g_assert_cmpint (lb_tensor_numel (a), ==, lb_tensor_numel (b));
  double md = 0, mb = 0;
  for (int64_t i = 0; i < lb_tensor_numel (a); i++) {
    double x = lb_tensor_get_flat (a, i), y = lb_tensor_get_flat (b, i);
    md = MAX (md, fabs (x - y));
    mb = MAX (mb, fabs (y));
  }
  return mb > 0 ? md / mb : md;
}

/* Copies the t5_tiny weights into @name, dropping @drop, transposing
 * @transpose and converting every weight to @dtype. */
static char *
write_variant (const char *name, const char *drop, const char *transpose,
    LbDType dtype)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotCheckpoint) ck = lingbot_checkpoint_open (t5_path, &err);
  g_assert_no_error (err);
  guint n = 0;
  const char *const *names = lingbot_checkpoint_list_tensors (ck, &n);
  GPtrArray *keep_names = g_ptr_array_new ();
  GPtrArray *keep = g_ptr_array_new_with_free_func ((GDestroyNotify)
      lb_tensor_free);
  for (guint i = 0; i < n; i++) {
    if (!g_str_has_prefix (names[i], "blocks.") &&
        !g_str_has_suffix (names[i], "weight"))
      continue;
    if (drop && strcmp (names[i], drop) == 0)
      continue;
    const LbTensor *t = lingbot_checkpoint_get (ck, names[i], &err);
    g_assert_no_error (err);
    LbTensor *c;
    if (transpose && strcmp (names[i], transpose) == 0) {
      LbTensor v;
      g_assert_true (lb_tensor_view_permute (&v, t, (int[]) { 1, 0 }));
      int64_t shape[2] = { v.shape[0], v.shape[1] };
      c = lb_tensor_new (dtype, 2, shape);
      g_assert_true (lb_tensor_copy_into (c, &v, &err));
    } else {
      c = lb_tensor_new (dtype, t->ndim, t->shape);
      g_assert_true (lb_tensor_copy_into (c, t, &err));
    }
    g_ptr_array_add (keep_names, (gpointer) names[i]);
    g_ptr_array_add (keep, c);
  }
  char *path = tmp_path (name);
  g_assert_true (lingbot_safetensors_write (path,
          (const char *const *) keep_names->pdata,
          (const LbTensor * const *) keep->pdata, keep->len, NULL, &err));
  g_assert_no_error (err);
  g_ptr_array_unref (keep_names);
  g_ptr_array_unref (keep);
  return path;
}

static void
test_load_errors (void)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *p1 = write_variant ("missing.safetensors",
      "blocks.1.ffn.fc2.weight", NULL, LB_DTYPE_F32);
  g_assert_null (lingbot_text_encoder_load (p1, stream, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (err->message, "blocks.1.ffn.fc2.weight"));
  g_clear_error (&err);

  g_autofree char *p2 = write_variant ("shape.safetensors", NULL,
      "blocks.0.ffn.fc1.weight", LB_DTYPE_F32);
  g_assert_null (lingbot_text_encoder_load (p2, stream, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_test_message ("%s", err->message);
  g_assert_nonnull (strstr (err->message, "blocks.0.ffn.fc1.weight"));
  g_clear_error (&err);

  g_autofree char *p3 = write_variant ("shape2.safetensors", NULL,
      "blocks.1.ffn.fc2.weight", LB_DTYPE_F32);
  g_assert_null (lingbot_text_encoder_load (p3, stream, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_nonnull (strstr (err->message, "blocks.1.ffn.fc2.weight"));
  g_clear_error (&err);

  g_autofree char *p4 = write_variant ("nonorm.safetensors", "norm.weight",
      NULL, LB_DTYPE_F32);
  g_assert_null (lingbot_text_encoder_load (p4, stream, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (err->message, "norm.weight"));
  g_clear_error (&err);

  g_assert_null (lingbot_text_encoder_load ("/nonexistent.pth", stream, &err));
  g_assert_nonnull (err);
  g_unlink (p1);
  g_unlink (p2);
  g_unlink (p3);
  g_unlink (p4);
}

static void
test_bf16_weights (void)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *p = write_variant ("bf16.safetensors", NULL, NULL,
      LB_DTYPE_BF16);
  g_autoptr (LingbotTextEncoder) e16 = lingbot_text_encoder_load (p, stream,
      &err);
  g_assert_no_error (err);
  g_autoptr (LingbotTextEncoder) e32 = lingbot_text_encoder_load (t5_path,
      stream, &err);
  g_assert_no_error (err);
  int32_t ids[16] = { 17, 250, 3, 999, 42, 7, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0 };
  uint8_t mask[16] = { 1, 1, 1, 1, 1, 1, 1 };
  g_autoptr (LbTensor) a = lingbot_text_encoder_encode_ids (e16, ids, mask,
      16, &err);
  g_assert_no_error (err);
  g_autoptr (LbTensor) b = lingbot_text_encoder_encode_ids (e32, ids, mask,
      16, &err);
  g_assert_no_error (err);
  double e = max_rel (a, b);
  g_test_message ("bf16 vs f32 weights: max rel %.3e", e);
  g_assert_cmpfloat (e, <, 5e-2);
  g_assert_cmpfloat (e, >, 0.0);

  /* the same bf16 weights from a torch.save() .pth (published layout):
   * bit-identical output */
  g_autoptr (LingbotTextEncoder) epth = lingbot_text_encoder_load (pth_path,
      stream, &err);
  g_assert_no_error (err);
  g_autoptr (LbTensor) c = lingbot_text_encoder_encode_ids (epth, ids, mask,
      16, &err);
  g_assert_no_error (err);
  g_assert_cmpfloat (max_rel (c, a), ==, 0.0);
  g_unlink (p);
}

/* The encoder's output does not depend on the OpenMP thread count
 * (docs/design.md "Determinism"): a prompt of 512 tokens (the served
 * length, so the GEMMs and attention split into several bands) encoded
 * with 1, 2 and 3 threads gives the same bytes. */
static void
test_threads (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotTextEncoder) e = lingbot_text_encoder_load (t5_path,
      stream, &err);
  g_assert_no_error (err);
  enum
  { N = 512 };
  int32_t ids[N];
  uint8_t mask[N];
  for (int i = 0; i < N; i++) {
    ids[i] = (int32_t) ((i * 7919 + 13) % 1000);
    mask[i] = i < 300;          /* padding after 300 tokens, as served */
  }
  const int saved = omp_get_max_threads ();
  LbTensor *out[3] = { NULL };
  for (int t = 1; t <= 3; t++) {
    omp_set_num_threads (t);
    out[t - 1] = lingbot_text_encoder_encode_ids (e, ids, mask, N, &err);
    g_assert_no_error (err);
  }
  omp_set_num_threads (saved);
  for (int t = 1; t < 3; t++) {
    g_assert_cmpint (lb_tensor_nbytes (out[t]), ==, lb_tensor_nbytes (out[0]));
    g_assert_cmpmem (out[t]->data, lb_tensor_nbytes (out[t]), out[0]->data,
        lb_tensor_nbytes (out[0]));
  }
  for (int t = 0; t < 3; t++)
    lb_tensor_free (out[t]);
}

static LbTensor *
random_context (LbDType dtype, int ndim, int64_t n, int64_t dim)
{
  int64_t shape3[3] = { 1, n, dim }, shape2[2] = { n, dim };
  LbTensor *t = lb_tensor_new (dtype, ndim, ndim == 3 ? shape3 : shape2);
  GRand *r = g_rand_new_with_seed (7);
  for (int64_t i = 0; i < n * dim; i++)
    lb_tensor_set_flat (t, i, g_rand_double_range (r, -3, 3));
  g_rand_free (r);
  return t;
}

static void
test_prompt_embeds_roundtrip (void)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *p = tmp_path ("embeds.safetensors");
  g_autoptr (LbTensor) ctx = random_context (LB_DTYPE_F32, 2, 512, 64);
  g_assert_true (lingbot_prompt_embeds_save (p, ctx, "a fox on a lake", 9,
          &err));
  g_assert_no_error (err);
  g_autoptr (LbTensor) back = lingbot_prompt_embeds_load (p, 512, 64, &err);
  g_assert_no_error (err);
  g_assert_true (back->dtype == LB_DTYPE_F32);
  g_assert_true (lb_tensor_has_shape (back, 2, (int64_t) 512, (int64_t) 64));
  g_assert_cmpmem (back->data, 512 * 64 * 4, ctx->data, 512 * 64 * 4);

  g_autoptr (LingbotCheckpoint) ck = lingbot_checkpoint_open (p, &err);
  g_assert_no_error (err);
  g_assert_cmpstr (lingbot_checkpoint_get_metadata_value (ck,
          "lingbot.prompt"), ==, "a fox on a lake");
  g_assert_cmpstr (lingbot_checkpoint_get_metadata_value (ck,
          "lingbot.n_tokens"), ==, "9");

  /* as the session context */
  g_autoptr (LbTensor) sess = lingbot_prompt_context_new (stream, p, NULL,
      NULL, "ignored", 64, &err);
  g_assert_no_error (err);
  g_assert_cmpmem (sess->data, 512 * 64 * 4, ctx->data, 512 * 64 * 4);

  /* any length is accepted when seq_len is 0 */
  g_autoptr (LbTensor) any = lingbot_prompt_embeds_load (p, 0, 0, &err);
  g_assert_no_error (err);

  /* [1, n, dim] bf16 is accepted and widened */
  g_autofree char *p16 = tmp_path ("embeds16.safetensors");
  g_autoptr (LbTensor) c16 = random_context (LB_DTYPE_BF16, 3, 20, 64);
  g_assert_true (lingbot_prompt_embeds_save (p16, c16, NULL, 0, &err));
  g_autoptr (LbTensor) b16 = lingbot_prompt_embeds_load (p16, 20, 64, &err);
  g_assert_no_error (err);
  g_assert_cmpfloat (max_rel (b16, c16), ==, 0.0);
  g_unlink (p);
  g_unlink (p16);
}

static void
test_prompt_embeds_errors (void)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *p = tmp_path ("embeds-bad.safetensors");
  g_autoptr (LbTensor) ctx = random_context (LB_DTYPE_F32, 2, 512, 32);
  g_assert_true (lingbot_prompt_embeds_save (p, ctx, NULL, 0, &err));

  /* wrong width */
  g_assert_null (lingbot_prompt_embeds_load (p, 512, 64, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_nonnull (strstr (err->message, "prompt_embeds"));
  g_assert_nonnull (strstr (err->message, "[512, 64]"));
  g_assert_nonnull (strstr (err->message, "[512, 32]"));        /* both widths */
  g_clear_error (&err);
  g_assert_null (lingbot_prompt_context_new (stream, p, NULL, NULL, NULL, 64,
          &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_clear_error (&err);
  /* wrong length */
  g_assert_null (lingbot_prompt_embeds_load (p, 77, 0, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_clear_error (&err);

  /* missing tensor: a file with another name in it */
  g_autofree char *q = tmp_path ("embeds-other.safetensors");
  const char *names[1] = { "context" };
  const LbTensor *ts[1] = { ctx };
  g_assert_true (lingbot_safetensors_write (q, names, ts, 1, NULL, &err));
  g_assert_null (lingbot_prompt_embeds_load (q, 0, 0, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (err->message, "prompt_embeds"));
  g_clear_error (&err);

  /* a 1-D tensor under the right name */
  g_autoptr (LbTensor) flat = lb_tensor_new_zeros (LB_DTYPE_F32, 1,
      (int64_t[]) { 64 });
  const LbTensor *fs[1] = { flat };
  names[0] = LINGBOT_PROMPT_EMBEDS_TENSOR;
  g_assert_true (lingbot_safetensors_write (q, names, fs, 1, NULL, &err));
  g_assert_null (lingbot_prompt_embeds_load (q, 0, 0, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_nonnull (strstr (err->message, "prompt_embeds"));
  g_clear_error (&err);

  /* missing file; nothing given */
  g_assert_null (lingbot_prompt_embeds_load ("/nonexistent.safetensors", 0,
          0, &err));
  g_assert_nonnull (err);
  g_clear_error (&err);
  g_assert_null (lingbot_prompt_context_new (stream, NULL, NULL, NULL, "x", 0,
          &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_unlink (p);
  g_unlink (q);
}

/* tokenizer + t5_tiny end to end: the session context equals a full
 * 512-position pass with the padded rows zeroed */
static void
test_session_context (void)
{
  g_autoptr (GError) err = NULL;
  const char *prompt =
      "  A red fox walks along a frozen lake, 一座古老的石桥 🎉 ";
  g_autoptr (LbTensor) ctx =
      lingbot_prompt_context_new (stream, NULL, t5_path, model_path, prompt, 64,
      &err);
  g_assert_no_error (err);
  g_assert_true (lb_tensor_has_shape (ctx, 2, (int64_t) 512, (int64_t) 64));

  g_autoptr (LingbotTokenizer) tok = lingbot_tokenizer_new (model_path, &err);
  g_assert_no_error (err);
  g_autoptr (LingbotTextEncoder) enc = lingbot_text_encoder_load (t5_path,
      stream, &err);
  g_assert_no_error (err);
  int32_t ids[512];
  uint8_t mask[512];
  int n = lingbot_tokenizer_encode (tok, prompt, 512, ids, mask, &err);
  g_assert_cmpint (n, >, 10);
  g_autoptr (LbTensor) full = lb_tensor_new (LB_DTYPE_F32, 2,
      (int64_t[]) { 512, 64 });
  g_assert_true (lingbot_text_encoder_forward (enc, ids, mask, 512, full,
          NULL, &err));
  memset ((float *) full->data + n * 64, 0, (512 - n) * 64 * 4);
  double e = max_rel (ctx, full);
  g_test_message ("prefix pass vs full pass: max rel %.3e", e);
  g_assert_cmpfloat (e, <=, 1e-5);
  for (int64_t i = (int64_t) n * 64; i < 512 * 64; i++)
    g_assert_true (((float *) ctx->data)[i] == 0.0f);

  /* empty prompt: just </s> */
  g_autoptr (LbTensor) empty = lingbot_text_encoder_encode_prompt (enc, tok,
      NULL, &err);
  g_assert_no_error (err);
  for (int64_t i = 64; i < 512 * 64; i++)
    g_assert_true (((float *) empty->data)[i] == 0.0f);

  /* wrong width requested */
  g_assert_null (lingbot_prompt_context_new (stream, NULL, t5_path,
          model_path, prompt, 4096, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (argc < 3) {
    g_printerr ("usage: test-text-encoder SPM-MODEL T5-BF16-PTH\n");
    return 1;
  }
  model_path = argv[1];
  pth_path = argv[2];
  t5_path = find_t5 ();
  if (t5_path == NULL) {
    g_print ("1..0 # SKIP tests/data/golden/t5_tiny.safetensors missing\n");
    return 77;
  }
  g_autoptr (GError) err = NULL;
  tmpdir = g_dir_make_tmp ("lingbot-text-XXXXXX", &err);
  g_assert_no_error (err);
  LbBackend *be = lb_cpu_backend ();
  stream = be->stream_new (be, 0, &err);
  g_assert_no_error (err);

  g_test_add_func ("/text/encoder/load-errors", test_load_errors);
  g_test_add_func ("/text/encoder/bf16-weights", test_bf16_weights);
  g_test_add_func ("/text/encoder/threads", test_threads);
  g_test_add_func ("/text/prompt-embeds/roundtrip",
      test_prompt_embeds_roundtrip);
  g_test_add_func ("/text/prompt-embeds/errors", test_prompt_embeds_errors);
  g_test_add_func ("/text/encoder/session-context", test_session_context);
  int rc = g_test_run ();
  be->stream_free (stream);
  g_rmdir (tmpdir);
  g_free (tmpdir);
  g_free (t5_path);
  return rc;
}

/* Golden test: umT5 encoder against t5_tiny.safetensors (golden README 2).
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Checks the relative-bucket table, the block-0 position bias row, both
 * block outputs, the final encoder output and the pipeline's prompt_emb
 * (padded rows zeroed) within max|c - g| <= 1e-4 * max|g|.
 */
#include "lingbot/text-encoder.h"
#include "kernels/error.h"

#include <math.h>
#include <string.h>

#define TOL 1e-4

static LingbotCheckpoint *fixture;
static LbStream *stream;

static char *
fixture_path (void)
{
  const char *root = g_getenv ("LINGBOT_SOURCE_ROOT");
  char *p = g_build_filename (root ? root : ".", "tests", "data", "golden",
      "t5_tiny.safetensors", NULL);
  if (g_file_test (p, G_FILE_TEST_IS_REGULAR))
    return p;
  g_free (p);
  const char *shared = g_getenv ("LINGBOT_SHARED_DIR");
  if (shared) {
    p = g_build_filename (shared, "golden", "t5_tiny.safetensors", NULL);
    if (g_file_test (p, G_FILE_TEST_IS_REGULAR))
      return p;
    g_free (p);
  }
  return NULL;
}

static const LbTensor *
get (const char *name)
{
  g_autoptr (GError) err = NULL;
  const LbTensor *t = lingbot_checkpoint_get (fixture, name, &err);
  g_assert_no_error (err);
  return t;
}

/* max|c - g| / max|g| over @n elements of float arrays */
static double
rel_err (const float *c, const LbTensor * golden, int64_t n)
{
  g_assert_cmpint (lb_tensor_numel (golden), ==, n);
  g_assert_true (golden->dtype == LB_DTYPE_F32);
  const float *g = golden->data;
  double md = 0, mg = 0;
  for (int64_t i = 0; i < n; i++) {
    md = MAX (md, fabs ((double) c[i] - g[i]));
    mg = MAX (mg, fabs ((double) g[i]));
  }
  return mg > 0 ? md / mg : md;
}

static void
report (const char *what, double e)
{
  g_print ("# %-22s max rel error %.3e (tolerance %.0e)\n", what, e, TOL);
  g_assert_cmpfloat (e, <=, TOL);
}

static void
input_ids (int32_t * ids, uint8_t * mask, int *n)
{
  const LbTensor *ti = get ("input.ids"), *tm = get ("input.mask");
  *n = 0;
  for (int i = 0; i < 512; i++) {
    ids[i] = (int32_t) lb_tensor_get_flat (ti, i);
    mask[i] = lb_tensor_get_flat (tm, i) != 0;
    *n += mask[i];
  }
}

static void
test_rel_bucket (void)
{
  const LbTensor *rp = get ("trace.rel_pos"), *rb = get ("trace.rel_bucket");
  int64_t n = lb_tensor_numel (rp);
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t r = (int64_t) lb_tensor_get_flat (rp, i);
    int want = (int) lb_tensor_get_flat (rb, i);
    int got = lingbot_t5_relative_bucket (r, 32, 128);
    if (got != want) {
      g_test_message ("rel %" G_GINT64_FORMAT ": bucket %d, golden %d", r,
          got, want);
      bad++;
    }
  }
  g_assert_cmpint (bad, ==, 0);
}

static void
test_pos_bias_row0 (void)
{
  /* bias[h, 0, j] = pos[bucket(j - 0), h] */
  const LbTensor *pos = get ("blocks.0.pos_embedding.embedding.weight");
  const LbTensor *gold = get ("trace.block0_pos_bias");
  int H = (int) pos->shape[1];
  g_autofree float *c = g_new (float, H * 512);
  for (int h = 0; h < H; h++)
    for (int j = 0; j < 512; j++) {
      int64_t idx[2] = { lingbot_t5_relative_bucket (j, 32, 128), h };
      c[h * 512 + j] = (float) lb_tensor_get (pos, idx);
    }
  report ("block0_pos_bias", rel_err (c, gold, H * 512));
}

static void
test_config (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotTextEncoder) enc = lingbot_text_encoder_new (fixture,
      stream, &err);
  g_assert_no_error (err);
  const LingbotTextEncoderConfig *c = lingbot_text_encoder_get_config (enc);
  g_assert_cmpint (c->vocab, ==, 1000);
  g_assert_cmpint (c->dim, ==, 64);
  g_assert_cmpint (c->dim_attn, ==, 64);
  g_assert_cmpint (c->dim_ffn, ==, 160);
  g_assert_cmpint (c->num_heads, ==, 4);
  g_assert_cmpint (c->num_layers, ==, 2);
  g_assert_cmpint (c->num_buckets, ==, 32);
}

static void
test_forward (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotTextEncoder) enc = lingbot_text_encoder_new (fixture,
      stream, &err);
  g_assert_no_error (err);
  int32_t ids[512];
  uint8_t mask[512];
  int n;
  input_ids (ids, mask, &n);
  g_assert_cmpint (n, ==, 10);

  g_autoptr (LbTensor) out = lb_tensor_new (LB_DTYPE_F32, 2,
      (int64_t[]) { 512, 64 });
  g_autoptr (LbTensor) b0 = lb_tensor_new (LB_DTYPE_F32, 2,
      (int64_t[]) { 512, 64 });
  g_autoptr (LbTensor) b1 = lb_tensor_new (LB_DTYPE_F32, 2,
      (int64_t[]) { 512, 64 });
  LbTensor *blocks[2] = { b0, b1 };
  g_assert_true (lingbot_text_encoder_forward (enc, ids, mask, 512, out,
          blocks, &err));
  g_assert_no_error (err);
  report ("trace.block0_out", rel_err (b0->data, get ("trace.block0_out"),
          512 * 64));
  report ("trace.block1_out", rel_err (b1->data, get ("trace.block1_out"),
          512 * 64));
  report ("output.encoder_out", rel_err (out->data,
          get ("output.encoder_out"), 512 * 64));

  /* the pipeline's zeroing applied to the full pass */
  float *o = out->data;
  memset (o + n * 64, 0, (512 - n) * 64 * sizeof (float));
  report ("prompt_emb (full pass)", rel_err (o, get ("output.prompt_emb"),
          512 * 64));
}

static void
test_prompt_emb (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotTextEncoder) enc = lingbot_text_encoder_new (fixture,
      stream, &err);
  g_assert_no_error (err);
  int32_t ids[512];
  uint8_t mask[512];
  int n;
  input_ids (ids, mask, &n);
  g_autoptr (LbTensor) ctx = lingbot_text_encoder_encode_ids (enc, ids, mask,
      512, &err);
  g_assert_no_error (err);
  g_assert_true (lb_tensor_has_shape (ctx, 2, (int64_t) 512, (int64_t) 64));
  const float *c = ctx->data;
  report ("output.prompt_emb", rel_err (c, get ("output.prompt_emb"),
          512 * 64));
  for (int64_t i = (int64_t) n * 64; i < 512 * 64; i++)
    g_assert_true (c[i] == 0.0f);
}

static void
test_bad_ids (void)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotTextEncoder) enc = lingbot_text_encoder_new (fixture,
      stream, &err);
  g_assert_no_error (err);
  int32_t ids[4] = { 5, 1000, 1, 0 };
  uint8_t mask[4] = { 1, 1, 1, 0 };
  g_assert_null (lingbot_text_encoder_encode_ids (enc, ids, mask, 4, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (err->message, "1000"));
  g_clear_error (&err);
  uint8_t holes[4] = { 1, 0, 1, 0 };
  ids[1] = 7;
  g_assert_null (lingbot_text_encoder_encode_ids (enc, ids, holes, 4, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autofree char *path = fixture_path ();
  if (path == NULL) {
    g_print ("1..0 # SKIP t5_tiny.safetensors not found\n");
    return 77;
  }
  g_autoptr (GError) err = NULL;
  fixture = lingbot_checkpoint_open (path, &err);
  g_assert_no_error (err);
  LbBackend *be = lb_cpu_backend ();
  stream = be->stream_new (be, 0, &err);
  g_assert_no_error (err);

  g_test_add_func ("/text/t5-golden/rel-bucket", test_rel_bucket);
  g_test_add_func ("/text/t5-golden/pos-bias-row0", test_pos_bias_row0);
  g_test_add_func ("/text/t5-golden/config", test_config);
  g_test_add_func ("/text/t5-golden/forward", test_forward);
  g_test_add_func ("/text/t5-golden/prompt-emb", test_prompt_emb);
  g_test_add_func ("/text/t5-golden/bad-ids", test_bad_ids);
  int rc = g_test_run ();
  be->stream_free (stream);
  lingbot_checkpoint_unref (fixture);
  return rc;
}

/* lingbot-gst: DiT configuration, loading errors, random checkpoints,
 * Ulysses rank checks
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/error.h"
#include "comm/worker-group.h"
#include "lingbot/dit.h"
#include "lingbot/dit-session.h"
#include "lingbot/noise.h"

static char *tmpdir;

static void
rm_rf (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR)) {
    GDir *d = g_dir_open (path, 0, NULL);
    const char *n;
    while (d && (n = g_dir_read_name (d))) {
      g_autofree char *p = g_build_filename (path, n, NULL);
      rm_rf (p);
    }
    if (d)
      g_dir_close (d);
    g_rmdir (path);
  } else {
    g_unlink (path);
  }
}

static void
tiny_config (LingbotDitConfig * cfg)
{
  lingbot_dit_config_init_preset (cfg, LINGBOT_DIT_PRESET_TINY);
}

/* Writes the tiny model as one f32 safetensors file, with @mutate applied
 * to the tensor list (drop / replace), and returns its path. */
typedef void (*Mutate) (GPtrArray * names, GPtrArray * tensors);

static char *
write_single (const char *file, Mutate mutate)
{
  LingbotDitConfig cfg;
  tiny_config (&cfg);
  g_autoptr (GPtrArray) names = lingbot_dit_weight_names (&cfg);
  g_autoptr (GPtrArray) tensors =
      g_ptr_array_new_with_free_func ((GDestroyNotify) lb_tensor_free);
  for (guint i = 0; i < names->len; i++)
    g_ptr_array_add (tensors, lingbot_dit_random_weight (&cfg,
            names->pdata[i], LB_DTYPE_F32, 7));
  if (mutate)
    mutate (names, tensors);
  char *path = g_build_filename (tmpdir, file, NULL);
  g_autoptr (GHashTable) meta = g_hash_table_new (g_str_hash, g_str_equal);
  g_autofree char *json = lingbot_dit_config_to_json (&cfg);
  g_hash_table_insert (meta, (gpointer) "config", json);
  g_autoptr (GError) err = NULL;
  g_assert_true (lingbot_safetensors_write (path,
          (const char *const *) names->pdata,
          (const LbTensor * const *) tensors->pdata, names->len, meta, &err));
  g_assert_no_error (err);
  return path;
}

static int
find (GPtrArray * names, const char *name)
{
  for (guint i = 0; i < names->len; i++)
    if (strcmp (names->pdata[i], name) == 0)
      return (int) i;
  g_assert_not_reached ();
  return -1;
}

static void
drop_ffn_bias (GPtrArray * names, GPtrArray * tensors)
{
  int i = find (names, "blocks.1.ffn.2.bias");
  g_ptr_array_remove_index (names, i);
  g_ptr_array_remove_index (tensors, i);
}

static void
bad_shape (GPtrArray * names, GPtrArray * tensors)
{
  int i = find (names, "blocks.0.self_attn.q.weight");
  lb_tensor_free (g_ptr_array_index (tensors, i));
  g_ptr_array_index (tensors, i) = lb_tensor_new_f32 (2, (int64_t) 64,
      (int64_t) 32);
}

static void
nan_weight (GPtrArray * names, GPtrArray * tensors)
{
  int i = find (names, "blocks.1.cam_scale_layer.weight");
  LbTensor *t = g_ptr_array_index (tensors, i);
  ((float *) t->data)[77] = NAN;
}

static void
extra_tensor (GPtrArray * names, GPtrArray * tensors)
{
  g_ptr_array_add (names, g_strdup ("blocks.0.k_img.weight"));
  g_ptr_array_add (tensors, lb_tensor_new_f32 (1, (int64_t) 4));
}

static void
test_load_ok (void)
{
  g_autofree char *path = write_single ("ok.safetensors", NULL);
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotDit) dit = lingbot_dit_load (path,
      LINGBOT_DIT_LOAD_STRICT, &err);
  g_assert_no_error (err);
  const LingbotDitConfig *c = lingbot_dit_get_config (dit);
  g_assert_cmpint (c->dim, ==, 64);
  g_assert_cmpint (c->num_heads, ==, 2);
  g_assert_cmpint (c->num_layers, ==, 2);
  g_assert_cmpint (c->ffn_dim, ==, 128);
  g_assert_cmpint (c->text_dim, ==, 32);
  g_assert_cmpint (c->in_dim, ==, 36);
  g_assert_cmpint (c->out_dim, ==, 16);
  g_assert_cmpint (c->control_in_features, ==, 1536);
  g_assert_cmpint (c->local_attn_frames, ==, 6);
  g_assert_cmpint (c->sink_frames, ==, 2);
  g_assert_cmpint (c->chunk_frames, ==, 2);
  const LbTensor *pe = lingbot_dit_get_weight (dit, "patch_embedding.weight");
  g_assert_true (lb_tensor_has_shape (pe, 2, (int64_t) 64, (int64_t) 144));
}

static void
test_load_missing (void)
{
  g_autofree char *path = write_single ("missing.safetensors", drop_ffn_bias);
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotDit) dit = lingbot_dit_load (path, 0, &err);
  g_assert_null (dit);
  g_assert_error (err, LB_ERROR, LB_ERROR_NOT_FOUND);
  g_autofree char *want = g_strdup_printf ("DiT checkpoint %s: tensor "
      "blocks.1.ffn.2.bias is missing", path);
  g_assert_cmpstr (err->message, ==, want);
}

static void
test_load_bad_shape (void)
{
  g_autofree char *path = write_single ("shape.safetensors", bad_shape);
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotDit) dit = lingbot_dit_load (path, 0, &err);
  g_assert_null (dit);
  g_assert_error (err, LB_ERROR, LB_ERROR_SHAPE);
  g_autofree char *want = g_strdup_printf ("DiT checkpoint %s: tensor "
      "blocks.0.self_attn.q.weight has shape [64, 32], expected [64, 64]",
      path);
  g_assert_cmpstr (err->message, ==, want);
}

static void
test_load_nan (void)
{
  g_autofree char *path = write_single ("nan.safetensors", nan_weight);
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotDit) dit = lingbot_dit_load (path, 0, &err);
  g_assert_null (dit);
  g_assert_error (err, LB_ERROR, LB_ERROR_FORMAT);
  g_autofree char *want = g_strdup_printf ("DiT checkpoint %s: tensor "
      "blocks.1.cam_scale_layer.weight has a non-finite value (NaN) at "
      "element 77", path);
  g_assert_cmpstr (err->message, ==, want);
  /* the check can be skipped */
  g_clear_error (&err);
  g_autoptr (LingbotDit) d2 = lingbot_dit_load (path,
      LINGBOT_DIT_LOAD_NO_NAN_CHECK, &err);
  g_assert_no_error (err);
  g_assert_nonnull (d2);
}

static void
test_load_strict (void)
{
  g_autofree char *path = write_single ("extra.safetensors", extra_tensor);
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotDit) dit = lingbot_dit_load (path, 0, &err);
  g_assert_no_error (err);
  g_autoptr (LingbotDit) d2 = lingbot_dit_load (path, LINGBOT_DIT_LOAD_STRICT,
      &err);
  g_assert_null (d2);
  g_assert_error (err, LB_ERROR, LB_ERROR_FORMAT);
  g_autofree char *want = g_strdup_printf ("DiT checkpoint %s: unexpected "
      "tensor blocks.0.k_img.weight", path);
  g_assert_cmpstr (err->message, ==, want);
}

static void
test_params (void)
{
  LingbotDitConfig c;
  lingbot_dit_config_init_preset (&c, LINGBOT_DIT_PRESET_14B);
  g_assert_cmpuint (lingbot_dit_config_n_params (&c), ==, 18544332864ull);
  g_assert_cmpstr (lingbot_dit_config_variant (&c), ==, "14b");
  g_autoptr (GPtrArray) names = lingbot_dit_weight_names (&c);
  g_assert_cmpuint (names->len, ==, 1421);
  lingbot_dit_config_init_preset (&c, LINGBOT_DIT_PRESET_1_3B);
  g_assert_cmpuint (lingbot_dit_config_n_params (&c), ==, 1709502016ull);
  g_assert_cmpstr (lingbot_dit_config_variant (&c), ==, "1.3b");
  g_assert_cmpint (lingbot_dit_config_head_dim (&c), ==, 128);
}

/* The 14B / 1.3B block structure (layers, heads, 35 tensors per block, 8
 * bf16 shards) at small widths, through lingbot_dit_write_random() (what
 * lingbot-mkmodel runs) and back through lingbot_dit_load(). */
static void
check_structure (LingbotDitPreset preset, int dim, int ffn, guint shards)
{
  LingbotDitConfig c, ref;
  lingbot_dit_config_init_preset (&c, preset);
  ref = c;
  c.dim = dim;
  c.ffn_dim = ffn;
  c.text_dim = 64;
  g_autofree char *dir = g_build_filename (tmpdir,
      preset == LINGBOT_DIT_PRESET_14B ? "m14b" : "m13b", "transformers",
      NULL);
  g_autoptr (GError) err = NULL;
  g_assert_true (lingbot_dit_write_random (&c, dir, shards, LB_DTYPE_BF16, 1,
          &err));
  g_assert_no_error (err);
  for (guint s = 1; s <= shards; s++) {
    g_autofree char *f = g_strdup_printf ("model-%05u-of-%05u.safetensors", s,
        shards);
    g_autofree char *p = g_build_filename (dir, f, NULL);
    g_assert_true (g_file_test (p, G_FILE_TEST_IS_REGULAR));
  }
  g_autofree char *idx = g_build_filename (dir, "model.safetensors.index.json",
      NULL);
  g_assert_true (g_file_test (idx, G_FILE_TEST_IS_REGULAR));

  /* published bf16 keys */
  g_autoptr (LingbotCheckpoint) ck = lingbot_checkpoint_open (dir, &err);
  g_assert_no_error (err);
  g_assert_cmpuint (lingbot_checkpoint_get_n_tensors (ck), ==,
      21 + 35 * ref.num_layers);
  const LbTensor *t = lingbot_checkpoint_get (ck,
      "blocks.3.cam_shift_layer.weight", &err);
  g_assert_no_error (err);
  g_assert_cmpint (t->dtype, ==, LB_DTYPE_BF16);

  /* load through the release directory (parent of transformers/) */
  g_autofree char *parent = g_path_get_dirname (dir);
  g_autoptr (LingbotDit) dit = lingbot_dit_load (parent,
      LINGBOT_DIT_LOAD_STRICT, &err);
  g_assert_no_error (err);
  const LingbotDitConfig *lc = lingbot_dit_get_config (dit);
  g_assert_cmpint (lc->num_layers, ==, ref.num_layers);
  g_assert_cmpint (lc->num_heads, ==, ref.num_heads);
  g_assert_cmpint (lc->dim, ==, dim);
  g_assert_cmpint (lc->ffn_dim, ==, ffn);
  g_assert_cmpint (lc->local_attn_frames, ==, 18);
  g_assert_cmpint (lc->sink_frames, ==, 6);
  g_assert_cmpint (lc->chunk_frames, ==, 4);
  /* bf16 widened exactly */
  const LbTensor *w = lingbot_dit_get_weight (dit,
      "blocks.3.cam_shift_layer.weight");
  g_assert_cmpfloat (((float *) w->data)[5], ==,
      lb_bf16_to_f32 (((uint16_t *) t->data)[5]));
}

static void
test_mkmodel_14b_structure (void)
{
  check_structure (LINGBOT_DIT_PRESET_14B, 40 * 8, 96, 8);
}

static void
test_mkmodel_1_3b_structure (void)
{
  check_structure (LINGBOT_DIT_PRESET_1_3B, 12 * 8, 64, 3);
}

static void
test_heads_inferred (void)
{
  /* no config anywhere: heads = dim / 128 (the releases' head dim) */
  LingbotDitConfig c;
  lingbot_dit_config_init_preset (&c, LINGBOT_DIT_PRESET_1_3B);
  c.num_layers = 1;
  c.num_heads = 2;
  c.dim = 256;
  c.ffn_dim = 32;
  c.text_dim = 16;
  g_autofree char *dir = g_build_filename (tmpdir, "noconf", NULL);
  g_autoptr (GError) err = NULL;
  g_assert_true (lingbot_dit_write_random (&c, dir, 1, LB_DTYPE_BF16, 1, &err));
  g_autofree char *cj = g_build_filename (dir, "config.json", NULL);
  g_unlink (cj);
  g_autoptr (LingbotDit) dit = lingbot_dit_load (dir, 0, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_dit_get_config (dit)->num_heads, ==, 2);
  g_assert_cmpint (lingbot_dit_get_config (dit)->num_layers, ==, 1);
}

static void
test_config_json (void)
{
  LingbotDitConfig a, b;
  lingbot_dit_config_init_preset (&a, LINGBOT_DIT_PRESET_14B);
  g_autofree char *json = lingbot_dit_config_to_json (&a);
  memset (&b, 0, sizeof b);
  g_autoptr (GError) err = NULL;
  g_assert_true (lingbot_dit_config_merge_json (&b, json, &err));
  g_assert_no_error (err);
  g_assert_cmpint (b.dim, ==, 5120);
  g_assert_cmpint (b.num_heads, ==, 40);
  g_assert_cmpint (b.num_layers, ==, 40);
  g_assert_cmpint (b.ffn_dim, ==, 13824);
  g_assert_cmpint (b.text_dim, ==, 4096);
  g_assert_cmpint (b.in_dim, ==, 36);
  g_assert_cmpint (b.patch[1], ==, 2);
  g_assert_cmpfloat (b.eps, ==, 1e-6);

  LingbotDitConfig bad = a;
  bad.num_heads = 3;
  g_assert_false (lingbot_dit_config_validate (&bad, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==,
      "DiT config: num_heads 3 does not divide dim 5120");
  g_clear_error (&err);
  bad = a;
  bad.num_heads = 80;           /* head dim 64: floor(64/3) is odd */
  g_assert_false (lingbot_dit_config_validate (&bad, &err));
  g_assert_true (g_str_has_prefix (err->message, "DiT config: head dim 64"));
}

/* config.json max_attention_size: absent (the release) is 0 = the
 * capacity and is not written for 0; a value is read and written back;
 * a negative one fails validation with the exact message. */
static void
test_config_max_attention (void)
{
  g_autoptr (GError) err = NULL;
  LingbotDitConfig a, b;
  lingbot_dit_config_init_preset (&a, LINGBOT_DIT_PRESET_14B);
  g_assert_cmpint (a.max_attention_size, ==, 0);
  g_autofree char *j0 = lingbot_dit_config_to_json (&a);
  g_assert_null (strstr (j0, "max_attention_size"));

  a.max_attention_size = 14040; /* 9 frames of 1560 tokens */
  g_autofree char *j1 = lingbot_dit_config_to_json (&a);
  g_assert_nonnull (strstr (j1, "\"max_attention_size\" : 14040"));
  lingbot_dit_config_init_preset (&b, LINGBOT_DIT_PRESET_14B);
  g_assert_true (lingbot_dit_config_merge_json (&b, j1, &err));
  g_assert_no_error (err);
  g_assert_cmpint (b.max_attention_size, ==, 14040);
  g_assert_true (lingbot_dit_config_validate (&b, &err));
  g_assert_no_error (err);
  /* a config without the key leaves the field alone */
  g_assert_true (lingbot_dit_config_merge_json (&b, j0, &err));
  g_assert_cmpint (b.max_attention_size, ==, 14040);

  g_assert_true (lingbot_dit_config_merge_json (&b,
          "{\"max_attention_size\": -5}", &err));
  g_assert_cmpint (b.max_attention_size, ==, -5);
  g_assert_false (lingbot_dit_config_validate (&b, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, "DiT config: max_attention_size -5 is "
      "negative (tokens; 0 = the KV cache's capacity)");
}

static void
test_ranks_must_divide_heads (void)
{
  g_autofree char *path = write_single ("ranks.safetensors", NULL);
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotDit) dit = lingbot_dit_load (path, 0, &err);
  g_assert_no_error (err);
  LbWorkerGroup *g = lb_worker_group_new (lb_cpu_backend (), 3, NULL, NULL,
      &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions o = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  o.latent_h = 4;
  o.latent_w = 6;
  g_autoptr (LbTensor) text = lb_tensor_new_zeros (LB_DTYPE_F32, 3,
      (int64_t[]) { 1, 8, 32 });
  LingbotDitSession *s = lingbot_dit_session_new (dit, g, &o, text, &err);
  g_assert_null (s);
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (err->message, ==, "DiT Ulysses: 3 ranks do not divide "
      "the 2 attention heads (use a rank count that divides 2)");
  lb_worker_group_unref (g);
}

/* Spec 8.1 tiny config: 5 chunks of 2 frames over a 4x6 latent, window 6,
 * sink 2: eviction from chunk 3 (visible frames 0,1,4-7 then 0,1,6-9). */
static void
test_tiny_session_eviction (void)
{
  g_autofree char *path = write_single ("session.safetensors", NULL);
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotDit) dit = lingbot_dit_load (path, 0, &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions o = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  o.latent_h = 4;
  o.latent_w = 6;
  g_autoptr (LbTensor) text = lb_tensor_new_zeros (LB_DTYPE_F32, 3,
      (int64_t[]) { 1, 8, 32 });
  for (int i = 0; i < 3 * 32; i++)
    ((float *) text->data)[i] = 0.01f * (float) (i % 17);
  LingbotDitSession *s = lingbot_dit_session_new (dit, NULL, &o, text, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_dit_session_get_frame_tokens (s), ==, 6);
  g_assert_cmpint (lingbot_dit_session_get_cache_capacity (s), ==, 36);

  int64_t ls[5] = { 1, 16, 2, 4, 6 };
  int64_t ys[5] = { 1, 20, 2, 4, 6 };
  int64_t cs[5] = { 1, 384, 2, 4, 6 };
  g_autoptr (LbTensor) y = lb_tensor_new_zeros (LB_DTYPE_F32, 5, ys);
  g_autoptr (LbTensor) ctl = lb_tensor_new_zeros (LB_DTYPE_F32, 5, cs);
  g_autoptr (LbTensor) out = lb_tensor_new (LB_DTYPE_F32, 5, ls);
  LbTensor *noise[4];
  for (int i = 0; i < 4; i++) {
    noise[i] = lb_tensor_new (LB_DTYPE_F32, 5, ls);
    for (int64_t e = 0; e < lb_tensor_numel (noise[i]); e++)
      ((float *) noise[i]->data)[e] = sinf ((float) (e * 7 + i * 13));
  }
  const int64_t want[5][2] = {
    {12, 12}, {24, 24}, {36, 36}, {48, 36}, {60, 36}
  };
  for (int c = 0; c < 5; c++) {
    g_assert_true (lingbot_dit_session_run_chunk (s, y, ctl,
            (const LbTensor * const *) noise, out, &err));
    g_assert_no_error (err);
    int64_t ge, le;
    lingbot_dit_session_get_cursors (s, &ge, &le);
    g_assert_cmpint (ge, ==, want[c][0]);
    g_assert_cmpint (le, ==, want[c][1]);
    for (int64_t e = 0; e < lb_tensor_numel (out); e++)
      g_assert_true (isfinite (((float *) out->data)[e]));
  }
  lingbot_dit_session_free (s);

  /* a global cache (local_attn_frames -1) holds max_frames, then refuses */
  o.local_attn_frames = -1;
  o.max_frames = 6;
  s = lingbot_dit_session_new (dit, NULL, &o, text, &err);
  g_assert_no_error (err);
  g_assert_cmpint (lingbot_dit_session_get_cache_capacity (s), ==, 36);
  for (int c = 0; c < 3; c++) {
    g_assert_true (lingbot_dit_session_run_chunk (s, y, ctl,
            (const LbTensor * const *) noise, out, &err));
    g_assert_no_error (err);
  }
  g_assert_false (lingbot_dit_session_run_chunk (s, y, ctl,
          (const LbTensor * const *) noise, out, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_UNSUPPORTED);
  g_assert_cmpstr (err->message, ==,
      "DiT session: global KV cache full after 3 chunks");
  lingbot_dit_session_free (s);
  for (int i = 0; i < 4; i++)
    lb_tensor_free (noise[i]);
}

/* Philox noise through lingbot_dit_session_run_chunk_noise() on @n_ranks
 * ranks, 4 chunks of a latent of @lh x 4. */
static void
run_philox (LingbotDit * dit, int n_ranks, int64_t lh, LbTensor ** outs)
{
  g_autoptr (GError) err = NULL;
  LbWorkerGroup *g = lb_worker_group_new (lb_cpu_backend (), n_ranks, NULL,
      NULL, &err);
  g_assert_no_error (err);
  LingbotDitSessionOptions o = LINGBOT_DIT_SESSION_OPTIONS_INIT;
  o.latent_h = lh;
  o.latent_w = 4;
  g_autoptr (LbTensor) text = lb_tensor_new_zeros (LB_DTYPE_F32, 3,
      (int64_t[]) { 1, 8, 32 });
  for (int i = 0; i < 5 * 32; i++)
    ((float *) text->data)[i] = 0.02f * (float) (i % 11);
  LingbotDitSession *s = lingbot_dit_session_new (dit, g, &o, text, &err);
  g_assert_no_error (err);
  g_autoptr (LbTensor) y = lb_tensor_new_zeros (LB_DTYPE_F32, 5,
      (int64_t[]) { 1, 20, 2, lh, 4 });
  g_autoptr (LbTensor) ctl = lb_tensor_new_zeros (LB_DTYPE_F32, 5,
      (int64_t[]) { 1, 384, 2, lh, 4 });
  for (int64_t e = 0; e < lb_tensor_numel (ctl); e++)
    ((float *) ctl->data)[e] = 0.1f * cosf ((float) e);
  g_autoptr (LingbotNoise) noise = lingbot_noise_new_philox (42);
  for (int c = 0; c < 4; c++) {
    outs[c] = lb_tensor_new (LB_DTYPE_F32, 5, (int64_t[]) { 1, 16, 2, lh, 4 });
    g_assert_true (lingbot_dit_session_run_chunk_noise (s, y, ctl, noise,
            outs[c], &err));
    g_assert_no_error (err);
  }
  lingbot_dit_session_free (s);
  lb_worker_group_unref (g);
}

/* The latents of @n_ranks ranks are the bytes of one rank's: every op
 * computes a token's row in an order that does not depend on the band
 * (docs/design.md "Determinism"). */
static void
assert_ranks_agree (LingbotDit * dit, int n_ranks, int64_t lh)
{
  LbTensor *a[4], *b[4];
  run_philox (dit, 1, lh, a);
  run_philox (dit, n_ranks, lh, b);
  for (int c = 0; c < 4; c++) {
    double maxa = 0;
    const float *pa = a[c]->data;
    for (int64_t e = 0; e < lb_tensor_numel (a[c]); e++)
      maxa = MAX (maxa, fabs (pa[e]));
    g_assert_cmpfloat (maxa, >, 0.1);
    g_assert_cmpmem (a[c]->data, lb_tensor_nbytes (a[c]), b[c]->data,
        lb_tensor_nbytes (b[c]));
    lb_tensor_free (a[c]);
    lb_tensor_free (b[c]);
  }
}

/* the tiny model on 2 ranks (unequal bands: 3 token rows) */
static void
test_philox_ranks_agree (void)
{
  g_autofree char *path = write_single ("philox.safetensors", NULL);
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotDit) dit = lingbot_dit_load (path, 0, &err);
  g_assert_no_error (err);
  assert_ranks_agree (dit, 2, 6);
}

/* A one-layer model with 60 heads of 8 (so 1 to 5 ranks divide them) on a
 * latent of 5 token rows: bands 3,2 / 2,2,1 / 2,1,1,1 / 1,1,1,1,1. */
static void
test_ranks_1_to_5 (void)
{
  LingbotDitConfig cfg;
  tiny_config (&cfg);
  cfg.num_heads = 60;
  cfg.dim = 480;
  cfg.num_layers = 1;
  g_autoptr (GPtrArray) names = lingbot_dit_weight_names (&cfg);
  g_autoptr (GPtrArray) tensors =
      g_ptr_array_new_with_free_func ((GDestroyNotify) lb_tensor_free);
  for (guint i = 0; i < names->len; i++)
    g_ptr_array_add (tensors, lingbot_dit_random_weight (&cfg,
            names->pdata[i], LB_DTYPE_F32, 7));
  g_autofree char *path = g_build_filename (tmpdir, "heads60.safetensors",
      NULL);
  g_autoptr (GHashTable) meta = g_hash_table_new (g_str_hash, g_str_equal);
  g_autofree char *json = lingbot_dit_config_to_json (&cfg);
  g_hash_table_insert (meta, (gpointer) "config", json);
  g_autoptr (GError) err = NULL;
  g_assert_true (lingbot_safetensors_write (path,
          (const char *const *) names->pdata,
          (const LbTensor * const *) tensors->pdata, names->len, meta, &err));
  g_assert_no_error (err);
  g_autoptr (LingbotDit) dit = lingbot_dit_load (path, 0, &err);
  g_assert_no_error (err);
  for (int n = 2; n <= 5; n++)
    assert_ranks_agree (dit, n, 10);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_autoptr (GError) err = NULL;
  tmpdir = g_dir_make_tmp ("lingbot-dit-XXXXXX", &err);
  g_assert_no_error (err);

  g_test_add_func ("/dit/config/params", test_params);
  g_test_add_func ("/dit/config/json", test_config_json);
  g_test_add_func ("/dit/config/max-attention", test_config_max_attention);
  g_test_add_func ("/dit/load/ok", test_load_ok);
  g_test_add_func ("/dit/load/missing", test_load_missing);
  g_test_add_func ("/dit/load/bad-shape", test_load_bad_shape);
  g_test_add_func ("/dit/load/nan", test_load_nan);
  g_test_add_func ("/dit/load/strict", test_load_strict);
  g_test_add_func ("/dit/load/heads-inferred", test_heads_inferred);
  g_test_add_func ("/dit/mkmodel/14b-structure", test_mkmodel_14b_structure);
  g_test_add_func ("/dit/mkmodel/1.3b-structure", test_mkmodel_1_3b_structure);
  g_test_add_func ("/dit/session/ranks-divide-heads",
      test_ranks_must_divide_heads);
  g_test_add_func ("/dit/session/tiny-eviction", test_tiny_session_eviction);
  g_test_add_func ("/dit/session/philox-ranks-agree", test_philox_ranks_agree);
  g_test_add_func ("/dit/session/ranks-1-to-5", test_ranks_1_to_5);
  int rc = g_test_run ();
  rm_rf (tmpdir);
  g_free (tmpdir);
  return rc;
}

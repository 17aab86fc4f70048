/* lingbot-gst: random-weight Wan2.1 VAE checkpoints (for lingbot-mkmodel)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Writes the 194 tensors of spec A.7 (vae_and_distributed_spec.md) under
 * their published names, at any base width (96 = the real file).
 */
#include "lingbot/vae-private.h"
#include "lingbot/checkpoint-private.h"
#include "lingbot/dummy.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

typedef struct
{
  GPtrArray *names;             /* char* */
  GPtrArray *tensors;           /* LbTensor* */
  guint64 seed;
} Writer;

static guint64
splitmix64 (guint64 * state)
{
  guint64 z = (*state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* uniform in [-1, 1) from the tensor's own stream */
static float
uniform (guint64 * state)
{
  return (float) ((splitmix64 (state) >> 40) * (1.0 / 8388608.0) - 1.0);
}

static void
add (Writer * w, char *name, int ndim, const int64_t * shape, float base,
    float spread)
{
  LbTensor *t = lb_tensor_new (LB_DTYPE_F32, ndim, shape);
  guint64 state = w->seed ^ g_str_hash (name) * 0x2545f4914f6cdd1dULL;
  float *d = t->data;
  for (int64_t i = 0; i < lb_tensor_numel (t); i++)
    d[i] = base + spread * uniform (&state);
  g_ptr_array_add (w->names, name);
  g_ptr_array_add (w->tensors, t);
}

static void
add_conv (Writer * w, const char *prefix, const char *leaf, int cout, int cin,
    int kt, int kh, int kw, gboolean conv2d)
{
  const char *dot = *leaf ? "." : "";
  int64_t s5[5] = { cout, cin, kt, kh, kw };
  int64_t s4[4] = { cout, cin, kh, kw };
  int64_t sb[1] = { cout };
  /* PyTorch's default conv init bound: 1 / sqrt(fan_in) */
  float bound = 1.f / sqrtf ((float) (cin * kt * kh * kw));
  add (w, g_strdup_printf ("%s%s%s.weight", prefix, dot, leaf), conv2d ? 4 : 5,
      conv2d ? s4 : s5, 0.f, bound);
  add (w, g_strdup_printf ("%s%s%s.bias", prefix, dot, leaf), 1, sb, 0.f,
      bound);
}

static void
add_gamma (Writer * w, char *name, int c, int ndim)
{
  int64_t s[4] = { c, 1, 1, 1 };
  add (w, name, ndim, s, 1.f, 0.1f);
}

static void
add_res (Writer * w, const char *prefix, int cin, int cout)
{
  add_gamma (w, g_strdup_printf ("%s.residual.0.gamma", prefix), cin, 4);
  add_conv (w, prefix, "residual.2", cout, cin, 3, 3, 3, FALSE);
  add_gamma (w, g_strdup_printf ("%s.residual.3.gamma", prefix), cout, 4);
  add_conv (w, prefix, "residual.6", cout, cout, 3, 3, 3, FALSE);
  if (cin != cout)
    add_conv (w, prefix, "shortcut", cout, cin, 1, 1, 1, FALSE);
}

static void
add_attn (Writer * w, const char *prefix, int c)
{
  add_gamma (w, g_strdup_printf ("%s.norm.gamma", prefix), c, 3);
  add_conv (w, prefix, "to_qkv", 3 * c, c, 1, 1, 1, TRUE);
  add_conv (w, prefix, "proj", c, c, 1, 1, 1, TRUE);
}

static void
add_resample (Writer * w, const char *prefix, int c, gboolean up, gboolean time)
{
  add_conv (w, prefix, "resample.1", up ? c / 2 : c, c, 1, 3, 3, TRUE);
  if (time)
    add_conv (w, prefix, "time_conv", up ? 2 * c : c, c, 3, 1, 1, FALSE);
}

/* The four levels of sampling blocks @prefix.0, .1, ...: level i is
 * @n_res res blocks from in[i] * d to out[i] * d channels, then (i < 3) a
 * resample, up or down, with a time conv where time[i]. */
static void
add_levels (Writer * w, const char *prefix, int d, const int in[4],
    const int out[4], int n_res, gboolean up, const gboolean time[3])
{
  int idx = 0;
  for (int i = 0; i < 4; i++) {
    int cin = in[i] * d, cout = out[i] * d;
    for (int r = 0; r < n_res + (i < 3); r++, idx++) {
      char p[64];
      g_snprintf (p, sizeof p, "%s.%d", prefix, idx);
      if (r < n_res)
        add_res (w, p, cin, cout);
      else
        add_resample (w, p, cout, up, time[i]);
      cin = cout;
    }
  }
}

static void
build (Writer * w, int d)
{
  /* encoder (spec A.6) */
  add_conv (w, "encoder.conv1", "", d, 3, 3, 3, 3, FALSE);
  static const int ein[4] = { 1, 1, 2, 4 }, eout[4] = { 1, 2, 4, 4 };
  static const gboolean etime[3] = { FALSE, TRUE, TRUE };
  add_levels (w, "encoder.downsamples", d, ein, eout, 2, FALSE, etime);
  add_res (w, "encoder.middle.0", 4 * d, 4 * d);
  add_attn (w, "encoder.middle.1", 4 * d);
  add_res (w, "encoder.middle.2", 4 * d, 4 * d);
  add_gamma (w, g_strdup ("encoder.head.0.gamma"), 4 * d, 4);
  add_conv (w, "encoder.head", "2", 2 * VAE_Z_DIM, 4 * d, 3, 3, 3, FALSE);
  add_conv (w, "conv1", "", 2 * VAE_Z_DIM, 2 * VAE_Z_DIM, 1, 1, 1, FALSE);
  add_conv (w, "conv2", "", VAE_Z_DIM, VAE_Z_DIM, 1, 1, 1, FALSE);
  /* decoder (spec A.4) */
  add_conv (w, "decoder.conv1", "", 4 * d, VAE_Z_DIM, 3, 3, 3, FALSE);
  add_res (w, "decoder.middle.0", 4 * d, 4 * d);
  add_attn (w, "decoder.middle.1", 4 * d);
  add_res (w, "decoder.middle.2", 4 * d, 4 * d);
  static const int din[4] = { 4, 2, 2, 1 }, dout[4] = { 4, 4, 2, 1 };
  static const gboolean dtime[3] = { TRUE, TRUE, FALSE };
  add_levels (w, "decoder.upsamples", d, din, dout, 3, TRUE, dtime);
  add_gamma (w, g_strdup ("decoder.head.0.gamma"), d, 4);
  add_conv (w, "decoder.head", "2", 3, d, 3, 3, 3, FALSE);
}

/* A writer holding every tensor of the VAE of base width @dim. */
static Writer
writer_new (int dim, guint64 seed)
{
  Writer w = { g_ptr_array_new_with_free_func (g_free),
    g_ptr_array_new_with_free_func ((GDestroyNotify) lb_tensor_free), seed
  };
  build (&w, dim);
  return w;
}

static gboolean
check_dim (int dim, GError ** error)
{
  if (dim < 2 || dim % 2 || dim > LINGBOT_VAE_MAX_RANDOM_DIM) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "VAE width %d: must be even and in [2, %d]", dim,
        LINGBOT_VAE_MAX_RANDOM_DIM);
    return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_vae_write_random:
 * @path: output file: `*.pth` for the torch.save layout of the published
 *   Wan2.1_VAE.pth, anything else for `.safetensors` (with a config in
 *   its metadata)
 * @dim: base width (96 = Wan2.1_VAE.pth; any even value >= 2 for tests)
 * @seed: weights are a deterministic function of (@seed, tensor name)
 * @error: %LB_ERROR_INVALID_ARGUMENT for a bad width; writer errors
 *
 * Writes a random-weight Wan2.1 VAE with exactly the 194 keys and shapes
 * of spec A.7 (widths scaled by @dim / 96), float32, loadable by
 * lingbot_vae_load().  Conv weights and biases are uniform in
 * +-1/sqrt(fan_in) (PyTorch's default bound), norm gammas 1 +- 0.1.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_vae_write_random (const char *path, int dim, guint64 seed,
    GError ** error)
{
  if (!check_dim (dim, error))
    return FALSE;
  Writer w = writer_new (dim, seed);
  g_assert (w.names->len == 194);
  g_autoptr (GHashTable) meta = g_hash_table_new (g_str_hash, g_str_equal);
  /* the config as the published checkpoint's (Wan's names), written by
   * json-glib */
  static const int mult[] = { 1, 2, 4, 4 };
  static const gboolean down[] = { FALSE, TRUE, TRUE };
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "dim");
  json_builder_add_int_value (b, dim);
  json_builder_set_member_name (b, "z_dim");
  json_builder_add_int_value (b, 16);
  json_builder_set_member_name (b, "dim_mult");
  json_builder_begin_array (b);
  for (guint i = 0; i < G_N_ELEMENTS (mult); i++)
    json_builder_add_int_value (b, mult[i]);
  json_builder_end_array (b);
  json_builder_set_member_name (b, "num_res_blocks");
  json_builder_add_int_value (b, 2);
  json_builder_set_member_name (b, "temperal_downsample");
  json_builder_begin_array (b);
  for (guint i = 0; i < G_N_ELEMENTS (down); i++)
    json_builder_add_boolean_value (b, down[i]);
  json_builder_end_array (b);
  json_builder_set_member_name (b, "seed");
  json_builder_add_int_value (b, (gint64) seed);
  json_builder_end_object (b);
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  g_autofree char *cfg = json_to_string (root, FALSE);
  g_hash_table_insert (meta, (gpointer) "config", cfg);
  g_hash_table_insert (meta, (gpointer) "weight_naming",
      (gpointer) "official Wan2.1_VAE.pth names");
  return lingbot_ckpt_write_file (path, w.names, w.tensors, meta, error);
}

/**
 * lingbot_vae_random_checkpoint:
 * @label: the checkpoint's path (a dummy manifest)
 * @dim: base width (even, 2 .. %LINGBOT_VAE_MAX_RANDOM_DIM)
 * @seed: weight seed
 * @error: %LB_ERROR_INVALID_ARGUMENT for a bad @dim
 *
 * The 194 tensors lingbot_vae_write_random() writes for (@dim, @seed), as
 * an in-memory checkpoint (float32, as written): what a dummy VAE loads.
 *
 * Returns: (transfer full) (nullable): the checkpoint.
 */
LingbotCheckpoint *
lingbot_vae_random_checkpoint (const char *label, int dim, guint64 seed,
    GError ** error)
{
  if (!check_dim (dim, error))
    return NULL;
  Writer w = writer_new (dim, seed);
  return lingbot_dummy_checkpoint_new (label, w.names, w.tensors, error);
}

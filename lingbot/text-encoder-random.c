/* lingbot-gst: random-weight umT5 encoders under the published names
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The tensor set of models_t5_umt5-xxl-enc-bf16.pth (spec 5.2): the token
 * embedding, per block norm1, attn.{q,k,v,o}, norm2, ffn.{gate.0,fc1,fc2},
 * pos_embedding.embedding (one per block: umT5 does not share it), and the
 * final norm.  lingbot_text_encoder_new() infers the configuration back
 * from the shapes.
 */
#include "lingbot/text-encoder-random.h"
#include "lingbot/checkpoint-private.h"
#include "lingbot/dummy.h"
#include "kernels/error.h"

#include <json-glib/json-glib.h>
#include <math.h>

/**
 * lingbot_text_encoder_config_init_tiny:
 * @cfg: (out caller-allocates): the configuration
 * @dim: model width (the DiT's text_dim)
 * @vocab: embedding rows (at least the tokenizer's vocabulary)
 *
 * A small umT5: @dim wide, 2 layers, 4 heads (or fewer when they do not
 * divide @dim), FFN 2.5 @dim, 32 buckets, max distance 128.
 */
void
lingbot_text_encoder_config_init_tiny (LingbotTextEncoderConfig * cfg,
    int64_t dim, int64_t vocab)
{
  cfg->vocab = vocab;
  cfg->dim = dim;
  cfg->dim_attn = dim;
  cfg->dim_ffn = MAX ((dim * 5) / 2, 1);
  cfg->num_heads = 4;
  while (cfg->num_heads > 1 && dim % cfg->num_heads)
    cfg->num_heads--;
  cfg->num_layers = 2;
  cfg->num_buckets = 32;
  cfg->max_distance = 128;
  cfg->eps = 1e-6f;
}

typedef struct
{
  GPtrArray *names;
  GPtrArray *tensors;
  LbDType dtype;
  guint64 seed;
} Writer;

/* uniform in center +- bound, a deterministic function of (seed, name) */
static void
add (Writer * w, const char *name, int ndim, int64_t d0, int64_t d1,
    double center, double bound)
{
  int64_t shape[2] = { d0, d1 };
  LbTensor *t = lb_tensor_new (w->dtype, ndim, shape);
  guint32 s = (guint32) (w->seed ^ (w->seed >> 32)) * 2654435761u ^
      g_str_hash (name);
  GRand *r = g_rand_new_with_seed (s);
  int64_t n = lb_tensor_numel (t);
  for (int64_t i = 0; i < n; i++)
    lb_tensor_set_flat (t, i, center + bound * (2.0 * g_rand_double (r) - 1.0));
  g_rand_free (r);
  g_ptr_array_add (w->names, g_strdup (name));
  g_ptr_array_add (w->tensors, t);
}

static gboolean
check_config (const LingbotTextEncoderConfig * cfg, LbDType dtype,
    GError ** error)
{
  if (cfg->vocab < 2 || cfg->dim < 1 || cfg->dim_attn < 1 ||
      cfg->dim_ffn < 1 || cfg->num_heads < 1 ||
      cfg->dim_attn % cfg->num_heads || cfg->num_layers < 1 ||
      cfg->num_buckets < 4) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "text encoder: bad random configuration (vocab %" G_GINT64_FORMAT
        ", dim %" G_GINT64_FORMAT ", dim_attn %" G_GINT64_FORMAT
        ", heads %d, layers %d, buckets %d)", cfg->vocab, cfg->dim,
        cfg->dim_attn, cfg->num_heads, cfg->num_layers, cfg->num_buckets);
    return FALSE;
  }
  if (cfg->vocab > LINGBOT_TEXT_ENCODER_MAX_RANDOM_VOCAB ||
      cfg->dim > 8192 || cfg->dim_attn > 8192 || cfg->dim_ffn > 32768 ||
      cfg->num_heads > 128 || cfg->num_layers > 64 || cfg->num_buckets > 1024) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "text encoder: random configuration too large (vocab %" G_GINT64_FORMAT
        ", dim %" G_GINT64_FORMAT ", layers %d)", cfg->vocab, cfg->dim,
        cfg->num_layers);
    return FALSE;
  }
  if (dtype != LB_DTYPE_F32 && dtype != LB_DTYPE_BF16 && dtype != LB_DTYPE_F16) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "text encoder: dtype %s is not a float storage type",
        lb_dtype_name (dtype));
    return FALSE;
  }
  return TRUE;
}

/* every tensor of the encoder, in the published order */
static void
build (Writer * w, const LingbotTextEncoderConfig * cfg)
{
  const double bd = 1.0 / sqrt ((double) cfg->dim);
  const double ba = 1.0 / sqrt ((double) cfg->dim_attn);
  const double bf = 1.0 / sqrt ((double) cfg->dim_ffn);
  add (w, "token_embedding.weight", 2, cfg->vocab, cfg->dim, 0.0, 1.0);
  for (int i = 0; i < cfg->num_layers; i++) {
    char n[96];
#define ADD(suffix, nd, d0, d1, c, b) \
    g_snprintf (n, sizeof n, "blocks.%d.%s", i, suffix); \
    add (w, n, nd, d0, d1, c, b)
    ADD ("norm1.weight", 1, cfg->dim, 1, 1.0, 0.1);
    ADD ("attn.q.weight", 2, cfg->dim_attn, cfg->dim, 0.0, bd);
    ADD ("attn.k.weight", 2, cfg->dim_attn, cfg->dim, 0.0, bd);
    ADD ("attn.v.weight", 2, cfg->dim_attn, cfg->dim, 0.0, bd);
    ADD ("attn.o.weight", 2, cfg->dim, cfg->dim_attn, 0.0, ba);
    ADD ("norm2.weight", 1, cfg->dim, 1, 1.0, 0.1);
    ADD ("ffn.gate.0.weight", 2, cfg->dim_ffn, cfg->dim, 0.0, bd);
    ADD ("ffn.fc1.weight", 2, cfg->dim_ffn, cfg->dim, 0.0, bd);
    ADD ("ffn.fc2.weight", 2, cfg->dim, cfg->dim_ffn, 0.0, bf);
    ADD ("pos_embedding.embedding.weight", 2, cfg->num_buckets,
        cfg->num_heads, 0.0, 0.5);
#undef ADD
  }
  add (w, "norm.weight", 1, cfg->dim, 1, 1.0, 0.1);
}

/* A writer holding every tensor of @cfg's encoder. */
static Writer
writer_new (const LingbotTextEncoderConfig * cfg, LbDType dtype, guint64 seed)
{
  Writer w = { g_ptr_array_new_with_free_func (g_free),
    g_ptr_array_new_with_free_func ((GDestroyNotify) lb_tensor_free),
    dtype, seed
  };
  build (&w, cfg);
  return w;
}

/**
 * lingbot_text_encoder_write_random:
 * @path: output file: `*.pth` for the torch.save layout of the published
 *   `models_t5_umt5-xxl-enc-bf16.pth`, anything else for `.safetensors`
 *   (with a config in its metadata)
 * @cfg: the shapes (lingbot_text_encoder_config_init_tiny())
 * @dtype: storage dtype (%LB_DTYPE_BF16 as published, or F32)
 * @seed: weights are a deterministic function of (@seed, tensor name)
 * @error: %LB_ERROR_INVALID_ARGUMENT for a bad configuration; writer errors
 *
 * Writes a random-weight umT5 encoder under the published tensor names.
 * Linear weights are uniform in +-1/sqrt(fan_in), norm gains 1 +- 0.1,
 * embeddings +-1, relative-position biases +-0.5.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_text_encoder_write_random (const char *path,
    const LingbotTextEncoderConfig * cfg, LbDType dtype, guint64 seed,
    GError ** error)
{
  if (!check_config (cfg, dtype, error))
    return FALSE;
  Writer w = writer_new (cfg, dtype, seed);
  g_autoptr (GHashTable) meta = g_hash_table_new (g_str_hash, g_str_equal);
  const struct
  {
    const char *name;
    gint64 value;
  } members[] = {
    {"vocab", cfg->vocab}, {"dim", cfg->dim}, {"dim_attn", cfg->dim_attn},
    {"dim_ffn", cfg->dim_ffn}, {"num_heads", cfg->num_heads},
    {"num_layers", cfg->num_layers}, {"num_buckets", cfg->num_buckets},
    {"seed", (gint64) seed},
  };
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
  for (guint i = 0; i < G_N_ELEMENTS (members); i++) {
    json_builder_set_member_name (b, members[i].name);
    json_builder_add_int_value (b, members[i].value);
  }
  json_builder_end_object (b);
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  g_autofree char *config = json_to_string (root, FALSE);
  g_hash_table_insert (meta, (gpointer) "config", config);
  g_hash_table_insert (meta, (gpointer) "weight_naming",
      (gpointer) "official umT5-xxl encoder checkpoint names "
      "(models_t5_umt5-xxl-enc-bf16.pth)");
  return lingbot_ckpt_write_file (path, w.names, w.tensors, meta, error);
}

/**
 * lingbot_text_encoder_random_checkpoint:
 * @label: the checkpoint's path (a dummy manifest)
 * @cfg: the shapes
 * @dtype: storage dtype (%LB_DTYPE_BF16 as published, F16 or F32)
 * @seed: the weight seed
 * @error: %LB_ERROR_INVALID_ARGUMENT for a bad or too large @cfg (vocab at
 *   most %LINGBOT_TEXT_ENCODER_MAX_RANDOM_VOCAB)
 *
 * The tensors lingbot_text_encoder_write_random() writes for (@cfg,
 * @dtype, @seed), as an in-memory checkpoint: what a dummy text encoder
 * loads.
 *
 * Returns: (transfer full) (nullable): the checkpoint.
 */
LingbotCheckpoint *
lingbot_text_encoder_random_checkpoint (const char *label,
    const LingbotTextEncoderConfig * cfg, LbDType dtype, guint64 seed,
    GError ** error)
{
  if (!check_config (cfg, dtype, error))
    return NULL;
  Writer w = writer_new (cfg, dtype, seed);
  return lingbot_dummy_checkpoint_new (label, w.names, w.tensors, error);
}

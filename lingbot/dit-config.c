/* lingbot-gst: LingBot-World v2 causal DiT: configuration and weight table
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Configuration comes from the checkpoint's config.json when there is one
 * (or the `config` entry of a safetensors file's metadata, as the golden
 * fixtures carry it), else it is inferred from tensor shapes the way the
 * reference converter `from_official` does (golden README 0.1).  The head
 * count cannot be inferred; without a config it defaults to dim / 128
 * (40 for the 14B, 12 for the 1.3B).  The weight table (names and shapes of
 * spec 4.2) is what the loader (dit.c) and the random-weight writer
 * (dit-random.c) both check against.
 */
#include "lingbot/dit-private.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* configuration                                                            */
/* ------------------------------------------------------------------------ */

static void
config_common (LingbotDitConfig * cfg)
{
  cfg->freq_dim = LINGBOT_DIT_DEFAULT_FREQ_DIM;
  cfg->in_dim = 36;
  cfg->out_dim = 16;
  cfg->control_in_features = 6 * 64 * 4;
  cfg->patch[0] = 1;
  cfg->patch[1] = 2;
  cfg->patch[2] = 2;
  cfg->eps = LINGBOT_DIT_DEFAULT_EPS;
  cfg->local_attn_frames = LINGBOT_DIT_DEFAULT_LOCAL_ATTN_FRAMES;
  cfg->sink_frames = LINGBOT_DIT_DEFAULT_SINK_FRAMES;
  cfg->chunk_frames = LINGBOT_DIT_DEFAULT_CHUNK_FRAMES;
}

/* The published shapes by preset (lingbot_dit_config_init_preset());
 * streaming settings of 0 are the released ones; tiny last, the fallback
 * for an unknown preset. */
typedef struct
{
  LingbotDitPreset preset;
  const char *name, *alias;
  int dim, num_layers, num_heads, ffn_dim, text_dim;
  int local_attn_frames, sink_frames, chunk_frames;
} Preset;

static const Preset presets[] = {
  {LINGBOT_DIT_PRESET_14B, "14b", NULL, 5120, 40, 40, 13824, 4096, 0, 0, 0},
  {LINGBOT_DIT_PRESET_1_3B, "1.3b", "1_3b", 1536, 30, 12, 8960, 4096, 0, 0, 0},
  {LINGBOT_DIT_PRESET_DEMO, "demo", NULL, 128, 3, 4, 256, 64, 0, 0, 0},
  {LINGBOT_DIT_PRESET_TINY, "tiny", NULL, 64, 2, 2, 128, 32, 6, 2, 2},
};

/**
 * lingbot_dit_config_init_preset:
 * @cfg: (out): the configuration to fill
 * @preset: which published shape
 *
 * 14B: spec 1.1 (dim 5120, 40 layers, 40 heads, FFN 13824, text 4096).
 * 1.3B: spec 8.4 (dim 1536, 30 layers, 12 heads, FFN 8960).
 * Tiny: spec 8.1 (dim 64, 2 layers, 2 heads of 32, FFN 128, text 32,
 * window 6 / sink 2 / chunk 2 frames).
 * Demo: small (dim 128, 3 layers, 4 heads of 32, FFN 256, text 64) but
 * with the released streaming settings (window 18 / sink 6 / chunk 4
 * frames), so chunks yield 13 then 16 frames as the real model does; what
 * tools/demo.sh runs on two CPU cores.
 */
void
lingbot_dit_config_init_preset (LingbotDitConfig * cfg, LingbotDitPreset preset)
{
  const Preset *p = &presets[G_N_ELEMENTS (presets) - 1];       /* tiny */
  for (guint i = 0; i < G_N_ELEMENTS (presets); i++)
    if (presets[i].preset == preset)
      p = &presets[i];
  memset (cfg, 0, sizeof (*cfg));
  config_common (cfg);
  cfg->dim = p->dim;
  cfg->num_layers = p->num_layers;
  cfg->num_heads = p->num_heads;
  cfg->ffn_dim = p->ffn_dim;
  cfg->text_dim = p->text_dim;
  if (p->chunk_frames > 0) {
    cfg->local_attn_frames = p->local_attn_frames;
    cfg->sink_frames = p->sink_frames;
    cfg->chunk_frames = p->chunk_frames;
  }
}

/**
 * lingbot_dit_config_preset_from_name:
 * @name: "14b", "1.3b", "tiny" or "demo" (case-insensitive)
 * @preset: (out): the preset
 *
 * Returns: %FALSE for an unknown name.
 */
gboolean
lingbot_dit_config_preset_from_name (const char *name,
    LingbotDitPreset * preset)
{
  for (guint i = 0; i < G_N_ELEMENTS (presets); i++) {
    if (g_ascii_strcasecmp (name, presets[i].name) == 0 ||
        (presets[i].alias
            && g_ascii_strcasecmp (name, presets[i].alias) == 0)) {
      *preset = presets[i].preset;
      return TRUE;
    }
  }
  return FALSE;
}

/**
 * lingbot_dit_config_head_dim:
 * @cfg: a configuration
 *
 * Returns: dim / num_heads.
 */
int
lingbot_dit_config_head_dim (const LingbotDitConfig * cfg)
{
  return cfg->num_heads > 0 ? cfg->dim / cfg->num_heads : 0;
}

/**
 * lingbot_dit_config_validate:
 * @cfg: a configuration
 * @error: %LB_ERROR_INVALID_ARGUMENT naming the offending field
 *
 * Checks the structural constraints: positive sizes, heads dividing dim,
 * a head dim that is even with floor(hd/3) even (spec 8.2, the RoPE split),
 * patch (1,2,2) and control in-features a multiple of the patch area.
 *
 * Returns: %TRUE when the configuration can run.
 */
gboolean
lingbot_dit_config_validate (const LingbotDitConfig * cfg, GError ** error)
{
#define POS(f) if (cfg->f <= 0) { \
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT, \
        "DiT config: " #f " is %d, expected > 0", cfg->f); return FALSE; }
  POS (dim);
  POS (num_layers);
  POS (num_heads);
  POS (ffn_dim);
  POS (freq_dim);
  POS (in_dim);
  POS (out_dim);
  POS (text_dim);
  POS (control_in_features);
  POS (chunk_frames);
#undef POS
  if (cfg->dim % cfg->num_heads != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT config: num_heads %d does not divide dim %d", cfg->num_heads,
        cfg->dim);
    return FALSE;
  }
  int hd = cfg->dim / cfg->num_heads;
  if (hd % 2 != 0 || (hd / 3) % 2 != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT config: head dim %d (dim %d / %d heads) must be even with "
        "floor(head_dim / 3) even for the 3-D RoPE split (8, 24, 32, 48, 96, "
        "128 work)", hd, cfg->dim, cfg->num_heads);
    return FALSE;
  }
  if (cfg->freq_dim % 2 != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT config: freq_dim %d must be even", cfg->freq_dim);
    return FALSE;
  }
  if (cfg->patch[0] != 1 || cfg->patch[1] != 2 || cfg->patch[2] != 2) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "DiT config: patch size (%d, %d, %d) is not supported (only (1, 2, 2))",
        cfg->patch[0], cfg->patch[1], cfg->patch[2]);
    return FALSE;
  }
  if (cfg->control_in_features % 4 != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT config: control in-features %d is not a multiple of the patch "
        "area 4", cfg->control_in_features);
    return FALSE;
  }
  if (cfg->sink_frames < 0 || (cfg->local_attn_frames != -1 &&
          cfg->local_attn_frames < cfg->sink_frames + cfg->chunk_frames)) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT config: local_attn_size %d must be -1 or hold the sink (%d) and "
        "one chunk (%d)", cfg->local_attn_frames, cfg->sink_frames,
        cfg->chunk_frames);
    return FALSE;
  }
  if (cfg->max_attention_size < 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT config: max_attention_size %d is negative (tokens; 0 = the KV "
        "cache's capacity)", cfg->max_attention_size);
    return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_dit_config_variant:
 * @cfg: a configuration
 *
 * Returns: "14b" or "1.3b" when the widths match a published model, else
 * "custom".
 */
const char *
lingbot_dit_config_variant (const LingbotDitConfig * cfg)
{
  if (cfg->dim == 5120 && cfg->num_layers == 40 && cfg->ffn_dim == 13824)
    return "14b";
  if (cfg->dim == 1536 && cfg->num_layers == 30 && cfg->ffn_dim == 8960)
    return "1.3b";
  return "custom";
}

static int
head_features (const LingbotDitConfig * cfg)
{
  return cfg->out_dim * cfg->patch[0] * cfg->patch[1] * cfg->patch[2];
}

static int
patch_features (const LingbotDitConfig * cfg)
{
  return cfg->in_dim * cfg->patch[0] * cfg->patch[1] * cfg->patch[2];
}

/**
 * lingbot_dit_config_n_params:
 * @cfg: a configuration
 *
 * Returns: the number of weights (18,544,332,864 for the 14B, spec 4.2).
 */
guint64
lingbot_dit_config_n_params (const LingbotDitConfig * cfg)
{
  guint64 d = cfg->dim, f = cfg->ffn_dim;
  guint64 top = d * patch_features (cfg) + d    /* patch */
      + d * cfg->control_in_features + d        /* camera patch */
      + 2 * (d * d + d)         /* c2ws 1, 2 */
      +d * cfg->text_dim + d + d * d + d        /* text */
      + d * cfg->freq_dim + d + d * d + d       /* time */
      + 6 * d * d + 6 * d       /* projection */
      + (guint64) head_features (cfg) * d + head_features (cfg) + 2 * d;
  guint64 blk = 6 * d + 8 * (d * d + d) + 4 * d + 2 * d
      + f * d + f + d * f + d + 4 * (d * d + d);
  return top + blk * cfg->num_layers;
}

/**
 * lingbot_dit_config_to_json:
 * @cfg: a configuration
 *
 * Serialises @cfg as the release's config.json (`_class_name` "WanXModel",
 * the keys the vLLM-Omni raw loader reads, plus the diffusers-style extras
 * of spec 4.1 and the streaming settings).
 *
 * Returns: (transfer full): pretty-printed JSON.
 */
char *
lingbot_dit_config_to_json (const LingbotDitConfig * cfg)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
#define KS(k, v) json_builder_set_member_name (b, k); json_builder_add_string_value (b, v)
#define KI(k, v) json_builder_set_member_name (b, k); json_builder_add_int_value (b, v)
  KS ("_class_name", "WanXModel");
  KS ("model_type", "i2v");
  json_builder_set_member_name (b, "patch_size");
  json_builder_begin_array (b);
  for (int i = 0; i < 3; i++)
    json_builder_add_int_value (b, cfg->patch[i]);
  json_builder_end_array (b);
  KI ("text_len", 512);
  KI ("in_dim", cfg->in_dim);
  KI ("dim", cfg->dim);
  KI ("ffn_dim", cfg->ffn_dim);
  KI ("freq_dim", cfg->freq_dim);
  KI ("text_dim", cfg->text_dim);
  KI ("out_dim", cfg->out_dim);
  KI ("num_heads", cfg->num_heads);
  KI ("num_layers", cfg->num_layers);
  KI ("local_attn_size", cfg->local_attn_frames);
  KI ("sink_size", cfg->sink_frames);
  KI ("chunk_size", cfg->chunk_frames);
  /* only when set: the release's config.json has no such key */
  if (cfg->max_attention_size != 0) {
    KI ("max_attention_size", cfg->max_attention_size);
  }
  KS ("control_type", "cam");
  KI ("control_in_features", cfg->control_in_features);
  json_builder_set_member_name (b, "qk_norm");
  json_builder_add_boolean_value (b, TRUE);
  json_builder_set_member_name (b, "cross_attn_norm");
  json_builder_add_boolean_value (b, TRUE);
  json_builder_set_member_name (b, "eps");
  json_builder_add_double_value (b, cfg->eps);
#undef KS
#undef KI
  json_builder_end_object (b);
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  return json_to_string (root, TRUE);
}

static gboolean
json_int (JsonObject * o, const char *key, int *out)
{
  if (!json_object_has_member (o, key))
    return FALSE;
  JsonNode *n = json_object_get_member (o, key);
  if (!JSON_NODE_HOLDS_VALUE (n))
    return FALSE;
  GType t = json_node_get_value_type (n);
  if (t == G_TYPE_INT64)
    *out = (int) json_node_get_int (n);
  else if (t == G_TYPE_DOUBLE)
    *out = (int) json_node_get_double (n);
  else
    return FALSE;
  return TRUE;
}

/* An int of LingbotDitConfig (@offset) and its config.json key; @alias:
 * the diffusers name, read when @key is absent. */
typedef struct
{
  const char *key, *alias;
  glong offset;
} DitJsonInt;

#define DIT_OFFSET(f) G_STRUCT_OFFSET (LingbotDitConfig, f)

static const DitJsonInt dit_json_ints[] = {
  {"dim", NULL, DIT_OFFSET (dim)},
  {"num_heads", "num_attention_heads", DIT_OFFSET (num_heads)},
  {"num_layers", NULL, DIT_OFFSET (num_layers)},
  {"ffn_dim", NULL, DIT_OFFSET (ffn_dim)},
  {"freq_dim", NULL, DIT_OFFSET (freq_dim)},
  {"in_dim", "in_channels", DIT_OFFSET (in_dim)},
  {"out_dim", "out_channels", DIT_OFFSET (out_dim)},
  {"text_dim", NULL, DIT_OFFSET (text_dim)},
  {"control_in_features", NULL, DIT_OFFSET (control_in_features)},
  {"local_attn_size", NULL, DIT_OFFSET (local_attn_frames)},
  {"sink_size", NULL, DIT_OFFSET (sink_frames)},
  {"chunk_size", NULL, DIT_OFFSET (chunk_frames)},
  {"max_attention_size", NULL, DIT_OFFSET (max_attention_size)},
};

/**
 * lingbot_dit_config_merge_json:
 * @cfg: (inout): a configuration to update
 * @json: a config.json text (the release's `WanXModel` keys; diffusers
 *   names num_attention_heads / in_channels / out_channels are accepted)
 * @error: %LB_ERROR_FORMAT when @json does not parse to an object
 *
 * Sets every field the JSON has and leaves the others alone.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_config_merge_json (LingbotDitConfig * cfg, const char *json,
    GError ** error)
{
  g_autoptr (JsonParser) p = json_parser_new ();
  g_autoptr (GError) err = NULL;
  if (!json_parser_load_from_data (p, json, -1, &err) ||
      !JSON_NODE_HOLDS_OBJECT (json_parser_get_root (p))) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "DiT config: not a JSON object%s%s", err ? ": " : "",
        err ? err->message : "");
    return FALSE;
  }
  JsonObject *o = json_node_get_object (json_parser_get_root (p));
  for (guint i = 0; i < G_N_ELEMENTS (dit_json_ints); i++) {
    const DitJsonInt *k = &dit_json_ints[i];
    int *v = &G_STRUCT_MEMBER (int, cfg, k->offset);
    if (!json_int (o, k->key, v) && k->alias)
      json_int (o, k->alias, v);
  }
  if (json_object_has_member (o, "eps")) {
    JsonNode *n = json_object_get_member (o, "eps");
    if (JSON_NODE_HOLDS_VALUE (n))
      cfg->eps = json_node_get_double (n);
  }
  if (json_object_has_member (o, "patch_size")) {
    JsonNode *n = json_object_get_member (o, "patch_size");
    if (JSON_NODE_HOLDS_ARRAY (n)) {
      JsonArray *a = json_node_get_array (n);
      for (guint i = 0; i < 3 && i < json_array_get_length (a); i++)
        cfg->patch[i] = (int) json_array_get_int_element (a, i);
    }
  }
  return TRUE;
}

static const LbTensor *
infer_tensor (LingbotCheckpoint * ckpt, const char *name, int ndim,
    GError ** error)
{
  const LbTensor *t = lingbot_checkpoint_get_checked (ckpt, name, ndim, NULL,
      LINGBOT_DTYPE_ANY, error);
  if (t == NULL && error && *error)
    g_prefix_error (error, "DiT config inference: ");
  return t;
}

static gboolean
check_against (const char *key, int from_config, int from_shapes,
    const char *tensor, GError ** error)
{
  if (from_config == from_shapes)
    return TRUE;
  g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
      "DiT config: %s is %d but tensor %s says %d", key, from_config, tensor,
      from_shapes);
  return FALSE;
}

/* A field lingbot_dit_config_from_checkpoint() reads off the tensor
 * shapes: extent @axis of @tensor (@ndim dims) divided by @div; @checked:
 * a config's value must agree with it. */
typedef struct
{
  const char *key;
  glong offset;                 /* of the int in LingbotDitConfig */
  const char *tensor;           /* NULL: the layer count, from the names */
  int ndim, axis, div;
  gboolean checked;
} DitShapeField;

#define DIT_FIELD(f) #f, DIT_OFFSET (f)

/* in the order the tensors are looked up (the first missing one is the
 * error) */
static const DitShapeField dit_shape_fields[] = {
  {DIT_FIELD (dim), "patch_embedding.weight", 5, 0, 1, TRUE},
  {DIT_FIELD (in_dim), "patch_embedding.weight", 5, 1, 1, TRUE},
  /* taken from the shapes whatever a config says */
  {DIT_FIELD (control_in_features), "patch_embedding_wancamctrl.weight", 2,
      1, 1, FALSE},
  {DIT_FIELD (ffn_dim), "blocks.0.ffn.0.weight", 2, 0, 1, TRUE},
  {DIT_FIELD (text_dim), "text_embedding.0.weight", 2, 1, 1, TRUE},
  /* out_dim times the patch volume (1 x 2 x 2) */
  {DIT_FIELD (out_dim), "head.head.bias", 1, 0, 4, TRUE},
  {DIT_FIELD (freq_dim), "time_embedding.0.weight", 2, 1, 1, TRUE},
  {DIT_FIELD (num_layers), NULL, 0, 0, 1, TRUE},
};

#define DIT_SHAPE(cfg, f) G_STRUCT_MEMBER (int, (cfg), (f)->offset)

/* The fields of dit_shape_fields as @ckpt's tensors give them, in @sh. */
static gboolean
shapes_from_checkpoint (LingbotCheckpoint * ckpt, LingbotDitConfig * sh,
    GError ** error)
{
  for (guint i = 0; i < G_N_ELEMENTS (dit_shape_fields); i++) {
    const DitShapeField *f = &dit_shape_fields[i];
    if (f->tensor == NULL)
      continue;
    const LbTensor *t = infer_tensor (ckpt, f->tensor, f->ndim, error);
    if (!t)
      return FALSE;
    DIT_SHAPE (sh, f) = (int) (t->shape[f->axis] / f->div);
  }
  guint n;
  const char *const *names = lingbot_checkpoint_list_tensors (ckpt, &n);
  for (guint i = 0; i < n; i++) {
    if (g_str_has_prefix (names[i], "blocks.")) {
      int b = atoi (names[i] + 7);
      sh->num_layers = MAX (sh->num_layers, b + 1);
    }
  }
  return TRUE;
}

/* Sets the fields of dit_shape_fields in @cfg to those of @sh. */
static void
take_shapes (LingbotDitConfig * cfg, const LingbotDitConfig * sh)
{
  for (guint i = 0; i < G_N_ELEMENTS (dit_shape_fields); i++)
    DIT_SHAPE (cfg, &dit_shape_fields[i]) =
        DIT_SHAPE (sh, &dit_shape_fields[i]);
}

/* Whether the checked fields of @cfg agree with the shapes @sh. */
static gboolean
check_shapes (const LingbotDitConfig * cfg, const LingbotDitConfig * sh,
    GError ** error)
{
  for (guint i = 0; i < G_N_ELEMENTS (dit_shape_fields); i++) {
    const DitShapeField *f = &dit_shape_fields[i];
    if (f->checked && !check_against (f->key, DIT_SHAPE (cfg, f),
            DIT_SHAPE (sh, f), f->tensor ? f->tensor : "blocks.N.*", error))
      return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_dit_config_from_checkpoint:
 * @ckpt: an open checkpoint
 * @config_json: (nullable): the release's config.json text; when %NULL the
 *   checkpoint's `config` metadata is used if present
 * @cfg: (out): the configuration
 * @error: %LB_ERROR_NOT_FOUND for a missing structural tensor,
 *   %LB_ERROR_SHAPE when the config contradicts the shapes,
 *   %LB_ERROR_INVALID_ARGUMENT for an unusable result
 *
 * Infers dim, in/out channels, FFN, text dim, control in-features and the
 * layer count from shapes (golden README 0.1), then takes the head count,
 * freq dim, eps and the streaming settings from the config.  Without any
 * config the heads default to dim / 128 (40 for the 14B, 12 for the 1.3B).
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_config_from_checkpoint (LingbotCheckpoint * ckpt,
    const char *config_json, LingbotDitConfig * cfg, GError ** error)
{
  LingbotDitConfig c;
  lingbot_dit_config_init_preset (&c, LINGBOT_DIT_PRESET_14B);
  c.num_heads = 0;

  /* what the shapes say */
  LingbotDitConfig sh = { 0 };
  if (!shapes_from_checkpoint (ckpt, &sh, error))
    return FALSE;

  const char *meta = config_json;
  if (meta == NULL)
    meta = lingbot_checkpoint_get_metadata_value (ckpt, "config");
  if (meta) {
    LingbotDitConfig j = c;
    take_shapes (&j, &sh);
    if (!lingbot_dit_config_merge_json (&j, meta, error))
      return FALSE;
    if (!check_shapes (&j, &sh, error))
      return FALSE;
    c = j;
  }
  take_shapes (&c, &sh);
  int dim = sh.dim;
  if (c.num_heads <= 0) {
    /* not in the weights; the releases use head dim 128 (14B: 40 heads,
     * 1.3B: 12) */
    if (dim % LINGBOT_DIT_DEFAULT_HEAD_DIM != 0) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "DiT config: no num_heads in the config and dim %d is not a "
          "multiple of the default head dim %d", dim,
          LINGBOT_DIT_DEFAULT_HEAD_DIM);
      return FALSE;
    }
    c.num_heads = dim / LINGBOT_DIT_DEFAULT_HEAD_DIM;
  }
  if (!lingbot_dit_config_validate (&c, error))
    return FALSE;
  *cfg = c;
  return TRUE;
}

/* ------------------------------------------------------------------------ */
/* weight table                                                             */
/* ------------------------------------------------------------------------ */

static const char *const block_linears[] = {
  "self_attn.q", "self_attn.k", "self_attn.v", "self_attn.o",
};

/* blocks.@l.@group<name>.weight (and .bias when @bias) for each of the
 * @n @names. */
static void
add_block_params (GPtrArray * a, int l, const char *group,
    const char *const *names, guint n, gboolean bias)
{
  for (guint i = 0; i < n; i++) {
    g_ptr_array_add (a, g_strdup_printf ("blocks.%d.%s%s.weight", l, group,
            names[i]));
    if (bias)
      g_ptr_array_add (a, g_strdup_printf ("blocks.%d.%s%s.bias", l, group,
              names[i]));
  }
}

/**
 * lingbot_dit_weight_names:
 * @cfg: a configuration
 *
 * Returns: (transfer full) (element-type utf8): the 21 + 35 * L tensor
 * names of spec 4.2 in the reference state-dict order.
 */
GPtrArray *
lingbot_dit_weight_names (const LingbotDitConfig * cfg)
{
  GPtrArray *a = g_ptr_array_new_with_free_func (g_free);
  static const char *const top[] = {
    "patch_embedding", "patch_embedding_wancamctrl",
    "c2ws_hidden_states_layer1", "c2ws_hidden_states_layer2",
    "text_embedding.0", "text_embedding.2", "time_embedding.0",
    "time_embedding.2", "time_projection.1",
  };
  for (guint i = 0; i < G_N_ELEMENTS (top); i++) {
    g_ptr_array_add (a, g_strconcat (top[i], ".weight", NULL));
    g_ptr_array_add (a, g_strconcat (top[i], ".bias", NULL));
  }
  static const char *const norms[] = { "norm_q", "norm_k" };
  static const char *const ca[] = { "q", "k", "v", "o" };
  static const char *const norm3[] = { "norm3" };
  static const char *const rest[] = {
    "ffn.0", "ffn.2", "cam_injector_layer1", "cam_injector_layer2",
    "cam_scale_layer", "cam_shift_layer",
  };
  for (int l = 0; l < cfg->num_layers; l++) {
    g_ptr_array_add (a, g_strdup_printf ("blocks.%d.modulation", l));
    add_block_params (a, l, "", block_linears, G_N_ELEMENTS (block_linears),
        TRUE);
    add_block_params (a, l, "self_attn.", norms, G_N_ELEMENTS (norms), FALSE);
    add_block_params (a, l, "cross_attn.", ca, G_N_ELEMENTS (ca), TRUE);
    add_block_params (a, l, "cross_attn.", norms, G_N_ELEMENTS (norms), FALSE);
    add_block_params (a, l, "", norm3, G_N_ELEMENTS (norm3), TRUE);
    add_block_params (a, l, "", rest, G_N_ELEMENTS (rest), TRUE);
  }
  g_ptr_array_add (a, g_strdup ("head.modulation"));
  g_ptr_array_add (a, g_strdup ("head.head.weight"));
  g_ptr_array_add (a, g_strdup ("head.head.bias"));
  return a;
}

static gboolean
set_shape (int *ndim, int64_t * shape, int n, int64_t a, int64_t b)
{
  *ndim = n;
  shape[0] = a;
  shape[1] = b;
  return TRUE;
}

/**
 * lingbot_dit_weight_shape:
 * @cfg: a configuration
 * @name: a weight name of spec 4.2
 * @ndim: (out): its number of dimensions
 * @shape: (out) (array fixed-size=5): its shape
 *
 * Returns: %FALSE when @name is not a DiT weight of @cfg.
 */
gboolean
lingbot_dit_weight_shape (const LingbotDitConfig * cfg, const char *name,
    int *ndim, int64_t * shape)
{
  const int64_t d = cfg->dim;
  const gboolean w = g_str_has_suffix (name, ".weight");
  const gboolean b = g_str_has_suffix (name, ".bias");

  if (strcmp (name, "patch_embedding.weight") == 0) {
    *ndim = 5;
    shape[0] = d;
    shape[1] = cfg->in_dim;
    shape[2] = cfg->patch[0];
    shape[3] = cfg->patch[1];
    shape[4] = cfg->patch[2];
    return TRUE;
  }
  if (strcmp (name, "head.modulation") == 0) {
    *ndim = 3;
    shape[0] = 1;
    shape[1] = 2;
    shape[2] = d;
    return TRUE;
  }
  if (g_str_has_prefix (name, "head.head."))
    return w ? set_shape (ndim, shape, 2, head_features (cfg), d) :
        b ? set_shape (ndim, shape, 1, head_features (cfg), 0) : FALSE;
  if (g_str_has_prefix (name, "blocks.")) {
    char *end = NULL;
    gint64 l = g_ascii_strtoll (name + 7, &end, 10);
    if (end == name + 7 || *end != '.' || l < 0 || l >= cfg->num_layers)
      return FALSE;
    const char *rest = end + 1;
    if (strcmp (rest, "modulation") == 0) {
      *ndim = 3;
      shape[0] = 1;
      shape[1] = 6;
      shape[2] = d;
      return TRUE;
    }
    if (g_str_has_suffix (rest, "norm_q.weight") ||
        g_str_has_suffix (rest, "norm_k.weight") ||
        strcmp (rest, "norm3.weight") == 0 || strcmp (rest, "norm3.bias") == 0)
      return (g_str_has_prefix (rest, "self_attn.") ||
          g_str_has_prefix (rest, "cross_attn.") ||
          g_str_has_prefix (rest, "norm3.")) ?
          set_shape (ndim, shape, 1, d, 0) : FALSE;
    static const char *const lin[] = {
      "self_attn.q.", "self_attn.k.", "self_attn.v.", "self_attn.o.",
      "cross_attn.q.", "cross_attn.k.", "cross_attn.v.", "cross_attn.o.",
      "cam_injector_layer1.", "cam_injector_layer2.", "cam_scale_layer.",
      "cam_shift_layer.",
    };
    for (guint i = 0; i < G_N_ELEMENTS (lin); i++) {
      if (g_str_has_prefix (rest, lin[i]) &&
          (strcmp (rest + strlen (lin[i]), "weight") == 0 ||
              strcmp (rest + strlen (lin[i]), "bias") == 0))
        return w ? set_shape (ndim, shape, 2, d, d) :
            set_shape (ndim, shape, 1, d, 0);
    }
    if (strcmp (rest, "ffn.0.weight") == 0)
      return set_shape (ndim, shape, 2, cfg->ffn_dim, d);
    if (strcmp (rest, "ffn.0.bias") == 0)
      return set_shape (ndim, shape, 1, cfg->ffn_dim, 0);
    if (strcmp (rest, "ffn.2.weight") == 0)
      return set_shape (ndim, shape, 2, d, cfg->ffn_dim);
    if (strcmp (rest, "ffn.2.bias") == 0)
      return set_shape (ndim, shape, 1, d, 0);
    return FALSE;
  }
  static const struct
  {
    const char *prefix;
    int in_kind;                /* 0: D, 1: ctl, 2: text, 3: freq */
    int out_mult;
  } top[] = {
    {"patch_embedding.", 0, 1},
    {"patch_embedding_wancamctrl.", 1, 1},
    {"c2ws_hidden_states_layer1.", 0, 1},
    {"c2ws_hidden_states_layer2.", 0, 1},
    {"text_embedding.0.", 2, 1},
    {"text_embedding.2.", 0, 1},
    {"time_embedding.0.", 3, 1},
    {"time_embedding.2.", 0, 1},
    {"time_projection.1.", 0, 6},
  };
  for (guint i = 0; i < G_N_ELEMENTS (top); i++) {
    size_t pl = strlen (top[i].prefix);
    if (strncmp (name, top[i].prefix, pl) != 0)
      continue;
    const char *rest = name + pl;
    if (strcmp (rest, "weight") != 0 && strcmp (rest, "bias") != 0)
      continue;
    int64_t in = top[i].in_kind == 1 ? cfg->control_in_features :
        top[i].in_kind == 2 ? cfg->text_dim :
        top[i].in_kind == 3 ? cfg->freq_dim : d;
    if (i == 0 && w)
      continue;                 /* handled above (5-D) */
    return w ? set_shape (ndim, shape, 2, d * top[i].out_mult, in) :
        set_shape (ndim, shape, 1, d * top[i].out_mult, 0);
  }
  return FALSE;
}

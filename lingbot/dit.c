/* lingbot-gst: LingBot-World v2 causal DiT: configuration and weights
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Configuration comes from the checkpoint's config.json when there is one
 * (or the `config` entry of a safetensors file's metadata, as the golden
 * fixtures carry it), else it is inferred from tensor shapes the way the
 * reference converter `from_official` does (golden README 0.1).  The head
 * count cannot be inferred; without a config it defaults to dim / 128
 * (40 for the 14B, 12 for the 1.3B).
 */
#include "lingbot/dit-private.h"
#include "lingbot/dummy.h"

#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

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
lingbot_dit_config_init_preset (LingbotDitConfig * cfg,
    LingbotDitPreset preset)
{
  memset (cfg, 0, sizeof (*cfg));
  config_common (cfg);
  switch (preset) {
    case LINGBOT_DIT_PRESET_14B:
      cfg->dim = 5120;
      cfg->num_layers = 40;
      cfg->num_heads = 40;
      cfg->ffn_dim = 13824;
      cfg->text_dim = 4096;
      break;
    case LINGBOT_DIT_PRESET_1_3B:
      cfg->dim = 1536;
      cfg->num_layers = 30;
      cfg->num_heads = 12;
      cfg->ffn_dim = 8960;
      cfg->text_dim = 4096;
      break;
    case LINGBOT_DIT_PRESET_DEMO:
      cfg->dim = 128;
      cfg->num_layers = 3;
      cfg->num_heads = 4;
      cfg->ffn_dim = 256;
      cfg->text_dim = 64;
      break;
    case LINGBOT_DIT_PRESET_TINY:
    default:
      cfg->dim = 64;
      cfg->num_layers = 2;
      cfg->num_heads = 2;
      cfg->ffn_dim = 128;
      cfg->text_dim = 32;
      cfg->local_attn_frames = 6;
      cfg->sink_frames = 2;
      cfg->chunk_frames = 2;
      break;
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
  if (g_ascii_strcasecmp (name, "14b") == 0)
    *preset = LINGBOT_DIT_PRESET_14B;
  else if (g_ascii_strcasecmp (name, "1.3b") == 0 ||
      g_ascii_strcasecmp (name, "1_3b") == 0)
    *preset = LINGBOT_DIT_PRESET_1_3B;
  else if (g_ascii_strcasecmp (name, "tiny") == 0)
    *preset = LINGBOT_DIT_PRESET_TINY;
  else if (g_ascii_strcasecmp (name, "demo") == 0)
    *preset = LINGBOT_DIT_PRESET_DEMO;
  else
    return FALSE;
  return TRUE;
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
  guint64 top = d * patch_features (cfg) + d        /* patch */
      + d * cfg->control_in_features + d        /* camera patch */
      + 2 * (d * d + d)         /* c2ws 1, 2 */
      + d * cfg->text_dim + d + d * d + d       /* text */
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
  json_int (o, "dim", &cfg->dim);
  if (!json_int (o, "num_heads", &cfg->num_heads))
    json_int (o, "num_attention_heads", &cfg->num_heads);
  json_int (o, "num_layers", &cfg->num_layers);
  json_int (o, "ffn_dim", &cfg->ffn_dim);
  json_int (o, "freq_dim", &cfg->freq_dim);
  if (!json_int (o, "in_dim", &cfg->in_dim))
    json_int (o, "in_channels", &cfg->in_dim);
  if (!json_int (o, "out_dim", &cfg->out_dim))
    json_int (o, "out_channels", &cfg->out_dim);
  json_int (o, "text_dim", &cfg->text_dim);
  json_int (o, "control_in_features", &cfg->control_in_features);
  json_int (o, "local_attn_size", &cfg->local_attn_frames);
  json_int (o, "sink_size", &cfg->sink_frames);
  json_int (o, "chunk_size", &cfg->chunk_frames);
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

  const LbTensor *pe = infer_tensor (ckpt, "patch_embedding.weight", 5, error);
  if (!pe)
    return FALSE;
  const LbTensor *ce = infer_tensor (ckpt, "patch_embedding_wancamctrl.weight",
      2, error);
  if (!ce)
    return FALSE;
  const LbTensor *f0 = infer_tensor (ckpt, "blocks.0.ffn.0.weight", 2, error);
  if (!f0)
    return FALSE;
  const LbTensor *te = infer_tensor (ckpt, "text_embedding.0.weight", 2, error);
  if (!te)
    return FALSE;
  const LbTensor *hb = infer_tensor (ckpt, "head.head.bias", 1, error);
  if (!hb)
    return FALSE;
  const LbTensor *tm = infer_tensor (ckpt, "time_embedding.0.weight", 2, error);
  if (!tm)
    return FALSE;

  int dim = (int) pe->shape[0], in_dim = (int) pe->shape[1];
  int ffn = (int) f0->shape[0], text = (int) te->shape[1];
  int out = (int) (hb->shape[0] / 4), ctl = (int) ce->shape[1];
  int freq = (int) tm->shape[1];
  int layers = 0;
  guint n;
  const char *const *names = lingbot_checkpoint_list_tensors (ckpt, &n);
  for (guint i = 0; i < n; i++) {
    if (g_str_has_prefix (names[i], "blocks.")) {
      int b = atoi (names[i] + 7);
      layers = MAX (layers, b + 1);
    }
  }

  const char *meta = config_json;
  if (meta == NULL)
    meta = lingbot_checkpoint_get_metadata_value (ckpt, "config");
  if (meta) {
    LingbotDitConfig j = c;
    j.dim = dim;
    j.in_dim = in_dim;
    j.ffn_dim = ffn;
    j.text_dim = text;
    j.out_dim = out;
    j.control_in_features = ctl;
    j.num_layers = layers;
    j.freq_dim = freq;
    if (!lingbot_dit_config_merge_json (&j, meta, error))
      return FALSE;
    if (!check_against ("dim", j.dim, dim, "patch_embedding.weight", error) ||
        !check_against ("in_dim", j.in_dim, in_dim, "patch_embedding.weight",
            error) ||
        !check_against ("ffn_dim", j.ffn_dim, ffn, "blocks.0.ffn.0.weight",
            error) ||
        !check_against ("text_dim", j.text_dim, text,
            "text_embedding.0.weight", error) ||
        !check_against ("out_dim", j.out_dim, out, "head.head.bias", error) ||
        !check_against ("freq_dim", j.freq_dim, freq,
            "time_embedding.0.weight", error) ||
        !check_against ("num_layers", j.num_layers, layers, "blocks.N.*",
            error))
      return FALSE;
    c = j;
  }
  c.dim = dim;
  c.in_dim = in_dim;
  c.ffn_dim = ffn;
  c.text_dim = text;
  c.out_dim = out;
  c.control_in_features = ctl;
  c.num_layers = layers;
  c.freq_dim = freq;
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
  for (int l = 0; l < cfg->num_layers; l++) {
    g_ptr_array_add (a, g_strdup_printf ("blocks.%d.modulation", l));
    for (guint i = 0; i < G_N_ELEMENTS (block_linears); i++) {
      g_ptr_array_add (a, g_strdup_printf ("blocks.%d.%s.weight", l,
              block_linears[i]));
      g_ptr_array_add (a, g_strdup_printf ("blocks.%d.%s.bias", l,
              block_linears[i]));
    }
    g_ptr_array_add (a, g_strdup_printf ("blocks.%d.self_attn.norm_q.weight",
            l));
    g_ptr_array_add (a, g_strdup_printf ("blocks.%d.self_attn.norm_k.weight",
            l));
    static const char *const ca[] = { "q", "k", "v", "o" };
    for (guint i = 0; i < 4; i++) {
      g_ptr_array_add (a, g_strdup_printf ("blocks.%d.cross_attn.%s.weight", l,
              ca[i]));
      g_ptr_array_add (a, g_strdup_printf ("blocks.%d.cross_attn.%s.bias", l,
              ca[i]));
    }
    g_ptr_array_add (a, g_strdup_printf ("blocks.%d.cross_attn.norm_q.weight",
            l));
    g_ptr_array_add (a, g_strdup_printf ("blocks.%d.cross_attn.norm_k.weight",
            l));
    g_ptr_array_add (a, g_strdup_printf ("blocks.%d.norm3.weight", l));
    g_ptr_array_add (a, g_strdup_printf ("blocks.%d.norm3.bias", l));
    static const char *const rest[] = {
      "ffn.0", "ffn.2", "cam_injector_layer1", "cam_injector_layer2",
      "cam_scale_layer", "cam_shift_layer",
    };
    for (guint i = 0; i < G_N_ELEMENTS (rest); i++) {
      g_ptr_array_add (a, g_strdup_printf ("blocks.%d.%s.weight", l, rest[i]));
      g_ptr_array_add (a, g_strdup_printf ("blocks.%d.%s.bias", l, rest[i]));
    }
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

/* ------------------------------------------------------------------------ */
/* loading                                                                  */
/* ------------------------------------------------------------------------ */

static gboolean
check_finite (const char *path, const char *name, const LbTensor * t,
    GError ** error)
{
  const float *p = t->data;
  int64_t n = lb_tensor_numel (t);
  for (int64_t i = 0; i < n; i++) {
    if (G_UNLIKELY (!isfinite (p[i]))) {
      g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
          "DiT checkpoint %s: tensor %s has a non-finite value (%s) at "
          "element %" G_GINT64_FORMAT, path, name,
          isnan (p[i]) ? "NaN" : "Inf", i);
      return FALSE;
    }
  }
  return TRUE;
}

static LbTensor *
load_one (LingbotDit * dit, LingbotCheckpoint * ckpt, const char *name,
    LingbotDitLoadFlags flags, GError ** error)
{
  const char *path = lingbot_checkpoint_get_path (ckpt);
  int ndim = 0;
  int64_t shape[LB_MAX_DIMS] = { 0 };
  if (!lingbot_dit_weight_shape (&dit->cfg, name, &ndim, shape)) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "DiT: %s is not a weight name", name);
    return NULL;
  }
  if (!lingbot_checkpoint_has_tensor (ckpt, name)) {
    g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND,
        "DiT checkpoint %s: tensor %s is missing", path, name);
    return NULL;
  }
  const LbTensor *src = lingbot_checkpoint_get (ckpt, name, NULL);
  gboolean same = src->ndim == ndim;
  for (int i = 0; same && i < ndim; i++)
    same = src->shape[i] == shape[i];
  if (!same) {
    g_autofree char *have = lb_tensor_shape_string (src);
    g_autofree char *want = lb_shape_string (ndim, shape);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT checkpoint %s: tensor %s has shape %s, expected %s", path, name,
        have, want);
    return NULL;
  }
  if (src->dtype != LB_DTYPE_F32 && src->dtype != LB_DTYPE_BF16 &&
      src->dtype != LB_DTYPE_F16 && src->dtype != LB_DTYPE_F64) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT checkpoint %s: tensor %s has dtype %s, expected a float type",
        path, name, lb_dtype_name (src->dtype));
    return NULL;
  }
  LbTensor *t = lb_tensor_to_f32 (src);
  if (!(flags & LINGBOT_DIT_LOAD_NO_NAN_CHECK) &&
      !check_finite (path, name, t, error)) {
    lb_tensor_free (t);
    return NULL;
  }
  g_hash_table_insert (dit->by_name, g_strdup (name), t);
  return t;
}

static gboolean
bind_linear (LingbotDit * dit, const char *prefix, LingbotDitLinear * lin)
{
  g_autofree char *wn = g_strconcat (prefix, ".weight", NULL);
  g_autofree char *bn = g_strconcat (prefix, ".bias", NULL);
  lin->w = g_hash_table_lookup (dit->by_name, wn);
  lin->b = g_hash_table_lookup (dit->by_name, bn);
  return lin->w && lin->b;
}

static LbTensor *
bind (LingbotDit * dit, const char *name)
{
  return g_hash_table_lookup (dit->by_name, name);
}

/* Flattens an N-D weight in place (the descriptors are ours). */
static void
flatten_to_2d (LbTensor * t, int64_t rows)
{
  int64_t n = lb_tensor_numel (t);
  t->ndim = 2;
  t->shape[0] = rows;
  t->shape[1] = n / rows;
  lb_contiguous_strides (2, t->shape, t->stride);
}

static void
bind_all (LingbotDit * dit)
{
  const int64_t d = dit->cfg.dim;
  bind_linear (dit, "patch_embedding", &dit->w.patch);
  flatten_to_2d (dit->w.patch.w, d);
  bind_linear (dit, "patch_embedding_wancamctrl", &dit->w.ctl_patch);
  bind_linear (dit, "c2ws_hidden_states_layer1", &dit->w.c2ws1);
  bind_linear (dit, "c2ws_hidden_states_layer2", &dit->w.c2ws2);
  bind_linear (dit, "text_embedding.0", &dit->w.text0);
  bind_linear (dit, "text_embedding.2", &dit->w.text2);
  bind_linear (dit, "time_embedding.0", &dit->w.time0);
  bind_linear (dit, "time_embedding.2", &dit->w.time2);
  bind_linear (dit, "time_projection.1", &dit->w.time_proj);
  bind_linear (dit, "head.head", &dit->w.head);
  dit->w.head_modulation = bind (dit, "head.modulation");
  flatten_to_2d (dit->w.head_modulation, 2);
  dit->w.blocks = g_new0 (LingbotDitBlock, dit->cfg.num_layers);
  for (int l = 0; l < dit->cfg.num_layers; l++) {
    LingbotDitBlock *b = &dit->w.blocks[l];
    char p[64];
#define LIN(field, n) g_snprintf (p, sizeof p, "blocks.%d." n, l); \
    bind_linear (dit, p, &b->field)
#define ONE(field, n) g_snprintf (p, sizeof p, "blocks.%d." n, l); \
    b->field = bind (dit, p)
    ONE (modulation, "modulation");
    flatten_to_2d (b->modulation, 6);
    LIN (sa_q, "self_attn.q");
    LIN (sa_k, "self_attn.k");
    LIN (sa_v, "self_attn.v");
    LIN (sa_o, "self_attn.o");
    ONE (sa_norm_q, "self_attn.norm_q.weight");
    ONE (sa_norm_k, "self_attn.norm_k.weight");
    ONE (norm3_w, "norm3.weight");
    ONE (norm3_b, "norm3.bias");
    LIN (ca_q, "cross_attn.q");
    LIN (ca_k, "cross_attn.k");
    LIN (ca_v, "cross_attn.v");
    LIN (ca_o, "cross_attn.o");
    ONE (ca_norm_q, "cross_attn.norm_q.weight");
    ONE (ca_norm_k, "cross_attn.norm_k.weight");
    LIN (ffn0, "ffn.0");
    LIN (ffn2, "ffn.2");
    LIN (cam1, "cam_injector_layer1");
    LIN (cam2, "cam_injector_layer2");
    LIN (cam_scale, "cam_scale_layer");
    LIN (cam_shift, "cam_shift_layer");
#undef LIN
#undef ONE
  }
}

/**
 * lingbot_dit_load_checkpoint:
 * @ckpt: an open checkpoint (single file, sharded set or fixture file)
 * @cfg: (nullable): the configuration; %NULL infers it
 *   (lingbot_dit_config_from_checkpoint() with the checkpoint's metadata)
 * @flags: #LingbotDitLoadFlags
 * @error: %LB_ERROR_NOT_FOUND "DiT checkpoint P: tensor N is missing",
 *   %LB_ERROR_SHAPE "... tensor N has shape [a], expected [b]",
 *   %LB_ERROR_FORMAT "... tensor N has a non-finite value (NaN) at element i"
 *   or "... unexpected tensor N" (strict)
 *
 * Reads the 21 + 35 L weights of spec 4.2, widening bf16/f16 to float32
 * once (the CPU backend computes in float32).
 *
 * Returns: (transfer full) (nullable): the model.
 */
LingbotDit *
lingbot_dit_load_checkpoint (LingbotCheckpoint * ckpt,
    const LingbotDitConfig * cfg, LingbotDitLoadFlags flags, GError ** error)
{
  LingbotDitConfig c;
  if (cfg) {
    c = *cfg;
    if (!lingbot_dit_config_validate (&c, error))
      return NULL;
  } else if (!lingbot_dit_config_from_checkpoint (ckpt, NULL, &c, error)) {
    return NULL;
  }

  LingbotDit *dit = g_new0 (LingbotDit, 1);
  dit->ref_count = 1;
  dit->cfg = c;
  dit->path = g_strdup (lingbot_checkpoint_get_path (ckpt));
  dit->by_name = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
      (GDestroyNotify) lb_tensor_free);

  if (flags & LINGBOT_DIT_LOAD_STRICT) {
    guint n;
    const char *const *names = lingbot_checkpoint_list_tensors (ckpt, &n);
    for (guint i = 0; i < n; i++) {
      int nd;
      int64_t sh[LB_MAX_DIMS];
      if (!lingbot_dit_weight_shape (&c, names[i], &nd, sh)) {
        g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
            "DiT checkpoint %s: unexpected tensor %s", dit->path, names[i]);
        lingbot_dit_unref (dit);
        return NULL;
      }
    }
  }

  g_autoptr (GPtrArray) names = lingbot_dit_weight_names (&c);
  for (guint i = 0; i < names->len; i++) {
    if (!load_one (dit, ckpt, names->pdata[i], flags, error)) {
      lingbot_dit_unref (dit);
      return NULL;
    }
  }
  bind_all (dit);
  return dit;
}

/**
 * lingbot_dit_new_random:
 * @cfg: a configuration
 * @seed: weight seed
 * @error: %LB_ERROR_INVALID_ARGUMENT for an invalid @cfg
 *
 * A model with the weights lingbot_dit_write_random() would write (rounded
 * through bf16 as stored), built in memory: for benchmarks and tests.
 *
 * Returns: (transfer full) (nullable): the model.
 */
LingbotDit *
lingbot_dit_new_random (const LingbotDitConfig * cfg, guint64 seed,
    GError ** error)
{
  if (!lingbot_dit_config_validate (cfg, error))
    return NULL;
  /* drawn as float32 directly, on a thread pool (lingbot/dit-random.c) */
  GHashTable *by_name = lingbot_dit_random_weights (cfg, LB_DTYPE_BF16, seed,
      0, error);
  if (by_name == NULL)
    return NULL;
  LingbotDit *dit = g_new0 (LingbotDit, 1);
  dit->ref_count = 1;
  dit->cfg = *cfg;
  dit->path = g_strdup ("(random)");
  dit->by_name = by_name;
  bind_all (dit);
  return dit;
}

/* A release directory holds the DiT under transformers/; a DiT directory
 * holds shards, an index and config.json. */
static char *
resolve_dit_path (const char *path, char **config_path)
{
  char *p = g_strdup (path);
  if (g_file_test (p, G_FILE_TEST_IS_DIR)) {
    char *sub = g_build_filename (p, "transformers", NULL);
    if (g_file_test (sub, G_FILE_TEST_IS_DIR)) {
      g_free (p);
      p = sub;
    } else {
      g_free (sub);
    }
    *config_path = g_build_filename (p, "config.json", NULL);
  } else {
    g_autofree char *dir = g_path_get_dirname (p);
    *config_path = g_build_filename (dir, "config.json", NULL);
  }
  if (!g_file_test (*config_path, G_FILE_TEST_IS_REGULAR))
    g_clear_pointer (config_path, g_free);
  return p;
}

/* a dummy DiT's configuration: its config.json over the 14B preset */
static gboolean
dummy_config (const char *config_path, const char *config_text,
    LingbotDitConfig * cfg, GError ** error)
{
  lingbot_dit_config_init_preset (cfg, LINGBOT_DIT_PRESET_14B);
  if (!lingbot_dit_config_merge_json (cfg, config_text, error) ||
      !lingbot_dit_config_validate (cfg, error)) {
    g_prefix_error (error, "dummy DiT %s: ", config_path);
    return FALSE;
  }
  return TRUE;
}

/* A dummy DiT (lingbot/dummy.c): the configuration is the whole
 * config.json, the weights lingbot_dit_write_random() would write for its
 * seed and dtype, drawn in float32 on a thread pool. */
static LingbotDit *
dummy_dit (const char *config_path, const char *config_text,
    const LingbotDummy * d, GError ** error)
{
  LingbotDitConfig cfg;
  if (!dummy_config (config_path, config_text, &cfg, error))
    return NULL;
  /* the draw is float32 host memory: refuse what this machine cannot hold
   * rather than abort in the allocation (the config is untrusted input) */
  const guint64 bytes = lingbot_dit_config_n_params (&cfg) * 4;
  const long pages = sysconf (_SC_PHYS_PAGES), page = sysconf (_SC_PAGESIZE);
  const guint64 phys = pages > 0 && page > 0 ?
      (guint64) pages * (guint64) page : G_MAXUINT64;
  if (bytes > phys) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "dummy DiT %s: %" G_GUINT64_FORMAT " parameters need %.1f GB of "
        "host memory (float32), more than this machine's %.1f GB",
        config_path, bytes / 4, bytes / 1e9, phys / 1e9);
    return NULL;
  }
  GHashTable *by_name = lingbot_dit_random_weights (&cfg, d->dtype, d->seed,
      0, error);
  if (by_name == NULL)
    return NULL;
  LingbotDit *dit = g_new0 (LingbotDit, 1);
  dit->ref_count = 1;
  dit->cfg = cfg;
  dit->path = g_strdup (config_path);
  dit->by_name = by_name;
  bind_all (dit);
  return dit;
}

/**
 * lingbot_dit_load:
 * @path: a release directory (with `transformers/`), a DiT directory
 *   (`model-0000N-of-0000M.safetensors`, `model.safetensors.index.json`,
 *   `config.json`), an index file, or one safetensors file
 * @flags: #LingbotDitLoadFlags
 * @error: see lingbot_dit_load_checkpoint(); also the checkpoint reader's
 *   errors
 *
 * Opens the checkpoint, builds the configuration (config.json next to the
 * weights, else the file's `config` metadata, else shapes) and loads it.
 * A config.json with a `"lingbot_dummy": {"seed": S, "dtype": "bf16"}`
 * member is a dummy model (vLLM's load format "dummy"): no weight files
 * are read; the configuration comes from config.json alone (unset keys
 * keep the 14B preset's values) and the weights are the ones
 * lingbot_dit_write_random() writes for that seed and dtype, drawn in
 * memory (lingbot_dit_random_weights()).
 *
 * Returns: (transfer full) (nullable): the model.
 */
LingbotDit *
lingbot_dit_load (const char *path, LingbotDitLoadFlags flags,
    GError ** error)
{
  char *config_path = NULL;
  g_autofree char *p = resolve_dit_path (path, &config_path);
  g_autofree char *config_text = NULL;
  if (config_path) {
    gboolean ok = g_file_get_contents (config_path, &config_text, NULL, error);
    if (!ok) {
      g_free (config_path);
      return NULL;
    }
  }
  if (config_text) {
    LingbotDummy d;
    gboolean is_dummy;
    if (!lingbot_dummy_parse (config_text, config_path, &d, &is_dummy,
            error)) {
      g_free (config_path);
      return NULL;
    }
    if (is_dummy) {
      LingbotDit *dit = dummy_dit (config_path, config_text, &d, error);
      lingbot_dummy_clear (&d);
      g_free (config_path);
      return dit;
    }
  }
  g_free (config_path);

  g_autoptr (LingbotCheckpoint) ckpt = lingbot_checkpoint_open (p, error);
  if (!ckpt)
    return NULL;
  LingbotDitConfig cfg;
  if (!lingbot_dit_config_from_checkpoint (ckpt, config_text, &cfg, error))
    return NULL;
  return lingbot_dit_load_checkpoint (ckpt, &cfg, flags, error);
}

/**
 * lingbot_dit_load_config:
 * @path: as for lingbot_dit_load()
 * @cfg: (out): the configuration lingbot_dit_load() would build
 * @error: as lingbot_dit_load(), without the weight errors
 *
 * The model's configuration without its weights: a dummy model's
 * config.json alone; a checkpoint's shapes (the files are mapped, not
 * read) with its config.json.  For `lingbot-bench dit --estimate --model`.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_load_config (const char *path, LingbotDitConfig * cfg,
    GError ** error)
{
  char *config_path = NULL;
  g_autofree char *p = resolve_dit_path (path, &config_path);
  g_autofree char *config_text = NULL;
  g_autofree char *cp = config_path;
  if (cp && !g_file_get_contents (cp, &config_text, NULL, error))
    return FALSE;
  if (config_text) {
    LingbotDummy d;
    gboolean is_dummy;
    if (!lingbot_dummy_parse (config_text, cp, &d, &is_dummy, error))
      return FALSE;
    lingbot_dummy_clear (&d);
    if (is_dummy)
      return dummy_config (cp, config_text, cfg, error);
  }
  g_autoptr (LingbotCheckpoint) ckpt = lingbot_checkpoint_open (p, error);
  if (!ckpt)
    return FALSE;
  return lingbot_dit_config_from_checkpoint (ckpt, config_text, cfg, error);
}

/**
 * lingbot_dit_ref:
 * @dit: a model
 *
 * Returns: (transfer full): @dit
 */
LingbotDit *
lingbot_dit_ref (LingbotDit * dit)
{
  g_atomic_int_inc (&dit->ref_count);
  return dit;
}

/**
 * lingbot_dit_unref:
 * @dit: (transfer full): a model
 */
void
lingbot_dit_unref (LingbotDit * dit)
{
  if (dit == NULL || !g_atomic_int_dec_and_test (&dit->ref_count))
    return;
  g_hash_table_unref (dit->by_name);
  g_free (dit->w.blocks);
  g_free (dit->path);
  g_free (dit);
}

/**
 * lingbot_dit_get_config:
 * @dit: a model
 *
 * Returns: (transfer none): its configuration.
 */
const LingbotDitConfig *
lingbot_dit_get_config (const LingbotDit * dit)
{
  return &dit->cfg;
}

/**
 * lingbot_dit_get_weight:
 * @dit: a model
 * @name: a checkpoint key
 *
 * Returns: (transfer none) (nullable): the float32 weight (2-D for the
 * patch embedding and the modulations).
 */
const LbTensor *
lingbot_dit_get_weight (const LingbotDit * dit, const char *name)
{
  return g_hash_table_lookup (dit->by_name, name);
}

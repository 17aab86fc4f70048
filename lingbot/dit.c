/* lingbot-gst: LingBot-World v2 causal DiT: loading the weights
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Reads the weights of spec 4.2 from a checkpoint (or draws them for a
 * dummy or random model, dit-random.c), checked against the configuration
 * and weight table of dit-config.c, and binds them into the forward's
 * layout (LingbotDitWeights).
 */
#include "lingbot/dit-private.h"
#include "lingbot/dummy.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

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

/* a model of @cfg whose weights are @by_name (taken), not yet bound */
static LingbotDit *
dit_new (const LingbotDitConfig * cfg, const char *path, GHashTable * by_name)
{
  LingbotDit *dit = g_atomic_rc_box_new0 (LingbotDit);
  dit->cfg = *cfg;
  dit->path = g_strdup (path);
  dit->by_name = by_name;
  return dit;
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

  LingbotDit *dit = dit_new (&c, lingbot_checkpoint_get_path (ckpt),
      g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
          (GDestroyNotify) lb_tensor_free));

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
  LingbotDit *dit = dit_new (cfg, "(random)", by_name);
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
  LingbotDit *dit = dit_new (&cfg, config_path, by_name);
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
lingbot_dit_load (const char *path, LingbotDitLoadFlags flags, GError ** error)
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
    if (!lingbot_dummy_parse (config_text, config_path, &d, &is_dummy, error)) {
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
  return g_atomic_rc_box_acquire (dit);
}

static void
dit_clear (gpointer p)
{
  LingbotDit *dit = p;
  g_hash_table_unref (dit->by_name);
  g_free (dit->w.blocks);
  g_free (dit->path);
}

/**
 * lingbot_dit_unref:
 * @dit: (transfer full): a model
 */
void
lingbot_dit_unref (LingbotDit * dit)
{
  if (dit != NULL)
    g_atomic_rc_box_release_full (dit, dit_clear);
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

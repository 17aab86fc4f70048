/* lingbot-gst: dummy models, weights drawn at load time
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * vLLM's `load_format=dummy`: a model directory that holds only configs,
 * whose weights are drawn when it is loaded, so that the 14B shapes run
 * anywhere without a 37 GB download.  Here the draw is the one
 * lingbot-mkmodel writes, so a dummy model and the checkpoint
 * `lingbot-mkmodel --full` writes with the same seed load to the same
 * bytes (docs/design.md "Dummy models"):
 *
 * - the DiT: `transformers/config.json` (the release keys) with a member
 *   `"lingbot_dummy": {"seed": S, "dtype": "bf16"}` and no shards;
 * - the VAE: `Wan2.1_VAE.dummy.json`, `{"lingbot_dummy": {...}, "dim": 96}`;
 * - the umT5: `models_t5_umt5-xxl-enc-bf16.dummy.json` with the encoder's
 *   shapes (vocab, dim, dim_attn, dim_ffn, num_heads, num_layers,
 *   num_buckets); the tokenizer stays a real SentencePiece file.
 *
 * Manifests are untrusted input: every number is range-checked before it
 * sizes an allocation.
 */
#include "lingbot/dummy.h"
#include "lingbot/checkpoint-private.h"

#include <string.h>

/* a manifest is a few hundred bytes; refuse to read a large file */
#define MAX_MANIFEST (1u << 20)

/**
 * lingbot_dummy_is_manifest:
 * @path: a file name
 *
 * Returns: whether @path names a dummy VAE or text-encoder manifest (ends
 * in #LINGBOT_DUMMY_SUFFIX).
 */
gboolean
lingbot_dummy_is_manifest (const char *path)
{
  return path != NULL && g_str_has_suffix (path, LINGBOT_DUMMY_SUFFIX);
}

/**
 * lingbot_dummy_parse:
 * @text: a JSON object (a config.json or a manifest)
 * @what: the file, for messages
 * @out: (out caller-allocates): the seed, dtype and config object, when
 *   @text is a dummy one; clear it with lingbot_dummy_clear()
 * @is_dummy: (out): whether @text has the #LINGBOT_DUMMY_KEY member
 * @error: %LB_ERROR_FORMAT: "WHAT: not a JSON object", "WHAT:
 *   \"lingbot_dummy\" must be an object with an integer \"seed\" >= 0",
 *   "WHAT: \"lingbot_dummy\" dtype 'X' is not bf16, f16 or f32"
 *
 * Returns: %TRUE when @text parsed (dummy or not).
 */
gboolean
lingbot_dummy_parse (const char *text, const char *what, LingbotDummy * out,
    gboolean * is_dummy, GError ** error)
{
  g_autoptr (JsonParser) p = json_parser_new ();
  g_autoptr (GError) err = NULL;

  memset (out, 0, sizeof (*out));
  *is_dummy = FALSE;
  if (!json_parser_load_from_data (p, text, -1, &err) ||
      !JSON_NODE_HOLDS_OBJECT (json_parser_get_root (p))) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: not a JSON object%s%s", what, err ? ": " : "",
        err ? err->message : "");
    return FALSE;
  }
  JsonObject *root = json_node_get_object (json_parser_get_root (p));
  if (!json_object_has_member (root, LINGBOT_DUMMY_KEY))
    return TRUE;
  JsonNode *dn = json_object_get_member (root, LINGBOT_DUMMY_KEY);
  JsonObject *d = JSON_NODE_HOLDS_OBJECT (dn) ? json_node_get_object (dn) :
      NULL;
  JsonNode *sn = d ? json_object_get_member (d, "seed") : NULL;
  if (sn == NULL || !JSON_NODE_HOLDS_VALUE (sn) ||
      json_node_get_value_type (sn) != G_TYPE_INT64 ||
      json_node_get_int (sn) < 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: \"" LINGBOT_DUMMY_KEY "\" must be an object with an integer "
        "\"seed\" >= 0", what);
    return FALSE;
  }
  out->dtype = LB_DTYPE_BF16;
  JsonNode *tn = json_object_get_member (d, "dtype");
  if (tn != NULL) {
    const char *name = JSON_NODE_HOLDS_VALUE (tn) &&
        json_node_get_value_type (tn) == G_TYPE_STRING ?
        json_node_get_string (tn) : NULL;
    g_autofree char *up = name ? g_ascii_strup (name, -1) : NULL;
    if (name == NULL || !lb_dtype_from_safetensors (up, &out->dtype) ||
        (out->dtype != LB_DTYPE_BF16 && out->dtype != LB_DTYPE_F16 &&
            out->dtype != LB_DTYPE_F32)) {
      g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
          "%s: \"" LINGBOT_DUMMY_KEY "\" dtype '%s' is not bf16, f16 or "
          "f32", what, name ? name : "(not a string)");
      return FALSE;
    }
  }
  out->seed = (guint64) json_node_get_int (sn);
  out->parser = g_object_ref (p);
  out->config = root;
  *is_dummy = TRUE;
  return TRUE;
}

/**
 * lingbot_dummy_read:
 * @path: a manifest (#LINGBOT_DUMMY_SUFFIX)
 * @what: the part, for messages ("VAE", "text encoder")
 * @out: (out caller-allocates): as for lingbot_dummy_parse()
 * @error: %LB_ERROR_IO for an unreadable file, %LB_ERROR_FORMAT for one
 *   above 1 MiB, without the #LINGBOT_DUMMY_KEY member ("WHAT PATH: not a
 *   dummy manifest (no \"lingbot_dummy\" member)") or as
 *   lingbot_dummy_parse()
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dummy_read (const char *path, const char *what, LingbotDummy * out,
    GError ** error)
{
  g_autofree char *text = NULL;
  g_autofree char *label = g_strdup_printf ("%s %s", what, path);
  g_autoptr (GError) err = NULL;
  gsize len = 0;
  gboolean is_dummy;

  memset (out, 0, sizeof (*out));
  if (!g_file_get_contents (path, &text, &len, &err)) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s: %s", label, err->message);
    return FALSE;
  }
  if (len > MAX_MANIFEST) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: %" G_GSIZE_FORMAT " bytes is not a dummy manifest (at most %u)",
        label, len, MAX_MANIFEST);
    return FALSE;
  }
  if (!lingbot_dummy_parse (text, label, out, &is_dummy, error))
    return FALSE;
  if (!is_dummy) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: not a dummy manifest (no \"" LINGBOT_DUMMY_KEY "\" member)",
        label);
    return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_dummy_clear:
 * @d: a parsed dummy (or zeroed)
 *
 * Frees what lingbot_dummy_parse() kept.
 */
void
lingbot_dummy_clear (LingbotDummy * d)
{
  g_clear_object (&d->parser);
  d->config = NULL;
}

/**
 * lingbot_dummy_get_int:
 * @d: a parsed dummy
 * @key: a member of its config object
 * @min: smallest value accepted
 * @max: largest value accepted
 * @out: (out): the value
 * @error: %LB_ERROR_FORMAT "dummy config: \"KEY\" must be an integer in
 *   [MIN, MAX]" when it is missing, not an integer or out of range
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dummy_get_int (const LingbotDummy * d, const char *key, int64_t min,
    int64_t max, int64_t * out, GError ** error)
{
  JsonNode *n = d->config ? json_object_get_member (d->config, key) : NULL;
  if (n == NULL || !JSON_NODE_HOLDS_VALUE (n) ||
      json_node_get_value_type (n) != G_TYPE_INT64 ||
      json_node_get_int (n) < min || json_node_get_int (n) > max) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "dummy config: \"%s\" must be an integer in [%" G_GINT64_FORMAT ", %"
        G_GINT64_FORMAT "]", key, min, max);
    return FALSE;
  }
  *out = json_node_get_int (n);
  return TRUE;
}

/**
 * lingbot_dummy_write:
 * @path: the file to write (a config.json or a manifest)
 * @config_json: (nullable): a JSON object text, the part's configuration
 *   (%NULL for `{}`)
 * @seed: the weight seed
 * @dtype: the storage dtype the draws are rounded through
 * @error: %LB_ERROR_FORMAT when @config_json is no object; file errors
 *
 * Writes @config_json with the #LINGBOT_DUMMY_KEY member added.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dummy_write (const char *path, const char *config_json, guint64 seed,
    LbDType dtype, GError ** error)
{
  g_autoptr (JsonParser) p = json_parser_new ();
  if (!json_parser_load_from_data (p, config_json ? config_json : "{}", -1,
          NULL) || !JSON_NODE_HOLDS_OBJECT (json_parser_get_root (p))) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: the configuration is not a JSON object", path);
    return FALSE;
  }
  JsonObject *root = json_node_get_object (json_parser_get_root (p));
  JsonObject *d = json_object_new ();
  json_object_set_int_member (d, "seed", (gint64) seed);
  json_object_set_string_member (d, "dtype", lb_dtype_name (dtype));
  json_object_set_object_member (root, LINGBOT_DUMMY_KEY, d);
  g_autofree char *text = json_to_string (json_parser_get_root (p), TRUE);
  return g_file_set_contents (path, text, -1, error);
}

/**
 * lingbot_dummy_checkpoint_new:
 * @path: the manifest, as the checkpoint's path
 * @names: (transfer full): tensor names (strings)
 * @tensors: (transfer full): the tensors, one per name
 * @error: %LB_ERROR_FORMAT for a repeated name
 *
 * An in-memory checkpoint (format %LINGBOT_CHECKPOINT_DUMMY) holding
 * @tensors, for the loaders that read a checkpoint.
 *
 * Returns: (transfer full) (nullable): the checkpoint.
 */
LingbotCheckpoint *
lingbot_dummy_checkpoint_new (const char *path, GPtrArray * names,
    GPtrArray * tensors, GError ** error)
{
  LingbotCheckpoint *ckpt = lingbot_ckpt_new (path, LINGBOT_CHECKPOINT_DUMMY);
  gboolean ok = TRUE;

  g_return_val_if_fail (names->len == tensors->len, NULL);
  g_ptr_array_set_free_func (tensors, NULL);
  for (guint i = 0; i < names->len; i++) {
    if (ok)
      ok = lingbot_ckpt_add_tensor (ckpt, names->pdata[i], tensors->pdata[i],
          path, error);
    else
      lb_tensor_free (tensors->pdata[i]);
  }
  g_ptr_array_unref (names);
  g_ptr_array_unref (tensors);
  if (!ok) {
    lingbot_checkpoint_unref (ckpt);
    return NULL;
  }
  lingbot_ckpt_finish (ckpt);
  return ckpt;
}

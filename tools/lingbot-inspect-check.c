/* lingbot-inspect --check: is a downloaded model directory complete?
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-inspect --check DIR
 *
 * Says, before a load of tens of gigabytes is tried, whether DIR (the
 * release layout: transformers/ with config.json, the safetensors index
 * and its shards; Wan2.1_VAE.pth; models_t5_umt5-xxl-enc-bf16.pth and
 * google/umt5-xxl/spiece.model; or a DiT folder alone) holds everything a
 * world loads.  Only headers are read (the readers map the files), so it
 * takes seconds on the 14B release.
 *
 * The DiT: config.json parses and gives a valid configuration (over the
 * 14B preset, as the loader does for keys it lacks); every shard the index
 * lists is there and readable to its end (a truncated shard is named with
 * the reader's message); every tensor the index lists is in the shard it
 * names and every tensor of a shard is in the index; every weight the
 * configuration expects is there with the expected shape, no other tensor
 * is; all tensors have one float dtype (the others' dtype is expected of
 * each); the index's total_size is the shards' tensor bytes.  The VAE and
 * the umT5 encoder: present and readable; the tokenizer: present.  A dummy
 * model's parts (lingbot-mkmodel --dummy) are checked as manifests.
 *
 * Prints one line per problem ("PATH: what is wrong"), one line per part
 * found complete, then "DIR: OK" (exit 0) or "DIR: N problem(s), not
 * complete" (exit 1).
 */
#include "tools/lingbot-inspect-check.h"

#include "lingbot/checkpoint.h"
#include "lingbot/dit.h"
#include "lingbot/dummy.h"
#include "lingbot/lingbot-private.h"
#include "kernels/tensor.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <gio/gio.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

typedef struct
{
  guint problems;
} Check;

static void problem (Check * c, const char *format, ...)
    G_GNUC_PRINTF (2, 3);

static void
problem (Check * c, const char *format, ...)
{
  va_list ap;
  va_start (ap, format);
  g_autofree char *line = g_strdup_vprintf (format, ap);
  va_end (ap);
  printf ("%s\n", line);
  c->problems++;
}

/* a tensor found in a shard */
typedef struct
{
  const char *file;             /* the shard's base name (not owned) */
  const LbTensor *t;            /* owned by the shard's checkpoint */
} Found;

static const char *
dtype_name (LbDType d)
{
  return lb_dtype_to_safetensors (d) ? lb_dtype_to_safetensors (d) :
      lb_dtype_name (d);
}

static int
compare_strings (gconstpointer a, gconstpointer b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

/* The index (model.safetensors.index.json, else the only
 * *.safetensors.index.json): @map gets tensor -> shard name, @total the
 * metadata's total_size (or -1).  FALSE after reporting a problem. */
static gboolean
read_index (Check * c, const char *index, GHashTable * map, gint64 * total)
{
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autoptr (GError) err = NULL;
  JsonNode *root;
  JsonObject *obj, *wm, *md;

  *total = -1;
  if (!json_parser_load_from_file (parser, index, &err)) {
    problem (c, "%s: not JSON: %s", index, err->message);
    return FALSE;
  }
  root = json_parser_get_root (parser);
  obj = root && JSON_NODE_HOLDS_OBJECT (root) ? json_node_get_object (root) :
      NULL;
  wm = obj && json_object_has_member (obj, "weight_map") &&
      JSON_NODE_HOLDS_OBJECT (json_object_get_member (obj, "weight_map")) ?
      json_object_get_object_member (obj, "weight_map") : NULL;
  if (wm == NULL) {
    problem (c, "%s: no \"weight_map\" object", index);
    return FALSE;
  }
  g_autoptr (GList) names = json_object_get_members (wm);
  for (GList * l = names; l; l = l->next) {
    JsonNode *v = json_object_get_member (wm, l->data);
    if (!JSON_NODE_HOLDS_VALUE (v) ||
        json_node_get_value_type (v) != G_TYPE_STRING) {
      problem (c, "%s: weight_map entry %s is not a file name", index,
          (const char *) l->data);
      continue;
    }
    g_hash_table_insert (map, g_strdup (l->data),
        g_strdup (json_node_get_string (v)));
  }
  md = json_object_has_member (obj, "metadata") &&
      JSON_NODE_HOLDS_OBJECT (json_object_get_member (obj, "metadata")) ?
      json_object_get_object_member (obj, "metadata") : NULL;
  if (md && json_object_has_member (md, "total_size")) {
    JsonNode *v = json_object_get_member (md, "total_size");
    if (JSON_NODE_HOLDS_VALUE (v) &&
        json_node_get_value_type (v) == G_TYPE_INT64)
      *total = json_node_get_int (v);
  }
  return TRUE;
}

/* The size a safetensors file's header describes: 8 bytes of header
 * length, the JSON header, the data up to the largest end offset.  FALSE
 * when the header cannot be read (the reader then says why). */
static gboolean
safetensors_size (const char *path, guint64 * size)
{
  g_autoptr (GFile) file = g_file_new_for_path (path);
  g_autoptr (GFileInputStream) in = g_file_read (file, NULL, NULL);
  g_autoptr (JsonParser) parser = json_parser_new ();
  g_autofree char *header = NULL;
  guint8 len8[8];
  gsize got = 0;
  guint64 hlen = 0, end = 0;
  JsonNode *root;

  if (in == NULL || !g_input_stream_read_all (G_INPUT_STREAM (in), len8, 8,
          &got, NULL, NULL) || got != 8)
    return FALSE;
  for (int i = 7; i >= 0; i--)
    hlen = hlen << 8 | len8[i];
  if (hlen == 0 || hlen > 100u << 20)
    return FALSE;
  header = g_malloc (hlen);
  if (!g_input_stream_read_all (G_INPUT_STREAM (in), header, hlen, &got,
          NULL, NULL) || got != hlen ||
      !json_parser_load_from_data (parser, header, (gssize) hlen, NULL))
    return FALSE;
  root = json_parser_get_root (parser);
  if (!root || !JSON_NODE_HOLDS_OBJECT (root))
    return FALSE;
  g_autoptr (GList) members = json_object_get_members (json_node_get_object
      (root));
  for (GList * l = members; l; l = l->next) {
    JsonNode *t = json_object_get_member (json_node_get_object (root),
        l->data);
    JsonNode *off;
    if (strcmp (l->data, "__metadata__") == 0)
      continue;
    if (!JSON_NODE_HOLDS_OBJECT (t) ||
        !(off = json_object_get_member (json_node_get_object (t),
                "data_offsets")) || !JSON_NODE_HOLDS_ARRAY (off) ||
        json_array_get_length (json_node_get_array (off)) != 2)
      return FALSE;
    gint64 e = json_array_get_int_element (json_node_get_array (off), 1);
    if (e < 0)
      return FALSE;
    end = MAX (end, (guint64) e);
  }
  *size = 8 + hlen + end;
  return TRUE;
}

static char *
find_index (const char *dir)
{
  char *index = g_build_filename (dir, LINGBOT_SAFETENSORS_INDEX_NAME, NULL);
  g_autoptr (GDir) d = NULL;
  const char *name;
  int found = 0;

  if (g_file_test (index, G_FILE_TEST_IS_REGULAR))
    return index;
  g_clear_pointer (&index, g_free);
  d = g_dir_open (dir, 0, NULL);
  while (d && (name = g_dir_read_name (d)) != NULL)
    if (g_str_has_suffix (name, ".safetensors.index.json") && found++ == 0)
      index = g_build_filename (dir, name, NULL);
  if (found > 1)
    g_clear_pointer (&index, g_free);
  return index;
}

/* the *.safetensors files of @dir, sorted */
static GPtrArray *
list_shards (const char *dir)
{
  GPtrArray *out = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;
  while (d && (name = g_dir_read_name (d)) != NULL)
    if (g_str_has_suffix (name, ".safetensors"))
      g_ptr_array_add (out, g_strdup (name));
  g_ptr_array_sort (out, compare_strings);
  return out;
}

/* The DiT configuration config.json describes: its keys over the 14B
 * preset, as the loader fills the keys a config lacks.  Returns FALSE
 * (after reporting) when there is none to check the shapes against;
 * *@dummy is set for a dummy DiT, whose check ends here. */
static gboolean
dit_config (Check * c, const char *dir, LingbotDitConfig * cfg,
    gboolean * dummy)
{
  g_autofree char *path = g_build_filename (dir, "config.json", NULL);
  g_autofree char *text = NULL;
  g_autoptr (GError) err = NULL;
  LingbotDummy d;

  *dummy = FALSE;
  if (!g_file_test (path, G_FILE_TEST_EXISTS)) {
    problem (c, "%s: missing (the DiT's configuration)", path);
    return FALSE;
  }
  if (!g_file_get_contents (path, &text, NULL, &err) ||
      !lingbot_dummy_parse (text, path, &d, dummy, &err)) {
    problem (c, "%s", err->message);
    return FALSE;
  }
  lingbot_dummy_clear (&d);
  if (*dummy) {
    if (!lingbot_dit_load_config (dir, cfg, &err)) {
      problem (c, "%s", err->message);
      return FALSE;
    }
    printf ("%s: dummy (lingbot-mkmodel --dummy), dim %d, %d layers: "
        "complete\n", dir, cfg->dim, cfg->num_layers);
    return TRUE;
  }
  lingbot_dit_config_init_preset (cfg, LINGBOT_DIT_PRESET_14B);
  if (!lingbot_dit_config_merge_json (cfg, text, &err) ||
      !lingbot_dit_config_validate (cfg, &err)) {
    problem (c, "%s: %s", path, err->message);
    return FALSE;
  }
  return TRUE;
}

static void
check_dit (Check * c, const char *dir)
{
  const guint before = c->problems;
  LingbotDitConfig cfg;
  gboolean dummy = FALSE;
  const gboolean have_cfg = dit_config (c, dir, &cfg, &dummy);
  g_autofree char *index = NULL;
  g_autoptr (GHashTable) map = g_hash_table_new_full (g_str_hash,
      g_str_equal, g_free, g_free);
  g_autoptr (GHashTable) shards = g_hash_table_new_full (g_str_hash,
      g_str_equal, g_free, (GDestroyNotify) lingbot_checkpoint_unref);
  g_autoptr (GHashTable) bad = g_hash_table_new (g_str_hash, g_str_equal);
  g_autoptr (GHashTable) found = g_hash_table_new_full (g_str_hash,
      g_str_equal, NULL, g_free);
  g_autoptr (GPtrArray) files = NULL;
  g_autoptr (GPtrArray) on_disk = list_shards (dir);
  gint64 total = -1;
  guint64 bytes = 0;
  guint n_dtype[LB_DTYPE_COUNT] = { 0 };
  LbDType want = LB_DTYPE_COUNT;

  if (dummy)
    return;

  /* the shards: those the index lists, else every *.safetensors */
  index = find_index (dir);
  if (index) {
    if (!read_index (c, index, map, &total))
      return;
    g_autoptr (GHashTable) seen = g_hash_table_new (g_str_hash, g_str_equal);
    files = g_ptr_array_new_with_free_func (g_free);
    GHashTableIter it;
    gpointer k, v;
    g_hash_table_iter_init (&it, map);
    while (g_hash_table_iter_next (&it, &k, &v))
      if (g_hash_table_add (seen, v))
        g_ptr_array_add (files, g_strdup (v));
    g_ptr_array_sort (files, compare_strings);
    for (guint i = 0; i < on_disk->len; i++)
      if (!g_hash_table_contains (seen, on_disk->pdata[i]))
        problem (c, "%s/%s: not listed in %s", dir,
            (char *) on_disk->pdata[i], index);
  } else {
    files = g_ptr_array_ref (on_disk);
    if (files->len == 0) {
      problem (c, "%s: no %s and no .safetensors file", dir,
          LINGBOT_SAFETENSORS_INDEX_NAME);
      return;
    }
  }

  for (guint i = 0; i < files->len; i++) {
    const char *name = files->pdata[i];
    g_autofree char *path = g_build_filename (dir, name, NULL);
    g_autoptr (GError) err = NULL;
    LingbotCheckpoint *ck;

    if (!g_file_test (path, G_FILE_TEST_EXISTS)) {
      guint n = 0;
      GHashTableIter it;
      gpointer v;
      g_hash_table_iter_init (&it, map);
      while (g_hash_table_iter_next (&it, NULL, &v))
        n += strcmp (v, name) == 0;
      problem (c, "%s: missing (the index lists %u tensors in it)", path, n);
      g_hash_table_add (bad, (gpointer) name);
      continue;
    }
    /* a download cut short: the file is shorter than its header says */
    GStatBuf st;
    guint64 size;
    if (g_stat (path, &st) == 0 && safetensors_size (path, &size) &&
        (guint64) st.st_size != size) {
      problem (c, "%s: %s: %" G_GUINT64_FORMAT " bytes, its header "
          "describes %" G_GUINT64_FORMAT, path, (guint64) st.st_size < size ?
          "truncated" : "longer than its header says", (guint64) st.st_size,
          size);
      g_hash_table_add (bad, (gpointer) name);
      continue;
    }
    ck = lingbot_checkpoint_open (path, &err);
    if (ck == NULL) {
      problem (c, "%s", err->message);
      g_hash_table_add (bad, (gpointer) name);
      continue;
    }
    g_hash_table_insert (shards, g_strdup (name), ck);
    guint n;
    const char *const *names = lingbot_checkpoint_list_tensors (ck, &n);
    for (guint j = 0; j < n; j++) {
      const char *want_file = index ? g_hash_table_lookup (map, names[j]) :
          name;
      Found *f;
      if (want_file == NULL) {
        problem (c, "%s: tensor %s is not in the index", path, names[j]);
        continue;
      }
      if (strcmp (want_file, name) != 0) {
        problem (c, "%s: tensor %s, which the index puts in %s", path,
            names[j], want_file);
        continue;
      }
      if (g_hash_table_contains (found, names[j])) {
        problem (c, "%s: tensor %s is also in %s", path, names[j],
            ((Found *) g_hash_table_lookup (found, names[j]))->file);
        continue;
      }
      gpointer key = NULL;
      g_hash_table_lookup_extended (shards, name, &key, NULL);
      f = g_new (Found, 1);
      f->file = key;
      f->t = lingbot_checkpoint_get (ck, names[j], NULL);
      g_hash_table_insert (found, (gpointer) names[j], f);
      bytes += lb_tensor_nbytes (f->t);
      n_dtype[f->t->dtype]++;
    }
  }

  /* tensors the index places in a readable shard that lacks them */
  if (index) {
    g_autoptr (GPtrArray) listed = g_ptr_array_new ();
    GHashTableIter it;
    gpointer k, v;
    g_hash_table_iter_init (&it, map);
    while (g_hash_table_iter_next (&it, &k, &v))
      if (g_hash_table_contains (shards, v) &&
          !g_hash_table_contains (found, k))
        g_ptr_array_add (listed, k);
    g_ptr_array_sort (listed, compare_strings);
    for (guint i = 0; i < listed->len; i++) {
      const char *name = listed->pdata[i];
      LingbotCheckpoint *ck = g_hash_table_lookup (shards,
          g_hash_table_lookup (map, name));
      if (!lingbot_checkpoint_has_tensor (ck, name))
        problem (c, "%s/%s: does not hold tensor %s, which the index puts "
            "there", dir, (char *) g_hash_table_lookup (map, name), name);
    }
  }

  /* one float dtype: the one most tensors have */
  for (int d = 0; d < LB_DTYPE_COUNT; d++)
    if (lb_dtype_is_float ((LbDType) d) &&
        (want == LB_DTYPE_COUNT || n_dtype[d] > n_dtype[want]))
      want = (LbDType) d;
  if (want != LB_DTYPE_COUNT && n_dtype[want] == 0)
    want = LB_DTYPE_COUNT;

  g_autoptr (GPtrArray) sorted = g_ptr_array_new ();
  {
    GHashTableIter it;
    gpointer k;
    g_hash_table_iter_init (&it, found);
    while (g_hash_table_iter_next (&it, &k, NULL))
      g_ptr_array_add (sorted, k);
    g_ptr_array_sort (sorted, compare_strings);
  }
  for (guint i = 0; i < sorted->len; i++) {
    const char *name = sorted->pdata[i];
    const Found *f = g_hash_table_lookup (found, name);
    int nd;
    int64_t sh[LB_MAX_DIMS];
    if (f->t->dtype != want)
      problem (c, "%s/%s: tensor %s has dtype %s, expected %s", dir, f->file,
          name, dtype_name (f->t->dtype),
          want == LB_DTYPE_COUNT ? "a float type" : dtype_name (want));
    if (!have_cfg)
      continue;
    if (!lingbot_dit_weight_shape (&cfg, name, &nd, sh)) {
      problem (c, "%s/%s: tensor %s is not a weight of this configuration",
          dir, f->file, name);
      continue;
    }
    gboolean same = f->t->ndim == nd;
    for (int d = 0; same && d < nd; d++)
      same = f->t->shape[d] == sh[d];
    if (!same) {
      g_autofree char *have = lb_tensor_shape_string (f->t);
      g_autofree char *exp = lb_shape_string (nd, sh);
      problem (c, "%s/%s: tensor %s has shape %s, expected %s (config.json)",
          dir, f->file, name, have, exp);
    }
  }

  /* the weights the configuration expects, where no missing or unreadable
   * shard can explain their absence */
  if (have_cfg) {
    g_autoptr (GPtrArray) names = lingbot_dit_weight_names (&cfg);
    for (guint i = 0; i < names->len; i++) {
      const char *name = names->pdata[i];
      const char *file = index ? g_hash_table_lookup (map, name) : NULL;
      int nd;
      int64_t sh[LB_MAX_DIMS];
      if (g_hash_table_contains (found, name) ||
          (file && (g_hash_table_contains (bad, file) ||
                  g_hash_table_contains (shards, file))))
        continue;
      lingbot_dit_weight_shape (&cfg, name, &nd, sh);
      g_autofree char *exp = lb_shape_string (nd, sh);
      problem (c, "%s: tensor %s is missing (expected shape %s)", dir, name,
          exp);
    }
  }

  if (index && total >= 0 && g_hash_table_size (bad) == 0 &&
      (guint64) total != bytes)
    problem (c, "%s: total_size is %" G_GINT64_FORMAT " bytes, the shards' "
        "tensors hold %" G_GUINT64_FORMAT, index, total, bytes);

  if (c->problems == before)
    printf ("%s: %u shard%s, %u tensors (%s), %" G_GUINT64_FORMAT " bytes, "
        "dim %d, %d layers: complete\n", dir, files->len,
        files->len == 1 ? "" : "s", g_hash_table_size (found),
        want == LB_DTYPE_COUNT ? "-" : dtype_name (want), bytes, cfg.dim,
        cfg.num_layers);
}

/* The VAE or the umT5 encoder: the first of @names in @dir; present and
 * readable (or a valid dummy manifest). */
static void
check_part (Check * c, const char *dir, const char *what,
    const char *const *names, const char *without)
{
  g_autofree char *path = NULL;
  g_autoptr (GError) err = NULL;

  for (const char *const *n = names; *n && !path; n++) {
    char *p = g_build_filename (dir, *n, NULL);
    if (g_file_test (p, G_FILE_TEST_EXISTS))
      path = p;
    else
      g_free (p);
  }
  if (path == NULL) {
    g_autofree char *first = g_build_filename (dir, names[0], NULL);
    problem (c, "%s: missing (nor %s or %s; the %s%s)", first, names[1],
        names[2], what, without);
    return;
  }
  if (lingbot_dummy_is_manifest (path)) {
    LingbotDummy d;
    if (!lingbot_dummy_read (path, what, &d, &err)) {
      problem (c, "%s", err->message);
      return;
    }
    lingbot_dummy_clear (&d);
    printf ("%s: dummy (lingbot-mkmodel --dummy): complete\n", path);
    return;
  }
  g_autoptr (LingbotCheckpoint) ck = lingbot_checkpoint_open (path, &err);
  if (ck == NULL) {
    problem (c, "%s", err->message);
    return;
  }
  guint n;
  const char *const *tn = lingbot_checkpoint_list_tensors (ck, &n);
  guint64 bytes = 0;
  for (guint i = 0; i < n; i++)
    bytes += lb_tensor_nbytes (lingbot_checkpoint_get (ck, tn[i], NULL));
  if (n == 0) {
    problem (c, "%s: holds no tensors", path);
    return;
  }
  printf ("%s: %u tensors, %" G_GUINT64_FORMAT " bytes: complete\n", path, n,
      bytes);
}

/**
 * lingbot_inspect_check:
 * @dir: a model directory (the release layout) or a DiT folder
 *
 * Checks that @dir holds a complete model (see the top of this file) and
 * prints one line per problem, one per complete part, and the verdict.
 *
 * Returns: the exit status: 0 when complete, 1 otherwise.
 */
int
lingbot_inspect_check (const char *dir)
{
  static const char *const vae[] = { LINGBOT_WORLD_VAE_PTH,
    LINGBOT_WORLD_VAE_SAFETENSORS, LINGBOT_WORLD_VAE_DUMMY, NULL
  };
  static const char *const t5[] = { LINGBOT_WORLD_T5_PTH,
    LINGBOT_WORLD_T5_SAFETENSORS, LINGBOT_WORLD_T5_DUMMY, NULL
  };
  g_autofree char *dit = g_build_filename (dir, LINGBOT_WORLD_DIT_DIR, NULL);
  g_autofree char *config = g_build_filename (dir, "config.json", NULL);
  g_autofree char *index = find_index (dir);
  Check c = { 0 };

  if (!g_file_test (dir, G_FILE_TEST_IS_DIR)) {
    problem (&c, "%s: not a directory", dir);
  } else if (g_file_test (dit, G_FILE_TEST_IS_DIR)) {
    check_dit (&c, dit);
    check_part (&c, dir, "VAE", vae, "");
    check_part (&c, dir, "umT5 text encoder", t5,
        ", needed unless prompt embeddings are given");
    g_autofree char *tok_dir = g_build_filename (dir,
        LINGBOT_WORLD_TOKENIZER_DIR, NULL);
    g_autofree char *spiece = g_build_filename (tok_dir, "spiece.model",
        NULL);
    g_autofree char *tokenizer = g_build_filename (tok_dir,
        "tokenizer.model", NULL);
    if (!g_file_test (spiece, G_FILE_TEST_IS_REGULAR) &&
        !g_file_test (tokenizer, G_FILE_TEST_IS_REGULAR))
      problem (&c, "%s: missing (nor tokenizer.model; the umT5 tokenizer, "
          "needed unless prompt embeddings are given)", spiece);
  } else if (index || g_file_test (config, G_FILE_TEST_EXISTS)) {
    /* a DiT folder alone */
    check_dit (&c, dir);
  } else {
    problem (&c, "%s: missing (the DiT: config.json, %s and the shards)",
        dit, LINGBOT_SAFETENSORS_INDEX_NAME);
  }

  if (c.problems == 0) {
    printf ("%s: OK\n", dir);
    return 0;
  }
  printf ("%s: %u problem%s, not complete\n", dir, c.problems,
      c.problems == 1 ? "" : "s");
  return 1;
}

/* lingbot-inspect: list the tensors of a checkpoint
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-inspect [--metadata] FILE...
 *   lingbot-inspect --check DIR
 *
 * FILE is a .safetensors file, a sharded set (its index JSON or directory),
 * a torch.save .pth or a .npy.  Prints one line per tensor:
 *   NAME<TAB>DTYPE<TAB>[SHAPE]<TAB>BYTES
 * then "total: N tensors, B bytes".  Exits 1 with the error message when a
 * file cannot be read.
 *
 * A model directory (the release layout: transformers/, Wan2.1_VAE,
 * models_t5_umt5-xxl-enc-bf16) stands for its three parts, each listed
 * under a "== PATH (FORMAT)" line.  A part of a dummy model
 * (lingbot-mkmodel --dummy) stores no tensors: it is reported as
 * "PATH: dummy (lingbot-mkmodel --dummy): no tensors stored, the weights
 * are drawn when it loads (seed S, DTYPE)".
 *
 * --check DIR says whether a downloaded model directory is complete
 * (lingbot-inspect-check.c): one line per problem, exit 1 on any.
 */
#include "lingbot/checkpoint.h"
#include "lingbot/dummy.h"
#include "lingbot/lingbot-private.h"
#include "tools/tool-common.h"
#include "tools/lingbot-inspect-check.h"

#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int
compare_strings (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

static void
print_metadata (LingbotCheckpoint * ckpt)
{
  GHashTable *md = lingbot_checkpoint_get_metadata (ckpt);
  guint n;
  const char **keys = (const char **) g_hash_table_get_keys_as_array (md, &n);
  qsort (keys, n, sizeof (char *), compare_strings);
  printf ("metadata: %u keys\n", n);
  for (guint i = 0; i < n; i++) {
    const char *v = g_hash_table_lookup (md, keys[i]);
    gsize len = strlen (v);
    if (len > 120)
      printf ("  %s = %.120s... (%" G_GSIZE_FORMAT " chars)\n", keys[i], v,
          len);
    else
      printf ("  %s = %s\n", keys[i], v);
  }
  g_free (keys);
}

/* A part of a dummy model: a manifest (*.dummy.json), or a DiT config.json
 * (or its directory) with a "lingbot_dummy" member.  Says so and returns
 * TRUE; FALSE for anything else. */
static gboolean
report_dummy (const char *path)
{
  g_autofree char *file = g_file_test (path, G_FILE_TEST_IS_DIR) ?
      g_build_filename (path, "config.json", NULL) : g_strdup (path);
  g_autofree char *text = NULL;
  gsize len = 0;
  gboolean is_dummy = FALSE;
  LingbotDummy d;

  if (!(lingbot_dummy_is_manifest (file) || g_str_has_suffix (file,
              "config.json")) || !g_file_get_contents (file, &text, &len,
          NULL) || len > (1u << 20) ||
      !lingbot_dummy_parse (text, file, &d, &is_dummy, NULL))
    return FALSE;
  if (is_dummy)
    printf ("%s: dummy (lingbot-mkmodel --dummy): no tensors stored, the "
        "weights are drawn when it loads (seed %" G_GUINT64_FORMAT ", %s)\n",
        path, d.seed, lb_dtype_name (d.dtype));
  lingbot_dummy_clear (&d);
  return is_dummy;
}

static gboolean
inspect (const char *path, gboolean metadata, gboolean header, GError ** error)
{
  GError *local = NULL;
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (path, &local);
  if (ckpt == NULL) {
    if (report_dummy (path)) {
      g_error_free (local);
      return TRUE;
    }
    g_propagate_error (error, local);
    return FALSE;
  }
  guint n;
  const char *const *names = lingbot_checkpoint_list_tensors (ckpt, &n);
  guint64 total = 0;
  if (header)
    printf ("== %s (%s)\n", path, lingbot_checkpoint_format_name
        (lingbot_checkpoint_get_format (ckpt)));
  for (guint i = 0; i < n; i++) {
    const LbTensor *t = lingbot_checkpoint_get (ckpt, names[i], NULL);
    char *shape = lb_tensor_shape_string (t);
    gsize nbytes = lb_tensor_nbytes (t);
    printf ("%s\t%s\t%s\t%" G_GSIZE_FORMAT "%s\n", names[i],
        lb_dtype_name (t->dtype), shape, nbytes,
        lb_tensor_is_contiguous (t) ? "" : "\tnon-contiguous");
    total += nbytes;
    g_free (shape);
  }
  printf ("total: %u tensors, %" G_GUINT64_FORMAT " bytes\n", n, total);
  if (metadata)
    print_metadata (ckpt);
  lingbot_checkpoint_unref (ckpt);
  return TRUE;
}

/* the first of @names (NULL-terminated) that exists in @dir, else NULL */
static char *
find_in (const char *dir, const char *const *names)
{
  for (; *names; names++) {
    char *p = g_build_filename (dir, *names, NULL);
    if (g_file_test (p, G_FILE_TEST_EXISTS))
      return p;
    g_free (p);
  }
  return NULL;
}

/* @args with every model directory replaced by its parts (owned) */
static GPtrArray *
expand_model_dirs (int argc, char **argv)
{
  static const char *const vae[] = { LINGBOT_WORLD_VAE_PTH,
    LINGBOT_WORLD_VAE_SAFETENSORS, LINGBOT_WORLD_VAE_DUMMY, NULL
  };
  static const char *const t5[] = { LINGBOT_WORLD_T5_PTH,
    LINGBOT_WORLD_T5_SAFETENSORS, LINGBOT_WORLD_T5_DUMMY, NULL
  };
  GPtrArray *out = g_ptr_array_new_with_free_func (g_free);
  for (int i = 1; i < argc; i++) {
    g_autofree char *dit = g_build_filename (argv[i], LINGBOT_WORLD_DIT_DIR,
        NULL);
    if (!g_file_test (dit, G_FILE_TEST_IS_DIR)) {
      g_ptr_array_add (out, g_strdup (argv[i]));
      continue;
    }
    g_ptr_array_add (out, g_steal_pointer (&dit));
    char *part = find_in (argv[i], vae);
    if (part)
      g_ptr_array_add (out, part);
    if ((part = find_in (argv[i], t5)) != NULL)
      g_ptr_array_add (out, part);
  }
  return out;
}

int
main (int argc, char **argv)
{
  gboolean metadata = FALSE, check = FALSE;
  GError *error = NULL;
  GOptionEntry entries[] = {
    {"metadata", 'm', 0, G_OPTION_ARG_NONE, &metadata,
        "Also print the metadata keys and values", NULL},
    {"check", 'c', 0, G_OPTION_ARG_NONE, &check,
          "Say whether the model directory DIR is complete (files, sizes, "
          "shards, dtypes, shapes) without loading it; exit 1 if not",
        NULL},
    {NULL}
  };

  setlocale (LC_ALL, "");
  if (!lingbot_tool_parse ("lingbot-inspect", "FILE... - list the tensors "
          "of safetensors, sharded safetensors, .pth and .npy checkpoints",
          "A model directory (transformers/, Wan2.1_VAE, the umT5) is "
          "listed part by part.", entries, &argc, &argv))
    return LINGBOT_TOOL_USAGE;
  if (check) {
    if (argc != 2 || metadata)
      return lingbot_tool_usage_error ("lingbot-inspect", "--check takes "
          "one model directory (and no --metadata)");
    return lingbot_inspect_check (argv[1]);
  }
  if (argc < 2) {
    fprintf (stderr, "usage: lingbot-inspect [--metadata] FILE...\n");
    return 2;
  }
  g_autoptr (GPtrArray) paths = expand_model_dirs (argc, argv);
  for (guint i = 0; i < paths->len; i++) {
    if (!inspect (paths->pdata[i], metadata, paths->len > 1, &error)) {
      fflush (stdout);
      fprintf (stderr, "lingbot-inspect: %s\n", error->message);
      g_error_free (error);
      return 1;
    }
  }
  return 0;
}

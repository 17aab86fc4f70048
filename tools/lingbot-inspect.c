/* lingbot-inspect: list the tensors of a checkpoint
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-inspect [--metadata] FILE...
 *
 * FILE is a .safetensors file, a sharded set (its index JSON or directory),
 * a torch.save .pth or a .npy.  Prints one line per tensor:
 *   NAME<TAB>DTYPE<TAB>[SHAPE]<TAB>BYTES
 * then "total: N tensors, B bytes".  Exits 1 with the error message when a
 * file cannot be read.
 */
#include "lingbot/checkpoint.h"
#include "tools/tool-common.h"

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

static gboolean
inspect (const char *path, gboolean metadata, gboolean header, GError ** error)
{
  LingbotCheckpoint *ckpt = lingbot_checkpoint_open (path, error);
  if (ckpt == NULL)
    return FALSE;
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

int
main (int argc, char **argv)
{
  gboolean metadata = FALSE;
  GError *error = NULL;
  GOptionEntry entries[] = {
    {"metadata", 'm', 0, G_OPTION_ARG_NONE, &metadata,
        "Also print the metadata keys and values", NULL},
    {NULL}
  };

  setlocale (LC_ALL, "");
  if (!lingbot_tool_parse ("lingbot-inspect", "FILE... - list the tensors "
          "of safetensors, sharded safetensors, .pth and .npy checkpoints",
          NULL, entries, &argc, &argv))
    return LINGBOT_TOOL_USAGE;
  if (argc < 2) {
    fprintf (stderr, "usage: lingbot-inspect [--metadata] FILE...\n");
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    if (!inspect (argv[i], metadata, argc > 2, &error)) {
      fflush (stdout);
      fprintf (stderr, "lingbot-inspect: %s\n", error->message);
      g_error_free (error);
      return 1;
    }
  }
  return 0;
}

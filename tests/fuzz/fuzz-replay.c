/* lingbot-gst: replays a fuzz corpus through a harness (tests/fuzz)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * fuzz-replay-NAME FILE|DIR...: every file given, and every file of every
 * directory given (sorted by name), goes once through the harness's
 * LLVMFuzzerTestOneInput(); a sanitizer report aborts the run.  The same
 * harness source is the libFuzzer target of -Dfuzzing=enabled.
 */
#include <glib.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput (const uint8_t * data, size_t size);

static int
run_file (const char *path)
{
  g_autoptr (GError) err = NULL;
  char *data = NULL;
  gsize len = 0;

  if (!g_file_get_contents (path, &data, &len, &err)) {
    fprintf (stderr, "fuzz-replay: %s\n", err->message);
    return 1;
  }
  /* a copy of exactly len bytes: ASan sees any read past the input */
  guint8 *copy = g_malloc (len ? len : 1);
  memcpy (copy, data, len);
  g_free (data);
  printf ("%s (%" G_GSIZE_FORMAT " bytes)\n", path, len);
  fflush (stdout);
  LLVMFuzzerTestOneInput (copy, len);
  g_free (copy);
  return 0;
}

static int
cmp_str (gconstpointer a, gconstpointer b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

int
main (int argc, char **argv)
{
  guint n = 0;
  int bad = 0;

  if (argc < 2) {
    fprintf (stderr, "usage: %s FILE|DIR...\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    if (!g_file_test (argv[i], G_FILE_TEST_IS_DIR)) {
      bad |= run_file (argv[i]);
      n++;
      continue;
    }
    g_autoptr (GError) err = NULL;
    GDir *d = g_dir_open (argv[i], 0, &err);
    if (d == NULL) {
      fprintf (stderr, "fuzz-replay: %s\n", err->message);
      return 1;
    }
    g_autoptr (GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
    const char *name;
    while ((name = g_dir_read_name (d)) != NULL)
      g_ptr_array_add (names, g_build_filename (argv[i], name, NULL));
    g_dir_close (d);
    g_ptr_array_sort (names, cmp_str);
    for (guint j = 0; j < names->len; j++) {
      bad |= run_file (names->pdata[j]);
      n++;
    }
  }
  printf ("fuzz-replay: %u inputs\n", n);
  return bad || n == 0;
}

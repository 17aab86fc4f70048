/* lingbot-gst: fuzz harness of the WebRTC example's static-file resolver
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot_webrtc_resolve_path() (examples/webrtc/webrtc-http.c, the
 * server's HTTP room, compiled in instrumented) on the input as a request
 * path, still percent-encoded (a NUL-terminated copy: a raw NUL ends it, as
 * it ends libsoup's path), against a page folder made once in the scratch
 * directory:
 *
 *   www/index.html  www/app.js  www/sub/page.html  www/.hidden
 *   www/inside -> index.html    (a link within the folder)
 *   www/out -> ../secret.txt    (a link out of it)
 *   www/subdir-out -> ..        (a link to the folder above)
 *   secret.txt                  (next to www/)
 *
 * Checked: the answer is a file (200) or 403 / 404 and nothing else; a
 * file is a regular file strictly below the folder's real path, never the
 * secret, and no part of it below the folder starts with "."; a path that
 * does not start with "/" is 404; an encoded NUL ("%00") is 403.
 */
#include <string.h>
#include <unistd.h>

#include "webrtc-server.h"

#include "fuzz-common.h"

static char *root, *root_real, *secret_real;

static void
write_tree (void)
{
  const char *files[] = { "www/index.html", "www/app.js",
    "www/sub/page.html", "www/.hidden", "secret.txt", NULL
  };
  char *p;

  p = g_build_filename (fuzz_scratch_dir (), "www", "sub", NULL);
  g_assert (g_mkdir_with_parents (p, 0700) == 0);
  g_free (p);
  for (guint i = 0; files[i]; i++) {
    p = g_build_filename (fuzz_scratch_dir (), files[i], NULL);
    g_assert (g_file_set_contents (p, files[i], -1, NULL));
    g_free (p);
  }
  root = g_build_filename (fuzz_scratch_dir (), "www", NULL);
  p = g_build_filename (root, "inside", NULL);
  g_assert (symlink ("index.html", p) == 0);
  g_free (p);
  p = g_build_filename (root, "out", NULL);
  g_assert (symlink ("../secret.txt", p) == 0);
  g_free (p);
  p = g_build_filename (root, "subdir-out", NULL);
  g_assert (symlink ("..", p) == 0);
  g_free (p);
  root_real = realpath (root, NULL);
  p = g_build_filename (fuzz_scratch_dir (), "secret.txt", NULL);
  secret_real = realpath (p, NULL);
  g_free (p);
  g_assert (root_real != NULL && secret_real != NULL);
}

/* the scratch directory goes at exit (fuzz-common.h removes its files
 * only): the tree's folders and links first */
static void
remove_tree (void)
{
  const char *names[] = { "www/inside", "www/out", "www/subdir-out",
    "www/index.html", "www/app.js", "www/sub/page.html", "www/.hidden",
    "www/sub", "www", NULL
  };

  for (guint i = 0; names[i]; i++) {
    char *p = g_build_filename (fuzz_scratch_dir (), names[i], NULL);

    g_remove (p);
    g_free (p);
  }
  g_free (root);
  free (root_real);
  free (secret_real);
}

int
LLVMFuzzerTestOneInput (const uint8_t * data, size_t size)
{
  g_autofree char *path = g_strndup ((const char *) data, size);
  g_autofree char *file = NULL;
  guint status = 0;

  if (root == NULL) {
    write_tree ();
    atexit (remove_tree);
  }
  file = lingbot_webrtc_resolve_path (root, path, &status);
  if (g_getenv ("FUZZ_VERBOSE"))
    printf ("  %u %s\n", status, file ? file : "");
  if (file == NULL) {
    g_assert (status == 403 || status == 404);
  } else {
    gsize n = strlen (root_real);
    char **parts;

    g_assert (status == 200);
    g_assert (strncmp (file, root_real, n) == 0 && file[n] == '/');
    g_assert (strcmp (file, secret_real) != 0);
    g_assert (g_file_test (file, G_FILE_TEST_IS_REGULAR));
    parts = g_strsplit (file + n + 1, "/", -1);
    for (guint i = 0; parts[i]; i++)
      g_assert (parts[i][0] != '.' && parts[i][0] != '\0');
    g_strfreev (parts);
  }
  if (path[0] != '/')
    g_assert (file == NULL && status == 404);
  else if (strstr (path, "%00") != NULL)
    g_assert (file == NULL && status == 403);
  return 0;
}

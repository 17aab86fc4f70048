/* lingbot-gst: shared helpers of the fuzz harnesses (tests/fuzz)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Every harness defines LLVMFuzzerTestOneInput().  Built twice from one
 * source: with -Dfuzzing=enabled and clang as a libFuzzer binary
 * (-fsanitize=fuzzer,address,undefined), and always as a replay
 * executable (fuzz-replay.c's main() runs every file of a corpus directory
 * through it) under -fsanitize=address,undefined.  The readers that take a
 * path get the input written to a file of a private scratch directory.
 */
#pragma once

#include <glib.h>
#include <glib/gstdio.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput (const uint8_t * data, size_t size);

static char *fuzz_dir;

static inline void
fuzz_dir_remove (void)
{
  GDir *d = g_dir_open (fuzz_dir, 0, NULL);
  const char *name;

  if (d == NULL)
    return;
  while ((name = g_dir_read_name (d)) != NULL) {
    char *p = g_build_filename (fuzz_dir, name, NULL);
    g_unlink (p);
    g_free (p);
  }
  g_dir_close (d);
  g_rmdir (fuzz_dir);
}

/* the scratch directory, made on first use (in /dev/shm when there is one:
 * no disk writes per execution), removed at exit */
static inline const char *
fuzz_scratch_dir (void)
{
  if (fuzz_dir == NULL) {
    const char *base = g_file_test ("/dev/shm", G_FILE_TEST_IS_DIR) ?
        "/dev/shm" : g_get_tmp_dir ();
    char *tmpl = g_build_filename (base, "lingbot-fuzz-XXXXXX", NULL);

    fuzz_dir = g_mkdtemp (tmpl);
    if (fuzz_dir == NULL) {
      perror ("fuzz: mkdtemp");
      abort ();
    }
    atexit (fuzz_dir_remove);
  }
  return fuzz_dir;
}

/* writes @size bytes to @name in the scratch directory: its path (free it) */
static inline char *
fuzz_write_file (const char *name, const void *data, size_t size)
{
  char *path = g_build_filename (fuzz_scratch_dir (), name, NULL);
  FILE *f = fopen (path, "wb");

  if (f == NULL || (size > 0 && fwrite (data, 1, size, f) != size) ||
      fclose (f) != 0) {
    perror ("fuzz: write");
    abort ();
  }
  return path;
}

/* with FUZZ_VERBOSE set (the replay of one file, say), what the parser
 * made of the input: "accepted" or its error */
static inline void
fuzz_report (const GError * error)
{
  static int verbose = -1;

  if (verbose < 0)
    verbose = g_getenv ("FUZZ_VERBOSE") != NULL;
  if (verbose)
    printf ("  %s\n", error ? error->message : "accepted");
}

/* a g_critical() or g_error() (GLib's and GStreamer's precondition
 * checks) is a finding: abort() on it, which libFuzzer catches and saves
 * (G_DEBUG=fatal-criticals alone raises SIGTRAP, which it does not) */
static GLogWriterOutput
fuzz_log_writer (GLogLevelFlags level, const GLogField * fields,
    gsize n_fields, gpointer user_data)
{
  GLogWriterOutput out = g_log_writer_standard_streams (level, fields,
      n_fields, user_data);

  if (level & (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_ERROR))
    abort ();
  return out;
}

__attribute__((constructor))
     static void fuzz_log_init (void)
{
  g_log_set_writer_func (fuzz_log_writer, NULL, NULL);
}

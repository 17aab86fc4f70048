/* lingbot-gst: a NumPy .npy writer for test fixtures (format 1.0)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Header-only, so that any test program can write its .npy inputs into a
 * temporary directory at start instead of committing binary files.
 */
#pragma once

#include <glib.h>
#include <stdint.h>
#include <string.h>

/* Writes @nbytes of @data as an array of dtype @descr ("<f4", "<f8",
 * "<i8", ...) and shape @shape (@ndim dimensions, 0 for a scalar) to
 * @path; aborts the test on an I/O error. */
static inline void
lingbot_test_write_npy (const char *path, const char *descr, int ndim,
    const int64_t * shape, const void *data, gsize nbytes)
{
  g_autoptr (GString) dict = g_string_new (NULL);
  g_autoptr (GByteArray) b = g_byte_array_new ();
  g_autoptr (GError) err = NULL;
  static const guint8 magic[8] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0 };
  gsize hlen;
  guint8 len[2];

  g_string_append_printf (dict, "{'descr': '%s', 'fortran_order': False, "
      "'shape': (", descr);
  for (int i = 0; i < ndim; i++)
    g_string_append_printf (dict, "%" G_GINT64_FORMAT "%s", shape[i],
        ndim == 1 ? "," : i + 1 < ndim ? ", " : "");
  g_string_append (dict, "), }");
  /* magic (8) + length (2) + dict + padding + '\n', a multiple of 64 */
  hlen = (10 + dict->len + 1 + 63) / 64 * 64 - 10;
  while (dict->len + 1 < hlen)
    g_string_append_c (dict, ' ');
  g_string_append_c (dict, '\n');
  len[0] = (guint8) (hlen & 0xff);
  len[1] = (guint8) (hlen >> 8);
  g_byte_array_append (b, magic, sizeof magic);
  g_byte_array_append (b, len, 2);
  g_byte_array_append (b, (const guint8 *) dict->str, (guint) dict->len);
  if (nbytes)
    g_byte_array_append (b, data, (guint) nbytes);
  g_file_set_contents (path, (const char *) b->data, b->len, &err);
  g_assert_no_error (err);
}

/* lingbot-gst: NumPy .npy reader
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Format (numpy/lib/format.py, NEP 1): "\x93NUMPY", major, minor version
 * bytes, header length (u16 LE for 1.0, u32 LE for 2.0/3.0), an ASCII
 * (3.0: UTF-8) Python dict literal
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (269, 4, 4), }
 * padded with spaces and a newline, then the raw elements.
 */
#include "lingbot/checkpoint-private.h"

#include <string.h>

typedef struct
{
  const char *p, *end;
} Lexer;

static void
skip_ws (Lexer * lx)
{
  while (lx->p < lx->end && g_ascii_isspace (*lx->p))
    lx->p++;
}

static gboolean
eat (Lexer * lx, char c)
{
  skip_ws (lx);
  if (lx->p < lx->end && *lx->p == c) {
    lx->p++;
    return TRUE;
  }
  return FALSE;
}

/* a '...' or "..." literal without escapes (numpy never writes any) */
static char *
parse_string (Lexer * lx)
{
  skip_ws (lx);
  if (lx->p >= lx->end || (*lx->p != '\'' && *lx->p != '"'))
    return NULL;
  char q = *lx->p++;
  const char *start = lx->p;
  while (lx->p < lx->end && *lx->p != q && *lx->p != '\\')
    lx->p++;
  if (lx->p >= lx->end || *lx->p != q)
    return NULL;
  char *s = g_strndup (start, (gsize) (lx->p - start));
  lx->p++;
  return s;
}

static gboolean
parse_word (Lexer * lx, const char *word)
{
  gsize n = strlen (word);
  skip_ws (lx);
  if ((gsize) (lx->end - lx->p) >= n && memcmp (lx->p, word, n) == 0) {
    lx->p += n;
    return TRUE;
  }
  return FALSE;
}

static gboolean
parse_shape (Lexer * lx, int *ndim, int64_t * shape)
{
  *ndim = 0;
  if (!eat (lx, '('))
    return FALSE;
  for (;;) {
    if (eat (lx, ')'))
      return TRUE;
    skip_ws (lx);
    int64_t v = 0;
    const char *start = lx->p;
    while (lx->p < lx->end && g_ascii_isdigit (*lx->p)) {
      int d = *lx->p - '0';
      if (v > (G_MAXINT64 - d) / 10)
        return FALSE;
      v = v * 10 + d;
      lx->p++;
    }
    if (lx->p == start || *ndim >= LB_MAX_DIMS)
      return FALSE;
    /* Python 2 numpy wrote longs as 3L */
    if (lx->p < lx->end && *lx->p == 'L')
      lx->p++;
    shape[(*ndim)++] = v;
    if (!eat (lx, ',')) {
      return eat (lx, ')');
    }
  }
}

static gboolean
descr_to_dtype (const char *descr, LbDType * dtype)
{
  static const struct
  {
    const char *descr;
    LbDType dtype;
  } map[] = {
    {"<f4", LB_DTYPE_F32}, {"<f8", LB_DTYPE_F64}, {"<f2", LB_DTYPE_F16},
    {"<i4", LB_DTYPE_I32}, {"<i8", LB_DTYPE_I64},
    {"|u1", LB_DTYPE_U8}, {"<u1", LB_DTYPE_U8}, {">u1", LB_DTYPE_U8},
  };
  for (gsize i = 0; i < G_N_ELEMENTS (map); i++) {
    if (strcmp (descr, map[i].descr) == 0) {
      *dtype = map[i].dtype;
      return TRUE;
    }
  }
  return FALSE;
}

static gboolean
parse_header (const char *file, const char *text, gsize len, LbDType * dtype,
    gboolean * fortran, int *ndim, int64_t * shape, GError ** error)
{
  Lexer lx = { text, text + len };
  gboolean have_descr = FALSE, have_fortran = FALSE, have_shape = FALSE;

  if (!eat (&lx, '{'))
    goto bad;
  while (!eat (&lx, '}')) {
    char *key = parse_string (&lx);
    if (key == NULL || !eat (&lx, ':')) {
      g_free (key);
      goto bad;
    }
    gboolean ok = TRUE;
    if (strcmp (key, "descr") == 0) {
      char *descr = parse_string (&lx);
      if (descr == NULL) {
        ok = FALSE;
      } else if (!descr_to_dtype (descr, dtype)) {
        g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
            "%s: unsupported npy dtype '%s' (supported: <f4 <f8 <f2 <i4 <i8 "
            "|u1)", file, descr);
        g_free (descr);
        g_free (key);
        return FALSE;
      }
      g_free (descr);
      have_descr = ok;
    } else if (strcmp (key, "fortran_order") == 0) {
      if (parse_word (&lx, "True"))
        *fortran = TRUE;
      else if (parse_word (&lx, "False"))
        *fortran = FALSE;
      else
        ok = FALSE;
      have_fortran = ok;
    } else if (strcmp (key, "shape") == 0) {
      ok = have_shape = parse_shape (&lx, ndim, shape);
    } else {
      ok = FALSE;
    }
    g_free (key);
    if (!ok)
      goto bad;
    if (!eat (&lx, ',')) {
      if (!eat (&lx, '}'))
        goto bad;
      break;
    }
  }
  if (have_descr && have_fortran && have_shape)
    return TRUE;

bad:
  g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
      "%s: npy header is not a dict with 'descr', 'fortran_order' and "
      "'shape' (at byte %" G_GSIZE_FORMAT " of the header)", file,
      (gsize) (lx.p - text));
  return FALSE;
}

static gboolean
parse_npy (LingbotCheckpoint * ckpt, const char *file, LbStorage * storage,
    const guint8 * data, gsize len, GError ** error)
{
  if (len < 10 || memcmp (data, "\x93NUMPY", 6) != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: not a NumPy .npy file (bad magic)", file);
    return FALSE;
  }
  guint major = data[6], minor = data[7];
  gsize hstart;
  guint64 hlen;
  if (major == 1) {
    hstart = 10;
    hlen = data[8] | ((guint) data[9] << 8);
  } else if (major == 2 || major == 3) {
    if (len < 12) {
      g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
          "%s: truncated npy header", file);
      return FALSE;
    }
    hstart = 12;
    hlen = data[8] | ((guint64) data[9] << 8) | ((guint64) data[10] << 16) |
        ((guint64) data[11] << 24);
  } else {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "%s: unsupported npy format version %u.%u", file, major, minor);
    return FALSE;
  }
  if (hlen > len - hstart) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: npy header length %" G_GUINT64_FORMAT
        " goes beyond the end of the file (%" G_GSIZE_FORMAT " bytes)", file,
        hlen, len);
    return FALSE;
  }

  LbDType dtype = LB_DTYPE_F32;
  gboolean fortran = FALSE;
  int ndim = 0;
  int64_t shape[LB_MAX_DIMS];
  if (!parse_header (file, (const char *) data + hstart, hlen, &dtype,
          &fortran, &ndim, shape, error))
    return FALSE;

  guint64 nbytes, offset = hstart + hlen;
  if (!lingbot_ckpt_nbytes (dtype, ndim, shape, &nbytes)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: npy shape is too large", file);
    return FALSE;
  }
  if (nbytes > len - offset) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: npy data is truncated (%" G_GUINT64_FORMAT " bytes, expected %"
        G_GUINT64_FORMAT ")", file, (guint64) (len - offset), nbytes);
    return FALSE;
  }

  /* Fortran order is column-major: describe it with reversed strides */
  int64_t stride[LB_MAX_DIMS];
  if (fortran) {
    int64_t s = 1;
    for (int i = 0; i < ndim; i++) {
      stride[i] = s;
      s *= shape[i];
    }
  } else {
    lb_contiguous_strides (ndim, shape, stride);
  }
  LbTensor *t = lingbot_ckpt_tensor_new (storage, offset, nbytes, dtype,
      ndim, shape, stride);
  g_autofree char *name = lingbot_ckpt_basename_noext (file);
  return lingbot_ckpt_add_tensor (ckpt, name, t, file, error);
}

gboolean
lingbot_ckpt_load_npy (LingbotCheckpoint * ckpt, const char *file,
    GError ** error)
{
  return lingbot_ckpt_load_mapped (ckpt, file, parse_npy, error);
}

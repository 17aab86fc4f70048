/* lingbot-gst: umT5 prompt tokenizer (SentencePiece) and text cleaning
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Text cleaning follows Wan's HuggingfaceTokenizer in "whitespace" mode
 * (lingbot_model_spec.md 5.3):
 *
 *     text = ftfy.fix_text(text)
 *     text = html.unescape(html.unescape(text)).strip()
 *     text = re.sub(r"\s+", " ", text).strip()
 *
 * ftfy.fix_text is reproduced for its character-level fixers, in ftfy 6's
 * order and repeated until nothing changes: HTML entities (only when the
 * text has no '<'), C1 controls read as Windows-1252, Latin ligatures,
 * full-width/half-width forms, curly quotes, line breaks, ANSI terminal
 * escapes, control characters, then NFC.  Left out: ftfy's mojibake
 * repair (fix_encoding: re-decoding text that was UTF-8 read as Latin-1 /
 * Windows-1252, restore_byte_a0, decode_inconsistent_utf8) and surrogate
 * fixing (meaningless in UTF-8; invalid UTF-8 input becomes U+FFFD).
 * html.unescape is Python's algorithm (numeric references with its
 * invalid-codepoint rules, legacy entities without ';', longest prefix);
 * its named-entity table is a subset: the HTML 4 Latin-1 set, amp/lt/gt/
 * quot/apos and common typography, arrows, maths and Greek letters.
 * "\s" and strip() use Python's Unicode whitespace set.
 *
 * Token ids then come from libsentencepiece (tokenizer-spm.cc), as the
 * slow/fast Hugging Face T5 tokenizers produce them from the same
 * spiece.model: </s> appended, truncation keeps </s> as the last token,
 * padding with the pad id (0) and a 0/1 mask.
 */
#include "lingbot/tokenizer.h"
#include "lingbot/tokenizer-spm.h"
#include "kernels/error.h"

#include <string.h>

struct _LingbotTokenizer
{
  LbSpm *spm;
  char *path;
  int32_t eos_id;
  int32_t pad_id;
};

/* ------------------------------------------------------------------------ */
/* Unicode helpers over UCS-4 arrays                                        */

typedef struct
{
  gunichar *c;
  gsize n, cap;
} UBuf;

static void
ubuf_push (UBuf * b, gunichar ch)
{
  if (b->n == b->cap) {
    b->cap = MAX (16, b->cap * 2);
    b->c = g_renew (gunichar, b->c, b->cap);
  }
  b->c[b->n++] = ch;
}

static void
ubuf_push_str (UBuf * b, const char *utf8)
{
  for (const char *p = utf8; *p; p = g_utf8_next_char (p))
    ubuf_push (b, g_utf8_get_char (p));
}

/* Python str.isspace() / re "\s" for str patterns. */
static gboolean
py_isspace (gunichar c)
{
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) ||
      c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A)
      || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F
      || c == 0x3000;
}

/* Windows-1252 for 0x80..0x9F; 0 where undefined (kept as is, as ftfy's
 * "sloppy" codec and Python's html module do). */
static const guint16 cp1252_c1[32] = {
  0x20AC, 0, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021,
  0x02C6, 0x2030, 0x0160, 0x2039, 0x0152, 0, 0x017D, 0,
  0, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014,
  0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0, 0x017E, 0x0178,
};

static gunichar
c1_to_cp1252 (gunichar c)
{
  if (c >= 0x80 && c <= 0x9F && cp1252_c1[c - 0x80])
    return cp1252_c1[c - 0x80];
  return c;
}

/* ------------------------------------------------------------------------ */
/* HTML entities                                                            */

typedef struct
{
  const char *name;
  const char *value;            /* UTF-8 */
  gboolean legacy;              /* also recognised without ';' */
} Entity;

static const char *const latin1_names[96] = {
  "nbsp", "iexcl", "cent", "pound", "curren", "yen", "brvbar", "sect",
  "uml", "copy", "ordf", "laquo", "not", "shy", "reg", "macr",
  "deg", "plusmn", "sup2", "sup3", "acute", "micro", "para", "middot",
  "cedil", "sup1", "ordm", "raquo", "frac14", "frac12", "frac34", "iquest",
  "Agrave", "Aacute", "Acirc", "Atilde", "Auml", "Aring", "AElig", "Ccedil",
  "Egrave", "Eacute", "Ecirc", "Euml", "Igrave", "Iacute", "Icirc", "Iuml",
  "ETH", "Ntilde", "Ograve", "Oacute", "Ocirc", "Otilde", "Ouml", "times",
  "Oslash", "Ugrave", "Uacute", "Ucirc", "Uuml", "Yacute", "THORN", "szlig",
  "agrave", "aacute", "acirc", "atilde", "auml", "aring", "aelig", "ccedil",
  "egrave", "eacute", "ecirc", "euml", "igrave", "iacute", "icirc", "iuml",
  "eth", "ntilde", "ograve", "oacute", "ocirc", "otilde", "ouml", "divide",
  "oslash", "ugrave", "uacute", "ucirc", "uuml", "yacute", "thorn", "yuml",
};

static const Entity extra_entities[] = {
  {"amp", "&", TRUE}, {"AMP", "&", TRUE}, {"lt", "<", TRUE},
  {"LT", "<", TRUE}, {"gt", ">", TRUE}, {"GT", ">", TRUE},
  {"quot", "\"", TRUE}, {"QUOT", "\"", TRUE}, {"COPY", "\xc2\xa9", TRUE},
  {"REG", "\xc2\xae", TRUE}, {"apos", "'", FALSE},
  {"hellip", "\u2026", FALSE}, {"mdash", "\u2014", FALSE},
  {"ndash", "\u2013", FALSE}, {"lsquo", "\u2018", FALSE},
  {"rsquo", "\u2019", FALSE}, {"sbquo", "\u201a", FALSE},
  {"ldquo", "\u201c", FALSE}, {"rdquo", "\u201d", FALSE},
  {"bdquo", "\u201e", FALSE}, {"lsaquo", "\u2039", FALSE},
  {"rsaquo", "\u203a", FALSE}, {"bull", "\u2022", FALSE},
  {"prime", "\u2032", FALSE}, {"Prime", "\u2033", FALSE},
  {"trade", "\u2122", FALSE}, {"euro", "\u20ac", FALSE},
  {"dagger", "\u2020", FALSE}, {"Dagger", "\u2021", FALSE},
  {"permil", "\u2030", FALSE}, {"ensp", "\u2002", FALSE},
  {"emsp", "\u2003", FALSE}, {"thinsp", "\u2009", FALSE},
  {"zwnj", "\u200c", FALSE}, {"zwj", "\u200d", FALSE},
  {"lrm", "\u200e", FALSE}, {"rlm", "\u200f", FALSE},
  {"OElig", "\u0152", FALSE}, {"oelig", "\u0153", FALSE},
  {"Scaron", "\u0160", FALSE}, {"scaron", "\u0161", FALSE},
  {"Yuml", "\u0178", FALSE}, {"fnof", "\u0192", FALSE},
  {"circ", "\u02c6", FALSE}, {"tilde", "\u02dc", FALSE},
  {"larr", "\u2190", FALSE}, {"uarr", "\u2191", FALSE},
  {"rarr", "\u2192", FALSE}, {"darr", "\u2193", FALSE},
  {"harr", "\u2194", FALSE}, {"lArr", "\u21d0", FALSE},
  {"rArr", "\u21d2", FALSE}, {"hArr", "\u21d4", FALSE},
  {"minus", "\u2212", FALSE}, {"le", "\u2264", FALSE},
  {"ge", "\u2265", FALSE}, {"ne", "\u2260", FALSE},
  {"asymp", "\u2248", FALSE}, {"equiv", "\u2261", FALSE},
  {"infin", "\u221e", FALSE}, {"sum", "\u2211", FALSE},
  {"prod", "\u220f", FALSE}, {"radic", "\u221a", FALSE},
  {"part", "\u2202", FALSE}, {"int", "\u222b", FALSE},
  {"deg", "\xc2\xb0", TRUE}, {"hearts", "\u2665", FALSE},
  {"spades", "\u2660", FALSE}, {"clubs", "\u2663", FALSE},
  {"diams", "\u2666", FALSE}, {"loz", "\u25ca", FALSE},
  {"Alpha", "\u0391", FALSE}, {"Beta", "\u0392", FALSE},
  {"Gamma", "\u0393", FALSE}, {"Delta", "\u0394", FALSE},
  {"Theta", "\u0398", FALSE}, {"Lambda", "\u039b", FALSE},
  {"Pi", "\u03a0", FALSE}, {"Sigma", "\u03a3", FALSE},
  {"Phi", "\u03a6", FALSE}, {"Psi", "\u03a8", FALSE},
  {"Omega", "\u03a9", FALSE}, {"alpha", "\u03b1", FALSE},
  {"beta", "\u03b2", FALSE}, {"gamma", "\u03b3", FALSE},
  {"delta", "\u03b4", FALSE}, {"epsilon", "\u03b5", FALSE},
  {"zeta", "\u03b6", FALSE}, {"eta", "\u03b7", FALSE},
  {"theta", "\u03b8", FALSE}, {"iota", "\u03b9", FALSE},
  {"kappa", "\u03ba", FALSE}, {"lambda", "\u03bb", FALSE},
  {"mu", "\u03bc", FALSE}, {"nu", "\u03bd", FALSE},
  {"xi", "\u03be", FALSE}, {"omicron", "\u03bf", FALSE},
  {"pi", "\u03c0", FALSE}, {"rho", "\u03c1", FALSE},
  {"sigma", "\u03c3", FALSE}, {"tau", "\u03c4", FALSE},
  {"upsilon", "\u03c5", FALSE}, {"phi", "\u03c6", FALSE},
  {"chi", "\u03c7", FALSE}, {"psi", "\u03c8", FALSE},
  {"omega", "\u03c9", FALSE},
};

/* Looks up @name (UCS-4, @len chars).  Writes the value to @b and returns
 * TRUE when found; @legacy_only restricts to names valid without ';'. */
static gboolean
entity_lookup (const gunichar * name, gsize len, gboolean legacy_only, UBuf * b)
{
  char key[40];
  if (len == 0 || len >= sizeof key)
    return FALSE;
  for (gsize i = 0; i < len; i++) {
    if (name[i] > 0x7F)
      return FALSE;
    key[i] = (char) name[i];
  }
  key[len] = '\0';
  for (int i = 0; i < 96; i++) {
    if (strcmp (key, latin1_names[i]) == 0) {
      ubuf_push (b, 0xA0 + i);
      return TRUE;
    }
  }
  for (gsize i = 0; i < G_N_ELEMENTS (extra_entities); i++) {
    if (strcmp (key, extra_entities[i].name) == 0 &&
        (!legacy_only || extra_entities[i].legacy)) {
      ubuf_push_str (b, extra_entities[i].value);
      return TRUE;
    }
  }
  return FALSE;
}

/* Python html._replace_charref for a numeric reference. */
static void
push_charref (UBuf * b, guint64 num)
{
  if (num == 0x00) {
    ubuf_push (b, 0xFFFD);
  } else if (num == 0x0D) {
    ubuf_push (b, '\r');
  } else if (num >= 0x80 && num <= 0x9F) {
    ubuf_push (b, c1_to_cp1252 ((gunichar) num));
  } else if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) {
    ubuf_push (b, 0xFFFD);
  } else if ((num >= 0x01 && num <= 0x08) || num == 0x0B ||
      (num >= 0x0E && num <= 0x1F) || num == 0x7F ||
      (num >= 0xFDD0 && num <= 0xFDEF) || (num & 0xFFFE) == 0xFFFE) {
    /* invalid code point: dropped */
  } else {
    ubuf_push (b, (gunichar) num);
  }
}

/* Parses digits at s[*i..n); returns FALSE if there are none. */
static gboolean
parse_number (const gunichar * s, gsize n, gsize * i, gboolean hex,
    guint64 * out)
{
  guint64 v = 0;
  gsize start = *i;
  while (*i < n) {
    gunichar c = s[*i];
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (hex && c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (hex && c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      break;
    v = v * (hex ? 16 : 10) + d;
    if (v > 0x7FFFFFFF)
      v = 0x7FFFFFFF;           /* saturate: anything > 0x10FFFF is U+FFFD */
    (*i)++;
  }
  *out = v;
  return *i > start;
}

/* One grammar of character references: called at the '&' at @i of @s
 * (@n characters), pushes the replacement to @out and returns the index
 * after what it replaced, or 0 (pushing nothing) to keep the '&' as it
 * is. */
typedef gsize (*CharRefFunc) (const gunichar * s, gsize n, gsize i, UBuf * out);

static void
html_unescape (const UBuf * in, UBuf * out, CharRefFunc charref)
{
  const gunichar *s = in->c;
  gsize n = in->n, i = 0;
  while (i < n) {
    gsize next = s[i] == '&' ? charref (s, n, i, out) : 0;
    if (next == 0)
      ubuf_push (out, s[i++]);
    else
      i = next;
  }
}

/* Python html.unescape(): `&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|
 * [^\t\n\f <&#;]{1,32};?)`. */
static gsize
charref_python (const gunichar * s, gsize n, gsize i, UBuf * out)
{
  gsize j = i + 1;
  if (j < n && s[j] == '#') {
    gsize k = j + 1;
    gboolean hex = k < n && (s[k] == 'x' || s[k] == 'X');
    if (hex)
      k++;
    guint64 num;
    if (!parse_number (s, n, &k, hex, &num))
      return 0;
    if (k < n && s[k] == ';')
      k++;
    push_charref (out, num);
    return k;
  }
  gsize k = j;
  while (k < n && k - j < 32 && s[k] != '\t' && s[k] != '\n' &&
      s[k] != '\f' && s[k] != ' ' && s[k] != '<' && s[k] != '&' &&
      s[k] != '#' && s[k] != ';')
    k++;
  gsize len = k - j;
  if (len == 0)
    return 0;
  gboolean semi = k < n && s[k] == ';';
  gsize end = semi ? k + 1 : k;
  if (semi && entity_lookup (s + j, len, FALSE, out))
    return end;
  for (gsize x = len; x >= 2; x--) {
    if (entity_lookup (s + j, x, TRUE, out)) {
      for (gsize r = j + x; r < end; r++)
        ubuf_push (out, s[r]);
      return end;
    }
  }
  for (gsize r = i; r < end; r++)
    ubuf_push (out, s[r]);
  return end;
}

/* ftfy's unescape_html: `&#?[0-9A-Za-z]{1,24};` only. */
static gsize
charref_ftfy (const gunichar * s, gsize n, gsize i, UBuf * out)
{
  gsize j = i + 1;
  gboolean num = j < n && s[j] == '#';
  if (num)
    j++;
  gsize k = j;
  while (k < n && k - j < 25 && s[k] < 0x80 && g_ascii_isalnum (s[k]))
    k++;
  if (k == j || k - j > 24 || k >= n || s[k] != ';')
    return 0;
  if (num) {
    gsize p = j;
    gboolean hex = s[p] == 'x' || s[p] == 'X';
    guint64 v;
    if (hex)
      p++;
    if (parse_number (s, k, &p, hex, &v) && p == k) {
      push_charref (out, v);
      return k + 1;
    }
  } else if (entity_lookup (s + j, k - j, FALSE, out)) {
    return k + 1;
  }
  for (gsize r = i; r <= k; r++)
    ubuf_push (out, s[r]);
  return k + 1;
}

/* ------------------------------------------------------------------------ */
/* ftfy character fixers                                                    */

static const char *
latin_ligature (gunichar c)
{
  switch (c) {
    case 0x0132:
      return "IJ";
    case 0x0133:
      return "ij";
    case 0x0149:
      return "\u02bcn";
    case 0x01F1:
      return "DZ";
    case 0x01F2:
      return "Dz";
    case 0x01F3:
      return "dz";
    case 0x01C4:
      return "D\u017d";
    case 0x01C5:
      return "D\u017e";
    case 0x01C6:
      return "d\u017e";
    case 0x01C7:
      return "LJ";
    case 0x01C8:
      return "Lj";
    case 0x01C9:
      return "lj";
    case 0x01CA:
      return "NJ";
    case 0x01CB:
      return "Nj";
    case 0x01CC:
      return "nj";
    case 0xFB00:
      return "ff";
    case 0xFB01:
      return "fi";
    case 0xFB02:
      return "fl";
    case 0xFB03:
      return "ffi";
    case 0xFB04:
      return "ffl";
    case 0xFB05:
      return "\u017ft";
    case 0xFB06:
      return "st";
    default:
      return NULL;
  }
}

/* ftfy remove_control_chars. */
static gboolean
is_ftfy_control (gunichar c)
{
  return c <= 0x08 || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
      (c >= 0x206A && c <= 0x206F) || c == 0xFEFF ||
      (c >= 0xFFF9 && c <= 0xFFFC);
}

/* One pass of the ftfy fixers after unescape, in ftfy 6's order. */
static void
ftfy_char_fixes (const UBuf * in, UBuf * out)
{
  UBuf a = { 0 }, bb = { 0 };
  /* fix_c1_controls, fix_latin_ligatures, fix_character_width,
   * uncurl_quotes: per character */
  for (gsize i = 0; i < in->n; i++) {
    gunichar c = c1_to_cp1252 (in->c[i]);
    const char *lig = latin_ligature (c);
    if (lig) {
      ubuf_push_str (&a, lig);
      continue;
    }
    if (c == 0x3000) {
      c = ' ';
    } else if (c >= 0xFF01 && c <= 0xFFEF) {
      char u[8];
      int len = g_unichar_to_utf8 (c, u);
      char *k = g_utf8_normalize (u, len, G_NORMALIZE_NFKC);
      if (k && *k) {
        ubuf_push_str (&a, k);
        g_free (k);
        continue;
      }
      g_free (k);
    }
    if (c == 0x02BC || (c >= 0x2018 && c <= 0x201B))
      c = '\'';
    else if (c >= 0x201C && c <= 0x201F)
      c = '"';
    ubuf_push (&a, c);
  }
  /* fix_line_breaks */
  for (gsize i = 0; i < a.n; i++) {
    gunichar c = a.c[i];
    if (c == '\r') {
      if (i + 1 < a.n && a.c[i + 1] == '\n')
        i++;
      c = '\n';
    } else if (c == 0x2028 || c == 0x2029 || c == 0x85) {
      c = '\n';
    }
    ubuf_push (&bb, c);
  }
  /* remove_terminal_escapes (ESC [ [0-9;]* [A-Za-z]), remove_control_chars */
  for (gsize i = 0; i < bb.n; i++) {
    gunichar c = bb.c[i];
    if (c == 0x1B && i + 1 < bb.n && bb.c[i + 1] == '[') {
      gsize k = i + 2;
      while (k < bb.n && ((bb.c[k] >= '0' && bb.c[k] <= '9') || bb.c[k] == ';'))
        k++;
      if (k < bb.n && bb.c[k] < 0x80 && g_ascii_isalpha (bb.c[k])) {
        i = k;
        continue;
      }
    }
    if (is_ftfy_control (c))
      continue;
    ubuf_push (out, c);
  }
  g_free (a.c);
  g_free (bb.c);
}

static char *
ubuf_to_utf8 (const UBuf * b)
{
  char *s = g_ucs4_to_utf8 (b->c ? b->c : (gunichar *) "", b->n, NULL, NULL,
      NULL);
  return s ? s : g_strdup ("");
}

static void
ubuf_from_utf8 (UBuf * b, const char *s)
{
  b->n = 0;
  for (const char *p = s; *p; p = g_utf8_next_char (p))
    ubuf_push (b, g_utf8_get_char (p));
}

static gboolean
ubuf_has (const UBuf * b, gunichar c)
{
  for (gsize i = 0; i < b->n; i++)
    if (b->c[i] == c)
      return TRUE;
  return FALSE;
}

static gboolean
ubuf_equal (const UBuf * a, const UBuf * b)
{
  return a->n == b->n && (a->n == 0 ||
      memcmp (a->c, b->c, a->n * sizeof (gunichar)) == 0);
}

/**
 * lingbot_text_clean:
 * @text: a prompt, UTF-8 (invalid bytes become U+FFFD)
 *
 * Wan's "whitespace" cleaning of a prompt before tokenization
 * (lingbot_model_spec.md 5.3): ftfy.fix_text (the character-level fixers
 * and NFC; not the mojibake repair, see the top of tokenizer.c), HTML
 * unescaping twice, strip, runs of whitespace collapsed into one space.
 *
 * Returns: (transfer full): the cleaned text; never %NULL.
 */
char *
lingbot_text_clean (const char *text)
{
  g_autofree char *valid = g_utf8_make_valid (text ? text : "", -1);
  UBuf cur = { 0 }, tmp = { 0 }, prev = { 0 };
  ubuf_from_utf8 (&cur, valid);
  /* ftfy's unescape_html="auto": decided once, on the input text */
  const gboolean unescape = !ubuf_has (&cur, '<');

  /* ftfy.fix_text: repeat the fixers until the text stops changing */
  for (int round = 0; round < 16; round++) {
    prev.n = 0;
    for (gsize i = 0; i < cur.n; i++)
      ubuf_push (&prev, cur.c[i]);
    tmp.n = 0;
    if (unescape) {
      html_unescape (&cur, &tmp, charref_ftfy);
      UBuf t = cur;
      cur = tmp;
      tmp = t;
      tmp.n = 0;
    }
    ftfy_char_fixes (&cur, &tmp);
    g_autofree char *u = ubuf_to_utf8 (&tmp);
    g_autofree char *nfc = g_utf8_normalize (u, -1, G_NORMALIZE_NFC);
    ubuf_from_utf8 (&cur, nfc ? nfc : u);
    if (ubuf_equal (&cur, &prev))
      break;
  }

  /* html.unescape(html.unescape(text)) */
  for (int k = 0; k < 2; k++) {
    tmp.n = 0;
    html_unescape (&cur, &tmp, charref_python);
    UBuf t = cur;
    cur = tmp;
    tmp = t;
  }

  /* strip, collapse \s+ into ' ', strip */
  GString *s = g_string_new (NULL);
  gboolean pending_space = FALSE;
  for (gsize i = 0; i < cur.n; i++) {
    if (py_isspace (cur.c[i])) {
      pending_space = s->len > 0;
      continue;
    }
    if (pending_space)
      g_string_append_c (s, ' ');
    pending_space = FALSE;
    g_string_append_unichar (s, cur.c[i]);
  }
  g_free (cur.c);
  g_free (tmp.c);
  g_free (prev.c);
  return g_string_free (s, FALSE);
}

/* ------------------------------------------------------------------------ */
/* Tokenizer                                                                */

static char *
find_model_file (const char *path)
{
  static const char *const names[] = {
    "spiece.model", "tokenizer.model", "google/umt5-xxl/spiece.model",
    "google/umt5-xxl/tokenizer.model",
  };
  if (!g_file_test (path, G_FILE_TEST_IS_DIR))
    return g_strdup (path);
  for (gsize i = 0; i < G_N_ELEMENTS (names); i++) {
    char *p = g_build_filename (path, names[i], NULL);
    if (g_file_test (p, G_FILE_TEST_IS_REGULAR))
      return p;
    g_free (p);
  }
  return NULL;
}

/**
 * lingbot_tokenizer_new:
 * @path: a SentencePiece model file (`spiece.model`, `tokenizer.model`), or
 *   a directory holding one (also `google/umt5-xxl/spiece.model` under it,
 *   Wan's layout next to the T5 .pth)
 * @error: %LB_ERROR_NOT_FOUND when no model file is found,
 *   %LB_ERROR_FORMAT when libsentencepiece cannot load it
 *
 * Loads the umT5 tokenizer (spec 5.3).  The </s> id is the model's eos id
 * (1 for umT5), the pad id its pad id (0), falling back to 1 / 0 when the
 * model defines none.
 *
 * Returns: (transfer full): the tokenizer, or %NULL on error.
 */
LingbotTokenizer *
lingbot_tokenizer_new (const char *path, GError ** error)
{
  g_return_val_if_fail (path != NULL, NULL);
  g_autofree char *file = find_model_file (path);
  if (file == NULL || !g_file_test (file, G_FILE_TEST_IS_REGULAR)) {
    g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND,
        "tokenizer: no SentencePiece model at %s (expected a file or a "
        "directory with spiece.model or tokenizer.model)", path);
    return NULL;
  }
  char *err = NULL;
  LbSpm *spm = lb_spm_load (file, &err);
  if (spm == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "tokenizer: cannot load SentencePiece model %s: %s", file,
        err ? err : "unknown error");
    g_free (err);
    return NULL;
  }
  LingbotTokenizer *tok = g_new0 (LingbotTokenizer, 1);
  tok->spm = spm;
  tok->path = g_steal_pointer (&file);
  int eos = lb_spm_eos_id (spm), pad = lb_spm_pad_id (spm);
  tok->eos_id = eos >= 0 ? eos : 1;
  tok->pad_id = pad >= 0 ? pad : 0;
  return tok;
}

/**
 * lingbot_tokenizer_free:
 * @tok: (nullable): a tokenizer
 */
void
lingbot_tokenizer_free (LingbotTokenizer * tok)
{
  if (tok == NULL)
    return;
  lb_spm_free (tok->spm);
  g_free (tok->path);
  g_free (tok);
}

/**
 * lingbot_tokenizer_get_vocab_size:
 * @tok: a tokenizer
 *
 * Returns: the number of pieces (about 256.3k for umT5).
 */
int
lingbot_tokenizer_get_vocab_size (LingbotTokenizer * tok)
{
  return lb_spm_piece_size (tok->spm);
}

/**
 * lingbot_tokenizer_get_eos_id:
 * @tok: a tokenizer
 *
 * Returns: the id of </s>, appended to every prompt (1 for umT5).
 */
int32_t
lingbot_tokenizer_get_eos_id (LingbotTokenizer * tok)
{
  return tok->eos_id;
}

/**
 * lingbot_tokenizer_get_pad_id:
 * @tok: a tokenizer
 *
 * Returns: the padding id (0 for umT5).
 */
int32_t
lingbot_tokenizer_get_pad_id (LingbotTokenizer * tok)
{
  return tok->pad_id;
}

/**
 * lingbot_tokenizer_tokenize:
 * @tok: a tokenizer
 * @text: UTF-8 text, used as is (no cleaning, no </s>)
 * @n_ids: (out): number of ids returned
 * @error: %LB_ERROR_FORMAT if SentencePiece fails
 *
 * Plain SentencePiece encoding.
 *
 * Returns: (transfer full) (array length=n_ids): the ids (g_free), or
 *   %NULL on error.
 */
int32_t *
lingbot_tokenizer_tokenize (LingbotTokenizer * tok, const char *text,
    gsize * n_ids, GError ** error)
{
  char *err = NULL;
  size_t n = 0;
  int32_t *ids = lb_spm_encode (tok->spm, text, strlen (text), &n, &err);
  if (ids == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "tokenizer: SentencePiece encode failed: %s", err ? err : "?");
    g_free (err);
    return NULL;
  }
  *n_ids = n;
  return ids;
}

/**
 * lingbot_tokenizer_encode:
 * @tok: a tokenizer
 * @prompt: (nullable): the prompt, UTF-8 (%NULL is "")
 * @max_len: output length, %LINGBOT_TEXT_LEN (512) for the model; >= 1
 * @ids: (out caller-allocates) (array length=max_len): token ids
 * @mask: (out caller-allocates) (array length=max_len) (nullable): 1 for
 *   real tokens (including </s>), 0 for padding
 * @error: %LB_ERROR_INVALID_ARGUMENT or %LB_ERROR_FORMAT
 *
 * The reference's prompt tokenization (spec 5.3): lingbot_text_clean(),
 * SentencePiece, the pieces truncated to @max_len - 1, </s> appended, then
 * padding with the pad id to @max_len.
 *
 * Returns: the number of real tokens (>= 1, the mask's count of ones), or
 *   -1 on error.
 */
int
lingbot_tokenizer_encode (LingbotTokenizer * tok, const char *prompt,
    int max_len, int32_t * ids, uint8_t * mask, GError ** error)
{
  if (max_len < 1) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "tokenizer: max_len %d < 1", max_len);
    return -1;
  }
  g_autofree char *clean = lingbot_text_clean (prompt ? prompt : "");
  gsize n = 0;
  g_autofree int32_t *pieces = lingbot_tokenizer_tokenize (tok, clean, &n,
      error);
  if (pieces == NULL)
    return -1;
  gsize keep = MIN (n, (gsize) max_len - 1);
  for (gsize i = 0; i < keep; i++)
    ids[i] = pieces[i];
  ids[keep] = tok->eos_id;
  for (gsize i = keep + 1; i < (gsize) max_len; i++)
    ids[i] = tok->pad_id;
  if (mask) {
    for (gsize i = 0; i < (gsize) max_len; i++)
      mask[i] = i <= keep;
  }
  return (int) keep + 1;
}

/**
 * lingbot_tokenizer_decode:
 * @tok: a tokenizer
 * @ids: (array length=n_ids): token ids; control ids (</s>, pad) decode to
 *   nothing
 * @n_ids: number of ids
 * @error: %LB_ERROR_FORMAT (e.g. an id out of range)
 *
 * Returns: (transfer full): the text, or %NULL on error.
 */
char *
lingbot_tokenizer_decode (LingbotTokenizer * tok, const int32_t * ids,
    gsize n_ids, GError ** error)
{
  int size = lb_spm_piece_size (tok->spm);
  for (gsize i = 0; i < n_ids; i++) {
    if (ids[i] < 0 || ids[i] >= size) {
      g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
          "tokenizer: id %d at position %" G_GSIZE_FORMAT
          " is out of range [0, %d)", ids[i], i, size);
      return NULL;
    }
  }
  char *err = NULL;
  char *text = lb_spm_decode (tok->spm, ids, n_ids, &err);
  if (text == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "tokenizer: SentencePiece decode failed: %s", err ? err : "?");
    g_free (err);
  }
  return text;
}

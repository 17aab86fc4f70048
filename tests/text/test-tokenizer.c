/* Unit tests: prompt cleaning and the SentencePiece tokenizer, with a small
 * model trained at build time from tests/data/text/spm-corpus.txt.
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * argv[1]: the .model file built by spm_train (tests/text/meson.build).
 */
#include "lingbot/tokenizer.h"
#include "kernels/error.h"

#include <string.h>
#include <glib/gstdio.h>

static const char *model_path;

static void
check_clean (const char *in, const char *want)
{
  g_autofree char *got = lingbot_text_clean (in);
  g_assert_cmpstr (got, ==, want);
}

static void
test_clean (void)
{
  check_clean ("", "");
  check_clean ("   \t\n ", "");
  check_clean ("  Hello   \t world \r\n again  ", "Hello world again");
  /* Python's \s: NBSP, ideographic space, NEL-as-ftfy, em space */
  check_clean ("a\u00a0b\u3000c\u2003d", "a b c d");
  /* html.unescape twice (and ftfy's own pass) */
  check_clean ("&amp;amp; &lt;b&gt;", "& <b>");
  check_clean ("&#128512; &#x41;&#65 &copy 2024", "\U0001F600 AA \u00a9 2024");
  check_clean ("&#0;", "\ufffd");
  check_clean ("&notit;", "\u00acit;");
  check_clean ("&bogus; & x", "&bogus; & x");
  /* ftfy: curly quotes, ligatures, full width, C1 controls as cp1252 */
  check_clean ("\u201ccurly\u201d \u2018quotes\u2019", "\"curly\" 'quotes'");
  check_clean ("\ufb01ne \uff21\uff22\uff23\uff11\uff12\uff13", "fine ABC123");
  check_clean ("\xc2\x93quoted\xc2\x94 \xc2\x85", "\"quoted\" \u2026");
  /* ANSI escapes and control characters removed; NFC */
  check_clean ("\x1b[31mred\x1b[0m\x07!", "red!");
  check_clean ("cafe\u0301", "caf\u00e9");
  /* invalid UTF-8 becomes U+FFFD */
  check_clean ("ab\xff" "c", "ab\ufffd" "c");
  /* Chinese, emoji untouched */
  check_clean (" 一座古老的石桥  🎉 ", "一座古老的石桥 🎉");
}

static LingbotTokenizer *
load (void)
{
  g_autoptr (GError) err = NULL;
  LingbotTokenizer *tok = lingbot_tokenizer_new (model_path, &err);
  g_assert_no_error (err);
  g_assert_nonnull (tok);
  return tok;
}

static void
test_model_ids (void)
{
  g_autoptr (LingbotTokenizer) tok = load ();
  g_assert_cmpint (lingbot_tokenizer_get_vocab_size (tok), ==, 500);
  g_assert_cmpint (lingbot_tokenizer_get_eos_id (tok), ==, 1);
  g_assert_cmpint (lingbot_tokenizer_get_pad_id (tok), ==, 0);
}

/* encode to 512, check </s>, padding and mask, and that the real tokens
 * decode back to the cleaned text */
static int
check_roundtrip (LingbotTokenizer * tok, const char *prompt)
{
  g_autoptr (GError) err = NULL;
  int32_t ids[LINGBOT_TEXT_LEN];
  uint8_t mask[LINGBOT_TEXT_LEN];
  int n = lingbot_tokenizer_encode (tok, prompt, LINGBOT_TEXT_LEN, ids, mask,
      &err);
  g_assert_no_error (err);
  g_assert_cmpint (n, >=, 1);
  g_assert_cmpint (n, <=, LINGBOT_TEXT_LEN);
  g_assert_cmpint (ids[n - 1], ==, 1);
  for (int i = 0; i < LINGBOT_TEXT_LEN; i++) {
    g_assert_cmpint (mask[i], ==, i < n);
    if (i >= n)
      g_assert_cmpint (ids[i], ==, 0);
    else if (i < n - 1)
      g_assert_cmpint (ids[i], >, 1);   /* no pad/eos inside the text */
  }
  g_autofree char *clean = lingbot_text_clean (prompt);
  g_autofree char *back = lingbot_tokenizer_decode (tok, ids, n, &err);
  g_assert_no_error (err);
  if (n < LINGBOT_TEXT_LEN)
    g_assert_cmpstr (back, ==, clean);
  else
    g_assert_true (g_str_has_prefix (clean, back));
  return n;
}

static void
test_roundtrip (void)
{
  g_autoptr (LingbotTokenizer) tok = load ();
  g_assert_cmpint (check_roundtrip (tok, ""), ==, 1);
  g_assert_cmpint (check_roundtrip (tok, " \t "), ==, 1);
  check_roundtrip (tok, "A small stone bridge crosses a slow river at dawn.");
  check_roundtrip (tok, "  The camera   turns\nleft, 16 fps &amp; 100%  ");
  check_roundtrip (tok, "La caméra avance lentement; Ünïcödé façade");
  check_roundtrip (tok,
      "一座古老的石桥横跨在河上，镜头慢慢向前移动。");
  check_roundtrip (tok,
      "Уютная улица, 静かな村, 카메라 🎉🚀 fireworks 👩‍🚀");
  check_roundtrip (tok,
      "rare chars \u2603 \U0001F98A \u05e9\u05dc\u05d5\u05dd");
}

static void
test_truncation (void)
{
  g_autoptr (LingbotTokenizer) tok = load ();
  g_autoptr (GError) err = NULL;
  GString *s = g_string_new (NULL);
  for (int i = 0; i < 300; i++)
    g_string_append_printf (s, "The camera moves forward %d times. ", i);
  int n = check_roundtrip (tok, s->str);
  g_assert_cmpint (n, ==, LINGBOT_TEXT_LEN);

  /* the first 511 pieces of the cleaned text, then </s> */
  g_autofree char *clean = lingbot_text_clean (s->str);
  gsize np = 0;
  g_autofree int32_t *pieces = lingbot_tokenizer_tokenize (tok, clean, &np,
      &err);
  g_assert_no_error (err);
  g_assert_cmpuint (np, >, LINGBOT_TEXT_LEN);
  int32_t ids[LINGBOT_TEXT_LEN];
  uint8_t mask[LINGBOT_TEXT_LEN];
  g_assert_cmpint (lingbot_tokenizer_encode (tok, s->str, LINGBOT_TEXT_LEN,
          ids, mask, &err), ==, LINGBOT_TEXT_LEN);
  g_assert_cmpmem (ids, 511 * sizeof (int32_t), pieces, 511 * sizeof (int32_t));
  g_assert_cmpint (ids[511], ==, 1);

  /* short max_len keeps </s> too */
  int32_t few[4];
  uint8_t fm[4];
  g_assert_cmpint (lingbot_tokenizer_encode (tok, s->str, 4, few, fm, &err),
      ==, 4);
  g_assert_cmpmem (few, 3 * sizeof (int32_t), pieces, 3 * sizeof (int32_t));
  g_assert_cmpint (few[3], ==, 1);
  g_assert_cmpint (lingbot_tokenizer_encode (tok, "x", 0, few, fm, &err),
      ==, -1);
  g_assert_error (err, LB_ERROR, LB_ERROR_INVALID_ARGUMENT);
  g_string_free (s, TRUE);
}

static void
test_errors (void)
{
  g_autoptr (GError) err = NULL;
  g_assert_null (lingbot_tokenizer_new ("/nonexistent/spiece.model", &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_NOT_FOUND);
  g_clear_error (&err);

  /* a directory: spiece.model is looked up inside */
  g_autofree char *dir = g_dir_make_tmp ("lingbot-tok-XXXXXX", &err);
  g_assert_no_error (err);
  g_assert_null (lingbot_tokenizer_new (dir, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_NOT_FOUND);
  g_clear_error (&err);
  g_autofree char *contents = NULL;
  gsize len = 0;
  g_assert_true (g_file_get_contents (model_path, &contents, &len, &err));
  g_autofree char *sp = g_build_filename (dir, "spiece.model", NULL);
  g_assert_true (g_file_set_contents (sp, contents, (gssize) len, &err));
  LingbotTokenizer *tok = lingbot_tokenizer_new (dir, &err);
  g_assert_no_error (err);
  g_assert_nonnull (tok);
  int32_t bad[2] = { 5, 100000 };
  g_assert_null (lingbot_tokenizer_decode (tok, bad, 2, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_FORMAT);
  g_clear_error (&err);
  lingbot_tokenizer_free (tok);

  /* not a SentencePiece model */
  g_assert_true (g_file_set_contents (sp, "not a model", -1, &err));
  g_assert_null (lingbot_tokenizer_new (sp, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_FORMAT);
  g_clear_error (&err);

  /* a 30-byte model on which libsentencepiece throws (its double-array
   * trie refuses an empty piece): a clean error, and the processor is
   * freed (it leaked; fuzz corpus spm/repro-load-throws-leak replays this
   * under LeakSanitizer) */
  static const guint8 throws[] = {
    0x0a, 0x0e, 0x0a, 0x05, 0x3c, 0xa2, 0x6e, 0x6b, 0x3e, 0x15, 0x00, 0x00,
    0x00, 0x00, 0x18, 0x02, 0x0a, 0x0c, 0x0a, 0x03, 0x00, 0x73, 0x3e, 0x15,
    0x3c, 0x00, 0x00, 0x00, 0x18, 0x00,
  };
  g_assert_true (g_file_set_contents (sp, (const char *) throws,
          sizeof throws, &err));
  g_assert_null (lingbot_tokenizer_new (sp, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_FORMAT);
  g_autofree char *prefix = g_strdup_printf ("tokenizer: cannot load "
      "SentencePiece model %s: ", sp);
  g_assert_true (g_str_has_prefix (err->message, prefix));
  /* the library's exception text after its source position */
  g_assert_true (g_str_has_suffix (err->message,
          " exception: failed to insert key: zero-length key"));
  g_unlink (sp);
  g_rmdir (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (argc < 2) {
    g_printerr ("usage: test-tokenizer SPM-MODEL\n");
    return 1;
  }
  model_path = argv[1];
  g_test_add_func ("/text/tokenizer/clean", test_clean);
  g_test_add_func ("/text/tokenizer/model-ids", test_model_ids);
  g_test_add_func ("/text/tokenizer/roundtrip", test_roundtrip);
  g_test_add_func ("/text/tokenizer/truncation", test_truncation);
  g_test_add_func ("/text/tokenizer/errors", test_errors);
  return g_test_run ();
}

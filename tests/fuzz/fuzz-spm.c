/* lingbot-gst: fuzz harness of the SentencePiece model load (tests/fuzz)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The input is a tokenizer.model: lingbot_tokenizer_new() on it, and on a
 * model it accepts, a prompt encoded and decoded.
 */
#include "fuzz-common.h"

#include "lingbot/tokenizer.h"

int
LLVMFuzzerTestOneInput (const uint8_t * data, size_t size)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *path = fuzz_write_file ("tokenizer.model", data, size);
  LingbotTokenizer *tok = lingbot_tokenizer_new (path, &err);

  fuzz_report (err);
  if (tok == NULL) {
    g_assert (err != NULL);
    return 0;
  }
  g_autoptr (GError) eerr = NULL;
  gsize n = 0;
  int32_t *ids = lingbot_tokenizer_tokenize (tok,
      "A red fox &amp; a <b>dog</b> walk, 12 km.", &n, &eerr);
  if (ids != NULL) {
    g_autoptr (GError) derr = NULL;
    char *text = lingbot_tokenizer_decode (tok, ids, n, &derr);

    g_free (text);
  }
  g_free (ids);
  lingbot_tokenizer_free (tok);
  return 0;
}

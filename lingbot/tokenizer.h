/* lingbot-gst: umT5 prompt tokenizer (SentencePiece) and text cleaning
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The reference tokenizes the prompt with the Hugging Face tokenizer of
 * `google/umt5-xxl` (a SentencePiece model) after Wan's "whitespace"
 * cleaning, appends </s>, and pads or truncates to 512 tokens with an
 * attention mask (lingbot_model_spec.md section 5.3).  This module does the
 * same through libsentencepiece.
 */
#pragma once

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

/**
 * LINGBOT_TEXT_LEN:
 * Token length of the text context: the tokenizer pads or truncates to it
 * and the encoder output has this many rows (spec 5.3, 5.4).
 */
#define LINGBOT_TEXT_LEN 512

typedef struct _LingbotTokenizer LingbotTokenizer;

char *lingbot_text_clean (const char *text);

LingbotTokenizer *lingbot_tokenizer_new (const char *path, GError ** error);
void lingbot_tokenizer_free (LingbotTokenizer * tok);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotTokenizer, lingbot_tokenizer_free)
int lingbot_tokenizer_get_vocab_size (LingbotTokenizer * tok);
int32_t lingbot_tokenizer_get_eos_id (LingbotTokenizer * tok);
int32_t lingbot_tokenizer_get_pad_id (LingbotTokenizer * tok);

int32_t *lingbot_tokenizer_tokenize (LingbotTokenizer * tok,
    const char *text, gsize * n_ids, GError ** error);
int lingbot_tokenizer_encode (LingbotTokenizer * tok, const char *prompt,
    int max_len, int32_t * ids, uint8_t * mask, GError ** error);
char *lingbot_tokenizer_decode (LingbotTokenizer * tok,
    const int32_t * ids, gsize n_ids, GError ** error);

G_END_DECLS

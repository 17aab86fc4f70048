/* lingbot-encode-prompt: run the umT5 encoder once and write the prompt
 * context to a prompt-embeds safetensors file
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-encode-prompt --model DIR --prompt "..." --out prompt.safetensors
 *   lingbot-encode-prompt --t5 models_t5_umt5-xxl-enc-bf16.pth \
 *       [--tokenizer google/umt5-xxl] --prompt "..." --out prompt.safetensors
 *
 * --model takes a model directory and finds its umT5 and tokenizer as
 * lingbotgen does (lingbot_world_find_text_encoder()); --t5 names the
 * encoder file itself (a .pth, .safetensors or dummy .dummy.json).
 *
 * The file holds one tensor, "prompt_embeds" [512, dim] F32 (metadata
 * lingbot.prompt, lingbot.n_tokens); a session given it skips the encoder.
 */
#include "lingbot/lingbot.h"
#include "lingbot/text-encoder.h"
#include "lingbot/backend.h"
#include "tools/tool-common.h"

#include <stdio.h>
#include <stdlib.h>

int
main (int argc, char **argv)
{
  g_autofree char *t5 = NULL, *tokenizer = NULL, *prompt = NULL;
  g_autofree char *out = NULL, *backend = NULL, *model = NULL;
  gboolean print_tokens = FALSE;
  GOptionEntry entries[] = {
    {"model", 'm', 0, G_OPTION_ARG_FILENAME, &model,
          "Model directory: its umT5 encoder and tokenizer (instead of --t5)",
        "DIR"},
    {"t5", 0, 0, G_OPTION_ARG_FILENAME, &t5,
          "umT5 encoder file (.pth, .safetensors or a dummy .dummy.json)",
        "PATH"},
    {"tokenizer", 0, 0, G_OPTION_ARG_FILENAME, &tokenizer,
          "SentencePiece model or its directory (default: next to --t5)",
        "PATH"},
    {"prompt", 0, 0, G_OPTION_ARG_STRING, &prompt, "the prompt (default \"\")",
        "TEXT"},
    {"out", 0, 0, G_OPTION_ARG_FILENAME, &out, "prompt-embeds file to write",
        "FILE"},
    {"backend", 0, 0, G_OPTION_ARG_STRING, &backend,
        "cpu, cuda or auto (default cpu)", "NAME"},
    {"print-tokens", 0, 0, G_OPTION_ARG_NONE, &print_tokens,
        "print the token ids", NULL},
    {NULL}
  };
  g_autoptr (GError) err = NULL;
  const char *prog = "lingbot-encode-prompt";
  if (!lingbot_tool_parse (prog, "- write a prompt-embeds file", NULL,
          entries, &argc, &argv))
    return LINGBOT_TOOL_USAGE;
  if ((t5 == NULL) == (model == NULL) || out == NULL)
    return lingbot_tool_usage_error (prog, "--out and one of --model DIR or "
        "--t5 FILE are required");
  if (g_file_test (t5 ? t5 : model, G_FILE_TEST_IS_DIR) == (t5 != NULL))
    return lingbot_tool_usage_error (prog, t5 ? "--t5 %s is a directory: "
        "give the encoder file, or the model directory as --model" :
        "--model %s is not a directory", t5 ? t5 : model);
  if (model) {
    g_autofree char *model_tok = NULL;
    if (!lingbot_world_find_text_encoder (model, &t5, &model_tok, &err)) {
      fprintf (stderr, "%s: %s\n", prog, err->message);
      return 1;
    }
    if (tokenizer == NULL)
      tokenizer = g_steal_pointer (&model_tok);
  }

  g_autofree char *tok_dir = tokenizer ? NULL : g_path_get_dirname (t5);
  g_autoptr (LingbotTokenizer) tok = lingbot_tokenizer_new (tokenizer ?
      tokenizer : tok_dir, &err);
  if (tok == NULL)
    goto fail;
  int32_t ids[LINGBOT_TEXT_LEN];
  uint8_t mask[LINGBOT_TEXT_LEN];
  int n = lingbot_tokenizer_encode (tok, prompt ? prompt : "",
      LINGBOT_TEXT_LEN, ids, mask, &err);
  if (n < 0)
    goto fail;
  if (print_tokens) {
    printf ("tokens (%d):", n);
    for (int i = 0; i < n; i++)
      printf (" %d", ids[i]);
    printf ("\n");
  }

  LbBackend *be = lingbot_backend_get (backend ? backend : "cpu", &err);
  if (be == NULL)
    goto fail;
  LbStream *s = be->stream_new (be, 0, &err);
  if (s == NULL)
    goto fail;
  gboolean ok = FALSE;
  LingbotTextEncoder *enc = lingbot_text_encoder_load (t5, s, &err);
  if (enc) {
    LbTensor *c = lingbot_text_encoder_encode_ids (enc, ids, mask,
        LINGBOT_TEXT_LEN, &err);
    if (c) {
      LbTensor *host = lb_tensor_new (LB_DTYPE_F32, 2, c->shape);
      ok = lb_tensor_download (s, host, c, &err) &&
          lingbot_prompt_embeds_save (out, host, prompt ? prompt : "", n, &err);
      if (ok)
        printf ("%s: prompt_embeds [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT
            "], %d tokens\n", out, host->shape[0], host->shape[1], n);
      lb_tensor_free (host);
      lb_tensor_free (c);
    }
    lingbot_text_encoder_free (enc);
  }
  be->stream_free (s);
  if (ok)
    return 0;

fail:
  fprintf (stderr, "lingbot-encode-prompt: %s\n", err ? err->message : "?");
  return 1;
}

/* lingbot-gst: private C interface of the SentencePiece C++ shim
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Implemented in tokenizer-spm.cc; used only by tokenizer.c.  Every
 * function catches C++ exceptions; failures return NULL / -1 and set
 * *err_out to a g_malloc'ed message.  Arrays and strings returned are
 * g_malloc'ed (free with g_free).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C"
{
#endif

  typedef struct LbSpm LbSpm;

  LbSpm *lb_spm_load (const char *path, char **err_out);
  void lb_spm_free (LbSpm * spm);
  int lb_spm_piece_size (const LbSpm * spm);
  int lb_spm_eos_id (const LbSpm * spm);
  int lb_spm_pad_id (const LbSpm * spm);
  int lb_spm_unk_id (const LbSpm * spm);
  int32_t *lb_spm_encode (const LbSpm * spm, const char *text, size_t len,
      size_t *n_out, char **err_out);
  char *lb_spm_decode (const LbSpm * spm, const int32_t * ids, size_t n,
      char **err_out);

#ifdef __cplusplus
}
#endif

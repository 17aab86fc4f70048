// lingbot-gst: minimal C shim over libsentencepiece (C++)
// SPDX-License-Identifier: LGPL-2.1-or-later
//
// The only C++ in liblingbot.  Exposes the few calls tokenizer.c needs
// (tokenizer-spm.h); no exception crosses the C boundary.

#include "lingbot/tokenizer-spm.h"

#include <glib.h>
#include <sentencepiece_processor.h>

#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

struct LbSpm
{
  sentencepiece::SentencePieceProcessor proc;
};

static void
set_err (char **err_out, const std::string &msg)
{
  if (err_out)
    *err_out = g_strdup (msg.c_str ());
}

extern "C" LbSpm *
lb_spm_load (const char *path, char **err_out)
{
  try {
    // owned until returned: Load() may throw (a protobuf it cannot take),
    // and the processor must not leak then
    std::unique_ptr<LbSpm> spm (new LbSpm ());
    const auto status = spm->proc.Load (path);
    if (!status.ok ()) {
      set_err (err_out, status.ToString ());
      return nullptr;
    }
    return spm.release ();
  } catch (const std::exception &e) {
    set_err (err_out, e.what ());
  } catch (...) {
    set_err (err_out, "unknown C++ exception");
  }
  return nullptr;
}

extern "C" void
lb_spm_free (LbSpm *spm)
{
  delete spm;
}

extern "C" int
lb_spm_piece_size (const LbSpm *spm)
{
  return spm->proc.GetPieceSize ();
}

extern "C" int
lb_spm_eos_id (const LbSpm *spm)
{
  return spm->proc.eos_id ();
}

extern "C" int
lb_spm_pad_id (const LbSpm *spm)
{
  return spm->proc.pad_id ();
}

extern "C" int
lb_spm_unk_id (const LbSpm *spm)
{
  return spm->proc.unk_id ();
}

extern "C" int32_t *
lb_spm_encode (const LbSpm *spm, const char *text, size_t len, size_t *n_out,
    char **err_out)
{
  try {
    std::vector<int> ids;
    const auto status = spm->proc.Encode (std::string (text, len), &ids);
    if (!status.ok ()) {
      set_err (err_out, status.ToString ());
      return nullptr;
    }
    int32_t *out = g_new (int32_t, ids.size () + 1);
    for (size_t i = 0; i < ids.size (); i++)
      out[i] = ids[i];
    *n_out = ids.size ();
    return out;
  } catch (const std::exception &e) {
    set_err (err_out, e.what ());
  } catch (...) {
    set_err (err_out, "unknown C++ exception");
  }
  return nullptr;
}

extern "C" char *
lb_spm_decode (const LbSpm *spm, const int32_t *ids, size_t n, char **err_out)
{
  try {
    std::vector<int> v (ids, ids + n);
    std::string text;
    const auto status = spm->proc.Decode (v, &text);
    if (!status.ok ()) {
      set_err (err_out, status.ToString ());
      return nullptr;
    }
    return g_strndup (text.data (), text.size ());
  } catch (const std::exception &e) {
    set_err (err_out, e.what ());
  } catch (...) {
    set_err (err_out, "unknown C++ exception");
  }
  return nullptr;
}

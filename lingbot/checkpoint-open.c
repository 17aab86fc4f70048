/* lingbot-gst: opening a checkpoint: format detection and dispatch
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot_checkpoint_open() finds the format of a path (directory, index,
 * magic bytes, suffix) and hands it to that format's reader, which fills
 * the checkpoint through checkpoint-private.h (checkpoint.c).
 */
#include "lingbot/checkpoint-private.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <glib/gstdio.h>

/* ---- format detection ---- */

static gboolean
has_suffix_ci (const char *s, const char *suffix)
{
  gsize ls = strlen (s), lx = strlen (suffix);
  return ls >= lx && g_ascii_strcasecmp (s + ls - lx, suffix) == 0;
}

static gboolean
read_magic (const char *path, guint8 * buf, gsize * n, GError ** error)
{
  FILE *f = g_fopen (path, "rb");
  if (f == NULL) {
    int e = errno;
    g_set_error (error, LB_ERROR, e == ENOENT ? LB_ERROR_NOT_FOUND :
        LB_ERROR_IO, "%s: cannot open: %s", path, g_strerror (e));
    return FALSE;
  }
  *n = fread (buf, 1, 8, f);
  fclose (f);
  return TRUE;
}

/* model.safetensors.index.json, else the only *.safetensors.index.json
 * (diffusers: diffusion_pytorch_model.safetensors.index.json), else NULL */
static char *
find_index (const char *dir)
{
  char *index = g_build_filename (dir, LINGBOT_SAFETENSORS_INDEX_NAME, NULL);
  if (g_file_test (index, G_FILE_TEST_IS_REGULAR))
    return index;
  g_clear_pointer (&index, g_free);
  GDir *d = g_dir_open (dir, 0, NULL);
  const char *name;
  int found = 0;
  while (d && (name = g_dir_read_name (d)) != NULL) {
    if (g_str_has_suffix (name, ".safetensors.index.json") && found++ == 0)
      index = g_build_filename (dir, name, NULL);
  }
  if (d)
    g_dir_close (d);
  if (found > 1)
    g_clear_pointer (&index, g_free);
  return index;
}

static gboolean
open_directory (LingbotCheckpoint * ckpt, const char *path, GError ** error)
{
  char *index = find_index (path);
  gboolean ok;
  lingbot_ckpt_set_format (ckpt, LINGBOT_CHECKPOINT_SAFETENSORS_SHARDED);
  if (index != NULL)
    ok = lingbot_ckpt_load_safetensors_index (ckpt, index, error);
  else
    ok = lingbot_ckpt_load_safetensors_dir (ckpt, path, error);
  g_free (index);
  return ok;
}

/**
 * lingbot_checkpoint_open:
 * @path: a file or a directory
 * @error: return location for a #GError
 *
 * Opens a checkpoint and maps its tensors (nothing is copied; data pages are
 * read on first use).  The format is detected as follows:
 *
 * - a directory: its `model.safetensors.index.json` if present, else its
 *   only `*.safetensors.index.json` (diffusers names it
 *   `diffusion_pytorch_model.safetensors.index.json`), else every
 *   `*.safetensors` file in it (one sharded set);
 * - a file named `*.json`: a safetensors index (`{"metadata": {...},
 *   "weight_map": {tensor: shard file}}`, shard paths relative to the index);
 * - a file starting with a zip signature: a PyTorch `.pth` (torch.save zip
 *   format: `<dir>/data.pkl` + `<dir>/data/<key>` storage records).  Names:
 *   when the unpickled root is a dict with no tensor values of its own and
 *   one of the keys "state_dict", "model_state", "model_state_dict",
 *   "model", "module" (tried in that order) maps to a dict, only that dict
 *   is read (metadata "pth_wrapper" says which key; the rest, e.g. an
 *   optimizer, is ignored).  Nested dicts, lists and tuples are then
 *   flattened with '.'-joined keys ({'enc': {'w': T}} gives "enc.w",
 *   a list gives "name.0", "name.1"); non-tensor leaves are skipped; a bare
 *   saved tensor is named after the file without its extension;
 * - a file starting with `\x93NUMPY`: a NumPy array, named after the file
 *   without its extension (`poses.npy` gives one tensor "poses");
 * - otherwise by extension (`.pth`, `.pt`, `.ckpt`, `.bin` → PyTorch,
 *   `.npy` → NumPy) and finally safetensors (8-byte little-endian header
 *   length, JSON header, data block).  A file that fails as safetensors
 *   without being named `*.safetensors` is reported as "FILE: not a
 *   checkpoint or array file: no NumPy (.npy) or PyTorch zip signature,
 *   and not safetensors (the safetensors reader's message)".
 *
 * Errors: %LB_ERROR_NOT_FOUND when the file (or a shard an index names)
 * does not exist, %LB_ERROR_IO when it cannot be opened or mapped otherwise,
 * %LB_ERROR_FORMAT for a truncated or inconsistent file (the message names
 * the file and what is wrong), %LB_ERROR_UNSUPPORTED for valid content this
 * reader does not handle (dtype, pickle opcode, legacy torch format),
 * %LB_ERROR_NOT_FOUND for a directory without checkpoint files.
 *
 * Returns: (transfer full) (nullable): the checkpoint, or %NULL with @error
 * set.
 */
LingbotCheckpoint *
lingbot_checkpoint_open (const char *path, GError ** error)
{
  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  LingbotCheckpoint *ckpt = lingbot_ckpt_new (path,
      LINGBOT_CHECKPOINT_SAFETENSORS);
  GError *local = NULL;
  gboolean ok;

  if (g_file_test (path, G_FILE_TEST_IS_DIR)) {
    ok = open_directory (ckpt, path, error);
  } else {
    guint8 magic[8] = { 0 };
    gsize n = 0;
    if (!read_magic (path, magic, &n, error)) {
      lingbot_checkpoint_unref (ckpt);
      return NULL;
    }
    if (has_suffix_ci (path, ".json")) {
      lingbot_ckpt_set_format (ckpt, LINGBOT_CHECKPOINT_SAFETENSORS_SHARDED);
      ok = lingbot_ckpt_load_safetensors_index (ckpt, path, error);
    } else if (n >= 4 && memcmp (magic, "PK", 2) == 0 &&
        ((magic[2] == 3 && magic[3] == 4) || (magic[2] == 5
                && magic[3] == 6))) {
      lingbot_ckpt_set_format (ckpt, LINGBOT_CHECKPOINT_PTH);
      ok = lingbot_ckpt_load_pth (ckpt, path, error);
    } else if (n >= 6 && memcmp (magic, "\x93NUMPY", 6) == 0) {
      lingbot_ckpt_set_format (ckpt, LINGBOT_CHECKPOINT_NPY);
      ok = lingbot_ckpt_load_npy (ckpt, path, error);
    } else if (has_suffix_ci (path, ".pth") || has_suffix_ci (path, ".pt") ||
        has_suffix_ci (path, ".ckpt") || has_suffix_ci (path, ".bin")) {
      lingbot_ckpt_set_format (ckpt, LINGBOT_CHECKPOINT_PTH);
      ok = lingbot_ckpt_load_pth (ckpt, path, error);
    } else if (has_suffix_ci (path, ".npy")) {
      lingbot_ckpt_set_format (ckpt, LINGBOT_CHECKPOINT_NPY);
      ok = lingbot_ckpt_load_npy (ckpt, path, error);
    } else {
      lingbot_ckpt_set_format (ckpt, LINGBOT_CHECKPOINT_SAFETENSORS);
      ok = lingbot_ckpt_load_safetensors (ckpt, path, &local);
      /* no signature and no known name: say what was tried, not only
       * why the bytes are not safetensors (a JPEG given as poses) */
      if (!ok && local->code == LB_ERROR_FORMAT &&
          !has_suffix_ci (path, ".safetensors")) {
        const char *why = local->message;
        gsize n_path = strlen (path);
        if (strncmp (why, path, n_path) == 0 && why[n_path] == ':' &&
            why[n_path + 1] == ' ')
          why += n_path + 2;    /* the path is said once */
        g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
            "%s: not a checkpoint or array file: no NumPy (.npy) or PyTorch "
            "zip signature, and not safetensors (%s)", path, why);
        g_clear_error (&local);
      } else if (!ok) {
        g_propagate_error (error, g_steal_pointer (&local));
      }
    }
  }
  if (!ok) {
    lingbot_checkpoint_unref (ckpt);
    return NULL;
  }
  lingbot_ckpt_finish (ckpt);
  return ckpt;
}

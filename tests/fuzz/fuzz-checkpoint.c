/* lingbot-gst: fuzz harness of the checkpoint readers (tests/fuzz)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * One source, four targets by FUZZ_FORMAT:
 *   safetensors        the input is a .safetensors file
 *   safetensors-index  the input is model.safetensors.index.json, next to
 *                      two valid shards a.safetensors and b.safetensors
 *   pth                the input is a torch .pth (zip) file
 *   npy                the input is a .npy file
 * each opened with lingbot_checkpoint_open(); every tensor it lists is then
 * fetched, checked to be aligned for its dtype, and, when floating point
 * and small, converted to f32 (which reads every element through its
 * strides).
 */
#include "fuzz-common.h"

#include "lingbot/checkpoint.h"

#include <string.h>

#ifndef FUZZ_FORMAT
#error FUZZ_FORMAT must name the format
#endif

/* a one-tensor safetensors file: "w", F32 [2] */
static const char shard_header[] =
    "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

static void
write_shard (const char *name, const char *tensor)
{
  g_autofree char *hdr = g_strdup (shard_header);
  gsize hlen = strlen (hdr);
  guint8 buf[256];

  memcpy (strstr (hdr, "\"w\"") + 1, tensor, 1);
  for (int i = 0; i < 8; i++)
    buf[i] = (guint8) ((guint64) hlen >> (8 * i));
  memcpy (buf + 8, hdr, hlen);
  memset (buf + 8 + hlen, 0, 8);
  g_free (fuzz_write_file (name, buf, 8 + hlen + 8));
}

int
LLVMFuzzerTestOneInput (const uint8_t * data, size_t size)
{
  static gboolean shards;
  const char *format = FUZZ_FORMAT;
  g_autofree char *path = NULL;
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotCheckpoint) ck = NULL;

  if (strcmp (format, "safetensors-index") == 0) {
    if (!shards) {
      write_shard ("a.safetensors", "a");
      write_shard ("b.safetensors", "b");
      shards = TRUE;
    }
    path = fuzz_write_file ("model.safetensors.index.json", data, size);
  } else {
    g_autofree char *name = g_strconcat ("input.", format, NULL);
    path = fuzz_write_file (name, data, size);
  }

  ck = lingbot_checkpoint_open (path, &err);
  fuzz_report (err);
  if (ck == NULL) {
    g_assert (err != NULL && err->message != NULL);
    return 0;
  }
  guint n = 0;
  const char *const *names = lingbot_checkpoint_list_tensors (ck, &n);
  for (guint i = 0; i < n; i++) {
    g_autoptr (GError) gerr = NULL;
    const LbTensor *t = lingbot_checkpoint_get (ck, names[i], &gerr);

    if (t == NULL)
      continue;
    /* the readers' promise: data aligned for the dtype (misaligned
     * safetensors records are copied); the kernels read it typed */
    if (lb_tensor_numel (t) > 0 &&
        (guintptr) t->data % lb_dtype_size (t->dtype) != 0) {
      fprintf (stderr, "fuzz: tensor %s (%s) is misaligned: %p\n",
          names[i], lb_dtype_name (t->dtype), t->data);
      abort ();
    }
    if (lb_dtype_is_float (t->dtype) && lb_tensor_numel (t) <= (1 << 16)) {
      LbTensor *f = lb_tensor_to_f32 (t);

      lb_tensor_free (f);
    }
  }
  return 0;
}

/* lingbot-gst: the CUDA module loads NCCL at run time (no GPU needed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * With NCCL installed (as on this machine: the CUDA toolkit's libnccl.so.2)
 * lingbot_backend_cuda_nccl_available() finds it; with
 * LINGBOT_NCCL_LIBRARY pointing nowhere (the meson test "nccl-missing") it
 * reports the exact error, and the backend then registers no NCCL class,
 * so CUDA groups use the local collectives.
 */
#include "kernels/error.h"

#include <gmodule.h>
#include <stdio.h>

typedef gboolean (*AvailableFunc) (GError ** error);

int
main (int argc, char **argv)
{
  const char *path = g_getenv ("LINGBOT_TEST_CUDA_MODULE");
  GModule *m = path ? g_module_open (path, G_MODULE_BIND_LOCAL) : NULL;
  AvailableFunc available = NULL;
  if (m == NULL || !g_module_symbol (m, "lingbot_backend_cuda_nccl_available",
          (gpointer *) & available)) {
    printf ("SKIP: no CUDA module (%s)\n",
        path ? g_module_error () : "LINGBOT_TEST_CUDA_MODULE unset");
    return 77;
  }
  g_autoptr (GError) err = NULL;
  gboolean ok = available (&err);
  if (g_getenv ("LINGBOT_NCCL_LIBRARY") == NULL) {
    if (!ok) {
      printf ("FAIL: %s\n", err->message);
      return 1;
    }
    printf ("ok - NCCL loaded\n");
    return 0;
  }
  const char *want = "NCCL is not available (/nonexistent/libnccl.so.2: "
      "cannot open shared object file: No such file or directory); groups "
      "of CUDA ranks use the local collectives";
  if (ok || err == NULL || err->code != LB_ERROR_UNSUPPORTED ||
      g_strcmp0 (err->message, want) != 0) {
    printf ("FAIL: got %s\n", ok ? "NCCL loaded" : err->message);
    return 1;
  }
  printf ("ok - without NCCL: %s\n", err->message);
  return 0;
}

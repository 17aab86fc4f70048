/* lingbot-gst: run-time loading of the CUDA module's optional libraries
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/cuda/cuda-library.h"
#include "kernels/error.h"

#include <gmodule.h>
#include <string.h>

/* Opens @data's library and resolves its functions; the module on
 * success (it stays loaded for the process's life), NULL with
 * lib->missing set otherwise. */
static gpointer
library_open (gpointer data)
{
  LbCudaLibrary *lib = data;
  const char *env = g_getenv (lib->env);
  const char *soname = env && *env ? env : lib->soname;
  GModule *m = g_module_open (soname, G_MODULE_BIND_LAZY | G_MODULE_BIND_LOCAL);
  if (m == NULL) {
    lib->missing = g_strdup (g_module_error ());        /* names the file */
    return NULL;
  }
  g_autofree gpointer api = g_malloc0 (lib->api_size);
  for (guint i = 0; i < lib->n_symbols; i++) {
    gpointer sym = NULL;
    if (!g_module_symbol (m, lib->symbols[i].name, &sym) || sym == NULL) {
      lib->missing = g_strdup_printf ("%s has no %s", soname,
          lib->symbols[i].name);
      g_module_close (m);
      return NULL;
    }
    G_STRUCT_MEMBER (gpointer, api, lib->symbols[i].offset) = sym;
  }
  memcpy (lib->api, api, lib->api_size);
  return m;
}

/**
 * lb_cuda_library_load:
 * @lib: the library
 * @error: %LB_ERROR_UNSUPPORTED "NAME is not available (why); fallback"
 *   when the library (@lib->soname, or the file $@lib->env names) or one
 *   of its functions is missing
 *
 * Opens @lib once per process and fills its table of functions; later
 * calls return the first result.
 *
 * Returns: %TRUE when the library can be used.
 */
gboolean
lb_cuda_library_load (LbCudaLibrary * lib, GError ** error)
{
  if (g_once (&lib->once, library_open, lib) != NULL)
    return TRUE;
  g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
      "%s is not available (%s); %s", lib->name, lib->missing, lib->fallback);
  return FALSE;
}

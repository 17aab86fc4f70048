/* lingbot-gst: backend registry
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The CPU backend is linked in.  The CUDA backend is a module,
 * lingbot-backend-cuda.so, opened at run time so that one build runs on
 * machines with and without a GPU: a missing module, a missing driver or
 * cudaGetDeviceCount() failing all mean "CPU only".  The module calls
 * nothing above kernels/: once it is up, the registry takes the NCCL
 * collectives it carries by name and registers them with comm/.
 */
#define _GNU_SOURCE             /* dladdr() */
#include "lingbot/backend.h"
#include "comm/collectives.h"
#include "kernels/error.h"
#include "lingbot-config.h"

#include <dlfcn.h>
#include <gmodule.h>
#include <stdlib.h>
#include <string.h>

#define CUDA_MODULE_NAME "lingbot-backend-cuda"

static GMutex cuda_lock;
static gboolean cuda_probed;
static LbBackend *cuda_backend;
static GError *cuda_error;

/* The folder of liblingbot.so itself (dladdr() on one of its functions),
 * so that the module is found beside the library wherever it was
 * installed or moved to; NULL when that cannot be told. */
static char *
library_dir (void)
{
  Dl_info info;
  if (dladdr ((void *) lingbot_backend_cuda, &info) == 0 || !info.dli_fname
      || !g_path_is_absolute (info.dli_fname))
    return NULL;
  return g_path_get_dirname (info.dli_fname);
}

static GModule *
open_module (GString * tried)
{
  const char *env = g_getenv ("LINGBOT_BACKEND_PATH");
  g_auto (GStrv) env_dirs = env ? g_strsplit (env, G_SEARCHPATH_SEPARATOR_S,
      -1) : NULL;
  g_autofree char *lib = library_dir ();
  g_autofree char *lib_dir = NULL, *build_info = NULL, *build_dir = NULL;
  GPtrArray *dirs = g_ptr_array_new ();
  for (int i = 0; env_dirs && env_dirs[i]; i++)
    if (*env_dirs[i])
      g_ptr_array_add (dirs, env_dirs[i]);
  if (lib) {
    /* installed: libdir/lingbot beside the library (LINGBOT_BACKEND_DIR
     * unless the tree was moved); uninstalled, the library sits at the top
     * of a meson build folder (meson-info/) and the module in its
     * kernels/cuda: no build-tree path is compiled in */
    lib_dir = g_build_filename (lib, "lingbot", NULL);
    g_ptr_array_add (dirs, lib_dir);
    build_info = g_build_filename (lib, "meson-info", NULL);
    if (g_file_test (build_info, G_FILE_TEST_IS_DIR)) {
      build_dir = g_build_filename (lib, "kernels", "cuda", NULL);
      g_ptr_array_add (dirs, build_dir);
    }
  } else {
    g_ptr_array_add (dirs, (gpointer) LINGBOT_BACKEND_DIR);
  }

  GModule *mod = NULL;
  for (guint i = 0; i < dirs->len && mod == NULL; i++) {
    /* not g_module_build_path(): it would add a "lib" prefix */
    g_autofree char *path = g_build_filename (dirs->pdata[i],
        CUDA_MODULE_NAME "." G_MODULE_SUFFIX, NULL);
    if (!g_file_test (path, G_FILE_TEST_EXISTS))
      continue;
    mod = g_module_open (path, G_MODULE_BIND_LOCAL);
    g_string_append_printf (tried, "%s%s: %s", tried->len ? "; " : "", path,
        mod ? "loaded" : g_module_error ());
  }
  g_ptr_array_unref (dirs);
  return mod;
}

/* The module's NCCL collectives for CUDA worker groups; without NCCL the
 * groups keep the local ones (device copies), which only matters with more
 * than one device. */
static void
register_collectives (LbBackend * be)
{
  LbCollectivesProc nccl = (LbCollectivesProc) lb_backend_get_proc (be,
      LB_COLLECTIVES_NCCL_PROC);
  g_autoptr (GError) err = NULL;
  const LbCollectivesClass *klass = nccl ? nccl (&err) : NULL;
  if (klass)
    lb_collectives_register (be->device_type, klass);
  else if (be->device_count > 1)
    g_message ("lingbot: %s", err ? err->message :
        "the CUDA module has no " LB_COLLECTIVES_NCCL_PROC);
}

/**
 * lingbot_backend_cuda:
 * @error: %LB_ERROR_UNSUPPORTED when the module is absent or cannot load,
 *   %LB_ERROR_DEVICE when it loads but finds no device
 *
 * Loads lingbot-backend-cuda.so once per process (searching
 * $LINGBOT_BACKEND_PATH, then lingbot/ beside liblingbot.so, or, when
 * liblingbot.so is that of a build tree, its kernels/cuda) and
 * probes devices; with a device, registers the module's NCCL collectives
 * for CUDA worker groups.  The result, success or failure, is cached.
 *
 * Returns: (transfer none) (nullable): the CUDA backend.
 */
LbBackend *
lingbot_backend_cuda (GError ** error)
{
  g_mutex_lock (&cuda_lock);
  if (!cuda_probed) {
    cuda_probed = TRUE;
    g_autoptr (GString) tried = g_string_new (NULL);
    GModule *mod = open_module (tried);
    LbBackendModuleInit init = NULL;
    if (mod == NULL) {
      g_set_error (&cuda_error, LB_ERROR, LB_ERROR_UNSUPPORTED,
          "CUDA backend module %s not available (%s)", CUDA_MODULE_NAME,
          tried->len ? tried->str : "not found in any search directory");
    } else if (!g_module_symbol (mod, LB_BACKEND_MODULE_INIT,
            (gpointer *) & init) || init == NULL) {
      g_set_error (&cuda_error, LB_ERROR, LB_ERROR_UNSUPPORTED,
          "%s does not export %s", g_module_name (mod), LB_BACKEND_MODULE_INIT);
      g_module_close (mod);
    } else {
      cuda_backend = init (&cuda_error);
      /* kept loaded even without a device: the probe has run the CUDA
       * libraries' constructors (and their exit handlers), so unloading
       * them again is not safe; the failure is cached anyway */
      g_module_make_resident (mod);
      if (cuda_backend)
        register_collectives (cuda_backend);
    }
  }
  LbBackend *be = cuda_backend;
  if (be == NULL && error)
    *error = g_error_copy (cuda_error);
  g_mutex_unlock (&cuda_lock);
  return be;
}

/* Before the CUDA runtime starts for a world of several GPUs: eager module
 * loading.  With lazy loading (CUDA's default) the first launch of each
 * kernel loads its module, which waits for the device's running kernels:
 * during a first chunk that may be a peer's NCCL kernel waiting for this
 * rank (docs/design.md "Multi-GPU start-up").  CUDA reads
 * CUDA_MODULE_LOADING once, when it initialises (the module's probe), so
 * this only helps before the first probe; a value the user set is kept. */
static void
prepare_multi_gpu (void)
{
  g_mutex_lock (&cuda_lock);
  const char *cur = g_getenv ("CUDA_MODULE_LOADING");
  if (!cuda_probed)
    g_setenv ("CUDA_MODULE_LOADING", "EAGER", FALSE);
  else if (cuda_backend != NULL && g_strcmp0 (cur, "EAGER") != 0) {
    static gboolean told;
    if (!told)
      g_message ("lingbot: the CUDA runtime started before a multi-GPU "
          "world with CUDA_MODULE_LOADING=%s; set CUDA_MODULE_LOADING=EAGER "
          "in the environment", cur ? cur : "LAZY (default)");
    told = TRUE;
  }
  g_mutex_unlock (&cuda_lock);
}

/**
 * lingbot_backend_get:
 * @name: "cpu", "cuda" or "auto" (CUDA when a device exists and its op
 *   table is complete, else CPU)
 * @error: the CUDA probe's error when "cuda" was asked for and is not
 *   available; %LB_ERROR_INVALID_ARGUMENT for an unknown name
 *
 * Returns: (transfer none) (nullable): the backend.
 */
LbBackend *
lingbot_backend_get (const char *name, GError ** error)
{
  if (name == NULL || g_str_equal (name, "auto")) {
    /* auto never picks a backend whose op table still has gaps */
    LbBackend *be = lingbot_backend_cuda (NULL);
    return be && !lb_ops_first_missing (be->ops) ? be : lb_cpu_backend ();
  }
  if (g_str_equal (name, "cpu"))
    return lb_cpu_backend ();
  if (g_str_equal (name, "cuda"))
    return lingbot_backend_cuda (error);
  g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
      "unknown backend \"%s\" (expected cpu, cuda or auto)", name);
  return NULL;
}

static gboolean
parse_uint (const char *s, int max, int *out)
{
  guint64 v;
  if (!g_ascii_string_to_unsigned (s, 10, 0, max, &v, NULL))
    return FALSE;
  *out = (int) v;
  return TRUE;
}

/**
 * lingbot_backend_parse_devices:
 * @devices: "cpu:N" (N CPU ranks in this process, 1..64), "cpu" (one),
 *   or a comma-separated list of GPU ordinals, one per rank ("0,1,2,3");
 *   an ordinal may repeat ("0,0": two ranks on GPU 0, whose group then
 *   exchanges by device copies instead of NCCL, lb_worker_group_new()):
 *   the sharded path on one GPU, for tests
 * @backend: (out) (transfer none): the backend the ranks run on
 * @n_ranks: (out): number of ranks
 * @ordinals: (out) (transfer full): device ordinal per rank (g_free)
 * @error: %LB_ERROR_INVALID_ARGUMENT for a malformed string, the CUDA
 *   probe's error when GPUs are asked for and absent, %LB_ERROR_DEVICE for
 *   an ordinal beyond the device count
 *
 * Parses the `devices` property of the elements (DESIGN.md section 3).
 * A list naming two or more GPUs sets CUDA_MODULE_LOADING=EAGER (unless
 * already set) when the CUDA runtime has not started yet, so that no
 * kernel module loads while NCCL kernels wait (docs/design.md "Multi-GPU
 * start-up").
 */
gboolean
lingbot_backend_parse_devices (const char *devices, LbBackend ** backend,
    int *n_ranks, int **ordinals, GError ** error)
{
  if (devices == NULL || *devices == '\0') {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "devices: empty string (expected cpu:N or GPU ordinals like 0,1)");
    return FALSE;
  }
  if (g_str_equal (devices, "cpu") || g_str_has_prefix (devices, "cpu:")) {
    int n = 1;
    if (devices[3] == ':' && !parse_uint (devices + 4, 64, &n)) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "devices \"%s\": expected cpu:N with N between 1 and 64", devices);
      return FALSE;
    }
    if (n < 1) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "devices \"%s\": at least one rank is needed", devices);
      return FALSE;
    }
    *backend = lb_cpu_backend ();
    *n_ranks = n;
    *ordinals = g_new0 (int, n);
    return TRUE;
  }

  g_auto (GStrv) parts = g_strsplit (devices, ",", -1);
  int n = g_strv_length (parts);
  g_autofree int *ord = g_new0 (int, n);
  for (int i = 0; i < n; i++) {
    g_strstrip (parts[i]);
    if (!parse_uint (parts[i], 1023, &ord[i])) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "devices \"%s\": \"%s\" is not a GPU ordinal", devices, parts[i]);
      return FALSE;
    }
  }
  for (int i = 1; i < n; i++)
    if (ord[i] != ord[0]) {
      prepare_multi_gpu ();
      break;
    }
  LbBackend *be = lingbot_backend_cuda (error);
  if (be == NULL)
    return FALSE;
  const char *missing = lb_ops_first_missing (be->ops);
  if (missing) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "devices \"%s\": the CUDA backend of this build lacks the %s op; "
        "use devices=cpu:N", devices, missing);
    return FALSE;
  }
  for (int i = 0; i < n; i++) {
    if (ord[i] >= be->device_count) {
      g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
          "devices \"%s\": device %d does not exist (%d visible)", devices,
          ord[i], be->device_count);
      return FALSE;
    }
  }
  *backend = be;
  *n_ranks = n;
  *ordinals = g_steal_pointer (&ord);
  return TRUE;
}

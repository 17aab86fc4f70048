/* lingbot-gst: run-time loading of the CUDA module's optional libraries
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * cuDNN (cuda-cudnn.c) and NCCL (comm/collectives-nccl.c) are opened with
 * g_module_open() the first time they are needed, not linked: without
 * them the module still loads and the callers take their fallbacks.  Each
 * describes its library (file name, override variable, the functions it
 * calls) in an #LbCudaLibrary; lb_cuda_library_load() opens it once per
 * process.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/**
 * LbCudaSymbol:
 * @name: the function's name in the library
 * @offset: where its pointer goes in the library's table of functions
 *
 * One function an #LbCudaLibrary resolves.
 */
typedef struct
{
  const char *name;
  gsize offset;
} LbCudaSymbol;

/**
 * LbCudaLibrary:
 * @name: the library in messages ("cuDNN")
 * @env: the environment variable that names another file name or path
 *   of the library
 * @soname: the file name opened without @env
 * @fallback: what the callers do without it, the message's tail
 * @symbols: (array length=n_symbols): the functions to resolve
 * @n_symbols: how many
 * @api: the table of function pointers, filled once every function
 *   resolved
 * @api_size: its size in bytes
 * @once: the one load (G_ONCE_INIT)
 * @missing: why loading failed, or %NULL
 *
 * A library the module opens at run time (a static of its caller).
 */
typedef struct
{
  const char *name;
  const char *env;
  const char *soname;
  const char *fallback;
  const LbCudaSymbol *symbols;
  guint n_symbols;
  gpointer api;
  gsize api_size;
  GOnce once;
  char *missing;
} LbCudaLibrary;

gboolean lb_cuda_library_load (LbCudaLibrary * lib, GError ** error);

G_END_DECLS

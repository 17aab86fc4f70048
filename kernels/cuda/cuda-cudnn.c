/* lingbot-gst: per-stream cuDNN handle shared by the cuDNN op paths
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * cuDNN is used for the VAE convolutions (cuda-cudnn-conv.c) and as an
 * alternative attention (cuda-cudnn-sdpa.c).  Each LbStream gets its own
 * handle, created the first time one of those paths runs on it (so a
 * stream that never uses cuDNN never loads its engines) and bound to the
 * stream's cudaStream_t, so cuDNN work is ordered with the other ops.
 */
#include "kernels/cuda/cuda-internal.h"
#include "kernels/cuda/cuda-library.h"
#include <gmodule.h>
#include <stdbool.h>
#include <string.h>

LbCudnnApi lb_cudnn_api;

#define FN(f) { "cudnn" #f, G_STRUCT_OFFSET (LbCudnnApi, f) }
static const LbCudaSymbol cudnn_symbols[] = {
  FN (GetVersion), FN (GetErrorString), FN (Create), FN (Destroy),
  FN (SetStream), FN (BackendCreateDescriptor),
  FN (BackendDestroyDescriptor), FN (BackendFinalize),
  FN (BackendSetAttribute), FN (BackendGetAttribute), FN (BackendExecute),
};

#undef FN

/* LINGBOT_CUDNN_LIBRARY: another file name or path of the library */
static LbCudaLibrary cudnn_library = {
  "cuDNN", "LINGBOT_CUDNN_LIBRARY", "libcudnn.so." G_STRINGIFY (CUDNN_MAJOR),
  "the convolutions use im2col and attention the own kernels",
  cudnn_symbols, G_N_ELEMENTS (cudnn_symbols), &lb_cudnn_api,
  sizeof lb_cudnn_api, G_ONCE_INIT, NULL
};

gboolean
lb_cudnn_load (GError ** error)
{
  return lb_cuda_library_load (&cudnn_library, error);
}

gboolean
lb_cuda_cudnn_check (cudnnStatus_t st, const char *what, GError ** error)
{
  if (st == CUDNN_STATUS_SUCCESS)
    return TRUE;
  g_set_error (error, LB_ERROR, LB_ERROR_DEVICE, "%s: %s", what,
      cudnnGetErrorString (st));
  return FALSE;
}

cudnnHandle_t
lb_cuda_cudnn_handle (LbStream * s, GError ** error)
{
  LbCudaStream *cs = s->priv;
  if (cs->dnn)
    return cs->dnn;
  cudnnHandle_t h = NULL;
  if (!lb_cudnn_load (error) ||
      !lb_cuda_check (cudaSetDevice (cs->device), "cudaSetDevice", error) ||
      !lb_cuda_cudnn_check (cudnnCreate (&h), "cudnnCreate", error))
    return NULL;
  if (!lb_cuda_cudnn_check (cudnnSetStream (h, cs->stream), "cudnnSetStream",
          error)) {
    cudnnDestroy (h);
    return NULL;
  }
  cs->dnn = h;
  return h;
}

void
lb_cuda_cudnn_free (LbCudaStream * cs)
{
  g_clear_pointer (&cs->conv_plans, g_hash_table_destroy);
  g_clear_pointer (&cs->conv_weights, g_hash_table_destroy);
  g_clear_pointer (&cs->sdpa_plans, g_hash_table_destroy);
  g_clear_pointer (&cs->dnn_packs, g_hash_table_destroy);
  if (cs->dnn_ws)
    lb_cuda_pool_free (cs->device, cs->dnn_ws);
  for (guint i = 0; cs->dnn_ws_old && i < cs->dnn_ws_old->len; i++)
    lb_cuda_pool_free (cs->device, g_ptr_array_index (cs->dnn_ws_old, i));
  g_clear_pointer (&cs->dnn_ws_old, g_ptr_array_unref);
  cs->dnn_ws = NULL;
  cs->dnn_ws_size = 0;
  if (cs->dnn)
    cudnnDestroy (cs->dnn);
  cs->dnn = NULL;
}

/* ---- graph (backend) API helpers ---------------------------------------
 *
 * The op paths build their graphs out of finalized operation descriptors
 * and hand them to lb_cudnn_plan_build(), which does what cuDNN's frontend
 * does for a graph: operation graph -> engine heuristics -> the first
 * engine configuration that finalizes into an execution plan, skipping
 * configurations whose numerical notes the caller does not accept.  The
 * plan is then kept by the caller (per-stream plan tables) and executed
 * with lb_cudnn_execute().  The handle attributes of the operation graph
 * and plan are marked deprecated in cuDNN 9.19's headers (device-property
 * descriptors replace them for ahead-of-time builds); they remain the way
 * to bind a graph to a handle at run time, as the frontend still does. */

cudnnBackendDescriptor_t
lb_cudnn_new (cudnnBackendDescriptorType_t type, const char *what,
    GError ** error)
{
  cudnnBackendDescriptor_t d = NULL;
  if (!lb_cudnn_load (error) ||
      !lb_cuda_cudnn_check (cudnnBackendCreateDescriptor (type, &d), what,
          error))
    return NULL;
  return d;
}

gboolean
lb_cudnn_set (cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
    cudnnBackendAttributeType_t type, int64_t count, const void *values,
    const char *what, GError ** error)
{
  cudnnStatus_t st = cudnnBackendSetAttribute (d, name, type, count, values);
  if (st == CUDNN_STATUS_SUCCESS)
    return TRUE;
  g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
      "%s: setting attribute %d: %s", what, (int) name,
      cudnnGetErrorString (st));
  return FALSE;
}

gboolean
lb_cudnn_finalize (cudnnBackendDescriptor_t d, const char *what,
    GError ** error)
{
  return lb_cuda_cudnn_check (cudnnBackendFinalize (d), what, error);
}

cudnnBackendDescriptor_t
lb_cudnn_build (cudnnBackendDescriptorType_t type, const LbCudnnAttr * attrs,
    int n, const char *what, GError ** error)
{
  cudnnBackendDescriptor_t d = lb_cudnn_new (type, what, error);
  if (d == NULL)
    return NULL;
  for (int i = 0; i < n; i++)
    if (attrs[i].values && !lb_cudnn_set (d, attrs[i].name, attrs[i].type,
            attrs[i].count, attrs[i].values, what, error))
      goto fail;
  if (lb_cudnn_finalize (d, what, error))
    return d;
fail:
  cudnnBackendDestroyDescriptor (d);
  return NULL;
}

cudnnBackendDescriptor_t
lb_cudnn_build_op (cudnnBackendDescriptorType_t desc_type,
    const LbCudnnAttr * desc_attrs, int n_desc,
    cudnnBackendDescriptorType_t op_type, cudnnBackendAttributeName_t desc_name,
    const LbCudnnAttr * op_attrs, int n_op, const char *what, GError ** error)
{
  LbCudnnAttr all[LB_CUDNN_MAX_OP_ATTRS + 1];
  g_return_val_if_fail (n_op <= LB_CUDNN_MAX_OP_ATTRS, NULL);
  cudnnBackendDescriptor_t desc = lb_cudnn_build (desc_type, desc_attrs,
      n_desc, what, error);
  if (desc == NULL)
    return NULL;
  memcpy (all, op_attrs, sizeof (LbCudnnAttr) * n_op);
  all[n_op] =
      (LbCudnnAttr) { desc_name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc };
  cudnnBackendDescriptor_t op = lb_cudnn_build (op_type, all, n_op + 1, what,
      error);
  cudnnBackendDestroyDescriptor (desc);
  return op;
}

cudnnBackendDescriptor_t
lb_cudnn_op_pointwise (cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
    cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t y, const char *what,
    GError ** error)
{
  const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  const float one = 1.0f;
  const LbCudnnAttr da[] = {
    {CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode},
    {CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec},
  };
  const LbCudnnAttr oa[] = {
    {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &x},
    {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        b ? &b : NULL},
    {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &y},
    {CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one},
    {CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one},
  };
  return lb_cudnn_build_op (CUDNN_BACKEND_POINTWISE_DESCRIPTOR, da,
      G_N_ELEMENTS (da), CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
      CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, oa, G_N_ELEMENTS (oa),
      what, error);
}

void
lb_cudnn_destroy_all (cudnnBackendDescriptor_t * d, int n)
{
  for (int i = 0; i < n; i++)
    if (d[i])
      cudnnBackendDestroyDescriptor (d[i]);
}

cudnnBackendDescriptor_t
lb_cudnn_tensor (int64_t uid, cudnnDataType_t dtype, int nd,
    const int64_t * dims, const int64_t * strides, gboolean is_virtual,
    gboolean by_value, const char *what, GError ** error)
{
  const int64_t align = 16;
  const bool virt = is_virtual != FALSE, value = by_value != FALSE;
  const LbCudnnAttr attrs[] = {
    {CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype},
    {CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, nd, dims},
    {CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, nd, strides},
    {CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid},
    {CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align},
    {CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt},
    {CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1,
        value ? &value : NULL},
  };
  return lb_cudnn_build (CUDNN_BACKEND_TENSOR_DESCRIPTOR, attrs,
      G_N_ELEMENTS (attrs), what, error);
}

void
lb_cudnn_plan_clear (LbCudnnPlan * plan)
{
  if (plan->plan)
    cudnnBackendDestroyDescriptor (plan->plan);
  plan->plan = NULL;
  plan->workspace = 0;
}

/* Whether the engine of configuration @cfg computes f32 data in f32 to
 * the op's f32 tolerance: no input down-conversion, no tensor cores (TF32
 * on f32 data), no reduced precision reduction, and no FFT or Winograd
 * transform (their rounding error exceeds direct summation's).  An engine
 * whose notes cannot be read is refused. */
/* The numerical notes (*@n of them) and global index of the engine of
 * configuration @cfg; %FALSE when they cannot be read. */
static gboolean
engine_info (cudnnBackendDescriptor_t cfg,
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT],
    int64_t * n, int64_t * index)
{
  cudnnBackendDescriptor_t engine = NULL;
  int64_t got = 0;
  gboolean ok;
  if (cudnnBackendCreateDescriptor (CUDNN_BACKEND_ENGINE_DESCRIPTOR,
          &engine) != CUDNN_STATUS_SUCCESS)
    return FALSE;
  ok = cudnnBackendGetAttribute (cfg, CUDNN_ATTR_ENGINECFG_ENGINE,
      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &engine) ==
      CUDNN_STATUS_SUCCESS && got == 1 &&
      cudnnBackendGetAttribute (engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
      CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, n,
      notes) == CUDNN_STATUS_SUCCESS &&
      cudnnBackendGetAttribute (engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
      CUDNN_TYPE_INT64, 1, &got, index) == CUDNN_STATUS_SUCCESS;
  cudnnBackendDestroyDescriptor (engine);
  *n = MIN (*n, (int64_t) CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
  return ok;
}

/* Records in @plan which engine configuration @cfg runs on. */
static void
plan_engine (LbCudnnPlan * plan, cudnnBackendDescriptor_t cfg)
{
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t n = 0;
  plan->engine = -1;
  plan->tensor_core = FALSE;
  if (!engine_info (cfg, notes, &n, &plan->engine))
    return;
  for (int64_t i = 0; i < n; i++)
    if (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE)
      plan->tensor_core = TRUE;
}

static gboolean
engine_exact (cudnnBackendDescriptor_t cfg)
{
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  int64_t n = 0, index;
  gboolean exact = FALSE;
  if (engine_info (cfg, notes, &n, &index)) {
    exact = TRUE;
    for (int64_t i = 0; i < n; i++)
      if (notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE ||
          notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
          notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION ||
          notes[i] == CUDNN_NUMERICAL_NOTE_FFT ||
          notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD ||
          notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4 ||
          notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6 ||
          notes[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13)
        exact = FALSE;
  }
  return exact;
}

/* Tries the configurations the heuristics of @mode give for @graph, in
 * their order; the first that finalizes becomes @plan.  *@last keeps the
 * last failing status (left alone when none was tried). */
static gboolean
plan_from_heuristics (cudnnHandle_t h, cudnnBackendDescriptor_t dprop,
    cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
    gboolean allow_reduced, LbCudnnPlan * plan, cudnnStatus_t * last)
{
  cudnnBackendDescriptor_t heur = NULL;
  cudnnBackendDescriptor_t *cfgs = NULL;
  int64_t count = 0, got = 0;
  gboolean found = FALSE;
  cudnnStatus_t st;

  if ((st = cudnnBackendCreateDescriptor (CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
              &heur)) != CUDNN_STATUS_SUCCESS ||
      (st = cudnnBackendSetAttribute (heur,
              CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph)) !=
      CUDNN_STATUS_SUCCESS ||
      (st = cudnnBackendSetAttribute (heur, CUDNN_ATTR_ENGINEHEUR_MODE,
              CUDNN_TYPE_HEUR_MODE, 1, &mode)) != CUDNN_STATUS_SUCCESS ||
      (dprop != NULL &&
          (st = cudnnBackendSetAttribute (heur,
                  CUDNN_ATTR_ENGINEHEUR_DEVICEPROP,
                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dprop)) !=
          CUDNN_STATUS_SUCCESS) ||
      (st = cudnnBackendFinalize (heur)) != CUDNN_STATUS_SUCCESS ||
      (st = cudnnBackendGetAttribute (heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL)) !=
      CUDNN_STATUS_SUCCESS) {
    *last = st;
    goto out;
  }
  if (count <= 0)
    goto out;
  cfgs = g_new0 (cudnnBackendDescriptor_t, count);
  for (int64_t i = 0; i < count; i++)
    if ((st = cudnnBackendCreateDescriptor (CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                &cfgs[i])) != CUDNN_STATUS_SUCCESS) {
      *last = st;
      goto out;
    }
  if ((st = cudnnBackendGetAttribute (heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs)) !=
      CUDNN_STATUS_SUCCESS) {
    *last = st;
    goto out;
  }
  for (int64_t i = 0; i < got && i < count && !found; i++) {
    cudnnBackendDescriptor_t p = NULL;
    if (!allow_reduced && !engine_exact (cfgs[i]))
      continue;
    if ((st = cudnnBackendCreateDescriptor
            (CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p)) ==
        CUDNN_STATUS_SUCCESS &&
        (st = (dprop != NULL ? cudnnBackendSetAttribute (p,
                    CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP,
                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &dprop) :
                cudnnBackendSetAttribute (p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                    CUDNN_TYPE_HANDLE, 1, &h))) == CUDNN_STATUS_SUCCESS &&
        (st = cudnnBackendSetAttribute (p,
                CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i])) ==
        CUDNN_STATUS_SUCCESS &&
        (st = cudnnBackendFinalize (p)) == CUDNN_STATUS_SUCCESS) {
      int64_t ws = 0, n = 0;
      if ((st = cudnnBackendGetAttribute (p,
                  CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                  1, &n, &ws)) == CUDNN_STATUS_SUCCESS) {
        plan->plan = p;
        plan->workspace = ws;
        plan_engine (plan, cfgs[i]);
        found = TRUE;
        continue;
      }
    }
    *last = st;
    if (p)
      cudnnBackendDestroyDescriptor (p);
    if (dprop != NULL && st == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER) {
      /* deviceless check: the engine took the graph and got as far as
       * loading its kernels, which needs a driver */
      plan->plan = NULL;
      plan->workspace = -1;
      plan_engine (plan, cfgs[i]);
      found = TRUE;
    }
  }
out:
  if (cfgs)
    for (int64_t i = 0; i < count; i++)
      if (cfgs[i])
        cudnnBackendDestroyDescriptor (cfgs[i]);
  g_free (cfgs);
  if (heur)
    cudnnBackendDestroyDescriptor (heur);
  return found;
}

/* the deviceless check's target (lingbot_backend_cuda_cudnn_set_target) */
static GMutex target_lock;
static cudnnBackendDescriptor_t target_dprop;

/**
 * lingbot_backend_cuda_cudnn_set_target:
 * @json: (nullable): a cuDNN device-properties description
 *   (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION) of the GPU to check
 *   against; %NULL clears it
 * @error: %LB_ERROR_DEVICE when cuDNN rejects the description
 *
 * Sets the GPU that lb_cudnn_plan_build() plans for when it is called
 * without a stream: the deviceless check of the module's cuDNN graphs
 * (lingbot_backend_cuda_sdpa_check(), lingbot_backend_cuda_conv_check()),
 * which asks cuDNN's heuristics and engines whether they take a graph on
 * that GPU, on a machine without one.  Needs only libcudnn (and a
 * libcuda.so.1, e.g. the toolkit's stub, for the engines that compile
 * kernels).  Not for use while the module runs ops.
 *
 * Returns: %TRUE on success.
 */
G_MODULE_EXPORT gboolean lingbot_backend_cuda_cudnn_set_target (const char
    *json, GError ** error);
gboolean
lingbot_backend_cuda_cudnn_set_target (const char *json, GError ** error)
{
  cudnnBackendDescriptor_t d = NULL;
  if (json != NULL &&
      (!(d = lb_cudnn_new (CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR,
                  "cuDNN target device", error)) ||
          !lb_cudnn_set (d, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
              CUDNN_TYPE_CHAR, (int64_t) strlen (json), json,
              "cuDNN target device", error) ||
          !lb_cudnn_finalize (d, "cuDNN target device", error))) {
    if (d)
      cudnnBackendDestroyDescriptor (d);
    return FALSE;
  }
  g_mutex_lock (&target_lock);
  if (target_dprop)
    cudnnBackendDestroyDescriptor (target_dprop);
  target_dprop = d;
  g_mutex_unlock (&target_lock);
  return TRUE;
}

gboolean
lb_cudnn_plan_build (LbStream * s, cudnnBackendDescriptor_t * ops, int n_ops,
    gboolean allow_reduced, LbCudnnPlan * plan, const char *what,
    GError ** error)
{
  cudnnHandle_t h = NULL;
  cudnnBackendDescriptor_t dprop = NULL;
  cudnnBackendDescriptor_t graph;
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  static const cudnnBackendHeurMode_t modes[] = {
    CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK,
  };
  gboolean found = FALSE;

  plan->plan = NULL;
  plan->workspace = 0;
  if (s != NULL) {
    if (!(h = lb_cuda_cudnn_handle (s, error)))
      return FALSE;
  } else {
    g_mutex_lock (&target_lock);
    dprop = target_dprop;
    g_mutex_unlock (&target_lock);
    if (dprop == NULL) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "%s: no stream and no target device to plan for", what);
      return FALSE;
    }
  }
  if (!(graph = lb_cudnn_new (CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what,
              error)))
    return FALSE;
  if ((h != NULL && !lb_cudnn_set (graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
              CUDNN_TYPE_HANDLE, 1, &h, what, error)) ||
      !lb_cudnn_set (graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, n_ops, ops, what, error)) {
    cudnnBackendDestroyDescriptor (graph);
    return FALSE;
  }
  last = cudnnBackendFinalize (graph);
  if (last == CUDNN_STATUS_SUCCESS) {
    last = CUDNN_STATUS_NOT_SUPPORTED;  /* when no configuration comes */
    for (guint i = 0; i < G_N_ELEMENTS (modes) && !found; i++)
      found = plan_from_heuristics (h, dprop, graph, modes[i], allow_reduced,
          plan, &last);
  }
  cudnnBackendDestroyDescriptor (graph);
  if (!found) {
    g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
        "%s: no cuDNN engine runs this graph%s (last status: %s)", what,
        allow_reduced ? "" : " in f32", cudnnGetErrorString (last));
    return FALSE;
  }
  return TRUE;
}

/* A variant pack's identity: the tensors' uids and pointers (the
 * workspace is the stream's, the same for every pack of the table). */
typedef struct
{
  int64_t n;
  int64_t uids[LB_CUDNN_MAX_TENSORS];
  void *ptrs[LB_CUDNN_MAX_TENSORS];
} PackKey;

LB_CUDA_KEY_FUNCS (pack, PackKey);

static void
pack_free (gpointer p)
{
  cudnnBackendDestroyDescriptor (p);
}

#define MAX_PACKS 4096

gboolean
lb_cudnn_reserve (LbStream * s, const LbCudnnPlan * plan, GError ** error)
{
  return plan->workspace <= 0 ||
      lb_cudnn_reserve_bytes (s, (gsize) plan->workspace, error);
}

gboolean
lb_cudnn_reserve_bytes (LbStream * s, gsize bytes, GError ** error)
{
  LbCudaStream *cs = s->priv;
  if (bytes == 0 || bytes <= cs->dnn_ws_size)
    return TRUE;
  if (cs->capturing || !s->backend->stream_synchronize (s, error))
    return FALSE;
  gsize size = MAX ((gsize) bytes, cs->dnn_ws_size * 2);
  void *ws = lb_cuda_pool_alloc (cs->device, size, error);
  if (ws == NULL)
    return FALSE;
  if (cs->dnn_ws) {
    if (cs->dnn_ws_old == NULL)
      cs->dnn_ws_old = g_ptr_array_new ();
    g_ptr_array_add (cs->dnn_ws_old, cs->dnn_ws);
  }
  cs->dnn_ws = ws;
  cs->dnn_ws_size = size;
  if (cs->dnn_packs)            /* they name the old workspace */
    g_hash_table_remove_all (cs->dnn_packs);
  return TRUE;
}

gboolean
lb_cudnn_execute (LbStream * s, const LbCudnnPlan * plan, int n,
    const int64_t * uids, void *const *ptrs, const char *what, GError ** error)
{
  LbCudaStream *cs = s->priv;
  cudnnHandle_t h = lb_cuda_cudnn_handle (s, error);
  if (h == NULL)
    return FALSE;
  if (n < 1 || n > LB_CUDNN_MAX_TENSORS ||
      (gsize) MAX (plan->workspace, 0) > cs->dnn_ws_size) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "%s: %d tensors or a %" G_GINT64_FORMAT "-byte workspace, more than "
        "the stream's", what, n, plan->workspace);
    return FALSE;
  }
  PackKey key;
  memset (&key, 0, sizeof key);
  key.n = n;
  memcpy (key.uids, uids, (gsize) n * sizeof *uids);
  memcpy (key.ptrs, ptrs, (gsize) n * sizeof *ptrs);
  if (cs->dnn_packs == NULL)
    cs->dnn_packs = g_hash_table_new_full (pack_hash, pack_equal, g_free,
        pack_free);
  cudnnBackendDescriptor_t pack = g_hash_table_lookup (cs->dnn_packs, &key);
  if (pack == NULL) {
    if (!(pack = lb_cudnn_new (CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, what,
                error)))
      return FALSE;
    if (!lb_cudnn_set (pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
            CUDNN_TYPE_INT64, n, uids, what, error) ||
        !lb_cudnn_set (pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
            CUDNN_TYPE_VOID_PTR, n, ptrs, what, error) ||
        !lb_cudnn_set (pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
            CUDNN_TYPE_VOID_PTR, 1, &cs->dnn_ws, what, error) ||
        !lb_cudnn_finalize (pack, what, error)) {
      cudnnBackendDestroyDescriptor (pack);
      return FALSE;
    }
    if (g_hash_table_size (cs->dnn_packs) >= MAX_PACKS)
      g_hash_table_remove_all (cs->dnn_packs);
    g_hash_table_insert (cs->dnn_packs, g_memdup2 (&key, sizeof key), pack);
  }
  return lb_cuda_cudnn_check (cudnnBackendExecute (h, plan->plan, pack),
      what, error);
}

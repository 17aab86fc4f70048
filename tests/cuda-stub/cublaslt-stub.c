/* lingbot-gst: a host stub of cuBLASLt, for CPU tests of the CUDA module
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The cuBLASLt entry points kernels/cuda/cuda-gemm.c and cuda-backend.c
 * call, linked in place of libcublasLt (the module links it; only cuDNN
 * and NCCL are loaded by name).  Handles, matmul descriptors, layouts and
 * preferences are tracked objects: a call naming one that is not live
 * (never made, or destroyed: a plan used after its cache dropped it)
 * answers CUBLAS_STATUS_INVALID_VALUE.  The heuristic finds one algorithm
 * unless told otherwise (cuda_stub_lt_refuse()); cublasLtMatmul enqueues a
 * named launch ("cublasLtMatmul", cuda_stub_launch()) and computes
 * nothing.
 */
#include "cudart-stub.h"

#include <cublasLt.h>
#include <string.h>

struct cublasLtContext
{
  int unused;
};

enum
{
  OBJ_HANDLE = 1,
  OBJ_DESC,
  OBJ_LAYOUT,
  OBJ_PREF,
};

static GMutex lock;
static GHashTable *objects;     /* pointer -> OBJ_* */
static GHashTable *epilogues;   /* matmul desc -> cublasLtEpilogue_t */
static CudaStubLtStats stats;
static cublasStatus_t create_status;
static gboolean refuse_all, refuse_epilogue;

static void
init_locked (void)
{
  if (objects == NULL) {
    objects = g_hash_table_new (g_direct_hash, g_direct_equal);
    epilogues = g_hash_table_new (g_direct_hash, g_direct_equal);
  }
}

static gpointer
obj_new (int kind, gsize size)
{
  gpointer p = g_malloc0 (size);
  g_mutex_lock (&lock);
  init_locked ();
  g_hash_table_insert (objects, p, GINT_TO_POINTER (kind));
  if (kind == OBJ_DESC)
    stats.n_plans_made++;
  g_mutex_unlock (&lock);
  return p;
}

static gboolean
obj_live_locked (gconstpointer p, int kind)
{
  init_locked ();
  return GPOINTER_TO_INT (g_hash_table_lookup (objects, p)) == kind;
}

static cublasStatus_t
obj_destroy (gpointer p, int kind)
{
  g_mutex_lock (&lock);
  gboolean live = obj_live_locked (p, kind);
  if (live) {
    g_hash_table_remove (objects, p);
    g_hash_table_remove (epilogues, p);
  }
  g_mutex_unlock (&lock);
  if (!live)
    return CUBLAS_STATUS_INVALID_VALUE;
  g_free (p);
  return CUBLAS_STATUS_SUCCESS;
}

/**
 * cuda_stub_lt_reset:
 *
 * Counters to 0, every call succeeds again.  Live objects stay.
 */
void
cuda_stub_lt_reset (void)
{
  g_mutex_lock (&lock);
  memset (&stats, 0, sizeof stats);
  create_status = CUBLAS_STATUS_SUCCESS;
  refuse_all = refuse_epilogue = FALSE;
  g_mutex_unlock (&lock);
}

/**
 * cuda_stub_lt_stats:
 *
 * Returns: the counters so far, and the objects live now
 *   (#CudaStubLtStats).
 */
CudaStubLtStats
cuda_stub_lt_stats (void)
{
  g_mutex_lock (&lock);
  init_locked ();
  CudaStubLtStats st = stats;
  GHashTableIter it;
  gpointer kind;
  g_hash_table_iter_init (&it, objects);
  while (g_hash_table_iter_next (&it, NULL, &kind))
    if (GPOINTER_TO_INT (kind) == OBJ_HANDLE)
      st.handles_live++;
    else
      st.objects_live++;
  g_mutex_unlock (&lock);
  return st;
}

/**
 * cuda_stub_lt_set_create_status:
 * @st: what cublasLtCreate answers from now on
 */
void
cuda_stub_lt_set_create_status (int st)
{
  g_mutex_lock (&lock);
  create_status = (cublasStatus_t) st;
  g_mutex_unlock (&lock);
}

/**
 * cuda_stub_lt_refuse:
 * @all: the heuristic finds no algorithm for any matmul
 * @gelu_epilogue: none for a matmul with a GELU epilogue
 */
void
cuda_stub_lt_refuse (gboolean all, gboolean gelu_epilogue)
{
  g_mutex_lock (&lock);
  refuse_all = all;
  refuse_epilogue = gelu_epilogue;
  g_mutex_unlock (&lock);
}

/* ---- the cuBLASLt API ---- */

cublasStatus_t
cublasLtCreate (cublasLtHandle_t * handle)
{
  g_mutex_lock (&lock);
  cublasStatus_t st = create_status;
  g_mutex_unlock (&lock);
  *handle = NULL;
  if (st != CUBLAS_STATUS_SUCCESS)
    return st;
  *handle = obj_new (OBJ_HANDLE, sizeof (struct cublasLtContext));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtDestroy (cublasLtHandle_t handle)
{
  return obj_destroy (handle, OBJ_HANDLE);
}

const char *
cublasGetStatusString (cublasStatus_t st)
{
  switch (st) {
    case CUBLAS_STATUS_SUCCESS:
      return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the functionality requested is not supported";
    default:
      return "unknown error";
  }
}

cublasStatus_t
cublasLtMatmulDescCreate (cublasLtMatmulDesc_t * desc,
    cublasComputeType_t compute, cudaDataType_t scale)
{
  (void) compute;
  (void) scale;
  *desc = obj_new (OBJ_DESC, sizeof (cublasLtMatmulDescOpaque_t));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulDescDestroy (cublasLtMatmulDesc_t desc)
{
  return obj_destroy (desc, OBJ_DESC);
}

cublasStatus_t
cublasLtMatmulDescSetAttribute (cublasLtMatmulDesc_t desc,
    cublasLtMatmulDescAttributes_t attr, const void *buf, size_t size)
{
  g_mutex_lock (&lock);
  gboolean live = obj_live_locked (desc, OBJ_DESC);
  if (live && attr == CUBLASLT_MATMUL_DESC_EPILOGUE &&
      size == sizeof (cublasLtEpilogue_t))
    g_hash_table_insert (epilogues, desc,
        GINT_TO_POINTER (*(const cublasLtEpilogue_t *) buf));
  g_mutex_unlock (&lock);
  return live && buf ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t
cublasLtMatrixLayoutCreate (cublasLtMatrixLayout_t * layout,
    cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld)
{
  (void) type;
  if (ld < (int64_t) rows) {
    *layout = NULL;
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  (void) cols;
  *layout = obj_new (OBJ_LAYOUT, sizeof (cublasLtMatrixLayoutOpaque_t));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatrixLayoutDestroy (cublasLtMatrixLayout_t layout)
{
  return obj_destroy (layout, OBJ_LAYOUT);
}

cublasStatus_t
cublasLtMatmulPreferenceCreate (cublasLtMatmulPreference_t * pref)
{
  *pref = obj_new (OBJ_PREF, sizeof (cublasLtMatmulPreferenceOpaque_t));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulPreferenceDestroy (cublasLtMatmulPreference_t pref)
{
  return obj_destroy (pref, OBJ_PREF);
}

cublasStatus_t
cublasLtMatmulPreferenceSetAttribute (cublasLtMatmulPreference_t pref,
    cublasLtMatmulPreferenceAttributes_t attr, const void *buf, size_t size)
{
  (void) attr;
  (void) size;
  g_mutex_lock (&lock);
  gboolean live = obj_live_locked (pref, OBJ_PREF);
  g_mutex_unlock (&lock);
  return live && buf ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t
cublasLtMatmulAlgoGetHeuristic (cublasLtHandle_t handle,
    cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
    cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
    cublasLtMatmulHeuristicResult_t results[], int *found)
{
  g_mutex_lock (&lock);
  gboolean live = obj_live_locked (handle, OBJ_HANDLE) &&
      obj_live_locked (desc, OBJ_DESC) && obj_live_locked (a, OBJ_LAYOUT) &&
      obj_live_locked (b, OBJ_LAYOUT) && obj_live_locked (c, OBJ_LAYOUT) &&
      obj_live_locked (d, OBJ_LAYOUT) && obj_live_locked (pref, OBJ_PREF);
  const int epi = GPOINTER_TO_INT (g_hash_table_lookup (epilogues, desc));
  const gboolean gelu = epi == CUBLASLT_EPILOGUE_GELU ||
      epi == CUBLASLT_EPILOGUE_GELU_BIAS;
  const gboolean none = refuse_all || (refuse_epilogue && gelu);
  stats.n_heuristics++;
  g_mutex_unlock (&lock);
  if (!live || requested < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  *found = none ? 0 : 1;
  if (!none) {
    memset (&results[0], 0, sizeof results[0]);
    results[0].workspaceSize = 1 << 20;
    results[0].state = CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmul (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
    const void *alpha, const void *a, cublasLtMatrixLayout_t la,
    const void *b, cublasLtMatrixLayout_t lb, const void *beta,
    const void *c, cublasLtMatrixLayout_t lc, void *d,
    cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t * algo,
    void *workspace, size_t workspace_size, cudaStream_t stream)
{
  (void) alpha, (void) a, (void) b, (void) beta, (void) c, (void) d;
  (void) algo, (void) workspace, (void) workspace_size;
  g_mutex_lock (&lock);
  gboolean live = obj_live_locked (handle, OBJ_HANDLE) &&
      obj_live_locked (desc, OBJ_DESC) && obj_live_locked (la, OBJ_LAYOUT) &&
      obj_live_locked (lb, OBJ_LAYOUT) && obj_live_locked (lc, OBJ_LAYOUT) &&
      obj_live_locked (ld, OBJ_LAYOUT);
  if (live)
    stats.n_matmuls++;
  g_mutex_unlock (&lock);
  if (!live)
    return CUBLAS_STATUS_INVALID_VALUE;
  return cuda_stub_launch ("cublasLtMatmul", stream) == cudaSuccess ?
      CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

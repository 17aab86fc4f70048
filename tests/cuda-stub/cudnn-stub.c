/* lingbot-gst: a host stub of cuDNN's graph (backend) API
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A shared module with the eleven functions kernels/cuda/cuda-cudnn.c
 * loads by name (lb_cudnn_load(): LINGBOT_CUDNN_LIBRARY names this file in
 * the tests), so the module's cuDNN paths (plan building, the per-stream
 * plan tables, workspaces and variant packs, execution under capture) run
 * on the CPU.  Descriptors are tracked objects that keep the attributes
 * set on them; using one that is not live (destroyed: a plan freed while
 * still cached) answers CUDNN_STATUS_BAD_PARAM.  The heuristics offer one
 * engine configuration (none with CudnnStubControl.refuse), every plan
 * finalizes with CudnnStubControl.workspace bytes of workspace, and an
 * execution calls CudnnStubControl.launch with the handle's stream:
 * nothing is computed.  Not linked to the runtime stub: the test passes
 * its launch function in.
 */
#include "cudnn-stub.h"

#include <cudnn.h>
#include <gmodule.h>
#include <string.h>

struct cudnnContext
{
  cudaStream_t stream;
};

typedef struct
{
  cudnnBackendDescriptorType_t type;
  gboolean finalized;
  GHashTable *attrs;            /* attribute name -> GBytes */
} Desc;

static GMutex lock;
static GHashTable *handles, *descs;     /* live objects */
static CudnnStubControl control = {.workspace = 1 << 20 };

G_MODULE_EXPORT CudnnStubControl *cudnn_stub_control (void);

/**
 * cudnn_stub_control:
 *
 * Returns: (transfer none): the stub's knobs and counters, live
 *   (#CudnnStubControl).
 */
CudnnStubControl *
cudnn_stub_control (void)
{
  g_mutex_lock (&lock);
  control.handles_live = handles ? (int) g_hash_table_size (handles) : 0;
  control.descriptors_live = descs ? (int) g_hash_table_size (descs) : 0;
  g_mutex_unlock (&lock);
  return &control;
}

static void
init_locked (void)
{
  if (handles == NULL) {
    handles = g_hash_table_new (g_direct_hash, g_direct_equal);
    descs = g_hash_table_new (g_direct_hash, g_direct_equal);
  }
}

static Desc *
desc_live_locked (cudnnBackendDescriptor_t d)
{
  init_locked ();
  return g_hash_table_contains (descs, d) ? d : NULL;
}

size_t
cudnnGetVersion (void)
{
  return 91900;
}

const char *
cudnnGetErrorString (cudnnStatus_t st)
{
  switch (st) {
    case CUDNN_STATUS_SUCCESS:
      return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM:
      return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED:
      return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_EXECUTION_FAILED:
      return "CUDNN_STATUS_EXECUTION_FAILED";
    default:
      return "CUDNN_STATUS_INTERNAL_ERROR";
  }
}

cudnnStatus_t
cudnnCreate (cudnnHandle_t * handle)
{
  *handle = g_new0 (struct cudnnContext, 1);
  g_mutex_lock (&lock);
  init_locked ();
  g_hash_table_add (handles, *handle);
  g_mutex_unlock (&lock);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnDestroy (cudnnHandle_t handle)
{
  g_mutex_lock (&lock);
  init_locked ();
  gboolean live = g_hash_table_remove (handles, handle);
  g_mutex_unlock (&lock);
  if (!live)
    return CUDNN_STATUS_BAD_PARAM;
  g_free (handle);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnSetStream (cudnnHandle_t handle, cudaStream_t stream)
{
  g_mutex_lock (&lock);
  init_locked ();
  gboolean live = g_hash_table_contains (handles, handle);
  if (live)
    handle->stream = stream;
  g_mutex_unlock (&lock);
  return live ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t
cudnnBackendCreateDescriptor (cudnnBackendDescriptorType_t type,
    cudnnBackendDescriptor_t * out)
{
  Desc *d = g_new0 (Desc, 1);
  d->type = type;
  d->attrs = g_hash_table_new_full (g_direct_hash, g_direct_equal, NULL,
      (GDestroyNotify) g_bytes_unref);
  g_mutex_lock (&lock);
  init_locked ();
  g_hash_table_add (descs, d);
  control.n_created++;
  g_mutex_unlock (&lock);
  *out = d;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnBackendDestroyDescriptor (cudnnBackendDescriptor_t p)
{
  g_mutex_lock (&lock);
  Desc *d = desc_live_locked (p);
  if (d)
    g_hash_table_remove (descs, d);
  g_mutex_unlock (&lock);
  if (d == NULL)
    return CUDNN_STATUS_BAD_PARAM;
  g_hash_table_unref (d->attrs);
  g_free (d);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t
cudnnBackendFinalize (cudnnBackendDescriptor_t p)
{
  g_mutex_lock (&lock);
  Desc *d = desc_live_locked (p);
  cudnnStatus_t st = d == NULL || d->finalized ? CUDNN_STATUS_BAD_PARAM :
      CUDNN_STATUS_SUCCESS;
  if (st == CUDNN_STATUS_SUCCESS) {
    d->finalized = TRUE;
    if (d->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)
      control.n_plans++;
  }
  g_mutex_unlock (&lock);
  return st;
}

static gsize
type_size (cudnnBackendAttributeType_t type)
{
  switch (type) {
    case CUDNN_TYPE_HANDLE:
    case CUDNN_TYPE_BACKEND_DESCRIPTOR:
    case CUDNN_TYPE_VOID_PTR:
      return sizeof (void *);
    case CUDNN_TYPE_INT64:
    case CUDNN_TYPE_DOUBLE:
      return 8;
    case CUDNN_TYPE_CHAR:
    case CUDNN_TYPE_BOOLEAN:
      return 1;
    default:
      return 4;                 /* enums, float, int32 */
  }
}

cudnnStatus_t
cudnnBackendSetAttribute (cudnnBackendDescriptor_t p,
    cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
    int64_t count, const void *values)
{
  if (count < 0 || (count > 0 && values == NULL))
    return CUDNN_STATUS_BAD_PARAM;
  g_mutex_lock (&lock);
  Desc *d = desc_live_locked (p);
  cudnnStatus_t st = d == NULL || d->finalized ? CUDNN_STATUS_BAD_PARAM :
      CUDNN_STATUS_SUCCESS;
  if (st == CUDNN_STATUS_SUCCESS)
    g_hash_table_insert (d->attrs, GINT_TO_POINTER (name),
        g_bytes_new (values, (gsize) count * type_size (type)));
  g_mutex_unlock (&lock);
  return st;
}

/* What the module reads back: the heuristics' configurations, a
 * configuration's engine and that engine's notes and index, a plan's
 * workspace. */
cudnnStatus_t
cudnnBackendGetAttribute (cudnnBackendDescriptor_t const p,
    cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
    int64_t requested, int64_t * count, void *values)
{
  (void) type;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  g_mutex_lock (&lock);
  Desc *d = desc_live_locked (p);
  if (d == NULL || !d->finalized) {
    st = CUDNN_STATUS_BAD_PARAM;
  } else if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
    const int64_t n = control.refuse ? 0 : 1;
    *count = requested == 0 ? n : MIN (n, requested);
    for (int64_t i = 0; requested > 0 && i < *count; i++) {
      Desc *cfg = desc_live_locked (((cudnnBackendDescriptor_t *) values)[i]);
      if (cfg == NULL)
        st = CUDNN_STATUS_BAD_PARAM;
      else
        cfg->finalized = TRUE;
    }
  } else if (name == CUDNN_ATTR_ENGINECFG_ENGINE && requested >= 1) {
    Desc *engine = desc_live_locked (*(cudnnBackendDescriptor_t *) values);
    if (engine == NULL)
      st = CUDNN_STATUS_BAD_PARAM;
    else
      engine->finalized = TRUE;
    *count = 1;
  } else if (name == CUDNN_ATTR_ENGINE_NUMERICAL_NOTE) {
    *count = 0;
  } else if (name == CUDNN_ATTR_ENGINE_GLOBAL_INDEX && requested >= 1) {
    *(int64_t *) values = 7;
    *count = 1;
  } else if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE && requested >= 1) {
    *(int64_t *) values = control.workspace;
    *count = 1;
  } else {
    st = CUDNN_STATUS_NOT_SUPPORTED;
  }
  g_mutex_unlock (&lock);
  return st;
}

cudnnStatus_t
cudnnBackendExecute (cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
    cudnnBackendDescriptor_t pack)
{
  g_mutex_lock (&lock);
  init_locked ();
  Desc *pl = desc_live_locked (plan), *pk = desc_live_locked (pack);
  const gboolean live = g_hash_table_contains (handles, handle);
  cudnnStatus_t st = !live || pl == NULL
      || pl->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || !pl->finalized
      || pk == NULL
      || !pk->finalized ? CUDNN_STATUS_BAD_PARAM : control.fail_execute ?
      CUDNN_STATUS_EXECUTION_FAILED : CUDNN_STATUS_SUCCESS;
  cudaStream_t stream = live ? handle->stream : NULL;
  if (st == CUDNN_STATUS_SUCCESS)
    control.n_executes++;
  g_mutex_unlock (&lock);
  if (st == CUDNN_STATUS_SUCCESS && control.launch &&
      control.launch ("cudnnBackendExecute", stream) != cudaSuccess)
    st = CUDNN_STATUS_EXECUTION_FAILED;
  return st;
}

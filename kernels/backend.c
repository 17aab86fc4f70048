/* lingbot-gst: backend-independent tensor helpers
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/backend.h"
#include "kernels/error.h"

#include <string.h>

typedef struct
{
  LbBackend *backend;
  int device;
  void *ptr;
} DeviceBlock;

static void
device_block_free (gpointer data)
{
  DeviceBlock *b = data;
  b->backend->free (b->backend, b->device, b->ptr);
  g_free (b);
}

/**
 * lb_tensor_new_on:
 * @s: the stream whose device receives the tensor
 * @dtype: element type
 * @ndim: number of dimensions
 * @shape: (array length=ndim): extents
 * @error: %LB_ERROR_DEVICE when the device (or host) allocation fails
 *
 * Allocates a contiguous, uninitialised tensor on @s's device; on the
 * CPU backend through lb_tensor_try_new(), so a size the machine cannot
 * hold is an error, not an abort.  Not for
 * per-chunk loops: allocate session buffers once and reuse them.
 *
 * Returns: (transfer full) (nullable): the tensor.
 */
LbTensor *
lb_tensor_new_on (LbStream * s, LbDType dtype, int ndim,
    const int64_t * shape, GError ** error)
{
  LbBackend *be = s->backend;
  if (be->device_type == LB_DEVICE_CPU)
    return lb_tensor_try_new (dtype, ndim, shape, error);

  int64_t n = 1;
  for (int i = 0; i < ndim; i++)
    n *= shape[i];
  gsize bytes = (gsize) n * lb_dtype_size (dtype);
  void *ptr = be->alloc (be, s->device, MAX (bytes, 1), error);
  if (ptr == NULL)
    return NULL;
  DeviceBlock *b = g_new0 (DeviceBlock, 1);
  b->backend = be;
  b->device = s->device;
  b->ptr = ptr;
  LbDevice dev = { be->device_type, s->device };
  LbStorage *st = lb_storage_new (ptr, bytes, dev, device_block_free, b);
  LbTensor *t = lb_tensor_new_from_storage (st, 0, dtype, ndim, shape, NULL);
  lb_storage_unref (st);
  return t;
}

static gboolean
check_transfer (const LbTensor * dst, const LbTensor * src, GError ** error)
{
  if (dst->dtype != src->dtype || !lb_tensor_same_shape (dst, src) ||
      !lb_tensor_is_contiguous (dst) || !lb_tensor_is_contiguous (src)) {
    g_autofree char *a = lb_tensor_shape_string (dst);
    g_autofree char *b = lb_tensor_shape_string (src);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "transfer: destination %s %s and source %s %s must be contiguous "
        "with equal dtype and shape", lb_dtype_name (dst->dtype), a,
        lb_dtype_name (src->dtype), b);
    return FALSE;
  }
  return TRUE;
}

/* check_transfer(), then the copy of @src into @dst ordered on @s: @kind
 * on a device backend, host to host on the CPU one. */
static gboolean
transfer (LbStream * s, LbTensor * dst, const LbTensor * src,
    LbCopyKind kind, GError ** error)
{
  if (!check_transfer (dst, src, error))
    return FALSE;
  if (s->backend->device_type == LB_DEVICE_CPU)
    kind = LB_COPY_HOST_TO_HOST;
  return s->backend->copy (s, dst->data, src->data, lb_tensor_nbytes (src),
      kind, error);
}

/**
 * lb_tensor_upload:
 * @s: stream of the destination device
 * @dst: contiguous tensor on @s's device
 * @src: contiguous CPU tensor of equal dtype and shape
 * @error: %LB_ERROR_SHAPE or %LB_ERROR_DEVICE
 *
 * Copies host data to the device, ordered on @s (asynchronous on CUDA:
 * @src must stay valid until the stream is synchronised).
 */
gboolean
lb_tensor_upload (LbStream * s, LbTensor * dst, const LbTensor * src,
    GError ** error)
{
  return transfer (s, dst, src, LB_COPY_HOST_TO_DEVICE, error);
}

/**
 * lb_tensor_download:
 * @s: stream of the source device
 * @dst: contiguous CPU tensor
 * @src: contiguous tensor on @s's device of equal dtype and shape
 * @error: %LB_ERROR_SHAPE or %LB_ERROR_DEVICE
 *
 * Copies device data to the host and waits for it.
 */
gboolean
lb_tensor_download (LbStream * s, LbTensor * dst, const LbTensor * src,
    GError ** error)
{
  return transfer (s, dst, src, LB_COPY_DEVICE_TO_HOST, error) &&
      s->backend->stream_synchronize (s, error);
}

/* The op names and LbOps offsets, from kernels/ops-list.h. */
static const struct
{
  const char *name;
  glong offset;
} op_slots[] = {
#define LB_OP(name) { G_STRINGIFY (name), G_STRUCT_OFFSET (LbOps, name) },
#include "kernels/ops-list.h"
};

/* Every member of LbOps is a function pointer listed above. */
G_STATIC_ASSERT (sizeof (LbOps) == G_N_ELEMENTS (op_slots) * sizeof (void *));

/**
 * lb_ops_first_missing:
 * @ops: an op table
 *
 * Returns: (nullable): the name of the first op @ops leaves %NULL, or %NULL
 * when the table is complete.  The registry uses it so that a backend that
 * is still being built is never picked for model work.
 */
const char *
lb_ops_first_missing (const LbOps * ops)
{
  for (guint i = 0; i < G_N_ELEMENTS (op_slots); i++)
    if (G_STRUCT_MEMBER (gpointer, ops, op_slots[i].offset) == NULL)
      return op_slots[i].name;
  return NULL;
}

typedef struct
{
  LbBackend *backend;
  void *ptr;
} HostBlock;

static void
host_block_free (gpointer data)
{
  HostBlock *b = data;
  b->backend->host_free (b->backend, b->ptr);
  g_free (b);
}

/**
 * lb_tensor_new_host:
 * @s: a stream whose device the tensor is copied to or from
 * @dtype: element type
 * @ndim: number of dimensions
 * @shape: (array length=ndim): extents
 * @error: %LB_ERROR_DEVICE when the (page-locked or plain) host memory
 *   cannot be allocated
 *
 * Allocates a contiguous, uninitialised CPU tensor for staging: in
 * page-locked memory when @s's backend provides it (LbBackend.host_alloc),
 * so that lb_tensor_upload() and lb_tensor_download() through it run at
 * full bus speed and an upload does not block the host; plain host memory
 * otherwise.  Not for per-chunk loops: allocate once per session.
 *
 * Returns: (transfer full) (nullable): the tensor.
 */
LbTensor *
lb_tensor_new_host (LbStream * s, LbDType dtype, int ndim,
    const int64_t * shape, GError ** error)
{
  LbBackend *be = s->backend;
  if (be->host_alloc == NULL || be->host_free == NULL)
    return lb_tensor_try_new (dtype, ndim, shape, error);
  int64_t n = 1;
  for (int i = 0; i < ndim; i++)
    n *= shape[i];
  gsize bytes = (gsize) n * lb_dtype_size (dtype);
  void *ptr = be->host_alloc (be, MAX (bytes, 1), error);
  if (ptr == NULL)
    return NULL;
  HostBlock *b = g_new0 (HostBlock, 1);
  b->backend = be;
  b->ptr = ptr;
  LbStorage *st = lb_storage_new (ptr, bytes, LB_DEVICE_HOST,
      host_block_free, b);
  LbTensor *t = lb_tensor_new_from_storage (st, 0, dtype, ndim, shape, NULL);
  lb_storage_unref (st);
  return t;
}

/**
 * lb_stream_can_capture:
 * @s: a stream
 *
 * Returns: whether @s's backend can record the stream's work into a graph
 *   and replay it (LbBackend.graph_begin and the rest are set).
 */
gboolean
lb_stream_can_capture (LbStream * s)
{
  const LbBackend *be = s->backend;
  return be->graph_begin != NULL && be->graph_end != NULL &&
      be->graph_launch != NULL && be->graph_free != NULL;
}

/**
 * lb_stream_reserve:
 * @s: a stream
 * @scratch_bytes: bytes of op scratch to hold for @s's ops (0: none)
 * @workspace_bytes: bytes of library workspace (0: none)
 * @error: %LB_ERROR_DEVICE when the memory cannot be had
 *
 * LbBackend.stream_reserve where the backend has it (a no-op where not,
 * the CPU): the stream's per-call scratch and workspace allocated now, so
 * that its ops do not allocate later (between collectives).  Not while
 * the stream is being captured.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_stream_reserve (LbStream * s, gsize scratch_bytes, gsize workspace_bytes,
    GError ** error)
{
  if (s->backend->stream_reserve == NULL)
    return TRUE;
  return s->backend->stream_reserve (s, scratch_bytes, workspace_bytes, error);
}

/**
 * lb_attention_prepare:
 * @s: a stream, not being captured
 * @q: [Nq, H, hd] queries as the attention call will pass them (f32 or
 *   bf16; only the shape, dtype, strides and address are looked at)
 * @k: [Nk, H, hd] keys (f32 or bf16), likewise
 * @v: [Nk, H, hd] values, k's dtype, likewise
 * @out: [Nq, H, hd] output (f32 or bf16), likewise
 * @scratch_bytes: (out): op scratch one such call takes (0: none)
 * @workspace_bytes: (out): library workspace it needs (0: none)
 * @error: %LB_ERROR_SHAPE for operands the op would refuse,
 *   %LB_ERROR_DEVICE when the backend cannot ready the shape
 *
 * Readies the attention op (kernels/ops.h @attention, no bias, no key
 * mask) for a call with these operands before it is made: the backend
 * builds now what the first such call would build (CUDA: the cuDNN SDPA
 * plan of the shape, and with it the plan's runtime-compiled kernels) and
 * says the per-call scratch and workspace, so that the caller reserves
 * them (lb_stream_reserve()) before a multi-rank loop starts: nothing is
 * then built, allocated or synchronised between the ranks' collectives
 * (issue 3.2 item 4).  Enqueues no work.  A backend without
 * LbBackend.attention_prepare (the CPU) says 0 and 0.
 *
 * Returns: %TRUE on success.
 */
gboolean
lb_attention_prepare (LbStream * s, const LbTensor * q, const LbTensor * k,
    const LbTensor * v, const LbTensor * out, gsize * scratch_bytes,
    gsize * workspace_bytes, GError ** error)
{
  *scratch_bytes = 0;
  *workspace_bytes = 0;
  if (s->backend->attention_prepare == NULL)
    return TRUE;
  return s->backend->attention_prepare (s, q, k, v, out, scratch_bytes,
      workspace_bytes, error);
}

/**
 * lb_backend_get_proc:
 * @backend: (nullable): a backend
 * @name: the name of one of the backend's extras (the list is at
 *   #LbBackend's @get_proc_address)
 *
 * Looks up a function a backend offers beyond its table, as
 * ggml_backend_reg_get_proc_address() does; the caller casts it to the
 * type documented for @name.
 *
 * Returns: (nullable): the function, or %NULL when @backend is %NULL, has
 *   no extras (the CPU backend) or none of that name.
 */
gpointer
lb_backend_get_proc (LbBackend * backend, const char *name)
{
  if (backend == NULL || backend->get_proc_address == NULL || name == NULL)
    return NULL;
  return backend->get_proc_address (backend, name);
}

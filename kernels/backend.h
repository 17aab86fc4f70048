/* lingbot-gst: compute backends and their op tables
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A backend (CPU, always present; CUDA, a run-time module) provides device
 * memory, copies and one LbOps table.  Model code calls ops through
 * lb_ops(stream)->op(stream, ...), so the same code runs on either.
 * A stream is what one rank computes on: a device, the backend's native
 * queue on it (a cudaStream_t; nothing on the CPU) and a scratch workspace.
 */
#pragma once

#include "kernels/tensor.h"
#include "kernels/ops.h"

G_BEGIN_DECLS

typedef struct _LbBackend LbBackend;
typedef struct _LbStream LbStream;
typedef struct _LbGraph LbGraph;
typedef struct _LbEvent LbEvent;

typedef enum
{
  LB_COPY_HOST_TO_DEVICE,
  LB_COPY_DEVICE_TO_HOST,
  LB_COPY_DEVICE_TO_DEVICE,
  LB_COPY_HOST_TO_HOST,
} LbCopyKind;

/**
 * LbBackend:
 * @name: "cpu" or "cuda"
 * @device_type: the devices it drives
 * @device_count: number of usable devices (the CPU backend reports 1)
 * @ops: the op table
 * @alloc: device memory; a block freed after use on any stream of the
 *   device may be freed at once (the allocator orders its reuse)
 * @copy: enqueues a copy on @stream, after the stream's earlier work,
 *   whatever its kind: the host may read a device-to-host copy's
 *   destination, or change a host-to-device copy's source, only after
 *   @stream_synchronize (lb_tensor_download() does it)
 * @stream_synchronize: waits until every piece of work enqueued on the
 *   stream so far has run; work any stream enqueues afterwards is
 *   ordered after it.  Across streams only this, events and collectives
 *   order work (docs/design.md "The stream model")
 *
 * @host_alloc: (nullable): page-locked host memory (cudaHostAlloc), for
 *   staging buffers that are copied to or from a device every chunk; an
 *   asynchronous copy from it does not block the host
 * @host_free: frees what @host_alloc returned
 * @graph_begin: (nullable): starts recording the work enqueued on a stream
 *   (ops, device-to-device copies, collectives) into a graph instead of
 *   running it.  While recording, the caller must not allocate or free
 *   tensors, copy to or from host memory, or synchronise the stream; op
 *   scratch taken during the capture stays owned by the graph.
 * @graph_end: stops recording and returns the instantiated graph (%NULL and
 *   an error when the capture failed; the stream is usable again either
 *   way)
 * @graph_launch: enqueues one replay of a graph on the stream it was
 *   captured on: the same kernels with the same arguments and pointers
 * @graph_free: waits for the stream, then releases the graph and its
 *   scratch
 * @event_new: (nullable): an event on @device (cudaEvent, no timing)
 * @event_free: frees an event (not while a stream waits for it)
 * @event_record: marks the point reached by the work enqueued so far on a
 *   stream
 * @stream_wait_event: makes later work on a stream wait until the
 *   recorded point of the event's stream is reached (also inside a graph
 *   capture: the waiting stream joins the capture).  The event may belong
 *   to another device (a peer rank's stream; cudaStreamWaitEvent allows
 *   it); waiting for an event never recorded does not wait.
 * @stream_reserve: (nullable): sizes a stream's per-call resources ahead
 *   of its work (called by lb_stream_reserve()): @scratch_bytes of op
 *   scratch the stream's ops then take without allocating (requests that
 *   fit, outside graph captures; larger ones still go to the allocator)
 *   and @workspace_bytes of library workspace (CUDA: the cuDNN plans'
 *   shared workspace, grown now with a stream synchronisation instead of
 *   when a plan first needs it).  Never shrinks either.  A multi-rank
 *   caller reserves at start-up, before the ranks' first collective, so
 *   that no allocation or synchronisation lands between collectives
 *   (issue 3.2 item 4).  The backends without per-call device scratch
 *   (the CPU) leave it %NULL.
 * @attention_prepare: (nullable): readies the attention op (kernels/ops.h
 *   @attention, no bias or key mask) for the operands' shapes, dtypes and
 *   strides (called by lb_attention_prepare()): builds what a first call
 *   would build (CUDA: the cuDNN SDPA plan of the shape) and says the op
 *   scratch and library workspace one such call takes, in bytes.  The
 *   operands are described, not read: no work is enqueued.  Not while
 *   the stream is being captured.  %NULL where an attention call takes
 *   no per-call resources (the CPU).
 * @get_proc_address: (nullable): the backend's extras, found by name
 *   (ggml's ggml_backend_reg_get_proc_address()): a function of the
 *   backend's module, or %NULL when it has none of that name; call it
 *   through lb_backend_get_proc().  The CUDA module answers with every
 *   function it exports:
 *   - "lb_collectives_nccl": #LbCollectivesProc (comm/collectives.h), the
 *     NCCL collectives (comm/collectives-nccl.c, compiled into the
 *     module); lingbot/backend.c registers them for CUDA worker groups
 *   - "lingbot_backend_cuda_nccl_available": whether NCCL loaded
 *   - "lingbot_backend_cuda_trim", "lingbot_backend_cuda_memory_stats":
 *     the caching allocator's free blocks and counters
 *   - "lingbot_backend_cuda_cudnn_set_target",
 *     "lingbot_backend_cuda_sdpa_check", "lingbot_backend_cuda_conv_check",
 *     "lingbot_backend_cuda_attention_stats",
 *     "lingbot_backend_cuda_conv_stats",
 *     "lingbot_backend_cuda_conv_last_refusal",
 *     "lingbot_backend_cuda_conv_layout_stats",
 *     "lingbot_backend_cuda_conv_input_stats": cuDNN plans and counters
 *     (tests, lingbot-bench)
 *   - "lingbot_backend_conv_input_bf16": `gboolean (*) (LbStream *)`,
 *     whether conv3d_causal on that stream takes bf16 channels-last
 *     inputs as they are (the VAE decoder asks it before laying out its
 *     buffers; tests/common/fakedev.c answers it too)
 *
 *   Every name is documented where it is defined.  So the code above
 *   kernels/ reaches what the module offers without the module calling up.
 *
 * All function pointers report failures through GError (domain %LB_ERROR,
 * code %LB_ERROR_DEVICE) and never abort.
 */
struct _LbBackend
{
  const char *name;
  LbDeviceType device_type;
  int device_count;
  const LbOps *ops;

    gpointer (*alloc) (LbBackend * self, int device, gsize nbytes,
      GError ** error);
  void (*free) (LbBackend * self, int device, gpointer ptr);
    gboolean (*copy) (LbStream * stream, void *dst, const void *src,
      gsize nbytes, LbCopyKind kind, GError ** error);
  LbStream *(*stream_new) (LbBackend * self, int device, GError ** error);
  void (*stream_free) (LbStream * stream);
    gboolean (*stream_synchronize) (LbStream * stream, GError ** error);

  /* optional (NULL on the CPU): page-locked host memory */
    gpointer (*host_alloc) (LbBackend * self, gsize nbytes, GError ** error);
  void (*host_free) (LbBackend * self, gpointer ptr);

  /* optional (NULL on the CPU): capture of a stream's work into a graph */
    gboolean (*graph_begin) (LbStream * stream, GError ** error);
  LbGraph *(*graph_end) (LbStream * stream, GError ** error);
    gboolean (*graph_launch) (LbStream * stream, LbGraph * graph,
      GError ** error);
  void (*graph_free) (LbStream * stream, LbGraph * graph);

  /* optional (NULL on the CPU): events ordering two streams of a device */
  LbEvent *(*event_new) (LbBackend * self, int device, GError ** error);
  void (*event_free) (LbBackend * self, LbEvent * event);
    gboolean (*event_record) (LbStream * stream, LbEvent * event,
      GError ** error);
    gboolean (*stream_wait_event) (LbStream * stream, LbEvent * event,
      GError ** error);

  /* optional: the backend's extras by name */
    gpointer (*get_proc_address) (LbBackend * self, const char *name);

  /* optional (NULL on the CPU): per-stream resources sized up front */
    gboolean (*stream_reserve) (LbStream * stream, gsize scratch_bytes,
      gsize workspace_bytes, GError ** error);

  /* optional (NULL on the CPU): the attention op readied for a shape */
    gboolean (*attention_prepare) (LbStream * stream, const LbTensor * q,
      const LbTensor * k, const LbTensor * v, const LbTensor * out,
      gsize * scratch_bytes, gsize * workspace_bytes, GError ** error);

  gpointer priv;
};

gpointer lb_backend_get_proc (LbBackend * backend, const char *name);

/* The symbol a backend module (lingbot-backend-cuda.so) exports, of type
 * LbBackendModuleInit: returns its backend, or NULL with an error when it
 * has no usable device.  lingbot/backend.c opens the module and calls it. */
#define LB_BACKEND_MODULE_INIT "lingbot_backend_module_init"
typedef LbBackend *(*LbBackendModuleInit) (GError ** error);

/**
 * LbMathMode:
 * @LB_MATH_FP32: float32 inputs and float32 accumulation everywhere (no
 *   TF32): the parity mode, checked against the CPU oracle at float32
 *   tolerance.  The default of every stream.
 * @LB_MATH_BF16: the served precision of spec 1.11: a backend may round the
 *   inputs of its matrix products (attention's q, k, v and probabilities,
 *   GEMM activations) to bfloat16 and run them on tensor cores with
 *   float32 accumulation; norms, modulation, the residual stream and
 *   softmax statistics stay float32.  The CPU backend ignores it (but
 *   for attention's q rounding, kernels/ops.h @attention).
 * @LB_MATH_FP8: opt-in, for Hopper and later: every op behaves exactly as
 *   in %LB_MATH_BF16 (attention, convolutions and the KV cache stay
 *   bf16); in addition the model quantises its GEMM weights to E4M3 at
 *   load and calls @gemm_fp8 (kernels/ops.h) for its linear layers.
 *   Unlike %LB_MATH_BF16 it is set on CPU ranks too, which then run the
 *   CPU oracle of the same FP8 path (docs/design/cuda.md "Precision").
 *
 * How a stream's ops may trade precision for speed.  A GEMM whose weight
 * tensor is stored as %LB_DTYPE_BF16 is a bf16 product in any mode; an op
 * that differs by mode tests `math != LB_MATH_FP32`.
 */
typedef enum
{
  LB_MATH_FP32 = 0,
  LB_MATH_BF16 = 1,
  LB_MATH_FP8 = 2,
} LbMathMode;

/**
 * LbStream:
 * One rank's execution queue.  @native is the backend's handle
 * (cudaStream_t on CUDA, %NULL on CPU).  @math is the precision its ops
 * use (#LbMathMode; %LB_MATH_FP32 for a new stream), set by the owner
 * before the stream's first op and not changed while ops are queued.
 */
struct _LbStream
{
  LbBackend *backend;
  int device;
  gpointer native;
  gpointer priv;
  LbMathMode math;
};

static inline const LbOps *
lb_ops (LbStream * s)
{
  return s->backend->ops;
}

const char *lb_ops_first_missing (const LbOps * ops);

/* Page-locked host tensors (staging for per-chunk uploads/downloads). */
LbTensor *lb_tensor_new_host (LbStream * s, LbDType dtype, int ndim,
    const int64_t * shape, GError ** error);

/* Graph capture of a stream's work (CUDA Graphs); see LbBackend. */
gboolean lb_stream_can_capture (LbStream * s);
gboolean lb_stream_reserve (LbStream * s, gsize scratch_bytes,
    gsize workspace_bytes, GError ** error);
gboolean lb_attention_prepare (LbStream * s, const LbTensor * q,
    const LbTensor * k, const LbTensor * v, const LbTensor * out,
    gsize * scratch_bytes, gsize * workspace_bytes, GError ** error);

/**
 * LB_STREAM_SCRATCH_BLOCK:
 *
 * The bound of a device backend's per-call scratch buffers for its
 * row-blocked fp8 and f32 GEMM paths (gemm_fp8's codes and its f32
 * accumulator, gemm_fp8_q / gemm_fp8_gelu_q's accumulator, the f32 GELU
 * pair's block): each is at most this, so a stream reserving two blocks
 * and 1 MiB (lb_stream_reserve(); gemm_fp8's row scales, alignment) runs
 * any one of them without allocating.  (CUDA's conversion of an f32 x
 * for a bf16 GEMM takes up to four blocks and still allocates on first
 * use when larger than the reserve; the attention's operand conversions
 * depend on the sequence: a caller sizes them with lb_attention_prepare().)
 */
#define LB_STREAM_SCRATCH_BLOCK ((gsize) 32 << 20)

/* The CPU backend: always present, the oracle for every other backend. */
LbBackend *lb_cpu_backend (void);

/* Tensor allocation on a stream's device (CPU: plain aligned host memory). */
LbTensor *lb_tensor_new_on (LbStream * s, LbDType dtype, int ndim,
    const int64_t * shape, GError ** error);
gboolean lb_tensor_upload (LbStream * s, LbTensor * dst, const LbTensor * src,
    GError ** error);
gboolean lb_tensor_download (LbStream * s, LbTensor * dst,
    const LbTensor * src, GError ** error);

G_END_DECLS

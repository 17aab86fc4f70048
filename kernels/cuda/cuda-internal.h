/* lingbot-gst: CUDA backend internals
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Shared by the C files of the module (backend, allocator, GEMM, op
 * wrappers) and, through the "launch" section, by the .cu kernel files,
 * which are C++: everything here has C linkage.
 */
#pragma once

#include "kernels/backend.h"
#include "kernels/error.h"
#include "kernels/ops-check.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

/* cuDNN is loaded at run time, on first use (lb_cudnn_load(),
 * cuda-cudnn.c), not linked: a machine without it still runs the module,
 * with the im2col convolutions and the own attention kernels.  Every cuDNN
 * call of the module goes through this table (the macros below, defined
 * after cudnn.h declared the functions, so the prototypes are cuDNN's). */
typedef struct
{
  __typeof__ (cudnnGetVersion) * GetVersion;
  __typeof__ (cudnnGetErrorString) * GetErrorString;
  __typeof__ (cudnnCreate) * Create;
  __typeof__ (cudnnDestroy) * Destroy;
  __typeof__ (cudnnSetStream) * SetStream;
  __typeof__ (cudnnBackendCreateDescriptor) * BackendCreateDescriptor;
  __typeof__ (cudnnBackendDestroyDescriptor) * BackendDestroyDescriptor;
  __typeof__ (cudnnBackendFinalize) * BackendFinalize;
  __typeof__ (cudnnBackendSetAttribute) * BackendSetAttribute;
  __typeof__ (cudnnBackendGetAttribute) * BackendGetAttribute;
  __typeof__ (cudnnBackendExecute) * BackendExecute;
} LbCudnnApi;

extern LbCudnnApi lb_cudnn_api;

#define cudnnGetVersion lb_cudnn_api.GetVersion
#define cudnnGetErrorString lb_cudnn_api.GetErrorString
#define cudnnCreate lb_cudnn_api.Create
#define cudnnDestroy lb_cudnn_api.Destroy
#define cudnnSetStream lb_cudnn_api.SetStream
#define cudnnBackendCreateDescriptor lb_cudnn_api.BackendCreateDescriptor
#define cudnnBackendDestroyDescriptor lb_cudnn_api.BackendDestroyDescriptor
#define cudnnBackendFinalize lb_cudnn_api.BackendFinalize
#define cudnnBackendSetAttribute lb_cudnn_api.BackendSetAttribute
#define cudnnBackendGetAttribute lb_cudnn_api.BackendGetAttribute
#define cudnnBackendExecute lb_cudnn_api.BackendExecute

#include "kernels/cuda/cuda-kernels.h"

G_BEGIN_DECLS

#define LB_CUDA_GEMM_WORKSPACE (32u << 20)

/* Floats of per-call scratch the conv (im2col) and the large-head-dim
 * attention path take at most per block (128 MiB); both split their work so
 * that it fits. */
#define LB_CUDA_SCRATCH_LIMIT LB_STREAM_SCRATCH_BLOCK

/* Per-stream state: the CUDA stream, a cuBLASLt handle and its workspace,
 * the cache of GEMM plans (descriptors + chosen algorithm per shape). */
typedef struct
{
  cudaStream_t stream;
  int device;
  int cc;                       /* compute capability, major * 10 + minor */
  cublasLtHandle_t lt;
  void *workspace;
  gsize workspace_size;
  GHashTable *gemm_plans;       /* LbCudaGemmKey -> plan (cuda-gemm.c) */
  /* cuDNN (cuda-cudnn.c): the handle, created on first use and bound to
   * @stream, and the plan tables of the cuDNN paths (each owns its keys
   * and values; NULL until first used) */
  cudnnHandle_t dnn;
  GHashTable *conv_plans;       /* cuda-cudnn-conv.c */
  GHashTable *conv_weights;     /* cuda-cudnn-conv.c: bf16 KRSC copies */
  GHashTable *sdpa_plans;       /* cuda-cudnn-sdpa.c */
  /* the workspace every cuDNN plan of the stream shares (grown when a
   * plan needs more; a replaced one is kept until the stream goes, since
   * a captured graph may still use it) and the variant packs made so far,
   * keyed by (uids, pointers): a call with the pointers of an earlier one
   * creates no descriptor */
  void *dnn_ws;
  gsize dnn_ws_size;
  GPtrArray *dnn_ws_old;
  GHashTable *dnn_packs;
  /* graph capture (cuda-backend.c): while capturing, op scratch is taken
   * from and released to these lists instead of the pool, so the graph
   * keeps every block its kernels use */
  gboolean capturing;
  GPtrArray *capture_blocks;    /* LbCudaScratchBlock *, all taken */
  GPtrArray *capture_free;      /* LbCudaScratchBlock *, released */
  /* the scratch reserved by stream_reserve (cuda-alloc.c
   * lb_cuda_scratch_reserve()): outside captures lb_cuda_scratch() takes
   * fitting requests from it, one after another; it is reused from its
   * start once every piece taken has been released (the stream orders
   * the work that used them) */
  guint8 *arena;
  gsize arena_size, arena_top;
  int arena_live;
} LbCudaStream;

typedef struct
{
  void *ptr;
  gsize size;
} LbCudaScratchBlock;

/* cuda-check.c */
gboolean lb_cuda_check (cudaError_t err, const char *what, GError ** error);

/* FNV-1a over @n bytes at @p: the hash of the plan tables' keys (structs
 * without implicit padding, compared whole). */
guint lb_cuda_bytes_hash (const void *p, gsize n);

/* PREFIX_hash and PREFIX_equal (GHashFunc, GEqualFunc) over the whole
 * bytes of a key of @Type, for a plan table. */
#define LB_CUDA_KEY_FUNCS(prefix, Type) \
  static guint prefix##_hash (gconstpointer p) \
  { \
    return lb_cuda_bytes_hash (p, sizeof (Type)); \
  } \
  static gboolean prefix##_equal (gconstpointer a, gconstpointer b) \
  { \
    return memcmp (a, b, sizeof (Type)) == 0; \
  } \
  G_STATIC_ASSERT (sizeof (Type) > 0)

/* ---- caching allocator (cuda-alloc.c) ---- */

void *lb_cuda_pool_alloc (int device, gsize nbytes, GError ** error);
void lb_cuda_pool_free (int device, void *ptr);
void lb_cuda_pool_register_stream (int device, cudaStream_t stream);
void lb_cuda_pool_unregister_stream (int device, cudaStream_t stream);
gsize lb_cuda_pool_trim (int device);
/* Graph capture of a registered stream, known to the pool (cuda-alloc.c
 * file comment): begin starts it with cudaStreamBeginCapture (@mode), end
 * stops it with cudaStreamEndCapture (@graph NULL: only the pool's record)
 * and returns that call's status. */
gboolean lb_cuda_pool_capture_begin (int device, cudaStream_t stream,
    enum cudaStreamCaptureMode mode, GError ** error);
cudaError_t lb_cuda_pool_capture_end (int device, cudaStream_t stream,
    cudaGraph_t * graph);
guint lb_cuda_pool_waiting (int device);
void lb_cuda_pool_stats (int device, gsize * in_use, gsize * cached);
/* The live allocation holding [ptr, ptr + nbytes) (a walk over the live
 * blocks), and an O(1) check that it has not been freed since. */
gboolean lb_cuda_pool_find (int device, const void *ptr, gsize nbytes,
    void **base, guint64 * serial);
gboolean lb_cuda_pool_same (int device, void *base, guint64 serial);

/* Scratch for one op call on @s: pool memory, returned with
 * lb_cuda_scratch_release() after the op's kernels are enqueued (reuse by
 * a later op on the same stream is stream-ordered). */
void *lb_cuda_scratch (LbStream * s, gsize nbytes, GError ** error);
void lb_cuda_scratch_release (LbStream * s, void *ptr);
gboolean lb_cuda_scratch_reserve (LbStream * s, gsize nbytes, GError ** error);
void lb_cuda_scratch_arena_free (LbStream * s);

/* ---- GEMM (cuda-gemm.c) ---- */

gboolean lb_cuda_gemm (LbStream * s, const LbTensor * x, const LbTensor * w,
    gboolean trans_w, const LbTensor * bias, float alpha, float beta,
    LbTensor * y, GError ** error);
/* Row-major C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C + bias[n]
 * (op(A) = A^T stored [k,m] when @ta; op(B) = B^T stored [n,k] when @tb),
 * float32, FP32 compute, through a cached cuBLASLt plan. */
gboolean lb_cuda_gemm_gelu_tanh (LbStream * s, const LbTensor * x,
    const LbTensor * w, gboolean trans_w, const LbTensor * bias, float alpha,
    LbTensor * y, GError ** error);
gboolean lb_cuda_gemm_fp8 (LbStream * s, const LbTensor * x,
    const LbTensor * w, const LbTensor * sw, const LbTensor * bias,
    float alpha, float beta, LbTensor * y, GError ** error);
gboolean lb_cuda_gemm_fp8_q (LbStream * s, const LbTensor * x,
    const LbTensor * sx, const LbTensor * w, const LbTensor * sw,
    const LbTensor * bias, float alpha, float beta, LbTensor * y,
    GError ** error);
gboolean lb_cuda_gemm_fp8_gelu_q (LbStream * s, const LbTensor * x,
    const LbTensor * sx, const LbTensor * w, const LbTensor * sw,
    const LbTensor * bias, float alpha, LbTensor * y, LbTensor * sy,
    GError ** error);
gboolean lb_cuda_gemm_rm (LbStream * s, gboolean ta, gboolean tb, int64_t m,
    int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
    const float *b, int64_t ldb, const float *bias, float beta, float *c,
    int64_t ldc, GError ** error);
void lb_cuda_gemm_plans_free (LbCudaStream * cs);

/* ---- cuDNN (cuda-cudnn.c) ---- */

/* Loads libcudnn.so.<CUDNN_MAJOR> (or $LINGBOT_CUDNN_LIBRARY) once and
 * fills lb_cudnn_api; later
 * calls return the first result.  %LB_ERROR_UNSUPPORTED "cuDNN is not
 * available: ..." when the library or a function is missing. */
gboolean lb_cudnn_load (GError ** error);
/* The stream's cuDNN handle (created on first use, bound to the stream);
 * NULL and %LB_ERROR_DEVICE when cuDNN cannot be initialised. */
cudnnHandle_t lb_cuda_cudnn_handle (LbStream * s, GError ** error);
/* %TRUE for CUDNN_STATUS_SUCCESS; otherwise sets "@what: <cudnn's status
 * string>" (%LB_ERROR_DEVICE) and returns %FALSE. */
gboolean lb_cuda_cudnn_check (cudnnStatus_t st, const char *what,
    GError ** error);
/* Frees the handle and the plan tables (stream teardown). */
void lb_cuda_cudnn_free (LbCudaStream * cs);

/* cuDNN graph (backend) API helpers, shared by the cuDNN paths.  Each
 * returns %FALSE / NULL with "@what: <status>" (%LB_ERROR_DEVICE) on a
 * cuDNN failure; @what names the caller's step, e.g. "conv: x tensor". */

/* A descriptor of @type (cudnnBackendCreateDescriptor). */
cudnnBackendDescriptor_t lb_cudnn_new (cudnnBackendDescriptorType_t type,
    const char *what, GError ** error);
/* cudnnBackendSetAttribute (@d, @name, @type, @count, @values). */
gboolean lb_cudnn_set (cudnnBackendDescriptor_t d,
    cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
    int64_t count, const void *values, const char *what, GError ** error);
/* cudnnBackendFinalize (@d). */
gboolean lb_cudnn_finalize (cudnnBackendDescriptor_t d, const char *what,
    GError ** error);
/* One attribute of lb_cudnn_build(): @count values of @type at @values
 * (%NULL: not set, an optional input). */
typedef struct
{
  cudnnBackendAttributeName_t name;
  cudnnBackendAttributeType_t type;
  int64_t count;
  const void *values;
} LbCudnnAttr;

/* The most attributes lb_cudnn_build_op() takes for the operation. */
#define LB_CUDNN_MAX_OP_ATTRS 8

/* A finalized descriptor of @type with the @n @attrs set in order (NULL
 * and nothing left behind on a failure). */
cudnnBackendDescriptor_t lb_cudnn_build (cudnnBackendDescriptorType_t type,
    const LbCudnnAttr * attrs, int n, const char *what, GError ** error);
/* A finalized operation of @op_type over a finalized descriptor of
 * @desc_type (@desc_attrs), which the operation names as its @desc_name
 * attribute after @op_attrs (at most %LB_CUDNN_MAX_OP_ATTRS); the inner
 * descriptor is destroyed before returning (the operation keeps it). */
cudnnBackendDescriptor_t lb_cudnn_build_op (cudnnBackendDescriptorType_t
    desc_type, const LbCudnnAttr * desc_attrs, int n_desc,
    cudnnBackendDescriptorType_t op_type,
    cudnnBackendAttributeName_t desc_name, const LbCudnnAttr * op_attrs,
    int n_op, const char *what, GError ** error);
/* y = mode(x) or mode(x, b) (@b %NULL for the unary modes), f32 math,
 * both alphas 1: a pointwise operation of a graph. */
cudnnBackendDescriptor_t lb_cudnn_op_pointwise (cudnnPointwiseMode_t mode,
    cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
    cudnnBackendDescriptor_t y, const char *what, GError ** error);
/* Destroys the non-%NULL descriptors of @d [n]. */
void lb_cudnn_destroy_all (cudnnBackendDescriptor_t * d, int n);
/* A finalized tensor descriptor: @uid (unique within its graph), @dtype,
 * @nd dims and strides in elements, 16-byte alignment, virtual (an
 * intermediate of the graph, no memory) or by value (a host scalar passed
 * in the variant pack). */
cudnnBackendDescriptor_t lb_cudnn_tensor (int64_t uid, cudnnDataType_t dtype,
    int nd, const int64_t * dims, const int64_t * strides,
    gboolean is_virtual, gboolean by_value, const char *what, GError ** error);

/* An execution plan and the workspace it needs (bytes); the engine that
 * took the graph (its global index, and whether its numerical notes name
 * tensor cores), also set when a deviceless check stops at loading its
 * kernels. */
typedef struct
{
  cudnnBackendDescriptor_t plan;
  int64_t workspace;
  int64_t engine;
  gboolean tensor_core;
} LbCudnnPlan;

/* Builds the operation graph of @ops (finalized operation descriptors,
 * still owned by the caller, who may destroy them afterwards) on @s's
 * handle, asks the heuristics (mode A, then the fallback list) for engine
 * configurations and keeps the first that finalizes into a plan.  Unless
 * @allow_reduced, configurations whose numerical notes say they
 * down-convert inputs or use tensor cores on f32 data (TF32) are skipped,
 * so an f32 graph computes in f32.  %LB_ERROR_UNSUPPORTED when no
 * configuration finalizes (the message names the graph via @what and the
 * last status).  With @s %NULL it plans for the target set by
 * lingbot_backend_cuda_cudnn_set_target() instead of a device (the
 * deviceless check): then a configuration that finalizes, or fails only
 * at loading its kernels (no driver), counts as found, and @plan->plan
 * may be %NULL (workspace -1): such a plan cannot execute. */
gboolean lb_cudnn_plan_build (LbStream * s, cudnnBackendDescriptor_t * ops,
    int n_ops, gboolean allow_reduced, LbCudnnPlan * plan, const char *what,
    GError ** error);
void lb_cudnn_plan_clear (LbCudnnPlan * plan);
/* Grows @s's cuDNN workspace to @plan's need (synchronising the stream
 * first, since a smaller one may be in use; %FALSE without an error
 * during a capture, a device error when memory is short).  Call it after
 * building a plan, before its first lb_cudnn_execute(); a failure is
 * transient (the plan is fine, the memory was not there). */
gboolean lb_cudnn_reserve (LbStream * s, const LbCudnnPlan * plan,
    GError ** error);
/* lb_cudnn_reserve() for @bytes (stream_reserve's workspace). */
gboolean lb_cudnn_reserve_bytes (LbStream * s, gsize bytes, GError ** error);
/* Enqueues one execution of @plan on @s: a variant pack of the @n (at
 * most LB_CUDNN_MAX_TENSORS) tensor @uids and device (or, for by-value
 * tensors, host) @ptrs, with the stream's cuDNN workspace (sized when the
 * plan was built).  Packs are kept per stream by (uids, pointers), so the
 * steady state creates none; a by-value pointer must therefore point to
 * storage that lives as long as the stream (its value is read at each
 * execution). */
#define LB_CUDNN_MAX_TENSORS 8
gboolean lb_cudnn_execute (LbStream * s, const LbCudnnPlan * plan, int n,
    const int64_t * uids, void *const *ptrs, const char *what, GError ** error);

/* ---- attention through cuDNN SDPA (cuda-cudnn-sdpa.c) ---- */

/* Runs @a through cuDNN's fused flash graph unless LINGBOT_CUDA_ATTENTION=
 * own, when @s is LB_MATH_BF16, hd 64/128, no bias/mask and a plan exists or
 * can be built for the shape (*@ran = TRUE); otherwise leaves the op to the
 * caller's kernels (*@ran = FALSE).  @kv_bf16: a->k and a->v hold bf16.
 * FALSE: a launch or cuDNN error. */
gboolean lb_cuda_cudnn_attention (LbStream * s, const LbCudaAttnArgs * a,
    gboolean kv_bf16, gboolean * ran, GError ** error);
/* The plan of such a call built now, and the call's conversion scratch
 * and plan workspace in bytes (0, 0 for a call cuDNN declines). */
void lb_cuda_cudnn_attention_prepare (LbStream * s, const LbCudaAttnArgs * a,
    gboolean kv_bf16, gsize * scratch, gsize * workspace);
/* LbBackend.attention_prepare (cuda-ops.c). */
gboolean lb_cuda_attention_prepare (LbStream * s, const LbTensor * q,
    const LbTensor * k, const LbTensor * v, const LbTensor * out,
    gsize * scratch, gsize * workspace, GError ** error);
/* (cuda-cudnn-sdpa.c also exports lingbot_backend_cuda_attention_stats()
 * for tests and benchmarks.) */

/* ---- cuDNN convolutions (cuda-cudnn-conv.c) ---- */

/* The cuDNN path of conv3d_causal (@is_2d FALSE) and conv2d (@is_2d TRUE)
 * after the op's checks (@g).  *@done FALSE: run the im2col path instead
 * (selected by LINGBOT_CUDA_CONV=im2col, Cin = 0, operands not 16-byte
 * aligned, or a shape cuDNN refused).  %FALSE only on a launch failure. */
gboolean lb_cuda_cudnn_conv (LbStream * s, const LbConvGeom * g,
    gboolean is_2d, const float *x, const float *cache, const float *w,
    const float *bias, int pad_h, int pad_w, int stride_h, int stride_w,
    float *y, gboolean * done, GError ** error);
/* The channels-last graph on conv3d_causal's own bf16 NDHWC x and cache
 * (after the op's checks): in place when the cache ends where x starts.
 * *@done FALSE: widen them and take the f32 paths (then call
 * lb_cuda_conv_count_widened()).  %FALSE only on a launch failure. */
gboolean lb_cuda_cudnn_conv_in16 (LbStream * s, const LbConvGeom * g,
    const uint16_t * x, const uint16_t * cache, const float *w,
    const float *bias, int pad_h, int pad_w, int stride_h, int stride_w,
    float *y, gboolean * done, GError ** error);
void lb_cuda_conv_count_widened (void);
/* (cuda-cudnn-conv.c also exports lingbot_backend_cuda_conv_stats(),
 * lingbot_backend_cuda_conv_layout_stats(),
 * lingbot_backend_cuda_conv_input_stats() and
 * lingbot_backend_cuda_conv_last_refusal() for tests and benchmarks.) */

/* ---- argument checks (cuda-check.c; the rest is kernels/ops-check.h) ---- */

gboolean
lb_cuda_check_devices (LbStream * s, const char *op, GError ** error,
    const char *first_arg, ...)
    G_GNUC_NULL_TERMINATED;

/* ---- ops (cuda-ops.c) ---- */

extern const LbOps lb_cuda_ops;

G_END_DECLS

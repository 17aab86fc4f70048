/* lingbot-gst: the CUDA module's host logic on the host stubs
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Every C file of kernels/cuda built against the host stubs of the CUDA
 * runtime (cudart-stub.c), cuBLASLt (cublaslt-stub.c) and cuDNN's graph
 * API (cudnn-stub.c, loaded by name as libcudnn is), with the kernel
 * launchers replaced by recording stubs (gen-launch-stubs.py): the
 * backend's streams, graph capture, instantiation and replay and their
 * failures, the GEMM and cuDNN SDPA plan caches, and the library loading
 * failures, checked by what reaches the streams (the stub's log of
 * launches) and what stays allocated.  No kernel computes anything here:
 * kernel numerics are the GPU suite's.  Each test uses its own device,
 * so its own pool.
 */
#include "cudart-stub.h"
#include "cudnn-stub.h"
#include "kernels/cuda/cuda-internal.h"

#include <gmodule.h>
#include <string.h>

LbBackend *lingbot_backend_module_init (GError ** error);
void lingbot_backend_cuda_memory_stats (int device, gsize * in_use,
    gsize * cached);
void lingbot_backend_cuda_attention_stats (guint64 * cudnn_runs,
    guint64 * cudnn_declined, guint64 * cudnn_plans, char **last_error);

#define MiB ((gsize) 1 << 20)

static CudnnStubControl *dnn;
static CudnnStubControlFunc dnn_control;

/* The cuDNN stub's knobs, its live counts brought up to date. */
static CudnnStubControl *
dnn_ctl (void)
{
  return dnn_control ();
}

/* The stubs back to their start, work done as soon as enqueued. */
static void
reset (void)
{
  cuda_stub_reset ();
  cuda_stub_set_auto_complete (TRUE);
}

static LbBackend *
backend (void)
{
  g_autoptr (GError) err = NULL;
  LbBackend *be = lingbot_backend_module_init (&err);
  g_assert_no_error (err);
  g_assert_nonnull (be);
  return be;
}

static LbStream *
stream_new (int device)
{
  LbBackend *be = backend ();
  g_autoptr (GError) err = NULL;
  LbStream *s = be->stream_new (be, device, &err);
  g_assert_no_error (err);
  g_assert_nonnull (s);
  return s;
}

static gsize
in_use (int device)
{
  gsize used = 0;
  lingbot_backend_cuda_memory_stats (device, &used, NULL);
  return used;
}

/* A device tensor of @n floats (pool memory; host memory under the stub) */
static LbTensor
dev_tensor (LbStream * s, LbDType dtype, int ndim, const int64_t * shape)
{
  gsize n = lb_dtype_size (dtype);
  for (int i = 0; i < ndim; i++)
    n *= (gsize) shape[i];
  void *p = s->backend->alloc (s->backend, s->device, n, NULL);
  g_assert_nonnull (p);
  memset (p, 0, n);
  LbTensor t;
  lb_tensor_view_init (&t, dtype, p, (LbDevice) { LB_DEVICE_CUDA, s->device },
      ndim, shape, NULL);
  return t;
}

static void
dev_tensor_free (LbStream * s, LbTensor * t)
{
  s->backend->free (s->backend, s->device, t->data);
}

/* The launches the stub ran since the last call, joined by spaces. */
static char *
take_log (void)
{
  g_auto (GStrv) log = cuda_stub_take_log ();
  return g_strjoinv (" ", log);
}

/* The operands of one "pass": an add, an attention whose head dim (256)
 * takes the GEMM path with pool scratch, and a GEMM. */
typedef struct
{
  LbTensor a, b, y, q, k, v, o;
} Pass;

static void
pass_init (LbStream * s, Pass * p)
{
  const int64_t rows[2] = { 4, 8 };
  const int64_t qs[3] = { 4, 2, 256 };
  p->a = dev_tensor (s, LB_DTYPE_F32, 2, rows);
  p->b = dev_tensor (s, LB_DTYPE_F32, 2, rows);
  p->y = dev_tensor (s, LB_DTYPE_F32, 2, rows);
  p->q = dev_tensor (s, LB_DTYPE_F32, 3, qs);
  p->k = dev_tensor (s, LB_DTYPE_F32, 3, qs);
  p->v = dev_tensor (s, LB_DTYPE_F32, 3, qs);
  p->o = dev_tensor (s, LB_DTYPE_F32, 3, qs);
}

static void
pass_clear (LbStream * s, Pass * p)
{
  LbTensor *all[] = { &p->a, &p->b, &p->y, &p->q, &p->k, &p->v, &p->o };
  for (guint i = 0; i < G_N_ELEMENTS (all); i++)
    dev_tensor_free (s, all[i]);
}

static gboolean
pass_run (LbStream * s, Pass * p, GError ** error)
{
  const LbOps *ops = s->backend->ops;
  return ops->add (s, &p->a, &p->b, &p->y, error) &&
      ops->attention (s, &p->q, &p->k, &p->v, NULL, NULL, 0.0625f, &p->o,
      error) &&
      lb_cuda_gemm_rm (s, FALSE, TRUE, 4, 4, 8, 1.0f, p->a.data, 8,
      p->b.data, 8, NULL, 0.0f, p->y.data, 4, error);
}

/* The eager launches of a pass. */
static char *
pass_eager (LbStream * s, Pass * p)
{
  g_autoptr (GError) err = NULL;
  g_free (take_log ());
  g_assert_true (pass_run (s, p, &err));
  g_assert_no_error (err);
  return take_log ();
}

/* ---- module init ---- */

/* No driver, no device, none visible: the messages say which. */
static void
test_module_init (void)
{
  static const struct
  {
    int count;
    cudaError_t err;
    const char *msg;
  } cases[] = {
    {0, cudaErrorInsufficientDriver, "no usable CUDA device: no NVIDIA "
          "driver, or one older than the CUDA runtime (cudaGetDeviceCount: "
          "CUDA driver version is insufficient for CUDA runtime version)"},
    {0, cudaErrorNoDevice, "no usable CUDA device: no device present "
          "(cudaGetDeviceCount: no CUDA-capable device is detected)"},
    {0, cudaSuccess, "no usable CUDA device: none visible"},
  };
  reset ();
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autoptr (GError) err = NULL;
    cuda_stub_set_devices (cases[i].count, cases[i].err);
    g_assert_null (lingbot_backend_module_init (&err));
    g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
    g_assert_cmpstr (err->message, ==, cases[i].msg);
  }
  cuda_stub_set_devices (3, cudaSuccess);
  g_assert_cmpint (backend ()->device_count, ==, 3);
  reset ();
}

/* ---- streams ---- */

/* A stream takes a cuBLASLt handle and its GEMM workspace from the pool;
 * freeing it gives both back without a cudaFree (which would invalidate
 * a capture another thread runs on the device): a capture on another
 * stream of the device survives it. */
static void
test_stream_lifecycle (void)
{
  const int dev = 10;
  reset ();
  cuda_stub_lt_reset ();
  const CudaStubLtStats lt0 = cuda_stub_lt_stats ();
  const int streams0 = cuda_stub_stats ().streams_live;
  LbStream *s = stream_new (dev);
  LbCudaStream *cs = s->priv;
  g_assert_cmpint (cs->cc, ==, 90);
  g_assert_cmpint (cuda_stub_lt_stats ().handles_live, ==,
      lt0.handles_live + 1);
  g_assert_cmpuint (in_use (dev), ==, LB_CUDA_GEMM_WORKSPACE);
  g_assert_cmpint (cuda_stub_stats ().streams_live, ==, streams0 + 1);

  LbStream *other = stream_new (dev);
  g_assert_true (other->backend->graph_begin (other, NULL));
  s->backend->stream_free (s);
  g_assert_cmpint (cuda_stub_stats ().n_free, ==, 0);
  g_assert_cmpint (cuda_stub_stats ().n_refused, ==, 0);
  g_autoptr (GError) err = NULL;
  LbGraph *g = other->backend->graph_end (other, &err);
  g_assert_no_error (err);
  g_assert_nonnull (g);
  other->backend->graph_free (other, g);
  other->backend->stream_free (other);
  g_assert_cmpuint (in_use (dev), ==, 0);
  g_assert_cmpint (cuda_stub_lt_stats ().handles_live, ==, lt0.handles_live);
  g_assert_cmpint (cuda_stub_stats ().streams_live, ==, streams0);
}

/* cublasLtCreate failing: a clear error, and nothing is left behind (the
 * CUDA stream destroyed, no pool memory held). */
static void
test_stream_lt_fails (void)
{
  const int dev = 11;
  reset ();
  cuda_stub_lt_reset ();
  const int streams0 = cuda_stub_stats ().streams_live;
  cuda_stub_lt_set_create_status (CUBLAS_STATUS_NOT_INITIALIZED);
  LbBackend *be = backend ();
  g_autoptr (GError) err = NULL;
  g_assert_null (be->stream_new (be, dev, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "cublasLtCreate failed on device 11");
  g_assert_cmpint (cuda_stub_stats ().streams_live, ==, streams0);
  g_assert_cmpuint (in_use (dev), ==, 0);
  cuda_stub_lt_reset ();
}

/* ---- graphs ---- */

/* A pass captured is recorded, not run; each replay runs the very
 * launches of the eager pass, in order; the scratch its kernels use stays
 * the graph's until the graph is freed. */
static void
test_graph_replay (void)
{
  const int dev = 12;
  reset ();
  LbStream *s = stream_new (dev);
  LbBackend *be = s->backend;
  Pass p;
  pass_init (s, &p);
  g_autofree char *eager = pass_eager (s, &p);
  g_test_message ("eager pass: %s", eager);
  /* the add; per head Q K^T, the softmax, P V; the GEMM */
  g_assert_cmpstr (eager, ==, "lb_cuda_launch_elementwise "
      "cublasLtMatmul lb_cuda_launch_softmax_rows cublasLtMatmul "
      "cublasLtMatmul lb_cuda_launch_softmax_rows cublasLtMatmul "
      "cublasLtMatmul");
  const gsize used0 = in_use (dev);
  const CudaStubStats st0 = cuda_stub_stats ();

  g_autoptr (GError) err = NULL;
  g_assert_true (be->graph_begin (s, &err));
  g_assert_true (pass_run (s, &p, &err));
  LbGraph *g = be->graph_end (s, &err);
  g_assert_no_error (err);
  g_assert_nonnull (g);
  g_autofree char *during = take_log ();
  g_assert_cmpstr (during, ==, "");
  const CudaStubStats st1 = cuda_stub_stats ();
  g_assert_cmpint (st1.n_launches, ==, st0.n_launches);
  g_assert_cmpint (st1.n_instantiated, ==, st0.n_instantiated + 1);
  g_assert_cmpuint (in_use (dev), >, used0);    /* the graph's scratch */

  for (int i = 0; i < 2; i++) {
    g_assert_true (be->graph_launch (s, g, &err));
    g_autofree char *replay = take_log ();
    g_assert_cmpstr (replay, ==, eager);
  }
  /* eager work between replays takes other scratch than the graph's */
  g_autofree char *again = pass_eager (s, &p);
  g_assert_cmpstr (again, ==, eager);
  be->graph_free (s, g);
  g_assert_cmpuint (in_use (dev), ==, used0);
  g_assert_cmpint (cuda_stub_stats ().graphs_live, ==, st0.graphs_live);
  g_assert_cmpint (cuda_stub_stats ().execs_live, ==, st0.execs_live);
  pass_clear (s, &p);
  be->stream_free (s);
}

/* What run_region()'s fallback (lingbot/dit-session.c) relies on: a
 * capture another call invalidated ends with an error naming CUDA's
 * status, ran nothing, leaves no graph and no scratch behind, clears the
 * thread's sticky error and leaves the stream out of capture, so the pass
 * runs directly with the eager launches and a later capture works. */
static void
test_graph_invalidated (void)
{
  const int dev = 13;
  reset ();
  LbStream *s = stream_new (dev);
  LbBackend *be = s->backend;
  Pass p;
  pass_init (s, &p);
  g_autofree char *eager = pass_eager (s, &p);
  const gsize used0 = in_use (dev);
  const CudaStubStats st0 = cuda_stub_stats ();

  g_autoptr (GError) err = NULL;
  g_assert_true (be->graph_begin (s, &err));
  g_assert_true (pass_run (s, &p, &err));
  /* another library synchronises the device meanwhile */
  g_assert_cmpint (cudaDeviceSynchronize (), ==,
      cudaErrorStreamCaptureUnsupported);
  g_assert_null (be->graph_end (s, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==, "graph capture: operation failed due "
      "to a previous error during capture "
      "(cudaErrorStreamCaptureInvalidated)");
  g_clear_error (&err);
  g_assert_cmpint (cudaGetLastError (), ==, cudaSuccess);
  g_autofree char *none = take_log ();
  g_assert_cmpstr (none, ==, "");
  g_assert_cmpuint (in_use (dev), ==, used0);
  g_assert_cmpint (cuda_stub_stats ().graphs_live, ==, st0.graphs_live);
  g_assert_cmpint (cuda_stub_stats ().n_instantiated, ==, st0.n_instantiated);

  g_autofree char *direct = pass_eager (s, &p);
  g_assert_cmpstr (direct, ==, eager);

  g_assert_true (be->graph_begin (s, &err));
  g_assert_true (pass_run (s, &p, &err));
  LbGraph *g = be->graph_end (s, &err);
  g_assert_no_error (err);
  g_assert_true (be->graph_launch (s, g, &err));
  g_autofree char *replay = take_log ();
  g_assert_cmpstr (replay, ==, eager);
  be->graph_free (s, g);
  pass_clear (s, &p);
  be->stream_free (s);
}

/* An instantiation that fails: the error, the captured graph destroyed,
 * the capture's scratch back in the pool. */
static void
test_graph_instantiate_fails (void)
{
  const int dev = 14;
  reset ();
  LbStream *s = stream_new (dev);
  LbBackend *be = s->backend;
  Pass p;
  pass_init (s, &p);
  g_free (pass_eager (s, &p));
  const gsize used0 = in_use (dev);
  const CudaStubStats st0 = cuda_stub_stats ();
  g_autoptr (GError) err = NULL;
  g_assert_true (be->graph_begin (s, &err));
  g_assert_true (pass_run (s, &p, &err));
  cuda_stub_set_instantiate_error (cudaErrorNotSupported);
  g_assert_null (be->graph_end (s, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==,
      "graph capture: operation not supported (cudaErrorNotSupported)");
  g_assert_cmpint (cudaGetLastError (), ==, cudaSuccess);
  g_assert_cmpint (cuda_stub_stats ().graphs_live, ==, st0.graphs_live);
  g_assert_cmpint (cuda_stub_stats ().execs_live, ==, st0.execs_live);
  g_assert_cmpuint (in_use (dev), ==, used0);
  cuda_stub_set_instantiate_error (cudaSuccess);
  pass_clear (s, &p);
  be->stream_free (s);
}

/* begin twice, end without begin: errors, and the first capture goes on;
 * a stream freed while capturing ends the capture and leaves nothing. */
static void
test_graph_misuse (void)
{
  const int dev = 15;
  reset ();
  LbStream *s = stream_new (dev);
  LbBackend *be = s->backend;
  g_autoptr (GError) err = NULL;
  g_assert_null (be->graph_end (s, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==,
      "graph capture: stream of device 15 is not capturing");
  g_clear_error (&err);
  Pass p;
  pass_init (s, &p);
  g_free (pass_eager (s, &p));
  const gsize used0 = in_use (dev);
  const CudaStubStats st0 = cuda_stub_stats ();
  g_assert_true (be->graph_begin (s, &err));
  g_assert_false (be->graph_begin (s, &err));
  g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
  g_assert_cmpstr (err->message, ==,
      "graph capture: stream of device 15 is already capturing");
  g_clear_error (&err);
  g_assert_true (pass_run (s, &p, &err));
  g_assert_cmpuint (in_use (dev), >, used0);
  pass_clear (s, &p);
  be->stream_free (s);          /* still capturing */
  g_assert_cmpuint (in_use (dev), ==, 0);
  g_assert_cmpint (cuda_stub_stats ().graphs_live, ==, st0.graphs_live);
  g_assert_cmpint (cuda_stub_stats ().n_refused, ==, 0);
  g_autofree char *none = take_log ();
  g_assert_cmpstr (none, ==, "");
}

/* ---- GEMM plans ---- */

static gboolean
gemm (LbStream * s, int64_t m, int64_t n, int64_t k, void *buf, GError ** error)
{
  return lb_cuda_gemm_rm (s, FALSE, FALSE, m, n, k, 1.0f, buf, k, buf, n,
      NULL, 0.0f, buf, n, error);
}

/* One plan per new shape, built on first use (under capture too: a
 * cuBLASLt plan is host state), reused after; a shape cuBLASLt has no
 * algorithm for is an error and is not remembered; the table is emptied
 * when it holds 1024 shapes; the stream's end destroys every plan. */
static void
test_gemm_plans (void)
{
  const int dev = 16;
  reset ();
  cuda_stub_lt_reset ();
  const int objects0 = cuda_stub_lt_stats ().objects_live;
  LbStream *s = stream_new (dev);
  LbBackend *be = s->backend;
  LbCudaStream *cs = s->priv;
  void *buf = be->alloc (be, dev, 64 * MiB, NULL);
  g_autoptr (GError) err = NULL;

  g_assert_true (gemm (s, 3, 5, 7, buf, &err));
  g_assert_true (gemm (s, 3, 5, 7, buf, &err));
  g_assert_cmpint (cuda_stub_lt_stats ().n_plans_made, ==, 1);
  g_assert_cmpint (cuda_stub_lt_stats ().n_matmuls, ==, 2);
  g_assert_true (gemm (s, 3, 5, 8, buf, &err));
  g_assert_cmpint (cuda_stub_lt_stats ().n_plans_made, ==, 2);

  g_assert_true (be->graph_begin (s, &err));
  g_assert_true (gemm (s, 9, 5, 7, buf, &err));
  LbGraph *g = be->graph_end (s, &err);
  g_assert_no_error (err);
  g_assert_cmpint (cuda_stub_lt_stats ().n_plans_made, ==, 3);
  g_free (take_log ());
  g_assert_true (be->graph_launch (s, g, &err));
  g_autofree char *replay = take_log ();
  g_assert_cmpstr (replay, ==, "cublasLtMatmul");
  be->graph_free (s, g);

  cuda_stub_lt_refuse (TRUE, FALSE);
  for (int i = 0; i < 2; i++) {
    g_assert_false (gemm (s, 3, 5, 9, buf, &err));
    g_assert_error (err, LB_ERROR, LB_ERROR_DEVICE);
    g_assert_cmpstr (err->message, ==, "gemm: cuBLASLt has no algorithm "
        "for M=3 N=5 K=9 (f32 inputs, lda 9, ldb 5)");
    g_clear_error (&err);
  }
  g_assert_cmpint (cuda_stub_lt_stats ().n_heuristics, ==, 5);
  g_assert_cmpint (g_hash_table_size (cs->gemm_plans), ==, 3);
  cuda_stub_lt_refuse (FALSE, FALSE);

  for (int64_t k = 100; g_hash_table_size (cs->gemm_plans) < 1024; k++)
    g_assert_true (gemm (s, 1, 1, k, buf, &err));
  const int made = cuda_stub_lt_stats ().n_plans_made;
  g_assert_true (gemm (s, 3, 5, 7, buf, &err));
  g_assert_cmpint (cuda_stub_lt_stats ().n_plans_made, ==, made);
  g_assert_true (gemm (s, 2, 2, 2, buf, &err));
  g_assert_cmpint (g_hash_table_size (cs->gemm_plans), ==, 1);
  g_assert_cmpint (cuda_stub_lt_stats ().objects_live, ==, objects0 + 4);
  be->free (be, dev, buf);
  be->stream_free (s);
  g_assert_cmpint (cuda_stub_lt_stats ().objects_live, ==, objects0);
}

/* ---- cuDNN SDPA plans ---- */

typedef struct
{
  guint64 runs, declined, plans;
  char *error;
} AttnStats;

static AttnStats
attn_stats (void)
{
  AttnStats a;
  lingbot_backend_cuda_attention_stats (&a.runs, &a.declined, &a.plans,
      &a.error);
  return a;
}

/* The DiT's attention on a bf16 stream, @nq queries of 2 heads of 128 */
static gboolean
attention (LbStream * s, int64_t nq, GError ** error)
{
  const int64_t shape[3] = { nq, 2, 128 };
  LbTensor q = dev_tensor (s, LB_DTYPE_F32, 3, shape);
  LbTensor o = dev_tensor (s, LB_DTYPE_F32, 3, shape);
  gboolean ok = s->backend->ops->attention (s, &q, &q, &q, NULL, NULL,
      0.088f, &o, error);
  dev_tensor_free (s, &q);
  dev_tensor_free (s, &o);
  return ok;
}

#define CUDNN_RUN "lb_cuda_launch_f32_to_bf16_3d lb_cuda_launch_f32_to_bf16_3d " \
  "lb_cuda_launch_f32_to_bf16_3d cudnnBackendExecute " \
  "lb_cuda_launch_bf16_to_f32_3d"
#define OWN_RUN "lb_cuda_launch_flash_attention_bf16"

static void
assert_ran (LbStream * s, int64_t nq, const char *expected)
{
  g_autoptr (GError) err = NULL;
  g_free (take_log ());
  g_assert_true (attention (s, nq, &err));
  g_assert_no_error (err);
  g_autofree char *log = take_log ();
  g_assert_cmpstr (log, ==, expected);
}

/* One plan per new shape, then only executions (no new descriptor); a
 * shape first seen under capture is declined (the own kernel is captured)
 * and gets its plan once seen outside; a known shape is captured through
 * cuDNN; no engine or a failed execution: the own kernel from then on;
 * past 256 shapes new ones take the own kernel and the old keep theirs
 * (never evicted); the stream's end destroys plans, packs and handle. */
static void
test_sdpa_plans (void)
{
  const int dev = 17;
  reset ();
  const int descs0 = dnn_ctl ()->descriptors_live;
  const int handles0 = dnn_ctl ()->handles_live;
  LbStream *s = stream_new (dev);
  LbBackend *be = s->backend;
  LbCudaStream *cs = s->priv;
  s->math = LB_MATH_BF16;
  g_autoptr (GError) err = NULL;
  const AttnStats a0 = attn_stats ();
  const int plans0 = dnn->n_plans;

  assert_ran (s, 8, CUDNN_RUN);
  g_assert_cmpint (dnn->n_plans, ==, plans0 + 1);
  const int descs1 = dnn_ctl ()->descriptors_live;
  const int created1 = dnn->n_created;
  assert_ran (s, 8, CUDNN_RUN);
  g_assert_cmpint (dnn->n_plans, ==, plans0 + 1);
  g_assert_cmpint (dnn->n_created, ==, created1);
  g_assert_cmpint (dnn_ctl ()->descriptors_live, ==, descs1);

  /* under capture: shape 16 is new, shape 8 known */
  g_assert_true (be->graph_begin (s, &err));
  g_assert_true (attention (s, 16, &err));
  g_assert_true (attention (s, 8, &err));
  LbGraph *g = be->graph_end (s, &err);
  g_assert_no_error (err);
  g_assert_cmpint (dnn->n_plans, ==, plans0 + 1);
  g_free (take_log ());
  g_assert_true (be->graph_launch (s, g, &err));
  g_autofree char *replay = take_log ();
  g_assert_cmpstr (replay, ==, OWN_RUN " " CUDNN_RUN);
  be->graph_free (s, g);
  assert_ran (s, 16, CUDNN_RUN);
  g_assert_cmpint (dnn->n_plans, ==, plans0 + 2);

  /* no engine for shape 24: remembered */
  dnn_ctl ()->refuse = TRUE;
  assert_ran (s, 24, OWN_RUN);
  dnn_ctl ()->refuse = FALSE;
  assert_ran (s, 24, OWN_RUN);
  AttnStats a1 = attn_stats ();
  g_assert_cmpstr (a1.error, ==, "attention (cuDNN SDPA): no cuDNN engine "
      "runs this graph (last status: CUDNN_STATUS_NOT_SUPPORTED)");
  g_free (a1.error);

  /* shape 32 fails to execute: this call and later ones run the own */
  assert_ran (s, 32, CUDNN_RUN);
  dnn_ctl ()->fail_execute = TRUE;
  assert_ran (s, 32, "lb_cuda_launch_f32_to_bf16_3d "
      "lb_cuda_launch_f32_to_bf16_3d lb_cuda_launch_f32_to_bf16_3d " OWN_RUN);
  dnn_ctl ()->fail_execute = FALSE;
  assert_ran (s, 32, OWN_RUN);

  /* fill the table to 256 shapes: the 257th is declined, the first kept */
  for (int64_t nq = 100; g_hash_table_size (cs->sdpa_plans) < 256; nq++)
    g_assert_true (attention (s, nq, &err));
  const int plans1 = dnn->n_plans;
  assert_ran (s, 1000, OWN_RUN);
  assert_ran (s, 8, CUDNN_RUN);
  g_assert_cmpint (dnn->n_plans, ==, plans1);
  AttnStats a2 = attn_stats ();
  /* declined: 16 in the capture, 24 twice, 32 twice, 1000 */
  g_assert_cmpuint (a2.declined - a0.declined, ==, 6);
  g_free (a2.error);
  g_free (a0.error);
  be->stream_free (s);
  g_assert_cmpint (dnn_ctl ()->descriptors_live, ==, descs0);
  g_assert_cmpint (dnn_ctl ()->handles_live, ==, handles0);
}

/* ---- cuDNN missing (each in its own process: cuDNN loads once) ---- */

static void
no_cudnn (const char *library, const char *why)
{
  if (g_test_subprocess ()) {
    g_setenv ("LINGBOT_CUDNN_LIBRARY", library, TRUE);
    LbStream *s = stream_new (18);
    s->math = LB_MATH_BF16;
    assert_ran (s, 8, OWN_RUN);
    assert_ran (s, 8, OWN_RUN);
    AttnStats a = attn_stats ();
    g_autofree char *msg = g_strdup_printf ("cuDNN is not available (%s); "
        "the convolutions use im2col and attention the own kernels", why);
    g_assert_cmpstr (a.error, ==, msg);
    g_assert_cmpuint (a.declined, ==, 2);
    g_assert_cmpuint (a.runs, ==, 0);
    g_free (a.error);
    s->backend->stream_free (s);
    return;
  }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
}

static void
test_no_cudnn_file (void)
{
  no_cudnn ("/nonexistent/libcudnn.so.9", "/nonexistent/libcudnn.so.9: "
      "cannot open shared object file: No such file or directory");
}

static void
test_no_cudnn_symbol (void)
{
  no_cudnn ("libgmodule-2.0.so.0", "libgmodule-2.0.so.0 has no "
      "cudnnGetVersion");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (!g_test_subprocess ())
    g_setenv ("LINGBOT_CUDNN_LIBRARY", CUDNN_STUB_PATH, TRUE);
  GModule *m = g_module_open (CUDNN_STUB_PATH, G_MODULE_BIND_LAZY |
      G_MODULE_BIND_LOCAL);
  g_assert_nonnull (m);
  g_assert_true (g_module_symbol (m, "cudnn_stub_control",
          (gpointer *) & dnn_control));
  dnn = dnn_control ();
  dnn->launch = cuda_stub_launch;
  g_test_add_func ("/cuda-backend/module-init", test_module_init);
  g_test_add_func ("/cuda-backend/stream-lifecycle", test_stream_lifecycle);
  g_test_add_func ("/cuda-backend/stream-lt-fails", test_stream_lt_fails);
  g_test_add_func ("/cuda-backend/graph-replay", test_graph_replay);
  g_test_add_func ("/cuda-backend/graph-invalidated", test_graph_invalidated);
  g_test_add_func ("/cuda-backend/graph-instantiate-fails",
      test_graph_instantiate_fails);
  g_test_add_func ("/cuda-backend/graph-misuse", test_graph_misuse);
  g_test_add_func ("/cuda-backend/gemm-plans", test_gemm_plans);
  g_test_add_func ("/cuda-backend/sdpa-plans", test_sdpa_plans);
  g_test_add_func ("/cuda-backend/no-cudnn-file", test_no_cudnn_file);
  g_test_add_func ("/cuda-backend/no-cudnn-symbol", test_no_cudnn_symbol);
  return g_test_run ();
}

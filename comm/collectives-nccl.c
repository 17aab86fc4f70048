/* lingbot-gst: "nccl" collectives (one process, one thread per GPU)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Communicators are created once per worker group with ncclCommInitAll.
 * Each rank thread issues its own NCCL calls on its own stream (one thread
 * per communicator, as NCCL requires).  Operations are asynchronous: they
 * complete on the rank's stream.  lb_comm_synchronize() polls the stream so
 * that a wait is bounded by the group's timeout and released by its abort
 * flag; on abort or timeout the rank aborts its communicator
 * (ncclCommAbort), and the group's reset re-creates all of them once the
 * group is idle.  All-to-all is ncclGroupStart + ncclSend/ncclRecv pairs +
 * ncclGroupEnd (spec B.3); all-gather-v is a group of broadcasts.
 *
 * It calls cudart, so it is compiled into the CUDA backend module
 * (kernels/cuda/meson.build), not into liblingbot; the module exports it
 * as "lb_collectives_nccl" and the registry (lingbot/backend.c) finds it
 * with lb_backend_get_proc() and registers it for CUDA worker groups.
 * The module's own code never calls it: comm/ sits above kernels/.
 */
#include "comm/comm-private.h"
#include "kernels/cuda/cuda-internal.h"
#include "kernels/cuda/cuda-library.h"

#include <cuda_runtime.h>
#include <gmodule.h>
#include <nccl.h>

/* NCCL is loaded at run time (nccl_load()), not linked: without it
 * groups of CUDA ranks use the local collectives.  Every NCCL call below
 * goes through this table (the macros, defined after nccl.h declared the
 * functions, keep NCCL's prototypes). */
typedef struct
{
  __typeof__ (ncclGetErrorString) * GetErrorString;
  __typeof__ (ncclCommInitAll) * CommInitAll;
  __typeof__ (ncclCommDestroy) * CommDestroy;
  __typeof__ (ncclCommAbort) * CommAbort;
  __typeof__ (ncclCommGetAsyncError) * CommGetAsyncError;
  __typeof__ (ncclGroupStart) * GroupStart;
  __typeof__ (ncclGroupEnd) * GroupEnd;
  __typeof__ (ncclSend) * Send;
  __typeof__ (ncclRecv) * Recv;
  __typeof__ (ncclBroadcast) * Broadcast;
  __typeof__ (ncclAllGather) * AllGather;
  __typeof__ (ncclAllReduce) * AllReduce;
  __typeof__ (ncclReduceScatter) * ReduceScatter;
} NcclApi;

static NcclApi nccl_api;

#define ncclGetErrorString nccl_api.GetErrorString
#define ncclCommInitAll nccl_api.CommInitAll
#define ncclCommDestroy nccl_api.CommDestroy
#define ncclCommAbort nccl_api.CommAbort
#define ncclCommGetAsyncError nccl_api.CommGetAsyncError
#define ncclGroupStart nccl_api.GroupStart
#define ncclGroupEnd nccl_api.GroupEnd
#define ncclSend nccl_api.Send
#define ncclRecv nccl_api.Recv
#define ncclBroadcast nccl_api.Broadcast
#define ncclAllGather nccl_api.AllGather
#define ncclAllReduce nccl_api.AllReduce
#define ncclReduceScatter nccl_api.ReduceScatter

#define FN(f) { "nccl" #f, G_STRUCT_OFFSET (NcclApi, f) }
static const LbCudaSymbol nccl_symbols[] = {
  FN (GetErrorString), FN (CommInitAll), FN (CommDestroy), FN (CommAbort),
  FN (CommGetAsyncError), FN (GroupStart), FN (GroupEnd), FN (Send),
  FN (Recv), FN (Broadcast), FN (AllGather), FN (AllReduce),
  FN (ReduceScatter),
};

#undef FN

/* LINGBOT_NCCL_LIBRARY: another file name or path of the library */
static LbCudaLibrary nccl_library = {
  "NCCL", "LINGBOT_NCCL_LIBRARY", "libnccl.so." G_STRINGIFY (NCCL_MAJOR),
  "groups of CUDA ranks use the local collectives",
  nccl_symbols, G_N_ELEMENTS (nccl_symbols), &nccl_api, sizeof nccl_api,
  G_ONCE_INIT, NULL
};

/**
 * nccl_load:
 * @error: %LB_ERROR_UNSUPPORTED "NCCL is not available (...)" when
 *   libnccl.so.<NCCL_MAJOR> (or $LINGBOT_NCCL_LIBRARY) or one of its
 *   functions is missing
 *
 * Loads NCCL once per process; later calls return the first result.  The
 * registry registers the NCCL collectives only when this succeeds.
 *
 * Returns: %TRUE when NCCL can be used.
 */
static gboolean
nccl_load (GError ** error)
{
  return lb_cuda_library_load (&nccl_library, error);
}

typedef struct
{
  LbWorkerGroup *group;
  int n;
  int *devs;
  ncclComm_t *comms;
  float **barrier_buf;          /* one float per device, for barriers */
  gboolean *comm_dead;          /* aborted: re-create at reset */
  int *depth;                   /* ncclGroupStart nesting per rank thread */
} NcclState;

static inline gboolean
nccl_ok (ncclResult_t r)
{
  return r == ncclSuccess || r == ncclInProgress;
}

static gboolean
nccl_check (ncclResult_t r, LbRank * rank, const char *what, GError ** error)
{
  if (nccl_ok (r))
    return TRUE;
  g_set_error (error, LB_ERROR, LB_ERROR_DEVICE, "nccl %s%s%d: %s", what,
      rank ? " on rank " : "", rank ? rank->rank : 0, ncclGetErrorString (r));
  return FALSE;
}

static gboolean
nccl_type (LbDType dtype, ncclDataType_t * out, GError ** error)
{
  switch (dtype) {
    case LB_DTYPE_F32:
      *out = ncclFloat32;
      return TRUE;
    case LB_DTYPE_BF16:
      *out = ncclBfloat16;
      return TRUE;
    case LB_DTYPE_F16:
      *out = ncclFloat16;
      return TRUE;
    case LB_DTYPE_I32:
      *out = ncclInt32;
      return TRUE;
    case LB_DTYPE_I64:
      *out = ncclInt64;
      return TRUE;
    case LB_DTYPE_U8:
      *out = ncclUint8;
      return TRUE;
    case LB_DTYPE_F64:
      *out = ncclFloat64;
      return TRUE;
    default:
      g_set_error (error, LB_ERROR, LB_ERROR_UNSUPPORTED,
          "nccl: no data type for %s", lb_dtype_name (dtype));
      return FALSE;
  }
}

static inline cudaStream_t
stream_of (LbRank * rank)
{
  return (cudaStream_t) (rank->comm_stream ? rank->comm_stream :
      rank->stream)->native;
}

static inline ncclComm_t
comm_of (NcclState * st, LbRank * rank)
{
  return st->comms[rank->rank];
}

/* Closes the groups this rank opened, so that NCCL's per-thread group
 * state stays balanced when a grouped operation fails half way. */
static void
unwind_groups (NcclState * st, LbRank * rank)
{
  for (; st->depth[rank->rank] > 0; st->depth[rank->rank]--)
    ncclGroupEnd ();
}

/* Every call: right device on this thread, live communicator, no abort. */
static gboolean
prep (NcclState * st, LbRank * rank, GError ** error)
{
  gboolean ok = lb_rank_check_abort (rank, error);
  if (ok && st->comm_dead[rank->rank]) {
    g_set_error (error, LB_ERROR, LB_ERROR_RANK_FAILED,
        "nccl: communicator of rank %d was aborted", rank->rank);
    ok = FALSE;
  }
  ok = ok
      && lb_cuda_check (cudaSetDevice (rank->device), "cuda set device", error);
  if (!ok)
    unwind_groups (st, rank);
  return ok;
}

/* prep() for an operation on elements of @dtype, and NCCL's type of them. */
static gboolean
prep_typed (NcclState * st, LbRank * rank, LbDType dtype, ncclDataType_t * t,
    GError ** error)
{
  return prep (st, rank, error) && nccl_type (dtype, t, error);
}

/* The outcome of a ncclGroupStart, calls (first failure @r) and
 * ncclGroupEnd (@end) for the collective @what. */
static gboolean
check_grouped (ncclResult_t r, ncclResult_t end, LbRank * rank,
    const char *what, GError ** error)
{
  if (!nccl_check (r, rank, what, error))
    return FALSE;
  if (nccl_ok (end))
    return TRUE;
  g_autofree char *what_end = g_strconcat (what, " (group end)", NULL);
  return nccl_check (end, rank, what_end, error);
}

/* Aborts this rank's communicator (from its own thread); reset re-creates
 * it. */
static void
abort_comm (NcclState * st, LbRank * rank)
{
  ncclCommAbort (comm_of (st, rank));
  st->comm_dead[rank->rank] = TRUE;
}

static gboolean
init_comms (NcclState * st, GError ** error)
{
  if (!nccl_check (ncclCommInitAll (st->comms, st->n, st->devs), NULL,
          "CommInitAll", error))
    return FALSE;
  for (int i = 0; i < st->n; i++)
    st->comm_dead[i] = FALSE;
  return TRUE;
}

static void
nccl_destroy (gpointer state)
{
  NcclState *st = state;
  int prev = 0;
  cudaGetDevice (&prev);
  for (int i = 0; i < st->n; i++) {
    if (st->comms[i] != NULL && !st->comm_dead[i])
      ncclCommDestroy (st->comms[i]);
    /* through the device's pool (cached, not cudaFree: a cudaFree beside
     * another thread's graph capture would invalidate that capture) */
    if (st->barrier_buf[i] != NULL)
      lb_cuda_pool_free (st->devs[i], st->barrier_buf[i]);
  }
  cudaSetDevice (prev);
  g_free (st->devs);
  g_free (st->comms);
  g_free (st->barrier_buf);
  g_free (st->comm_dead);
  g_free (st->depth);
  g_free (st);
}

static gpointer
nccl_create (LbWorkerGroup * group, GError ** error)
{
  NcclState *st = g_new0 (NcclState, 1);
  st->group = group;
  st->n = lb_worker_group_get_n_ranks (group);
  st->devs = g_new0 (int, st->n);
  st->comms = g_new0 (ncclComm_t, st->n);
  st->barrier_buf = g_new0 (float *, st->n);
  st->comm_dead = g_new0 (gboolean, st->n);
  st->depth = g_new0 (int, st->n);
  int prev = 0;
  cudaGetDevice (&prev);
  gboolean ok = TRUE;
  for (int i = 0; i < st->n && ok; i++) {
    st->devs[i] = lb_worker_group_get_rank (group, i)->device;
    ok = lb_cuda_check (cudaSetDevice (st->devs[i]), "cuda set device", error)
        && (st->barrier_buf[i] = lb_cuda_pool_alloc (st->devs[i],
            sizeof (float), error)) != NULL;
  }
  if (ok && !init_comms (st, error)) {
    for (int i = 0; i < st->n; i++)
      st->comm_dead[i] = TRUE;  /* nothing to destroy */
    ok = FALSE;
  }
  /* the communicators' own set-up work (allocations, copies) finished on
   * every device before the group returns, and so before any rank issues
   * its first collective: the group's creation is the ranks' host barrier
   * (docs/design.md "Multi-GPU start-up") */
  for (int i = 0; i < st->n && ok; i++)
    ok = lb_cuda_check (cudaSetDevice (st->devs[i]), "cuda set device", error)
        && lb_cuda_check (cudaDeviceSynchronize (), "cuda synchronize after "
        "communicator set-up", error);
  cudaSetDevice (prev);
  if (!ok) {
    nccl_destroy (st);
    return NULL;
  }
  return st;
}

static gboolean
nccl_reset (gpointer state, GError ** error)
{
  NcclState *st = state;
  /* Ranks may have stopped at different points: no communicator is in a
   * known state any more.  Abort the live ones (destroy could wait for
   * work that never completes) and start over. */
  for (int i = 0; i < st->n; i++) {
    if (!st->comm_dead[i])
      ncclCommAbort (st->comms[i]);
    st->comm_dead[i] = TRUE;
  }
  return init_comms (st, error);
}

static void
nccl_abort (gpointer state)
{
  /* Ranks poll the group's abort flag in nccl_synchronize and abort their
   * own communicator there: ncclCommAbort must not race a thread that is
   * issuing calls on the same communicator. */
}

static gboolean
nccl_synchronize (gpointer state, LbRank * rank, GError ** error)
{
  NcclState *st = state;
  if (st->comm_dead[rank->rank])
    return prep (st, rank, error);
  gint64 deadline = lb_rank_deadline (rank);
  cudaStream_t s = stream_of (rank);
  for (guint spin = 0;; spin++) {
    cudaError_t e = cudaStreamQuery (s);
    if (e == cudaSuccess)
      return TRUE;
    if (e != cudaErrorNotReady)
      return lb_cuda_check (e, "cuda stream", error);
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError (comm_of (st, rank), &async);
    if (!nccl_ok (async)) {
      abort_comm (st, rank);
      return nccl_check (async, rank, "async error", error);
    }
    if (lb_worker_group_is_aborted (rank->group)) {
      abort_comm (st, rank);
      return lb_rank_check_abort (rank, error);
    }
    if (g_get_monotonic_time () > deadline) {
      abort_comm (st, rank);
      g_set_error (error, LB_ERROR, LB_ERROR_TIMEOUT,
          "nccl: rank %d: collectives not complete within %u ms",
          rank->rank, lb_worker_group_get_timeout_ms (rank->group));
      return FALSE;
    }
    if (spin > 1000)
      g_usleep (50);
  }
}

static gboolean
nccl_all_to_all_v (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, const gsize * send_counts, const gsize * send_displs,
    void *recv, const gsize * recv_counts, const gsize * recv_displs,
    GError ** error)
{
  NcclState *st = state;
  ncclDataType_t t;
  if (!prep_typed (st, rank, dtype, &t, error))
    return FALSE;
  gsize es = lb_dtype_size (dtype);
  ncclComm_t comm = comm_of (st, rank);
  cudaStream_t s = stream_of (rank);
  ncclResult_t r = ncclGroupStart ();
  for (int p = 0; p < st->n && r == ncclSuccess; p++) {
    if (send_counts[p] > 0)
      r = ncclSend ((const char *) send + send_displs[p] * es,
          send_counts[p], t, p, comm, s);
    if (r == ncclSuccess && recv_counts[p] > 0)
      r = ncclRecv ((char *) recv + recv_displs[p] * es, recv_counts[p], t,
          p, comm, s);
  }
  return check_grouped (r, ncclGroupEnd (), rank, "all_to_all", error);
}

/* The all-to-all-v of equal blocks of @count elements. */
static gboolean
nccl_all_to_all (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize count, GError ** error)
{
  NcclState *st = state;
  gsize *cnt = g_newa (gsize, 2 * st->n);
  for (int p = 0; p < st->n; p++) {
    cnt[p] = count;
    cnt[st->n + p] = (gsize) p *count;
  }
  return nccl_all_to_all_v (state, rank, dtype, send, cnt, cnt + st->n, recv,
      cnt, cnt + st->n, error);
}

static gboolean
nccl_all_gather (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize count, GError ** error)
{
  ncclDataType_t t;
  return prep_typed (state, rank, dtype, &t, error) &&
      nccl_check (ncclAllGather (send, recv, count, t, comm_of (state, rank),
          stream_of (rank)), rank, "all_gather", error);
}

static gboolean
nccl_all_gather_v (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, gsize send_count, void *recv, const gsize * recv_counts,
    const gsize * recv_displs, GError ** error)
{
  NcclState *st = state;
  ncclDataType_t t;
  if (!prep_typed (st, rank, dtype, &t, error))
    return FALSE;
  gsize es = lb_dtype_size (dtype);
  ncclResult_t r = ncclGroupStart ();
  for (int p = 0; p < st->n && r == ncclSuccess; p++) {
    if (recv_counts[p] == 0)
      continue;
    r = ncclBroadcast (p == rank->rank ? send : NULL,
        (char *) recv + recv_displs[p] * es, recv_counts[p], t, p,
        comm_of (st, rank), stream_of (rank));
  }
  return check_grouped (r, ncclGroupEnd (), rank, "all_gather_v", error);
}

static gboolean
nccl_reduce_scatter (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize recv_count, LbReduceOp op,
    GError ** error)
{
  ncclDataType_t t;
  return prep_typed (state, rank, dtype, &t, error) &&
      nccl_check (ncclReduceScatter (send, recv, recv_count, t, ncclSum,
          comm_of (state, rank), stream_of (rank)), rank, "reduce_scatter",
      error);
}

static gboolean
nccl_all_reduce (gpointer state, LbRank * rank, LbDType dtype,
    const void *send, void *recv, gsize count, LbReduceOp op, GError ** error)
{
  ncclDataType_t t;
  return prep_typed (state, rank, dtype, &t, error) &&
      nccl_check (ncclAllReduce (send, recv, count, t, ncclSum, comm_of (state,
              rank), stream_of (rank)), rank, "all_reduce", error);
}

static gboolean
nccl_broadcast (gpointer state, LbRank * rank, LbDType dtype, void *buf,
    gsize count, int root, GError ** error)
{
  ncclDataType_t t;
  return prep_typed (state, rank, dtype, &t, error) &&
      nccl_check (ncclBroadcast (buf, buf, count, t, root, comm_of (state,
              rank), stream_of (rank)), rank, "broadcast", error);
}

static gboolean
nccl_send (gpointer state, LbRank * rank, LbDType dtype, const void *buf,
    gsize count, int peer, GError ** error)
{
  ncclDataType_t t;
  return prep_typed (state, rank, dtype, &t, error) &&
      nccl_check (ncclSend (buf, count, t, peer, comm_of (state, rank),
          stream_of (rank)), rank, "send", error);
}

static gboolean
nccl_recv (gpointer state, LbRank * rank, LbDType dtype, void *buf,
    gsize count, int peer, GError ** error)
{
  ncclDataType_t t;
  return prep_typed (state, rank, dtype, &t, error) &&
      nccl_check (ncclRecv (buf, count, t, peer, comm_of (state, rank),
          stream_of (rank)), rank, "recv", error);
}

static gboolean
nccl_barrier (gpointer state, LbRank * rank, GError ** error)
{
  NcclState *st = state;
  if (!prep (st, rank, error))
    return FALSE;
  float *b = st->barrier_buf[rank->rank];
  if (!nccl_check (ncclAllReduce (b, b, 1, ncclFloat32, ncclSum,
              comm_of (st, rank), stream_of (rank)), rank, "barrier", error))
    return FALSE;
  return nccl_synchronize (state, rank, error);
}

static gboolean
nccl_group_start (gpointer state, LbRank * rank, GError ** error)
{
  NcclState *st = state;
  if (!prep (st, rank, error))
    return FALSE;
  if (!nccl_check (ncclGroupStart (), rank, "group start", error))
    return FALSE;
  st->depth[rank->rank]++;
  return TRUE;
}

static gboolean
nccl_group_end (gpointer state, LbRank * rank, GError ** error)
{
  NcclState *st = state;
  if (st->depth[rank->rank] == 0) {
    /* Already unwound by a failed operation inside the group. */
    if (!lb_rank_check_abort (rank, error))
      return FALSE;
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "nccl: group_end without group_start on rank %d", rank->rank);
    return FALSE;
  }
  st->depth[rank->rank]--;
  ncclResult_t r = ncclGroupEnd ();
  if (!lb_rank_check_abort (rank, error)) {
    unwind_groups (st, rank);
    return FALSE;
  }
  return nccl_check (r, rank, "group end", error);
}

static const LbCollectivesClass nccl_class = {
  .name = "nccl",
  LB_COLLECTIVES_OPS (nccl),
  .stream_ordered = TRUE,
};

G_MODULE_EXPORT const LbCollectivesClass *lb_collectives_nccl (GError ** error);

/**
 * lb_collectives_nccl:
 * @error: %LB_ERROR_UNSUPPORTED "NCCL is not available (...)" when
 *   libnccl.so.<NCCL_MAJOR> (or $LINGBOT_NCCL_LIBRARY) or one of its
 *   functions is missing
 *
 * The NCCL implementation of #LbCollectivesClass, for CUDA worker groups
 * in one process: a module export (%LB_COLLECTIVES_NCCL_PROC, an
 * #LbCollectivesProc) that loads NCCL on first use.  The registry
 * registers it with lb_collectives_register (%LB_DEVICE_CUDA, ...) after
 * the module's init succeeded.
 *
 * Returns: (transfer none) (nullable): the class, %NULL without NCCL.
 */
const LbCollectivesClass *
lb_collectives_nccl (GError ** error)
{
  return nccl_load (error) ? &nccl_class : NULL;
}

G_MODULE_EXPORT gboolean lingbot_backend_cuda_nccl_available (GError ** error);

/**
 * lingbot_backend_cuda_nccl_available:
 * @error: as lb_collectives_nccl()
 *
 * Whether the module found NCCL (module export, for tests and tools; needs
 * no GPU).
 *
 * Returns: %TRUE when NCCL is loaded.
 */
gboolean
lingbot_backend_cuda_nccl_available (GError ** error)
{
  return nccl_load (error);
}

/* lingbot-gst: an emulated device backend for tests (no GPU needed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * "fakedev" says it drives CUDA devices but keeps its memory in host
 * allocations it tracks.  Its copy refuses a transfer whose kind does not
 * match where the pointers live (a host pointer in a device-to-device
 * copy, a device pointer read as host memory, overlapping device copies),
 * its ops refuse any tensor that is not one of its device tensors (every
 * byte a view can reach, in its own dtype's size, must lie in one device
 * allocation: a bf16 KV cache's views are checked as bf16) and then run
 * the CPU kernels, and fresh device memory is filled with NaN so a
 * buffer the caller forgets to write shows.  With no CUDA module loaded its
 * worker groups use the local collectives, which move device bytes with
 * the backend's copy.
 *
 * So code run on fakedev takes exactly the path a CUDA rank takes (weights
 * uploaded, buffers from lb_tensor_new_on(), every copy through the
 * backend, host reads through lb_tensor_download()) and, the kernels being
 * the CPU's, must reproduce the CPU backend bit for bit.  What it cannot
 * check is the CUDA kernels themselves (suite gpu) and NCCL.
 */
#include <execinfo.h>
#include <stdlib.h>
#include <string.h>

#include "fakedev.h"
#include "op-call.h"
#include "kernels/error.h"
#include "kernels/ops-check.h"

typedef struct
{
  GMutex lock;
  GHashTable *blocks;           /* ptr -> size */
  gint bad;
  gint n_h2d, n_d2h, n_d2d, n_ops;
  gint n_captures, n_launches, n_waits;
  gint n_records, n_syncs, n_host_blocks;
  gint n_convs_fp32, n_convs_bf16;
  gint n_gemm_bf16_x, n_attention_bf16_q, n_attention_bf16_out;
  gint n_gemm_fp8, n_gemm_fp8_q, n_norm_fp8;
  gint n_gemm_fp8_gelu_q, n_gelu_tanh;
  gint n_reserves;
  gsize reserve_scratch, reserve_workspace;     /* the largest asked */
  gint n_conv_bf16_x, n_norm_bf16_y;
  gint conv_input_bf16;         /* fakedev_set_conv_input_bf16() */
  GHashTable *host;             /* host_alloc blocks: ptr -> size */
  gint n_allocs, n_h2d_pinned, n_d2h_pinned;
  gint fail_graph_end;          /* fakedev_fail_graph_end() */
  gint n_capture_fails;
  GPtrArray *captures;          /* FakeStream *, capturing */
  FakeDevCaptureMode capture_mode;      /* fakedev_set_capture_mode() */
  gint n_capture_unsupported;
  GHashTable *attn_prepared;    /* attention_prepare keys (strings) */
  gint n_attn_prepares, n_attn_unprepared;
  guint64 n_capture_ids;        /* captures begun (their numbers) */
  gint n_capture_joins;
} FakeDev;


/* ------------------------------------------------------------------------ */
/* the stream-ordering checker (docs/design.md "The stream model")         */
/* ------------------------------------------------------------------------ */

/* fakedev runs every op and copy when it is enqueued, so on its own it
 * cannot show a missing event wait: the bytes are always there.  The
 * checker replays the ordering a GPU would give.  Every stream is an agent
 * with a vector clock; each op or copy ticks its stream's own component
 * and records, for every byte range of a device allocation (or host_alloc
 * block) it touches, the (stream, clock) it ran at.  event_record copies
 * the stream's clock into the event, stream_wait_event merges it into the
 * waiting stream, stream_synchronize merges the stream into the host's
 * clock, and every enqueue merges the host's clock into its stream (work
 * enqueued after the host saw a stream finish runs after it).  An access
 * is ordered after an earlier one of stream b at clock c when its clock's
 * component b is at least c; a conflicting pair (either writes) that is
 * not ordered is refused with both accesses named.
 *
 * The host is one agent for every thread: host threads are assumed to
 * order themselves correctly (the sanitizer suite's job), so a
 * synchronisation on one thread orders what any thread enqueues after it.
 * A freed block's history is dropped: the CUDA pool (cuda-alloc.c) fences
 * every stream of the device before it hands the memory out again. */

typedef struct
{
  guint32 *c;                   /* [n], component per agent */
  guint n;
} Clock;

/* A recorded call's op: an OpId (op-call.h), a device copy, or an event
 * record or wait between the streams of a capture (FakeCall.ev). */
#define FOP_RAW_COPY OP_COUNT
#define FOP_RECORD (OP_COUNT + 1)
#define FOP_WAIT (OP_COUNT + 2)

/* A recorded call (graph capture): tensor descriptors by value, with
 * arguments that were the same pointer mapped to the same copy. */
typedef struct
{
  int op;                       /* OpId, or FOP_RAW_COPY */
  int n;
  LbTensor t[OP_CALL_MAX_TENSORS];
  const LbTensor *orig[OP_CALL_MAX_TENSORS];    /* while recording only */
  int idx[OP_CALL_MAX_TENSORS]; /* tensor argument k -> t[idx[k]], or -1 */
  float f[OP_CALL_MAX_FLOATS];
  int64_t i[OP_CALL_MAX_INTS];
  void *dst;                    /* FOP_RAW_COPY */
  const void *src;
  gsize nbytes;
  int branch;                   /* 0: the capturing stream, k: its k-th joined */
  int ev;                       /* FOP_RECORD / FOP_WAIT: the capture's event */
} FakeCall;

typedef struct _FakeStream FakeStream;

struct _FakeStream
{
  gboolean capturing;           /* began a capture, or joined one */
  GArray *calls;                /* FakeCall, while capturing (the origin's) */
  /* a capture across streams, as CUDA makes one: a stream that waits on an
   * event recorded in a capture joins it (its calls go to the origin's
   * list, tagged with its branch) until the capture ends; the threads
   * enqueueing on the streams of one capture must not do so at the same
   * time (the DiT's rank thread enqueues on both) */
  FakeStream *join;             /* joined: the stream that began it */
  int branch;                   /* joined: its branch number (1, 2, ...) */
  GPtrArray *branches;          /* origin: FakeStream *, branch k at k - 1 */
  guint64 capture_id;           /* origin: this capture's number */
  int n_events;                 /* origin: event records captured so far */
  FakeDevCaptureMode capture_mode;      /* while capturing */
  GThread *capture_thread;      /* the thread that began the capture */
  gboolean invalidated;         /* a call the capture mode forbids was made */
  guint agent;                  /* the ordering checker's: its index */
  Clock clock;                  /* its vector clock */
  guint64 host_seen;            /* order.host_version merged last */
  /* asynchronous execution (FAKEDEV_ASYNC=1): the rest under async.lock */
  GAsyncQueue *q;               /* Job *, NULL when the stream runs at once */
  GThread *worker;
  GRand *rand;                  /* the worker's delays */
  guint max_delay_us;
  guint64 queued, done;         /* jobs pushed, jobs finished */
  gboolean held;                /* fakedev_hold_stream() */
  GError *sticky;               /* the first queued call that failed */
};

/* A graph captured across @n_branches + 1 streams replays each joined
 * stream's calls on a stream of its own (@bs, made on first launch), its
 * events (@ev) recorded and waited for between them as captured: so the
 * checker and the asynchronous workers see the graph's branches as CUDA
 * runs them, concurrent but for the captured waits. */
struct _LbGraph
{
  GArray *calls;
  int n_branches, n_events;
  LbStream **bs;
  LbEvent **ev;
};

static FakeDev fake;

/**
 * fakedev_is_device:
 * @p: an address
 * @n: bytes from @p
 *
 * Returns: whether [p, p + n) lies inside one live fakedev allocation.
 */
gboolean
fakedev_is_device (const void *p, gsize n)
{
  gboolean found = FALSE;
  GHashTableIter it;
  gpointer k, v;
  g_mutex_lock (&fake.lock);
  g_hash_table_iter_init (&it, fake.blocks);
  while (!found && g_hash_table_iter_next (&it, &k, &v)) {
    const guint8 *b = k;
    gsize size = GPOINTER_TO_SIZE (v);
    found = (const guint8 *) p >= b && (const guint8 *) p + n <= b + size;
  }
  g_mutex_unlock (&fake.lock);
  return found;
}

static gboolean refuse (GError ** error, const char *format, ...)
    G_GNUC_PRINTF (2, 3);

static gboolean
refuse (GError ** error, const char *format, ...)
{
  va_list ap;
  va_start (ap, format);
  g_autofree char *msg = g_strdup_vprintf (format, ap);
  va_end (ap);
  g_atomic_int_inc (&fake.bad);
  g_printerr ("fakedev: %s\n", msg);
  g_set_error_literal (error, LB_ERROR, LB_ERROR_DEVICE, msg);
  return FALSE;
}

typedef struct
{
  gsize lo, hi;                 /* bytes [lo, hi) of the block */
  guint agent;
  guint32 clock;
  gboolean write;
  const char *what;             /* static: op name or copy kind */
} Access;

typedef struct
{
  const guint8 *start;
  gsize size;
  gboolean pinned;              /* host_alloc block */
  int device;
  guint64 serial;
  const char *first_writer;     /* static, or NULL */
  guint first_writer_agent;
  gpointer frames[8];           /* backtrace of the allocation */
  int n_frames;
  GArray *acc;                  /* Access */
} OrderBlock;

typedef struct
{
  GMutex lock;
  gboolean off;                 /* FAKEDEV_ORDER=off */
  GTree *blocks;                /* OrderBlock * by start */
  GPtrArray *names;             /* agent -> "stream #n (fakedev:d)" */
  Clock host;                   /* what the host has seen complete */
  guint64 host_version;         /* bumped when host grows */
  guint64 serial;
  gint n_checks, n_violations;
  int skip_device;              /* fakedev_skip_waits() */
  gint skip_waits;
} Order;

static Order order;

static guint32
clock_get (const Clock * k, guint agent)
{
  return agent < k->n ? k->c[agent] : 0;
}

static void
clock_grow (Clock * k, guint n)
{
  if (n <= k->n)
    return;
  k->c = g_renew (guint32, k->c, n);
  memset (k->c + k->n, 0, (n - k->n) * sizeof (guint32));
  k->n = n;
}

/* @dst = max (@dst, @src), componentwise; whether @dst grew */
static gboolean
clock_merge (Clock * dst, const Clock * src)
{
  gboolean grew = FALSE;
  clock_grow (dst, src->n);
  for (guint i = 0; i < src->n; i++)
    if (src->c[i] > dst->c[i]) {
      dst->c[i] = src->c[i];
      grew = TRUE;
    }
  return grew;
}

static void
clock_set (Clock * dst, const Clock * src)
{
  clock_grow (dst, src->n);
  memcpy (dst->c, src->c, src->n * sizeof (guint32));
  if (dst->n > src->n)
    memset (dst->c + src->n, 0, (dst->n - src->n) * sizeof (guint32));
}

static void
clock_clear (Clock * k)
{
  g_clear_pointer (&k->c, g_free);
  k->n = 0;
}

static gint
block_cmp (gconstpointer a, gconstpointer b, gpointer user_data)
{
  (void) user_data;
  const guint8 *x = ((const OrderBlock *) a)->start;
  const guint8 *y = ((const OrderBlock *) b)->start;
  return x < y ? -1 : x > y;
}

/* g_tree_search(): 0 when @addr lies in the block */
static gint
block_find (gconstpointer key, gconstpointer addr)
{
  const OrderBlock *b = key;
  const guint8 *p = addr;
  if (p < b->start)
    return -1;                  /* look among smaller starts */
  if (p >= b->start + MAX (b->size, 1))
    return 1;
  return 0;
}

static void
block_free (gpointer data)
{
  OrderBlock *b = data;
  g_array_free (b->acc, TRUE);
  g_free (b);
}

static void
order_init (void)
{
  g_mutex_init (&order.lock);
  order.off = g_strcmp0 (g_getenv ("FAKEDEV_ORDER"), "off") == 0;
  order.blocks = g_tree_new_full (block_cmp, NULL, block_free, NULL);
  order.names = g_ptr_array_new_with_free_func (g_free);
}

/* A new allocation (device or host_alloc) starts without history. */
static void
order_block_add (const void *p, gsize size, gboolean pinned, int device)
{
  if (order.off)
    return;
  OrderBlock *b = g_new0 (OrderBlock, 1);
  b->start = p;
  b->size = size;
  b->pinned = pinned;
  b->device = device;
  b->acc = g_array_new (FALSE, FALSE, sizeof (Access));
  b->n_frames = backtrace (b->frames, G_N_ELEMENTS (b->frames));
  g_mutex_lock (&order.lock);
  b->serial = ++order.serial;
  g_tree_replace (order.blocks, b, b);
  g_mutex_unlock (&order.lock);
}

static void
order_block_remove (const void *p)
{
  if (order.off)
    return;
  OrderBlock key = {.start = p };
  g_mutex_lock (&order.lock);
  g_tree_remove (order.blocks, &key);
  g_mutex_unlock (&order.lock);
}

/* A stream's agent: its name is kept for messages after it is freed. */
static guint
order_agent_new (int device)
{
  g_mutex_lock (&order.lock);
  guint agent = order.names->len;
  g_ptr_array_add (order.names, g_strdup_printf ("stream #%u (fakedev:%d)",
          agent, device));
  g_mutex_unlock (&order.lock);
  return agent;
}

static const char *
agent_name (guint agent)
{
  return g_ptr_array_index (order.names, agent);
}

/* The frames of an allocation's backtrace outside fakedev and the tensor
 * allocator, as "f < g < h" (callee first). */
static char *
block_origin (const OrderBlock * b)
{
  GString *s = g_string_new (NULL);
  char **sym = backtrace_symbols ((void *const *) b->frames, b->n_frames);
  int shown = 0;
  for (int i = 0; sym != NULL && i < b->n_frames && shown < 3; i++) {
    if (strstr (sym[i], "fake_") || strstr (sym[i], "order_") ||
        strstr (sym[i], "lb_tensor_new") || strstr (sym[i], "(+0x") ||
        strstr (sym[i], "libglib") || strstr (sym[i], "libc.so"))
      continue;
    const char *open = strchr (sym[i], '(');
    const char *plus = open ? strchr (open, '+') : NULL;
    if (open == NULL || plus == NULL || plus == open + 1)
      continue;
    g_string_append_printf (s, "%s%.*s", shown ? " < " : "",
        (int) (plus - open - 1), open + 1);
    shown++;
  }
  free (sym);
  if (shown == 0)
    g_string_append (s, "an unnamed caller");
  return g_string_free (s, FALSE);
}

static char *
block_name (const OrderBlock * b)
{
  g_autofree char *origin = block_origin (b);
  g_autofree char *first = b->first_writer == NULL ? g_strdup ("") :
      g_strdup_printf (", first written by %s on %s", b->first_writer,
      agent_name (b->first_writer_agent));
  if (b->pinned)
    return g_strdup_printf ("host_alloc block #%" G_GUINT64_FORMAT
        " (%" G_GSIZE_FORMAT " bytes, made by %s%s)", b->serial, b->size,
        origin, first);
  return g_strdup_printf ("allocation #%" G_GUINT64_FORMAT " (%"
      G_GSIZE_FORMAT " bytes on fakedev:%d, made by %s%s)", b->serial,
      b->size, b->device, origin, first);
}

/* One access of stream @agent (clock @now, already ticked) to [p, p + n):
 * refused when it is not ordered after a conflicting earlier access;
 * recorded otherwise.  Called with order.lock held.  Memory that is
 * neither a device allocation nor a host_alloc block is not followed
 * (pageable host memory: its reuse is the host's business). */
static gboolean
order_access_locked (guint agent, const Clock * now, const void *p, gsize n,
    gboolean write, const char *what, GError ** error)
{
  if (n == 0)
    return TRUE;
  OrderBlock *b = g_tree_search (order.blocks, block_find, p);
  if (b == NULL)
    return TRUE;
  order.n_checks++;
  const gsize lo = (gsize) ((const guint8 *) p - b->start);
  const gsize hi = MIN (lo + n, b->size);
  GArray *acc = b->acc;
  for (guint i = acc->len; i-- > 0;) {
    Access *r = &g_array_index (acc, Access, i);
    const gboolean before = clock_get (now, r->agent) >= r->clock;
    /* ordered before everything from now on: every enqueue merges the
     * host's clock first */
    if (clock_get (&order.host, r->agent) >= r->clock) {
      g_array_remove_index_fast (acc, i);
      continue;
    }
    if (r->hi <= lo || r->lo >= hi || before || (!r->write && !write))
      continue;
    const gboolean d2h = g_str_has_prefix (what, "D2H");
    const char *rule = r->write && write ? "write after write" :
        r->write ? (d2h ? "download after write" : "read after write") :
        "write after read";
    g_autofree char *name = block_name (b);
    order.n_violations++;
    return refuse (error, "stream order: %s in %s: %s on %s %s bytes [%"
        G_GSIZE_FORMAT ", %" G_GSIZE_FORMAT "), not ordered after %s on %s, "
        "which %s bytes [%" G_GSIZE_FORMAT ", %" G_GSIZE_FORMAT ") (no event "
        "wait or synchronisation between them)", rule, name, what,
        agent_name (agent), write ? "writes" : "reads", lo, hi, r->what,
        agent_name (r->agent), r->write ? "wrote" : "read", r->lo, r->hi);
  }
  /* what this access subsumes: ordered accesses inside its range (a later
   * access unordered with them is unordered with this one too); a read
   * subsumes only reads */
  for (guint i = acc->len; i-- > 0;) {
    Access *r = &g_array_index (acc, Access, i);
    if (r->lo >= lo && r->hi <= hi && (write || !r->write) &&
        clock_get (now, r->agent) >= r->clock)
      g_array_remove_index_fast (acc, i);
  }
  Access a = {.lo = lo,.hi = hi,.agent = agent,.clock =
        clock_get (now, agent),.write = write,.what = what
  };
  g_array_append_val (acc, a);
  if (write && b->first_writer == NULL) {
    b->first_writer = what;
    b->first_writer_agent = agent;
  }
  return TRUE;
}

/* Before stream @fs enqueues: the host's clock merged in, its own
 * component ticked.  With order.lock held. */
static void
order_enqueue_locked (FakeStream * fs)
{
  if (fs->host_seen != order.host_version) {
    clock_merge (&fs->clock, &order.host);
    fs->host_seen = order.host_version;
  }
  clock_grow (&fs->clock, fs->agent + 1);
  fs->clock.c[fs->agent]++;
}

static gboolean
order_copy (LbStream * s, void *dst, const void *src, gsize nbytes,
    LbCopyKind kind, GError ** error)
{
  static const char *const what[] = { "H2D copy", "D2H copy", "D2D copy",
    "H2H copy"
  };
  FakeStream *fs = s->priv;
  if (order.off)
    return TRUE;
  g_mutex_lock (&order.lock);
  order_enqueue_locked (fs);
  gboolean ok = order_access_locked (fs->agent, &fs->clock, src, nbytes,
      FALSE, what[kind], error) && order_access_locked (fs->agent,
      &fs->clock, dst, nbytes, TRUE, what[kind], error);
  g_mutex_unlock (&order.lock);
  return ok;
}

/* event_record: the event holds the stream's clock */
static void
order_record (LbStream * s, Clock * event)
{
  FakeStream *fs = s->priv;
  if (order.off)
    return;
  g_mutex_lock (&order.lock);
  order_enqueue_locked (fs);
  clock_set (event, &fs->clock);
  g_mutex_unlock (&order.lock);
}

/* stream_wait_event: the stream's later work is ordered after the
 * event's point (an event never recorded holds an empty clock) */
static void
order_wait (LbStream * s, const Clock * event, gboolean skip)
{
  FakeStream *fs = s->priv;
  if (order.off)
    return;
  g_mutex_lock (&order.lock);
  order_enqueue_locked (fs);
  if (!skip)
    clock_merge (&fs->clock, event);
  g_mutex_unlock (&order.lock);
}

/* whether this wait of @s is one fakedev_skip_waits() drops (counted) */
static gboolean
wait_skipped (LbStream * s)
{
  gboolean skip = FALSE;
  g_mutex_lock (&order.lock);
  if (order.skip_waits != 0 && (order.skip_device < 0 ||
          order.skip_device == s->device)) {
    skip = TRUE;
    if (order.skip_waits > 0)
      order.skip_waits--;
  }
  g_mutex_unlock (&order.lock);
  return skip;
}

/* stream_synchronize: the host has seen all the stream's work */
static void
order_sync (LbStream * s)
{
  FakeStream *fs = s->priv;
  if (order.off)
    return;
  g_mutex_lock (&order.lock);
  if (clock_merge (&order.host, &fs->clock))
    order.host_version++;
  g_mutex_unlock (&order.lock);
}

/* ------------------------------------------------------------------------ */
/* asynchronous execution (FAKEDEV_ASYNC=1, fakedev_set_async())          */
/* ------------------------------------------------------------------------ */

/* The checker above judges the order in which work is enqueued; this
 * mode makes the bytes show it too.  Each stream created while it is on
 * gets a worker thread and a queue: an op or copy is checked (residency,
 * the ordering checker) on the caller's thread when enqueued, its host
 * descriptors copied by value into a job, and run later by the worker,
 * in the stream's order, after a seeded random delay.  event_record
 * enqueues a mark that completes the event when the worker reaches it,
 * stream_wait_event makes the worker block until then, and
 * stream_synchronize blocks the host until the queue has drained.  Every
 * copy is asynchronous (LbBackend.copy: the host may read a download's
 * destination only after stream_synchronize).  A free is stream-ordered
 * as the CUDA pool's fences make it: the block leaves the device at once
 * (later enqueues refuse it) but its memory is released only when every
 * stream of the process has run the work queued before the free.  A
 * queued call that fails is printed, counted in @bad and returned by the
 * stream's next synchronisation: so an op's argument errors (ops-check.h),
 * which CUDA returns from the call, come back only from the next
 * synchronisation here, and a suite that asserts a refused op call
 * (ops-parity's refused cases) does not run in this mode. */

typedef enum
{
  JOB_CALL,                     /* an op: call.op, host descriptors in call.t */
  JOB_COPY,                     /* call.dst, call.src, call.nbytes */
  JOB_RECORD,                   /* event reached at gen */
  JOB_WAIT,                     /* block until event reached gen */
  JOB_RELEASE,                  /* one stream's share of a deferred free */
  JOB_STOP,
} JobKind;

typedef struct
{
  gint refs;                    /* streams yet to reach it, + the freer */
  gpointer ptr;
} Release;

typedef struct
{
  JobKind kind;
  FakeCall call;
  LbEvent *event;               /* a reference */
  guint64 gen;
  Release *release;
} Job;

/* Events: an event only has to exist when fakedev runs everything at
 * once (and is counted: a stream wait is where a real device would order
 * two streams); asynchronous streams complete it when they reach it. */
struct _LbEvent
{
  int device;
  Clock clock;                  /* the ordering checker's: at record */
  gint refs;                    /* the owner and queued jobs */
  guint64 recorded, reached;    /* async.lock: records enqueued, run */
  guint64 capture_id;           /* last recorded in that capture (0: not) */
  int capture_ev;               /* as that capture's event number */
};

typedef struct
{
  GMutex lock;
  GCond cond;                   /* a job finished, a stream released */
  gboolean on;
  guint32 seed;
  guint max_delay_us;
  GPtrArray *streams;           /* LbStream * with a worker */
  gint n_jobs;
} Async;

static Async async;

static void
async_init (void)
{
  g_mutex_init (&async.lock);
  g_cond_init (&async.cond);
  async.streams = g_ptr_array_new ();
  async.on = g_strcmp0 (g_getenv ("FAKEDEV_ASYNC"), "1") == 0;
  const char *seed = g_getenv ("FAKEDEV_ASYNC_SEED");
  async.seed = seed ? (guint32) g_ascii_strtoull (seed, NULL, 10) : 1;
  const char *delay = g_getenv ("FAKEDEV_ASYNC_DELAY_US");
  async.max_delay_us = delay ? (guint) g_ascii_strtoull (delay, NULL, 10) : 200;
}

static void
event_unref (LbEvent * e)
{
  if (!g_atomic_int_dec_and_test (&e->refs))
    return;
  clock_clear (&e->clock);
  g_free (e);
}

static void
release_unref (Release * r)
{
  if (!g_atomic_int_dec_and_test (&r->refs))
    return;
  g_free (r->ptr);
  g_free (r);
}

static gboolean
stream_async (LbStream * s)
{
  return ((FakeStream *) s->priv)->q != NULL;
}

static Job *
job_new (JobKind kind)
{
  Job *j = g_new0 (Job, 1);
  j->kind = kind;
  for (int k = 0; k < OP_CALL_MAX_TENSORS; k++)
    j->call.idx[k] = -1;
  return j;
}

/* With async.lock held. */
static void
job_push_locked (LbStream * s, Job * j)
{
  FakeStream *fs = s->priv;
  fs->queued++;
  g_async_queue_push (fs->q, j);
}

static gboolean
job_push (LbStream * s, Job * j)
{
  g_mutex_lock (&async.lock);
  job_push_locked (s, j);
  g_mutex_unlock (&async.lock);
  return TRUE;
}

/* Frees @ptr once every asynchronous stream has run what was queued on it
 * before now (at once when there is none). */
static void
release_deferred (gpointer ptr)
{
  Release *r = g_new0 (Release, 1);
  r->ptr = ptr;
  r->refs = 1;
  g_mutex_lock (&async.lock);
  for (guint i = 0; i < async.streams->len; i++) {
    Job *j = job_new (JOB_RELEASE);
    j->release = r;
    g_atomic_int_inc (&r->refs);
    job_push_locked (g_ptr_array_index (async.streams, i), j);
  }
  g_mutex_unlock (&async.lock);
  release_unref (r);
}

#define CPU (lb_cpu_backend ()->ops)

static void
job_run (LbStream * s, Job * j)
{
  FakeStream *fs = s->priv;
  GError *err = NULL;
  switch (j->kind) {
    case JOB_CALL:{
      OpCall call = {.op = j->call.op };
      for (int k = 0; k < OP_CALL_MAX_TENSORS; k++)
        call.t[k] = j->call.idx[k] < 0 ? NULL : &j->call.t[j->call.idx[k]];
      memcpy (call.f, j->call.f, sizeof (call.f));
      memcpy (call.i, j->call.i, sizeof (call.i));
      if (!op_call_run (CPU, s, &call, &err)) {
        g_atomic_int_inc (&fake.bad);
        g_printerr ("fakedev: queued %s failed: %s\n",
            op_info (j->call.op)->name, err->message);
        g_mutex_lock (&async.lock);
        if (fs->sticky == NULL)
          fs->sticky = g_steal_pointer (&err);
        g_mutex_unlock (&async.lock);
        g_clear_error (&err);
      }
      break;
    }
    case JOB_COPY:
      memmove (j->call.dst, j->call.src, j->call.nbytes);
      break;
    case JOB_RECORD:
      g_mutex_lock (&async.lock);
      j->event->reached = MAX (j->event->reached, j->gen);
      g_cond_broadcast (&async.cond);
      g_mutex_unlock (&async.lock);
      break;
    case JOB_WAIT:
      g_mutex_lock (&async.lock);
      while (j->event->reached < j->gen)
        g_cond_wait (&async.cond, &async.lock);
      g_mutex_unlock (&async.lock);
      break;
    case JOB_RELEASE:
      release_unref (j->release);
      break;
    case JOB_STOP:
      break;
  }
  if (j->event != NULL)
    event_unref (j->event);
}

static gpointer
worker_main (gpointer data)
{
  LbStream *s = data;
  FakeStream *fs = s->priv;
  for (;;) {
    Job *j = g_async_queue_pop (fs->q);
    const gboolean stop = j->kind == JOB_STOP;
    g_mutex_lock (&async.lock);
    while (fs->held && !stop)
      g_cond_wait (&async.cond, &async.lock);
    g_mutex_unlock (&async.lock);
    if (!stop && fs->max_delay_us > 0)
      g_usleep (g_rand_int_range (fs->rand, 0, fs->max_delay_us + 1));
    job_run (s, j);
    g_free (j);
    g_atomic_int_inc (&async.n_jobs);
    g_mutex_lock (&async.lock);
    fs->done++;
    g_cond_broadcast (&async.cond);
    g_mutex_unlock (&async.lock);
    if (stop)
      return NULL;
  }
}

/* A new stream gets its worker when the mode is on (@like %NULL), or
 * when stream @like has one. */
static void
async_stream_start (LbStream * s, LbStream * like)
{
  FakeStream *fs = s->priv;
  g_mutex_lock (&async.lock);
  if (like ? ((FakeStream *) like->priv)->q != NULL : async.on) {
    fs->q = g_async_queue_new ();
    fs->rand = g_rand_new_with_seed (async.seed ^ (fs->agent * 2654435761u));
    fs->max_delay_us = async.max_delay_us;
    g_ptr_array_add (async.streams, s);
    g_autofree char *name = g_strdup_printf ("fakedev-s%u", fs->agent);
    fs->worker = g_thread_new (name, worker_main, s);
  }
  g_mutex_unlock (&async.lock);
}

/* Blocks until the stream's queue has drained (a held stream is let go);
 * its sticky error, if any, is moved to @error. */
static gboolean
async_drain (LbStream * s, GError ** error)
{
  FakeStream *fs = s->priv;
  if (fs->q == NULL)
    return TRUE;
  g_mutex_lock (&async.lock);
  fs->held = FALSE;
  g_cond_broadcast (&async.cond);
  while (fs->done < fs->queued)
    g_cond_wait (&async.cond, &async.lock);
  GError *sticky = g_steal_pointer (&fs->sticky);
  g_mutex_unlock (&async.lock);
  if (sticky != NULL) {
    g_propagate_prefixed_error (error, sticky, "fakedev: a queued call "
        "failed: ");
    return FALSE;
  }
  return TRUE;
}

/* Drains and stops the worker (no deferred free is queued on it after). */
static void
async_stream_stop (LbStream * s)
{
  FakeStream *fs = s->priv;
  if (fs->q == NULL)
    return;
  g_mutex_lock (&async.lock);
  g_ptr_array_remove (async.streams, s);
  fs->held = FALSE;
  g_cond_broadcast (&async.cond);
  job_push_locked (s, job_new (JOB_STOP));
  g_mutex_unlock (&async.lock);
  g_thread_join (fs->worker);
  if (fs->sticky != NULL) {
    g_printerr ("fakedev: stream freed with a failed queued call: %s\n",
        fs->sticky->message);
    g_clear_error (&fs->sticky);
  }
  g_async_queue_unref (fs->q);
  g_rand_free (fs->rand);
  fs->q = NULL;
}

/**
 * fakedev_stream_queued:
 * @s: a fakedev stream
 *
 * Returns: how many jobs enqueued on @s its worker has not finished (0
 * for a stream that runs its work at once): after a function returns, a
 * copy still queued reads its host source later.
 */
guint
fakedev_stream_queued (LbStream * s)
{
  FakeStream *fs = s->priv;
  g_mutex_lock (&async.lock);
  guint n = (guint) (fs->queued - fs->done);
  g_mutex_unlock (&async.lock);
  return n;
}

/**
 * fakedev_set_async:
 * @on: whether streams created from now on run their work on a worker
 *   thread each (see the file's "asynchronous execution" section)
 * @seed: the seed of the workers' random delays (each stream's generator
 *   is seeded from it and the stream's number)
 * @max_delay_us: each queued call waits 0 to @max_delay_us microseconds,
 *   drawn from its stream's generator, before it runs
 *
 * What FAKEDEV_ASYNC=1 (with FAKEDEV_ASYNC_SEED, default 1, and
 * FAKEDEV_ASYNC_DELAY_US, default 200) sets at start.  Streams already
 * made keep their mode.  Process-wide.
 */
void
fakedev_set_async (gboolean on, guint32 seed, guint max_delay_us)
{
  fakedev_backend ();
  g_mutex_lock (&async.lock);
  async.on = on;
  async.seed = seed;
  async.max_delay_us = max_delay_us;
  g_mutex_unlock (&async.lock);
}

/**
 * fakedev_async:
 *
 * Returns: whether streams created now get a worker (fakedev_set_async(),
 * FAKEDEV_ASYNC=1).
 */
gboolean
fakedev_async (void)
{
  fakedev_backend ();
  g_mutex_lock (&async.lock);
  gboolean on = async.on;
  g_mutex_unlock (&async.lock);
  return on;
}

/**
 * fakedev_hold_stream:
 * @s: an asynchronous fakedev stream
 * @hold: %TRUE: its worker runs nothing more until called with %FALSE
 *
 * A test hook that makes an ordering deterministic: work queued on @s
 * stays queued (a stream waiting for one of its events blocks) until the
 * host releases it or synchronises @s.  No effect on a stream that runs
 * its work at once.
 */
void
fakedev_hold_stream (LbStream * s, gboolean hold)
{
  FakeStream *fs = s->priv;
  g_mutex_lock (&async.lock);
  fs->held = hold;
  g_cond_broadcast (&async.cond);
  g_mutex_unlock (&async.lock);
}

/* ---- the graph capture modes (FakeDevCaptureMode) ---- */

/* A call that CUDA forbids while a capture in global mode is under way
 * (@what: the CUDA call it stands for): refused with CUDA's error, and
 * every such capture invalidated, as CUDA does. */
static gboolean
capture_allows (const char *what, GError ** error)
{
  gboolean forbidden = FALSE;
  g_mutex_lock (&fake.lock);
  for (guint i = 0; i < fake.captures->len; i++) {
    FakeStream *c = g_ptr_array_index (fake.captures, i);
    if (c->capture_mode == FAKEDEV_CAPTURE_GLOBAL) {
      c->invalidated = TRUE;
      forbidden = TRUE;
    }
  }
  g_mutex_unlock (&fake.lock);
  if (!forbidden)
    return TRUE;
  g_atomic_int_inc (&fake.n_capture_unsupported);
  return refuse (error, "%s: operation not permitted when stream is "
      "capturing (cudaErrorStreamCaptureUnsupported)", what);
}

/* whether the calling thread began a capture still under way (the
 * backend's rule: it allocates and frees nothing meanwhile) */
static gboolean
thread_capturing (void)
{
  gboolean found = FALSE;
  GThread *self = g_thread_self ();
  g_mutex_lock (&fake.lock);
  for (guint i = 0; i < fake.captures->len && !found; i++)
    found = ((FakeStream *) g_ptr_array_index (fake.captures,
            i))->capture_thread == self;
  g_mutex_unlock (&fake.lock);
  return found;
}

/**
 * fakedev_set_capture_mode:
 * @mode: the mode of the captures graph_begin starts from now on
 *
 * %FAKEDEV_CAPTURE_RELAXED at start (the CUDA backend's mode).
 * Process-wide.
 */
void
fakedev_set_capture_mode (FakeDevCaptureMode mode)
{
  fakedev_backend ();
  g_mutex_lock (&fake.lock);
  fake.capture_mode = mode;
  g_mutex_unlock (&fake.lock);
}

static gpointer
fake_alloc (LbBackend * self, int device, gsize nbytes, GError ** error)
{
  (void) self;
  (void) device;
  if (!capture_allows ("cudaMalloc", error))
    return NULL;
  if (thread_capturing ()) {
    refuse (error, "alloc of %" G_GSIZE_FORMAT " bytes during a graph "
        "capture", nbytes);
    return NULL;
  }
  guint8 *p = g_malloc (MAX (nbytes, 1));
  memset (p, 0xff, nbytes);     /* NaN in every float */
  g_atomic_int_inc (&fake.n_allocs);
  g_mutex_lock (&fake.lock);
  g_hash_table_insert (fake.blocks, p, GSIZE_TO_POINTER (nbytes));
  g_mutex_unlock (&fake.lock);
  order_block_add (p, nbytes, FALSE, device);
  return p;
}

static void
fake_free (LbBackend * self, int device, gpointer ptr)
{
  (void) self;
  (void) device;
  /* LbBackend.free cannot fail: the refusal is counted and printed, the
   * block freed all the same */
  if (capture_allows ("cudaFree", NULL) && thread_capturing ())
    refuse (NULL, "free of %p during a graph capture", ptr);
  g_mutex_lock (&fake.lock);
  gboolean known = g_hash_table_remove (fake.blocks, ptr);
  g_mutex_unlock (&fake.lock);
  if (!known)
    refuse (NULL, "free of %p, not a device allocation", ptr);
  else
    order_block_remove (ptr);
  if (known)
    release_deferred (ptr);
  else
    g_free (ptr);
}

/* [p, p + n) lies inside one live host_alloc block */
static gboolean
is_pinned (const void *p, gsize n)
{
  gboolean found = FALSE;
  GHashTableIter it;
  gpointer k, v;
  g_mutex_lock (&fake.lock);
  g_hash_table_iter_init (&it, fake.host);
  while (!found && g_hash_table_iter_next (&it, &k, &v)) {
    const guint8 *b = k;
    found = (const guint8 *) p >= b &&
        (const guint8 *) p + n <= b + GPOINTER_TO_SIZE (v);
  }
  g_mutex_unlock (&fake.lock);
  return found;
}

static FakeCall *rec_call (LbStream * s, int op);

static gboolean
fake_copy (LbStream * s, void *dst, const void *src, gsize nbytes,
    LbCopyKind kind, GError ** error)
{
  FakeStream *fs = s->priv;
  if (fs->capturing) {
    if (kind != LB_COPY_DEVICE_TO_DEVICE)
      return refuse (error, "%s copy during a graph capture (only device "
          "copies can be captured)", kind == LB_COPY_HOST_TO_DEVICE ? "H2D" :
          kind == LB_COPY_DEVICE_TO_HOST ? "D2H" : "H2H");
    FakeCall *c = rec_call (s, FOP_RAW_COPY);
    c->dst = dst;
    c->src = src;
    c->nbytes = nbytes;
    return TRUE;
  }
  const gboolean dd = fakedev_is_device (dst, nbytes);
  const gboolean sd = fakedev_is_device (src, nbytes);
  static const char *const names[] = { "H2D", "D2H", "D2D", "H2H" };
  const gboolean want_dd = kind == LB_COPY_HOST_TO_DEVICE ||
      kind == LB_COPY_DEVICE_TO_DEVICE;
  const gboolean want_sd = kind == LB_COPY_DEVICE_TO_HOST ||
      kind == LB_COPY_DEVICE_TO_DEVICE;
  if (dd != want_dd || sd != want_sd)
    return refuse (error, "%s copy of %" G_GSIZE_FORMAT " bytes with the "
        "destination on the %s and the source on the %s", names[kind], nbytes,
        dd ? "device" : "host", sd ? "device" : "host");
  if (kind == LB_COPY_DEVICE_TO_DEVICE && nbytes > 0 &&
      (const guint8 *) dst < (const guint8 *) src + nbytes &&
      (const guint8 *) src < (const guint8 *) dst + nbytes && dst != src)
    return refuse (error, "overlapping D2D copy of %" G_GSIZE_FORMAT " bytes",
        nbytes);
  g_atomic_int_inc (kind == LB_COPY_HOST_TO_DEVICE ? &fake.n_h2d :
      kind == LB_COPY_DEVICE_TO_HOST ? &fake.n_d2h : &fake.n_d2d);
  if (kind == LB_COPY_HOST_TO_DEVICE && is_pinned (src, nbytes))
    g_atomic_int_inc (&fake.n_h2d_pinned);
  if (kind == LB_COPY_DEVICE_TO_HOST && is_pinned (dst, nbytes))
    g_atomic_int_inc (&fake.n_d2h_pinned);
  if (!order_copy (s, dst, src, nbytes, kind, error))
    return FALSE;
  if (stream_async (s)) {
    Job *j = job_new (JOB_COPY);
    j->call.dst = dst;
    j->call.src = src;
    j->call.nbytes = nbytes;
    return job_push (s, j);
  }
  memmove (dst, src, nbytes);
  return TRUE;
}

/* Every stream that joined @origin's capture leaves it.  With fake.lock
 * held. */
static void
capture_release_branches (FakeStream * origin)
{
  for (guint i = 0; origin->branches && i < origin->branches->len; i++) {
    FakeStream *b = g_ptr_array_index (origin->branches, i);
    if (b == NULL)
      continue;
    b->capturing = FALSE;
    b->join = NULL;
    b->branch = 0;
    b->calls = NULL;
  }
  g_clear_pointer (&origin->branches, g_ptr_array_unref);
}

/* A stream of @device, asynchronous when @like is (any stream: the mode
 * now). */
static LbStream *
stream_new_like (LbBackend * self, int device, LbStream * like)
{
  LbStream *s = g_new0 (LbStream, 1);
  s->backend = self;
  s->device = device;
  FakeStream *fs = g_new0 (FakeStream, 1);
  s->priv = fs;
  fs->agent = order_agent_new (device);
  async_stream_start (s, like);
  return s;
}

static LbStream *
fake_stream_new (LbBackend * self, int device, GError ** error)
{
  (void) error;
  return stream_new_like (self, device, NULL);
}

static void
fake_stream_free (LbStream * s)
{
  FakeStream *fs = s->priv;
  async_stream_stop (s);
  if (fs->capturing) {
    g_mutex_lock (&fake.lock);
    if (fs->join != NULL) {
      /* a joined stream freed: the capture cannot be joined back */
      fs->join->invalidated = TRUE;
      g_ptr_array_index (fs->join->branches, fs->branch - 1) = NULL;
    } else {
      g_ptr_array_remove (fake.captures, fs);
      capture_release_branches (fs);
    }
    g_mutex_unlock (&fake.lock);
    if (fs->join == NULL)
      g_array_free (fs->calls, TRUE);
  }
  clock_clear (&fs->clock);
  g_free (fs);
  g_free (s);
}

static gboolean
fake_stream_synchronize (LbStream * s, GError ** error)
{
  FakeStream *fs = s->priv;
  if (fs->capturing)
    return refuse (error, "stream synchronize during a graph capture");
  if (!capture_allows ("cudaStreamSynchronize", error))
    return FALSE;
  g_atomic_int_inc (&fake.n_syncs);
  order_sync (s);
  return async_drain (s, error);
}

/* What an attention call's plan depends on (CUDA: the cuDNN SDPA plan
 * key): its device, shape, the operands' dtypes and strides. */
static char *
attn_key (int device, const LbTensor * q, const LbTensor * k,
    const LbTensor * out)
{
  return g_strdup_printf ("%d:%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT ",%"
      G_GINT64_FORMAT ",%" G_GINT64_FORMAT ":%d%d%d:%" G_GINT64_FORMAT ",%"
      G_GINT64_FORMAT ",%" G_GINT64_FORMAT ",%" G_GINT64_FORMAT ",%"
      G_GINT64_FORMAT ",%" G_GINT64_FORMAT, device, q->shape[0], k->shape[0],
      q->shape[1], q->shape[2], q->dtype, k->dtype, out->dtype, q->stride[0],
      q->stride[1], k->stride[0], k->stride[1], out->stride[0], out->stride[1]);
}

/* An attention call (no bias, no mask) whose key no attention_prepare saw
 * is counted (FakeDevStats.n_attention_unprepared). */
static void
count_attention_prepared (LbStream * s, const LbTensor * q, const LbTensor * k,
    const LbTensor * out)
{
  g_autofree char *key = attn_key (s->device, q, k, out);
  g_mutex_lock (&fake.lock);
  if (fake.attn_prepared == NULL ||
      !g_hash_table_contains (fake.attn_prepared, key))
    fake.n_attn_unprepared++;
  g_mutex_unlock (&fake.lock);
}

/* LbBackend.attention_prepare: remembers the call's key and answers as a
 * CUDA rank in LB_MATH_BF16 or FP8 would with cuDNN (head dims 64 and
 * 128): bf16 conversion scratch for the f32 operands (q and out [Nq, H,
 * hd], k and v [Nk, H, hd], each 256-byte aligned), and, as a stand-in for
 * the plan's workspace, 4 bytes per query row and head; 0 and 0 in
 * LB_MATH_FP32 (the own kernel).  Refused during a capture. */
static gboolean
fake_attention_prepare (LbStream * s, const LbTensor * q, const LbTensor * k,
    const LbTensor * v, const LbTensor * out, gsize * scratch,
    gsize * workspace, GError ** error)
{
  FakeStream *fs = s->priv;
  *scratch = 0;
  *workspace = 0;
  if (fs->capturing)
    return refuse (error, "attention prepare during a graph capture");
  if (!lb_check_attention (q, k, v, NULL, NULL, out, error))
    return FALSE;
  g_autofree char *key = attn_key (s->device, q, k, out);
  g_mutex_lock (&fake.lock);
  if (fake.attn_prepared == NULL)
    fake.attn_prepared = g_hash_table_new_full (g_str_hash, g_str_equal,
        g_free, NULL);
  g_hash_table_add (fake.attn_prepared, g_steal_pointer (&key));
  fake.n_attn_prepares++;
  g_mutex_unlock (&fake.lock);
  const int64_t nq = q->shape[0], nk = k->shape[0], nh = q->shape[1],
      hd = q->shape[2];
  if (s->math == LB_MATH_FP32 || (hd != 64 && hd != 128) || nq == 0 || nk == 0)
    return TRUE;
#define BF16_BLOCK(n) ((((gsize) (n) * 2) + 255) & ~(gsize) 255)
  *scratch = (q->dtype == LB_DTYPE_BF16 ? 0 : BF16_BLOCK (nq * nh * hd)) +
      (out->dtype == LB_DTYPE_BF16 ? 0 : BF16_BLOCK (nq * nh * hd)) +
      (k->dtype == LB_DTYPE_BF16 ? 0 : 2 * BF16_BLOCK (nk * nh * hd));
#undef BF16_BLOCK
  *workspace = (gsize) (nq * nh) * 4;
  return TRUE;
}

/* LbBackend.stream_reserve: fakedev's ops take no device scratch, so it
 * only counts the calls and keeps the largest sizes asked
 * (FakeDevStats.n_reserves); refused during a capture. */
static gboolean
fake_stream_reserve (LbStream * s, gsize scratch_bytes, gsize workspace_bytes,
    GError ** error)
{
  FakeStream *fs = s->priv;
  if (fs->capturing)
    return refuse (error, "stream reserve during a graph capture");
  g_mutex_lock (&fake.lock);
  fake.n_reserves++;
  fake.reserve_scratch = MAX (fake.reserve_scratch, scratch_bytes);
  fake.reserve_workspace = MAX (fake.reserve_workspace, workspace_bytes);
  g_mutex_unlock (&fake.lock);
  return TRUE;
}

static gboolean
stream_capturing (LbStream * s)
{
  return ((FakeStream *) s->priv)->capturing;
}

/* The stream whose capture @fs takes part in (itself, or the one it
 * joined). */
static FakeStream *
capture_origin (FakeStream * fs)
{
  return fs->join ? fs->join : fs;
}

/* A call of capturing stream @s appended to its capture's list, tagged
 * with its branch. */
static FakeCall *
rec_call (LbStream * s, int op)
{
  FakeStream *fs = s->priv;
  GArray *calls = capture_origin (fs)->calls;
  FakeCall c = { 0 };
  c.op = op;
  c.branch = fs->branch;
  for (int k = 0; k < OP_CALL_MAX_TENSORS; k++)
    c.idx[k] = -1;
  g_array_append_val (calls, c);
  return &g_array_index (calls, FakeCall, calls->len - 1);
}

static void
rec_tensor (FakeCall * c, int k, const LbTensor * t)
{
  if (t == NULL)
    return;
  for (int j = 0; j < c->n; j++)
    if (c->orig[j] == t) {
      c->idx[k] = j;
      return;
    }
  c->orig[c->n] = t;
  c->t[c->n] = *t;
  c->t[c->n].storage = NULL;    /* a borrowed view: the graph owns nothing */
  c->idx[k] = c->n++;
}

#define RT(k) (c->idx[k] < 0 ? NULL : &c->t[c->idx[k]])

/* ------------------------------------------------------------------------ */
/* ops: check residency, then the CPU kernel on host-labelled descriptors   */
/* ------------------------------------------------------------------------ */

/* Up to OP_CALL_MAX_TENSORS tensor arguments per op; an argument whose pointer equals an
 * earlier one maps to the same host descriptor (in-place calls stay
 * in-place for the CPU kernel's aliasing checks). */
typedef struct
{
  LbStream *s;
  const char *op;
  gboolean ok;
  int n;
  const LbTensor *orig[OP_CALL_MAX_TENSORS];
  LbTensor host[OP_CALL_MAX_TENSORS];
  gboolean written[OP_CALL_MAX_TENSORS];        /* an OUT argument (the ordering checker) */
} Args;

/* The bytes a view can touch: from its lowest to its highest element,
 * in its dtype's size (a bf16 view spans half the bytes of an f32 one of
 * the same shape and strides).  An empty view touches nothing. */
static void
view_span (const LbTensor * t, const guint8 ** start, gsize * nbytes)
{
  int64_t lo = 0, hi = 0;
  gboolean empty = FALSE;
  for (int d = 0; d < t->ndim; d++) {
    if (t->shape[d] == 0)
      empty = TRUE;
    const int64_t far = (t->shape[d] - 1) * t->stride[d];
    if (far < 0)
      lo += far;
    else
      hi += far;
  }
  const int64_t es = (int64_t) lb_dtype_size (t->dtype);
  *start = (const guint8 *) t->data + lo * es;
  *nbytes = empty ? 0 : (gsize) ((hi - lo + 1) * es);
}

static LbTensor *
arg (Args * a, const LbTensor * t)
{
  if (t == NULL)
    return NULL;
  for (int i = 0; i < a->n; i++)
    if (a->orig[i] == t)
      return &a->host[i];
  g_assert (a->n < OP_CALL_MAX_TENSORS);
  const guint8 *span;
  gsize span_bytes;
  view_span (t, &span, &span_bytes);
  if (t->device.type != LB_DEVICE_CUDA || t->device.index != a->s->device ||
      !fakedev_is_device (t->data, 0)) {
    refuse (NULL, "%s: an argument on %s:%d at %p is not a tensor of "
        "fakedev:%d", a->op, t->device.type == LB_DEVICE_CPU ? "cpu" : "cuda",
        t->device.index, t->data, a->s->device);
    a->ok = FALSE;
  } else if (!fakedev_is_device (span, span_bytes)) {
    g_autofree char *shape = lb_tensor_shape_string (t);
    refuse (NULL, "%s: a %s %s view at %p spans %" G_GSIZE_FORMAT " bytes "
        "that are not inside one fakedev:%d allocation", a->op,
        lb_dtype_name (t->dtype), shape, t->data, span_bytes, a->s->device);
    a->ok = FALSE;
  }
  LbTensor *h = &a->host[a->n];
  a->orig[a->n++] = t;
  *h = *t;
  h->device = LB_DEVICE_HOST;
  h->storage = NULL;
  return h;
}

/* arg() of an OUT argument: written (an in-place op's tensor too) */
static LbTensor *
arg_out (Args * a, const LbTensor * t)
{
  LbTensor *h = arg (a, t);
  if (h != NULL)
    a->written[h - a->host] = TRUE;
  return h;
}

/* The ordering checker's view of an op: one tick of its stream, each
 * tensor argument's span read or written at it. */
static gboolean
order_op (const Args * a, GError ** error)
{
  FakeStream *fs = a->s->priv;
  if (order.off)
    return TRUE;
  gboolean ok = TRUE;
  g_mutex_lock (&order.lock);
  order_enqueue_locked (fs);
  for (int i = 0; i < a->n && ok; i++) {
    const guint8 *span;
    gsize span_bytes;
    view_span (a->orig[i], &span, &span_bytes);
    ok = order_access_locked (fs->agent, &fs->clock, span, span_bytes,
        a->written[i], a->op, error);
  }
  g_mutex_unlock (&order.lock);
  return ok;
}

#define PRE(name) Args a_ = { s, name, TRUE, 0, { NULL }, { { 0 } }, { 0 } }; \
  g_atomic_int_inc (&fake.n_ops)
#define A(x) arg (&a_, (x))
#define CHECK if (!a_.ok) return refuse (error, "%s: wrong device", a_.op)

/* convolutions by the stream's math mode (what a CUDA rank would hand
 * cuDNN: TF32/bf16 engines in LB_MATH_BF16) */
static void
count_conv (LbStream * s)
{
  g_atomic_int_inc (s->math != LB_MATH_FP32 ? &fake.n_convs_bf16 :
      &fake.n_convs_fp32);
}

/* the bf16 operands the counters follow (FakeDevStats): gemm's x is its
 * first tensor, attention's q its first and out its last; and the fp8
 * GEMMs and their norm_fp8 producer */
static void
count_bf16 (OpId op, const Args * a)
{
  if ((op == OP_gemm || op == OP_gemm_gelu_tanh) &&
      a->host[0].dtype == LB_DTYPE_BF16)
    g_atomic_int_inc (&fake.n_gemm_bf16_x);
  if (op == OP_attention && a->host[0].dtype == LB_DTYPE_BF16)
    g_atomic_int_inc (&fake.n_attention_bf16_q);
  if (op == OP_attention && a->n == 4)  /* q, k, v, out */
    count_attention_prepared (a->s, a->orig[0], a->orig[1], a->orig[3]);
  if (op == OP_attention && a->n > 0 &&
      a->host[a->n - 1].dtype == LB_DTYPE_BF16)
    g_atomic_int_inc (&fake.n_attention_bf16_out);
  if (op == OP_gemm_fp8)
    g_atomic_int_inc (&fake.n_gemm_fp8);
  if (op == OP_gemm_fp8_q)
    g_atomic_int_inc (&fake.n_gemm_fp8_q);
  if (op == OP_norm_fp8)
    g_atomic_int_inc (&fake.n_norm_fp8);
  if (op == OP_gemm_fp8_gelu_q)
    g_atomic_int_inc (&fake.n_gemm_fp8_gelu_q);
  if (op == OP_gelu_tanh)
    g_atomic_int_inc (&fake.n_gelu_tanh);
  if (op == OP_conv3d_causal && a->host[0].dtype == LB_DTYPE_BF16)
    g_atomic_int_inc (&fake.n_conv_bf16_x);
  if (op == OP_channel_rms_norm && a->n > 0 &&
      a->host[a->n - 1].dtype == LB_DTYPE_BF16)
    g_atomic_int_inc (&fake.n_norm_bf16_y);
}

/* f_<op> for every op of kernels/ops-list.h: each tensor argument checked
 * and relabelled as host memory (in argument order, so an in-place call
 * stays in place), then the CPU kernel. */
#define HOST_IN(n) LbTensor *h_##n = A (n);
#define HOST_OUT(n) LbTensor *h_##n = arg_out (&a_, (n));
#define HOST_F32(n)
#define HOST_INT(n)
#define HOST_I64(n)
#define HOST_BOOL(n)
#define HOST(kind, n) HOST_##kind (n)
#define ON_HOST_IN(n) , h_##n
#define ON_HOST_OUT(n) , h_##n
#define ON_HOST_F32(n) , n
#define ON_HOST_INT(n) , n
#define ON_HOST_I64(n) , n
#define ON_HOST_BOOL(n) , n
#define ON_HOST(kind, n) ON_HOST_##kind (n)
/* a queued call: tensor argument k -> its host descriptor's index */
#define JOB_IN(n) c->idx[kt++] = h_##n == NULL ? -1 : (int) (h_##n - a_.host);
#define JOB_OUT(n) JOB_IN (n)
#define JOB_F32(n) c->f[kf++] = n;
#define JOB_INT(n) c->i[ki++] = n;
#define JOB_I64(n) c->i[ki++] = n;
#define JOB_BOOL(n) c->i[ki++] = n;
#define JOB(kind, n) JOB_##kind (n)

#define LB_OP(name) \
static gboolean \
f_##name (LbStream * s LB_OP_ARGS_##name (LB_OP_PARAM), GError ** error) \
{ \
  PRE (#name); \
  if (OP_##name == OP_conv3d_causal || OP_##name == OP_conv2d) \
    count_conv (s); \
  LB_OP_ARGS_##name (HOST) \
  CHECK; \
  if (!order_op (&a_, error)) \
    return FALSE; \
  count_bf16 (OP_##name, &a_); \
  if (stream_async (s)) { \
    Job *j = job_new (JOB_CALL); \
    FakeCall *c = &j->call; \
    c->op = OP_##name; \
    c->n = a_.n; \
    memcpy (c->t, a_.host, sizeof (a_.host)); \
    int kt = 0, kf = 0, ki = 0; \
    LB_OP_ARGS_##name (JOB) \
    (void) kt; \
    (void) kf; \
    (void) ki; \
    return job_push (s, j); \
  } \
  return CPU->name (s LB_OP_ARGS_##name (ON_HOST), error); \
}
#include "kernels/ops-list.h"

/* The checked ops, run at once: what graph_launch replays through. */
static const LbOps fake_direct_ops = {
#define LB_OP(name) .name = f_##name,
#include "kernels/ops-list.h"
};

/* ---- graph capture: every op call recorded, replayed by graph_launch ---- */

/* d_<op>: f_<op>, or while capturing its arguments recorded in order
 * (tensors by value, scalars in f[] and i[] as an OpCall holds them). */
#define REC_IN(n) rec_tensor (c, kt++, n);
#define REC_OUT(n) rec_tensor (c, kt++, n);
#define REC_F32(n) c->f[kf++] = n;
#define REC_INT(n) c->i[ki++] = n;
#define REC_I64(n) c->i[ki++] = n;
#define REC_BOOL(n) c->i[ki++] = n;
#define REC(kind, n) REC_##kind (n)

#define LB_OP(name) \
static gboolean \
d_##name (LbStream * s LB_OP_ARGS_##name (LB_OP_PARAM), GError ** error) \
{ \
  if (!stream_capturing (s)) \
    return f_##name (s LB_OP_ARGS_##name (LB_OP_ARG_NAME), error); \
  FakeCall *c = rec_call (s, OP_##name); \
  int kt = 0, kf = 0, ki = 0; \
  LB_OP_ARGS_##name (REC) \
  (void) kt; \
  (void) kf; \
  (void) ki; \
  return TRUE; \
}
#include "kernels/ops-list.h"

static gboolean
replay_call (LbStream * s, FakeCall * c, GError ** error)
{
  if (c->op == FOP_RAW_COPY)
    return fake_copy (s, c->dst, c->src, c->nbytes,
        LB_COPY_DEVICE_TO_DEVICE, error);
  OpCall call = {.op = c->op };
  for (int k = 0; k < OP_CALL_MAX_TENSORS; k++)
    call.t[k] = RT (k);
  memcpy (call.f, c->f, sizeof (call.f));
  memcpy (call.i, c->i, sizeof (call.i));
  return op_call_run (&fake_direct_ops, s, &call, error);
}

static const LbOps fake_ops = {
#define LB_OP(name) .name = d_##name,
#include "kernels/ops-list.h"
};


static gboolean event_record_now (LbStream * s, LbEvent * event,
    gboolean count, GError ** error);
static void event_wait_now (LbStream * s, LbEvent * event, gboolean skip);
static LbEvent *fake_event_new (LbBackend * self, int device, GError ** error);

/* Whether every stream that joined @origin's capture was joined back, as
 * CUDA requires at cudaStreamEndCapture: its last captured call records
 * an event that @origin's stream waits for afterwards.  (CUDA also
 * accepts a join through another joined stream; no caller does that, so
 * it is refused here.) */
static gboolean
capture_joined (FakeStream * origin)
{
  GArray *calls = origin->calls;
  for (guint k = 1; k <= origin->branches->len; k++) {
    int last = -1;
    gboolean joined = FALSE;
    for (guint n = 0; n < calls->len; n++)
      if (g_array_index (calls, FakeCall, n).branch == (int) k)
        last = (int) n;
    const FakeCall *r = &g_array_index (calls, FakeCall, last);
    for (guint n = (guint) last + 1; r->op == FOP_RECORD && n < calls->len; n++) {
      const FakeCall *w = &g_array_index (calls, FakeCall, n);
      joined = joined || (w->branch == 0 && w->op == FOP_WAIT &&
          w->ev == r->ev);
    }
    if (!joined)
      return FALSE;
  }
  return TRUE;
}

static gboolean
fake_graph_begin (LbStream * s, GError ** error)
{
  FakeStream *fs = s->priv;
  if (fs->capturing)
    return refuse (error, "graph capture: already capturing");
  fs->capturing = TRUE;
  fs->calls = g_array_new (FALSE, FALSE, sizeof (FakeCall));
  fs->capture_thread = g_thread_self ();
  fs->invalidated = FALSE;
  fs->n_events = 0;
  g_mutex_lock (&fake.lock);
  fs->capture_mode = fake.capture_mode;
  fs->capture_id = ++fake.n_capture_ids;
  fs->branches = g_ptr_array_new ();
  g_ptr_array_add (fake.captures, fs);
  g_mutex_unlock (&fake.lock);
  return TRUE;
}

static LbGraph *
fake_graph_end (LbStream * s, GError ** error)
{
  FakeStream *fs = s->priv;
  if (!fs->capturing) {
    refuse (error, "graph capture: not capturing");
    return NULL;
  }
  if (fs->join != NULL) {
    refuse (error, "graph capture: ended on a stream that joined it, not "
        "the one that began it (cudaErrorStreamCaptureUnmatched)");
    return NULL;
  }
  g_mutex_lock (&fake.lock);
  g_ptr_array_remove (fake.captures, fs);
  const gboolean unjoined = !fs->invalidated && !capture_joined (fs);
  const gboolean invalidated = fs->invalidated || unjoined;
  const int n_branches = (int) fs->branches->len;
  capture_release_branches (fs);
  g_mutex_unlock (&fake.lock);
  if (unjoined) {
    g_array_free (fs->calls, TRUE);
    fs->calls = NULL;
    fs->capturing = FALSE;
    refuse (error, "graph capture: capturing stream has unjoined work "
        "(cudaErrorStreamCaptureUnjoined)");
    return NULL;
  }
  /* an injected failure: the capture was invalidated, nothing of it ran */
  gint left = g_atomic_int_get (&fake.fail_graph_end);
  while (left != 0 && !g_atomic_int_compare_and_exchange (&fake.fail_graph_end,
          left, left > 0 ? left - 1 : left))
    left = g_atomic_int_get (&fake.fail_graph_end);
  if (left != 0 || invalidated) {
    g_array_free (fs->calls, TRUE);
    fs->calls = NULL;
    fs->capturing = FALSE;
    if (!invalidated)
      g_atomic_int_inc (&fake.n_capture_fails);
    g_set_error_literal (error, LB_ERROR, LB_ERROR_DEVICE, "graph capture: "
        "operation failed due to a previous error during capture "
        "(cudaErrorStreamCaptureInvalidated)");
    return NULL;
  }
  LbGraph *g = g_new0 (LbGraph, 1);
  g->calls = fs->calls;
  g->n_branches = n_branches;
  g->n_events = fs->n_events;
  for (guint n = 0; n < g->calls->len; n++)
    memset (g_array_index (g->calls, FakeCall, n).orig, 0,
        sizeof (((FakeCall *) NULL)->orig));
  fs->calls = NULL;
  fs->capturing = FALSE;
  g_atomic_int_inc (&fake.n_captures);
  return g;
}

/* Replays the recorded calls in order through the same residency checks
 * (a tensor freed since the capture is refused). */
static gboolean
fake_graph_launch (LbStream * s, LbGraph * graph, GError ** error)
{
  if (stream_capturing (s))
    return refuse (error, "graph launch during a capture");
  g_atomic_int_inc (&fake.n_launches);
  if (graph->n_branches == 0) {
    for (guint n = 0; n < graph->calls->len; n++)
      if (!replay_call (s, &g_array_index (graph->calls, FakeCall, n), error))
        return FALSE;
    return TRUE;
  }
  /* the branches' streams and the captured events, made once per graph */
  if (graph->bs == NULL) {
    graph->bs = g_new0 (LbStream *, graph->n_branches);
    graph->ev = g_new0 (LbEvent *, graph->n_events + 1);
    for (int k = 0; k < graph->n_branches; k++)
      graph->bs[k] = stream_new_like (s->backend, s->device, s);
    for (int e = 0; e <= graph->n_events; e++)
      graph->ev[e] = fake_event_new (s->backend, s->device, NULL);
  }
  /* the launch: every branch starts after what @s enqueued before it
   * (event 0), and @s goes on after every branch (CUDA's graph launch is
   * one unit of the stream's work) */
  if (!event_record_now (s, graph->ev[0], FALSE, error))
    return FALSE;
  for (int k = 0; k < graph->n_branches; k++)
    event_wait_now (graph->bs[k], graph->ev[0], FALSE);
  for (guint n = 0; n < graph->calls->len; n++) {
    FakeCall *c = &g_array_index (graph->calls, FakeCall, n);
    LbStream *on = c->branch == 0 ? s : graph->bs[c->branch - 1];
    if (c->op == FOP_RECORD) {
      if (!event_record_now (on, graph->ev[c->ev], FALSE, error))
        return FALSE;
    } else if (c->op == FOP_WAIT) {
      event_wait_now (on, graph->ev[c->ev], FALSE);
    } else if (!replay_call (on, c, error))
      return FALSE;
  }
  for (int k = 0; k < graph->n_branches; k++) {
    if (!event_record_now (graph->bs[k], graph->ev[0], FALSE, error))
      return FALSE;
    event_wait_now (s, graph->ev[0], FALSE);
  }
  return TRUE;
}

static void
fake_graph_free (LbStream * s, LbGraph * graph)
{
  (void) s;
  if (graph == NULL)
    return;
  for (int k = 0; graph->bs && k < graph->n_branches; k++)
    fake_stream_free (graph->bs[k]);
  for (int e = 0; graph->ev && e <= graph->n_events; e++)
    event_unref (graph->ev[e]);
  g_free (graph->bs);
  g_free (graph->ev);
  g_array_free (graph->calls, TRUE);
  g_free (graph);
}


static LbEvent *
fake_event_new (LbBackend * self, int device, GError ** error)
{
  (void) self;
  (void) error;
  LbEvent *e = g_new0 (LbEvent, 1);
  e->device = device;
  e->refs = 1;
  return e;
}

/* (a mark or wait still queued keeps the event alive) */
static void
fake_event_free (LbBackend * self, LbEvent * event)
{
  (void) self;
  event_unref (event);
}

/* Records @event on @s now (the checker's clock, an asynchronous stream's
 * mark); @count: in FakeDevStats.n_records (not a graph's own). */
static gboolean
event_record_now (LbStream * s, LbEvent * event, gboolean count,
    GError ** error)
{
  if (event->device != s->device)
    return refuse (error, "event of device %d recorded on fakedev:%d",
        event->device, s->device);
  if (count)
    g_atomic_int_inc (&fake.n_records);
  event->capture_id = 0;
  order_record (s, &event->clock);
  g_mutex_lock (&async.lock);
  const guint64 gen = ++event->recorded;
  if (stream_async (s)) {
    Job *j = job_new (JOB_RECORD);
    g_atomic_int_inc (&event->refs);
    j->event = event;
    j->gen = gen;
    job_push_locked (s, j);
  } else
    event->reached = gen;
  g_mutex_unlock (&async.lock);
  return TRUE;
}

/* Into a capture: a record on a capturing stream is a node of the graph,
 * the event's point inside it (numbered from 1). */
static gboolean
fake_event_record (LbStream * s, LbEvent * event, GError ** error)
{
  FakeStream *fs = s->priv;
  if (!fs->capturing)
    return event_record_now (s, event, TRUE, error);
  if (event->device != s->device)
    return refuse (error, "event of device %d recorded on fakedev:%d",
        event->device, s->device);
  g_atomic_int_inc (&fake.n_records);
  FakeStream *origin = capture_origin (fs);
  FakeCall *c = rec_call (s, FOP_RECORD);
  c->ev = ++origin->n_events;
  event->capture_id = origin->capture_id;
  event->capture_ev = c->ev;
  return TRUE;
}

/* Makes @s wait for @event now (the checker, an asynchronous stream's
 * worker); @skip: fakedev_skip_waits() dropped it. */
static void
event_wait_now (LbStream * s, LbEvent * event, gboolean skip)
{
  order_wait (s, &event->clock, skip);
  g_mutex_lock (&async.lock);
  if (stream_async (s) && !skip && event->reached < event->recorded) {
    Job *j = job_new (JOB_WAIT);
    g_atomic_int_inc (&event->refs);
    j->event = event;
    j->gen = event->recorded;
    job_push_locked (s, j);
  }
  g_mutex_unlock (&async.lock);
}

/* Any device's event may be waited for (cudaStreamWaitEvent allows an
 * event of another device: a peer rank's stream).  A wait on an event
 * recorded in a capture under way is a node of that graph: a stream not
 * capturing joins the capture (CUDA's fork), one capturing in another
 * capture is refused.  An event last recorded in a capture that has
 * ended orders nothing (it holds no point of the stream's work). */
static gboolean
fake_stream_wait_event (LbStream * s, LbEvent * event, GError ** error)
{
  FakeStream *fs = s->priv;
  g_atomic_int_inc (&fake.n_waits);
  if (event->capture_id != 0) {
    g_mutex_lock (&fake.lock);
    FakeStream *origin = NULL;
    for (guint i = 0; i < fake.captures->len && origin == NULL; i++) {
      FakeStream *c = g_ptr_array_index (fake.captures, i);
      if (c->capture_id == event->capture_id)
        origin = c;
    }
    if (origin != NULL && !fs->capturing) {
      fs->capturing = TRUE;
      fs->join = origin;
      g_ptr_array_add (origin->branches, fs);
      fs->branch = (int) origin->branches->len;
      fake.n_capture_joins++;
    }
    g_mutex_unlock (&fake.lock);
    if (origin == NULL)
      return TRUE;
    if (capture_origin (fs) != origin)
      return refuse (error, "stream wait on an event of another stream's "
          "capture (cudaErrorStreamCaptureIsolation)");
    rec_call (s, FOP_WAIT)->ev = event->capture_ev;
    return TRUE;
  }
  event_wait_now (s, event, wait_skipped (s));
  return TRUE;
}

/* Page-locked host memory stands in as plain host memory, counted. */
static gpointer
fake_host_alloc (LbBackend * self, gsize nbytes, GError ** error)
{
  (void) self;
  (void) error;
  g_atomic_int_inc (&fake.n_host_blocks);
  gpointer p = g_malloc0 (MAX (nbytes, 1));
  g_mutex_lock (&fake.lock);
  g_hash_table_insert (fake.host, p, GSIZE_TO_POINTER (nbytes));
  g_mutex_unlock (&fake.lock);
  order_block_add (p, nbytes, TRUE, -1);
  return p;
}

static void
fake_host_free (LbBackend * self, gpointer ptr)
{
  (void) self;
  if (ptr == NULL)
    return;
  g_atomic_int_add (&fake.n_host_blocks, -1);
  g_mutex_lock (&fake.lock);
  g_hash_table_remove (fake.host, ptr);
  g_mutex_unlock (&fake.lock);
  order_block_remove (ptr);
  release_deferred (ptr);
}

/* The CUDA extra "lingbot_backend_conv_input_bf16", as the CUDA module
 * answers it with LINGBOT_CUDA_CONV_LAYOUT=ndhwc, while switched on. */
static gboolean
fake_conv_input_bf16 (LbStream * s)
{
  return g_atomic_int_get (&fake.conv_input_bf16) && s->math != LB_MATH_FP32;
}

static gpointer
fake_get_proc_address (LbBackend * self, const char *name)
{
  (void) self;
  if (g_strcmp0 (name, "lingbot_backend_conv_input_bf16") == 0)
    return (gpointer) fake_conv_input_bf16;
  return NULL;
}

/**
 * fakedev_set_conv_input_bf16:
 * @on: whether the backend extra "lingbot_backend_conv_input_bf16" says
 *   %TRUE for bf16/fp8 streams (as CUDA does with
 *   LINGBOT_CUDA_CONV_LAYOUT=ndhwc); off at start
 *
 * Makes a VAE decoder created afterwards on fakedev streams lay out its
 * conv inputs as bf16 channels-last.  Process-wide.
 */
void
fakedev_set_conv_input_bf16 (gboolean on)
{
  g_atomic_int_set (&fake.conv_input_bf16, on ? 1 : 0);
}

/**
 * fakedev_fail_graph_end:
 * @n: how many of the next graph_end calls fail (-1: all, 0: none)
 *
 * Fault injection: such a graph_end answers %NULL and "graph capture:
 * operation failed due to a previous error during capture
 * (cudaErrorStreamCaptureInvalidated)" (%LB_ERROR_DEVICE), the message
 * of the CUDA backend for a capture that an illegal call invalidated,
 * and drops what was recorded (nothing of it ran).  Counted in
 * #FakeDevStats.n_capture_fails; not a refusal (@bad).  Process-wide.
 */
void
fakedev_fail_graph_end (int n)
{
  g_atomic_int_set (&fake.fail_graph_end, n);
}

/**
 * fakedev_skip_waits:
 * @device: the device whose streams' waits are dropped, or -1 for all
 * @n: how many of their next stream_wait_event calls order nothing (-1:
 *   all, 0: none)
 *
 * Fault injection for the stream-ordering checker: such a wait is counted
 * (#FakeDevStats.n_waits) but does not order the stream, as if the caller
 * had left it out (an asynchronous stream's worker does not wait either,
 * FAKEDEV_ORDER=off or not).  Process-wide.
 */
void
fakedev_skip_waits (int device, int n)
{
  fakedev_backend ();
  g_mutex_lock (&order.lock);
  order.skip_device = device;
  order.skip_waits = n;
  g_mutex_unlock (&order.lock);
}

/**
 * fakedev_stream_name:
 * @s: a fakedev stream
 *
 * Returns: (transfer full): how the stream-ordering checker names @s in
 * its messages, "stream #N (fakedev:D)".
 */
char *
fakedev_stream_name (LbStream * s)
{
  g_mutex_lock (&order.lock);
  char *name = g_strdup (agent_name (((FakeStream *) s->priv)->agent));
  g_mutex_unlock (&order.lock);
  return name;
}

/**
 * fakedev_block_serial:
 * @p: an address in a live device allocation or host_alloc block
 *
 * Returns: the number the stream-ordering checker gives that block in its
 * messages ("allocation #N", "host_alloc block #N"), or 0 when @p is in
 * neither (or the checker is off).
 */
guint64
fakedev_block_serial (const void *p)
{
  g_mutex_lock (&order.lock);
  OrderBlock *b = order.blocks ? g_tree_search (order.blocks, block_find,
      p) : NULL;
  guint64 serial = b ? b->serial : 0;
  g_mutex_unlock (&order.lock);
  return serial;
}

static LbBackend fake_backend = {
  .name = "fakedev",
  .device_type = LB_DEVICE_CUDA,
  .device_count = 8,
  .ops = &fake_ops,
  .alloc = fake_alloc,
  .free = fake_free,
  .copy = fake_copy,
  .stream_new = fake_stream_new,
  .stream_free = fake_stream_free,
  .stream_synchronize = fake_stream_synchronize,
  .graph_begin = fake_graph_begin,
  .graph_end = fake_graph_end,
  .graph_launch = fake_graph_launch,
  .graph_free = fake_graph_free,
  .host_alloc = fake_host_alloc,
  .host_free = fake_host_free,
  .event_new = fake_event_new,
  .event_free = fake_event_free,
  .event_record = fake_event_record,
  .stream_wait_event = fake_stream_wait_event,
  .get_proc_address = fake_get_proc_address,
  .stream_reserve = fake_stream_reserve,
  .attention_prepare = fake_attention_prepare,
};

/**
 * fakedev_backend:
 *
 * The emulated device backend (8 "CUDA" devices in host memory, CPU
 * kernels, every op table entry filled), initialised on first use.
 *
 * Returns: (transfer none): the backend.
 */
LbBackend *
fakedev_backend (void)
{
  static gsize once = 0;
  if (g_once_init_enter (&once)) {
    g_mutex_init (&fake.lock);
    fake.blocks = g_hash_table_new (g_direct_hash, g_direct_equal);
    fake.host = g_hash_table_new (g_direct_hash, g_direct_equal);
    fake.captures = g_ptr_array_new ();
    order_init ();
    async_init ();
    g_assert (lb_ops_first_missing (&fake_ops) == NULL);
    g_once_init_leave (&once, 1);
  }
  return &fake_backend;
}

/**
 * fakedev_stats:
 *
 * Returns: the counters so far (see #FakeDevStats).
 */
FakeDevStats
fakedev_stats (void)
{
  FakeDevStats st;
  st.bad = g_atomic_int_get (&fake.bad);
  st.n_h2d = g_atomic_int_get (&fake.n_h2d);
  st.n_d2h = g_atomic_int_get (&fake.n_d2h);
  st.n_d2d = g_atomic_int_get (&fake.n_d2d);
  st.n_ops = g_atomic_int_get (&fake.n_ops);
  st.n_captures = g_atomic_int_get (&fake.n_captures);
  st.n_launches = g_atomic_int_get (&fake.n_launches);
  st.n_capture_fails = g_atomic_int_get (&fake.n_capture_fails);
  st.n_waits = g_atomic_int_get (&fake.n_waits);
  st.n_records = g_atomic_int_get (&fake.n_records);
  st.n_syncs = g_atomic_int_get (&fake.n_syncs);
  st.host_blocks = g_atomic_int_get (&fake.n_host_blocks);
  st.n_convs_fp32 = g_atomic_int_get (&fake.n_convs_fp32);
  st.n_convs_bf16 = g_atomic_int_get (&fake.n_convs_bf16);
  st.n_gemm_bf16_x = g_atomic_int_get (&fake.n_gemm_bf16_x);
  st.n_attention_bf16_q = g_atomic_int_get (&fake.n_attention_bf16_q);
  st.n_attention_bf16_out = g_atomic_int_get (&fake.n_attention_bf16_out);
  st.n_gemm_fp8 = g_atomic_int_get (&fake.n_gemm_fp8);
  st.n_gemm_fp8_q = g_atomic_int_get (&fake.n_gemm_fp8_q);
  st.n_norm_fp8 = g_atomic_int_get (&fake.n_norm_fp8);
  st.n_gemm_fp8_gelu_q = g_atomic_int_get (&fake.n_gemm_fp8_gelu_q);
  st.n_gelu_tanh = g_atomic_int_get (&fake.n_gelu_tanh);
  g_mutex_lock (&fake.lock);
  st.n_reserves = fake.n_reserves;
  st.reserve_scratch = fake.reserve_scratch;
  st.reserve_workspace = fake.reserve_workspace;
  st.n_attention_prepares = fake.n_attn_prepares;
  st.n_attention_unprepared = fake.n_attn_unprepared;
  g_mutex_unlock (&fake.lock);
  st.n_async_jobs = g_atomic_int_get (&async.n_jobs);
  st.n_capture_unsupported = g_atomic_int_get (&fake.n_capture_unsupported);
  g_mutex_lock (&fake.lock);
  st.n_capture_joins = fake.n_capture_joins;
  g_mutex_unlock (&fake.lock);
  st.n_conv_bf16_x = g_atomic_int_get (&fake.n_conv_bf16_x);
  st.n_norm_bf16_y = g_atomic_int_get (&fake.n_norm_bf16_y);
  st.n_allocs = g_atomic_int_get (&fake.n_allocs);
  st.n_h2d_pinned = g_atomic_int_get (&fake.n_h2d_pinned);
  st.n_d2h_pinned = g_atomic_int_get (&fake.n_d2h_pinned);
  g_mutex_lock (&order.lock);
  st.n_order_checks = order.n_checks;
  st.n_order_violations = order.n_violations;
  g_mutex_unlock (&order.lock);
  g_mutex_lock (&fake.lock);
  st.live_blocks = fake.blocks ? (int) g_hash_table_size (fake.blocks) : 0;
  g_mutex_unlock (&fake.lock);
  return st;
}

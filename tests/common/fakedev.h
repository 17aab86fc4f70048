/* lingbot-gst: an emulated device backend for tests (no GPU needed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "kernels/backend.h"

G_BEGIN_DECLS

/**
 * FakeDevStats:
 * @bad: calls refused (wrong residency, wrong copy kind, overlapping
 *   device copy, unknown free); a correct program keeps it at 0
 * @n_h2d: host-to-device copies
 * @n_d2h: device-to-host copies
 * @n_d2d: device-to-device copies
 * @n_ops: op calls
 * @live_blocks: device allocations not yet freed
 * @n_captures: graphs captured (graph_end)
 * @n_launches: graph replays (graph_launch)
 * @n_capture_fails: graph_end calls failed by fakedev_fail_graph_end()
 * @n_waits: stream waits for an event (stream_wait_event; the event may
 *   be another device's)
 * @n_records: events recorded (event_record)
 * @n_syncs: stream synchronisations outside graph captures
 * @host_blocks: host_alloc blocks not yet freed
 * @n_convs_fp32: convolutions (conv3d_causal, conv2d) run on a stream in
 *   %LB_MATH_FP32
 * @n_convs_bf16: those run on a stream in %LB_MATH_BF16
 * @n_gemm_bf16_x: gemm calls whose x is bf16 (a GEMM input written in
 *   bf16 by the op before it)
 * @n_attention_bf16_q: attention calls whose q is bf16
 * @n_attention_bf16_out: attention calls whose out is bf16
 * @n_conv_bf16_x: conv3d_causal calls whose x (and cache) are bf16
 *   channels-last
 * @n_norm_bf16_y: channel_rms_norm calls whose y is bf16
 * @n_allocs: device allocations made (alloc calls)
 * @n_h2d_pinned: host-to-device copies whose source lies in host_alloc
 *   memory (page-locked on CUDA); the others read pageable memory
 * @n_d2h_pinned: device-to-host copies into host_alloc memory
 * @n_gemm_fp8: gemm_fp8 calls (f32 x, quantised by the GEMM)
 * @n_gemm_fp8_q: gemm_fp8_q calls (x already e4m3 codes and row scales)
 * @n_norm_fp8: norm_fp8 calls (a norm writing e4m3 codes and row scales)
 * @n_order_checks: accesses of device (or host_alloc) memory the
 *   stream-ordering checker followed (0 with FAKEDEV_ORDER=off)
 * @n_order_violations: accesses it refused (also counted in @bad): one
 *   not ordered after a conflicting earlier access of another stream
 * @n_gemm_fp8_gelu_q: gemm_fp8_gelu_q calls (the FFN's first fp8 layer
 *   writing the e4m3 codes and row scales of its GELU)
 * @n_gelu_tanh: gelu_tanh calls
 * @n_reserves: stream_reserve calls (lb_stream_reserve())
 * @reserve_scratch: the largest scratch_bytes they asked for
 * @reserve_workspace: the largest workspace_bytes they asked for
 * @n_async_jobs: queued ops, copies, event marks and deferred frees the
 *   streams' workers ran (0 unless asynchronous, fakedev_set_async())
 * @n_capture_unsupported: calls refused with
 *   cudaErrorStreamCaptureUnsupported (#FakeDevCaptureMode; also in @bad)
 * @n_attention_prepares: attention_prepare calls (lb_attention_prepare())
 * @n_attention_unprepared: attention calls without bias or mask whose
 *   device, shape, dtypes and strides no attention_prepare call gave
 *   before (on CUDA: a cuDNN plan built, and its scratch and workspace
 *   first allocated, in the middle of the work)
 * @n_capture_joins: streams that joined another stream's capture (a wait
 *   on an event recorded in it, CUDA's fork)
 *
 * Graph capture on fakedev records every op call and device copy (tensor
 * descriptors by value) instead of running it, as CUDA does across
 * streams: a stream that waits on an event recorded in the capture joins
 * it until it ends (it must be joined back, by the capturing stream's wait
 * on an event recorded on it after its last call), and its calls replay on
 * a stream of the graph's own, ordered by the captured waits.  It refuses host transfers,
 * the stream's synchronisation, and allocations and frees by the
 * capturing thread while recording (by any thread in global mode,
 * #FakeDevCaptureMode), and
 * graph_launch replays the record in order: code that is not replay-safe
 * (a host value or pointer that changes between launches) gives results
 * that differ from the CPU's.
 */
typedef struct
{
  int bad;
  int n_h2d, n_d2h, n_d2d, n_ops;
  int live_blocks;
  int n_captures, n_launches, n_waits;
  int n_records, n_syncs, host_blocks;
  int n_convs_fp32, n_convs_bf16;       /* by the stream's math mode */
  int n_gemm_bf16_x;
  int n_attention_bf16_q, n_attention_bf16_out;
  int n_conv_bf16_x, n_norm_bf16_y;
  int n_allocs, n_h2d_pinned, n_d2h_pinned;
  int n_capture_fails;
  int n_gemm_fp8, n_gemm_fp8_q, n_norm_fp8;
  int n_order_checks, n_order_violations;
  int n_gemm_fp8_gelu_q, n_gelu_tanh;
  int n_reserves;
  gsize reserve_scratch, reserve_workspace;
  int n_async_jobs, n_capture_unsupported;
  int n_attention_prepares, n_attention_unprepared;
  int n_capture_joins;
} FakeDevStats;

/**
 * FakeDevCaptureMode:
 * @FAKEDEV_CAPTURE_RELAXED: cudaStreamCaptureModeRelaxed, what the CUDA
 *   backend begins its captures with: other threads may allocate, free
 *   and synchronise (the CUDA pool holds back what they free)
 * @FAKEDEV_CAPTURE_GLOBAL: cudaStreamCaptureModeGlobal: while the capture
 *   lasts, an allocation, a free or a stream synchronisation from any
 *   thread is refused with "operation not permitted when stream is
 *   capturing (cudaErrorStreamCaptureUnsupported)" and invalidates the
 *   capture (its graph_end fails with cudaErrorStreamCaptureInvalidated)
 *
 * The mode fakedev's graph_begin starts a capture in
 * (fakedev_set_capture_mode()).  In either mode the capturing thread
 * itself may not allocate or free (the backend's rule for graph_begin),
 * nor synchronise the capturing stream, and work any thread enqueues on
 * the capturing stream is recorded into its graph, as CUDA records it.
 */
typedef enum
{
  FAKEDEV_CAPTURE_RELAXED,
  FAKEDEV_CAPTURE_GLOBAL,
} FakeDevCaptureMode;

LbBackend *fakedev_backend (void);
FakeDevStats fakedev_stats (void);
gboolean fakedev_is_device (const void *p, gsize n);
void fakedev_set_conv_input_bf16 (gboolean on);
void fakedev_fail_graph_end (int n);
void fakedev_skip_waits (int device, int n);
char *fakedev_stream_name (LbStream * s);
guint64 fakedev_block_serial (const void *p);
void fakedev_set_capture_mode (FakeDevCaptureMode mode);
void fakedev_set_async (gboolean on, guint32 seed, guint max_delay_us);
gboolean fakedev_async (void);
void fakedev_hold_stream (LbStream * s, gboolean hold);
guint fakedev_stream_queued (LbStream * s);

G_END_DECLS

/* lingbot-gst: the public C API (no GStreamer)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Two objects, both refcounted and thread-safe to ref/unref:
 *
 * - LingbotWorld: the devices (a worker group of N ranks, DESIGN.md 3) and
 *   the loaded model (DiT, VAE, text encoder + tokenizer, each optional
 *   where a session does not need it).  One world serves many sessions, one
 *   at a time on the same ranks.  The GStreamer elements share one world
 *   through GstContext "lingbot.world".
 * - LingbotSession: one generation (DESIGN.md 4): a reference image, a
 *   prompt (or precomputed prompt embeddings), a seed and a control stream.
 *   Everything constant for the session is computed once at creation (text
 *   context, condition latents, KV caches, RoPE tables, sigmas, output
 *   buffers); each chunk then runs control -> 4 + 1 DiT passes -> decode,
 *   allocating nothing.  lingbot_session_generate() and
 *   lingbot_session_decode() may be called from different threads (the
 *   elements do): every call holds the world's lock while it uses the
 *   ranks, so the two serialize.  Calls of one kind must not race each
 *   other.  A generate in flight can be stopped at its next DiT pass
 *   boundary: lingbot_session_set_cancellable() and g_cancellable_cancel()
 *   may be called from any thread while it runs (the chunk is dropped and
 *   made again by the next generate, bit for bit).  The pass callback
 *   (lingbot_session_set_pass_func()) reports progress from rank 0's
 *   thread; the failure callback (lingbot_session_set_failure_func())
 *   reports a rank that did not answer in time as soon as its peer's wait
 *   times out, before lingbot_session_generate() returns.
 *
 * Model directory layout (the published release):
 *   MODEL/transformers/       DiT shards, model.safetensors.index.json,
 *                             config.json (or a single .safetensors)
 *   MODEL/Wan2.1_VAE.pth      VAE (or Wan2.1_VAE.safetensors)
 *   MODEL/models_t5_umt5-xxl-enc-bf16.pth   umT5 encoder (optional with
 *                             prompt embeddings; or
 *                             models_t5_umt5-xxl-enc-bf16.safetensors)
 *   MODEL/google/umt5-xxl/    tokenizer (spiece.model / tokenizer.model)
 * (`lingbot-mkmodel --full --out MODEL` writes a random one, with the
 * .safetensors names.)
 *
 * The text encoder is located by lingbot_world_new() but loaded only
 * inside lingbot_session_new(), run once on rank 0 and freed: the 11 GB
 * umT5-XXL is needed for one forward per session.
 *
 * Errors are GErrors of the %LINGBOT_ERROR domain (#LingbotError).  The
 * settings a world or a session would refuse can be checked before
 * anything is loaded: lingbot_world_parse_precision(),
 * lingbot_world_check_devices(), lingbot_session_check_image(),
 * lingbot_session_output_size().
 *
 * This header and lingbot/control.h (which it includes) are the whole
 * public API, installed as <lingbot/lingbot.h>, and all the GStreamer
 * elements (gst/) see of the library: every type is opaque or a plain
 * struct of C scalars, data goes in and out as plain bytes (latents as
 * host float32, frames converted into caller-owned RGB / RGBA / I420 /
 * NV12 planes), and nothing of the engine (worker groups, tensors, the
 * DiT and VAE objects) is reachable from here.  The in-tree tools and
 * tests reach those through lingbot/lingbot-private.h (not installed).
 */
#pragma once

#include <glib.h>
#include <gio/gio.h>

#include "lingbot/control.h"

G_BEGIN_DECLS

/* ---- errors ---- */

/**
 * LINGBOT_ERROR:
 *
 * The error domain of every GError the library sets.  It is the library's
 * one error quark ("lingbot-error-quark"): the engine's internal LB_ERROR is the same
 * quark, and #LingbotError's codes are its codes, value for value, so an
 * application tests g_error_matches (error, LINGBOT_ERROR,
 * LINGBOT_ERROR_IO) whatever layer set the error.
 */
#define LINGBOT_ERROR (lingbot_error_quark ())
GQuark lingbot_error_quark (void);

/**
 * LingbotError:
 * @LINGBOT_ERROR_INVALID_ARGUMENT: a caller passed something that cannot
 *   work (a setting out of range, a malformed string)
 * @LINGBOT_ERROR_SHAPE: sizes or shapes do not match what the model or the
 *   session expects; the message names both
 * @LINGBOT_ERROR_IO: a file could not be opened, mapped or read
 * @LINGBOT_ERROR_FORMAT: a file is truncated, corrupt or not of the
 *   expected format
 * @LINGBOT_ERROR_NOT_FOUND: a file, a model part or a named tensor is
 *   missing
 * @LINGBOT_ERROR_UNSUPPORTED: valid input that this build cannot handle
 * @LINGBOT_ERROR_DEVICE: a device or backend call failed, or memory sized
 *   by the input could not be allocated
 * @LINGBOT_ERROR_CANCELLED: the operation was cancelled
 *   (lingbot_session_set_cancellable())
 * @LINGBOT_ERROR_TIMEOUT: a rank did not answer within the deadline
 *   (LingbotWorldOptions.timeout_ms)
 * @LINGBOT_ERROR_RANK_FAILED: another rank of the world failed
 *
 * The codes of %LINGBOT_ERROR.
 */
typedef enum
{
  LINGBOT_ERROR_INVALID_ARGUMENT,
  LINGBOT_ERROR_SHAPE,
  LINGBOT_ERROR_IO,
  LINGBOT_ERROR_FORMAT,
  LINGBOT_ERROR_NOT_FOUND,
  LINGBOT_ERROR_UNSUPPORTED,
  LINGBOT_ERROR_DEVICE,
  LINGBOT_ERROR_CANCELLED,
  LINGBOT_ERROR_TIMEOUT,
  LINGBOT_ERROR_RANK_FAILED,
} LingbotError;

/* ---- sizes ---- */

/**
 * LINGBOT_LATENT_CHANNELS:
 *
 * Channels of a latent frame (the VAE's z_dim): latents are float32
 * [16, frames, height / 8, width / 8].
 */
#define LINGBOT_LATENT_CHANNELS 16

/**
 * LINGBOT_LATENT_STRIDE:
 *
 * Pixel rows (and columns) per latent row (column).
 */
#define LINGBOT_LATENT_STRIDE 8

/**
 * LingbotPrecision:
 * @LINGBOT_PRECISION_FP32: f32 weights and f32 math (the parity mode; the
 *   default)
 * @LINGBOT_PRECISION_BF16: bf16 GEMM weights and inputs, f32 accumulation
 *   (the served precision)
 * @LINGBOT_PRECISION_FP8: E4M3 GEMM weights, opt-in, compute capability
 *   8.9 and later
 *
 * The DiT's precision (LingbotWorldOptions.precision names it as a
 * string: "fp32", "bf16", "fp8").
 */
typedef enum
{
  LINGBOT_PRECISION_FP32 = 0,
  LINGBOT_PRECISION_BF16 = 1,
  LINGBOT_PRECISION_FP8 = 2,
} LingbotPrecision;

gboolean lingbot_parse_timestep_indices (const char *s, GArray * out,
    GError ** error);

/* ---- frames and latents ---- */

/**
 * LingbotFrames:
 *
 * Decoded video frames, owned by what hands them out (a session:
 * lingbot_session_get_frames(), lingbot_session_get_start_frames(); a
 * decoder: lingbot_decoder_get_frames()) and overwritten by its next
 * decode.  lingbot_frames_get_count() frames of lingbot_frames_get_width()
 * x lingbot_frames_get_height() pixels; the pixels leave as bytes through
 * lingbot_frames_to_rgb(), _to_rgba(), _to_i420() and _to_nv12(), into the
 * caller's planes with the caller's strides.
 */
typedef struct _LingbotFrames LingbotFrames;

/**
 * LingbotLatents:
 *
 * One chunk's latents: float32 [16, frames, height, width] in host memory
 * (%LINGBOT_LATENT_CHANNELS channels; height and width are the frame's
 * divided by %LINGBOT_LATENT_STRIDE).  A session's own
 * (lingbot_session_get_latents(), not to be freed) or the caller's bytes
 * (lingbot_latents_new_wrapped(), freed with lingbot_latents_free()).
 */
typedef struct _LingbotLatents LingbotLatents;

int lingbot_frames_get_count (const LingbotFrames * frames);
int lingbot_frames_get_width (const LingbotFrames * frames);
int lingbot_frames_get_height (const LingbotFrames * frames);
gboolean lingbot_frames_to_rgb (const LingbotFrames * frames, int frame,
    guint8 * dst, gsize dst_stride, GError ** error);
gboolean lingbot_frames_to_rgba (const LingbotFrames * frames, int frame,
    guint8 * dst, gsize dst_stride, GError ** error);
gboolean lingbot_frames_to_i420 (const LingbotFrames * frames, int frame,
    guint8 * y, gsize y_stride, guint8 * u, gsize u_stride, guint8 * v,
    gsize v_stride, GError ** error);
gboolean lingbot_frames_to_nv12 (const LingbotFrames * frames, int frame,
    guint8 * y, gsize y_stride, guint8 * uv, gsize uv_stride, GError ** error);

LingbotLatents *lingbot_latents_new_wrapped (gconstpointer data, gsize size,
    int n_frames, int height, int width, GError ** error);
void lingbot_latents_free (LingbotLatents * latents);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotLatents, lingbot_latents_free)
int lingbot_latents_get_n_frames (const LingbotLatents * latents);
int lingbot_latents_get_height (const LingbotLatents * latents);
int lingbot_latents_get_width (const LingbotLatents * latents);

/* ---- world ---- */

typedef struct _LingbotWorld LingbotWorld;

/**
 * LingbotWorldOptions:
 * @devices: (nullable): "cpu:N" or GPU ordinals "0,1,2,3"
 *   (lingbot_world_check_devices() checks one); %NULL for "cpu:1"
 * @model_path: the model directory (layout above)
 * @load_text_encoder: load the umT5 encoder and tokenizer (not needed when
 *   every session passes prompt embeddings)
 * @timeout_ms: deadline of every rank-side wait, 0 for the default
 * @precision: (nullable): the DiT's precision on GPU ranks: "fp32" (the
 *   default, also for %NULL: f32 weights and f32 math, the parity mode),
 *   "bf16" (spec 1.11 served precision: bf16 GEMM weights, about half the
 *   weight memory per rank, bf16 GEMM inputs with f32 accumulation, f32
 *   residual stream, norms and modulation; docs/design/cuda.md "BF16
 *   storage") or "fp8" (opt-in, compute capability 8.9 and later: E4M3
 *   GEMM weights with per-output-channel scales, per-token activation
 *   scales, f32 accumulation; attention, norms and the KV cache as in
 *   "bf16"; docs/design/cuda.md "FP8").  CPU ranks compute "bf16" in f32
 *   and run the fp8 path's oracle for "fp8".  Any other value fails
 *   lingbot_world_new()
 *
 * Initialise with %LINGBOT_WORLD_OPTIONS_INIT (not all zero: @devices
 * "cpu:1" and @load_text_encoder %TRUE, the rest 0 / %NULL), then set the
 * fields.  (A zeroed struct also works, @devices %NULL meaning "cpu:1",
 * but loads no text encoder.)
 */
typedef struct
{
  const char *devices;
  const char *model_path;
  gboolean load_text_encoder;
  guint timeout_ms;
  const char *precision;
} LingbotWorldOptions;

#define LINGBOT_WORLD_OPTIONS_INIT { "cpu:1", NULL, TRUE, 0, NULL }

LingbotWorld *lingbot_world_new (const LingbotWorldOptions * options,
    GError ** error);
gboolean lingbot_world_find_text_encoder (const char *model, char **t5_path,
    char **tokenizer_path, GError ** error);
gboolean lingbot_world_parse_precision (const char *precision,
    LingbotPrecision * math, GError ** error);
gboolean lingbot_world_check_devices (const char *devices, int *n_ranks,
    GError ** error);
gboolean lingbot_world_check_model (const char *model, gboolean text_encoder,
    GError ** error);
LingbotWorld *lingbot_world_ref (LingbotWorld * world);
void lingbot_world_unref (LingbotWorld * world);
gboolean lingbot_world_is_broken (LingbotWorld * world);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotWorld, lingbot_world_unref)
const char *lingbot_world_get_devices (LingbotWorld * world);
const char *lingbot_world_get_model_path (LingbotWorld * world);
const char *lingbot_world_get_precision (LingbotWorld * world);
int lingbot_world_get_n_ranks (LingbotWorld * world);
gboolean lingbot_world_has_dit (LingbotWorld * world);
gboolean lingbot_world_has_vae (LingbotWorld * world);
int lingbot_world_get_chunk_frames (LingbotWorld * world);
int lingbot_world_get_text_dim (LingbotWorld * world);
gboolean lingbot_world_has_text_encoder (LingbotWorld * world);
gboolean lingbot_world_count_prompt_tokens (LingbotWorld * world,
    const char *prompt, int *n_tokens, int *max_tokens, GError ** error);
void lingbot_world_lock (LingbotWorld * world);
void lingbot_world_unlock (LingbotWorld * world);

/* ---- the world's standalone decoder ---- */

/**
 * LingbotDecoder:
 *
 * A VAE decoder of its own on a world's ranks (lingbot_world_new_decoder()),
 * for latents that come without their session: chunks decoded in stream
 * order, its frames in lingbot_decoder_get_frames().
 */
typedef struct _LingbotDecoder LingbotDecoder;

LingbotDecoder *lingbot_world_new_decoder (LingbotWorld * world,
    int latent_height, int latent_width, int max_latent_frames,
    GError ** error);
void lingbot_decoder_free (LingbotDecoder * decoder);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotDecoder, lingbot_decoder_free)

/**
 * LingbotFramesFunc:
 * @frames: the frames being decoded into (lingbot_session_get_frames() or
 *   lingbot_decoder_get_frames())
 * @first: the first frame now final, counting from the chunk's frame 0
 * @n: how many, from @first on
 * @user_data: what was given with the function
 *
 * Frames of a decode in flight that are final (the decode goes latent
 * frame by latent frame, spec A.5): called on the decoding thread (rank
 * 0's), in order, once per latent frame; the next latent frame waits for
 * it.  It must not call into the session or decoder.
 */
typedef void (*LingbotFramesFunc) (const LingbotFrames * frames, int first,
    int n, gpointer user_data);

gboolean lingbot_decoder_decode (LingbotDecoder * decoder,
    const LingbotLatents * latents, int *n_frames, GError ** error);
void lingbot_decoder_set_frames_func (LingbotDecoder * decoder,
    LingbotFramesFunc func, gpointer user_data);
const LingbotFrames *lingbot_decoder_get_frames (LingbotDecoder * decoder);

/* ---- session ---- */

typedef struct _LingbotSession LingbotSession;

/**
 * LingbotSessionOptions:
 * @prompt: the text prompt (needs the world's text encoder), or %NULL
 * @prompt_embeds_path: a prompt-embeds safetensors file (lingbot-encode-prompt),
 *   used instead of the encoder when set
 * @image_path: the reference image (JPEG), or %NULL when @image_rgb is set
 * @image_rgb: packed RGB8 pixels of the reference image, @image_width x
 *   @image_height, row stride @image_stride bytes
 * @pixel_area: the output pixel budget of spec 6.1 (480 * 832 for 480p);
 *   ignored when @width and @height are set
 * @width: output width in pixels (multiple of 16), 0 = from @pixel_area
 * @height: output height in pixels (multiple of 16), 0 = from @pixel_area
 * @seed: noise seed (Philox, DESIGN.md 4)
 * @chunk_frames: latent frames per chunk, 0 = the model's (4)
 * @local_attn_frames: KV window in latent frames, 0 = the model's (18)
 * @sink_frames: attention sink in latent frames, -1 = the model's (6)
 * @sample_shift: sampler shift, 0 = 10
 * @timestep_indices: (nullable): %NULL = 0,250,500,750; else
 *   @n_timestep_indices values
 * @frames: video frames to deliver, 0 = unbounded.  Chunks are generated
 *   until the count is reached (13 frames from chunk 0, 16 from each later
 *   one for C = 4: 77 gives 5 chunks, spec 3.1) and the last chunk's
 *   decoded frames are cut to the exact count.  With @poses it must be 4n+1
 *   and is resolved as in spec 3.1 (whole chunks); 0 then means every
 *   frame the poses cover
 * @fps: the session frame rate (16)
 * @poses: (nullable): explicit camera poses [n_poses, 4, 4] f32 c2w
 *   (poses.npy) with @intrinsics [n, 4] (fx, fy, cx, cy; the first row is
 *   used) calibrated at @intrinsics_width x @intrinsics_height (0 = 832 x
 *   480); @intrinsics %NULL uses the image-size default of spec 2.5; then
 *   keys are ignored (offline path, spec 2.9)
 * @noise_path: (nullable): read noise from this safetensors file instead of
 *   Philox (parity tests): tensors `output.chunk{chunk}.step0.x_in` and
 *   `output.chunk{chunk}.step{step}.renoise` (the golden DiT fixture names)
 * @max_attention_size: the self-attention span in tokens (spec 1.8:
 *   queries attend to the last @max_attention_size KV-cache slots up to
 *   the chunk's end); 0 = the model's (config.json `max_attention_size`,
 *   absent = the cache's capacity); above the capacity = the capacity;
 *   negative is %LINGBOT_ERROR_INVALID_ARGUMENT.  It wins over the model's
 *   value.
 *
 * Without @prompt_embeds_path the world's text encoder encodes @prompt
 * (%NULL = the empty prompt); a world without one is an error.
 *
 * Initialise with %LINGBOT_SESSION_OPTIONS_INIT (not all zero:
 * @pixel_area 480 * 832, @sink_frames -1, @fps 16, the rest 0 / %NULL),
 * then set the fields.
 */
typedef struct
{
  const char *prompt;
  const char *prompt_embeds_path;
  const char *image_path;
  const guint8 *image_rgb;
  int image_width, image_height, image_stride;
  int pixel_area;
  int width, height;
  guint64 seed;
  int chunk_frames;
  int local_attn_frames;
  int sink_frames;
  double sample_shift;
  const int *timestep_indices;
  int n_timestep_indices;
  guint frames;
  int fps;
  const float *poses;
  guint n_poses;
  const float *intrinsics;
  int intrinsics_width, intrinsics_height;
  const char *noise_path;
  int max_attention_size;
} LingbotSessionOptions;

#define LINGBOT_SESSION_OPTIONS_INIT { NULL, NULL, NULL, NULL, 0, 0, 0, \
    480 * 832, 0, 0, 0, 0, 0, -1, 0.0, NULL, 0, 0, 16, NULL, 0, NULL, \
    0, 0, NULL, 0 }

/**
 * LingbotChunkStats:
 * @index: chunk index
 * @frames: video frames the chunk yields (the last one possibly cut)
 * @dit_seconds: the DiT's 4 + 1 passes
 * @vae_seconds: the decode
 * @compute_seconds: control + condition encode + DiT (generate), plus the
 *   decode when the same struct is passed to lingbot_session_decode()
 * @keys: the key set that steered the chunk (0 offline)
 * @decode_start_us: g_get_monotonic_time() when the decode started (set by
 *   the decode calls)
 * @decode_end_us: and when it ended
 * @restarts: how often the chunk's keys were replaced while it was made
 *   (lingbot_session_set_restart_func()): before its first DiT pass (free)
 *   or after a DiT pass (a restart from pass 0, the passes done
 *   discarded); 0 without a restart function
 * @restart_passes: the DiT passes discarded by those restarts (their time
 *   is in @dit_seconds and @compute_seconds)
 *
 * Per-chunk figures (DESIGN.md 6), measured with g_get_monotonic_time().
 */
typedef struct
{
  guint64 index;
  int frames;
  double dit_seconds;
  double vae_seconds;
  double compute_seconds;
  guint keys;
  gint64 decode_start_us;
  gint64 decode_end_us;
  guint restarts;
  guint restart_passes;
} LingbotChunkStats;

LingbotSession *lingbot_session_new (LingbotWorld * world,
    const LingbotSessionOptions * options, GError ** error);
void lingbot_session_free (LingbotSession * session);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotSession, lingbot_session_free)
gboolean lingbot_session_check_image (const char *path, int *width,
    int *height, GError ** error);
gboolean lingbot_session_check_prompt_embeds (const char *path, int *width,
    GError ** error);
gboolean lingbot_session_output_size (int image_width, int image_height,
    int pixel_area, int *width, int *height, GError ** error);

int lingbot_session_get_width (LingbotSession * session);
int lingbot_session_get_height (LingbotSession * session);
int lingbot_session_get_latent_height (LingbotSession * session);
int lingbot_session_get_latent_width (LingbotSession * session);
int lingbot_session_get_chunk_frames (LingbotSession * session);
guint64 lingbot_session_get_chunk_index (LingbotSession * session);
guint lingbot_session_get_n_chunks (LingbotSession * session);
guint lingbot_session_get_n_frames (LingbotSession * session);
int lingbot_session_get_frame_count (LingbotSession * session,
    guint64 chunk_index);
gboolean lingbot_session_is_done (LingbotSession * session);
int lingbot_session_get_decode_ranks (LingbotSession * session);
LingbotControl *lingbot_session_get_control (LingbotSession * session);

/**
 * LingbotPassFunc:
 * @session: the session
 * @chunk: the chunk being generated (lingbot_session_get_chunk_index())
 * @pass: the DiT pass just done, counting from 0
 * @n_passes: DiT passes per chunk, n_steps + 1 (the clean pass included:
 *   5 with the default schedule)
 * @user_data: what was given to lingbot_session_set_pass_func()
 *
 * Called after each DiT pass of a chunk, on rank 0's worker thread (not
 * the thread calling lingbot_session_generate()), in pass order.  For
 * progress reports and tests; it must not call back into the session (it
 * may cancel the session's cancellable: the chunk then stops at the next
 * boundary, after @pass + 1 passes).  On device ranks "done" means
 * enqueued on the rank's stream.
 */
typedef void (*LingbotPassFunc) (LingbotSession * session, guint64 chunk,
    int pass, int n_passes, gpointer user_data);

/**
 * LingbotFailureFunc:
 * @session: the session
 * @chunk: the chunk being generated (lingbot_session_get_chunk_index())
 * @error: the failure, %LINGBOT_ERROR_TIMEOUT, prefixed with the rank that
 *   timed out, naming the operation and the rank it waited for (e.g.
 *   "rank 0: all_to_all_v (publish): no progress within 60000 ms (worker
 *   group world), waiting for rank 1"); valid during the call only
 * @user_data: what was given to lingbot_session_set_failure_func()
 *
 * Called on the rank thread that timed out, with the worker group's lock
 * held: it must not block and must not call the session, its world or
 * anything that waits for the ranks (copy @error and hand it to another
 * thread).
 */
typedef void (*LingbotFailureFunc) (LingbotSession * session, guint64 chunk,
    const GError * error, gpointer user_data);

/**
 * LingbotRestartFunc:
 * @session: the session
 * @chunk: the chunk being generated (lingbot_session_get_chunk_index())
 * @passes: DiT passes of the chunk done so far: 0 before the first (its
 *   condition encode done), else after a pass (n_steps + 1 after the
 *   clean pass)
 * @keys: (inout): the #LingbotKey set the chunk runs with; set it to the
 *   keys to restart with
 * @user_data: what was given to lingbot_session_set_restart_func()
 *
 * Asked whether the chunk in flight should be made with other keys (a
 * live key change): return %TRUE with the new set in *@keys to restart
 * the chunk with it, %FALSE (or the same set) to go on.  Called from the
 * thread calling lingbot_session_generate() for @passes 0, from rank 0's
 * worker thread after a pass; it must not call back into the session.
 *
 * Returns: whether to restart with *@keys.
 */
typedef gboolean (*LingbotRestartFunc) (LingbotSession * session,
    guint64 chunk, int passes, guint * keys, gpointer user_data);

void lingbot_session_set_restart_func (LingbotSession * session,
    LingbotRestartFunc func, int max_passes, int max_restarts,
    gpointer user_data, GDestroyNotify notify);
void lingbot_session_set_cancellable (LingbotSession * session,
    GCancellable * cancellable);
void lingbot_session_set_pass_func (LingbotSession * session,
    LingbotPassFunc func, gpointer user_data, GDestroyNotify notify);
void lingbot_session_set_failure_func (LingbotSession * session,
    LingbotFailureFunc func, gpointer user_data, GDestroyNotify notify);

gboolean lingbot_session_generate (LingbotSession * session, guint keys,
    LingbotChunkStats * stats, GError ** error);
const LingbotLatents *lingbot_session_get_latents (LingbotSession * session);
gboolean lingbot_session_decode (LingbotSession * session,
    const LingbotLatents * latents, int *n_frames, LingbotChunkStats * stats,
    GError ** error);
void lingbot_session_set_frames_func (LingbotSession * session,
    LingbotFramesFunc func, gpointer user_data);
const LingbotFrames *lingbot_session_get_frames (LingbotSession * session);
const LingbotFrames *lingbot_session_get_start_frames (LingbotSession *
    session);

/* the decode beside generation (session-handoff.c) */
gboolean lingbot_session_attach_decoder (LingbotSession * session,
    const char *devices, int n_slots, GError ** error);
gboolean lingbot_session_has_decoder (LingbotSession * session);
int lingbot_session_get_n_slots (LingbotSession * session);
void lingbot_session_claim_chunk (LingbotSession * session, guint64 chunk);
void lingbot_session_release_chunk (LingbotSession * session, guint64 chunk);
gsize lingbot_session_get_chunk_bytes (LingbotSession * session);
gboolean lingbot_session_read_chunk (LingbotSession * session,
    guint64 chunk, gpointer dst, gsize size, GError ** error);
gboolean lingbot_session_decode_chunk (LingbotSession * session,
    guint64 chunk, int *n_frames, LingbotChunkStats * stats, GError ** error);
guint64 lingbot_session_get_latent_host_bytes (LingbotSession * session);
guint64 lingbot_session_get_n_spills (LingbotSession * session);

G_END_DECLS

/* lingbot-gst: `lingbot-bench direct` and `lingbot-bench replay`: the whole
 * pipeline (control -> DiT -> VAE decode -> sink), chunk by chunk, with the
 * metrics of DESIGN.md 6 and the reference's names (spec B.9)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-bench direct --model DIR --image IMG [--control-trace TRACE]
 *       [--prompt-embeds F | --prompt TEXT] [--frames 77] [--fps 16]
 *       [--chunk-frames 4] [--devices cpu:1] [--engine auto|gst|session]
 *       [--output OUT.json] [--compare CONFIG_A CONFIG_B [--rounds N]]
 *   lingbot-bench replay [the same] [--duration 60] [--playout-delay S]
 *
 * direct runs as fast as it can.  replay runs in real time: chunk k is not
 * started before its request time on the trace's virtual clock (the
 * video time of its first frame, counted from chunk 0's start) and its
 * first frame is due one playout delay later; the report says which chunks
 * missed that deadline and by how much.  docs/performance.md documents every
 * field of the JSON report.
 *
 * Engines: `gst` runs the elements a user runs (lingbotcontrolsrc !
 * lingbotgen ! lingbotvaedec ! fakesink through gst_parse_launch), reading
 * the `lingbot-chunk` / `lingbot-decode` bus messages and timing each frame
 * at the sink with a pad probe (replay: a queue holding one playout delay of
 * frames before a clock-synchronised fakesink whose ts-offset puts frame n
 * at chunk 0's start + playout delay + n/fps; the trace is read offline, so
 * the keys are the virtual clock's, and the sink's back-pressure paces the
 * generator); `session` drives lingbot/lingbot.h
 * directly; `auto` (default) is gst when the elements are registered.
 *
 * --compare CONFIG_A CONFIG_B runs the two configurations alternately
 * (A B A B ..., --rounds N pairs) in one process and prints the steady
 * compute FPS ratio B/A of each pair and the chunk period ratio A/B (how
 * much faster B delivers chunks: `--compare "" decode-overlap` gives the
 * serial period over the overlapped one), and their medians.  A CONFIG is
 * whitespace-separated option=value overrides of the command line, e.g.
 * "devices=cpu:2" or "engine=session frames=45".
 */
#include "tools/bench-direct.h"
#include "tools/bench-direct-private.h"
#include "tools/bench-common.h"
#include "tools/bench-counters.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <sys/utsname.h>
#include <json-glib/json-glib.h>

#ifdef LINGBOT_BENCH_HAVE_GST
#include <gst/gst.h>
#include "gst/lingbot/gstlingbotmeta.h"
#endif

#include "comm/collectives.h"
#include "lingbot/backend.h"
#include "lingbot/lingbot.h"

/* ---- configuration ---- */

/* LingbotBenchConfig, and a run's LingbotBenchRunResult:
 * tools/bench-direct-private.h; its JSON report: tools/bench-direct-report.c */

static void
config_clear (LingbotBenchConfig * c)
{
  g_free (c->engine);
  g_free (c->model);
  g_free (c->image);
  g_free (c->trace);
  g_free (c->prompt);
  g_free (c->prompt_embeds);
  g_free (c->devices);
  g_free (c->precision);
  g_free (c->output);
  g_strfreev (c->rest);
  memset (c, 0, sizeof (*c));
}

/* Parses a copy of @argv into @c (defaults first). */
static gboolean
config_parse (LingbotBenchConfig * c, gboolean replay, char **argv,
    GError ** error)
{
  memset (c, 0, sizeof (*c));
  c->replay = replay;
  c->frames = replay ? 0 : 77;
  c->fps = 16;
  c->chunk_frames = 4;
  c->pixel_area = 0;
  c->seed = 42;
  c->duration = 60.0;
  c->rss_interval = -1.0;
  c->playout_delay = -1.0;
  c->rounds = 3;
  c->timeout = 0.0;

  GOptionEntry entries[] = {
    {"model", 'm', 0, G_OPTION_ARG_FILENAME, &c->model,
        "Model directory (release layout, or lingbot-mkmodel --full)", "DIR"},
    {"image", 'i', 0, G_OPTION_ARG_FILENAME, &c->image,
        "Reference image (JPEG)", "IMG"},
    {"control-trace", 't', 0, G_OPTION_ARG_FILENAME, &c->trace,
          "Control trace JSON ({\"events\":[{\"delay_s\",\"message\"}]})",
        "TRACE"},
    {"prompt", 'p', 0, G_OPTION_ARG_STRING, &c->prompt,
        "Text prompt (needs the model's umT5)", "TEXT"},
    {"prompt-embeds", 0, 0, G_OPTION_ARG_FILENAME, &c->prompt_embeds,
        "Prompt-embeds file instead of the encoder", "F"},
    {"devices", 'd', 0, G_OPTION_ARG_STRING, &c->devices,
        "cpu:N or GPU ordinals 0,1,.. (default cpu:1)", "D"},
    {"precision", 0, 0, G_OPTION_ARG_STRING, &c->precision,
        "DiT precision on GPU ranks: fp32 (default), bf16 or fp8", "P"},
    {"decode-overlap", 0, 0, G_OPTION_ARG_NONE, &c->decode_overlap,
        "session engine: decode on its own worker group in a second "
          "thread, beside the generation (the elements always do, unless "
          "LINGBOT_DECODE_OVERLAP=0)", NULL},
    {"frames", 'n', 0, G_OPTION_ARG_INT, &c->frames,
        "Video frames (direct: default 77; replay: from --duration)", "N"},
    {"fps", 0, 0, G_OPTION_ARG_INT, &c->fps, "Frame rate (default 16)", "F"},
    {"chunk-frames", 'c', 0, G_OPTION_ARG_INT, &c->chunk_frames,
        "Latent frames per chunk (default 4)", "C"},
    {"width", 0, 0, G_OPTION_ARG_INT, &c->width, "Output width (x16)", "W"},
    {"height", 0, 0, G_OPTION_ARG_INT, &c->height, "Output height (x16)",
        "H"},
    {"pixel-area", 0, 0, G_OPTION_ARG_INT, &c->pixel_area,
        "Output pixel budget (default 480*832)", "A"},
    {"seed", 's', 0, G_OPTION_ARG_INT64, &c->seed, "Noise seed (42)", "S"},
    {"engine", 'e', 0, G_OPTION_ARG_STRING, &c->engine,
        "gst (the elements), session (lingbot.h) or auto (default)", "E"},
    {"output", 'o', 0, G_OPTION_ARG_FILENAME, &c->output,
        "Write the JSON report here (default: stdout)", "OUT.json"},
    {"duration", 0, 0, G_OPTION_ARG_DOUBLE, &c->duration,
        "replay: session length in seconds (default 60 = 957 frames)", "S"},
    {"playout-delay", 0, 0, G_OPTION_ARG_DOUBLE, &c->playout_delay,
        "replay: a chunk's first frame is due this long after its request "
          "(default: one chunk of video, 4*C/fps = 1 s)", "S"},
    {"rss-interval", 0, 0, G_OPTION_ARG_DOUBLE, &c->rss_interval,
        "Sample the resident memory every S seconds into rss_samples "
          "(replay: default 60, a soak test's figure; direct: default 0 = "
          "off)", "S"},
    {"compare", 0, 0, G_OPTION_ARG_NONE, &c->compare,
        "Run CONFIG_A and CONFIG_B alternately, print B/A ratios", NULL},
    {"rounds", 0, 0, G_OPTION_ARG_INT, &c->rounds,
        "--compare: A/B pairs (default 3)", "N"},
    {"timeout", 0, 0, G_OPTION_ARG_DOUBLE, &c->timeout,
        "Give up after this many seconds per run (default 600 + 3x "
          "duration)", "S"},
    {"quiet", 'q', 0, G_OPTION_ARG_NONE, &c->quiet,
        "No per-chunk lines on stderr", NULL},
    {G_OPTION_REMAINING, 0, 0, G_OPTION_ARG_STRING_ARRAY, &c->rest, NULL,
        NULL},
    {NULL}
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new (replay ?
      "[--compare CONFIG_A CONFIG_B] - real-time replay of a control trace" :
      "[--compare CONFIG_A CONFIG_B] - the whole pipeline, chunk metrics");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_autofree char *description = g_strconcat (replay ?
      "Runs in real time: chunk k is not started before its request time on "
      "the trace's clock (the video time of its first frame), and its first "
      "frame is due one --playout-delay later; the report says which chunks "
      "missed that deadline and by how much." :
      "Runs as fast as it can, chunk by chunk, and reports each chunk's "
      "times and the steady FPS (lingbot-bench replay runs the same in "
      "real time).",
      "\n\n--compare CONFIG_A CONFIG_B runs two configurations alternately "
      "(--rounds pairs) and prints the steady compute FPS ratio B/A and the "
      "chunk period ratio A/B of each pair and their medians.  A CONFIG is "
      "whitespace-separated "
      "option=value overrides of the command line, e.g. \"devices=cpu:2\" "
      "or \"engine=session precision=bf16\".  The JSON report's fields: "
      "docs/performance.md.", NULL);
  g_option_context_set_description (ctx, description);
  g_auto (GStrv) copy = g_strdupv (argv);
  int argc = (int) g_strv_length (copy);
  char **av = copy;
  /* g_option_context_parse() rearranges the array it is given; keep the
   * strings owned by @copy */
  g_autofree char **view = g_memdup2 (av, sizeof (char *) * (argc + 1));
  char **pv = view;
  if (!g_option_context_parse (ctx, &argc, &pv, error))
    return FALSE;
  if (c->devices == NULL)
    c->devices = g_strdup ("cpu:1");
  if (c->engine == NULL)
    c->engine = g_strdup ("auto");
  if (c->model == NULL || c->image == NULL) {
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_FAILED,
        "--model and --image are required");
    return FALSE;
  }
  if (c->prompt_embeds == NULL && c->prompt == NULL)
    c->prompt = g_strdup ("");
  if (c->fps < 1 || c->chunk_frames < 1 || c->frames < 0 || c->rounds < 1) {
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
        "--fps, --chunk-frames and --rounds must be positive");
    return FALSE;
  }
  if (replay && c->frames == 0) {
    c->frames = (int) lingbot_frame_count_for_duration (c->duration,
        (guint) c->fps, (guint) c->chunk_frames);
    if (c->frames == 0) {
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
          "--duration %.3g s is too short for one chunk", c->duration);
      return FALSE;
    }
  }
  if (!replay && c->frames == 0) {
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
        "--frames must be positive");
    return FALSE;
  }
  if (c->playout_delay < 0.0)
    c->playout_delay = 4.0 * c->chunk_frames / c->fps;
  if (c->timeout <= 0.0)
    c->timeout = 600.0 + 3.0 * c->frames / c->fps;
  if (!g_str_equal (c->engine, "auto") && !g_str_equal (c->engine, "gst")
      && !g_str_equal (c->engine, "session")) {
    g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
        "--engine must be auto, gst or session");
    return FALSE;
  }
  return lingbot_bench_check_output (c->output, error);
}

/* ---- collective byte counters: a counting wrapper around the group's
 * collectives class (tools/bench-counters.c, registered before any worker
 * group exists) ---- */

/* Installs the counting wrapper for the device type of @devices (after
 * loading its backend, whose init may register its own class). */
static const char *
comm_counters_install (const char *devices, GError ** error)
{
  LbBackend *be = NULL;
  int n = 0;
  g_autofree int *ordinals = NULL;
  if (!lingbot_backend_parse_devices (devices, &be, &n, &ordinals, error))
    return NULL;
  if ((guint) be->device_type >= 2)
    return "unknown";
  const LbCollectivesClass *k =
      lingbot_bench_counting_collectives (lb_collectives_lookup
      (be->device_type));
  lb_collectives_register (be->device_type, k);
  return k->name;
}

static void
comm_counters_snapshot (LingbotBenchCommCounts * out)
{
  lingbot_bench_comm_counts_total (out);
}

/* ---- resident memory, sampled beside the run (soak tests) ---- */

typedef struct
{
  GMutex lock;
  GCond cond;
  gboolean stop;
  gint64 t0;
  gint64 interval_us;
  GArray *samples;
} RssSampler;

/* the resident set of this process (/proc/self/statm), or -1 */
static gint64
rss_now (void)
{
  g_autofree char *statm = NULL;
  if (!g_file_get_contents ("/proc/self/statm", &statm, NULL, NULL))
    return -1;
  unsigned long size = 0, resident = 0;
  if (sscanf (statm, "%lu %lu", &size, &resident) != 2)
    return -1;
  return (gint64) resident *sysconf (_SC_PAGESIZE);
}

static void
rss_take (RssSampler * rs)
{
  LingbotBenchRssSample x =
      { lingbot_bench_seconds_since (rs->t0), rss_now () };
  g_array_append_val (rs->samples, x);
}

static gpointer
rss_thread (gpointer data)
{
  RssSampler *rs = data;
  g_mutex_lock (&rs->lock);
  gint64 next = rs->t0 + rs->interval_us;
  while (!rs->stop) {
    if (!g_cond_wait_until (&rs->cond, &rs->lock, next) && !rs->stop) {
      rss_take (rs);
      next += rs->interval_us;
    }
  }
  g_mutex_unlock (&rs->lock);
  return NULL;
}

static void
run_result_clear (LingbotBenchRunResult * r)
{
  g_clear_pointer (&r->chunks, g_array_unref);
  g_clear_pointer (&r->arrivals, g_array_unref);
  g_clear_pointer (&r->rss, g_array_unref);
  memset (r, 0, sizeof (*r));
}

static void
print_chunk (const LingbotBenchConfig * c, const LingbotBenchChunkRecord * k)
{
  if (c->quiet)
    return;
  g_autofree char *ks = lingbot_keys_to_string (k->keys);
  fprintf (stderr, "chunk %" G_GUINT64_FORMAT ": %d frames, keys %s, dit "
      "%.3f s, vae %.3f s, compute %.3f s, end %.3f s", k->index, k->frames,
      ks, k->dit_seconds, k->vae_seconds, k->compute_seconds, k->end_s);
  if (c->replay)
    fprintf (stderr, ", late %+.3f s", k->late_s);
  fprintf (stderr, "\n");
}

/* the replay deadline of each chunk, from chunk 0's start */
static void
set_deadlines (const LingbotBenchConfig * c, LingbotBenchRunResult * r)
{
  guint frames_before = 0;
  double origin = r->setup_s;
  for (guint i = 0; i < r->chunks->len; i++) {
    LingbotBenchChunkRecord *k =
        &g_array_index (r->chunks, LingbotBenchChunkRecord, i);
    k->request_s = origin + (double) frames_before / c->fps;
    k->due_s = k->request_s + c->playout_delay;
    k->late_s = k->first_frame_s - k->due_s;
    frames_before += (guint) k->frames;
  }
}

typedef struct
{
  LingbotSession *session;
  GAsyncQueue *q;               /* LingbotChunkStats * of generated chunks */
  GArray *decoded;              /* LingbotChunkStats, with the decode */
  GArray *n_frames;             /* int */
  GError *error;
} DecodeThread;

static gpointer
decode_thread (gpointer data)
{
  DecodeThread *t = data;
  for (;;) {
    LingbotChunkStats *st = g_async_queue_pop (t->q);
    if (st->index == G_MAXUINT64) {
      g_free (st);
      return NULL;
    }
    int n = 0;
    if (t->error == NULL && !lingbot_session_decode_chunk (t->session,
            st->index, &n, st, &t->error))
      g_prefix_error (&t->error, "decode of chunk %" G_GUINT64_FORMAT ": ",
          st->index);
    g_array_append_val (t->decoded, *st);
    g_array_append_val (t->n_frames, n);
    g_free (st);
  }
}

/* --decode-overlap: the decode on the session's own decoder group, in a
 * second thread; chunk i + 1 generates while chunk i decodes.  A chunk's
 * frames are ready (end_s) when its decode ends. */
static gboolean
run_session_overlapped (const LingbotBenchConfig * c, LingbotBenchRunResult * r,
    LingbotSession * session, const LingbotTraceChunk * plan,
    guint n_planned, gint64 t0, GError ** error)
{
  DecodeThread t = { session, g_async_queue_new (), g_array_new (FALSE,
        TRUE, sizeof (LingbotChunkStats)), g_array_new (FALSE, TRUE,
        sizeof (int)), NULL
  };
  GThread *th = g_thread_new ("bench-decode", decode_thread, &t);
  g_autoptr (GArray) starts = g_array_new (FALSE, TRUE, sizeof (double));
  gboolean ok = TRUE;

  for (guint i = 0; ok && !lingbot_session_is_done (session); i++) {
    guint keys = i < n_planned ? plan[i].keys : 0;
    if (i < n_planned && plan[i].reset_before)
      lingbot_control_reset_pose (lingbot_session_get_control (session));
    LingbotChunkStats *st = g_new0 (LingbotChunkStats, 1);
    double start = lingbot_bench_seconds_since (t0);
    g_array_append_val (starts, start);
    ok = lingbot_session_generate (session, keys, st, error);
    if (!ok) {
      g_prefix_error (error, "chunk %u: ", i);
      g_free (st);
      break;
    }
    st->keys = keys;
    lingbot_session_claim_chunk (session, st->index);
    g_async_queue_push (t.q, st);
  }
  LingbotChunkStats *end = g_new0 (LingbotChunkStats, 1);
  end->index = G_MAXUINT64;
  g_async_queue_push (t.q, end);
  g_thread_join (th);
  if (ok && t.error) {
    g_propagate_error (error, t.error);
    t.error = NULL;
    ok = FALSE;
  }
  for (guint i = 0; ok && i < t.decoded->len; i++) {
    const LingbotChunkStats *st =
        &g_array_index (t.decoded, LingbotChunkStats, i);
    int n = g_array_index (t.n_frames, int, i);
    LingbotBenchChunkRecord k = { 0 };
    k.index = st->index;
    k.frames = n;
    k.keys = st->keys;
    k.dit_seconds = st->dit_seconds;
    k.vae_seconds = st->vae_seconds;
    k.compute_seconds = st->compute_seconds;
    k.start_s = g_array_index (starts, double, i);
    k.decode_start_s = (st->decode_start_us - t0) / 1e6;
    k.decode_end_s = (st->decode_end_us - t0) / 1e6;
    k.end_s = k.first_frame_s = k.decode_end_s;
    k.wall_seconds = k.end_s - k.start_s;
    for (int f = 0; f < n; f++)
      g_array_append_val (r->arrivals, k.end_s);
    g_array_append_val (r->chunks, k);
    print_chunk (c, &k);
  }
  if (ok && c->replay)
    set_deadlines (c, r);
  r->latent_host_bytes = lingbot_session_get_latent_host_bytes (session);
  r->decoder_attached = TRUE;
  g_clear_error (&t.error);
  g_async_queue_unref (t.q);
  g_array_unref (t.decoded);
  g_array_unref (t.n_frames);
  return ok;
}

static gboolean
run_session (const LingbotBenchConfig * c, LingbotBenchRunResult * r,
    GError ** error)
{
  gint64 t0 = g_get_monotonic_time ();
  g_autoptr (LingbotControlTrace) trace = NULL;
  if (c->trace && !(trace = lingbot_control_trace_new_from_file (c->trace,
              error)))
    return FALSE;
  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  wo.devices = c->devices;
  wo.model_path = c->model;
  wo.precision = c->precision;
  wo.load_text_encoder = c->prompt_embeds == NULL;
  g_autoptr (LingbotWorld) world = lingbot_world_new (&wo, error);
  if (world == NULL)
    return FALSE;
  r->n_ranks = lingbot_world_get_n_ranks (world);
  LingbotSessionOptions so = LINGBOT_SESSION_OPTIONS_INIT;
  so.prompt = c->prompt_embeds ? NULL : c->prompt;
  so.prompt_embeds_path = c->prompt_embeds;
  so.image_path = c->image;
  if (c->pixel_area > 0)
    so.pixel_area = c->pixel_area;
  so.width = c->width;
  so.height = c->height;
  so.seed = (guint64) c->seed;
  so.chunk_frames = c->chunk_frames;
  so.frames = (guint) c->frames;
  so.fps = c->fps;
  g_autoptr (LingbotSession) session = lingbot_session_new (world, &so, error);
  if (session == NULL)
    return FALSE;
  const guint n_chunks = lingbot_session_get_n_chunks (session);
  g_autofree LingbotTraceChunk *plan = g_new0 (LingbotTraceChunk,
      MAX (n_chunks, 1));
  guint n_planned = trace ? lingbot_control_trace_schedule (trace, n_chunks,
      (guint) lingbot_session_get_chunk_frames (session), (guint) c->fps,
      plan) : 0;
  if (c->decode_overlap && !lingbot_session_attach_decoder (session, NULL,
          0, error))
    return FALSE;
  r->setup_s = lingbot_bench_seconds_since (t0);
  if (c->decode_overlap)
    return run_session_overlapped (c, r, session, plan, n_planned, t0, error);

  guint frames_before = 0;
  for (guint i = 0; !lingbot_session_is_done (session); i++) {
    guint keys = i < n_planned ? plan[i].keys : 0;
    if (i < n_planned && plan[i].reset_before)
      lingbot_control_reset_pose (lingbot_session_get_control (session));
    if (c->replay) {
      double request = r->setup_s + (double) frames_before / c->fps;
      double wait = request - lingbot_bench_seconds_since (t0);
      if (wait > 0)
        g_usleep ((gulong) (wait * 1e6));
    }
    LingbotChunkStats st = { 0 };
    int n = 0;
    LingbotBenchChunkRecord k = { 0 };
    k.start_s = lingbot_bench_seconds_since (t0);
    if (!lingbot_session_generate (session, keys, &st, error) ||
        !lingbot_session_decode (session, NULL, &n, &st, error)) {
      g_prefix_error (error, "chunk %u: ", i);
      return FALSE;
    }
    k.end_s = k.first_frame_s = lingbot_bench_seconds_since (t0);
    k.decode_start_s = (st.decode_start_us - t0) / 1e6;
    k.decode_end_s = (st.decode_end_us - t0) / 1e6;
    k.index = st.index;
    k.frames = n;
    k.keys = keys;
    k.dit_seconds = st.dit_seconds;
    k.vae_seconds = st.vae_seconds;
    k.compute_seconds = st.compute_seconds;
    k.wall_seconds = k.end_s - k.start_s;
    for (int f = 0; f < n; f++)
      g_array_append_val (r->arrivals, k.end_s);
    g_array_append_val (r->chunks, k);
    frames_before += (guint) n;
    if (c->replay)
      set_deadlines (c, r);
    print_chunk (c, &g_array_index (r->chunks, LingbotBenchChunkRecord,
            r->chunks->len - 1));
  }
  r->latent_host_bytes = lingbot_session_get_latent_host_bytes (session);
  r->decoder_attached = lingbot_session_has_decoder (session);
  return TRUE;
}

#ifdef LINGBOT_BENCH_HAVE_GST

typedef struct
{
  guint64 index;
  int frames;
  guint keys;
  double dit_seconds, compute_seconds, vae_seconds;
  double posted_s;
  double decode_start_s, decode_end_s;
  gboolean decoded;
} ChunkMsg;

typedef struct
{
  GMutex lock;
  gint64 t0;
  GArray *gen;                  /* ChunkMsg, in posting order */
  GArray *dec;                  /* ChunkMsg (index, vae_seconds) */
  GArray *arrivals;             /* double */
  GstElement *sink;
  double ts_offset_extra;       /* replay: playout delay */
  gboolean ts_offset_set;
  GstLingbotSessionHandle *handle;      /* from the first chunk's meta */
} GstRun;

static GstBusSyncReply
on_bus_sync (GstBus * bus, GstMessage * msg, gpointer user_data)
{
  GstRun *g = user_data;
  const GstStructure *s;
  (void) bus;
  if (GST_MESSAGE_TYPE (msg) != GST_MESSAGE_ELEMENT ||
      !(s = gst_message_get_structure (msg)))
    return GST_BUS_PASS;
  ChunkMsg m = { 0 };
  m.posted_s = lingbot_bench_seconds_since (g->t0);
  gst_structure_get_uint64 (s, "index", &m.index);
  gst_structure_get_int (s, "frames", &m.frames);
  if (gst_structure_has_name (s, "lingbot-chunk")) {
    gst_structure_get_uint (s, "keys", &m.keys);
    gst_structure_get_double (s, "dit-seconds", &m.dit_seconds);
    gst_structure_get_double (s, "compute-seconds", &m.compute_seconds);
    g_mutex_lock (&g->lock);
    g_array_append_val (g->gen, m);
    if (g->sink && !g->ts_offset_set) {
      /* replay: the sink's clock starts at PLAYING, ours at chunk 0's
       * start (model load and session creation excluded) */
      double start = m.posted_s - m.compute_seconds;
      g_object_set (g->sink, "ts-offset",
          (gint64) ((start + g->ts_offset_extra) * GST_SECOND), NULL);
      g->ts_offset_set = TRUE;
    }
    g_mutex_unlock (&g->lock);
  } else if (gst_structure_has_name (s, "lingbot-decode")) {
    gint64 t;
    gst_structure_get_double (s, "vae-seconds", &m.vae_seconds);
    if (gst_structure_get_int64 (s, "decode-start", &t))
      m.decode_start_s = (t - g->t0) / 1e6;
    if (gst_structure_get_int64 (s, "decode-end", &t))
      m.decode_end_s = (t - g->t0) / 1e6;
    m.decoded = TRUE;
    g_mutex_lock (&g->lock);
    g_array_append_val (g->dec, m);
    g_mutex_unlock (&g->lock);
  }
  return GST_BUS_PASS;
}

static GstPadProbeReturn
on_frame (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  GstRun *g = user_data;
  guint n = 1;
  (void) pad;
  if (info->type & GST_PAD_PROBE_TYPE_BUFFER_LIST)
    n = gst_buffer_list_length (GST_PAD_PROBE_INFO_BUFFER_LIST (info));
  double t = lingbot_bench_seconds_since (g->t0);
  g_mutex_lock (&g->lock);
  for (guint i = 0; i < n; i++)
    g_array_append_val (g->arrivals, t);
  g_mutex_unlock (&g->lock);
  return GST_PAD_PROBE_OK;
}

/* the session, for its counters after the run */
static GstPadProbeReturn
on_latents (GstPad * pad, GstPadProbeInfo * info, gpointer user_data)
{
  GstRun *g = user_data;
  GstLingbotChunkMeta *meta =
      gst_buffer_get_lingbot_chunk_meta (GST_PAD_PROBE_INFO_BUFFER (info));
  (void) pad;
  g_mutex_lock (&g->lock);
  if (meta && g->handle == NULL)
    g->handle = gst_lingbot_session_handle_ref (meta->handle);
  g_mutex_unlock (&g->lock);
  return GST_PAD_PROBE_OK;
}

static gboolean
gst_elements_registered (void)
{
  const char *names[] = { "lingbotcontrolsrc", "lingbotgen",
    "lingbotvaedec"
  };
  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    GstElementFactory *f = gst_element_factory_find (names[i]);
    if (f == NULL)
      return FALSE;
    gst_object_unref (f);
  }
  return TRUE;
}

/**
 * lingbot_bench_scan_plugin_dir:
 *
 * Registers the lingbot plugin of this lingbot-bench's own tree, for when
 * GStreamer's search (GST_PLUGIN_PATH, the system plugin folders) did not
 * find the elements.  The folder is relative to the executable, never a
 * path fixed at build time: installed, LINGBOT_BENCH_PLUGIN_DIR from bindir
 * (the prefix's libdir/gstreamer-1.0, which GStreamer does not search by
 * itself under /usr/local); uninstalled (the executable's parent folder is
 * a meson build folder, one with meson-info/), that build folder's gst/.
 * Does nothing when the folder does not exist.
 */
void
lingbot_bench_scan_plugin_dir (void)
{
  g_autofree char *exe = g_file_read_link ("/proc/self/exe", NULL);
  g_autofree char *dir = NULL, *info = NULL, *plugins = NULL;

  if (exe == NULL)
    return;
  dir = g_path_get_dirname (exe);
  info = g_build_filename (dir, "..", "meson-info", NULL);
  if (g_file_test (info, G_FILE_TEST_IS_DIR))
    plugins = g_canonicalize_filename ("../gst", dir);
  else if (g_path_is_absolute (LINGBOT_BENCH_PLUGIN_DIR))
    plugins = g_strdup (LINGBOT_BENCH_PLUGIN_DIR);
  else
    plugins = g_canonicalize_filename (LINGBOT_BENCH_PLUGIN_DIR, dir);
  if (g_file_test (plugins, G_FILE_TEST_IS_DIR))
    gst_registry_scan_path (gst_registry_get (), plugins);
}

/* The elements, from GST_PLUGIN_PATH / the system, else from the plugin
 * folder of this executable's tree. */
static gboolean
gst_elements_available (void)
{
  if (gst_elements_registered ())
    return TRUE;
  lingbot_bench_scan_plugin_dir ();
  return gst_elements_registered ();
}

static gboolean
run_gst (const LingbotBenchConfig * c, LingbotBenchRunResult * r,
    GError ** error)
{
  GstRun g = { 0 };
  gboolean ok = FALSE;
  g_autofree char *desc = g_strdup_printf ("%slingbotgen name=gen ! "
      "lingbotvaedec name=dec ! %s fakesink name=sink %s",
      c->trace ? "lingbotcontrolsrc name=ctl ! " : "",
      c->replay ? "queue name=q max-size-bytes=0 max-size-time=0 "
      "max-size-buffers=64 !" : "",
      c->replay ? "sync=true async=false" : "sync=false async=false");
  GError *perr = NULL;
  GstElement *p = gst_parse_launch (desc, &perr);
  if (perr != NULL) {
    /* a pipeline may come back with a recoverable error: refuse it too */
    g_propagate_error (error, perr);
    if (p)
      gst_object_unref (p);
    return FALSE;
  }
  GstElement *gen = gst_bin_get_by_name (GST_BIN (p), "gen");
  GstElement *sink = gst_bin_get_by_name (GST_BIN (p), "sink");
  GstElement *ctl = gst_bin_get_by_name (GST_BIN (p), "ctl");
  GstElement *q = gst_bin_get_by_name (GST_BIN (p), "q");
  if (c->precision)
    gst_util_set_object_arg (G_OBJECT (gen), "precision", c->precision);
  g_object_set (gen, "model-path", c->model, "image-location", c->image,
      "devices", c->devices, "frames", (guint) c->frames, "fps", c->fps,
      "chunk-frames", c->chunk_frames, "seed", (guint64) c->seed, "is-live",
      FALSE, NULL);
  if (c->prompt_embeds)
    g_object_set (gen, "prompt-embeds", c->prompt_embeds, NULL);
  else
    g_object_set (gen, "prompt", c->prompt, NULL);
  if (c->width > 0)
    g_object_set (gen, "width", c->width, NULL);
  if (c->height > 0)
    g_object_set (gen, "height", c->height, NULL);
  if (c->pixel_area > 0)
    g_object_set (gen, "pixel-area", c->pixel_area, NULL);
  if (ctl)
    g_object_set (ctl, "location", c->trace, "is-live", FALSE, NULL);
  if (q) {
    /* the jitter buffer holds one playout delay of video */
    guint n = (guint) MAX (1.0, ceil (c->playout_delay * c->fps));
    g_object_set (q, "max-size-buffers", n, NULL);
  }

  g_mutex_init (&g.lock);
  g.gen = g_array_new (FALSE, TRUE, sizeof (ChunkMsg));
  g.dec = g_array_new (FALSE, TRUE, sizeof (ChunkMsg));
  g.arrivals = r->arrivals;
  g.sink = c->replay ? sink : NULL;
  g.ts_offset_extra = c->playout_delay;
  /* frames are timed where they become ready for playout: the sink (direct)
   * or the jitter buffer's input (replay) */
  GstPad *probe_pad = gst_element_get_static_pad (q ? q : sink, "sink");
  gst_pad_add_probe (probe_pad, GST_PAD_PROBE_TYPE_BUFFER |
      GST_PAD_PROBE_TYPE_BUFFER_LIST, on_frame, &g, NULL);
  gst_object_unref (probe_pad);
  probe_pad = gst_element_get_static_pad (gen, "src");
  gst_pad_add_probe (probe_pad, GST_PAD_PROBE_TYPE_BUFFER, on_latents, &g,
      NULL);
  gst_object_unref (probe_pad);
  GstBus *bus = gst_element_get_bus (p);
  gst_bus_set_sync_handler (bus, on_bus_sync, &g, NULL);

  g.t0 = g_get_monotonic_time ();
  if (gst_element_set_state (p, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    /* the error is on the bus */
  }
  GstMessage *msg = gst_bus_timed_pop_filtered (bus,
      (GstClockTime) (c->timeout * GST_SECOND),
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  if (msg == NULL) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
        "pipeline did not finish within %.0f s", c->timeout);
  } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    GError *err = NULL;
    g_autofree char *dbg = NULL;
    gst_message_parse_error (msg, &err, &dbg);
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "%s: %s",
        GST_OBJECT_NAME (GST_MESSAGE_SRC (msg)), err->message);
    g_error_free (err);
  } else {
    ok = TRUE;
  }
  if (msg)
    gst_message_unref (msg);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_bus_set_sync_handler (bus, NULL, NULL, NULL);
  gst_object_unref (bus);

  if (ok) {
    /* merge generate + decode messages with the frame times */
    guint frames_before = 0;
    for (guint i = 0; i < g.gen->len; i++) {
      ChunkMsg *m = &g_array_index (g.gen, ChunkMsg, i);
      LingbotBenchChunkRecord k = { 0 };
      k.index = m->index;
      k.frames = m->frames;
      k.keys = m->keys;
      k.dit_seconds = m->dit_seconds;
      for (guint j = 0; j < g.dec->len; j++) {
        ChunkMsg *d = &g_array_index (g.dec, ChunkMsg, j);
        if (d->index == m->index) {
          k.vae_seconds = d->vae_seconds;
          k.decode_start_s = d->decode_start_s;
          k.decode_end_s = d->decode_end_s;
        }
      }
      k.compute_seconds = m->compute_seconds + k.vae_seconds;
      k.start_s = m->posted_s - m->compute_seconds;
      if (frames_before + (guint) k.frames > r->arrivals->len) {
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
            "chunk %" G_GUINT64_FORMAT " announced %d frames but the sink "
            "saw only %u in all", k.index, k.frames, r->arrivals->len);
        ok = FALSE;
        break;
      }
      k.first_frame_s = g_array_index (r->arrivals, double, frames_before);
      k.end_s = g_array_index (r->arrivals, double,
          frames_before + k.frames - 1);
      k.wall_seconds = k.end_s - k.start_s;
      frames_before += (guint) k.frames;
      g_array_append_val (r->chunks, k);
    }
    if (ok && r->chunks->len > 0)
      r->setup_s =
          g_array_index (r->chunks, LingbotBenchChunkRecord, 0).start_s;
    if (ok && c->replay)
      set_deadlines (c, r);
    for (guint i = 0; ok && i < r->chunks->len; i++)
      print_chunk (c, &g_array_index (r->chunks, LingbotBenchChunkRecord, i));
  }

  if (g.handle) {
    r->latent_host_bytes =
        lingbot_session_get_latent_host_bytes (g.handle->session);
    r->decoder_attached = lingbot_session_has_decoder (g.handle->session);
    gst_lingbot_session_handle_unref (g.handle);
  }
  g_array_unref (g.gen);
  g_array_unref (g.dec);
  g_mutex_clear (&g.lock);
  gst_clear_object (&ctl);
  gst_clear_object (&q);
  gst_object_unref (gen);
  gst_object_unref (sink);
  gst_object_unref (p);
  return ok;
}
#endif

static gboolean
run_once (const LingbotBenchConfig * c, LingbotBenchRunResult * r,
    GError ** error)
{
  memset (r, 0, sizeof (*r));
  r->chunks = g_array_new (FALSE, TRUE, sizeof (LingbotBenchChunkRecord));
  r->arrivals = g_array_new (FALSE, TRUE, sizeof (double));
  r->collectives = comm_counters_install (c->devices, error);
  if (r->collectives == NULL)
    return FALSE;
  int n = 0;
  LbBackend *be = NULL;
  g_autofree int *ord = NULL;
  if (lingbot_backend_parse_devices (c->devices, &be, &n, &ord, NULL))
    r->n_ranks = n;

  gboolean use_gst = FALSE;
#ifdef LINGBOT_BENCH_HAVE_GST
  gboolean have = gst_elements_available ();
  if (g_str_equal (c->engine, "gst") && !have) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
        "the lingbot elements are not registered (GST_PLUGIN_PATH?)");
    return FALSE;
  }
  use_gst = have && !g_str_equal (c->engine, "session");
#else
  if (g_str_equal (c->engine, "gst")) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
        "built without GStreamer: only --engine session");
    return FALSE;
  }
#endif
  LingbotBenchCommCounts before, after;
  comm_counters_snapshot (&before);
  gboolean ok;
  /* resident memory at the start and every --rss-interval seconds */
  const double interval = c->rss_interval >= 0 ? c->rss_interval :
      c->replay ? 60.0 : 0.0;
  RssSampler rs = { 0 };
  GThread *sampler = NULL;
  r->rss = g_array_new (FALSE, FALSE, sizeof (LingbotBenchRssSample));
  if (interval > 0) {
    g_mutex_init (&rs.lock);
    g_cond_init (&rs.cond);
    rs.t0 = g_get_monotonic_time ();
    rs.interval_us = (gint64) (interval * 1e6);
    rs.samples = r->rss;
    rss_take (&rs);
    sampler = g_thread_new ("rss-sampler", rss_thread, &rs);
  }
#ifdef LINGBOT_BENCH_HAVE_GST
  if (use_gst) {
    r->engine = "gst";
    ok = run_gst (c, r, error);
  } else
#endif
  {
    r->engine = "session";
    ok = run_session (c, r, error);
  }
  (void) use_gst;
  if (sampler) {
    g_mutex_lock (&rs.lock);
    rs.stop = TRUE;
    g_cond_signal (&rs.cond);
    g_mutex_unlock (&rs.lock);
    g_thread_join (sampler);
    g_mutex_clear (&rs.lock);
    g_cond_clear (&rs.cond);
  }
  comm_counters_snapshot (&after);
  lingbot_bench_comm_counts_diff (&after, &before, &r->comm);
  if (ok && r->chunks->len == 0) {
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "no chunk ran");
    ok = FALSE;
  }
  return ok;
}

/* ---- compare ---- */

/* One JSON value on one line of stdout (the --compare progress lines),
 * written by json-glib: strings escaped, numbers as JSON has them. */
static void
print_json_line (JsonNode * node)
{
  g_autofree char *s = json_to_string (node, FALSE);
  printf ("%s\n", s);
  fflush (stdout);
}

static char **
arm_argv (char **argv, const char *config)
{
  GPtrArray *a = g_ptr_array_new ();
  for (int i = 0; argv[i]; i++)
    g_ptr_array_add (a, g_strdup (argv[i]));
  g_auto (GStrv) words = g_strsplit_set (config, " \t", -1);
  for (int i = 0; words[i]; i++)
    if (*words[i])
      g_ptr_array_add (a, g_strdup_printf ("--%s", words[i]));
  g_ptr_array_add (a, NULL);
  return (char **) g_ptr_array_free (a, FALSE);
}

static int
run_compare (gboolean replay, const LingbotBenchConfig * base, char **argv)
{
  const char *name = replay ? "replay" : "direct";
  if (base->rest == NULL || g_strv_length (base->rest) != 2) {
    fprintf (stderr, "lingbot-bench %s: --compare needs CONFIG_A CONFIG_B\n",
        name);
    return 2;
  }
  const char *cfg[2] = { base->rest[0], base->rest[1] };
  g_autoptr (JsonBuilder) b = json_builder_new ();
  g_autoptr (GArray) ratios = g_array_new (FALSE, FALSE, sizeof (double));
  g_autoptr (GArray) pratios = g_array_new (FALSE, FALSE, sizeof (double));
  json_builder_begin_object (b);
  lingbot_bench_json_set_string (b, "bench", "compare");
  lingbot_bench_json_set_string (b, "mode", name);
  lingbot_bench_json_set_string (b, "a", cfg[0]);
  lingbot_bench_json_set_string (b, "b", cfg[1]);
  lingbot_bench_json_set_string (b, "metric", "chunk_compute_fps_weighted");
  json_builder_set_member_name (b, "runs");
  json_builder_begin_array (b);
  JsonBuilder *rounds = json_builder_new ();
  json_builder_begin_array (rounds);
  for (int round = 0; round < base->rounds; round++) {
    double fps[2] = { 0, 0 }, per[2] = { 0, 0 };
    for (int arm = 0; arm < 2; arm++) {
      g_auto (GStrv) av = arm_argv (argv, cfg[arm]);
      LingbotBenchConfig c;
      LingbotBenchRunResult r;
      g_autoptr (GError) err = NULL;
      if (!config_parse (&c, replay, av, &err)) {
        fprintf (stderr, "lingbot-bench %s: config \"%s\": %s\n", name,
            cfg[arm], err->message);
        config_clear (&c);
        g_object_unref (rounds);
        return 2;
      }
      c.quiet = TRUE;
      if (!run_once (&c, &r, &err)) {
        fprintf (stderr, "lingbot-bench %s: config \"%s\": %s\n", name,
            cfg[arm], err->message);
        run_result_clear (&r);
        config_clear (&c);
        g_object_unref (rounds);
        return 1;
      }
      fps[arm] = lingbot_bench_steady_fps (&r);
      per[arm] = lingbot_bench_mean_period (&r);
      lingbot_bench_add_report (b, &c, &r);
      run_result_clear (&r);
      config_clear (&c);
    }
    double ratio = fps[0] > 0 ? fps[1] / fps[0] : 0.0;
    double pratio = per[1] > 0 ? per[0] / per[1] : 0.0;
    g_array_append_val (ratios, ratio);
    g_array_append_val (pratios, pratio);
    g_autoptr (JsonBuilder) line = json_builder_new ();
    json_builder_begin_object (line);
    lingbot_bench_json_set_int (line, "round", round);
    lingbot_bench_json_set_double (line, "a", fps[0]);
    lingbot_bench_json_set_double (line, "b", fps[1]);
    lingbot_bench_json_set_double (line, "ratio", ratio);
    lingbot_bench_json_set_double (line, "period_a", per[0]);
    lingbot_bench_json_set_double (line, "period_b", per[1]);
    lingbot_bench_json_set_double (line, "period_ratio", pratio);
    json_builder_end_object (line);
    JsonNode *node = json_builder_get_root (line);
    print_json_line (node);
    json_builder_add_value (rounds, node);
  }
  json_builder_end_array (b);
  json_builder_end_array (rounds);
  json_builder_set_member_name (b, "rounds");
  json_builder_add_value (b, json_builder_get_root (rounds));
  g_object_unref (rounds);
  g_autoptr (GArray) sorted = g_array_copy (ratios);
  double *sv = (double *) (void *) sorted->data;
  lingbot_bench_sort (sv, sorted->len);
  double median = lingbot_bench_percentile (sv, sorted->len, 0.5);
  g_autoptr (GArray) psorted = g_array_copy (pratios);
  double *pv = (double *) (void *) psorted->data;
  lingbot_bench_sort (pv, psorted->len);
  double pmedian = lingbot_bench_percentile (pv, psorted->len, 0.5);
  lingbot_bench_json_set_double (b, "median_ratio", median);
  lingbot_bench_json_set_double (b, "median_period_ratio", pmedian);
  json_builder_end_object (b);
  g_autoptr (JsonBuilder) last = json_builder_new ();
  json_builder_begin_object (last);
  lingbot_bench_json_set_string (last, "a", cfg[0]);
  lingbot_bench_json_set_string (last, "b", cfg[1]);
  lingbot_bench_json_set_int (last, "rounds", ratios->len);
  lingbot_bench_json_set_double (last, "median_ratio", median);
  lingbot_bench_json_set_double (last, "median_period_ratio", pmedian);
  json_builder_end_object (last);
  g_autoptr (JsonNode) last_node = json_builder_get_root (last);
  print_json_line (last_node);
  g_autoptr (GError) err = NULL;
  if (base->output && !lingbot_bench_write_json (b, base->output, &err)) {
    fprintf (stderr, "lingbot-bench %s: %s\n", name, err->message);
    return 1;
  }
  return 0;
}

/* ---- entry points ---- */

static int
bench_main (gboolean replay, int argc, char **argv)
{
  const char *name = replay ? "replay" : "direct";
  LingbotBenchConfig c;
  g_autoptr (GError) err = NULL;
  (void) argc;
#ifdef LINGBOT_BENCH_HAVE_GST
  gst_init (NULL, NULL);
#endif
  if (!config_parse (&c, replay, argv, &err)) {
    fprintf (stderr, "lingbot-bench %s: %s\n", name, err->message);
    config_clear (&c);
    return 2;
  }
  if (c.compare) {
    int rc = run_compare (replay, &c, argv);
    config_clear (&c);
    return rc;
  }
  if (c.rest && c.rest[0]) {
    fprintf (stderr, "lingbot-bench %s: unexpected argument \"%s\"\n", name,
        c.rest[0]);
    config_clear (&c);
    return 2;
  }
  LingbotBenchRunResult r;
  int rc = 0;
  if (!run_once (&c, &r, &err)) {
    fprintf (stderr, "lingbot-bench %s: %s\n", name, err->message);
    rc = 1;
  } else {
    g_autoptr (JsonBuilder) b = json_builder_new ();
    lingbot_bench_add_report (b, &c, &r);
    if (!lingbot_bench_write_json (b, c.output, &err)) {
      fprintf (stderr, "lingbot-bench %s: %s\n", name, err->message);
      rc = 1;
    } else if (!c.quiet && c.output) {
      fprintf (stderr, "%s: %u chunks, %.2f steady compute fps -> %s\n",
          name, r.chunks->len, lingbot_bench_steady_fps (&r), c.output);
    }
  }
  run_result_clear (&r);
  config_clear (&c);
  return rc;
}

int
lingbot_bench_direct_main (int argc, char **argv)
{
  return bench_main (FALSE, argc, argv);
}

int
lingbot_bench_replay_main (int argc, char **argv)
{
  return bench_main (TRUE, argc, argv);
}

/* lingbot-gst: what the element tests (tests/gst/test-gst-*.c) share
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The fixture: a tiny random model written at start-up into a temporary
 * directory (DiT tiny preset with chunk 4, VAE width 8, a prompt-embeds
 * file so that no umT5 is needed, and a JPEG start image): 64x64 output,
 * 29 frames = 2 chunks (13 + 16).  The trace is tests/data/gst/trace.json.
 * Then running a pipeline to its end (Run: samples, chunk and decode
 * messages, statistics, the first error), the checks on it, and main().
 *
 * CK_FORK=no (meson.build): the model writers start OpenMP threads, which
 * a forked child must not inherit.
 */
#pragma once

#include "test-fixture.h"
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <gst/app/gstappsink.h>
#include <gst/base/gstbasesink.h>
#include <gst/video/navigation.h>
#include <gst/video/video.h>
#include "gst/lingbot/gstlingbotcontext.h"
#include "gst/gstlingbotcontrolsrc.h"
#include "gst/lingbot/gstlingbotmemory.h"
#include "kernels/error.h"
#include "lingbot/backend.h"
#include "lingbot/checkpoint.h"
#include "lingbot/lingbot-private.h"
#include "lingbot/text-encoder.h"
#include "lingbot/text-encoder-random.h"
#include "lingbot/tokenizer.h"

/* the fixture (test-gst-common.c) */
extern char *tmpdir;
extern char *model_dir;
extern char *embeds_path;
extern char *image_path;
extern char *trace_path;
extern char *malformed_path;
extern char *held_trace_path;   /* W held across chunks, then D tapped */

#define N_FRAMES 29

typedef struct
{
  GPtrArray *samples;           /* GstSample */
  GArray *chunk_frames;         /* int, per lingbot-chunk message */
  GArray *chunk_keys;           /* guint, per lingbot-chunk message */
  GArray *chunk_revisions;      /* guint, per lingbot-chunk message */
  GArray *chunk_taps;           /* gboolean, per lingbot-chunk message */
  GArray *decode_seconds;       /* double, lingbot-decode compute-seconds */
  GArray *decode_frames;        /* int, lingbot-decode frames */
  GArray *chunk_pts;            /* GstClockTime, lingbot-chunk pts */
  GArray *chunk_start;          /* GstClockTime, lingbot-chunk running-time */
  GstStructure *sink_stats;     /* the stats of the element "sink" at EOS */
  GstStructure *gen_stats;      /* those of the elements "gen" and "dec" */
  GstStructure *dec_stats;
  GArray *chunk_compute;        /* double, lingbot-chunk compute-seconds */
  guint latency_messages;
  GstStructure *summary;        /* lingbot-summary at EOS (eos TRUE) */
  GstObject *summary_src;       /* its element (compared, not held): a second
                                 * decoder behind a tee posts its own */
  GPtrArray *summaries;         /* GstStructure: every lingbot-summary */
  GPtrArray *warnings;          /* char *, warning messages */
  char *error;                  /* first error message */
  GQuark error_domain;
  int error_code;
  gboolean eos;
} Run;

#define assert_close(a, b) g_assert_cmpfloat_with_epsilon ((a), (b), 1e-9)

/* the helpers (test-gst-common.c) */
/* frees what @r holds */
void run_clear (Run * r);
/* empties @r for another run of the same pipeline */
void run_reset (Run * r);
/* the appsink "sink"'s new-sample callback: keeps the sample in the Run */
GstFlowReturn on_sample (GstAppSink * sink, gpointer user_data);
/* gst_parse_launch() of @desc, its appsink "sink" (if any) filling @r */
GstElement *pipeline_new (const char *desc, Run * r);
/* runs to EOS or error; the state change result of PLAYING */
GstStateChangeReturn pipeline_run (GstElement * p, Run * r);
/* pipeline_run() of @p, then freed: the run must end at EOS, no ERROR */
void run_to_eos (GstElement * p, Run * r);
/* lingbotgen @gen on the fixture's model and image, @devices, @extra */
char *gen_desc (const char *gen, const char *devices, const char *extra);
/* 29 frames, I420 64x64 at 16/1, PTS n/16 s, 2 chunks */
void check_run (Run * r);
/* lingbot-summary against the lingbot-decode messages of the same run */
void check_summary (Run * r);
/* the double @field of @s (an error without one) */
double field_double (const GstStructure * s, const char *field);
/* the largest byte difference between the frames of @a and @b */
int max_diff (Run * a, Run * b);
/* whether the first frame of @r is not one flat colour */
gboolean frames_vary (Run * r);
/* the LATENCY query's answer on the src pad of the element @name */
void query_latency (GstElement * p, const char *name, gboolean * live,
    GstClockTime * min, GstClockTime * max);
/* the world of @e's "lingbot.world" context, NULL without one */
LingbotWorld *element_world (GstElement * e);

/* test-gst-common.c: gst_check_init(), the fixture, @make_suite's tests
 * (results named after @file), the fixture removed; the exit status */
int test_gst_main (int *argc, char ***argv, Suite * (*make_suite) (void),
    const char *file);

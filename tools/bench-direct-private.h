/* lingbot-gst: what tools/bench-direct*.c share (not installed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include <json-glib/json-glib.h>

#include "tools/bench-counters.h"

G_BEGIN_DECLS

/* The command line of one direct/replay run (bench-direct.c parses it). */
typedef struct
{
  gboolean replay;
  char *engine;
  char *model;
  char *image;
  char *trace;
  char *prompt;
  char *prompt_embeds;
  char *devices;
  char *precision;
  gboolean decode_overlap;
  int frames;
  int fps;
  int chunk_frames;
  int width, height, pixel_area;
  gint64 seed;
  char *output;
  double duration;
  double playout_delay;
  double rss_interval;
  gboolean compare;
  int rounds;
  double timeout;
  gboolean quiet;
  char **rest;
} LingbotBenchConfig;

/* One chunk of a run. */

typedef struct
{
  guint64 index;
  int frames;
  guint keys;
  double dit_seconds, vae_seconds, compute_seconds, wall_seconds;
  double start_s, end_s, first_frame_s;
  double decode_start_s, decode_end_s;
  double request_s, due_s, late_s;
} LingbotBenchChunkRecord;

/* What a run measured. */

typedef struct
{
  const char *engine;
  const char *collectives;
  int n_ranks;
  GArray *chunks;               /* LingbotBenchChunkRecord */
  GArray *arrivals;             /* double: each frame at the sink */
  double setup_s;
  LingbotBenchCommCounts comm;
  guint64 latent_host_bytes;    /* latents that crossed host memory */
  gboolean decoder_attached;    /* the decode on its own worker group */
  GArray *rss;                  /* LingbotBenchRssSample, every --rss-interval */
} LingbotBenchRunResult;

/* One sample of the resident memory (--rss-interval). */

typedef struct
{
  double t_s;
  gint64 bytes;
} LingbotBenchRssSample;

/* Sets member @name of the open object to @v (0 when not finite). */
void lingbot_bench_json_set_double (JsonBuilder * b, const char *name,
    double v);
/* Sets member @name of the open object to @v. */
void lingbot_bench_json_set_int (JsonBuilder * b, const char *name, gint64 v);
/* Sets member @name of the open object to @v (null for NULL). */
void lingbot_bench_json_set_string (JsonBuilder * b, const char *name,
    const char *v);
/* The run's steady compute FPS: the frames over the compute seconds of
 * the chunks after the first (0 without any). */
double lingbot_bench_steady_fps (const LingbotBenchRunResult * r);
/* The mean steady chunk period in seconds (end to end, chunks >= 1). */
double lingbot_bench_mean_period (const LingbotBenchRunResult * r);
/* Adds the run's whole report (docs/performance.md) to @b as an object. */
void lingbot_bench_add_report (JsonBuilder * b, const LingbotBenchConfig * c,
    const LingbotBenchRunResult * r);
/* Writes @b's root, pretty-printed, to @path (stdout for NULL). */
gboolean lingbot_bench_write_json (JsonBuilder * b, const char *path,
    GError ** error);

G_END_DECLS

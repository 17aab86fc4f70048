/* lingbot-gst: the JSON report of `lingbot-bench direct` and `replay`
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Split from tools/bench-direct.c (see there): the summary of a run, the
 * machine, the configuration and every field docs/performance.md
 * documents, and the JSON writer.
 */
#include "tools/bench-direct-private.h"
#include "tools/bench-common.h"
#include "tools/bench-counters.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>

#ifdef LINGBOT_BENCH_HAVE_GST
#include <gst/gst.h>
#endif

#include "lingbot/lingbot.h"

/* ---- summary ---- */

static void
add_stats (JsonBuilder * b, const char *name, GArray * values)
{
  static const struct
  {
    const char *name;
    double p;
  } quantiles[] =
      { {"p50", 0.50}, {"p90", 0.90}, {"p95", 0.95}, {"p99", 0.99} };
  guint n = values->len;
  double *v = (double *) (void *) values->data;
  double sum = 0.0;
  lingbot_bench_sort (v, n);
  for (guint i = 0; i < n; i++)
    sum += v[i];
  json_builder_set_member_name (b, name);
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "count");
  json_builder_add_int_value (b, n);
  json_builder_set_member_name (b, "mean");
  json_builder_add_double_value (b, n ? sum / n : 0.0);
  json_builder_set_member_name (b, "min");
  json_builder_add_double_value (b, n ? v[0] : 0.0);
  for (guint i = 0; i < G_N_ELEMENTS (quantiles); i++) {
    json_builder_set_member_name (b, quantiles[i].name);
    json_builder_add_double_value (b, lingbot_bench_percentile (v, n,
            quantiles[i].p));
  }
  json_builder_set_member_name (b, "max");
  json_builder_add_double_value (b, n ? v[n - 1] : 0.0);
  json_builder_end_object (b);
}

void
lingbot_bench_json_set_double (JsonBuilder * b, const char *name, double v)
{
  json_builder_set_member_name (b, name);
  json_builder_add_double_value (b, isfinite (v) ? v : 0.0);
}

void
lingbot_bench_json_set_int (JsonBuilder * b, const char *name, gint64 v)
{
  json_builder_set_member_name (b, name);
  json_builder_add_int_value (b, v);
}

void
lingbot_bench_json_set_string (JsonBuilder * b, const char *name, const char *v)
{
  json_builder_set_member_name (b, name);
  if (v)
    json_builder_add_string_value (b, v);
  else
    json_builder_add_null_value (b);
}

double
lingbot_bench_steady_fps (const LingbotBenchRunResult * r)
{
  double frames = 0, secs = 0;
  for (guint i = 1; i < r->chunks->len; i++) {
    const LingbotBenchChunkRecord *k =
        &g_array_index (r->chunks, LingbotBenchChunkRecord, i);
    frames += k->frames;
    secs += k->compute_seconds;
  }
  return secs > 0 ? frames / secs : 0.0;
}

/* The mean steady chunk period, end_s(k) - end_s(k-1) over k >= 1 (the
 * summary's chunk_period_seconds.mean); 0 with fewer than 2 chunks. */
double
lingbot_bench_mean_period (const LingbotBenchRunResult * r)
{
  const guint n = r->chunks->len;
  if (n < 2)
    return 0.0;
  double sum = 0;
  for (guint i = 1; i < n; i++)
    sum += g_array_index (r->chunks, LingbotBenchChunkRecord, i).end_s -
        g_array_index (r->chunks, LingbotBenchChunkRecord, i - 1).end_s;
  return sum / (n - 1);
}

static char *
cpu_model (void)
{
  g_autofree char *info = NULL;
  if (g_file_get_contents ("/proc/cpuinfo", &info, NULL, NULL)) {
    g_auto (GStrv) lines = g_strsplit (info, "\n", -1);
    for (int i = 0; lines[i]; i++)
      if (g_str_has_prefix (lines[i], "model name")) {
        const char *colon = strchr (lines[i], ':');
        if (colon)
          return g_strstrip (g_strdup (colon + 1));
      }
  }
  return g_strdup ("unknown");
}

static void
add_machine (JsonBuilder * b)
{
  struct utsname u;
  g_autofree char *cpu = cpu_model ();
  g_autoptr (GDateTime) now = g_date_time_new_now_utc ();
  g_autofree char *date = g_date_time_format_iso8601 (now);
  json_builder_set_member_name (b, "machine");
  json_builder_begin_object (b);
  lingbot_bench_json_set_string (b, "cpu", cpu);
  lingbot_bench_json_set_int (b, "cpus", g_get_num_processors ());
  if (uname (&u) == 0) {
    g_autofree char *k = g_strdup_printf ("%s %s %s", u.sysname, u.release,
        u.machine);
    lingbot_bench_json_set_string (b, "kernel", k);
  }
#ifdef LINGBOT_BENCH_HAVE_GST
  g_autofree char *gv = gst_version_string ();
  lingbot_bench_json_set_string (b, "gstreamer", gv);
#else
  lingbot_bench_json_set_string (b, "gstreamer", NULL);
#endif
  lingbot_bench_json_set_string (b, "date", date);
  json_builder_end_object (b);
}

static void
add_config (JsonBuilder * b, const LingbotBenchConfig * c,
    const LingbotBenchRunResult * r)
{
  json_builder_set_member_name (b, "config");
  json_builder_begin_object (b);
  lingbot_bench_json_set_string (b, "engine", r->engine);
  lingbot_bench_json_set_string (b, "model", c->model);
  lingbot_bench_json_set_string (b, "image", c->image);
  lingbot_bench_json_set_string (b, "control_trace", c->trace);
  lingbot_bench_json_set_string (b, "prompt",
      c->prompt_embeds ? NULL : c->prompt);
  lingbot_bench_json_set_string (b, "prompt_embeds", c->prompt_embeds);
  lingbot_bench_json_set_string (b, "devices", c->devices);
  lingbot_bench_json_set_string (b, "precision",
      c->precision ? c->precision : "fp32");
  json_builder_set_member_name (b, "decode_overlap");
  json_builder_add_boolean_value (b, r->decoder_attached);
  lingbot_bench_json_set_int (b, "ranks", r->n_ranks);
  lingbot_bench_json_set_int (b, "frames", c->frames);
  lingbot_bench_json_set_int (b, "fps", c->fps);
  lingbot_bench_json_set_int (b, "chunk_frames", c->chunk_frames);
  lingbot_bench_json_set_int (b, "width", c->width);
  lingbot_bench_json_set_int (b, "height", c->height);
  lingbot_bench_json_set_int (b, "pixel_area", c->pixel_area);
  lingbot_bench_json_set_int (b, "seed", c->seed);
  lingbot_bench_json_set_int (b, "warmup_chunks", 1);
  if (c->replay) {
    lingbot_bench_json_set_double (b, "duration_s", c->duration);
    lingbot_bench_json_set_double (b, "playout_delay_s", c->playout_delay);
  }
  json_builder_end_object (b);
}

/* the seconds of a chunk in the report, in its order (name = field) */
#define CHUNK_TIME(field) { #field, G_STRUCT_OFFSET (LingbotBenchChunkRecord, field) }
static const struct
{
  const char *name;
  glong offset;
} chunk_times[] = {
  CHUNK_TIME (dit_seconds), CHUNK_TIME (vae_seconds),
  CHUNK_TIME (compute_seconds), CHUNK_TIME (wall_seconds),
  CHUNK_TIME (start_s), CHUNK_TIME (first_frame_s), CHUNK_TIME (end_s),
  CHUNK_TIME (decode_start_s), CHUNK_TIME (decode_end_s),
};

/* One run's report (an object). */
void
lingbot_bench_add_report (JsonBuilder * b, const LingbotBenchConfig * c,
    const LingbotBenchRunResult * r)
{
  json_builder_begin_object (b);
  lingbot_bench_json_set_string (b, "bench", c->replay ? "replay" : "direct");
  add_config (b, c, r);
  add_machine (b);

  json_builder_set_member_name (b, "chunks");
  json_builder_begin_array (b);
  for (guint i = 0; i < r->chunks->len; i++) {
    const LingbotBenchChunkRecord *k =
        &g_array_index (r->chunks, LingbotBenchChunkRecord, i);
    g_autofree char *ks = lingbot_keys_to_string (k->keys);
    json_builder_begin_object (b);
    lingbot_bench_json_set_int (b, "index", (gint64) k->index);
    lingbot_bench_json_set_int (b, "frames", k->frames);
    lingbot_bench_json_set_string (b, "keys", ks);
    for (guint j = 0; j < G_N_ELEMENTS (chunk_times); j++)
      lingbot_bench_json_set_double (b, chunk_times[j].name,
          G_STRUCT_MEMBER (double, k, chunk_times[j].offset));
    lingbot_bench_json_set_double (b, "chunk_compute_fps",
        k->compute_seconds > 0 ? k->frames / k->compute_seconds : 0.0);
    if (c->replay) {
      lingbot_bench_json_set_double (b, "request_s", k->request_s);
      lingbot_bench_json_set_double (b, "due_s", k->due_s);
      lingbot_bench_json_set_double (b, "late_s", k->late_s);
      json_builder_set_member_name (b, "missed");
      json_builder_add_boolean_value (b, k->late_s > 0);
    }
    json_builder_end_object (b);
  }
  json_builder_end_array (b);

  /* summary: steady = chunks after the first (warmup_chunks 1) */
  guint total_frames = 0, steady_frames = 0;
  double steady_compute = 0, dit = 0, vae = 0;
  g_autoptr (GArray) comp = g_array_new (FALSE, FALSE, sizeof (double));
  g_autoptr (GArray) wall = g_array_new (FALSE, FALSE, sizeof (double));
  g_autoptr (GArray) period = g_array_new (FALSE, FALSE, sizeof (double));
  g_autoptr (GArray) cfps = g_array_new (FALSE, FALSE, sizeof (double));
  for (guint i = 0; i < r->chunks->len; i++) {
    const LingbotBenchChunkRecord *k =
        &g_array_index (r->chunks, LingbotBenchChunkRecord, i);
    total_frames += (guint) k->frames;
    if (i == 0 && r->chunks->len > 1)
      continue;
    if (i > 0) {
      steady_frames += (guint) k->frames;
      steady_compute += k->compute_seconds;
      double p = k->end_s - g_array_index (r->chunks, LingbotBenchChunkRecord,
          i - 1).end_s;
      g_array_append_val (period, p);
    }
    g_array_append_val (comp, k->compute_seconds);
    g_array_append_val (wall, k->wall_seconds);
    double f = k->compute_seconds > 0 ? k->frames / k->compute_seconds : 0;
    g_array_append_val (cfps, f);
    dit += k->dit_seconds;
    vae += k->vae_seconds;
  }
  const LingbotBenchChunkRecord *first =
      &g_array_index (r->chunks, LingbotBenchChunkRecord, 0);
  const LingbotBenchChunkRecord *last =
      &g_array_index (r->chunks, LingbotBenchChunkRecord,
      r->chunks->len - 1);
  guint n_stats = comp->len;

  json_builder_set_member_name (b, "summary");
  json_builder_begin_object (b);
  lingbot_bench_json_set_int (b, "total_frames", total_frames);
  lingbot_bench_json_set_int (b, "total_chunks", r->chunks->len);
  lingbot_bench_json_set_int (b, "frames_at_sink", r->arrivals->len);
  lingbot_bench_json_set_int (b, "steady_chunks",
      r->chunks->len > 0 ? r->chunks->len - 1 : 0);
  lingbot_bench_json_set_int (b, "steady_frames", steady_frames);
  lingbot_bench_json_set_double (b, "steady_compute_seconds", steady_compute);
  lingbot_bench_json_set_double (b, "chunk_compute_fps_weighted",
      steady_compute > 0 ? steady_frames / steady_compute : 0.0);
  add_stats (b, "chunk_compute_fps", cfps);
  add_stats (b, "chunk_compute_seconds", comp);
  add_stats (b, "chunk_wall_seconds", wall);
  add_stats (b, "chunk_period_seconds", period);
  lingbot_bench_json_set_double (b, "dit_seconds_mean",
      n_stats ? dit / n_stats : 0.0);
  lingbot_bench_json_set_double (b, "vae_seconds_mean",
      n_stats ? vae / n_stats : 0.0);
  /* what the decode beside the generation gains is the chunk period
   * against a serial run's (--compare's period_ratio): within one run, a
   * decode that shares the DiT's device stretches the generate time as
   * much as it hides, so no figure of the run alone can tell */
  lingbot_bench_json_set_int (b, "latent_host_bytes",
      (gint64) r->latent_host_bytes);
  json_builder_set_member_name (b, "decode_overlapped");
  json_builder_add_boolean_value (b, r->decoder_attached);
  {
    /* p95 chunk period over the media duration of a steady chunk */
    g_autoptr (GArray) ps = g_array_copy (period);
    double *v = (double *) (void *) ps->data;
    lingbot_bench_sort (v, ps->len);
    lingbot_bench_json_set_double (b, "real_time_factor", ps->len ?
        lingbot_bench_percentile (v, ps->len,
            0.95) / (4.0 * c->chunk_frames / c->fps) : 0.0);
  }
  lingbot_bench_json_set_double (b, "setup_seconds", r->setup_s);
  lingbot_bench_json_set_double (b, "first_chunk_latency_s",
      first->first_frame_s);
  lingbot_bench_json_set_double (b, "first_chunk_compute_seconds",
      first->compute_seconds);
  lingbot_bench_json_set_double (b, "run_seconds", last->end_s);
  {
    double a0 = r->arrivals->len ? g_array_index (r->arrivals, double, 0) : 0;
    double a1 = r->arrivals->len ? g_array_index (r->arrivals, double,
        r->arrivals->len - 1) : 0;
    lingbot_bench_json_set_double (b, "delivery_fps", r->arrivals->len > 1
        && a1 > a0 ? (r->arrivals->len - 1) / (a1 - a0) : 0.0);
  }
  {
    struct rusage ru;
    getrusage (RUSAGE_SELF, &ru);
    lingbot_bench_json_set_int (b, "peak_rss_bytes",
        (gint64) ru.ru_maxrss * 1024);
  }
  if (r->rss && r->rss->len > 0) {
    /* [seconds, bytes] pairs, and the growth from the first sample at or
     * after one minute to the last (a soak's figure: flat is the goal) */
    json_builder_set_member_name (b, "rss_samples");
    json_builder_begin_array (b);
    const LingbotBenchRssSample *ref = NULL;
    for (guint i = 0; i < r->rss->len; i++) {
      const LingbotBenchRssSample *x =
          &g_array_index (r->rss, LingbotBenchRssSample, i);
      json_builder_begin_array (b);
      json_builder_add_double_value (b, x->t_s);
      json_builder_add_int_value (b, x->bytes);
      json_builder_end_array (b);
      if (ref == NULL && x->t_s >= 60.0 - 1e-6)
        ref = x;
    }
    json_builder_end_array (b);
    const LingbotBenchRssSample *end =
        &g_array_index (r->rss, LingbotBenchRssSample,
        r->rss->len - 1);
    if (ref && end != ref && ref->bytes > 0)
      lingbot_bench_json_set_double (b, "rss_growth_after_first_minute",
          (double) (end->bytes - ref->bytes) / (double) ref->bytes);
  }
  json_builder_set_member_name (b, "comm");
  json_builder_begin_object (b);
  lingbot_bench_json_set_string (b, "collectives", r->collectives);
  guint64 total = 0;
  json_builder_set_member_name (b, "ops");
  json_builder_begin_object (b);
  for (int i = 0; i < LINGBOT_BENCH_N_OPS; i++) {
    json_builder_set_member_name (b, lingbot_bench_op_names[i]);
    json_builder_begin_object (b);
    lingbot_bench_json_set_int (b, "calls", (gint64) r->comm.calls[i]);
    lingbot_bench_json_set_int (b, "bytes", (gint64) r->comm.bytes[i]);
    json_builder_end_object (b);
    total += r->comm.bytes[i];
  }
  json_builder_end_object (b);
  lingbot_bench_json_set_int (b, "bytes_total", (gint64) total);
  lingbot_bench_json_set_double (b, "bytes_per_chunk", r->chunks->len ?
      (double) total / r->chunks->len : 0.0);
  json_builder_end_object (b);

  if (c->replay) {
    guint missed = 0, worst = 0;
    double late_max = -G_MAXDOUBLE, late_sum = 0, lag = 0;
    for (guint i = 0; i < r->chunks->len; i++) {
      const LingbotBenchChunkRecord *k =
          &g_array_index (r->chunks, LingbotBenchChunkRecord, i);
      if (k->late_s > late_max) {
        late_max = k->late_s;
        worst = i;
      }
      if (k->late_s > 0) {
        missed++;
        late_sum += k->late_s;
      }
      /* how far behind its request time a chunk started */
      lag = MAX (lag, k->start_s - k->request_s);
    }
    json_builder_set_member_name (b, "deadlines");
    json_builder_begin_object (b);
    lingbot_bench_json_set_double (b, "playout_delay_s", c->playout_delay);
    lingbot_bench_json_set_int (b, "chunks", r->chunks->len);
    lingbot_bench_json_set_int (b, "missed_chunks", missed);
    lingbot_bench_json_set_double (b, "late_seconds_max", MAX (late_max, 0.0));
    lingbot_bench_json_set_double (b, "late_seconds_sum", late_sum);
    lingbot_bench_json_set_double (b, "late_seconds_mean_missed",
        missed ? late_sum / missed : 0.0);
    lingbot_bench_json_set_double (b, "slack_seconds_min",
        late_max < 0 ? -late_max : 0.0);
    lingbot_bench_json_set_int (b, "worst_chunk", worst);
    lingbot_bench_json_set_double (b, "start_lag_seconds_max", lag);
    json_builder_end_object (b);
  }
  json_builder_end_object (b);
  json_builder_end_object (b);
}

gboolean
lingbot_bench_write_json (JsonBuilder * b, const char *path, GError ** error)
{
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  json_generator_set_pretty (gen, TRUE);
  json_generator_set_root (gen, root);
  if (path)
    return json_generator_to_file (gen, path, error);
  g_autofree char *s = json_generator_to_data (gen, NULL);
  printf ("%s\n", s);
  return TRUE;
}

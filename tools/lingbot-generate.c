/* lingbot-generate: run a LingBot-World session without GStreamer and write
 * the video (the embedding example of lingbot/lingbot.h)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-generate --model models/tiny --image start.jpg \
 *       --prompt "a castle" --devices cpu:2 [--precision bf16] --frames 29 \
 *       --keys-trace controls.json --y4m out.y4m
 *   lingbot-generate --model DIR --image start.jpg --prompt-embeds p.safetensors \
 *       --keys w --out frames.rgb
 *
 * --y4m writes YUV4MPEG2 (I420, BT.601 limited range, the session fps);
 * --out writes raw packed RGB8 frames back to back; with neither the run
 * writes no video (a timing run: the frames are still made and decoded).
 * Per-chunk figures go to stdout, one JSON object per line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lingbot/lingbot.h"
#include "tools/tool-common.h"
#include "tools/tool-json.h"

typedef struct
{
  FILE *y4m, *rgb;
  guint8 *buf;
  int w, h;
} Sink;

static gboolean
write_frames (Sink * sink, const LingbotFrames * frames, int n, GError ** error)
{
  const int w = sink->w, h = sink->h;
  for (int f = 0; f < n; f++) {
    if (sink->y4m) {
      guint8 *y = sink->buf, *u = y + (gsize) w * h;
      guint8 *v = u + (gsize) (w / 2) * (h / 2);
      if (!lingbot_frames_to_i420 (frames, f, y, w, u, w / 2, v, w / 2, error))
        return FALSE;
      gsize sz = (gsize) w * h + 2 * (gsize) (w / 2) * (h / 2);
      if (fputs ("FRAME\n", sink->y4m) < 0 ||
          fwrite (sink->buf, 1, sz, sink->y4m) != sz)
        goto io;
    }
    if (sink->rgb) {
      if (!lingbot_frames_to_rgb (frames, f, sink->buf, 3 * (gsize) w, error))
        return FALSE;
      gsize sz = 3 * (gsize) w * h;
      if (fwrite (sink->buf, 1, sz, sink->rgb) != sz)
        goto io;
    }
  }
  return TRUE;
io:
  g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_IO, "write failed");
  return FALSE;
}

int
main (int argc, char **argv)
{
  g_autofree char *model = NULL, *image = NULL, *prompt = NULL;
  g_autofree char *embeds = NULL, *devices = NULL, *trace_path = NULL;
  g_autofree char *keys_str = NULL, *out = NULL, *y4m = NULL;
  g_autofree char *precision = NULL;
  int frames = 77, width = 0, height = 0, pixel_area = 0, fps = 16;
  int chunk = 0;
  gint64 seed = 42;
  gboolean quiet = FALSE;
  GOptionEntry entries[] = {
    {"model", 'm', 0, G_OPTION_ARG_FILENAME, &model,
        "Model directory (release layout, or lingbot-mkmodel --full)", "DIR"},
    {"image", 'i', 0, G_OPTION_ARG_FILENAME, &image,
        "Reference image (JPEG)", "IMG"},
    {"prompt", 'p', 0, G_OPTION_ARG_STRING, &prompt, "Text prompt", "TEXT"},
    {"prompt-embeds", 0, 0, G_OPTION_ARG_FILENAME, &embeds,
          "Prompt-embeds file (lingbot-encode-prompt) instead of the encoder",
        "F"},
    {"devices", 'd', 0, G_OPTION_ARG_STRING, &devices,
        "cpu:N or GPU ordinals 0,1,.. (default cpu:1)", "D"},
    {"precision", 0, 0, G_OPTION_ARG_STRING, &precision,
        "DiT precision on GPU ranks: fp32 (default), bf16 or fp8", "P"},
    {"frames", 'n', 0, G_OPTION_ARG_INT, &frames,
        "Video frames to generate (default 77)", "N"},
    {"keys-trace", 't', 0, G_OPTION_ARG_FILENAME, &trace_path,
          "Control trace JSON ({\"events\":[{\"delay_s\",\"message\"}]})",
        "TRACE"},
    {"keys", 'k', 0, G_OPTION_ARG_STRING, &keys_str,
          "Keys held for the whole run, e.g. w or w,j (without a trace)",
        "K"},
    {"seed", 's', 0, G_OPTION_ARG_INT64, &seed, "Noise seed (default 42)",
        "S"},
    {"width", 0, 0, G_OPTION_ARG_INT, &width, "Output width (x16)", "W"},
    {"height", 0, 0, G_OPTION_ARG_INT, &height, "Output height (x16)", "H"},
    {"pixel-area", 0, 0, G_OPTION_ARG_INT, &pixel_area,
        "Output pixel budget (default 480*832)", "A"},
    {"chunk-frames", 0, 0, G_OPTION_ARG_INT, &chunk,
        "Latent frames per chunk (default: the model's)", "C"},
    {"fps", 0, 0, G_OPTION_ARG_INT, &fps, "Frame rate (default 16)", "F"},
    {"out", 'o', 0, G_OPTION_ARG_FILENAME, &out,
        "Write raw RGB8 frames here", "FILE"},
    {"y4m", 'y', 0, G_OPTION_ARG_FILENAME, &y4m,
        "Write a Y4M (I420) video here", "FILE"},
    {"quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet, "Print nothing", NULL},
    {NULL}
  };
  const char *prog = "lingbot-generate";
  if (!lingbot_tool_parse (prog, "- generate a LingBot-World video",
          "Without --out or --y4m nothing is written: a timing run (the "
          "frames are still made\nand decoded; the per-chunk figures go to "
          "stdout, one JSON object per line).", entries, &argc, &argv))
    return LINGBOT_TOOL_USAGE;
  if (model == NULL || image == NULL || frames <= 0 || fps <= 0)
    return lingbot_tool_usage_error (prog, "--model, --image and --frames > 0 "
        "are required");
  g_autoptr (GError) err = NULL;
  guint fixed_keys = 0;
  if (keys_str) {
    g_auto (GStrv) names = g_strsplit (keys_str, ",", -1);
    for (int i = 0; names[i]; i++) {
      guint k = lingbot_key_from_name (g_strstrip (names[i]));
      if (k == 0)
        return lingbot_tool_usage_error (prog, "unknown key \"%s\"", names[i]);
      fixed_keys |= k;
    }
  }
  g_autoptr (LingbotControlTrace) trace = NULL;
  if (trace_path &&
      !(trace = lingbot_control_trace_new_from_file (trace_path, &err))) {
    fprintf (stderr, "lingbot-generate: %s\n", err->message);
    return 1;
  }

  LingbotWorldOptions wo = LINGBOT_WORLD_OPTIONS_INIT;
  if (devices)
    wo.devices = devices;
  wo.precision = precision;
  wo.model_path = model;
  wo.load_text_encoder = embeds == NULL;
  g_autoptr (LingbotWorld) world = lingbot_world_new (&wo, &err);
  if (world == NULL) {
    fprintf (stderr, "lingbot-generate: %s\n", err->message);
    return 1;
  }
  LingbotSessionOptions so = LINGBOT_SESSION_OPTIONS_INIT;
  so.prompt = prompt;
  so.prompt_embeds_path = embeds;
  so.image_path = image;
  if (pixel_area > 0)
    so.pixel_area = pixel_area;
  so.width = width;
  so.height = height;
  so.seed = (guint64) seed;
  so.chunk_frames = chunk;
  so.frames = (guint) frames;
  so.fps = fps;
  g_autoptr (LingbotSession) session = lingbot_session_new (world, &so, &err);
  if (session == NULL) {
    fprintf (stderr, "lingbot-generate: %s\n", err->message);
    return 1;
  }
  const guint n_chunks = lingbot_session_get_n_chunks (session);
  const int C = lingbot_session_get_chunk_frames (session);
  g_autofree LingbotTraceChunk *plan = g_new0 (LingbotTraceChunk, n_chunks);
  guint n_planned = trace ? lingbot_control_trace_schedule (trace, n_chunks,
      (guint) C, (guint) fps, plan) : 0;

  Sink sink = { 0 };
  sink.w = lingbot_session_get_width (session);
  sink.h = lingbot_session_get_height (session);
  sink.buf = g_malloc (3 * (gsize) sink.w * sink.h);
  int rc = 0;
  if (y4m && !(sink.y4m = fopen (y4m, "wb"))) {
    fprintf (stderr, "lingbot-generate: cannot open %s\n", y4m);
    rc = 1;
    goto done;
  }
  if (out && !(sink.rgb = fopen (out, "wb"))) {
    fprintf (stderr, "lingbot-generate: cannot open %s\n", out);
    rc = 1;
    goto done;
  }
  if (sink.y4m)
    fprintf (sink.y4m, "YUV4MPEG2 W%d H%d F%d:1 Ip A1:1 C420jpeg "
        "XCOLORRANGE=LIMITED\n", sink.w, sink.h, fps);
  if (!quiet) {
    g_autoptr (JsonBuilder) b = json_builder_new ();
    json_builder_begin_object (b);
    lingbot_json_int (b, "width", sink.w);
    lingbot_json_int (b, "height", sink.h);
    lingbot_json_int (b, "chunks", n_chunks);
    lingbot_json_int (b, "frames", lingbot_session_get_n_frames (session));
    lingbot_json_int (b, "ranks", lingbot_world_get_n_ranks (world));
    json_builder_end_object (b);
    lingbot_json_print (b);
  }

  guint total = 0;
  double steady = 0.0;
  for (guint c = 0; !lingbot_session_is_done (session); c++) {
    guint keys = fixed_keys;
    if (trace) {
      keys = c < n_planned ? plan[c].keys : 0;
      if (c < n_planned && plan[c].reset_before)
        lingbot_control_reset_pose (lingbot_session_get_control (session));
    }
    LingbotChunkStats st = { 0 };
    int n = 0;
    if (!lingbot_session_generate (session, keys, &st, &err) ||
        !lingbot_session_decode (session, NULL, &n, &st, &err) ||
        !write_frames (&sink, lingbot_session_get_frames (session), n, &err)) {
      fprintf (stderr, "lingbot-generate: chunk %u: %s\n", c, err->message);
      rc = 1;
      goto done;
    }
    total += (guint) n;
    if (c > 0)
      steady += st.compute_seconds;
    if (!quiet) {
      g_autofree char *ks = lingbot_keys_to_string (keys);
      g_autoptr (JsonBuilder) b = json_builder_new ();
      json_builder_begin_object (b);
      lingbot_json_int (b, "chunk", (gint64) st.index);
      lingbot_json_int (b, "frames", n);
      lingbot_json_string (b, "keys", ks);
      lingbot_json_double (b, "dit_s", st.dit_seconds);
      lingbot_json_double (b, "vae_s", st.vae_seconds);
      lingbot_json_double (b, "compute_s", st.compute_seconds);
      json_builder_end_object (b);
      lingbot_json_print (b);
    }
  }
  if (!quiet) {
    guint first = (guint) lingbot_session_get_frame_count (session, 0);
    guint steady_frames = total > first ? total - first : 0;
    g_autoptr (JsonBuilder) b = json_builder_new ();
    json_builder_begin_object (b);
    lingbot_json_int (b, "total_frames", total);
    lingbot_json_double (b, "steady_compute_fps",
        steady > 0.0 ? steady_frames / steady : 0.0);
    json_builder_end_object (b);
    lingbot_json_print (b);
  }
done:
  if (sink.y4m && fclose (sink.y4m) != 0)
    rc = 1;
  if (sink.rgb && fclose (sink.rgb) != 0)
    rc = 1;
  g_free (sink.buf);
  return rc;
}

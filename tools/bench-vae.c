/* lingbot-gst: `lingbot-bench vae`: streamed Wan2.1 VAE decode, unsharded
 * and height-sharded over CPU worker groups
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 *   lingbot-bench vae [--model PATH | --dim N] [--latent HxW]
 *       [--chunk-latents L] [--chunks K] [--ranks 1,2,4] [--seed S] [--json]
 *
 * Without --model the weights are random (lingbot_vae_write_random() into a
 * temporary file).  For every rank count it decodes K chunks of L random
 * latent frames in one session and reports seconds per chunk (the first
 * chunk, 4L - 3 frames, separately from the steady ones, 4L frames) and the
 * halo bytes all ranks sent per steady chunk, with the longest time one
 * rank spent in exchanges (waiting for its neighbours included).  Rank count 1
 * is the unsharded decoder on one stream.
 */
#include "tools/bench-vae.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <glib/gstdio.h>

#include "comm/worker-group.h"
#include "lingbot/vae.h"

typedef struct
{
  int ranks;
  double first_s, steady_s;
  int steady_chunks, steady_frames;
  guint64 halo_bytes;
  double halo_s;
  gsize cache_bytes;
} RunResult;

static void
fill_random (LbTensor *t, guint32 seed)
{
  float *d = t->data;
  guint32 x = seed * 2654435761u + 12345;
  for (int64_t i = 0; i < lb_tensor_numel (t); i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    d[i] = 2.f * ((float)(x >> 8) / 8388608.f - 1.f);
  }
}

static gboolean
run_one (LingbotVae *vae, int ranks, int h, int w, int L, int chunks,
    guint32 seed, RunResult *res, GError **error)
{
  LbBackend *be = lb_cpu_backend ();
  LbStream *stream = NULL;
  LbWorkerGroup *group = NULL;
  LingbotVaeDecoder *dec;
  if (ranks == 1) {
    stream = be->stream_new (be, 0, error);
    if (stream == NULL)
      return FALSE;
    dec = lingbot_vae_decoder_new (vae, stream, h, w, L, error);
  } else {
    group = lb_worker_group_new (be, ranks, NULL, NULL, error);
    if (group == NULL)
      return FALSE;
    dec = lingbot_vae_decoder_new_sharded (vae, group, h, w, L, error);
  }
  gboolean ok = dec != NULL;
  int64_t lshape[4] = { 16, L, h, w };
  int64_t fshape[4] = { 3, 4 * L, 8 * h, 8 * w };
  LbTensor *lat = lb_tensor_new (LB_DTYPE_F32, 4, lshape);
  LbTensor *frames = lb_tensor_new (LB_DTYPE_F32, 4, fshape);
  memset (res, 0, sizeof *res);
  res->ranks = ranks;
  for (int c = 0; ok && c < chunks; c++) {
    fill_random (lat, seed + c);
    int n = 0;
    gint64 t0 = g_get_monotonic_time ();
    ok = lingbot_vae_decoder_decode (dec, lat, frames, &n, error);
    double s = (g_get_monotonic_time () - t0) / 1e6;
    if (!ok)
      break;
    if (c == 0) {
      res->first_s = s;
    } else {
      res->steady_s += s;
      res->steady_chunks++;
      res->steady_frames += n;
      res->halo_bytes = lingbot_vae_decoder_get_halo_bytes (dec);
      res->halo_s += lingbot_vae_decoder_get_halo_seconds (dec);
    }
  }
  if (dec) {
    res->cache_bytes = lingbot_vae_decoder_get_cache_bytes (dec);
    lingbot_vae_decoder_free (dec);
  }
  if (res->steady_chunks) {
    res->steady_s /= res->steady_chunks;
    res->halo_s /= res->steady_chunks;
  }
  lb_tensor_free (lat);
  lb_tensor_free (frames);
  if (group)
    lb_worker_group_unref (group);
  if (stream)
    be->stream_free (stream);
  return ok;
}

/**
 * lingbot_bench_vae_main:
 * @argc: arguments after "vae" (argv[0] is the sub-command name)
 * @argv: (array length=argc): the arguments
 *
 * Returns: the process exit status (0 success, 1 run failure, 2 usage).
 */
int
lingbot_bench_vae_main (int argc, char **argv)
{
  g_autofree char *model = NULL, *latent = g_strdup ("12x20"),
                  *ranks_s = g_strdup ("1,2,4");
  gint dim = 8, L = 4, chunks = 3, seed = 1;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "model", 0, 0, G_OPTION_ARG_FILENAME, &model,
        "Wan2.1_VAE.pth or safetensors (default: random weights)", "PATH" },
    { "dim", 0, 0, G_OPTION_ARG_INT, &dim,
        "base width of the random model (8; the real VAE is 96)", "N" },
    { "latent", 0, 0, G_OPTION_ARG_STRING, &latent,
        "latent rows x columns (12x20; 464x832 video is 58x104)", "HxW" },
    { "chunk-latents", 0, 0, G_OPTION_ARG_INT, &L,
        "latent frames per chunk (4)", "L" },
    { "chunks", 0, 0, G_OPTION_ARG_INT, &chunks,
        "chunks per run; the first is reported apart (3)", "K" },
    { "ranks", 0, 0, G_OPTION_ARG_STRING, &ranks_s,
        "comma-separated CPU rank counts (1,2,4)", "LIST" },
    { "seed", 0, 0, G_OPTION_ARG_INT, &seed, "latents/weights seed (1)", "S" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "print one JSON object", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) octx
      = g_option_context_new ("- streamed VAE decode seconds per chunk");
  g_autoptr (GError) err = NULL;
  g_option_context_add_main_entries (octx, entries, NULL);
  int h = 0, w = 0;
  if (!g_option_context_parse (octx, &argc, &argv, &err)
      || sscanf (latent, "%dx%d", &h, &w) != 2 || h < 1 || w < 1 || L < 1
      || chunks < 1 || dim < 2) {
    fprintf (stderr, "lingbot-bench vae: %s\n",
        err ? err->message
            : "bad --latent, --chunk-latents, --chunks or --dim");
    return 2;
  }

  g_autofree char *tmpdir = NULL, *tmpfile = NULL;
  if (model == NULL) {
    tmpdir = g_dir_make_tmp ("lingbot-bench-vae-XXXXXX", &err);
    if (tmpdir == NULL) {
      fprintf (stderr, "lingbot-bench vae: %s\n", err->message);
      return 1;
    }
    tmpfile = g_build_filename (tmpdir, "vae.safetensors", NULL);
    if (!lingbot_vae_write_random (tmpfile, dim, (guint64)seed, &err)) {
      fprintf (stderr, "lingbot-bench vae: %s\n", err->message);
      g_rmdir (tmpdir);
      return 1;
    }
  }
  LingbotVae *vae
      = lingbot_vae_load (model ? model : tmpfile, LINGBOT_VAE_DECODER, &err);
  if (tmpfile) {
    g_unlink (tmpfile);
    g_rmdir (tmpdir);
  }
  if (vae == NULL) {
    fprintf (stderr, "lingbot-bench vae: %s\n", err->message);
    return 1;
  }

  g_auto (GStrv) list = g_strsplit (ranks_s, ",", -1);
  int n_runs = (int)g_strv_length (list);
  RunResult *res = g_new0 (RunResult, n_runs);
  int status = 0;
  for (int i = 0; i < n_runs; i++) {
    int r = atoi (list[i]);
    if (r < 1
        || !run_one (vae, r, h, w, L, chunks, (guint32)seed, &res[i], &err)) {
      fprintf (stderr, "lingbot-bench vae: %d ranks: %s\n", r,
          err ? err->message : "bad rank count");
      status = 1;
      n_runs = i;
      break;
    }
    if (!json)
      printf ("ranks %d: first chunk (%d frames) %.3f s; steady %.3f s/chunk "
              "(%.2f fps); halo %.2f MB/chunk in %.3f s; cache %.1f MB\n",
          r, 4 * L - 3, res[i].first_s, res[i].steady_s,
          res[i].steady_s > 0 ? 4 * L / res[i].steady_s : 0.0,
          res[i].halo_bytes / 1e6, res[i].halo_s, res[i].cache_bytes / 1e6);
  }
  if (json) {
    printf ("{\"bench\": \"vae\", \"backend\": \"cpu\", \"dim\": %d, "
            "\"latent\": [%d, %d], \"chunk_latents\": %d, \"chunks\": %d, "
            "\"runs\": [",
        lingbot_vae_get_dim (vae), h, w, L, chunks);
    for (int i = 0; i < n_runs; i++)
      printf ("%s{\"ranks\": %d, \"first_chunk_s\": %.5f, "
              "\"steady_chunk_s\": %.5f, \"steady_fps\": %.3f, "
              "\"halo_bytes_per_chunk\": %" G_GUINT64_FORMAT
              ", \"halo_s_per_chunk\": %.5f, \"cache_bytes\": %" G_GSIZE_FORMAT
              "}",
          i ? ", " : "", res[i].ranks, res[i].first_s, res[i].steady_s,
          res[i].steady_s > 0 ? 4 * L / res[i].steady_s : 0.0,
          res[i].halo_bytes, res[i].halo_s, res[i].cache_bytes);
    printf ("]}\n");
  }
  g_free (res);
  lingbot_vae_unref (vae);
  return status;
}

/* lingbot-gst: random-weight DiT checkpoints in the published layout
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * What lingbot-mkmodel writes: the 21 + 35 L tensors of spec 4.2 under
 * their checkpoint keys, in state-dict order, bf16 (or any float dtype),
 * split into `model-0000N-of-0000M.safetensors` shards with a
 * `model.safetensors.index.json` weight map and the release's
 * `config.json`.  Shards are generated and written one at a time, so a
 * full-size 14B checkpoint needs one shard's worth of memory.  Also the
 * in-memory float32 weights of lingbot_dit_new_random().  Every element is
 * a function of (seed, name, index), drawn in blocks on a thread pool: the
 * bytes do not depend on the thread count.
 */
#include "lingbot/checkpoint-private.h"
#include "lingbot/dit-private.h"

#include <errno.h>

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>
#include <math.h>
#include <string.h>

/* splitmix64 is counter-based: its i-th output (i >= 0) from state s0 is
 * mix (s0 + (i + 1) * gamma).  Element i of a weight is that output for
 * s0 = seed ^ hash (name), so any element can be computed on its own: a
 * tensor split into blocks on any number of threads gives the bytes of the
 * sequential loop (the one lingbot-mkmodel always ran). */
static inline guint64
splitmix64_at (guint64 s0, guint64 i)
{
  guint64 z = s0 + (i + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static guint64
name_hash (const char *name)
{
  guint64 h = 1469598103934665603ull;   /* FNV-1a */
  for (const char *p = name; *p; p++)
    h = (h ^ (guint8) * p) * 1099511628211ull;
  return h;
}

/* How one weight is drawn: offset + scale * U(-1, 1) from stream s0. */
typedef struct
{
  double scale, offset;
  guint64 s0;
} WeightDraw;

static void
weight_draw_init (const LingbotDitConfig * cfg, const char *name,
    guint64 seed, WeightDraw * wd)
{
  wd->offset = 0.0;
  if (g_str_has_suffix (name, "modulation")) {
    wd->scale = 1.0 / sqrt ((double) cfg->dim);
  } else if (strstr (name, "norm")) {
    wd->scale = 0.1;
    wd->offset = g_str_has_suffix (name, ".weight") ? 1.0 : 0.0;
  } else {
    /* fan_in: the weight's inputs (the bias shares its layer's) */
    g_autofree char *wname = g_strdup (name);
    if (g_str_has_suffix (name, ".bias")) {
      wname[strlen (wname) - 5] = '\0';
      char *w = g_strconcat (wname, ".weight", NULL);
      g_free (wname);
      wname = w;
    }
    int nd;
    int64_t ws[LB_MAX_DIMS];
    int64_t fan_in = 1;
    if (lingbot_dit_weight_shape (cfg, wname, &nd, ws))
      for (int i = 1; i < nd; i++)
        fan_in *= ws[i];
    wd->scale = 1.0 / sqrt ((double) MAX (fan_in, 1));
  }
  wd->s0 = seed ^ name_hash (name);
}

/* One block of elements [i0, i1) of a weight: drawn as float32, rounded
 * to @stored, written as @t's dtype (@stored itself, or float32 holding
 * the @stored value). */
typedef struct
{
  LbTensor *t;
  const WeightDraw *wd;
  LbDType stored;
  int64_t i0, i1;
} DrawBlock;

static void
draw_block (const DrawBlock * b)
{
  const WeightDraw *wd = b->wd;
  const double k = 1.0 / 9007199254740992.0;    /* 2^-53 */
  for (int64_t i = b->i0; i < b->i1; i++) {
    double u = (double) (splitmix64_at (wd->s0, (guint64) i) >> 11) * k;
    float v = (float) (wd->offset + wd->scale * (2.0 * u - 1.0));
    uint16_t h = 0;
    if (b->stored == LB_DTYPE_BF16)
      h = lb_f32_to_bf16 (v);
    else if (b->stored == LB_DTYPE_F16)
      h = lb_f32_to_f16 (v);
    if (b->t->dtype == LB_DTYPE_F32) {
      if (b->stored == LB_DTYPE_BF16)
        v = lb_bf16_to_f32 (h);
      else if (b->stored == LB_DTYPE_F16)
        v = lb_f16_to_f32 (h);
      ((float *) b->t->data)[i] = v;
    } else {
      ((uint16_t *) b->t->data)[i] = h;
    }
  }
}

static void
draw_block_func (gpointer data, gpointer user_data)
{
  draw_block (data);
}

/* Elements per block: ~20-30 ms of work, so a 14B model is ~4500 blocks
 * and the threads finish within a block of each other. */
#define DRAW_BLOCK_ELEMS ((int64_t) 1 << 22)

static guint
split_blocks (GArray * blocks, LbTensor * t, const WeightDraw * wd,
    LbDType stored)
{
  const int64_t n = lb_tensor_numel (t);
  guint added = 0;
  for (int64_t i0 = 0; i0 < n; i0 += DRAW_BLOCK_ELEMS, added++) {
    DrawBlock b = { t, wd, stored, i0, MIN (n, i0 + DRAW_BLOCK_ELEMS) };
    g_array_append_val (blocks, b);
  }
  return added;
}

/* Runs every block, on @n_threads threads (0: one per processor).  The
 * result does not depend on the thread count or the order. */
static void
draw_blocks (GArray * blocks, int n_threads)
{
  if (n_threads <= 0)
    n_threads = (int) g_get_num_processors ();
  n_threads = MIN (n_threads, (int) blocks->len);
  GThreadPool *pool = NULL;
  if (n_threads > 1)
    pool = g_thread_pool_new (draw_block_func, NULL, n_threads, TRUE, NULL);
  for (guint i = 0; i < blocks->len; i++) {
    DrawBlock *b = &g_array_index (blocks, DrawBlock, i);
    /* without a pool (one thread, or the threads could not start) the
     * caller draws: same bytes, only slower */
    if (pool == NULL || !g_thread_pool_push (pool, b, NULL))
      draw_block (b);
  }
  if (pool)
    g_thread_pool_free (pool, FALSE, TRUE);
}

/**
 * lingbot_dit_random_weight:
 * @cfg: a configuration
 * @name: a weight name of spec 4.2
 * @dtype: %LB_DTYPE_BF16, %LB_DTYPE_F16 or %LB_DTYPE_F32
 * @seed: the checkpoint seed
 *
 * A deterministic random weight (a function of @seed and @name only):
 * Linear/conv weights and biases uniform in +-1/sqrt(fan_in) (PyTorch's
 * default init), norm weights 1 + U(+-0.1), norm biases U(+-0.1),
 * modulations U(+-1/sqrt(D)).  Element i is the splitmix64 output number
 * i of the stream seeded with `seed ^ FNV-1a (name)`, mapped to
 * U(-1, 1) in float64, rounded to float32, then to @dtype.  Large tensors
 * are drawn in blocks on one thread per processor; the bytes do not
 * depend on that.
 *
 * Returns: (transfer full) (nullable): the tensor, %NULL for an unknown
 * name.
 */
LbTensor *
lingbot_dit_random_weight (const LingbotDitConfig * cfg, const char *name,
    LbDType dtype, guint64 seed)
{
  int ndim;
  int64_t shape[LB_MAX_DIMS];
  if (!lingbot_dit_weight_shape (cfg, name, &ndim, shape))
    return NULL;
  LbTensor *t = lb_tensor_new (dtype, ndim, shape);
  WeightDraw wd;
  weight_draw_init (cfg, name, seed, &wd);
  g_autoptr (GArray) blocks = g_array_new (FALSE, FALSE, sizeof (DrawBlock));
  split_blocks (blocks, t, &wd, dtype);
  draw_blocks (blocks, 0);
  return t;
}

/**
 * lingbot_dit_random_weights:
 * @cfg: a configuration
 * @stored: the dtype the weights are rounded through (%LB_DTYPE_BF16 as
 *   lingbot_dit_new_random() and the release; F16; F32 for no rounding)
 * @seed: the checkpoint seed
 * @n_threads: threads drawing (0: one per processor; 1: the caller only)
 * @error: %LB_ERROR_INVALID_ARGUMENT for an invalid @cfg or @stored
 *
 * Every weight of spec 4.2 as a contiguous float32 host tensor holding
 * exactly the values lingbot_dit_random_weight() gives in @stored (what
 * lingbot_dit_write_random() writes, widened as the loader widens it),
 * drawn directly in float32 (no @stored copy is made).  All weights are
 * allocated first, then drawn in blocks of 4 Mi elements on a thread
 * pool; every element is a function of (@seed, name, index) only, so the
 * bytes do not depend on @n_threads.  For the 14B (18.5 G parameters,
 * 74 GB of float32) this is what makes a random model take seconds
 * instead of minutes.
 *
 * Returns: (transfer full) (nullable): name (owned string) -> #LbTensor
 * (owned, freed with the table).
 */
GHashTable *
lingbot_dit_random_weights (const LingbotDitConfig * cfg, LbDType stored,
    guint64 seed, int n_threads, GError ** error)
{
  if (!lingbot_dit_config_validate (cfg, error))
    return NULL;
  if (stored != LB_DTYPE_BF16 && stored != LB_DTYPE_F16 &&
      stored != LB_DTYPE_F32) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "random DiT: dtype %s is not bf16, f16 or f32", lb_dtype_name (stored));
    return NULL;
  }
  GHashTable *by_name = g_hash_table_new_full (g_str_hash, g_str_equal,
      g_free, (GDestroyNotify) lb_tensor_free);
  g_autoptr (GPtrArray) names = lingbot_dit_weight_names (cfg);
  WeightDraw *wd = g_new (WeightDraw, names->len);
  g_autoptr (GArray) blocks = g_array_new (FALSE, FALSE, sizeof (DrawBlock));
  for (guint i = 0; i < names->len; i++) {
    int ndim;
    int64_t shape[LB_MAX_DIMS];
    lingbot_dit_weight_shape (cfg, names->pdata[i], &ndim, shape);
    LbTensor *t = lb_tensor_new (LB_DTYPE_F32, ndim, shape);
    weight_draw_init (cfg, names->pdata[i], seed, &wd[i]);
    split_blocks (blocks, t, &wd[i], stored);
    g_hash_table_insert (by_name, g_strdup (names->pdata[i]), t);
  }
  draw_blocks (blocks, n_threads);
  g_free (wd);
  return by_name;
}

/**
 * lingbot_dit_write_random:
 * @cfg: the configuration (validated)
 * @dir: output directory (created if missing)
 * @n_shards: number of shards (>= 1; the 14B release has 8)
 * @dtype: storage dtype (%LB_DTYPE_BF16 as published, or F16/F32)
 * @seed: weight seed
 * @error: %LB_ERROR_INVALID_ARGUMENT, %LB_ERROR_IO
 *
 * Writes `config.json`, `model-0000N-of-0000M.safetensors` (tensors in
 * state-dict order, split into @n_shards byte-balanced runs) and
 * `model.safetensors.index.json`, which lingbot_dit_load() reads.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_dit_write_random (const LingbotDitConfig * cfg, const char *dir,
    guint n_shards, LbDType dtype, guint64 seed, GError ** error)
{
  if (!lingbot_dit_config_validate (cfg, error))
    return FALSE;
  if (dtype != LB_DTYPE_BF16 && dtype != LB_DTYPE_F16 && dtype != LB_DTYPE_F32) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "mkmodel: dtype %s is not bf16, f16 or f32", lb_dtype_name (dtype));
    return FALSE;
  }
  if (g_mkdir_with_parents (dir, 0755) != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_IO, "%s: cannot create: %s", dir,
        g_strerror (errno));
    return FALSE;
  }
  g_autoptr (GPtrArray) names = lingbot_dit_weight_names (cfg);
  n_shards = CLAMP (n_shards, 1, names->len);

  /* byte-balanced runs of consecutive tensors */
  guint64 *bytes = g_new0 (guint64, names->len);
  guint64 total = 0;
  for (guint i = 0; i < names->len; i++) {
    int nd;
    int64_t sh[LB_MAX_DIMS];
    lingbot_dit_weight_shape (cfg, names->pdata[i], &nd, sh);
    guint64 n = 1;
    for (int d = 0; d < nd; d++)
      n *= (guint64) sh[d];
    bytes[i] = n * lb_dtype_size (dtype);
    total += bytes[i];
  }
  guint *shard_of = g_new0 (guint, names->len);
  guint64 acc = 0;
  for (guint i = 0; i < names->len; i++) {
    guint s = (guint) MIN ((acc + bytes[i] / 2) * n_shards / MAX (total, 1),
        n_shards - 1);
    /* never go back, never skip a shard */
    if (i > 0)
      s = CLAMP (s, shard_of[i - 1], shard_of[i - 1] + 1);
    if (names->len - i <= n_shards - 1 - s)
      s = n_shards - (names->len - i);
    shard_of[i] = s;
    acc += bytes[i];
  }
  n_shards = shard_of[names->len - 1] + 1;

  GHashTable *meta = g_hash_table_new (g_str_hash, g_str_equal);
  g_hash_table_insert (meta, (gpointer) "format", (gpointer) "pt");
  gboolean ok = TRUE;
  guint first = 0;
  for (guint s = 0; s < n_shards && ok; s++) {
    guint last = first;
    while (last < names->len && shard_of[last] == s)
      last++;
    guint cnt = last - first;
    LbTensor **ts = g_new0 (LbTensor *, MAX (cnt, 1));
    for (guint i = 0; i < cnt; i++)
      ts[i] = lingbot_dit_random_weight (cfg, names->pdata[first + i], dtype,
          seed);
    g_autofree char *file = lingbot_ckpt_shard_name (s, n_shards);
    g_autofree char *path = g_build_filename (dir, file, NULL);
    ok = lingbot_safetensors_write (path,
        (const char *const *) names->pdata + first,
        (const LbTensor * const *) ts, cnt, meta, error);
    for (guint i = 0; i < cnt; i++)
      lb_tensor_free (ts[i]);
    g_free (ts);
    first = last;
  }
  g_hash_table_unref (meta);

  if (ok)
    ok = lingbot_ckpt_write_index (dir, (const char *const *) names->pdata,
        shard_of, names->len, n_shards, total, error);
  if (ok) {
    g_autofree char *json = lingbot_dit_config_to_json (cfg);
    g_autofree char *path = g_build_filename (dir, "config.json", NULL);
    ok = g_file_set_contents (path, json, -1, error);
  }
  g_free (shard_of);
  g_free (bytes);
  return ok;
}

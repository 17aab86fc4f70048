/* lingbot-gst: LingbotWorld, the devices and the loaded model
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * A world parses the devices string into a backend and a worker group (one
 * thread per rank, DESIGN.md 3), loads the DiT (every rank reads the same
 * weights) and the VAE (encoder and decoder halves), and locates the umT5
 * encoder and its tokenizer.  The text encoder is NOT kept loaded: it is
 * only needed once per session, to turn the prompt into the [512, dim]
 * context, and at 11 GB (bf16 XXL) it would double the resident footprint
 * of the 14B DiT's neighbours for nothing.  lingbot_session_new() loads it,
 * runs it once on rank 0 and frees it (lingbot_prompt_context_new()).
 */
#include "lingbot/lingbot-private.h"
#include "lingbot/backend.h"
#include "lingbot/tokenizer.h"
#include "kernels/error.h"

#include <string.h>

static char *
find_part (const char *dir, const char *const *names)
{
  for (int i = 0; names[i]; i++) {
    char *p = g_build_filename (dir, names[i], NULL);
    if (g_file_test (p, G_FILE_TEST_EXISTS))
      return p;
    g_free (p);
  }
  return NULL;
}

static char *
find_tokenizer (const char *model)
{
  g_autofree char *tdir = g_build_filename (model,
      LINGBOT_WORLD_TOKENIZER_DIR, NULL);
  const char *files[] = { "spiece.model", "tokenizer.model", NULL };
  char *p = find_part (tdir, files);
  if (p == NULL)
    p = find_part (model, files);
  return p;
}

/**
 * lingbot_world_find_text_encoder:
 * @model: a model directory (the release layout of lingbot.h)
 * @t5_path: (out) (transfer full): the umT5 encoder:
 *   `MODEL/models_t5_umt5-xxl-enc-bf16.pth`, else `.safetensors`, else the
 *   dummy manifest `.dummy.json`
 * @tokenizer_path: (out) (transfer full): the SentencePiece model:
 *   `MODEL/google/umt5-xxl/spiece.model` or `tokenizer.model`, else the
 *   same names in MODEL
 * @error: %LINGBOT_ERROR_NOT_FOUND "world: text encoder not found: MODEL/
 *   models_t5_umt5-xxl-enc-bf16.pth does not exist, nor .safetensors or
 *   .dummy.json (without one, give prompt embeddings: ...)" or
 *   "world: tokenizer not found: MODEL/google/umt5-xxl/spiece.model does
 *   not exist"
 *
 * Locates the text encoder's two files the way lingbot_world_new() does
 * (for tools that run the encoder alone, lingbot-encode-prompt --model).
 * Nothing is read.
 *
 * Returns: %TRUE when both exist; on %FALSE both outputs are %NULL.
 */
gboolean
lingbot_world_find_text_encoder (const char *model, char **t5_path,
    char **tokenizer_path, GError ** error)
{
  const char *t5_names[] = { LINGBOT_WORLD_T5_PTH,
    LINGBOT_WORLD_T5_SAFETENSORS, LINGBOT_WORLD_T5_DUMMY, NULL
  };

  g_return_val_if_fail (model != NULL, FALSE);
  *t5_path = find_part (model, t5_names);
  *tokenizer_path = *t5_path ? find_tokenizer (model) : NULL;
  if (*t5_path == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND,
        "world: text encoder not found: %s/%s does not exist, nor "
        ".safetensors or .dummy.json (without one, give prompt embeddings: "
        "lingbotgen's prompt-embeds, lingbot-generate --prompt-embeds, or "
        "load_text_encoder FALSE in LingbotWorldOptions)", model,
        LINGBOT_WORLD_T5_PTH);
    return FALSE;
  }
  if (*tokenizer_path == NULL) {
    g_clear_pointer (t5_path, g_free);
    g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND,
        "world: tokenizer not found: %s/%s/spiece.model does not exist",
        model, LINGBOT_WORLD_TOKENIZER_DIR);
    return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_world_parse_precision:
 * @precision: (nullable): "fp32", "bf16", "fp8" or %NULL (= "fp32")
 * @math: (out): the matching #LingbotPrecision
 * @error: %LINGBOT_ERROR_INVALID_ARGUMENT for anything else, with the
 *   message "world: unknown precision 'VALUE' (choose fp32, bf16 or fp8)"
 *
 * "fp8" (%LINGBOT_PRECISION_FP8, opt-in, Hopper and later) stores the DiT's
 * GEMM weights as E4M3 with per-output-channel scales made at load and runs
 * its linear layers through the gemm_fp8 op (per-token activation scales,
 * f32 accumulation); attention, norms and the KV cache as in "bf16".  CPU
 * ranks run the same path's oracle (kernels/cpu/gemm.c).
 *
 * The values of LingbotWorldOptions.precision (and of the GStreamer
 * elements' precision property).
 *
 * Returns: %TRUE when @precision is one of them.
 */
gboolean
lingbot_world_parse_precision (const char *precision,
    LingbotPrecision * math, GError ** error)
{
  if (precision == NULL || strcmp (precision, "fp32") == 0) {
    *math = LINGBOT_PRECISION_FP32;
    return TRUE;
  }
  if (strcmp (precision, "bf16") == 0) {
    *math = LINGBOT_PRECISION_BF16;
    return TRUE;
  }
  if (strcmp (precision, "fp8") == 0) {
    *math = LINGBOT_PRECISION_FP8;
    return TRUE;
  }
  g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
      "world: unknown precision '%s' (choose fp32, bf16 or fp8)", precision);
  return FALSE;
}

/* The parts of the model directory @model that lingbot_world_new() loads,
 * located (nothing is read): the DiT folder, the VAE file and, with
 * @text_encoder, the umT5 encoder and tokenizer (else those stay %NULL).
 * The error names the first part missing. */
static gboolean
world_find_parts (const char *model, gboolean text_encoder, char **dit,
    char **vae, char **t5, char **tokenizer, GError ** error)
{
  const char *vae_names[] = { LINGBOT_WORLD_VAE_PTH,
    LINGBOT_WORLD_VAE_SAFETENSORS, LINGBOT_WORLD_VAE_DUMMY, NULL
  };

  *dit = *vae = *t5 = *tokenizer = NULL;
  if (model == NULL || *model == '\0') {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "world: no model path (set model_path to the model directory)");
    return FALSE;
  }
  if (!g_file_test (model, G_FILE_TEST_IS_DIR)) {
    g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND,
        g_file_test (model, G_FILE_TEST_EXISTS) ?
        "world: model path %s is not a directory (give the model directory)"
        : "world: model directory %s does not exist", model);
    return FALSE;
  }
  *dit = g_build_filename (model, LINGBOT_WORLD_DIT_DIR, NULL);
  if (!g_file_test (*dit, G_FILE_TEST_IS_DIR)) {
    g_autofree char *idx = g_build_filename (model, "model.safetensors."
        "index.json", NULL);
    g_autofree char *cfg = g_build_filename (model, "config.json", NULL);
    if (!g_file_test (idx, G_FILE_TEST_EXISTS) &&
        !g_file_test (cfg, G_FILE_TEST_EXISTS)) {
      g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND,
          "world: DiT weights not found: %s does not exist", *dit);
      g_clear_pointer (dit, g_free);
      return FALSE;
    }
    g_free (*dit);
    *dit = g_strdup (model);
  }
  *vae = find_part (model, vae_names);
  if (*vae == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND,
        "world: VAE not found: none of %s/%s, %s or %s exists", model,
        LINGBOT_WORLD_VAE_PTH, LINGBOT_WORLD_VAE_SAFETENSORS,
        LINGBOT_WORLD_VAE_DUMMY);
    g_clear_pointer (dit, g_free);
    return FALSE;
  }
  if (text_encoder && !lingbot_world_find_text_encoder (model, t5, tokenizer,
          error)) {
    g_clear_pointer (dit, g_free);
    g_clear_pointer (vae, g_free);
    return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_world_check_model:
 * @model: (nullable): a model directory (the release layout of lingbot.h)
 * @text_encoder: whether the umT5 encoder and its tokenizer are needed
 *   (LingbotWorldOptions.load_text_encoder)
 * @error: the errors lingbot_world_new() gives before it loads anything:
 *   %LINGBOT_ERROR_INVALID_ARGUMENT for no path, %LINGBOT_ERROR_NOT_FOUND
 *   naming the missing directory or part ("world: model directory MODEL does
 *   not exist", "world: model path MODEL is not a directory (give the model
 *   directory)", "world: DiT weights not found: MODEL/transformers does
 *   not exist", "world: VAE not found: ...", the text encoder's of
 *   lingbot_world_find_text_encoder())
 *
 * Locates the parts of @model the way lingbot_world_new() does, without
 * reading a weight: for a caller that refuses a model folder that cannot
 * load before any world is made (lingbot-webrtc-server at start).  A part
 * that exists but does not load (a corrupt or wrongly shaped checkpoint)
 * is found only by lingbot_world_new().
 *
 * Returns: %TRUE when every part exists.
 */
gboolean
lingbot_world_check_model (const char *model, gboolean text_encoder,
    GError ** error)
{
  g_autofree char *dit = NULL, *vae = NULL, *t5 = NULL, *tokenizer = NULL;

  return world_find_parts (model, text_encoder, &dit, &vae, &t5, &tokenizer,
      error);
}

/**
 * lingbot_world_check_devices:
 * @devices: a devices string (LingbotWorldOptions.devices: "cpu:N" or GPU
 *   ordinals "0,1,2,3")
 * @n_ranks: (out) (optional): the number of ranks it names
 * @error: %LINGBOT_ERROR_INVALID_ARGUMENT for a malformed string (%NULL or
 *   empty included); when it is well formed but its backend cannot run
 *   it, the backend's error: the CUDA module's probe when GPUs are asked
 *   for and absent, %LINGBOT_ERROR_UNSUPPORTED for a CUDA backend with gaps in
 *   its op table, %LINGBOT_ERROR_DEVICE for an ordinal beyond the device count
 *
 * Checks @devices as lingbot_world_new() will parse it
 * (lingbot_backend_parse_devices()), without creating ranks or loading
 * anything: for a caller that reports a bad setting before it loads a
 * model (lingbotgen at NULL->READY tells a malformed string from a backend
 * that cannot start by the error code).
 *
 * Returns: %TRUE when a world could be created on @devices.
 */
gboolean
lingbot_world_check_devices (const char *devices, int *n_ranks, GError ** error)
{
  LbBackend *backend = NULL;
  g_autofree int *ordinals = NULL;
  int n = 0;

  if (!lingbot_backend_parse_devices (devices, &backend, &n, &ordinals, error))
    return FALSE;
  if (n_ranks != NULL)
    *n_ranks = n;
  return TRUE;
}

/**
 * lingbot_world_new:
 * @options: devices, model directory, whether the text encoder is wanted,
 *   rank-side timeout, DiT precision
 * @error: %LINGBOT_ERROR_INVALID_ARGUMENT (bad devices string, no model path,
 *   a precision other than "fp32", "bf16" or "fp8": "world: unknown
 *   precision 'VALUE' (choose fp32, bf16 or fp8)"), %LINGBOT_ERROR_NOT_FOUND
 *   naming the missing file or directory of a model part, and the loaders'
 *   errors (format, shape, device)
 *
 * Creates the worker group over the devices and loads the model of the
 * release directory described in lingbot.h:
 *
 * - the DiT from `MODEL/transformers/` (or from MODEL itself when it holds
 *   `model.safetensors.index.json` or `config.json` and no transformers/);
 * - the VAE, both halves, from `MODEL/Wan2.1_VAE.pth`, else
 *   `MODEL/Wan2.1_VAE.safetensors`;
 * - with @options->load_text_encoder, the umT5 encoder
 *   (`models_t5_umt5-xxl-enc-bf16.pth`, else `.safetensors`) and the
 *   tokenizer (`google/umt5-xxl/spiece.model` or `tokenizer.model`, else
 *   the same names in MODEL) must exist, but are only loaded, run and
 *   freed per session (see the file comment).
 *
 * A dummy model (vLLM's load format "dummy", `lingbot-mkmodel --dummy`)
 * loads the same way: `transformers/config.json` with a "lingbot_dummy"
 * member, `Wan2.1_VAE.dummy.json` and `models_t5_umt5-xxl-enc-bf16.dummy.json`
 * in place of the weight files, whose weights are drawn at load time
 * (lingbot_dit_load(), lingbot_vae_load(), lingbot_text_encoder_load()).
 *
 * The DiT and VAE weights are shared by every session of the world.
 * @options->precision is checked first and given to every DiT session of
 * the world (LingbotDitSessionOptions.math: "bf16" is %LINGBOT_PRECISION_BF16,
 * which a GPU rank applies and a CPU rank ignores).
 *
 * Returns: (transfer full) (nullable): the world.
 */
static LingbotWorld *world_new (const LingbotWorldOptions * options,
    LbBackend * backend, int n_ranks, GError ** error);

/* LINGBOT_RANK_TIMEOUT_MS: the rank-side timeout of a world whose options
 * leave it 0 (docs/elements.md "Environment"); *@timeout_ms stays 0 (the
 * default) when unset or empty. */
static gboolean
world_env_timeout (guint * timeout_ms, GError ** error)
{
  const char *env = g_getenv ("LINGBOT_RANK_TIMEOUT_MS");
  if (env == NULL || *env == '\0')
    return TRUE;
  char *end = NULL;
  const gint64 v = g_ascii_strtoll (env, &end, 10);
  if (end == env || *end != '\0' || v < 1 || v > G_MAXINT) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "LINGBOT_RANK_TIMEOUT_MS: '%s' is not a positive number of "
        "milliseconds", env);
    return FALSE;
  }
  *timeout_ms = (guint) v;
  return TRUE;
}

/* The DiT's widths that the other parts fix: its patch embedding takes the
 * VAE's latents and condition (spec 1.2), its camera patch embedding the
 * control tensor (spec 2.7), its head gives the VAE's latents.  The DiT
 * loader checks every weight against the config it infers from these
 * tensors; this checks that config against the parts, so a checkpoint of
 * the wrong width fails at load and names its tensor, not at chunk 0. */
static gboolean
world_check_dit_widths (const char *path, const LingbotDitConfig * cfg,
    GError ** error)
{
  const int in_dim = LINGBOT_VAE_Z_DIM + LINGBOT_VAE_COND_CHANNELS;
  const int ctl = LINGBOT_CONTROL_CHANNELS * 4;
  if (cfg->in_dim != in_dim) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT checkpoint %s: tensor patch_embedding.weight has %d input "
        "channels, expected %d (%d latent + %d condition channels of the "
        "VAE)", path, cfg->in_dim, in_dim, LINGBOT_VAE_Z_DIM,
        LINGBOT_VAE_COND_CHANNELS);
    return FALSE;
  }
  if (cfg->control_in_features != ctl) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT checkpoint %s: tensor patch_embedding_wancamctrl.weight has %d "
        "input features, expected %d (the %d-channel camera ray map in 2x2 "
        "patches)", path, cfg->control_in_features, ctl,
        LINGBOT_CONTROL_CHANNELS);
    return FALSE;
  }
  if (cfg->out_dim != LINGBOT_VAE_Z_DIM) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "DiT checkpoint %s: tensor head.head.bias gives %d output channels, "
        "expected %d (the VAE's latent channels)", path, cfg->out_dim,
        LINGBOT_VAE_Z_DIM);
    return FALSE;
  }
  return TRUE;
}

LingbotWorld *
lingbot_world_new (const LingbotWorldOptions * options, GError ** error)
{
  return world_new (options, NULL, 0, error);
}

/**
 * lingbot_world_new_on_backend:
 * @options: as for lingbot_world_new(); @options->devices is only a label
 * @backend: the backend of the world's ranks (a test backend such as the
 *   emulated device of tests/common/fakedev.c)
 * @n_ranks: ranks, on devices 0 .. @n_ranks - 1 of @backend
 * @error: as for lingbot_world_new()
 *
 * lingbot_world_new() on a backend the devices string cannot name: for
 * tests of whole sessions on an emulated device (lingbot-private.h).
 *
 * Returns: (transfer full) (nullable): the world.
 */
LingbotWorld *
lingbot_world_new_on_backend (const LingbotWorldOptions * options,
    LbBackend * backend, int n_ranks, GError ** error)
{
  g_return_val_if_fail (backend != NULL && n_ranks > 0, NULL);
  return world_new (options, backend, n_ranks, error);
}

static LingbotWorld *
world_new (const LingbotWorldOptions * options, LbBackend * backend,
    int n_ranks, GError ** error)
{
  g_return_val_if_fail (options != NULL, NULL);
  LingbotPrecision math;
  if (!lingbot_world_parse_precision (options->precision, &math, error))
    return NULL;
  const char *model = options->model_path;
  if (model == NULL || *model == '\0') {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "world: no model path (set model_path to the model directory)");
    return NULL;
  }
  g_autofree char *dit_path = NULL;
  g_autofree char *vae_path = NULL;
  g_autofree char *t5_path = NULL;
  g_autofree char *tokenizer_path = NULL;
  /* locate every part before the slow loads, so a missing file is
   * reported at once */
  if (!world_find_parts (model, options->load_text_encoder, &dit_path,
          &vae_path, &t5_path, &tokenizer_path, error))
    return NULL;

  LingbotWorld *w = g_atomic_rc_box_new0 (LingbotWorld);
  g_rec_mutex_init (&w->lock);
  w->devices = g_strdup (options->devices ? options->devices : "cpu:1");
  w->model_path = g_strdup (model);
  w->math = (LbMathMode) math;  /* the same values (api.c) */
  w->t5_path = g_steal_pointer (&t5_path);
  w->tokenizer_path = g_steal_pointer (&tokenizer_path);

  if (backend != NULL) {
    w->backend = backend;
    w->n_ranks = n_ranks;
    w->ordinals = g_new0 (int, n_ranks);
    for (int r = 0; r < n_ranks; r++)
      w->ordinals[r] = r;
  } else if (!lingbot_backend_parse_devices (w->devices, &w->backend,
          &w->n_ranks, &w->ordinals, error)) {
    goto fail;
  }
  guint timeout_ms = options->timeout_ms;
  if (timeout_ms == 0 && !world_env_timeout (&timeout_ms, error))
    goto fail;
  LbWorkerGroupOptions go = { timeout_ms, NULL, "world" };
  w->group = lb_worker_group_new (w->backend, w->n_ranks, w->ordinals, &go,
      error);
  if (w->group == NULL)
    goto fail;

  w->dit = lingbot_dit_load (dit_path, LINGBOT_DIT_LOAD_DEFAULT, error);
  if (w->dit == NULL || !world_check_dit_widths (dit_path,
          lingbot_dit_get_config (w->dit), error))
    goto fail;
  w->vae = lingbot_vae_load (vae_path, LINGBOT_VAE_BOTH, error);
  if (w->vae == NULL)
    goto fail;
  return w;

fail:
  lingbot_world_unref (w);
  return NULL;
}

/**
 * lingbot_world_ref:
 * @world: a world
 *
 * Returns: (transfer full): @world
 */
LingbotWorld *
lingbot_world_ref (LingbotWorld * world)
{
  g_return_val_if_fail (world != NULL, NULL);
  return g_atomic_rc_box_acquire (world);
}

static void
world_clear (gpointer p)
{
  LingbotWorld *world = p;
  lingbot_dit_unref (world->dit);
  lingbot_vae_unref (world->vae);
  lb_worker_group_unref (world->group);
  g_free (world->ordinals);
  g_free (world->devices);
  g_free (world->model_path);
  g_free (world->t5_path);
  g_free (world->tokenizer_path);
  g_rec_mutex_clear (&world->lock);
}

/**
 * lingbot_world_unref:
 * @world: (transfer full) (nullable): a world
 *
 * Drops a reference; the last one shuts the worker group down and frees
 * the model.  A world whose worker group broke (a rank stopped answering:
 * lingbot_world_is_broken()) is never freed: the reference is dropped
 * without freeing anything, since the abandoned rank thread may still use
 * the weights, its state and the group.
 */
void
lingbot_world_unref (LingbotWorld * world)
{
  if (world == NULL)
    return;
  if (world->group != NULL && lb_worker_group_is_broken (world->group))
    return;                     /* leaked on purpose */
  g_atomic_rc_box_release_full (world, world_clear);
}

/**
 * lingbot_world_is_broken:
 * @world: a world
 *
 * A rank of the world stopped answering: a rank waited the world's
 * rank-side timeout (LingbotWorldOptions.timeout_ms,
 * `LINGBOT_RANK_TIMEOUT_MS`) for it in a collective, or a stop bounded the
 * chunk it ran, and it was still busy one timeout later (a kernel, driver
 * call or collective that never returns).  Its thread is abandoned: the
 * world runs nothing again (every call fails with %LINGBOT_ERROR_RANK_FAILED),
 * and the world and its sessions are leaked rather than freed under that
 * thread.  Create a new world (a process restart frees what the stuck
 * device still holds).
 *
 * Returns: %TRUE once the world is broken (for good).
 */
gboolean
lingbot_world_is_broken (LingbotWorld * world)
{
  g_return_val_if_fail (world != NULL, FALSE);
  return world->group != NULL && lb_worker_group_is_broken (world->group);
}

/**
 * lingbot_world_get_devices:
 * @world: a world
 *
 * Returns: the devices string the world was created with.
 */
const char *
lingbot_world_get_devices (LingbotWorld * world)
{
  return world->devices;
}

/**
 * lingbot_world_get_model_path:
 * @world: a world
 *
 * Returns: the model directory.
 */
const char *
lingbot_world_get_model_path (LingbotWorld * world)
{
  return world->model_path;
}

/**
 * lingbot_world_get_precision:
 * @world: a world
 *
 * Returns: "fp32", "bf16" or "fp8": the precision of the world's DiT
 *   sessions on GPU ranks (LingbotWorldOptions.precision; CPU ranks
 *   compute in f32 unless it is "fp8", whose oracle they run).
 */
const char *
lingbot_world_get_precision (LingbotWorld * world)
{
  return world->math == LB_MATH_FP8 ? "fp8" :
      world->math == LB_MATH_BF16 ? "bf16" : "fp32";
}

/**
 * lingbot_world_get_n_ranks:
 * @world: a world
 *
 * Returns: the number of ranks of the worker group.
 */
int
lingbot_world_get_n_ranks (LingbotWorld * world)
{
  return world->n_ranks;
}

/**
 * lingbot_world_get_group:
 * @world: a world
 *
 * Returns: (transfer none): the worker group (valid while @world lives).
 */
LbWorkerGroup *
lingbot_world_get_group (LingbotWorld * world)
{
  return world->group;
}

/**
 * lingbot_world_get_dit:
 * @world: a world
 *
 * Returns: (transfer none): the DiT.
 */
LingbotDit *
lingbot_world_get_dit (LingbotWorld * world)
{
  return world->dit;
}

/**
 * lingbot_world_get_vae:
 * @world: a world
 *
 * Returns: (transfer none): the VAE (encoder and decoder).
 */
LingbotVae *
lingbot_world_get_vae (LingbotWorld * world)
{
  return world->vae;
}

/**
 * lingbot_world_has_text_encoder:
 * @world: a world
 *
 * Returns: whether sessions may pass a text prompt (the world was created
 * with load_text_encoder and found the encoder and the tokenizer).
 */
gboolean
lingbot_world_has_text_encoder (LingbotWorld * world)
{
  return world->t5_path != NULL;
}

/**
 * lingbot_world_count_prompt_tokens:
 * @world: a world with a text encoder (lingbot_world_has_text_encoder())
 * @prompt: (nullable): a text prompt (%NULL = "")
 * @n_tokens: (out): its length in tokens as a session's tokenizer makes
 *   them (the world's SentencePiece model after the reference's text
 *   cleaning), the closing </s> included, before any cut
 * @max_tokens: (out) (optional): the most the text encoder takes,
 *   %LINGBOT_TEXT_LEN (512): a session cuts a longer prompt to its first
 *   @max_tokens - 1 tokens and </s> (spec 5.3)
 * @error: %LINGBOT_ERROR_INVALID_ARGUMENT for a world without a text encoder;
 *   the tokenizer's errors (lingbot_tokenizer_new())
 *
 * Tokenizes @prompt the way lingbot_session_new() will, to tell a prompt
 * that will be cut before the session runs (the session cuts it
 * silently).  Loads the tokenizer for the call.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_world_count_prompt_tokens (LingbotWorld * world, const char *prompt,
    int *n_tokens, int *max_tokens, GError ** error)
{
  g_autoptr (LingbotTokenizer) tok = NULL;
  g_autofree char *clean = NULL;
  g_autofree int32_t *ids = NULL;
  gsize n = 0;

  g_return_val_if_fail (world != NULL && n_tokens != NULL, FALSE);
  if (world->tokenizer_path == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "world: no text encoder to tokenize a prompt with");
    return FALSE;
  }
  if (!(tok = lingbot_tokenizer_new (world->tokenizer_path, error)))
    return FALSE;
  clean = lingbot_text_clean (prompt ? prompt : "");
  if (clean[0] != '\0'
      && !(ids = lingbot_tokenizer_tokenize (tok, clean, &n, error)))
    return FALSE;
  *n_tokens = (int) MIN (n + 1, (gsize) G_MAXINT);
  if (max_tokens != NULL)
    *max_tokens = LINGBOT_TEXT_LEN;
  return TRUE;
}

/**
 * lingbot_world_lock:
 * @world: a world
 *
 * Takes the world's (recursive) rank lock.  Sessions hold it around every
 * sequence of jobs they submit to the worker group; code that submits its
 * own jobs to lingbot_world_get_group() (a decoder of its own, say) must
 * hold it too, so that jobs of two threads never reach the ranks in
 * different orders.
 */
void
lingbot_world_lock (LingbotWorld * world)
{
  g_rec_mutex_lock (&world->lock);
}

/**
 * lingbot_world_unlock:
 * @world: a world
 *
 * Releases lingbot_world_lock().
 */
void
lingbot_world_unlock (LingbotWorld * world)
{
  g_rec_mutex_unlock (&world->lock);
}

/* lingbot-gst: Wan2.1 VAE weights (Wan2.1_VAE.pth layout) and constants
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Spec: vae_and_distributed_spec.md A.1, A.2, A.4, A.6, A.7.
 */
#include "lingbot/vae-private.h"
#include "lingbot/dummy.h"

#include <string.h>

/* Spec A.2: not in the checkpoint, hard-coded by Wan and TeleFuser. */
static const float latent_mean[VAE_Z_DIM] = { -0.7571f, -0.7089f, -0.9113f,
  0.1075f, -0.1745f, 0.9653f, -0.1517f, 1.5508f, 0.4134f, -0.0715f, 0.5517f,
  -0.3632f, -0.1922f, -0.9497f, 0.2503f, -0.2921f
};

static const float latent_std[VAE_Z_DIM] = { 2.8184f, 1.4541f, 2.3275f, 2.6558f,
  1.2196f, 1.7708f, 2.6052f, 2.0743f, 3.2687f, 2.1526f, 2.8652f, 1.5579f,
  1.6382f, 1.1253f, 2.8251f, 1.9160f
};

static float latent_inv_std[VAE_Z_DIM];

static void
init_inv_std (void)
{
  static gsize once = 0;
  if (g_once_init_enter (&once)) {
    /* float32(1 / std): the reference computes 1.0 / tensor(std) in fp32 */
    for (int c = 0; c < VAE_Z_DIM; c++)
      latent_inv_std[c] = 1.0f / latent_std[c];
    g_once_init_leave (&once, 1);
  }
}

/**
 * lingbot_vae_latent_mean:
 *
 * Returns: (array fixed-size=16): the 16 per-channel latent means of spec A.2.
 */
const float *
lingbot_vae_latent_mean (void)
{
  return latent_mean;
}

/**
 * lingbot_vae_latent_inv_std:
 *
 * Returns: (array fixed-size=16): float32(1 / std) per channel (spec A.2);
 * decoding divides by it, encoding multiplies by it.
 */
const float *
lingbot_vae_latent_inv_std (void)
{
  init_inv_std ();
  return latent_inv_std;
}

/**
 * lingbot_vae_frames_for_latents:
 * @n_latents: latent frames in a chunk (>= 1)
 * @first_chunk: whether the chunk is the first of its session
 *
 * Spec A.5: the first latent frame of a session decodes to 1 video frame,
 * every later one to 4 (13 for a first chunk of 4, then 16).
 *
 * Returns: video frames the decoder produces for the chunk.
 */
int
lingbot_vae_frames_for_latents (int n_latents, gboolean first_chunk)
{
  if (n_latents <= 0)
    return 0;
  return first_chunk ? 4 * n_latents - 3 : 4 * n_latents;
}

/* ---- loading ---- */

typedef struct
{
  LingbotVae *vae;
  LingbotCheckpoint *ckpt;
} Loader;

/* Finds @name (or TeleFuser's "model." + name), checks its shape and
 * returns a contiguous f32 view of it in @out. */
static gboolean
load_tensor (Loader * ld, const char *name, int ndim, const int64_t * shape,
    LbTensor * out, GError ** error)
{
  const char *key = name;
  g_autofree char *alt = NULL;
  if (!lingbot_checkpoint_has_tensor (ld->ckpt, name)) {
    alt = g_strconcat ("model.", name, NULL);
    if (lingbot_checkpoint_has_tensor (ld->ckpt, alt)) {
      key = alt;
    } else {
      g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND,
          "VAE checkpoint %s: missing tensor %s",
          lingbot_checkpoint_get_path (ld->ckpt), name);
      return FALSE;
    }
  }
  const LbTensor *t =
      lingbot_checkpoint_get_checked (ld->ckpt, key, ndim, shape,
      LINGBOT_DTYPE_ANY, error);
  if (t == NULL) {
    g_prefix_error (error, "VAE checkpoint %s: ",
        lingbot_checkpoint_get_path (ld->ckpt));
    return FALSE;
  }
  if (!lb_dtype_is_float (t->dtype)) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "VAE checkpoint %s: tensor %s has dtype %s, expected a float type",
        lingbot_checkpoint_get_path (ld->ckpt), name, lb_dtype_name (t->dtype));
    return FALSE;
  }
  if (t->dtype == LB_DTYPE_F32 && lb_tensor_is_contiguous (t)) {
    lb_tensor_view (out, t);
  } else {
    LbTensor *f = lb_tensor_to_f32 (t);
    g_ptr_array_add (ld->vae->owned, f);
    lb_tensor_view (out, f);
  }
  return TRUE;
}

static gboolean
load_conv (Loader * ld, const char *prefix, const char *leaf, int cout, int cin,
    int kt, int kh, int kw, gboolean conv2d, VaeConv * cv, GError ** error)
{
  g_autofree char *wn
      = g_strdup_printf ("%s%s%s.weight", prefix, *leaf ? "." : "", leaf);
  g_autofree char *bn
      = g_strdup_printf ("%s%s%s.bias", prefix, *leaf ? "." : "", leaf);
  int64_t ws5[5] = { cout, cin, kt, kh, kw };
  int64_t ws4[4] = { cout, cin, kh, kw };
  int64_t bs[1] = { cout };
  LbTensor w;
  if (!load_tensor (ld, wn, conv2d ? 4 : 5, conv2d ? ws4 : ws5, &w, error))
    return FALSE;
  if (!load_tensor (ld, bn, 1, bs, &cv->b, error))
    return FALSE;
  /* 2-D convs are run as kt = 1 causal convs: same memory */
  gboolean ok = lb_tensor_view_reshape (&cv->w, &w, 5, ws5);
  g_assert (ok);
  cv->cin = cin;
  cv->cout = cout;
  cv->kt = kt;
  cv->kh = kh;
  cv->kw = kw;
  return TRUE;
}

static gboolean
load_gamma (Loader * ld, const char *name, int c, int ndim, LbTensor * out,
    GError ** error)
{
  int64_t shape[4] = { c, 1, 1, 1 };
  LbTensor g;
  if (!load_tensor (ld, name, ndim, shape, &g, error))
    return FALSE;
  int64_t flat[1] = { c };
  gboolean ok = lb_tensor_view_reshape (out, &g, 1, flat);
  g_assert (ok);
  return TRUE;
}

static gboolean
load_res (Loader * ld, const char *prefix, int cin, int cout, VaeLayer * l,
    GError ** error)
{
  g_autofree char *g0 = g_strdup_printf ("%s.residual.0.gamma", prefix);
  g_autofree char *g3 = g_strdup_printf ("%s.residual.3.gamma", prefix);
  l->kind = VAE_LAYER_RES;
  l->cin = cin;
  l->cout = cout;
  g_strlcpy (l->name, prefix, sizeof l->name);
  if (!load_gamma (ld, g0, cin, 4, &l->gamma_a, error)
      || !load_conv (ld, prefix, "residual.2", cout, cin, 3, 3, 3, FALSE, &l->a,
          error)
      || !load_gamma (ld, g3, cout, 4, &l->gamma_b, error)
      || !load_conv (ld, prefix, "residual.6", cout, cout, 3, 3, 3, FALSE,
          &l->b, error))
    return FALSE;
  l->has_sc = cin != cout;
  if (l->has_sc
      && !load_conv (ld, prefix, "shortcut", cout, cin, 1, 1, 1, FALSE, &l->sc,
          error))
    return FALSE;
  return TRUE;
}

static gboolean
load_attn (Loader * ld, const char *prefix, int c, VaeLayer * l,
    GError ** error)
{
  g_autofree char *gn = g_strdup_printf ("%s.norm.gamma", prefix);
  l->kind = VAE_LAYER_ATTN;
  l->cin = l->cout = c;
  g_strlcpy (l->name, prefix, sizeof l->name);
  if (!load_gamma (ld, gn, c, 3, &l->gamma_a, error)
      || !load_conv (ld, prefix, "to_qkv", 3 * c, c, 1, 1, 1, TRUE, &l->a,
          error)
      || !load_conv (ld, prefix, "proj", c, c, 1, 1, 1, TRUE, &l->b, error))
    return FALSE;
  /* the attention runs its 1x1 convs as gemms over token-major rows */
  int64_t s2[2];
  s2[0] = 3 * c;
  s2[1] = c;
  gboolean ok = lb_tensor_view_reshape (&l->a.w, &l->a.w, 2, s2);
  s2[0] = c;
  ok = ok && lb_tensor_view_reshape (&l->b.w, &l->b.w, 2, s2);
  g_assert (ok);
  return TRUE;
}

static gboolean
load_resample (Loader * ld, const char *prefix, VaeLayerKind kind, int c,
    VaeLayer * l, GError ** error)
{
  gboolean up = kind == VAE_LAYER_UP2D || kind == VAE_LAYER_UP3D;
  l->kind = kind;
  l->cin = c;
  l->cout = up ? c / 2 : c;
  g_strlcpy (l->name, prefix, sizeof l->name);
  if (!load_conv (ld, prefix, "resample.1", l->cout, c, 1, 3, 3, TRUE, &l->a,
          error))
    return FALSE;
  l->has_time = kind == VAE_LAYER_UP3D || kind == VAE_LAYER_DOWN3D;
  if (l->has_time
      && !load_conv (ld, prefix, "time_conv", up ? 2 * c : c, c, 3, 1, 1, FALSE,
          &l->b, error))
    return FALSE;
  return TRUE;
}

/* The four levels of sampling blocks @prefix.0, .1, ... into @layers:
 * level i is @n_res res blocks from in[i] * d to out[i] * d channels,
 * then (i < 3) a resample of kind[i]: 4 * @n_res + 3 layers. */
static gboolean
load_levels (Loader * ld, const char *prefix, int d, const int in[4],
    const int out[4], const VaeLayerKind kind[3], int n_res,
    VaeLayer * layers, GError ** error)
{
  int idx = 0;
  for (int i = 0; i < 4; i++) {
    int cin = in[i] * d, cout = out[i] * d;
    for (int r = 0; r < n_res + (i < 3); r++, idx++) {
      char name[48];
      g_snprintf (name, sizeof name, "%s.%d", prefix, idx);
      if (r < n_res ? !load_res (ld, name, cin, cout, &layers[idx], error)
          : !load_resample (ld, name, kind[i], cout, &layers[idx], error))
        return FALSE;
      cin = cout;
    }
  }
  return TRUE;
}

/* Decoder of spec A.4 (dims 4d, 4d, 4d, 2d, d). */
static gboolean
load_decoder (Loader * ld, int d, GError ** error)
{
  VaeNet *n = &ld->vae->dec;
  n->n_layers = 3 + 15;
  n->layers = g_new0 (VaeLayer, n->n_layers);
  if (!load_conv (ld, "decoder.conv1", "", 4 * d, VAE_Z_DIM, 3, 3, 3, FALSE,
          &n->conv_in, error)
      || !load_res (ld, "decoder.middle.0", 4 * d, 4 * d, &n->layers[0], error)
      || !load_attn (ld, "decoder.middle.1", 4 * d, &n->layers[1], error)
      || !load_res (ld, "decoder.middle.2", 4 * d, 4 * d, &n->layers[2], error))
    return FALSE;
  /* upsamples: level i has 3 res blocks then (i < 3) a resample */
  static const int level_in[4] = { 4, 2, 2, 1 };
  static const int level_out[4] = { 4, 4, 2, 1 };
  static const VaeLayerKind level_up[3]
  = { VAE_LAYER_UP3D, VAE_LAYER_UP3D, VAE_LAYER_UP2D };
  if (!load_levels (ld, "decoder.upsamples", d, level_in, level_out, level_up,
          3, &n->layers[3], error)
      || !load_gamma (ld, "decoder.head.0.gamma", d, 4, &n->head_gamma, error)
      || !load_conv (ld, "decoder.head", "2", 3, d, 3, 3, 3, FALSE, &n->head,
          error)
      || !load_conv (ld, "conv2", "", VAE_Z_DIM, VAE_Z_DIM, 1, 1, 1, FALSE,
          &ld->vae->conv2, error))
    return FALSE;
  return TRUE;
}

/* Encoder of spec A.6 (dims d, d, 2d, 4d, 4d). */
static gboolean
load_encoder (Loader * ld, int d, GError ** error)
{
  VaeNet *n = &ld->vae->enc;
  n->n_layers = 11 + 3;
  n->layers = g_new0 (VaeLayer, n->n_layers);
  if (!load_conv (ld, "encoder.conv1", "", d, 3, 3, 3, 3, FALSE, &n->conv_in,
          error))
    return FALSE;
  static const int level_in[4] = { 1, 1, 2, 4 };
  static const int level_out[4] = { 1, 2, 4, 4 };
  static const VaeLayerKind level_down[3]
  = { VAE_LAYER_DOWN2D, VAE_LAYER_DOWN3D, VAE_LAYER_DOWN3D };
  if (!load_levels (ld, "encoder.downsamples", d, level_in, level_out,
          level_down, 2, n->layers, error)
      || !load_res (ld, "encoder.middle.0", 4 * d, 4 * d, &n->layers[11], error)
      || !load_attn (ld, "encoder.middle.1", 4 * d, &n->layers[12], error)
      || !load_res (ld, "encoder.middle.2", 4 * d, 4 * d, &n->layers[13], error)
      || !load_gamma (ld, "encoder.head.0.gamma", 4 * d, 4, &n->head_gamma,
          error)
      || !load_conv (ld, "encoder.head", "2", 2 * VAE_Z_DIM, 4 * d, 3, 3, 3,
          FALSE, &n->head, error))
    return FALSE;
  VaeConv full;
  if (!load_conv (ld, "conv1", "", 2 * VAE_Z_DIM, 2 * VAE_Z_DIM, 1, 1, 1, FALSE,
          &full, error))
    return FALSE;
  /* only mu (output channels 0..15) is used: rows 0..15 of the weight */
  ld->vae->conv1_mu = full;
  lb_tensor_view_narrow (&ld->vae->conv1_mu.w, &full.w, 0, 0, VAE_Z_DIM);
  lb_tensor_view_narrow (&ld->vae->conv1_mu.b, &full.b, 0, 0, VAE_Z_DIM);
  ld->vae->conv1_mu.cout = VAE_Z_DIM;
  return TRUE;
}

/* The base width: decoder.head.0.gamma is (d,1,1,1), encoder.conv1.weight
 * is (d,3,3,3,3). */
static gboolean
infer_dim (LingbotCheckpoint * ckpt, LingbotVaeParts parts, int *dim,
    GError ** error)
{
  const char *names[4] = { NULL };
  if (parts & LINGBOT_VAE_DECODER) {
    names[0] = "decoder.head.0.gamma";
    names[1] = "model.decoder.head.0.gamma";
  } else {
    names[0] = "encoder.conv1.weight";
    names[1] = "model.encoder.conv1.weight";
  }
  for (int i = 0; i < 2; i++) {
    if (!lingbot_checkpoint_has_tensor (ckpt, names[i]))
      continue;
    const LbTensor *t = lingbot_checkpoint_get (ckpt, names[i], NULL);
    if (t->ndim >= 1 && t->shape[0] >= 1 && t->shape[0] <= 4096) {
      *dim = (int) t->shape[0];
      return TRUE;
    }
  }
  g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND,
      "VAE checkpoint %s: missing tensor %s (not a Wan2.1 VAE?)",
      lingbot_checkpoint_get_path (ckpt), names[0]);
  return FALSE;
}

/**
 * lingbot_vae_new_from_checkpoint:
 * @ckpt: an open checkpoint: Wan2.1_VAE.pth (plain or wrapped in
 *   `model_state`), or safetensors with the same names (optionally with
 *   TeleFuser's `model.` prefix)
 * @parts: which half to load
 * @error: %LB_ERROR_NOT_FOUND "VAE checkpoint PATH: missing tensor NAME";
 *   %LB_ERROR_SHAPE naming the tensor and both shapes
 *
 * Loads the VAE under the key names and shapes of spec A.7.  The base
 * width (96 in the published file) is read from the checkpoint, so tiny
 * test models of the same layout load too.  float32 contiguous weights are
 * used in place (the checkpoint stays mapped while the VAE lives); bf16,
 * f16, f64 or strided ones are converted to float32 once.
 *
 * Returns: (transfer full) (nullable): the VAE.
 */
LingbotVae *
lingbot_vae_new_from_checkpoint (LingbotCheckpoint * ckpt,
    LingbotVaeParts parts, GError ** error)
{
  g_return_val_if_fail (ckpt != NULL, NULL);
  g_return_val_if_fail ((parts & LINGBOT_VAE_BOTH) != 0, NULL);
  int dim;
  if (!infer_dim (ckpt, parts, &dim, error))
    return NULL;
  init_inv_std ();

  LingbotVae *vae = g_atomic_rc_box_new0 (LingbotVae);
  vae->dim = dim;
  vae->parts = parts;
  vae->ckpt = lingbot_checkpoint_ref (ckpt);
  vae->owned = g_ptr_array_new_with_free_func ((GDestroyNotify) lb_tensor_free);
  memcpy (vae->mean, latent_mean, sizeof vae->mean);
  memcpy (vae->inv_std, latent_inv_std, sizeof vae->inv_std);

  Loader ld = { vae, ckpt };
  if (((parts & LINGBOT_VAE_DECODER) && !load_decoder (&ld, dim, error))
      || ((parts & LINGBOT_VAE_ENCODER) && !load_encoder (&ld, dim, error))) {
    lingbot_vae_unref (vae);
    return NULL;
  }
  return vae;
}

/**
 * lingbot_vae_load:
 * @path: a `.pth`, `.safetensors` (or anything lingbot_checkpoint_open()
 *   reads) holding Wan2.1 VAE weights, or a dummy manifest
 *   (`*.dummy.json`: `{"lingbot_dummy": {"seed": S}, "dim": D}`, the
 *   weights lingbot_vae_write_random() would write for D and S, drawn in
 *   memory)
 * @parts: which half to load
 * @error: I/O and format errors of the reader, or those of
 *   lingbot_vae_new_from_checkpoint()
 *
 * Returns: (transfer full) (nullable): the VAE.
 */
LingbotVae *
lingbot_vae_load (const char *path, LingbotVaeParts parts, GError ** error)
{
  g_autoptr (LingbotCheckpoint) ckpt = NULL;
  if (lingbot_dummy_is_manifest (path)) {
    LingbotDummy d;
    int64_t dim = 0;
    if (!lingbot_dummy_read (path, "VAE", &d, error))
      return NULL;
    gboolean ok = lingbot_dummy_get_int (&d, "dim", 2,
        LINGBOT_VAE_MAX_RANDOM_DIM, &dim, error);
    if (ok)
      ckpt = lingbot_vae_random_checkpoint (path, (int) dim, d.seed, error);
    lingbot_dummy_clear (&d);
    if (ckpt == NULL)
      g_prefix_error (error, "VAE %s: ", path);
  } else {
    ckpt = lingbot_checkpoint_open (path, error);
  }
  if (ckpt == NULL)
    return NULL;
  return lingbot_vae_new_from_checkpoint (ckpt, parts, error);
}

/**
 * lingbot_vae_ref:
 * Returns: (transfer full): @vae
 */
LingbotVae *
lingbot_vae_ref (LingbotVae * vae)
{
  return g_atomic_rc_box_acquire (vae);
}

static void
vae_clear (gpointer p)
{
  LingbotVae *vae = p;
  g_free (vae->enc.layers);
  g_free (vae->dec.layers);
  g_ptr_array_unref (vae->owned);
  lingbot_checkpoint_unref (vae->ckpt);
}

/**
 * lingbot_vae_unref:
 * @vae: (nullable): a VAE
 */
void
lingbot_vae_unref (LingbotVae * vae)
{
  if (vae != NULL)
    g_atomic_rc_box_release_full (vae, vae_clear);
}

/**
 * lingbot_vae_get_dim:
 *
 * Returns: the base width (96 for Wan2.1_VAE.pth, 8 for the golden tiny).
 */
int
lingbot_vae_get_dim (LingbotVae * vae)
{
  return vae->dim;
}

/**
 * lingbot_vae_get_parts:
 *
 * Returns: the halves that were loaded.
 */
LingbotVaeParts
lingbot_vae_get_parts (LingbotVae * vae)
{
  return vae->parts;
}

/* ---- weights on a session's device ---- */

/* Replaces the host view @t by a view of a contiguous f32 copy on
 * @stream's device (kept in wt->owned).  Unused slots (no data) stay
 * empty. */
static gboolean
upload_view (VaeWeights * wt, LbStream * stream, LbTensor * t, GError ** error)
{
  if (t->data == NULL)
    return TRUE;
  g_autoptr (LbTensor) tmp = NULL;
  const LbTensor *src = t;
  if (t->dtype != LB_DTYPE_F32 || !lb_tensor_is_contiguous (t)) {
    tmp = lb_tensor_new (LB_DTYPE_F32, t->ndim, t->shape);
    if (!lb_tensor_copy_into (tmp, t, error))
      return FALSE;
    src = tmp;
  }
  LbTensor *dev
      = lb_tensor_new_on (stream, LB_DTYPE_F32, t->ndim, t->shape, error);
  if (dev == NULL)
    return FALSE;
  g_ptr_array_add (wt->owned, dev);
  if (!lb_tensor_upload (stream, dev, src, error))
    return FALSE;
  /* an upload from a temporary must land before the temporary goes */
  if (tmp != NULL && !stream->backend->stream_synchronize (stream, error))
    return FALSE;
  wt->nbytes += lb_tensor_nbytes (dev);
  lb_tensor_view (t, dev);
  return TRUE;
}

static gboolean
upload_conv (VaeWeights * wt, LbStream * stream, VaeConv * cv, GError ** error)
{
  return upload_view (wt, stream, &cv->w, error)
      && upload_view (wt, stream, &cv->b, error);
}

/**
 * vae_weights_init:
 * @wt: (out caller-allocates): the session's weights; clear them with
 *   vae_weights_clear(), also after a failure
 * @stream: the session's (or the decoder rank's) stream
 * @vae: the model
 * @part: %LINGBOT_VAE_DECODER (decoder trunk + conv2) or
 *   %LINGBOT_VAE_ENCODER (encoder trunk + conv1's mu rows); loaded in @vae
 * @error: %LB_ERROR_DEVICE from the allocations or uploads
 *
 * On the CPU backend @wt borrows @vae's host tensors (no copy).  On any
 * other backend every weight the half uses (conv weights and biases, RMS
 * gammas, the attention's to_qkv / proj) is copied once, as a contiguous
 * float32 tensor (lb_tensor_new_on() + lb_tensor_upload()), to @stream's
 * device, and the stream is synchronised; layer kinds, shapes and names
 * are those of @vae.  Each decoder rank calls it on its own stream, so
 * every device holds its own copy (spec A.10: the bands share no memory).
 *
 * Returns: %TRUE on success.
 */
gboolean
vae_weights_init (VaeWeights * wt, LbStream * stream, const LingbotVae * vae,
    LingbotVaeParts part, GError ** error)
{
  g_assert (part == LINGBOT_VAE_DECODER || part == LINGBOT_VAE_ENCODER);
  g_assert (vae->parts & part);
  const gboolean dec = part == LINGBOT_VAE_DECODER;
  memset (wt, 0, sizeof *wt);
  wt->net = dec ? vae->dec : vae->enc;
  wt->extra = dec ? vae->conv2 : vae->conv1_mu;
  if (stream->backend->device_type == LB_DEVICE_CPU)
    return TRUE;

  wt->owned = g_ptr_array_new_with_free_func ((GDestroyNotify) lb_tensor_free);
  VaeNet *n = &wt->net;
  n->layers = g_memdup2 (n->layers, sizeof (VaeLayer) * n->n_layers);
  if (!upload_conv (wt, stream, &n->conv_in, error)
      || !upload_view (wt, stream, &n->head_gamma, error)
      || !upload_conv (wt, stream, &n->head, error)
      || !upload_conv (wt, stream, &wt->extra, error))
    return FALSE;
  for (int i = 0; i < n->n_layers; i++) {
    VaeLayer *l = &n->layers[i];
    if (!upload_view (wt, stream, &l->gamma_a, error)
        || !upload_view (wt, stream, &l->gamma_b, error)
        || !upload_conv (wt, stream, &l->a, error)
        || !upload_conv (wt, stream, &l->b, error)
        || (l->has_sc && !upload_conv (wt, stream, &l->sc, error)))
      return FALSE;
  }
  return stream->backend->stream_synchronize (stream, error);
}

/**
 * vae_weights_clear:
 * @wt: weights from vae_weights_init() (or zeroed)
 *
 * Frees the device copies; forgets borrowed host weights.
 */
void
vae_weights_clear (VaeWeights * wt)
{
  if (wt->owned != NULL) {
    g_ptr_array_unref (wt->owned);
    g_free (wt->net.layers);
  }
  memset (wt, 0, sizeof *wt);
}

/* lingbot-gst: umT5 text encoder (prompt conditioning)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot_model_spec.md section 5, golden/README.md section 2.  Weights are
 * widened to float32 once at load and placed on the stream's device; the
 * token embedding table stays in the (mmapped) checkpoint in its stored
 * dtype and only the looked-up rows are widened.  All activations of one
 * forward are allocated once per call, before the layer loop.
 */
#include "lingbot/text-encoder.h"
#include "lingbot/text-encoder-random.h"
#include "lingbot/dummy.h"
#include "kernels/error.h"

#include <math.h>
#include <string.h>

typedef struct
{
  LbTensor *norm1, *q, *k, *v, *o, *norm2, *gate, *fc1, *fc2;
  float *pos;                   /* host [num_buckets, num_heads] */
} T5Block;

struct _LingbotTextEncoder
{
  LingbotTextEncoderConfig cfg;
  LbStream *stream;
  gboolean on_host;             /* stream is the CPU backend */
  LingbotCheckpoint *ckpt;      /* keeps the embedding table mapped */
  const LbTensor *embedding;    /* [vocab, dim], checkpoint dtype */
  T5Block *blocks;
  LbTensor *norm;
};

/**
 * lingbot_t5_relative_bucket:
 * @rel: key position minus query position
 * @num_buckets: total buckets (32), half for each direction
 * @max_distance: distance mapped to the last bucket (128)
 *
 * The bidirectional T5 relative-position bucket of spec 5.2 / golden README
 * section 2: 16 (half) if @rel > 0 else 0, plus |rel| below 8 (half/2), else
 * min(15, 8 + trunc(ln(|rel|/8) / ln(128/8) * 8)) with the logarithm and
 * the division evaluated in float32 as the reference does.
 *
 * Returns: the bucket index in [0, @num_buckets).
 */
int
lingbot_t5_relative_bucket (int64_t rel, int num_buckets, int max_distance)
{
  int half = num_buckets / 2;
  int bucket = rel > 0 ? half : 0;
  int64_t n = rel < 0 ? -rel : rel;
  int exact = half / 2;
  if (n < exact)
    return bucket + (int) n;
  /* torch: log(rel.float() / max_exact) / math.log(max_dist / max_exact)
   *        * (num_buckets - max_exact), all float32 tensor ops */
  float r = (float) n / (float) exact;
  float lg = logf (r);
  float denom = (float) log ((double) max_distance / exact);
  float v = lg / denom * (float) (half - exact);
  int64_t large = exact + (int64_t) v;
  if (large > half - 1)
    large = half - 1;
  return bucket + (int) large;
}

/* ------------------------------------------------------------------------ */

static LbTensor *
place_weight (LingbotTextEncoder * enc, const LbTensor * src, GError ** error)
{
  LbTensor *host = lb_tensor_to_f32 (src);
  if (enc->on_host)
    return host;
  LbTensor *dev = lb_tensor_new_on (enc->stream, LB_DTYPE_F32, host->ndim,
      host->shape, error);
  if (dev && !lb_tensor_upload (enc->stream, dev, host, error)) {
    lb_tensor_free (dev);
    dev = NULL;
  }
  lb_tensor_free (host);
  return dev;
}

static LbTensor *
load_weight (LingbotTextEncoder * enc, const char *name, int ndim,
    int64_t d0, int64_t d1, GError ** error)
{
  int64_t shape[2] = { d0, d1 };
  const LbTensor *t = lingbot_checkpoint_get_checked (enc->ckpt, name, ndim,
      shape, LINGBOT_DTYPE_ANY, error);
  if (t == NULL)
    return NULL;
  if (!lb_dtype_is_float (t->dtype)) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "text encoder: tensor %s has dtype %s, expected a float type", name,
        lb_dtype_name (t->dtype));
    return NULL;
  }
  return place_weight (enc, t, error);
}

static const LbTensor *
get_any (LingbotCheckpoint * ckpt, const char *name, int ndim, GError ** error)
{
  const LbTensor *t = lingbot_checkpoint_get (ckpt, name, error);
  if (t && t->ndim != ndim) {
    g_autofree char *s = lb_tensor_shape_string (t);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "text encoder: tensor %s has shape %s, expected %d dimensions",
        name, s, ndim);
    return NULL;
  }
  return t;
}

/* The tensors infer_config() reads the shapes off, in lookup order. */
enum
{
  INFER_EMB, INFER_Q, INFER_GATE, INFER_FC1, INFER_FC2, INFER_POS, N_INFER
};

static const char *const infer_names[N_INFER] = {
  [INFER_EMB] = "token_embedding.weight",
  [INFER_Q] = "blocks.0.attn.q.weight",
  [INFER_GATE] = "blocks.0.ffn.gate.0.weight",
  [INFER_FC1] = "blocks.0.ffn.fc1.weight",
  [INFER_FC2] = "blocks.0.ffn.fc2.weight",
  [INFER_POS] = "blocks.0.pos_embedding.embedding.weight",
};

static gboolean
infer_config (LingbotCheckpoint * ckpt, LingbotTextEncoderConfig * cfg,
    GError ** error)
{
  const LbTensor *t[N_INFER];
  for (int i = 0; i < N_INFER; i++)
    if (!(t[i] = get_any (ckpt, infer_names[i], 2, error)))
      return FALSE;
  const LbTensor *gate = t[INFER_GATE], *pos = t[INFER_POS];

  cfg->vocab = t[INFER_EMB]->shape[0];
  cfg->dim = t[INFER_EMB]->shape[1];
  cfg->dim_attn = t[INFER_Q]->shape[0];
  /* the FFN width two of gate/fc1/fc2 agree on, so that a single
   * misshapen tensor is the one the shape check names */
  if (gate->shape[0] == t[INFER_FC1]->shape[0] ||
      gate->shape[0] == t[INFER_FC2]->shape[1])
    cfg->dim_ffn = gate->shape[0];
  else
    cfg->dim_ffn = t[INFER_FC1]->shape[0];
  cfg->num_buckets = (int) pos->shape[0];
  cfg->num_heads = (int) pos->shape[1];
  cfg->max_distance = 128;
  cfg->eps = 1e-6f;
  cfg->num_layers = 0;
  for (;;) {
    g_autofree char *name = g_strdup_printf ("blocks.%d.norm1.weight",
        cfg->num_layers);
    if (!lingbot_checkpoint_has_tensor (ckpt, name))
      break;
    cfg->num_layers++;
  }
  if (cfg->num_heads <= 0 || cfg->dim_attn % cfg->num_heads != 0 ||
      cfg->num_buckets < 4) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "text encoder: blocks.0.pos_embedding.embedding.weight [%"
        G_GINT64_FORMAT ", %" G_GINT64_FORMAT "] does not give a head count "
        "dividing dim_attn %" G_GINT64_FORMAT, pos->shape[0], pos->shape[1],
        cfg->dim_attn);
    return FALSE;
  }
  if (!lingbot_checkpoint_has_tensor (ckpt, "norm.weight")) {
    g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND,
        "text encoder: tensor norm.weight not found in %s",
        lingbot_checkpoint_get_path (ckpt));
    return FALSE;
  }
  return TRUE;
}

/**
 * lingbot_text_encoder_new:
 * @ckpt: a checkpoint holding the umT5 encoder under its published names
 *   (`token_embedding.weight`, `blocks.N.attn.q.weight`, ...,
 *   `norm.weight`; spec 5.2); F32, BF16 or F16
 * @stream: the stream the encoder will run on (it must outlive the
 *   encoder); the weights are placed on its device
 * @error: %LB_ERROR_NOT_FOUND naming a missing tensor, %LB_ERROR_SHAPE
 *   naming a tensor of the wrong shape or dtype, %LB_ERROR_DEVICE
 *
 * Builds the encoder.  The configuration is inferred from the shapes:
 * vocab and dim from `token_embedding.weight`, dim_attn from
 * `blocks.0.attn.q.weight`, dim_ffn from `blocks.0.ffn.{gate.0,fc1,fc2}`, buckets
 * and heads from `blocks.0.pos_embedding.embedding.weight` [32, heads],
 * layers by counting `blocks.N`.  Every weight but the embedding table is
 * widened to float32 here, once.  @ckpt is referenced while the encoder
 * lives.
 *
 * Returns: (transfer full): the encoder, or %NULL on error.
 */
LingbotTextEncoder *
lingbot_text_encoder_new (LingbotCheckpoint * ckpt, LbStream * stream,
    GError ** error)
{
  g_return_val_if_fail (ckpt != NULL && stream != NULL, NULL);
  LingbotTextEncoder *enc = g_new0 (LingbotTextEncoder, 1);
  enc->ckpt = lingbot_checkpoint_ref (ckpt);
  enc->stream = stream;
  enc->on_host = stream->backend->device_type == LB_DEVICE_CPU;
  LingbotTextEncoderConfig *c = &enc->cfg;
  if (!infer_config (ckpt, c, error))
    goto fail;

  enc->embedding = lingbot_checkpoint_get (ckpt, "token_embedding.weight",
      error);
  if (!lb_dtype_is_float (enc->embedding->dtype) ||
      !lb_tensor_is_contiguous (enc->embedding)) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "text encoder: tensor token_embedding.weight must be a contiguous "
        "float tensor (dtype %s)", lb_dtype_name (enc->embedding->dtype));
    goto fail;
  }
  enc->blocks = g_new0 (T5Block, c->num_layers);
  for (int i = 0; i < c->num_layers; i++) {
    T5Block *b = &enc->blocks[i];
    char name[96];
#define W(field, suffix, nd, d0, d1) \
    g_snprintf (name, sizeof name, "blocks.%d.%s", i, suffix); \
    if (!(b->field = load_weight (enc, name, nd, d0, d1, error))) \
      goto fail;
    W (norm1, "norm1.weight", 1, c->dim, 0);
    W (q, "attn.q.weight", 2, c->dim_attn, c->dim);
    W (k, "attn.k.weight", 2, c->dim_attn, c->dim);
    W (v, "attn.v.weight", 2, c->dim_attn, c->dim);
    W (o, "attn.o.weight", 2, c->dim, c->dim_attn);
    W (norm2, "norm2.weight", 1, c->dim, 0);
    W (gate, "ffn.gate.0.weight", 2, c->dim_ffn, c->dim);
    W (fc1, "ffn.fc1.weight", 2, c->dim_ffn, c->dim);
    W (fc2, "ffn.fc2.weight", 2, c->dim, c->dim_ffn);
#undef W
    g_snprintf (name, sizeof name, "blocks.%d.pos_embedding.embedding.weight",
        i);
    int64_t pshape[2] = { c->num_buckets, c->num_heads };
    const LbTensor *pos = lingbot_checkpoint_get_checked (ckpt, name, 2,
        pshape, LINGBOT_DTYPE_ANY, error);
    if (!pos)
      goto fail;
    LbTensor *p32 = lb_tensor_to_f32 (pos);
    b->pos = g_memdup2 (p32->data, lb_tensor_nbytes (p32));
    lb_tensor_free (p32);
  }
  if (!(enc->norm = load_weight (enc, "norm.weight", 1, c->dim, 0, error)))
    goto fail;
  return enc;

fail:
  lingbot_text_encoder_free (enc);
  return NULL;
}

/**
 * lingbot_text_encoder_load:
 * @path: the umT5 checkpoint: `models_t5_umt5-xxl-enc-bf16.pth` (PyTorch
 *   zip) or a safetensors file with the same names; or a dummy manifest
 *   (`*.dummy.json` with the shapes vocab, dim, dim_attn, dim_ffn,
 *   num_heads, num_layers, num_buckets: the weights
 *   lingbot_text_encoder_write_random() would write, drawn in memory)
 * @stream: the stream to run on
 * @error: as lingbot_checkpoint_open() and lingbot_text_encoder_new()
 *
 * Opens @path and builds the encoder from it.
 *
 * Returns: (transfer full): the encoder, or %NULL on error.
 */
LingbotTextEncoder *
lingbot_text_encoder_load (const char *path, LbStream * stream, GError ** error)
{
  g_autoptr (LingbotCheckpoint) ckpt = NULL;
  if (lingbot_dummy_is_manifest (path)) {
    LingbotDummy d;
    LingbotTextEncoderConfig c;
    int64_t v[7];
    static const char *const keys[7] = { "vocab", "dim", "dim_attn",
      "dim_ffn", "num_heads", "num_layers", "num_buckets"
    };
    static const int64_t max[7] = { LINGBOT_TEXT_ENCODER_MAX_RANDOM_VOCAB,
      8192, 8192, 32768, 128, 64, 1024
    };
    gboolean ok;
    if (!lingbot_dummy_read (path, "text encoder", &d, error))
      return NULL;
    ok = TRUE;
    for (int i = 0; ok && i < 7; i++)
      ok = lingbot_dummy_get_int (&d, keys[i], 1, max[i], &v[i], error);
    if (ok) {
      lingbot_text_encoder_config_init_tiny (&c, v[1], v[0]);
      c.dim_attn = v[2];
      c.dim_ffn = v[3];
      c.num_heads = (int) v[4];
      c.num_layers = (int) v[5];
      c.num_buckets = (int) v[6];
      ckpt = lingbot_text_encoder_random_checkpoint (path, &c, d.dtype,
          d.seed, error);
    }
    lingbot_dummy_clear (&d);
    if (ckpt == NULL) {
      g_prefix_error (error, "text encoder %s: ", path);
      return NULL;
    }
  } else {
    ckpt = lingbot_checkpoint_open (path, error);
    if (ckpt == NULL)
      return NULL;
  }
  return lingbot_text_encoder_new (ckpt, stream, error);
}

/**
 * lingbot_text_encoder_free:
 * @enc: (nullable): an encoder
 */
void
lingbot_text_encoder_free (LingbotTextEncoder * enc)
{
  if (enc == NULL)
    return;
  if (enc->blocks) {
    for (int i = 0; i < enc->cfg.num_layers; i++) {
      T5Block *b = &enc->blocks[i];
      LbTensor *w[] = { b->norm1, b->q, b->k, b->v, b->o, b->norm2, b->gate,
        b->fc1, b->fc2
      };
      for (gsize j = 0; j < G_N_ELEMENTS (w); j++)
        if (w[j])
          lb_tensor_free (w[j]);
      g_free (b->pos);
    }
    g_free (enc->blocks);
  }
  if (enc->norm)
    lb_tensor_free (enc->norm);
  if (enc->ckpt)
    lingbot_checkpoint_unref (enc->ckpt);
  g_free (enc);
}

/**
 * lingbot_text_encoder_get_config:
 * @enc: an encoder
 *
 * Returns: (transfer none): the configuration inferred at load.
 */
const LingbotTextEncoderConfig *
lingbot_text_encoder_get_config (LingbotTextEncoder * enc)
{
  return &enc->cfg;
}

/* ------------------------------------------------------------------------ */

/* Writes host data into a device tensor (a plain copy on the CPU). */
static gboolean
put (LingbotTextEncoder * enc, LbTensor * dst, const LbTensor * host,
    GError ** error)
{
  return lb_tensor_upload (enc->stream, dst, host, error);
}

static gboolean
check_ids (LingbotTextEncoder * enc, const int32_t * ids, int64_t seq_len,
    GError ** error)
{
  if (seq_len < 1) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "text encoder: sequence length %" G_GINT64_FORMAT " < 1", seq_len);
    return FALSE;
  }
  for (int64_t i = 0; i < seq_len; i++) {
    if (ids[i] < 0 || ids[i] >= enc->cfg.vocab) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "text encoder: token id %d at position %" G_GINT64_FORMAT
          " is outside the vocabulary [0, %" G_GINT64_FORMAT ")", ids[i], i,
          enc->cfg.vocab);
      return FALSE;
    }
  }
  return TRUE;
}

/* Embedding rows of @ids, widened to float32, into host x [L, dim]. */
static void
gather_embedding (LingbotTextEncoder * enc, const int32_t * ids, int64_t L,
    float *x)
{
  const LbTensor *e = enc->embedding;
  const int64_t dim = enc->cfg.dim;
  for (int64_t i = 0; i < L; i++) {
    float *row = x + i * dim;
    switch (e->dtype) {
      case LB_DTYPE_F32:
        memcpy (row, (const float *) e->data + ids[i] * dim, dim * 4);
        break;
      case LB_DTYPE_BF16:{
        const uint16_t *s = (const uint16_t *) e->data + ids[i] * dim;
        for (int64_t d = 0; d < dim; d++)
          row[d] = lb_bf16_to_f32 (s[d]);
        break;
      }
      case LB_DTYPE_F16:{
        const uint16_t *s = (const uint16_t *) e->data + ids[i] * dim;
        for (int64_t d = 0; d < dim; d++)
          row[d] = lb_f16_to_f32 (s[d]);
        break;
      }
      default:{
        const double *s = (const double *) e->data + ids[i] * dim;
        for (int64_t d = 0; d < dim; d++)
          row[d] = (float) s[d];
        break;
      }
    }
  }
}

/**
 * lingbot_text_encoder_forward:
 * @enc: an encoder
 * @ids: (array length=seq_len): token ids
 * @mask: (array length=seq_len) (nullable): 1 for real tokens, 0 for
 *   padding (hidden as attention keys); %NULL means all real
 * @seq_len: L, number of positions computed (512 in the pipeline; any
 *   L >= 1)
 * @out: (out caller-allocates): [L, dim] float32 on @enc's stream device:
 *   the final-norm output (`output.encoder_out` of the golden file; padded
 *   rows are computed, not zeroed)
 * @block_out: (array) (nullable): when non-%NULL, an array of num_layers
 *   tensors (or %NULL entries), each [L, dim] float32 on the device,
 *   receiving the residual stream after that block (golden
 *   `trace.blockN_out`)
 * @error: %LB_ERROR_INVALID_ARGUMENT (id out of range), %LB_ERROR_SHAPE,
 *   or an op's error
 *
 * One umT5 encoder pass (spec 5.2, golden README 2 steps 1-3): embedding,
 * per block `x += o(attn(norm1(x)))` with logits `q.k` (no 1/sqrt(d)) plus
 * the block's relative-position bias and padded keys hidden, then
 * `x += fc2(fc1(h) * gelu_tanh(gate(h)))` with h = norm2(x); final norm.
 * Activations are allocated once per call.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_text_encoder_forward (LingbotTextEncoder * enc, const int32_t * ids,
    const uint8_t * mask, int64_t seq_len, LbTensor * out,
    LbTensor ** block_out, GError ** error)
{
  const LingbotTextEncoderConfig *c = &enc->cfg;
  const int64_t L = seq_len, H = c->num_heads, hd = c->dim_attn / H;
  LbStream *s = enc->stream;
  const LbOps *ops = lb_ops (s);
  gboolean ok = FALSE;

  if (!check_ids (enc, ids, L, error))
    return FALSE;
  if (out->dtype != LB_DTYPE_F32 || !lb_tensor_has_shape (out, 2, L, c->dim)
      || !lb_tensor_is_contiguous (out)) {
    g_autofree char *sh = lb_tensor_shape_string (out);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "text encoder: out is %s %s, expected contiguous F32 [%"
        G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]", lb_dtype_name (out->dtype),
        sh, L, c->dim);
    return FALSE;
  }

  /* buffers: once per call */
  int64_t s_x[2] = { L, c->dim }, s_a[2] = { L, c->dim_attn };
  int64_t s_f[2] = { L, c->dim_ffn }, s_b[3] = { H, L, L }, s_m[1] = { L };
  LbTensor *x = NULL, *h = NULL, *q = NULL, *k = NULL, *v = NULL, *a = NULL;
  LbTensor *g = NULL, *f = NULL, *u = NULL, *bias = NULL, *km = NULL;
  LbTensor *hx = NULL, *hb = NULL, *hm = NULL;
  int *bucket = NULL;
  if (!(x = lb_tensor_new_on (s, LB_DTYPE_F32, 2, s_x, error)) ||
      !(h = lb_tensor_new_on (s, LB_DTYPE_F32, 2, s_x, error)) ||
      !(q = lb_tensor_new_on (s, LB_DTYPE_F32, 2, s_a, error)) ||
      !(k = lb_tensor_new_on (s, LB_DTYPE_F32, 2, s_a, error)) ||
      !(v = lb_tensor_new_on (s, LB_DTYPE_F32, 2, s_a, error)) ||
      !(a = lb_tensor_new_on (s, LB_DTYPE_F32, 2, s_a, error)) ||
      !(g = lb_tensor_new_on (s, LB_DTYPE_F32, 2, s_f, error)) ||
      !(f = lb_tensor_new_on (s, LB_DTYPE_F32, 2, s_f, error)) ||
      !(u = lb_tensor_new_on (s, LB_DTYPE_F32, 2, s_f, error)) ||
      !(bias = lb_tensor_new_on (s, LB_DTYPE_F32, 3, s_b, error)) ||
      !(km = lb_tensor_new_on (s, LB_DTYPE_U8, 1, s_m, error)))
    goto done;
  /* host staging (the device tensors themselves on the CPU backend) */
  hx = enc->on_host ? x : lb_tensor_new (LB_DTYPE_F32, 2, s_x);
  hb = enc->on_host ? bias : lb_tensor_new (LB_DTYPE_F32, 3, s_b);
  hm = enc->on_host ? km : lb_tensor_new (LB_DTYPE_U8, 1, s_m);

  gather_embedding (enc, ids, L, hx->data);
  for (int64_t j = 0; j < L; j++)
    ((uint8_t *) hm->data)[j] = mask ? (mask[j] != 0) : 1;
  if (!enc->on_host && (!put (enc, x, hx, error) || !put (enc, km, hm, error)))
    goto done;

  /* bucket of rel = j - i for rel in [-(L-1), L-1] */
  bucket = g_new (int, 2 * L - 1);
  for (int64_t r = -(L - 1); r <= L - 1; r++)
    bucket[r + L - 1] = lingbot_t5_relative_bucket (r, c->num_buckets,
        c->max_distance);

  /* [L, dim_attn] viewed as [L, H, hd] */
  int64_t s_h[3] = { L, H, hd };
  LbTensor q3, k3, v3, a3;
  lb_tensor_view_reshape (&q3, q, 3, s_h);
  lb_tensor_view_reshape (&k3, k, 3, s_h);
  lb_tensor_view_reshape (&v3, v, 3, s_h);
  lb_tensor_view_reshape (&a3, a, 3, s_h);

  for (int li = 0; li < c->num_layers; li++) {
    const T5Block *b = &enc->blocks[li];

    /* position bias [H, L, L]: bias[h, i, j] = pos[bucket(j - i), h] */
    float *bd = hb->data;
    for (int64_t hh = 0; hh < H; hh++) {
      for (int64_t i = 0; i < L; i++) {
        float *row = bd + (hh * L + i) * L;
        const int *bk = bucket + (L - 1 - i);
        for (int64_t j = 0; j < L; j++)
          row[j] = b->pos[bk[j] * H + hh];
      }
    }
    if (!enc->on_host && !put (enc, bias, hb, error))
      goto done;

    if (!ops->rms_norm (s, x, b->norm1, c->eps, h, error) ||
        !ops->gemm (s, h, b->q, TRUE, NULL, 1.0f, 0.0f, q, error) ||
        !ops->gemm (s, h, b->k, TRUE, NULL, 1.0f, 0.0f, k, error) ||
        !ops->gemm (s, h, b->v, TRUE, NULL, 1.0f, 0.0f, v, error) ||
        !ops->attention (s, &q3, &k3, &v3, bias, km, 1.0f, &a3, error) ||
        !ops->gemm (s, a, b->o, TRUE, NULL, 1.0f, 1.0f, x, error))
      goto done;

    if (!ops->rms_norm (s, x, b->norm2, c->eps, h, error) ||
        !ops->gemm (s, h, b->gate, TRUE, NULL, 1.0f, 0.0f, g, error) ||
        !ops->gelu_tanh (s, g, g, error) ||
        !ops->gemm (s, h, b->fc1, TRUE, NULL, 1.0f, 0.0f, f, error) ||
        !ops->mul (s, f, g, u, error) ||
        !ops->gemm (s, u, b->fc2, TRUE, NULL, 1.0f, 1.0f, x, error))
      goto done;

    if (block_out && block_out[li]) {
      if (!lb_tensor_has_shape (block_out[li], 2, L, c->dim) ||
          block_out[li]->dtype != LB_DTYPE_F32) {
        g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
            "text encoder: block_out[%d] must be F32 [%" G_GINT64_FORMAT
            ", %" G_GINT64_FORMAT "]", li, L, c->dim);
        goto done;
      }
      if (!ops->scale (s, x, 1.0f, 0.0f, block_out[li], error))
        goto done;
    }
  }
  ok = ops->rms_norm (s, x, enc->norm, c->eps, out, error);

done:
  g_free (bucket);
  if (!enc->on_host) {
    if (hx)
      lb_tensor_free (hx);
    if (hb)
      lb_tensor_free (hb);
    if (hm)
      lb_tensor_free (hm);
  }
  LbTensor *all[] = { x, h, q, k, v, a, g, f, u, bias, km };
  for (gsize i = 0; i < G_N_ELEMENTS (all); i++)
    if (all[i])
      lb_tensor_free (all[i]);
  return ok;
}

/**
 * lingbot_text_encoder_encode_ids:
 * @enc: an encoder
 * @ids: (array length=seq_len): token ids as the tokenizer gives them
 * @mask: (array length=seq_len): 1 for real tokens, 0 for padding; the
 *   ones must form a prefix (as lingbot_tokenizer_encode() produces)
 * @seq_len: context rows (512 in the pipeline)
 * @error: %LB_ERROR_INVALID_ARGUMENT or an op's error
 *
 * The pipeline's prompt embedding (spec 5.4, golden README 2 step 4): the
 * encoder output with rows at and after n = (number of mask ones) set to
 * exactly zero.  Only the first n positions are run through the encoder:
 * padded positions are hidden as keys and their rows are zeroed, and the
 * relative-position bias depends only on j - i, so the result equals a
 * full-length pass (up to float summation order) at a fraction of the cost.
 *
 * Returns: (transfer full): the context, [seq_len, dim] float32 on @enc's
 *   stream device, or %NULL on error.
 */
LbTensor *
lingbot_text_encoder_encode_ids (LingbotTextEncoder * enc,
    const int32_t * ids, const uint8_t * mask, int64_t seq_len, GError ** error)
{
  int64_t n = 0;
  while (n < seq_len && mask[n])
    n++;
  for (int64_t i = n; i < seq_len; i++) {
    if (mask[i]) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "text encoder: mask has a 1 at position %" G_GINT64_FORMAT
          " after padding starts at %" G_GINT64_FORMAT, i, n);
      return NULL;
    }
  }
  if (n < 1) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "text encoder: empty mask (no real token, not even </s>)");
    return NULL;
  }
  int64_t shape[2] = { seq_len, enc->cfg.dim };
  LbTensor *ctx = lb_tensor_new_on (enc->stream, LB_DTYPE_F32, 2, shape,
      error);
  if (ctx == NULL)
    return NULL;
  LbTensor head, tail;
  lb_tensor_view_narrow (&head, ctx, 0, 0, n);
  if (!lingbot_text_encoder_forward (enc, ids, NULL, n, &head, NULL, error))
    goto fail;
  if (n < seq_len) {
    /* rows at and after n: exactly zero */
    lb_tensor_view_narrow (&tail, ctx, 0, n, seq_len - n);
    if (enc->on_host) {
      memset (tail.data, 0, lb_tensor_nbytes (&tail));
    } else {
      g_autoptr (LbTensor) zeros = lb_tensor_new_zeros (LB_DTYPE_F32, 2,
          tail.shape);
      if (!lb_tensor_upload (enc->stream, &tail, zeros, error))
        goto fail;
    }
  }
  return ctx;

fail:
  lb_tensor_free (ctx);
  return NULL;
}

/**
 * lingbot_text_encoder_encode_prompt:
 * @enc: an encoder
 * @tokenizer: the umT5 tokenizer
 * @prompt: (nullable): the prompt (%NULL is "", the service default)
 * @error: tokenizer or encoder errors
 *
 * Tokenizes @prompt to %LINGBOT_TEXT_LEN tokens (lingbot_tokenizer_encode())
 * and returns lingbot_text_encoder_encode_ids() of them: the session's text
 * context, computed once per session.
 *
 * Returns: (transfer full): [512, dim] float32 on @enc's device, or %NULL.
 */
LbTensor *
lingbot_text_encoder_encode_prompt (LingbotTextEncoder * enc,
    LingbotTokenizer * tokenizer, const char *prompt, GError ** error)
{
  int32_t ids[LINGBOT_TEXT_LEN];
  uint8_t mask[LINGBOT_TEXT_LEN];
  if (lingbot_tokenizer_encode (tokenizer, prompt, LINGBOT_TEXT_LEN, ids, mask,
          error) < 0)
    return NULL;
  return lingbot_text_encoder_encode_ids (enc, ids, mask, LINGBOT_TEXT_LEN,
      error);
}

/* ------------------------------------------------------------------------ */
/* prompt-embeds files                                                      */

/**
 * lingbot_prompt_embeds_save:
 * @path: the safetensors file to write
 * @context: [n, dim] (or [1, n, dim]) float32/bf16/f16 CPU tensor
 * @prompt: (nullable): stored as metadata `lingbot.prompt`
 * @n_tokens: real tokens including </s>, stored as `lingbot.n_tokens`
 *   when > 0
 * @error: %LB_ERROR_SHAPE, %LB_ERROR_IO
 *
 * Writes a prompt-embeds file: one tensor %LINGBOT_PROMPT_EMBEDS_TENSOR
 * ("prompt_embeds") holding @context as [n, dim] in its dtype.
 *
 * Returns: %TRUE on success.
 */
gboolean
lingbot_prompt_embeds_save (const char *path, const LbTensor * context,
    const char *prompt, int n_tokens, GError ** error)
{
  LbTensor view;
  if (context->ndim == 3 && context->shape[0] == 1) {
    lb_tensor_view_select (&view, context, 0, 0);
  } else if (context->ndim == 2) {
    lb_tensor_view (&view, context);
  } else {
    g_autofree char *sh = lb_tensor_shape_string (context);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "prompt embeds: context has shape %s, expected [n, dim]", sh);
    return FALSE;
  }
  if (context->device.type != LB_DEVICE_CPU) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "prompt embeds: context must be a CPU tensor");
    return FALSE;
  }
  g_autoptr (GHashTable) meta = g_hash_table_new_full (g_str_hash,
      g_str_equal, NULL, g_free);
  g_hash_table_insert (meta, (gpointer) "lingbot.format",
      g_strdup ("prompt-embeds"));
  if (prompt)
    g_hash_table_insert (meta, (gpointer) "lingbot.prompt", g_strdup (prompt));
  if (n_tokens > 0)
    g_hash_table_insert (meta, (gpointer) "lingbot.n_tokens",
        g_strdup_printf ("%d", n_tokens));
  const char *names[1] = { LINGBOT_PROMPT_EMBEDS_TENSOR };
  const LbTensor *tensors[1] = { &view };
  return lingbot_safetensors_write (path, names, tensors, 1, meta, error);
}

/**
 * lingbot_prompt_embeds_load:
 * @path: a prompt-embeds safetensors file
 * @seq_len: expected rows, or 0 for any
 * @dim: expected width (4096 for the real model), or 0 for any
 * @error: %LB_ERROR_IO / %LB_ERROR_FORMAT from the reader,
 *   %LB_ERROR_NOT_FOUND when the file has no "prompt_embeds" tensor,
 *   %LB_ERROR_SHAPE naming it when its shape or dtype is wrong
 *
 * Reads a context written by lingbot_prompt_embeds_save() or
 * `lingbot-encode-prompt`.  [1, n, dim] is accepted and squeezed; BF16/F16
 * are widened.
 *
 * Returns: (transfer full): [n, dim] float32 CPU tensor, or %NULL.
 */
LbTensor *
lingbot_prompt_embeds_load (const char *path, int64_t seq_len, int64_t dim,
    GError ** error)
{
  g_autoptr (LingbotCheckpoint) ckpt = lingbot_checkpoint_open (path, error);
  if (ckpt == NULL)
    return NULL;
  if (!lingbot_checkpoint_has_tensor (ckpt, LINGBOT_PROMPT_EMBEDS_TENSOR)) {
    g_set_error (error, LB_ERROR, LB_ERROR_NOT_FOUND,
        "prompt embeds: tensor %s not found in %s",
        LINGBOT_PROMPT_EMBEDS_TENSOR, path);
    return NULL;
  }
  const LbTensor *t = lingbot_checkpoint_get (ckpt,
      LINGBOT_PROMPT_EMBEDS_TENSOR, error);
  if (t == NULL)
    return NULL;
  LbTensor view;
  gboolean shape_ok = TRUE;
  if (t->ndim == 3 && t->shape[0] == 1)
    lb_tensor_view_select (&view, t, 0, 0);
  else if (t->ndim == 2)
    lb_tensor_view (&view, t);
  else
    shape_ok = FALSE;
  if (shape_ok && ((seq_len > 0 && view.shape[0] != seq_len) ||
          (dim > 0 && view.shape[1] != dim)))
    shape_ok = FALSE;
  if (!shape_ok || !lb_dtype_is_float (t->dtype)) {
    g_autofree char *sh = lb_tensor_shape_string (t);
    g_autofree char *want_n = seq_len > 0 ?
        g_strdup_printf ("%" G_GINT64_FORMAT, seq_len) : g_strdup ("n");
    g_autofree char *want_d = dim > 0 ?
        g_strdup_printf ("%" G_GINT64_FORMAT, dim) : g_strdup ("dim");
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "prompt embeds: tensor %s in %s is %s %s, expected float [%s, %s]",
        LINGBOT_PROMPT_EMBEDS_TENSOR, path, lb_dtype_name (t->dtype), sh,
        want_n, want_d);
    return NULL;
  }
  return lb_tensor_to_f32 (&view);
}

/**
 * lingbot_prompt_context_new:
 * @stream: the stream whose device receives the context
 * @prompt_embeds_path: (nullable): a prompt-embeds file; when set, it is
 *   used and the encoder is not loaded
 * @t5_path: (nullable): the umT5 checkpoint (required without
 *   @prompt_embeds_path)
 * @tokenizer_path: (nullable): the SentencePiece model or its directory;
 *   %NULL looks next to @t5_path (its directory, then
 *   `google/umt5-xxl/` under it)
 * @prompt: (nullable): the prompt ("" when %NULL)
 * @dim: expected context width, or 0 for any
 * @error: %LB_ERROR_INVALID_ARGUMENT, and the errors of the loaders
 *
 * The once-per-session text context: either the precomputed file, or the
 * encoder is loaded, run once and freed.
 *
 * Returns: (transfer full): [512, dim] float32 on @stream's device (rows
 *   after the prompt's tokens are zero), or %NULL.
 */
LbTensor *
lingbot_prompt_context_new (LbStream * stream,
    const char *prompt_embeds_path, const char *t5_path,
    const char *tokenizer_path, const char *prompt, int64_t dim,
    GError ** error)
{
  if (prompt_embeds_path) {
    g_autoptr (LbTensor) host = lingbot_prompt_embeds_load (prompt_embeds_path,
        0, dim, error);
    if (host == NULL)
      return NULL;
    if (stream->backend->device_type == LB_DEVICE_CPU)
      return g_steal_pointer (&host);
    LbTensor *dev = lb_tensor_new_on (stream, LB_DTYPE_F32, 2, host->shape,
        error);
    /* synchronised before host is freed (LbBackend.copy: a source may
     * change only after the stream synchronises) */
    if (dev && !(lb_tensor_upload (stream, dev, host, error) &&
            stream->backend->stream_synchronize (stream, error))) {
      lb_tensor_free (dev);
      return NULL;
    }
    return dev;
  }
  if (t5_path == NULL) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "text context: neither a prompt-embeds file nor a T5 checkpoint "
        "was given");
    return NULL;
  }
  g_autofree char *tok_dir = tokenizer_path ? NULL : g_path_get_dirname
      (t5_path);
  g_autoptr (LingbotTokenizer) tok = lingbot_tokenizer_new (tokenizer_path ?
      tokenizer_path : tok_dir, error);
  if (tok == NULL)
    return NULL;
  g_autoptr (LingbotTextEncoder) enc = lingbot_text_encoder_load (t5_path,
      stream, error);
  if (enc == NULL)
    return NULL;
  if (dim > 0 && enc->cfg.dim != dim) {
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "text context: %s has width %" G_GINT64_FORMAT ", the model expects %"
        G_GINT64_FORMAT, t5_path, enc->cfg.dim, dim);
    return NULL;
  }
  return lingbot_text_encoder_encode_prompt (enc, tok, prompt, error);
}

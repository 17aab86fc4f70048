/* lingbot-gst: tensor descriptor
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/tensor.h"
#include "kernels/error.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/**
 * lb_error_quark:
 *
 * The error domain of every lingbot-gst error (#LbError codes), named
 * "lingbot-error-quark".
 *
 * Returns: the quark.
 */
GQuark
lb_error_quark (void)
{
  return g_quark_from_static_string ("lingbot-error-quark");
}

#define LB_ALIGN 64
static const struct
{
  const char *name;
  const char *st_name;
  gsize size;
} dtype_info[LB_DTYPE_COUNT] = {
  [LB_DTYPE_F32] = {"f32", "F32", 4},
  [LB_DTYPE_BF16] = {"bf16", "BF16", 2},
  [LB_DTYPE_F16] = {"f16", "F16", 2},
  [LB_DTYPE_I32] = {"i32", "I32", 4},
  [LB_DTYPE_I64] = {"i64", "I64", 8},
  [LB_DTYPE_U8] = {"u8", "U8", 1},
  [LB_DTYPE_F64] = {"f64", "F64", 8},
  [LB_DTYPE_F8E4M3] = {"f8e4m3", "F8_E4M3", 1},
};

/**
 * lb_dtype_size:
 * @dtype: an element type
 *
 * Returns: bytes per element, 0 for an invalid dtype.
 */
gsize
lb_dtype_size (LbDType dtype)
{
  return (unsigned) dtype < LB_DTYPE_COUNT ? dtype_info[dtype].size : 0;
}

/**
 * lb_dtype_name:
 * @dtype: an element type
 *
 * Returns: a short lower-case name ("f32", "bf16", ...), "invalid" otherwise.
 */
const char *
lb_dtype_name (LbDType dtype)
{
  return (unsigned) dtype < LB_DTYPE_COUNT ? dtype_info[dtype].name : "invalid";
}

/**
 * lb_dtype_from_safetensors:
 * @name: a safetensors dtype string ("F32", "BF16", ...)
 * @out: (out): the dtype
 *
 * Returns: %FALSE when @name is not a dtype this project handles.
 */
gboolean
lb_dtype_from_safetensors (const char *name, LbDType * out)
{
  for (int i = 0; i < LB_DTYPE_COUNT; i++) {
    if (g_strcmp0 (name, dtype_info[i].st_name) == 0) {
      *out = (LbDType) i;
      return TRUE;
    }
  }
  return FALSE;
}

/**
 * lb_dtype_to_safetensors:
 * @dtype: an element type
 *
 * Returns: the safetensors header name of @dtype ("F32", "BF16", ...).
 */
const char *
lb_dtype_to_safetensors (LbDType dtype)
{
  return (unsigned) dtype < LB_DTYPE_COUNT ? dtype_info[dtype].st_name : NULL;
}

gboolean
lb_dtype_is_float (LbDType dtype)
{
  return dtype == LB_DTYPE_F32 || dtype == LB_DTYPE_BF16 ||
      dtype == LB_DTYPE_F16 || dtype == LB_DTYPE_F64 ||
      dtype == LB_DTYPE_F8E4M3;
}

/* The bits of float @f. */
static inline uint32_t
f32_bits (float f)
{
  uint32_t u;
  memcpy (&u, &f, 4);
  return u;
}

/* The float whose bits are @u. */
static inline float
bits_f32 (uint32_t u)
{
  float f;
  memcpy (&f, &u, 4);
  return f;
}

/**
 * lb_bf16_to_f32:
 * @v: bfloat16 bits
 *
 * Returns: the exactly widened float.
 */
float
lb_bf16_to_f32 (uint16_t v)
{
  return bits_f32 ((uint32_t) v << 16);
}

/**
 * lb_f32_to_bf16:
 * @v: a float
 *
 * Rounds to nearest, ties to even, as torch's `.to(torch.bfloat16)` does.
 * NaN stays NaN.
 *
 * Returns: bfloat16 bits.
 */
uint16_t
lb_f32_to_bf16 (float v)
{
  uint32_t u = f32_bits (v);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t) ((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t) (u >> 16);
}

/**
 * lb_f16_to_f32:
 * @v: IEEE binary16 bits
 *
 * Returns: the exactly widened float (subnormals, infinities, NaN kept).
 */
float
lb_f16_to_f32 (uint16_t v)
{
  uint32_t sign = (uint32_t) (v & 0x8000u) << 16;
  uint32_t exp = (v >> 10) & 0x1fu;
  uint32_t man = v & 0x3ffu;
  uint32_t u;

  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {
      /* subnormal: value = man * 2^-24 */
      u = f32_bits ((float) man * 0x1p-24f) | sign;
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  }
  return bits_f32 (u);
}

/**
 * lb_f32_to_f16:
 * @v: a float
 *
 * Rounds to nearest even; overflow gives infinity.
 *
 * Returns: IEEE binary16 bits.
 */
uint16_t
lb_f32_to_f16 (float v)
{
  uint32_t u = f32_bits (v);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;

  if (absu > 0x7f800000u)
    return (uint16_t) (sign | 0x7e00u);
  if (absu >= 0x477ff000u)      /* rounds to >= 65536 */
    return (uint16_t) (sign | 0x7c00u);
  if (absu < 0x38800000u) {     /* below 2^-14: subnormal or zero */
    const float a = bits_f32 (absu);
    /* nearbyint rounds half to even in the default mode */
    return (uint16_t) (sign | (uint32_t) nearbyintf (a * 0x1p24f));
  }
  uint32_t r = absu + 0xfffu + ((absu >> 13) & 1u);
  return (uint16_t) (sign | ((r - 0x38000000u) >> 13));
}

/**
 * lb_e4m3_to_f32:
 * @v: OCP FP8 E4M3 ("fn") bits
 *
 * Widens exactly: exponent field e (bias 7) and mantissa m give
 * `(1 + m/8) * 2^(e-7)` for e > 0 and `m * 2^-9` for e = 0 (subnormals);
 * 0x7f and 0xff are NaN (the format has no infinities), 0x80 is -0.
 *
 * Returns: the float.
 */
float
lb_e4m3_to_f32 (uint8_t v)
{
  const uint32_t e = (v >> 3) & 0xfu, m = v & 7u;
  float f;
  if ((v & 0x7fu) == 0x7fu)
    return (v & 0x80u) ? -NAN : NAN;
  if (e == 0)
    f = (float) m *0x1p-9f;
  else
    f = ldexpf (1.0f + (float) m * 0.125f, (int) e - 7);
  return (v & 0x80u) ? -f : f;
}

/**
 * lb_f32_to_e4m3:
 * @v: a float
 *
 * Rounds to the nearest E4M3 value, ties to even, saturating: every
 * magnitude at or above 448 (infinities included) gives +-448 (0x7e /
 * 0xfe), as CUDA's __nv_cvt_float_to_fp8 (v, __NV_SATFINITE, __NV_E4M3);
 * magnitudes at or below 2^-10 (half the smallest subnormal, the tie going
 * to the even 0) give a signed zero; NaN gives 0x7f (0xff when the sign
 * bit is set).  Exact integer arithmetic on the float's bits, independent
 * of the floating-point rounding mode.
 *
 * Returns: E4M3 bits.
 */
uint8_t
lb_f32_to_e4m3 (float v)
{
  uint32_t u = f32_bits (v);
  const uint8_t sign = (uint8_t) ((u >> 24) & 0x80u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)
    return sign | 0x7fu;
  if (a >= 0x43e00000u)         /* >= 448, inf included: saturate */
    return sign | 0x7eu;
  const uint32_t be = a >> 23;  /* biased f32 exponent */
  if (be < 121) {
    /* below 2^-6: the subnormal grid m * 2^-9, m = 0..8 (8 is the
     * smallest normal, code 0x08); value * 2^9 = mant * 2^(be - 141) */
    if (be == 0)
      return sign;              /* f32 zero or subnormal: < 2^-126 */
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 141 - be;    /* >= 21 */
    if (shift > 25)
      return sign;              /* < 2^-11 */
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u)))
      q++;
    return sign | (uint8_t) q;
  }
  /* normal: round the f32 mantissa to 3 bits (a carry moves into the
   * exponent), then rebias 127 -> 7 */
  a += 0x7ffffu + ((a >> 20) & 1u);
  const uint32_t code = ((((a >> 23) - 120) << 3) | ((a >> 20) & 7u));
  return sign | (uint8_t) MIN (code, 0x7eu);
}

/**
 * lb_quantize_e4m3_row:
 * @x: @k floats
 * @k: elements (>= 0)
 * @q: (out caller-allocates): @k E4M3 codes
 * @scale: (out): the row's scale
 *
 * Per-row (per-token or per-output-channel) E4M3 quantisation, as the fp8
 * GEMM defines it (kernels/ops.h @gemm_fp8): `amax = max |x[i]|` (f32),
 * `scale = amax / 448` (one f32 division), 1 when amax is 0 (an all-zero
 * or empty row), then `q[i] = lb_f32_to_e4m3 (x[i] / scale)` (one f32
 * division each, nearest even; saturating).  So `x[i] ~ e4m3(q[i]) *
 * scale` with the row's largest element mapped to 448.  A NaN element
 * makes its own code NaN (and is ignored by amax); an infinite one makes
 * the scale infinite, so the row's finite elements quantise to zero and
 * the infinite ones to NaN.
 */
void
lb_quantize_e4m3_row (const float *x, int64_t k, uint8_t * q, float *scale)
{
  float amax = 0.0f;
  for (int64_t i = 0; i < k; i++) {
    const float a = fabsf (x[i]);
    amax = a > amax ? a : amax;
  }
  const float sc = amax == 0.0f ? 1.0f : amax / LB_E4M3_MAX;
  for (int64_t i = 0; i < k; i++)
    q[i] = lb_f32_to_e4m3 (x[i] / sc);
  *scale = sc;
}

/* ---- storage ---- */

/**
 * lb_storage_new:
 * @data: the memory
 * @nbytes: its size in bytes
 * @device: where it lives
 * @free_func: (nullable): called with @user_data when the last reference goes
 * @user_data: passed to @free_func
 *
 * Returns: (transfer full): a storage with one reference.
 */
LbStorage *
lb_storage_new (void *data, gsize nbytes, LbDevice device,
    GDestroyNotify free_func, gpointer user_data)
{
  LbStorage *s = g_atomic_rc_box_new0 (LbStorage);
  s->data = data;
  s->nbytes = nbytes;
  s->device = device;
  s->free_func = free_func;
  s->user_data = user_data;
  return s;
}

/**
 * lb_storage_ref:
 * @storage: a storage
 *
 * Returns: (transfer full): @storage, with one more reference.
 */
LbStorage *
lb_storage_ref (LbStorage * storage)
{
  return g_atomic_rc_box_acquire (storage);
}

static void
storage_clear (gpointer p)
{
  LbStorage *storage = p;
  if (storage->free_func)
    storage->free_func (storage->user_data);
}

/**
 * lb_storage_unref:
 * @storage: (nullable) (transfer full): a storage
 *
 * Drops a reference; the last one calls the storage's free function.
 */
void
lb_storage_unref (LbStorage * storage)
{
  if (storage != NULL)
    g_atomic_rc_box_release_full (storage, storage_clear);
}

/* ---- construction ---- */

void
lb_contiguous_strides (int ndim, const int64_t * shape, int64_t * stride)
{
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    stride[i] = s;
    s *= shape[i];
  }
}

/* Bytes to allocate for @bytes of tensor data: at least one, rounded up to
 * a multiple of %LB_ALIGN. */
static gsize
aligned_alloc_size (gsize bytes)
{
  return (MAX (bytes, 1) + LB_ALIGN - 1) / LB_ALIGN * LB_ALIGN;
}

/* A contiguous host tensor over @data (@bytes of it), whose storage calls
 * @free_func on @data when the last reference goes. */
static LbTensor *
host_tensor_wrap (LbDType dtype, int ndim, const int64_t * shape,
    void *data, gsize bytes, GDestroyNotify free_func)
{
  LbStorage *st = lb_storage_new (data, bytes, LB_DEVICE_HOST, free_func,
      data);
  LbTensor *t = lb_tensor_new_from_storage (st, 0, dtype, ndim, shape, NULL);
  lb_storage_unref (st);
  return t;
}

static LbTensor *
tensor_alloc (LbDType dtype, int ndim, const int64_t * shape, gboolean zero)
{
  g_return_val_if_fail (ndim >= 0 && ndim <= LB_MAX_DIMS, NULL);
  g_return_val_if_fail ((unsigned) dtype < LB_DTYPE_COUNT, NULL);

  int64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    g_return_val_if_fail (shape[i] >= 0, NULL);
    n *= shape[i];
  }
  gsize bytes = (gsize) n * lb_dtype_size (dtype);
  gsize alloc = aligned_alloc_size (bytes);
  void *data = g_aligned_alloc (1, alloc, LB_ALIGN);
  if (zero)
    memset (data, 0, alloc);
  return host_tensor_wrap (dtype, ndim, shape, data, bytes, g_aligned_free);
}

/**
 * lb_tensor_new:
 * @dtype: element type
 * @ndim: number of dimensions, 0 to %LB_MAX_DIMS
 * @shape: (array length=ndim): extent of each dimension
 *
 * Allocates a contiguous, 64-byte aligned CPU tensor.  Contents are
 * uninitialised.
 *
 * Returns: (transfer full): a new owning tensor; free with lb_tensor_free().
 */
LbTensor *
lb_tensor_new (LbDType dtype, int ndim, const int64_t * shape)
{
  return tensor_alloc (dtype, ndim, shape, FALSE);
}

/**
 * lb_tensor_try_new:
 * @dtype: element type
 * @ndim: number of dimensions, 0 to %LB_MAX_DIMS
 * @shape: (array length=ndim): extent of each dimension (non-negative)
 * @error: %LB_ERROR_INVALID_ARGUMENT for a negative extent or a size that
 *   overflows, %LB_ERROR_DEVICE when the memory cannot be had
 *
 * lb_tensor_new() for sizes that come from input (caps, files): a failed
 * allocation is an error instead of an abort.
 *
 * Returns: (transfer full) (nullable): a new owning tensor, or %NULL.
 */
LbTensor *
lb_tensor_try_new (LbDType dtype, int ndim,
    const int64_t * shape, GError ** error)
{
  g_return_val_if_fail (ndim >= 0 && ndim <= LB_MAX_DIMS, NULL);
  g_return_val_if_fail ((unsigned) dtype < LB_DTYPE_COUNT, NULL);

  guint64 n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0 || (shape[i] > 0 && n > G_MAXSIZE / 64 /
            (guint64) shape[i])) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "tensor of %d dims: extent %" G_GINT64_FORMAT " of dim %d is "
          "negative or overflows", ndim, shape[i], i);
      return NULL;
    }
    n *= (guint64) shape[i];
  }
  gsize bytes = (gsize) n * lb_dtype_size (dtype);
  gsize alloc = aligned_alloc_size (bytes);
  void *data = NULL;
  if (posix_memalign (&data, LB_ALIGN, alloc) != 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_DEVICE,
        "cannot allocate %" G_GSIZE_FORMAT " bytes of host memory", alloc);
    return NULL;
  }
  return host_tensor_wrap (dtype, ndim, shape, data, bytes, free);
}

/**
 * lb_tensor_try_zeros:
 * @dtype: element type
 * @ndim: number of dimensions, 0 to %LB_MAX_DIMS
 * @shape: (array length=ndim): extent of each dimension (non-negative)
 * @error: the errors of lb_tensor_try_new()
 *
 * lb_tensor_try_new() with every byte set to zero: lb_tensor_new_zeros()
 * for sizes that come from input or from a session's geometry.  Callers
 * prefix the error with what the tensor is for (g_prefix_error()), so the
 * message names it and its bytes.
 *
 * Returns: (transfer full) (nullable): a new owning tensor, or %NULL.
 */
LbTensor *
lb_tensor_try_zeros (LbDType dtype, int ndim, const int64_t * shape,
    GError ** error)
{
  LbTensor *t = lb_tensor_try_new (dtype, ndim, shape, error);
  if (t != NULL)
    memset (t->storage->data, 0, aligned_alloc_size (t->storage->nbytes));
  return t;
}

/**
 * lb_tensor_new_zeros:
 * Like lb_tensor_new() with every byte set to zero.
 */
LbTensor *
lb_tensor_new_zeros (LbDType dtype, int ndim, const int64_t * shape)
{
  return tensor_alloc (dtype, ndim, shape, TRUE);
}

/**
 * lb_tensor_new_f32:
 * @ndim: number of dimensions
 * @...: @ndim extents, each an int64_t-convertible int
 *
 * Convenience for code and tests: a zeroed float32 CPU tensor.
 */
LbTensor *
lb_tensor_new_f32 (int ndim, ...)
{
  int64_t shape[LB_MAX_DIMS];
  va_list ap;
  g_return_val_if_fail (ndim >= 0 && ndim <= LB_MAX_DIMS, NULL);
  va_start (ap, ndim);
  for (int i = 0; i < ndim; i++)
    shape[i] = va_arg (ap, int);
  va_end (ap);
  return tensor_alloc (LB_DTYPE_F32, ndim, shape, TRUE);
}

/**
 * lb_tensor_new_from_storage:
 * @storage: memory the tensor points into; a reference is taken
 * @byte_offset: offset of element [0,...] from @storage->data
 * @dtype: element type
 * @ndim: number of dimensions
 * @shape: (array length=ndim): extents
 * @stride: (array length=ndim) (nullable): element strides, %NULL for
 *   contiguous
 *
 * Used by checkpoint readers to describe tensors inside an mmapped file
 * without copying.  The caller has bounds-checked the extent.
 *
 * Returns: (transfer full): a new tensor holding a storage reference.
 */
LbTensor *
lb_tensor_new_from_storage (LbStorage * storage,
    gsize byte_offset, LbDType dtype, int ndim, const int64_t * shape,
    const int64_t * stride)
{
  g_return_val_if_fail (ndim >= 0 && ndim <= LB_MAX_DIMS, NULL);
  LbTensor *t = g_new0 (LbTensor, 1);
  t->dtype = dtype;
  t->ndim = ndim;
  t->device = storage->device;
  if (ndim > 0)                 /* a scalar may come with shape NULL */
    memcpy (t->shape, shape, sizeof (int64_t) * ndim);
  if (stride && ndim > 0)
    memcpy (t->stride, stride, sizeof (int64_t) * ndim);
  else
    lb_contiguous_strides (ndim, shape, t->stride);
  t->storage = lb_storage_ref (storage);
  t->data = (guint8 *) storage->data + byte_offset;
  return t;
}

/**
 * lb_tensor_copy:
 * @src: a CPU tensor, any strides
 *
 * Returns: (transfer full): a new contiguous tensor of the same dtype and
 * values.
 */
LbTensor *
lb_tensor_copy (const LbTensor * src)
{
  LbTensor *t = lb_tensor_new (src->dtype, src->ndim, src->shape);
  if (lb_tensor_is_contiguous (src)) {
    memcpy (t->data, src->data, lb_tensor_nbytes (src));
  } else {
    /* same dtype: copy_into goes through double, exact for every dtype
     * but i64 beyond 2^53, which no tensor of ours holds */
    lb_tensor_copy_into (t, src, NULL);
  }
  return t;
}

/**
 * lb_tensor_to_f32:
 * @src: a CPU tensor of any dtype and strides
 *
 * Widens (bf16, f16) or narrows (f64) to a new contiguous float32 tensor.
 * This is how checkpoint weights reach the CPU backend.
 *
 * Returns: (transfer full): the float32 copy.
 */
LbTensor *
lb_tensor_to_f32 (const LbTensor * src)
{
  LbTensor *t = lb_tensor_new (LB_DTYPE_F32, src->ndim, src->shape);
  int64_t n = lb_tensor_numel (src);
  float *d = t->data;

  if (lb_tensor_is_contiguous (src)) {
    switch (src->dtype) {
      case LB_DTYPE_F32:
        memcpy (d, src->data, n * 4);
        return t;
      case LB_DTYPE_BF16:{
        const uint16_t *s = src->data;
        for (int64_t i = 0; i < n; i++)
          d[i] = lb_bf16_to_f32 (s[i]);
        return t;
      }
      case LB_DTYPE_F16:{
        const uint16_t *s = src->data;
        for (int64_t i = 0; i < n; i++)
          d[i] = lb_f16_to_f32 (s[i]);
        return t;
      }
      default:
        break;
    }
  }
  lb_tensor_copy_into (t, src, NULL);
  return t;
}

/**
 * lb_tensor_free:
 * @t: (nullable): a tensor from lb_tensor_new*() or a reader
 *
 * Drops the tensor's storage reference and frees the descriptor.
 */
void
lb_tensor_free (LbTensor * t)
{
  if (t == NULL)
    return;
  lb_storage_unref (t->storage);
  g_free (t);
}

/* ---- views ---- */

/**
 * lb_tensor_view_init:
 * @out: (out caller-allocates): the view
 * @stride: (nullable): element strides, %NULL for contiguous
 *
 * Describes existing memory (which the caller keeps alive) as a tensor.
 */
void
lb_tensor_view_init (LbTensor * out, LbDType dtype, void *data,
    LbDevice device, int ndim, const int64_t * shape, const int64_t * stride)
{
  memset (out, 0, sizeof *out);
  out->dtype = dtype;
  out->ndim = ndim;
  out->data = data;
  out->device = device;
  memcpy (out->shape, shape, sizeof (int64_t) * ndim);
  if (stride)
    memcpy (out->stride, stride, sizeof (int64_t) * ndim);
  else
    lb_contiguous_strides (ndim, shape, out->stride);
}

/**
 * lb_tensor_view:
 * @out: (out caller-allocates): a borrowed view of all of @src
 */
void
lb_tensor_view (LbTensor * out, const LbTensor * src)
{
  *out = *src;
  out->storage = NULL;
}

/**
 * lb_tensor_view_narrow:
 * @out: (out caller-allocates): the view; may alias @src
 * @dim: dimension to narrow
 * @start: first index kept
 * @length: number of indices kept
 *
 * Returns: %FALSE (and leaves @out untouched) when the range is outside @src.
 */
gboolean
lb_tensor_view_narrow (LbTensor * out, const LbTensor * src, int dim,
    int64_t start, int64_t length)
{
  if (dim < 0 || dim >= src->ndim || start < 0 || length < 0 ||
      start + length > src->shape[dim])
    return FALSE;
  LbTensor v = *src;
  v.storage = NULL;
  v.data = (guint8 *) src->data + start * src->stride[dim] *
      (int64_t) lb_dtype_size (src->dtype);
  v.shape[dim] = length;
  *out = v;
  return TRUE;
}

/**
 * lb_tensor_view_select:
 * @out: (out caller-allocates): @src with dimension @dim removed, at @index
 *
 * Returns: %FALSE when @index is out of range.
 */
gboolean
lb_tensor_view_select (LbTensor * out, const LbTensor * src, int dim,
    int64_t index)
{
  LbTensor v;
  if (!lb_tensor_view_narrow (&v, src, dim, index, 1))
    return FALSE;
  for (int i = dim; i < v.ndim - 1; i++) {
    v.shape[i] = v.shape[i + 1];
    v.stride[i] = v.stride[i + 1];
  }
  v.ndim--;
  *out = v;
  return TRUE;
}

/**
 * lb_tensor_view_reshape:
 * @src: a contiguous tensor
 * @shape: (array length=ndim): new extents; one may be -1 (inferred)
 *
 * Returns: %FALSE when @src is not contiguous or the element counts differ.
 */
gboolean
lb_tensor_view_reshape (LbTensor * out, const LbTensor * src, int ndim,
    const int64_t * shape)
{
  if (ndim < 0 || ndim > LB_MAX_DIMS || !lb_tensor_is_contiguous (src))
    return FALSE;
  int64_t known = 1, n = lb_tensor_numel (src);
  int infer = -1;
  int64_t s[LB_MAX_DIMS];
  for (int i = 0; i < ndim; i++) {
    s[i] = shape[i];
    if (shape[i] == -1) {
      if (infer >= 0)
        return FALSE;
      infer = i;
    } else if (shape[i] < 0) {
      return FALSE;
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || n % known != 0)
      return FALSE;
    s[infer] = n / known;
    known *= s[infer];
  }
  if (known != n)
    return FALSE;
  LbTensor v = *src;
  v.storage = NULL;
  v.ndim = ndim;
  memcpy (v.shape, s, sizeof (int64_t) * ndim);
  lb_contiguous_strides (ndim, s, v.stride);
  *out = v;
  return TRUE;
}

/**
 * lb_tensor_view_permute:
 * @perm: (array): @src->ndim distinct dimension indices; output dim i is
 *   input dim perm[i]
 *
 * Returns: %FALSE when @perm is not a permutation.
 */
gboolean
lb_tensor_view_permute (LbTensor * out, const LbTensor * src, const int *perm)
{
  gboolean seen[LB_MAX_DIMS] = { 0 };
  LbTensor v = *src;
  v.storage = NULL;
  for (int i = 0; i < src->ndim; i++) {
    int p = perm[i];
    if (p < 0 || p >= src->ndim || seen[p])
      return FALSE;
    seen[p] = TRUE;
    v.shape[i] = src->shape[p];
    v.stride[i] = src->stride[p];
  }
  *out = v;
  return TRUE;
}

/* ---- queries ---- */

int64_t
lb_tensor_numel (const LbTensor * t)
{
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++)
    n *= t->shape[i];
  return n;
}

/**
 * lb_tensor_nbytes:
 * Returns: numel * element size (the size of a contiguous copy).
 */
gsize
lb_tensor_nbytes (const LbTensor * t)
{
  return (gsize) lb_tensor_numel (t) * lb_dtype_size (t->dtype);
}

gboolean
lb_tensor_is_contiguous (const LbTensor * t)
{
  int64_t s = 1;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->shape[i] != 1 && t->stride[i] != s)
      return FALSE;
    s *= t->shape[i];
  }
  return TRUE;
}

gboolean
lb_tensor_same_shape (const LbTensor * a, const LbTensor * b)
{
  if (a->ndim != b->ndim)
    return FALSE;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i])
      return FALSE;
  return TRUE;
}

/**
 * lb_tensor_has_shape:
 * @ndim: expected number of dimensions
 * @...: @ndim expected extents as int64_t; -1 matches any extent
 */
gboolean
lb_tensor_has_shape (const LbTensor * t, int ndim, ...)
{
  va_list ap;
  gboolean ok = (t->ndim == ndim);
  va_start (ap, ndim);
  for (int i = 0; i < ndim; i++) {
    int64_t e = va_arg (ap, int64_t);
    if (ok && e >= 0 && t->shape[i] != e)
      ok = FALSE;
  }
  va_end (ap);
  return ok;
}

/**
 * lb_shape_string:
 * Returns: (transfer full): "[a, b, c]"
 */
char *
lb_shape_string (int ndim, const int64_t * shape)
{
  GString *s = g_string_new ("[");
  for (int i = 0; i < ndim; i++)
    g_string_append_printf (s,
        i ? ", %" G_GINT64_FORMAT : "%" G_GINT64_FORMAT, shape[i]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

char *
lb_tensor_shape_string (const LbTensor * t)
{
  return lb_shape_string (t->ndim, t->shape);
}

static int64_t
flat_to_offset (const LbTensor * t, int64_t flat)
{
  int64_t off = 0;
  for (int i = t->ndim - 1; i >= 0; i--) {
    int64_t idx = flat % t->shape[i];
    flat /= t->shape[i];
    off += idx * t->stride[i];
  }
  return off;
}

static double
read_elem (LbDType dtype, const void *base, int64_t off)
{
  switch (dtype) {
    case LB_DTYPE_F32:
      return ((const float *) base)[off];
    case LB_DTYPE_BF16:
      return lb_bf16_to_f32 (((const uint16_t *) base)[off]);
    case LB_DTYPE_F16:
      return lb_f16_to_f32 (((const uint16_t *) base)[off]);
    case LB_DTYPE_I32:
      return ((const int32_t *) base)[off];
    case LB_DTYPE_I64:
      return (double) ((const int64_t *) base)[off];
    case LB_DTYPE_U8:
      return ((const uint8_t *) base)[off];
    case LB_DTYPE_F64:
      return ((const double *) base)[off];
    case LB_DTYPE_F8E4M3:
      return lb_e4m3_to_f32 (((const uint8_t *) base)[off]);
    default:
      return NAN;
  }
}

static void
write_elem (LbDType dtype, void *base, int64_t off, double v)
{
  switch (dtype) {
    case LB_DTYPE_F32:
      ((float *) base)[off] = (float) v;
      break;
    case LB_DTYPE_BF16:
      ((uint16_t *) base)[off] = lb_f32_to_bf16 ((float) v);
      break;
    case LB_DTYPE_F16:
      ((uint16_t *) base)[off] = lb_f32_to_f16 ((float) v);
      break;
    case LB_DTYPE_I32:
      ((int32_t *) base)[off] = (int32_t) v;
      break;
    case LB_DTYPE_I64:
      ((int64_t *) base)[off] = (int64_t) v;
      break;
    case LB_DTYPE_U8:
      ((uint8_t *) base)[off] = (uint8_t) v;
      break;
    case LB_DTYPE_F64:
      ((double *) base)[off] = v;
      break;
    case LB_DTYPE_F8E4M3:
      ((uint8_t *) base)[off] = lb_f32_to_e4m3 ((float) v);
      break;
    default:
      break;
  }
}

/**
 * lb_tensor_get:
 * @t: a CPU tensor
 * @index: (array): one index per dimension
 *
 * Slow element read for tests and one-off lookups.
 *
 * Returns: the element converted to double.
 */
double
lb_tensor_get (const LbTensor * t, const int64_t * index)
{
  int64_t off = 0;
  for (int i = 0; i < t->ndim; i++)
    off += index[i] * t->stride[i];
  return read_elem (t->dtype, t->data, off);
}

double
lb_tensor_get_flat (const LbTensor * t, int64_t flat_index)
{
  return read_elem (t->dtype, t->data, flat_to_offset (t, flat_index));
}

void
lb_tensor_set_flat (LbTensor * t, int64_t flat_index, double value)
{
  write_elem (t->dtype, t->data, flat_to_offset (t, flat_index), value);
}

/**
 * lb_tensor_copy_into:
 * @dst: a CPU tensor of the same shape as @src (any dtype, any strides)
 * @src: a CPU tensor
 * @error: return location for a #LB_ERROR_SHAPE error
 *
 * Element-wise copy with dtype conversion.  Slow path: for loading and
 * tests, not for per-chunk work.
 */
gboolean
lb_tensor_copy_into (LbTensor * dst, const LbTensor * src, GError ** error)
{
  if (!lb_tensor_same_shape (dst, src)) {
    g_autofree char *a = lb_tensor_shape_string (dst);
    g_autofree char *b = lb_tensor_shape_string (src);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "copy: destination shape %s differs from source shape %s", a, b);
    return FALSE;
  }
  int64_t n = lb_tensor_numel (src);
  for (int64_t i = 0; i < n; i++)
    write_elem (dst->dtype, dst->data, flat_to_offset (dst, i),
        read_elem (src->dtype, src->data, flat_to_offset (src, i)));
  return TRUE;
}

/* lingbot-gst: tensor descriptor
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * An LbTensor describes up to LB_MAX_DIMS dimensions of elements of one
 * dtype that live on one device.  A tensor either owns a reference on a
 * refcounted LbStorage (heap tensors from lb_tensor_new() and friends,
 * including tensors that point into an mmapped checkpoint) or is a borrowed
 * view (a plain struct filled by lb_tensor_view_*(), usable on the stack
 * so per-chunk code never allocates to slice a tensor).
 *
 * Strides are counted in elements, not bytes.  Shapes and strides are
 * int64_t because real activations exceed 2^31 elements.
 */
#pragma once

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

#define LB_MAX_DIMS 5

/**
 * LbDType:
 * Element types.  Compute on the CPU backend is float32; BF16 and F16 are
 * storage types widened on load.  F64 exists for reading reference fixtures.
 * F8E4M3 (1 byte, safetensors "F8_E4M3") is the OCP FP8 E4M3 "fn" format of
 * the fp8 GEMM weights and activations (lb_f32_to_e4m3(), kernels/ops.h
 * @gemm_fp8): sign, 4 exponent bits (bias 7), 3 mantissa bits, no
 * infinities, NaN = 0x7f / 0xff, largest finite 448, subnormals down to
 * 2^-9.
 */
typedef enum
{
  LB_DTYPE_F32 = 0,
  LB_DTYPE_BF16,
  LB_DTYPE_F16,
  LB_DTYPE_I32,
  LB_DTYPE_I64,
  LB_DTYPE_U8,
  LB_DTYPE_F64,
  LB_DTYPE_F8E4M3,
  LB_DTYPE_COUNT
} LbDType;

typedef enum
{
  LB_DEVICE_CPU = 0,
  LB_DEVICE_CUDA = 1,
} LbDeviceType;

typedef struct
{
  LbDeviceType type;
  int index;                    /* device ordinal; 0 for the CPU */
} LbDevice;

#define LB_DEVICE_HOST ((LbDevice) { LB_DEVICE_CPU, 0 })

typedef struct _LbStorage LbStorage;

/**
 * LbStorage:
 * A refcounted block of memory on one device (a g_atomic_rc_box: take and
 * drop references with lb_storage_ref() and lb_storage_unref()).
 * @free_func(@user_data) runs when the last reference goes away (g_free for
 * CPU heap memory, g_mapped_file_unref for an mmapped checkpoint, a
 * backend's device free).
 */
struct _LbStorage
{
  void *data;
  gsize nbytes;
  LbDevice device;
  GDestroyNotify free_func;
  gpointer user_data;
};

typedef struct
{
  LbDType dtype;
  int ndim;
  int64_t shape[LB_MAX_DIMS];
  int64_t stride[LB_MAX_DIMS];  /* in elements */
  void *data;                   /* address of element [0, ..., 0] */
  LbDevice device;
  LbStorage *storage;           /* NULL for a borrowed view */
} LbTensor;

/* ---- dtypes ---- */

gsize lb_dtype_size (LbDType dtype);
const char *lb_dtype_name (LbDType dtype);
gboolean lb_dtype_from_safetensors (const char *name, LbDType * out);
const char *lb_dtype_to_safetensors (LbDType dtype);
gboolean lb_dtype_is_float (LbDType dtype);

float lb_bf16_to_f32 (uint16_t v);
uint16_t lb_f32_to_bf16 (float v);
float lb_f16_to_f32 (uint16_t v);
uint16_t lb_f32_to_f16 (float v);
float lb_e4m3_to_f32 (uint8_t v);
uint8_t lb_f32_to_e4m3 (float v);
void lb_quantize_e4m3_row (const float *x, int64_t k, uint8_t * q,
    float *scale);

/**
 * LB_E4M3_MAX:
 * The largest finite E4M3 value (0x7e = 1.75 * 2^8).
 */
#define LB_E4M3_MAX 448.0f

/* ---- storage ---- */

LbStorage *lb_storage_new (void *data, gsize nbytes, LbDevice device,
    GDestroyNotify free_func, gpointer user_data);
LbStorage *lb_storage_ref (LbStorage * storage);
void lb_storage_unref (LbStorage * storage);

/* ---- construction ---- */

LbTensor *lb_tensor_new (LbDType dtype, int ndim, const int64_t * shape);
LbTensor *lb_tensor_new_zeros (LbDType dtype, int ndim, const int64_t * shape);
LbTensor *lb_tensor_try_new (LbDType dtype, int ndim, const int64_t * shape,
    GError ** error);
LbTensor *lb_tensor_try_zeros (LbDType dtype, int ndim, const int64_t * shape,
    GError ** error);
LbTensor *lb_tensor_new_f32 (int ndim, ...);
LbTensor *lb_tensor_new_from_storage (LbStorage * storage, gsize byte_offset,
    LbDType dtype, int ndim, const int64_t * shape, const int64_t * stride);
LbTensor *lb_tensor_copy (const LbTensor * src);
LbTensor *lb_tensor_to_f32 (const LbTensor * src);
void lb_tensor_free (LbTensor * t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LbTensor, lb_tensor_free)
/* ---- views (borrowed; no allocation) ---- */
void lb_tensor_view_init (LbTensor * out, LbDType dtype, void *data,
    LbDevice device, int ndim, const int64_t * shape, const int64_t * stride);
void lb_tensor_view (LbTensor * out, const LbTensor * src);
gboolean lb_tensor_view_narrow (LbTensor * out, const LbTensor * src,
    int dim, int64_t start, int64_t length);
gboolean lb_tensor_view_reshape (LbTensor * out, const LbTensor * src,
    int ndim, const int64_t * shape);
gboolean lb_tensor_view_permute (LbTensor * out, const LbTensor * src,
    const int *perm);
gboolean lb_tensor_view_select (LbTensor * out, const LbTensor * src,
    int dim, int64_t index);

/* ---- queries ---- */

int64_t lb_tensor_numel (const LbTensor * t);
gsize lb_tensor_nbytes (const LbTensor * t);
gboolean lb_tensor_is_contiguous (const LbTensor * t);
gboolean lb_tensor_same_shape (const LbTensor * a, const LbTensor * b);
gboolean lb_tensor_has_shape (const LbTensor * t, int ndim, ...);
char *lb_tensor_shape_string (const LbTensor * t);
char *lb_shape_string (int ndim, const int64_t * shape);
void lb_contiguous_strides (int ndim, const int64_t * shape, int64_t * stride);

/* Element access for tests and slow paths (CPU tensors only, any dtype). */
double lb_tensor_get (const LbTensor * t, const int64_t * index);
double lb_tensor_get_flat (const LbTensor * t, int64_t flat_index);
void lb_tensor_set_flat (LbTensor * t, int64_t flat_index, double value);

/* Copy any-dtype, any-stride CPU tensor into a contiguous one of equal shape
 * (dtypes converted through double). */
gboolean lb_tensor_copy_into (LbTensor * dst, const LbTensor * src,
    GError ** error);

G_END_DECLS

/* lingbot-gst: tensor descriptor, views and 16-bit float conversions
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/tensor.h"
#include "kernels/error.h"

#include <math.h>
#include <string.h>

static float
bits_f32 (uint32_t u)
{
  float f;
  memcpy (&f, &u, 4);
  return f;
}

static uint32_t
f32_bits (float f)
{
  uint32_t u;
  memcpy (&u, &f, 4);
  return u;
}

static void
test_new (void)
{
  int64_t shape[3] = { 2, 3, 4 };
  g_autoptr (LbTensor) t = lb_tensor_new (LB_DTYPE_F32, 3, shape);
  g_assert_cmpint (t->ndim, ==, 3);
  g_assert_cmpint (t->stride[0], ==, 12);
  g_assert_cmpint (t->stride[1], ==, 4);
  g_assert_cmpint (t->stride[2], ==, 1);
  g_assert_cmpint (lb_tensor_numel (t), ==, 24);
  g_assert_cmpuint (lb_tensor_nbytes (t), ==, 96);
  g_assert_true (lb_tensor_is_contiguous (t));
  g_assert_cmpuint ((guintptr) t->data % 64, ==, 0);
  g_assert_true (lb_tensor_has_shape (t, 3, (int64_t) 2, (int64_t) - 1,
          (int64_t) 4));
  g_assert_false (lb_tensor_has_shape (t, 3, (int64_t) 2, (int64_t) 3,
          (int64_t) 5));
  g_assert_false (lb_tensor_has_shape (t, 2, (int64_t) 2, (int64_t) 3));
  g_autofree char *s = lb_tensor_shape_string (t);
  g_assert_cmpstr (s, ==, "[2, 3, 4]");

  g_autoptr (LbTensor) z = lb_tensor_new_zeros (LB_DTYPE_BF16, 3, shape);
  for (int i = 0; i < 24; i++)
    g_assert_cmpuint (((uint16_t *) z->data)[i], ==, 0);
  g_assert_cmpuint (lb_tensor_nbytes (z), ==, 48);

  g_autoptr (LbTensor) f = lb_tensor_new_f32 (2, 5, 7);
  g_assert_true (lb_tensor_has_shape (f, 2, (int64_t) 5, (int64_t) 7));
  g_assert_cmpfloat (((float *) f->data)[34], ==, 0.0f);

  /* 0-d and empty tensors */
  g_autoptr (LbTensor) scalar = lb_tensor_new (LB_DTYPE_F32, 0, NULL);
  g_assert_cmpint (lb_tensor_numel (scalar), ==, 1);
  int64_t e[2] = { 0, 5 };
  g_autoptr (LbTensor) empty = lb_tensor_new (LB_DTYPE_F32, 2, e);
  g_assert_cmpint (lb_tensor_numel (empty), ==, 0);
  g_assert_true (lb_tensor_is_contiguous (empty));
}

static void
test_dtypes (void)
{
  LbDType d;
  g_assert_true (lb_dtype_from_safetensors ("BF16", &d));
  g_assert_cmpint (d, ==, LB_DTYPE_BF16);
  g_assert_true (lb_dtype_from_safetensors ("F8_E4M3", &d));
  g_assert_cmpint (d, ==, LB_DTYPE_F8E4M3);
  g_assert_false (lb_dtype_from_safetensors ("F8_E5M2", &d));
  g_assert_cmpstr (lb_dtype_name (LB_DTYPE_F8E4M3), ==, "f8e4m3");
  g_assert_cmpuint (lb_dtype_size (LB_DTYPE_F8E4M3), ==, 1);
  g_assert_true (lb_dtype_is_float (LB_DTYPE_F8E4M3));
  g_assert_cmpstr (lb_dtype_to_safetensors (LB_DTYPE_U8), ==, "U8");
  g_assert_cmpstr (lb_dtype_name (LB_DTYPE_F16), ==, "f16");
  g_assert_cmpstr (lb_dtype_name ((LbDType) 99), ==, "invalid");
  g_assert_cmpuint (lb_dtype_size (LB_DTYPE_I64), ==, 8);
  g_assert_cmpuint (lb_dtype_size ((LbDType) 99), ==, 0);
  g_assert_true (lb_dtype_is_float (LB_DTYPE_F64));
  g_assert_false (lb_dtype_is_float (LB_DTYPE_I32));
}

static LbTensor *
iota (int ndim, const int64_t * shape)
{
  LbTensor *t = lb_tensor_new (LB_DTYPE_F32, ndim, shape);
  int64_t n = lb_tensor_numel (t);
  for (int64_t i = 0; i < n; i++)
    ((float *) t->data)[i] = (float) i;
  return t;
}

static void
test_views (void)
{
  int64_t shape[3] = { 2, 3, 4 };
  g_autoptr (LbTensor) t = iota (3, shape);
  LbTensor v;

  /* narrow */
  g_assert_true (lb_tensor_view_narrow (&v, t, 1, 1, 2));
  g_assert_null (v.storage);
  g_assert_true (lb_tensor_has_shape (&v, 3, (int64_t) 2, (int64_t) 2,
          (int64_t) 4));
  g_assert_false (lb_tensor_is_contiguous (&v));
  int64_t idx[3] = { 1, 1, 3 };
  g_assert_cmpfloat (lb_tensor_get (&v, idx), ==, 1 * 12 + 2 * 4 + 3);
  g_assert_cmpfloat (lb_tensor_get_flat (&v, 5), ==, 0 * 12 + 2 * 4 + 1);
  g_assert_false (lb_tensor_view_narrow (&v, t, 1, 2, 2));
  g_assert_false (lb_tensor_view_narrow (&v, t, 3, 0, 1));
  g_assert_false (lb_tensor_view_narrow (&v, t, 0, -1, 1));
  /* narrowing the outer dim keeps contiguity */
  g_assert_true (lb_tensor_view_narrow (&v, t, 0, 1, 1));
  g_assert_true (lb_tensor_is_contiguous (&v));
  g_assert_cmpfloat (((float *) v.data)[0], ==, 12.0f);

  /* select */
  g_assert_true (lb_tensor_view_select (&v, t, 2, 3));
  g_assert_true (lb_tensor_has_shape (&v, 2, (int64_t) 2, (int64_t) 3));
  g_assert_cmpint (v.stride[0], ==, 12);
  g_assert_cmpint (v.stride[1], ==, 4);
  g_assert_cmpfloat (lb_tensor_get_flat (&v, 4), ==, 12 + 4 + 3);
  g_assert_false (lb_tensor_view_select (&v, t, 0, 2));

  /* reshape */
  int64_t rs[2] = { -1, 6 };
  g_assert_true (lb_tensor_view_reshape (&v, t, 2, rs));
  g_assert_true (lb_tensor_has_shape (&v, 2, (int64_t) 4, (int64_t) 6));
  g_assert_true (lb_tensor_is_contiguous (&v));
  int64_t bad[2] = { 5, 5 }, two[2] = { -1, -1 }, neg[2] = { -2, -12 };
  g_assert_false (lb_tensor_view_reshape (&v, t, 2, bad));
  g_assert_false (lb_tensor_view_reshape (&v, t, 2, two));
  g_assert_false (lb_tensor_view_reshape (&v, t, 2, neg));
  LbTensor nar;
  lb_tensor_view_narrow (&nar, t, 2, 0, 2);
  int64_t flat[1] = { 12 };
  g_assert_false (lb_tensor_view_reshape (&v, &nar, 1, flat));

  /* permute */
  int perm[3] = { 2, 0, 1 };
  g_assert_true (lb_tensor_view_permute (&v, t, perm));
  g_assert_true (lb_tensor_has_shape (&v, 3, (int64_t) 4, (int64_t) 2,
          (int64_t) 3));
  g_assert_false (lb_tensor_is_contiguous (&v));
  int64_t pi[3] = { 3, 1, 2 };
  g_assert_cmpfloat (lb_tensor_get (&v, pi), ==, 1 * 12 + 2 * 4 + 3);
  int dup[3] = { 0, 0, 1 }, oob[3] = { 0, 1, 3 };
  g_assert_false (lb_tensor_view_permute (&v, t, dup));
  g_assert_false (lb_tensor_view_permute (&v, t, oob));

  /* copy of a permuted view is contiguous with the permuted values */
  lb_tensor_view_permute (&v, t, perm);
  g_autoptr (LbTensor) c = lb_tensor_copy (&v);
  g_assert_true (lb_tensor_is_contiguous (c));
  for (int64_t i = 0; i < 24; i++)
    g_assert_cmpfloat (((float *) c->data)[i], ==, lb_tensor_get_flat (&v, i));

  /* set_flat writes through a view */
  lb_tensor_view_narrow (&v, t, 2, 1, 2);
  lb_tensor_set_flat (&v, 3, -5.0);
  g_assert_cmpfloat (((float *) t->data)[4 + 2], ==, -5.0f);

  /* a size-1 dim with any stride is still contiguous */
  int64_t s1[2] = { 1, 4 }, st[2] = { 99, 1 };
  LbTensor one;
  lb_tensor_view_init (&one, LB_DTYPE_F32, t->data, LB_DEVICE_HOST, 2, s1, st);
  g_assert_true (lb_tensor_is_contiguous (&one));
}

static void
test_copy_into (void)
{
  int64_t shape[2] = { 3, 4 };
  g_autoptr (LbTensor) src = iota (2, shape);
  g_autoptr (LbTensor) dst = lb_tensor_new (LB_DTYPE_BF16, 2, shape);
  GError *error = NULL;
  g_assert_true (lb_tensor_copy_into (dst, src, &error));
  g_assert_no_error (error);
  for (int i = 0; i < 12; i++)
    g_assert_cmpfloat (lb_bf16_to_f32 (((uint16_t *) dst->data)[i]), ==, i);
  g_autoptr (LbTensor) back = lb_tensor_to_f32 (dst);
  g_assert_cmpmem (back->data, 48, src->data, 48);

  int64_t other[2] = { 4, 3 };
  g_autoptr (LbTensor) wrong = lb_tensor_new (LB_DTYPE_F32, 2, other);
  g_assert_false (lb_tensor_copy_into (wrong, src, &error));
  g_assert_error (error, LB_ERROR, LB_ERROR_SHAPE);
  g_assert_cmpstr (error->message, ==,
      "copy: destination shape [4, 3] differs from source shape [3, 4]");
  g_clear_error (&error);

  /* f16 and strided f64 widen/narrow to f32 */
  g_autoptr (LbTensor) h = lb_tensor_new (LB_DTYPE_F16, 2, shape);
  for (int i = 0; i < 12; i++)
    ((uint16_t *) h->data)[i] = lb_f32_to_f16 (i * 0.5f);
  g_autoptr (LbTensor) hf = lb_tensor_to_f32 (h);
  for (int i = 0; i < 12; i++)
    g_assert_cmpfloat (((float *) hf->data)[i], ==, i * 0.5f);
  g_autoptr (LbTensor) d = lb_tensor_new (LB_DTYPE_F64, 2, shape);
  for (int i = 0; i < 12; i++)
    ((double *) d->data)[i] = i + 0.25;
  LbTensor col;
  lb_tensor_view_narrow (&col, d, 1, 1, 2);
  g_autoptr (LbTensor) df = lb_tensor_to_f32 (&col);
  g_assert_true (lb_tensor_has_shape (df, 2, (int64_t) 3, (int64_t) 2));
  g_assert_cmpfloat (((float *) df->data)[3], ==, 4 + 2 + 0.25f);
}

static int freed;

static void
count_free (gpointer p)
{
  freed++;
  g_free (p);
}

static void
test_storage (void)
{
  float *mem = g_new0 (float, 16);
  for (int i = 0; i < 16; i++)
    mem[i] = i;
  LbStorage *st = lb_storage_new (mem, 64, LB_DEVICE_HOST, count_free, mem);
  int64_t shape[2] = { 2, 3 }, stride[2] = { 5, 2 };
  LbTensor *t = lb_tensor_new_from_storage (st, 4, LB_DTYPE_F32, 2, shape,
      stride);
  lb_storage_unref (st);
  g_assert_cmpint (freed, ==, 0);
  g_assert_cmpfloat (lb_tensor_get_flat (t, 4), ==, 1 + 5 + 2);
  g_assert_false (lb_tensor_is_contiguous (t));
  LbTensor *u = lb_tensor_new_from_storage (t->storage, 0, LB_DTYPE_F32, 2,
      shape, NULL);
  g_assert_true (lb_tensor_is_contiguous (u));
  lb_tensor_free (t);
  g_assert_cmpint (freed, ==, 0);
  lb_tensor_free (u);
  g_assert_cmpint (freed, ==, 1);
  lb_tensor_free (NULL);
}

static void
test_bf16 (void)
{
  /* every non-NaN bf16 survives the round trip; NaN stays NaN */
  for (uint32_t b = 0; b < 65536; b++) {
    float f = lb_bf16_to_f32 ((uint16_t) b);
    g_assert_cmpuint (f32_bits (f), ==, b << 16);
    uint16_t r = lb_f32_to_bf16 (f);
    if (isnan (f))
      g_assert_true (isnan (lb_bf16_to_f32 (r)));
    else
      g_assert_cmpuint (r, ==, b);
  }
  /* ties to even */
  g_assert_cmphex (lb_f32_to_bf16 (bits_f32 (0x3f808000)), ==, 0x3f80);
  g_assert_cmphex (lb_f32_to_bf16 (bits_f32 (0x3f818000)), ==, 0x3f82);
  g_assert_cmphex (lb_f32_to_bf16 (bits_f32 (0x3f808001)), ==, 0x3f81);
  g_assert_cmphex (lb_f32_to_bf16 (bits_f32 (0x3f807fff)), ==, 0x3f80);
  g_assert_cmphex (lb_f32_to_bf16 (bits_f32 (0xbf818000)), ==, 0xbf82);
  /* infinities, overflow, NaN with only a low payload bit */
  g_assert_cmphex (lb_f32_to_bf16 (INFINITY), ==, 0x7f80);
  g_assert_cmphex (lb_f32_to_bf16 (-INFINITY), ==, 0xff80);
  g_assert_cmphex (lb_f32_to_bf16 (bits_f32 (0x7f7fffff)), ==, 0x7f80);
  g_assert_true (isnan (lb_bf16_to_f32 (lb_f32_to_bf16 (bits_f32
                  (0x7f800001)))));
  g_assert_true (isnan (lb_bf16_to_f32 (lb_f32_to_bf16 (bits_f32
                  (0xffc00000)))));
  /* subnormals and signed zero */
  g_assert_cmphex (lb_f32_to_bf16 (bits_f32 (0x00010000)), ==, 0x0001);
  g_assert_cmphex (lb_f32_to_bf16 (bits_f32 (0x00008000)), ==, 0x0000);
  g_assert_cmphex (lb_f32_to_bf16 (bits_f32 (0x00018000)), ==, 0x0002);
  g_assert_cmphex (lb_f32_to_bf16 (-0.0f), ==, 0x8000);
  g_assert_cmpfloat (lb_bf16_to_f32 (0x3f80), ==, 1.0f);
}

static void
test_f16 (void)
{
  for (uint32_t h = 0; h < 65536; h++) {
    float f = lb_f16_to_f32 ((uint16_t) h);
    uint16_t r = lb_f32_to_f16 (f);
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
      g_assert_true (isnan (f));
      g_assert_true (isnan (lb_f16_to_f32 (r)));
    } else {
      g_assert_cmphex (r, ==, h);
    }
  }
  /* known values */
  g_assert_cmpfloat (lb_f16_to_f32 (0x3c00), ==, 1.0f);
  g_assert_cmpfloat (lb_f16_to_f32 (0x7bff), ==, 65504.0f);
  g_assert_cmpfloat (lb_f16_to_f32 (0x0001), ==, 0x1p-24f);
  g_assert_cmpfloat (lb_f16_to_f32 (0x03ff), ==, 1023 * 0x1p-24f);
  g_assert_cmpfloat (lb_f16_to_f32 (0xfc00), ==, -INFINITY);
  /* ties to even, normal range */
  g_assert_cmphex (lb_f32_to_f16 (1.0f + 0x1p-11f), ==, 0x3c00);
  g_assert_cmphex (lb_f32_to_f16 (1.0f + 3 * 0x1p-11f), ==, 0x3c02);
  g_assert_cmphex (lb_f32_to_f16 (1.0f + 0x1p-11f + 0x1p-20f), ==, 0x3c01);
  /* subnormal range: ties to even, and the carry into the smallest normal */
  g_assert_cmphex (lb_f32_to_f16 (0x1p-25f), ==, 0x0000);
  g_assert_cmphex (lb_f32_to_f16 (3 * 0x1p-25f), ==, 0x0002);
  g_assert_cmphex (lb_f32_to_f16 (0x1p-25f + 0x1p-30f), ==, 0x0001);
  g_assert_cmphex (lb_f32_to_f16 (0x1p-14f - 0x1p-25f), ==, 0x0400);
  g_assert_cmphex (lb_f32_to_f16 (1e-10f), ==, 0x0000);
  g_assert_cmphex (lb_f32_to_f16 (-1e-10f), ==, 0x8000);
  /* overflow */
  g_assert_cmphex (lb_f32_to_f16 (65519.0f), ==, 0x7bff);
  g_assert_cmphex (lb_f32_to_f16 (65520.0f), ==, 0x7c00);
  g_assert_cmphex (lb_f32_to_f16 (1e9f), ==, 0x7c00);
  g_assert_cmphex (lb_f32_to_f16 (-INFINITY), ==, 0xfc00);
  /* NaN stays NaN, sign kept */
  uint16_t n = lb_f32_to_f16 (bits_f32 (0xff800001));
  g_assert_true ((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);
  g_assert_cmphex (n & 0x8000, ==, 0x8000);
}

static void
test_e4m3 (void)
{
  /* every code: the exact value, and the round trip (NaN stays NaN) */
  for (uint32_t c = 0; c < 256; c++) {
    const float f = lb_e4m3_to_f32 ((uint8_t) c);
    const uint32_t e = (c >> 3) & 15, m = c & 7;
    if ((c & 0x7f) == 0x7f) {
      g_assert_true (isnan (f));
      g_assert_cmphex (lb_f32_to_e4m3 (f), ==, c);
      continue;
    }
    double want = e == 0 ? m * 0x1p-9 : (1.0 + m / 8.0) * ldexp (1.0, e - 7);
    if (c & 0x80)
      want = -want;
    g_assert_cmpfloat (f, ==, (float) want);
    g_assert_cmphex (lb_f32_to_e4m3 (f), ==, c);
  }
  g_assert_cmpfloat (lb_e4m3_to_f32 (0x7e), ==, 448.0f);
  g_assert_cmpfloat (lb_e4m3_to_f32 (0x01), ==, 0x1p-9f);
  g_assert_cmpfloat (lb_e4m3_to_f32 (0x08), ==, 0x1p-6f);
  g_assert_cmpfloat (lb_e4m3_to_f32 (0x38), ==, 1.0f);
  g_assert_cmphex (f32_bits (lb_e4m3_to_f32 (0x80)), ==, 0x80000000u);
  /* ties to even in the normal range: 1 + 1/16 lies between 1 (0x38)
   * and 1.125 (0x39) */
  g_assert_cmphex (lb_f32_to_e4m3 (1.0625f), ==, 0x38);
  g_assert_cmphex (lb_f32_to_e4m3 (1.1875f), ==, 0x3a);
  g_assert_cmphex (lb_f32_to_e4m3 (1.0625f + 0x1p-20f), ==, 0x39);
  g_assert_cmphex (lb_f32_to_e4m3 (1.0625f - 0x1p-20f), ==, 0x38);
  g_assert_cmphex (lb_f32_to_e4m3 (-1.1875f), ==, 0xba);
  /* the carry into the next exponent: 1.9375 -> 2 (0x40) */
  g_assert_cmphex (lb_f32_to_e4m3 (1.9375f), ==, 0x40);
  g_assert_cmphex (lb_f32_to_e4m3 (1.9375f - 0x1p-20f), ==, 0x3f);
  /* saturation: 448 and everything above, infinities included */
  g_assert_cmphex (lb_f32_to_e4m3 (448.0f), ==, 0x7e);
  g_assert_cmphex (lb_f32_to_e4m3 (447.0f), ==, 0x7e);
  g_assert_cmphex (lb_f32_to_e4m3 (432.0f), ==, 0x7e);  /* tie 416|448 */
  g_assert_cmphex (lb_f32_to_e4m3 (431.9f), ==, 0x7d);
  g_assert_cmphex (lb_f32_to_e4m3 (464.0f), ==, 0x7e);
  g_assert_cmphex (lb_f32_to_e4m3 (1e30f), ==, 0x7e);
  g_assert_cmphex (lb_f32_to_e4m3 (INFINITY), ==, 0x7e);
  g_assert_cmphex (lb_f32_to_e4m3 (-INFINITY), ==, 0xfe);
  g_assert_cmphex (lb_f32_to_e4m3 (-500.0f), ==, 0xfe);
  /* NaN, either sign, any payload */
  g_assert_cmphex (lb_f32_to_e4m3 (bits_f32 (0x7f800001)), ==, 0x7f);
  g_assert_cmphex (lb_f32_to_e4m3 (bits_f32 (0xffc00000)), ==, 0xff);
  /* subnormals: the grid m * 2^-9, ties to even */
  g_assert_cmphex (lb_f32_to_e4m3 (0x1p-10f), ==, 0x00);        /* tie 0|1 */
  g_assert_cmphex (lb_f32_to_e4m3 (0x1p-10f + 0x1p-30f), ==, 0x01);
  g_assert_cmphex (lb_f32_to_e4m3 (3 * 0x1p-10f), ==, 0x02);    /* 1|2 */
  g_assert_cmphex (lb_f32_to_e4m3 (5 * 0x1p-10f), ==, 0x02);    /* 2|3 */
  g_assert_cmphex (lb_f32_to_e4m3 (7 * 0x1p-10f), ==, 0x04);    /* 3|4 */
  g_assert_cmphex (lb_f32_to_e4m3 (-3 * 0x1p-10f), ==, 0x82);
  /* the carry from the subnormals into the smallest normal 2^-6 */
  g_assert_cmphex (lb_f32_to_e4m3 (15 * 0x1p-10f), ==, 0x08);
  g_assert_cmphex (lb_f32_to_e4m3 (0x1p-6f - 0x1p-30f), ==, 0x08);
  g_assert_cmphex (lb_f32_to_e4m3 (15 * 0x1p-10f - 0x1p-30f), ==, 0x07);
  /* the smallest normal's upper tie: 2^-6 (1 + 1/16) -> 0x08 */
  g_assert_cmphex (lb_f32_to_e4m3 (0x1p-6f * 1.0625f), ==, 0x08);
  /* underflow to signed zero, f32 subnormals included */
  g_assert_cmphex (lb_f32_to_e4m3 (1e-20f), ==, 0x00);
  g_assert_cmphex (lb_f32_to_e4m3 (-1e-20f), ==, 0x80);
  g_assert_cmphex (lb_f32_to_e4m3 (bits_f32 (0x00000001)), ==, 0x00);
  g_assert_cmphex (lb_f32_to_e4m3 (-0.0f), ==, 0x80);

  /* per-row quantisation: the largest magnitude maps to 448 */
  const float x[4] = { 1.0f, -2.0f, 0.5f, 0.0f };
  uint8_t q[4];
  float sc = 0.0f;
  lb_quantize_e4m3_row (x, 4, q, &sc);
  g_assert_cmpfloat (sc, ==, 2.0f / 448.0f);
  g_assert_cmphex (q[1], ==, 0xfe);
  g_assert_cmphex (q[3], ==, 0x00);
  g_assert_cmphex (q[0], ==, lb_f32_to_e4m3 (1.0f / (2.0f / 448.0f)));
  g_assert_cmpfloat (lb_e4m3_to_f32 (q[0]), ==, 224.0f);
  g_assert_cmpfloat (lb_e4m3_to_f32 (q[2]), ==, 112.0f);
  /* an all-zero row and an empty one: scale 1 */
  const float z[2] = { 0.0f, -0.0f };
  lb_quantize_e4m3_row (z, 2, q, &sc);
  g_assert_cmpfloat (sc, ==, 1.0f);
  g_assert_cmphex (q[0], ==, 0x00);
  g_assert_cmphex (q[1], ==, 0x80);
  sc = 0.0f;
  lb_quantize_e4m3_row (z, 0, q, &sc);
  g_assert_cmpfloat (sc, ==, 1.0f);

  /* tensors of the dtype: element access converts */
  g_autoptr (LbTensor) t = lb_tensor_new (LB_DTYPE_F8E4M3, 1,
      (const int64_t[1]) { 3 });
  lb_tensor_set_flat (t, 0, 3.3);
  lb_tensor_set_flat (t, 1, -1000.0);
  lb_tensor_set_flat (t, 2, 0.0);
  g_assert_cmpfloat (lb_tensor_get_flat (t, 0), ==, 3.25);
  g_assert_cmpfloat (lb_tensor_get_flat (t, 1), ==, -448.0);
  g_assert_cmpuint (lb_tensor_nbytes (t), ==, 3);
  g_autoptr (LbTensor) f = lb_tensor_to_f32 (t);
  g_assert_cmpfloat (((float *) f->data)[0], ==, 3.25f);
}

/* The error domain's name, as g_quark_to_string() and GError printing
 * give it (the formatter once spaced its hyphens inside G_DEFINE_QUARK). */
static void
test_error_domain (void)
{
  g_assert_cmpstr (g_quark_to_string (LB_ERROR), ==, "lingbot-error-quark");
  g_assert_cmpuint (LB_ERROR, ==, g_quark_try_string ("lingbot-error-quark"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/tensor/error-domain", test_error_domain);
  g_test_add_func ("/tensor/new", test_new);
  g_test_add_func ("/tensor/dtypes", test_dtypes);
  g_test_add_func ("/tensor/views", test_views);
  g_test_add_func ("/tensor/copy-into", test_copy_into);
  g_test_add_func ("/tensor/storage", test_storage);
  g_test_add_func ("/tensor/bf16", test_bf16);
  g_test_add_func ("/tensor/f16", test_f16);
  g_test_add_func ("/tensor/e4m3", test_e4m3);
  return g_test_run ();
}

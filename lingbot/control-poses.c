/* lingbot-gst: camera control: relative poses, intrinsics and the offline
 * pose interpolation
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot_model_spec.md sections 2.4, 2.5, 2.9 and 2.10; golden README
 * section 3.1.  lingbot_poses_load() is the one loader of poses.npy and
 * intrinsics.npy (the library's offline path and lingbotcontrolsrc).
 */
#include "lingbot/control.h"
#include "lingbot/control-private.h"
#include "lingbot/checkpoint.h"
#include "kernels/error.h"

#include <math.h>
#include <string.h>

/* The relative poses are evaluated in float32 in the reference (PyTorch,
 * products rounded before each sum).  Absolute poses far from the origin
 * lose bits there, and reproducing those roundings is what keeps long
 * sessions within 1e-5 of the reference, so no fused multiply-adds. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

/* ------------------------------------------------------------------ */
/* relative poses (float32, PyTorch operation order)                  */
/* ------------------------------------------------------------------ */

static void
se3_inv_f (const float *p, float *o)
{
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      o[i * 4 + j] = p[j * 4 + i];
  for (int i = 0; i < 3; i++) {
    float acc = 0.0f;
    for (int k = 0; k < 3; k++)
      acc += o[i * 4 + k] * p[k * 4 + 3];
    o[i * 4 + 3] = -acc;
  }
  o[12] = o[13] = o[14] = 0.0f;
  o[15] = 1.0f;
}

static void
mm4_f (const float *a, const float *b, float *o)
{
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) {
      float acc = 0.0f;
      for (int k = 0; k < 4; k++)
        acc += a[i * 4 + k] * b[k * 4 + j];
      o[i * 4 + j] = acc;
    }
}

static void
eye4_f (float *o)
{
  memset (o, 0, 16 * sizeof (float));
  o[0] = o[5] = o[10] = o[15] = 1.0f;
}

/* lingbot_control_relative_poses() with the caller's scratch @rel of n
 * matrices (control-private.h) */
void
lingbot_control_relative_poses_scratch (const float *poses, guint n,
    float *out, float *rel)
{
  float inv0[16], inv[16];
  float max_norm = 0.0f;

  if (n == 0)
    return;
  se3_inv_f (poses, inv0);
  for (guint i = 0; i < n; i++)
    mm4_f (inv0, poses + 16 * i, rel + 16 * i);
  eye4_f (rel);

  eye4_f (out);
  for (guint i = 1; i < n; i++) {
    se3_inv_f (rel + 16 * (i - 1), inv);
    mm4_f (inv, rel + 16 * i, out + 16 * i);
  }

  for (guint i = 0; i < n; i++) {
    const float *t = out + 16 * i;
    float acc = 0.0f, nrm;
    acc += t[3] * t[3];
    acc += t[7] * t[7];
    acc += t[11] * t[11];
    nrm = sqrtf (acc);
    if (nrm > max_norm)
      max_norm = nrm;
  }
  if (max_norm > 0.0f) {
    for (guint i = 0; i < n; i++) {
      float *t = out + 16 * i;
      t[3] = t[3] / max_norm;
      t[7] = t[7] / max_norm;
      t[11] = t[11] / max_norm;
    }
  }
}

/**
 * lingbot_control_relative_poses:
 * @poses: (array): n float32 4x4 camera-to-world matrices, row-major
 * @n: number of poses (>= 1)
 * @out: (out caller-allocates): n relative poses (must not alias @poses)
 *
 * Framewise normalised relative poses (spec 2.4, golden README 3.1), in
 * float32 with the reference's operation order: A_i = inv(P_0) P_i,
 * A_0 = I; D_0 = I, D_i = inv(A_{i-1}) A_i; every translation divided by
 * the largest translation norm when that is > 0.  SE(3) inverse is
 * [R^T | -R^T t].  No translation scale is applied here.
 */
void
lingbot_control_relative_poses (const float *poses, guint n, float *out)
{
  float *rel = g_new (float, 16 * (gsize) MAX (n, 1));
  lingbot_control_relative_poses_scratch (poses, n, out, rel);
  g_free (rel);
}

/**
 * lingbot_control_intrinsics_transform:
 * @k: fx, fy, cx, cy at the calibration size
 * @calib_width: calibration width W0
 * @calib_height: calibration height H0
 * @width: output width W
 * @height: output height H
 * @out: (out caller-allocates): transformed fx, fy, cx, cy
 *
 * Spec 2.5: fx*W/W0, fy*H/H0, cx*W/W0, cy*H/H0 (crop offset 0), each a
 * float32 product with the float32-rounded scale, as PyTorch multiplies a
 * float32 tensor by a Python float.
 */
void
lingbot_control_intrinsics_transform (const float k[4], int calib_width,
    int calib_height, int width, int height, float out[4])
{
  float sx = (float) ((double) width / (double) calib_width);
  float sy = (float) ((double) height / (double) calib_height);

  out[0] = k[0] * sx;
  out[1] = k[1] * sy;
  out[2] = k[2] * sx;
  out[3] = k[3] * sy;
}

/* ------------------------------------------------------------------ */
/* pose interpolation (offline path; float64, scipy semantics)        */
/* ------------------------------------------------------------------ */

/* scipy Rotation.from_matrix: quaternion (x, y, z, w), normalised */
static void
mat_to_quat (const double m[9], double q[4])
{
  double dec[4] = { m[0], m[4], m[8], m[0] + m[4] + m[8] };
  int choice = 0;
  double nrm;

  for (int i = 1; i < 4; i++)
    if (dec[i] > dec[choice])
      choice = i;
  if (choice != 3) {
    int i = choice, j = (i + 1) % 3, k = (j + 1) % 3;
    q[i] = 1.0 - dec[3] + 2.0 * m[i * 3 + i];
    q[j] = m[j * 3 + i] + m[i * 3 + j];
    q[k] = m[k * 3 + i] + m[i * 3 + k];
    q[3] = m[k * 3 + j] - m[j * 3 + k];
  } else {
    q[0] = m[7] - m[5];
    q[1] = m[2] - m[6];
    q[2] = m[3] - m[1];
    q[3] = 1.0 + dec[3];
  }
  nrm = sqrt (q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  for (int i = 0; i < 4; i++)
    q[i] /= nrm;
}

/* scipy Rotation.as_matrix */
static void
quat_to_mat (const double q[4], double m[9])
{
  double x = q[0], y = q[1], z = q[2], w = q[3];
  double x2 = x * x, y2 = y * y, z2 = z * z, w2 = w * w;
  double xy = x * y, zw = z * w, xz = x * z, yw = y * w, yz = y * z, xw = x * w;

  m[0] = x2 - y2 - z2 + w2;
  m[3] = 2.0 * (xy + zw);
  m[6] = 2.0 * (xz - yw);
  m[1] = 2.0 * (xy - zw);
  m[4] = -x2 + y2 - z2 + w2;
  m[7] = 2.0 * (yz + xw);
  m[2] = 2.0 * (xz + yw);
  m[5] = 2.0 * (yz - xw);
  m[8] = -x2 - y2 + z2 + w2;
}

/* Hamilton product of (x, y, z, w) quaternions: a * b */
static void
quat_mul (const double a[4], const double b[4], double o[4])
{
  double ax = a[0], ay = a[1], az = a[2], aw = a[3];
  double bx = b[0], by = b[1], bz = b[2], bw = b[3];

  o[0] = aw * bx + ax * bw + ay * bz - az * by;
  o[1] = aw * by - ax * bz + ay * bw + az * bx;
  o[2] = aw * bz + ax * by - ay * bx + az * bw;
  o[3] = aw * bw - ax * bx - ay * by - az * bz;
}

/* q_a * exp(alpha * log(q_a^-1 q_b)) — scipy Slerp between two keys */
static void
quat_slerp (const double qa[4], const double qb[4], double alpha, double out[4])
{
  double inv[4] = { -qa[0], -qa[1], -qa[2], qa[3] };
  double d[4], e[4], vn, angle;

  quat_mul (inv, qb, d);
  if (d[3] < 0.0)
    for (int i = 0; i < 4; i++)
      d[i] = -d[i];
  vn = sqrt (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
  angle = 2.0 * atan2 (vn, d[3]);
  if (vn > 0.0) {
    double half = 0.5 * alpha * angle, s = sin (half) / vn;
    e[0] = d[0] * s;
    e[1] = d[1] * s;
    e[2] = d[2] * s;
    e[3] = cos (half);
  } else {
    e[0] = e[1] = e[2] = 0.0;
    e[3] = 1.0;
  }
  quat_mul (qa, e, out);
}

/**
 * lingbot_control_interpolate_poses:
 * @poses: (array): n_src float32 4x4 camera-to-world matrices
 * @n_src: number of source poses (>= 2), at positions 0 .. n_src-1
 * @n_out: number of output poses, at positions linspace(0, n_src-1, n_out)
 * @out: (out caller-allocates): n_out float32 4x4 matrices
 *
 * Spec 2.9 step 3: translation by linear interpolation, rotation by
 * quaternion SLERP after making the quaternion signs continuous (scipy
 * Rotation / Slerp / interp1d semantics), computed in float64 and rounded
 * to float32.  For 77 -> 20 the positions are 0, 4, ..., 76.
 */
void
lingbot_control_interpolate_poses (const float *poses, guint n_src,
    guint n_out, float *out)
{
  double *q = g_new (double, 4 * (gsize) n_src);
  double step = n_out > 1 ? (double) (n_src - 1) / (double) (n_out - 1) : 0.0;

  for (guint i = 0; i < n_src; i++) {
    double m[9];
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 3; c++)
        m[r * 3 + c] = poses[16 * i + r * 4 + c];
    mat_to_quat (m, q + 4 * i);
    if (i > 0) {
      double dot = 0.0;
      for (int k = 0; k < 4; k++)
        dot += q[4 * i + k] * q[4 * (i - 1) + k];
      if (dot < 0.0)
        for (int k = 0; k < 4; k++)
          q[4 * i + k] = -q[4 * i + k];
    }
  }

  for (guint j = 0; j < n_out; j++) {
    /* numpy linspace: i*step + 0, the last one forced to the stop value */
    double p = (j + 1 == n_out && n_out > 1) ? (double) (n_src - 1) :
        (double) j * step;
    guint lo, hi, ind;
    double alpha, qo[4], m[9];
    float *o = out + 16 * j;

    /* interp1d: hi = searchsorted(x, p, 'left') clipped to [1, n-1] */
    hi = (guint) ceil (p);
    if (hi < 1)
      hi = 1;
    if (hi > n_src - 1)
      hi = n_src - 1;
    lo = hi - 1;
    for (int c = 0; c < 3; c++) {
      double ylo = poses[16 * lo + c * 4 + 3], yhi = poses[16 * hi + c * 4 + 3];
      double slope = (yhi - ylo) / (double) (hi - lo);
      o[c * 4 + 3] = (float) (slope * (p - (double) lo) + ylo);
    }

    /* Slerp: ind = searchsorted(times, p) - 1, 0 at the first time */
    ind = p <= 0.0 ? 0 : (guint) ceil (p) - 1;
    if (ind > n_src - 2)
      ind = n_src - 2;
    alpha = (p - (double) ind) / 1.0;
    quat_slerp (q + 4 * ind, q + 4 * (ind + 1), alpha, qo);
    quat_to_mat (qo, m);
    for (int r = 0; r < 3; r++)
      for (int c = 0; c < 3; c++)
        o[r * 4 + c] = (float) m[r * 3 + c];
    o[12] = o[13] = o[14] = 0.0f;
    o[15] = 1.0f;
  }
  g_free (q);
}

/* ------------------------------------------------------------------ */
/* loading poses.npy / intrinsics.npy                                 */
/* ------------------------------------------------------------------ */

#define MAX_POSE_ROWS (1u << 24)        /* keeps every byte count in range */

/* The one array of @path as float32, after the checks every control input
 * shares: one array, a float dtype, finite values.  Its shape is checked by
 * the caller. */
static LbTensor *
load_array (const char *path, const char *what, GError ** error)
{
  g_autoptr (LingbotCheckpoint) ck = lingbot_checkpoint_open (path, error);
  const char *const *names;
  const LbTensor *t;
  LbTensor *f;
  guint n = 0;

  if (ck == NULL)
    return NULL;
  names = lingbot_checkpoint_list_tensors (ck, &n);
  if (n != 1) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: %s: expected one array, found %u", path, what, n);
    return NULL;
  }
  t = lingbot_checkpoint_get (ck, names[0], error);
  if (t == NULL)
    return NULL;
  if (!lb_dtype_is_float (t->dtype)) {
    g_autofree char *s = lb_tensor_shape_string (t);
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
        "%s: %s must be floating point (f32, f64 or f16), got %s %s", path,
        what, lb_dtype_name (t->dtype), s);
    return NULL;
  }
  f = lb_tensor_to_f32 (t);
  for (int64_t i = 0; i < lb_tensor_numel (f); i++) {
    float v = ((const float *) f->data)[i];
    if (!isfinite (v)) {
      g_set_error (error, LB_ERROR, LB_ERROR_FORMAT,
          "%s: %s: element %" G_GINT64_FORMAT " is %g, not a finite number",
          path, what, i, (double) v);
      lb_tensor_free (f);
      return NULL;
    }
  }
  return f;
}

/**
 * lingbot_poses_load:
 * @poses_path: camera poses, `.npy` (or any one-array file
 *   lingbot_checkpoint_open() reads) of shape [n, 4, 4], n >= 1:
 *   camera-to-world matrices, row-major, OpenCV convention, one per video
 *   frame (spec 2.9, 2.10)
 * @intrinsics_path: (nullable): intrinsics fx, fy, cx, cy in pixels at
 *   the calibration size: shape [4], or [N, 4] with N >= 1: one per pose
 *   when N is the number of poses (as the bundled intrinsics.npy), else
 *   its first row for every frame, as the reference reads any N; %NULL
 *   for none
 * @error: return location for a #GError
 *
 * Loads the offline camera path, as lingbot_control_new_offline_from_files()
 * and lingbotcontrolsrc (`poses-location`, `intrinsics-location`) take it.
 * float32, float64 and float16 arrays are converted to float32.  Only the
 * first intrinsics row is used by the session (spec 2.9 step 6).
 *
 * Returns: (transfer full): the poses, free with lingbot_poses_free(); or
 *   %NULL with @error naming the file: the reader's %LINGBOT_ERROR_IO /
 *   %LINGBOT_ERROR_NOT_FOUND / %LINGBOT_ERROR_FORMAT for a missing or malformed
 *   file, %LINGBOT_ERROR_FORMAT for a file holding several arrays, an integer
 *   dtype ("...: poses must be floating point (f32, f64 or f16), got i64 [2, 4,
 *   4]") or a NaN or infinity, %LINGBOT_ERROR_SHAPE for a wrong or empty shape
 *   ("...: intrinsics must have shape [4] or [N, 4] with N >= 1 (the first
 *   row is used unless N is the number of poses), got [0, 4]").
 */
LingbotPoses *
lingbot_poses_load (const char *poses_path, const char *intrinsics_path,
    GError ** error)
{
  g_autoptr (LbTensor) p = NULL;
  g_autoptr (LbTensor) k = NULL;
  LingbotPoses *out;
  guint n, m = 0;

  g_return_val_if_fail (poses_path != NULL, NULL);

  p = load_array (poses_path, "poses", error);
  if (p == NULL)
    return NULL;
  if (p->ndim != 3 || p->shape[1] != 4 || p->shape[2] != 4
      || p->shape[0] < 1 || p->shape[0] > MAX_POSE_ROWS) {
    g_autofree char *s = lb_tensor_shape_string (p);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "%s: poses must have shape [n, 4, 4] with 1 <= n <= %u, got %s",
        poses_path, MAX_POSE_ROWS, s);
    return NULL;
  }
  n = (guint) p->shape[0];

  if (intrinsics_path != NULL) {
    k = load_array (intrinsics_path, "intrinsics", error);
    if (k == NULL)
      return NULL;
    if (k->ndim == 1 && k->shape[0] == 4)
      m = 1;
    else if (k->ndim == 2 && k->shape[1] == 4 && k->shape[0] >= 1)
      /* one row per pose is kept as such; any other row count is read as
       * the reference reads it: its first row, for every frame */
      m = k->shape[0] == n ? n : 1;
    else {
      g_autofree char *s = lb_tensor_shape_string (k);
      g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
          "%s: intrinsics must have shape [4] or [N, 4] with N >= 1 (the "
          "first row is used unless N is the number of poses), got %s",
          intrinsics_path, s);
      return NULL;
    }
  }

  out = g_new0 (LingbotPoses, 1);
  out->n_poses = n;
  out->poses = g_memdup2 (p->data, 16 * sizeof (float) * (gsize) n);
  out->n_intrinsics = m;
  if (m > 0)
    out->intrinsics = g_memdup2 (k->data, 4 * sizeof (float) * (gsize) m);
  return out;
}

/**
 * lingbot_poses_free:
 * @poses: (transfer full) (nullable): poses from lingbot_poses_load()
 *
 * Frees @poses and its arrays.
 */
void
lingbot_poses_free (LingbotPoses * poses)
{
  if (poses == NULL)
    return;
  g_free (poses->poses);
  g_free (poses->intrinsics);
  g_free (poses);
}

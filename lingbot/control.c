/* lingbot-gst: camera control: keys, pose integration, relative poses,
 * ray map and the per-chunk control tensor
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "lingbot/control.h"
#include "lingbot/checkpoint.h"
#include "kernels/error.h"
#include "kernels/cpu/cpu-internal.h"

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

#define DEG2RAD (G_PI / 180.0)  /* Python's math.radians factor */
#define RAY_CHANNELS 6
#define FOLD 8                  /* pixels per latent cell, each axis */
#define CONTROL_CHANNELS (RAY_CHANNELS * FOLD * FOLD)   /* 384 */

/* ------------------------------------------------------------------ */
/* frame counting                                                     */
/* ------------------------------------------------------------------ */

/**
 * lingbot_frame_count_resolve:
 * @frame_num: requested video frames (must be 4n+1)
 * @chunk_size: latent frames per chunk (4)
 * @policy: what to do with latent frames that do not fill a chunk
 * @effective_frame_num: (out) (optional): video frames actually produced
 * @latent_frames: (out) (optional): latent frames (a multiple of
 *   @chunk_size)
 * @error: return location for a #GError
 *
 * `resolve_lingbot_frame_count` of spec 3.1: latent = (frame_num-1)/4 + 1,
 * truncated to a multiple of the chunk size (or an error under
 * %LINGBOT_FRAME_POLICY_STRICT); effective = 4*(latent-1) + 1.
 * 77 -> 20 latent frames -> 77; 81 -> 21 -> 20 -> 77.
 *
 * Returns: %TRUE on success; %LB_ERROR_INVALID_ARGUMENT otherwise.
 */
gboolean
lingbot_frame_count_resolve (guint frame_num, guint chunk_size,
    LingbotFramePolicy policy, guint * effective_frame_num,
    guint * latent_frames, GError ** error)
{
  guint latent;

  if (chunk_size < 1) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "chunk_size must be a positive integer, got %u", chunk_size);
    return FALSE;
  }
  if (frame_num < 1 || (frame_num - 1) % 4) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "frame_num must be 4n+1, got %u", frame_num);
    return FALSE;
  }
  latent = (frame_num - 1) / 4 + 1;
  if (policy == LINGBOT_FRAME_POLICY_TRUNCATE)
    latent -= latent % chunk_size;
  if (latent < chunk_size || latent % chunk_size) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "frame_num %u does not contain a whole number of latent chunks of "
        "size %u", frame_num, chunk_size);
    return FALSE;
  }
  if (effective_frame_num)
    *effective_frame_num = 4 * (latent - 1) + 1;
  if (latent_frames)
    *latent_frames = latent;
  return TRUE;
}

/**
 * lingbot_frame_count_for_duration:
 * @seconds: longest session duration
 * @fps: video frame rate (16)
 * @chunk_size: latent frames per chunk
 *
 * The streaming service's length rule (spec 3.1): max_latent =
 * floor(seconds*fps/4) + 1 rounded down to a multiple of @chunk_size;
 * frame_num = 4*(max_latent-1) + 1.  60 s at 16 fps gives 957.
 *
 * Returns: the frame count, or 0 when the duration is too short for one
 *   chunk or an argument is not positive.
 */
guint
lingbot_frame_count_for_duration (double seconds, guint fps,
    guint chunk_size)
{
  guint max_latent, latent;

  if (!(seconds > 0.0) || fps == 0 || chunk_size == 0)
    return 0;
  max_latent = (guint) floor (seconds * fps / 4.0) + 1;
  latent = (max_latent / chunk_size) * chunk_size;
  if (latent < chunk_size)
    return 0;
  return 4 * (latent - 1) + 1;
}

/**
 * lingbot_chunk_video_frames:
 * @chunk_index: chunk number in the session
 * @chunk_size: latent frames per chunk
 *
 * Returns: decoded video frames of the chunk: 1 + 4*(C-1) for chunk 0
 *   (13), 4*C afterwards (16).  Spec 3.1.
 */
guint
lingbot_chunk_video_frames (guint chunk_index, guint chunk_size)
{
  return chunk_index == 0 ? 1 + 4 * (chunk_size - 1) : 4 * chunk_size;
}

/* ------------------------------------------------------------------ */
/* keys                                                               */
/* ------------------------------------------------------------------ */

static const struct {
  const char *name;
  guint key;
} key_aliases[] = {
  {"ArrowUp", LINGBOT_KEY_W}, {"ArrowDown", LINGBOT_KEY_S},
  {"ArrowLeft", LINGBOT_KEY_A}, {"ArrowRight", LINGBOT_KEY_D},
  {"KeyW", LINGBOT_KEY_W}, {"KeyA", LINGBOT_KEY_A},
  {"KeyS", LINGBOT_KEY_S}, {"KeyD", LINGBOT_KEY_D},
  {"KeyI", LINGBOT_KEY_I}, {"KeyJ", LINGBOT_KEY_J},
  {"KeyK", LINGBOT_KEY_K}, {"KeyL", LINGBOT_KEY_L},
  {"w", LINGBOT_KEY_W}, {"a", LINGBOT_KEY_A}, {"s", LINGBOT_KEY_S},
  {"d", LINGBOT_KEY_D}, {"i", LINGBOT_KEY_I}, {"j", LINGBOT_KEY_J},
  {"k", LINGBOT_KEY_K}, {"l", LINGBOT_KEY_L},
  {"up", LINGBOT_KEY_W}, {"down", LINGBOT_KEY_S},
  {"left", LINGBOT_KEY_A}, {"right", LINGBOT_KEY_D},
  {"forward", LINGBOT_KEY_W}, {"backward", LINGBOT_KEY_S},
};

/**
 * lingbot_key_from_name:
 * @name: a key name: a DOM `code` (ArrowUp, KeyW, ...) or an alias
 *   ("w", "up", "forward", ...), case-sensitive as in the reference table
 *
 * Spec 2.1: arrow keys are translation (ArrowLeft = a, not yaw).
 *
 * Returns: the #LingbotKey bit, or 0 for an unknown name.
 */
guint
lingbot_key_from_name (const char *name)
{
  if (name == NULL)
    return 0;
  for (guint i = 0; i < G_N_ELEMENTS (key_aliases); i++)
    if (strcmp (name, key_aliases[i].name) == 0)
      return key_aliases[i].key;
  return 0;
}

/**
 * lingbot_keys_to_string:
 * @keys: a set of #LingbotKey bits
 *
 * Returns: (transfer full): the key letters in sorted order separated by
 *   commas ("a,l,w"), "" for the empty set.
 */
char *
lingbot_keys_to_string (guint keys)
{
  static const struct {
    char c;
    guint key;
  } order[] = {
    {'a', LINGBOT_KEY_A}, {'d', LINGBOT_KEY_D}, {'i', LINGBOT_KEY_I},
    {'j', LINGBOT_KEY_J}, {'k', LINGBOT_KEY_K}, {'l', LINGBOT_KEY_L},
    {'s', LINGBOT_KEY_S}, {'w', LINGBOT_KEY_W},
  };
  GString *s = g_string_new (NULL);

  for (guint i = 0; i < G_N_ELEMENTS (order); i++) {
    if (keys & order[i].key) {
      if (s->len)
        g_string_append_c (s, ',');
      g_string_append_c (s, order[i].c);
    }
  }
  return g_string_free (s, FALSE);
}

/** lingbot_key_state_init: @ks: a key state; clears it. */
void
lingbot_key_state_init (LingbotKeyState * ks)
{
  memset (ks, 0, sizeof *ks);
}

/**
 * lingbot_key_state_press:
 * @ks: a key state
 * @keys: key bits going down
 *
 * Each key not already held is added; if any was added, the held set is
 * stored as the pending tap (replacing an unconsumed one).
 */
void
lingbot_key_state_press (LingbotKeyState * ks, guint keys)
{
  for (guint b = 1; b <= LINGBOT_KEY_L; b <<= 1) {
    if ((keys & b) && !(ks->held & b)) {
      ks->held |= b;
      ks->revision++;
      ks->tap = ks->held;
      ks->tap_revision = ks->revision;
      ks->has_tap = TRUE;
    }
  }
}

/**
 * lingbot_key_state_release:
 * @ks: a key state
 * @keys: key bits going up
 *
 * Removes the keys from the held set; a pending tap is kept.
 */
void
lingbot_key_state_release (LingbotKeyState * ks, guint keys)
{
  ks->held &= ~keys;
}

/**
 * lingbot_key_state_take:
 * @ks: a key state
 * @idle: whether no chunk is in flight
 * @keys: (out): the key set for the next chunk
 * @is_tap: (out) (optional): whether it is a tap snapshot
 *
 * The worker's choice for the next chunk: a pending tap (consumed); else,
 * only when @idle, the held set if not empty; else nothing (wait).
 *
 * Returns: %TRUE when a chunk should be generated from *@keys.
 */
gboolean
lingbot_key_state_take (LingbotKeyState * ks, gboolean idle, guint * keys,
    gboolean * is_tap)
{
  if (ks->has_tap) {
    *keys = ks->tap;
    ks->has_tap = FALSE;
    if (is_tap)
      *is_tap = TRUE;
    return TRUE;
  }
  if (idle && ks->held) {
    *keys = ks->held;
    if (is_tap)
      *is_tap = FALSE;
    return TRUE;
  }
  return FALSE;
}

/* ------------------------------------------------------------------ */
/* camera integration (float64)                                       */
/* ------------------------------------------------------------------ */

/**
 * lingbot_camera_params_init:
 * @params: (out caller-allocates): parameters to fill
 *
 * The v2 example values (spec 2.2): move and lateral step 0.1, yaw and
 * pitch step 0.5 degrees, pitch limit 85 degrees, translation scale 3.
 */
void
lingbot_camera_params_init (LingbotCameraParams * params)
{
  params->move_step = 0.1;
  params->lateral_step = 0.1;
  params->yaw_step_degrees = 0.5;
  params->pitch_step_degrees = 0.5;
  params->pitch_limit_degrees = 85.0;
  params->translation_scale = 3.0;
}

/** lingbot_camera_reset: @cam: a camera; sets c2w = I and pitch = 0. */
void
lingbot_camera_reset (LingbotCamera * cam)
{
  memset (cam, 0, sizeof *cam);
  cam->c2w[0] = cam->c2w[5] = cam->c2w[10] = cam->c2w[15] = 1.0;
}

static void
mm3_d (const double a[9], const double b[9], double o[9])
{
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      double acc = 0.0;
      for (int k = 0; k < 3; k++)
        acc += a[i * 3 + k] * b[k * 3 + j];
      o[i * 3 + j] = acc;
    }
}

/**
 * lingbot_camera_step:
 * @cam: the camera state, updated in place
 * @params: step sizes
 * @keys: the held key set for this video frame
 *
 * One video-frame step of spec 2.2 in float64: pitch (i/k, kept within
 * +-limit inclusive, else frozen for the step), yaw (j/l),
 * `R' = Ry(yaw) R Rx(pitch)`, then translation along the horizontal
 * forward/right directions of R' (w/s, d/a; divided by norm + 1e-6).
 */
void
lingbot_camera_step (LingbotCamera * cam, const LingbotCameraParams * params,
    guint keys)
{
  double dp = 0.0, dy = 0.0, ps, ys, lim, np_;
  double ry[9], rx[9], r[9], t1[9], rn[9];
  double fwd[3], right[3], fn, rnrm, mv[3] = { 0.0, 0.0, 0.0 };

  ps = params->pitch_step_degrees * DEG2RAD;
  if (keys & LINGBOT_KEY_I)
    dp += ps;
  if (keys & LINGBOT_KEY_K)
    dp -= ps;
  lim = params->pitch_limit_degrees * DEG2RAD;
  np_ = cam->pitch + dp;
  if (-lim <= np_ && np_ <= lim)
    cam->pitch = np_;
  else
    dp = 0.0;

  ys = params->yaw_step_degrees * DEG2RAD;
  if (keys & LINGBOT_KEY_J)
    dy -= ys;
  if (keys & LINGBOT_KEY_L)
    dy += ys;

  {
    double c = cos (dy), s = sin (dy);
    double ry_[9] = { c, 0.0, s, 0.0, 1.0, 0.0, -s, 0.0, c };
    memcpy (ry, ry_, sizeof ry);
  }
  {
    double c = cos (dp), s = sin (dp);
    double rx_[9] = { 1.0, 0.0, 0.0, 0.0, c, -s, 0.0, s, c };
    memcpy (rx, rx_, sizeof rx);
  }
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      r[i * 3 + j] = cam->c2w[i * 4 + j];
  mm3_d (ry, r, t1);
  mm3_d (t1, rx, rn);

  fwd[0] = rn[2];
  fwd[1] = 0.0;
  fwd[2] = rn[8];
  right[0] = rn[0];
  right[1] = 0.0;
  right[2] = rn[6];
  fn = sqrt (fwd[0] * fwd[0] + fwd[1] * fwd[1] + fwd[2] * fwd[2]);
  rnrm = sqrt (right[0] * right[0] + right[1] * right[1] +
      right[2] * right[2]);
  if (fn > 0.0)
    for (int i = 0; i < 3; i++)
      fwd[i] /= fn + 1e-6;
  if (rnrm > 0.0)
    for (int i = 0; i < 3; i++)
      right[i] /= rnrm + 1e-6;

  for (int i = 0; i < 3; i++) {
    if (keys & LINGBOT_KEY_W)
      mv[i] += fwd[i] * params->move_step;
    if (keys & LINGBOT_KEY_S)
      mv[i] -= fwd[i] * params->move_step;
    if (keys & LINGBOT_KEY_D)
      mv[i] += right[i] * params->lateral_step;
    if (keys & LINGBOT_KEY_A)
      mv[i] -= right[i] * params->lateral_step;
  }

  for (int i = 0; i < 3; i++) {
    for (int j = 0; j < 3; j++)
      cam->c2w[i * 4 + j] = rn[i * 3 + j];
    cam->c2w[i * 4 + 3] = cam->c2w[i * 4 + 3] + mv[i];
  }
  cam->c2w[12] = cam->c2w[13] = cam->c2w[14] = 0.0;
  cam->c2w[15] = 1.0;
}

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

/* @rel: scratch of n matrices */
static void
relative_poses_impl (const float *poses, guint n, float *out, float *rel)
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
  relative_poses_impl (poses, n, out, rel);
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
/* ray map and packing                                                */
/* ------------------------------------------------------------------ */

/* The arithmetic lives in kernels/cpu/raymap.c, shared with the ray_map
 * op (kernels/ops.h), so a device rank's control tensor is this one bit for
 * bit: one pixel is origin = translation, direction =
 * R * normalize(((u+0.5-cx)/fx, (v+0.5-cy)/fy, 1)). */

/**
 * lingbot_control_plucker:
 * @rel_poses: (array): n_frames relative poses, float32 row-major 4x4
 * @n_frames: number of frames
 * @k: transformed intrinsics fx, fy, cx, cy
 * @width: output width W
 * @height: output height H
 * @out: (out caller-allocates): [n_frames, H, W, 6] float32
 *
 * The per-pixel ray map of spec 2.6 (origin, rotated unit direction; no
 * moment), pixel centres at +0.5.  Mostly for tests: the control tensor is
 * built by lingbot_control_pack() without this intermediate.
 */
void
lingbot_control_plucker (const float *rel_poses, guint n_frames,
    const float k[4], int width, int height, float *out)
{
  for (guint n = 0; n < n_frames; n++)
    for (int v = 0; v < height; v++) {
      float y = ((float) v + 0.5f - k[3]) / k[1];
      for (int u = 0; u < width; u++) {
        float x = ((float) u + 0.5f - k[2]) / k[0];
        lb_cpu_ray_pixel (rel_poses + 16 * n, x, y,
            out + (((gsize) n * height + v) * width + u) * RAY_CHANNELS);
      }
    }
}

/* @xs: scratch of @width floats */
static gboolean
pack_impl (const float *rel_poses, guint n_frames, const float k[4],
    int width, int height, int row0, int row1, float *out, float *xs,
    GError ** error)
{
  int hl;

  if (width <= 0 || height <= 0 || width % FOLD || height % FOLD) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "control: output size %dx%d is not a positive multiple of %d",
        width, height, FOLD);
    return FALSE;
  }
  hl = height / FOLD;
  if (row0 < 0 || row1 > hl || row0 > row1) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "control: latent rows [%d, %d) outside 0..%d", row0, row1, hl);
    return FALSE;
  }
  lb_cpu_ray_map_fill (rel_poses, (int) n_frames, k, width, row0,
      row1 - row0, xs, out);
  return TRUE;
}

/**
 * lingbot_control_pack:
 * @rel_poses: (array): n_frames relative poses (translation already
 *   scaled where the path scales it)
 * @n_frames: frames in the chunk (C)
 * @k: transformed intrinsics fx, fy, cx, cy
 * @width: output width W (multiple of 8)
 * @height: output height H (multiple of 8)
 * @row0: first latent row to produce
 * @row1: end latent row (exclusive), <= H/8
 * @out: (out caller-allocates): [384, n_frames, row1-row0, W/8] float32
 * @error: return location for a #GError
 *
 * Builds the ray map of latent rows [@row0, @row1) and folds it 8x8 onto
 * the latent grid (spec 2.7): channel c*64 + r*8 + s of cell (y, x) is ray
 * channel c of pixel (8y + r, 8x + s).  Rows outside the band are not
 * computed, so a rank builds only its own band.
 *
 * Returns: %TRUE; %FALSE with %LB_ERROR_INVALID_ARGUMENT for a size that
 *   is not a multiple of 8 or a bad band.
 */
gboolean
lingbot_control_pack (const float *rel_poses, guint n_frames,
    const float k[4], int width, int height, int row0, int row1, float *out,
    GError ** error)
{
  float *xs = g_new (float, MAX (width, 1));
  gboolean ok = pack_impl (rel_poses, n_frames, k, width, height, row0, row1,
      out, xs, error);
  g_free (xs);
  return ok;
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
  double xy = x * y, zw = z * w, xz = x * z, yw = y * w, yz = y * z,
      xw = x * w;

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
quat_slerp (const double qa[4], const double qb[4], double alpha,
    double out[4])
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
/* the control session                                                */
/* ------------------------------------------------------------------ */

/* What lingbot_control_advance() changes, saved before it for
 * lingbot_control_rewind(). */
typedef struct {
  gboolean valid;
  gint chunk;
  LingbotCamera cam;
  gboolean initialized;
  gboolean has_previous;
  double previous[16];
  double *poses;                /* [C, 16] */
  float *rel;                   /* [C, 16] */
} ControlUndo;

struct _LingbotControl {
  LingbotControlConfig cfg;
  float k[4];                   /* transformed intrinsics */
  gboolean offline;
  gint chunk;                   /* current chunk, -1 before the first */

  /* live */
  LingbotKeyState keys;
  LingbotCamera cam;
  gboolean initialized;
  gboolean has_previous;
  double previous[16];
  double *poses;                /* [C, 16] absolute, float64 */
  float *rel;                   /* [C, 16] relative, scaled */
  float *scratch_q;             /* [C + 1, 16]: per-chunk work space, */
  float *scratch_r;             /* [C + 1, 16]  so advancing never */
  float *scratch_a;             /* [C + 1, 16]  allocates */
  float *scratch_x;             /* [W] */

  /* offline */
  guint n_latent;
  float *off_poses;             /* [n_latent, 16] interpolated */
  float *off_rel;               /* [n_latent, 16] */

  ControlUndo undo;
};

/**
 * lingbot_control_config_init:
 * @cfg: (out caller-allocates): config to fill
 * @image_width: original image width
 * @image_height: original image height
 * @width: output video width
 * @height: output video height
 *
 * Chunk size 4, no intrinsics (the image-size default of spec 2.5),
 * calibration size 832x480 for when intrinsics are set later, and the v2
 * camera parameters (lingbot_camera_params_init()).
 */
void
lingbot_control_config_init (LingbotControlConfig * cfg, int image_width,
    int image_height, int width, int height)
{
  memset (cfg, 0, sizeof *cfg);
  cfg->chunk_size = 4;
  cfg->width = width;
  cfg->height = height;
  cfg->image_width = image_width;
  cfg->image_height = image_height;
  cfg->intrinsics_width = 832;
  cfg->intrinsics_height = 480;
  lingbot_camera_params_init (&cfg->camera);
}

static LingbotControl *
control_alloc (const LingbotControlConfig * cfg, GError ** error)
{
  LingbotControl *c;
  float k0[4];
  int cw, ch;

  if (cfg->chunk_size < 1 || cfg->width <= 0 || cfg->height <= 0
      || cfg->width % FOLD || cfg->height % FOLD) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "control: need chunk_size >= 1 and an output size that is a "
        "multiple of %d, got chunk_size %u, %dx%d", FOLD, cfg->chunk_size,
        cfg->width, cfg->height);
    return NULL;
  }
  if (cfg->has_intrinsics) {
    memcpy (k0, cfg->intrinsics, sizeof k0);
    cw = cfg->intrinsics_width;
    ch = cfg->intrinsics_height;
  } else {
    k0[0] = k0[1] = (float) cfg->image_width;
    k0[2] = (float) ((double) cfg->image_width / 2.0);
    k0[3] = (float) ((double) cfg->image_height / 2.0);
    cw = cfg->image_width;
    ch = cfg->image_height;
  }
  if (cw <= 0 || ch <= 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "control: intrinsics calibration size %dx%d is not positive "
        "(set image_width/height or intrinsics_width/height)", cw, ch);
    return NULL;
  }

  c = g_new0 (LingbotControl, 1);
  c->cfg = *cfg;
  lingbot_control_intrinsics_transform (k0, cw, ch, cfg->width, cfg->height,
      c->k);
  c->chunk = -1;
  lingbot_key_state_init (&c->keys);
  lingbot_camera_reset (&c->cam);
  c->poses = g_new0 (double, 16 * (gsize) cfg->chunk_size);
  c->rel = g_new0 (float, 16 * (gsize) cfg->chunk_size);
  c->scratch_q = g_new0 (float, 16 * (gsize) (cfg->chunk_size + 1));
  c->scratch_r = g_new0 (float, 16 * (gsize) (cfg->chunk_size + 1));
  c->scratch_a = g_new0 (float, 16 * (gsize) (cfg->chunk_size + 1));
  c->scratch_x = g_new0 (float, cfg->width);
  c->undo.poses = g_new0 (double, 16 * (gsize) cfg->chunk_size);
  c->undo.rel = g_new0 (float, 16 * (gsize) cfg->chunk_size);
  return c;
}

/**
 * lingbot_control_new:
 * @cfg: geometry, intrinsics and camera parameters
 * @error: return location for a #GError
 *
 * A live (keyboard) control session: feed key events, take a key set per
 * chunk (lingbot_control_take_keys()), integrate it
 * (lingbot_control_advance()) and fill the chunk's control tensor
 * (lingbot_control_fill()).  Spec 2.1-2.8.
 *
 * Returns: (transfer full): the session, or %NULL with
 *   %LB_ERROR_INVALID_ARGUMENT for a bad config.
 */
LingbotControl *
lingbot_control_new (const LingbotControlConfig * cfg, GError ** error)
{
  return control_alloc (cfg, error);
}

/**
 * lingbot_control_new_offline:
 * @cfg: geometry and intrinsics (has_intrinsics must be set: the first row
 *   of intrinsics.npy at intrinsics_width x intrinsics_height)
 * @poses: (array): n_poses float32 4x4 camera-to-world matrices, one per
 *   video frame (poses.npy)
 * @n_poses: number of poses
 * @frame_num: requested video frames (4n+1; truncated to whole chunks)
 * @error: return location for a #GError
 *
 * The offline path of spec 2.9: keep the first frame_num poses, interpolate
 * one pose per latent frame, relative poses normalised over the whole
 * sequence (no previous pose, no translation scale).  Chunks are taken in
 * order with lingbot_control_advance() (keys ignored).
 *
 * Returns: (transfer full): the session, or %NULL with
 *   %LB_ERROR_INVALID_ARGUMENT (bad frame count, too few poses, no
 *   intrinsics).
 */
LingbotControl *
lingbot_control_new_offline (const LingbotControlConfig * cfg,
    const float *poses, guint n_poses, guint frame_num, GError ** error)
{
  LingbotControl *c;
  guint eff, latent;

  if (!cfg->has_intrinsics) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "control: the offline path needs intrinsics");
    return NULL;
  }
  if (!lingbot_frame_count_resolve (frame_num, cfg->chunk_size,
          LINGBOT_FRAME_POLICY_TRUNCATE, &eff, &latent, error))
    return NULL;
  if (n_poses < eff || n_poses < 2) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "control: pose sequence has %u frames but frame_num requires %u",
        n_poses, eff);
    return NULL;
  }
  c = control_alloc (cfg, error);
  if (c == NULL)
    return NULL;
  c->offline = TRUE;
  c->n_latent = latent;
  c->off_poses = g_new (float, 16 * (gsize) latent);
  c->off_rel = g_new (float, 16 * (gsize) latent);
  lingbot_control_interpolate_poses (poses, eff, latent, c->off_poses);
  lingbot_control_relative_poses (c->off_poses, latent, c->off_rel);
  return c;
}

static LbTensor *
read_npy (const char *path, GError ** error)
{
  g_autoptr (LingbotCheckpoint) ck = lingbot_checkpoint_open (path, error);
  const char *const *names;
  const LbTensor *t;
  guint n = 0;

  if (ck == NULL)
    return NULL;
  names = lingbot_checkpoint_list_tensors (ck, &n);
  if (n == 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_FORMAT, "%s holds no array", path);
    return NULL;
  }
  t = lingbot_checkpoint_get (ck, names[0], error);
  return t ? lb_tensor_to_f32 (t) : NULL;
}

/**
 * lingbot_control_new_offline_from_files:
 * @cfg: geometry; its intrinsics are replaced by the first row of the
 *   intrinsics file (calibration size from cfg->intrinsics_width/height)
 * @poses_path: poses.npy, [N, 4, 4]
 * @intrinsics_path: intrinsics.npy, [N, 4] or [4]
 * @frame_num: requested video frames
 * @error: return location for a #GError
 *
 * lingbot_control_new_offline() on the published example files.
 *
 * Returns: (transfer full): the session, or %NULL with @error set
 *   (%LB_ERROR_IO / %LB_ERROR_FORMAT from the reader, %LB_ERROR_SHAPE for
 *   arrays of the wrong shape).
 */
LingbotControl *
lingbot_control_new_offline_from_files (const LingbotControlConfig * cfg,
    const char *poses_path, const char *intrinsics_path, guint frame_num,
    GError ** error)
{
  g_autoptr (LbTensor) poses = read_npy (poses_path, error);
  g_autoptr (LbTensor) intr = NULL;
  LingbotControlConfig c2 = *cfg;

  if (poses == NULL)
    return NULL;
  if (poses->ndim != 3 || poses->shape[1] != 4 || poses->shape[2] != 4) {
    g_autofree char *s = lb_tensor_shape_string (poses);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "%s: poses must have shape (frames, 4, 4), got %s", poses_path, s);
    return NULL;
  }
  intr = read_npy (intrinsics_path, error);
  if (intr == NULL)
    return NULL;
  if (!((intr->ndim == 1 && intr->shape[0] == 4)
          || (intr->ndim == 2 && intr->shape[0] >= 1
              && intr->shape[1] == 4))) {
    g_autofree char *s = lb_tensor_shape_string (intr);
    g_set_error (error, LB_ERROR, LB_ERROR_SHAPE,
        "%s: intrinsics must have shape (4,) or (frames, 4), got %s",
        intrinsics_path, s);
    return NULL;
  }
  c2.has_intrinsics = TRUE;
  memcpy (c2.intrinsics, intr->data, 4 * sizeof (float));
  return lingbot_control_new_offline (&c2, poses->data,
      (guint) poses->shape[0], frame_num, error);
}

/** lingbot_control_free: @ctl: (nullable): a control session */
void
lingbot_control_free (LingbotControl * ctl)
{
  if (ctl == NULL)
    return;
  g_free (ctl->poses);
  g_free (ctl->rel);
  g_free (ctl->scratch_q);
  g_free (ctl->scratch_r);
  g_free (ctl->scratch_a);
  g_free (ctl->scratch_x);
  g_free (ctl->off_poses);
  g_free (ctl->off_rel);
  g_free (ctl->undo.poses);
  g_free (ctl->undo.rel);
  g_free (ctl);
}

/** lingbot_control_is_offline: Returns: %TRUE for a poses.npy session. */
gboolean
lingbot_control_is_offline (const LingbotControl * ctl)
{
  return ctl->offline;
}

/** lingbot_control_get_chunk_size: Returns: latent frames per chunk. */
guint
lingbot_control_get_chunk_size (const LingbotControl * ctl)
{
  return ctl->cfg.chunk_size;
}

/** lingbot_control_get_latent_height: Returns: h_lat = H/8. */
int
lingbot_control_get_latent_height (const LingbotControl * ctl)
{
  return ctl->cfg.height / FOLD;
}

/** lingbot_control_get_latent_width: Returns: w_lat = W/8. */
int
lingbot_control_get_latent_width (const LingbotControl * ctl)
{
  return ctl->cfg.width / FOLD;
}

/**
 * lingbot_control_get_chunk_n_elements:
 * @ctl: a control session
 * @row0: first latent row
 * @row1: end latent row
 *
 * Returns: float count of one chunk's control band: 384 * C * (row1-row0)
 *   * w_lat.
 */
gsize
lingbot_control_get_chunk_n_elements (const LingbotControl * ctl, int row0,
    int row1)
{
  return (gsize) CONTROL_CHANNELS * ctl->cfg.chunk_size *
      (gsize) MAX (row1 - row0, 0) * (gsize) (ctl->cfg.width / FOLD);
}

/**
 * lingbot_control_get_intrinsics:
 * @ctl: a control session
 * @k: (out caller-allocates): fx, fy, cx, cy transformed to the output size
 */
void
lingbot_control_get_intrinsics (const LingbotControl * ctl, float k[4])
{
  memcpy (k, ctl->k, 4 * sizeof (float));
}

/**
 * lingbot_control_key_event:
 * @ctl: a live control session
 * @key: a key name (lingbot_key_from_name())
 * @pressed: %TRUE for a press, %FALSE for a release
 *
 * Returns: %FALSE (and changes nothing) when the key name is unknown.
 */
gboolean
lingbot_control_key_event (LingbotControl * ctl, const char *key,
    gboolean pressed)
{
  guint k = lingbot_key_from_name (key);

  if (k == 0)
    return FALSE;
  if (pressed)
    lingbot_key_state_press (&ctl->keys, k);
  else
    lingbot_key_state_release (&ctl->keys, k);
  return TRUE;
}

/** lingbot_control_press: @ctl: a session; @keys: #LingbotKey bits down */
void
lingbot_control_press (LingbotControl * ctl, guint keys)
{
  lingbot_key_state_press (&ctl->keys, keys);
}

/** lingbot_control_release: @ctl: a session; @keys: #LingbotKey bits up */
void
lingbot_control_release (LingbotControl * ctl, guint keys)
{
  lingbot_key_state_release (&ctl->keys, keys);
}

/**
 * lingbot_control_reset_pose:
 * @ctl: a live control session
 *
 * `reset_pose`: pose back to identity, pitch 0, held keys and pending tap
 * cleared; the next chunk is built like a first chunk (no previous pose).
 */
void
lingbot_control_reset_pose (LingbotControl * ctl)
{
  lingbot_key_state_init (&ctl->keys);
  lingbot_camera_reset (&ctl->cam);
  ctl->initialized = FALSE;
  ctl->undo.valid = FALSE;      /* a rewind must not undo the reset */
}

/**
 * lingbot_control_get_key_state:
 * @ctl: a control session
 *
 * Returns: (transfer none): the session's key state.
 */
LingbotKeyState *
lingbot_control_get_key_state (LingbotControl * ctl)
{
  return &ctl->keys;
}

/**
 * lingbot_control_take_keys:
 * @ctl: a live control session
 * @idle: whether no chunk is in flight
 * @keys: (out): key set for the next chunk
 * @is_tap: (out) (optional): whether it was a tap snapshot
 *
 * lingbot_key_state_take() on the session's key state.
 *
 * Returns: %TRUE when a chunk should be generated now.
 */
gboolean
lingbot_control_take_keys (LingbotControl * ctl, gboolean idle,
    guint * keys, gboolean * is_tap)
{
  return lingbot_key_state_take (&ctl->keys, idle, keys, is_tap);
}

static void
compute_live_rel (LingbotControl * c)
{
  guint C = c->cfg.chunk_size, nq = C + (c->has_previous ? 1 : 0);
  float *q = c->scratch_q, *r = c->scratch_r;
  float *dst = q;
  float scale = (float) c->cfg.camera.translation_scale;

  if (c->has_previous) {
    for (int i = 0; i < 16; i++)
      dst[i] = (float) c->previous[i];
    dst += 16;
  }
  for (gsize i = 0; i < 16 * (gsize) C; i++)
    dst[i] = (float) c->poses[i];
  relative_poses_impl (q, nq, r, c->scratch_a);
  memcpy (c->rel, r + (c->has_previous ? 16 : 0), 16 * C * sizeof (float));
  for (guint i = 0; i < C; i++) {
    float *t = c->rel + 16 * i;
    t[3] = t[3] * scale;
    t[7] = t[7] * scale;
    t[11] = t[11] * scale;
  }
}

/* The state lingbot_control_advance() is about to change (no allocation:
 * the buffers are made with the session). */
static void
save_undo (LingbotControl * c)
{
  const gsize n = 16 * (gsize) c->cfg.chunk_size;
  ControlUndo *u = &c->undo;
  u->valid = TRUE;
  u->chunk = c->chunk;
  u->cam = c->cam;
  u->initialized = c->initialized;
  u->has_previous = c->has_previous;
  memcpy (u->previous, c->previous, sizeof u->previous);
  memcpy (u->poses, c->poses, n * sizeof (double));
  memcpy (u->rel, c->rel, n * sizeof (float));
}

/**
 * lingbot_control_advance:
 * @ctl: a control session
 * @keys: the key set of the chunk (live; ignored offline).  An empty set
 *   is allowed and keeps the camera still.
 * @error: return location for a #GError
 *
 * Moves to the next chunk.  Live: integrates the camera 4 video frames per
 * latent frame (spec 2.3): the first chunk's poses are [c2w, +4, +8, +12]
 * with no previous pose, later chunks' [+4, +8, +12, +16] after the
 * previous pose; the poses are cast to float32, made relative (with the
 * previous pose, which is then dropped) and the translations multiplied by
 * the translation scale (spec 2.4).  Offline: selects the next 4 latent
 * frames of the precomputed sequence.
 *
 * Returns: %TRUE; %FALSE with %LB_ERROR_INVALID_ARGUMENT when an offline
 *   sequence has no chunk left.
 */
gboolean
lingbot_control_advance (LingbotControl * ctl, guint keys, GError ** error)
{
  guint C = ctl->cfg.chunk_size;

  if (ctl->offline) {
    if ((guint) (ctl->chunk + 1) >= ctl->n_latent / C) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "control: the offline pose sequence has only %u chunks",
          ctl->n_latent / C);
      return FALSE;
    }
    save_undo (ctl);
    ctl->chunk++;
    memcpy (ctl->rel, ctl->off_rel + 16 * (gsize) ctl->chunk * C,
        16 * C * sizeof (float));
    return TRUE;
  }

  {
    guint first = 0;
    save_undo (ctl);
    ctl->has_previous = ctl->initialized;
    if (ctl->initialized) {
      memcpy (ctl->previous, ctl->cam.c2w, sizeof ctl->previous);
    } else {
      memcpy (ctl->poses, ctl->cam.c2w, 16 * sizeof (double));
      first = 1;
    }
    for (guint i = first; i < C; i++) {
      for (int s = 0; s < 4; s++)
        lingbot_camera_step (&ctl->cam, &ctl->cfg.camera, keys);
      memcpy (ctl->poses + 16 * i, ctl->cam.c2w, 16 * sizeof (double));
    }
    ctl->initialized = TRUE;
    ctl->chunk++;
    compute_live_rel (ctl);
  }
  return TRUE;
}

/**
 * lingbot_control_rewind:
 * @ctl: a control session
 *
 * Undoes the last lingbot_control_advance() (e.g. when the chunk it was
 * for was cancelled): the chunk index, the camera, the previous pose and
 * the current chunk's poses (absolute and relative) are again what they
 * were before it, so the next advance with the same keys gives the same
 * poses.  The key state is not touched (an advance does not change it).
 * Only the last advance is kept: a second rewind, a rewind before any
 * advance or after lingbot_control_reset_pose() (the reset wins) does
 * nothing.  Allocates nothing.
 */
void
lingbot_control_rewind (LingbotControl * ctl)
{
  const gsize n = 16 * (gsize) ctl->cfg.chunk_size;
  ControlUndo *u = &ctl->undo;
  if (!u->valid)
    return;
  ctl->chunk = u->chunk;
  ctl->cam = u->cam;
  ctl->initialized = u->initialized;
  ctl->has_previous = u->has_previous;
  memcpy (ctl->previous, u->previous, sizeof ctl->previous);
  memcpy (ctl->poses, u->poses, n * sizeof (double));
  memcpy (ctl->rel, u->rel, n * sizeof (float));
  u->valid = FALSE;
}

/**
 * lingbot_control_get_chunk_index:
 * Returns: the current chunk (the last lingbot_control_advance()), -1
 *   before the first.
 */
gint
lingbot_control_get_chunk_index (const LingbotControl * ctl)
{
  return ctl->chunk;
}

/**
 * lingbot_control_get_n_chunks:
 * Returns: chunks of an offline sequence; 0 (unbounded) for a live session.
 */
guint
lingbot_control_get_n_chunks (const LingbotControl * ctl)
{
  return ctl->offline ? ctl->n_latent / ctl->cfg.chunk_size : 0;
}

/**
 * lingbot_control_get_chunk_poses:
 * Returns: (transfer none): the current live chunk's C absolute poses,
 *   float64 [C, 4, 4] (golden `stream.chunk_poses`); %NULL offline.
 */
const double *
lingbot_control_get_chunk_poses (const LingbotControl * ctl)
{
  return ctl->offline ? NULL : ctl->poses;
}

/**
 * lingbot_control_get_previous_pose:
 * Returns: (transfer none) (nullable): the pose before the current live
 *   chunk, float64 [4, 4], or %NULL for a first chunk or offline.
 */
const double *
lingbot_control_get_previous_pose (const LingbotControl * ctl)
{
  return (!ctl->offline && ctl->has_previous) ? ctl->previous : NULL;
}

/**
 * lingbot_control_get_chunk_rel_poses:
 * Returns: (transfer none): the current chunk's C relative poses, float32
 *   [C, 4, 4], translation scaled on the live path (golden
 *   `stream.chunk_poses_rel`).
 */
const float *
lingbot_control_get_chunk_rel_poses (const LingbotControl * ctl)
{
  return ctl->rel;
}

/**
 * lingbot_control_get_camera:
 * Returns: (transfer none): the live camera state (pose after the last
 *   integrated video frame).
 */
const LingbotCamera *
lingbot_control_get_camera (const LingbotControl * ctl)
{
  return &ctl->cam;
}

/**
 * lingbot_control_get_offline_poses:
 * @ctl: an offline session
 * @n_frames: (out) (optional): latent frames
 *
 * Returns: (transfer none) (nullable): the interpolated poses, float32
 *   [n_frames, 4, 4] (golden `offline_*.interp_c2w`); %NULL when live.
 */
const float *
lingbot_control_get_offline_poses (const LingbotControl * ctl,
    guint * n_frames)
{
  if (n_frames)
    *n_frames = ctl->offline ? ctl->n_latent : 0;
  return ctl->off_poses;
}

/**
 * lingbot_control_get_offline_rel_poses:
 * @ctl: an offline session
 * @n_frames: (out) (optional): latent frames
 *
 * Returns: (transfer none) (nullable): the whole sequence's relative poses,
 *   float32 [n_frames, 4, 4] (golden `offline_*.poses_rel`).
 */
const float *
lingbot_control_get_offline_rel_poses (const LingbotControl * ctl,
    guint * n_frames)
{
  if (n_frames)
    *n_frames = ctl->offline ? ctl->n_latent : 0;
  return ctl->off_rel;
}

/**
 * lingbot_control_fill:
 * @ctl: a control session after lingbot_control_advance()
 * @out: (out caller-allocates): float32 [384, C, row1-row0, w_lat]
 * @out_len: floats available at @out
 *   (lingbot_control_get_chunk_n_elements())
 * @row0: first latent row (0 for the whole tensor)
 * @row1: end latent row (h_lat for the whole tensor)
 * @error: return location for a #GError
 *
 * Writes the current chunk's control tensor (or its row band) into the
 * caller's buffer; nothing is allocated per chunk.  Spec 2.6-2.7.
 *
 * Returns: %TRUE; %FALSE with %LB_ERROR_INVALID_ARGUMENT before the first
 *   chunk, for a bad band or a short buffer.
 */
gboolean
lingbot_control_fill (LingbotControl * ctl, float *out, gsize out_len,
    int row0, int row1, GError ** error)
{
  if (ctl->chunk < 0) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "control: no chunk yet (call lingbot_control_advance first)");
    return FALSE;
  }
  if (out_len < lingbot_control_get_chunk_n_elements (ctl, row0, row1)) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "control: buffer of %" G_GSIZE_FORMAT " floats is too small for "
        "%" G_GSIZE_FORMAT, out_len,
        lingbot_control_get_chunk_n_elements (ctl, row0, row1));
    return FALSE;
  }
  return pack_impl (ctl->rel, ctl->cfg.chunk_size, ctl->k, ctl->cfg.width,
      ctl->cfg.height, row0, row1, out, ctl->scratch_x, error);
}

/* lingbot-gst: camera control: key names, the key state (taps and the
 * held set) and the per-video-frame camera integration
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot_model_spec.md sections 2.1-2.2; golden README section 3.3.
 */
#include "lingbot/control.h"
#include "lingbot/control-private.h"

#include <math.h>
#include <string.h>

/* No fused multiply-adds: the golden fixtures round every product
 * (control-private.h). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize ("fp-contract=off")
#endif

#define DEG2RAD (G_PI / 180.0)  /* Python's math.radians factor */

/* ------------------------------------------------------------------ */
/* keys                                                               */
/* ------------------------------------------------------------------ */

/* Every name a key arrives under, compared without regard to ASCII case:
 * the browser KeyboardEvent `code` (KeyW, ArrowUp) and `key` ("w", "W",
 * ArrowUp), the X keysym names GstNavigation key events of X/GL/GTK video
 * sinks carry (Up, Down, Left, Right, the keypad's KP_Up ... with
 * NumLock off, w / W), and the service's aliases
 * (lingbot_model_spec.md 2.1).  docs/elements.md, "Keys", lists it. */
static const struct
{
  const char *name;
  guint key;
} key_names[] = {
  {"ArrowUp", LINGBOT_KEY_W}, {"KeyW", LINGBOT_KEY_W}, {"w", LINGBOT_KEY_W},
  {"Up", LINGBOT_KEY_W}, {"KP_Up", LINGBOT_KEY_W}, {"forward", LINGBOT_KEY_W},
  {"ArrowDown", LINGBOT_KEY_S}, {"KeyS", LINGBOT_KEY_S},
  {"s", LINGBOT_KEY_S}, {"Down", LINGBOT_KEY_S}, {"KP_Down", LINGBOT_KEY_S},
  {"backward", LINGBOT_KEY_S},
  {"ArrowLeft", LINGBOT_KEY_A}, {"KeyA", LINGBOT_KEY_A},
  {"a", LINGBOT_KEY_A}, {"Left", LINGBOT_KEY_A}, {"KP_Left", LINGBOT_KEY_A},
  {"ArrowRight", LINGBOT_KEY_D}, {"KeyD", LINGBOT_KEY_D},
  {"d", LINGBOT_KEY_D}, {"Right", LINGBOT_KEY_D}, {"KP_Right", LINGBOT_KEY_D},
  {"KeyI", LINGBOT_KEY_I}, {"i", LINGBOT_KEY_I},
  {"KeyK", LINGBOT_KEY_K}, {"k", LINGBOT_KEY_K},
  {"KeyJ", LINGBOT_KEY_J}, {"j", LINGBOT_KEY_J},
  {"KeyL", LINGBOT_KEY_L}, {"l", LINGBOT_KEY_L},
};

/**
 * lingbot_key_from_name:
 * @name: (nullable): a key name, compared without regard to ASCII case:
 *   a browser KeyboardEvent `code` (KeyW, ArrowUp, ...) or `key` ("w",
 *   "W", ArrowUp, ...), an X keysym name as GstNavigation key events carry
 *   it (Up, Down, Left, Right, w, W, ...), or an alias of the reference
 *   service ("up", "forward", "down", "backward", "left", "right")
 *
 * The whole table is in docs/elements.md ("Keys").  Spec 2.1: the arrow
 * keys are translation (ArrowLeft = a, strafe left, not yaw).
 *
 * Returns: the #LingbotKey bit, or 0 for an unknown name (KeyZZ, Shift,
 *   "", %NULL).
 */
guint
lingbot_key_from_name (const char *name)
{
  if (name == NULL)
    return 0;
  for (guint i = 0; i < G_N_ELEMENTS (key_names); i++)
    if (g_ascii_strcasecmp (name, key_names[i].name) == 0)
      return key_names[i].key;
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
  static const struct
  {
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

/**
 * lingbot_key_state_init:
 * @ks: (out caller-allocates): a key state
 *
 * Clears @ks: nothing held, no tap pending, revisions 0.
 */
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

/**
 * lingbot_camera_reset:
 * @cam: (out caller-allocates): a camera
 *
 * Puts @cam at the origin: c2w the 4x4 identity (row-major), pitch 0.
 */
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
  rnrm = sqrt (right[0] * right[0] + right[1] * right[1] + right[2] * right[2]);
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

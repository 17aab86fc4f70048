/* lingbot-gst: camera control: frame counting and the control session
 * (LingbotControl: live key sets or offline poses -> per-chunk relative
 * poses -> control tensor)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The pieces live beside it: control-keys.c (key names, key state, camera
 * integration), control-poses.c (relative poses, intrinsics,
 * interpolation), control-raymap.c (ray map and packing), control-trace.c
 * (JSON traces and their schedule).
 */
#include "lingbot/control.h"
#include "lingbot/control-private.h"
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
 * Returns: %TRUE on success; %LINGBOT_ERROR_INVALID_ARGUMENT otherwise.
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
lingbot_frame_count_for_duration (double seconds, guint fps, guint chunk_size)
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
/* the control session                                                */
/* ------------------------------------------------------------------ */

/* The chunk index and camera state lingbot_control_advance() moves on
 * (besides the pose buffers): the session's, and the copy saved for
 * lingbot_control_rewind(). */
typedef struct
{
  gint chunk;                   /* current chunk, -1 before the first */
  /* live sessions */
  LingbotCamera cam;
  gboolean initialized;
  gboolean has_previous;
  double previous[16];
} ControlState;

/* What lingbot_control_advance() changes, saved before it for
 * lingbot_control_rewind(). */
typedef struct
{
  gboolean valid;
  ControlState state;
  double *poses;                /* [C, 16] */
  float *rel;                   /* [C, 16] */
} ControlUndo;

struct _LingbotControl
{
  LingbotControlConfig cfg;
  float k[4];                   /* transformed intrinsics */
  gboolean offline;
  ControlState state;

  /* live */
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
      || cfg->width % CONTROL_FOLD || cfg->height % CONTROL_FOLD) {
    g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
        "control: need chunk_size >= 1 and an output size that is a "
        "multiple of %d, got chunk_size %u, %dx%d", CONTROL_FOLD,
        cfg->chunk_size, cfg->width, cfg->height);
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
  c->state.chunk = -1;
  lingbot_camera_reset (&c->state.cam);
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
 * A live (keyboard) control session: integrate each chunk's key set
 * (lingbot_control_advance(); the key sets come from a
 * #LingbotControlSchedule) and fill the chunk's control tensor
 * (lingbot_control_fill()).  Spec 2.1-2.8.
 *
 * Returns: (transfer full): the session, or %NULL with
 *   %LINGBOT_ERROR_INVALID_ARGUMENT for a bad config.
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
 *   %LINGBOT_ERROR_INVALID_ARGUMENT (bad frame count, too few poses, no
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

/**
 * lingbot_control_new_offline_from_files:
 * @cfg: geometry; its intrinsics are replaced by the first row of the
 *   intrinsics file (calibration size from cfg->intrinsics_width/height)
 * @poses_path: poses.npy, [N, 4, 4]
 * @intrinsics_path: (nullable): intrinsics.npy, [4], [1, 4] or [N, 4];
 *   %NULL keeps @cfg's intrinsics (then cfg->has_intrinsics must be set)
 * @frame_num: requested video frames
 * @error: return location for a #GError
 *
 * lingbot_control_new_offline() on the published example files, read by
 * lingbot_poses_load().
 *
 * Returns: (transfer full): the session, or %NULL with @error set (the
 *   errors of lingbot_poses_load() and lingbot_control_new_offline()).
 */
LingbotControl *
lingbot_control_new_offline_from_files (const LingbotControlConfig * cfg,
    const char *poses_path, const char *intrinsics_path, guint frame_num,
    GError ** error)
{
  g_autoptr (LingbotPoses) p = lingbot_poses_load (poses_path,
      intrinsics_path, error);
  LingbotControlConfig c2 = *cfg;

  if (p == NULL)
    return NULL;
  if (p->n_intrinsics > 0) {
    c2.has_intrinsics = TRUE;
    memcpy (c2.intrinsics, p->intrinsics, 4 * sizeof (float));
  }
  return lingbot_control_new_offline (&c2, p->poses, p->n_poses, frame_num,
      error);
}

/**
 * lingbot_control_free:
 * @ctl: (transfer full) (nullable): a control session
 *
 * Frees @ctl and its buffers.
 */
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

/**
 * lingbot_control_is_offline:
 * @ctl: a control session
 *
 * Returns: %TRUE for explicit poses (lingbot_control_new_offline(), a
 *   poses.npy session), %FALSE for keys.
 */
gboolean
lingbot_control_is_offline (const LingbotControl * ctl)
{
  return ctl->offline;
}

/**
 * lingbot_control_get_chunk_size:
 * @ctl: a control session
 *
 * Returns: latent frames per chunk (LingbotControlConfig.chunk_size).
 */
guint
lingbot_control_get_chunk_size (const LingbotControl * ctl)
{
  return ctl->cfg.chunk_size;
}

/**
 * lingbot_control_get_latent_height:
 * @ctl: a control session
 *
 * Returns: latent rows, the output height / 8.
 */
int
lingbot_control_get_latent_height (const LingbotControl * ctl)
{
  return ctl->cfg.height / CONTROL_FOLD;
}

/**
 * lingbot_control_get_latent_width:
 * @ctl: a control session
 *
 * Returns: latent columns, the output width / 8.
 */
int
lingbot_control_get_latent_width (const LingbotControl * ctl)
{
  return ctl->cfg.width / CONTROL_FOLD;
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
  return (gsize) CONTROL_CHANNELS *ctl->cfg.chunk_size *
      (gsize) MAX (row1 - row0, 0) * (gsize) (ctl->cfg.width / CONTROL_FOLD);
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
 * lingbot_control_reset_pose:
 * @ctl: a live control session
 *
 * `reset_pose`: pose back to identity, pitch 0; the next chunk is built
 * like a first chunk (no previous pose).  The keys are not LingbotControl's:
 * the caller's #LingbotControlSchedule clears them when it gets the reset
 * event and reports it as the next chunk's @reset_before.
 */
void
lingbot_control_reset_pose (LingbotControl * ctl)
{
  lingbot_camera_reset (&ctl->state.cam);
  ctl->state.initialized = FALSE;
  ctl->undo.valid = FALSE;      /* a rewind must not undo the reset */
}

static void
compute_live_rel (LingbotControl * c)
{
  guint C = c->cfg.chunk_size, nq = C + (c->state.has_previous ? 1 : 0);
  float *q = c->scratch_q, *r = c->scratch_r;
  float *dst = q;
  float scale = (float) c->cfg.camera.translation_scale;

  if (c->state.has_previous) {
    for (int i = 0; i < 16; i++)
      dst[i] = (float) c->state.previous[i];
    dst += 16;
  }
  for (gsize i = 0; i < 16 * (gsize) C; i++)
    dst[i] = (float) c->poses[i];
  lingbot_control_relative_poses_scratch (q, nq, r, c->scratch_a);
  memcpy (c->rel, r + (c->state.has_previous ? 16 : 0),
      16 * C * sizeof (float));
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
  u->state = c->state;
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
 * Returns: %TRUE; %FALSE with %LINGBOT_ERROR_INVALID_ARGUMENT when an offline
 *   sequence has no chunk left.
 */
gboolean
lingbot_control_advance (LingbotControl * ctl, guint keys, GError ** error)
{
  guint C = ctl->cfg.chunk_size;

  if (ctl->offline) {
    if ((guint) (ctl->state.chunk + 1) >= ctl->n_latent / C) {
      g_set_error (error, LB_ERROR, LB_ERROR_INVALID_ARGUMENT,
          "control: the offline pose sequence has only %u chunks",
          ctl->n_latent / C);
      return FALSE;
    }
    save_undo (ctl);
    ctl->state.chunk++;
    memcpy (ctl->rel, ctl->off_rel + 16 * (gsize) ctl->state.chunk * C,
        16 * C * sizeof (float));
    return TRUE;
  }

  {
    guint first = 0;
    save_undo (ctl);
    ctl->state.has_previous = ctl->state.initialized;
    if (ctl->state.initialized) {
      memcpy (ctl->state.previous, ctl->state.cam.c2w,
          sizeof ctl->state.previous);
    } else {
      memcpy (ctl->poses, ctl->state.cam.c2w, 16 * sizeof (double));
      first = 1;
    }
    for (guint i = first; i < C; i++) {
      for (int s = 0; s < 4; s++)
        lingbot_camera_step (&ctl->state.cam, &ctl->cfg.camera, keys);
      memcpy (ctl->poses + 16 * i, ctl->state.cam.c2w, 16 * sizeof (double));
    }
    ctl->state.initialized = TRUE;
    ctl->state.chunk++;
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
  ctl->state = u->state;
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
  return ctl->state.chunk;
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
  return (!ctl->offline
      && ctl->state.has_previous) ? ctl->state.previous : NULL;
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
  return &ctl->state.cam;
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
lingbot_control_get_offline_poses (const LingbotControl * ctl, guint * n_frames)
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
 * Returns: %TRUE; %FALSE with %LINGBOT_ERROR_INVALID_ARGUMENT before the first
 *   chunk, for a bad band or a short buffer.
 */
gboolean
lingbot_control_fill (LingbotControl * ctl, float *out, gsize out_len,
    int row0, int row1, GError ** error)
{
  if (ctl->state.chunk < 0) {
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
  return lingbot_control_pack_scratch (ctl->rel, ctl->cfg.chunk_size, ctl->k,
      ctl->cfg.width, ctl->cfg.height, row0, row1, out, ctl->scratch_x, error);
}

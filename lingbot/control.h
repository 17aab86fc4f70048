/* lingbot-gst: camera control (keyboard -> poses -> ray map -> control
 * tensor), offline poses, frame counting, control traces and the schedule
 * that turns key events into one key set per chunk
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot_model_spec.md sections 2 and 3.1; golden README section 3.
 * Sources: control-keys.c (key names, key state, camera integration),
 * control-poses.c (relative poses, intrinsics, interpolation, the pose
 * loader), control-raymap.c (ray map, packing), control.c (frame counting,
 * LingbotControl), control-trace.c (JSON traces), control-schedule.c
 * (LingbotControlSchedule).
 *
 * Pose matrices are 4x4 row-major camera-to-world matrices in the OpenCV
 * convention (x right, y down, z forward), passed as 16 contiguous values.
 * The control tensor of one chunk is float32 [384, C, h_lat, w_lat] (the
 * reference's [1, 384, C, h_lat, w_lat] without the batch dimension) with
 * channel `c*64 + r*8 + s` holding ray-map channel c (origin x, y, z,
 * direction x, y, z) of pixel (8*y + r, 8*x + s).
 */
#pragma once

#include <glib.h>
#include <stdint.h>

G_BEGIN_DECLS

/* Channels of the control tensor: 6 ray-map channels x the 8x8 pixels of
 * a latent cell (spec 2.7).  The DiT's camera patch embedding takes
 * LINGBOT_CONTROL_CHANNELS x 4 (its 1x2x2 patch) input features. */
#define LINGBOT_CONTROL_CHANNELS 384

/* ---- frame counting (spec 3.1) ---- */

/**
 * LingbotFramePolicy:
 * @LINGBOT_FRAME_POLICY_TRUNCATE: drop latent frames that do not fill a
 *   whole chunk
 * @LINGBOT_FRAME_POLICY_STRICT: such frames are an error
 */
typedef enum
{
  LINGBOT_FRAME_POLICY_TRUNCATE,
  LINGBOT_FRAME_POLICY_STRICT,
} LingbotFramePolicy;

gboolean lingbot_frame_count_resolve (guint frame_num, guint chunk_size,
    LingbotFramePolicy policy, guint * effective_frame_num,
    guint * latent_frames, GError ** error);
guint lingbot_frame_count_for_duration (double seconds, guint fps,
    guint chunk_size);
guint lingbot_chunk_video_frames (guint chunk_index, guint chunk_size);

/* ---- keys (spec 2.1) ---- */

/**
 * LingbotKey:
 * @LINGBOT_KEY_W: move forward (ArrowUp, KeyW, w, Up, forward)
 * @LINGBOT_KEY_A: strafe left (ArrowLeft, KeyA, a, Left)
 * @LINGBOT_KEY_S: move backward (ArrowDown, KeyS, s, Down, backward)
 * @LINGBOT_KEY_D: strafe right (ArrowRight, KeyD, d, Right)
 * @LINGBOT_KEY_I: pitch up (KeyI, i)
 * @LINGBOT_KEY_J: yaw left (KeyJ, j)
 * @LINGBOT_KEY_K: pitch down (KeyK, k)
 * @LINGBOT_KEY_L: yaw right (KeyL, l)
 *
 * Control bits; the values are the golden fixtures' key-bit encoding.
 * Names are matched without regard to case (lingbot_key_from_name(); the
 * table is in docs/elements.md, "Keys").
 */
typedef enum
{
  LINGBOT_KEY_W = 1 << 0,
  LINGBOT_KEY_A = 1 << 1,
  LINGBOT_KEY_S = 1 << 2,
  LINGBOT_KEY_D = 1 << 3,
  LINGBOT_KEY_I = 1 << 4,
  LINGBOT_KEY_J = 1 << 5,
  LINGBOT_KEY_K = 1 << 6,
  LINGBOT_KEY_L = 1 << 7,
} LingbotKey;

/**
 * LINGBOT_KEYS_ALL:
 *
 * Every #LingbotKey bit: a %LINGBOT_CONTROL_EVENT_RELEASE of it releases
 * every held key (the trace action "reset").
 */
#define LINGBOT_KEYS_ALL 0xffu

guint lingbot_key_from_name (const char *name);
char *lingbot_keys_to_string (guint keys);

/**
 * LingbotKeyState:
 * @held: the keys held now
 * @tap: the held set stored by the last press not yet consumed
 * @has_tap: whether @tap is pending
 * @revision: presses seen so far (a tap's revision)
 * @tap_revision: revision of the pending tap
 *
 * The streaming service's key semantics (golden README 3.3): a press of a
 * key not held adds it and stores a tap snapshot of the held set (a newer
 * tap replaces an unconsumed one); a release removes the key.  A chunk takes
 * a pending tap first, else (only when idle) the held set.
 */
typedef struct
{
  guint held;
  guint tap;
  gboolean has_tap;
  guint revision;
  guint tap_revision;
} LingbotKeyState;

void lingbot_key_state_init (LingbotKeyState * ks);
void lingbot_key_state_press (LingbotKeyState * ks, guint keys);
void lingbot_key_state_release (LingbotKeyState * ks, guint keys);
gboolean lingbot_key_state_take (LingbotKeyState * ks, gboolean idle,
    guint * keys, gboolean * is_tap);

/* ---- per-video-frame camera integration (spec 2.2) ---- */

/**
 * LingbotCameraParams:
 * @move_step: forward/backward step per video frame (world units)
 * @lateral_step: strafe step per video frame
 * @yaw_step_degrees: yaw per video frame
 * @pitch_step_degrees: pitch per video frame
 * @pitch_limit_degrees: |pitch| limit
 * @translation_scale: factor on the normalised relative translations
 *   handed to the DiT (live path only)
 *
 * lingbot_camera_params_init() gives the v2 example values (0.1, 0.1,
 * 0.5, 0.5, 85, 3).
 */
typedef struct
{
  double move_step;
  double lateral_step;
  double yaw_step_degrees;
  double pitch_step_degrees;
  double pitch_limit_degrees;
  double translation_scale;
} LingbotCameraParams;

void lingbot_camera_params_init (LingbotCameraParams * params);

/**
 * LingbotCamera:
 * @c2w: camera-to-world matrix (float64, row-major)
 * @pitch: accumulated pitch in radians
 */
typedef struct
{
  double c2w[16];
  double pitch;
} LingbotCamera;

void lingbot_camera_reset (LingbotCamera * cam);
void lingbot_camera_step (LingbotCamera * cam,
    const LingbotCameraParams * params, guint keys);

/* ---- pose and ray-map math (spec 2.4-2.7, 2.9) ---- */

void lingbot_control_relative_poses (const float *poses, guint n, float *out);
void lingbot_control_intrinsics_transform (const float k[4], int calib_width,
    int calib_height, int width, int height, float out[4]);
void lingbot_control_plucker (const float *rel_poses, guint n_frames,
    const float k[4], int width, int height, float *out);
gboolean lingbot_control_pack (const float *rel_poses, guint n_frames,
    const float k[4], int width, int height, int row0, int row1, float *out,
    GError ** error);
void lingbot_control_interpolate_poses (const float *poses, guint n_src,
    guint n_out, float *out);

/* ---- offline poses from files (control-poses.c) ---- */

/**
 * LingbotPoses:
 * @poses: float32 [@n_poses, 4, 4] camera-to-world matrices, row-major
 * @n_poses: number of poses (>= 1)
 * @intrinsics: (nullable): float32 [@n_intrinsics, 4]: fx, fy, cx, cy in
 *   pixels at the calibration size
 * @n_intrinsics: 0 (no intrinsics file), 1, or @n_poses
 *
 * An offline camera path as lingbot_poses_load() reads it; owns its arrays.
 */
typedef struct
{
  float *poses;
  guint n_poses;
  float *intrinsics;
  guint n_intrinsics;
} LingbotPoses;

LingbotPoses *lingbot_poses_load (const char *poses_path,
    const char *intrinsics_path, GError ** error);
void lingbot_poses_free (LingbotPoses * poses);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotPoses, lingbot_poses_free)
/* ---- the control session ---- */
/**
 * LingbotControlConfig:
 * @chunk_size: latent frames per chunk (4)
 * @width: output video width (multiple of 8)
 * @height: output video height (multiple of 8)
 * @image_width: original image width (default intrinsics)
 * @image_height: original image height
 * @has_intrinsics: whether @intrinsics is given
 * @intrinsics: fx, fy, cx, cy at the calibration size (first row of a file)
 * @intrinsics_width: calibration width (832 for the bundled data)
 * @intrinsics_height: calibration height (480)
 * @camera: integration step sizes and the live translation scale
 *
 * Without intrinsics, fx = fy = @image_width, cx = @image_width/2,
 * cy = @image_height/2 calibrated at the image size (spec 2.5).
 */
typedef struct
{
  guint chunk_size;
  int width;
  int height;
  int image_width;
  int image_height;
  gboolean has_intrinsics;
  float intrinsics[4];
  int intrinsics_width;
  int intrinsics_height;
  LingbotCameraParams camera;
} LingbotControlConfig;

void lingbot_control_config_init (LingbotControlConfig * cfg,
    int image_width, int image_height, int width, int height);

typedef struct _LingbotControl LingbotControl;

LingbotControl *lingbot_control_new (const LingbotControlConfig * cfg,
    GError ** error);
LingbotControl *lingbot_control_new_offline (const LingbotControlConfig *
    cfg, const float *poses, guint n_poses, guint frame_num, GError ** error);
LingbotControl *lingbot_control_new_offline_from_files (const
    LingbotControlConfig * cfg, const char *poses_path,
    const char *intrinsics_path, guint frame_num, GError ** error);
void lingbot_control_free (LingbotControl * ctl);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotControl, lingbot_control_free)
gboolean lingbot_control_is_offline (const LingbotControl * ctl);
guint lingbot_control_get_chunk_size (const LingbotControl * ctl);
int lingbot_control_get_latent_height (const LingbotControl * ctl);
int lingbot_control_get_latent_width (const LingbotControl * ctl);
gsize lingbot_control_get_chunk_n_elements (const LingbotControl * ctl,
    int row0, int row1);
void lingbot_control_get_intrinsics (const LingbotControl * ctl, float k[4]);

void lingbot_control_reset_pose (LingbotControl * ctl);

gboolean lingbot_control_advance (LingbotControl * ctl, guint keys,
    GError ** error);
void lingbot_control_rewind (LingbotControl * ctl);
gint lingbot_control_get_chunk_index (const LingbotControl * ctl);
guint lingbot_control_get_n_chunks (const LingbotControl * ctl);
const double *lingbot_control_get_chunk_poses (const LingbotControl * ctl);
const double *lingbot_control_get_previous_pose (const LingbotControl * ctl);
const float *lingbot_control_get_chunk_rel_poses (const LingbotControl * ctl);
const LingbotCamera *lingbot_control_get_camera (const LingbotControl * ctl);
const float *lingbot_control_get_offline_poses (const LingbotControl * ctl,
    guint * n_frames);
const float *lingbot_control_get_offline_rel_poses (const LingbotControl *
    ctl, guint * n_frames);
gboolean lingbot_control_fill (LingbotControl * ctl, float *out,
    gsize out_len, int row0, int row1, GError ** error);

/* ---- control traces (control-trace.c) ---- */

/**
 * LingbotControlEventType:
 * @LINGBOT_CONTROL_EVENT_PRESS: keys went down
 * @LINGBOT_CONTROL_EVENT_RELEASE: keys went up (%LINGBOT_KEYS_ALL: every
 *   key, the trace action "reset"; the pose and a pending tap stay)
 * @LINGBOT_CONTROL_EVENT_RESET: `reset_pose`: pose to identity, pitch 0,
 *   keys and pending tap cleared; the next chunk is a first chunk again
 */
typedef enum
{
  LINGBOT_CONTROL_EVENT_PRESS,
  LINGBOT_CONTROL_EVENT_RELEASE,
  LINGBOT_CONTROL_EVENT_RESET,
} LingbotControlEventType;

/**
 * LingbotControlEvent:
 * @time_s: seconds from the session start (`delay_s`)
 * @type: what happened
 * @key: the #LingbotKey bits (one bit from a trace, %LINGBOT_KEYS_ALL for
 *   the action "reset", 0 for a reset_pose)
 */
typedef struct
{
  double time_s;
  LingbotControlEventType type;
  guint key;
} LingbotControlEvent;

typedef struct _LingbotControlTrace LingbotControlTrace;

LingbotControlTrace *lingbot_control_trace_new_from_data (const char *data,
    gssize length, GError ** error);
LingbotControlTrace *lingbot_control_trace_new_from_file (const char *path,
    GError ** error);
void lingbot_control_trace_free (LingbotControlTrace * trace);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotControlTrace, lingbot_control_trace_free)
const LingbotControlEvent *lingbot_control_trace_get_events (const
    LingbotControlTrace * trace, guint * n_events);
const char *const *lingbot_control_trace_get_warnings (const
    LingbotControlTrace * trace);

/* ---- the control schedule (control-schedule.c) ---- */

/**
 * LingbotScheduleChunk:
 * @keys: the key set the chunk is built from
 * @is_tap: %TRUE for a tap snapshot, %FALSE for the held set (or no key)
 * @reset_before: a reset (reset_pose) was applied since the previous chunk
 * @request_time_s: when the chunk was requested (virtual clock; NAN for a
 *   live chunk)
 * @start_time_s: when its generation started (virtual clock)
 * @end_time_s: when it finished (start + its playback duration)
 * @revision: presses applied so far (one per newly held key; a tap's own
 *   revision; not restarted by resets)
 * @index: the chunk's index in the session (0-based)
 *
 * One chunk's decision (lingbot_control_schedule_next(),
 * lingbot_control_schedule_take_live(), lingbot_control_trace_schedule()).
 */
typedef struct
{
  guint keys;
  gboolean is_tap;
  gboolean reset_before;
  double request_time_s;
  double start_time_s;
  double end_time_s;
  guint revision;
  guint index;
} LingbotScheduleChunk;

/**
 * LingbotTraceChunk:
 *
 * The older name of #LingbotScheduleChunk
 * (lingbot_control_trace_schedule()).
 */
typedef LingbotScheduleChunk LingbotTraceChunk;

/**
 * LingbotScheduleStatus:
 * @LINGBOT_SCHEDULE_CHUNK: the next chunk is decided
 * @LINGBOT_SCHEDULE_WAIT: not decidable yet: it depends on events not
 *   pushed yet (push more, move the horizon, or end)
 * @LINGBOT_SCHEDULE_ENDED: the events ended with nothing held; the chunk
 *   returned is the no-key chunk that follows them
 */
typedef enum
{
  LINGBOT_SCHEDULE_CHUNK,
  LINGBOT_SCHEDULE_WAIT,
  LINGBOT_SCHEDULE_ENDED,
} LingbotScheduleStatus;

typedef struct _LingbotControlSchedule LingbotControlSchedule;

LingbotControlSchedule *lingbot_control_schedule_new (guint chunk_size,
    guint fps_n, guint fps_d, GError ** error);
void lingbot_control_schedule_free (LingbotControlSchedule * sched);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (LingbotControlSchedule,
    lingbot_control_schedule_free)
void lingbot_control_schedule_reset (LingbotControlSchedule * sched);
gboolean lingbot_control_schedule_set_timing (LingbotControlSchedule *
    sched, guint chunk_size, guint fps_n, guint fps_d, GError ** error);

gboolean lingbot_control_schedule_push (LingbotControlSchedule * sched,
    const LingbotControlEvent * event);
void lingbot_control_schedule_set_horizon (LingbotControlSchedule * sched,
    double time_s);
void lingbot_control_schedule_end (LingbotControlSchedule * sched);
gboolean lingbot_control_schedule_is_ended (const LingbotControlSchedule *
    sched);
guint lingbot_control_schedule_get_n_queued (const LingbotControlSchedule *
    sched);

LingbotScheduleStatus lingbot_control_schedule_next (LingbotControlSchedule
    * sched, LingbotScheduleChunk * out);
gboolean lingbot_control_schedule_take_live (LingbotControlSchedule *
    sched, LingbotScheduleChunk * out);
gboolean lingbot_control_schedule_peek_live (const LingbotControlSchedule *
    sched, LingbotScheduleChunk * out);
gboolean lingbot_control_schedule_retake_live (LingbotControlSchedule *
    sched, LingbotScheduleChunk * out);

guint lingbot_control_trace_schedule (const LingbotControlTrace * trace,
    guint n_chunks, guint chunk_size, guint fps, LingbotTraceChunk * out);

G_END_DECLS

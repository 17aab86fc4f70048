/* lingbot-gst: lingbotcontrolsrc, where control comes from
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gst/gst.h>
#include <gst/base/gstpushsrc.h>
#include "lingbot/lingbot.h"

G_BEGIN_DECLS

/**
 * GST_LINGBOT_CONTROL_CAPS:
 *
 * The control stream: a sequence of #GstLingbotControlRecord, one per
 * buffer, PTS = the event's session time (trace `delay_s`, or the running
 * time at which a live event arrived).  `poses=true` announces that the
 * first record is a %GST_LINGBOT_CONTROL_POSES record.
 */
#define GST_LINGBOT_CONTROL_MEDIA_TYPE "application/x-lingbot-control"
#define GST_LINGBOT_CONTROL_CAPS GST_LINGBOT_CONTROL_MEDIA_TYPE \
    ", version = (int) 1"

#define GST_LINGBOT_CONTROL_MAGIC 0x3143424cu   /* "LBC1" little endian */

/**
 * GstLingbotControlRecordType:
 * @GST_LINGBOT_CONTROL_PRESS: @keys went down
 * @GST_LINGBOT_CONTROL_RELEASE: @keys went up (the trace action "reset",
 *   every key up, is one RELEASE of the keys held then: @keys = the held
 *   set before it, possibly 0, @held = 0)
 * @GST_LINGBOT_CONTROL_RESET: reset_pose: identity pose, keys cleared
 * @GST_LINGBOT_CONTROL_POSES: explicit camera poses follow the header
 *   (#GstLingbotControlPoses, then n_poses * 16 float c2w row-major, then
 *   n_intrinsics * 4 float fx, fy, cx, cy)
 */
typedef enum
{
  GST_LINGBOT_CONTROL_PRESS = 1,
  GST_LINGBOT_CONTROL_RELEASE = 2,
  GST_LINGBOT_CONTROL_RESET = 3,
  GST_LINGBOT_CONTROL_POSES = 4,
} GstLingbotControlRecordType;

/**
 * GstLingbotControlRecord:
 * @magic: %GST_LINGBOT_CONTROL_MAGIC
 * @type: a #GstLingbotControlRecordType
 * @flags: 0 (reserved)
 * @keys: the #LingbotKey bits pressed or released
 * @held: the keys held after this record (informative)
 * @time_ns: the session time of the event in nanoseconds (= the PTS)
 * @payload_size: bytes after the 32-byte header (POSES only)
 * @reserved: 0
 *
 * One control record, 32 bytes in host byte order (the stream never
 * leaves the process).
 */
typedef struct
{
  guint32 magic;
  guint16 type;
  guint16 flags;
  guint32 keys;
  guint32 held;
  guint64 time_ns;
  guint32 payload_size;
  guint32 reserved;
} GstLingbotControlRecord;

/**
 * GstLingbotControlPoses:
 * @n_poses: camera-to-world matrices that follow (>= 1)
 * @n_intrinsics: intrinsics rows after them: 0 (no intrinsics-location),
 *   1 (a [4] or [1, 4] file) or @n_poses (lingbot_poses_load())
 * @intrinsics_width: calibration width of the intrinsics
 * @intrinsics_height: calibration height
 *
 * The payload header of a POSES record.
 */
typedef struct
{
  guint32 n_poses;
  guint32 n_intrinsics;
  gint32 intrinsics_width;
  gint32 intrinsics_height;
} GstLingbotControlPoses;

G_STATIC_ASSERT (sizeof (GstLingbotControlRecord) == 32);
G_STATIC_ASSERT (sizeof (GstLingbotControlPoses) == 16);

#define GST_TYPE_LINGBOT_CONTROL_SRC (gst_lingbot_control_src_get_type ())
G_DECLARE_FINAL_TYPE (GstLingbotControlSrc, gst_lingbot_control_src,
    GST, LINGBOT_CONTROL_SRC, GstPushSrc)
GST_ELEMENT_REGISTER_DECLARE (lingbotcontrolsrc);

G_END_DECLS

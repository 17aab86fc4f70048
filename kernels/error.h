/* lingbot-gst: error domain shared by every layer
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define LB_ERROR (lb_error_quark ())
GQuark lb_error_quark (void);

/**
 * LbError:
 * @LB_ERROR_INVALID_ARGUMENT: a caller passed something that cannot work
 * @LB_ERROR_SHAPE: tensor shapes or dtypes do not match what an op or a
 *   model config expects; the message names the tensor and both shapes
 * @LB_ERROR_IO: a file could not be opened, mapped or read
 * @LB_ERROR_FORMAT: a file is truncated, corrupt or not of the expected format
 * @LB_ERROR_NOT_FOUND: a named tensor, key or file is missing
 * @LB_ERROR_UNSUPPORTED: valid input that this build cannot handle
 * @LB_ERROR_DEVICE: a device or backend call failed
 * @LB_ERROR_CANCELLED: the operation was cancelled (flush, session end)
 * @LB_ERROR_TIMEOUT: a wait ran past its deadline
 * @LB_ERROR_RANK_FAILED: another rank of the worker group failed
 */
typedef enum
{
  LB_ERROR_INVALID_ARGUMENT,
  LB_ERROR_SHAPE,
  LB_ERROR_IO,
  LB_ERROR_FORMAT,
  LB_ERROR_NOT_FOUND,
  LB_ERROR_UNSUPPORTED,
  LB_ERROR_DEVICE,
  LB_ERROR_CANCELLED,
  LB_ERROR_TIMEOUT,
  LB_ERROR_RANK_FAILED,
} LbError;

G_END_DECLS

/* lingbot-gst: an emulated device backend for tests (no GPU needed)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include "kernels/backend.h"

G_BEGIN_DECLS

/**
 * FakeDevStats:
 * @bad: calls refused (wrong residency, wrong copy kind, overlapping
 *   device copy, unknown free); a correct program keeps it at 0
 * @n_h2d: host-to-device copies
 * @n_d2h: device-to-host copies
 * @n_d2d: device-to-device copies
 * @n_ops: op calls
 * @live_blocks: device allocations not yet freed
 */
typedef struct {
  int bad;
  int n_h2d, n_d2h, n_d2d, n_ops;
  int live_blocks;
} FakeDevStats;

LbBackend *fakedev_backend (void);
FakeDevStats fakedev_stats (void);
gboolean fakedev_is_device (const void *p, gsize n);

G_END_DECLS

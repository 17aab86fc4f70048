/* lingbot-gst: fuzz harness of the control trace JSON (tests/fuzz)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot_control_trace_new_from_data() on the input; a trace it accepts
 * is scheduled onto 64 chunks of 4 frames at 16 fps.
 */
#include "fuzz-common.h"

#include "lingbot/control.h"

int
LLVMFuzzerTestOneInput (const uint8_t * data, size_t size)
{
  g_autoptr (GError) err = NULL;
  g_autoptr (LingbotControlTrace) t = NULL;
  LingbotTraceChunk chunks[64];
  guint n = 0;

  t = lingbot_control_trace_new_from_data ((const char *) data,
      (gssize) size, &err);
  fuzz_report (err);
  if (t == NULL) {
    g_assert (err != NULL);
    return 0;
  }
  lingbot_control_trace_get_events (t, &n);
  lingbot_control_trace_get_warnings (t);
  lingbot_control_trace_schedule (t, G_N_ELEMENTS (chunks), 4, 16, chunks);
  return 0;
}

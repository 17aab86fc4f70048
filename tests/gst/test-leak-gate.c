/* lingbot-gst: the leak gate's own check
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Run in-process (CK_FORK=no) under the leaks tracer, as the `leaks`
 * suite runs the element tests: with LINGBOT_TEST_LEAK=1 this test keeps
 * a buffer and an element alive, and the run must fail (gst-check fails
 * when the tracer reports objects alive at gst_deinit()); without it,
 * everything is released and the run must pass.
 */
#include <gst/check/gstcheck.h>

GST_START_TEST (test_leak_or_not)
{
  GstBuffer *buf = gst_buffer_new_allocate (NULL, 64, NULL);
  GstElement *e = gst_element_factory_make ("fakesink", NULL);
  fail_unless (buf != NULL && e != NULL);
  if (g_strcmp0 (g_getenv ("LINGBOT_TEST_LEAK"), "1") != 0) {
    gst_buffer_unref (buf);
    gst_object_unref (e);
  }
}

GST_END_TEST;

static Suite *
leak_gate_suite (void)
{
  Suite *s = suite_create ("lingbot-leak-gate");
  TCase *tc = tcase_create ("general");
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_leak_or_not);
  return s;
}

GST_CHECK_MAIN (leak_gate);

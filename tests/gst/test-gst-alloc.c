/* lingbot-gst: lingbotgen with a session too large for the memory
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Issue 3.1 item 4 at the element level: under a lowered RLIMIT_AS a
 * lingbotgen whose width x height cannot be held posts an ERROR naming the
 * buffer and its bytes, instead of aborting the process, while another
 * pipeline of the same process (as the WebRTC server runs one per viewer)
 * generates to its end.  A process of its own (the limit stays until it
 * exits; test-gst forks nothing, CK_FORK=no).  Skipped (77) under a
 * sanitizer or valgrind, which reserve address space of their own.
 */
#include <gst/gst.h>

#include "test-fixture.h"
#include "test-rlimit.h"

/* the address space left to the process above what it uses */
#define MARGIN ((guint64) 448 << 20)
#define SMALL_FRAMES 45         /* 3 chunks: 13 + 16 + 16 */

static char *tmpdir, *model_dir, *embeds_path, *image_path;

static void
on_handoff (GstElement * sink, GstBuffer * buf, GstPad * pad, gpointer data)
{
  g_atomic_int_inc ((gint *) data);
}

/* lingbotgen ! lingbotvaedec ! fakesink at @size x @size for @frames
 * frames, counting those that reach the sink into @count */
static GstElement *
pipeline_new (int size, int frames, gint * count)
{
  g_autoptr (GError) err = NULL;
  g_autofree char *desc = g_strdup_printf ("lingbotgen name=gen "
      "model-path=%s prompt-embeds=%s image-location=%s width=%d height=%d "
      "frames=%d devices=cpu:1 seed=7 ! lingbotvaedec ! "
      "fakesink name=sink sync=false signal-handoffs=true", model_dir,
      embeds_path, image_path, size, size, frames);
  GstElement *p = gst_parse_launch (desc, &err);
  g_assert_no_error (err);
  GstElement *sink = gst_bin_get_by_name (GST_BIN (p), "sink");
  g_signal_connect (sink, "handoff", G_CALLBACK (on_handoff), count);
  gst_object_unref (sink);
  return p;
}

/* waits for EOS or ERROR (hang guard: 120 s); returns the error, which
 * lingbotgen posted, or NULL at EOS */
static GError *
pipeline_wait (GstElement * p)
{
  g_autoptr (GstBus) bus = gst_element_get_bus (p);
  g_autoptr (GstMessage) m = gst_bus_timed_pop_filtered (bus,
      120 * GST_SECOND, GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  GError *err = NULL;
  g_assert_nonnull (m);
  if (GST_MESSAGE_TYPE (m) == GST_MESSAGE_ERROR) {
    gst_message_parse_error (m, &err, NULL);
    g_assert_cmpstr (GST_OBJECT_NAME (GST_MESSAGE_SRC (m)), ==, "gen");
  }
  return err;
}

static void
run_small (int frames)
{
  gint count = 0;
  GstElement *p = pipeline_new (64, frames, &count);
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_PLAYING), !=,
      GST_STATE_CHANGE_FAILURE);
  GError *err = pipeline_wait (p);
  g_assert_no_error (err);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (p);
  g_assert_cmpint (count, ==, frames);
}

static void
test_too_large (void)
{
  /* threads (streaming, ranks, OpenMP, OpenBLAS) started before the
   * limit */
  run_small (13);

  if (!lingbot_test_rlimit_lower (MARGIN))
    return;

  /* a small pipeline generating while the large one fails */
  gint small_count = 0, big_count = 0;
  GstElement *small = pipeline_new (64, SMALL_FRAMES, &small_count);
  /* the largest size lingbotgen takes: the resized image (201 MB) fits,
   * the decoded frames of a chunk (3.2 GB) do not */
  GstElement *big = pipeline_new (4096, 13, &big_count);
  g_assert_cmpint (gst_element_set_state (small, GST_STATE_PLAYING), !=,
      GST_STATE_CHANGE_FAILURE);
  gst_element_set_state (big, GST_STATE_PLAYING);

  GError *err = pipeline_wait (big);
  g_assert_error (err, GST_STREAM_ERROR, GST_STREAM_ERROR_FAILED);
  g_assert_cmpstr (err->message, ==, "session: decoded frames f32 [3, 16, "
      "4096, 4096]: cannot allocate 3221225472 bytes of host memory");
  g_clear_error (&err);
  gst_element_set_state (big, GST_STATE_NULL);
  gst_object_unref (big);
  g_assert_cmpint (big_count, ==, 0);

  err = pipeline_wait (small);
  g_assert_no_error (err);
  gst_element_set_state (small, GST_STATE_NULL);
  gst_object_unref (small);
  g_assert_cmpint (small_count, ==, SMALL_FRAMES);

  /* and another after it */
  run_small (13);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (!lingbot_test_rlimit_init ())
    return 77;
  gst_init (&argc, &argv);
  tmpdir = lingbot_test_write_fixture ("lingbot-gst-alloc-XXXXXX",
      &model_dir, &embeds_path, &image_path);

  g_test_add_func ("/gst-alloc/too-large", test_too_large);
  int rc = g_test_run ();

  lingbot_test_rm_rf (tmpdir);
  g_free (tmpdir);
  g_free (model_dir);
  g_free (embeds_path);
  g_free (image_path);
  return rc;
}

/* lingbot-gst: the start image the GStreamer-level tests share (the tiny
 * model and prompt embeddings are in test-model.c)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "test-fixture.h"

#include <gst/gst.h>

/* DIR/start.jpg: an 80x48 SMPTE bars JPEG.  Returns its path. */
char *
lingbot_test_write_start_jpeg (const char *dir)
{
  g_autoptr (GError) err = NULL;
  char *path = g_build_filename (dir, "start.jpg", NULL);
  g_autofree char *desc = g_strdup_printf ("videotestsrc num-buffers=1 "
      "pattern=smpte ! video/x-raw,width=80,height=48 ! jpegenc ! "
      "filesink location=%s", path);
  GstElement *p = gst_parse_launch (desc, &err);
  GstMessage *msg;

  g_assert_no_error (err);
  gst_element_set_state (p, GST_STATE_PLAYING);
  msg = gst_bus_timed_pop_filtered (GST_ELEMENT_BUS (p), 10 * GST_SECOND,
      GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  g_assert_nonnull (msg);
  g_assert_cmpint (GST_MESSAGE_TYPE (msg), ==, GST_MESSAGE_EOS);
  gst_message_unref (msg);
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (p);
  return path;
}

/* A new temporary folder named after @tmpl (g_dir_make_tmp()) with the
 * tiny model (lingbot_test_write_model()), the prompt embeddings of
 * "a castle" and the start JPEG in it: their paths in @model_dir,
 * @embeds_path and @image_path (free them; lingbot_test_rm_rf() the
 * folder).  Returns the folder. */
char *
lingbot_test_write_fixture (const char *tmpl, char **model_dir,
    char **embeds_path, char **image_path)
{
  g_autoptr (GError) err = NULL;
  char *dir = g_dir_make_tmp (tmpl, &err);

  g_assert_no_error (err);
  *model_dir = lingbot_test_write_model (dir);
  *embeds_path = lingbot_test_write_prompt_embeds (dir, "a castle");
  *image_path = lingbot_test_write_start_jpeg (dir);
  return dir;
}

/* lingbot-gst: lingbotbin and the embedding example (examples/embed.c)
 * (test `gst-bin`, suites gst, elements, pipeline)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The fixture and the pipeline runner: test-gst-common.c.
 */
#include <stdio.h>
#include "test-gst-common.h"

GST_START_TEST (test_embed_example)
{
  const char *exe = g_getenv ("LINGBOT_EMBED_EXAMPLE");
  g_autoptr (GError) err = NULL;
  g_autofree char *out = NULL, *errout = NULL;
  int status = 0;
  const char *argv[] = { exe, model_dir, image_path, embeds_path, "64",
    "64", NULL
  };

  if (exe == NULL)
    return;
  g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, 0, NULL, NULL,
          &out, &errout, &status, &err));
  g_assert_no_error (err);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("embed example failed:\n%s\n%s", out, errout);
  /* 29 frames made: shown, or dropped when the key change ended the chunk
   * on screen early (lingbotgen key-cut; none when the session is slower
   * than real time) */
  {
    const char *line = strstr (out, "frames: ");
    guint shown = 0, cut = 0;

    g_assert_nonnull (line);
    g_assert_cmpint (sscanf (line, "frames: %u shown, %u cut", &shown, &cut),
        ==, 2);
    g_assert_cmpuint (shown + cut, ==, 29);
    /* at least the first frame of chunk 0, and chunk 1 but its first */
    g_assert_cmpuint (shown, >=, 1 + 15);
  }
}

GST_END_TEST;

/* lingbotbin with nothing linked to its ghost `control` pad: no control,
 * no waiting (as an unlinked lingbotgen) */
GST_START_TEST (test_bin_unlinked_control)
{
  g_autofree char *gb = gen_desc ("lingbotbin", "cpu:1", NULL);
  g_autofree char *desc = g_strdup_printf ("%s ! appsink name=sink "
      "sync=false", gb);
  Run r;
  GstElement *p = pipeline_new (desc, &r);

  fail_unless (pipeline_run (p, &r) != GST_STATE_CHANGE_FAILURE);
  gst_object_unref (p);
  g_assert_cmpstr (r.error, ==, NULL);
  g_assert_true (r.eos);
  g_assert_cmpuint (r.samples->len, ==, N_FRAMES);
  g_assert_cmpuint (r.chunk_keys->len, ==, 2);
  g_assert_cmphex (g_array_index (r.chunk_keys, guint, 0), ==, 0);
  g_assert_cmphex (g_array_index (r.chunk_keys, guint, 1), ==, 0);
  run_clear (&r);
}

GST_END_TEST;

static Suite *
lingbot_gst_bin_suite (void)
{
  Suite *s = suite_create ("lingbot-gst");
  TCase *tc = tcase_create ("general");

  tcase_set_timeout (tc, 120);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_embed_example);
  tcase_add_test (tc, test_bin_unlinked_control);
  return s;
}

int
main (int argc, char **argv)
{
  return test_gst_main (&argc, &argv, lingbot_gst_bin_suite, __FILE__);
}

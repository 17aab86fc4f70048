/* lingbot-gst: the tiny model and inputs the GStreamer-level tests share
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

char *lingbot_test_write_model (const char *dir);
char *lingbot_test_write_prompt_embeds (const char *dir, const char *prompt);
char *lingbot_test_write_start_jpeg (const char *dir);
void lingbot_test_rm_rf (const char *path);
void lingbot_test_fill_image (guint8 * rgb, int width, int height);
char *lingbot_test_write_fixture (const char *tmpl, char **model_dir,
    char **embeds_path, char **image_path);

G_END_DECLS

/* lingbot-gst: the JSON lines the command-line tools print, written by
 * json-glib (strings escaped, numbers as JSON has them)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Static inline functions, as in tool-common.h: every tool is an
 * executable of its own, with no library of the tools to link.
 */
#pragma once

#include <json-glib/json-glib.h>
#include <math.h>
#include <stdio.h>

G_BEGIN_DECLS

/**
 * lingbot_json_int:
 * @b: a #JsonBuilder inside an object
 * @name: the member name
 * @v: its value
 *
 * Adds the member @name = @v (an integer).
 */
static inline void
lingbot_json_int (JsonBuilder * b, const char *name, gint64 v)
{
  json_builder_set_member_name (b, name);
  json_builder_add_int_value (b, v);
}

/**
 * lingbot_json_double:
 * @b: a #JsonBuilder inside an object
 * @name: the member name
 * @v: its value
 *
 * Adds the member @name = @v (a number; 0 for a NaN or an infinity, which
 * JSON cannot hold).
 */
static inline void
lingbot_json_double (JsonBuilder * b, const char *name, double v)
{
  json_builder_set_member_name (b, name);
  json_builder_add_double_value (b, isfinite (v) ? v : 0.0);
}

/**
 * lingbot_json_string:
 * @b: a #JsonBuilder inside an object
 * @name: the member name
 * @v: (nullable): its value, %NULL for JSON null
 *
 * Adds the member @name = @v (a string, escaped by json-glib).
 */
static inline void
lingbot_json_string (JsonBuilder * b, const char *name, const char *v)
{
  json_builder_set_member_name (b, name);
  if (v)
    json_builder_add_string_value (b, v);
  else
    json_builder_add_null_value (b);
}

/**
 * lingbot_json_print:
 * @b: a #JsonBuilder holding one complete value
 *
 * Prints the value on one line of stdout (json-glib's json_to_string(),
 * not pretty) and flushes stdout: one JSON line of a tool.
 */
static inline void
lingbot_json_print (JsonBuilder * b)
{
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  g_autofree char *s = json_to_string (root, FALSE);
  printf ("%s\n", s);
  fflush (stdout);
}

G_END_DECLS

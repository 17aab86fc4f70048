/* lingbot-gst: what the command-line tools share: option parsing and the
 * messages of a usage error
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Static inline functions, as in bench-common.h: tests/bench and tests/vae
 * build tools/bench-dit.c and tools/bench-vae.c into programs of their own,
 * and every tool is an executable of its own, with no library of the
 * tools to link.
 */
#pragma once

#include <glib.h>
#include <stdarg.h>
#include <stdio.h>

G_BEGIN_DECLS

/**
 * LINGBOT_TOOL_USAGE:
 *
 * The exit status of a tool given bad options or arguments.
 */
#define LINGBOT_TOOL_USAGE 2

/**
 * lingbot_tool_usage_error:
 * @prog: the name messages start with ("lingbot-bench vae")
 * @format: printf() format of the message, without the newline
 * @...: its arguments
 *
 * Prints "@prog: message" and a newline on stderr.
 *
 * Returns: %LINGBOT_TOOL_USAGE, for `return lingbot_tool_usage_error (...)`
 */
static inline int lingbot_tool_usage_error (const char *prog,
    const char *format, ...) G_GNUC_PRINTF (2, 3);

static inline int
lingbot_tool_usage_error (const char *prog, const char *format, ...)
{
  va_list ap;
  fprintf (stderr, "%s: ", prog);
  va_start (ap, format);
  vfprintf (stderr, format, ap);
  va_end (ap);
  fputc ('\n', stderr);
  return LINGBOT_TOOL_USAGE;
}

/**
 * lingbot_tool_parse:
 * @prog: the name an error message starts with ("lingbot-bench vae")
 * @summary: g_option_context_new()'s parameter string ("- what it does")
 * @description: (nullable): the --help text after the options
 * @entries: the options, ending with a zeroed entry
 * @argc: (inout): the argument count; the options are removed
 * @argv: (inout) (array length=argc): the arguments
 *
 * Parses the options of a tool (g_option_context_parse() with @entries as
 * the main group).  On a parse error prints "@prog: message" on stderr.
 *
 * Returns: %TRUE when the options parsed
 */
static inline gboolean
lingbot_tool_parse (const char *prog, const char *summary,
    const char *description, const GOptionEntry * entries, int *argc,
    char ***argv)
{
  GOptionContext *ctx = g_option_context_new (summary);
  GError *err = NULL;
  if (description)
    g_option_context_set_description (ctx, description);
  g_option_context_add_main_entries (ctx, entries, NULL);
  gboolean ok = g_option_context_parse (ctx, argc, argv, &err);
  if (!ok) {
    lingbot_tool_usage_error (prog, "%s", err->message);
    g_error_free (err);
  }
  g_option_context_free (ctx);
  return ok;
}

G_END_DECLS

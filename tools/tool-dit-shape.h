/* lingbot-gst: the DiT shape options the tools share (--preset, --dim,
 * --layers, --heads, --ffn, --text-dim)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * lingbot-bench dit draws a random model of this shape, lingbot-mkmodel
 * writes one: both start from a preset of lingbot/dit-config.c and
 * override its fields, with the same options and the same errors.
 */
#pragma once

#include <glib.h>

#include "lingbot/dit.h"
#include "tools/tool-common.h"

G_BEGIN_DECLS

/**
 * LingbotToolDitShape:
 * @preset: (nullable): the --preset name, %NULL for tiny
 * @dim: --dim, 0 keeps the preset's
 * @layers: --layers, 0 keeps the preset's
 * @heads: --heads, 0 keeps the preset's
 * @ffn: --ffn, 0 keeps the preset's
 * @text_dim: --text-dim, 0 keeps the preset's
 *
 * What the shape options parsed to: declare it
 * `g_auto (LingbotToolDitShape) shape = { 0 };`, list
 * LINGBOT_TOOL_DIT_SHAPE_ENTRIES() in the tool's options, then call
 * lingbot_tool_dit_shape_apply().
 */
typedef struct
{
  char *preset;
  int dim, layers, heads, ffn, text_dim;
} LingbotToolDitShape;

/**
 * LINGBOT_TOOL_DIT_SHAPE_ENTRIES:
 * @s: a #LingbotToolDitShape pointer
 *
 * The six #GOptionEntry rows that fill @s, for a tool's entry array.
 */
#define LINGBOT_TOOL_DIT_SHAPE_ENTRIES(s) \
  {"preset", 'p', 0, G_OPTION_ARG_STRING, &(s)->preset, \
      "Shape to start from: tiny (default), demo, 1.3b or 14b", "P"}, \
  {"dim", 0, 0, G_OPTION_ARG_INT, &(s)->dim, \
      "Hidden width D (overrides the preset's)", "N"}, \
  {"layers", 0, 0, G_OPTION_ARG_INT, &(s)->layers, \
      "Transformer blocks (overrides the preset's)", "N"}, \
  {"heads", 0, 0, G_OPTION_ARG_INT, &(s)->heads, \
      "Attention heads (overrides the preset's)", "N"}, \
  {"ffn", 0, 0, G_OPTION_ARG_INT, &(s)->ffn, \
      "FFN hidden width (overrides the preset's)", "N"}, \
  {"text-dim", 0, 0, G_OPTION_ARG_INT, &(s)->text_dim, \
      "Text-encoder width (overrides the preset's)", "N"}

/**
 * lingbot_tool_dit_shape_apply:
 * @prog: the name an error message starts with ("lingbot-mkmodel")
 * @s: the parsed options
 * @cfg: (out): the preset's configuration with the overrides of @s
 * @preset: (out) (optional): the preset it started from
 *
 * Resolves the shape options.  An unknown preset prints
 * "@prog: unknown preset \"NAME\" (tiny, demo, 1.3b or 14b)" on stderr;
 * the overrides are not validated here (lingbot_dit_config_validate()).
 *
 * Returns: %TRUE, %FALSE for an unknown preset.
 */
static inline gboolean
lingbot_tool_dit_shape_apply (const char *prog, const LingbotToolDitShape * s,
    LingbotDitConfig * cfg, LingbotDitPreset * preset)
{
  LingbotDitPreset p = LINGBOT_DIT_PRESET_TINY;
  if (s->preset && !lingbot_dit_config_preset_from_name (s->preset, &p)) {
    lingbot_tool_usage_error (prog, "unknown preset \"%s\" (tiny, demo, "
        "1.3b or 14b)", s->preset);
    return FALSE;
  }
  lingbot_dit_config_init_preset (cfg, p);
  if (preset)
    *preset = p;
  const int value[] = { s->dim, s->layers, s->heads, s->ffn, s->text_dim };
  int *field[] = { &cfg->dim, &cfg->num_layers, &cfg->num_heads,
    &cfg->ffn_dim, &cfg->text_dim
  };
  for (guint i = 0; i < G_N_ELEMENTS (value); i++)
    if (value[i] > 0)
      *field[i] = value[i];
  return TRUE;
}

/**
 * lingbot_tool_dit_shape_clear:
 * @s: the parsed options
 *
 * Frees the --preset string (the g_auto() cleanup).
 */
static inline void
lingbot_tool_dit_shape_clear (LingbotToolDitShape * s)
{
  g_clear_pointer (&s->preset, g_free);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (LingbotToolDitShape,
    lingbot_tool_dit_shape_clear);

G_END_DECLS

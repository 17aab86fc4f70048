/* lingbot-gst: dummy models, weights drawn at load time (private)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <json-glib/json-glib.h>
#include "lingbot/checkpoint.h"
#include "kernels/tensor.h"

G_BEGIN_DECLS

/**
 * LINGBOT_DUMMY_KEY:
 *
 * The member of a config file that makes its model part a dummy one:
 * `"lingbot_dummy": {"seed": S, "dtype": "bf16"}`.
 */
#define LINGBOT_DUMMY_KEY "lingbot_dummy"
/**
 * LINGBOT_DUMMY_SUFFIX:
 *
 * How the manifest of a dummy VAE or text encoder ends, in place of
 * `.pth` / `.safetensors`: `Wan2.1_VAE.dummy.json`.
 */
#define LINGBOT_DUMMY_SUFFIX ".dummy.json"

/**
 * LingbotDummy:
 * @seed: the weight seed
 * @dtype: the dtype the weights are stored in (their values are rounded
 *   through it, as a checkpoint of that dtype would hold them)
 * @config: the manifest's object (owned by the parser kept here)
 */
typedef struct
{
  guint64 seed;
  LbDType dtype;
  JsonObject *config;
  /*< private > */
  JsonParser *parser;
} LingbotDummy;

gboolean lingbot_dummy_is_manifest (const char *path);
gboolean lingbot_dummy_parse (const char *text, const char *what,
    LingbotDummy * out, gboolean * is_dummy, GError ** error);
gboolean lingbot_dummy_read (const char *path, const char *what,
    LingbotDummy * out, GError ** error);
void lingbot_dummy_clear (LingbotDummy * d);
gboolean lingbot_dummy_get_int (const LingbotDummy * d, const char *key,
    int64_t min, int64_t max, int64_t * out, GError ** error);
gboolean lingbot_dummy_write (const char *path, const char *config_json,
    guint64 seed, LbDType dtype, GError ** error);
LingbotCheckpoint *lingbot_dummy_checkpoint_new (const char *path,
    GPtrArray * names, GPtrArray * tensors, GError ** error);

G_END_DECLS

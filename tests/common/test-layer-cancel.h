/* lingbot-gst: a VAE condition encode cancelled before a chosen layer
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * Shared by the encoder's own cancel test (tests/vae/test-vae-stream.c)
 * and the session's (tests/session/test-session.c).
 */
#pragma once

#include <gio/gio.h>

#include "lingbot/vae.h"

/* What lingbot_test_cancel_at_layer() cancels, and what it saw. */
typedef struct
{
  GCancellable *cancellable;
  int segment;                  /* latent frame of the call, from 0 */
  int layer;                    /* from 0; negative: from the end */
  int n_layers;                 /* seen: the encoder's layers */
} LingbotTestLayerCancel;

/* A #LingbotVaeLayerFunc (@data: a LingbotTestLayerCancel): cancels its
 * cancellable when the encoder reaches its layer of its latent frame (the
 * layer function runs before the layer, on the encoding thread). */
static inline void
lingbot_test_cancel_at_layer (LingbotVaeEncoder * enc, int segment,
    int layer, int n_layers, gpointer data)
{
  LingbotTestLayerCancel *at = data;

  (void) enc;
  at->n_layers = n_layers;
  if (segment == at->segment
      && layer == (at->layer < 0 ? n_layers + at->layer : at->layer))
    g_cancellable_cancel (at->cancellable);
}

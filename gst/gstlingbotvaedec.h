/* lingbot-gst: lingbotvaedec, latent chunks -> video frames
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_LINGBOT_VAE_DEC (gst_lingbot_vae_dec_get_type ())
G_DECLARE_FINAL_TYPE (GstLingbotVaeDec, gst_lingbot_vae_dec,
    GST, LINGBOT_VAE_DEC, GstElement)
GST_ELEMENT_REGISTER_DECLARE (lingbotvaedec);

G_END_DECLS

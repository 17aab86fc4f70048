/* lingbot-gst: the CPU op table
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "kernels/cpu/cpu-ops.h"
#include "kernels/cpu/cpu-internal.h"

const LbOps lb_cpu_ops = {
  .gemm = lb_cpu_gemm,
  .gemm_fp8 = lb_cpu_gemm_fp8,
  .layer_norm = lb_cpu_layer_norm,
  .rms_norm = lb_cpu_rms_norm,
  .modulate = lb_cpu_modulate,
  .gated_residual = lb_cpu_gated_residual,
  .rope_3d = lb_cpu_rope_3d,
  .attention = lb_cpu_attention,
  .gelu_tanh = lb_cpu_gelu_tanh,
  .silu = lb_cpu_silu,
  .add = lb_cpu_add,
  .mul = lb_cpu_mul,
  .scale = lb_cpu_scale,
  .conv3d_causal = lb_cpu_conv3d_causal,
  .conv2d = lb_cpu_conv2d,
  .upsample_nearest2x = lb_cpu_upsample_nearest2x,
  .patchify = lb_cpu_patchify,
  .unpatchify = lb_cpu_unpatchify,
  .resize_bicubic = lb_cpu_resize_bicubic,
  .copy = lb_cpu_copy,
  .clamp = lb_cpu_clamp,
  .fill = lb_cpu_fill,
  .accumulate = lb_cpu_accumulate,
  .channel_rms_norm = lb_cpu_channel_rms_norm,
  .upsample_nearest2x_halo = lb_cpu_upsample_nearest2x_halo,
  .latent_affine = lb_cpu_latent_affine,
  .norm_modulate = lb_cpu_norm_modulate,
  .rms_norm_rope = lb_cpu_rms_norm_rope,
  .gated_residual_modulate = lb_cpu_gated_residual_modulate,
  .ray_map = lb_cpu_ray_map,
};

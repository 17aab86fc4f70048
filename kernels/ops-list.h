/* lingbot-gst: the list of ops, one entry per LbOps member (X-macro)
 * SPDX-License-Identifier: LGPL-2.1-or-later
 *
 * The one place an op is declared.  Each entry is
 *
 *   #define LB_OP_ARGS_name(A) A (KIND, arg) A (KIND, arg) ...
 *   LB_OP (name)
 *
 * for `gboolean (*name) (LbStream * s, <the args in order>, GError **
 * error)`, with KIND one of
 *
 *   IN    const LbTensor *   (an input; may be %NULL where the op says)
 *   OUT   LbTensor *         (an output, or an input updated in place)
 *   F32   float
 *   INT   int
 *   I64   int64_t
 *   BOOL  gboolean
 *
 * and the comment above it is the op's contract (see the conventions in
 * kernels/ops.h).  `LB_OP_ARGS_name (M)` expands to `M (KIND, arg)` for
 * each argument, so one LB_OP expansion can use the arguments several
 * ways (kernels/ops.h has the usual M: LB_OP_PARAM, a declaration
 * `, const LbTensor * x`, and LB_OP_ARG_NAME, `, x`).
 *
 * From the list come the LbOps members (kernels/ops.h), the CPU backend's
 * declarations and table (kernels/cpu/), the op names of
 * lb_ops_first_missing() (kernels/backend.c), fakedev's wrappers
 * (tests/common/fakedev.c) and the generic op call of the table-driven
 * parity tests (tests/common/op-call.h).  A new op is one entry here, its
 * kernels, and its rows in the parity table (tests/common/op-cases.c).
 *
 * Usage: define LB_OP (name), then include this file; it may be included
 * any number of times (the LB_OP_ARGS_ macros are defined identically
 * each time) and undefines LB_OP at its end.  Included without LB_OP it
 * only defines the LB_OP_ARGS_ macros.
 */
#ifndef LB_OP
/* included on its own: only the LB_OP_ARGS_ macros */
#define LB_OP(name)
#endif

/* @gemm: `y[M,N] = alpha * x[M,K] . op(w) + bias[N] + beta * y`, where op(w)
 *   is w[N,K]^T when @trans_w (PyTorch Linear layout) or w[K,N] otherwise.
 *   @bias may be %NULL.  x and y may be 2-D views with a row stride
 *   (stride[1] == 1); leading dims beyond 2 are flattened into M when
 *   contiguous.  x, bias and y are f32; w is f32 or bf16
 *   (%LB_DTYPE_BF16, spec 1.11 weight storage; any other dtype is an
 *   %LB_ERROR_SHAPE error).  With a bf16 w the op computes, on every
 *   backend, `y = alpha * (bf16(x) . op(w)) + beta * y + bias` where
 *   bf16(x) rounds each x element to bfloat16 (round to nearest even,
 *   lb_f32_to_bf16()) and the products are accumulated in f32: the
 *   backends then differ only by f32 summation order.  With a bf16 w, x
 *   may be bf16 itself (%LB_DTYPE_BF16, the same views): it is then used
 *   as it is, which gives exactly what an f32 x holding those values gives
 *   (the GEMM inputs that @layer_norm, @norm_modulate and the unary ops
 *   write in bf16: no conversion pass, spec 1.11).  A bf16 x with an f32
 *   w is an %LB_ERROR_SHAPE error ("gemm: x is bf16 [4, 8], expected f32
 *   [M, K] with unit column stride (bf16 only with a bf16 w)").  The
 *   stream's #LbMathMode does not change this.  The CPU backend's bf16 path
 *   widens into a per-call scratch (it is the oracle; CPU ranks keep f32
 *   weights) and sums each output in a fixed order, so a row of y does
 *   not depend on the other rows of x.
 */
#define LB_OP_ARGS_gemm(A) A (IN, x) A (IN, w) A (BOOL, trans_w) \
    A (IN, bias) A (F32, alpha) A (F32, beta) A (OUT, y)
LB_OP (gemm)
/* @gemm_gelu_tanh: `y = gelu_tanh(alpha * x . op(w) + bias)`: @gemm with
 *   beta 0 followed by @gelu_tanh (the FFN's first linear layer and its
 *   activation, spec 1.7), one op so that a backend can apply the GELU in
 *   the GEMM's epilogue.  Operands as @gemm's, except that y may be bf16
 *   when w is (the FFN's second GEMM input, written without a conversion
 *   pass): the f32 result rounded to nearest even.  The CPU backend (the
 *   oracle) computes exactly the op pair, by blocks of rows when y is
 *   bf16.  The CUDA backend uses cuBLASLt's GELU epilogue for a bf16 x
 *   and w where cuBLASLt has a plan for the operands, and the op pair
 *   otherwise; cuBLASLt's GELU is its own tanh formula, so there the
 *   result is the pair's within float rounding of the activation
 *   (tolerance, docs/design/cuda.md "GEMM + GELU epilogue").  Errors as
 *   @gemm's under this op's name, and a bf16 y with an f32 w:
 *   "gemm_gelu_tanh: y is bf16 [4, 6], expected f32 [4, 6] (bf16 only
 *   with a bf16 w)".
 */
#define LB_OP_ARGS_gemm_gelu_tanh(A) A (IN, x) A (IN, w) A (BOOL, trans_w) \
    A (IN, bias) A (F32, alpha) A (OUT, y)
LB_OP (gemm_gelu_tanh)
/* @gemm_fp8: the FP8 linear layer (precision "fp8", docs/design/cuda.md
 *   "Precision"): x f32 [M, K] (a 2-D view with unit column stride, or
 *   contiguous [..., K] flattened), w %LB_DTYPE_F8E4M3 [N, K] contiguous
 *   (PyTorch Linear layout; the only layout: FP8 tensor-core GEMMs take
 *   "TN" operands), @sw f32 [N] contiguous, its per-output-channel scales
 *   (w[n, :] ~ e4m3(w[n, :]) * sw[n], made at load by
 *   lb_quantize_e4m3_row()), @bias f32 [N] or %NULL, y f32 [M, N] (row
 *   views).  Every backend computes, per row m of x: the per-token scale
 *   `sx[m] = amax_k |x[m, k]| / 448` (f32; 1 for an all-zero row), the
 *   codes `xq[m, k] = e4m3 (x[m, k] / sx[m])` (one f32 division, round to
 *   nearest even, saturating: lb_quantize_e4m3_row(), lb_f32_to_e4m3()),
 *   then `acc = sum_k f32 (xq[m, k]) * f32 (w[n, k])` in f32 (each product
 *   of two e4m3 values is exact in f32) and
 *   `y[m, n] = ((alpha * acc) * sx[m]) * sw[n] + (beta * y[m, n] +
 *   bias[n])`, each operation one f32 rounding in that order (beta == 0:
 *   y is not read).  So the backends differ only by the summation order of
 *   acc.  The CPU backend (the oracle) quantises each row of x and sums in
 *   a fixed order (8 interleaved partial sums, combined pairwise), so a
 *   row of y does not depend on the other rows of x; it quantises into a
 *   per-call scratch (M K bytes, M floats) and is not a production path.
 *   A device backend takes its quantised x and sx from preallocated stream
 *   scratch.  With K = 0 or alpha = 0, x and w are not read (as @gemm).
 *   NaN in a row of x makes that row's outputs NaN; an infinite element
 *   makes the row's scale infinite (the row's outputs are then NaN).  The
 *   stream's #LbMathMode does not change the op.  A backend may restrict
 *   the geometry its FP8 units take (CUDA: K and N multiples of 16, x's
 *   row stride a multiple of 16), refusing others with an %LB_ERROR_SHAPE
 *   error.  Argument errors name the op ("gemm_fp8: w is f32 [3, 8],
 *   expected f8e4m3 [N, 8] contiguous", "gemm_fp8: sw is f32 [4],
 *   expected f32 [3] contiguous").
 */
#define LB_OP_ARGS_gemm_fp8(A) A (IN, x) A (IN, w) A (IN, sw) A (IN, bias) \
    A (F32, alpha) A (F32, beta) A (OUT, y)
LB_OP (gemm_fp8)
/* @gemm_fp8_q: @gemm_fp8 with x already quantised: x %LB_DTYPE_F8E4M3
 *   [M, K] (a 2-D view with unit column stride, or contiguous [..., K]
 *   flattened) holding the codes and @sx f32 [M] contiguous the per-row
 *   scales that @gemm_fp8 would compute from an f32 x (what @norm_fp8
 *   writes: the fp8 GEMM input without a quantisation pass, docs/design/
 *   cuda.md "Precision").  Then exactly @gemm_fp8's
 *   `y[m, n] = ((alpha * acc) * sx[m]) * sw[n] + (beta * y[m, n] +
 *   bias[n])` with acc the f32 sum of the code products, so gemm_fp8 (x)
 *   and gemm_fp8_q of lb_quantize_e4m3_row() of each row of x give the
 *   same bits on a backend.  The other operands, the geometry limits and
 *   the errors are @gemm_fp8's under this op's name, and "gemm_fp8_q: x
 *   is f32 [4, 8], expected f8e4m3 [M, K] with unit column stride",
 *   "gemm_fp8_q: sx is f32 [3], expected f32 [4] contiguous".
 */
#define LB_OP_ARGS_gemm_fp8_q(A) A (IN, x) A (IN, sx) A (IN, w) A (IN, sw) \
    A (IN, bias) A (F32, alpha) A (F32, beta) A (OUT, y)
LB_OP (gemm_fp8_q)
/* @gemm_fp8_gelu_q: the FFN's first fp8 layer writing the fp8 input of
 *   the second (the producer of @gemm_fp8_q's x, as @norm_fp8 is for the
 *   layers after a norm): per row of the product, @gemm_fp8_q's f32
 *   value with beta 0, `v[m, n] = ((alpha * acc) * sx[m]) * sw[n] +
 *   bias[n]`, then @gelu_tanh's formula on v, then the row quantised as
 *   @gemm_fp8 quantises its x (lb_quantize_e4m3_row(): `sy[m] = amax
 *   |h| / 448`, 1 for a zero row, `y[m, n] = e4m3 (h[n] / sy[m])`
 *   nearest even, saturating) into @y %LB_DTYPE_F8E4M3 [M, N] (a 2-D
 *   view with unit column stride or contiguous) and @sy f32 [M]
 *   contiguous.  So on a backend @gemm_fp8_q (beta 0) into an f32 h,
 *   @gelu_tanh on h, then @gemm_fp8 reading h, and this op followed by
 *   @gemm_fp8_q, give the same bits.  The row scale needs the whole row
 *   of h: a device evaluates it from the GEMM's f32 accumulator one row
 *   per block (twice: the amax, then the codes), so h is never stored.
 *   x, @sx, w, @sw, bias, alpha and the geometry limits as @gemm_fp8_q's;
 *   errors name the op ("gemm_fp8_gelu_q: y is f32 [4, 3], expected
 *   f8e4m3 [4, 3] with unit column stride", "gemm_fp8_gelu_q: sy is f32
 *   [3], expected f32 [4] contiguous").
 */
#define LB_OP_ARGS_gemm_fp8_gelu_q(A) A (IN, x) A (IN, sx) A (IN, w) \
    A (IN, sw) A (IN, bias) A (F32, alpha) A (OUT, y) A (OUT, sy)
LB_OP (gemm_fp8_gelu_q)
/* @layer_norm: per row of x[M,D]: `(x - mean) / sqrt(var + eps)` (biased
 *   variance), then `* weight + bias` when they are non-%NULL.  y is f32,
 *   or bf16 (the next bf16 GEMM's input, spec 1.11; it must not overlap
 *   x): then y receives the f32 result rounded to nearest even
 *   (lb_f32_to_bf16()), on every backend.  The same holds for the y of
 *   @norm_modulate, @gelu_tanh, @silu and @scale; any other dtype of y is
 *   an %LB_ERROR_SHAPE error ("layer_norm: y is f16 [4, 8], expected f32
 *   or bf16 [..., 8]").
 */
#define LB_OP_ARGS_layer_norm(A) A (IN, x) A (IN, weight) A (IN, bias) \
    A (F32, eps) A (OUT, y)
LB_OP (layer_norm)
/* @rms_norm: per row of x[M,D]: `x * rsqrt(mean(x^2) + eps) * weight`
 *   (@weight may be %NULL).  In place allowed (y == x).
 */
#define LB_OP_ARGS_rms_norm(A) A (IN, x) A (IN, weight) A (F32, eps) \
    A (OUT, y)
LB_OP (rms_norm)
/* @modulate: `y = x * (1 + scale) + shift` with x,y [M,D] and scale/shift
 *   either [D] (broadcast over rows) or [M,D] (per row).  In place allowed.
 */
#define LB_OP_ARGS_modulate(A) A (IN, x) A (IN, scale) A (IN, shift) \
    A (OUT, y)
LB_OP (modulate)
/* @gated_residual: in place `x += gate * y`, x,y [M,D], gate [D] or [M,D]
 *   or %NULL (then plain `x += y`).
 */
#define LB_OP_ARGS_gated_residual(A) A (OUT, x) A (IN, y) A (IN, gate)
LB_OP (gated_residual)
/* @rope_3d: in place rotation of x[N, H, hd] (q or k heads) by interleaved
 *   pairs, spec lingbot_model_spec.md 1.8.  Token n is (f, i, j) in
 *   row-major order over a grid of @grid_f x @grid_h x @grid_w tokens;
 *   it uses positions (@frame_offset + f, @row_offset + i, j).  @cos and
 *   @sin are [max_pos, hd/2] tables built by lb_rope_tables_new(): column p
 *   is pair (x[2p], x[2p+1]); the first hd - 4*(hd/6) dims (pairs) are
 *   temporal, then 2*(hd/6) height, 2*(hd/6) width (the official Wan split;
 *   equal to the spec's hd - 2*(hd/3), hd/3, hd/3 whenever hd/3 is even:
 *   hd 32 -> 12/10/10, hd 128 -> 44/42/42).  @row_offset is 0 except on a
 *   rank holding a band of rows, which passes its first row.  x may be a
 *   view with stride[2] == 1.  Positions past the table are an error.
 */
#define LB_OP_ARGS_rope_3d(A) A (OUT, x) A (IN, cos) A (IN, sin) \
    A (I64, grid_f) A (I64, grid_h) A (I64, grid_w) A (I64, frame_offset) \
    A (I64, row_offset)
LB_OP (rope_3d)
/* @attention: `out[Nq,H,hd] = softmax(q . k^T * scale + bias) . v` with
 *   k,v [Nk,H,hd]; @bias ([H,Nq,Nk], nullable) is added to the logits before
 *   softmax; @key_mask ([Nk] u8, nullable; 0 = hidden key) hides keys.
 *   Computed in tiles of keys with an online softmax so memory is O(tile),
 *   not O(Nq*Nk).  q/k/v/out may be strided views with stride[2] == 1 (so
 *   a KV-cache window can be passed without a copy).  A query whose keys
 *   are all hidden (or Nk == 0) gets zeros.  bias is f32; k and v are
 *   both f32 or both bf16 (%LB_DTYPE_BF16: a bf16 KV cache, spec 1.11
 *   "the KV cache is bf16"), and the result is the op's on k and v
 *   widened exactly to f32 (on the CPU bit for bit; a backend that rounds
 *   k and v to bf16 in %LB_MATH_BF16 anyway reads them as they are).
 *   q and out are each f32 or bf16: a bf16 q is widened exactly (the
 *   result is the op's on an f32 q holding those values: the DiT's q
 *   after a bf16 Ulysses exchange), a bf16 out receives the f32 result
 *   rounded to nearest even (lb_f32_to_bf16(): the input of the bf16
 *   output projection, which rounds it so anyway; spec 1.11).  A q or out
 *   of another dtype is an %LB_ERROR_SHAPE error ("attention: out is f16
 *   [4, 2, 8], expected f32 or bf16 [4, 2, 8]").
 *   Any other dtype of k, or a v of another dtype than k, is an
 *   %LB_ERROR_SHAPE error ("attention: k is f16 [6, 2, 8], expected f32 or
 *   bf16 [*, 2, 8]", "attention: v is f32 [6, 2, 8], expected bf16
 *   [6, 2, 8] (the dtype of k)").  On an %LB_MATH_BF16 stream with hd 64
 *   or 128 (the tensor-core path of the served precision, spec 1.11: "Q,
 *   K, V ... are bf16"), q is rounded to bf16 (lb_f32_to_bf16()) on every
 *   backend before the products, so a q that is already bf16-valued gives
 *   the same result; the rest of the op's precision in that mode is the
 *   backend's (tolerance, docs/design/cuda.md "Precision").
 */
#define LB_OP_ARGS_attention(A) A (IN, q) A (IN, k) A (IN, v) A (IN, bias) \
    A (IN, key_mask) A (F32, scale) A (OUT, out)
LB_OP (attention)
/* @gelu_tanh: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, in place ok.
 *   y may be bf16 (not in place), as @layer_norm's.
 */
#define LB_OP_ARGS_gelu_tanh(A) A (IN, x) A (OUT, y)
LB_OP (gelu_tanh)
/* @silu: `x * sigmoid(x)`, in place ok.  y may be bf16, as @gelu_tanh's.
 */
#define LB_OP_ARGS_silu(A) A (IN, x) A (OUT, y)
LB_OP (silu)
/* @add: `y = a + b` (same shapes, or b [D] broadcast over rows of a [M,D]).
 *   The elementwise and row ops (norms, modulate, gated_residual,
 *   activations, add/mul/scale) also accept 2-D row-strided views
 *   (stride[1] == 1).
 */
#define LB_OP_ARGS_add(A) A (IN, a) A (IN, b) A (OUT, y)
LB_OP (add)
/* @mul: `y = a * b`, broadcasting as @add.
 */
#define LB_OP_ARGS_mul(A) A (IN, a) A (IN, b) A (OUT, y)
LB_OP (mul)
/* @scale: `y = alpha * x + beta`, in place ok.  y may be bf16, as
 *   @gelu_tanh's.
 */
#define LB_OP_ARGS_scale(A) A (IN, x) A (F32, alpha) A (F32, beta) \
    A (OUT, y)
LB_OP (scale)
/* @conv3d_causal: x [Cin, T, H, W] -> y [Cout, T', H', W'] with weight
 *   [Cout, Cin, kt, kh, kw], bias [Cout] (nullable), spatial zero padding
 *   @pad_h/@pad_w, spatial stride @stride_h/@stride_w, temporal stride 1.
 *   The temporal input is `cat(cache, x)` along T where @cache
 *   [Cin, Tc, H, W] (nullable) holds the frames that precede x; when
 *   @cache is %NULL or Tc < kt-1 the missing leading frames are zeros
 *   (causal padding, Wan2.1 CausalConv3d: Z = max(0, kt-1-Tc) zero frames
 *   in front, none after; vae_and_distributed_spec.md A.3).  So
 *   T' = Z + Tc + T - kt + 1, which is T whenever Tc <= kt - 1.  x and
 *   cache are f32 contiguous, or both bf16 in the channels-last layout of
 *   their shape (strides [1, H*W*Cin, W*Cin, Cin], NDHWC in memory: the
 *   conv input a bf16 VAE decode writes, docs/design/cuda.md
 *   "Channels-last conv inputs"); a bf16 input is convolved as its exact
 *   f32 values (the CPU widens it; a device multiplies the bf16 values
 *   with f32 accumulation).  y is f32 contiguous either way.
 */
#define LB_OP_ARGS_conv3d_causal(A) A (IN, x) A (IN, cache) A (IN, weight) \
    A (IN, bias) A (INT, pad_h) A (INT, pad_w) A (INT, stride_h) \
    A (INT, stride_w) A (OUT, y)
LB_OP (conv3d_causal)
/* @conv2d: x [Cin, H, W] (or [B, Cin, H, W] with B in dim 0 of a 4-D
 *   tensor) -> y [Cout, H', W'] (or [B, Cout, H', W']), weight
 *   [Cout, Cin, kh, kw], bias nullable, symmetric zero padding, stride.
 */
#define LB_OP_ARGS_conv2d(A) A (IN, x) A (IN, weight) A (IN, bias) \
    A (INT, pad_h) A (INT, pad_w) A (INT, stride_h) A (INT, stride_w) \
    A (OUT, y)
LB_OP (conv2d)
/* @upsample_nearest2x: x [..., H, W] -> y [..., 2H, 2W].
 */
#define LB_OP_ARGS_upsample_nearest2x(A) A (IN, x) A (OUT, y)
LB_OP (upsample_nearest2x)
/* @patchify: x [C, F, H, W] -> y [F*(H/ph)*(W/pw), C*ph*pw], token order
 *   (f, i, j) row-major, feature `c*ph*pw + kh*pw + kw` (spec 1.3, 1.6).
 */
#define LB_OP_ARGS_patchify(A) A (IN, x) A (INT, ph) A (INT, pw) A (OUT, y)
LB_OP (patchify)
/* @unpatchify: z [F*Hp*Wp, ph*pw*C] -> y [C, F, Hp*ph, Wp*pw], feature
 *   `(kh*pw + kw)*C + c` (spec 1.10: c fastest).
 */
#define LB_OP_ARGS_unpatchify(A) A (IN, z) A (INT, ph) A (INT, pw) \
    A (OUT, y)
LB_OP (unpatchify)
/* @resize_bicubic: x [C, H, W] -> y [C, H', W'], bicubic with A = -0.75,
 *   half-pixel centres (align_corners=False), no antialias, edge clamped,
 *   as torch.nn.functional.interpolate(mode="bicubic") on the CPU: scale
 *   in/out and source coordinate `scale*(o+0.5)-0.5` in float32 (not
 *   clamped), the 4 taps clamped to the border, width taps combined first
 *   (golden README 4).
 */
#define LB_OP_ARGS_resize_bicubic(A) A (IN, x) A (OUT, y)
LB_OP (resize_bicubic)
/* The strided ops below (@copy, @clamp, @fill, @accumulate, @latent_affine)
 * take f32 views of 1 to 5 dims with any strides (including 0-stride
 * broadcasts of an input); x and y have the same shape and must not
 * overlap unless the op says in place.  Their results are exact (no
 * rounding beyond the single f32 operation written), so every backend
 * gives bit-identical results.
 */
/* @copy: `y = x` (same shape, any strides); x and y are each f32 or bf16:
 *   f32 -> bf16 rounds each element to nearest even exactly as
 *   lb_f32_to_bf16() (NaN stays NaN), bf16 -> f32 widens exactly,
 *   f32 -> f32 and bf16 -> bf16 copy the bits.  Other dtypes are
 *   %LB_ERROR_SHAPE errors ("copy: y is f16 [3, 4], expected f32 or bf16
 *   [3, 4]").
 */
#define LB_OP_ARGS_copy(A) A (IN, x) A (OUT, y)
LB_OP (copy)
/* @clamp: `y = min(max(x, lo), hi)` evaluated as
 *   `v = x < lo ? lo : x; y = v > hi ? hi : v`, so NaN stays NaN (as
 *   torch.clamp).  Any strides; in place allowed (y == x).
 */
#define LB_OP_ARGS_clamp(A) A (IN, x) A (F32, lo) A (F32, hi) A (OUT, y)
LB_OP (clamp)
/* @fill: `y[...] = value` (any strides); y f32, or bf16 holding
 *   lb_f32_to_bf16() of @value.
 */
#define LB_OP_ARGS_fill(A) A (OUT, y) A (F32, value)
LB_OP (fill)
/* @accumulate: in place `y += x` (same shape, any strides; used where the
 *   addend's layout differs from y's, e.g. token-major [N, C] attention
 *   output added to a channel-major [C, T, H, W] residual).
 */
#define LB_OP_ARGS_accumulate(A) A (IN, x) A (OUT, y)
LB_OP (accumulate)
/* @channel_rms_norm: Wan2.1 RMS_norm over the channels of x [C, T, H, W]
 *   (vae_and_distributed_spec.md A.3), in the reference's order of
 *   operations: per voxel `n = max(sqrt(sum_c x[c]^2), 1e-12)` (the sum in
 *   f32, channel order), `v = x[c] / n * sqrt(C) * gamma[c]` (sqrt(C) is
 *   the f32 rounding of the double root), then when @silu
 *   `v = v / (1 + exp(-v))`.  x and y are [C, T, H, W] views with any
 *   strides (y may be the interior of a halo-padded buffer, or a
 *   token-major [N, C] buffer seen as [C, T, H, W]); @gamma f32 [C]
 *   contiguous.  x is f32; y is f32, or bf16 holding each f32 result
 *   rounded to nearest even (lb_f32_to_bf16(): a channels-last conv
 *   input).  y must not overlap x.
 */
#define LB_OP_ARGS_channel_rms_norm(A) A (IN, x) A (IN, gamma) \
    A (BOOL, silu) A (OUT, y)
LB_OP (channel_rms_norm)
/* @upsample_nearest2x_halo: nearest x2 of a band of h rows that carries one
 *   halo row above and below, keeping one upsampled halo row per side:
 *   x [C, T, h + 2, w] (stride[3] == 1, other strides free) ->
 *   y [C, T, 2h + 2, 2w] contiguous, `y[c, t, r, j] = x[c, t, (r+1)/2, j/2]`
 *   (the full upsample's outermost rows, never read by the following 3x3
 *   conv, are dropped).  y may instead be bf16 channels-last (strides
 *   [1, H*W*C, W*C, C]), each value lb_f32_to_bf16() of x's: the input of
 *   a conv3d_causal that reads bf16 NDHWC (docs/design/cuda.md
 *   "Channels-last conv inputs").
 */
#define LB_OP_ARGS_upsample_nearest2x_halo(A) A (IN, x) A (OUT, y)
LB_OP (upsample_nearest2x_halo)
/* @latent_affine: per-channel latent (de)normalisation of x [C, ...]
 *   (dim 0 is the channel) into y of the same shape, @mean and @inv_std
 *   f32 [C] contiguous: when @denormalize `y = x / inv_std[c] + mean[c]`,
 *   else `y = (x - mean[c]) * inv_std[c]` (spec A.2: the reference divides
 *   by the float32 reciprocal, it does not multiply by the std).
 */
#define LB_OP_ARGS_latent_affine(A) A (IN, x) A (IN, mean) A (IN, inv_std) \
    A (BOOL, denormalize) A (OUT, y)
LB_OP (latent_affine)
/* The fused ops below each replace a pair of the ops above in the DiT
 * block (spec 1.7, 1.8, 1.10).  Each computes exactly what the pair
 * computes on the same backend: the same statistics in the same precision
 * and the same float operations, so on the CPU a fused op is bit-identical
 * to its pair (tests/unit/test-ops-fused.c); they only save the
 * intermediate tensor's round trip through memory.  The argument errors
 * name the fused op ("norm_modulate: scale is f32 [3, 8], expected [8] or
 * [4, 8]").
 */
/* @norm_modulate: @layer_norm then @modulate: per row of x [M, D]
 *   `y = LN(x) * (1 + scale) + shift`, LN with the optional affine @weight
 *   / @bias [D] (%NULL for none) and statistics in double as @layer_norm;
 *   scale and shift [D] (broadcast) or [M, D] (per row).  x, y, scale and
 *   shift may be 2-D row-strided views (stride[1] == 1).  In place
 *   allowed (y == x).  y may be bf16 (not in place), as @layer_norm's.
 */
#define LB_OP_ARGS_norm_modulate(A) A (IN, x) A (IN, weight) A (IN, bias) \
    A (F32, eps) A (IN, scale) A (IN, shift) A (OUT, y)
LB_OP (norm_modulate)
/* @rms_norm_rope: @rms_norm then @rope_3d: x [N, H*hd] (2-D, stride[1] ==
 *   1) is RMS-normalised over the whole row (all heads, the mean square in
 *   double) and multiplied by @weight [H*hd] (nullable), then each head of
 *   the result is rotated as @rope_3d does (same tables, grid and
 *   offsets), and written to y [N, H, hd]: any view with stride[2] == 1,
 *   e.g. the rows of a KV-cache slot range, so the keys go straight into
 *   the cache.  y may be x itself seen as [N, H, hd] (in place); otherwise
 *   it must not overlap x.  y is f32 or bf16 (a bf16 KV cache's slots,
 *   spec 1.11): a bf16 y receives the f32 result rounded to nearest even
 *   by lb_f32_to_bf16(); any other dtype is an %LB_ERROR_SHAPE error
 *   ("rms_norm_rope: y is f16 [6, 2, 8], expected f32 or bf16 [6, *, *]").
 */
#define LB_OP_ARGS_rms_norm_rope(A) A (IN, x) A (IN, weight) A (F32, eps) \
    A (IN, cos) A (IN, sin) A (I64, grid_f) A (I64, grid_h) A (I64, grid_w) \
    A (I64, frame_offset) A (I64, row_offset) A (OUT, y)
LB_OP (rms_norm_rope)
/* @gated_residual_modulate: @gated_residual then @modulate, in place on x:
 *   `x = (x + gate * y) * (1 + scale) + shift` with x, y [M, D], @gate [D],
 *   [M, D] or %NULL (then `x + y`), scale and shift [D] or [M, D] (the
 *   self-attention output's gated residual followed by the camera
 *   injection of spec 1.7).  Row-strided 2-D views accepted.
 */
#define LB_OP_ARGS_gated_residual_modulate(A) A (OUT, x) A (IN, y) \
    A (IN, gate) A (IN, scale) A (IN, shift)
LB_OP (gated_residual_modulate)
/* @residual_norm_modulate: @gated_residual then @norm_modulate on its
 *   result: in place `x += gate * y` (x, y [M, D], @gate [D], [M, D] or
 *   %NULL for `x += y`), then `out = LN(x) * (1 + scale) + shift` as
 *   @norm_modulate computes it (optional affine @weight / @bias [D],
 *   statistics in double; scale and shift [D] or [M, D]) into @out [M,
 *   D], f32 or bf16 (the next GEMM's input, rounded as @layer_norm's bf16
 *   y), not overlapping x (the cross-attention's residual followed by the
 *   FFN's norm, spec 1.7).  Bit for bit the pair on the CPU; row-strided
 *   2-D views accepted.  Argument errors name this op
 *   ("residual_norm_modulate: gate is f32 [9], expected [8] or [4, 8]").
 */
#define LB_OP_ARGS_residual_norm_modulate(A) A (OUT, x) A (IN, y) \
    A (IN, gate) A (IN, weight) A (IN, bias) A (F32, eps) A (IN, scale) \
    A (IN, shift) A (OUT, out)
LB_OP (residual_norm_modulate)
/* @norm_fp8: the producer of an fp8 GEMM input (@gemm_fp8_q), one row
 *   per pass: x f32 rows [M, D] (row-strided 2-D views accepted); when @y
 *   is non-%NULL first in place `x += gate * y` (@gate [D], [M, D] or
 *   %NULL for `x += y`; @gated_residual's row), then the row
 *   `v = LN(x)` with the optional affine @weight / @bias [D] (@layer_norm's
 *   f32 result), and when @scale and @shift are given ([D] or [M, D],
 *   both or neither) `v = v * (1 + scale) + shift` (@modulate's), then
 *   the row quantised as @gemm_fp8 quantises its x
 *   (lb_quantize_e4m3_row(): `sq[m] = amax |v| / 448`, 1 for a zero row,
 *   `q[m, k] = e4m3 (v[k] / sq[m])` nearest even, saturating) into @q
 *   %LB_DTYPE_F8E4M3 rows [M, D] (a 2-D view with unit column stride or
 *   contiguous; it must not overlap x) and @sq f32 [M] contiguous.  So on
 *   a backend @norm_modulate / @layer_norm / @residual_norm_modulate into
 *   an f32 buffer followed by @gemm_fp8, and this op followed by
 *   @gemm_fp8_q, give the same bits; the f32 row never goes through
 *   memory (a device computes v twice in registers: once for the amax,
 *   once for the codes).  Errors name the op ("norm_fp8: q is f32
 *   [4, 8], expected f8e4m3 [4, 8] with unit column stride", "norm_fp8:
 *   sq is f32 [3], expected f32 [4] contiguous", "norm_fp8: scale and
 *   shift must be given together").
 */
#define LB_OP_ARGS_norm_fp8(A) A (OUT, x) A (IN, y) A (IN, gate) \
    A (IN, weight) A (IN, bias) A (F32, eps) A (IN, scale) A (IN, shift) \
    A (OUT, q) A (OUT, sq)
LB_OP (norm_fp8)
/* @ray_map: the camera control tensor of spec 2.6-2.7, built on the
 *   stream's device from the chunk's poses: @rel_poses f32 [C, 16]
 *   contiguous (C relative camera-to-world poses, row-major 4x4, the
 *   translation already scaled), intrinsics @fx, @fy, @cx, @cy in pixels
 *   at the output size (lingbot_control_get_intrinsics()), @width and
 *   @height the output size in pixels (positive multiples of 8), @row0
 *   the first latent row to build; y f32 [384, C, rows, width/8]
 *   contiguous receives latent rows [@row0, @row0 + rows) (row0 + rows <=
 *   height/8).  Pixel (v, u) has `x = ((float) u + 0.5 - cx) / fx`,
 *   `y = ((float) v + 0.5 - cy) / fy`, `n = sqrt((0 + x*x + y*y) + 1)`,
 *   direction `d = (x/n, y/n, 1/n)`, ray channels (t0, t1, t2,
 *   R0.d, R1.d, R2.d) with `Ri.d = ((0 + d0 R[i][0]) + d1 R[i][1]) +
 *   d2 R[i][2]`, each a single f32 operation in that order (no fused
 *   multiply-add); ray channel c of pixel (8 ly + r, 8 lx + s) goes to
 *   channel c*64 + r*8 + s of cell (ly, lx).  Every backend gives
 *   results bit-identical to lingbot_control_pack() (the CPU op is the
 *   function it calls).  Bad sizes or bands are %LB_ERROR_SHAPE errors
 *   ("ray_map: width 60 and height 48 must be positive multiples of 8").
 */
#define LB_OP_ARGS_ray_map(A) A (IN, rel_poses) A (F32, fx) A (F32, fy) \
    A (F32, cx) A (F32, cy) A (INT, width) A (INT, height) A (INT, row0) \
    A (OUT, y)
LB_OP (ray_map)
#undef LB_OP

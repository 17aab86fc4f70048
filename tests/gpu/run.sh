#!/usr/bin/env bash
# lingbot-gst: the one GPU validation script, run on a machine with a device
# (`run` tool: `tests/gpu/run.sh`).  Builds, runs the gpu suite (parity of
# CUDA ops against the CPU oracle, NCCL collectives), then times the ops at
# DiT-14B / VAE shapes.  Results go under $OUT (default ./gpu-results):
#   build.log, gpu-suite.log, gpu-testlog.json, bench-ops.jsonl,
#   bench-gemm.jsonl, summary.txt.  Every step reports its own status and a
# failing step does not stop the later ones (except a failed build).
# Budget: about 8 minutes on an H200 (build ~2-3 min on 16 cores, suite
# ~1 min, op timings ~1-2 min), each step under its own timeout.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

start=$(date +%s)
{
  nvidia-smi || true
  . tools/deps.sh && lingbot_install_deps
  if [ -d build-gpu ]; then
    meson setup --reconfigure build-gpu -Dcuda=enabled >/dev/null
  else
    meson setup build-gpu -Dcuda=enabled >/dev/null
  fi && timeout 420 ninja -C build-gpu
} >"$OUT/build.log" 2>&1
rc=$?
note "build rc=$rc ($(( $(date +%s) - start ))s)"
if [ $rc -ne 0 ]; then
  tail -50 "$OUT/build.log"
  exit 1
fi

start=$(date +%s)
timeout 240 meson test -C build-gpu --suite gpu --print-errorlogs -v \
  >"$OUT/gpu-suite.log" 2>&1
note "gpu suite rc=$? ($(( $(date +%s) - start ))s)"
grep -E '^ *[0-9]+/[0-9]+ ' "$OUT/gpu-suite.log" | tee -a "$SUMMARY"
# the per-case parity numbers (max rel diff per op and shape)
grep -hE '^# (attention|layer_norm|rms_norm|modulate|gated_residual|gelu_tanh|silu|scale|add|mul|rope_3d|upsample|patchify|unpatchify|resize_bicubic|conv3d_causal|conv2d|gemm)' \
  "$OUT/gpu-suite.log" >"$OUT/parity-cases.txt" 2>/dev/null
cp build-gpu/meson-logs/testlog.json "$OUT/gpu-testlog.json" 2>/dev/null

start=$(date +%s)
export LINGBOT_BACKEND_PATH=$PWD/build-gpu/kernels/cuda
timeout 200 build-gpu/tests/gpu/bench-cuda-ops >"$OUT/bench-ops.jsonl" \
  2>"$OUT/bench-ops.err"
note "bench-cuda-ops rc=$? ($(( $(date +%s) - start ))s)"
cat "$OUT/bench-ops.jsonl"
tail -5 "$OUT/bench-ops.err"

if [ -x build-gpu/tools/lingbot-bench ]; then
  start=$(date +%s)
  for n in 1024 4096 8192; do
    timeout 60 build-gpu/tools/lingbot-bench gemm --backend cuda --size $n \
      --iters 20 || echo "{\"bench\":\"gemm\",\"size\":$n,\"error\":\"rc=$?\"}"
  done >"$OUT/bench-gemm.jsonl" 2>&1
  note "lingbot-bench gemm ($(( $(date +%s) - start ))s)"
  cat "$OUT/bench-gemm.jsonl"
fi

#!/usr/bin/env bash
# lingbot-gst: the one GPU validation script, run on a machine with a device
# (`run` tool: `tests/gpu/run.sh`).  Builds, runs the gpu suite (parity of
# CUDA ops against the CPU oracle, NCCL collectives), then times.  Results go
# under $OUT (default ./gpu-results) for docs/performance.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
{
  nvidia-smi || true
  . tools/deps.sh && lingbot_install_deps
  meson setup build-gpu -Dcuda=enabled >/dev/null && ninja -C build-gpu
} >"$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }

meson test -C build-gpu --suite gpu --print-errorlogs -v >"$OUT/gpu-suite.log" 2>&1
echo "gpu suite rc=$?"
grep -E '^ *[0-9]+/[0-9]+ ' "$OUT/gpu-suite.log"
cp build-gpu/meson-logs/testlog.json "$OUT/gpu-testlog.json" 2>/dev/null

for n in 1024 4096 8192; do
  build-gpu/tools/lingbot-bench gemm --backend cuda --size $n --iters 20
done | tee "$OUT/bench-gemm.jsonl"

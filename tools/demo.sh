#!/usr/bin/env bash
# lingbot-gst demo: install what is missing, build, run the furthest-along part.
#
# The main job (image + controls in, video out through GStreamer) arrives with
# step 6 of the plan.  Until then this demo shows what the foundation does:
# the backend registry probing for a GPU, the CPU GEMM rate through OpenBLAS,
# and the checkpoint reader listing a PyTorch .pth state dict.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/deps.sh
lingbot_install_deps

BUILD=${LINGBOT_BUILD_DIR:-build}
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" >/dev/null
ninja -C "$BUILD" >/dev/null

echo "== backends"
if "$BUILD/tools/lingbot-bench" gemm --backend cuda --size 4096 2>/tmp/lingbot-demo-cuda.txt; then
  :
else
  echo "CUDA: $(cat /tmp/lingbot-demo-cuda.txt) -> running on the CPU backend"
fi
echo "== CPU GEMM rate (1024^3, all cores)"
"$BUILD/tools/lingbot-bench" gemm --size 1024 --iters 10
echo "== checkpoint reader: tests/data/fixtures/tiny_state_dict.pth"
"$BUILD/tools/lingbot-inspect" tests/data/fixtures/tiny_state_dict.pth
if [ -f ../shared/golden/dit_tiny.safetensors ]; then
  echo "== checkpoint reader: ../shared/golden/dit_tiny.safetensors (first 10 tensors)"
  "$BUILD/tools/lingbot-inspect" ../shared/golden/dit_tiny.safetensors | head -n 10
fi

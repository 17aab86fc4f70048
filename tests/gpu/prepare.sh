#!/usr/bin/env bash
# lingbot-gst: build here what tests/gpu/run.sh needs on the GPU machine.
#
# The device machine (docs/performance.md "GPU procedure") is offline: no
# apt, so it cannot install this project's build dependencies.  It does
# have the NVIDIA driver, the CUDA toolkit and NCCL.  So the gpu build is
# made here (same CUDA 13 nvcc, SASS for sm_80 and sm_90 + PTX) and sent
# with `run`'s `carry`:
#
#   tests/gpu/prepare.sh            # here, after ./tools/test.sh built once
#   run: command "bash tests/gpu/run.sh", carry [".gpu-carry"]
#
# .gpu-carry/bundle.tar.xz (git-ignored) holds build-gpu/ with only the
# programs run.sh runs (their relative layout, so their $ORIGIN run paths
# still work) and lib/: every shared library they load that is neither
# part of the C runtime nor a CUDA library (those come from the device
# machine).  run.sh unpacks and uses it when present and builds on the
# device otherwise.  The working tree and the bundle together must stay
# under run's 64 MiB; the script prints both and fails above 62 MiB
# (OpenBLAS alone is 35 MiB unpacked, hence the xz).
set -euo pipefail
cd "$(dirname "$0")/../.."
. tools/deps.sh && lingbot_install_deps
export PATH=/usr/local/cuda/bin:$PATH
B=build-gpu
if [ -d $B ]; then
  meson setup --reconfigure $B -Dcuda=enabled >/dev/null
else
  meson setup $B -Dcuda=enabled >/dev/null
fi
# the programs run.sh runs on the device
progs=(
  kernels/cuda/lingbot-backend-cuda.so
  tests/gpu/test-gemm-parity tests/gpu/test-ops-parity
  tests/gpu/test-attention-parity tests/gpu/test-nccl-collectives
  tests/gpu/test-channel-cuda
  tests/gpu/bench-cuda-ops tests/dit/test-dit-cuda tests/vae/test-vae-cuda
  tools/lingbot-bench tools/lingbot-mkmodel tests/text/test-spm.model
  gst/libgstlingbot.so
)
# from the system, for the element steps (the device machine may have no
# GStreamer): gst-launch-1.0 and the core plugin (fakesink, queue, filesink)
sys_bin=$(command -v gst-launch-1.0)
sys_plugins=$(pkg-config --variable=pluginsdir gstreamer-1.0)/libgstcoreelements.so
ninja -C $B "${progs[@]}"

C=.gpu-stage
rm -rf $C .gpu-carry
mkdir -p $C/lib $C/$B .gpu-carry
# liblingbot.so -> .so.0 -> .so.0.1.0 (soname links; the real file stripped)
cp -a $B/liblingbot.so $B/liblingbot.so.[0-9]* $C/$B/
lib_real=$(basename "$(readlink -f $B/liblingbot.so)")
for p in "${progs[@]}"; do
  mkdir -p "$C/$B/$(dirname "$p")"
  cp -a "$B/$p" "$C/$B/$p"
done
mkdir -p $C/bin $C/gst-plugins
cp -L "$sys_bin" $C/bin/
cp -L "$sys_plugins" $C/gst-plugins/
# libraries to carry: what ldd resolves, minus the C runtime and CUDA
for p in "${progs[@]}" liblingbot.so; do
  case $p in *.model) ;; *) ldd "$B/$p" ;; esac
done | cat - <(ldd "$sys_bin" "$sys_plugins") |
  awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(ld-linux|libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+)\.so' |
  grep -vE 'libcuda|libcudart|libcublas|libnccl|libcudnn|/liblingbot\.so' |
  while read -r lib; do cp -L "$lib" $C/lib/; done
# symbols are not needed to run (the CUDA module keeps its -lineinfo)
strip --strip-unneeded $C/lib/* "$C/$B/$lib_real" \
  $C/$B/tests/*/test-*[!l] $C/$B/tests/gpu/bench-cuda-ops \
  $C/$B/tools/lingbot-bench $C/$B/tools/lingbot-mkmodel \
  $C/$B/gst/libgstlingbot.so $C/bin/* $C/gst-plugins/*
tar -C $C -cJf .gpu-carry/bundle.tar.xz lib bin gst-plugins $B
rm -rf $C
bundle=$(du -b .gpu-carry/bundle.tar.xz | cut -f1)
tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
total=$(((bundle + tree) / 1048576))
echo "prepare.sh: .gpu-carry/bundle.tar.xz $((bundle / 1048576)) MiB," \
  "with the working tree ${total} MiB: run tests/gpu/run.sh with" \
  "carry [\".gpu-carry\"]"
[ "$total" -le 62 ] || { echo "prepare.sh: over 62 MiB"; exit 1; }

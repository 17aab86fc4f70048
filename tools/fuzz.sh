#!/usr/bin/env bash
# lingbot-gst: a long libFuzzer run of one harness of tests/fuzz
# (docs/fuzzing.md).
#
#   tools/fuzz.sh NAME SECONDS [LIBFUZZER_ARG...]
#
# Configures build-fuzz/ with clang and -Dfuzzing=enabled (once), builds
# fuzz-NAME only, and runs it for SECONDS on a working corpus
# (build-fuzz/fuzz-corpus/NAME, seeded from tests/fuzz/corpus/NAME; new
# inputs it finds stay there, the committed corpus is read only).  Crashes,
# leaks and timeouts land in build-fuzz/fuzz-artifacts/NAME/; replay one
# with build/tests/fuzz/fuzz-replay-NAME FILE, then add it to the committed
# corpus as repro-WHAT once fixed.  The last lines printed are libFuzzer's
# stat::number_of_executed_units and the artifact count.
# NAME: safetensors safetensors-index pth npy poses control-trace jpeg spm
#       webrtc-signalling webrtc-channel ws-guard webrtc-path
set -euo pipefail

if [ $# -lt 2 ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
name=$1 seconds=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LINGBOT_FUZZ_BUILD:-$root/build-fuzz}

if [ ! -f "$build/build.ninja" ]; then
  CC=${CC:-clang} CXX=${CXX:-clang++} meson setup "$build" "$root" \
    -Dfuzzing=enabled -Dcuda=disabled -Dintrospection=disabled \
    -Dcpp_std=c++17 -Dbuildtype=debugoptimized
fi
ninja -C "$build" "tests/fuzz/fuzz-$name"

corpus=$build/fuzz-corpus/$name
artifacts=$build/fuzz-artifacts/$name
mkdir -p "$corpus" "$artifacts"
seeds=$root/tests/fuzz/corpus/$name

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/tests/fuzz/lsan.supp:print_suppressions=0}
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 G_DEBUG=fatal-criticals

set +e
"$build/tests/fuzz/fuzz-$name" "$corpus" "$seeds" \
  -max_total_time="$seconds" -max_len=20000 -rss_limit_mb=2048 \
  -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/" "$@" \
  2>&1 | tee "$build/fuzz-$name.log" | grep -v '^#[0-9]*.*\(NEW\|REDUCE\|pulse\)'
rc=${PIPESTATUS[0]}
set -e
grep 'stat::number_of_executed_units' "$build/fuzz-$name.log" || true
echo "artifacts: $(find "$artifacts" -type f | wc -l) in $artifacts"
exit "$rc"

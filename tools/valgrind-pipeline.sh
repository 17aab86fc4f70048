#!/usr/bin/env bash
# lingbot-gst: one real pipeline under valgrind's memcheck.
#
#   tools/valgrind-pipeline.sh [BUILD_DIR]      (default: build)
#
# Writes a tiny dummy model (lingbot-mkmodel --dummy --preset tiny), then
# runs
#
#   gst-launch-1.0 -e lingbotcontrolsrc location=examples/data/demo-trace.json !
#     lingbotgen devices=cpu:2 frames=13 width=64 height=64 ... !
#     lingbotvaedec ! fakesink sync=true
#
# under valgrind: one chunk through the decode hand-off, EOS, and the
# state changes down to NULL that free the session (the path of the
# use-after-free fixed in issue 3.1).  Exits non-zero on any memcheck
# error (invalid read or write, use of uninitialised memory, a bad free)
# and on definite leaks; tests/sanitize/valgrind.supp names the few
# reports that come from the libraries under us.  The meson test
# `pipeline-valgrind` (suite valgrind) runs this script; it takes about 4
# minutes on two cores (valgrind runs one thread at a time) and prints
# nothing until the end.  Environment: VALGRIND_ARGS (extra options, e.g.
# --track-origins=yes), KEEP=1 keeps the scratch directory.
set -euo pipefail
case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0 ;;
esac
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
case "$build" in /*) ;; *) build=$PWD/$build ;; esac
for p in "$build/tools/lingbot-mkmodel" "$build/tests/text/test-spm.model" \
    "$build/gst/libgstlingbot.so"; do
  [ -e "$p" ] || { echo "valgrind-pipeline: $p missing (build first)" >&2
    exit 2; }
done
command -v valgrind >/dev/null || { echo "valgrind-pipeline: no valgrind" >&2
  exit 77; }
tmp=$(mktemp -d)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$tmp"' EXIT

"$build/tools/lingbot-mkmodel" --dummy --preset tiny --chunk 4 --seed 7 \
  --tokenizer "$build/tests/text/test-spm.model" --out "$tmp/model" --quiet

# $build/gst holds the plugin alone (libgstlingbot-1.0.so, the elements'
# public library, is built in gst-libs/gst/lingbot: were it on the plugin
# path, GStreamer would dlopen and dlclose it at every registry check, and
# under valgrind that unmapping hides the statics of the library the plugin
# then loads, so that their singletons read as definite leaks)
export GST_PLUGIN_PATH=$build/gst
export GST_REGISTRY_1_0=$tmp/registry.bin GST_REGISTRY_FORK=no
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_WAIT_POLICY=passive
: "${OPENBLAS_CORETYPE:=$("$root/tools/openblas-coretype.sh")}"
[ -z "$OPENBLAS_CORETYPE" ] || export OPENBLAS_CORETYPE
# the registry scan outside valgrind (it forks nothing with FORK=no, but
# scanning every system plugin under memcheck takes minutes)
gst-inspect-1.0 lingbotgen >/dev/null

status=0
# shellcheck disable=SC2086
valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
  --show-leak-kinds=definite --num-callers=40 \
  --suppressions="$root/tests/sanitize/valgrind.supp" \
  ${VALGRIND_ARGS:-} \
  gst-launch-1.0 -e lingbotcontrolsrc \
    location="$root/examples/data/demo-trace.json" ! \
    lingbotgen model-path="$tmp/model" \
      image-location="$root/tests/data/gpu-start.jpg" prompt="a quiet harbour" \
      devices=cpu:2 frames=13 width=64 height=64 seed=7 ! \
    lingbotvaedec ! fakesink sync=true >"$tmp/log" 2>&1 || status=$?
grep -E '^==[0-9]+== ERROR SUMMARY|^Execution ended|^ERROR' "$tmp/log" || true
if [ "$status" -ne 0 ]; then
  echo "valgrind-pipeline: exit $status; the report:" >&2
  grep -E '^==[0-9]+==' "$tmp/log" | head -300 >&2
  exit 1
fi
echo "valgrind-pipeline: no memcheck error, no definite leak"

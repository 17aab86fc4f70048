#!/usr/bin/env bash
# lingbot-gst: install what is missing, build, run every test suite.
# Prints "N passed, N failed, N skipped" (from meson's testlog.json) and
# exits non-zero when anything failed.
#   ./tools/test.sh                 every suite
#   ./tools/test.sh --suite unit    extra arguments go to `meson test`
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/deps.sh
lingbot_install_deps

# OpenBLAS's kernels for this CPU even where OpenBLAS does not know the
# model (tools/openblas-coretype.sh)
: "${OPENBLAS_CORETYPE:=$(tools/openblas-coretype.sh)}"
[ -z "$OPENBLAS_CORETYPE" ] || export OPENBLAS_CORETYPE

BUILD=${LINGBOT_BUILD_DIR:-build}
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" >/dev/null
fi
ninja -C "$BUILD"

# a run that selects no test (a mistyped --suite) leaves no log behind, so
# it cannot be summarised from an earlier run's results
# (a --setup NAME run writes testlog-NAME.json)
rm -f "$BUILD"/meson-logs/testlog*.json
rc=0
meson test -C "$BUILD" --num-processes "$(nproc)" --print-errorlogs "$@" || rc=$?

log=$(ls "$BUILD"/meson-logs/testlog*.json 2>/dev/null | head -n 1)
python3 - "${log:-$BUILD/meson-logs/testlog.json}" <<'PY'
import json, sys
passed = failed = skipped = 0
try:
    log = open(sys.argv[1])
except FileNotFoundError:
    print("0 passed, 0 failed, 0 skipped (no test ran: check the --suite "
          "or test names; `meson test -C build --list` lists them)")
    sys.exit(1)
for line in log:
    line = line.strip()
    if not line:
        continue
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"):
        passed += 1
    elif r == "SKIP":
        skipped += 1
    else:
        failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or passed == 0 else 0)
PY
exit $rc

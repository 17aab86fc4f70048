#!/usr/bin/env bash
# lingbot-gst: install what is missing, build, run every test suite, then
# the sanitizer run.
#   ./tools/test.sh                 every suite, then the sanitizer run
#   ./tools/test.sh --suite unit    extra arguments go to `meson test`;
#                                   the sanitizer run is then left out
#   ./tools/test.sh --sanitize [ARGS]     only the sanitizer run (ARGS to
#                                   its `meson test`, e.g. --suite session)
#   ./tools/test.sh --no-sanitize   every suite, no sanitizer run
# The sanitizer run (docs/design.md "Sanitizers"): the same tree built with
# -Db_sanitize=address,undefined in build-sanitize/ (LINGBOT_SANITIZE_DIR),
# `meson test --setup sanitize`: the unit, comm, golden, sharding,
# session, gst, elements, pipeline, webrtc and bench suites under ASan,
# UBSan and LeakSanitizer.  Tests that lower RLIMIT_AS (session-alloc,
# gst-alloc) skip there: ASan reserves its shadow memory first.
# Prints "N passed, N failed, N skipped" for each run and, last, for both
# (from meson's testlog*.json); exits non-zero when anything failed.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 0 ;;
esac
. tools/deps.sh
lingbot_install_deps

# OpenBLAS's kernels for this CPU even where OpenBLAS does not know the
# model (tools/openblas-coretype.sh)
: "${OPENBLAS_CORETYPE:=$(tools/openblas-coretype.sh)}"
[ -z "$OPENBLAS_CORETYPE" ] || export OPENBLAS_CORETYPE

plain=1 sanitize=1
case "${1:-}" in
  --sanitize) plain=0; shift ;;
  --no-sanitize) sanitize=0; shift ;;
  *) [ $# -eq 0 ] || sanitize=0 ;;
esac

BUILD=${LINGBOT_BUILD_DIR:-build}
SBUILD=${LINGBOT_SANITIZE_DIR:-build-sanitize}
rc=0
logs=()

# run_suites DIR LABEL [MESON TEST ARGS...]: builds DIR, runs its tests,
# prints its summary line; its testlog is appended to logs
run_suites () {
  local dir=$1 label=$2
  shift 2
  ninja -C "$dir"
  # a run that selects no test (a mistyped --suite) leaves no log behind,
  # so it cannot be summarised from an earlier run's results (a --setup
  # NAME run writes testlog-NAME.json)
  rm -f "$dir"/meson-logs/testlog*.json
  local start=$SECONDS
  meson test -C "$dir" --num-processes "$(nproc)" --print-errorlogs "$@" ||
    rc=1
  local log
  log=$(ls "$dir"/meson-logs/testlog*.json 2>/dev/null | head -n 1) || true
  logs+=("${log:-$dir/meson-logs/testlog.json}")
  printf '%s: ' "$label"
  summarise "${logs[-1]}" || rc=1
  echo "$label: $((SECONDS - start)) s of tests"
}

summarise () {
  python3 - "$@" <<'PY'
import json, sys
passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        log = open(path)
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
}

if [ "$plain" = 1 ]; then
  if [ ! -f "$BUILD/build.ninja" ]; then
    meson setup "$BUILD" >/dev/null
  fi
  run_suites "$BUILD" tests "$@"
fi

if [ "$sanitize" = 1 ]; then
  if [ ! -f "$SBUILD/build.ninja" ]; then
    # no CUDA module (nothing of it runs without a GPU) and no GIR (the
    # Python test that reads it is not in the sanitizer run)
    meson setup "$SBUILD" -Db_sanitize=address,undefined -Db_lundef=false \
      -Dcuda=disabled -Dintrospection=disabled >/dev/null
  fi
  run_suites "$SBUILD" sanitizers --setup sanitize "$@"
fi

summarise "${logs[@]}" || rc=1
exit $rc

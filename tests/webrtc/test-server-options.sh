#!/bin/sh
# lingbot-webrtc-server's option checks: each out-of-range option is named
# with its range (exit 2), and a descriptor limit too low for any
# connection says so (exit 1), before any model is loaded.
#   test-server-options.sh LINGBOT-WEBRTC-SERVER
set -u
server=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

check() {   # EXPECTED-STATUS EXPECTED-LINE ARGS...
  want_rc=$1 want=$2
  shift 2
  rc=0
  "$server" "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
  [ "$rc" -eq "$want_rc" ] || fail "exit $rc (not $want_rc) for $*"
  grep -qxF -e "$want" "$tmp/err" ||
    { cat "$tmp/err"; fail "no line '$want' for $*"; }
  echo "ok: $* -> $want"
}

m="--model /nonexistent --image /nonexistent.jpg"
# shellcheck disable=SC2086
check 2 "invalid --idle-timeout 0: 1..3600 seconds" $m --idle-timeout 0
# shellcheck disable=SC2086
check 2 "invalid --idle-timeout 4000: 1..3600 seconds" $m --idle-timeout 4000
# shellcheck disable=SC2086
check 2 "invalid --max-connections -1: at least 0 (0 = automatic)" $m \
  --max-connections -1
# shellcheck disable=SC2086
check 2 "invalid --port 70000: 0..65535" $m --port 70000
# shellcheck disable=SC2086
check 2 "invalid --max-sessions 0: at least 1" $m --max-sessions 0
# shellcheck disable=SC2086
check 2 "invalid --max-message-size 10: 64..1048576" $m --max-message-size 10
check 2 "--model and --image are needed (or --source)" --port 0
# 100 descriptors leave none for a connection beside one session's 64 + 128
ulimit -n 100 || { echo "cannot lower RLIMIT_NOFILE: skipped"; exit 77; }
# shellcheck disable=SC2086
check 1 "lingbot-webrtc-server: RLIMIT_NOFILE is 100: too few descriptors for any connection with 1 session (64 + 128 per session are kept for the pipelines); lower --max-sessions, or raise the limit (ulimit -n)" $m --port 0

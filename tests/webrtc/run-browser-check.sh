#!/usr/bin/env bash
# suite browser: the WebRTC page in headless Chromium (Debian chromium, from
# tools/deps.sh), driven by playwright-core installed with npm into the build
# folder.  Starts lingbot-webrtc-server on 127.0.0.1 with a tiny random model
# twice: VP8 with the full scenario of tests/webrtc/browser-check.mjs
# (malformed messages, a bad replacement, reload, busy + backoff, a
# vanished browser; short --peer-timeout/--resume-timeout so that the slot
# is free in seconds, the defaults give 30 s), then x264 with the basic one
# (H.264 fmtp, frames, reload), then VP8 with --set frames=61 and the
# lifecycle scenario (the server restarted with SIGTERM on its port: the
# page retries and starts anew; the video's last frame received).  Each
# server log must show the first peer released.
# Exits 77 only when chromium (or node/npm) is not installed.
# After the lifecycle run, webrtc-test-client (the page's part as a
# webrtcbin program) on an idle session that no key moved, reloaded:
# a frame each time (the picture sent again once its channel is open).
#   run-browser-check.sh SERVER MKMODEL SPM_MODEL WORKDIR TEST_CLIENT
set -uo pipefail
server=$1 mkmodel=$2 spm=$3 work=$4 client=$5
src=${LINGBOT_SOURCE_ROOT:?}

[ -x /usr/bin/chromium ] || { echo "SKIP: /usr/bin/chromium is not installed"; exit 77; }
command -v node >/dev/null && command -v npm >/dev/null ||
  { echo "SKIP: node/npm not installed"; exit 77; }

mkdir -p "$work"
if [ ! -d "$work/node_modules/playwright-core" ]; then
  ok=0
  for attempt in 1 2 3; do   # a registry hiccup is retried, not skipped
    if (cd "$work" && npm install --no-audit --no-fund --silent playwright-core@1 >npm.log 2>&1); then
      ok=1; break
    fi
    sleep $((attempt * 5))
  done
  [ $ok = 1 ] || { echo "FAIL: npm install playwright-core"; cat "$work/npm.log"; exit 1; }
fi

tmp=$(mktemp -d)
pid=""
stop_server () {
  # a restart (restart.sh) left the pid of its server in $tmp/pid
  [ -s "$tmp/pid" ] && kill "$(cat "$tmp/pid")" 2>/dev/null
  [ -n "$pid" ] && kill "$pid" 2>/dev/null; [ -n "$pid" ] && wait "$pid" 2>/dev/null
  pid=""; rm -f "$tmp/pid"
}
cleanup () { stop_server; rm -rf "$tmp"; }
trap cleanup EXIT

"$mkmodel" --preset tiny --chunk 4 --full --tokenizer "$spm" --out "$tmp/model" --quiet ||
  { echo "FAIL: mkmodel"; exit 1; }
gst-launch-1.0 -q videotestsrc num-buffers=1 pattern=smpte ! \
  video/x-raw,width=320,height=180 ! jpegenc ! filesink location="$tmp/start.jpg" ||
  { echo "FAIL: start image"; exit 1; }

# run_one ENCODER CODEC SCENARIO [SERVER OPTION...]
run_one () {
  local encoder=$1 codec=$2 scenario=$3 log="$tmp/server-$1-$3.log" url="" rc port
  local stun=()
  shift 3
  # a --stun of the server's reaches the page's RTCPeerConnection
  for a in "$@"; do
    case $prev in --stun) stun=(--stun "$a");; esac
    prev=$a
  done
  local cmd=("$server" --address 127.0.0.1 --model "$tmp/model" --image "$tmp/start.jpg"
    --prompt "a meadow" --devices cpu:1 --set width=64 --set height=64
    --encoder "$encoder" --www "$src/examples/webrtc/www" "$@")
  "${cmd[@]}" --port 0 >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    url=$(grep -oE 'http://127\.0\.0\.1:[0-9]+/' "$log" | head -n 1)
    [ -n "$url" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$url" ] || { echo "FAIL: server ($encoder) did not start"; cat "$log"; return 1; }
  echo "== $encoder ($codec, $scenario) at $url"
  port=${url%/}; port=${port##*:}
  # the lifecycle scenario's restart: SIGTERM (close 1001 for the page),
  # then the same server on the same port (retried until the port is free)
  {
    echo "kill -TERM \$(cat '$tmp/pid' 2>/dev/null || echo $pid)"
    echo "n=\$(grep -c 'listening on' '$log')"
    echo "for try in \$(seq 1 50); do"
    echo "  $(printf '%q ' "${cmd[@]}") --port $port >>'$log' 2>&1 </dev/null &"
    echo "  p=\$!"
    echo "  for i in \$(seq 1 50); do"
    echo "    if [ \$(grep -c 'listening on' '$log') -gt \$n ]; then echo \$p >'$tmp/pid'; exit 0; fi"
    echo "    kill -0 \$p 2>/dev/null || break"
    echo "    sleep 0.1"
    echo "  done"
    echo "  kill \$p 2>/dev/null; sleep 0.2"
    echo "done"
    echo "exit 1"
  } >"$tmp/restart.sh"
  NODE_PATH="$work/node_modules" timeout 240 node "$src/tests/webrtc/browser-check.mjs" \
    "$url" --chromium /usr/bin/chromium --out "$tmp/$encoder" --codec "$codec" \
    --scenario "$scenario" --timeout-ms 60000 "${stun[@]}" \
    --restart "bash $tmp/restart.sh"
  rc=$?
  if [ "$scenario" = lifecycle ]; then
    # the video ended: a new session, idle, then a reload resuming it
    "$client" -n 1 -t 15 --reload "ws://127.0.0.1:$port/ws" ||
      { echo "FAIL: webrtc-test-client --reload on an idle session"; rc=1; }
  fi
  kill -0 "$(cat "$tmp/pid" 2>/dev/null || echo "$pid")" 2>/dev/null ||
    { echo "FAIL: the $encoder server died"; rc=1; }
  # the peer that the reload replaced was released (the first peer of
  # session 1: by takeover or with its WebSocket)
  grep -qE "session 1: peer 1 released" "$log" ||
    { echo "FAIL: the reloaded page's old peer was not released"; rc=1; }
  stop_server
  [ $rc -eq 0 ] || { echo "--- $encoder server log"; tail -60 "$log"; }
  return $rc
}

rc=0
prev=""
# a STUN address where nothing answers: ICE on 127.0.0.1 does not need it
run_one vp8 VP8 full --peer-timeout 4 --resume-timeout 5 \
  --stun stun:127.0.0.1:3478 || rc=1
if gst-inspect-1.0 x264enc >/dev/null 2>&1; then
  run_one x264 H264 basic || rc=1
else
  echo "x264enc not installed: H.264 not checked"
fi
# 61 frames: 13 + 3 x 16, four chunks of the tiny model
run_one vp8 VP8 lifecycle --set frames=61 || rc=1
exit $rc

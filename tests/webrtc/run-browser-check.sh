#!/usr/bin/env bash
# suite browser: the WebRTC page in headless Chromium (Debian chromium, from
# tools/deps.sh), driven by playwright-core installed with npm into the build
# folder.  Starts lingbot-webrtc-server on 127.0.0.1 with a tiny random model,
# then runs tests/webrtc/browser-check.mjs: the page connects, ArrowUp is
# held, video frames are decoded and the key's echo comes back.
# Exits 77 only when chromium (or node/npm) is not installed.
#   run-browser-check.sh SERVER MKMODEL SPM_MODEL WORKDIR
set -uo pipefail
server=$1 mkmodel=$2 spm=$3 work=$4
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
cleanup () { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

"$mkmodel" --preset tiny --chunk 4 --full --tokenizer "$spm" --out "$tmp/model" --quiet ||
  { echo "FAIL: mkmodel"; exit 1; }
gst-launch-1.0 -q videotestsrc num-buffers=1 pattern=smpte ! \
  video/x-raw,width=320,height=180 ! jpegenc ! filesink location="$tmp/start.jpg" ||
  { echo "FAIL: start image"; exit 1; }

"$server" --address 127.0.0.1 --port 0 --model "$tmp/model" --image "$tmp/start.jpg" \
  --prompt "a meadow" --devices cpu:1 --set width=128 --set height=128 \
  --www "$src/examples/webrtc/www" >"$tmp/server.log" 2>&1 &
pid=$!
url=""
for _ in $(seq 1 100); do
  url=$(grep -oE 'http://127\.0\.0\.1:[0-9]+/' "$tmp/server.log" | head -n 1)
  [ -n "$url" ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[ -n "$url" ] || { echo "FAIL: server did not start"; cat "$tmp/server.log"; exit 1; }

NODE_PATH="$work/node_modules" timeout 150 node "$src/tests/webrtc/browser-check.mjs" \
  "$url" --chromium /usr/bin/chromium --out "$tmp/shot" --hold-ms 6000 --timeout-ms 90000
rc=$?
[ $rc -eq 0 ] || { echo "--- server log"; tail -40 "$tmp/server.log"; }
exit $rc

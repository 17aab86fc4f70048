#!/usr/bin/env bash
# lingbot-gst WebRTC demo: install what is missing, build, write the demo
# model (as tools/demo.sh does), start lingbot-webrtc-server on 127.0.0.1 and
# print the URL to open in a browser on the same machine.  Hold the arrow
# keys (or WASD, IJKL) in the page to steer; Ctrl-C stops the server.
#
#   ./tools/webrtc-demo.sh [--model DIR] [--image START.jpg] [--port N]
#
# --port is 1..65535 (default 8080): the URL printed is the one to open.
#
# Environment: DEVICES (cpu:2), WIDTH/HEIGHT (256x144: a live session on
# two CPU cores), PROMPT, ENCODER (vp8; x264 for H.264).  See docs/webrtc.md.
set -euo pipefail
cd "$(dirname "$0")/.."

model="" image="" port=8080
usage() { echo "webrtc-demo.sh: $* (see --help)" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --model|--image|--port) [ $# -ge 2 ] || usage "$1 needs a value" ;;
  esac
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --image) image="$2"; shift 2 ;;
    --port) port="$2"; shift 2
      # the URL printed is the one to open: a fixed port, not 0 (any)
      if ! [[ "$port" =~ ^[0-9]{1,5}$ ]] || [ "$port" -lt 1 ] ||
        [ "$port" -gt 65535 ]; then
        usage "invalid --port '$port': 1..65535"
      fi ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) usage "unknown argument $1" ;;
  esac
done

. tools/demo-common.sh
extra=()
[ -n "$image" ] || extra=("${LINGBOT_DEMO_DEPS[@]}")
lingbot_demo_build ${extra[@]+"${extra[@]}"}
[ -n "$model" ] || lingbot_demo_model demo-out
image=${image:-$LINGBOT_DEMO_IMAGE}
lingbot_demo_env
echo "== open http://127.0.0.1:$port/ in a browser on this machine (Ctrl-C stops)"
exec "$BUILD/examples/webrtc/lingbot-webrtc-server" --address 127.0.0.1 \
  --port "$port" --model "$model" --image "$image" \
  --prompt "${PROMPT:-a green meadow under a wide sky}" \
  --devices "${DEVICES:-cpu:2}" \
  --set "width=${WIDTH:-256}" --set "height=${HEIGHT:-144}" \
  --encoder "${ENCODER:-vp8}" \
  --www "$PWD/examples/webrtc/www"

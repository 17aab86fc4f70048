#!/usr/bin/env bash
# lingbot-gst: a trace-driven session to an MP4 file with gst-launch-1.0
#
#   examples/launch-mp4.sh MODEL_DIR IMAGE.jpg [TRACE.json] [OUT.mp4]
#
# TRACE.json defaults to the project's keyboard trace,
# examples/data/demo-trace.json.  OUT.mp4 defaults to demo-out/lingbot.mp4
# under the repository root (demo-out/ is gitignored); the script prints
# where it wrote the file.
#
# Environment: PROMPT (text prompt, needs the model's umT5) or PROMPT_EMBEDS
# (a lingbot-encode-prompt file), DEVICES (cpu:1; "0,1,2,3" for four GPUs),
# FRAMES (77), WIDTH/HEIGHT (0 = 480p pixel area), SEED (42), BUILD (the
# meson build directory whose gst/ holds libgstlingbot.so, default build).
#
# On the small model of README.md ("The small model"), from the source root:
#   ./tools/demo.sh --model-only
#   WIDTH=64 HEIGHT=64 FRAMES=29 examples/launch-mp4.sh demo-out/demo-model \
#     tests/data/gpu-start.jpg
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
model="${1:?usage: $0 MODEL_DIR IMAGE.jpg [TRACE.json] [OUT.mp4]}"
image="${2:?usage: $0 MODEL_DIR IMAGE.jpg [TRACE.json] [OUT.mp4]}"
trace="${3:-$root/examples/data/demo-trace.json}"
out="${4:-$root/demo-out/lingbot.mp4}"
build="${BUILD:-$root/build}"

if [ -d "$build/gst" ]; then
  export GST_PLUGIN_PATH="$build/gst${GST_PLUGIN_PATH:+:$GST_PLUGIN_PATH}"
fi

prompt_args=()
if [ -n "${PROMPT_EMBEDS:-}" ]; then
  prompt_args=(prompt-embeds="$PROMPT_EMBEDS")
else
  prompt_args=(prompt="${PROMPT:-a medieval town square at noon, cinematic}")
fi

mkdir -p "$(dirname "$out")"

gst-launch-1.0 -e \
  lingbotcontrolsrc location="$trace" ! \
  lingbotgen model-path="$model" image-location="$image" "${prompt_args[@]}" \
    devices="${DEVICES:-cpu:1}" frames="${FRAMES:-77}" seed="${SEED:-42}" \
    width="${WIDTH:-0}" height="${HEIGHT:-0}" ! \
  lingbotvaedec ! videoconvert ! \
  x264enc tune=zerolatency speed-preset=ultrafast ! h264parse ! \
  mp4mux ! filesink location="$out"

echo "wrote $(cd "$(dirname "$out")" && pwd)/$(basename "$out")"

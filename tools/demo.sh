#!/usr/bin/env bash
# lingbot-gst demo: install what is missing, build, run the main job.
#
# The main job on a machine without a GPU: a small random-weight model in the
# published LingBot-World v2 layout (DiT, Wan2.1 VAE, umT5, tokenizer), a
# photo from a Debian package as the start image, the project's own keyboard
# trace (tools/demo-trace.json), through the GStreamer pipeline
#
#   lingbotcontrolsrc ! lingbotgen ! lingbotvaedec ! videoconvert ! x264enc
#     ! mp4mux ! filesink
#
# It writes build/demo/lingbot-demo.mp4 and prints one line per chunk.  The
# weights are random, so the video shows noise-like texture steered by the
# camera; with a real checkpoint pass MODEL=/path/to/lingbot-world-v2.
# Environment: MODEL, IMAGE, DEVICES (cpu:2), FRAMES (77), WIDTH/HEIGHT
# (416x240), PROMPT.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/deps.sh
lingbot_install_deps "${LINGBOT_DEMO_DEPS[@]}"

BUILD=${LINGBOT_BUILD_DIR:-build}
[ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" >/dev/null
ninja -C "$BUILD" >/dev/null

out="$BUILD/demo"
mkdir -p "$out"
model=${MODEL:-$out/tiny-model}
if [ -z "${MODEL:-}" ] && [ ! -f "$model/google/umt5-xxl/spiece.model" ]; then
  echo "== writing a tiny random model to $model"
  "$BUILD/tools/lingbot-mkmodel" --preset tiny --chunk 4 --full \
    --tokenizer "$BUILD/tests/text/test-spm.model" --out "$model" --quiet
fi
image=${IMAGE:-/usr/share/backgrounds/mate/nature/GreenMeadow.jpg}

echo "== lingbotcontrolsrc ! lingbotgen ! lingbotvaedec ! x264enc ! mp4mux"
echo "   model $model, image $image, devices ${DEVICES:-cpu:2}"
export GST_PLUGIN_PATH="$PWD/$BUILD/gst"
t0=$(date +%s.%N)
gst-launch-1.0 -e -m \
  lingbotcontrolsrc location=tools/demo-trace.json ! \
  lingbotgen model-path="$model" image-location="$image" \
    prompt="${PROMPT:-a green meadow under a wide sky, walking forward}" \
    devices="${DEVICES:-cpu:2}" frames="${FRAMES:-77}" seed=7 \
    width="${WIDTH:-416}" height="${HEIGHT:-240}" ! \
  lingbotvaedec ! videoconvert ! \
  x264enc tune=zerolatency speed-preset=ultrafast ! h264parse ! \
  mp4mux ! filesink location="$out/lingbot-demo.mp4" 2>&1 |
  grep -oE 'lingbot-chunk, index=\(guint64\)[0-9]+, frames=\(int\)[0-9]+.*compute-seconds=\(double\)[0-9.e+-]+' |
  sed -E 's/\((g?u?int(64)?|double|string)\)//g'
t1=$(date +%s.%N)
echo "== wrote $out/lingbot-demo.mp4 ($(stat -c %s "$out/lingbot-demo.mp4") bytes) in $(echo "$t1 - $t0" | bc) s"
gst-discoverer-1.0 "$out/lingbot-demo.mp4" 2>/dev/null | grep -E 'Duration|video #|Width|Height|Frame rate' || true

#!/usr/bin/env bash
# lingbot-gst demo: install what is missing, build, run the main job.
#
#   ./tools/demo.sh [--model DIR] [--image START.jpg] [--trace TRACE.json]
#   ./tools/demo.sh --model-only
#
# --model-only writes the small model and stops: the one small-model recipe
# of the docs, examples and test scripts.  The model is demo-out/demo-model
# (under the source root, gitignored; written once, kept after): a
# random-weight model in the published LingBot-World v2 layout (DiT shards +
# index, Wan2.1_VAE.pth, umT5 .pth, SentencePiece tokenizer; lingbot-mkmodel
# --preset demo --full: DiT dim 128, text dim 64, 3 layers; 6.7 MB).
#
# The main job on a machine without a GPU: that model, a photograph from a
# Debian package (mate-backgrounds: nature/GreenMeadow.jpg, GPL-2+) as the
# start image, the project's own keyboard trace
# (examples/data/demo-trace.json), 77 frames, through the GStreamer pipeline
#
#   lingbotcontrolsrc ! lingbotgen ! lingbotvaedec ! videoconvert ! x264enc
#     ! h264parse ! mp4mux ! filesink location=demo-out/demo.mp4
#
# run by tools/demo-run.py (PyGObject), which prints a progress line per
# decoded chunk, one line of chunk metrics per chunk and what the file holds.
# The demo weights are random: the video is noise shaped by the pipeline and
# steered by the camera, not a world.  With the real checkpoint, pass
# --model /path/to/lingbot-world-v2-14b-causal-fast (lingbotgen's model-path).
# Environment: DEVICES (cpu:2; GPUs: 0,1,2,3), PRECISION (fp32; GPUs: bf16),
# FRAMES (77), WIDTH/HEIGHT (416x240; the model's 832x480: WIDTH=832
# HEIGHT=480), PROMPT, LINGBOT_BUILD_DIR (build), LINGBOT_NO_INSTALL (1:
# name missing packages instead of installing them).
set -euo pipefail
cd "$(dirname "$0")/.."

model="" image="" trace="" model_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --image) image="$2"; shift 2 ;;
    --trace) trace="$2"; shift 2 ;;
    --model-only) model_only=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "demo.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

. tools/demo-common.sh
if [ "$model_only" = 1 ]; then
  lingbot_demo_build
  lingbot_demo_model demo-out
  echo "$model"
  exit 0
fi
# the start photo's package only when no --image replaces it
extra=()
[ -n "$image" ] || extra=("${LINGBOT_DEMO_DEPS[@]}")
lingbot_demo_build ${extra[@]+"${extra[@]}"}

out=demo-out
mkdir -p "$out"
[ -n "$model" ] || lingbot_demo_model "$out"
image=${image:-$LINGBOT_DEMO_IMAGE}
trace=${trace:-examples/data/demo-trace.json}

echo "== lingbotcontrolsrc ! lingbotgen ! lingbotvaedec ! x264enc ! mp4mux"
echo "   model $model, image $image, trace $trace, devices ${DEVICES:-cpu:2}," \
  "precision ${PRECISION:-fp32}"
lingbot_demo_env
exec "$LINGBOT_PYTHON" tools/demo-run.py --model "$model" --image "$image" \
  --trace "$trace" --out "$out/demo.mp4" \
  --prompt "${PROMPT:-a green meadow under a wide sky, walking forward}" \
  --devices "${DEVICES:-cpu:2}" --precision "${PRECISION:-fp32}" \
  --frames "${FRAMES:-77}" --width "${WIDTH:-416}" --height "${HEIGHT:-240}"

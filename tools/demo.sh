#!/usr/bin/env bash
# lingbot-gst demo: install what is missing, build, run the main job.
#
#   ./tools/demo.sh [--model DIR] [--image START.jpg] [--trace TRACE.json]
#
# The main job on a machine without a GPU: a small random-weight model in the
# published LingBot-World v2 layout (DiT shards + index, Wan2.1_VAE.pth,
# umT5 .pth, SentencePiece tokenizer), a photograph from a Debian package
# (mate-backgrounds: nature/GreenMeadow.jpg, GPL-2+) as the start image, the
# project's own keyboard trace (examples/data/demo-trace.json), 77 frames,
# through the GStreamer pipeline
#
#   lingbotcontrolsrc ! lingbotgen ! lingbotvaedec ! videoconvert ! x264enc
#     ! h264parse ! mp4mux ! filesink location=demo-out/demo.mp4
#
# and prints one line of chunk metrics per chunk.  The demo weights are
# random: the video is noise shaped by the pipeline and steered by the
# camera, not a world.  With the real checkpoint, pass --model
# /path/to/lingbot-world-v2-14b-causal-fast (lingbotgen's model-path).
# Environment: DEVICES (cpu:2; GPUs: 0,1,2,3), PRECISION (fp32; GPUs: bf16),
# FRAMES (77), WIDTH/HEIGHT (416x240; the model's 832x480: WIDTH=832
# HEIGHT=480), PROMPT, LINGBOT_BUILD_DIR (build).
set -euo pipefail
cd "$(dirname "$0")/.."

model="" image="" trace=""
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --image) image="$2"; shift 2 ;;
    --trace) trace="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "demo.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

. tools/demo-common.sh
lingbot_demo_build

out=demo-out
mkdir -p "$out"
[ -n "$model" ] || lingbot_demo_model "$out"
image=${image:-$LINGBOT_DEMO_IMAGE}
trace=${trace:-examples/data/demo-trace.json}

echo "== lingbotcontrolsrc ! lingbotgen ! lingbotvaedec ! x264enc ! mp4mux"
echo "   model $model, image $image, trace $trace, devices ${DEVICES:-cpu:2}," \
  "precision ${PRECISION:-fp32}"
lingbot_demo_env
t0=$(date +%s.%N)
total=${FRAMES:-77}
# progress as it happens: each decoded chunk (lingbotvaedec's
# lingbot-decode message) with the frames so far, the rate and an ETA;
# gst-launch-1.0's whole output goes to gst-launch.log
progress() {
  local done=0 line idx n now el
  while IFS= read -r line; do
    printf '%s\n' "$line" >>"$out/gst-launch.log"
    case $line in
      *"lingbot-decode, index=(guint64)"*)
        idx=${line#*index=(guint64)}; idx=${idx%%,*}
        n=${line#*frames=(int)}; n=${n%%,*}
        done=$((done + n))
        now=$(date +%s.%N)
        el=$(echo "$now - $t0" | bc)
        if [ "$total" -gt 0 ]; then
          printf '   chunk %s: %d/%d frames, %.1f s, %.2f fps, ETA %.0f s\n' \
            "$idx" "$done" "$total" "$el" "$(echo "$done / $el" | bc -l)" \
            "$(echo "$el * ($total - $done) / $done" | bc -l)"
        else
          printf '   chunk %s: %d frames, %.1f s, %.2f fps\n' "$idx" "$done" \
            "$el" "$(echo "$done / $el" | bc -l)"
        fi ;;
    esac
  done
}
: >"$out/gst-launch.log"
set +e
gst-launch-1.0 -e -m \
  lingbotcontrolsrc location="$trace" ! \
  lingbotgen model-path="$model" image-location="$image" \
    prompt="${PROMPT:-a green meadow under a wide sky, walking forward}" \
    devices="${DEVICES:-cpu:2}" precision="${PRECISION:-fp32}" \
    frames="$total" seed=7 \
    width="${WIDTH:-416}" height="${HEIGHT:-240}" ! \
  lingbotvaedec ! videoconvert ! \
  x264enc tune=zerolatency speed-preset=ultrafast ! h264parse ! \
  mp4mux ! filesink location="$out/demo.mp4" 2>&1 | progress
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  tail -20 "$out/gst-launch.log"
  exit 1
fi
t1=$(date +%s.%N)
grep -oE 'lingbot-chunk, index=\(guint64\)[0-9]+, frames=\(int\)[0-9]+.*compute-seconds=\(double\)[0-9.e+-]+' \
  "$out/gst-launch.log" | sed -E 's/\((g?u?int(64)?|double|string|boolean)\)//g'
steady=$(grep -oE 'steady-fps=\(double\)[0-9.e+-]+' "$out/gst-launch.log" |
  tail -1 | sed -E 's/.*\)//')
[ -n "$steady" ] && printf '== steady %.2f fps (chunks after the first, compute)\n' "$steady"
echo "== wrote $out/demo.mp4 ($(stat -c %s "$out/demo.mp4") bytes) in $(echo "$t1 - $t0" | bc) s"
gst-discoverer-1.0 "$out/demo.mp4" 2>/dev/null | grep -E 'Duration|Width|Height|Frame rate' || true

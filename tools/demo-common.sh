# lingbot-gst: what tools/demo.sh and tools/webrtc-demo.sh share.  Sourced
# from the source root (where both scripts cd first), under set -euo
# pipefail; it sources tools/deps.sh.

. tools/deps.sh

# the start image unless --image names one (mate-backgrounds, GPL-2+)
LINGBOT_DEMO_IMAGE=/usr/share/backgrounds/mate/nature/GreenMeadow.jpg

# Debian's python3, the one python3-gi is for (another python3 first on the
# PATH, e.g. pyenv's, has no gi module)
LINGBOT_PYTHON=/usr/bin/python3

# lingbot_demo_build [EXTRA_PACKAGE...]: install what is missing (and the
# extra packages) and build; sets BUILD (LINGBOT_BUILD_DIR, default build).
# When there is something to build it says so (the first build takes about
# 2 minutes on 2 cores) and writes meson's and ninja's output to
# $BUILD/demo-build.log, whose end it shows if the build fails.
lingbot_demo_build () {
  lingbot_install_deps "$@"
  BUILD=${LINGBOT_BUILD_DIR:-build}
  local log="$BUILD/demo-build.log"
  if [ ! -f "$BUILD/build.ninja" ]; then
    echo "== building in $BUILD (the first time about 2 minutes on 2 cores; log: $log)"
    mkdir -p "$BUILD"
    meson setup "$BUILD" > "$log.setup" 2>&1 || {
      tail -n 20 "$log.setup" >&2; return 1; }
    mv "$log.setup" "$log"
  elif ! ninja -C "$BUILD" -n 2>/dev/null | grep -q '^ninja: no work to do'; then
    echo "== building in $BUILD (log: $log)"
    : > "$log"
  fi
  ninja -C "$BUILD" >> "${log}" 2>&1 || {
    echo "demo: the build failed; the end of $log:" >&2
    tail -n 20 "$log" >&2; return 1; }
}

# lingbot_demo_model DIR: sets model to DIR/demo-model, the small
# random-weight model in the published layout, written there once (the one
# small-model recipe: ./tools/demo.sh --model-only writes demo-out/demo-model).
lingbot_demo_model () {
  model="$1/demo-model"
  if [ ! -f "$model/google/umt5-xxl/spiece.model" ]; then
    echo "== writing a small random-weight model to $model"
    mkdir -p "$1"
    "$BUILD/tools/lingbot-mkmodel" --preset demo --full \
      --tokenizer "$BUILD/tests/text/test-spm.model" --out "$model" --quiet
  fi
}

# lingbot_demo_env: the environment of a run: OpenBLAS's kernels for this
# CPU even where OpenBLAS does not know the model
# (tools/openblas-coretype.sh), and the plugins of $BUILD.
lingbot_demo_env () {
  : "${OPENBLAS_CORETYPE:=$(tools/openblas-coretype.sh)}"
  [ -z "$OPENBLAS_CORETYPE" ] || export OPENBLAS_CORETYPE
  export GST_PLUGIN_PATH="$PWD/$BUILD/gst"
}

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
# extra packages) and build quietly; sets BUILD (LINGBOT_BUILD_DIR, default
# build).
lingbot_demo_build () {
  lingbot_install_deps "$@"
  BUILD=${LINGBOT_BUILD_DIR:-build}
  [ -f "$BUILD/build.ninja" ] || meson setup "$BUILD" >/dev/null
  ninja -C "$BUILD" >/dev/null
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

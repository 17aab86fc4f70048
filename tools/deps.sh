#!/usr/bin/env bash
# lingbot-gst: the one list of system packages the project needs (Debian 12).
# Sourced by tools/test.sh, tools/demo.sh and .ci/run; run directly to install.
# The CUDA toolkit (nvcc, cuBLASLt, cuDNN, NCCL) is not a Debian package here:
# when /usr/local/cuda exists the CUDA module is built, otherwise skipped.

LINGBOT_DEPS=(
  # build
  gcc meson ninja-build pkg-config python3
  # libraries
  libglib2.0-dev libjson-glib-dev libzip-dev libopenblas-dev
  libopenblas-openmp-dev   # BLAS and OpenMP in one thread pool (meson.build)
  libjpeg62-turbo-dev
  # prompt tokenizer: libsentencepiece + spm_train (test model), C++ shim
  libsentencepiece-dev sentencepiece g++
  # test tools (chromium: suite browser, the WebRTC page in headless mode)
  valgrind chromium
  # the formatter and its check in suite lint (tools/format.py): GNU indent
  # for C (GStreamer's gst-indent options), clang-format for C++ and CUDA
  indent clang-format
  # suite fuzz: gcc's AddressSanitizer and UndefinedBehaviorSanitizer
  # runtimes (the sanitized corpus replay of tests/fuzz)
  libasan8 libubsan1
  # tools/lingbot-plot-bench (the chunk timeline PNG of a lingbot-bench report) and
  # its test in suite bench; it runs on Debian's /usr/bin/python3
  python3-matplotlib
  # GStreamer plugin (gst/): headers + gst-check, gst-launch/inspect, the
  # elements the tests and examples use (videoconvert, appsink, jpegenc/dec,
  # mp4mux, x264enc)
  libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev gstreamer1.0-tools
  gstreamer1.0-plugins-base gstreamer1.0-plugins-good
  gstreamer1.0-plugins-ugly
  # WebRTC example + suite webrtc: webrtcbin and its libraries (-bad), ICE
  # (libnice plugin), the signalling/page server (libsoup 3)
  libgstreamer-plugins-bad1.0-dev gstreamer1.0-plugins-bad gstreamer1.0-nice
  libsoup-3.0-dev
  # suite webrtc (webrtc-nat): a session through a TURN relay, the client
  # behind a NAT, in network namespaces (ip netns, veth, MASQUERADE)
  coturn iproute2 iptables
  # suite webrtc (webrtc-fleet-nginx): the documented nginx front door
  # (examples/webrtc/nginx) before two server processes
  nginx
  # GObject introspection of libgstlingbot-1.0 (gst-libs/gst/lingbot,
  # option introspection): g-ir-scanner and -compiler, GLib's GIRs, Gst-1.0's
  # (libgstreamer1.0-dev) and its typelib; the Python test (tests/gst
  # test-gi.py) with PyGObject and the -base typelibs (GstApp: appsink)
  gobject-introspection libgirepository1.0-dev gir1.2-gstreamer-1.0
  python3-gi gir1.2-gst-plugins-base-1.0
  # test x-keys (suite elements): a key held in a real X video sink's
  # window, auto-repeated by the X server (Xvfb, xdotool, ximagesink)
  xvfb xdotool gstreamer1.0-x
)

# Only tools/fuzz.sh needs these: clang and its libFuzzer runtime (the
# fuzz-NAME targets of -Dfuzzing=enabled).
LINGBOT_FUZZ_DEPS=(
  clang libclang-rt-dev
)

# Only the demo scripts need these: the start photo of the demo
# (/usr/share/backgrounds/mate/nature/GreenMeadow.jpg), unless --image
# names another.  Everything else the demo runs is in the list above
# (tools/demo-run.py: python3-gi, gir1.2-gst-plugins-base-1.0; the test
# demo-deps checks this).  gstreamer1.0-x (ximagesink, xvimagesink) is for
# the README's window line: with no X or GL video sink, autovideosink falls
# back to dfbvideosink, which crashes without a display.
LINGBOT_DEMO_DEPS=(
  mate-backgrounds gstreamer1.0-x
)

# lingbot_install_deps [EXTRA_PACKAGE...]: install what is missing of the
# list above plus the extra packages; with LINGBOT_NO_INSTALL=1 (the tests
# that run the demo scripts) only name what is missing, on stderr.
lingbot_install_deps () {
  local missing=()
  for p in "${LINGBOT_DEPS[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
      missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    return 0
  fi
  if [ "${LINGBOT_NO_INSTALL:-0}" = 1 ]; then
    echo "deps: missing ${missing[*]} (LINGBOT_NO_INSTALL=1: not installed)" >&2
    return 0
  fi
  echo "deps: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq || return 1
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || return 1
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  lingbot_install_deps
fi

#!/usr/bin/env bash
# lingbot-gst: `meson install --destdir` into a temporary folder, then build
# and run programs against that tree with pkg-config's flags alone
# (suite install)
# SPDX-License-Identifier: LGPL-2.1-or-later
#
#   test-install.sh MESON BUILD_ROOT SOURCE_DIR PREFIX LIBDIR VERSION CC...
#
# The two .pc files are copied with their prefix= moved into the DESTDIR
# (every other path in them is ${prefix}-relative, which this checks too):
# PKG_CONFIG_SYSROOT_DIR would also move glib's and GStreamer's own paths.
# Checks: exactly the expected files are installed (headers only under
# include/lingbot-1.0/gst/lingbot and include/lingbot-1.0/lingbot, every
# program named lingbot-*, both libraries in libdir and only the plugin in
# the plugin directory; the CUDA module, the WebRTC server and the GIR
# where built: LINGBOT_CUDA, LINGBOT_WEBRTC, LINGBOT_GIR = 1); nothing
# installed names the build or source tree (debug info aside); the
# installed tools run from the DESTDIR (lingbot-bench finding the installed
# plugin relative to itself; LINGBOT_SPM, a tokenizer for their model);
# the build tree's plugin folder holds the plugin alone and
# gst-inspect-1.0 -b blacklists nothing; every installed header compiles
# on its own; test-app.c
# (lingbot-1.0) and test-gst.c (gstlingbot-1.0) build with -Werror and
# print the expected lines; GstLingbot-1.0's GIR and typelib are in
# place and the typelib loads the installed library (environment:
# LINGBOT_GIR=1 when the build made them, LINGBOT_GI_PYTHON a python3
# with PyGObject); examples/embed.c builds.
set -euo pipefail
meson=$1 build=$2 src=$3 prefix=$4 libdir=$5 version=$6
shift 6
cc=("$@")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest
fail=0
check() {  # check WHAT WANT HAVE
  if [ "$2" == "$3" ]; then
    echo "ok: $1"
  else
    echo "FAIL: $1 (diff want have):"
    diff <(printf '%s\n' "$2") <(printf '%s\n' "$3") | sed 's/^/  /' || true
    fail=1
  fi
}

"$meson" install -C "$build" --destdir "$dest" --no-rebuild --quiet

root=$dest$prefix
lib=$root/$libdir
inc=$root/include/lingbot-1.0
check "liblingbot soname" "liblingbot.so.1" \
  "$(objdump -p "$lib/liblingbot.so" | awk '/SONAME/ { print $2 }')"
# the installed OpenBLAS advice (kernels/cpu/isa.c names it) runs and
# prints what the source tree's script prints
check "lingbot-openblas-coretype" "$("$src/../../tools/openblas-coretype.sh")" \
  "$("$root/bin/lingbot-openblas-coretype")"
# everything installed, and nothing else: the headers only under
# include/lingbot-1.0/gst/lingbot (the GStreamer helper library,
# <gst/lingbot/...>) and include/lingbot-1.0/lingbot (liblingbot's public
# API alone: lingbot.h and the control.h it includes), every program
# named lingbot-*; the CUDA module, the WebRTC server and page and the
# GIR only where the build made them (LINGBOT_CUDA, LINGBOT_WEBRTC,
# LINGBOT_GIR)
want_files=(
  bin/lingbot-bench bin/lingbot-encode-prompt bin/lingbot-generate
  bin/lingbot-inspect bin/lingbot-mkmodel bin/lingbot-openblas-coretype
  bin/lingbot-plot-bench
  include/lingbot-1.0/gst/lingbot/gstlingbotcontext.h
  include/lingbot-1.0/gst/lingbot/gstlingbotmemory.h
  include/lingbot-1.0/gst/lingbot/gstlingbotmeta.h
  include/lingbot-1.0/gst/lingbot/lingbot.h
  include/lingbot-1.0/lingbot/control.h include/lingbot-1.0/lingbot/lingbot.h
  "$libdir/gstreamer-1.0/libgstlingbot.so"
  "$libdir/libgstlingbot-1.0.so" "$libdir/libgstlingbot-1.0.so.1"
  "$libdir/libgstlingbot-1.0.so.$version"
  "$libdir/liblingbot.so" "$libdir/liblingbot.so.1"
  "$libdir/liblingbot.so.$version"
  "$libdir/pkgconfig/gstlingbot-1.0.pc" "$libdir/pkgconfig/lingbot-1.0.pc"
)
[ "${LINGBOT_CUDA:-0}" = 1 ] &&
  want_files+=("$libdir/lingbot/lingbot-backend-cuda.so")
[ "${LINGBOT_WEBRTC:-0}" = 1 ] &&
  want_files+=(bin/lingbot-webrtc-server share/lingbot-gst/webrtc/app.js
    share/lingbot-gst/webrtc/index.html share/lingbot-gst/webrtc/style.css)
[ "${LINGBOT_GIR:-0}" = 1 ] &&
  want_files+=("$libdir/girepository-1.0/GstLingbot-1.0.typelib"
    share/gir-1.0/GstLingbot-1.0.gir)
check "installed files" "$(printf '%s\n' "${want_files[@]}" | sort)" \
  "$(cd "$root" && find . ! -type d | sed 's|^\./||' | sort)"
check "nothing installed outside the prefix" "${prefix#/}" \
  "$(cd "$dest" && find . -mindepth 1 ! -type d | sed 's|^\./||' |
     cut -d/ -f1-$(($(tr -cd / <<< "$prefix" | wc -c))) | sort -u)"
check "headers under gst/lingbot/ and lingbot/ only" "" \
  "$(cd "$root" && find include -type f |
     { grep -v -E '^include/lingbot-1\.0/(gst/lingbot|lingbot)/' || true; })"
check "programs named lingbot-*" "" \
  "$(cd "$root/bin" && find . -mindepth 1 | sed 's|^\./||' |
     { grep -v '^lingbot-' || true; })"

mkdir "$tmp/pc"
for pc in lingbot-1.0 gstlingbot-1.0; do
  if [ ! -f "$lib/pkgconfig/$pc.pc" ]; then
    echo "FAIL: $lib/pkgconfig/$pc.pc is not installed"
    exit 1
  fi
  sed "s|^prefix=.*|prefix=$root|" "$lib/pkgconfig/$pc.pc" > "$tmp/pc/$pc.pc"
done
export PKG_CONFIG_PATH=$tmp/pc
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR || true
check "pkg-config --modversion" "$version $version" \
  "$(pkg-config --modversion lingbot-1.0) $(pkg-config --modversion gstlingbot-1.0)"
check "lingbot-1.0 paths" "-I$inc -L$lib -llingbot" \
  "$(pkg-config --cflags-only-I --libs-only-L --libs-only-l lingbot-1.0 |
     tr ' ' '\n' | grep -E "^-[IL]$root|^-llingbot" | tr '\n' ' ' | sed 's/ $//')"

app_flags=$(pkg-config --cflags --libs lingbot-1.0)
gst_flags=$(pkg-config --cflags --libs gstlingbot-1.0)
case "$app_flags $gst_flags" in
  *"$src"*|*"$build"*)
    echo "FAIL: pkg-config flags name the source or build tree"; fail=1 ;;
esac

# every header on its own (lingbot-1.0's with lingbot-1.0's flags alone)
bad=0
for h in $(cd "$inc" && find . -name '*.h' | sed 's|^\./||' | sort); do
  case $h in gst/*) flags=$gst_flags ;; *) flags=$app_flags ;; esac
  printf '#include <%s>\n' "$h" > "$tmp/one.c"
  # shellcheck disable=SC2086
  if ! "${cc[@]}" -Wall -Werror -fsyntax-only "$tmp/one.c" $flags \
      2> "$tmp/one.err"; then
    echo "FAIL: $h does not compile on its own:"; cat "$tmp/one.err"
    bad=$((bad + 1))
  fi
done
if [ "$bad" = 0 ]; then
  echo "ok: each installed header compiles on its own"
else
  fail=1
fi

export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# shellcheck disable=SC2086
"${cc[@]}" -Wall -Werror -o "$tmp/app" "$src/test-app.c" $app_flags
check "test-app output" \
  "keys d,j,w
precision bf16 LINGBOT_PRECISION_BF16
world: unknown precision 'fp8x' (choose fp32, bf16 or fp8)
world: model directory /nonexistent/lingbot-model does not exist" \
  "$("$tmp/app")"

# the installed library loads OpenBLAS's OpenMP build (its run path),
# not whichever variant the system's alternatives point at
omp_dir=/usr/lib/$("${cc[@]}" -print-multiarch 2>/dev/null)/openblas-openmp
if [ -d "$omp_dir" ]; then
  check "OpenBLAS of the installed library" "$omp_dir/libopenblas.so.0" \
    "$(ldd "$tmp/app" | awk '/libopenblas.so.0/ { print $3 }')"
fi

# shellcheck disable=SC2086
"${cc[@]}" -Wall -Werror -o "$tmp/gst" "$src/test-gst.c" $gst_flags
check "test-gst output" \
  "context lingbot.world, world type LingbotWorld
meta api GstLingbotChunkMetaAPI
allocator GstLingbotDeviceAllocator, memory type LingbotDevice, feature memory:LingbotDevice
downloads 0" \
  "$(GST_REGISTRY_1_0=$tmp/registry.bin "$tmp/gst")"

# GObject introspection (LINGBOT_GIR=1 when the build made it): the GIR in
# share/gir-1.0 and the typelib in libdir/girepository-1.0, naming the
# library and the .pc; with a python3 that has PyGObject, the installed
# typelib loads the installed library (a GError from it as test-app's)
if [ "${LINGBOT_GIR:-0}" = 1 ]; then
  check "installed GIR and typelib" \
    "$(printf '%s\n' "$libdir/girepository-1.0/GstLingbot-1.0.typelib" \
        share/gir-1.0/GstLingbot-1.0.gir)" \
    "$(cd "$root" && find . -name 'GstLingbot-1.0.*' | sed 's|^\./||' | sort)"
  check "GIR library and package" \
    'shared-library="libgstlingbot-1.0.so.1" <package name="gstlingbot-1.0"/>' \
    "$(grep -o -e 'shared-library="[^"]*"' -e '<package name="[^"]*"/>' \
        "$root/share/gir-1.0/GstLingbot-1.0.gir" | sort -r | tr '\n' ' ' |
        sed 's/ $//')"
  if [ -n "${LINGBOT_GI_PYTHON:-}" ]; then
    cat > "$tmp/load-typelib.py" <<'PY'
import os
import sys

import gi
gi.require_version("Gst", "1.0")
gi.require_version("GstLingbot", "1.0")
from gi.repository import GLib, Gst, GstLingbot

Gst.init(None)
root = os.path.realpath(sys.argv[1])
path = gi.Repository.get_default().get_typelib_path("GstLingbot")
print("typelib", os.path.realpath(path).replace(root, ""))
print(f"context {GstLingbot.WORLD_CONTEXT_TYPE}, "
      f"world type {GstLingbot.World.__gtype__.name}, "
      f"meta api {GstLingbot.chunk_meta_api_get_type().name}")
try:
    GstLingbot.World.new("/nonexistent/lingbot-model", None, None, False)
except GLib.Error as e:
    print(e.message)
# loaded by the calls above (the typelib names libgstlingbot-1.0.so.1)
with open("/proc/self/maps") as f:
    libs = {os.path.realpath(line.split()[-1]) for line in f
            if "libgstlingbot-1.0" in line}
print("library", " ".join(sorted(p.replace(root, "") for p in libs)))
PY
    check "installed typelib from Python" \
      "typelib /$libdir/girepository-1.0/GstLingbot-1.0.typelib
context lingbot.world, world type LingbotWorld, meta api GstLingbotChunkMetaAPI
world: model directory /nonexistent/lingbot-model does not exist
library /$libdir/libgstlingbot-1.0.so.$version" \
      "$(GI_TYPELIB_PATH=$lib/girepository-1.0 \
          GST_REGISTRY_1_0=$tmp/registry.bin \
          "$LINGBOT_GI_PYTHON" "$tmp/load-typelib.py" "$root" 2>&1)"
  else
    echo "ok: no python3 with PyGObject: the typelib is not loaded"
  fi
fi

# the embedding example as an application would build it (it needs a model
# to run: the gst suite runs it from the build tree)
# shellcheck disable=SC2086
if "${cc[@]}" -Wall -Werror -o "$tmp/embed" "$src/../../examples/embed.c" \
    $gst_flags; then
  echo "ok: examples/embed.c builds against the installed tree"
else
  echo "FAIL: examples/embed.c does not build against the installed tree"
  fail=1
fi

# relocatable: no path of the build or the source tree in anything
# installed, outside debug info (which names the compile folders, as in any
# -g build) and the CUDA module's .nv_fatbin (-lineinfo names its sources
# for Nsight's source view, as debug info does): installed programs find
# the CUDA module beside liblingbot.so, the plugin and the WebRTC page
# relative to the executable
srcroot=$(cd "$src/../.." && pwd -P)
buildroot=$(cd "$build" && pwd -P)
embedded=()
while IFS= read -r f; do
  if [ "$(head -c 4 "$f" | tail -c 3)" = ELF ]; then
    objcopy --strip-debug --remove-section=.nv_fatbin "$f" "$tmp/stripped"
    look=$tmp/stripped
  else
    look=$f
  fi
  if grep -q -a -F -e "$srcroot" -e "$buildroot" "$look"; then
    embedded+=("${f#"$root"/}: $(grep -o -a -F -e "$srcroot" \
        -e "$buildroot" "$look" | sort -u | tr '\n' ' ')")
  fi
done < <(find "$root" -type f | sort)
check "no build-tree or source-tree path installed" "" \
  "$(printf '%s\n' "${embedded[@]}" | sed '/^$/d')"

# the installed tools run from the DESTDIR, GST_PLUGIN_PATH unset and the
# system's plugin folders replaced by one holding coreelements alone:
# lingbot-mkmodel writes a whole tiny model (with LINGBOT_SPM, the build's
# test tokenizer, so that a prompt encodes), lingbot-inspect --check finds
# it complete, and lingbot-bench finds the elements in the installed plugin
# folder, relative to itself (bindir/../libdir/gstreamer-1.0, which
# GStreamer does not search for a /usr/local prefix), loads the DESTDIR's
# plugin and delivers every frame; the installed library opens the
# installed CUDA module
mkdir "$tmp/plugins"
sys_plugins=$(pkg-config --variable=pluginsdir gstreamer-1.0)
ln -s "$sys_plugins/libgstcoreelements.so" "$tmp/plugins/"
GST_REGISTRY_1_0=$tmp/system-registry.bin gst-launch-1.0 -q videotestsrc \
  num-buffers=1 ! video/x-raw,width=64,height=64 ! jpegenc ! \
  filesink location="$tmp/start.jpg"
(
  unset GST_PLUGIN_PATH GST_PLUGIN_PATH_1_0 LINGBOT_BACKEND_PATH
  export GST_PLUGIN_SYSTEM_PATH_1_0=$tmp/plugins
  export GST_REGISTRY_1_0=$tmp/installed-registry.bin
  "$root/bin/lingbot-mkmodel" --full --preset tiny --chunk 4 --seed 7 \
    --tokenizer "$LINGBOT_SPM" --out "$tmp/model" --quiet
  check "installed lingbot-inspect --check" "$tmp/model: OK" \
    "$("$root/bin/lingbot-inspect" --check "$tmp/model" 2>&1 | tail -n 1)"
  GST_DEBUG=GST_PLUGIN_LOADING:4 GST_DEBUG_NO_COLOR=1 \
    "$root/bin/lingbot-bench" direct --engine gst --model "$tmp/model" \
      --image "$tmp/start.jpg" --prompt "a castle" --frames 5 \
      --width 64 --height 64 --quiet --output "$tmp/bench.json" \
      2> "$tmp/bench.err" || cat "$tmp/bench.err"
  check "installed lingbot-bench loads the installed plugin" \
    "plugin \"$lib/gstreamer-1.0/libgstlingbot.so\" loaded" \
    "$(grep -o 'plugin "[^"]*libgstlingbot[^"]*" loaded' "$tmp/bench.err" |
       sort -u)"
  check "installed lingbot-bench frames at the sink" '"frames_at_sink" : 5' \
    "$(grep -o '"frames_at_sink" : [0-9]*' "$tmp/bench.json" 2>&1)"
  # the installed liblingbot opens the installed CUDA module (beside
  # itself, libdir/lingbot), whether or not a GPU then answers
  if [ "${LINGBOT_CUDA:-0}" = 1 ]; then
    LD_DEBUG=files "$root/bin/lingbot-generate" --model "$tmp/model" \
      --image "$tmp/start.jpg" --prompt "a castle" --devices 0 --frames 1 \
      --width 64 --height 64 -o "$tmp/gpu.y4m" > /dev/null 2> "$tmp/gpu.err" ||
      true
    check "installed liblingbot opens the installed CUDA module" \
      "file=$lib/lingbot/lingbot-backend-cuda.so" \
      "$(grep -o 'file=[^ ]*lingbot-backend-cuda\.so' "$tmp/gpu.err" |
         sort -u)"
  fi
  exit $fail
) || fail=1

# the installed WebRTC server serves the installed page (found relative to
# itself, bindir/../share/lingbot-gst/webrtc) and finds the installed
# plugin likewise (no GST_PLUGIN_PATH: it checks for lingbotbin before it
# listens); stopped by SIGINT after its start
if [ "${LINGBOT_WEBRTC:-0}" = 1 ]; then
  env -u GST_PLUGIN_PATH GST_REGISTRY_1_0=$tmp/webrtc-registry.bin \
    timeout -s INT 8 "$root/bin/lingbot-webrtc-server" --model "$tmp/model" \
      --image "$tmp/start.jpg" --prompt "a castle" --port 0 \
      > "$tmp/webrtc.out" 2>&1 || true
  check "installed lingbot-webrtc-server page" \
    "(page $root/share/lingbot-gst/webrtc," \
    "$(grep -o '(page [^ ]*' "$tmp/webrtc.out" || cat "$tmp/webrtc.out")"
fi

# the build tree: the plugin folder (GST_PLUGIN_PATH of the tests and
# `meson devenv`) holds the plugin alone, so GStreamer blacklists nothing
# there (the helper library is built in gst-libs/gst/lingbot)
check "build-tree plugin folder" "libgstlingbot.so" \
  "$(cd "$build/gst" && find . -maxdepth 1 -name '*.so*' ! -type d |
     sed 's|^\./||' | sort)"
check "build-tree gst-inspect-1.0 -b" "Total count: 0 blacklisted files" \
  "$(GST_PLUGIN_PATH=$build/gst GST_PLUGIN_SYSTEM_PATH_1_0=$tmp/plugins \
      GST_REGISTRY_1_0=$tmp/build-registry.bin gst-inspect-1.0 -b |
     grep -e 'Total count' -e libgst)"

exit $fail

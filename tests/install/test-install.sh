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
# Checks: the files a developer needs are installed (the headers, the .pc
# files, both libraries in libdir and only the plugin in the plugin
# directory); every installed header compiles on its own; test-app.c
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
# the two libraries with sonames (.so.0) and their development links; the
# plugin, a module, has neither
check "installed libraries and plugin" \
  "$(printf '%s\n' gstreamer-1.0/libgstlingbot.so libgstlingbot-1.0.so \
      libgstlingbot-1.0.so.0 "libgstlingbot-1.0.so.$version" liblingbot.so \
      liblingbot.so.0 "liblingbot.so.$version")" \
  "$(cd "$lib" && find . -name 'lib*.so*' | sed 's|^\./||' | sort)"
check "liblingbot soname" "liblingbot.so.0" \
  "$(objdump -p "$lib/liblingbot.so" | awk '/SONAME/ { print $2 }')"
# the installed OpenBLAS advice (kernels/cpu/isa.c names it) runs and
# prints what the source tree's script prints
check "lingbot-openblas-coretype" "$("$src/../../tools/openblas-coretype.sh")" \
  "$("$root/bin/lingbot-openblas-coretype")"
check "installed headers" \
  "$(printf '%s\n' comm/worker-group.h gst/gstlingbotcontext.h \
      gst/gstlingbotmemory.h gst/gstlingbotmeta.h kernels/backend.h \
      kernels/error.h kernels/ops-list.h kernels/ops.h kernels/tensor.h \
      lingbot/checkpoint.h lingbot/control.h lingbot/dit.h lingbot/lingbot.h \
      lingbot/scheduler.h lingbot/vae.h | sort)" \
  "$(cd "$inc" && find . -type f | sed 's|^\./||' | sort)"

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
precision bf16 LB_MATH_BF16
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
    'shared-library="libgstlingbot-1.0.so.0" <package name="gstlingbot-1.0"/>' \
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
# loaded by the calls above (the typelib names libgstlingbot-1.0.so.0)
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

exit $fail

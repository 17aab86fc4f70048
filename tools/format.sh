#!/usr/bin/env bash
# lingbot-gst: the code formatter (GStreamer's gst-indent style).
#
#   tools/format.sh [--check] [FILE...]
#
# C sources and headers (.c, .h) go through GNU indent with gst-indent's
# options (GStreamer's tools/gst-indent: 2-space indent, a space before
# call parentheses, braces on the if line, 80 columns, no tabs), run twice
# as gst-indent does so that the result is a fixed point.  C++ and CUDA
# sources (.cc, .cu, .cuh), which indent cannot parse, go through
# clang-format with the repository's .clang-format (the same rules as far
# as clang-format has them).  Without FILE: every tracked source file
# except test data and the fuzz corpus.
#
# --check: change nothing; print each file that is not formatted with the
# first lines of its diff, and exit 1 if there is one (the `format` test of
# suite lint).  Exit 77 (skip) when indent or clang-format is missing.
set -euo pipefail

check=0
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

INDENT=${INDENT:-indent}
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
for tool in "$INDENT" "$CLANG_FORMAT"; do
  if ! command -v "$tool" >/dev/null; then
    echo "format: $tool not found (tools/deps.sh installs it)" >&2
    exit 77
  fi
done

indent_opts=(--braces-on-if-line --case-brace-indentation0
  --case-indentation2 --braces-after-struct-decl-line --line-length80
  --no-tabs --cuddle-else --dont-line-up-parentheses
  --continuation-indentation4 --honour-newlines --tab-size8
  --indent-level2 --leave-preprocessor-space)

if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cc' '*.cu' '*.cuh' |
    grep -v -e '^tests/data/' -e '^tests/fuzz/corpus/')
fi

# formatted FILE: the formatted text on stdout
formatted () {
  case "$1" in
    *.c | *.h)
      "$INDENT" "${indent_opts[@]}" -st "$1" |
        "$INDENT" "${indent_opts[@]}" -st ;;
    *)
      "$CLANG_FORMAT" --style=file "$1" ;;
  esac
}

bad=0
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for f in "${files[@]}"; do
  formatted "$f" >"$tmp"
  if ! cmp -s "$f" "$tmp"; then
    if [ $check = 1 ]; then
      bad=$((bad + 1))
      echo "not formatted: $f (tools/format.sh $f)"
      diff -u "$f" "$tmp" | sed -n '3,12p' || true
    else
      cat "$tmp" >"$f"
      echo "formatted: $f"
    fi
  fi
done
if [ $check = 1 ] && [ $bad -gt 0 ]; then
  echo "format: $bad of ${#files[@]} files are not formatted; run tools/format.sh"
  exit 1
fi
exit 0

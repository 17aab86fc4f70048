#!/bin/sh
# lingbot-encode-prompt end to end on the t5_tiny weights and the
# build-time SentencePiece model: writes a prompt-embeds file, checks it.
# usage: test-encode-prompt-tool.sh LINGBOT-ENCODE-PROMPT SPM-MODEL
set -eu
tool=$1
spm=$2
t5="${LINGBOT_SOURCE_ROOT:-.}/tests/data/golden/t5_tiny.safetensors"
[ -f "$t5" ] || { echo "1..0 # SKIP $t5 missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$tool" --t5 "$t5" --tokenizer "$spm" --prompt "a fox on a frozen lake" \
  --out "$tmp/p.safetensors" --print-tokens > "$tmp/log"
cat "$tmp/log"
grep -q 'prompt_embeds \[512, 64\]' "$tmp/log"
[ -s "$tmp/p.safetensors" ]
# missing checkpoint fails with a message
if "$tool" --t5 /nonexistent.pth --tokenizer "$spm" --out "$tmp/q" 2> "$tmp/err"; then
  exit 1
fi
grep -q nonexistent "$tmp/err"

# --model DIR finds the encoder and tokenizer of the release layout, as
# lingbotgen does: the same bytes as --t5 FILE --tokenizer FILE
mkdir -p "$tmp/model/google/umt5-xxl"
cp "$t5" "$tmp/model/models_t5_umt5-xxl-enc-bf16.safetensors"
cp "$spm" "$tmp/model/google/umt5-xxl/spiece.model"
"$tool" --model "$tmp/model" --prompt "a fox on a frozen lake" \
  --out "$tmp/m.safetensors" > "$tmp/log"
cmp "$tmp/p.safetensors" "$tmp/m.safetensors"
# usage errors (exit 2) with exact messages
usage() {
  rc=0
  "$tool" "$@" --out "$tmp/q" 2> "$tmp/err" || rc=$?
  [ "$rc" -eq 2 ] || { echo "exit $rc for $*"; exit 1; }
}
usage --t5 "$tmp/model"
grep -qF "lingbot-encode-prompt: --t5 $tmp/model is a directory: give the encoder file, or the model directory as --model" "$tmp/err"
usage --model "$t5"
grep -qF "lingbot-encode-prompt: --model $t5 is not a directory" "$tmp/err"
usage --model "$tmp/model" --t5 "$t5"
grep -qF "lingbot-encode-prompt: --out and one of --model DIR or --t5 FILE are required" "$tmp/err"
# a model directory without its encoder
if "$tool" --model "$tmp/model/google" --out "$tmp/q" 2> "$tmp/err"; then
  exit 1
fi
grep -qF "text encoder not found: $tmp/model/google/models_t5_umt5-xxl-enc-bf16.pth does not exist" "$tmp/err"
echo ok

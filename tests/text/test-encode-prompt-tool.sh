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
echo ok

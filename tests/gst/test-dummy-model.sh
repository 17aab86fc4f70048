#!/usr/bin/env bash
# lingbot-gst: dummy models (lingbot-mkmodel --dummy, lingbot/dummy.c)
#   test-dummy-model.sh MKMODEL GENERATE BENCH SPM IMAGE
#
# - every preset's dummy directory is under 1 MB, and `lingbot-bench dit
#   --estimate --model DIR` prints what `--preset P` prints;
# - a dummy tiny model and the --full checkpoint of the same seed give the
#   same video byte for byte, through lingbot-generate (cpu:1, cpu:2) and
#   through the elements (gst-launch-1.0 lingbotgen ! lingbotvaedec);
# - the demo and 1.3b dummies run a chunk through lingbot-generate;
# - a 14B dummy on a machine with less memory than its float32 weights is
#   refused with a message, not an abort;
# - malformed manifests fail with exact messages.
set -euo pipefail
mkmodel=$1
generate=$2
bench=$3
spm=$4
image=$5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

for p in 14b 1.3b demo tiny; do
  "$mkmodel" --dummy --preset "$p" --tokenizer "$spm" --out "$tmp/$p" --quiet
  size=$(du -sb "$tmp/$p" | cut -f1)
  echo "# dummy $p: $size bytes"
  [ "$size" -lt 1000000 ] || fail "dummy $p is $size bytes"
  for f in transformers/config.json Wan2.1_VAE.dummy.json \
      models_t5_umt5-xxl-enc-bf16.dummy.json google/umt5-xxl/spiece.model; do
    [ -s "$tmp/$p/$f" ] || fail "dummy $p: no $f"
  done
  args=(--estimate --latent 60x104 --text-len 512 --window-full --devices 0
    --precision bf16)
  "$bench" dit --model "$tmp/$p" "${args[@]}" >"$tmp/est-model" 2>&1
  "$bench" dit --preset "$p" "${args[@]}" >"$tmp/est-preset" 2>&1
  cmp -s "$tmp/est-model" "$tmp/est-preset" ||
    { diff "$tmp/est-model" "$tmp/est-preset"; fail "$p estimate differs"; }
done
head -n 1 "$tmp/est-model"

# the same bytes as the checkpoint of the same seed
"$mkmodel" --dummy --preset tiny --chunk 4 --seed 7 --tokenizer "$spm" \
  --out "$tmp/d" --quiet
"$mkmodel" --full --preset tiny --chunk 4 --seed 7 --tokenizer "$spm" \
  --out "$tmp/f" --quiet
for m in d f; do
  for n in 1 2; do
    "$generate" --model "$tmp/$m" --image "$image" --prompt "a quiet harbour" \
      --devices cpu:$n --frames 29 --width 64 --height 64 \
      --out "$tmp/$m$n.rgb" >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "$m"; }
  done
done
for n in 1 2; do
  cmp "$tmp/d$n.rgb" "$tmp/f$n.rgb" || fail "dummy != checkpoint on cpu:$n"
done
echo "# lingbot-generate: dummy = checkpoint, cpu:1 and cpu:2," \
  "$(wc -c <"$tmp/d1.rgb") bytes"
for m in d f; do
  gst-launch-1.0 -q lingbotgen model-path="$tmp/$m" image-location="$image" \
    prompt="a quiet harbour" frames=29 width=64 height=64 ! lingbotvaedec ! \
    video/x-raw,format=RGB ! filesink location="$tmp/$m.gst.rgb" \
    >"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "gst-launch-1.0 $m"; }
done
cmp "$tmp/d.gst.rgb" "$tmp/f.gst.rgb" || fail "elements: dummy != checkpoint"
[ "$(wc -c <"$tmp/d.gst.rgb")" -eq $((29 * 64 * 64 * 3)) ] ||
  fail "elements: $(wc -c <"$tmp/d.gst.rgb") bytes"
echo "# elements: dummy = checkpoint"

# the larger presets load and run too: demo and 1.3b, one chunk at 64x64
# (the 1.3b draws 1.4 G parameters, 5.7 GB of float32; the 14B below)
for p in demo 1.3b; do
  "$generate" --model "$tmp/$p" --image "$image" --prompt "a quiet harbour" \
    --frames 13 --width 64 --height 64 --out "$tmp/$p.rgb" >"$tmp/log" 2>&1 ||
    { cat "$tmp/log"; fail "dummy $p does not run"; }
  [ "$(wc -c <"$tmp/$p.rgb")" -eq $((13 * 64 * 64 * 3)) ] ||
    fail "dummy $p: $(wc -c <"$tmp/$p.rgb") bytes"
  echo "# dummy $p: 13 frames"
done

# a dummy 14B needs 74.2 GB of host memory for its float32 weights
phys_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
if [ "$phys_kb" -lt 72438800 ]; then
  if "$generate" --model "$tmp/14b" --image "$image" --prompt x \
      --frames 13 --out "$tmp/x.rgb" >"$tmp/log" 2>&1; then
    fail "a 14B dummy loaded on a machine with $phys_kb kB"
  fi
  grep -q "dummy DiT $tmp/14b/transformers/config.json: 18544332864" \
    "$tmp/log" || { cat "$tmp/log"; fail "no memory message"; }
  grep -q "parameters need 74.2 GB of host memory (float32)" "$tmp/log" ||
    { cat "$tmp/log"; fail "no memory message"; }
  echo "# 14B dummy refused: $(tail -n 1 "$tmp/log")"
fi

# a broken copy of the dummy model in $tmp/bad: lingbot-generate fails on
# it with the exact message $2 ($1 says what was broken)
refused() {
  local what=$1 want=$2
  if "$generate" --model "$tmp/bad" --image "$image" --prompt x \
      --frames 13 --width 64 --height 64 --out "$tmp/x.rgb" >"$tmp/log" 2>&1
  then
    fail "$what accepted"
  fi
  grep -qF -- "$want" "$tmp/log" || { cat "$tmp/log"; fail "$what: $want"; }
  rm -rf "$tmp/bad"
}

# malformed manifests: exact messages
expect() {
  local file=$1 text=$2 want=$3
  cp -r "$tmp/d" "$tmp/bad"
  printf '%s' "$text" >"$tmp/bad/$file"
  refused "$file '$text'" "$want"
}
vae=Wan2.1_VAE.dummy.json
t5=models_t5_umt5-xxl-enc-bf16.dummy.json
expect $vae '{"lingbot_dummy": {"seed": 1}, "dim": "x"}' \
  "VAE $tmp/bad/$vae: dummy config: \"dim\" must be an integer in [2, 1024]"
expect $vae '{"lingbot_dummy": {"seed": 1}, "dim": 7}' \
  "VAE $tmp/bad/$vae: VAE width 7: must be even and in [2, 1024]"
expect $vae '{"lingbot_dummy": {"seed": -1}, "dim": 8}' \
  "VAE $tmp/bad/$vae: \"lingbot_dummy\" must be an object with an integer \"seed\" >= 0"
expect $vae '{"dim": 8}' \
  "VAE $tmp/bad/$vae: not a dummy manifest (no \"lingbot_dummy\" member)"
expect $vae '[1, 2]' "VAE $tmp/bad/$vae: not a JSON object"
expect $t5 '{"lingbot_dummy": {"seed": 1, "dtype": "i32"}}' \
  "text encoder $tmp/bad/$t5: \"lingbot_dummy\" dtype 'i32' is not bf16, f16 or f32"
expect $t5 '{"lingbot_dummy": {"seed": 1}, "vocab": 500, "dim": 32, "dim_attn": 32, "dim_ffn": 80, "num_heads": 4, "num_layers": 2, "num_buckets": 100000}' \
  "text encoder $tmp/bad/$t5: dummy config: \"num_buckets\" must be an integer in [1, 1024]"
expect transformers/config.json '{"dim": 64, "num_heads": 2, "num_layers": 2, "ffn_dim": 128, "text_dim": 32, "lingbot_dummy": {"seed": 1, "dtype": 5}}' \
  "$tmp/bad/transformers/config.json: \"lingbot_dummy\" dtype '(not a string)' is not bf16, f16 or f32"
expect transformers/config.json '{"dim": 64, "num_heads": 3, "lingbot_dummy": {"seed": 1}}' \
  "dummy DiT $tmp/bad/transformers/config.json: DiT config: num_heads 3 does not divide dim 64"
echo "# malformed manifests: 9 exact messages"

# a missing part: the message names every file tried and, for the text
# encoder, the way round it that an element user has
missing() {
  local file=$1 want=$2
  cp -r "$tmp/d" "$tmp/bad"
  rm "$tmp/bad/$file"
  refused "no $file" "$want"
}
missing $vae "world: VAE not found: none of $tmp/bad/Wan2.1_VAE.pth, Wan2.1_VAE.safetensors or Wan2.1_VAE.dummy.json exists"
missing $t5 "world: text encoder not found: $tmp/bad/models_t5_umt5-xxl-enc-bf16.pth does not exist, nor .safetensors or .dummy.json (without one, give prompt embeddings: lingbotgen's prompt-embeds, lingbot-generate --prompt-embeds, or load_text_encoder FALSE in LingbotWorldOptions)"
echo "# missing parts: 2 exact messages"

# the shape options (tools/tool-dit-shape.h) mean the same in both tools:
# a dummy written with overrides estimates as the preset with them, and an
# unknown preset is the same usage error (exit 2)
shape=(--preset demo --dim 96 --layers 3 --heads 3 --ffn 160 --text-dim 48)
"$mkmodel" --dummy "${shape[@]}" --tokenizer "$spm" --out "$tmp/shape" --quiet
"$bench" dit --model "$tmp/shape" "${args[@]}" >"$tmp/est-model" 2>&1
"$bench" dit "${shape[@]}" "${args[@]}" >"$tmp/est-preset" 2>&1
cmp -s "$tmp/est-model" "$tmp/est-preset" ||
  { diff "$tmp/est-model" "$tmp/est-preset"; fail "shape estimate differs"; }
grep -q '^custom, 3 layers' "$tmp/est-model" ||
  { cat "$tmp/est-model"; fail "overrides not applied"; }
for tool in "$mkmodel --out $tmp/none" "$bench dit"; do
  rc=0
  $tool --preset huge >"$tmp/log" 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || fail "$tool --preset huge: exit $rc"
  grep -qF 'unknown preset "huge" (tiny, demo, 1.3b or 14b)' "$tmp/log" ||
    { cat "$tmp/log"; fail "$tool --preset huge: message"; }
done
echo "# shape options: overrides estimate alike, unknown preset refused"
echo "ok"

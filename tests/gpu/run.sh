#!/usr/bin/env bash
# lingbot-gst: the one GPU validation script, run on a machine with a device
# (`run` tool: `tests/gpu/run.sh`).  Without a GPU it says so and exits 77
# before building anything.
#
# Ask for the larger card.  On an H200 (141 GB, ~150 GB free) every step
# runs as the figures are quoted: the 14B steps in bf16 (the 40-layer chunk
# and the product need 1.25 x 72.6 + 2 = 92.8 GB).  On an 80 GB card (H100:
# ~85 GB free) the one-GPU 14B steps run in fp8 instead (1.25 x 54.1 + 2 =
# 69.6 GB; the bf16 chunk time is then only the 40 x bf16-block estimate),
# rank 0 of 4 still in bf16 (61.0 GB); below 69.6 GB free they are skipped,
# with the figures in summary.txt.
#
# Steps, in the order of their value (headline figures first, so that a
# slow early step cannot starve them), each under its own timeout, a
# failing one not stopping the later ones (except a failed build):
#   build: unpack the carried build (tests/gpu/prepare.sh), or build
#     (-Dcuda=enabled)
#   suite: the goldens on CUDA (test-dit-cuda, test-vae-cuda), then the op
#     parity programs (every CUDA op against the CPU oracle, GEMMs,
#     attention, the tensor channel, NCCL collectives)
#   the real 14B shapes with random weights (lingbot-bench, JSON lines):
#     block-bf16, block-fp8: one DiT block (14B, 1 layer) at 832x480: 6240
#       query tokens, a full 18-frame KV window (28080 keys), 512 text
#       tokens
#     full-bf16 (full-fp8 where bf16 does not fit): the 40-layer chunk
#     rank-of-4: what rank 0 of a 4-GPU chunk computes (lingbot-bench dit
#       --rank-of 4) and the 4xH100 projection from it
#     decode: the decode beside the generation on a dummy 14B cut to 8
#       layers, serial against --decode-overlap in one lingbot-bench
#       --compare: the figure is the period ratio, serial chunk period /
#       overlapped chunk period
#     vae-bf16, vae-bf16-ndhwc: the VAE decode of one chunk at 60x104,
#       dim 96, bf16 on NCDHW and channels-last convs
#     product-direct: the product at 14B, lingbot-bench direct --engine
#       gst (the elements) on a dummy 14B, 77 frames, with the peak device
#       memory
#   then, while time is left: bench-ops (op timings at DiT-14B / VAE
#   shapes, GEMM rates), block-fp32, block-bf16-own (the own attention
#   kernel), block-bf16-f32in (f32 GEMM inputs), block-gelu-own (the GELU
#   after the GEMM), vae (fp32), ranks-one-gpu (two ranks on the one GPU
#   through the elements, devices=0,0 against 0), live-demo (key to screen
#   of a 30 s live session on the demo model, a 3 s stall injected:
#   lingbot-bench live), product-replay (a 20 s
#   replay of the product), and the kernel profiles of one 14B block,
#   bf16 and fp8 (Nsight Compute, when the machine has ncu;
#   LINGBOT_GPU_PROFILE=0: off)
#   summary.txt: every step's status and time, the gates' figures, per-op
#     parity errors, TFLOP/s, seconds per chunk, MFU, the kernel profiles,
#     the VAE decode per steady chunk and its share, the decode period
#     ratio, the product's and rank-of-4's figures
#
# Gates: each step that runs the DiT asks lingbot-bench dit --estimate
# (--rank-of 4 for rank-of-4) for its device bytes per rank and runs when
# nvidia-smi shows 1.25 x that (allocator slack) + 2 GB (CUDA context,
# workspaces) free on device 0, and the host's MemAvailable holds the f32
# weights + 4 GB; a 14B step takes bf16 where it fits, else fp8, else it
# is skipped ("gate STEP: ..." lines in summary.txt).  A step skipped by
# its gate or for want of time does not fail the run.
#
# Exit status: 0 when every suite program passed or skipped (77) and every
# step that ran exited 0; 1 when any suite program failed or timed out, or
# any step failed or timed out (summary.txt's last lines name them), or
# the build failed.
#
# Everything goes under $OUT (default ./gpu-results), 8 files at most,
# since the device tool returns at most 8: summary.txt, build.log,
# gpu-suite.log, bench-ops.jsonl (op and GEMM timings), bench-model.jsonl
# (the lingbot-bench JSON lines of the steps, each with a "step" member),
# bench-model.log (their text and stderr), profile.txt (the kernel
# profiles), and with LINGBOT_GPU_PROFILE=1 ncu.csv, the raw reports.
#
# Needs: the NVIDIA driver, the CUDA toolkit (12 or later, nvcc on PATH or
# in /usr/local/cuda), cuDNN 9 and NCCL 2 (headers for the build, the
# libraries at run time), and for the profiles Nsight Compute's ncu with
# access to the performance counters (root, or the driver option
# NVreg_RestrictProfilingToAdminUsers=0); tests/gpu/prepare.sh builds on a
# machine with the project's other dependencies and carries the build.
#
# Budget: 9 minutes on one GPU (16 cores; BUDGET_S, in seconds, raises it
# where more time is available).  Every step's timeout is the smaller of
# its own limit and what is left of BUDGET_S (less 10 s for the summary);
# a step that would get less than its minimum is skipped.  Each step's
# limit and its time on an H200: docs/performance.md "GPU procedure".
#
# For tests/gpu/test-run-sh.py (the CI test, on a machine without a GPU):
# LINGBOT_GPU_MEMINFO names the file read instead of /proc/meminfo, and
# LINGBOT_GPU_STEP_MAX_S caps every step's timeout (after the minimum
# check), so that a hung step times out in seconds.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1

if ! gpus=$(nvidia-smi -L 2>/dev/null) || ! grep -q '^GPU ' <<<"$gpus"; then
  echo "run.sh: no GPU (nvidia-smi -L lists none): nothing to validate"
  exit 77
fi

OUT=${OUT:-gpu-results}
BUDGET_S=${BUDGET_S:-530}
MEMINFO=${LINGBOT_GPU_MEMINFO:-/proc/meminfo}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
SUMMARY="$OUT/summary.txt"
MODEL_JSON="$OUT/bench-model.jsonl"
MODEL_LOG="$OUT/bench-model.log"
: >"$SUMMARY"
: >"$MODEL_JSON"
: >"$MODEL_LOG"
T0=$(date +%s)
FAILED=()
note() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET_S - ($(date +%s) - T0))); }
gb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e9 }'; }

# step_begin NAME MAX MIN: START and LIMIT (MAX, or what is left of the
# budget less 10 s for the summary); notes the skip and returns 1 when
# that is under MIN seconds
step_begin() {
  START=$(date +%s)
  LIMIT=$(($(left) - 10))
  [ "$LIMIT" -lt "$2" ] || LIMIT=$2
  if [ "$LIMIT" -lt "$3" ]; then
    note "step $1 skipped: $(left) s left (needs $3 s)"
    return 1
  fi
  local cap=${LINGBOT_GPU_STEP_MAX_S:-}
  if [ -n "$cap" ] && [ "$cap" -lt "$LIMIT" ]; then LIMIT=$cap; fi
  return 0
}
# step_end NAME RC [DETAIL]: notes the step's status and time; any status
# but 0 (124 or 137 from timeout: timed out) marks it failed
step_end() {
  local st="rc=$2"
  case $2 in 124 | 137) st="timed out (rc=$2)" ;; esac
  note "step $1 $st ($(($(date +%s) - START)) s, limit $LIMIT s)${3:+; $3}"
  [ "$2" -eq 0 ] || FAILED+=("$1")
}

note "run.sh on $(grep -c '^GPU ' <<<"$gpus") GPU(s): $(head -1 <<<"$gpus")"
# device 0's memory, once, before anything of ours runs on it
mem=$(nvidia-smi --query-gpu=memory.total,memory.free \
  --format=csv,noheader,nounits -i 0 2>/dev/null | head -1)
total_mib=$(cut -d, -f1 <<<"$mem" | tr -dc 0-9)
free_mib=$(cut -d, -f2 <<<"$mem" | tr -dc 0-9)
free_dev=$((${free_mib:-0} * 1048576))
free_kib=$(awk '/^MemAvailable/ { print $2 }' "$MEMINFO" 2>/dev/null)
free_host=$((${free_kib:-0} * 1024))
note "device 0: $(gb $((${total_mib:-0} * 1048576))) GB, $(gb "$free_dev")" \
  "GB free; host: $(gb "$free_host") GB available"

# ---- build (or unpack the build carried from tests/gpu/prepare.sh) ----
# The CUDA libraries the module needs, wherever this machine has them: the
# toolkit, the driver, and the pip wheels (nvidia-nccl-cu13 and others).
cuda_lib_dirs() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
    [ -d "$d" ] && printf '%s:' "$d"
  done
  python3 -c 'import glob, os, nvidia
for p in nvidia.__path__:
    for d in sorted(glob.glob(os.path.join(p, "*", "lib"))):
        print(d, end=":")' 2>/dev/null
}
START=$(date +%s)
LIMIT=$(($(left) - 195))
[ "$LIMIT" -lt 300 ] || LIMIT=300
if [ -f .gpu-carry/bundle.tar.xz ]; then
  BUILD=$PWD/.gpu-stage/build-gpu
  STAGE_BIN=$PWD/.gpu-stage/bin
  # GStreamer from the bundle: the core plugin the benches' pipelines use
  # (fakesink, queue) and the registry outside $OUT
  export GST_PLUGIN_SYSTEM_PATH_1_0=$PWD/.gpu-stage/gst-plugins
  cuda_libs=$(cuda_lib_dirs)
  LD_LIBRARY_PATH="$PWD/.gpu-stage/lib:$cuda_libs${LD_LIBRARY_PATH:-}"
  export LD_LIBRARY_PATH
  {
    nvidia-smi || true
    rm -rf .gpu-stage && mkdir -p .gpu-stage &&
      { tar -C .gpu-stage -xJf .gpu-carry/bundle.tar.xz ||
        python3 -c 'import sys, tarfile
tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
          .gpu-carry/bundle.tar.xz .gpu-stage; } &&
      echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH" &&
      ldd "$BUILD/kernels/cuda/lingbot-backend-cuda.so" "$BUILD/tools/lingbot-bench" &&
      ! ldd "$BUILD/kernels/cuda/lingbot-backend-cuda.so" \
        "$BUILD/tools/lingbot-bench" | grep 'not found'
  } >"$OUT/build.log" 2>&1
  rc=$?
  note "step build rc=$rc ($(($(date +%s) - START)) s; carried," \
    "tests/gpu/prepare.sh)"
else
  BUILD=$PWD/build-gpu
  STAGE_BIN=
  {
    nvidia-smi || true
    # deps, configure and build all under the step's limit
    timeout "$LIMIT" bash -c '
      . tools/deps.sh && lingbot_install_deps || exit 1
      if [ -d build-gpu ]; then
        meson setup --reconfigure build-gpu -Dcuda=enabled >/dev/null
      else
        meson setup build-gpu -Dcuda=enabled >/dev/null
      fi && ninja -C build-gpu'
  } >"$OUT/build.log" 2>&1
  rc=$?
  note "step build rc=$rc ($(($(date +%s) - START)) s, limit $LIMIT s)"
fi
if [ $rc -ne 0 ]; then
  tail -50 "$OUT/build.log"
  note "run.sh: failed: build"
  exit 1
fi
export LINGBOT_BACKEND_PATH=$BUILD/kernels/cuda
export GST_PLUGIN_PATH=$BUILD/gst GST_REGISTRY_FORK=no
GST_REGISTRY_1_0=$(mktemp /tmp/lingbot-gst-registry.XXXXXX)
export GST_REGISTRY_1_0
export LINGBOT_SOURCE_ROOT=$PWD OMP_WAIT_POLICY=passive
# OpenBLAS's kernels for the host CPU even where OpenBLAS does not know the
# model (the CPU oracle's GEMMs; tools/openblas-coretype.sh)
: "${OPENBLAS_CORETYPE:=$(tools/openblas-coretype.sh)}"
[ -z "$OPENBLAS_CORETYPE" ] || export OPENBLAS_CORETYPE
# cuDNN explains its own errors (a refused graph, a failed plan) on stderr,
# which every step below keeps in its log
export CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr
BENCH=$BUILD/tools/lingbot-bench

# ---- suite ------------------------------------------------------------
# The gpu suite's programs (without meson: a carried build has no meson
# state), the goldens first, each under a timeout, with meson's line
# format for the summary.  Returns 1 when any failed or timed out.
# shellcheck disable=SC2317  # called through bash -c
run_suite_direct() {
  local tests=(tests/dit/test-dit-cuda tests/vae/test-vae-cuda
    tests/gpu/test-gemm-parity tests/gpu/test-ops-parity
    tests/gpu/test-attention-parity tests/gpu/test-channel-cuda
    tests/gpu/test-nccl-collectives)
  local i=0 n=${#tests[@]} t s0 rc st bad=0 lim=75
  local cap=${LINGBOT_GPU_STEP_MAX_S:-}
  if [ -n "$cap" ] && [ "$cap" -lt "$lim" ]; then lim=$cap; fi
  for t in "${tests[@]}"; do
    i=$((i + 1))
    s0=$(date +%s)
    echo "==== $t"
    timeout "$lim" "$BUILD/$t" --verbose 2>&1
    rc=$?
    case $rc in
      0) st=OK ;;
      77) st=SKIP ;;
      124 | 137) st=TIMEOUT bad=1 ;;
      *) st=FAIL bad=1 ;;
    esac
    printf '%2d/%d lingbot-gst:gpu / %s %s %ss\n' "$i" "$n" \
      "$(basename "$t")" "$st" "$(($(date +%s) - s0))"
  done
  return "$bad"
}
if step_begin suite 240 30; then
  export -f run_suite_direct
  BUILD=$BUILD timeout "$LIMIT" bash -c run_suite_direct \
    >"$OUT/gpu-suite.log" 2>&1
  suite_rc=$?
  # a test the timeout cut short may have left a child (and its kernels)
  # on the GPU: nothing of the suite may run while the timings are taken
  pkill -KILL -f "$BUILD/tests/" 2>/dev/null && sleep 2
  step_end suite "$suite_rc"
  grep -E '^ *[0-9]+/[0-9]+ ' "$OUT/gpu-suite.log" | tee -a "$SUMMARY"
  grep -hE '^# (vae|dit) ' "$OUT/gpu-suite.log" | tee -a "$SUMMARY"
else
  : >"$OUT/gpu-suite.log"
fi

# ---- the 14B shapes ----------------------------------------------------
# bench STEP LIMIT ARGS...: lingbot-bench ARGS under `timeout LIMIT`, its
# JSON lines tagged with the step into bench-model.jsonl, the rest of its
# output into bench-model.log.  Returns the bench's exit status.
bench() {
  local step=$1 limit=$2
  shift 2
  echo "== $step: lingbot-bench $* (limit $limit s)" >>"$MODEL_LOG"
  timeout "$limit" "$BENCH" "$@" --json 2>>"$MODEL_LOG" |
    while IFS= read -r line; do
      case $line in
        "{"*) echo "{\"step\": \"$step\", ${line#\{}" >>"$MODEL_JSON" ;;
        *) echo "$line" >>"$MODEL_LOG" ;;
      esac
    done
  return "${PIPESTATUS[0]}"
}
# json_get STEP EVENT EXPR: a value of the last matching JSON line
json_get() {
  python3 - "$MODEL_JSON" "$1" "$2" "$3" <<'EOF'
import json, sys
path, step, event, expr = sys.argv[1:]
val = None
for line in open(path):
    try:
        o = json.loads(line)
    except ValueError:
        continue
    if o.get("step") == step and o.get("event", "") == event:
        try:
            val = eval(expr, {}, {"o": o})
        except (KeyError, TypeError, IndexError):
            pass
print("" if val is None else val)
EOF
}

SHAPE=(--preset 14b --latent 60x104 --text-len 512 --window-full)
# the 40-layer estimate for the summary's FLOP-model check
bench estimate 10 dit "${SHAPE[@]}" --devices 0 --precision bf16 --estimate

# gate STEP LAYERS RANKS PREC...: PREC (set in PREC) is the first of the
# precisions whose device bytes per rank (lingbot-bench dit --estimate of
# the 14B shape with LAYERS layers, --rank-of RANKS when RANKS > 1) fit:
# 1.25 x that + 2 GB free on device 0, and the f32 weights + 4 GB of host
# memory.  Notes the figures; returns 1 (PREC empty) when none fits.
gate() {
  local step=$1 layers=$2 ranks=$3 p b need line="" est host b32 b16 b8
  local args=("${SHAPE[@]}" --layers "$layers" --devices 0 --estimate --json)
  shift 3
  PREC=
  [ "$ranks" -gt 1 ] && args+=(--rank-of "$ranks")
  est=$("$BENCH" dit "${args[@]}" 2>>"$MODEL_LOG" | python3 -c '
import json, sys
o = json.loads(sys.stdin.readline())
m = o["memory_per_rank"]
print(o["host_weight_bytes"], *(m[p + "_weights"]["total"]
      for p in ("f32", "bf16", "fp8")))' 2>>"$MODEL_LOG")
  if [ -z "$est" ]; then
    note "gate $step: skipped: no memory estimate (bench-model.log)"
    return 1
  fi
  read -r host b32 b16 b8 <<<"$est"
  need=$((host + 4000000000))
  if [ "$need" -gt "$free_host" ]; then
    note "gate $step: skipped: host needs $(gb "$need") GB (f32 weights" \
      "+ 4 GB), has $(gb "$free_host") GB available"
    return 1
  fi
  for p in "$@"; do
    case $p in fp32) b=$b32 ;; bf16) b=$b16 ;; *) b=$b8 ;; esac
    need=$(awk -v b="$b" 'BEGIN { printf "%.0f", b * 1.25 + 2e9 }')
    line+="${line:+; }$p needs $(gb "$need") GB (1.25 x $(gb "$b") GB + 2 GB)"
    if [ "$need" -le "$free_dev" ]; then
      PREC=$p
      break
    fi
  done
  if [ -n "$PREC" ]; then
    note "gate $step: $line, device has $(gb "$free_dev") GB free: runs in $PREC"
    return 0
  fi
  note "gate $step: skipped: $line, device has $(gb "$free_dev") GB free"
  return 1
}

# block PREC STEP [VAR=VALUE]: one 14B block (1 layer) in PREC, 3 chunks,
# with one environment setting when given
block() {
  local prec=$1 step=$2 max=60 min=15
  if [ -n "${3:-}" ]; then max=30 min=10; fi
  gate "$step" 1 1 "$prec" || return 0
  step_begin "$step" $max $min || return 0
  (
    [ -z "${3:-}" ] || export "${3?}"
    bench "$step" "$LIMIT" dit "${SHAPE[@]}" --layers 1 --chunks 3 \
      --devices 0 --precision "$prec"
  )
  step_end "$step" $?
}

# direct_json FILE STEP: a lingbot-bench direct/replay report, one line
# into bench-model.jsonl (summary and chunks)
direct_json() {
  python3 - "$1" "$2" >>"$MODEL_JSON" <<'EOF2'
import json, sys
try:
    rep = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit(0)
print(json.dumps({"step": sys.argv[2], "event": "direct",
                  "config": rep.get("config", {}),
                  "summary": rep["summary"], "chunks": rep["chunks"]}))
EOF2
}
MKMODEL=$BUILD/tools/lingbot-mkmodel
SPM=$BUILD/tests/text/test-spm.model
# dummy models (lingbot-mkmodel --dummy: configs only, 262 KB; the
# weights are drawn when they load, docs/design.md "Dummy models")
MODELS=$(mktemp -d /tmp/lingbot-gpu-models.XXXXXX)
# dummy STEP DIR ARGS...: makes the dummy model DIR once; notes why not
dummy() {
  local step=$1 dir=$2
  shift 2
  [ -d "$MODELS/$dir" ] && return 0
  if [ ! -x "$MKMODEL" ] || [ ! -f "$SPM" ]; then
    note "step $step skipped: no lingbot-mkmodel or test-spm.model"
    return 1
  fi
  if ! "$MKMODEL" --dummy "$@" --tokenizer "$SPM" --out "$MODELS/$dir" \
    --quiet >>"$MODEL_LOG" 2>&1; then
    note "step $step failed: lingbot-mkmodel --dummy $*"
    FAILED+=("$step")
    return 1
  fi
}

# block-bf16, block-fp8: one 14B block, the figure every chunk time is
# projected from (40 x its steady mean).  fp8 (opt-in: e4m3 GEMM weights
# and inputs, cuBLASLt FP8 matmuls; attention as bf16) was never run on a
# GPU when added: e.g. a linear whose K or N is not a multiple of 16 is
# refused by the FP8 matmul.
block bf16 block-bf16
block fp8 block-fp8
fp8_est=$(json_get block-fp8 summary 'round(o["steady"]["mean_s"] * 40, 4)')
[ -z "$fp8_est" ] || note "40-layer chunk estimate from block-fp8: $fp8_est s"

# full-bf16 (full-fp8 where bf16 does not fit): the whole 40-layer chunk,
# full window, 2 chunks
if gate full 40 1 bf16 fp8 && step_begin "full-$PREC" 240 90; then
  bench "full-$PREC" "$LIMIT" dit "${SHAPE[@]}" --chunks 2 --devices 0 \
    --precision "$PREC"
  step_end "full-$PREC" $?
fi

# rank-of-4: one rank's share of a 4-GPU chunk (issue 2.4): lingbot-bench
# dit --rank-of 4 runs what rank 0 of 4 computes (its token band, 10 of
# the 40 heads, its KV cache) on device 0, the exchanges as device copies
# of the real sizes; it prints the per-rank chunk time, the exchange bytes
# and their time at 450 GB/s (H100 NVLink 4, nominal), the exposed part
# and the projected 4-GPU period and fps (docs/performance.md "One rank of
# an N-GPU chunk").  Its gate: --estimate --rank-of 4 (47.2 GB in bf16).
if gate rank-of-4 40 4 bf16 fp8 && step_begin rank-of-4 90 40; then
  bench rank-of-4 "$LIMIT" dit "${SHAPE[@]}" --chunks 2 --devices 0 \
    --precision "$PREC" --rank-of 4
  step_end rank-of-4 $? "$PREC"
fi

# decode: the decode beside the generation (issue 2.2): lingbot-bench
# direct --compare "" decode-overlap, session engine, on a dummy 14B cut
# to 8 layers (its chunk about as long as the 96-wide VAE's decode of one
# chunk on an H200) at 832x480, 61 frames (4 chunks): serial, then the
# decoder on its own worker group, fed by the tensor channel, in a second
# thread.  The figure: the period ratio, serial chunk period / overlapped
# (on one GPU the two share the device, so nothing within one run can
# tell what the overlap gained); steps decode (the rounds),
# decode-serial, decode-overlap (the two reports).
if gate decode 8 1 bf16 fp8 && step_begin decode 120 40 &&
  dummy decode d8 --preset 14b --layers 8 --vae-dim 96; then
  echo "== decode: lingbot-bench direct --compare (limit $LIMIT s)" \
    >>"$MODEL_LOG"
  timeout "$LIMIT" "$BENCH" direct --engine session --model "$MODELS/d8" \
    --image tests/data/gpu-start.jpg --prompt "a street" --devices 0 \
    --precision "$PREC" --width 832 --height 480 --frames 61 --quiet \
    --rounds 1 --output "$MODELS/decode.json" --compare "" decode-overlap \
    >>"$MODEL_LOG" 2>&1
  rc=$?
  python3 - "$MODELS/decode.json" >>"$MODEL_JSON" <<'EOF2'
import json, sys
try:
    rep = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit(0)
for run, step in zip(rep.get("runs", []), ("decode-serial",
                                            "decode-overlap")):
    print(json.dumps({"step": step, "event": "direct",
                      "config": run.get("config", {}),
                      "summary": run["summary"], "chunks": run["chunks"]}))
print(json.dumps({"step": "decode", "event": "compare",
                  "rounds": rep.get("rounds", []),
                  "median_period_ratio": rep.get("median_period_ratio")}))
EOF2
  ratio=$(json_get decode compare 'o["median_period_ratio"]')
  step_end decode $rc "period ratio serial / overlapped ${ratio:-n/a}"
fi

# the DiT chunk time the VAE is compared with: 40 x the bf16 block (or
# the fp32 one), replaced by the measured 40-layer chunk in the summary
dit_est=$(json_get block-bf16 summary 'round(o["steady"]["mean_s"] * 40, 4)')
vae_extra=()
[ -z "$dit_est" ] || vae_extra=(--dit-chunk-s "$dit_est")
# vae STEP MAX MIN [VAR=VALUE] ARGS...: the VAE decode of one chunk
# (60x104 latent = 480x832, 16 frames), dim 96, device 0
vae() {
  local step=$1 max=$2 min=$3 setting=
  shift 3
  case ${1:-} in *=*) setting=$1 && shift ;; esac
  step_begin "$step" "$max" "$min" || return 0
  (
    [ -z "$setting" ] || export "${setting?}"
    bench "$step" "$LIMIT" vae --dim 96 --latent 60x104 --chunks 2 \
      --devices 0 "$@" "${vae_extra[@]}"
  )
  step_end "$step" $?
}
# the VAE on a bf16 stream (TF32/bf16 conv engines), then the same with
# the channels-last bf16 convs (LINGBOT_CUDA_CONV_LAYOUT=ndhwc: NDHWC bf16
# x and w into cuDNN; the convs fed by a norm or the latent read bf16
# NDHWC written by the norm, the others convert at the op's edges;
# docs/design/cuda.md "Channels-last bf16" and "Channels-last conv
# inputs"): the decode per steady chunk of both (target <= 0.25 s) and how
# the bf16 inputs were read
vae vae-bf16 45 15 --precision bf16
vae vae-bf16-ndhwc 45 15 LINGBOT_CUDA_CONV_LAYOUT=ndhwc --precision bf16

# product-direct (product-replay later): the product at 14B (issue 2.4),
# the elements (lingbot-bench direct --engine gst: lingbotcontrolsrc !
# lingbotgen ! lingbotvaedec ! fakesink) on a dummy 14B (40 layers, VAE
# 96) at 832x480 on device 0, bf16 (fp8 where bf16 does not fit), 77
# frames; the device memory in use sampled every 0.5 s (peak per run)
# product MODE LIMIT-MAX LIMIT-MIN
product() {
  local mode=$1 step=product-$1 len smi peak rc
  if [ "$mode" = direct ]; then len=(--frames 77); else len=(--duration 20); fi
  step_begin "$step" "$2" "$3" || return 0
  dummy "$step" d14 --preset 14b --vae-dim 96 || return 0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 \
    -lms 500 >"$MODELS/mem-$mode.txt" 2>/dev/null &
  smi=$!
  echo "== $step: lingbot-bench $mode --engine gst (limit $LIMIT s)" \
    >>"$MODEL_LOG"
  timeout "$LIMIT" "$BENCH" "$mode" --engine gst --model "$MODELS/d14" \
    --image tests/data/gpu-start.jpg --prompt "a street" --devices 0 \
    --precision "$PRODUCT_PREC" --width 832 --height 480 "${len[@]}" \
    --quiet --output "$MODELS/$step.json" >>"$MODEL_LOG" 2>&1
  rc=$?
  kill "$smi" 2>/dev/null
  wait "$smi" 2>/dev/null
  direct_json "$MODELS/$step.json" "$step"
  peak=$(sort -n "$MODELS/mem-$mode.txt" | tail -1 | tr -dc 0-9)
  echo "{\"step\": \"$step\", \"event\": \"device-memory\"," \
    "\"peak_mib\": ${peak:-0}}" >>"$MODEL_JSON"
  step_end "$step" $rc "$PRODUCT_PREC, peak device memory ${peak:-?} MiB"
}
PRODUCT_PREC=
if gate product 40 1 bf16 fp8; then
  PRODUCT_PREC=$PREC
  product direct 110 40
fi

# ---- the rest, while time is left -------------------------------------
# op timings at DiT-14B / VAE shapes, GEMM rates
if step_begin bench-ops 120 10; then
  timeout "$LIMIT" "$BUILD/tests/gpu/bench-cuda-ops" \
    >"$OUT/bench-ops.jsonl" 2>>"$MODEL_LOG"
  step_end bench-ops $?
fi
if step_begin bench-gemm 60 30; then
  rc=0
  for n in 1024 4096 8192; do
    timeout $((LIMIT / 3)) "$BENCH" gemm --backend cuda --size $n --iters 20 ||
      { rc=$? && echo "{\"bench\": \"gemm\", \"size\": $n, \"error\": \"rc=$rc\"}"; }
  done >>"$OUT/bench-ops.jsonl" 2>>"$MODEL_LOG"
  step_end bench-gemm $rc
fi
# the block in fp32, and bf16 variants side by side with block-bf16:
# the own attention kernel instead of cuDNN's SDPA (the default); the GEMM
# inputs in f32, rounded by each GEMM (LINGBOT_DIT_GEMM_INPUTS=f32: the
# path before issue 2.5 item 1, same bits); the FFN's first GEMM and its
# GELU as the op pair instead of cuBLASLt's GELU epilogue into bf16
block fp32 block-fp32
block bf16 block-bf16-own LINGBOT_CUDA_ATTENTION=own
block bf16 block-bf16-f32in LINGBOT_DIT_GEMM_INPUTS=f32
block bf16 block-gelu-own LINGBOT_CUDA_GEMM_EPILOGUE=own
# the VAE in FP32 (the reference)
vae vae 90 20

# ranks-one-gpu: several ranks on the one GPU through the elements (issue
# 2.4): gst-launch-1.0 lingbotgen devices=0 and devices=0,0 (two ranks on
# GPU 0, local collectives: device copies) on a dummy demo model at
# 208x128, 29 frames; the RGB video compared byte by byte (summary: bytes
# that differ and the largest difference; on CPU ranks 1 vs 2 differ by at
# most one level in under 0.1 % of the bytes)
GST_LAUNCH=$(command -v gst-launch-1.0 || echo "$STAGE_BIN/gst-launch-1.0")
if [ ! -x "$GST_LAUNCH" ]; then
  note "step ranks-one-gpu skipped: no gst-launch-1.0"
elif step_begin ranks-one-gpu 60 20 &&
  dummy ranks-one-gpu demo --preset demo; then
  rc_g=0
  for d in 0 0,0; do
    echo "== ranks: gst-launch-1.0 lingbotgen devices=$d" >>"$MODEL_LOG"
    timeout $((LIMIT / 2)) "$GST_LAUNCH" -q lingbotgen \
      model-path="$MODELS/demo" image-location=tests/data/gpu-start.jpg \
      prompt="a street" devices=$d precision=bf16 frames=29 width=208 \
      height=128 ! lingbotvaedec ! video/x-raw,format=RGB ! \
      filesink location="$MODELS/ranks-$d.rgb" >>"$MODEL_LOG" 2>&1 ||
      rc_g=$?
  done
  python3 - "$MODELS/ranks-0.rgb" "$MODELS/ranks-0,0.rgb" >>"$MODEL_JSON" \
    <<'EOF2'
import json, sys
try:
    a, b = (open(p, "rb").read() for p in sys.argv[1:3])
except OSError:
    sys.exit(0)
diff = [abs(x - y) for x, y in zip(a, b) if x != y]
print(json.dumps({"step": "ranks-one-gpu", "event": "compare",
                  "bytes": [len(a), len(b)], "differ": len(diff),
                  "max": max(diff, default=0)}))
EOF2
  step_end ranks-one-gpu $rc_g
fi

# live-demo: lingbot-bench live (issue 3.4) on the demo model on GPU 0,
# the README's live line into a synchronised sink: 30 s, a key change
# every 5 s, a 3 s stall after 10 s; key to screen (p50/p90/max) against
# a chunk's compute + decode, and the chunks the latency took to come
# back within 10 % after the stall (one line of bench-model.jsonl)
if step_begin live-demo 60 45 && dummy live-demo demo --preset demo; then
  timeout "$LIMIT" "$BENCH" live --model "$MODELS/demo" \
    --image tests/data/gpu-start.jpg --prompt "a street" --devices 0 \
    --duration 30 --stall 3 --stall-at 10 --output "$MODELS/live-demo.json" \
    >>"$MODEL_LOG" 2>&1
  rc_l=$?
  step_end live-demo $rc_l "$(python3 - "$MODELS/live-demo.json" \
    "$MODEL_JSON" <<'EOF3' 2>/dev/null
import json, sys
d = json.load(open(sys.argv[1]))
d["step"] = "live-demo"
with open(sys.argv[2], "a") as f:
    f.write(json.dumps(d) + "\n")
k = d["key-to-screen-seconds"]
print("key to screen p50 %.2f p90 %.2f max %.2f s, p90 / (compute + decode)"
      " %.2f, %s key restarts, latency back in %s chunks" % (k["p50"],
      k["p90"], k["max"], d["key-to-screen-p90-over-compute-decode"],
      d.get("restarts"),
      d.get("stall", {}).get("chunks-until-within-10-percent")))
EOF3
)"
fi

# product-replay: a 20 s replay of the product (deadline misses), with
# product-direct's gate
if [ -n "$PRODUCT_PREC" ]; then
  product replay 90 40
fi

# ---- kernel profiles ---------------------------------------------------
# Nsight Compute's duration of every kernel of one 14B block in bf16 and
# in fp8 (two chunks each, eager: LINGBOT_DIT_GRAPHS=0, so that every
# kernel is its own launch), summed per kernel name into profile.txt (one
# section per precision; the head of each goes into the summary next to
# the MFU of the blocks).  On when ncu is found (about 15 s per
# precision); LINGBOT_GPU_PROFILE=0: off; =1: also the raw reports (ncu's
# CSV on stdout, with the bench's own text lines) in ncu.csv.
if [ "${LINGBOT_GPU_PROFILE:-auto}" != 0 ]; then
  NCU=$(command -v ncu || find /usr/local/cuda/bin/ncu \
    /opt/nvidia/nsight-compute/*/ncu -maxdepth 0 2>/dev/null | head -1)
  [ -n "$NCU" ] && : >"$OUT/profile.txt"
  for prec in bf16 fp8; do
    if [ -z "$NCU" ]; then
      note "step profile skipped: no ncu on this machine"
      break
    fi
    step_begin "profile-$prec" 150 30 || continue
    raw="$OUT/ncu-$prec.csv.tmp"
    LINGBOT_DIT_GRAPHS=0 timeout "$LIMIT" "$NCU" --clock-control none \
      --metrics gpu__time_duration.sum --print-units base --csv \
      "$BENCH" dit "${SHAPE[@]}" --layers 1 --chunks 2 --devices 0 \
      --precision $prec >"$raw" 2>>"$MODEL_LOG"
    step_end "profile-$prec" $?
    python3 - "$raw" $prec >"$OUT/profile-$prec.txt.tmp" <<'EOF'
import csv, sys
rows = []
try:
    lines = [l for l in open(sys.argv[1], errors="replace")
             if l.startswith('"')]
    rows = list(csv.DictReader(lines))
except OSError:
    pass
agg, total, n = {}, 0.0, 0
for r in rows:
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    try:
        ns = float(r["Metric Value"].replace(",", ""))
    except (KeyError, ValueError):
        continue
    name = r.get("Kernel Name", "?").strip()
    if name.endswith(")"):          # drop the parameter list
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i].rstrip() or name
                break
    name = name[:110]
    c, t = agg.get(name, (0, 0.0))
    agg[name] = (c + 1, t + ns)
    total += ns
    n += 1
print("kernels of one 14B block, %s, 2 chunks of 5 passes (plus the "
      "session's setup kernels), Nsight Compute gpu__time_duration:"
      % sys.argv[2])
print("%d kernels, %.2f ms in all" % (n, total / 1e6))
print("%8s %6s %9s %6s  %s" % ("ms", "calls", "us/call", "share", "kernel"))
for name, (c, t) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print("%8.3f %6d %9.1f %5.1f%%  %s" % (t / 1e6, c, t / c / 1e3,
          100 * t / total if total else 0, name))
if not agg:
    print("(no kernel rows in the ncu report)")
EOF
    head -20 "$OUT/profile-$prec.txt.tmp" | tee -a "$SUMMARY"
    cat "$OUT/profile-$prec.txt.tmp" >>"$OUT/profile.txt"
    echo >>"$OUT/profile.txt"
    [ "${LINGBOT_GPU_PROFILE:-auto}" = 1 ] && cat "$raw" >>"$OUT/ncu.csv"
    rm -f "$raw" "$OUT/profile-$prec.txt.tmp"
  done
fi

# ---- 5. summary ------------------------------------------------------
python3 - "$OUT/gpu-suite.log" "$MODEL_JSON" >>"$SUMMARY" <<'EOF'
import json, re, sys
suite_log, model_json = sys.argv[1:]

# per-op parity: the largest error against the CPU over each op's cases.
# Lines "# OP ...: ... rel X", "# gemm ...: max rel X", and the model tests'
# "# dit cuda, ...: ... max |cuda - cpu| / max |cpu| = X", "# vae decode
# cuda, ...: ... max|cuda - cpu| X" (absolute), "# vae condition cuda ...:
# ... max rel |cuda - cpu| X"; indented detail lines are skipped.
NUM = r"([0-9][0-9.eE+-]*|nan|inf)"
KEYS = [(r"max rel \|cuda - cpu\| " + NUM, "rel"),
        (r"max \|cuda - cpu\| / max \|cpu\| = " + NUM, "rel"),
        (r"max\|cuda - cpu\| " + NUM, "abs"),
        (r"max rel " + NUM, "rel"),
        (r"\brel " + NUM, "rel")]
worst = {}
for line in open(suite_log, errors="replace"):
    m = re.match(r"^# (\S.*)", line)
    if not m:
        continue
    text = m.group(1)
    for key, kind in KEYS:
        k = re.search(key, text)
        if k:
            break
    else:
        continue
    head = re.split(r"[,:]", text, 1)[0].split()
    op = ("-".join(head[:head.index("cuda") + 1]) if "cuda" in head
          else head[0])
    if "bf16" in head:      # the bf16 cases have their own tolerances
        op += "-bf16"
    if "ndhwc" in head:     # the channels-last bf16 convs
        op += "-ndhwc"
    if "vs f64" in text:    # against float64 on bf16-rounded inputs
        op += " vs f64"
    n, w, _ = worst.get(op, (0, 0.0, kind))
    v = float(k.group(1))
    worst[op] = (n + 1, v if v != v or v > w else w, kind)
print("\nparity against the CPU (largest error over each op's cases):")
for op in sorted(worst):
    n, w, kind = worst[op]
    print("  %-30s %4d cases  max %s %.3g" % (op, n, kind, w))
if not worst:
    print("  (no parity lines in the suite log)")

runs = {}
for line in open(model_json):
    try:
        o = json.loads(line)
    except ValueError:
        continue
    runs.setdefault(o.get("step"), []).append(o)

def last(step, event):
    for o in reversed(runs.get(step, [])):
        if o.get("event", "") == event:
            return o
    return None

def fmt(v, f="%.3f"):
    return "-" if v is None else f % v

print("\nDiT, 832x480 latent 60x104, 512 text tokens, full window:")
print("  %-14s %6s %6s %7s %9s %9s %8s %8s %7s" % ("step", "layers",
      "keys", "chunks", "s/chunk", "TFLOP/s", "MFU", "MFU ref", "setup"))
full_s = None
full_prec = None
for step in ("block-fp32", "block-bf16", "block-bf16-own",
             "block-bf16-f32in", "block-gelu-own", "block-fp8",
             "full-bf16", "full-fp8"):
    s = last(step, "summary")
    chunks = [o for o in runs.get(step, []) if o.get("event") == "chunk"]
    if s is None and not chunks:
        print("  %-14s not run or no chunk finished" % step)
        continue
    st = s["steady"] if s and s["steady"]["chunks"] else None
    # without a steady chunk: the last finished one (cold, first chunk)
    c = chunks[-1] if chunks else None
    sec = st["mean_s"] if st else c["compute_s"]
    tfl = st["tflops"] if st else c["tflops"]
    mfu = st["mfu"] if st else c.get("mfu")
    mfr = st["mfu_reference"] if st else None
    setup = last(step, "setup")
    print("  %-14s %6s %6s %7s %9s %9s %8s %8s %7s%s" % (step,
          setup["layers"] if setup else "-", c["keys"] if c else "-",
          len(chunks), fmt(sec), fmt(tfl, "%.1f"),
          fmt(None if mfu is None else 100 * mfu, "%.1f %%"),
          fmt(None if mfr is None else 100 * mfr, "%.1f %%"),
          fmt(setup["setup_s"] if setup else None, "%.0f s"),
          "" if st else "  (first chunk only)"))
    if step.startswith("full-") and full_s is None:
        full_s, full_prec = sec, step[5:]
print("  (MFU against the bf16 dense peak, fp8 included: against the "
      "H200's fp8 peak, halve block-fp8's; kernel profiles of block-bf16 "
      "and block-fp8 above, profile.txt)")
# cuDNN SDPA plans: all built at session start (lingbot_dit_rank_reserve),
# none in the chunks (issue 3.2 item 4)
for step in ("block-bf16", "block-fp8", "full-bf16", "full-fp8"):
    s = last(step, "summary")
    if s and "sdpa_plans_in_chunks" in s:
        print("  %s: cuDNN SDPA plans built at session start %d, in the "
              "chunks %d%s" % (step, s["sdpa_plans_at_start"],
              s["sdpa_plans_in_chunks"],
              "" if s["sdpa_plans_in_chunks"] == 0 else
              "  (NOT 0: a plan built between collectives)"))
blk = last("block-bf16", "summary")
f32in = last("block-bf16-f32in", "summary")
if blk and f32in and blk["steady"]["chunks"] and f32in["steady"]["chunks"]:
    print("  bf16 GEMM inputs written by the norms/GELU vs converted by "
          "each GEMM (block-bf16-f32in / block-bf16): %.3f x"
          % (f32in["steady"]["mean_s"] / blk["steady"]["mean_s"]))
gown = last("block-gelu-own", "summary")
if blk and gown and blk["steady"]["chunks"] and gown["steady"]["chunks"]:
    print("  FFN GELU in the GEMM's epilogue vs the op pair "
          "(block-gelu-own / block-bf16): %.3f x"
          % (gown["steady"]["mean_s"] / blk["steady"]["mean_s"]))
if full_s is None and blk and blk["steady"]["chunks"]:
    print("  40-layer chunk estimated from the bf16 block: %.2f s"
          % (40 * blk["steady"]["mean_s"]))
est = last("estimate", "estimate")
if est:
    c = est["spec_14b_480p"]
    print("  14B chunk FLOP count: ours %.1f TFLOP (anchors 2.2, camera "
          "hoisted: %.1f); the reference's %.1f (anchors: %.1f)"
          % (c["tflop"], c["spec_tflop"], c["reference_tflop"],
             c["spec_reference_tflop"]))

print("\nVAE decode, dim 96, latent 60x104 (16 frames per steady chunk):")
steady = {}
for vstep, what in (("vae", "FP32 (the reference)"),
                    ("vae-bf16", "bf16 stream (TF32/bf16 conv engines, "
                     "NCDHW f32 tensors)"),
                    ("vae-bf16-ndhwc", "bf16 stream, channels-last bf16 "
                     "convs (LINGBOT_CUDA_CONV_LAYOUT=ndhwc)")):
  v = last(vstep, "")
  print("  %s:" % what)
  if v and v.get("runs"):
      r = v["runs"][0]
      steady[vstep] = r["steady_chunk_s"]
      dit_s = full_s if full_s else v.get("dit_chunk_s")
      share = (r["steady_chunk_s"] / (r["steady_chunk_s"] + dit_s)
               if dit_s and r["steady_chunk_s"] > 0 else None)
      print("  first chunk %.3f s, steady %.3f s/chunk, %.1f TFLOP/s of %.1f "
            "TFLOP; share of a chunk %s (DiT chunk %s s, %s; target < 10 %%)"
            % (r["first_chunk_s"], r["steady_chunk_s"], r["steady_tflops"],
               v["decode_tflop"], fmt(None if share is None else 100 * share,
               "%.1f %%"), fmt(dit_s, "%.2f"),
               "measured, " + full_prec if full_s else
               "40 x the bf16 block"))
      ci = r.get("conv_inputs_bf16")
      if ci and vstep == "vae-bf16-ndhwc":
          print("  bf16 channels-last conv inputs per steady chunk: %d read "
                "in place, %d concatenated, %d widened to f32"
                % (ci["in_place"], ci["concatenated"], ci["widened"]))
  else:
      print("  not run or failed (bench-model.log)")
a, b = steady.get("vae-bf16"), steady.get("vae-bf16-ndhwc")
if a and b:
    print("  decode per steady chunk, bf16: NCDHW %.3f s, NDHWC %.3f s "
          "(%.2fx; target <= 0.25 s)" % (a, b, a / b))

print("\nDecode beside the generation (lingbot-bench direct --compare \"\" "
      "decode-overlap, 14B shape cut to 8 layers, 832x480, 4 chunks; the "
      "figure: serial chunk period / overlapped):")
for dstep in ("decode-serial", "decode-overlap"):
  d = last(dstep, "direct")
  if d is None:
      print("  %-15s not run or failed (bench-model.log)" % dstep)
      continue
  s = d["summary"]
  per = s.get("chunk_period_seconds", {}).get("mean")
  print("  %-15s %s, period %s s/chunk, DiT %s s, VAE %s s, latent bytes "
        "through the host %d" % (dstep,
        d.get("config", {}).get("precision", "?"), fmt(per),
        fmt(s.get("dit_seconds_mean")), fmt(s.get("vae_seconds_mean")),
        s.get("latent_host_bytes", -1)))
c = last("decode", "compare")
if c and c.get("rounds"):
  r = c["rounds"][0]
  print("  period ratio serial / overlapped: %.3f (%.3f s / %.3f s)"
        % (r["period_ratio"], r["period_a"], r["period_b"]))

r = last("ranks-one-gpu", "compare")
print("\nTwo ranks on the one GPU through the elements (devices=0,0 against "
      "0, dummy demo model, 208x128, 29 frames, RGB):")
if r is None:
    print("  not run or failed (bench-model.log)")
else:
    print("  %d / %d bytes; %d differ, largest difference %d levels%s" % (
          r["bytes"][0], r["bytes"][1], r["differ"], r["max"],
          "  (no video: bench-model.log)" if not r["bytes"][0] else
          "" if r["bytes"][0] == r["bytes"][1] else "  (LENGTHS DIFFER)"))

print("\nThe product at 14B (the elements, lingbot-bench --engine gst, dummy "
      "weights, 832x480, device 0):")
for pstep in ("product-direct", "product-replay"):
    d = last(pstep, "direct")
    m = last(pstep, "device-memory")
    if d is None:
        print("  %-15s not run or failed (bench-model.log)" % pstep)
        continue
    s = d["summary"]
    cs = s.get("chunk_compute_seconds", {})
    print("  %-15s %s, %d frames, %d chunks; steady compute %s fps; chunk "
          "compute p50/p90/p99/max %s/%s/%s/%s s; DiT %s s, VAE %s s; chunk "
          "period %s s; setup %s s; first chunk %s s; delivery %s fps; peak "
          "device memory %s MiB" % (pstep,
          d.get("config", {}).get("precision", "?"), s.get("total_frames", 0),
          s.get("total_chunks", 0), fmt(s.get("chunk_compute_fps_weighted"),
          "%.2f"), fmt(cs.get("p50")), fmt(cs.get("p90")), fmt(cs.get("p99")),
          fmt(cs.get("max")), fmt(s.get("dit_seconds_mean")),
          fmt(s.get("vae_seconds_mean")),
          fmt(s.get("chunk_period_seconds", {}).get("mean")),
          fmt(s.get("setup_seconds"), "%.1f"),
          fmt(s.get("first_chunk_latency_s"), "%.1f"),
          fmt(s.get("delivery_fps"), "%.2f"),
          m["peak_mib"] if m else "?"))
    dl = s.get("deadlines")
    if dl:
        print("  %-15s deadlines: %s of %s chunks missed, worst lateness %s "
              "s, min slack %s s" % ("", dl.get("missed_chunks"),
              dl.get("chunks"), fmt(dl.get("late_seconds_max")),
              fmt(dl.get("slack_seconds_min"))))

r = last("rank-of-4", "rank_of")
print("\nOne rank of a 4-GPU chunk (lingbot-bench dit --rank-of 4, 14B, "
      "832x480, full window; the exchange at nominal NVLink):")
if r is None:
    print("  not run or failed (bench-model.log)")
else:
    t = r["exchange_terms_s"]
    print("  rank 0: %d tokens, %d of %d heads, KV cache %.2f GB; chunk %.3f s "
          "(%s)" % (r["tokens"], r["heads"], r["heads_total"],
          r["kv_cache_bytes"] / 1e9, r["chunk_s"], r["chunk_s_from"]))
    print("  exchange per chunk %.2f GB (busier direction), %.1f ms at %g "
          "GB/s: q %.1f, k %.1f, v %.1f, output %.1f, all-gather %.1f ms"
          % (r["link_bytes_per_chunk"] / 1e9, 1e3 * r["exchange_s"],
          r["link_gbps"], 1e3 * t["q"], 1e3 * t["k"], 1e3 * t["v"],
          1e3 * t["out"], 1e3 * t["all_gather"]))
    print("  exposed %.1f ms (overlap %s); projected 4-GPU period %.3f s = "
          "%.1f fps (DiT only; the decode runs beside it, 2.2)" % (
          1e3 * r["exposed_s"], r["overlap"], r["period_s"], r["fps"]))
EOF
rm -rf "$MODELS" "$GST_REGISTRY_1_0"
# GEMMs of a 14B block: FP32 (cuBLASLt, no TF32) and with bf16 weights
# (bench-cuda-ops "gemm" lines)
# shellcheck disable=SC2129  # one heredoc per table
python3 - "$OUT/bench-ops.jsonl" >>"$SUMMARY" <<'EOF'
import json, sys
try:
    lines = open(sys.argv[1], errors="replace").readlines()
except OSError:
    lines = []
rows = {}
for line in lines:
    try:
        o = json.loads(line)
    except ValueError:
        continue
    if o.get("op") == "gemm" and "ms" in o:
        rows.setdefault(o["case"], {})[o.get("math", "fp32")] = o
print("\nGEMMs of a 14B block (x [6240, K] . w^T): fp32 | bf16 weights")
for case, m in rows.items():
    f, b = m.get("fp32"), m.get("bf16-weights")
    print("  %-24s %s | %s" % (case,
          "%7.2f ms %4.0f TF/s" % (f["ms"], f["gflops"] / 1e3) if f else "-",
          "%7.2f ms %4.0f TF/s" % (b["ms"], b["gflops"] / 1e3) if b else "-"))
if not rows:
    print("  (no gemm lines in bench-ops.jsonl)")
EOF
# attention at the DiT shapes: the own kernels against cuDNN's fused SDPA
# (bench-cuda-ops "attention" lines; cuDNN is the default on bf16 streams,
# LINGBOT_CUDA_ATTENTION=own selects the own kernel, docs/design/cuda.md
# "cuDNN SDPA")
python3 - "$OUT/bench-ops.jsonl" >>"$SUMMARY" <<'EOF'
import json, sys
rows = {}
try:
    lines = open(sys.argv[1], errors="replace").readlines()
except OSError:
    lines = []
for line in lines:
    try:
        o = json.loads(line)
    except ValueError:
        continue
    if o.get("op") == "attention" and "math" in o:
        rows.setdefault(o["case"], {})[o["math"]] = o

def cell(o):
    if o is None:
        return "%-19s" % "-"
    if "error" in o:
        return "%-19s" % "error"
    return "%8.2f ms %4.0f TF/s" % (o["ms"], o["tflops"])

print("\nattention: own kernels vs cuDNN SDPA (TFLOP/s = 4 Nq Nk H hd / s;"
      " cuDNN's time includes its bf16 conversions):")
if not rows:
    print("  (no attention lines in bench-ops.jsonl)")
for case, m in rows.items():
    own, dnn = m.get("bf16"), m.get("bf16-cudnn")
    if own and dnn and "ms" in own and "ms" in dnn:
        verdict = "cuDNN/own speed %.2fx: %s" % (own["ms"] / dnn["ms"],
                  "cuDNN faster" if dnn["ms"] < own["ms"] else "own faster")
    elif dnn and "error" in dnn:
        verdict = "cuDNN: " + dnn["error"][:100]
    else:
        verdict = ""
    print("  %s\n    fp32 %s | bf16 own %s | bf16 cuDNN %s  %s"
          % (case, cell(m.get("fp32")), cell(own), cell(dnn), verdict))
EOF
# VAE decoder convs: cuDNN (fp32 and bf16 streams) vs im2col + cuBLASLt
# (bench-cuda-ops conv lines; LINGBOT_CUDA_CONV=im2col selects im2col,
# docs/design/cuda.md "cuDNN convolutions")
python3 - "$OUT/bench-ops.jsonl" >>"$SUMMARY" <<'EOF'
import json, sys
rows, order = {}, []
try:
    lines = open(sys.argv[1], errors="replace").readlines()
except OSError:
    lines = []
for line in lines:
    try:
        o = json.loads(line)
    except ValueError:
        continue
    if o.get("op") in ("conv3d_causal", "conv2d") and "path" in o:
        key = (o["op"], o["case"])
        if key not in rows:
            order.append(key)
        rows.setdefault(key, {})[(o["path"], o.get("math"))] = o

def cell(o):
    if o is None:
        return "%-19s" % "-"
    if "error" in o:
        return "%-19s" % "error"
    return "%8.2f ms %4.0f TF/s" % (o["ms"], o["tflops"])

print("\nconvs: cuDNN fp32 | cuDNN bf16 stream (TF32/bf16 engines) | cuDNN"
      " bf16 channels-last (with its conversions) | im2col (FP32 cuBLASLt);"
      " TFLOP/s = 2 Cout Cin k t H W / s:")
if not rows:
    print("  (no conv lines in bench-ops.jsonl)")
chunk = {}
for key in order:
    m = rows[key]
    f32, b16 = m.get(("cudnn", "fp32")), m.get(("cudnn", "bf16"))
    cl = m.get(("cudnn-ndhwc", "bf16"))
    im = m.get(("im2col", "fp32"))
    verdict = ""
    if f32 and im and "ms" in f32 and "ms" in im:
        verdict = "im2col/cuDNN fp32 %.2fx" % (im["ms"] / f32["ms"])
    if b16 and cl and "ms" in b16 and "ms" in cl:
        verdict += "  NCDHW/NDHWC bf16 %.2fx" % (b16["ms"] / cl["ms"])
    for o in (f32, b16, cl):
        if o and "error" in o:
            verdict += "  cuDNN: " + o["error"][:100]
    print("  %s %s\n    %s | %s | %s | %s  %s" % (key[0], key[1], cell(f32),
          cell(b16), cell(cl), cell(im), verdict))
    for name, o in (("cuDNN fp32", f32), ("cuDNN bf16", b16),
                    ("cuDNN bf16 NDHWC", cl), ("im2col", im)):
        if key[0] == "conv3d_causal" and o and "chunk_ms" in o:
            chunk[name] = chunk.get(name, 0.0) + o["chunk_ms"]
if chunk:
    print("  decoder convs per steady chunk (4 latent frames, calls x ms): "
          + ", ".join("%s %.1f ms" % kv for kv in chunk.items()))
EOF
note "total $(($(date +%s) - T0)) s"
# the exit status: any suite program or step that failed or timed out
if [ ${#FAILED[@]} -gt 0 ]; then
  note "run.sh: failed: ${FAILED[*]}"
  exit 1
fi
note "run.sh: every step that ran passed"
exit 0

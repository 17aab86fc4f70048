#!/bin/sh
# lingbot-gst: sharded == unsharded, byte for byte, under every kernel ISA
# level (LINGBOT_CPU_ISA) and OpenBLAS core type this CPU can execute and
# OMP_NUM_THREADS 1 and 2
#   determinism-matrix.sh TEST-OPS TEST-DIT-UNIT TEST-VAE-SHARDING
#
# docs/design.md "Determinism": a row of every CPU op is computed in an
# order that depends on neither the band a rank holds nor the thread count
# nor the OpenBLAS core type.  For each core type among Prescott, Haswell,
# SkylakeX and Cooperlake whose instructions /proc/cpuinfo lists (the
# others are skipped: OpenBLAS would fall back or fault), each with the
# matching level of our own kernels' run-time dispatch (baseline, avx2,
# avx512: the f32 GEMM and the row kernels are ours, kernels/cpu/isa.c),
# and 1 and 2
# OpenMP threads, this runs the GEMM band test, the DiT on 1 to 5 ranks
# and the VAE decode on 2 to 5 height bands plus its 1-vs-2-thread check;
# each compares bytes.  Exits 77 (skipped) off x86-64 Linux.
set -eu
ops=$1 dit=$2 vae=$3
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null) || {
  echo "SKIP: no /proc/cpuinfo flags (OpenBLAS core types are x86-64's)"
  exit 77
}
case $(uname -m) in
  x86_64) ;;
  *) echo "SKIP: OpenBLAS core types are x86-64's"; exit 77 ;;
esac
has () {
  for f; do
    case " ${flags#*:} " in *" $f "*) ;; *) return 1 ;; esac
  done
}
types=Prescott:baseline
if has avx2 fma; then types="$types Haswell:avx2"; fi
if has avx512f avx512cd avx512bw avx512dq avx512vl; then
  types="$types SkylakeX:avx512"
  if has avx512_bf16; then types="$types Cooperlake:avx512"; fi
fi
echo "core types : ISA levels this CPU executes: $types"
for pair in $types; do
  ct=${pair%%:*} isa=${pair#*:}
  for t in 1 2; do
    echo "== OPENBLAS_CORETYPE=$ct LINGBOT_CPU_ISA=$isa OMP_NUM_THREADS=$t"
    export OPENBLAS_CORETYPE=$ct LINGBOT_CPU_ISA=$isa OMP_NUM_THREADS=$t
    "$ops" -p /ops/gemm-bands
    "$dit" -p /dit/session/philox-ranks-agree -p /dit/session/ranks-1-to-5
    "$vae" -p /vae/sharding/ranks-2 -p /vae/sharding/ranks-3 \
      -p /vae/sharding/ranks-5 -p /vae/sharding/threads
  done
done

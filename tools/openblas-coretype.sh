#!/bin/sh
# lingbot-gst: the OPENBLAS_CORETYPE this CPU should run, for OpenBLAS
# builds that do not know its model.
#
# OpenBLAS picks its kernels by CPU family and model; a model newer than
# the library (e.g. family 6 model 207 under Debian 12's 0.3.21) falls back
# to its Prescott (SSE3) kernels, several times slower than the AVX-512 or
# AVX2 ones the CPU runs.  This prints the core type matching the CPU's
# instruction set (SkylakeX with AVX-512 F/CD/BW/DQ/VL, Haswell with AVX2
# and FMA; the sgemm kernels of OpenBLAS's newer x86 targets are these),
# or nothing (baseline, or not x86-64 Linux).  The scripts export it when
# OPENBLAS_CORETYPE is unset; liblingbot prints the same advice when it
# finds OpenBLAS below the CPU (kernels/cpu/isa.c).
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null) || exit 0
has() { case " ${flags#*:} " in *" $1 "*) return 0 ;; esac; return 1; }
if has avx512f && has avx512cd && has avx512bw && has avx512dq && has avx512vl; then
  echo SkylakeX
elif has avx2 && has fma; then
  echo Haswell
fi

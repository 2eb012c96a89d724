#!/usr/bin/env bash
# Builds and runs a torch-free micro-benchmark against this checkout's kernel headers:
# bench_vector_gemm.cpp, or the one named (bench_floyd_tile_step).
# Usage: bash benchmarks/kernels/bench_vector_gemm.sh [bench_floyd_tile_step]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
NAME=${1:-bench_vector_gemm}
OUT=${TMPDIR:-/tmp}/op_plugin_$NAME
g++ -O3 -std=c++17 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c -mamx-tile -mamx-bf16 \
  -Icsrc -Icsrc/include "benchmarks/kernels/$NAME.cpp" csrc/runtime/isa.cpp -o "$OUT"
lscpu | grep -m1 "Model name"
"$OUT"

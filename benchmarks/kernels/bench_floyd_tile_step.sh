#!/usr/bin/env bash
# Builds and runs bench_floyd_tile_step.cpp (torch-free) against this checkout's kernel headers.
# Usage: bash benchmarks/kernels/bench_floyd_tile_step.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${TMPDIR:-/tmp}/op_plugin_bench_floyd_tile_step
g++ -O3 -std=c++17 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c -mamx-tile -mamx-bf16 \
  -Icsrc -Icsrc/include benchmarks/kernels/bench_floyd_tile_step.cpp csrc/runtime/isa.cpp -o "$OUT"
lscpu | grep -m1 "Model name"
"$OUT"

#!/usr/bin/env bash
# Builds and runs bench_tile_gemm.cpp against the installed torch (for its oneDNN brgemm and
# at::mm peers) and this checkout's kernel headers. Usage: bash benchmarks/kernels/bench_tile_gemm.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY=${PYTHON:-python}
TORCH=$($PY -c "import os, torch; print(os.path.dirname(torch.__file__))")
OUT=${TMPDIR:-/tmp}/op_plugin_bench_tile_gemm
g++ -O3 -std=c++20 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c -mamx-tile -mamx-bf16 \
  -D_GLIBCXX_USE_CXX11_ABI=1 -Icsrc -Icsrc/include -I"$TORCH/include" \
  benchmarks/kernels/bench_tile_gemm.cpp csrc/runtime/isa.cpp \
  -L"$TORCH/lib" -Wl,-rpath,"$TORCH/lib" -ltorch_cpu -lc10 -o "$OUT"
lscpu | grep -m1 "Model name"
"$OUT"

#!/usr/bin/env bash
# Builds the flash attention kernels with the phase counters of kernels/common/profile.h
# (-DOP_PLUGIN_PROFILE) and runs profile_flash_attention.cpp: where the time goes, per phase.
# Usage: bash benchmarks/kernels/profile_flash_attention.sh [bfloat16|float32] [S] [D]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY=${PYTHON:-python}
OUT=${TMPDIR:-/tmp}/op_plugin_profile_flash
mkdir -p "$OUT"
$PY -m codegen --out "$OUT/generated" >/dev/null
ISA512=$(cd python/op_plugin && $PY -c 'import build; print(build.ISA_FLAGS["avx512"])')
ISA2=$(cd python/op_plugin && $PY -c 'import build; print(build.ISA_FLAGS["avx2"])')
FLAGS="-O3 -std=c++17 -DOP_PLUGIN_PROFILE -Icsrc -Icsrc/include -I$OUT/generated/include"
objs=()
pids=()
rm -f "$OUT"/*.o
for src in csrc/runtime/*.cpp csrc/kernels/flash_attention/*.cpp; do
  obj="$OUT/$(echo "$src" | tr / _).o"
  case "$src" in *.avx512.cpp) isa=$ISA512 ;; *.avx2.cpp) isa=$ISA2 ;; *) isa= ;; esac
  # shellcheck disable=SC2086
  g++ $FLAGS $isa -c "$src" -o "$obj" &
  pids+=($!)
  objs+=("$obj")
done
for pid in "${pids[@]}"; do wait "$pid"; done  # a failed compile fails the script (set -e)
# shellcheck disable=SC2086
g++ $FLAGS -mamx-tile -mamx-bf16 benchmarks/kernels/profile_flash_attention.cpp "${objs[@]}" -lpthread -o "$OUT/profile_flash_attention"
lscpu | grep -m1 "Model name"
"$OUT/profile_flash_attention" "$@"

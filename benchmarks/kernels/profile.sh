#!/usr/bin/env bash
# Builds one op family's kernels with the phase counters of kernels/common/profile.h
# (-DOP_PLUGIN_PROFILE) and runs benchmarks/kernels/profile_<family>.cpp: where the time goes,
# per phase (packing, tile GEMMs, softmax, reductions), one thread.
# Usage: bash benchmarks/kernels/profile.sh flash_attention [bfloat16|float32] [S] [D] [W: a causal window instead] [N2]
#        bash benchmarks/kernels/profile.sh floyd_attention [bfloat16|float32|float16] [N=M=K] [D]
# EXTRA_FLAGS adds compiler flags (an experiment's -D...); NORUN=1 only builds (to alternate binaries).
# OP_PROFILE_REPS sets the timed runs of each call (best of 7 by default; more on a drifting host).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY=${PYTHON:-python}
FAMILY=${1:?usage: profile.sh flash_attention|floyd_attention [args]}
shift
OUT=${TMPDIR:-/tmp}/op_plugin_profile_$FAMILY
mkdir -p "$OUT"
$PY -m codegen --out "$OUT/generated" >/dev/null
ISA512=$(cd python/op_plugin && $PY -c 'import build; print(build.ISA_FLAGS["avx512"])')
ISA2=$(cd python/op_plugin && $PY -c 'import build; print(build.ISA_FLAGS["avx2"])')
FLAGS="${EXTRA_FLAGS:-} -O3 -std=c++17 -DOP_PLUGIN_PROFILE -Icsrc -Icsrc/include -I$OUT/generated/include"
objs=()
pids=()
rm -f "$OUT"/*.o
# The runtime, the family's kernels and the generated stage-1 checks of every op (stage 1 runs them).
for src in csrc/runtime/*.cpp csrc/kernels/"$FAMILY"/*.cpp "$OUT"/generated/kernels/*_checks.cpp; do
  obj="$OUT/$(basename "$src").o"
  case "$src" in *.avx512.cpp) isa=$ISA512 ;; *.avx2.cpp) isa=$ISA2 ;; *) isa= ;; esac
  # shellcheck disable=SC2086
  g++ $FLAGS $isa -c "$src" -o "$obj" &
  pids+=($!)
  objs+=("$obj")
done
for pid in "${pids[@]}"; do wait "$pid"; done  # a failed compile fails the script (set -e)
# shellcheck disable=SC2086
g++ $FLAGS -mamx-tile -mamx-bf16 "benchmarks/kernels/profile_$FAMILY.cpp" "${objs[@]}" -lpthread -o "$OUT/profile_$FAMILY"
lscpu | grep -m1 "Model name"
[ -n "${NORUN:-}" ] || "$OUT/profile_$FAMILY" "$@"

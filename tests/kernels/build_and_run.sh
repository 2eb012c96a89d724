#!/usr/bin/env bash
# Builds the torch-free kernel library (csrc/runtime + every source under csrc/kernels) and each
# tests/kernels/test_*.cpp, then runs every test once per ISA level.
#
# Usage: tests/kernels/build_and_run.sh [GENERATED_INCLUDE_DIR]
#   GENERATED_INCLUDE_DIR  where op_plugin/ops/<op>.h live (the codegen output); default
#                          $OP_PLUGIN_GENERATED_INCLUDE, else build/generated/include.
# Environment:
#   OP_PLUGIN_KERNEL_TEST_DIR  build directory (default build/kernel_tests)
#   OP_PLUGIN_TEST_ISA_LEVELS  levels to run each test at (default "native avx512 avx2 baseline";
#                              "native" = the best the CPU has; others are set via OP_PLUGIN_ISA,
#                              which caps the level, so a level the CPU lacks repeats a lower one)
#   CXX, JOBS                  compiler (g++) and parallel compile jobs (nproc)
#
# Source flags follow the build convention: *.avx512.cpp and *.avx2.cpp get their ISA flags,
# every other .cpp only the baseline flags. Exit status is non-zero if a build or a test fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GEN_INCLUDE=${1:-${OP_PLUGIN_GENERATED_INCLUDE:-$ROOT/build/generated/include}}
OUT=${OP_PLUGIN_KERNEL_TEST_DIR:-$ROOT/build/kernel_tests}
LEVELS=${OP_PLUGIN_TEST_ISA_LEVELS:-"native avx512 avx2 baseline"}
CXX=${CXX:-g++}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

BASE_FLAGS="-std=c++17 -O3 -fPIC -Wall -Wextra -pthread -I$ROOT/csrc/include -I$ROOT/csrc -I$GEN_INCLUDE"
AVX512_FLAGS="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma -mf16c"
AVX2_FLAGS="-mavx2 -mfma -mf16c"

if [ ! -d "$GEN_INCLUDE/op_plugin/ops" ]; then
  echo "build_and_run.sh: no generated headers in $GEN_INCLUDE/op_plugin/ops (pass the directory" \
       "as the first argument or set OP_PLUGIN_GENERATED_INCLUDE)" >&2
  exit 2
fi
mkdir -p "$OUT/obj"

# One compile command per library source, run in parallel.
compile_one() {
  local src=$1 flags=""
  case "$src" in
    *.avx512.cpp) flags=$AVX512_FLAGS ;;
    *.avx2.cpp) flags=$AVX2_FLAGS ;;
  esac
  local rel=${src#"$ROOT"/}
  local obj="$OUT/obj/${rel//\//__}.o"
  # shellcheck disable=SC2086
  $CXX $BASE_FLAGS $flags -c "$src" -o "$obj" || { echo "build failed: $rel" >&2; return 1; }
}
export -f compile_one
export ROOT OUT CXX BASE_FLAGS AVX512_FLAGS AVX2_FLAGS

# A static archive, so each test links only the objects it needs (a family still being written
# cannot break the other families' tests at link time). A failed compile still fails the run.
status=0
rm -f "$OUT"/obj/*.o "$OUT/libop_plugin_kernels.a"
find "$ROOT/csrc/runtime" "$ROOT/csrc/kernels" -name '*.cpp' -print0 | sort -z |
  xargs -0 -n 1 -P "$JOBS" bash -c 'compile_one "$0"' || status=1
ar rcs "$OUT/libop_plugin_kernels.a" "$OUT"/obj/*.o

for test_src in "$ROOT"/tests/kernels/test_*.cpp; do
  [ -e "$test_src" ] || continue
  name=$(basename "$test_src" .cpp)
  # shellcheck disable=SC2086
  if ! $CXX $BASE_FLAGS "$test_src" "$OUT/libop_plugin_kernels.a" -o "$OUT/$name"; then
    echo "build failed: $name" >&2
    status=1
    continue
  fi
  for level in $LEVELS; do
    if [ "$level" = native ]; then
      env -u OP_PLUGIN_ISA "$OUT/$name" > "$OUT/$name.$level.log" 2>&1 && rc=0 || rc=$?
    else
      OP_PLUGIN_ISA=$level "$OUT/$name" > "$OUT/$name.$level.log" 2>&1 && rc=0 || rc=$?
    fi
    grep '^FAIL' "$OUT/$name.$level.log" | head -20 || true
    echo "$name [$level]: $(tail -n 1 "$OUT/$name.$level.log")"
    [ "$rc" -eq 0 ] || status=1
  done
done
exit $status

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
#   OP_PLUGIN_KERNEL_TESTS     only build and run tests whose name contains this string
#   CXX, JOBS                  compiler (g++) and parallel compile/test jobs (nproc)
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

# One compile command per library source, run in parallel. An object is rebuilt when it is older
# than its source, than any header under csrc/ or the generated include directory, or than the
# flags stamp (so a rerun after a small edit only recompiles what may have changed).
compile_one() {
  local src=$1 flags=""
  case "$src" in
    *.avx512.cpp) flags=$AVX512_FLAGS ;;
    *.avx2.cpp) flags=$AVX2_FLAGS ;;
  esac
  local rel=${src#"$ROOT"/}
  local obj="$OUT/obj/${rel//\//__}.o"
  if [ -e "$obj" ] && [ "$obj" -nt "$src" ] && [ "$obj" -nt "$OUT/flags.stamp" ] &&
     [ -z "$(find "$ROOT/csrc" "$GEN_INCLUDE" -name '*.h' -newer "$obj" -print -quit)" ]; then
    return 0
  fi
  # shellcheck disable=SC2086
  $CXX $BASE_FLAGS $flags -c "$src" -o "$obj" || { rm -f "$obj"; echo "build failed: $rel" >&2; return 1; }
}
export -f compile_one
export ROOT OUT CXX BASE_FLAGS AVX512_FLAGS AVX2_FLAGS GEN_INCLUDE

# A static archive, so each test links only the objects it needs (a family still being written
# cannot break the other families' tests at link time). A failed compile still fails the run.
status=0
stamp="$CXX $BASE_FLAGS | $AVX512_FLAGS | $AVX2_FLAGS"
if [ "$(cat "$OUT/flags.stamp" 2>/dev/null)" != "$stamp" ]; then echo "$stamp" > "$OUT/flags.stamp"; fi
find "$ROOT/csrc/runtime" "$ROOT/csrc/kernels" -name '*.cpp' -print0 | sort -z |
  xargs -0 -n 1 -P "$JOBS" bash -c 'compile_one "$0"' || status=1
# Objects of sources that no longer exist must not linger in the archive.
for obj in "$OUT"/obj/*.o; do
  [ -e "$obj" ] || continue
  rel=$(basename "$obj" .o)
  [ -e "$ROOT/${rel//__//}" ] || rm -f "$obj"
done
rm -f "$OUT/libop_plugin_kernels.a"
ar rcs "$OUT/libop_plugin_kernels.a" "$OUT"/obj/*.o

# Build every test, then run (test, level) pairs in parallel; logs in $OUT/<test>.<level>.log.
run_one() {
  local name=$1 level=$2 log="$OUT/$1.$2.log"
  if [ "$level" = native ]; then
    env -u OP_PLUGIN_ISA "$OUT/$name" > "$log" 2>&1
  else
    OP_PLUGIN_ISA=$level "$OUT/$name" > "$log" 2>&1
  fi
  echo $? > "$log.rc"
}
export -f run_one

tests=()
for test_src in "$ROOT"/tests/kernels/test_*.cpp; do
  [ -e "$test_src" ] || continue
  name=$(basename "$test_src" .cpp)
  case "$name" in *${OP_PLUGIN_KERNEL_TESTS:-}*) ;; *) continue ;; esac
  # shellcheck disable=SC2086
  if $CXX $BASE_FLAGS "$test_src" "$OUT/libop_plugin_kernels.a" -o "$OUT/$name"; then
    tests+=("$name")
  else
    echo "build failed: $name" >&2
    status=1
  fi
done

for name in "${tests[@]}"; do
  for level in $LEVELS; do
    rm -f "$OUT/$name.$level.log.rc"
    printf '%s %s\n' "$name" "$level"
  done
done | xargs -n 2 -P "$JOBS" bash -c 'run_one "$0" "$1"'

for name in "${tests[@]}"; do
  for level in $LEVELS; do
    log="$OUT/$name.$level.log"
    rc=$(cat "$log.rc" 2>/dev/null || echo 1)
    grep '^FAIL' "$log" | head -20 || true
    echo "$name [$level]: $(tail -n 1 "$log")$([ "$rc" -eq 0 ] || echo " (exit status $rc)")"
    [ "$rc" -eq 0 ] || status=1
  done
done
exit $status

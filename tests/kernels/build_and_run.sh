#!/usr/bin/env bash
# Builds the torch-free kernel library (csrc/runtime + every source under csrc/kernels) and each
# tests/kernels/test_*.cpp, then runs every test once per ISA level.
#
# Usage: tests/kernels/build_and_run.sh [GENERATED_INCLUDE_DIR]
#   GENERATED_INCLUDE_DIR  where op_plugin/ops/<op>.h live (the codegen output); default
#                          $OP_PLUGIN_GENERATED_INCLUDE, else build/generated/include.
# Environment:
#   OP_PLUGIN_KERNEL_TEST_DIR  where the test binaries and logs go (default build/kernel_tests)
#   OP_PLUGIN_KERNEL_LIB_DIR   where the kernel library is built (default build/kernels, shared
#                              with the extension build)
#   OP_PLUGIN_TEST_ISA_LEVELS  levels to run each test at (default "native avx512_bf16 avx512 avx2 baseline";
#                              "native" = the best the CPU has; others are set via OP_PLUGIN_ISA,
#                              which caps the level: a level the CPU lacks would repeat a lower
#                              one, so it is named and not run again)
#   OP_PLUGIN_KERNEL_TESTS     only build and run tests whose name contains one of these
#                              (space-separated) strings
#   CXX, JOBS, PYTHON          test compiler (g++), parallel jobs (nproc), python running the build
#   OP_PLUGIN_KERNEL_TEST_RANDOM, OP_PLUGIN_KERNEL_TEST_SEED  how many random valid calls the flash
#                              and swa tests draw (16), and their seed (1): attention_test_util.h
#   OP_PLUGIN_SANITIZE=1       library and tests with ASan+UBSan (build.py's SANITIZE_FLAGS), in
#                              build/kernels-sanitize and build/kernel_tests-sanitize by default;
#                              set ASAN_OPTIONS (e.g. detect_leaks=1) as ci/sanitize.sh does
#   OP_PLUGIN_AMX_EMULATE=1    library and tests with the software AMX tiles of
#                              kernels/common/amx_intrinsics.h (build.py's AMX_EMULATE_FLAGS), in
#                              build/kernels-amxemu and build/kernel_tests-amxemu: the avx512_amx
#                              level's code on a CPU without AMX (ci/test.sh runs it there)
#   OP_PLUGIN_AVX512_EMULATE=1 the same, and the *.avx512.cpp sources built with the AVX2 flags and
#                              kernels/common/avx512_model.h's AVX-512 intrinsics (build.py's
#                              isa_flags), in build/kernels-avx512emu and build/kernel_tests-avx512emu:
#                              the avx512, avx512_bf16 and avx512_amx levels' code on an AVX2 CPU
#
# The library follows the build convention of python/op_plugin/build.py: *.avx512.cpp and
# *.avx2.cpp get their ISA flags, every other .cpp baseline flags (tests too: test_*.avx512.cpp,
# test_*.avx2.cpp). Exit status is non-zero if a build or a test fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
GEN_INCLUDE=$(realpath "${1:-${OP_PLUGIN_GENERATED_INCLUDE:-$ROOT/build/generated/include}}")
SUFFIX=$([ "${OP_PLUGIN_SANITIZE:-}" = 1 ] && echo -sanitize || true)
if [ "${OP_PLUGIN_AVX512_EMULATE:-}" = 1 ]; then SUFFIX=$SUFFIX-avx512emu
elif [ "${OP_PLUGIN_AMX_EMULATE:-}" = 1 ]; then SUFFIX=$SUFFIX-amxemu; fi
OUT=${OP_PLUGIN_KERNEL_TEST_DIR:-$ROOT/build/kernel_tests$SUFFIX}
LIB_DIR=${OP_PLUGIN_KERNEL_LIB_DIR:-$ROOT/build/kernels$SUFFIX}
LEVELS=${OP_PLUGIN_TEST_ISA_LEVELS:-"native avx512_bf16 avx512 avx2 baseline"}
CXX=${CXX:-g++}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
PY=${PYTHON:-python}

BASE_FLAGS="-std=c++17 -O3 -fPIC -Wall -Wextra -pthread -I$ROOT/csrc/include -I$ROOT/csrc -I$GEN_INCLUDE"
if [ -n "$SUFFIX" ]; then  # the flags the library gets from build.py, which reads the same variables
  BASE_FLAGS="$BASE_FLAGS $(cd "$ROOT/python/op_plugin" && "$PY" -c 'import build; print(build.sanitize_flags(), build.amx_emulate_flags())')"
fi

# Tests named test_*.avx512.cpp / test_*.avx2.cpp exercise that ISA's code directly and get the
# library's flags for it.
AVX512_FLAGS=$(cd "$ROOT/python/op_plugin" && "$PY" -c 'import build; print(build.isa_flags("avx512"))')
AVX2_FLAGS=$(cd "$ROOT/python/op_plugin" && "$PY" -c 'import build; print(build.isa_flags("avx2"))')

if [ ! -d "$GEN_INCLUDE/op_plugin/ops" ]; then
  echo "build_and_run.sh: no generated headers in $GEN_INCLUDE/op_plugin/ops (pass the directory" \
       "as the first argument or set OP_PLUGIN_GENERATED_INCLUDE)" >&2
  exit 2
fi
mkdir -p "$OUT"

# The kernel library is the one the extension links: compiled by op_plugin's ninja build (per-ISA
# flags by file name, header dependencies tracked), in the extension's build directory by
# default, so after `pip install .` nothing is recompiled here. A static archive: each test links
# only the objects it needs.
status=0
"$PY" - "$ROOT" "$LIB_DIR" "$GEN_INCLUDE" "$JOBS" <<'PYEOF' || status=1
import importlib.util, os, sys
root, lib_dir, gen_include, jobs = sys.argv[1:5]
spec = importlib.util.spec_from_file_location("op_plugin_build", os.path.join(root, "python", "op_plugin", "build.py"))
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)
build.build_kernels(lib_dir, build.kernel_sources(os.path.join(root, "csrc"), os.path.dirname(gen_include)),
                    [os.path.join(root, "csrc"), os.path.join(root, "csrc", "include"), gen_include], jobs=int(jobs))
PYEOF
LIB="$LIB_DIR/libop_plugin_kernels.a"

# Run (test, level) pairs in parallel once the tests are built; logs in $OUT/<test>.<level>.log.
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
export OUT

# The tests (and isa_level, which names the level each OP_PLUGIN_ISA runs as), compiled $JOBS at a
# time; each compiler's output is shown after the batch, in order.
build_one() {
  local name=$1 flags=$BASE_FLAGS
  case "$name" in *.avx512) flags="$flags $AVX512_FLAGS" ;; *.avx2) flags="$flags $AVX2_FLAGS" ;; esac
  # shellcheck disable=SC2086
  $CXX $flags "$ROOT/tests/kernels/$name.cpp" "$LIB" -o "$OUT/$name" > "$OUT/$name.build.log" 2>&1
  echo $? > "$OUT/$name.build.rc"
}
export -f build_one
export CXX BASE_FLAGS AVX512_FLAGS AVX2_FLAGS ROOT LIB

wanted=()
for test_src in "$ROOT"/tests/kernels/test_*.cpp; do
  [ -e "$test_src" ] || continue
  name=$(basename "$test_src" .cpp)
  if [ -n "${OP_PLUGIN_KERNEL_TESTS:-}" ]; then
    keep=
    for want in $OP_PLUGIN_KERNEL_TESTS; do case "$name" in *"$want"*) keep=1 ;; esac; done
    [ -n "$keep" ] || continue
  fi
  wanted+=("$name")
done
tests=()
isa_level_built=
if [ "$status" -eq 0 ]; then
  for name in isa_level "${wanted[@]}"; do rm -f "$OUT/$name.build.rc"; printf '%s\n' "$name"; done \
    | xargs -n 1 -P "$JOBS" bash -c 'build_one "$0"'
  for name in isa_level "${wanted[@]}"; do
    cat "$OUT/$name.build.log" >&2 2>/dev/null || true
    if [ "$(cat "$OUT/$name.build.rc" 2>/dev/null || echo 1)" -ne 0 ]; then
      echo "build failed: $name" >&2
      status=1
    elif [ "$name" = isa_level ]; then isa_level_built=1
    else tests+=("$name"); fi
  done
fi

# Each distinct level once: a level the CPU lacks runs as a lower one (the same code again), so
# it is named and left out (on an AVX2-only CPU: native, avx512_bf16 and avx512 are all avx2).
levels=()
declare -A runs_as_of
if [ -n "$isa_level_built" ]; then
  seen=" "
  for level in $LEVELS; do
    if [ "$level" = native ]; then runs_as=$(env -u OP_PLUGIN_ISA "$OUT/isa_level"); else runs_as=$(OP_PLUGIN_ISA=$level "$OUT/isa_level"); fi
    case "$seen" in
      *" $runs_as "*) echo "ISA level $level runs as $runs_as on this CPU, which is tested already: not run again" ;;
      *) seen="$seen$runs_as "; levels+=("$level"); runs_as_of[$level]=$runs_as ;;
    esac
  done
fi

for name in "${tests[@]}"; do
  for level in "${levels[@]}"; do
    rm -f "$OUT/$name.$level.log.rc"
    printf '%s %s\n' "$name" "$level"
  done
done | xargs -n 2 -P "$JOBS" bash -c 'run_one "$0" "$1"'

for name in "${tests[@]}"; do
  for level in "${levels[@]}"; do
    log="$OUT/$name.$level.log"
    rc=$(cat "$log.rc" 2>/dev/null || echo 1)
    grep '^FAIL' "$log" | head -20 || true
    label=$level; [ "$level" = native ] && label="native = ${runs_as_of[native]}"
    echo "$name [$label]: $(tail -n 1 "$log")$([ "$rc" -eq 0 ] || echo " (exit status $rc)")"
    [ "$rc" -eq 0 ] || status=1
  done
done
exit $status

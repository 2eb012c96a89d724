#!/usr/bin/env bash
# The sanitizer runs of issue 7 (items 2 and 7), against an ASan+UBSan build of the kernels, the
# bindings and the extension (OP_PLUGIN_SANITIZE=1, read by python/op_plugin/build.py and setup.py).
#
#   ci/sanitize.sh kernels   the torch-free C++ kernel tests, ASan+UBSan+LeakSanitizer (every ISA level)
#   ci/sanitize.sh kernels-ci  the reduced set ci/test.sh runs: the native ISA level only (the other
#                            ISA's sources are built uninstrumented: they never run there), without
#                            test_swa_attention (3+ minutes alone under ASan; its engine is the
#                            flash attention one, which test_flash_attention covers)
#   ci/sanitize.sh python    build the variant into its own venv, run tests/ops and tests/reliability
#                            under it (extra arguments go to pytest, e.g. -k, to run a subset)
#   ci/sanitize.sh build | python-only [pytest args]   the two halves of `python`
#   ci/sanitize.sh leaks     LeakSanitizer over a small Python suite (needs `build` first)
#   ci/sanitize.sh           kernels, python and leaks
#
# Any ASan or UBSan report fails the run: ASan stops at its first error, UBSan aborts
# (-fno-sanitize-recover), and both abort the process, which fails pytest.
# Environment: PYTHON (the interpreter whose site-packages hold torch; default python),
# OP_PLUGIN_SANITIZE_DIR (work directory; default build/sanitize: a copy of the tree, the venv, logs).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
PY=${PYTHON:-python}
WORK=$(mkdir -p "${OP_PLUGIN_SANITIZE_DIR:-$ROOT/build/sanitize}" && cd "${OP_PLUGIN_SANITIZE_DIR:-$ROOT/build/sanitize}" && pwd)
SRC=$WORK/src
VENV=$WORK/venv
# libasan first (it must come before every other library), and libstdc++ with it: python itself
# does not link libstdc++, and ASan resolves the real __cxa_throw it intercepts at start-up (else
# the first C++ exception, e.g. an op's argument error, dies in a CHECK inside ASan).
PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)"
export OP_PLUGIN_SANITIZE=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# allocator_may_return_null: the fuzzed calls ask for absurd sizes; torch must see a failed
# allocation (and raise) as without ASan, instead of ASan stopping at the request.
ASAN_BASE=abort_on_error=1:allocator_may_return_null=1

kernels() {
  echo "== C++ kernel tests under ASan+UBSan+LSan"
  $PY -m codegen --out "$WORK/generated" >/dev/null
  ASAN_OPTIONS=$ASAN_BASE:detect_leaks=1 PYTHON=$PY bash tests/kernels/build_and_run.sh "$WORK/generated/include"
}

kernels_ci() {
  # Only the native level runs, so only its ISA's sources (and the baseline ones) are instrumented
  # (OP_PLUGIN_SANITIZE_ISA, python/op_plugin/build.py); all of them without an installed op_plugin.
  local level
  level=$($PY -c 'import op_plugin; print(op_plugin.isa_level())' 2>/dev/null || true)
  case "$level" in avx512*) level=avx512 ;; esac
  OP_PLUGIN_SANITIZE_ISA=$level OP_PLUGIN_TEST_ISA_LEVELS=native \
    OP_PLUGIN_KERNEL_TESTS="flash_attention floyd block_attention gemm" kernels
}

build() {
  echo "== building the sanitizer variant into $VENV"
  rm -rf "$SRC" && mkdir -p "$SRC"
  # the working tree as it is (uncommitted edits included), without build outputs
  tar -C "$ROOT" --exclude=./build --exclude=./.git --exclude=./dist --exclude='*.egg-info' -cf - . | tar -C "$SRC" -xf -
  [ -x "$VENV/bin/python" ] || $PY -m venv --system-site-packages "$VENV"
  # setuptools/wheel come from the system site-packages when present; torch is never downloaded
  (cd "$SRC" && "$VENV/bin/python" -m pip install -q --no-build-isolation --no-deps --ignore-installed .)
  (cd "$WORK" && LD_PRELOAD=$PRELOAD ASAN_OPTIONS=detect_leaks=0 "$VENV/bin/python" -c 'import op_plugin._C as c; assert "sanitize" in c.build_flags(), c.build_flags(); print(c.build_flags())')
}

# The op suite, minus what cannot run under ASan:
# - test_ten_thousand_calls_do_not_grow_memory measures resident memory, which ASan's quarantine
#   (freed blocks held back to catch use-after-free) grows by design; leaks are LSan's job below.
# - slow tests (-m "not slow"): the >2^31-element tests need 8-13 GB; ASan's shadow memory and
#   redzones would push that past a 24 GB machine.
python_suite() {
  echo "== tests/ops and tests/reliability under ASan+UBSan"
  local start=$SECONDS
  (cd "$SRC" && LD_PRELOAD=$PRELOAD ASAN_OPTIONS=$ASAN_BASE:detect_leaks=0 \
     "$VENV/bin/python" -m pytest tests/ops tests/reliability -q -p no:cacheprovider -m "not slow" \
     --deselect tests/reliability/test_leaks_and_extremes.py::test_ten_thousand_calls_do_not_grow_memory "$@")
  echo "python suite under ASan+UBSan: $((SECONDS - start)) s"
}

# LeakSanitizer over a small Python suite: every call path of every op, error paths included (the
# fuzzed calls: early returns are where a leak hides). PYTHONMALLOC=malloc: objects in pymalloc's
# mmap'ed arenas are invisible to LSan, so what they point to would look leaked (thousands of
# reports, past LSan's limit of 5000, which would hide the rest). CPython and torch keep some
# allocations alive until exit by design (interned objects, registries); every stack passes through
# libpython, so no suppression by library is safe. Instead the reports are kept and a leak fails
# the run if any frame of its allocation stack is op_plugin's (the extension or csrc/). No
# suppressions: with PYTHONMALLOC=malloc, torch's per-op registration records (allocated under
# op_plugin's TORCH_LIBRARY static initializer) are reachable and no longer reported.
leaks() {
  echo "== LeakSanitizer over a small Python suite"
  local logs=$WORK/lsan
  rm -rf "$logs" && mkdir -p "$logs"
  local status=0
  (cd "$SRC" && LD_PRELOAD=$PRELOAD OP_PLUGIN_FUZZ_EXAMPLES=${OP_PLUGIN_LEAK_FUZZ_EXAMPLES:-20} \
     PYTHONMALLOC=malloc \
     ASAN_OPTIONS=allocator_may_return_null=1:detect_leaks=1:exitcode=0:fast_unwind_on_malloc=0:malloc_context_size=60:log_path=$logs/report \
     "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/reliability/test_fuzz.py \
       tests/reliability/test_determinism_and_concurrency.py -k "fuzzed or float32 or threads") || status=1
  "$PY" "$ROOT/ci/lsan_report.py" "$logs" || status=1
  return $status
}

case "${1:-all}" in
  kernels) kernels ;;
  kernels-ci) kernels_ci ;;
  build) build ;;
  python) shift; build; python_suite "$@" ;;
  python-only) shift; python_suite "$@" ;;  # the last build again, e.g. with -k to select tests
  leaks) leaks ;;
  all) kernels; build; python_suite; leaks ;;
  *) echo "usage: ci/sanitize.sh [kernels|kernels-ci|build|python [pytest args]|python-only [pytest args]|leaks]" >&2; exit 2 ;;
esac

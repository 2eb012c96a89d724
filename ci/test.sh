#!/usr/bin/env bash
# README command 2: the whole test suite against the installed wheel (run ci/build.sh first).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python}

# Torch-free kernel tests (C++), against the headers the build generated.
$PY -m codegen --out build/generated >/dev/null
bash tests/kernels/build_and_run.sh build/generated/include
# The same under ASan+UBSan+LeakSanitizer, reduced (native ISA level, no swa test; about 3 min);
# the full sanitizer runs, the Python op suite included, are `bash ci/sanitize.sh` (docs/reliability.md).
PYTHON=$PY bash ci/sanitize.sh kernels-ci
# The levels this CPU lacks, on models, so every level's code is tested whichever host CI lands on:
# - AVX512_BF16 but no AMX: the kernels that use tiles, built with the software model of the tile
#   instructions (kernels/common/amx_intrinsics.h), at avx512_amx;
# - AVX-512 without AVX512_BF16, or AVX2 only: the *.avx512.cpp code built with the AVX2 flags and
#   the AVX-512 intrinsics of kernels/common/avx512_model.h (and the tile model), at the AVX-512
#   levels the CPU lacks.
KERNELS_WITH_AVX512_CODE="accvec amx gemm block flash swa floyd"
case "$($PY -c 'import op_plugin; print(op_plugin.isa_level())')" in
  avx512_bf16)
    OP_PLUGIN_AMX_EMULATE=1 OP_PLUGIN_TEST_ISA_LEVELS=native OP_PLUGIN_KERNEL_TESTS="amx gemm flash swa floyd" \
      bash tests/kernels/build_and_run.sh build/generated/include ;;
  avx512)
    OP_PLUGIN_AVX512_EMULATE=1 OP_PLUGIN_TEST_ISA_LEVELS="native avx512_bf16" OP_PLUGIN_KERNEL_TESTS="$KERNELS_WITH_AVX512_CODE" \
      bash tests/kernels/build_and_run.sh build/generated/include ;;
  avx2)
    OP_PLUGIN_AVX512_EMULATE=1 OP_PLUGIN_TEST_ISA_LEVELS="native avx512_bf16 avx512" OP_PLUGIN_KERNEL_TESTS="$KERNELS_WITH_AVX512_CODE" \
      bash tests/kernels/build_and_run.sh build/generated/include ;;
esac

# Codegen, ops, packaging. Slow tests (marked) stay out of the default run. One pytest-xdist worker
# per core: most tests are single-threaded Python (tracing, torch.compile, subprocesses), and the
# suite took 10 of CI's 30 minutes in one process. With two workers, each worker's OpenMP threads
# would spin at every barrier waiting for a thread the other worker holds off its core: passive
# waiting took tests/ops/test_swa.py from 58 s to 24 s (one thread per worker: 26 s, but the
# suite's calls would then no longer split their work across threads).
OMP_WAIT_POLICY=PASSIVE $PY -m pytest tests -q -m "not slow" -n "$(nproc 2>/dev/null || echo 2)" "$@"

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
# The avx512_amx level's code where the CPU has AVX512_BF16 but no AMX: the kernels that use tiles,
# built with the software model of the tile instructions (kernels/common/amx_intrinsics.h).
if [ "$($PY -c 'import op_plugin; print(op_plugin.isa_level())')" = avx512_bf16 ]; then
  OP_PLUGIN_AMX_EMULATE=1 OP_PLUGIN_TEST_ISA_LEVELS=native OP_PLUGIN_KERNEL_TESTS="amx gemm flash swa floyd" \
    bash tests/kernels/build_and_run.sh build/generated/include
fi

# Codegen, ops, packaging. Slow tests (marked) stay out of the default run.
$PY -m pytest tests -q -m "not slow" "$@"

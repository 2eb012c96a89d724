#!/usr/bin/env bash
# Builds op_plugin against a second torch release and runs the op tests there (issue 6, item 6).
# Not part of .ci/run: torch 2.14.1 is a CUDA build (several GB with its CUDA libraries) and the
# build plus tests/ops take several minutes. It runs on the CPU; nothing here needs a GPU.
#
#   bash ci/other_torch.sh [TORCH_VERSION]      (default 2.14.1; VENV=... picks the venv directory)
#
# Its own venv, never the active one: the default path (ci/build.sh, pyproject) stays on 2.13.0.
# pip takes the wheels from this machine's local package index (pip.conf), not from the network.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
TORCH=${1:-2.14.1}
VENV=${VENV:-/tmp/op_plugin_torch_${TORCH}}
PY="$VENV/bin/python"
SRC=$(mktemp -d /tmp/op_plugin_src.XXXXXX)
trap 'rm -rf "$SRC"' EXIT

if [ ! -x "$PY" ]; then
  python3 -m venv "$VENV"
fi
"$PY" -m pip install --quiet "torch==$TORCH" "setuptools>=64" wheel jinja2 pyyaml ninja numpy pytest hypothesis expecttest matplotlib
"$PY" -c "import torch; assert torch.__version__.split('+')[0] == '$TORCH', torch.__version__; print('torch', torch.__version__)"

# Build from a copy of the tracked files (as they are in the working tree), so build/ of the checkout,
# which the default path owns, is not overwritten with objects for another torch.
git ls-files -z --cached | xargs -0 cp --parents -t "$SRC"
cd "$SRC"
start=$(date +%s)
"$PY" -m pip wheel -v --no-build-isolation --no-deps --wheel-dir dist . >build.log 2>&1 || { tail -60 build.log; exit 1; }
grep -E "^\s*codegen:" build.log | sed -E "s/^\s+//" || true
"$PY" -m pip install --quiet --force-reinstall --no-deps dist/op_plugin-*.whl
echo "built and installed against torch $TORCH in $(( $(date +%s) - start )) s"
(cd /tmp && "$PY" -m op_plugin doctor | head -3)
"$PY" -m pytest tests/ops -q -m "not slow" -p no:cacheprovider "${@:2}"

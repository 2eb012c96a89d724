#!/usr/bin/env bash
# README command 1: install what the build needs, build the wheel, install it, run the demo.
# Works in whatever Python environment is active (a fresh venv is the intended case).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python}

# torch is pinned to the CPU build on this machine's disk; the build runs without isolation so
# pip never fetches another torch for a build environment.
$PY -m pip install --quiet "torch==2.13.0" "setuptools>=64" wheel jinja2 pyyaml ninja numpy pytest hypothesis expecttest matplotlib
rm -rf dist
$PY -m pip wheel --no-build-isolation --no-deps --wheel-dir dist . 2>&1 | grep -E "^(codegen|ninja|\[|Created|Successfully|ERROR)" || true
wheel=$(ls dist/op_plugin-*.whl)
$PY -m pip install --quiet --force-reinstall --no-deps "$wheel"
echo "installed $wheel"
cd /tmp && $PY -m op_plugin demo

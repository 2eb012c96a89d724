#!/usr/bin/env bash
# README command 1: install what the build needs, build the wheel, install it, run the demo.
# Works in whatever Python environment is active (a fresh venv is the intended case).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python}

# torch is pinned to the CPU build on this machine's disk; the build runs without isolation so
# pip never fetches another torch for a build environment.
$PY -m pip install --quiet "torch==2.13.0" "setuptools>=64" wheel jinja2 pyyaml ninja cmake numpy pytest pytest-xdist hypothesis expecttest matplotlib simde-py==0.8.2.post1
rm -rf dist
# What the build did: the generator's summary (ops, files written/unchanged), then one line per
# compile step (kernels by our ninja file, bindings by torch's; their long command lines cut to the
# file), and the compiler's errors with the lines that locate them.
$PY -m pip wheel -v --no-build-isolation --no-deps --wheel-dir dist . 2>&1 \
  | grep -E "^\s*(codegen:|\[[0-9]+/[0-9]+\]|Created wheel|Successfully|ERROR|error:|In file included from|\S+: In )|: (fatal )?error: " \
  | sed -E "s/^\s+//; s/^(\[[0-9]+\/[0-9]+\]) c\+\+ .* -c (\S+) .*/\1 CXX \2/" || true
wheel=$(ls dist/op_plugin-*.whl)
$PY -m pip install --quiet --force-reinstall --no-deps "$wheel"
echo "installed $wheel"
cd /tmp && $PY -m op_plugin demo

#!/usr/bin/env bash
# Build-speed figures of docs/build.md (issue 6, item 5); not part of .ci/run (a clean build takes
# minutes). Works on a copy of the tracked files in a temp directory, through the same path as
# ci/build.sh (pip wheel --no-build-isolation), with the active Python; installs nothing.
#   1. generating the whole registry into an empty directory, and again (nothing to write)
#   2. a clean build                       4. after touching one kernel .cpp
#   3. a rebuild with nothing changed      5. after editing one registry entry
# For each build: wall time, CPU time (user+sys of every process; on an idle machine with N cores
# the wall time of a parallel build approaches CPU/N) and the compile steps it ran (kernel objects by
# our ninja file, binding objects by torch's). Run it on an idle machine; it prints the load average.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python}
SRC=$(mktemp -d /tmp/op_plugin_speed.XXXXXX)
trap 'rm -rf "$SRC"' EXIT
git ls-files -z --cached | xargs -0 cp --parents -t "$SRC"
cd "$SRC"
echo "cores $(nproc), load average $(cut -d' ' -f1-3 /proc/loadavg), torch $($PY -c 'import torch; print(torch.__version__)')"

now() { date +%s.%N; }
since() { $PY -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f} s')" "$1" "$(now)"; }

for run in 1 2; do
  start=$(now); $PY -m codegen --out build/speed_gen | sed 's/^/  /'; echo "generate (run $run): $(since "$start") wall, with interpreter start"
done

build() {  # $1: label
  local log cpu; log=$(mktemp); cpu=$(mktemp)
  /usr/bin/time -o "$cpu" -f "%e s wall, %U s user + %S s sys CPU" \
    $PY -m pip wheel -v --no-build-isolation --no-deps --wheel-dir dist . >"$log" 2>&1 || { tail -40 "$log"; exit 1; }
  echo "$1: $(tail -1 "$cpu"), load $(cut -d' ' -f1 /proc/loadavg);$(grep -m1 -E '^\s*codegen:' "$log" | sed 's/ in .*//'); kernel objects compiled: $(grep -c 'CXX ' "$log" || true); binding objects compiled: $(grep -cE '^\s*\[[0-9]+/[0-9]+\] c\+\+ ' "$log" || true)"
  grep -E 'CXX |^\s*\[[0-9]+/[0-9]+\] c\+\+ ' "$log" | sed -E 's/^\s*\[[0-9]+\/[0-9]+\] c\+\+ .* -c (\S+) .*/    bindings: \1/; s/^.*CXX (\S+).*/    kernel: \1/' | sed "s|$SRC/||" || true
  rm -f "$log" "$cpu"
}

build "clean build"
build "rebuild, nothing changed"
kernel=$(ls csrc/kernels/block_attention_residuals/*.cpp | head -1)
touch "$kernel"; build "rebuild after touching $(basename "$kernel")"
# One entry's doc text changes in place: its binding, its kernel header and ops.py change, the other
# ops' files do not (an edit that moves later entries also rewrites register_schema.cpp and fakes.py,
# which name every op's file:LINE).
sed -i '0,/^    Block Attention Residuals (Kimi/s//    Block Attention Residuals (edited; Kimi/' op_plugin_functions.yaml
grep -q "(edited; Kimi" op_plugin_functions.yaml || { echo "the registry edit did not apply"; exit 1; }
build "rebuild after editing one registry entry (block_attention_residuals doc)"

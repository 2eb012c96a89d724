#!/usr/bin/env bash
# Runs torch SDPA (bench_flash_attention_sdpa.py) and the op_plugin kernel benchmark
# (bench_flash_attention) alternately, ROUNDS times, so both see the same machine load.
# Usage: compare_flash_attention.sh BENCH_BINARY [ROUNDS] [SDPA groups...]
set -euo pipefail
BENCH=${1:?path to the bench_flash_attention binary}
ROUNDS=${2:-3}
shift 2 || true
GROUPS_=${*:-"gemm dense window tnd"}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r ($(cut -d' ' -f1-3 /proc/loadavg))"
  # shellcheck disable=SC2086
  python3 "$HERE/bench_flash_attention_sdpa.py" $GROUPS_
  "$BENCH" 2 ""
  "$BENCH" 1 "dense float32"
done

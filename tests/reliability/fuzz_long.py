"""The long fuzz run of issue 7: python tests/reliability/fuzz_long.py [CALLS_PER_OP [CASE ...]]

Draws CALLS_PER_OP (default 10,000) malformed calls per case of test_fuzz.py (every op, forward
and backward; CASE names select some, e.g. flash_attn_grad swa_backward) with its strategies
and prints, per case, how many raised a clear error and how many succeeded with checked outputs.
Any other outcome (a crash, a wrong shape, a non-finite output for finite inputs) stops the run.
"""
from __future__ import annotations

import os
import sys
import time
from collections import Counter

from hypothesis import HealthCheck, given, settings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_fuzz  # noqa: E402


def main() -> int:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    names = sys.argv[2:] or list(test_fuzz._base_calls())
    unknown = sorted(set(names) - set(test_fuzz._base_calls()))
    if unknown:
        raise SystemExit(f"unknown cases {unknown}; known: {sorted(test_fuzz._base_calls())}")
    total = Counter()
    for name in names:
        outcomes: Counter = Counter()
        start = time.perf_counter()

        @settings(max_examples=calls, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(call=test_fuzz.malformed_calls(name))
        def run(call) -> None:
            outcomes[test_fuzz.check_one(*call)] += 1

        run()
        total.update(outcomes)
        print(f"{name:26} {sum(outcomes.values()):6} calls: {outcomes['error']:6} clear errors, "
              f"{outcomes['ok']:6} checked results ({time.perf_counter() - start:.0f} s)", flush=True)
    print(f"{'all':26} {sum(total.values()):6} calls: {total['error']:6} clear errors, {total['ok']:6} checked results")
    return 0


if __name__ == "__main__":
    sys.exit(main())

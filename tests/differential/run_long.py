"""The long differential run: python tests/differential/run_long.py [--long] [CALLS_PER_FAMILY [FAMILY ...]]

Draws CALLS_PER_FAMILY (default 10,000) valid calls per op family of cases.py (new random ones
on every run) and checks each against the float64 references (--long: the long calls of
cases.py, lengths around the AMX dataflows' blocks, production head dims and wide windows);
prints per family the calls, the time and how many calls exercised each feature, as
docs/reliability.md records them. The first failing call stops the run, shrunk to a minimal case
by hypothesis, with its full assertion.
"""
from __future__ import annotations

import os
import sys
import time
from collections import Counter

from hypothesis import HealthCheck, given, settings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "ops")]
import cases  # noqa: E402


def main() -> int:
    args = sys.argv[1:]
    long = "--long" in args
    args = [a for a in args if a != "--long"]
    calls = int(args[0]) if args else 10_000
    names = args[1:] or list(cases.FAMILIES)
    unknown = sorted(set(names) - set(cases.FAMILIES))
    if unknown:
        raise SystemExit(f"unknown families {unknown}; known: {sorted(cases.FAMILIES)}")
    for name in names:
        make_cases, check = cases.FAMILIES[name]
        seen: Counter = Counter()
        start = time.perf_counter()

        @settings(max_examples=calls, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
        @given(case=make_cases(long=long))
        def run(case) -> None:
            check(case)
            seen["calls"] += 1
            seen.update(cases.features(name, case))

        run()
        print(f"## {name}: {seen.pop('calls')} valid{' long' * long} calls of {', '.join(cases.OPS_OF[name])}, all within budget "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
        for feature, count in sorted(seen.items()):
            print(f"  {feature:34} {count:6}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Median wall-clock timing, shared by the demo and benchmarks/ (the machine is noisy: medians)."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def median_seconds(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_medians(fns: Sequence[Callable[[], object]], repeats: Sequence[int],
                        warmup: int = 1) -> list[float]:
    """Median seconds of each of `fns`, timed in alternation: fns[0], fns[1], ..., fns[0], ...,
    fns[i] `repeats[i]` times (a slow baseline may run fewer times, its calls spread over the first
    rounds), after `warmup` calls of each.

    On a shared machine the speed drifts between seconds (another guest on the host, the two
    vCPUs scheduled on one core): timed one after the other, five calls of one and then five of
    the other can see different machines and their ratio moves by up to 2x. Alternating them lets
    both medians see the same conditions, so their ratio holds still.
    """
    if len(fns) != len(repeats) or any(r < 1 for r in repeats):
        raise ValueError("interleaved_medians: one repeat count (>= 1) per function")
    for fn in fns:
        for _ in range(warmup):
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for round_ in range(max(repeats)):
        for i, fn in enumerate(fns):
            if round_ < repeats[i]:
                start = time.perf_counter()
                fn()
                times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]

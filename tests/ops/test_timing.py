"""op_plugin.timing: the medians the benchmarks and the demo report."""
from __future__ import annotations

import pytest

from op_plugin import timing


class FakeClock:
    """time.perf_counter advancing only when a timed function says how long it took."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_interleaved_medians_alternates_and_takes_each_median(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    calls: list[str] = []
    # each call's duration: a's are 1, 5, 2 (median 2), b's 10, 30 (median 20)
    durations = {"a": iter([99.0, 1.0, 5.0, 2.0]), "b": iter([99.0, 10.0, 30.0])}

    def make(name: str):
        def fn() -> None:
            calls.append(name)
            clock.now += next(durations[name])
        return fn

    medians = timing.interleaved_medians([make("a"), make("b")], repeats=[3, 2], warmup=1)
    assert calls == ["a", "b", "a", "b", "a", "b", "a"]  # warm-ups, then rounds; b stops after 2
    assert medians == [2.0, 20.0]


@pytest.mark.parametrize("repeats", [[1], [2, 0]])
def test_interleaved_medians_rejects_bad_repeats(repeats):
    with pytest.raises(ValueError, match="one repeat count"):
        timing.interleaved_medians([lambda: None, lambda: None], repeats=repeats)

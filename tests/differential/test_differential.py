"""The short differential run (issue 15): hypothesis draws valid calls of every op family across
its feature space (cases.py says which features and how they are checked) and compares each with
the float64 references. `python tests/differential/run_long.py` is the long run (10,000 calls
per family); OP_PLUGIN_DIFF_EXAMPLES sets the number drawn here per family, layout and dtype.

Each run's examples come from a fixed seed (its own), so the suite tests the same calls every
time and a failure reproduces; the long run draws new ones. Each run must have covered the features
cases.must_cover lists (Dv < D, tile-edge lengths, TND's empty sequences, ...).
"""
from __future__ import annotations

import os
import zlib
from collections import Counter

import pytest
from cases import FAMILIES, VARIANTS, features, must_cover
from hypothesis import HealthCheck, given, seed, settings

EXAMPLES = int(os.environ.get("OP_PLUGIN_DIFF_EXAMPLES", "8"))
RUNS = [(family, variant) for family in sorted(FAMILIES) for variant in VARIANTS[family]]
IDS = ["-".join([f, *v.get("layouts", ()), *(str(d).removeprefix("torch.") for d in v["dtypes"])]) for f, v in RUNS]


@pytest.mark.parametrize("family,variant", RUNS, ids=IDS)
def test_valid_calls_match_the_references(family, variant, request) -> None:
    make_cases, check = FAMILIES[family]
    seen: Counter = Counter()

    @seed(zlib.crc32(request.node.callspec.id.encode()))
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @given(case=make_cases(**variant))
    def run(case) -> None:
        check(case)
        seen.update(features(family, case))

    run()
    missing = [f for f in must_cover(family, variant) if not seen[f]]
    assert not missing, f"the drawn calls did not cover {missing}; drawn: {dict(seen)}"

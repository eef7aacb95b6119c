"""experiments/make_priors.py's bookkeeping: the fixed-K floor, the trace's coverage, the stages."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def make_priors():
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        import make_priors
    finally:
        sys.path.pop(0)
    return make_priors


def test_fixed_k_floor_takes_each_phase_s_best_k_and_weighs_phases_by_tokens(make_priors):
    # Two K over two phases. K=0 loses 1 of 2 tokens a step in phase 1 and nothing in phase 2;
    # K=1 loses nothing in phase 1 and 2 of 8 in phase 2 (the oracle runs faster steps there).
    expected = np.array([[1.0, 1.0, 8.0, 8.0], [2.0, 2.0, 6.0, 6.0]])
    oracle = np.array([[2.0, 2.0, 8.0, 8.0], [2.0, 2.0, 8.0, 8.0]])
    r = make_priors.best_fixed_per_phase(expected, oracle, [slice(0, 2), slice(2, 4)])
    assert r["k"] == [1, 0] and r["regret_fraction"] == 0.0
    # A phase where every K loses: the floor is the best K's loss over all oracle tokens.
    expected[0, 2:] = 7.0
    r = make_priors.best_fixed_per_phase(expected, oracle, [slice(0, 2), slice(2, 4)])
    assert r["k"] == [1, 0] and r["regret_fraction"] == pytest.approx(2.0 / 20.0)


def test_phase_slices_cover_the_evaluation_steps(make_priors):
    s = make_priors.phase_slices(20000)
    assert [(x.start, x.stop) for x in s] == [(0, 6000), (6000, 13000), (13000, 20000)]


def test_trace_visits_every_bucket_up_to_128(make_priors):
    from banditk.core.buckets import DEFAULT_BUCKET_EDGES, bucket_of

    visited = {bucket_of(DEFAULT_BUCKET_EDGES, c) for c in make_priors.TRACE_PHASES}
    assert visited == {b for b, e in enumerate(DEFAULT_BUCKET_EDGES) if e <= 128}


def _square(x):
    return {"v": x * x}


def test_stages_keep_job_order_in_parallel(make_priors):
    seen = []
    out = make_priors.run_stage(_square, [3, 1, 2], ["a", "b", "c"], 2, lambda i, n, r: seen.append(n))
    assert out == [{"v": 9}, {"v": 1}, {"v": 4}] and sorted(seen) == ["a", "b", "c"]

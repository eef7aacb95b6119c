"""Property-based tests: arbitrary telemetry never breaks the governor."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from banditk.core.config import GovernorConfig
from banditk.core.errors import BanditkError
from banditk.core.types import StepContext, StepOutcome
from banditk.governor import BanditGovernor

durations = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**9))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(
        st.tuples(
            st.integers(0, 300),  # B
            st.lists(st.tuples(st.integers(-1, 6), st.integers(-1, 6)), max_size=12),  # (drafted, accepted)
            durations,
            st.floats(0, 1),  # kv usage
        ),
        min_size=1,
        max_size=30,
    )
)
def test_observe_raises_only_banditk_errors_and_stays_finite(steps):
    g = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4, seed=0, regression_refresh=4))
    with np.errstate(over="raise", invalid="raise", divide="raise", under="ignore"):
        for batch, pairs, duration, kv in steps:
            d = g.select(StepContext(batch, 4, "mtp", kv_usage=kv))
            assert 0 <= d.k <= 4
            try:
                outcome = StepOutcome(
                    np.array([p[0] for p in pairs], dtype=np.int64),
                    np.array([p[1] for p in pairs], dtype=np.int64),
                    duration,
                )
                g.observe(d, outcome)
            except BanditkError:
                pass
    a, b = g.acceptance_params()
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
    assert np.all(np.isfinite(g.latency_params()[0]))
    assert np.all(np.isfinite(g.mean_goodput()))


@settings(max_examples=300, deadline=None)
@given(k_max=st.integers(0, 6), requests=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=80))
def test_counted_and_per_request_outcomes_give_the_same_evidence(k_max, requests):
    """What the governor and the trace read is the same whether a step comes as counts or rows."""
    requests = [(min(d, k_max), min(a, d, k_max)) for d, a in requests]
    w = k_max + 1
    pairs = [0] * (w * w)
    for d, a in requests:
        pairs[d * w + a] += 1
    counted = StepOutcome.counted(tuple(pairs), 0.01)
    rows = StepOutcome(
        np.array([d for d, _ in requests], dtype=np.int64), np.array([a for _, a in requests], dtype=np.int64), 0.01
    )
    assert counted.position_counts(k_max) == rows.position_counts(k_max)
    assert counted.num_requests == rows.num_requests and counted.accepted_total == rows.accepted_total
    assert counted.max_drafted == rows.max_drafted
    assert sorted(zip(*(x.tolist() for x in counted.per_request()))) == sorted(requests)

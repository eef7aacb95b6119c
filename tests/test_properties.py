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

"""Per-request acceptance: draws, expected tokens and sampled outcomes agree."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from banditk.sim.acceptance import draw_request_acceptance, expected_tokens, sample_accepted


def test_dispersion_controls_spread_around_mu():
    rng = np.random.default_rng(0)
    mu = np.array([0.8, 0.5])
    tight = draw_request_acceptance(mu, 200.0, 20_000, rng)
    loose = draw_request_acceptance(mu, 2.0, 20_000, rng)
    assert tight.mean(axis=0) == pytest.approx(mu, abs=0.01)
    assert loose.mean(axis=0) == pytest.approx(mu, abs=0.01)
    # Beta(mu d, (1-mu) d) variance: mu (1-mu) / (d + 1)
    assert loose.var(axis=0) == pytest.approx(mu * (1 - mu) / 3.0, rel=0.05)
    assert np.all(tight.std(axis=0) < loose.std(axis=0))
    assert np.all(draw_request_acceptance(mu, math.inf, 3, rng) == mu)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5), st.integers(0, 5))
def test_sampled_tokens_match_expected(alpha, k):
    a = np.array(alpha)
    k = min(k, a.size)
    rng = np.random.default_rng(1)
    acc = sample_accepted(np.tile(a, (20_000, 1)), k, rng)
    assert acc.min() >= 0 and acc.max() <= k
    assert 1 + acc.mean() == pytest.approx(expected_tokens(a[None, :])[0, k], abs=0.05)


def test_expected_tokens_closed_form():
    e = expected_tokens(np.array([[0.8, 0.6, 0.5]]))[0]
    assert e.tolist() == pytest.approx([1.0, 1.8, 1.8 + 0.48, 1.8 + 0.48 + 0.24])

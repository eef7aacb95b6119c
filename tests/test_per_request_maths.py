"""Per-request depth's maths (issue 16): the shrunk per-request acceptance, its learnt strength,
and the greedy allotment of one verification budget, pinned by hand values and brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from banditk.governor.verify_budget import allot, expected_accepted
from banditk.posterior.request_acceptance import (
    MAX_STRENGTH,
    shrunk_alpha,
    strength_by_moments,
    survival,
)

# ---- shrinkage --------------------------------------------------------------------------------


def test_a_request_without_evidence_is_the_class_and_evidence_moves_it_by_its_weight():
    m = np.array([0.8, 0.6, 0.4])
    succ = np.array([[0, 0, 0], [3, 1, 0], [3, 1, 0]])
    fail = np.array([[0, 0, 0], [0, 2, 1], [0, 2, 1]])
    a = shrunk_alpha(m, 4.0, succ, fail)
    np.testing.assert_allclose(a[0], m)
    # (n0 m + s) / (n0 + s + f), by hand
    np.testing.assert_allclose(a[1], [(3.2 + 3) / 7, (2.4 + 1) / 7, 1.6 / 5])
    stronger = shrunk_alpha(m, 400.0, succ, fail)[1]
    assert (np.abs(stronger - m) < np.abs(a[1] - m)).all()  # a stronger class prior moves less


def test_the_mean_survival_is_the_product_of_the_position_means():
    rng = np.random.default_rng(0)
    a, b = np.array([8.0, 3.0, 1.0]), np.array([2.0, 3.0, 4.0])
    draws = rng.beta(a, b, size=(400_000, 3))
    np.testing.assert_allclose(survival(a / (a + b)), np.cumprod(draws, axis=1).mean(axis=0), rtol=5e-3)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"strength": 0.0}, "strength"),
        ({"strength": float("nan")}, "strength"),
        ({"class_mean": np.array([0.5, 1.2, 0.1])}, "class_mean"),
        ({"fail": np.zeros((2, 2))}, "succ"),
    ],
)
def test_bad_shrinkage_input_names_the_field(kwargs, field):
    args = {"class_mean": np.full(3, 0.5), "strength": 2.0, "succ": np.zeros((2, 3)), "fail": np.zeros((2, 3))}
    with pytest.raises(ValueError, match=f"`{field}`"):
        shrunk_alpha(**{**args, **kwargs})


# ---- strength by moments --------------------------------------------------------------------


def population_counts(rng, m, n0, requests, drafts):
    """Per-request position counts of requests whose rates are Beta(n0 m, n0 (1 - m)) per position."""
    alpha = rng.beta(n0 * m, n0 * (1 - m), size=(requests, m.size))
    succ = rng.binomial(drafts, alpha)
    return succ, drafts - succ


@pytest.mark.parametrize("n0", [2.0, 8.0, 30.0])
def test_the_strength_of_a_beta_population_is_recovered(n0):
    rng = np.random.default_rng(1)
    m = np.array([0.7, 0.5, 0.3])
    succ, fail = population_counts(rng, m, n0, requests=6000, drafts=20)
    assert strength_by_moments(m, succ, fail) == pytest.approx(n0, rel=0.15)


def test_requests_alike_are_not_told_apart_and_no_evidence_gives_none():
    rng = np.random.default_rng(2)
    m = np.array([0.6, 0.4])
    succ = rng.binomial(20, np.broadcast_to(m, (4000, 2)))
    assert strength_by_moments(m, succ, 20 - succ) > 200  # pure binomial noise: rho ~ 0
    assert strength_by_moments(m, np.array([[1, 0]]), np.array([[0, 1]])) is None  # one draft per cell
    assert strength_by_moments(np.array([1.0]), np.array([[5]]), np.array([[0]])) is None  # no variance
    half = np.full(2, 0.5)
    assert strength_by_moments(half, np.full((3, 2), 5), np.full((3, 2), 5)) == MAX_STRENGTH  # less spread than noise


def test_a_two_population_mix_is_split_by_the_shrunk_posterior():
    # The mix: half the requests accept at 0.9 per position, half at 0.3.
    rng = np.random.default_rng(3)
    rates = np.repeat([0.9, 0.3], 500)
    drafts = 12
    succ = rng.binomial(drafts, np.broadcast_to(rates[:, None], (1000, 3)))
    fail = drafts - succ
    m = np.full(3, 0.6)
    n0 = strength_by_moments(m, succ, fail)
    assert 0.5 < n0 < 3  # rho = 0.09 / 0.24 = 0.375 -> n0 = 1.67
    s = survival(shrunk_alpha(m, n0, succ, fail))
    assert s[:500, 2].mean() > 0.5 > 0.1 > s[500:, 2].mean()  # by hand: 0.86^3 = 0.64, 0.34^3 = 0.04


# ---- the allotment --------------------------------------------------------------------------


def brute_force(surv, drafted, budget):
    best = 0.0
    for t in itertools.product(*(range(d + 1) for d in drafted)):
        if sum(t) <= budget:
            best = max(best, expected_accepted(surv, np.array(t)))
    return best


def test_the_greedy_allotment_is_optimal_against_brute_force():
    rng = np.random.default_rng(4)
    for _ in range(400):
        r, k = rng.integers(1, 4), rng.integers(1, 5)
        alpha = rng.choice([0.0, 0.3, 0.5, 1.0], size=(r, k)) if rng.random() < 0.3 else rng.random((r, k))
        surv = survival(alpha)  # ties included: alpha = 1 repeats a survival, 0 zeroes the rest
        drafted = rng.integers(0, k + 1, size=r)
        budget = int(rng.integers(0, drafted.sum() + 2))
        t = allot(surv, drafted, budget)
        assert (t <= drafted).all() and t.sum() == min(budget, drafted.sum())
        assert expected_accepted(surv, t) == pytest.approx(brute_force(surv, drafted, budget), abs=1e-12)


def test_the_budget_goes_to_the_requests_that_accept():
    surv = survival(np.array([[0.9] * 4, [0.3] * 4, [0.9] * 4, [0.3] * 4]))
    t = allot(surv, np.full(4, 4), 8)
    assert t.tolist() == [4, 0, 4, 0]  # 0.9^4 = 0.66 > 0.3
    assert allot(surv, np.array([1, 4, 2, 4]), 8).tolist() == [1, 3, 2, 2]  # capped by what was drafted


@pytest.mark.parametrize(
    ("surv", "drafted", "budget", "field"),
    [
        (np.ones(3), np.array([1]), 1, "surv"),
        (np.ones((1, 3)), np.array([4]), 1, "drafted"),
        (np.ones((1, 3)), np.array([1, 1]), 1, "drafted"),
        (np.ones((1, 3)), np.array([1]), -1, "budget"),
        (np.array([[0.5, 0.6, 0.1]]), np.array([3]), 1, "surv"),
    ],
)
def test_bad_allotment_input_names_the_field(surv, drafted, budget, field):
    with pytest.raises(ValueError, match=f"`{field}`"):
        allot(surv, drafted, budget)

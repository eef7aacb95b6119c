"""The offline fit's optional terms: chosen where the trace shows them, left out where it does not.

Truths here are the four linear features plus an MoE-expert term or a compute knee, as
the simulator's roofline has them; the test says which shape BIC picks and what the fit
then gets right.
"""

import numpy as np
import pytest

from banditk.fit.build import governor_regression
from banditk.fit.data import aggregate
from banditk.fit.fitter import FitOptions, fit
from banditk.fit.shape import LatencyShape, choose_shape
from banditk.tools.synthetic import SyntheticTruth

from .conftest import write_trace

TRUTH = SyntheticTruth()
BATCHES = np.array([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128])
#: 256 experts, top-8, tokens of a sequence route alike (n^0.6): s = -1/ln(1 - 8/256) = 31.5.
MOE = (0.6, -1.0 / np.log(1.0 - 8.0 / 256.0))
EXPERT_S = 0.03  # all routed experts read: 30 ms, 1.5x the fixed cost


def moe_factor(b, k):
    n = b * (k + 1)
    extra = EXPERT_S * -np.expm1(-(n ** MOE[0]) / MOE[1])
    return 1.0 + extra / TRUTH.mean_step_s(b)[k]


def knee_factor(b, k):
    n = b * (k + 1)
    return 1.0 + 0.0004 * max(n - 100.0, 0.0) / TRUTH.mean_step_s(b)[k]


def _groups(factor, seed=0, steps=6000):
    rng = np.random.default_rng(seed)
    b = rng.choice(BATCHES, size=steps)
    k = rng.integers(0, TRUTH.k_max + 1, size=steps)
    mean = np.array([TRUTH.mean_step_s(int(x))[int(y)] * factor(int(x), int(y)) for x, y in zip(b, k)])
    return aggregate(b, k, mean * (1.0 + TRUTH.noise_cv * rng.standard_normal(steps)))


def test_linear_truth_keeps_the_four_features():
    g = _groups(lambda b, k: 1.0)
    shape, info = choose_shape(g.batch, g.k, g.n, g.mean)
    assert shape == LatencyShape(), shape
    assert info["rms_rel_error_chosen"] == info["rms_rel_error_linear"]


def test_moe_truth_gets_the_expert_term_with_its_shape():
    g = _groups(moe_factor)
    shape, info = choose_shape(g.batch, g.k, g.n, g.mean)
    assert shape.moe is not None, shape
    gamma, s = shape.moe
    assert gamma == pytest.approx(MOE[0], abs=0.1) and s == pytest.approx(MOE[1], rel=0.5)
    # The chosen shape is down to the noise floor (0.48% here, what the four features reach
    # on a linear truth); the four features alone miss the concave expert curve (2.3%).
    assert info["rms_rel_error_chosen"] < 0.006 < 0.015 < info["rms_rel_error_linear"]


def test_compute_knee_is_found_near_the_ridge():
    g = _groups(knee_factor)
    shape, _ = choose_shape(g.batch, g.k, g.n, g.mean)
    assert shape.knee_tokens is not None and 60 <= shape.knee_tokens <= 160, shape
    assert shape.moe is None


@pytest.fixture(scope="module")
def moe_fit(tmp_path_factory):
    path = tmp_path_factory.mktemp("moe") / "moe.jsonl"
    write_trace(path, TRUTH, 5000, seed=3, batches=BATCHES, step_factor=moe_factor)
    return fit([path], FitOptions(method="nuts", warmup=150, samples=150, progress=False))


def test_fit_of_an_moe_trace_passes_its_checks_and_predicts_every_cell(moe_fit):
    r = moe_fit
    assert r.ok, r.failures
    assert "expert_s" in r.posterior.shape.names
    assert r.diagnostics["latency_shape"]["shape"]["moe"] is not None
    assert r.ppc.median_rel_error < 0.01
    for b in (1, 12, 128):
        true = TRUTH.mean_step_s(b) * np.array([moe_factor(b, k) for k in range(TRUTH.k_max + 1)])
        pred = r.posterior.predict(np.full(TRUTH.k_max + 1, b), np.arange(TRUTH.k_max + 1)).mean(axis=0)
        assert np.allclose(pred, true, rtol=0.02), (b, pred, true)
    assert r.prior.provenance["latency_fit"]["features"][-1] == "expert_s"


def test_governor_regression_is_the_closest_linear_model(moe_fit):
    """The prior's four-feature weights: the least-squares stand-in for the fit over the trace's
    groups (no four-feature model does better there), and exactly the fit's weights without
    optional terms."""
    r = moe_fit
    from banditk.fit.data import load

    g = load([r.prior.provenance["inputs"][0]["path"]]).groups
    xtx, xty, w = governor_regression(g, r.posterior)
    assert np.allclose(w, r.prior.latency_weights)
    # Optimality of the non-negative least squares (KKT): the gradient vanishes where a weight
    # is free and points into the constraint where a weight sits at 0.
    grad = (xtx @ w - xty) / np.abs(xty)
    assert np.all(np.abs(grad[w > 0]) < 1e-6) and np.all(grad[w == 0] > -1e-6), (w, grad)
    linear = type(r.posterior)(r.posterior.weights[:, :4], r.posterior.cv, r.posterior.delta)
    _, _, w_linear = governor_regression(g, linear)
    assert np.allclose(w_linear, linear.weights.mean(axis=0), rtol=1e-6)

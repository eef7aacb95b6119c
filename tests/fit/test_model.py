"""The model's density: the plain-torch potential NUTS runs on is the Pyro model's, and
aggregating steps per (B, K) loses nothing against the per-step normal likelihood."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

from banditk.fit.data import aggregate
from banditk.fit.model import (
    DIM,
    as_tensors,
    from_theta,
    initial_theta,
    laplace,
    model_inputs,
    potential,
    step_time_model,
)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    b = rng.choice([1, 2, 4, 8, 16], size=400)
    k = rng.integers(0, 4, size=400)
    mu = 0.02 + 0.001 * b * (k + 1) + 0.001 * np.maximum(k, 1)
    t = mu * (1 + 0.05 * rng.standard_normal(400))
    return b, k, t, model_inputs(aggregate(b, k, t))


def _pyro_potential(inputs, **whiten):
    from pyro.infer.autoguide.initialization import init_to_value
    from pyro.infer.mcmc.util import initialize_model

    site = "e" if whiten else "theta"
    _, fn, _, _ = initialize_model(
        step_time_model,
        model_kwargs=as_tensors(inputs) | whiten,
        max_plate_nesting=1,
        init_strategy=init_to_value(values={site: torch.zeros(DIM, dtype=torch.float64)}),
    )
    return lambda theta: float(fn({site: theta}))


@pytest.mark.parametrize("shift", [0.0, 0.4, -0.3])
def test_potential_is_the_pyro_models_density(shift):
    _, _, _, inputs = _inputs()
    theta = torch.as_tensor(initial_theta(inputs) + shift * np.r_[inputs.soft * 30, 1.0, 1e-3])
    assert float(potential(inputs)(theta)) == pytest.approx(_pyro_potential(inputs)(theta), rel=1e-10, abs=1e-8)


def test_whitened_model_is_the_same_density():
    _, _, _, inputs = _inputs()
    mode, chol = laplace(inputs)
    e = torch.as_tensor(np.random.default_rng(0).normal(size=DIM))
    whitened = _pyro_potential(inputs, mode=torch.as_tensor(mode), chol=torch.as_tensor(chol))(e)
    assert whitened == pytest.approx(float(potential(inputs)(torch.as_tensor(mode + chol @ e.numpy()))), rel=1e-10)


def test_laplace_mode_is_the_least_squares_answer():
    b, k, t, inputs = _inputs(2)
    mode, chol = laplace(inputs)
    post = from_theta(mode, inputs)
    assert np.allclose(post.weights[0], [0.02, 0.001, 0.001, 0.0], atol=2e-4)
    assert post.cv[0] == pytest.approx(0.05, abs=0.006)
    assert np.all(np.isfinite(chol)) and np.all(np.diag(chol) > 0)


def test_aggregated_likelihood_equals_the_per_step_likelihood():
    """With delta = 0, the per-(B, K) mean and scatter likelihood differs from the product of the
    per-step normal densities (noise sd = cv x the group's mean) by a constant only: differences
    between parameter values agree."""
    b, k, t, inputs = _inputs(1)
    fn = potential(inputs)
    x = inputs.x * inputs.scale

    def per_step(u, cv):
        mu = (np.stack([np.ones_like(b), b * (k + 1), np.maximum(k, 1), b * np.maximum(k, 1)], 1) * inputs.scale) @ u
        g = aggregate(b, k, t)
        ybar = {(bb, kk): m for bb, kk, m in zip(g.batch, g.k, g.mean)}
        sd = cv * np.array([ybar[(bb, kk)] for bb, kk in zip(b, k)])  # noise scale: the group's mean
        return stats.norm(mu, sd).logpdf(t).sum()

    def ours(u, cv):
        s = inputs.soft
        v = torch.as_tensor(u + s * np.log(-np.expm1(-u / s)))
        z = torch.cat([v, torch.tensor([math.log(cv), -1.0], dtype=torch.float64)])
        prior = (
            stats.halfnorm.logpdf(u).sum()
            + np.sum(np.log(1 / (1 + np.exp(-np.asarray(v) / s))))
            + stats.halfnorm(scale=0.5).logpdf(cv)
            + math.log(cv)
        )
        return -float(fn(z)) - prior

    assert x.shape[1] == 4
    u1, u2 = inputs.init_u, inputs.init_u * np.array([1.01, 0.98, 1.02, 1.0])
    d_ours = ours(u1, 0.05) - ours(u2, 0.06)
    d_steps = per_step(u1, 0.05) - per_step(u2, 0.06)
    # delta = s softplus(-1/s) is ~1e-300, not 0: its prior term is the same at both points.
    assert d_ours == pytest.approx(d_steps, rel=1e-6)

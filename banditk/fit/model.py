"""The Pyro model of step time, on step times aggregated per (B, K).

For the steps of one (B, K) group g (n_g steps, mean ybar_g, squared deviations m2_g)::

    u_j     ~ HalfNormal(1)                 j over the latency-model FEATURES (sampled as v_j, below)
    w_j     = u_j * scale_j                 scale_j: the weight that alone would explain the mean step time
    cv      ~ HalfNormal(0.5)               step-time noise sd = cv * mean (noise grows with t)
    delta   ~ HalfNormal(0.1)               relative misfit of the parametric form per (B, K)
    mu_g    = x(B_g, K_g) . w               the interpretable model (banditk.posterior.latency_model), plus the
                                            optional terms of the trace's shape (banditk.fit.shape)
    sigma_g = cv * ybar_g                   noise sd, proportional to the (observed) mean step time
    ybar_g  ~ Normal(mu_g, sqrt(sigma_g^2 / n_g + (delta ybar_g)^2))
    m2_g    ~ Gamma((n_g - 1) / 2, rate = 1 / (2 sigma_g^2))    (m2 / sigma^2 ~ chi^2(n - 1))

For normal noise the two likelihood terms are exactly the likelihood of the n_g
individual steps (mean and scatter are sufficient and independent), so aggregation
loses nothing. The noise scale uses the observed group mean in place of mu_g (a
plug-in): tied to mu_g, the scatter term pulled the weights by 10-30% on a trace where
1% of steps stall at 5x the step time (not normal noise), since a group's scatter then
says little about its mean; with the plug-in, the scatter informs ``cv`` only and the
weights come from the group means (a weighted least-squares likelihood, Gaussian in w). ``delta`` says how far cells stray from the parametric form: where the
form is right it shrinks to 0 and the weights are as sharp as the data allow; where it
is wrong the weights' uncertainty widens instead of collapsing onto a wrong answer
(the posterior predictive check then says how wrong). Priors are weakly informative and
scaled to the data, so the same model fits a CPU box at 100 ms per step and a GPU at 5 ms.

Coordinates. Inference sees one vector ``theta`` = (v_1..v_p, log cv, d) with
``u = s softplus(v / s)`` and ``delta = s_d softplus(d / s_d)``; the priors are carried over
with their Jacobians, so the posterior is the same. A log transform, Pyro's default for
positive sites, turns a weight whose posterior touches 0 (a small drafted-token cost, a
proposer with no device forward) into a long curved tail, and the coupling between
delta and the weights' spread into a funnel: NUTS hit its tree depth on every step.
Softplus is linear away from 0, so the near-Gaussian posterior of a linear model stays
near-Gaussian, with a short exponential tail of width ``s`` below 0 (``s``: a tenth of each
weight's least-squares standard error). On top, ``theta = mode + L e`` whitens by the
Laplace approximation (:func:`laplace`), so NUTS and SVI work on a near-standard normal.

Torch and Pyro are imported inside functions: importing this module is cheap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from banditk.fit.data import StepGroups
from banditk.fit.shape import LatencyShape, relative_nnls
from banditk.posterior.latency_model import FEATURES

#: Name and version of the model, recorded in a prior's provenance. v2: optional
#: per-request, MoE-expert and compute-knee terms (banditk.fit.shape).
MODEL_NAME = "banditk.fit.step_time/v2"
MODEL_SUMMARY = (
    "t(B,K) = w . [1, B(K+1), max(K,1), B max(K,1), optional B, 1-exp(-n^gamma/s), max(0, n-n0)], "
    "n = B(K+1), optional terms and their shape chosen by BIC; w_j = u_j scale_j, u_j ~ HalfNormal(1); "
    "noise sd = cv * observed group mean, cv ~ HalfNormal(0.5); per-(B,K) relative misfit delta ~ HalfNormal(0.1); "
    "likelihood on per-(B,K) mean and scatter"
)
#: Scale of the HalfNormal priors on cv and delta.
CV_PRIOR_SCALE = 0.5
DELTA_PRIOR_SCALE = 0.1
#: Length of ``theta`` for the four base features: the weights, log cv, delta's coordinate.
DIM = len(FEATURES) + 2


@dataclass(frozen=True)
class ModelInputs:
    """What the model conditions on, as numpy arrays.

    Attributes:
        x: (groups, p) latency-model features of each group (``shape.rows``).
        n, mean, m2: the groups' statistics (see :class:`~banditk.fit.data.StepGroups`).
        scale: (p,) prior scale of each weight (s per unit of feature).
        soft: (p,) width ``s`` of the softplus coordinate of each ``u`` (see the module docstring).
        init_u: (p,) starting point of ``u`` (a non-negative least-squares fit).
        init_cv: starting point of ``cv``.
        soft_delta: width of the softplus coordinate of ``delta`` (a tenth of the typical
            relative standard error of a group mean).
        shape: the optional terms ``x`` holds.
    """

    x: np.ndarray
    n: np.ndarray
    mean: np.ndarray
    m2: np.ndarray
    scale: np.ndarray
    soft: np.ndarray
    init_u: np.ndarray
    init_cv: float
    soft_delta: float = 1e-3
    shape: LatencyShape = LatencyShape()

    @property
    def num_groups(self) -> int:
        return int(self.n.size)

    @property
    def num_weights(self) -> int:
        return int(self.x.shape[1])

    @property
    def dim(self) -> int:
        """Length of ``theta``: the weights, log cv, delta's coordinate."""
        return self.num_weights + 2

    @property
    def design_rank(self) -> int:
        """Rank of the feature matrix: below p, some weights are known only through their prior."""
        return int(np.linalg.matrix_rank(self.x / np.maximum(np.abs(self.x).max(axis=0), 1e-300)))


def model_inputs(groups: StepGroups, shape: LatencyShape = LatencyShape()) -> ModelInputs:
    """Features, weight scales, coordinates and a starting point for inference."""
    x = shape.rows(groups.batch, groups.k)
    n, ybar = groups.n, groups.mean
    t_mean = float(n @ ybar / n.sum())
    x_mean = (n @ x) / n.sum()
    scale = t_mean / np.maximum(x_mean, 1e-12)
    xs = x * scale
    # Non-negative least squares on relative errors (noise sd ~ cv * t), each group
    # weighted by sqrt(n): the maximum-likelihood weights when delta = 0.
    u0, _ = relative_nnls(xs, n, ybar)
    mu = np.maximum(xs @ u0, 1e-9)
    dof = float(np.sum(np.maximum(n - 1.0, 0.0)))
    cv = float(np.sqrt(np.sum(groups.m2 / mu**2) / dof)) if dof > 0 else 0.1
    cv = float(np.clip(cv, 1e-3, 2.0))
    # Standard errors of u from the weighted Gram matrix (the prior keeps it invertible).
    gram = (xs * (n / (cv * mu) ** 2)[:, None]).T @ xs + np.eye(x.shape[1])
    se = np.sqrt(np.diag(np.linalg.inv(gram)))
    soft = np.clip(0.1 * se, 1e-6, 0.1)
    init_u = np.maximum(u0, soft)
    soft_delta = float(np.clip(0.1 * np.median(cv / np.sqrt(n)), 1e-6, 0.01))
    return ModelInputs(x, n, ybar, groups.m2, scale, soft, init_u, cv, soft_delta, shape)


def weights_from_u(u: np.ndarray, inputs: ModelInputs) -> np.ndarray:
    """Latency weights (s per unit of feature) from samples of ``u`` (last axis = FEATURES)."""
    return np.asarray(u) * inputs.scale


def as_tensors(inputs: ModelInputs) -> dict:
    """The data arguments of :func:`step_time_model` as float64 tensors."""
    import torch

    t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float64))  # noqa: E731
    return {
        "x": t(inputs.x * inputs.scale),
        "n": t(inputs.n),
        "ybar": t(inputs.mean),
        "m2": t(np.maximum(inputs.m2, 1e-30)),
        "soft": t(inputs.soft),
        "soft_delta": float(inputs.soft_delta),
    }


def _log_joint(theta, x, n, ybar, m2, soft, soft_delta):
    """Log prior (with Jacobians, in ``theta`` coordinates) and log likelihood terms per group."""
    import math

    import torch
    from torch.nn.functional import logsigmoid, softplus

    p = x.shape[-1]
    v, log_cv, d = theta[..., :p], theta[..., p], theta[..., p + 1]
    u = soft * softplus(v / soft)
    cv, delta = torch.exp(log_cv), soft_delta * softplus(d / soft_delta)
    half = 0.5 * math.log(2.0 / math.pi)
    log_prior = (
        (half - 0.5 * u**2 + logsigmoid(v / soft)).sum(-1)
        + half
        - math.log(CV_PRIOR_SCALE)
        - 0.5 * (cv / CV_PRIOR_SCALE) ** 2
        + log_cv
        + half
        - math.log(DELTA_PRIOR_SCALE)
        - 0.5 * (delta / DELTA_PRIOR_SCALE) ** 2
        + logsigmoid(d / soft_delta)
    )
    mu = (x @ u).clamp(min=1e-12)
    # Noise and misfit scale with the observed group mean, not with mu: were the scatter
    # term's scale tied to mu, it would pull the weights wherever the noise is not
    # normal (a few stalled steps inflate one group's scatter).
    sigma = cv * ybar
    sd_mean = torch.sqrt(sigma**2 / n + (delta * ybar) ** 2)
    several = n > 1
    conc = torch.where(several, (n - 1.0) / 2.0, torch.full_like(n, 0.5))
    return log_prior, mu, sigma, sd_mean, several, conc


def step_time_model(x, n, ybar, m2, soft, soft_delta, mode=None, chol=None) -> None:
    """The Pyro model (``x`` holds features already multiplied by the weight scales).

    The latent site is ``theta`` or, given the Laplace ``mode`` and ``chol``, the whitened
    ``e`` with ``theta = mode + chol e``. Priors enter as a factor in those coordinates.
    """
    import pyro
    import pyro.distributions as dist

    dim = x.shape[-1] + 2
    if mode is None:
        theta = pyro.sample("theta", dist.ImproperUniform(dist.constraints.real, (), (dim,)))
    else:
        e = pyro.sample("e", dist.ImproperUniform(dist.constraints.real, (), (dim,)))
        theta = mode + chol @ e
    log_prior, mu, sigma, sd_mean, several, conc = _log_joint(theta, x, n, ybar, m2, soft, soft_delta)
    pyro.factor("prior", log_prior)
    with pyro.plate("groups", n.shape[0]):
        pyro.sample("mean_obs", dist.Normal(mu, sd_mean), obs=ybar)
        pyro.sample("m2_obs", dist.Gamma(conc, 0.5 / sigma**2).mask(several), obs=m2)


def potential(inputs: ModelInputs):
    """The negative log joint density of :func:`step_time_model` as a function of ``theta``, in plain torch.

    The same density without Pyro's per-call tracing (0.8 ms against 5 ms per gradient here,
    which is what NUTS spends its time on); ``tests/fit`` checks that the two agree.
    """
    import torch

    d = as_tensors(inputs)
    ybar, m2 = d["ybar"], d["m2"]
    log_m2 = torch.log(m2)

    def fn(theta):
        log_prior, mu, sigma, sd_mean, several, conc = _log_joint(theta, **d)
        normal = -0.5 * ((ybar - mu) / sd_mean) ** 2 - torch.log(sd_mean) - 0.5 * np.log(2 * np.pi)
        rate = 0.5 / sigma**2
        gamma = conc * torch.log(rate) + (conc - 1.0) * log_m2 - rate * m2 - torch.lgamma(conc)
        return -(log_prior + normal.sum() + torch.where(several, gamma, torch.zeros_like(gamma)).sum())

    return fn


def initial_theta(inputs: ModelInputs) -> np.ndarray:
    """A starting ``theta``: the least-squares weights, the pooled noise, delta = 1%."""
    s, u = inputs.soft, inputs.init_u
    v = u + s * np.log(-np.expm1(-u / s))  # the inverse of softplus, stable for u >> s
    sd, delta = inputs.soft_delta, 0.01
    return np.concatenate([v, [np.log(inputs.init_cv), delta + sd * np.log(-np.expm1(-delta / sd))]])


def laplace(inputs: ModelInputs) -> tuple[np.ndarray, np.ndarray]:
    """Mode of the posterior in ``theta`` and the Cholesky factor of the inverse Hessian there.

    Directions with no curvature (a weight pinned at 0, unidentified combinations) get
    a width of 1e5 times the widest curved one rather than an infinite one.
    """
    import torch
    from scipy.optimize import minimize

    fn = potential(inputs)

    def value_grad(x: np.ndarray):
        theta = torch.as_tensor(x, dtype=torch.float64).requires_grad_(True)
        y = fn(theta)
        (g,) = torch.autograd.grad(y, theta)
        return float(y.detach()), g.detach().numpy().astype(float)

    res = minimize(value_grad, initial_theta(inputs), jac=True, method="L-BFGS-B", options={"maxiter": 5000})
    mode = np.asarray(res.x, dtype=float)
    hess = torch.autograd.functional.hessian(fn, torch.as_tensor(mode)).numpy()
    vals, vecs = np.linalg.eigh(0.5 * (hess + hess.T))
    vals = np.maximum(vals, max(float(vals.max()), 1e-300) * 1e-10)
    cov = (vecs / vals) @ vecs.T
    return mode, np.linalg.cholesky(0.5 * (cov + cov.T))


def from_theta(theta: np.ndarray, inputs: ModelInputs) -> Posterior:
    """Draws of ``theta`` (..., p + 2) as a :class:`Posterior`."""
    p = inputs.num_weights
    theta = np.asarray(theta).reshape(-1, p + 2)
    s, sd = inputs.soft, inputs.soft_delta
    u = s * np.logaddexp(0.0, theta[:, :p] / s)
    return Posterior(
        weights_from_u(u, inputs), np.exp(theta[:, p]), sd * np.logaddexp(0.0, theta[:, p + 1] / sd), inputs.shape
    )


@dataclass(frozen=True)
class Posterior:
    """Draws from the posterior (numpy), however they were obtained.

    Attributes:
        weights: (draws, p) latency weights, s per unit of feature (``shape.names``).
        cv: (draws,) relative step-time noise.
        delta: (draws,) relative per-(B, K) misfit of the parametric form.
        shape: the optional terms the weights belong to.
    """

    weights: np.ndarray
    cv: np.ndarray
    delta: np.ndarray
    shape: LatencyShape = LatencyShape()

    def predict(self, batch: np.ndarray, k: np.ndarray) -> np.ndarray:
        """(draws, rows) mean step time at paired arrays of B and K."""
        return self.weights @ self.shape.rows(batch, k).T


class single_thread:
    """Run torch on one thread inside the block: the model's tensors are tiny, and
    intra-op threads only add overhead (5x slower on a loaded 2-core box)."""

    def __enter__(self):
        import torch

        self._threads = torch.get_num_threads()
        torch.set_num_threads(1)
        return self

    def __exit__(self, *exc) -> None:
        import torch

        torch.set_num_threads(self._threads)

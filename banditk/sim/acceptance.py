"""Per-request acceptance: heterogeneity draws, expected tokens, sampled outcomes.

Each request draws its own per-position conditional acceptance
``alpha_i ~ Beta(mu_i * d, (1 - mu_i) * d)`` around the scenario's ``mu_i``,
where ``d`` is ``request_dispersion`` (larger d, less spread; ``inf`` gives
every request exactly ``mu``). A request drafting K tokens accepts the longest
prefix of positions whose independent Bernoulli(alpha_i) trials succeed.
"""

from __future__ import annotations

import math

import numpy as np


def draw_request_acceptance(mu: np.ndarray, dispersion: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Per-request conditional acceptance, shape (n, len(mu)).

    >>> a = draw_request_acceptance(np.array([0.8, 0.6]), math.inf, 3, np.random.default_rng(0))
    >>> a.tolist()
    [[0.8, 0.6], [0.8, 0.6], [0.8, 0.6]]
    """
    mu = np.asarray(mu, dtype=float)
    if n == 0:
        return np.zeros((0, mu.size))
    if not math.isfinite(dispersion):
        return np.tile(mu, (n, 1))
    m = np.clip(mu, 1e-6, 1 - 1e-6)
    return rng.beta(m * dispersion, (1.0 - m) * dispersion, size=(n, mu.size))


def expected_tokens(alpha: np.ndarray) -> np.ndarray:
    """Expected tokens emitted per step at K = 0..k_max, per request: 1 + sum_j prod_{i<=j} alpha_i.

    >>> expected_tokens(np.array([[0.5, 0.5]])).tolist()
    [[1.0, 1.5, 1.75]]
    """
    alpha = np.atleast_2d(alpha)
    out = np.ones((alpha.shape[0], alpha.shape[1] + 1))
    out[:, 1:] += np.cumsum(np.cumprod(alpha, axis=1), axis=1)
    return out


def sample_accepted(alpha: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Accepted drafts per request when each drafts ``k`` tokens (int64 array).

    >>> sample_accepted(np.array([[1.0, 0.0], [1.0, 1.0]]), 2, np.random.default_rng(0)).tolist()
    [1, 2]
    """
    n = alpha.shape[0]
    if k <= 0 or n == 0:
        return np.zeros(n, dtype=np.int64)
    ok = rng.random((n, k)) < alpha[:, :k]
    return np.cumprod(ok, axis=1).sum(axis=1).astype(np.int64)

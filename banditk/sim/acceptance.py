"""Per-request acceptance: heterogeneity draws, expected tokens, sampled outcomes.

Each request draws its own per-position conditional acceptance
``alpha_i ~ Beta(mu_i * d, (1 - mu_i) * d)`` around the scenario's ``mu_i``,
where ``d`` is ``request_dispersion`` (larger d, less spread; ``inf`` gives
every request exactly ``mu``). A request drafting K tokens accepts the longest
prefix of positions whose independent Bernoulli(alpha_i) trials succeed. A scenario with
several populations first draws each request's population by weight
(:func:`draw_mixture_acceptance`). A request whose verification was cut to its first t drafts
(:func:`sample_accepted` with ``allotted``) accepts the longest prefix among those t.
The simulator draws each trial from one uniform per (request, output position), fixed when the
request arrives (:func:`accepted_from_uniforms`): whatever K a policy drafts, a draft at that
position meets the same uniform, so policies compared at one seed differ by their choices, not
by their draws (common random numbers).
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


def draw_mixture_acceptance(
    weights: np.ndarray, mus: np.ndarray, dispersions: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Per-request acceptance from a mixture of populations, and each request's population.

    Args:
        weights: each population's share, shape (P,), summing to 1.
        mus: each population's per-position acceptance, shape (P, k_max).
        dispersions: each population's Beta concentration, shape (P,).

    One population draws exactly as :func:`draw_request_acceptance` (no draw of the population),
    so a scenario without populations replays as before they existed.

    >>> a, which = draw_mixture_acceptance(np.array([0.5, 0.5]), np.array([[0.9], [0.2]]),
    ...     np.array([math.inf, math.inf]), 4, np.random.default_rng(0))
    >>> sorted(set(a[:, 0].tolist())), which.tolist() == [0 if x == 0.9 else 1 for x in a[:, 0]]
    ([0.2, 0.9], True)
    """
    mus = np.atleast_2d(np.asarray(mus, dtype=float))
    p = mus.shape[0]
    if p == 1:
        return draw_request_acceptance(mus[0], float(dispersions[0]), n, rng), np.zeros(n, dtype=np.int64)
    which = rng.choice(p, size=n, p=np.asarray(weights, dtype=float))
    out = np.zeros((n, mus.shape[1]))
    for j in range(p):
        sel = np.flatnonzero(which == j)
        out[sel] = draw_request_acceptance(mus[j], float(dispersions[j]), sel.size, rng)
    return out, which.astype(np.int64)


def expected_tokens(alpha: np.ndarray) -> np.ndarray:
    """Expected tokens emitted per step at K = 0..k_max, per request: 1 + sum_j prod_{i<=j} alpha_i.

    >>> expected_tokens(np.array([[0.5, 0.5]])).tolist()
    [[1.0, 1.5, 1.75]]
    """
    alpha = np.atleast_2d(alpha)
    out = np.ones((alpha.shape[0], alpha.shape[1] + 1))
    out[:, 1:] += np.cumsum(np.cumprod(alpha, axis=1), axis=1)
    return out


def sample_accepted(
    alpha: np.ndarray, k: int, rng: np.random.Generator, allotted: np.ndarray | None = None
) -> np.ndarray:
    """Accepted drafts per request when each drafts ``k`` tokens (int64 array).

    ``allotted`` (per request, each 0..k): only the first ``allotted`` drafts are verified. The
    random draws are the same with or without it, so verifying every draft replays a run
    without cuts exactly.

    >>> sample_accepted(np.array([[1.0, 0.0], [1.0, 1.0]]), 2, np.random.default_rng(0)).tolist()
    [1, 2]
    >>> sample_accepted(np.array([[1.0, 1.0], [1.0, 1.0]]), 2, np.random.default_rng(0), np.array([0, 1])).tolist()
    [0, 1]
    """
    n = alpha.shape[0]
    if k <= 0 or n == 0:
        return np.zeros(n, dtype=np.int64)
    ok = rng.random((n, k)) < alpha[:, :k]
    if allotted is not None:
        ok &= np.arange(k) < np.asarray(allotted)[:, None]
    return np.cumprod(ok, axis=1).sum(axis=1).astype(np.int64)


def accepted_from_uniforms(alpha: np.ndarray, u: np.ndarray, allotted: np.ndarray | None = None) -> np.ndarray:
    """Accepted drafts per request, from one uniform per draft (``u``, shape (n, K)): draft j is
    accepted when its uniform is below ``alpha[:, j]``, and a request accepts the longest such
    prefix (of its first ``allotted`` drafts, where given).

    >>> accepted_from_uniforms(np.array([[0.9, 0.5], [0.9, 0.5]]), np.array([[0.2, 0.7], [0.2, 0.1]])).tolist()
    [1, 2]
    >>> accepted_from_uniforms(np.array([[0.9, 0.5]]), np.array([[0.2, 0.1]]), np.array([1])).tolist()
    [1]
    """
    n, k = u.shape
    if k == 0 or n == 0:
        return np.zeros(n, dtype=np.int64)
    ok = u < alpha[:, :k]
    if allotted is not None:
        ok &= np.arange(k) < np.asarray(allotted)[:, None]
    return np.cumprod(ok, axis=1).sum(axis=1).astype(np.int64)

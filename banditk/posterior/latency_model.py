"""The interpretable parametric step-time model.

    t(B, K) = w_fixed
            + w_verify_token * B * (K + 1)        target verifies B*(K+1) tokens
            + w_draft_forward * max(K, 1)         sequential drafter forwards
            + w_draft_token * B * max(K, 1)       tokens through the drafter

``max(K, 1)``: at K = 0 vLLM's proposers still run the drafter's cache-sync forward
(``llm_base_proposer.py``), so K = 0 costs one drafter forward, the same as K = 1.
The model is linear in its weights, so it is learned online by Bayesian linear
regression from every observed step; it gives informed estimates for (bucket, K)
cells never tried. Cells still converge to what is measured where the form is wrong
(cudagraph padding, MoE expert activation): the model is only their prior mean.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import solve_triangular
from scipy.optimize import nnls

FEATURES: tuple[str, ...] = ("fixed_s", "verify_token_s", "draft_forward_s", "draft_token_s")

#: Default shape of the weights relative to the fixed cost, used when no prior is given:
#: a verified token costs 0.2% of the fixed step cost, a drafter forward 5%, a drafted
#: token 0.05%. The scale is taken from the first measured step.
DEFAULT_SHAPE = np.array([1.0, 0.002, 0.05, 0.0005])


def features(batch_size: float, k: np.ndarray | int) -> np.ndarray:
    """Feature rows for batch size B and one or more K.

    >>> features(8, np.array([0, 2])).tolist()
    [[1.0, 8.0, 1.0, 8.0], [1.0, 24.0, 2.0, 16.0]]
    """
    k = np.atleast_1d(np.asarray(k, dtype=np.float64))
    return features_rows(np.full_like(k, float(batch_size)), k)


def features_rows(batch_sizes: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """Feature rows for paired arrays of batch sizes and K (one row per observation): the
    model's one definition of its features.

    >>> features_rows(np.array([8.0, 8.0]), np.array([0, 2])).tolist()
    [[1.0, 8.0, 1.0, 8.0], [1.0, 24.0, 2.0, 16.0]]
    """
    b = np.asarray(batch_sizes, dtype=np.float64)
    k = np.asarray(ks, dtype=np.float64)
    drafts = np.maximum(k, 1.0)
    return np.stack([np.ones_like(k), b * (k + 1.0), drafts, b * drafts], axis=-1)


def step_time(weights: list[float], batch_size: float, k: int) -> float:
    """``features(B, K) @ weights`` for one (B, K) in plain floats: the governor's per-step twin,
    pinned equal to the array form by the tests.

    >>> step_time([0.01, 0.001, 0.002, 0.0001], 4, 0) == float(features(4, 0)[0] @ [0.01, 0.001, 0.002, 0.0001])
    True
    """
    w0, w1, w2, w3 = weights
    return w0 + w1 * batch_size * (k + 1) + (w2 + w3 * batch_size) * (k if k > 1 else 1)


def step_times(weights: list[float], batch_size: float, k_plus_1: np.ndarray, drafts: np.ndarray) -> np.ndarray:
    """``features(B, K) @ weights`` for K = 0..K_max, given ``k_plus_1`` = K + 1 and
    ``drafts`` = max(K, 1) precomputed: the governor's per-step twin of :func:`predict`."""
    w0, w1, w2, w3 = weights
    return w0 + (w1 * batch_size) * k_plus_1 + (w2 + w3 * batch_size) * drafts


def predict(weights: np.ndarray, batch_size: float, k_max: int) -> np.ndarray:
    """Predicted step time for K = 0..k_max at batch size B.

    >>> predict(np.array([0.01, 0.0, 0.001, 0.0]), 4, 2).round(4).tolist()
    [0.011, 0.011, 0.012]
    """
    return features(batch_size, np.arange(k_max + 1)) @ weights


def solve(prior_mean: np.ndarray, prior_precision: np.ndarray, xtx: np.ndarray, xty: np.ndarray) -> np.ndarray:
    """Posterior-mode weights of a ridge-prior linear regression, constrained to be >= 0.

    Minimises ``||X w - y||^2 + (w - w0)^T P (w - w0)`` over ``w >= 0`` given only
    ``X^T X`` and ``X^T y``: with ``L L^T = X^T X + P`` the objective is
    ``||L^T w - L^{-1} (X^T y + P w0)||^2`` plus a constant, a non-negative least-squares
    problem. Costs cannot be negative, and without the constraint batches concentrated
    at one B leave the features collinear and the fit free to trade a negative weight
    for a huge one.
    """
    a = prior_precision + xtx
    b = prior_precision @ prior_mean + xty
    try:
        chol = np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        return np.maximum(np.linalg.lstsq(a, b, rcond=None)[0], 0.0)
    rhs = solve_triangular(chol, b, lower=True)
    w, _ = nnls(chol.T, rhs)
    return w

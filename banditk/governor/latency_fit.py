"""The online latency regression that sets every cell's prior mean.

Each observed step adds a row of :func:`banditk.posterior.latency_model.features_rows` to discounted
normal equations; every ``regression_refresh`` observations the weights are re-solved under a
ridge prior (the prior file's weights, or the default shape scaled to the first steps) and each
cell's prior mean becomes the model's time at its bucket's representative B.
"""

from __future__ import annotations

import numpy as np

from banditk.governor.thompson import MIN_STEP_S
from banditk.posterior import latency_model
from banditk.posterior.stats import SufficientStats


def fold(data: SufficientStats, pending: list[tuple[float, int, float, float]], gamma: float) -> None:
    """Add the pending (B, K, t, weight) rows to ``data``'s regression statistics, in place.

    The j-th of m pending rows is ``m - 1 - j`` steps old, so it carries weight gamma^(m-1-j)
    (times its own weight), exactly as if it had been added when observed.
    """
    if not pending:
        return
    obs = np.array(pending)
    m = obs.shape[0]
    x = latency_model.features_rows(obs[:, 0], obs[:, 1])
    w = gamma ** np.arange(m - 1, -1, -1, dtype=float) * obs[:, 3]
    data.reg_xtx = data.reg_xtx * gamma**m + (x * w[:, None]).T @ x
    data.reg_xty = data.reg_xty * gamma**m + (w * obs[:, 2]) @ x
    data.reg_n = data.reg_n * gamma**m + float(w.sum())
    pending.clear()


def prior_mean(prior_weights: np.ndarray | None, xtx: np.ndarray, xty: np.ndarray, n: float) -> np.ndarray | None:
    """The ridge prior's mean: the prior file's weights, else the default shape scaled so
    that the average observed step fits; None before any step (the scale is unknown).

    >>> w = prior_mean(None, np.outer([1.0, 8, 1, 8], [1.0, 8, 1, 8]), 0.05 * np.array([1.0, 8, 1, 8]), 1.0)
    >>> round(float(latency_model.features(8, 0)[0] @ w), 6)
    0.05
    """
    if prior_weights is not None:
        return prior_weights
    if n <= 0:
        return None
    x_mean, t_mean = xtx[0] / n, xty[0] / n  # feature 0 is the constant 1
    c = t_mean / max(float(x_mean @ latency_model.DEFAULT_SHAPE), 1e-300)
    return c * latency_model.DEFAULT_SHAPE


def prior_precision(design: np.ndarray, strength: float) -> np.ndarray:
    """Ridge precision worth ``strength`` observations per feature, at each feature's typical
    squared size over the design rows (buckets x K)."""
    return np.diag(strength * (design**2).reshape(-1, design.shape[-1]).mean(axis=0))


def cell_prior_means(design: np.ndarray, weights: np.ndarray, w0: np.ndarray) -> np.ndarray:
    """Model time per (bucket, K), floored at a thousandth of the prior's fixed cost."""
    floor = max(float(w0[0]) * 1e-3, MIN_STEP_S)
    return np.maximum(design @ weights, floor)


def batch_ratio(model_s, cell_prior_mean):
    """Model time at this step's B over that at the bucket's representative B, clipped to
    [0.5, 2]: it corrects for B within a bucket, it does not replace the cells.

    >>> float(batch_ratio(0.5, 0.1)), batch_ratio(np.array([0.1, 0.3]), np.array([0.1, 0.1])).tolist()
    (2.0, [1.0, 2.0])
    """
    if isinstance(model_s, float):
        return min(max(model_s / float(cell_prior_mean), 0.5), 2.0)
    return np.clip(model_s / cell_prior_mean, 0.5, 2.0)

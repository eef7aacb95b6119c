"""Thompson draws of E(K) and of step times, K = 0..K_max, from the posterior's parameters.

All gamma variates come from one call (a Beta draw is G_a / (G_a + G_b), a Normal-Inverse-Gamma
mean needs one gamma and one normal), which keeps the per-step cost near numpy's call overhead.
"""

from __future__ import annotations

import numpy as np

from banditk.posterior.acceptance import expected_tokens
from banditk.posterior.nig import mean_from_variates
from banditk.posterior.sampling import gamma_variates

#: Floor on a sampled step time, against division by ~0 from a wild draw.
MIN_STEP_S = 1e-7


def draw_tokens_and_times(
    rng: np.random.Generator,
    acc_a: np.ndarray,
    acc_b: np.ndarray,
    mn: np.ndarray,
    kn: np.ndarray,
    an: np.ndarray,
    bn: np.ndarray,
    draws: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One draw (or ``draws`` rows) of E(K) from Beta(acc_a, acc_b) per position and of the
    mean step time per K from NIG cells (mn, kn, an, bn).

    >>> rng = np.random.default_rng(0)
    >>> tokens, t = draw_tokens_and_times(rng, np.full(2, 50.0), np.full(2, 50.0), np.full(3, 0.02),
    ...                                   np.full(3, 1e4), np.full(3, 1e4), np.full(3, 4e-4), draws=4000)
    >>> bool(abs(tokens[:, 2].mean() - 1.75) < 0.01 and abs(t.mean() - 0.02) < 1e-4)
    True
    """
    km = acc_a.size
    shape = np.concatenate((acc_a, acc_b, an))
    lead = () if draws is None else (draws,)
    g = gamma_variates(rng, shape if draws is None else np.tile(shape, (draws, 1)))
    alpha = g[..., :km] / (g[..., :km] + g[..., km : 2 * km])
    t = mean_from_variates(mn, kn, bn, g[..., 2 * km :], rng.standard_normal(lead + np.shape(mn)))
    return expected_tokens(alpha), np.maximum(t, MIN_STEP_S)

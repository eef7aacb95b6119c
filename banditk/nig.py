"""Normal-Inverse-Gamma posterior of a mean step time, from (weighted) sufficient statistics.

Prior: sigma^2 ~ InvGamma(a0, b0), mu | sigma^2 ~ Normal(m0, sigma^2 / k0).
Data enter as n (a possibly fractional weight, after discounting), sum y and sum y^2,
so posteriors from several sources combine by adding statistics. All functions are
pure and vectorised over cells.
"""

from __future__ import annotations

import numpy as np


def posterior(m0, k0, a0, b0, n, s, ss):
    """Posterior (m_n, k_n, a_n, b_n) from prior parameters and statistics (n, sum, sum of squares).

    >>> [round(float(v), 6) for v in posterior(0.0, 1.0, 2.0, 1.0, 2.0, 4.0, 10.0)]
    [1.333333, 3.0, 3.0, 3.333333]
    """
    kn = k0 + n
    safe_n = np.where(n > 0, n, 1.0)
    mean = np.where(n > 0, s / safe_n, 0.0)
    # Within-sample scatter, clipped at 0 against rounding in sum-of-squares form.
    scatter = np.maximum(ss - n * mean * mean, 0.0)
    mn = (k0 * m0 + s) / kn
    an = a0 + 0.5 * n
    bn = b0 + 0.5 * scatter + 0.5 * k0 * n * (mean - m0) ** 2 / kn
    return mn, kn, an, bn


def sample_mean(rng: np.random.Generator, mn, kn, an, bn) -> np.ndarray:
    """One joint draw of mu per cell: sigma^2 ~ InvGamma(a_n, b_n), mu ~ Normal(m_n, sigma^2 / k_n)."""
    sigma2 = bn / rng.standard_gamma(an)
    return mn + np.sqrt(sigma2 / kn) * rng.standard_normal(np.shape(mn))


def posterior_scalar(m0: float, k0: float, a0: float, b0: float, n: float, s: float, ss: float):
    """:func:`posterior` for one cell in plain floats (several times faster than numpy scalars).

    >>> posterior_scalar(0.0, 1.0, 2.0, 1.0, 2.0, 4.0, 10.0) == tuple(float(v) for v in posterior(0.0, 1.0, 2.0, 1.0, 2.0, 4.0, 10.0))
    True
    """
    kn = k0 + n
    mean = s / n if n > 0 else 0.0
    scatter = max(ss - n * mean * mean, 0.0)
    return (k0 * m0 + s) / kn, kn, a0 + 0.5 * n, b0 + 0.5 * scatter + 0.5 * k0 * n * (mean - m0) ** 2 / kn

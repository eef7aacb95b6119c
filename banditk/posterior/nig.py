"""Normal-Inverse-Gamma posterior of a mean step time, from (weighted) sufficient statistics.

Prior: sigma^2 ~ InvGamma(a0, b0), mu | sigma^2 ~ Normal(m0, sigma^2 / k0).
Data enter as n (a possibly fractional weight, after discounting), sum y and sum y^2,
so posteriors from several sources combine by adding statistics. All functions are
pure and vectorised over cells.
"""

from __future__ import annotations

import numpy as np

from banditk.posterior.sampling import gamma_variates


def posterior(m0, k0, a0, b0, n, s, ss):
    """Posterior (m_n, k_n, a_n, b_n) from prior parameters and statistics (n, sum, sum of squares).

    >>> [round(float(v), 6) for v in posterior(0.0, 1.0, 2.0, 1.0, 2.0, 4.0, 10.0)]
    [1.333333, 3.0, 3.0, 3.333333]
    """
    safe_n = np.where(n > 0, n, 1.0)
    mean = np.where(n > 0, s / safe_n, 0.0)
    # Within-sample scatter, clipped at 0 against rounding in sum-of-squares form.
    scatter = np.maximum(ss - n * mean * mean, 0.0)
    return _update(m0, k0, a0, b0, n, s, mean, scatter)


def posterior_from_moments(m0, k0, a0, b0, n, mean, scatter):
    """:func:`posterior` from weight ``n``, sample ``mean`` and ``scatter`` (sum of squared deviations).

    >>> [round(float(v), 6) for v in posterior_from_moments(0.0, 1.0, 2.0, 1.0, 2.0, 2.0, 2.0)]
    [1.333333, 3.0, 3.0, 3.333333]
    """
    return _update(m0, k0, a0, b0, n, n * mean, mean, scatter)


def _update(m0, k0, a0, b0, n, s, mean, scatter):
    """The conjugate update itself: one formula for every form above."""
    kn = k0 + n
    return (k0 * m0 + s) / kn, kn, a0 + 0.5 * n, b0 + 0.5 * scatter + 0.5 * k0 * n * (mean - m0) ** 2 / kn


def posterior_scalar(m0: float, k0: float, a0: float, b0: float, n: float, s: float, ss: float):
    """:func:`posterior` for one cell in plain floats (several times faster than numpy scalars).

    >>> posterior_scalar(0.0, 1.0, 2.0, 1.0, 2.0, 4.0, 10.0) == tuple(float(v) for v in posterior(0.0, 1.0, 2.0, 1.0, 2.0, 4.0, 10.0))
    True
    """
    mean = s / n if n > 0 else 0.0
    return _update(m0, k0, a0, b0, n, s, mean, max(ss - n * mean * mean, 0.0))


def mean_from_variates(mn, kn, bn, gamma, normal):
    """A draw of mu per cell from a Gamma(a_n, 1) variate and a standard normal one:
    sigma^2 = b_n / gamma, mu = m_n + sqrt(sigma^2 / k_n) * normal. Every Thompson draw of a
    cell mean goes through here (see :mod:`banditk.governor.thompson`)."""
    return mn + np.sqrt(bn / (gamma * kn)) * normal


def sample_mean(rng: np.random.Generator, mn, kn, an, bn) -> np.ndarray:
    """One joint draw of mu per cell, with the governor's gamma sampler."""
    an = np.broadcast_to(np.asarray(an, dtype=float), np.shape(mn))
    return mean_from_variates(mn, kn, bn, gamma_variates(rng, an), rng.standard_normal(np.shape(mn)))

"""How much a latency cell's prior, the latency model's time, is worth: as much as the model has
been right about the cells measured so far.

Each (bucket, K) cell is a Normal-Inverse-Gamma whose prior mean is the latency model's time m
and whose prior count kappa sets the mean's prior spread: a relative standard deviation of
``cv / sqrt(kappa)`` (``cv`` the noise guess of the cells' prior). That spread is what decides
whether an unmeasured K "may be better" and gets a first look; the count is fit here as an
empirical-Bayes variance. Model each cell's true mean as ``m * exp(d)``, ``d ~ N(0, tau^2)``:
tau is the model's misfit. Each measured cell gives ``r = log(mean / m)``; its square would
have expectation ``tau^2 + v`` (``v`` the sampling variance of the log mean) against a model
fit elsewhere, but the model was fit on these cells, so the residuals keep ``M - p`` of their
M degrees of freedom (``p`` the rank of the measured cells' design rows), as in the unbiased
variance of a regression. A prior guess of tau, worth ``PRIOR_CELLS`` residuals, carries the
estimate while few cells are measured:

    tau^2 = (PRIOR_CELLS tau0^2 + sum(r^2) - (M - p) mean(v)) / (PRIOR_CELLS + M - p),
    kappa = cv^2 / tau^2.

Where the model fits, the cells of unmeasured Ks are predicted tightly and a K the model rules
out is not looked at; where it misfits (graph padding, MoE routing, a clock that is not
linear in B and K), kappa falls and every plausible K is measured.
"""

from __future__ import annotations

import numpy as np

#: Weight, in measured cells, of the prior guess of the misfit.
PRIOR_CELLS = 2.0
#: Effective observations a cell needs before its residual counts: its mean is known to
#: about cv / sqrt(8), a third of the model's usual misfit or better.
MIN_CELL_OBSERVATIONS = 8.0
#: Bounds of kappa: at least a hundredth of an observation (a flat prior is never exactly
#: flat), at most ``max_count`` (the caller's: the model never outweighs a first look).
MIN_COUNT = 0.01


def misfit_variance(
    n: np.ndarray,
    total: np.ndarray,
    total_sq: np.ndarray,
    model_s: np.ndarray,
    design: np.ndarray,
    prior_tau2: float,
) -> float:
    """tau^2, the model's relative misfit variance, from the cells' decode-only statistics.

    Args:
        n, total, total_sq: per cell, the (discounted) weight, sum and sum of squares of the
            step times credited to it, at its bucket's representative B.
        model_s: per cell, the latency model's time there (same shape).
        design: per cell, its latency-model feature row (shape ``n.shape + (features,)``).
        prior_tau2: the prior guess of tau^2.

    >>> n = np.array([0.0, 40.0, 40.0, 40.0, 40.0])
    >>> model = np.array([1.0, 1.0, 2.0, 3.0, 4.0])
    >>> design = np.stack([np.ones(5), np.arange(5.0)], axis=-1)
    >>> exact = misfit_variance(n, n * model, n * model**2, model, design, 0.01)
    >>> round(exact, 6)  # four cells, rank 2, residuals 0: the prior's 2 x 0.01 over 2 + 2
    0.005
    >>> off = model * np.exp([0.0, 0.1, -0.1, 0.1, -0.1])  # a 10% misfit, noiseless
    >>> round(misfit_variance(n, n * off, n * off**2, model, design, 0.01), 6)  # (0.02 + 4 x 0.01) / 4
    0.015
    """
    measured = n >= MIN_CELL_OBSERVATIONS
    if not measured.any():
        return float(prior_tau2)
    w, ss, m = n[measured], total_sq[measured], model_s[measured]
    mean = total[measured] / w
    ok = (mean > 0.0) & (m > 0.0)
    w, ss, m, mean = w[ok], ss[ok], m[ok], mean[ok]
    if mean.size == 0:
        return float(prior_tau2)
    r2 = np.log(mean / m) ** 2
    # Variance of the log mean ~ the cell's relative variance over its observations.
    var = np.maximum(ss / w - mean**2, 0.0) * w / np.maximum(w - 1.0, 1.0)
    v = var / (w * mean**2)
    rank = int(np.linalg.matrix_rank(design[measured][ok])) if mean.size > 1 else 1
    spare = max(mean.size - rank, 0)
    # The fit took p of the M residuals' freedoms, misfit and noise alike.
    data = float(np.sum(r2)) - spare * float(np.mean(v))
    return float(max((PRIOR_CELLS * prior_tau2 + data) / (PRIOR_CELLS + spare), 0.0))


def cell_count(tau2: float, cv: float, max_count: float) -> float:
    """kappa = cv^2 / tau^2, in [MIN_COUNT, max_count] (a model exactly right is not evidence
    of more than the cap).

    >>> [round(cell_count(t, 0.1, 16.0), 9) for t in (0.0025, 0.25, 1e-6, 0.0)]
    [4.0, 0.04, 16.0, 16.0]
    """
    if tau2 <= 0.0:
        return float(max_count)
    return float(min(max(cv * cv / tau2, MIN_COUNT), max_count))


def fitted_cell_count(
    decode_only: tuple[np.ndarray, np.ndarray, np.ndarray],
    model_s: np.ndarray,
    design: np.ndarray,
    cv: float,
    prior_count: float,
    max_count: float,
) -> float:
    """The cells' prior count: ``prior_count`` (tau0^2 = cv^2 / prior_count) as the guess, refit
    on the measured cells' misfit (:func:`misfit_variance`), within [MIN_COUNT, max_count].

    >>> n = np.full((1, 4), 50.0); model = np.array([[1.0, 1.2, 1.4, 1.6]])
    >>> design = np.stack([np.ones((1, 4)), np.arange(4.0)[None]], axis=-1)
    >>> fitted_cell_count((n, n * model, n * model**2), model, design, 0.1, 4.0, 16.0)  # exact: 2 spare cells
    8.0
    >>> bent = model * np.exp([[0.3, -0.3, 0.3, -0.3]])
    >>> round(fitted_cell_count((n, n * bent, n * bent**2), model, design, 0.1, 4.0, 16.0), 3)  # 30% misfit
    0.11
    """
    tau2 = misfit_variance(*decode_only, model_s, design, cv * cv / prior_count)
    return cell_count(tau2, cv, max_count)

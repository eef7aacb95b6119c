"""How much of a prior's latency evidence to keep, judged by how well it agrees with live data.

A prior's cells come from other telemetry: another box, another build, another day. Where
they are right, their pseudo-observations save exploration. Where they are wrong, a cell
the governor never plays keeps the prior's word for ever: a confident prior that calls a K
slow means that K is never tried (Mistral Medium 3.5 on GB10 with the Strix Halo prior held
K=0 at concurrency 48, where K=1 is 55% faster, and lost 24% of the oracle's tokens).

The prior is made commensurate with the data (Hobbs et al. 2011; an empirical-Bayes power
prior): this deployment's cell means differ from the prior's by a relative calibration
error of variance tau^2. A prior cell of n observations with relative noise c^2 per step
then tells the mean only to c^2 / n + tau^2, so it is worth

    n_eff = n / (1 + n tau^2 / c^2)

observations. tau^2 is estimated by moments from the cells that the prior and the live data
both hold: E[r^2] = tau^2 + v + d^2, with r the relative difference of the two means, v its
sampling variance and d the live cells' own systematic error (see ``LIVE_BIAS_SD``). A prior
that agrees keeps its weight; one that is off by far more than that falls to a fraction of
an observation, so the cells nobody has played widen and get explored. Each bucket takes
the larger of its own estimate and that of all cells together: a prior off in the buckets
seen so far is distrusted in a new bucket too. Only the latency cells are weighed: the
acceptance counts and the regression's pseudo-data are used as loaded, since live data
outgrows them within a few hundred steps.
"""

from __future__ import annotations

import numpy as np

#: Weighted live observations a cell needs before it is compared with the prior.
MIN_LIVE_N = 3.0
#: Relative error of a live cell's mean that is the governor's, not the prior's: a cell holds
#: steps carried to its bucket's representative B along the online four-feature latency
#: model, which bends otherwise than the hardware. With the own box's prior, decode-only
#: played cells are 0.1-2.4% off on the simulator (Mistral Medium 3.5/Strix Halo at
#: concurrency 48: 1.8%, 5.5 standard errors); against the other box's prior, 12-27%
#: (Mistral Medium 3.5/GB10). Without this allowance, 1-2% made a 200-step prior worth 2-5
#: steps on its own box.
LIVE_BIAS_SD = 0.03
#: Floor on the relative noise of a step time: a noiseless clock (a test, a replay) would
#: otherwise weigh a prior by 0 / 0.
MIN_RELATIVE_SD = 0.005
#: Ceilings that keep absurd (finite) files finite: a prior off by a factor of 1000 is
#: worth nothing either way; the snapshot validator accepts tau^2 up to this.
MAX_TAU2 = 1e6
_MAX_REL = 1e12


def _mean_and_rel_var(n: np.ndarray, s: np.ndarray, ss: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cell: mean (0 where n = 0) and squared coefficient of variation of the observations,
    floored at ``MIN_RELATIVE_SD`` squared."""
    safe = np.where(n > 0, n, 1.0)
    mean = np.where(n > 0, s / safe, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):  # a file may hold any finite numbers
        var = np.maximum(ss / safe - mean * mean, 0.0)
        rel = np.where(mean > 0, var / np.maximum(mean * mean, 1e-300), 0.0)
    return mean, np.clip(np.nan_to_num(rel, nan=0.0), MIN_RELATIVE_SD**2, _MAX_REL)


def chunk_moments(n, s, p, pp, tp, ss=None):
    """Per cell of steps next to a prompt chunk (weight ``n``; sums of step time t, chunk size
    P, P^2, tP and, if given, t^2): mean t, mean P, var P, cov(t, P) and var t (None without
    ``ss``); 0 where n = 0."""
    safe = np.where(n > 0, n, 1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        mt, mp = s / safe, p / safe
        var_p = np.maximum(pp / safe - mp * mp, 0.0)
        cov = tp / safe - mt * mp
        var_t = None if ss is None else np.maximum(ss / safe - mt * mt, 0.0)
    return mt, mp, var_p, cov, var_t


def slope_from_moments(n, var_p, cov, fallback: float = 0.0) -> np.ndarray:
    """The slope along P that the cells of a bucket (the last axis) share, fitted within cells
    (analysis of covariance); ``fallback`` where P does not vary enough to tell; never
    negative, since a bigger chunk never makes a step faster."""
    with np.errstate(over="ignore", invalid="ignore"):
        spread = (n * var_p).sum(axis=-1)
        slope = np.where(spread > 1.0, (n * cov).sum(axis=-1) / np.maximum(spread, 1e-300), fallback)
    return np.nan_to_num(np.maximum(slope, 0.0), nan=0.0, posinf=0.0)


def residual_var(var_t, var_p, cov, slope):
    """Variance of step time about the line along P of that ``slope``."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.maximum(var_t - 2.0 * slope * cov + slope * slope * var_p, 0.0)


def chunk_adjusted_rel_var(n, s, ss, p, pp, tp) -> np.ndarray:
    """Per cell of steps next to a prompt chunk (weight ``n``; sums of step time, its square,
    chunk size P, P^2 and time x P), the squared coefficient of variation of a step's time
    about the cell's line along P, whose slope the bucket's cells share (as the governor
    reads them), floored at ``MIN_RELATIVE_SD`` squared.

    The raw spread counts the chunks' sizes as noise: 20-50% of a step's time, where the
    cell's mean at a given P is known to a few percent. Weighed by the raw spread, a prior
    from another box kept its cells next to chunks at nearly full weight.

    >>> t = np.array([[1.0, 2.0]]); n = np.full((1, 2), 2.0)  # per cell: (P, t) = (0, t) and (10, t + 1)
    >>> chunk_adjusted_rel_var(n, n * t + 1, 2 * t * t + 2 * t + 1, n * 5, n * 50, 10 * (t + 1)).tolist()
    [[2.5e-05, 2.5e-05]]
    """
    mt, _, var_p, cov, var_t = chunk_moments(n, s, p, pp, tp, ss)
    resid = residual_var(var_t, var_p, cov, slope_from_moments(n, var_p, cov)[:, None])
    with np.errstate(over="ignore", invalid="ignore"):
        rel = np.where((n > 0) & (mt > 0), resid / np.maximum(mt * mt, 1e-300), 0.0)
    return np.clip(np.nan_to_num(rel, nan=0.0), MIN_RELATIVE_SD**2, _MAX_REL)


def shared_chunk_slope(n, s, p, pp, tp, fallback: float = 0.0) -> np.ndarray:
    """Per bucket (the last axis holds K), the slope of step time along chunk size P shared
    by its cells (see :func:`slope_from_moments`).

    >>> n = np.array([2.0, 2.0]); p = np.array([10.0, 20.0]); pp = np.array([100.0, 400.0])
    >>> float(shared_chunk_slope(n, np.array([3.0, 5.0]), p, pp, np.array([20.0, 60.0])))  # (P, t) = (0, 1), (10, 2) and (0, 2), (20, 3)
    0.06
    """
    _, _, var_p, cov, _ = chunk_moments(n, s, p, pp, tp)
    return slope_from_moments(n, var_p, cov, fallback)


def at_chunk_size(n, s, ss, p, slope, target_p):
    """Cells next to a chunk (weight, sums of time and its square, sum of P) carried along
    ``slope`` per bucket to mean chunk size ``target_p`` per cell: (n, sum, sum of squares),
    so that cells that met chunks of other sizes compare at the same one.

    >>> n, s, ss = at_chunk_size(np.array([[2.0]]), np.array([[3.0]]), np.array([[5.0]]), np.array([[10.0]]),
    ...                          np.array([0.1]), np.array([[15.0]]))
    >>> (s / n).item(), (ss / n - (s / n) ** 2).item()  # steps (P, t) = (0, 1), (10, 2) read at P = 15
    (2.5, 0.25)
    """
    safe = np.where(n > 0, n, 1.0)
    shift = np.where(n > 0, slope[:, None] * (target_p - p / safe), 0.0)
    return n, s + n * shift, ss + 2.0 * shift * s + n * shift * shift


class PriorCells:
    """A prior's latency cells (weight ``n``, sums ``s`` and ``ss`` of step times and their
    squares, each (buckets, K + 1)), with their means and noise worked out once: a loaded
    prior does not change, and the governor weighs it every refresh. ``rel_var`` replaces
    the cells' own spread as their noise (see :func:`chunk_adjusted_rel_var`)."""

    def __init__(self, n: np.ndarray, s: np.ndarray, ss: np.ndarray, rel_var: np.ndarray | None = None) -> None:
        self.n = n
        self.mean, self.rel_var = _mean_and_rel_var(n, s, ss)
        if rel_var is not None:
            self.rel_var = rel_var

    def calibration_variance(self, live_n: np.ndarray, live_sum: np.ndarray, live_sumsq: np.ndarray) -> np.ndarray:
        """Per bucket, tau^2: the estimated relative variance of the prior's cell means about
        this deployment's live cells (0 where nothing contradicts the prior)."""
        mp, cp, prior_n = self.mean, self.rel_var, self.n
        ml, cl = _mean_and_rel_var(live_n, live_sum, live_sumsq)
        both = (live_n >= MIN_LIVE_N) & (prior_n > 0) & (mp > 0)
        if not both.any():
            return np.zeros(prior_n.shape[0])
        with np.errstate(over="ignore", invalid="ignore"):  # an absurd prior is distrusted, not fatal
            r = np.where(both, ml / np.where(both, mp, 1.0) - 1.0, 0.0)
            v = cl / np.maximum(live_n, 1e-300) + cp / np.maximum(prior_n, 1e-300)  # sampling variance of r
            excess = np.where(both, r * r - v - LIVE_BIAS_SD**2, 0.0)
            w = np.where(both, live_n, 0.0)  # a cell with more live evidence says more
            per_bucket = np.maximum((excess * w).sum(axis=1), 0.0) / np.maximum(w.sum(axis=1), 1e-300)
            overall = max(float((excess * w).sum()), 0.0) / float(w.sum())
            tau2 = np.maximum(per_bucket, overall)
        return np.clip(np.nan_to_num(tau2, nan=MAX_TAU2), 0.0, MAX_TAU2)

    def kept_share(self, tau2: np.ndarray) -> np.ndarray:
        """Per cell, n_eff / n in (0, 1] under calibration variance ``tau2`` per bucket."""
        return 1.0 / (1.0 + self.n * tau2[:, None] / self.rel_var)

"""How much one step tells: the clock's step-to-step correlation, learnt online.

The cells are Normal models of independent steps. A shared machine's clock is not
independent: a slow spell slows several steps in a row. Consecutive decode-only steps of one
cell give log residuals e_t = log(t / cell mean); their discounted lag-1 correlation rho
says how much a step repeats the one before. Each step then counts as
(1 - rho) / (1 + rho) observations, the effective sample size of an AR(1) series, so a
cell's posterior is as wide as its data really allow, and a run of lucky steps does not make
the governor sure of a difference that is not there.

The state is three numbers (``sxy``, ``sxx``, the last residual) kept by
:class:`~banditk.governor.posterior.GoodputPosterior`.
"""

from __future__ import annotations

import math

#: Correlation above this is read as this: a clock that correlated is a drift, and each
#: step still says something.
MAX_RHO = 0.9
#: Residual pairs needed before the estimate is used (until then, steps count fully).
MIN_PAIRS = 16.0


def update(sxy: float, sxx: float, prev: float | None, resid: float, discount: float) -> tuple[float, float]:
    """Fold the pair (``prev``, ``resid``) into the discounted sums; no pair without ``prev``.

    >>> update(0.0, 0.0, None, 0.1, 0.99), update(0.0, 0.0, 0.2, 0.1, 0.99)
    ((0.0, 0.0), (0.020000000000000004, 0.04000000000000001))
    """
    if prev is None:
        return sxy, sxx
    return sxy * discount + prev * resid, sxx * discount + prev * prev


def weight(sxy: float, sxx: float, pairs: float) -> float:
    """Observations one step is worth: (1 - rho) / (1 + rho), rho = sxy / sxx in [0, MAX_RHO].

    >>> weight(0.0, 1.0, 100.0), round(weight(0.5, 1.0, 100.0), 4), weight(0.5, 1.0, 3.0)
    (1.0, 0.3333, 1.0)
    """
    if pairs < MIN_PAIRS or sxx <= 0.0 or not math.isfinite(sxy / sxx):
        return 1.0
    rho = min(max(sxy / sxx, 0.0), MAX_RHO)
    return (1.0 - rho) / (1.0 + rho)

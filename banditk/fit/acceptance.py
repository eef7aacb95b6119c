"""Per-position acceptance: conjugate Beta posteriors, in closed form.

With a Beta(1, 1) prior and s successes and f first failures at position i, the
posterior of the conditional acceptance alpha_i is Beta(1 + s, 1 + f). No sampling is
needed; the uncertainty is reported as a central credible interval.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class AcceptanceFit:
    """Beta(a, b) posterior per position 1..K_max, with mean and central interval.

    Attributes:
        a: 1 + successes.
        b: 1 + failures.
        mean: posterior mean a / (a + b).
        lo: lower end of the central ``level`` interval.
        hi: upper end.
        level: credibility of the interval.
    """

    a: np.ndarray
    b: np.ndarray
    mean: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    level: float

    def to_dict(self) -> dict:
        return {
            "prior": "Beta(1, 1)",
            "mean": _r(self.mean),
            f"ci{round(self.level * 100)}_lo": _r(self.lo),
            f"ci{round(self.level * 100)}_hi": _r(self.hi),
            "observations": _r(self.a + self.b - 2.0),
        }


def fit_acceptance(successes: np.ndarray, failures: np.ndarray, level: float = 0.95) -> AcceptanceFit:
    """Closed-form posterior of per-position acceptance.

    >>> f = fit_acceptance(np.array([8.0, 0.0]), np.array([2.0, 0.0]))
    >>> f.mean.round(3).tolist(), round(float(f.lo[1]), 3), round(float(f.hi[1]), 3)
    ([0.75, 0.5], 0.025, 0.975)
    """
    a = 1.0 + np.asarray(successes, dtype=float)
    b = 1.0 + np.asarray(failures, dtype=float)
    tail = (1.0 - level) / 2.0
    return AcceptanceFit(a, b, a / (a + b), stats.beta.ppf(tail, a, b), stats.beta.ppf(1.0 - tail, a, b), level)


def _r(x: np.ndarray) -> list[float]:
    return [round(float(v), 6) for v in x]

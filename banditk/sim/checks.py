"""docs/evaluation.md's simulator checks: the simulator column of :mod:`banditk.evaluation`.

The thresholds are the protocol's; they are fixed and any change needs a written
reason in the report. Only the settle measure is simulator-specific.
"""

from __future__ import annotations

from banditk import evaluation

THRESHOLDS = evaluation.THRESHOLDS["simulator"]
PEERS = evaluation.PEERS
_rec = evaluation.record


def point_checks(med: dict[str, dict], point: str, subject: str = "bandit") -> list[dict]:
    """Per-point checks of ``subject`` against the simulator thresholds."""
    return evaluation.point_checks(med, point, "simulator", subject)


def geomean_checks(per_point: dict[str, dict[str, dict]], subject: str = "bandit") -> list[dict]:
    """Geometric mean over points of subject / peer throughput, per peer."""
    return evaluation.geomean_checks(per_point, "simulator", subject)


def steps_to_settle(k, change_at: int, end: int, window: int = 100, frac: float = 0.9) -> int:
    """Steps after ``change_at`` until K first holds the phase's final choice.

    The final choice is the most used K over the last quarter of the phase;
    settled at the first step from which the next ``window`` steps use that K
    at least ``frac`` of the time (later exploration bursts are counted by
    the switch rate, not here).

    >>> steps_to_settle([1] * 100 + [3] * 300, 100, 400)
    0
    >>> steps_to_settle([1] * 100 + [1] * 120 + [3] * 180, 100, 400)
    110
    """
    import numpy as np

    k = np.asarray(k)[change_at:end]
    k = k[k >= 0]
    if k.size <= window:
        return 0
    tail = k[-max(k.size // 4, 1) :]
    vals, counts = np.unique(tail, return_counts=True)
    m = vals[np.argmax(counts)]
    hit = (k == m).astype(float)
    roll = np.convolve(hit, np.ones(window) / window, mode="valid")
    good = np.flatnonzero(roll >= frac)
    return int(good[0]) if good.size else int(k.size)

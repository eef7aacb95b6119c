"""The drafter's time per K and batch size, learnt from timed steps.

Where a step's own drafter time is not known when its decision is credited (on a GPU, its
CUDA events complete later), :func:`.ledger.decision_cost` swaps in these estimates instead.
A drafter's time depends on K (K forwards, or one for K = 0's cache sync) and weakly on the
batch, so estimates are kept per K and batch-size octave (1, 2-3, 4-7, ...).

Examples:
    >>> d = DraftTimes()
    >>> d.estimate(2, num_reqs=5) is None
    True
    >>> d.observe(2, num_reqs=6, draft_s=0.004)
    >>> d.estimate(2, num_reqs=5), d.estimate(2, num_reqs=9)
    (0.004, None)
"""

from __future__ import annotations

#: Weight of a new sample in a cell's moving average (about the last 20 steps of that cell).
EMA_WEIGHT = 0.05


class DraftTimes:
    """Exponential moving averages of drafter seconds per (K, batch-size octave)."""

    def __init__(self, weight: float = EMA_WEIGHT) -> None:
        self._weight = weight
        self._mean: dict[tuple[int, int], float] = {}

    @staticmethod
    def _cell(k: int, num_reqs: int) -> tuple[int, int]:
        return int(k), max(int(num_reqs), 1).bit_length()

    def observe(self, k: int, num_reqs: int, draft_s: float) -> None:
        if not draft_s >= 0.0:  # NaN or negative: a broken sample
            return
        cell = self._cell(k, num_reqs)
        old = self._mean.get(cell)
        self._mean[cell] = draft_s if old is None else old + self._weight * (draft_s - old)

    def estimate(self, k: int, num_reqs: int) -> float | None:
        return self._mean.get(self._cell(k, num_reqs))

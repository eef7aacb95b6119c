"""Each running request's acceptance evidence, and the allotment of one verification budget.

The book keeps, per request id, successes and failures per draft position (counted as in
:func:`banditk.posterior.acceptance.position_counts`), updated by every verified step of that
request. Finished requests leave the book but their counts stay in a bounded window: they are
the evidence for the strength n0 that shrinks a running request toward its class
(:func:`banditk.posterior.request_acceptance.strength_by_moments`), since a finished request has
seen the most steps. The allotment ranks every (request, position) slot by its posterior
survival and spends the budget greedily (:func:`banditk.governor.verify_budget.allot`).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from banditk.governor.verify_budget import allot
from banditk.posterior.request_acceptance import MAX_STRENGTH, shrunk_alpha, strength_by_moments, survival

#: Finished requests whose counts inform the strength n0.
FINISHED_WINDOW = 512


class RequestBook:
    """Per-request position counts for K positions; ``observe`` per verified step, ``finish`` at the end."""

    def __init__(self, k_max: int, finished_window: int = FINISHED_WINDOW) -> None:
        if k_max < 1:
            raise ValueError(f"`k_max` must be >= 1, got {k_max}.")
        self.k_max = k_max
        self._running: dict[str, np.ndarray] = {}  # id -> (2, k_max): successes, failures
        self._finished: deque[np.ndarray] = deque(maxlen=finished_window)

    def __len__(self) -> int:
        return len(self._running)

    def observe(self, request_id: str, drafted: int, accepted: int) -> None:
        """One verified step of a request: ``accepted`` of its ``drafted`` drafts, in order."""
        if not 0 <= accepted <= drafted <= self.k_max:
            raise ValueError(
                f"request {request_id!r}: need 0 <= accepted <= drafted <= {self.k_max}, "
                f"got accepted={accepted}, drafted={drafted}."
            )
        counts = self._running.setdefault(request_id, np.zeros((2, self.k_max)))
        counts[0, :accepted] += 1
        if accepted < drafted:
            counts[1, accepted] += 1

    def running_ids(self) -> list[str]:
        """Ids of the requests the book holds as running."""
        return list(self._running)

    def finish(self, request_id: str) -> None:
        """The request left the engine (finished, aborted or preempted for good)."""
        counts = self._running.pop(request_id, None)
        if counts is not None and counts.sum() > 0:
            self._finished.append(counts)

    def counts(self, request_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Successes and failures, shape (len(request_ids), k_max); zeros for a request never seen."""
        rows = [self._running.get(r, np.zeros((2, self.k_max))) for r in request_ids]
        both = np.stack(rows) if rows else np.zeros((0, 2, self.k_max))
        return both[:, 0], both[:, 1]

    def strength(self, class_mean: np.ndarray) -> float:
        """n0 from the finished and running requests' spread; without evidence, MAX_STRENGTH (the class decides)."""
        every = [*self._finished, *self._running.values()]
        if not every:
            return MAX_STRENGTH
        stacked = np.stack(every)
        n0 = strength_by_moments(class_mean, stacked[:, 0], stacked[:, 1])
        return MAX_STRENGTH if n0 is None else n0

    def allotment(self, request_ids: list[str], drafted: np.ndarray, class_mean: np.ndarray, budget: int) -> np.ndarray:
        """Drafts to verify per request for a step that verifies ``budget`` drafts over the batch."""
        succ, fail = self.counts(request_ids)
        surv = survival(shrunk_alpha(class_mean, self.strength(class_mean), succ, fail))
        return allot(surv, drafted, budget)

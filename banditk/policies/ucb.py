"""A classic per-bucket UCB1 bandit over K: the family of BanditSpec and Nightjar.

Reward of a step: tokens emitted per second, (sum of accepted + B) / step time,
scaled by the largest reward seen in the bucket so it lies in [0, 1]. No prior,
no model of acceptance or latency, no switching cost: the baseline a Bayesian
governor must beat on regret.
"""

from __future__ import annotations

import math

import numpy as np

from banditk.core.buckets import DEFAULT_BUCKET_EDGES, bucket_of, check_bucket_edges
from banditk.core.errors import InvalidContextError, InvalidDecisionError
from banditk.core.types import Decision, StepContext, StepOutcome


class UCBPolicy:
    """UCB1 per batch-size bucket.

    >>> import numpy as np
    >>> from banditk.core.types import StepContext, StepOutcome
    >>> p, ks = UCBPolicy(k_max=2), []
    >>> for _ in range(3):  # untried arms first
    ...     d = p.select(StepContext(4, 2, "mtp"))
    ...     p.observe(d, StepOutcome(np.full(4, d.k), np.zeros(4, dtype=int), 0.01))
    ...     ks.append(d.k)
    >>> ks
    [0, 1, 2]
    """

    name = "ucb"

    def __init__(self, *, k_max: int, bucket_edges=DEFAULT_BUCKET_EDGES, exploration: float = 1.0) -> None:
        self.k_max = k_max
        self.edges = check_bucket_edges(list(bucket_edges))
        self.exploration = exploration
        nb = len(self.edges)
        self.count = np.zeros((nb, k_max + 1))
        self.total = np.zeros((nb, k_max + 1))
        self.scale = np.zeros(nb)
        self.steps = 0

    def select(self, context: StepContext) -> Decision:
        if context.k_max != self.k_max:
            raise InvalidContextError(f"context.k_max={context.k_max} but UCB was built for k_max={self.k_max}.")
        self.steps += 1
        if context.num_decoding == 0:
            return Decision(k=0, bucket=-1, num_decoding=0, step_id=self.steps)
        b = bucket_of(self.edges, context.num_decoding)
        n = self.count[b]
        untried = np.flatnonzero(n == 0)
        if untried.size:
            k = int(untried[0])
        else:
            mean = self.total[b] / n / max(self.scale[b], 1e-300)
            bonus = self.exploration * np.sqrt(2.0 * math.log(n.sum()) / n)
            k = int(np.argmax(mean + bonus))
        return Decision(k=k, bucket=b, num_decoding=context.num_decoding, step_id=self.steps)

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        if decision.bucket < 0:
            return
        if not 0 <= decision.k <= self.k_max or decision.bucket >= len(self.edges):
            raise InvalidDecisionError(f"decision k={decision.k}, bucket={decision.bucket} is not one of UCB's.")
        if outcome.step_duration_s <= 0:
            return
        reward = (outcome.accepted_total + outcome.num_requests) / outcome.step_duration_s
        b, k = decision.bucket, decision.k
        self.count[b, k] += 1
        self.total[b, k] += reward
        self.scale[b] = max(self.scale[b], reward)

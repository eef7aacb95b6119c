"""A uniformly random K each step: the exploration policy used to record traces for prior fitting.

A fit needs every K at every batch size (a governor's own traces concentrate on the
K it likes, which leaves the latency model's other cells unidentified).

>>> from banditk.types import StepContext
>>> p = RandomKPolicy(k_max=3, seed=0)
>>> sorted({p.select(StepContext(4, 3, "mtp")).k for _ in range(50)})
[0, 1, 2, 3]
"""

from __future__ import annotations

import numpy as np

from ..types import Decision, StepContext, StepOutcome


class RandomKPolicy:
    name = "random"
    disables_speculation = False

    def __init__(self, *, k_max: int, seed: int = 0) -> None:
        self.k_max = k_max
        self._rng = np.random.default_rng(seed)
        self.steps = 0

    def select(self, context: StepContext) -> Decision:
        self.steps += 1
        return Decision(k=int(self._rng.integers(0, self.k_max + 1)), bucket=-1,
                        num_decoding=context.num_decoding, step_id=self.steps)

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        return None

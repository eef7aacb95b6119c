"""A uniformly random K, held a few steps: the exploration policy used to record traces for prior fitting.

A fit needs every K at every batch size (a governor's own traces concentrate on the
K it likes, which leaves the latency model's other cells unidentified).

K is held for ``hold`` steps because in vLLM the time credited to a decision (the step
that verifies its drafts) also drafts for the next decision: with a new K every step,
the draft cost of K is spread over every cell and the fitted cost of K comes out flat.
Held, only the first step of each run of K mixes two K.

>>> from banditk.core.types import StepContext
>>> p = RandomKPolicy(k_max=3, seed=0)
>>> ks = [p.select(StepContext(4, 3, "mtp")).k for _ in range(400)]
>>> sorted(set(ks)), ks[:8] == [ks[0]] * 8
([0, 1, 2, 3], True)
"""

from __future__ import annotations

import numpy as np

from banditk.core.errors import ConfigError
from banditk.core.types import Decision, StepContext, StepOutcome


class RandomKPolicy:
    name = "random"
    disables_speculation = False

    def __init__(self, *, k_max: int, seed: int = 0, hold: int = 8) -> None:
        if isinstance(hold, bool) or not isinstance(hold, int) or hold < 1:
            raise ConfigError(f"`hold` must be an integer >= 1, got {hold!r}.")
        self.k_max = k_max
        self.hold = hold
        self._rng = np.random.default_rng(seed)
        self.steps = 0
        self._k = 0

    def select(self, context: StepContext) -> Decision:
        if self.steps % self.hold == 0:
            self._k = int(self._rng.integers(0, self.k_max + 1))
        self.steps += 1
        return Decision(k=self._k, bucket=-1, num_decoding=context.num_decoding, step_id=self.steps)

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        return None

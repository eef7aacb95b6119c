"""The oracle policy and regret against it.

Each step the oracle knows, for every K, the expected tokens
``T(K) = sum_r E_r(K)`` from the true per-request acceptance of the requests
in the batch, and the noise-free step time ``t(K)``; it picks
``argmax T(K) - rate x t(K)``.

- In a decode-only step ``rate`` is that step's best goodput
  ``max T(K) / t(K)``, so the oracle picks the best-goodput K.
- In a step that also carries a prefill chunk, ``rate`` is the running
  (~200-step) average of the decode-only steps' best goodput. The chunk's time
  is the same for every K; dividing by it (maximising ``T / t`` of the mixed
  step) would make extra drafts look cheap and over-draft. The prefill work is
  fixed per request whatever K is, so long-run throughput is maximised by
  maximising decode tokens per unit of decode time, at the margin.

Regret of a step in which a policy chose K: the tokens the oracle would have
emitted in that step's time minus the policy's expected tokens,
``score(K*) - score(K)`` with ``score = T - rate x t`` (in a decode-only step,
``G* t(K) - T(K)``). It is >= 0 for any policy running in the same server
mode; cumulative regret over the oracle's cumulative tokens is
``regret_fraction``. Expected (not sampled) tokens are used so that acceptance
luck does not count as regret.
"""

from __future__ import annotations

import numpy as np

from banditk.core.types import Decision, StepContext, StepOutcome


class OraclePolicy:
    """Chooses the simulator's per-step best K (simulator only).

    The simulator sets :attr:`next_k` before calling :meth:`select`.
    """

    name = "oracle"
    needs_oracle = True

    def __init__(self, k_max: int) -> None:
        self.k_max = int(k_max)
        self.next_k = 0
        self._step = 0

    def select(self, context: StepContext) -> Decision:
        self._step += 1
        return Decision(k=int(self.next_k), bucket=-1, num_decoding=context.num_decoding, step_id=self._step)

    def observe(self, decision: Decision, outcome: StepOutcome) -> None:
        """The oracle learns nothing."""


def cumulative_regret(expected_tokens: np.ndarray, oracle_tokens: np.ndarray) -> np.ndarray:
    """Cumulative regret in tokens per step.

    >>> cumulative_regret(np.array([1.0, 2.0]), np.array([1.5, 2.0])).tolist()
    [0.5, 0.5]
    """
    return np.cumsum(np.asarray(oracle_tokens) - np.asarray(expected_tokens))


def regret_fraction(expected_tokens: np.ndarray, oracle_tokens: np.ndarray) -> float:
    """Cumulative regret as a fraction of the oracle's tokens.

    >>> regret_fraction(np.array([9.0]), np.array([10.0]))
    0.1
    """
    o = float(np.sum(oracle_tokens))
    return float((o - float(np.sum(expected_tokens))) / o) if o > 0 else 0.0

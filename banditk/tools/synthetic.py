"""A synthetic telemetry stream with known truth, for the demo and for tests.

It is not the serving simulator (:mod:`banditk.sim`): batch size is given per step,
and each request's drafts are accepted position by position with the true
conditional acceptance. Its only job is to say what the right K is, so that a
policy's choices can be checked.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from banditk.core.types import Decision, StepOutcome
from banditk.posterior.acceptance import expected_tokens
from banditk.posterior.latency_model import features


@dataclass(frozen=True)
class SyntheticTruth:
    """True per-position acceptance, latency weights and relative step-time noise.

    The default is shaped like a bandwidth-bound box: speculation wins at small
    batches and loses at large ones.
    """

    acceptance: tuple[float, ...] = (0.8, 0.7, 0.6, 0.5)
    weights: tuple[float, ...] = (0.020, 0.001, 0.0012, 0.00002)
    noise_cv: float = 0.05

    @property
    def k_max(self) -> int:
        return len(self.acceptance)

    def mean_step_s(self, batch: int) -> np.ndarray:
        """True mean step time for K = 0..K_max."""
        return features(batch, np.arange(self.k_max + 1)) @ np.asarray(self.weights)

    def goodput(self, batch: int) -> np.ndarray:
        """True expected goodput (tokens/s) for K = 0..K_max."""
        return batch * expected_tokens(np.asarray(self.acceptance)) / self.mean_step_s(batch)

    def best_k(self, batch: int) -> int:
        return int(np.argmax(self.goodput(batch)))

    def outcome(self, rng: np.random.Generator, decision: Decision, batch: int) -> StepOutcome:
        """Draw what happens when ``batch`` requests verify ``decision.k`` drafts each."""
        k = decision.k
        drafted = np.full(batch, k, dtype=np.int64)
        if k:
            ok = rng.random((batch, k)) < np.asarray(self.acceptance[:k])
            accepted = np.where(ok.all(axis=1), k, np.argmin(ok, axis=1)).astype(np.int64)
        else:
            accepted = np.zeros(batch, dtype=np.int64)
        mean = float(self.mean_step_s(batch)[k])
        t = mean * max(1.0 + self.noise_cv * rng.standard_normal(), 0.05)
        return StepOutcome(drafted, accepted, t)

"""Drive a policy over a synthetic stream with known truth (tests and experiments)."""

from __future__ import annotations

import numpy as np

from banditk.core.types import StepContext
from banditk.tools.synthetic import SyntheticTruth


def run_stream(
    policy, truth: SyntheticTruth, batches, seed: int = 0, drafter_class: str = "mtp", kv_usage: float = 0.0
) -> np.ndarray:
    """Run ``policy`` over a sequence of batch sizes; return the K chosen at each step."""
    rng = np.random.default_rng(seed)
    ks = np.empty(len(batches), dtype=np.int64)
    for i, b in enumerate(batches):
        d = policy.select(
            StepContext(num_decoding=int(b), k_max=truth.k_max, drafter_class=drafter_class, kv_usage=kv_usage)
        )
        policy.observe(d, truth.outcome(rng, d, int(b)))
        ks[i] = d.k
    return ks


def switches(ks: np.ndarray) -> int:
    """Number of K changes between consecutive steps."""
    return int(np.sum(np.asarray(ks)[1:] != np.asarray(ks)[:-1]))


def trained_governor(seed: int = 0, steps: int = 1500, batches=(1, 8, 64), **config):
    """A bandit governor (drafter class mtp, K_max 4) after ``steps`` steps of the default synthetic stream."""
    from banditk.core.config import GovernorConfig
    from banditk.governor import BanditGovernor

    g = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=4, seed=seed, **config))
    b = np.random.default_rng(seed).choice(batches, size=steps)
    run_stream(g, SyntheticTruth(), b, seed=seed)
    return g

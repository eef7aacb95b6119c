"""Shared helpers for the core tests."""

from __future__ import annotations

import numpy as np
import pytest

from banditk.synthetic import SyntheticTruth
from banditk.types import StepContext


def run_stream(policy, truth: SyntheticTruth, batches, seed: int = 0, drafter_class: str = "mtp", kv_usage: float = 0.0):
    """Drive ``policy`` over a sequence of batch sizes; return the K chosen at each step."""
    rng = np.random.default_rng(seed)
    ks = np.empty(len(batches), dtype=np.int64)
    for i, b in enumerate(batches):
        d = policy.select(StepContext(num_decoding=int(b), k_max=truth.k_max, drafter_class=drafter_class, kv_usage=kv_usage))
        policy.observe(d, truth.outcome(rng, d, int(b)))
        ks[i] = d.k
    return ks


def switches(ks: np.ndarray) -> int:
    return int(np.sum(ks[1:] != ks[:-1]))


@pytest.fixture
def truth() -> SyntheticTruth:
    return SyntheticTruth()

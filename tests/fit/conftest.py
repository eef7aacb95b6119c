"""Synthetic traces with a known truth for the fitter's tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from banditk.core.types import Decision
from banditk.io.trace import header, step_record
from banditk.tools.synthetic import SyntheticTruth

#: Batch sizes of the synthetic traces: one per default bucket up to 64, plus a few
#: more, so every weight is identified.
BATCHES = np.array([1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64])


def write_trace(
    path: Path,
    truth: SyntheticTruth,
    steps: int,
    seed: int = 0,
    *,
    drafter_class: str = "mtp",
    batches: np.ndarray = BATCHES,
    step_factor: Callable[[int, int], float] | None = None,
    **head,
) -> Path:
    """Write a trace of ``steps`` steps with B drawn from ``batches`` and K uniform in 0..K_max.

    ``step_factor(B, K)`` multiplies the true mean step time (to build a truth the
    interpretable model cannot express).
    """
    rng = np.random.default_rng(seed)
    lines = [json.dumps(header(drafter_class, truth.k_max, "sim", **head))]
    bs = rng.choice(batches, size=steps)
    ks = rng.integers(0, truth.k_max + 1, size=steps)
    for i, (b, k) in enumerate(zip(bs.tolist(), ks.tolist())):
        d = Decision(k=k, bucket=0, num_decoding=b, step_id=i + 1)
        o = truth.outcome(rng, d, b)
        if step_factor is not None:
            o = type(o)(o.drafted, o.accepted, o.step_duration_s * step_factor(b, k))
        lines.append(json.dumps(step_record(d, o, truth.k_max)))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_chunked_trace(path: Path, steps: int = 400, seed: int = 0) -> tuple[Path, dict[int, list[float]]]:
    """A load of 8 decoding requests where every 5th step one of them finishes and its
    successor's prompt chunk (256 tokens) runs next to the other 7 requests' drafts; such a
    step costs 40 ms + 5 ms per K. Returns the path and, per K, the mixed steps' times."""
    rng = np.random.default_rng(seed)
    lines, mixed = [json.dumps(header("mtp", 4, "sim"))], {k: [] for k in range(5)}
    for i in range(steps):
        k = int(rng.integers(0, 5))
        chunk = i % 5 == 4
        t = (0.040 + 0.005 * k if chunk else 0.010 + 0.002 * k) * rng.gamma(400.0, 1 / 400.0)
        if chunk:
            mixed[k].append(t)
        lines.append(
            json.dumps(
                {
                    "step": i + 1,
                    "B": 7 if chunk else 8,
                    "k": k,
                    "step_s": t,
                    "acc_s": [0] * 4,
                    "acc_f": [0] * 4,
                    "prefill": 256 if chunk else 0,
                }
            )
        )
    path.write_text("\n".join(lines) + "\n")
    return path, mixed


@pytest.fixture(autouse=True)
def _one_thread():
    import torch

    torch.set_num_threads(1)
    yield


def write_governed_trace(
    path: Path,
    truth: SyntheticTruth,
    steps: int,
    seed: int = 0,
    *,
    stall_p: float = 0.0,
    batches: np.ndarray = np.array([1, 2, 4, 8, 16, 32, 64]),
) -> Path:
    """A trace as a live server would log it: K chosen by a flat-prior governor (so K is far
    from uniform per bucket), and a fraction ``stall_p`` of steps stalled at 5x their time."""
    from banditk.core.config import GovernorConfig
    from banditk.core.types import StepContext
    from banditk.governor import BanditGovernor

    rng = np.random.default_rng(seed)
    gov = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=truth.k_max, seed=seed))
    lines = [json.dumps(header("mtp", truth.k_max, "sim"))]
    for b in rng.choice(batches, size=steps).tolist():
        d = gov.select(StepContext(num_decoding=b, k_max=truth.k_max, drafter_class="mtp"))
        o = truth.outcome(rng, d, b)
        if rng.random() < stall_p:
            o = type(o)(o.drafted, o.accepted, o.step_duration_s * 5.0)
        gov.observe(d, o)
        lines.append(json.dumps(step_record(d, o, truth.k_max)))
    path.write_text("\n".join(lines) + "\n")
    return path

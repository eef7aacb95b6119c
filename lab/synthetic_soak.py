"""Soak: a long stream of steps and requests through the governor and the adapter's telemetry.

Closed-loop at a fixed concurrency: each request decodes until its output length is
reached (tokens per step = accepted + 1), then leaves and a new one arrives. Every step
runs what the governed scheduler runs: select, observe, per-request telemetry, eviction
of finished requests. Reports resident memory at the start, middle and end, the
per-step governor time (p50 / p99) at the start and end, and the sizes of every
bounded structure, so growth shows.
"""

from __future__ import annotations

import time

import numpy as np

from banditk.adapter.telemetry import Telemetry
from banditk.core.config import GovernorConfig
from banditk.core.types import StepContext, StepOutcome
from banditk.governor import BanditGovernor
from banditk.tools.synthetic import SyntheticTruth


def rss_bytes() -> int:
    """Current resident set size (Linux), 0 where unknown."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    except (OSError, ValueError, IndexError):
        return 0


def run_soak(
    steps: int = 1_000_000, requests: int = 100_000, concurrency: int = 8, seed: int = 0, progress: bool = False
) -> dict:
    truth = SyntheticTruth()
    rng = np.random.default_rng(seed)
    gov = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=truth.k_max, seed=seed))
    tele = Telemetry(k_max=truth.k_max)
    # Mean output so that `requests` requests pass through in `steps` steps.
    mean_tokens = max(2.0, steps * concurrency * 2.4 / requests)
    live: dict[str, int] = {}
    started = 0
    acc = np.asarray(truth.acceptance)
    window = min(20_000, steps // 4)
    # Written now, so its pages are resident from the start and do not read as growth.
    gov_ns = np.full(steps, -1, dtype=np.int64)
    marks = {}
    t_wall = time.perf_counter()
    for step in range(steps):
        while len(live) < concurrency:
            live[f"r{started}"] = int(rng.integers(int(mean_tokens * 0.5), int(mean_tokens * 1.5) + 1))
            started += 1
        ids = list(live)
        b = len(ids)
        t0 = time.perf_counter_ns()
        d = gov.select(StepContext(b, truth.k_max, "mtp"))
        t1 = time.perf_counter_ns()
        k = d.k
        if k:
            ok = rng.random((b, k)) < acc[:k]
            accepted = np.where(ok.all(axis=1), k, np.argmin(ok, axis=1))
        else:
            accepted = np.zeros(b, dtype=np.int64)
        drafted = np.full(b, k, dtype=np.int64)
        t_step = float(truth.mean_step_s(b)[k]) * (1.0 + 0.05 * rng.standard_normal())
        t2 = time.perf_counter_ns()
        gov.observe(d, StepOutcome(drafted, accepted.astype(np.int64), max(t_step, 1e-4)))
        gov_ns[step] = (t1 - t0) + (time.perf_counter_ns() - t2)
        finished = []
        for rid, a in zip(ids, accepted.tolist()):
            tele.observe_request(rid, k, a)
            live[rid] -= a + 1
            if live[rid] <= 0:
                finished.append(rid)
        for rid in finished:
            del live[rid]
        if finished:
            tele.evict(live)
        tele.observe_decision(k, 0.0, 0)
        tele.observe_step(t_step, None, None)
        if step in (window, steps // 2, steps - 1):
            marks[step] = {
                "step": step,
                "rss_mb": round(rss_bytes() / 2**20, 1),
                "requests_started": started,
                "tracked_requests": tele.num_tracked_requests,
                "pending_regression_rows": len(gov.posterior.pending),
            }
        if progress and step % 50_000 == 0 and step:
            el = time.perf_counter() - t_wall
            print(
                f"  soak {step:>9,}/{steps:,} steps, {started:,} requests, rss {rss_bytes() / 2**20:.0f} MB, "
                f"~{el / step * (steps - step):.0f} s left",
                flush=True,
            )

    def pct(a: np.ndarray) -> dict:
        return {
            "p50_us": round(float(np.percentile(a, 50)) / 1e3, 2),
            "p99_us": round(float(np.percentile(a, 99)) / 1e3, 2),
        }

    return {
        "steps": steps,
        "requests": started,
        "concurrency": concurrency,
        "memory": sorted(marks.values(), key=lambda m: m["step"]),
        "governor_time_start": pct(gov_ns[window : 2 * window]),
        "governor_time_end": pct(gov_ns[steps - window :]),
        "wall_s": round(time.perf_counter() - t_wall, 1),
        "telemetry_tracked_requests_end": tele.num_tracked_requests,
        "governor_switches": gov.switches,
    }

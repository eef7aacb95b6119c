"""Run one policy on one scenario and summarise it."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from banditk.sim.engine import Requests, Simulator, Trace
from banditk.sim.metrics import summarize
from banditk.sim.policies import build_policy
from banditk.sim.scenario import Scenario


@dataclass
class RunResult:
    """A run's summary (the JSON report) and, when kept, its per-step trace."""

    summary: dict
    trace: Trace | None = None
    requests: Requests | None = None


def progress_bar(label: str, stream=None):
    """A callback ``(done, total)`` that redraws a one-line progress bar on stderr."""
    out = stream or sys.stderr
    t0 = time.monotonic()

    def show(done: int, total: int) -> None:
        frac = done / max(total, 1)
        el = time.monotonic() - t0
        eta = el / frac - el if frac > 0 else 0.0
        bar = "#" * int(30 * frac)
        out.write(f"\r{label} [{bar:<30}] {done}/{total} {el:5.0f}s eta {eta:4.0f}s")
        if done >= total:
            out.write("\n")
        out.flush()

    return show


def run_policy(
    scn: Scenario,
    spec: str,
    *,
    seed: int | None = None,
    steps: int | None = None,
    warmup: int | None = None,
    prior_path: str | Path | None = None,
    governor_config: dict | None = None,
    keep_trace: bool = False,
    progress=None,
) -> RunResult:
    """Simulate ``spec`` on ``scn`` and return its summary.

    Args:
        scn: validated scenario.
        spec: policy spec (see :data:`banditk.sim.policies.SIM_POLICY_SPECS`).
        seed: overrides the scenario's seed; the policy gets the same seed.
        steps: overrides the scenario's step count.
        warmup: steps excluded from throughput/latency/switch metrics (default: scenario's).
        prior_path: prior file for ``bandit`` / ``bandit+prior``.
        governor_config: GovernorConfig fields for a bandit policy.
        keep_trace: also return the per-step trace and finished requests.
        progress: ``(done, total)`` callback.
    """
    seed = scn.seed if seed is None else seed
    steps = scn.steps if steps is None else steps
    warmup = scn.warmup_steps if warmup is None else warmup
    built = build_policy(spec, scn, seed=seed, prior_path=prior_path, governor_config=governor_config)
    sim = Simulator(
        scn,
        built.policy,
        seed=seed,
        speculation=built.speculation,
        dynamic=built.dynamic,
        graph_mode=built.graph_mode,
        graph_ladders=built.graph_ladders,
    )
    t0 = time.perf_counter()
    trace, done = sim.run(steps, progress=progress)
    wall = time.perf_counter() - t0
    s = summarize(trace, done, warmup=warmup, policy=spec, scenario=scn.name)
    wl = scn.workload
    s.update(
        {
            "seed": seed,
            "hardware": scn.hardware,
            "model": scn.model,
            "drafter_class": scn.drafter_class,
            "k_max": scn.k_max,
            "concurrency": wl.get("concurrency"),
            "arrival_rate": wl.get("arrival_rate"),
            "output_tokens": wl.get("output_tokens"),
            "prompt_tokens": wl.get("prompt_tokens"),
            # The server the policy ran in (banditk.sim.policies): "static FULL", "MRv2 FULL",
            # "V1 PIECEWISE", ...; its FULL decode ladders and the KV tokens they took.
            "server_mode": built.server_mode,
            "graph_mode": built.graph_mode,
            "graph_ladders": built.graph_ladders,
            "graph_kv_tokens": sim.graph_kv_tokens,
            "graph_kv_clipped": sim.graph_kv_clipped,
            "kv_capacity_tokens": int(sim.kv_cap),
            # Where a policy cut drafts: per population, drafts verified over drafts proposed.
            "verified_share_by_population": {
                name: (v / d if d else 1.0) for name, (d, v) in sim.verified_by_population.items()
            },
            "wall_s": wall,
        }
    )
    return RunResult(s, trace if keep_trace else None, done if keep_trace else None)

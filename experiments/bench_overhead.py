"""Per-step cost of the governor: select + observe, next to a plain list lookup.

A plain list lookup, ``dense_schedule[batch_size]``, is what vLLM's batch-size table
costs today; it is measured in the same run as the baseline. The governor's cost
includes building the StepContext and StepOutcome from numpy arrays, as the vLLM
adapter does each step. Writes results/bench_overhead.json.

    python experiments/bench_overhead.py [--steps N] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from banditk import __version__
from banditk.core.config import GovernorConfig
from banditk.core.types import Decision, StepContext, StepOutcome
from banditk.governor import BanditGovernor
from banditk.io.atomic import atomic_write_text
from banditk.io.provenance import provenance
from banditk.tools.synthetic import SyntheticTruth

BATCHES = (1, 8, 64, 256)


def percentiles(ns: np.ndarray) -> dict:
    us = ns / 1e3
    return {
        "p50_us": round(float(np.percentile(us, 50)), 3),
        "p99_us": round(float(np.percentile(us, 99)), 3),
        "mean_us": round(float(us.mean()), 3),
    }


def bench_batch(batch: int, steps: int, warmup: int) -> dict:
    truth = SyntheticTruth()
    rng = np.random.default_rng(batch)
    gov = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=truth.k_max, seed=batch))
    for _ in range(warmup):  # realistic, settled posteriors
        d = gov.select(StepContext(batch, truth.k_max, "mtp"))
        gov.observe(d, truth.outcome(rng, d, batch))
    # Pre-drawn raw telemetry per K so the timed loop measures the governor only.
    raw = {}
    for k in range(truth.k_max + 1):
        o = truth.outcome(rng, Decision(k, 0, batch, 0), batch)
        raw[k] = (o.drafted.copy(), o.accepted.copy(), o.step_duration_s)
    dense = [min(2, truth.k_max)] * 1025
    lookup_ns = np.empty(steps, dtype=np.int64)
    gov_ns = np.empty(steps, dtype=np.int64)
    select_ns = np.empty(steps, dtype=np.int64)
    clock = time.perf_counter_ns
    sink = 0
    for i in range(steps):
        t0 = clock()
        sink += dense[batch]
        t1 = clock()
        lookup_ns[i] = t1 - t0
    for i in range(steps):
        t0 = clock()
        d = gov.select(StepContext(batch, truth.k_max, "mtp"))
        t1 = clock()
        drafted, accepted, t = raw[d.k]
        gov.observe(d, StepOutcome(drafted, accepted, t))
        t2 = clock()
        select_ns[i] = t1 - t0
        gov_ns[i] = t2 - t0
    timer_ns = np.empty(steps, dtype=np.int64)
    for i in range(steps):
        t0 = clock()
        timer_ns[i] = clock() - t0
    return {
        "batch": batch,
        "select_plus_observe": percentiles(gov_ns),
        "select_only": percentiles(select_ns),
        "list_lookup_baseline": percentiles(lookup_ns),
        "timer_overhead": percentiles(timer_ns),
        "ratio_p50_vs_lookup": round(float(np.percentile(gov_ns, 50) / max(np.percentile(lookup_ns, 50), 1)), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20000, help="timed steps per batch size (default 20000)")
    parser.add_argument("--warmup", type=int, default=2000, help="learning steps before timing (default 2000)")
    parser.add_argument("--out", type=Path, default=Path("results/bench_overhead.json"))
    args = parser.parse_args()
    rows = []
    for batch in BATCHES:
        row = bench_batch(batch, args.steps, args.warmup)
        rows.append(row)
        s = row["select_plus_observe"]
        print(
            f"B={batch:>4}: select+observe p50 {s['p50_us']:7.2f} us  p99 {s['p99_us']:7.2f} us   "
            f"list lookup p50 {row['list_lookup_baseline']['p50_us']:.3f} us   (x{row['ratio_p50_vs_lookup']})",
            flush=True,
        )
    report = {
        "benchmark": "governor overhead per scheduler step",
        "banditk_version": __version__,
        "provenance": provenance(),
        "machine": {
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine(),
            "numpy": np.__version__,
        },
        "steps": args.steps,
        "warmup": args.warmup,
        "target": "select+observe p50 <= 20 us at B=256",
        "results": rows,
    }
    atomic_write_text(args.out, json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

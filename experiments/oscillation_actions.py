"""Which governor action made each oscillation: the simulator's within-state K changes, split.

    python experiments/oscillation_actions.py                  # every sweep point failing the check
    python experiments/oscillation_actions.py --point dflash-laguna-gb10:4 --point drift:2:bandit+prior
    python experiments/oscillation_actions.py --governor-config '{"revisit_spacing": 1000}' --out /tmp/x
    python experiments/oscillation_actions.py --quick          # three points, one seed

docs/evaluation.md counts an oscillation for each K change within one state (batch bucket,
decode-only or next to a prompt chunk), after warm-up. ``experiments/switch_causes.py`` splits
K changes by what changed in the batch; this splits the oscillations by what the governor did.
Each point is rerun as the protocol runs it (:mod:`banditk.sim.protocol`: 512-token prompts,
256 output tokens, 200 warm-up and 2,000 measured steps, seeds 0-2, ``bandit`` on the flat
prior and ``bandit+prior`` on the shipped one), the governor's decisions are recorded, and
each oscillation after warm-up gets one action:

- ``first look``: an exploration of a K whose cell held fewer than ``explore_steps``
  observations (the cold start, when it outlasts the warm-up);
- ``revisit``: an exploration of a K measured before, at most one per ``revisit_spacing``
  steps of the bucket (how the governor notices drift);

(an exploration's end, back to the bucket's K, counts with the exploration it ends)
- ``sure switch``: a switch the posterior draws were confident of (``switch_confidence``);
- ``chunk rule``: a decision of a step next to a prompt chunk, or a decode step after one
  where the governor expected a chunk the step did not run (the trace's state is the
  chunk that ran; the governor's is the one it expected).

Without ``--point`` the points are those where ``bandit`` or ``bandit+prior`` fails the
oscillation check in a committed ``results/sweep-*/report.json``. Each point also records the
sweep report's median, which the rerun must reproduce (same code, same seeds). Writes
``report.json``, ``report.md`` and ``actions.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))  # its sibling scripts, also when loaded from a file path


from banditk.core.config import GovernorConfig  # noqa: E402
from banditk.core.errors import ConfigError  # noqa: E402
from banditk.governor import bandit as bandit_module  # noqa: E402
from banditk.governor import switching  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402
from banditk.sim.policies import find_shipped_prior  # noqa: E402
from banditk.sim.protocol import ProtocolConfig, _point_scenario  # noqa: E402
from banditk.sim.run import run_policy  # noqa: E402
from banditk.sim.scenario import load_scenario  # noqa: E402
from banditk.switch_counts import _cause_masks  # noqa: E402

ACTIONS = ("first look", "revisit", "sure switch", "chunk rule")
POLICIES = ("bandit", "bandit+prior")
CHECK = "oscillations_per_1000_stationary"
QUICK_POINTS = ("dflash-laguna-gb10:4", "live-clock-cpu:5", "drift:2:bandit+prior")
OUTPUT_TOKENS = 256  # the protocol's points (banditk.sim.protocol.run_protocol)


def parse_point(text: str) -> tuple[str, int, str]:
    """``--point SCENARIO:C[:POLICY]`` -> (scenario name, C, policy)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[1].isdigit() or int(parts[1]) < 1:
        raise argparse.ArgumentTypeError(f"--point must be SCENARIO:C[:POLICY] with C >= 1, got {text!r}")
    policy = parts[2] if len(parts) == 3 else "bandit"
    if policy not in POLICIES:
        raise argparse.ArgumentTypeError(
            f"--point {text!r}: policy must be one of {', '.join(POLICIES)}, got {policy!r}"
        )
    if not (ROOT / "experiments" / "scenarios" / f"{parts[0]}.json").is_file():
        raise argparse.ArgumentTypeError(f"--point {text!r}: no experiments/scenarios/{parts[0]}.json")
    return parts[0], int(parts[1]), policy


def governor_config(text: str) -> dict:
    """``--governor-config``: a JSON object of GovernorConfig fields, checked now."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--governor-config={text!r} is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"--governor-config={text!r} must be a JSON object")
    try:
        GovernorConfig.from_dict({"drafter_class": "mtp", "k_max": 4, **value})
    except ConfigError as e:
        raise argparse.ArgumentTypeError(f"--governor-config: {e}") from None
    return value


def failing_points(results: Path) -> list[tuple[str, int, str, float]]:
    """(scenario, C, policy, the report's median) of every failing oscillation check of the
    governed policies in ``results/sweep-*/report.json``."""
    out = []
    for path in sorted(results.glob("sweep-*/report.json")):
        report = json.loads(path.read_text())
        name = path.parent.name.removeprefix("sweep-")  # the sweep of experiments/scenarios/<name>.json
        for c in report["checks"]:
            point = c.get("point", "")
            if c.get("check") == CHECK and c.get("status") == "fail" and c.get("policy") in POLICIES:
                if point.startswith("c") and point[1:].isdigit():
                    out.append((name, int(point[1:]), c["policy"], float(c["value"])))
    return out


@contextlib.contextmanager
def recording():
    """Record, per ``BanditGovernor.select`` call: the K, whether the step was next to a
    chunk, and the arguments and answer of :func:`switching.choose` if it was consulted."""
    records: list[tuple[int, bool, tuple | None]] = []
    last: list[tuple | None] = [None]
    choose, select = switching.choose, bandit_module.BanditGovernor.select

    def choose_recorded(scores, incumbent, cell_n, explore_steps, confidence, may_revisit=True, played=None, odds=0.0):
        k, hold = choose(scores, incumbent, cell_n, explore_steps, confidence, may_revisit, played, odds)
        known = cell_n if played is None else np.maximum(cell_n, played)  # as choose tells a first look
        last[0] = (int(incumbent), int(k), float(hold), float(known[k]), float(explore_steps))
        return k, hold

    def select_recorded(self, context):
        last[0] = None
        decision = select(self, context)
        records.append((decision.k, decision.bucket >= 0 and self.last_chunk, last[0]))
        return decision

    switching.choose, bandit_module.BanditGovernor.select = choose_recorded, select_recorded
    try:
        yield records
    finally:
        switching.choose, bandit_module.BanditGovernor.select = choose, select


def action(record: tuple[int, bool, tuple | None]) -> str:
    """The governor action that set a step's K: one of ``ACTIONS``, "return" (an exploration
    ended) or "held" (an epoch kept K)."""
    _, chunk, chose = record
    if chunk:
        return "chunk rule"
    if chose is None:
        return "held"
    incumbent, k, hold, n_k, explore_steps = chose
    if hold > 0:
        return "first look" if n_k < explore_steps else "revisit"
    return "sure switch" if k != incumbent else "return"


def flip_actions(records: list, steps: list[int], flips: set[int]) -> dict[int, str]:
    """The action of each flip (a trace step in ``flips``), a return counted as the
    exploration it ends: the last one started, warm-up included."""
    out, exploring, before = {}, "first look", (-1, False, None)
    for rec, step in zip(records, steps):
        a = action(rec)
        if a in ("first look", "revisit"):
            exploring = a
        if step in flips:
            if a == "held" and not before[1]:  # a held epoch keeps the K of the decode step before
                raise AssertionError(f"a K change within one state at step {step}, whose epoch held K")
            out[step] = "chunk rule" if a == "held" else exploring if a == "return" else a
        before = rec
    return out


def run_seed(job: tuple) -> dict:
    """One seed of one point: the oscillations after warm-up, each with its action."""
    name, c, policy, seed, cfg, overrides = job
    base = load_scenario(ROOT / "experiments" / "scenarios" / f"{name}.json")
    scn = _point_scenario(base, c, OUTPUT_TOKENS)
    prior = find_shipped_prior(base) if policy == "bandit+prior" else None
    if policy == "bandit+prior" and prior is None:
        raise SystemExit(f"oscillation_actions: {name} has no shipped prior, so no bandit+prior point")
    with recording() as records:
        res = run_policy(
            scn,
            policy,
            seed=seed,
            steps=cfg["warmup"] + cfg["measured"],
            warmup=cfg["warmup"],
            prior_path=prior,
            governor_config=overrides or None,
            keep_trace=True,
        )
    tr, w = res.trace, cfg["warmup"]
    # The simulator asks the governor once per step that decodes; K = -1 marks the others.
    decided = np.flatnonzero(tr.k >= 0)
    if len(records) != decided.size or any(r[0] != tr.k[i] for r, i in zip(records, decided)):
        raise AssertionError(f"{name} C={c} seed {seed}: the recorded decisions do not line up with the trace")
    _, masks = _cause_masks(tr.k[w:], tr.bucket[w:], tr.prefill[w:] > 0)
    kept = np.flatnonzero(tr.k[w:] >= 0)  # _cause_masks drops undecided steps first
    flips = kept[1:][masks["decode_flip"] | masks["chunk_flip"]] + w
    by_step = flip_actions(records, decided.tolist(), set(flips.tolist()))
    actions = Counter(by_step.values())
    return {
        "seed": seed,
        "oscillations_per_1000": res.summary["oscillations_per_1000"],
        "k_switches_per_1000": res.summary["k_switches_per_1000"],
        "decided_steps": int(kept.size),
        "actions": {a: actions.get(a, 0) for a in ACTIONS},
        "at_steps": {a: [int(j) for j in flips if by_step[j] == a] for a in ACTIONS},
    }


def summarize_point(name: str, c: int, policy: str, sweep_median: float | None, seeds: list[dict]) -> dict:
    steps = sum(s["decided_steps"] for s in seeds)
    total = Counter()
    for s in seeds:
        total.update(s["actions"])
    osc = statistics.median(s["oscillations_per_1000"] for s in seeds)
    return {
        "scenario": name,
        "concurrency": c,
        "policy": policy,
        "oscillations_per_1000_median": osc,
        "sweep_report_median": sweep_median,
        "reproduces_sweep": None if sweep_median is None else abs(osc - sweep_median) < 1e-6,
        "per_1000_by_action": {a: 1000.0 * total[a] / steps for a in ACTIONS},
        "count_by_action": {a: total[a] for a in ACTIONS},
        "seeds": seeds,
    }


def markdown(report: dict) -> str:
    lines = [
        "# Oscillations by governor action",
        "",
        f"Made by `experiments/oscillation_actions.py` at commit `{report['provenance']['commit'][:7]}`"
        + (f", governor config {json.dumps(report['governor_config'])}" if report["governor_config"] else "")
        + f"; seeds {report['seeds']}, {report['warmup']} warm-up + {report['measured']} measured steps.",
        "Per 1,000 decided steps after warm-up, pooled over seeds; the protocol allows 2.",
        "",
        "| point | policy | median (sweep) | " + " | ".join(ACTIONS) + " |",
        "|---|---|---:|" + "---:|" * len(ACTIONS),
    ]
    for p in report["points"]:
        sweep = "" if p["sweep_report_median"] is None else f" ({p['sweep_report_median']:.1f})"
        per = " | ".join(f"{p['per_1000_by_action'][a]:.2f}" for a in ACTIONS)
        lines.append(
            f"| {p['scenario']} C={p['concurrency']} | {p['policy']} | "
            f"{p['oscillations_per_1000_median']:.1f}{sweep} | {per} |"
        )
    tot = report["total_by_action"]
    lines += [
        "",
        "All points: " + ", ".join(f"{a} {tot[a]} ({100 * report['share_by_action'][a]:.0f}%)" for a in ACTIONS),
        "",
    ]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = report["points"]
    labels = [
        f"{p['scenario']} C={p['concurrency']}" + (" +prior" if p["policy"] == "bandit+prior" else "") for p in pts
    ]
    fig, ax = plt.subplots(figsize=(8, 0.22 * len(pts) + 1.5))
    left = np.zeros(len(pts))
    for a in ACTIONS:
        v = np.array([p["per_1000_by_action"][a] for p in pts])
        ax.barh(labels, v, left=left, label=a)
        left += v
    ax.axvline(2.0, color="k", ls="--", lw=1, label="protocol limit")
    ax.invert_yaxis()
    ax.set_xlabel("oscillations per 1,000 steps after warm-up (pooled over seeds)")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--point",
        type=parse_point,
        action="append",
        default=None,
        metavar="SCENARIO:C[:POLICY]",
        help="a point to split (repeatable); default: every failing oscillation check of results/sweep-*",
    )
    p.add_argument(
        "--governor-config",
        type=governor_config,
        default={},
        metavar="JSON",
        help="GovernorConfig fields to try instead of the defaults (a lever, measured)",
    )
    p.add_argument("--quick", action="store_true", help=f"points {', '.join(QUICK_POINTS)}, seed 0 only")
    p.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "oscillation-actions", help="report folder")
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error(f"--workers must be at least 1, got {args.workers}")
    proto = ProtocolConfig()
    seeds = [0] if args.quick else list(proto.seeds)
    if args.quick:
        points = [(*parse_point(t), None) for t in QUICK_POINTS]
    elif args.point:
        sweep = {(n, c, pol): v for n, c, pol, v in failing_points(ROOT / "results")}
        points = [(n, c, pol, sweep.get((n, c, pol))) for n, c, pol in args.point]
    else:
        points = failing_points(ROOT / "results")
        if not points:
            print("oscillation_actions: no sweep report fails the oscillation check; nothing to split")
            return 0
    cfg = {"warmup": proto.warmup, "measured": proto.measured}
    jobs = [(n, c, pol, s, cfg, args.governor_config) for n, c, pol, _ in points for s in seeds]
    t0, results = time.time(), []
    # Forked, as the protocol's pool is.
    ctx = mp.get_context("fork") if sys.platform.startswith("linux") else None
    with ProcessPoolExecutor(args.workers, mp_context=ctx) as pool:
        for i, r in enumerate(pool.map(run_seed, jobs), 1):
            results.append(r)
            eta = (time.time() - t0) / i * (len(jobs) - i)
            print(
                f"\r[{i}/{len(jobs)}] {jobs[i - 1][0]} C={jobs[i - 1][1]} {jobs[i - 1][2]} seed {jobs[i - 1][3]}"
                f"  ~{eta / 60:.1f} min left   ",
                end="",
                file=sys.stderr,
                flush=True,
            )
    print(file=sys.stderr)
    per_point = [results[i * len(seeds) : (i + 1) * len(seeds)] for i in range(len(points))]
    pts = [summarize_point(n, c, pol, v, r) for (n, c, pol, v), r in zip(points, per_point)]
    total = Counter()
    for pt in pts:
        total.update(pt["count_by_action"])
    n_all = max(sum(total.values()), 1)
    report = {
        "provenance": provenance(),
        "governor_config": args.governor_config,
        "seeds": seeds,
        "warmup": cfg["warmup"],
        "measured": cfg["measured"],
        "quick": args.quick,
        "points": pts,
        "total_by_action": {a: total[a] for a in ACTIONS},
        "share_by_action": {a: total[a] / n_all for a in ACTIONS},
        "wall_s": time.time() - t0,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    atomic_write_text(args.out / "report.md", markdown(report))
    plot(report, args.out / "actions.png")
    print(markdown(report))
    mismatched = [f"{p['scenario']} C={p['concurrency']} {p['policy']}" for p in pts if p["reproduces_sweep"] is False]
    if mismatched:
        print(
            "oscillation_actions: these points do not reproduce their sweep report's median (the report is "
            "stale or the run differs): " + ", ".join(mismatched),
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Data parallelism in lockstep: one K for every rank, against the best fixed K (issue 50).

Ranks with unequal loads run in lockstep (lab/lockstep_sim.py): every rank drafts the
step's K, and a step lasts as long as its slowest rank. Two MoE deployments where vLLM runs
data-parallel attention with expert parallelism:

- ``glm5.2``: GLM-5.2 with its MTP layer on 8xH200 (the seed's row, acceptance 0.88/0.78/0.68);
- ``qwen3.6``: Qwen3.6-35B-A3B MTP on H200 (``experiments/scenarios/mtp-qwen3.6-h200.json``),
  whose best fixed K moves from 3 to 4 with the load.

Each rank is modelled as one server of the scenario with its own requests and seed; the
expert-parallel exchange between ranks is not priced (it costs every policy alike).

Policies, the same on every rank: nospec, fixed:1..K_max, ``bandit`` (each rank's governor votes,
the step plays the largest vote: the adapter's rule) and ``bandit per-rank`` (each rank plays its
own vote, still in lockstep: informational, vLLM cannot run it). Check: ``bandit`` >= 0.97x the
best fixed K at every point (issue 50's target).

    python experiments/dp_sweep.py [--quick] [--out results/data-parallel] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pooled import run_pooled  # noqa: E402

from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402
from banditk.sim.scenario import load_scenario  # noqa: E402
from lab.lockstep_sim import run_lockstep  # noqa: E402

SCENARIOS = {
    "glm5.2": ROOT / "experiments" / "scenarios" / "data-parallel" / "mtp-glm5.2-8xh200.json",
    "qwen3.6": ROOT / "experiments" / "scenarios" / "mtp-qwen3.6-h200.json",
}
#: Per point, one closed-loop concurrency per rank: even and uneven loads, two and four ranks.
LOADS = ((8, 8), (4, 64), (16, 128), (64, 256), (128, 128), (4, 16, 64, 256))
TARGET = 0.97


def _job(a):
    name, loads, spec, rule, seed, steps, warm = a
    res = run_lockstep(load_scenario(SCENARIOS[name]), list(loads), spec, rule, seed=seed, steps=steps, warmup=warm)
    return {**res, "scenario": name}


def _label(spec: str, rule: str) -> str:
    return spec if rule == "max" else f"{spec} {rule}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="experiments/dp_sweep.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="1 seed, short runs, two points")
    ap.add_argument("--out", default="results/data-parallel", help="output folder (default results/data-parallel)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    a = ap.parse_args(argv)
    seeds = (0,) if a.quick else (0, 1, 2)
    loads = LOADS[:2] if a.quick else LOADS
    steps, warm = (800, 200) if a.quick else (3000, 500)
    t0 = time.time()
    jobs, pols = [], {}
    for name, path in SCENARIOS.items():
        k_max = load_scenario(path).k_max
        pols[name] = [("nospec", "max"), *((f"fixed:{k}", "max") for k in range(1, k_max + 1))]
        pols[name] += [("bandit", "max"), ("bandit", "per-rank")]
        jobs += [(name, ld, p, r, s, steps, warm) for ld in loads for p, r in pols[name] for s in seeds]
    runs: dict = {}
    for r in run_pooled(_job, jobs, a.workers, "dp-sweep"):
        runs.setdefault((r["scenario"], tuple(r["loads"]), _label(r["policy"], r["rule"])), {})[r["seed"]] = r
    results, checks = {}, []
    for name in SCENARIOS:
        fixed = [_label(p, r) for p, r in pols[name] if p != "bandit"]
        labels = [_label(p, r) for p, r in pols[name]]
        for ld in loads:
            key = f"{name}/{'-'.join(map(str, ld))}"
            by = {lab: runs[(name, tuple(ld), lab)] for lab in labels}
            tput = {lab: float(np.median([r["tok_s"] for r in by[lab].values()])) for lab in labels}
            best = max(fixed, key=tput.get)
            # Paired by seed: each seed's ratio to that seed's best fixed K, and their spread.
            per_seed = {
                lab: [by[lab][s]["tok_s"] / max(by[f][s]["tok_s"] for f in fixed) for s in seeds] for lab in labels
            }
            results[key] = {
                "scenario": name,
                "loads": list(ld),
                "throughput_tok_s": tput,
                "best_fixed": best,
                "vs_best_fixed": {lab: tput[lab] / tput[best] for lab in labels},
                "vs_best_fixed_by_seed": per_seed,
                "k_changes_per_1000": {
                    lab: float(np.median([r["k_changes_per_1000"] for r in by[lab].values()])) for lab in labels
                },
                "k_hist_seed0": {lab: by[lab][seeds[0]]["k_hist"] for lab in ("bandit", "bandit per-rank")},
                "split_steps_per_rank_rule": float(
                    np.median([r["split_steps"] for r in by["bandit per-rank"].values()])
                ),
            }
            ratio = tput["bandit"] / tput[best]
            checks.append(
                {
                    "check": f"{key}: bandit (one K, largest vote) >= {TARGET:.2f}x best fixed ({best})",
                    "value": round(ratio, 4),
                    "seeds": [round(x, 4) for x in per_seed["bandit"]],
                    "status": "pass" if ratio >= TARGET else "fail",
                }
            )
    report = {
        "scenarios": {k: str(v.relative_to(ROOT)) for k, v in SCENARIOS.items()},
        "provenance": provenance(),
        "quick": a.quick,
        "seeds": list(seeds),
        "steps": steps,
        "warmup": warm,
        "loads": [list(ld) for ld in loads],
        "results": results,
        "checks": checks,
        "check_counts": {s: sum(c["status"] == s for c in checks) for s in ("pass", "fail")},
        "wall_s": time.time() - t0,
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "report.json", json.dumps(report, indent=1) + "\n")
    atomic_write_text(out / "README.md", readme(report))
    print(readme(report))
    return 0


def readme(report: dict) -> str:
    """The report as a table: each point's throughput over its best fixed K, per policy."""
    lines = [
        "# Data parallelism in lockstep (experiments/dp_sweep.py)",
        "",
        f"Commit `{report['provenance']['commit'][:7]}`, {len(report['seeds'])} seed(s), {report['steps']} steps "
        f"({report['warmup']} warm-up). Loads: one closed-loop concurrency per rank. Checks: "
        f"{report['check_counts']['pass']} pass, {report['check_counts']['fail']} fail.",
        "",
        "| scenario | loads | best fixed (tok/s) | bandit / best | per seed | bandit per-rank / best | "
        "K changes / 1k (bandit) |",
        "|---|---|---|---:|---|---:|---:|",
    ]
    for r in report["results"].values():
        b = r["best_fixed"]
        lines.append(
            f"| {r['scenario']} | {'/'.join(map(str, r['loads']))} | {b} ({r['throughput_tok_s'][b]:.0f}) | "
            f"{r['vs_best_fixed']['bandit']:.3f}x | "
            f"{', '.join(f'{x:.3f}' for x in r['vs_best_fixed_by_seed']['bandit'])} | "
            f"{r['vs_best_fixed']['bandit per-rank']:.3f}x | {r['k_changes_per_1000']['bandit']:.1f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

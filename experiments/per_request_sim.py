"""Per-request verification on the simulator: where does it pay, and against what?

Requests drawn from two populations (``experiments/scenarios/per-request/``): some accept like
code or a quoted passage, the others like open chat. At each concurrency point every policy
serves the same mix:

- nospec and fixed:1..K_max (vLLM's static K, FULL graphs);
- ``bandit``: banditk's batch-wide K;
- ``bandit-per-request``: the bandit's K, and each step a verification budget spent on the drafts
  most likely to be accepted (docs/per-request.md);
- ``peer:vllm-adaptive-verification``: vLLM's adaptive verification on Model Runner V2 as the
  simulator models it (K_max drafted, the budget from the drafter's confidence and a cost profile;
  :mod:`banditk.sim.adaptive_verification` states what is assumed).

The homogeneous shipped scenarios (``experiments/scenarios/*.json`` at a fixed concurrency) run
``bandit`` and ``bandit-per-request`` only: there the cuts have little to find and must not cost.

Checks (issue 16, EVALUATION.md's protocol: medians over seeds):

- on the half-and-half mix (acceptance 0.9 and 0.3 at every position), ``bandit-per-request``
  >= 1.05x ``bandit`` at C >= 16;
- on every mix and every homogeneous scenario, at every point, >= 0.99x ``bandit``.

The other ratios are reported, not judged: against the best fixed K and against the peer.

    python experiments/per_request_sim.py [--quick] [--out results/per-request-sim] [--workers 2]
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
from banditk.sim.run import run_policy  # noqa: E402
from banditk.sim.scenario import load_scenario  # noqa: E402

SCENARIO_DIR = ROOT / "experiments" / "scenarios" / "per-request"
SHIPPED_DIR = ROOT / "experiments" / "scenarios"
POINTS = (1, 4, 16, 64, 256)
HOMOGENEOUS_POINTS = (1, 16, 64)
LEARNERS = ("bandit", "bandit-per-request", "peer:vllm-adaptive-verification")
#: The half-and-half mix of issue 16, where bandit-per-request must gain GAIN from GAIN_FROM_C on.
HALF_AND_HALF = "half-0.9-0.3-qwen3.6-h200"
GAIN, GAIN_FROM_C = 1.05, 16
#: bandit-per-request over bandit: at least this at every point of every scenario.
NO_LOSS = 0.99


def scenarios() -> dict[str, Path]:
    """The mixture scenarios, by name."""
    return {p.stem: p for p in sorted(SCENARIO_DIR.glob("*.json"))}


def homogeneous_scenarios() -> dict[str, Path]:
    """The shipped one-population scenarios at a fixed concurrency (no phases, no arrival rate)."""
    out = {}
    for p in sorted(SHIPPED_DIR.glob("*.json")):
        raw = json.loads(p.read_text())
        if "concurrency" in raw.get("workload", {}) and not raw.get("phases"):
            out[p.stem] = p
    return out


def point_checks(scenario: str, c: int, ratio: float) -> list[dict]:
    """The pass/fail lines of one (scenario, concurrency) point, from per-request over bandit."""
    bars = [(NO_LOSS, f">= {NO_LOSS:.2f}x")]
    if scenario == HALF_AND_HALF and c >= GAIN_FROM_C:
        bars.append((GAIN, f">= {GAIN:.2f}x"))
    return [
        {
            "check": f"{scenario} c={c}: bandit-per-request {label} bandit",
            "value": round(ratio, 4),
            "status": "pass" if ratio >= bar else "fail",
        }
        for bar, label in bars
    ]


def _job(a):
    name, path, c, spec, seed, steps, warm = a
    scn = load_scenario(path).with_workload(concurrency=c)
    s = run_policy(scn, spec, seed=seed, steps=steps, warmup=warm).summary
    keep = (
        "throughput_tok_s",
        "tpot_p50_s",
        "mean_k",
        "verified_share",
        "verified_share_by_population",
        "oscillations_per_1000",
        "server_mode",
    )
    return name, c, spec, seed, {k: s[k] for k in keep}


def _median(runs: list[dict], key: str) -> float:
    return float(np.median([r[key] for r in runs]))


def summarize_point(runs: dict[str, list[dict]], fixed: list[str]) -> dict:
    """One (scenario, concurrency) point: medians over seeds, and the ratios the report reads."""
    tput = {p: _median(r, "throughput_tok_s") for p, r in runs.items()}
    best = max(fixed, key=tput.get)
    pops = sorted({n for r in runs["bandit-per-request"] for n in r["verified_share_by_population"]})
    return {
        "throughput_tok_s": tput,
        "min_max_tok_s": {p: [min(x["throughput_tok_s"] for x in r), max(x["throughput_tok_s"] for x in r)]
                          for p, r in runs.items()},
        "best_fixed": best,
        "vs_best_fixed": {p: tput[p] / tput[best] for p in LEARNERS},
        "per_request_vs_bandit": tput["bandit-per-request"] / tput["bandit"],
        "per_request_vs_peer": tput["bandit-per-request"] / tput["peer:vllm-adaptive-verification"],
        "verified_share": {p: _median(runs[p], "verified_share") for p in LEARNERS},
        "verified_share_by_population": {
            p: {n: float(np.median([r["verified_share_by_population"].get(n, 1.0) for r in runs[p]])) for n in pops}
            for p in LEARNERS[1:]
        },
        "mean_k": {p: _median(runs[p], "mean_k") for p in LEARNERS},
        "tpot_p50_ms": {p: 1e3 * _median(runs[p], "tpot_p50_s") for p in runs},
        "oscillations_per_1000": {p: _median(runs[p], "oscillations_per_1000") for p in LEARNERS},
        "server_mode": {p: runs[p][0]["server_mode"] for p in runs},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="experiments/per_request_sim.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--quick", action="store_true", help="1 seed, 1,500-step runs, two points; two homogeneous scenarios at C=16"
    )
    ap.add_argument("--out", default="results/per-request-sim", help="output folder (default results/per-request-sim)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    a = ap.parse_args(argv)
    if a.workers < 1:
        ap.error(f"--workers must be >= 1, got {a.workers}")
    seeds = (0,) if a.quick else (0, 1, 2)
    points = (4, 64) if a.quick else POINTS
    steps, warm = (1500, 200) if a.quick else (6000, 500)
    scns = scenarios()
    homog = homogeneous_scenarios()
    if a.quick:
        homog = dict(list(homog.items())[:2])
    homog_points = (16,) if a.quick else HOMOGENEOUS_POINTS
    pols: dict[str, list[str]] = {}
    for name, path in scns.items():
        k_max = load_scenario(path).k_max
        pols[name] = ["nospec", *(f"fixed:{k}" for k in range(1, k_max + 1)), *LEARNERS]
    jobs = [
        (name, str(path), c, p, s, steps, warm)
        for name, path in scns.items()
        for c in points
        for p in pols[name]
        for s in seeds
    ]
    jobs += [
        (f"homogeneous/{name}", str(path), c, p, s, steps, warm)
        for name, path in homog.items()
        for c in homog_points
        for p in LEARNERS[:2]
        for s in seeds
    ]
    t0 = time.time()
    runs: dict = {}
    for name, c, spec, _seed, summ in run_pooled(_job, jobs, a.workers, "per-request-sim"):
        runs.setdefault((name, c), {}).setdefault(spec, []).append(summ)
    results, homogeneous, checks = {}, {}, []
    for name in scns:
        fixed = [p for p in pols[name] if p not in LEARNERS]
        for c in points:
            r = summarize_point(runs[(name, c)], fixed)
            results[f"{name}/c{c}"] = r
            checks += point_checks(name, c, r["per_request_vs_bandit"])
    for name in homog:
        for c in homog_points:
            rs = runs[(f"homogeneous/{name}", c)]
            tput = {p: _median(rs[p], "throughput_tok_s") for p in LEARNERS[:2]}
            ratio = tput["bandit-per-request"] / tput["bandit"]
            homogeneous[f"{name}/c{c}"] = {
                "throughput_tok_s": tput,
                "per_request_vs_bandit": ratio,
                "verified_share": _median(rs["bandit-per-request"], "verified_share"),
            }
            checks += point_checks(name, c, ratio)
    report = {
        "scenarios": {k: str(v.relative_to(ROOT)) for k, v in scns.items()},
        "homogeneous_scenarios": {k: str(v.relative_to(ROOT)) for k, v in homog.items()},
        "homogeneous_points": list(homog_points),
        "provenance": provenance(),
        "quick": a.quick,
        "seeds": list(seeds),
        "steps": steps,
        "warmup": warm,
        "points": list(points),
        "policies": pols,
        "results": results,
        "homogeneous": homogeneous,
        "checks": checks,
        "wall_s": time.time() - t0,
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "report.json", json.dumps(report, indent=1) + "\n")
    plot(report, out)
    atomic_write_text(out / "README.md", readme(report))
    print(readme(report))
    return 0


def plot(report: dict, out: Path) -> None:
    """Per scenario: each learner's throughput over the best fixed K, and the share it verified."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(report["scenarios"])
    fig, axes = plt.subplots(2, len(names), figsize=(4.2 * len(names), 6.4), squeeze=False, sharex=True)
    cs = report["points"]
    for j, name in enumerate(names):
        rows = [report["results"][f"{name}/c{c}"] for c in cs]
        top, bottom = axes[0][j], axes[1][j]
        for p, color in zip(LEARNERS, ("C0", "C3", "C2"), strict=True):
            top.plot(cs, [r["vs_best_fixed"][p] for r in rows], marker="o", color=color, label=p)
            bottom.plot(cs, [r["verified_share"][p] for r in rows], marker="o", color=color, label=p)
        top.axhline(1.0, c="k", lw=0.8, ls=":")
        top.set_title(name, fontsize=9)
        top.set(xscale="log", ylabel="throughput / best fixed K" if j == 0 else None)
        bottom.set(xscale="log", xlabel="concurrency", ylabel="drafts verified / drafted" if j == 0 else None)
        bottom.set_ylim(0, 1.05)
        for ax in (top, bottom):
            ax.set_xticks(cs, [str(c) for c in cs])
            ax.minorticks_off()
            ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Per-request verification on mixed requests (simulated)", fontsize=10)
    fig.tight_layout()
    tmp = out / ".per_request_sim.tmp.png"
    fig.savefig(tmp, dpi=110)
    tmp.replace(out / "per_request_sim.png")
    plt.close(fig)


def readme(report: dict) -> str:
    short = {"bandit-per-request": "per-request", "peer:vllm-adaptive-verification": "adaptive-verif."}
    lines = [
        "# Per-request verification on mixed requests (simulated)",
        "",
        "Made by `experiments/per_request_sim.py` (`python experiments/regenerate.py --only per-request-sim`); "
        f"commit `{report['provenance']['commit'][:7]}`, {len(report['seeds'])} seed(s), {report['steps']} steps "
        f"({report['warmup']} warm-up). Output tok/s, median over seeds; `/best` is over the best of nospec and "
        "fixed:1..K_max; `verified` is drafts verified over drafts proposed.",
        "",
        "| scenario | C | best fixed | bandit | per-request | adaptive-verif. | bandit /best | per-request /best "
        "| adaptive-verif. /best | per-request / bandit | verified (per-request, adaptive-verif.) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for key, r in report["results"].items():
        name, c = key.split("/")
        t, v, b = r["throughput_tok_s"], r["vs_best_fixed"], r["best_fixed"]
        lines.append(
            f"| {name} | {c[1:]} | {b} {t[b]:.0f} | {t['bandit']:.0f} | {t['bandit-per-request']:.0f} | "
            f"{t['peer:vllm-adaptive-verification']:.0f} | {v['bandit']:.3f} | {v['bandit-per-request']:.3f} | "
            f"{v['peer:vllm-adaptive-verification']:.3f} | {r['per_request_vs_bandit']:.3f} | "
            f"{r['verified_share']['bandit-per-request']:.2f}, "
            f"{r['verified_share']['peer:vllm-adaptive-verification']:.2f} |"
        )
    lines += ["", "Share of each population's drafts verified (per-request; adaptive verification):", ""]
    for key, r in report["results"].items():
        by = r["verified_share_by_population"]
        parts = [
            f"{short[p]}: " + ", ".join(f"{n} {s:.2f}" for n, s in by[p].items())
            for p in ("bandit-per-request", "peer:vllm-adaptive-verification")
        ]
        lines.append(f"- {key}: " + "; ".join(parts))
    lines += [
        "",
        "Homogeneous shipped scenarios (one population each), output tok/s:",
        "",
        "| scenario | C | bandit | per-request | per-request / bandit | verified (per-request) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for key, r in report["homogeneous"].items():
        name, c = key.split("/")
        t = r["throughput_tok_s"]
        lines.append(
            f"| {name} | {c[1:]} | {t['bandit']:.0f} | {t['bandit-per-request']:.0f} | "
            f"{r['per_request_vs_bandit']:.3f} | {r['verified_share']:.2f} |"
        )
    passed = sum(c["status"] == "pass" for c in report["checks"])
    lines += ["", f"{passed} of {len(report['checks'])} checks pass.", ""]
    lines += ["| check | value | status |", "|---|---|---|"]
    lines += [f"| {c['check']} | {c['value']} | {c['status'].upper()} |" for c in report["checks"]]
    lines += ["", "![per-request verification](per_request_sim.png)", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

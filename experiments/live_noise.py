"""How much of a live check's verdict is the machine's noise: the repeated live points, re-read.

The live checks compare medians of a few runs on a 2-core CPU whose speed drifts within a
sweep, and "best fixed K" is the largest of several such medians, which noise biases upward.
For every point of a live report made with --repeats, this fits log throughput as policy +
round + noise (each round runs every policy once, so a round's speed is shared) and reports:

- the protocol's ratio (median of the bandit's runs over the best fixed K's median) and
  its verdict against ``--threshold``;
- the same contrast with the rounds' speeds taken out, exp(bandit - best), and its 90%
  interval from the residual noise;
- how often a governor exactly as fast as the best fixed K would fail the protocol's check at
  this noise (``--draws`` Monte Carlo draws of the fitted model, the same rounds and policies):
  the check's false-fail rate here, and how many rounds would bring it to 5%.

Every live report's bandit points also get their oscillation count's exact 95% Poisson
interval: a point holds a few hundred decided steps, and one look at a K is two oscillations.

    python experiments/live_noise.py                       # the committed repeated live reports
    python experiments/live_noise.py --reports results/live-context-short --out /tmp/noise

Writes <out>/report.json, <out>/report.md and <out>/ratios.png. Reads only the reports.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's banditk, not the one an editable install points at

from banditk.evaluation import THRESHOLDS  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402

#: Live reports: the repeated ones' throughput checks and every one's oscillation counts are read.
DEFAULT_REPORTS = (
    "results/live",
    "results/live-context-short",
    "results/live-context-short-r7",
    "results/live-context-long",
    "results/live-per-request",
)
#: The protocol's real-vLLM margin against the best fixed K and limit on oscillations.
THRESHOLD = THRESHOLDS["real"]["throughput_vs_best_fixed"]
OSCILLATION_LIMIT = THRESHOLDS["real"]["oscillations_per_1000_stationary"]
#: A check that fails a perfect governor this often or less is one a verdict can rest on.
TOLERATED_FAILS = 0.05
MAX_ROUNDS = 21


def fit_two_way(y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, int]:
    """Policy effects, round effects, residual SD and its degrees of freedom of log throughput
    ``y`` (policies x rounds), additive: y = mean + policy + round + noise.

    >>> y = np.log([[100.0, 110.0], [90.0, 99.0]])
    >>> a, b, s, df = fit_two_way(y)
    >>> round(float(np.exp(a[0] - a[1])), 4), round(s, 6), df
    (1.1111, 0.0, 1)
    """
    mean = float(y.mean())
    a = y.mean(axis=1) - mean
    b = y.mean(axis=0) - mean
    resid = y - mean - a[:, None] - b[None, :]
    df = (y.shape[0] - 1) * (y.shape[1] - 1)
    return a, b, float(np.sqrt(np.sum(resid**2) / df)) if df else float("nan"), df


def protocol_ratio(thr: np.ndarray, bandit: int, fixed: list[int]) -> tuple[float, int]:
    """The protocol's ratio, median of the bandit's runs over the largest fixed-K median, and
    which fixed policy that is (rows of ``thr``: policies, columns: runs)."""
    med = np.median(thr, axis=1)
    best = max(fixed, key=lambda i: med[i])
    return float(med[bandit] / med[best]), best


def false_fail_rate(
    a: np.ndarray, b: np.ndarray, sd: float, bandit: int, fixed: list[int], threshold: float, draws: int, seed: int
) -> float:
    """Share of draws in which a bandit exactly as fast as the best fixed K (by the fitted
    effects) fails the protocol's check: same policies and rounds, normal noise of ``sd``."""
    rng = np.random.default_rng(seed)
    truth = a.copy()
    truth[bandit] = max(a[i] for i in fixed)
    y = (truth[:, None] + b[None, :])[None] + sd * rng.standard_normal((draws, a.size, b.size))
    med = np.median(np.exp(y), axis=2)
    ratio = med[:, bandit] / med[:, fixed].max(axis=1)
    return float(np.mean(ratio < threshold))


def repeats_needed(
    a: np.ndarray, b: np.ndarray, sd: float, bandit: int, fixed: list[int], threshold: float, draws: int, seed: int
) -> int | None:
    """The fewest rounds (odd, up to :data:`MAX_ROUNDS`) at which a governor as fast as the best
    fixed K fails the check in at most :data:`TOLERATED_FAILS` of draws; None if none is enough."""
    # A round's speed moves every policy of the round alike, which the check's medians cancel
    # only in part: the longer runs repeat the fitted rounds, so they keep today's drift.
    for rounds in range(3, MAX_ROUNDS + 1, 2):
        b_rounds = np.resize(b, rounds)
        if false_fail_rate(a, b_rounds, sd, bandit, fixed, threshold, draws, seed + rounds) <= TOLERATED_FAILS:
            return rounds
    return None


def analyse_point(point_runs: dict[str, list[float]], threshold: float, draws: int, seed: int) -> dict | None:
    """One concurrency point: ``point_runs`` maps each policy to its runs' throughputs, in round order."""
    policies = sorted(point_runs)
    fixed = [i for i, p in enumerate(policies) if p.startswith("fixed:")]
    if "bandit" not in policies or not fixed:
        return None
    rounds = min(len(v) for v in point_runs.values())
    if rounds < 2:
        return None
    thr = np.array([point_runs[p][:rounds] for p in policies])
    bandit = policies.index("bandit")
    a, b, sd, df = fit_two_way(np.log(thr))
    ratio, best = protocol_ratio(thr, bandit, fixed)
    contrast = float(a[bandit] - a[best])
    half = float(stats.t.ppf(0.95, df) * sd * np.sqrt(2.0 / rounds))
    return {
        "rounds": rounds,
        "policies": policies,
        "throughput_runs": {p: [round(x, 2) for x in point_runs[p][:rounds]] for p in policies},
        "best_fixed": policies[best],
        "protocol_ratio": round(ratio, 4),
        "protocol_verdict": "pass" if ratio >= threshold else "fail",
        "contrast_ratio": round(float(np.exp(contrast)), 4),
        "contrast_90": [round(float(np.exp(contrast - half)), 4), round(float(np.exp(contrast + half)), 4)],
        "noise_sd_log": round(sd, 4),
        "noise_df": df,
        "round_speed": [round(float(np.exp(x)), 4) for x in b],
        "fixed_spread": round(float(np.exp(max(a[i] for i in fixed) - min(a[i] for i in fixed))), 4),
        "perfect_governor_fail_rate": round(false_fail_rate(a, b, sd, bandit, fixed, threshold, draws, seed), 4),
        "rounds_for_5pct_false_fails": repeats_needed(a, b, sd, bandit, fixed, threshold, draws // 4, seed),
        "verdict_within_noise": bool(np.exp(contrast - half) < threshold <= np.exp(contrast + half)),
    }


def poisson_interval(count: int, level: float = 0.95) -> tuple[float, float]:
    """Exact (Garwood) interval of a Poisson mean from one ``count``.

    >>> [round(x, 2) for x in poisson_interval(3)]
    [0.62, 8.77]
    """
    tail = (1.0 - level) / 2.0
    lo = 0.0 if count == 0 else float(stats.chi2.ppf(tail, 2 * count) / 2.0)
    return lo, float(stats.chi2.ppf(1.0 - tail, 2 * count + 2) / 2.0)


def oscillation_rows(report_dir: Path, limit: float) -> list[dict]:
    """Each bandit point's oscillations per 1,000 steps with its 95% interval: the counts are
    a few events in a few hundred decided steps, and one look at a K is two of them."""
    rows = []
    for p in json.loads((report_dir / "report.json").read_text())["points"]:
        steps, rate = p.get("decided_steps"), p.get("oscillations_per_1000")
        if not p["policy"].startswith("bandit") or not steps or rate is None:
            continue
        flips = round(rate * steps / 1000.0)
        lo, hi = (1000.0 * x / steps for x in poisson_interval(flips))
        rows.append(
            {
                "report": report_dir.name,
                "policy": p["policy"],
                "concurrency": int(p["concurrency"]),
                "oscillations": flips,
                "decided_steps": int(steps),
                "per_1000": round(1000.0 * flips / steps, 2),
                "per_1000_95": [round(lo, 2), round(hi, 2)],
                "one_look_per_1000": round(2000.0 / steps, 2),
                "verdict": "pass" if 1000.0 * flips / steps <= limit else "fail",
                "verdict_within_noise": bool(lo <= limit < hi),
            }
        )
    return rows


def read_points(report_dir: Path) -> dict[int, dict[str, list[float]]]:
    """{concurrency: {policy: run throughputs}} of a live report made with --repeats."""
    report = json.loads((report_dir / "report.json").read_text())
    out: dict[int, dict[str, list[float]]] = {}
    for p in report["points"]:
        runs = p.get("runs") or []
        if len(runs) >= 2:
            out.setdefault(int(p["concurrency"]), {})[p["policy"]] = [float(r["throughput_tok_s"]) for r in runs]
    return out


def plot(rows: list[dict], threshold: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.6 * len(rows) + 1.5))
    for i, r in enumerate(rows):
        lo, hi = r["contrast_90"]
        ax.plot([lo, hi], [i, i], color="tab:blue", lw=3, alpha=0.5, label="round-adjusted, 90%" if i == 0 else None)
        ax.plot(r["contrast_ratio"], i, "o", color="tab:blue")
        ax.plot(r["protocol_ratio"], i, "kx", ms=9, label="protocol's ratio (medians)" if i == 0 else None)
    ax.axvline(threshold, color="tab:red", ls="--", label=f"threshold {threshold}")
    ax.axvline(1.0, color="grey", lw=0.5)
    ax.set_yticks(range(len(rows)), [f"{r['report']} C={r['concurrency']}" for r in rows])
    ax.set_xlabel("bandit / best fixed K, throughput")
    ax.invert_yaxis()
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def markdown(rows: list[dict], threshold: float) -> str:
    lines = [
        "# Live checks against the machine's noise",
        "",
        f"bandit / best fixed K at each repeated live point (threshold {threshold}); `experiments/live_noise.py`.",
        "",
        "| report | C | best fixed | protocol ratio | verdict | round-adjusted (90%) | noise SD | "
        "fixed-K spread | a perfect governor fails | rounds for <= 5% |",
        "|---|---:|---|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lo, hi = r["contrast_90"]
        lines.append(
            f"| {r['report']} | {r['concurrency']} | {r['best_fixed']} | {r['protocol_ratio']:.3f} | "
            f"{r['protocol_verdict']} | {r['contrast_ratio']:.3f} ({lo:.3f}-{hi:.3f}) | {r['noise_sd_log']:.3f} | "
            f"{r['fixed_spread']:.3f} | {100 * r['perfect_governor_fail_rate']:.0f}% | "
            f"{r['rounds_for_5pct_false_fails'] or f'> {MAX_ROUNDS}'} |"
        )
    return "\n".join(lines) + "\n"


def oscillation_markdown(rows: list[dict]) -> str:
    lines = [
        "",
        f"## Oscillations per 1,000 steps (limit {OSCILLATION_LIMIT:g}), with exact 95% Poisson intervals",
        "",
        "| report | policy | C | oscillations / decided steps | per 1,000 (95%) | one look | verdict |",
        "|---|---|---:|---:|---|---:|---|",
    ]
    for r in rows:
        lo, hi = r["per_1000_95"]
        lines.append(
            f"| {r['report']} | {r['policy']} | {r['concurrency']} | {r['oscillations']} / {r['decided_steps']} | "
            f"{r['per_1000']:.1f} ({lo:.1f}-{hi:.1f}) | {r['one_look_per_1000']:.1f} | {r['verdict']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reports", default=",".join(DEFAULT_REPORTS), help="comma-separated live report folders")
    p.add_argument("--threshold", type=float, default=THRESHOLD, help="the check's margin (default %(default)s)")
    p.add_argument("--draws", type=int, default=20000, help="Monte Carlo draws per point (default %(default)s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("results/live-noise"), help="report folder")
    args = p.parse_args(argv)
    if not 0 < args.threshold <= 1:
        p.error(f"--threshold must be in (0, 1], got {args.threshold}")
    if args.draws < 100:
        p.error(f"--draws must be at least 100, got {args.draws}")
    t0 = time.time()
    rows, oscillations, sources = [], [], {}
    for name in [s for s in args.reports.split(",") if s]:
        folder = Path(name) if Path(name).is_absolute() else ROOT / name
        if not (folder / "report.json").is_file():
            p.error(f"--reports: {name}/report.json does not exist")
        sources[name] = json.loads((folder / "report.json").read_text()).get("provenance", {}).get("commit")
        oscillations += oscillation_rows(folder, OSCILLATION_LIMIT)
        for c, runs in sorted(read_points(folder).items()):
            row = analyse_point(runs, args.threshold, args.draws, args.seed)
            if row is not None:
                rows.append({"report": folder.name, "concurrency": c, **row})
                print(f"{folder.name} C={c}: {rows[-1]['protocol_ratio']:.3f} {rows[-1]['contrast_90']}", flush=True)
    if not rows:
        print("no repeated point with a bandit and a fixed K in the reports", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    plot(rows, args.threshold, args.out / "ratios.png")
    report = {
        "provenance": provenance(),
        "threshold": args.threshold,
        "draws": args.draws,
        "seed": args.seed,
        "sources": sources,
        "points": rows,
        "oscillation_limit": OSCILLATION_LIMIT,
        "oscillations": oscillations,
        "summary": {
            "points": len(rows),
            "protocol_fails": sum(r["protocol_verdict"] == "fail" for r in rows),
            "within_noise": sum(r["verdict_within_noise"] for r in rows),
            "median_perfect_governor_fail_rate": statistics.median(r["perfect_governor_fail_rate"] for r in rows),
            "oscillation_points": len(oscillations),
            "oscillation_fails": sum(r["verdict"] == "fail" for r in oscillations),
            "oscillation_verdicts_within_noise": sum(r["verdict_within_noise"] for r in oscillations),
        },
        "plots": ["ratios.png"],
        "wall_s": round(time.time() - t0, 2),
    }
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    atomic_write_text(args.out / "report.md", markdown(rows, args.threshold) + oscillation_markdown(oscillations))
    print(f"wrote {args.out}/report.json, report.md, ratios.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

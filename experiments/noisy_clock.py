"""The governor on the live engine's noisy clock, in the simulator: oscillations and throughput.

    python experiments/noisy_clock.py                  # results/noisy-clock/report.json (+ PNG)
    python experiments/noisy_clock.py --quick          # fewer seeds and steps
    python experiments/noisy_clock.py --clock quiet    # the same load on a quiet clock
    python experiments/noisy_clock.py --governor-config '{"revisit_spacing": 1}' --out results/noisy-clock-unspaced

The scenario is ``experiments/scenarios/live-clock-cpu.json``: the live sweep's model pair
and shapes on this machine's profile, with the step clock measured from a live run
(``experiments/switch_causes.py``): log-normal spread, step-to-step correlation and stalls.
At each concurrency of the live sweep it runs ``bandit`` and every ``fixed:K`` for several
seeds and reports, per point, the bandit's K changes and oscillations per 1,000 steps
(median and max over seeds), their causes, and its throughput over the best fixed K. The
protocol's thresholds (docs/evaluation.md, simulator column) are applied: at most 2
oscillations per 1,000 steps at stationary load, at least 0.97x the best fixed K.

It also counts oscillations in the live sweep's window, the ``LIVE_WINDOW`` steps right
after the warm-up, against the real-engine column's limit (5): a governor still exploring
there passes over 5,000 steps and fails the live sweep (docs/decisions.md).
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

from banditk.core.config import GovernorConfig  # noqa: E402
from banditk.core.errors import ConfigError  # noqa: E402
from banditk.evaluation import THRESHOLDS  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402
from banditk.sim.metrics import trace_switches  # noqa: E402
from banditk.sim.run import run_policy  # noqa: E402
from banditk.sim.scenario import load_scenario  # noqa: E402

SCENARIO = ROOT / "experiments" / "scenarios" / "live-clock-cpu.json"
#: Decided steps a live sweep point measures after its warm-up (477-1,322 in the sweep).
LIVE_WINDOW = 1000
QUIET = {"noise_cv": 0.03, "noise_ar1": 0.0, "noise_spike_p": 0.0, "noise_spike_mean": 0.0}


def governor_config(text: str) -> dict:
    """``--governor-config``: a JSON object of GovernorConfig fields."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"`--governor-config`={text!r} is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"`--governor-config`={text!r} must be a JSON object")
    try:  # the scenario's class and K_max come later; the fields are checked now
        GovernorConfig.from_dict({"drafter_class": "mtp", "k_max": 4, **value})
    except ConfigError as e:
        raise argparse.ArgumentTypeError(f"`--governor-config`: {e}") from None
    return value


def run_point(scn, c: int, seeds: int, steps: int, governor_config: dict | None = None) -> dict:
    s = scn.with_workload(concurrency=c)
    fixed = {
        f"fixed:{k}": float(
            np.median(
                [run_policy(s, f"fixed:{k}", seed=i, steps=steps).summary["throughput_tok_s"] for i in range(seeds)]
            )
        )
        for k in range(1, s.k_max + 1)
    }
    fixed["nospec"] = float(
        np.median([run_policy(s, "nospec", seed=i, steps=steps).summary["throughput_tok_s"] for i in range(seeds)])
    )
    results = [
        run_policy(s, "bandit", seed=i, steps=steps, governor_config=governor_config, keep_trace=True)
        for i in range(seeds)
    ]
    runs = [r.summary for r in results]
    window = [
        trace_switches(r.trace, s.warmup_steps, s.warmup_steps + LIVE_WINDOW)["oscillations_per_1000"] for r in results
    ]
    best = max((p for p in fixed if p.startswith("fixed:")), key=fixed.get)
    tput = float(np.median([r["throughput_tok_s"] for r in runs]))
    osc = [r["oscillations_per_1000"] for r in runs]
    causes = {cause: int(sum(r["change_causes"][cause] for r in runs)) for cause in runs[0]["change_causes"]}
    return {
        "concurrency": c,
        "bandit_throughput_tok_s": tput,
        "best_fixed": best,
        "throughput_vs_best_fixed": tput / fixed[best],
        "throughput_vs_nospec": tput / fixed["nospec"],
        "oscillations_per_1000": {"median": float(np.median(osc)), "max": float(max(osc)), "values": osc},
        "live_window_oscillations_per_1000": {
            "median": float(np.median(window)),
            "max": float(max(window)),
            "values": window,
        },
        "k_switches_per_1000": float(np.median([r["k_switches_per_1000"] for r in runs])),
        "change_causes_all_seeds": causes,
        "mean_k": float(np.median([r["mean_k"] for r in runs])),
        "fixed_throughput_tok_s": fixed,
    }


def plot(report: dict, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = report["points"]
    c = [p["concurrency"] for p in pts]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    ax[0].plot(c, [p["oscillations_per_1000"]["median"] for p in pts], marker="o", label="oscillations")
    ax[0].plot(c, [p["k_switches_per_1000"] for p in pts], marker="s", ls="--", label="raw K changes")
    ax[0].plot(
        c,
        [p["live_window_oscillations_per_1000"]["median"] for p in pts],
        marker="^",
        label=f"oscillations, first {LIVE_WINDOW:,} steps after warm-up",
    )
    ax[0].axhline(report["thresholds"]["oscillations_per_1000_stationary"], color="r", lw=0.8, label="protocol limit")
    ax[0].axhline(
        report["thresholds"]["live_window_oscillations_per_1000"], color="r", lw=0.8, ls=":", label="live limit"
    )
    ax[0].set(xscale="log", xlabel="concurrency", ylabel="per 1,000 steps", title="K changes (median over seeds)")
    ax[0].legend(fontsize=8)
    ax[1].plot(c, [p["throughput_vs_best_fixed"] for p in pts], marker="o")
    ax[1].axhline(report["thresholds"]["throughput_vs_best_fixed"], color="r", lw=0.8)
    ax[1].set(xscale="log", xlabel="concurrency", ylabel="bandit / best fixed K", title="throughput")
    fig.suptitle(f"{report['scenario']} ({report['clock']} clock)")
    fig.tight_layout()
    path = out / "noisy_clock.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", type=Path, default=SCENARIO)
    p.add_argument("--clock", choices=("live", "quiet"), default="live", help="the scenario's clock, or a quiet one")
    p.add_argument("--concurrency", default="1,2,4,8,16", help="points (default %(default)s)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=None, help="steps per run (default: the scenario's)")
    p.add_argument("--quick", action="store_true", help="2 seeds, 2,200 steps")
    p.add_argument(
        "--governor-config",
        type=governor_config,
        default=None,
        metavar="JSON",
        help="GovernorConfig fields for the bandit, e.g. '{\"revisit_spacing\": 1}' (default: none)",
    )
    p.add_argument("--out", type=Path, default=ROOT / "results" / "noisy-clock")
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.steps = 2, 2200
    scn = load_scenario(args.scenario)
    if args.clock == "quiet":
        for field, value in QUIET.items():
            setattr(scn, field, value)
    thr = THRESHOLDS["simulator"]
    t0, points = time.time(), []
    conc = [int(x) for x in args.concurrency.split(",")]
    for i, c in enumerate(conc):
        pt = run_point(scn, c, args.seeds, args.steps or scn.steps, args.governor_config)
        points.append(pt)
        print(
            f"[{i + 1}/{len(conc)}] C={c:<3} bandit/{pt['best_fixed']} {pt['throughput_vs_best_fixed']:.3f}  "
            f"oscillations/1k {pt['oscillations_per_1000']['median']:.1f} (max {pt['oscillations_per_1000']['max']:.1f})"
            f"  in the live window {pt['live_window_oscillations_per_1000']['median']:.1f}"
            f"  K changes/1k {pt['k_switches_per_1000']:.1f}  causes {pt['change_causes_all_seeds']}"
            f"  ({time.time() - t0:.0f} s)",
            flush=True,
        )
    report = {
        "scenario": scn.name,
        "clock": args.clock,
        "governor_config": args.governor_config or {},
        "noise": {f: getattr(scn, f) for f in QUIET},
        "seeds": args.seeds,
        "steps": args.steps or scn.steps,
        "warmup_steps": scn.warmup_steps,
        "thresholds": {
            **{k: thr[k] for k in ("oscillations_per_1000_stationary", "throughput_vs_best_fixed")},
            "live_window_oscillations_per_1000": THRESHOLDS["real"]["oscillations_per_1000_stationary"],
        },
        "live_window_steps": LIVE_WINDOW,
        "points": points,
        "pass": all(
            pt["oscillations_per_1000"]["median"] <= thr["oscillations_per_1000_stationary"]
            and pt["throughput_vs_best_fixed"] >= thr["throughput_vs_best_fixed"]
            for pt in points
        ),
        "live_window_pass": all(
            pt["live_window_oscillations_per_1000"]["median"] <= THRESHOLDS["real"]["oscillations_per_1000_stationary"]
            for pt in points
        ),
        "wall_s": time.time() - t0,
        "quick": args.quick,
        "provenance": provenance(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    report["plot"] = str(plot(report, args.out).relative_to(ROOT)) if args.out.is_relative_to(ROOT) else None
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out / 'report.json'}: {'pass' if report['pass'] else 'fail'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

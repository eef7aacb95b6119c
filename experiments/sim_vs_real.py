"""Simulator versus real vLLM: calibrate this machine's profile from the live sweep's
measured step times, let the simulator predict the same sweep, report the error per point.

    python experiments/sim_vs_real.py [--live results/live] [--out results/sim-vs-real]

1. Calibration. The governed runs of the live sweep log every step (banditk trace:
   B, K, prefill tokens, measured step time). The ``cpu-2core`` profile's free numbers
   (bandwidth, FLOP rate, per-step, per-request, per-forward and per-layer host costs)
   are refitted by robust least squares on log step time, grouped by step shape, and
   registered as ``cpu-2core-live``. Acceptance per position and the step-time noise
   are measured from the same trace.
2. Prediction. Every (policy, concurrency) point of the live report is simulated with
   the live sweep's shapes (closed loop, its prompt and output lengths, the same table,
   bandit+prior from the same prior file); median of 3 seeds.
3. Report. Throughput and p99 TPOT error per point, median absolute error (aim <= 15%),
   ``report.json`` and ``sim_vs_real.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.trace import read_trace  # noqa: E402
from banditk.sim import hardware as hwmod  # noqa: E402
from banditk.sim.models import get_model  # noqa: E402
from banditk.sim.step_time import StepCostModel  # noqa: E402

FIT_FIELDS = ("mem_bw", "peak_flops", "step_overhead_s", "per_request_overhead_s", "graph_launch_s", "per_layer_s")
# Physical bounds, as in calibrate_cpu.py: 2-core DDR bandwidth, AVX2 fp32 peak, host overheads.
LOWER = (5e9, 10e9, 1e-4, 1e-6, 1e-5, 1e-6)
UPPER = (80e9, 600e9, 50e-3, 5e-3, 20e-3, 5e-3)
PROFILE = "cpu-2core-live"
MODEL = "cyclic-4x1024-v512"
AIM = 0.15


def load_steps(live: Path) -> dict[str, np.ndarray]:
    """The governed runs' steps as columns: batch, k, step_s, prefill, acc_s, acc_f."""
    traces = [
        read_trace(p) for run in ("bandit", "bandit+prior") if (p := live / "runs" / run / "telemetry.jsonl").exists()
    ]
    if not traces or not sum(len(t.k) for t in traces):
        raise SystemExit(f"no governed telemetry under {live / 'runs'}: run experiments/live_sweep.py first.")
    cols = ("batch", "k", "step_s", "prefill", "acc_s", "acc_f")
    return {c: np.concatenate([getattr(t, c) for t in traces]) for c in cols}


def shape_groups(steps: dict, input_len: int) -> dict:
    """Mean log step time and count per step shape (B, prefill requests, prefill tokens, K)."""
    groups: dict[tuple, list] = defaultdict(list)
    for b, k, t, p in zip(steps["batch"], steps["k"], steps["step_s"], steps["prefill"]):
        if t <= 0:
            continue
        p = int(p)
        groups[(int(b), math.ceil(p / input_len), p, int(k))].append(math.log(t))
    return {key: (float(np.mean(v)), len(v)) for key, v in groups.items()}


def fit_profile(groups: dict, k_max: int, ctx: float):
    from scipy.optimize import least_squares

    model = get_model(MODEL)
    base = hwmod.HARDWARE["cpu-2core"]
    keys = list(groups)
    y = np.array([groups[k][0] for k in keys])
    w = np.sqrt([groups[k][1] for k in keys])

    def predict(hw) -> np.ndarray:
        cost = StepCostModel(hw, model, "draft_model", k_max, dynamic=True)
        return np.array(
            [
                math.log(cost.times(b, b + npf, ptok, cost.kv_read_bytes(np.full(b, ctx), b))[k])
                for b, npf, ptok, k in keys
            ]
        )

    def profile(x):
        return dataclasses.replace(base, **dict(zip(FIT_FIELDS, np.exp(x))))

    lo, hi = np.log(LOWER), np.log(UPPER)
    x0 = np.clip(np.log([getattr(base, f) or 1e-5 for f in FIT_FIELDS]), lo + 1e-6, hi - 1e-6)
    r = least_squares(lambda x: w * (predict(profile(x)) - y), x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
    fitted = dict(zip(FIT_FIELDS, np.exp(r.x).tolist()))
    resid = predict(profile(r.x)) - y
    return fitted, resid, keys


def measured_noise_cv(steps: dict) -> float:
    """Step-time noise: robust spread of single steps around their shape's median
    (decode-only shapes with at least five steps)."""
    by_shape = defaultdict(list)
    for b, k, t, p in zip(steps["batch"], steps["k"], steps["step_s"], steps["prefill"]):
        if p == 0 and t > 0:
            by_shape[(int(b), int(k))].append(math.log(t))
    dev = np.concatenate([np.asarray(v) - np.median(v) for v in by_shape.values() if len(v) >= 5])
    return float(min(1.4826 * np.median(np.abs(dev)), 1.0))


def measured_acceptance(steps: dict, k_max: int) -> list[float]:
    """Conditional acceptance per position, pooled over all steps."""
    s, f = steps["acc_s"].sum(axis=0)[:k_max], steps["acc_f"].sum(axis=0)[:k_max]
    return [round(float(a), 4) for a in s / np.maximum(s + f, 1.0)]


def simulate(
    points: list[dict], setup: dict, acceptance: list[float], noise_cv: float, prior: Path | None, seeds: int
) -> list[dict]:
    from banditk.sim.run import run_policy
    from banditk.sim.scenario import parse_scenario

    out = []
    for p in points:
        policy, c = p["policy"], p["concurrency"]
        if policy.startswith("pinned:"):
            continue  # prices vLLM's dynamic-K mode, which the simulator's CPU profile has no term for
        scn = parse_scenario(
            {
                "name": f"live-{c}",
                "hardware": PROFILE,
                "model": MODEL,
                "drafter": {
                    "class": "draft_model",
                    "k_max": setup["k_max"],
                    "acceptance": acceptance,
                    "request_dispersion": None,
                },
                "workload": {
                    "concurrency": c,
                    "prompt_tokens": setup["input_len"],
                    "output_tokens": setup["output_len"],
                },
                "table": json.loads(setup["table"]),
                "noise_cv": noise_cv,
                "steps": 3000,
                "seed": 0,
            }
        )
        prior_path = prior if policy == "bandit+prior" else None
        if policy == "bandit+prior" and prior_path is None:
            continue
        runs = [run_policy(scn, policy, seed=s, warmup=200, prior_path=prior_path).summary for s in range(seeds)]
        sim = {m: float(np.median([r[m] for r in runs])) for m in ("throughput_tok_s", "tpot_p99_s")}
        row = {
            "policy": policy,
            "concurrency": c,
            "real_tok_s": p["throughput_tok_s"],
            "sim_tok_s": sim["throughput_tok_s"],
            "real_tpot_p99_s": p["tpot_p99_s"],
            "sim_tpot_p99_s": sim["tpot_p99_s"],
        }
        row["throughput_error"] = row["sim_tok_s"] / row["real_tok_s"] - 1
        row["tpot_p99_error"] = row["sim_tpot_p99_s"] / row["real_tpot_p99_s"] - 1
        out.append(row)
        print(
            f"{policy:>28} C={c:<3} tok/s real {row['real_tok_s']:7.1f} sim {row['sim_tok_s']:7.1f} "
            f"({100 * row['throughput_error']:+6.1f}%)   p99 TPOT real {1e3 * row['real_tpot_p99_s']:6.1f} ms "
            f"sim {1e3 * row['sim_tpot_p99_s']:6.1f} ms ({100 * row['tpot_p99_error']:+6.1f}%)",
            flush=True,
        )
    return out


def plot(rows: list[dict], out: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, (real, sim, label) in zip(
        axes,
        (
            ("real_tok_s", "sim_tok_s", "output throughput (tok/s)"),
            ("real_tpot_p99_s", "sim_tpot_p99_s", "p99 TPOT (s)"),
        ),
    ):
        for i, policy in enumerate(dict.fromkeys(r["policy"] for r in rows)):
            pts = sorted((r["concurrency"], r[real], r[sim]) for r in rows if r["policy"] == policy)
            color = f"C{i}"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "-o", color=color, label=f"{policy} real")
            ax.plot([p[0] for p in pts], [p[2] for p in pts], "--x", color=color, label=f"{policy} sim")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrency")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6, ncol=2)
    fig.suptitle("live vLLM (solid) vs simulator on the calibrated profile (dashed)")
    fig.tight_layout()
    fig.savefig(out / "sim_vs_real.png", dpi=110)
    plt.close(fig)
    return "sim_vs_real.png"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--live", type=Path, default=ROOT / "results" / "live", help="live sweep folder (its report.json and runs/)"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "sim-vs-real")
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args(argv)
    report_path = a.live / "report.json"
    if not report_path.exists():
        raise SystemExit(f"{report_path} not found: run experiments/live_sweep.py first.")
    live = json.loads(report_path.read_text())
    setup = live["setup"]
    steps = load_steps(a.live)
    ctx = setup["input_len"] + setup["output_len"] / 2
    groups = shape_groups(steps, setup["input_len"])
    n_steps = len(steps["k"])
    fitted, resid, keys = fit_profile(groups, setup["k_max"], ctx)
    counts = np.array([groups[k][1] for k in keys])
    fit_err = float(np.exp(np.sqrt(np.average(resid**2, weights=counts))) - 1)
    print(
        f"calibrated {PROFILE} on {n_steps} steps in {len(keys)} shapes: "
        + ", ".join(f"{k}={v:.3g}" for k, v in fitted.items())
        + f"; rms step-time error {100 * fit_err:.1f}%"
    )
    sources = {
        f: f"calibrated: experiments/sim_vs_real.py, robust least squares on {n_steps} live steps" for f in FIT_FIELDS
    }
    hwmod.HARDWARE[PROFILE] = dataclasses.replace(
        hwmod.HARDWARE["cpu-2core"], name=PROFILE, **fitted, sources={**hwmod.HARDWARE["cpu-2core"].sources, **sources}
    )
    noise_cv = measured_noise_cv(steps)
    acceptance = measured_acceptance(steps, setup["k_max"])
    print(f"measured acceptance per position {acceptance}, step-time noise cv {noise_cv:.3f}")
    # The live sweep's bandit+prior prior: recorded in its setup, else the older imported one.
    named = setup.get("bandit+prior prior")
    prior = ROOT / named if named else a.live / "runs" / "bandit_prior.json"
    rows = simulate(live["points"], setup, acceptance, noise_cv, prior if prior.exists() else None, a.seeds)
    thr = np.abs([r["throughput_error"] for r in rows])
    tpot = np.abs([r["tpot_p99_error"] for r in rows])
    summary = {
        "median_abs_throughput_error": float(np.median(thr)),
        "median_abs_tpot_p99_error": float(np.median(tpot)),
        "max_abs_throughput_error": float(thr.max()),
        "max_abs_tpot_p99_error": float(tpot.max()),
        "points_within_aim_throughput": int(np.sum(thr <= AIM)),
        "points_within_aim_tpot_p99": int(np.sum(tpot <= AIM)),
        "points": len(rows),
        "aim": AIM,
    }
    a.out.mkdir(parents=True, exist_ok=True)
    report = {
        "live_report": str(report_path.relative_to(ROOT) if report_path.is_relative_to(ROOT) else report_path),
        "profile": {"name": PROFILE, **fitted},
        "model": MODEL,
        "calibration_rms_step_error": fit_err,
        "calibration_steps": n_steps,
        "calibration_shapes": len(keys),
        "acceptance": acceptance,
        "noise_cv": noise_cv,
        "seeds": a.seeds,
        "summary": summary,
        "points": rows,
    }
    report["plot"] = plot(rows, a.out)
    atomic_write_text(a.out / "report.json", json.dumps(report, indent=1) + "\n")
    print(
        f"median |error|: throughput {100 * summary['median_abs_throughput_error']:.1f}%, "
        f"p99 TPOT {100 * summary['median_abs_tpot_p99_error']:.1f}% (aim {100 * AIM:.0f}%); "
        f"within aim: {summary['points_within_aim_throughput']}/{len(rows)} and "
        f"{summary['points_within_aim_tpot_p99']}/{len(rows)}"
    )
    print(f"wrote {a.out / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

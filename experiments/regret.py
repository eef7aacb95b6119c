"""Cumulative regret curves against the oracle, per scenario.

Policies: banditk with a flat prior (``bandit``), the classic bandit (``ucb``),
every fixed K and vLLM's table; ``bandit+prior`` too when a prior is given or
shipped. Each runs the scenario as written (its phases included) for its
``steps`` (20,000 in the shipped files). Regret is measured against the oracle
of the policy's own server mode (fixed K runs static-K FULL cudagraphs).

    python experiments/regret.py [--scenario FILE ...] [--seeds 1] [--steps N] [--out results/regret]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's banditk, not the one an editable install points at

from banditk.io.priorfile import load_prior_file as load_prior  # noqa: E402
from banditk.sim.checks import THRESHOLDS  # noqa: E402
from banditk.sim.policies import find_shipped_prior  # noqa: E402
from banditk.sim.run import run_policy  # noqa: E402
from banditk.sim.scenario import load_scenario  # noqa: E402

HERE = Path(__file__).resolve().parent


def _job(a):
    path, spec, seed, steps, prior = a
    scn = load_scenario(path)
    r = run_policy(
        scn, spec, seed=seed, steps=steps, keep_trace=True, prior_path=prior if spec == "bandit+prior" else None
    )  # bandit: the flat prior
    tr = r.trace
    cum_o = np.cumsum(tr.oracle_tokens)
    cum_r = np.cumsum(tr.oracle_tokens - tr.expected_tokens)
    idx = np.unique(np.linspace(0, len(cum_o) - 1, 200).astype(int))
    return scn.name, spec, seed, r.summary, idx.tolist(), (cum_r[idx] / np.maximum(cum_o[idx], 1e-9)).tolist()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", nargs="*", default=None, help="scenario files (default: every shipped one)")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--steps", type=int, default=None, help="override the scenarios' steps")
    ap.add_argument("--prior", default=None)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="results/regret")
    a = ap.parse_args()
    paths = a.scenario or sorted(str(p) for p in (HERE / "scenarios").glob("*.json"))
    jobs = []
    for p in paths:
        scn = load_scenario(p)
        steps = a.steps or scn.steps
        prior = a.prior or (str(find_shipped_prior(scn)) if find_shipped_prior(scn) else None)
        if prior and load_prior(prior).k_max < scn.k_max:  # a shipped prior of a smaller K_max does not apply
            print(f"{p}: prior {prior} covers a smaller K_max than the scenario's {scn.k_max}; no bandit+prior")
            prior = None
        pols = ["bandit", "ucb", "table"] + [f"fixed:{k}" for k in range(1, scn.k_max + 1)]
        if prior:
            pols.append("bandit+prior")
        jobs += [(p, spec, s, steps, prior) for spec in pols for s in range(a.seeds)]
    t0 = time.time()
    out: dict = {}
    with mp.get_context("fork").Pool(a.workers) as pool:
        for i, (name, spec, seed, summ, idx, frac) in enumerate(pool.imap_unordered(_job, jobs), 1):
            d = out.setdefault(name, {}).setdefault(spec, {"runs": []})
            d["runs"].append(
                {
                    "seed": seed,
                    "final": summ["regret_fraction"],
                    "step": idx,
                    "regret_fraction": frac,
                    "throughput_tok_s": summ["throughput_tok_s"],
                    "k_switches_per_1000": summ["k_switches_per_1000"],
                }
            )
            sys.stderr.write(f"\r[regret] {i}/{len(jobs)} runs {time.time() - t0:5.0f}s")
    sys.stderr.write("\n")
    checks = []
    for name, pols in out.items():
        for d in pols.values():
            d["median_final"] = float(np.median([r["final"] for r in d["runs"]]))
        for subj, key in (("bandit", "regret_fraction_flat_prior"), ("bandit+prior", "regret_fraction_shipped_prior")):
            v = pols.get(subj, {}).get("median_final")
            checks.append(
                {
                    "scenario": name,
                    "check": key,
                    "value": v,
                    "threshold": THRESHOLDS[key],
                    "status": "not_run" if v is None else ("pass" if v <= THRESHOLDS[key] else "fail"),
                }
            )
    od = Path(a.out)
    od.mkdir(parents=True, exist_ok=True)
    (od / "report.json").write_text(
        json.dumps({"scenarios": out, "checks": checks, "wall_s": time.time() - t0}, indent=1) + "\n"
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(out)
    fig, axes = plt.subplots((n + 1) // 2, 2, figsize=(12, 3.2 * ((n + 1) // 2)), squeeze=False)
    for ax, (name, pols) in zip(axes.flat, out.items()):
        for spec, d in sorted(pols.items()):
            r = d["runs"][0]
            ax.plot(
                r["step"],
                [100 * v for v in r["regret_fraction"]],
                lw=2 if spec.startswith("bandit") else 1,
                label=f"{spec} {100 * d['median_final']:.1f}%",
            )
        ax.axhline(3, ls=":", c="k", lw=1)
        ax.set_title(name, fontsize=9)
        ax.set_ylabel("regret % of oracle")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(od / "regret_curves.png", dpi=100)
    print(f"{'scenario':<28} " + " ".join(f"{p:>9}" for p in ("bandit", "ucb", "table", "best fixed")))
    for name, pols in out.items():
        fixed = min(v["median_final"] for k, v in pols.items() if k.startswith("fixed:"))
        print(
            f"{name:<28} {100 * pols['bandit']['median_final']:8.2f}% {100 * pols['ucb']['median_final']:8.2f}% "
            f"{100 * pols['table']['median_final']:8.2f}% {100 * fixed:8.2f}%"
        )
    for c in checks:
        print(f"{c['status'].upper():>7} {c['scenario']:<28} {c['check']} value={c['value']}")
    print(f"report: {od / 'report.json'}\nplot: {od / 'regret_curves.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

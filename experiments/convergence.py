"""K trace when concurrency steps up and down; switches per 1,000 steps; steps to settle.

python experiments/convergence.py [--scenario FILE] [--levels 4,32,4,64,8] [--phase-steps 2000]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from banditk.sim.checks import THRESHOLDS, steps_to_settle
from banditk.sim.metrics import k_switches_per_1000
from banditk.sim.protocol import _convergence_scenario
from banditk.sim.run import run_policy
from banditk.sim.scenario import load_scenario

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default=str(HERE / "scenarios" / "mtp-qwen3.6-h200.json"))
    ap.add_argument("--levels", default="4,32,4,64,8")
    ap.add_argument("--phase-steps", type=int, default=2000)
    ap.add_argument("--policies", default="bandit,ucb,peer:sglang,peer:vllm-adaptive-k")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="results/convergence")
    a = ap.parse_args()
    levels = tuple(int(x) for x in a.levels.split(","))
    per = a.phase_steps
    scn = _convergence_scenario(load_scenario(a.scenario), levels, per)
    res = {}
    for spec in a.policies.split(","):
        r = run_policy(scn, spec, seed=a.seed, steps=per * len(levels), warmup=0, keep_trace=True)
        settle = [steps_to_settle(r.trace.k, i * per, (i + 1) * per) for i in range(1, len(levels))]
        # switches per 1,000 steps over the second half of each phase (stationary load)
        stationary = [k_switches_per_1000(r.trace.k[i * per + per // 2 : (i + 1) * per]) for i in range(len(levels))]
        res[spec] = {
            "steps_to_settle": settle,
            "k_switches_per_1000": r.summary["k_switches_per_1000"],
            "switches_per_1000_second_half_of_each_phase": stationary,
            "k": r.trace.k.tolist(),
            "k_star": r.trace.k_star.tolist(),
            "n_dec": r.trace.n_dec.tolist(),
        }
        ok = max(settle) <= THRESHOLDS["steps_to_settle"]
        print(
            f"{spec:<22} settle {settle} ({'PASS' if ok else 'FAIL'} <= {THRESHOLDS['steps_to_settle']}), "
            f"switches/1000 {r.summary['k_switches_per_1000']:.1f}, stationary halves "
            f"{[round(x, 1) for x in stationary]}"
        )
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(
        json.dumps({"scenario": scn.name, "levels": levels, "phase_steps": per, "policies": res}, indent=1) + "\n"
    )
    from banditk.sim.plots import plot_report

    paths = plot_report(
        {
            "results": {},
            "protocol": {"policies": []},
            "scenario_name": scn.name,
            "convergence": {p: {**d} for p, d in res.items()},
        },
        out,
    )
    print(f"report: {out / 'report.json'}")
    for p in paths:
        print(f"plot: {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

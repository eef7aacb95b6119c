"""The governor's `prefill_aware` option on and off, on the #49548 scenario of the simulator.

For concurrency 2, 8, 24 and 64 (8 concurrent 180-token outputs at the #49548 point; at
64 half the steps also compute a prompt chunk), 3 seeds of 2,200 steps with 200 warm-up
steps: throughput, K switches per 1,000 steps and regret against the oracle, median over
seeds. Writes results/prefill-aware/49548.json. The shipped-prior rows with the option off
are in results/priors/prefill-aware-off/ (experiments/make_priors.py --governor-config).

    python experiments/prefill_aware.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from banditk.core.config import GovernorConfig  # noqa: E402
from banditk.governor import BanditGovernor  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.sim.engine import Simulator  # noqa: E402
from banditk.sim.metrics import summarize  # noqa: E402
from banditk.sim.scenario import parse_scenario  # noqa: E402

CONCURRENCY = (2, 8, 24, 64)


def run(base: dict, concurrency: int, seed: int, prefill_aware: bool, steps: int, warmup: int) -> dict:
    doc = {**base, "workload": {**base["workload"], "concurrency": concurrency}, "phases": []}
    scn = parse_scenario(doc)
    gov = BanditGovernor(
        GovernorConfig(drafter_class=scn.drafter_class, k_max=scn.k_max, seed=seed, prefill_aware=prefill_aware)
    )
    trace, done = Simulator(scn, gov, seed=seed, speculation=True, dynamic=True).run(steps)
    s = summarize(trace, done, warmup=warmup, policy="bandit", scenario=scn.name)
    return {k: s[k] for k in ("throughput_tok_s", "k_switches_per_1000", "regret_fraction")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scenario", type=Path, default=ROOT / "experiments" / "scenarios" / "49548.json")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=2200)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--out", type=Path, default=ROOT / "results" / "prefill-aware" / "49548.json")
    args = p.parse_args(argv)
    base = json.loads(args.scenario.read_text())
    rows = []
    for c in CONCURRENCY:
        for on in (False, True):
            runs = [run(base, c, s, on, args.steps, args.warmup) for s in range(args.seeds)]
            row = {
                "concurrency": c,
                "prefill_aware": on,
                **{k: float(np.median([r[k] for r in runs])) for k in runs[0]},
            }
            rows.append(row)
            print(
                f"C={c:<3} prefill_aware={'on ' if on else 'off'}  {row['throughput_tok_s']:7.1f} tok/s  "
                f"switches/1k {row['k_switches_per_1000']:5.1f}  regret {100 * row['regret_fraction']:.2f}%",
                flush=True,
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        args.out,
        json.dumps(
            {
                "scenario": str(args.scenario.relative_to(ROOT)),
                "seeds": args.seeds,
                "steps": args.steps,
                "warmup": args.warmup,
                "rows": rows,
            },
            indent=1,
        )
        + "\n",
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

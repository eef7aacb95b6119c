"""Switching penalty and decision epochs: switches per 1,000 steps versus regret.

Runs the governor on the synthetic stream (known truth) at several batch sizes and
seeds for each (switch_penalty, decision_interval) pair and reports, after a 200-step
warm-up, the switch rate and the regret against the true best K. The README's
trade-off table comes from this script. Writes results/tradeoff_switching.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's banditk, not the one an editable install points at

from banditk.core.config import GovernorConfig  # noqa: E402
from banditk.core.types import StepContext  # noqa: E402
from banditk.governor import BanditGovernor  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.tools.synthetic import SyntheticTruth  # noqa: E402

SETTINGS = ((0.0, 1), (0.03, 1), (0.03, 4), (0.03, 8), (0.03, 16))


def run(penalty: float, interval: int, batch: int, seed: int, steps: int, warmup: int) -> tuple[float, float]:
    truth = SyntheticTruth()
    rng = np.random.default_rng(100 + seed)
    gov = BanditGovernor(
        GovernorConfig(
            drafter_class="mtp", k_max=truth.k_max, seed=seed, switch_penalty=penalty, decision_interval=interval
        )
    )
    ks = np.empty(steps, dtype=np.int64)
    for i in range(steps):
        d = gov.select(StepContext(batch, truth.k_max, "mtp"))
        gov.observe(d, truth.outcome(rng, d, batch))
        ks[i] = d.k
    post = ks[warmup:]
    g = truth.goodput(batch)
    return 1000.0 * np.count_nonzero(post[1:] != post[:-1]) / post.size, 100.0 * (1.0 - g[ks].mean() / g.max())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4200)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("results/tradeoff_switching.json"))
    args = parser.parse_args()
    rows = []
    for penalty, interval in SETTINGS:
        runs = [
            run(penalty, interval, b, s, args.steps, args.warmup)
            for b in (1, 4, 8, 16, 32, 128)
            for s in range(args.seeds)
        ]
        sw, rg = np.array(runs).T
        row = {
            "switch_penalty": penalty,
            "decision_interval": interval,
            "switches_per_1k": {"median": float(np.median(sw)), "max": float(sw.max())},
            "regret_pct": {"median": round(float(np.median(rg)), 3), "max": round(float(rg.max()), 3)},
        }
        rows.append(row)
        print(
            f"penalty {penalty:<5} interval {interval:>3}: switches/1k median {np.median(sw):5.1f} max {sw.max():6.1f}"
            f"   regret% median {np.median(rg):.3f} max {rg.max():.3f}",
            flush=True,
        )
    atomic_write_text(
        args.out,
        json.dumps(
            {"experiment": "switching trade-off", "steps": args.steps, "warmup": args.warmup, "rows": rows}, indent=1
        )
        + "\n",
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``banditk demo``: the governor learning on a synthetic stream with known truth.

The stream steps through rising concurrency phases on a bandwidth-bound profile,
where speculation wins at small batches and loses at large ones. For each phase it
prints the K the governor settled on next to the true best K, its regret against
that truth and how often it switched; then the posterior it learned, and it writes
a snapshot that ``banditk prior import`` can turn into a prior.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from banditk.core.config import GovernorConfig
from banditk.core.types import StepContext
from banditk.governor import BanditGovernor
from banditk.governor.snapshot import save_snapshot
from banditk.tools.report import posterior_table
from banditk.tools.synthetic import SyntheticTruth

DEFAULT_PHASES = (1, 2, 4, 8, 16, 32, 64, 128, 8)


def add_demo_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo", help="watch the governor learn K on a synthetic stream (no GPU, no vLLM)", description=__doc__
    )
    p.add_argument("--steps", type=int, default=3000, help="steps per concurrency phase (default 3000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--phases",
        type=str,
        default=",".join(map(str, DEFAULT_PHASES)),
        help="comma-separated batch sizes, one phase each (default %(default)s)",
    )
    p.add_argument(
        "--snapshot",
        type=Path,
        default=Path("results/demo/snapshot.json"),
        help="where to write the learned snapshot (default %(default)s)",
    )
    p.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from banditk.core.errors import ConfigError

    try:
        phases = [int(x) for x in args.phases.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--phases must be comma-separated integers, got {args.phases!r}.") from None
    if not phases or min(phases) < 1:
        raise ConfigError(f"--phases must hold batch sizes >= 1, got {args.phases!r}.")
    if args.steps < 100:
        raise ConfigError(f"--steps must be at least 100 per phase, got {args.steps}.")
    truth = SyntheticTruth()
    gov = BanditGovernor(GovernorConfig(drafter_class="mtp", k_max=truth.k_max, seed=args.seed))
    rng = np.random.default_rng(args.seed + 1)
    print(
        f"banditk demo: true acceptance per position {list(truth.acceptance)}, K_max={truth.k_max}, "
        f"{args.steps} steps per phase, flat prior"
    )
    print(
        f"{'B':>5} {'true best K':>11} {'chosen K (last 20%)':>22} {'regret %':>9} {'switches/1k':>12} {'us/step':>8}"
    )
    t_start = time.perf_counter()
    for batch in phases:
        ks = np.empty(args.steps, dtype=np.int64)
        switches0 = gov.switches
        t0 = time.perf_counter()
        for i in range(args.steps):
            d = gov.select(StepContext(num_decoding=batch, k_max=truth.k_max, drafter_class="mtp"))
            gov.observe(d, truth.outcome(rng, d, batch))
            ks[i] = d.k
        us = 1e6 * (time.perf_counter() - t0) / args.steps
        g = truth.goodput(batch)
        regret = 100.0 * (1.0 - g[ks].mean() / g.max())
        tail = ks[int(0.8 * args.steps) :]
        hist = np.bincount(tail, minlength=truth.k_max + 1)
        mode = int(np.argmax(hist))
        share = hist[mode] / tail.size
        switches = 1000.0 * (gov.switches - switches0) / args.steps
        print(
            f"{batch:>5} {truth.best_k(batch):>11} {f'K={mode} ({100 * share:.0f}%)':>22} {regret:>9.2f} "
            f"{switches:>12.1f} {us:>8.0f}",
            flush=True,
        )
    print(
        f"\nlearned posterior after {gov.steps} steps ({time.perf_counter() - t_start:.1f} s; us/step includes the synthetic stream):"
    )
    print(posterior_table(gov))
    save_snapshot(args.snapshot, gov, {"source": "banditk demo", "seed": args.seed})
    print(f"\nsnapshot written to {args.snapshot}; try: banditk prior show {args.snapshot}")
    return 0

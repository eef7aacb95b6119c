"""``banditk sim``: run one policy on one scenario file and write the JSON report.

Wire it into the main CLI with :func:`add_sim_parser` and :func:`run_sim`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from banditk.core.errors import BanditkError
from banditk.sim.policies import SIM_POLICY_SPECS


def add_sim_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``sim`` sub-command to an argparse ``subparsers`` object."""
    p = subparsers.add_parser(
        "sim",
        help="simulate one policy on a scenario file",
        description="Simulate a policy on a scenario (JSON) and write the report (throughput, TPOT/TTFT "
        "percentiles, K switches, regret against the oracle).",
    )
    p.add_argument("--scenario", required=True, help="scenario JSON file (see experiments/scenarios/)")
    p.add_argument(
        "--policy",
        required=True,
        help="one of: "
        + ", ".join(SIM_POLICY_SPECS)
        + "; a per-step policy may end in @FULL or @PIECEWISE to force its server's graph mode",
    )
    p.add_argument("--steps", type=int, default=None, help="steps to simulate (default: the scenario's)")
    p.add_argument("--seed", type=int, default=None, help="seed (default: the scenario's)")
    p.add_argument("--prior", default=None, help="prior file for bandit / bandit+prior")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps excluded from metrics")
    p.add_argument("--json", dest="json_out", default=None, help="write the report here ('-' for stdout)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_sim)
    return p


def run_sim(args: argparse.Namespace) -> int:
    """Run ``banditk sim``; return the exit status (2 on a bad argument or file)."""
    from banditk.sim.run import progress_bar, run_policy
    from banditk.sim.scenario import load_scenario

    try:
        if args.steps is not None and args.steps < 1:
            raise BanditkError(f"`--steps`={args.steps} must be >= 1.")
        scn = load_scenario(args.scenario)
        steps = args.steps if args.steps is not None else scn.steps
        prog = None
        if not args.no_progress and steps >= 5000:
            prog = progress_bar(f"sim {args.policy}")
        res = run_policy(
            scn, args.policy, seed=args.seed, steps=steps, warmup=args.warmup, prior_path=args.prior, progress=prog
        )
    except (BanditkError, ValueError) as e:
        print(f"banditk sim: error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(res.summary, indent=2, sort_keys=True)
    if args.json_out in (None, "-"):
        print(text)
    else:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(text + "\n")
        s = res.summary
        print(
            f"{s['policy']} ({s['server_mode']}): {s['throughput_tok_s']:.1f} tok/s, p99 TPOT {1e3 * (s['tpot_p99_s'] or 0):.1f} ms, "
            f"regret {100 * s['regret_fraction']:.2f}%, {s['k_switches_per_1000']:.1f} K changes and "
            f"{s['oscillations_per_1000']:.1f} oscillations /1000 -> "
            f"{args.json_out}",
            file=sys.stderr,
        )
    return 0


def add_sweep_parser(subparsers) -> argparse.ArgumentParser:
    """Add the ``sweep`` sub-command (docs/evaluation.md's simulator protocol for one scenario)."""
    p = subparsers.add_parser(
        "sweep",
        help="run the evaluation protocol on a scenario",
        description="Run docs/evaluation.md's simulator protocol (every policy x concurrency point x seed, "
        "regret over 20,000 steps, convergence) and write report.json and PNG plots.",
    )
    p.add_argument("--scenario", required=True, help="scenario JSON file")
    p.add_argument("--out", default=None, help="output folder (default results/sweep-<scenario>)")
    p.add_argument("--quick", action="store_true", help="CI size: 3 points, 1 seed, short runs")
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (default 3; quick 1)")
    p.add_argument("--points", default=None, help="comma-separated concurrency points (default: the protocol's)")
    p.add_argument("--policies", default=None, help="comma-separated policy specs (default: all)")
    p.add_argument("--prior", default=None, help="prior file for bandit+prior")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument(
        "--no-mode-twins",
        action="store_true",
        help="do not also run bandit and bandit+prior as <policy>@PIECEWISE (V1 PIECEWISE, informational)",
    )
    p.set_defaults(func=run_sweep)
    return p


def run_sweep(args: argparse.Namespace) -> int:
    """Run ``banditk sweep``; exit 0 when the protocol ran (check failures are reported, not fatal)."""
    from banditk.sim.plots import plot_report
    from banditk.sim.protocol import ProtocolConfig, run_protocol
    from banditk.sim.report import print_checks, write_report
    from banditk.sim.scenario import load_scenario

    try:
        scn = load_scenario(args.scenario)
        kw = {"workers": args.workers, "prior_path": args.prior, "mode_twins": not args.no_mode_twins}
        if args.seeds is not None:
            if args.seeds < 1:
                raise BanditkError(f"`--seeds`={args.seeds} must be >= 1.")
            kw["seeds"] = tuple(range(args.seeds))
        if args.points:
            try:
                kw["points"] = tuple(int(x) for x in args.points.split(","))
            except ValueError:
                raise BanditkError(f"`--points`={args.points!r} must be comma-separated integers.") from None
        if args.policies:
            kw["policies"] = tuple(x.strip() for x in args.policies.split(",") if x.strip())
        cfg = ProtocolConfig.quick_mode(**kw) if args.quick else ProtocolConfig(**kw)
        report = run_protocol(scn, cfg)
    except (BanditkError, ValueError) as e:
        print(f"banditk sweep: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out or f"results/sweep-{scn.name}")
    paths = [] if args.no_plots else plot_report(report, out)
    report["plots"] = paths
    path = write_report(report, out)
    print_checks(report)
    print(f"report: {path}")
    for p in paths:
        print(f"plot: {p}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry: ``python -m banditk.sim.cli sim|sweep ...``."""
    parser = argparse.ArgumentParser(prog="banditk")
    sub = parser.add_subparsers(dest="command", required=True)
    add_sim_parser(sub)
    add_sweep_parser(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())

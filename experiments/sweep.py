"""Run docs/evaluation.md's simulator protocol on one scenario.

    python experiments/sweep.py --scenario experiments/scenarios/49548.json [--quick] [--out results/NAME]

Writes ``results/<run>/report.json`` (every policy x point x metric, thresholds,
pass/fail per check) and PNG plots; prints the table and the checks. Every policy runs in its
own server's mode (``server_modes`` in the report); where the hardware has graphs, ``bandit``
and ``bandit+prior`` also run as ``<policy>@PIECEWISE`` (vLLM's V1 runner), side by side and
informational (``mode_comparison``; ``--no-mode-twins`` leaves them out). See docs/simulator.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's banditk, not the one an editable install points at

from banditk.sim.cli import add_sweep_parser  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="experiments/sweep.py")
    sub = parser.add_subparsers(dest="command")
    add_sweep_parser(sub)
    args = parser.parse_args(["sweep", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())

"""Every exploration and switch of one governed run, with what the governor saw when it chose.

    python experiments/decision_timeline.py --point dflash-laguna-gb10:24 --seed 0 --out results/timelines/x.md
    python experiments/decision_timeline.py --noisy-clock 4 --governor-config '{"revisit_spacing": 1}' --out ...

A run is a simulator point as the protocol runs it (:mod:`banditk.sim.protocol`: 512-token
prompts, 256 output tokens, 2,200 steps) or the noisy-clock test's run
(tests/governor/test_noisy_clock.py, 5,000 steps at B = 4). Each decision that explored, switched
or changed K is one row: the step, the incumbent, the K chosen, the steps it is held as an
exploration (0: not one), the observations each K's cell holds (in steps of the clock's current
worth, as :func:`banditk.governor.switching.choose` reads them), each K's share of posterior
draws in which it beats the incumbent with its switching bonus, and whether the bucket may
revisit. ``experiments/oscillation_actions.py`` counts these actions over many points; this shows
one run's, which is how a count is explained.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

from oscillation_actions import governor_config, parse_point  # noqa: E402

from banditk.governor import bandit as bandit_module  # noqa: E402
from banditk.governor import switching  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402

STEPS, WARMUP, OUTPUT_TOKENS = 2200, 200, 256  # the protocol's points


@contextlib.contextmanager
def recorded():
    """Rows of (step, K played, chunk, choose's view or None) per ``select`` call."""
    rows: list[dict] = []
    seen: list[dict | None] = [None]
    choose, select = switching.choose, bandit_module.BanditGovernor.select

    def choose_seen(scores, incumbent, cell_n, explore_steps, confidence, may_revisit=True, played=None, odds=0.0):
        k, hold = choose(scores, incumbent, cell_n, explore_steps, confidence, may_revisit, played, odds)
        wins = np.mean(scores > scores[:, incumbent : incumbent + 1], axis=0) if incumbent >= 0 else None
        seen[0] = {
            "incumbent": int(incumbent),
            "k": int(k),
            "hold": round(float(hold), 1),
            "cell_steps": [round(float(v), 1) for v in cell_n],
            "wins": None if wins is None else [round(float(v), 2) for v in wins],
            "may_revisit": bool(may_revisit),
        }
        return k, hold

    def select_seen(self, context):
        seen[0] = None
        decision = select(self, context)
        rows.append({"step": self.steps, "k": decision.k, "chunk": bool(self.last_chunk), "choice": seen[0]})
        return decision

    switching.choose, bandit_module.BanditGovernor.select = choose_seen, select_seen
    try:
        yield rows
    finally:
        switching.choose, bandit_module.BanditGovernor.select = choose, select


def run_point(name: str, c: int, policy: str, seed: int, overrides: dict) -> None:
    from banditk.sim.policies import find_shipped_prior
    from banditk.sim.protocol import _point_scenario
    from banditk.sim.run import run_policy
    from banditk.sim.scenario import load_scenario

    base = load_scenario(ROOT / "experiments" / "scenarios" / f"{name}.json")
    prior = find_shipped_prior(base) if policy == "bandit+prior" else None
    run_policy(
        _point_scenario(base, c, OUTPUT_TOKENS),
        policy,
        seed=seed,
        steps=STEPS,
        warmup=WARMUP,
        prior_path=prior,
        governor_config=overrides or None,
    )


def events(rows: list[dict]) -> list[dict]:
    """The rows where K changed, an exploration started, or a decision left the incumbent."""
    out, before = [], None
    for r in rows:
        c = r["choice"]
        if r["k"] != before or (c is not None and (c["hold"] > 0 or c["k"] != c["incumbent"])):
            out.append(r)
        before = r["k"]
    return out


def markdown(report: dict) -> str:
    lines = [
        f"# Decision timeline: {report['run']}",
        "",
        f"Made by `experiments/decision_timeline.py` at commit `{report['provenance']['commit'][:7]}`"
        + ", the shipped governor"
        + (f", governor config `{json.dumps(report['governor_config'])}`" if report["governor_config"] else "")
        + ".",
        "Cells in steps of the clock's current worth; wins: share of 64 draws in which the K beats the"
        " incumbent with its switching bonus.",
        "",
        "| step | K | next to chunk | incumbent | held as exploration | cell steps per K | wins per K | may revisit |",
        "|---:|---:|---|---:|---:|---|---|---|",
    ]
    for r in report["events"]:
        c = r["choice"] or {}
        lines.append(
            f"| {r['step']} | {r['k']} | {'yes' if r['chunk'] else ''} | {c.get('incumbent', '')} | "
            f"{c.get('hold', '')} | {c.get('cell_steps', '')} | {c.get('wins', '')} | {c.get('may_revisit', '')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--point", type=parse_point, metavar="SCENARIO:C[:POLICY]", help="a simulator point")
    which.add_argument("--noisy-clock", type=int, metavar="SEED", help="the noisy-clock test's run with this seed")
    p.add_argument("--seed", type=int, default=0, help="the simulator point's seed (default 0)")
    p.add_argument("--governor-config", type=governor_config, default={}, metavar="JSON", help="GovernorConfig fields")
    p.add_argument("--out", type=Path, required=True, help="the markdown file (a .json beside it)")
    args = p.parse_args(argv)
    with recorded() as rows:
        if args.point:
            name, c, policy = args.point
            run_point(name, c, policy, args.seed, args.governor_config)
            run = f"{name} C={c} {policy}, seed {args.seed}"
        else:
            from tests.governor.test_noisy_clock import noisy_run

            noisy_run(args.noisy_clock, **args.governor_config)
            run = f"the noisy-clock test's run, seed {args.noisy_clock}"
    report = {
        "provenance": provenance(),
        "run": run,
        "governor_config": args.governor_config,
        "decisions": len(rows),
        "events": events(rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out.with_suffix(".json"), json.dumps(report, indent=1) + "\n")
    atomic_write_text(args.out, markdown(report))
    print(f"decision_timeline: {len(report['events'])} events of {len(rows)} decisions; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

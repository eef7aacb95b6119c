"""The simulator protocol with the bandit's governor fields changed, next to the committed sweeps.

    python experiments/sweep_variant.py --governor-config '{"cell_prior_count": 4}' --out .cache/variant
    python experiments/sweep_variant.py --governor-config '{...}' --scenario drift --scenario 49548
    python experiments/sweep_variant.py --governor-config '{...}' --quick --out /tmp/v

A candidate setting of the governor is judged by the protocol that judges the shipped one: every
policy, point and seed of ``experiments/sweep.py`` (docs/evaluation.md), with the ``bandit`` and
``bandit+prior`` policies (and their PIECEWISE twins) built with the given
:class:`~banditk.core.config.GovernorConfig` fields. Each scenario's report goes to
``<out>/sweep-<scenario>/report.json``; a table puts each row next to the committed report's at
``results/sweep-<scenario>`` (checks, the bandit's worst point against the best fixed K, its most
oscillations per 1,000 steps, the points over the protocol's limit, regret), and
``<out>/comparison.md`` keeps it. The other policies are deterministic per seed, so their numbers
equal the committed ones where the simulator is unchanged.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cell_strength_variant  # noqa: E402
from readme_results import SUBJECT, number, sweep_row  # noqa: E402
from regenerate import sweep_scenarios  # noqa: E402

from banditk.core.config import GovernorConfig  # noqa: E402
from banditk.core.errors import BanditkError  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402
from banditk.sim import protocol  # noqa: E402
from banditk.sim.report import write_report  # noqa: E402
from banditk.sim.scenario import load_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: The protocol's limit on oscillations per 1,000 stationary steps (docs/evaluation.md).
OSCILLATION_LIMIT = 2.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--governor-config", default="{}", help="JSON object of GovernorConfig fields for the bandits")
    cell_strength_variant.add_argument(p, "installed before the protocol forks (its defaults: --governor-config)")
    p.add_argument(
        "--scenario",
        action="append",
        default=None,
        help="a shipped scenario's name or a scenario file (repeatable; default: every sweep scenario)",
    )
    p.add_argument("--out", type=Path, default=ROOT / ".cache" / "sweep-variant", help="output folder")
    p.add_argument("--committed", type=Path, default=ROOT / "results", help="folder of the reports to compare with")
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument("--quick", action="store_true", help="the protocol's CI size (compare with quick reports only)")
    return p.parse_args(argv)


def governor_fields(text: str) -> dict:
    """The ``--governor-config`` object, checked by building a GovernorConfig with it.

    Raises:
        BanditkError: not a JSON object, or a field GovernorConfig refuses (named in the message).
    """
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as e:
        raise BanditkError(f"`--governor-config`={text!r} is not JSON: {e}") from None
    if not isinstance(fields, dict):
        raise BanditkError(f"`--governor-config`={text!r} must be a JSON object of GovernorConfig fields.")
    GovernorConfig.from_dict({"drafter_class": "mtp", "k_max": 4, **fields})
    return fields


def scenario_paths(names: list[str] | None) -> list[Path]:
    """The scenario files: each name's shipped file, or the path given; every sweep scenario by default."""
    shipped = {p.stem: p for p in sweep_scenarios()}
    if not names:
        return list(shipped.values())
    out = []
    for name in names:
        path = shipped.get(name) or Path(name)
        if not path.is_file():
            raise BanditkError(
                f"`--scenario`={name!r} is neither a shipped scenario ({', '.join(shipped)}) nor a file."
            )
        out.append(path)
    return out


def with_governor_config(fields: dict):
    """Make the protocol's runs build their bandit policies with ``fields``.

    The protocol's workers are forked, so they inherit the wrapped function; the simulator's
    ``governor_config`` reaches only bandit policies (banditk.sim.policies).
    """
    protocol.run_policy = functools.partial(protocol.run_policy, governor_config=fields)


def oscillating_points(report: dict) -> int:
    """Points whose ``bandit`` median oscillations exceed the protocol's limit."""
    points = [p for p in report.get("results", {}).values() if isinstance(p, dict)]
    medians = [number(p.get(SUBJECT, {}).get("oscillations_per_1000")) for p in points]
    return sum(1 for m in medians if m is not None and m > OSCILLATION_LIMIT)


#: The comparison table's header: the README's sweep columns between ``run`` and the count.
HEADER = (
    "| run | scenario | checks pass / fail | worst bandit / best fixed K | max oscillations / 1k "
    f"| regret flat / prior | commit | bandit points over {OSCILLATION_LIMIT:g} / 1k |"
)


def comparison_row(name: str, which: str, report: dict, rel: str) -> str:
    """``which`` (committed or variant) and the README's sweep row of ``report``, plus its count
    of points over the oscillation limit."""
    return f"| {which} {sweep_row(name, report, rel)} {oscillating_points(report)} |"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        fields = governor_fields(args.governor_config)
        paths = scenario_paths(args.scenario)
    except BanditkError as e:
        print(f"sweep_variant: error: {e}", file=sys.stderr)
        return 2
    with_governor_config(fields)
    if args.variant:
        cell_strength_variant.install(args.variant)
    rows = [
        f"Variant: {args.variant or 'none'}; governor fields: `{json.dumps(fields)}`; made at commit `{provenance().get('commit', '?')[:7]}`.",
        "",
        HEADER,
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    t0 = time.time()
    for i, path in enumerate(paths, 1):
        scn = load_scenario(path)
        print(f"[{i}/{len(paths)}] {scn.name} ({time.time() - t0:.0f} s so far)", flush=True)
        make = protocol.ProtocolConfig.quick_mode if args.quick else protocol.ProtocolConfig
        cfg = make(workers=args.workers)
        report = protocol.run_protocol(scn, cfg, progress=False)
        report["governor_config"], report["variant"] = fields, args.variant
        out = args.out / f"sweep-{scn.name}"
        write_report(report, out)
        committed = args.committed / f"sweep-{scn.name}" / "report.json"
        if committed.is_file():
            rows.append(comparison_row(scn.name, "committed", json.loads(committed.read_text()), str(committed)))
        rows.append(comparison_row(scn.name, "variant", report, str(out)))
        atomic_write_text(args.out / "comparison.md", "\n".join(rows) + "\n")
        print("\n".join(rows[-2:]), flush=True)
    print(f"comparison: {args.out / 'comparison.md'} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

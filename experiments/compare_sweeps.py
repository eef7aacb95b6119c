"""Two sets of simulator sweep reports, check by check: what a governor change moved.

    python experiments/compare_sweeps.py git:main results                 # this tree's reports against main's
    python experiments/compare_sweeps.py git:main /tmp/sweeps --policies bandit
    python experiments/compare_sweeps.py results-a results-b --json /tmp/flips.json

Each side is a folder holding ``sweep-<scenario>/report.json`` (as ``experiments/sweep.py``
writes them), or ``git:<ref>`` for the reports committed at that ref. For every scenario the
two sides share, and every check of the governed policies (``--policies``), it counts passes
on each side and lists the checks whose status changed ("flips"), with both values. The
sweeps are deterministic per seed, so a flip is the change's doing, though a single seed's
path can carry it (read the report's per-seed values before calling a flip a trend).

Prints a Markdown summary; ``--json`` also writes it as JSON. Reads only the reports.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from readme_results import SWEEP_REPORTS, ReportError, load_report

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's banditk, not the one an editable install points at
GOVERNED = ("bandit", "bandit+prior")


class SideError(ValueError):
    """A side that cannot be read: names the side and why."""


def _git(args: list[str]) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise SideError(f"git {' '.join(args)}: {out.stderr.strip() or 'failed'}")
    return out.stdout


def load_side(side: str) -> dict[str, dict]:
    """{scenario: report} of one side: a folder or ``git:<ref>``."""
    reports = {}
    if side.startswith("git:"):
        ref = side[4:]
        if not ref:
            raise SideError(f"side {side!r}: give a ref after 'git:', e.g. git:main")
        listed = _git(["ls-tree", "-r", "--name-only", ref, "--", "results/"]).splitlines()
        for path in listed:
            parts = path.split("/")
            if len(parts) == 3 and parts[1].startswith("sweep-") and parts[2] == "report.json":
                reports[parts[1].removeprefix("sweep-")] = json.loads(_git(["show", f"{ref}:{path}"]))
    else:
        folder = Path(side)
        if not folder.is_dir():
            raise SideError(f"side {side!r} is neither a folder nor git:<ref>")
        for path in sorted(folder.glob(SWEEP_REPORTS)):
            try:
                reports[path.parent.name.removeprefix("sweep-")] = load_report(path)
            except ReportError as e:
                raise SideError(str(e)) from None
    if not reports:
        raise SideError(f"side {side!r} holds no {SWEEP_REPORTS}")
    return reports


def _checks(report: dict, policies: tuple[str, ...]) -> dict[tuple[str, str, str], dict]:
    return {
        (c["check"], c["policy"], str(c.get("point"))): c
        for c in report.get("checks", [])
        if c.get("policy") in policies
    }


def compare(base: dict[str, dict], new: dict[str, dict], policies: tuple[str, ...] = GOVERNED) -> dict:
    """Pass counts per (scenario, check) on each side and every status change.

    >>> rep = lambda s: {"checks": [{"check": "c", "policy": "bandit", "point": "c1", "status": s, "value": 1.0}]}
    >>> out = compare({"x": rep("pass")}, {"x": rep("fail")})
    >>> out["totals"]["c"], out["flips"][0]["change"]
    ({'base_pass': 1, 'new_pass': 0, 'both': 1}, 'pass->fail')
    """
    shared = sorted(set(base) & set(new))
    per_scenario, totals, flips = {}, {}, []
    for name in shared:
        a, b = _checks(base[name], policies), _checks(new[name], policies)
        counts: dict[str, Counter] = {}
        for key in sorted(set(a) & set(b)):
            check, policy, point = key
            sa, sb = a[key].get("status"), b[key].get("status")
            c = counts.setdefault(check, Counter())
            c["base_pass"] += sa == "pass"
            c["new_pass"] += sb == "pass"
            c["both"] += 1
            if sa != sb:
                flips.append(
                    {
                        "scenario": name,
                        "check": check,
                        "policy": policy,
                        "point": point,
                        "change": f"{sa}->{sb}",
                        "base_value": a[key].get("value"),
                        "new_value": b[key].get("value"),
                    }
                )
        per_scenario[name] = {check: dict(c) for check, c in counts.items()}
        for check, c in counts.items():
            t = totals.setdefault(check, Counter())
            t.update(c)
    return {
        "scenarios": shared,
        "only_base": sorted(set(base) - set(new)),
        "only_new": sorted(set(new) - set(base)),
        "policies": list(policies),
        "per_scenario": per_scenario,
        "totals": {check: dict(t) for check, t in totals.items()},
        "flips": flips,
    }


def _value(v) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, (int, float)) else str(v)


def markdown(result: dict, base: str, new: str) -> str:
    lines = [
        f"# Sweep checks: {new} against {base}",
        "",
        f"Policies {', '.join(result['policies'])}; {len(result['scenarios'])} scenarios in both.",
    ]
    for key, label in (("only_base", base), ("only_new", new)):
        if result[key]:
            lines.append(f"Only in {label}: {', '.join(result[key])}.")
    lines += ["", "| check | pass (base) | pass (new) | of |", "|---|---:|---:|---:|"]
    for check, t in sorted(result["totals"].items()):
        lines.append(f"| {check} | {t.get('base_pass', 0)} | {t.get('new_pass', 0)} | {t.get('both', 0)} |")
    changes = Counter(f["change"] for f in result["flips"])
    lines += [
        "",
        f"{len(result['flips'])} status changes: "
        + (", ".join(f"{n} {c}" for c, n in sorted(changes.items())) or "none"),
    ]
    if result["flips"]:
        lines += ["", "| scenario | check | policy | point | change | base | new |", "|---|---|---|---|---|---:|---:|"]
        for f in result["flips"]:
            lines.append(
                f"| {f['scenario']} | {f['check']} | {f['policy']} | {f['point']} | {f['change']} "
                f"| {_value(f['base_value'])} | {_value(f['new_value'])} |"
            )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base", help="folder of sweep-*/report.json, or git:<ref> (e.g. git:main)")
    p.add_argument("new", help="the same, for the side under test")
    p.add_argument(
        "--policies",
        default=",".join(GOVERNED),
        help=f"comma-separated policies whose checks are compared (default {','.join(GOVERNED)})",
    )
    p.add_argument("--json", type=Path, help="also write the comparison as JSON here")
    args = p.parse_args(argv)
    policies = tuple(x for x in args.policies.split(",") if x)
    if not policies:
        p.error(f"--policies must name at least one policy, got {args.policies!r}")
    try:
        result = compare(load_side(args.base), load_side(args.new), policies)
    except SideError as e:
        print(f"compare_sweeps: {e}", file=sys.stderr)
        return 2
    if not result["scenarios"]:
        print(f"compare_sweeps: {args.base} and {args.new} share no scenario", file=sys.stderr)
        return 2
    sys.stdout.write(markdown(result, args.base, args.new))
    if args.json:
        from banditk.io.atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

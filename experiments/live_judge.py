"""The verdicts of a live sweep report, judged from its measured points by the code in this tree.

    python experiments/live_judge.py results/live results/live-context-short   # judge again, in place
    python experiments/live_judge.py --check results/live                       # exit 1 if a verdict moved

A live report holds what was measured (``points``, made by the servers: a few hours of this
machine) and what the protocol makes of it (``thresholds``, ``checks``, ``summary``: pure
functions of the points, :mod:`banditk.evaluation`). The two are stamped apart:
``provenance.closure`` covers the measuring code and leaves out :data:`JUDGE_MODULES`, and
``judged_by`` covers this script's import closure. A change to the protocol's checks then
re-judges the committed points in seconds instead of measuring them again; a change to the
measuring code (the governor, the adapter, the harness) still needs a new sweep.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

import source_closure  # noqa: E402

from banditk.evaluation import THRESHOLDS, point_checks, summary  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402

#: banditk modules that only judge a live measurement; a measuring step's stamp leaves them out.
JUDGE_MODULES = ("banditk/evaluation.py",)
#: The scripts whose closure is the judge's.
JUDGE_ENTRIES = ("experiments/live_judge.py",)
#: The banditk policies a live sweep judges.
SUBJECTS = ("bandit", "bandit+prior")


def verdicts(points: list[dict]) -> dict:
    """``thresholds``, ``checks`` and ``summary`` of the protocol's real-vLLM column for ``points``."""
    per_point: dict[str, dict[str, dict]] = {}
    for p in points:
        per_point.setdefault(f"C={p['concurrency']}", {})[p["policy"]] = p
    checks = [
        c
        for subject in SUBJECTS
        for point, med in per_point.items()
        if subject in med
        for c in point_checks(med, point, "real", subject)
    ]
    return {"thresholds": THRESHOLDS["real"], "checks": checks, "summary": summary(checks)}


def stamp(root: Path = ROOT) -> dict:
    """What judges: this tree's provenance and the judge's import closure."""
    return {**provenance(), "closure": source_closure.stamp_for(JUDGE_ENTRIES, root)}


def judge(report: dict, judged_by: dict) -> dict:
    """``report`` with its verdicts made again from its points, and ``judged_by`` recorded."""
    if not isinstance(report.get("points"), list):
        raise ValueError("field `points` must be an array of measured points")
    return {**report, **verdicts(report["points"]), "judged_by": judged_by}


def report_path(folder: Path) -> Path:
    return folder / "report.json" if folder.is_dir() else folder


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reports", nargs="+", type=Path, help="live report folders (or report.json files)")
    p.add_argument("--check", action="store_true", help="exit 1 if a report's verdicts differ from a new judgement")
    a = p.parse_args(argv)
    by = stamp()
    moved = []
    for folder in a.reports:
        path = report_path(folder)
        try:
            report = json.loads(path.read_text())
            new = judge(report, by)
        except (OSError, ValueError) as e:
            print(f"live_judge: {path}: {e}", file=sys.stderr)
            return 1
        if {k: report.get(k) for k in ("checks", "thresholds")} != {k: new[k] for k in ("checks", "thresholds")}:
            moved.append(path)
        if not a.check:
            text = json.dumps(new, indent=1) + "\n"
            if text != path.read_text():
                atomic_write_text(path, text)
        s = new["summary"]
        print(f"live_judge: {path}: {s['pass']} pass, {s['fail']} fail, {s['not_run']} not run")
    if a.check and moved:
        print("live_judge: verdicts moved in " + ", ".join(map(str, moved)), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

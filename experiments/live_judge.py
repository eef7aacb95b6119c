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

What the judgement adds to :func:`banditk.evaluation.point_checks` (docs/evaluation.md):

- **Intervals.** Each throughput or TPOT ratio gets the 90% interval of its ratio paired by
  round (each round runs every policy once, so round r of the subject meets round r of the
  policy it is compared with). Where that interval straddles the threshold and is wider than
  +-:data:`DECIDED_HALF_WIDTH`, the verdict is ``undecided``: the machine's noise could have
  given either one, and more rounds are what would decide it.
- **Checks that could not run.** A comparison the protocol names whose policy this sweep did
  not serve (a peer, the table, nospec, a fixed K) is listed ``not_run`` with the reason,
  never dropped.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

import source_closure  # noqa: E402
from scipy import stats  # noqa: E402

from banditk.evaluation import PEERS, THRESHOLDS, geomean_checks, point_checks, record  # noqa: E402
from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402

#: banditk modules that only judge a live measurement; a measuring step's stamp leaves them out.
JUDGE_MODULES = ("banditk/evaluation.py",)
#: The scripts whose closure is the judge's.
JUDGE_ENTRIES = ("experiments/live_judge.py",)
#: The banditk policies a live sweep judges, where it served them.
SUBJECTS = ("bandit", "bandit+prior", "bandit+context")
#: A verdict whose paired 90% interval straddles the threshold is decided only when the interval
#: is at most this wide on either side of the ratio (issue 51: a half-width of at most 3%).
DECIDED_HALF_WIDTH = 0.03
#: The checks that compare a subject's runs with another policy's, and the metric of each.
PAIRED = {
    "throughput_vs_nospec": "throughput_tok_s",
    "p99_tpot_vs_nospec": "tpot_p99_s",
    "throughput_vs_best_fixed": "throughput_tok_s",
    "throughput_vs_table": "throughput_tok_s",
    "throughput_vs_peer_each_point": "throughput_tok_s",
}
STATUSES = ("pass", "fail", "undecided", "not_run")


def verdicts(points: list[dict]) -> dict:
    """``thresholds``, ``checks`` and ``summary`` of the protocol's real-vLLM column for ``points``."""
    per_point: dict[str, dict[str, dict]] = {}
    for p in points:
        per_point.setdefault(f"C={p['concurrency']}", {})[p["policy"]] = p
    checks = []
    for subject in SUBJECTS:
        served = [point for point, med in per_point.items() if subject in med]
        for point in served:
            med = per_point[point]
            checks += [with_interval(c, med) for c in point_checks(med, point, "real", subject)]
            checks += unserved(subject, point, med)
        if served:
            checks += geomean_checks(per_point, "real", subject)
            thr = THRESHOLDS["real"]["throughput_vs_peer_geomean"]
            checks += [
                record(
                    "throughput_vs_peer_geomean",
                    subject,
                    "all",
                    None,
                    thr,
                    None,
                    f"{peer} is not served by the live sweep",
                )
                for peer in PEERS
                if not any(peer in med and subject in med for med in per_point.values())
            ]
    counts = {s: sum(1 for c in checks if c["status"] == s) for s in STATUSES}
    return {"thresholds": THRESHOLDS["real"], "checks": checks, "summary": counts}


def comparator(check: dict, med: dict[str, dict]) -> str | None:
    """The policy a check compares its subject with: nospec, the best fixed K, the table, the peer."""
    name = check["check"]
    if name in ("throughput_vs_nospec", "p99_tpot_vs_nospec"):
        return "nospec"
    if name == "throughput_vs_best_fixed":
        fixed = {p: m["throughput_tok_s"] for p, m in med.items() if p.startswith("fixed:")}
        return max(fixed, key=fixed.get) if fixed else None
    return check.get("note") or None  # the table's and the peer's checks name it


def paired_interval(mine: list[dict], theirs: list[dict], metric: str) -> tuple[float, float, int] | None:
    """The 90% interval of the ratio of two policies' runs paired by round, and the rounds; None
    with fewer than two pairs."""
    logs = [
        math.log(a[metric] / b[metric])
        for a, b in zip(mine, theirs, strict=False)
        if isinstance(a.get(metric), int | float)
        and isinstance(b.get(metric), int | float)
        and a[metric] > 0 < b[metric]
    ]
    if len(logs) < 2:
        return None
    half = float(stats.t.ppf(0.95, len(logs) - 1)) * statistics.stdev(logs) / math.sqrt(len(logs))
    mean = statistics.fmean(logs)
    return math.exp(mean - half), math.exp(mean + half), len(logs)


def with_interval(check: dict, med: dict[str, dict]) -> dict:
    """``check`` with the paired interval of its ratio, ``undecided`` where that interval straddles
    the threshold and is too wide to tell."""
    metric, other = PAIRED.get(check["check"]), comparator(check, med)
    if metric is None or other not in med or check["value"] is None:
        return check
    got = paired_interval(med[check["policy"]].get("runs") or [], med[other].get("runs") or [], metric)
    if got is None:
        return check
    lo, hi, n = got
    out = {**check, "interval_90": [lo, hi], "rounds": n}
    if lo < check["threshold"] < hi and math.sqrt(hi / lo) - 1.0 > DECIDED_HALF_WIDTH:
        out["status"] = "undecided"
    return out


def unserved(subject: str, point: str, med: dict[str, dict]) -> list[dict]:
    """A ``not_run`` record for each comparison the protocol names whose policy this point lacks."""
    thr, out = THRESHOLDS["real"], []

    def absent(check: str, why: str) -> None:
        out.append(record(check, subject, point, None, thr[check], None, why))

    if "nospec" not in med:
        absent("throughput_vs_nospec", "nospec is not served at this point")
        absent("p99_tpot_vs_nospec", "nospec is not served at this point")
    if not any(p.startswith("fixed:") for p in med):
        absent("throughput_vs_best_fixed", "no fixed K is served at this point")
    if not any(p.startswith("table") for p in med):
        absent("throughput_vs_table", "vLLM's table is not served at this point")
    for peer in PEERS:
        if peer not in med:
            absent("throughput_vs_peer_each_point", f"{peer} is not served by the live sweep")
    return out


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

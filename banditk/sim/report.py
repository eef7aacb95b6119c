"""Writing and printing protocol reports."""

from __future__ import annotations

import json
import os
from pathlib import Path

#: Levels written one item per line; anything deeper goes on one line. A sweep's per-step series
#: (regret, convergence) then cost no indentation: the report is less than half the size and
#: still reads, and diffs, by policy and point.
INDENTED_LEVELS = 3


def report_json(value, depth: int = 0) -> str:
    """``value`` as JSON, indented for its first :data:`INDENTED_LEVELS` levels and compact below."""
    if depth >= INDENTED_LEVELS or not isinstance(value, (dict, list)) or not value:
        return json.dumps(value, separators=(",", ":"), default=float)
    pad = " " * (depth + 1)
    if isinstance(value, dict):
        lines = [f"{pad}{json.dumps(str(k))}: {report_json(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(lines) + "\n" + " " * depth + "}"
    lines = [pad + report_json(v, depth + 1) for v in value]
    return "[\n" + ",\n".join(lines) + "\n" + " " * depth + "]"


def write_report(report: dict, out_dir: str | Path) -> Path:
    """Write ``report.json`` atomically under ``out_dir``; return its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.json"
    tmp = out / ".report.json.tmp"
    tmp.write_text(report_json(report) + "\n")
    os.replace(tmp, path)
    return path


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def print_checks(report: dict, stream=None) -> None:
    """Print the throughput table and every check with pass/fail."""
    import sys

    out = stream or sys.stdout
    res = report["results"]
    pols = report["protocol"]["policies"]
    modes = {p: (m or {}).get("server_mode") or "-" for p, m in report.get("server_modes", {}).items()}
    width = {p: max(12, len(p), len(modes.get(p, "-"))) for p in pols}
    out.write(f"\n== {report['scenario_name']}: output tok/s (median over seeds) ==\n")
    out.write(f"{'point':>10} " + " ".join(f"{p:>{width[p]}}" for p in pols) + "\n")
    out.write(f"{'mode':>10} " + " ".join(f"{modes.get(p, '-'):>{width[p]}}" for p in pols) + "\n")
    for lab, d in res.items():
        out.write(
            f"{lab:>10} "
            + " ".join(f"{_fmt(d[p]['throughput_tok_s']['median']) if p in d else 'error':>{width[p]}}" for p in pols)
            + "\n"
        )
    for base, c in report.get("mode_comparison", {}).items():
        twin = c["twin"]
        out.write(
            f"\n== {base} in both modes, over the best fixed K (informational: no threshold applies to {twin}) ==\n"
        )
        out.write(
            f"{'point':>10} {base + ' (' + str(c['modes'].get(base)) + ')':>28} "
            f"{twin + ' (' + str(c['modes'].get(twin)) + ')':>38}\n"
        )
        for lab, row in c["points"].items():
            r = row["vs_best_fixed"]
            out.write(f"{lab:>10} {_fmt(r.get(base)):>28} {_fmt(r.get(twin)):>38}\n")
    out.write("\n== checks ==\n")
    for c in report["checks"]:
        out.write(
            f"{c['status'].upper():>7}  {c['check']:<32} {c['policy']:<13} {c['point']:<10} "
            f"value={_fmt(c['value'])} threshold={_fmt(c['threshold'])} {c['note']}\n"
        )
    for e in report.get("errors", [])[:10]:
        out.write(f"  ERROR  {e['kind']} {e['point']} {e['policy']} seed {e['seed']}: {e['error']}\n")
    n = report["check_counts"]
    out.write(f"\n{n['pass']} pass, {n['fail']} fail, {n['not_run']} not run; wall {report['wall_s']:.0f}s\n")

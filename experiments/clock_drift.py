"""How a live sweep's machine speed moved over the sweep, from the governed servers' telemetry.

Each governed server of a live sweep logs every step (``telemetry.jsonl``: B, K, step, draft
and target seconds). Its runs of a point are separated by the other policies' runs, so the
log splits at gaps into one segment per run. Per segment this gives the median step time at
one (B, K) the server played throughout; its ratio between segments is the machine's drift,
seen by a server whose K did not change. Per segment it also gives each K's step count and
median step, draft and target times, which show what a learning server saw when it measured
each K.

    python experiments/clock_drift.py results/live-per-request-pinned --batch 4

Writes ``clock_drift.json`` and ``clock_drift.md`` into the sweep folder.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's banditk, not the one an editable install points at

from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402

#: Seconds without a step that separate two runs of a server.
GAP_S = 20.0


def segments(rows: list[dict], gap_s: float = GAP_S) -> list[list[dict]]:
    """Telemetry rows split where consecutive steps are more than ``gap_s`` apart.

    >>> [len(s) for s in segments([{"t": 0.0}, {"t": 1.0}, {"t": 30.0}])]
    [2, 1]
    """
    out: list[list[dict]] = []
    for row in rows:
        if not out or row["t"] - out[-1][-1]["t"] > gap_s:
            out.append([])
        out[-1].append(row)
    return out


def by_k(rows: list[dict], batch: int) -> dict[str, dict]:
    """Per K: decode-only steps at ``batch`` and their median step, draft and target ms."""
    out = {}
    for k in sorted({r["k"] for r in rows}):
        sel = [r for r in rows if r["k"] == k and r["B"] == batch and not r.get("prefill")]
        if sel:
            out[str(k)] = {"steps": len(sel)} | {
                f"{key}_ms": round(1000 * statistics.median(r.get(f"{key}_s") or 0.0 for r in sel), 2)
                for key in ("step", "draft", "target")
            }
    return out


def server_drift(telemetry: Path, batch: int) -> dict:
    rows = [json.loads(line) for line in telemetry.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "B" in r and "step_s" in r]
    if not rows:
        raise SystemExit(f"{telemetry}: no step rows.")
    t0 = rows[0]["t"]
    segs = [
        {"start_s": round(s[0]["t"] - t0, 1), "end_s": round(s[-1]["t"] - t0, 1), "by_k": by_k(s, batch)}
        for s in segments(rows)
    ]
    # The drift: one K every segment played most, its median step relative to the first segment's.
    common = set.intersection(*(set(s["by_k"]) for s in segs))
    if common:
        k = max(common, key=lambda key: sum(s["by_k"][key]["steps"] for s in segs))
        first = segs[0]["by_k"][k]["step_ms"]
        drift = {"k": int(k), "step_ms": [s["by_k"][k]["step_ms"] for s in segs]}
        drift["relative"] = [round(ms / first, 3) for ms in drift["step_ms"]]
    else:
        drift = None
    return {"segments": segs, "drift": drift}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sweep", type=Path, help="a live sweep's folder (its servers' telemetry.jsonl under it)")
    p.add_argument("--batch", type=int, required=True, help="the B whose steps are compared (the point's concurrency)")
    args = p.parse_args(argv)
    logs = sorted(args.sweep.rglob("telemetry.jsonl"))
    if not logs:
        raise SystemExit(f"{args.sweep}: no telemetry.jsonl under it (the runs/ folders are not committed).")
    servers = {str(log.parent.relative_to(args.sweep)): server_drift(log, args.batch) for log in logs}
    report = {"provenance": provenance(), "batch": args.batch, "gap_s": GAP_S, "servers": servers}
    atomic_write_text(args.sweep / "clock_drift.json", json.dumps(report, indent=1) + "\n")
    lines = [
        f"# Machine speed over the sweep, B = {args.batch}",
        "",
        f"Made by `experiments/clock_drift.py` at commit `{report['provenance'].get('commit', '?')[:7]}`. "
        "Per server, the median decode step at one K in each run (segment), and per segment each K's steps.",
        "",
        "| server | K | median step per run (ms) | relative to the first | per run: K (steps, step / draft / target ms) |",
        "|---|---:|---|---|---|",
    ]
    for name, s in servers.items():
        d = s["drift"]
        per_run = "; ".join(
            ", ".join(
                f"K={k} ({v['steps']}, {v['step_ms']:.0f}/{v['draft_ms']:.0f}/{v['target_ms']:.0f})"
                for k, v in seg["by_k"].items()
            )
            for seg in s["segments"]
        )
        if d is None:
            lines.append(f"| {name} | - | - | - | {per_run} |")
        else:
            ms = ", ".join(f"{x:.1f}" for x in d["step_ms"])
            rel = ", ".join(f"{x:.2f}" for x in d["relative"])
            lines.append(f"| {name} | {d['k']} | {ms} | {rel} | {per_run} |")
    atomic_write_text(args.sweep / "clock_drift.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How long `banditk fit` takes on a 50,000-step trace (issue 5: under 5 minutes on this machine).

Records a random-K simulator trace of one shipped-prior row (make_priors' trace, with longer
phases), then times the CLI end to end as a user runs it: trace parsing, the latency-shape
search, inference (``--method auto``: SVI above 20,000 steps; ``--method nuts`` as well,
since it is the slower one) and the posterior predictive check. Writes
results/priors/fit_speed.json.

    python experiments/fit_speed.py [--row mtp-qwen3.6] [--hardware gb10] [--steps 50000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "experiments"))

import make_priors  # noqa: E402

from banditk.io.atomic import atomic_write_text  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--row", default="mtp-qwen3.6", help="a row of make_priors.ROWS (default mtp-qwen3.6)")
    p.add_argument("--hardware", default="gb10")
    p.add_argument("--steps", type=int, default=50_000, help="trace length (default 50,000)")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "priors" / "fit_speed.json")
    args = p.parse_args(argv)
    rows = {r[0]: r for r in make_priors.ROWS}
    if args.row not in rows:
        p.error(f"--row must be one of {sorted(rows)}, got {args.row!r}")
    if args.steps < 1000:
        p.error(f"--steps must be at least 1000, got {args.steps}")
    result = {"row": args.row, "hardware": args.hardware, "cpus": os.cpu_count(), "runs": []}
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        per_phase = -(-args.steps // len(make_priors.TRACE_PHASES))
        t0 = time.monotonic()
        result["trace_steps"] = make_priors.record_trace(rows[args.row], args.hardware, trace, per_phase)
        result["record_s"] = round(time.monotonic() - t0, 1)
        print(f"recorded {result['trace_steps']} steps in {result['record_s']} s", flush=True)
        for method in ("auto", "nuts"):
            cmd = [
                sys.executable,
                "-m",
                "banditk.tools.cli",
                "fit",
                str(trace),
                "--hardware",
                args.hardware,
                "-o",
                str(Path(tmp) / f"{method}.json"),
                "--method",
                method,
                "--force",
            ]
            t0 = time.monotonic()
            r = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.monotonic() - t0
            used = "svi" if "SVI" in r.stdout else "nuts"
            run = {
                "method": method,
                "inference": used,
                "wall_s": round(wall, 1),
                "exit": r.returncode,
                "under_5_min": wall < 300,
            }
            result["runs"].append(run)
            print(f"--method {method} ({used}): {wall:.0f} s, exit {r.returncode}", flush=True)
            if r.returncode != 0:
                run["stderr_tail"] = r.stderr[-600:]
    atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0 if all(r["exit"] == 0 for r in result["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())

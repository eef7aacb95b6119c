"""Why K changed: split a live run's K changes by cause, and measure its step clock.

    python experiments/switch_causes.py results/live/runs/bandit/telemetry.jsonl [--json OUT]
    python experiments/switch_causes.py LOG --window T0,T1     # only steps logged in [T0, T1]

For a telemetry log written by the vLLM adapter (``governor_config.telemetry_log``) it
prints, per 1,000 decided steps, the raw K changes and the oscillations of
docs/evaluation.md, the K changes by cause (fallback, bucket change, next to a prompt
chunk, a flip within one state next to a chunk, a decode-only flip within one state), the
decode-only flips per bucket, and the step clock's noise (:mod:`lab.live.clock`) in the
simulator's terms. ``--json`` writes the same numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402
from banditk.io.trace import read_trace  # noqa: E402
from banditk.switch_counts import log_switches  # noqa: E402
from lab.live.clock import clock_noise  # noqa: E402


def analyse(path: Path, t0: float = float("-inf"), t1: float = float("inf")) -> dict:
    sw = log_switches(path, t0, t1)
    if sw is None:
        raise SystemExit(f"switch_causes: {path} has fewer than two steps in the window; nothing to split.")
    tr = read_trace(path)
    return {
        "log": str(path),
        **sw,
        "clock": clock_noise(tr.batch, tr.k, tr.step_s, tr.prefill),
    }


def _window(text: str) -> tuple[float, float]:
    try:
        a, b = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--window must be T0,T1 (two unix times), got {text!r}") from None
    return a, b


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log", type=Path, help="a telemetry log (JSONL, banditk trace format)")
    p.add_argument("--window", type=_window, default=None, metavar="T0,T1", help="unix-time window of steps to count")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="also write the numbers as JSON")
    args = p.parse_args(argv)
    if not args.log.is_file():
        p.error(f"log {str(args.log)!r} is not a readable file")
    t0, t1 = args.window or (float("-inf"), float("inf"))
    r = analyse(args.log, t0, t1)
    c, n = r["change_causes"], r["decided_steps"]
    print(
        f"{n} decided steps: {r['k_switches_per_1000']:.1f} K changes and "
        f"{r['oscillations_per_1000']:.1f} oscillations per 1,000 steps"
    )
    for cause, count in c.items():
        print(f"  {cause:<12} {count:5d}  ({1000.0 * count / n:.1f} per 1,000)")
    print(f"  decode flips by bucket: {r['decode_flips_by_bucket']}")
    ck = r["clock"]
    if ck["cv"] is not None:
        print(
            f"clock: cv {ck['cv']:.3f}, lag-1 correlation {ck['ar1']:.2f}, "
            f"stalls {100 * ck['spike_p']:.2f}% of steps at +{100 * ck['spike_mean']:.0f}% on average"
        )
    if args.json:
        atomic_write_text(args.json, json.dumps({**r, "provenance": provenance()}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

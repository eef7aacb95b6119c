"""Soak the governor: one million steps with 100,000 requests passing through (the full form).

    python experiments/soak.py [--steps N] [--requests R]

Writes results/soak.json: RSS at start / middle / end, per-step governor time p50 / p99
at the start and at the end, and the sizes of the bounded structures. `make test` runs
a shortened form (tests/test_soak.py).
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from banditk.io.atomic import atomic_write_text  # noqa: E402
from lab.synthetic_soak import run_soak  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--out", type=Path, default=Path("results/soak.json"))
    a = p.parse_args()
    r = run_soak(a.steps, a.requests, a.concurrency, progress=True)
    atomic_write_text(a.out, json.dumps(r, indent=1) + "\n")
    for m in r["memory"]:
        print(
            f"step {m['step']:>9,}: rss {m['rss_mb']} MB, tracked requests {m['tracked_requests']}, "
            f"pending rows {m['pending_regression_rows']}"
        )
    print(f"governor time start {r['governor_time_start']}  end {r['governor_time_end']}  ({r['wall_s']} s)")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

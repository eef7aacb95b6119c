"""The noisy-clock test's run (tests/governor/test_noisy_clock.py) over many seeds.

Per seed: the last step the governor played another K than the 5%-better one, and the
oscillations per 1,000 steps after step 2,500 (the test's FIND_WITHIN). The test itself takes
four seeds; a lever that changes exploration is compared here on more.

    python experiments/noisy_clock_seeds.py --seeds 0-15 --out results/noisy-clock-seeds.json
    python experiments/noisy_clock_seeds.py --governor-config '{"explore_steps": 16}' ...
    python experiments/noisy_clock_seeds.py --variant relative-ridge --out ...   # a change under study
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
sys.path.insert(0, str(ROOT))  # the test it repeats, as tests.governor.test_noisy_clock
import cell_strength_variant  # noqa: E402

from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402
from banditk.switch_counts import switch_counts  # noqa: E402

#: The test whose clock, truth and run this script repeats.
TEST = "tests.governor.test_noisy_clock"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0-15", help="a range lo-hi, inclusive (default %(default)s)")
    p.add_argument("--governor-config", type=json.loads, default={}, help="GovernorConfig fields (JSON)")
    cell_strength_variant.add_argument(p)
    p.add_argument("--out", type=Path, required=True, help="report file (JSON)")
    args = p.parse_args(argv)
    if args.variant:
        cell_strength_variant.install(args.variant, with_defaults=True)
    lo, hi = (int(x) for x in args.seeds.split("-"))
    test = importlib.import_module(TEST)
    rows = []
    for seed in range(lo, hi + 1):
        ks = test.noisy_run(seed, **args.governor_config)
        off = np.flatnonzero(ks != test.TRUTH.best_k(test.B))
        late = ks[test.FIND_WITHIN :]
        osc = switch_counts(late, np.zeros(late.size), np.zeros(late.size))["oscillations_per_1000"]
        rows.append(
            {"seed": seed, "last_off_best": int(off[-1]) if off.size else -1, "late_oscillations_per_1000": osc}
        )
        print(rows[-1], flush=True)
    late = sum(r["last_off_best"] >= test.FIND_WITHIN for r in rows)
    report = {
        "provenance": provenance(),
        "governor_config": args.governor_config,
        "variant": args.variant,
        "find_within": test.FIND_WITHIN,
        "seeds_off_best_late": late,
        "per_seed": rows,
    }
    atomic_write_text(args.out, json.dumps(report, indent=1) + "\n")
    print(f"{late} of {len(rows)} seeds off the best K after step {test.FIND_WITHIN}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

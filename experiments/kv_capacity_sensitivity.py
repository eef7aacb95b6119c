"""How much one policy's throughput moves when the KV cache shrinks by a few hundred tokens.

Runs ``fixed:1`` on the long-tail context mix (``experiments/context_mix.py``) with the cache cut
by each of ``--cuts`` tokens, over ``--seeds`` seeds. A model whose result per seed swings while
the cut is a fraction of a percent of the cache, and whose median over seeds does not follow the
cut, is in a chaotic regime, where a handful of seeds cannot rank policies.

    python experiments/kv_capacity_sensitivity.py --out results/kv-capacity-sensitivity
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import context_mix  # noqa: E402
from pooled import run_pooled  # noqa: E402

from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402
from banditk.sim.engine import default_kv_capacity  # noqa: E402
from banditk.sim.run import run_policy  # noqa: E402

WARMUP = 200


def _job(a):
    c, seed, cut, steps, policy = a
    scn = context_mix._scenario("longtail", c, steps)
    cap = default_kv_capacity(scn)
    scn.workload["kv_capacity_tokens"] = cap - cut
    res = run_policy(scn, policy, seed=seed, steps=steps, warmup=WARMUP, keep_trace=True)
    return c, seed, cut, cap, res.summary["throughput_tok_s"], int(res.trace.preemptions.sum())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", default="128,256", help="points (default %(default)s)")
    p.add_argument("--cuts", default="0,128,384,768", help="KV tokens taken off the cache (default %(default)s)")
    p.add_argument("--seeds", type=int, default=16, help="seeds per point and cut (default %(default)s)")
    p.add_argument("--policy", default="fixed:1", help="the policy (default %(default)s)")
    p.add_argument("--steps", type=int, default=8000, help="steps per run (default %(default)s)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("results/kv-capacity-sensitivity"), help="folder, or a .json path")
    args = p.parse_args(argv)
    try:
        points = [int(x) for x in args.concurrency.split(",")]
        cuts = [int(x) for x in args.cuts.split(",")]
    except ValueError:
        p.error(f"--concurrency {args.concurrency!r} and --cuts {args.cuts!r} must be comma-separated integers")
    if args.seeds < 1 or any(c < 0 for c in cuts):
        p.error(f"--seeds must be >= 1 and --cuts >= 0 (got {args.seeds}, {args.cuts!r})")
    jobs = [(c, s, cut, args.steps, args.policy) for c in points for cut in cuts for s in range(args.seeds)]
    t0 = time.time()
    out = run_pooled(_job, jobs, args.workers, "kv-capacity-sensitivity")
    results = {}
    for c in points:
        for cut in cuts:
            runs = sorted((r for r in out if r[0] == c and r[2] == cut), key=lambda r: r[1])
            tput = np.array([r[4] for r in runs])
            results.setdefault(f"c{c}", {})[f"cut{cut}"] = {
                "kv_capacity_tokens": runs[0][3] - cut,
                "throughput_median": float(np.median(tput)),
                "throughput_per_seed": tput.round(1).tolist(),
                "preemptions_median": float(np.median([r[5] for r in runs])),
            }
        base = np.array(results[f"c{c}"][f"cut{cuts[0]}"]["throughput_per_seed"])
        for cut in cuts[1:]:
            row = results[f"c{c}"][f"cut{cut}"]
            # The same seed with a slightly smaller cache: how far one run moves.
            row["per_seed_change_vs_first_cut"] = (np.array(row["throughput_per_seed"]) / base - 1).round(3).tolist()
    report = {
        "provenance": provenance(),
        "scenario": str(context_mix.SCENARIOS["longtail"].relative_to(context_mix.ROOT)),
        "policy": args.policy,
        "steps": args.steps,
        "warmup": WARMUP,
        "seeds": args.seeds,
        "results": results,
        "wall_s": time.time() - t0,
    }
    path = args.out if args.out.suffix == ".json" else args.out / "report.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(report, indent=1) + "\n")
    for pt, rows in results.items():
        for cut, r in rows.items():
            moved = r.get("per_seed_change_vs_first_cut")
            spread = f", seeds moved {min(moved):+.0%} to {max(moved):+.0%}" if moved else ""
            print(
                f"{pt} {cut:8s} cache {r['kv_capacity_tokens']:7d}: median {r['throughput_median']:6.1f} tok/s{spread}"
            )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

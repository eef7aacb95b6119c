"""Where the bandit loses on the long-tail context mix: the K it plays, or what its mode reserves.

On ``experiments/scenarios/context/gemma4-h100nvl-longtail.json`` at high concurrency the KV cache
overflows and requests are preempted (recomputed). Each variant below runs the workload over
``--seeds`` seeds (the workload is chaotic there: one policy's seeds span 2x, so 3 seeds do not
rank policies). ``bandit`` with ``"k_set": [K]`` is the governed server pinned to K: next to
``fixed:K`` it prices the dynamic-K mode (which reserves lookahead for K_max, not K) apart from
the bandit's choice of K.

    python experiments/kv_pressure_probe.py --concurrency 128,256 --out results/kv-pressure-probe
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's banditk, not the one an editable install points at

from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402
from banditk.sim.run import run_policy  # noqa: E402

DEFAULT_VARIANTS = [
    ["fixed:1", "fixed:1", None],
    ["fixed:2", "fixed:2", None],
    ["bandit", "bandit", None],
    ["bandit k=1", "bandit", {"k_set": [1]}],
    ["bandit k=2", "bandit", {"k_set": [2]}],
    ["bandit kv-weight 1", "bandit", {"kv_pressure_weight": 1.0}],
]
WARMUP = 200


def _job(a):
    name, spec, config, c, seed, steps = a
    res = run_policy(
        context_mix._scenario("longtail", c, steps), spec, seed=seed, steps=steps, warmup=WARMUP,
        governor_config=config, keep_trace=True,
    )  # fmt: skip
    s = res.summary
    return name, c, seed, s["throughput_tok_s"], int(res.trace.preemptions.sum()), s["server_mode"], s["mean_k"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--concurrency", default="128,256", help="points (default %(default)s)")
    p.add_argument("--seeds", type=int, default=10, help="seeds per variant and point (default %(default)s)")
    p.add_argument("--variants", type=json.loads, default=DEFAULT_VARIANTS, help="JSON [[name, policy, config], ...]")
    p.add_argument("--steps", type=int, default=8000, help="steps per run, as context_mix.py (default %(default)s)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("results/kv-pressure-probe"))
    args = p.parse_args(argv)
    points = [int(x) for x in args.concurrency.split(",")]
    jobs = [
        (n, s, cfg, c, seed, args.steps) for c in points for n, s, cfg in args.variants for seed in range(args.seeds)
    ]
    t0 = time.time()
    out = run_pooled(_job, jobs, args.workers, "kv-pressure-probe")
    results = {}
    for c in points:
        for name, _, _ in args.variants:
            runs = sorted((r for r in out if r[0] == name and r[1] == c), key=lambda r: r[2])
            tput, pre = np.array([r[3] for r in runs]), np.array([r[4] for r in runs])
            results.setdefault(f"c{c}", {})[name] = {
                "server_mode": runs[0][5],
                "throughput_median": float(np.median(tput)),
                "throughput_range": [float(tput.min()), float(tput.max())],
                "preemptions_median": float(np.median(pre)),
                "mean_k_median": float(np.median([r[6] for r in runs])),
                "throughput_per_seed": tput.round(2).tolist(),
            }
    report = {
        "provenance": provenance(),
        "scenario": str(context_mix.SCENARIOS["longtail"].relative_to(context_mix.ROOT)),
        "steps": args.steps,
        "warmup": WARMUP,
        "seeds": args.seeds,
        "variants": args.variants,
        "results": results,
        "wall_s": time.time() - t0,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "report.json", json.dumps(report, indent=1) + "\n")
    for pt, rows in results.items():
        print(pt)
        for name, r in rows.items():
            lo, hi = r["throughput_range"]
            print(
                f"  {name:20s} {r['server_mode']:12s} median {r['throughput_median']:6.1f} tok/s "
                f"(range {lo:6.1f}-{hi:6.1f}), preemptions {r['preemptions_median']:.0f}, mean K {r['mean_k_median']:.2f}"
            )
    print(f"wrote {args.out / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

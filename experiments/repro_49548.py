"""Reproduce vLLM #49548 on the simulator: the batch-size table collapses throughput.

GB10 + Qwen3.5-122B-A10B INT4 + MTP K=2, 8 concurrent 180-token requests, the
table ``[[1,4,2],[5,512,0]]`` against static K=2, nospec and the bandit, and a
concurrency sweep. Mechanisms reproduced:

1. vLLM's table is looked up on every scheduled request, prefills included, so
   at 8 concurrent the table gives K = 0 (and K flips near its threshold);
2. the dynamic-K mode forces PIECEWISE cudagraphs (14% single stream in #49548);
3. K = 0 still runs MTP's cache-sync forward, so the table is below nospec.

Calibration targets (#49548): single stream 59.6 tok/s (FULL) and 50.0 tok/s
(PIECEWISE), static K=2 at c=8 ~232 tok/s; each must be within 20%.

    python experiments/repro_49548.py [--quick] [--out results/repro-49548]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's banditk, not the one an editable install points at

from banditk.sim.run import run_policy  # noqa: E402
from banditk.sim.scenario import load_scenario  # noqa: E402

SCN = Path(__file__).resolve().parent / "scenarios" / "49548.json"
TARGETS = {"single_stream_full": 59.6, "single_stream_piecewise": 50.0, "static_k2_c8": 232.0}
MEASURED_TABLE_C8 = (24.0, 157.0)


OPEN = Path(__file__).resolve().parent / "scenarios" / "open-loop-gb10.json"


def _job(a):
    c, spec, seed, steps, warm = a
    if c == "open":
        scn = load_scenario(OPEN)
    else:
        scn = load_scenario(SCN).with_workload(concurrency=c)
    return c, spec, seed, run_policy(scn, spec, seed=seed, steps=steps, warmup=warm).summary


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1 seed, shorter runs")
    ap.add_argument("--out", default="results/repro-49548")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    seeds = (0,) if a.quick else (0, 1, 2)
    steps, warm = (800, 100) if a.quick else (2200, 200)
    conc = (1, 2, 4, 5, 6, 8, 12, 16)
    pols = ("table", "fixed:2", "nospec", "bandit")
    jobs = [(c, p, s, steps, warm) for c in conc for p in pols for s in seeds]
    jobs += [(1, "table:[[1,512,2]]", s, steps, warm) for s in seeds]
    # Open loop (Poisson arrivals): the scheduled count crosses the table's threshold, so K flips.
    jobs += [("open", p, s, 2 * steps, warm) for p in ("table", "fixed:2", "bandit") for s in seeds]
    t0 = time.time()
    res: dict = {}
    with mp.get_context("fork").Pool(a.workers) as pool:
        for i, (c, p, _s, summ) in enumerate(pool.imap_unordered(_job, jobs), 1):
            res.setdefault((c, p), []).append(summ)
            sys.stderr.write(f"\r[repro-49548] {i}/{len(jobs)} runs {time.time() - t0:4.0f}s")
    sys.stderr.write("\n")

    def med(c, p, m="throughput_tok_s"):
        return float(np.median([r[m] for r in res[(c, p)]]))

    calib = {
        "single_stream_full": med(1, "fixed:2"),
        "single_stream_piecewise": med(1, "table:[[1,512,2]]"),
        "static_k2_c8": med(8, "fixed:2"),
    }
    errors = {k: calib[k] / TARGETS[k] - 1 for k in calib}
    table8, static8, nospec8, bandit8 = med(8, "table"), med(8, "fixed:2"), med(8, "nospec"), med(8, "bandit")
    checks = [
        {
            "check": f"calibration {k} within 20% of {TARGETS[k]} tok/s",
            "value": round(calib[k], 1),
            "error": round(errors[k], 3),
            "status": "pass" if abs(errors[k]) <= 0.2 else "fail",
        }
        for k in calib
    ] + [
        {
            "check": "table collapses against static K=2 at c=8 (< 0.7x)",
            "value": round(table8 / static8, 3),
            "status": "pass" if table8 < 0.7 * static8 else "fail",
        },
        {
            "check": "table at c=8 below nospec (K=0 still pays the cache-sync forward + PIECEWISE)",
            "value": round(table8 / nospec8, 3),
            "status": "pass" if table8 < nospec8 else "fail",
        },
        {
            "check": "open loop: table flips K more than docs/evaluation.md allows at stationary load (> 2 switches/1000)",
            "value": round(med("open", "table", "k_switches_per_1000"), 1),
            "status": "pass" if med("open", "table", "k_switches_per_1000") > 2 else "fail",
        },
        {
            "check": "open loop: table p99 TPOT >= 1.5x static K=2 (K=0 keeps more requests in flight)",
            "value": round(med("open", "table", "tpot_p99_s") / med("open", "fixed:2", "tpot_p99_s"), 3),
            "status": "pass"
            if med("open", "table", "tpot_p99_s") >= 1.5 * med("open", "fixed:2", "tpot_p99_s")
            else "fail",
        },
        {
            "check": "bandit >= table at c=8",
            "value": round(bandit8 / table8, 3),
            "status": "pass" if bandit8 >= table8 else "fail",
        },
        {
            "check": "bandit >= 0.97 x static K=2 at c=8",
            "value": round(bandit8 / static8, 3),
            "status": "pass" if bandit8 >= 0.97 * static8 else "fail",
        },
    ]
    sweep = {
        p: {
            c: {m: med(c, p, m) for m in ("throughput_tok_s", "tpot_p99_s", "k_switches_per_1000", "mean_k")}
            for c in conc
        }
        for p in pols
    }
    report = {
        "scenario": str(SCN),
        "seeds": list(seeds),
        "steps": steps,
        "warmup": warm,
        "mechanisms": [
            "vLLM's table is looked up on num_scheduled (prefills counted): at 8 concurrent K=0 every step",
            "dynamic-K mode forces PIECEWISE cudagraphs (per-layer launch overhead)",
            "K=0 still runs MTP's cache-sync forward, so the table falls below nospec",
        ],
        "not_reproduced": (
            f"#49548 measured {MEASURED_TABLE_C8[0]}-{MEASURED_TABLE_C8[1]} tok/s for the table at c=8; "
            "the simulator reproduces the upper end. The low end (24 tok/s) needs a mechanism the "
            "simulator does not model (e.g. recompilation or graph capture on K flips)."
        ),
        "calibration": {k: {"sim": calib[k], "target": TARGETS[k], "error": errors[k]} for k in calib},
        "c8": {
            "table": table8,
            "fixed:2": static8,
            "nospec": nospec8,
            "bandit": bandit8,
            "table_k_switches_per_1000": med(8, "table", "k_switches_per_1000"),
            "bandit_k_switches_per_1000": med(8, "bandit", "k_switches_per_1000"),
        },
        "open_loop": {
            p: {
                m: med("open", p, m)
                for m in ("throughput_tok_s", "tpot_p99_s", "k_switches_per_1000", "mean_k", "ttft_p99_s")
            }
            for p in ("table", "fixed:2", "bandit")
        },
        "sweep": sweep,
        "checks": checks,
        "wall_s": time.time() - t0,
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for p in pols:
        axes[0].plot(conc, [sweep[p][c]["throughput_tok_s"] for c in conc], marker="o", label=p)
        axes[1].plot(conc, [sweep[p][c]["k_switches_per_1000"] for c in conc], marker="o", label=p)
    axes[0].axhline(232, ls=":", c="k", lw=1, label="#49548 static K=2 (232)")
    axes[0].set(xlabel="concurrency", ylabel="output tok/s", title="#49548 on the simulator")
    axes[1].set(xlabel="concurrency", ylabel="K switches / 1000 steps", title="K switches")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "throughput_vs_concurrency.png", dpi=110)
    print(f"{'c':>3} " + " ".join(f"{p:>10}" for p in pols))
    for c in conc:
        print(f"{c:>3} " + " ".join(f"{sweep[p][c]['throughput_tok_s']:>10.1f}" for p in pols))
    print(
        f"K switches/1000 at c=8: table {report['c8']['table_k_switches_per_1000']:.1f}, "
        f"bandit {report['c8']['bandit_k_switches_per_1000']:.1f}; at c=4: table "
        f"{sweep['table'][4]['k_switches_per_1000']:.1f}, c=5: {sweep['table'][5]['k_switches_per_1000']:.1f}"
    )
    for p, d in report["open_loop"].items():
        print(
            f"open loop 0.6 req/s {p:>8}: {d['throughput_tok_s']:.1f} tok/s, p99 TPOT {1e3 * d['tpot_p99_s']:.1f} ms,"
            f" K switches/1000 {d['k_switches_per_1000']:.1f}, mean K {d['mean_k']:.2f}"
        )
    for c in checks:
        print(
            f"{c['status'].upper():>5}  {c['check']}: {c['value']}"
            + (f" (error {100 * c['error']:+.1f}%)" if "error" in c else "")
        )
    print(f"report: {out / 'report.json'}\nplot: {out / 'throughput_vs_concurrency.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

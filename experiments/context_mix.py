"""Does K that follows context pay? ``bandit+context`` against ``bandit`` where the context moves.

Two workloads on the #49986 setup (H100 NVL, gemma-4-31B-it-qat-FP8, assistant drafter), at
concurrency 8, 32, 128 and 256:

- ``phases`` (``experiments/scenarios/context/gemma4-h100nvl-phases.json``): 400-token prompts,
  then 16,000, then 400, then 16,000, 2,000 steps each. The batch's mean context swings between
  the two, and at some concurrencies the best fixed K differs between them;
- ``longtail`` (``.../gemma4-h100nvl-longtail.json``): per-request log-normal prompt lengths up to
  131,072 tokens, so the mean context moves with which long requests are in the batch.

Policies: nospec, fixed:1..K_max, ``bandit`` (batch buckets only), ``bandit+context`` (batch x
context cells, ``DEFAULT_CONTEXT_EDGES``) and ``table-ctx``, a batch x context table (the shape of
vLLM #48944 / #54801) tuned offline: at each concurrency, the best fixed K of the stationary short
and long contexts (K = 0 where no speculation wins), the best such a static table can do.

Checks (issue 17): ``bandit+context`` >= 1.0x ``bandit`` at every point of every workload, and
>= 1.03x where the best fixed K differs between the phases' two contexts.

    python experiments/context_mix.py [--quick] [--out results/context-mix] [--workers 2]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pooled import run_pooled  # noqa: E402

from banditk.io.atomic import atomic_write_text  # noqa: E402
from banditk.io.provenance import provenance  # noqa: E402
from banditk.sim.run import run_policy  # noqa: E402
from banditk.sim.scenario import load_scenario  # noqa: E402

SCENARIOS = {
    "phases": ROOT / "experiments" / "scenarios" / "context" / "gemma4-h100nvl-phases.json",
    "longtail": ROOT / "experiments" / "scenarios" / "context" / "gemma4-h100nvl-longtail.json",
}
POINTS = (8, 32, 128, 256)
#: bandit+context over bandit: at least this everywhere, and GAIN where the best K differs.
NO_LOSS, GAIN = 1.0, 1.03
#: A table row's context bound between the phases' short and long contexts.
CTX_SPLIT = 2048


def _scenario(name: str, concurrency: int, steps: int):
    """The workload at ``concurrency``, its phases scaled to ``steps``."""
    s = copy.deepcopy(load_scenario(SCENARIOS[name]))
    s.workload["concurrency"] = concurrency
    for ph in s.phases:
        ph.at_step = ph.at_step * steps // s.steps
    s.steps = steps
    return s


def _stationary(concurrency: int, phase: int, steps: int):
    """The phases workload held at one phase's context (0: the first, short; 1: the long one)."""
    s = _scenario("phases", concurrency, steps)
    wl = s.phases[0].workload if phase else {}
    s.workload.update({k: v for k, v in wl.items() if v is not None})
    s.phases = []
    return s


def _job(a):
    kind, name, c, spec, seed, steps, warm = a
    if kind == "stationary":
        scn = _stationary(c, name, steps)
        return kind, name, c, spec, seed, run_policy(scn, spec, seed=seed, steps=steps, warmup=warm).summary, None
    res = run_policy(_scenario(name, c, steps), spec, seed=seed, steps=steps, warmup=warm, keep_trace=seed == 0)
    ks = None
    if res.trace is not None:  # seed 0: the K taken most in each quarter (a phase), for the report
        quarters = np.array_split(res.trace.k, 4)
        ks = [int(np.bincount(q[q >= 0], minlength=1).argmax()) for q in quarters]
    return kind, name, c, spec, seed, res.summary, ks


def tuned_table(best_short: int, best_long: int) -> str:
    """A batch x context table playing the best fixed K of each context at every batch size.

    >>> tuned_table(1, 2)
    'table-ctx:[[1,100000,0,2047,1],[1,100000,2048,100000000,2]]'
    """
    rows = [[1, 100_000, 0, CTX_SPLIT - 1, best_short], [1, 100_000, CTX_SPLIT, 100_000_000, best_long]]
    return "table-ctx:" + json.dumps(rows, separators=(",", ":"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="experiments/context_mix.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="1 seed, half-length runs, two points")
    ap.add_argument("--out", default="results/context-mix", help="output folder (default results/context-mix)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    a = ap.parse_args(argv)
    seeds = (0,) if a.quick else (0, 1, 2)
    points = (8, 128) if a.quick else POINTS
    steps, warm, st_steps = (4000, 200, 1200) if a.quick else (8000, 200, 2200)
    k_max = load_scenario(SCENARIOS["phases"]).k_max
    fixed = ["nospec", *(f"fixed:{k}" for k in range(1, k_max + 1))]
    t0 = time.time()
    # 1. The stationary contexts: the best fixed K of each, and the table tuned on them.
    jobs = [("stationary", ph, c, p, s, st_steps, warm) for ph in (0, 1) for c in points for p in fixed for s in seeds]
    st: dict = {}
    for _, ph, c, p, _s, summ, _ in run_pooled(_job, jobs, a.workers, "context-mix"):
        st.setdefault((ph, c, p), []).append(summ["throughput_tok_s"])
    best: dict = {}
    for c in points:
        tput = [{p: float(np.median(st[(ph, c, p)])) for p in fixed} for ph in (0, 1)]
        best[c] = [max(fixed, key=t.get) for t in tput] + tput
    # 2. Both workloads, every policy.
    tables = {c: tuned_table(*(0 if b == "nospec" else int(b.split(":")[1]) for b in best[c][:2])) for c in points}
    pols = [*fixed, "bandit", "bandit+context", "table-ctx"]
    jobs = [
        ("workload", name, c, tables[c] if p == "table-ctx" else p, s, steps, warm)
        for name in SCENARIOS
        for c in points
        for p in pols
        for s in seeds
    ]
    runs: dict = {}
    ks: dict = {}
    for _, name, c, spec, _s, summ, k in run_pooled(_job, jobs, a.workers, "context-mix"):
        p = "table-ctx" if spec.startswith("table-ctx") else spec
        runs.setdefault((name, c, p), []).append(summ)
        if k is not None:
            ks[(name, c, p)] = k
    report_points: dict = {}
    checks = []
    for name in SCENARIOS:
        for c in points:
            med = {p: float(np.median([r["throughput_tok_s"] for r in runs[(name, c, p)]])) for p in pols}
            spread = {
                p: [float(min(r["throughput_tok_s"] for r in runs[(name, c, p)])),
                    float(max(r["throughput_tok_s"] for r in runs[(name, c, p)]))]
                for p in pols
            }  # fmt: skip
            ratio = med["bandit+context"] / med["bandit"]
            differs = best[c][0] != best[c][1]
            report_points[f"{name}/c{c}"] = {
                "throughput_tok_s": med,
                "min_max_tok_s": spread,
                "context_vs_flat": ratio,
                "vs_best_fixed": {p: med[p] / max(med[f] for f in fixed) for p in pols},
                "k_switches_per_1000": {
                    p: float(np.median([r["k_switches_per_1000"] for r in runs[(name, c, p)]])) for p in pols
                },
                # Where the cache thrashes, throughput follows preemption more than K's step time.
                "preemptions": {p: float(np.median([r["preemptions"] for r in runs[(name, c, p)]])) for p in pols},
                "modal_k_per_quarter_seed0": {p: ks.get((name, c, p)) for p in ("bandit", "bandit+context")},
                "best_fixed_short_long": best[c][:2],
                "table_ctx": tables[c],
            }
            checks.append({
                "check": f"{name} c={c}: bandit+context >= {NO_LOSS:.2f}x bandit",
                "value": round(ratio, 4),
                "status": "pass" if ratio >= NO_LOSS else "fail",
            })  # fmt: skip
            if name == "phases" and differs:
                checks.append({
                    "check": f"{name} c={c}: bandit+context >= {GAIN:.2f}x bandit (best fixed K "
                    f"{best[c][0]} at 400, {best[c][1]} at 16,000)",
                    "value": round(ratio, 4),
                    "status": "pass" if ratio >= GAIN else "fail",
                })  # fmt: skip
    report = {
        "scenarios": {k: str(v.relative_to(ROOT)) for k, v in SCENARIOS.items()},
        "provenance": provenance(),
        "quick": a.quick,
        "seeds": list(seeds),
        "steps": steps,
        "warmup": warm,
        "stationary_steps": st_steps,
        "points": list(points),
        "policies": pols,
        "stationary": {
            str(c): {"best_short": best[c][0], "best_long": best[c][1], "short": best[c][2], "long": best[c][3]}
            for c in points
        },
        "results": report_points,
        "checks": checks,
        "wall_s": time.time() - t0,
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "report.json", json.dumps(report, indent=1) + "\n")
    plot(report, out)
    atomic_write_text(out / "README.md", readme(report))
    print(readme(report))
    return 0


def plot(report: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for name, marker in (("phases", "o"), ("longtail", "s")):
        cs = report["points"]
        for p, color in (("bandit", "C0"), ("bandit+context", "C3"), ("table-ctx", "C2")):
            ys = [report["results"][f"{name}/c{c}"]["vs_best_fixed"][p] for c in cs]
            ax.plot(cs, ys, marker=marker, color=color, ls="-" if name == "phases" else "--", label=f"{p} ({name})")
    ax.axhline(1.0, c="k", lw=0.8, ls=":")
    ax.set(xscale="log", xlabel="concurrency", ylabel="throughput / best fixed K (or nospec)")
    ax.set_title("Context that moves: H100 NVL, Gemma-4-31B FP8 (simulated)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    tmp = out / ".context_mix.tmp.png"
    fig.savefig(tmp, dpi=110)
    tmp.replace(out / "context_mix.png")
    plt.close(fig)


def readme(report: dict) -> str:
    pols = report["policies"]
    lines = [
        "# K that follows context: bandit+context against bandit (simulated)",
        "",
        "Made by `experiments/context_mix.py` (`python experiments/regenerate.py --only context-mix`); "
        f"commit `{report['provenance']['commit'][:7]}`, {len(report['seeds'])} seed(s), {report['steps']} steps "
        f"({report['warmup']} warm-up). Output tok/s, median over seeds.",
        "",
        "| workload | C | " + " | ".join(pols) + " | context / flat | best K short, long |",
        "|---|---:|" + "---:|" * len(pols) + "---:|---|",
    ]
    for key, r in report["results"].items():
        name, c = key.split("/")
        row = " | ".join(f"{r['throughput_tok_s'][p]:.0f}" for p in pols)
        bs = ", ".join(r["best_fixed_short_long"])
        lines.append(f"| {name} | {c[1:]} | {row} | {r['context_vs_flat']:.3f} | {bs} |")
    lines += [
        "",
        "Preemptions over each run, warm-up included (median over seeds). Where they grow, the KV cache",
        "thrashes and throughput follows them more than the step time of K; a governed server also gives",
        "cache to one FULL graph ladder per K (`graph_ladder_gib`), a fixed-K server to one.",
        "",
        "| workload | C | " + " | ".join(pols) + " |",
        "|---|---:|" + "---:|" * len(pols),
    ]
    for key, r in report["results"].items():
        if "preemptions" in r:
            name, c = key.split("/")
            lines.append(f"| {name} | {c[1:]} | " + " | ".join(f"{r['preemptions'][p]:.0f}" for p in pols) + " |")
    lines += ["", "| check | value | status |", "|---|---|---|"]
    lines += [f"| {c['check']} | {c['value']} | {c['status'].upper()} |" for c in report["checks"]]
    lines += [
        "",
        "`best K short, long`: the best of nospec and fixed:1..K_max with the phases workload held at its",
        "400-token and at its 16,000-token context. `table-ctx` plays those two at every batch size.",
        "`modal_k_per_quarter_seed0` in report.json: the K each bandit took most in each phase (seed 0).",
        "",
        "![context mix](context_mix.png)",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

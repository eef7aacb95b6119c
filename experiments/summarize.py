"""Summarise protocol reports: one line per scenario, the numbers a note needs.

python experiments/summarize.py results/sweep-*/report.json [--markdown]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path


def _ratios(rep: dict, subject: str, other) -> list[float]:
    out = []
    for _lab, d in rep["results"].items():
        if subject not in d:
            continue
        if any(p not in d for p in ("nospec", "oracle")):
            continue
        o = other(d)
        if o:
            out.append(d[subject]["throughput_tok_s"]["median"] / o)
    return out


def summarize(rep: dict, subject: str = "bandit") -> dict:
    def best_fixed(d):
        return max(v["throughput_tok_s"]["median"] for p, v in d.items() if p.startswith("fixed:"))

    res = rep["results"]
    checks = [c for c in rep["checks"] if c["policy"] == subject]
    fails = Counter(c["check"] for c in checks if c["status"] == "fail")
    reg = rep.get("regret", {}).get(subject, {}).get("final", {}).get("median")
    settle = rep.get("convergence", {}).get(subject, {}).get("steps_to_settle")
    sw = [d[subject]["k_switches_per_1000"]["median"] for d in res.values() if subject in d]
    vs_nospec = _ratios(rep, subject, lambda d: d["nospec"]["throughput_tok_s"]["median"])
    vs_fixed = _ratios(rep, subject, best_fixed)
    ceiling = _ratios(rep, "oracle", best_fixed) if all("oracle" in d for d in res.values()) else []
    vs_table = _ratios(
        rep, subject, lambda d: next(v["throughput_tok_s"]["median"] for p, v in d.items() if p.startswith("table"))
    )
    return {
        "scenario": rep["scenario_name"],
        "pass": sum(c["status"] == "pass" for c in checks),
        "fail": sum(c["status"] == "fail" for c in checks),
        "not_run": sum(c["status"] == "not_run" for c in checks),
        "fails_by_check": dict(fails),
        "vs_nospec": (min(vs_nospec), max(vs_nospec)),
        "vs_best_fixed": (min(vs_fixed), max(vs_fixed)),
        "oracle_vs_best_fixed": (min(ceiling), max(ceiling)) if ceiling else None,
        "vs_table": (min(vs_table), max(vs_table)),
        "switches_per_1000": (min(sw), max(sw)),
        "regret_20k": reg,
        "steps_to_settle": settle,
        "wall_s": rep["wall_s"],
    }


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--subject", default="bandit")
    a = ap.parse_args()
    rows = [summarize(json.loads(Path(p).read_text()), a.subject) for p in a.reports]
    f2 = lambda t: "-" if t is None else f"{t[0]:.2f}-{t[1]:.2f}"  # noqa: E731
    print(
        f"| scenario | pass/fail | {a.subject}/nospec | /best fixed | oracle/best fixed | /table | "
        "switches/1000 | regret 20k | settle | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['scenario']} | {r['pass']}/{r['fail']} | {f2(r['vs_nospec'])} | {f2(r['vs_best_fixed'])} | "
            f"{f2(r['oracle_vs_best_fixed'])} | {f2(r['vs_table'])} | "
            f"{r['switches_per_1000'][0]:.0f}-{r['switches_per_1000'][1]:.0f} | "
            f"{_pct(r['regret_20k'])} | "
            f"{r['steps_to_settle']} | {r['wall_s']:.0f} |"
        )
    for r in rows:
        print(f"{r['scenario']}: failing checks {r['fails_by_check']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

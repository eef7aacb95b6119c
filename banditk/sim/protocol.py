"""docs/evaluation.md's simulator protocol for one scenario.

Three parts, all run in a worker pool:

1. the concurrency sweep: every policy at C in :data:`POINTS` (prompt 512,
   output 256) plus the #49548 shape (8 concurrent, 180 output tokens),
   200 warm-up + 2,000 measured steps, 3 seeds; median and spread;
2. regret: the scenario as written (its phases too) for 20,000 steps;
3. convergence: concurrency stepping up and down, steps to settle.

The report has every policy x point x metric, the thresholds, and pass/fail
(or ``not_run``) per check.

Every policy runs in its own server's mode (:mod:`banditk.sim.policies`); ``server_modes``
names it per policy. Where the hardware has graphs and the governed policies run FULL
(Model Runner V2), ``bandit`` and ``bandit+prior`` also run as ``<policy>@PIECEWISE`` (the
same governor on vLLM's V1 runner) at every point: the mode twins, side by side in
``mode_comparison``. They are informational: no threshold check applies to them, and the
checks of the default-mode policies do not see them.
"""

from __future__ import annotations

import copy
import math
import multiprocessing as mp
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

from banditk.core.errors import ConfigError
from banditk.core.server_mode import FULL, PIECEWISE
from banditk.io.provenance import provenance
from banditk.sim import checks
from banditk.sim.adaptive_verification import GOVERNED_SPEC as BANDIT_AV
from banditk.sim.adaptive_verification import SPEC as AV_SPEC
from banditk.sim.policies import build_policy, find_shipped_prior, runs_adaptive_verification, split_mode
from banditk.sim.run import run_policy
from banditk.sim.scenario import Phase, Scenario

POINTS = (1, 2, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
QUICK_POINTS = (1, 8, 32)
SHAPE_49548 = "c8-out180"
#: Governed policies that also run as their PIECEWISE twin (``bandit@PIECEWISE``).
TWINNED = ("bandit", "bandit+prior")


@dataclass
class ProtocolConfig:
    """How much of the protocol to run (defaults: the full protocol)."""

    points: tuple[int, ...] = POINTS
    seeds: tuple[int, ...] = (0, 1, 2)
    warmup: int = 200
    measured: int = 2000
    regret_steps: int = 20000
    convergence_levels: tuple[int, ...] = (4, 32, 4, 64, 8)
    convergence_phase_steps: int = 2000
    workers: int = 2
    include_49548_shape: bool = True
    policies: tuple[str, ...] | None = None
    prior_path: str | None = None
    quick: bool = False
    mode_twins: bool = True

    @classmethod
    def quick_mode(cls, **kw) -> ProtocolConfig:
        """A CI-sized protocol: 3 points, 1 seed, short runs (results are not the protocol's)."""
        base = dict(
            points=QUICK_POINTS,
            seeds=(0,),
            warmup=100,
            measured=600,
            regret_steps=3000,
            convergence_levels=(4, 32, 4),
            convergence_phase_steps=800,
            quick=True,
        )
        base.update(kw)
        return cls(**base)


def default_policies(scn: Scenario, prior_path: str | None) -> list[str]:
    """nospec, fixed:1..K_max, table, ucb, the peers, bandit, bandit+prior (if a prior exists), oracle;
    where vLLM's adaptive verification runs (:func:`runs_adaptive_verification`), it joins the peers
    and ``bandit+av`` (the bandit's K, adaptive verification trimming inside it) the subjects."""
    av = runs_adaptive_verification(scn)
    pols = (
        ["nospec"]
        + [f"fixed:{k}" for k in range(1, scn.k_max + 1)]
        + ["table", "ucb", "peer:sglang", "peer:vllm-adaptive-k", *([AV_SPEC] if av else []), "bandit"]
    )
    if prior_path or find_shipped_prior(scn):
        pols.append("bandit+prior")
    return pols + ([BANDIT_AV] if av else []) + ["oracle"]


def mode_twins(scn: Scenario, pols: list[str], prior_path: str | None = None) -> list[str]:
    """``<policy>@PIECEWISE`` for each of :data:`TWINNED` in ``pols`` that runs FULL on ``scn``.

    None where the hardware has no graphs (every mode is NONE there) or the governed server
    is PIECEWISE already (a drafter Model Runner V2 cannot serve), or where ``pols`` names the
    twin itself.
    """
    out = []
    for p in pols:
        twin = f"{p}@{PIECEWISE}"
        if p not in TWINNED or twin in pols:
            continue
        try:
            mode = build_policy(p, scn, prior_path=prior_path if p == "bandit+prior" else None).graph_mode
        except (ConfigError, ValueError):  # the policy's own runs report why it cannot be built
            continue
        if mode == FULL:
            out.append(twin)
    return out


def is_twin(spec: str) -> bool:
    """A mode twin (a spec with a mode suffix): informational, never a check's subject or peer."""
    return split_mode(spec)[1] is not None


def _job(args: tuple) -> tuple:
    kind, key, scn, spec, seed, steps, warmup, prior = args
    try:
        res = run_policy(
            scn,
            spec,
            seed=seed,
            steps=steps,
            warmup=warmup,
            # `bandit` is the flat prior (docs/evaluation.md); only `bandit+prior` starts from one
            # (and its mode twin `bandit+prior@PIECEWISE`).
            prior_path=prior if split_mode(spec)[0] == "bandit+prior" and prior else None,
            keep_trace=kind != "point",
        )
    except Exception as e:  # a failing policy is reported, not fatal to the protocol
        return kind, key, spec, seed, None, {"error": f"{type(e).__name__}: {e}"}
    extra = {}
    if kind == "regret":
        tr = res.trace
        cum_o = np.cumsum(tr.oracle_tokens)
        cum_r = np.cumsum(tr.oracle_tokens - tr.expected_tokens)
        idx = np.unique(np.linspace(0, steps - 1, 200).astype(int))
        extra = {
            "step": idx.tolist(),
            "regret_fraction": (cum_r[idx] / np.maximum(cum_o[idx], 1e-9)).tolist(),
            "regret_tokens": cum_r[idx].tolist(),
        }
    elif kind == "convergence":
        tr = res.trace
        extra = {"k": tr.k.tolist(), "k_star": tr.k_star.tolist(), "n_dec": tr.n_dec.tolist()}
    return kind, key, spec, seed, res.summary, extra


def _point_scenario(scn: Scenario, c: int, out: int) -> Scenario:
    s = scn.with_workload(concurrency=c, prompt_tokens=512, output_tokens=out)
    s.phases = []
    s.name = f"{scn.name}@c{c}-out{out}"
    return s


def _convergence_scenario(scn: Scenario, levels, per: int) -> Scenario:
    s = scn.with_workload(concurrency=levels[0], prompt_tokens=512, output_tokens=256)
    s.phases = [Phase(at_step=i * per, workload={"concurrency": c}) for i, c in enumerate(levels) if i > 0]
    s.name = f"{scn.name}@steps-" + "-".join(map(str, levels))
    return s


def _stats(values: list[float | None]) -> dict:
    v = np.array([x for x in values if x is not None], dtype=float)
    if not v.size:
        return {"median": None, "min": None, "max": None, "values": values}
    return {"median": float(np.median(v)), "min": float(v.min()), "max": float(v.max()), "values": values}


METRICS = (
    "throughput_tok_s",
    "tpot_p50_s",
    "tpot_p95_s",
    "tpot_p99_s",
    "ttft_p99_s",
    "k_switches_per_1000",
    "oscillations_per_1000",
    "regret_fraction",
    "mean_k",
    "preemptions",
)


def run_protocol(scn: Scenario, cfg: ProtocolConfig, *, progress: bool = True) -> dict:
    """Run the protocol for ``scn`` and return the report dict (see module doc)."""
    t0 = time.time()
    prior = cfg.prior_path or (str(find_shipped_prior(scn)) if find_shipped_prior(scn) else None)
    pols = list(cfg.policies) if cfg.policies else default_policies(scn, prior)
    twins = mode_twins(scn, pols, prior) if cfg.mode_twins else []
    for t in twins:  # each twin right after its default-mode policy
        pols.insert(pols.index(split_mode(t)[0]) + 1, t)
    steps = cfg.warmup + cfg.measured
    jobs = []
    points: list[tuple[str, int, int]] = [(f"c{c}", c, 256) for c in cfg.points]
    if cfg.include_49548_shape:
        points.append((SHAPE_49548, 8, 180))
    for label, c, out in points:
        s = _point_scenario(scn, c, out)
        for spec in pols:
            for seed in cfg.seeds:
                jobs.append(("point", label, s, spec, seed, steps, cfg.warmup, prior))
    regret_pols = [
        p for p in pols if p in ("bandit", "bandit+prior", "ucb", "peer:sglang", "peer:vllm-adaptive-k", "table")
    ]
    rs = copy.deepcopy(scn)
    for spec in regret_pols:
        for seed in cfg.seeds:
            jobs.append(("regret", "scenario", rs, spec, seed, cfg.regret_steps, cfg.warmup, prior))
    cs = _convergence_scenario(scn, cfg.convergence_levels, cfg.convergence_phase_steps)
    conv_steps = cfg.convergence_phase_steps * len(cfg.convergence_levels)
    for spec in [
        p for p in pols if p in ("bandit", "bandit+prior", BANDIT_AV, "ucb", "peer:sglang", "peer:vllm-adaptive-k")
    ]:
        jobs.append(("convergence", "steps", cs, spec, cfg.seeds[0], conv_steps, 0, prior))
    # Longest jobs first keeps both workers busy to the end.
    weight = {"point": 1, "regret": 10, "convergence": 5}
    jobs.sort(key=lambda j: -weight[j[0]] * j[5] * (1 + (j[2].workload.get("concurrency") or 8) / 64))
    results = []
    ctx = mp.get_context("fork") if sys.platform.startswith("linux") else mp.get_context()
    n = len(jobs)
    with ctx.Pool(max(1, cfg.workers)) as pool:
        for i, r in enumerate(pool.imap_unordered(_job, jobs), 1):
            results.append(r)
            if progress:
                el = time.time() - t0
                sys.stderr.write(f"\r[protocol {scn.name}] {i}/{n} runs  {el:5.0f}s  eta {el / i * (n - i):4.0f}s ")
                sys.stderr.flush()
    if progress:
        sys.stderr.write("\n")
    errors = [
        {"kind": kind, "point": key, "policy": spec, "seed": seed, "error": extra["error"]}
        for kind, key, spec, seed, summ, extra in results
        if summ is None
    ]
    results = [r for r in results if r[4] is not None]
    # Aggregate points.
    table: dict[str, dict[str, dict]] = {}
    for kind, key, spec, _seed, summ, _ in results:
        if kind == "point":
            table.setdefault(key, {}).setdefault(spec, []).append(summ)
    modes: dict[str, dict] = {}
    for kind, key, spec, _seed, summ, _ in results:
        if kind == "point":
            m = modes.setdefault(spec, {"graph_kv_tokens": {}})
            m.update({f: summ.get(f) for f in ("server_mode", "graph_mode", "graph_ladders")})
            m["graph_kv_tokens"][key] = summ.get("graph_kv_tokens")
    server_modes = {p: modes[p] for p in pols if p in modes}
    for m in server_modes.values():
        m["graph_kv_tokens"] = {lab: m["graph_kv_tokens"][lab] for lab, _, _ in points if lab in m["graph_kv_tokens"]}
    per_point: dict[str, dict[str, dict]] = {}
    for label, _, _ in points:
        per_point[label] = {}
        for spec in pols:
            runs = sorted(table.get(label, {}).get(spec, []), key=lambda s: s["seed"])
            if runs:
                per_point[label][spec] = {m: _stats([r[m] for r in runs]) for m in METRICS}
    med = {lab: {p: {m: v["median"] for m, v in d.items()} for p, d in pp.items()} for lab, pp in per_point.items()}
    # Every PIECEWISE-suffixed policy whose default-mode policy ran too: the automatic twins
    # and any the caller named in `policies`.
    paired = [p for p in pols if split_mode(p)[1] == PIECEWISE and split_mode(p)[0] in pols]
    comparison = _mode_comparison(med, paired, server_modes)
    # The checks see the default-mode policies only: a twin is neither a subject nor a peer.
    med = {lab: {p: d for p, d in pp.items() if not is_twin(p)} for lab, pp in med.items()}
    check_list: list[dict] = []
    subjects = [s for s in ("bandit", "bandit+prior", BANDIT_AV) if s in pols]
    for subj in subjects:
        for label, _, _ in points:
            check_list += checks.point_checks(med[label], label, subj)
        check_list += checks.geomean_checks({k: v for k, v in med.items() if k != SHAPE_49548}, subj)
    versus_av = _av_comparison({k: v for k, v in per_point.items() if k != SHAPE_49548}, subjects)
    # Regret.
    regret: dict[str, dict] = {}
    for kind, _, spec, seed, summ, extra in results:
        if kind == "regret":
            regret.setdefault(spec, {"runs": []})["runs"].append(
                {"seed": seed, "final": summ["regret_fraction"], "switches": summ["k_switches_per_1000"], **extra}
            )
    for d in regret.values():
        d["runs"].sort(key=lambda r: r["seed"])
        d["final"] = _stats([r["final"] for r in d["runs"]])
    for subj, key in (("bandit", "regret_fraction_flat_prior"), ("bandit+prior", "regret_fraction_shipped_prior")):
        v = regret.get(subj, {}).get("final", {}).get("median")
        note = f"{cfg.regret_steps} steps" + (" (quick mode: fewer than the protocol's 20,000)" if cfg.quick else "")
        if subj == "bandit+prior" and subj not in pols:
            note = "no shipped prior for this drafter class and hardware"
        check_list.append(
            checks._rec(
                key,
                subj,
                "scenario",
                v,
                checks.THRESHOLDS[key],
                None if v is None else v <= checks.THRESHOLDS[key],
                note,
            )
        )
    # Convergence.
    conv: dict[str, dict] = {}
    per = cfg.convergence_phase_steps
    for kind, _, spec, _seed, summ, extra in results:
        if kind == "convergence":
            settle = [
                checks.steps_to_settle(extra["k"], i * per, (i + 1) * per)
                for i in range(1, len(cfg.convergence_levels))
            ]
            conv[spec] = {
                "levels": list(cfg.convergence_levels),
                "phase_steps": per,
                "steps_to_settle": settle,
                "k_switches_per_1000": summ["k_switches_per_1000"],
                **extra,
            }
    for subj in subjects:
        st = conv.get(subj, {}).get("steps_to_settle")
        v = max(st) if st else None
        check_list.append(
            checks._rec(
                "steps_to_settle",
                subj,
                "steps",
                v,
                checks.THRESHOLDS["steps_to_settle"],
                None if v is None else v <= checks.THRESHOLDS["steps_to_settle"],
                f"concurrency {'->'.join(map(str, cfg.convergence_levels))}, per change {st}",
            )
        )
    counts = {s: sum(1 for c in check_list if c["status"] == s) for s in ("pass", "fail", "not_run")}
    return {
        "scenario": scn.raw or {"name": scn.name},
        "scenario_name": scn.name,
        "protocol": {
            **asdict(cfg),
            "points_run": [p[0] for p in points],
            "policies": pols,
            "thresholds": checks.THRESHOLDS,
            "prior": prior,
            "mode_twins": twins,
        },
        "server_modes": server_modes,
        "mode_comparison": comparison,
        "av_comparison": versus_av,
        "results": per_point,
        "checks": check_list,
        "check_counts": counts,
        "errors": errors,
        "regret": regret,
        "convergence": conv,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "numpy": np.__version__,
        },
        "provenance": provenance(),
        "wall_s": time.time() - t0,
        "quick": cfg.quick,
        "note": (
            "quick mode: fewer points, seeds and steps than docs/evaluation.md; the checks are indicative"
            if cfg.quick
            else "full docs/evaluation.md simulator protocol"
        ),
    }


def best_fixed(med_point: dict[str, dict]) -> tuple[str | None, float | None]:
    """The fixed K of highest median throughput at one point, and that throughput."""
    fixed = {p: m["throughput_tok_s"] for p, m in med_point.items() if p.startswith("fixed:")}
    fixed = {p: t for p, t in fixed.items() if t is not None}
    if not fixed:
        return None, None
    best = max(fixed, key=fixed.get)
    return best, fixed[best]


def _mode_comparison(med: dict[str, dict[str, dict]], twins: list[str], server_modes: dict) -> dict:
    """Each twinned policy in both modes, per point: throughput over the best fixed K.

    Informational (no threshold applies): what the governed server's graph mode costs.
    """
    out: dict = {}
    for twin in twins:
        base = split_mode(twin)[0]
        rows = {}
        for lab, pp in med.items():
            name, thr = best_fixed(pp)
            ratio = {}
            for p in (base, twin):
                t = (pp.get(p) or {}).get("throughput_tok_s")
                ratio[p] = t / thr if (t is not None and thr) else None
            rows[lab] = {"best_fixed": name, "vs_best_fixed": ratio}
        out[base] = {
            "twin": twin,
            "modes": {p: (server_modes.get(p) or {}).get("server_mode") for p in (base, twin)},
            "informational": True,
            "note": f"{twin} is {base} on vLLM's V1 runner (PIECEWISE graphs): no threshold check applies to it",
            "points": rows,
        }
    return out


#: Issue 48's targets against vLLM's adaptive verification, for the policy banditk recommends on a
#: GPU: at every point, and as the geometric mean over the scenario's points.
AV_TARGETS = {"each_point": 0.97, "geomean": 1.03}


def _av_comparison(per_point: dict[str, dict[str, dict]], subjects: list[str]) -> dict:
    """Each subject over vLLM's adaptive verification per point (medians over seeds, and the
    spread of the ratio seed by seed: common random numbers pair them), the geometric mean, and
    issue 48's targets; empty where adaptive verification did not run. Informational: the
    protocol's own peer checks (``throughput_vs_peer_*``) hold at their thresholds."""
    if not any(AV_SPEC in pp for pp in per_point.values()):
        return {}
    out: dict = {"peer": AV_SPEC, "targets": AV_TARGETS, "subjects": {}}
    for subj in subjects:
        ratios, spread = {}, {}
        for lab, pp in per_point.items():
            mine, theirs = (pp.get(subj) or {}).get("throughput_tok_s"), (pp.get(AV_SPEC) or {}).get("throughput_tok_s")
            if not mine or not theirs or mine.get("median") is None or not theirs.get("median"):
                continue
            ratios[lab] = mine["median"] / theirs["median"]
            seeds = [a / b for a, b in zip(mine["values"], theirs["values"], strict=False) if a is not None and b]
            spread[lab] = [min(seeds), max(seeds)] if seeds else None
        if not ratios:
            continue
        g, low = geomean(list(ratios.values())), min(ratios.values())
        out["subjects"][subj] = {
            "vs_av": ratios,
            "vs_av_by_seed": spread,
            "geomean": g,
            "worst": low,
            "worst_at": min(ratios, key=ratios.get),
            "meets_each_point": low >= AV_TARGETS["each_point"],
            "meets_geomean": g >= AV_TARGETS["geomean"],
        }
    return out


def geomean(x) -> float:
    """Geometric mean.

    >>> round(geomean([1.0, 4.0]), 6)
    2.0
    """
    x = np.asarray(x, dtype=float)
    return float(math.exp(np.log(x).mean()))

"""The report of one simulated run: throughput, TPOT/TTFT percentiles, switches, regret."""

from __future__ import annotations

import numpy as np

from banditk.sim.engine import Requests, Trace
from banditk.sim.oracle import regret_fraction
from banditk.switch_counts import switch_counts


def k_switches_per_1000(k: np.ndarray) -> float:
    """Changes of K between consecutive decided steps, per 1,000 decided steps.

    >>> k_switches_per_1000(np.array([2, 2, -1, 3, 3]))
    250.0
    """
    k = np.asarray(k)
    k = k[k >= 0]
    if k.size < 2:
        return 0.0
    return float(np.count_nonzero(np.diff(k)) * 1000.0 / k.size)


def trace_switches(trace: Trace, start: int = 0, stop: int | None = None) -> dict:
    """The protocol's switch counts (:mod:`banditk.switch_counts`) over steps ``start:stop``."""
    sl = slice(start, stop)
    return switch_counts(trace.k[sl], trace.bucket[sl], trace.prefill[sl] > 0)


def _pct(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) if x.size else None


def summarize(trace: Trace, done: Requests, *, warmup: int, policy: str, scenario: str) -> dict:
    """Metrics over the steps after ``warmup`` (regret over every step).

    TPOT per request is (e2e - TTFT) / (output tokens - 1) for requests that
    finished after warm-up; throughput is output tokens per simulated second.
    """
    n = trace.duration.size
    w = min(warmup, max(n - 1, 0))
    dur = trace.duration[w:]
    t = float(dur.sum())
    toks = float(trace.tokens[w:].sum())
    step = np.asarray(done.step)
    sel = step >= w
    arr = np.asarray(done.arrival)[sel]
    first = np.asarray(done.first)[sel]
    fin = np.asarray(done.finish)[sel]
    out = np.asarray(done.out)[sel]
    multi = out > 1
    tpot = (fin[multi] - first[multi]) / (out[multi] - 1)
    ttft = first - arr
    ks = trace.k[w:]
    decided = ks >= 0
    sw = trace_switches(trace, w)
    drafted = float((trace.n_dec[w:][decided].astype(float) * ks[decided]).sum())
    return {
        "policy": policy,
        "scenario": scenario,
        "steps": int(n),
        "warmup_steps": int(w),
        "throughput_tok_s": toks / t if t > 0 else 0.0,
        "tpot_p50_s": _pct(tpot, 50),
        "tpot_p95_s": _pct(tpot, 95),
        "tpot_p99_s": _pct(tpot, 99),
        "ttft_p99_s": _pct(ttft, 99),
        "k_switches_per_1000": sw["k_switches_per_1000"],
        "oscillations_per_1000": sw["oscillations_per_1000"],
        "change_causes": sw["change_causes"],
        "mean_k": float(ks[decided].mean()) if decided.any() else 0.0,
        "regret_fraction": regret_fraction(trace.expected_tokens, trace.oracle_tokens),
        "regret_tokens": float(np.sum(trace.oracle_tokens - trace.expected_tokens)),
        "oracle_tokens": float(np.sum(trace.oracle_tokens)),
        "requests_finished": int(sel.sum()),
        "preemptions": int(trace.preemptions.sum()),
        "simulated_s": float(trace.duration.sum()),
        "mean_batch": float(trace.n_dec[w:].mean()) if n > w else 0.0,
        # Drafts verified over drafts proposed (1 unless a per-request policy cut them).
        "verified_share": float(trace.verified[w:].sum() / drafted) if drafted > 0 else 1.0,
    }
